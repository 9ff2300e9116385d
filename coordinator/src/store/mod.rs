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
//! - [`sql`]: the statements, written once in the SQL both backends take, on a small
//!   connection interface ([`sql::Conn`]).
//! - [`writer`]: the write path both backends share: one thread, group commit.
//! - [`sqlite`]: the embedded SQLite backend, the default (a file, nothing to install;
//!   migrations in `../migrations/sqlite`).
//! - [`postgres`]: PostgreSQL (`--db postgres://...`), for a database on a server the
//!   operator already runs, and for several coordinators on one database (migrations in
//!   `../migrations/postgres`).
//! - [`traffic`]: statements and round trips to a database server, counted.
//! - [`migrate`]: the one-way move of a fleet from SQLite to PostgreSQL.
//! - [`testing`]: what the test suites use to run against either backend.

pub mod migrate;
pub mod postgres;
pub mod records;
pub mod sql;
pub mod sqlite;
pub mod testing;
pub mod traffic;
pub mod tx;
pub mod writer;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

pub use records::*;
pub use traffic::TrafficTotals;
pub use tx::{
    Accounts, Archive, Batches, Jobs, Leases, Leasing, MoreRuns, OpenUnit, Results, StoreResult,
    Studies, Tx, Units, Verifications, ViewAsk, Workers,
};
pub use writer::{WriteLock, WriterTotals};

/// A store failure. Details stay in logs; clients see an internal error.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database failed.
    #[error("database: {0}")]
    Db(sqlx::Error),
    /// The PostgreSQL writer's connection failed, or a statement on it (with its causes:
    /// tokio-postgres says "db error" or "error performing TLS handshake" and keeps the
    /// server's message or the certificate's fault in its source).
    #[error("database: {}", e2fleet_proto::client::error_chain(.0))]
    Postgres(tokio_postgres::Error),
    /// A migration failed.
    #[error("migration: {0}")]
    Migrate(sqlx::migrate::MigrateError),
    /// A stored value does not decode (a bug or a hand-edited database).
    #[error("corrupt stored value: {0}")]
    Corrupt(String),
    /// A statement failed.
    #[error("database: {0}")]
    Sqlite(rusqlite::Error),
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

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Sqlite(e)
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        StoreError::Migrate(e)
    }
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        StoreError::Postgres(e)
    }
}

// the message names the cause itself ("{0}"), so it is not also a `source()`: an error
// chain then says each cause once
impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::Db(e)
    }
}

/// The coordinator's database.
#[derive(Clone)]
pub struct Store {
    backend: Backend,
}

#[derive(Clone)]
enum Backend {
    Sqlite(sqlite::SqliteStore),
    Postgres(postgres::PgStore),
}

/// Where the coordinator's database is: a SQLite file (a path, or `sqlite://path`) or a
/// PostgreSQL database (`postgres://user:password@host:port/database`, or
/// `postgresql://`). Shown (`Display` and `Debug`) without its password.
#[derive(Clone, PartialEq, Eq)]
pub enum Database {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL connection address.
    Postgres(String),
}

impl FromStr for Database {
    type Err = String;

    fn from_str(s: &str) -> Result<Database, String> {
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            return Ok(Database::Postgres(s.to_string()));
        }
        let path = s.strip_prefix("sqlite://").unwrap_or(s);
        if path.is_empty() {
            return Err("an empty database path".into());
        }
        Ok(Database::Sqlite(PathBuf::from(path)))
    }
}

impl fmt::Debug for Database {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Database({self})")
    }
}

impl fmt::Display for Database {
    /// The path, or the PostgreSQL address without its password (for logs).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Database::Sqlite(path) => write!(f, "{}", path.display()),
            Database::Postgres(url) => match url::Url::parse(url) {
                Ok(mut u) => {
                    if u.password().is_some() {
                        let _ = u.set_password(Some("***"));
                    }
                    // a password may come as a parameter too (`?password=...`)
                    let secret = |k: &str| k.to_ascii_lowercase().contains("password");
                    if u.query_pairs().any(|(k, _)| secret(&k)) {
                        let pairs: Vec<(String, String)> = u
                            .query_pairs()
                            .map(|(k, v)| {
                                let v = if secret(&k) {
                                    "***".into()
                                } else {
                                    v.into_owned()
                                };
                                (k.into_owned(), v)
                            })
                            .collect();
                        u.query_pairs_mut().clear().extend_pairs(pairs);
                    }
                    write!(f, "{u}")
                }
                // not a URL: nothing of it is shown
                Err(_) => write!(f, "postgres://(address not shown)"),
            },
        }
    }
}

impl Store {
    /// Opens (creating if needed) the SQLite database at `path` and applies migrations.
    pub async fn open(path: &Path) -> Result<Store, StoreError> {
        Ok(Store {
            backend: Backend::Sqlite(sqlite::SqliteStore::open(path).await?),
        })
    }

    /// Opens the database `db` (either backend) and applies its migrations.
    pub async fn connect(db: &Database) -> Result<Store, StoreError> {
        Ok(Store {
            backend: match db {
                Database::Sqlite(path) => Backend::Sqlite(sqlite::SqliteStore::open(path).await?),
                Database::Postgres(url) => Backend::Postgres(postgres::PgStore::open(url).await?),
            },
        })
    }

    /// Which backend this is: `"sqlite"` or `"postgres"`.
    pub fn backend(&self) -> &'static str {
        match &self.backend {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    /// Whether this coordinator does the upkeep that runs on one coordinator only (the
    /// archiver): always on SQLite (one coordinator per file), on PostgreSQL the holder
    /// of the upkeep lock ([`postgres::PgStore::is_leader`]).
    pub fn is_leader(&self) -> bool {
        match &self.backend {
            Backend::Sqlite(_) => true,
            Backend::Postgres(s) => s.is_leader(),
        }
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
        self.write_with(WriteLock::All, f).await
    }

    /// [`Store::write`] in a transaction that excludes only the writes `lock` says (a
    /// lease or report batch; see [`WriteLock`]).
    pub async fn write_with<T, E, F>(&self, lock: WriteLock, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut dyn Tx) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        match &self.backend {
            Backend::Sqlite(s) => s.write(lock, f).await,
            Backend::Postgres(s) => s.write(lock, f).await,
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
            Backend::Postgres(s) => s.read(f).await,
        }
    }

    /// The writer's running totals (queue wait, run time, batches).
    pub fn writer_stats(&self) -> WriterTotals {
        match &self.backend {
            Backend::Sqlite(s) => s.writer_stats(),
            Backend::Postgres(s) => s.writer_stats(),
        }
    }

    /// After many rows arrived at once (a job's units): PostgreSQL's planner statistics
    /// are brought up to date at once, in the background. The write path's statements are
    /// prepared once per connection and their plans kept; a plan made from the statistics
    /// of nearly empty tables (a new database, a first job) walked every open unit for
    /// each lease until autovacuum's next analysis (up to a minute or more). Nothing to do
    /// on SQLite, whose statements name their indexes.
    pub fn refresh_statistics(&self) {
        if let Backend::Postgres(s) = &self.backend {
            s.refresh_statistics();
        }
    }

    /// Statements and round trips to the database server so far (`None` on SQLite: it
    /// runs in this process).
    pub fn traffic(&self) -> Option<TrafficTotals> {
        match &self.backend {
            Backend::Sqlite(_) => None,
            Backend::Postgres(s) => Some(s.traffic()),
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

#[cfg(test)]
mod tests {
    use super::Database;

    #[test]
    fn a_database_is_a_path_or_a_postgres_address_and_logs_without_its_password() {
        let pg: Database = "postgres://e2fleet:s3cret@db.internal:5432/fleet?sslmode=require"
            .parse()
            .unwrap();
        assert!(matches!(pg, Database::Postgres(_)));
        let shown = pg.to_string();
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("db.internal:5432/fleet"), "{shown}");
        let param: Database = "postgres://e2fleet@db/fleet?sslmode=require&password=s3cret"
            .parse()
            .unwrap();
        let shown = param.to_string();
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("sslmode=require"), "{shown}");
        assert!(matches!(
            "postgresql://h/db".parse::<Database>(),
            Ok(Database::Postgres(_))
        ));
        assert_eq!(
            "sqlite://var/e2fleet.db".parse::<Database>(),
            Ok(Database::Sqlite("var/e2fleet.db".into()))
        );
        assert_eq!(
            "e2fleet.db".parse::<Database>(),
            Ok(Database::Sqlite("e2fleet.db".into()))
        );
        assert!("".parse::<Database>().is_err());
    }
}
