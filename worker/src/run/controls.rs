//! How a running worker is steered from outside its loop: stop (engines report their
//! exact cursors, results are delivered, `run` returns) and pause (engines hold still).
//! Signals and the local control socket (`local_control`) drive them in the program;
//! tests and embedders call them directly. The loop publishes a [`Snapshot`] of itself
//! here for `e2fleet-worker status`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
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
    snapshot: Mutex<Snapshot>,
    update_to: Mutex<Option<semver::Version>>,
}

/// What a running worker says about itself (`e2fleet-worker status`), as its loop last
/// saw it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// `joining`, `running`, `paused (why)`, `stopping` or `stopping to update to V`.
    pub state: String,
    /// Whether its owner paused it (`pause`, SIGUSR1), whatever else holds it.
    pub paused_by_owner: bool,
    /// Engine threads.
    pub threads: usize,
    /// Engine threads walking a unit now.
    pub engines_busy: usize,
    /// Units held and waiting for a thread.
    pub queued: usize,
    /// Results delivered since it started.
    pub units_reported: u64,
    /// Nodes per second of one engine thread (median of its recent units).
    pub per_core_nodes_per_s: f64,
    /// The coordinator as the worker reaches it (connected, its round trip, or failing).
    pub coordinator: String,
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

    /// Stops (as [`Controls::stop`]) to switch to the verified build `version`, staged in
    /// the data directory: whoever called `run` then switches
    /// ([`crate::update::switch_and_exec`]).
    pub fn stop_for_update(&self, version: semver::Version) {
        *self
            .inner
            .update_to
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(version);
        self.stop();
    }

    /// The build a stop was for, if it was for an update.
    pub fn update_to(&self) -> Option<semver::Version> {
        self.inner
            .update_to
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
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

    /// What the worker last said about itself.
    pub fn snapshot(&self) -> Snapshot {
        let mut s = self
            .inner
            .snapshot
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        s.paused_by_owner = self.paused();
        if let Some(v) = self.update_to() {
            s.state = format!("stopping to update to {v}");
        } else if self.stopping() {
            s.state = "stopping".into();
        }
        s
    }

    pub(super) fn publish(&self, snapshot: Snapshot) {
        *self
            .inner
            .snapshot
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = snapshot;
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
