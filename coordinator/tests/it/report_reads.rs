//! What a report reads in one statement (`Tx::report_view`) and keeps for its decision:
//! the job's accepted totals and whether the job has another unfinished unit. Kept copies
//! must follow every change the same transaction makes, or a job would never complete
//! (a stale "another unit is unfinished") or its totals would lose a unit's counts.

use e2fleet_proto::api::{AccountId, JobId, LeaseId, UnitId};

use crate::harness::*;
use e2fleet_coordinator::fleet::FleetError;
use e2fleet_coordinator::store::{ResultId, StoreError};

const FIVE: &str = "brendan/set1/pieces_05x05.txt";

/// A job of several units, one of them leased: (job, the lease, its unit).
async fn leased_job(c: &Coordinator) -> (JobId, LeaseId, UnitId) {
    let job = c.submit(FIVE, 2, 0, 1).await;
    let mut w = SimWorker::register(&c.url, "desk", Behaviour::Honest).await;
    let l = w.lease(1).await.unwrap().remove(0);
    (
        job.parse().unwrap(),
        l.lease_id.parse().unwrap(),
        UnitId(l.unit_id),
    )
}

/// How a unit other than the report's leaves the unfinished ones.
#[derive(Clone, Copy, Debug)]
enum Ends {
    Decided,
    Cancelled,
    AllCancelled,
}

/// Reads a report's view of the first lease, ends every other unit `how`, decides the
/// first: the job must then have no unfinished unit, read through the same transaction.
async fn ends_the_others(how: Ends) {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 1).await;
    let (job, first_lease, first) = leased_job(&c).await;
    let (before, after) = c
        .fleet
        .store()
        .write(move |tx| {
            let view = tx
                .report_view(first_lease, &AccountId::operator(), (0, 0))?
                .expect("the lease is stored");
            assert_eq!(view.unit.id, first);
            let others: Vec<UnitId> = tx
                .certificate_rows(job)?
                .into_iter()
                .map(|row| row.unit.id)
                .filter(|u| *u != first)
                .collect();
            assert!(others.len() >= 2, "{} other units", others.len());
            let before = tx.job_has_unfinished_units(job)?;
            match how {
                Ends::Decided => {
                    for u in &others {
                        tx.mark_unit_done(*u, ResultId(0), 1)?;
                    }
                    tx.mark_unit_done(first, ResultId(0), 1)?;
                }
                Ends::Cancelled => {
                    for u in &others {
                        tx.cancel_unit(*u)?;
                    }
                    tx.mark_unit_done(first, ResultId(0), 1)?;
                }
                Ends::AllCancelled => tx.cancel_job_units(job)?,
            }
            let after = tx.job_has_unfinished_units(job)?;
            Ok::<_, StoreError>((before, after))
        })
        .await
        .unwrap();
    assert!(before, "{how:?}: the other units were unfinished");
    assert!(!after, "{how:?}: every unit ended in this transaction");
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_knows_of_other_unfinished_units_until_they_are_decided() {
    ends_the_others(Ends::Decided).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_knows_of_other_unfinished_units_until_they_are_cancelled() {
    ends_the_others(Ends::Cancelled).await;
    ends_the_others(Ends::AllCancelled).await;
}

/// The accepted totals a report read are the base of every addition the same
/// transaction makes, and each addition the base of the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_totals_read_with_a_report_add_up_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 1).await;
    let (job, lease, _) = leased_job(&c).await;
    let before = c
        .fleet
        .store()
        .read(move |tx| Ok::<_, FleetError>(tx.job(job)?.expect("job").accepted))
        .await
        .unwrap();
    c.fleet
        .store()
        .write(move |tx| {
            tx.report_view(lease, &AccountId::operator(), (0, 0))?
                .expect("the lease is stored");
            tx.add_accepted(job, &[1, 2, 3], 1)?;
            tx.add_accepted(job, &[0, 10, 0, 7], 2)?;
            tx.subtract_accepted(job, &[1, 0, 0, 0], 0)?;
            tx.add_accepted(job, &[5], 0)?;
            Ok::<_, StoreError>(())
        })
        .await
        .unwrap();
    let (after, solutions) = c
        .fleet
        .store()
        .read(move |tx| {
            let j = tx.job(job)?.expect("job");
            Ok::<_, FleetError>((j.accepted, j.accepted_solutions))
        })
        .await
        .unwrap();
    let mut expected = before.clone();
    expected.resize(expected.len().max(4), 0);
    for (d, n) in [(0, 5), (1, 12), (2, 3), (3, 7)] {
        expected[d] += n;
    }
    assert_eq!(after, expected);
    assert_eq!(solutions, 3);
    c.stop().await;
}

/// The kept boards a report counts with its reads are the ones the decision would count
/// with a query of its own, at every depth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_boards_read_with_a_report_are_those_a_decision_counts() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&temp_db(&dir), 1).await;
    let (job, lease, _) = leased_job(&c).await;
    let mut w = SimWorker::register(&c.url, "other", Behaviour::Honest).await;
    w.work(1_000).await;
    let counted = c
        .fleet
        .store()
        .write(move |tx| {
            let mut counted = Vec::new();
            for depth in 0..=25 {
                for limit in [0, 1, 3, 10] {
                    let view = tx
                        .report_view(lease, &AccountId::operator(), (depth, limit))?
                        .expect("the lease is stored");
                    let queried = tx.boards_kept_at_least(job, depth, ResultId(0), limit)?;
                    counted.push((depth, limit, view.kept_boards, queried));
                }
            }
            Ok::<_, StoreError>(counted)
        })
        .await
        .unwrap();
    for (depth, limit, viewed, queried) in &counted {
        assert_eq!(viewed, queried, "depth {depth}, limit {limit}");
    }
    assert!(
        counted.iter().any(|(_, _, n, _)| *n > 1),
        "some boards are kept: {counted:?}"
    );
    c.stop().await;
}
