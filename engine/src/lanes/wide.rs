//! The wide form of the lane engine: boards of up to 256 pieces and 32 colours (every
//! Eternity II-style 16x16 board), six units at once in one thread.
//!
//! # Frames
//! On a hard 16x16 board most nodes are where 70-95 inner pieces are free (88% of the
//! centre clue's at depths 144-176), so the free pieces cannot be renumbered into one
//! 64-bit word as the narrow form does. Each frame keeps instead the whole 256-bit set of
//! free pieces (two SSE registers) and a *bucket-local* mask of its untaken candidates:
//! bit i is the bucket's candidate i, in the plan's (canonical) order, at most 16 a
//! bucket (E2's largest has 12). A step works out the child's mask from its bucket with
//! two byte shuffles (`pshufb`): per bucket, each candidate's byte of the free set, from
//! its low or its high half, and its bit in that byte; one compare and `pmovmskb` make
//! the mask. Every step is one node, in canonical order, as in the narrow form.
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
//! - the SSSE3/BMI1 kernel ([`drive_n`]) is a `#[target_feature]` function, called only
//!   when [`Tables::new`] found both features on this processor;
//! - the two selects of a step are a `cmov` in inline assembly ([`pick`]): LLVM turned
//!   `select_unpredictable` (and the same select written with masks) into a branch
//!   around a load, and the mispredicts serialised the lanes (0.44x);
//! - the step's table reads are unchecked: every index it forms is in range by the way
//!   the tables are built, which [`Tables::new`] checks (each read says which check).

#![allow(unsafe_code)]

use std::arch::x86_64::*;

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
/// The most lanes [`drive_n`] is written out for.
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
    /// leaves the second read out ([`step`]'s `TWO`): 63.2 -> 59.7 instructions a node
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

/// The candidates left after the lowest (`rem` less its lowest bit), and `a` if any are
/// left, else `b`: one `blsr`, whose zero flag the `cmov` reads (as [`pick`]).
#[inline(always)]
fn take(rem: u32, a: u32, b: u32) -> (u32, u32) {
    let rest: u32;
    let mut r = b;
    // SAFETY: BMI1's `blsr` (every kernel has it) and a conditional move between registers
    unsafe {
        std::arch::asm!(
            "blsr {rest:e}, {rem:e}",
            "cmovnz {r:e}, {a:e}",
            rem = in(reg) rem,
            a = in(reg) a,
            rest = out(reg) rest,
            r = inout(reg) r,
            options(pure, nomem, nostack),
        );
    }
    (rest, r)
}

/// `cond != 0 ? a : b` as a `cmov` (LLVM turned every safe form of this select into a
/// branch; see the module's docs).
#[inline(always)]
fn pick(cond: u32, a: u32, b: u32) -> u32 {
    let mut r = b;
    // SAFETY: a test and a conditional move between registers
    unsafe {
        std::arch::asm!(
            "test {c:e}, {c:e}",
            "cmovnz {r:e}, {a:e}",
            c = in(reg) cond,
            a = in(reg) a,
            r = inout(reg) r,
            options(pure, nomem, nostack),
        );
    }
    r
}

/// How a kernel works out a child's frame: its free set (the parent's less the piece
/// placed) and the mask of its bucket's candidates free in it.
trait Child {
    /// Writes `from` less the piece `oh` to `to` and returns the mask of `bucket`'s
    /// candidates whose pieces are free in it.
    ///
    /// # Safety
    /// The kernel's features are available; the pointers are to live, aligned frames and
    /// an `oh` entry; `bucket` was filled for this kernel.
    unsafe fn child(
        from: *const [__m128i; 2],
        oh: *const [__m128i; 2],
        bucket: &Bucket,
        to: *mut [__m128i; 2],
    ) -> u32;
}

/// SSSE3: the free set as two halves, a `pshufb` of each, one compare.
struct Ssse3;

impl Child for Ssse3 {
    #[inline(always)]
    unsafe fn child(
        from: *const [__m128i; 2],
        oh: *const [__m128i; 2],
        bucket: &Bucket,
        to: *mut [__m128i; 2],
    ) -> u32 {
        // SAFETY: the caller's
        unsafe {
            let (f, oh) = (*from, *oh);
            let free = [_mm_andnot_si128(oh[0], f[0]), _mm_andnot_si128(oh[1], f[1])];
            let got = _mm_or_si128(
                _mm_shuffle_epi8(free[0], bucket.ia),
                _mm_shuffle_epi8(free[1], bucket.ib),
            );
            let bits = bucket.bits;
            let mask = _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_and_si128(got, bits), bits)) as u32;
            *to = free;
            mask
        }
    }
}

/// AVX-512 (VBMI, BW, VL): the free set as one 256-bit register, one `vpermb` across it,
/// one `vptestmb` into the mask.
struct Avx512;

impl Child for Avx512 {
    #[inline(always)]
    unsafe fn child(
        from: *const [__m128i; 2],
        oh: *const [__m128i; 2],
        bucket: &Bucket,
        to: *mut [__m128i; 2],
    ) -> u32 {
        // SAFETY: the caller's; a frame's set and an `oh` entry are 32 bytes each
        unsafe {
            let f = _mm256_loadu_si256(from.cast());
            let oh = _mm256_loadu_si256(oh.cast());
            let free = _mm256_andnot_si256(oh, f);
            // the upper half of the index picks bytes the test below never reads
            let got = _mm256_permutexvar_epi8(_mm256_castsi128_si256(bucket.ia), free);
            let mask = _mm_test_epi8_mask(_mm256_castsi256_si128(got), bucket.bits) as u32;
            _mm256_storeu_si256(to.cast(), free);
            mask
        }
    }
}

/// One step of lane `l` at position `pos` (see [`Frame`]): commits the node there, writes
/// the child's frame, and returns the position of the lane's next step (the child, the
/// next sibling or the frame above). The lane's head is the caller's: the kernel keeps
/// each lane's position in a register through its loop.
///
/// # Safety
/// `K`'s features are available, the tables were filled for `K`, and `pos` is a real
/// depth's (below the plan's depths, not [`STOP`]), as the driver only steps such lanes.
#[inline(always)]
unsafe fn step<const TWO: bool, K: Child>(t: &Hot, l: &mut Lane, pos: usize) -> usize {
    // SAFETY (every read below): `pos` is a real depth's (the caller's), `pos + 16` at most
    // the plan's depths' < D's; a bucket's mask has bits only for its candidates, so
    // `base + HEAD + i` is one of its candidates in `records`; keys are below KEYS
    // (`Hot::key`, `Tables::new`); `keyb` holds offsets of built buckets; a candidate's
    // low 16 bits are its piece (below 256) times the size of an `oh` entry
    // (`Tables::new`), inside `oh`
    unsafe {
        // the frame (four times the position) and its child (the next frame)
        let fp = l
            .frames
            .as_mut_ptr()
            .cast::<u8>()
            .add(pos * 4)
            .cast::<Frame>();
        let fr = &mut *fp;
        let rem = fr.rem;
        let i = rem.trailing_zeros() as usize;
        let (rest, up) = take(rem, pos as u32, fr.up);
        fr.rem = rest;
        fr.nodes += 1;
        let words = t.records.0.as_ptr();
        let c = *words.add(fr.base as usize + HEAD + i);
        fr.board = c;
        // the piece's bits, at the byte offset the candidate's top bits hold
        let oh =
            t.oh.as_ptr()
                .cast::<u8>()
                .add(c as u16 as usize)
                .cast::<[__m128i; 2]>();
        let next = pos + at(1);
        let key = t.key::<TWO>(&l.frames, next, c);
        let base = *t.keyb.get_unchecked(key) as u32;
        let bucket = &*words.add(base as usize).cast::<Bucket>();
        let child = fp.add(1);
        let mask = K::child(&raw const fr.free, oh, bucket, &raw mut (*child).free);
        let child = &mut *child;
        child.rem = mask;
        child.base = base;
        child.up = up;
        pick(mask, next as u32, up) as usize
    }
}

/// `N` lanes, as the kernel reaches them: all four of a thread's in their array (one
/// base address, each lane at a fixed offset from it: the common case, and ~15% faster
/// than through four pointers), or some of them through references.
trait LaneRefs<const N: usize> {
    fn lane(&mut self, k: usize) -> &mut Lane;
}

impl LaneRefs<LANES> for &mut [Lane; LANES] {
    #[inline(always)]
    fn lane(&mut self, k: usize) -> &mut Lane {
        &mut self[k]
    }
}

impl<const N: usize> LaneRefs<N> for [&mut Lane; N] {
    #[inline(always)]
    fn lane(&mut self, k: usize) -> &mut Lane {
        self[k]
    }
}

/// Steps `N` lanes in turn until one needs its cold path. Each enters with steps left on
/// its countdown and its next node above its watch (the cold path leaves it so). They
/// take as many steps as the shortest countdown at most, so one counter stands for all;
/// and a depth below its watch is one where `depth - watch` is negative, so one sign test
/// of the lanes' ANDed differences asks it of every lane.
///
/// # Safety
/// `K`'s features are available and the tables were filled for it.
#[inline(always)]
unsafe fn drive_n<const N: usize, const TWO: bool, K: Child, L: LaneRefs<N>>(
    t: &Hot,
    mut lanes: L,
) {
    let most = (0..N).map(|k| lanes.lane(k).h.left).min().unwrap_or(0);
    // each lane's position, last position and watch's position as locals (registers:
    // the lanes are written out one by one, so every index is a constant), not through
    // the lanes' memory, where each step would store its depth and the next load it back
    let mut d = [0usize; MOST_LANES];
    let mut watch = [0usize; MOST_LANES];
    let mut last = [0usize; MOST_LANES];
    for k in 0..N {
        d[k] = at(lanes.lane(k).h.d);
        watch[k] = at(lanes.lane(k).h.watch);
    }
    let mut steps = 0;
    macro_rules! round {
        // one step of every lane; `$last`: each lane's depth before it is kept as its
        // last depth
        ($last:literal) => {
            round!(@lane 0, $last);
            round!(@lane 1, $last);
            round!(@lane 2, $last);
            round!(@lane 3, $last);
            round!(@lane 4, $last);
            round!(@lane 5, $last);
            round!(@lane 6, $last);
            round!(@lane 7, $last);
            steps += 1;
        };
        (@lane $k:literal, $last:literal) => {
            if $k < N {
                if $last {
                    last[$k] = d[$k];
                }
                // SAFETY: the features are the caller's; each lane is at a real depth
                // (above its watch, which is below the plan's depths)
                d[$k] = unsafe { step::<TWO, K>(t, lanes.lane($k), d[$k]) };
            }
        };
    }
    // `depth - watch` is negative in every lane until one is at or past its watch
    let watched = |d: &[usize; MOST_LANES]| {
        let mut above = usize::MAX;
        for k in 0..N {
            above &= d[k].wrapping_sub(watch[k]);
        }
        (above as isize) >= 0
    };
    // a lane's last depth matters only where its countdown ends (the cold path's cursor);
    // after a watch, the cold path takes the next step itself. So only the round that
    // may end the countdowns keeps them (not a store a lane a round)
    let mut at_watch = false;
    while steps + 1 < most {
        round!(false);
        if watched(&d) {
            at_watch = true;
            break;
        }
    }
    if !at_watch {
        round!(true);
    }
    for k in 0..N {
        let h = &mut lanes.lane(k).h;
        h.d = d[k] / at(1);
        if !at_watch {
            h.last = last[k] / at(1);
        }
        h.left -= steps;
    }
}

/// [`drive_n`] with SSSE3's child masks.
///
/// # Safety
/// SSSE3 and BMI1 are available; the tables were filled for [`WideKernel::Ssse3`].
#[target_feature(enable = "ssse3,bmi1")]
unsafe fn drive_ssse3<const N: usize, const TWO: bool, L: LaneRefs<N>>(t: &Hot, lanes: L) {
    // SAFETY: the caller's
    unsafe { drive_n::<N, TWO, Ssse3, L>(t, lanes) }
}

/// [`drive_n`] with AVX-512's child masks.
///
/// # Safety
/// The features of [`WideKernel::Avx512`] are available; the tables were filled for it.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,bmi1,bmi2")]
unsafe fn drive_avx512<const N: usize, const TWO: bool, L: LaneRefs<N>>(t: &Hot, lanes: L) {
    // SAFETY: the caller's
    unsafe { drive_n::<N, TWO, Avx512, L>(t, lanes) }
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

/// A kernel's entry points, with its features enabled.
trait Kernel: Child {
    /// [`drive_n`] with this kernel.
    ///
    /// # Safety
    /// As [`drive_n`].
    unsafe fn drive<const N: usize, const TWO: bool, L: LaneRefs<N>>(t: &Hot, lanes: L);
    /// One step of one lane alone (the cold path's).
    ///
    /// # Safety
    /// As [`step`]; the lane is at a real depth.
    unsafe fn step_alone(t: &Hot, l: &mut Lane);
}

impl Kernel for Ssse3 {
    #[inline(always)]
    unsafe fn drive<const N: usize, const TWO: bool, L: LaneRefs<N>>(t: &Hot, lanes: L) {
        // SAFETY: the caller's
        unsafe { drive_ssse3::<N, TWO, L>(t, lanes) }
    }
    #[inline(always)]
    unsafe fn step_alone(t: &Hot, l: &mut Lane) {
        // SAFETY: the caller's
        unsafe { step_alone_ssse3(t, l) }
    }
}

impl Kernel for Avx512 {
    #[inline(always)]
    unsafe fn drive<const N: usize, const TWO: bool, L: LaneRefs<N>>(t: &Hot, lanes: L) {
        // SAFETY: the caller's
        unsafe { drive_avx512::<N, TWO, L>(t, lanes) }
    }
    #[inline(always)]
    unsafe fn step_alone(t: &Hot, l: &mut Lane) {
        // SAFETY: the caller's
        unsafe { step_alone_avx512(t, l) }
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

/// One step of one lane alone (the cold path's), with SSSE3's child masks.
///
/// # Safety
/// SSSE3 and BMI1 are available; the tables were filled for [`WideKernel::Ssse3`]; the
/// lane is at a real depth.
#[target_feature(enable = "ssse3,bmi1")]
unsafe fn step_alone_ssse3(t: &Hot, l: &mut Lane) {
    let d = l.h.d;
    l.h.last = d;
    // SAFETY: the caller's
    l.h.d = unsafe { step::<true, Ssse3>(t, l, at(d)) } / at(1);
}

/// One step of one lane alone (the cold path's), with AVX-512's child masks.
///
/// # Safety
/// The features of [`WideKernel::Avx512`] are available; the tables were filled for it;
/// the lane is at a real depth.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,bmi1,bmi2")]
unsafe fn step_alone_avx512(t: &Hot, l: &mut Lane) {
    let d = l.h.d;
    l.h.last = d;
    // SAFETY: the caller's
    l.h.d = unsafe { step::<true, Avx512>(t, l, at(d)) } / at(1);
}
