//! The code generator: one self-contained Rust program (std only) per (puzzle, fill order).
//!
//! The emitted program bakes in as constants every depth's cell, its key reads (neighbour
//! cell and colour shift), its table offset and its extra-side mask; the candidate buckets
//! of the [`SearchPlan`] (already filtered by rim, hint and later-cell sides, so the hot
//! loop never checks them); the hint board. The puzzle-independent part (state, slow path,
//! cold scan, unit set-up, the protocol) is the runtime library `runtime/e2fleet_rt.rs`
//! ([`RUNTIME_SOURCE`]), built once per compiler and flags and linked into every program.
//!
//! Where each part of a program comes from:
//!
//! | file | emits |
//! |---|---|
//! | `mod.rs` | options, [`emit`], the header and `PROGRAM` (what the runtime reads) |
//! | `layout.rs` | how a candidate and a board cell sit in a `u64` |
//! | `tables.rs` | the bucket tables (`CANDS`, `OFFS`, `FIRST`, the plan's per-depth arrays) and which walk each table takes |
//! | `groups.rs` | the fused group functions `g{d}` that nest one loop per depth, shared by the list and mask walks |
//! | `list.rs` | a list level (every candidate, a used test each) and the pruned levels' tables |
//! | `mask.rs` | a mask level (only the free pieces, as bits) and its tables |
//! | `chain.rs` | the mask walk's slot lookup (`NEXT` tables) |
//! | `slots.rs` | the slot walk (a function per bucket, a branch and a call site per candidate) |
//!
//! Every walk visits the same nodes in the same canonical order; which walk a build runs
//! is decided per puzzle and machine by a race ([`super::walk`]). Why each walk is shaped
//! as it is, with the measurements, is in `docs/engine-design.md`; each walk's file opens
//! with a legend of the names its generated code uses.
use std::fmt::Write;

use crate::plan::SearchPlan;

macro_rules! w {
    ($g:expr, $($arg:tt)*) => { let _ = writeln!($g.out, $($arg)*); };
}

mod chain;
mod groups;
mod layout;
mod list;
mod mask;
mod slots;
mod tables;

use chain::{Chain, NextTable, Shape};
use layout::Layout;
use tables::BucketWalk;

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
    /// on hard 16x16 boards, slower on easy ones, a 2-3.5x longer compile); on boards of
    /// at most 128 pieces the mask walk with each level's bucket looked up from the slot
    /// of the candidate in hand ([`slot_lookup_applies`]: Brendan 6x6 to 9x9
    /// 1.05-1.09x, an E2 clue puzzle 0.92x). [`super::walk`] races the two walks
    /// (`docs/engine-design.md`).
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
/// placed long before, most of them on hard boards: bench-hard 1.10x, the real E2
/// 1.14x, bench-easy unchanged (`docs/engine-design.md`).
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
pub const RUNTIME_SOURCE: &str = include_str!("../../../runtime/e2fleet_rt.rs");

/// What generates compiled engines, as one short id: a hash of the runtime, this code
/// generator and the search plan tables it reads. Any change to them is a new id, so a
/// new engine release is a new hardware class for verification, whatever the puzzle.
pub fn generator_id() -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(RUNTIME_SOURCE);
    for part in [
        include_str!("mod.rs"),
        include_str!("layout.rs"),
        include_str!("tables.rs"),
        include_str!("groups.rs"),
        include_str!("list.rs"),
        include_str!("mask.rs"),
        include_str!("chain.rs"),
        include_str!("slots.rs"),
    ] {
        h.update(part);
    }
    h.update(include_str!("../../plan.rs"));
    hex::encode(&h.finalize()[..6])
}

/// Boards of at most this many pieces keep a used mask and walk a bucket's free pieces as
/// its bits (one `u64` word up to 64 pieces, two above); larger boards walk lists. The
/// runtime's `MASK_PIECES`, which must agree.
const MASK_PIECES: usize = 128;

/// Most pruned levels a program may have: the runtime's `MAX_LEVELS`, which must agree.
const MAX_LEVELS: usize = 64;

/// The protocol version spoken by generated programs.
pub const PROTOCOL_VERSION: u32 = 3;

/// How many modules a program's search functions (the list walk's group functions, the
/// slot walk's bucket functions) are split into, and the codegen units its build asks for
/// (`-Ccodegen-units`): rustc hands LLVM one unit per module, compiled in parallel. The
/// functions never inline into each other (`#[inline(never)]`), so the split costs no
/// code. bench-hard on two cores, rustc 1.95, cached runtime: the slot walk 2.3 s as one
/// unit, 1.7 s as four, 1.8 s as eight; the list walk 0.8 s -> 0.65 s as four.
pub const MODULES: usize = 4;

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

/// Depths fused into one group function unless the options say: 6, the best on 16x16
/// boards (the group-size sweep in `docs/engine-design.md`), except on boards with a used
/// mask filled line by line in lines of 7 to 10 cells, where a group is one line, so that
/// every group starts a line and each depth but the first keys on the candidate of the
/// loop enclosing it. Brendan boards, M nodes/s per core, medians of 3 alternated runs of 3
/// s: set 1 7x7 142 -> 151 at 7, set 2 7x7 137 -> 142; set 1 9x9 134 -> 141 and 140 -> 143
/// at 9, set 2 9x9 134 -> 139 and 137 -> 147; set 1 and 2 8x8 +1-6% at 8; 10x10 at 10, 5
/// runs: set 1 148.3 -> 153.0, set 2 153.1 -> 157.5 (37.2 -> 33.7 instructions per node);
/// none on 10x10 at 5, nor on 8x8 at 4.
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
    /// bucket (see [`BucketWalk`]).
    walks: std::collections::HashMap<usize, BucketWalk>,
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
}

#[cfg(test)]
mod tests {
    /// The generated code and the runtime must agree on which boards keep a used mask.
    #[test]
    fn the_mask_walk_threshold_is_the_runtimes() {
        let line = format!("pub const MASK_PIECES: usize = {};", super::MASK_PIECES);
        assert!(super::RUNTIME_SOURCE.contains(&line));
    }
}
