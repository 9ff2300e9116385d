//! Accounts (`migrations/sqlite/0005_accounts_and_trust.sql`): who enrolment tokens belong to,
//! and the trust and credit their results earned.

use e2fleet_proto::api::{AccountId, TeamId};

use super::{ConnExt, Row, SqlTx, args};
use crate::store::tx::{Accounts, StoreResult};
use crate::store::{AccountRecord, CreditDay};

/// The columns [`from_row`] reads, in order (`a.` prefixed).
pub(super) const COLUMNS: &str = "a.id, a.kind, a.created_ms, a.revoked_ms, a.confirmed_streak, \
     a.confirmed_results, a.confirmed_nodes, a.errors, a.quarantined, a.credit_results, \
     a.credit_nodes, a.team";

/// Reads a row of [`COLUMNS`], then the worker count if `with_workers`.
fn from_row(r: &Row, with_workers: bool) -> StoreResult<AccountRecord> {
    from_row_at(r, 0, with_workers)
}

/// Reads the columns of [`COLUMNS`] starting at column `at`, then the worker count if
/// `with_workers`.
pub(super) fn from_row_at(r: &Row, at: usize, with_workers: bool) -> StoreResult<AccountRecord> {
    Ok(AccountRecord {
        id: r.parsed(at)?,
        kind: r.parsed(at + 1)?,
        created_ms: r.get(at + 2)?,
        revoked_ms: r.get(at + 3)?,
        confirmed_streak: r.get::<i64>(at + 4)? as u64,
        confirmed_results: r.get::<i64>(at + 5)? as u64,
        confirmed_nodes: r.get::<i64>(at + 6)? as u64,
        errors: r.get::<i64>(at + 7)? as u64,
        quarantined: r.get(at + 8)?,
        credit_results: r.get::<i64>(at + 9)? as u64,
        credit_nodes: r.get::<i64>(at + 10)? as u64,
        team: match r.get::<Option<String>>(at + 11)? {
            Some(_) => Some(r.parsed(at + 11)?),
            None => None,
        },
        workers: if with_workers {
            r.get::<i64>(at + 12)? as u64
        } else {
            0
        },
    })
}

impl Accounts for SqlTx<'_> {
    fn insert_account(&mut self, a: &AccountRecord, token_hash: &str) -> StoreResult<()> {
        self.c.execute(
            "INSERT INTO accounts (id, kind, token_hash, created_ms, team) VALUES (?, ?, ?, ?, ?)",
            args![
                a.id.as_str(),
                a.kind.as_str(),
                token_hash,
                a.created_ms,
                a.team.as_ref().map(|t| t.as_str().to_string())
            ],
        )?;
        Ok(())
    }

    fn set_account_team(
        &mut self,
        id: &AccountId,
        team: Option<&TeamId>,
    ) -> StoreResult<Option<u64>> {
        let name = team.map(|t| t.as_str().to_string());
        if self.c.execute(
            "UPDATE accounts SET team = ? WHERE id = ? AND kind = 'volunteer'",
            args![name.clone(), id.as_str()],
        )? != 1
        {
            return Ok(None);
        }
        let Some(name) = name else {
            return Ok(Some(0));
        };
        let n: i64 = self
            .c
            .one("SELECT COUNT(*) FROM accounts WHERE team = ?", args![name])?;
        Ok(Some(n as u64))
    }

    fn account(&mut self, id: &AccountId) -> StoreResult<Option<AccountRecord>> {
        self.c.map_row(
            &format!("SELECT {COLUMNS} FROM accounts a WHERE a.id = ?"),
            args![id.as_str()],
            |r| from_row(r, false),
        )
    }

    fn account_by_token_hash(&mut self, hash: &str) -> StoreResult<Option<AccountRecord>> {
        self.c.map_row(
            &format!("SELECT {COLUMNS} FROM accounts a WHERE a.token_hash = ?"),
            args![hash],
            |r| from_row(r, false),
        )
    }

    fn list_accounts(&mut self) -> StoreResult<Vec<AccountRecord>> {
        let rows = self.c.map(
            &format!(
                "SELECT {COLUMNS}, (SELECT COUNT(*) FROM workers w WHERE w.account_id = a.id) \
             FROM accounts a ORDER BY a.kind DESC, a.id"
            ),
            &[],
            |r| from_row(r, true),
        )?;
        Ok(rows)
    }

    fn revoke_account(&mut self, id: &AccountId, now_ms: i64) -> StoreResult<bool> {
        Ok(self
            .c
            .execute("UPDATE accounts SET revoked_ms = ? WHERE id = ? AND revoked_ms IS NULL AND kind = 'volunteer'", args![now_ms, id.as_str()])?
            == 1)
    }

    fn release_account(&mut self, id: &AccountId) -> StoreResult<bool> {
        Ok(self.c.execute(
            "UPDATE accounts SET quarantined = 0, errors = 0 WHERE id = ? AND quarantined = 1",
            args![id.as_str()],
        )? == 1)
    }

    fn account_confirmed(&mut self, id: &AccountId, nodes: u64) -> StoreResult<()> {
        self.c
            .execute_deferred("UPDATE accounts SET confirmed_streak = confirmed_streak + 1, \
                   confirmed_results = confirmed_results + 1, confirmed_nodes = confirmed_nodes + ? \
                 WHERE id = ?", args![nodes as i64, id.as_str()])?;
        Ok(())
    }

    fn credit_days(&mut self, since_day: i64) -> StoreResult<Vec<CreditDay>> {
        let rows = self.c.map("SELECT account_id, day, nodes, results FROM account_days WHERE day >= ? ORDER BY account_id, day", args![since_day], |r| {
            Ok(CreditDay {
                account: r.parsed(0)?,
                day: r.get(1)?,
                nodes: r.get::<i64>(2)? as u64,
                results: r.get::<i64>(3)? as u64,
            })
        })?;
        Ok(rows)
    }

    fn credit_spans(&mut self) -> StoreResult<Vec<(AccountId, i64, i64)>> {
        let rows = self.c.map(
            "SELECT account_id, MIN(day), MAX(day) FROM account_days GROUP BY account_id",
            &[],
            |r| Ok((r.parsed(0)?, r.get(1)?, r.get(2)?)),
        )?;
        Ok(rows)
    }

    fn account_error(&mut self, id: &AccountId, threshold: u64) -> StoreResult<bool> {
        // the operator's own account is never quarantined as a whole (its identities are)
        let before: Option<bool> = self.c.map_row(
            "SELECT quarantined FROM accounts WHERE id = ?",
            args![id.as_str()],
            |r| r.get(0),
        )?;
        let after: Option<bool> = self.c.map_row(
            "UPDATE accounts SET errors = errors + 1, confirmed_streak = 0, \
                   quarantined = CASE WHEN quarantined = 1 OR (kind = 'volunteer' AND errors + 1 >= ?) THEN 1 ELSE 0 END \
                 WHERE id = ? RETURNING quarantined",
            args![threshold as i64, id.as_str()],
            |r| r.get(0),
        )?;
        Ok(before == Some(false) && after == Some(true))
    }

    fn live_parties(&mut self, since_ms: i64) -> StoreResult<u32> {
        let n: i64 = self
            .c
            .one("SELECT (SELECT COUNT(*) FROM accounts a WHERE a.kind = 'volunteer' AND a.revoked_ms IS NULL \
                           AND a.quarantined = 0 AND EXISTS (SELECT 1 FROM workers w WHERE w.account_id = a.id \
                             AND w.last_seen_ms >= ?1 AND w.quarantined = 0)) \
                      + (SELECT COUNT(*) FROM workers w WHERE w.account_id = 'operator' \
                           AND w.last_seen_ms >= ?1 AND w.quarantined = 0)", args![since_ms])?;
        Ok(n as u32)
    }

    fn live_workers(&mut self, since_ms: i64) -> StoreResult<u32> {
        let n: i64 = self
            .c
            .one("SELECT COUNT(*) FROM workers w JOIN accounts a ON a.id = w.account_id \
                 WHERE w.last_seen_ms >= ? AND w.quarantined = 0 AND a.quarantined = 0 AND a.revoked_ms IS NULL", args![since_ms])?;
        Ok(n as u32)
    }
}
