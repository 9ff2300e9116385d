//! Signed updates from the fleet itself.
//!
//! A worker with updates on (`run --updates on`, the package's default) hears of the
//! release its coordinator offers in every registration and heartbeat answer. When that
//! release is newer than this build and was never rolled back here, it fetches it over
//! the same connection (`/downloads/...` on the coordinator's port), checks its size,
//! SHA-256 and the fleet key's signature over it and over a statement of version,
//! platform, size and hash ([`fetch`]), and stages it in `DATA_DIR/releases`. Then it
//! stops as for any stop (running units report their exact cursors, every result is
//! delivered), makes the new build current as a trial, and executes it in place. The
//! new build checks itself against the built-in verification suite before it joins;
//! it confirms, or it rolls back to the build before it, which runs again
//! ([`install`]). A build that cannot start is rolled back by the next start of any other.
//!
//! Refused, logged, and the running build keeps walking: a bad signature, another key, a
//! downgrade or the same version, a truncated or oversized download, a manifest that
//! disagrees with what was signed, a full disk. A refused version is not fetched again
//! for an hour (a network failure: for a minute).
//!
//! The version a build is comes from a stamp in its bytes ([`STAMP`]), which is also what
//! `e2fleet-coordinator release publish` reads from a binary.
//!
//! # Layout
//! - this file: the version, the errors, the settings and [`Updater`], the part the
//!   fleet loop drives;
//! - [`signature`]: the release key (given or pinned at first use) and the checks;
//! - [`fetch`]: download and staging;
//! - [`install`]: the releases folder, switching, confirming, rolling back, and which
//!   build runs at start.

pub mod fetch;
pub mod install;
pub mod signature;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use semver::Version;
use tokio::sync::oneshot;
use tracing::{info, warn};

use crate::api::Coordinator;
use install::Folder;

/// This build's version stamp, kept whole in the binary's bytes so a release tool can
/// read it (`E2FLEET_WORKER_RELEASE=0.1.0;`).
#[used]
pub static STAMP: &str = concat!("E2FLEET_WORKER_RELEASE=", env!("CARGO_PKG_VERSION"), ";");

/// This build's version, read from [`STAMP`] at run time (so the stamp, not a copy the
/// compiler folded elsewhere, is what a build says it is).
pub fn version() -> Version {
    let stamp: &str = std::hint::black_box(STAMP);
    stamp
        .strip_prefix(e2fleet_proto::release::STAMP_PREFIX)
        .and_then(|rest| rest.strip_suffix(';'))
        .and_then(|v| Version::parse(v).ok())
        .unwrap_or_else(|| Version::new(0, 0, 0))
}

/// This build's version as text (`--version`).
pub fn version_text() -> String {
    version().to_string()
}

/// Why an update was not taken.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct UpdateError {
    /// Whether asking again soon could help.
    pub kind: Failure,
    /// What went wrong.
    pub message: String,
}

/// Kinds of [`UpdateError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The release itself is unacceptable (signature, key, version, size, hash).
    Refused,
    /// The coordinator was away or the transfer broke.
    Unavailable,
    /// This machine could not keep it (a full disk, permissions).
    Local,
}

impl UpdateError {
    pub(crate) fn refused(message: String) -> UpdateError {
        UpdateError {
            kind: Failure::Refused,
            message,
        }
    }
    pub(crate) fn unavailable(message: String) -> UpdateError {
        UpdateError {
            kind: Failure::Unavailable,
            message,
        }
    }
    pub(crate) fn local(message: String) -> UpdateError {
        UpdateError {
            kind: Failure::Local,
            message,
        }
    }
}

/// Whether and how a worker updates itself.
#[derive(Clone, Debug, Default)]
pub struct UpdateConfig {
    /// Take the releases the coordinator offers.
    pub on: bool,
    /// The fleet's release key (base64, or a `release.pub`'s text); `None`: pinned at
    /// first use.
    pub key: Option<String>,
}

/// The fleet loop's part: hears offers, fetches one at a time in the background, and
/// says when a verified build is staged.
pub struct Updater {
    config: UpdateConfig,
    folder: Folder,
    own: Version,
    /// The versions rolled back here (read once: only a start rolls one back).
    rolled_back: Vec<Version>,
    fetching: Option<(String, oneshot::Receiver<Result<Version, UpdateError>>)>,
    /// offered version -> not before this
    backoff: HashMap<String, Instant>,
}

impl Updater {
    /// The updater of a worker whose data directory is `data_dir`.
    pub fn new(config: UpdateConfig, data_dir: &Path) -> Updater {
        let folder = Folder::new(data_dir);
        Updater {
            config,
            rolled_back: folder.refused(),
            folder,
            own: version(),
            fetching: None,
            backoff: HashMap::new(),
        }
    }

    /// The coordinator offers `offered` (empty: nothing): fetch it in the background if
    /// updates are on, it is newer than this build, and it is not waiting out a failure.
    pub fn offered(&mut self, offered: &str, api: &Coordinator) {
        if !self.config.on || offered.is_empty() || self.fetching.is_some() {
            return;
        }
        let Ok(version) = Version::parse(offered) else {
            return;
        };
        if version == self.own || self.rolled_back.contains(&version) {
            return;
        }
        if self
            .backoff
            .get(offered)
            .is_some_and(|until| Instant::now() < *until)
        {
            return;
        }
        if version < self.own {
            warn!(offered = %version, running = %self.own, "update refused: the release offered is older than this build, and a downgrade is never installed");
            self.backoff.insert(
                offered.to_string(),
                Instant::now() + Duration::from_secs(3600),
            );
            return;
        }
        info!(%version, running = %self.own, "the coordinator offers a newer worker: fetching it");
        let api = api.clone();
        let folder = self.folder.clone();
        let key = self.config.key.clone();
        let own = self.own.clone();
        let (tx, rx) = oneshot::channel();
        tokio::spawn(async move {
            let fetched = async {
                let key = fetch::release_key(&api, &folder, key.as_deref()).await?;
                fetch::fetch_and_stage(&api, &folder, &key, &own).await
            }
            .await;
            let _ = tx.send(fetched);
        });
        self.fetching = Some((offered.to_string(), rx));
    }

    /// A verified build staged and ready to switch to, once its fetch is done.
    pub fn ready(&mut self) -> Option<Version> {
        let (offered, mut rx) = self.fetching.take()?;
        let outcome = match rx.try_recv() {
            Ok(outcome) => outcome,
            Err(oneshot::error::TryRecvError::Empty) => {
                self.fetching = Some((offered, rx));
                return None;
            }
            Err(oneshot::error::TryRecvError::Closed) => Err(UpdateError::unavailable(
                "the fetch ended without an answer".into(),
            )),
        };
        match outcome {
            Ok(version) => Some(version),
            Err(e) => {
                let wait = match e.kind {
                    Failure::Unavailable => Duration::from_secs(60),
                    Failure::Refused | Failure::Local => Duration::from_secs(3600),
                };
                warn!(offered = %offered, running = %self.own, error = %e, "update refused; this build keeps walking");
                self.backoff.insert(offered, Instant::now() + wait);
                None
            }
        }
    }
}

/// As a worker starts: which build runs. A newer verified build takes this process's
/// place (this returns only if it cannot); a trial checks itself on this machine with
/// `check` and confirms or rolls back (executing the build before it). `key`: the
/// configured key, else the pinned one.
pub fn at_start(
    data_dir: &Path,
    config: &UpdateConfig,
    check: impl FnOnce() -> Result<(), String>,
) -> anyhow::Result<()> {
    let folder = Folder::new(data_dir);
    if !folder.path().exists() {
        return Ok(());
    }
    let key_text = match &config.key {
        Some(k) => Some(k.clone()),
        None => signature::pinned(folder.path()).ok().flatten(),
    };
    let key = key_text.and_then(|t| signature::parse_key(&t).ok());
    let own = version();
    match install::at_start(&folder, &own, key.as_ref()) {
        install::Launch::Run => Ok(()),
        install::Launch::Exec(binary) if config.on => {
            info!(binary = %binary.display(), "running the updated build installed here");
            let e = install::exec(&binary);
            warn!(error = %e, "cannot run the updated build; this one runs");
            Ok(())
        }
        install::Launch::Exec(_) => Ok(()),
        install::Launch::Trial(trial) => match check() {
            Ok(()) => {
                install::confirm(&folder, &trial)?;
                Ok(())
            }
            Err(why) => {
                warn!(version = %own, %why, "the update fails its checks on this machine: rolling back");
                install::roll_back(&folder, &trial)?;
                let e = install::exec(&trial.launcher);
                anyhow::bail!(
                    "rolled back from {own}, but cannot run the build before it ({}): {e}",
                    trial.launcher.display()
                )
            }
        },
    }
}

/// Switches to the staged `version` and executes it (returns only if that fails, after
/// rolling the switch back).
pub fn switch_and_exec(data_dir: &Path, version: &Version) -> anyhow::Error {
    let folder = Folder::new(data_dir);
    let launcher = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("e2fleet-worker"));
    let binary = match install::switch(&folder, version, &launcher) {
        Ok(b) => b,
        Err(e) => return anyhow::anyhow!("cannot switch to {version}: {e}"),
    };
    info!(%version, from = %self::version(), "switching to the update");
    let e = install::exec(&binary);
    if let Some(trial) = folder.trial() {
        let _ = install::roll_back(&folder, &trial);
    }
    anyhow::anyhow!("cannot run the update {version}: {e}; rolled back")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trial_that_fails_its_checks_rolls_back_and_runs_the_build_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let folder = Folder::new(dir.path());
        folder.create().unwrap();
        let own = version();
        // this build is the trial; the launcher cannot be run here, so the exec fails
        install::switch(&folder, &own, Path::new("/nonexistent/e2fleet-worker")).unwrap();
        let config = UpdateConfig {
            on: true,
            key: None,
        };
        let outcome = at_start(dir.path(), &config, || Err("unit x disagrees".into()));
        let message = format!("{:#}", outcome.unwrap_err());
        assert!(message.contains("rolled back"), "{message}");
        assert!(folder.is_refused(&own));
        assert_eq!(folder.current(), None);
        assert_eq!(folder.trial(), None);
    }

    #[test]
    fn a_trial_that_passes_its_checks_is_confirmed() {
        let dir = tempfile::tempdir().unwrap();
        let folder = Folder::new(dir.path());
        folder.create().unwrap();
        install::switch(&folder, &version(), Path::new("/x")).unwrap();
        at_start(dir.path(), &UpdateConfig::default(), || Ok(())).unwrap();
        assert_eq!(folder.trial(), None);
        assert_eq!(folder.current(), Some(version()));
    }
}
