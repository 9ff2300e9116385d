//! A unit far bigger than planned, split while it runs: when a worker finds nothing to
//! lease and a unit has run long, the unit's lease is asked (at its worker's next
//! heartbeat) to stop at its cursor and report; the stopped run counts, the rest becomes
//! a continuation, and the next idle lease call splits that into sibling units. Exact
//! whatever happens to the worker in between: killed (its lease expires and the unit
//! runs whole elsewhere) or late (its report answered as such).

use crate::harness::*;
use e2fleet_engine::testing::{BRENDAN_5X5, assert_exact};

const FIVE: &str = "brendan/set1/pieces_05x05.txt";

/// One unit (the whole tree), two workers: the idle one's empty lease call gets the
/// running unit asked to yield, the holder stops at a cursor and reports, the idle one
/// then gets units of the rest, and the job ends exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_running_unit_is_split_for_an_idle_worker_and_the_job_ends_exact() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let job = c.submit(FIVE, 0, 0, 1).await;
    let mut holder = SimWorker::register(&c.url, "holder", Behaviour::Honest).await;
    let mut idle = SimWorker::register(&c.url, "idle", Behaviour::Honest).await;
    let held = holder.lease(4).await.unwrap();
    assert_eq!(held.len(), 1, "one unit: the whole tree");
    // a unit just leased is not asked to yield
    assert!(idle.lease(4).await.unwrap().is_empty());
    assert!(
        holder
            .beat(&[&held[0]])
            .await
            .unwrap()
            .yield_lease_ids
            .is_empty()
    );
    c.advance(11_000);
    assert!(idle.lease(4).await.unwrap().is_empty());
    let beat = holder.beat(&[&held[0]]).await.unwrap();
    assert_eq!(beat.yield_lease_ids, vec![held[0].lease_id.clone()]);
    assert!(beat.stop_lease_ids.is_empty());
    // the holder stops at its cursor, 40 nodes in, and reports: the run counts
    let stopped = holder.compute_stopped(&held[0], 40).await;
    assert_eq!(holder.report(&held[0], &stopped).await.unwrap(), "accepted");
    // the idle worker now gets units of the rest (the continuation split)
    let got = idle.lease(4).await.unwrap();
    assert!(!got.is_empty(), "the rest is split for the idle worker");
    for l in &got {
        let r = idle.compute(l).await;
        idle.report(l, &r).await.unwrap();
    }
    holder.work(1_000).await;
    idle.work(1_000).await;
    let doc = c.job(&job).await;
    assert_eq!(doc["state"], "complete", "{doc}");
    assert_exact(&doc, BRENDAN_5X5);
    assert!(
        doc["units"]["done"].as_u64().unwrap() >= 3,
        "{}",
        doc["units"]
    );
    c.stop().await;
}

/// The holder is killed after it was asked to yield: its lease expires, the unit goes
/// back whole, another worker walks it, and the total is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_while_asked_to_yield_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let job = c.submit(FIVE, 0, 0, 1).await;
    let mut holder = SimWorker::register(&c.url, "killed", Behaviour::Honest).await;
    let mut idle = SimWorker::register(&c.url, "idle", Behaviour::Honest).await;
    let held = holder.lease(4).await.unwrap();
    c.advance(11_000);
    assert!(idle.lease(4).await.unwrap().is_empty());
    let beat = holder.beat(&[&held[0]]).await.unwrap();
    assert_eq!(beat.yield_lease_ids.len(), 1);
    // SIGKILL: nothing more from the holder; its lease runs out
    drop(holder);
    c.advance(61_000);
    c.fleet.expire_leases().await.unwrap();
    idle.work(1_000).await;
    let doc = c.job(&job).await;
    assert_eq!(doc["state"], "complete", "{doc}");
    assert_eq!(doc["nodes_total"], 113_211);
    assert_eq!(doc["conservation_ok"], true);
    c.stop().await;
}

/// The holder stops at its cursor but its report comes after its lease expired and the
/// unit went to another worker: the report is late (nothing counted, no fault), and the
/// total is exactly the other worker's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_yielded_run_reported_after_its_lease_expired_is_late() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let job = c.submit(FIVE, 0, 0, 1).await;
    let mut holder = SimWorker::register(&c.url, "slow", Behaviour::Honest).await;
    let mut idle = SimWorker::register(&c.url, "idle", Behaviour::Honest).await;
    let held = holder.lease(4).await.unwrap();
    c.advance(11_000);
    assert!(idle.lease(4).await.unwrap().is_empty());
    assert_eq!(
        holder
            .beat(&[&held[0]])
            .await
            .unwrap()
            .yield_lease_ids
            .len(),
        1
    );
    let stopped = holder.compute_stopped(&held[0], 40).await;
    c.advance(61_000);
    c.fleet.expire_leases().await.unwrap();
    // the other worker takes the whole unit; the holder's report arrives while it runs,
    // and again after it finished
    let taken = idle.lease(4).await.unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!(holder.report(&held[0], &stopped).await.unwrap(), "late");
    let whole = idle.compute(&taken[0]).await;
    assert_eq!(idle.report(&taken[0], &whole).await.unwrap(), "accepted");
    assert_eq!(holder.report(&held[0], &stopped).await.unwrap(), "late");
    let doc = c.job(&job).await;
    assert_eq!(doc["state"], "complete", "{doc}");
    assert_eq!(doc["nodes_total"], 113_211);
    assert_eq!(doc["conservation_ok"], true);
    for w in c.workers().await.as_array().unwrap() {
        assert_eq!(w["errors"], 0, "{w}");
    }
    c.stop().await;
}

/// A unit a stopped run could not settle alone (a cross-checked one) is never asked to
/// yield: the idle worker waits, and the job ends exact from whole runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_checked_unit_is_not_asked_to_yield() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let job = c.submit(FIVE, 0, 0, 2).await;
    let mut a = SimWorker::register(&c.url, "a", Behaviour::Honest).await;
    let mut b = SimWorker::register(&c.url, "b", Behaviour::Honest).await;
    let mut idle = SimWorker::register(&c.url, "idle", Behaviour::Honest).await;
    let la = a.lease(4).await.unwrap();
    let lb = b.lease(4).await.unwrap();
    assert_eq!((la.len(), lb.len()), (1, 1));
    c.advance(11_000);
    assert!(idle.lease(4).await.unwrap().is_empty());
    assert!(a.beat(&[&la[0]]).await.unwrap().yield_lease_ids.is_empty());
    assert!(b.beat(&[&lb[0]]).await.unwrap().yield_lease_ids.is_empty());
    a.work(1_000).await;
    b.work(1_000).await;
    for (w, l) in [(&mut a, &la[0]), (&mut b, &lb[0])] {
        let r = w.compute(l).await;
        w.report(l, &r).await.unwrap();
    }
    let doc = c.job(&job).await;
    assert_eq!(doc["state"], "complete", "{doc}");
    assert_eq!(doc["nodes_total"], 113_211);
    c.stop().await;
}
