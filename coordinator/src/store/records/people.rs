//! Accounts and worker identities.

use e2fleet_proto::api::{AccountId, AccountKind, HostInfo, TeamId, WorkerId};

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
    /// Results another party confirmed, ever.
    pub confirmed_results: u64,
    /// Their nodes.
    pub confirmed_nodes: u64,
    /// Results that hold credit: they count (accepted, on trust or confirmed, or agreeing
    /// with the accepted result), less those later found wrong or voided.
    pub credit_results: u64,
    /// Their nodes: the account's credit.
    pub credit_nodes: u64,
    /// Wrong results of its identities.
    pub errors: u64,
    /// Refused work as a whole.
    pub quarantined: bool,
    /// Its worker identities (filled by [`crate::store::Accounts::list_accounts`] only).
    pub workers: u64,
    /// Its team, if it is in one (a label for the stats page).
    pub team: Option<TeamId>,
}

impl AccountRecord {
    /// Whether its workers may get work.
    pub fn active(&self) -> bool {
        self.revoked_ms.is_none() && !self.quarantined
    }
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
    /// Why its engines are paused, from its last heartbeat; empty while they run (and
    /// from each registration until its first heartbeat).
    pub paused: String,
    /// Share of its engine threads' time it waited on the coordinator, from its last
    /// heartbeat (0 to 1; a label).
    pub network_wait: f64,
    /// Median round trip of its calls, ms, from its last heartbeat (0: not measured).
    pub round_trip_ms: f64,
    /// Active leases it holds (filled by [`crate::store::Workers::list_workers`] only).
    pub leases_held: u64,
}

impl WorkerRecord {
    /// A worker identity as registered at `now_ms`: nothing done, seen or said since.
    pub fn registered(
        id: WorkerId,
        account_id: AccountId,
        token_hash: String,
        host: HostInfo,
        class_id: String,
        now_ms: i64,
    ) -> WorkerRecord {
        WorkerRecord {
            id,
            account_id,
            token_hash,
            engine_build: host.engine_release.clone(),
            host,
            class_id,
            registered_ms: now_ms,
            last_seen_ms: now_ms,
            per_core_rate: 0.0,
            threads: 0,
            units_done: 0,
            errors: 0,
            quarantined: false,
            paused: String::new(),
            network_wait: 0.0,
            round_trip_ms: 0.0,
            leases_held: 0,
        }
    }
}

/// What a call tells of a worker besides that it is alive (each `None` keeps what is
/// stored).
#[derive(Clone, Copy, Debug, Default)]
pub struct Seen<'a> {
    /// Per-core rate and engine threads.
    pub rate: Option<(f64, u32)>,
    /// Engine kind and build of a lease request.
    pub engine: Option<(e2fleet_engine::engine::EngineKind, &'a str)>,
    /// Why its engines are paused (empty: they run).
    pub paused: Option<&'a str>,
    /// Network wait share and median round trip, ms.
    pub link: Option<(f64, f64)>,
}

/// Milliseconds in a day (credit is kept per UTC day).
pub const DAY_MS: i64 = 86_400_000;

/// One account's credit on one day.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreditDay {
    /// The account.
    pub account: AccountId,
    /// Days since the epoch (UTC).
    pub day: i64,
    /// Confirmed nodes that day.
    pub nodes: u64,
    /// Confirmed results that day.
    pub results: u64,
}
