//! The reference search: a table-driven, iterative depth-first walker over a
//! [`SearchPlan`].
//!
//! This is the portable engine every other engine is checked against, and the one the
//! coordinator uses to enumerate prefixes and split continuations. It keeps an explicit
//! stack (`cur[d]` is the next candidate to try at depth `d`), so a unit can start from a
//! prefix, resume from a cursor, stop after exactly `B` nodes and hand back the exact path,
//! all without recursion.
//!
//! `prefixes` holds what the coordinator does with the same walker: enumerating a
//! job's prefixes, splitting a waiting continuation, checking a path.
//!
//! Hot-loop shape: one candidate load, a sentinel compare, a byte load for the used test,
//! a masked compare for the rare third/fourth dynamic side, then the commit. Budgets and
//! stop requests share one counter compare per node ([`POLL_INTERVAL`]).

pub mod estimate;
mod prefixes;

pub use prefixes::{Split, split_depth_for};

use thiserror::Error;

use crate::model::{Placement, canonical_rotation, rotate};
use crate::plan::{EMPTY, SENTINEL, SearchPlan, candidate_piece};
use crate::unit::{StopReason, Unit, UnitResult};

/// Nodes between two calls to [`Control::poll`].
pub const POLL_INTERVAL: u64 = 1 << 20;

/// Lets the caller watch a running search and ask it to stop.
pub trait Control {
    /// Called every [`POLL_INTERVAL`] committed nodes with the count so far. Return
    /// `true` to stop: the run then ends exactly like a budget stop at that count. A
    /// caller that pauses the walk blocks here until it resumes (or stops).
    fn poll(&mut self, committed: u64) -> bool;

    /// Whether the walk is to hold still now. An engine that walks in this thread is held
    /// by `poll` blocking and need not ask. One that walks in a process of its own (the
    /// compiled engine) goes on through its own countdown checks while `poll` blocks, so
    /// it asks before each poll and after it: when this says `true` it tells its process
    /// to pause and calls `poll` only once the process holds still (so the time `poll`
    /// waits is time nothing walks), and it resumes the process when this says `false`
    /// again. Default: never.
    fn paused(&mut self) -> bool {
        false
    }

    /// Time this control has held the walk so far (pauses, rests) by blocking in `poll`:
    /// time the walk's thread did not walk. [`crate::engine::Engine::run_feed`] leaves it
    /// out of a unit's seconds. Default: none.
    fn held(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
}

/// A [`Control`] that never stops the search.
pub struct NoControl;

impl Control for NoControl {
    fn poll(&mut self, _committed: u64) -> bool {
        false
    }
}

impl<F: FnMut(u64) -> bool> Control for F {
    fn poll(&mut self, committed: u64) -> bool {
        self(committed)
    }
}

/// Options for one run.
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    /// Stop right after committing this many nodes (COUNTING.md budgets).
    pub budget: Option<u64>,
    /// How many solution boards to keep (the count is always exact).
    pub max_solutions: usize,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            budget: None,
            max_solutions: 1000,
        }
    }
}

impl RunOptions {
    /// Rejects options no engine can honour (every engine calls this).
    pub fn check(&self) -> Result<(), UnitError> {
        if self.budget == Some(0) {
            return Err(UnitError::ZeroBudget);
        }
        Ok(())
    }
}

/// A unit that does not fit the puzzle and fill order.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum UnitError {
    /// The prefix plus cursor is longer than the fill order.
    #[error("unit is {len} placements deep but the fill order has only {depths} free cells")]
    TooDeep {
        /// Prefix + cursor length.
        len: usize,
        /// Free cells.
        depths: usize,
    },
    /// A budget of zero nodes (a run must be allowed at least one node).
    #[error("a node budget must be at least 1")]
    ZeroBudget,
    /// A placement is not a legal next step.
    #[error("{part} placement {index} {placement:?} is not a legal step at depth {depth}: {why}")]
    IllegalStep {
        /// `prefix` or `cursor`.
        part: &'static str,
        /// Index within that part.
        index: usize,
        /// Absolute depth (1-based).
        depth: usize,
        /// The offending placement.
        placement: Placement,
        /// What is wrong.
        why: &'static str,
    },
}

/// Per-depth facts for the hot loop, packed together.
#[derive(Clone, Copy, Default)]
struct Step {
    pos: u32,
    table: u32,
    a_cell: u32,
    a_shift: u32,
    b_cell: u32,
    b_shift: u32,
    mask: u32,
}

/// What happens at the limit depth: a solution (full search) or a prefix (enumeration).
trait Leaf {
    fn leaf(&mut self, walker: &Walker<'_>, limit: usize);
}

/// The walker state: board, used pieces and the explicit stack.
pub struct Walker<'p> {
    plan: &'p SearchPlan,
    steps: Vec<Step>,
    board: Vec<u32>,
    used: Vec<u8>,
    cur: Vec<u32>,
    path: Vec<u64>,
    expect: Vec<u32>,
}

enum Outcome {
    Finished,
    Stopped { at: usize, reason: StopReason },
}

impl<'p> Walker<'p> {
    /// A walker with the hints placed and nothing else.
    pub fn new(plan: &'p SearchPlan) -> Self {
        let steps = plan
            .depths
            .iter()
            .map(|d| Step {
                pos: d.pos as u32,
                table: d.table as u32,
                a_cell: d.key[0].cell as u32,
                a_shift: d.key[0].shift,
                b_cell: d.key[1].cell as u32,
                b_shift: d.key[1].shift,
                mask: d.extra_mask,
            })
            .collect();
        let depths = plan.len();
        Walker {
            plan,
            steps,
            board: plan.initial_board.clone(),
            used: plan.initial_used.clone(),
            cur: vec![0; depths + 1],
            path: vec![SENTINEL; depths + 1],
            expect: vec![0; depths + 1],
        }
    }

    fn reset(&mut self) {
        self.board.copy_from_slice(&self.plan.initial_board);
        self.used.copy_from_slice(&self.plan.initial_used);
    }

    #[inline(always)]
    fn enter(&mut self, depth: usize) {
        let s = self.steps[depth];
        let a = (self.board[s.a_cell as usize] >> s.a_shift) & 0xFF;
        let b = (self.board[s.b_cell as usize] >> s.b_shift) & 0xFF;
        let key = s.table as usize + a as usize * self.plan.colours + b as usize;
        self.cur[depth] = self.plan.offsets[key];
        if s.mask != 0 {
            self.expect[depth] = self.plan.extra_expect(&self.board, depth);
        } else {
            self.expect[depth] = 0;
        }
    }

    #[inline(always)]
    fn place(&mut self, depth: usize, c: u64) {
        self.board[self.steps[depth].pos as usize] = c as u32;
        self.used[candidate_piece(c)] = 1;
        self.path[depth] = c;
    }

    #[inline(always)]
    fn unplace(&mut self, depth: usize) {
        let c = self.path[depth];
        self.board[self.steps[depth].pos as usize] = EMPTY;
        self.used[candidate_piece(c)] = 0;
    }

    /// Places `steps` at depths `from..`, each checked against the tables exactly as the
    /// walk would have produced it, leaving `cur` just past each one.
    fn descend(
        &mut self,
        from: usize,
        steps: &[Placement],
        part: &'static str,
    ) -> Result<(), UnitError> {
        for (index, &placement) in steps.iter().enumerate() {
            let depth = from + index;
            let illegal = |why| UnitError::IllegalStep {
                part,
                index,
                depth: depth + 1,
                placement,
                why,
            };
            if placement.pos as usize != self.plan.depths[depth].pos {
                return Err(illegal("the fill order fills another cell at this depth"));
            }
            let piece = placement.piece as usize;
            if piece >= self.plan.pieces || placement.rot > 3 {
                return Err(illegal("piece or rotation out of range"));
            }
            let colours = self.plan.piece_colours[piece];
            if canonical_rotation(colours, placement.rot) != placement.rot {
                return Err(illegal(
                    "rotation is a duplicate of a lower rotation of this piece",
                ));
            }
            if self.used[piece] != 0 {
                return Err(illegal("piece is already on the board"));
            }
            self.enter(depth);
            let shown = crate::model::pack(rotate(colours, placement.rot));
            let mut i = self.cur[depth] as usize;
            let found = loop {
                let c = self.plan.candidates[i];
                if c == SENTINEL {
                    break None;
                }
                if candidate_piece(c) == piece && c as u32 == shown {
                    break Some(i);
                }
                i += 1;
            };
            let Some(i) = found else {
                return Err(illegal(
                    "piece does not fit the rim, hints or its neighbours",
                ));
            };
            let c = self.plan.candidates[i];
            if (c as u32 & self.steps[depth].mask) != self.expect[depth] {
                return Err(illegal("piece does not match a placed neighbour"));
            }
            self.cur[depth] = i as u32 + 1;
            self.place(depth, c);
        }
        Ok(())
    }

    fn placements(&self, from: usize, to: usize) -> Vec<Placement> {
        (from..to)
            .map(|d| self.plan.placement(d, self.path[d]))
            .collect()
    }

    /// The core loop. Levels `floor..start` are placed with `cur` set; walks the subtree of
    /// level `start - 1` (or of the prefix when `start == floor`), then the untried
    /// siblings of each placed level down to `floor`, never going deeper than `limit`.
    #[allow(clippy::too_many_arguments)]
    fn walk<L: Leaf>(
        &mut self,
        floor: usize,
        start: usize,
        limit: usize,
        budget: u64,
        nodes: &mut [u64],
        deepest: &mut usize,
        deepest_board: &mut Vec<Placement>,
        leaf: &mut L,
        control: &mut dyn Control,
    ) -> Outcome {
        let mut d;
        if start == limit {
            if start == floor {
                return Outcome::Finished;
            }
            d = start - 1;
            self.unplace(d);
        } else {
            d = start;
            self.enter(d);
        }
        let mut committed = 0u64;
        let mut next_poll = budget.min(POLL_INTERVAL);
        let plan = self.plan;
        let candidates = &plan.candidates[..];
        loop {
            let i = self.cur[d] as usize;
            let c = candidates[i];
            self.cur[d] = i as u32 + 1;
            if c == SENTINEL {
                if d == floor {
                    return Outcome::Finished;
                }
                d -= 1;
                self.unplace(d);
                continue;
            }
            if self.used[candidate_piece(c)] != 0 {
                continue;
            }
            if (c as u32 & self.steps[d].mask) != self.expect[d] {
                continue;
            }
            self.place(d, c);
            nodes[d] += 1;
            committed += 1;
            if d >= *deepest {
                *deepest = d + 1;
                *deepest_board = self.placements(0, d + 1);
            }
            let at_leaf = d + 1 == limit;
            if at_leaf {
                leaf.leaf(self, limit);
            }
            if committed == next_poll {
                if committed == budget {
                    return Outcome::Stopped {
                        at: d,
                        reason: StopReason::Budget,
                    };
                }
                if control.poll(committed) {
                    return Outcome::Stopped {
                        at: d,
                        reason: StopReason::Requested,
                    };
                }
                next_poll = budget.min(committed + POLL_INTERVAL);
            }
            if at_leaf {
                self.unplace(d);
            } else {
                d += 1;
                self.enter(d);
            }
        }
    }

    /// Walks `unit` and returns its exact result.
    pub fn run(
        &mut self,
        unit: &Unit,
        options: RunOptions,
        control: &mut dyn Control,
    ) -> Result<UnitResult, UnitError> {
        options.check()?;
        let depths = self.plan.len();
        let floor = unit.prefix.len();
        let start = floor + unit.cursor.len();
        if start > depths {
            return Err(UnitError::TooDeep { len: start, depths });
        }
        self.reset();
        self.descend(0, &unit.prefix, "prefix")?;
        self.descend(floor, &unit.cursor, "cursor")?;
        let mut nodes = vec![0u64; depths];
        let mut deepest = floor;
        let mut deepest_board = unit.prefix.clone();
        let mut solutions = Solutions {
            count: 0,
            boards: Vec::new(),
            cap: options.max_solutions,
        };
        let outcome = self.walk(
            floor,
            start,
            depths,
            options.budget.unwrap_or(u64::MAX),
            &mut nodes,
            &mut deepest,
            &mut deepest_board,
            &mut solutions,
            control,
        );
        let (cursor, stop) = match outcome {
            Outcome::Finished => (None, StopReason::Finished),
            Outcome::Stopped { at, reason } => (Some(self.placements(floor, at + 1)), reason),
        };
        Ok(UnitResult {
            committed: nodes.iter().sum(),
            nodes_by_depth: nodes,
            solutions_count: solutions.count,
            solutions: solutions.boards,
            max_depth: deepest,
            deepest: deepest_board,
            cursor,
            stop: Some(stop),
        })
    }

    /// The board as placements (hints and placed cells), sorted by cell.
    fn full_board(&self, upto: usize) -> Vec<Placement> {
        let mut board = self.plan.hints.clone();
        board.extend(self.placements(0, upto));
        board.sort_by_key(|p| p.pos);
        board
    }
}

struct Solutions {
    count: u64,
    boards: Vec<Vec<Placement>>,
    cap: usize,
}

impl Leaf for Solutions {
    fn leaf(&mut self, walker: &Walker<'_>, limit: usize) {
        self.count += 1;
        if self.boards.len() < self.cap {
            self.boards.push(walker.full_board(limit));
        }
    }
}
