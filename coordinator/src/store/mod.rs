//! All SQL of the coordinator. One small `async fn` per use case; nothing outside this
//! module writes SQL. SQLite in WAL mode with foreign keys and a busy timeout; every
//! state change runs inside a `BEGIN IMMEDIATE` transaction ([`Store::begin`]).

pub mod jobs;
pub mod leases;
pub mod results;
pub mod units;
pub mod verification;
pub mod workers;

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
    writer: Arc<Mutex<()>>,
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
        Ok(Store {
            pool,
            writer: Arc::new(Mutex::new(())),
        })
    }

    /// Starts a write transaction (`BEGIN IMMEDIATE`: the write lock is taken up front,
    /// so two claims can never interleave).
    pub async fn begin(&self) -> Result<Tx, StoreError> {
        let writer = self.writer.clone().lock_owned().await;
        Ok(Tx {
            inner: self.pool.begin_with("BEGIN IMMEDIATE").await?,
            _writer: writer,
        })
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
