// The tables and the branchy walk shared by the experiments in this folder (issue #15):
// row-major boards without hints, candidates bucketed by (cell class, left colour, colour
// above), a sentinel of an always-used piece ending each bucket; `include!`d by
// `branchless_lanes.rs` and `simd_free_mask.rs` (and read by `simd_free_mask_compiled.py`).
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

/// The key of depth `d`'s cell: its table's base, the colour on its left (from the
/// candidate at depth d - 1) and the colour above.
#[inline(always)]
fn key_of(t: &Tables, board: &[u64], d: usize) -> usize {
    let dt = t.dt[d];
    let left = if d > 0 { ((board[d - 1] >> 16) & 0xFF) as u32 & dt[1] } else { 0 };
    let top = ((board[dt[2] as usize] >> 24) & 0xFF) as u32;
    (dt[0] + left * CS as u32 + top) as usize
}

#[inline(always)]
fn next_first(t: &Tables, board: &[u64], d: usize) -> u32 {
    t.first[key_of(t, board, d)]
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
