//! The worker's connection to its coordinator: identity (saved in the data directory,
//! `0600`), registration and re-registration, and a jittered exponential backoff while
//! the coordinator is away. The calls themselves are [`crate::link::Coordinator`]'s.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use e2fleet_proto::api::{HostInfo, WorkerId};
use rand::Rng;
use serde::{Deserialize, Serialize};
use tonic::Status;
use tracing::{info, warn};

use crate::link::Coordinator;

/// What the data directory keeps of a registration.
#[derive(Serialize, Deserialize)]
pub struct Identity {
    /// The coordinator it belongs to.
    pub coordinator: String,
    /// The worker id.
    pub worker_id: WorkerId,
    /// The worker's own token.
    pub worker_token: String,
}

impl Identity {
    /// The identity saved at `path` for `coordinator`, if any.
    pub fn load(path: &std::path::Path, coordinator: &str) -> Option<Identity> {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|t| serde_json::from_str::<Identity>(&t).ok())
            .filter(|i| i.coordinator == coordinator)
    }
}

/// The connection with its identity and backoff state.
pub struct Link {
    /// Typed calls.
    pub api: Coordinator,
    /// This worker's id, once registered.
    pub worker_id: Option<WorkerId>,
    /// The enrolment token.
    enroll: String,
    /// What this machine says it is.
    pub host: HostInfo,
    identity_path: PathBuf,
    /// Consecutive failed calls.
    pub failures: u32,
    /// No call before this.
    pub next_try: Instant,
    /// Lease length the coordinator gave.
    pub lease: Duration,
}

impl Link {
    /// A link to `api`, starting from a saved identity if there is one.
    pub fn new(
        mut api: Coordinator,
        enroll: String,
        host: HostInfo,
        identity_path: PathBuf,
    ) -> Link {
        let saved = Identity::load(&identity_path, &api.url);
        if let Some(s) = &saved {
            api.token = s.worker_token.clone();
        }
        Link {
            api,
            worker_id: saved.map(|s| s.worker_id),
            enroll,
            host,
            identity_path,
            failures: 0,
            next_try: Instant::now(),
            lease: Duration::from_secs(60),
        }
    }

    /// Whether the next call may go out now (no backoff pending).
    pub fn up(&self) -> bool {
        Instant::now() >= self.next_try
    }

    /// A call succeeded.
    pub fn ok(&mut self) {
        if self.failures > 0 {
            info!(coordinator = %self.api.url, "coordinator reachable again");
        }
        self.failures = 0;
    }

    /// A call failed: back off, jittered and exponential (0.5 s doubling to 30 s, +-25%).
    pub fn fail(&mut self, what: &str, s: &Status) {
        self.failures += 1;
        let base = (500u64 << self.failures.min(6)).min(30_000);
        let jitter = rand::rng().random_range(0.75..1.25);
        let wait = Duration::from_millis((base as f64 * jitter) as u64);
        self.next_try = Instant::now() + wait;
        let why = e2fleet_proto::client::explain_status(&self.api.url, s);
        warn!(what, code = ?s.code(), retry_in_ms = wait.as_millis() as u64, "waiting for the coordinator: {why}");
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
        let id = Identity {
            coordinator: self.api.url.clone(),
            worker_id: r.worker_id,
            worker_token: r.token,
        };
        if let Err(e) = save_private(
            &self.identity_path,
            serde_json::to_string(&id).unwrap_or_default().as_bytes(),
        ) {
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

/// Writes a file only its owner can read (it holds a secret): a temporary file created
/// `0600`, then renamed over the old one.
pub fn save_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}
