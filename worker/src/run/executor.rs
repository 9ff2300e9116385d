//! Engine threads: one engine per thread (default: every core), fed from a queue of leased
//! units. Threads never touch the network; they hand finished or stopped results back to
//! the async loop, which journals and reports them.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use e2fleet_engine::engine::Engine;
use e2fleet_engine::search::RunOptions;
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
    /// (nodes, engine nanoseconds) of finished runs, for the per-core rate.
    totals: Mutex<(u64, u128)>,
}

/// The pool of engine threads.
pub struct Executor {
    shared: Arc<Shared>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Executor {
    /// Starts `threads` engine threads sending outcomes to `results`.
    pub fn start(threads: usize, results: UnboundedSender<Outcome>) -> Executor {
        let shared = Arc::new(Shared::default());
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

    /// Stops everything: running units stop at once and report their exact cursor;
    /// queued ones are dropped (their leases expire and are re-run elsewhere).
    pub fn stop_all(&self) -> Vec<LeaseId> {
        self.shared.stop_all.store(true, Ordering::SeqCst);
        let dropped: Vec<LeaseId> = self
            .shared
            .queue
            .lock()
            .expect("queue")
            .drain(..)
            .map(|t| t.lease.lease_id)
            .collect();
        self.shared.ready.notify_all();
        dropped
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
        let shared_c = shared.clone();
        let mut control = move |committed: u64| {
            progress.store(committed, Ordering::Relaxed);
            while shared_c.paused.load(Ordering::SeqCst)
                && !shared_c.stop_all.load(Ordering::SeqCst)
            {
                std::thread::sleep(Duration::from_millis(200));
            }
            shared_c.stop_all.load(Ordering::SeqCst)
                || shared_c
                    .stop_leases
                    .lock()
                    .expect("stop set")
                    .contains(&lease_id)
        };
        let options = RunOptions {
            budget: lease.budget,
            max_solutions: REPORT_MAX_SOLUTIONS,
        };
        let outcome = engine.run(&lease.unit, options, &mut control);
        let elapsed = started.elapsed();
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
