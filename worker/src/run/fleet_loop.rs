//! The worker's loop: one struct holding the worker's state, one method per phase.
//!
//! Each turn looks at the world (a gap in time, a stop, a pause), then starts whatever
//! calls are due without waiting for them: reports of finished results, a heartbeat, the
//! spec and engine build of a job whose leases wait, a lease call when the queue runs
//! low. Calls run as tasks; their answers come back as [`Answer`]s, and the turn ends
//! waiting for the first of: an engine's outcome, an answer, a stop or pause, or a tick
//! (at most a second). So a 300 ms link costs a round trip per call, never a round trip
//! per phase, and an engine thread never waits on a report going out.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use e2fleet_proto::api::{Heartbeat, JobId, Lease, LeaseId, ReportOutcome, ReportStatus};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tokio::task::JoinSet;
use tonic::{Code, Status};
use tracing::{debug, error, info, warn};

use super::RunConfig;
use super::connection::Connection;
use super::controls::{Controls, Snapshot};
use super::executor::{Executor, Outcome, Task, Yielded};
use super::jobs::{JobEngine, Prepared, prepare_job, verify_class};
use super::journal::{Entry, Journal};
use super::pacing::{Idle, IdleLedger, Outstanding, UnitPace, WakeWatch, queue_target};
use super::pause::{Conditions, Reason};
use super::signals::Console;
use crate::api::{BeatReply, is_transient};
use crate::engine_args::EngineArgs;
use crate::update::Updater;

/// How long a stopping worker keeps trying to deliver finished results before it exits
/// and leaves them in the journal (well inside systemd's and Kubernetes' stop timeouts).
const STOP_DELIVERY_GRACE: Duration = Duration::from_secs(20);

/// Fewest reports in flight at once (each a round trip; the coordinator batches their
/// writes); more on many threads with short units.
const MIN_REPORTS_IN_FLIGHT: usize = 8;
/// Most reports in flight at once.
const MAX_REPORTS_IN_FLIGHT: usize = 32;

/// Most units one lease call asks for.
const MAX_LEASES_PER_CALL: usize = 64;

/// How often a worker with an engine thread idle heartbeats (a unit it runs may be wanted
/// split for that thread; otherwise a third of the lease).
const IDLE_HEARTBEAT: Duration = Duration::from_secs(5);

/// A call's answer, back at the loop.
enum Answer {
    Leased {
        took: Duration,
        generation: u64,
        answer: Result<(Vec<Lease>, Duration), Status>,
    },
    Reported {
        took: Duration,
        generation: u64,
        entry: Box<Entry>,
        answer: Result<ReportOutcome, Status>,
    },
    Heartbeat {
        took: Duration,
        generation: u64,
        answer: Result<BeatReply, Status>,
    },
    Released {
        answer: Result<u32, Status>,
    },
    Prepared {
        job_id: JobId,
        prepared: Prepared,
    },
}

/// A report in flight.
struct Sending {
    sent: Instant,
    hedged: bool,
    entry: Entry,
}

/// The worker's loop and everything it keeps.
pub(super) struct FleetLoop {
    config: RunConfig,
    conn: Connection,
    journal: Journal,
    conditions: Conditions,
    console: Console,
    controls: Controls,
    engine: EngineArgs,
    /// Engines of the jobs prepared so far (or why a job cannot run here).
    jobs: HashMap<JobId, JobEngine>,
    /// Jobs whose spec and engine are being prepared.
    preparing: HashSet<JobId>,
    /// Leases whose job engine is not ready yet: kept and heartbeated, never dropped.
    waiting: Vec<Lease>,
    /// Results journalled and not yet sent.
    outbox: VecDeque<Entry>,
    /// Reports in flight, by lease: when sent, and whether a second copy went out (a
    /// report out longer than a hedge is sent again: with several coordinators the copy
    /// goes to one that answers; a repeat is acknowledged as a duplicate).
    sending: HashMap<LeaseId, Sending>,
    calls: JoinSet<Answer>,
    /// Release calls in flight (a stop waits for them: they hand units back).
    releases_out: usize,
    leases_out: Outstanding,
    heartbeats_out: Outstanding,
    /// No lease call before this (an empty answer says how long to wait).
    lease_after: Instant,
    /// Lease answers in a row that were empty: the coordinator has no unit for this
    /// worker (0: the last one had units).
    no_work: u32,
    last_heartbeat: Instant,
    /// Heartbeat at once (a pause began or ended, the machine woke up).
    heartbeat_now: bool,
    pause: Option<Reason>,
    paused_since: Instant,
    given_back: bool,
    stopping: Option<Instant>,
    started: Instant,
    units_taken: u64,
    units_reported: u64,
    pace: UnitPace,
    idle: IdleLedger,
    wake: WakeWatch,
    /// Signed updates the coordinator offers.
    updater: Updater,
}

impl FleetLoop {
    pub(super) fn new(
        config: RunConfig,
        conn: Connection,
        journal: Journal,
        conditions: Conditions,
        console: Console,
        controls: Controls,
    ) -> FleetLoop {
        let now = Instant::now();
        let updater = Updater::new(config.updates.clone(), &config.data_dir);
        FleetLoop {
            engine: config.engine.clone(),
            config,
            conn,
            journal,
            conditions,
            console,
            controls,
            jobs: HashMap::new(),
            preparing: HashSet::new(),
            waiting: Vec::new(),
            outbox: VecDeque::new(),
            sending: HashMap::new(),
            calls: JoinSet::new(),
            releases_out: 0,
            leases_out: Outstanding::default(),
            heartbeats_out: Outstanding::default(),
            lease_after: now,
            no_work: 0,
            last_heartbeat: now,
            heartbeat_now: false,
            pause: None,
            paused_since: now,
            given_back: false,
            stopping: None,
            started: now,
            units_taken: 0,
            units_reported: 0,
            pace: UnitPace::default(),
            idle: IdleLedger::new(now),
            wake: WakeWatch::new(),
            updater,
        }
    }

    /// Runs the verification units this machine's hardware class lacks (they are
    /// computing too: not on battery, not while paused; a pause that begins holds them
    /// still). A failure is logged: real work may still come.
    pub(super) async fn verify_this_machine(&mut self) {
        let mut told = None;
        while let Some(reason) = self.pause_reason() {
            tell_verification_pause(&self.console, Some(reason), &mut told, "waits");
            publish_verifying(&self.controls, &self.config, Some(reason));
            if self.controls.stopping() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        publish_verifying(&self.controls, &self.config, None);
        let hold = Arc::new(AtomicBool::new(false));
        let hostname = self.config.hostname.clone();
        let verified = {
            let verify = verify_class(
                &mut self.conn,
                &mut self.engine,
                hostname.as_deref(),
                &self.console,
                hold.clone(),
            );
            tokio::pin!(verify);
            loop {
                tokio::select! {
                    done = &mut verify => break done,
                    _ = tokio::time::sleep(Duration::from_millis(500)) => {
                        let reason = self.conditions.reason(self.controls.paused());
                        hold.store(reason.is_some(), Ordering::SeqCst);
                        tell_verification_pause(&self.console, reason, &mut told, "holds still");
                        publish_verifying(&self.controls, &self.config, reason);
                    }
                }
            }
        };
        if let Err(e) = verified {
            warn!(error = %format!("{e:#}"), "could not run the verification units now");
        }
    }

    fn pause_reason(&mut self) -> Option<Reason> {
        self.conditions.reason(self.controls.paused())
    }

    /// The loop: until stopped (or at a limit) with everything delivered. Returns the
    /// results delivered.
    pub(super) async fn run(mut self) -> Result<u64> {
        let threads = self.config.threads;
        let (tx, mut outcomes) = unbounded_channel();
        let executor = Executor::start(threads, tx);
        executor.set_cpu_percent(self.config.cpu_percent);
        info!(threads, cpu_percent = self.config.cpu_percent, coordinator = %self.config.coordinator, "worker started");
        self.controls.set_holding();
        self.outbox = self.journal.pending()?.into();
        if !self.outbox.is_empty() {
            info!(
                results = self.outbox.len(),
                "re-sending results from the journal"
            );
        }
        self.updater
            .offered(&self.conn.offered_release, &self.conn.api);
        loop {
            self.notice_an_update();
            self.notice_a_gap();
            self.notice_a_stop(&executor);
            self.notice_a_pause(&executor);
            self.send_reports();
            if self.finished(&executor, &outcomes) {
                break;
            }
            self.send_heartbeat(&executor);
            self.prepare_jobs();
            self.feed_engines(&executor);
            self.send_lease(&executor);
            self.account_idle(&executor);
            self.show_status(&executor);
            let tick = self.tick();
            tokio::select! {
                Some(outcome) = outcomes.recv() => self.collect(outcome)?,
                Some(done) = self.calls.join_next(), if !self.calls.is_empty() => {
                    self.answer(done.context("a call task failed")?, &executor).await?;
                }
                _ = self.controls.changed() => {}
                _ = tokio::time::sleep(tick) => {}
            }
        }
        executor.join();
        info!(
            units_taken = self.units_taken,
            units_reported = self.units_reported,
            "worker stopped cleanly: every result delivered"
        );
        Ok(self.units_reported)
    }

    /// A verified update is staged: stop as for any stop (exact cursors, every result
    /// delivered), for the caller of `run` to switch to it.
    fn notice_an_update(&mut self) {
        if self.stopping.is_some() {
            return;
        }
        if let Some(version) = self.updater.ready() {
            info!(%version, "stopping to switch to the update: running units report their exact cursors");
            self.controls.stop_for_update(version);
        }
    }

    /// The machine slept, or the process was stopped: leases may have expired meanwhile,
    /// so ask at once which still hold (the coordinator revives those whose units
    /// nobody took) instead of walking lost units until the next heartbeat.
    fn notice_a_gap(&mut self) {
        if let Some(away) = self.wake.turn() {
            info!(
                away_s = away.as_secs(),
                "the worker was away (the machine slept or the process was stopped): asking the coordinator which leases still hold"
            );
            self.heartbeat_now = true;
            // the coordinator may well be reachable again: do not wait out a backoff
            // that began before the gap
            self.conn.next_try = Instant::now();
        }
    }

    /// A stop (signal or [`Controls::stop`]): running units stop at their exact cursors
    /// and are reported; queued and waiting ones are released.
    fn notice_a_stop(&mut self, executor: &Executor) {
        if self.stopping.is_some() || !self.controls.stopping() {
            return;
        }
        self.stopping = Some(Instant::now());
        let mut dropped = executor.stop_all();
        dropped.extend(self.waiting.drain(..).map(|l| l.lease_id));
        info!(
            released = dropped.len(),
            "stopping: engines report their exact cursors"
        );
        self.release(dropped);
    }

    /// The pause conditions: engines pause and resume, a pause that begins or ends is told
    /// at once, and a long pause gives the held units back.
    fn notice_a_pause(&mut self, executor: &Executor) {
        let now = self
            .conditions
            .reason(self.stopping.is_none() && self.controls.paused());
        if now.is_some() != self.pause.is_some() {
            executor.set_paused(now.is_some());
            self.paused_since = Instant::now();
            self.given_back = false;
        }
        // a line when the reason changes (not when a busy machine's percentage moves)
        let kind = |r: Option<Reason>| r.map(|r| std::mem::discriminant(&r));
        if kind(now) != kind(self.pause) {
            self.heartbeat_now = true;
            match now {
                Some(reason) => info!(paused = true, "engines paused: {reason}"),
                None => info!(paused = false, "engines resumed"),
            }
        }
        self.pause = now;
        // a long pause gives the held units back, so a job's last units never wait on a
        // machine that is not computing
        if self.pause.is_some()
            && !self.given_back
            && self.stopping.is_none()
            && self.paused_since.elapsed() >= self.config.give_back_after
        {
            self.given_back = true;
            let mut released = executor.give_back();
            released.extend(self.waiting.drain(..).map(|l| l.lease_id));
            let (_, running) = executor.load();
            if running > 0 || !released.is_empty() {
                info!(
                    running,
                    released = released.len(),
                    "paused for {} s: giving the held units back (running ones report their exact cursors)",
                    self.config.give_back_after.as_secs()
                );
            }
            self.release(released);
        }
    }

    /// Gives unstarted leases back (a call in the background).
    fn release(&mut self, leases: Vec<LeaseId>) {
        if leases.is_empty() || !self.conn.up() {
            return;
        }
        let mut api = self.conn.api.clone();
        self.releases_out += 1;
        self.calls.spawn(async move {
            Answer::Released {
                answer: api.release(&leases).await,
            }
        });
    }

    /// A finished unit: journalled (fsync'd) first, then queued for sending.
    fn collect(&mut self, outcome: Outcome) -> Result<()> {
        match outcome {
            Outcome::Done(mut entry) => {
                if self.config.fault_misreport
                    && let Some(n) = entry.result.nodes_by_depth.iter_mut().find(|n| **n > 0)
                {
                    *n += 1;
                    entry.result.committed += 1;
                }
                self.pace.record(entry.engine_seconds);
                self.journal.write(&entry)?;
                self.outbox.push_back(*entry);
            }
            Outcome::Dropped { lease_id } => {
                debug!(%lease_id, "a dropped unit's run ended");
            }
            Outcome::Failed { lease_id, error } => {
                warn!(%lease_id, %error, "unit failed; its lease will expire and be re-run");
            }
        }
        Ok(())
    }

    /// Reports in flight at once: enough for the pace results come at over this link.
    fn reports_in_flight(&self) -> usize {
        let per_second = match self.pace.unit_seconds() {
            Some(secs) if secs > 0.0 => self.config.threads as f64 / secs,
            _ => 0.0,
        };
        let rtt = self.conn.round_trip().unwrap_or_default().as_secs_f64();
        ((2.0 * per_second * rtt).ceil() as usize)
            .clamp(MIN_REPORTS_IN_FLIGHT, MAX_REPORTS_IN_FLIGHT)
    }

    /// Sends journalled results, several at once, and a second copy of any report out
    /// for longer than a hedge.
    fn send_reports(&mut self) {
        if !self.conn.up() {
            return;
        }
        let hedge = self.hedge_after();
        let slow: Vec<Entry> = self
            .sending
            .values_mut()
            .filter(|s| !s.hedged && s.sent.elapsed() >= hedge)
            .map(|s| {
                s.hedged = true;
                s.entry.clone()
            })
            .collect();
        for entry in slow {
            debug!(lease_id = %entry.lease_id, "a report is slow to be answered; sending it again");
            self.spawn_report(entry);
        }
        let most = self.reports_in_flight();
        while self.sending.len() < most {
            let Some(entry) = self.outbox.pop_front() else {
                break;
            };
            self.sending.insert(
                entry.lease_id,
                Sending {
                    sent: Instant::now(),
                    hedged: false,
                    entry: entry.clone(),
                },
            );
            self.spawn_report(entry);
        }
    }

    fn spawn_report(&mut self, entry: Entry) {
        let mut api = self.conn.api.clone();
        let generation = self.conn.generation;
        self.calls.spawn(async move {
            let sent = Instant::now();
            let answer = api.report(&entry.report()).await;
            Answer::Reported {
                took: sent.elapsed(),
                generation,
                entry: Box::new(entry),
                answer,
            }
        });
    }

    /// Whether the loop is done: asked to stop (or at a limit) with everything finished
    /// delivered, or stopping with the coordinator away past the grace (finished results
    /// stay in the fsync'd journal and are sent at the next start).
    fn finished(&mut self, executor: &Executor, outcomes: &UnboundedReceiver<Outcome>) -> bool {
        let (queued, running) = executor.load();
        let engines_idle = queued == 0 && running == 0 && outcomes.is_empty();
        let delivered = self.waiting.is_empty()
            && self.outbox.is_empty()
            && self.sending.is_empty()
            && self.releases_out == 0;
        // at a limit the units leased last (`waiting`, handed to the engines) run first,
        // so `--stop-after-units N` walks and reports N units
        if (self.stopping.is_some() || self.at_limit()) && engines_idle && delivered {
            return true;
        }
        if let Some(since) = self.stopping
            && engines_idle
            && since.elapsed() >= STOP_DELIVERY_GRACE
        {
            warn!(
                unsent = self.outbox.len() + self.sending.len(),
                "stopping without delivering: the coordinator is unreachable; results stay in the journal for the next start"
            );
            return true;
        }
        false
    }

    fn at_limit(&self) -> bool {
        self.config
            .stop_after_units
            .is_some_and(|n| self.units_taken >= n)
            || self
                .config
                .stop_after
                .is_some_and(|d| self.started.elapsed() >= d)
    }

    /// Heartbeats well within the lease, every [`IDLE_HEARTBEAT`] while a thread is idle
    /// (and at once after a pause change or a gap):
    /// every lease held, running, queued, waiting for its engine, or finished and not
    /// yet acknowledged (the coordinator keeps those alive, or revives them).
    fn send_heartbeat(&mut self, executor: &Executor) {
        // an engine thread without a unit heartbeats more often: the coordinator may be
        // about to split a unit this worker runs for it (a heartbeat is how it hears)
        let mut every = (self.conn.lease / 3).max(Duration::from_secs(1));
        if executor.idle_threads() > 0 {
            every = every.min(IDLE_HEARTBEAT);
        }
        if !self.heartbeats_out.may_send(self.hedge_after())
            || !self.conn.up()
            || !(self.heartbeat_now || self.last_heartbeat.elapsed() >= every)
        {
            return;
        }
        let mut leases = executor.held();
        leases.extend(self.waiting.iter().map(|l| (l.lease_id, 0)));
        leases.extend(self.outbox.iter().map(|e| (e.lease_id, e.result.committed)));
        let beat = Heartbeat {
            leases,
            per_core_rate: executor.per_core_rate(),
            threads: if self.pause.is_some() {
                0
            } else {
                executor.threads() as u32
            },
            paused: self.pause.map(|r| r.to_string()).unwrap_or_default(),
            network_wait: self.idle.take(Instant::now(), executor.threads()),
            round_trip_ms: self
                .conn
                .round_trip()
                .map_or(0.0, |d| d.as_secs_f64() * 1000.0),
        };
        self.heartbeats_out.sent();
        self.heartbeat_now = false;
        let mut api = self.conn.api.clone();
        let generation = self.conn.generation;
        self.calls.spawn(async move {
            let sent = Instant::now();
            let answer = api.heartbeat(&beat).await;
            Answer::Heartbeat {
                took: sent.elapsed(),
                generation,
                answer,
            }
        });
    }

    /// Starts preparing the jobs of waiting leases (spec, engine build, self-test), each
    /// in the background once.
    fn prepare_jobs(&mut self) {
        if self.stopping.is_some() || !self.conn.up() {
            return;
        }
        let jobs: HashSet<JobId> = self.waiting.iter().map(|l| l.job_id).collect();
        for job_id in jobs {
            if self.jobs.contains_key(&job_id) || !self.preparing.insert(job_id) {
                continue;
            }
            let (api, engine, console) = (
                self.conn.api.clone(),
                self.engine.clone(),
                self.console.clone(),
            );
            self.calls.spawn(async move {
                Answer::Prepared {
                    job_id,
                    prepared: prepare_job(api, job_id, engine, console).await,
                }
            });
        }
    }

    /// Hands waiting leases whose job engine is ready to the engines (and drops those of
    /// jobs this worker cannot run: their leases expire and go elsewhere).
    fn feed_engines(&mut self, executor: &Executor) {
        if self.stopping.is_some() {
            return;
        }
        let jobs = &self.jobs;
        self.waiting.retain(|lease| match jobs.get(&lease.job_id) {
            Some(JobEngine::Ready(engine)) => {
                executor.push(Task {
                    lease: lease.clone(),
                    engine: engine.clone(),
                });
                false
            }
            Some(JobEngine::Broken(why)) => {
                warn!(job_id = %lease.job_id, %why, "skipping a unit of a job this worker cannot run");
                false
            }
            None => true,
        });
    }

    /// Units held now: running, queued, waiting for their engine, and finished but not
    /// yet acknowledged (their leases are still out at the coordinator); a report out
    /// longer than a hedge is stuck on a silent link and does not count (it would keep
    /// the engines from more work for as long as the link takes to be given up).
    fn held(&self, executor: &Executor) -> usize {
        let (queued, running) = executor.load();
        let hedge = self.hedge_after();
        let reporting = self
            .sending
            .values()
            .filter(|s| s.sent.elapsed() < hedge)
            .count();
        queued + running + self.waiting.len() + self.outbox.len() + reporting
    }

    /// Leases more units when the queue runs low: enough that every engine is full and
    /// the queue covers two round trips at the pace units finish.
    fn send_lease(&mut self, executor: &Executor) {
        if !self.leases_out.may_send(self.hedge_after())
            || self.stopping.is_some()
            || self.at_limit()
            || self.pause.is_some()
            || !self.conn.up()
            || Instant::now() < self.lease_after
        {
            return;
        }
        let threads = executor.threads();
        let target = queue_target(
            threads,
            executor.in_hand(),
            self.conn.round_trip(),
            self.pace.unit_seconds(),
        );
        let room = target.saturating_sub(self.held(executor));
        // on many threads ask in batches of at least half the thread count
        if room == 0 || 2 * room < threads.min(target) {
            return;
        }
        let remaining = self
            .config
            .stop_after_units
            .map_or(u64::MAX, |n| n.saturating_sub(self.units_taken));
        let want = room.min(MAX_LEASES_PER_CALL).min(remaining as usize);
        if want == 0 {
            return;
        }
        self.leases_out.sent();
        let mut api = self.conn.api.clone();
        let kind = self.engine.kind();
        let generation = self.conn.generation;
        self.calls.spawn(async move {
            let sent = Instant::now();
            let answer = api.lease(want, kind).await;
            Answer::Leased {
                took: sent.elapsed(),
                generation,
                answer,
            }
        });
    }

    /// Counts engine-thread time without a unit by why, for the heartbeat's network wait.
    fn account_idle(&mut self, executor: &Executor) {
        let why = if self.pause.is_some() || self.stopping.is_some() {
            Idle::Paused
        } else if !self.waiting.is_empty() || !self.preparing.is_empty() {
            Idle::Preparing
        } else if self.no_work > 0 {
            Idle::NoWork
        } else {
            Idle::Network
        };
        self.idle.turn(Instant::now(), executor.idle_threads(), why);
    }

    /// How long a lease call or heartbeat may be out before a second joins it.
    fn hedge_after(&self) -> Duration {
        Outstanding::hedge_after(self.conn.round_trip())
    }

    /// Until the next thing due: a lease call, a heartbeat, a backoff's end; at most a
    /// second (pause conditions are polled up here).
    fn tick(&self) -> Duration {
        let now = Instant::now();
        let mut next = now + Duration::from_secs(1);
        if !self.leases_out.any() && self.lease_after > now {
            next = next.min(self.lease_after);
        }
        if !self.conn.up() {
            next = next.min(self.conn.next_try);
        }
        next.saturating_duration_since(now)
            .max(Duration::from_millis(10))
    }

    /// Handles a call's answer.
    async fn answer(&mut self, answer: Answer, executor: &Executor) -> Result<()> {
        match answer {
            Answer::Leased {
                took,
                generation,
                answer,
            } => {
                self.leases_out.answered();
                let mut retry_after = Duration::ZERO;
                match answer {
                    Ok((leases, wait)) => {
                        self.conn.ok(took);
                        if leases.is_empty() {
                            // new units often come soon (a continuation when a result
                            // lands): ask again quickly at first, then less and less
                            // often, up to what the coordinator says
                            self.no_work = self.no_work.saturating_add(1);
                            let soon = Duration::from_millis(100 << self.no_work.min(8));
                            retry_after = soon
                                .min(wait)
                                .clamp(Duration::from_millis(100), Duration::from_secs(30));
                        } else {
                            self.no_work = 0;
                        }
                        self.units_taken += leases.len() as u64;
                        if self.stopping.is_some() {
                            // an answer that crossed the stop: hand these back at once
                            self.release(leases.into_iter().map(|l| l.lease_id).collect());
                        } else {
                            self.waiting.extend(leases);
                        }
                    }
                    // asked too often (many short units): not a failure, just ask later
                    Err(s) if s.code() == Code::ResourceExhausted => {
                        debug!(
                            message = s.message(),
                            "lease calls slowed down by the coordinator"
                        );
                        retry_after = Duration::from_millis(250);
                    }
                    Err(s) => self.failed("lease", &s, took, generation).await,
                }
                self.lease_after = Instant::now() + retry_after;
            }
            Answer::Reported {
                took,
                generation,
                entry,
                answer,
            } => {
                if self.sending.remove(&entry.lease_id).is_none() {
                    // the other copy of a hedged report was answered first
                    return Ok(());
                }
                match answer {
                    Ok(outcome) => {
                        self.conn.ok(took);
                        self.reported(&entry, &outcome)?;
                    }
                    Err(s) if is_transient(&s) || s.code() == Code::Unauthenticated => {
                        self.failed("report", &s, took, generation).await;
                        self.outbox.push_front(*entry);
                    }
                    Err(s) => {
                        error!(lease_id = %entry.lease_id, code = ?s.code(), message = s.message(), "the coordinator refused a result; kept in journal/rejected");
                        self.journal.reject(entry.lease_id)?;
                    }
                }
            }
            Answer::Heartbeat {
                took,
                generation,
                answer,
            } => {
                self.heartbeats_out.answered();
                match answer {
                    Ok(reply) => {
                        self.conn.ok(took);
                        self.last_heartbeat = Instant::now();
                        self.drop_leases(&reply.drop, executor)?;
                        self.yield_leases(&reply.yield_now, executor);
                        self.updater.offered(&reply.offered_release, &self.conn.api);
                    }
                    Err(s) => {
                        self.heartbeat_now = true;
                        self.failed("heartbeat", &s, took, generation).await;
                    }
                }
            }
            Answer::Released { answer } => {
                self.releases_out = self.releases_out.saturating_sub(1);
                match answer {
                    Ok(n) => debug!(released = n, "leases released"),
                    Err(s) => {
                        warn!(code = ?s.code(), "could not release unstarted leases; they will expire")
                    }
                }
            }
            Answer::Prepared { job_id, prepared } => {
                self.preparing.remove(&job_id);
                match prepared {
                    Prepared::Ready(engine) => {
                        self.jobs.insert(job_id, JobEngine::Ready(engine));
                    }
                    Prepared::Never(why) => {
                        self.jobs.insert(job_id, JobEngine::Broken(why));
                    }
                    // tried again at the next turn the coordinator is up
                    Prepared::Later(s) => {
                        let generation = self.conn.generation;
                        self.failed("job spec", &s, Duration::ZERO, generation)
                            .await;
                    }
                }
            }
        }
        Ok(())
    }

    /// A call failed: back off; an unknown token (the coordinator lost this identity, or
    /// replaced its token) registers again, once for all the calls that carried the old
    /// token.
    async fn failed(&mut self, what: &str, s: &Status, took: Duration, generation: u64) {
        self.conn.fail(what, s, Instant::now() - took);
        if s.code() == Code::Unauthenticated && generation == self.conn.generation {
            let _ = self.conn.register().await;
        }
    }

    /// A report the coordinator answered: acknowledged, out of the journal.
    fn reported(&mut self, entry: &Entry, outcome: &ReportOutcome) -> Result<()> {
        match outcome.status {
            ReportStatus::Late => {
                info!(lease_id = %entry.lease_id, unit_id = %entry.unit_id, detail = %outcome.detail, "result too late to count (no fault of this worker)");
            }
            status => {
                info!(lease_id = %entry.lease_id, unit_id = %entry.unit_id, committed = entry.result.committed, %status, "result reported");
            }
        }
        self.journal.remove(entry.lease_id)?;
        self.units_reported += 1;
        Ok(())
    }

    /// Leases the coordinator says are lost, decided elsewhere or cancelled: their runs
    /// stop without a report, and finished results on them are not sent.
    fn drop_leases(&mut self, leases: &[LeaseId], executor: &Executor) -> Result<()> {
        for id in leases {
            let held = executor.abandon(*id);
            let waited = self.waiting.len();
            self.waiting.retain(|l| l.lease_id != *id);
            let unsent = self.outbox.len();
            self.outbox.retain(|e| e.lease_id != *id);
            if self.outbox.len() < unsent {
                self.journal.remove(*id)?;
            }
            if held || self.waiting.len() < waited || self.outbox.len() < unsent {
                info!(lease_id = %id, "lease dropped: the coordinator says its unit went elsewhere or needs no more runs");
            }
        }
        Ok(())
    }

    /// Leases the coordinator wants split for idle threads elsewhere: a running unit
    /// stops at its exact cursor and reports it (the coordinator counts the run and
    /// splits the rest); a unit not started yet goes back whole.
    fn yield_leases(&mut self, leases: &[LeaseId], executor: &Executor) {
        let mut back = Vec::new();
        for id in leases {
            match executor.yield_lease(*id) {
                Yielded::Stopping => {
                    info!(lease_id = %id, "unit stopped at its cursor: the coordinator splits the rest for idle threads")
                }
                Yielded::Dequeued => back.push(*id),
                Yielded::NotHeld => {
                    let waited = self.waiting.len();
                    self.waiting.retain(|l| l.lease_id != *id);
                    if self.waiting.len() < waited {
                        back.push(*id);
                    }
                }
            }
        }
        if !back.is_empty() {
            self.release(back);
        }
    }

    /// The status line a person watching sees.
    /// The status line a person watching sees, and the snapshot `e2fleet-worker status`
    /// reads.
    fn show_status(&self, executor: &Executor) {
        let (queued, running) = executor.load();
        let state = match self.pause {
            Some(reason) => format!("paused ({reason})"),
            None if self.stopping.is_some() => "stopping".to_string(),
            None if self.config.cpu_percent < 100 => {
                format!("running {}% of the time", self.config.cpu_percent)
            }
            None => "running".to_string(),
        };
        let coordinator = if self.conn.up() && self.conn.failures() == 0 {
            match self.conn.round_trip() {
                Some(rtt) => format!("connected ({} ms round trip)", rtt.as_millis()),
                None => "connected".to_string(),
            }
        } else {
            format!("waiting for it ({} failures)", self.conn.failures())
        };
        let snapshot = Snapshot {
            state,
            paused_by_owner: self.controls.paused(),
            threads: executor.threads(),
            engines_busy: running,
            queued: queued + self.waiting.len(),
            units_reported: self.units_reported,
            per_core_nodes_per_s: executor.per_core_rate(),
            coordinator,
        };
        self.console.status(format!(
            "{} | {running}/{} engines busy, {} queued | {} units reported | {:.1} M nodes/s per core | coordinator {}",
            snapshot.state,
            snapshot.threads,
            snapshot.queued,
            snapshot.units_reported,
            snapshot.per_core_nodes_per_s / 1e6,
            snapshot.coordinator,
        ));
        self.controls.publish(snapshot);
    }
}

/// What `status` says while this machine's verification runs, or waits on `pause`.
fn publish_verifying(controls: &Controls, config: &RunConfig, pause: Option<Reason>) {
    controls.publish(Snapshot {
        state: match pause {
            Some(reason) => format!("paused ({reason}): this machine's verification waits"),
            None => "verifying this machine".to_string(),
        },
        threads: config.threads,
        coordinator: config.coordinator.clone(),
        ..Snapshot::default()
    });
}

/// Says why this machine's verification `verb`s when the reason changes (not when a busy
/// machine's percentage moves), and that it goes on when the pause ends.
fn tell_verification_pause(
    console: &Console,
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
