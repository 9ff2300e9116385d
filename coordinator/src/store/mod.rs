//! All SQL of the coordinator. One small function per use case; nothing outside this
//! module writes SQL. SQLite in WAL mode with foreign keys and a busy timeout.
//!
//! Two ways in, by what the statement is for:
//! - **The write path** — everything that changes jobs, units, leases and results
//!   (submission, leases, heartbeats, reports, expiry, cancellation) — is synchronous
//!   functions taking a `rusqlite::Connection`, run on the writer thread with group
//!   commit ([`Store::write`], [`writer`] explains why).
//! - **Everything else** — migrations, the reads behind job status, the dashboard and the
//!   API, and the cold writes (registrations, verification, quarantine release) — is
//!   `async fn`s on sqlx ([`Store::pool`], [`Store::begin`]).
//!
//! Both run under one in-process write lock, so writers queue in order instead of
//! spinning in SQLite's busy handler.

pub mod jobs;
pub mod leases;
pub mod results;
pub mod units;
pub mod verification;
pub mod workers;
pub mod writer;

use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, SqliteConnection, SqlitePool, Transaction};
use tokio::sync::{Mutex, OwnedMutexGuard};

/// A store failure. Details stay in logs; clients see an internal error.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database failed.
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    /// A migration failed.
    #[error("migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A stored JSON column does not parse (a bug or a hand-edited database).
    #[error("corrupt stored value: {0}")]
    Corrupt(String),
    /// A statement on the write path failed.
    #[error("database (write path): {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The writer's queue is full: the coordinator is overloaded; retry later.
    #[error("busy: too many writes queued; retry later")]
    Busy,
    /// The writer thread could not carry out or commit a write.
    #[error("writer: {0}")]
    Writer(String),
}

/// A write transaction. It holds the store's in-process write lock, so writers queue in
/// order instead of spinning in SQLite's busy handler.
pub struct Tx {
    inner: Transaction<'static, Sqlite>,
    _writer: OwnedMutexGuard<()>,
}

impl Tx {
    /// Commits.
    pub async fn commit(self) -> Result<(), StoreError> {
        Ok(self.inner.commit().await?)
    }
}

impl Deref for Tx {
    type Target = SqliteConnection;
    fn deref(&self) -> &SqliteConnection {
        &self.inner
    }
}

impl DerefMut for Tx {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        &mut self.inner
    }
}

/// The coordinator's database.
#[derive(Clone)]
pub struct Store {
    pool: SqlitePool,
    lock: Arc<Mutex<()>>,
    writer: writer::Writer,
}

impl Store {
    /// Opens (creating if needed) the database at `path` and applies migrations.
    pub async fn open(path: &Path) -> Result<Store, StoreError> {
        let options = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10));
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await?;
        sqlx::migrate!("../migrations").run(&pool).await?;
        let lock = Arc::new(Mutex::new(()));
        let writer = writer::Writer::start(path, lock.clone())?;
        Ok(Store { pool, lock, writer })
    }

    /// Starts a write transaction (`BEGIN IMMEDIATE`: the write lock is taken up front,
    /// so two claims can never interleave).
    pub async fn begin(&self) -> Result<Tx, StoreError> {
        let writer = self.lock.clone().lock_owned().await;
        Ok(Tx {
            inner: self.pool.begin_with("BEGIN IMMEDIATE").await?,
            _writer: writer,
        })
    }

    /// Runs `f` on the writer thread, in a transaction committed with whatever other
    /// writes are queued (see [`writer`]). `f` must check its input before it writes:
    /// an `Err` after changing rows rolls back the whole batch.
    pub async fn write<T, E, F>(&self, f: F) -> Result<T, E>
    where
        F: FnOnce(&rusqlite::Connection) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        self.writer.write(f).await
    }

    /// The writer thread's running totals (queue wait, run time, batches).
    pub fn writer_stats(&self) -> writer::WriterTotals {
        self.writer.stats()
    }

    /// The pool, for reads.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

/// Parses a stored JSON column.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(
    text: &str,
    what: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}
