//! The narrow form of the lane engine: a branch-free mask walk of two units at once in
//! one thread, for boards of at most 128 pieces and 16 colours.
//!
//! # Why
//! A branchy depth-first walk spends most of a node waiting on the tree's own branches
//! (does this placement have a child? another sibling?): on the low-colour boards these
//! mispredict ~0.6 times a node and bound the compiled mask walk at ~21 cycles a node
//! (`docs/engine-design.md`). Here no step branches on the tree: each step
//! takes the lowest bit of the current frame's candidate mask, commits that node, builds
//! the child's frame unconditionally, and chooses where to go next (the child, the next
//! sibling, or the nearest shallower frame with candidates left) with conditional moves.
//! One walk is then a chain of dependent loads (~28 cycles a step); two walks interleaved
//! in one thread overlap their chains, and the pair runs at ~16 cycles a node.
//!
//! # Tables
//! Boards of at most 128 pieces, at most 64 with a grey side and 64 without, with at most
//! 16 colours and at most two placed neighbours a cell (every fill order but odd
//! hand-made ones; hints are fine). Free pieces are two 64-bit words: rim pieces (a grey
//! side) in one, inner pieces in the other, each in id order. A cell on the rim takes
//! only rim pieces and an inner cell only inner ones, so each bucket (a key's candidate
//! list) is a mask over one word, and its candidates are indexed by bit, one block per
//! rotation. A piece that fits a bucket in two rotations keeps its bit for a second step:
//! its first rotation's candidate says so (`MORE`) and moves the frame to the next block
//! (`delta`); the last moves it back. So candidates come in canonical order (ascending
//! piece id, then rotation) and budgets, cursors and stops are exactly the reference
//! walker's. Every table is a fixed-size array indexed with a masked index: no bounds
//! checks in the walk, and no `unsafe`.
//!
//! # Frames
//! `frame[d]` holds depth `d`'s candidates not yet taken, the free pieces before depth
//! `d` (two words), the bucket's candidate block and `up`: the deepest shallower depth
//! that still has candidates (or `STOP`). A step at depth `d` commits one node, writes
//! `frame[d + 1]` whatever it holds, and goes to `d + 1` if that frame has candidates,
//! else to `d` if this frame has, else to `up`. The board is kept by depth, each cell's
//! candidate as bytes, so a key's colours are two byte loads at per-depth offsets.
//!
//! # Measured
//! `docs/engine-design.md` ("The lane engine"). What a pair waits on is the longer of its two
//! chains from one frame to the next, so the step keeps stores off them: the colour
//! facing the cell filled just before comes from that candidate in a register (not read
//! back from the board it was just stored to), the per-depth arrays sit at different
//! places in a 4 KiB page (`PAD`; 4K aliasing ran the walk at a third of its speed),
//! and no index on the chain is masked (the tables have room for every index a step can
//! form). ~70 instructions a node; on Brendan's sets 6x6-10x10, on the units of a split,
//! 1.08-1.25x the compiled engine and 2.04-2.68x its mask walk before the lane engine
//! existed.

use super::{Form, Head, NotEligible};
use crate::model::{GREY, Placement};
use crate::plan::{SENTINEL, SearchPlan, candidate_piece, candidate_rot};

/// The most pieces the narrow form takes.
pub(crate) const MAX_PIECES: usize = 128;

/// A candidate as the lane walk reads it: the plan's packed colours (bits 0..32), the
/// piece (bits 32..40), the rotation (bits 40..42), [`MORE`], and in bits 48..64 the
/// signed step of the frame's candidate block after this candidate.
const MORE: u64 = 1 << 42;

#[inline(always)]
fn lane_candidate(c: u64, more: bool, delta: i32) -> u64 {
    (c & 0xFFFF_FFFF)
        | (candidate_piece(c) as u64) << 32
        | (candidate_rot(c) as u64) << 40
        | if more { MORE } else { 0 }
        | ((delta as i16 as u16 as u64) << 48)
}

#[inline(always)]
fn lane_piece(c: u64) -> usize {
    ((c >> 32) & 0x7F) as usize
}

/// Room for depths (and cells): every table is indexed with its index masked to its size,
/// so the walk needs neither bounds checks nor `unsafe`; a board that does not fit is
/// refused up front.
const DEPTHS: usize = 256;
/// Room for bucket keys.
const KEYS: usize = 1 << 14;
/// Room of the bucket masks' table: every key a step can form (a depth's table, below
/// 2^16, plus its colours' bytes), so the step's index needs no mask.
const KEY_ROOM: usize = (1 << 16) + (255 << SHIFT) + 255 + 255 + 1;
/// Room for candidates.
const CANDS: usize = 1 << 14;
/// Room of the candidates' table: every block (a `u16`) plus every bit (at most 64), so
/// the step's index needs no mask.
const CAND_ROOM: usize = (1 << 16) + 64;

/// The depth a lane goes to when its unit is walked: past every real depth and watch, so
/// one compare after a step asks for both.
const STOP: usize = DEPTHS - 1;

/// In [`Depth::rot`]: the depth's buckets hold inner pieces (the high word of free bits).
const INNER: u8 = 0x80;

/// Colours a board may have: keys are `table + (a << SHIFT) + b`.
const SHIFT: u32 = 4;

/// A board: each cell's lane candidate (`u64`) as little-endian bytes, so the key's
/// colours are single byte loads (bytes 0-3 are the cell's URDL colours).
type Board = [[u8; 8]; DEPTHS];

/// A zeroed table on the heap.
fn table<T: Copy + Default, const N: usize>() -> Box<[T; N]> {
    vec![T::default(); N]
        .into_boxed_slice()
        .try_into()
        .unwrap_or_else(|_| unreachable!("a slice of N items"))
}

/// Per-depth reads: the two board bytes of its key and its table. A colour that faces
/// the cell filled at the depth before is taken from that candidate in a register
/// (`rot`, `m`) and its board byte is the dummy cell's zero: read from the board, it
/// would wait for the store just made (a store-to-load forwarding in every step's chain).
#[derive(Clone, Copy, Default)]
#[repr(C)]
struct Depth {
    /// The byte of the board (cell * 8 + side) the key's first colour is read from.
    a: u16,
    /// The byte of its second colour.
    b: u16,
    /// The key of the depth's table, less its colours.
    table: u16,
    /// The previous candidate rotated right by this (bits 0..6) and masked with `m` is
    /// the colour read from it, in place in the key (`0xF0`: the first colour, `0x0F`:
    /// the second, 0: none). [`INNER`] when the depth's cell takes inner pieces.
    rot: u8,
    m: u8,
}

/// The lane walk's tables for one plan.
pub(crate) struct Tables {
    depths: usize,
    /// What a step reads, in one allocation (one address for the walk to keep).
    hot: Box<Hot>,
    /// Each piece's bit in its word of free bits.
    index: [u8; 128],
    free: (u64, u64),
    initial_board: Box<Board>,
    plan_pos: Vec<usize>,
}

/// The tables a step reads.
struct Hot {
    steps: [Depth; DEPTHS],
    /// Each bucket (a key's candidate list): its pieces as bits of their word of free
    /// bits (the word is the depth's: [`INNER`]).
    masks: Box<[u64; KEY_ROOM]>,
    /// Where a bucket's candidate of bit 0 would be.
    blocks: [u16; KEYS],
    cands: Box<[u64; CAND_ROOM]>,
    piece_lo: [u64; 128],
    piece_hi: [u64; 128],
}

impl Tables {
    /// The tables for `plan`, or why it cannot be walked this way.
    pub fn new(plan: &SearchPlan) -> Result<Tables, NotEligible> {
        if plan.pieces > MAX_PIECES {
            return Err(NotEligible::TooManyPieces {
                pieces: plan.pieces,
                most: MAX_PIECES,
            });
        }
        if plan.is_empty() {
            return Err(NotEligible::Empty);
        }
        if plan.depths.iter().any(|d| !d.extra.is_empty()) {
            return Err(NotEligible::ExtraSides);
        }
        let colours = plan.colours;
        if colours > 1 << SHIFT {
            return Err(NotEligible::TooLarge);
        }
        let shift = SHIFT;
        let stride = 1usize << (2 * shift);
        let tables = plan.offsets.len() / (colours * colours).max(1);
        // key space: table t at (t + 1) * stride; table "0" is the empty one for the
        // step past the last depth
        let keys = (tables + 1) * stride;
        if keys > KEYS || plan.cells + 1 > DEPTHS || plan.len() + 2 > STOP {
            return Err(NotEligible::TooLarge);
        }
        // pieces in two words of free bits: rim pieces (a grey side) in the low one, inner
        // pieces in the high one, each in id order; a bucket holds pieces of one kind only
        // (a cell on the rim takes rim pieces, an inner cell inner ones)
        let mut group = [0u8; 128];
        let mut index = [0u8; 128];
        let mut counts = [0usize; 2];
        for (p, colours) in plan.piece_colours.iter().enumerate() {
            let g = usize::from(!colours.contains(&GREY));
            if counts[g] == 64 {
                return Err(NotEligible::TooManyPieces {
                    pieces: plan.pieces,
                    most: MAX_PIECES,
                });
            }
            group[p] = g as u8;
            index[p] = counts[g] as u8;
            counts[g] += 1;
        }
        let (masks, firsts, table_word, packed) = bucket_tables(plan, &group, &index, tables)?;
        let slot_of = board_slots(plan);
        let steps = depth_steps(plan, &slot_of, &table_word);
        let piece_lo: [u64; 128] = std::array::from_fn(|p| {
            if p < plan.pieces && group[p] == 0 {
                1u64 << index[p]
            } else {
                0
            }
        });
        let piece_hi: [u64; 128] = std::array::from_fn(|p| {
            if p < plan.pieces && group[p] == 1 {
                1u64 << index[p]
            } else {
                0
            }
        });
        let mut free = (0u64, 0u64);
        for p in 0..plan.pieces {
            if plan.initial_used[p] == 0 {
                free.0 |= piece_lo[p];
                free.1 |= piece_hi[p];
            }
        }
        Ok(Tables {
            depths: plan.len(),
            hot: Box::new(Hot {
                steps: *steps,
                masks,
                blocks: *firsts,
                cands: packed,
                piece_lo,
                piece_hi,
            }),
            index,
            free,
            initial_board: {
                let mut b: Box<Board> = vec![[0u8; 8]; DEPTHS]
                    .into_boxed_slice()
                    .try_into()
                    .unwrap_or_else(|_| unreachable!("DEPTHS cells"));
                for (cell, &c) in plan.initial_board.iter().enumerate() {
                    b[slot_of[cell]] = (c as u64).to_le_bytes();
                }
                b
            },
            plan_pos: plan.depths.iter().map(|d| d.pos).collect(),
        })
    }
}

impl Hot {
    /// The key of `depth`'s bucket on `board`, where `prev` is the candidate of the depth
    /// before (0 at depth 0), and its word of free bits: the free pieces of the depth's
    /// kind (`lo` on the rim, `hi` inside).
    #[inline(always)]
    fn key(&self, board: &Board, depth: usize, prev: u64, lo: u64, hi: u64) -> (usize, u64) {
        let s = &self.steps[depth % DEPTHS];
        let bytes = board.as_flattened();
        let a = bytes[s.a as usize % (8 * DEPTHS)];
        let b = bytes[s.b as usize % (8 * DEPTHS)];
        // the rotation takes its count modulo 64: `INNER` rides along
        let from_prev = (prev.rotate_right(s.rot as u32) & s.m as u64) as usize;
        let key = s.table as usize + ((a as usize) << SHIFT) + b as usize + from_prev;
        let free = core::hint::select_unpredictable(s.rot & INNER != 0, hi, lo);
        (key, free)
    }
}

/// One frame: depth `d`'s untaken candidates and how to go on.
#[derive(Clone, Copy, Default)]
#[repr(C)]
struct Frame {
    rem: u64,
    lo: u64,
    hi: u64,
    block: u16,
    up: u32,
}

/// Bytes between one per-depth array of a lane and the next, past the array itself: with
/// every array 2,048 bytes long, each starts at its own place within a 4 KiB page
/// (offsets 0, 2,368, 640, 3,008, ... apart: at least 448 bytes), so a store to one
/// array is never taken for a store to the same place of another (4K aliasing: a load
/// whose address matches an older store's in its low 12 bits waits on it). Without the
/// pads the arrays sit 4,096 bytes apart in pairs and the walk ran at a third of its speed.
const PAD: usize = 320;

/// The frames of a lane, field by field (so a depth indexes each array with the
/// addressing mode's own scale, where an array of 32-byte frames takes a shift), each
/// array [`PAD`] bytes past the one before.
#[derive(Clone)]
#[repr(C)]
struct Frames {
    rem: [u64; DEPTHS],
    _p0: [u8; PAD],
    lo: [u64; DEPTHS],
    _p1: [u8; PAD],
    hi: [u64; DEPTHS],
    _p2: [u8; PAD],
    block: [u16; DEPTHS],
    _p3: [u8; PAD + 6 * DEPTHS],
    up: [u32; DEPTHS],
    _p4: [u8; PAD + 4 * DEPTHS],
}

impl Frames {
    #[inline(always)]
    fn get(&self, d: usize) -> Frame {
        let d = d % DEPTHS;
        Frame {
            rem: self.rem[d],
            lo: self.lo[d],
            hi: self.hi[d],
            block: self.block[d],
            up: self.up[d],
        }
    }

    #[inline(always)]
    fn set(&mut self, d: usize, f: Frame) {
        let d = d % DEPTHS;
        self.rem[d] = f.rem;
        self.lo[d] = f.lo;
        self.hi[d] = f.hi;
        self.block[d] = f.block;
        self.up[d] = f.up;
    }
}

/// A lane's arrays, in one allocation (one address for the walk to keep), [`PAD`] bytes
/// apart.
#[derive(Clone)]
#[repr(C)]
struct LaneMem {
    frames: Frames,
    board: Board,
    _p: [u8; PAD],
    nodes: [u64; DEPTHS],
}

/// One lane: its head and its memory.
pub(crate) struct Lane {
    h: Head,
    mem: Box<LaneMem>,
}

impl Form for Tables {
    type Lanes = [Lane; 2];
    const LANES: usize = 2;
    const STOP: usize = STOP;

    fn lanes(&self) -> Box<[Lane; 2]> {
        let t = self;
        let lane = || Lane {
            h: Head {
                d: STOP,
                ..Head::default()
            },
            mem: Box::new(LaneMem {
                frames: Frames {
                    rem: [0; DEPTHS],
                    lo: [0; DEPTHS],
                    hi: [0; DEPTHS],
                    block: [0; DEPTHS],
                    up: [0; DEPTHS],
                    _p0: [0; PAD],
                    _p1: [0; PAD],
                    _p2: [0; PAD],
                    _p3: [0; PAD + 6 * DEPTHS],
                    _p4: [0; PAD + 4 * DEPTHS],
                },
                board: *t.initial_board,
                _p: [0; PAD],
                nodes: [0; DEPTHS],
            }),
        };
        Box::new([lane(), lane()])
    }

    fn head(lanes: &[Lane; 2], slot: usize) -> &Head {
        &lanes[slot].h
    }

    fn head_mut(lanes: &mut [Lane; 2], slot: usize) -> &mut Head {
        &mut lanes[slot].h
    }

    fn start(&self, lanes: &mut [Lane; 2], slot: usize, path: &[Placement], floor: usize) {
        let t = self;
        let lane = &mut lanes[slot];
        lane.mem.board = *t.initial_board;
        lane.mem.nodes.iter_mut().for_each(|n| *n = 0);
        let stop = STOP as u32;
        let (mut lo, mut hi) = t.free;
        let mut up = stop;
        // the frames of the cursor's depths (and the prefix's, which are never walked)
        let mut prev = 0;
        for (depth, p) in path.iter().enumerate() {
            let (key, free) = t.hot.key(&lane.mem.board, depth, prev, lo, hi);
            let rem0 = t.hot.masks[key] & free;
            let bit = t.index[p.piece as usize % 128] as usize;
            // the candidate of this placement: its rotation's block
            let mut block = t.hot.blocks[key % KEYS] as usize;
            let mut c = t.hot.cands[block + bit];
            while candidate_rot_of(c) != p.rot {
                block = (block as i64 + delta_of(c) as i64) as usize;
                c = t.hot.cands[block + bit];
            }
            let more = c & MORE != 0;
            let rem = if more {
                rem0 & !((1u64 << bit) - 1)
            } else {
                rem0 & !((1u64 << bit) | ((1u64 << bit) - 1))
            };
            let next_block = (block as i64 + delta_of(c) as i64) as u16;
            lane.mem.frames.set(
                depth,
                Frame {
                    rem,
                    lo,
                    hi,
                    block: next_block,
                    up,
                },
            );
            lane.mem.board[depth] = c.to_le_bytes();
            prev = c;
            lo ^= t.hot.piece_lo[lane_piece(c)];
            hi ^= t.hot.piece_hi[lane_piece(c)];
            if depth >= floor && rem != 0 {
                up = depth as u32;
            }
        }
        let depth = path.len();
        let (key, free) = t.hot.key(&lane.mem.board, depth, prev, lo, hi);
        let rem = t.hot.masks[key] & free;
        lane.mem.frames.set(
            depth,
            Frame {
                rem,
                lo,
                hi,
                block: t.hot.blocks[key % KEYS],
                up,
            },
        );
        lane.h.d = if rem != 0 { depth } else { up as usize };
    }

    fn step(&self, lanes: &mut [Lane; 2], slot: usize) {
        step(&self.hot, &mut lanes[slot]);
    }

    fn placement(&self, lanes: &[Lane; 2], slot: usize, depth: usize) -> Placement {
        let c = u64::from_le_bytes(lanes[slot].mem.board[depth % DEPTHS]);
        Placement::new(self.plan_pos[depth], lane_piece(c), candidate_rot_of(c))
    }

    fn nodes(&self, lanes: &[Lane; 2], slot: usize) -> Vec<u64> {
        lanes[slot].mem.nodes[..self.depths].to_vec()
    }

    fn drive(&self, lanes: &mut [Lane; 2], live: &[usize]) {
        let [a, b] = lanes;
        match live {
            [_, _] => drive_pair(&self.hot, a, b),
            [0] => drive_one(&self.hot, a),
            [1] => drive_one(&self.hot, b),
            _ => unreachable!("one or two lanes of two"),
        }
    }
}

/// One step of one lane over tables `t`: commits the node at the lane's depth, writes the
/// child's frame, and moves to the child, the next sibling or the frame above. The caller
/// counts the step off the lane's countdown, and sends the lane to its cold path when the
/// countdown runs out or its next node is at or past its watch depth (a new deepest board
/// or a solution; [`STOP`] when the unit is walked). A free function with the tables as
/// its own argument, so the compiler keeps their addresses in registers across the lanes'
/// stores.
#[inline(always)]
fn step(t: &Hot, ln: &mut Lane) {
    use core::hint::select_unpredictable as pick;
    let d = ln.h.d % DEPTHS;
    let f = ln.mem.frames.get(d);
    let bit = f.rem.trailing_zeros() as usize;
    let c = t.cands[f.block as usize + bit];
    let more = (c >> 42) & 1;
    let rem = f.rem & f.rem.wrapping_sub(1).wrapping_add(more);
    let block = f.block.wrapping_add((c >> 48) as u16);
    ln.mem.board[d] = c.to_le_bytes();
    ln.mem.nodes[d] += 1;
    let p = lane_piece(c);
    let lo = f.lo ^ t.piece_lo[p];
    let hi = f.hi ^ t.piece_hi[p];
    let dn = d + 1;
    let (key, free) = t.key(&ln.mem.board, dn, c, lo, hi);
    let child = t.masks[key] & free;
    ln.mem.frames.rem[d] = rem;
    ln.mem.frames.block[d] = block;
    let up = pick(rem != 0, d as u32, f.up);
    ln.mem.frames.set(
        dn,
        Frame {
            rem: child,
            lo,
            hi,
            block: t.blocks[key % KEYS],
            up,
        },
    );
    ln.h.d = pick(child != 0, dn, up as usize);
    ln.h.last = d;
}

/// Steps both lanes in turn until one needs its cold path. Both enter with
/// steps left on their countdowns and their next nodes above their watches (the cold
/// path leaves them so). The pair takes as many steps as the shorter countdown at most,
/// so one counter stands for both; and a depth at or past its watch is one where
/// `watch - 1 - depth` wraps below zero, so one sign test asks it of both lanes.
#[inline(never)]
fn drive_pair(t: &Hot, a: &mut Lane, b: &mut Lane) {
    let most = a.h.left.min(b.h.left);
    let (wa, wb) = (a.h.watch.wrapping_sub(1), b.h.watch.wrapping_sub(1));
    let mut steps = 0;
    loop {
        step(t, a);
        step(t, b);
        steps += 1;
        let watched = (wa.wrapping_sub(a.h.d) | wb.wrapping_sub(b.h.d)) as isize;
        if (steps == most) | (watched < 0) {
            break;
        }
    }
    a.h.left -= steps;
    b.h.left -= steps;
}

/// Steps one lane until it needs its cold path.
#[inline(never)]
fn drive_one(t: &Hot, lane: &mut Lane) {
    let most = lane.h.left;
    let watch = lane.h.watch;
    let mut steps = 0;
    loop {
        step(t, lane);
        steps += 1;
        if (steps == most) | (lane.h.d >= watch) {
            break;
        }
    }
    lane.h.left -= steps;
}

#[inline(always)]
fn candidate_rot_of(c: u64) -> u8 {
    ((c >> 40) & 3) as u8
}

#[inline(always)]
fn delta_of(c: u64) -> i32 {
    (c >> 48) as u16 as i16 as i32
}

/// The bucket tables: per key the mask of its pieces (in their word of free bits) and its
/// first candidate's block; which word each table's buckets hold; the candidates, each
/// piece's rotations one block apart.
#[allow(clippy::type_complexity)]
fn bucket_tables(
    plan: &SearchPlan,
    group: &[u8; 128],
    index: &[u8; 128],
    tables: usize,
) -> Result<
    (
        Box<[u64; KEY_ROOM]>,
        Box<[u16; KEYS]>,
        Vec<Option<u8>>,
        Box<[u64; CAND_ROOM]>,
    ),
    NotEligible,
> {
    let colours = plan.colours;
    let shift = SHIFT;
    let stride = 1usize << (2 * shift);
    let mut masks = table::<u64, KEY_ROOM>();
    let mut firsts = table::<u16, KEYS>();
    // which word of free bits each table's buckets hold (a table whose buckets are all
    // empty: either)
    let mut table_word: Vec<Option<u8>> = vec![None; tables];
    let mut cands: Vec<u64> = vec![0; 64];
    for t in 0..tables {
        for a in 0..colours {
            for b in 0..colours {
                let start = plan.offsets[t * colours * colours + a * colours + b] as usize;
                let bucket: Vec<u64> = plan.candidates[start..]
                    .iter()
                    .copied()
                    .take_while(|&c| c != SENTINEL)
                    .collect();
                if bucket.is_empty() {
                    continue;
                }
                let word = group[candidate_piece(bucket[0])];
                if bucket.iter().any(|&c| group[candidate_piece(c)] != word)
                    || *table_word[t].get_or_insert(word) != word
                {
                    return Err(NotEligible::MixedBucket);
                }
                let bit_of = |c: u64| index[candidate_piece(c)] as usize;
                let lo = bucket.iter().map(|&c| bit_of(c)).min().expect("non-empty");
                let hi = bucket.iter().map(|&c| bit_of(c)).max().expect("non-empty");
                let span = hi - lo + 1;
                // rotations per piece, in canonical order (a group's bits keep the
                // pieces' order)
                let mut rots: Vec<Vec<u64>> = vec![Vec::new(); span];
                for &c in &bucket {
                    rots[bit_of(c) - lo].push(c);
                }
                let blocks = rots.iter().map(Vec::len).max().unwrap_or(1);
                if blocks * span > i16::MAX as usize {
                    return Err(NotEligible::TooLarge);
                }
                let key = (t + 1) * stride + (a << shift) + b;
                let base = cands.len();
                cands.resize(base + blocks * span, 0);
                for (i, list) in rots.iter().enumerate() {
                    if list.is_empty() {
                        continue;
                    }
                    masks[key] |= 1 << (lo + i);
                    for (j, &c) in list.iter().enumerate() {
                        let more = j + 1 < list.len();
                        let delta = if more {
                            span as i32
                        } else {
                            -((j * span) as i32)
                        };
                        cands[base + j * span + i] = lane_candidate(c, more, delta);
                    }
                }
                // bit b's first candidate is at block + b (the leading padding
                // keeps block from going below zero)
                firsts[key] = (base - lo) as u16;
            }
        }
    }
    if cands.len() > CANDS {
        return Err(NotEligible::TooLarge);
    }
    let mut packed = table::<u64, CAND_ROOM>();
    packed[..cands.len()].copy_from_slice(&cands);
    Ok((masks, firsts, table_word, packed))
}

/// Where each cell sits in a lane's board, which is kept by depth: slot `d` holds the cell
/// filled at depth `d` (so a step writes slot `d`); the hints' cells and the dummy cell
/// take the slots after.
fn board_slots(plan: &SearchPlan) -> Vec<usize> {
    let cells = plan.cells;
    let mut slot_of = vec![usize::MAX; cells + 1];
    for (depth, d) in plan.depths.iter().enumerate() {
        slot_of[d.pos] = depth;
    }
    let unfilled = slot_of.iter_mut().filter(|s| **s == usize::MAX);
    for (next, slot) in (plan.len()..).zip(unfilled) {
        *slot = next;
    }
    slot_of
}

/// Each depth's step: where its two key colours are read (a colour facing the cell filled
/// just before comes from that candidate, rotated into place), its table, its word.
fn depth_steps(
    plan: &SearchPlan,
    slot_of: &[usize],
    table_word: &[Option<u8>],
) -> Box<[Depth; DEPTHS]> {
    let colours = plan.colours;
    let shift = SHIFT;
    let stride = 1usize << (2 * shift);
    let key_of = |t: usize| ((t / (colours * colours)) + 1) * stride;
    let cells = plan.cells;
    let dummy = slot_of[cells] * 8;
    let mut steps = table::<Depth, DEPTHS>();
    for (depth, (slot, d)) in steps.iter_mut().zip(&plan.depths).enumerate() {
        let mut read = |k: usize, m: u8| {
            let r = d.key[k];
            if depth > 0 && r.cell == plan.depths[depth - 1].pos && slot.m == 0 {
                // the colour is byte `shift / 8` of the previous candidate: rotated
                // to bits 4..8 (the first colour) or 0..4 (the second)
                slot.m = m;
                slot.rot = (r.shift + if m == 0xF0 { 60 } else { 0 }) as u8 % 64;
                dummy as u16
            } else {
                (slot_of[r.cell] * 8) as u16 + (r.shift / 8) as u16
            }
        };
        let a = read(0, 0xF0);
        let b = read(1, 0x0F);
        slot.a = a;
        slot.b = b;
        slot.table = key_of(d.table) as u16;
        if table_word[d.table / (colours * colours)] == Some(1) {
            slot.rot |= INNER;
        }
    }
    // past the last depth: the empty table, reads of the dummy cell
    steps[plan.len()] = Depth {
        a: dummy as u16,
        b: dummy as u16,
        table: 0,
        rot: 0,
        m: 0,
    };
    steps
}
