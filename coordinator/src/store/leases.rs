//! Leases: creation, expiry, extension and lookup.
//!
//! Row fields mirror the columns documented in `migrations/0001_init.sql`.
#![allow(missing_docs)]

use sqlx::{FromRow, SqliteConnection};

use super::StoreError;

/// A stored lease.
#[derive(Debug, Clone, FromRow)]
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

/// Inserts a lease.
pub async fn insert(c: &mut SqliteConnection, l: &LeaseRow) -> Result<(), StoreError> {
    sqlx::query("INSERT INTO leases (id, unit_id, worker_id, hostname, budget, created_ms, deadline_ms, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
        .bind(&l.id)
        .bind(l.unit_id)
        .bind(&l.worker_id)
        .bind(&l.hostname)
        .bind(l.budget)
        .bind(l.created_ms)
        .bind(l.deadline_ms)
        .bind(&l.state)
        .execute(c)
        .await?;
    Ok(())
}

/// One lease.
pub async fn get(c: &mut SqliteConnection, id: &str) -> Result<Option<LeaseRow>, StoreError> {
    Ok(sqlx::query_as("SELECT * FROM leases WHERE id = ?")
        .bind(id)
        .fetch_optional(c)
        .await?)
}

/// Marks active leases past their deadline expired; returns their unit ids.
pub async fn expire_overdue(c: &mut SqliteConnection, now_ms: i64) -> Result<Vec<i64>, StoreError> {
    Ok(sqlx::query_scalar("UPDATE leases SET state = 'expired' WHERE state = 'active' AND deadline_ms < ? RETURNING unit_id")
        .bind(now_ms)
        .fetch_all(c)
        .await?)
}

/// Sets a lease's state.
pub async fn set_state(c: &mut SqliteConnection, id: &str, state: &str) -> Result<(), StoreError> {
    sqlx::query("UPDATE leases SET state = ? WHERE id = ?")
        .bind(state)
        .bind(id)
        .execute(c)
        .await?;
    Ok(())
}

/// Extends a worker's active lease; `false` if it is no longer active (or not its own).
pub async fn extend(
    c: &mut SqliteConnection,
    id: &str,
    worker_id: &str,
    deadline_ms: i64,
) -> Result<bool, StoreError> {
    Ok(sqlx::query(
        "UPDATE leases SET deadline_ms = ? WHERE id = ? AND worker_id = ? AND state = 'active'",
    )
    .bind(deadline_ms)
    .bind(id)
    .bind(worker_id)
    .execute(c)
    .await?
    .rows_affected()
        == 1)
}

/// Cancels the active leases of a job's units; returns their unit ids.
pub async fn cancel_job(c: &mut SqliteConnection, job_id: &str) -> Result<u64, StoreError> {
    Ok(sqlx::query("UPDATE leases SET state = 'cancelled' WHERE state = 'active' AND unit_id IN (SELECT id FROM units WHERE job_id = ?)")
        .bind(job_id)
        .execute(c)
        .await?
        .rows_affected())
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

/// Releases a worker's active lease; returns its unit id if it was active.
pub async fn release(
    c: &mut SqliteConnection,
    id: &str,
    worker_id: &str,
) -> Result<Option<i64>, StoreError> {
    Ok(sqlx::query_scalar("UPDATE leases SET state = 'released' WHERE id = ? AND worker_id = ? AND state = 'active' RETURNING unit_id")
        .bind(id)
        .bind(worker_id)
        .fetch_optional(c)
        .await?)
}
