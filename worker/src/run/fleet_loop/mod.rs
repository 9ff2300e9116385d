//! The worker's loop: one struct holding the worker's state, one method per phase.
//!
//! Each turn looks at the world (a gap in time, a stop, a pause), then starts whatever
//! calls are due without waiting for them: reports of finished results, a heartbeat, the
//! spec and engine build of a job whose leases wait, a lease call when the queue runs
//! low. Calls run as tasks; their answers come back as [`Answer`]s, and the turn ends
//! waiting for the first of: an engine's outcome, an answer, a stop or pause, or a tick
//! (at most a second). So a 300 ms link costs a round trip per call, never a round trip
//! per phase, and an engine thread never waits on a report going out.
//!
//! # Layout
//! - this file: the state ([`FleetLoop`]), the turn ([`FleetLoop::run`]), what each turn
//!   notices first (an update staged, a gap, a stop, a pause) and when the loop is done;
//! - `calls.rs`: the calls a turn starts (reports, heartbeat, job preparation, leases)
//!   and the engines it feeds;
//! - `answers.rs`: engine outcomes and call answers as they come back;
//! - `status.rs`: this machine's verification at start and what `status` shows.

mod answers;
mod calls;
mod status;

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use e2fleet_proto::api::{JobId, Lease, LeaseId, ReportOutcome};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tokio::task::JoinSet;
use tonic::Status;
use tracing::{info, warn};

use super::RunConfig;
use super::connection::Connection;
use super::controls::Controls;
use super::executor::{Executor, Outcome};
use super::jobs::{JobEngine, Prepared};
use super::journal::{Entry, Journal};
use super::pacing::{IdleLedger, Outstanding, UnitPace, WakeWatch};
use super::pause::{Conditions, Reason};
use super::signals::Console;
use crate::api::BeatReply;
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
}
