//! Reports: recording each result exactly once, after verifying it. A report is one store
//! write; the CPU work (digest, encoding, verification) happens before it, in parallel,
//! against the unit as it was leased, so the writer only compares and writes. Deciding
//! the unit is [`super::quorum`]'s.

use std::sync::Arc;

use e2fleet_engine::Unit;
use e2fleet_engine::unit::{StopReason, result_digest};
use e2fleet_proto::api::{
    JobId, JobState, LeaseId, Report, ReportOutcome, ReportStatus, ResultVerdict, UnitId, WorkerId,
};
use tracing::{instrument, warn};

use super::batches;
use super::checks::check_result;
use super::policy::{BEST_BOARDS, quorum_for};
use super::quorum::decides_alone;
use super::{Fleet, FleetError, LeasedUnit, finish_if_done};
use crate::store::{
    LeaseState, NewResult, NewUnit, ReportView, ResultBody, ResultCore, ResultId, ResultRecord,
    Standing, Tx, UnitKind, UnitRecord, UnitState, ViewAsk, WorkerRecord, WriteLock,
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
        let queued = QueuedReport {
            worker: worker.clone(),
            report,
            prepared: (digest, body, folded),
            pre: (pre, recheck),
            now,
        };
        if !self.accepts_in_parts() {
            // every report the single way, on its own (to compare the batches with it),
            // beside lease batches as a report batch is
            let fleet = self.clone();
            let outcome = self
                .store
                .write_with(WriteLock::Reports, move |tx| {
                    let q = queued;
                    fleet.report_tx(tx, &q.worker, q.report, q.prepared, q.pre, q.now)
                })
                .await?;
            tracing::info!(status = %outcome.status, "result reported");
            return Ok(outcome);
        }
        let outcome = batches::submit(
            self,
            (|f| &f.reports, WriteLock::Reports),
            |f, tx, items| f.report_batch_tx(tx, items),
            queued,
        )
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
                "this lease expired: a stopped run counts alone only on a live lease, and is compared with nothing; the unit is run whole"
            }));
        }
        let record = new_record(
            worker,
            &report,
            (&unit, lease.id),
            (standing, digest, check.is_ok()),
            now,
        );
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

/// A report waiting for its batch ([`super::batches`]): what [`Fleet::report_tx`] takes.
pub(super) struct QueuedReport {
    worker: WorkerRecord,
    report: Report,
    prepared: (String, ResultBody, ResultCore),
    pre: (Option<Prechecked>, bool),
    now: i64,
}

/// Reports of a batch accepted on their own (each its unit's first valid result, as
/// [`Fleet::accept_alone`] decides it), written together by [`Fleet::write_accepted`].
#[derive(Default)]
struct AcceptedPart {
    results: Vec<NewResult>,
    /// For each result (at its index), whether it keeps its body: it carries solutions,
    /// or it is among its job's best boards as the batch's views counted them (the
    /// job's surplus is folded after the part, as [`Fleet::accept_alone`] folds it).
    keep_body: Vec<bool>,
    /// (unit, lease, whether the lease was active, when)
    units: Vec<(UnitId, LeaseId, bool, i64)>,
    jobs: Vec<JobPart>,
    workers: Vec<(WorkerId, u64)>,
    /// For each result (at its index), when a volunteer's was reported: it is credited
    /// to its account as [`Fleet::accept_alone`] credits it (accepted in a part, it is the
    /// only valid result on its unit, so no result of its account there holds credit).
    credit_at: Vec<Option<i64>>,
}

/// What a part adds to one job.
struct JobPart {
    id: JobId,
    /// Nodes by depth and solutions of its accepted results, summed.
    nodes: Vec<u64>,
    solutions: u64,
    /// Continuations of results stopped at their budget.
    continuations: Vec<NewUnit>,
    /// The latest report's time.
    now: i64,
}

impl AcceptedPart {
    fn has_unit(&self, id: UnitId) -> bool {
        self.units.iter().any(|u| u.0 == id)
    }
}

impl Fleet {
    /// A batch of reports (see [`super::batches`]): each decided by the same rules as
    /// [`Fleet::report_tx`]. The views of the batch's reports are read in one statement;
    /// the reports that [`Fleet::fits_part`] takes on their view (accepted on their own)
    /// are written together as one part, and then every other report the single way, in
    /// the batch's order.
    ///
    /// The batch is decided as if its part's reports had come first: every report in it
    /// was in flight at once, none answered, so any order is one the reports could have
    /// arrived in, and this one decides each part report on a view nothing in the batch
    /// changed (the part's own reports touch distinct units). A part report keeps its
    /// board when its view counted fewer than [`BEST_BOARDS`] kept boards at its depth or
    /// deeper, and the job's boards beyond its best are folded once after the part
    /// (`Tx::fold_surplus_boards`, ranked by depth, then time): the boards left are those
    /// the reports leave arriving one by one in the order of their times, since a board
    /// that found ten at its depth or deeper ranks below all ten and is folded either way.
    /// A report written the single way reads everything it is decided on itself, after the
    /// part. (Deciding in arrival order instead ended the part at each report written the
    /// single way and read the following views again: with volunteers, whose results are
    /// drawn for a recheck, that was a part and a views read every ~20 reports.)
    pub(super) fn report_batch_tx(
        &self,
        tx: &mut dyn Tx,
        items: Vec<QueuedReport>,
    ) -> Result<Vec<Result<ReportOutcome, FleetError>>, FleetError> {
        let n = items.len();
        let mut answers: Vec<Option<Result<ReportOutcome, FleetError>>> =
            (0..n).map(|_| None).collect();
        let mut views = if self.accepts_in_parts() {
            self.read_views(tx, &items)?
        } else {
            (0..n).map(|_| None).collect()
        };
        let mut part = AcceptedPart::default();
        let mut single = Vec::new();
        for (i, (q, view)) in items.into_iter().zip(views.iter_mut()).enumerate() {
            let record = view.as_ref().and_then(|v| self.fits_part(&q, v, &part));
            match (record, view.take()) {
                (Some(record), Some(view)) => {
                    answers[i] = Some(Ok(self.take_into_part(q, view, record, &mut part)));
                }
                _ => single.push((i, q)),
            }
        }
        self.write_accepted(tx, part)?;
        for (i, q) in single {
            let answer = self.report_tx(tx, &q.worker, q.report, q.prepared, q.pre, q.now);
            if let Err(FleetError::Store(e)) = answer {
                // a store failure fails the batch (the writer rolls it back); any other
                // refusal is decided before the report's first write, and is its answer
                return Err(e.into());
            }
            answers[i] = Some(answer);
        }
        Ok(answers
            .into_iter()
            .map(|a| a.expect("every report answered"))
            .collect())
    }

    /// Reads the views of a batch's reports, in one statement.
    fn read_views(
        &self,
        tx: &mut dyn Tx,
        items: &[QueuedReport],
    ) -> Result<Vec<Option<ReportView>>, FleetError> {
        let asks: Vec<ViewAsk<'_>> = items
            .iter()
            .map(|q| ViewAsk {
                lease: q.report.lease_id,
                account: &q.worker.account_id,
                boards: boards_asked(&q.report),
            })
            .collect();
        Ok(tx.report_views(&asks)?)
    }

    /// Whether reports may be accepted in parts at all, whatever their views say: when
    /// the fleet accepts a unit's first valid result on its own ([`Fleet::accept_alone`];
    /// off only to compare it with the general path).
    fn accepts_in_parts(&self) -> bool {
        self.accept_alone.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The result a report would be accepted with in `part` (as [`Fleet::accept_alone`]
    /// accepts a unit's first valid result on its own, the common path of a trusted
    /// fleet), judged on `view`, when nothing before it in the part touched its unit, and
    /// whether it keeps its body (solutions, or one of its job's best boards as the view
    /// counted them); `None`: it is written the single way.
    fn fits_part(
        &self,
        q: &QueuedReport,
        view: &ReportView,
        part: &AcceptedPart,
    ) -> Option<(ResultRecord, bool)> {
        let ReportView {
            lease,
            existing,
            unit,
            job,
            account,
            kept_boards,
            others_valid,
        } = view;
        // what `report_lease` answers without counting, and what `report_tx` refuses or
        // compares, goes the single way
        let checked = matches!(&q.pre.0, Some(p) if p.budget == lease.budget && p.unit == unit.unit && p.check.is_ok());
        let counted = !part.has_unit(unit.id)
            && lease.worker_id == q.worker.id
            && lease.unit_id == q.report.unit_id
            && existing.is_none()
            && lease.state != LeaseState::Superseded
            && checked
            && account
                .as_ref()
                .is_some_and(|a| a.active() && self.trusted(a))
            && unit.state != UnitState::Cancelled
            && job.state != JobState::Cancelled
            && q.report.result.stop != Some(StopReason::Requested)
            && !others_valid;
        if !counted {
            return None;
        }
        let record = new_record(
            &q.worker,
            &q.report,
            (unit, lease.id),
            (Standing::Trusted, q.prepared.0.clone(), true),
            q.now,
        );
        let keeps_board =
            record.solutions > 0 || (record.max_depth > 0 && *kept_boards < BEST_BOARDS);
        decides_alone(unit, &record, q.pre.1).then_some((record, keeps_board))
    }

    /// Adds a report [`Fleet::fits_part`] took to `part`: what [`Fleet::accept_alone`]
    /// writes for it, to be written with the rest of the part.
    fn take_into_part(
        &self,
        q: QueuedReport,
        view: ReportView,
        (mut record, keep_body): (ResultRecord, bool),
        part: &mut AcceptedPart,
    ) -> ReportOutcome {
        let ReportView {
            lease, unit, job, ..
        } = view;
        let QueuedReport {
            worker,
            report,
            prepared: (_, body, core),
            now,
            ..
        } = q;
        record.verdict = ResultVerdict::Accepted;
        part.credit_at
            .push((!record.account_id.is_operator()).then_some(now));
        part.results.push(NewResult { record, body, core });
        part.keep_body.push(keep_body);
        part.units
            .push((unit.id, lease.id, lease.state == LeaseState::Active, now));
        let result = &report.result;
        let at = match part.jobs.iter().position(|j| j.id == job.id) {
            Some(at) => at,
            None => {
                part.jobs.push(JobPart {
                    id: job.id,
                    nodes: Vec::new(),
                    solutions: 0,
                    continuations: Vec::new(),
                    now,
                });
                part.jobs.len() - 1
            }
        };
        let totals = &mut part.jobs[at];
        e2fleet_engine::unit::add_counts(&mut totals.nodes, &result.nodes_by_depth);
        totals.solutions += result.solutions_count;
        totals.now = totals.now.max(now);
        if let Some(cursor) = &result.cursor {
            // as `add_to_totals` makes it
            totals.continuations.push(NewUnit {
                unit: Unit {
                    prefix: unit.unit.prefix.clone(),
                    cursor: cursor.clone(),
                },
                parent: Some(unit.id),
                kind: UnitKind::Continuation,
                quorum: quorum_for(
                    job.id,
                    unit.id.0 as u64 ^ 0x5bd1_e995,
                    job.replicas,
                    job.spot_check,
                ),
            });
        }
        match part.workers.iter_mut().find(|w| w.0 == worker.id) {
            Some(w) => w.1 += 1,
            None => part.workers.push((worker.id, 1)),
        }
        ReportOutcome {
            status: ReportStatus::Accepted,
            detail: format!(
                "1 agreeing of quorum {}, 1 independent parties",
                unit.quorum
            ),
        }
    }

    /// Writes what [`Fleet::accept_alone`] writes for each report of `part`, each kind
    /// of change in one statement; then a job with no continuation made may be complete.
    fn write_accepted(&self, tx: &mut dyn Tx, part: AcceptedPart) -> Result<(), FleetError> {
        if part.results.is_empty() {
            return Ok(());
        }
        let leases: Vec<LeaseId> = part.units.iter().map(|u| u.1).collect();
        tx.set_leases_state(&leases, LeaseState::Reported)?;
        tx.insert_decided_results(&part.results, &part.keep_body, &part.credit_at)?;
        tx.units_decided_by_leases(&part.units)?;
        for job in &part.jobs {
            tx.add_accepted(job.id, &job.nodes, job.solutions)?;
            tx.insert_units(job.id, &job.continuations, job.now)?;
        }
        tx.workers_units_done(&part.workers)?;
        let mut kept_in: Vec<JobId> = Vec::new();
        for (r, _) in part
            .results
            .iter()
            .zip(&part.keep_body)
            .filter(|(_, k)| **k)
        {
            if !kept_in.contains(&r.record.job_id) {
                kept_in.push(r.record.job_id);
            }
        }
        for job in kept_in {
            tx.fold_surplus_boards(job, BEST_BOARDS)?;
        }
        for job in &part.jobs {
            if job.continuations.is_empty() {
                finish_if_done(tx, job.id, job.now)?;
            }
        }
        // (counted before the commit: a batch rolled back overcounts, for a test only)
        for counter in [&self.accepted_alone, &self.accepted_in_parts] {
            counter.fetch_add(
                part.results.len() as u64,
                std::sync::atomic::Ordering::Relaxed,
            );
        }
        Ok(())
    }
}

/// The kept boards a report's view counts: only for a result that could become one of
/// its job's best boards (its depth, and up to [`BEST_BOARDS`]).
fn boards_asked(report: &Report) -> (usize, usize) {
    let boards = if report.result.solutions_count == 0 && report.result.max_depth > 0 {
        BEST_BOARDS
    } else {
        0
    };
    (report.result.max_depth, boards)
}

/// A report's result as recorded (pending when its check passed, wrong when not).
fn new_record(
    worker: &WorkerRecord,
    report: &Report,
    (unit, lease): (&UnitRecord, LeaseId),
    (standing, digest, check_ok): (Standing, String, bool),
    now: i64,
) -> ResultRecord {
    ResultRecord {
        id: ResultId(0),
        job_id: unit.job_id,
        unit_id: unit.id,
        lease_id: lease,
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
        verdict: if check_ok {
            ResultVerdict::Pending
        } else {
            ResultVerdict::Wrong
        },
        received_ms: now,
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
/// be rechecked, since a recheck would have to stop at the same node), on a lease still
/// active, on a unit that needs one run, has no result yet and no other lease out. (An
/// expired lease's unit is open: a lease batch may grant it while this report is decided
/// beside it, and a run granted so must never find its unit decided by a stopped run
/// with the rest a continuation; see [`crate::store::WriteLock`].)
fn counts_alone(worker: &WorkerRecord, unit: &UnitRecord, lease_was_active: bool) -> bool {
    let others_out = unit.active_leases - u32::from(lease_was_active && unit.active_leases > 0);
    lease_was_active
        && worker.account_id.is_operator()
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
    let Some(view) = tx.report_view(report.lease_id, &worker.account_id, boards_asked(report))?
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
