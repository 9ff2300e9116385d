//! The wide form's kernels: one step of a lane ([`LaneStep::step`], in instructions), the loop that
//! steps the lanes in turn ([`drive_n`]), and their two instances, each a
//! `#[target_feature]` function for its instructions ([`Ssse3`], [`Avx512`]; which one
//! runs is the tables' [`WideKernel`], chosen when they are built). The tables they read
//! and the frames they write are the module's (`super`); every address a step forms is
//! in range by the way those are built ([`LaneStep::step`] says why).
//!
//! # Why the step is written in instructions
//! The same step in Rust (intrinsics, and a `cmov` in inline assembly for each select)
//! compiled to 45.6 instructions a node with SSSE3 and 39.8 with AVX-512 on the hard
//! boards' scan orders: LLVM kept the six lanes' positions in registers that moved
//! round to round (ten or so `mov`s a round), spilled three values, split an address
//! into a shift and an add, and tested the watches with six subtractions and five ANDs.
//! Written out, a step is 39 instructions with SSSE3 and 34 with AVX-512, each lane's
//! position stays in one register through the loop, and a round's watches are a compare
//! and a branch a lane: 41.6 and 36.6 a node, 1.00-1.05x the speed on an Intel Xeon
//! (docs/benchmarks.md). Reading the colour facing the cell before from the board
//! instead of rotating it out of the candidate saves one more instruction a step but
//! waits for the candidate's store: 3% slower with AVX-512, so the rotation stays.

use std::mem::offset_of;

use super::{Bucket, Frame, HEAD, Hot, LANES, Lane, MOST_LANES, Step, at};
#[cfg(doc)]
use super::{STOP, WideKernel};

/// Byte offsets the step's instructions address with: a frame's fields from a lane's
/// start (`F_*`; the child's are one [`Frame`] further), a depth's [`Step`] fields from
/// the position of the depth before (`S_*`: the step reads the next depth's), and the
/// tables from the start of [`Hot`].
const FRAMES: usize = offset_of!(Lane, frames);
const F_FREE: usize = FRAMES + offset_of!(Frame, free);
const F_REM: usize = FRAMES + offset_of!(Frame, rem);
const F_BASE: usize = FRAMES + offset_of!(Frame, base);
const F_UP: usize = FRAMES + offset_of!(Frame, up);
const F_NODES: usize = FRAMES + offset_of!(Frame, nodes);
const F_BOARD: usize = FRAMES + offset_of!(Frame, board);
const CHILD: usize = size_of::<Frame>();
const S_A: usize = size_of::<Step>() + offset_of!(Step, a);
const S_B: usize = size_of::<Step>() + offset_of!(Step, b);
const S_TABLE: usize = size_of::<Step>() + offset_of!(Step, table);
const S_M: usize = size_of::<Step>() + offset_of!(Step, m);
const S_ROT: usize = size_of::<Step>() + offset_of!(Step, rot);
const KEYB: usize = offset_of!(Hot, keyb);
const RECORDS: usize = offset_of!(Hot, records);
/// A bucket's candidates, from its offset in words times 8 plus the records' start.
const CANDS: usize = RECORDS + HEAD * 8;
const IA: usize = RECORDS + offset_of!(Bucket, ia);
const IB: usize = RECORDS + offset_of!(Bucket, ib);
const BITS: usize = RECORDS + offset_of!(Bucket, bits);
const OH: usize = offset_of!(Hot, oh);
// a position is four times a frame's offset and a step's own (see `Frame`)
const _: () = assert!(size_of::<Frame>() == 4 * at(1) && size_of::<Step>() == at(1));

/// One step of a lane (see [`LaneStep::step`]) in instructions: the common part of both kernels,
/// with `$free` (the child's free set, stored; `rcx` holds the piece's offset in `oh`),
/// `$two` (the key's second colour read from the board and added; or nothing) and
/// `$mask` (the child's mask into `{a:e}` from the bucket at `{b}` words) written in.
macro_rules! step_asm {
    ($t:expr, $l:expr, $pos:ident, $lane:expr, [$($free:literal),*], [$($two:literal),*],
     [$($mask:literal),*], $($clobbers:tt)*) => {
        std::arch::asm!(
            // the frame's untaken candidates, bucket and way up; the rest and where to go
            // when none is left (here, if any is)
            "mov {a:e}, dword ptr [{l} + {p}*4 + {f_rem}]",
            "mov {b:e}, dword ptr [{l} + {p}*4 + {f_base}]",
            "mov {u:e}, dword ptr [{l} + {p}*4 + {f_up}]",
            "blsr ecx, {a:e}",
            "cmovnz {u}, {p}",
            "mov dword ptr [{l} + {p}*4 + {f_rem}], ecx",
            "inc qword ptr [{l} + {p}*4 + {f_nodes}]",
            // the candidate, placed on the board
            "tzcnt {a:e}, {a:e}",
            "lea {b}, [{t} + {b}*8]",
            "mov {c}, qword ptr [{b} + {a}*8 + {cands}]",
            "mov qword ptr [{l} + {p}*4 + {f_board}], {c}",
            "movzx ecx, {c:x}",
            $($free,)*
            // the next depth's key: a colour from the board, one from the candidate
            "movzx {b:e}, word ptr [{t} + {p} + {s_a}]",
            "movzx {b:e}, byte ptr [{l} + {b} + {frames}]",
            "shl {b:e}, 5",
            "add {b:e}, dword ptr [{t} + {p} + {s_table}]",
            $($two,)*
            "movzx ecx, byte ptr [{t} + {p} + {s_rot}]",
            "ror {c}, cl",
            "and {c:e}, dword ptr [{t} + {p} + {s_m}]",
            "add {b:e}, {c:e}",
            "movzx {b:e}, word ptr [{t} + {b}*2 + {keyb}]",
            $($mask,)*
            // the child's frame, and the lane's next position
            "mov dword ptr [{l} + {p}*4 + {f_rem} + {child}], {a:e}",
            "mov dword ptr [{l} + {p}*4 + {f_base} + {child}], {b:e}",
            "mov dword ptr [{l} + {p}*4 + {f_up} + {child}], {u:e}",
            "add {p}, {one}",
            "test {a:e}, {a:e}",
            "cmovz {p}, {u}",
            // (what only some kernels or keys read)
            "/* {s_b} {ib} */",
            t = in(reg) $t,
            l = in(reg) $l,
            p = inout(reg) $pos,
            a = out(reg) _,
            b = out(reg) _,
            u = out(reg) _,
            c = out(reg) _,
            out("rcx") _,
            f_free = const $lane + F_FREE,
            f_rem = const $lane + F_REM,
            f_base = const $lane + F_BASE,
            f_up = const $lane + F_UP,
            f_nodes = const $lane + F_NODES,
            f_board = const $lane + F_BOARD,
            frames = const $lane + FRAMES,
            child = const CHILD,
            s_a = const S_A,
            s_b = const S_B,
            s_table = const S_TABLE,
            s_m = const S_M,
            s_rot = const S_ROT,
            keyb = const KEYB,
            cands = const CANDS,
            ia = const IA,
            ib = const IB,
            bits = const BITS,
            oh = const OH,
            one = const at(1),
            $($clobbers)*
            options(nostack),
        )
    };
}

/// How a kernel steps a lane: the common instructions of `step_asm!` with its own for
/// the child's free set and mask.
pub(super) trait LaneStep {
    /// One step of a lane at position `pos` (see [`Frame`]): commits the node there (its
    /// count, the board's slot), writes the child's frame (free set, mask, bucket, way up)
    /// and returns the position of the lane's next step: the child if it has candidates,
    /// else the frame itself if it has candidates left, else its way up; written in
    /// instructions (`step_asm!`; the module's docs say why). The lane starts `LANE`
    /// times `S::STRIDE` bytes from `l`; its head is the caller's.
    ///
    /// # Safety
    /// `l` plus `LANE` times `S::STRIDE` bytes is a lane's start; this kernel's features
    /// are available, the tables were filled for it, and `pos` is a real
    /// depth's (below the plan's depths, not [`STOP`]), as the driver only steps such lanes.
    /// Every address the step forms is then in range: `pos + 16` is at most the plan's
    /// depths' < D's; a bucket's mask has bits only for its candidates, so `base + HEAD +
    /// i` is one of its candidates in `records`; keys are below KEYS (`Hot::key`,
    /// `Tables::new`); `keyb` holds offsets of built buckets; a candidate's low 16 bits are
    /// its piece (below 256) times the size of an `oh` entry (`Tables::new`), inside `oh`;
    /// with `TWO` unset no step's second read is a real cell's.
    unsafe fn step<const TWO: bool, const LANE: usize, S: Stride>(
        t: *const Hot,
        l: *mut Lane,
        pos: usize,
    ) -> usize;
}

/// SSSE3: the free set as two halves, a `pshufb` of each, one compare.
pub(super) struct Ssse3;

impl LaneStep for Ssse3 {
    #[inline(always)]
    unsafe fn step<const TWO: bool, const LANE: usize, S: Stride>(
        t: *const Hot,
        l: *mut Lane,
        mut pos: usize,
    ) -> usize {
        // SAFETY: the caller's (see `LaneStep::step`); the frames, `oh` entries and buckets are
        // 16-byte aligned (`Frame`, `Hot`, `fill_buckets`)
        unsafe {
            macro_rules! ssse3 {
                ($two:tt) => {
                    step_asm!(t, l, pos, LANE * S::STRIDE,
                        [
                            "movdqa xmm0, xmmword ptr [{t} + rcx + {oh}]",
                            "movdqa xmm1, xmmword ptr [{t} + rcx + {oh} + 16]",
                            "pandn xmm0, xmmword ptr [{l} + {p}*4 + {f_free}]",
                            "pandn xmm1, xmmword ptr [{l} + {p}*4 + {f_free} + 16]",
                            "movdqa xmmword ptr [{l} + {p}*4 + {f_free} + {child}], xmm0",
                            "movdqa xmmword ptr [{l} + {p}*4 + {f_free} + {child} + 16], xmm1"
                        ],
                        $two,
                        [
                            "pshufb xmm0, xmmword ptr [{t} + {b}*8 + {ia}]",
                            "pshufb xmm1, xmmword ptr [{t} + {b}*8 + {ib}]",
                            "por xmm0, xmm1",
                            "pand xmm0, xmmword ptr [{t} + {b}*8 + {bits}]",
                            "pcmpeqb xmm0, xmmword ptr [{t} + {b}*8 + {bits}]",
                            "pmovmskb {a:e}, xmm0"
                        ],
                        out("xmm0") _, out("xmm1") _,)
                };
            }
            if TWO {
                ssse3!([
                    "movzx ecx, word ptr [{t} + {p} + {s_b}]",
                    "movzx ecx, byte ptr [{l} + rcx + {frames}]",
                    "add {b:e}, ecx"
                ]);
            } else {
                ssse3!([]);
            }
        }
        pos
    }
}

/// AVX-512 (VBMI, BW, VL): the free set as one 256-bit register, one `vpermb` across it,
/// one `vptestmb` into the mask.
pub(super) struct Avx512;

impl LaneStep for Avx512 {
    #[inline(always)]
    unsafe fn step<const TWO: bool, const LANE: usize, S: Stride>(
        t: *const Hot,
        l: *mut Lane,
        mut pos: usize,
    ) -> usize {
        // SAFETY: the caller's (see `LaneStep::step`); the upper half of the `vpermb` index (zero,
        // from the 16-byte load) picks bytes the test never reads
        unsafe {
            macro_rules! avx512 {
                ($two:tt) => {
                    step_asm!(t, l, pos, LANE * S::STRIDE,
                        [
                            "vmovdqu ymm0, ymmword ptr [{t} + rcx + {oh}]",
                            "vpandn ymm0, ymm0, ymmword ptr [{l} + {p}*4 + {f_free}]",
                            "vmovdqa ymmword ptr [{l} + {p}*4 + {f_free} + {child}], ymm0"
                        ],
                        $two,
                        [
                            "vmovdqa xmm1, xmmword ptr [{t} + {b}*8 + {ia}]",
                            "vpermb ymm1, ymm1, ymm0",
                            "vptestmb k1, xmm1, xmmword ptr [{t} + {b}*8 + {bits}]",
                            "kmovw {a:e}, k1"
                        ],
                        out("ymm0") _, out("ymm1") _, out("k1") _,)
                };
            }
            if TWO {
                avx512!([
                    "movzx ecx, word ptr [{t} + {p} + {s_b}]",
                    "movzx ecx, byte ptr [{l} + rcx + {frames}]",
                    "add {b:e}, ecx"
                ]);
            } else {
                avx512!([]);
            }
        }
        pos
    }
}

/// How far apart the lanes a drive steps are from the address it is given for each:
/// [`size_of::<Lane>()`] for a thread's lanes in their array (one base address, each
/// lane at a fixed offset from it: the common case, and ~15% faster than through
/// pointers), 0 for lanes through references (each its own address).
pub(super) trait Stride {
    const STRIDE: usize;
}

/// `N` lanes, as the kernel reaches them: all of a thread's in their array, or some of
/// them through references.
pub(super) trait LaneRefs<const N: usize>: Stride {
    fn lane(&mut self, k: usize) -> &mut Lane;
    /// The address lane `k` is [`Stride::STRIDE`] times `k` bytes from.
    fn base(&mut self, k: usize) -> *mut Lane;
}

impl Stride for &mut [Lane; LANES] {
    const STRIDE: usize = size_of::<Lane>();
}

impl LaneRefs<LANES> for &mut [Lane; LANES] {
    #[inline(always)]
    fn lane(&mut self, k: usize) -> &mut Lane {
        &mut self[k]
    }
    #[inline(always)]
    fn base(&mut self, _: usize) -> *mut Lane {
        self.as_mut_ptr()
    }
}

impl<const N: usize> Stride for [&mut Lane; N] {
    const STRIDE: usize = 0;
}

impl<const N: usize> LaneRefs<N> for [&mut Lane; N] {
    #[inline(always)]
    fn lane(&mut self, k: usize) -> &mut Lane {
        self[k]
    }
    #[inline(always)]
    fn base(&mut self, k: usize) -> *mut Lane {
        &raw mut *self[k]
    }
}

/// Steps `N` lanes in turn until one needs its cold path. Each enters with steps left on
/// its countdown and its next node above its watch (the cold path leaves it so). They
/// take as many steps as the shortest countdown at most, so one counter stands for all;
/// after each round, one compare a lane asks whether any is at or past its watch.
///
/// # Safety
/// `K`'s features are available and the tables were filled for it.
#[inline(always)]
unsafe fn drive_n<const N: usize, const TWO: bool, K: LaneStep, L: LaneRefs<N>>(
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
        };
        (@lane $k:literal, $last:literal) => {
            if $k < N {
                if $last {
                    last[$k] = d[$k];
                }
                // SAFETY: the features are the caller's; each lane is at a real depth
                // (above its watch, which is below the plan's depths)
                d[$k] = unsafe { K::step::<TWO, $k, L>(t, lanes.base($k), d[$k]) };
            }
        };
    }
    // a lane stops at its watch: one compare and a branch (not taken) each
    let watched = |d: &[usize; MOST_LANES]| {
        let mut any = false;
        for k in 0..N {
            if d[k] >= watch[k] {
                any = true;
                break;
            }
        }
        any
    };
    // a lane's last depth matters only where its countdown ends (the cold path's cursor);
    // after a watch, the cold path takes the next step itself. So only the round that
    // may end the countdowns keeps them (not a store a lane a round)
    let mut at_watch = false;
    let full = most.saturating_sub(1);
    let mut steps = full;
    for r in 0..full {
        round!(false);
        if watched(&d) {
            at_watch = true;
            steps = r + 1;
            break;
        }
    }
    if !at_watch {
        round!(true);
        steps += 1;
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

/// A kernel's entry points, with its features enabled.
pub(super) trait Kernel: LaneStep {
    /// [`drive_n`] with this kernel.
    ///
    /// # Safety
    /// As [`drive_n`].
    unsafe fn drive<const N: usize, const TWO: bool, L: LaneRefs<N>>(t: &Hot, lanes: L);
    /// One step of one lane alone (the cold path's).
    ///
    /// # Safety
    /// As [`LaneStep::step`]; the lane is at a real depth.
    unsafe fn step_alone(t: &Hot, l: &mut Lane);
}

/// `$k`'s entry points with `$features` enabled, behind [`Kernel`]: [`drive_n`] as
/// `$drive` and one lone step as `$alone` (a `#[target_feature]` function must be a free
/// function, and each kernel needs its own).
macro_rules! entries {
    ($k:ty, $features:literal, $drive:ident, $alone:ident) => {
        /// [`drive_n`] with this kernel's child masks.
        ///
        /// # Safety
        /// The kernel's features are available; the tables were filled for it.
        #[target_feature(enable = $features)]
        unsafe fn $drive<const N: usize, const TWO: bool, L: LaneRefs<N>>(t: &Hot, lanes: L) {
            // SAFETY: the caller's
            unsafe { drive_n::<N, TWO, $k, L>(t, lanes) }
        }

        /// One step of one lane alone (the cold path's) with this kernel's child masks.
        ///
        /// # Safety
        /// The kernel's features are available; the tables were filled for it; the lane
        /// is at a real depth.
        #[target_feature(enable = $features)]
        unsafe fn $alone(t: &Hot, l: &mut Lane) {
            let d = l.h.d;
            l.h.last = d;
            // SAFETY: the caller's
            l.h.d = unsafe { <$k>::step::<true, 0, [&mut Lane; 1]>(t, l, at(d)) } / at(1);
        }

        impl Kernel for $k {
            #[inline(always)]
            unsafe fn drive<const N: usize, const TWO: bool, L: LaneRefs<N>>(t: &Hot, lanes: L) {
                // SAFETY: the caller's
                unsafe { $drive::<N, TWO, L>(t, lanes) }
            }
            #[inline(always)]
            unsafe fn step_alone(t: &Hot, l: &mut Lane) {
                // SAFETY: the caller's
                unsafe { $alone(t, l) }
            }
        }
    };
}

entries!(Ssse3, "ssse3,bmi1", drive_ssse3, step_alone_ssse3);
entries!(
    Avx512,
    "avx512f,avx512bw,avx512vl,avx512vbmi,bmi1,bmi2",
    drive_avx512,
    step_alone_avx512
);
