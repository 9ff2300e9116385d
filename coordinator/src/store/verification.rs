//! Verification: suites and their units, hardware classes, and suite results.
//!
//! Row fields mirror the columns documented in `migrations/0003_verification.sql`.
#![allow(missing_docs)]

use sqlx::{FromRow, SqliteConnection};

use super::StoreError;
use crate::fleet::Host;

/// Inserts a hardware class if it is new.
pub async fn upsert_class(
    c: &mut SqliteConnection,
    id: &str,
    h: &Host,
    now_ms: i64,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT OR IGNORE INTO hw_classes (id, cpu_model, arch, os, rustc_version, target_features, engine_kind, engine_release, first_seen_ms) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(id)
    .bind(&h.cpu_model)
    .bind(&h.arch)
    .bind(&h.os)
    .bind(&h.rustc_version)
    .bind(&h.target_features)
    .bind(&h.engine_kind)
    .bind(&h.engine_release)
    .bind(now_ms)
    .execute(c)
    .await?;
    Ok(())
}

/// A stored hardware class.
#[derive(Debug, Clone, FromRow, serde::Serialize)]
pub struct ClassRow {
    pub id: String,
    pub cpu_model: String,
    pub arch: String,
    pub os: String,
    pub rustc_version: String,
    pub target_features: String,
    pub engine_kind: String,
    pub engine_release: String,
    pub first_seen_ms: i64,
}

/// Every class that has run some unit of `suite`, oldest first.
pub async fn classes_of_suite(
    c: &mut SqliteConnection,
    suite: &str,
) -> Result<Vec<ClassRow>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT * FROM hw_classes WHERE id IN (SELECT DISTINCT class_id FROM verifications WHERE suite = ?) ORDER BY first_seen_ms, id",
    )
    .bind(suite)
    .fetch_all(c)
    .await?)
}

/// Replaces a suite and its units (previous results stay, judged against the new units).
pub async fn replace_suite(
    c: &mut SqliteConnection,
    name: &str,
    units: &[(String, String, Option<String>)],
    now_ms: i64,
) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM suite_units WHERE suite = ?")
        .bind(name)
        .execute(&mut *c)
        .await?;
    sqlx::query("INSERT INTO suites (name, created_ms) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET created_ms = excluded.created_ms")
        .bind(name)
        .bind(now_ms)
        .execute(&mut *c)
        .await?;
    for (position, (unit, spec, expected)) in units.iter().enumerate() {
        sqlx::query(
            "INSERT INTO suite_units (suite, name, position, spec_json, expected_json, expected_source) VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(name)
        .bind(unit)
        .bind(position as i64)
        .bind(spec)
        .bind(expected)
        .bind(if expected.is_some() { "given" } else { "" })
        .execute(&mut *c)
        .await?;
    }
    Ok(())
}

/// A stored suite unit.
#[derive(Debug, Clone, FromRow)]
pub struct SuiteUnitRow {
    pub name: String,
    pub spec_json: String,
    pub expected_json: Option<String>,
    pub expected_source: String,
}

/// A suite's units in order.
pub async fn suite_units(
    c: &mut SqliteConnection,
    suite: &str,
) -> Result<Vec<SuiteUnitRow>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT name, spec_json, expected_json, expected_source FROM suite_units WHERE suite = ? ORDER BY position",
    )
    .bind(suite)
    .fetch_all(c)
    .await?)
}

/// Fixes a unit's expected result.
pub async fn set_expected(
    c: &mut SqliteConnection,
    suite: &str,
    unit: &str,
    expected_json: &str,
    source: &str,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE suite_units SET expected_json = ?, expected_source = ? WHERE suite = ? AND name = ? AND expected_json IS NULL",
    )
    .bind(expected_json)
    .bind(source)
    .bind(suite)
    .bind(unit)
    .execute(c)
    .await?;
    Ok(())
}

/// A new suite result.
pub struct NewVerification<'a> {
    pub suite: &'a str,
    pub unit: &'a str,
    pub class_id: &'a str,
    pub worker_id: &'a str,
    pub hostname: &'a str,
    pub engine_build: &'a str,
    pub digest: &'a str,
    pub result_json: &'a str,
    pub nodes: i64,
    pub engine_seconds: f64,
    pub received_ms: i64,
}

/// Stores a suite result.
pub async fn insert(c: &mut SqliteConnection, v: &NewVerification<'_>) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO verifications (suite, unit, class_id, worker_id, hostname, engine_build, digest, result_json, nodes, engine_seconds, received_ms) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(v.suite)
    .bind(v.unit)
    .bind(v.class_id)
    .bind(v.worker_id)
    .bind(v.hostname)
    .bind(v.engine_build)
    .bind(v.digest)
    .bind(v.result_json)
    .bind(v.nodes)
    .bind(v.engine_seconds)
    .bind(v.received_ms)
    .execute(c)
    .await?;
    Ok(())
}

/// A stored suite result (without its JSON).
#[derive(Debug, Clone, FromRow)]
pub struct VerificationRow {
    pub id: i64,
    pub suite: String,
    pub unit: String,
    pub class_id: String,
    pub hostname: String,
    pub engine_build: String,
    pub digest: String,
    pub nodes: i64,
    pub engine_seconds: f64,
    pub received_ms: i64,
}

/// Every result of a suite, oldest first.
pub async fn of_suite(
    c: &mut SqliteConnection,
    suite: &str,
) -> Result<Vec<VerificationRow>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT id, suite, unit, class_id, hostname, engine_build, digest, nodes, engine_seconds, received_ms \
         FROM verifications WHERE suite = ? ORDER BY id",
    )
    .bind(suite)
    .fetch_all(c)
    .await?)
}

/// Every result of every suite, oldest first (for the flagged-class check).
pub async fn all(c: &mut SqliteConnection) -> Result<Vec<VerificationRow>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT id, suite, unit, class_id, hostname, engine_build, digest, nodes, engine_seconds, received_ms \
         FROM verifications ORDER BY id",
    )
    .fetch_all(c)
    .await?)
}

/// The stored result JSON of the first result of `unit` with `digest`.
pub async fn result_json_with_digest(
    c: &mut SqliteConnection,
    suite: &str,
    unit: &str,
    digest: &str,
) -> Result<Option<String>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT result_json FROM verifications WHERE suite = ? AND unit = ? AND digest = ? ORDER BY id LIMIT 1",
    )
    .bind(suite)
    .bind(unit)
    .bind(digest)
    .fetch_optional(c)
    .await?)
}

/// Suite names.
pub async fn suite_names(c: &mut SqliteConnection) -> Result<Vec<String>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT name FROM suites ORDER BY created_ms, name")
            .fetch_all(c)
            .await?,
    )
}
