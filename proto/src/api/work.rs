//! What workers and the coordinator exchange, as domain values: a worker's host labels,
//! leases, job specs with self-tests, reports and their outcomes, verification results.

use e2fleet_engine::engine::EngineKind;
use e2fleet_engine::{Unit, UnitResult};
use serde::{Deserialize, Serialize};

use super::ids::{JobId, LeaseId, UnitId};
use super::states::{ReportStatus, Verdict};

/// What a worker machine says it is. Every field is a label the worker chooses: shown on
/// the dashboard and used to group rates and hardware classes, never to decide trust.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostInfo {
    /// Host name.
    pub hostname: String,
    /// CPU model.
    pub cpu_model: String,
    /// Logical cores.
    pub cores: u32,
    /// CPU architecture.
    pub arch: String,
    /// Operating system.
    pub os: String,
    /// `rustc -V`, empty without rustc.
    pub rustc_version: String,
    /// Worker program version.
    pub worker_version: String,
    /// CPU features engines can use, comma-separated.
    pub target_features: String,
    /// Engine kind the worker runs.
    pub engine_kind: EngineKind,
    /// Engine release (generator + runtime + flags), the same for every puzzle.
    pub engine_release: String,
}

/// A job to submit. Fields left `None` take the coordinator's defaults
/// (`e2fleet_coordinator::fleet::policy`).
#[derive(Clone, Debug, PartialEq)]
pub struct JobRequest {
    /// Human name.
    pub name: String,
    /// The puzzle as site JSON.
    pub puzzle_json: String,
    /// Fill order spec.
    pub order: Option<String>,
    /// Split depth (else chosen from `target_units`).
    pub split_depth: Option<usize>,
    /// Wanted number of units.
    pub target_units: Option<usize>,
    /// Node budget per run.
    pub budget: Option<u64>,
    /// Runs per unit on different hosts (1 = no replication).
    pub replicas: u32,
    /// Fraction of units run twice.
    pub spot_check: f64,
    /// Jobs of a higher priority get units first.
    pub priority: i32,
    /// Share of the fleet among jobs of equal priority (positive; 1 by default).
    pub share: f64,
}

impl Default for JobRequest {
    /// No puzzle yet, one run per unit, priority 0, share 1, everything else the
    /// coordinator's default.
    fn default() -> JobRequest {
        JobRequest {
            name: String::new(),
            puzzle_json: String::new(),
            order: None,
            split_depth: None,
            target_units: None,
            budget: None,
            replicas: 1,
            spot_check: 0.0,
            priority: 0,
            share: 1.0,
        }
    }
}

/// A change to how a job shares the fleet; `None` keeps the current value.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ScheduleChange {
    /// New priority.
    pub priority: Option<i32>,
    /// New share (positive).
    pub share: Option<f64>,
    /// Pause or resume.
    pub paused: Option<bool>,
}

/// A submitted job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JobCreated {
    /// The job.
    pub job_id: JobId,
    /// Units created.
    pub units: usize,
    /// The split depth used.
    pub split_depth: usize,
    /// What the operator should know about the job (repeated pieces, ...).
    pub warnings: Vec<String>,
}

/// A leased unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// Lease id: reports and heartbeats name it.
    pub lease_id: LeaseId,
    /// The unit.
    pub unit_id: UnitId,
    /// The unit's job.
    pub job_id: JobId,
    /// The unit's prefix and cursor.
    pub unit: Unit,
    /// Node budget for this run.
    pub budget: Option<u64>,
    /// Lease deadline, ms since the epoch.
    pub deadline_ms: i64,
    /// Set for a study's probe unit: run this probe below the unit's prefix instead of
    /// walking it (`e2fleet_engine::search::estimate::probe`).
    pub probe: Option<Probe>,
}

/// A probe unit's population run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    /// Boards in the population.
    pub particles: u32,
    /// The seed of every random choice.
    pub seed: u64,
}

/// A unit with its exact expected result, for checking a new engine build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelfTest {
    /// The unit.
    pub unit: Unit,
    /// Node budget per run.
    pub budget: Option<u64>,
    /// Its exact result.
    pub expected: UnitResult,
}

/// A job's puzzle and order, and self-test units with known results.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobSpec {
    /// The job.
    pub job_id: JobId,
    /// The puzzle as site JSON.
    pub puzzle_json: String,
    /// Fill order spec.
    pub order: String,
    /// Self-test units.
    pub self_tests: Vec<SelfTest>,
    /// A study's job: its units are probes of this many boards (no engine to build).
    pub probe_particles: Option<u32>,
}

/// One result, reported on its lease.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The lease.
    pub lease_id: LeaseId,
    /// The unit.
    pub unit_id: UnitId,
    /// The result.
    pub result: UnitResult,
    /// Engine-thread seconds.
    pub engine_seconds: f64,
    /// Engine kind.
    pub engine_kind: EngineKind,
    /// Engine build id.
    pub engine_build: String,
}

/// A worker's heartbeat: the leases it holds, and what it says of itself for the
/// dashboard (labels only: none of them decides anything).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Heartbeat {
    /// Every lease held, with the nodes its run has committed so far.
    pub leases: Vec<(LeaseId, u64)>,
    /// Per-core rate, nodes per engine-thread second.
    pub per_core_rate: f64,
    /// Engine threads running (0 while paused).
    pub threads: u32,
    /// Why its engines are paused; empty while they run.
    pub paused: String,
    /// Share (0 to 1) of its engine threads' time since the last heartbeat spent without a
    /// unit while it waited on the coordinator.
    pub network_wait: f64,
    /// Median round trip of its recent calls, ms (0: not measured).
    pub round_trip_ms: f64,
    /// Its platform, `ARCH-OS` (which worker release to offer it); empty: not said.
    pub platform: String,
}

/// What became of a report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportOutcome {
    /// The outcome.
    pub status: ReportStatus,
    /// Human detail.
    pub detail: String,
}

/// One verification unit's result from a worker.
#[derive(Clone, Debug, PartialEq)]
pub struct SuiteResult {
    /// Unit name.
    pub unit: String,
    /// The exact result.
    pub result: UnitResult,
    /// Engine-thread seconds.
    pub engine_seconds: f64,
    /// Engine build id (per puzzle).
    pub engine_build: String,
}

/// The coordinator's verdict on one verification unit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UnitVerdict {
    /// Unit name.
    pub unit: String,
    /// The verdict.
    pub verdict: Verdict,
    /// What differs, for a disagreement.
    pub detail: String,
}

/// The answer to a verification submission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerificationOutcome {
    /// The caller's hardware class.
    pub class_id: String,
    /// Per unit.
    pub verdicts: Vec<UnitVerdict>,
    /// The class disagrees with some unit: no real work until a fixed build agrees.
    pub class_flagged: bool,
}

/// One unit an auditor re-ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditedUnit {
    /// The unit.
    pub unit: UnitId,
    /// `engine::unit::result_digest` of the re-run.
    pub digest: String,
    /// Nodes it committed.
    pub nodes: u64,
}

/// An audit of a job's certificate, re-run on the auditor's machine.
#[derive(Clone, Debug, PartialEq)]
pub struct AuditSubmission {
    /// The job.
    pub job_id: JobId,
    /// SHA-256 of the certificate body audited.
    pub certificate_sha256: String,
    /// Its Merkle root.
    pub merkle_root: String,
    /// Whether its structure passed (tiling, sums, boards).
    pub structure_ok: bool,
    /// The units re-run.
    pub units: Vec<AuditedUnit>,
    /// Engine that re-ran them.
    pub engine_kind: EngineKind,
    /// Its build id.
    pub engine_build: String,
    /// Engine-thread seconds spent.
    pub engine_seconds: f64,
}

/// What the coordinator made of an audit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditOutcome {
    /// The auditor's hardware class.
    pub class_id: String,
    /// Units whose re-run equals the job's accepted result.
    pub agreed: u32,
    /// Units whose re-run differs.
    pub disagreed: Vec<UnitId>,
    /// Units the job does not have, or has not decided.
    pub unknown: Vec<UnitId>,
}
