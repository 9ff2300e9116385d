//! Several coordinator processes on one PostgreSQL database, with real worker processes:
//! the job adds up to the digit whichever coordinator each call reaches, when one
//! coordinator is SIGKILLed mid-job the others carry on (the workers reach them through
//! a load balancer, as behind any TCP balancer or a Kubernetes Service, or by a list of
//! coordinator URLs of their own), and when the
//! database server restarts mid-job nothing is lost; a fleet moved from SQLite with
//! `migrate-store` finishes exactly.
//!
//! Each test starts a throwaway PostgreSQL server
//! ([`e2fleet_coordinator::store::testing::PostgresServer`]); without the server programs
//! they are ignored, with the install command as the reason (`cfg(has_postgres)`).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use e2fleet_coordinator::store::testing::{PostgresServer, create_database};
use tokio::net::{TcpListener, TcpStream};

use crate::harness::{Proc, admin, puzzle_path, serve, wait_job, worker_with};
use e2fleet_engine::testing::{BRENDAN_5X5, BRENDAN_6X6, assert_exact};

/// `n` coordinator processes on a fresh database of `server`.
async fn coordinators(server: &PostgresServer, n: usize) -> Vec<(Proc, String)> {
    let name = format!("fleet_{}", uuid::Uuid::new_v4().simple());
    let db = create_database(server.url(), &name).await.unwrap();
    (0..n)
        .map(|_| serve(Path::new(&db), "127.0.0.1:0", &[]))
        .collect()
}

/// A TCP load balancer on 127.0.0.1: each connection goes to the next backend that
/// accepts it (round robin, passing over dead ones); its URL.
async fn balancer(backends: &[&str]) -> String {
    let backends: Vec<String> = backends
        .iter()
        .map(|u| u.trim_start_matches("http://").to_string())
        .collect();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let next = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else {
                return;
            };
            let (backends, start) = (backends.clone(), next.fetch_add(1, Ordering::Relaxed));
            tokio::spawn(async move {
                for k in 0..backends.len() {
                    let backend = &backends[(start + k) % backends.len()];
                    if let Ok(mut outbound) = TcpStream::connect(backend).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        return;
                    }
                }
            });
        }
    });
    url
}

fn submit(url: &str, puzzle: &str, split_depth: &str, budget: &str) -> String {
    let puzzle = puzzle_path(puzzle);
    admin(
        url,
        &[
            "submit",
            puzzle.to_str().unwrap(),
            "--split-depth",
            split_depth,
            "--budget",
            budget,
        ],
    )["job_id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A worker process with one reference-engine thread.
fn reference_worker(url: &str, dir: &Path, name: &str) -> Proc {
    worker_with(
        url,
        &dir.join(name),
        name,
        1,
        &["--engine", "reference"],
        false,
    )
}

/// Waits until the 6x6 job is well under way (10 M nodes) and still running.
async fn mid_job(url: &str, job: &str) {
    let doc = wait_job(url, job, Duration::from_secs(90), |d| {
        d["nodes_total"].as_u64().unwrap() >= 10_000_000 || d["state"] != "running"
    })
    .await;
    assert_eq!(doc["state"], "running", "the fault must land mid-job");
}

async fn wait_complete(url: &str, job: &str) -> serde_json::Value {
    wait_job(url, job, Duration::from_secs(240), |d| {
        d["state"] == "complete"
    })
    .await
}

/// Units the worker with host name `host` has done, as the coordinator at `url` says.
fn units_done_by(url: &str, host: &str) -> u64 {
    let workers = admin(url, &["workers"]);
    workers
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["hostname"] == host)
        .unwrap_or_else(|| panic!("{host} in {workers}"))["units_done"]
        .as_u64()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(has_postgres),
    ignore = "no PostgreSQL server programs: apt-get install postgresql"
)]
async fn two_coordinators_on_one_postgresql_share_a_job_exactly() {
    let server =
        PostgresServer::start_for("two_coordinators_on_one_postgresql_share_a_job_exactly");
    let dir = tempfile::tempdir().unwrap();
    let fleet = coordinators(&server, 2).await;
    let (a, b) = (&fleet[0].1, &fleet[1].1);
    // budgets of 300 nodes: chains of continuations, reported to either coordinator
    let job = submit(a, "brendan/set1/pieces_05x05.txt", "2", "300");
    let _on_a = reference_worker(a, dir.path(), "wa");
    let _on_b = reference_worker(b, dir.path(), "wb");
    let doc = wait_complete(b, &job).await;
    assert_exact(&doc, BRENDAN_5X5);
    // both read the same job; both machines worked on it
    assert_eq!(
        admin(a, &["job", &job])["nodes_by_depth"],
        doc["nodes_by_depth"]
    );
    let workers = admin(a, &["workers"]);
    let busy = workers
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["units_done"].as_u64().unwrap_or(0) > 0)
        .count();
    assert_eq!(busy, 2, "{workers}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(has_postgres),
    ignore = "no PostgreSQL server programs: apt-get install postgresql"
)]
async fn a_database_restart_mid_job_loses_nothing() {
    let server = PostgresServer::start_for("a_database_restart_mid_job_loses_nothing");
    let dir = tempfile::tempdir().unwrap();
    let fleet = coordinators(&server, 2).await;
    let (a, b) = (&fleet[0].1, &fleet[1].1);
    let job = submit(a, "brendan/set1/pieces_06x06.txt", "2", "100000");
    let _on_a = reference_worker(a, dir.path(), "wa");
    let _on_b = reference_worker(b, dir.path(), "wb");
    mid_job(a, &job).await;
    // every connection of both coordinators drops; their writers, read pools and the
    // upkeep lock reconnect, the workers retry what was refused meanwhile
    server.restart().unwrap();
    let doc = wait_complete(b, &job).await;
    assert_exact(&doc, BRENDAN_6X6);
    assert_exact(&admin(a, &["job", &job]), BRENDAN_6X6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(has_postgres),
    ignore = "no PostgreSQL server programs: apt-get install postgresql"
)]
async fn three_coordinators_lose_nothing_when_one_is_sigkilled() {
    let server = PostgresServer::start_for("three_coordinators_lose_nothing_when_one_is_sigkilled");
    let dir = tempfile::tempdir().unwrap();
    let mut fleet = coordinators(&server, 3).await;
    let urls: Vec<&str> = fleet.iter().map(|(_, u)| u.as_str()).collect();
    let lb = balancer(&urls).await;
    // small budgets: many round trips, so the kill surely lands mid-job
    let job = submit(&lb, "brendan/set1/pieces_06x06.txt", "2", "100000");
    // one worker through the balancer, one given the three coordinators' URLs itself
    let _w1 = reference_worker(&lb, dir.path(), "w1");
    let _w2 = reference_worker(&urls.join(","), dir.path(), "w2");
    mid_job(&lb, &job).await;
    let w2_before = units_done_by(&fleet[1].1, "w2");
    let (killed, _) = &mut fleet[0];
    killed.signal("-KILL");
    killed.wait(Duration::from_secs(10)).await;
    let doc = wait_complete(&lb, &job).await;
    assert_exact(&doc, BRENDAN_6X6);
    // the survivors read the same, and say so directly; both workers did units
    for (_, url) in &fleet[1..] {
        let direct = admin(url, &["job", &job]);
        assert_exact(&direct, BRENDAN_6X6);
    }
    assert!(units_done_by(&fleet[1].1, "w1") > 0);
    // the worker with the list went on through the survivors
    assert!(
        units_done_by(&fleet[1].1, "w2") > w2_before,
        "w2 did no unit after the kill ({w2_before} before)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(has_postgres),
    ignore = "no PostgreSQL server programs: apt-get install postgresql"
)]
async fn a_fleet_stopped_mid_job_on_sqlite_is_migrated_and_finishes_exactly_on_postgresql() {
    let server = PostgresServer::start_for(
        "a_fleet_stopped_mid_job_on_sqlite_is_migrated_and_finishes_exactly_on_postgresql",
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fleet.db");
    let (mut sqlite, url) = serve(&file, "127.0.0.1:0", &[]);
    let job = submit(&url, "brendan/set1/pieces_06x06.txt", "2", "100000");
    let _worker = reference_worker(&url, dir.path(), "w");
    mid_job(&url, &job).await;
    sqlite.signal("-TERM");
    sqlite.wait(Duration::from_secs(10)).await;
    // the coordinator is stopped: what it left, as its own API reads it
    let stopped = dir.path().join("stopped.db");
    std::fs::copy(&file, &stopped).unwrap();
    for ext in ["-wal", "-shm"] {
        let side = format!("{}{ext}", file.display());
        if Path::new(&side).exists() {
            std::fs::copy(&side, format!("{}{ext}", stopped.display())).unwrap();
        }
    }
    let (reader, reader_url) = serve(&stopped, "127.0.0.1:0", &[]);
    let as_left = admin(&reader_url, &["job", &job]);
    let workers_left = admin(&reader_url, &["workers"]);
    drop(reader);

    let db = create_database(server.url(), "migrated").await.unwrap();
    let out = std::process::Command::new(crate::harness::coordinator_bin())
        .args(["migrate-store", "--from"])
        .arg(&file)
        .args(["--to", &db])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("checked"), "{said}");
    // a second migration into the same database is refused
    let again = std::process::Command::new(crate::harness::coordinator_bin())
        .args(["migrate-store", "--from"])
        .arg(&file)
        .args(["--to", &db])
        .output()
        .unwrap();
    assert!(!again.status.success());

    // the same port, now on PostgreSQL: the worker carries on where it was
    let port = url.rsplit(':').next().unwrap();
    let (_pg, url) = serve(Path::new(&db), &format!("127.0.0.1:{port}"), &[]);
    let migrated = admin(&url, &["job", &job]);
    // (not the open/busy split of units: leases out at the stop expire on either side)
    for key in ["nodes_by_depth", "results", "solutions_count", "state"] {
        assert_eq!(migrated[key], as_left[key], "{key} moved exactly");
    }
    assert_eq!(migrated["units"]["done"], as_left["units"]["done"]);
    assert_eq!(
        admin(&url, &["workers"]).as_array().unwrap().len(),
        workers_left.as_array().unwrap().len()
    );
    let doc = wait_complete(&url, &job).await;
    assert_exact(&doc, BRENDAN_6X6);
}
