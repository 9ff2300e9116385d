//! A job's audit record: who re-checked its published certificate on which hardware, and
//! whether their re-runs agreed with the accepted results — the job-level twin of the
//! verification matrix.

use std::collections::BTreeMap;

use e2fleet_engine::engine::EngineKind;
use e2fleet_proto::api::{AccountId, JobId};
use serde::Serialize;

use crate::fleet::{Fleet, FleetError};

/// Audits listed one by one (the newest).
pub const AUDITS_SHOWN: usize = 50;

/// A job's audits.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobAudits {
    /// Per hardware class, the units its audits re-ran and how many agreed.
    pub classes: Vec<ClassAudits>,
    /// The newest audits, newest first.
    pub audits: Vec<AuditEntry>,
    /// Audits ever.
    pub total: usize,
}

/// What one account's audits on one hardware class found.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClassAudits {
    /// The class.
    pub class_id: String,
    /// Whose audits they are: the operator's machines', or a volunteer account's. A
    /// volunteer's audit is that account's word: its disagreements are shown as its
    /// claims, not as the job's fault (anyone with an account could post made-up ones).
    pub account: AccountId,
    /// Whether the account is the operator's.
    pub operator: bool,
    /// Audits from it.
    pub audits: u64,
    /// Unit re-runs.
    pub units_checked: u64,
    /// Of them, equal to the accepted results.
    pub units_agreed: u64,
    /// Units whose re-run differs.
    pub disagreed: Vec<i64>,
    /// Engine builds used.
    pub engine_builds: Vec<String>,
    /// Latest audit, ms.
    pub last_ms: i64,
}

/// One audit.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AuditEntry {
    /// The auditor's account.
    pub account: AccountId,
    /// Its host label.
    pub hostname: String,
    /// Its hardware class.
    pub class_id: String,
    /// Engine kind.
    pub engine_kind: EngineKind,
    /// Engine build.
    pub engine_build: String,
    /// Certificate audited.
    pub certificate_sha256: String,
    /// Its Merkle root.
    pub merkle_root: String,
    /// Whether the structure passed on the auditor's machine.
    pub structure_ok: bool,
    /// Units re-run.
    pub units_checked: u64,
    /// Of them, equal to the accepted results.
    pub units_agreed: u64,
    /// Units whose re-run differs.
    pub disagreed: Vec<i64>,
    /// Units the job does not have.
    pub unknown: u64,
    /// When, ms.
    pub received_ms: i64,
}

impl Fleet {
    /// A job's audit record.
    pub async fn job_audits(&self, job: JobId) -> Result<JobAudits, FleetError> {
        let rows = self
            .store
            .read(move |tx| {
                if tx.job_head(job)?.is_none() {
                    return Err(FleetError::NotFound(format!("job {job}")));
                }
                Ok::<_, FleetError>(tx.audits_of_job(job)?)
            })
            .await?;
        let mut classes: BTreeMap<(bool, String, String), ClassAudits> = BTreeMap::new();
        for a in &rows {
            let operator = a.account_id.is_operator();
            // the operator's rows first, then each volunteer account's
            let key = (
                !operator,
                a.account_id.as_str().to_string(),
                a.class_id.clone(),
            );
            let c = classes.entry(key).or_insert_with(|| ClassAudits {
                class_id: a.class_id.clone(),
                account: a.account_id.clone(),
                operator,
                audits: 0,
                units_checked: 0,
                units_agreed: 0,
                disagreed: Vec::new(),
                engine_builds: Vec::new(),
                last_ms: 0,
            });
            c.audits += 1;
            c.units_checked += a.units_checked;
            c.units_agreed += a.units_agreed;
            for u in &a.disagreed {
                if !c.disagreed.contains(u) {
                    c.disagreed.push(*u);
                }
            }
            if !c.engine_builds.contains(&a.engine_build) {
                c.engine_builds.push(a.engine_build.clone());
            }
            c.last_ms = c.last_ms.max(a.received_ms);
        }
        let total = rows.len();
        let audits = rows
            .into_iter()
            .rev()
            .take(AUDITS_SHOWN)
            .map(|a| AuditEntry {
                account: a.account_id,
                hostname: a.hostname,
                class_id: a.class_id,
                engine_kind: a.engine_kind,
                engine_build: a.engine_build,
                certificate_sha256: a.certificate_sha256,
                merkle_root: a.merkle_root,
                structure_ok: a.structure_ok,
                units_checked: a.units_checked,
                units_agreed: a.units_agreed,
                disagreed: a.disagreed,
                unknown: a.unknown,
                received_ms: a.received_ms,
            })
            .collect();
        Ok(JobAudits {
            classes: classes.into_values().collect(),
            audits,
            total,
        })
    }
}
