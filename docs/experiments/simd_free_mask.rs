//! Experiment (issue #15, session 19; docs/benchmarks.md): a candidate walk with no used
//! test, for 16x16 boards. Each level works out, without a branch, which candidates of
//! its bucket are free (SSSE3: the used set is a 256-bit mask in two registers; the
//! bucket holds, per candidate, the byte of the mask its piece is in and the bit within;
//! two `pshufb`, an `or`, an `and` and a compare give one flag per candidate, `pmovmskb`
//! makes them a mask), then visits the set bits lowest first, so the same order as the
//! branchy walk. The "mispredict-free candidate stream" the field notes leave open. Built
//! on the tables and branchy walk of `edge_tables.rs`, as `branchless_lanes.rs` is
//! (row-major, no hints); not part of the build.
//!
//! ```sh
//! rustc --edition=2021 -O -Ctarget-cpu=native -Cpanic=abort simd_free_mask.rs -o sfm
//! ./sfm puzzles/brendan/set1/pieces_06x06.txt check 100000000000  # the whole tree, both walks
//! ./sfm puzzles/e2/e2pieces.txt check 50000000                    # per-depth counts, both walks
//! ./sfm puzzles/e2/e2pieces.txt scalar 300000000                  # the branchy walk, M nodes/s
//! ./sfm puzzles/e2/e2pieces.txt simd 300000000                    # this walk
//! ```
//!
//! Result on the Zen 4 machine (the real E2 pieces, no clue, 300 M nodes from the root,
//! alternated rounds). Callgrind (x86-64-v3, 20 M nodes) says this walk has 0.91
//! modelled mispredicts per node against the branchy walk's 2.27, and fewer instructions.
//! But the used test is now a data dependence: the next key, the bucket's lanes (a vector
//! load), the shuffles, the mask, `tzcnt`, the candidate's load and its colour make the
//! next key, and the whole chain is walked every node. With the buckets found through an
//! index (one load more on the chain) it ran 67-72 M nodes/s against the branchy walk's
//! 66-72; with the buckets addressed by key and the level's mask, bucket and used set
//! held in registers on the way down (this file) 73-82 against 67-76, ~1.13x. The
//! compiled list walk runs the same board at ~100-120 (~25 cycles a node): this chain,
//! at ~30 cycles of latency with the compiled engine's shortest form of each step, would
//! not be faster than it.
include!("edge_tables.rs");

use std::arch::x86_64::*;

#[derive(Clone, Copy)]
#[repr(C, align(16))]
struct Rec { il: [u8; 16], ih: [u8; 16], bits: [u8; 16], base: u32, _p: [u32; 3] }

struct Simd { recs: Vec<Rec>, recof: Vec<u32>, oh: Vec<[__m128i; 2]>, bykey: Vec<Rec> }

fn simd_tables(t: &Tables, n: usize) -> Simd {
    let empty = Rec { il: [0x80; 16], ih: [0x80; 16], bits: [0; 16], base: 0, _p: [0; 3] };
    let mut recs = vec![empty];
    let mut recof = vec![0u32; t.first.len()];
    let mut maxk = 0;
    for k in 0..t.first.len() {
        let f = t.first[k] as usize;
        if t.cands[f] & 0xFFFF == t.taken as u64 { continue; }
        let mut r = empty; r.base = f as u32;
        let mut j = 0;
        loop {
            let c = t.cands[f + j];
            let p = (c & 0xFFFF) as usize;
            assert!(j < 16);
            let by = p >> 3;
            if by < 16 { r.il[j] = by as u8 } else { r.ih[j] = (by - 16) as u8 }
            r.bits[j] = 1 << (p & 7);
            j += 1;
            if c & LASTB != 0 { break; }
        }
        maxk = maxk.max(j);
        recof[k] = recs.len() as u32;
        recs.push(r);
    }
    eprintln!("{} buckets, largest {}", recs.len() - 1, maxk);
    let mut oh = Vec::new();
    for p in 0..n + 8 {
        let mut b = [0u8; 32];
        if p < 256 { b[p >> 3] = 1 << (p & 7); }
        unsafe { oh.push([_mm_loadu_si128(b.as_ptr() as *const __m128i), _mm_loadu_si128(b.as_ptr().add(16) as *const __m128i)]); }
    }
    let bykey = recof.iter().map(|&r| recs[r as usize]).collect();
    Simd { recs, recof, oh, bykey }
}

#[inline(always)]
unsafe fn free_of(lo: __m128i, hi: __m128i, r: &Rec) -> u32 {
    let il = _mm_load_si128(r.il.as_ptr() as *const __m128i);
    let ih = _mm_load_si128(r.ih.as_ptr() as *const __m128i);
    let bits = _mm_load_si128(r.bits.as_ptr() as *const __m128i);
    let x = _mm_and_si128(_mm_or_si128(_mm_shuffle_epi8(lo, il), _mm_shuffle_epi8(hi, ih)), bits);
    !(_mm_movemask_epi8(_mm_cmpeq_epi8(x, bits)) as u32) & 0xFFFF
}

fn simd_walk(t: &Tables, s: &Simd, budget: u64) -> (Vec<u64>, bool) {
    let l = t.l;
    let mut count = vec![0u64; l + 2];
    let mut board = vec![0u64; l + 4];
    unsafe {
        let z = _mm_setzero_si128();
        let mut lo = vec![z; l + 2]; let mut hi = vec![z; l + 2];
        let mut f = vec![0u32; l + 2]; let mut base = vec![0u32; l + 2];
        let k0 = key_of(t, &board, 0);
        let r = s.recs.get_unchecked(s.recof[k0] as usize);
        f[0] = free_of(z, z, r); base[0] = r.base;
        let mut d = 0usize; let mut left = budget;
        let mut fd = f[0]; let mut cb = base[0]; let mut clo = z; let mut chi = z;
        loop {
            if fd == 0 {
                if d == 0 { return (count, true); }
                d -= 1;
                fd = *f.get_unchecked(d); cb = *base.get_unchecked(d);
                clo = *lo.get_unchecked(d); chi = *hi.get_unchecked(d);
                continue;
            }
            let i = fd.trailing_zeros();
            fd &= fd - 1;
            let c = *t.cands.get_unchecked((cb + i) as usize);
            *board.get_unchecked_mut(d) = c;
            *count.get_unchecked_mut(d) += 1;
            left -= 1;
            if left == 0 { return (count, false); }
            *f.get_unchecked_mut(d) = fd; *base.get_unchecked_mut(d) = cb;
            *lo.get_unchecked_mut(d) = clo; *hi.get_unchecked_mut(d) = chi;
            let p = (c & 0xFFFF) as usize;
            let o = s.oh.get_unchecked(p);
            clo = _mm_or_si128(clo, o[0]);
            chi = _mm_or_si128(chi, o[1]);
            d += 1;
            let dt = *t.dt.get_unchecked(d);
            let lc = ((c >> 16) as u32 & 0xFF) & dt[1];
            let top = ((*board.get_unchecked(dt[2] as usize) >> 24) & 0xFF) as u32;
            let k = (dt[0] + lc * CS as u32 + top) as usize;
            let r = s.bykey.get_unchecked(k);
            fd = free_of(clo, chi, r);
            cb = r.base;
        }
    }
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let (w, h, pieces) = parse(&a[1]);
    let n = pieces.len();
    let t = build(w, h, &pieces);
    let s = simd_tables(&t, n);
    let b: u64 = a[3].parse().unwrap();
    match a[2].as_str() {
        "check" => {
            let mut wk = fresh(&t, n);
            let fin = scalar(&t, &mut wk, 0, b);
            let (c, fin2) = simd_walk(&t, &s, b);
            let same = (0..t.l).all(|k| wk.count[k] == c[k]);
            println!("scalar {} {} simd {} {} same counts: {}", fin, wk.count.iter().sum::<u64>(), fin2, c.iter().sum::<u64>(), same);
        }
        "scalar" => {
            let mut wk = fresh(&t, n);
            let st = Instant::now();
            scalar(&t, &mut wk, 0, b);
            let e = st.elapsed().as_secs_f64(); let tot: u64 = wk.count.iter().sum();
            println!("scalar {} nodes {:.1} M/s", tot, tot as f64 / e / 1e6);
        }
        _ => {
            let st = Instant::now();
            let (c, _) = simd_walk(&t, &s, b);
            let e = st.elapsed().as_secs_f64(); let tot: u64 = c.iter().sum();
            println!("simd {} nodes {:.1} M/s", tot, tot as f64 / e / 1e6);
        }
    }
}
