//! Signed worker releases, as the coordinator publishes them and workers check them.
//!
//! A release is a worker binary for one platform, signed with the fleet's release key
//! (minisign: `minisign -Vm e2fleet-worker -P KEY` checks one by hand). The coordinator
//! serves, on its one port:
//!
//! | path | what |
//! |---|---|
//! | `/downloads/release.pub` | the fleet's public key (minisign format) |
//! | `/downloads/worker/PLATFORM/current.json` | the [`Manifest`] of the release offered |
//! | `/downloads/worker/PLATFORM/VERSION/e2fleet-worker` | the binary |
//! | `/downloads/worker/PLATFORM/VERSION/e2fleet-worker.minisig` | its signature |
//!
//! The manifest is a pointer and is not trusted: what a worker believes is the signature's
//! *trusted comment* ([`Statement`]), which the key signs together with the binary's
//! signature, so a release cannot be relabelled as another version, platform or size.
//! A binary's own version is a stamp in its bytes ([`STAMP_PREFIX`]), which is what
//! `release publish` reads: the version published is the version the binary says it is.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The binary's file name in a release.
pub const BINARY: &str = "e2fleet-worker";

/// Largest worker binary either side handles, bytes (a release build is ~12 MB).
pub const MAX_BINARY_BYTES: u64 = 256 << 20;

/// Largest manifest or signature file, bytes.
pub const MAX_SMALL_FILE_BYTES: u64 = 4096;

/// What precedes the version in a worker binary's stamp: `E2FLEET_WORKER_RELEASE=0.1.0;`.
pub const STAMP_PREFIX: &str = "E2FLEET_WORKER_RELEASE=";

/// The platform a binary runs on, `ARCH-OS` as Rust names them (`x86_64-linux`).
pub fn platform(arch: &str, os: &str) -> String {
    format!("{arch}-{os}")
}

/// This program's platform.
pub fn this_platform() -> String {
    platform(std::env::consts::ARCH, std::env::consts::OS)
}

/// Whether `name` can be a platform or version in a download path: 1-40 characters of
/// ASCII letters, digits, `.`, `_`, `-` and `+`, not starting with `.`.
pub fn is_path_safe(name: &str) -> bool {
    (1..=40).contains(&name.len())
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'+'))
}

/// The version stamped in a worker binary's bytes (the first stamp that parses), if any.
pub fn stamped_version(binary: &[u8]) -> Option<semver::Version> {
    let prefix = STAMP_PREFIX.as_bytes();
    let mut from = 0;
    while let Some(at) = find(&binary[from..], prefix) {
        let start = from + at + prefix.len();
        let rest = &binary[start..binary.len().min(start + 64)];
        if let Some(end) = rest.iter().position(|&b| b == b';')
            && let Ok(text) = std::str::from_utf8(&rest[..end])
            && let Ok(version) = semver::Version::parse(text)
        {
            return Some(version);
        }
        from = start;
    }
    None
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// `current.json`: where the offered release's files are (paths relative to the
/// platform's folder) and what they should be. Not trusted: the signature's
/// [`Statement`] is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The release's version.
    pub version: String,
    /// Its platform.
    pub platform: String,
    /// The binary's size, bytes.
    pub size: u64,
    /// The binary's SHA-256, lower-case hex.
    pub sha256: String,
}

impl Manifest {
    /// The binary's path under `/downloads/worker/PLATFORM/`.
    pub fn binary_path(&self) -> String {
        format!("{}/{BINARY}", self.version)
    }

    /// The signature's path under `/downloads/worker/PLATFORM/`.
    pub fn signature_path(&self) -> String {
        format!("{}/{BINARY}.minisig", self.version)
    }

    /// Checks the fields a worker acts on before it downloads anything.
    pub fn check(&self) -> Result<semver::Version, String> {
        if !is_path_safe(&self.version) || !is_path_safe(&self.platform) {
            return Err("the manifest names an impossible version or platform".into());
        }
        let version = semver::Version::parse(&self.version)
            .map_err(|e| format!("the manifest's version {:?}: {e}", self.version))?;
        if self.size == 0 || self.size > MAX_BINARY_BYTES {
            return Err(format!(
                "the manifest's size {} is not in 1..={MAX_BINARY_BYTES} bytes",
                self.size
            ));
        }
        if self.sha256.len() != 64 || !self.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err("the manifest's sha256 is not 64 hex digits".into());
        }
        Ok(version)
    }
}

/// What the release key vouches for: the signature's trusted comment,
/// `e2fleet-worker VERSION PLATFORM size=N sha256=HEX`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Statement {
    /// The version.
    pub version: semver::Version,
    /// The platform.
    pub platform: String,
    /// The binary's size, bytes.
    pub size: u64,
    /// Its SHA-256, lower-case hex.
    pub sha256: String,
}

impl fmt::Display for Statement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{BINARY} {} {} size={} sha256={}",
            self.version, self.platform, self.size, self.sha256
        )
    }
}

impl Statement {
    /// Reads a trusted comment.
    pub fn parse(comment: &str) -> Result<Statement, String> {
        let bad =
            || format!("the signature does not vouch for an e2fleet worker release: {comment:?}");
        let mut words = comment.split_whitespace();
        if words.next() != Some(BINARY) {
            return Err(bad());
        }
        let version = words
            .next()
            .and_then(|v| semver::Version::parse(v).ok())
            .ok_or_else(bad)?;
        let platform = words.next().filter(|p| is_path_safe(p)).ok_or_else(bad)?;
        let size = words
            .next()
            .and_then(|w| w.strip_prefix("size="))
            .and_then(|n| n.parse().ok())
            .ok_or_else(bad)?;
        let sha256 = words
            .next()
            .and_then(|w| w.strip_prefix("sha256="))
            .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(bad)?;
        if words.next().is_some() {
            return Err(bad());
        }
        Ok(Statement {
            version,
            platform: platform.to_string(),
            size,
            sha256: sha256.to_ascii_lowercase(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_is_found_in_a_binarys_bytes() {
        let mut bytes = b"\x7fELF....E2FLEET_WORKER_RELEASE=garbage;..".to_vec();
        bytes.extend_from_slice(b"E2FLEET_WORKER_RELEASE=1.2.3;rest");
        assert_eq!(stamped_version(&bytes), Some(semver::Version::new(1, 2, 3)));
        assert_eq!(stamped_version(b"no stamp here"), None);
        assert_eq!(stamped_version(b"E2FLEET_WORKER_RELEASE=1.2.3"), None);
    }

    #[test]
    fn a_statement_reads_back_what_it_wrote() {
        let s = Statement {
            version: semver::Version::new(0, 2, 0),
            platform: "x86_64-linux".into(),
            size: 12_345,
            sha256: "ab".repeat(32),
        };
        assert_eq!(Statement::parse(&s.to_string()), Ok(s));
        for bad in [
            "",
            "e2fleet-worker 0.2.0 x86_64-linux size=1",
            "other 0.2.0 x86_64-linux size=1 sha256=00",
            "e2fleet-worker 0.2 x86_64-linux size=1 sha256=00",
            "e2fleet-worker 0.2.0 ../x size=1 sha256=00",
        ] {
            assert!(Statement::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn manifests_with_impossible_fields_are_refused() {
        let good = Manifest {
            version: "0.2.0".into(),
            platform: "x86_64-linux".into(),
            size: 10,
            sha256: "0".repeat(64),
        };
        assert!(good.check().is_ok());
        let mut m = good.clone();
        m.version = "../../etc".into();
        assert!(m.check().is_err());
        let mut m = good.clone();
        m.size = MAX_BINARY_BYTES + 1;
        assert!(m.check().is_err());
        let mut m = good;
        m.sha256 = "zz".into();
        assert!(m.check().is_err());
    }
}
