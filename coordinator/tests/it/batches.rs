//! Lease requests and reports are written in batches (`fleet/batches.rs`): many workers
//! at once through one coordinator must leave the same exact job as one at a time. Run
//! on SQLite here, and on PostgreSQL by `postgres::the_whole_suite_passes_on_postgresql`
//! (where a batch's reads and changes are set-based statements).

use std::collections::HashMap;

use e2fleet_coordinator::store::testing::{database_for, scalar};

use crate::harness::*;

const FIVE: &str = "brendan/set1/pieces_05x05.txt";

/// Every worker leases `batch` units at a time and reports each, all at once (one task
/// each), until no work is left; every unit each lease was granted on.
async fn work_concurrently(workers: Vec<SimWorker>, batch: u32) -> Vec<i64> {
    let tasks: Vec<_> = workers
        .into_iter()
        .map(|mut w| {
            tokio::spawn(async move {
                let mut granted = Vec::new();
                // an idle worker asks again a few times: others' results may still open
                // continuations
                let mut idle = 0;
                while idle < 20 {
                    let leases = w.lease(batch).await.unwrap();
                    if leases.is_empty() {
                        idle += 1;
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                        continue;
                    }
                    idle = 0;
                    for l in &leases {
                        granted.push(l.unit_id);
                        let r = w.compute(l).await;
                        w.report(l, &r).await.unwrap();
                    }
                }
                granted
            })
        })
        .collect();
    let mut granted = Vec::new();
    for t in tasks {
        granted.extend(t.await.unwrap());
    }
    granted
}

/// The 5x5 job's document: complete, with its exact totals and conservation.
fn assert_five_by_five_exact(doc: &serde_json::Value) {
    assert_eq!(doc["state"], "complete", "{}", doc["units"]);
    assert_eq!(doc["nodes_total"], 113_211);
    assert_eq!(doc["solutions_count"], 16);
    assert_eq!(doc["conservation_ok"], true);
}

async fn workers(c: &Coordinator, n: usize, behaviour: Behaviour, name: &str) -> Vec<SimWorker> {
    let mut all = Vec::new();
    for i in 0..n {
        all.push(SimWorker::register(&c.url, &format!("{name}-{i}"), behaviour).await);
    }
    all
}

/// Thirty workers at once on a job whose units stop at 300 nodes (continuations appear
/// while they lease): requests go in batches of several, every unit is granted once,
/// and the totals are exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_workers_at_once_are_written_in_batches_and_add_up_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let job = c.submit(FIVE, 3, 300, 1).await;
    let before = c.fleet.batch_totals();
    let granted = work_concurrently(workers(&c, 30, Behaviour::Honest, "w").await, 2).await;
    let mut per_unit: HashMap<i64, usize> = HashMap::new();
    for u in &granted {
        *per_unit.entry(*u).or_default() += 1;
    }
    let twice: Vec<_> = per_unit.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "units granted more than once: {twice:?}");
    let doc = c.job(&job).await;
    assert_five_by_five_exact(&doc);
    assert_eq!(
        doc["units"]["done"].as_u64().unwrap() as usize,
        per_unit.len()
    );
    let (leases, reports) = c.fleet.batch_totals();
    let (leases, reports) = (
        (
            leases.batches - before.0.batches,
            leases.requests - before.0.requests,
        ),
        (
            reports.batches - before.1.batches,
            reports.requests - before.1.requests,
        ),
    );
    assert!(
        leases.1 > leases.0,
        "lease requests went one a batch: {leases:?}"
    );
    assert!(
        reports.1 > reports.0,
        "reports went one a batch: {reports:?}"
    );
    assert_eq!(reports.1 as usize, granted.len(), "one report a lease");
    c.stop().await;
}

/// Two jobs worked at once by the same workers: a report batch's part then carries
/// results, continuations and totals of both (on PostgreSQL one statement writes them
/// all), and each job adds up exactly, as on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_jobs_in_the_same_batches_each_add_up_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let first = c.submit_full(FIVE, "first", 3, 300, 1).await;
    let second = c.submit_full(FIVE, "second", 3, 300, 1).await;
    let granted = work_concurrently(workers(&c, 30, Behaviour::Honest, "w").await, 2).await;
    let mut per_unit: HashMap<i64, usize> = HashMap::new();
    for u in &granted {
        *per_unit.entry(*u).or_default() += 1;
    }
    assert!(per_unit.values().all(|n| *n == 1), "a unit granted twice");
    let mut done = 0;
    for job in [&first, &second] {
        let doc = c.job(job).await;
        assert_five_by_five_exact(&doc);
        done += doc["units"]["done"].as_u64().unwrap() as usize;
    }
    assert_eq!(done, per_unit.len(), "every unit granted is done, once");
    c.stop().await;
}

/// Results that keep their bodies (solutions, or a board among the job's best) are
/// accepted in the report batches' parts with the rest, and the job keeps the bodies it
/// keeps one report at a time: every solution's, then the deepest other boards, up to
/// [`BEST_BOARDS`] in all (a board refused found ten at its depth or deeper, and the ten
/// stay kept).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boards_kept_in_the_batches_parts_are_the_jobs_best() {
    use e2fleet_coordinator::fleet::policy::BEST_BOARDS;

    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let job = c.submit(FIVE, 3, 300, 1).await;
    let parts = c.fleet.accepted_in_parts();
    let granted = work_concurrently(workers(&c, 30, Behaviour::Honest, "w").await, 2).await;
    assert_five_by_five_exact(&c.job(&job).await);
    assert_eq!(
        c.fleet.accepted_in_parts() - parts,
        granted.len() as u64,
        "every result accepted in a part, kept boards too"
    );
    let db = database_for(&temp_db(&dir)).await;
    let accepted = format!("FROM results WHERE job_id = '{job}' AND verdict = 'accepted'");
    let solutions = scalar(
        &db,
        &format!("SELECT COUNT(*) {accepted} AND solutions > 0"),
    )
    .await;
    let boards = scalar(
        &db,
        &format!("SELECT COUNT(*) {accepted} AND solutions = 0 AND max_depth > 0"),
    )
    .await;
    assert!(
        solutions > 0 && boards > BEST_BOARDS as i64,
        "{solutions} solutions, {boards} boards"
    );
    assert_eq!(
        scalar(
            &db,
            &format!("SELECT COUNT(*) {accepted} AND solutions > 0 AND body_kept = 1")
        )
        .await,
        solutions,
        "every solution's body is kept"
    );
    let kept = scalar(
        &db,
        &format!("SELECT COUNT(*) {accepted} AND solutions = 0 AND body_kept = 1"),
    )
    .await;
    assert_eq!(
        kept,
        (BEST_BOARDS as i64 - solutions).max(0),
        "the job keeps {BEST_BOARDS} boards"
    );
    assert_eq!(
        scalar(&db, "SELECT COUNT(*) FROM result_bodies").await,
        solutions + kept,
        "a body for each kept result, none else"
    );
    if kept > 0 {
        let shallowest_kept = scalar(
            &db,
            &format!("SELECT MIN(max_depth) {accepted} AND solutions = 0 AND body_kept = 1"),
        )
        .await;
        let deepest_folded = scalar(
            &db,
            &format!(
                "SELECT COALESCE(MAX(max_depth), 0) {accepted} AND solutions = 0 AND body_kept = 0"
            ),
        )
        .await;
        assert!(
            shallowest_kept >= deepest_folded,
            "a board at depth {deepest_folded} folded, one at {shallowest_kept} kept"
        );
    }
    c.stop().await;
}

/// Two runs a unit, with a liar among the workers: its results disagree, units are
/// disputed and run again, inside batches of agreeing reports (each such report is
/// written alone, between the parts of its batch). The job still adds up exactly. (One
/// liar: two would tell the same lie, and two identities of the operator agreeing are a
/// quorum.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disputes_inside_batches_are_decided_as_alone_and_the_job_adds_up() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 1_000).await;
    let job = c.submit(FIVE, 3, 0, 2).await;
    let mut all = workers(&c, 16, Behaviour::Honest, "honest").await;
    all.extend(workers(&c, 1, Behaviour::Liar, "liar").await);
    work_concurrently(all, 2).await;
    let doc = c.job(&job).await;
    assert_five_by_five_exact(&doc);
    let (_, reports) = c.fleet.batch_totals();
    assert!(reports.requests > reports.batches, "{reports:?}");
    c.stop().await;
}

/// Trusted volunteers of three accounts at once (trusted from their first result, never
/// drawn for a recheck): their results are accepted in the batches' parts and credited
/// there (on PostgreSQL one statement for a part's credits). The job adds up exactly, and
/// each account's credit is exactly its credited results, once per unit, on its day's
/// line too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusted_volunteers_in_batches_earn_exactly_the_credit_of_their_work() {
    use std::sync::Arc;
    use std::sync::atomic::AtomicI64;

    use e2fleet_coordinator::fleet::TrustPolicy;

    let dir = tempfile::tempdir().unwrap();
    let trust = TrustPolicy {
        trust_after: 0,
        recheck: 0.0,
        account_quarantine_after: 100,
        ..TrustPolicy::default()
    };
    let c = Coordinator::start_with(
        &temp_db(&dir),
        1_000,
        trust,
        Arc::new(AtomicI64::new(1_000_000)),
    )
    .await;
    let job = c.submit(FIVE, 3, 0, 1).await;
    let accounts = ["ada", "bo", "cy"];
    let mut all = Vec::new();
    for a in accounts {
        let (_, token) = c.admin().await.add_account(a).await.unwrap();
        for i in 0..6 {
            let name = format!("{a}-{i}");
            all.push(
                SimWorker::register_with(&c.url, &token, &name, "x", 2, Behaviour::Honest).await,
            );
        }
    }
    let (_, before) = c.fleet.batch_totals();
    let alone = c.fleet.accepted_alone();
    work_concurrently(all, 2).await;
    let doc = c.job(&job).await;
    assert_five_by_five_exact(&doc);
    let (_, reports) = c.fleet.batch_totals();
    assert!(
        reports.requests - before.requests > reports.batches - before.batches,
        "volunteers' reports went one a batch: {reports:?}"
    );
    // every unit's one result was accepted alone, most of them in parts
    let done = doc["units"]["done"].as_u64().unwrap();
    assert!(c.fleet.accepted_alone() - alone > 0);
    let mut credited = 0;
    for a in accounts {
        let (nodes, results, confirmed, confirmed_results, days) =
            crate::trust::credit_of(&c, a).await;
        assert_eq!(
            (confirmed, confirmed_results),
            (0, 0),
            "{a}: nobody confirmed"
        );
        assert_eq!(days, nodes, "{a}: the day's line is the account's credit");
        assert!(results > 0, "{a} earned nothing");
        credited += results;
    }
    assert_eq!(credited, done, "one credited result a unit");
    crate::trust::assert_credit_is_what_counts(&temp_db(&dir)).await;
    c.stop().await;
}

/// Workers heartbeating their leases while lease and report batches run: a heartbeat that
/// only extends active leases is written beside the report batches (see
/// `fleet/heartbeats.rs`), none is told to drop a lease it still runs, and the job adds up
/// exactly; a heartbeat naming a lease already reported takes the single way and is told
/// to drop it, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_beside_the_batches_keep_leases_alive_and_the_job_exact() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 3).await;
    let job = c.submit(FIVE, 3, 300, 1).await;
    let beside_before = c.fleet.heartbeats_beside_reports();
    let tasks: Vec<_> = workers(&c, 12, Behaviour::Honest, "beat")
        .await
        .into_iter()
        .map(|mut w| {
            tokio::spawn(async move {
                let (mut beats, mut idle) = (0, 0);
                while idle < 20 {
                    let leases = w.lease(2).await.unwrap();
                    if leases.is_empty() {
                        idle += 1;
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                        continue;
                    }
                    idle = 0;
                    for (i, l) in leases.iter().enumerate() {
                        // the leases not yet reported
                        let held: Vec<&_> = leases[i..].iter().collect();
                        let stop = w.heartbeat(&held).await.unwrap();
                        assert!(stop.is_empty(), "told to drop running leases: {stop:?}");
                        beats += 1;
                        let r = w.compute(l).await;
                        w.report(l, &r).await.unwrap();
                    }
                }
                (w, beats)
            })
        })
        .collect();
    let mut beats = 0;
    let mut last = None;
    for t in tasks {
        let (w, n) = t.await.unwrap();
        beats += n;
        last = Some(w);
    }
    assert_five_by_five_exact(&c.job(&job).await);
    let beside = c.fleet.heartbeats_beside_reports() - beside_before;
    assert!(
        beats > 0 && beside > 0,
        "{beside} of {beats} heartbeats beside"
    );
    // the single way still answers what the first cannot: a reported lease is dropped
    let mut w = last.unwrap();
    c.submit(FIVE, 2, 0, 1).await;
    let mut two = w.lease(2).await.unwrap();
    let (kept, l) = (two.pop().expect("two units"), two.pop().expect("two units"));
    let r = w.compute(&l).await;
    w.report(&l, &r).await.unwrap();
    let beside_before = c.fleet.heartbeats_beside_reports();
    assert_eq!(w.heartbeat(&[&l]).await.unwrap(), vec![l.lease_id.clone()]);
    assert_eq!(c.fleet.heartbeats_beside_reports(), beside_before);
    // and a lease still running is extended beside the batches, in the database
    c.clock
        .fetch_add(30_000, std::sync::atomic::Ordering::SeqCst);
    let answer = w.beat(&[&kept]).await.unwrap();
    assert!(answer.stop_lease_ids.is_empty());
    assert_eq!(c.fleet.heartbeats_beside_reports(), beside_before + 1);
    let db = database_for(&temp_db(&dir)).await;
    let sql = format!(
        "SELECT deadline_ms FROM leases WHERE id = '{}'",
        kept.lease_id
    );
    assert_eq!(scalar(&db, &sql).await, answer.deadline_unix_ms);
    c.stop().await;
}
