//! Engine threads: one engine per thread (default: every core), fed from a queue of leased
//! units. Threads never touch the network; they hand finished or stopped results back to
//! the async loop, which journals and reports them.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use e2fleet_engine::engine::Engine;
use e2fleet_engine::search::{Control, RunOptions};
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
    /// The engine failed on this lease (the lease will expire and be re-run elsewhere).
    Failed {
        /// Lease id.
        lease_id: LeaseId,
        /// What went wrong.
        error: String,
    },
}

#[derive(Default)]
struct Shared {
    queue: Mutex<VecDeque<Task>>,
    ready: Condvar,
    running: Mutex<HashMap<LeaseId, Arc<AtomicU64>>>,
    stop_leases: Mutex<HashSet<LeaseId>>,
    stop_all: AtomicBool,
    exit: AtomicBool,
    paused: AtomicBool,
    /// `--cpu-percent`: the share of each engine thread's time it walks (100: all).
    cpu_percent: AtomicU32,
    /// (nodes, engine nanoseconds) of finished runs, for the per-core rate.
    totals: Mutex<(u64, u128)>,
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

    /// Stops one lease: a queued one is dropped, a running one stops and reports.
    pub fn stop_lease(&self, lease_id: LeaseId) {
        self.shared
            .queue
            .lock()
            .expect("queue")
            .retain(|t| t.lease.lease_id != lease_id);
        self.shared
            .stop_leases
            .lock()
            .expect("stop set")
            .insert(lease_id);
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
            loop {
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
            }
        };
        let Some(task) = task else { return };
        let lease = &task.lease;
        // one span per unit, with the ids the coordinator's log shows for it too
        let _unit = info_span!("unit", lease_id = %lease.lease_id, unit_id = %lease.unit_id, job_id = %lease.job_id).entered();
        info!(budget = ?lease.budget, prefix_depth = lease.unit.prefix.len(), "unit started");
        let progress = Arc::new(AtomicU64::new(0));
        shared
            .running
            .lock()
            .expect("running")
            .insert(lease.lease_id, progress.clone());
        let engine = engines
            .entry(lease.job_id)
            .or_insert_with(|| task.engine.make());
        let started = Instant::now();
        let lease_id = lease.lease_id;
        let mut control = LeaseControl {
            shared: &shared,
            lease_id,
            progress,
            paused_for: Duration::ZERO,
            told: None,
            walked_since: Instant::now(),
        };
        let options = RunOptions {
            budget: lease.budget,
            max_solutions: REPORT_MAX_SOLUTIONS,
        };
        let outcome = engine.run(&lease.unit, options, &mut control);
        // time spent paused is not engine time: the per-core rate is of time walking
        let elapsed = started.elapsed().saturating_sub(control.paused_for);
        shared
            .running
            .lock()
            .expect("running")
            .remove(&lease.lease_id);
        match outcome {
            Ok(result) => {
                {
                    let mut t = shared.totals.lock().expect("totals");
                    t.0 += result.committed;
                    t.1 += elapsed.as_nanos();
                }
                info!(
                    committed = result.committed,
                    finished = result.finished(),
                    seconds = elapsed.as_secs_f64(),
                    "unit walked"
                );
                let _ = results.send(Outcome::Done(Box::new(Entry {
                    lease_id: lease.lease_id,
                    unit_id: lease.unit_id,
                    job_id: lease.job_id,
                    result,
                    engine_seconds: elapsed.as_secs_f64(),
                    engine_kind: engine.kind(),
                    engine_build: engine.build_id(),
                })));
            }
            Err(e) => {
                error!(error = %e, "engine failed on a unit");
                let job_id = lease.job_id;
                engines.remove(&job_id);
                let _ = results.send(Outcome::Failed {
                    lease_id,
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

    /// The reference engine on Brendan set 1 6x6, from the root with `budget`.
    fn task(budget: u64) -> Task {
        let text = e2fleet_engine::suite::builtin_puzzle("brendan-set1-06x06").unwrap();
        let puzzle = e2fleet_engine::formats::parse_str(
            text,
            &e2fleet_engine::suite::builtin_label("brendan-set1-06x06", text),
            &e2fleet_engine::formats::LoadOptions::default(),
        )
        .unwrap();
        let plan = Arc::new(SearchPlan::new(&puzzle, &FillOrder::row_major(&puzzle)));
        let flags = Flags::parse_from(["t", "--engine", "reference"]);
        Task {
            lease: Lease {
                lease_id: LeaseId::random(),
                unit_id: UnitId(1),
                job_id: JobId::random(),
                unit: Unit::root(),
                budget: Some(budget),
                deadline_ms: 0,
            },
            engine: Arc::new(flags.engine.factory(&plan, false).unwrap()),
        }
    }

    fn done(outcome: Outcome) -> Box<Entry> {
        match outcome {
            Outcome::Done(entry) => entry,
            Outcome::Failed { error, .. } => panic!("{error}"),
        }
    }

    #[test]
    fn paused_time_is_not_engine_time_and_a_paused_unit_can_be_given_back() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let executor = Executor::start(1, tx);
        // the whole 6x6 tree (69 M nodes) does not fit: the engine is paused in it
        executor.set_paused(true);
        executor.push(task(1_000_000_000));
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
        assert!(!entry.result.finished(), "stopped at a cursor");
        assert!(
            entry.engine_seconds < waited - 1.0,
            "engine time {} s counts the pause ({waited:.2} s in all)",
            entry.engine_seconds
        );
        executor.join();
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
