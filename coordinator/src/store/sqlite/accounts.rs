//! Accounts (`migrations/0005_accounts_and_trust.sql`): who enrolment tokens belong to,
//! and the trust and credit their results earned.

use e2fleet_proto::api::AccountId;
use rusqlite::{OptionalExtension, Row, params};

use super::{SqliteTx, parsed};
use crate::store::tx::{Accounts, StoreResult};
use crate::store::{AccountRecord, CreditDay, DAY_MS};

/// The columns [`from_row`] reads, in order (`a.` prefixed).
const COLUMNS: &str = "a.id, a.kind, a.created_ms, a.revoked_ms, a.confirmed_streak, \
     a.confirmed_results, a.confirmed_nodes, a.errors, a.quarantined";

/// Reads a row of [`COLUMNS`], then the worker count if `with_workers`.
fn from_row(r: &Row<'_>, with_workers: bool) -> rusqlite::Result<AccountRecord> {
    Ok(AccountRecord {
        id: parsed(r, 0)?,
        kind: parsed(r, 1)?,
        created_ms: r.get(2)?,
        revoked_ms: r.get(3)?,
        confirmed_streak: r.get::<_, i64>(4)? as u64,
        confirmed_results: r.get::<_, i64>(5)? as u64,
        confirmed_nodes: r.get::<_, i64>(6)? as u64,
        errors: r.get::<_, i64>(7)? as u64,
        quarantined: r.get(8)?,
        workers: if with_workers {
            r.get::<_, i64>(9)? as u64
        } else {
            0
        },
    })
}

impl Accounts for SqliteTx<'_> {
    fn insert_account(&mut self, a: &AccountRecord, token_hash: &str) -> StoreResult<()> {
        self.c
            .prepare_cached(
                "INSERT INTO accounts (id, kind, token_hash, created_ms) VALUES (?, ?, ?, ?)",
            )?
            .execute(params![
                a.id.as_str(),
                a.kind.as_str(),
                token_hash,
                a.created_ms
            ])?;
        Ok(())
    }

    fn account(&mut self, id: &AccountId) -> StoreResult<Option<AccountRecord>> {
        Ok(self
            .c
            .prepare_cached(&format!("SELECT {COLUMNS} FROM accounts a WHERE a.id = ?"))?
            .query_row([id.as_str()], |r| from_row(r, false))
            .optional()?)
    }

    fn account_by_token_hash(&mut self, hash: &str) -> StoreResult<Option<AccountRecord>> {
        Ok(self
            .c
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM accounts a WHERE a.token_hash = ?"
            ))?
            .query_row([hash], |r| from_row(r, false))
            .optional()?)
    }

    fn list_accounts(&mut self) -> StoreResult<Vec<AccountRecord>> {
        let mut q = self.c.prepare_cached(&format!(
            "SELECT {COLUMNS}, (SELECT COUNT(*) FROM workers w WHERE w.account_id = a.id) \
             FROM accounts a ORDER BY a.kind DESC, a.id"
        ))?;
        let rows = q.query_map([], |r| from_row(r, true))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn revoke_account(&mut self, id: &AccountId, now_ms: i64) -> StoreResult<bool> {
        Ok(self
            .c
            .prepare_cached(
                "UPDATE accounts SET revoked_ms = ? WHERE id = ? AND revoked_ms IS NULL AND kind = 'volunteer'",
            )?
            .execute(params![now_ms, id.as_str()])?
            == 1)
    }

    fn release_account(&mut self, id: &AccountId) -> StoreResult<bool> {
        Ok(self
            .c
            .prepare_cached(
                "UPDATE accounts SET quarantined = 0, errors = 0 WHERE id = ? AND quarantined = 1",
            )?
            .execute([id.as_str()])?
            == 1)
    }

    fn account_confirmed(&mut self, id: &AccountId, nodes: u64, now_ms: i64) -> StoreResult<()> {
        self.c
            .prepare_cached(
                "UPDATE accounts SET confirmed_streak = confirmed_streak + 1, \
                   confirmed_results = confirmed_results + 1, confirmed_nodes = confirmed_nodes + ? \
                 WHERE id = ?",
            )?
            .execute(params![nodes as i64, id.as_str()])?;
        self.c
            .prepare_cached(
                "INSERT INTO account_days (account_id, day, nodes, results) VALUES (?, ?, ?, 1) \
                 ON CONFLICT (account_id, day) DO UPDATE SET nodes = nodes + excluded.nodes, results = results + 1",
            )?
            .execute(params![id.as_str(), now_ms.div_euclid(DAY_MS), nodes as i64])?;
        Ok(())
    }

    fn credit_days(&mut self, since_day: i64) -> StoreResult<Vec<CreditDay>> {
        let mut q = self.c.prepare_cached(
            "SELECT account_id, day, nodes, results FROM account_days WHERE day >= ? ORDER BY account_id, day",
        )?;
        let rows = q.query_map([since_day], |r| {
            Ok(CreditDay {
                account: parsed(r, 0)?,
                day: r.get(1)?,
                nodes: r.get::<_, i64>(2)? as u64,
                results: r.get::<_, i64>(3)? as u64,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn credit_spans(&mut self) -> StoreResult<Vec<(AccountId, i64, i64)>> {
        let mut q = self.c.prepare_cached(
            "SELECT account_id, MIN(day), MAX(day) FROM account_days GROUP BY account_id",
        )?;
        let rows = q.query_map([], |r| Ok((parsed(r, 0)?, r.get(1)?, r.get(2)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn account_error(&mut self, id: &AccountId, threshold: u64) -> StoreResult<bool> {
        // the operator's own account is never quarantined as a whole (its identities are)
        let before: Option<bool> = self
            .c
            .prepare_cached("SELECT quarantined FROM accounts WHERE id = ?")?
            .query_row([id.as_str()], |r| r.get(0))
            .optional()?;
        let after: Option<bool> = self
            .c
            .prepare_cached(
                "UPDATE accounts SET errors = errors + 1, confirmed_streak = 0, \
                   quarantined = quarantined OR (kind = 'volunteer' AND errors + 1 >= ?) \
                 WHERE id = ? RETURNING quarantined",
            )?
            .query_row(params![threshold as i64, id.as_str()], |r| r.get(0))
            .optional()?;
        Ok(before == Some(false) && after == Some(true))
    }

    fn live_parties(&mut self, since_ms: i64) -> StoreResult<u32> {
        let n: i64 = self
            .c
            .prepare_cached(
                "SELECT (SELECT COUNT(*) FROM accounts a WHERE a.kind = 'volunteer' AND a.revoked_ms IS NULL \
                           AND a.quarantined = 0 AND EXISTS (SELECT 1 FROM workers w WHERE w.account_id = a.id \
                             AND w.last_seen_ms >= ?1 AND w.quarantined = 0)) \
                      + (SELECT COUNT(*) FROM workers w WHERE w.account_id = 'operator' \
                           AND w.last_seen_ms >= ?1 AND w.quarantined = 0)",
            )?
            .query_row([since_ms], |r| r.get(0))?;
        Ok(n as u32)
    }

    fn live_workers(&mut self, since_ms: i64) -> StoreResult<u32> {
        let n: i64 = self
            .c
            .prepare_cached(
                "SELECT COUNT(*) FROM workers w JOIN accounts a ON a.id = w.account_id \
                 WHERE w.last_seen_ms >= ? AND w.quarantined = 0 AND a.quarantined = 0 AND a.revoked_ms IS NULL",
            )?
            .query_row([since_ms], |r| r.get(0))?;
        Ok(n as u32)
    }
}
