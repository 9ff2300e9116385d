//! A mask level: on boards of at most 128 pieces, only the free pieces of a bucket, as
//! the set bits of the bucket's piece mask less the used-piece mask, lowest bit first
//! (canonical order). No branch per used piece; the loop ends when the bits run out.
//!
//! Names in the generated code, beside those of the group functions (`groups.rs`):
//!
//! | name | what it holds |
//! |---|---|
//! | `MASK`, `MASKW` | per key, the bucket's piece mask (a word per mask word), and on two-word boards the mask seen from its table's first piece |
//! | `BYBIT` | the buckets' blocks: slot `p` of a block holds piece `p`'s candidate in the bucket; the second candidates follow `B2` slots on |
//! | `BLOCK` | per key, a pointer to its bucket's block |
//! | `r{d}` | depth `d`'s block |
//! | `f{d}` | the free bits of its bucket not tried yet |
//! | `b{d}` | a bit of a windowed level (piece `low + b{d}`) |
//! | `w{d}`, `uw{d}` | on two-word boards without a window, the word being walked and the used words |
//! | `h{d}` | the candidate just tried, read back from the board (a piece with two candidates) |
//! | `o{d}`, `s{d}`, `e{d}`, `yo{d}` | the slot lookup's block offset, slot, `NEXT` entry and row ([`super::Chain`]) |
use std::fmt::Write;

use crate::plan::SENTINEL;

use super::Gen;
use super::layout::DUP;
use super::tables::BucketWalk;

impl Gen<'_> {
    /// On a two-word board, lays the used mask out so that every table's pieces fall in
    /// one word: word 0 the pieces below the split, word 1 the 64 from it. Files list
    /// corners, edges and inner pieces apart, so the split is where the inner pieces
    /// start: Brendan's 9x9 (32 rim, 49 inner) and 10x10 (36, 64) fit, where the plain
    /// layout puts the inner pieces across both words. Each level then reads and marks
    /// one word (`u128` halves, never a shift across the two), and its table's window is
    /// its first piece, or the split itself for the second word. Nothing changes unless
    /// every table walks by mask and a split fits.
    pub(super) fn split_mask(&mut self) {
        if self.mask_words() != 2 {
            return;
        }
        let c = self.plan.colours;
        let mut ranges = Vec::new();
        for t in 0..self.plan.tables {
            if !matches!(self.walks.get(&(t * c * c)), Some(BucketWalk::Mask { .. })) {
                return;
            }
            ranges.extend(self.table_range(t).map(|r| (t, r)));
        }
        let pieces = self.plan.pieces;
        let fits = |s: usize| {
            s <= 64
                && pieces <= s + 64
                && ranges
                    .iter()
                    .all(|&(_, (lo, hi))| hi < s || (lo >= s && hi < s + 64))
        };
        if fits(64) {
            return;
        }
        let Some(split) = ranges
            .iter()
            .map(|&(_, (lo, _))| lo)
            .filter(|&s| fits(s))
            .min()
        else {
            return;
        };
        self.split = split;
        for (t, (lo, _)) in ranges {
            if let Some(BucketWalk::Mask { window, .. }) = self.walks.get_mut(&(t * c * c)) {
                *window = Some(if lo < split { lo } else { split });
            }
        }
    }

    /// The bit of the used mask (as the generated code holds it: a `u128` of the runtime's
    /// two words) that is piece `p`'s.
    pub(super) fn mask_bit(&self, p: usize) -> usize {
        if p < self.split {
            p
        } else {
            p - self.split + 64
        }
    }

    /// The tables of the mask walk, indexed like `OFFS`: `MASK` (the pieces with a
    /// candidate in the bucket, a `u64` a word of the used mask), `BYBIT` (a block per
    /// distinct bucket, whose slot `p` holds piece `p`'s first candidate there; blocks
    /// overlap, packed so that no two buckets' candidates share a slot, and a slot no
    /// bucket's piece has holds the sentinel; when some table has pieces with two
    /// candidates in a bucket, the second ones follow, `B2` slots further) and `BLOCK` (a
    /// pointer to the bucket's block). A set bit of the free mask is then its candidate's
    /// slot: from the mask to the candidate is one load addressed by the block and the
    /// bit, with no rank to count and no add (an index into one array costs an add before
    /// the load).
    pub(super) fn mask_tables(&mut self, offs: &[u32]) {
        let words = self.mask_words();
        let mut base_of: std::collections::HashMap<u32, usize> = Default::default();
        let (mut bybit, mut bybit2) = (Vec::new(), Vec::new());
        // the slots a block holds a candidate in: blocks are packed first fit, each at the
        // lowest start where its pieces' slots are all free (a bucket holds few of the
        // board's pieces, so blocks interleave and the `NEXT` rows, one entry a slot,
        // stay dense)
        let mut taken: Vec<bool> = Vec::new();
        let mut masks = Vec::with_capacity(offs.len());
        let mut bases = Vec::with_capacity(offs.len());
        let mut windows = Vec::with_capacity(offs.len());
        let (mut views, mut base_nums) = (Vec::with_capacity(offs.len()), Vec::new());
        let c = self.plan.colours;
        let mut k_of = 0..offs.len();
        for &o in offs {
            let groups = self.bucket_pieces(o as usize);
            let mut whole = 0u128;
            for g in &groups {
                whole |= 1 << self.mask_bit(crate::plan::candidate_piece(g[0]));
            }
            let mask = [whole as u64, (whole >> 64) as u64];
            let mask = &mask[..words];
            let base = *base_of.entry(o).or_insert_with(|| {
                let pieces: Vec<usize> = groups
                    .iter()
                    .map(|g| crate::plan::candidate_piece(g[0]))
                    .collect();
                let free = |base: usize| {
                    pieces
                        .iter()
                        .all(|&p| !taken.get(base + p).copied().unwrap_or(false))
                };
                let base = (0..)
                    .find(|&b| free(b))
                    .expect("an end past every taken slot is free");
                let end = base + pieces.iter().max().map_or(0, |&p| p + 1);
                if bybit.len() < end {
                    bybit.resize(end, SENTINEL);
                    bybit2.resize(end, SENTINEL);
                    taken.resize(end, false);
                }
                for &p in &pieces {
                    taken[base + p] = true;
                }
                for g in &groups {
                    let piece = crate::plan::candidate_piece(g[0]);
                    bybit[base + piece] =
                        self.layout.encode(g[0]) | if g.len() > 1 { DUP } else { 0 };
                    bybit2[base + piece] = g.get(1).map_or(SENTINEL, |&c| self.layout.encode(c));
                }
                base
            });
            bases.push(base.to_string());
            base_nums.push(base);
            // the table's window: its mask seen from its first piece
            let table = k_of.next().map(|k| k >> (2 * self.stride_log2()));
            let low = table
                .filter(|&t| t < self.plan.tables)
                .and_then(|t| match self.walks.get(&(t * c * c)) {
                    Some(BucketWalk::Mask { window, .. }) => *window,
                    _ => None,
                })
                .unwrap_or(0);
            let window = (whole >> self.mask_bit(low)) as u64;
            windows.push(format!("{window:#x}"));
            views.push(if words == 1 { whole as u64 } else { window });
            let mask: Vec<String> = mask.iter().map(|m| format!("{m:#x}")).collect();
            if words == 1 {
                masks.push(mask[0].clone());
            } else {
                masks.push(format!("[{}]", mask.join(", ")));
            }
        }
        let mask_ty = match words {
            1 => "u64".to_string(),
            w => format!("[u64; {w}]"),
        };
        self.array("MASK", &mask_ty, masks.into_iter());
        if words == 2 {
            self.array("MASKW", "u64", windows.into_iter());
        }
        let dups = self
            .walks
            .values()
            .any(|w| matches!(w, BucketWalk::Mask { dups: true, .. }));
        w!(self, "const B2: usize = {};", bybit.len());
        self.next_tables(offs, &views, &base_nums, &bybit, &bybit2);
        if dups {
            bybit.extend(bybit2);
        }
        self.words("BYBIT", "u64", bybit.iter().copied());
        w!(self, "struct Block(*const u64);");
        w!(self, "// its pointers only ever read immutable statics");
        w!(self, "unsafe impl Sync for Block {{}}");
        self.array(
            "BLOCK",
            "Block",
            bases
                .iter()
                .map(|b| format!("Block(unsafe {{ BYBIT.as_ptr().add({b}) }})")),
        );
    }

    /// A level that walks the free pieces of its bucket as mask bits, lowest piece first
    /// (canonical order): `MASK & free mask` (the held complement of the used one), then
    /// each set bit's candidate from its slot in the bucket's block (`BYBIT`). No branch
    /// per used piece; the loop ends when the bits run out. With `dups`, a piece's second
    /// candidate in the bucket follows its first ([`DUP`]).
    pub(super) fn mask_level(
        &self,
        d: usize,
        key: &str,
        onward: &str,
        dups: bool,
        window: Option<usize>,
        next_y: Option<&str>,
    ) -> String {
        let words = self.mask_words();
        // the slot of the candidate in hand, when the next depth looks its bucket up by it
        let next = self.chains.get(d + 1).copied().flatten();
        // the candidate's index in `BYBIT` ([`Gen::next_tables`])
        let at = format!("o{d} + p{d}");
        let (slot, second_slot) = match next {
            Some(ch) => (
                format!("let mut s{d}: usize = {at};\n"),
                format!(" s{d} = {at} + {};", self.next[ch.shape].span),
            ),
            None => (String::new(), String::new()),
        };
        let extra = self.extra_check(d, &format!("c{d}"));
        let commit = self.commit(d);
        let release = self.mark(d, false);
        // every read is a bucket's block plus a piece id of the block (less than
        // `64 * words`), or `B2` further for a second candidate: inside `BYBIT`
        let attempt = format!(
            "if true{extra} {{\n\
             {commit}\
             {onward}\n\
             {release}\n\
             }}\n"
        );
        let body = if dups {
            // the candidate tried is on the board after its subtree, its piece in it,
            // unless the extra check refused it: then the one in hand
            let tried = match extra.is_empty() {
                true => format!("st.cells[{}][0]", self.plan.depths[d].pos),
                false => format!("c{d}"),
            };
            format!(
                "{slot}let mut c{d}: u64 = unsafe {{ *r{d}.add(p{d}) }};\n\
                 loop {{\n\
                 {attempt}\
                 let h{d}: u64 = {tried};\n\
                 if h{d} & {DUP:#x} == 0 {{ break; }}\n\
                 c{d} = unsafe {{ *r{d}.add((h{d} >> 32) as u16 as usize + B2) }};{second_slot}\n\
                 }}\n"
            )
        } else {
            format!("{slot}let c{d}: u64 = unsafe {{ *r{d}.add(p{d}) }};\n{attempt}")
        };
        // the bucket: from the slot in hand ([`Chain`]) or from the key
        let entry = |table: &str, free: &str| -> String {
            let mut e = match self.chains.get(d).copied().flatten() {
                Some(ch) => {
                    let sh = &self.next[ch.shape];
                    let at = format!(
                        "NEXT{}.as_ptr().add(yo{u} + (s{u} - {lo}))",
                        ch.shape,
                        u = d - 1,
                        lo = sh.lo
                    );
                    let at_bit = sh.packed_at;
                    let offset = ((1u64 << sh.offset_bits) - 1) << at_bit;
                    format!(
                        "let e{d}: u64 = unsafe {{ *{at} }};\n\
                         let o{d}: usize = ((e{d} & {offset:#x}) >> {at_bit}) as usize;\n\
                         let r{d}: *const u64 = unsafe {{ BYBIT.as_ptr().add(o{d}) }};\n\
                         let mut f{d}: u64 = e{d} & ({free} & {:#x});\n",
                        !offset
                    )
                }
                None => {
                    let mut e = format!(
                        "let k{d}: usize = {key};\n\
                         let r{d}: *const u64 = BLOCK[k{d}].0;\n\
                         let mut f{d}: u64 = {table}[k{d}] & {free};\n"
                    );
                    if next.is_some() {
                        let _ = writeln!(
                            e,
                            "let o{d}: usize = unsafe {{ r{d}.offset_from(BYBIT.as_ptr()) }} as usize;"
                        );
                    }
                    e
                }
            };
            if let (Some(ch), Some(y)) = (next, next_y) {
                let sh = &self.next[ch.shape];
                let row = sh.span * (1 + usize::from(sh.seconds));
                let _ = writeln!(e, "let yo{d}: usize = (({y}) - {}) * {row};", sh.ys.start);
            }
            e
        };
        let held = self.held_before(d);
        if let Some(low) = window {
            // the held free mask seen from piece `low`: bit j is piece `low + j` (on a
            // split mask, one word of it)
            let seen = match (self.split < 64, low < self.split) {
                (true, true) => format!("(({held} as u64) >> {low})"),
                (true, false) => format!("(({held} >> 64) as u64)"),
                _ => format!("(({held} >> {low}) as u64)"),
            };
            return format!(
                "{}\
                 while f{d} != 0 {{\n\
                 let b{d} = f{d}.trailing_zeros() as usize;\n\
                 f{d} &= f{d} - 1;\n\
                 let p{d} = {low} + b{d};\n\
                 {body}\
                 }}\n",
                entry("MASKW", &seen)
            );
        }
        if words == 1 {
            return format!(
                "{}\
                 while f{d} != 0 {{\n\
                 let p{d} = f{d}.trailing_zeros() as usize;\n\
                 f{d} &= f{d} - 1;\n\
                 {body}\
                 }}\n",
                entry("MASK", &held)
            );
        }
        // several words: one u64 at a time (word `w{d}`), moving on when its bits run
        // out; `w{d}` stays below the word count, so the word indexes need no check;
        // `uw{d}` the used words
        format!(
            "let k{d}: usize = {key};\n\
             let r{d}: *const u64 = BLOCK[k{d}].0;\n\
             let uw{d}: [u64; 2] = [!({held} as u64), !(({held} >> 64) as u64)];\n\
             let mut w{d}: usize = 0;\n\
             let mut f{d}: u64 = MASK[k{d}][0] & !uw{d}[0];\n\
             loop {{\n\
             if f{d} == 0 {{\n\
             w{d} += 1;\n\
             if w{d} == {words} {{ break; }}\n\
             f{d} = unsafe {{ *MASK[k{d}].get_unchecked(w{d}) & !*uw{d}.get_unchecked(w{d}) }};\n\
             continue;\n\
             }}\n\
             let b{d} = f{d}.trailing_zeros() as usize;\n\
             f{d} &= f{d} - 1;\n\
             let p{d} = (w{d} << 6) | b{d};\n\
             {body}\
             }}\n"
        )
    }
}
