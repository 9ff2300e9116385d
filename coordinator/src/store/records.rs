//! What the store hands out and takes in: domain records with decoded values (a unit's
//! prefix and cursor as placements, counts as numbers, states as enums), never the
//! columns' encodings. Every backend converts at its own edge.

use std::fmt;
use std::str::FromStr;

use e2fleet_engine::engine::EngineKind;
use e2fleet_engine::{Unit, UnitResult};
use e2fleet_proto::api::{
    AccountId, AccountKind, HostInfo, JobId, JobState, LeaseId, ResultVerdict, UnitId,
    UnknownState, WorkerId,
};
use serde::Serialize;

use super::StoreError;

/// A stored result (a row number).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResultId(pub i64);

macro_rules! stored_enum {
    ($(#[$doc:meta])* $name:ident, $kind:literal { $($(#[$vdoc:meta])* $variant:ident = $text:literal,)* }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $($(#[$vdoc])* $variant,)*
        }

        impl $name {
            /// The stored text.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownState;
            fn from_str(s: &str) -> Result<$name, UnknownState> {
                match s {
                    $($text => Ok($name::$variant),)*
                    _ => Err(UnknownState { kind: $kind, value: s.chars().take(64).collect() }),
                }
            }
        }
    };
}

stored_enum!(
    /// How a unit came to be.
    UnitKind, "unit kind" {
        /// A prefix of the job's enumeration.
        Root = "root",
        /// What an accepted budget-stopped result left to walk (same prefix, a cursor).
        Continuation = "continuation",
        /// A sibling prefix split off a continuation for idle workers.
        Split = "split",
    }
);

stored_enum!(
    /// Where a unit is in its life.
    UnitState, "unit state" {
        /// More runs are needed than are out: leasable.
        Open = "open",
        /// Every run it needs is out.
        Busy = "busy",
        /// Decided: a quorum accepted a result.
        Done = "done",
        /// Its job was cancelled, or it was revoked with a wrong result.
        Cancelled = "cancelled",
    }
);

stored_enum!(
    /// Where a lease is in its life.
    LeaseState, "lease state" {
        /// Held by its worker.
        Active = "active",
        /// Its result arrived.
        Reported = "reported",
        /// Its deadline passed without a heartbeat.
        Expired = "expired",
        /// Its job was cancelled.
        Cancelled = "cancelled",
        /// Given back unstarted.
        Released = "released",
    }
);

stored_enum!(
    /// How a result may count.
    Standing, "standing" {
        /// From the operator, or from an account that earned trust: counts alone.
        Trusted = "trusted",
        /// From an account that has not earned trust: counts only when another account
        /// agrees.
        Untrusted = "untrusted",
    }
);

/// Whether a unit's next run must come from an account that has not run it yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AccountNeed {
    /// Any identity that has not run it.
    None = 0,
    /// Another account when the fleet has one, else another identity (replicas).
    Preferred = 1,
    /// Another account, whatever the wait: only that can confirm what it has (results
    /// that count only when another account agrees).
    Required = 2,
}

impl AccountNeed {
    /// From its stored number.
    pub fn from_stored(n: i64) -> AccountNeed {
        match n {
            2 => AccountNeed::Required,
            1 => AccountNeed::Preferred,
            _ => AccountNeed::None,
        }
    }
}

/// A stored account.
#[derive(Clone, Debug, PartialEq)]
pub struct AccountRecord {
    /// Its name.
    pub id: AccountId,
    /// Whose it is.
    pub kind: AccountKind,
    /// Creation time, ms.
    pub created_ms: i64,
    /// When it was revoked.
    pub revoked_ms: Option<i64>,
    /// Consecutive results another account confirmed (reset by a wrong one).
    pub confirmed_streak: u64,
    /// Results another account confirmed, ever.
    pub confirmed_results: u64,
    /// Their nodes.
    pub confirmed_nodes: u64,
    /// Wrong results of its identities.
    pub errors: u64,
    /// Refused work as a whole.
    pub quarantined: bool,
    /// Its worker identities (filled by [`crate::store::Accounts::list_accounts`] only).
    pub workers: u64,
}

impl AccountRecord {
    /// Whether its workers may get work.
    pub fn active(&self) -> bool {
        self.revoked_ms.is_none() && !self.quarantined
    }
}

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
        super::parse_json(&self.0, "result")
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
}

/// A stored worker identity.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerRecord {
    /// The worker.
    pub id: WorkerId,
    /// The account it enrolled with.
    pub account_id: AccountId,
    /// SHA-256 of its token.
    pub token_hash: String,
    /// What it says it is.
    pub host: HostInfo,
    /// Engine build of its last lease request.
    pub engine_build: String,
    /// Hardware class at its last registration.
    pub class_id: String,
    /// Registration time, ms.
    pub registered_ms: i64,
    /// Last call, ms.
    pub last_seen_ms: i64,
    /// Its per-core rate from its last heartbeat.
    pub per_core_rate: f64,
    /// Engine threads from its last heartbeat.
    pub threads: u32,
    /// Units whose result it had accepted.
    pub units_done: u64,
    /// Wrong results counted against it.
    pub errors: u64,
    /// Refused work.
    pub quarantined: bool,
    /// Active leases it holds (filled by [`crate::store::Workers::list_workers`] only).
    pub leases_held: u64,
}

/// One result's contribution to a per-core rate.
#[derive(Clone, Debug, PartialEq)]
pub struct RateSample {
    /// Committed nodes.
    pub committed: u64,
    /// Engine-thread seconds.
    pub engine_seconds: f64,
    /// Host name (a label).
    pub hostname: String,
    /// CPU model (a label).
    pub cpu_model: String,
    /// Engine kind.
    pub engine_kind: EngineKind,
}

impl RateSample {
    /// Nodes per engine-thread second.
    pub fn rate(&self) -> f64 {
        self.committed as f64 / self.engine_seconds
    }
}

/// Nodes received in a window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodesReceived {
    /// Every result.
    pub raw: u64,
    /// Accepted or agreeing results.
    pub verified: u64,
}

/// One minute of results.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResultMinute {
    /// Minutes since the epoch.
    pub minute: i64,
    /// Nodes of every result.
    pub raw_nodes: u64,
    /// Nodes of accepted or agreeing results.
    pub verified_nodes: u64,
    /// Results.
    pub results: u64,
}

/// One minute of leases.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseMinute {
    /// Minutes since the epoch.
    pub minute: i64,
    /// Leases created.
    pub created: u64,
    /// Leases expired.
    pub expired: u64,
}

/// Results of a job with one verdict and engine build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResultBreakdown {
    /// The verdict.
    pub verdict: ResultVerdict,
    /// Engine kind.
    pub engine_kind: EngineKind,
    /// Engine build id.
    pub engine_build: String,
    /// Results.
    pub results: u64,
    /// Nodes they committed.
    pub nodes: u64,
}

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
