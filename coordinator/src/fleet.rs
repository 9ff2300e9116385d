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
use e2fleet_engine::{FillOrder, OrderSpec, Placement, Puzzle, Unit, UnitResult};
use rand::RngCore;
use serde::Serialize;
use sha2::{Digest, Sha256};
use tracing::{info, warn};

use crate::store::jobs::JobRow;
use crate::store::leases::LeaseRow;
use crate::store::results::ResultRow;
use crate::store::units::{NewUnit, UnitRow};
use crate::store::workers::WorkerRow;
use crate::store::{Store, StoreError, Tx, jobs, leases, parse_json, results, units, workers};

pub use e2fleet_proto::REPORT_MAX_SOLUTIONS;
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
}

/// The coordinator's state and operations.
pub struct Fleet {
    pub(crate) store: Store,
    pub(crate) config: FleetConfig,
    pub(crate) clock: Clock,
    contexts: Mutex<HashMap<String, Arc<JobCtx>>>,
    /// Token hash -> worker, for authentication without a query per call. Only identity
    /// fields are used from it; quarantine is always read from the store.
    tokens: Mutex<HashMap<String, WorkerRow>>,
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

/// Builds the search context of a job's puzzle and order.
pub fn job_context(puzzle_json: &str, order: &str) -> Result<JobCtx, FleetError> {
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
        }
    }

    /// The configuration.
    pub fn config(&self) -> &FleetConfig {
        &self.config
    }

    fn now(&self) -> i64 {
        (self.clock)()
    }

    /// The cached search context of a job.
    pub async fn context(&self, job_id: &str) -> Result<Arc<JobCtx>, FleetError> {
        if let Some(ctx) = self.contexts.lock().expect("context cache").get(job_id) {
            return Ok(ctx.clone());
        }
        let mut conn = self.store.pool().acquire().await?;
        let job = jobs::get_with_puzzle(&mut conn, job_id)
            .await?
            .ok_or_else(|| FleetError::NotFound(format!("job {job_id}")))?;
        let ctx = Arc::new(job_context(&job.puzzle_json, &job.order_spec)?);
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
            engine_kind: String::new(),
            engine_build: String::new(),
            registered_ms: now,
            last_seen_ms: now,
            per_core_rate: 0.0,
            threads: 0,
            units_done: 0,
            errors: 0,
            quarantined: false,
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

    // ------------------------------------------------------------ jobs

    /// Validates, splits and stores a job; returns (job id, units, split depth).
    pub async fn submit_job(
        &self,
        request: JobRequest,
    ) -> Result<(String, usize, usize), FleetError> {
        if request.replicas == 0 || request.replicas > 9 {
            return Err(FleetError::InvalidArgument("replicas must be 1..=9".into()));
        }
        if !(0.0..=1.0).contains(&request.spot_check) {
            return Err(FleetError::InvalidArgument(
                "spot_check must be within 0..=1".into(),
            ));
        }
        if request.budget == Some(0) {
            return Err(FleetError::InvalidArgument(
                "a budget must be at least 1 node".into(),
            ));
        }
        let ctx = job_context(&request.puzzle_json, &request.order)?;
        let depths = ctx.plan.len();
        let depth = match request.split_depth {
            Some(d) if d > depths => {
                return Err(FleetError::InvalidArgument(format!(
                    "split depth {d} is past the {depths} free cells"
                )));
            }
            Some(d) => d,
            None => choose_split_depth(&ctx.plan, request.target_units.max(1)),
        };
        let mut prefixes = Vec::new();
        let mut too_many = false;
        let enumeration = Walker::new(&ctx.plan)
            .enumerate(&[], depth, &mut |p| {
                if prefixes.len() < MAX_UNITS_PER_JOB {
                    prefixes.push(p.to_vec());
                } else {
                    too_many = true;
                }
            })
            .map_err(|e| FleetError::InvalidArgument(e.to_string()))?;
        if too_many {
            return Err(FleetError::InvalidArgument(format!(
                "split depth {depth} makes more than {MAX_UNITS_PER_JOB} units; choose a smaller depth"
            )));
        }
        let job_id = uuid::Uuid::new_v4().to_string();
        let now = self.now();
        let enumeration_solutions = if depth == depths && depth > 0 {
            prefixes.len() as i64
        } else {
            0
        };
        let row = JobRow {
            id: job_id.clone(),
            name: request.name.clone(),
            puzzle_json: e2fleet_engine::formats::to_site_json(&ctx.puzzle),
            order_spec: ctx.order.spec().to_string(),
            depths: depths as i64,
            split_depth: depth as i64,
            budget: request.budget.unwrap_or(0) as i64,
            replicas: request.replicas as i64,
            spot_check: request.spot_check,
            state: "running".into(),
            created_ms: now,
            finished_ms: None,
            enumeration_json: to_json(&enumeration),
            enumeration_solutions,
            split_json: to_json(&vec![0u64; depths]),
            accepted_json: to_json(&vec![0u64; depths]),
            accepted_solutions: 0,
            conservation_ok: None,
        };
        let new_units: Vec<NewUnit> = prefixes
            .iter()
            .enumerate()
            .map(|(i, p)| NewUnit {
                prefix_json: to_json(p),
                cursor_json: "[]".into(),
                parent_id: None,
                kind: "root",
                quorum: quorum_for(&job_id, i as u64, request.replicas, request.spot_check),
            })
            .collect();
        let mut tx = self.store.begin().await?;
        jobs::insert(&mut tx, &row).await?;
        units::insert_batch(&mut tx, &job_id, &new_units, now).await?;
        if new_units.is_empty() {
            finish_if_done(&mut tx, &job_id, now).await?;
        }
        tx.commit().await?;
        self.contexts
            .lock()
            .expect("context cache")
            .insert(job_id.clone(), Arc::new(ctx));
        info!(%job_id, units = new_units.len(), depth, "job split");
        Ok((job_id, new_units.len(), depth))
    }

    /// A job's puzzle, order and self-tests.
    pub async fn job_spec(&self, job_id: &str) -> Result<JobSpec, FleetError> {
        let ctx = self.context(job_id).await?;
        let mut conn = self.store.pool().acquire().await?;
        let job = jobs::get_with_puzzle(&mut conn, job_id)
            .await?
            .ok_or_else(|| FleetError::NotFound(format!("job {job_id}")))?;
        Ok(JobSpec {
            puzzle_json: job.puzzle_json,
            order: job.order_spec,
            self_tests: self_tests(&ctx.plan),
        })
    }

    /// Cancels a job: no more leases, held leases are told to stop.
    pub async fn cancel_job(&self, job_id: &str) -> Result<(), FleetError> {
        let mut tx = self.store.begin().await?;
        let job = jobs::get(&mut tx, job_id)
            .await?
            .ok_or_else(|| FleetError::NotFound(format!("job {job_id}")))?;
        if job.state != "running" {
            return Err(FleetError::FailedPrecondition(format!(
                "job is {}",
                job.state
            )));
        }
        leases::cancel_job(&mut tx, job_id).await?;
        units::cancel_job(&mut tx, job_id).await?;
        jobs::finish(&mut tx, job_id, "cancelled", self.now(), None).await?;
        tx.commit().await?;
        info!(%job_id, "job cancelled");
        Ok(())
    }

    // ------------------------------------------------------------ leases

    /// Returns expired leases' units to the queue.
    pub async fn expire_leases(&self) -> Result<usize, FleetError> {
        let mut tx = self.store.begin().await?;
        let n = expire(&mut tx, self.now()).await?;
        tx.commit().await?;
        Ok(n)
    }

    /// Leases up to `max` units to a worker.
    pub async fn lease_units(
        &self,
        worker: &WorkerRow,
        max: usize,
        engine: (&str, &str),
    ) -> Result<Vec<LeaseGrant>, FleetError> {
        let max = max.clamp(1, 256) as i64;
        let now = self.now();
        let mut tx = self.store.begin().await?;
        expire(&mut tx, now).await?;
        workers::touch(&mut tx, &worker.id, now, None, Some(engine)).await?;
        let current = workers::get(&mut tx, &worker.id).await?;
        if current.is_none_or(|w| w.quarantined) {
            tx.commit().await?;
            return Ok(Vec::new());
        }
        let mut rows = units::leasable(&mut tx, &worker.hostname, max).await?;
        if (rows.len() as i64) < max {
            // idle capacity: split a waiting continuation into sibling prefixes
            if let Some(unit) = units::splittable(&mut tx).await?
                && self.split_unit(&mut tx, &unit, now).await?
            {
                rows = units::leasable(&mut tx, &worker.hostname, max).await?;
            }
        }
        let mut grants = Vec::with_capacity(rows.len());
        let mut job_cache: Vec<JobRow> = Vec::new();
        for row in rows {
            if !job_cache.iter().any(|j: &JobRow| j.id == row.job_id) {
                let job = jobs::get(&mut tx, &row.job_id)
                    .await?
                    .expect("unit has a job");
                job_cache.push(job);
            }
            let job = job_cache
                .iter()
                .find(|j| j.id == row.job_id)
                .expect("cached above");
            let lease = LeaseRow {
                id: uuid::Uuid::new_v4().to_string(),
                unit_id: row.id,
                worker_id: worker.id.clone(),
                hostname: worker.hostname.clone(),
                budget: job.budget,
                created_ms: now,
                deadline_ms: now + self.config.lease.as_millis() as i64,
                state: "active".into(),
            };
            leases::insert(&mut tx, &lease).await?;
            units::adjust(&mut tx, row.id, 1, 0, None).await?;
            grants.push(LeaseGrant {
                lease_id: lease.id,
                unit_id: row.id,
                job_id: row.job_id.clone(),
                unit: Unit {
                    prefix: parse_json(&row.prefix_json, "prefix")?,
                    cursor: parse_json(&row.cursor_json, "cursor")?,
                },
                budget: (job.budget > 0).then_some(job.budget as u64),
                deadline_ms: lease.deadline_ms,
            });
        }
        tx.commit().await?;
        Ok(grants)
    }

    async fn split_unit(&self, tx: &mut Tx, row: &UnitRow, now: i64) -> Result<bool, FleetError> {
        let ctx = self.context(&row.job_id).await?;
        let unit = Unit {
            prefix: parse_json(&row.prefix_json, "prefix")?,
            cursor: parse_json(&row.cursor_json, "cursor")?,
        };
        let split = Walker::new(&ctx.plan)
            .split_continuation(&unit)
            .map_err(|e| {
                FleetError::FailedPrecondition(format!("cannot split unit {}: {e}", row.id))
            })?;
        let job = jobs::get(tx, &row.job_id).await?.expect("unit has a job");
        let mut split_counts = job.counts("split")?;
        let depth = unit.prefix.len();
        split_counts[depth] += split.siblings.len() as u64;
        let siblings: Vec<NewUnit> = split
            .siblings
            .iter()
            .map(|s| NewUnit {
                prefix_json: to_json(&s.prefix),
                cursor_json: "[]".into(),
                parent_id: Some(row.id),
                kind: "split",
                quorum: row.quorum,
            })
            .collect();
        units::insert_batch(tx, &row.job_id, &siblings, now).await?;
        units::set_path(
            tx,
            row.id,
            &to_json(&split.remaining.prefix),
            &to_json(&split.remaining.cursor),
        )
        .await?;
        jobs::set_totals(
            tx,
            &row.job_id,
            &job.counts("accepted")?,
            job.accepted_solutions,
            &split_counts,
        )
        .await?;
        Ok(!siblings.is_empty())
    }

    /// Extends a worker's leases; returns the new deadline and the leases it must stop.
    pub async fn heartbeat(
        &self,
        worker: &WorkerRow,
        lease_ids: &[String],
        rate: f64,
        threads: u32,
    ) -> Result<(i64, Vec<String>), FleetError> {
        let now = self.now();
        let deadline = now + self.config.lease.as_millis() as i64;
        let mut tx = self.store.begin().await?;
        let mut stop = Vec::new();
        for id in lease_ids.iter().take(1024) {
            if !leases::extend(&mut tx, id, &worker.id, deadline).await? {
                stop.push(id.clone());
            }
        }
        let rate = rate.is_finite().then_some((rate.max(0.0), threads as i64));
        workers::touch(&mut tx, &worker.id, now, rate, None).await?;
        tx.commit().await?;
        Ok((deadline, stop))
    }

    /// Gives a worker's unstarted leases back to the queue.
    pub async fn release_leases(
        &self,
        worker: &WorkerRow,
        lease_ids: &[String],
    ) -> Result<usize, FleetError> {
        let mut tx = self.store.begin().await?;
        let mut n = 0;
        for id in lease_ids.iter().take(1024) {
            if let Some(unit_id) = leases::release(&mut tx, id, &worker.id).await? {
                units::adjust(&mut tx, unit_id, -1, 0, None).await?;
                n += 1;
            }
        }
        tx.commit().await?;
        info!(worker_id = %worker.id, released = n, "leases released");
        Ok(n)
    }

    // ------------------------------------------------------------ reports

    /// Records one result, exactly once, and decides its unit when a quorum agrees.
    pub async fn report(
        &self,
        worker: &WorkerRow,
        report: Report,
    ) -> Result<ReportOutcome, FleetError> {
        let now = self.now();
        let mut tx = self.store.begin().await?;
        let lease = leases::get(&mut tx, &report.lease_id)
            .await?
            .ok_or_else(|| FleetError::NotFound(format!("lease {}", report.lease_id)))?;
        if lease.worker_id != worker.id {
            return Err(FleetError::PermissionDenied(
                "the lease belongs to another worker".into(),
            ));
        }
        if lease.unit_id != report.unit_id {
            return Err(FleetError::InvalidArgument(
                "the lease is for another unit".into(),
            ));
        }
        let digest = result_digest(&report.result);
        if let Some(existing) = results::by_lease(&mut tx, &lease.id).await? {
            tx.commit().await?;
            return if existing.digest == digest {
                Ok(ReportOutcome {
                    status: "duplicate",
                    detail: "already recorded".into(),
                })
            } else {
                Err(FleetError::InvalidArgument(
                    "a different result was already reported on this lease".into(),
                ))
            };
        }
        let unit = units::get(&mut tx, lease.unit_id)
            .await?
            .expect("lease has a unit");
        let job = jobs::get(&mut tx, &unit.job_id)
            .await?
            .expect("unit has a job");
        let lease_was_active = lease.state == "active";
        leases::set_state(&mut tx, &lease.id, "reported").await?;
        if unit.state == "cancelled" || job.state == "cancelled" {
            if lease_was_active {
                units::adjust(&mut tx, unit.id, -1, 0, None).await?;
            }
            tx.commit().await?;
            return Ok(ReportOutcome {
                status: "rejected",
                detail: "the unit was cancelled".into(),
            });
        }
        let ctx = self.context(&unit.job_id).await?;
        let unit_value = Unit {
            prefix: parse_json(&unit.prefix_json, "prefix")?,
            cursor: parse_json(&unit.cursor_json, "cursor")?,
        };
        let check = check_result(&ctx, &unit_value, lease.budget, &report.result);
        let row = ResultRow {
            id: 0,
            job_id: unit.job_id.clone(),
            unit_id: unit.id,
            lease_id: lease.id.clone(),
            worker_id: worker.id.clone(),
            hostname: worker.hostname.clone(),
            cpu_model: worker.cpu_model.clone(),
            engine_kind: report.engine_kind.clone(),
            engine_build: report.engine_build.clone(),
            digest,
            result_json: to_json(&report.result),
            committed: report.result.committed as i64,
            solutions: report.result.solutions_count as i64,
            max_depth: report.result.max_depth as i64,
            engine_seconds: if report.engine_seconds.is_finite() {
                report.engine_seconds.max(0.0)
            } else {
                0.0
            },
            verdict: if check.is_ok() { "pending" } else { "wrong" }.into(),
            received_ms: now,
        };
        results::insert(&mut tx, &row).await?;
        if let Err(why) = check {
            warn!(worker_id = %worker.id, unit_id = unit.id, %why, "result failed verification");
            if lease_was_active {
                units::adjust(&mut tx, unit.id, -1, 0, None).await?;
            }
            let quarantined =
                workers::add_error(&mut tx, &worker.id, self.config.quarantine_after).await?;
            tx.commit().await?;
            return Ok(ReportOutcome {
                status: "rejected",
                detail: format!(
                    "{why}{}",
                    if quarantined {
                        "; host quarantined"
                    } else {
                        ""
                    }
                ),
            });
        }
        units::adjust(
            &mut tx,
            unit.id,
            if lease_was_active { -1 } else { 0 },
            1,
            None,
        )
        .await?;
        let outcome = self.decide(&mut tx, unit.id, &row.lease_id, now).await?;
        if outcome.status == "mismatch" && jobs::reopen(&mut tx, &unit.job_id).await? {
            warn!(job_id = %unit.job_id, unit_id = unit.id, "a late result disputes a completed job; re-opened for a deciding run");
        }
        // only a unit that just became (or stayed) done can complete its job
        if matches!(outcome.status, "accepted" | "replica" | "wrong") {
            finish_if_done(&mut tx, &unit.job_id, now).await?;
        }
        tx.commit().await?;
        Ok(outcome)
    }

    /// Looks at all valid results of a unit and accepts, confirms, overturns or asks for
    /// a deciding run.
    async fn decide(
        &self,
        tx: &mut Tx,
        unit_id: i64,
        lease_id: &str,
        now: i64,
    ) -> Result<ReportOutcome, FleetError> {
        let unit = units::get(tx, unit_id).await?.expect("unit exists");
        let valid = results::for_unit(tx, unit_id).await?;
        let mut groups: Vec<(String, Vec<&ResultRow>)> = Vec::new();
        for r in &valid {
            match groups.iter_mut().find(|(d, _)| *d == r.digest) {
                Some((_, g)) => g.push(r),
                None => groups.push((r.digest.clone(), vec![r])),
            }
        }
        let disputed = groups.len() > 1;
        let quorum = if disputed {
            unit.quorum.max(2)
        } else {
            unit.quorum
        };
        let (best_digest, best) = groups
            .iter()
            .max_by(|a, b| a.1.len().cmp(&b.1.len()).then(b.1[0].id.cmp(&a.1[0].id)))
            .map(|(d, g)| (d.clone(), g.clone()))
            .expect("the new result is valid");
        let current = match unit.accepted_result_id {
            Some(id) => results::get(tx, id).await?,
            None => None,
        };
        let mine = valid
            .iter()
            .find(|r| r.lease_id == lease_id)
            .expect("just inserted");
        if (best.len() as i64) < quorum {
            units::request_deciding_run(tx, unit_id, quorum).await?;
            return Ok(ReportOutcome {
                status: if disputed {
                    "mismatch"
                } else {
                    "pending_check"
                },
                detail: format!("{} of {quorum} agreeing results", best.len()),
            });
        }
        // a quorum exists: losers are wrong
        for (digest, group) in &groups {
            if *digest == best_digest {
                continue;
            }
            for r in group {
                results::set_verdict(tx, r.id, "wrong").await?;
                if workers::add_error(tx, &r.worker_id, self.config.quarantine_after).await? {
                    warn!(worker_id = %r.worker_id, hostname = %r.hostname, "host quarantined after wrong results");
                }
            }
        }
        let winner = best[0];
        let accepted_id = match &current {
            Some(c) if c.digest == best_digest => c.id,
            other => {
                if let Some(old) = other {
                    warn!(unit_id, "accepted result overturned by a quorum");
                    self.revoke(tx, &unit, old).await?;
                }
                self.accept(tx, &unit, winner, now).await?;
                winner.id
            }
        };
        for r in &best {
            if r.id != accepted_id {
                results::set_verdict(tx, r.id, "agree").await?;
            }
        }
        units::mark_done(tx, unit_id, accepted_id).await?;
        let status = if mine.digest != best_digest {
            "wrong"
        } else if mine.id == accepted_id {
            "accepted"
        } else {
            "replica"
        };
        Ok(ReportOutcome {
            status,
            detail: format!("{} agreeing of quorum {quorum}", best.len()),
        })
    }

    async fn accept(
        &self,
        tx: &mut Tx,
        unit: &UnitRow,
        r: &ResultRow,
        now: i64,
    ) -> Result<(), FleetError> {
        let result: UnitResult = parse_json(&r.result_json, "result")?;
        let job = jobs::get(tx, &unit.job_id).await?.expect("unit has a job");
        let mut accepted = job.counts("accepted")?;
        add_counts(&mut accepted, &result.nodes_by_depth);
        jobs::set_totals(
            tx,
            &job.id,
            &accepted,
            job.accepted_solutions + result.solutions_count as i64,
            &job.counts("split")?,
        )
        .await?;
        results::set_verdict(tx, r.id, "accepted").await?;
        workers::add_done(tx, &r.worker_id).await?;
        if let Some(cursor) = result.cursor {
            let quorum = quorum_for(
                &job.id,
                unit.id as u64 ^ 0x5bd1_e995,
                job.replicas as u32,
                job.spot_check,
            );
            let child = NewUnit {
                prefix_json: unit.prefix_json.clone(),
                cursor_json: to_json(&cursor),
                parent_id: Some(unit.id),
                kind: "continuation",
                quorum,
            };
            units::insert_batch(tx, &job.id, &[child], now).await?;
        }
        Ok(())
    }

    /// Takes an accepted result back out of the totals, with everything created from it.
    async fn revoke(&self, tx: &mut Tx, unit: &UnitRow, r: &ResultRow) -> Result<(), FleetError> {
        let result: UnitResult = parse_json(&r.result_json, "result")?;
        self.subtract(
            tx,
            &unit.job_id,
            &result.nodes_by_depth,
            result.solutions_count,
            None,
        )
        .await?;
        results::set_verdict(tx, r.id, "wrong").await?;
        let _ = workers::add_error(tx, &r.worker_id, self.config.quarantine_after).await?;
        let mut stack: Vec<UnitRow> = units::children(tx, unit.id)
            .await?
            .into_iter()
            .filter(|c| c.kind == "continuation")
            .collect();
        while let Some(child) = stack.pop() {
            if child.kind == "split" {
                let depth: Vec<Placement> = parse_json(&child.prefix_json, "prefix")?;
                self.subtract(tx, &child.job_id, &[], 0, Some(depth.len() - 1))
                    .await?;
            }
            if let Some(id) = child.accepted_result_id
                && let Some(accepted) = results::get(tx, id).await?
            {
                let res: UnitResult = parse_json(&accepted.result_json, "result")?;
                self.subtract(
                    tx,
                    &child.job_id,
                    &res.nodes_by_depth,
                    res.solutions_count,
                    None,
                )
                .await?;
                results::set_verdict(tx, id, "wrong").await?;
            }
            units::cancel(tx, child.id).await?;
            stack.extend(units::children(tx, child.id).await?);
        }
        Ok(())
    }

    async fn subtract(
        &self,
        tx: &mut Tx,
        job_id: &str,
        nodes: &[u64],
        solutions: u64,
        split_depth_index: Option<usize>,
    ) -> Result<(), FleetError> {
        let job = jobs::get(tx, job_id).await?.expect("job exists");
        let mut accepted = job.counts("accepted")?;
        for (a, n) in accepted.iter_mut().zip(nodes) {
            *a -= n;
        }
        let mut split = job.counts("split")?;
        if let Some(d) = split_depth_index {
            split[d] -= 1;
        }
        jobs::set_totals(
            tx,
            job_id,
            &accepted,
            job.accepted_solutions - solutions as i64,
            &split,
        )
        .await?;
        Ok(())
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
fn quorum_for(job_id: &str, index: u64, replicas: u32, spot_check: f64) -> i64 {
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

/// The shallowest depth with at least `target` prefixes (or the last depth).
pub fn choose_split_depth(plan: &SearchPlan, target: usize) -> usize {
    let mut walker = Walker::new(plan);
    for depth in 1..=plan.len() {
        let counts = walker
            .enumerate(&[], depth, &mut |_| {})
            .expect("root enumeration");
        if counts[depth - 1] as usize >= target || counts[depth - 1] == 0 {
            return depth;
        }
    }
    plan.len()
}

/// Self-test units with their exact results: a few budgeted slices of the tree,
/// computed by the reference engine.
pub fn self_tests(plan: &SearchPlan) -> Vec<SelfTest> {
    let mut tests = Vec::new();
    let mut walker = Walker::new(plan);
    let mut unit = Unit::root();
    for budget in [5_000u64, 50_000, 200_000] {
        let options = RunOptions {
            budget: Some(budget),
            max_solutions: REPORT_MAX_SOLUTIONS,
        };
        let Ok(expected) = walker.run(&unit, options, &mut NoControl) else {
            break;
        };
        let next = expected.cursor.clone();
        tests.push(SelfTest {
            unit: unit.clone(),
            budget: Some(budget),
            expected,
        });
        match next {
            Some(cursor) => unit = unit.continuation(cursor),
            None => break,
        }
    }
    tests
}

/// Checks what can be checked of a result without re-running it: shape, counts above the
/// prefix, the budget, the cursor, every solution and the deepest board.
fn check_result(ctx: &JobCtx, unit: &Unit, budget: i64, r: &UnitResult) -> Result<(), String> {
    let depths = ctx.plan.len();
    let floor = unit.prefix.len();
    if r.nodes_by_depth.len() != depths {
        return Err(format!(
            "nodes_by_depth has {} entries, expected {depths}",
            r.nodes_by_depth.len()
        ));
    }
    if r.nodes_by_depth[..floor].iter().any(|&n| n != 0) {
        return Err("nodes counted at or above the unit's prefix".into());
    }
    if budget > 0 && r.committed > budget as u64 {
        return Err(format!(
            "committed {} nodes, above the budget {budget}",
            r.committed
        ));
    }
    if let Some(cursor) = &r.cursor {
        if budget > 0
            && r.stop == Some(e2fleet_engine::unit::StopReason::Budget)
            && r.committed != budget as u64
        {
            return Err("a budget stop must commit exactly the budget".into());
        }
        let mut path = unit.prefix.clone();
        path.extend_from_slice(cursor);
        verify_board(&ctx.puzzle, &path, false).map_err(|e| format!("cursor: {e}"))?;
        Walker::new(&ctx.plan)
            .check_path(&path)
            .map_err(|e| format!("cursor: {e}"))?;
    }
    if (r.solutions.len() as u64) > r.solutions_count
        || (depths > 0 && r.solutions_count != r.nodes_by_depth[depths - 1])
    {
        return Err("solution count disagrees with the last depth's node count".into());
    }
    for s in &r.solutions {
        verify_board(&ctx.puzzle, s, true).map_err(|e| format!("solution: {e}"))?;
        if !unit.prefix.iter().all(|p| s.contains(p)) {
            return Err("a solution does not extend the unit's prefix".into());
        }
    }
    if r.max_depth > depths || r.deepest.len() != r.max_depth {
        return Err("deepest board and max_depth disagree".into());
    }
    verify_board(&ctx.puzzle, &r.deepest, false).map_err(|e| format!("deepest board: {e}"))?;
    Walker::new(&ctx.plan)
        .check_path(&r.deepest)
        .map_err(|e| format!("deepest board: {e}"))?;
    Ok(())
}

async fn expire(tx: &mut Tx, now: i64) -> Result<usize, FleetError> {
    let expired = leases::expire_overdue(tx, now).await?;
    for unit_id in &expired {
        units::adjust(tx, *unit_id, -1, 0, None).await?;
    }
    if !expired.is_empty() {
        info!(leases = expired.len(), "leases expired");
    }
    Ok(expired.len())
}

/// Completes a job with no unfinished units and records its conservation check.
async fn finish_if_done(tx: &mut Tx, job_id: &str, now: i64) -> Result<(), FleetError> {
    let job = jobs::get(tx, job_id).await?.expect("job exists");
    if job.state != "running" || units::unfinished(tx, job_id).await? > 0 {
        return Ok(());
    }
    let ok = crate::status::conservation(tx, &job).await?;
    jobs::finish(tx, job_id, "complete", now, Some(ok)).await?;
    info!(%job_id, conservation_ok = ok, "job complete");
    Ok(())
}
