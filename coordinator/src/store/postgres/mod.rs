//! The PostgreSQL backend: the same statements as SQLite ([`crate::store::sql`]), for a
//! fleet that wants its database on a server it already runs, backs up and replicates —
//! and for several coordinators on one database behind a load balancer.
//!
//! # How it runs
//! - **Writes** go through the same group-commit writer as SQLite
//!   ([`crate::store::writer`]) on two connections per coordinator. Each transaction
//!   first takes advisory locks held until its commit ([`crate::store::WriteLock`]):
//!   a lease batch [`LEASES_LOCK`], a report batch [`REPORTS_LOCK`], every other write
//!   both (in that order). So lease batches of all coordinators run one after another,
//!   report batches too, each seeing every row the others of its kind committed, and a
//!   lease batch runs beside a report batch: they write different rows of the hot tables,
//!   or the same unit's lease count by relative changes, and neither decides on a row the
//!   other rewrites. A unit is never leased twice (grants take turns, and a report never
//!   makes an open unit leasable twice over); a report on a lease is recorded once (report
//!   batches take turns; the lease row and the `results.lease_id` unique key decide it).
//!   What a lease write does besides granting (expiring leases, splitting a continuation,
//!   asking a run to yield) changes what a report is decided against: it runs only when
//!   the lease batch also takes [`REPORTS_LOCK`], tried without waiting
//!   ([`crate::store::Leases::run_alone`]; else the next lease write tries, and the
//!   background expiry excludes both). No transaction waits for a lock while holding one
//!   another waits for in turn. A coordinator killed mid-batch loses its open
//!   transaction, which PostgreSQL rolls back (its workers were not yet told anything:
//!   replies go out after the commit), and its locks with it; the others carry on.
//!   One lock for every write (how this store began) made the batches take turns: the
//!   load bench completed ~1,800-1,900 units/s with the server on its 2 cores; with the
//!   two kinds side by side ~2,050-2,180, as SQLite does (docs/benchmarks.md).
//! - The writer's connection (`session.rs`, tokio-postgres) pipelines: a change whose row
//!   count nobody reads is held and sent with the next statement; a lease or report
//!   batch's `BEGIN` and advisory lock go with its first statement (a batch is two round
//!   trips: its read, then its writes and `COMMIT`); and what a lease request
//!   or a report is checked against is read in one statement each
//!   ([`crate::store::tx::Leases::lease_view`], [`crate::store::tx::Results::report_view`]).
//!   A unit's first result accepted on its own is inserted once, already decided
//!   (`accept_alone` in the fleet's quorum rules).
//! - Lease requests and reports come in batches (`crate::fleet` queues them), and what a
//!   batch reads and writes is one set-based statement each on this backend
//!   ([`crate::store::Batches`], `store/sql/batch.rs`: the batch's rows as one JSON
//!   parameter): a lease and its report cost ~0.4 round trips and ~0.6 statements (3.8
//!   and 12.8 written one request at a time; the load bench counts them,
//!   [`crate::store::traffic`]).
//! - The hot tables (units, leases, results, bodies) carry no foreign keys: every row is
//!   written from rows the same transaction just read, so the checks never fired, and
//!   each cost a locking read of the row it named (`migrations/postgres/0023_hot_path.sql`).
//! - **TLS**: both the read pool (sqlx) and the writer's connections (tokio-postgres, with
//!   rustls: `store/postgres/tls.rs`) protect the link as the address's `sslmode` says, with libpq's
//!   meaning (`prefer` by default; `verify-full` and `sslrootcert` to check the server).
//! - **Reads** run on a pool (sqlx), each in a `REPEATABLE READ READ ONLY` transaction:
//!   one consistent snapshot, never blocking or blocked by the writers.
//! - The fleet logic is synchronous (closures over `&mut dyn Tx`); its statements are run
//!   with `block_on`, on threads that are not async tasks: the writer thread on a
//!   single-threaded runtime of its own, reads on the blocking pool of a small runtime of
//!   this store's own.
//! - Plans: the hot statements are prepared once per connection and their plans kept, so
//!   they are written to leave the planner no plan whose cost grows with a job's done
//!   units or ended leases (partial indexes over live rows, per-unit lookups; see
//!   `migrations/postgres/0021_open_units.sql`), and the units table's statistics are
//!   refreshed after a submission ([`PgStore::refresh_statistics`]).
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

mod session;
mod tls;
use super::tx::StoreResult;
use super::writer::{MAX_QUEUED, WriteLock, Writer, WriterTotals};
use super::{StoreError, Tx};
use session::PgSession;
use tls::WriterAddress;

/// The advisory lock a write transaction holds until its commit to exclude lease batches
/// (any 64-bit key the operator's other applications do not use: "e2fleet" in ASCII).
/// Every write but a report batch holds it ([`crate::store::WriteLock`]).
pub const LEASES_LOCK: i64 = 0x0065_3266_6c65_6574;
/// The session advisory lock of the coordinator that does the once-only upkeep.
pub const LEADER_LOCK: i64 = LEASES_LOCK + 1;
/// The advisory lock a write transaction holds until its commit to exclude report
/// batches: every write but a lease batch holds it, taken after [`LEASES_LOCK`] by a
/// write that holds both; a lease batch that needs it tries it without waiting
/// ([`crate::store::Leases::run_alone`]), so no two transactions wait on each other's lock.
pub const REPORTS_LOCK: i64 = LEASES_LOCK + 2;
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

/// Writer threads, each with its own connection: a lease batch and a report batch run
/// side by side ([`LEASES_LOCK`], [`REPORTS_LOCK`]); and when batches of one kind take
/// turns, a second thread's batch is waiting at the lock, its jobs taken, when the first
/// one's commit goes out, so the time a commit waits for the disk, and the round trips of
/// the next `BEGIN`, are no longer time the lock stands idle.
const WRITERS: usize = 2;
/// Read connections in the pool, and threads that run reads (each holds a connection
/// from start to end; reads beyond them wait for a thread).
const READERS: u32 = 8;
/// The name of the threads of the store's own runtime (its async tasks and its reads).
const THREAD_NAME: &str = "e2fleet-pg";
/// Longest a write batch keeps taking queued jobs: a job here costs network round trips
/// (~1 ms a report), so a batch of SQLite's 2 ms would mostly be one job, and every
/// commit waits for the WAL to reach the disk.
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
            // holds the write locks: the server ends its session, and the lock, after this
            // (a batch takes milliseconds)
            .options([(
                "idle_in_transaction_session_timeout",
                format!("{}ms", IDLE_IN_TRANSACTION.as_millis()),
            )]);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            // a read holds a pool connection from start to end: more threads than
            // connections would only wait for one (a burst of reads once parked ~100)
            .max_blocking_threads(READERS as usize)
            .thread_name(THREAD_NAME)
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
        let address = writer_config(url)?;
        info!(sslmode = ?address.mode, "connecting the writer to PostgreSQL");
        let sessions = (0..WRITERS)
            .map(|_| PgSession::connect(address.clone(), traffic.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let writer = Writer::start_many(sessions, MAX_QUEUED)?;
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
                    rt: &rt,
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

    /// Brings the planner's statistics of the units table up to date, in the
    /// background (after a submission: see [`crate::store::Store::refresh_statistics`]).
    pub fn refresh_statistics(&self) {
        let pool = self.pool.clone();
        self.rt.spawn(async move {
            // units only: a job's leases and results start empty, and statistics taken
            // of an empty table make the planner scan it whole (an unanalysed one is
            // assumed to hold some pages, and gets index lookups)
            if let Err(e) = sqlx::query("ANALYZE units").execute(&pool).await {
                warn!(error = %e, "cannot refresh the planner's statistics");
            }
        });
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

/// How the writer's connection plans: by key, whatever the statistics say.
///
/// Every statement a write batch runs finds its rows by key (a batch's ids joined to a
/// table's primary key, a partial index over the live rows), and its plan is made once
/// per connection and kept. Left to the statistics of that moment, the planner costed a
/// batch of a hundred ids against a job's first few thousand leases or units as a hash
/// join over a scan of the whole table, and kept that plan while the table grew: the
/// report batch's read cost ~1 ms per report after 4,000 leases (275 us a row on a
/// quarter of the load), and the server's CPU per completed unit was 560-700 us; with
/// scans and hash or merge joins priced out, 350-370 us, and the load bench's
/// units/s went from 1,220-1,450 to ~1,800 (docs/benchmarks.md). A statement with no
/// index to use still scans; `jit=off` keeps such a plan's inflated cost from sending
/// it to the JIT compiler (~75 ms to compile a one-row read of the jobs table).
const WRITER_PLANNING: &str =
    "-c jit=off -c enable_seqscan=off -c enable_hashjoin=off -c enable_mergejoin=off";

/// The writer connection's settings: the same address, name, session limits and TLS
/// (`sslmode`, `sslrootcert`, read as libpq and the read pool read them: [`tls`]) as the
/// read pool's (tokio-postgres reads the same URL forms: host, port, user, password,
/// database, `?host=/run/postgresql` for a socket), and [`WRITER_PLANNING`].
pub(super) fn writer_config(url: &str) -> Result<WriterAddress, StoreError> {
    let mut address = WriterAddress::parse(url)?;
    address
        .config
        .application_name("e2fleet-coordinator")
        .connect_timeout(STATEMENT_LIMIT)
        .options(format!(
            "-c idle_in_transaction_session_timeout={} {WRITER_PLANNING}",
            IDLE_IN_TRANSACTION.as_millis()
        ));
    Ok(address)
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

/// Statements on a read connection of the pool (sqlx), inside a transaction its owner began.
/// `writes` counts the statements that may have changed rows or failed (a failed
/// statement spoils a PostgreSQL transaction: the writer must roll its batch back).
struct PgConn<'a> {
    rt: &'a Handle,
    c: &'a mut PgConnection,
    writes: &'a mut i64,
    traffic: &'a Traffic,
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

pub(super) fn may_write(sql: &str) -> bool {
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
pub(super) fn silent() -> StoreError {
    StoreError::Writer(format!(
        "no answer from PostgreSQL in {} s",
        STATEMENT_LIMIT.as_secs()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::PostgresServer;
    use crate::store::{Database, Store};

    /// Held by the tests here that open a store: the burst test counts the threads of
    /// every store of this process.
    static ONE_STORE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// Threads of this process named as the store's runtime names its threads.
    fn store_threads() -> usize {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|name| name.trim_end() == THREAD_NAME)
            .count()
    }

    #[test]
    #[cfg_attr(
        not(has_postgres),
        ignore = "no PostgreSQL server programs: apt-get install postgresql"
    )]
    fn a_burst_of_reads_runs_on_as_many_threads_as_read_connections() {
        let _alone = ONE_STORE_AT_A_TIME
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let server = PostgresServer::start_for("a_burst_of_reads");
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let url = crate::store::testing::create_database(server.url(), "e2fleet_reads")
                .await
                .unwrap();
            let store = Store::connect(&Database::Postgres(url)).await.unwrap();
            let reads: Vec<_> = (0..200)
                .map(|_| {
                    let store = store.clone();
                    tokio::spawn(async move {
                        store
                            .read(|tx| {
                                // long enough that the burst overlaps
                                std::thread::sleep(Duration::from_millis(5));
                                tx.list_jobs()
                            })
                            .await
                    })
                })
                .collect();
            let mut most = 0;
            for read in reads {
                assert!(read.await.unwrap().unwrap().is_empty());
                most = most.max(store_threads());
            }
            // the runtime's two async threads, and one a read connection
            assert!(
                most <= 2 + READERS as usize,
                "{most} threads ran {READERS} connections' reads"
            );
        });
    }

    #[test]
    #[cfg_attr(
        not(has_postgres),
        ignore = "no PostgreSQL server programs: apt-get install postgresql"
    )]
    fn every_text_column_compares_bytes_as_on_sqlite() {
        let _alone = ONE_STORE_AT_A_TIME
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let server = PostgresServer::start_for("text_bytes");
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let url = crate::store::testing::create_database(server.url(), "e2fleet_text_bytes")
                .await
                .unwrap();
            let store = Store::connect(&Database::Postgres(url.clone()))
                .await
                .unwrap();
            let mut c = PgConnection::connect(&url).await.unwrap();
            let other: Vec<(String, String)> = sqlx::query_as(
                "SELECT table_name::TEXT, column_name::TEXT FROM information_schema.columns \
                 WHERE table_schema = current_schema() AND data_type = 'text' \
                   AND table_name NOT LIKE '\\_sqlx%' AND collation_name IS DISTINCT FROM 'C'",
            )
            .fetch_all(&mut c)
            .await
            .unwrap();
            assert!(
                other.is_empty(),
                "text columns in a locale's order: {other:?}"
            );
            drop(store);
        });
    }
}
