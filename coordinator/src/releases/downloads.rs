//! What `GET /downloads/...` serves of the releases folder (the handler is the server's,
//! `server/downloads.rs`), to workers updating themselves (the same port as everything
//! else). Only the paths of [`e2fleet_proto::release`] are served,
//! each name checked. The key, the manifests and the signatures (a few hundred bytes
//! each) are open to anyone; a binary is for workers: its request carries a worker token
//! (checked, and failures counted against the address, as on gRPC), so nobody without
//! one can hold a download slot. Binaries are streamed, at most [`DOWNLOADS_AT_ONCE`] at
//! a time (more are told to retry), and a download that reads slower than [`CHUNK_TIME`]
//! a chunk or takes longer than [`DOWNLOAD_TIME`] is cut off (the worker's size and hash
//! checks then refuse the truncated file).

use std::sync::Arc;
use std::time::Duration;

use e2fleet_proto::release::{BINARY, is_path_safe};
use tokio::sync::Semaphore;

use super::publish::PUBLIC_KEY_FILE;

/// Downloads served at once (a release is ~12 MB: a thousand workers updating take turns).
pub const DOWNLOADS_AT_ONCE: usize = 8;
/// Longest wait for the reader to take the next 64 KiB.
pub const CHUNK_TIME: Duration = Duration::from_secs(30);
/// Longest one download may take.
pub const DOWNLOAD_TIME: Duration = Duration::from_secs(600);

/// The permits of [`DOWNLOADS_AT_ONCE`].
#[derive(Debug)]
pub struct DownloadSlots(pub Arc<Semaphore>);

impl Default for DownloadSlots {
    fn default() -> Self {
        DownloadSlots(Arc::new(Semaphore::new(DOWNLOADS_AT_ONCE)))
    }
}

/// Which file of the releases folder `path` names, if it is one that is served, and
/// whether it is a binary (for workers only).
pub fn served_file(path: &str) -> Option<(std::path::PathBuf, bool)> {
    let parts: Vec<&str> = path.split('/').collect();
    let ok = match parts.as_slice() {
        [key] => *key == PUBLIC_KEY_FILE,
        ["worker", platform, "current.json"] => is_path_safe(platform),
        ["worker", platform, version, file] => {
            is_path_safe(platform)
                && is_path_safe(version)
                && (*file == BINARY || *file == format!("{BINARY}.minisig"))
        }
        _ => false,
    };
    let binary = parts.len() == 4 && parts[3] == BINARY;
    ok.then(|| (parts.iter().collect(), binary))
}

#[cfg(test)]
mod tests {
    use super::served_file;

    #[test]
    fn only_release_files_are_served() {
        for good in [
            "release.pub",
            "worker/x86_64-linux/current.json",
            "worker/x86_64-linux/0.2.0/e2fleet-worker",
            "worker/x86_64-linux/0.2.0/e2fleet-worker.minisig",
        ] {
            let (_, binary) = served_file(good).unwrap_or_else(|| panic!("{good}"));
            assert_eq!(binary, good.ends_with("/e2fleet-worker"), "{good}");
        }
        for bad in [
            "",
            "release.key",
            "../release.key",
            "worker/../../etc/passwd",
            "worker/x86_64-linux/../current.json",
            "worker/x86_64-linux/0.2.0/e2fleet-worker.partial",
            "worker/.hidden/current.json",
            "worker/x86_64-linux/0.2.0/../../release.key",
        ] {
            assert!(served_file(bad).is_none(), "{bad}");
        }
    }
}
