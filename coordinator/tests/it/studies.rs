//! Order studies on the fleet: probe units leased, checked, cross-checked and merged into
//! a ranking that exact counts confirm; probes only for workers that run them; bad
//! studies refused with a reason.

use e2fleet_engine::formats::{LoadOptions, load_file, to_site_json};
use e2fleet_engine::testing::count_tree;
use e2fleet_proto::api::{StudyRequest, StudyStatus};
use e2fleet_proto::v2;
use tonic::Code;

use crate::harness::*;

const FIVE: &str = "brendan/set1/pieces_05x05.txt";

fn puzzle_json(rel: &str) -> String {
    to_site_json(&load_file(&puzzle_path(rel), &LoadOptions::default()).unwrap())
}

/// The whole tree of `rel` in `order`, counted.
fn exact(rel: &str, order: &str) -> f64 {
    let puzzle = load_file(&puzzle_path(rel), &LoadOptions::default()).unwrap();
    count_tree(&puzzle, &order.parse().unwrap()) as f64
}

/// A study of Brendan's 5x5 in `orders`: 8 rounds of 256-board probes.
pub fn request(orders: &[&str]) -> StudyRequest {
    StudyRequest {
        name: "five".into(),
        puzzle_json: puzzle_json(FIVE),
        orders: orders.iter().map(|o| o.to_string()).collect(),
        particles: Some(256),
        rounds: Some(8),
        replicas: 1,
        spot_check: 0.0,
        priority: 0,
    }
}

/// Works `workers` until none gets a lease, then lets the coordinator settle its studies.
async fn run_out(c: &Coordinator, workers: &mut [&mut SimWorker]) {
    for _ in 0..2_000 {
        let mut done = 0;
        for w in workers.iter_mut() {
            done += w.work(1).await;
        }
        if done == 0 {
            break;
        }
    }
    c.fleet.settle_studies().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_study_ranks_orders_as_their_exact_counts_do() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let mut w = SimWorker::register(&c.url, "prober", Behaviour::Honest).await;
    w.probes = true;
    let orders = ["row-major", "cols:br", "spiral:tl", "comb:2"];
    let mut admin = c.admin().await;
    let created = admin.submit_study(&request(&orders)).await.unwrap();
    assert!(created.units > 0);
    // a running study has no winner yet
    let early = c
        .operator()
        .await
        .submit_job(admin_req(&format!("study:{}", created.study_id)))
        .await
        .unwrap_err();
    assert_eq!(early.code(), Code::FailedPrecondition, "{early}");

    run_out(&c, &mut [&mut w]).await;
    let s: StudyStatus = admin.study(created.study_id).await.unwrap();
    assert!(s.ended(), "{}", s.state);
    assert_eq!(s.orders.len(), 4);
    let truth: Vec<f64> = s.orders.iter().map(|o| exact(FIVE, &o.order)).collect();
    for (o, t) in s.orders.iter().zip(&truth) {
        assert!(o.rounds >= 8, "{}: {} rounds", o.order, o.rounds);
        assert!(
            (o.estimate / t - 1.0).abs() < 0.2,
            "{}: estimate {} against {t}",
            o.order,
            o.estimate
        );
        assert!(
            o.at_least <= *t,
            "{}: at least {} > {t}",
            o.order,
            o.at_least
        );
        assert_eq!(o.nodes_by_depth.len(), 25);
        assert_eq!(o.constraints_by_depth.len(), 25);
        assert_eq!(o.cells.len(), 25);
    }
    // ranked best first, and where the exact counts differ by more than a quarter the
    // estimates order them the same way
    for (i, o) in s.orders.iter().enumerate() {
        assert_eq!(o.rank as usize, i + 1);
    }
    for i in 0..truth.len() {
        for j in 0..truth.len() {
            if truth[i] * 1.25 < truth[j] {
                assert!(
                    s.orders[i].estimate < s.orders[j].estimate,
                    "{} ({}) against {} ({})",
                    s.orders[i].order,
                    truth[i],
                    s.orders[j].order,
                    truth[j]
                );
            }
        }
    }
    // the study's jobs are not listed with the counting jobs; its own list has it
    assert!(admin.jobs().await.unwrap().is_empty());
    assert_eq!(admin.studies().await.unwrap().len(), 1);

    // probes are not walks: the fleet's two speeds leave them out
    let fleet = c.fleet.fleet_status().await.unwrap();
    assert_eq!(fleet.aggregate_nodes_per_s.raw, 0.0);
    assert_eq!(fleet.per_core_nodes_per_s.overall, None);
    assert!(
        fleet
            .aggregate_series
            .iter()
            .all(|m| m.raw_nodes_per_s == 0.0 && m.verified_nodes_per_s == 0.0)
    );

    // submit takes the winner in one step
    let job = c
        .operator()
        .await
        .submit_job(admin_req(&format!("study:{}", created.study_id)))
        .await
        .unwrap()
        .into_inner();
    let doc = c.job(&job.job_id).await;
    assert_eq!(doc["order"], s.orders[0].order.as_str());
    c.stop().await;
}

fn admin_req(order: &str) -> tonic::Request<v2::SubmitJobRequest> {
    admin(v2::SubmitJobRequest {
        name: "winner".into(),
        puzzle_json: puzzle_json(FIVE),
        order: order.into(),
        split_depth: 2,
        replicas: 1,
        ..Default::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_go_only_to_workers_that_run_them() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let mut old = SimWorker::register(&c.url, "old-worker", Behaviour::Honest).await;
    let mut prober = SimWorker::register(&c.url, "prober", Behaviour::Honest).await;
    prober.probes = true;
    let mut admin = c.admin().await;
    admin
        .submit_study(&request(&["row-major", "cols:br"]))
        .await
        .unwrap();
    assert!(
        old.lease(8).await.unwrap().is_empty(),
        "a probe for a worker that does not run them"
    );
    let leases = prober.lease(4).await.unwrap();
    assert_eq!(leases.len(), 4);
    for l in &leases {
        let p = l.probe.as_ref().expect("a probe lease");
        assert_eq!(p.particles, 256);
    }
    // the same unit always gets the same seed; different units different ones
    let seeds: std::collections::HashSet<u64> =
        leases.iter().map(|l| l.probe.unwrap().seed).collect();
    assert_eq!(seeds.len(), 4);
    // a counting job beside the study: the old worker gets its units, never a probe
    let job = c.submit(FIVE, 2, 0, 1).await;
    let got = old.lease(8).await.unwrap();
    assert!(!got.is_empty());
    assert!(got.iter().all(|l| l.probe.is_none() && l.job_id == job));
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_study_is_refused_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let mut admin = c.admin().await;
    let cases: Vec<(StudyRequest, &str)> = vec![
        (request(&["cells:0,1,2", "row-major"]), "leaves out"),
        (request(&["cells:0,0,1", "row-major"]), "twice"),
        (request(&["row-major", "rows:tl"]), "same order"),
        (request(&["row-major", "sideways"]), "unknown fill order"),
        (request(&["row-major"]), "2..="),
        (
            StudyRequest {
                particles: Some(1_000_000),
                ..request(&["row-major", "cols:br"])
            },
            "boards",
        ),
        (
            StudyRequest {
                rounds: Some(1),
                ..request(&["row-major", "cols:br"])
            },
            "rounds",
        ),
        (
            StudyRequest {
                puzzle_json: "{\"width\": 3}".into(),
                ..request(&["row-major", "cols:br"])
            },
            "",
        ),
        (
            // a board too large for the search tables
            StudyRequest {
                puzzle_json: serde_json::json!({
                    "width": 40,
                    "height": 40,
                    "pieces": vec![[1, 1, 1, 1]; 1600],
                })
                .to_string(),
                ..request(&["row-major", "cols:br"])
            },
            "not supported",
        ),
    ];
    for (r, why) in cases {
        let e = admin.submit_study(&r).await.unwrap_err().to_string();
        assert!(e.contains(why), "{e}");
    }
    assert!(admin.studies().await.unwrap().is_empty());

    // a running study stopped: its probes cancelled, what ran kept, and once only
    let mut w = SimWorker::register(&c.url, "prober", Behaviour::Honest).await;
    w.probes = true;
    let created = admin
        .submit_study(&request(&["row-major", "cols:br"]))
        .await
        .unwrap();
    w.work(2).await;
    admin.cancel_study(created.study_id).await.unwrap();
    assert!(w.lease(8).await.unwrap().is_empty());
    let s = admin.study(created.study_id).await.unwrap();
    assert_eq!(s.state, "cancelled");
    for o in &s.orders {
        assert_eq!(c.job(&o.job_id.to_string()).await["state"], "cancelled");
    }
    let again = admin.cancel_study(created.study_id).await.unwrap_err();
    assert!(again.to_string().contains("cancelled"), "{again}");
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_that_lies_is_outvoted_and_marked_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 100).await;
    let mut a = SimWorker::register(&c.url, "honest-a", Behaviour::Honest).await;
    let mut b = SimWorker::register(&c.url, "honest-b", Behaviour::Honest).await;
    let mut liar = SimWorker::register(&c.url, "liar", Behaviour::Liar).await;
    for w in [&mut a, &mut b, &mut liar] {
        w.probes = true;
    }
    let mut admin = c.admin().await;
    let created = admin
        .submit_study(&StudyRequest {
            replicas: 2,
            rounds: Some(2),
            ..request(&["row-major", "cols:br"])
        })
        .await
        .unwrap();
    // the liar runs first everywhere it can
    liar.work(50).await;
    run_out(&c, &mut [&mut a, &mut b]).await;
    let s = admin.study(created.study_id).await.unwrap();
    assert!(s.ended(), "{}", s.state);
    let mut wrong = 0;
    for o in &s.orders {
        let doc = c.job(&o.job_id.to_string()).await;
        assert_eq!(doc["state"], "complete", "{doc}");
        assert_eq!(doc["conservation_ok"], true);
        wrong += doc["results"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["verdict"] == "wrong")
            .map(|r| r["results"].as_u64().unwrap())
            .sum::<u64>();
        assert_eq!(o.rounds, 2);
    }
    assert!(wrong > 0, "the liar's probes were not marked wrong");
    c.stop().await;
}
