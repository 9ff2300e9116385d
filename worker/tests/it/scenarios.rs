//! Worker scenarios: a worker against a coordinator in this process, as a program and as
//! a library.

use std::time::Duration;

use crate::harness::*;
use e2fleet_engine::testing::{BRENDAN_5X5, BRENDAN_6X6, assert_exact};

const SET1_6X6: &str = "brendan/set1/pieces_06x06.txt";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_completes_with_the_exact_total() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&dir.path().join("c.db"), 0, Duration::from_secs(30)).await;
    let job = c
        .submit("brendan/set1/pieces_05x05.txt", 3, Some(3_000))
        .await;
    let _w = worker(
        &c.url,
        &dir.path().join("w"),
        "w",
        &["--engine", "reference"],
    );
    let doc = c.wait_complete(&job, Duration::from_secs(60)).await;
    assert_exact(&doc, BRENDAN_5X5);
    c.stop().await;
}

/// The worker as a library: `run::run` in this process, configured from its flags as the
/// program is, stopped by its `Controls` once the job is done; the job adds up exactly
/// and the worker delivered every unit's result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_library_runs_in_process_and_stops_on_its_controls() {
    use clap::Parser;
    use e2fleet_worker::run::{Controls, RunArgs, run};
    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        run: RunArgs,
    }
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&dir.path().join("c.db"), 0, Duration::from_secs(30)).await;
    let job = c
        .submit("brendan/set1/pieces_05x05.txt", 3, Some(3_000))
        .await;
    let data = dir.path().join("w");
    let flags = Flags::try_parse_from([
        "run",
        "--coordinator",
        &c.url,
        "--token",
        ENROLL,
        "--data-dir",
        data.to_str().unwrap(),
        "--hostname",
        "in-process",
        "--threads",
        "2",
        "--engine",
        "reference",
        "--on-battery",
        "run",
    ])
    .unwrap();
    let controls = Controls::new();
    let worker = tokio::spawn(run(flags.run.config().unwrap(), controls.clone()));
    let doc = c.wait_complete(&job, Duration::from_secs(60)).await;
    assert_exact(&doc, BRENDAN_5X5);
    controls.stop();
    let delivered = tokio::time::timeout(Duration::from_secs(30), worker)
        .await
        .expect("the worker stops on its controls")
        .unwrap()
        .unwrap();
    // every unit of the job (and this machine's verification units) went through it
    assert!(
        delivered >= doc["units"]["done"].as_u64().unwrap(),
        "{delivered} results delivered: {doc}"
    );
    c.stop().await;
}

/// A worker on the lane engine (two leases at a time in each engine thread) adds up to
/// the exact total, through budget stops and their continuations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lane_engine_worker_completes_a_job_with_the_exact_total() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&dir.path().join("c.db"), 0, Duration::from_secs(30)).await;
    let job = c.submit(SET1_6X6, 3, Some(2_000_000)).await;
    let data = dir.path().join("w");
    let _w = worker(&c.url, &data, "w", &["--engine", "lanes"]);
    let doc = c.wait_complete(&job, Duration::from_secs(180)).await;
    assert_exact(&doc, BRENDAN_6X6);
    let log = std::fs::read_to_string(data.with_extension("log")).unwrap();
    assert!(
        log.contains("engine built and self-tested") && log.contains("engine=lanes"),
        "the job's units walked on the lane engine"
    );
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_unit_then_expiry_reruns_it_counted_once() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&dir.path().join("c.db"), 0, Duration::from_secs(2)).await;
    let job = c.submit(SET1_6X6, 1, None).await;
    let mut w = worker(
        &c.url,
        &dir.path().join("w1"),
        "w1",
        &["--engine", "reference"],
    );
    c.wait_leased(&job).await;
    w.signal("-KILL");
    w.wait(Duration::from_secs(10)).await;
    let _w2 = worker(
        &c.url,
        &dir.path().join("w2"),
        "w2",
        &["--engine", "reference"],
    );
    let doc = c.wait_complete(&job, Duration::from_secs(90)).await;
    assert_exact(&doc, BRENDAN_6X6);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_reports_cursors_and_nothing_is_walked_twice() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&dir.path().join("c.db"), 0, Duration::from_secs(30)).await;
    let job = c.submit(SET1_6X6, 1, None).await;
    let mut w = worker(
        &c.url,
        &dir.path().join("w1"),
        "w1",
        &["--engine", "reference"],
    );
    c.wait_leased(&job).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    w.signal("-TERM");
    let status = w.wait(Duration::from_secs(30)).await;
    assert!(status.success(), "a graceful stop exits 0");
    let mid = c.job(&job).await;
    assert_ne!(mid["state"], "complete");
    assert_eq!(
        mid["units"]["leased"],
        0,
        "running units reported, queued ones released: {}\n{}",
        mid["units"],
        std::fs::read_to_string(dir.path().join("w1.log")).unwrap()
    );
    let _w2 = worker(
        &c.url,
        &dir.path().join("w2"),
        "w2",
        &["--engine", "reference"],
    );
    let doc = c.wait_complete(&job, Duration::from_secs(90)).await;
    assert_exact(&doc, BRENDAN_6X6);
    // every node reported was walked exactly once: no replica, nothing wrong
    assert_eq!(
        nodes_with_verdict(&doc, "accepted"),
        doc["unit_nodes"].as_i64().unwrap()
    );
    assert_eq!(nodes_with_verdict(&doc, "agree"), 0);
    assert_eq!(nodes_with_verdict(&doc, "wrong"), 0);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_wait_for_a_coordinator_that_went_away() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let c = Coordinator::start(&db, 0, Duration::from_secs(60)).await;
    let port = c.port;
    let job = c.submit(SET1_6X6, 1, None).await;
    let _w = worker(
        &c.url,
        &dir.path().join("w"),
        "w",
        &["--engine", "reference"],
    );
    c.wait_leased(&job).await;
    c.stop().await;
    // the worker keeps walking its leases and journals the results meanwhile
    tokio::time::sleep(Duration::from_secs(3)).await;
    let c = Coordinator::start(&db, port, Duration::from_secs(60)).await;
    // well inside the 60 s lease: nothing the worker held was dropped and left to expire
    let doc = c.wait_complete(&job, Duration::from_secs(40)).await;
    assert_eq!(doc["nodes_total"], 69_284_103);
    assert_eq!(doc["conservation_ok"], true);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journal_is_replayed_after_a_crash() {
    use e2fleet_proto::convert::path_from_wire;
    use e2fleet_proto::v2;
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&dir.path().join("c.db"), 0, Duration::from_secs(60)).await;
    let job = c.submit("brendan/set1/pieces_04x04.txt", 1, None).await;
    // a worker identity that leased everything, computed it, journalled it and crashed
    let mut client = v2::worker_service_client::WorkerServiceClient::connect(c.url.clone())
        .await
        .unwrap();
    let reg = client
        .register_worker(v2::RegisterWorkerRequest {
            enroll_token: ENROLL.into(),
            host: Some(v2::HostInfo {
                hostname: "crashed".into(),
                engine_kind: v2::EngineKind::Reference.into(),
                ..Default::default()
            }),
            previous_worker_id: String::new(),
            previous_worker_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut req = tonic::Request::new(v2::LeaseUnitsRequest {
        max_units: 100,
        ..Default::default()
    });
    req.metadata_mut().insert(
        "authorization",
        format!("Bearer {}", reg.worker_token).parse().unwrap(),
    );
    let leases = client.lease_units(req).await.unwrap().into_inner().leases;
    let data = dir.path().join("w");
    std::fs::create_dir_all(data.join("journal")).unwrap();
    std::fs::write(
        data.join("identity.json"),
        serde_json::json!({"coordinator": c.url, "worker_id": reg.worker_id, "worker_token": reg.worker_token}).to_string(),
    )
    .unwrap();
    let puzzle = e2fleet_engine::formats::load_file(
        &puzzle_path("brendan/set1/pieces_04x04.txt"),
        &Default::default(),
    )
    .unwrap();
    let plan = e2fleet_engine::plan::SearchPlan::new(
        &puzzle,
        &e2fleet_engine::FillOrder::row_major(&puzzle),
    );
    for l in &leases {
        let unit = e2fleet_engine::Unit::prefix(path_from_wire(&l.prefix, "p").unwrap());
        let options = e2fleet_engine::search::RunOptions {
            budget: None,
            max_solutions: e2fleet_proto::REPORT_MAX_SOLUTIONS,
        };
        let result = e2fleet_engine::search::Walker::new(&plan)
            .run(&unit, options, &mut e2fleet_engine::search::NoControl)
            .unwrap();
        let entry = serde_json::json!({
            "lease_id": l.lease_id, "unit_id": l.unit_id, "job_id": l.job_id, "result": result,
            "engine_seconds": 0.01, "engine_kind": "reference", "engine_build": "journal-test",
        });
        std::fs::write(
            data.join("journal").join(format!("{}.json", l.lease_id)),
            entry.to_string(),
        )
        .unwrap();
    }
    // the restarted worker delivers the journal before anything else
    let _w = worker(&c.url, &data, "crashed", &["--engine", "reference"]);
    let doc = c.wait_complete(&job, Duration::from_secs(60)).await;
    assert_eq!(doc["nodes_total"], 4_470);
    assert_eq!(doc["conservation_ok"], true);
    let from_journal = doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["engine_build"] == "journal-test" && r["verdict"] == "accepted");
    assert!(from_journal, "{doc}");
    // the job is complete once the coordinator has committed the results; the worker
    // forgets its journal entries when the answer reaches it, a moment later
    let journalled = || {
        std::fs::read_dir(data.join("journal"))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "json")
            })
            .count()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while journalled() > 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(journalled(), 0);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_that_fails_verification_never_walks_a_unit() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&dir.path().join("c.db"), 0, Duration::from_secs(30)).await;
    let job = c.submit("brendan/set1/pieces_05x05.txt", 3, None).await;
    let _w = worker(
        &c.url,
        &dir.path().join("w"),
        "w",
        &["--engine", "compiled", "--fault-depth", "6"],
    );
    let doc = c.wait_complete(&job, Duration::from_secs(120)).await;
    assert_eq!(doc["nodes_total"], 113_211);
    for r in doc["results"].as_array().unwrap() {
        assert_eq!(
            r["engine_kind"], "reference",
            "the faulty compiled build was never used: {r}"
        );
    }
    // the suite caught it before any real unit: the worker fell back to the reference
    // engine (a new hardware class, verified in turn)
    let log = std::fs::read_to_string(dir.path().join("w.log")).unwrap();
    assert!(
        log.contains("disagrees with the verification suite"),
        "{log}"
    );
    assert!(log.contains("using the reference engine"), "{log}");
    let m = c.matrix("").await;
    let classes = m["classes"].as_array().unwrap();
    let compiled = classes
        .iter()
        .find(|k| k["engine_kind"] == "compiled")
        .unwrap();
    let reference = classes
        .iter()
        .find(|k| k["engine_kind"] == "reference")
        .unwrap();
    assert_eq!(compiled["flagged"], true, "{m}");
    assert!(
        compiled["engine_release"]
            .as_str()
            .unwrap()
            .contains("FAULT")
    );
    assert_eq!(reference["flagged"], false, "{m}");
    c.stop().await;
}
