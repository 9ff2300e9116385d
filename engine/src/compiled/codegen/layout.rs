//! How the generated program lays a candidate and a board cell out in a `u64`, and how
//! its long tables are written (byte strings, not array literals).
use std::fmt::Write;

use crate::plan::{SENTINEL, SearchPlan};

use super::MASK_PIECES;

/// How the generated program lays a candidate (and a board cell) out in its `u64`.
///
/// Every layout keeps the plan's right, down and left colours in bytes 1-3 (a key reads
/// the right colour of the candidate in hand as one `movzx` of its second byte), the
/// rotation in bits 48-49, and the piece id again in the top ten bits (the runtime reads
/// the piece there, whatever the layout: `piece_of`); bits 50-52 stay clear, so no
/// candidate equals the sentinel; bit 53 is [`LAST`] (or [`DUP`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Layout {
    /// The plan's candidate as it is (colours in bits 0-31, the piece in bits 32-47),
    /// plus the piece in the top ten bits: a list level's used-set index is one shift.
    Plan,
    /// Boards of 129-256 pieces (every 16x16 board), whose levels walk lists: the piece
    /// id in byte 0, where the plan keeps the up colour, and the up colour in byte 4
    /// (bits 32-39, where the plan keeps the low byte of the piece). A list level's
    /// used-set index is then one `movzx` of the candidate's low byte, not a copy and a
    /// shift, for every candidate it tests and every piece it frees: bench-hard 41.1 ->
    /// 37.8 instructions per node, the real E2 40.5 -> 37.3 (generic build).
    BytePiece,
}

impl Layout {
    pub(super) fn of(plan: &SearchPlan) -> Layout {
        match plan.pieces {
            p if p > MASK_PIECES && p <= 256 => Layout::BytePiece,
            _ => Layout::Plan,
        }
    }

    /// A plan candidate as the program stores it (the sentinel unchanged).
    pub(super) fn encode(self, c: u64) -> u64 {
        if c == SENTINEL {
            return c;
        }
        let piece = (crate::plan::candidate_piece(c) as u64) & 1023;
        let c = c | piece << 54;
        match self {
            Layout::Plan => c,
            Layout::BytePiece => (c & !0xFFFF_0000_00FF) | piece | (c & 0xFF) << Layout::UP_AT,
        }
    }

    /// Where the up colour goes in [`Layout::BytePiece`].
    pub(super) const UP_AT: u32 = 32;

    /// The bit at which the program finds the colour the plan keeps at `shift` (a
    /// multiple of 8 below 32) of a candidate or a board cell.
    pub(super) fn at(self, shift: u32) -> u32 {
        match self {
            Layout::BytePiece if shift < 8 => shift + Layout::UP_AT,
            _ => shift,
        }
    }

    /// A board cell's initial value (the plan's colours of a hint, the rim's 0).
    pub(super) fn board(self, v: u32) -> u64 {
        let v = u64::from(v);
        match self {
            Layout::Plan => v,
            Layout::BytePiece => (v & !0xFF) | (v & 0xFF) << Layout::UP_AT,
        }
    }

    /// The expression for the piece (the used-set index) of candidate variable `var`.
    pub(super) fn piece_expr(self, var: &str) -> String {
        match self {
            Layout::Plan => format!("({var} >> 54) as usize"),
            Layout::BytePiece => format!("({var} as u8) as usize"),
        }
    }
}

/// The flag of a bucket's last candidate (bit 53, clear in every plan candidate): a list
/// level tests it on the candidate it holds, so the walk's end is known as soon as the
/// candidate is, not one load later from the sentinel after it.
pub(super) const LAST: u64 = 1 << 53;

/// The flag of a mask level's candidate whose piece has a second candidate in the bucket
/// (`B2` slots further in `BYBIT`): [`LAST`]'s bit, which mask levels never read. After
/// the first candidate's subtree the level reads it back from the board, its piece with
/// it, so nothing of the second stays live through the subtree (reading the second's slot
/// up front and keeping it cost a spill and a reload per node: Brendan set 2 8x8 37.5 ->
/// 34.8 instructions per node, set 1 9x9 39.2 -> 37.7, x86-64-v3 build).
pub(super) const DUP: u64 = LAST;

/// Candidate `i` of the plan as a list level reads it: encoded as `layout` says, with
/// [`LAST`] when the bucket's sentinel follows it.
pub(super) fn encode_at(layout: Layout, cands: &[u64], i: usize) -> u64 {
    match (cands[i], cands.get(i + 1)) {
        (SENTINEL, _) => SENTINEL,
        (c, Some(&SENTINEL)) => layout.encode(c) | LAST,
        (c, _) => layout.encode(c),
    }
}

/// Appends `bytes` as the inside of a Rust byte-string literal: printable ASCII as is, the
/// rest escaped.
pub(super) fn push_byte_string(out: &mut String, bytes: &[u8]) {
    for &b in bytes {
        match b {
            0 => out.push_str("\\0"),
            b'"' | b'\\' => {
                out.push('\\');
                out.push(b as char);
            }
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// Every byte value survives the byte-string literal the tables are written as (read
    /// back the way rustc reads the escapes used).
    #[test]
    pub(super) fn tables_round_trip_through_byte_strings() {
        let bytes: Vec<u8> = (0..=255u8).chain([0, b'0', b'\\', b'"', 0, b'1']).collect();
        let mut text = String::new();
        super::push_byte_string(&mut text, &bytes);
        let (mut back, mut chars) = (Vec::new(), text.chars());
        while let Some(c) = chars.next() {
            assert!(c.is_ascii_graphic() || c == ' ', "{c:?} written raw");
            if c != '\\' {
                back.push(c as u8);
                continue;
            }
            match chars.next().unwrap() {
                '0' => back.push(0),
                'x' => {
                    let hex: String = chars.by_ref().take(2).collect();
                    back.push(u8::from_str_radix(&hex, 16).unwrap());
                }
                e @ ('\\' | '"') => back.push(e as u8),
                e => panic!("unexpected escape \\{e}"),
            }
        }
        assert_eq!(back, bytes);
    }

    /// Both layouts keep every field of a plan candidate where the program and the
    /// runtime look for it: the piece in the top ten bits (the runtime's `piece_of`) and,
    /// for the byte layout, the low byte; the rotation; each colour at `Layout::at` of its
    /// plan shift; and no stored candidate is the sentinel.
    #[test]
    pub(super) fn layouts_keep_every_field_where_it_is_read() {
        use super::Layout;
        use crate::plan::{SENTINEL, candidate};
        assert!(super::super::RUNTIME_SOURCE.contains("(c >> 54) as usize"));
        for layout in [Layout::Plan, Layout::BytePiece] {
            for (colours, piece, rot) in [
                ([0, 0, 0, 0], 0, 0),
                ([31, 7, 0, 22], 255, 3),
                ([255; 4], 199, 2),
            ] {
                let c = layout.encode(candidate(colours, piece, rot));
                assert_ne!(c, SENTINEL);
                assert_eq!(((c >> 54) as usize, (c >> 48) & 3), (piece, rot as u64));
                assert_eq!(c & super::LAST, 0);
                // a hint's cell on the initial board keeps its colours where a candidate does
                let board = layout.board(crate::model::pack(colours));
                for (side, &colour) in colours.iter().enumerate() {
                    let at = layout.at(8 * side as u32);
                    assert_eq!((c >> at) & 0xFF, colour as u64, "{layout:?}");
                    assert_eq!((board >> at) & 0xFF, colour as u64, "{layout:?}");
                }
                if layout == Layout::BytePiece {
                    assert_eq!(c & 0xFF, piece as u64);
                }
            }
        }
        assert_eq!(Layout::BytePiece.encode(SENTINEL), SENTINEL);
    }
}
