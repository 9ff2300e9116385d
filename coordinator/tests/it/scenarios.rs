//! Scenarios from the coordinator issue: exact totals, expiry, duplicates, liars,
//! restarts, bad credentials and malformed requests.

use e2fleet_engine::formats::{LoadOptions, load_file, to_site_json};
use e2fleet_proto::v2;
use tonic::Code;

use crate::harness::*;
use e2fleet_engine::testing::{BRENDAN_5X5, BRENDAN_6X6, assert_exact};

fn nodes_by_depth(doc: &serde_json::Value) -> Vec<u64> {
    doc["nodes_by_depth"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_adds_up_exactly_with_budgets_and_continuations() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let job = c.submit("brendan/set1/pieces_05x05.txt", 3, 2_000, 1).await;
    let mut a = SimWorker::register(&c.url, "host-a", Behaviour::Honest).await;
    let mut b = SimWorker::register(&c.url, "host-b", Behaviour::Honest).await;
    // every lease carries the job's budget (a lease without one would walk unbounded)
    for l in a.lease(3).await.unwrap() {
        assert_eq!(l.budget, 2_000, "{l:?}");
        let r = a.compute(&l).await;
        a.report(&l, &r).await.unwrap();
    }
    for _ in 0..200 {
        if a.work(1).await + b.work(1).await == 0 {
            break;
        }
    }
    let doc = c.job(&job).await;
    let single = single_machine("brendan/set1/pieces_05x05.txt");
    assert_eq!(doc["state"], "complete");
    assert_exact(&doc, BRENDAN_5X5);
    assert_eq!(nodes_by_depth(&doc), single.nodes_by_depth);
    assert!(doc["split_nodes"].as_u64().unwrap() > 0 || doc["unit_nodes"].as_u64().unwrap() > 0);
    assert!(doc["per_core_nodes_per_s"].as_f64().unwrap() > 0.0);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_leases_are_reassigned_and_late_reports_counted_once() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let job = c.submit("brendan/set1/pieces_04x04.txt", 2, 0, 1).await;
    // (a worker holds about two units per core it says it has: this one says 64)
    let mut slow =
        SimWorker::register_with(&c.url, ENROLL, "slow", "Sim CPU", 64, Behaviour::Honest).await;
    let mut fast = SimWorker::register(&c.url, "fast", Behaviour::Honest).await;
    let held = slow.lease(100).await.unwrap();
    assert!(!held.is_empty());
    assert!(
        fast.lease(100).await.unwrap().is_empty(),
        "everything is leased"
    );
    c.advance(31_000);
    fast.work(100).await;
    let doc = c.job(&job).await;
    assert_eq!(doc["state"], "complete");
    assert_eq!(doc["nodes_total"], 4_470);
    // the slow worker finally reports: kept as replicas, counted once
    for l in &held {
        let r = slow.compute(l).await;
        let status = slow.report(l, &r).await.unwrap();
        assert_eq!(status, "replica");
        // and a repeat of the same report is idempotent
        assert_eq!(slow.report(l, &r).await.unwrap(), "duplicate");
    }
    let doc = c.job(&job).await;
    assert_eq!(doc["nodes_total"], 4_470);
    assert_eq!(doc["conservation_ok"], true);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_liar_is_outvoted_and_its_host_quarantined() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 1).await;
    let job = c.submit("brendan/set1/pieces_04x04.txt", 2, 0, 2).await;
    let mut liar = SimWorker::register(&c.url, "liar", Behaviour::Liar).await;
    let mut h1 = SimWorker::register(&c.url, "honest-1", Behaviour::Honest).await;
    let mut h2 = SimWorker::register(&c.url, "honest-2", Behaviour::Honest).await;
    // the liar goes first on one unit
    let l = liar.lease(1).await.unwrap().remove(0);
    let r = liar.compute(&l).await;
    assert_eq!(liar.report(&l, &r).await.unwrap(), "pending_check");
    for _ in 0..50 {
        if h1.work(1).await + h2.work(1).await == 0 {
            break;
        }
    }
    let doc = c.job(&job).await;
    assert_eq!(doc["state"], "complete");
    assert_eq!(doc["nodes_total"], 4_470, "the lie never reaches the total");
    assert_eq!(doc["conservation_ok"], true);
    let workers = c.workers().await;
    let liar_row = workers
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["hostname"] == "liar")
        .unwrap();
    assert_eq!(liar_row["quarantined"], true);
    assert_eq!(liar_row["state"], "quarantined");
    assert!(
        liar.lease(5).await.unwrap().is_empty(),
        "a quarantined host gets no work"
    );
    // the operator releases it
    let released = c
        .operator()
        .await
        .release_host(admin(v2::ReleaseHostRequest {
            hostname: "liar".into(),
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(released.released, 1);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_on_the_same_database_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = temp_db(&dir);
    let clock = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(5_000_000));
    let c = Coordinator::start_with_clock(&db, 3, clock.clone()).await;
    let job = c.submit("brendan/set1/pieces_05x05.txt", 4, 5_000, 1).await;
    let mut w = SimWorker::register(&c.url, "w", Behaviour::Honest).await;
    w.work(3).await;
    // a lease held across the restart
    let held = w.lease(2).await.unwrap();
    assert!(held.iter().all(|l| l.budget == 5_000), "{held:?}");
    c.stop().await;
    let c = Coordinator::start_with_clock(&db, 3, clock).await;
    let mut w2 = SimWorker::register(&c.url, "w2", Behaviour::Honest).await;
    // the old worker's token survives the restart and its report is still accepted
    w.client =
        e2fleet_proto::v2::worker_service_client::WorkerServiceClient::connect(c.url.clone())
            .await
            .unwrap();
    for l in &held {
        let r = w.compute(l).await;
        assert_eq!(w.report(l, &r).await.unwrap(), "accepted");
    }
    // after the restart the budget comes from the stored job
    let after = w2.lease(1).await.unwrap();
    assert!(after.iter().all(|l| l.budget == 5_000), "{after:?}");
    for l in &after {
        let r = w2.compute(l).await;
        w2.report(l, &r).await.unwrap();
    }
    for _ in 0..200 {
        if w2.work(1).await == 0 {
            break;
        }
    }
    let doc = c.job(&job).await;
    assert_eq!(doc["state"], "complete");
    assert_exact(&doc, BRENDAN_5X5);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let job = c.submit("brendan/set1/pieces_03x03.txt", 2, 0, 1).await;
    let mut client = v2::worker_service_client::WorkerServiceClient::connect(c.url.clone())
        .await
        .unwrap();
    let err = client
        .register_worker(v2::RegisterWorkerRequest {
            enroll_token: "guess".into(),
            host: Some(v2::HostInfo {
                hostname: "x".into(),
                engine_kind: v2::EngineKind::Reference.into(),
                ..Default::default()
            }),
            previous_worker_id: String::new(),
            previous_worker_token: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    let mut w = SimWorker::register(&c.url, "w", Behaviour::Honest).await;
    let mut other = SimWorker::register(&c.url, "other", Behaviour::Honest).await;
    let good = w.token.clone();
    w.token = "not-a-token".into();
    assert_eq!(w.lease(1).await.unwrap_err().code(), Code::Unauthenticated);
    w.token = good;
    let l = w.lease(1).await.unwrap().remove(0);
    let r = w.compute(&l).await;
    // another worker cannot report on this lease
    assert_eq!(
        other.report(&l, &r).await.unwrap_err().code(),
        Code::PermissionDenied
    );
    // operator calls need the admin token
    let mut op = c.operator().await;
    let err = op
        .get_job(v2::GetJobRequest {
            job_id: job.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    let mut bad = tonic::Request::new(v2::ListJobsRequest {});
    bad.metadata_mut()
        .insert("authorization", "Bearer wrong".parse().unwrap());
    assert_eq!(
        op.list_jobs(bad).await.unwrap_err().code(),
        Code::Unauthenticated
    );
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_clear_errors_and_harm_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let job = c.submit("brendan/set1/pieces_04x04.txt", 2, 0, 1).await;
    let mut w = SimWorker::register(&c.url, "w", Behaviour::Honest).await;
    let l = w.lease(1).await.unwrap().remove(0);
    let good = w.compute(&l).await;
    // committed does not match the per-depth counts
    let mut bad = good.clone();
    bad.committed += 5;
    let err = w.report(&l, &bad).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("adds up"), "{}", err.message());
    // a solution board that is not a solution is verified and rejected
    let mut fake = good.clone();
    if let Some(s) = fake.solutions.first_mut() {
        s[0].rot = (s[0].rot + 1) % 4;
        assert_eq!(w.report(&l, &fake).await.unwrap(), "rejected");
    }
    // an unknown lease
    let mut ghost = l.clone();
    ghost.lease_id = "no-such-lease".into();
    assert_eq!(
        w.report(&ghost, &good).await.unwrap_err().code(),
        Code::NotFound
    );
    // an oversized message
    let huge = v2::ReportResultRequest {
        lease_id: l.lease_id.clone(),
        unit_id: l.unit_id,
        result: Some(v2::UnitResult {
            nodes_by_depth: vec![1; 3_000_000],
            ..Default::default()
        }),
        ..Default::default()
    };
    let err = w.client.report_result(w.req(huge)).await.unwrap_err();
    assert!(
        matches!(
            err.code(),
            Code::OutOfRange | Code::ResourceExhausted | Code::InvalidArgument
        ),
        "{err}"
    );
    // a bad puzzle is refused with the loader's reason
    let err = c
        .operator()
        .await
        .submit_job(admin(v2::SubmitJobRequest {
            name: "bad".into(),
            puzzle_json: "{\"width\":2,\"height\":2,\"pieces\":[[0,1,0,1]]}".into(),
            order: "row-major".into(),
            split_depth: 1,
            replicas: 1,
            ..Default::default()
        }))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("pieces"), "{}", err.message());
    // a puzzle whose search tables would not fit in memory is refused before they are built
    let mut rng = e2fleet_engine::testing::Rng::new(7);
    let huge = e2fleet_engine::testing::checkerboard_puzzle(&mut rng, 32, 200);
    let err = c
        .operator()
        .await
        .submit_job(admin(v2::SubmitJobRequest {
            name: "huge".into(),
            puzzle_json: e2fleet_engine::formats::to_site_json(&huge),
            order: "row-major".into(),
            replicas: 1,
            ..Default::default()
        }))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("too large"), "{}", err.message());
    // the coordinator is unharmed: once the abandoned lease expires the job completes exactly
    c.advance(31_000);
    w.work(100).await;
    let doc = c.job(&job).await;
    assert_eq!(doc["nodes_total"], 4_470);
    assert_eq!(doc["state"], "complete");
    c.stop().await;
}

/// The done-when job: Brendan set 1 6x6 split at depth 4, worked by simulated workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brendan_6x6_through_the_operator_api() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let job = c.submit("brendan/set1/pieces_06x06.txt", 4, 0, 1).await;
    let mut a = SimWorker::register(&c.url, "a", Behaviour::Honest).await;
    let mut b = SimWorker::register(&c.url, "b", Behaviour::Honest).await;
    let (ra, rb) = tokio::join!(a.work(1000), b.work(1000));
    assert!(ra + rb > 0);
    let doc = c.job(&job).await;
    assert_eq!(doc["state"], "complete");
    assert_exact(&doc, BRENDAN_6X6);
    c.stop().await;
}

/// A late result that disagrees with a unit of a job that already completed re-opens the
/// job for a deciding run instead of being left silently undecided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_disagreeing_result_reopens_a_completed_job() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 1).await;
    let job = c.submit("brendan/set1/pieces_04x04.txt", 2, 0, 1).await;
    let mut late_liar = SimWorker::register(&c.url, "late-liar", Behaviour::Liar).await;
    let held = late_liar.lease(1).await.unwrap().remove(0);
    c.advance(31_000);
    let mut a = SimWorker::register(&c.url, "a", Behaviour::Honest).await;
    a.work(100).await;
    assert_eq!(c.job(&job).await["state"], "complete");
    // the expired lease's holder reports a different result
    let r = late_liar.compute(&held).await;
    assert_eq!(late_liar.report(&held, &r).await.unwrap(), "mismatch");
    let doc = c.job(&job).await;
    assert_eq!(doc["state"], "running", "the dispute re-opens the job");
    // a third host decides; the liar loses and the total is exact again
    let mut b = SimWorker::register(&c.url, "b", Behaviour::Honest).await;
    b.work(10).await;
    let doc = c.job(&job).await;
    assert_eq!(doc["state"], "complete");
    assert_eq!(doc["nodes_total"], 4_470);
    assert_eq!(doc["conservation_ok"], true);
    c.stop().await;
}

/// A unit split after its lease expired (an idle worker's lease split the waiting
/// continuation) is no longer the unit the late worker walked: its result is answered
/// "late", compared with nothing and counted against nobody (an honest worker that was
/// away collects no error), and it is never counted on top of the new siblings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_report_on_a_unit_split_since_is_checked_against_the_split_unit() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let job = c.submit("brendan/set1/pieces_05x05.txt", 1, 300, 1).await;
    let mut a = SimWorker::register(&c.url, "host-a", Behaviour::Honest).await;
    let mut b = SimWorker::register(&c.url, "host-b", Behaviour::Honest).await;
    // first runs stop on the budget: every open unit is now a continuation
    a.work(1).await;
    let held = a.lease(1).await.unwrap().pop().expect("a continuation");
    assert!(!held.cursor.is_empty(), "{held:?}");
    let late = a.compute(&held).await;
    // the lease expires; an idle worker's lease splits the waiting continuation
    c.advance(31_000);
    let split_before = c.job(&job).await["split_nodes"].as_u64().unwrap();
    let got = b.lease(64).await.unwrap();
    let split_after = c.job(&job).await["split_nodes"].as_u64().unwrap();
    assert!(split_after > split_before, "no split happened");
    assert!(got.iter().any(|l| l.unit_id == held.unit_id));
    assert_eq!(a.report(&held, &late).await.unwrap(), "late");
    // a repeat gets the same answer
    assert_eq!(a.report(&held, &late).await.unwrap(), "late");
    for l in &got {
        let r = b.compute(l).await;
        b.report(l, &r).await.unwrap();
    }
    for _ in 0..500 {
        if a.work(1).await + b.work(1).await == 0 {
            break;
        }
    }
    let doc = c.job(&job).await;
    // no result is wrong: every lease handed out the unit as stored (a split that made
    // no sibling once left leases on the old prefix, and honest workers were marked
    // wrong and quarantined for it), and the late one was not compared
    let wrong: u64 = doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["verdict"] == "wrong")
        .map(|r| r["results"].as_u64().unwrap())
        .sum();
    assert_eq!(wrong, 0, "{}", doc["results"]);
    assert_eq!(doc["state"], "complete");
    assert_exact(&doc, BRENDAN_5X5);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_the_enumeration_finishes_shows_how_deep_it_got_and_its_warnings() {
    use e2fleet_engine::formats::{LoadOptions, parse_str, to_site_json};
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    // Brendan's 4x4 with its last piece replaced by a copy of the one before, split at
    // its last depth: the enumeration itself walks the whole tree
    let text = std::fs::read_to_string(puzzle_path("brendan/set1/pieces_04x04.txt")).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    let last = lines.len() - 1;
    lines[last] = lines[last - 1];
    let puzzle = parse_str(&lines.join("\n"), "dup.txt", &LoadOptions::default()).unwrap();
    let created = c
        .operator()
        .await
        .submit_job(admin(v2::SubmitJobRequest {
            name: "dup".into(),
            puzzle_json: to_site_json(&puzzle),
            split_depth: 16,
            replicas: 1,
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_inner();
    assert!(
        created.warnings[0].contains("piece 15 is an exact copy of piece 14"),
        "{:?}",
        created.warnings
    );
    let doc = c.job(&created.job_id).await;
    let reached = doc["nodes_by_depth"]
        .as_array()
        .unwrap()
        .iter()
        .rposition(|n| n.as_u64().unwrap() > 0)
        .unwrap()
        + 1;
    assert_eq!(reached, 16, "the repeated piece still allows full boards");
    assert_eq!(
        doc["deepest"]["depth"], 16,
        "not 0: the enumeration got there before any unit ran"
    );
    c.stop().await;
}

/// A cross-checked job on a one-worker fleet says what it needs at submission, and its
/// status says why its units wait: nothing waits silently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_checked_job_says_what_it_waits_for() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let mut w1 = SimWorker::register(&c.url, "only", Behaviour::Honest).await;
    let p = load_file(
        &puzzle_path("brendan/set1/pieces_04x04.txt"),
        &LoadOptions::default(),
    )
    .unwrap();
    let created = c
        .operator()
        .await
        .submit_job(admin(v2::SubmitJobRequest {
            name: "twice".into(),
            puzzle_json: to_site_json(&p),
            order: "row-major".into(),
            split_depth: 2,
            replicas: 2,
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_inner();
    assert!(
        created
            .warnings
            .iter()
            .any(|w| w.contains("2 different workers") && w.contains("1 worker is online")),
        "{:?}",
        created.warnings
    );
    // the only worker runs every unit once; then they wait, and the status says why
    w1.work(1000).await;
    let doc = c.job(&created.job_id).await;
    assert_eq!(doc["state"], "running");
    let waiting = &doc["waiting"];
    assert!(
        waiting["for_another_worker"].as_u64().unwrap() > 0,
        "{waiting}"
    );
    let why = waiting["reason"].as_str().unwrap_or_default();
    assert!(
        why.contains("has not run") && why.contains("Start another worker"),
        "{waiting}"
    );
    // a second worker: nothing is waiting for the fleet any more, and the job completes
    let mut w2 = SimWorker::register(&c.url, "second", Behaviour::Honest).await;
    assert!(c.job(&created.job_id).await["waiting"]["reason"].is_null());
    w2.work(1000).await;
    let doc = c.job(&created.job_id).await;
    assert_eq!(doc["state"], "complete");
    assert_eq!(doc["nodes_total"], 4_470);
    c.stop().await;
}

/// A running job's status carries the tree estimate: near Brendan 6x6's known size, with
/// an interval around it and a lower bound below it, and no time to go before there is a
/// rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_says_how_big_its_tree_is_with_an_interval() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let job = c.submit("brendan/set1/pieces_06x06.txt", 4, 0, 1).await;
    let doc = c.job(&job).await;
    let e = &doc["estimate"];
    let (nodes, low, high) = (
        e["tree_nodes"].as_f64().unwrap(),
        e["tree_low"].as_f64().unwrap(),
        e["tree_high"].as_f64().unwrap(),
    );
    let truth = 69_284_103.0;
    assert!((0.6 * truth..1.5 * truth).contains(&nodes), "{e}");
    assert!(low <= nodes && nodes <= high && low < high, "{e}");
    assert!(e["tree_at_least"].as_f64().unwrap() <= truth, "{e}");
    assert!(e["eta_seconds"].is_null(), "no rate yet: {e}");
    assert!(e["tree_how"].as_str().unwrap().contains("independent runs"));
    // the same figure on every request (fixed seed per job)
    assert_eq!(c.job(&job).await["estimate"]["tree_nodes"], e["tree_nodes"]);
}

/// Without a depth, a unit count or a budget, units are sized to about a minute of one
/// core by the tree estimate: Brendan 6x6 (~70 M nodes) is one unit, walked exactly; the
/// real Eternity II is too big for any such split and the submission says to give a budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_are_sized_by_time_and_an_endless_tree_asks_for_a_budget() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let load = |rel: &str| {
        let p = e2fleet_engine::formats::load_file(
            &puzzle_path(rel),
            &e2fleet_engine::formats::LoadOptions::default(),
        )
        .unwrap();
        e2fleet_engine::formats::to_site_json(&p)
    };
    let submit = |json: String| v2::SubmitJobRequest {
        name: "sized".into(),
        puzzle_json: json,
        replicas: 1,
        ..Default::default()
    };
    let six = c
        .operator()
        .await
        .submit_job(admin(submit(load("brendan/set1/pieces_06x06.txt"))))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((six.units, six.split_depth), (1, 0), "{six:?}");
    let mut w = SimWorker::register(&c.url, "w", Behaviour::Honest).await;
    w.work(3).await;
    let doc = c.job(&six.job_id).await;
    assert_eq!(doc["state"], "complete");
    assert_eq!(doc["nodes_total"], 69_284_103);
    assert_eq!(doc["conservation_ok"], true);
    let e2 = c
        .operator()
        .await
        .submit_job(admin(submit(load("e2/official.json"))))
        .await
        .unwrap()
        .into_inner();
    assert!(e2.units >= 1000, "{} units", e2.units);
    assert!(
        e2.warnings.iter().any(|w| w.contains("--budget")),
        "{:?}",
        e2.warnings
    );
}
