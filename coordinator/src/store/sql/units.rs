//! Units (`migrations/sqlite/0001_init.sql`): batch creation, the leasable queue, counters and
//! decisions.

use e2fleet_engine::Unit;
use e2fleet_proto::api::{JobId, LeaseId, UnitCounts, UnitId};

use super::codec::{encode_path, unit_at};
use super::{ConnExt, Row, SqlTx, args};
use crate::store::tx::{Leasing, MoreRuns, StoreResult, Units};
use crate::store::{AccountNeed, NewUnit, ResultId, UnitRecord, UnitState};

/// The columns [`from_row`] reads, in order (`u.` for queries that alias units).
const COLUMNS: &str = "id, job_id, prefix_json, cursor_json, parent_id, kind, quorum, needed, state, \
     active_leases, results, accepted_result_id, created_ms, needs_new_account, disputed";
pub(super) const U_COLUMNS: &str = "u.id, u.job_id, u.prefix_json, u.cursor_json, u.parent_id, u.kind, u.quorum, \
     u.needed, u.state, u.active_leases, u.results, u.accepted_result_id, u.created_ms, \
     u.needs_new_account, u.disputed";

/// Reads a row of [`COLUMNS`] (by position: a name lookup per field costs more than the
/// query on the write path).
fn from_row(r: &Row) -> StoreResult<UnitRecord> {
    from_row_at(r, 0)
}

/// Reads the columns of [`COLUMNS`] starting at column `at`.
pub(super) fn from_row_at(r: &Row, at: usize) -> StoreResult<UnitRecord> {
    Ok(UnitRecord {
        id: UnitId(r.get(at)?),
        job_id: r.parsed(at + 1)?,
        unit: unit_at(r, at + 2, at + 3)?,
        parent: r.get::<Option<i64>>(at + 4)?.map(UnitId),
        kind: r.parsed(at + 5)?,
        quorum: r.get::<i64>(at + 6)? as u32,
        needed: r.get::<i64>(at + 7)? as u32,
        state: r.parsed(at + 8)?,
        active_leases: r.get::<i64>(at + 9)? as u32,
        results: r.get::<i64>(at + 10)? as u32,
        accepted_result: r.get::<Option<i64>>(at + 11)?.map(ResultId),
        created_ms: r.get(at + 12)?,
        account_need: AccountNeed::from_stored(r.get(at + 13)?),
        disputed: r.get(at + 14)?,
    })
}

/// The condition "job `job` has an open or busy unit (other than `besides`)", both SQL
/// expressions, in the form each planner walks best. PostgreSQL's planner takes a table
/// scan that stops at the first match to be cheap whenever its statistics say many units
/// match, but unfinished units are mostly the newest, at the end of the table: it read
/// every done unit first (~0.5 ms a report after 6,000 units). Asked for the newest in id
/// order (an EXISTS would drop the order), it walks back from the newest unit, or takes
/// the partial index `units_unfinished_by_job` once its statistics know that few units are
/// unfinished. SQLite walks its `units_by_job` index either way; an order there would sort
/// a fresh job's millions of open units.
pub(super) fn has_unfinished(postgres: bool, job: &str, besides: Option<&str>) -> String {
    let besides = besides.map_or(String::new(), |b| format!(" AND o.id <> {b}"));
    if postgres {
        format!(
            "(SELECT o.id FROM units o WHERE o.job_id = {job} AND o.state IN ('open', 'busy'){besides} \
              ORDER BY o.id DESC LIMIT 1) IS NOT NULL"
        )
    } else {
        format!(
            "EXISTS (SELECT 1 FROM units o WHERE o.job_id = {job} AND o.state IN ('open', 'busy'){besides})"
        )
    }
}

impl SqlTx<'_> {
    /// Moves a unit's counters and recomputes the state of one that is not done:
    /// `open` while more runs are needed than are out, `busy` otherwise.
    fn adjust(&mut self, id: UnitId, leases_delta: i64, results_delta: i64) -> StoreResult<()> {
        self.c
            .execute_deferred("UPDATE units SET active_leases = active_leases + ?1, results = results + ?2, \
                   state = CASE WHEN state IN ('done', 'cancelled') THEN state \
                                WHEN results + ?2 + active_leases + ?1 < needed THEN 'open' ELSE 'busy' END \
                 WHERE id = ?3", args![leases_delta, results_delta, id.0])?;
        Ok(())
    }
}

impl Units for SqlTx<'_> {
    fn insert_units(&mut self, job: JobId, units: &[NewUnit], now_ms: i64) -> StoreResult<()> {
        // one prepared statement executed per row: on the writer thread that is cheaper
        // than building multi-row statements
        // a unit cross-checked from the start prefers its runs from different accounts
        let insert = "INSERT INTO units (job_id, prefix_json, cursor_json, parent_id, kind, quorum, needed, state, created_ms, needs_new_account) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, 'open', ?7, CASE WHEN ?6 > 1 THEN 1 ELSE 0 END)";
        let job = job.to_string();
        if self.c.is_postgres() && units.len() > 1 {
            // one statement for the lot (see `batch.rs`: a small statement costs
            // PostgreSQL about the same whatever its rows), in runs of a bounded size
            for run in units.chunks(super::batch::MAX_ROWS) {
                self.insert_units_at_once(&job, run, now_ms)?;
            }
            return Ok(());
        }
        for u in units {
            self.c.execute_deferred(
                insert,
                args![
                    job,
                    encode_path(&u.unit.prefix),
                    encode_path(&u.unit.cursor),
                    u.parent.map(|p| p.0),
                    u.kind.as_str(),
                    u.quorum as i64,
                    now_ms
                ],
            )?;
        }
        Ok(())
    }

    fn unit(&mut self, id: UnitId) -> StoreResult<Option<UnitRecord>> {
        self.c.map_row(
            &format!("SELECT {COLUMNS} FROM units WHERE id = ?"),
            args![id.0],
            from_row,
        )
    }

    fn leasable_units(
        &mut self,
        who: &Leasing<'_>,
        job: Option<JobId>,
        limit: usize,
    ) -> StoreResult<Vec<UnitRecord>> {
        // the identity never runs a unit twice; a volunteer account not either when the
        // unit requires another party's run, or prefers one and the fleet has another
        // party (the operator vouches for each of its machines: its identities are parties).
        // `LIMIT 1 OFFSET 0` keeps each test a lookup per candidate unit on PostgreSQL: its
        // planner otherwise turns a NOT EXISTS into an anti-join, and a prepared (generic)
        // plan merged it with every result of every unit, so a lease cost grew with the
        // job's results (~3 ms after 4,000 units). SQLite runs them per row either way.
        const ELIGIBLE: &str = "NOT EXISTS (SELECT 1 FROM leases l WHERE l.unit_id = u.id AND l.state = 'active' \
                     AND (l.worker_id = ?1 OR (?2 != 'operator' AND l.account_id = ?2 \
                          AND (u.needs_new_account = 2 OR (u.needs_new_account = 1 AND ?3 > 1)))) LIMIT 1 OFFSET 0) \
               AND NOT EXISTS (SELECT 1 FROM results r WHERE r.unit_id = u.id AND r.verdict NOT IN ('wrong', 'void') \
                     AND (r.worker_id = ?1 OR (?2 != 'operator' AND r.account_id = ?2 \
                          AND (u.needs_new_account = 2 OR (u.needs_new_account = 1 AND ?3 > 1)))) LIMIT 1 OFFSET 0)";
        let worker = who.worker.to_string();
        let job = job.map(|j| j.to_string());
        // one job's units from that job's index; any job's from the open queue
        let (open_index, of_job) = match job {
            Some(_) => ("units_by_job", "u.job_id = ?5"),
            None => ("units_by_state", "?5 IS NULL"),
        };
        // disputed units go to trusted workers first (few: their own partial index);
        // then the oldest open units, in index order, so a lease reads `limit` rows and
        // not the whole open set. Both parts in one statement (one round trip): its
        // last column says which part a row is from; a disputed unit is open too, so the
        // second part may repeat one, and asks for twice `limit` to have enough without.
        let open = |limit: &str| {
            format!(
                "SELECT {U_COLUMNS}, 1 AS part FROM units u INDEXED BY {open_index} JOIN jobs j ON j.id = u.job_id \
                 WHERE u.state = 'open' AND j.state = 'running' AND j.paused = 0 \
                   AND {of_job} AND {ELIGIBLE} \
                 ORDER BY u.id LIMIT {limit}"
            )
        };
        let mut params = args![
            worker,
            who.account.as_str(),
            who.live_parties,
            limit as i64,
            job
        ]
        .to_vec();
        let sql = if who.trusted {
            format!(
                "SELECT * FROM (SELECT {U_COLUMNS}, 0 AS part FROM units u INDEXED BY units_disputed \
                   JOIN jobs j ON j.id = u.job_id \
                   WHERE u.state = 'open' AND u.disputed = 1 AND j.state = 'running' AND j.paused = 0 \
                     AND {of_job} AND {ELIGIBLE} \
                   ORDER BY u.id LIMIT ?4) AS disputed \
                 UNION ALL SELECT * FROM ({}) AS oldest ORDER BY 16, 1",
                open("?6")
            )
        } else {
            open("?4")
        };
        if who.trusted {
            params.push(super::Value::Int(2 * limit as i64));
        }
        let rows = self.c.map(&sql, &params, from_row)?;
        let mut units: Vec<UnitRecord> = Vec::with_capacity(limit);
        for unit in rows {
            if units.len() < limit && !units.iter().any(|u| u.id == unit.id) {
                units.push(unit);
            }
        }
        Ok(units)
    }

    fn active_leases_by_job(&mut self) -> StoreResult<Vec<(JobId, u64)>> {
        let rows = self.c.map("SELECT u.job_id, COUNT(*) FROM leases l INDEXED BY leases_by_state JOIN units u ON u.id = l.unit_id \
             WHERE l.state = 'active' GROUP BY u.job_id", &[], |r| Ok((r.parsed(0)?, r.get::<i64>(1)? as u64)))?;
        Ok(rows)
    }

    fn splittable_unit(&mut self) -> StoreResult<Option<UnitRecord>> {
        self
            .c
            .map_row(&format!(
                "SELECT {U_COLUMNS} FROM units u JOIN jobs j ON j.id = u.job_id \
                 WHERE u.state = 'open' AND j.state = 'running' AND j.paused = 0 AND length(u.cursor_json) > 0 AND u.cursor_json != '[]' \
                   AND u.active_leases = 0 AND u.results = 0 AND u.needed = 1 \
                 ORDER BY u.id LIMIT 1"
            ), &[], from_row)
    }

    fn set_unit_path(&mut self, id: UnitId, unit: &Unit) -> StoreResult<()> {
        self.c.execute_deferred(
            "UPDATE units SET prefix_json = ?, cursor_json = ? WHERE id = ?",
            args![encode_path(&unit.prefix), encode_path(&unit.cursor), id.0],
        )?;
        Ok(())
    }

    fn lease_taken(&mut self, id: UnitId) -> StoreResult<()> {
        self.adjust(id, 1, 0)
    }

    fn lease_returned(&mut self, id: UnitId) -> StoreResult<()> {
        self.adjust(id, -1, 0)
    }

    fn result_recorded(&mut self, id: UnitId, lease_was_active: bool) -> StoreResult<()> {
        self.adjust(id, if lease_was_active { -1 } else { 0 }, 1)
    }

    fn recount_unit(&mut self, id: UnitId, reopen: bool) -> StoreResult<()> {
        self.c.execute("UPDATE units SET results = (SELECT COUNT(*) FROM results r WHERE r.unit_id = units.id AND r.verdict NOT IN ('wrong', 'void')) \
             WHERE id = ?", args![id.0])?;
        if reopen {
            self.c.execute("UPDATE units SET accepted_result_id = NULL, needed = results + active_leases + 1, state = 'open' \
                 WHERE id = ? AND state != 'cancelled'", args![id.0])?;
        } else {
            self.adjust(id, 0, 0)?;
        }
        Ok(())
    }

    fn mark_unit_done(&mut self, id: UnitId, result: ResultId, now_ms: i64) -> StoreResult<()> {
        if self
            .unfinished_besides
            .is_some_and(|(_, besides)| besides != id)
        {
            self.unfinished_besides = None;
        }
        self.c
            .execute_deferred("UPDATE units SET state = 'done', accepted_result_id = ?, disputed = 0, decided_ms = ? WHERE id = ?", args![result.0, now_ms, id.0])?;
        Ok(())
    }

    fn unit_decided_by_lease(
        &mut self,
        id: UnitId,
        lease: LeaseId,
        lease_was_active: bool,
        now_ms: i64,
    ) -> StoreResult<()> {
        if self
            .unfinished_besides
            .is_some_and(|(_, besides)| besides != id)
        {
            self.unfinished_besides = None;
        }
        self.c.execute_deferred(
            "UPDATE units SET active_leases = active_leases - ?1, results = results + 1, state = 'done', \
               accepted_result_id = (SELECT id FROM results WHERE lease_id = ?2), disputed = 0, decided_ms = ?3 \
             WHERE id = ?4",
            args![i64::from(lease_was_active), lease.to_string(), now_ms, id.0],
        )?;
        Ok(())
    }

    fn request_run(&mut self, id: UnitId, more: &MoreRuns) -> StoreResult<()> {
        self.c.execute("UPDATE units SET quorum = CASE WHEN quorum > ?1 THEN quorum ELSE ?1 END, needed = results + active_leases + 1, state = 'open', \
               needs_new_account = ?2, disputed = ?3 WHERE id = ?4", args![
            more.quorum as i64,
            more.account_need as i64,
            more.disputed,
            id.0
        ])?;
        Ok(())
    }

    fn unit_children(&mut self, parent: UnitId) -> StoreResult<Vec<UnitRecord>> {
        // an overturn walks the children: archived ones come back to be revoked
        self.restore_children(parent)?;
        let rows = self.c.map(
            &format!("SELECT {COLUMNS} FROM units WHERE parent_id = ?"),
            args![parent.0],
            from_row,
        )?;
        Ok(rows)
    }

    fn cancel_unit(&mut self, id: UnitId) -> StoreResult<()> {
        self.unfinished_besides = None;
        self.c.execute(
            "UPDATE units SET state = 'cancelled' WHERE id = ?",
            args![id.0],
        )?;
        Ok(())
    }

    fn cancel_job_units(&mut self, job: JobId) -> StoreResult<()> {
        self.unfinished_besides = None;
        self.c.execute(
            "UPDATE units SET state = 'cancelled' WHERE job_id = ? AND state IN ('open', 'busy')",
            args![job.to_string()],
        )?;
        Ok(())
    }

    fn job_has_unfinished_units(&mut self, job: JobId) -> StoreResult<bool> {
        if self
            .unfinished_besides
            .is_some_and(|(known, _)| known == job)
        {
            return Ok(true);
        }
        let sql = format!("SELECT {}", has_unfinished(self.c.is_postgres(), "?", None));
        self.c.one(&sql, args![job.to_string()])
    }

    fn unit_counts(&mut self, job: JobId) -> StoreResult<UnitCounts> {
        let rows = self.c.map(
            "SELECT state, COUNT(*) FROM units WHERE job_id = ? GROUP BY state",
            args![job.to_string()],
            |r| Ok((r.parsed::<UnitState>(0)?, r.get::<i64>(1)? as u64)),
        )?;
        let rows: Vec<(UnitState, u64)> = rows;
        let mut counts = UnitCounts {
            done: self.archived_units_of(job)?,
            ..UnitCounts::default()
        };
        for row in rows {
            let (state, n) = row;
            match state {
                UnitState::Open => counts.open = n,
                UnitState::Busy => counts.leased = n,
                UnitState::Done => counts.done += n,
                UnitState::Cancelled => counts.cancelled = n,
            }
        }
        Ok(counts)
    }

    fn waiting_units(&mut self, job: JobId) -> StoreResult<e2fleet_proto::api::status::Waiting> {
        // open units that already have a result: their next run must come from an identity
        // (or, needs_new_account = 2, an account) that has not run them
        let (for_worker, for_account, disputed, needed): (i64, i64, i64, i64) = self
            .c
            .first("SELECT COALESCE(CAST(SUM(CASE WHEN disputed = 0 AND needs_new_account < 2 THEN 1 ELSE 0 END) AS BIGINT), 0), \
                        COALESCE(CAST(SUM(CASE WHEN disputed = 0 AND needs_new_account = 2 THEN 1 ELSE 0 END) AS BIGINT), 0), \
                        COALESCE(CAST(SUM(disputed) AS BIGINT), 0), COALESCE(MAX(results + active_leases + 1), 0) \
                 FROM units WHERE job_id = ? AND state = 'open' AND results > 0", args![job.to_string()], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })?;
        // the first disputed units, and who disagrees on each
        let mut disputes: Vec<e2fleet_proto::api::status::Dispute> = Vec::new();
        if disputed > 0 {
            let rows: Vec<(i64, String, String)> = self.c.map(
                "SELECT u.id, r.account_id, r.worker_id FROM units u JOIN results r ON r.unit_id = u.id \
                 WHERE u.job_id = ? AND u.state = 'open' AND u.disputed = 1 AND r.verdict NOT IN ('wrong', 'void') \
                 ORDER BY u.id, r.id LIMIT 200",
                args![job.to_string()],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?;
            for (unit, account, worker) in rows {
                let party = if account == "operator" {
                    format!("operator machine {worker}")
                } else {
                    account
                };
                if let Some(d) = disputes.last_mut().filter(|d| d.unit_id == unit) {
                    if !d.parties.contains(&party) {
                        d.parties.push(party);
                    }
                    continue;
                }
                if disputes.len() >= 10 {
                    break;
                }
                disputes.push(e2fleet_proto::api::status::Dispute {
                    unit_id: unit,
                    parties: vec![party],
                });
            }
        }
        Ok(e2fleet_proto::api::status::Waiting {
            for_another_worker: for_worker as u64,
            for_another_account: for_account as u64,
            disputed: disputed as u64,
            workers_needed: needed as u64,
            disputes,
            ..Default::default()
        })
    }
}
