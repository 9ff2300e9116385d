//! Lease requests and reports, written in batches: each call queues its request here and
//! waits; one task at a time takes everything queued and runs it as one store write, in
//! which the fleet logic reads what the whole batch needs with one statement and writes
//! each kind of change with one more ([`crate::store::Batches`]). While a batch is being
//! written the next one gathers, so under load batches grow by themselves, and a lone
//! request goes at once (no timer).
//!
//! # Why
//! On PostgreSQL a small statement costs the server about the same whatever its rows
//! (messages, relation locks, executor start), and a lease and its report were ~13 of
//! them; a batch of a few dozen now costs a dozen or so in all. On SQLite the same
//! batches run the per-row statements (in process they cost microseconds), so both
//! backends run one logic.
//!
//! # The rules stay the request's own
//! A batch decides each request as if alone, with the same rules as the single write
//! (`leasing.rs`, `reports.rs`); what it reads for many requests at once is what each
//! would have read, because requests whose answers could depend on each other are not
//! decided together. A lease batch goes in order: its part ends before a second request
//! of the same worker (a volunteer account's identities share one, each weighed with
//! what the part granted the account before it) and before a request the set-based path
//! does not cover (a split), which runs as its own single write after the part before
//! it. A report batch is decided as if its part's reports had come first (all were in
//! flight at once, so that is an order they could have arrived in): the reports the
//! set-based path covers, one a unit, make one part decided on the views read at the
//! batch's start (a result that keeps its board among them too: the job's surplus boards
//! are folded once after the part); every other report (a dispute, a recheck, a second
//! report on a unit, an untrusted account's result) is then its own single write, in the
//! batch's order, after the part. A trusted
//! volunteer's result accepted in a part earns its account's credit with the part, as the
//! single write credits it (on PostgreSQL it is inserted credited, and one statement adds
//! the part's credit to its accounts). The no-double-grant property and the exact-total
//! drills run through these batches.
//!
//! # Where a call's time goes
//! Each queue times its requests' wait, from queued to taken into a batch, and its
//! batches' writes, from handed to the store to answered ([`BatchTimes`]; `/metrics`
//! shows them as `e2fleet_batch_wait_seconds` and `e2fleet_batch_write_seconds`). A
//! request waits at most for the batch being written when it came, then goes in the
//! next: when the calls' tail (`e2fleet_call_seconds`) is far above both, the time is
//! lost outside the batches (a runtime short of CPU, the gate, the body); when the
//! waits carry it, batches are growing after a slow one.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::oneshot;

use super::call_times::{Histogram, Times};
use super::{Fleet, FleetError};
use crate::store::{StoreError, Tx, WriteLock};

/// Most requests written together (a batch's statements carry each request's row).
pub(super) const MAX_BATCH: usize = 256;
/// Most requests waiting in a queue; beyond it a request is refused at once with
/// [`StoreError::Busy`] (UNAVAILABLE: the worker backs off), as the writer's own queue
/// refuses jobs ([`crate::store::writer::MAX_QUEUED`]): a flood of calls is never
/// held in memory without bound.
pub(super) const MAX_WAITING: usize = crate::store::writer::MAX_QUEUED;

/// Where a queued request's answer goes.
type Reply<R> = oneshot::Sender<Result<R, FleetError>>;

/// How long a queue's requests waited for a batch and its batches took to write.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchTimes {
    /// Each request, from queued to taken into a batch.
    pub waited: Histogram,
    /// Each batch, from handed to the store to answered (its transaction, and the
    /// writer's queue before it).
    pub written: Histogram,
}

impl BatchTimes {
    /// Both queues' times together (e.g. of several coordinators).
    pub fn plus(&self, other: &BatchTimes) -> BatchTimes {
        BatchTimes {
            waited: self.waited.plus(&other.waited),
            written: self.written.plus(&other.written),
        }
    }

    /// The times counted since `earlier` (a snapshot of the same queue).
    pub fn since(&self, earlier: &BatchTimes) -> BatchTimes {
        BatchTimes {
            waited: self.waited.since(&earlier.waited),
            written: self.written.since(&earlier.written),
        }
    }
}

/// Requests waiting for the next batch, with their answers' channels and when they came.
pub(super) struct Queue<T, R> {
    state: Mutex<QueueState<T, R>>,
    /// Batches taken, and requests in them.
    batches: AtomicU64,
    requests: AtomicU64,
    /// Each request's wait, from queued to taken into a batch.
    waited: Times,
    /// Each batch's write, from handed to the store to answered.
    written: Times,
}

/// How many batches a queue wrote, and how many requests they carried.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchTotals {
    /// Batches written.
    pub batches: u64,
    /// Requests in them.
    pub requests: u64,
}

struct QueueState<T, R> {
    waiting: Vec<(T, Reply<R>, Instant)>,
    /// Whether a task is taking batches from this queue.
    draining: bool,
}

impl<T, R> Default for Queue<T, R> {
    fn default() -> Self {
        Queue {
            state: Mutex::new(QueueState {
                waiting: Vec::new(),
                draining: false,
            }),
            batches: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            waited: Times::default(),
            written: Times::default(),
        }
    }
}

/// A batch taken from a [`Queue`]: the requests, and where each answer goes.
pub(super) struct Batch<T, R> {
    pub items: Vec<T>,
    replies: Vec<Reply<R>>,
}

impl<T, R> Batch<T, R> {
    /// Sends each request its answer, in order (`Err`: the whole batch failed, and every
    /// request is told so).
    pub fn answer(self, answers: Result<Vec<Result<R, FleetError>>, FleetError>) {
        match answers {
            Ok(answers) => {
                debug_assert_eq!(answers.len(), self.replies.len());
                for (reply, answer) in self.replies.into_iter().zip(answers) {
                    // (a caller that gave up no longer listens)
                    let _ = reply.send(answer);
                }
            }
            Err(e) => {
                for reply in self.replies {
                    let _ = reply.send(Err(copy(&e)));
                }
            }
        }
    }
}

impl<T, R> Queue<T, R> {
    /// Queues a request; `true` when no task is taking batches, so the caller must start
    /// one (which then takes batches until the queue is empty). Refused when
    /// [`MAX_WAITING`] requests wait already.
    #[allow(clippy::type_complexity)]
    pub fn push(
        &self,
        item: T,
    ) -> Result<(bool, oneshot::Receiver<Result<R, FleetError>>), FleetError> {
        let (tx, rx) = oneshot::channel();
        let mut state = self.state.lock().expect("batch queue");
        if state.waiting.len() >= MAX_WAITING {
            return Err(FleetError::Store(StoreError::Busy));
        }
        state.waiting.push((item, tx, Instant::now()));
        let start = !state.draining;
        state.draining = true;
        Ok((start, rx))
    }

    /// The next batch (at most [`MAX_BATCH`] requests, oldest first); `None` when nothing
    /// is waiting, and then the taking task ends (the next push starts another).
    pub fn take(&self) -> Option<Batch<T, R>> {
        let mut state = self.state.lock().expect("batch queue");
        if state.waiting.is_empty() {
            state.draining = false;
            return None;
        }
        let n = state.waiting.len().min(MAX_BATCH);
        let now = Instant::now();
        let (items, replies) = state
            .waiting
            .drain(..n)
            .map(|(item, reply, queued)| {
                self.waited.record(now.saturating_duration_since(queued));
                (item, reply)
            })
            .unzip();
        self.batches.fetch_add(1, Relaxed);
        self.requests.fetch_add(n as u64, Relaxed);
        Some(Batch { items, replies })
    }

    /// Batches taken so far, and the requests they carried.
    pub fn totals(&self) -> BatchTotals {
        BatchTotals {
            batches: self.batches.load(Relaxed),
            requests: self.requests.load(Relaxed),
        }
    }

    /// The waits and writes timed so far.
    pub fn times(&self) -> BatchTimes {
        BatchTimes {
            waited: self.waited.histogram(),
            written: self.written.histogram(),
        }
    }
}

impl<T, R> Queue<T, R> {
    /// Ends taking after a failure outside the store (a bug): every waiting request is
    /// told, and the next push starts a new task.
    fn abandon(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.draining = false;
        for (_, reply, _) in state.waiting.drain(..) {
            let _ = reply.send(Err(FleetError::Store(StoreError::Writer(
                "the batch writer failed; retry".into(),
            ))));
        }
    }
}

/// Takes batches from `queue` until it is empty, each written by `run` (one store write)
/// and answered. Started by the push that found no task taking (see [`Queue::push`]).
pub(super) async fn drain<T, R, F, Fut>(queue: &Queue<T, R>, mut run: F)
where
    F: FnMut(Vec<T>) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<Result<R, FleetError>>, FleetError>>,
{
    /// Lets the queue go if this task ends before it is empty (a panic, or a runtime
    /// shutting down): otherwise no task would ever take from it again.
    struct Abandon<'a, T, R>(&'a Queue<T, R>, bool);
    impl<T, R> Drop for Abandon<'_, T, R> {
        fn drop(&mut self) {
            if !self.1 {
                self.0.abandon();
            }
        }
    }
    let mut guard = Abandon(queue, false);
    while let Some(mut batch) = queue.take() {
        let items = std::mem::take(&mut batch.items);
        let handed = Instant::now();
        let answers = run(items).await;
        queue.written.record(handed.elapsed());
        batch.answer(answers);
    }
    guard.1 = true;
}

/// Picks a queue out of the fleet.
pub(super) type QueueOf<T, R> = fn(&Fleet) -> &Queue<T, R>;

/// What a batch is written with: the fleet logic of one queue, run inside one store write.
pub(super) type WriteBatch<T, R> =
    fn(&Fleet, &mut dyn Tx, Vec<T>) -> Result<Vec<Result<R, FleetError>>, FleetError>;

/// Queues `item` on the queue `queue` picks out of `fleet`, starts the task that takes its
/// batches (each written by `write` as one store write excluding what `lock` says) if
/// none runs, and waits for the answer.
pub(super) async fn submit<T, R>(
    fleet: &Arc<Fleet>,
    (queue, lock): (QueueOf<T, R>, WriteLock),
    write: WriteBatch<T, R>,
    item: T,
) -> Result<R, FleetError>
where
    T: Send + 'static,
    R: Send + 'static,
{
    let (start, rx) = queue(fleet).push(item)?;
    if start {
        let fleet = fleet.clone();
        tokio::spawn(async move {
            drain(queue(&fleet), |items| {
                let fleet = fleet.clone();
                async move {
                    let f = fleet.clone();
                    fleet
                        .store
                        .write_with(lock, move |tx| write(&f, tx, items))
                        .await
                }
            })
            .await;
        });
    }
    answer(rx).await
}

/// Waits for a queued request's answer.
pub(super) async fn answer<R>(
    rx: oneshot::Receiver<Result<R, FleetError>>,
) -> Result<R, FleetError> {
    rx.await.unwrap_or_else(|_| {
        Err(FleetError::Store(StoreError::Writer(
            "the batch carrying this request ended without an answer".into(),
        )))
    })
}

/// The same failure for each request of a failed batch (a store failure: overload keeps
/// its kind, so callers still answer it with UNAVAILABLE).
fn copy(e: &FleetError) -> FleetError {
    match e {
        FleetError::Store(StoreError::Busy) => FleetError::Store(StoreError::Busy),
        FleetError::TooMany(m) => FleetError::TooMany(m.clone()),
        FleetError::Unauthenticated(m) => FleetError::Unauthenticated(m.clone()),
        FleetError::PermissionDenied(m) => FleetError::PermissionDenied(m.clone()),
        FleetError::NotFound(m) => FleetError::NotFound(m.clone()),
        FleetError::InvalidArgument(m) => FleetError::InvalidArgument(m.clone()),
        FleetError::FailedPrecondition(m) => FleetError::FailedPrecondition(m.clone()),
        FleetError::Store(e) => FleetError::Store(StoreError::Writer(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_queue_hands_out_what_waits_in_order_and_says_when_to_start_taking() {
        let q: Queue<u32, u32> = Queue::default();
        let (start, a) = q.push(1).unwrap();
        assert!(start, "the first push starts the taking task");
        let (start, b) = q.push(2).unwrap();
        assert!(!start, "one task at a time");
        let batch = q.take().expect("two waiting");
        assert_eq!(batch.items, vec![1, 2]);
        batch.answer(Ok(vec![Ok(10), Err(FleetError::NotFound("x".into()))]));
        assert_eq!(answer(a).await.unwrap(), 10);
        assert!(matches!(answer(b).await, Err(FleetError::NotFound(_))));
        assert!(q.take().is_none(), "empty: the task ends");
        assert_eq!(
            q.totals(),
            BatchTotals {
                batches: 1,
                requests: 2
            }
        );
        let (start, c) = q.push(3).unwrap();
        assert!(start, "and the next push starts another");
        let batch = q.take().unwrap();
        batch.answer(Err(FleetError::Store(StoreError::Busy)));
        assert!(matches!(
            answer(c).await,
            Err(FleetError::Store(StoreError::Busy))
        ));
    }

    #[tokio::test]
    async fn a_queue_times_each_requests_wait_and_each_batchs_write() {
        let q: Queue<u32, u32> = Queue::default();
        let (_, a) = q.push(1).unwrap();
        let (_, b) = q.push(2).unwrap();
        // the two wait 30 ms, then their batch takes 20 ms to write
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        drain(&q, |items| async move {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            Ok(items.into_iter().map(Ok).collect())
        })
        .await;
        assert_eq!((answer(a).await.unwrap(), answer(b).await.unwrap()), (1, 2));
        let t = q.times();
        assert_eq!((t.waited.count(), t.written.count()), (2, 1));
        assert!(t.waited.sum_us >= 2 * 30_000, "{t:?}");
        assert!(t.written.sum_us >= 20_000, "{t:?}");
        // a wait and a write at least as long as slept, in the buckets above them
        assert!(t.waited.quantile_at_most(0.0).unwrap() >= std::time::Duration::from_millis(30));
        assert!(t.written.quantile_at_most(1.0).unwrap() >= std::time::Duration::from_millis(20));
    }

    #[tokio::test]
    async fn a_full_queue_refuses_at_once_and_takes_again_once_a_batch_is_taken() {
        let q: Queue<usize, u32> = Queue::default();
        let mut waiting = Vec::new();
        for i in 0..MAX_WAITING {
            waiting.push(q.push(i).unwrap().1);
        }
        assert!(matches!(
            q.push(MAX_WAITING),
            Err(FleetError::Store(StoreError::Busy))
        ));
        let batch = q.take().unwrap();
        assert_eq!(batch.items.len(), MAX_BATCH);
        assert!(q.push(0).is_ok(), "room again");
    }

    #[tokio::test]
    async fn a_batch_dropped_unanswered_tells_its_callers() {
        let q: Queue<u32, u32> = Queue::default();
        let (_, a) = q.push(1).unwrap();
        drop(q.take());
        assert!(matches!(
            answer(a).await,
            Err(FleetError::Store(StoreError::Writer(_)))
        ));
    }
}
