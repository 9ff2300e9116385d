//! The fleet summary and the worker list.

use std::collections::BTreeMap;

use e2fleet_proto::api::WorkerState;
use e2fleet_proto::api::status::{
    AGGREGATE_WHAT, AggregateRate, FleetStatus, MinuteSample, PER_CORE_WHAT, PerCoreRates,
    RateGroup, UnitEvents, WorkerCounts, WorkerStatus, paused_now,
};

use super::{RATE_WINDOW_MS, worker_state};
use crate::fleet::{Fleet, FleetError};
use crate::store::{RateSample, WorkerRecord};

/// How far back the per-core rates and the per-minute series look.
const HISTORY_MS: i64 = 3_600_000;

/// Per-core rate samples grouped by a key, with their medians.
fn grouped_medians(samples: &[RateSample], key: impl Fn(&RateSample) -> String) -> Vec<RateGroup> {
    let mut groups: BTreeMap<String, Vec<&RateSample>> = BTreeMap::new();
    for s in samples {
        groups.entry(key(s)).or_default().push(s);
    }
    groups
        .into_iter()
        .map(|(key, group)| RateGroup {
            key,
            results: group.len() as u64,
            median_nodes_per_s: RateSample::per_core(group),
        })
        .collect()
}

/// A worker as the operator API and the dashboard show it: its pause reason only while
/// it is seen lately ([`paused_now`]), so every reader shows the same.
fn worker_status(w: WorkerRecord, state: WorkerState) -> WorkerStatus {
    WorkerStatus {
        id: w.id,
        account: w.account_id,
        host: w.host,
        engine_build: w.engine_build,
        class_id: w.class_id,
        registered_ms: w.registered_ms,
        last_seen_ms: w.last_seen_ms,
        per_core_rate: w.per_core_rate,
        threads: w.threads,
        paused: paused_now(state, &w.paused).unwrap_or_default().to_string(),
        network_wait: w.network_wait,
        round_trip_ms: w.round_trip_ms,
        units_done: w.units_done,
        errors: w.errors,
        quarantined: w.quarantined,
        leases_held: w.leases_held,
        state,
    }
}

impl Fleet {
    /// The fleet summary.
    pub async fn fleet_status(&self) -> Result<FleetStatus, FleetError> {
        let now = self.now();
        let lease_ms = self.config.lease.as_millis() as i64;
        self.store
            .read(move |tx| {
                let mut workers = WorkerCounts::default();
                for w in tx.list_workers()? {
                    let state = worker_state(&w, now, lease_ms);
                    workers.add(state);
                    if paused_now(state, &w.paused).is_some() {
                        workers.paused += 1;
                    }
                }
                let samples = tx.rate_samples(None, now - HISTORY_MS)?;
                let received = tx.nodes_since(None, now - RATE_WINDOW_MS)?;
                // one sample per minute of the last hour: nodes received and unit events
                let mut minutes: BTreeMap<i64, MinuteSample> = BTreeMap::new();
                let sample = |m: i64| MinuteSample {
                    minute_unix_ms: m * 60_000,
                    ..MinuteSample::default()
                };
                for r in tx.result_minutes(now - HISTORY_MS)? {
                    let s = minutes.entry(r.minute).or_insert_with(|| sample(r.minute));
                    s.raw_nodes_per_s = r.raw_nodes as f64 / 60.0;
                    s.verified_nodes_per_s = r.verified_nodes as f64 / 60.0;
                    s.units_completed = r.results;
                }
                for l in tx.lease_minutes(now - HISTORY_MS)? {
                    let s = minutes.entry(l.minute).or_insert_with(|| sample(l.minute));
                    s.leases_created = l.created;
                    s.leases_expired = l.expired;
                }
                let (leased, expired) = tx.lease_counts_since(now - 60_000)?;
                let window_s = RATE_WINDOW_MS as f64 / 1000.0;
                Ok(FleetStatus {
                    workers,
                    aggregate_nodes_per_s: AggregateRate {
                        what: AGGREGATE_WHAT.into(),
                        raw: received.raw as f64 / window_s,
                        verified: received.verified as f64 / window_s,
                    },
                    aggregate_series: minutes.into_values().collect(),
                    per_core_nodes_per_s: PerCoreRates {
                        what: PER_CORE_WHAT.into(),
                        overall: RateSample::per_core(&samples),
                        by_cpu_model: grouped_medians(&samples, |s| s.cpu_model.clone()),
                        by_engine_kind: grouped_medians(&samples, |s| s.engine_kind.to_string()),
                        by_host: grouped_medians(&samples, |s| s.hostname.clone()),
                    },
                    units_last_minute: UnitEvents {
                        leased,
                        completed: tx.results_since(now - 60_000)?,
                        expired,
                    },
                    wrong_results: tx.wrong_results()?,
                })
            })
            .await
    }

    /// Every worker, by host name.
    pub async fn list_workers(&self) -> Result<Vec<WorkerStatus>, FleetError> {
        let now = self.now();
        let lease_ms = self.config.lease.as_millis() as i64;
        let workers = self.store.read(|tx| tx.list_workers()).await?;
        Ok(workers
            .into_iter()
            .map(|w| {
                let state = worker_state(&w, now, lease_ms);
                worker_status(w, state)
            })
            .collect())
    }
}
