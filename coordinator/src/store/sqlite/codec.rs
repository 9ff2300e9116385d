//! How values are written into SQLite columns and read back.
//!
//! - A path (prefix, cursor or a budget stop) is a BLOB: per placement, the zigzag varint
//!   of its cell minus the previous placement's cell, then the varint of
//!   `piece << 2 | rot`. A fill order mostly steps one cell at a time, so a placement of a
//!   16x16 board takes ~3 bytes (a 200-deep Eternity II cursor ~600 bytes, where the text
//!   forms took ~1,800 and ~6,000). An empty path is an empty BLOB. Rows written earlier
//!   as text — a JSON array of `pos << 18 | piece << 2 | rot` codes, or of placement
//!   objects — still decode.
//! - Per-depth counts are a JSON array of integers (a result's kept counts: sparse,
//!   [`encode_sparse_counts`]).
//! - Ids are text (UUIDs) or integers (units, results); budgets are 0 for "none".

use e2fleet_engine::{Placement, Unit};
use rusqlite::types::ValueRef;

use super::conversion;
use crate::store::StoreError;

/// Encodes a path.
pub fn encode_path(path: &[Placement]) -> Vec<u8> {
    let mut out = Vec::with_capacity(path.len() * 3);
    let mut prev = 0i64;
    for p in path {
        let delta = i64::from(p.pos) - prev;
        prev = i64::from(p.pos);
        varint(&mut out, ((delta << 1) ^ (delta >> 63)) as u64);
        varint(&mut out, (u64::from(p.piece) << 2) | u64::from(p.rot & 3));
    }
    out
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn read_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

/// Decodes [`encode_path`].
pub fn decode_path_blob(bytes: &[u8], what: &str) -> Result<Vec<Placement>, StoreError> {
    let bad = || StoreError::Corrupt(format!("{what}: malformed path"));
    let mut out = Vec::with_capacity(bytes.len() / 3);
    let (mut at, mut prev) = (0usize, 0i64);
    while at < bytes.len() {
        let z = read_varint(bytes, &mut at).ok_or_else(bad)?;
        let pos = prev + ((z >> 1) as i64 ^ -((z & 1) as i64));
        let code = read_varint(bytes, &mut at).ok_or_else(bad)?;
        let piece = code >> 2;
        if !(0..=i64::from(u16::MAX)).contains(&pos) || piece > u64::from(u16::MAX) {
            return Err(bad());
        }
        prev = pos;
        out.push(Placement {
            pos: pos as u16,
            piece: piece as u16,
            rot: (code & 3) as u8,
        });
    }
    Ok(out)
}

/// Decodes a path written as text by earlier versions.
pub fn decode_path(text: &str, what: &str) -> Result<Vec<Placement>, StoreError> {
    if let Ok(codes) = serde_json::from_str::<Vec<u64>>(text) {
        return codes
            .into_iter()
            .map(|c| {
                let (pos, piece) = (c >> 18, (c >> 2) & 0xffff);
                if pos > u64::from(u16::MAX) {
                    return Err(StoreError::Corrupt(format!("{what}: placement code {c}")));
                }
                Ok(Placement {
                    pos: pos as u16,
                    piece: piece as u16,
                    rot: (c & 3) as u8,
                })
            })
            .collect();
    }
    crate::store::parse_json(text, what)
}

/// Reads a path column (a BLOB, or text from earlier versions; NULL is no path).
pub fn path_at(
    r: &rusqlite::Row<'_>,
    idx: usize,
    what: &str,
) -> rusqlite::Result<Option<Vec<Placement>>> {
    let decoded = match r.get_ref(idx)? {
        ValueRef::Null => return Ok(None),
        ValueRef::Blob(b) => decode_path_blob(b, what),
        ValueRef::Text(t) => decode_path(&String::from_utf8_lossy(t), what),
        _ => Err(StoreError::Corrupt(format!("{what}: not a path"))),
    };
    decoded
        .map(Some)
        .map_err(|e| conversion(idx, e.to_string()))
}

/// Reads a unit from its prefix and cursor columns.
pub fn unit_at(r: &rusqlite::Row<'_>, prefix: usize, cursor: usize) -> rusqlite::Result<Unit> {
    Ok(Unit {
        prefix: path_at(r, prefix, "prefix")?.unwrap_or_default(),
        cursor: path_at(r, cursor, "cursor")?.unwrap_or_default(),
    })
}

/// Encodes per-depth counts.
pub fn encode_counts(counts: &[u64]) -> String {
    serde_json::to_string(counts).expect("counts serialise")
}

/// Decodes per-depth counts.
pub fn decode_counts(text: &str, what: &str) -> Result<Vec<u64>, StoreError> {
    crate::store::parse_json(text, what)
}

/// Reads a per-depth counts column.
pub fn counts_at(r: &rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<Vec<u64>> {
    let text: String = r.get(idx)?;
    decode_counts(&text, "counts").map_err(|e| conversion(idx, e.to_string()))
}

/// Encodes per-depth counts compactly: `[first non-zero index, counts to the last
/// non-zero one]` (`[]` when all are zero).
pub fn encode_sparse_counts(counts: &[u64]) -> String {
    let Some(first) = counts.iter().position(|&n| n != 0) else {
        return "[]".into();
    };
    let last = counts.iter().rposition(|&n| n != 0).expect("non-zero");
    let mut out = Vec::with_capacity(last - first + 2);
    out.push(first as u64);
    out.extend_from_slice(&counts[first..=last]);
    serde_json::to_string(&out).expect("counts serialise")
}

/// Decodes [`encode_sparse_counts`] into `depths` counts.
pub fn decode_sparse_counts(text: &str, depths: usize) -> Result<Vec<u64>, StoreError> {
    let stored: Vec<u64> = crate::store::parse_json(text, "counts")?;
    let mut out = vec![0; depths];
    if let Some((&first, rest)) = stored.split_first() {
        let first = first as usize;
        if first + rest.len() > depths {
            return Err(StoreError::Corrupt(format!(
                "counts: {} depths from {first} in a tree of {depths}",
                rest.len()
            )));
        }
        out[first..first + rest.len()].copy_from_slice(rest);
    }
    Ok(out)
}

/// A budget as stored (0 = none).
pub fn encode_budget(budget: Option<u64>) -> i64 {
    budget.map_or(0, |b| b as i64)
}

/// A stored budget.
pub fn decode_budget(stored: i64) -> Option<u64> {
    (stored > 0).then_some(stored as u64)
}

/// A budget stop stored against the unit's own cursor: how many leading placements the
/// two share, then the rest of the stop ([`encode_path`]). A continuation's stop lies a
/// budget's walk from its cursor, deep in the same subtree: most of it is shared.
pub fn encode_stop_delta(cursor: &[Placement], stop: &[Placement]) -> Vec<u8> {
    let shared = cursor.iter().zip(stop).take_while(|(a, b)| a == b).count();
    let mut out = Vec::with_capacity(2 + 3 * (stop.len() - shared));
    varint(&mut out, shared as u64);
    out.extend(encode_path(&stop[shared..]));
    out
}

/// Decodes [`encode_stop_delta`] against the same cursor.
pub fn decode_stop_delta(
    cursor: &[Placement],
    bytes: &[u8],
    what: &str,
) -> Result<Vec<Placement>, StoreError> {
    let mut at = 0;
    let shared = read_varint(bytes, &mut at)
        .filter(|&n| n as usize <= cursor.len())
        .ok_or_else(|| StoreError::Corrupt(format!("{what}: malformed stop")))?;
    let mut stop = cursor[..shared as usize].to_vec();
    stop.extend(decode_path_blob(&bytes[at..], what)?);
    Ok(stop)
}

/// A path's 64-bit fingerprint (the first 8 bytes of the SHA-256 of [`encode_path`]):
/// what tells the archive that a continuation's cursor is its parent's stop without
/// decoding the parent's chain.
pub fn path_tag(path: &[Placement]) -> i64 {
    use sha2::Digest;
    let hash = sha2::Sha256::digest(encode_path(path));
    i64::from_le_bytes(hash[..8].try_into().expect("8 bytes"))
}

/// A SHA-256 digest as 32 bytes, from its lowercase hex text.
pub fn digest_bytes(hex: &str) -> Result<Vec<u8>, StoreError> {
    let bad = || StoreError::Corrupt(format!("digest {hex:.16}: not 64 hex digits"));
    if hex.len() != 64 {
        return Err(bad());
    }
    (0..32)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad()))
        .collect()
}

/// A digest's lowercase hex text, from [`digest_bytes`].
pub fn digest_hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_round_trip_and_old_rows_decode() {
        let path = vec![
            Placement::new(0, 0, 0),
            Placement::new(255, 1023, 3),
            Placement::new(17, 9, 1),
            Placement::new(65535, 65535, 2),
            Placement::new(0, 1, 0),
        ];
        let blob = encode_path(&path);
        assert_eq!(decode_path_blob(&blob, "p").unwrap(), path);
        assert!(encode_path(&[]).is_empty());
        assert!(decode_path_blob(&[], "p").unwrap().is_empty());
        assert!(decode_path_blob(&blob[..blob.len() - 1], "p").is_err());
        // a row-major walk of a 16x16 board: about 3 bytes a placement
        let walk: Vec<Placement> = (0..200).map(|i| Placement::new(i, 255 - i, 1)).collect();
        assert!(encode_path(&walk).len() <= 3 * walk.len());
        // text from earlier versions
        let codes = "[4194307,262148]";
        assert_eq!(
            decode_path(codes, "p").unwrap(),
            vec![Placement::new(16, 0, 3), Placement::new(1, 1, 0)]
        );
        let objects = serde_json::to_string(&path).unwrap();
        assert_eq!(decode_path(&objects, "p").unwrap(), path);
        assert!(decode_path("[1", "p").is_err());
    }

    #[test]
    fn sparse_counts_round_trip() {
        for counts in [
            vec![0, 0, 5, 0, 7, 0],
            vec![0; 4],
            vec![1, 2, 3],
            vec![0, 0, 0, 9],
        ] {
            let text = encode_sparse_counts(&counts);
            assert_eq!(
                decode_sparse_counts(&text, counts.len()).unwrap(),
                counts,
                "{text}"
            );
        }
        assert_eq!(encode_sparse_counts(&[0, 0, 5, 0, 7, 0]), "[2,5,0,7]");
        assert!(decode_sparse_counts("[3,1,1]", 4).is_err());
    }

    #[test]
    fn stops_round_trip_against_their_cursor() {
        let p = |v: &[(usize, usize)]| -> Vec<Placement> {
            v.iter()
                .map(|&(pos, piece)| Placement::new(pos, piece, 1))
                .collect()
        };
        let cursor = p(&[(0, 5), (1, 9), (2, 7), (3, 3)]);
        for stop in [
            p(&[(0, 5), (1, 9), (2, 8)]),
            p(&[(0, 5), (1, 9), (2, 7), (3, 3), (4, 1), (5, 2)]),
            p(&[(0, 6)]),
            p(&[]),
        ] {
            let blob = encode_stop_delta(&cursor, &stop);
            assert_eq!(decode_stop_delta(&cursor, &blob, "s").unwrap(), stop);
        }
        // a long shared walk costs one byte
        assert_eq!(encode_stop_delta(&cursor, &cursor).len(), 1);
        // a stop claiming more shared placements than the cursor has is refused
        assert!(
            decode_stop_delta(&cursor[..1], &encode_stop_delta(&cursor, &cursor), "s").is_err()
        );
        assert_eq!(path_tag(&cursor), path_tag(&cursor.clone()));
        assert_ne!(path_tag(&cursor), path_tag(&cursor[..3]));
    }
}
