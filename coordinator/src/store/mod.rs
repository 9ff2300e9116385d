//! The coordinator's storage, behind one interface: the fleet logic says what it wants in
//! domain terms ([`tx`]'s named operations on [`records`]) and never sees SQL, columns or
//! their encodings. Nothing outside this module writes SQL.
//!
//! # Shape
//! - [`Store::write`] runs a closure on `&mut dyn Tx` inside a write transaction; its
//!   changes commit together or not at all. A job must check its input before its first
//!   write: an error after a change rolls back (see [`writer`] for why that is
//!   the cheap way on SQLite).
//! - [`Store::read`] runs a closure on `&mut dyn Tx` against a consistent snapshot.
//! - [`records`]: what goes in and comes out (decoded prefixes, enums, counts).
//! - [`tx`]: the operations, one trait per thing they touch.
//! - [`sqlite`]: the embedded SQLite backend (one writer thread with group commit, a
//!   pool of read connections; migrations in `../migrations`).

pub mod records;
pub mod sql;
pub mod sqlite;
pub mod tx;
pub mod writer;

use std::path::Path;

pub use records::*;
pub use tx::{
    Accounts, Archive, Jobs, Leases, Leasing, MoreRuns, Results, StoreResult, Tx, Units,
    Verifications, Workers,
};
pub use writer::WriterTotals;

/// A store failure. Details stay in logs; clients see an internal error.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database failed.
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    /// A migration failed.
    #[error("migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A stored value does not decode (a bug or a hand-edited database).
    #[error("corrupt stored value: {0}")]
    Corrupt(String),
    /// A statement failed.
    #[error("database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The writer's queue is full: the coordinator is overloaded; retry later.
    #[error("busy: too many writes queued; retry later")]
    Busy,
    /// The writer could not carry out or commit a write.
    #[error("writer: {0}")]
    Writer(String),
    /// The database cannot be opened where it was asked for.
    #[error("{0}")]
    Open(String),
}

/// The coordinator's database.
#[derive(Clone)]
pub struct Store {
    backend: Backend,
}

#[derive(Clone)]
enum Backend {
    Sqlite(sqlite::SqliteStore),
}

impl Store {
    /// Opens (creating if needed) the SQLite database at `path` and applies migrations.
    pub async fn open(path: &Path) -> Result<Store, StoreError> {
        Ok(Store {
            backend: Backend::Sqlite(sqlite::SqliteStore::open(path).await?),
        })
    }

    /// Runs `f` in a write transaction, committed (with whatever other writes the backend
    /// batches with it) before this returns. `f` must check its input before it writes:
    /// an `Err` after changing rows rolls back the transaction.
    pub async fn write<T, E, F>(&self, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut dyn Tx) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        match &self.backend {
            Backend::Sqlite(s) => s.write(f).await,
        }
    }

    /// Runs `f` against a consistent snapshot (writes from it fail).
    pub async fn read<T, E, F>(&self, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut dyn Tx) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        match &self.backend {
            Backend::Sqlite(s) => s.read(f).await,
        }
    }

    /// The writer's running totals (queue wait, run time, batches).
    pub fn writer_stats(&self) -> WriterTotals {
        match &self.backend {
            Backend::Sqlite(s) => s.writer_stats(),
        }
    }
}

/// Parses a stored JSON value.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(
    text: &str,
    what: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}
