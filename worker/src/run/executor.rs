//! Engine threads: one engine per thread (default: every core), fed from a queue of leased
//! units. Threads never touch the network; they hand finished or stopped results back to
//! the async loop, which journals and reports them.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use e2fleet_engine::engine::{Engine, EngineError, EngineKind, Feed, Work};
use e2fleet_engine::search::{Control, RunOptions};
use e2fleet_engine::unit::UnitResult;
use e2fleet_proto::REPORT_MAX_SOLUTIONS;
use e2fleet_proto::api::{JobId, Lease, LeaseId};
use tokio::sync::mpsc::UnboundedSender;
use tracing::{error, info, info_span};

use super::journal::Entry;
use crate::engine_args::EngineFactory;

/// A leased unit ready to walk.
pub struct Task {
    /// The lease (unit, job, budget).
    pub lease: Lease,
    /// The engine for its job.
    pub engine: Arc<EngineFactory>,
}

/// What a thread hands back.
pub enum Outcome {
    /// A result to journal and report.
    Done(Box<Entry>),
    /// A lease dropped on the coordinator's word ([`Executor::abandon`]): its run
    /// stopped and its result is not reported.
    Dropped {
        /// Lease id.
        lease_id: LeaseId,
    },
    /// The engine failed on this lease (the lease will expire and be re-run elsewhere).
    Failed {
        /// Lease id.
        lease_id: LeaseId,
        /// What went wrong.
        error: String,
    },
}

/// What [`Executor::yield_lease`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Yielded {
    /// The run stops at its cursor and its result is sent as usual.
    Stopping,
    /// The unit was queued, not started: it is the caller's to give back.
    Dequeued,
    /// Not held here (finished, or never given to the engines).
    NotHeld,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<VecDeque<Task>>,
    ready: Condvar,
    running: Mutex<HashMap<LeaseId, Arc<AtomicU64>>>,
    stop_leases: Mutex<HashSet<LeaseId>>,
    /// Leases whose runs stop without a report.
    abandoned: Mutex<HashSet<LeaseId>>,
    /// Engine threads waiting on the queue with no unit.
    idle_threads: AtomicUsize,
    stop_all: AtomicBool,
    exit: AtomicBool,
    paused: AtomicBool,
    /// `--cpu-percent`: the share of each engine thread's time it walks (100: all).
    cpu_percent: AtomicU32,
    /// (nodes, engine nanoseconds) of finished runs, for the per-core rate.
    totals: Mutex<(u64, u128)>,
    /// The most units an engine of this executor has held at once (the lane engine 2 or
    /// 4, walking; the compiled engine 2, one walking and one waiting in its process).
    in_hand: AtomicUsize,
}

/// How long an engine walks between two rests under `--cpu-percent`.
const THROTTLE_SLICE: Duration = Duration::from_millis(200);

/// How one lease's walk is steered: its progress published, held while the executor is
/// paused and for the rests `--cpu-percent` asks (a compiled engine is told to pause, see
/// [`Control::paused`]), stopped when its lease or every lease is.
struct LeaseControl<'a> {
    shared: &'a Shared,
    lease_id: LeaseId,
    progress: Arc<AtomicU64>,
    /// Time held in a pause, left out of the run's engine time.
    paused_for: Duration,
    /// What [`Control::paused`] last answered, if the engine asked before this poll: a
    /// poll holds only an engine that knows it is held (a pause that began between the
    /// question and the poll is taken at the next poll).
    told: Option<bool>,
    /// When the engine last began to walk (its start, or the end of a pause or a rest).
    walked_since: Instant,
}

impl LeaseControl<'_> {
    /// The rest due now under `--cpu-percent` P, if one is: after a slice of walking, a
    /// rest of its length x (100 - P) / P, so the engine walks P% of the time.
    fn rest_due(&self) -> Option<Duration> {
        let percent = self.shared.cpu_percent.load(Ordering::SeqCst);
        if percent >= 100 || percent == 0 {
            return None;
        }
        let walked = self.walked_since.elapsed();
        (walked >= THROTTLE_SLICE).then(|| walked * (100 - percent) / percent)
    }

    fn stop(&self) -> bool {
        self.shared.stop_all.load(Ordering::SeqCst)
            || self
                .shared
                .stop_leases
                .lock()
                .expect("stop set")
                .contains(&self.lease_id)
    }
}

impl Control for LeaseControl<'_> {
    fn poll(&mut self, committed: u64) -> bool {
        self.progress.store(committed, Ordering::Relaxed);
        let told = self.told.take();
        let rest = self.rest_due();
        if (self.shared.paused.load(Ordering::SeqCst) || rest.is_some()) && told != Some(false) {
            let since = Instant::now();
            // a resting or paused engine still stops when told to (a stop, a cancelled
            // job, a pause long enough to give the unit back); a pause that begins in a
            // rest goes on after it
            if let Some(rest) = rest {
                while since.elapsed() < rest && !self.stop() {
                    std::thread::sleep((rest - since.elapsed()).min(Duration::from_millis(50)));
                }
            }
            while self.shared.paused.load(Ordering::SeqCst) && !self.stop() {
                std::thread::sleep(Duration::from_millis(200));
            }
            self.paused_for += since.elapsed();
            self.walked_since = Instant::now();
        }
        self.stop()
    }

    fn held(&self) -> Duration {
        self.paused_for
    }

    fn paused(&mut self) -> bool {
        let paused = self.shared.paused.load(Ordering::SeqCst) || self.rest_due().is_some();
        self.told = Some(paused);
        paused
    }
}

/// The pool of engine threads.
pub struct Executor {
    shared: Arc<Shared>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Executor {
    /// Starts `threads` engine threads sending outcomes to `results`.
    pub fn start(threads: usize, results: UnboundedSender<Outcome>) -> Executor {
        let shared = Arc::new(Shared {
            cpu_percent: AtomicU32::new(100),
            in_hand: AtomicUsize::new(1),
            ..Shared::default()
        });
        let handles = (0..threads.max(1))
            .map(|i| {
                let shared = shared.clone();
                let results = results.clone();
                std::thread::Builder::new()
                    .name(format!("engine-{i}"))
                    .spawn(move || engine_thread(shared, results))
                    .expect("spawn an engine thread")
            })
            .collect();
        Executor {
            shared,
            threads: handles,
        }
    }

    /// Queues a unit.
    pub fn push(&self, task: Task) {
        self.shared.queue.lock().expect("queue").push_back(task);
        self.shared.ready.notify_one();
    }

    /// Units queued and units running.
    pub fn load(&self) -> (usize, usize) {
        (
            self.shared.queue.lock().expect("queue").len(),
            self.shared.running.lock().expect("running").len(),
        )
    }

    /// Every lease held (queued or running) with its progress.
    pub fn held(&self) -> Vec<(LeaseId, u64)> {
        let mut out: Vec<(LeaseId, u64)> = self
            .shared
            .running
            .lock()
            .expect("running")
            .iter()
            .map(|(id, p)| (*id, p.load(Ordering::Relaxed)))
            .collect();
        out.extend(
            self.shared
                .queue
                .lock()
                .expect("queue")
                .iter()
                .map(|t| (t.lease.lease_id, 0)),
        );
        out
    }

    /// Drops one lease without a report (the coordinator says it is lost or decided
    /// elsewhere): a queued one leaves the queue, a running one stops and its result is
    /// thrown away ([`Outcome::Dropped`]). Whether it was held here.
    pub fn abandon(&self, lease_id: LeaseId) -> bool {
        let mut queue = self.shared.queue.lock().expect("queue");
        let before = queue.len();
        queue.retain(|t| t.lease.lease_id != lease_id);
        let was_queued = queue.len() < before;
        drop(queue);
        let running = self
            .shared
            .running
            .lock()
            .expect("running")
            .contains_key(&lease_id);
        if running {
            self.shared
                .abandoned
                .lock()
                .expect("abandoned set")
                .insert(lease_id);
            self.shared
                .stop_leases
                .lock()
                .expect("stop set")
                .insert(lease_id);
        }
        was_queued || running
    }

    /// Stops one lease's run at its exact cursor, to be reported (the coordinator splits
    /// the rest of its unit); a queued one leaves the queue unstarted.
    pub fn yield_lease(&self, lease_id: LeaseId) -> Yielded {
        let mut queue = self.shared.queue.lock().expect("queue");
        let before = queue.len();
        queue.retain(|t| t.lease.lease_id != lease_id);
        if queue.len() < before {
            return Yielded::Dequeued;
        }
        drop(queue);
        if self
            .shared
            .running
            .lock()
            .expect("running")
            .contains_key(&lease_id)
        {
            self.shared
                .stop_leases
                .lock()
                .expect("stop set")
                .insert(lease_id);
            return Yielded::Stopping;
        }
        Yielded::NotHeld
    }

    /// Engine threads without a unit now (waiting on the queue; a lane engine short of
    /// units is not idle).
    pub fn idle_threads(&self) -> usize {
        self.shared.idle_threads.load(Ordering::Relaxed)
    }

    /// Units an engine holds at once (1; the lane engine's 2 or 4; the compiled engine's
    /// 2 on short units), the most seen so far.
    pub fn in_hand(&self) -> usize {
        self.shared.in_hand.load(Ordering::Relaxed)
    }

    /// Empties the queue; the leases of the units it held.
    fn drain_queue(&self) -> Vec<LeaseId> {
        self.shared
            .queue
            .lock()
            .expect("queue")
            .drain(..)
            .map(|t| t.lease.lease_id)
            .collect()
    }

    /// Stops everything: running units stop at once and report their exact cursor;
    /// queued ones are dropped (their leases expire and are re-run elsewhere).
    pub fn stop_all(&self) -> Vec<LeaseId> {
        self.shared.stop_all.store(true, Ordering::SeqCst);
        let dropped = self.drain_queue();
        self.shared.ready.notify_all();
        dropped
    }

    /// Gives every held unit back without stopping the threads: running units stop at
    /// their exact cursor and report it (paused ones too); queued ones are dropped and
    /// returned, for the caller to release.
    pub fn give_back(&self) -> Vec<LeaseId> {
        let dropped = self.drain_queue();
        let running: Vec<LeaseId> = self
            .shared
            .running
            .lock()
            .expect("running")
            .keys()
            .copied()
            .collect();
        self.shared
            .stop_leases
            .lock()
            .expect("stop set")
            .extend(running);
        dropped
    }

    /// Lets each engine thread walk `percent`% of its time (`--cpu-percent`; 100: all of
    /// it): a slice of walking, then a rest in which the engine holds still, its place in
    /// the tree kept. Rests are not engine time.
    pub fn set_cpu_percent(&self, percent: u32) {
        self.shared
            .cpu_percent
            .store(percent.clamp(1, 100), Ordering::SeqCst);
    }

    /// Pauses or resumes the engines (a paused engine holds its place in the tree).
    pub fn set_paused(&self, paused: bool) {
        self.shared.paused.store(paused, Ordering::SeqCst);
    }

    /// The per-core rate of finished runs so far (nodes per engine-thread second).
    pub fn per_core_rate(&self) -> f64 {
        let (nodes, nanos) = *self.shared.totals.lock().expect("totals");
        if nanos == 0 {
            0.0
        } else {
            nodes as f64 / (nanos as f64 / 1e9)
        }
    }

    /// Number of engine threads.
    pub fn threads(&self) -> usize {
        self.threads.len()
    }

    /// Lets the threads exit once the queue is empty, and waits for them.
    pub fn join(self) {
        self.shared.exit.store(true, Ordering::SeqCst);
        self.shared.ready.notify_all();
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn engine_thread(shared: Arc<Shared>, results: UnboundedSender<Outcome>) {
    let mut engines: HashMap<JobId, Box<dyn Engine>> = HashMap::new();
    loop {
        let task = {
            let mut q = shared.queue.lock().expect("queue");
            if q.is_empty() {
                shared.idle_threads.fetch_add(1, Ordering::Relaxed);
            }
            let waited = q.is_empty();
            let task = loop {
                if let Some(t) = q.pop_front() {
                    break Some(t);
                }
                if shared.exit.load(Ordering::SeqCst) || shared.stop_all.load(Ordering::SeqCst) {
                    break None;
                }
                q = shared
                    .ready
                    .wait_timeout(q, Duration::from_millis(500))
                    .expect("queue")
                    .0;
            };
            if waited {
                shared.idle_threads.fetch_sub(1, Ordering::Relaxed);
            }
            task
        };
        let Some(task) = task else { return };
        let job_id = task.lease.job_id;
        let engine = engines.entry(job_id).or_insert_with(|| task.engine.make());
        shared
            .in_hand
            .fetch_max(engine.units_in_hand(), Ordering::Relaxed);
        let mut feed = LeaseFeed {
            shared: &shared,
            results: &results,
            job_id,
            in_hand: engine.units_in_hand(),
            engine_kind: engine.kind(),
            engine_build: engine.build_id(),
            walking: HashMap::new(),
            failed: false,
        };
        let first = feed.work(task);
        // an engine that holds one unit at a time logs inside that unit's span
        let span = match feed.in_hand {
            1 => feed.walking.values().next().map(|w| w.span.clone()),
            _ => None,
        };
        let _unit = span.map(tracing::Span::entered);
        engine.run_feed(first, &mut feed);
        if feed.failed {
            // never reuse an engine that failed (a compiled engine's process is gone)
            engines.remove(&job_id);
        }
    }
}

/// A lease being walked, as its thread's feed keeps it.
struct Walking {
    lease: Lease,
    /// Its tracing span (the ids the coordinator's log shows for the unit too).
    span: tracing::Span,
}

/// Hands one engine thread's engine its leases: the one the thread took, and, to an
/// engine that holds several units at once (the lane engine walks two or four; the compiled
/// engine has a short unit's successor waiting in its process), further queued leases of
/// the same job, up to [`Engine::units_in_hand`] (so no more than one lease waits behind
/// a unit that turns out long while another thread could walk it); every result goes
/// back to the async loop.
struct LeaseFeed<'s> {
    shared: &'s Shared,
    results: &'s UnboundedSender<Outcome>,
    job_id: JobId,
    /// The most leases the engine holds at once: more than one, take queued leases of
    /// its job.
    in_hand: usize,
    engine_kind: EngineKind,
    engine_build: String,
    /// Leases handed out and not done, by tag (the smallest tag not in use).
    walking: HashMap<usize, Walking>,
    /// The engine failed on a unit: drop it once its walk returns.
    failed: bool,
}

impl<'s> LeaseFeed<'s> {
    /// A leased unit as work for the engine: published as running, steered by a
    /// [`LeaseControl`].
    fn work(&mut self, task: Task) -> Work<'s> {
        let lease = task.lease;
        let span = info_span!("unit", lease_id = %lease.lease_id, unit_id = %lease.unit_id, job_id = %lease.job_id);
        span.in_scope(|| info!(budget = ?lease.budget, prefix_depth = lease.unit.prefix.len(), "unit started"));
        let progress = Arc::new(AtomicU64::new(0));
        self.shared
            .running
            .lock()
            .expect("running")
            .insert(lease.lease_id, progress.clone());
        let tag = (0..)
            .find(|t| !self.walking.contains_key(t))
            .expect("a free tag");
        let work = Work {
            tag,
            unit: lease.unit.clone(),
            options: RunOptions {
                budget: lease.budget,
                max_solutions: REPORT_MAX_SOLUTIONS,
            },
            control: Box::new(LeaseControl {
                shared: self.shared,
                lease_id: lease.lease_id,
                progress,
                paused_for: Duration::ZERO,
                told: None,
                walked_since: Instant::now(),
            }),
        };
        self.walking.insert(tag, Walking { lease, span });
        work
    }
}

impl<'s> Feed<'s> for LeaseFeed<'s> {
    fn next(&mut self) -> Option<Work<'s>> {
        if self.walking.len() >= self.in_hand
            || self.failed
            || self.shared.stop_all.load(Ordering::SeqCst)
        {
            return None;
        }
        // the first queued lease of this job (another job's lease waits for a thread
        // that is free: this engine walks this job's puzzle only)
        let task = {
            let mut q = self.shared.queue.lock().expect("queue");
            let at = q.iter().position(|t| t.lease.job_id == self.job_id)?;
            q.remove(at)?
        };
        Some(self.work(task))
    }

    fn done(&mut self, work: Work<'s>, outcome: Result<UnitResult, EngineError>, seconds: f64) {
        let Some(Walking { lease, span }) = self.walking.remove(&work.tag) else {
            error!(tag = work.tag, "an engine returned a unit it was not given");
            return;
        };
        let _unit = span.entered();
        self.shared
            .running
            .lock()
            .expect("running")
            .remove(&lease.lease_id);
        self.shared
            .stop_leases
            .lock()
            .expect("stop set")
            .remove(&lease.lease_id);
        if self
            .shared
            .abandoned
            .lock()
            .expect("abandoned set")
            .remove(&lease.lease_id)
        {
            info!("unit dropped on the coordinator's word; not reported");
            let _ = self.results.send(Outcome::Dropped {
                lease_id: lease.lease_id,
            });
            return;
        }
        match outcome {
            Ok(result) => {
                // the seconds leave out time held (pauses, rests): the per-core rate is
                // of time walking
                {
                    let mut t = self.shared.totals.lock().expect("totals");
                    t.0 += result.committed;
                    t.1 += (seconds * 1e9) as u128;
                }
                info!(
                    committed = result.committed,
                    finished = result.finished(),
                    seconds,
                    "unit walked"
                );
                let _ = self.results.send(Outcome::Done(Box::new(Entry {
                    lease_id: lease.lease_id,
                    unit_id: lease.unit_id,
                    job_id: lease.job_id,
                    result,
                    engine_seconds: seconds,
                    engine_kind: self.engine_kind,
                    engine_build: self.engine_build.clone(),
                })));
            }
            Err(e) => {
                error!(error = %e, "engine failed on a unit");
                self.failed = true;
                let _ = self.results.send(Outcome::Failed {
                    lease_id: lease.lease_id,
                    error: e.to_string(),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use e2fleet_engine::order::FillOrder;
    use e2fleet_engine::plan::SearchPlan;
    use e2fleet_engine::unit::Unit;
    use e2fleet_proto::api::UnitId;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        engine: crate::engine_args::EngineArgs,
    }

    /// Brendan set 1 6x6 in row-major order.
    fn plan() -> Arc<SearchPlan> {
        plan_of("brendan-set1-06x06")
    }

    /// The built-in board `name`, in row-major order.
    fn plan_of(name: &str) -> Arc<SearchPlan> {
        let text = e2fleet_engine::suite::builtin_puzzle(name).unwrap();
        let puzzle = e2fleet_engine::formats::parse_str(
            text,
            &e2fleet_engine::suite::builtin_label(name, text),
            &e2fleet_engine::formats::LoadOptions::default(),
        )
        .unwrap();
        Arc::new(SearchPlan::new(&puzzle, &FillOrder::row_major(&puzzle)))
    }

    /// A lease of `unit` of job `job_id` with `budget`, walked by `engine`.
    fn lease_task(engine: &Arc<EngineFactory>, job_id: JobId, unit: Unit, budget: u64) -> Task {
        Task {
            lease: Lease {
                lease_id: LeaseId::random(),
                unit_id: UnitId(1),
                job_id,
                unit,
                budget: Some(budget),
                deadline_ms: 0,
            },
            engine: engine.clone(),
        }
    }

    /// Engines of `kind` for Brendan set 1 6x6.
    fn factory(kind: &str) -> Arc<EngineFactory> {
        factory_on(kind, &plan())
    }

    fn factory_on(kind: &str, plan: &Arc<SearchPlan>) -> Arc<EngineFactory> {
        let flags = Flags::parse_from(["t", "--engine", kind]);
        Arc::new(flags.engine.factory(plan, false).unwrap())
    }

    /// The reference engine on Brendan set 1 6x6, from the root with `budget`, a job of
    /// its own.
    fn task(budget: u64) -> Task {
        task_on("reference", budget)
    }

    /// `engine` on Brendan set 1 6x6, from the root with `budget`, a job of its own.
    fn task_on(engine: &str, budget: u64) -> Task {
        lease_task(&factory(engine), JobId::random(), Unit::root(), budget)
    }

    fn done(outcome: Outcome) -> Box<Entry> {
        match outcome {
            Outcome::Done(entry) => entry,
            Outcome::Failed { error, .. } => panic!("{error}"),
            Outcome::Dropped { lease_id } => panic!("{lease_id} dropped"),
        }
    }

    #[test]
    fn paused_time_is_not_engine_time_and_a_paused_unit_can_be_given_back() {
        for engine in ["reference", "lanes"] {
            paused_and_given_back(engine);
        }
    }

    fn paused_and_given_back(engine: &str) {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let executor = Executor::start(1, tx);
        // the whole 6x6 tree (69 M nodes) does not fit: the engine is paused in it
        executor.set_paused(true);
        executor.push(task_on(engine, 1_000_000_000));
        // another job's unit: it waits in the queue (a lane engine walks one job's units)
        let queued = task(1_000);
        let queued_id = queued.lease.lease_id;
        executor.push(queued);
        let paused = Instant::now();
        while executor.load().1 == 0 {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(1500));
        assert!(rx.try_recv().is_err(), "a paused engine goes nowhere");
        // given back while paused: the queued unit comes back, the running one reports
        // where it stands, at once
        assert_eq!(executor.give_back(), vec![queued_id]);
        let given = Instant::now();
        let entry = loop {
            if let Ok(outcome) = rx.try_recv() {
                break done(outcome);
            }
            assert!(
                given.elapsed() < Duration::from_secs(10),
                "a paused engine did not stop when its unit was given back"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        let waited = paused.elapsed().as_secs_f64();
        assert_eq!(entry.engine_kind.to_string(), engine);
        assert!(!entry.result.finished(), "stopped at a cursor");
        assert!(
            entry.engine_seconds < waited - 1.0,
            "engine time {} s counts the pause ({waited:.2} s in all)",
            entry.engine_seconds
        );
        executor.join();
    }

    /// A lease asked to yield: a running one stops at its exact cursor and reports it
    /// (its continuation walks the rest to the unit's exact count); a queued one leaves
    /// the queue unstarted, for the caller to give back.
    #[test]
    fn a_yielded_lease_stops_at_its_cursor_and_reports() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let executor = Executor::start(1, tx);
        let running = task(1_000_000_000);
        let (running_id, unit) = (running.lease.lease_id, running.lease.unit.clone());
        let queued = task(1_000_000_000);
        let queued_id = queued.lease.lease_id;
        executor.push(running);
        let t = Instant::now();
        while executor.load().1 != 1 {
            assert!(t.elapsed() < Duration::from_secs(20), "the unit never ran");
            std::thread::sleep(Duration::from_millis(5));
        }
        executor.push(queued);
        assert_eq!(executor.yield_lease(queued_id), Yielded::Dequeued);
        assert_eq!(executor.yield_lease(running_id), Yielded::Stopping);
        assert_eq!(executor.yield_lease(LeaseId::random()), Yielded::NotHeld);
        let t = Instant::now();
        let entry = loop {
            if let Ok(o) = rx.try_recv() {
                break done(o);
            }
            assert!(t.elapsed() < Duration::from_secs(20), "no outcome");
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(entry.lease_id, running_id);
        let cursor = entry.result.cursor.clone().expect("stopped at a cursor");
        assert_eq!(
            entry.result.stop,
            Some(e2fleet_engine::unit::StopReason::Requested)
        );
        // the stopped run and its continuation add up to the whole unit
        let plan = plan();
        let mut walker = e2fleet_engine::search::Walker::new(&plan);
        let options = e2fleet_engine::search::RunOptions::default();
        let rest = walker
            .run(
                &unit.continuation(cursor),
                options,
                &mut e2fleet_engine::search::NoControl,
            )
            .unwrap();
        // Brendan set 1 6x6's whole tree
        assert_eq!(entry.result.committed + rest.committed, 69_284_103);
        executor.join();
    }

    /// A lease the coordinator says is lost stops without a result (running or queued),
    /// and the thread goes on to the next unit; the idle count follows the queue.
    #[test]
    fn an_abandoned_lease_stops_without_a_result() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let executor = Executor::start(1, tx);
        let wait_until = |what: &str, f: &dyn Fn() -> bool| {
            let t = Instant::now();
            while !f() {
                assert!(t.elapsed() < Duration::from_secs(20), "{what}");
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        wait_until("the thread waits on the queue", &|| {
            executor.idle_threads() == 1
        });
        let running = task(1_000_000_000);
        let running_id = running.lease.lease_id;
        let queued = task(1_000_000_000);
        let queued_id = queued.lease.lease_id;
        executor.push(running);
        wait_until("the first unit runs", &|| executor.load().1 == 1);
        assert_eq!(executor.idle_threads(), 0);
        executor.push(queued);
        assert!(executor.abandon(queued_id), "a queued lease is held");
        assert_eq!(executor.load().0, 0);
        assert!(executor.abandon(running_id), "a running lease is held");
        let t = Instant::now();
        let outcome = loop {
            if let Ok(o) = rx.try_recv() {
                break o;
            }
            assert!(t.elapsed() < Duration::from_secs(20), "no outcome");
            std::thread::sleep(Duration::from_millis(5));
        };
        assert!(matches!(outcome, Outcome::Dropped { lease_id } if lease_id == running_id));
        assert!(!executor.abandon(LeaseId::random()));
        // the thread walks on: the next unit's result comes back as usual
        executor.push(task(1_000));
        let t = Instant::now();
        let entry = loop {
            if let Ok(o) = rx.try_recv() {
                break done(o);
            }
            assert!(t.elapsed() < Duration::from_secs(20), "no result");
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(entry.result.committed, 1_000);
        executor.join();
    }

    /// One engine thread with the lane engine walks two leases of a job at once (it takes
    /// the second from the queue while the first walks, and the next whenever a lane comes
    /// free), and every result is the reference walker's, to the node.
    #[test]
    fn a_lane_engine_thread_walks_two_leases_of_a_job_at_once_to_the_exact_counts() {
        // units of every size: some end, some stop at their budget
        let most_running = two_in_hand(("lanes", &plan()), (3, 5, 12), 3_000_000);
        assert_eq!(most_running, 2, "one thread walked two leases at once");
    }

    /// On a 16x16 board (the lane engine's wide form) one engine thread walks four leases
    /// at once, to the reference walker's counts.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn a_lane_engine_thread_walks_four_leases_of_a_16x16_job_at_once() {
        let plan = plan_of("e2-official");
        let most_running = two_in_hand(("lanes", &plan), (12, 1, 12), 200_000);
        assert_eq!(most_running, 4, "one thread walked four leases at once");
    }

    /// One engine thread with the compiled engine, on units of a few thousand nodes,
    /// sends the next lease of its job to its process while one walks, but holds no more
    /// than two (the queue's others stay for any thread), and every result is the
    /// reference walker's.
    #[test]
    fn a_compiled_engine_thread_holds_at_most_two_short_leases_with_exact_counts() {
        let most_running = two_in_hand(("compiled", &plan()), (6, 1, 300), 20_000);
        assert!(
            most_running <= 2,
            "{most_running} leases held by one engine"
        );
    }

    /// Leases of one job on `plan`, the prefixes `depth` deep (every `step`th, the first
    /// `count` of them), each under `budget`, queued at once for a one-thread executor
    /// with the `kind` engine: every result is the reference walker's, the executor holds
    /// one lease a thread past what its engine holds, and the most it had running at once.
    fn two_in_hand(
        (kind, plan): (&str, &Arc<SearchPlan>),
        (depth, step, count): (usize, usize, usize),
        budget: u64,
    ) -> usize {
        let mut units = Vec::new();
        e2fleet_engine::search::Walker::new(plan)
            .enumerate_first(&[], depth, step * count, &mut |p| {
                units.push(Unit::prefix(p.to_vec()))
            })
            .unwrap();
        let units: Vec<Unit> = units.into_iter().step_by(step).take(count).collect();
        let lanes = factory_on(kind, plan);
        let in_hand = lanes.make().units_in_hand();
        let job_id = JobId::random();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let executor = Executor::start(1, tx);
        let mut expected = HashMap::new();
        let mut tasks = Vec::new();
        for unit in &units {
            let task = lease_task(&lanes, job_id, unit.clone(), budget);
            let options = RunOptions {
                budget: Some(budget),
                max_solutions: REPORT_MAX_SOLUTIONS,
            };
            let reference = e2fleet_engine::search::Walker::new(plan)
                .run(unit, options, &mut e2fleet_engine::search::NoControl)
                .unwrap();
            expected.insert(task.lease.lease_id, reference);
            tasks.push(task);
        }
        // queued at once, as a worker's prefetch queues its leases
        for task in tasks {
            executor.push(task);
        }
        let (mut most_running, mut got) = (0, 0);
        let started = Instant::now();
        while got < units.len() {
            most_running = most_running.max(executor.load().1);
            if let Ok(outcome) = rx.try_recv() {
                let entry = done(outcome);
                assert_eq!(entry.engine_kind.to_string(), kind);
                assert_eq!(
                    entry.result, expected[&entry.lease_id],
                    "lease {}",
                    entry.lease_id
                );
                got += 1;
            }
            assert!(started.elapsed() < Duration::from_secs(60), "no result");
            std::thread::sleep(Duration::from_micros(200));
        }
        // the worker keeps the engine full and one queued for the thread
        assert_eq!(executor.in_hand(), in_hand);
        assert!(executor.per_core_rate() > 0.0);
        executor.join();
        most_running
    }

    /// The result of `task` walked by a fresh one-thread executor at `percent`% of its
    /// time, and the wall time it took.
    fn walk_at(percent: u32, task: Task) -> (Box<Entry>, f64) {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let executor = Executor::start(1, tx);
        executor.set_cpu_percent(percent);
        let started = Instant::now();
        executor.push(task);
        let outcome = loop {
            if let Ok(outcome) = rx.try_recv() {
                break outcome;
            }
            assert!(started.elapsed() < Duration::from_secs(60), "no result");
            std::thread::sleep(Duration::from_millis(5));
        };
        let wall = started.elapsed().as_secs_f64();
        executor.join();
        (done(outcome), wall)
    }

    #[test]
    fn a_quarter_of_the_cpu_walks_the_same_nodes_in_four_times_the_time() {
        let budget = 30_000_000;
        let (full, _) = walk_at(100, task(budget));
        let (quarter, wall) = walk_at(25, task(budget));
        assert_eq!(quarter.result, full.result, "the same walk, to the node");
        // rests are not engine time: the engine walked a quarter of the wall time
        assert!(
            wall > 2.5 * quarter.engine_seconds,
            "{wall:.2} s in all for {:.2} s of walking",
            quarter.engine_seconds
        );
        assert!(quarter.engine_seconds > 0.05);
    }
}
