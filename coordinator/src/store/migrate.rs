//! `e2fleet-coordinator migrate-store`: moves a fleet's whole state from its SQLite file to
//! an empty PostgreSQL database, one way, exactly.
//!
//! With the coordinator stopped (the copy reads the file as it is), both databases are
//! brought to the newest schema, then every table is copied row for row in one
//! PostgreSQL transaction, in the order the foreign keys need: ids kept (identity
//! sequences moved past them afterwards), values as stored. Where PostgreSQL's schema
//! holds bytes and the SQLite row still has the text form of earlier versions (paths and
//! per-depth counts written before they became BLOBs), the value is re-encoded to the
//! current form, which decodes to the same thing. The copy is checked before it commits:
//! every table's row count, and each job's running totals, read back from PostgreSQL.
//! A target that already holds a fleet is refused.

use std::collections::HashMap;
use std::path::Path;

use rusqlite::types::ValueRef;
use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::{Connection, Executor, PgConnection, Postgres, Row as _};

use super::sql::codec::{decode_path, encode_path, encode_sparse_counts_from};
use super::sql::{Kind, Value};
use super::{Database, Store, StoreError};

/// The tables, parents before children.
pub const TABLES: &[&str] = &[
    "studies",
    "jobs",
    "accounts",
    "workers",
    "units",
    "leases",
    "results",
    "result_bodies",
    "hw_classes",
    "suites",
    "suite_units",
    "verifications",
    "class_unflags",
    "account_days",
    "audits",
    "archive_jobs",
    "archive_workers",
    "archive_engines",
    "archive_tallies",
    "archive",
];

/// Rows sent in one INSERT (PostgreSQL takes at most 65,535 parameters a statement).
const ROWS_PER_INSERT: usize = 500;

/// What was copied: rows per table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Copied {
    /// (table, rows), in [`TABLES`] order.
    pub tables: Vec<(String, u64)>,
}

impl Copied {
    /// Rows copied, all tables.
    pub fn rows(&self) -> u64 {
        self.tables.iter().map(|(_, n)| n).sum()
    }
}

/// Copies the SQLite store at `from` into the empty PostgreSQL database `to`.
pub async fn sqlite_to_postgres(from: &Path, to: &str) -> Result<Copied, StoreError> {
    if !from.is_file() {
        return Err(StoreError::Open(format!(
            "no SQLite database at {}",
            from.display()
        )));
    }
    // both at the newest schema (opening applies the migrations)
    drop(Store::connect(&Database::Sqlite(from.to_path_buf())).await?);
    drop(Store::connect(&Database::Postgres(to.to_string())).await?);
    let mut pg = PgConnection::connect(to).await?;
    let fleet: i64 = sqlx::query_scalar(
        "SELECT (SELECT COUNT(*) FROM jobs) + (SELECT COUNT(*) FROM workers) + (SELECT COUNT(*) FROM units)",
    )
    .fetch_one(&mut pg)
    .await?;
    if fleet > 0 {
        return Err(StoreError::Open(
            "the PostgreSQL database already holds a fleet (jobs, workers or units): migrate into an empty one".into(),
        ));
    }
    let source = rusqlite::Connection::open_with_flags(
        from,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    source.execute_batch("BEGIN")?;
    let mut tx = pg.begin().await?;
    // the migration's own operator row makes way for the file's
    tx.execute("DELETE FROM accounts").await?;
    let mut copied = Copied::default();
    for &table in TABLES {
        let types = column_types(&mut tx, table).await?;
        let n = copy_table(&source, &mut tx, table, &types).await?;
        copied.tables.push((table.to_string(), n));
    }
    for (table, column) in [
        ("units", "id"),
        ("results", "id"),
        ("verifications", "id"),
        ("audits", "id"),
        ("archive_jobs", "num"),
        ("archive_workers", "num"),
        ("archive_engines", "num"),
    ] {
        tx.execute(
            format!(
                "SELECT setval(pg_get_serial_sequence('{table}', '{column}'), \
                 COALESCE((SELECT MAX({column}) FROM {table}), 0) + 1, false)"
            )
            .as_str(),
        )
        .await?;
    }
    check(&source, &mut tx, &copied).await?;
    tx.commit().await?;
    Ok(copied)
}

/// PostgreSQL's type of each column of `table`: what the copied values are bound as.
async fn column_types(
    pg: &mut PgConnection,
    table: &str,
) -> Result<Vec<(String, Kind)>, StoreError> {
    let rows = sqlx::query(
        "SELECT column_name::text, data_type::text FROM information_schema.columns \
         WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
    )
    .bind(table)
    .fetch_all(&mut *pg)
    .await?;
    rows.iter()
        .map(|r| {
            let name: String = r.try_get(0)?;
            let ty: String = r.try_get(1)?;
            let kind = match ty.as_str() {
                "bigint" | "integer" | "smallint" => Kind::Int,
                "double precision" | "real" => Kind::Real,
                "bytea" => Kind::Blob,
                _ => Kind::Text,
            };
            Ok((name, kind))
        })
        .collect()
}

/// Copies one table; its rows.
async fn copy_table(
    source: &rusqlite::Connection,
    pg: &mut PgConnection,
    table: &str,
    types: &[(String, Kind)],
) -> Result<u64, StoreError> {
    let columns: Vec<&str> = types.iter().map(|(c, _)| c.as_str()).collect();
    let mut q = source.prepare(&format!("SELECT {} FROM {table}", columns.join(", ")))?;
    let mut rows = q.query([])?;
    let mut batch: Vec<Value> = Vec::with_capacity(ROWS_PER_INSERT * columns.len());
    let mut n = 0;
    while let Some(r) = rows.next()? {
        for (i, (column, kind)) in types.iter().enumerate() {
            batch.push(convert(table, column, *kind, r.get_ref(i)?)?);
        }
        n += 1;
        if batch.len() >= ROWS_PER_INSERT * columns.len() {
            insert(pg, table, &columns, &batch).await?;
            batch.clear();
        }
    }
    if !batch.is_empty() {
        insert(pg, table, &columns, &batch).await?;
    }
    Ok(n)
}

/// A SQLite value as PostgreSQL's column `kind` takes it.
fn convert(table: &str, column: &str, kind: Kind, v: ValueRef<'_>) -> Result<Value, StoreError> {
    let what = || format!("{table}.{column}");
    Ok(match (kind, v) {
        (kind, ValueRef::Null) => Value::Null(kind),
        (Kind::Int, ValueRef::Integer(n)) => Value::Int(n),
        (Kind::Real, ValueRef::Real(x)) => Value::Real(x),
        (Kind::Real, ValueRef::Integer(n)) => Value::Real(n as f64),
        (Kind::Text, ValueRef::Text(t)) => Value::Text(String::from_utf8_lossy(t).into_owned()),
        (Kind::Blob, ValueRef::Blob(b)) => Value::Blob(b.to_vec()),
        // the text forms of earlier versions, in columns that now hold bytes
        (Kind::Blob, ValueRef::Text(t)) => {
            let text = String::from_utf8_lossy(t);
            if column == "counts" {
                let sparse: Vec<u64> = super::parse_json(&text, &what())?;
                Value::Blob(encode_sparse_counts_from(&sparse))
            } else {
                Value::Blob(encode_path(&decode_path(&text, &what())?))
            }
        }
        (kind, other) => {
            return Err(StoreError::Corrupt(format!(
                "{}: a {:?} where PostgreSQL keeps {kind:?}",
                what(),
                other.data_type()
            )));
        }
    })
}

async fn insert(
    pg: &mut PgConnection,
    table: &str,
    columns: &[&str],
    values: &[Value],
) -> Result<(), StoreError> {
    let width = columns.len();
    let rows = values.len() / width;
    let mut sql = format!("INSERT INTO {table} ({}) VALUES ", columns.join(", "));
    for r in 0..rows {
        sql.push_str(if r == 0 { "(" } else { ", (" });
        for c in 0..width {
            if c > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!("${}", r * width + c + 1));
        }
        sql.push(')');
    }
    let q: Query<'_, Postgres, PgArguments> =
        values.iter().fold(sqlx::query(&sql), super::postgres::bind);
    q.execute(&mut *pg).await?;
    Ok(())
}

/// Reads the copy back before it commits: each table's rows, and each job's totals.
async fn check(
    source: &rusqlite::Connection,
    pg: &mut PgConnection,
    copied: &Copied,
) -> Result<(), StoreError> {
    for (table, n) in &copied.tables {
        let there: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
            .fetch_one(&mut *pg)
            .await?;
        let here: i64 =
            source.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))?;
        if there != here || here as u64 != *n {
            return Err(StoreError::Writer(format!(
                "{table}: {here} rows in SQLite, {n} copied, {there} in PostgreSQL"
            )));
        }
    }
    let totals =
        "SELECT id, accepted_json, accepted_solutions, split_json, state FROM jobs ORDER BY id";
    let mut q = source.prepare(totals)?;
    let here: Vec<(String, String, i64, String, String)> = q
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?
        .collect::<Result<_, _>>()?;
    let there: HashMap<String, (String, i64, String, String)> = sqlx::query(totals)
        .fetch_all(&mut *pg)
        .await?
        .iter()
        .map(|r| {
            Ok((
                r.try_get(0)?,
                (r.try_get(1)?, r.try_get(2)?, r.try_get(3)?, r.try_get(4)?),
            ))
        })
        .collect::<Result<_, sqlx::Error>>()?;
    for (id, accepted, solutions, split, state) in here {
        if there.get(&id) != Some(&(accepted, solutions, split, state)) {
            return Err(StoreError::Writer(format!(
                "job {id}: its totals read back differently from PostgreSQL"
            )));
        }
    }
    Ok(())
}
