//! Deciding a unit from its valid results: accept when a quorum of identical results
//! (equal digests) exists, confirm replicas, overturn an accepted result a larger quorum
//! contradicts (revoking everything created from it), or ask for a deciding run.

use e2fleet_engine::{Unit, UnitResult};
use e2fleet_proto::api::{ReportOutcome, ReportStatus, ResultVerdict};
use tracing::warn;

use super::policy::quorum_for;
use super::{Fleet, FleetError};
use crate::store::{JobHead, NewUnit, ResultRecord, Tx, UnitKind, UnitRecord};

impl Fleet {
    /// Looks at all valid results of a unit and accepts, confirms, overturns or asks for
    /// a deciding run. `mine` is the result just recorded, `result` its body.
    pub(super) fn decide(
        &self,
        tx: &mut dyn Tx,
        (job, unit): (&JobHead, &UnitRecord),
        (mine, result): (&ResultRecord, &UnitResult),
        now: i64,
    ) -> Result<ReportOutcome, FleetError> {
        // `unit` was read before this report's counters changed: its quorum, accepted
        // result and path are what decide uses, and those are still current
        let valid = tx.valid_results_of_unit(unit.id)?;
        let mut groups: Vec<(&str, Vec<&ResultRecord>)> = Vec::new();
        for r in &valid {
            match groups.iter_mut().find(|(d, _)| *d == r.digest) {
                Some((_, g)) => g.push(r),
                None => groups.push((&r.digest, vec![r])),
            }
        }
        let disputed = groups.len() > 1;
        let quorum = if disputed {
            unit.quorum.max(2)
        } else {
            unit.quorum
        };
        // the largest group wins; on a tie, the one whose first result came first
        let (best_digest, best) = groups
            .iter()
            .max_by(|a, b| a.1.len().cmp(&b.1.len()).then(b.1[0].id.cmp(&a.1[0].id)))
            .map(|(d, g)| (d.to_string(), g.clone()))
            .expect("the new result is valid");
        let current = match unit.accepted_result {
            Some(id) => tx.result(id)?,
            None => None,
        };
        if (best.len() as u32) < quorum {
            tx.request_deciding_run(unit.id, quorum)?;
            return Ok(ReportOutcome {
                status: if disputed {
                    ReportStatus::Mismatch
                } else {
                    ReportStatus::PendingCheck
                },
                detail: format!("{} of {quorum} agreeing results", best.len()),
            });
        }
        // a quorum exists: losers are wrong
        for (digest, group) in &groups {
            if *digest == best_digest {
                continue;
            }
            for r in group {
                tx.set_result_verdict(r.id, ResultVerdict::Wrong)?;
                if tx.worker_error(r.worker_id, self.config.quarantine_after)? {
                    warn!(worker_id = %r.worker_id, hostname = %r.hostname, "host quarantined after wrong results");
                }
            }
        }
        let winner = best[0];
        let accepted_id = match &current {
            Some(c) if c.digest == best_digest => c.id,
            other => {
                if let Some(old) = other {
                    warn!(unit_id = %unit.id, "accepted result overturned by a quorum");
                    self.revoke(tx, unit, old)?;
                }
                // the new result is in hand: no need to read it back
                let read;
                let winner_result = if winner.id == mine.id {
                    result
                } else {
                    read = tx.result_body(winner.id)?.expect("winner is stored");
                    &read
                };
                self.accept(tx, (job, unit), (winner, winner_result), now)?;
                winner.id
            }
        };
        for r in &best {
            if r.id != accepted_id {
                tx.set_result_verdict(r.id, ResultVerdict::Agree)?;
            }
        }
        tx.mark_unit_done(unit.id, accepted_id)?;
        let status = if mine.digest != best_digest {
            ReportStatus::Wrong
        } else if mine.id == accepted_id {
            ReportStatus::Accepted
        } else {
            ReportStatus::Replica
        };
        Ok(ReportOutcome {
            status,
            detail: format!("{} agreeing of quorum {quorum}", best.len()),
        })
    }

    /// Adds a winning result to the job's totals; a budget stop becomes a continuation.
    fn accept(
        &self,
        tx: &mut dyn Tx,
        (job, unit): (&JobHead, &UnitRecord),
        (r, result): (&ResultRecord, &UnitResult),
        now: i64,
    ) -> Result<(), FleetError> {
        tx.add_accepted(job.id, &result.nodes_by_depth, result.solutions_count)?;
        tx.set_result_verdict(r.id, ResultVerdict::Accepted)?;
        tx.worker_unit_done(r.worker_id)?;
        if let Some(cursor) = &result.cursor {
            let quorum = quorum_for(
                job.id,
                unit.id.0 as u64 ^ 0x5bd1_e995,
                job.replicas,
                job.spot_check,
            );
            let child = NewUnit {
                unit: Unit {
                    prefix: unit.unit.prefix.clone(),
                    cursor: cursor.clone(),
                },
                parent: Some(unit.id),
                kind: UnitKind::Continuation,
                quorum,
            };
            tx.insert_units(job.id, &[child], now)?;
        }
        Ok(())
    }

    /// Takes an accepted result back out of the totals, with everything created from it.
    fn revoke(
        &self,
        tx: &mut dyn Tx,
        unit: &UnitRecord,
        r: &ResultRecord,
    ) -> Result<(), FleetError> {
        let result = tx.result_body(r.id)?.expect("accepted result is stored");
        tx.subtract_accepted(unit.job_id, &result.nodes_by_depth, result.solutions_count)?;
        tx.set_result_verdict(r.id, ResultVerdict::Wrong)?;
        let _ = tx.worker_error(r.worker_id, self.config.quarantine_after)?;
        let mut stack: Vec<UnitRecord> = tx
            .unit_children(unit.id)?
            .into_iter()
            .filter(|c| c.kind == UnitKind::Continuation)
            .collect();
        while let Some(child) = stack.pop() {
            if child.kind == UnitKind::Split {
                tx.add_split_nodes(child.job_id, child.unit.prefix.len() - 1, -1)?;
            }
            if let Some(id) = child.accepted_result
                && let Some(accepted) = tx.result_body(id)?
            {
                tx.subtract_accepted(
                    child.job_id,
                    &accepted.nodes_by_depth,
                    accepted.solutions_count,
                )?;
                tx.set_result_verdict(id, ResultVerdict::Wrong)?;
            }
            tx.cancel_unit(child.id)?;
            stack.extend(tx.unit_children(child.id)?);
        }
        Ok(())
    }
}
