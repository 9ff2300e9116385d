//! The releases folder in the data directory, and which build runs.
//!
//! ```text
//! DATA_DIR/releases/
//!   release.pub                   the pinned release key
//!   VERSION/e2fleet-worker        a verified build (0700) ...
//!   VERSION/e2fleet-worker.minisig  ... and its signature
//!   current                       the version this worker runs (absent: the binary it
//!                                 was started as, e.g. the package's /usr/bin one)
//!   trial                         switched to and not yet confirmed: "VERSION\nPREVIOUS\nLAUNCHER"
//!   refused                       versions rolled back, one a line: never switched to again
//! ```
//!
//! Updates live here, not over the installed binary: a packaged worker runs as its own
//! user and cannot (and should not) write `/usr/bin`. Whatever binary starts looks here
//! first ([`at_start`]): a newer build that is current and still verifies is executed in
//! its place. Switching ([`switch`]) writes `trial` and then `current`, each by a rename;
//! the new build checks itself on this machine and confirms ([`confirm`]), or rolls back
//! ([`roll_back`]): `refused` gets its version, `current` goes back to the previous one,
//! and the previous build is executed again. A build that cannot start at all never
//! confirms: the next start of any other build finds the trial unconfirmed and rolls it
//! back.

use std::path::{Path, PathBuf};

use e2fleet_proto::release::BINARY;
use minisign_verify::PublicKey;
use semver::Version;
use tracing::{info, warn};

use super::UpdateError;
use super::signature::{check, parse_signature};

/// The releases folder of a data directory.
#[derive(Clone, Debug)]
pub struct Folder(PathBuf);

/// A switch not yet confirmed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trial {
    /// The version switched to.
    pub version: Version,
    /// The version that ran before (`None`: the binary the worker was started as).
    pub previous: Option<Version>,
    /// The binary that switched, to execute again on a roll-back.
    pub launcher: PathBuf,
}

/// What [`at_start`] decided.
#[derive(Debug, PartialEq, Eq)]
pub enum Launch {
    /// This binary runs.
    Run,
    /// This binary is an unconfirmed switch: check it, then [`confirm`] or [`roll_back`].
    Trial(Trial),
    /// Execute this newer build instead.
    Exec(PathBuf),
}

impl Folder {
    /// The releases folder of `data_dir`.
    pub fn new(data_dir: &Path) -> Folder {
        Folder(data_dir.join("releases"))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Creates it (0700).
    pub fn create(&self) -> Result<(), UpdateError> {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder
            .create(&self.0)
            .map_err(|e| UpdateError::local(format!("cannot create {}: {e}", self.0.display())))
    }

    /// A version's folder.
    pub fn version_dir(&self, version: &Version) -> PathBuf {
        self.0.join(version.to_string())
    }

    /// A version's binary.
    pub fn binary(&self, version: &Version) -> PathBuf {
        self.version_dir(version).join(BINARY)
    }

    fn read_small(&self, name: &str) -> Option<String> {
        let path = self.0.join(name);
        let meta = std::fs::metadata(&path).ok()?;
        if meta.len() > 64 << 10 {
            return None;
        }
        std::fs::read_to_string(path).ok()
    }

    /// The version that runs, if a switch made one current.
    pub fn current(&self) -> Option<Version> {
        Version::parse(self.read_small("current")?.trim()).ok()
    }

    fn set_current(&self, version: Option<&Version>) -> Result<(), UpdateError> {
        match version {
            Some(v) => write_file(&self.0.join("current"), v.to_string().as_bytes()),
            None => remove(&self.0.join("current")),
        }
    }

    /// The unconfirmed switch, if any.
    pub fn trial(&self) -> Option<Trial> {
        let text = self.read_small("trial")?;
        let mut lines = text.lines();
        let version = Version::parse(lines.next()?.trim()).ok()?;
        let previous = match lines.next()?.trim() {
            "none" => None,
            v => Some(Version::parse(v).ok()?),
        };
        let launcher = PathBuf::from(lines.next()?.trim());
        Some(Trial {
            version,
            previous,
            launcher,
        })
    }

    /// The versions rolled back.
    pub fn refused(&self) -> Vec<Version> {
        self.read_small("refused")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| Version::parse(l.trim()).ok())
            .collect()
    }

    /// Whether `version` was rolled back here.
    pub fn is_refused(&self, version: &Version) -> bool {
        self.refused().contains(version)
    }

    fn refuse(&self, version: &Version) -> Result<(), UpdateError> {
        let mut list = self.refused();
        if !list.contains(version) {
            list.push(version.clone());
        }
        // the newest 32 are enough to never go back to a bad one
        let from = list.len().saturating_sub(32);
        let text: String = list[from..].iter().map(|v| format!("{v}\n")).collect();
        write_file(&self.0.join("refused"), text.as_bytes())
    }

    /// Checks an installed build against its signature and `key`.
    pub fn verify_installed(&self, version: &Version, key: &PublicKey) -> Result<(), UpdateError> {
        let dir = self.version_dir(version);
        let signature =
            std::fs::read_to_string(dir.join(format!("{BINARY}.minisig"))).map_err(|e| {
                UpdateError::local(format!("cannot read the signature of {version}: {e}"))
            })?;
        let bytes = std::fs::read(dir.join(BINARY))
            .map_err(|e| UpdateError::local(format!("cannot read the build {version}: {e}")))?;
        check(key, &parse_signature(&signature)?, &bytes, version).map(|_| ())
    }
}

/// Decides, as a worker starts, which build runs: a trial left unconfirmed by another
/// build is rolled back; a newer current build that still verifies with `key` runs in
/// this one's place.
pub fn at_start(folder: &Folder, own: &Version, key: Option<&PublicKey>) -> Launch {
    if let Some(trial) = folder.trial() {
        if &trial.version == own {
            return Launch::Trial(trial);
        }
        warn!(version = %trial.version, "the update did not start or stopped before its checks passed: rolled back");
        if let Err(e) = roll_back(folder, &trial) {
            warn!(error = %e, "could not record the roll-back");
        }
    }
    let Some(current) = folder.current() else {
        return Launch::Run;
    };
    if &current <= own || folder.is_refused(&current) {
        return Launch::Run;
    }
    let verified = match key {
        Some(key) => folder.verify_installed(&current, key),
        None => Err(UpdateError::refused(
            "no release key to check it with".into(),
        )),
    };
    match verified {
        Ok(()) => Launch::Exec(folder.binary(&current)),
        Err(e) => {
            warn!(version = %current, error = %e, "the installed update no longer verifies: running this build");
            let _ = folder.set_current(None);
            Launch::Run
        }
    }
}

/// Makes `to` (already staged and verified) the build that runs, as an unconfirmed
/// trial; returns the binary to execute.
pub fn switch(folder: &Folder, to: &Version, launcher: &Path) -> Result<PathBuf, UpdateError> {
    let previous = folder.current();
    let trial = format!(
        "{to}\n{}\n{}\n",
        previous
            .as_ref()
            .map_or_else(|| "none".to_string(), Version::to_string),
        launcher.display()
    );
    write_file(&folder.0.join("trial"), trial.as_bytes())?;
    folder.set_current(Some(to))?;
    Ok(folder.binary(to))
}

/// The trial passed its checks: it stays, and builds older than it and the one before it
/// are deleted.
pub fn confirm(folder: &Folder, trial: &Trial) -> Result<(), UpdateError> {
    remove(&folder.0.join("trial"))?;
    let keep: Vec<String> = [Some(&trial.version), trial.previous.as_ref()]
        .into_iter()
        .flatten()
        .map(Version::to_string)
        .collect();
    if let Ok(entries) = std::fs::read_dir(&folder.0) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if entry.path().is_dir() && Version::parse(&name).is_ok() && !keep.contains(&name) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    info!(version = %trial.version, "update confirmed: this build passed its checks on this machine");
    Ok(())
}

/// The trial failed: its version is refused from now on and the previous build is
/// current again.
pub fn roll_back(folder: &Folder, trial: &Trial) -> Result<(), UpdateError> {
    folder.refuse(&trial.version)?;
    folder.set_current(trial.previous.as_ref())?;
    remove(&folder.0.join("trial"))
}

/// Replaces this process with `binary`, with the same arguments and environment.
/// Returns only if that fails.
pub fn exec(binary: &Path) -> std::io::Error {
    use std::os::unix::process::CommandExt;
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| BINARY.into());
    std::process::Command::new(binary)
        .arg0(arg0)
        .args(args)
        .exec()
}

/// Writes one of the folder's files (whole and private: [`crate::files::save_private`]).
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<(), UpdateError> {
    crate::files::save_private(path, bytes)
        .map_err(|e| UpdateError::local(format!("cannot write {}: {e}", path.display())))
}

fn remove(path: &Path) -> Result<(), UpdateError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(UpdateError::local(format!(
            "cannot remove {}: {e}",
            path.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    #[test]
    fn a_switch_that_never_confirms_is_rolled_back_by_the_next_start() {
        let dir = tempfile::tempdir().unwrap();
        let folder = Folder::new(dir.path());
        folder.create().unwrap();
        let binary = switch(&folder, &v("0.2.0"), Path::new("/usr/bin/e2fleet-worker")).unwrap();
        assert_eq!(binary, folder.binary(&v("0.2.0")));
        assert_eq!(folder.current(), Some(v("0.2.0")));
        // the new build itself finds its trial
        assert!(matches!(
            at_start(&folder, &v("0.2.0"), None),
            Launch::Trial(Trial { version, previous: None, .. }) if version == v("0.2.0")
        ));
        // the old build started again (the new one died): rolled back, never again
        assert_eq!(at_start(&folder, &v("0.1.0"), None), Launch::Run);
        assert_eq!(folder.current(), None);
        assert_eq!(folder.trial(), None);
        assert!(folder.is_refused(&v("0.2.0")));
    }

    #[test]
    fn a_confirmed_switch_keeps_the_build_before_it_and_deletes_older_ones() {
        let dir = tempfile::tempdir().unwrap();
        let folder = Folder::new(dir.path());
        folder.create().unwrap();
        for version in ["0.1.5", "0.2.0", "0.3.0"] {
            std::fs::create_dir_all(folder.version_dir(&v(version))).unwrap();
        }
        folder.set_current(Some(&v("0.2.0"))).unwrap();
        switch(&folder, &v("0.3.0"), Path::new("/x")).unwrap();
        let Launch::Trial(trial) = at_start(&folder, &v("0.3.0"), None) else {
            panic!("not a trial");
        };
        assert_eq!(trial.previous, Some(v("0.2.0")));
        confirm(&folder, &trial).unwrap();
        assert!(!folder.version_dir(&v("0.1.5")).exists());
        assert!(folder.version_dir(&v("0.2.0")).exists());
        assert!(folder.version_dir(&v("0.3.0")).exists());
        // a failed check afterwards would have gone back to 0.2.0
        let rolled = Trial {
            version: v("0.3.0"),
            previous: Some(v("0.2.0")),
            launcher: "/x".into(),
        };
        roll_back(&folder, &rolled).unwrap();
        assert_eq!(folder.current(), Some(v("0.2.0")));
    }

    #[test]
    fn an_installed_build_that_no_longer_verifies_is_not_run() {
        let dir = tempfile::tempdir().unwrap();
        let folder = Folder::new(dir.path());
        folder.create().unwrap();
        std::fs::create_dir_all(folder.version_dir(&v("0.9.0"))).unwrap();
        folder.set_current(Some(&v("0.9.0"))).unwrap();
        // no key, no signature: it runs this build and forgets the other
        assert_eq!(at_start(&folder, &v("0.1.0"), None), Launch::Run);
        assert_eq!(folder.current(), None);
        // an older current build than this one is simply not run
        folder.set_current(Some(&v("0.0.1"))).unwrap();
        assert_eq!(at_start(&folder, &v("0.1.0"), None), Launch::Run);
    }
}
