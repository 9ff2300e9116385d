//! Bounded storage: once a unit is decided its results fold to their cores (counts, stop,
//! digest) and their bodies go, except the solutions and the best boards. Every total
//! must stay exact through it: an overturn long after the fold, a restart, a late
//! duplicate report, and a certificate written from folded rows.

use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use e2fleet_coordinator::fleet::TrustPolicy;
use e2fleet_engine::certificate::audit::{check_structure, compare_run, spec, unit_of};
use e2fleet_engine::certificate::decode;
use e2fleet_engine::search::{NoControl, RunOptions, Walker};

use e2fleet_coordinator::store::testing::{database_for, scalar};

use crate::harness::*;
use crate::trust::{trusted_volunteer, work_all};
use e2fleet_engine::testing::{BRENDAN_5X5, assert_exact};

const FIVE: &str = "brendan/set1/pieces_05x05.txt";

/// (results, results that still have their body) in the database.
async fn stored(db: &std::path::Path) -> (i64, i64) {
    let db = database_for(db).await;
    (
        scalar(&db, "SELECT COUNT(*) FROM results").await,
        scalar(&db, "SELECT COUNT(*) FROM result_bodies").await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn folded_results_keep_every_total_exact_through_overturns_restarts_and_late_reports() {
    let dir = tempfile::tempdir().unwrap();
    let db = temp_db(&dir);
    let trust = TrustPolicy {
        trust_after: 2,
        recheck: 0.0,
        account_quarantine_after: 100,
        ..TrustPolicy::default()
    };
    let clock = Arc::new(AtomicI64::new(1_000_000));
    let c = Coordinator::start_with(&db, 100, trust.clone(), clock.clone()).await;
    let mut o1 = SimWorker::register(&c.url, "operator-1", Behaviour::Honest).await;
    let mut o2 = SimWorker::register(&c.url, "operator-2", Behaviour::Honest).await;
    // units of at most 300 nodes: chains of continuations, each decided and folded
    let chains = c.submit(FIVE, 2, 300, 1).await;
    work_all(&mut [&mut o1], 2_000).await;
    assert_exact(&c.job(&chains).await, BRENDAN_5X5);
    let (results, bodies) = stored(&db).await;
    assert!(results > 300, "{results} results");
    // what keeps a body: the 16 solutions' results and at most 10 best boards
    assert!(bodies <= 16 + 10, "{bodies} bodies kept of {results}");

    // a trusted volunteer's lie, accepted alone and folded with everything else
    let first = c.submit(FIVE, 2, 0, 1).await;
    let mut v = trusted_volunteer(&c, &mut o1, 2).await;
    v.behaviour = Behaviour::Liar;
    let lie = v.lease(1).await.unwrap().remove(0);
    let r = v.compute(&lie).await;
    assert_eq!(v.report(&lie, &r).await.unwrap(), "accepted");
    work_all(&mut [&mut o1], 2_000).await;
    let doc = c.job(&first).await;
    assert_eq!(doc["state"], "complete");
    assert_ne!(
        doc["nodes_total"], 113_211,
        "the lie is in the total for now"
    );
    assert!(
        stored(&db).await.1 <= 2 * (16 + 10),
        "{:?}",
        stored(&db).await
    );

    // a late duplicate of a decided, folded report changes nothing
    assert_eq!(v.report(&lie, &r).await.unwrap(), "duplicate");
    assert_eq!(c.job(&first).await["nodes_total"], doc["nodes_total"]);

    // caught lying on a job with two replicas: its folded past is run again and overturned
    v.behaviour = Behaviour::Liar;
    let second = c.submit(FIVE, 2, 0, 2).await;
    let l = v.lease(1).await.unwrap().remove(0);
    let r2 = v.compute(&l).await;
    v.report(&l, &r2).await.unwrap();
    work_all(&mut [&mut o1, &mut o2], 4_000).await;
    assert_exact(&c.job(&second).await, BRENDAN_5X5);
    let doc = c.job(&first).await;
    assert_exact(&doc, BRENDAN_5X5);

    // a restart reads the same totals back from the folded rows
    c.stop().await;
    let c = Coordinator::start_with(&db, 100, trust, clock).await;
    let again = c.job(&first).await;
    assert_eq!(again["nodes_by_depth"], doc["nodes_by_depth"]);
    assert_exact(&again, BRENDAN_5X5);

    assert_exact(&c.job(&chains).await, BRENDAN_5X5);

    // and the certificate written from folded rows audits whole, digest by digest
    let file = c
        .admin()
        .await
        .export_certificate(chains.parse().unwrap(), false)
        .await
        .unwrap();
    let cert = decode(&file).unwrap();
    let s = spec(&cert).unwrap();
    let structure = check_structure(&cert, &s).unwrap();
    assert_eq!(structure.nodes, 113_211);
    assert_eq!(cert.solutions.len(), 16, "the solutions' bodies were kept");
    assert!(!cert.best.is_empty(), "the best boards' bodies were kept");
    let options = RunOptions {
        budget: cert.budget,
        max_solutions: cert.solutions_cap,
    };
    for u in &cert.units {
        let r = Walker::new(&s.plan)
            .run(&unit_of(&s, u).unwrap(), options, &mut NoControl)
            .unwrap();
        compare_run(&s, u, &r).unwrap();
    }
    c.stop().await;
}
