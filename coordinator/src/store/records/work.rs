//! Jobs, units, leases and results.

use e2fleet_engine::engine::EngineKind;
use e2fleet_engine::{Unit, UnitResult};
use e2fleet_proto::api::{
    AccountId, JobId, JobState, LeaseId, ResultVerdict, StudyId, UnitId, WorkerId,
};

use super::*;
use crate::store::StoreError;

/// A stored job (without its puzzle, which only job set-up needs).
#[derive(Clone, Debug, PartialEq)]
pub struct JobRecord {
    /// The job.
    pub id: JobId,
    /// Human name.
    pub name: String,
    /// Fill order spec.
    pub order: String,
    /// Free cells: depths of the tree.
    pub depths: usize,
    /// Split depth of the enumeration.
    pub split_depth: usize,
    /// Node budget per run.
    pub budget: Option<u64>,
    /// Runs per unit on different hosts.
    pub replicas: u32,
    /// Fraction of units run twice.
    pub spot_check: f64,
    /// Lifecycle state.
    pub state: JobState,
    /// Submission time, ms.
    pub created_ms: i64,
    /// Completion or cancellation time, ms.
    pub finished_ms: Option<i64>,
    /// Nodes per depth of the enumeration to the split depth.
    pub enumeration: Vec<u64>,
    /// Solutions found by the enumeration itself (a split at the last depth).
    pub enumeration_solutions: u64,
    /// Prefix nodes per depth created by continuation splits.
    pub split: Vec<u64>,
    /// Running sum of accepted unit results per depth.
    pub accepted: Vec<u64>,
    /// Running sum of accepted solutions.
    pub accepted_solutions: u64,
    /// Conservation, checked at completion.
    pub conservation_ok: Option<bool>,
    /// How the job shares the fleet.
    pub schedule: Schedule,
    /// A study's probe job: the study and the boards in each probe (`None`: a counting
    /// job).
    pub probe: Option<JobProbe>,
}

/// What makes a job a study's: its units are probes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobProbe {
    /// The study.
    pub study: StudyId,
    /// Boards in each probe's population.
    pub particles: u32,
}

/// A stored order study (its orders are jobs with [`JobRecord::probe`] naming it).
#[derive(Clone, Debug, PartialEq)]
pub struct StudyRecord {
    /// The study.
    pub id: StudyId,
    /// Human name.
    pub name: String,
    /// The puzzle as site JSON.
    pub puzzle_json: String,
    /// Boards in each probe.
    pub particles: u32,
    /// Probes per stratum at most.
    pub rounds: u32,
    /// `running`, `converged`, `exhausted` or `cancelled`.
    pub state: String,
    /// When it was started, ms.
    pub created_ms: i64,
    /// When it ended, ms.
    pub finished_ms: Option<i64>,
}

/// An accepted probe: its stratum (the unit's prefix) and the children its population
/// listed per absolute depth.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcceptedProbe {
    /// The unit's prefix.
    pub prefix: Vec<e2fleet_engine::Placement>,
    /// Children listed per depth (index 0: depth 1).
    pub counts: Vec<u64>,
}

/// How a job shares the fleet with other jobs: jobs of a higher priority get units first;
/// among jobs of equal priority each gets engines in proportion to its share; a paused job
/// gets no new leases (the ones out finish).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Schedule {
    /// Higher first.
    pub priority: i32,
    /// Weight among jobs of equal priority (positive).
    pub share: f64,
    /// No new leases.
    pub paused: bool,
}

impl Default for Schedule {
    fn default() -> Schedule {
        Schedule {
            priority: 0,
            share: 1.0,
            paused: false,
        }
    }
}

impl JobRecord {
    /// The exact total so far, per depth: enumeration + splits + accepted units.
    pub fn totals(&self) -> Vec<u64> {
        let mut total = self.enumeration.clone();
        e2fleet_engine::unit::add_counts(&mut total, &self.split);
        e2fleet_engine::unit::add_counts(&mut total, &self.accepted);
        total
    }
}

/// A job to store, with its puzzle.
#[derive(Clone, Debug)]
pub struct NewJob {
    /// The job (state running, totals zero).
    pub record: JobRecord,
    /// The puzzle as site JSON.
    pub puzzle_json: String,
}

/// What a job's search context is built from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobSource {
    /// The puzzle as site JSON.
    pub puzzle_json: String,
    /// Fill order spec.
    pub order: String,
    /// Node budget per run.
    pub budget: Option<u64>,
    /// Boards in each probe, for a study's job.
    pub probe_particles: Option<u32>,
}

/// What the report path needs of a job.
#[derive(Clone, Debug, PartialEq)]
pub struct JobHead {
    /// The job.
    pub id: JobId,
    /// Lifecycle state.
    pub state: JobState,
    /// Runs per unit on different hosts.
    pub replicas: u32,
    /// Fraction of units run twice.
    pub spot_check: f64,
}

/// What a lease request is weighed against ([`crate::store::tx::Leases::lease_view`]).
#[derive(Clone, Debug, PartialEq)]
pub struct LeaseView {
    /// Whether the worker is quarantined.
    pub quarantined: bool,
    /// Its account (`None` if it is gone).
    pub account: Option<AccountRecord>,
    /// Active leases the worker holds.
    pub worker_leases: u64,
    /// Active leases of all the account's identities (0 for the operator's, which are
    /// not counted).
    pub account_leases: u64,
}

/// What a report is checked and decided against, read in one statement
/// ([`crate::store::tx::Results::report_view`]): its lease, a result already recorded on
/// it, the lease's unit and job, and the reporting worker's account.
#[derive(Clone, Debug, PartialEq)]
pub struct ReportView {
    /// The lease the report names.
    pub lease: LeaseRecord,
    /// The result already recorded on that lease, if any.
    pub existing: Option<ResultRecord>,
    /// The lease's unit.
    pub unit: UnitRecord,
    /// The unit's job.
    pub job: JobHead,
    /// The reporting worker's account (`None` if it is gone).
    pub account: Option<AccountRecord>,
    /// The job's accepted results that keep their boards at the depth asked or deeper,
    /// counted up to the limit asked.
    pub kept_boards: usize,
    /// Whether the unit has a valid result (not wrong, not void) besides one on this
    /// lease.
    pub others_valid: bool,
}

/// A stored unit, its prefix and cursor decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitRecord {
    /// The unit.
    pub id: UnitId,
    /// Its job.
    pub job_id: JobId,
    /// Prefix and cursor.
    pub unit: Unit,
    /// The unit it was created from (continuations and splits).
    pub parent: Option<UnitId>,
    /// How it came to be.
    pub kind: UnitKind,
    /// Agreeing results required to accept.
    pub quorum: u32,
    /// Runs to collect before deciding.
    pub needed: u32,
    /// Where it is in its life.
    pub state: UnitState,
    /// Leases out on it.
    pub active_leases: u32,
    /// Valid results received.
    pub results: u32,
    /// The result that decided it.
    pub accepted_result: Option<ResultId>,
    /// Creation time, ms.
    pub created_ms: i64,
    /// Whether its next run must come from an account that has not run it.
    pub account_need: AccountNeed,
    /// Its results disagree: a deciding run is out, trusted accounts first.
    pub disputed: bool,
}

/// A unit to store.
#[derive(Clone, Debug)]
pub struct NewUnit {
    /// Prefix and cursor.
    pub unit: Unit,
    /// The unit it was created from.
    pub parent: Option<UnitId>,
    /// How it came to be.
    pub kind: UnitKind,
    /// Agreeing results required to accept.
    pub quorum: u32,
}

/// A stored lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRecord {
    /// The lease.
    pub id: LeaseId,
    /// The unit leased.
    pub unit_id: UnitId,
    /// Who holds it.
    pub worker_id: WorkerId,
    /// The holder's account.
    pub account_id: AccountId,
    /// Its host name then (a label).
    pub hostname: String,
    /// Node budget of the run.
    pub budget: Option<u64>,
    /// Grant time, ms.
    pub created_ms: i64,
    /// Deadline, ms.
    pub deadline_ms: i64,
    /// Where it is in its life.
    pub state: LeaseState,
}

/// A result encoded for storage. Made with [`ResultBody::encode`] before the write (the
/// encoding is CPU work that need not happen on the writer thread).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResultBody(pub(crate) String);

impl ResultBody {
    /// Encodes a result.
    pub fn encode(result: &UnitResult) -> ResultBody {
        ResultBody(serde_json::to_string(result).expect("results serialise"))
    }

    /// Decodes a stored result.
    pub fn decode(&self) -> Result<UnitResult, StoreError> {
        crate::store::parse_json(&self.0, "result")
    }
}

/// A stored result, without its body (decisions compare digests; read the body with
/// [`crate::store::Results::result_body`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ResultRecord {
    /// The result.
    pub id: ResultId,
    /// Its job.
    pub job_id: JobId,
    /// Its unit.
    pub unit_id: UnitId,
    /// The lease it answered.
    pub lease_id: LeaseId,
    /// Who reported it.
    pub worker_id: WorkerId,
    /// The reporter's account.
    pub account_id: AccountId,
    /// How it may count.
    pub standing: Standing,
    /// Its host name then (a label).
    pub hostname: String,
    /// Its CPU model then (a label).
    pub cpu_model: String,
    /// Engine kind.
    pub engine_kind: EngineKind,
    /// Engine build id.
    pub engine_build: String,
    /// [`e2fleet_engine::unit::result_digest`]: equal digests agree.
    pub digest: String,
    /// Committed nodes.
    pub committed: u64,
    /// Solutions.
    pub solutions: u64,
    /// Deepest depth.
    pub max_depth: usize,
    /// Engine-thread seconds.
    pub engine_seconds: f64,
    /// What the coordinator made of it.
    pub verdict: ResultVerdict,
    /// Arrival time, ms.
    pub received_ms: i64,
}

/// A result to store.
#[derive(Clone, Debug)]
pub struct NewResult {
    /// The record (its `id` is ignored).
    pub record: ResultRecord,
    /// The whole result.
    pub body: ResultBody,
    /// What stays of it once its unit is decided.
    pub core: ResultCore,
}

/// The part of a result kept after its unit is decided (bounded storage): per-depth
/// counts and a budget stop's cursor, encoded for storage before the write. With the
/// record's columns (digest, committed, solutions, deepest depth, who, when) it is what
/// overturns, conservation and certificates need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResultCore {
    /// Per-depth counts, sparse.
    pub(crate) counts: Vec<u8>,
    /// The budget stop's cursor.
    pub(crate) stop: Option<Vec<u8>>,
}

impl ResultCore {
    /// Encodes what is kept of a result.
    pub fn encode(result: &UnitResult) -> ResultCore {
        use crate::store::sql::codec::{encode_path, encode_sparse_counts};
        ResultCore {
            counts: encode_sparse_counts(&result.nodes_by_depth),
            stop: result.cursor.as_deref().map(encode_path),
        }
    }
}

/// An accepted result's deepest board, with who found it and when.
#[derive(Clone, Debug, PartialEq)]
pub struct FoundBoard {
    /// The result (its `deepest` board and `max_depth`).
    pub result: e2fleet_engine::UnitResult,
    /// Whose worker reported it.
    pub account: e2fleet_proto::api::AccountId,
    /// That worker's host label.
    pub hostname: String,
    /// When it was received, ms.
    pub found_ms: i64,
}

/// A unit of a job with its accepted result and how many results agree with it (a
/// certificate's unit).
#[derive(Clone, Debug, PartialEq)]
pub struct CertificateRow {
    /// The unit.
    pub unit: UnitRecord,
    /// Its accepted result, its digest and the results that agree with it (itself
    /// included). A folded result has no solution or deepest boards (its digest is the
    /// stored one).
    pub accepted: Option<(UnitResult, String, u32)>,
}

/// What one archive pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArchivePass {
    /// Units archived.
    pub archived: usize,
    /// Units looked at (archived or passed over).
    pub scanned: usize,
    /// The last unit looked at: (decision time, id); the next pass starts after it.
    pub last: (i64, i64),
}
