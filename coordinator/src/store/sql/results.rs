//! Results (`migrations/sqlite/0001_init.sql`): every report, its digest and its verdict, and the
//! figures behind rates and the dashboard.

use e2fleet_engine::UnitResult;
use e2fleet_proto::api::{AccountId, JobId, LeaseId, ResultVerdict, UnitId, WorkerId};

use super::codec::{decode_sparse_counts, path_at};
use super::units::U_COLUMNS;
use super::{ConnExt, Row, SqlTx, args, width};
use crate::store::tx::{Results, StoreResult};
use crate::store::{
    CertificateRow, DAY_MS, FoundBoard, JobHead, NewResult, NodesReceived, RateSample, ReportView,
    ResultBody, ResultBreakdown, ResultId, ResultMinute, ResultRecord,
};

/// The columns [`from_row`] reads, in order (no body: decisions compare digests).
const COLUMNS: &str = "id, job_id, unit_id, lease_id, worker_id, hostname, cpu_model, engine_kind, \
     engine_build, digest, committed, solutions, max_depth, engine_seconds, verdict, received_ms, \
     account_id, standing";

/// How many of job `job`'s accepted results at depth `depth` or deeper keep their boards
/// (other than `other_than`), counted up to `limit`: all SQL expressions.
fn kept_boards(job: &str, depth: &str, other_than: Option<&str>, limit: &str) -> String {
    let other = other_than.map_or(String::new(), |id| format!(" AND k.id != {id}"));
    format!(
        "(SELECT COUNT(*) FROM (SELECT 1 FROM results k INDEXED BY results_kept_boards \
           WHERE k.job_id = {job} AND k.max_depth >= {depth} AND k.verdict = 'accepted' \
             AND k.body_kept = 1{other} LIMIT {limit}) AS kept)"
    )
}

/// What [`Results::report_view`] reads: its columns, and the joins that follow `leases l`
/// (units `u`, jobs `j`, results `r`, accounts `a`), for the account, deepest depth and
/// board limit given as SQL expressions; which lease is the caller's. `unfinished`: on
/// which backend whether the job has another unfinished unit is read (`None`: it is
/// not, and reads as false). The lease, its result (NULLs when
/// none), unit, job head and account, then the job's kept boards; and kept for the
/// decision: the job's accepted totals and whether it has an unfinished unit besides this
/// one, and whether the unit has another valid result. Read by [`view_at`].
pub(super) fn view_select(
    unfinished: Option<bool>,
    account: &str,
    depth: &str,
    limit: &str,
) -> (String, String) {
    let columns = format!(
        "{}, {R_COLUMNS}, {U_COLUMNS}, j.id, j.state, j.replicas, j.spot_check, {}, \
           {}, j.accepted_json, {}, \
           EXISTS (SELECT 1 FROM results o WHERE o.unit_id = u.id AND o.lease_id <> l.id \
                     AND o.verdict NOT IN ('wrong', 'void'))",
        super::leases::L_COLUMNS,
        super::accounts::COLUMNS,
        kept_boards("j.id", depth, None, limit),
        unfinished.map_or("0 = 1".to_string(), |postgres| {
            super::units::has_unfinished(postgres, "j.id", Some("u.id"))
        }),
    );
    let joins = format!(
        "JOIN units u ON u.id = l.unit_id JOIN jobs j ON j.id = u.job_id \
         LEFT JOIN results r ON r.lease_id = l.id LEFT JOIN accounts a ON a.id = {account}"
    );
    (columns, joins)
}

/// Reads the columns of [`view_select`] starting at column `at`: the view, the job's
/// accepted totals (encoded) and whether the job has an unfinished unit besides this one.
pub(super) fn view_at(r: &Row, at: usize) -> StoreResult<(ReportView, String, bool)> {
    const RESULT: usize = width(super::leases::L_COLUMNS);
    const UNIT: usize = RESULT + width(R_COLUMNS);
    const JOB: usize = UNIT + width(U_COLUMNS);
    const ACCOUNT: usize = JOB + 4;
    const KEPT: usize = ACCOUNT + width(super::accounts::COLUMNS);
    let view = ReportView {
        lease: super::leases::from_row_at(r, at)?,
        existing: match r.get::<Option<i64>>(at + RESULT)? {
            Some(_) => Some(from_row_at(r, at + RESULT)?),
            None => None,
        },
        unit: super::units::from_row_at(r, at + UNIT)?,
        job: JobHead {
            id: r.parsed(at + JOB)?,
            state: r.parsed(at + JOB + 1)?,
            replicas: r.get::<i64>(at + JOB + 2)? as u32,
            spot_check: r.get(at + JOB + 3)?,
        },
        account: match r.get::<Option<String>>(at + ACCOUNT)? {
            Some(_) => Some(super::accounts::from_row_at(r, at + ACCOUNT, false)?),
            None => None,
        },
        kept_boards: r.get::<i64>(at + KEPT)? as usize,
        others_valid: r.get::<bool>(at + KEPT + 3)?,
    };
    Ok((
        view,
        r.get::<String>(at + KEPT + 1)?,
        r.get::<bool>(at + KEPT + 2)?,
    ))
}

/// The columns a new result is inserted with, in the order of [`inserted`].
pub(super) const INSERTED: &str = "job_id, unit_id, lease_id, worker_id, hostname, cpu_model, \
     engine_kind, engine_build, digest, committed, solutions, max_depth, engine_seconds, verdict, \
     received_ms, account_id, standing, counts, stop, body_kept";

/// A new result's values for [`INSERTED`].
pub(super) fn inserted(n: &NewResult, keep_body: bool) -> Vec<super::Value> {
    let r = &n.record;
    args![
        r.job_id.to_string(),
        r.unit_id.0,
        r.lease_id.to_string(),
        r.worker_id.to_string(),
        r.hostname,
        r.cpu_model,
        r.engine_kind.as_str(),
        r.engine_build,
        r.digest,
        r.committed as i64,
        r.solutions as i64,
        r.max_depth as i64,
        r.engine_seconds,
        r.verdict.as_str(),
        r.received_ms,
        r.account_id.as_str(),
        r.standing.as_str(),
        n.core.counts,
        n.core.stop,
        i64::from(keep_body)
    ]
    .to_vec()
}

/// [`COLUMNS`] for queries that alias results `r`.
pub(super) const R_COLUMNS: &str = "r.id, r.job_id, r.unit_id, r.lease_id, r.worker_id, r.hostname, \
     r.cpu_model, r.engine_kind, r.engine_build, r.digest, r.committed, r.solutions, r.max_depth, \
     r.engine_seconds, r.verdict, r.received_ms, r.account_id, r.standing";

/// Reads a row of [`COLUMNS`] (by position: a name lookup per field costs more than the
/// query on the write path).
fn from_row(r: &Row) -> StoreResult<ResultRecord> {
    from_row_at(r, 0)
}

/// Reads the columns of [`COLUMNS`] starting at column `at`.
pub(super) fn from_row_at(r: &Row, at: usize) -> StoreResult<ResultRecord> {
    Ok(ResultRecord {
        id: ResultId(r.get(at)?),
        job_id: r.parsed(at + 1)?,
        unit_id: UnitId(r.get(at + 2)?),
        lease_id: r.parsed(at + 3)?,
        worker_id: r.parsed(at + 4)?,
        hostname: r.get(at + 5)?,
        cpu_model: r.get(at + 6)?,
        engine_kind: r.parsed(at + 7)?,
        engine_build: r.get(at + 8)?,
        digest: r.get(at + 9)?,
        committed: r.get::<i64>(at + 10)? as u64,
        solutions: r.get::<i64>(at + 11)? as u64,
        max_depth: r.get::<i64>(at + 12)? as usize,
        engine_seconds: r.get(at + 13)?,
        verdict: r.parsed(at + 14)?,
        received_ms: r.get(at + 15)?,
        account_id: r.parsed(at + 16)?,
        standing: r.parsed(at + 17)?,
    })
}

fn bodies(rows: Vec<String>) -> StoreResult<Vec<UnitResult>> {
    rows.into_iter().map(|b| ResultBody(b).decode()).collect()
}

/// The columns [`body_at`] reads (`r.` aliases results, `j.` its job, `b.` its body,
/// left-joined: [`BODY_JOINS`]).
const BODY_COLUMNS: &str =
    "b.json, r.counts, r.stop, r.committed, r.solutions, r.max_depth, j.depths";

/// Results of walks, not of a study's probes: the fleet's two speeds (per-core and
/// aggregate nodes/s) are of engines walking trees, and a probe's children listed are
/// not nodes walked.
const WALKS: &str = "job_id NOT IN (SELECT id FROM jobs WHERE probe_particles IS NOT NULL)";

/// The joins [`BODY_COLUMNS`] need.
const BODY_JOINS: &str =
    "JOIN jobs j ON j.id = r.job_id LEFT JOIN result_bodies b ON b.result_id = r.id";

/// A result from the [`BODY_COLUMNS`] at `at`: its whole body, or for a folded result
/// what was kept of it — counts, solutions count, deepest depth and budget stop, without
/// solution or deepest boards.
fn body_at(r: &Row, at: usize) -> StoreResult<UnitResult> {
    let json: Option<String> = r.get(at)?;
    if let Some(json) = json {
        return ResultBody(json).decode();
    }
    let cursor = path_at(r, at + 2, "stop")?;
    let depths = r.get::<i64>(at + 6)? as usize;
    let nodes_by_depth = decode_sparse_counts(r.value(at + 1)?, depths)?;
    Ok(UnitResult {
        nodes_by_depth,
        committed: r.get::<i64>(at + 3)? as u64,
        solutions_count: r.get::<i64>(at + 4)? as u64,
        solutions: Vec::new(),
        max_depth: r.get::<i64>(at + 5)? as usize,
        deepest: Vec::new(),
        stop: Some(if cursor.is_some() {
            e2fleet_engine::unit::StopReason::Budget
        } else {
            e2fleet_engine::unit::StopReason::Finished
        }),
        cursor,
    })
}

impl SqlTx<'_> {
    /// Accepted results whose `column` (`account_id` or `worker_id`) is `id` and that no
    /// other account or identity (by the same column) reported the same digest for.
    fn unconfirmed_accepted_by(
        &mut self,
        column: &'static str,
        id: &str,
    ) -> StoreResult<Vec<ResultRecord>> {
        // archived ones come back first: what a recheck or a void reaches is run again
        self.restore_unconfirmed(column, id)?;
        let rows = self.c.map(&format!(
            "SELECT {COLUMNS} FROM results r0 WHERE r0.{column} = ?1 AND r0.verdict = 'accepted' \
               AND NOT EXISTS (SELECT 1 FROM results r WHERE r.unit_id = r0.unit_id AND r.digest = r0.digest \
                                 AND r.{column} != ?1 AND r.verdict IN ('agree', 'accepted')) \
             ORDER BY r0.id"
        ), args![id], from_row)?;
        Ok(rows)
    }

    fn strings(&mut self, sql: &str, params: &[super::Value]) -> StoreResult<Vec<String>> {
        let rows = self.c.map(sql, params, |r| r.get(0))?;
        Ok(rows)
    }

    /// A result as its record says (its verdict), with its body if `keep_body`; held
    /// changes both, its id not read back (its lease names it, once).
    fn insert(&mut self, n: &NewResult, keep_body: bool) -> StoreResult<()> {
        self.c.execute_deferred(
            &format!(
                "INSERT INTO results ({INSERTED}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            ),
            &inserted(n, keep_body),
        )?;
        if keep_body {
            self.insert_body(n)?;
        }
        Ok(())
    }

    /// The body of a result just inserted (held; found by its lease, which names it once).
    pub(super) fn insert_body(&mut self, n: &NewResult) -> StoreResult<()> {
        self.c.execute_deferred(
            "INSERT INTO result_bodies (result_id, json) SELECT id, ? FROM results WHERE lease_id = ?",
            args![n.body.0, n.record.lease_id.to_string()],
        )
    }
}

impl Results for SqlTx<'_> {
    fn insert_result(&mut self, n: &NewResult) -> StoreResult<()> {
        self.insert(n, true)
    }

    fn insert_decided_result(&mut self, n: &NewResult, keep_body: bool) -> StoreResult<()> {
        self.insert(n, keep_body)
    }

    fn result_id_by_lease(&mut self, lease: LeaseId) -> StoreResult<ResultId> {
        self.c
            .one(
                "SELECT id FROM results WHERE lease_id = ?",
                args![lease.to_string()],
            )
            .map(ResultId)
    }

    fn report_view(
        &mut self,
        lease: LeaseId,
        account: &AccountId,
        (depth, limit): (usize, usize),
    ) -> StoreResult<Option<ReportView>> {
        let (columns, joins) = view_select(Some(self.c.is_postgres()), "?2", "?3", "?4");
        let sql = format!("SELECT {columns} FROM leases l {joins} WHERE l.id = ?1");
        let row = self.c.map_row(
            &sql,
            args![lease.to_string(), account.as_str(), depth, limit],
            |r| view_at(r, 0),
        )?;
        Ok(row.map(|(view, accepted, others)| {
            self.accepted = Some((view.job.id, accepted));
            self.unfinished_besides = others.then_some((view.job.id, view.unit.id));
            view
        }))
    }

    fn result(&mut self, id: ResultId) -> StoreResult<Option<ResultRecord>> {
        self.c.map_row(
            &format!("SELECT {COLUMNS} FROM results WHERE id = ?"),
            args![id.0],
            from_row,
        )
    }

    fn result_body(&mut self, id: ResultId) -> StoreResult<Option<UnitResult>> {
        self.c.map_row(
            &format!("SELECT {BODY_COLUMNS} FROM results r {BODY_JOINS} WHERE r.id = ?"),
            args![id.0],
            |r| body_at(r, 0),
        )
    }

    fn valid_results_of_unit(&mut self, unit: UnitId) -> StoreResult<Vec<ResultRecord>> {
        let rows = self.c.map(&format!(
            "SELECT {COLUMNS} FROM results WHERE unit_id = ? AND verdict NOT IN ('wrong', 'void') ORDER BY id"
        ), args![unit.0], from_row)?;
        Ok(rows)
    }

    fn set_result_verdict(&mut self, id: ResultId, verdict: ResultVerdict) -> StoreResult<()> {
        if matches!(verdict, ResultVerdict::Wrong | ResultVerdict::Void) {
            self.withdraw_credit(id)?;
        }
        self.c.execute_deferred(
            "UPDATE results SET verdict = ? WHERE id = ?",
            args![verdict.as_str(), id.0],
        )?;
        Ok(())
    }

    fn credit_result(&mut self, id: ResultId, now_ms: i64) -> StoreResult<bool> {
        let Some((account, nodes)): Option<(String, i64)> = self.c.map_row(
            "SELECT r.account_id, r.committed FROM results r WHERE r.id = ? \
               AND r.credited_day IS NULL AND r.account_id <> 'operator' \
               AND NOT EXISTS (SELECT 1 FROM results o WHERE o.unit_id = r.unit_id \
                   AND o.account_id = r.account_id AND o.credited_day IS NOT NULL)",
            args![id.0],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?
        else {
            return Ok(false);
        };
        let day = now_ms.div_euclid(DAY_MS);
        self.c.execute_deferred(
            "UPDATE results SET credited_day = ? WHERE id = ?",
            args![day, id.0],
        )?;
        self.c.execute_deferred(
            "UPDATE accounts SET credit_nodes = credit_nodes + ?, credit_results = credit_results + 1 \
             WHERE id = ?",
            args![nodes, account.as_str()],
        )?;
        self.c.execute_deferred(
            "INSERT INTO account_days (account_id, day, nodes, results) VALUES (?, ?, ?, 1) \
             ON CONFLICT (account_id, day) DO UPDATE SET nodes = account_days.nodes + excluded.nodes, \
             results = account_days.results + 1",
            args![account.as_str(), day, nodes],
        )?;
        Ok(true)
    }

    // from the account's totals and from the day it was credited on (rows migrated from
    // before per-result credit name the day they were received, so that day's figures
    // stop at zero)
    fn withdraw_credit(&mut self, id: ResultId) -> StoreResult<()> {
        let Some((account, nodes, day)): Option<(String, i64, i64)> = self.c.map_row(
            "SELECT account_id, committed, credited_day FROM results \
             WHERE id = ? AND credited_day IS NOT NULL",
            args![id.0],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?
        else {
            return Ok(());
        };
        self.c.execute(
            "UPDATE results SET credited_day = NULL WHERE id = ?",
            args![id.0],
        )?;
        self.c.execute(
            "UPDATE accounts SET \
               credit_nodes = CASE WHEN credit_nodes > ? THEN credit_nodes - ? ELSE 0 END, \
               credit_results = CASE WHEN credit_results > 1 THEN credit_results - 1 ELSE 0 END \
             WHERE id = ?",
            args![nodes, nodes, account.as_str()],
        )?;
        self.c.execute(
            "UPDATE account_days SET \
               nodes = CASE WHEN nodes > ? THEN nodes - ? ELSE 0 END, \
               results = CASE WHEN results > 1 THEN results - 1 ELSE 0 END \
             WHERE account_id = ? AND day = ?",
            args![nodes, nodes, account.as_str(), day],
        )?;
        Ok(())
    }

    fn unconfirmed_accepted_of_account(
        &mut self,
        account: &AccountId,
    ) -> StoreResult<Vec<ResultRecord>> {
        self.unconfirmed_accepted_by("account_id", account.as_str())
    }

    fn unconfirmed_accepted_of_worker(
        &mut self,
        worker: WorkerId,
    ) -> StoreResult<Vec<ResultRecord>> {
        self.unconfirmed_accepted_by("worker_id", &worker.to_string())
    }

    fn pending_results_of_account(
        &mut self,
        account: &AccountId,
    ) -> StoreResult<Vec<ResultRecord>> {
        let rows = self.c.map(&format!(
            "SELECT {COLUMNS} FROM results WHERE account_id = ? AND verdict IN ('pending', 'agree') ORDER BY id"
        ), args![account.as_str()], from_row)?;
        Ok(rows)
    }

    fn accepted_bodies_of_job(&mut self, job: JobId) -> StoreResult<Vec<UnitResult>> {
        let rows = self.c.map(
            &format!(
                "SELECT {BODY_COLUMNS} FROM results r {BODY_JOINS} \
             WHERE r.job_id = ? AND r.verdict = 'accepted' ORDER BY r.unit_id"
            ),
            args![job.to_string()],
            |r| body_at(r, 0),
        )?;
        let mut bodies: Vec<UnitResult> = rows;
        bodies.extend(self.archived_results(job)?);
        Ok(bodies)
    }

    fn solution_bodies_of_job(&mut self, job: JobId, limit: usize) -> StoreResult<Vec<UnitResult>> {
        let rows = self.strings(
            "SELECT b.json FROM results r JOIN result_bodies b ON b.result_id = r.id \
             WHERE r.job_id = ? AND r.verdict = 'accepted' AND r.solutions > 0 ORDER BY r.unit_id LIMIT ?",
            args![job.to_string(), limit as i64],
        )?;
        bodies(rows)
    }

    fn deepest_results_of_job(&mut self, job: JobId, limit: usize) -> StoreResult<Vec<FoundBoard>> {
        let rows = self.c.map("SELECT b.json, r.account_id, r.hostname, r.received_ms FROM results r INDEXED BY results_kept_boards \
             JOIN result_bodies b ON b.result_id = r.id \
             WHERE r.job_id = ? AND r.verdict = 'accepted' AND r.body_kept = 1 ORDER BY r.max_depth DESC, r.received_ms, r.id LIMIT ?", args![job.to_string(), limit as i64], |r| {
            Ok((
                r.get::<String>(0)?,
                r.parsed::<AccountId>(1)?,
                r.get::<String>(2)?,
                r.get::<i64>(3)?,
            ))
        })?;
        let mut found = Vec::new();
        for row in rows {
            let (body, account, hostname, found_ms) = row;
            found.push(FoundBoard {
                result: ResultBody(body).decode()?,
                account,
                hostname,
                found_ms,
            });
        }
        Ok(found)
    }

    fn deepest_body_of_job(&mut self, job: JobId) -> StoreResult<Option<UnitResult>> {
        let rows = self.strings(
            "SELECT b.json FROM results r INDEXED BY results_kept_boards JOIN result_bodies b ON b.result_id = r.id \
             WHERE r.job_id = ? AND r.verdict = 'accepted' AND r.body_kept = 1 ORDER BY r.max_depth DESC, r.unit_id LIMIT 1",
            args![job.to_string()],
        )?;
        Ok(bodies(rows)?.pop())
    }

    fn rate_samples(&mut self, job: Option<JobId>, since_ms: i64) -> StoreResult<Vec<RateSample>> {
        let rows = self.c.map(&format!("SELECT committed, engine_seconds, hostname, cpu_model, engine_kind FROM results \
             WHERE verdict IN ('accepted', 'agree') AND engine_seconds > 0 AND received_ms >= ?1 AND (?2 IS NULL OR job_id = ?2) \
               AND {WALKS}"), args![since_ms, job.map(|j| j.to_string())], |r| {
            Ok(RateSample {
                committed: r.get::<i64>(0)? as u64,
                engine_seconds: r.get(1)?,
                hostname: r.get(2)?,
                cpu_model: r.get(3)?,
                engine_kind: r.parsed(4)?,
            })
        })?;
        Ok(rows)
    }

    fn nodes_since(&mut self, job: Option<JobId>, since_ms: i64) -> StoreResult<NodesReceived> {
        self.c.first(&format!("SELECT COALESCE(CAST(SUM(committed) AS BIGINT), 0), COALESCE(CAST(SUM(CASE WHEN verdict IN ('accepted', 'agree') THEN committed ELSE 0 END) AS BIGINT), 0) \
             FROM results WHERE received_ms >= ?1 AND (?2 IS NULL OR job_id = ?2) AND {WALKS}"), args![since_ms, job.map(|j| j.to_string())], |r| {
            Ok(NodesReceived {
                raw: r.get::<i64>(0)? as u64,
                verified: r.get::<i64>(1)? as u64,
            })
        })
    }

    fn results_since(&mut self, since_ms: i64) -> StoreResult<u64> {
        let n: i64 = self.c.one(
            "SELECT COUNT(*) FROM results WHERE received_ms >= ?",
            args![since_ms],
        )?;
        Ok(n as u64)
    }

    fn result_minutes(&mut self, since_ms: i64) -> StoreResult<Vec<ResultMinute>> {
        let rows = self.c.map(&format!("SELECT received_ms / 60000, CAST(SUM(committed) AS BIGINT), CAST(SUM(CASE WHEN verdict IN ('accepted', 'agree') THEN committed ELSE 0 END) AS BIGINT), COUNT(*) \
             FROM results WHERE received_ms >= ? AND {WALKS} GROUP BY received_ms / 60000 ORDER BY 1"), args![since_ms], |r| {
            Ok(ResultMinute {
                minute: r.get(0)?,
                raw_nodes: r.get::<i64>(1)? as u64,
                verified_nodes: r.get::<i64>(2)? as u64,
                results: r.get::<i64>(3)? as u64,
            })
        })?;
        Ok(rows)
    }

    fn wrong_results(&mut self) -> StoreResult<u64> {
        let n: i64 = self
            .c
            .one("SELECT COUNT(*) FROM results WHERE verdict = 'wrong'", &[])?;
        Ok(n as u64)
    }

    fn result_breakdown(&mut self, job: JobId) -> StoreResult<Vec<ResultBreakdown>> {
        let rows = self.c.map("SELECT verdict, engine_kind, engine_build, COUNT(*), COALESCE(CAST(SUM(committed) AS BIGINT), 0) FROM results WHERE job_id = ? \
             GROUP BY verdict, engine_kind, engine_build ORDER BY 1, 2, 3", args![job.to_string()], |r| {
            Ok(ResultBreakdown {
                verdict: r.parsed(0)?,
                engine_kind: r.parsed(1)?,
                engine_build: r.get(2)?,
                results: r.get::<i64>(3)? as u64,
                nodes: r.get::<i64>(4)? as u64,
            })
        })?;
        let mut groups: Vec<ResultBreakdown> = rows;
        for archived in self.archived_breakdown(job)? {
            match groups.iter_mut().find(|g| {
                (g.verdict, g.engine_kind, &g.engine_build)
                    == (
                        archived.verdict,
                        archived.engine_kind,
                        &archived.engine_build,
                    )
            }) {
                Some(g) => {
                    g.results += archived.results;
                    g.nodes += archived.nodes;
                }
                None => groups.push(archived),
            }
        }
        groups.sort_by(|a, b| {
            (a.verdict.as_str(), a.engine_kind.as_str(), &a.engine_build).cmp(&(
                b.verdict.as_str(),
                b.engine_kind.as_str(),
                &b.engine_build,
            ))
        });
        Ok(groups)
    }

    fn certificate_rows(&mut self, job: JobId) -> StoreResult<Vec<CertificateRow>> {
        let sql = format!(
            "SELECT {U_COLUMNS}, r.id, {BODY_COLUMNS}, r.digest, \
               (SELECT COUNT(*) FROM results a WHERE a.unit_id = u.id AND a.digest = r.digest \
                  AND a.verdict IN ('accepted', 'agree')) \
             FROM units u LEFT JOIN results r ON r.id = u.accepted_result_id \
               LEFT JOIN jobs j ON j.id = r.job_id LEFT JOIN result_bodies b ON b.result_id = r.id \
             WHERE u.job_id = ? AND u.state != 'cancelled' ORDER BY u.id"
        );
        let rows = self.c.map(&sql, args![job.to_string()], |r| {
            let unit = super::units::from_row_at(r, 0)?;
            let accepted = match r.get::<Option<i64>>(15)? {
                None => None,
                Some(_) => Some((
                    body_at(r, 16)?,
                    r.get::<String>(23)?,
                    r.get::<i64>(24)?.max(1) as u32,
                )),
            };
            Ok(CertificateRow { unit, accepted })
        })?;
        let mut all: Vec<CertificateRow> = rows;
        all.extend(self.archived_rows(job)?);
        all.sort_by_key(|row| row.unit.id);
        Ok(all)
    }

    fn fold_results(&mut self, unit: UnitId, keep: Option<ResultId>) -> StoreResult<()> {
        const FOLDABLE: &str = "unit_id = ?1 AND id IS DISTINCT FROM ?2 AND verdict IN ('accepted', 'agree') \
             AND body_kept = 1 AND counts IS NOT NULL";
        let keep = keep.map(|k| k.0);
        self.c
            .execute_deferred(&format!(
                "DELETE FROM result_bodies WHERE result_id IN (SELECT id FROM results WHERE {FOLDABLE})"
            ), args![unit.0, keep])?;
        self.c.execute_deferred(
            &format!("UPDATE results SET body_kept = 0 WHERE {FOLDABLE}"),
            args![unit.0, keep],
        )
    }

    fn fold_surplus_boards(&mut self, job: JobId, keep: usize) -> StoreResult<u64> {
        let surplus: Vec<i64> = {
            self.c.map("SELECT id FROM (SELECT id, solutions, ROW_NUMBER() OVER (ORDER BY max_depth DESC, received_ms, id) AS rank \
                   FROM results INDEXED BY results_kept_boards WHERE job_id = ? AND verdict = 'accepted' AND body_kept = 1) AS ranked \
                 WHERE rank > ? AND solutions = 0", args![job.to_string(), keep as i64], |r| r.get(0))?
        };
        for id in &surplus {
            self.c
                .execute_deferred("DELETE FROM result_bodies WHERE result_id = ?", args![id])?;
            self.c.execute_deferred(
                "UPDATE results SET body_kept = 0 WHERE id = ? AND counts IS NOT NULL",
                args![id],
            )?;
        }
        Ok(surplus.len() as u64)
    }

    fn boards_kept_at_least(
        &mut self,
        job: JobId,
        depth: usize,
        other_than: ResultId,
        limit: usize,
    ) -> StoreResult<usize> {
        let sql = format!("SELECT {}", kept_boards("?1", "?2", Some("?3"), "?4"));
        let n: i64 = self.c.one(
            &sql,
            args![job.to_string(), depth as i64, other_than.0, limit as i64],
        )?;
        Ok(n as usize)
    }

    fn accepted_digests(
        &mut self,
        job: JobId,
        units: &[UnitId],
    ) -> StoreResult<Vec<Option<String>>> {
        let job_id = job.to_string();
        let hot: Vec<Option<String>> = units
            .iter()
            .map(|u| {
                self.c.opt(
                    "SELECT r.digest FROM units u JOIN results r ON r.id = u.accepted_result_id \
                     WHERE u.id = ? AND u.job_id = ? AND u.state != 'cancelled'",
                    args![u.0, job_id],
                )
            })
            .collect::<Result<_, _>>()?;
        hot.into_iter()
            .zip(units)
            .map(|(digest, &unit)| match digest {
                Some(d) => Ok(Some(d)),
                None => self.archived_digest(job, unit),
            })
            .collect()
    }
}
