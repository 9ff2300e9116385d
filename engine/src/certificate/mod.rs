//! Certificates: a job's result in one self-contained file that anyone can audit without
//! trusting the coordinator or any worker.
//!
//! A [`Certificate`] holds the puzzle, the fill order, the split depth and budget, the
//! enumeration's counts, and every unit — its prefix and cursor, and its accepted result:
//! exact per-depth counts, where a budget stop left off, the deepest depth and the result
//! digest ([`crate::unit::result_digest`]) — plus the solutions and the best boards, and the
//! totals they add up to. A Merkle root over the units ([`merkle_root`]) names the set of
//! units in a few bytes, so a published root fixes every unit; an inclusion proof
//! ([`merkle_proof`], [`verify_proof`]) shows one unit belongs to it.
//!
//! # The file
//! `gzip( body "\n" "sha256:" hex(SHA-256(body)) "\n" )`, where `body` is the certificate
//! as compact JSON. [`decode`] refuses a file whose body does not hash to its last line, so
//! a changed byte anywhere is caught before anything else is read; [`Certificate::digest`]
//! is the name to publish next to the Merkle root.
//!
//! Placements are stored by fill order: a prefix, cursor or board is the list of
//! `piece * 4 + rot` codes at depths `1, 2, ...` (the cell of each depth is the fill
//! order's), so a 256-cell board is 256 small integers.
//!
//! # Checking
//! [`audit::check_structure`] re-derives the enumeration, checks that the units tile the
//! tree exactly (every prefix once, each budget stop closed by its continuation, split
//! continuations re-derived), that the per-depth sums equal the totals, and verifies every
//! solution and best board; [`audit::compare_run`] compares a unit re-run on this machine
//! with its certificate entry, to the digit.

pub mod audit;

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::model::{Placement, Puzzle};
use crate::plan::SearchPlan;
use crate::unit::{Unit, UnitResult};

/// The format tag of version 1.
pub const FORMAT: &str = "e2fleet-certificate/1";

/// A job's result, unit by unit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Certificate {
    /// [`FORMAT`].
    pub format: String,
    /// Which job of which fleet.
    pub job: JobInfo,
    /// The puzzle as site JSON.
    pub puzzle: String,
    /// The fill order spec.
    pub order: String,
    /// Free cells: depths of the tree.
    pub depths: usize,
    /// Split depth of the enumeration.
    pub split_depth: usize,
    /// Node budget per run (`None`: each unit was walked whole).
    pub budget: Option<u64>,
    /// Solution boards each run kept (the count is always exact): needed to reproduce the
    /// result digests.
    pub solutions_cap: usize,
    /// Nodes per depth of the enumeration to the split depth.
    pub enumeration: Vec<u64>,
    /// Solutions the enumeration itself found (a split at the last depth).
    pub enumeration_solutions: u64,
    /// Prefix nodes per depth created by continuation splits.
    pub split: Vec<u64>,
    /// The job's total per depth: enumeration + split + every unit.
    pub totals: Vec<u64>,
    /// Its exact number of solutions.
    pub solutions_count: u64,
    /// Every unit of the job.
    pub units: Vec<CertUnit>,
    /// Solution boards (the first ones found; full boards, hints included, by cell).
    pub solutions: Vec<Vec<Placement>>,
    /// The deepest boards of the job's results, deepest first.
    pub best: Vec<CertBoard>,
    /// [`merkle_root`] of `units`.
    pub merkle_root: String,
}

/// Which job, as its coordinator named it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobInfo {
    /// The job id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Submission time, ms since the epoch.
    pub created_ms: i64,
    /// Completion time, ms (`None`: exported while running).
    pub finished_ms: Option<i64>,
    /// Every unit has a result: the totals are the whole tree's.
    pub complete: bool,
}

/// One unit and its accepted result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertUnit {
    /// The coordinator's unit id.
    pub id: u64,
    /// Prefix codes at depths `1..=d`.
    pub prefix: Vec<u32>,
    /// Cursor codes at depths `d+1..` (a continuation); empty for a plain unit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cursor: Vec<u32>,
    /// Its accepted result (`None`: not decided yet, in a certificate of a running job).
    pub result: Option<CertResult>,
}

/// A unit's accepted result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertResult {
    /// Depth index (0 = depth 1) of `nodes[0]`; every depth before it counted zero.
    pub from: usize,
    /// Nodes per depth from `from` (trailing zeros left out).
    pub nodes: Vec<u64>,
    /// The deepest depth reached (the prefix depth when no node was committed).
    pub max_depth: usize,
    /// Where a budget stop left off (cursor codes below the prefix); `None`: finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Vec<u32>>,
    /// [`crate::unit::result_digest`] of the full result.
    pub digest: String,
    /// Results that agreed with it (itself included).
    pub agreed: u32,
}

/// A board reached by some unit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertBoard {
    /// The unit whose result reached it.
    pub unit: u64,
    /// Free cells filled.
    pub depth: usize,
    /// Matched inner edges, hints included ([`crate::verify::score`]).
    pub score: usize,
    /// Codes at depths `1..=depth`.
    pub board: Vec<u32>,
}

impl CertUnit {
    /// The entry of unit `id` walking `unit`, with its accepted result, that result's
    /// digest ([`crate::unit::result_digest`] of the whole result: a store may keep only the counts and
    /// the digest) and how many results agreed with it.
    pub fn new(id: u64, unit: &Unit, accepted: Option<(&UnitResult, &str, u32)>) -> CertUnit {
        CertUnit {
            id,
            prefix: codes(&unit.prefix),
            cursor: codes(&unit.cursor),
            result: accepted.map(|(r, digest, agreed)| {
                let (from, nodes) = CertResult::compact_nodes(&r.nodes_by_depth);
                CertResult {
                    from,
                    nodes,
                    max_depth: r.max_depth,
                    stop: r.cursor.as_deref().map(codes),
                    digest: digest.to_string(),
                    agreed,
                }
            }),
        }
    }
}

/// The `limit` deepest boards of `results` (unit id, accepted result), deepest first,
/// lower unit id first on ties, each with its score (results without their deepest board
/// are passed over).
pub fn best_boards<'r>(
    puzzle: &Puzzle,
    results: impl IntoIterator<Item = (u64, &'r UnitResult)>,
    limit: usize,
) -> Vec<CertBoard> {
    let mut deepest: Vec<(u64, &UnitResult)> = results
        .into_iter()
        .filter(|(_, r)| r.max_depth > 0 && r.deepest.len() == r.max_depth)
        .collect();
    deepest.sort_by(|a, b| b.1.max_depth.cmp(&a.1.max_depth).then(a.0.cmp(&b.0)));
    deepest
        .into_iter()
        .take(limit)
        .map(|(unit, r)| CertBoard {
            unit,
            depth: r.max_depth,
            score: crate::verify::score(puzzle, &r.deepest),
            board: codes(&r.deepest),
        })
        .collect()
}

impl CertResult {
    /// Nodes per absolute depth, `depths` long.
    pub fn nodes_by_depth(&self, depths: usize) -> Vec<u64> {
        let mut out = vec![0; depths];
        for (i, &n) in self.nodes.iter().enumerate() {
            if let Some(slot) = out.get_mut(self.from + i) {
                *slot = n;
            }
        }
        out
    }

    /// Committed nodes.
    pub fn committed(&self) -> u64 {
        self.nodes.iter().sum()
    }

    /// The compact form of per-depth counts: the first non-zero depth and the counts from
    /// there to the last non-zero one.
    pub fn compact_nodes(nodes_by_depth: &[u64]) -> (usize, Vec<u64>) {
        let Some(first) = nodes_by_depth.iter().position(|&n| n != 0) else {
            return (0, Vec::new());
        };
        let last = nodes_by_depth
            .iter()
            .rposition(|&n| n != 0)
            .expect("non-zero");
        (first, nodes_by_depth[first..=last].to_vec())
    }
}

/// A placement's code in a certificate.
pub fn code(p: Placement) -> u32 {
    p.piece as u32 * 4 + p.rot as u32
}

/// The codes of placements (their cells are implied by the fill order).
pub fn codes(path: &[Placement]) -> Vec<u32> {
    path.iter().map(|&p| code(p)).collect()
}

/// Placements from codes at depths `first + 1, first + 2, ...` (index `first` of the plan).
pub fn placements(
    plan: &SearchPlan,
    first: usize,
    codes: &[u32],
) -> Result<Vec<Placement>, CertificateError> {
    if first + codes.len() > plan.len() {
        return Err(CertificateError::Invalid(format!(
            "a path of {} placements from depth {} is deeper than the {} free cells",
            codes.len(),
            first + 1,
            plan.len()
        )));
    }
    codes
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let piece = c / 4;
            if piece as usize >= plan.pieces {
                return Err(CertificateError::Invalid(format!(
                    "placement code {c} names piece {piece}, the puzzle has {}",
                    plan.pieces
                )));
            }
            Ok(Placement::new(
                plan.depths[first + i].pos,
                piece as usize,
                (c % 4) as u8,
            ))
        })
        .collect()
}

/// Why a certificate file cannot be read.
#[derive(Debug, Error)]
pub enum CertificateError {
    /// Not a gzip stream, or cut short.
    #[error("not a certificate file: {0}")]
    Io(std::io::Error),
    /// The body does not hash to the digest line: the file was changed.
    #[error(
        "the certificate's digest does not match its content (sha256 {actual}, the file says {stated}): the file was changed or damaged"
    )]
    Digest {
        /// SHA-256 of the body.
        actual: String,
        /// What the last line says.
        stated: String,
    },
    /// The body is not a certificate of a known format.
    #[error("the certificate does not parse: {0}")]
    Invalid(String),
    /// The file claims more than the reader agreed to read ([`Limits`]).
    #[error("{0}")]
    TooLarge(String),
}

// the message names the cause itself ("{0}"), so it is not also a `source()`: an error
// chain then says each cause once
impl From<std::io::Error> for CertificateError {
    fn from(e: std::io::Error) -> Self {
        CertificateError::Io(e)
    }
}

/// What a reader of a certificate agrees to spend on it, checked before the work: a
/// published certificate must not be a way to exhaust the people who check it (a small
/// gzip that unpacks to gigabytes, a claim of an enumeration that would run for days).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of the file.
    pub file_bytes: u64,
    /// Bytes of its body once unpacked.
    pub body_bytes: u64,
    /// Units.
    pub units: usize,
    /// Nodes of the enumeration to the split depth (re-derived by walking the tree above
    /// the split: the auditor's time).
    pub enumeration_nodes: u64,
}

impl Default for Limits {
    /// 512 MiB of file, 4 GiB unpacked, 20 million units, 2 billion enumeration nodes
    /// (under a minute on one core).
    fn default() -> Limits {
        Limits {
            file_bytes: 512 << 20,
            body_bytes: 4 << 30,
            units: 20_000_000,
            enumeration_nodes: 2_000_000_000,
        }
    }
}

impl Certificate {
    /// SHA-256 (hex) of the body: the certificate's name, to publish with its root.
    pub fn digest(&self) -> String {
        hex::encode(Sha256::digest(self.body()))
    }

    fn body(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("certificates serialise")
    }
}

/// Writes a certificate: gzip of the body and its digest line.
pub fn encode(cert: &Certificate) -> Vec<u8> {
    let body = cert.body();
    let digest = hex::encode(Sha256::digest(&body));
    seal(&body, &digest)
}

/// Gzips `body` with the digest line `digest` (tests forge files with it).
pub fn seal(body: &[u8], digest: &str) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(body).expect("in memory");
    gz.write_all(format!("\nsha256:{digest}\n").as_bytes())
        .expect("in memory");
    gz.finish().expect("in memory")
}

/// The body of a certificate file, checked against its digest line.
pub fn unseal(file: &[u8]) -> Result<Vec<u8>, CertificateError> {
    unseal_within(file, &Limits::default())
}

/// [`unseal`], reading at most `limits.body_bytes` of unpacked body (a gzip bomb is cut
/// off there).
pub fn unseal_within(file: &[u8], limits: &Limits) -> Result<Vec<u8>, CertificateError> {
    if file.len() as u64 > limits.file_bytes {
        return Err(CertificateError::TooLarge(format!(
            "the file is {} bytes; the limit is {} (raise it to read this one)",
            file.len(),
            limits.file_bytes
        )));
    }
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(file)
        .take(limits.body_bytes.saturating_add(1))
        .read_to_end(&mut text)?;
    if text.len() as u64 > limits.body_bytes {
        return Err(CertificateError::TooLarge(format!(
            "the file unpacks to more than {} bytes, the limit (raise it to read this one)",
            limits.body_bytes
        )));
    }
    let trimmed = text.strip_suffix(b"\n").unwrap_or(&text);
    let split = trimmed
        .iter()
        .rposition(|&b| b == b'\n')
        .ok_or_else(|| CertificateError::Invalid("no digest line".into()))?;
    let (body, line) = (&trimmed[..split], &trimmed[split + 1..]);
    let stated = std::str::from_utf8(line)
        .ok()
        .and_then(|l| l.strip_prefix("sha256:"))
        .ok_or_else(|| CertificateError::Invalid("the last line is not sha256:<hex>".into()))?
        .to_string();
    let actual = hex::encode(Sha256::digest(body));
    if actual != stated {
        return Err(CertificateError::Digest { actual, stated });
    }
    Ok(body.to_vec())
}

/// Reads a certificate file: checks its digest, then parses the body.
pub fn decode(file: &[u8]) -> Result<Certificate, CertificateError> {
    decode_within(file, &Limits::default())
}

/// [`decode`] within `limits` (the file, its unpacked body, its units).
pub fn decode_within(file: &[u8], limits: &Limits) -> Result<Certificate, CertificateError> {
    let body = unseal_within(file, limits)?;
    let cert: Certificate =
        serde_json::from_slice(&body).map_err(|e| CertificateError::Invalid(e.to_string()))?;
    if cert.format != FORMAT {
        return Err(CertificateError::Invalid(format!(
            "format {:?}, this program reads {FORMAT:?}",
            cert.format
        )));
    }
    if cert.units.len() > limits.units {
        return Err(CertificateError::TooLarge(format!(
            "{} units; the limit is {} (raise it to read this one)",
            cert.units.len(),
            limits.units
        )));
    }
    Ok(cert)
}

/// The Merkle leaf hash of a unit: SHA-256 of `0x00` and its compact JSON.
pub fn leaf_hash(unit: &CertUnit) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(serde_json::to_vec(unit).expect("units serialise"));
    h.finalize().into()
}

fn node_hash(left: &[u8; 32], right: &[u8; 32]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// One level up: pairs hashed, an odd last node carried up as it is.
fn level_up(level: &[[u8; 32]]) -> Vec<[u8; 32]> {
    level
        .chunks(2)
        .map(|pair| match pair {
            [l, r] => node_hash(l, r),
            [one] => *one,
            _ => unreachable!("chunks of two"),
        })
        .collect()
}

/// The Merkle root (hex) over units in their certificate order (leaves `0x00 || unit`,
/// inner nodes `0x01 || left || right`, an odd node carried up); the empty set's root
/// is the SHA-256 of nothing.
pub fn merkle_root(units: &[CertUnit]) -> String {
    let mut level: Vec<[u8; 32]> = units.iter().map(leaf_hash).collect();
    if level.is_empty() {
        return hex::encode(Sha256::digest([]));
    }
    while level.len() > 1 {
        level = level_up(&level);
    }
    hex::encode(level[0])
}

/// A Merkle inclusion proof: the sibling hashes from unit `index`'s leaf to the root,
/// each with whether it is on the left.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MerkleProof {
    /// The unit's position in the certificate.
    pub index: usize,
    /// Units in the certificate.
    pub leaves: usize,
    /// (sibling hash hex, sibling is the left one) from the leaf up; levels where the
    /// node was carried up have no entry.
    pub path: Vec<(String, bool)>,
}

/// The inclusion proof of unit `index`.
pub fn merkle_proof(units: &[CertUnit], index: usize) -> Option<MerkleProof> {
    if index >= units.len() {
        return None;
    }
    let mut level: Vec<[u8; 32]> = units.iter().map(leaf_hash).collect();
    let mut at = index;
    let mut path = Vec::new();
    while level.len() > 1 {
        let sibling = at ^ 1;
        if sibling < level.len() {
            path.push((hex::encode(level[sibling]), sibling < at));
        }
        level = level_up(&level);
        at /= 2;
    }
    Some(MerkleProof {
        index,
        leaves: units.len(),
        path,
    })
}

/// Whether `unit` with `proof` hashes to `root` (hex).
pub fn verify_proof(unit: &CertUnit, proof: &MerkleProof, root: &str) -> bool {
    let mut h = leaf_hash(unit);
    for (sibling, left) in &proof.path {
        let Some(s) = unhex32(sibling) else {
            return false;
        };
        h = if *left {
            node_hash(&s, &h)
        } else {
            node_hash(&h, &s)
        };
    }
    hex::encode(h) == root
}

fn unhex32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, slot) in out.iter_mut().enumerate() {
        *slot = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(id: u64) -> CertUnit {
        CertUnit {
            id,
            prefix: vec![id as u32, 3],
            cursor: Vec::new(),
            result: Some(CertResult {
                from: 2,
                nodes: vec![id, 1],
                max_depth: 4,
                stop: None,
                digest: "d".into(),
                agreed: 1,
            }),
        }
    }

    #[test]
    fn every_unit_proves_its_inclusion_and_no_other_does() {
        for n in 1..12 {
            let units: Vec<CertUnit> = (0..n).map(unit).collect();
            let root = merkle_root(&units);
            for i in 0..units.len() {
                let proof = merkle_proof(&units, i).expect("in range");
                assert!(verify_proof(&units[i], &proof, &root), "n {n} unit {i}");
                let mut other = units[i].clone();
                other.result.as_mut().expect("result").nodes[0] += 1;
                assert!(!verify_proof(&other, &proof, &root), "n {n} unit {i}");
            }
        }
    }

    #[test]
    fn the_root_changes_with_order_and_content() {
        let units: Vec<CertUnit> = (0..5).map(unit).collect();
        let mut swapped = units.clone();
        swapped.swap(1, 2);
        assert_ne!(merkle_root(&units), merkle_root(&swapped));
        assert_ne!(merkle_root(&units), merkle_root(&units[..4]));
    }

    #[test]
    fn a_changed_byte_fails_the_seal() {
        let body = br#"{"format":"x"}"#;
        let digest = hex::encode(Sha256::digest(body));
        let file = seal(body, &digest);
        assert_eq!(unseal(&file).expect("sealed"), body);
        let forged = seal(br#"{"format":"y"}"#, &digest);
        assert!(matches!(
            unseal(&forged),
            Err(CertificateError::Digest { .. })
        ));
    }

    #[test]
    fn compact_nodes_round_trip() {
        let nodes = vec![0, 0, 3, 0, 5, 0, 0];
        let (from, kept) = CertResult::compact_nodes(&nodes);
        assert_eq!((from, kept.clone()), (2, vec![3, 0, 5]));
        let r = CertResult {
            from,
            nodes: kept,
            max_depth: 5,
            stop: None,
            digest: String::new(),
            agreed: 1,
        };
        assert_eq!(r.nodes_by_depth(7), nodes);
        assert_eq!(CertResult::compact_nodes(&[0, 0]), (0, vec![]));
    }
}
