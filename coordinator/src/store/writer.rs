//! The write path: a dedicated thread that owns the backend's write connection
//! ([`Session`]) and runs every job/unit/lease/result write, with group commit. Both
//! backends use it: SQLite with one thread (it has one writer), PostgreSQL with two
//! ([`Writer::start_many`]: each transaction takes the database's locks of its
//! [`WriteLock`], so lease batches of all threads and coordinators run one after another,
//! report batches too, a lease batch beside a report batch, and every other write alone;
//! see [`crate::store::postgres`]). One commit is paid per batch, not per request.
//!
//! # Why not sqlx here (SQLite)
//! sqlx runs each SQLite statement on a worker thread and hands the result back through a
//! channel: on this project's 2-vCPU machines that hop costs ~50 µs per statement
//! (`SELECT 1`: 51 µs through sqlx, 0.25 µs with a prepared statement on the calling
//! thread), and a report is ~20 statements. Serialised behind SQLite's single writer, the
//! hops capped the coordinator at ~600 completed units/s. Here each write job runs its
//! statements back to back on the thread that owns the connection (`rusqlite`, the same
//! bundled SQLite sqlx links), so a job costs what its SQL costs.
//!
//! # Group commit
//! Jobs queue on a bounded channel ([`MAX_QUEUED`]; when it is full a write is refused at
//! once with [`StoreError::Busy`], which callers answer with UNAVAILABLE). The thread takes the first, opens `BEGIN IMMEDIATE`, then
//! keeps taking whatever else is already queued (up to [`MAX_BATCH`] jobs or
//! [`MAX_BATCH_TIME`]) and commits them together: one commit per batch, not per request.
//! A job that fails (or panics) before changing anything fails alone; one that fails
//! after changing rows (a storage error, or a bug) makes the writer roll back its whole
//! batch and answer every job in it with an error — nothing is ever half-applied (see
//! `run_one` for why not a savepoint per job). Replies are sent only after the batch's
//! `COMMIT` returned: a caller never hears "done" for a write that is not durable.
//!
//! Between batches the session may do upkeep ([`Session::between_batches`]: SQLite starts
//! its WAL over there when it has grown).
//!
//! Every write goes through this thread (registrations and verification too), so SQLite's
//! busy handler never arbitrates between writers in this process.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tracing::error;

use crate::store::StoreError;
use crate::store::sql::Conn;

/// A backend's write connection, as the writer thread drives it.
pub trait Session: Send + 'static {
    /// Begins a batch's transaction, excluding the writes `lock` says.
    fn begin(&mut self, lock: WriteLock) -> Result<(), String>;
    /// Whether a transaction begun with `held` may also run a job that needs `next`
    /// (always, where one writer runs at a time).
    fn covers(&self, held: WriteLock, next: WriteLock) -> bool {
        let _ = (held, next);
        true
    }
    /// Commits it.
    fn commit(&mut self) -> Result<(), String>;
    /// Rolls it back.
    fn rollback(&mut self);
    /// A count that moves whenever a statement may have changed rows (or failed and so
    /// spoiled the transaction); `None` when it cannot be told.
    fn changes(&mut self) -> Option<i64>;
    /// The connection the jobs run their statements on.
    fn conn(&mut self) -> &mut dyn Conn;
    /// Upkeep between batches; `true` when it started the log over (SQLite's WAL).
    fn between_batches(&mut self) -> bool {
        false
    }
    /// Longest a batch keeps taking queued jobs before it commits.
    fn batch_time(&self) -> Duration {
        MAX_BATCH_TIME
    }
}

/// Most jobs committed together.
pub const MAX_BATCH: usize = 128;
/// Most jobs waiting for the writer; beyond it writes are refused with
/// [`StoreError::Busy`] (≈ 0.5-1 s of work at this project's measured ~60-90 µs a job) —
/// a worker told UNAVAILABLE backs off, instead of every request waiting ever longer.
pub const MAX_QUEUED: usize = 8_192;
/// Longest a batch keeps taking queued jobs before it commits (SQLite; see
/// [`Session::batch_time`]).
pub const MAX_BATCH_TIME: Duration = Duration::from_millis(2);

/// Which other writes a write transaction excludes while it runs.
///
/// One writer at a time needs no more (SQLite). Where several write side by side
/// (PostgreSQL: two writer threads on each of several coordinators), a lease batch and
/// a report batch touch different rows of the hot tables, or the same rows only by
/// relative changes (a unit's lease count), so they run beside each other: lease
/// batches take turns among themselves, report batches among themselves, and every
/// other write excludes both. What a lease batch does besides granting (expiring
/// leases, splitting a continuation, asking a run to yield) changes what a report is
/// decided against, so it runs only when the transaction also excludes reports
/// ([`crate::store::Leases::run_alone`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteLock {
    /// Every other write (the default).
    All,
    /// Other lease batches; runs beside report batches.
    Leases,
    /// Other report batches; runs beside lease batches.
    Reports,
}

/// What a finished job does once its batch's commit succeeded or failed.
type Reply = Box<dyn FnOnce(Result<(), String>) + Send>;
/// What a write job runs: on the connection, saying whether it succeeded, and how to
/// reply.
type Run = Box<dyn FnOnce(&mut dyn Conn) -> (bool, Reply) + Send>;
/// A write job, with the writes it excludes.
struct Job {
    lock: WriteLock,
    run: Run,
}

/// Handle to the writer thread. Cloning shares the thread; it ends when the last handle
/// is dropped.
#[derive(Clone)]
pub struct Writer {
    jobs: flume::Sender<Job>,
    stats: Arc<WriterStats>,
}

/// Running totals of the writer thread, for `/metrics` and the load benchmark: how long
/// jobs waited in the queue, how long they ran, and how long batches held the lock.
#[derive(Debug, Default)]
pub struct WriterStats {
    jobs: AtomicU64,
    queued_us: AtomicU64,
    running_us: AtomicU64,
    batches: AtomicU64,
    batch_us: AtomicU64,
    max_queued_us: AtomicU64,
    max_batch_us: AtomicU64,
    wal_resets: AtomicU64,
}

/// A copy of [`WriterStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriterTotals {
    /// Write jobs run.
    pub jobs: u64,
    /// Microseconds jobs spent queued, summed.
    pub queued_us: u64,
    /// Microseconds jobs spent running, summed.
    pub running_us: u64,
    /// Transactions committed (one per batch).
    pub batches: u64,
    /// Microseconds batches held their transactions (and write locks) open, summed over
    /// the threads.
    pub batch_us: u64,
    /// Longest a job waited in the queue, microseconds.
    pub max_queued_us: u64,
    /// Longest a batch held its transaction open, microseconds.
    pub max_batch_us: u64,
    /// Times the log was started over between batches (SQLite's WAL, see
    /// [`crate::store::sqlite`]).
    pub wal_resets: u64,
}

impl WriterStats {
    fn record_job(&self, queued: Duration, running: Duration) {
        self.jobs.fetch_add(1, Relaxed);
        self.queued_us.fetch_add(queued.as_micros() as u64, Relaxed);
        self.max_queued_us
            .fetch_max(queued.as_micros() as u64, Relaxed);
        self.running_us
            .fetch_add(running.as_micros() as u64, Relaxed);
    }

    fn record_batch(&self, held: Duration) {
        self.batches.fetch_add(1, Relaxed);
        self.batch_us.fetch_add(held.as_micros() as u64, Relaxed);
        self.max_batch_us
            .fetch_max(held.as_micros() as u64, Relaxed);
    }

    /// The totals so far.
    pub fn totals(&self) -> WriterTotals {
        WriterTotals {
            jobs: self.jobs.load(Relaxed),
            queued_us: self.queued_us.load(Relaxed),
            running_us: self.running_us.load(Relaxed),
            batches: self.batches.load(Relaxed),
            batch_us: self.batch_us.load(Relaxed),
            max_queued_us: self.max_queued_us.load(Relaxed),
            max_batch_us: self.max_batch_us.load(Relaxed),
            wal_resets: self.wal_resets.load(Relaxed),
        }
    }
}

impl Writer {
    /// Starts the thread on `session`, with a queue of `capacity` jobs ([`MAX_QUEUED`]
    /// normally).
    pub fn start(session: impl Session, capacity: usize) -> Result<Writer, StoreError> {
        Writer::start_many(vec![session], capacity)
    }

    /// Starts a thread on each of `sessions`, taking jobs from one queue: each runs its
    /// own batches in its own transaction. Only for a backend whose transactions keep
    /// their meaning side by side (PostgreSQL's, which take locks by [`WriteLock`]; see
    /// [`crate::store::postgres`]): a lease batch then runs beside a report batch, and
    /// one batch runs while another's commit waits for the disk.
    pub fn start_many<S: Session>(sessions: Vec<S>, capacity: usize) -> Result<Writer, StoreError> {
        let (tx, rx) = flume::bounded::<Job>(capacity);
        let stats = Arc::new(WriterStats::default());
        for session in sessions {
            let (rx, thread_stats) = (rx.clone(), stats.clone());
            std::thread::Builder::new()
                .name("e2fleet-writer".into())
                .spawn(move || run(session, &rx, thread_stats))
                .map_err(|e| StoreError::Writer(format!("cannot start the writer thread: {e}")))?;
        }
        Ok(Writer { jobs: tx, stats })
    }

    /// The writer's running totals.
    pub fn stats(&self) -> WriterTotals {
        self.stats.totals()
    }

    /// Runs `f` on the writer thread inside the next batch's transaction; returns its
    /// value once the batch is committed. `f` must check its input before it writes: an
    /// `Err` after changing rows rolls back the whole batch (see the module docs).
    pub async fn write<T, E, F>(&self, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut dyn Conn) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        self.write_with(WriteLock::All, f).await
    }

    /// [`Writer::write`] in a transaction that excludes only what `lock` says.
    pub async fn write_with<T, E, F>(&self, lock: WriteLock, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut dyn Conn) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        let (reply_tx, reply_rx) = oneshot::channel::<Result<T, E>>();
        let queued = Instant::now();
        let stats = self.stats.clone();
        let run = Box::new(move |conn: &mut dyn Conn| {
            let started = Instant::now();
            let out = f(conn);
            stats.record_job(started - queued, started.elapsed());
            let ok = out.is_ok();
            let reply: Reply = Box::new(move |commit: Result<(), String>| {
                let _ = reply_tx.send(match (commit, out) {
                    (Ok(()), out) => out,
                    // a job that failed keeps its own error
                    (Err(_), Err(own)) => Err(own),
                    (Err(e), Ok(_)) => Err(E::from(StoreError::Writer(e))),
                });
            });
            (ok, reply)
        });
        self.jobs.try_send(Job { lock, run }).map_err(|e| match e {
            // shed load: the caller answers UNAVAILABLE and the worker backs off
            flume::TrySendError::Full(_) => E::from(StoreError::Busy),
            flume::TrySendError::Disconnected(_) => {
                E::from(StoreError::Writer("the writer thread has stopped".into()))
            }
        })?;
        reply_rx.await.unwrap_or_else(|_| {
            Err(E::from(StoreError::Writer(
                "the write was not carried out (see the coordinator log); nothing was changed"
                    .into(),
            )))
        })
    }
}

// (a thread inside a batch only ever takes a job already queued: it never waits for one
// while its transaction, and on PostgreSQL its write locks, are open)
fn run(mut session: impl Session, jobs: &flume::Receiver<Job>, stats: Arc<WriterStats>) {
    let batch_time = session.batch_time();
    // a job taken that the last batch's locks did not cover: it begins the next one
    let mut carried: Option<Job> = None;
    while let Some(first) = carried.take().or_else(|| jobs.recv().ok()) {
        if session.between_batches() {
            stats.wal_resets.fetch_add(1, Relaxed);
        }
        let batch = tracing::debug_span!("write batch", jobs = tracing::field::Empty).entered();
        let lock = first.lock;
        if let Err(e) = session.begin(lock) {
            error!(error = %e, "writer: cannot begin a transaction");
            // dropping a job unrun drops its reply channel: its caller gets an error
            drop(first);
            continue;
        }
        let started = Instant::now();
        let mut replies = Vec::new();
        let mut spoiled = None;
        let mut next = Some(first);
        while let Some(job) = next.take() {
            let (reply, changed_then_failed) = run_one(&mut session, job);
            replies.extend(reply);
            if changed_then_failed {
                spoiled = Some(
                    "another write in the same transaction failed after changing rows; \
                     the whole batch was rolled back, nothing was applied"
                        .to_string(),
                );
                break;
            }
            if replies.len() < MAX_BATCH && started.elapsed() < batch_time {
                match jobs.try_recv() {
                    Ok(job) if session.covers(lock, job.lock) => next = Some(job),
                    Ok(job) => carried = Some(job),
                    Err(_) => {}
                }
            }
        }
        let commit = match spoiled {
            Some(why) => {
                error!("writer: a job failed after changing rows; its batch is rolled back");
                session.rollback();
                Err(why)
            }
            None => session.commit().map_err(|e| {
                error!(error = %e, "writer: commit failed; the batch is rolled back");
                session.rollback();
                format!("commit failed: {e}")
            }),
        };
        batch.record("jobs", replies.len());
        drop(batch);
        stats.record_batch(started.elapsed());
        for reply in replies {
            reply(commit.clone());
        }
    }
}

/// Runs one job. Returns its reply (`None` if it panicked: its reply channel is dropped,
/// so its caller gets an error) and whether it failed *after* changing rows — then the
/// batch must be rolled back, as there is no cheaper way to undo part of a transaction.
///
/// (A `SAVEPOINT` per job would undo only that job, but costs ~20% of the writer's time:
/// every page a job touches is copied to the statement journal first. Jobs check their
/// input before writing, so a failure after a change means a storage error or a bug.)
fn run_one(session: &mut impl Session, job: Job) -> (Option<Reply>, bool) {
    let before = session.changes();
    let outcome = catch_unwind(AssertUnwindSafe(|| (job.run)(session.conn())));
    let mut changed = || before.is_none() || session.changes() != before;
    match outcome {
        Ok((true, reply)) => (Some(reply), false),
        Ok((false, reply)) => (Some(reply), changed()),
        Err(_) => {
            error!("writer: a write job panicked");
            (None, changed())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use rusqlite::Connection;

    use crate::store::sql::args;
    use crate::store::sqlite::writer_at;

    fn insert(c: &mut dyn Conn, v: i64) -> Result<(), StoreError> {
        c.execute("INSERT INTO t (v) VALUES (?)", args![v])?;
        Ok(())
    }

    fn create(c: &mut dyn Conn) -> Result<(), StoreError> {
        c.execute("CREATE TABLE t (v INTEGER)", &[])?;
        Ok(())
    }

    fn values(c: &Connection) -> Vec<i64> {
        let mut q = c.prepare("SELECT v FROM t ORDER BY v").unwrap();
        q.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    async fn open() -> (tempfile::TempDir, std::path::PathBuf, Writer) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        let writer = writer_at(&path, MAX_QUEUED).unwrap();
        writer.write(create).await.unwrap();
        (dir, path, writer)
    }

    /// Holds the writer for a while, so that the jobs after it queue and run as a batch.
    fn slow_insert(c: &mut dyn Conn, v: i64) -> Result<(), StoreError> {
        std::thread::sleep(Duration::from_millis(100));
        insert(c, v)
    }

    /// A session that keeps the locks as PostgreSQL's does (a transaction covers jobs of
    /// its own lock, or any job when it holds both) and records each transaction's lock
    /// and the values its jobs wrote.
    /// Each transaction's lock and the values its jobs wrote.
    type Begun = Arc<std::sync::Mutex<Vec<(WriteLock, Vec<i64>)>>>;

    struct Recording {
        conn: Connection,
        begun: Begun,
    }

    impl Session for Recording {
        fn begin(&mut self, lock: WriteLock) -> Result<(), String> {
            self.begun.lock().unwrap().push((lock, Vec::new()));
            self.conn.execute_batch("BEGIN").map_err(|e| e.to_string())
        }
        fn commit(&mut self) -> Result<(), String> {
            let mut q = self.conn.prepare("SELECT v FROM t").unwrap();
            let written: Vec<i64> = q
                .query_map([], |r| r.get(0))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            drop(q);
            self.begun.lock().unwrap().last_mut().unwrap().1 = written;
            self.conn
                .execute_batch("DELETE FROM t; COMMIT")
                .map_err(|e| e.to_string())
        }
        fn rollback(&mut self) {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        fn changes(&mut self) -> Option<i64> {
            None
        }
        fn covers(&self, held: WriteLock, next: WriteLock) -> bool {
            held == WriteLock::All || held == next
        }
        fn conn(&mut self) -> &mut dyn Conn {
            &mut self.conn
        }
        fn batch_time(&self) -> Duration {
            Duration::from_secs(5)
        }
    }

    #[tokio::test]
    async fn a_transaction_runs_only_the_jobs_its_locks_cover() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (v INTEGER)").unwrap();
        let begun = Arc::new(std::sync::Mutex::new(Vec::new()));
        let writer = Writer::start(
            Recording {
                conn,
                begun: begun.clone(),
            },
            MAX_QUEUED,
        )
        .unwrap();
        use WriteLock::{All, Leases, Reports};
        // the first job holds the thread while the others queue behind it in order
        let (slow, rest) = tokio::join!(writer.write_with(Leases, |c| slow_insert(c, 0)), async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let plan = [
                (Leases, 1),
                (Leases, 2),
                (Reports, 3),
                (Reports, 4),
                (Leases, 5),
            ];
            let plan = plan.map(|(lock, v)| writer.write_with(lock, move |c| insert(c, v)));
            let [a, b, c, d, e] = plan;
            let then = async {
                tokio::time::sleep(Duration::from_millis(10)).await;
                let all = writer.write_with(All, |c| insert(c, 6));
                let after = async {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    writer.write_with(Reports, |c| insert(c, 7)).await
                };
                tokio::join!(all, after)
            };
            tokio::join!(a, b, c, d, e, then)
        });
        slow.unwrap();
        let (a, b, c, d, e, (f, g)) = rest;
        for r in [a, b, c, d, e, f, g] {
            r.unwrap();
        }
        let begun = begun.lock().unwrap().clone();
        assert_eq!(
            begun,
            vec![
                (Leases, vec![0, 1, 2]),
                (Reports, vec![3, 4]),
                (Leases, vec![5]),
                (All, vec![6, 7]),
            ],
            "each transaction holds the lock of every job in it"
        );
    }

    #[tokio::test]
    async fn a_job_failing_or_panicking_before_it_writes_fails_alone() {
        let (_dir, path, writer) = open().await;
        let before = writer.stats();
        let (a, b, c, d, e) = tokio::join!(
            writer.write(|c| slow_insert(c, 1)),
            writer.write(|_| Err::<(), _>(StoreError::Corrupt("refused".into()))),
            writer.write(|c| insert(c, 5)),
            writer.write(|_| -> Result<(), StoreError> { panic!("a bug in a write job") }),
            writer.write(|c| insert(c, 4)),
        );
        assert!(a.is_ok() && c.is_ok() && e.is_ok(), "{a:?} {c:?} {e:?}");
        assert!(matches!(b, Err(StoreError::Corrupt(_))), "{b:?}");
        assert!(matches!(d, Err(StoreError::Writer(_))), "{d:?}");
        let after = writer.stats();
        // (a panic's backtrace may outlast MAX_BATCH_TIME and end a batch early)
        assert!(
            after.batches - before.batches <= 3,
            "jobs were not batched: {before:?} -> {after:?}"
        );
        // the writer survived the panic; the good jobs are committed
        drop(writer);
        assert_eq!(values(&Connection::open(&path).unwrap()), vec![1, 4, 5]);
    }

    #[tokio::test]
    async fn a_full_queue_refuses_at_once_and_the_queued_work_still_commits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        let writer = writer_at(&path, 1).unwrap();
        writer.write(create).await.unwrap();
        let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let first = tokio::spawn({
            let (w, started) = (writer.clone(), started.clone());
            async move {
                w.write(move |c| {
                    started.store(true, Relaxed);
                    std::thread::sleep(Duration::from_millis(300));
                    insert(c, 1)
                })
                .await
            }
        });
        // once the thread runs the first job, the queue is empty
        while !started.load(Relaxed) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // the second takes the one place in the queue (a write enqueues when first
        // polled); a third is refused at once
        {
            let second = writer.write(|c| insert(c, 2));
            tokio::pin!(second);
            assert!(
                tokio::time::timeout(Duration::from_millis(1), &mut second)
                    .await
                    .is_err()
            );
            let refused = writer.write(|c| insert(c, 3)).await;
            assert!(matches!(refused, Err(StoreError::Busy)), "{refused:?}");
            assert!(first.await.unwrap().is_ok());
            assert!(second.await.is_ok());
        }
        drop(writer);
        assert_eq!(values(&Connection::open(&path).unwrap()), vec![1, 2]);
    }

    #[tokio::test]
    async fn a_job_failing_after_it_wrote_rolls_back_its_whole_batch_and_nothing_else() {
        let (_dir, path, writer) = open().await;
        let (a, b, c, d) = tokio::join!(
            writer.write(|c| slow_insert(c, 1)),
            writer.write(|c| insert(c, 2)),
            writer.write(|c| {
                insert(c, 3)?;
                Err::<(), _>(StoreError::Corrupt("refused after writing".into()))
            }),
            writer.write(|c| insert(c, 4)),
        );
        // a ran alone (the others queued behind it); b and c shared a batch, which c
        // spoiled: c keeps its own error, b is told its write was not applied; d ran in
        // the next batch
        assert!(a.is_ok() && d.is_ok(), "{a:?} {d:?}");
        assert!(matches!(b, Err(StoreError::Writer(_))), "{b:?}");
        assert!(matches!(c, Err(StoreError::Corrupt(_))), "{c:?}");
        drop(writer);
        assert_eq!(values(&Connection::open(&path).unwrap()), vec![1, 4]);
    }
}
