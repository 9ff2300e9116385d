//! Heartbeats: a worker keeps its leases alive and hears which to drop or stop.
//!
//! # Two ways
//! Most heartbeats only extend leases that are active and tell the worker nothing new.
//! Those run beside report batches, under the lease batches' lock
//! ([`WriteLock::Leases`]): the extension changes a lease's deadline only, which no report
//! is decided on, and on PostgreSQL a lease or worker row that a report batch holds is
//! skipped, never waited for, so a heartbeat and a report batch never wait on each other.
//! A heartbeat that finds anything else (a lease it names no longer active, or held by a
//! report batch; a lease on a unit another run decided) takes the single way: one write
//! that excludes every other (it revives, supersedes and returns units, which reports are
//! decided against). The first way's extensions are what the second would write, so
//! taking both costs a write, never a count.
//!
//! # Why
//! A worker heartbeats every third of its lease (20 s with the default 60 s lease): a
//! fleet of 1,000 workers sends ~50 a second. Each one excluding every other write made
//! lease and report batches wait for it on PostgreSQL, where the two kinds otherwise run
//! side by side: with the load bench's 1,000 workers heartbeating every 20 s, 1,500-2,010
//! completed units a second in six runs (~2,000 without heartbeats), lease and report p99
//! 130-470 ms; beside the report batches 2,095-2,171, lease p99 77-111 ms
//! (docs/benchmarks.md).

use e2fleet_proto::api::{Heartbeat, LeaseId, WorkerId};
use tracing::info;

use super::policy::{MAX_LEASES_PER_CALL, MAX_PAUSED_CHARS};
use super::{Fleet, FleetError};
use crate::store::{Seen, Tx, WorkerRecord, WriteLock};

/// What a heartbeat answers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BeatAnswer {
    /// The leases' new deadline, ms since the epoch.
    pub deadline_ms: i64,
    /// Leases to drop without a report.
    pub stop: Vec<LeaseId>,
    /// Leases to stop now at their exact cursor and report: the coordinator splits the
    /// rest of their units for idle threads.
    pub yield_now: Vec<LeaseId>,
}

/// What a heartbeat writes about its worker (labels only: they decide nothing).
struct Told {
    rate: Option<(f64, u32)>,
    paused: String,
    link: (f64, f64),
}

impl Told {
    fn seen(&self) -> Seen<'_> {
        Seen {
            rate: self.rate,
            paused: Some(&self.paused),
            link: Some(self.link),
            ..Seen::default()
        }
    }
}

impl Fleet {
    /// Extends a worker's leases; returns the new deadline, the leases it must drop and
    /// those it should stop at their cursor and report.
    ///
    /// A lease that expired while its worker was away (a laptop asleep, a partition) comes
    /// back to life when nothing happened to its unit meanwhile: the worker carries on
    /// where it was. One whose unit went to another run, changed, or was decided is
    /// dropped by the worker without a report (a stopped run could not be compared with
    /// anything); so is an active lease whose unit another run decided.
    pub async fn heartbeat(
        &self,
        worker: &WorkerRecord,
        beat: &Heartbeat,
    ) -> Result<BeatAnswer, FleetError> {
        let now = self.now();
        let deadline = now + self.config.lease.as_millis() as i64;
        let worker_id = worker.id;
        let lease_ids: Vec<LeaseId> = beat
            .leases
            .iter()
            .take(MAX_LEASES_PER_CALL)
            .map(|(id, _)| *id)
            .collect();
        let told = Told {
            rate: beat
                .per_core_rate
                .is_finite()
                .then_some((beat.per_core_rate.max(0.0), beat.threads)),
            // bounded: a client cannot grow a row
            paused: beat.paused.chars().take(MAX_PAUSED_CHARS).collect(),
            link: (beat.network_wait, beat.round_trip_ms),
        };
        // beside report batches when it only extends (see the module docs)
        let ids = lease_ids.clone();
        let (beside, told) = self
            .store
            .write_with(WriteLock::Leases, move |tx| {
                let answer = extend_only(tx, worker_id, &ids, (deadline, now), &told);
                answer.map(|a| (a, told))
            })
            .await?;
        if let Some(answer) = beside {
            self.beats_beside_reports
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Ok(answer);
        }
        self.store
            .write(move |tx| {
                let mut stop = Vec::new();
                let mut revived = 0usize;
                for id in lease_ids {
                    if tx.extend_lease(id, worker_id, deadline)? {
                        continue;
                    }
                    match tx.revive_lease(id, worker_id, deadline)? {
                        Some(unit) => {
                            tx.lease_taken(unit)?;
                            revived += 1;
                        }
                        None => stop.push(id),
                    }
                }
                for (id, unit) in tx.supersede_decided_leases(worker_id)? {
                    tx.lease_returned(unit)?;
                    stop.push(id);
                }
                if revived > 0 {
                    info!(%worker_id, revived, "expired leases revived: their units waited for their worker");
                }
                tx.worker_seen(worker_id, now, &told.seen())?;
                let mut yield_now = tx.yields_of_worker(worker_id)?;
                yield_now.retain(|id| !stop.contains(id));
                Ok(BeatAnswer {
                    deadline_ms: deadline,
                    stop,
                    yield_now,
                })
            })
            .await
    }
}

/// The heartbeat beside report batches: its answer when every lease it names was
/// extended and none of the worker's active leases is on a decided unit (then nothing is
/// stopped, revived or superseded); `None` otherwise, after writing nothing but
/// extensions the single way writes too.
fn extend_only(
    tx: &mut dyn Tx,
    worker: WorkerId,
    leases: &[LeaseId],
    (deadline, now): (i64, i64),
    told: &Told,
) -> Result<Option<BeatAnswer>, FleetError> {
    if tx.holds_decided_leases(worker)? {
        return Ok(None);
    }
    if tx.extend_leases_beside_reports(worker, leases, deadline)? < leases.len() {
        return Ok(None);
    }
    tx.worker_seen_beside_reports(worker, now, &told.seen())?;
    Ok(Some(BeatAnswer {
        deadline_ms: deadline,
        stop: Vec::new(),
        yield_now: tx.yields_of_worker(worker)?,
    }))
}
