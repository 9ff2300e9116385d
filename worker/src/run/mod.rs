//! `e2fleet-worker run`: the fleet client volunteers start with one command.
//!
//! Registers with the machine's labels (keeping its identity across restarts in the data
//! directory), runs the verification units its hardware class lacks, fetches each job's
//! spec, builds that job's engine locally (cached) and self-tests it against units with
//! known exact results before leasing real work, then keeps one engine per thread busy,
//! heartbeats progress and reports exact results.
//!
//! Never loses work: every result is journalled (fsync) before it is sent and re-sent
//! until acknowledged ([`journal`]); SIGINT/SIGTERM stops the engines at once and reports
//! their exact cursors (a second signal exits immediately); when the coordinator is
//! unreachable the engines keep working on held leases while the loop retries with
//! jittered exponential backoff.
//!
//! # Layout
//! - this file: the flags and the loop (collect, report, heartbeat, prepare, lease);
//! - [`link`]: identity, registration and backoff around [`crate::link::Coordinator`];
//! - [`jobs`]: verification of this class, job specs, engine builds and self-tests;
//! - [`executor`]: the engine threads; [`journal`]: results on disk until acknowledged;
//! - [`pause`]: when the engines pause (the pause file, SIGUSR1, battery, the hours set,
//!   other programs' CPU use), and giving the held units back after a long pause;
//! - [`signals`]: signals, niceness and the status line.

mod executor;
mod jobs;
pub mod journal;
pub mod link;
pub mod pause;
mod signals;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use e2fleet_proto::api::{JobId, Lease};
use e2fleet_proto::logs::LogFormat;
use tonic::Code;
use tracing::{debug, error, info, warn};

use crate::connect_args::ConnectArgs;
use crate::engine_args::EngineArgs;
use crate::link::{Coordinator, is_transient};
use executor::{Executor, Outcome, Task};
use jobs::{JobEngine, Prepared, prepare_job, verify_class};
use journal::{Entry, Journal};
use link::Link;
use pause::{Conditions, Hours, OnBattery, Reason};
use signals::PAUSED;

/// How long a stopping worker keeps trying to deliver finished results before it exits
/// and leaves them in the journal (well inside systemd's and Kubernetes' stop timeouts).
const STOP_DELIVERY_GRACE: Duration = Duration::from_secs(20);

/// Results sent to the coordinator at once. One at a time, a worker on a split's short
/// units reported ~600 a second (a round trip each, coordinator and worker on 2 cores).
const REPORTS_IN_FLIGHT: usize = 8;

/// Flags of `run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Coordinator URL; several coordinators of one fleet (on one PostgreSQL database) as
    /// a comma-separated list: calls are spread over those that answer, and go on through
    /// the others while one is down.
    #[arg(long, env = "E2FLEET_COORDINATOR")]
    coordinator: String,
    #[command(flatten)]
    connect: ConnectArgs,
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
    /// While this file exists the engines pause (default: `<data-dir>/pause`).
    #[arg(long)]
    pause_file: Option<PathBuf>,
    /// On battery: pause the engines until the machine is plugged in again, or run.
    #[arg(long, value_enum, env = "E2FLEET_ON_BATTERY", default_value = "pause")]
    on_battery: OnBattery,
    /// Pause while other programs use more than this percentage of the machine's CPU time,
    /// averaged over 10 s (this worker's engines and compiles do not count; Linux). Off
    /// unless set.
    #[arg(long, env = "E2FLEET_MAX_OTHER_CPU", value_parser = clap::value_parser!(u8).range(1..=100))]
    max_other_cpu: Option<u8>,
    /// Walk only this percentage of each engine thread's time (BOINC's "use at most N% of
    /// CPU time"): 200 ms of walking, then a rest in which the engine holds still, so a
    /// laptop runs cooler and quieter. Rests are not engine time: the per-core rate stays
    /// the rate of walking. 100 (the default) walks all the time.
    #[arg(long, env = "E2FLEET_CPU_PERCENT", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100))]
    cpu_percent: u32,
    /// Run only in this daily window of local time, e.g. 19:00-07:00 (across midnight) or
    /// 09:00-17:00; outside it the engines pause. Off unless set.
    #[arg(long, env = "E2FLEET_RUN_HOURS")]
    run_hours: Option<Hours>,
    /// After this many seconds paused, give the held units back: running ones stop at their
    /// exact cursor and report it (the coordinator leases the rest elsewhere), unstarted
    /// ones are released, and nothing more is leased until the pause ends.
    #[arg(long, env = "E2FLEET_GIVE_BACK_AFTER", default_value_t = 900)]
    give_back_after: u64,
    /// Test only: where Linux's power supplies are read.
    #[arg(long, hide = true, default_value = "/sys/class/power_supply")]
    power_supply_dir: PathBuf,
    /// Lower this process's CPU priority by this much (nice), 0 to keep it.
    #[arg(long, env = "E2FLEET_NICE", default_value_t = 10)]
    nice: u8,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Test only: after the engine passed its self-tests, add one node at the shallowest
    /// counted depth of every result (a machine that computes wrong), to prove that
    /// cross-checks catch it and quarantine the host.
    #[arg(long, hide = true)]
    fault_misreport: bool,
    #[command(flatten)]
    engine: EngineArgs,
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

/// Runs `run`.
pub fn run(args: RunArgs) -> Result<()> {
    // on a terminal the status line replaces routine logs; RUST_LOG overrides
    let watching =
        args.log_format == LogFormat::Text && std::io::IsTerminal::is_terminal(&std::io::stderr());
    e2fleet_proto::logs::init(args.log_format, if watching { "warn" } else { "info" });
    signals::set_nice(args.nice);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(run_async(args))
}

/// Says why this machine's verification `verb`s when the reason changes (not when a busy
/// machine's percentage moves), and that it goes on when the pause ends.
fn tell_verification_pause(
    console: &signals::Console,
    reason: Option<Reason>,
    told: &mut Option<std::mem::Discriminant<Reason>>,
    verb: &str,
) {
    let kind = reason.map(|r| std::mem::discriminant(&r));
    if kind != *told {
        match reason {
            Some(reason) => console.say(&format!(
                "paused ({reason}): this machine's verification {verb}"
            )),
            None => console.say("resumed: this machine's verification goes on"),
        }
        *told = kind;
    }
}

/// Registers (again, with a saved identity: the coordinator learns this run's labels and
/// hardware class) until the coordinator answers.
async fn join(link: &mut Link) -> Result<()> {
    if link.has_token() {
        match link.register().await {
            Ok(()) => link.ok(),
            Err(s) if s.code() == Code::Unauthenticated => link.forget_token(),
            // away: the saved token serves until it is back
            Err(s) => link.fail("register", &s),
        }
    }
    while !link.has_token() {
        match link.register().await {
            Ok(()) => link.ok(),
            Err(s) if s.code() == Code::Unauthenticated => {
                anyhow::bail!(
                    "the coordinator at {} refused the enrolment token: {}",
                    link.api.url,
                    s.message()
                )
            }
            Err(s) if s.code() == Code::Unimplemented => {
                anyhow::bail!(
                    "the coordinator at {} does not speak this worker's protocol (e2fleet.v2): upgrade the older of the two",
                    link.api.url
                )
            }
            Err(s) => {
                link.fail("register", &s);
                tokio::time::sleep_until(link.next_try.into()).await;
            }
        }
    }
    Ok(())
}

async fn run_async(args: RunArgs) -> Result<()> {
    {
        let mut private = std::fs::DirBuilder::new();
        private.recursive(true);
        std::os::unix::fs::DirBuilderExt::mode(&mut private, 0o700);
        private.create(&args.data_dir).with_context(|| {
            format!(
                "cannot create the data directory {}",
                args.data_dir.display()
            )
        })?;
    }
    let journal = Journal::open(&args.data_dir)?;
    args.connect.check_transport(&args.coordinator)?;
    let token = args.connect.token()?;
    let api = Coordinator::lazy(&args.coordinator, args.connect.ca_cert.as_deref())
        .map_err(anyhow::Error::msg)?;
    let mut link = Link::new(
        api,
        token,
        crate::host::host_info(args.hostname.as_deref(), &args.engine),
        args.data_dir.join("identity.json"),
    );
    let mut conditions = Conditions::new(
        args.pause_file
            .clone()
            .unwrap_or_else(|| args.data_dir.join("pause")),
        args.on_battery,
        args.max_other_cpu,
        args.run_hours,
        args.power_supply_dir.clone(),
    )?;
    // 0 = running, 1 = stopping (report cursors), signals past that exit at once; until
    // the main loop holds units a stop signal exits at once (`signals::HOLDING`), and
    // SIGUSR1/SIGUSR2 pause and resume from here on
    let stop_signals = Arc::new(AtomicU8::new(0));
    signals::spawn_handler(stop_signals.clone());
    join(&mut link).await?;
    let console = signals::Console::new(args.log_format == LogFormat::Text);
    // the verification units are computing too: not on battery, not while paused
    let mut waiting_for = None;
    while let Some(reason) = conditions.reason(PAUSED.load(Ordering::SeqCst)) {
        tell_verification_pause(&console, Some(reason), &mut waiting_for, "waits");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let mut engine_args = args.engine.clone();
    // compiled engines live with the identity unless told otherwise
    engine_args
        .cache_dir
        .get_or_insert_with(|| args.data_dir.join("engines"));
    // a pause that begins while the units run holds them (and their builds) still
    let hold = Arc::new(AtomicBool::new(false));
    let verified = {
        let verify = verify_class(
            &mut link,
            &mut engine_args,
            args.hostname.as_deref(),
            &console,
            hold.clone(),
        );
        tokio::pin!(verify);
        loop {
            tokio::select! {
                done = &mut verify => break done,
                _ = tokio::time::sleep(Duration::from_millis(500)) => {
                    let reason = conditions.reason(PAUSED.load(Ordering::SeqCst));
                    hold.store(reason.is_some(), Ordering::SeqCst);
                    tell_verification_pause(&console, reason, &mut waiting_for, "holds still");
                }
            }
        }
    };
    if let Err(e) = verified {
        warn!(error = %format!("{e:#}"), "could not run the verification units now");
    }

    let threads = args.threads.unwrap_or_else(crate::host::cores).max(1);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let executor = Executor::start(threads, tx);
    executor.set_cpu_percent(args.cpu_percent);
    info!(threads, cpu_percent = args.cpu_percent, coordinator = %args.coordinator, "worker started");

    signals::HOLDING.store(true, Ordering::SeqCst);

    let give_back_after = Duration::from_secs(args.give_back_after);
    let started = Instant::now();
    let mut jobs: HashMap<JobId, JobEngine> = HashMap::new();
    let mut units_taken = 0u64;
    let mut units_reported = 0u64;
    let mut last_heartbeat = Instant::now();
    // a pause that starts or ends is told at once (the dashboard shows it), not at the
    // next heartbeat
    let mut tell_pause = false;
    let mut outbox: Vec<Entry> = journal.pending()?;
    if !outbox.is_empty() {
        info!(
            results = outbox.len(),
            "re-sending results from the journal"
        );
    }
    let mut stopping = false;
    let mut stop_started = Instant::now();
    let mut pause: Option<Reason> = None;
    let mut paused_since = Instant::now();
    let mut given_back = false;
    // no lease call before this (an empty answer says how long to wait); the loop itself
    // wakes at least every second, so a pause or a give-back is never late
    let mut lease_after = Instant::now();
    // leases whose job engine is not ready yet (spec not fetched, coordinator away):
    // kept and heartbeated, never dropped
    let mut waiting: Vec<Lease> = Vec::new();
    loop {
        // stop conditions
        let limit_reached = args.stop_after_units.is_some_and(|n| units_taken >= n)
            || args
                .stop_after_seconds
                .is_some_and(|s| started.elapsed() >= Duration::from_secs(s));
        if stop_signals.load(Ordering::SeqCst) >= 1 && !stopping {
            stopping = true;
            stop_started = Instant::now();
            let mut dropped = executor.stop_all();
            dropped.extend(waiting.drain(..).map(|l| l.lease_id));
            info!(
                released = dropped.len(),
                "stopping: engines report their exact cursors"
            );
            if !dropped.is_empty()
                && link.up()
                && let Err(s) = link.api.release(&dropped).await
            {
                warn!(code = ?s.code(), "could not release unstarted leases; they will expire");
            }
        }
        let now = conditions
            .reason(stop_signals.load(Ordering::SeqCst) == 0 && PAUSED.load(Ordering::SeqCst));
        if now.is_some() != pause.is_some() {
            executor.set_paused(now.is_some());
            paused_since = Instant::now();
            given_back = false;
        }
        // a line when the reason changes (not when a busy machine's percentage moves)
        let kind = |r: Option<Reason>| r.map(|r| std::mem::discriminant(&r));
        if kind(now) != kind(pause) {
            tell_pause = true;
            match now {
                Some(reason) => info!(paused = true, "engines paused: {reason}"),
                None => info!(paused = false, "engines resumed"),
            }
        }
        pause = now;
        let paused = pause.is_some();
        // a long pause gives the held units back, so a job's last units never wait on a
        // machine that is not computing
        if paused && !given_back && !stopping && paused_since.elapsed() >= give_back_after {
            given_back = true;
            let mut released = executor.give_back();
            released.extend(waiting.drain(..).map(|l| l.lease_id));
            let (_, running) = executor.load();
            if running > 0 || !released.is_empty() {
                info!(
                    running,
                    released = released.len(),
                    "paused for {} s: giving the held units back (running ones report their exact cursors)",
                    give_back_after.as_secs()
                );
            }
            if !released.is_empty()
                && link.up()
                && let Err(s) = link.api.release(&released).await
            {
                warn!(code = ?s.code(), "could not release unstarted leases; they will expire");
            }
        }

        // collect finished results: journal first, then send
        while let Ok(outcome) = rx.try_recv() {
            collect(outcome, &journal, &mut outbox, args.fault_misreport)?;
        }
        if link.up() && !outbox.is_empty() {
            // up to REPORTS_IN_FLIGHT reports at once: each is a round trip to the
            // coordinator (which batches their writes), and a worker on a split's short
            // units finishes hundreds a second
            let mut keep = Vec::new();
            let mut sending = tokio::task::JoinSet::new();
            let mut registered_again = false;
            let mut entries = outbox.drain(..);
            loop {
                while sending.len() < REPORTS_IN_FLIGHT && link.up() {
                    let Some(entry) = entries.next() else { break };
                    let mut api = link.api.clone();
                    sending.spawn(async move {
                        let answer = api.report(&entry.report()).await;
                        (entry, answer)
                    });
                }
                let Some(done) = sending.join_next().await else {
                    break;
                };
                let (entry, answer) = done.context("a report task failed")?;
                match answer {
                    Ok(outcome) => {
                        link.ok();
                        info!(lease_id = %entry.lease_id, unit_id = %entry.unit_id, committed = entry.result.committed, status = %outcome.status, "result reported");
                        journal.remove(entry.lease_id)?;
                        units_reported += 1;
                    }
                    Err(s) if s.code() == Code::Unauthenticated => {
                        link.fail("report", &s);
                        // once for the reports in flight: they all carried the old token
                        if !registered_again {
                            registered_again = true;
                            let _ = link.register().await;
                        }
                        keep.push(entry);
                    }
                    Err(s) if is_transient(&s) => {
                        link.fail("report", &s);
                        keep.push(entry);
                    }
                    Err(s) => {
                        error!(lease_id = %entry.lease_id, code = ?s.code(), message = s.message(), "the coordinator refused a result; kept in journal/rejected");
                        journal.reject(entry.lease_id)?;
                    }
                }
            }
            // the link went down before these were sent
            keep.extend(entries);
            outbox = keep;
        }

        let (queued, running) = executor.load();
        // done when asked to stop (or at a limit) and everything finished is delivered; at
        // a limit the units leased last (`waiting`, handed to the engines below) run
        // first, so `--stop-after-units N` walks and reports N units (a stop released them)
        let idle =
            queued == 0 && running == 0 && waiting.is_empty() && outbox.is_empty() && rx.is_empty();
        if (stopping || limit_reached) && idle {
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
        let heartbeat_every = (link.lease / 3).max(Duration::from_secs(1));
        if link.up() && (tell_pause || last_heartbeat.elapsed() >= heartbeat_every) {
            let mut held = executor.held();
            held.extend(waiting.iter().map(|l| (l.lease_id, 0)));
            let threads = if paused { 0 } else { executor.threads() as u32 };
            match link
                .api
                .heartbeat(
                    &held,
                    executor.per_core_rate(),
                    threads,
                    &pause.map(|r| r.to_string()).unwrap_or_default(),
                )
                .await
            {
                Ok(stop) => {
                    link.ok();
                    last_heartbeat = Instant::now();
                    tell_pause = false;
                    for id in stop {
                        info!(lease_id = %id, "coordinator asked to stop a lease");
                        executor.stop_lease(id);
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

        if !waiting.is_empty() && link.up() && !stopping {
            let mut still = Vec::new();
            for lease in waiting.drain(..) {
                match prepare_job(&mut link, &mut jobs, lease.job_id, &engine_args, &console).await
                {
                    Prepared::Ready(engine) => executor.push(Task { lease, engine }),
                    Prepared::Later => still.push(lease),
                    Prepared::Never => {}
                }
            }
            waiting = still;
        }
        let (queued, running) = executor.load();
        let queued = queued + waiting.len();

        // keep every thread busy (its engine full: one unit, or the lane engine's two or four)
        // with a queue of one more unit per thread, so short units never leave a thread
        // waiting on a round trip; on many threads ask in batches of at least half the
        // thread count (a queue never runs below half full)
        // results not yet reported hold their leases at the coordinator too
        let room = executor
            .capacity()
            .saturating_sub(queued + running + outbox.len());
        let want = if 2 * room >= executor.threads() {
            room
        } else {
            0
        };
        let remaining = args
            .stop_after_units
            .map_or(u64::MAX, |n| n.saturating_sub(units_taken));
        let want = want.min(remaining.min(64) as usize);
        let mut retry_after = Duration::from_millis(200);
        if want > 0
            && !stopping
            && !limit_reached
            && !paused
            && link.up()
            && Instant::now() >= lease_after
        {
            match link.api.lease(want, engine_args.kind()).await {
                Ok((leases, wait)) => {
                    link.ok();
                    if leases.is_empty() {
                        retry_after =
                            wait.clamp(Duration::from_millis(100), Duration::from_secs(30));
                    }
                    units_taken += leases.len() as u64;
                    if !leases.is_empty() {
                        // start them now: the loop's top hands leases to the engines
                        retry_after = Duration::ZERO;
                    }
                    waiting.extend(leases);
                }
                // asked too often (many short units): not a failure, just ask a little later
                Err(s) if s.code() == Code::ResourceExhausted => {
                    debug!(
                        message = s.message(),
                        "lease calls slowed down by the coordinator"
                    );
                    retry_after = Duration::from_millis(250);
                }
                Err(s) => {
                    link.fail("lease", &s);
                    if s.code() == Code::Unauthenticated {
                        let _ = link.register().await;
                    }
                }
            }
            lease_after = Instant::now() + retry_after;
        }

        {
            let (q, r) = executor.load();
            console.status(format!(
                "{} | {r}/{} engines busy, {} queued | {units_reported} units reported | {:.1} M placements/s per core | {}",
                match pause {
                    Some(reason) => format!("paused ({reason})"),
                    None if stopping => "stopping".to_string(),
                    None if args.cpu_percent < 100 => {
                        format!("running {}% of the time", args.cpu_percent)
                    }
                    None => "running".to_string(),
                },
                executor.threads(),
                q + waiting.len(),
                executor.per_core_rate() / 1e6,
                if link.up() { "coordinator connected".to_string() } else { format!("waiting for the coordinator ({} failures)", link.failures) },
            ));
        }

        // wait for a result, the retry time or a short tick (at most a second: the pause
        // conditions and the heartbeat are checked up here)
        let wait = if link.up() {
            retry_after
        } else {
            link.next_try
                .saturating_duration_since(Instant::now())
                .min(retry_after.max(Duration::from_millis(200)))
        }
        .min(Duration::from_secs(1));
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
