//! PostgreSQL: the whole suite again on a real server, and several coordinators on one
//! database.
//!
//! The suite's other modules name their databases by path; run with
//! [`SERVER_ENV`] set, [`database_for`] gives each path a database of its own on that
//! server instead. [`the_whole_suite_passes_on_postgresql`] starts a throwaway server
//! ([`PostgresServer`]) and runs this test program again with it set: one `cargo test`
//! covers both stores. Without PostgreSQL's server programs the tests here are ignored,
//! with the install command as the reason (`cfg(has_postgres)`).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use e2fleet_coordinator::store::Database;
use e2fleet_coordinator::store::testing::{PostgresServer, SERVER_ENV, create_database};
use proptest::test_runner::{Config as ProptestConfig, TestRunner};

use crate::harness::*;

const FIVE: &str = "brendan/set1/pieces_05x05.txt";

/// Whether this is the nested run (the server is given): the tests that start their own
/// server do not run again inside it.
fn nested() -> bool {
    std::env::var_os(SERVER_ENV).is_some_and(|v| !v.is_empty())
}

#[test]
#[cfg_attr(
    not(has_postgres),
    ignore = "no PostgreSQL server programs: apt-get install postgresql"
)]
fn the_whole_suite_passes_on_postgresql() {
    if nested() {
        return;
    }
    let server = PostgresServer::start_for("the_whole_suite_passes_on_postgresql");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .env(SERVER_ENV, server.url())
        .args(["--skip", "postgres::", "--test-threads", "2"])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = text
        .lines()
        .rfind(|l| l.starts_with("test result:"))
        .unwrap_or("no summary");
    eprintln!(
        "the suite on PostgreSQL: {}",
        summary.trim_start_matches("test result: ")
    );
    assert!(
        out.status.success(),
        "the suite fails on PostgreSQL:\n{text}"
    );
    assert!(
        summary.contains(" 0 failed") && !summary.contains(" 0 passed"),
        "{summary}"
    );
}

/// `coordinators` coordinators on one fresh database of `server`, sharing a clock.
async fn fleet_on(server: &PostgresServer, coordinators: usize) -> (Database, Vec<Coordinator>) {
    let name = format!("e2fleet_many_{}", uuid::Uuid::new_v4().simple());
    let db = Database::Postgres(create_database(server.url(), &name).await.unwrap());
    let clock = Arc::new(AtomicI64::new(1_000_000));
    let mut all = Vec::new();
    for _ in 0..coordinators {
        all.push(Coordinator::start_on(&db, clock.clone()).await);
    }
    (db, all)
}

/// Simulated workers registered round-robin on the coordinators lease `batch` units at
/// a time and report each, interleaved, until no work is left; returns every unit each
/// lease was granted on.
async fn hammer(coordinators: &[Coordinator], workers: usize, batch: u32) -> Vec<i64> {
    let mut sims = Vec::new();
    for i in 0..workers {
        let c = &coordinators[i % coordinators.len()];
        sims.push(SimWorker::register(&c.url, &format!("w{i}"), Behaviour::Honest).await);
    }
    // every worker leases at once (one task each), then computes and reports
    let tasks: Vec<_> = sims
        .into_iter()
        .map(|mut w| {
            tokio::spawn(async move {
                let mut granted = Vec::new();
                loop {
                    let leases = w.lease(batch).await.unwrap();
                    if leases.is_empty() {
                        return granted;
                    }
                    for l in &leases {
                        granted.push(l.unit_id);
                        let r = w.compute(l).await;
                        w.report(l, &r).await.unwrap();
                    }
                }
            })
        })
        .collect();
    let mut granted = Vec::new();
    for t in tasks {
        granted.extend(t.await.unwrap());
    }
    granted
}

/// Workers spread over two or three coordinators lease concurrently: with one replica a
/// job, every unit is granted exactly once across them all, and the totals are exact.
/// In half the cases units stop at 300 nodes: continuations appear while the workers
/// lease, and idle lease calls split waiting ones.
/// (A property test over the fleet's shape; the cases share one server.)
#[test]
#[cfg_attr(
    not(has_postgres),
    ignore = "no PostgreSQL server programs: apt-get install postgresql"
)]
fn concurrent_leases_across_coordinators_never_grant_a_unit_twice() {
    if nested() {
        return;
    }
    let server =
        PostgresServer::start_for("concurrent_leases_across_coordinators_never_grant_a_unit_twice");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 8,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let shapes = (2usize..=3, 3usize..=8, 1u32..=4, 2u32..=3, 0u64..=1);
    runner
        .run(
            &shapes,
            |(coordinators, workers, batch, split_depth, chains)| {
                rt.block_on(lease_everything_once(
                    &server,
                    coordinators,
                    workers,
                    batch,
                    (split_depth, chains * 300),
                ));
                Ok(())
            },
        )
        .unwrap();
}

async fn lease_everything_once(
    server: &PostgresServer,
    coordinators: usize,
    workers: usize,
    batch: u32,
    (split_depth, budget): (u32, u64),
) {
    let (_db, fleet) = fleet_on(server, coordinators).await;
    let job = fleet[0].submit(FIVE, split_depth, budget, 1).await;
    let granted = hammer(&fleet, workers, batch).await;
    let mut per_unit: HashMap<i64, usize> = HashMap::new();
    for u in &granted {
        *per_unit.entry(*u).or_default() += 1;
    }
    let twice: Vec<_> = per_unit.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "units granted more than once: {twice:?}");
    for c in &fleet {
        let doc = c.job(&job).await;
        assert_eq!(doc["state"], "complete", "{}", doc["units"]);
        assert_eq!(doc["nodes_total"], 113_211);
        assert_eq!(doc["solutions_count"], 16);
        assert_eq!(doc["conservation_ok"], true);
        assert_eq!(
            doc["units"]["done"].as_u64().unwrap() as usize,
            per_unit.len()
        );
    }
    for c in fleet {
        c.stop().await;
    }
}
