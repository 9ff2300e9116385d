//! The wide form of the lane engine: boards of up to 256 pieces and 32 colours (every
//! Eternity II-style 16x16 board), six units at once in one thread.
//!
//! # Frames
//! On a hard 16x16 board most nodes are where 70-95 inner pieces are free (88% of the
//! centre clue's at depths 144-176), so the free pieces cannot be renumbered into one
//! 64-bit word as the narrow form does. Each frame keeps instead the whole 256-bit set of
//! free pieces and a *bucket-local* mask of its untaken candidates: bit i is the
//! bucket's candidate i, in the plan's (canonical) order, at most 16 a bucket (E2's
//! largest has 12). A step works out the child's mask from its bucket: per bucket, each
//! candidate's byte of the free set and its bit in that byte. With AVX-512 (VBMI, BW,
//! VL) that is one `vpermb` across the set and one `vptestmb`; with SSSE3, two byte
//! shuffles (`pshufb`, one per half of the set), a compare and `pmovmskb`
//! ([`WideKernel`], chosen when the tables are built; `kernel.rs`). Every step is one
//! node, in canonical order, as in the narrow form.
//!
//! # Positions and records
//! A lane's place is held as a *position*, its depth times 16: the offset of the depth's
//! [`Step`] and a quarter of its [`Frame`]'s, so one register addresses both through the
//! address's scale; the board's slot is in the frame. A bucket's candidates follow its
//! vectors in one record ([`Hot::records`]), so a frame names both by one offset.
//!
//! # Keys
//! `table + (a << 5) + b`: a depth's table (1,024 keys each) and the two colours read
//! from the board. A colour facing the cell filled at the depth before is taken from
//! that candidate in a register (rotated into place and masked) rather than read back
//! from the board it was just stored to.
//!
//! # `unsafe`
//! This module is the one place of the engine crate with `unsafe` code, for three things
//! the walk's speed rests on (each measured on a prototype before it was kept:
//! `docs/engine-design.md`):
//! - each kernel (`kernel::drive_n` for SSSE3 or AVX-512) is a `#[target_feature]`
//!   function, called only when [`Tables::new`] found its features on this processor;
//! - a step is written in inline assembly (`kernel::step`): its two selects must be
//!   `cmov`s (LLVM turned `select_unpredictable`, and the same select written with
//!   masks, into a branch around a load, and the mispredicts serialised the lanes:
//!   0.44x), and LLVM's own code for the step spent ~9% more instructions, mostly
//!   moving the lanes' positions between registers (the kernel module's docs);
//! - the step's table reads are unchecked: every address it forms is in range by the
//!   way the tables are built, which [`Tables::new`] checks (`kernel::step` says which).

#![allow(unsafe_code)]

mod kernel;

use std::arch::x86_64::*;

use kernel::{Avx512, Kernel, Ssse3};

use super::{Form, Head, NotEligible, WideKernel};
use crate::model::Placement;
use crate::plan::{SENTINEL, SearchPlan, candidate_piece, candidate_rot};

/// Room for frames (depths 0..=256) and [`STOP`].
const D: usize = 272;
/// The depth a lane goes to when its unit is walked: past every frame a walk uses.
const STOP: usize = D - 1;
/// The board's slot no step writes (always 0): read by keys with fewer than two colours
/// from the board. A lane's board is kept by depth (frame `d` holds the candidate placed
/// at depth `d`), so a step writes its slot at its own depth, with no table of cells;
/// the plan's keys read only cells filled at earlier depths (hints' and the rim's sides
/// are in its tables), so no slot needs a start value but this one.
const DUMMY: usize = STOP;
/// Keys: 1,024 a table, table 0 the empty bucket's (the step past the last depth).
const KEYS: usize = 1 << 16;
/// Room for buckets, in 8-byte words: each bucket a [`Bucket`] and its candidates after
/// it (the empty one at 0), and 16 words past the last one's (a mask's bit never goes
/// past its bucket's candidates, but the room makes that not a matter of trust). Offsets
/// of words fit 16 bits ([`Hot::keyb`]).
const RECORDS: usize = 1 << 16;
/// A [`Bucket`]'s words: its candidates start this many words after it.
const HEAD: usize = size_of::<Bucket>() / 8;
/// Where a lane candidate's colours start (bits 16-47, a byte each side as in the plan's
/// candidates). Its low 16 bits hold its piece's byte offset in [`Hot::oh`], so the step
/// takes it with one zero-extending move; its piece is in bits 48-55 and its rotation
/// in 56-57 ([`lane_candidate`]).
const COLOURS_AT: u32 = 16;

/// The plan's candidate `x` as the lane tables hold it (see [`COLOURS_AT`]).
fn lane_candidate(x: u64) -> u64 {
    let piece = candidate_piece(x);
    (piece * size_of::<[__m128i; 2]>()) as u64
        | (x & 0xFFFF_FFFF) << COLOURS_AT
        | (piece as u64) << 48
        | u64::from(candidate_rot(x)) << 56
}

/// A lane candidate's piece.
fn piece_of(c: u64) -> usize {
    (c >> 48) as u8 as usize
}

/// A lane candidate's rotation.
fn rot_of(c: u64) -> u8 {
    ((c >> 56) & 3) as u8
}

/// Lanes a thread walks at once.
const LANES: usize = 6;
/// The most lanes the kernel's loop is written out for.
const MOST_LANES: usize = 8;
const _: () = assert!(LANES <= MOST_LANES && LANES <= super::MAX_LANES);

/// The most pieces.
const MAX_PIECES: usize = 256;
/// The most candidates a bucket: the bits of a frame's mask.
const MAX_BUCKET: usize = 16;

/// A bucket as the step reads it: for candidate i, the byte of the free set that holds
/// its piece and its bit in that byte. For the SSSE3 kernel `ia[i]` is the byte from
/// bytes 0-15 and `ib[i]` from 16-31 (`0x80` where the other half holds it, or past the
/// bucket's end, so `pshufb` gives 0), and `bits[i]` is 1 past the end (no byte of 0
/// holds it). For the AVX-512 kernel `ia[i]` is the byte, 0-31, for one `vpermb` over
/// the whole set, `ib` is unused, and `bits[i]` is 0 past the end (no byte tests
/// non-zero against it).
///
/// Its candidates follow it in [`Hot::records`] (at [`HEAD`] words on), so a frame names
/// its bucket by one offset, which both the bucket's vectors and its candidates are read
/// from.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct Bucket {
    ia: __m128i,
    ib: __m128i,
    bits: __m128i,
    /// Its candidates.
    len: u32,
    _p: [u32; 3],
}

/// The buckets with their candidates, in words (see [`RECORDS`]), 64-byte aligned.
#[repr(C, align(64))]
struct Records([u64; RECORDS]);

/// Per-depth reads of a key: the board bytes of its two colours (their byte offsets in a
/// lane's frames, [`board_byte`]) and
/// its table; `rot` and `m` take the colour facing the cell filled just before from that
/// candidate (rotated right by `rot`, masked with `m`), whose board byte is then the
/// dummy cell's.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Step {
    a: u16,
    b: u16,
    // the two the step adds and masks with as words, so each is an operand of its
    // instruction rather than a load of its own
    table: u32,
    m: u32,
    rot: u32,
}

/// What a step reads, in one allocation.
#[repr(C)]
struct Hot {
    steps: [Step; D],
    /// Each key's bucket, as its offset in words in [`Hot::records`] (the step's loads
    /// scale it by 8 in their addresses, with no shift of their own).
    keyb: [u16; KEYS],
    records: Records,
    /// Each piece as a bit of the 256-bit free set.
    oh: [[__m128i; 2]; 256],
}

impl Hot {
    /// The bucket at offset `at` (a key's [`Hot::keyb`]).
    fn head(&self, at: usize) -> &Bucket {
        let words = &self.records.0[at..at + HEAD];
        // SAFETY: HEAD words in range, at an offset `fill_buckets` wrote a bucket to
        // (16-byte aligned: every offset is even and the records 64-byte aligned)
        unsafe { &*words.as_ptr().cast::<Bucket>() }
    }

    /// The candidates of the bucket at offset `at`.
    fn cands(&self, at: usize) -> &[u64] {
        let len = self.head(at).len as usize;
        &self.records.0[at + HEAD..at + HEAD + len]
    }

    /// The key of the bucket at position `at` (depth `e`'s: `e * 16`) on a lane's
    /// `frames`, where `prev` is the candidate of the depth before (0 at depth 0). `TWO`:
    /// read the step's second colour from the board (without it, where
    /// [`Tables::two_reads`] is not set, it is the dummy slot's 0).
    ///
    /// # Safety
    /// `at / 16` is at most the plan's depths (below [`D`]).
    #[inline(always)]
    unsafe fn key<const TWO: bool>(&self, frames: &[Frame; D], at: usize, prev: u64) -> usize {
        // SAFETY: `at` is the caller's; `a` and `b` are board bytes of frames below `D`
        // (`Tables::new`: a slot is a depth or DUMMY), inside `frames`
        let (s, a, b) = unsafe {
            let s = &*self.steps.as_ptr().cast::<u8>().add(at).cast::<Step>();
            let bytes = frames.as_ptr().cast::<u8>();
            (
                s,
                *bytes.add(s.a as usize) as u32,
                if TWO {
                    *bytes.add(s.b as usize) as u32
                } else {
                    0
                },
            )
        };
        let from_prev = (prev.rotate_right(s.rot) as u32) & s.m;
        (s.table + (a << 5) + b + from_prev) as usize
    }
}

/// One frame: depth `d`'s free pieces and untaken candidates, how to go on, and the
/// board's slot `d`.
///
/// The kernel holds a lane's place as a *position*, `d * 16`: the offset of depth `d`'s
/// [`Step`], a quarter of its frame's (64 bytes), so one register addresses both with
/// no shift, and the board lives in the frames for the same reason.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Frame {
    free: [__m128i; 2],
    /// Untaken candidates, as bits of the bucket's list.
    rem: u32,
    /// The bucket's offset in [`Hot::records`], in words.
    base: u32,
    /// The position of the deepest shallower depth with candidates left (or [`STOP`]'s).
    up: u32,
    _p: u32,
    /// Nodes committed at this depth.
    nodes: u64,
    /// The candidate placed at this depth (the board's slot; [`DUMMY`]'s is always 0).
    board: u64,
}

/// Depth `d`'s position (see [`Frame`]).
const fn at(d: usize) -> usize {
    d * 16
}

/// The byte offset, in a lane's frames, of byte `byte` of the board's slot `slot`.
const fn board_byte(slot: usize, byte: usize) -> usize {
    slot * size_of::<Frame>() + std::mem::offset_of!(Frame, board) + byte
}

/// One lane: its head and frames (with the board: the plan's candidates by depth).
#[repr(C, align(64))]
pub(crate) struct Lane {
    h: Head,
    frames: [Frame; D],
}

/// The wide form's tables for one plan.
pub(crate) struct Tables {
    hot: Box<Hot>,
    depths: usize,
    free: [u8; 32],
    plan_pos: Vec<usize>,
    /// Some depth's key reads two colours from the board, neither of them the cell filled
    /// just before (the plan's keys never read hints or the rim: their sides are in its
    /// tables). Scan orders read one, the neighbour one line back, so their kernel
    /// leaves the second read out (the step's `TWO`): 63.2 -> 59.7 instructions a node
    /// on the centre clue.
    two_reads: bool,
    /// The instructions the step works a child's mask out with.
    kernel: WideKernel,
}

fn m128(bytes: [u8; 16]) -> __m128i {
    // SAFETY: 16 bytes to a 16-byte vector: every bit pattern is a value
    unsafe { std::mem::transmute::<[u8; 16], __m128i>(bytes) }
}

fn halves(bytes: &[u8; 32]) -> [__m128i; 2] {
    let (lo, hi) = bytes.split_at(16);
    [
        m128(lo.try_into().expect("16 bytes")),
        m128(hi.try_into().expect("16 bytes")),
    ]
}

/// A zeroed value on the heap.
///
/// # Safety
/// `T` must be valid all zeros (integers, arrays of them, SSE vectors).
unsafe fn zeroed<T>() -> Box<T> {
    let layout = std::alloc::Layout::new::<T>();
    assert!(layout.size() > 0, "a sized table");
    // SAFETY: a non-zero size; the memory is `T`'s layout, zeroed, which the caller says
    // is a `T`; `Box` frees it with the same layout
    unsafe {
        let p = std::alloc::alloc_zeroed(layout).cast::<T>();
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Box::from_raw(p)
    }
}

/// A depth's table's first key: table `i` of `tables` (the plan's tables the depths use,
/// sorted) at `(i + 1) * 1024`.
fn key_of(tables: &[usize], t: usize) -> usize {
    (tables.binary_search(&t).expect("a depth's table") + 1) * 1024
}

/// The buckets (shared by keys with the same candidate list), each key's bucket, and the
/// candidates with their pieces' one-hot offsets.
fn fill_buckets(
    hot: &mut Hot,
    plan: &SearchPlan,
    tables: &[usize],
    kernel: WideKernel,
) -> Result<(), NotEligible> {
    let c = plan.colours;
    let wide = kernel == WideKernel::Avx512;
    // what a place past a bucket's end holds: no candidate either kernel finds free
    let (pad_index, pad_bit) = if wide { (0, 0) } else { (0x80, 1) };
    let empty = Bucket {
        ia: m128([pad_index; 16]),
        ib: m128([0x80; 16]),
        bits: m128([pad_bit; 16]),
        len: 0,
        _p: [0; 3],
    };
    let mut records: Vec<u64> = Vec::new();
    let push = |records: &mut Vec<u64>, head: Bucket, cands: &[u64]| {
        let at = records.len();
        // SAFETY: a `Bucket` is plain bytes (vectors and integers), HEAD words of them
        let words = unsafe { std::mem::transmute::<Bucket, [u64; HEAD]>(head) };
        records.extend_from_slice(&words);
        records.extend_from_slice(cands);
        // the next bucket's vectors 16-byte aligned
        records.resize(records.len().next_multiple_of(2), 0);
        at
    };
    push(&mut records, empty, &[]);
    // buckets are shared by keys with the same candidate list
    let mut seen = std::collections::HashMap::new();
    for &t in tables {
        for a in 0..c {
            for b in 0..c {
                let start = plan.offsets[t + a * c + b] as usize;
                let list: Vec<u64> = plan.candidates[start..]
                    .iter()
                    .copied()
                    .take_while(|&x| x != SENTINEL)
                    .collect();
                if list.is_empty() {
                    continue;
                }
                if list.len() > MAX_BUCKET {
                    return Err(NotEligible::LongBucket(list.len()));
                }
                let at = *seen.entry(start).or_insert_with(|| {
                    let mut ia = [pad_index; 16];
                    let mut ib = [0x80u8; 16];
                    let mut bits = [pad_bit; 16];
                    for (i, &x) in list.iter().enumerate() {
                        let p = candidate_piece(x);
                        let byte = (p >> 3) as u8;
                        // the AVX-512 kernel's index spans the whole set
                        if wide || byte < 16 {
                            ia[i] = byte;
                        } else {
                            ib[i] = byte - 16;
                        }
                        bits[i] = 1 << (p & 7);
                    }
                    let head = Bucket {
                        ia: m128(ia),
                        ib: m128(ib),
                        bits: m128(bits),
                        len: list.len() as u32,
                        _p: [0; 3],
                    };
                    let cands: Vec<u64> = list.iter().map(|&x| lane_candidate(x)).collect();
                    push(&mut records, head, &cands)
                });
                hot.keyb[key_of(tables, t) + (a << 5) + b] = at as u16;
            }
        }
    }
    if records.len() + MAX_BUCKET > RECORDS {
        return Err(NotEligible::TooLarge);
    }
    hot.records.0[..records.len()].copy_from_slice(&records);
    Ok(())
}

/// Each depth's step: its table and where its two key colours are read (a colour facing
/// the cell filled just before comes from that candidate, rotated into place).
fn fill_steps(hot: &mut Hot, plan: &SearchPlan, tables: &[usize]) {
    // where a key's cell is on the board: the slot of the depth that fills it, or
    // DUMMY for the plan's dummy cell (a key with fewer than two colours)
    let mut slot_of = vec![DUMMY; plan.cells + 1];
    for (e, d) in plan.depths.iter().enumerate() {
        slot_of[d.pos] = e;
    }
    for (e, d) in plan.depths.iter().enumerate() {
        let mut s = Step {
            table: key_of(tables, d.table) as u32,
            ..Step::default()
        };
        let prev = e.checked_sub(1).map(|p| plan.depths[p].pos);
        for (k, read) in d.key.iter().enumerate() {
            // bit of the colour in the key: 5 for the first, 0 for the second
            let bit = if k == 0 { 5 } else { 0 };
            let byte = if Some(read.cell) == prev && s.m == 0 {
                s.rot = (read.shift + COLOURS_AT + 64 - bit) % 64;
                s.m = 0xFF << bit;
                board_byte(DUMMY, 0)
            } else {
                let slot = slot_of[read.cell];
                // the plan's invariant (its keys read dynamic sides only), not a
                // property of the board: no variant of `NotEligible` stands for it
                assert!(
                    slot == DUMMY || slot < e,
                    "a plan's key reads a cell filled at an earlier depth"
                );
                board_byte(slot, (read.shift + COLOURS_AT) as usize / 8)
            };
            if k == 0 {
                s.a = byte as u16;
            } else {
                s.b = byte as u16;
            }
        }
        hot.steps[e] = s;
    }
}

impl Tables {
    /// The tables for `plan` walked by `kernel`, or why it cannot be walked this way.
    pub(crate) fn new(plan: &SearchPlan, kernel: WideKernel) -> Result<Tables, NotEligible> {
        if !kernel.here() {
            return Err(NotEligible::Processor(kernel.needs()));
        }
        if plan.is_empty() {
            return Err(NotEligible::Empty);
        }
        if plan.pieces > MAX_PIECES {
            return Err(NotEligible::TooManyPieces {
                pieces: plan.pieces,
                most: MAX_PIECES,
            });
        }
        if plan.depths.iter().any(|d| !d.extra.is_empty()) {
            return Err(NotEligible::ExtraSides);
        }
        let c = plan.colours;
        if c > 32 || plan.len() + 1 >= STOP {
            return Err(NotEligible::TooLarge);
        }
        let mut tables: Vec<usize> = plan.depths.iter().map(|d| d.table).collect();
        tables.sort_unstable();
        tables.dedup();
        // table i's keys from (i + 1) * 1024; every key a step forms is below KEYS
        if (tables.len() + 1) * 1024 + 1024 > KEYS {
            return Err(NotEligible::TooLarge);
        }
        // SAFETY: integers, arrays of them and SSE vectors
        let mut hot: Box<Hot> = unsafe { zeroed() };
        fill_buckets(&mut hot, plan, &tables, kernel)?;
        fill_steps(&mut hot, plan, &tables);
        // past the last depth: key 0 (the empty bucket), reads of the dummy slot
        hot.steps[plan.len()] = Step {
            a: board_byte(DUMMY, 0) as u16,
            b: board_byte(DUMMY, 0) as u16,
            ..Step::default()
        };
        let two_reads = hot.steps[..=plan.len()]
            .iter()
            .any(|s| s.b as usize / size_of::<Frame>() != DUMMY);
        for p in 0..256 {
            let mut b = [0u8; 32];
            b[p >> 3] = 1 << (p & 7);
            hot.oh[p] = halves(&b);
        }
        let mut free = [0u8; 32];
        for p in 0..plan.pieces {
            if plan.initial_used[p] == 0 {
                free[p >> 3] |= 1 << (p & 7);
            }
        }
        Ok(Tables {
            hot,
            depths: plan.len(),
            free,
            plan_pos: plan.depths.iter().map(|d| d.pos).collect(),
            two_reads,
            kernel,
        })
    }

    /// The offset of the bucket of `key`.
    fn bucket(&self, key: usize) -> usize {
        self.hot.keyb[key] as usize
    }

    /// The mask of `bucket`'s candidates whose pieces are free in `free`, worked out
    /// without SSSE3 (a lane's start).
    fn mask(&self, bucket: usize, free: &[u8; 32]) -> u32 {
        self.hot
            .cands(bucket)
            .iter()
            .enumerate()
            .filter(|(_, x)| {
                let p = piece_of(**x);
                free[p >> 3] & (1 << (p & 7)) != 0
            })
            .fold(0, |m, (i, _)| m | 1 << i)
    }
}

impl Form for Tables {
    type Lanes = [Lane; LANES];
    const LANES: usize = LANES;
    const STOP: usize = STOP;

    fn lanes(&self) -> Box<[Lane; LANES]> {
        // SAFETY: integers, arrays of them and SSE vectors
        let mut lanes: Box<[Lane; LANES]> = unsafe { zeroed() };
        for l in lanes.iter_mut() {
            l.h.d = STOP;
        }
        lanes
    }

    fn head(lanes: &[Lane; LANES], slot: usize) -> &Head {
        &lanes[slot].h
    }

    fn head_mut(lanes: &mut [Lane; LANES], slot: usize) -> &mut Head {
        &mut lanes[slot].h
    }

    fn start(&self, lanes: &mut [Lane; LANES], slot: usize, path: &[Placement], floor: usize) {
        let t = &*self.hot;
        let lane = &mut lanes[slot];
        // the slots of depths past the path are written before any key reads them
        for f in lane.frames.iter_mut() {
            f.nodes = 0;
        }
        let mut free = self.free;
        let mut up = at(STOP) as u32;
        let mut prev = 0;
        let frame = |lane: &mut Lane, depth: usize, free: &[u8; 32], rem, base, up| {
            let f = &mut lane.frames[depth];
            f.free = halves(free);
            f.rem = rem;
            f.base = base;
            f.up = up;
        };
        for (depth, p) in path.iter().enumerate() {
            // SAFETY: a path is no longer than the plan's depths
            let bucket = self.bucket(unsafe { t.key::<true>(&lane.frames, at(depth), prev) });
            let cands = t.cands(bucket);
            let i = cands
                .iter()
                .position(|&x| piece_of(x) == p.piece as usize && rot_of(x) == p.rot)
                .expect("a checked path's placement is in its bucket");
            // the candidates after this one
            let rem = self.mask(bucket, &free) & !((2u32 << i) - 1);
            frame(lane, depth, &free, rem, bucket as u32, up);
            let c = cands[i];
            lane.frames[depth].board = c;
            let piece = piece_of(c);
            free[piece >> 3] &= !(1 << (piece & 7));
            prev = c;
            if depth >= floor && rem != 0 {
                up = at(depth) as u32;
            }
        }
        let depth = path.len();
        // SAFETY: as above
        let bucket = self.bucket(unsafe { t.key::<true>(&lane.frames, at(depth), prev) });
        let rem = self.mask(bucket, &free);
        frame(lane, depth, &free, rem, bucket as u32, up);
        lane.h.d = if rem != 0 { depth } else { up as usize / at(1) };
    }

    fn step(&self, lanes: &mut [Lane; LANES], slot: usize) {
        // SAFETY: the kernel's features were found when the tables were built for it;
        // the driver steps lanes at real depths only
        unsafe {
            match self.kernel {
                WideKernel::Ssse3 => Ssse3::step_alone(&self.hot, &mut lanes[slot]),
                WideKernel::Avx512 => Avx512::step_alone(&self.hot, &mut lanes[slot]),
            }
        }
    }

    fn placement(&self, lanes: &[Lane; LANES], slot: usize, depth: usize) -> Placement {
        let c = lanes[slot].frames[depth % D].board;
        Placement::new(self.plan_pos[depth], piece_of(c), rot_of(c))
    }

    fn nodes(&self, lanes: &[Lane; LANES], slot: usize) -> Vec<u64> {
        lanes[slot].frames[..self.depths]
            .iter()
            .map(|f| f.nodes)
            .collect()
    }

    fn drive(&self, lanes: &mut [Lane; LANES], live: &[usize]) {
        match (self.kernel, self.two_reads) {
            (WideKernel::Ssse3, true) => self.drive_with::<true, Ssse3>(lanes, live),
            (WideKernel::Ssse3, false) => self.drive_with::<false, Ssse3>(lanes, live),
            (WideKernel::Avx512, true) => self.drive_with::<true, Avx512>(lanes, live),
            (WideKernel::Avx512, false) => self.drive_with::<false, Avx512>(lanes, live),
        }
    }
}

impl Tables {
    /// Whether some depth's key reads two colours from the board (fill orders other
    /// than scans), so the kernel does too.
    pub(crate) fn two_reads(&self) -> bool {
        self.two_reads
    }

    /// The instructions the step works a child's mask out with.
    pub(crate) fn kernel(&self) -> WideKernel {
        self.kernel
    }

    fn drive_with<const TWO: bool, K: Kernel>(&self, lanes: &mut [Lane; LANES], live: &[usize]) {
        let t = &*self.hot;
        // SAFETY (each call): the kernel's features were found when the tables were built
        // for it; with `TWO` unset no step's second read is a real cell's (`Tables::new`)
        // some of the lanes, through references
        macro_rules! some {
            ($n:literal) => {{
                let at: [usize; $n] = live.try_into().expect("as many lanes");
                let l = lanes.get_disjoint_mut(at).expect("distinct lanes");
                unsafe { K::drive::<$n, TWO, _>(t, l) }
            }};
        }
        match live.len() {
            // every lane: they are the slots in order
            n if n == LANES => unsafe { K::drive::<LANES, TWO, _>(t, lanes) },
            1 => some!(1),
            2 => some!(2),
            3 => some!(3),
            4 => some!(4),
            5 => some!(5),
            6 => some!(6),
            7 => some!(7),
            _ => unreachable!("one lane or more, and at most every lane"),
        }
    }
}
