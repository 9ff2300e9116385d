//! Results: every report, its digest and its verdict.
//!
//! Row fields mirror the columns documented in `migrations/0001_init.sql`. Recording and
//! judging results is on the write path (synchronous, see [`super::writer`]); the rest
//! are `async` reads for status and the dashboard.
#![allow(missing_docs)]

use rusqlite::{Connection, OptionalExtension, Row, params};
use sqlx::{FromRow, SqliteConnection};

use super::StoreError;

/// A stored result.
#[derive(Debug, Clone, FromRow)]
pub struct ResultRow {
    pub id: i64,
    pub job_id: String,
    pub unit_id: i64,
    pub lease_id: String,
    pub worker_id: String,
    pub hostname: String,
    pub cpu_model: String,
    pub engine_kind: String,
    pub engine_build: String,
    pub digest: String,
    pub result_json: String,
    pub committed: i64,
    pub solutions: i64,
    pub max_depth: i64,
    pub engine_seconds: f64,
    pub verdict: String,
    pub received_ms: i64,
}

/// The columns [`ResultRow::from_row`] reads, in order.
const COLUMNS: &str = "id, job_id, unit_id, lease_id, worker_id, hostname, cpu_model, engine_kind, \
     engine_build, digest, result_json, committed, solutions, max_depth, engine_seconds, verdict, received_ms";

/// [`COLUMNS`] with an empty `result_json` (for decisions, which compare digests).
const COLUMNS_NO_RESULT: &str = "id, job_id, unit_id, lease_id, worker_id, hostname, cpu_model, engine_kind, \
     engine_build, digest, '' AS result_json, committed, solutions, max_depth, engine_seconds, verdict, received_ms";

impl ResultRow {
    /// Reads a row of [`COLUMNS`] (by position, see `units::UnitRow::from_row`).
    fn from_row(r: &Row<'_>) -> rusqlite::Result<ResultRow> {
        Ok(ResultRow {
            id: r.get(0)?,
            job_id: r.get(1)?,
            unit_id: r.get(2)?,
            lease_id: r.get(3)?,
            worker_id: r.get(4)?,
            hostname: r.get(5)?,
            cpu_model: r.get(6)?,
            engine_kind: r.get(7)?,
            engine_build: r.get(8)?,
            digest: r.get(9)?,
            result_json: r.get(10)?,
            committed: r.get(11)?,
            solutions: r.get(12)?,
            max_depth: r.get(13)?,
            engine_seconds: r.get(14)?,
            verdict: r.get(15)?,
            received_ms: r.get(16)?,
        })
    }
}

/// Inserts a result; returns its id.
pub fn insert(c: &Connection, r: &ResultRow) -> Result<i64, StoreError> {
    c.prepare_cached(
        "INSERT INTO results (job_id, unit_id, lease_id, worker_id, hostname, cpu_model, engine_kind, engine_build, digest, result_json, committed, solutions, max_depth, engine_seconds, verdict, received_ms) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )?
    .execute(params![
        r.job_id,
        r.unit_id,
        r.lease_id,
        r.worker_id,
        r.hostname,
        r.cpu_model,
        r.engine_kind,
        r.engine_build,
        r.digest,
        r.result_json,
        r.committed,
        r.solutions,
        r.max_depth,
        r.engine_seconds,
        r.verdict,
        r.received_ms
    ])?;
    Ok(c.last_insert_rowid())
}

/// The result reported on a lease, if any.
pub fn by_lease(c: &Connection, lease_id: &str) -> Result<Option<ResultRow>, StoreError> {
    Ok(
        c.prepare_cached(&format!("SELECT {COLUMNS} FROM results WHERE lease_id = ?"))?
            .query_row([lease_id], ResultRow::from_row)
            .optional()?,
    )
}

/// One result.
pub fn get(c: &Connection, id: i64) -> Result<Option<ResultRow>, StoreError> {
    Ok(
        c.prepare_cached(&format!("SELECT {COLUMNS} FROM results WHERE id = ?"))?
            .query_row([id], ResultRow::from_row)
            .optional()?,
    )
}

/// The valid (not wrong) results of a unit, *without* their `result_json` (empty: the
/// decision compares digests; [`get`] reads a whole row).
pub fn for_unit(c: &Connection, unit_id: i64) -> Result<Vec<ResultRow>, StoreError> {
    let mut q = c.prepare_cached(&format!(
        "SELECT {COLUMNS_NO_RESULT} FROM results WHERE unit_id = ? AND verdict != 'wrong' ORDER BY id"
    ))?;
    let rows = q.query_map([unit_id], ResultRow::from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Sets a result's verdict.
pub fn set_verdict(c: &Connection, id: i64, verdict: &str) -> Result<(), StoreError> {
    c.prepare_cached("UPDATE results SET verdict = ? WHERE id = ?")?
        .execute(params![verdict, id])?;
    Ok(())
}

/// The accepted results of a job (for conservation).
pub fn accepted_for_job(c: &Connection, job_id: &str) -> Result<Vec<ResultRow>, StoreError> {
    let mut q = c.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM results WHERE job_id = ? AND verdict = 'accepted' ORDER BY unit_id"
    ))?;
    let rows = q.query_map([job_id], ResultRow::from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The accepted results of a job that carry solutions, first `limit`.
pub async fn with_solutions(
    c: &mut SqliteConnection,
    job_id: &str,
    limit: i64,
) -> Result<Vec<ResultRow>, StoreError> {
    Ok(sqlx::query_as("SELECT * FROM results WHERE job_id = ? AND verdict = 'accepted' AND solutions > 0 ORDER BY unit_id LIMIT ?")
        .bind(job_id)
        .bind(limit)
        .fetch_all(c)
        .await?)
}

/// The accepted result that went deepest (earliest unit on ties).
pub async fn deepest(
    c: &mut SqliteConnection,
    job_id: &str,
) -> Result<Option<ResultRow>, StoreError> {
    Ok(sqlx::query_as("SELECT * FROM results WHERE job_id = ? AND verdict = 'accepted' ORDER BY max_depth DESC, unit_id LIMIT 1")
        .bind(job_id)
        .fetch_optional(c)
        .await?)
}

/// (committed, engine_seconds, hostname, cpu_model, engine_kind) of accepted or agreeing
/// results with a measurable run time, for per-core rates; `job` narrows to one job.
pub async fn rate_samples(
    c: &mut SqliteConnection,
    job: Option<&str>,
    since_ms: i64,
) -> Result<Vec<(i64, f64, String, String, String)>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT committed, engine_seconds, hostname, cpu_model, engine_kind FROM results \
         WHERE verdict IN ('accepted', 'agree') AND engine_seconds >= 0.01 AND received_ms >= ? AND (? IS NULL OR job_id = ?)",
    )
    .bind(since_ms)
    .bind(job)
    .bind(job)
    .fetch_all(c)
    .await?)
}

/// Nodes received since `since_ms`: (all results, accepted-or-agreeing results).
pub async fn nodes_since(
    c: &mut SqliteConnection,
    job: Option<&str>,
    since_ms: i64,
) -> Result<(i64, i64), StoreError> {
    Ok(sqlx::query_as(
        "SELECT COALESCE(SUM(committed), 0), COALESCE(SUM(CASE WHEN verdict IN ('accepted', 'agree') THEN committed ELSE 0 END), 0) \
         FROM results WHERE received_ms >= ? AND (? IS NULL OR job_id = ?)",
    )
    .bind(since_ms)
    .bind(job)
    .bind(job)
    .fetch_one(c)
    .await?)
}

/// Accepted nodes per minute bucket since `since_ms` (minute, raw nodes, verified nodes).
pub async fn per_minute(
    c: &mut SqliteConnection,
    since_ms: i64,
) -> Result<Vec<(i64, i64, i64, i64)>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT received_ms / 60000, SUM(committed), SUM(CASE WHEN verdict IN ('accepted', 'agree') THEN committed ELSE 0 END), COUNT(*) \
         FROM results WHERE received_ms >= ? GROUP BY received_ms / 60000 ORDER BY 1",
    )
    .bind(since_ms)
    .fetch_all(c)
    .await?)
}

/// Number of results marked wrong.
pub async fn wrong_count(c: &mut SqliteConnection) -> Result<i64, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT COUNT(*) FROM results WHERE verdict = 'wrong'")
            .fetch_one(c)
            .await?,
    )
}

/// Per (verdict, engine kind, engine build) of a job: results and nodes.
pub async fn breakdown(
    c: &mut SqliteConnection,
    job_id: &str,
) -> Result<Vec<(String, String, String, i64, i64)>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT verdict, engine_kind, engine_build, COUNT(*), COALESCE(SUM(committed), 0) FROM results WHERE job_id = ? \
         GROUP BY verdict, engine_kind, engine_build ORDER BY 1, 2, 3",
    )
    .bind(job_id)
    .fetch_all(c)
    .await?)
}
