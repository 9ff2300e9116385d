//! The coordinator's domain logic, free of any network code: jobs, units, leases, reports,
//! cross-checks and exact accounting. The gRPC layer ([`crate::service`]) converts and
//! calls these methods; tests drive them directly or over loopback.
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
use std::sync::{Arc, Mutex};
use std::time::Duration;

use e2fleet_engine::formats::{LoadOptions, parse_str};
use e2fleet_engine::plan::SearchPlan;
use e2fleet_engine::search::{NoControl, RunOptions, Walker};
use e2fleet_engine::unit::add_counts;
use e2fleet_engine::verify::verify_board;
use e2fleet_engine::{FillOrder, OrderSpec, Puzzle, Unit, UnitResult};
use rand::RngCore;
use serde::Serialize;
use sha2::{Digest, Sha256};
use tracing::{info, warn};

use crate::store::jobs::{JobHead, JobRow};
use crate::store::leases::LeaseRow;
use crate::store::results::ResultRow;
use crate::store::units::{NewUnit, UnitRow};
use crate::store::workers::WorkerRow;
use crate::store::{Store, StoreError, jobs, leases, parse_json, results, units, workers};

mod leasing;
mod reports;
mod submission;
pub mod verification;

pub use e2fleet_proto::REPORT_MAX_SOLUTIONS;
pub use submission::{choose_split_depth, self_tests};
/// Most units a job may be split into.
pub const MAX_UNITS_PER_JOB: usize = 5_000_000;

/// Why a fleet operation failed. [`crate::service`] maps each kind to one gRPC code.
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
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<sqlx::Error> for FleetError {
    fn from(e: sqlx::Error) -> Self {
        FleetError::Store(StoreError::Db(e))
    }
}

/// Settings of a fleet.
#[derive(Clone, Debug)]
pub struct FleetConfig {
    /// How long a lease lasts without a heartbeat.
    pub lease: Duration,
    /// Errors after which a host is quarantined.
    pub quarantine_after: i64,
    /// The token workers enrol with.
    pub enroll_token: String,
    /// The token operator calls need.
    pub admin_token: String,
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

/// What a host says about itself.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Host {
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
    pub engine_kind: String,
    /// Engine release (generator + runtime + flags), the same for every puzzle.
    pub engine_release: String,
}

impl Host {
    /// The hardware class: a short SHA-256 of everything that must match for two results
    /// to count as "the same hardware and build".
    pub fn class_id(&self) -> String {
        let fields = [
            &self.cpu_model,
            &self.arch,
            &self.os,
            &self.rustc_version,
            &self.target_features,
            &self.engine_kind,
            &self.engine_release,
        ];
        let joined: Vec<&str> = fields.iter().map(|s| s.as_str()).collect();
        sha256_hex(joined.join("\u{1f}").as_bytes())[..12].to_string()
    }
}

/// A new job.
#[derive(Clone, Debug)]
pub struct JobRequest {
    /// Human name.
    pub name: String,
    /// The puzzle as site JSON.
    pub puzzle_json: String,
    /// Fill order spec.
    pub order: String,
    /// Split depth, or `None` to choose from `target_units`.
    pub split_depth: Option<usize>,
    /// Wanted number of units.
    pub target_units: usize,
    /// Node budget per run.
    pub budget: Option<u64>,
    /// Runs per unit on different hosts.
    pub replicas: u32,
    /// Fraction of units run twice.
    pub spot_check: f64,
}

/// A leased unit.
#[derive(Clone, Debug)]
pub struct LeaseGrant {
    /// Lease id.
    pub lease_id: String,
    /// Unit id.
    pub unit_id: i64,
    /// Job id.
    pub job_id: String,
    /// The unit.
    pub unit: Unit,
    /// Node budget per run.
    pub budget: Option<u64>,
    /// Lease deadline, ms since the epoch.
    pub deadline_ms: i64,
}

/// A job's puzzle and order, and self-test units with known results.
#[derive(Clone, Debug)]
pub struct JobSpec {
    /// The puzzle as site JSON.
    pub puzzle_json: String,
    /// Fill order spec.
    pub order: String,
    /// Self-test units.
    pub self_tests: Vec<SelfTest>,
}

/// A unit with its exact expected result, for checking a new engine build.
#[derive(Clone, Debug)]
pub struct SelfTest {
    /// The unit.
    pub unit: Unit,
    /// Node budget per run.
    pub budget: Option<u64>,
    /// Its exact result.
    pub expected: UnitResult,
}

/// One report.
#[derive(Clone, Debug)]
pub struct Report {
    /// Lease id.
    pub lease_id: String,
    /// Unit id.
    pub unit_id: i64,
    /// The result.
    pub result: UnitResult,
    /// Engine-thread seconds.
    pub engine_seconds: f64,
    /// Engine kind.
    pub engine_kind: String,
    /// Engine build id.
    pub engine_build: String,
}

/// What became of a report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportOutcome {
    /// `accepted`, `replica`, `duplicate`, `pending_check`, `mismatch`, `wrong` or `rejected`.
    pub status: &'static str,
    /// Human detail.
    pub detail: String,
}

/// The parsed puzzle of a job, cached in memory.
pub struct JobCtx {
    /// The puzzle.
    pub puzzle: Puzzle,
    /// The fill order.
    pub order: FillOrder,
    /// The search plan.
    pub plan: Arc<SearchPlan>,
    /// The self-test units handed to workers, computed once per job.
    pub self_tests: std::sync::OnceLock<Vec<SelfTest>>,
    /// The job's node budget per run (0 = none); fixed at submission.
    pub budget: i64,
}

/// What a lease was granted on: its job, budget, and the unit's stored prefix and cursor.
#[derive(Clone, Debug)]
pub(crate) struct LeasedUnit {
    pub job_id: String,
    pub budget: i64,
    pub prefix_json: String,
    pub cursor_json: String,
}

/// Most entries of the leased-unit hint map before it is emptied (leases that expire are
/// never reported, so entries would otherwise pile up).
const LEASED_HINTS_MAX: usize = 200_000;

/// The coordinator's state and operations.
pub struct Fleet {
    pub(crate) store: Store,
    pub(crate) config: FleetConfig,
    pub(crate) clock: Clock,
    contexts: Mutex<HashMap<String, Arc<JobCtx>>>,
    /// Token hash -> worker, for authentication without a query per call. Only identity
    /// fields are used from it; quarantine is always read from the store.
    tokens: Mutex<HashMap<String, WorkerRow>>,
    /// Hardware class -> why it gets no real work; `None` = recompute.
    flagged: Mutex<Option<HashMap<String, String>>>,
    /// When the lease path last expired overdue leases (ms).
    last_expiry_ms: std::sync::atomic::AtomicI64,
    /// Lease id -> (job, budget, prefix, cursor) of the units handed out, so a report is
    /// verified without a read (see `reports::precheck`). A hint only: the write path
    /// compares it with the stored unit and checks again if they differ.
    leased: Mutex<HashMap<String, LeasedUnit>>,
    /// The default verification suite is stored.
    default_suite_ready: std::sync::atomic::AtomicBool,
}

fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub use e2fleet_engine::unit::result_digest;

/// A fresh random token.
pub fn random_token() -> String {
    let mut bytes = [0u8; 24];
    rand::rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn constant_time_eq(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

fn to_json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("domain values serialise")
}

/// Builds the search context of a job's puzzle and order (and its node budget, 0 = none).
pub fn job_context(puzzle_json: &str, order: &str, budget: i64) -> Result<JobCtx, FleetError> {
    let puzzle = parse_str(puzzle_json, "job.json", &LoadOptions::default())
        .map_err(|e| FleetError::InvalidArgument(format!("puzzle: {}", e.kind)))?;
    let spec: OrderSpec = order
        .parse()
        .map_err(|e| FleetError::InvalidArgument(format!("order: {e}")))?;
    let order = FillOrder::new(&puzzle, &spec)
        .map_err(|e| FleetError::InvalidArgument(format!("order: {e}")))?;
    let plan = Arc::new(SearchPlan::new(&puzzle, &order));
    Ok(JobCtx {
        puzzle,
        order,
        plan,
        self_tests: std::sync::OnceLock::new(),
        budget,
    })
}

impl Fleet {
    /// A fleet on `store`.
    pub fn new(store: Store, config: FleetConfig, clock: Clock) -> Fleet {
        Fleet {
            store,
            config,
            clock,
            contexts: Mutex::new(HashMap::new()),
            tokens: Mutex::new(HashMap::new()),
            flagged: Mutex::new(None),
            last_expiry_ms: std::sync::atomic::AtomicI64::new(i64::MIN / 2),
            leased: Mutex::new(HashMap::new()),
            default_suite_ready: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &FleetConfig {
        &self.config
    }

    /// The store's writer thread totals (see [`crate::store::writer`]).
    pub fn writer_stats(&self) -> crate::store::writer::WriterTotals {
        self.store.writer_stats()
    }

    fn now(&self) -> i64 {
        (self.clock)()
    }

    /// Remembers what `lease_id` was granted on.
    pub(crate) fn remember_lease(&self, lease_id: &str, unit: LeasedUnit) {
        let mut map = self.leased.lock().expect("lease hints");
        if map.len() >= LEASED_HINTS_MAX {
            map.clear();
        }
        map.insert(lease_id.to_string(), unit);
    }

    /// What `lease_id` was granted on, if remembered (forgets it).
    pub(crate) fn recall_lease(&self, lease_id: &str) -> Option<LeasedUnit> {
        self.leased.lock().expect("lease hints").remove(lease_id)
    }

    /// The cached search context of a job.
    pub async fn context(&self, job_id: &str) -> Result<Arc<JobCtx>, FleetError> {
        if let Some(ctx) = self.cached_context(job_id) {
            return Ok(ctx);
        }
        let mut conn = self.store.pool().acquire().await?;
        let job = jobs::get_with_puzzle(&mut conn, job_id).await?;
        self.cache_context(job_id, job)
    }

    /// [`Fleet::context`] on the write path: a cache miss reads the job on the writer's
    /// connection.
    pub(crate) fn context_tx(
        &self,
        c: &rusqlite::Connection,
        job_id: &str,
    ) -> Result<Arc<JobCtx>, FleetError> {
        if let Some(ctx) = self.cached_context(job_id) {
            return Ok(ctx);
        }
        self.cache_context(job_id, jobs::get_with_puzzle_tx(c, job_id)?)
    }

    fn cached_context(&self, job_id: &str) -> Option<Arc<JobCtx>> {
        self.contexts
            .lock()
            .expect("context cache")
            .get(job_id)
            .cloned()
    }

    /// Builds and caches the context of `job` (read with its puzzle).
    fn cache_context(&self, job_id: &str, job: Option<JobRow>) -> Result<Arc<JobCtx>, FleetError> {
        let job = job.ok_or_else(|| FleetError::NotFound(format!("job {job_id}")))?;
        let ctx = Arc::new(job_context(&job.puzzle_json, &job.order_spec, job.budget)?);
        self.contexts
            .lock()
            .expect("context cache")
            .insert(job_id.to_string(), ctx.clone());
        Ok(ctx)
    }

    // ------------------------------------------------------------ authentication

    /// Checks the admin token.
    pub fn check_admin(&self, token: Option<&str>) -> Result<(), FleetError> {
        match token {
            Some(t) if constant_time_eq(t, &self.config.admin_token) => Ok(()),
            Some(_) => Err(FleetError::Unauthenticated("wrong admin token".into())),
            None => Err(FleetError::Unauthenticated("missing admin token".into())),
        }
    }

    /// The worker a bearer token belongs to.
    pub async fn worker_by_token(&self, token: Option<&str>) -> Result<WorkerRow, FleetError> {
        let token =
            token.ok_or_else(|| FleetError::Unauthenticated("missing worker token".into()))?;
        let hash = sha256_hex(token.as_bytes());
        if let Some(w) = self.tokens.lock().expect("token cache").get(&hash) {
            return Ok(w.clone());
        }
        let mut conn = self.store.pool().acquire().await?;
        let worker = workers::by_token(&mut conn, &hash).await?.ok_or_else(|| {
            FleetError::Unauthenticated("unknown worker token; register again".into())
        })?;
        self.tokens
            .lock()
            .expect("token cache")
            .insert(hash, worker.clone());
        Ok(worker)
    }

    /// Enrols a worker; returns its id and its own token.
    pub async fn register_worker(
        &self,
        enroll_token: &str,
        host: Host,
        previous_worker_id: Option<&str>,
    ) -> Result<(String, String), FleetError> {
        if !constant_time_eq(enroll_token, &self.config.enroll_token) {
            return Err(FleetError::Unauthenticated("wrong enrolment token".into()));
        }
        if host.hostname.is_empty() || host.hostname.len() > 255 {
            return Err(FleetError::InvalidArgument(
                "hostname must be 1..=255 bytes".into(),
            ));
        }
        let mut tx = self.store.begin().await?;
        let mut id = uuid::Uuid::new_v4().to_string();
        if let Some(prev) = previous_worker_id
            && workers::get(&mut tx, prev).await?.is_some()
        {
            id = prev.to_string();
        }
        let token = random_token();
        let now = self.now();
        let class_id = host.class_id();
        crate::store::verification::upsert_class(&mut tx, &class_id, &host, now).await?;
        let row = WorkerRow {
            id: id.clone(),
            token_hash: sha256_hex(token.as_bytes()),
            hostname: host.hostname.clone(),
            cpu_model: host.cpu_model,
            cores: host.cores as i64,
            arch: host.arch,
            os: host.os,
            rustc_version: host.rustc_version,
            worker_version: host.worker_version,
            engine_kind: host.engine_kind,
            engine_build: host.engine_release,
            target_features: host.target_features,
            class_id,
            registered_ms: now,
            last_seen_ms: now,
            per_core_rate: 0.0,
            threads: 0,
            units_done: 0,
            errors: 0,
            quarantined: false,
            leases_held: 0,
        };
        workers::upsert(&mut tx, &row).await?;
        tx.commit().await?;
        // a re-registration replaces the worker's token: forget the old one
        self.tokens
            .lock()
            .expect("token cache")
            .retain(|_, w| w.id != id);
        info!(worker_id = %id, hostname = %host.hostname, "worker registered");
        Ok((id, token))
    }

    /// Lifts a host's quarantine.
    pub async fn release_host(&self, hostname: &str) -> Result<u64, FleetError> {
        let mut tx = self.store.begin().await?;
        let n = workers::release_host(&mut tx, hostname).await?;
        tx.commit().await?;
        info!(%hostname, released = n, "host released");
        Ok(n)
    }
}

/// The quorum of a new unit: the job's replicas, or 2 for a spot-checked unit.
pub(crate) fn quorum_for(job_id: &str, index: u64, replicas: u32, spot_check: f64) -> i64 {
    if replicas > 1 {
        return replicas as i64;
    }
    if spot_check <= 0.0 {
        return 1;
    }
    let h = Sha256::digest(format!("{job_id}/{index}").as_bytes());
    let x = u64::from_le_bytes(h[..8].try_into().expect("8 bytes")) as f64 / u64::MAX as f64;
    if x < spot_check { 2 } else { 1 }
}

/// Completes a job with no unfinished units and records its conservation check.
pub(crate) fn finish_if_done(
    c: &rusqlite::Connection,
    job_id: &str,
    now: i64,
) -> Result<(), FleetError> {
    if units::unfinished(c, job_id)? {
        return Ok(());
    }
    let job = jobs::get_tx(c, job_id)?.expect("job exists");
    if job.state != "running" {
        return Ok(());
    }
    let ok = conservation(c, &job)?;
    jobs::finish(c, job_id, "complete", now, Some(ok))?;
    info!(%job_id, conservation_ok = ok, "job complete");
    Ok(())
}

/// The conservation check: the job's running accepted totals (per depth, and solutions)
/// equal the sum recomputed from every accepted result stored.
pub(crate) fn conservation(c: &rusqlite::Connection, job: &JobRow) -> Result<bool, FleetError> {
    let mut recomputed = vec![0u64; job.depths as usize];
    let mut solutions = 0i64;
    for r in results::accepted_for_job(c, &job.id)? {
        let res: UnitResult = parse_json(&r.result_json, "result")?;
        add_counts(&mut recomputed, &res.nodes_by_depth);
        solutions += res.solutions_count as i64;
    }
    Ok(recomputed == job.counts("accepted")? && solutions == job.accepted_solutions)
}
