//! How a running worker is steered from outside its loop: stop (engines report their
//! exact cursors, results are delivered, `run` returns) and pause (engines hold still).
//! Signals drive them in the program (`signals`); tests and embedders call them
//! directly.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// The handle a worker's loop watches (cheap to clone: all clones steer one worker).
#[derive(Clone, Default)]
pub struct Controls {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    stop: AtomicBool,
    paused: AtomicBool,
    holding: AtomicBool,
    changed: Notify,
}

impl Controls {
    /// A handle for a worker that runs unpaused.
    pub fn new() -> Controls {
        Controls::default()
    }

    /// Asks the worker to stop: running units stop at their exact cursors and are
    /// reported, queued ones are given back, and `run` returns once all is delivered.
    pub fn stop(&self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        self.inner.changed.notify_one();
    }

    /// Whether a stop was asked for.
    pub fn stopping(&self) -> bool {
        self.inner.stop.load(Ordering::SeqCst)
    }

    /// Pauses (`true`) or resumes the engines, as the owner's pause.
    pub fn set_paused(&self, paused: bool) {
        self.inner.paused.store(paused, Ordering::SeqCst);
        self.inner.changed.notify_one();
    }

    /// Whether the owner paused the engines.
    pub fn paused(&self) -> bool {
        self.inner.paused.load(Ordering::SeqCst)
    }

    /// Whether the worker holds anything a stop must report (from the moment its loop
    /// starts): before that, joining and verifying, a stop signal may end the process.
    pub fn holding(&self) -> bool {
        self.inner.holding.load(Ordering::SeqCst)
    }

    pub(super) fn set_holding(&self) {
        self.inner.holding.store(true, Ordering::SeqCst);
    }

    /// Resolves at the next stop or pause change (or at once if one happened since the
    /// last call).
    pub(super) async fn changed(&self) {
        self.inner.changed.notified().await;
    }
}
