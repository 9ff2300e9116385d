//! The write path: a dedicated thread that owns the backend's write connection
//! ([`Session`]) and runs every job/unit/lease/result write, with group commit. Both
//! backends use it: SQLite with one thread (it has one writer), PostgreSQL with two
//! ([`Writer::start_many`]: each batch takes a database-wide lock, so batches of all
//! threads and coordinators run one after another, and a second thread runs its batch
//! while the first one's commit waits for the disk; see [`crate::store::postgres`]). On
//! both the throughput is how fast one batch at a time applies writes, and one commit is
//! paid per batch, not per request.
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
    /// Begins a batch's transaction.
    fn begin(&mut self) -> Result<(), String>;
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

/// What a finished job does once its batch's commit succeeded or failed.
type Reply = Box<dyn FnOnce(Result<(), String>) + Send>;
/// A write job: runs on the connection, says whether it succeeded, and how to reply.
type Job = Box<dyn FnOnce(&mut dyn Conn) -> (bool, Reply) + Send>;

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
    /// Microseconds batches held the write lock, summed.
    pub batch_us: u64,
    /// Longest a job waited in the queue, microseconds.
    pub max_queued_us: u64,
    /// Longest a batch held the write lock, microseconds.
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
    /// their meaning side by side (PostgreSQL's, which take turns on a lock; see
    /// [`crate::store::postgres`]): one then runs its batch while another's commit waits
    /// for the disk.
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
        let (reply_tx, reply_rx) = oneshot::channel::<Result<T, E>>();
        let queued = Instant::now();
        let stats = self.stats.clone();
        let job: Job = Box::new(move |conn: &mut dyn Conn| {
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
        self.jobs.try_send(job).map_err(|e| match e {
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
// while its transaction, and on PostgreSQL the write lock, is open)
fn run(mut session: impl Session, jobs: &flume::Receiver<Job>, stats: Arc<WriterStats>) {
    let batch_time = session.batch_time();
    while let Ok(first) = jobs.recv() {
        if session.between_batches() {
            stats.wal_resets.fetch_add(1, Relaxed);
        }
        let batch = tracing::debug_span!("write batch", jobs = tracing::field::Empty).entered();
        if let Err(e) = session.begin() {
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
                next = jobs.try_recv().ok();
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
    let outcome = catch_unwind(AssertUnwindSafe(|| job(session.conn())));
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
