//! The fleet's release key on this worker, and what it vouches for.
//!
//! The key is given (`--release-key`, the base64 line of the operator's `release.pub`) or
//! pinned the first time the worker needs it: read from the coordinator's
//! `/downloads/release.pub` and kept in `DATA_DIR/releases/release.pub`, and never replaced
//! by what a coordinator says later (trust on first use, as SSH does with host keys). A
//! given key that differs from the pinned one wins and replaces it.

use std::path::Path;

use e2fleet_proto::release::{MAX_SMALL_FILE_BYTES, Statement};
use minisign_verify::{PublicKey, Signature};

use super::UpdateError;

/// The pinned key's file in the releases folder.
pub const PINNED_KEY: &str = "release.pub";

/// Parses a key: the base64 line alone, or a whole `release.pub` (comment line + base64).
pub fn parse_key(text: &str) -> Result<PublicKey, UpdateError> {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("untrusted comment:"))
        .unwrap_or("");
    PublicKey::from_base64(line).map_err(|e| {
        UpdateError::refused(format!("the release key is not a minisign public key: {e}"))
    })
}

/// The key pinned in `folder`, if any.
pub fn pinned(folder: &Path) -> Result<Option<String>, UpdateError> {
    let path = folder.join(PINNED_KEY);
    match std::fs::read_to_string(&path) {
        Ok(text) if text.len() as u64 <= MAX_SMALL_FILE_BYTES => Ok(Some(text)),
        Ok(_) => Err(UpdateError::refused(format!(
            "{} is too large to be a key",
            path.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(UpdateError::local(format!(
            "cannot read {}: {e}",
            path.display()
        ))),
    }
}

/// Pins `text` (a key already parsed) in `folder`.
pub fn pin(folder: &Path, text: &str) -> Result<(), UpdateError> {
    super::install::write_file(&folder.join(PINNED_KEY), text.as_bytes())
}

/// Reads a signature file's text.
pub fn parse_signature(text: &str) -> Result<Signature, UpdateError> {
    Signature::decode(text)
        .map_err(|e| UpdateError::refused(format!("the release signature is malformed: {e}")))
}

/// What a signature's trusted comment says, if it is an e2fleet release statement.
pub fn statement(signature: &Signature) -> Result<Statement, UpdateError> {
    Statement::parse(signature.trusted_comment()).map_err(UpdateError::refused)
}

/// Checks `bytes` against `signature` made by `key`: the signature, then that the signed
/// statement names these bytes (size and SHA-256), the `version` expected and this
/// platform.
pub fn check(
    key: &PublicKey,
    signature: &Signature,
    bytes: &[u8],
    version: &semver::Version,
) -> Result<Statement, UpdateError> {
    let mut verifier = key.verify_stream(signature).map_err(|e| {
        UpdateError::refused(format!(
            "the release is not signed by the fleet's release key: {e}"
        ))
    })?;
    verifier.update(bytes);
    verifier
        .finalize()
        .map_err(|e| UpdateError::refused(format!("the release's signature does not hold: {e}")))?;
    let said = statement(signature)?;
    let sha256 = format!("{:x}", <sha2::Sha256 as sha2::Digest>::digest(bytes));
    if said.size != bytes.len() as u64 || said.sha256 != sha256 {
        return Err(UpdateError::refused(
            "the signed statement names another file (size or sha256 differ)".into(),
        ));
    }
    if &said.version != version {
        return Err(UpdateError::refused(format!(
            "the signature is for version {}, not {version}",
            said.version
        )));
    }
    if said.platform != e2fleet_proto::release::this_platform() {
        return Err(UpdateError::refused(format!(
            "the release is for {}, not this machine ({})",
            said.platform,
            e2fleet_proto::release::this_platform()
        )));
    }
    Ok(said)
}
