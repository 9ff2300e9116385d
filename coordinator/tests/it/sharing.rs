//! Several jobs on one fleet: shares among jobs of equal priority, priorities, pause and
//! resume, through the real gRPC API with simulated workers.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use e2fleet_proto::api::{JobId, ScheduleChange};
use e2fleet_proto::v2;

use crate::harness::*;

const SIX: &str = "brendan/set1/pieces_06x06.txt";

async fn set(c: &Coordinator, job: &str, change: ScheduleChange) {
    c.admin()
        .await
        .set_schedule(job.parse::<JobId>().unwrap(), change)
        .await
        .unwrap();
}

fn count(leases: &[v2::Lease], into: &mut HashMap<String, usize>) {
    for l in leases {
        *into.entry(l.job_id.clone()).or_default() += 1;
    }
}

/// Two jobs of equal priority with shares 3 and 1, sixteen workers: the leases out split
/// about 3:1 when the workers first fill up, and the units handed out over ten rounds of
/// report-and-lease-again stay near 3:1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_of_equal_priority_share_the_fleet_by_their_shares() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(AtomicI64::new(1_000_000));
    let c = Coordinator::start_with_clock(&temp_db(&dir), 3, clock).await;
    let a = c.submit(SIX, 5, 0, 1).await;
    let b = c.submit(SIX, 5, 0, 1).await;
    set(
        &c,
        &a,
        ScheduleChange {
            share: Some(3.0),
            ..Default::default()
        },
    )
    .await;
    let mut workers = Vec::new();
    for i in 0..16 {
        workers.push(SimWorker::register(&c.url, &format!("w{i}"), Behaviour::Honest).await);
    }
    let mut held: Vec<Vec<v2::Lease>> = Vec::new();
    let mut out = HashMap::new();
    for w in workers.iter_mut() {
        let leases = w.lease(64).await.unwrap();
        count(&leases, &mut out);
        held.push(leases);
    }
    let (na, nb) = (out[&a], out[&b]);
    let frac = na as f64 / (na + nb) as f64;
    assert!(
        (0.69..=0.81).contains(&frac),
        "leases out {na} (share 3) and {nb} (share 1): {frac:.2} of them to the first"
    );
    let mut handed = HashMap::new();
    for _ in 0..10 {
        c.advance(600);
        for (w, leases) in workers.iter_mut().zip(held.iter_mut()) {
            for l in leases.drain(..) {
                let r = w.compute(&l).await;
                w.report(&l, &r).await.unwrap();
            }
            *leases = w.lease(64).await.unwrap();
            count(leases, &mut handed);
        }
    }
    let (na, nb) = (handed[&a], handed[&b]);
    let frac = na as f64 / (na + nb) as f64;
    assert!(
        (0.69..=0.81).contains(&frac),
        "units handed out {na} (share 3) and {nb} (share 1): {frac:.2} to the first"
    );
    let doc = c.job(&a).await;
    assert_eq!(doc["share"], 3.0);
    assert_eq!(doc["priority"], 0);
    assert_eq!(doc["paused"], false);
}

/// A job of a higher priority gets every unit while it has any; a paused job gets none
/// (the other one does), and gets them again once resumed; with every job paused a lease
/// call finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_priority_job_is_served_first_and_a_paused_one_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let low = c.submit(SIX, 5, 0, 1).await;
    let high = c.submit(SIX, 5, 0, 1).await;
    set(
        &c,
        &high,
        ScheduleChange {
            priority: Some(1),
            ..Default::default()
        },
    )
    .await;
    let mut w = SimWorker::register(&c.url, "w", Behaviour::Honest).await;
    let first = w.lease(64).await.unwrap();
    assert!(!first.is_empty());
    assert!(first.iter().all(|l| l.job_id == high), "priority 1 first");
    let pause = |paused| ScheduleChange {
        paused: Some(paused),
        ..Default::default()
    };
    set(&c, &high, pause(true)).await;
    let mut v = SimWorker::register(&c.url, "v", Behaviour::Honest).await;
    let second = v.lease(64).await.unwrap();
    assert!(!second.is_empty());
    assert!(
        second.iter().all(|l| l.job_id == low),
        "the paused job gets nothing"
    );
    assert_eq!(c.job(&high).await["paused"], true);
    set(&c, &low, pause(true)).await;
    let mut u = SimWorker::register(&c.url, "u", Behaviour::Honest).await;
    assert!(u.lease(64).await.unwrap().is_empty(), "every job paused");
    set(&c, &high, pause(false)).await;
    let third = u.lease(64).await.unwrap();
    assert!(!third.is_empty());
    assert!(third.iter().all(|l| l.job_id == high), "resumed");
}
