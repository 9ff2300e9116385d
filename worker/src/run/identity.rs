//! The worker's identity as its data directory keeps it: the coordinator it joined, its
//! worker id and its own token, in `identity.json` (`0600`: the token is a secret).
//! `run` writes it at each registration; `team` reads it to act as that worker.

use std::path::{Path, PathBuf};

use e2fleet_proto::api::WorkerId;
use serde::{Deserialize, Serialize};

/// The file an identity lives in, inside a data directory.
pub fn identity_path(data_dir: &Path) -> PathBuf {
    data_dir.join("identity.json")
}

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
    pub fn load(path: &Path, coordinator: &str) -> Option<Identity> {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|t| serde_json::from_str::<Identity>(&t).ok())
            .filter(|i| i.coordinator == coordinator)
    }

    /// Saves it at `path`, readable by its owner only.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let json = serde_json::to_string(self).map_err(std::io::Error::other)?;
        crate::files::save_private(path, json.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn an_identity_is_private_and_belongs_to_its_coordinator() {
        let dir = tempfile::tempdir().unwrap();
        let path = identity_path(dir.path());
        let id = Identity {
            coordinator: "https://a:7733".into(),
            worker_id: WorkerId::random(),
            worker_token: "secret".into(),
        };
        id.save(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            Identity::load(&path, "https://a:7733").unwrap().worker_id,
            id.worker_id
        );
        assert!(Identity::load(&path, "https://b:7733").is_none());
    }
}
