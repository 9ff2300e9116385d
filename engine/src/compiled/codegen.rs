//! The code generator: one self-contained Rust program (std only) per (puzzle, fill order).
//!
//! What the emitted program bakes in as constants: every depth's cell, its key reads
//! (neighbour cell and colour shift), its table offset, its extra-side mask; the candidate
//! buckets and bucket offsets of the [`SearchPlan`] (already filtered by rim, hint and
//! later-cell sides, so the hot loop never checks them); the hint board.
//!
//! Shape of the hot path (see `docs/benchmarks.md` for what each step bought):
//! - depths are fused into groups of `group` cells: one `#[inline(never)]` function per
//!   group whose body nests one candidate loop per depth, so a call happens once per group;
//! - on boards of more than 128 pieces a candidate is one `u64` load and the used test one
//!   byte load from a fixed-size array indexed by the piece id (no bounds check), which on
//!   boards of up to 256 pieces is the candidate's low byte (`Layout`); a
//!   bucket's first candidate sits in `FIRST` at the key itself, so entering a cell is one
//!   load after the key instead of two (offset, then candidate): the chain from one
//!   placement to the next cell's first test is what hard boards wait on; a bucket's
//!   last candidate carries `LAST`, so the walk ends on the candidate in hand, and after
//!   a subtree the candidate is read back from the board, not kept live;
//! - a depth's node count starts at `u64::MAX`, so the increment that wraps to 0 is the
//!   unit's first visit of the depth (the runtime checks for a new deepest board there,
//!   not on every node);
//! - on boards of at most 128 pieces (the low-colour Brendan sets, clue puzzles) a level
//!   walks only the free pieces of its bucket: the bucket's piece mask less the used-piece
//!   mask, lowest bit first (canonical order), each bit's candidate read from the bucket's
//!   block of one slot per piece (the bit is the slot). No branch per used piece, which is
//!   where those boards lost most of their time (Brendan 7x7: 1.46 -> 0.62 mispredicts per
//!   node in callgrind's model). A piece with two candidates in one bucket (three equal colours)
//!   tries its second right after its first; a table with more falls back to the list.
//!   Group functions hold the mask in registers (one `u64`, or a `u128` on boards of
//!   65-128 pieces; `st.umask` is written only around calls and at return). On two-word
//!   boards the mask's second word starts where a table's pieces do when that puts every
//!   table's pieces in one word (Brendan 9x9 and 10x10: the rim pieces in one, the inner
//!   ones in the other; 7% fewer instructions per node), so a level reads and marks one
//!   word; failing that, a table whose pieces lie within 64 ids walks one word shifted
//!   by a constant, and any other word by word;
//! - on those boards, with [`CodegenOptions::slots`] (raced against the plain mask walk:
//!   [`super::walk`]), a level inside a group (not its first) finds its bucket from the slot
//!   of the candidate its enclosing loop holds: a `NEXT` table per transition, indexed by
//!   the key's other colour and that slot, gives the bucket's piece mask with its block's
//!   offset in the bits the table's pieces leave free, so from one node's free bit to the
//!   next cell's free mask is one load (the key walk reads the candidate, makes the key
//!   from its colour and reads the key's mask). These walks wait on that chain rather
//!   than on mispredicts: Brendan 6x6 to 9x9 1.05-1.09x, but an E2 clue puzzle 0.92x
//!   (`Chain`). A board where some transition's entry would not fit one word (set 2
//!   10x10: 64 inner pieces) keeps its keys everywhere. The buckets' blocks are packed
//!   into `BYBIT` (each at the first start where its pieces' slots are free), and a
//!   `NEXT` row has an entry per slot, so the rows are dense: 3-12 thousand entries
//!   against 60-300 thousand with a block of its own per bucket, whose hot entries sat
//!   one to a cache line (Brendan 9x9 1.09-1.12x, 8x8 1.02-1.04x);
//! - when the key's neighbour was placed by the enclosing loop of the same group, its colour
//!   comes from that loop's candidate register instead of a board load;
//! - on boards of more than 128 pieces the list walk's depths are cut into pruned levels
//!   ([`Prune`]: four groups each by default): a level reads its own copy of `FIRST` and
//!   `CANDS` without the pieces placed above its cut, which the runtime's `refilter`
//!   brings up to date at the level's first head when a node was placed above the cut
//!   since (on a deep walk the top of the board stays put for millions of nodes, and the
//!   cut moves to where that holds). Most refused candidates on hard boards are pieces
//!   placed long before (on the E2 pieces half of them over 70 levels up), and the used
//!   test on them is one of the node's two unpredictable branches: bench-hard 1.10x, the
//!   real E2 1.14x, bench-easy unchanged (session 21);
//! - the board is never cleared on backtrack (a cell is only read while placed);
//! - one countdown decrement per node covers the budget, progress and the stop flag; the
//!   flag is read only when the countdown reaches zero, never a clock.
//!
//! With [`CodegenOptions::slots`] (boards of more than 128 pieces, scan orders: see
//! [`slot_walk_applies`]) the fused groups give way to the slot walk: one function per
//! bucket with a used-test branch and a call site of its own for every candidate, the
//! next bucket's function found by key. The predictor then sees each slot's piece, whose
//! free/used state lasts, instead of one branch shared by a depth's every candidate:
//! 1.22-1.31x on hard 16x16 boards, 0.8-0.9x on bench-easy, a ~1.2-3x longer compile
//! (sessions 11-13 in `docs/benchmarks.md`), so which walk runs is decided per puzzle and
//! machine by a race ([`super::walk`]). Its functions reach the program's state, a static,
//! at fixed addresses (engines link position-dependent on Linux x86-64).
//!
//! Beside the fused chain, one table-driven `scan(depth, start)` resumes a unit inside a
//! group (a prefix or cursor ending mid-group, or the untried siblings of a cursor
//! placement) and hands over to the fused chain at the next group head. It is cold code,
//! kept generic so it costs no compile time per depth.
//!
//! The puzzle-independent part (state, slow path, cold scan, unit set-up, the protocol)
//! is the runtime library `runtime/e2fleet_rt.rs` ([`RUNTIME_SOURCE`]), built once per
//! compiler and flags and linked into every generated program.

use std::fmt::Write;

use crate::plan::{SENTINEL, SearchPlan};

/// Options that change the generated source.
#[derive(Clone, Debug)]
pub struct CodegenOptions {
    /// Depths fused into one function; `None`: [`default_group`] for the puzzle.
    pub group: Option<usize>,
    /// Nodes between two progress/stop checks.
    pub poll_interval: u64,
    /// Test-only fault injection: add one to the node count at this depth (0-based) on
    /// every finished unit, to prove the verification machinery catches a wrong engine.
    pub fault_depth: Option<usize>,
    /// Test-only fault injection: a program that greets and then never answers, to prove
    /// a hung engine is killed instead of hanging its caller.
    pub fault_hang: bool,
    /// Walk by slots where a walk by slots applies ([`slots_apply`]; elsewhere ignored):
    /// on boards of more than 128 pieces the slot walk ([`slot_walk_applies`]: one
    /// function per candidate bucket, one branch and one call site per candidate; faster
    /// on hard 16x16 boards, slower on easy ones, a 2-3.5x longer compile:
    /// `docs/benchmarks.md`, session 11); on boards of at most 128 pieces the mask walk
    /// with each level's bucket looked up from the slot of the candidate in hand
    /// ([`slot_lookup_applies`]: Brendan 6x6 to 9x9 1.05-1.09x, an E2 clue puzzle 0.92x:
    /// session 17). [`super::walk`] races the two walks.
    pub slots: bool,
    /// How the list walk prunes its tables ([`Prune`]; boards of more than 128 pieces
    /// walked by fused groups): `None` the default, [`Prune::default_for`]; `every: 0`
    /// none.
    pub prune: Option<Prune>,
}

/// Pruned levels of the list walk. Depths `k * every .. (k + 1) * every` (level `k`) read
/// their own copy of the bucket tables (`FIRST{k}`, `CANDS{k}`) from which the pieces
/// placed above the level's cut are left out, in canonical order. The cut starts at
/// depth `k * every - lag` and moves (see `few` and `many`); the runtime's `refilter`
/// brings a level's copy up to date at its first group head (and at any head the cold
/// `scan` enters) when a node was placed at the depth above the cut since, which on a
/// deep walk is rare (the top of the board stays put while the walk works far below
/// it). A pruned candidate is one the used test would
/// refuse, so the walk and its counts are unchanged; what goes is the refusals of pieces
/// placed long before, most of them on hard boards (`docs/benchmarks.md`, session 21).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prune {
    /// Depths per level, rounded up to whole fusion groups; 0: nothing pruned.
    pub every: usize,
    /// How far above its first depth a level's cut starts.
    pub lag: usize,
    /// A level brought up to date fewer nodes after its last time than this moves its
    /// cut one depth up (fewer placements above it, so fewer bring-ups)...
    pub few: u64,
    /// ... and one brought up to date more than this many nodes after, one depth down
    /// (more pieces pruned), as far as the level's first depth.
    pub many: u64,
}

impl Prune {
    /// The default for fusion groups of `group` depths: levels of four groups, each cut
    /// two groups above its first depth to start with; a bring-up (a few hundred to a few
    /// thousand cycles) less often than every 50,000 nodes, and cuts moved down while
    /// bring-ups come more than 5,000,000 nodes apart.
    pub fn default_for(group: usize) -> Prune {
        Prune {
            every: 4 * group,
            lag: 2 * group,
            few: 50_000,
            many: 5_000_000,
        }
    }

    /// No pruning.
    pub const OFF: Prune = Prune {
        every: 0,
        lag: 0,
        few: 0,
        many: 0,
    };
}

impl Default for CodegenOptions {
    fn default() -> Self {
        CodegenOptions {
            group: None,
            poll_interval: 1 << 22,
            fault_depth: None,
            fault_hang: false,
            slots: false,
            prune: None,
        }
    }
}

/// The source of the runtime library every generated program links.
pub const RUNTIME_SOURCE: &str = include_str!("../../runtime/e2fleet_rt.rs");

/// What generates compiled engines, as one short id: a hash of the runtime, this code
/// generator and the search plan tables it reads. Any change to them is a new id, so a
/// new engine release is a new hardware class for verification, whatever the puzzle.
pub fn generator_id() -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(RUNTIME_SOURCE);
    h.update(include_str!("codegen.rs"));
    h.update(include_str!("../plan.rs"));
    h.finalize()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The engine release of compiled engines built with these options, this walk policy
/// and this CPU target (`None` = generic): the same for every puzzle, unlike a build id
/// (which also says which walk a build runs: `-slots` at its end for the slot walk).
pub fn release_id(
    options: &CodegenOptions,
    walk: super::walk::Walk,
    target_cpu: Option<&str>,
) -> String {
    let mut id = format!(
        "compiled-{}-{}-g{}",
        generator_id(),
        target_cpu.unwrap_or("generic"),
        options.group.map_or("auto".to_string(), |g| g.to_string())
    );
    if let Some(d) = options.fault_depth {
        id.push_str(&format!("-FAULT{d}"));
    }
    if options.fault_hang {
        id.push_str("-HANG");
    }
    id.push_str(walk.release_suffix());
    id
}

/// How the generated program lays a candidate (and a board cell) out in its `u64`.
///
/// Every layout keeps the plan's right, down and left colours in bytes 1-3 (a key reads
/// the right colour of the candidate in hand as one `movzx` of its second byte), the
/// rotation in bits 48-49, and the piece id again in the top ten bits (the runtime reads
/// the piece there, whatever the layout: `piece_of`); bits 50-52 stay clear, so no
/// candidate equals the sentinel; bit 53 is [`LAST`] (or [`DUP`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// The plan's candidate as it is (colours in bits 0-31, the piece in bits 32-47),
    /// plus the piece in the top ten bits: a list level's used-set index is one shift.
    Plan,
    /// Boards of 129-256 pieces (every 16x16 board), whose levels walk lists: the piece
    /// id in byte 0, where the plan keeps the up colour, and the up colour in byte 4
    /// (bits 32-39, where the plan keeps the low byte of the piece). A list level's
    /// used-set index is then one `movzx` of the candidate's low byte, not a copy and a
    /// shift, for every candidate it tests and every piece it frees: bench-hard 41.1 ->
    /// 37.8 instructions per node, the real E2 40.5 -> 37.3 (generic build;
    /// `docs/benchmarks.md`, session 18).
    BytePiece,
}

impl Layout {
    fn of(plan: &SearchPlan) -> Layout {
        match plan.pieces {
            p if p > MASK_PIECES && p <= 256 => Layout::BytePiece,
            _ => Layout::Plan,
        }
    }

    /// A plan candidate as the program stores it (the sentinel unchanged).
    fn encode(self, c: u64) -> u64 {
        if c == SENTINEL {
            return c;
        }
        let piece = (crate::plan::candidate_piece(c) as u64) & 1023;
        let c = c | piece << 54;
        match self {
            Layout::Plan => c,
            Layout::BytePiece => (c & !0xFFFF_0000_00FF) | piece | (c & 0xFF) << Layout::UP_AT,
        }
    }

    /// Where the up colour goes in [`Layout::BytePiece`].
    const UP_AT: u32 = 32;

    /// The bit at which the program finds the colour the plan keeps at `shift` (a
    /// multiple of 8 below 32) of a candidate or a board cell.
    fn at(self, shift: u32) -> u32 {
        match self {
            Layout::BytePiece if shift < 8 => shift + Layout::UP_AT,
            _ => shift,
        }
    }

    /// A board cell's initial value (the plan's colours of a hint, the rim's 0).
    fn board(self, v: u32) -> u64 {
        let v = u64::from(v);
        match self {
            Layout::Plan => v,
            Layout::BytePiece => (v & !0xFF) | (v & 0xFF) << Layout::UP_AT,
        }
    }

    /// The expression for the piece (the used-set index) of candidate variable `var`.
    fn piece_expr(self, var: &str) -> String {
        match self {
            Layout::Plan => format!("({var} >> 54) as usize"),
            Layout::BytePiece => format!("({var} as u8) as usize"),
        }
    }
}

/// The flag of a bucket's last candidate (bit 53, clear in every plan candidate): a list
/// level tests it on the candidate it holds, so the walk's end is known as soon as the
/// candidate is, not one load later from the sentinel after it.
const LAST: u64 = 1 << 53;

/// The flag of a mask level's candidate whose piece has a second candidate in the bucket
/// (`B2` slots further in `BYBIT`): [`LAST`]'s bit, which mask levels never read. After
/// the first candidate's subtree the level reads it back from the board, its piece with
/// it, so nothing of the second stays live through the subtree (reading the second's slot
/// up front and keeping it cost a spill and a reload per node: Brendan set 2 8x8 37.5 ->
/// 34.8 instructions per node, set 1 9x9 39.2 -> 37.7, x86-64-v3 build).
const DUP: u64 = LAST;

/// Candidate `i` of the plan as a list level reads it: encoded as `layout` says, with
/// [`LAST`] when the bucket's sentinel follows it.
fn encode_at(layout: Layout, cands: &[u64], i: usize) -> u64 {
    match (cands[i], cands.get(i + 1)) {
        (SENTINEL, _) => SENTINEL,
        (c, Some(&SENTINEL)) => layout.encode(c) | LAST,
        (c, _) => layout.encode(c),
    }
}

/// Appends `bytes` as the inside of a Rust byte-string literal: printable ASCII as is, the
/// rest escaped.
fn push_byte_string(out: &mut String, bytes: &[u8]) {
    for &b in bytes {
        match b {
            0 => out.push_str("\\0"),
            b'"' | b'\\' => {
                out.push('\\');
                out.push(b as char);
            }
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
}

/// Boards of at most this many pieces keep a used mask and walk a bucket's free pieces as
/// its bits (one `u64` word up to 64 pieces, two above); larger boards walk lists. The
/// runtime's `MASK_PIECES`, which must agree.
const MASK_PIECES: usize = 128;

/// Most pruned levels a program may have: the runtime's `MAX_LEVELS`, which must agree.
const MAX_LEVELS: usize = 64;

/// The protocol version spoken by generated programs.
pub const PROTOCOL_VERSION: u32 = 3;

/// Emits the program for `plan`. `build_key` is embedded so the host can tell a stale or
/// corrupted binary from the right one.
pub fn emit(plan: &SearchPlan, options: &CodegenOptions, build_key: &str) -> String {
    emit_walk(plan, options, build_key).0
}

/// [`emit`], and whether the program walks by slots (the slot walk, or a mask level with
/// the slot lookup): [`slots_apply`] as this emission found it, without a second pass.
pub fn emit_walk(plan: &SearchPlan, options: &CodegenOptions, build_key: &str) -> (String, bool) {
    let mut g = Gen::new(plan, options);
    g.header(options, build_key);
    g.tables();
    let slot_walk = options.slots && slot_walk_applies(plan);
    let by_slots = slot_walk || g.chains.iter().any(Option::is_some);
    if slot_walk {
        g.slot_walk();
    } else {
        g.groups();
        g.scans();
    }
    g.program(options, build_key);
    (g.out, by_slots)
}

/// Whether [`CodegenOptions::slots`] changes the program for `plan` built with `options`
/// (their `slots` aside): the slot walk applies, or the slot lookup does.
pub fn slots_apply(plan: &SearchPlan, options: &CodegenOptions) -> bool {
    slot_walk_applies(plan) || slot_lookup_applies(plan, options)
}

/// Whether some mask level of `plan`, built with `options` (their `slots` aside: the
/// group decides which levels have a level before them in their function), would look
/// its bucket up from the slot of the candidate in hand (`Chain`): a board of at most
/// 128 pieces whose levels' keys read the level before's candidate, and whose every
/// lookup entry fits one word.
pub fn slot_lookup_applies(plan: &SearchPlan, options: &CodegenOptions) -> bool {
    if plan.pieces > MASK_PIECES {
        return false;
    }
    let options = CodegenOptions {
        slots: true,
        ..options.clone()
    };
    let mut g = Gen::new(plan, &options);
    // the tables decide whether every entry fits
    g.tables();
    g.chains.iter().any(Option::is_some)
}

impl<'p> Gen<'p> {
    fn new(plan: &'p SearchPlan, options: &CodegenOptions) -> Self {
        let group = options.group.unwrap_or_else(|| default_group(plan)).max(1);
        let prune = options.prune.unwrap_or_else(|| Prune::default_for(group));
        let mut prune_every = 0;
        if plan.pieces > MASK_PIECES
            && !(options.slots && slot_walk_applies(plan))
            && prune.every > 0
        {
            // whole groups, so a group reads one level; at most the runtime's levels
            prune_every = prune.every.div_ceil(group) * group;
            while plan.len() / prune_every >= MAX_LEVELS {
                prune_every += group;
            }
        }
        let mut g = Gen {
            prune_every,
            prune_lag: prune.lag,
            prune_few: prune.few,
            prune_many: prune.many,
            plan,
            group,
            out: String::with_capacity(1 << 20),
            walks: Default::default(),
            split: 64,
            main_init: String::new(),
            endian_checked: false,
            layout: Layout::of(plan),
            chains: Vec::new(),
            shapes: Vec::new(),
            next: Vec::new(),
        };
        // the levels' copies are statics of the program: fewer, longer levels keep them
        // within 256 MiB (a quarter of an engine's default memory) on any plan
        let per_level = 8 * (g.offsets_len() + plan.candidates.len());
        while g.prune_every > 0 && (plan.len() / g.prune_every) * per_level > 256 << 20 {
            g.prune_every += g.group;
        }
        g.walks = g.choose_walks();
        g.split_mask();
        if options.slots && plan.pieces <= MASK_PIECES {
            g.plan_chains();
        }
        g
    }
}

/// Depths fused into one group function unless the options say: 6, the best on 16x16
/// boards (the group-size sweep in `docs/benchmarks.md`), except on boards with a used
/// mask filled line by line in lines of 7 to 10 cells, where a group is one line, so that
/// every group starts a line and each depth but the first keys on the candidate of the
/// loop enclosing it. Brendan boards, M nodes/s per core, medians of 3 alternated runs of 3
/// s (session 14): set 1 7x7 142 -> 151 at 7, set 2 7x7 137 -> 142; set 1 9x9 134 -> 141
/// and 140 -> 143 at 9, set 2 9x9 134 -> 139 and 137 -> 147; set 1 and 2 8x8 +1-2% at 8
/// (+4-6% in session 13); 10x10 at 10, 5 runs: set 1 148.3 -> 153.0, set 2 153.1 -> 157.5
/// (37.2 -> 33.7 instructions per node); none on 10x10 at 5, nor on 8x8 at 4.
pub fn default_group(plan: &SearchPlan) -> usize {
    let line = fill_line(plan);
    match line {
        Some(l @ 7..=10) if plan.pieces <= MASK_PIECES => l,
        _ => 6,
    }
}

/// The length of the fill order's lines when it fills line by line (a row or column
/// scan): every key read of a cell placed earlier than the depth before is of the cell
/// one line back, `line` depths earlier.
fn fill_line(plan: &SearchPlan) -> Option<usize> {
    let mut depth_of = vec![usize::MAX; plan.cells + 1];
    for (d, dp) in plan.depths.iter().enumerate() {
        depth_of[dp.pos] = d;
    }
    let mut line = None;
    for (d, dp) in plan.depths.iter().enumerate() {
        for k in &dp.key {
            let e = depth_of[k.cell];
            if e == usize::MAX || e + 1 == d {
                continue;
            }
            match line {
                None => line = Some(d - e),
                Some(l) if l == d - e => {}
                Some(_) => return None,
            }
        }
    }
    line
}

/// How many modules a program's search functions (the list walk's group functions, the
/// slot walk's bucket functions) are split into, and the codegen units its build asks for
/// (`-Ccodegen-units`): rustc hands LLVM one unit per module, compiled in parallel. The
/// functions never inline into each other (`#[inline(never)]`), so the split costs no
/// code. bench-hard on two cores, rustc 1.95, cached runtime: the slot walk 2.3 s as one
/// unit, 1.7 s as four, 1.8 s as eight; the list walk 0.8 s -> 0.65 s as four
/// (docs/benchmarks.md, session 13).
pub const MODULES: usize = 4;

/// Whether [`CodegenOptions::slots`] changes the program for `plan`: boards of more than
/// 128 pieces (the list walk), fill orders without extra-side checks (the row- and
/// column-scan orders), and colours on byte boundaries of the board cells.
pub fn slot_walk_applies(plan: &SearchPlan) -> bool {
    // the shifts at which a depth reads the cell the depth before it placed: one value
    // (the right colour, in row order), read once per depth
    let mut me_shifts = std::collections::BTreeSet::new();
    for w in plan.depths.windows(2) {
        let reads: Vec<u32> = w[1]
            .key
            .iter()
            .filter(|k| k.cell == w[0].pos)
            .map(|k| k.shift)
            .collect();
        if reads.len() > 1 {
            return false;
        }
        me_shifts.extend(reads);
    }
    // the key -> function table holds `u16` indices into the distinct bucket functions
    let buckets: std::collections::BTreeSet<u32> = plan.offsets.iter().copied().collect();
    plan.pieces > MASK_PIECES
        && buckets.len() + 2 < 1 << 16
        && me_shifts.len() <= 1
        && plan
            .depths
            .iter()
            .all(|d| d.extra_mask == 0 && d.key.iter().all(|k| k.shift % 8 == 0 && k.shift < 64))
        && plan.initial_board[plan.cells] == 0
}

struct Gen<'p> {
    /// Depths per pruned level ([`Prune`]), 0 when nothing is pruned, and the cut's lag.
    prune_every: usize,
    prune_lag: usize,
    prune_few: u64,
    prune_many: u64,
    plan: &'p SearchPlan,
    group: usize,
    out: String,
    /// Per plan table (by its offset in the plan's `offsets`): how its depths walk a
    /// bucket (see [`Walk`]).
    walks: std::collections::HashMap<usize, Walk>,
    /// The first piece of the used mask's second word (the runtime's `mask_split`): 64,
    /// or on a two-word board whose every table fits one word of a lower split, that
    /// split (see [`Gen::split_mask`]).
    split: usize,
    /// Statements `main` runs before serving (the slot walk fills its function table).
    main_init: String,
    /// Whether the byte-order guard of [`Gen::words`] has been written.
    endian_checked: bool,
    /// How candidates and board cells are laid out (see [`Layout`]).
    layout: Layout,
    /// Per depth: how a mask level finds its bucket from the slot of the candidate the
    /// level before it holds (see [`Chain`]), or `None` (from the key, as any level).
    chains: Vec<Option<Chain>>,
    /// The chained transitions, one `NEXT{i}` table each.
    shapes: Vec<Shape>,
    /// How each table of [`Gen::shapes`] is laid out, once [`Gen::next_tables`] has.
    next: Vec<NextTable>,
}

/// A mask level `d` whose bucket is looked up in one load from the slot of the candidate
/// depth `d - 1` holds (in `BYBIT`) and the other colour of its key: its free mask is
/// then `entry & free`, and the chain from one node to the next is the lowest free bit,
/// an add, that load and an `and`, where the key walk reads the candidate, makes the key
/// from its colour and reads the key's mask (two loads and a shift and a mask more).
/// On low-colour boards the node waits on that chain (a 3-cycle multiply put in it cost
/// Brendan set 1 7x7 0.91x: `tools/enginebench/chain_probe.py`).
#[derive(Clone, Copy, Debug)]
struct Chain {
    /// Index into [`Gen::shapes`] (which also says which of depth `d`'s key reads is the
    /// candidate of depth `d - 1`).
    shape: usize,
}

/// The transitions one `NEXT` table serves: from plan table `from` (its depths hold the
/// candidate) to depths keyed on it as their read `read` at `shift`, in plan table `to`.
/// [`Gen::plan_chains`] finds them; [`Gen::next_tables`] lays each table out
/// ([`NextTable`]).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Shape {
    from: usize,
    to: usize,
    read: usize,
    shift: u32,
    /// Where the key's other colour comes from: the table of the depth that places the
    /// cell it reads and the read's shift (its colours are those of that table's
    /// candidates), or `None` (a constant: the border, or a hint's colour).
    other: Option<(usize, u32)>,
}

/// How a [`Shape`]'s table `NEXT{i}` is laid out. Entries `[y][slot]`: `y` the key's
/// other colour, `slot` an index into `BYBIT` from `lo` (`span` of them: from the first
/// to the last slot that holds a candidate of the shape's `from` buckets; slots between
/// them that are another table's keep an empty entry), then, for a table with a second
/// candidate per piece (`seconds`), the same slots `B2` on (the second candidates: slot +
/// `span`).
#[derive(Clone, Debug)]
struct NextTable {
    /// The other colours an entry row is kept for: `y - ys.start` indexes the rows.
    ys: std::ops::Range<usize>,
    lo: usize,
    span: usize,
    seconds: bool,
    /// Where an entry keeps its block's offset (`offset_bits` wide): in the bits below
    /// (0) or above (`64 - offset_bits`) the pieces of table `to`, whose masks never use
    /// them (files list corners, edges and inner pieces apart).
    packed_at: u32,
    offset_bits: u32,
}

/// How the depths of one bucket table walk a bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Walk {
    /// Every candidate in order, each piece's used byte tested (any board).
    List,
    /// The free pieces only, as the set bits of the bucket's piece mask less the used
    /// pieces' mask (boards of at most 128 pieces); `dups` when some piece has a second
    /// candidate in a bucket of the table (it is tried right after the first). `window`:
    /// on a two-word board, the first piece of a table whose pieces all lie within 64 ids
    /// of it (its buckets then walk one word: the used mask shifted by a constant; files
    /// list corners, edges and inner pieces apart, so each table's pieces are one run).
    Mask { dups: bool, window: Option<usize> },
}

macro_rules! w {
    ($g:expr, $($arg:tt)*) => { let _ = writeln!($g.out, $($arg)*); };
}

impl Gen<'_> {
    fn header(&mut self, _options: &CodegenOptions, _build_key: &str) {
        w!(
            self,
            "// Generated by e2fleet-engine: a search specialised to one puzzle and fill order."
        );
        w!(
            self,
            "#![allow(unused_parens, unused_mut, unused_variables, dead_code, clippy::all)]"
        );
        w!(self, "extern crate e2fleet_rt;");
        w!(self, "use e2fleet_rt::{{scan, Program, St, SENTINEL}};");
        // Every index reaching `cand` is a bucket start from `OFFS` or a later slot of the
        // same bucket, and every walk stops at the bucket's SENTINEL: the index is always
        // inside `CANDS` (the plan is checked when it is built), so the hot loop skips the
        // bounds check. The cold runtime reads `CANDS` with checks.
        w!(
            self,
            "#[inline(always)]\nfn cand(i: usize) -> u64 {{ unsafe {{ *CANDS.get_unchecked(i) }} }}"
        );
        // The state is a static of the program, so every field has a fixed address (a
        // position-dependent build reaches it with no register). `main` hands it to the
        // runtime, which passes it back to the entry points (`HEADS`). The slot walk's
        // functions take no state argument (one callee-saved register fewer in each: the
        // real E2 1.16x) and its entry points take the state from the static again rather
        // than from that argument; the list walk keeps the argument (the static there:
        // bench-easy 0.91x, Brendan 7x7 0.97x).
        w!(
            self,
            "static mut ST: St = e2fleet_rt::new_state(&PROGRAM);\n#[inline(always)]\nfn state() -> &'static mut St {{ unsafe {{ &mut *(&raw mut ST) }} }}"
        );
    }

    fn program(&mut self, options: &CodegenOptions, build_key: &str) {
        let p = self.plan;
        w!(
            self,
            "static PROGRAM: Program = Program {{ cells: {}, depths: {}, pieces: {}, stride_log2: {}, poll: {}, protocol: {PROTOCOL_VERSION}, build_key: {build_key:?}, mask_split: {}, fault_depth: {:?}, cands: &CANDS, offs: &OFFS, init_board: &INIT_BOARD, init_used: &INIT_USED, dpos: &DPOS, dkey: &DKEY, dextra: &DEXTRA, hints: &HINTS, heads: &HEADS, first: &FIRST, prune_every: {}, prune_lag: {}, prune_few: {}, prune_many: {}, prune_tables }};",
            p.cells,
            p.len(),
            p.pieces,
            self.stride_log2(),
            options.poll_interval.max(1),
            self.split,
            options.fault_depth,
            self.prune_every,
            self.prune_lag,
            self.prune_few,
            self.prune_many
        );
        if options.fault_hang {
            w!(
                self,
                "fn main() {{ println!(\"e2fleet-engine {PROTOCOL_VERSION} {build_key} {}\"); std::thread::sleep(std::time::Duration::from_secs(3600)); }}",
                p.len()
            );
        } else {
            w!(
                self,
                "fn main() {{ {} e2fleet_rt::serve_in(state()) }}",
                self.main_init
            );
        }
    }

    fn tables(&mut self) {
        let (p, layout) = (self.plan, self.layout);
        self.words(
            "CANDS",
            "u64",
            (0..p.candidates.len()).map(|i| encode_at(layout, &p.candidates, i)),
        );
        let offs = self.offsets();
        self.words("OFFS", "u32", offs.iter().map(|&o| u64::from(o)));
        // each bucket's first candidate beside its offset: a list level reads it straight
        // from the key, one dependent load fewer on the way into every cell (SENTINEL:
        // empty)
        w!(self, "const LAST: u64 = {LAST:#x};");
        self.words(
            "FIRST",
            "u64",
            offs.iter()
                .map(|&o| encode_at(layout, &p.candidates, o as usize)),
        );
        // the pruned levels' copies: zeroed statics (pages never touched cost nothing),
        // filled by the runtime when the level is first brought up to date
        let levels = self.pruned_levels();
        for &k in &levels {
            w!(
                self,
                "static mut FIRST{k}: [u64; {}] = [0; {}];",
                offs.len(),
                offs.len()
            );
            w!(
                self,
                "static mut CANDS{k}: [u64; {}] = [0; {}];",
                p.candidates.len(),
                p.candidates.len()
            );
        }
        let arms: String = levels
            .iter()
            .map(|k| format!("{k} => ((&raw mut FIRST{k}).cast(), (&raw mut CANDS{k}).cast()), "))
            .collect();
        w!(
            self,
            "fn prune_tables(k: usize) -> (*mut u64, *mut u64) {{ match k {{ {arms}_ => (core::ptr::null_mut(), core::ptr::null_mut()) }} }}"
        );
        w!(self, "const _: () = assert!(LAST == e2fleet_rt::LAST);");
        if self.mask_words() > 0 {
            self.mask_tables(&offs);
        }
        let mut init = p.initial_board.clone();
        init.truncate(p.cells + 1);
        self.words("INIT_BOARD", "u64", init.iter().map(|&v| layout.board(v)));
        self.array(
            "INIT_USED",
            "u8",
            p.initial_used.iter().map(|v| v.to_string()),
        );
        self.words("DPOS", "u16", p.depths.iter().map(|d| d.pos as u64));
        let dkey: Vec<String> = p
            .depths
            .iter()
            .map(|d| {
                format!(
                    "[{}, {}, {}, {}, {}, {}]",
                    self.table_offset(d.table),
                    d.key[0].cell,
                    self.layout.at(d.key[0].shift),
                    d.key[1].cell,
                    self.layout.at(d.key[1].shift),
                    d.extra_mask
                )
            })
            .collect();
        self.array("DKEY", "[u32; 6]", dkey.into_iter());
        // extra reads: up to two per depth, (cell, shift, where the side's colour sits in
        // the candidate); dummy cell when unused
        let layout = self.layout;
        self.array(
            "DEXTRA",
            "[[u32; 3]; 2]",
            p.depths.iter().map(|d| {
                let mut e = [[p.cells as u32, 0, 0]; 2];
                for (k, &(read, side)) in d.extra.iter().take(2).enumerate() {
                    e[k] = [
                        read.cell as u32,
                        layout.at(read.shift),
                        layout.at(8 * side as u32),
                    ];
                }
                format!(
                    "[[{}, {}, {}], [{}, {}, {}]]",
                    e[0][0], e[0][1], e[0][2], e[1][0], e[1][1], e[1][2]
                )
            }),
        );
        self.array(
            "HINTS",
            "(u16, u16, u8)",
            p.hints
                .iter()
                .map(|h| format!("({}, {}, {})", h.pos, h.piece, h.rot)),
        );
    }

    /// log2 of the bucket table stride: colours rounded up to a power of two, so a key is a
    /// shift and an add.
    fn stride_log2(&self) -> u32 {
        self.plan.colours.next_power_of_two().trailing_zeros()
    }

    /// Where table `t` (of the plan) starts in the emitted `OFFS`.
    fn table_offset(&self, plan_table: usize) -> usize {
        let c = self.plan.colours;
        (plan_table / (c * c)) << (2 * self.stride_log2())
    }

    /// How many entries [`Gen::offsets`] has.
    fn offsets_len(&self) -> usize {
        let log = self.stride_log2();
        (self.plan.tables << (2 * log)) + 255 * (1usize << log) + 256
    }

    /// The plan's bucket offsets re-laid with the power-of-two stride, padded so that any
    /// two key bytes (0..=255) index inside the array: the compiler then drops the bounds
    /// check of every lookup.
    fn offsets(&self) -> Vec<u32> {
        let (p, log) = (self.plan, self.stride_log2());
        let c = p.colours;
        let mut offs = vec![0u32; self.offsets_len()];
        for t in 0..p.tables {
            for a in 0..c {
                for b in 0..c {
                    offs[(t << (2 * log)) + (a << log) + b] = p.offsets[t * c * c + a * c + b];
                }
            }
        }
        offs
    }

    /// Words of the used-piece mask the generated code reads: 1 (a `u64`, at most 64
    /// pieces) or 2 (a `u128`, at most 128: the runtime's `MASK_PIECES`); 0 when the
    /// board is larger, every depth walks its list and the used bytes are the record.
    fn mask_words(&self) -> usize {
        match self.plan.pieces {
            0..=64 => 1,
            65..=MASK_PIECES => 2,
            _ => 0,
        }
    }

    /// The bucket starting at `offset` of the plan's candidates, grouped by piece (in
    /// canonical order: ascending piece, its rotations in order).
    fn bucket_pieces(&self, offset: usize) -> Vec<Vec<u64>> {
        let mut out: Vec<Vec<u64>> = Vec::new();
        for &c in self.plan.candidates[offset..]
            .iter()
            .take_while(|&&c| c != SENTINEL)
        {
            let piece = crate::plan::candidate_piece(c);
            match out.last_mut() {
                Some(group) if crate::plan::candidate_piece(group[0]) == piece => group.push(c),
                _ => out.push(vec![c]),
            }
        }
        out
    }

    /// How each table's depths walk their buckets: by mask on boards of at most 128
    /// pieces, unless a bucket holds more than two candidates of one piece.
    fn choose_walks(&self) -> std::collections::HashMap<usize, Walk> {
        let p = self.plan;
        let c = p.colours;
        let mut walks = std::collections::HashMap::new();
        for t in 0..p.tables {
            let table = t * c * c;
            let walk = if self.mask_words() == 0 {
                Walk::List
            } else {
                let groups: Vec<Vec<u64>> = (0..c * c)
                    .flat_map(|k| self.bucket_pieces(p.offsets[table + k] as usize))
                    .collect();
                let most = groups.iter().map(|g| g.len()).max().unwrap_or(1);
                let (low, high) = self.table_range(t).unwrap_or((0, 0));
                let window = (self.mask_words() == 2 && high - low < 64).then_some(low);
                match most {
                    0 | 1 => Walk::Mask {
                        dups: false,
                        window,
                    },
                    2 => Walk::Mask { dups: true, window },
                    _ => Walk::List,
                }
            };
            walks.insert(table, walk);
        }
        walks
    }

    /// The pieces of plan table `t`'s buckets: (lowest, highest), or `None` if it has none.
    fn table_range(&self, t: usize) -> Option<(usize, usize)> {
        let c = self.plan.colours;
        let pieces: Vec<usize> = (0..c * c)
            .flat_map(|k| self.bucket_pieces(self.plan.offsets[t * c * c + k] as usize))
            .map(|g| crate::plan::candidate_piece(g[0]))
            .collect();
        Some((*pieces.iter().min()?, *pieces.iter().max()?))
    }

    /// On a two-word board, lays the used mask out so that every table's pieces fall in
    /// one word: word 0 the pieces below the split, word 1 the 64 from it. Files list
    /// corners, edges and inner pieces apart, so the split is where the inner pieces
    /// start: Brendan's 9x9 (32 rim, 49 inner) and 10x10 (36, 64) fit, where the plain
    /// layout puts the inner pieces across both words. Each level then reads and marks
    /// one word (`u128` halves, never a shift across the two), and its table's window is
    /// its first piece, or the split itself for the second word. Nothing changes unless
    /// every table walks by mask and a split fits.
    fn split_mask(&mut self) {
        if self.mask_words() != 2 {
            return;
        }
        let c = self.plan.colours;
        let mut ranges = Vec::new();
        for t in 0..self.plan.tables {
            if !matches!(self.walks.get(&(t * c * c)), Some(Walk::Mask { .. })) {
                return;
            }
            ranges.extend(self.table_range(t).map(|r| (t, r)));
        }
        let pieces = self.plan.pieces;
        let fits = |s: usize| {
            s <= 64
                && pieces <= s + 64
                && ranges
                    .iter()
                    .all(|&(_, (lo, hi))| hi < s || (lo >= s && hi < s + 64))
        };
        if fits(64) {
            return;
        }
        let Some(split) = ranges
            .iter()
            .map(|&(_, (lo, _))| lo)
            .filter(|&s| fits(s))
            .min()
        else {
            return;
        };
        self.split = split;
        for (t, (lo, _)) in ranges {
            if let Some(Walk::Mask { window, .. }) = self.walks.get_mut(&(t * c * c)) {
                *window = Some(if lo < split { lo } else { split });
            }
        }
    }

    /// Which mask levels look their bucket up from the slot of the candidate the level
    /// before holds ([`Chain`]): every depth but a group's first whose table and the one
    /// before walk by mask, whose walk reads one word (a one-word board, or a windowed
    /// table), and whose key reads the depth before's candidate once, at a byte.
    fn plan_chains(&mut self) {
        let p = self.plan;
        self.chains = vec![None; p.len()];
        if self.mask_words() == 0 {
            return;
        }
        for d in 1..p.len() {
            if self.is_head(d) {
                continue;
            }
            let (from, to) = (p.depths[d - 1].table, p.depths[d].table);
            let one_view = |t: usize| match self.walks.get(&t) {
                Some(Walk::Mask { window, .. }) => self.mask_words() == 1 || window.is_some(),
                _ => false,
            };
            if !one_view(from) || !one_view(to) {
                continue;
            }
            let reads = &p.depths[d].key;
            let mine: Vec<usize> = (0..2)
                .filter(|&r| reads[r].cell == p.depths[d - 1].pos)
                .collect();
            let &[read] = mine.as_slice() else {
                continue;
            };
            let shift = reads[read].shift;
            if !shift.is_multiple_of(8) || shift > 56 {
                continue;
            }
            let o = reads[1 - read];
            let other = p.depths[..d - 1]
                .iter()
                .find(|e| e.pos == o.cell)
                .map(|e| (e.table, o.shift));
            let shape = Shape {
                from,
                to,
                read,
                shift,
                other,
            };
            let i = match self.shapes.iter().position(|s| *s == shape) {
                Some(i) => i,
                None => {
                    self.shapes.push(shape);
                    self.shapes.len() - 1
                }
            };
            self.chains[d] = Some(Chain { shape: i });
        }
    }

    /// The `NEXT` tables of [`Gen::shapes`], given what [`Gen::mask_tables`] laid out: per
    /// key (as `OFFS` indexes them) the mask a level of its table reads (`views`: `MASK`,
    /// or `MASKW` for a windowed table) and its block (`bases`), and `BYBIT`'s first and
    /// second candidates.
    fn next_tables(
        &mut self,
        offs: &[u32],
        views: &[u64],
        bases: &[usize],
        bybit: &[u64],
        bybit2: &[u64],
    ) {
        let (c, log) = (self.plan.colours, self.stride_log2());
        let offset_bits = usize::BITS - bybit.len().leading_zeros();
        let mut tables = Vec::with_capacity(self.shapes.len());
        for i in 0..self.shapes.len() {
            let sh = self.shapes[i].clone();
            // the slots of table `from`'s buckets: `BYBIT`'s indexes (block plus piece)
            // that hold one of their candidates; the packed blocks interleave, so a slot
            // between them may be another table's, and its entry stays empty
            let seconds = match self.walks.get(&sh.from) {
                Some(&Walk::Mask { dups, .. }) => dups,
                _ => unreachable!("a chain starts from a mask table"),
            };
            let from = self.table_offset(sh.from);
            let keys = (0..c).flat_map(|a| (0..c).map(move |b| from + (a << log) + b));
            let mut used: Vec<usize> = keys
                .filter(|&k| offs[k] != 0)
                .flat_map(|k| {
                    self.bucket_pieces(offs[k] as usize)
                        .into_iter()
                        .map(move |g| bases[k] + crate::plan::candidate_piece(g[0]))
                })
                .collect();
            used.sort_unstable();
            used.dedup();
            let lo = used.first().copied().unwrap_or(0);
            let hi = used.last().map_or(0, |&s| s + 1);
            let to = self.table_offset(sh.to);
            let ys = match sh.other {
                Some((t, shift)) => {
                    let first = self.table_offset(t);
                    let colours: Vec<usize> = (0..c)
                        .flat_map(|a| (0..c).map(move |b| first + (a << log) + b))
                        .flat_map(|k| self.bucket_pieces(offs[k] as usize))
                        .flatten()
                        .map(|cand| ((cand >> shift) & 0xFF) as usize)
                        .collect();
                    let (min, max) = (colours.iter().min(), colours.iter().max());
                    min.zip(max).map_or(0..0, |(&a, &b)| a..b + 1)
                }
                None => 0..c,
            };
            let mut entries = Vec::new();
            for y in ys.clone() {
                for half in [bybit, bybit2].iter().take(1 + usize::from(seconds)) {
                    for slot in lo..hi {
                        let cand = half[slot];
                        if cand == SENTINEL || used.binary_search(&slot).is_err() {
                            entries.push((0, 0));
                            continue;
                        }
                        let colour = ((cand >> sh.shift) & 0xFF) as usize;
                        let k = match sh.read {
                            0 => to + (colour << log) + y,
                            _ => to + (y << log) + colour,
                        };
                        entries.push((views[k], bases[k] as u64));
                    }
                }
            }
            let bits = entries.iter().fold(0u64, |a, e| a | e.0);
            let packed_at = if bits.trailing_zeros() >= offset_bits {
                Some(0)
            } else if 64 - bits.leading_zeros() + offset_bits <= 64 {
                Some(64 - offset_bits)
            } else {
                None
            };
            // the offset beside the mask instead (a `u32` array read with the same index:
            // 12 bytes an entry) costs more than the chain saves where a table has 64
            // pieces: Brendan set 1 and 2 10x10 0.94x and 0.92x, 11-12 MB of tables (as
            // 16-byte pairs 0.90x); and chaining only the levels whose entries fit (their
            // rims) 0.98-0.99x (5 alternated rounds each): then no level chains. (No other
            // colour at all: the depth is never reached.)
            let Some(packed_at) = packed_at.filter(|_| !ys.is_empty()) else {
                self.chains.iter_mut().for_each(|ch| *ch = None);
                self.next.clear();
                return;
            };
            self.next.push(NextTable {
                ys,
                lo,
                span: hi - lo,
                seconds,
                packed_at,
                offset_bits,
            });
            tables.push(entries);
        }
        for (i, entries) in tables.into_iter().enumerate() {
            let at = self.next[i].packed_at;
            let packed = entries.iter().map(|&(m, o)| m | o << at);
            self.words(&format!("NEXT{i}"), "u64", packed);
        }
    }

    /// The bit of the used mask (as the generated code holds it: a `u128` of the runtime's
    /// two words) that is piece `p`'s.
    fn mask_bit(&self, p: usize) -> usize {
        if p < self.split {
            p
        } else {
            p - self.split + 64
        }
    }

    /// The tables of the mask walk, indexed like `OFFS`: `MASK` (the pieces with a
    /// candidate in the bucket, a `u64` a word of the used mask), `BYBIT` (a block per
    /// distinct bucket, whose slot `p` holds piece `p`'s first candidate there; blocks
    /// overlap, packed so that no two buckets' candidates share a slot, and a slot no
    /// bucket's piece has holds the sentinel; when some table has pieces with two
    /// candidates in a bucket, the second ones follow, `B2` slots further) and `BLOCK` (a
    /// pointer to the bucket's block). A set bit of the free mask is then its candidate's
    /// slot: from the mask to the candidate is one load addressed by the block and the
    /// bit, with no rank to count and no add (an index into one array costs an add before
    /// the load).
    fn mask_tables(&mut self, offs: &[u32]) {
        let words = self.mask_words();
        let mut base_of: std::collections::HashMap<u32, usize> = Default::default();
        let (mut bybit, mut bybit2) = (Vec::new(), Vec::new());
        // the slots a block holds a candidate in: blocks are packed first fit, each at the
        // lowest start where its pieces' slots are all free (a bucket holds few of the
        // board's pieces, so blocks interleave and the `NEXT` rows, one entry a slot,
        // stay dense)
        let mut taken: Vec<bool> = Vec::new();
        let mut masks = Vec::with_capacity(offs.len());
        let mut bases = Vec::with_capacity(offs.len());
        let mut windows = Vec::with_capacity(offs.len());
        let (mut views, mut base_nums) = (Vec::with_capacity(offs.len()), Vec::new());
        let c = self.plan.colours;
        let mut k_of = 0..offs.len();
        for &o in offs {
            let groups = self.bucket_pieces(o as usize);
            let mut whole = 0u128;
            for g in &groups {
                whole |= 1 << self.mask_bit(crate::plan::candidate_piece(g[0]));
            }
            let mask = [whole as u64, (whole >> 64) as u64];
            let mask = &mask[..words];
            let base = *base_of.entry(o).or_insert_with(|| {
                let pieces: Vec<usize> = groups
                    .iter()
                    .map(|g| crate::plan::candidate_piece(g[0]))
                    .collect();
                let free = |base: usize| {
                    pieces
                        .iter()
                        .all(|&p| !taken.get(base + p).copied().unwrap_or(false))
                };
                let base = (0..)
                    .find(|&b| free(b))
                    .expect("an end past every taken slot is free");
                let end = base + pieces.iter().max().map_or(0, |&p| p + 1);
                if bybit.len() < end {
                    bybit.resize(end, SENTINEL);
                    bybit2.resize(end, SENTINEL);
                    taken.resize(end, false);
                }
                for &p in &pieces {
                    taken[base + p] = true;
                }
                for g in &groups {
                    let piece = crate::plan::candidate_piece(g[0]);
                    bybit[base + piece] =
                        self.layout.encode(g[0]) | if g.len() > 1 { DUP } else { 0 };
                    bybit2[base + piece] = g.get(1).map_or(SENTINEL, |&c| self.layout.encode(c));
                }
                base
            });
            bases.push(base.to_string());
            base_nums.push(base);
            // the table's window: its mask seen from its first piece
            let table = k_of.next().map(|k| k >> (2 * self.stride_log2()));
            let low = table
                .filter(|&t| t < self.plan.tables)
                .and_then(|t| match self.walks.get(&(t * c * c)) {
                    Some(Walk::Mask { window, .. }) => *window,
                    _ => None,
                })
                .unwrap_or(0);
            let window = (whole >> self.mask_bit(low)) as u64;
            windows.push(format!("{window:#x}"));
            views.push(if words == 1 { whole as u64 } else { window });
            let mask: Vec<String> = mask.iter().map(|m| format!("{m:#x}")).collect();
            if words == 1 {
                masks.push(mask[0].clone());
            } else {
                masks.push(format!("[{}]", mask.join(", ")));
            }
        }
        let mask_ty = match words {
            1 => "u64".to_string(),
            w => format!("[u64; {w}]"),
        };
        self.array("MASK", &mask_ty, masks.into_iter());
        if words == 2 {
            self.array("MASKW", "u64", windows.into_iter());
        }
        let dups = self
            .walks
            .values()
            .any(|w| matches!(w, Walk::Mask { dups: true, .. }));
        w!(self, "const B2: usize = {};", bybit.len());
        self.next_tables(offs, &views, &base_nums, &bybit, &bybit2);
        if dups {
            bybit.extend(bybit2);
        }
        self.words("BYBIT", "u64", bybit.iter().copied());
        w!(self, "struct Block(*const u64);");
        w!(self, "// its pointers only ever read immutable statics");
        w!(self, "unsafe impl Sync for Block {{}}");
        self.array(
            "BLOCK",
            "Block",
            bases
                .iter()
                .map(|b| format!("Block(unsafe {{ BYBIT.as_ptr().add({b}) }})")),
        );
    }

    /// An array of integers of `width` bytes (1, 2, 4 or 8; `ty` names the type). Long
    /// ones are written as one byte string transmuted in place: rustc parses, type-checks
    /// and borrow-checks an array literal of ~10^5 integers for most of a second (the
    /// 16x16 list walk compiled in 1.3 s with its tables as literals, 0.7 s as bytes), a
    /// byte string in no time. The bytes are in the worker's byte order and the program
    /// refuses to build for any other.
    fn words(&mut self, name: &str, ty: &str, values: impl Iterator<Item = u64>) {
        let width = match ty {
            "u8" => 1,
            "u16" => 2,
            "u32" => 4,
            "u64" => 8,
            _ => unreachable!("{ty} is not a word type"),
        };
        let values: Vec<u64> = values.collect();
        if values.len() < 256 {
            self.array(name, ty, values.iter().map(|v| format!("{v:#x}")));
            return;
        }
        if !self.endian_checked {
            self.endian_checked = true;
            let endian = if cfg!(target_endian = "big") {
                "big"
            } else {
                "little"
            };
            w!(
                self,
                "const _: () = assert!(cfg!(target_endian = \"{endian}\"), \"tables written for a {endian}-endian target\");"
            );
        }
        let n = values.len();
        let _ = write!(
            self.out,
            "static {name}: [{ty}; {n}] = unsafe {{ core::mem::transmute::<[u8; {}], [{ty}; {n}]>(*b\"",
            n * width
        );
        for v in values {
            assert!(
                width == 8 || v >> (8 * width) == 0,
                "{name}: {v} is wider than {ty}"
            );
            let (be, le) = (v.to_be_bytes(), v.to_le_bytes());
            let bytes = if cfg!(target_endian = "big") {
                &be[8 - width..]
            } else {
                &le[..width]
            };
            push_byte_string(&mut self.out, bytes);
        }
        self.out.push_str("\") };\n");
    }

    fn array(&mut self, name: &str, ty: &str, items: impl Iterator<Item = String>) {
        let items: Vec<String> = items.collect();
        let _ = write!(self.out, "static {name}: [{ty}; {}] = [", items.len());
        for (i, item) in items.iter().enumerate() {
            if i % 16 == 0 {
                self.out.push('\n');
            }
            self.out.push_str(item);
            self.out.push(',');
        }
        self.out.push_str("\n];\n");
    }

    /// The expression for key read `k` (0 or 1) of depth `d`, given which depths of the
    /// current function hold their candidate in a local (`c{depth}`).
    fn key_expr(&self, d: usize, k: usize, locals: &[usize]) -> String {
        let dp = &self.plan.depths[d];
        let read = dp.key[k];
        if read.cell == self.plan.cells {
            return "0usize".into();
        }
        if let Some(&src) = locals
            .iter()
            .find(|&&l| self.plan.depths[l].pos == read.cell)
        {
            return format!(
                "((c{src} >> {}) & 0xFF) as usize",
                self.layout.at(read.shift)
            );
        }
        format!(
            "((st.cells[{}][0] >> {}) & 0xFF) as usize",
            read.cell,
            self.layout.at(read.shift)
        )
    }

    /// The index into `OFFS` (and the mask walk's tables) of depth `d`'s bucket.
    fn key_index_expr(&self, d: usize, locals: &[usize]) -> String {
        let dp = &self.plan.depths[d];
        let a = self.key_expr(d, 0, locals);
        let b = self.key_expr(d, 1, locals);
        format!(
            "{} + (({a}) << {}) + {b}",
            self.table_offset(dp.table),
            self.stride_log2()
        )
    }

    fn bucket_expr(&self, d: usize, locals: &[usize]) -> String {
        format!("OFFS[{}] as usize", self.key_index_expr(d, locals))
    }

    /// ` && (the extra sides of candidate `var` match)`, or nothing for a depth without
    /// extra sides.
    fn extra_check(&self, d: usize, var: &str) -> String {
        let dp = &self.plan.depths[d];
        if dp.extra_mask == 0 {
            return String::new();
        }
        // as the program lays the candidate out: a `u32` where the sides fit one
        let at = |side: usize| self.layout.at(8 * side as u32);
        let mask = dp.extra.iter().fold(0u64, |m, &(_, s)| m | 0xFF << at(s));
        let ty = if mask > u64::from(u32::MAX) {
            "u64"
        } else {
            "u32"
        };
        let mut expect = format!("0{ty}");
        for &(read, side) in &dp.extra {
            let _ = write!(
                expect,
                " | ((((st.cells[{}][0] >> {}) & 0xFF) as {ty}) << {})",
                read.cell,
                self.layout.at(read.shift),
                at(side)
            );
        }
        format!(" && ({var} as {ty} & {mask:#x}) == ({expect})")
    }

    /// Whether group functions hold the used mask in a register (as its complement:
    /// `u_in` at entry, `u{d}` after depth `d` places its piece) and write it to
    /// `st.umask` only when they call out and when they return: every board with a used
    /// mask. Two-word boards first, where reading both words of `st.umask` right after a
    /// store into one of them cost more than it saved (Brendan set 2 10x10: 78-82 M nodes/s from memory, 98-112 from
    /// registers); one-word boards since session 13 (a `u64` register: set 1 8x8 1.044x,
    /// set 2 7x7 1.024x, 5 alternated rounds; no change on 7x7 when first tried in
    /// session 7).
    ///
    /// What they hold is the complement of `st.umask`, the free pieces: a level's walk is
    /// `MASK & free` and its mark `free & !bit` (`btr`). Holding the used pieces, LLVM
    /// computed the `not` of every level's `u128` mask up front and kept it in a spill
    /// slot of its own; on one-word boards `andn` reads the bucket mask against the used
    /// register in one instruction, but the free mask still won on five of the six
    /// one-word Brendan boards. Instructions per node, x86-64-v3 build, used -> free: set
    /// 1 9x9 37.7 -> 36.9, set 2 10x10 37.2 -> 35.9; set 1 6x6 32.3 -> 31.1, set 2 6x6
    /// 32.1 -> 31.0, set 2 7x7 34.4 -> 34.2, set 1 8x8 34.9 -> 33.8, set 2 8x8 34.8 ->
    /// 33.7; set 1 7x7 29.8 -> 31.2.
    fn held(&self) -> bool {
        self.mask_words() >= 1
    }

    /// The register holding the used (or free) pieces before depth `d` places its piece.
    fn held_before(&self, d: usize) -> String {
        if self.is_head(d) {
            "u_in".into()
        } else {
            format!("u{}", d - 1)
        }
    }

    /// The statement that marks piece `p{d}` on (`on`) or off the board: its used byte, or
    /// on boards with a used mask its bit there (the runtime reads the same record), or
    /// the next register of the mask when it is held (off is then nothing to do).
    fn mark(&self, d: usize, on: bool) -> String {
        if self.held() {
            if !on {
                return String::new();
            }
            // a windowed level's bit is `b{d}` above its constant `low`: a u64 shift and
            // constant u128 shifts, where `1u128 << p{d}` shifts by a variable across
            // both words (Brendan set 1 10x10: 1.09x, 7 alternated rounds)
            // on a split mask a level's bit is in one word: the low one's as it is, the
            // high one's shifted a whole word
            let bit = match self.walks[&self.plan.depths[d].table] {
                Walk::Mask {
                    window: Some(low), ..
                } if self.split < 64 => match low < self.split {
                    true => format!("((1u64 << p{d}) as u128)"),
                    false => format!("(((1u64 << b{d}) as u128) << 64)"),
                },
                Walk::Mask {
                    window: Some(low), ..
                } => format!("(((1u64 << b{d}) as u128) << {low})"),
                _ => format!("(1u128 << p{d})"),
            };
            let held = self.held_before(d);
            let ty = if self.mask_words() == 1 {
                "u64"
            } else {
                "u128"
            };
            let bit = if self.mask_words() == 1 {
                format!("(1u64 << p{d})")
            } else {
                bit
            };
            return format!("let u{d}: {ty} = {held} & !{bit};");
        }
        format!("st.used[p{d}] = {};", u8::from(on))
    }

    /// Whether piece `p{d}` is on the board, as the record [`Gen::mark`] keeps.
    fn is_used(&self, d: usize) -> String {
        // only list levels ask, and a split mask has none (`Gen::split_mask`), so the
        // held bit of piece `p` is bit `p`
        debug_assert_eq!(self.split, 64);
        if self.held() {
            return format!("({} >> p{d}) & 1 == 0", self.held_before(d));
        }
        format!("st.used[p{d}] != 0")
    }

    /// The body that commits candidate `c{d}` at depth `d` (after the used test).
    fn commit(&self, d: usize) -> String {
        let dp = &self.plan.depths[d];
        let leaf = d + 1 == self.plan.len();
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{mark} st.cells[{pos}][0] = c{d}; st.cells[{pos}][1] = st.cells[{pos}][1].wrapping_add(1);\n\
             if st.cells[{pos}][1] == 0 {{ st.first_visit({d}); }}",
            mark = self.mark(d, true),
            pos = dp.pos
        );
        if leaf {
            s.push_str("st.solution();\n");
        }
        let _ = writeln!(
            s,
            "st.left -= 1; if st.left == 0 && st.slow({d}) {{ return true; }}"
        );
        s
    }

    /// One loop level at depth `d` over the bucket at `OFFS` index `key`; `inner` runs
    /// after the commit (the deeper levels or the call onward).
    /// `next_y`: when depth `d + 1` is chained ([`Chain`]), its key's other colour.
    fn level(&self, d: usize, key: &str, inner: &str, next_y: Option<&str>) -> String {
        let leaf = d + 1 == self.plan.len();
        let onward = if leaf {
            String::new()
        } else {
            inner.to_string()
        };
        match self.walks[&self.plan.depths[d].table] {
            Walk::List => self.list_level(d, key, &onward),
            Walk::Mask { dups, window } => self.mask_level(d, key, &onward, dups, window, next_y),
        }
    }

    /// A level that walks the free pieces of its bucket as mask bits, lowest piece first
    /// (canonical order): `MASK & free mask` (the held complement of the used one), then
    /// each set bit's candidate from its slot in the bucket's block (`BYBIT`). No branch
    /// per used piece; the loop ends when the bits run out. With `dups`, a piece's second
    /// candidate in the bucket follows its first ([`DUP`]).
    fn mask_level(
        &self,
        d: usize,
        key: &str,
        onward: &str,
        dups: bool,
        window: Option<usize>,
        next_y: Option<&str>,
    ) -> String {
        let words = self.mask_words();
        // the slot of the candidate in hand, when the next depth looks its bucket up by it
        let next = self.chains.get(d + 1).copied().flatten();
        // the candidate's index in `BYBIT` ([`Gen::next_tables`])
        let at = format!("o{d} + p{d}");
        let (slot, second_slot) = match next {
            Some(ch) => (
                format!("let mut s{d}: usize = {at};\n"),
                format!(" s{d} = {at} + {};", self.next[ch.shape].span),
            ),
            None => (String::new(), String::new()),
        };
        let extra = self.extra_check(d, &format!("c{d}"));
        let commit = self.commit(d);
        let release = self.mark(d, false);
        // every read is a bucket's block plus a piece id of the block (less than
        // `64 * words`), or `B2` further for a second candidate: inside `BYBIT`
        let attempt = format!(
            "if true{extra} {{\n\
             {commit}\
             {onward}\n\
             {release}\n\
             }}\n"
        );
        let body = if dups {
            // the candidate tried is on the board after its subtree, its piece in it,
            // unless the extra check refused it: then the one in hand
            let tried = match extra.is_empty() {
                true => format!("st.cells[{}][0]", self.plan.depths[d].pos),
                false => format!("c{d}"),
            };
            format!(
                "{slot}let mut c{d}: u64 = unsafe {{ *r{d}.add(p{d}) }};\n\
                 loop {{\n\
                 {attempt}\
                 let h{d}: u64 = {tried};\n\
                 if h{d} & {DUP:#x} == 0 {{ break; }}\n\
                 c{d} = unsafe {{ *r{d}.add((h{d} >> 32) as u16 as usize + B2) }};{second_slot}\n\
                 }}\n"
            )
        } else {
            format!("{slot}let c{d}: u64 = unsafe {{ *r{d}.add(p{d}) }};\n{attempt}")
        };
        // the bucket: from the slot in hand ([`Chain`]) or from the key
        let entry = |table: &str, free: &str| -> String {
            let mut e = match self.chains.get(d).copied().flatten() {
                Some(ch) => {
                    let sh = &self.next[ch.shape];
                    let at = format!(
                        "NEXT{}.as_ptr().add(yo{u} + (s{u} - {lo}))",
                        ch.shape,
                        u = d - 1,
                        lo = sh.lo
                    );
                    let at_bit = sh.packed_at;
                    let offset = ((1u64 << sh.offset_bits) - 1) << at_bit;
                    format!(
                        "let e{d}: u64 = unsafe {{ *{at} }};\n\
                         let o{d}: usize = ((e{d} & {offset:#x}) >> {at_bit}) as usize;\n\
                         let r{d}: *const u64 = unsafe {{ BYBIT.as_ptr().add(o{d}) }};\n\
                         let mut f{d}: u64 = e{d} & ({free} & {:#x});\n",
                        !offset
                    )
                }
                None => {
                    let mut e = format!(
                        "let k{d}: usize = {key};\n\
                         let r{d}: *const u64 = BLOCK[k{d}].0;\n\
                         let mut f{d}: u64 = {table}[k{d}] & {free};\n"
                    );
                    if next.is_some() {
                        let _ = writeln!(
                            e,
                            "let o{d}: usize = unsafe {{ r{d}.offset_from(BYBIT.as_ptr()) }} as usize;"
                        );
                    }
                    e
                }
            };
            if let (Some(ch), Some(y)) = (next, next_y) {
                let sh = &self.next[ch.shape];
                let row = sh.span * (1 + usize::from(sh.seconds));
                let _ = writeln!(e, "let yo{d}: usize = (({y}) - {}) * {row};", sh.ys.start);
            }
            e
        };
        let held = self.held_before(d);
        if let Some(low) = window {
            // the held free mask seen from piece `low`: bit j is piece `low + j` (on a
            // split mask, one word of it)
            let seen = match (self.split < 64, low < self.split) {
                (true, true) => format!("(({held} as u64) >> {low})"),
                (true, false) => format!("(({held} >> 64) as u64)"),
                _ => format!("(({held} >> {low}) as u64)"),
            };
            return format!(
                "{}\
                 while f{d} != 0 {{\n\
                 let b{d} = f{d}.trailing_zeros() as usize;\n\
                 f{d} &= f{d} - 1;\n\
                 let p{d} = {low} + b{d};\n\
                 {body}\
                 }}\n",
                entry("MASKW", &seen)
            );
        }
        if words == 1 {
            return format!(
                "{}\
                 while f{d} != 0 {{\n\
                 let p{d} = f{d}.trailing_zeros() as usize;\n\
                 f{d} &= f{d} - 1;\n\
                 {body}\
                 }}\n",
                entry("MASK", &held)
            );
        }
        // several words: one u64 at a time (word `w{d}`), moving on when its bits run
        // out; `w{d}` stays below the word count, so the word indexes need no check;
        // `uw{d}` the used words
        format!(
            "let k{d}: usize = {key};\n\
             let r{d}: *const u64 = BLOCK[k{d}].0;\n\
             let uw{d}: [u64; 2] = [!({held} as u64), !(({held} >> 64) as u64)];\n\
             let mut w{d}: usize = 0;\n\
             let mut f{d}: u64 = MASK[k{d}][0] & !uw{d}[0];\n\
             loop {{\n\
             if f{d} == 0 {{\n\
             w{d} += 1;\n\
             if w{d} == {words} {{ break; }}\n\
             f{d} = unsafe {{ *MASK[k{d}].get_unchecked(w{d}) & !*uw{d}.get_unchecked(w{d}) }};\n\
             continue;\n\
             }}\n\
             let b{d} = f{d}.trailing_zeros() as usize;\n\
             f{d} &= f{d} - 1;\n\
             let p{d} = (w{d} << 6) | b{d};\n\
             {body}\
             }}\n"
        )
    }

    /// The pruned level depth `d` reads ([`Prune`]), if any.
    fn pruned_level(&self, d: usize) -> Option<usize> {
        if self.prune_every == 0 {
            return None;
        }
        let k = d / self.prune_every;
        (self.prune_cut(k) >= 1).then_some(k)
    }

    /// Level `k`'s cut: the pieces placed above this depth are pruned from its tables.
    fn prune_cut(&self, k: usize) -> usize {
        (k * self.prune_every).saturating_sub(self.prune_lag)
    }

    /// The pruned levels of the program.
    fn pruned_levels(&self) -> Vec<usize> {
        let mut v: Vec<usize> = (0..self.plan.len())
            .filter_map(|d| self.pruned_level(d))
            .collect();
        v.dedup();
        v
    }

    /// A level that walks its bucket's candidates in order, testing each piece's used byte.
    /// The first candidate comes from `FIRST` at the key, in parallel with the bucket's
    /// offset, so the walk into a cell waits for one load after the key, not two; the
    /// next one is read at the bottom of the loop (reading it ahead, before the used
    /// test, kept one more register live through the deeper levels: bench-hard +2%,
    /// bench-easy -12%). Whether the bucket goes on is the held candidate's [`LAST`] bit,
    /// not a test of the slot after it, so a mispredicted end resolves one load sooner;
    /// after a subtree the candidate (and its piece, to free) is read back from the board
    /// rather than kept live through the deeper levels (one spill per level fewer).
    fn list_level(&self, d: usize, key: &str, onward: &str) -> String {
        let extra = self.extra_check(d, &format!("c{d}"));
        let commit = self.commit(d);
        let release = self.mark(d, false);
        let used = self.is_used(d);
        let pos = self.plan.depths[d].pos;
        let piece = self.layout.piece_expr(&format!("c{d}"));
        // a pruned level reads its own copies (the same starts: a bucket's kept
        // candidates are moved to its front)
        let (first, cand) = match self.pruned_level(d) {
            Some(k) => (
                format!("unsafe {{ *(&raw const FIRST{k}).cast::<u64>().add(k{d}) }}"),
                format!("unsafe {{ *(&raw const CANDS{k}).cast::<u64>().add(i{d}) }}"),
            ),
            None => (format!("FIRST[k{d}]"), format!("cand(i{d})")),
        };
        // `i{d}` never passes the bucket's last candidate
        format!(
            "let k{d}: usize = {key};\n\
             let mut c{d}: u64 = {first};\n\
             if c{d} != SENTINEL {{\n\
             let mut i{d}: usize = OFFS[k{d}] as usize;\n\
             loop {{\n\
             let p{d} = {piece};\n\
             if !({used}){extra} {{\n\
             {commit}\
             {onward}\n\
             c{d} = st.cells[{pos}][0];\n\
             let p{d} = {piece};\n\
             {release}\n\
             }}\n\
             if c{d} & LAST != 0 {{ break; }}\n\
             i{d} += 1; c{d} = {cand};\n\
             }}\n\
             }}\n"
        )
    }

    fn is_head(&self, d: usize) -> bool {
        d.is_multiple_of(self.group)
    }

    /// The call that walks depth `d` onward from a function whose locals are `locals`.
    fn call_next(&self, d: usize, locals: &[usize]) -> String {
        if d >= self.plan.len() {
            return String::new();
        }
        // a held free mask goes to `st.umask`, as the used one, before the call: the
        // callee reads it there
        let store = if self.held() {
            let u = d - 1;
            if self.mask_words() == 1 {
                format!("st.umask[0] = !u{u}; ")
            } else {
                format!("st.umask[0] = !(u{u} as u64); st.umask[1] = !((u{u} >> 64) as u64); ")
            }
        } else {
            String::new()
        };
        if self.is_head(d) {
            format!("{store}if g{d}(st) {{ return true; }}")
        } else {
            format!(
                "{{ {store}let start = {}; if scan(st, {d}, start) {{ return true; }} }}",
                self.bucket_expr(d, locals)
            )
        }
    }

    fn groups(&mut self) {
        let depths = self.plan.len();
        // the group functions in MODULES modules (see there); they call each other by
        // name, through the crate root's imports
        let count = depths.div_ceil(self.group);
        let mut module = 0;
        w!(self, "mod p0 {{\nuse super::*;");
        let mut head = 0;
        while head < depths {
            if (head / self.group) * MODULES >= count * (module + 1) && module + 1 < MODULES {
                module += 1;
                w!(self, "}}\nmod p{module} {{\nuse super::*;");
            }
            let end = (head + self.group).min(depths);
            let levels: Vec<usize> = (head..end).collect();
            // build from the innermost level out
            let mut body = self.call_next(end, &levels);
            for &d in levels.iter().rev() {
                let locals: Vec<usize> = (head..d).collect();
                let key = self.key_index_expr(d, &locals);
                let next_y = self.chains.get(d + 1).copied().flatten();
                let next_y = next_y.map(|ch| {
                    let other = 1 - self.shapes[ch.shape].read;
                    self.key_expr(d + 1, other, &locals)
                });
                body = self.level(d, &key, &body, next_y.as_deref());
            }
            // a held free mask is read at entry and put back before a normal return (the
            // callees changed `st.umask` as they called on; a stop leaves it, the next
            // unit starts afresh)
            let (entry, exit) = if self.held() && self.mask_words() == 1 {
                ("let u_in: u64 = !st.umask[0];\n", "st.umask[0] = !u_in;\n")
            } else if self.held() {
                (
                    "let u_in: u128 = !((st.umask[0] as u128) | ((st.umask[1] as u128) << 64));\n",
                    "st.umask[0] = !(u_in as u64); st.umask[1] = !((u_in >> 64) as u64);\n",
                )
            } else {
                ("", "")
            };
            // a pruned level's copies are brought up to date before its loops run, at
            // its first head (the runtime's `scan` checks any head it enters): a node
            // placed at the depth above its cut since the last time, or a new unit
            let refresh = match self.pruned_level(head) {
                Some(k) if head % self.prune_every == 0 => format!(
                    "if unsafe {{ st.cells.get_unchecked(st.prune_at[{k}] as usize)[1] }} != st.seen[{k}] {{ e2fleet_rt::refilter(st, {k}); }}\n"
                ),
                _ => String::new(),
            };
            w!(
                self,
                "#[inline(never)]\npub fn g{head}(st: &mut St) -> bool {{\n{refresh}{entry}{body}{exit}false\n}}"
            );
            head = end;
        }
        w!(self, "}}");
        for m in 0..=module {
            w!(self, "use p{m}::*;");
        }
    }

    /// The slot walk: every bucket a function `b{start}(d, slot)` that first counts
    /// the caller's placement (candidate `slot` at depth `d - 1`: board, node count, first
    /// visit, solution, budget) and then tries each of its candidates in canonical order
    /// with its own used-test branch (the piece id a constant) and its own call site into
    /// the next depth's bucket, found by key in `BF`. A piece's free/used state lasts, so
    /// a branch per slot is far more predictable than one per depth (session 11: 42% ->
    /// 7% mispredicted in a 2-bit model). An empty bucket is `bempty` (count only), the
    /// depth after the last `bsol` (count and record the solution). A bucket reached from
    /// one depth only gets its cells as constants; the next key's colour from the placed
    /// cell is a constant per slot added to a base the bucket computes once, and a key
    /// whose high colour is the placed cell's (a cell keyed by one side) is read through a
    /// transposed copy of its table so that colour is always the low one. The functions
    /// return nothing: a unit that stops points every key at a no-op (`halt`), and the
    /// walk returns to the runtime trying its remaining candidates without counting (no
    /// call site tests a result: 38.6 -> 33.5 instructions per node on the real E2's
    /// pieces without a clue).
    fn slot_walk(&mut self) {
        use std::collections::{BTreeMap, BTreeSet, HashMap};
        let p = self.plan;
        let offs = self.offsets();
        let depths = p.len();
        let log = self.stride_log2() as usize;
        let side = 1usize << log;
        let layout = self.layout;
        let byte = |cell: usize, shift: u32| cell * 16 + layout.at(shift) as usize / 8;
        // which depths each bucket (by its first slot) is walked at
        let mut reach: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
        for (d, dp) in p.depths.iter().enumerate() {
            let base = self.table_offset(dp.table);
            for &o in &offs[base..base + side * side] {
                if p.candidates[o as usize] != SENTINEL {
                    reach.entry(o as usize).or_default().insert(d);
                }
            }
        }
        // key -> function; then the solution keys; then transposed tables
        let mut targets: Vec<String> = offs
            .iter()
            .map(|&o| match reach.contains_key(&(o as usize)) {
                true => format!("b{o}"),
                false => "bempty".into(),
            })
            .collect();
        let sol = targets.len();
        targets.extend(std::iter::repeat_n("bsol".to_string(), 256));
        // per depth: (key base, byte of the high colour, byte of the low colour, which of
        // them is the previous depth's cell: 1 high, 2 low)
        let mut keys: Vec<(usize, usize, usize, u8)> = Vec::with_capacity(depths + 1);
        let mut transposed: HashMap<usize, usize> = HashMap::new();
        for (d, dp) in p.depths.iter().enumerate() {
            let (base, [hi, lo]) = (self.table_offset(dp.table), dp.key);
            let prev = d.checked_sub(1).map(|e| p.depths[e].pos);
            let me = |cell: usize| Some(cell) == prev;
            if me(hi.cell) && !me(lo.cell) {
                let t = *transposed.entry(base).or_insert_with(|| {
                    let t = targets.len();
                    for b in 0..side {
                        for a in 0..side {
                            let f = targets[base + (a << log) + b].clone();
                            targets.push(f);
                        }
                    }
                    t
                });
                keys.push((t, byte(lo.cell, lo.shift), byte(hi.cell, hi.shift), 2));
            } else {
                let m = me(hi.cell) as u8 | (me(lo.cell) as u8) << 1;
                keys.push((base, byte(hi.cell, hi.shift), byte(lo.cell, lo.shift), m));
            }
        }
        keys.push((sol, byte(p.cells, 0), byte(p.cells, 0), 0));
        // the shift of the placed candidate's colour a next key reads: one for the whole
        // order (`slot_walk_applies`)
        let shift = p
            .depths
            .windows(2)
            .find_map(|w| w[1].key.iter().find(|k| k.cell == w[0].pos))
            .map_or(0, |k| k.shift);
        w!(self, "type Bf = fn(usize, usize);");
        w!(self, "const DEPTHS: usize = {depths};");
        let nx: Vec<String> = keys
            .iter()
            .map(|k| format!("({}, {}, {})", k.0, k.1, k.2))
            .collect();
        self.array("NX", "(u32, u16, u16)", nx.into_iter());
        let me: Vec<String> = keys.iter().map(|k| k.3.to_string()).collect();
        self.array("ME", "u8", me.into_iter());
        self.words("POS", "u16", p.depths.iter().map(|d| d.pos as u64));
        w!(
            self,
            r#"#[inline(always)]
fn colour(st: &St, off: usize) -> usize {{ unsafe {{ *(st.cells.as_ptr() as *const u8).add(off) as usize }} }}
#[inline(always)]
fn bf(k: usize) -> Bf {{ unsafe {{ core::mem::transmute::<usize, Bf>(*(&raw const BFT).cast::<usize>().add(k)) }} }}
/// Counts candidate `slot` placed at depth `d - 1`; true if the unit stops there.
#[inline(always)]
fn enter(st: &mut St, d: usize, slot: usize, last: bool) -> bool {{
    let c = cand(slot);
    // `POS` holds cells of the board (its values are not visible from the modules)
    let pos = unsafe {{ *POS.get_unchecked(d - 1) }} as usize;
    let wrapped = {{
        let cell = unsafe {{ st.cells.get_unchecked_mut(pos) }};
        cell[0] = c;
        cell[1] = cell[1].wrapping_add(1);
        cell[1] == 0
    }};
    if wrapped {{ st.first_visit(d - 1); }}
    if last {{ st.solution(); }}
    st.left -= 1;
    st.left == 0 && st.slow(d - 1)
}}
#[inline(never)]
fn bempty(d: usize, slot: usize) {{ if enter(state(), d, slot, false) {{ halt(); }} }}
#[inline(never)]
fn bsol(d: usize, slot: usize) {{ if enter(state(), d, slot, true) {{ halt(); }} }}
/// What every key leads to while a stopped unit returns: nothing is counted.
fn bnone(_: usize, _: usize) {{}}
static mut HALTED: bool = false;
/// The unit stops: every key leads to `bnone`, so the functions on the way back up try
/// their remaining candidates without counting or going deeper. No call site tests a
/// return value.
#[cold]
#[inline(never)]
fn halt() {{ unsafe {{ HALTED = true; let t = &raw mut BFT; for e in (*t).iter_mut() {{ *e = bnone as usize; }} }} }}
/// Points every key at its bucket function (at start, and after a stop).
#[inline(never)]
fn fill() {{ unsafe {{ let t = &raw mut BFT; for (i, &f) in BFI.iter().enumerate() {{ (*t)[i] = FNS[f as usize] as usize; }} }} }}"#
        );
        // the bucket functions in MODULES modules of about equal size (they call each
        // other only through `BFT`)
        let sizes: Vec<usize> = reach
            .keys()
            .map(|&start| {
                p.candidates[start..]
                    .iter()
                    .take_while(|&&c| c != SENTINEL)
                    .count()
                    + 2
            })
            .collect();
        let total: usize = sizes.iter().sum();
        let mut module_of: HashMap<String, usize> = HashMap::new();
        let (mut module, mut done) = (0, 0);
        w!(self, "mod p0 {{\nuse super::*;");
        for ((&start, ds), size) in reach.iter().zip(&sizes) {
            if done * MODULES >= total * (module + 1) && module + 1 < MODULES {
                module += 1;
                w!(self, "}}\nmod p{module} {{\nuse super::*;");
            }
            done += size;
            module_of.insert(format!("b{start}"), module);
            w!(
                self,
                "#[inline(never)]\npub fn b{start}(d: usize, slot: usize) {{\nlet st = state();\nif enter(st, d, slot, false) {{ halt(); return; }}"
            );
            if ds.len() == 1 {
                let d = *ds.iter().next().unwrap();
                w!(self, "let d: usize = {d};");
            }
            let pats: BTreeSet<u8> = ds.iter().map(|&d| keys[d + 1].3).collect();
            let uniform = pats.len() == 1;
            let pat = *pats.iter().next().unwrap();
            if uniform {
                let hi = if pat & 1 != 0 {
                    String::new()
                } else {
                    format!(" + (colour(st, nx.1 as usize) << {log})")
                };
                let lo = if pat & 2 != 0 {
                    ""
                } else {
                    " + colour(st, nx.2 as usize)"
                };
                w!(
                    self,
                    "let nx = unsafe {{ *NX.get_unchecked(d + 1) }}; let kb = nx.0 as usize{hi}{lo};"
                );
            } else {
                // depths that disagree on which key part is the placed colour: it is scaled per
                // depth (a rare shape)
                w!(
                    self,
                    "let nx = unsafe {{ *NX.get_unchecked(d + 1) }}; let me = unsafe {{ *ME.get_unchecked(d + 1) }}; let mul = [0usize, {}, 1, {}][me as usize & 3]; let kb = nx.0 as usize + (if me & 1 != 0 {{ 0 }} else {{ colour(st, nx.1 as usize) << {log} }}) + (if me & 2 != 0 {{ 0 }} else {{ colour(st, nx.2 as usize) }});",
                    side,
                    side + 1
                );
            }
            let mut i = start;
            while p.candidates[i] != SENTINEL {
                let c = p.candidates[i];
                let piece = crate::plan::candidate_piece(c);
                let r = ((c >> shift) & 0xFF) as usize;
                let key = match (uniform, pat) {
                    (false, _) => format!("kb + {r} * mul"),
                    (true, 1) => format!("kb + {}", r << log),
                    (true, 2) => format!("kb + {r}"),
                    (true, 3) => format!("kb + {}", (r << log) + r),
                    (true, _) => "kb".to_string(),
                };
                w!(
                    self,
                    "if st.used[{piece}] == 0 {{\nst.used[{piece}] = 1;\nbf({key})(d + 1, {i});\nst.used[{piece}] = 0;\n}}"
                );
                i += 1;
            }
            w!(self, "}}");
        }
        w!(self, "}}");
        // key -> function, as an index into the distinct functions: rustc type-checks an
        // array of ~10^5 function items for seconds, an array of integers in no time.
        // `main` fills `BFT` (the addresses, read by `bf`) before serving.
        let mut names: Vec<String> = targets.clone();
        names.sort();
        names.dedup();
        let index: HashMap<&str, usize> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), i))
            .collect();
        let idx: Vec<u64> = targets.iter().map(|t| index[t.as_str()] as u64).collect();
        self.array(
            "FNS",
            "Bf",
            names.iter().map(|n| match module_of.get(n) {
                Some(m) => format!("p{m}::{n}"),
                None => n.clone(),
            }),
        );
        self.words("BFI", "u16", idx.into_iter());
        w!(
            self,
            "static mut BFT: [usize; {n}] = [0; {n}];",
            n = targets.len()
        );
        self.main_init = "fill();".into();
        // Entries from the runtime's cold scan, which has counted the placement at d - 1
        // already: that count is taken back and the bucket function counts it again. One
        // function for every depth, behind a thunk per depth (the runtime's table takes no
        // depth); it tells the runtime whether the unit stopped below it, and if so points
        // the table back at the bucket functions.
        w!(
            self,
            "#[inline(never)]\nfn head(d: usize) -> bool {{ let st = state(); let pos = POS[d - 1] as usize; st.cells[pos][1] = st.cells[pos][1].wrapping_sub(1); st.left += 1; let c = st.cells[pos][0]; let slot = CANDS.iter().position(|&x| x == c).unwrap(); let nx = NX[d]; let k = nx.0 as usize + (colour(st, nx.1 as usize) << {log}) + colour(st, nx.2 as usize); bf(k)(d, slot); if unsafe {{ HALTED }} {{ unsafe {{ HALTED = false; }} fill(); true }} else {{ false }} }}"
        );
        for d in 1..depths {
            w!(self, "fn h{d}(_: &mut St) -> bool {{ head({d}) }}");
        }
        let heads: Vec<String> = (0..depths)
            .map(|d| match d {
                0 => "None".to_string(),
                _ => format!("Some(h{d})"),
            })
            .collect();
        w!(
            self,
            "static HEADS: [Option<fn(&mut St) -> bool>; {depths}] = [{}];",
            heads.join(", ")
        );
    }

    fn scans(&mut self) {
        let depths = self.plan.len();
        let list: Vec<String> = (0..depths)
            .map(|d| {
                if self.is_head(d) {
                    format!("Some(g{d})")
                } else {
                    "None".into()
                }
            })
            .collect();
        w!(
            self,
            "static HEADS: [Option<fn(&mut St) -> bool>; {depths}] = [{}];",
            list.join(", ")
        );
    }
}

#[cfg(test)]
mod tests {
    /// Every byte value survives the byte-string literal the tables are written as (read
    /// back the way rustc reads the escapes used).
    #[test]
    fn tables_round_trip_through_byte_strings() {
        let bytes: Vec<u8> = (0..=255u8).chain([0, b'0', b'\\', b'"', 0, b'1']).collect();
        let mut text = String::new();
        super::push_byte_string(&mut text, &bytes);
        let (mut back, mut chars) = (Vec::new(), text.chars());
        while let Some(c) = chars.next() {
            assert!(c.is_ascii_graphic() || c == ' ', "{c:?} written raw");
            if c != '\\' {
                back.push(c as u8);
                continue;
            }
            match chars.next().unwrap() {
                '0' => back.push(0),
                'x' => {
                    let hex: String = chars.by_ref().take(2).collect();
                    back.push(u8::from_str_radix(&hex, 16).unwrap());
                }
                e @ ('\\' | '"') => back.push(e as u8),
                e => panic!("unexpected escape \\{e}"),
            }
        }
        assert_eq!(back, bytes);
    }

    /// Both layouts keep every field of a plan candidate where the program and the
    /// runtime look for it: the piece in the top ten bits (the runtime's `piece_of`) and,
    /// for the byte layout, the low byte; the rotation; each colour at `Layout::at` of its
    /// plan shift; and no stored candidate is the sentinel.
    #[test]
    fn layouts_keep_every_field_where_it_is_read() {
        use super::Layout;
        use crate::plan::{SENTINEL, candidate};
        assert!(super::RUNTIME_SOURCE.contains("(c >> 54) as usize"));
        for layout in [Layout::Plan, Layout::BytePiece] {
            for (colours, piece, rot) in [
                ([0, 0, 0, 0], 0, 0),
                ([31, 7, 0, 22], 255, 3),
                ([255; 4], 199, 2),
            ] {
                let c = layout.encode(candidate(colours, piece, rot));
                assert_ne!(c, SENTINEL);
                assert_eq!(((c >> 54) as usize, (c >> 48) & 3), (piece, rot as u64));
                assert_eq!(c & super::LAST, 0);
                // a hint's cell on the initial board keeps its colours where a candidate does
                let board = layout.board(crate::model::pack(colours));
                for (side, &colour) in colours.iter().enumerate() {
                    let at = layout.at(8 * side as u32);
                    assert_eq!((c >> at) & 0xFF, colour as u64, "{layout:?}");
                    assert_eq!((board >> at) & 0xFF, colour as u64, "{layout:?}");
                }
                if layout == Layout::BytePiece {
                    assert_eq!(c & 0xFF, piece as u64);
                }
            }
        }
        assert_eq!(Layout::BytePiece.encode(SENTINEL), SENTINEL);
    }

    /// The generated code and the runtime must agree on which boards keep a used mask.
    #[test]
    fn the_mask_walk_threshold_is_the_runtimes() {
        let line = format!("pub const MASK_PIECES: usize = {};", super::MASK_PIECES);
        assert!(super::RUNTIME_SOURCE.contains(&line));
    }
}
