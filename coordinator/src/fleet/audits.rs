//! Published results: a job as a certificate anyone can audit
//! (`e2fleet_engine::certificate`), and the audits people send back.
//!
//! - [`Fleet::certificate`] writes a job's certificate from one consistent read: every
//!   unit that is not cancelled with its accepted result, the enumeration and split
//!   counts, the totals, the solutions and the best boards. A complete job's is final; a
//!   running job's (`partial`) lists its open units without results and its totals are
//!   exact for the part walked.
//! - [`Fleet::submit_audit`] records an audit: someone ran `e2fleet-worker audit` on the
//!   certificate and re-ran a sample of units. Each re-run digest is compared with the
//!   accepted result's digest here (not with the file they audited), so an audit says
//!   which hardware re-checked how many of the job's own results, and which disagree. An
//!   audit is information, not a vote: it never changes a count (an auditor is a worker
//!   identity like any other; a disagreement is logged and shown for the operator).

use e2fleet_engine::certificate::{self, CertUnit, Certificate, JobInfo};
use e2fleet_engine::model::Placement;
use e2fleet_proto::REPORT_MAX_SOLUTIONS;
use e2fleet_proto::api::{AuditOutcome, AuditSubmission, JobId, JobState, UnitId};
use tracing::{info, warn};

use super::policy::BEST_BOARDS;
use super::{Fleet, FleetError};
use crate::store::{AuditRecord, CertificateRow, JobRecord, WorkerRecord};

/// Solution boards a certificate carries (the count is always exact).
pub const CERTIFICATE_SOLUTIONS: usize = 1_000;

/// Units one audit may report.
pub const MAX_AUDIT_UNITS: usize = 100_000;

impl Fleet {
    /// A job's certificate file (`partial`: also of a job that is not complete).
    pub async fn certificate(&self, job_id: JobId, partial: bool) -> Result<Vec<u8>, FleetError> {
        let ctx = self.context(job_id).await?;
        let (job, puzzle_json, rows) = self
            .store
            .read(move |tx| {
                let job = tx
                    .job(job_id)?
                    .ok_or_else(|| FleetError::NotFound(format!("job {job_id}")))?;
                let source = tx
                    .job_source(job_id)?
                    .ok_or_else(|| FleetError::NotFound(format!("job {job_id}")))?;
                let rows = tx.certificate_rows(job_id)?;
                Ok::<_, FleetError>((job, source.puzzle_json, rows))
            })
            .await?;
        if job.state != JobState::Complete && !partial {
            return Err(FleetError::FailedPrecondition(format!(
                "job {job_id} is {}: only a complete job has a final certificate (ask for a partial one to publish the part walked so far)",
                job.state.as_str()
            )));
        }
        let cert = tokio::task::spawn_blocking(move || {
            build_certificate(&job, puzzle_json, &ctx.spec.puzzle, rows)
        })
        .await
        .map_err(|e| FleetError::FailedPrecondition(format!("building the certificate: {e}")))?;
        info!(%job_id, units = cert.units.len(), root = %cert.merkle_root, "certificate exported");
        Ok(certificate::encode(&cert))
    }

    /// Records an audit of a job's certificate by `worker`.
    pub async fn submit_audit(
        &self,
        worker: &WorkerRecord,
        audit: AuditSubmission,
    ) -> Result<AuditOutcome, FleetError> {
        if audit.units.len() > MAX_AUDIT_UNITS {
            return Err(FleetError::InvalidArgument(format!(
                "at most {MAX_AUDIT_UNITS} units per audit"
            )));
        }
        if audit.engine_build.len() > super::registration::MAX_LABEL_BYTES {
            return Err(FleetError::InvalidArgument(format!(
                "engine_build is longer than {} bytes",
                super::registration::MAX_LABEL_BYTES
            )));
        }
        let job_id = audit.job_id;
        let now = self.now();
        // the comparison is a read (up to MAX_AUDIT_UNITS lookups): kept off the writer
        // thread, which then only stores the record
        let ids: Vec<UnitId> = audit.units.iter().map(|u| u.unit).collect();
        let accepted = self
            .store
            .read(move |tx| {
                if tx.job_head(job_id)?.is_none() {
                    return Err(FleetError::NotFound(format!("job {job_id}")));
                }
                Ok::<_, FleetError>(tx.accepted_digests(job_id, &ids)?)
            })
            .await?;
        let mut outcome = AuditOutcome {
            class_id: worker.class_id.clone(),
            agreed: 0,
            disagreed: Vec::new(),
            unknown: Vec::new(),
        };
        for (u, digest) in audit.units.iter().zip(accepted) {
            match digest {
                None => outcome.unknown.push(u.unit),
                Some(d) if d == u.digest => outcome.agreed += 1,
                Some(_) => outcome.disagreed.push(u.unit),
            }
        }
        let record = AuditRecord {
            job_id,
            worker_id: worker.id,
            account_id: worker.account_id.clone(),
            class_id: worker.class_id.clone(),
            hostname: worker.host.hostname.clone(),
            engine_kind: audit.engine_kind,
            engine_build: audit.engine_build.clone(),
            certificate_sha256: audit.certificate_sha256.clone(),
            merkle_root: audit.merkle_root.clone(),
            structure_ok: audit.structure_ok,
            units_checked: audit.units.len() as u64,
            units_agreed: outcome.agreed as u64,
            disagreed: outcome.disagreed.iter().map(|u| u.0).collect(),
            unknown: outcome.unknown.len() as u64,
            engine_seconds: audit.engine_seconds,
            received_ms: now,
        };
        self.store
            .write(move |tx| Ok::<_, FleetError>(tx.insert_audit(&record)?))
            .await?;
        if outcome.disagreed.is_empty() {
            info!(%job_id, class_id = %outcome.class_id, agreed = outcome.agreed, "audit recorded");
        } else {
            warn!(%job_id, class_id = %outcome.class_id, disagreed = ?outcome.disagreed, "an audit disagrees with accepted results");
        }
        Ok(outcome)
    }
}

/// The certificate of `job` from its rows (CPU work, off the async threads).
fn build_certificate(
    job: &JobRecord,
    puzzle_json: String,
    puzzle: &e2fleet_engine::Puzzle,
    rows: Vec<CertificateRow>,
) -> Certificate {
    let depths = job.depths;
    let mut solutions: Vec<Vec<Placement>> = Vec::new();
    if job.split_depth == depths && depths > 0 {
        // a split at the last depth: the enumeration's prefixes are the solutions
        for row in &rows {
            if solutions.len() >= CERTIFICATE_SOLUTIONS {
                break;
            }
            let mut board: Vec<Placement> = puzzle.hints().to_vec();
            board.extend_from_slice(&row.unit.unit.prefix);
            board.sort_by_key(|p| p.pos);
            solutions.push(board);
        }
    }
    for (r, _, _) in rows.iter().filter_map(|row| row.accepted.as_ref()) {
        for s in &r.solutions {
            if solutions.len() < CERTIFICATE_SOLUTIONS {
                solutions.push(s.clone());
            }
        }
    }
    let best = certificate::best_boards(
        puzzle,
        rows.iter().filter_map(|row| {
            row.accepted
                .as_ref()
                .map(|(r, _, _)| (row.unit.id.0 as u64, r))
        }),
        BEST_BOARDS,
    );
    let units: Vec<CertUnit> = rows
        .iter()
        .map(|row| {
            CertUnit::new(
                row.unit.id.0 as u64,
                &row.unit.unit,
                row.accepted
                    .as_ref()
                    .map(|(r, digest, agreed)| (r, digest.as_str(), *agreed)),
            )
        })
        .collect();
    Certificate {
        format: certificate::FORMAT.to_string(),
        job: JobInfo {
            id: job.id.to_string(),
            name: job.name.clone(),
            created_ms: job.created_ms,
            finished_ms: job.finished_ms,
            complete: job.state == JobState::Complete,
        },
        puzzle: puzzle_json,
        order: job.order.clone(),
        depths,
        split_depth: job.split_depth,
        budget: job.budget,
        solutions_cap: REPORT_MAX_SOLUTIONS,
        enumeration: job.enumeration.clone(),
        enumeration_solutions: job.enumeration_solutions,
        split: job.split.clone(),
        totals: job.totals(),
        solutions_count: job.enumeration_solutions + job.accepted_solutions,
        merkle_root: certificate::merkle_root(&units),
        units,
        solutions,
        best,
    }
}
