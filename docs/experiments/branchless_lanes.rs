//! Experiment (issue #15, session 16; docs/benchmarks.md): a branchless walk of K
//! independent units interleaved in one thread, to see whether hiding the search's
//! mispredicted branches (one node in two or three mispredicts on hard boards) pays for
//! the work a branch-free step does. Table-driven, row-major, boards without hints; not
//! part of the build. Each step tries one candidate: the used byte is written
//! unconditionally (1, or 0 when the step takes a piece back), and the next state (depth,
//! candidate, take-back flag) is chosen with `select_unpredictable`, so the only branch is
//! the loop's and a rare "some lane stopped" test.
//!
//! ```sh
//! rustc --edition=2021 -O -Ctarget-cpu=native -Cpanic=abort branchless_lanes.rs -o lanes
//! ./lanes puzzles/brendan/set1/pieces_06x06.txt whole      # 69,284,103 nodes, 260 solutions, both walks
//! ./lanes puzzles/e2/e2pieces.txt check 3 3000000          # each lane's counts against the branchy walk
//! ./lanes puzzles/e2/e2pieces.txt time 2 20000000          # K = 2 lanes, 20 M nodes each
//! ./lanes puzzles/e2/e2pieces.txt scalar 4 20000000        # the same starts, the branchy walk
//! ./lanes puzzles/e2/e2pieces.txt ras 300000000            # return stacks of 16-64 entries, simulated
//! ./lanes puzzles/e2/e2pieces.txt pred 100000000           # used tests under 2-bit counters per depth,
//!                                                          # (depth, position), slot, (depth, slot)
//! ```
//!
//! Result on the Zen 4 machine: 3.85 steps per node (tries, take-backs, empty buckets),
//! ~48 instructions a step (callgrind), so ~184 instructions per node; K = 1, 2, 3, 4
//! lanes 40, 59, 54, 41 M nodes/s, the branchy walk of the same tables 69, the compiled
//! list walk ~100-120. Interleaving hides the latency, but a branch-free step is too much
//! work: even at 5 instructions a cycle it would need ~37 cycles a node, against the
//! compiled engine's ~23-28.
include!("edge_tables.rs");

/// One lane: its own used bytes, board, stack and counts. Depth indices are offset by one
/// (index 0 is a dummy slot below the root), so d = 0 means "popped out".
#[derive(Clone)]
struct Lane { used: Vec<u8>, board: Vec<u64>, stack: Vec<u32>, count: Vec<u64>, d: usize, i: u32, pop: u64, left: u64 }

fn lane_from(t: &Tables, w: &Walk, d0: usize, n: usize) -> Lane {
    let mut used = w.used.clone(); used.resize(n + 8, 0); used[t.taken] = 1;
    let mut board = vec![0u64; t.l + 4];
    for k in 0..d0 { board[k + 1] = w.board[k]; }
    let mut stack = vec![0u32; t.l + 4];
    for k in 0..d0 { stack[k + 1] = w.stack[k]; }
    let i = if d0 == 0 { t.first[t.dt[0][0] as usize] } else { next_first(t, &w.board, d0) };
    Lane { used, board, stack, count: vec![0; t.l + 4], d: d0 + 1, i, pop: 0, left: 0 }
}

#[inline(always)]
fn step(t: &Tables, ln: &mut Lane) -> u64 {
    unsafe {
        let d = ln.d; let i = ln.i; let pop = ln.pop;
        let c = *t.cands.get_unchecked(i as usize);
        let p = (c & 0xFFFF) as usize;
        let u = *ln.used.get_unchecked(p) as u64;
        *ln.used.get_unchecked_mut(p) = (pop ^ 1) as u8;
        *ln.board.get_unchecked_mut(d) = c;
        *ln.stack.get_unchecked_mut(d) = i;
        let acc = (u ^ 1) & (pop ^ 1);
        *ln.count.get_unchecked_mut(d) += acc;
        ln.left -= acc;
        let last = c >> 63;
        // the next depth's first candidate (board index of depth d+1's cell is d+1; tables by cell)
        let dt = *t.dt.get_unchecked(d); // cell of depth d+1 is d (0-based)
        let lc = ((c >> 16) as u32 & 0xFF) & dt[1];
        let top = ((*ln.board.get_unchecked(dt[2] as usize + 1) >> 24) & 0xFF) as u32;
        let fi = *t.first.get_unchecked((dt[0] + lc * CS as u32 + top) as usize);
        let pi = *ln.stack.get_unchecked(d - 1);
        let rej = core::hint::select_unpredictable(last != 0, pi, i + 1);
        ln.i = core::hint::select_unpredictable(acc != 0, fi, rej);
        let nl = (acc ^ 1) & last;
        ln.d = d + acc as usize - nl as usize;
        ln.pop = nl;
        // stop: budget hit after an accept, or popped out
        (ln.left == 0) as u64 | (ln.d == 0) as u64
    }
}

fn run_lanes<const K: usize>(t: &Tables, lanes: &mut [Lane; K]) -> u64 {
    let mut rounds = 0u64;
    loop {
        let mut stop = 0u64;
        for ln in lanes.iter_mut() { stop |= step(t, ln); }
        rounds += 1;
        if stop != 0 { return rounds; }
    }
}


const STRIDE: usize = 8192; // bytes per lane: used at 0 (1024), board u64 at 1024 (272*8), stack u32 at 3328 (272*4), count u64 at 4416 (272*8), left at 6592
const OB: usize = 1024; const OS: usize = 3328; const OC: usize = 4416; const OL: usize = 6592;

#[inline(always)]
unsafe fn step2(cands: *const u64, first: *const u32, dt: *const [u32; 4], lane: *mut u8, d: &mut usize, i: &mut u32, pop: &mut u64) -> u64 {
    let c = *cands.add(*i as usize);
    let p = (c & 0xFFFF) as usize;
    let u = *lane.add(p) as u64;
    *lane.add(p) = (*pop ^ 1) as u8;
    *(lane.add(OB) as *mut u64).add(*d) = c;
    *(lane.add(OS) as *mut u32).add(*d) = *i;
    let acc = (u ^ 1) & (*pop ^ 1);
    *(lane.add(OC) as *mut u64).add(*d) += acc;
    let lp = lane.add(OL) as *mut u64;
    *lp -= acc;
    let last = c >> 63;
    let t = *dt.add(*d);
    let lc = ((c >> 16) as u32 & 0xFF) & t[1];
    let top = ((*(lane.add(OB) as *const u64).add(t[2] as usize + 1) >> 24) & 0xFF) as u32;
    let fi = *first.add((t[0] + lc * CS as u32 + top) as usize);
    let pi = *(lane.add(OS) as *const u32).add(*d - 1);
    let rej = core::hint::select_unpredictable(last != 0, pi, *i + 1);
    *i = core::hint::select_unpredictable(acc != 0, fi, rej);
    let nl = (acc ^ 1) & last;
    *d = *d + acc as usize - nl as usize;
    *pop = nl;
    (*lp == 0) as u64 | (*d == 0) as u64
}

fn run_reg<const K: usize>(t: &Tables, lanes: &mut [Lane; K]) -> u64 {
    let mut mem = vec![0u8; STRIDE * K + 64];
    let base = mem.as_mut_ptr();
    let mut d = [0usize; K]; let mut i = [0u32; K]; let mut pop = [0u64; K];
    unsafe {
        for (j, l) in lanes.iter().enumerate() {
            let b = base.add(j * STRIDE);
            for (k, &u) in l.used.iter().enumerate() { *b.add(k) = u; }
            for (k, &v) in l.board.iter().enumerate() { *(b.add(OB) as *mut u64).add(k) = v; }
            for (k, &v) in l.stack.iter().enumerate() { *(b.add(OS) as *mut u32).add(k) = v; }
            *(b.add(OL) as *mut u64) = l.left;
            d[j] = l.d; i[j] = l.i; pop[j] = l.pop;
        }
        let (cands, first, dt) = (t.cands.as_ptr(), t.first.as_ptr(), t.dt.as_ptr());
        let mut rounds = 0u64;
        loop {
            let mut stop = 0u64;
            for j in 0..K { stop |= step2(cands, first, dt, base.add(j * STRIDE), &mut d[j], &mut i[j], &mut pop[j]); }
            rounds += 1;
            if stop != 0 { break; }
        }
        for (j, l) in lanes.iter_mut().enumerate() {
            let b = base.add(j * STRIDE);
            for k in 0..l.count.len() { l.count[k] = *(b.add(OC) as *const u64).add(k); }
            for k in 0..l.stack.len() { l.stack[k] = *(b.add(OS) as *const u32).add(k); }
            l.left = *(b.add(OL) as *const u64);
            l.d = d[j]; l.i = i[j]; l.pop = pop[j];
        }
        rounds
    }
}

/// What the branchy walk of [`observe`] tells a simulation.
trait Observer {
    /// Candidate `i` tried at depth `d` (its bucket starts at `start`); `free`: placed.
    fn tried(&mut self, _d: usize, _i: u32, _start: u32, _free: bool) {}
    /// A placement (a call, for a walk with a function per level).
    fn placed(&mut self) {}
    /// A take-back (a return).
    fn taken_back(&mut self) {}
}

/// The branchy walk from the root for `budget` nodes, told to `obs`; returns the nodes.
fn observe(t: &Tables, n: usize, budget: u64, obs: &mut impl Observer) -> u64 {
    let mut used = vec![0u8; n + 8]; used[t.taken] = 1;
    let mut board = vec![0u64; t.l + 4];
    let mut stack = vec![0u32; t.l + 4];
    let mut start = vec![0u32; t.l + 4];
    let mut d = 0usize; let mut i = t.first[t.dt[0][0] as usize]; start[0] = i;
    let mut nodes = 0u64;
    'outer: loop {
        let c = t.cands[i as usize];
        let p = (c & 0xFFFF) as usize;
        if p != t.taken {
            obs.tried(d, i, start[d], used[p] == 0);
        }
        if used[p] == 0 {
            used[p] = 1; board[d] = c; stack[d] = i; nodes += 1;
            obs.placed();
            if nodes == budget { break; }
            d += 1;
            i = next_first(t, &board, d); start[d] = i;
            continue;
        }
        let mut cc = c; let mut ii = i;
        loop {
            if cc & LASTB == 0 { i = ii + 1; break; }
            if d == 0 { break 'outer; }
            d -= 1;
            ii = stack[d]; cc = t.cands[ii as usize];
            used[(cc & 0xFFFF) as usize] = 0;
            obs.taken_back();
        }
    }
    nodes
}

const RAS_SIZES: [usize; 6] = [16, 24, 32, 48, 52, 64];

/// Return stacks of each size: entries still valid, and returns they could not predict.
struct Ras { valid: [usize; 6], miss: [u64; 6] }

impl Observer for Ras {
    fn placed(&mut self) {
        for k in 0..6 { self.valid[k] = (self.valid[k] + 1).min(RAS_SIZES[k]); }
    }
    fn taken_back(&mut self) {
        for k in 0..6 { if self.valid[k] > 0 { self.valid[k] -= 1 } else { self.miss[k] += 1 } }
    }
}

/// Return-stack simulation: each placement is a call, each take-back a return.
fn ras(t: &Tables, n: usize, budget: u64) {
    let mut r = Ras { valid: [0; 6], miss: [0; 6] };
    let nodes = observe(t, n, budget, &mut r);
    for k in 0..6 { println!("RAS {:2} entries: {:.4} mispredicted returns per node", RAS_SIZES[k], r.miss[k] as f64 / nodes as f64); }
}

/// 2-bit counters per depth, per (depth, position in bucket), per candidate slot and per
/// (depth, slot), and the used tests each mispredicts.
struct Pred { nc: usize, c_d: Vec<u8>, c_dp: Vec<u8>, c_s: Vec<u8>, c_ds: Vec<u8>, miss: [u64; 4], tests: u64 }

/// Updates a 2-bit counter; true if it mispredicted.
fn upd(c: &mut u8, taken: bool) -> bool { let pred = *c >= 2; if taken { if *c < 3 { *c += 1 } } else if *c > 0 { *c -= 1 } pred != taken }

impl Observer for Pred {
    fn tried(&mut self, d: usize, i: u32, start: u32, free: bool) {
        self.tests += 1;
        let pos = ((i - start) as usize).min(63);
        self.miss[0] += upd(&mut self.c_d[d], free) as u64;
        self.miss[1] += upd(&mut self.c_dp[d * 64 + pos], free) as u64;
        self.miss[2] += upd(&mut self.c_s[i as usize], free) as u64;
        self.miss[3] += upd(&mut self.c_ds[d * self.nc + i as usize], free) as u64;
    }
}

/// Used-test predictability under the four sets of counters of [`Pred`].
fn pred(t: &Tables, n: usize, budget: u64) {
    let (l, nc) = (t.l, t.cands.len());
    let mut p = Pred { nc, c_d: vec![1; l + 2], c_dp: vec![1; (l + 2) * 64], c_s: vec![1; nc], c_ds: vec![1; (l + 2) * nc], miss: [0; 4], tests: 0 };
    let nodes = observe(t, n, budget, &mut p);
    let names = ["per depth", "per (depth, position)", "per slot", "per (depth, slot)"];
    println!("{} used tests, {:.2} per node", p.tests, p.tests as f64 / nodes as f64);
    for k in 0..4 { println!("  {:24} {:.1}% mispredicted, {:.3} per node", names[k], 100.0 * p.miss[k] as f64 / p.tests as f64, p.miss[k] as f64 / nodes as f64); }
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let (w, h, pieces) = parse(&a[1]);
    let mode = a[2].as_str();
    let n = pieces.len();
    let t = build(w, h, &pieces);
    eprintln!("{}x{} {} pieces, {} candidates", w, h, n, t.cands.len());
    match mode {
        "ras" => { ras(&t, n, a[3].parse().unwrap()); }
        "pred" => { pred(&t, n, a[3].parse().unwrap()); }
        "whole" => {
            let mut wk = fresh(&t, n);
            let s = Instant::now();
            let fin = scalar(&t, &mut wk, 0, u64::MAX);
            let tot: u64 = wk.count.iter().sum();
            println!("scalar whole: finished {} nodes {} solutions {} in {:.2}s", fin, tot, wk.count[t.l - 1], s.elapsed().as_secs_f64());
            let wk0 = fresh(&t, n);
            let mut lanes = [lane_from(&t, &wk0, 0, n)];
            lanes[0].left = u64::MAX;
            let s = Instant::now();
            run_lanes(&t, &mut lanes);
            let tot: u64 = lanes[0].count.iter().sum();
            println!("lane whole: nodes {} solutions {} in {:.2}s", tot, lanes[0].count[t.l], s.elapsed().as_secs_f64());
        }
        _ => {
            // lanes K, each started at the cursor of a scalar walk of (j+1)*skip nodes, budget b each
            let k: usize = a[3].parse().unwrap();
            let b: u64 = a[4].parse().unwrap();
            let skip: u64 = a.get(5).map(|x| x.parse().unwrap()).unwrap_or(1_000_003);
            let mut starts = Vec::new();
            for j in 0..k {
                let mut wk = fresh(&t, n);
                scalar(&t, &mut wk, 0, skip * (j as u64 + 1));
                let d0 = wk.stack.len();
                starts.push((wk, d0));
            }
            if mode == "scalar" {
                let s = Instant::now();
                let mut tot = 0;
                for (wk, d0) in starts.iter_mut() {
                    let mut ws = Walk { used: wk.used.clone(), board: wk.board.clone(), stack: { let mut v = wk.stack.clone(); v.resize(t.l + 4, 0); v }, count: vec![0; t.l + 2], left: 0 };
                    scalar(&t, &mut ws, *d0, b);
                    tot += ws.count.iter().sum::<u64>();
                }
                let e = s.elapsed().as_secs_f64();
                println!("scalar: {} nodes in {:.3}s = {:.1} M/s", tot, e, tot as f64 / e / 1e6);
                return;
            }
            macro_rules! go { ($K:literal) => {{
                let mut lanes: [Lane; $K] = std::array::from_fn(|j| { let mut l = lane_from(&t, &starts[j].0, starts[j].1, n); l.left = b; l });
                let s = Instant::now();
                let rounds = if std::env::var("MEM").is_ok() { run_lanes::<$K>(&t, &mut lanes) } else { run_reg::<$K>(&t, &mut lanes) };
                let e = s.elapsed().as_secs_f64();
                let tot: u64 = lanes.iter().map(|l| l.count.iter().sum::<u64>()).sum();
                println!("lanes {}: {} nodes in {:.3}s = {:.1} M/s, {:.2} steps/node", $K, tot, e, tot as f64 / e / 1e6, (rounds * $K) as f64 / tot as f64);
                if mode == "check" {
                    // each lane that stopped on its budget must equal the scalar walk of the same budget
                    for (j, l) in lanes.iter().enumerate() {
                        let (wk, d0) = &starts[j];
                        let got = b - l.left;
                        let mut ws = Walk { used: wk.used.clone(), board: wk.board.clone(), stack: { let mut v = wk.stack.clone(); v.resize(t.l + 4, 0); v }, count: vec![0; t.l + 2], left: 0 };
                        scalar(&t, &mut ws, *d0, got);
                        let ok_counts = (0..t.l).all(|k| ws.count[k] == l.count[k + 1]);
                        let dd = ws.stack.len();
                        let ok_stack = dd + 1 == l.d && (0..dd).all(|k| ws.stack[k] == l.stack[k + 1]);
                        println!("  lane {}: {} nodes, counts {} cursor {}", j, got, ok_counts, ok_stack);
                    }
                }
            }}}
            match k { 1 => go!(1), 2 => go!(2), 3 => go!(3), 4 => go!(4), 6 => go!(6), 8 => go!(8), _ => panic!() }
        }
    }
}
