//! Leases: creation, expiry, extension and lookup.
//!
//! Row fields mirror the columns documented in `migrations/0001_init.sql`. The state
//! changes are on the write path (synchronous, see [`super::writer`]); the counts behind
//! the dashboard are `async` reads.
#![allow(missing_docs)]

use rusqlite::{Connection, OptionalExtension, Row, params};
use sqlx::SqliteConnection;

use super::StoreError;

/// A stored lease.
#[derive(Debug, Clone)]
pub struct LeaseRow {
    pub id: String,
    pub unit_id: i64,
    pub worker_id: String,
    pub hostname: String,
    pub budget: i64,
    pub created_ms: i64,
    pub deadline_ms: i64,
    pub state: String,
}

/// The columns [`LeaseRow::from_row`] reads, in order.
const COLUMNS: &str = "id, unit_id, worker_id, hostname, budget, created_ms, deadline_ms, state";

impl LeaseRow {
    /// Reads a row of [`COLUMNS`] (by position, see `units::UnitRow::from_row`).
    fn from_row(r: &Row<'_>) -> rusqlite::Result<LeaseRow> {
        Ok(LeaseRow {
            id: r.get(0)?,
            unit_id: r.get(1)?,
            worker_id: r.get(2)?,
            hostname: r.get(3)?,
            budget: r.get(4)?,
            created_ms: r.get(5)?,
            deadline_ms: r.get(6)?,
            state: r.get(7)?,
        })
    }
}

/// Inserts a lease.
pub fn insert(c: &Connection, l: &LeaseRow) -> Result<(), StoreError> {
    c.prepare_cached("INSERT INTO leases (id, unit_id, worker_id, hostname, budget, created_ms, deadline_ms, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")?
        .execute(params![
            l.id,
            l.unit_id,
            l.worker_id,
            l.hostname,
            l.budget,
            l.created_ms,
            l.deadline_ms,
            l.state
        ])?;
    Ok(())
}

/// One lease.
pub fn get(c: &Connection, id: &str) -> Result<Option<LeaseRow>, StoreError> {
    Ok(
        c.prepare_cached(&format!("SELECT {COLUMNS} FROM leases WHERE id = ?"))?
            .query_row([id], LeaseRow::from_row)
            .optional()?,
    )
}

/// Marks active leases past their deadline expired; returns their unit ids.
pub fn expire_overdue(c: &Connection, now_ms: i64) -> Result<Vec<i64>, StoreError> {
    let mut q = c.prepare_cached(
        "UPDATE leases SET state = 'expired' WHERE state = 'active' AND deadline_ms < ? RETURNING unit_id",
    )?;
    let ids = q.query_map([now_ms], |r| r.get(0))?;
    Ok(ids.collect::<Result<_, _>>()?)
}

/// Sets a lease's state.
pub fn set_state(c: &Connection, id: &str, state: &str) -> Result<(), StoreError> {
    c.prepare_cached("UPDATE leases SET state = ? WHERE id = ?")?
        .execute([state, id])?;
    Ok(())
}

/// Extends a worker's active lease; `false` if it is no longer active (or not its own).
pub fn extend(
    c: &Connection,
    id: &str,
    worker_id: &str,
    deadline_ms: i64,
) -> Result<bool, StoreError> {
    Ok(c.prepare_cached(
        "UPDATE leases SET deadline_ms = ? WHERE id = ? AND worker_id = ? AND state = 'active'",
    )?
    .execute(params![deadline_ms, id, worker_id])?
        == 1)
}

/// Cancels the active leases of a job's units; returns how many.
pub fn cancel_job(c: &Connection, job_id: &str) -> Result<usize, StoreError> {
    Ok(c.prepare_cached("UPDATE leases SET state = 'cancelled' WHERE state = 'active' AND unit_id IN (SELECT id FROM units WHERE job_id = ?)")?
        .execute([job_id])?)
}

/// Releases a worker's active lease; returns its unit id if it was active.
pub fn release(c: &Connection, id: &str, worker_id: &str) -> Result<Option<i64>, StoreError> {
    Ok(c.prepare_cached("UPDATE leases SET state = 'released' WHERE id = ? AND worker_id = ? AND state = 'active' RETURNING unit_id")?
        .query_row([id, worker_id], |r| r.get(0))
        .optional()?)
}

/// A lease's budget with its unit's job, prefix and cursor (to verify a report before
/// its write).
pub async fn with_unit(
    c: &mut SqliteConnection,
    lease_id: &str,
) -> Result<Option<(i64, String, String, String)>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT l.budget, u.job_id, u.prefix_json, u.cursor_json FROM leases l JOIN units u ON u.id = l.unit_id WHERE l.id = ?",
    )
    .bind(lease_id)
    .fetch_optional(c)
    .await?)
}

/// Counts of leases created, expired in the last `window_ms`.
pub async fn recent_counts(
    c: &mut SqliteConnection,
    since_ms: i64,
) -> Result<(i64, i64), StoreError> {
    let created: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM leases WHERE created_ms >= ?")
        .bind(since_ms)
        .fetch_one(&mut *c)
        .await?;
    let expired: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM leases WHERE state = 'expired' AND deadline_ms >= ?",
    )
    .bind(since_ms)
    .fetch_one(&mut *c)
    .await?;
    Ok((created, expired))
}

/// Leases created and leases expired per minute since `since_ms`: (minute, created, expired).
pub async fn per_minute(
    c: &mut SqliteConnection,
    since_ms: i64,
) -> Result<Vec<(i64, i64, i64)>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT m, SUM(created), SUM(expired) FROM ( \
           SELECT created_ms / 60000 AS m, 1 AS created, 0 AS expired FROM leases WHERE created_ms >= ?1 \
           UNION ALL \
           SELECT deadline_ms / 60000, 0, 1 FROM leases WHERE state = 'expired' AND deadline_ms >= ?1) \
         GROUP BY m ORDER BY m",
    )
    .bind(since_ms)
    .fetch_all(c)
    .await?)
}

/// When the first unit of a job was leased (work started), if any was.
pub async fn first_for_job(
    c: &mut SqliteConnection,
    job_id: &str,
) -> Result<Option<i64>, StoreError> {
    Ok(sqlx::query_scalar("SELECT MIN(l.created_ms) FROM leases l JOIN units u ON u.id = l.unit_id WHERE u.job_id = ?")
        .bind(job_id)
        .fetch_one(c)
        .await?)
}
