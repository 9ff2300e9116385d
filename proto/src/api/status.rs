//! The operators' read models: a job's status, the fleet summary, the worker list and the
//! verification matrix. The coordinator builds them once (`e2fleet_coordinator::status`);
//! the JSON API serves them with serde, gRPC as `e2fleet.v2` messages ([`crate::convert`]),
//! `/metrics` reads the same values, and the CLI prints them.
//!
//! Two rates are kept apart everywhere: *per-core* (how fast one engine thread walks:
//! committed nodes / engine seconds, a median over results) and *aggregate* (nodes per
//! wall-clock second across the fleet). Neither is ever computed from the other.

use std::collections::BTreeMap;

use e2fleet_engine::Placement;
use e2fleet_engine::engine::EngineKind;
use serde::{Deserialize, Serialize};

use super::ids::{AccountId, JobId, TeamId, WorkerId};
use super::states::{AccountKind, JobState, ResultVerdict, Verdict, WorkerState};
use super::work::HostInfo;

/// Units of a job by state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitCounts {
    /// Waiting to be leased.
    pub open: u64,
    /// Leased (every run it needs is out).
    pub leased: u64,
    /// Decided.
    pub done: u64,
    /// Cancelled (job cancelled, or revoked with a wrong result).
    pub cancelled: u64,
}

/// The deepest accepted board of a job.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeepestBoard {
    /// Its depth (0 when nothing was placed).
    pub depth: usize,
    /// Placements in fill order.
    pub board: Vec<Placement>,
}

/// How much work is left, roughly.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// Estimated nodes still to walk.
    pub remaining_nodes: f64,
    /// How the figure was made, and how far to trust it.
    pub how: String,
    /// The whole tree's estimated nodes (the mean of the estimate's runs), when made.
    pub tree_nodes: Option<f64>,
    /// Low end of its 95% interval (never below the nodes already counted).
    pub tree_low: Option<f64>,
    /// High end of its 95% interval.
    pub tree_high: Option<f64>,
    /// Seconds to walk what the tree estimate leaves, at the job's aggregate rate.
    pub eta_seconds: Option<f64>,
    /// How the tree estimate was made.
    pub tree_how: String,
    /// At least this many nodes, at 95% confidence, however heavy the tree's tail.
    #[serde(default)]
    pub tree_at_least: Option<f64>,
}

/// Results of a job with one verdict and engine build.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultGroup {
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

/// A job's status.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobStatus {
    /// The job.
    pub job_id: JobId,
    /// Human name.
    pub name: String,
    /// Lifecycle state.
    pub state: JobState,
    /// Fill order spec.
    pub order: String,
    /// Free cells (depths of the tree).
    pub depths: usize,
    /// Split depth of the enumeration.
    pub split_depth: usize,
    /// Node budget per run.
    pub budget: Option<u64>,
    /// Runs per unit on different hosts.
    pub replicas: u32,
    /// Fraction of units run twice.
    pub spot_check: f64,
    /// Submission time, ms since the epoch.
    pub created_ms: i64,
    /// When it completed or was cancelled.
    pub finished_ms: Option<i64>,
    /// Units by state.
    pub units: UnitCounts,
    /// Exact nodes counted so far: enumeration + splits + accepted units.
    pub nodes_total: u64,
    /// The same per absolute depth.
    pub nodes_by_depth: Vec<u64>,
    /// Nodes of the enumeration to the split depth.
    pub enumeration_nodes: u64,
    /// Prefix nodes created by continuation splits.
    pub split_nodes: u64,
    /// Nodes of accepted unit results.
    pub unit_nodes: u64,
    /// Exact solutions so far.
    pub solutions_count: u64,
    /// The first solutions (capped), each a full board sorted by cell.
    pub solutions: Vec<Vec<Placement>>,
    /// The deepest accepted board.
    pub deepest: DeepestBoard,
    /// Conservation, checked at completion (`None` while running).
    pub conservation_ok: Option<bool>,
    /// Median committed nodes per engine-thread second of the job's results.
    pub per_core_nodes_per_s: Option<f64>,
    /// Verified nodes per wall-clock second across the fleet (last minute of work).
    pub aggregate_nodes_per_s: f64,
    /// All received nodes per wall-clock second (verified or not).
    pub aggregate_raw_nodes_per_s: f64,
    /// Remaining work, when it can be guessed.
    pub estimate: Option<Estimate>,
    /// Results by verdict and engine build.
    pub results: Vec<ResultGroup>,
    /// Open units that wait for a run only another worker or account can make, and why.
    pub waiting: Waiting,
    /// Jobs of a higher priority get units first.
    pub priority: i32,
    /// Share of the fleet's engines among running jobs of equal priority.
    pub share: f64,
    /// Paused: no new leases.
    pub paused: bool,
}

/// Units of a job that wait for someone the fleet may not have online.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiting {
    /// Open units with a result that need a run by a worker identity that has not run
    /// them (replicas, spot checks).
    pub for_another_worker: u64,
    /// Open units whose results count only once another account (or one of the
    /// operator's machines) runs them too.
    pub for_another_account: u64,
    /// Disputed units waiting for a deciding run.
    pub disputed: u64,
    /// Most worker identities any waiting unit needs for its next run.
    pub workers_needed: u64,
    /// Worker identities online now (not quarantined).
    pub workers_online: u64,
    /// Independent parties online now (volunteer accounts, operator machines).
    pub parties_online: u64,
    /// Why units wait, in words, when the fleet online cannot run them.
    pub reason: Option<String>,
    /// The first disputed units, with the parties whose results disagree on each.
    #[serde(default)]
    pub disputes: Vec<Dispute>,
}

/// A disputed unit and who disagrees on it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dispute {
    /// The unit.
    pub unit_id: i64,
    /// The parties with a valid result on it: a volunteer account's name, or "operator
    /// machine" and its worker id.
    pub parties: Vec<String>,
}

impl Waiting {
    /// Fills in [`Waiting::reason`] from the counts: units wait for a second worker (or a
    /// third, to decide a dispute) that is not online, or for another account.
    pub fn explained(mut self) -> Waiting {
        let workers = self.for_another_worker + self.disputed;
        let mut why = Vec::new();
        if workers > 0 && self.workers_online < self.workers_needed {
            why.push(format!(
                "{workers} unit{} need{} a run by a worker that has not run {} yet ({} workers in all; {} online): \
                 cross-checks (--replicas, --spot-check) and disputes must be run by different workers. \
                 Start another worker — on another machine, or here with its own --data-dir",
                plural(workers),
                if workers == 1 { "s" } else { "" },
                if workers == 1 { "it" } else { "them" },
                self.workers_needed,
                self.workers_online
            ));
        }
        if let Some(d) = self.disputes.first()
            && self.parties_online <= d.parties.len() as u64
        {
            why.push(format!(
                "unit {} is disputed between {}: a run by another party decides it, and none is online{}",
                d.unit_id,
                d.parties.join(" and "),
                if self.disputes.len() > 1 {
                    format!(" ({} more disputed units wait too)", self.disputes.len() - 1)
                } else {
                    String::new()
                }
            ));
        }
        if self.for_another_account > 0 && self.parties_online < 2 {
            why.push(format!(
                "{} unit{} wait{} for a run by another party: a volunteer account's results count once another account, \
                 or one of the operator's machines, reports the same ({} part{} online)",
                self.for_another_account,
                plural(self.for_another_account),
                if self.for_another_account == 1 { "s" } else { "" },
                self.parties_online,
                if self.parties_online == 1 { "y" } else { "ies" }
            ));
        }
        self.reason = (!why.is_empty()).then(|| why.join("; "));
        self
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Workers by state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerCounts {
    /// Every registered worker.
    pub total: u64,
    /// Seen recently, holding leases.
    pub online: u64,
    /// Seen recently, holding none.
    pub idle: u64,
    /// Not seen for two lease periods.
    pub offline: u64,
    /// Refused work after wrong results.
    pub quarantined: u64,
    /// Of the online and idle ones, those whose engines are paused (by their owner, on
    /// battery, outside their hours, ...): a subset, not a state of its own.
    #[serde(default)]
    pub paused: u64,
}

impl WorkerCounts {
    /// Counts one worker in `state`.
    pub fn add(&mut self, state: WorkerState) {
        self.total += 1;
        match state {
            WorkerState::Online => self.online += 1,
            WorkerState::Idle => self.idle += 1,
            WorkerState::Offline => self.offline += 1,
            WorkerState::Quarantined => self.quarantined += 1,
        }
    }
}

/// What the fleet's aggregate rate means (served with it).
pub const AGGREGATE_WHAT: &str =
    "nodes received per wall-clock second across the whole fleet, last 60 s";
/// What the per-core rate means (served with it).
pub const PER_CORE_WHAT: &str =
    "median over results of committed nodes / engine-thread seconds, last hour";

/// The fleet's aggregate rate over the last minute.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AggregateRate {
    /// What the figure means.
    pub what: String,
    /// All nodes received per second.
    pub raw: f64,
    /// Verified nodes received per second.
    pub verified: f64,
}

/// One minute of the fleet's work.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MinuteSample {
    /// Start of the minute, ms since the epoch.
    pub minute_unix_ms: i64,
    /// All nodes received per second over the minute.
    pub raw_nodes_per_s: f64,
    /// Verified nodes received per second over the minute.
    pub verified_nodes_per_s: f64,
    /// Results received.
    pub units_completed: u64,
    /// Leases handed out.
    pub leases_created: u64,
    /// Leases that expired.
    pub leases_expired: u64,
}

/// The median per-core rate of a group of results.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RateGroup {
    /// The group (a CPU model, an engine kind or a host).
    pub key: String,
    /// Results in the group.
    pub results: u64,
    /// Their median nodes per engine-thread second.
    pub median_nodes_per_s: Option<f64>,
}

/// How fast one engine thread walks: never derived from the fleet's aggregate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PerCoreRates {
    /// What the figure means.
    pub what: String,
    /// Median over all results of the last hour.
    pub overall: Option<f64>,
    /// By CPU model.
    pub by_cpu_model: Vec<RateGroup>,
    /// By engine kind.
    pub by_engine_kind: Vec<RateGroup>,
    /// By host.
    pub by_host: Vec<RateGroup>,
}

/// Unit events of the last minute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitEvents {
    /// Leases handed out.
    pub leased: u64,
    /// Results received.
    pub completed: u64,
    /// Leases that expired.
    pub expired: u64,
}

/// The fleet summary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FleetStatus {
    /// Workers by state.
    pub workers: WorkerCounts,
    /// Nodes per wall-clock second across the fleet, last 60 s.
    pub aggregate_nodes_per_s: AggregateRate,
    /// One sample per minute of the last hour.
    pub aggregate_series: Vec<MinuteSample>,
    /// Per-core rates (one engine thread), last hour.
    pub per_core_nodes_per_s: PerCoreRates,
    /// Unit events of the last minute.
    pub units_last_minute: UnitEvents,
    /// Results marked wrong, ever.
    pub wrong_results: u64,
}

/// One worker.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerStatus {
    /// Worker id.
    pub id: WorkerId,
    /// The account it enrolled with.
    pub account: AccountId,
    /// What it says it is (labels), flattened into the JSON object.
    #[serde(flatten)]
    pub host: HostInfo,
    /// Engine build of its last lease request.
    pub engine_build: String,
    /// Hardware class at its last registration.
    pub class_id: String,
    /// Registration time, ms since the epoch.
    pub registered_ms: i64,
    /// Last call, ms since the epoch.
    pub last_seen_ms: i64,
    /// Its own per-core rate from its last heartbeat.
    pub per_core_rate: f64,
    /// Engine threads from its last heartbeat.
    pub threads: u32,
    /// Why its engines are paused, from its last heartbeat (the pause file, on battery,
    /// ...); empty while they run.
    #[serde(default)]
    pub paused: String,
    /// Share (0 to 1) of its engine threads' time it waited on the coordinator (a lease
    /// call out, the coordinator unreachable), from its last heartbeat.
    #[serde(default)]
    pub network_wait: f64,
    /// Median round trip of its calls, ms, from its last heartbeat (0: not measured).
    #[serde(default)]
    pub round_trip_ms: f64,
    /// Units whose result it had accepted.
    pub units_done: u64,
    /// Wrong results counted against it.
    pub errors: u64,
    /// Quarantined (refused work).
    pub quarantined: bool,
    /// Active leases it holds.
    pub leases_held: u64,
    /// Its state.
    pub state: WorkerState,
}

impl WorkerStatus {
    /// The view anyone may read (the public JSON API and the dashboard): labels, not
    /// fingerprints. The CPU features, the hardware class and the engine release and build
    /// go, and
    /// the compiler shows as `rustc X.Y` (its full version would help rebuild the
    /// machine's hardware class offline); operators see everything with the admin token.
    pub fn public(mut self) -> WorkerStatus {
        self.host.target_features.clear();
        self.host.engine_release.clear();
        self.engine_build.clear();
        self.class_id.clear();
        self.host.rustc_version = coarse_rustc(&self.host.rustc_version);
        self
    }

    /// Why its engines are paused, when it was seen lately (online or idle) and said so
    /// in its last heartbeat; an offline worker's last word is not shown as a pause.
    pub fn paused_now(&self) -> Option<&str> {
        paused_now(self.state, &self.paused)
    }
}

/// `rustc 1.95.0 (59807616e 2026-04-14)` as `rustc 1.95`; anything else as `rustc`, and
/// nothing as nothing.
fn coarse_rustc(full: &str) -> String {
    if full.trim().is_empty() {
        return String::new();
    }
    let version = full.split_whitespace().nth(1).unwrap_or("");
    let mut parts = version.split('.');
    match (parts.next(), parts.next()) {
        (Some(major), Some(minor))
            if major.chars().all(|c| c.is_ascii_digit())
                && minor.chars().all(|c| c.is_ascii_digit()) =>
        {
            format!("rustc {major}.{minor}")
        }
        _ => "rustc".into(),
    }
}

/// The pause reason a worker in `state` whose last heartbeat said `paused` shows: the
/// one rule the worker list, the fleet counts and the CLI share.
pub fn paused_now(state: WorkerState, paused: &str) -> Option<&str> {
    (matches!(state, WorkerState::Online | WorkerState::Idle) && !paused.is_empty())
        .then_some(paused)
}

/// An account: who an enrolment token belongs to, its trust and its credit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AccountStatus {
    /// Its name.
    pub id: AccountId,
    /// Whose it is.
    pub kind: AccountKind,
    /// Creation time, ms since the epoch.
    pub created_ms: i64,
    /// When it was revoked.
    pub revoked_ms: Option<i64>,
    /// Whether its results count alone (the operator's, or earned).
    pub trusted: bool,
    /// Consecutive results another account confirmed (a wrong one restarts it).
    pub confirmed_streak: u64,
    /// Results another party confirmed, ever (what earns trust).
    pub confirmed_results: u64,
    /// Their nodes.
    pub confirmed_nodes: u64,
    /// Results that hold credit: they count (accepted on trust or confirmed, or agreeing
    /// with the accepted result), less those later found wrong or voided.
    pub credit_results: u64,
    /// Their nodes: the account's credit.
    pub credit_nodes: u64,
    /// Wrong results of its workers.
    pub errors: u64,
    /// Refused work as a whole.
    pub quarantined: bool,
    /// Its worker identities.
    pub workers: u64,
    /// Its team, if it is in one.
    pub team: Option<TeamId>,
}

/// A suite unit's exact expected result, in short.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpectedSummary {
    /// Committed nodes.
    pub committed: u64,
    /// Solutions.
    pub solutions_count: u64,
    /// Digest of the whole result.
    pub digest: String,
}

/// A suite unit as the matrix shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatrixUnit {
    /// Unit name.
    pub name: String,
    /// Built-in puzzle name.
    pub puzzle: String,
    /// Fill order spec.
    pub order: String,
    /// Depth of the unit's prefix.
    pub prefix_depth: usize,
    /// Which prefix of that depth.
    pub prefix_index: usize,
    /// Node budget.
    pub budget: Option<u64>,
    /// Counts toward the speed table.
    pub speed: bool,
    /// Its exact result, when known.
    pub expected: Option<ExpectedSummary>,
    /// Where the exact result came from ("given", or the classes that agreed).
    pub expected_source: String,
}

/// One cell: a hardware class's latest result on one unit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MatrixCell {
    /// The verdict.
    pub verdict: Verdict,
    /// Results the class submitted for the unit.
    pub results: u64,
    /// Nodes of the latest.
    pub nodes: u64,
    /// Median per-core rate of the class on the unit.
    pub per_core_nodes_per_s: Option<f64>,
    /// Engine build of the latest.
    pub engine_build: String,
    /// Hosts that ran it.
    pub hosts: Vec<String>,
    /// When the latest arrived, ms since the epoch.
    pub last_ms: i64,
}

impl MatrixCell {
    /// A unit the class has not run.
    pub fn not_run() -> MatrixCell {
        MatrixCell {
            verdict: Verdict::NotRun,
            results: 0,
            nodes: 0,
            per_core_nodes_per_s: None,
            engine_build: String::new(),
            hosts: Vec::new(),
            last_ms: 0,
        }
    }
}

/// A hardware class and its row of the matrix.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MatrixClass {
    /// Class id.
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
    /// First seen, ms since the epoch.
    pub first_seen_ms: i64,
    /// Disagrees with some unit: gets no real work.
    pub flagged: bool,
    /// Hosts of the class.
    pub hosts: Vec<String>,
    /// One cell per unit, by unit name.
    pub cells: BTreeMap<String, MatrixCell>,
    /// Median per-core rate over the suite's speed units.
    pub speed_nodes_per_s: Option<f64>,
}

/// One row of the speed table: a class's per-core rate on the suite's speed units.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpeedRow {
    /// Class id.
    pub class_id: String,
    /// CPU model.
    pub cpu_model: String,
    /// Architecture.
    pub arch: String,
    /// rustc.
    pub rustc_version: String,
    /// Engine kind.
    pub engine_kind: EngineKind,
    /// Engine release.
    pub engine_release: String,
    /// Median per-core rate.
    pub per_core_nodes_per_s: Option<f64>,
}

/// What the matrix shows (served with it).
pub const MATRIX_WHAT: &str = "rows: hardware classes (CPU model, arch, OS, rustc, CPU features, engine kind and release); columns: suite units; a cell is the class's latest result: agrees / DISAGREES / pending (no expected result yet) / not run, with its per-core rate";

/// The conformance matrix of a suite.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VerificationMatrix {
    /// Suite name.
    pub suite: String,
    /// What the matrix shows.
    pub what: String,
    /// The suite's units, in order.
    pub units: Vec<MatrixUnit>,
    /// Hardware classes that ran some unit, oldest first.
    pub classes: Vec<MatrixClass>,
    /// Classes by per-core speed, fastest first.
    pub speed_table: Vec<SpeedRow>,
}

impl VerificationMatrix {
    /// The matrix as anyone may read it (the public JSON API and dashboard): each class's
    /// readable labels (CPU, architecture, OS, rustc version number, engine kind and the
    /// start of its release), not the full fingerprint someone would need to register as
    /// that class. Operators get the whole matrix over the authenticated API.
    pub fn public(mut self) -> VerificationMatrix {
        fn rustc_number(v: &str) -> String {
            v.split_whitespace().take(2).collect::<Vec<_>>().join(" ")
        }
        fn short(v: &str) -> String {
            match v.char_indices().nth(12) {
                Some((i, _)) => format!("{}…", &v[..i]),
                None => v.to_string(),
            }
        }
        for c in &mut self.classes {
            c.rustc_version = rustc_number(&c.rustc_version);
            c.engine_release = short(&c.engine_release);
            c.target_features = String::new();
        }
        for r in &mut self.speed_table {
            r.rustc_version = rustc_number(&r.rustc_version);
            r.engine_release = short(&r.engine_release);
        }
        self
    }

    /// Builds the speed table from the classes (fastest first, unmeasured last).
    pub fn speed_table_of(classes: &[MatrixClass]) -> Vec<SpeedRow> {
        let mut rows: Vec<SpeedRow> = classes
            .iter()
            .map(|c| SpeedRow {
                class_id: c.id.clone(),
                cpu_model: c.cpu_model.clone(),
                arch: c.arch.clone(),
                rustc_version: c.rustc_version.clone(),
                engine_kind: c.engine_kind,
                engine_release: c.engine_release.clone(),
                per_core_nodes_per_s: c.speed_nodes_per_s,
            })
            .collect();
        rows.sort_by(|a, b| {
            let x = a.per_core_nodes_per_s.unwrap_or(-1.0);
            let y = b.per_core_nodes_per_s.unwrap_or(-1.0);
            y.total_cmp(&x)
        });
        rows
    }
}

/// The median of `values` (the upper one of an even count), `None` when empty.
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some(values[values.len() / 2])
}
