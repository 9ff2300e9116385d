//! The PostgreSQL backend: the same statements as SQLite ([`crate::store::sql`]), for a
//! fleet that wants its database on a server it already runs, backs up and replicates —
//! and for several coordinators on one database behind a load balancer.
//!
//! # How it runs
//! - **Writes** go through the same group-commit writer as SQLite
//!   ([`crate::store::writer`]) on one connection per coordinator. Each batch's
//!   transaction first takes a database-wide advisory lock
//!   ([`WRITE_LOCK`], `pg_advisory_xact_lock`), held until its commit: the batches of all
//!   coordinators run one after another, each seeing every row the others committed. So
//!   the fleet logic, written as read-then-write closures, keeps its meaning with any
//!   number of coordinators: a unit is never leased twice (the second grant reads the
//!   first's counters), a report on a lease is recorded once (the lease row and the
//!   `results.lease_id` unique key decide it), quorums count committed rows. A coordinator
//!   killed mid-batch loses its open transaction, which PostgreSQL rolls back (its
//!   workers were not yet told anything: replies go out after the commit), and its lock
//!   with it; the others carry on.
//! - **Reads** run on a pool, each in a `REPEATABLE READ READ ONLY` transaction: one
//!   consistent snapshot, never blocking or blocked by the writers.
//! - The fleet logic is synchronous (closures over `&mut dyn Tx`); its statements are run
//!   with `Handle::block_on` on a small runtime of this store's own, on threads that are
//!   not async tasks (the writer thread, and the runtime's blocking pool for reads).
//! - Migrations (`../migrations/postgres`) are applied at open; sqlx's migrator takes its
//!   own advisory lock, so coordinators starting together apply them once.
//!
//! # Upkeep done once
//! [`PgStore::is_leader`]: one coordinator at a time holds a session advisory lock
//! ([`LEADER_LOCK`]) on a connection of its own and runs the background upkeep that need
//! not run everywhere (the archiver). When it dies its connection closes, the lock goes
//! with it, and another coordinator takes it within [`LEADER_RETRY`]. Lease expiry and
//! continuation splitting run inside write transactions, so however many coordinators
//! attempt them, each lease expires once and each unit is split once.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqlx::postgres::{PgArguments, PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::query::Query;
use sqlx::{
    Column, ConnectOptions, Connection, Executor, PgConnection, PgPool, Postgres, Row as _,
};
use sqlx::{TypeInfo, ValueRef};
use tokio::runtime::{Handle, Runtime};
use tokio_stream::StreamExt;
use tracing::{info, warn};

use super::sql::{Conn, Kind, Row, SqlTx, Value, for_postgres};
use super::traffic::{Traffic, TrafficTotals};
use super::tx::StoreResult;
use super::writer::{MAX_QUEUED, Session, Writer, WriterTotals};
use super::{StoreError, Tx};

/// The advisory lock every write batch holds until its commit (any 64-bit key the
/// operator's other applications do not use: "e2fleet" in ASCII).
pub const WRITE_LOCK: i64 = 0x0065_3266_6c65_6574;
/// The session advisory lock of the coordinator that does the once-only upkeep.
pub const LEADER_LOCK: i64 = WRITE_LOCK + 1;
/// How often a coordinator that is not the leader tries to become it.
pub const LEADER_RETRY: Duration = Duration::from_secs(2);
/// How long a session may sit in an open transaction without a statement before the
/// server ends it (its locks go with it): a coordinator whose link to the database went
/// silent mid-batch stalls the others at most this long.
pub const IDLE_IN_TRANSACTION: Duration = Duration::from_secs(10);

/// How long one statement may take, as this coordinator sees it, before its connection is
/// given up (a link that went silent answers nothing, ever): the batch fails, its callers
/// are told to retry, and the next batch connects again.
pub const STATEMENT_LIMIT: Duration = Duration::from_secs(15);

/// Read connections in the pool.
const READERS: u32 = 8;
/// Longest a write batch keeps taking queued jobs: a job here costs a network round trip
/// per statement (~1 ms a report), so a batch of SQLite's 2 ms would mostly be one job,
/// and every commit waits for the WAL to reach the disk.
pub const BATCH_TIME: Duration = Duration::from_millis(10);

/// The runtime the store's connections live on, shut down without waiting when the last
/// handle goes (dropping a runtime inside another would panic).
struct OwnRuntime(Option<Runtime>);

impl Drop for OwnRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// The PostgreSQL store.
#[derive(Clone)]
pub struct PgStore {
    rt: Handle,
    pool: PgPool,
    writer: Writer,
    leader: Arc<AtomicBool>,
    traffic: Arc<Traffic>,
    // last: the pool and writer must not outlive the runtime their connections use
    _runtime: Arc<OwnRuntime>,
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://user:pass@host/db`), applies the
    /// migrations and starts the writer.
    pub async fn open(url: &str) -> Result<PgStore, StoreError> {
        let options = PgConnectOptions::from_str(url)
            .map_err(|e| StoreError::Open(format!("bad PostgreSQL address: {e}")))?
            .application_name("e2fleet-coordinator")
            .log_statements(tracing::log::LevelFilter::Trace)
            // a coordinator cut off from the database in the middle of a write batch
            // holds the write lock: the server ends its session, and the lock, after this
            // (a batch takes milliseconds)
            .options([(
                "idle_in_transaction_session_timeout",
                format!("{}ms", IDLE_IN_TRANSACTION.as_millis()),
            )]);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("e2fleet-pg")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Open(format!("cannot start the store's runtime: {e}")))?;
        let rt = runtime.handle().clone();
        let runtime = Arc::new(OwnRuntime(Some(runtime)));
        let pool = {
            let options = options.clone();
            rt.spawn(async move {
                let pool = PgPoolOptions::new()
                    .max_connections(READERS)
                    .acquire_timeout(Duration::from_secs(10))
                    .connect_with(options.clone())
                    .await?;
                sqlx::migrate!("../migrations/postgres").run(&pool).await?;
                Ok::<_, StoreError>(pool)
            })
            .await
            .map_err(|e| StoreError::Open(format!("cannot open PostgreSQL: {e}")))?
            .map_err(|e| match e {
                StoreError::Db(e) => {
                    StoreError::Open(format!("cannot open the PostgreSQL database: {e}"))
                }
                e => e,
            })?
        };
        let traffic = Arc::new(Traffic::default());
        let writer = Writer::start(
            PgSession::connect(options.clone(), traffic.clone())?,
            MAX_QUEUED,
        )?;
        let leader = Arc::new(AtomicBool::new(false));
        rt.spawn(lead(options, leader.clone()));
        Ok(PgStore {
            rt,
            pool,
            writer,
            leader,
            traffic,
            _runtime: runtime,
        })
    }

    /// See [`crate::store::Store::write`].
    pub async fn write<T, E, F>(&self, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut dyn Tx) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        self.writer.write(move |c| f(&mut SqlTx::new(c))).await
    }

    /// See [`crate::store::Store::read`].
    pub async fn read<T, E, F>(&self, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut dyn Tx) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        let (rt, pool, traffic) = (self.rt.clone(), self.pool.clone(), self.traffic.clone());
        self.rt
            .spawn_blocking(move || {
                let mut c = rt.block_on(pool.acquire()).map_err(StoreError::from)?;
                let begun = rt.block_on(async {
                    tokio::time::timeout(
                        STATEMENT_LIMIT,
                        c.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"),
                    )
                    .await
                });
                match begun {
                    Ok(r) => {
                        r.map_err(StoreError::from)?;
                    }
                    Err(_) => {
                        c.detach();
                        return Err(silent().into());
                    }
                }
                traffic.exchanged(1);
                let mut writes = 0;
                let out = f(&mut SqlTx::new(&mut PgConn {
                    rt: Driver::Shared(&rt),
                    c: &mut c,
                    writes: &mut writes,
                    traffic: &traffic,
                }));
                traffic.exchanged(1);
                let committed = rt.block_on(async {
                    tokio::time::timeout(STATEMENT_LIMIT, c.execute("COMMIT")).await
                });
                if !matches!(committed, Ok(Ok(_))) {
                    // a broken (or silent) connection is not given back to the pool
                    c.detach();
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

    /// Statements and round trips so far, the writer's and the reads'.
    pub fn traffic(&self) -> TrafficTotals {
        self.traffic.totals()
    }

    /// Whether this coordinator holds [`LEADER_LOCK`] now.
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::Relaxed)
    }
}

/// Keeps trying to hold [`LEADER_LOCK`] on a connection of its own; `leader` says
/// whether it does.
async fn lead(options: PgConnectOptions, leader: Arc<AtomicBool>) {
    loop {
        let held = async {
            let mut c = PgConnection::connect_with(&options).await?;
            loop {
                let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
                    .bind(LEADER_LOCK)
                    .fetch_one(&mut c)
                    .await?;
                if got {
                    break;
                }
                tokio::time::sleep(LEADER_RETRY).await;
            }
            leader.store(true, Ordering::Relaxed);
            info!("this coordinator does the fleet's once-only upkeep");
            // hold it while the connection lives
            loop {
                tokio::time::sleep(LEADER_RETRY).await;
                c.ping().await?;
            }
            #[allow(unreachable_code)]
            Ok::<(), sqlx::Error>(())
        }
        .await;
        if leader.swap(false, Ordering::Relaxed) {
            warn!(error = ?held.err(), "lost the upkeep lock; will try again");
        }
        tokio::time::sleep(LEADER_RETRY).await;
    }
}

/// The writer's connection, on a single-threaded runtime of its own that the writer
/// thread drives (a statement's round trip then never crosses threads: ~3x faster than
/// through the shared runtime); reconnects when it broke.
struct PgSession {
    rt: Runtime,
    conn: Option<PgConnection>,
    options: PgConnectOptions,
    writes: i64,
    traffic: Arc<Traffic>,
}

impl PgSession {
    /// Connects, from a thread of its own (this may be called inside another runtime).
    fn connect(options: PgConnectOptions, traffic: Arc<Traffic>) -> Result<PgSession, StoreError> {
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| StoreError::Open(format!("cannot start the writer's runtime: {e}")))?;
            let conn = rt.block_on(PgConnection::connect_with(&options))?;
            Ok(PgSession {
                rt,
                conn: Some(conn),
                options,
                writes: 0,
                traffic,
            })
        })
        .join()
        .map_err(|_| StoreError::Open("the writer's connection failed".into()))?
    }

    fn run(&mut self, sql: &str) -> Result<(), String> {
        let Some(c) = self.conn.as_mut() else {
            return Err("no connection to PostgreSQL".into());
        };
        self.traffic.exchanged(1);
        let done = self
            .rt
            .block_on(async { tokio::time::timeout(STATEMENT_LIMIT, c.execute(sql)).await });
        match done {
            Ok(r) => r.map(|_| ()).map_err(|e| e.to_string()),
            Err(_) => {
                // the connection is gone silent: the next batch connects anew
                self.conn = None;
                Err(format!(
                    "no answer from PostgreSQL in {} s",
                    STATEMENT_LIMIT.as_secs()
                ))
            }
        }
    }

    /// The connection, to run a job's statements on.
    fn statements(&mut self) -> StoreResult<PgConn<'_>> {
        let c = self
            .conn
            .as_mut()
            .ok_or_else(|| StoreError::Writer("no connection to PostgreSQL".into()))?;
        Ok(PgConn {
            rt: Driver::Own(&self.rt),
            c,
            writes: &mut self.writes,
            traffic: &self.traffic,
        })
    }

    /// A new connection in place of the old (none if the server cannot be reached).
    fn reconnect(&mut self) {
        let options = self.options.clone();
        self.conn = self
            .rt
            .block_on(async {
                tokio::time::timeout(STATEMENT_LIMIT, PgConnection::connect_with(&options)).await
            })
            .map_err(|_| warn!("no answer from PostgreSQL to a new connection"))
            .ok()
            .and_then(|c| {
                c.map_err(|e| warn!(error = %e, "cannot reconnect to PostgreSQL"))
                    .ok()
            });
    }

    fn begin_once(&mut self) -> Result<(), String> {
        self.run("BEGIN")?;
        let lock = format!("SELECT pg_advisory_xact_lock({WRITE_LOCK})");
        self.run(&lock)
    }
}

impl Session for PgSession {
    fn begin(&mut self) -> Result<(), String> {
        if self.conn.is_none() {
            self.reconnect();
        }
        match self.begin_once() {
            Ok(()) => Ok(()),
            Err(first) => {
                // the server restarted or the connection broke: one new connection
                warn!(error = %first, "the write connection failed; reconnecting");
                self.rollback();
                self.reconnect();
                self.begin_once()
            }
        }
    }

    fn commit(&mut self) -> Result<(), String> {
        self.run("COMMIT")
    }

    fn rollback(&mut self) {
        let _ = self.run("ROLLBACK");
    }

    fn changes(&mut self) -> Option<i64> {
        Some(self.writes)
    }

    fn conn(&mut self) -> &mut dyn Conn {
        self
    }

    fn batch_time(&self) -> Duration {
        BATCH_TIME
    }
}

impl Conn for PgSession {
    fn is_postgres(&self) -> bool {
        true
    }

    fn execute(&mut self, sql: &str, params: &[Value]) -> StoreResult<usize> {
        self.statements()?.execute(sql, params)
    }

    fn for_each(
        &mut self,
        sql: &str,
        params: &[Value],
        each: &mut dyn FnMut(&Row) -> StoreResult<()>,
    ) -> StoreResult<()> {
        self.statements()?.for_each(sql, params, each)
    }
}

/// Statements on a PostgreSQL connection, inside a transaction its owner began.
/// `writes` counts the statements that may have changed rows or failed (a failed
/// statement spoils a PostgreSQL transaction: the writer must roll its batch back).
struct PgConn<'a> {
    rt: Driver<'a>,
    c: &'a mut PgConnection,
    writes: &'a mut i64,
    traffic: &'a Traffic,
}

/// What runs a statement's future to its end from a synchronous caller: the shared
/// runtime's handle (reads, on its blocking threads) or the writer's own single-threaded
/// runtime (only `Runtime::block_on` drives a current-thread runtime's I/O).
enum Driver<'a> {
    Shared(&'a Handle),
    Own(&'a Runtime),
}

impl Driver<'_> {
    fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        match self {
            Driver::Shared(h) => h.block_on(f),
            Driver::Own(rt) => rt.block_on(f),
        }
    }
}

/// Binds a value to a statement as its PostgreSQL type.
pub(crate) fn bind<'q>(
    q: Query<'q, Postgres, PgArguments>,
    v: &'q Value,
) -> Query<'q, Postgres, PgArguments> {
    match v {
        Value::Null(Kind::Int) => q.bind(None::<i64>),
        Value::Null(Kind::Real) => q.bind(None::<f64>),
        Value::Null(Kind::Text) => q.bind(None::<String>),
        Value::Null(Kind::Blob) => q.bind(None::<Vec<u8>>),
        Value::Int(n) => q.bind(*n),
        Value::Real(x) => q.bind(*x),
        Value::Text(s) => q.bind(s.as_str()),
        Value::Blob(b) => q.bind(b.as_slice()),
    }
}

/// Column `i` of a row as a [`Value`] (integers of every width, booleans as 0/1).
fn value_at(row: &PgRow, i: usize) -> StoreResult<Value> {
    let raw = row.try_get_raw(i)?;
    let ty = raw.type_info().name().to_string();
    if raw.is_null() {
        return Ok(Value::Null(Kind::Int));
    }
    Ok(match ty.as_str() {
        "INT8" => Value::Int(row.try_get::<i64, _>(i)?),
        "INT4" => Value::Int(row.try_get::<i32, _>(i)?.into()),
        "INT2" => Value::Int(row.try_get::<i16, _>(i)?.into()),
        "BOOL" => Value::Int(row.try_get::<bool, _>(i)?.into()),
        "FLOAT8" => Value::Real(row.try_get::<f64, _>(i)?),
        "FLOAT4" => Value::Real(row.try_get::<f32, _>(i)?.into()),
        "TEXT" | "VARCHAR" | "BPCHAR" | "NAME" => Value::Text(row.try_get::<String, _>(i)?),
        "BYTEA" => Value::Blob(row.try_get::<Vec<u8>, _>(i)?),
        other => {
            return Err(StoreError::Corrupt(format!(
                "column {} is {other}, which the store does not read (a SUM is NUMERIC: CAST it AS BIGINT)",
                row.columns()[i].name()
            )));
        }
    })
}

fn may_write(sql: &str) -> bool {
    let head = sql.trim_start().get(..6).unwrap_or("").to_ascii_uppercase();
    matches!(head.as_str(), "INSERT" | "UPDATE" | "DELETE")
}

impl Conn for PgConn<'_> {
    fn is_postgres(&self) -> bool {
        true
    }

    fn execute(&mut self, sql: &str, params: &[Value]) -> StoreResult<usize> {
        let sql = for_postgres(sql);
        let q = params.iter().fold(sqlx::query(&sql), bind);
        *self.writes += 1;
        self.traffic.exchanged(1);
        let c = &mut *self.c;
        let done = self
            .rt
            .block_on(async { tokio::time::timeout(STATEMENT_LIMIT, q.execute(c)).await })
            .map_err(|_| silent())??;
        Ok(done.rows_affected() as usize)
    }

    fn for_each(
        &mut self,
        sql: &str,
        params: &[Value],
        each: &mut dyn FnMut(&Row) -> StoreResult<()>,
    ) -> StoreResult<()> {
        let text = for_postgres(sql);
        let q = params.iter().fold(sqlx::query(&text), bind);
        if may_write(sql) {
            *self.writes += 1;
        }
        self.traffic.exchanged(1);
        let writes = &mut *self.writes;
        let c = &mut *self.c;
        let all = async move {
            let mut rows = q.fetch(c);
            let mut row = Row::default();
            loop {
                let next = match rows.next().await {
                    None => return Ok(()),
                    Some(Err(e)) => {
                        *writes += 1;
                        return Err(e.into());
                    }
                    Some(Ok(r)) => r,
                };
                row.0.clear();
                for i in 0..next.columns().len() {
                    row.0.push(value_at(&next, i)?);
                }
                each(&row)?;
            }
        };
        self.rt
            .block_on(async { tokio::time::timeout(STATEMENT_LIMIT, all).await })
            .map_err(|_| silent())?
    }
}

/// A statement that got no answer in [`STATEMENT_LIMIT`].
fn silent() -> StoreError {
    StoreError::Writer(format!(
        "no answer from PostgreSQL in {} s",
        STATEMENT_LIMIT.as_secs()
    ))
}
