//! The lane engine: a branch-free walk that takes exactly one node per step, and walks
//! several units at once in one thread, their steps interleaved.
//!
//! # Why
//! A branchy depth-first walk spends most of a node waiting on the tree's own branches
//! (does this placement have a child? another sibling?): on the low-colour boards these
//! mispredict ~0.6 times a node and bound the compiled mask walk at ~21 cycles a node,
//! and on the hard 16x16 boards ~0.9 times (`docs/engine-design.md`). Here
//! no step branches on the tree: each step takes the lowest bit of the current frame's
//! candidate mask, commits that node, builds the child's frame unconditionally, and
//! chooses where to go next (the child, the next sibling, or the nearest shallower frame
//! with candidates left) with conditional moves. One walk is then a chain of dependent
//! loads; lanes interleaved in one thread overlap their chains.
//!
//! # Two forms of tables
//! - `narrow`: boards of at most 128 pieces and 16 colours (Brendan's sets, the small
//!   research puzzles). Free pieces are two 64-bit words and a bucket is a mask over one
//!   of them; two lanes a thread.
//! - `wide` (x86-64 with SSSE3 and BMI1): boards of up to 256 pieces and 32 colours, with
//!   at most 16 candidates a bucket (every Eternity II-style 16x16 board). Free pieces are
//!   a 256-bit set in each frame, and a frame's candidates are a *bucket-local* mask (bit
//!   i: the bucket's candidate i), worked out per step with two byte shuffles, or with one
//!   permute across the set where the processor has AVX-512 ([`WideKernel`]); six lanes
//!   a thread.
//!
//! [`LaneTables::new`] takes the narrow form where it fits, else the wide one. Both walk
//! candidates in canonical order (ascending piece id, then rotation) and count one node a
//! step, so budgets, cursors and stops are exactly the reference walker's.
//!
//! # A lone unit
//! [`Engine::run`] walks one unit in every lane all the same: the unit cuts itself into
//! pieces in depth-first order as the lanes walk it, and the pieces' results are added up
//! in order, to exactly the result of one walk (counts, cursor, budget and stop; the
//! `lone` module). `solve` from the root and `bench` without a split walk so, at ~0.9x
//! the speed of a split's units.
//!
//! # The driver
//! What is common to both forms is here: a lane's [`Head`] (its depth, countdown, last
//! depth and watch), the cold path (polls, budgets, new deepest boards, solutions), and the
//! loop that hands units to free lanes and shares the thread's time between them by the
//! nodes each walked. A form (the `Form` trait) supplies the tables, a lane's start on a unit's
//! path, one step, and the hot loop (`Form::drive`) that steps its live lanes in turn
//! until one of them needs its cold path.

use std::sync::Arc;
use std::time::Instant;

use crate::engine::{Engine, EngineError, EngineKind, Feed, Work};
use crate::model::Placement;
use crate::plan::SearchPlan;
use crate::search::{Control, POLL_INTERVAL, RunOptions, UnitError, Walker};
use crate::unit::{StopReason, Unit, UnitResult};

mod lone;
mod narrow;
#[cfg(target_arch = "x86_64")]
mod wide;

/// Why a plan has no lane tables.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotEligible {
    /// More pieces than the tables hold.
    #[error("the lane engine walks boards of at most {most} pieces (this one has {pieces})")]
    TooManyPieces {
        /// Pieces on the board.
        pieces: usize,
        /// The most the lane engine takes here.
        most: usize,
    },
    /// A cell with more than two sides read from the board.
    #[error("the fill order gives a cell more than two placed neighbours")]
    ExtraSides,
    /// A candidate list with both rim and inner pieces (a cell on the rim that takes
    /// inner pieces: not a puzzle of this project's kind).
    #[error("a candidate list mixes rim and inner pieces")]
    MixedBucket,
    /// A candidate list longer than a frame's mask.
    #[error("a candidate list of {0} (the lane engine takes at most 16 for boards this large)")]
    LongBucket(usize),
    /// Nothing to walk.
    #[error("every cell is a hint")]
    Empty,
    /// Tables past the room the walk has.
    #[error("the board's tables are too large for the lane engine")]
    TooLarge,
    /// The machine lacks an instruction the walk needs.
    #[error("this processor lacks {0}, which the lane engine needs for boards this large")]
    Processor(&'static str),
}

/// The lane engine's two forms of tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaneForm {
    /// Boards of at most 128 pieces and 16 colours (Brendan's sets): two lanes.
    Narrow,
    /// Boards of up to 256 pieces and 32 colours, buckets of at most 16 (every 16x16
    /// board), on x86-64 with SSSE3 and BMI1: six lanes.
    Wide,
}

impl std::fmt::Display for LaneForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LaneForm::Narrow => "narrow",
            LaneForm::Wide => "wide",
        })
    }
}

/// The instructions the wide form's kernel works a child's candidate mask out with,
/// chosen at run time by what the processor has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WideKernel {
    /// SSSE3 and BMI1 (every x86-64 processor since ~2008): the free set as two 128-bit
    /// halves, a `pshufb` of each, a compare and `pmovmskb`.
    Ssse3,
    /// AVX-512 VBMI, BW and VL with BMI1 and BMI2 (Intel Ice Lake and later, AMD Zen 4 and later):
    /// the free set as one 256-bit register, one `vpermb` across it and one `vptestmb`
    /// into a mask register (~10 instructions a node fewer).
    Avx512,
}

impl WideKernel {
    /// Every kernel, the fastest first.
    pub const ALL: [WideKernel; 2] = [WideKernel::Avx512, WideKernel::Ssse3];

    /// Whether this processor runs the kernel.
    pub fn here(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            match self {
                WideKernel::Ssse3 => has!("ssse3") && has!("bmi1"),
                WideKernel::Avx512 => {
                    has!("avx512f")
                        && has!("avx512bw")
                        && has!("avx512vl")
                        && has!("avx512vbmi")
                        && has!("bmi1")
                        && has!("bmi2")
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// What the kernel needs of the processor, in words.
    pub fn needs(self) -> &'static str {
        match self {
            WideKernel::Ssse3 => "x86-64's SSSE3 and BMI1",
            WideKernel::Avx512 => "x86-64's AVX-512 VBMI, BW and VL",
        }
    }

    /// The fastest kernel this processor runs, or the one `E2FLEET_WIDE_KERNEL` names
    /// (`ssse3` or `avx512`, to measure one against the other) where it runs here; any
    /// other value, or a kernel this processor lacks, changes nothing.
    pub fn best() -> Option<WideKernel> {
        let asked = std::env::var("E2FLEET_WIDE_KERNEL").ok();
        let runs = |k: &WideKernel| k.here();
        WideKernel::ALL
            .into_iter()
            .filter(runs)
            .find(|k| asked.as_deref() == Some(&*k.to_string()))
            .or_else(|| WideKernel::ALL.into_iter().find(runs))
    }
}

impl std::fmt::Display for WideKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WideKernel::Ssse3 => "ssse3",
            WideKernel::Avx512 => "avx512",
        })
    }
}

/// The most lanes a form walks at once.
const MAX_LANES: usize = 8;

/// What the driver keeps of a lane in its form's memory: where the walk is and when to
/// look at it.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct Head {
    /// The depth of the next step, or the form's `STOP` when the unit is walked.
    d: usize,
    /// Nodes left before the next poll or the budget.
    left: u64,
    /// The depth of the last node committed, wherever the cold path reads it: after a
    /// form's lone step, and after a drive that ran the lane's countdown out (a form may
    /// leave it stale after a drive that stopped at a watch, where the cold path steps
    /// alone before it reads it; the wide form does).
    last: usize,
    /// Watch: the next step at or past this depth goes to the cold path (a new deepest
    /// board or a solution). Never past the form's `STOP`, so one compare asks for both.
    watch: usize,
}

/// Whether a lane that took its steps needs its cold path.
#[inline(always)]
fn needs_cold(h: &Head) -> bool {
    h.left == 0 || h.d >= h.watch
}

/// One form of lane tables: what the driver needs of it.
trait Form {
    /// Every lane's memory, in one allocation.
    type Lanes;
    /// Lanes walked at once.
    const LANES: usize;
    /// The depth a lane goes to when its unit is walked.
    const STOP: usize;

    /// Memory for [`Form::LANES`] lanes.
    fn lanes(&self) -> Box<Self::Lanes>;
    /// Lane `slot`'s head.
    fn head(lanes: &Self::Lanes, slot: usize) -> &Head;
    /// Lane `slot`'s head, to change.
    fn head_mut(lanes: &mut Self::Lanes, slot: usize) -> &mut Head;
    /// Sets lane `slot` on `path` (a checked path: the unit's prefix, `floor` long, then
    /// its cursor): its frames, board and per-depth counts, and its depth (`STOP` when
    /// nothing is left to walk). Frames above `floor` are never walked.
    fn start(&self, lanes: &mut Self::Lanes, slot: usize, path: &[Placement], floor: usize);
    /// One step of lane `slot`: commits the node at its depth and moves on.
    fn step(&self, lanes: &mut Self::Lanes, slot: usize);
    /// The placement lane `slot` holds at `depth`.
    fn placement(&self, lanes: &Self::Lanes, slot: usize, depth: usize) -> Placement;
    /// Lane `slot`'s nodes per depth.
    fn nodes(&self, lanes: &Self::Lanes, slot: usize) -> Vec<u64>;
    /// Steps the lanes in `live` (each with steps left on its countdown and its next node
    /// above its watch) until one of them needs its cold path.
    fn drive(&self, lanes: &mut Self::Lanes, live: &[usize]);
}

/// What the cold path of a lane keeps.
struct LaneState {
    floor: usize,
    budget: u64,
    committed: u64,
    window: u64,
    deepest: usize,
    deepest_board: Vec<Placement>,
    solutions: u64,
    boards: Vec<Vec<Placement>>,
    cap: usize,
    stop: Option<StopReason>,
}

enum Begin<'a> {
    Walk(Work<'a>, LaneState),
    Done(Work<'a>, Result<UnitResult, UnitError>),
}

/// Walks units [`Form::LANES`] at a time over one plan with one form's tables.
struct Driver<'p, F: Form> {
    plan: &'p SearchPlan,
    form: &'p F,
}

impl<F: Form> Driver<'_, F> {
    fn placements(&self, lanes: &F::Lanes, slot: usize, to: usize) -> Vec<Placement> {
        (0..to)
            .map(|d| self.form.placement(lanes, slot, d))
            .collect()
    }

    /// The cold path after a step that asked for it. Returns `true` when the lane's unit
    /// has ended (its result is then ready).
    fn cold(
        &self,
        lanes: &mut F::Lanes,
        slot: usize,
        st: &mut LaneState,
        control: &mut dyn Control,
    ) -> bool {
        let depths = self.plan.len();
        loop {
            let h = F::head_mut(lanes, slot);
            if h.left == 0 {
                st.committed += st.window;
                if st.committed == st.budget {
                    st.stop = Some(StopReason::Budget);
                    return true;
                }
                if control.poll(st.committed) {
                    st.stop = Some(StopReason::Requested);
                    return true;
                }
                st.window = (st.budget - st.committed).min(POLL_INTERVAL);
                h.left = st.window;
            }
            if h.d == F::STOP {
                st.committed += st.window - h.left;
                st.stop = Some(StopReason::Finished);
                return true;
            }
            if h.d < h.watch {
                return false;
            }
            // the next node is at or past the watch depth: take it alone, then see
            // whether it is a new deepest board or a solution
            self.form.step(lanes, slot);
            let h = F::head_mut(lanes, slot);
            h.left -= 1;
            let d = h.last;
            if d >= st.deepest {
                st.deepest = d + 1;
                st.deepest_board = self.placements(lanes, slot, d + 1);
            }
            if d + 1 == depths {
                st.solutions += 1;
                if st.boards.len() < st.cap {
                    let mut board = self.plan.hints.clone();
                    board.extend(self.placements(lanes, slot, d + 1));
                    board.sort_by_key(|p| p.pos);
                    st.boards.push(board);
                }
            }
            F::head_mut(lanes, slot).watch = st.deepest.min(depths - 1);
        }
    }

    fn result(&self, lanes: &F::Lanes, slot: usize, st: LaneState) -> UnitResult {
        let nodes = self.form.nodes(lanes, slot);
        let reason = st.stop.unwrap_or(StopReason::Finished);
        let cursor = match reason {
            StopReason::Finished => None,
            _ => {
                let last = F::head(lanes, slot).last;
                Some(self.placements(lanes, slot, last + 1)[st.floor..].to_vec())
            }
        };
        UnitResult {
            committed: nodes.iter().sum(),
            nodes_by_depth: nodes,
            solutions_count: st.solutions,
            solutions: st.boards,
            max_depth: st.deepest,
            deepest: st.deepest_board,
            cursor,
            stop: Some(reason),
        }
    }

    /// Walks `first`, and the units `feed` hands out, [`Form::LANES`] at a time, until
    /// the feed has none left; every result goes back through `feed.done`.
    fn run<'a>(&self, first: Work<'a>, feed: &mut dyn Feed<'a>) {
        const {
            assert!(
                F::LANES <= MAX_LANES,
                "a form walks at most MAX_LANES lanes"
            )
        };
        let k = F::LANES;
        let mut lanes = self.form.lanes();
        // a walking lane's unit, its cold-path state and its seconds so far
        let mut states: Vec<Option<(Work<'a>, LaneState, f64)>> = (0..k).map(|_| None).collect();
        let mut pending = Some(first);
        loop {
            // fill idle lanes
            for (i, state) in states.iter_mut().enumerate() {
                while state.is_none() {
                    let Some(work) = pending.take().or_else(|| feed.next()) else {
                        break;
                    };
                    match self.begin(&mut lanes, i, work) {
                        Begin::Walk(mut work, mut st) => {
                            // the first node may already be one to look at
                            if self.cold(&mut lanes, i, &mut st, work.control.as_mut()) {
                                feed.done(work, Ok(self.result(&lanes, i, st)), 0.0);
                            } else {
                                *state = Some((work, st, 0.0));
                            }
                        }
                        Begin::Done(work, result) => {
                            feed.done(work, result.map_err(EngineError::from), 0.0)
                        }
                    }
                }
            }
            let mut live = [0usize; MAX_LANES];
            let mut n = 0;
            for (i, state) in states.iter().enumerate() {
                if state.is_some() {
                    live[n] = i;
                    n += 1;
                }
            }
            if n == 0 {
                return;
            }
            let live = &live[..n];
            let started = Instant::now();
            let mut before = [0u64; MAX_LANES];
            for &i in live {
                before[i] = F::head(&lanes, i).left;
            }
            self.form.drive(&mut lanes, live);
            // share the elapsed time by the nodes each lane walked (each step takes one
            // off its countdown, which only the cold path refills)
            let mut walked = [0u64; MAX_LANES];
            for &i in live {
                walked[i] = before[i] - F::head(&lanes, i).left;
            }
            let total = walked.iter().sum::<u64>().max(1) as f64;
            let secs = started.elapsed().as_secs_f64();
            for &i in live {
                if let Some(s) = states[i].as_mut() {
                    s.2 += secs * walked[i] as f64 / total;
                }
            }
            for &i in live {
                if !needs_cold(F::head(&lanes, i)) {
                    continue;
                }
                let (work, st, _) = states[i].as_mut().expect("a live lane");
                // the cold path (and a poll that blocks for a pause) is outside the timed
                // drive: held time is not walking time
                if self.cold(&mut lanes, i, st, work.control.as_mut()) {
                    let (work, st, seconds) = states[i].take().expect("a live lane");
                    feed.done(work, Ok(self.result(&lanes, i, st)), seconds);
                }
            }
        }
    }

    fn begin<'a>(&self, lanes: &mut F::Lanes, slot: usize, work: Work<'a>) -> Begin<'a> {
        let budget = match work.options.check() {
            Ok(()) => work.options.budget.unwrap_or(u64::MAX),
            Err(e) => return Begin::Done(work, Err(e)),
        };
        let floor = work.unit.prefix.len();
        let mut st = LaneState {
            floor,
            budget,
            committed: 0,
            window: budget.min(POLL_INTERVAL),
            deepest: floor,
            deepest_board: work.unit.prefix.clone(),
            solutions: 0,
            boards: Vec::new(),
            cap: work.options.max_solutions,
            stop: None,
        };
        let path: Vec<Placement> = work
            .unit
            .prefix
            .iter()
            .chain(&work.unit.cursor)
            .copied()
            .collect();
        if let Err(e) = Walker::new(self.plan).check_path(&path) {
            return Begin::Done(work, Err(e));
        }
        self.form.start(lanes, slot, &path, floor);
        let watch = floor.min(self.plan.len() - 1);
        let h = F::head_mut(lanes, slot);
        h.watch = watch;
        if h.d == F::STOP {
            st.stop = Some(StopReason::Finished);
            let result = self.result(lanes, slot, st);
            return Begin::Done(work, Ok(result));
        }
        h.left = st.window;
        Begin::Walk(work, st)
    }
}

/// The lane tables of one plan, in the form that fits it.
pub struct LaneTables {
    form: Tables,
}

enum Tables {
    Narrow(narrow::Tables),
    #[cfg(target_arch = "x86_64")]
    Wide(wide::Tables),
}

impl LaneTables {
    /// The tables for `plan`: the narrow form where it fits, else the wide one; or why
    /// neither walks it.
    pub fn new(plan: &SearchPlan) -> Result<LaneTables, NotEligible> {
        match narrow::Tables::new(plan) {
            Ok(t) => Ok(LaneTables {
                form: Tables::Narrow(t),
            }),
            Err(narrow) => match Self::wide(plan) {
                Ok(t) => Ok(t),
                // a small board: why the narrow form refused it
                Err(_) if plan.pieces <= narrow::MAX_PIECES => Err(narrow),
                Err(wide) => Err(wide),
            },
        }
    }

    /// The wide form's tables for `plan` with the fastest kernel this processor runs,
    /// whether or not the narrow form takes it (for tests and measurements).
    pub fn wide(plan: &SearchPlan) -> Result<LaneTables, NotEligible> {
        match WideKernel::best() {
            Some(kernel) => Self::wide_with(plan, kernel),
            None => Err(NotEligible::Processor(WideKernel::Ssse3.needs())),
        }
    }

    /// The wide form's tables for `plan` walked by `kernel` (for tests and
    /// measurements: every kernel this processor runs walks the same nodes).
    pub fn wide_with(plan: &SearchPlan, kernel: WideKernel) -> Result<LaneTables, NotEligible> {
        #[cfg(target_arch = "x86_64")]
        {
            wide::Tables::new(plan, kernel).map(|t| LaneTables {
                form: Tables::Wide(t),
            })
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = plan;
            Err(NotEligible::Processor(kernel.needs()))
        }
    }

    /// The wide form's kernel (`None` for the narrow form).
    pub fn kernel(&self) -> Option<WideKernel> {
        match &self.form {
            Tables::Narrow(_) => None,
            #[cfg(target_arch = "x86_64")]
            Tables::Wide(w) => Some(w.kernel()),
        }
    }

    /// Units an engine thread walks at once with these tables.
    pub fn lanes(&self) -> usize {
        match &self.form {
            Tables::Narrow(_) => narrow::Tables::LANES,
            #[cfg(target_arch = "x86_64")]
            Tables::Wide(_) => wide::Tables::LANES,
        }
    }

    /// Whether the wide form's kernel reads two colours from the board at some depth
    /// (fill orders other than scans; scans read one, and their kernel leaves the second
    /// out). `false` for the narrow form.
    pub fn two_reads(&self) -> bool {
        match &self.form {
            Tables::Narrow(_) => false,
            #[cfg(target_arch = "x86_64")]
            Tables::Wide(w) => w.two_reads(),
        }
    }

    /// Which form the tables are.
    pub fn form(&self) -> LaneForm {
        match &self.form {
            Tables::Narrow(_) => LaneForm::Narrow,
            #[cfg(target_arch = "x86_64")]
            Tables::Wide(_) => LaneForm::Wide,
        }
    }
}

/// The lane engine over a shared plan: [`Engine::run`] walks one unit in all its lanes
/// (cut into pieces), [`Engine::run_feed`] several units at a time, one a lane.
pub struct LaneEngine {
    plan: Arc<SearchPlan>,
    tables: Arc<LaneTables>,
    /// Nodes of a lone unit's piece a lane walks before the piece is cut again.
    slice: u64,
}

impl LaneEngine {
    /// The engine for `plan`, or why its board cannot be walked this way.
    pub fn new(plan: Arc<SearchPlan>) -> Result<LaneEngine, NotEligible> {
        let tables = Arc::new(LaneTables::new(&plan)?);
        Ok(LaneEngine::with_tables(plan, tables))
    }

    /// The engine over tables built before (one set per plan, shared by threads).
    pub fn with_tables(plan: Arc<SearchPlan>, tables: Arc<LaneTables>) -> LaneEngine {
        LaneEngine {
            plan,
            tables,
            slice: lone::SLICE,
        }
    }

    /// The same engine cutting a lone unit's pieces every `nodes` nodes instead of every
    /// ~million: for tests, which walk small trees and want them cut many times. Counts
    /// are the same whatever the slice.
    #[doc(hidden)]
    pub fn with_slice(mut self, nodes: u64) -> LaneEngine {
        self.slice = nodes.max(1);
        self
    }

    /// The tables, to share with other threads' engines.
    pub fn tables(&self) -> Arc<LaneTables> {
        self.tables.clone()
    }

    fn walk<'a>(&self, first: Work<'a>, feed: &mut dyn Feed<'a>) {
        let plan = &*self.plan;
        match &self.tables.form {
            Tables::Narrow(form) => Driver { plan, form }.run(first, feed),
            #[cfg(target_arch = "x86_64")]
            Tables::Wide(form) => Driver { plan, form }.run(first, feed),
        }
    }
}

/// The lane engine's revision: raised whenever its walk changes, so a race decided
/// against an earlier lane engine (remembered in the build cache under
/// [`lanes_release`]) is run again. 2: the wide form (16x16 boards); 3: the wide form's
/// kernel keeps each lane's depth in a register (~1.25x on the hard 16x16 boards); 4: the
/// wide form's AVX-512 kernel where the processor has it, ~40 instructions a node, and
/// six lanes a thread; 5: the wide form's step written in instructions (36.5 a node with
/// AVX-512, 41.5 with SSSE3 on scan orders).
pub const LANES_REVISION: u32 = 5;

/// The lane engine's release id: the same program for every puzzle.
pub fn lanes_release() -> String {
    format!("lanes-{}-r{LANES_REVISION}", env!("CARGO_PKG_VERSION"))
}

impl Engine for LaneEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Lanes
    }

    fn build_id(&self) -> String {
        lanes_release()
    }

    /// Walks `unit` in every lane: it cuts itself into pieces in depth-first order and
    /// adds their results up in order (the `lone` module: `engine/src/lanes/lone.rs`),
    /// to the same result as one walk.
    fn run(
        &mut self,
        unit: &Unit,
        options: RunOptions,
        control: &mut dyn Control,
    ) -> Result<UnitResult, EngineError> {
        let plan = &*self.plan;
        match &self.tables.form {
            Tables::Narrow(form) => {
                Driver { plan, form }.run_lone(self.slice, unit, options, control)
            }
            #[cfg(target_arch = "x86_64")]
            Tables::Wide(form) => {
                Driver { plan, form }.run_lone(self.slice, unit, options, control)
            }
        }
    }

    fn units_in_hand(&self) -> usize {
        self.tables.lanes()
    }

    fn run_feed<'a>(&mut self, first: Work<'a>, feed: &mut dyn Feed<'a>) {
        self.walk(first, feed);
    }
}
