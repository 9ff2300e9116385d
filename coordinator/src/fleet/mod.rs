//! The coordinator's domain logic, free of any network code: jobs, units, leases, reports,
//! cross-checks and exact accounting. The gRPC and HTTP layers ([`crate::server`]) convert
//! and call these methods; tests drive them directly or over loopback.
//!
//! # Layout
//! - this file: [`Fleet`] (configuration, clock, caches) and [`FleetError`];
//! - [`policy`]: defaults and limits in one place;
//! - `registration.rs`: worker identities, enrolment, authentication, quarantine release;
//!   `tokens.rs`: fresh tokens and the digests they are stored under;
//! - `accounts.rs`: operator and volunteer accounts, earned trust, voiding;
//! - `submission.rs`: jobs (validation, split depth, enumeration), specs, cancellation;
//! - [`studies`]: order studies (each candidate order a job of probe units, merged into
//!   estimates and ranked);
//! - `sharing.rs`: which job a lease call serves (priorities, shares, pause);
//! - `leasing.rs`: leases, expiry, idle-time and running-unit splits, heartbeats, releases;
//! - `reports.rs`: recording results exactly once; `checks.rs`: verifying a result
//!   without re-running it; `quorum.rs`: deciding units (accept, confirm, overturn);
//! - [`verification`]: suites, hardware classes and the conformance matrix;
//! - `audits.rs`: a job as a certificate anyone can audit, and the audits sent back;
//! - [`auth_limits`]: failed authentications per address, shut out past a limit;
//! - `archiving.rs`: decided units past the detail window, archived in batches.
//!
//! # Accounting
//! `job total = enumeration + split-created prefixes + accepted unit results`, per depth.
//! Enumeration counts are fixed at submission; a continuation split adds one node per new
//! sibling prefix at its depth; a unit's result enters the total exactly once, when a
//! quorum of identical results accepts it, and leaves it again only if a later quorum
//! overturns it (then everything created from it is revoked too).
//!
//! # Cross-checks
//! Each unit has a quorum (1; the job's replicas; 2 for spot-checked units). Results are
//! compared by digest (per-depth counts, cursor, solutions, deepest board). Any
//! disagreement raises the quorum to at least 2 and asks for one more run on another host;
//! losers are marked wrong and count against their host, which is quarantined past a
//! threshold.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use e2fleet_engine::{SearchSpec, Unit};
use e2fleet_proto::api::{JobId, LeaseId, SelfTest};

use crate::store::{JobSource, Store, StoreError};

mod accounts;
mod archiving;
mod audits;
pub mod auth_limits;
mod batches;
pub use batches::{BatchTimes, BatchTotals};
pub mod call_times;
mod checks;
mod heartbeats;
mod leasing;
pub mod policy;
mod quorum;
pub mod refusals;
mod registration;
mod reports;
mod sharing;
pub mod studies;
mod submission;
mod token_cache;
mod tokens;
pub mod verification;

pub use e2fleet_proto::REPORT_MAX_SOLUTIONS;
pub use heartbeats::BeatAnswer;
pub use registration::{MAX_LABEL_BYTES, check_label};
pub use submission::{choose_split_depth, self_tests};
pub use token_cache::{TOKEN_CACHE_TTL, TOKEN_REFRESH_EVERY, TokenRefresh};
pub use tokens::random_token;
pub use verification::FLAGS_TTL;

/// Why a fleet operation failed. [`crate::server::errors`] maps each kind to one gRPC
/// code and one HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// Missing or wrong credentials.
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// Valid credentials, but not for this object.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// No such object.
    #[error("not found: {0}")]
    NotFound(String),
    /// The request is malformed or inconsistent.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The request is valid but the state forbids it.
    #[error("failed precondition: {0}")]
    FailedPrecondition(String),
    /// Too many requests from this caller: retry later, with backoff.
    #[error("too many requests: {0}")]
    TooMany(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Settings of a fleet.
#[derive(Clone, Debug)]
pub struct FleetConfig {
    /// How long a lease lasts without a heartbeat.
    pub lease: Duration,
    /// Wrong results after which a worker identity is quarantined.
    pub quarantine_after: u64,
    /// The operator's own enrolment token (the `operator` account).
    pub enroll_token: String,
    /// The token operator calls need.
    pub admin_token: String,
    /// How volunteers' results earn and lose trust.
    pub trust: TrustPolicy,
    /// The detail window: a unit decided longer ago than this is archived to one compact
    /// row ([`Fleet::archive_decided`]); `None` keeps every row whole.
    pub archive_after: Option<Duration>,
    /// What one volunteer account may hold, however many identities it registers.
    pub accounts: AccountLimits,
}

/// What one volunteer account may hold, over all its worker identities (the operator's
/// own account is not limited): identities are an account's resource, so registering
/// more of them buys nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccountLimits {
    /// Worker identities seen (registered or calling) in the last day.
    pub identities_per_day: u64,
    /// Leases out at once.
    pub leases: u64,
}

impl Default for AccountLimits {
    fn default() -> AccountLimits {
        AccountLimits {
            identities_per_day: policy::ACCOUNT_IDENTITIES_PER_DAY,
            leases: policy::ACCOUNT_LEASES,
        }
    }
}

/// Shortest enrolment or admin token the coordinator starts with.
pub const MIN_TOKEN_LEN: usize = 16;

impl FleetConfig {
    /// Checks what an operator chose: tokens long enough to resist guessing, sane numbers.
    pub fn validate(&self) -> Result<(), String> {
        for (name, token) in [
            ("enrolment token", &self.enroll_token),
            ("admin token", &self.admin_token),
        ] {
            if token.trim().len() < MIN_TOKEN_LEN {
                return Err(format!(
                    "the {name} has {} characters; it needs at least {MIN_TOKEN_LEN} (an empty or short token can be guessed): `openssl rand -hex 16` makes one",
                    token.trim().len()
                ));
            }
        }
        if self.enroll_token == self.admin_token {
            return Err("the enrolment token and the admin token must differ (every volunteer of the operator's account knows the enrolment token)".into());
        }
        if !(0.0..=1.0).contains(&self.trust.recheck) {
            return Err("the trusted recheck fraction must be within 0..=1".into());
        }
        Ok(())
    }
}

/// How a volunteer account's results earn trust (BOINC's adaptive replication, per
/// account): until it has `trust_after` consecutive results confirmed by another account,
/// its results count only when another account agrees; after, they count alone, but a
/// random `recheck` fraction is still run by another account, and one wrong result
/// restarts the count. An account whose identities collect `account_quarantine_after`
/// wrong results is quarantined as a whole.
#[derive(Clone, Debug, PartialEq)]
pub struct TrustPolicy {
    /// Consecutive confirmed results before an account's results count alone.
    pub trust_after: u64,
    /// Fraction of a trusted account's results still run by another account.
    pub recheck: f64,
    /// Wrong results of an account's identities before the account is quarantined.
    pub account_quarantine_after: u64,
    /// Whether a party that loses a cross-check has its unconfirmed accepted results run
    /// again by another party (see `quorum.rs`, "History recheck").
    pub recheck_history: bool,
}

impl Default for TrustPolicy {
    fn default() -> TrustPolicy {
        TrustPolicy {
            trust_after: 10,
            recheck: 0.05,
            account_quarantine_after: 5,
            recheck_history: true,
        }
    }
}

/// Puts a clock behind the fleet so tests can move time.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// Milliseconds since the Unix epoch.
pub fn system_clock() -> Clock {
    Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    })
}

/// The parsed puzzle of a job, cached in memory (a job's puzzle, order and budget never
/// change after submission).
pub struct JobCtx {
    /// Puzzle, fill order and plan.
    pub spec: SearchSpec,
    /// The self-test units handed to workers, computed once per job.
    pub self_tests: OnceLock<Vec<SelfTest>>,
    /// The job's node budget per run.
    pub budget: Option<u64>,
    /// A study's job: boards in each of its probes (its units are probes, not walks).
    pub probe_particles: Option<u32>,
    /// The tree's size estimate, made on first request (`status::job`).
    pub tree: OnceLock<e2fleet_engine::search::estimate::TreeEstimate>,
}

/// Builds the search context of a job from what the store keeps of it.
pub fn job_context(source: &JobSource) -> Result<JobCtx, FleetError> {
    let spec = SearchSpec::from_site_json(&source.puzzle_json, &source.order)
        .map_err(|e| FleetError::InvalidArgument(e.to_string()))?;
    Ok(JobCtx {
        spec,
        self_tests: OnceLock::new(),
        budget: source.budget,
        probe_particles: source.probe_particles,
        tree: OnceLock::new(),
    })
}

/// What a lease was granted on: its job, budget and unit.
#[derive(Clone, Debug)]
pub(crate) struct LeasedUnit {
    pub job_id: JobId,
    pub budget: Option<u64>,
    pub unit: Unit,
}

/// Most entries of the leased-unit hint map before it is emptied (leases that expire are
/// never reported, so entries would otherwise pile up).
const LEASED_HINTS_MAX: usize = 200_000;

/// The coordinator's state and operations.
pub struct Fleet {
    pub(crate) store: Store,
    pub(crate) config: FleetConfig,
    pub(crate) clock: Clock,
    contexts: Mutex<HashMap<JobId, Arc<JobCtx>>>,
    /// Workers by their tokens' hashes, for authentication without a query per call
    /// (`token_cache.rs`).
    tokens: token_cache::TokenCache,
    /// Which classes and identities get no real work, and when computed; `None` =
    /// recompute ([`verification::FLAGS_TTL`]).
    flagged: Mutex<Option<(verification::Flags, std::time::Instant)>>,
    /// When the lease path last expired overdue leases (ms).
    last_expiry_ms: AtomicI64,
    /// When a lease call last looked for a running unit to split (see `leasing`).
    last_yield_ms: AtomicI64,
    /// Lease id -> (job, budget, unit) of the units handed out, so a report is verified
    /// without a read (see `reports::precheck`). A hint only: the write path compares it
    /// with the stored unit and checks again if they differ.
    leased: Mutex<HashMap<LeaseId, LeasedUnit>>,
    /// The default verification suite is stored.
    default_suite_ready: AtomicBool,
    /// (when counted, ms; live independent parties), see [`Fleet::live_parties`].
    live: Mutex<(i64, u32)>,
    /// Whether a unit's first result accepted on its own is written once, decided
    /// ([`Fleet::accept_alone`]); off only to compare it with the general path.
    accept_alone: AtomicBool,
    /// Reports accepted on that path.
    accepted_alone: std::sync::atomic::AtomicU64,
    accepted_in_parts: std::sync::atomic::AtomicU64,
    /// Heartbeats written beside report batches (only extending leases).
    beats_beside_reports: std::sync::atomic::AtomicU64,
    /// Lease calls per worker identity and per volunteer account (see [`policy`]).
    pub(crate) lease_limits: policy::LeaseLimits,
    /// The signed worker releases offered and served, if a folder is set
    /// ([`Fleet::with_releases`]).
    releases: Option<crate::releases::Releases>,
    download_slots: crate::releases::downloads::DownloadSlots,
    /// Failed authentications per address (the gRPC gate and the JSON API's admin calls).
    pub auth_failures: auth_limits::AuthFailures,
    /// How long the calls took to answer (timed by the gRPC gate).
    pub call_times: call_times::CallTimes,
    /// Connections and calls turned away, by reason (counted by the accept loop and the
    /// gRPC gate).
    pub refusals: std::sync::Arc<refusals::Refusals>,
    /// Verification submissions per worker identity.
    pub(crate) verification_limits: governor::DefaultKeyedRateLimiter<e2fleet_proto::api::WorkerId>,
    /// The same per volunteer account, over all its identities.
    pub(crate) account_submission_limits:
        governor::DefaultKeyedRateLimiter<e2fleet_proto::api::AccountId>,
    /// New identities per volunteer account ([`policy::registration_quota`]).
    pub(crate) registration_limits:
        governor::DefaultKeyedRateLimiter<e2fleet_proto::api::AccountId>,
    /// Team changes per volunteer account asked for by its workers
    /// ([`policy::team_change_quota`]).
    pub(crate) team_change_limits: governor::DefaultKeyedRateLimiter<e2fleet_proto::api::AccountId>,
    /// Suite unit (as JSON) -> its puzzle's depths.
    suite_depths: Mutex<HashMap<String, usize>>,
    /// Running jobs and their leases out, for sharing the fleet ([`sharing`]).
    shares: sharing::Shares,
    /// Where the archiver's walk stands.
    archive_walk: archiving::ArchiveWalk,
    /// Studies' rankings as last merged, kept a while ([`studies::RUNNING_TTL`],
    /// [`studies::ENDED_TTL`]).
    merged_studies: studies::MergedStudies,
    /// Reports waiting for their batch ([`batches`]).
    reports: batches::Queue<reports::QueuedReport, e2fleet_proto::api::ReportOutcome>,
    /// Lease requests waiting for their batch ([`batches`]).
    lease_requests: batches::Queue<leasing::QueuedLease, Vec<e2fleet_proto::api::Lease>>,
}

impl Fleet {
    /// A fleet on `store`.
    pub fn new(store: Store, config: FleetConfig, clock: Clock) -> Fleet {
        Fleet {
            store,
            config,
            clock,
            contexts: Mutex::new(HashMap::new()),
            tokens: token_cache::TokenCache::default(),
            flagged: Mutex::new(None),
            last_expiry_ms: AtomicI64::new(i64::MIN / 2),
            last_yield_ms: AtomicI64::new(i64::MIN / 2),
            leased: Mutex::new(HashMap::new()),
            default_suite_ready: AtomicBool::new(false),
            live: Mutex::new((i64::MIN / 2, 0)),
            accept_alone: AtomicBool::new(true),
            accepted_alone: Default::default(),
            accepted_in_parts: Default::default(),
            beats_beside_reports: Default::default(),
            lease_limits: policy::LeaseLimits::new(),
            auth_failures: auth_limits::AuthFailures::default(),
            call_times: call_times::CallTimes::default(),
            refusals: Default::default(),
            verification_limits: governor::RateLimiter::keyed(policy::verification_quota()),
            account_submission_limits: governor::RateLimiter::keyed(
                policy::account_submission_quota(),
            ),
            registration_limits: governor::RateLimiter::keyed(policy::registration_quota()),
            team_change_limits: governor::RateLimiter::keyed(policy::team_change_quota()),
            suite_depths: Mutex::new(HashMap::new()),
            shares: sharing::Shares::default(),
            archive_walk: archiving::ArchiveWalk::default(),
            merged_studies: studies::MergedStudies::default(),
            reports: Default::default(),
            lease_requests: Default::default(),
            releases: None,
            download_slots: Default::default(),
        }
    }

    /// Offers and serves the signed worker releases of `releases`.
    pub fn with_releases(mut self, releases: crate::releases::Releases) -> Fleet {
        self.releases = Some(releases);
        self
    }

    /// The releases folder served, if any.
    pub fn releases(&self) -> Option<&crate::releases::Releases> {
        self.releases.as_ref()
    }

    /// The permits of concurrent downloads.
    pub(crate) fn download_slots(&self) -> &crate::releases::downloads::DownloadSlots {
        &self.download_slots
    }

    /// The worker release offered to workers of `platform` (`ARCH-OS`), empty if none.
    pub fn offered_release(&self, platform: &str) -> String {
        self.releases
            .as_ref()
            .and_then(|r| r.offered(platform))
            .unwrap_or_default()
    }

    /// Independent parties with a live worker (counted at most every
    /// [`policy::LIVE_PARTIES_EVERY_MS`]): volunteer accounts plus operator identities.
    pub(crate) fn live_parties(
        &self,
        tx: &mut dyn crate::store::Tx,
        now: i64,
    ) -> Result<u32, FleetError> {
        {
            let live = self.live.lock().expect("live parties");
            if (now - live.0).abs() < policy::LIVE_PARTIES_EVERY_MS {
                return Ok(live.1);
            }
        }
        let since = now - 2 * self.config.lease.as_millis() as i64;
        let n = tx.live_parties(since)?;
        *self.live.lock().expect("live parties") = (now, n);
        Ok(n)
    }

    /// Turns the written-once path of a unit's first acceptance off (or on again): every
    /// report then goes through [`Fleet::decide`]'s general path. For the test that
    /// compares the two; a coordinator never turns it off.
    #[doc(hidden)]
    pub fn set_accept_alone(&self, on: bool) {
        self.accept_alone
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Reports accepted on the written-once path since the start (for the same test).
    #[doc(hidden)]
    pub fn accepted_alone(&self) -> u64 {
        self.accepted_alone
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Of [`Fleet::accepted_alone`], those accepted in a report batch's part (see
    /// `fleet/batches.rs`). For tests.
    #[doc(hidden)]
    pub fn accepted_in_parts(&self) -> u64 {
        self.accepted_in_parts
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Heartbeats written beside report batches since the start (they only extended
    /// leases; the rest took the single way). For tests.
    #[doc(hidden)]
    pub fn heartbeats_beside_reports(&self) -> u64 {
        self.beats_beside_reports
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The configuration.
    pub fn config(&self) -> &FleetConfig {
        &self.config
    }

    /// The store (for the read models).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The lease-request and report batches written so far (see `fleet/batches.rs`).
    pub fn batch_totals(&self) -> (BatchTotals, BatchTotals) {
        (self.lease_requests.totals(), self.reports.totals())
    }

    /// How long lease requests and reports waited for their batches, and how long the
    /// batches took to write (`fleet/batches.rs`), in that order.
    pub fn batch_times(&self) -> (BatchTimes, BatchTimes) {
        (self.lease_requests.times(), self.reports.times())
    }

    /// The store's writer totals (see [`crate::store::writer`]).
    pub fn writer_stats(&self) -> crate::store::WriterTotals {
        self.store.writer_stats()
    }

    /// Statements and round trips to the database server ([`Store::traffic`]).
    pub fn db_traffic(&self) -> Option<crate::store::TrafficTotals> {
        self.store.traffic()
    }

    /// Which store the fleet is on: `"sqlite"` or `"postgres"`.
    pub fn store_backend(&self) -> &'static str {
        self.store.backend()
    }

    /// Whether this coordinator runs the once-only upkeep ([`Store::is_leader`]).
    pub fn does_upkeep(&self) -> bool {
        self.store.is_leader()
    }

    /// Now, in ms since the epoch (the fleet's clock).
    pub fn now(&self) -> i64 {
        (self.clock)()
    }

    /// Remembers what `lease_id` was granted on.
    pub(crate) fn remember_lease(&self, lease_id: LeaseId, unit: LeasedUnit) {
        let mut map = self.leased.lock().expect("lease hints");
        if map.len() >= LEASED_HINTS_MAX {
            map.clear();
        }
        map.insert(lease_id, unit);
    }

    /// What `lease_id` was granted on, if remembered (forgets it).
    pub(crate) fn recall_lease(&self, lease_id: LeaseId) -> Option<LeasedUnit> {
        self.leased.lock().expect("lease hints").remove(&lease_id)
    }

    /// The cached search context of a job.
    pub async fn context(&self, job_id: JobId) -> Result<Arc<JobCtx>, FleetError> {
        if let Some(ctx) = self.cached_context(job_id) {
            return Ok(ctx);
        }
        let source = self.store.read(move |tx| tx.job_source(job_id)).await?;
        self.cache_context(job_id, source)
    }

    /// [`Fleet::context`] inside a transaction: a cache miss reads the job there.
    pub(crate) fn context_tx(
        &self,
        tx: &mut dyn crate::store::Tx,
        job_id: JobId,
    ) -> Result<Arc<JobCtx>, FleetError> {
        if let Some(ctx) = self.cached_context(job_id) {
            return Ok(ctx);
        }
        self.cache_context(job_id, tx.job_source(job_id)?)
    }

    /// A job's search context if it is cached (never reads the store).
    pub(crate) fn cached_context(&self, job_id: JobId) -> Option<Arc<JobCtx>> {
        self.contexts
            .lock()
            .expect("context cache")
            .get(&job_id)
            .cloned()
    }

    /// Builds and caches the context of a job from its stored source.
    fn cache_context(
        &self,
        job_id: JobId,
        source: Option<JobSource>,
    ) -> Result<Arc<JobCtx>, FleetError> {
        let source = source.ok_or_else(|| FleetError::NotFound(format!("job {job_id}")))?;
        let ctx = Arc::new(job_context(&source)?);
        self.contexts
            .lock()
            .expect("context cache")
            .insert(job_id, ctx.clone());
        Ok(ctx)
    }
}

/// Completes a job with no unfinished units and records its conservation check.
pub(crate) fn finish_if_done(
    tx: &mut dyn crate::store::Tx,
    job_id: JobId,
    now: i64,
) -> Result<(), FleetError> {
    if tx.job_has_unfinished_units(job_id)? {
        return Ok(());
    }
    let job = tx.job(job_id)?.expect("job exists");
    if job.state != e2fleet_proto::api::JobState::Running {
        return Ok(());
    }
    let ok = conservation(tx, &job)?;
    tx.finish_job(
        job_id,
        e2fleet_proto::api::JobState::Complete,
        now,
        Some(ok),
    )?;
    tracing::info!(%job_id, conservation_ok = ok, "job complete");
    Ok(())
}

/// The conservation check: the job's running accepted totals (per depth, and solutions)
/// equal the sum recomputed from every accepted result stored.
pub(crate) fn conservation(
    tx: &mut dyn crate::store::Tx,
    job: &crate::store::JobRecord,
) -> Result<bool, FleetError> {
    let mut recomputed = vec![0u64; job.depths];
    let mut solutions = 0u64;
    for r in tx.accepted_bodies_of_job(job.id)? {
        e2fleet_engine::unit::add_counts(&mut recomputed, &r.nodes_by_depth);
        solutions += r.solutions_count;
    }
    Ok(recomputed == job.accepted && solutions == job.accepted_solutions)
}
