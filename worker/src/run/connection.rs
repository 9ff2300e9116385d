//! The worker's connection to its coordinator: who it is (a saved [`Identity`], or a new
//! registration), whether calls may go out now (a jittered exponential [`Backoff`] while
//! the coordinator is away), and how long calls take (the median round trip the lease
//! queue is sized from). The calls themselves are [`crate::api::Coordinator`]'s.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use e2fleet_proto::api::{HostInfo, WorkerId};
use e2fleet_proto::client::Backoff;
use tonic::Status;
use tracing::{debug, info, warn};

use super::identity::Identity;
use crate::api::Coordinator;

/// Round trips remembered for the median.
const ROUND_TRIPS_KEPT: usize = 32;

/// The connection with its identity, backoff and round-trip record.
pub struct Connection {
    /// Typed calls (cloned into each call in flight).
    pub api: Coordinator,
    /// This worker's id, once registered.
    pub worker_id: Option<WorkerId>,
    /// The enrolment token.
    enroll: String,
    /// What this machine says it is.
    pub host: HostInfo,
    identity_path: PathBuf,
    backoff: Backoff,
    /// No call before this.
    pub next_try: Instant,
    /// Lease length the coordinator gave.
    pub lease: Duration,
    /// Registrations so far (a call that failed with an older token does not register
    /// again).
    pub generation: u64,
    round_trips: VecDeque<Duration>,
    /// When the last failure that backed off was seen.
    last_failure: Option<Instant>,
    /// The worker release the coordinator offered at registration (empty: none).
    pub offered_release: String,
}

impl Connection {
    /// A connection to `api`, starting from a saved identity if there is one.
    pub fn new(
        mut api: Coordinator,
        enroll: String,
        host: HostInfo,
        identity_path: PathBuf,
    ) -> Connection {
        let saved = Identity::load(&identity_path, &api.url);
        if let Some(s) = &saved {
            api.token = s.worker_token.clone();
        }
        Connection {
            api,
            worker_id: saved.map(|s| s.worker_id),
            enroll,
            host,
            identity_path,
            backoff: Backoff::worker(),
            next_try: Instant::now(),
            lease: Duration::from_secs(60),
            generation: 0,
            round_trips: VecDeque::with_capacity(ROUND_TRIPS_KEPT),
            last_failure: None,
            offered_release: String::new(),
        }
    }

    /// Whether the next call may go out now (no backoff pending).
    pub fn up(&self) -> bool {
        Instant::now() >= self.next_try
    }

    /// Consecutive failed calls.
    pub fn failures(&self) -> u32 {
        self.backoff.failures()
    }

    /// A call succeeded after `took`.
    pub fn ok(&mut self, took: Duration) {
        if self.backoff.succeeded() {
            info!(coordinator = %self.api.url, "coordinator reachable again");
        }
        if self.round_trips.len() == ROUND_TRIPS_KEPT {
            self.round_trips.pop_front();
        }
        self.round_trips.push_back(took);
    }

    /// A call sent at `sent` failed: back off (jittered, exponential). Calls that were
    /// already out when an earlier failure was seen fail for the same reason (a dead
    /// connection fails every call on it at once): they do not back off further.
    pub fn fail(&mut self, what: &str, s: &Status, sent: Instant) {
        let why = e2fleet_proto::client::explain_status(&self.api.url, s);
        if self.last_failure.is_some_and(|at| sent < at) {
            debug!(what, code = ?s.code(), "a call sent before the last failure failed too: {why}");
            return;
        }
        let wait = self.backoff.failed();
        let now = Instant::now();
        self.last_failure = Some(now);
        self.next_try = now + wait;
        warn!(what, code = ?s.code(), retry_in_ms = wait.as_millis() as u64, "waiting for the coordinator: {why}");
    }

    /// The median round trip of recent calls (`None` before the first).
    pub fn round_trip(&self) -> Option<Duration> {
        let mut v: Vec<Duration> = self.round_trips.iter().copied().collect();
        v.sort();
        v.get(v.len() / 2).copied()
    }

    /// Registers (again), keeping this worker's id, and saves the identity (`0600`).
    pub async fn register(&mut self) -> Result<(), Status> {
        let current = self.api.token.clone();
        let previous = self
            .worker_id
            .filter(|_| !current.is_empty())
            .map(|id| (id, current.as_str()));
        let r = match self.api.register(&self.enroll, &self.host, previous).await {
            // the coordinator no longer accepts this identity's token (a restored
            // database, a token lost): start over as a new worker
            Err(s) if s.code() == tonic::Code::PermissionDenied && previous.is_some() => {
                warn!(
                    message = s.message(),
                    "the saved worker identity is refused; registering as a new worker"
                );
                self.worker_id = None;
                self.api.register(&self.enroll, &self.host, None).await?
            }
            other => other?,
        };
        self.worker_id = Some(r.worker_id);
        self.lease = r.lease;
        self.offered_release = r.offered_release.clone();
        self.generation += 1;
        let id = Identity {
            coordinator: self.api.url.clone(),
            worker_id: r.worker_id,
            worker_token: r.token,
        };
        if let Err(e) = id.save(&self.identity_path) {
            warn!(error = %e, path = %self.identity_path.display(), "cannot save the worker identity");
        }
        info!(worker_id = %r.worker_id, hostname = %self.host.hostname, "registered");
        Ok(())
    }

    /// Whether the worker holds a token (a saved or fresh registration).
    pub fn has_token(&self) -> bool {
        !self.api.token.is_empty()
    }

    /// Forgets the token (the coordinator no longer knows it).
    pub fn forget_token(&mut self) {
        self.api.token.clear();
    }
}
