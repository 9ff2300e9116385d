//! Accounts: an enrolment token belongs to one. The operator's own token is the
//! `operator` account (trusted); volunteer accounts are issued by the operator
//! (`e2fleet-coordinator account add NAME`), listed, put in teams (a label the stats page
//! adds credit up by; it decides nothing), revoked and released here.
//!
//! Revoking or quarantining an account *voids* it: its workers get no more work, and every
//! result of it that no other party confirmed stops counting — pending ones are set
//! aside, accepted ones are taken back out of the totals (with everything created from
//! them) and their units run again by someone else ([`Fleet::void_account`]).

use e2fleet_proto::api::status::AccountStatus;
use std::collections::BTreeMap;
use std::sync::Arc;

use e2fleet_proto::api::{AccountId, AccountKind, ResultVerdict, TeamId, UnitId, WorkerId};
use tracing::{info, warn};

use super::tokens::{random_token, sha256_hex};
use super::{Fleet, FleetError};
use crate::store::{AccountRecord, Tx, UnitState};

/// A team's name as the operator gave it: `None` when empty.
fn team_of(name: &str) -> Result<Option<TeamId>, FleetError> {
    if name.is_empty() {
        return Ok(None);
    }
    name.parse().map(Some).map_err(|_| {
        FleetError::InvalidArgument(format!(
            "team name {name:?}: 1-64 letters, digits, '.', '_' or '-'"
        ))
    })
}

impl Fleet {
    /// Issues a volunteer account, in `team` unless that is empty; returns its enrolment
    /// token (shown once: only its hash is stored).
    pub async fn add_account(
        &self,
        name: &str,
        team: &str,
    ) -> Result<(AccountId, String), FleetError> {
        let team = team_of(team)?;
        let id: AccountId = name.parse().map_err(|_| {
            FleetError::InvalidArgument(format!(
                "account name {name:?}: 1-64 letters, digits, '.', '_' or '-'"
            ))
        })?;
        if id.is_operator() {
            return Err(FleetError::InvalidArgument(
                "\"operator\" is the operator's own account (E2FLEET_ENROLL_TOKEN)".into(),
            ));
        }
        let token = random_token();
        let record = AccountRecord {
            id: id.clone(),
            kind: AccountKind::Volunteer,
            created_ms: self.now(),
            revoked_ms: None,
            confirmed_streak: 0,
            confirmed_results: 0,
            confirmed_nodes: 0,
            credit_results: 0,
            credit_nodes: 0,
            errors: 0,
            quarantined: false,
            workers: 0,
            team,
        };
        let hash = sha256_hex(token.as_bytes());
        let name = id.clone();
        self.store
            .write(move |tx| {
                if tx.account(&name)?.is_some() {
                    return Err(FleetError::FailedPrecondition(format!(
                        "an account named {name} exists"
                    )));
                }
                tx.insert_account(&record, &hash)?;
                Ok(())
            })
            .await?;
        info!(account = %id, "account added");
        Ok((id, token))
    }

    /// Every account, with its trust and credit.
    pub async fn list_accounts(&self) -> Result<Vec<AccountStatus>, FleetError> {
        let accounts = self.store.read(|tx| tx.list_accounts()).await?;
        Ok(accounts
            .into_iter()
            .map(|a| AccountStatus {
                trusted: self.trusted(&a),
                id: a.id,
                kind: a.kind,
                created_ms: a.created_ms,
                revoked_ms: a.revoked_ms,
                confirmed_streak: a.confirmed_streak,
                confirmed_results: a.confirmed_results,
                confirmed_nodes: a.confirmed_nodes,
                credit_results: a.credit_results,
                credit_nodes: a.credit_nodes,
                errors: a.errors,
                quarantined: a.quarantined,
                workers: a.workers,
                team: a.team,
            })
            .collect())
    }

    /// Puts a volunteer account in `team`, or, with `team` empty, in none; returns the
    /// team's accounts after the change (0 for none). A team is there while an account is
    /// in it; the stats page adds its accounts' credit up.
    pub async fn set_account_team(&self, name: &str, team: &str) -> Result<u64, FleetError> {
        let id: AccountId = name
            .parse()
            .map_err(|_| FleetError::NotFound(format!("account {name}")))?;
        let team = team_of(team)?;
        let (account, to) = (id.clone(), team.clone());
        let members = self
            .store
            .write(move |tx| Ok::<_, FleetError>(tx.set_account_team(&account, to.as_ref())?))
            .await?
            .ok_or_else(|| FleetError::NotFound(format!("volunteer account {id}")))?;
        match &team {
            Some(t) => info!(account = %id, team = %t, members, "account joined a team"),
            None => info!(account = %id, "account left its team"),
        }
        Ok(members)
    }

    /// Puts the account of `worker` in `team` (empty: in none), as its volunteer asked
    /// from a worker (`e2fleet-worker team`): the same as the operator's `account team`,
    /// for a volunteer account only, and a few times a minute at most.
    pub async fn set_own_team(
        &self,
        worker: &crate::store::WorkerRecord,
        team: &str,
    ) -> Result<u64, FleetError> {
        let account = &worker.account_id;
        if account.is_operator() {
            return Err(FleetError::FailedPrecondition(
                "the operator's own machines are in no team (only volunteer accounts are ranked)"
                    .into(),
            ));
        }
        if self.team_change_limits.check_key(account).is_err() {
            return Err(FleetError::TooMany(format!(
                "account {account} changes team too often; retry in a minute"
            )));
        }
        self.set_account_team(account.as_str(), team).await
    }

    /// Revokes a volunteer account: its workers get no more work and its results that no
    /// other party confirmed stop counting.
    pub async fn revoke_account(self: &Arc<Self>, name: &str) -> Result<(), FleetError> {
        let id: AccountId = name
            .parse()
            .map_err(|_| FleetError::NotFound(format!("account {name}")))?;
        let now = self.now();
        let account = id.clone();
        let fleet = self.clone();
        self.store
            .write(move |tx| {
                let a = tx
                    .account(&account)?
                    .ok_or_else(|| FleetError::NotFound(format!("account {account}")))?;
                if a.kind == AccountKind::Operator {
                    return Err(FleetError::InvalidArgument(
                        "the operator's account cannot be revoked (change E2FLEET_ENROLL_TOKEN)"
                            .into(),
                    ));
                }
                if !tx.revoke_account(&account, now)? {
                    return Err(FleetError::FailedPrecondition(format!(
                        "account {account} is already revoked"
                    )));
                }
                fleet.void_account(tx, &account)
            })
            .await?;
        self.forget_tokens_of(&id);
        warn!(account = %id, "account revoked");
        Ok(())
    }

    /// Lifts an account's quarantine.
    pub async fn release_account(&self, name: &str) -> Result<(), FleetError> {
        let id: AccountId = name
            .parse()
            .map_err(|_| FleetError::NotFound(format!("account {name}")))?;
        let account = id.clone();
        let released = self
            .store
            .write(move |tx| Ok::<_, FleetError>(tx.release_account(&account)?))
            .await?;
        if !released {
            return Err(FleetError::FailedPrecondition(format!(
                "account {id} is not quarantined"
            )));
        }
        info!(account = %id, "account released");
        Ok(())
    }

    /// Lifts one worker identity's quarantine.
    pub async fn release_worker(&self, id: WorkerId) -> Result<(), FleetError> {
        let released = self
            .store
            .write(move |tx| Ok::<_, FleetError>(tx.release_worker(id)?))
            .await?;
        if !released {
            return Err(FleetError::FailedPrecondition(format!(
                "worker {id} is not quarantined"
            )));
        }
        info!(worker_id = %id, "worker released");
        Ok(())
    }

    /// Lifts the quarantine of the quarantined workers whose host label is `hostname`.
    pub async fn release_host(&self, hostname: &str) -> Result<u64, FleetError> {
        let host = hostname.to_string();
        let n = self
            .store
            .write(move |tx| Ok::<_, FleetError>(tx.release_host(&host)?))
            .await?;
        info!(hostname = ?hostname, released = n, "host released");
        Ok(n)
    }

    fn forget_tokens_of(&self, account: &AccountId) {
        self.tokens.retain(|w| w.account_id != *account);
    }

    /// Sets aside every result of `account` no other party confirmed: pending and
    /// agreeing ones stop counting, accepted ones leave the totals with what was created
    /// from them, and their units are open for someone else's run.
    pub(crate) fn void_account(
        &self,
        tx: &mut dyn Tx,
        account: &AccountId,
    ) -> Result<(), FleetError> {
        // unit -> whether it lost its accepted result
        let mut touched: BTreeMap<UnitId, bool> = BTreeMap::new();
        for r in tx.pending_results_of_account(account)? {
            tx.set_result_verdict(r.id, ResultVerdict::Void)?;
            touched.entry(r.unit_id).or_insert(false);
        }
        for r in tx.unconfirmed_accepted_of_account(account)? {
            let unit = tx.unit(r.unit_id)?.expect("result has a unit");
            if unit.state != UnitState::Done || unit.accepted_result != Some(r.id) {
                // revoked already, with the unit it continues (its parent was the
                // account's too): subtracting it again would count it out twice
                continue;
            }
            self.revoke(tx, &unit, &r, ResultVerdict::Void)?;
            touched.insert(r.unit_id, true);
            if tx.reopen_job(unit.job_id)? {
                warn!(job_id = %unit.job_id, %account, "a completed job lost results of a voided account; re-opened");
            }
        }
        let now = self.now();
        for (unit_id, reopen) in touched {
            tx.recount_unit(unit_id, reopen)?;
            // what is left may decide the unit now (an operator's result a voided
            // account disputed, say)
            let Some(unit) = tx.unit(unit_id)? else {
                continue;
            };
            if reopen || unit.state == UnitState::Done || unit.state == UnitState::Cancelled {
                continue;
            }
            let job = tx.job_head(unit.job_id)?.expect("unit has a job");
            let live = self.live_parties(tx, now)?;
            let outcome = self.decide(tx, (&job, &unit), None, (live, false), now)?;
            if outcome.status.decides_unit() {
                super::finish_if_done(tx, unit.job_id, now)?;
            }
        }
        Ok(())
    }
}
