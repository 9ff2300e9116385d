//! e2fleet_rt: the puzzle-independent runtime of every compiled engine.
//!
//! Built once per (rustc, flags) as an rlib and cached; each generated program links it and
//! provides only its tables, its fused group functions and a [`Program`] value. This keeps
//! the per-puzzle compile down to the code that is actually specialised.
//!
//! Protocol (version 1, text lines on stdin/stdout): greet with
//! `e2fleet-engine 1 <build key> <depths>`; for each `run <budget|0> <max_solutions>
//! <prefix> <cursor>` line (placements `pos.piece.rot` joined by `,`, or `-`) print
//! `progress <committed>` lines while walking and then the result block (`result`,
//! `nodes`, `cursor`, `deepest`, `solutions`, `sol`..., `end`). A `stop` line makes the
//! running unit stop at its next countdown check, reported like a budget stop.
#![allow(clippy::all)]

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
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

static STOP: AtomicBool = AtomicBool::new(false);

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
        if STOP.load(Ordering::Relaxed) {
            self.stop = 2;
            self.stop_depth = d;
            return true;
        }
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "progress {}", self.committed);
        let _ = out.flush();
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
                Some(group) => group(st),
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
    // a reader thread sets the stop flag at once and queues everything else
    static QUEUE: Mutex<(VecDeque<String>, bool)> = Mutex::new((VecDeque::new(), false));
    static READY: Condvar = Condvar::new();
    std::thread::spawn(|| {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let Ok(line) = line else { break };
            if line.trim() == "stop" {
                STOP.store(true, Ordering::Relaxed);
                continue;
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
        STOP.store(false, Ordering::Relaxed);
        let f: Vec<&str> = line.split_whitespace().collect();
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
