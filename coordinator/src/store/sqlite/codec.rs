//! How values are written into SQLite columns and read back.
//!
//! - A path (prefix or cursor) is a JSON array with one integer per placement,
//!   `pos << 18 | piece << 2 | rot`: about 9 bytes per placement instead of ~30 for
//!   `{"pos":..,"piece":..,"rot":..}`, which matters for jobs of millions of deep
//!   prefixes. An empty path is `[]`. Rows written in the object form still decode.
//! - Per-depth counts are a JSON array of integers.
//! - Ids are text (UUIDs) or integers (units, results); budgets are 0 for "none".

use e2fleet_engine::{Placement, Unit};

use super::conversion;
use crate::store::StoreError;

/// Encodes a path.
pub fn encode_path(path: &[Placement]) -> String {
    let mut out = String::with_capacity(2 + path.len() * 10);
    out.push('[');
    for (i, p) in path.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let code = (u64::from(p.pos) << 18) | (u64::from(p.piece) << 2) | u64::from(p.rot & 3);
        out.push_str(&code.to_string());
    }
    out.push(']');
    out
}

/// Decodes [`encode_path`] (or the older JSON object form).
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

/// Reads a unit from its prefix and cursor columns.
pub fn unit_at(r: &rusqlite::Row<'_>, prefix: usize, cursor: usize) -> rusqlite::Result<Unit> {
    let decode = |idx: usize, what: &str| -> rusqlite::Result<Vec<Placement>> {
        let text: String = r.get(idx)?;
        decode_path(&text, what).map_err(|e| conversion(idx, e.to_string()))
    };
    Ok(Unit {
        prefix: decode(prefix, "prefix")?,
        cursor: decode(cursor, "cursor")?,
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

/// A budget as stored (0 = none).
pub fn encode_budget(budget: Option<u64>) -> i64 {
    budget.map_or(0, |b| b as i64)
}

/// A stored budget.
pub fn decode_budget(stored: i64) -> Option<u64> {
    (stored > 0).then_some(stored as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_round_trip_and_old_rows_decode() {
        let path = vec![
            Placement::new(0, 0, 0),
            Placement::new(255, 1023, 3),
            Placement::new(65535, 65535, 2),
        ];
        let text = encode_path(&path);
        assert_eq!(decode_path(&text, "p").unwrap(), path);
        assert_eq!(encode_path(&[]), "[]");
        assert!(decode_path("[]", "p").unwrap().is_empty());
        let old = serde_json::to_string(&path).unwrap();
        assert_eq!(decode_path(&old, "p").unwrap(), path);
        assert!(text.len() * 2 < old.len(), "{text} vs {old}");
        assert!(decode_path("[1", "p").is_err());
    }
}
