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
//! Jobs queue on a channel. The thread takes the first, opens `BEGIN IMMEDIATE`, then
//! keeps taking whatever else is already queued (up to [`MAX_BATCH`] jobs or
//! [`MAX_BATCH_TIME`]) and commits them together: one commit per batch, not per request.
//! Each job runs inside its own `SAVEPOINT`, so a job that fails (or panics) is rolled
//! back alone and the others in its batch still commit. Replies are sent only after the
//! batch's `COMMIT` returned: a caller never hears "done" for a write that is not durable.
//!
//! The thread holds the store's in-process write lock for the length of a batch, so it
//! queues fairly with the few writes that still go through sqlx (registrations,
//! verification, quarantine release) instead of meeting them in SQLite's busy handler.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use tokio::sync::{Mutex, oneshot};
use tracing::error;

use super::StoreError;

/// Most jobs committed together.
pub const MAX_BATCH: usize = 128;
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
    jobs: mpsc::Sender<Job>,
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
}

impl WriterStats {
    fn record_job(&self, queued: Duration, running: Duration) {
        self.jobs.fetch_add(1, Relaxed);
        self.queued_us.fetch_add(queued.as_micros() as u64, Relaxed);
        self.running_us
            .fetch_add(running.as_micros() as u64, Relaxed);
    }

    fn record_batch(&self, held: Duration) {
        self.batches.fetch_add(1, Relaxed);
        self.batch_us.fetch_add(held.as_micros() as u64, Relaxed);
    }

    /// The totals so far.
    pub fn totals(&self) -> WriterTotals {
        WriterTotals {
            jobs: self.jobs.load(Relaxed),
            queued_us: self.queued_us.load(Relaxed),
            running_us: self.running_us.load(Relaxed),
            batches: self.batches.load(Relaxed),
            batch_us: self.batch_us.load(Relaxed),
        }
    }
}

impl Writer {
    /// Opens a connection to the (already migrated) database at `path` and starts the
    /// thread. `lock` is the store's in-process write lock.
    pub fn start(path: &Path, lock: Arc<Mutex<()>>) -> Result<Writer, StoreError> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(Duration::from_secs(10))?;
        // temp_store = MEMORY: the per-job savepoints need a statement journal, which
        // SQLite otherwise keeps in a temporary file created and deleted per batch
        // (hundreds of open/write/unlink calls a second under load)
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; \
             PRAGMA temp_store = MEMORY; PRAGMA cache_size = -65536;",
        )?;
        conn.set_prepared_statement_cache_capacity(128);
        let (tx, rx) = mpsc::channel::<Job>();
        let stats = Arc::new(WriterStats::default());
        let thread_stats = stats.clone();
        std::thread::Builder::new()
            .name("e2fleet-writer".into())
            .spawn(move || run(conn, rx, lock, thread_stats))
            .map_err(|e| StoreError::Writer(format!("cannot start the writer thread: {e}")))?;
        Ok(Writer { jobs: tx, stats })
    }

    /// The writer's running totals.
    pub fn stats(&self) -> WriterTotals {
        self.stats.totals()
    }

    /// Runs `f` on the writer thread inside the next batch's transaction; returns its
    /// value once the batch is committed. An `Err` from `f` rolls back `f`'s writes only.
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
                let _ = reply_tx.send(match commit {
                    Ok(()) => out,
                    Err(e) => Err(E::from(StoreError::Writer(e))),
                });
            });
            (ok, reply)
        });
        self.jobs
            .send(job)
            .map_err(|_| E::from(StoreError::Writer("the writer thread has stopped".into())))?;
        reply_rx.await.unwrap_or_else(|_| {
            Err(E::from(StoreError::Writer(
                "the write was not carried out (see the coordinator log); nothing was changed"
                    .into(),
            )))
        })
    }
}

fn run(conn: Connection, jobs: mpsc::Receiver<Job>, lock: Arc<Mutex<()>>, stats: Arc<WriterStats>) {
    while let Ok(first) = jobs.recv() {
        let guard = lock.blocking_lock();
        if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
            error!(error = %e, "writer: cannot begin a transaction");
            drop(guard);
            // dropping a job unrun drops its reply channel: its caller gets an error
            drop(first);
            continue;
        }
        let started = Instant::now();
        let mut replies = Vec::new();
        replies.extend(run_one(&conn, first));
        while replies.len() < MAX_BATCH && started.elapsed() < MAX_BATCH_TIME {
            match jobs.try_recv() {
                Ok(job) => replies.extend(run_one(&conn, job)),
                Err(_) => break,
            }
        }
        let commit = conn.execute_batch("COMMIT").map_err(|e| {
            error!(error = %e, "writer: commit failed; the batch is rolled back");
            let _ = conn.execute_batch("ROLLBACK");
            format!("commit failed: {e}")
        });
        drop(guard);
        stats.record_batch(started.elapsed());
        for reply in replies {
            reply(commit.clone());
        }
    }
}

/// Runs one job inside a savepoint. `None` when it did not run or panicked: its reply
/// channel is dropped, so its caller gets an error.
fn run_one(conn: &Connection, job: Job) -> Option<Reply> {
    if let Err(e) = conn
        .prepare_cached("SAVEPOINT job")
        .and_then(|mut s| s.execute([]))
    {
        error!(error = %e, "writer: cannot open a savepoint; job not run");
        return None;
    }
    let outcome = catch_unwind(AssertUnwindSafe(|| job(conn)));
    let keep = matches!(outcome, Ok((true, _)));
    let end = if keep {
        conn.prepare_cached("RELEASE job")
            .and_then(|mut s| s.execute([]))
            .map(drop)
    } else {
        conn.execute_batch("ROLLBACK TO job; RELEASE job")
    };
    if let Err(e) = end {
        error!(error = %e, "writer: savepoint could not be closed");
    }
    match outcome {
        Ok((_, reply)) => Some(reply),
        Err(_) => {
            error!("writer: a write job panicked; its writes were rolled back");
            None
        }
    }
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

    #[tokio::test]
    async fn a_failing_or_panicking_job_is_rolled_back_alone_in_its_batch() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        let writer = Writer::start(&path, Arc::new(Mutex::new(()))).unwrap();
        writer
            .write(|c| Ok::<_, StoreError>(c.execute_batch("CREATE TABLE t (v INTEGER)")?))
            .await
            .unwrap();
        let before = writer.stats();
        // the first job holds the writer while the others queue: they then run together
        // (a panic's backtrace can take longer than MAX_BATCH_TIME, so the last job may
        // start a batch of its own)
        let (a, b, c, d, e) = tokio::join!(
            writer.write(|c| {
                std::thread::sleep(Duration::from_millis(100));
                insert(c, 1)
            }),
            writer.write(|c| {
                insert(c, 2)?;
                Err::<(), _>(StoreError::Corrupt("refused after writing".into()))
            }),
            writer.write(|c| insert(c, 5)),
            writer.write(|c| -> Result<(), StoreError> {
                insert(c, 3)?;
                panic!("a bug in a write job");
            }),
            writer.write(|c| insert(c, 4)),
        );
        assert!(a.is_ok() && c.is_ok() && e.is_ok());
        assert!(matches!(b, Err(StoreError::Corrupt(_))), "{b:?}");
        assert!(matches!(d, Err(StoreError::Writer(_))), "{d:?}");
        let after = writer.stats();
        assert!(
            after.batches - before.batches <= 3,
            "jobs were not batched: {before:?} -> {after:?}"
        );
        // the writer survived the panic, and only the good jobs' rows are there
        let rows = writer
            .write(|c| Ok::<_, StoreError>(values(c)))
            .await
            .unwrap();
        assert_eq!(rows, vec![1, 4, 5]);
        // and they are committed: another connection sees them
        drop(writer);
        assert_eq!(values(&Connection::open(&path).unwrap()), vec![1, 4, 5]);
    }
}
