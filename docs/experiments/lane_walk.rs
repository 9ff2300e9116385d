//! Experiment (issue #15, session 28; docs/benchmarks.md "session 28"): a branch-free
//! mask walk, one node per step, with K independent units ("lanes") interleaved in one
//! thread. Standalone (`rustc`, not part of the build); row-major boards of at most 128
//! pieces without hints (Brendan's sets), pieces renumbered inner-first so every bucket
//! sits in one 64-bit word. The product's version is `engine/src/lanes.rs`.
//!
//! Variants, in the order they were tried (each walks the same counts):
//! - `lanes`: frames of `u128` candidate masks, the next depth from a `u128` bit set of
//!   non-empty frames (`lzcnt`): ~107 instructions a node (callgrind), no faster than a
//!   branchy walk.
//! - `lanes2`: each frame keeps `up` (the deepest shallower frame with candidates left),
//!   the next depth chosen by `select_unpredictable`: 79.
//! - `lanes3`: static tables at fixed addresses, a one-word candidate mask with a second
//!   rotation taken by a phase bit: 64 (set 1 6x6), ~52 per step in the loop.
//! - `lanes4`: `lanes3` with its tables on the heap (what an in-process engine has).
//!
//! ```sh
//! rustc --edition=2021 -O -Cpanic=abort -Crelocation-model=static -Ctarget-cpu=native lane_walk.rs -o lanes
//! ./lanes puzzles/brendan/set1/pieces_06x06.txt lanes3 6 999999999 18446744073709551615 2
//!     # the whole tree through the 2,548 units of depth 6: 69,284,103 nodes, 260 solutions
//! ./lanes puzzles/brendan/set2/pieces_10x10.txt lanes3 12 400 2000000 2
//!     # the first 400 units of depth 12, 2,000,000 nodes each, K = 2 lanes
//! ./lanes puzzles/brendan/set2/pieces_10x10.txt dump 12 400 > units.txt
//! python3 lane_walk_drive.py ENGINE units.txt 2000000
//!     # the same units on a compiled engine (`bench --cache-dir D` builds one); with
//!     # DEPTHS=1 both print per-depth counts, which agree to the digit (budget stops
//!     # and all: the lanes take candidates in canonical order)
//! ```
//!
//! Measured on the Zen 4 host (AMD EPYC, znver4, ~3.6-3.7 GHz), K = 2 against the
//! compiled engine on the identical work list (`lane_walk_cmp.sh BOARD 12 400 2000000 3`),
//! medians: set 2 10x10 218.7 / 165.8 M nodes/s (1.32x), set 1 10x10 213.6 / 161.5
//! (1.32x), set 1 9x9 227.9 / 147.7 (1.54x), set 2 9x9 226.0 / 145.2 (1.56x); set 1 7x7
//! and set 2 8x8 (depth 10, 3,000 units of 400,000) 1.5-1.7x. K = 1 runs ~125 M nodes/s
//! (the chain of one walk, ~28 cycles a step), K = 3 and 4 no faster than 2.
use std::time::Instant;
const CS: usize = 16;
const MAXD: usize = 128;

fn rot(p: [u8; 4], r: usize) -> [u8; 4] { let mut q = p; for _ in 0..r { q = [q[3], q[0], q[1], q[2]]; } q }

struct T { orig: Vec<usize>, isb: Vec<u64>, pbl: Vec<u64>, pbh: Vec<u64>, l: usize, kb: Vec<u32>, lm: Vec<u32>, ab: Vec<u32>, off: Vec<u32>, m1: Vec<u64>, m2: Vec<u64>, ct: Vec<u64>, pb: Vec<u128> }

fn parse(path: &str) -> (usize, usize, Vec<[u8; 4]>) {
    let s = std::fs::read_to_string(path).unwrap();
    let rows: Vec<Vec<u32>> = s.lines().map(|l| l.split_whitespace().map(|x| x.parse().unwrap()).collect()).filter(|v: &Vec<u32>| !v.is_empty()).collect();
    let (w, h) = (rows[0][0] as usize, rows[0][1] as usize);
    (w, h, rows[1..].iter().map(|r| [r[0] as u8, r[1] as u8, r[2] as u8, r[3] as u8]).collect())
}

fn build(w: usize, h: usize, pieces0: &[[u8; 4]]) -> T {
    // renumber: inner pieces (no zero side) first, then border pieces
    let mut orig: Vec<usize> = (0..pieces0.len()).filter(|&i| !pieces0[i].contains(&0)).collect();
    let ni = orig.len();
    orig.extend((0..pieces0.len()).filter(|&i| pieces0[i].contains(&0)));
    let pieces: Vec<[u8; 4]> = orig.iter().map(|&i| pieces0[i]).collect();
    let n = pieces.len();
    assert!(ni <= 64 && n - ni <= 64 && n <= 127);
    let l = w * h;
    let class = |x: usize, y: usize| { let xc = if x == 0 { 0 } else if x == w - 1 { 2 } else { 1 }; let yc = if y == 0 { 0 } else if y == h - 1 { 2 } else { 1 }; yc * 3 + xc };
    let nk = 10 * CS * CS;
    let (mut off, mut m1, mut m2) = (vec![0u32; nk], vec![0u64; nk], vec![0u64; nk]);
    let mut ct = vec![0u64; nk * 128];
    for cl in 0..9 { let (xc, yc) = (cl % 3, cl / 3);
      for left in 0..CS { for top in 0..CS {
        let k = cl * CS * CS + left * CS + top;
        let o = if cl == 4 { 0 } else { ni }; off[k] = o as u32;
        for (pid, &p) in pieces.iter().enumerate() {
            let mut seen: Vec<[u8; 4]> = Vec::new(); let mut nth = 0;
            for r in 0..4 { let q = rot(p, r); if seen.contains(&q) { continue; } seen.push(q);
                let [u, rr, d, ll] = q;
                if u as usize != top || ll as usize != left { continue; }
                if (yc == 0) != (u == 0) || (xc == 0) != (ll == 0) || (xc == 2) != (rr == 0) || (yc == 2) != (d == 0) { continue; }
                assert!(pid >= o && pid - o < 64);
                let b = pid - o; assert!(nth < 2);
                if nth == 0 { m1[k] |= 1 << b } else { m2[k] |= 1 << b }
                ct[k * 128 + b + 64 * nth] = pid as u64 | (rr as u64) << 8 | (d as u64) << 16 | (r as u64) << 32;
                nth += 1;
            } } } } }
    let mut kb = vec![0u32; l + 2]; let mut lm = vec![0u32; l + 2]; let mut ab = vec![l as u32; l + 2];
    for d in 0..l { let (x, y) = (d % w, d / w); kb[d] = (class(x, y) * CS * CS) as u32; lm[d] = if x > 0 { 0xFF } else { 0 }; ab[d] = if y > 0 { (d - w) as u32 } else { l as u32 }; }
    kb[l] = (9 * CS * CS) as u32; // empty
    let pb: Vec<u128> = (0..128).map(|p| 1u128 << p).collect();
    let pbl = (0..128).map(|p| if p < ni { 1u64 << p } else { 0 }).collect();
    let pbh = (0..128).map(|p| if p >= ni && p - ni < 64 { 1u64 << (p - ni) } else { 0 }).collect();
    let mut isb = vec![1u64; l + 2]; for d in 0..l { isb[d] = (class(d % w, d / w) != 4) as u64; }
    T { orig, isb, pbl, pbh, l, kb, lm, ab, off, m1, m2, ct, pb }
}

#[inline(always)]
fn child_mask(t: &T, cells: &[u64], dn: usize, c: u64, free2: u128) -> (u128, u32) {
    unsafe {
        let left = ((c >> 8) & 0xFF) as u32 & *t.lm.get_unchecked(dn);
        let top = ((*cells.get_unchecked(*t.ab.get_unchecked(dn) as usize) >> 16) & 0xFF) as u32;
        let k2 = *t.kb.get_unchecked(dn) + left * CS as u32 + top;
        let wv = (free2 >> *t.off.get_unchecked(k2 as usize)) as u64;
        let a = *t.m1.get_unchecked(k2 as usize) & wv; let b = *t.m2.get_unchecked(k2 as usize) & wv;
        ((a as u128) | ((b as u128) << 64), k2)
    }
}

#[derive(Clone, Copy, Default)]
#[repr(C)]
struct F { rem: u128, free: u128, key: u64, _p: u64 }

#[derive(Clone, Copy, Default)]
#[repr(C)]
struct G { lo: u64, hi: u64, flo: u64, fhi: u64, key: u32, up: u32 }
const STOP: usize = MAXD - 1;

#[derive(Clone)]
struct Lane2 { d: usize, left: u64, fr: [G; MAXD + 1], cells: [u64; MAXD + 1], count: [u64; MAXD + 1] }
impl Lane2 {
    fn new() -> Lane2 { Lane2 { fr: [G::default(); MAXD + 1], cells: [0u64; MAXD + 1], count: [0; MAXD + 1], d: STOP, left: 0 } }
    fn start(&mut self, t: &T, pre: &[u64], free: u128, budget: u64, ni: usize) -> bool {
        let s = pre.len();
        self.cells[..s].copy_from_slice(pre);
        let (cm, k) = child_mask(t, &self.cells, s, pre[s - 1], free);
        let flo = free as u64 & (if ni == 64 { !0 } else { (1u64 << ni) - 1 }); let fhi = (free >> ni) as u64;
        self.fr[s] = G { lo: cm as u64, hi: (cm >> 64) as u64, flo, fhi, key: k, up: STOP as u32 };
        self.d = if cm != 0 { s } else { STOP }; self.left = budget;
        cm != 0
    }
}

#[inline(always)]
fn step2(t: &T, ln: &mut Lane2) -> bool {
    unsafe {
        use core::hint::select_unpredictable as sel;
        let d = ln.d;
        let f = ln.fr.get_unchecked(d);
        let f = G { lo: f.lo, hi: f.hi, flo: f.flo, fhi: f.fhi, key: f.key, up: f.up };
        let lz = f.lo == 0;
        let b = sel(lz, 64 + f.hi.trailing_zeros() as usize, f.lo.trailing_zeros() as usize);
        let lo2 = f.lo & f.lo.wrapping_sub(1);
        let hi2 = sel(lz, f.hi & f.hi.wrapping_sub(1), f.hi);
        let c = *t.ct.get_unchecked(f.key as usize * 128 + b);
        let p = (c & 0xFF) as usize;
        *ln.cells.get_unchecked_mut(d) = c;
        *ln.count.get_unchecked_mut(d) += 1;
        let flo2 = f.flo ^ *t.pbl.get_unchecked(p);
        let fhi2 = f.fhi ^ *t.pbh.get_unchecked(p);
        let dn = d + 1;
        let left = ((c >> 8) & 0xFF) as u32 & *t.lm.get_unchecked(dn);
        let top = ((*ln.cells.get_unchecked(*t.ab.get_unchecked(dn) as usize) >> 16) & 0xFF) as u32;
        let k2 = *t.kb.get_unchecked(dn) + left * CS as u32 + top;
        let wv = sel(*t.isb.get_unchecked(dn) != 0, fhi2, flo2);
        let clo = *t.m1.get_unchecked(k2 as usize) & wv; let chi = *t.m2.get_unchecked(k2 as usize) & wv;
        let fd = ln.fr.get_unchecked_mut(d); fd.lo = lo2; fd.hi = hi2;
        let sib = (lo2 | hi2) != 0;
        let upc = sel(sib, d as u32, f.up);
        *ln.fr.get_unchecked_mut(dn) = G { lo: clo, hi: chi, flo: flo2, fhi: fhi2, key: k2, up: upc };
        let child = (clo | chi) != 0;
        let nd = sel(child, dn, upc as usize);
        ln.d = nd;
        ln.left -= 1;
        (nd == STOP) | (ln.left == 0)
    }
}

#[inline(never)]
fn drive2<const K: usize>(t: &T, ls: &mut [Lane2; K]) {
    loop { let mut stop = false; for ln in ls.iter_mut() { stop |= step2(t, ln); } if stop { return; } }
}

fn run_lanes2<const K: usize>(t: &T, pres: &[(Vec<u64>, u128)], per: u64, count: &mut [u64], ni: usize) {
    let mut lanes: Vec<Lane2> = (0..K).map(|_| Lane2::new()).collect();
    let mut next = 0usize;
    let mut live = [false; K];
    let refill = |ln: &mut Lane2, next: &mut usize| -> bool {
        while *next < pres.len() { let (pre, free) = &pres[*next]; *next += 1; if ln.start(t, pre, *free, per, ni) { return true; } }
        false
    };
    for i in 0..K { live[i] = refill(&mut lanes[i], &mut next); }
    if live.iter().all(|&x| x) {
        let ls: &mut [Lane2; K] = (&mut lanes[..]).try_into().unwrap();
        'outer: loop {
            drive2(t, ls);
            {
                for i in 0..K { let ln = &mut ls[i]; if ln.d == STOP || ln.left == 0 { if !refill(ln, &mut next) { live[i] = false; break 'outer; } } }
            }
        }
    }
    for i in 0..K { let ln = &mut lanes[i];
        loop {
            if live[i] && ln.d != STOP && ln.left != 0 { while !step2(t, ln) {} }
            if !refill(ln, &mut next) { break; } live[i] = true;
        }
    }
    for ln in &lanes { for d in 0..STOP { count[d] += ln.count[d]; } }
}

#[derive(Clone)]
struct Lane { fr: Vec<F>, cells: Vec<u64>, count: Vec<u64>, nz: u128, d: usize, left: u64 }

impl Lane {
    fn new(t: &T) -> Lane { let mut cells = vec![0u64; MAXD + 1]; cells[t.l] = 0; Lane { fr: vec![F::default(); MAXD + 1], cells, count: vec![0; MAXD + 1], nz: 0, d: 0, left: 0 } }
    /// Start on the subtree under a prefix of s placed cells.
    fn start(&mut self, t: &T, pre: &[u64], free: u128, budget: u64) {
        let s = pre.len();
        self.cells[..s].copy_from_slice(pre);
        let (cm, k) = if s == 0 { let k = t.kb[0] as usize; ((t.m1[k] & (free >> t.off[k]) as u64) as u128 | (((t.m2[k] & (free >> t.off[k]) as u64) as u128) << 64), k as u32) } else { child_mask(t, &self.cells, s, pre[s - 1], free) };
        self.fr[s] = F { rem: cm, free, key: k as u64, _p: 0 };
        self.nz = if cm != 0 { 1u128 << s } else { 0 };
        self.d = s; self.left = budget;
    }
}

#[inline(always)]
fn step(t: &T, ln: &mut Lane) -> bool {
    unsafe {
        let d = ln.d;
        let f = *ln.fr.get_unchecked(d);
        let r = f.rem;
        let b = r.trailing_zeros() as usize;
        let r2 = r & r.wrapping_sub(1);
        let c = *t.ct.get_unchecked(f.key as usize * 128 + b);
        let p = (c & 0xFF) as usize;
        *ln.cells.get_unchecked_mut(d) = c;
        *ln.count.get_unchecked_mut(d) += 1;
        let free2 = f.free ^ *t.pb.get_unchecked(p);
        let dn = d + 1;
        let (cm, k2) = child_mask(t, &ln.cells, dn, c, free2);
        ln.fr.get_unchecked_mut(d).rem = r2;
        *ln.fr.get_unchecked_mut(dn) = F { rem: cm, free: free2, key: k2 as u64, _p: 0 };
        let bd = *t.pb.get_unchecked(d);
        let nz = (ln.nz ^ bd) | if r2 != 0 { bd } else { 0 } | if cm != 0 { bd << 1 } else { 0 };
        ln.nz = nz;
        ln.d = 127usize.wrapping_sub(nz.leading_zeros() as usize);
        ln.left -= 1;
        (nz == 0) | (ln.left == 0)
    }
}

/// The branchy reference: recursive mask walk of the same tables.
fn walk(t: &T, cells: &mut [u64], count: &mut [u64], d: usize, rem0: u128, key: usize, free: u128, left: &mut u64) -> bool {
    let mut rem = rem0;
    while rem != 0 {
        let b = rem.trailing_zeros() as usize; rem &= rem - 1;
        let c = t.ct[key * 128 + b]; let p = (c & 0xFF) as usize;
        cells[d] = c; count[d] += 1; *left -= 1; if *left == 0 { return true; }
        let free2 = free ^ t.pb[p];
        let (cm, k2) = child_mask(t, cells, d + 1, c, free2);
        if cm != 0 && walk(t, cells, count, d + 1, cm, k2 as usize, free2, left) { return true; }
    }
    false
}

/// Prefixes: every node at depth s (cells 0..s placed), up to max of them; and the counts at depths < s.
fn prefixes(t: &T, n: usize, s: usize, max: usize) -> (Vec<(Vec<u64>, u128)>, Vec<u64>) {
    let mut out = Vec::new(); let mut count = vec![0u64; MAXD + 1];
    let mut cells = vec![0u64; MAXD + 1];
    fn rec(t: &T, cells: &mut Vec<u64>, count: &mut Vec<u64>, d: usize, s: usize, free: u128, out: &mut Vec<(Vec<u64>, u128)>, max: usize) {
        if d == s { out.push((cells[..s].to_vec(), free)); return; }
        let (cm, k) = if d == 0 { let k = t.kb[0] as usize; let wv = (free >> t.off[k]) as u64; ((t.m1[k] & wv) as u128 | (((t.m2[k] & wv) as u128) << 64), k as u32) } else { child_mask(t, cells, d, cells[d - 1], free) };
        let mut rem = cm;
        while rem != 0 && out.len() < max { let b = rem.trailing_zeros() as usize; rem &= rem - 1;
            let c = t.ct[k as usize * 128 + b]; cells[d] = c; count[d] += 1;
            rec(t, cells, count, d + 1, s, free ^ t.pb[(c & 0xFF) as usize], out, max); }
    }
    let full: u128 = if n == 128 { !0 } else { (1u128 << n) - 1 };
    rec(t, &mut cells, &mut count, 0, s, full, &mut out, max);
    (out, count)
}

fn run_branchy(t: &T, pres: &[(Vec<u64>, u128)], per: u64, count: &mut [u64]) {
    let mut cells = vec![0u64; MAXD + 1];
    for (pre, free) in pres {
        let s = pre.len(); cells[..s].copy_from_slice(pre);
        let (cm, k) = child_mask(t, &cells, s, pre[s - 1], *free);
        let mut left = per;
        if cm != 0 { walk(t, &mut cells, count, s, cm, k as usize, *free, &mut left); }
    }
}

fn run_lanes<const K: usize>(t: &T, pres: &[(Vec<u64>, u128)], per: u64, count: &mut [u64]) {
    let mut lanes: Vec<Lane> = (0..K).map(|_| Lane::new(t)).collect();
    let mut next = 0usize;
    let mut live = [false; K];
    // fill each lane with a prefix that has a child
    let mut refill = |ln: &mut Lane, next: &mut usize| -> bool {
        while *next < pres.len() { let (pre, free) = &pres[*next]; *next += 1; ln.start(t, pre, *free, per); if ln.nz != 0 { return true; } }
        false
    };
    for i in 0..K { live[i] = refill(&mut lanes[i], &mut next); }
    if live.iter().all(|&x| x) {
        let ls: &mut [Lane; K] = (&mut lanes[..]).try_into().unwrap();
        'outer: loop {
            let mut stop = false;
            for ln in ls.iter_mut() { stop |= step(t, ln); }
            if stop {
                for i in 0..K { let ln = &mut ls[i]; if ln.nz == 0 || ln.left == 0 { if !refill(ln, &mut next) { live[i] = false; break 'outer; } } }
            }
        }
    }
    // finish the rest one lane at a time
    for i in 0..K { let ln = &mut lanes[i];
        loop {
            if live[i] && ln.nz != 0 && ln.left != 0 { while !step(t, ln) {} }
            if !refill(ln, &mut next) { break; } live[i] = true;
        }
    }
    for ln in &lanes { for d in 0..=MAXD { count[d] += ln.count[d]; } }
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let (w, h, pieces) = parse(&a[1]);
    let t = build(w, h, &pieces);
    let mode = a[2].as_str();
    let s: usize = a.get(3).map(|x| x.parse().unwrap()).unwrap_or(w);
    let max: usize = a.get(4).map(|x| x.parse().unwrap()).unwrap_or(usize::MAX);
    let per: u64 = a.get(5).map(|x| x.parse().unwrap()).unwrap_or(u64::MAX);
    eprintln!("keys with second rotations: {}", m2_report(&t));
    let (pres, c0) = prefixes(&t, pieces.len(), s, max);
    eprintln!("{} prefixes at depth {s}", pres.len());
    let k: usize = a.get(6).map(|x| x.parse().unwrap()).unwrap_or(4);
    let mut count = c0.clone();
    let t0 = Instant::now();
    match mode {
        "branchy" => run_branchy(&t, &pres, per, &mut count),
        "lanes" => match k { 1 => run_lanes::<1>(&t, &pres, per, &mut count), 2 => run_lanes::<2>(&t, &pres, per, &mut count), 3 => run_lanes::<3>(&t, &pres, per, &mut count), 4 => run_lanes::<4>(&t, &pres, per, &mut count), 6 => run_lanes::<6>(&t, &pres, per, &mut count), 8 => run_lanes::<8>(&t, &pres, per, &mut count), _ => panic!() },
        "lanes2" => { let ni = pieces.iter().filter(|p| !p.contains(&0)).count(); match k { 1 => run_lanes2::<1>(&t, &pres, per, &mut count, ni), 2 => run_lanes2::<2>(&t, &pres, per, &mut count, ni), 3 => run_lanes2::<3>(&t, &pres, per, &mut count, ni), 4 => run_lanes2::<4>(&t, &pres, per, &mut count, ni), 6 => run_lanes2::<6>(&t, &pres, per, &mut count, ni), 8 => run_lanes2::<8>(&t, &pres, per, &mut count, ni), _ => panic!() } }
        "lanes3" => { let ni = pieces.iter().filter(|p| !p.contains(&0)).count(); match k { 1 => run_lanes3::<1>(&t, &pres, per, &mut count, ni), 2 => run_lanes3::<2>(&t, &pres, per, &mut count, ni), 3 => run_lanes3::<3>(&t, &pres, per, &mut count, ni), 4 => run_lanes3::<4>(&t, &pres, per, &mut count, ni), 6 => run_lanes3::<6>(&t, &pres, per, &mut count, ni), 8 => run_lanes3::<8>(&t, &pres, per, &mut count, ni), _ => panic!() } }
        "dump" => { for (pre, _) in &pres { let v: Vec<String> = pre.iter().enumerate().map(|(i, &c)| format!("{}.{}.{}", i, t.orig[(c & 0xFF) as usize], (c >> 32) & 0xFF)).collect(); println!("{}", v.join(",")); } return; }
        "lanes4" => { let ni = pieces.iter().filter(|p| !p.contains(&0)).count(); match k { 1 => run_lanes4::<1>(&t, &pres, per, &mut count, ni), 2 => run_lanes4::<2>(&t, &pres, per, &mut count, ni), 3 => run_lanes4::<3>(&t, &pres, per, &mut count, ni), _ => panic!() } }
        _ => panic!("mode"),
    }
    let el = t0.elapsed().as_secs_f64();
    let walked: u64 = count.iter().zip(&c0).map(|(a, b)| a - b).sum();
    let total: u64 = count.iter().sum();
    if std::env::var("DEPTHS").is_ok() { println!("depths {}", count[..t.l].iter().map(|x| x.to_string()).collect::<Vec<_>>().join(" ")); }
    println!("{mode} k={k} total={total} solutions={} walked={walked} {:.3}s {:.1} M nodes/s", count[t.l - 1], el, walked as f64 / el / 1e6);
}
#[allow(dead_code)]
fn m2_report(t: &T) -> usize { t.m2.iter().filter(|&&m| m != 0).count() }

// ---- variant 3: static tables, one-word rem, second rotation by a phase bit ----
const NK: usize = 10 * CS * CS;
static mut CT3: [u64; NK * 128] = [0; NK * 128];
static mut M3: [u64; NK] = [0; NK];
static mut KB3: [u32; MAXD + 2] = [0; MAXD + 2];
static mut LM3: [u32; MAXD + 2] = [0; MAXD + 2];
static mut AB3: [u32; MAXD + 2] = [0; MAXD + 2];
static mut ISB3: [u64; MAXD + 2] = [0; MAXD + 2];
static mut PBL3: [u64; 128] = [0; 128];
static mut PBH3: [u64; 128] = [0; 128];

fn load3(t: &T) {
    unsafe {
        for k in 0..NK { M3[k] = t.m1[k];
            for b in 0..64 { let c1 = t.ct[k * 128 + b]; let more = (t.m2[k] >> b) & 1;
                CT3[k * 128 + b] = c1 | (more << 40); CT3[k * 128 + 64 + b] = t.ct[k * 128 + 64 + b] & 0xFFFF_FFFF; } }
        for d in 0..t.kb.len() { KB3[d] = t.kb[d]; LM3[d] = t.lm[d]; AB3[d] = t.ab[d]; ISB3[d] = t.isb[d]; }
        for p in 0..128 { PBL3[p] = t.pbl[p]; PBH3[p] = t.pbh[p]; }
    }
}

#[derive(Clone, Copy, Default)]
#[repr(C)]
struct H { rem: u64, flo: u64, fhi: u64, key: u32, up: u16, ph: u16 }

#[derive(Clone)]
struct Lane3 { d: usize, left: u64, fr: [H; MAXD + 1], cells: [u64; MAXD + 1], count: [u64; MAXD + 1] }
impl Lane3 {
    fn new() -> Lane3 { Lane3 { fr: [H::default(); MAXD + 1], cells: [0u64; MAXD + 1], count: [0; MAXD + 1], d: STOP, left: 0 } }
    fn start(&mut self, t: &T, pre: &[u64], free: u128, budget: u64, ni: usize) -> bool {
        let s = pre.len();
        self.cells[..s].copy_from_slice(pre);
        let (cm, k) = child_mask(t, &self.cells, s, pre[s - 1], free);
        let flo = free as u64 & (if ni == 64 { !0 } else { (1u64 << ni) - 1 }); let fhi = (free >> ni) as u64;
        self.fr[s] = H { rem: cm as u64, flo, fhi, key: k, up: STOP as u16, ph: 0 };
        self.d = if cm != 0 { s } else { STOP }; self.left = budget;
        cm != 0
    }
}

#[inline(always)]
fn step3(ln: &mut Lane3) -> bool {
    unsafe {
        use core::hint::select_unpredictable as sel;
        let d = ln.d;
        let f = ln.fr.get_unchecked(d);
        let (r, flo, fhi, key, up, ph) = (f.rem, f.flo, f.fhi, f.key, f.up, f.ph);
        let b = r.trailing_zeros() as usize;
        let c = *(&raw const CT3 as *const u64).add(key as usize * 128 + b + ((ph as usize) << 6));
        let ph2 = ((c >> 40) & 1) as u64 & !(ph as u64);
        let r2 = r & (r.wrapping_sub(1).wrapping_add(ph2));
        let p = (c & 0xFF) as usize;
        *ln.cells.get_unchecked_mut(d) = c;
        *ln.count.get_unchecked_mut(d) += 1;
        let flo2 = flo ^ *(&raw const PBL3 as *const u64).add(p);
        let fhi2 = fhi ^ *(&raw const PBH3 as *const u64).add(p);
        let dn = d + 1;
        let left = ((c >> 8) & 0xFF) as u32 & *(&raw const LM3 as *const u32).add(dn);
        let top = ((*ln.cells.get_unchecked(*(&raw const AB3 as *const u32).add(dn) as usize) >> 16) & 0xFF) as u32;
        let k2 = *(&raw const KB3 as *const u32).add(dn) + left * CS as u32 + top;
        let wv = sel(*(&raw const ISB3 as *const u64).add(dn) != 0, fhi2, flo2);
        let cm = *(&raw const M3 as *const u64).add(k2 as usize) & wv;
        let fd = ln.fr.get_unchecked_mut(d); fd.rem = r2; fd.ph = ph2 as u16;
        let upc = sel(r2 != 0, d as u16, up);
        *ln.fr.get_unchecked_mut(dn) = H { rem: cm, flo: flo2, fhi: fhi2, key: k2, up: upc, ph: 0 };
        let nd = sel(cm != 0, dn, upc as usize);
        ln.d = nd;
        ln.left -= 1;
        (nd == STOP) | (ln.left == 0)
    }
}

#[inline(never)]
fn drive3<const K: usize>(ls: &mut [Lane3; K]) {
    loop { let mut stop = false; for ln in ls.iter_mut() { stop |= step3(ln); } if stop { return; } }
}

fn run_lanes3<const K: usize>(t: &T, pres: &[(Vec<u64>, u128)], per: u64, count: &mut [u64], ni: usize) {
    load3(t);
    let mut lanes: Vec<Lane3> = (0..K).map(|_| Lane3::new()).collect();
    let mut next = 0usize;
    let mut live = [false; K];
    let refill = |ln: &mut Lane3, next: &mut usize| -> bool {
        while *next < pres.len() { let (pre, free) = &pres[*next]; *next += 1; if ln.start(t, pre, *free, per, ni) { return true; } }
        false
    };
    for i in 0..K { live[i] = refill(&mut lanes[i], &mut next); }
    if live.iter().all(|&x| x) {
        let ls: &mut [Lane3; K] = (&mut lanes[..]).try_into().unwrap();
        'outer: loop {
            drive3(ls);
            for i in 0..K { let ln = &mut ls[i]; if ln.d == STOP || ln.left == 0 { if !refill(ln, &mut next) { live[i] = false; break 'outer; } } }
        }
    }
    for i in 0..K { let ln = &mut lanes[i];
        loop {
            if live[i] && ln.d != STOP && ln.left != 0 { while !step3(ln) {} }
            if !refill(ln, &mut next) { break; } live[i] = true;
        }
    }
    for ln in &lanes { for d in 0..STOP { count[d] += ln.count[d]; } }
}

// ---- variant 4: heap tables, one-word rem, second rotation by a phase bit ----
struct T4 { ct: Box<[u64]>, m: Box<[u64]>, kb: Box<[u32]>, lm: Box<[u32]>, ab: Box<[u32]>, isb: Box<[u64]>, pbl: Box<[u64]>, pbh: Box<[u64]> }

fn load4(t: &T) -> T4 {
    unsafe {
        let mut ct3v = vec![0u64; NK * 128]; let mut m3v = vec![0u64; NK]; let mut kb3v = vec![0u32; MAXD + 2]; let mut Lm3v = vec![0u32; MAXD + 2]; let mut ab3v = vec![0u32; MAXD + 2]; let mut isb3v = vec![0u64; MAXD + 2]; let mut pbl3v = vec![0u64; 128]; let mut pbh3v = vec![0u64; 128];
        for k in 0..NK { m3v[k] = t.m1[k];
            for b in 0..64 { let c1 = t.ct[k * 128 + b]; let more = (t.m2[k] >> b) & 1;
                ct3v[k * 128 + b] = c1 | (more << 40); ct3v[k * 128 + 64 + b] = t.ct[k * 128 + 64 + b] & 0xFFFF_FFFF; } }
        for d in 0..t.kb.len() { kb3v[d] = t.kb[d]; Lm3v[d] = t.lm[d]; ab3v[d] = t.ab[d]; isb3v[d] = t.isb[d]; }
        for p in 0..128 { pbl3v[p] = t.pbl[p]; pbh3v[p] = t.pbh[p]; }
        T4 { ct: ct3v.into(), m: m3v.into(), kb: kb3v.into(), lm: Lm3v.into(), ab: ab3v.into(), isb: isb3v.into(), pbl: pbl3v.into(), pbh: pbh3v.into() }
    }
}

#[derive(Clone, Copy, Default)]
#[repr(C)]
struct H4 { rem: u64, flo: u64, fhi: u64, key: u32, up: u16, ph: u16 }

#[derive(Clone)]
struct Lane4 { d: usize, left: u64, fr: [H4; MAXD + 1], cells: [u64; MAXD + 1], count: [u64; MAXD + 1] }
impl Lane4 {
    fn new() -> Lane4 { Lane4 { fr: [H4::default(); MAXD + 1], cells: [0u64; MAXD + 1], count: [0; MAXD + 1], d: STOP, left: 0 } }
    fn start(&mut self, t: &T, pre: &[u64], free: u128, budget: u64, ni: usize) -> bool {
        let s = pre.len();
        self.cells[..s].copy_from_slice(pre);
        let (cm, k) = child_mask(t, &self.cells, s, pre[s - 1], free);
        let flo = free as u64 & (if ni == 64 { !0 } else { (1u64 << ni) - 1 }); let fhi = (free >> ni) as u64;
        self.fr[s] = H4 { rem: cm as u64, flo, fhi, key: k, up: STOP as u16, ph: 0 };
        self.d = if cm != 0 { s } else { STOP }; self.left = budget;
        cm != 0
    }
}

#[inline(always)]
fn step4(t4: &T4, ln: &mut Lane4) -> bool {
    unsafe {
        use core::hint::select_unpredictable as sel;
        let d = ln.d;
        let f = ln.fr.get_unchecked(d);
        let (r, flo, fhi, key, up, ph) = (f.rem, f.flo, f.fhi, f.key, f.up, f.ph);
        let b = r.trailing_zeros() as usize;
        let c = *(t4.ct.as_ptr()).add(key as usize * 128 + b + ((ph as usize) << 6));
        let ph2 = ((c >> 40) & 1) as u64 & !(ph as u64);
        let r2 = r & (r.wrapping_sub(1).wrapping_add(ph2));
        let p = (c & 0xFF) as usize;
        *ln.cells.get_unchecked_mut(d) = c;
        *ln.count.get_unchecked_mut(d) += 1;
        let flo2 = flo ^ *(t4.pbl.as_ptr()).add(p);
        let fhi2 = fhi ^ *(t4.pbh.as_ptr()).add(p);
        let dn = d + 1;
        let left = ((c >> 8) & 0xFF) as u32 & *(t4.lm.as_ptr()).add(dn);
        let top = ((*ln.cells.get_unchecked(*(t4.ab.as_ptr()).add(dn) as usize) >> 16) & 0xFF) as u32;
        let k2 = *(t4.kb.as_ptr()).add(dn) + left * CS as u32 + top;
        let wv = sel(*(t4.isb.as_ptr()).add(dn) != 0, fhi2, flo2);
        let cm = *(t4.m.as_ptr()).add(k2 as usize) & wv;
        let fd = ln.fr.get_unchecked_mut(d); fd.rem = r2; fd.ph = ph2 as u16;
        let upc = sel(r2 != 0, d as u16, up);
        *ln.fr.get_unchecked_mut(dn) = H4 { rem: cm, flo: flo2, fhi: fhi2, key: k2, up: upc, ph: 0 };
        let nd = sel(cm != 0, dn, upc as usize);
        ln.d = nd;
        ln.left -= 1;
        (nd == STOP) | (ln.left == 0)
    }
}

#[inline(never)]
fn drive4<const K: usize>(t4: &T4, ls: &mut [Lane4; K]) {
    loop { let mut stop = false; for ln in ls.iter_mut() { stop |= step4(t4, ln); } if stop { return; } }
}

fn run_lanes4<const K: usize>(t: &T, pres: &[(Vec<u64>, u128)], per: u64, count: &mut [u64], ni: usize) {
    let t4 = load4(t);
    let mut lanes: Vec<Lane4> = (0..K).map(|_| Lane4::new()).collect();
    let mut next = 0usize;
    let mut live = [false; K];
    let refill = |ln: &mut Lane4, next: &mut usize| -> bool {
        while *next < pres.len() { let (pre, free) = &pres[*next]; *next += 1; if ln.start(t, pre, *free, per, ni) { return true; } }
        false
    };
    for i in 0..K { live[i] = refill(&mut lanes[i], &mut next); }
    if live.iter().all(|&x| x) {
        let ls: &mut [Lane4; K] = (&mut lanes[..]).try_into().unwrap();
        'outer: loop {
            drive4(&t4, ls);
            for i in 0..K { let ln = &mut ls[i]; if ln.d == STOP || ln.left == 0 { if !refill(ln, &mut next) { live[i] = false; break 'outer; } } }
        }
    }
    for i in 0..K { let ln = &mut lanes[i];
        loop {
            if live[i] && ln.d != STOP && ln.left != 0 { while !step4(&t4, ln) {} }
            if !refill(ln, &mut next) { break; } live[i] = true;
        }
    }
    for ln in &lanes { for d in 0..STOP { count[d] += ln.count[d]; } }
}
