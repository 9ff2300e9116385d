//! Experiment (issue #15, session 30; docs/benchmarks.md "session 30"): the lane walk for
//! 16x16 boards. A branch-free walk, one node a step, K units interleaved in one thread,
//! as `engine/src/lanes.rs` walks boards of at most 128 pieces; here each frame's
//! candidates are a *bucket-local* mask (bit i: the bucket's candidate i, in canonical
//! order; at most 16 a bucket), worked out from a 256-bit bitset of the free pieces with
//! two `pshufb` (SSSE3): per bucket, each candidate's byte of the bitset (`ia` for bytes
//! 0-15, `ib` for 16-31) and its bit. Row-major boards without extra sides (the hinted
//! E2 boards' hint neighbours have their own tables in the plan, so they qualify).
//!
//! Session 31 built this walk into the product as the lane engine's wide form
//! (`engine/src/lanes/wide.rs`, with the budgets, cursors, stops and watches of the lane
//! engine's driver); this file stays as the measured record of the prototype.
//!
//! Not part of the build: a scratch cargo project with this file as `src/main.rs` and
//!
//! ```toml
//! [dependencies]
//! e2fleet-engine = { path = "PATH/TO/e2fleet/engine" }
//! [profile.release]
//! panic = "abort"
//! ```
//!
//! ```sh
//! RUSTFLAGS=-Ctarget-cpu=native cargo build --release
//! K=4 target/release/proto puzzles/e2/centre-clue.json 24 200 1000000 3 check
//!     # the first 200 units of depth 24, 1,000,000 nodes each: first every per-depth
//!     # count against the reference walker (`check`), then 3 rounds of the lanes
//!     # against the compiled engine (list walk) on the identical units
//! ```
//!
//! Measured (Zen 4 host, session 30), against the compiled engine (list walk) on the
//! identical units, counts identical to the reference walker's on every board. With the
//! lanes in one allocation and the tables in another (as this file is), K = 4:
//! - the E2 pieces with the centre clue: 194.8-201.6 against 188.1-191.8 M nodes/s,
//!   **1.02-1.07x** (K = 5: 1.02-1.03x, K = 6: 1.04-1.05x; K = 2: 0.80x, K = 3: 0.94-0.95x);
//! - the real E2 with its clues: 192.6-196.4 against 196.1-199.5, 0.98-1.00x;
//! - bench-hard (depth 48, 152 units): 192.6-199.7 against 174.1-178.7, 1.09-1.12x.
//!
//! The steps before, on the centre clue (M nodes/s, ratio to the compiled engine):
//! - each lane its own `Box`, tables in `Vec`s: K = 4 161-165 (0.89-0.90x). Each `Box`
//!   of a lane (~22 KB) came page-aligned from the allocator, so every lane's frame of a
//!   depth sat at the same place in a 4 KiB page as the others' (4K aliasing again, as in
//!   session 29's frames); in one allocation the lanes are 1,152 bytes apart in a page;
//! - before that, LLVM had turned `select_unpredictable` (and the same select written with
//!   masks) into a branch around the `up` load: one lane ran 88 M nodes/s and two no
//!   faster (the mispredicts serialised them); a `cmov` in inline asm (`pick`) made two
//!   lanes 1.6x one;
//! - the key from byte offsets and the previous candidate rotated in place (as the
//!   product's lane engine does): ~8 instructions fewer.
//!
//! ~69 instructions a node (callgrind, an `x86-64-v3` build, K = 4; the step ~41, the rest
//! spills and the loop), ~18.5 cycles a node at K = 4-6: bound by instructions. What
//! would take it further is fewer instructions a step (the lanes' state in registers, a
//! generated step with its tables at fixed addresses).
use std::arch::x86_64::*;
use std::sync::Arc;
use std::time::Instant;

use e2fleet_engine::compiled::walk::{self, Walk};
use e2fleet_engine::compiled::{BuildOptions, CodegenOptions};
use e2fleet_engine::engine::Engine;
use e2fleet_engine::plan::{SENTINEL, SearchPlan, candidate_piece, candidate_rot};
use e2fleet_engine::search::{NoControl, RunOptions, Walker};
use e2fleet_engine::{Placement, Unit};

const D: usize = 272;
const STOP: u32 = 271; // >= 256: one OR of the lanes' depths asks for every lane

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Bucket {
    ia: __m128i,
    ib: __m128i,
    bits: __m128i,
    base: u32,
    _p: [u32; 3],
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Step {
    table: u32,
    a_cell: u32,
    a_sh: u32,
    b_cell: u32,
    b_sh: u32,
    p_sh: u32,
    p_m: u32,
    p_k: u32,
}

/// The hot form of a step: byte offsets of the key's board colours, the previous
/// candidate's rotation and mask (its colour in place in the key), the table.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Hot {
    a: u16,
    b: u16,
    table: u16,
    rot: u8,
    _x: u8,
    m: u32,
    _y: u32,
}

struct Tables {
    hot: [Hot; D],
    depths: usize,
    pos: [u32; D],
    steps: [Step; D],
    keyb: [u16; 65536],
    buckets: [Bucket; 2048],
    cands: [u64; 8192],
    oh: [[__m128i; 2]; 256],
    free0: [__m128i; 2],
    board0: Vec<u32>,
}

fn mm(bytes: [u8; 16]) -> __m128i {
    unsafe { std::mem::transmute(bytes) }
}

fn build(plan: &SearchPlan) -> Box<Tables> {
    assert!(plan.pieces <= 256 && plan.colours <= 32 && plan.len() + 2 < STOP as usize);
    assert!(plan.depths.iter().all(|d| d.extra.is_empty()), "extra sides");
    let c = plan.colours;
    let mut tables: Vec<usize> = plan.depths.iter().map(|d| d.table).collect();
    tables.sort();
    tables.dedup();
    let kt = |t: usize| (tables.binary_search(&t).unwrap() as u32 + 1) * 1024;
    let mut keyb = vec![0u16; (tables.len() + 1) * 1024 + 2048];
    let empty = Bucket {
        ia: mm([0x80; 16]),
        ib: mm([0x80; 16]),
        bits: mm([1; 16]),
        base: 0,
        _p: [0; 3],
    };
    let mut buckets = vec![empty];
    let mut cands = vec![0u64; 16];
    let mut seen = std::collections::HashMap::new();
    let mut most = 0;
    for &t in &tables {
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
                most = most.max(list.len());
                assert!(list.len() <= 16, "a bucket of {}", list.len());
                let id = *seen.entry(start).or_insert_with(|| {
                    let mut ia = [0x80u8; 16];
                    let mut ib = [0x80u8; 16];
                    let mut bits = [1u8; 16];
                    for (i, &x) in list.iter().enumerate() {
                        let p = candidate_piece(x);
                        let byte = (p >> 3) as u8;
                        if byte < 16 {
                            ia[i] = byte;
                        } else {
                            ib[i] = byte - 16;
                        }
                        bits[i] = 1 << (p & 7);
                    }
                    let base = cands.len() as u32;
                    cands.extend_from_slice(&list);
                    buckets.push(Bucket {
                        ia: mm(ia),
                        ib: mm(ib),
                        bits: mm(bits),
                        base,
                        _p: [0; 3],
                    });
                    (buckets.len() - 1) as u16
                });
                keyb[kt(t) as usize + (a << 5) + b] = id;
            }
        }
    }
    cands.extend_from_slice(&[0; 16]);
    eprintln!(
        "{} tables, {} buckets, largest {most}, {} candidates",
        tables.len(),
        buckets.len(),
        cands.len()
    );
    let mut steps = [Step::default(); D];
    let dummy = plan.cells as u32;
    for (e, d) in plan.depths.iter().enumerate() {
        let mut s = Step {
            table: kt(d.table),
            a_cell: d.key[0].cell as u32,
            a_sh: d.key[0].shift,
            b_cell: d.key[1].cell as u32,
            b_sh: d.key[1].shift,
            ..Step::default()
        };
        if e > 0 {
            let prev = plan.depths[e - 1].pos as u32;
            if s.a_cell == prev {
                s.p_sh = s.a_sh;
                s.p_m = 0xFF;
                s.p_k = 5;
                s.a_cell = dummy;
            } else if s.b_cell == prev {
                s.p_sh = s.b_sh;
                s.p_m = 0xFF;
                s.p_k = 0;
                s.b_cell = dummy;
            }
        }
        steps[e] = s;
    }
    // past the last depth: key 0, the empty bucket
    steps[plan.len()] = Step {
        table: 0,
        a_cell: dummy,
        b_cell: dummy,
        ..Step::default()
    };
    let mut hot = [Hot::default(); D];
    for e in 0..=plan.len() {
        let s = &steps[e];
        hot[e] = Hot {
            a: (s.a_cell * 4 + s.a_sh / 8) as u16,
            b: (s.b_cell * 4 + s.b_sh / 8) as u16,
            table: s.table as u16,
            // the colour at bits p_sh.. of c, moved to bit p_k
            rot: ((s.p_sh + 64 - s.p_k) % 64) as u8,
            m: s.p_m << s.p_k,
            ..Hot::default()
        };
    }
    let mut pos = [dummy; D];
    for (e, d) in plan.depths.iter().enumerate() {
        pos[e] = d.pos as u32;
    }
    let oh: Vec<[__m128i; 2]> = (0..256)
        .map(|p| {
            let mut b = [0u8; 32];
            b[p >> 3] = 1 << (p & 7);
            [
                mm(b[..16].try_into().unwrap()),
                mm(b[16..].try_into().unwrap()),
            ]
        })
        .collect();
    let mut f = [0u8; 32];
    for p in 0..plan.pieces {
        if plan.initial_used[p] == 0 {
            f[p >> 3] |= 1 << (p & 7);
        }
    }
    let mut board0 = plan.initial_board.clone();
    board0.resize(plan.cells + 1, 0);
    board0[plan.cells] = 0;
    // empty cells read as 0 too (a key never reads one)
    assert!(keyb.len() <= 65536 && buckets.len() <= 2048 && cands.len() <= 8192);
    let mut t: Box<Tables> = unsafe { Box::new_zeroed().assume_init() };
    t.hot = hot;
    t.depths = plan.len();
    t.pos = pos;
    t.steps = steps;
    t.keyb[..keyb.len()].copy_from_slice(&keyb);
    t.buckets[..buckets.len()].copy_from_slice(&buckets);
    t.cands[..cands.len()].copy_from_slice(&cands);
    t.oh.copy_from_slice(&oh);
    t.free0 = [mm(f[..16].try_into().unwrap()), mm(f[16..].try_into().unwrap())];
    unsafe { std::ptr::write(&mut t.board0, board0) };
    t
}

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Frame {
    free: [__m128i; 2],
    rem: u32,
    base: u32,
    up: u32,
    _p: u32,
    nodes: u64,
    _q: u64,
}

#[repr(C, align(64))]
struct Lane {
    d: u32,
    left: u64,
    f: [Frame; D],
    board: [u32; 1040],
}

impl Tables {
    #[inline(always)]
    fn key(&self, board: &[u32; 1040], e: usize, c: u64) -> usize {
        let s = &self.steps[e];
        let a = (board[s.a_cell as usize] >> s.a_sh) & 0xFF;
        let b = (board[s.b_cell as usize] >> s.b_sh) & 0xFF;
        let p = (((c >> s.p_sh) as u32) & s.p_m) << s.p_k;
        (s.table + (a << 5) + b + p) as usize
    }

    #[inline(always)]
    fn mask(&self, bk: usize, f: [__m128i; 2]) -> u32 {
        unsafe {
            let b = self.buckets.get_unchecked(bk);
            let g = _mm_or_si128(_mm_shuffle_epi8(f[0], b.ia), _mm_shuffle_epi8(f[1], b.ib));
            _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_and_si128(g, b.bits), b.bits)) as u32
        }
    }
}

/// `cond != 0 ? a : b` as a `cmov` (LLVM turned every select here into a branch).
#[inline(always)]
fn pick(cond: u32, a: u32, b: u32) -> u32 {
    let mut r = b;
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

#[inline(always)]
fn step(t: &Tables, l: &mut Lane) {
    unsafe {
        let d = l.d as usize;
        let fr = l.f.get_unchecked_mut(d);
        let rem = fr.rem;
        let i = rem.trailing_zeros() as usize;
        let rem2 = rem & rem.wrapping_sub(1);
        fr.rem = rem2;
        fr.nodes += 1;
        let c = *t.cands.get_unchecked(fr.base as usize + i);
        let f = fr.free;
        let upd = pick(rem2, d as u32, fr.up);
        *l.board.get_unchecked_mut(*t.pos.get_unchecked(d) as usize) = c as u32;
        let p = (c >> 32) as u8 as usize;
        let oh = t.oh.get_unchecked(p);
        let f2 = [_mm_andnot_si128(oh[0], f[0]), _mm_andnot_si128(oh[1], f[1])];
        let e = d + 1;
        let h = t.hot.get_unchecked(e);
        let bytes = l.board.as_ptr() as *const u8;
        let a = *bytes.add(h.a as usize) as u32;
        let b = *bytes.add(h.b as usize) as u32;
        let pv = (c.rotate_right(h.rot as u32) as u32) & h.m;
        let key = (h.table as u32 + (a << 5) + b + pv) as usize;
        let bk = *t.keyb.get_unchecked(key) as usize;
        let bucket = t.buckets.get_unchecked(bk);
        let g = _mm_or_si128(
            _mm_shuffle_epi8(f2[0], bucket.ia),
            _mm_shuffle_epi8(f2[1], bucket.ib),
        );
        let m = _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_and_si128(g, bucket.bits), bucket.bits)) as u32;
        let fe = l.f.get_unchecked_mut(e);
        fe.rem = m;
        fe.free = f2;
        fe.base = bucket.base;
        fe.up = upd;
        l.d = pick(m, e as u32, upd);
    }
}

/// Sets `l` on `prefix` with `budget`.
fn start(t: &Tables, l: &mut Lane, prefix: &[Placement], budget: u64) {
    l.board[..t.board0.len()].copy_from_slice(&t.board0);
    l.f.iter_mut().for_each(|f| f.nodes = 0);
    let mut f = t.free0;
    let mut prev = 0u64;
    for (j, pl) in prefix.iter().enumerate() {
        let bk = t.keyb[t.key(&l.board, j, prev)] as usize;
        let b = &t.buckets[bk];
        let c = (0..16)
            .map(|i| t.cands[b.base as usize + i])
            .find(|&c| candidate_piece(c) == pl.piece as usize && candidate_rot(c) == pl.rot)
            .expect("a legal prefix");
        l.board[t.pos[j] as usize] = c as u32;
        let oh = t.oh[candidate_piece(c)];
        f = unsafe { [_mm_andnot_si128(oh[0], f[0]), _mm_andnot_si128(oh[1], f[1])] };
        prev = c;
    }
    let j = prefix.len();
    let bk = t.keyb[t.key(&l.board, j, prev)] as usize;
    let m = t.mask(bk, f);
    l.f[j].rem = m;
    l.f[j].free = f;
    l.f[j].base = t.buckets[bk].base;
    l.f[j].up = STOP;
    l.d = if m != 0 { j as u32 } else { STOP };
    l.left = budget;
}

/// Walks every unit, K at a time; per-depth counts summed.
fn walk_all(t: &Tables, units: &[Vec<Placement>], budget: u64) -> Vec<u64> {
    let k_lanes: usize = std::env::var("K").map(|k| k.parse().unwrap()).unwrap_or(2);
    match k_lanes {
        1 => walk_k::<1>(t, units, budget),
        2 => walk_k::<2>(t, units, budget),
        3 => walk_k::<3>(t, units, budget),
        4 => walk_k::<4>(t, units, budget),
        5 => walk_k::<5>(t, units, budget),
        6 => walk_k::<6>(t, units, budget),
        _ => panic!("K"),
    }
}

fn walk_k<const K: usize>(t: &Tables, units: &[Vec<Placement>], budget: u64) -> Vec<u64> {
    let mut total = vec![0u64; t.depths];
    let mut lanes: Box<[Lane; K]> = unsafe { Box::new_zeroed().assume_init() };
    for l in lanes.iter_mut() {
        l.board[..t.board0.len()].copy_from_slice(&t.board0);
        l.d = STOP;
    }
    let mut next = 0;
    let mut live = [false; K];
    loop {
        for k in 0..K {
            while !live[k] && next < units.len() {
                start(t, &mut lanes[k], &units[next], budget);
                next += 1;
                live[k] = lanes[k].d != STOP;
            }
        }
        if live.iter().all(|l| !l) {
            break;
        }
        if live.iter().all(|&l| l) {
            let n = lanes.iter().map(|l| l.left).min().unwrap();
            let mut k = 0;
            let ls: &mut [Lane; K] = &mut lanes;
            while k < n {
                for l in ls.iter_mut() {
                    step(t, l);
                }
                k += 1;
                if ls.iter().fold(0, |x, l| x | l.d) >= 256 {
                    break;
                }
            }
            for l in ls.iter_mut() {
                l.left -= k;
            }
        } else {
            for (k, l) in lanes.iter_mut().enumerate() {
                if live[k] {
                    while l.left > 0 && l.d != STOP {
                        step(t, l);
                        l.left -= 1;
                    }
                }
            }
        }
        for k in 0..K {
            let l = &mut lanes[k];
            if live[k] && (l.d == STOP || l.left == 0) {
                for (x, f) in total.iter_mut().zip(&l.f) {
                    *x += f.nodes;
                }
                live[k] = false;
            }
        }
    }
    total
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = &args[1];
    let split: usize = args[2].parse().unwrap();
    let count: usize = args[3].parse().unwrap();
    let budget: u64 = args[4].parse().unwrap();
    let rounds: usize = args[5].parse().unwrap();
    let check = args.get(6).is_some_and(|a| a == "check");
    let puzzle = e2fleet_engine::formats::load_file(path.as_ref(), &Default::default()).unwrap();
    let plan: Arc<SearchPlan> = e2fleet_engine::SearchSpec::new(puzzle, &Default::default())
        .unwrap()
        .plan;
    let t = build(&plan);
    let mut units = Vec::new();
    Walker::new(&plan)
        .enumerate_first(&[], split, count, &mut |p| units.push(p.to_vec()))
        .unwrap();
    units.truncate(count);
    eprintln!("{} units of depth {split}, {budget} nodes each", units.len());
    let opts = RunOptions {
        budget: Some(budget),
        max_solutions: 1,
    };
    if check {
        let mut want = vec![0u64; plan.len()];
        for u in &units {
            let r = Walker::new(&plan)
                .run(&Unit::prefix(u.clone()), opts, &mut NoControl)
                .unwrap();
            for (x, n) in want.iter_mut().zip(&r.nodes_by_depth) {
                *x += n;
            }
        }
        let got = walk_all(&t, &units, budget);
        assert_eq!(got, want, "per-depth counts differ");
        eprintln!("per-depth counts identical: {} nodes", got.iter().sum::<u64>());
    }
    let built = walk::build(
        &plan,
        &CodegenOptions::default(),
        &BuildOptions {
            cache_dir: "/tmp/proto/cache".into(),
            ..BuildOptions::default()
        },
        Walk::List,
    )
    .unwrap();
    let mut compiled = built.program.engine(plan.clone());
    let us: Vec<Unit> = units.iter().map(|u| Unit::prefix(u.clone())).collect();
    for _ in 0..rounds {
        let t0 = Instant::now();
        let got = walk_all(&t, &units, budget);
        let n: u64 = got.iter().sum();
        let lanes = n as f64 / t0.elapsed().as_secs_f64() / 1e6;
        let t0 = Instant::now();
        let mut m = 0;
        for u in &us {
            m += compiled.run(u, opts, &mut NoControl).unwrap().committed;
        }
        let comp = m as f64 / t0.elapsed().as_secs_f64() / 1e6;
        assert_eq!(n, m);
        println!("lanes {lanes:.1} M nodes/s, compiled {comp:.1}, ratio {:.3}", lanes / comp);
    }
}
