//! Jobs: creation, state and the running per-depth totals.
//!
//! Row fields mirror the columns documented in `migrations/0001_init.sql`.
#![allow(missing_docs)]

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
}

/// Inserts a job.
pub async fn insert(c: &mut SqliteConnection, j: &JobRow) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO jobs (id, name, puzzle_json, order_spec, depths, split_depth, budget, replicas, spot_check, state, created_ms, enumeration_json, enumeration_solutions, split_json, accepted_json) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(&j.id)
    .bind(&j.name)
    .bind(&j.puzzle_json)
    .bind(&j.order_spec)
    .bind(j.depths)
    .bind(j.split_depth)
    .bind(j.budget)
    .bind(j.replicas)
    .bind(j.spot_check)
    .bind(&j.state)
    .bind(j.created_ms)
    .bind(&j.enumeration_json)
    .bind(j.enumeration_solutions)
    .bind(&j.split_json)
    .bind(&j.accepted_json)
    .execute(c)
    .await?;
    Ok(())
}

/// Every column but the puzzle, which only job set-up needs (it can be tens of KiB and
/// the hot paths read the job row several times per report).
const LIGHT: &str = "SELECT id, name, '' AS puzzle_json, order_spec, depths, split_depth, budget, replicas, \
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

/// Replaces the running totals.
pub async fn set_totals(
    c: &mut SqliteConnection,
    id: &str,
    accepted: &[u64],
    accepted_solutions: i64,
    split: &[u64],
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE jobs SET accepted_json = ?, accepted_solutions = ?, split_json = ? WHERE id = ?",
    )
    .bind(serde_json::to_string(accepted).expect("counts serialise"))
    .bind(accepted_solutions)
    .bind(serde_json::to_string(split).expect("counts serialise"))
    .bind(id)
    .execute(c)
    .await?;
    Ok(())
}

/// Marks a job finished (complete or cancelled).
pub async fn finish(
    c: &mut SqliteConnection,
    id: &str,
    state: &str,
    now_ms: i64,
    conservation_ok: Option<bool>,
) -> Result<(), StoreError> {
    sqlx::query("UPDATE jobs SET state = ?, finished_ms = ?, conservation_ok = ? WHERE id = ? AND state = 'running'")
        .bind(state)
        .bind(now_ms)
        .bind(conservation_ok)
        .bind(id)
        .execute(c)
        .await?;
    Ok(())
}

/// Re-opens a completed job (a late result disputes one of its units).
pub async fn reopen(c: &mut SqliteConnection, id: &str) -> Result<bool, StoreError> {
    Ok(sqlx::query(
        "UPDATE jobs SET state = 'running', finished_ms = NULL, conservation_ok = NULL \
         WHERE id = ? AND state = 'complete'",
    )
    .bind(id)
    .execute(c)
    .await?
    .rows_affected()
        == 1)
}
