//! Signed worker releases: the operator's release key, publishing a worker binary, and
//! serving the release offered to each platform (formats in [`e2fleet_proto::release`]).
//!
//! The releases folder (`serve --releases DIR`, default `releases` beside the process) holds:
//!
//! ```text
//! release.pub                                   the fleet's public key (copied at publish)
//! worker/PLATFORM/current.json                  the manifest of the release offered
//! worker/PLATFORM/VERSION/e2fleet-worker        a binary
//! worker/PLATFORM/VERSION/e2fleet-worker.minisig
//! ```
//!
//! `release publish` writes a version's files first and the manifest last (a rename), so
//! a coordinator serving the folder never offers a release whose files are not all there.
//! Several coordinators on one database each serve their own folder: publish on each (or
//! share the folder). The secret key never needs to be on a coordinator: `release
//! publish` can run on the operator's own machine against a copy of the folder.
//!
//! # Layout
//! - this file: [`Releases`], what the server offers (read from the folder, cached);
//! - [`publish`]: `release-key generate` and `release publish`;
//! - [`downloads`]: which files `GET /downloads/...` serves (the handler is the
//!   server's) and its limits.

pub mod downloads;
pub mod publish;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use e2fleet_proto::release::{MAX_SMALL_FILE_BYTES, Manifest, is_path_safe};

/// How long a manifest read from the folder is served before it is read again.
pub const MANIFEST_TTL: Duration = Duration::from_secs(5);

/// The releases folder a coordinator serves.
#[derive(Debug)]
pub struct Releases {
    dir: PathBuf,
    /// platform -> (when read, the manifest if there is a valid one)
    cache: Mutex<HashMap<String, (Instant, Option<Manifest>)>>,
}

impl Releases {
    /// The folder `dir` (it need not exist: then nothing is offered).
    pub fn new(dir: impl Into<PathBuf>) -> Releases {
        Releases {
            dir: dir.into(),
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The version offered to workers of `platform`, if any.
    pub fn offered(&self, platform: &str) -> Option<String> {
        self.manifest(platform).map(|m| m.version)
    }

    /// The manifest offered to `platform` (read again every [`MANIFEST_TTL`]); a missing,
    /// unreadable or invalid one offers nothing.
    pub fn manifest(&self, platform: &str) -> Option<Manifest> {
        if !is_path_safe(platform) {
            return None;
        }
        {
            let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((at, m)) = cache.get(platform)
                && at.elapsed() < MANIFEST_TTL
            {
                return m.clone();
            }
        }
        // read without the lock: heartbeats of other platforms do not wait on the disk
        let m = read_manifest(&self.dir, platform);
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() > 64 {
            cache.clear();
        }
        cache.insert(platform.to_string(), (Instant::now(), m.clone()));
        m
    }
}

/// Every valid manifest under `dir`, by platform (at most 64 platforms are looked at).
pub fn all_manifests(dir: &Path) -> Vec<Manifest> {
    let mut platforms: Vec<String> = std::fs::read_dir(dir.join("worker"))
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|p| is_path_safe(p))
                .take(64)
                .collect()
        })
        .unwrap_or_default();
    platforms.sort();
    platforms
        .iter()
        .filter_map(|p| read_manifest(dir, p))
        .collect()
}

/// `worker/PLATFORM/current.json` under `dir`, if it is there and valid.
pub fn read_manifest(dir: &Path, platform: &str) -> Option<Manifest> {
    let path = dir.join("worker").join(platform).join("current.json");
    let meta = std::fs::metadata(&path).ok()?;
    if meta.len() > MAX_SMALL_FILE_BYTES {
        tracing::warn!(file = %path.display(), "the release manifest is too large; nothing is offered");
        return None;
    }
    let text = std::fs::read_to_string(&path).ok()?;
    match serde_json::from_str::<Manifest>(&text) {
        Ok(m) if m.check().is_ok() && m.platform == platform => Some(m),
        _ => {
            tracing::warn!(file = %path.display(), "the release manifest is not valid; nothing is offered");
            None
        }
    }
}
