//! The wide form's kernels: one step of a lane ([`step`]), the loop that steps the lanes
//! in turn ([`drive_n`]), and their two instances, each a `#[target_feature]` function
//! for its instructions ([`Ssse3`], [`Avx512`]; which one runs is the tables'
//! [`WideKernel`], chosen when they are built). The tables they read and the frames they
//! write are the module's (`super`); every `unsafe` read here is in range by the way
//! those are built (each says why).

use std::arch::x86_64::*;

use super::{Bucket, Frame, HEAD, Hot, LANES, Lane, MOST_LANES, at};
#[cfg(doc)]
use super::{STOP, WideKernel};

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
pub(super) trait Child {
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
pub(super) struct Ssse3;

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
pub(super) struct Avx512;

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
pub(super) trait LaneRefs<const N: usize> {
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

/// A kernel's entry points, with its features enabled.
pub(super) trait Kernel: Child {
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
            l.h.d = unsafe { step::<true, $k>(t, l, at(d)) } / at(1);
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
