//! Workers: registration, tokens, liveness, errors and quarantine.
//!
//! Row fields mirror the columns documented in `migrations/0001_init.sql`. Registration
//! and release are `async` (sqlx); `touch`, `add_done` and `add_error` are on the write
//! path (synchronous, see [`super::writer`]).
#![allow(missing_docs)]

use rusqlite::{Connection, OptionalExtension, params};
use sqlx::{FromRow, SqliteConnection};

use super::StoreError;

/// A stored worker.
#[derive(Debug, Clone, FromRow, serde::Serialize)]
pub struct WorkerRow {
    pub id: String,
    #[serde(skip)]
    pub token_hash: String,
    pub hostname: String,
    pub cpu_model: String,
    pub cores: i64,
    pub arch: String,
    pub os: String,
    pub rustc_version: String,
    pub worker_version: String,
    pub engine_kind: String,
    pub engine_build: String,
    pub registered_ms: i64,
    pub last_seen_ms: i64,
    pub per_core_rate: f64,
    pub threads: i64,
    pub units_done: i64,
    pub errors: i64,
    pub quarantined: bool,
    pub target_features: String,
    /// The hardware class at the last registration.
    pub class_id: String,
    /// Active leases held (filled by [`list`] only).
    #[sqlx(default)]
    pub leases_held: i64,
}

/// Inserts or replaces a worker (a re-registration keeps the id and the error record).
pub async fn upsert(c: &mut SqliteConnection, w: &WorkerRow) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO workers (id, token_hash, hostname, cpu_model, cores, arch, os, rustc_version, worker_version, registered_ms, last_seen_ms, \
           engine_kind, engine_build, target_features, class_id) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
         ON CONFLICT(id) DO UPDATE SET token_hash = excluded.token_hash, hostname = excluded.hostname, cpu_model = excluded.cpu_model, \
           cores = excluded.cores, arch = excluded.arch, os = excluded.os, rustc_version = excluded.rustc_version, \
           worker_version = excluded.worker_version, last_seen_ms = excluded.last_seen_ms, engine_kind = excluded.engine_kind, \
           engine_build = excluded.engine_build, target_features = excluded.target_features, class_id = excluded.class_id",
    )
    .bind(&w.id)
    .bind(&w.token_hash)
    .bind(&w.hostname)
    .bind(&w.cpu_model)
    .bind(w.cores)
    .bind(&w.arch)
    .bind(&w.os)
    .bind(&w.rustc_version)
    .bind(&w.worker_version)
    .bind(w.registered_ms)
    .bind(w.last_seen_ms)
    .bind(&w.engine_kind)
    .bind(&w.engine_build)
    .bind(&w.target_features)
    .bind(&w.class_id)
    .execute(c)
    .await?;
    Ok(())
}

/// The worker a token belongs to.
pub async fn by_token(
    c: &mut SqliteConnection,
    token_hash: &str,
) -> Result<Option<WorkerRow>, StoreError> {
    Ok(sqlx::query_as("SELECT * FROM workers WHERE token_hash = ?")
        .bind(token_hash)
        .fetch_optional(c)
        .await?)
}

/// One worker.
pub async fn get(c: &mut SqliteConnection, id: &str) -> Result<Option<WorkerRow>, StoreError> {
    Ok(sqlx::query_as("SELECT * FROM workers WHERE id = ?")
        .bind(id)
        .fetch_optional(c)
        .await?)
}

/// All workers.
pub async fn list(c: &mut SqliteConnection) -> Result<Vec<WorkerRow>, StoreError> {
    Ok(
        sqlx::query_as(
            "SELECT w.*, (SELECT COUNT(*) FROM leases l WHERE l.worker_id = w.id AND l.state = 'active') AS leases_held \
             FROM workers w ORDER BY hostname, id",
        )
            .fetch_all(c)
            .await?,
    )
}

/// Records that a worker was seen, with its current rate and engine; returns whether it
/// is quarantined (`None` when no such worker).
pub fn touch(
    c: &Connection,
    id: &str,
    now_ms: i64,
    rate: Option<(f64, i64)>,
    engine: Option<(&str, &str)>,
) -> Result<Option<bool>, StoreError> {
    Ok(c.prepare_cached(
        "UPDATE workers SET last_seen_ms = ?, per_core_rate = COALESCE(?, per_core_rate), threads = COALESCE(?, threads), \
           engine_kind = COALESCE(?, engine_kind), engine_build = COALESCE(?, engine_build) WHERE id = ? \
         RETURNING quarantined",
    )?
    .query_row(
        params![
            now_ms,
            rate.map(|r| r.0),
            rate.map(|r| r.1),
            engine.map(|e| e.0),
            engine.map(|e| e.1),
            id
        ],
        |r| r.get(0),
    )
    .optional()?)
}

/// Counts a finished unit for a worker.
pub fn add_done(c: &Connection, id: &str) -> Result<(), StoreError> {
    c.prepare_cached("UPDATE workers SET units_done = units_done + 1 WHERE id = ?")?
        .execute([id])?;
    Ok(())
}

/// Counts an error against a worker; quarantines its whole host past `threshold`.
/// Returns `true` when the host is now quarantined.
pub fn add_error(c: &Connection, id: &str, threshold: i64) -> Result<bool, StoreError> {
    c.prepare_cached("UPDATE workers SET errors = errors + 1 WHERE id = ?")?
        .execute([id])?;
    let (hostname, errors): (String, i64) = c
        .prepare_cached("SELECT hostname, (SELECT SUM(errors) FROM workers w2 WHERE w2.hostname = w.hostname) FROM workers w WHERE id = ?")?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))?;
    if errors >= threshold {
        c.prepare_cached("UPDATE workers SET quarantined = 1 WHERE hostname = ?")?
            .execute([&hostname])?;
        return Ok(true);
    }
    Ok(false)
}

/// Lifts a host's quarantine and clears its errors; returns the workers released.
pub async fn release_host(c: &mut SqliteConnection, hostname: &str) -> Result<u64, StoreError> {
    Ok(
        sqlx::query("UPDATE workers SET quarantined = 0, errors = 0 WHERE hostname = ?")
            .bind(hostname)
            .execute(c)
            .await?
            .rows_affected(),
    )
}
