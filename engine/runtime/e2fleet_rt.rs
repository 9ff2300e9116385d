//! e2fleet_rt: the puzzle-independent runtime of every compiled engine.
//!
//! Built once per (rustc, flags) as an rlib and cached; each generated program links it and
//! provides only its tables, its fused group functions and a [`Program`] value. This keeps
//! the per-puzzle compile down to the code that is actually specialised.
//!
//! Protocol (version 3, text lines on stdin/stdout): greet with
//! `e2fleet-engine 3 <build key> <depths>`; for each `run <budget|0> <max_solutions>
//! <prefix> <cursor>` line (placements `pos.piece.rot` joined by `,`, or `-`) print
//! `progress <committed>` lines while walking and then the result block (`result`,
//! `nodes`, `cursor`, `deepest`, `solutions`, `sol`..., `end`). `run` lines may come ahead
//! of their turn: they wait in order, and the next starts the moment a result block is
//! written (the worker keeps one queued, so the process never idles between units). The
//! `run` lines are numbered from 1 as they come; a `stop <n>` line makes unit `n` stop at
//! its next countdown check if it is running, reported like a budget stop, and is
//! ignored once unit `n` has ended (it may cross the result in the pipes). A `pause`
//! line makes the walk hold still at its next countdown check: it prints that check's
//! `progress` line, then `held`, and waits, with its place in the tree kept and no core
//! used, until a `resume` line (it goes on exactly where it was) or a `stop` (it stops
//! there). A pause outlives the unit it came in: the worker resumes before it wants the
//! next one walked.
#![allow(clippy::all)]

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};

/// Largest board the runtime's fixed arrays hold.
pub const MAX_CELLS: usize = 1024;
/// Boards of at most this many pieces keep the pieces on the board as mask bits
/// (`St::umask`), which their generated code reads and writes instead of `St::used`.
pub const MASK_PIECES: usize = 128;
/// The candidate list terminator.
pub const SENTINEL: u64 = u64::MAX;

/// A group function: walks the subtree from its head depth; `true` means stop.
pub type Group = fn(&mut St) -> bool;

/// Everything a generated program tells the runtime.
pub struct Program {
    pub cells: usize,
    pub depths: usize,
    pub pieces: usize,
    /// The first piece of the used mask's second word (`St::umask`): 64 (piece `p` is bit
    /// `p % 64` of word `p / 64`) unless the generator laid a two-word board out so that
    /// each bucket table's pieces fall in one word (see [`mask_bit`]).
    pub mask_split: usize,
    /// log2 of the bucket table stride (colours rounded up to a power of two).
    pub stride_log2: u32,
    pub poll: u64,
    pub protocol: u32,
    pub build_key: &'static str,
    pub fault_depth: Option<usize>,
    pub cands: &'static [u64],
    pub offs: &'static [u32],
    pub init_board: &'static [u64],
    pub init_used: &'static [u8],
    pub dpos: &'static [u16],
    /// Per depth: table offset, key A cell and shift, key B cell and shift, and whether
    /// the depth has extra sides (non-zero: the plan's extra mask).
    pub dkey: &'static [[u32; 6]],
    /// Per depth: up to two extra reads (cell, shift, and where the side's colour sits in
    /// the depth's own candidate: a shift too); unused ones read the dummy cell.
    pub dextra: &'static [[[u32; 3]; 2]],
    pub hints: &'static [(u16, u16, u8)],
    /// The fused group function starting at each depth, if a group starts there.
    pub heads: &'static [Option<Group>],
    /// Each key's first candidate (`SENTINEL`: an empty bucket), as the list walk reads it.
    pub first: &'static [u64],
    /// Pruned levels (see [`refilter`]): depths `k * prune_every ..` read level `k`'s copy
    /// of `FIRST` and `CANDS`, pruned of the pieces placed above depth
    /// `k * prune_every - prune_lag`; 0: no level is pruned.
    pub prune_every: usize,
    pub prune_lag: usize,
    /// A pruned level brought up to date fewer nodes after its last time than `prune_few`
    /// moves its cut one depth up (fewer placements above it, so fewer bring-ups); one
    /// brought up to date more than `prune_many` nodes after, one depth down (more
    /// pieces pruned), as far as the level's first depth.
    pub prune_few: u64,
    pub prune_many: u64,
    /// Level `k`'s copies of `FIRST` and `CANDS` (statics of the program, as long as
    /// `first` and `cands`), or nulls for a level that is not pruned.
    pub prune_tables: fn(usize) -> (*mut u64, *mut u64),
}

/// The bit a bucket's last candidate carries in generated programs (the list walk ends a
/// bucket on it).
pub const LAST: u64 = 1 << 53;
/// Most pruned levels a program may have.
pub const MAX_LEVELS: usize = 64;
/// `St::seen` of a level not brought up to date in this unit (a node count never takes
/// it: counts start at `u64::MAX` and a unit would need 2^64 nodes to wrap round to it).
pub const UNSEEN: u64 = u64::MAX - 1;
const NO_PIECE: u16 = u16::MAX;

/// One pruned level's record (see [`refilter`]).
struct Level {
    /// Pieces placed above this depth are pruned (at least 1, at most the level's first
    /// depth: it moves, see [`refilter`]).
    cut: usize,
    first: *mut u64,
    cands: *mut u64,
    /// Per piece: the starts (in `CANDS`) of the level's buckets that hold it.
    buckets_of: Vec<Vec<u32>>,
    /// Per bucket start: the keys whose bucket it is.
    keys_of: std::collections::HashMap<u32, Vec<u32>>,
    /// Per piece: pruned from the level's copies.
    out: Vec<u8>,
    /// Per depth above `cut`: the piece pruned for it (`NO_PIECE`: none yet).
    path: Vec<u16>,
    /// Per depth above `cut`: its node count when the level was last brought up to date.
    snap: Vec<u64>,
    /// The unit's nodes when the level was last brought up to date.
    last: u64,
}

impl Level {
    /// Level `k`'s record, its copies made from the program's tables (the hints' pieces
    /// are not in any bucket: the plan leaves them out).
    fn new(p: &Program, k: usize) -> Level {
        let (first, cands) = (p.prune_tables)(k);
        let cut = k * p.prune_every - p.prune_lag;
        let from = k * p.prune_every;
        let to = (from + p.prune_every).min(p.depths);
        let mut tables: Vec<usize> = (from..to).map(|d| p.dkey[d][0] as usize).collect();
        tables.sort();
        tables.dedup();
        let span = 1usize << (2 * p.stride_log2);
        let mut buckets_of = vec![Vec::new(); p.pieces];
        let mut keys_of: std::collections::HashMap<u32, Vec<u32>> = std::collections::HashMap::new();
        unsafe {
            std::ptr::copy_nonoverlapping(p.cands.as_ptr(), cands, p.cands.len());
        }
        for t in tables {
            for key in t..(t + span).min(p.offs.len()) {
                unsafe { *first.add(key) = p.first[key] };
                let s = p.offs[key];
                if p.cands[s as usize] == SENTINEL {
                    continue;
                }
                let keys = keys_of.entry(s).or_default();
                if keys.is_empty() {
                    let mut i = s as usize;
                    while p.cands[i] != SENTINEL {
                        buckets_of[piece_of(p.cands[i])].push(s);
                        i += 1;
                    }
                }
                keys.push(key as u32);
            }
        }
        Level {
            cut,
            first,
            cands,
            buckets_of,
            keys_of,
            out: vec![0; p.pieces],
            path: vec![NO_PIECE; from],
            snap: vec![0; from],
            last: 0,
        }
    }

    /// Writes bucket `s` of the level's copy again: the original's candidates whose piece
    /// is not pruned, in order, the last flagged `LAST`; its keys' first candidates.
    fn rebuild(&mut self, p: &Program, s: u32) {
        let (mut i, mut o) = (s as usize, s as usize);
        while p.cands[i] != SENTINEL {
            let c = p.cands[i];
            if self.out[piece_of(c)] == 0 {
                unsafe { *self.cands.add(o) = c & !LAST };
                o += 1;
            }
            i += 1;
        }
        let head = if o > s as usize {
            unsafe {
                *self.cands.add(o - 1) |= LAST;
                *self.cands.add(s as usize)
            }
        } else {
            SENTINEL
        };
        for &key in &self.keys_of[&s] {
            unsafe { *self.first.add(key as usize) = head };
        }
    }
}

/// The pruned level depth `d` reads, if any (as the generator decides it).
fn pruned_level(p: &Program, d: usize) -> Option<usize> {
    if p.prune_every == 0 {
        return None;
    }
    let k = d / p.prune_every;
    (k * p.prune_every > p.prune_lag).then_some(k)
}

/// Brings pruned level `k` up to date with the board: its copies of `FIRST` and `CANDS`
/// hold, in canonical order, the candidates of the original tables whose piece is not
/// placed above depth `cut`. It is called at the level's first group head (by the
/// generated code) and at any of its heads the table-driven [`scan`] enters (which reads
/// the original tables itself), when the node count of depth `cut - 1` (`St::prune_at`)
/// is not the one `St::seen` recorded (a new placement there, or a new unit). No
/// level-`k` loop is running then: one runs only below such an entry, and while it runs
/// nothing above the cut can change; so the copies may change. A pruned candidate is one
/// the used test would refuse (its piece is on the board above the level), so the walk,
/// its counts and its order are unchanged: only refused candidates are skipped.
///
/// Only the depths whose node count moved since the last call can hold another piece
/// (a placement above them would have had to place them again), so the work is the
/// buckets of the pieces that changed. The cut adapts: a level brought up to date often
/// (its cut is where the walk works) moves its cut up, one rarely brought up to date
/// moves it down ([`PRUNE_FEW`], [`PRUNE_MANY`]); either way the same candidates are
/// walked.
#[cold]
#[inline(never)]
pub fn refilter(st: &mut St, k: usize) {
    let p = st.program;
    if st.levels.len() <= k {
        st.levels.resize_with(k + 1, || None);
    }
    let mut lv = match st.levels[k].take() {
        Some(lv) => lv,
        None => Level::new(p, k),
    };
    let count = |st: &St, t: usize| st.cells[p.dpos[t] as usize][1];
    let progress = st.committed + (st.window - st.left);
    let old_cut = lv.cut;
    let mut cut = old_cut;
    let mut from = old_cut;
    if st.seen[k] == UNSEEN {
        from = 0;
    } else {
        let gap = progress.wrapping_sub(lv.last);
        if gap < p.prune_few && cut > 1 {
            cut -= 1;
        } else if gap > p.prune_many && cut < k * p.prune_every {
            cut += 1;
        }
        from = from.min(cut);
        while from > 0 && count(st, from - 1) != lv.snap[from - 1] {
            from -= 1;
        }
    }
    lv.last = progress;
    let want = |st: &St, t: usize| if t < cut { piece_of(st.path(t)) as u16 } else { NO_PIECE };
    let mut dirty: Vec<u32> = Vec::new();
    let to = old_cut.max(cut);
    for t in from..to {
        let old = lv.path[t];
        if old != want(st, t) && old != NO_PIECE {
            lv.out[old as usize] = 0;
            dirty.extend_from_slice(&lv.buckets_of[old as usize]);
        }
    }
    for t in from..to {
        let new = want(st, t);
        if lv.path[t] != new {
            if new != NO_PIECE {
                lv.out[new as usize] = 1;
                dirty.extend_from_slice(&lv.buckets_of[new as usize]);
            }
            lv.path[t] = new;
        }
        if t < cut {
            lv.snap[t] = count(st, t);
        }
    }
    dirty.sort_unstable();
    dirty.dedup();
    for s in dirty {
        lv.rebuild(p, s);
    }
    lv.cut = cut;
    st.prune_at[k] = p.dpos[cut - 1];
    st.seen[k] = count(st, cut - 1);
    st.levels[k] = Some(lv);
}

/// Where `piece` lives in the used mask: (word, bit). Pieces below the program's
/// `mask_split` are bits of word 0, the next 64 bits of word 1, and any further piece
/// has no bit (boards of more pieces than the mask holds keep only the used bytes).
#[inline]
fn mask_bit(p: &Program, piece: usize) -> Option<(usize, u32)> {
    if piece < p.mask_split {
        Some((0, piece as u32))
    } else if piece - p.mask_split < 64 {
        Some((1, (piece - p.mask_split) as u32))
    } else {
        None
    }
}

/// The piece of a candidate as generated programs store it (its top ten bits: the
/// generator repeats the piece id there, whatever else the candidate's layout holds).
#[inline]
fn piece_of(c: u64) -> usize {
    (c >> 54) as usize
}

/// The rotation of a stored candidate.
#[inline]
fn rot_of(c: u64) -> u8 {
    ((c >> 48) & 3) as u8
}

/// The number of the unit a `stop` line asked to stop (0: none).
static STOP: AtomicU64 = AtomicU64::new(0);
/// The number of the unit being walked (`run` lines count from 1).
static RUNNING: AtomicU64 = AtomicU64::new(0);

/// Asked to stop the unit being walked.
#[inline]
fn stopped() -> bool {
    let n = STOP.load(Ordering::Relaxed);
    n != 0 && n == RUNNING.load(Ordering::Relaxed)
}
/// Set by a `pause` line, cleared by `resume` (see the protocol above).
static PAUSE: AtomicBool = AtomicBool::new(false);
/// The thread that walks, woken when a pause ends.
static WALKER: std::sync::OnceLock<std::thread::Thread> = std::sync::OnceLock::new();

/// The search state. The hot fields are public: generated code indexes them with
/// constants, so no bounds checks remain. `repr(C)` fixes the layout.
///
/// `cells[pos] = [candidate, nodes]`: the candidate placed on the cell (its colours are
/// what later cells key on, its piece and rotation are the path) and the node count of
/// the depth that fills it less one (`u64::MAX` before its first node, so the increment
/// that wraps to 0 is the unit's first visit: [`St::first_visit`]), side by side, so the
/// two stores of every node share a cache line and never 4K-alias each other. The last
/// entry is the dummy cell (candidate always 0) that key reads of a missing neighbour
/// point at.
#[repr(C)]
pub struct St {
    pub left: u64,
    deepest: usize,
    /// The pieces on the board as bits ([`mask_bit`] says where) on boards of at most
    /// [`MASK_PIECES`] pieces, whose generated code walks a bucket's free
    /// pieces as the bits of `bucket mask & !umask` and keeps only this up to date.
    pub umask: [u64; 2],
    /// The pieces on the board, a byte each, on larger boards.
    pub used: [u8; 1024],
    pub cells: [[u64; 2]; MAX_CELLS + 1],
    window: u64,
    committed: u64,
    budget: u64,
    stop: u8,
    stop_depth: usize,
    deepest_board: Vec<u64>,
    sol_count: u64,
    sols: Vec<Vec<(u16, u16, u8)>>,
    max_sols: usize,
    program: &'static Program,
    /// Per pruned level: the node count of the depth above its cut when it was last
    /// brought up to date ([`refilter`]; [`UNSEEN`] at the start of every unit).
    pub seen: [u64; MAX_LEVELS],
    /// Per pruned level: the cell of the depth above its cut, whose node count `seen` is.
    pub prune_at: [u16; MAX_LEVELS],
    levels: Vec<Option<Level>>,
}

impl St {
    /// Whether `piece` is on the board (the record the generated code keeps).
    #[inline]
    fn is_used(&self, piece: usize) -> bool {
        match mask_bit(self.program, piece) {
            Some((w, b)) if self.program.pieces <= MASK_PIECES => (self.umask[w] >> b) & 1 != 0,
            _ => self.used[piece] != 0,
        }
    }

    /// Marks `piece` as on the board.
    #[inline]
    fn take(&mut self, piece: usize) {
        self.used[piece] = 1;
        if let Some((w, b)) = mask_bit(self.program, piece) {
            self.umask[w] |= 1 << b;
        }
    }

    /// Marks `piece` as off the board.
    #[inline]
    fn give(&mut self, piece: usize) {
        self.used[piece] = 0;
        if let Some((w, b)) = mask_bit(self.program, piece) {
            self.umask[w] &= !(1 << b);
        }
    }

    /// The candidate placed at depth `d`.
    #[inline]
    fn path(&self, d: usize) -> u64 {
        self.cells[self.program.dpos[d] as usize][0]
    }

    /// Called on the first node of depth `d` in a unit (its count, one less than the
    /// nodes, wrapped to 0): records the board if no node of the unit has been as deep.
    /// Every new deepest depth is a first visit, so the hot path needs no test of its own;
    /// a resumed unit also first-visits the levels above its cursor, which this skips.
    #[cold]
    #[inline(never)]
    pub fn first_visit(&mut self, d: usize) {
        if d >= self.deepest {
            self.snapshot(d);
        }
    }

    /// Records the first board to reach a new depth.
    fn snapshot(&mut self, d: usize) {
        self.deepest = d + 1;
        self.deepest_board.clear();
        let path: Vec<u64> = (0..d + 1).map(|k| self.path(k)).collect();
        self.deepest_board.extend(path);
    }

    /// Records a solution.
    #[cold]
    #[inline(never)]
    pub fn solution(&mut self) {
        self.sol_count += 1;
        if self.sols.len() < self.max_sols {
            let p = self.program;
            let mut b: Vec<(u16, u16, u8)> = p.hints.to_vec();
            for d in 0..p.depths {
                let c = self.path(d);
                b.push((p.dpos[d], piece_of(c) as u16, rot_of(c)));
            }
            b.sort();
            self.sols.push(b);
        }
    }

    /// Called when the countdown reaches zero: budget, stop flag, progress.
    #[cold]
    #[inline(never)]
    pub fn slow(&mut self, d: usize) -> bool {
        self.committed += self.window;
        if self.committed == self.budget {
            self.stop = 1;
            self.stop_depth = d;
            return true;
        }
        if stopped() {
            self.stop = 2;
            self.stop_depth = d;
            return true;
        }
        // told to pause: held still here, its place in the tree kept, until `resume` or
        // `stop`; the host counts the time held from the `held` line
        let pause = {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "progress {}", self.committed);
            let pause = PAUSE.load(Ordering::Relaxed);
            if pause {
                let _ = writeln!(out, "held");
            }
            let _ = out.flush();
            pause
        };
        if pause {
            while PAUSE.load(Ordering::Relaxed) && !stopped() {
                std::thread::park_timeout(std::time::Duration::from_millis(200));
            }
            if stopped() {
                self.stop = 2;
                self.stop_depth = d;
                return true;
            }
        }
        self.window = (self.budget - self.committed).min(self.program.poll);
        self.left = self.window;
        false
    }

    fn bucket(&self, d: usize) -> usize {
        let p = self.program;
        let k = p.dkey[d];
        let a = ((self.cells[k[1] as usize][0] >> k[2]) & 0xFF) as usize;
        let b = ((self.cells[k[3] as usize][0] >> k[4]) & 0xFF) as usize;
        p.offs[k[0] as usize + (a << p.stride_log2) + b] as usize
    }

    /// What a candidate at depth `d` must show on its extra sides: (mask, value), both
    /// as the candidate holds its colours; (0, 0) for a depth without extra sides.
    fn expect(&self, d: usize) -> (u64, u64) {
        let p = self.program;
        let (mut mask, mut e) = (0u64, 0u64);
        if p.dkey[d][5] != 0 {
            for r in p.dextra[d] {
                if r[0] as usize == p.cells {
                    continue;
                }
                mask |= 0xFF << r[2];
                e |= ((self.cells[r[0] as usize][0] >> r[1]) & 0xFF) << r[2];
            }
        }
        (mask, e)
    }

    /// Places (pos, piece, rot) at depth d as the walk would have; returns the index of its
    /// candidate in its bucket.
    fn locate(&mut self, d: usize, t: (u16, u16, u8)) -> Result<usize, String> {
        let p = self.program;
        if p.dpos[d] != t.0 {
            return Err(format!("depth {} fills cell {}, not {}", d + 1, p.dpos[d], t.0));
        }
        let mut i = self.bucket(d);
        let (mask, expect) = self.expect(d);
        let illegal = || format!("placement {}.{}.{} is not legal at depth {}", t.0, t.1, t.2, d + 1);
        loop {
            let c = p.cands[i];
            if c == SENTINEL {
                return Err(illegal());
            }
            let piece = piece_of(c);
            if piece == t.1 as usize && rot_of(c) == t.2 {
                if self.is_used(piece) || (c & mask) != expect {
                    return Err(illegal());
                }
                self.take(piece);
                self.cells[p.dpos[d] as usize][0] = c;
                return Ok(i);
            }
            i += 1;
        }
    }
}

/// The table-driven scan at depth `d` from candidate `start`: the cold path that resumes a
/// unit inside a group, then hands over to the fused chain at the next group head.
#[inline(never)]
pub fn scan(st: &mut St, d: usize, start: usize) -> bool {
    let p = st.program;
    let (mask, expect) = st.expect(d);
    let pos = p.dpos[d] as usize;
    let mut i = start;
    loop {
        let c = p.cands[i];
        i += 1;
        if c == SENTINEL {
            return false;
        }
        let piece = piece_of(c);
        if st.is_used(piece) || (c & mask) != expect {
            continue;
        }
        st.take(piece);
        st.cells[pos][0] = c;
        st.cells[pos][1] = st.cells[pos][1].wrapping_add(1);
        if st.cells[pos][1] == 0 {
            st.first_visit(d);
        }
        if d + 1 == p.depths {
            st.solution();
        }
        st.left -= 1;
        if st.left == 0 && st.slow(d) {
            return true;
        }
        if d + 1 < p.depths {
            let stop = match p.heads[d + 1] {
                Some(group) => {
                    // the fused code checks its level's copies only at the level's first
                    // head: a head entered from here is checked here
                    if let Some(k) = pruned_level(p, d + 1) {
                        if st.cells[st.prune_at[k] as usize][1] != st.seen[k] {
                            refilter(st, k);
                        }
                    }
                    group(st)
                }
                None => {
                    let b = st.bucket(d + 1);
                    scan(st, d + 1, b)
                }
            };
            if stop {
                return true;
            }
        }
        st.give(piece);
    }
}

fn parse_list(p: &Program, tok: &str) -> Result<Vec<(u16, u16, u8)>, String> {
    if tok == "-" {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for t in tok.split(',') {
        let mut v = [0u32; 3];
        let mut n = 0;
        for f in t.split('.') {
            if n == 3 {
                return Err(format!("bad placement {t:?}"));
            }
            v[n] = f.parse().map_err(|_| format!("bad placement {t:?}"))?;
            n += 1;
        }
        if n != 3 || v[0] as usize >= p.cells || v[1] as usize >= p.pieces || v[2] > 3 {
            return Err(format!("placement {t:?} out of range"));
        }
        out.push((v[0] as u16, v[1] as u16, v[2] as u8));
    }
    Ok(out)
}

fn push_cells(r: &mut String, p: &Program, cells: &[u64], from: usize) {
    if cells.is_empty() {
        r.push('-');
    }
    for (k, c) in cells.iter().enumerate() {
        if k > 0 {
            r.push(',');
        }
        r.push_str(&format!("{}.{}.{}", p.dpos[from + k], piece_of(*c), rot_of(*c)));
    }
}

fn run_unit(
    st: &mut St,
    budget: u64,
    max_sols: usize,
    prefix: &[(u16, u16, u8)],
    cursor: &[(u16, u16, u8)],
) -> Result<String, String> {
    let p = st.program;
    for (cell, &v) in st.cells[..p.cells + 1].iter_mut().zip(p.init_board) {
        *cell = [v, u64::MAX];
    }
    st.used = [0; 1024];
    st.umask = [0; 2];
    st.seen = [UNSEEN; MAX_LEVELS];
    for (piece, &on) in p.init_used.iter().enumerate() {
        if on != 0 {
            st.take(piece);
        }
    }
    st.budget = if budget == 0 { u64::MAX } else { budget };
    st.committed = 0;
    st.window = st.budget.min(p.poll);
    st.left = st.window;
    st.stop = 0;
    st.sol_count = 0;
    st.sols.clear();
    st.max_sols = max_sols;
    let floor = prefix.len();
    let start = floor + cursor.len();
    if start > p.depths {
        return Err(format!("unit is {start} deep, the order has {} depths", p.depths));
    }
    for (d, &t) in prefix.iter().enumerate() {
        st.locate(d, t)?;
    }
    let mut idx = Vec::with_capacity(cursor.len());
    for (k, &t) in cursor.iter().enumerate() {
        idx.push(st.locate(floor + k, t)?);
    }
    st.deepest = floor;
    st.deepest_board.clear();
    let prefix_path: Vec<u64> = (0..floor).map(|k| st.path(k)).collect();
    st.deepest_board.extend_from_slice(&prefix_path);
    let mut stopped = false;
    if start < p.depths {
        let b = st.bucket(start);
        stopped = scan(st, start, b);
    }
    if !stopped {
        for l in (floor..start).rev() {
            let piece = piece_of(st.path(l));
            st.give(piece);
            if scan(st, l, idx[l - floor] + 1) {
                stopped = true;
                break;
            }
        }
    }
    if let Some(d) = p.fault_depth {
        if !stopped && d < p.depths && d >= floor {
            let n = &mut st.cells[p.dpos[d] as usize][1];
            *n = n.wrapping_add(1);
        }
    }
    let reason = match (stopped, st.stop) {
        (false, _) => "finished",
        (true, 1) => "budget",
        _ => "requested",
    };
    let mut r = format!("result {reason} {}\nnodes", st.deepest);
    for d in 0..p.depths {
        let n = st.cells[p.dpos[d] as usize][1].wrapping_add(1);
        r.push(' ');
        r.push_str(&n.to_string());
    }
    r.push_str("\ncursor ");
    if stopped {
        let cells: Vec<u64> = (floor..st.stop_depth + 1).map(|k| st.path(k)).collect();
        push_cells(&mut r, p, &cells, floor);
    } else {
        r.push_str("none");
    }
    r.push_str("\ndeepest ");
    let deepest = st.deepest_board.clone();
    push_cells(&mut r, p, &deepest, 0);
    r.push_str(&format!("\nsolutions {} {}\n", st.sol_count, st.sols.len()));
    for s in &st.sols {
        r.push_str("sol ");
        for (k, t) in s.iter().enumerate() {
            if k > 0 {
                r.push(',');
            }
            r.push_str(&format!("{}.{}.{}", t.0, t.1, t.2));
        }
        r.push('\n');
    }
    r.push_str("end\n");
    Ok(r)
}

unsafe extern "C" {
    fn signal(signum: i32, handler: usize) -> usize;
}

/// A fresh state for `program` (const, so a generated program can keep its state in a
/// static of its own and reach every field at a fixed address).
pub const fn new_state(program: &'static Program) -> St {
    St {
        left: 0,
        deepest: 0,
        umask: [0; 2],
        used: [0; 1024],
        cells: [[0; 2]; MAX_CELLS + 1],
        window: 0,
        committed: 0,
        budget: 0,
        stop: 0,
        stop_depth: 0,
        deepest_board: Vec::new(),
        sol_count: 0,
        sols: Vec::new(),
        max_sols: 0,
        program,
        seen: [UNSEEN; MAX_LEVELS],
        prune_at: [0; MAX_LEVELS],
        levels: Vec::new(),
    }
}

/// Serves units on stdin/stdout until stdin closes or `quit`, on a state the program owns
/// (every generated program keeps it in a static of its own, at a fixed address).
pub fn serve_in(st: &'static mut St) {
    let program = st.program;
    // The worker owns this process: it stops units with a `stop` line and ends it by
    // closing stdin. Ignore SIGINT (a terminal's Ctrl-C reaches the whole process group)
    // and SIGTERM (systemd, Slurm and HTCondor signal every process of a service or job),
    // so a stopping worker can still collect each engine's exact cursor.
    // SIG_IGN = 1; SIGINT = 2 and SIGTERM = 15 on Linux, macOS and the BSDs.
    unsafe {
        signal(2, 1);
        signal(15, 1);
    }
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "e2fleet-engine {} {} {}", program.protocol, program.build_key, program.depths);
        let _ = out.flush();
    }
    // a reader thread sets the stop and pause flags at once and queues everything else
    static QUEUE: Mutex<(VecDeque<String>, bool)> = Mutex::new((VecDeque::new(), false));
    static READY: Condvar = Condvar::new();
    let _ = WALKER.set(std::thread::current());
    std::thread::spawn(|| {
        let stdin = std::io::stdin();
        let wake = || {
            if let Some(t) = WALKER.get() {
                t.unpark();
            }
        };
        for line in stdin.lock().lines() {
            let Ok(line) = line else { break };
            if let Some(n) = line.trim().strip_prefix("stop ").and_then(|n| n.parse::<u64>().ok()) {
                STOP.store(n, Ordering::Relaxed);
                wake();
                continue;
            }
            match line.trim() {
                "pause" => {
                    PAUSE.store(true, Ordering::Relaxed);
                    continue;
                }
                "resume" => {
                    PAUSE.store(false, Ordering::Relaxed);
                    wake();
                    continue;
                }
                _ => {}
            }
            QUEUE.lock().unwrap().0.push_back(line);
            READY.notify_one();
        }
        // stdin closed: the worker is gone (or dropped us); nobody will read a result,
        // so do not finish the unit (an orphan would burn a core until its budget ran out)
        std::process::exit(0);
    });
    loop {
        let line = {
            let mut q = QUEUE.lock().unwrap();
            while q.0.is_empty() && !q.1 {
                q = READY.wait(q).unwrap();
            }
            match q.0.pop_front() {
                Some(line) => line,
                None => return,
            }
        };
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.first() == Some(&"run") {
            RUNNING.fetch_add(1, Ordering::Relaxed);
        }
        let reply = match f.as_slice() {
            ["run", budget, max_sols, prefix, cursor] => {
                let parsed = (|| -> Result<String, String> {
                    let budget: u64 = budget.parse().map_err(|_| "bad budget".to_string())?;
                    let max_sols: usize = max_sols.parse().map_err(|_| "bad max_solutions".to_string())?;
                    let prefix = parse_list(program, prefix)?;
                    let cursor = parse_list(program, cursor)?;
                    run_unit(st, budget, max_sols, &prefix, &cursor)
                })();
                parsed.unwrap_or_else(|e| format!("error {e}\n"))
            }
            ["quit"] => return,
            _ => format!("error unknown request {:?}\n", line),
        };
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(reply.as_bytes());
        let _ = out.flush();
    }
}
