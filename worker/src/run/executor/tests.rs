//! The engine threads driven with real engines: pauses, yields, abandoned leases, leases
//! walked together, and the CPU share.

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
            probe: None,
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

/// On a 16x16 board (the lane engine's wide form) one engine thread walks six leases
/// at once, to the reference walker's counts.
#[test]
#[cfg(target_arch = "x86_64")]
fn a_lane_engine_thread_walks_six_leases_of_a_16x16_job_at_once() {
    let plan = plan_of("e2-official");
    let most_running = two_in_hand(("lanes", &plan), (12, 1, 12), 200_000);
    assert_eq!(most_running, 6, "one thread walked six leases at once");
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
    let mut got = 0;
    let started = Instant::now();
    while got < units.len() {
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
    // (kept by the executor: a sample taken now and then can miss the moment, on a
    // machine busy with other work)
    let most_running = executor.most_running();
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

/// A study's probe lease runs the population estimator from its seed, not an engine: the
/// result is the engine crate's probe to the digit, reported under the probe build, and
/// a thread that ran one walks the next counting unit as usual.
#[test]
fn a_probe_lease_reports_the_probe_of_its_seed() {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let executor = Executor::start(1, tx);
    let plan = plan();
    let reference = Arc::new(EngineFactory::reference(&plan));
    let prefix = {
        let mut first = Vec::new();
        e2fleet_engine::search::Walker::new(&plan)
            .enumerate_first(&[], 2, 1, &mut |p| first = p.to_vec())
            .unwrap();
        first
    };
    let mut probe = lease_task(&reference, JobId::random(), Unit::prefix(prefix.clone()), 1);
    probe.lease.budget = None;
    probe.lease.probe = Some(Probe {
        particles: 64,
        seed: 42,
    });
    executor.push(probe);
    executor.push(task(1_000));
    let mut got = Vec::new();
    let t = Instant::now();
    while got.len() < 2 {
        if let Ok(o) = rx.try_recv() {
            got.push(done(o));
        }
        assert!(t.elapsed() < Duration::from_secs(20), "no result");
        std::thread::sleep(Duration::from_millis(5));
    }
    let expected = e2fleet_engine::search::estimate::probe::probe(&plan, &prefix, 64, 42).unwrap();
    assert_eq!(got[0].result, expected);
    assert_eq!(got[0].engine_build, PROBE_BUILD);
    assert_eq!(got[1].result.committed, 1_000);
    executor.join();
}
