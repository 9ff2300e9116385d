//! Jobs: creation, state and the running per-depth totals.
//!
//! Row fields mirror the columns documented in `migrations/0001_init.sql`. State changes
//! are on the write path (synchronous, see [`super::writer`]); `get_tx` and
//! `get_with_puzzle_tx` are the write path's reads of the same rows the `async` reads
//! return.
#![allow(missing_docs)]

use rusqlite::{Connection, OptionalExtension, Row, params};
use sqlx::{FromRow, SqliteConnection};

use super::{StoreError, parse_json};

/// A stored job.
#[derive(Debug, Clone, FromRow)]
pub struct JobRow {
    pub id: String,
    pub name: String,
    pub puzzle_json: String,
    pub order_spec: String,
    pub depths: i64,
    pub split_depth: i64,
    pub budget: i64,
    pub replicas: i64,
    pub spot_check: f64,
    pub state: String,
    pub created_ms: i64,
    pub finished_ms: Option<i64>,
    pub enumeration_json: String,
    pub enumeration_solutions: i64,
    pub split_json: String,
    pub accepted_json: String,
    pub accepted_solutions: i64,
    pub conservation_ok: Option<bool>,
}

impl JobRow {
    /// Per-depth counts of a JSON column.
    pub fn counts(&self, column: &str) -> Result<Vec<u64>, StoreError> {
        let text = match column {
            "enumeration" => &self.enumeration_json,
            "split" => &self.split_json,
            _ => &self.accepted_json,
        };
        parse_json(text, column)
    }

    /// Reads a row in the column order of [`LIGHT`] / [`ALL`] (by position, see
    /// `units::UnitRow::from_row`).
    fn from_row(r: &Row<'_>) -> rusqlite::Result<JobRow> {
        Ok(JobRow {
            id: r.get(0)?,
            name: r.get(1)?,
            puzzle_json: r.get(2)?,
            order_spec: r.get(3)?,
            depths: r.get(4)?,
            split_depth: r.get(5)?,
            budget: r.get(6)?,
            replicas: r.get(7)?,
            spot_check: r.get(8)?,
            state: r.get(9)?,
            created_ms: r.get(10)?,
            finished_ms: r.get(11)?,
            enumeration_json: r.get(12)?,
            enumeration_solutions: r.get(13)?,
            split_json: r.get(14)?,
            accepted_json: r.get(15)?,
            accepted_solutions: r.get(16)?,
            conservation_ok: r.get(17)?,
        })
    }
}

/// Inserts a job.
pub fn insert(c: &Connection, j: &JobRow) -> Result<(), StoreError> {
    c.prepare_cached(
        "INSERT INTO jobs (id, name, puzzle_json, order_spec, depths, split_depth, budget, replicas, spot_check, state, created_ms, enumeration_json, enumeration_solutions, split_json, accepted_json) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )?
    .execute(params![
        j.id,
        j.name,
        j.puzzle_json,
        j.order_spec,
        j.depths,
        j.split_depth,
        j.budget,
        j.replicas,
        j.spot_check,
        j.state,
        j.created_ms,
        j.enumeration_json,
        j.enumeration_solutions,
        j.split_json,
        j.accepted_json
    ])?;
    Ok(())
}

/// Every column but the puzzle, which only job set-up needs (it can be tens of KiB and
/// the hot paths read the job row several times per report).
const LIGHT: &str = "SELECT id, name, '' AS puzzle_json, order_spec, depths, split_depth, budget, replicas, \
     spot_check, state, created_ms, finished_ms, enumeration_json, enumeration_solutions, split_json, \
     accepted_json, accepted_solutions, conservation_ok FROM jobs";

/// Every column, in the order of [`LIGHT`].
const ALL: &str = "SELECT id, name, puzzle_json, order_spec, depths, split_depth, budget, replicas, \
     spot_check, state, created_ms, finished_ms, enumeration_json, enumeration_solutions, split_json, \
     accepted_json, accepted_solutions, conservation_ok FROM jobs";

/// One job, without its puzzle (`puzzle_json` is empty).
pub async fn get(c: &mut SqliteConnection, id: &str) -> Result<Option<JobRow>, StoreError> {
    let sql = format!("{LIGHT} WHERE id = ?");
    Ok(sqlx::query_as(&sql).bind(id).fetch_optional(c).await?)
}

/// One job with its puzzle.
pub async fn get_with_puzzle(
    c: &mut SqliteConnection,
    id: &str,
) -> Result<Option<JobRow>, StoreError> {
    Ok(sqlx::query_as("SELECT * FROM jobs WHERE id = ?")
        .bind(id)
        .fetch_optional(c)
        .await?)
}

/// All jobs, newest first, without their puzzles.
pub async fn list(c: &mut SqliteConnection) -> Result<Vec<JobRow>, StoreError> {
    let sql = format!("{LIGHT} ORDER BY created_ms DESC");
    Ok(sqlx::query_as(&sql).fetch_all(c).await?)
}

/// One job, without its puzzle, on the write path.
pub fn get_tx(c: &Connection, id: &str) -> Result<Option<JobRow>, StoreError> {
    Ok(c.prepare_cached(&format!("{LIGHT} WHERE id = ?"))?
        .query_row([id], JobRow::from_row)
        .optional()?)
}

/// What the report path needs of a job (without copying its per-depth totals).
#[derive(Debug, Clone)]
pub struct JobHead {
    pub id: String,
    pub state: String,
    pub replicas: i64,
    pub spot_check: f64,
}

/// A job's [`JobHead`], on the write path.
pub fn head_tx(c: &Connection, id: &str) -> Result<Option<JobHead>, StoreError> {
    Ok(
        c.prepare_cached("SELECT id, state, replicas, spot_check FROM jobs WHERE id = ?")?
            .query_row([id], |r| {
                Ok(JobHead {
                    id: r.get(0)?,
                    state: r.get(1)?,
                    replicas: r.get(2)?,
                    spot_check: r.get(3)?,
                })
            })
            .optional()?,
    )
}

/// One job with its puzzle, on the write path.
pub fn get_with_puzzle_tx(c: &Connection, id: &str) -> Result<Option<JobRow>, StoreError> {
    Ok(c.prepare_cached(&format!("{ALL} WHERE id = ?"))?
        .query_row([id], JobRow::from_row)
        .optional()?)
}

/// Replaces the running totals.
pub fn set_totals(
    c: &Connection,
    id: &str,
    accepted: &[u64],
    accepted_solutions: i64,
    split: &[u64],
) -> Result<(), StoreError> {
    c.prepare_cached(
        "UPDATE jobs SET accepted_json = ?, accepted_solutions = ?, split_json = ? WHERE id = ?",
    )?
    .execute(params![
        serde_json::to_string(accepted).expect("counts serialise"),
        accepted_solutions,
        serde_json::to_string(split).expect("counts serialise"),
        id
    ])?;
    Ok(())
}

/// A job's running accepted totals: per-depth nodes and solutions.
pub fn accepted_tx(c: &Connection, id: &str) -> Result<(Vec<u64>, i64), StoreError> {
    let (json, solutions): (String, i64) = c
        .prepare_cached("SELECT accepted_json, accepted_solutions FROM jobs WHERE id = ?")?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok((parse_json(&json, "accepted")?, solutions))
}

/// Replaces the running accepted totals.
pub fn set_accepted(
    c: &Connection,
    id: &str,
    accepted: &[u64],
    accepted_solutions: i64,
) -> Result<(), StoreError> {
    c.prepare_cached("UPDATE jobs SET accepted_json = ?, accepted_solutions = ? WHERE id = ?")?
        .execute(params![
            serde_json::to_string(accepted).expect("counts serialise"),
            accepted_solutions,
            id
        ])?;
    Ok(())
}

/// Marks a job finished (complete or cancelled).
pub fn finish(
    c: &Connection,
    id: &str,
    state: &str,
    now_ms: i64,
    conservation_ok: Option<bool>,
) -> Result<(), StoreError> {
    c.prepare_cached("UPDATE jobs SET state = ?, finished_ms = ?, conservation_ok = ? WHERE id = ? AND state = 'running'")?
        .execute(params![state, now_ms, conservation_ok, id])?;
    Ok(())
}

/// Re-opens a completed job (a late result disputes one of its units).
pub fn reopen(c: &Connection, id: &str) -> Result<bool, StoreError> {
    Ok(c.prepare_cached(
        "UPDATE jobs SET state = 'running', finished_ms = NULL, conservation_ok = NULL \
         WHERE id = ? AND state = 'complete'",
    )?
    .execute([id])?
        == 1)
}
