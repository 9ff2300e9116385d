//! A lone unit walked in every lane: the unit cuts itself into pieces in depth-first
//! order, the lanes walk the pieces, and the pieces' results are added up in order, so
//! the result (counts per depth, solutions, deepest board, cursor, stop) is exactly the
//! one walk of the whole unit's.
//!
//! # Pieces
//! The depth-first walk of a unit is a sequence of nodes. It is held here as a sequence of
//! *segments* in that order: a *node* the split commits itself, or a *piece*, a unit
//! (prefix and cursor) a lane walks, which counts the nodes strictly below its prefix
//! after its cursor (`COUNTING.md`). The whole unit starts as one piece.
//!
//! A lane walks a piece a *slice* at a time ([`SLICE`] nodes, a budget). A slice that ends
//! before its piece does leaves a cursor `K` below the piece's prefix `Q`; what is left of
//! the piece is the continuation `(Q, K)`: the subtree of `K`'s last placement, then the
//! untried siblings at each level of `K`, the deepest first. That continuation is cut
//! along its levels into pieces that are contiguous in the walk's order:
//! - the *group*, the cursor's subtree and the siblings of the deepest levels, up to level
//!   `L`: the unit `(Q + K[..L-1], K[L-1..])`, whose floor stops it at level `L`;
//! - then runs of shallower levels `a..=b` (`a` deeper), each starting at level `a`'s
//!   first untried sibling `s`: the node `Q + K[..a-1] + s`, which the split commits
//!   itself, then the unit `(Q + K[..b-1], K[b-1..a-1] + s)`, which walks `s`'s subtree,
//!   the rest of level `a` and the untried siblings of levels `a-1..=b`. The last run
//!   takes every level left, so the sequence stays short however deep the cursor.
//!
//! Where to cut is an estimate (a node at depth `d` has, on the nodes walked so far,
//! `N(>d) / N(d)` nodes below it): the group and each run hold about [`PIECE`] slices, and
//! a cut makes at most as many runs as there are lanes. A wrong estimate costs speed,
//! never counts: a piece far larger than estimated is cut again at its next slice's end.
//!
//! Every cut makes its runs, however many pieces wait further on. Those waiting pieces
//! are the shallow tails of earlier cuts, far to the right in the walk's order; a cut
//! that made only the runs the lanes lacked sent the lanes there, and a 4 s run from the
//! root of bench-hard or a planted 16x16 board ended with 27-37% of what the lanes walked
//! past its end (dropped); with a cut's runs always made, 1-5% (0.6% in 40 s), while the
//! pieces held stay a few hundred.
//!
//! # Exact budgets and stops
//! Lanes take the first waiting piece in the walk's order, so they walk the front of the
//! unit together, and results are added in order. A piece's budget is its slice, or less:
//! the unit's budget less every node known to come before it. When the in-order sum
//! reaches a piece whose result passes the budget left (it was walked before the pieces
//! before it were known), the piece is walked again from its start with exactly the
//! budget left (at most one slice), and the pieces after it are dropped: the unit stops
//! on the same node, with the same cursor, as one walk would. A stop the caller asks for
//! ([`Control::poll`], called every [`POLL_INTERVAL`] nodes walked) ends the unit where
//! the in-order sum has reached once the lanes' slices end: right before the first piece
//! not walked, whose start is then the cursor (the node before a piece is always its
//! start: the node the split committed, or the cursor of the slice it continues). Work
//! past the end (lanes ahead of the in-order sum) is dropped, a few slices at most.

use std::collections::VecDeque;

use crate::engine::{EngineError, Feed, Work};
use crate::model::Placement;
use crate::plan::SearchPlan;
use crate::search::{Control, NoControl, POLL_INTERVAL, RunOptions, UnitError, Walker};
use crate::unit::{StopReason, Unit, UnitResult, add_counts};

use super::{Driver, Form};

/// Nodes a lane walks of a piece before the piece is cut again: ~3-20 ms of a lane, so a
/// stop waits no longer and the work past a budget's end is a few slices.
pub(super) const SLICE: u64 = POLL_INTERVAL;

/// The first slice of the whole unit, before any estimate, in slices: short, so the
/// other lanes start soon.
const FIRST_SLICE: u64 = 16;

/// Estimated nodes of a piece the cut aims at (the group, and each run of levels), in
/// slices.
const PIECE: f64 = 4.0;

/// One stretch of the unit's walk.
enum Segment {
    /// A node the split commits itself: its path from depth 1.
    Node(Vec<Placement>),
    /// A unit a lane walks.
    Piece(Piece),
}

struct Piece {
    id: usize,
    unit: Unit,
    /// The exact budget of a piece walked again where the unit's budget ends in it.
    exact: Option<u64>,
    state: State,
}

enum State {
    Waiting,
    Walking,
    Walked(UnitResult),
}

impl Piece {
    /// The path the piece starts from (the node before its first).
    fn start(&self) -> Vec<Placement> {
        let mut path = self.unit.prefix.clone();
        path.extend_from_slice(&self.unit.cursor);
        path
    }
}

/// How a lone unit's walk ended, when it ended before its last node.
struct End {
    reason: StopReason,
    /// The path of the last node committed, from depth 1.
    path: Vec<Placement>,
}

/// The split of one lone unit: hands pieces to the lanes and adds their results up.
struct Lone<'p, 'c> {
    plan: &'p SearchPlan,
    walker: Walker<'p>,
    lanes: usize,
    /// [`SLICE`], or less in tests.
    slice: u64,
    budget: u64,
    cap: usize,
    control: &'c mut dyn Control,
    segments: VecDeque<Segment>,
    next_id: usize,
    /// The result of the segments added so far, in order.
    total: UnitResult,
    /// Nodes per depth of every piece walked (the estimates').
    profile: Vec<u64>,
    since_poll: u64,
    /// The caller asked to stop.
    stopped: bool,
    end: Option<End>,
    error: Option<EngineError>,
}

impl<'a> Feed<'a> for Lone<'_, '_> {
    fn next(&mut self) -> Option<Work<'a>> {
        if self.end.is_some() || self.error.is_some() {
            return None;
        }
        // once stopped, only a piece walked again to end the unit on its budget (and
        // the first pieces, until a node is added)
        let only_exact = self.stopped && self.total.committed > 0;
        let mut known = self.total.committed;
        for segment in self.segments.iter_mut() {
            if known >= self.budget {
                return None;
            }
            match segment {
                Segment::Node(_) => known += 1,
                Segment::Piece(p) => match &p.state {
                    State::Walked(r) => known += r.committed,
                    State::Walking => {}
                    State::Waiting => {
                        if only_exact && p.exact.is_none() {
                            return None;
                        }
                        let slice = match self.next_id {
                            1 => (self.slice / FIRST_SLICE).max(1),
                            _ => self.slice,
                        };
                        let budget = p.exact.unwrap_or(slice.min(self.budget - known));
                        p.state = State::Walking;
                        return Some(Work {
                            tag: p.id,
                            unit: p.unit.clone(),
                            options: RunOptions {
                                budget: Some(budget),
                                max_solutions: self.cap,
                            },
                            control: Box::new(NoControl),
                        });
                    }
                },
            }
        }
        None
    }

    fn done(&mut self, work: Work<'a>, result: Result<UnitResult, EngineError>, _: f64) {
        let r = match result {
            Ok(r) => r,
            Err(e) => {
                self.error.get_or_insert(e);
                return;
            }
        };
        self.since_poll += r.committed;
        add_counts(&mut self.profile, &r.nodes_by_depth);
        // a piece dropped past the unit's end (its work is not the unit's)
        if let Some(at) = self.segments.iter().position(|s| match s {
            Segment::Piece(p) => p.id == work.tag,
            Segment::Node(_) => false,
        }) {
            let Segment::Piece(piece) = &mut self.segments[at] else {
                unreachable!("found as a piece")
            };
            let rest = match (&r.cursor, piece.exact) {
                (Some(cursor), None) => Some((piece.unit.prefix.clone(), cursor.clone())),
                _ => None,
            };
            piece.state = State::Walked(r);
            if let Some((prefix, cursor)) = rest {
                match self.cut(&prefix, &cursor) {
                    Ok(pieces) => {
                        for (i, s) in pieces.into_iter().enumerate() {
                            self.segments.insert(at + 1 + i, s);
                        }
                    }
                    Err(e) => {
                        self.error = Some(e.into());
                        return;
                    }
                }
            }
            self.add_in_order();
        }
        if self.since_poll >= POLL_INTERVAL && self.end.is_none() {
            self.since_poll = 0;
            if !self.stopped && self.control.poll(self.total.committed) {
                self.stopped = true;
            }
        }
    }
}

impl Lone<'_, '_> {
    /// Adds the segments at the front whose results are in, in order, up to the unit's
    /// budget.
    fn add_in_order(&mut self) {
        let depths = self.plan.len();
        while let Some(front) = self.segments.front_mut() {
            let left = self.budget - self.total.committed;
            match front {
                Segment::Node(path) => {
                    let d = path.len();
                    self.total.nodes_by_depth[d - 1] += 1;
                    self.total.committed += 1;
                    if d > self.total.max_depth {
                        self.total.max_depth = d;
                        self.total.deepest = path.clone();
                    }
                    if d == depths {
                        self.total.solutions_count += 1;
                        if self.total.solutions.len() < self.cap {
                            let mut board = self.plan.hints.clone();
                            board.extend_from_slice(path);
                            board.sort_by_key(|p| p.pos);
                            self.total.solutions.push(board);
                        }
                    }
                    if left == 1 {
                        let path = path.clone();
                        self.finish(StopReason::Budget, path);
                        return;
                    }
                    self.segments.pop_front();
                }
                Segment::Piece(p) => {
                    let State::Walked(r) = &p.state else { return };
                    let ends_here = r.committed == left && r.stop == Some(StopReason::Budget);
                    if r.committed >= left && !ends_here {
                        // walked before the nodes before it were known, past the unit's
                        // budget: again from its start, to exactly the budget left
                        p.exact = Some(left);
                        p.state = State::Waiting;
                        self.segments.truncate(1);
                        return;
                    }
                    // a piece that committed nothing reports its prefix as its deepest
                    // board, never deeper than a node added before it (the node the
                    // split committed, or the cursor of the slice it continues), so
                    // `absorb`'s "deeper replaces" keeps the unit's first deepest board
                    self.total.absorb(r, self.cap);
                    if ends_here {
                        let mut path = p.unit.prefix.clone();
                        path.extend_from_slice(r.cursor.as_deref().unwrap_or_default());
                        self.finish(StopReason::Budget, path);
                        return;
                    }
                    self.segments.pop_front();
                }
            }
        }
    }

    fn finish(&mut self, reason: StopReason, path: Vec<Placement>) {
        self.end = Some(End { reason, path });
        self.segments.clear();
    }

    /// Cuts the continuation `(prefix, cursor)` of a piece into segments in order (the
    /// module's docs).
    fn cut(
        &mut self,
        prefix: &[Placement],
        cursor: &[Placement],
    ) -> Result<Vec<Segment>, UnitError> {
        let floor = prefix.len();
        let path: Vec<Placement> = prefix.iter().chain(cursor).copied().collect();
        let levels = self.walker.siblings_along(&path, floor)?;
        let k = levels.len();
        // nodes below a node at depth d (1-based), by the profile so far
        let mut below = vec![0u64; self.profile.len() + 1];
        for d in (0..self.profile.len()).rev() {
            below[d] = below[d + 1] + self.profile[d];
        }
        let subtree = |depth: usize| -> f64 {
            match self.profile.get(depth - 1) {
                Some(&n) if n > 0 => below[depth] as f64 / n as f64,
                _ => f64::INFINITY,
            }
        };
        // per level l (1-based below the floor, index l - 1): its untried siblings'
        // estimated nodes
        let estimates: Vec<f64> = levels
            .iter()
            .enumerate()
            .map(|(i, &(count, _))| match count {
                0 => 0.0,
                _ => count as f64 * (1.0 + subtree(floor + i + 1)),
            })
            .collect();
        let estimate = |l: usize| estimates[l - 1];
        let below_cursor = subtree(floor + k);
        let piece = PIECE * self.slice as f64;
        let want = self.lanes;
        let shallowest = (1..=k).find(|&l| levels[l - 1].0 > 0);
        // the group: the cursor's subtree and the deepest levels, up to about PIECE
        // nodes, leaving at least one run when there are siblings above it
        let mut group = k;
        let mut sum = below_cursor.min(piece);
        while group > 1 {
            let l = group - 1;
            let e = estimate(l);
            if sum + e > piece || (shallowest == Some(l) && e > 0.0) {
                break;
            }
            sum += e;
            group = l;
        }
        let mut out = vec![self.piece(Unit {
            prefix: path[..floor + group - 1].to_vec(),
            cursor: path[floor + group - 1..].to_vec(),
        })];
        // runs of shallower levels, the last taking every level left
        let mut a = group - 1;
        let mut made = 0;
        while a >= 1 {
            if levels[a - 1].0 == 0 {
                a -= 1;
                continue;
            }
            let mut b = a;
            made += 1;
            if made == want {
                b = 1;
            } else {
                let mut sum = estimate(a);
                while b > 1 && sum + estimate(b - 1) <= piece {
                    b -= 1;
                    sum += estimate(b);
                }
            }
            let first = levels[a - 1].1.expect("a level with siblings has a first");
            let mut node = path[..floor + a - 1].to_vec();
            node.push(first);
            let mut cursor = path[floor + b - 1..floor + a - 1].to_vec();
            cursor.push(first);
            out.push(Segment::Node(node));
            out.push(self.piece(Unit {
                prefix: path[..floor + b - 1].to_vec(),
                cursor,
            }));
            a = b - 1;
        }
        Ok(out)
    }

    fn piece(&mut self, unit: Unit) -> Segment {
        self.next_id += 1;
        Segment::Piece(Piece {
            id: self.next_id,
            unit,
            exact: None,
            state: State::Waiting,
        })
    }
}

impl<F: Form> Driver<'_, F> {
    /// Walks `unit` alone, in all of [`Form::LANES`] lanes (the module's docs).
    pub(super) fn run_lone(
        &self,
        slice: u64,
        unit: &Unit,
        options: RunOptions,
        control: &mut dyn Control,
    ) -> Result<UnitResult, EngineError> {
        options.check()?;
        let plan = self.plan;
        let floor = unit.prefix.len();
        let mut walker = Walker::new(plan);
        walker.check_path(&unit.prefix)?;
        walker.check_path(&[unit.prefix.as_slice(), &unit.cursor].concat())?;
        let mut lone = Lone {
            plan,
            walker,
            lanes: F::LANES,
            slice: slice.max(1),
            budget: options.budget.unwrap_or(u64::MAX),
            cap: options.max_solutions,
            control,
            segments: VecDeque::new(),
            next_id: 0,
            total: UnitResult {
                nodes_by_depth: vec![0; plan.len()],
                max_depth: floor,
                deepest: unit.prefix.clone(),
                ..UnitResult::default()
            },
            profile: vec![0; plan.len()],
            since_poll: 0,
            stopped: false,
            end: None,
            error: None,
        };
        let first = lone.piece(unit.clone());
        lone.segments.push_back(first);
        if let Some(work) = lone.next() {
            self.run(work, &mut lone);
        }
        if let Some(e) = lone.error {
            return Err(e);
        }
        let mut total = lone.total;
        let (reason, cursor) = match (lone.end, lone.segments.front()) {
            (Some(end), _) => (end.reason, Some(end.path[floor..].to_vec())),
            (None, None) => (StopReason::Finished, None),
            // stopped: before the first piece not walked
            (None, Some(Segment::Piece(p))) => {
                (StopReason::Requested, Some(p.start()[floor..].to_vec()))
            }
            (None, Some(Segment::Node(_))) => unreachable!("a node at the front is added at once"),
        };
        total.cursor = cursor;
        total.stop = Some(reason);
        Ok(total)
    }
}
