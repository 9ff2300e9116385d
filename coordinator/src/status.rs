//! Read models: job status, fleet status and worker lists, as the JSON documents the CLI,
//! the gRPC operator API and the dashboard all serve.
//!
//! Two rates are kept apart everywhere: `per_core_nodes_per_s` is the median over
//! accepted results of committed nodes / engine seconds (how fast one engine thread
//! walks); `aggregate_nodes_per_s` is nodes received per wall-clock second across the
//! fleet over a window. Neither is ever computed from the other.

use std::collections::BTreeMap;

use e2fleet_engine::UnitResult;
use e2fleet_engine::unit::add_counts;
use serde_json::{Value, json};
use sqlx::SqliteConnection;

use crate::fleet::{Fleet, FleetError};
use crate::store::jobs::JobRow;
use crate::store::{StoreError, jobs, leases, parse_json, results, units, workers};

/// Window of the aggregate rate.
pub const RATE_WINDOW_MS: i64 = 60_000;

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

/// Per-core rate samples grouped by a key, with their medians.
fn grouped_medians(
    samples: &[(i64, f64, String, String, String)],
    key: impl Fn(&(i64, f64, String, String, String)) -> String,
) -> Value {
    let mut groups: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for s in samples {
        groups.entry(key(s)).or_default().push(s.0 as f64 / s.1);
    }
    Value::Array(
        groups
            .into_iter()
            .map(|(k, v)| json!({"key": k, "results": v.len(), "median_nodes_per_s": median(v)}))
            .collect(),
    )
}

impl Fleet {
    /// The status document of one job.
    pub async fn job_status(&self, job_id: &str) -> Result<Value, FleetError> {
        let mut c = self.store.pool().acquire().await?;
        let job = jobs::get(&mut c, job_id)
            .await?
            .ok_or_else(|| FleetError::NotFound(format!("job {job_id}")))?;
        job_document(&mut c, &job, (self.clock)()).await
    }

    /// What the dashboard needs to draw any board of a job: size, every piece's colours
    /// (URDL at rotation 0), the hints and the fill order.
    pub async fn job_puzzle(&self, job_id: &str) -> Result<Value, FleetError> {
        let ctx = self.context(job_id).await?;
        let p = &ctx.puzzle;
        Ok(json!({
            "job_id": job_id,
            "name": p.name(),
            "width": p.width(),
            "height": p.height(),
            "pieces": p.pieces(),
            "hints": p.hints(),
            "fill_order": ctx.order.cells(),
        }))
    }

    /// Status documents of every job.
    pub async fn list_jobs(&self) -> Result<Vec<Value>, FleetError> {
        let mut c = self.store.pool().acquire().await?;
        let mut out = Vec::new();
        for job in jobs::list(&mut c).await? {
            out.push(job_document(&mut c, &job, (self.clock)()).await?);
        }
        Ok(out)
    }

    /// The fleet summary.
    pub async fn fleet_status(&self) -> Result<Value, FleetError> {
        let now = (self.clock)();
        let lease_ms = self.config.lease.as_millis() as i64;
        let mut c = self.store.pool().acquire().await?;
        let all = workers::list(&mut c).await?;
        let (mut online, mut idle, mut offline, mut quarantined) = (0, 0, 0, 0);
        for w in &all {
            match worker_state(w, now, lease_ms) {
                "quarantined" => quarantined += 1,
                "offline" => offline += 1,
                "idle" => idle += 1,
                _ => online += 1,
            }
        }
        let samples = results::rate_samples(&mut c, None, now - 3_600_000).await?;
        let (raw, verified) = results::nodes_since(&mut c, None, now - RATE_WINDOW_MS).await?;
        // one row per minute of the last hour: nodes received (raw / verified) and unit events
        let mut minutes: BTreeMap<i64, [i64; 5]> = BTreeMap::new();
        for (m, raw, verified, count) in results::per_minute(&mut c, now - 3_600_000).await? {
            let row = minutes.entry(m).or_default();
            (row[0], row[1], row[2]) = (raw, verified, count);
        }
        for (m, created, expired) in leases::per_minute(&mut c, now - 3_600_000).await? {
            let row = minutes.entry(m).or_default();
            (row[3], row[4]) = (created, expired);
        }
        let series: Vec<Value> = minutes
            .into_iter()
            .map(|(m, [raw, verified, completed, leased, expired])| {
                json!({
                    "minute_unix_ms": m * 60_000,
                    "raw_nodes_per_s": raw as f64 / 60.0,
                    "verified_nodes_per_s": verified as f64 / 60.0,
                    "units_completed": completed,
                    "leases_created": leased,
                    "leases_expired": expired,
                })
            })
            .collect();
        let (leased, expired) = leases::recent_counts(&mut c, now - 60_000).await?;
        let done_last_minute: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM results WHERE received_ms >= ?")
                .bind(now - 60_000)
                .fetch_one(&mut *c)
                .await
                .map_err(StoreError::from)?;
        Ok(json!({
            "workers": {"total": all.len(), "online": online, "idle": idle, "offline": offline, "quarantined": quarantined},
            "aggregate_nodes_per_s": {
                "what": "nodes received per wall-clock second across the whole fleet, last 60 s",
                "raw": raw as f64 / (RATE_WINDOW_MS as f64 / 1000.0),
                "verified": verified as f64 / (RATE_WINDOW_MS as f64 / 1000.0),
            },
            "aggregate_series": series,
            "per_core_nodes_per_s": {
                "what": "median over results of committed nodes / engine-thread seconds, last hour",
                "overall": median(samples.iter().map(|s| s.0 as f64 / s.1).collect()),
                "by_cpu_model": grouped_medians(&samples, |s| s.3.clone()),
                "by_engine_kind": grouped_medians(&samples, |s| s.4.clone()),
                "by_host": grouped_medians(&samples, |s| s.2.clone()),
            },
            "units_last_minute": {"leased": leased, "completed": done_last_minute, "expired": expired},
            "wrong_results": results::wrong_count(&mut c).await?,
        }))
    }

    /// All workers as JSON.
    pub async fn list_workers(&self) -> Result<Value, FleetError> {
        let now = (self.clock)();
        let lease_ms = self.config.lease.as_millis() as i64;
        let mut c = self.store.pool().acquire().await?;
        let list = workers::list(&mut c).await?;
        Ok(Value::Array(
            list.into_iter()
                .map(|w| {
                    let state = worker_state(&w, now, lease_ms);
                    let mut v = serde_json::to_value(&w).expect("worker serialises");
                    v["state"] = json!(state);
                    v
                })
                .collect(),
        ))
    }
}

/// A worker's state as shown everywhere: quarantined, offline (not seen for two lease
/// periods), idle (seen, holding no lease) or online (seen, working).
fn worker_state(w: &workers::WorkerRow, now: i64, lease_ms: i64) -> &'static str {
    if w.quarantined {
        "quarantined"
    } else if now - w.last_seen_ms > 2 * lease_ms {
        "offline"
    } else if w.leases_held == 0 {
        "idle"
    } else {
        "online"
    }
}

async fn job_document(
    c: &mut SqliteConnection,
    job: &JobRow,
    now: i64,
) -> Result<Value, FleetError> {
    let enumeration = job.counts("enumeration")?;
    let split = job.counts("split")?;
    let accepted = job.counts("accepted")?;
    let mut total = enumeration.clone();
    add_counts(&mut total, &split);
    add_counts(&mut total, &accepted);
    let states: BTreeMap<String, i64> = units::counts_by_state(c, &job.id)
        .await?
        .into_iter()
        .collect();
    let mut solutions = Vec::new();
    for r in results::with_solutions(c, &job.id, 20).await? {
        let res: UnitResult = parse_json(&r.result_json, "result")?;
        solutions.extend(res.solutions);
    }
    solutions.truncate(100);
    let deepest = match results::deepest(c, &job.id).await? {
        Some(r) => {
            let res: UnitResult = parse_json(&r.result_json, "result")?;
            json!({"depth": res.max_depth, "board": res.deepest})
        }
        None => json!({"depth": 0, "board": []}),
    };
    let samples = results::rate_samples(c, Some(&job.id), 0).await?;
    let breakdown: Vec<Value> = results::breakdown(c, &job.id)
        .await?
        .into_iter()
        .map(|(verdict, kind, build, n, nodes)| json!({"verdict": verdict, "engine_kind": kind, "engine_build": build, "results": n, "nodes": nodes}))
        .collect();
    let end = job.finished_ms.unwrap_or(now);
    // the window starts when work started (first lease), not at submission
    let started = leases::first_for_job(c, &job.id)
        .await?
        .unwrap_or(job.created_ms);
    let window_start = (end - RATE_WINDOW_MS).max(started);
    let (raw, verified) = results::nodes_since(c, Some(&job.id), window_start).await?;
    let seconds = ((end - window_start) as f64 / 1000.0).max(1.0);
    let done = *states.get("done").unwrap_or(&0);
    let open = states.get("open").unwrap_or(&0) + states.get("busy").unwrap_or(&0);
    let accepted_nodes: u64 = accepted.iter().sum();
    let estimate = if done > 0 && open > 0 {
        json!({
            "remaining_nodes": accepted_nodes as f64 / done as f64 * open as f64,
            "how": "mean accepted nodes per finished unit x unfinished units (a rough guide: subtrees vary by orders of magnitude)",
        })
    } else {
        Value::Null
    };
    Ok(json!({
        "job_id": job.id,
        "name": job.name,
        "state": job.state,
        "order": job.order_spec,
        "depths": job.depths,
        "split_depth": job.split_depth,
        "budget": job.budget,
        "replicas": job.replicas,
        "spot_check": job.spot_check,
        "created_ms": job.created_ms,
        "finished_ms": job.finished_ms,
        "units": {"open": states.get("open").unwrap_or(&0), "leased": states.get("busy").unwrap_or(&0), "done": done, "cancelled": states.get("cancelled").unwrap_or(&0)},
        "nodes_total": total.iter().sum::<u64>(),
        "nodes_by_depth": total,
        "enumeration_nodes": enumeration.iter().sum::<u64>(),
        "split_nodes": split.iter().sum::<u64>(),
        "unit_nodes": accepted_nodes,
        "solutions_count": job.enumeration_solutions + job.accepted_solutions,
        "solutions": solutions,
        "deepest": deepest,
        "conservation_ok": job.conservation_ok,
        "per_core_nodes_per_s": median(samples.iter().map(|s| s.0 as f64 / s.1).collect()),
        "aggregate_nodes_per_s": verified as f64 / seconds,
        "aggregate_raw_nodes_per_s": raw as f64 / seconds,
        "estimate": estimate,
        "results": breakdown,
    }))
}
