//! Secrets and digests: fresh random tokens, and the SHA-256 in hex under which tokens
//! are stored (never the tokens themselves) and hardware classes are named.

use rand::RngCore;
use sha2::{Digest, Sha256};

/// Lowercase hex SHA-256.
pub(crate) fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// A fresh random token (192 bits, hex).
pub fn random_token() -> String {
    let mut bytes = [0u8; 24];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}
