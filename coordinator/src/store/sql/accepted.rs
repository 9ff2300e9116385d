//! [`Batches::record_accepted`] on PostgreSQL: a report batch's part accepted on its own,
//! as one statement.
//!
//! The part's six kinds of change (leases reported, results inserted, units decided,
//! workers' units done, jobs' accepted totals, continuations inserted) were six set-based
//! statements; on the server each statement has a fixed cost (its messages, its plan
//! checked, its executor started, its tables and indexes locked) that a handful of rows
//! does not amortise. Here they are data-modifying `WITH` parts of one statement, over
//! four JSON parameters (see `batch.rs`). Every part of a statement sees the same
//! snapshot, so none may read what another writes: a unit's accepted result is the id
//! its insert `RETURNING`s, joined by the lease (a lease has at most one result), and no
//! row is changed by two parts (a decided unit is updated, its continuation is a new
//! row; the part's units, workers and jobs are distinct). A job's accepted totals are
//! computed here from the copy the batch's view read keeps (as [`Jobs::add_accepted`]
//! computes them), and written as text.
//!
//! [`Batches::record_accepted`]: crate::store::Batches::record_accepted
//! [`Jobs::add_accepted`]: crate::store::Jobs::add_accepted

use std::sync::LazyLock;

use super::batch::{
    MAX_ROWS, column_keys, json_rows, recordset, recordset_as, result_columns, result_row,
    result_values,
};
use super::codec::encode_path;
use super::{SqlTx, Value};
use crate::store::tx::StoreResult;
use crate::store::{AcceptedPart, LeaseState};

/// What a result's row carries besides its own columns: the unit it decides (and its
/// lease), whether that lease was active, and when.
const DECIDES: [(&str, &str); 4] = [
    ("d_unit", "bigint"),
    ("d_lease", "text"),
    ("was_active", "bigint"),
    ("at", "bigint"),
];

/// A continuation's row: its place (ids are given in this order), job, unit, how it came
/// to be, its quorum and creation time.
const CONTINUATION: [(&str, &str); 8] = [
    ("n", "bigint"),
    ("job", "text"),
    ("prefix", "text"),
    ("cursor", "text"),
    ("parent", "bigint"),
    ("kind", "text"),
    ("quorum", "bigint"),
    ("at", "bigint"),
];

/// The statement: `?1` the results (with the units they decide), `?2` the workers' units
/// done, `?3` the jobs' accepted totals, `?4` the continuations, `?5` the leases' state.
static STATEMENT: LazyLock<String> = LazyLock::new(|| {
    let columns = result_columns(&DECIDES);
    format!(
        "WITH v AS MATERIALIZED (SELECT * FROM {results}), \
         r AS (INSERT INTO results ({inserted}, credited_day) SELECT {values} FROM v \
               RETURNING id, lease_id), \
         l AS (UPDATE leases SET state = ?5 FROM v WHERE leases.id = v.d_lease), \
         u AS (UPDATE units SET active_leases = active_leases - v.was_active, \
                 results = results + 1, state = 'done', accepted_result_id = r.id, \
                 disputed = 0, decided_ms = v.at \
               FROM v JOIN r ON r.lease_id = v.d_lease WHERE units.id = v.d_unit), \
         w AS (UPDATE workers SET units_done = units_done + x.n FROM {workers} \
               WHERE workers.id = x.id), \
         j AS (UPDATE jobs SET accepted_json = x.accepted, \
                 accepted_solutions = accepted_solutions + x.solutions \
               FROM {jobs} WHERE jobs.id = x.id) \
         INSERT INTO units (job_id, prefix_json, cursor_json, parent_id, kind, quorum, needed, \
           state, created_ms, needs_new_account) \
         SELECT c.job, decode(c.prefix, 'hex'), decode(c.cursor, 'hex'), c.parent, c.kind, \
           c.quorum, c.quorum, 'open', c.at, CASE WHEN c.quorum > 1 THEN 1 ELSE 0 END \
         FROM {continuations} ORDER BY c.n",
        results = recordset(1, &columns),
        inserted = super::results::INSERTED,
        values = result_values(&columns),
        workers = recordset_as(2, "x", &[("id", "text"), ("n", "bigint")]),
        jobs = recordset_as(
            3,
            "x",
            &[
                ("id", "text"),
                ("accepted", "text"),
                ("solutions", "bigint")
            ]
        ),
        continuations = recordset_as(4, "c", &CONTINUATION),
    )
});

/// Whether `part` is written by one statement: each result decides its own unit (the
/// rows at the same index), and no parameter carries more than [`MAX_ROWS`] rows.
pub(super) fn fits_one_statement(part: &AcceptedPart) -> bool {
    let continuations: usize = part.jobs.iter().map(|j| j.continuations.len()).sum();
    part.units.len() == part.results.len()
        && part
            .results
            .iter()
            .zip(&part.units)
            .all(|(r, u)| r.record.unit_id == u.0 && r.record.lease_id == u.1)
        && part.results.len() <= MAX_ROWS
        && continuations <= MAX_ROWS
}

impl SqlTx<'_> {
    /// [`crate::store::Batches::record_accepted`] as one statement (see the module docs),
    /// then the kept bodies and volunteers' credit, each one statement when there are any.
    pub(super) fn record_accepted_at_once(&mut self, part: &AcceptedPart) -> StoreResult<()> {
        // each job's totals as they will be, from the copy the batch's view read keeps
        let mut totals = Vec::with_capacity(part.jobs.len());
        for job in &part.jobs {
            let text = self.changed_counts(job.id, "accepted_json", |c| {
                e2fleet_engine::unit::add_counts(c, &job.nodes)
            })?;
            totals.push(text);
        }
        let keep = |i: usize| part.keep_body.get(i).copied().unwrap_or(false);
        let at = |i: usize| part.credit_at.get(i).copied().flatten();
        let results = json_rows(
            column_keys::<25>(&result_columns(&DECIDES)),
            part.results.iter().zip(&part.units).enumerate().map(
                |(i, (r, (unit, lease, was_active, when)))| {
                    result_row(
                        r,
                        keep(i),
                        at(i),
                        [
                            Value::Int(unit.0),
                            Value::Text(lease.to_string()),
                            Value::Int(i64::from(*was_active)),
                            Value::Int(*when),
                        ],
                    )
                },
            ),
        );
        let workers = json_rows(
            ["id", "n"],
            part.workers
                .iter()
                .map(|(id, n)| [Value::Text(id.to_string()), Value::Int(*n as i64)]),
        );
        let jobs = json_rows(
            ["id", "accepted", "solutions"],
            part.jobs.iter().zip(&totals).map(|(job, text)| {
                [
                    Value::Text(job.id.to_string()),
                    Value::Text(text.clone()),
                    Value::Int(job.solutions as i64),
                ]
            }),
        );
        let continuations = json_rows(
            CONTINUATION.map(|c| c.0),
            part.jobs
                .iter()
                .flat_map(|job| job.continuations.iter().map(move |u| (job, u)))
                .enumerate()
                .map(|(n, (job, u))| {
                    [
                        Value::Int(n as i64),
                        Value::Text(job.id.to_string()),
                        Value::Blob(encode_path(&u.unit.prefix)),
                        Value::Blob(encode_path(&u.unit.cursor)),
                        u.parent
                            .map_or(Value::Null(super::Kind::Int), |p| Value::Int(p.0)),
                        Value::Text(u.kind.as_str().to_string()),
                        Value::Int(i64::from(u.quorum)),
                        Value::Int(job.now),
                    ]
                }),
        );
        self.c.execute_deferred(
            &STATEMENT,
            &[
                results,
                workers,
                jobs,
                continuations,
                Value::Text(LeaseState::Reported.as_str().to_string()),
            ],
        )?;
        // units became done: what was known of a job's other units is not any more
        self.unfinished_besides = None;
        for (job, text) in part.jobs.iter().zip(totals) {
            self.accepted = Some((job.id, text));
        }
        self.bodies_and_credit(&part.results, &part.keep_body, &part.credit_at)
    }
}
