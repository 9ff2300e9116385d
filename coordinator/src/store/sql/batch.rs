//! [`Batches`]: what a batch of lease requests or reports reads and writes, one statement
//! for the whole batch on PostgreSQL.
//!
//! # How a batch travels
//! PostgreSQL spends most of a small statement's time on the statement itself (its
//! messages, locking the table and its indexes, starting the executor), not on its row,
//! so a set-based statement over a batch costs little more than one over a row. Each
//! statement here takes its rows as one parameter, a JSON array of objects, read by
//! `jsonb_to_recordset` into typed columns: no array types in the store's values, one
//! prepared statement whatever the batch's size, bytes as hex (`decode(.., 'hex')`).
//! Reads join the same rows `WITH` their place (`n`) and answer in that order; a lateral
//! join runs the per-row query of a lease's candidates once per request.
//!
//! SQLite runs the per-row statements, one per row: in process a statement costs
//! microseconds and a multi-row form gains nothing. Both run the same fleet logic.

use std::fmt::Write as _;

use e2fleet_engine::engine::EngineKind;
use e2fleet_proto::api::{AccountId, LeaseId, UnitId, WorkerId};

use super::codec::{encode_budget, encode_path};
use super::units::U_COLUMNS;
use super::{ConnExt, SqlTx, Value, args, width};
use crate::store::tx::{Batches, Leases, Results, StoreResult, Units, ViewAsk, Workers};
use crate::store::{
    LeaseRecord, LeaseState, LeaseView, NewResult, OpenUnit, ReportView, Seen, StoreError,
};

/// Most rows one statement carries (its parameter stays a few hundred kilobytes).
pub(super) const MAX_ROWS: usize = 1_024;

/// Rows as one statement parameter: a JSON array of objects with the given keys (see
/// the module docs). Reals that are not finite are stored as NULL.
fn json_rows<const N: usize>(keys: [&str; N], rows: impl IntoIterator<Item = [Value; N]>) -> Value {
    let mut out = String::from("[");
    for (i, row) in rows.into_iter().enumerate() {
        out.push_str(if i == 0 { "{" } else { ",{" });
        for (j, (key, v)) in keys.iter().zip(row).enumerate() {
            if j > 0 {
                out.push(',');
            }
            out.push('"');
            out.push_str(key);
            out.push_str("\":");
            match v {
                Value::Null(_) => out.push_str("null"),
                Value::Int(n) => out.push_str(itoa::Buffer::new().format(n)),
                Value::Real(x) if x.is_finite() => {
                    let _ = write!(out, "{x:?}");
                }
                Value::Real(_) => out.push_str("null"),
                Value::Text(s) => {
                    out.push_str(&serde_json::to_string(&s).expect("a string is JSON"));
                }
                Value::Blob(b) => {
                    out.push('"');
                    out.push_str(&hex::encode(b));
                    out.push('"');
                }
            }
        }
        out.push('}');
    }
    out.push(']');
    Value::Text(out)
}

/// `jsonb_to_recordset(?{param}::jsonb) AS v(...)` over `columns` (name and type).
fn recordset(param: usize, columns: &[(&str, &str)]) -> String {
    let typed: Vec<String> = columns.iter().map(|(n, t)| format!("{n} {t}")).collect();
    format!(
        "jsonb_to_recordset(?{param}::jsonb) AS v({})",
        typed.join(", ")
    )
}

/// The result columns as [`super::results::inserted`] gives them, with their types.
const RESULT_ROW: [(&str, &str); 20] = [
    ("job_id", "text"),
    ("unit_id", "bigint"),
    ("lease_id", "text"),
    ("worker_id", "text"),
    ("hostname", "text"),
    ("cpu_model", "text"),
    ("engine_kind", "text"),
    ("engine_build", "text"),
    ("digest", "text"),
    ("committed", "bigint"),
    ("solutions", "bigint"),
    ("max_depth", "bigint"),
    ("engine_seconds", "float8"),
    ("verdict", "text"),
    ("received_ms", "bigint"),
    ("account_id", "text"),
    ("standing", "text"),
    ("counts", "text"),
    ("stop", "text"),
    ("body_kept", "bigint"),
];

impl SqlTx<'_> {
    /// [`Units::insert_units`] on PostgreSQL, as one statement.
    pub(super) fn insert_units_at_once(
        &mut self,
        job: &str,
        units: &[crate::store::NewUnit],
        now_ms: i64,
    ) -> StoreResult<()> {
        // a unit cross-checked from the start prefers its runs from different accounts
        let sql = format!(
            "INSERT INTO units (job_id, prefix_json, cursor_json, parent_id, kind, quorum, needed, state, created_ms, needs_new_account) \
             SELECT ?2, decode(v.prefix, 'hex'), decode(v.cursor, 'hex'), v.parent, v.kind, v.quorum, v.quorum, 'open', ?3, \
               CASE WHEN v.quorum > 1 THEN 1 ELSE 0 END FROM {} ORDER BY v.n",
            recordset(
                1,
                &[
                    ("n", "bigint"),
                    ("prefix", "text"),
                    ("cursor", "text"),
                    ("parent", "bigint"),
                    ("kind", "text"),
                    ("quorum", "bigint")
                ]
            )
        );
        let rows = json_rows(
            ["n", "prefix", "cursor", "parent", "kind", "quorum"],
            units.iter().enumerate().map(|(n, u)| {
                [
                    Value::Int(n as i64),
                    Value::Blob(encode_path(&u.unit.prefix)),
                    Value::Blob(encode_path(&u.unit.cursor)),
                    u.parent
                        .map_or(Value::Null(super::Kind::Int), |p| Value::Int(p.0)),
                    Value::Text(u.kind.as_str().to_string()),
                    Value::Int(i64::from(u.quorum)),
                ]
            }),
        );
        self.c.execute_deferred(
            &sql,
            &[rows, Value::Text(job.to_string()), Value::Int(now_ms)],
        )
    }
}

impl Batches for SqlTx<'_> {
    fn report_views(&mut self, asks: &[ViewAsk<'_>]) -> StoreResult<Vec<Option<ReportView>>> {
        if !self.c.is_postgres() || asks.len() == 1 {
            let mut views = Vec::with_capacity(asks.len());
            for ask in asks {
                views.push(self.report_view(ask.lease, ask.account, ask.boards)?);
            }
            self.unfinished_besides = None;
            return Ok(views);
        }
        let (columns, joins) = super::results::view_select(None, "v.account", "v.depth", "v.lim");
        let sql = format!(
            "SELECT v.n, {columns} FROM {} JOIN leases l ON l.id = v.lease {joins} ORDER BY v.n",
            recordset(
                1,
                &[
                    ("n", "bigint"),
                    ("lease", "text"),
                    ("account", "text"),
                    ("depth", "bigint"),
                    ("lim", "bigint")
                ]
            )
        );
        let rows = json_rows(
            ["n", "lease", "account", "depth", "lim"],
            asks.iter().enumerate().map(|(n, a)| {
                [
                    Value::Int(n as i64),
                    Value::Text(a.lease.to_string()),
                    Value::Text(a.account.as_str().to_string()),
                    Value::Int(a.boards.0 as i64),
                    Value::Int(a.boards.1 as i64),
                ]
            }),
        );
        let found = self.c.map(&sql, &[rows], |r| {
            Ok((r.get::<i64>(0)? as usize, super::results::view_at(r, 1)?))
        })?;
        let mut views: Vec<Option<ReportView>> = (0..asks.len()).map(|_| None).collect();
        let mut first = None;
        for (n, (view, accepted, _)) in found {
            if first.is_none() {
                first = Some((view.job.id, accepted));
            }
            if let Some(slot) = views.get_mut(n) {
                *slot = Some(view);
            }
        }
        // every row read the same snapshot: a job's totals are current until changed
        // through this transaction, which keeps this copy current
        self.accepted = first;
        self.unfinished_besides = None;
        Ok(views)
    }

    fn insert_decided_results(
        &mut self,
        results: &[NewResult],
        keep_body: &[bool],
        credit_at: &[Option<i64>],
    ) -> StoreResult<()> {
        let at = |i: usize| credit_at.get(i).copied().flatten();
        let keep = |i: usize| keep_body.get(i).copied().unwrap_or(false);
        if !self.c.is_postgres() || results.len() == 1 {
            for (i, r) in results.iter().enumerate() {
                self.insert_decided_result(r, keep(i))?;
                if let Some(now_ms) = at(i) {
                    let id = self.result_id_by_lease(r.record.lease_id)?;
                    self.credit_result(id, now_ms)?;
                }
            }
            return Ok(());
        }
        let mut columns = RESULT_ROW.to_vec();
        columns.push(("credited_day", "bigint"));
        let values: Vec<String> = columns
            .iter()
            .map(|(name, ty)| match *ty {
                "text" if matches!(*name, "counts" | "stop") => format!("decode(v.{name}, 'hex')"),
                _ => format!("v.{name}"),
            })
            .collect();
        let sql = format!(
            "INSERT INTO results ({}, credited_day) SELECT {} FROM {}",
            super::results::INSERTED,
            values.join(", "),
            recordset(1, &columns)
        );
        let day = |now_ms: i64| now_ms.div_euclid(crate::store::DAY_MS);
        let mut keys: [&str; 21] = [""; 21];
        for (k, (name, _)) in keys.iter_mut().zip(&columns) {
            *k = name;
        }
        let rows = json_rows(
            keys,
            results.iter().enumerate().map(|(i, r)| {
                let v = super::results::inserted(r, keep(i));
                std::array::from_fn(|c| match v.get(c) {
                    Some(value) => value.clone(),
                    None => at(i).map_or(Value::Null(super::Kind::Int), |t| Value::Int(day(t))),
                })
            }),
        );
        self.c.execute_deferred(&sql, &[rows])?;
        // the kept bodies (a job's best boards: a few in a batch, if any)
        for (i, r) in results.iter().enumerate() {
            if keep(i) {
                self.insert_body(r)?;
            }
        }
        // their accounts' totals and day lines, summed per account and day here
        let mut lines: Vec<(&str, i64, i64, i64)> = Vec::new();
        for (i, r) in results.iter().enumerate() {
            let (Some(now_ms), account) = (at(i), r.record.account_id.as_str()) else {
                continue;
            };
            let nodes = r.record.committed as i64;
            match lines
                .iter_mut()
                .find(|l| l.0 == account && l.1 == day(now_ms))
            {
                Some(line) => {
                    line.2 += nodes;
                    line.3 += 1;
                }
                None => lines.push((account, day(now_ms), nodes, 1)),
            }
        }
        if lines.is_empty() {
            return Ok(());
        }
        let sql = format!(
            "WITH lines AS MATERIALIZED (SELECT * FROM {}), \
             totals AS ( \
               UPDATE accounts a SET credit_nodes = a.credit_nodes + t.nodes, \
                 credit_results = a.credit_results + t.results \
               FROM (SELECT account, SUM(nodes)::bigint AS nodes, SUM(results)::bigint AS results \
                     FROM lines GROUP BY account) t \
               WHERE a.id = t.account) \
             INSERT INTO account_days (account_id, day, nodes, results) \
             SELECT account, day, nodes, results FROM lines \
             ON CONFLICT (account_id, day) DO UPDATE SET \
               nodes = account_days.nodes + excluded.nodes, \
               results = account_days.results + excluded.results",
            recordset(
                1,
                &[
                    ("account", "text"),
                    ("day", "bigint"),
                    ("nodes", "bigint"),
                    ("results", "bigint")
                ]
            )
        );
        let rows = json_rows(
            ["account", "day", "nodes", "results"],
            lines.iter().map(|(account, day, nodes, results)| {
                [
                    Value::Text((*account).to_string()),
                    Value::Int(*day),
                    Value::Int(*nodes),
                    Value::Int(*results),
                ]
            }),
        );
        self.c.execute_deferred(&sql, &[rows])
    }

    fn units_decided_by_leases(
        &mut self,
        decided: &[(UnitId, LeaseId, bool, i64)],
    ) -> StoreResult<()> {
        if !self.c.is_postgres() || decided.len() == 1 {
            for (unit, lease, was_active, now_ms) in decided {
                self.unit_decided_by_lease(*unit, *lease, *was_active, *now_ms)?;
            }
            return Ok(());
        }
        self.unfinished_besides = None;
        let sql = format!(
            "UPDATE units SET active_leases = active_leases - v.was_active, results = results + 1, state = 'done', \
               accepted_result_id = (SELECT r.id FROM results r WHERE r.lease_id = v.lease), disputed = 0, decided_ms = v.at \
             FROM {} WHERE units.id = v.id",
            recordset(
                1,
                &[
                    ("id", "bigint"),
                    ("lease", "text"),
                    ("was_active", "bigint"),
                    ("at", "bigint")
                ]
            )
        );
        let rows = json_rows(
            ["id", "lease", "was_active", "at"],
            decided.iter().map(|(unit, lease, active, at)| {
                [
                    Value::Int(unit.0),
                    Value::Text(lease.to_string()),
                    Value::Int(i64::from(*active)),
                    Value::Int(*at),
                ]
            }),
        );
        self.c.execute_deferred(&sql, &[rows])
    }

    fn set_leases_state(&mut self, ids: &[LeaseId], state: LeaseState) -> StoreResult<()> {
        if !self.c.is_postgres() || ids.len() == 1 {
            for id in ids {
                self.set_lease_state(*id, state)?;
            }
            return Ok(());
        }
        let sql = format!(
            "UPDATE leases SET state = ?2 FROM {} WHERE leases.id = v.id",
            recordset(1, &[("id", "text")])
        );
        let rows = json_rows(["id"], ids.iter().map(|id| [Value::Text(id.to_string())]));
        self.c
            .execute_deferred(&sql, &[rows, Value::Text(state.as_str().to_string())])
    }

    fn workers_units_done(&mut self, done: &[(WorkerId, u64)]) -> StoreResult<()> {
        if !self.c.is_postgres() || done.len() == 1 {
            for (worker, n) in done {
                for _ in 0..*n {
                    self.worker_unit_done(*worker)?;
                }
            }
            return Ok(());
        }
        let sql = format!(
            "UPDATE workers SET units_done = units_done + v.n FROM {} WHERE workers.id = v.id",
            recordset(1, &[("id", "text"), ("n", "bigint")])
        );
        let rows = json_rows(
            ["id", "n"],
            done.iter()
                .map(|(id, n)| [Value::Text(id.to_string()), Value::Int(*n as i64)]),
        );
        self.c.execute_deferred(&sql, &[rows])
    }

    fn lease_views(
        &mut self,
        who: &[(WorkerId, &AccountId)],
    ) -> StoreResult<Vec<Option<LeaseView>>> {
        if !self.c.is_postgres() || who.len() == 1 {
            let mut views = Vec::with_capacity(who.len());
            for (worker, account) in who {
                views.push(self.lease_view(*worker, account)?);
            }
            return Ok(views);
        }
        let sql = format!(
            "SELECT v.n, {} FROM {} JOIN workers w ON w.id = v.worker LEFT JOIN accounts a ON a.id = v.account ORDER BY v.n",
            super::leases::view_columns("v.worker", "v.account", "v.volunteer"),
            recordset(
                1,
                &[
                    ("n", "bigint"),
                    ("worker", "text"),
                    ("account", "text"),
                    ("volunteer", "bigint")
                ]
            )
        );
        let rows = json_rows(
            ["n", "worker", "account", "volunteer"],
            who.iter().enumerate().map(|(n, (worker, account))| {
                [
                    Value::Int(n as i64),
                    Value::Text(worker.to_string()),
                    Value::Text(account.as_str().to_string()),
                    Value::Int(i64::from(!account.is_operator())),
                ]
            }),
        );
        let found = self.c.map(&sql, &[rows], |r| {
            Ok((r.get::<i64>(0)? as usize, super::leases::view_at(r, 1)?))
        })?;
        let mut views: Vec<Option<LeaseView>> = (0..who.len()).map(|_| None).collect();
        for (n, view) in found {
            if let Some(slot) = views.get_mut(n) {
                *slot = Some(view);
            }
        }
        Ok(views)
    }

    fn claim_open_units(&mut self, units: &[UnitId]) -> StoreResult<Vec<UnitId>> {
        if !self.c.is_postgres() || units.is_empty() {
            return Ok(units.to_vec());
        }
        let ids = json_rows(["id"], units.iter().map(|u| [Value::Int(u.0)]));
        let sql = format!(
            "SELECT u.id FROM {} JOIN units u ON u.id = v.id WHERE u.state = 'open' \
             ORDER BY u.id FOR UPDATE OF u SKIP LOCKED",
            recordset(1, &[("id", "bigint")])
        );
        self.c.map(&sql, &[ids], |r| r.get(0).map(UnitId))
    }

    fn open_units_with_runs(&mut self, open: usize, disputed: usize) -> StoreResult<Vec<OpenUnit>> {
        // one statement on both backends: few rows, two index lookups each
        let agg = |table: &str, alias: &str, filter: &str| {
            let joined = format!("{alias}.worker_id || ' ' || {alias}.account_id");
            let agg = if self.c.is_postgres() {
                format!("string_agg({joined}, ',')")
            } else {
                format!("group_concat({joined}, ',')")
            };
            format!("(SELECT {agg} FROM {table} {alias} WHERE {alias}.unit_id = u.id AND {filter})")
        };
        let columns = format!(
            "{U_COLUMNS}, u.needs_new_account, {}, {}",
            agg("leases", "l", "l.state = 'active'"),
            agg("results", "r", "r.verdict NOT IN ('wrong', 'void')")
        );
        // on PostgreSQL each unit read is claimed as it is read (see the trait): a row a
        // report batch holds is passed over for the next, so the limit counts claimed rows
        let claim = if self.c.is_postgres() {
            " FOR UPDATE OF u SKIP LOCKED"
        } else {
            ""
        };
        let sql = format!(
            "SELECT * FROM (SELECT {columns}, 0 AS part FROM units u INDEXED BY units_disputed \
               JOIN jobs j ON j.id = u.job_id \
               WHERE u.state = 'open' AND u.disputed = 1 AND j.state = 'running' AND j.paused = 0 \
               ORDER BY u.id LIMIT ?2{claim}) AS disputed \
             UNION ALL SELECT * FROM (SELECT {columns}, 1 AS part FROM units u INDEXED BY units_by_state \
               JOIN jobs j ON j.id = u.job_id \
               WHERE u.state = 'open' AND j.state = 'running' AND j.paused = 0 \
               ORDER BY u.id LIMIT ?1{claim}) AS oldest"
        );
        const AT: usize = width(U_COLUMNS);
        let mut units = self.c.map(&sql, args![open as i64, disputed as i64], |r| {
            let mut runs = Vec::new();
            for at in [AT + 1, AT + 2] {
                if let Some(list) = r.get::<Option<String>>(at)? {
                    for run in list.split(',') {
                        let (worker, account) = run
                            .split_once(' ')
                            .ok_or_else(|| StoreError::Corrupt(format!("a run reads {run:?}")))?;
                        runs.push((
                            worker
                                .parse()
                                .map_err(|e| StoreError::Corrupt(format!("{e}")))?,
                            account
                                .parse()
                                .map_err(|e| StoreError::Corrupt(format!("{e}")))?,
                        ));
                    }
                }
            }
            Ok((
                r.get::<i64>(AT + 3)?,
                OpenUnit {
                    unit: super::units::from_row_at(r, 0)?,
                    disputed: r.get::<i64>(AT + 3)? == 0,
                    needs_new_account: r.get(AT)?,
                    runs,
                },
            ))
        })?;
        // disputed first, each part in id order
        units.sort_by_key(|(part, u)| (*part, u.unit.id.0));
        Ok(units.into_iter().map(|(_, u)| u).collect())
    }

    fn insert_leases(&mut self, leases: &[LeaseRecord]) -> StoreResult<()> {
        if !self.c.is_postgres() || leases.len() == 1 {
            for l in leases {
                self.insert_lease(l)?;
                self.lease_taken(l.unit_id)?;
            }
            return Ok(());
        }
        let columns = [
            ("id", "text"),
            ("unit_id", "bigint"),
            ("worker_id", "text"),
            ("hostname", "text"),
            ("budget", "bigint"),
            ("created_ms", "bigint"),
            ("deadline_ms", "bigint"),
            ("state", "text"),
            ("account_id", "text"),
        ];
        let names = columns.map(|(name, _)| name);
        let rows = json_rows(
            names,
            leases.iter().map(|l| {
                [
                    Value::Text(l.id.to_string()),
                    Value::Int(l.unit_id.0),
                    Value::Text(l.worker_id.to_string()),
                    Value::Text(l.hostname.clone()),
                    Value::Int(encode_budget(l.budget)),
                    Value::Int(l.created_ms),
                    Value::Int(l.deadline_ms),
                    Value::Text(l.state.as_str().to_string()),
                    Value::Text(l.account_id.as_str().to_string()),
                ]
            }),
        );
        let insert = format!(
            "INSERT INTO leases ({}) SELECT {} FROM {}",
            names.join(", "),
            names.map(|n| format!("v.{n}")).join(", "),
            recordset(1, &columns)
        );
        self.c
            .execute_deferred(&insert, std::slice::from_ref(&rows))?;
        // `Units::lease_taken` for each unit (see `units.rs`, `adjust`)
        let taken = format!(
            "UPDATE units SET active_leases = active_leases + 1, \
               state = CASE WHEN state IN ('done', 'cancelled') THEN state \
                            WHEN results + active_leases + 1 < needed THEN 'open' ELSE 'busy' END \
             FROM {} WHERE units.id = v.unit_id",
            recordset(1, &[("unit_id", "bigint")])
        );
        self.c.execute_deferred(&taken, &[rows])
    }

    fn workers_seen_leasing(
        &mut self,
        seen: &[(WorkerId, Option<(EngineKind, &str)>)],
        now_ms: i64,
    ) -> StoreResult<()> {
        if !self.c.is_postgres() {
            for (worker, engine) in seen {
                let seen = Seen {
                    engine: *engine,
                    ..Seen::default()
                };
                self.worker_seen(*worker, now_ms, &seen)?;
            }
            return Ok(());
        }
        // (in the workers' order, skipping a row a report batch holds: see the trait)
        let sql = format!(
            "UPDATE workers SET last_seen_ms = ?2, engine_kind = COALESCE(s.kind, engine_kind), \
               engine_build = COALESCE(s.build, engine_build) \
             FROM (SELECT w.id, v.kind, v.build FROM {} JOIN workers w ON w.id = v.id \
                   ORDER BY w.id FOR UPDATE OF w SKIP LOCKED) AS s \
             WHERE workers.id = s.id",
            recordset(1, &[("id", "text"), ("kind", "text"), ("build", "text")])
        );
        let rows = json_rows(
            ["id", "kind", "build"],
            seen.iter().map(|(worker, engine)| {
                [
                    Value::Text(worker.to_string()),
                    engine.map_or(Value::Null(super::Kind::Text), |(k, _)| {
                        Value::Text(k.as_str().to_string())
                    }),
                    engine.map_or(Value::Null(super::Kind::Text), |(_, b)| {
                        Value::Text(b.to_string())
                    }),
                ]
            }),
        );
        self.c.execute_deferred(&sql, &[rows, Value::Int(now_ms)])
    }

    fn extend_leases_beside_reports(
        &mut self,
        worker: WorkerId,
        leases: &[LeaseId],
        deadline_ms: i64,
    ) -> StoreResult<usize> {
        if !self.c.is_postgres() || leases.is_empty() {
            let mut extended = 0;
            for id in leases {
                extended += usize::from(self.extend_lease(*id, worker, deadline_ms)?);
            }
            return Ok(extended);
        }
        // (in the leases' order, skipping a row a report batch holds: see the trait)
        let sql = format!(
            "UPDATE leases SET deadline_ms = ?2 \
             FROM (SELECT l.id FROM {} JOIN leases l ON l.id = v.id \
                   WHERE l.worker_id = ?3 AND l.state = 'active' \
                   ORDER BY l.id FOR UPDATE OF l SKIP LOCKED) AS s \
             WHERE leases.id = s.id",
            recordset(1, &[("id", "text")])
        );
        let rows = json_rows(
            ["id"],
            leases.iter().map(|id| [Value::Text(id.to_string())]),
        );
        self.c.execute(
            &sql,
            &[
                rows,
                Value::Int(deadline_ms),
                Value::Text(worker.to_string()),
            ],
        )
    }

    fn worker_seen_beside_reports(
        &mut self,
        worker: WorkerId,
        now_ms: i64,
        seen: &Seen<'_>,
    ) -> StoreResult<()> {
        if !self.c.is_postgres() {
            return self.worker_seen(worker, now_ms, seen);
        }
        let sql = format!(
            "UPDATE workers SET {} \
             FROM (SELECT id FROM workers WHERE id = ? FOR UPDATE SKIP LOCKED) AS s \
             WHERE workers.id = s.id",
            super::workers::SEEN
        );
        self.c
            .execute_deferred(&sql, &super::workers::seen_values(worker, now_ms, seen))
    }

    fn holds_decided_leases(&mut self, worker: WorkerId) -> StoreResult<bool> {
        self.c.one(
            // (the unit's state read for each of the worker's leases: see `decided_unit`)
            &format!(
                "SELECT EXISTS (SELECT 1 FROM leases l \
                   WHERE l.worker_id = ? AND l.state = 'active' AND {})",
                super::leases::decided_unit("l")
            ),
            args![worker.to_string()],
        )
    }
}
