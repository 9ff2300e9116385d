//! `/metrics`: the Prometheus text exposition of the same read models the API serves —
//! both rates (separate metrics, never derived from each other), workers by state, units
//! and leases of the last minute, wrong results, per-job progress, the writer's counters.

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use e2fleet_proto::api::status::RateGroup;

use super::errors::http_error;
use crate::fleet::Fleet;
use crate::fleet::call_times::{BOUNDS_US, Histogram};

struct Exposition(String);

impl Exposition {
    fn metric(&mut self, name: &str, help: &str, kind: &str, samples: &[(String, f64)]) {
        let _ = write!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
        for (labels, v) in samples {
            let _ = writeln!(self.0, "{name}{labels} {v}");
        }
    }
}

/// A label value with the characters Prometheus reserves replaced.
fn label(v: &str) -> String {
    v.replace(['"', '\\', '\n'], "_")
}

fn groups(out: &mut Vec<(String, f64)>, key: &str, groups: &[RateGroup]) {
    for g in groups {
        out.push((
            format!("{{{key}=\"{}\"}}", label(&g.key)),
            g.median_nodes_per_s.unwrap_or(0.0),
        ));
    }
}

/// A histogram metric, one series per `(label value, counts)`.
fn histogram(
    out: &mut Exposition,
    name: &str,
    help: &str,
    key: &str,
    series: &[(&str, Histogram)],
) {
    let _ = write!(out.0, "# HELP {name} {help}\n# TYPE {name} histogram\n");
    for (value, h) in series {
        let mut below = 0;
        for (i, n) in h.buckets.iter().enumerate() {
            below += n;
            let le = BOUNDS_US
                .get(i)
                .map_or("+Inf".to_string(), |us| format!("{}", *us as f64 / 1e6));
            let _ = writeln!(
                out.0,
                "{name}_bucket{{{key}=\"{value}\",le=\"{le}\"}} {below}"
            );
        }
        let _ = writeln!(
            out.0,
            "{name}_sum{{{key}=\"{value}\"}} {}",
            h.sum_us as f64 / 1e6
        );
        let _ = writeln!(out.0, "{name}_count{{{key}=\"{value}\"}} {below}");
    }
}

/// `e2fleet_call_seconds`: how long calls took to answer, a histogram per kind of call
/// ([`crate::fleet::call_times`]); `e2fleet_batch_wait_seconds` and
/// `e2fleet_batch_write_seconds`: where the lease and report calls spent it in their
/// batches (`fleet/batches.rs`).
fn calls(out: &mut Exposition, fleet: &Fleet) {
    let calls: Vec<(&str, Histogram)> = fleet
        .call_times
        .snapshot()
        .into_iter()
        .map(|(call, h)| (call.label(), h))
        .collect();
    histogram(
        out,
        "e2fleet_call_seconds",
        "Seconds from a call's arrival to its answer, inside the coordinator (gate, body, queue, database), by kind of call.",
        "call",
        &calls,
    );
    let (leases, reports) = fleet.batch_times();
    histogram(
        out,
        "e2fleet_batch_wait_seconds",
        "Seconds a lease request or report waited to be taken into a batch, by queue.",
        "queue",
        &[("lease", leases.waited), ("report", reports.waited)],
    );
    histogram(
        out,
        "e2fleet_batch_write_seconds",
        "Seconds a batch of lease requests or reports took to write (the writer's queue and the transaction), by queue.",
        "queue",
        &[("lease", leases.written), ("report", reports.written)],
    );
}

/// `GET /metrics`
pub async fn metrics(State(fleet): State<Arc<Fleet>>) -> Response {
    let (status, jobs) = match (fleet.fleet_status().await, fleet.list_jobs().await) {
        (Ok(f), Ok(j)) => (f, j),
        (Err(e), _) | (_, Err(e)) => return http_error(e),
    };
    let mut out = Exposition(String::new());
    let w = &status.workers;
    out.metric(
        "e2fleet_workers",
        "Workers by state.",
        "gauge",
        &[
            ("{state=\"online\"}".into(), w.online as f64),
            ("{state=\"idle\"}".into(), w.idle as f64),
            ("{state=\"offline\"}".into(), w.offline as f64),
            ("{state=\"quarantined\"}".into(), w.quarantined as f64),
        ],
    );
    out.metric(
        "e2fleet_workers_paused",
        "Online or idle workers whose engines are paused (by their owner, on battery, outside their hours, ...).",
        "gauge",
        &[(String::new(), w.paused as f64)],
    );
    let agg = &status.aggregate_nodes_per_s;
    out.metric(
        "e2fleet_aggregate_nodes_per_second",
        "Fleet aggregate: nodes received per wall-clock second over the last 60 s (not a per-core figure).",
        "gauge",
        &[
            ("{kind=\"raw\"}".into(), agg.raw),
            ("{kind=\"verified\"}".into(), agg.verified),
        ],
    );
    let per_core = &status.per_core_nodes_per_s;
    let mut samples = vec![(
        "{group=\"all\"}".to_string(),
        per_core.overall.unwrap_or(0.0),
    )];
    groups(&mut samples, "engine_kind", &per_core.by_engine_kind);
    groups(&mut samples, "cpu_model", &per_core.by_cpu_model);
    out.metric(
        "e2fleet_per_core_nodes_per_second",
        "Median nodes per engine-thread second over results of the last hour (one core, not the fleet).",
        "gauge",
        &samples,
    );
    out.metric(
        "e2fleet_store_info",
        "The coordinator's database: sqlite (one coordinator per file) or postgres (any number on one database).",
        "gauge",
        &[(format!("{{store=\"{}\"}}", fleet.store_backend()), 1.0)],
    );
    out.metric(
        "e2fleet_upkeep_leader",
        "1 when this coordinator runs the once-only upkeep (the archiver): always on SQLite, the holder of the upkeep lock on PostgreSQL.",
        "gauge",
        &[(String::new(), if fleet.does_upkeep() { 1.0 } else { 0.0 })],
    );
    let ws = fleet.writer_stats();
    for (name, help, value) in [
        (
            "e2fleet_writer_jobs_total",
            "Write jobs (leases, reports, heartbeats, ...) run by the writer thread.",
            ws.jobs as f64,
        ),
        (
            "e2fleet_writer_queued_seconds_total",
            "Seconds write jobs spent queued for the writer thread, summed.",
            ws.queued_us as f64 / 1e6,
        ),
        (
            "e2fleet_writer_running_seconds_total",
            "Seconds write jobs spent running, summed.",
            ws.running_us as f64 / 1e6,
        ),
        (
            "e2fleet_writer_commits_total",
            "Transactions committed by the writer thread (one per batch of jobs).",
            ws.batches as f64,
        ),
    ] {
        out.metric(name, help, "counter", &[(String::new(), value)]);
    }
    calls(&mut out, &fleet);
    let refused = |reasons: Vec<(&'static str, u64)>| {
        reasons
            .into_iter()
            .map(|(why, n)| (format!("{{reason=\"{why}\"}}"), n as f64))
            .collect::<Vec<_>>()
    };
    out.metric(
        "e2fleet_refused_connections_total",
        "Connections refused or closed by the accept loop, by reason (too fast or too many from an address, every slot taken, silent, TLS failed, never showed a token).",
        "counter",
        &refused(fleet.refusals.connections().into_iter().map(|(c, n)| (c.label(), n)).collect()),
    );
    out.metric(
        "e2fleet_refused_calls_total",
        "Calls refused by the gRPC gate before any handler ran, by reason (shut-out address, bad token, too many without a token in flight, submissions busy).",
        "counter",
        &refused(fleet.refusals.calls().into_iter().map(|(c, n)| (c.label(), n)).collect()),
    );
    let u = &status.units_last_minute;
    out.metric(
        "e2fleet_units_last_minute",
        "Units leased, completed and expired in the last minute.",
        "gauge",
        &[
            ("{event=\"leased\"}".into(), u.leased as f64),
            ("{event=\"completed\"}".into(), u.completed as f64),
            ("{event=\"expired\"}".into(), u.expired as f64),
        ],
    );
    out.metric(
        "e2fleet_wrong_results_total",
        "Results marked wrong (cross-check losers and failed verifications).",
        "counter",
        &[(String::new(), status.wrong_results as f64)],
    );
    let mut nodes = Vec::new();
    let mut units = Vec::new();
    for j in &jobs {
        let id = j.job_id;
        nodes.push((format!("{{job=\"{id}\"}}"), j.nodes_total as f64));
        for (state, n) in [
            ("open", j.units.open),
            ("leased", j.units.leased),
            ("done", j.units.done),
        ] {
            units.push((format!("{{job=\"{id}\",state=\"{state}\"}}"), n as f64));
        }
    }
    out.metric(
        "e2fleet_job_nodes",
        "Exact nodes counted so far per job.",
        "gauge",
        &nodes,
    );
    out.metric(
        "e2fleet_job_units",
        "Units per job and state.",
        "gauge",
        &units,
    );
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        out.0,
    )
        .into_response()
}
