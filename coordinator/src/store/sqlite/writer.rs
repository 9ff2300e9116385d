//! The write path: one dedicated thread that owns a synchronous SQLite connection and
//! runs every job/unit/lease/result write, with group commit.
//!
//! # Why not sqlx here
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
//! [`run_one`] for why not a savepoint per job). Replies are sent only after the batch's
//! `COMMIT` returned: a caller never hears "done" for a write that is not durable.
//!
//! A second thread checkpoints the WAL ([`CHECKPOINT_EVERY`]), so the writer never does,
//! and keeps the WAL file bounded ([`WAL_LIMIT_BYTES`]).
//!
//! Every write goes through this thread (registrations and verification too), so SQLite's
//! busy handler never arbitrates between writers in this process.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use tokio::sync::oneshot;
use tracing::error;

use crate::store::StoreError;

/// Most jobs committed together.
pub const MAX_BATCH: usize = 128;
/// Most jobs waiting for the writer; beyond it writes are refused with
/// [`StoreError::Busy`] (≈ 0.5-1 s of work at this project's measured ~60-90 µs a job) —
/// a worker told UNAVAILABLE backs off, instead of every request waiting ever longer.
pub const MAX_QUEUED: usize = 8_192;
/// Longest a batch keeps taking queued jobs before it commits.
pub const MAX_BATCH_TIME: Duration = Duration::from_millis(2);

/// What a finished job does once its batch's commit succeeded or failed.
type Reply = Box<dyn FnOnce(Result<(), String>) + Send>;
/// A write job: runs on the connection, says whether it succeeded, and how to reply.
type Job = Box<dyn FnOnce(&Connection) -> (bool, Reply) + Send>;

/// Handle to the writer thread. Cloning shares the thread; it ends when the last handle
/// is dropped.
#[derive(Clone)]
pub struct Writer {
    jobs: mpsc::SyncSender<Job>,
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
    /// Times the WAL was started over ([`WAL_LIMIT_BYTES`]).
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
    /// Opens a connection to the (already migrated) database at `path` and starts the
    /// thread.
    pub fn start(path: &Path) -> Result<Writer, StoreError> {
        Self::start_with_queue(path, MAX_QUEUED)
    }

    /// [`Writer::start`] with a queue of `capacity` jobs.
    pub fn start_with_queue(path: &Path, capacity: usize) -> Result<Writer, StoreError> {
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
        // what the checkpointer last saw of the WAL, for the writer's resets
        let wal = Arc::new(AtomicU64::new(0));
        let checkpoint_wal = wal.clone();
        checkpoints.busy_timeout(Duration::from_secs(10))?;
        let (tx, rx) = mpsc::sync_channel::<Job>(capacity);
        let (alive, writer_gone) = mpsc::channel::<()>();
        let stats = Arc::new(WriterStats::default());
        let thread_stats = stats.clone();
        let spawn_error = |e| StoreError::Writer(format!("cannot start the writer thread: {e}"));
        std::thread::Builder::new()
            .name("e2fleet-writer".into())
            .spawn(move || {
                run(conn, &wal, rx, thread_stats);
                drop(alive);
            })
            .map_err(spawn_error)?;
        std::thread::Builder::new()
            .name("e2fleet-checkpoint".into())
            .spawn(move || checkpoint(checkpoints, &checkpoint_wal, writer_gone))
            .map_err(spawn_error)?;
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
        F: FnOnce(&Connection) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        let (reply_tx, reply_rx) = oneshot::channel::<Result<T, E>>();
        let queued = Instant::now();
        let stats = self.stats.clone();
        let job: Job = Box::new(move |conn: &Connection| {
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
            mpsc::TrySendError::Full(_) => E::from(StoreError::Busy),
            mpsc::TrySendError::Disconnected(_) => {
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

fn run(conn: Connection, wal: &AtomicU64, jobs: mpsc::Receiver<Job>, stats: Arc<WriterStats>) {
    let mut wal_checked = Instant::now();
    while let Ok(first) = jobs.recv() {
        if wal_checked.elapsed() >= WAL_CHECK_EVERY {
            wal_checked = Instant::now();
            if reset_wal_if_big(&conn, wal) {
                stats.wal_resets.fetch_add(1, Relaxed);
            }
        }
        let batch = tracing::debug_span!("write batch", jobs = tracing::field::Empty).entered();
        if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
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
            let (reply, changed_then_failed) = run_one(&conn, job);
            replies.extend(reply);
            if changed_then_failed {
                spoiled = Some(
                    "another write in the same transaction failed after changing rows; \
                     the whole batch was rolled back, nothing was applied"
                        .to_string(),
                );
                break;
            }
            if replies.len() < MAX_BATCH && started.elapsed() < MAX_BATCH_TIME {
                next = jobs.try_recv().ok();
            }
        }
        let commit = match spoiled {
            Some(why) => {
                error!("writer: a job failed after changing rows; its batch is rolled back");
                let _ = conn.execute_batch("ROLLBACK");
                Err(why)
            }
            None => conn.execute_batch("COMMIT").map_err(|e| {
                error!(error = %e, "writer: commit failed; the batch is rolled back");
                let _ = conn.execute_batch("ROLLBACK");
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

/// Runs one job. Returns its reply (`None` if it panicked: its reply channel is dropped,
/// so its caller gets an error) and whether it failed *after* changing rows — then the
/// batch must be rolled back, as there is no cheaper way to undo part of a transaction.
///
/// (A `SAVEPOINT` per job would undo only that job, but costs ~20% of the writer's time:
/// every page a job touches is copied to the statement journal first. Jobs check their
/// input before writing, so a failure after a change means a storage error or a bug.)
fn run_one(conn: &Connection, job: Job) -> (Option<Reply>, bool) {
    let before = total_changes(conn);
    let outcome = catch_unwind(AssertUnwindSafe(|| job(conn)));
    let changed = || before.is_none() || total_changes(conn) != before;
    match outcome {
        Ok((true, reply)) => (Some(reply), false),
        Ok((false, reply)) => (Some(reply), changed()),
        Err(_) => {
            error!("writer: a write job panicked");
            (None, changed())
        }
    }
}

/// Rows changed on this connection so far (`None` if it cannot be read).
fn total_changes(conn: &Connection) -> Option<i64> {
    conn.prepare_cached("SELECT total_changes()")
        .and_then(|mut q| q.query_row([], |r| r.get(0)))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insert(c: &Connection, v: i64) -> Result<(), StoreError> {
        c.execute("INSERT INTO t (v) VALUES (?)", [v])?;
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
        let writer = Writer::start(&path).unwrap();
        writer
            .write(|c| Ok::<_, StoreError>(c.execute_batch("CREATE TABLE t (v INTEGER)")?))
            .await
            .unwrap();
        (dir, path, writer)
    }

    /// Holds the writer for a while, so that the jobs after it queue and run as a batch.
    fn slow_insert(c: &Connection, v: i64) -> Result<(), StoreError> {
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
        let writer = Writer::start_with_queue(&path, 1).unwrap();
        writer
            .write(|c| Ok::<_, StoreError>(c.execute_batch("CREATE TABLE t (v INTEGER)")?))
            .await
            .unwrap();
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
