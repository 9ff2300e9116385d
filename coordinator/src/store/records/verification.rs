//! Hardware classes, suite units and verification results.

use e2fleet_engine::engine::EngineKind;
use e2fleet_proto::api::{AccountId, WorkerId};

use super::*;

/// A hardware class: what two results must share to count as the same hardware and build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassRecord {
    /// Short SHA-256 of the fields below.
    pub id: String,
    /// CPU model.
    pub cpu_model: String,
    /// Architecture.
    pub arch: String,
    /// Operating system.
    pub os: String,
    /// rustc.
    pub rustc_version: String,
    /// CPU features.
    pub target_features: String,
    /// Engine kind.
    pub engine_kind: EngineKind,
    /// Engine release.
    pub engine_release: String,
    /// First seen, ms.
    pub first_seen_ms: i64,
}

/// A stored suite unit: its spec and, once known, its exact result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuiteUnitRecord {
    /// Unit name.
    pub name: String,
    /// The unit (without its expected result).
    pub spec: e2fleet_engine::suite::SuiteUnit,
    /// Its exact result, once known.
    pub expected: Option<e2fleet_engine::suite::SuiteExpected>,
    /// "given", or the classes that agreed.
    pub expected_source: String,
}

/// A verification result to store.
#[derive(Clone, Debug)]
pub struct NewVerification {
    /// Suite.
    pub suite: String,
    /// Unit name.
    pub unit: String,
    /// The submitter's hardware class.
    pub class_id: String,
    /// The submitter.
    pub worker_id: WorkerId,
    /// The submitter's account.
    pub account_id: AccountId,
    /// Its host name (a label).
    pub hostname: String,
    /// Engine build id.
    pub engine_build: String,
    /// Digest of the result.
    pub digest: String,
    /// The whole result.
    pub body: ResultBody,
    /// Committed nodes.
    pub nodes: u64,
    /// Engine-thread seconds.
    pub engine_seconds: f64,
    /// Arrival time, ms.
    pub received_ms: i64,
}

/// A stored verification result (without its body).
#[derive(Clone, Debug, PartialEq)]
pub struct VerificationRecord {
    /// Row number (arrival order).
    pub id: i64,
    /// Suite.
    pub suite: String,
    /// Unit name.
    pub unit: String,
    /// The submitter's hardware class.
    pub class_id: String,
    /// The submitter.
    pub worker_id: WorkerId,
    /// The submitter's account.
    pub account_id: AccountId,
    /// Its host name (a label).
    pub hostname: String,
    /// Engine build id.
    pub engine_build: String,
    /// Digest of the result.
    pub digest: String,
    /// Committed nodes.
    pub nodes: u64,
    /// Engine-thread seconds.
    pub engine_seconds: f64,
    /// Arrival time, ms.
    pub received_ms: i64,
}

/// An audit of a job's certificate: units re-run on someone's machine.
#[derive(Clone, Debug, PartialEq)]
pub struct AuditRecord {
    /// The job.
    pub job_id: e2fleet_proto::api::JobId,
    /// The auditor's worker identity.
    pub worker_id: WorkerId,
    /// Its account.
    pub account_id: AccountId,
    /// Its hardware class.
    pub class_id: String,
    /// Its host label.
    pub hostname: String,
    /// Engine that re-ran the units.
    pub engine_kind: EngineKind,
    /// Its build id.
    pub engine_build: String,
    /// SHA-256 of the certificate audited.
    pub certificate_sha256: String,
    /// Its Merkle root.
    pub merkle_root: String,
    /// Whether its structure passed on the auditor's machine.
    pub structure_ok: bool,
    /// Units re-run.
    pub units_checked: u64,
    /// Of them, equal to the job's accepted results.
    pub units_agreed: u64,
    /// Units whose re-run differs from the accepted result.
    pub disagreed: Vec<i64>,
    /// Units the job does not have or has not decided.
    pub unknown: u64,
    /// Engine-thread seconds.
    pub engine_seconds: f64,
    /// Arrival time, ms.
    pub received_ms: i64,
}
