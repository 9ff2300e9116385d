//! The embedded SQLite backend: WAL, foreign keys, a busy timeout.
//!
//! - Writes run on one thread that owns a synchronous connection, with group commit
//!   ([`writer`] explains why: SQLite has one writer, so throughput is how fast one
//!   thread applies writes).
//! - Reads run on a small pool of read-only connections on tokio's blocking threads,
//!   each read in its own transaction (a consistent snapshot; WAL readers never block
//!   the writer).
//! - Migrations (`../migrations`, forward-only) are applied at open with sqlx.
//!
//! The per-table files implement the [`crate::store::tx`] traits on [`SqliteTx`]; they
//! are the only place that knows the columns and their encodings ([`codec`]).

mod accounts;
mod archive;
pub mod codec;
mod jobs;
mod leases;
mod results;
mod units;
mod verification;
mod workers;
pub mod writer;

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::Connection;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use super::{StoreError, Tx};
use writer::{Writer, WriterTotals};

/// Read connections kept open.
const READERS: usize = 4;

/// A transaction on a SQLite connection: the [`crate::store::tx`] traits are implemented
/// on it, one file per table.
pub struct SqliteTx<'c> {
    c: &'c Connection,
}

/// The SQLite store: the writer thread and the read pool.
#[derive(Clone)]
pub struct SqliteStore {
    writer: Writer,
    readers: Arc<ReadPool>,
}

struct ReadPool {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
}

impl ReadPool {
    fn take(&self) -> Result<Connection, StoreError> {
        if let Some(c) = self.idle.lock().expect("read pool").pop() {
            return Ok(c);
        }
        let c = Connection::open(&self.path)?;
        c.busy_timeout(Duration::from_secs(10))?;
        c.execute_batch("PRAGMA query_only = ON; PRAGMA foreign_keys = ON;")?;
        c.set_prepared_statement_cache_capacity(64);
        Ok(c)
    }

    fn give_back(&self, c: Connection) {
        let mut idle = self.idle.lock().expect("read pool");
        if idle.len() < READERS {
            idle.push(c);
        }
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and applies migrations.
    pub async fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
            && !dir.is_dir()
        {
            return Err(StoreError::Open(format!(
                "cannot create the database {}: the folder {} does not exist (create it, or choose another --db)",
                path.display(),
                dir.display()
            )));
        }
        let options = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10));
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await
            .map_err(|e| {
                StoreError::Open(format!("cannot open the database {}: {e}", path.display()))
            })?;
        sqlx::migrate!("../migrations").run(&pool).await?;
        pool.close().await;
        Ok(SqliteStore {
            writer: Writer::start(path)?,
            readers: Arc::new(ReadPool {
                path: path.to_path_buf(),
                idle: Mutex::new(Vec::new()),
            }),
        })
    }

    /// See [`crate::store::Store::write`].
    pub async fn write<T, E, F>(&self, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut dyn Tx) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        self.writer.write(move |c| f(&mut SqliteTx { c })).await
    }

    /// See [`crate::store::Store::read`].
    pub async fn read<T, E, F>(&self, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut dyn Tx) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        let readers = self.readers.clone();
        tokio::task::spawn_blocking(move || {
            let c = readers.take()?;
            c.execute_batch("BEGIN").map_err(StoreError::from)?;
            let out = f(&mut SqliteTx { c: &c });
            // a read-only transaction: ending it only releases the snapshot
            if c.execute_batch("COMMIT").is_ok() {
                readers.give_back(c);
            }
            out
        })
        .await
        .unwrap_or_else(|e| Err(E::from(StoreError::Writer(format!("a read failed: {e}")))))
    }

    /// The writer thread's running totals.
    pub fn writer_stats(&self) -> WriterTotals {
        self.writer.stats()
    }
}

/// Reads a column that holds a parsed value (an enum's text, an id), turning a value
/// that does not parse into a conversion error that names the column.
pub(crate) fn parsed<T>(r: &rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<T>
where
    T: FromStr,
    T::Err: std::fmt::Display,
{
    let text: String = r.get(idx)?;
    text.parse()
        .map_err(|e: T::Err| conversion(idx, e.to_string()))
}

/// A conversion error for column `idx`.
pub(crate) fn conversion(idx: usize, why: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        idx,
        rusqlite::types::Type::Text,
        Box::new(StoreError::Corrupt(why)),
    )
}
