//! The archive: decided units past the detail window leave `units`, `results` and
//! `leases` for one compact row each. Totals, unit counts, certificates and audits must
//! read the same from it, and a void or an overturn that reaches archived units must
//! bring them back and subtract them exactly, chains of continuations included.

use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use e2fleet_coordinator::fleet::TrustPolicy;
use e2fleet_engine::certificate::audit::{check_structure, compare_run, spec, unit_of};
use e2fleet_engine::certificate::decode;
use e2fleet_engine::search::{NoControl, RunOptions, Walker};

use e2fleet_coordinator::store::testing::{database_for, scalar};

use crate::harness::*;
use crate::trust::{credit_of, trusted_volunteer, work_all};
use e2fleet_engine::testing::{BRENDAN_5X5, assert_exact};

const FIVE: &str = "brendan/set1/pieces_05x05.txt";

/// (archived units, units still in `units`, results, leases) in the database.
async fn rows(db: &std::path::Path) -> (i64, i64, i64, i64) {
    let db = database_for(db).await;
    (
        scalar(&db, "SELECT COUNT(*) FROM archive").await,
        scalar(&db, "SELECT COUNT(*) FROM units").await,
        scalar(&db, "SELECT COUNT(*) FROM results").await,
        scalar(&db, "SELECT COUNT(*) FROM leases").await,
    )
}

/// The job's certificate, audited whole: every unit walked again and compared.
async fn audit_whole(c: &Coordinator, job: &str) -> usize {
    let file = c
        .admin()
        .await
        .export_certificate(job.parse().unwrap(), false)
        .await
        .unwrap();
    let cert = decode(&file).unwrap();
    let s = spec(&cert).unwrap();
    assert_eq!(check_structure(&cert, &s).unwrap().nodes, 113_211);
    assert_eq!(cert.solutions.len(), 16, "the solutions' units stay whole");
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
    cert.units.len()
}

/// Archives every decided unit of the complete job `whole` describes and checks it reads
/// the same; the units archived.
async fn archive_all(
    c: &Coordinator,
    db: &std::path::Path,
    whole: &serde_json::Value,
    (units_before, results_before): (i64, i64),
) -> i64 {
    let chains = whole["job_id"].as_str().unwrap();
    // past the window (the background tick may take some first)
    c.advance(ARCHIVE_WINDOW_MS + 1);
    let archived = c.fleet.archive_decided().await.unwrap();
    let (in_archive, units, results, leases) = rows(db).await;
    assert!(in_archive > 300, "{in_archive} archived");
    assert!(in_archive as usize >= archived);
    assert_eq!(
        c.fleet.archive_decided().await.unwrap(),
        0,
        "all went at once"
    );
    assert_eq!(units + in_archive, units_before);
    // what stays: the units whose results carry solutions or a best board
    assert!(units <= 16 + 10, "{units} units left of {units_before}");
    assert!(results < results_before / 10 && leases <= results + 4);
    // the job reads the same from the archive
    let doc = c.job(chains).await;
    assert_exact(&doc, BRENDAN_5X5);
    assert_eq!(doc["nodes_by_depth"], whole["nodes_by_depth"]);
    assert_eq!(
        doc["units"], whole["units"],
        "done units count the archived ones"
    );
    assert_eq!(
        doc["results"], whole["results"],
        "the breakdown adds the archive's tallies"
    );
    assert_eq!(audit_whole(c, chains).await as i64, units_before);
    in_archive
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archived_units_keep_every_total_exact_through_a_void_a_restart_and_an_audit() {
    void_chains(true).await;
}

/// The same without the archive: a voided account that ran parents and continuations of
/// the same chains counts each of its results out once, in whatever order they come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voided_account_that_ran_whole_chains_counts_each_result_out_once() {
    void_chains(false).await;
}

async fn void_chains(archive: bool) {
    let dir = tempfile::tempdir().unwrap();
    let db = temp_db(&dir);
    let trust = TrustPolicy {
        trust_after: 2,
        recheck: 0.0,
        account_quarantine_after: 100,
        ..TrustPolicy::default()
    };
    let clock = Arc::new(AtomicI64::new(1_000_000));
    let start = |trust, clock| {
        let db = db.clone();
        async move {
            if archive {
                Coordinator::start_archiving(&db, trust, clock).await
            } else {
                Coordinator::start_with(&db, 100, trust, clock).await
            }
        }
    };
    let c = start(trust.clone(), clock.clone()).await;
    let mut o1 = SimWorker::register(&c.url, "operator-1", Behaviour::Honest).await;
    // units of at most 300 nodes: chains of continuations, shared by an operator machine
    // and a trusted volunteer whose results count alone
    let chains = c.submit(FIVE, 2, 300, 1).await;
    let mut v = trusted_volunteer(&c, &mut o1, 2).await;
    work_all(&mut [&mut v, &mut o1], 2_000).await;
    let whole = c.job(&chains).await;
    assert_exact(&whole, BRENDAN_5X5);
    let (_, units_before, results_before, _) = rows(&db).await;
    let in_archive = if archive {
        archive_all(&c, &db, &whole, (units_before, results_before)).await
    } else {
        0
    };

    // its results that counted alone earned credit, which the archive keeps with them
    let (nodes, results, confirmed, confirmed_results, _) = credit_of(&c, "vera").await;
    assert_eq!(confirmed_results, 2, "the results that earned its trust");
    assert!(
        results > confirmed_results && nodes > confirmed,
        "{results} {nodes}"
    );

    // the volunteer's account is revoked: everything it said alone comes back out of the
    // archive and leaves the totals, with the continuations created from it, and so does
    // its credit
    c.admin().await.revoke_account("vera").await.unwrap();
    let (nodes, results, confirmed_nodes, confirmed_results, _) = credit_of(&c, "vera").await;
    assert_eq!(
        (nodes, results, confirmed_nodes, confirmed_results),
        (confirmed, 2, confirmed, 2)
    );
    let voided = c.job(&chains).await;
    assert_eq!(
        voided["state"], "running",
        "vera's archived results were voided"
    );
    assert!(
        !archive || rows(&db).await.0 < in_archive,
        "restored: {:?}",
        rows(&db).await
    );
    work_all(&mut [&mut o1], 2_000).await;
    let redone = c.job(&chains).await;
    assert_exact(&redone, BRENDAN_5X5);
    assert_eq!(redone["nodes_by_depth"], whole["nodes_by_depth"]);

    // archived again, read back after a restart, and audited whole from the archive
    c.advance(ARCHIVE_WINDOW_MS + 1);
    c.fleet.archive_decided().await.unwrap();
    assert_eq!(rows(&db).await.0 > 0, archive);
    c.stop().await;
    let c = start(trust, clock).await;
    let again = c.job(&chains).await;
    assert_exact(&again, BRENDAN_5X5);
    assert_eq!(again["nodes_by_depth"], whole["nodes_by_depth"]);
    audit_whole(&c, &chains).await;
    c.stop().await;
}

/// A worker whose lease expired (a laptop asleep) reports after its unit was decided by
/// another: compared while the unit is in the detail window (a replica), and told it is
/// too late once the unit is archived, never "not found" (which a worker logs as a
/// refused result). Either way the totals stay exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_result_is_compared_in_the_window_and_told_too_late_after_the_archive() {
    let dir = tempfile::tempdir().unwrap();
    let db = temp_db(&dir);
    let clock = Arc::new(AtomicI64::new(1_000_000));
    // a ten-minute window on the test's clock: nothing is archived until it moves on
    let window = std::time::Duration::from_secs(600);
    let c = Coordinator::start_archiving_after(&db, window, clock).await;
    let job = c.submit(FIVE, 5, 0, 1).await;
    let mut sleeper = SimWorker::register(&c.url, "laptop", Behaviour::Honest).await;
    let mut other = SimWorker::register(&c.url, "server", Behaviour::Honest).await;
    let held = sleeper.lease(16).await.unwrap();
    assert!(held.len() >= 4, "{} leased", held.len());
    let mut results = Vec::new();
    for lease in &held {
        results.push(sleeper.compute(lease).await);
    }
    // the leases run out while the laptop sleeps; the server does the whole job
    c.advance(31_000);
    c.fleet.expire_leases().await.unwrap();
    other.work(1_000).await;
    assert_exact(&c.job(&job).await, BRENDAN_5X5);
    // the first late result: its unit is decided but not archived, so it is compared
    assert_eq!(
        sleeper.report(&held[0], &results[0]).await.unwrap(),
        "replica"
    );
    assert_eq!(
        c.fleet.archive_decided().await.unwrap(),
        0,
        "inside the window"
    );
    c.advance(601_000);
    c.fleet.archive_decided().await.unwrap();
    // the rest come after the archive: too late for an archived unit, compared for one
    // that stays (its result carries a solution or a best board)
    let store = database_for(&db).await;
    let archived = async |unit: i64| {
        scalar(
            &store,
            &format!("SELECT COUNT(*) FROM archive WHERE unit = {unit}"),
        )
        .await
            > 0
    };
    let mut too_late = 0;
    for (lease, result) in held.iter().zip(&results).skip(1) {
        let expected = if archived(lease.unit_id).await {
            "late"
        } else {
            "replica"
        };
        too_late += usize::from(expected == "late");
        assert_eq!(sleeper.report(lease, result).await.unwrap(), expected);
    }
    assert!(too_late > 0, "no held unit was archived");
    // a lease nobody granted is still not found
    let mut forged = held[1].clone();
    forged.lease_id = uuid::Uuid::new_v4().to_string();
    forged.unit_id = i64::MAX;
    let err = sleeper.report(&forged, &results[1]).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    assert_exact(&c.job(&job).await, BRENDAN_5X5);
    c.stop().await;
}
