//! How values are written into SQLite columns and read back.
//!
//! - A path (prefix, cursor or a budget stop) is a BLOB in one of two forms, whichever is
//!   shorter for the path at hand; [`decode_path_blob`] tells them apart by the first byte.
//!   - **Varint** (short paths): per placement, the zigzag varint of its cell minus the
//!     previous placement's cell, then the varint of `piece << 2 | rot`: ~3 bytes a
//!     placement. Its first byte is always even (the first cell's delta from 0 is >= 0).
//!   - **Packed** (long paths): the odd tag byte `0x01`, the count of placements, the bit
//!     width of the largest `piece << 2 | rot` code, the cells as runs of equal steps
//!     (a fill order mostly steps one cell at a time: a row-major Eternity II path is a
//!     handful of runs), then the codes bit-packed at that width: 10 bits a placement on
//!     a 256-piece board: a 164-deep Eternity II path ~215 bytes (~490 as varints, ~1,500
//!     and ~5,000 in the text forms of earlier versions).
//!
//!   An empty path is an empty BLOB. Rows written earlier as text — a JSON array of
//!   `pos << 18 | piece << 2 | rot` codes, or of placement objects — still decode.
//! - A result's per-depth counts, sparse ([`encode_sparse_counts`]): a BLOB of varints
//!   (the first non-zero depth, then the counts to the last non-zero one). Rows written
//!   as a JSON array of integers still decode. A job's totals stay JSON text (one row a
//!   job).
//! - Ids are text (UUIDs) or integers (units, results); budgets are 0 for "none".

use super::{Row, Value};
use crate::store::StoreError;
use crate::store::tx::StoreResult;
use e2fleet_engine::{Placement, Unit};

/// Encodes a path, in the shorter of its two forms.
pub fn encode_path(path: &[Placement]) -> Vec<u8> {
    let varints = encode_path_varints(path);
    if path.len() < 4 {
        return varints;
    }
    let packed = encode_path_packed(path);
    if packed.len() < varints.len() {
        packed
    } else {
        varints
    }
}

/// The tag that opens a packed path (a varint path's first byte is always even).
const PACKED: u8 = 0x01;

/// The varint form of a path.
fn encode_path_varints(path: &[Placement]) -> Vec<u8> {
    let mut out = Vec::with_capacity(path.len() * 3);
    let mut prev = 0i64;
    for p in path {
        let delta = i64::from(p.pos) - prev;
        prev = i64::from(p.pos);
        varint(&mut out, zigzag(delta));
        varint(&mut out, placement_code(p));
    }
    out
}

fn placement_code(p: &Placement) -> u64 {
    (u64::from(p.piece) << 2) | u64::from(p.rot & 3)
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(z: u64) -> i64 {
    (z >> 1) as i64 ^ -((z & 1) as i64)
}

/// The packed form of a path: tag, count, code width, cells as runs of equal steps
/// (`step, length` pairs, the first step from cell 0), codes bit-packed low bits first.
fn encode_path_packed(path: &[Placement]) -> Vec<u8> {
    let width = path
        .iter()
        .map(|p| 64 - placement_code(p).leading_zeros())
        .max()
        .unwrap_or(0)
        .max(1);
    let mut runs: Vec<(i64, u64)> = Vec::new();
    let mut prev = 0i64;
    for p in path {
        let step = i64::from(p.pos) - prev;
        prev = i64::from(p.pos);
        match runs.last_mut() {
            Some((s, n)) if *s == step => *n += 1,
            _ => runs.push((step, 1)),
        }
    }
    let mut out =
        Vec::with_capacity(8 + 3 * runs.len() + (path.len() * width as usize).div_ceil(8));
    out.push(PACKED);
    varint(&mut out, path.len() as u64);
    varint(&mut out, u64::from(width));
    varint(&mut out, runs.len() as u64);
    for (step, n) in runs {
        varint(&mut out, zigzag(step));
        varint(&mut out, n);
    }
    let (mut acc, mut bits) = (0u128, 0u32);
    for p in path {
        acc |= u128::from(placement_code(p)) << bits;
        bits += width;
        while bits >= 8 {
            out.push(acc as u8);
            acc >>= 8;
            bits -= 8;
        }
    }
    if bits > 0 {
        out.push(acc as u8);
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

/// A placement from its cell and code, if both are in range.
fn placement(pos: i64, code: u64) -> Option<Placement> {
    let piece = code >> 2;
    if !(0..=i64::from(u16::MAX)).contains(&pos) || piece > u64::from(u16::MAX) {
        return None;
    }
    Some(Placement {
        pos: pos as u16,
        piece: piece as u16,
        rot: (code & 3) as u8,
    })
}

/// Decodes [`encode_path`] (either form).
pub fn decode_path_blob(bytes: &[u8], what: &str) -> Result<Vec<Placement>, StoreError> {
    let decoded = if bytes.first() == Some(&PACKED) {
        decode_path_packed(&bytes[1..])
    } else {
        decode_path_varints(bytes)
    };
    decoded.ok_or_else(|| StoreError::Corrupt(format!("{what}: malformed path")))
}

fn decode_path_varints(bytes: &[u8]) -> Option<Vec<Placement>> {
    let mut out = Vec::with_capacity(bytes.len() / 3);
    let (mut at, mut prev) = (0usize, 0i64);
    while at < bytes.len() {
        let pos = prev + unzigzag(read_varint(bytes, &mut at)?);
        let code = read_varint(bytes, &mut at)?;
        out.push(placement(pos, code)?);
        prev = pos;
    }
    Some(out)
}

fn decode_path_packed(bytes: &[u8]) -> Option<Vec<Placement>> {
    let mut at = 0;
    let n = read_varint(bytes, &mut at)? as usize;
    let width = read_varint(bytes, &mut at)? as u32;
    let runs = read_varint(bytes, &mut at)?;
    // every placement takes at least one bit: a count past that is a corrupt row, not
    // an allocation to make
    if !(1..=34).contains(&width) || n > 8 * bytes.len() {
        return None;
    }
    let mut cells = Vec::with_capacity(n);
    let mut prev = 0i64;
    for _ in 0..runs {
        let step = unzigzag(read_varint(bytes, &mut at)?);
        let len = read_varint(bytes, &mut at)?;
        if len as usize > n - cells.len() {
            return None;
        }
        for _ in 0..len {
            prev = prev.checked_add(step)?;
            cells.push(prev);
        }
    }
    let codes = &bytes[at..];
    if cells.len() != n || codes.len() != (n * width as usize).div_ceil(8) {
        return None;
    }
    let mask = (1u64 << width) - 1;
    let (mut acc, mut bits, mut next) = (0u128, 0u32, 0usize);
    let mut out = Vec::with_capacity(n);
    for pos in cells {
        while bits < width {
            acc |= u128::from(codes[next]) << bits;
            next += 1;
            bits += 8;
        }
        out.push(placement(pos, acc as u64 & mask)?);
        acc >>= width;
        bits -= width;
    }
    Some(out)
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
pub fn path_at(r: &Row, idx: usize, what: &str) -> StoreResult<Option<Vec<Placement>>> {
    match r.value(idx)? {
        Value::Null(_) => Ok(None),
        Value::Blob(b) => decode_path_blob(b, what).map(Some),
        Value::Text(t) => decode_path(t, what).map(Some),
        _ => Err(StoreError::Corrupt(format!("{what}: not a path"))),
    }
}

/// Reads a unit from its prefix and cursor columns.
pub fn unit_at(r: &Row, prefix: usize, cursor: usize) -> StoreResult<Unit> {
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
pub fn counts_at(r: &Row, idx: usize) -> StoreResult<Vec<u64>> {
    let text: String = r.get(idx)?;
    decode_counts(&text, "counts")
}

/// Encodes per-depth counts compactly: varints of the first non-zero depth, then of each
/// count to the last non-zero one (an empty BLOB when all are zero). A 164-deep walk of
/// the real Eternity II takes ~270 bytes (~900 as JSON); storing each count as its
/// difference from the one above it saved nothing there.
pub fn encode_sparse_counts(counts: &[u64]) -> Vec<u8> {
    let Some(first) = counts.iter().position(|&n| n != 0) else {
        return Vec::new();
    };
    let last = counts.iter().rposition(|&n| n != 0).expect("non-zero");
    let mut out = Vec::with_capacity(2 * (last - first) + 4);
    varint(&mut out, first as u64);
    for &n in &counts[first..=last] {
        varint(&mut out, n);
    }
    out
}

/// The BLOB form of sparse counts stored as JSON text by earlier versions
/// (`[first non-zero depth, counts...]`): the same numbers as varints.
pub fn encode_sparse_counts_from(sparse: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 * sparse.len());
    for &n in sparse {
        varint(&mut out, n);
    }
    out
}

/// Reads a sparse counts column into `depths` counts: [`encode_sparse_counts`]'s BLOB,
/// the JSON text of earlier versions (`[first non-zero depth, counts...]`), or NULL (all
/// zero).
pub fn decode_sparse_counts(stored: &Value, depths: usize) -> Result<Vec<u64>, StoreError> {
    let (first, rest): (usize, Vec<u64>) = match stored {
        Value::Null(_) => return Ok(vec![0; depths]),
        Value::Text(text) => {
            let stored: Vec<u64> = crate::store::parse_json(text, "counts")?;
            match stored.split_first() {
                None => (0, Vec::new()),
                Some((&first, rest)) => (first as usize, rest.to_vec()),
            }
        }
        Value::Blob(bytes) => {
            let bad = || StoreError::Corrupt("counts: malformed".into());
            let mut at = 0;
            let mut rest = Vec::new();
            let first = if bytes.is_empty() {
                0
            } else {
                read_varint(bytes, &mut at).ok_or_else(bad)? as usize
            };
            while at < bytes.len() && rest.len() <= depths {
                rest.push(read_varint(bytes, &mut at).ok_or_else(bad)?);
            }
            (first, rest)
        }
        _ => return Err(StoreError::Corrupt("counts: not counts".into())),
    };
    if first.saturating_add(rest.len()) > depths {
        return Err(StoreError::Corrupt(format!(
            "counts: {} depths from {first} in a tree of {depths}",
            rest.len()
        )));
    }
    let mut out = vec![0; depths];
    out[first..first + rest.len()].copy_from_slice(&rest);
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

/// A path's 64-bit fingerprint (the first 8 bytes of the SHA-256 of its varint form,
/// whatever form it is stored in, so fingerprints stored by earlier versions still
/// match): what tells the archive that a continuation's cursor is its parent's stop
/// without decoding the parent's chain.
pub fn path_tag(path: &[Placement]) -> i64 {
    use sha2::Digest;
    let hash = sha2::Sha256::digest(encode_path_varints(path));
    i64::from_le_bytes(hash[..8].try_into().expect("8 bytes"))
}

/// A SHA-256 digest as 32 bytes, from its lowercase hex text.
pub fn digest_bytes(hex: &str) -> Result<Vec<u8>, StoreError> {
    let bad = || StoreError::Corrupt(format!("digest {hex:.16}: not 64 hex digits"));
    if hex.len() != 64 {
        return Err(bad());
    }
    hex::decode(hex).map_err(|_| bad())
}

/// A digest's lowercase hex text, from [`digest_bytes`].
pub fn digest_hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
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

    /// A row-major walk of a 16x16 board from `from`, skipping `hints`, with pieces drawn
    /// from a fixed generator.
    fn e2_walk(from: usize, len: usize, hints: &[usize]) -> Vec<Placement> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        (from..256)
            .filter(|pos| !hints.contains(pos))
            .take(len)
            .map(|pos| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                Placement::new(pos, (x % 256) as usize, (x >> 8) as u8 & 3)
            })
            .collect()
    }

    #[test]
    fn long_paths_are_packed_and_short_ones_stay_varints() {
        // the real Eternity II's clue cells, as a row-major walk skips them
        let hints = [34, 45, 135, 210, 221];
        let deep = e2_walk(0, 200, &hints);
        let packed = encode_path(&deep);
        assert_eq!(packed[0], PACKED);
        assert!(packed.len() <= 10 * 200 / 8 + 24, "{} bytes", packed.len());
        assert!(packed.len() < encode_path_varints(&deep).len() * 2 / 3);
        assert_eq!(decode_path_blob(&packed, "p").unwrap(), deep);
        // any cut of a packed path is refused, never misread
        for cut in 0..packed.len() {
            assert!(
                decode_path_blob(&packed[..cut], "p").map_or(true, |p| p.is_empty() && cut == 0)
            );
        }
        let mut longer = packed.clone();
        longer.push(0);
        assert!(decode_path_blob(&longer, "p").is_err());
        // a count no row could hold is refused before anything is allocated
        assert!(decode_path_blob(&[PACKED, 0xff, 0xff, 0xff, 0x7f, 10, 0], "p").is_err());
        // short paths and irregular ones keep whichever form is shorter, and round-trip
        for path in [
            e2_walk(0, 1, &hints),
            e2_walk(17, 3, &hints),
            e2_walk(100, 40, &hints),
            vec![
                Placement::new(255, 65535, 3),
                Placement::new(0, 0, 0),
                Placement::new(300, 7, 2),
                Placement::new(299, 8, 1),
            ],
        ] {
            let blob = encode_path(&path);
            assert!(blob.len() <= encode_path_varints(&path).len());
            assert_eq!(decode_path_blob(&blob, "p").unwrap(), path);
        }
        // the fingerprint is the varint form's, however the path is stored
        use sha2::Digest;
        let hash = sha2::Sha256::digest(encode_path_varints(&deep));
        assert_eq!(
            path_tag(&deep),
            i64::from_le_bytes(hash[..8].try_into().unwrap())
        );
    }

    #[test]
    fn sparse_counts_round_trip() {
        for counts in [
            vec![0, 0, 5, 0, 7, 0],
            vec![0; 4],
            vec![1, 2, 3],
            vec![0, 0, 0, 9],
            vec![0, 1, 300_000_000_000, 2, u64::from(u32::MAX)],
        ] {
            let blob = encode_sparse_counts(&counts);
            assert_eq!(
                decode_sparse_counts(&Value::Blob(blob.clone()), counts.len()).unwrap(),
                counts,
                "{blob:?}"
            );
        }
        assert_eq!(encode_sparse_counts(&[0, 0, 5, 0, 7, 0]), [2, 5, 0, 7]);
        assert!(encode_sparse_counts(&[0; 3]).is_empty());
        assert!(decode_sparse_counts(&Value::Blob(vec![3, 2, 0]), 4).is_err());
        // a cut varint and more depths than the tree has: refused
        assert!(decode_sparse_counts(&Value::Blob(vec![0, 0x80]), 4).is_err());
        assert!(decode_sparse_counts(&Value::Blob(vec![0; 40]), 4).is_err());
        // the JSON text of earlier versions, and NULL
        assert_eq!(
            decode_sparse_counts(&Value::Text("[2,5,0,7]".into()), 6).unwrap(),
            [0, 0, 5, 0, 7, 0]
        );
        assert_eq!(
            decode_sparse_counts(&Value::Text("[]".into()), 2).unwrap(),
            [0, 0]
        );
        assert!(decode_sparse_counts(&Value::Text("[3,1,1]".into()), 4).is_err());
        assert_eq!(
            decode_sparse_counts(&Value::Null(crate::store::sql::Kind::Blob), 2).unwrap(),
            [0, 0]
        );
    }

    /// What an archived budget run of the real Eternity II stores for its counts and its
    /// stop: two 20 M-node runs down one chain (the second a continuation of the first),
    /// walked for real. Deep counts and a deep stop are what made a real-E2 row ~1.4 KB.
    #[test]
    fn a_real_eternity_ii_run_archives_in_a_few_hundred_bytes() {
        use e2fleet_engine::formats::{LoadOptions, load_file};
        use e2fleet_engine::plan::SearchPlan;
        use e2fleet_engine::search::{NoControl, RunOptions, Walker};
        use e2fleet_engine::{FillOrder, Unit};
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../puzzles/e2/official.json");
        let puzzle = load_file(&path, &LoadOptions::default()).unwrap();
        let plan = SearchPlan::new(&puzzle, &FillOrder::row_major(&puzzle));
        let options = RunOptions {
            budget: Some(20_000_000),
            max_solutions: 0,
        };
        let first = Walker::new(&plan)
            .run(&Unit::root(), options, &mut NoControl)
            .unwrap();
        let cursor = first.cursor.clone().unwrap();
        let unit = Unit {
            prefix: Vec::new(),
            cursor: cursor.clone(),
        };
        let second = Walker::new(&plan)
            .run(&unit, options, &mut NoControl)
            .unwrap();
        let stop = second.cursor.clone().unwrap();
        assert!(stop.len() > 100, "a deep walk: {} placements", stop.len());
        let counts = encode_sparse_counts(&second.nodes_by_depth);
        let delta = encode_stop_delta(&cursor, &stop);
        let json = serde_json::to_string(&second.nodes_by_depth).unwrap();
        // as they were stored before: JSON counts, a varint stop delta
        let shared = cursor.iter().zip(&stop).take_while(|(a, b)| a == b).count();
        let old_delta = encode_path_varints(&stop[shared..]).len() + 1;
        eprintln!(
            "counts {} bytes (JSON {}), stop {} placements: {} bytes against its cursor ({} as varints)",
            counts.len(),
            json.len(),
            stop.len(),
            delta.len(),
            old_delta
        );
        assert!(counts.len() * 2 < json.len());
        assert!(delta.len() * 4 < old_delta * 3);
        assert_eq!(
            decode_sparse_counts(&Value::Blob(counts.clone()), plan.len()).unwrap(),
            second.nodes_by_depth
        );
        assert_eq!(decode_stop_delta(&cursor, &delta, "s").unwrap(), stop);
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
