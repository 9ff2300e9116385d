//! Leases (`migrations/sqlite/0001_init.sql`): grants, expiry, extension, release, and the
//! counts behind the dashboard.

use e2fleet_proto::api::{AccountId, JobId, LeaseId, UnitId, WorkerId};

use super::codec::{decode_budget, encode_budget};
use super::{ConnExt, Row, SqlTx, args};
use crate::store::tx::{Leases, StoreResult};
use crate::store::{LeaseMinute, LeaseRecord, LeaseState, LeaseView, UnitRecord};

/// The columns [`from_row_at`] reads, in order (leases aliased `l`).
pub(super) const L_COLUMNS: &str = "l.id, l.unit_id, l.worker_id, l.hostname, l.budget, l.created_ms, \
     l.deadline_ms, l.state, l.account_id";

/// Reads the columns of [`L_COLUMNS`] starting at column `at`.
pub(super) fn from_row_at(r: &Row, at: usize) -> StoreResult<LeaseRecord> {
    Ok(LeaseRecord {
        id: r.parsed(at)?,
        unit_id: UnitId(r.get(at + 1)?),
        worker_id: r.parsed(at + 2)?,
        hostname: r.get(at + 3)?,
        budget: decode_budget(r.get(at + 4)?),
        created_ms: r.get(at + 5)?,
        deadline_ms: r.get(at + 6)?,
        state: r.parsed(at + 7)?,
        account_id: r.parsed(at + 8)?,
    })
}

/// What [`Leases::lease_view`] reads (workers `w`, accounts `a`), for the worker, its
/// account and whether that is a volunteer's (1 or 0) given as SQL expressions.
pub(super) fn view_columns(worker: &str, account: &str, volunteer: &str) -> String {
    // (the operator's identities are not counted together: thousands of leases)
    format!(
        "w.quarantined, \
           (SELECT COUNT(*) FROM leases WHERE worker_id = {worker} AND state = 'active'), \
           CASE WHEN {volunteer} = 1 THEN (SELECT COUNT(*) FROM leases WHERE account_id = {account} AND state = 'active') ELSE 0 END, \
           {}",
        super::accounts::COLUMNS
    )
}

/// Reads the columns of [`view_columns`] starting at column `at`.
pub(super) fn view_at(r: &Row, at: usize) -> StoreResult<LeaseView> {
    Ok(LeaseView {
        quarantined: r.get(at)?,
        worker_leases: r.get::<i64>(at + 1)? as u64,
        account_leases: r.get::<i64>(at + 2)? as u64,
        account: match r.get::<Option<String>>(at + 3)? {
            Some(_) => Some(super::accounts::from_row_at(r, at + 3, false)?),
            None => None,
        },
    })
}

/// Whether the unit of lease `lease` (a table or alias) is decided (done or cancelled), as
/// an SQL condition. The unit's state is a scalar subquery, read for each of the few
/// leases a worker holds: written as a join or `EXISTS`, the planner may start from the
/// decided units instead (they were few when the plan was made, in a new database) and
/// walk every one of them for each call as the job grows: a worker's heartbeat took
/// ~13 ms on a job of 48,000 done units (the load bench on PostgreSQL), under the lease
/// batches' lock.
pub(super) fn decided_unit(lease: &str) -> String {
    format!("(SELECT u.state FROM units u WHERE u.id = {lease}.unit_id) IN ('done', 'cancelled')")
}

impl Leases for SqlTx<'_> {
    fn run_alone(&mut self) -> StoreResult<bool> {
        self.c.run_alone()
    }

    fn insert_lease(&mut self, l: &LeaseRecord) -> StoreResult<()> {
        self.c.execute_deferred("INSERT INTO leases (id, unit_id, worker_id, hostname, budget, created_ms, deadline_ms, state, account_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", args![
                l.id.to_string(),
                l.unit_id.0,
                l.worker_id.to_string(),
                l.hostname,
                encode_budget(l.budget),
                l.created_ms,
                l.deadline_ms,
                l.state.as_str(),
                l.account_id.as_str()
            ])?;
        Ok(())
    }

    fn lease_view(
        &mut self,
        worker: WorkerId,
        account: &AccountId,
    ) -> StoreResult<Option<LeaseView>> {
        let sql = format!(
            "SELECT {} FROM workers w LEFT JOIN accounts a ON a.id = ?2 WHERE w.id = ?1",
            view_columns("?1", "?2", "?3")
        );
        self.c.map_row(
            &sql,
            args![
                worker.to_string(),
                account.as_str(),
                i64::from(!account.is_operator())
            ],
            |r| view_at(r, 0),
        )
    }

    fn lease_with_unit(&mut self, id: LeaseId) -> StoreResult<Option<(LeaseRecord, UnitRecord)>> {
        self
            .c
            .map_row(&format!(
                    "SELECT {L_COLUMNS}, {} FROM leases l JOIN units u ON u.id = l.unit_id WHERE l.id = ?",
                    super::units::U_COLUMNS
                ), args![id.to_string()], |r| {
                Ok((from_row_at(r, 0)?, super::units::from_row_at(r, super::width(L_COLUMNS))?))
            })
    }

    fn expire_overdue_leases(&mut self, now_ms: i64) -> StoreResult<Vec<UnitId>> {
        let ids = self.c.map("UPDATE leases SET state = 'expired' WHERE state = 'active' AND deadline_ms < ? RETURNING unit_id", args![now_ms], |r| r.get(0).map(UnitId))?;
        Ok(ids)
    }

    fn set_lease_state(&mut self, id: LeaseId, state: LeaseState) -> StoreResult<()> {
        self.c.execute_deferred(
            "UPDATE leases SET state = ? WHERE id = ?",
            args![state.as_str(), &id.to_string()],
        )?;
        Ok(())
    }

    fn extend_lease(
        &mut self,
        id: LeaseId,
        worker: WorkerId,
        deadline_ms: i64,
    ) -> StoreResult<bool> {
        Ok(self.c.execute(
            "UPDATE leases SET deadline_ms = ? WHERE id = ? AND worker_id = ? AND state = 'active'",
            args![deadline_ms, id.to_string(), worker.to_string()],
        )? == 1)
    }

    fn revive_lease(
        &mut self,
        id: LeaseId,
        worker: WorkerId,
        deadline_ms: i64,
    ) -> StoreResult<Option<UnitId>> {
        self.c.map_row(
            "UPDATE leases SET state = 'active', deadline_ms = ? WHERE id = ? AND worker_id = ? AND state = 'expired' \
               AND EXISTS (SELECT 1 FROM units u WHERE u.id = leases.unit_id AND u.state = 'open' \
                             AND u.results = 0 AND u.active_leases = 0) \
             RETURNING unit_id",
            args![deadline_ms, id.to_string(), worker.to_string()],
            |r| r.get(0).map(UnitId),
        )
    }

    fn supersede_expired_leases(&mut self, unit: UnitId) -> StoreResult<usize> {
        self.c.execute(
            "UPDATE leases SET state = 'superseded' WHERE unit_id = ? AND state = 'expired'",
            args![unit.0],
        )
    }

    fn supersede_decided_leases(
        &mut self,
        worker: WorkerId,
    ) -> StoreResult<Vec<(LeaseId, UnitId)>> {
        self.c.map(
            &format!(
                "UPDATE leases SET state = 'superseded' WHERE worker_id = ? AND state = 'active' \
                   AND {} RETURNING id, unit_id",
                decided_unit("leases")
            ),
            args![worker.to_string()],
            |r| Ok((r.parsed(0)?, UnitId(r.get(1)?))),
        )
    }

    fn yield_candidate(
        &mut self,
        started_before: i64,
        asked_since: i64,
    ) -> StoreResult<Option<LeaseId>> {
        self.c.map_row(
            "SELECT l.id FROM leases l JOIN units u ON u.id = l.unit_id JOIN jobs j ON j.id = u.job_id \
             WHERE l.state = 'active' AND l.yield_ms IS NULL AND l.created_ms <= ?1 AND l.account_id = ?2 \
               AND u.state IN ('open', 'busy') AND u.needed = 1 AND u.results = 0 AND u.active_leases = 1 \
               AND j.state = 'running' AND j.paused = 0 \
               AND NOT EXISTS (SELECT 1 FROM leases o JOIN units ou ON ou.id = o.unit_id \
                               WHERE ou.job_id = u.job_id AND o.state = 'active' AND o.yield_ms >= ?3) \
             ORDER BY l.created_ms LIMIT 1",
            args![started_before, AccountId::OPERATOR, asked_since],
            |r| r.parsed(0),
        )
    }

    fn request_yield(&mut self, id: LeaseId, now_ms: i64) -> StoreResult<()> {
        self.c.execute(
            "UPDATE leases SET yield_ms = ? WHERE id = ? AND state = 'active'",
            args![now_ms, id.to_string()],
        )?;
        Ok(())
    }

    fn yields_of_worker(&mut self, worker: WorkerId) -> StoreResult<Vec<LeaseId>> {
        self.c.map(
            "SELECT id FROM leases WHERE worker_id = ? AND state = 'active' AND yield_ms IS NOT NULL",
            args![worker.to_string()],
            |r| r.parsed(0),
        )
    }

    fn release_lease(&mut self, id: LeaseId, worker: WorkerId) -> StoreResult<Option<UnitId>> {
        self.c.map_row("UPDATE leases SET state = 'released' WHERE id = ? AND worker_id = ? AND state = 'active' RETURNING unit_id", args![id.to_string(), worker.to_string()], |r| r.get(0).map(UnitId))
    }

    fn cancel_job_leases(&mut self, job: JobId) -> StoreResult<usize> {
        self.c.execute("UPDATE leases SET state = 'cancelled' WHERE state = 'active' AND unit_id IN (SELECT id FROM units WHERE job_id = ?)", args![job.to_string()])
    }

    fn first_lease_of_job(&mut self, job: JobId) -> StoreResult<Option<i64>> {
        self.c.one("SELECT MIN(l.created_ms) FROM leases l JOIN units u ON u.id = l.unit_id WHERE u.job_id = ?", args![job.to_string()])
    }

    fn lease_minutes(&mut self, since_ms: i64) -> StoreResult<Vec<LeaseMinute>> {
        let rows = self.c.map("SELECT m, CAST(SUM(created) AS BIGINT), CAST(SUM(expired) AS BIGINT) FROM ( \
               SELECT created_ms / 60000 AS m, 1 AS created, 0 AS expired FROM leases WHERE created_ms >= ?1 \
               UNION ALL \
               SELECT deadline_ms / 60000, 0, 1 FROM leases WHERE state = 'expired' AND deadline_ms >= ?1) AS minutes \
             GROUP BY m ORDER BY m", args![since_ms], |r| {
            Ok(LeaseMinute {
                minute: r.get(0)?,
                created: r.get::<i64>(1)? as u64,
                expired: r.get::<i64>(2)? as u64,
            })
        })?;
        Ok(rows)
    }

    fn lease_counts_since(&mut self, since_ms: i64) -> StoreResult<(u64, u64)> {
        let created: i64 = self.c.one(
            "SELECT COUNT(*) FROM leases WHERE created_ms >= ?",
            args![since_ms],
        )?;
        let expired: i64 = self.c.one(
            "SELECT COUNT(*) FROM leases WHERE state = 'expired' AND deadline_ms >= ?",
            args![since_ms],
        )?;
        Ok((created as u64, expired as u64))
    }
}
