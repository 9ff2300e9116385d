//! The mask walk's slot lookup: a mask level inside a group finds its bucket from the slot
//! of the candidate its enclosing loop holds, through a `NEXT{i}` table per transition
//! indexed by the key's other colour and that slot. From one node's free bit to the next
//! cell's free mask is then one load.
//!
//! Names in the generated code, beside those of the mask levels (`mask.rs`):
//!
//! | name | what it holds |
//! |---|---|
//! | `NEXT{i}` | the entries of transition `i` ([`Shape`]): a bucket's piece mask with its block's offset packed in bits its pieces leave free |
//! | `s{d}` | the slot in `BYBIT` of the candidate depth `d` holds |
//! | `yo{d}` | the row of `NEXT` for the next depth's other key colour |
//! | `e{d}`, `o{d}` | the entry depth `d` read and its block's offset in `BYBIT` |
use crate::plan::SENTINEL;

use super::Gen;
use super::tables::BucketWalk;

/// A mask level `d` whose bucket is looked up in one load from the slot of the candidate
/// depth `d - 1` holds (in `BYBIT`) and the other colour of its key: its free mask is
/// then `entry & free`, and the chain from one node to the next is the lowest free bit,
/// an add, that load and an `and`, where the key walk reads the candidate, makes the key
/// from its colour and reads the key's mask (two loads and a shift and a mask more).
/// On low-colour boards the node waits on that chain (a 3-cycle multiply put in it cost
/// Brendan set 1 7x7 0.91x).
#[derive(Clone, Copy, Debug)]
pub(super) struct Chain {
    /// Index into [`Gen::shapes`] (which also says which of depth `d`'s key reads is the
    /// candidate of depth `d - 1`).
    pub(super) shape: usize,
}

/// The transitions one `NEXT` table serves: from plan table `from` (its depths hold the
/// candidate) to depths keyed on it as their read `read` at `shift`, in plan table `to`.
/// [`Gen::plan_chains`] finds them; [`Gen::next_tables`] lays each table out
/// ([`NextTable`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Shape {
    pub(super) from: usize,
    pub(super) to: usize,
    pub(super) read: usize,
    pub(super) shift: u32,
    /// Where the key's other colour comes from: the table of the depth that places the
    /// cell it reads and the read's shift (its colours are those of that table's
    /// candidates), or `None` (a constant: the border, or a hint's colour).
    pub(super) other: Option<(usize, u32)>,
}

/// How a [`Shape`]'s table `NEXT{i}` is laid out. Entries `[y][slot]`: `y` the key's
/// other colour, `slot` an index into `BYBIT` from `lo` (`span` of them: from the first
/// to the last slot that holds a candidate of the shape's `from` buckets; slots between
/// them that are another table's keep an empty entry), then, for a table with a second
/// candidate per piece (`seconds`), the same slots `B2` on (the second candidates: slot +
/// `span`).
#[derive(Clone, Debug)]
pub(super) struct NextTable {
    /// The other colours an entry row is kept for: `y - ys.start` indexes the rows.
    pub(super) ys: std::ops::Range<usize>,
    pub(super) lo: usize,
    pub(super) span: usize,
    pub(super) seconds: bool,
    /// Where an entry keeps its block's offset (`offset_bits` wide): in the bits below
    /// (0) or above (`64 - offset_bits`) the pieces of table `to`, whose masks never use
    /// them (files list corners, edges and inner pieces apart).
    pub(super) packed_at: u32,
    pub(super) offset_bits: u32,
}

impl Gen<'_> {
    /// Which mask levels look their bucket up from the slot of the candidate the level
    /// before holds ([`Chain`]): every depth but a group's first whose table and the one
    /// before walk by mask, whose walk reads one word (a one-word board, or a windowed
    /// table), and whose key reads the depth before's candidate once, at a byte.
    pub(super) fn plan_chains(&mut self) {
        let p = self.plan;
        self.chains = vec![None; p.len()];
        if self.mask_words() == 0 {
            return;
        }
        for d in 1..p.len() {
            if self.is_head(d) {
                continue;
            }
            let (from, to) = (p.depths[d - 1].table, p.depths[d].table);
            let one_view = |t: usize| match self.walks.get(&t) {
                Some(BucketWalk::Mask { window, .. }) => self.mask_words() == 1 || window.is_some(),
                _ => false,
            };
            if !one_view(from) || !one_view(to) {
                continue;
            }
            let reads = &p.depths[d].key;
            let mine: Vec<usize> = (0..2)
                .filter(|&r| reads[r].cell == p.depths[d - 1].pos)
                .collect();
            let &[read] = mine.as_slice() else {
                continue;
            };
            let shift = reads[read].shift;
            if !shift.is_multiple_of(8) || shift > 56 {
                continue;
            }
            let o = reads[1 - read];
            let other = p.depths[..d - 1]
                .iter()
                .find(|e| e.pos == o.cell)
                .map(|e| (e.table, o.shift));
            let shape = Shape {
                from,
                to,
                read,
                shift,
                other,
            };
            let i = match self.shapes.iter().position(|s| *s == shape) {
                Some(i) => i,
                None => {
                    self.shapes.push(shape);
                    self.shapes.len() - 1
                }
            };
            self.chains[d] = Some(Chain { shape: i });
        }
    }

    /// The `NEXT` tables of [`Gen::shapes`], given what [`Gen::mask_tables`] laid out: per
    /// key (as `OFFS` indexes them) the mask a level of its table reads (`views`: `MASK`,
    /// or `MASKW` for a windowed table) and its block (`bases`), and `BYBIT`'s first and
    /// second candidates.
    pub(super) fn next_tables(
        &mut self,
        offs: &[u32],
        views: &[u64],
        bases: &[usize],
        bybit: &[u64],
        bybit2: &[u64],
    ) {
        let (c, log) = (self.plan.colours, self.stride_log2());
        let offset_bits = usize::BITS - bybit.len().leading_zeros();
        let mut tables = Vec::with_capacity(self.shapes.len());
        for i in 0..self.shapes.len() {
            let sh = self.shapes[i].clone();
            // the slots of table `from`'s buckets: `BYBIT`'s indexes (block plus piece)
            // that hold one of their candidates; the packed blocks interleave, so a slot
            // between them may be another table's, and its entry stays empty
            let seconds = match self.walks.get(&sh.from) {
                Some(&BucketWalk::Mask { dups, .. }) => dups,
                _ => unreachable!("a chain starts from a mask table"),
            };
            let from = self.table_offset(sh.from);
            let keys = (0..c).flat_map(|a| (0..c).map(move |b| from + (a << log) + b));
            let mut used: Vec<usize> = keys
                .filter(|&k| offs[k] != 0)
                .flat_map(|k| {
                    self.bucket_pieces(offs[k] as usize)
                        .into_iter()
                        .map(move |g| bases[k] + crate::plan::candidate_piece(g[0]))
                })
                .collect();
            used.sort_unstable();
            used.dedup();
            let lo = used.first().copied().unwrap_or(0);
            let hi = used.last().map_or(0, |&s| s + 1);
            let to = self.table_offset(sh.to);
            let ys = match sh.other {
                Some((t, shift)) => {
                    let first = self.table_offset(t);
                    let colours: Vec<usize> = (0..c)
                        .flat_map(|a| (0..c).map(move |b| first + (a << log) + b))
                        .flat_map(|k| self.bucket_pieces(offs[k] as usize))
                        .flatten()
                        .map(|cand| ((cand >> shift) & 0xFF) as usize)
                        .collect();
                    let (min, max) = (colours.iter().min(), colours.iter().max());
                    min.zip(max).map_or(0..0, |(&a, &b)| a..b + 1)
                }
                None => 0..c,
            };
            let mut entries = Vec::new();
            for y in ys.clone() {
                for half in [bybit, bybit2].iter().take(1 + usize::from(seconds)) {
                    for slot in lo..hi {
                        let cand = half[slot];
                        if cand == SENTINEL || used.binary_search(&slot).is_err() {
                            entries.push((0, 0));
                            continue;
                        }
                        let colour = ((cand >> sh.shift) & 0xFF) as usize;
                        let k = match sh.read {
                            0 => to + (colour << log) + y,
                            _ => to + (y << log) + colour,
                        };
                        entries.push((views[k], bases[k] as u64));
                    }
                }
            }
            let bits = entries.iter().fold(0u64, |a, e| a | e.0);
            let packed_at = if bits.trailing_zeros() >= offset_bits {
                Some(0)
            } else if 64 - bits.leading_zeros() + offset_bits <= 64 {
                Some(64 - offset_bits)
            } else {
                None
            };
            // the offset beside the mask instead (a `u32` array read with the same index:
            // 12 bytes an entry) costs more than the chain saves where a table has 64
            // pieces: Brendan set 1 and 2 10x10 0.94x and 0.92x, 11-12 MB of tables (as
            // 16-byte pairs 0.90x); and chaining only the levels whose entries fit (their
            // rims) 0.98-0.99x (5 alternated rounds each): then no level chains. (No other
            // colour at all: the depth is never reached.)
            let Some(packed_at) = packed_at.filter(|_| !ys.is_empty()) else {
                self.chains.iter_mut().for_each(|ch| *ch = None);
                self.next.clear();
                return;
            };
            self.next.push(NextTable {
                ys,
                lo,
                span: hi - lo,
                seconds,
                packed_at,
                offset_bits,
            });
            tables.push(entries);
        }
        for (i, entries) in tables.into_iter().enumerate() {
            let at = self.next[i].packed_at;
            let packed = entries.iter().map(|&(m, o)| m | o << at);
            self.words(&format!("NEXT{i}"), "u64", packed);
        }
    }
}
