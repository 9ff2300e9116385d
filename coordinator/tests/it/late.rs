//! Workers that were away: a laptop that slept past its leases, a host cut off by a
//! partition, a run stopped short. A result is judged for what it is: a run stopped
//! short is never compared with a whole run, a unit that changed or went elsewhere is
//! answered "late" (nothing counted, no fault of the worker's), a lease whose unit
//! waited for its worker comes back to life, and no job waits for a dispute that an
//! honest absence made up.

use crate::harness::*;
use e2fleet_engine::testing::{BRENDAN_5X5, assert_exact};

const FIVE: &str = "brendan/set1/pieces_05x05.txt";

/// The honest sleep: its leases expire, another worker walks its units whole; on waking
/// it stops its runs at their cursors and reports them on the expired leases. They are
/// too late (not a dispute), the job completes exact and nobody collects an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_run_on_an_expired_lease_is_late_not_a_dispute() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 1).await;
    let job = c.submit(FIVE, 2, 0, 1).await;
    let mut sleeper = SimWorker::register(&c.url, "laptop", Behaviour::Honest).await;
    let held = sleeper.lease(4).await.unwrap();
    let mut stopped = Vec::new();
    for l in &held {
        stopped.push(sleeper.compute_stopped(l, 3).await);
    }
    c.advance(31_000);
    let mut other = SimWorker::register(&c.url, "desktop", Behaviour::Honest).await;
    other.work(1_000).await;
    let doc = c.job(&job).await;
    assert_eq!(doc["state"], "complete");
    for (l, r) in held.iter().zip(&stopped) {
        assert_eq!(sleeper.report(l, r).await.unwrap(), "late");
    }
    let doc = c.job(&job).await;
    assert_eq!(doc["state"], "complete", "no dispute re-opened it");
    assert_exact(&doc, BRENDAN_5X5);
    let workers = c.workers().await;
    for w in workers.as_array().unwrap() {
        assert_eq!(w["errors"], 0, "{w}");
    }
    c.stop().await;
}

/// A worker away longer than its lease whose units nobody took: its heartbeat revives the
/// leases, and its results count as if it had never left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_whose_unit_waited_is_revived_by_the_next_heartbeat() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 1).await;
    let job = c.submit(FIVE, 1, 0, 1).await;
    let mut w = SimWorker::register(&c.url, "laptop", Behaviour::Honest).await;
    let held = w.lease(64).await.unwrap();
    assert!(!held.is_empty());
    c.advance(31_000);
    c.fleet.expire_leases().await.unwrap();
    let refs: Vec<&_> = held.iter().collect();
    assert_eq!(w.heartbeat(&refs).await.unwrap(), Vec::<String>::new());
    // revived: nobody else is handed them
    let mut other = SimWorker::register(&c.url, "desktop", Behaviour::Honest).await;
    assert!(other.lease(64).await.unwrap().is_empty());
    for l in &held {
        let r = w.compute(l).await;
        assert_eq!(w.report(l, &r).await.unwrap(), "accepted");
    }
    let doc = c.job(&job).await;
    assert_eq!(doc["state"], "complete");
    assert_eq!(doc["nodes_total"], 113_211);
    assert_eq!(doc["conservation_ok"], true);
    c.stop().await;
}

/// A lease whose unit another worker took after it expired, and a live lease whose unit
/// another run decided, are named in the heartbeat's answer: the worker drops them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_heartbeat_names_the_leases_to_drop() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 1).await;
    let job = c.submit(FIVE, 1, 0, 1).await;
    let mut away = SimWorker::register(&c.url, "away", Behaviour::Honest).await;
    let lost = away.lease(1).await.unwrap().remove(0);
    c.advance(31_000);
    c.fleet.expire_leases().await.unwrap();
    let mut other = SimWorker::register(&c.url, "other", Behaviour::Honest).await;
    let taken = other.lease(64).await.unwrap();
    assert!(taken.iter().any(|l| l.unit_id == lost.unit_id));
    assert_eq!(
        away.heartbeat(&[&lost]).await.unwrap(),
        vec![lost.lease_id.clone()]
    );
    // the late full result of the lost lease still counts once: the first whole run
    let r = away.compute(&lost).await;
    assert_eq!(away.report(&lost, &r).await.unwrap(), "accepted");
    // and the live lease on that unit is now surplus: dropped at its next heartbeat
    let surplus = taken.iter().find(|l| l.unit_id == lost.unit_id).unwrap();
    assert_eq!(
        other.heartbeat(&[surplus]).await.unwrap(),
        vec![surplus.lease_id.clone()]
    );
    for l in taken.iter().filter(|l| l.unit_id != lost.unit_id) {
        let r = other.compute(l).await;
        other.report(l, &r).await.unwrap();
    }
    other.work(1_000).await;
    let doc = c.job(&job).await;
    assert_eq!(doc["state"], "complete");
    assert_eq!(doc["nodes_total"], 113_211);
    assert_eq!(doc["conservation_ok"], true);
    c.stop().await;
}

/// On a replicated job a run stopped short matches no other run: it is late, the unit is
/// run whole, and the cross-check decides between whole runs only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_run_is_never_compared_with_a_whole_one() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 1).await;
    let job = c.submit(FIVE, 1, 0, 2).await;
    let mut a = SimWorker::register(&c.url, "a", Behaviour::Honest).await;
    let mut b = SimWorker::register(&c.url, "b", Behaviour::Honest).await;
    let mut stopper = SimWorker::register(&c.url, "c", Behaviour::Honest).await;
    let l = stopper.lease(1).await.unwrap().remove(0);
    let r = stopper.compute_stopped(&l, 5).await;
    assert_eq!(stopper.report(&l, &r).await.unwrap(), "late");
    for _ in 0..200 {
        if a.work(1).await + b.work(1).await == 0 {
            break;
        }
    }
    let doc = c.job(&job).await;
    assert_eq!(doc["state"], "complete");
    assert_eq!(doc["nodes_total"], 113_211);
    assert_eq!(doc["waiting"]["disputed"], 0);
    assert_eq!(doc["conservation_ok"], true);
    for w in c.workers().await.as_array().unwrap() {
        assert_eq!(w["errors"], 0, "{w}");
    }
    c.stop().await;
}

/// A volunteer's run stopped short cannot be rechecked (a recheck would have to stop at
/// the same node): it is late and the unit is run whole; an operator machine's counts
/// alone and leaves the rest as a continuation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_operator_machines_stopped_run_counts_alone() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 1).await;
    let job = c.submit(FIVE, 1, 0, 1).await;
    let (_, token) = c.admin().await.add_account("vera").await.unwrap();
    let mut vera =
        SimWorker::register_with(&c.url, &token, "vera-1", "x", 2, Behaviour::Honest).await;
    let l = vera.lease(1).await.unwrap().remove(0);
    let r = vera.compute_stopped(&l, 5).await;
    assert_eq!(vera.report(&l, &r).await.unwrap(), "late");
    let mut op = SimWorker::register(&c.url, "operator-1", Behaviour::Honest).await;
    let l = op.lease(1).await.unwrap().remove(0);
    let r = op.compute_stopped(&l, 5).await;
    assert_eq!(op.report(&l, &r).await.unwrap(), "accepted");
    op.work(1_000).await;
    let doc = c.job(&job).await;
    assert_eq!(doc["state"], "complete");
    assert_eq!(doc["nodes_total"], 113_211);
    assert_eq!(doc["conservation_ok"], true);
    c.stop().await;
}
