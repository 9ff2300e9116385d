//! The embedded SQLite backend: WAL, foreign keys, a busy timeout.
//!
//! - Writes run on one thread that owns a synchronous connection, with group commit
//!   ([`crate::store::writer`] explains why: SQLite has one writer, so throughput is how
//!   fast one thread applies writes). A second thread checkpoints the WAL
//!   ([`CHECKPOINT_EVERY`]), so the writer never does, and the writer starts the WAL over
//!   between batches when it passes [`WAL_LIMIT_BYTES`].
//! - Reads run on a small pool of read-only connections on tokio's blocking threads,
//!   each read in its own transaction (a consistent snapshot; WAL readers never block
//!   the writer).
//! - Migrations (`../migrations/sqlite`, forward-only) are applied at open with sqlx.
//!
//! The statements themselves are [`crate::store::sql`]'s, shared with PostgreSQL; this
//! backend runs them on a rusqlite [`Connection`] ([`Conn`] below: prepared statements
//! cached per connection).

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use rusqlite::types::ValueRef;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use tracing::error;

use super::sql::{Conn, Kind, Row, SqlTx, Value};
use super::tx::StoreResult;
use super::writer::{MAX_QUEUED, Session, WriteLock, Writer, WriterTotals};
use super::{StoreError, Tx};

/// Read connections kept open.
const READERS: usize = 4;

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::ToSqlOutput::Borrowed;
        Ok(Borrowed(match self {
            Value::Null(_) => ValueRef::Null,
            Value::Int(n) => ValueRef::Integer(*n),
            Value::Real(x) => ValueRef::Real(*x),
            Value::Text(s) => ValueRef::Text(s.as_bytes()),
            Value::Blob(b) => ValueRef::Blob(b),
        }))
    }
}

fn value_of(v: ValueRef<'_>) -> Value {
    match v {
        ValueRef::Null => Value::Null(Kind::Int),
        ValueRef::Integer(n) => Value::Int(n),
        ValueRef::Real(x) => Value::Real(x),
        ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => Value::Blob(b.to_vec()),
    }
}

/// The statements of [`crate::store::sql`] on a SQLite connection, inside a transaction
/// its owner began.
impl Conn for Connection {
    fn execute(&mut self, sql: &str, params: &[Value]) -> StoreResult<usize> {
        Ok(self
            .prepare_cached(sql)?
            .execute(rusqlite::params_from_iter(params))?)
    }

    fn for_each(
        &mut self,
        sql: &str,
        params: &[Value],
        each: &mut dyn FnMut(&Row) -> StoreResult<()>,
    ) -> StoreResult<()> {
        let mut q = self.prepare_cached(sql)?;
        let width = q.column_count();
        let mut rows = q.query(rusqlite::params_from_iter(params))?;
        let mut row = Row(Vec::with_capacity(width));
        while let Some(r) = rows.next()? {
            row.0.clear();
            for i in 0..width {
                row.0.push(value_of(r.get_ref(i)?));
            }
            each(&row)?;
        }
        Ok(())
    }
}

/// The writer's connection, and what its checkpointer last saw of the WAL.
struct SqliteSession {
    conn: Connection,
    wal: Arc<AtomicU64>,
    wal_checked: Instant,
    /// Dropped with the session when the writer thread ends: the checkpointer ends too.
    _alive: mpsc::Sender<()>,
}

impl Session for SqliteSession {
    fn begin(&mut self, _lock: WriteLock) -> Result<(), String> {
        self.conn
            .execute_batch("BEGIN IMMEDIATE")
            .map_err(|e| e.to_string())
    }

    fn commit(&mut self) -> Result<(), String> {
        self.conn.execute_batch("COMMIT").map_err(|e| e.to_string())
    }

    fn rollback(&mut self) {
        let _ = self.conn.execute_batch("ROLLBACK");
    }

    fn changes(&mut self) -> Option<i64> {
        self.conn
            .prepare_cached("SELECT total_changes()")
            .and_then(|mut q| q.query_row([], |r| r.get(0)))
            .ok()
    }

    fn conn(&mut self) -> &mut dyn Conn {
        &mut self.conn
    }

    fn between_batches(&mut self) -> bool {
        if self.wal_checked.elapsed() < WAL_CHECK_EVERY {
            return false;
        }
        self.wal_checked = Instant::now();
        reset_wal_if_big(&self.conn, &self.wal)
    }
}

/// Opens a write connection to the (already migrated) database at `path` and starts the
/// writer thread on it (with a queue of `capacity` jobs) and the checkpointer beside it.
pub(crate) fn writer_at(path: &Path, capacity: usize) -> Result<Writer, StoreError> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    // temp_store = MEMORY: statement journals (multi-row statements inside the
    // batch's transaction) otherwise live in temporary files created and deleted per
    // batch: hundreds of open/write/unlink calls a second under load
    // wal_autocheckpoint = 0: the checkpointer thread copies the WAL back into the
    // database, so the writer never stalls on a checkpoint's copying and fsync
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; \
         PRAGMA temp_store = MEMORY; PRAGMA cache_size = -65536; PRAGMA wal_autocheckpoint = 0; \
         PRAGMA journal_size_limit = 67108864;",
    )?;
    conn.set_prepared_statement_cache_capacity(128);
    let checkpoints = Connection::open(path)?;
    checkpoints.busy_timeout(Duration::from_secs(10))?;
    let wal = Arc::new(AtomicU64::new(0));
    let checkpoint_wal = wal.clone();
    let (alive, writer_gone) = mpsc::channel::<()>();
    let writer = Writer::start(
        SqliteSession {
            conn,
            wal,
            wal_checked: Instant::now(),
            _alive: alive,
        },
        capacity,
    )?;
    std::thread::Builder::new()
        .name("e2fleet-checkpoint".into())
        .spawn(move || checkpoint(checkpoints, &checkpoint_wal, writer_gone))
        .map_err(|e| StoreError::Writer(format!("cannot start the checkpointer: {e}")))?;
    Ok(writer)
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
        sqlx::migrate!("../migrations/sqlite").run(&pool).await?;
        pool.close().await;
        Ok(SqliteStore {
            writer: writer_at(path, MAX_QUEUED)?,
            readers: Arc::new(ReadPool {
                path: path.to_path_buf(),
                idle: Mutex::new(Vec::new()),
            }),
        })
    }

    /// See [`crate::store::Store::write_with`].
    pub async fn write<T, E, F>(&self, lock: WriteLock, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut dyn Tx) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        self.writer
            .write_with(lock, move |c| f(&mut SqlTx::new(c)))
            .await
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
            let mut c = readers.take()?;
            c.execute_batch("BEGIN").map_err(StoreError::from)?;
            let out = f(&mut SqlTx::new(&mut c));
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

/// How often the checkpointer copies committed WAL frames into the database.
pub const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

/// WAL size past which the writer starts it over (also its `journal_size_limit`).
pub const WAL_LIMIT_BYTES: u64 = 64 << 20;

/// The checkpointer thread: a PASSIVE checkpoint every [`CHECKPOINT_EVERY`] (it never
/// waits for or blocks the writer or readers), until the writer thread ends.
///
/// A PASSIVE checkpoint copies frames back but never makes SQLite start the WAL over:
/// that happens only when a checkpoint has copied *every* frame and no reader still needs
/// the old ones, which under steady writes and reads is never. Left alone the WAL grows
/// without bound (a load bench of 60,000 units left a 3.4 GB WAL next to a 0.4 GB
/// database; a checkpoint that resets it from this thread starves behind the writer's back-to-back
/// batches). So the writer itself resets it between batches ([`reset_wal_if_big`]).
fn checkpoint(conn: Connection, wal: &AtomicU64, writer_gone: mpsc::Receiver<()>) {
    let page = conn
        .query_row("PRAGMA page_size", [], |r| r.get::<_, i64>(0))
        .unwrap_or(4096) as u64;
    while let Err(mpsc::RecvTimeoutError::Timeout) = writer_gone.recv_timeout(CHECKPOINT_EVERY) {
        match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get::<_, i64>(1)) {
            Ok(frames) => wal.store(frames.max(0) as u64 * page, Relaxed),
            Err(e) => error!(error = %e, "checkpoint failed; will retry"),
        }
    }
}

/// How often the writer looks at the WAL's size between batches.
const WAL_CHECK_EVERY: Duration = Duration::from_millis(100);

/// Starts the WAL over when it has grown past [`WAL_LIMIT_BYTES`] (`wal`: its size as
/// the checkpointer last saw it): a RESTART checkpoint run by the writer between batches
/// (so no write can starve it), which waits for the readers of old frames (reads are
/// short), copies what the PASSIVE checkpoints left, and makes the next batch write the
/// WAL from its start again — over blocks the file already has (`journal_size_limit`
/// trims it back to the limit). Returns whether it reset the WAL.
fn reset_wal_if_big(conn: &Connection, wal: &AtomicU64) -> bool {
    if wal.load(Relaxed) <= WAL_LIMIT_BYTES {
        return false;
    }
    // readers finish within a millisecond or so: poll for them every 100 µs (SQLite's own
    // busy handler sleeps 1, 2, 5, 10... ms, a stall every queued write waits out), for up
    // to a second, then give up until the next check
    fn spin(tries: i32) -> bool {
        std::thread::sleep(Duration::from_micros(100));
        tries < 10_000
    }
    let _ = conn.busy_handler(Some(spin));
    let reset = match conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |r| r.get::<_, i64>(0)) {
        Ok(0) => {
            wal.store(0, Relaxed);
            true
        }
        Ok(_) => false,
        Err(e) => {
            error!(error = %e, "WAL reset failed; will retry");
            false
        }
    };
    let _ = conn.busy_timeout(Duration::from_secs(10));
    reset
}
