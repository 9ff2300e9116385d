//! A unit's first result accepted on its own is written once, already decided
//! (`Fleet::accept_alone`), instead of going through the general decision (inserted
//! pending, read back with its unit's results, marked accepted, its body folded). The
//! two paths must leave the same rows behind: the same fleet, run twice with the same
//! clock and the same workers, once with the written-once path and once without it,
//! ends with equal results, bodies, units, job totals, workers and accounts.

use e2fleet_coordinator::store::testing::{database_for, texts};

use crate::harness::*;
use crate::trust::{start_never_rechecking, trusted_volunteer, work_all};

const FIVE: &str = "brendan/set1/pieces_05x05.txt";

/// Every row the two paths write, as text, in a stable order.
const TABLES: &[&str] = &[
    "SELECT CAST(unit_id AS TEXT) || ' ' || verdict || ' ' || CAST(body_kept AS TEXT) || ' ' || digest || ' ' \
       || CAST(committed AS TEXT) || ' ' || CAST(solutions AS TEXT) || ' ' || CAST(max_depth AS TEXT) || ' ' \
       || COALESCE(CAST(credited_day AS TEXT), '-') || ' ' || account_id || ' ' || standing || ' ' || hostname \
     FROM results ORDER BY id",
    "SELECT CAST(result_id AS TEXT) FROM result_bodies ORDER BY result_id",
    "SELECT CAST(id AS TEXT) || ' ' || state || ' ' || COALESCE(CAST(accepted_result_id AS TEXT), '-') || ' ' \
       || CAST(results AS TEXT) || ' ' || CAST(active_leases AS TEXT) || ' ' || CAST(needed AS TEXT) || ' ' \
       || CAST(quorum AS TEXT) || ' ' || CAST(disputed AS TEXT) || ' ' || COALESCE(CAST(decided_ms AS TEXT), '-') \
       || ' ' || kind || ' ' || COALESCE(CAST(parent_id AS TEXT), '-') \
     FROM units ORDER BY id",
    "SELECT name || ' ' || state || ' ' || CAST(accepted_json AS TEXT) || ' ' || CAST(accepted_solutions AS TEXT) \
       || ' ' || COALESCE(CAST(finished_ms AS TEXT), '-') FROM jobs ORDER BY created_ms, name",
    "SELECT hostname || ' ' || CAST(units_done AS TEXT) || ' ' || CAST(errors AS TEXT) FROM workers ORDER BY hostname",
    "SELECT CASE WHEN kind = 'operator' THEN 'operator' ELSE 'volunteer' END || ' ' || CAST(confirmed_results AS TEXT) \
       || ' ' || CAST(confirmed_nodes AS TEXT) || ' ' || CAST(credit_results AS TEXT) || ' ' \
       || CAST(credit_nodes AS TEXT) || ' ' || CAST(errors AS TEXT) FROM accounts ORDER BY kind, created_ms",
];

/// Runs the same fleet on a fresh database: chains of continuations (solutions, best
/// boards, folding), a volunteer earning trust and then accepted on its word, a second
/// job shared by the volunteer and an operator machine. Its rows, and how many reports
/// took the written-once path.
async fn run(written_once: bool) -> (Vec<Vec<String>>, u64) {
    let dir = tempfile::tempdir().unwrap();
    let c = start_never_rechecking(&dir).await;
    c.fleet.set_accept_alone(written_once);
    let mut o1 = SimWorker::register(&c.url, "operator-1", Behaviour::Honest).await;
    c.submit_full(FIVE, "chains", 2, 300, 1).await;
    work_all(&mut [&mut o1], 2_000).await;
    c.submit_full(FIVE, "shared", 2, 0, 1).await;
    let mut v = trusted_volunteer(&c, &mut o1, 2).await;
    work_all(&mut [&mut v, &mut o1], 2_000).await;
    let alone = c.fleet.accepted_alone();
    c.stop().await;
    let db = database_for(&temp_db(&dir)).await;
    let mut rows = Vec::new();
    for sql in TABLES {
        rows.push(texts(&db, sql).await);
    }
    (rows, alone)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_acceptance_written_once_leaves_the_rows_the_general_path_leaves() {
    let (once, alone) = run(true).await;
    let (general, none) = run(false).await;
    assert_eq!(none, 0, "the general path was asked for");
    assert!(
        alone > 300,
        "{alone} reports took the written-once path of {} results",
        once[0].len()
    );
    for (i, (a, b)) in once.iter().zip(&general).enumerate() {
        assert!(!a.is_empty(), "{}: no rows", TABLES[i]);
        assert_eq!(a.len(), b.len(), "{}: rows", TABLES[i]);
        for (x, y) in a.iter().zip(b) {
            assert_eq!(x, y, "{}", TABLES[i]);
        }
    }
}
