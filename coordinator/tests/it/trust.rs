//! Trust: strangers can join the fleet and still cannot forge its numbers. Each test is
//! an attack on trust, made as a hostile volunteer would make it (the real gRPC API,
//! an enrolment token, nothing else), and what the coordinator does about it.

use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use e2fleet_coordinator::fleet::TrustPolicy;
use e2fleet_proto::v2;
use tonic::Code;

use crate::harness::*;
use e2fleet_engine::testing::{BRENDAN_4X4, assert_exact};

const FOUR: &str = "brendan/set1/pieces_04x04.txt";

/// Workers take turns until none has work (bounded).
pub async fn work_all(workers: &mut [&mut SimWorker], rounds: usize) {
    for _ in 0..rounds {
        let mut done = 0;
        for w in workers.iter_mut() {
            done += w.work(1).await;
        }
        if done == 0 {
            return;
        }
    }
}

async fn account_json(c: &Coordinator, name: &str) -> serde_json::Value {
    let accounts = c.admin().await.accounts().await.unwrap();
    let a = accounts
        .into_iter()
        .find(|a| a.id.as_str() == name)
        .unwrap();
    serde_json::to_value(a).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_identities_of_one_volunteer_forging_zeros_cannot_move_a_total() {
    let dir = tempfile::tempdir().unwrap();
    let trust = TrustPolicy {
        account_quarantine_after: 3,
        ..TrustPolicy::default()
    };
    let c = Coordinator::start_with(
        &temp_db(&dir),
        3,
        trust,
        Arc::new(AtomicI64::new(1_000_000)),
    )
    .await;
    let (_, token) = c.admin().await.add_account("mallory").await.unwrap();
    let job = c.submit(FOUR, 2, 0, 1).await;
    // two registrations of one account, named like anything it likes
    let mut a = SimWorker::register_with(&c.url, &token, "a", "x", 2, Behaviour::Zeros).await;
    let mut b = SimWorker::register_with(&c.url, &token, "b", "x", 2, Behaviour::Zeros).await;
    // they get in first, and agree with each other
    work_all(&mut [&mut a, &mut b], 50).await;
    let doc = c.job(&job).await;
    assert_eq!(
        doc["units"]["done"], 0,
        "nothing one account says counts alone"
    );
    assert_eq!(doc["nodes_total"], doc["enumeration_nodes"]);
    // the operator's own machines come along
    let mut h1 = SimWorker::register(&c.url, "honest-1", Behaviour::Honest).await;
    let mut h2 = SimWorker::register(&c.url, "honest-2", Behaviour::Honest).await;
    work_all(&mut [&mut h1, &mut h2, &mut a, &mut b], 200).await;
    assert_exact(&c.job(&job).await, BRENDAN_4X4);
    let m = account_json(&c, "mallory").await;
    assert_eq!(m["quarantined"], true, "{m}");
    assert_eq!(m["confirmed_results"], 0);
    assert!(a.lease(5).await.unwrap().is_empty());
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volunteer_earns_trust_loses_it_at_once_and_its_revocation_takes_back_what_it_alone_said()
{
    let dir = tempfile::tempdir().unwrap();
    let trust = TrustPolicy {
        trust_after: 3,
        recheck: 0.0,
        account_quarantine_after: 100,
        ..TrustPolicy::default()
    };
    let c = Coordinator::start_with(
        &temp_db(&dir),
        100,
        trust,
        Arc::new(AtomicI64::new(1_000_000)),
    )
    .await;
    let (_, token) = c.admin().await.add_account("vera").await.unwrap();
    let mut v = SimWorker::register_with(&c.url, &token, "vera-1", "x", 2, Behaviour::Honest).await;
    let mut op = SimWorker::register(&c.url, "operator-1", Behaviour::Honest).await;
    // untrusted: vera's results wait for another party; the operator's confirm them
    let job = c.submit(FOUR, 2, 0, 1).await;
    let mut confirmed = 0;
    for _ in 0..3 {
        let l = v.lease(1).await.unwrap().remove(0);
        let r = v.compute(&l).await;
        assert_eq!(v.report(&l, &r).await.unwrap(), "pending_check");
        let ol = op.lease(1).await.unwrap().remove(0);
        assert_eq!(
            ol.unit_id, l.unit_id,
            "the unit waiting for another party goes first"
        );
        let or = op.compute(&ol).await;
        op.report(&ol, &or).await.unwrap();
        confirmed += 1;
    }
    let a = account_json(&c, "vera").await;
    assert_eq!(a["confirmed_streak"], confirmed);
    assert_eq!(a["trusted"], true, "{a}");
    // trusted: its results count alone now
    let l = v.lease(1).await.unwrap().remove(0);
    let r = v.compute(&l).await;
    assert_eq!(v.report(&l, &r).await.unwrap(), "accepted");
    // revoked: what it said alone is taken back, its units run again, the job stays exact
    c.admin().await.revoke_account("vera").await.unwrap();
    let err = v.lease(1).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err}");
    work_all(&mut [&mut op], 200).await;
    let doc = c.job(&job).await;
    assert_exact(&doc, BRENDAN_4X4);
    assert!(
        doc["results"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["verdict"] == "void"),
        "{}",
        doc["results"]
    );
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recheck_catches_a_trusted_volunteers_lie_and_its_trust_restarts() {
    let dir = tempfile::tempdir().unwrap();
    // every trusted result is rechecked here, so the lie is sure to be drawn
    let trust = TrustPolicy {
        trust_after: 2,
        recheck: 1.0,
        account_quarantine_after: 100,
        ..TrustPolicy::default()
    };
    let c = Coordinator::start_with(
        &temp_db(&dir),
        100,
        trust,
        Arc::new(AtomicI64::new(1_000_000)),
    )
    .await;
    let (_, token) = c.admin().await.add_account("vera").await.unwrap();
    let mut v = SimWorker::register_with(&c.url, &token, "vera-1", "x", 2, Behaviour::Honest).await;
    let mut o1 = SimWorker::register(&c.url, "operator-1", Behaviour::Honest).await;
    let mut o2 = SimWorker::register(&c.url, "operator-2", Behaviour::Honest).await;
    let job = c.submit(FOUR, 2, 0, 1).await;
    for _ in 0..2 {
        let l = v.lease(1).await.unwrap().remove(0);
        let r = v.compute(&l).await;
        v.report(&l, &r).await.unwrap();
        let ol = o1.lease(1).await.unwrap().remove(0);
        let or = o1.compute(&ol).await;
        o1.report(&ol, &or).await.unwrap();
    }
    assert_eq!(account_json(&c, "vera").await["trusted"], true);
    // trusted now, it lies; the recheck sends the unit to another party
    v.behaviour = Behaviour::Liar;
    let l = v.lease(1).await.unwrap().remove(0);
    let r = v.compute(&l).await;
    assert_eq!(v.report(&l, &r).await.unwrap(), "pending_check");
    let ol = o1.lease(1).await.unwrap().remove(0);
    assert_eq!(ol.unit_id, l.unit_id);
    let or = o1.compute(&ol).await;
    assert_eq!(o1.report(&ol, &or).await.unwrap(), "mismatch");
    // a third party decides: the lie is wrong, and the streak starts again
    let dl = o2.lease(1).await.unwrap().remove(0);
    assert_eq!(
        dl.unit_id, l.unit_id,
        "the disputed unit goes to a trusted worker first"
    );
    let dr = o2.compute(&dl).await;
    assert_eq!(
        o2.report(&dl, &dr).await.unwrap(),
        "replica",
        "it agrees with the operator"
    );
    let a = account_json(&c, "vera").await;
    assert_eq!(
        (a["trusted"].clone(), a["confirmed_streak"].clone()),
        (false.into(), 0.into()),
        "{a}"
    );
    assert_eq!(a["errors"], 1);
    v.behaviour = Behaviour::Honest;
    work_all(&mut [&mut o1, &mut o2, &mut v], 200).await;
    assert_exact(&c.job(&job).await, BRENDAN_4X4);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_alone_does_not_take_over_an_identity() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let mut victim = SimWorker::register(&c.url, "victim", Behaviour::Honest).await;
    c.submit(FOUR, 2, 0, 1).await;
    let held = victim.lease(2).await.unwrap();
    // the attacker knows the enrolment token and the victim's id (both are not secrets
    // in a volunteer fleet), not the victim's token
    let mut client = v2::worker_service_client::WorkerServiceClient::connect(c.url.clone())
        .await
        .unwrap();
    let err = client
        .register_worker(v2::RegisterWorkerRequest {
            enroll_token: ENROLL.into(),
            host: Some(v2::HostInfo {
                hostname: "victim".into(),
                engine_kind: v2::EngineKind::Reference.into(),
                ..Default::default()
            }),
            previous_worker_id: victim.id.clone(),
            previous_worker_token: "guessed".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err}");
    // the victim still holds its token and its leases
    for l in &held {
        let r = victim.compute(l).await;
        assert_eq!(victim.report(l, &r).await.unwrap(), "accepted");
    }
    // with the token, a worker keeps its identity (a restart)
    let again = client
        .register_worker(v2::RegisterWorkerRequest {
            enroll_token: ENROLL.into(),
            host: Some(v2::HostInfo {
                hostname: "victim".into(),
                engine_kind: v2::EngineKind::Reference.into(),
                ..Default::default()
            }),
            previous_worker_id: victim.id.clone(),
            previous_worker_token: victim.token.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.worker_id, victim.id);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_is_a_label_quarantine_follows_the_identity() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 1).await;
    let job = c.submit(FOUR, 2, 0, 2).await;
    let mut honest = SimWorker::register(&c.url, "honest-c", Behaviour::Honest).await;
    let mut impostor = SimWorker::register(&c.url, "honest-c", Behaviour::Liar).await;
    let mut other = SimWorker::register(&c.url, "other", Behaviour::Honest).await;
    let mut third = SimWorker::register(&c.url, "third", Behaviour::Honest).await;
    work_all(
        &mut [&mut impostor, &mut honest, &mut other, &mut third],
        200,
    )
    .await;
    assert_exact(&c.job(&job).await, BRENDAN_4X4);
    let workers = c.workers().await;
    let rows: Vec<&serde_json::Value> = workers
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["hostname"] == "honest-c")
        .collect();
    let by_id = |id: &str| rows.iter().find(|w| w["id"] == id).unwrap();
    assert_eq!(by_id(&impostor.id)["quarantined"], true);
    assert_eq!(
        by_id(&honest.id)["quarantined"],
        false,
        "the real honest-c works on"
    );
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_cannot_hoard_a_job() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let job = c.submit("brendan/set1/pieces_06x06.txt", 4, 0, 1).await;
    // it says it has 1,000 cores; it gets what 64 threads would hold, at most
    let mut greedy =
        SimWorker::register_with(&c.url, ENROLL, "greedy", "x", 1000, Behaviour::Honest).await;
    let mut got = 0;
    for _ in 0..10 {
        got += greedy.lease(256).await.unwrap().len();
    }
    assert!(got <= 64, "{got}");
    let mut honest = SimWorker::register(&c.url, "honest", Behaviour::Honest).await;
    assert!(
        !honest.lease(4).await.unwrap().is_empty(),
        "work is left for others"
    );
    assert_eq!(c.job(&job).await["state"], "running");
    c.stop().await;
}

pub async fn trusted_volunteer(c: &Coordinator, op: &mut SimWorker, trust_after: u64) -> SimWorker {
    let (_, token) = c.admin().await.add_account("vera").await.unwrap();
    let mut v = SimWorker::register_with(&c.url, &token, "vera-1", "x", 2, Behaviour::Honest).await;
    for _ in 0..trust_after {
        let l = v.lease(1).await.unwrap().remove(0);
        let r = v.compute(&l).await;
        v.report(&l, &r).await.unwrap();
        let ol = op.lease(1).await.unwrap().remove(0);
        let or = op.compute(&ol).await;
        op.report(&ol, &or).await.unwrap();
    }
    assert_eq!(account_json(c, "vera").await["trusted"], true);
    v
}

/// A coordinator whose volunteers earn trust after 2 confirmed results, are never drawn
/// for a recheck and are never quarantined here (100 errors).
pub async fn start_never_rechecking(dir: &tempfile::TempDir) -> Coordinator {
    let trust = TrustPolicy {
        trust_after: 2,
        recheck: 0.0,
        account_quarantine_after: 100,
        ..TrustPolicy::default()
    };
    Coordinator::start_with(
        &temp_db(dir),
        100,
        trust,
        Arc::new(AtomicI64::new(1_000_000)),
    )
    .await
}

/// `w` leases one unit, walks it and reports it: the lease, the result and the status.
async fn walk_one(w: &mut SimWorker) -> (v2::Lease, e2fleet_engine::UnitResult, String) {
    let l = w.lease(1).await.unwrap().remove(0);
    let r = w.compute(&l).await;
    let status = w.report(&l, &r).await.unwrap();
    (l, r, status)
}

/// A trusted volunteer's lie that no recheck drew still comes out: caught lying once
/// anywhere (here on a job with two replicas), everything its account got accepted alone
/// is run again by another party, and the old lie is overturned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_liar_caught_once_has_its_whole_unconfirmed_past_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let c = start_never_rechecking(&dir).await;
    let mut o1 = SimWorker::register(&c.url, "operator-1", Behaviour::Honest).await;
    let mut o2 = SimWorker::register(&c.url, "operator-2", Behaviour::Honest).await;
    let first = c.submit(FOUR, 2, 0, 1).await;
    let mut v = trusted_volunteer(&c, &mut o1, 2).await;
    // trusted and never rechecked (rate 0): its lie on the first job is accepted alone
    v.behaviour = Behaviour::Liar;
    let l = v.lease(1).await.unwrap().remove(0);
    let r = v.compute(&l).await;
    assert_eq!(v.report(&l, &r).await.unwrap(), "accepted");
    work_all(&mut [&mut o1], 200).await;
    let doc = c.job(&first).await;
    assert_eq!(doc["state"], "complete");
    assert_ne!(doc["nodes_total"], 4_470, "the lie is in the total for now");
    // it lies again on a job that wants two replicas: caught there
    let second = c.submit(FOUR, 2, 0, 2).await;
    let l = v.lease(1).await.unwrap().remove(0);
    let r = v.compute(&l).await;
    v.report(&l, &r).await.unwrap();
    work_all(&mut [&mut o1, &mut o2], 400).await;
    // ... and the first job's old lie was run again, overturned, the job exact again
    assert_exact(&c.job(&second).await, BRENDAN_4X4);
    let doc = c.job(&first).await;
    assert_exact(&doc, BRENDAN_4X4);
    c.stop().await;
}

/// docs/security.md's formula, checked by simulation against the real coordinator: a
/// trusted volunteer that forges `k` results at recheck rate `r` gets them all into the
/// total with probability `(1 - r)^k` (one drawn forgery brings every other one out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgeries_survive_with_the_probability_docs_security_states() {
    let r = 0.5;
    let trials = 100;
    for k in [1i32, 2] {
        let mut survived = 0;
        for _ in 0..trials {
            let dir = tempfile::tempdir().unwrap();
            let trust = TrustPolicy {
                trust_after: 1,
                recheck: r,
                account_quarantine_after: 100,
                ..TrustPolicy::default()
            };
            let c = Coordinator::start_with(
                &temp_db(&dir),
                100,
                trust,
                Arc::new(AtomicI64::new(1_000_000)),
            )
            .await;
            let mut o1 = SimWorker::register(&c.url, "operator-1", Behaviour::Honest).await;
            let mut o2 = SimWorker::register(&c.url, "operator-2", Behaviour::Honest).await;
            let job = c.submit(FOUR, 2, 0, 1).await;
            let mut v = trusted_volunteer(&c, &mut o1, 1).await;
            v.behaviour = Behaviour::Liar;
            for _ in 0..k {
                let l = v.lease(1).await.unwrap().remove(0);
                let forged = v.compute(&l).await;
                v.report(&l, &forged).await.unwrap();
            }
            work_all(&mut [&mut o1, &mut o2], 400).await;
            let doc = c.job(&job).await;
            assert_eq!(doc["state"], "complete");
            if doc["nodes_total"] != 4_470 {
                survived += 1;
            }
            c.stop().await;
        }
        let p = (1.0 - r).powi(k);
        let seen = survived as f64 / trials as f64;
        let sd = (p * (1.0 - p) / trials as f64).sqrt();
        assert!(
            (seen - p).abs() < 4.0 * sd,
            "k = {k}: forgeries survived in {seen:.3} of trials, the formula says {p:.3} (sd {sd:.3})"
        );
    }
}

/// Credit on the public stats page: a volunteer's results the operator's machines
/// confirm, on two days, appear as its confirmed nodes and results, per UTC day; the
/// operator is not ranked; nothing unconfirmed counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirmed_work_is_credited_per_account_and_day_on_the_stats_page() {
    let dir = tempfile::tempdir().unwrap();
    let trust = TrustPolicy {
        trust_after: 100,
        ..TrustPolicy::default()
    };
    let clock = Arc::new(AtomicI64::new(10 * 86_400_000 + 1_000));
    let c = Coordinator::start_with(&temp_db(&dir), 100, trust, clock).await;
    let (_, token) = c.admin().await.add_account("vera").await.unwrap();
    let (_, idle) = c
        .admin()
        .await
        .add_account_in("ivan", Some("lab"))
        .await
        .unwrap();
    // vera joins ivan's team later: her credit goes with her
    assert_eq!(
        c.admin()
            .await
            .set_account_team("vera", Some("lab"))
            .await
            .unwrap(),
        2
    );
    let mut v = SimWorker::register_with(&c.url, &token, "vera-1", "x", 2, Behaviour::Honest).await;
    let _i = SimWorker::register_with(&c.url, &idle, "ivan-1", "x", 2, Behaviour::Honest).await;
    let mut op = SimWorker::register(&c.url, "operator-1", Behaviour::Honest).await;
    c.submit(FOUR, 2, 0, 1).await;
    let mut nodes = [0u64; 2];
    for day in 0..2 {
        for _ in 0..2 {
            let l = v.lease(1).await.unwrap().remove(0);
            let r = v.compute(&l).await;
            v.report(&l, &r).await.unwrap();
            nodes[day] += r.committed;
            let ol = op.lease(1).await.unwrap().remove(0);
            let or = op.compute(&ol).await;
            op.report(&ol, &or).await.unwrap();
        }
        c.advance(86_400_000);
    }
    // one more of vera's, never confirmed: no credit
    let l = v.lease(1).await.unwrap().remove(0);
    let r = v.compute(&l).await;
    v.report(&l, &r).await.unwrap();
    let (status, body) = crate::http_api::get(&c.url, "/api/stats").await;
    assert_eq!(status, 200, "{body}");
    let s: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(s["today"], 12);
    let accounts = s["accounts"].as_array().unwrap();
    assert_eq!(accounts.len(), 2, "volunteers only: {s}");
    let vera = &accounts[0];
    assert_eq!(
        (vera["rank"].as_u64(), vera["id"].as_str()),
        (Some(1), Some("vera"))
    );
    assert_eq!(vera["confirmed_results"], 4);
    assert_eq!(vera["confirmed_nodes"], nodes[0] + nodes[1]);
    assert_eq!(vera["credit_results"], 4);
    assert_eq!(vera["credit_nodes"], nodes[0] + nodes[1]);
    assert_eq!(
        (vera["first_day"].as_i64(), vera["last_day"].as_i64()),
        (Some(10), Some(11))
    );
    let days: Vec<(i64, u64, u64)> = vera["days"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["day"].as_i64().unwrap(),
                d["nodes"].as_u64().unwrap(),
                d["results"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(days, vec![(10, nodes[0], 2), (11, nodes[1], 2)]);
    assert_eq!(accounts[1]["id"], "ivan");
    assert_eq!(accounts[1]["confirmed_nodes"], 0);
    assert_eq!(accounts[1]["credit_nodes"], 0);
    assert_eq!(s["days"].as_array().unwrap().len(), 2);
    // the team: its accounts' figures added up, per day too
    assert_eq!(
        (vera["team"].as_str(), accounts[1]["team"].as_str()),
        (Some("lab"), Some("lab"))
    );
    let teams = s["teams"].as_array().unwrap();
    assert_eq!(teams.len(), 1, "{s}");
    let lab = &teams[0];
    assert_eq!(
        (
            lab["rank"].as_u64(),
            lab["id"].as_str(),
            lab["accounts"].as_u64()
        ),
        (Some(1), Some("lab"), Some(2))
    );
    assert_eq!(lab["credit_nodes"], nodes[0] + nodes[1]);
    assert_eq!(lab["credit_results"], 4);
    assert_eq!(lab["confirmed_nodes"], nodes[0] + nodes[1]);
    assert_eq!(lab["days"], vera["days"]);

    // vera founds her own team: the credit moves with her, and the teams rank by it
    let mut admin = c.admin().await;
    assert_eq!(
        admin
            .set_account_team("vera", Some("vera-solo"))
            .await
            .unwrap(),
        1
    );
    let (_, body) = crate::http_api::get(&c.url, "/api/stats").await;
    let s: serde_json::Value = serde_json::from_str(&body).unwrap();
    let teams: Vec<(String, u64, u64)> = s["teams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["id"].as_str().unwrap().to_string(),
                t["accounts"].as_u64().unwrap(),
                t["credit_nodes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        teams,
        vec![
            ("vera-solo".to_string(), 1, nodes[0] + nodes[1]),
            ("lab".to_string(), 1, 0)
        ]
    );
    // out of any team; and what the operator cannot do
    assert_eq!(admin.set_account_team("vera", None).await.unwrap(), 0);
    let listed = admin.accounts().await.unwrap();
    let team_of = |n: &str| {
        listed
            .iter()
            .find(|a| a.id.as_str() == n)
            .unwrap()
            .team
            .clone()
    };
    assert_eq!(team_of("vera"), None);
    assert_eq!(team_of("ivan").map(|t| t.to_string()), Some("lab".into()));
    for (account, team, why) in [
        ("nobody", Some("lab"), "volunteer account nobody"),
        ("operator", Some("lab"), "volunteer account operator"),
        ("vera", Some("no spaces"), "team name \"no spaces\""),
    ] {
        let e = admin.set_account_team(account, team).await.unwrap_err();
        assert!(e.to_string().contains(why), "{account} {team:?}: {e}");
    }
}

/// An account's credit, confirmed part and per-day lines, from the admin API and the stats
/// page: (credit nodes, credit results, confirmed nodes, confirmed results, the days' nodes
/// summed).
pub async fn credit_of(c: &Coordinator, name: &str) -> (u64, u64, u64, u64, u64) {
    let a = account_json(c, name).await;
    let (_, body) = crate::http_api::get(&c.url, "/api/stats").await;
    let s: serde_json::Value = serde_json::from_str(&body).unwrap();
    let days: u64 = s["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == name)
        .map(|x| {
            x["days"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["nodes"].as_u64().unwrap())
                .sum()
        })
        .unwrap_or(0);
    let n = |k: &str| a[k].as_u64().unwrap();
    (
        n("credit_nodes"),
        n("credit_results"),
        n("confirmed_nodes"),
        n("confirmed_results"),
        days,
    )
}

/// Credit follows the work that counts, as BOINC's adaptive replication grants it: a
/// trusted volunteer's results accepted on its word alone earn credit (before, only
/// results another party confirmed did, so a trusted account earned almost nothing); a
/// recheck that later confirms one does not credit it twice; and a lie that was accepted
/// alone loses its credit when it is overturned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_that_counts_is_credited_once_and_an_overturned_lie_loses_its_credit() {
    let dir = tempfile::tempdir().unwrap();
    let c = start_never_rechecking(&dir).await;
    let mut o1 = SimWorker::register(&c.url, "operator-1", Behaviour::Honest).await;
    let mut o2 = SimWorker::register(&c.url, "operator-2", Behaviour::Honest).await;
    let first = c.submit(FOUR, 2, 0, 1).await;
    let mut v = trusted_volunteer(&c, &mut o1, 2).await;
    let (earned, results, confirmed, confirmed_results, days) = credit_of(&c, "vera").await;
    assert_eq!((results, confirmed_results), (2, 2));
    assert!(earned > 0 && earned == confirmed && days == earned);
    // trusted now: two honest results count alone, and earn credit, not confirmation
    let mut alone = 0;
    for _ in 0..2 {
        let (_, r, status) = walk_one(&mut v).await;
        assert_eq!(status, "accepted");
        alone += r.committed;
    }
    assert_eq!(
        credit_of(&c, "vera").await,
        (earned + alone, 4, earned, 2, earned + alone)
    );
    // a lie accepted alone is credited for now
    v.behaviour = Behaviour::Liar;
    let (_, lie, status) = walk_one(&mut v).await;
    assert_eq!(status, "accepted");
    assert_eq!(
        credit_of(&c, "vera").await,
        (
            earned + alone + lie.committed,
            5,
            earned,
            2,
            earned + alone + lie.committed
        )
    );
    work_all(&mut [&mut o1], 200).await;
    // caught on a job with two replicas: everything vera's word alone got accepted is run
    // again by the operator's machines; the honest two are confirmed (credit unchanged),
    // the old lie is overturned (its credit goes), the caught lie never counted
    let second = c.submit(FOUR, 2, 0, 2).await;
    let l = v.lease(1).await.unwrap().remove(0);
    let r = v.compute(&l).await;
    v.report(&l, &r).await.unwrap();
    work_all(&mut [&mut o1, &mut o2], 400).await;
    assert_exact(&c.job(&first).await, BRENDAN_4X4);
    assert_exact(&c.job(&second).await, BRENDAN_4X4);
    assert_eq!(
        credit_of(&c, "vera").await,
        (earned + alone, 4, earned + alone, 4, earned + alone)
    );
    c.stop().await;
}

/// Credit results of the accounts other than vera and the operator's.
async fn others_credit(c: &Coordinator) -> u64 {
    let mut n = 0;
    for a in c.admin().await.accounts().await.unwrap() {
        if a.id.as_str() != "operator" && a.id.as_str() != "vera" {
            n += a.credit_results;
        }
    }
    n
}

/// Credit is exactly the work that counts, in the database: every credited result is
/// accepted or agreeing on a decided unit, and each account's credit is the sum of its
/// credited results.
pub async fn assert_credit_is_what_counts(db: &std::path::Path) {
    use e2fleet_coordinator::store::testing::{database_for, scalar};
    let db = database_for(db).await;
    let stray = scalar(
        &db,
        "SELECT COUNT(*) FROM results r JOIN units u ON u.id = r.unit_id \
         WHERE r.credited_day IS NOT NULL AND (u.state <> 'done' OR r.verdict NOT IN ('accepted', 'agree'))",
    )
    .await;
    assert_eq!(stray, 0, "credited results that do not count");
    let off = scalar(
        &db,
        "SELECT COUNT(*) FROM accounts a WHERE a.credit_nodes <> \
         (SELECT COALESCE(SUM(r.committed), 0) FROM results r \
          WHERE r.account_id = a.id AND r.credited_day IS NOT NULL) \
         OR a.credit_results <> (SELECT COUNT(*) FROM results r \
          WHERE r.account_id = a.id AND r.credited_day IS NOT NULL)",
    )
    .await;
    assert_eq!(
        off, 0,
        "accounts whose credit is not their credited results"
    );
}

/// Chains of continuations walked by a trusted volunteer (alone) and two untrusted ones
/// that confirm each other's runs: when the trusted account is revoked, the runs it
/// walked alone leave the totals and the continuations built on them are cancelled, and
/// with them goes the credit of every result on them — the agreeing replicas' as well as
/// the accepted ones' — so credit stays exactly the work that counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_continuation_takes_its_replicas_credit_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let c = start_never_rechecking(&dir).await;
    let mut o1 = SimWorker::register(&c.url, "operator-1", Behaviour::Honest).await;
    c.submit(FOUR, 2, 0, 1).await;
    let mut v = trusted_volunteer(&c, &mut o1, 2).await;
    work_all(&mut [&mut o1], 200).await;
    let (_, it) = c.admin().await.add_account("ivan").await.unwrap();
    let (_, ct) = c.admin().await.add_account("carol").await.unwrap();
    let mut ivan = SimWorker::register_with(&c.url, &it, "ivan-1", "x", 2, Behaviour::Honest).await;
    let mut carol =
        SimWorker::register_with(&c.url, &ct, "carol-1", "x", 2, Behaviour::Honest).await;
    // vera walks the first runs alone; ivan and carol, untrusted, confirm each other on
    // what follows (their continuations among it), then earn trust and go on alone
    let chains = c.submit(FOUR, 2, 300, 1).await;
    for _ in 0..4 {
        assert_eq!(walk_one(&mut v).await.2, "accepted");
    }
    // ivan walks runs until one continues a run of vera's (a cursor: only vera's runs
    // are decided yet); carol walks until she has agreed with it
    let mut cont = None;
    for _ in 0..200 {
        let (l, ..) = walk_one(&mut ivan).await;
        if !l.cursor.is_empty() {
            cont = Some(l.unit_id);
            break;
        }
    }
    let cont = cont.expect("a continuation of vera's runs");
    let mut agreed = false;
    for _ in 0..200 {
        let (l, _, status) = walk_one(&mut carol).await;
        if l.unit_id == cont {
            assert_eq!(status, "replica", "carol agrees with ivan's accepted run");
            agreed = true;
            break;
        }
    }
    assert!(agreed, "carol reached the continuation");
    work_all(&mut [&mut ivan, &mut carol], 2_000).await;
    assert_exact(&c.job(&chains).await, BRENDAN_4X4);
    let before = others_credit(&c).await;
    assert!(
        before > 0,
        "ivan and carol earned credit confirming each other"
    );
    assert_credit_is_what_counts(&temp_db(&dir)).await;
    c.admin().await.revoke_account("vera").await.unwrap();
    assert!(
        others_credit(&c).await < before,
        "results on continuations of vera's runs lost their credit"
    );
    assert_credit_is_what_counts(&temp_db(&dir)).await;
    work_all(&mut [&mut o1, &mut ivan, &mut carol], 2_000).await;
    assert_exact(&c.job(&chains).await, BRENDAN_4X4);
    assert_credit_is_what_counts(&temp_db(&dir)).await;
    c.stop().await;
}
