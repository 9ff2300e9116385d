//! Experiment (issue #15, session 19; docs/benchmarks.md): a candidate walk with no used
//! test, for 16x16 boards. Each level works out, without a branch, which candidates of
//! its bucket are free (SSSE3: the used set is a 256-bit mask in two registers; the
//! bucket holds, per candidate, the byte of the mask its piece is in and the bit within;
//! two `pshufb`, an `or`, an `and` and a compare give one flag per candidate, `pmovmskb`
//! makes them a mask), then visits the set bits lowest first, so the same order as the
//! branchy walk. The "mispredict-free candidate stream" the field notes leave open. Built
//! on the same tables as the branchy walk of `branchless_lanes.rs` (row-major, no hints);
//! not part of the build.
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
use std::time::Instant;

const LASTB: u64 = 1 << 63;
const CS: usize = 32; // colour stride in keys

struct Tables {
    l: usize,
    cands: Vec<u64>,
    first: Vec<u32>,
    dt: Vec<[u32; 4]>, // per depth: keybase, lmask, abv (board index), 0
    taken: usize,      // the always-used piece slot
    zero: usize,       // board index of an all-zero cell
}

fn rot(p: [u8; 4], r: usize) -> [u8; 4] {
    let mut q = p;
    for _ in 0..r { q = [q[3], q[0], q[1], q[2]]; }
    q
}

fn build(w: usize, h: usize, pieces: &[[u8; 4]]) -> Tables {
    let n = pieces.len();
    let l = w * h;
    // classes: (xc, yc) with xc in {first, mid, last}; class 9 = past the end
    let class = |x: usize, y: usize| -> usize {
        let xc = if x == 0 { 0 } else if x == w - 1 { 2 } else { 1 };
        let yc = if y == 0 { 0 } else if y == h - 1 { 2 } else { 1 };
        yc * 3 + xc
    };
    let mut cands: Vec<u64> = Vec::new();
    let taken = n;
    let sentinel = cands.len() as u32;
    cands.push(taken as u64 | LASTB);
    let mut first = vec![sentinel; 10 * CS * CS];
    for cl in 0..9 {
        let (xc, yc) = (cl % 3, cl / 3);
        for left in 0..CS {
            for top in 0..CS {
                let mut b: Vec<u64> = Vec::new();
                for (pid, &p) in pieces.iter().enumerate() {
                    let mut seen: Vec<[u8; 4]> = Vec::new();
                    for r in 0..4 {
                        let q = rot(p, r);
                        if seen.contains(&q) { continue; }
                        seen.push(q);
                        let [u, rr, d, ll] = q;
                        if u as usize != top || ll as usize != left { continue; }
                        if (yc == 0) != (u == 0) { continue; }
                        if (xc == 0) != (ll == 0) { continue; }
                        if (xc == 2) != (rr == 0) { continue; }
                        if (yc == 2) != (d == 0) { continue; }
                        b.push(pid as u64 | (rr as u64) << 16 | (d as u64) << 24);
                    }
                }
                if b.is_empty() { continue; }
                let k = cl * CS * CS + left * CS + top;
                first[k] = cands.len() as u32;
                let m = b.len();
                b[m - 1] |= LASTB;
                cands.extend(b);
            }
        }
    }
    let zero = l + 1;
    let mut dt = vec![[0u32; 4]; l + 2];
    for d in 0..l {
        let (x, y) = (d % w, d / w);
        let abv = if y > 0 { d - w } else { zero };
        dt[d] = [(class(x, y) * CS * CS) as u32, if x > 0 { 0xFF } else { 0 }, abv as u32, 0];
    }
    dt[l] = [(9 * CS * CS) as u32, 0, zero as u32, 0];
    dt[l + 1] = dt[l];
    Tables { l, cands, first, dt, taken, zero }
}

/// Scalar reference: continue a walk from a state (stack of candidate indices for depths
/// 0..=d already placed, or empty = root) for `budget` nodes. Returns (nodes per depth,
/// final stack, finished).
struct Walk { used: Vec<u8>, board: Vec<u64>, stack: Vec<u32>, count: Vec<u64>, left: u64 }

fn scalar(t: &Tables, w: &mut Walk, d0: usize, budget: u64) -> bool {
    // iterative branchy walk; w.stack[0..d0] placed.
    w.left = budget;
    let mut d = d0; // depth to fill next
    let mut i: u32;
    if d == 0 {
        i = t.first[t.dt[0][0] as usize];
    } else {
        // continuation: the last placed one's subtree first
        i = next_first(t, &w.board, d);
    }
    loop {
        let c = t.cands[i as usize];
        let p = (c & 0xFFFF) as usize;
        if w.used[p] == 0 {
            w.used[p] = 1; w.board[d] = c; w.stack[d] = i; w.count[d] += 1;
            w.left -= 1;
            d += 1;
            if w.left == 0 { w.stack.truncate(d); return false; }
            i = next_first(t, &w.board, d);
            continue;
        }
        // advance or pop
        let mut cc = c; let mut ii = i;
        loop {
            if cc & LASTB == 0 { i = ii + 1; break; }
            if d == 0 { return true; }
            d -= 1;
            ii = w.stack[d]; cc = t.cands[ii as usize];
            w.used[(cc & 0xFFFF) as usize] = 0;
        }
    }
}

#[inline(always)]
fn next_first(t: &Tables, board: &[u64], d: usize) -> u32 {
    let dt = t.dt[d];
    let left = if d > 0 { ((board[d - 1] >> 16) & 0xFF) as u32 & dt[1] } else { 0 };
    let top = ((board[dt[2] as usize] >> 24) & 0xFF) as u32;
    t.first[(dt[0] + left * CS as u32 + top) as usize]
}

fn parse(path: &str) -> (usize, usize, Vec<[u8; 4]>) {
    let s = std::fs::read_to_string(path).unwrap();
    let rows: Vec<Vec<u32>> = s.lines().map(|l| l.split_whitespace().map(|x| x.parse().unwrap()).collect()).filter(|v: &Vec<u32>| !v.is_empty()).collect();
    let (w, h, body) = if rows[0].len() == 2 { (rows[0][0] as usize, rows[0][1] as usize, &rows[1..]) } else { (16, 16, &rows[..]) };
    (w, h, body.iter().map(|r| [r[0] as u8, r[1] as u8, r[2] as u8, r[3] as u8]).collect())
}
fn fresh(t: &Tables, n: usize) -> Walk {
    let mut used = vec![0u8; n + 8]; used[t.taken] = 1;
    let _ = t.zero;
    Walk { used, board: vec![0; t.l + 4], stack: vec![0; t.l + 4], count: vec![0; t.l + 2], left: 0 }
}
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

#[inline(always)]
fn key_at(t: &Tables, board: &[u64], d: usize) -> usize {
    let dt = t.dt[d];
    let left = if d > 0 { ((board[d - 1] >> 16) & 0xFF) as u32 & dt[1] } else { 0 };
    let top = ((board[dt[2] as usize] >> 24) & 0xFF) as u32;
    (dt[0] + left * CS as u32 + top) as usize
}

fn simd_walk(t: &Tables, s: &Simd, budget: u64) -> (Vec<u64>, bool) {
    let l = t.l;
    let mut count = vec![0u64; l + 2];
    let mut board = vec![0u64; l + 4];
    unsafe {
        let z = _mm_setzero_si128();
        let mut lo = vec![z; l + 2]; let mut hi = vec![z; l + 2];
        let mut f = vec![0u32; l + 2]; let mut base = vec![0u32; l + 2];
        let k0 = key_at(t, &board, 0);
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
