//! Deciding a unit from its valid results: accept when enough independent results agree
//! (equal digests), confirm replicas, overturn an accepted result a stronger group
//! contradicts (revoking everything created from it), or ask for one more run.
//!
//! # Independence
//! Results are grouped by *party*: a volunteer account is one party however many worker
//! identities it registers; the operator vouches for its own machines, so each operator
//! identity is a party of its own (a single-owner fleet cross-checks across its machines
//! with no flags). A group of agreeing results is accepted when it has
//! - at least `quorum` worker identities, and
//! - at least `min(quorum, live parties)` parties — "R different accounts where the fleet
//!   has them, else R different identities" — and at least 2 parties when none of its
//!   results is *trusted* (an untrusted volunteer result never counts alone, whatever
//!   the fleet looks like).
//!
//! A dispute between the operator's machines and volunteers alone is decided for the
//! operator at once: the operator vouches for its machines (and checks them against each
//! other and the verification suite), so a volunteer that lies costs its account an error
//! now, instead of the unit waiting for a third party that may never come online.
//!
//! Losers are wrong: each loser's identity and account collect an error; an account
//! quarantined by them loses every result no other party confirmed ([`Fleet::void_account`]).
//! Volunteer results confirmed by another party earn their account trust; every volunteer
//! result that counts (accepted, on trust or confirmed, or agreeing with the accepted one)
//! earns its account credit, given back if the result is later found wrong or voided.
//!
//! # History recheck
//! A loser's past is suspect too (a liar, or a machine that computes wrong): every result
//! it got accepted on its word alone — a volunteer account's results no other account
//! confirmed, an operator machine's results no other machine confirmed — is run again by
//! another party ([`Fleet::recheck_history`]); those results keep counting until a run
//! disagrees, and then the usual deciding run overturns them. So a trusted account's
//! forged results survive only if *none* of them is ever drawn for a recheck: `(1 - r)^k`
//! for `k` forgeries at recheck rate `r` (`docs/security.md`).

use std::collections::BTreeSet;

use e2fleet_proto::api::WorkerId;

use e2fleet_engine::{Unit, UnitResult};
use e2fleet_proto::api::{AccountId, ReportOutcome, ReportStatus, ResultVerdict};
use tracing::warn;

use super::policy::BEST_BOARDS;
use super::policy::quorum_for;
use super::{Fleet, FleetError};
use crate::store::{
    AccountNeed, JobHead, MoreRuns, NewResult, NewUnit, ResultId, ResultRecord, Standing, Tx,
    UnitKind, UnitRecord, UnitState,
};

/// Whose history a lost cross-check puts in doubt.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Suspect {
    /// A volunteer account: its results no other account confirmed.
    Account(AccountId),
    /// One of the operator's machines: its results no other machine confirmed.
    Worker(WorkerId),
}

/// Who a result speaks for (see the module docs).
fn party(r: &ResultRecord) -> String {
    if r.account_id.is_operator() {
        format!("operator/{}", r.worker_id)
    } else {
        format!("account/{}", r.account_id)
    }
}

/// A group of agreeing results.
struct Group<'r> {
    digest: &'r str,
    results: Vec<&'r ResultRecord>,
}

impl Group<'_> {
    fn parties(&self) -> usize {
        self.results
            .iter()
            .map(|r| party(r))
            .collect::<BTreeSet<_>>()
            .len()
    }

    fn identities(&self) -> usize {
        self.results
            .iter()
            .map(|r| r.worker_id)
            .collect::<BTreeSet<_>>()
            .len()
    }

    fn trusted(&self) -> bool {
        self.results.iter().any(|r| r.standing == Standing::Trusted)
    }

    /// Whether one of its results is from one of the operator's machines.
    fn has_operator(&self) -> bool {
        self.results.iter().any(|r| r.account_id.is_operator())
    }

    /// Parties it needs to be accepted at `quorum` when `live` parties are about.
    fn parties_needed(&self, quorum: u32, live: u32) -> usize {
        let wanted = quorum.min(live.max(1)) as usize;
        if self.trusted() {
            wanted
        } else {
            wanted.max(2)
        }
    }
}

/// The valid results of a unit grouped by digest, in order of arrival.
fn group_by_digest(valid: &[ResultRecord]) -> Vec<Group<'_>> {
    let mut groups: Vec<Group<'_>> = Vec::new();
    for r in valid {
        match groups.iter_mut().find(|g| g.digest == r.digest) {
            Some(g) => g.results.push(r),
            None => groups.push(Group {
                digest: &r.digest,
                results: vec![r],
            }),
        }
    }
    groups
}

/// The group a quorum would accept, and the quorum it needs: the strongest group (most
/// parties, then most identities, then the first to arrive) at the unit's quorum, raised
/// to 2 in a dispute; but a dispute between the operator's word and volunteers' alone is
/// decided for the operator at once (the volunteers' results are wrong and cost their
/// accounts now, instead of the unit waiting for a third party that may not be online).
/// Between volunteers, or among the operator's machines, a deciding run is still needed.
fn strongest_group<'g, 'r>(groups: &'g [Group<'r>], stored_quorum: u32) -> (&'g Group<'r>, u32) {
    let disputed = groups.len() > 1;
    let quorum = if disputed {
        stored_quorum.max(2)
    } else {
        stored_quorum
    };
    let best = groups
        .iter()
        .max_by(|a, b| {
            (a.parties(), a.identities())
                .cmp(&(b.parties(), b.identities()))
                .then(b.results[0].id.cmp(&a.results[0].id))
        })
        .expect("a unit with a valid result has a group");
    let operator_side = disputed
        .then(|| {
            let vouched: Vec<&Group<'_>> = groups.iter().filter(|g| g.has_operator()).collect();
            // (two volunteer accounts agreeing against it are two parties: the usual
            // rule, most parties, decides then)
            let others_alone = groups
                .iter()
                .filter(|g| !g.has_operator())
                .all(|g| g.parties() <= 1);
            (vouched.len() == 1 && others_alone).then(|| vouched[0])
        })
        .flatten();
    match operator_side {
        Some(g) => (g, stored_quorum),
        None => (best, quorum),
    }
}

/// Bounded storage: a decided unit's results keep only their cores; the accepted one
/// keeps its body while it carries solutions or one of the job's best boards. `kept`: the
/// job's other kept boards at the accepted one's depth or deeper (up to [`BEST_BOARDS`]),
/// when already known.
fn fold_decided(
    tx: &mut dyn Tx,
    job: &JobHead,
    unit: &UnitRecord,
    accepted: &ResultRecord,
    kept: Option<usize>,
) -> Result<(), FleetError> {
    let keep = keeps_body(tx, job, accepted, kept)?;
    tx.fold_results(unit.id, keep.then_some(accepted.id))?;
    if keep {
        tx.fold_surplus_boards(job.id, BEST_BOARDS)?;
    }
    Ok(())
}

/// Whether an accepted result keeps its body: it carries solutions, or a board among
/// the job's [`BEST_BOARDS`] deepest (`kept`: the job's other kept boards at its depth or
/// deeper, when already known).
fn keeps_body(
    tx: &mut dyn Tx,
    job: &JobHead,
    accepted: &ResultRecord,
    kept: Option<usize>,
) -> Result<bool, FleetError> {
    Ok(accepted.solutions > 0
        || (accepted.max_depth > 0
            && match kept {
                Some(n) => n,
                None => {
                    tx.boards_kept_at_least(job.id, accepted.max_depth, accepted.id, BEST_BOARDS)?
                }
            } < BEST_BOARDS))
}

/// Whether [`Fleet::decide`] would accept a unit's first valid result on its own, with
/// nothing else to decide: a trusted result, on a unit whose quorum is one (not raised
/// for a recheck) and which has no accepted result. Then it is
/// [`Fleet::accept_alone`]'s.
pub(super) fn decides_alone(unit: &UnitRecord, mine: &ResultRecord, recheck: bool) -> bool {
    let stored_quorum = if recheck && !mine.account_id.is_operator() {
        unit.quorum.max(2)
    } else {
        unit.quorum
    };
    stored_quorum <= 1 && mine.standing == Standing::Trusted && unit.accepted_result.is_none()
}

/// A volunteer result that counts earns its account credit, once per account and unit
/// (the accepted one first), on a trusted account's word alone too; it goes again if the
/// result is found wrong or voided (`Tx::set_result_verdict`). Volunteer results another
/// party agreed with earn their account trust.
fn credit_and_trust(
    tx: &mut dyn Tx,
    agreeing: &[&ResultRecord],
    accepted_id: ResultId,
    parties: usize,
    now: i64,
) -> Result<(), FleetError> {
    let accepted_first = agreeing.iter().filter(|r| r.id == accepted_id);
    let others = agreeing.iter().filter(|r| r.id != accepted_id);
    for r in accepted_first.chain(others) {
        if !r.account_id.is_operator() {
            tx.credit_result(r.id, now)?;
        }
    }
    if parties >= 2 {
        let mut confirmed = BTreeSet::new();
        for r in agreeing.iter().filter(|r| !r.account_id.is_operator()) {
            if confirmed.insert(r.account_id.clone()) {
                tx.account_confirmed(&r.account_id, r.committed)?;
            }
        }
    }
    Ok(())
}

impl Fleet {
    /// Looks at all valid results of a unit and accepts, confirms, overturns or asks for
    /// one more run. `mine` is the result just recorded with its body and the job's kept
    /// boards at its depth as its report read them (`None` when a unit is decided again
    /// because some of its results were voided; its id is found here, by its lease, among
    /// the unit's results); `live` the parties with
    /// a live worker; `recheck`: a trusted volunteer result drawn for a recheck by another
    /// account.
    pub(super) fn decide(
        &self,
        tx: &mut dyn Tx,
        (job, unit): (&JobHead, &UnitRecord),
        mine: Option<(&ResultRecord, &UnitResult, usize)>,
        (live, recheck): (u32, bool),
        now: i64,
    ) -> Result<ReportOutcome, FleetError> {
        // `unit` was read before this report's counters changed: its quorum, accepted
        // result and path are what decide uses, and those are still current
        let valid = tx.valid_results_of_unit(unit.id)?;
        let stored;
        let kept_at_report = mine.map(|(_, _, kept)| kept);
        let mine = match mine {
            Some((m, result, _)) => {
                let Some(id) = valid
                    .iter()
                    .find(|v| v.lease_id == m.lease_id)
                    .map(|v| v.id)
                else {
                    return Err(FleetError::Store(crate::store::StoreError::Corrupt(
                        format!(
                            "the result just recorded on lease {} is not among its unit's",
                            m.lease_id
                        ),
                    )));
                };
                stored = ResultRecord { id, ..m.clone() };
                Some((&stored, result))
            }
            None => None,
        };
        let groups = group_by_digest(&valid);
        if groups.is_empty() {
            return Ok(ReportOutcome {
                status: ReportStatus::PendingCheck,
                detail: "no valid result".into(),
            });
        }
        let disputed = groups.len() > 1;
        // a trusted volunteer's result drawn for a recheck: another account runs it too
        // (kept with the unit; a dispute's quorum of 2 is not: it lasts as long as the
        // disagreement does)
        let stored_quorum = match mine {
            Some((m, _)) if recheck && valid.len() == 1 && !m.account_id.is_operator() => {
                unit.quorum.max(2)
            }
            _ => unit.quorum,
        };
        let (best, quorum) = strongest_group(&groups, stored_quorum);
        let (parties, needed) = (best.parties(), best.parties_needed(quorum, live));
        if best.identities() < quorum as usize || parties < needed {
            return self.ask_for_another_run(
                tx,
                unit,
                best,
                (quorum, stored_quorum),
                (parties, needed),
                disputed,
            );
        }
        let current = match unit.accepted_result {
            Some(id) => tx.result(id)?,
            None => None,
        };
        let best_digest = best.digest.to_string();
        let best_results: Vec<&ResultRecord> = best.results.clone();
        // a quorum exists: losers are wrong
        let losers = groups.iter().filter(|g| g.digest != best_digest);
        let (quarantined_accounts, suspects) = self.mark_losers(tx, losers)?;
        let winner = best_results[0];
        let accepted_id = match &current {
            Some(c) if c.digest == best_digest => c.id,
            other => {
                if let Some(old) = other {
                    warn!(unit_id = %unit.id, "accepted result overturned by a quorum");
                    self.revoke(tx, unit, old, ResultVerdict::Wrong)?;
                }
                // the new result is in hand: no need to read it back
                let read;
                let winner_result = match mine {
                    Some((m, result)) if m.id == winner.id => result,
                    _ => {
                        read = tx.result_body(winner.id)?.expect("winner is stored");
                        &read
                    }
                };
                tx.set_result_verdict(winner.id, ResultVerdict::Accepted)?;
                self.add_to_totals(tx, (job, unit), (winner, winner_result), now)?;
                winner.id
            }
        };
        for r in &best_results {
            if r.id != accepted_id {
                tx.set_result_verdict(r.id, ResultVerdict::Agree)?;
            }
        }
        tx.mark_unit_done(unit.id, accepted_id, now)?;
        let accepted = match &current {
            Some(c) if c.id == accepted_id => c,
            _ => winner,
        };
        // a first acceptance of this unit, of the result just reported, with no loser:
        // nothing changed the job's kept boards since the report counted them (this
        // result was not stored then, and is not counted now)
        let kept_known = match (kept_at_report, &current, mine) {
            (Some(kept), None, Some((m, _))) if groups.len() == 1 && m.id == accepted_id => {
                Some(kept)
            }
            _ => None,
        };
        fold_decided(tx, job, unit, accepted, kept_known)?;
        credit_and_trust(tx, &best_results, accepted_id, parties, now)?;
        for account in &quarantined_accounts {
            self.void_account(tx, account)?;
        }
        if self.config.trust.recheck_history {
            for suspect in suspects {
                if matches!(&suspect, Suspect::Account(a) if quarantined_accounts.contains(a)) {
                    continue; // voided above: nothing of it counts any more
                }
                self.recheck_history(tx, &suspect)?;
            }
        }
        let status = match mine {
            Some((m, _)) if m.digest != best_digest => ReportStatus::Wrong,
            Some((m, _)) if m.id != accepted_id => ReportStatus::Replica,
            _ => ReportStatus::Accepted,
        };
        Ok(ReportOutcome {
            status,
            detail: format!(
                "{} agreeing of quorum {quorum}, {parties} independent parties",
                best_results.len()
            ),
        })
    }

    /// No group has its quorum yet: asks for one more run (from another account when the
    /// group lacks parties) and says what the unit waits for.
    fn ask_for_another_run(
        &self,
        tx: &mut dyn Tx,
        unit: &UnitRecord,
        best: &Group<'_>,
        (quorum, stored_quorum): (u32, u32),
        (parties, needed): (usize, usize),
        disputed: bool,
    ) -> Result<ReportOutcome, FleetError> {
        let account_need = if parties >= needed {
            AccountNeed::None
        } else if best.trusted() {
            AccountNeed::Preferred
        } else {
            AccountNeed::Required
        };
        tx.request_run(
            unit.id,
            &MoreRuns {
                quorum: stored_quorum,
                account_need,
                disputed,
            },
        )?;
        let waiting = match account_need {
            AccountNeed::Required => "; the next run must come from another account",
            AccountNeed::Preferred => "; the next run from another account where there is one",
            AccountNeed::None => "",
        };
        Ok(ReportOutcome {
            status: if disputed {
                ReportStatus::Mismatch
            } else {
                ReportStatus::PendingCheck
            },
            detail: format!(
                "{} agreeing of {quorum} ({parties} of {needed} independent parties){waiting}",
                best.identities()
            ),
        })
    }

    /// Marks every result of the losing groups wrong: each loser's identity and account
    /// collect an error. Returns the accounts those errors quarantined and whose history
    /// is now suspect.
    fn mark_losers<'r>(
        &self,
        tx: &mut dyn Tx,
        losers: impl Iterator<Item = &'r Group<'r>>,
    ) -> Result<(Vec<AccountId>, BTreeSet<Suspect>), FleetError> {
        let mut quarantined_accounts: Vec<AccountId> = Vec::new();
        let mut suspects: BTreeSet<Suspect> = BTreeSet::new();
        for group in losers {
            for r in &group.results {
                tx.set_result_verdict(r.id, ResultVerdict::Wrong)?;
                if tx.worker_error(r.worker_id, self.config.quarantine_after)? {
                    warn!(worker_id = %r.worker_id, account = %r.account_id, "worker quarantined after wrong results");
                }
                if tx.account_error(&r.account_id, self.config.trust.account_quarantine_after)? {
                    warn!(account = %r.account_id, "account quarantined after wrong results of its workers");
                    quarantined_accounts.push(r.account_id.clone());
                }
                suspects.insert(if r.account_id.is_operator() {
                    Suspect::Worker(r.worker_id)
                } else {
                    Suspect::Account(r.account_id.clone())
                });
            }
        }
        Ok((quarantined_accounts, suspects))
    }

    /// Asks another party to run again every unit `suspect` got accepted on its word
    /// alone (see the module docs); the results keep counting meanwhile. Returns how many.
    pub(crate) fn recheck_history(
        &self,
        tx: &mut dyn Tx,
        suspect: &Suspect,
    ) -> Result<usize, FleetError> {
        let (results, account_need) = match suspect {
            Suspect::Account(a) => (
                tx.unconfirmed_accepted_of_account(a)?,
                AccountNeed::Required,
            ),
            Suspect::Worker(w) => (tx.unconfirmed_accepted_of_worker(*w)?, AccountNeed::None),
        };
        let mut asked = 0;
        for r in &results {
            let Some(unit) = tx.unit(r.unit_id)? else {
                continue;
            };
            if unit.state != UnitState::Done || unit.accepted_result != Some(r.id) {
                continue;
            }
            tx.request_run(
                unit.id,
                &MoreRuns {
                    quorum: unit.quorum.max(2),
                    account_need,
                    disputed: false,
                },
            )?;
            if tx.reopen_job(unit.job_id)? {
                warn!(job_id = %unit.job_id, ?suspect, "a completed job re-opened to recheck results of a party that lost a cross-check");
            }
            asked += 1;
        }
        if asked > 0 {
            warn!(
                ?suspect,
                units = asked,
                "lost a cross-check: its unconfirmed results are run again by another party"
            );
        }
        Ok(asked)
    }

    /// The result just reported, the first valid one of its unit, accepted on its own
    /// (the case [`decides_alone`] tells): what [`Fleet::decide`] writes then, with the
    /// result written once in its final form (accepted, its body only if it keeps it)
    /// instead of inserted pending, read back with its unit's results, marked accepted
    /// and folded. On the common path of a trusted fleet this is every report.
    pub(super) fn accept_alone(
        &self,
        tx: &mut dyn Tx,
        (job, unit, lease_was_active): (&JobHead, &UnitRecord, bool),
        (mut new, result, kept): (NewResult, &UnitResult, usize),
        now: i64,
    ) -> Result<ReportOutcome, FleetError> {
        new.record.verdict = ResultVerdict::Accepted;
        let keep = keeps_body(tx, job, &new.record, Some(kept))?;
        // (a new result always has its folded counts, so its body goes exactly when
        // `Tx::fold_results` would fold it)
        tx.insert_decided_result(&new, keep)?;
        let lease = new.record.lease_id;
        tx.unit_decided_by_lease(unit.id, lease, lease_was_active, now)?;
        self.add_to_totals(tx, (job, unit), (&new.record, result), now)?;
        if keep {
            tx.fold_surplus_boards(job.id, BEST_BOARDS)?;
        }
        if !new.record.account_id.is_operator() {
            // (credit is an account's: only a volunteer's result needs its id read)
            let mine = ResultRecord {
                id: tx.result_id_by_lease(lease)?,
                ..new.record
            };
            credit_and_trust(tx, &[&mine], mine.id, 1, now)?;
        }
        Ok(ReportOutcome {
            status: ReportStatus::Accepted,
            detail: format!(
                "1 agreeing of quorum {}, 1 independent parties",
                unit.quorum
            ),
        })
    }

    /// An accepted result's counts added to its job's, its worker's units done, and its
    /// continuation if it stopped at its budget.
    fn add_to_totals(
        &self,
        tx: &mut dyn Tx,
        (job, unit): (&JobHead, &UnitRecord),
        (r, result): (&ResultRecord, &UnitResult),
        now: i64,
    ) -> Result<(), FleetError> {
        tx.add_accepted(job.id, &result.nodes_by_depth, result.solutions_count)?;
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

    /// Takes an accepted result back out of the totals, with everything created from it;
    /// the result gets `verdict` (wrong when a quorum overturned it, void when its account
    /// lost its standing). A wrong one counts against its worker.
    pub(super) fn revoke(
        &self,
        tx: &mut dyn Tx,
        unit: &UnitRecord,
        r: &ResultRecord,
        verdict: ResultVerdict,
    ) -> Result<(), FleetError> {
        let result = tx.result_body(r.id)?.expect("accepted result is stored");
        tx.subtract_accepted(unit.job_id, &result.nodes_by_depth, result.solutions_count)?;
        tx.set_result_verdict(r.id, verdict)?;
        if verdict == ResultVerdict::Wrong {
            let _ = tx.worker_error(r.worker_id, self.config.quarantine_after)?;
        }
        let mut stack: Vec<UnitRecord> = tx
            .unit_children(unit.id)?
            .into_iter()
            .filter(|c| c.kind == UnitKind::Continuation)
            .collect();
        while let Some(child) = stack.pop() {
            if child.state == UnitState::Cancelled {
                continue; // revoked already, with everything below it
            }
            if child.kind == UnitKind::Split {
                tx.add_split_nodes(child.job_id, child.unit.prefix.len() - 1, -1)?;
            }
            // a child's result counts out once: not when it was revoked already (its own
            // account voided before its parent, or a cancelled unit seen again)
            if let Some(id) = child.accepted_result
                && child.state == UnitState::Done
                && tx
                    .result(id)?
                    .is_some_and(|r| r.verdict == ResultVerdict::Accepted)
                && let Some(accepted) = tx.result_body(id)?
            {
                tx.subtract_accepted(
                    child.job_id,
                    &accepted.nodes_by_depth,
                    accepted.solutions_count,
                )?;
                tx.set_result_verdict(id, verdict)?;
            }
            tx.cancel_unit(child.id)?;
            // a cancelled unit counts nothing: its replicas' credit goes too (the accepted
            // result's went with its verdict above)
            for r in tx.valid_results_of_unit(child.id)? {
                tx.withdraw_credit(r.id)?;
            }
            stack.extend(tx.unit_children(child.id)?);
        }
        Ok(())
    }
}
