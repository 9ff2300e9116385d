//! The tables every program carries, and which walk each bucket table takes.
//!
//! Statics of the generated program written here: `CANDS` (the candidates, bucket after
//! bucket, each bucket ending in `SENTINEL`, its last candidate flagged `LAST`), `OFFS`
//! (a bucket's start in `CANDS`, indexed by table offset plus the two key colours, with
//! a power-of-two stride), `FIRST` (a bucket's first candidate, indexed like `OFFS`),
//! `FIRST{k}`/`CANDS{k}` (pruned level `k`'s copies, filled by the runtime), `INIT_BOARD`,
//! `INIT_USED`, `DPOS` (a depth's cell), `DKEY` (a depth's table offset and key reads),
//! `DEXTRA` (its extra-side reads) and `HINTS`.
use std::fmt::Write;

use crate::plan::SENTINEL;

use super::layout::{LAST, encode_at, push_byte_string};
use super::{Gen, MASK_PIECES};

/// How the depths of one bucket table walk a bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BucketWalk {
    /// Every candidate in order, each piece's used byte tested (any board).
    List,
    /// The free pieces only, as the set bits of the bucket's piece mask less the used
    /// pieces' mask (boards of at most 128 pieces); `dups` when some piece has a second
    /// candidate in a bucket of the table (it is tried right after the first). `window`:
    /// on a two-word board, the first piece of a table whose pieces all lie within 64 ids
    /// of it (its buckets then walk one word: the used mask shifted by a constant; files
    /// list corners, edges and inner pieces apart, so each table's pieces are one run).
    Mask { dups: bool, window: Option<usize> },
}

impl Gen<'_> {
    pub(super) fn tables(&mut self) {
        let (p, layout) = (self.plan, self.layout);
        self.words(
            "CANDS",
            "u64",
            (0..p.candidates.len()).map(|i| encode_at(layout, &p.candidates, i)),
        );
        let offs = self.offsets();
        self.words("OFFS", "u32", offs.iter().map(|&o| u64::from(o)));
        // each bucket's first candidate beside its offset: a list level reads it straight
        // from the key, one dependent load fewer on the way into every cell (SENTINEL:
        // empty)
        w!(self, "const LAST: u64 = {LAST:#x};");
        self.words(
            "FIRST",
            "u64",
            offs.iter()
                .map(|&o| encode_at(layout, &p.candidates, o as usize)),
        );
        // the pruned levels' copies: zeroed statics (pages never touched cost nothing),
        // filled by the runtime when the level is first brought up to date
        let levels = self.pruned_levels();
        for &k in &levels {
            w!(
                self,
                "static mut FIRST{k}: [u64; {}] = [0; {}];",
                offs.len(),
                offs.len()
            );
            w!(
                self,
                "static mut CANDS{k}: [u64; {}] = [0; {}];",
                p.candidates.len(),
                p.candidates.len()
            );
        }
        let arms: String = levels
            .iter()
            .map(|k| format!("{k} => ((&raw mut FIRST{k}).cast(), (&raw mut CANDS{k}).cast()), "))
            .collect();
        w!(
            self,
            "fn prune_tables(k: usize) -> (*mut u64, *mut u64) {{ match k {{ {arms}_ => (core::ptr::null_mut(), core::ptr::null_mut()) }} }}"
        );
        w!(self, "const _: () = assert!(LAST == e2fleet_rt::LAST);");
        if self.mask_words() > 0 {
            self.mask_tables(&offs);
        }
        let mut init = p.initial_board.clone();
        init.truncate(p.cells + 1);
        self.words("INIT_BOARD", "u64", init.iter().map(|&v| layout.board(v)));
        self.array(
            "INIT_USED",
            "u8",
            p.initial_used.iter().map(|v| v.to_string()),
        );
        self.words("DPOS", "u16", p.depths.iter().map(|d| d.pos as u64));
        let dkey: Vec<String> = p
            .depths
            .iter()
            .map(|d| {
                format!(
                    "[{}, {}, {}, {}, {}, {}]",
                    self.table_offset(d.table),
                    d.key[0].cell,
                    self.layout.at(d.key[0].shift),
                    d.key[1].cell,
                    self.layout.at(d.key[1].shift),
                    d.extra_mask
                )
            })
            .collect();
        self.array("DKEY", "[u32; 6]", dkey.into_iter());
        // extra reads: up to two per depth, (cell, shift, where the side's colour sits in
        // the candidate); dummy cell when unused
        let layout = self.layout;
        self.array(
            "DEXTRA",
            "[[u32; 3]; 2]",
            p.depths.iter().map(|d| {
                let mut e = [[p.cells as u32, 0, 0]; 2];
                for (k, &(read, side)) in d.extra.iter().take(2).enumerate() {
                    e[k] = [
                        read.cell as u32,
                        layout.at(read.shift),
                        layout.at(8 * side as u32),
                    ];
                }
                format!(
                    "[[{}, {}, {}], [{}, {}, {}]]",
                    e[0][0], e[0][1], e[0][2], e[1][0], e[1][1], e[1][2]
                )
            }),
        );
        self.array(
            "HINTS",
            "(u16, u16, u8)",
            p.hints
                .iter()
                .map(|h| format!("({}, {}, {})", h.pos, h.piece, h.rot)),
        );
    }

    /// log2 of the bucket table stride: colours rounded up to a power of two, so a key is a
    /// shift and an add.
    pub(super) fn stride_log2(&self) -> u32 {
        self.plan.colours.next_power_of_two().trailing_zeros()
    }

    /// Where table `t` (of the plan) starts in the emitted `OFFS`.
    pub(super) fn table_offset(&self, plan_table: usize) -> usize {
        let c = self.plan.colours;
        (plan_table / (c * c)) << (2 * self.stride_log2())
    }

    /// How many entries [`Gen::offsets`] has.
    pub(super) fn offsets_len(&self) -> usize {
        let log = self.stride_log2();
        (self.plan.tables << (2 * log)) + 255 * (1usize << log) + 256
    }

    /// The plan's bucket offsets re-laid with the power-of-two stride, padded so that any
    /// two key bytes (0..=255) index inside the array: the compiler then drops the bounds
    /// check of every lookup.
    pub(super) fn offsets(&self) -> Vec<u32> {
        let (p, log) = (self.plan, self.stride_log2());
        let c = p.colours;
        let mut offs = vec![0u32; self.offsets_len()];
        for t in 0..p.tables {
            for a in 0..c {
                for b in 0..c {
                    offs[(t << (2 * log)) + (a << log) + b] = p.offsets[t * c * c + a * c + b];
                }
            }
        }
        offs
    }

    /// Words of the used-piece mask the generated code reads: 1 (a `u64`, at most 64
    /// pieces) or 2 (a `u128`, at most 128: the runtime's `MASK_PIECES`); 0 when the
    /// board is larger, every depth walks its list and the used bytes are the record.
    pub(super) fn mask_words(&self) -> usize {
        match self.plan.pieces {
            0..=64 => 1,
            65..=MASK_PIECES => 2,
            _ => 0,
        }
    }

    /// The bucket starting at `offset` of the plan's candidates, grouped by piece (in
    /// canonical order: ascending piece, its rotations in order).
    pub(super) fn bucket_pieces(&self, offset: usize) -> Vec<Vec<u64>> {
        let mut out: Vec<Vec<u64>> = Vec::new();
        for &c in self.plan.candidates[offset..]
            .iter()
            .take_while(|&&c| c != SENTINEL)
        {
            let piece = crate::plan::candidate_piece(c);
            match out.last_mut() {
                Some(group) if crate::plan::candidate_piece(group[0]) == piece => group.push(c),
                _ => out.push(vec![c]),
            }
        }
        out
    }

    /// How each table's depths walk their buckets: by mask on boards of at most 128
    /// pieces, unless a bucket holds more than two candidates of one piece.
    pub(super) fn choose_walks(&self) -> std::collections::HashMap<usize, BucketWalk> {
        let p = self.plan;
        let c = p.colours;
        let mut walks = std::collections::HashMap::new();
        for t in 0..p.tables {
            let table = t * c * c;
            let walk = if self.mask_words() == 0 {
                BucketWalk::List
            } else {
                let groups: Vec<Vec<u64>> = (0..c * c)
                    .flat_map(|k| self.bucket_pieces(p.offsets[table + k] as usize))
                    .collect();
                let most = groups.iter().map(|g| g.len()).max().unwrap_or(1);
                let (low, high) = self.table_range(t).unwrap_or((0, 0));
                let window = (self.mask_words() == 2 && high - low < 64).then_some(low);
                match most {
                    0 | 1 => BucketWalk::Mask {
                        dups: false,
                        window,
                    },
                    2 => BucketWalk::Mask { dups: true, window },
                    _ => BucketWalk::List,
                }
            };
            walks.insert(table, walk);
        }
        walks
    }

    /// The pieces of plan table `t`'s buckets: (lowest, highest), or `None` if it has none.
    pub(super) fn table_range(&self, t: usize) -> Option<(usize, usize)> {
        let c = self.plan.colours;
        let pieces: Vec<usize> = (0..c * c)
            .flat_map(|k| self.bucket_pieces(self.plan.offsets[t * c * c + k] as usize))
            .map(|g| crate::plan::candidate_piece(g[0]))
            .collect();
        Some((*pieces.iter().min()?, *pieces.iter().max()?))
    }

    /// An array of integers of `width` bytes (1, 2, 4 or 8; `ty` names the type). Long
    /// ones are written as one byte string transmuted in place: rustc parses, type-checks
    /// and borrow-checks an array literal of ~10^5 integers for most of a second (the
    /// 16x16 list walk compiled in 1.3 s with its tables as literals, 0.7 s as bytes), a
    /// byte string in no time. The bytes are in the worker's byte order and the program
    /// refuses to build for any other.
    pub(super) fn words(&mut self, name: &str, ty: &str, values: impl Iterator<Item = u64>) {
        let width = match ty {
            "u8" => 1,
            "u16" => 2,
            "u32" => 4,
            "u64" => 8,
            _ => unreachable!("{ty} is not a word type"),
        };
        let values: Vec<u64> = values.collect();
        if values.len() < 256 {
            self.array(name, ty, values.iter().map(|v| format!("{v:#x}")));
            return;
        }
        if !self.endian_checked {
            self.endian_checked = true;
            let endian = if cfg!(target_endian = "big") {
                "big"
            } else {
                "little"
            };
            w!(
                self,
                "const _: () = assert!(cfg!(target_endian = \"{endian}\"), \"tables written for a {endian}-endian target\");"
            );
        }
        let n = values.len();
        let _ = write!(
            self.out,
            "static {name}: [{ty}; {n}] = unsafe {{ core::mem::transmute::<[u8; {}], [{ty}; {n}]>(*b\"",
            n * width
        );
        for v in values {
            assert!(
                width == 8 || v >> (8 * width) == 0,
                "{name}: {v} is wider than {ty}"
            );
            let (be, le) = (v.to_be_bytes(), v.to_le_bytes());
            let bytes = if cfg!(target_endian = "big") {
                &be[8 - width..]
            } else {
                &le[..width]
            };
            push_byte_string(&mut self.out, bytes);
        }
        self.out.push_str("\") };\n");
    }

    pub(super) fn array(&mut self, name: &str, ty: &str, items: impl Iterator<Item = String>) {
        let items: Vec<String> = items.collect();
        let _ = write!(self.out, "static {name}: [{ty}; {}] = [", items.len());
        for (i, item) in items.iter().enumerate() {
            if i % 16 == 0 {
                self.out.push('\n');
            }
            self.out.push_str(item);
            self.out.push(',');
        }
        self.out.push_str("\n];\n");
    }
}
