//! `e2fleet-worker run`: the fleet client volunteers start with one command.
//!
//! Registers with the machine's fingerprint (keeping its identity across restarts in the
//! data directory), fetches each job's spec, builds that job's engine locally (cached) and
//! self-tests it against units with known exact results before leasing real work, then
//! keeps one engine per thread busy, heartbeats progress and reports exact results.
//!
//! Never loses work: every result is journalled (fsync) before it is sent and re-sent
//! until acknowledged ([`journal`]); SIGINT/SIGTERM stops the engines at once and reports
//! their exact cursors (a second signal exits immediately); when the coordinator is
//! unreachable the engines keep working on held leases while the loop retries with
//! jittered exponential backoff.

mod executor;
pub mod host;
pub mod journal;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use e2fleet_engine::engine::EngineKind;
use e2fleet_engine::formats::{LoadOptions, parse_str};
use e2fleet_engine::plan::SearchPlan;
use e2fleet_engine::search::{NoControl, RunOptions};
use e2fleet_engine::{FillOrder, Unit};
use e2fleet_proto::convert::{path_from_wire, result_from_wire, result_to_wire};
use e2fleet_proto::v1::worker_service_client::WorkerServiceClient;
use e2fleet_proto::{REPORT_MAX_SOLUTIONS, v1};
use rand::Rng;
use serde::{Deserialize, Serialize};
use tonic::transport::Channel;
use tonic::{Code, Request, Status};
use tracing::{error, info, warn};

use crate::engine_args::{EngineArgs, EngineFactory};

/// How long a stopping worker keeps trying to deliver finished results before it exits
/// and leaves them in the journal (well inside systemd's and Kubernetes' stop timeouts).
const STOP_DELIVERY_GRACE: Duration = Duration::from_secs(20);
use executor::{Executor, Outcome, Task};
use journal::{Entry, Journal};

/// Flags of `run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Coordinator URL.
    #[arg(long, env = "E2FLEET_COORDINATOR")]
    coordinator: String,
    /// The fleet's enrolment token.
    #[arg(long, env = "E2FLEET_ENROLL_TOKEN")]
    token: String,
    /// CA certificate (PEM) to trust for an https:// coordinator (default: system roots).
    #[arg(long, env = "E2FLEET_CA_CERT")]
    ca_cert: Option<PathBuf>,
    /// Engine threads (default: every core).
    #[arg(long, env = "E2FLEET_THREADS")]
    threads: Option<usize>,
    /// Where the identity and the result journal live.
    #[arg(long, env = "E2FLEET_DATA_DIR", default_value = "e2fleet-worker-data")]
    data_dir: PathBuf,
    /// Report this host name instead of the detected one.
    #[arg(long, env = "E2FLEET_HOSTNAME")]
    hostname: Option<String>,
    /// Stop after this many units.
    #[arg(long)]
    stop_after_units: Option<u64>,
    /// Stop after this many seconds.
    #[arg(long)]
    stop_after_seconds: Option<u64>,
    /// While this file exists the engines pause (default: <data-dir>/pause).
    #[arg(long)]
    pause_file: Option<PathBuf>,
    /// Lower this process's CPU priority by this much (nice), 0 to keep it.
    #[arg(long, default_value_t = 10)]
    nice: u8,
    /// Log format: text or json.
    #[arg(long, default_value = "text")]
    log_format: String,
    /// Test only: after the engine passed its self-tests, add one node at the shallowest
    /// counted depth of every result (a machine that computes wrong), to prove that
    /// cross-checks catch it and quarantine the host.
    #[arg(long, hide = true)]
    fault_misreport: bool,
    #[command(flatten)]
    engine: EngineArgs,
}

/// Runs the verification units this hardware class has not run yet (the coordinator
/// hands them out) with the engine real work would use, and submits them. A compiled
/// build that disagrees is dropped for the reference engine (a new class, verified in
/// turn); a class that still disagrees gets no real work from the coordinator, which
/// says so on every lease request.
async fn verify_class(
    link: &mut Link,
    engine: &mut EngineArgs,
    hostname: Option<&str>,
) -> Result<()> {
    loop {
        let suite = link
            .client
            .get_suite(link.req(v1::GetSuiteRequest {
                suite: String::new(),
                only_missing: true,
            }))
            .await?
            .into_inner();
        if suite.units.is_empty() {
            return Ok(());
        }
        info!(suite = %suite.suite, units = suite.units.len(), class_id = %suite.class_id, "running verification units for this hardware class");
        let units: Vec<_> = suite
            .units
            .iter()
            .map(e2fleet_proto::convert::suite_unit_from_wire)
            .collect();
        let e = engine.clone();
        let runs =
            tokio::task::spawn_blocking(move || crate::verify::run_units(&units, &e)).await??;
        let answer = link
            .client
            .submit_verification(link.req(crate::verify::submission(&suite.suite, &runs)))
            .await?
            .into_inner();
        for v in answer.verdicts.iter().filter(|v| v.verdict == "DISAGREES") {
            error!(unit = %v.unit, detail = %v.detail, "this engine build disagrees with the verification suite");
        }
        if !answer.class_flagged {
            info!(class_id = %answer.class_id, "hardware class verified");
            return Ok(());
        }
        if engine.engine == crate::engine_args::EngineChoice::Reference {
            error!(class_id = %answer.class_id, "this hardware class disagrees with the verification suite: the coordinator gives it no real work until a fixed build agrees");
            return Ok(());
        }
        warn!(
            "the compiled engine disagrees with the verification suite; using the reference engine"
        );
        engine.engine = crate::engine_args::EngineChoice::Reference;
        link.host = host::host_info(hostname, engine);
        link.register().await?;
    }
}

/// A finished unit: journalled (fsync'd) first, then queued for sending.
fn collect(
    outcome: Outcome,
    journal: &Journal,
    outbox: &mut Vec<Entry>,
    misreport: bool,
) -> Result<()> {
    match outcome {
        Outcome::Done(mut entry) => {
            if misreport && let Some(n) = entry.result.nodes_by_depth.iter_mut().find(|n| **n > 0) {
                *n += 1;
                entry.result.committed += 1;
            }
            journal.write(&entry)?;
            outbox.push(*entry);
        }
        Outcome::Failed { lease_id, error } => {
            warn!(%lease_id, %error, "unit failed; its lease will expire and be re-run");
        }
    }
    Ok(())
}

#[derive(Serialize, Deserialize)]
struct Identity {
    coordinator: String,
    worker_id: String,
    worker_token: String,
}

/// The connection: a lazily (re)connecting channel, the worker token and a backoff.
struct Link {
    client: WorkerServiceClient<Channel>,
    token: String,
    worker_id: String,
    enroll: String,
    host: v1::HostInfo,
    identity_path: PathBuf,
    coordinator: String,
    failures: u32,
    next_try: Instant,
    lease_seconds: u64,
}

fn is_transient(s: &Status) -> bool {
    matches!(
        s.code(),
        Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Unknown
            | Code::Cancelled
            | Code::Internal
            | Code::ResourceExhausted
    )
}

impl Link {
    fn req<T>(&self, m: T) -> Request<T> {
        let mut r = Request::new(m);
        r.set_timeout(Duration::from_secs(30));
        if let Ok(v) = format!("Bearer {}", self.token).parse() {
            r.metadata_mut().insert("authorization", v);
        }
        r
    }

    fn up(&self) -> bool {
        Instant::now() >= self.next_try
    }

    fn ok(&mut self) {
        if self.failures > 0 {
            info!("coordinator reachable again");
        }
        self.failures = 0;
    }

    /// Jittered exponential backoff: 0.5 s doubling to 30 s, +-25%.
    fn fail(&mut self, what: &str, s: &Status) {
        self.failures += 1;
        let base = (500u64 << self.failures.min(6)).min(30_000);
        let jitter = rand::rng().random_range(0.75..1.25);
        let wait = Duration::from_millis((base as f64 * jitter) as u64);
        self.next_try = Instant::now() + wait;
        warn!(what, code = ?s.code(), message = s.message(), retry_in_ms = wait.as_millis() as u64, "waiting for the coordinator");
    }

    async fn register(&mut self) -> Result<(), Status> {
        let r = self
            .client
            .register_worker(v1::RegisterWorkerRequest {
                enroll_token: self.enroll.clone(),
                host: Some(self.host.clone()),
                previous_worker_id: self.worker_id.clone(),
            })
            .await?
            .into_inner();
        self.token = r.worker_token;
        self.worker_id = r.worker_id;
        self.lease_seconds = r.lease_seconds.max(1) as u64;
        let id = Identity {
            coordinator: self.coordinator.clone(),
            worker_id: self.worker_id.clone(),
            worker_token: self.token.clone(),
        };
        if let Err(e) = std::fs::write(
            &self.identity_path,
            serde_json::to_string(&id).unwrap_or_default(),
        ) {
            warn!(error = %e, "cannot save the worker identity");
        }
        info!(worker_id = %self.worker_id, hostname = %self.host.hostname, "registered");
        Ok(())
    }
}

/// A job the worker has prepared an engine for (or failed to).
enum JobEngine {
    Ready(Arc<EngineFactory>),
    Broken(String),
}

fn set_nice(n: u8) {
    if n == 0 {
        return;
    }
    let pid = std::process::id().to_string();
    let ok = std::process::Command::new("renice")
        .args(["-n", &n.to_string(), "-p", &pid])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        info!("could not lower the priority (renice unavailable); running at normal priority");
    }
}

/// Checks a freshly built engine against units with known exact results.
fn self_test(factory: &EngineFactory, tests: &[v1::SelfTest], depths: usize) -> Result<(), String> {
    let mut engine = factory.make();
    for (i, t) in tests.iter().enumerate() {
        let unit = Unit {
            prefix: path_from_wire(&t.prefix, "prefix").map_err(|e| e.to_string())?,
            cursor: path_from_wire(&t.cursor, "cursor").map_err(|e| e.to_string())?,
        };
        let expected = t
            .expected
            .as_ref()
            .ok_or("self-test without an expected result")
            .and_then(|e| result_from_wire(e, depths).map_err(|_| "malformed self-test"))?;
        let options = RunOptions {
            budget: (t.budget > 0).then_some(t.budget),
            max_solutions: REPORT_MAX_SOLUTIONS,
        };
        let got = engine
            .run(&unit, options, &mut NoControl)
            .map_err(|e| e.to_string())?;
        if got != expected {
            let depth = got
                .nodes_by_depth
                .iter()
                .zip(&expected.nodes_by_depth)
                .position(|(a, b)| a != b)
                .map(|d| format!("first differing depth {}", d + 1))
                .unwrap_or_else(|| "counts agree, cursor/solutions/deepest differ".into());
            return Err(format!(
                "self-test {i} disagrees with the known result ({depth})"
            ));
        }
    }
    Ok(())
}

/// Runs `run`.
pub fn run(args: RunArgs) -> Result<()> {
    // on a terminal the status line replaces routine logs; RUST_LOG overrides
    let watching =
        args.log_format == "text" && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| if watching { "warn" } else { "info" }.into());
    // logs go to stderr: stdout is for the program's own output
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if args.log_format == "json" {
        logs.json().init();
    } else {
        logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
    set_nice(args.nice);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(run_async(args))
}

async fn run_async(args: RunArgs) -> Result<()> {
    std::fs::create_dir_all(&args.data_dir).with_context(|| {
        format!(
            "cannot create the data directory {}",
            args.data_dir.display()
        )
    })?;
    let journal = Journal::open(&args.data_dir)?;
    let identity_path = args.data_dir.join("identity.json");
    let saved: Option<Identity> = std::fs::read_to_string(&identity_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .filter(|i: &Identity| i.coordinator == args.coordinator);
    let channel = e2fleet_proto::endpoint::endpoint(&args.coordinator, args.ca_cert.as_deref())
        .map_err(anyhow::Error::msg)?
        .connect_lazy();
    let mut link = Link {
        client: WorkerServiceClient::new(channel)
            .max_decoding_message_size(e2fleet_proto::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(e2fleet_proto::MAX_MESSAGE_BYTES),
        token: saved
            .as_ref()
            .map(|s| s.worker_token.clone())
            .unwrap_or_default(),
        worker_id: saved
            .as_ref()
            .map(|s| s.worker_id.clone())
            .unwrap_or_default(),
        enroll: args.token.clone(),
        host: host::host_info(args.hostname.as_deref(), &args.engine),
        identity_path,
        coordinator: args.coordinator.clone(),
        failures: 0,
        next_try: Instant::now(),
        lease_seconds: 60,
    };
    // A saved identity registers again, so the coordinator has this run's fingerprint (a
    // new build or rustc is a new hardware class); if it is away, the saved token serves.
    if !link.token.is_empty() {
        match link.register().await {
            Ok(()) => link.ok(),
            Err(s) if s.code() == Code::Unauthenticated => link.token.clear(),
            Err(s) => link.fail("register", &s),
        }
    }
    while link.token.is_empty() {
        match link.register().await {
            Ok(()) => link.ok(),
            Err(s) if s.code() == Code::Unauthenticated => {
                anyhow::bail!(
                    "the coordinator refused the enrolment token: {}",
                    s.message()
                )
            }
            Err(s) => {
                link.fail("register", &s);
                tokio::time::sleep_until(link.next_try.into()).await;
            }
        }
    }

    let mut engine_args = args.engine.clone();
    if let Err(e) = verify_class(&mut link, &mut engine_args, args.hostname.as_deref()).await {
        warn!(error = %format!("{e:#}"), "could not run the verification units now");
    }

    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let executor = Executor::start(threads, tx);
    info!(threads, coordinator = %args.coordinator, "worker started");

    // 0 = running, 1 = stopping (report cursors), signals past that exit at once
    let signals = Arc::new(AtomicU8::new(0));
    spawn_signal_handler(signals.clone());

    let pause_file = args
        .pause_file
        .clone()
        .unwrap_or_else(|| args.data_dir.join("pause"));
    let started = Instant::now();
    let mut jobs: HashMap<String, JobEngine> = HashMap::new();
    let mut units_taken = 0u64;
    let mut units_reported = 0u64;
    let mut last_heartbeat = Instant::now();
    let mut outbox: Vec<Entry> = journal.pending()?;
    if !outbox.is_empty() {
        info!(
            results = outbox.len(),
            "re-sending results from the journal"
        );
    }
    let mut stopping = false;
    let mut stop_started = Instant::now();
    let mut paused = false;
    let status = status_line(&args);
    let mut waiting: Vec<v1::Lease> = Vec::new();
    loop {
        // stop conditions
        let limit_reached = args.stop_after_units.is_some_and(|n| units_taken >= n)
            || args
                .stop_after_seconds
                .is_some_and(|s| started.elapsed() >= Duration::from_secs(s));
        if signals.load(Ordering::SeqCst) >= 1 && !stopping {
            stopping = true;
            stop_started = Instant::now();
            let mut dropped = executor.stop_all();
            dropped.extend(waiting.drain(..).map(|l| l.lease_id));
            info!(
                released = dropped.len(),
                "stopping: engines report their exact cursors"
            );
            if !dropped.is_empty() && link.up() {
                let request = link.req(v1::ReleaseLeasesRequest { lease_ids: dropped });
                if let Err(s) = link.client.release_leases(request).await {
                    warn!(code = ?s.code(), "could not release unstarted leases; they will expire");
                }
            }
        }
        let now_paused = pause_file.exists()
            || signals.load(Ordering::SeqCst) == 0 && PAUSED.load(Ordering::SeqCst);
        if now_paused != paused {
            paused = now_paused;
            executor.set_paused(paused);
            info!(
                paused,
                "engines {}",
                if paused { "paused" } else { "resumed" }
            );
        }

        // collect finished results: journal first, then send
        while let Ok(outcome) = rx.try_recv() {
            collect(outcome, &journal, &mut outbox, args.fault_misreport)?;
        }
        if link.up() && !outbox.is_empty() {
            let mut keep = Vec::new();
            for entry in outbox.drain(..) {
                if !link.up() {
                    keep.push(entry);
                    continue;
                }
                let request = link.req(v1::ReportResultRequest {
                    lease_id: entry.lease_id.clone(),
                    unit_id: entry.unit_id,
                    result: Some(result_to_wire(&entry.result)),
                    engine_seconds: entry.engine_seconds,
                    engine_kind: entry.engine_kind.clone(),
                    engine_build: entry.engine_build.clone(),
                });
                match link.client.report_result(request).await {
                    Ok(r) => {
                        link.ok();
                        let r = r.into_inner();
                        info!(lease_id = %entry.lease_id, committed = entry.result.committed, status = %r.status, "result reported");
                        journal.remove(&entry.lease_id)?;
                        units_reported += 1;
                    }
                    Err(s) if s.code() == Code::Unauthenticated => {
                        link.fail("report", &s);
                        let _ = link.register().await;
                        keep.push(entry);
                    }
                    Err(s) if is_transient(&s) => {
                        link.fail("report", &s);
                        keep.push(entry);
                    }
                    Err(s) => {
                        error!(lease_id = %entry.lease_id, code = ?s.code(), message = s.message(), "the coordinator refused a result; kept in journal/rejected");
                        journal.reject(&entry.lease_id)?;
                    }
                }
            }
            outbox = keep;
        }

        let (queued, running) = executor.load();
        // done when asked to stop (or at a limit) and everything finished is delivered
        let idle = queued == 0 && running == 0 && outbox.is_empty() && rx.is_empty();
        if (stopping || limit_reached) && idle {
            if !waiting.is_empty() {
                info!(leases = waiting.len(), "leaving unstarted leases to expire");
            }
            break;
        }
        // a stop is bounded even when the coordinator is away: finished results are in
        // the fsync'd journal and are sent at the next start
        if stopping
            && queued == 0
            && running == 0
            && rx.is_empty()
            && stop_started.elapsed() >= STOP_DELIVERY_GRACE
        {
            warn!(
                unsent = outbox.len(),
                "stopping without delivering: the coordinator is unreachable; results stay in the journal for the next start"
            );
            break;
        }

        // heartbeat well within the lease
        let heartbeat_every = Duration::from_secs((link.lease_seconds / 3).max(1));
        if link.up() && last_heartbeat.elapsed() >= heartbeat_every {
            let mut held = executor.held();
            held.extend(waiting.iter().map(|l| (l.lease_id.clone(), 0)));
            let request = link.req(v1::HeartbeatRequest {
                leases: held
                    .iter()
                    .map(|(id, committed)| v1::LeaseProgress {
                        lease_id: id.clone(),
                        committed: *committed,
                    })
                    .collect(),
                per_core_nodes_per_s: executor.per_core_rate(),
                threads: if paused { 0 } else { executor.threads() as u32 },
            });
            match link.client.heartbeat(request).await {
                Ok(r) => {
                    link.ok();
                    last_heartbeat = Instant::now();
                    for id in r.into_inner().stop_lease_ids {
                        info!(lease_id = %id, "coordinator asked to stop a lease");
                        executor.stop_lease(&id);
                    }
                }
                Err(s) => {
                    link.fail("heartbeat", &s);
                    if s.code() == Code::Unauthenticated {
                        let _ = link.register().await;
                    }
                }
            }
        }

        // leases whose job engine is not ready yet (spec not fetched, coordinator away):
        // kept and heartbeated, never dropped
        if !waiting.is_empty() && link.up() && !stopping {
            let mut still = Vec::new();
            for lease in waiting.drain(..) {
                match prepare_job(&mut link, &mut jobs, &lease.job_id, &engine_args).await {
                    Prepared::Ready(engine) => {
                        match (
                            path_from_wire(&lease.prefix, "prefix"),
                            path_from_wire(&lease.cursor, "cursor"),
                        ) {
                            (Ok(prefix), Ok(cursor)) => executor.push(Task {
                                lease_id: lease.lease_id,
                                unit_id: lease.unit_id,
                                job_id: lease.job_id,
                                unit: Unit { prefix, cursor },
                                budget: (lease.budget > 0).then_some(lease.budget),
                                engine,
                            }),
                            _ => {
                                warn!(lease_id = %lease.lease_id, "malformed lease from the coordinator; skipped")
                            }
                        }
                    }
                    Prepared::Later => still.push(lease),
                    Prepared::Never => {}
                }
            }
            waiting = still;
        }
        let (queued, running) = executor.load();
        let queued = queued + waiting.len();

        // keep every thread busy with a queue of one more unit per thread, so short units
        // never leave a thread waiting on a round trip
        let want = (2 * executor.threads()).saturating_sub(queued + running);
        let remaining = args
            .stop_after_units
            .map_or(u64::MAX, |n| n.saturating_sub(units_taken));
        let want = want.min(remaining.min(64) as usize);
        let mut retry_after = Duration::from_millis(200);
        if want > 0 && !stopping && !limit_reached && !paused && link.up() {
            let engine_kind = if engine_args.engine == crate::engine_args::EngineChoice::Reference {
                EngineKind::Reference
            } else {
                EngineKind::Compiled
            };
            let request = link.req(v1::LeaseUnitsRequest {
                max_units: want as u32,
                engine_kind: engine_kind.to_string(),
                engine_build: String::new(),
            });
            match link.client.lease_units(request).await {
                Ok(r) => {
                    link.ok();
                    let r = r.into_inner();
                    if r.leases.is_empty() {
                        retry_after =
                            Duration::from_millis(r.retry_after_ms.clamp(100, 30_000) as u64);
                    }
                    units_taken += r.leases.len() as u64;
                    waiting.extend(r.leases);
                }
                Err(s) => {
                    link.fail("lease", &s);
                    if s.code() == Code::Unauthenticated {
                        let _ = link.register().await;
                    }
                }
            }
        }

        if let Some(bar) = &status {
            let (q, r) = executor.load();
            bar.set_message(format!(
                "{} | {r}/{} engines busy, {} queued | {units_reported} units reported | {:.1} M placements/s per core | {}",
                if paused { "paused" } else if stopping { "stopping" } else { "running" },
                executor.threads(),
                q + waiting.len(),
                executor.per_core_rate() / 1e6,
                if link.up() { "coordinator connected".to_string() } else { format!("waiting for the coordinator ({} failures)", link.failures) },
            ));
        }

        // wait for a result, the retry time or a short tick
        let wait = if link.up() {
            retry_after
        } else {
            link.next_try
                .saturating_duration_since(Instant::now())
                .min(retry_after.max(Duration::from_millis(200)))
        };
        tokio::select! {
            Some(outcome) = rx.recv() => {
                collect(outcome, &journal, &mut outbox, args.fault_misreport)?;
            }
            _ = tokio::time::sleep(wait) => {}
        }
    }
    executor.join();
    info!(
        units_taken,
        units_reported, "worker stopped cleanly: every result delivered"
    );
    println!("e2fleet-worker: stopped cleanly, {units_reported} results delivered");
    Ok(())
}

/// Whether a lease's job can run here.
enum Prepared {
    Ready(Arc<EngineFactory>),
    /// Try again later (the coordinator is unreachable).
    Later,
    /// Never (the job's puzzle is invalid here).
    Never,
}

/// Fetches a job's spec, builds its engine and self-tests it (once per job).
async fn prepare_job(
    link: &mut Link,
    jobs: &mut HashMap<String, JobEngine>,
    job_id: &str,
    engine_args: &EngineArgs,
) -> Prepared {
    if !link.up() && !jobs.contains_key(job_id) {
        return Prepared::Later;
    }
    if let Some(j) = jobs.get(job_id) {
        return match j {
            JobEngine::Ready(f) => Prepared::Ready(f.clone()),
            JobEngine::Broken(why) => {
                warn!(%job_id, %why, "skipping a unit of a job this worker cannot run");
                Prepared::Never
            }
        };
    }
    let spec = match link
        .client
        .get_job_spec(link.req(v1::GetJobSpecRequest {
            job_id: job_id.to_string(),
        }))
        .await
    {
        Ok(s) => s.into_inner(),
        Err(s) => {
            link.fail("job spec", &s);
            return if is_transient(&s) || s.code() == Code::Unauthenticated {
                Prepared::Later
            } else {
                Prepared::Never
            };
        }
    };
    let plan = match parse_str(&spec.puzzle_json, "job.json", &LoadOptions::default())
        .map_err(|e| e.to_string())
        .and_then(|p| {
            let order = spec
                .order
                .parse()
                .map_err(|e: e2fleet_engine::order::OrderError| e.to_string())?;
            let order = FillOrder::new(&p, &order).map_err(|e| e.to_string())?;
            Ok(Arc::new(SearchPlan::new(&p, &order)))
        }) {
        Ok(p) => p,
        Err(e) => {
            error!(%job_id, error = %e, "the job's puzzle is invalid; refusing its units");
            let _ = link
                .client
                .report_build_failure(link.req(v1::ReportBuildFailureRequest {
                    job_id: job_id.to_string(),
                    engine_build: String::new(),
                    detail: format!("invalid puzzle or order: {e}"),
                }))
                .await;
            jobs.insert(job_id.to_string(), JobEngine::Broken(e));
            return Prepared::Never;
        }
    };
    let args = engine_args.clone();
    let tests = spec.self_tests.clone();
    let depths = plan.len();
    let plan_c = plan.clone();
    let built = tokio::task::spawn_blocking(move || {
        let factory = args.factory(&plan_c, false).map_err(|e| format!("{e:#}"))?;
        let check = self_test(&factory, &tests, depths);
        Ok::<_, String>((factory, check))
    })
    .await
    .unwrap_or_else(|e| Err(e.to_string()));
    let factory = match built {
        Ok((factory, Ok(()))) => {
            let engine = factory.make();
            info!(%job_id, engine = %engine.kind(), build = %engine.build_id(), "engine built and self-tested");
            factory
        }
        Ok((factory, Err(why))) => {
            let build = factory.make().build_id();
            error!(%job_id, %build, %why, "engine build failed its self-test; it will not be used");
            let _ = link
                .client
                .report_build_failure(link.req(v1::ReportBuildFailureRequest {
                    job_id: job_id.to_string(),
                    engine_build: build,
                    detail: why,
                }))
                .await;
            EngineFactory::reference(&plan)
        }
        Err(why) => {
            warn!(%job_id, %why, "cannot build the compiled engine; using the reference engine");
            EngineFactory::reference(&plan)
        }
    };
    let factory = Arc::new(factory);
    jobs.insert(job_id.to_string(), JobEngine::Ready(factory.clone()));
    Prepared::Ready(factory)
}

/// A live status line when a person is watching (text logs on a terminal).
fn status_line(args: &RunArgs) -> Option<indicatif::ProgressBar> {
    if args.log_format != "text" || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        return None;
    }
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}").ok()?,
    );
    bar.enable_steady_tick(Duration::from_millis(250));
    Some(bar)
}

static PAUSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn spawn_signal_handler(signals: Arc<AtomicU8>) {
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int), Ok(mut usr1), Ok(mut usr2)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::user_defined1()),
            signal(SignalKind::user_defined2()),
        ) else {
            return;
        };
        loop {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
                _ = usr1.recv() => { PAUSED.store(true, Ordering::SeqCst); continue; }
                _ = usr2.recv() => { PAUSED.store(false, Ordering::SeqCst); continue; }
            }
            if signals.fetch_add(1, Ordering::SeqCst) >= 1 {
                eprintln!(
                    "e2fleet-worker: second signal, exiting now (unsent results stay in the journal)"
                );
                std::process::exit(130);
            }
            eprintln!(
                "e2fleet-worker: stopping; engines report their exact cursors (signal again to exit at once)"
            );
        }
    });
}
