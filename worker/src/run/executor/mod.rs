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
use e2fleet_proto::api::{JobId, Lease, LeaseId, Probe};
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
    /// The most units running at once since the executor started (for the tests, which
    /// would miss the moment by sampling on a busy machine).
    #[cfg(test)]
    most_running: AtomicUsize,
}

impl Shared {
    /// Publishes a lease's run as started, with its progress.
    fn started(&self, lease_id: LeaseId, progress: Arc<AtomicU64>) {
        let mut running = self.running.lock().expect("running");
        running.insert(lease_id, progress);
        #[cfg(test)]
        self.most_running
            .fetch_max(running.len(), Ordering::Relaxed);
    }
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

    /// The most units this executor's engines have walked at once since it started (a
    /// lane engine walks several on one thread).
    #[cfg(test)]
    pub fn most_running(&self) -> usize {
        self.shared.most_running.load(Ordering::Relaxed)
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
        if let Some(probe) = task.lease.probe {
            run_probe(&shared, &results, task, probe);
            continue;
        }
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

/// The engine build a probe's result is reported under: the population estimator, which
/// every worker runs from the same source.
pub const PROBE_BUILD: &str = "population-probe";

/// Runs a study's probe unit on this thread (a population run from its seed: seconds at
/// most, so it is not steered; a lease dropped meanwhile is not reported).
fn run_probe(shared: &Shared, results: &UnboundedSender<Outcome>, task: Task, probe: Probe) {
    let lease = task.lease;
    let span = info_span!("unit", lease_id = %lease.lease_id, unit_id = %lease.unit_id, job_id = %lease.job_id);
    let _unit = span.entered();
    shared.started(lease.lease_id, Arc::new(AtomicU64::new(0)));
    let started = Instant::now();
    let outcome = e2fleet_engine::search::estimate::probe::probe(
        task.engine.plan(),
        &lease.unit.prefix,
        probe.particles as usize,
        probe.seed,
    );
    let seconds = started.elapsed().as_secs_f64();
    shared
        .running
        .lock()
        .expect("running")
        .remove(&lease.lease_id);
    shared
        .stop_leases
        .lock()
        .expect("stop set")
        .remove(&lease.lease_id);
    if shared
        .abandoned
        .lock()
        .expect("abandoned set")
        .remove(&lease.lease_id)
    {
        info!("probe dropped on the coordinator's word; not reported");
        let _ = results.send(Outcome::Dropped {
            lease_id: lease.lease_id,
        });
        return;
    }
    match outcome {
        Ok(result) => {
            info!(particles = probe.particles, seconds, "probe run");
            let _ = results.send(Outcome::Done(Box::new(Entry {
                lease_id: lease.lease_id,
                unit_id: lease.unit_id,
                job_id: lease.job_id,
                result,
                engine_seconds: seconds,
                engine_kind: EngineKind::Reference,
                engine_build: PROBE_BUILD.into(),
            })));
        }
        Err(e) => {
            error!(error = %e, "probe failed");
            let _ = results.send(Outcome::Failed {
                lease_id: lease.lease_id,
                error: e.to_string(),
            });
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
        self.shared.started(lease.lease_id, progress.clone());
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
mod tests;
