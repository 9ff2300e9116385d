//! All SQL of the coordinator. One small `async fn` per use case; nothing outside this
//! module writes SQL. SQLite in WAL mode with foreign keys and a busy timeout; every
//! state change runs inside a `BEGIN IMMEDIATE` transaction ([`Store::begin`]).

pub mod jobs;
pub mod leases;
pub mod results;
pub mod units;
pub mod workers;

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, SqlitePool, Transaction};

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

/// A transaction on the store.
pub type Tx = Transaction<'static, Sqlite>;

/// The coordinator's database.
#[derive(Clone)]
pub struct Store {
    pool: SqlitePool,
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
        Ok(Store { pool })
    }

    /// Starts a write transaction (`BEGIN IMMEDIATE`: the write lock is taken up front,
    /// so two claims can never interleave).
    pub async fn begin(&self) -> Result<Tx, StoreError> {
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
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
