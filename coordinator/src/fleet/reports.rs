//! Reports: recording each result exactly once, after verifying it. A report is one store
//! write; the CPU work (digest, encoding, verification) happens before it, in parallel,
//! against the unit as it was leased, so the writer only compares and writes. Deciding
//! the unit is [`super::quorum`]'s.

use std::sync::Arc;

use e2fleet_engine::Unit;
use e2fleet_engine::unit::{StopReason, result_digest};
use e2fleet_proto::api::{JobState, Report, ReportOutcome, ReportStatus, ResultVerdict};
use tracing::{instrument, warn};

use super::checks::check_result;
use super::policy::BEST_BOARDS;
use super::quorum::decides_alone;
use super::{Fleet, FleetError, LeasedUnit, finish_if_done};
use crate::store::{
    LeaseState, NewResult, ReportView, ResultBody, ResultCore, ResultId, ResultRecord, Standing,
    Tx, UnitRecord, UnitState, WorkerRecord,
};

/// A report verified before its write, with what it was verified against.
pub(super) struct Prechecked {
    budget: Option<u64>,
    unit: Unit,
    check: Result<(), String>,
}

impl Fleet {
    /// Records one result, exactly once, and decides its unit when a quorum agrees.
    #[instrument(skip_all, fields(worker_id = %worker.id, lease_id = %report.lease_id, unit_id = %report.unit_id))]
    pub async fn report(
        self: &Arc<Self>,
        worker: &WorkerRecord,
        report: Report,
    ) -> Result<ReportOutcome, FleetError> {
        let now = self.now();
        let digest = result_digest(&report.result);
        let body = ResultBody::encode(&report.result);
        let folded = ResultCore::encode(&report.result);
        let pre = self.precheck(&report).await?;
        // drawn here, from the CSPRNG: whether a trusted volunteer's result is run again
        // by another account (nobody can tell in advance which ones are)
        let recheck = rand::random::<f64>() < self.config.trust.recheck;
        let (fleet, worker) = (self.clone(), worker.clone());
        let outcome = self
            .store
            .write(move |tx| {
                fleet.report_tx(
                    tx,
                    &worker,
                    report,
                    (digest, body, folded),
                    (pre, recheck),
                    now,
                )
            })
            .await?;
        tracing::info!(status = %outcome.status, "result reported");
        Ok(outcome)
    }

    /// Verifies a report against its unit as granted (remembered at lease time, or read)
    /// before the write; `None` for an unknown lease (the write path answers that).
    async fn precheck(&self, report: &Report) -> Result<Option<Prechecked>, FleetError> {
        let lease_id = report.lease_id;
        let LeasedUnit {
            job_id,
            budget,
            unit,
        } = match self.recall_lease(lease_id) {
            Some(hint) => hint,
            None => {
                // not granted by this process (a restart) or reported twice: read it
                let Some((lease, unit)) = self
                    .store
                    .read(move |tx| tx.lease_with_unit(lease_id))
                    .await?
                else {
                    return Ok(None);
                };
                LeasedUnit {
                    job_id: unit.job_id,
                    budget: lease.budget,
                    unit: unit.unit,
                }
            }
        };
        let ctx = self.context(job_id).await?;
        let check = check_result(&ctx, &unit, budget, &report.result);
        Ok(Some(Prechecked {
            budget,
            unit,
            check,
        }))
    }

    fn report_tx(
        &self,
        tx: &mut dyn Tx,
        worker: &WorkerRecord,
        report: Report,
        (digest, body, folded): (String, ResultBody, ResultCore),
        (pre, recheck): (Option<Prechecked>, bool),
        now: i64,
    ) -> Result<ReportOutcome, FleetError> {
        let ReportView {
            lease,
            existing: _,
            unit,
            job,
            account,
            kept_boards,
            others_valid,
        } = match report_lease(tx, worker, &report, &digest)? {
            Ok(view) => view,
            Err(answer) => return Ok(answer),
        };
        // everything that can refuse the report is decided before the first write (a
        // failure after one would roll back the writer's whole batch)
        let check = match pre {
            // the unit is as it was when the report was checked (it is only rewritten
            // by a split, which needs it unleased: rare, but then check again here)
            Some(p) if p.budget == lease.budget && p.unit == unit.unit => p.check,
            _ => {
                let ctx = self.context_tx(tx, unit.job_id)?;
                check_result(&ctx, &unit.unit, lease.budget, &report.result)
            }
        };
        let lease_was_active = lease.state == LeaseState::Active;
        tx.set_lease_state(lease.id, LeaseState::Reported)?;
        let Some(account) = account.filter(|a| a.active()) else {
            if lease_was_active {
                tx.lease_returned(unit.id)?;
            }
            return Ok(ReportOutcome {
                status: ReportStatus::Rejected,
                detail: format!(
                    "the account {} is revoked or quarantined: its results do not count",
                    worker.account_id
                ),
            });
        };
        let standing = if self.trusted(&account) {
            Standing::Trusted
        } else {
            Standing::Untrusted
        };
        if unit.state == UnitState::Cancelled || job.state == JobState::Cancelled {
            if lease_was_active {
                tx.lease_returned(unit.id)?;
            }
            return Ok(ReportOutcome {
                status: ReportStatus::Rejected,
                detail: "the unit was cancelled".into(),
            });
        }
        if check.is_ok()
            && report.result.stop == Some(StopReason::Requested)
            && !counts_alone(worker, &unit, lease_was_active)
        {
            // a run stopped short (its worker shut down or gave it back) matches only a
            // run stopped at the same node: it is compared with nothing, and the unit is
            // run whole by whoever leases it next (no fault of the worker's)
            tx.set_lease_state(lease.id, LeaseState::Superseded)?;
            if lease_was_active {
                tx.lease_returned(unit.id)?;
            }
            return Ok(late(if lease_was_active {
                "a stopped run counts alone only on an operator's unit that no other run shares; the unit is run whole"
            } else {
                "this lease expired and its unit is covered by another run; a stopped run is not compared"
            }));
        }
        let record = ResultRecord {
            id: ResultId(0),
            job_id: unit.job_id,
            unit_id: unit.id,
            lease_id: lease.id,
            worker_id: worker.id,
            account_id: worker.account_id.clone(),
            standing,
            hostname: worker.host.hostname.clone(),
            cpu_model: worker.host.cpu_model.clone(),
            engine_kind: report.engine_kind,
            engine_build: report.engine_build.clone(),
            digest,
            committed: report.result.committed,
            solutions: report.result.solutions_count,
            max_depth: report.result.max_depth,
            engine_seconds: if report.engine_seconds.is_finite() {
                report.engine_seconds.max(0.0)
            } else {
                0.0
            },
            verdict: if check.is_ok() {
                ResultVerdict::Pending
            } else {
                ResultVerdict::Wrong
            },
            received_ms: now,
        };
        let new = NewResult {
            record,
            body,
            core: folded,
        };
        let recheck = recheck && standing == Standing::Trusted;
        if check.is_ok()
            && !others_valid
            && decides_alone(&unit, &new.record, recheck)
            && self.accept_alone.load(std::sync::atomic::Ordering::Relaxed)
        {
            // the common path: the unit's first valid result, accepted on its own, is
            // written once, already decided (`decide` would read it back, then update it)
            let outcome = self.accept_alone(
                tx,
                (&job, &unit, lease_was_active),
                (new, &report.result, kept_boards),
                now,
            )?;
            finish_if_done(tx, unit.job_id, now)?;
            // (counted before the commit: a batch rolled back overcounts, for a test only)
            self.accepted_alone
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Ok(outcome);
        }
        tx.insert_result(&new)?;
        if let Err(why) = check {
            return self.reject_wrong_result(tx, worker, &unit, lease_was_active, &why);
        }
        tx.result_recorded(unit.id, lease_was_active)?;
        let record = new.record;
        // (its id, not read back, is found by its lease among the unit's results)
        let mine = record;
        let live = self.live_parties(tx, now)?;
        let outcome = self.decide(
            tx,
            (&job, &unit),
            Some((&mine, &report.result, kept_boards)),
            (live, recheck),
            now,
        )?;
        if outcome.status == ReportStatus::Mismatch && tx.reopen_job(unit.job_id)? {
            warn!(job_id = %unit.job_id, unit_id = %unit.id, "a late result disputes a completed job; re-opened for a deciding run");
        }
        // only a unit that just became (or stayed) done can complete its job
        if outcome.status.decides_unit() {
            finish_if_done(tx, unit.job_id, now)?;
        }
        Ok(outcome)
    }

    /// A result that failed verification: recorded as wrong, its worker and account
    /// collect an error (an account quarantined by it is voided), the unit is open again.
    fn reject_wrong_result(
        &self,
        tx: &mut dyn Tx,
        worker: &WorkerRecord,
        unit: &UnitRecord,
        lease_was_active: bool,
        why: &str,
    ) -> Result<ReportOutcome, FleetError> {
        warn!(worker_id = %worker.id, unit_id = %unit.id, %why, "result failed verification");
        if lease_was_active {
            tx.lease_returned(unit.id)?;
        }
        let quarantined = tx.worker_error(worker.id, self.config.quarantine_after)?;
        if tx.account_error(
            &worker.account_id,
            self.config.trust.account_quarantine_after,
        )? {
            warn!(account = %worker.account_id, "account quarantined after wrong results of its workers");
            self.void_account(tx, &worker.account_id)?;
        }
        Ok(ReportOutcome {
            status: ReportStatus::Rejected,
            detail: format!(
                "{why}{}",
                if quarantined {
                    "; worker quarantined"
                } else {
                    ""
                }
            ),
        })
    }
}

/// The answer to a report that is too late to count (no fault of its worker's).
fn late(why: &str) -> ReportOutcome {
    ReportOutcome {
        status: ReportStatus::Late,
        detail: format!("too late to count: {why}"),
    }
}

/// Whether a run stopped short at its worker's request (a shutdown, a unit given back)
/// may decide its unit on its own and leave the rest as a continuation: only an operator
/// machine's (the operator vouches for its machines; a volunteer's stopped run could not
/// be rechecked, since a recheck would have to stop at the same node), on a unit that
/// needs one run, has no result yet and no other lease out.
fn counts_alone(worker: &WorkerRecord, unit: &UnitRecord, lease_was_active: bool) -> bool {
    let others_out = unit.active_leases - u32::from(lease_was_active && unit.active_leases > 0);
    worker.account_id.is_operator()
        && matches!(unit.state, UnitState::Open | UnitState::Busy)
        && unit.quorum == 1
        && unit.results == 0
        && others_out == 0
}

/// The lease a report names, checked, with what the report is decided against: it exists
/// (or the answer for a unit archived since), is this worker's and for this unit, has no
/// other result, and still counts. `Err` is the answer to give instead (a duplicate, or
/// too late).
fn report_lease(
    tx: &mut dyn Tx,
    worker: &WorkerRecord,
    report: &Report,
    digest: &str,
) -> Result<Result<ReportView, ReportOutcome>, FleetError> {
    // the job's best boards are counted only for a result that could become one
    let boards = if report.result.solutions_count == 0 && report.result.max_depth > 0 {
        BEST_BOARDS
    } else {
        0
    };
    let Some(view) = tx.report_view(
        report.lease_id,
        &worker.account_id,
        (report.result.max_depth, boards),
    )?
    else {
        // a unit leaves its leases behind when it is archived, which waits until its
        // expired leases are older than the detail window: a result later than that
        // is told so, instead of "not found"
        if tx.is_archived(report.unit_id)? {
            return Ok(Err(late(
                "the unit was decided and archived long after this lease expired; the result is not compared",
            )));
        }
        return Err(FleetError::NotFound(format!("lease {}", report.lease_id)));
    };
    let lease = &view.lease;
    if lease.worker_id != worker.id {
        return Err(FleetError::PermissionDenied(
            "the lease belongs to another worker".into(),
        ));
    }
    if lease.unit_id != report.unit_id {
        return Err(FleetError::InvalidArgument(
            "the lease is for another unit".into(),
        ));
    }
    if let Some(existing) = &view.existing {
        return if existing.digest == digest {
            Ok(Err(ReportOutcome {
                status: ReportStatus::Duplicate,
                detail: "already recorded".into(),
            }))
        } else {
            Err(FleetError::InvalidArgument(
                "a different result was already reported on this lease".into(),
            ))
        };
    }
    if lease.state == LeaseState::Superseded {
        // idempotent: the lease stays superseded, a repeat gets the same answer
        return Ok(Err(late(
            "the unit changed or was decided by another run after this lease was lost; the result is not compared",
        )));
    }
    Ok(Ok(view))
}
