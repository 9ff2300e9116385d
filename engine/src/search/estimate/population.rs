//! The population estimator: weighted partial boards walked down the tree together,
//! resampled at each depth (see the parent module for what it states and why).
//!
//! A run holds at most `particles` boards, each with a weight (the number of nodes it
//! stands for). At depth `d`, every board's children are listed; each child carries its
//! parent's weight, so their weights add up to an unbiased estimate of the nodes at
//! `d`. If the children fit in the population they all go on (while that holds, the
//! run counts exactly); otherwise `particles` of them are drawn by systematic resampling
//! in proportion to weight, and each carries `total / particles`. A child's subtree
//! keeps, in expectation, exactly its own weight, so every depth's sum stays unbiased;
//! systematic draws over children listed parent by parent keep the population spread
//! over as many parents as the weights allow.

use crate::model::{Placement, pack, rotate};
use crate::plan::{SearchPlan, candidate_piece};

use super::{Rng, TreeEstimate, children, lower_bound, mean_and_error, tail_seen};

/// The share of the depths (numerator, denominator) every run's population must reach
/// for a two-sided interval: below that, what the runs never reached may hold the tree.
pub const SEEN_DEPTHS: (usize, usize) = (3, 4);

/// How much an estimate spends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Effort {
    /// Boards in each run's population.
    pub particles: usize,
    /// Independent runs (at least 2; 8 or more for a two-sided interval).
    pub runs: usize,
}

impl Effort {
    /// What a coordinator spends on a job's tree (about a second on a 16x16 board, one
    /// core of a 2020s server).
    pub const JOB: Effort = Effort {
        particles: 512,
        runs: 16,
    };
}

/// Estimates the whole tree of `plan` from its root (every node, the root's children
/// first).
pub fn estimate_tree(plan: &SearchPlan, effort: Effort, seed: u64) -> TreeEstimate {
    estimate_below(plan, &[], effort, seed)
}

/// Estimates the nodes below `prefix` (placements of the plan's first depths, in order):
/// the subtree a prefix unit walks.
pub fn estimate_below(
    plan: &SearchPlan,
    prefix: &[Placement],
    effort: Effort,
    seed: u64,
) -> TreeEstimate {
    let start = prefix.len().min(plan.len());
    let depths = plan.len() - start;
    let mut root_board = plan.initial_board.clone();
    let mut root_used = plan.initial_used.clone();
    for p in prefix {
        root_board[p.pos as usize] = pack(rotate(plan.piece_colours[p.piece as usize], p.rot));
        root_used[p.piece as usize] = 1;
    }
    let particles = effort.particles.max(1);
    let mut population = Population::new(plan, particles);
    let mut rng = Rng::new(seed);
    let mut totals = Vec::with_capacity(effort.runs.max(2));
    let mut by_depth = vec![0.0; depths];
    let mut expansions = 0u64;
    let mut resampled = false;
    let mut reached = depths;
    for _ in 0..effort.runs.max(2) {
        population.reset(&root_board, &root_used);
        let run = population.run(start, &mut rng, &mut by_depth);
        expansions += run.expansions;
        resampled |= run.resampled;
        reached = reached.min(run.reached);
        totals.push(run.nodes);
        if !resampled {
            // nothing was sampled: the run counted the tree exactly
            let runs = totals.len() as f64;
            by_depth.iter_mut().for_each(|n| *n /= runs);
            return TreeEstimate {
                expansions,
                reached: run.reached,
                depths,
                ..TreeEstimate::exact(run.nodes, by_depth)
            };
        }
    }
    let runs = totals.len();
    by_depth.iter_mut().for_each(|n| *n /= runs as f64);
    let (nodes, std_error) = mean_and_error(&totals);
    TreeEstimate {
        nodes,
        std_error,
        at_least: lower_bound(&totals),
        // a run whose population died out before the bottom says nothing of the depths
        // below: the tree's mass may be there, in branches no board of it reached
        tail_seen: tail_seen(&totals) && reached * SEEN_DEPTHS.1 >= depths * SEEN_DEPTHS.0,
        by_depth,
        runs,
        particles,
        expansions,
        exact: 0.0,
        reached,
        depths,
    }
}

/// What one run found.
pub(super) struct Run {
    pub(super) nodes: f64,
    pub(super) expansions: u64,
    pub(super) resampled: bool,
    /// Depths below the start the population reached (all of them: it saw the bottom).
    pub(super) reached: usize,
}

/// A run's boards, flat: board `i` is `boards[i * cells..]`, its used pieces
/// `used[i * pieces..]`; `next_*` is the following depth's, built from the chosen children.
pub(super) struct Population<'p> {
    plan: &'p SearchPlan,
    cells: usize,
    pieces: usize,
    limit: usize,
    boards: Vec<u32>,
    used: Vec<u8>,
    weights: Vec<f64>,
    next_boards: Vec<u32>,
    next_used: Vec<u8>,
    next_weights: Vec<f64>,
    /// The children of the current depth: (parent board, candidate).
    kids: Vec<(u32, u64)>,
    fits: Vec<u64>,
    /// The children listed at each depth of the last run (index 0: the start's).
    listed: Vec<u64>,
}

impl<'p> Population<'p> {
    pub(super) fn new(plan: &'p SearchPlan, limit: usize) -> Population<'p> {
        Population {
            plan,
            cells: plan.initial_board.len(),
            pieces: plan.initial_used.len(),
            limit,
            boards: Vec::new(),
            used: Vec::new(),
            weights: Vec::new(),
            next_boards: Vec::new(),
            next_used: Vec::new(),
            next_weights: Vec::new(),
            kids: Vec::new(),
            fits: Vec::new(),
            listed: Vec::new(),
        }
    }

    pub(super) fn reset(&mut self, board: &[u32], used: &[u8]) {
        self.boards.clear();
        self.boards.extend_from_slice(board);
        self.used.clear();
        self.used.extend_from_slice(used);
        self.weights.clear();
        self.weights.push(1.0);
        self.listed.clear();
    }

    /// Walks the population from depth `start` to the bottom, adding each depth's
    /// estimate to `by_depth` (index 0: `start`).
    pub(super) fn run(&mut self, start: usize, rng: &mut Rng, by_depth: &mut [f64]) -> Run {
        let plan = self.plan;
        let (cells, pieces) = (self.cells, self.pieces);
        let mut run = Run {
            nodes: 0.0,
            expansions: 0,
            resampled: false,
            reached: 0,
        };
        for d in start..plan.len() {
            self.kids.clear();
            let mut total = 0.0;
            for i in 0..self.weights.len() {
                children(
                    plan,
                    &self.boards[i * cells..(i + 1) * cells],
                    &self.used[i * pieces..(i + 1) * pieces],
                    d,
                    &mut self.fits,
                );
                total += self.weights[i] * self.fits.len() as f64;
                self.kids.extend(self.fits.iter().map(|&c| (i as u32, c)));
            }
            run.expansions += self.weights.len() as u64;
            self.listed.push(self.kids.len() as u64);
            if self.kids.is_empty() {
                break;
            }
            by_depth[d - start] += total;
            run.nodes += total;
            run.reached = d - start + 1;
            self.next_boards.clear();
            self.next_used.clear();
            self.next_weights.clear();
            let pos = plan.depths[d].pos;
            if self.kids.len() <= self.limit {
                for k in 0..self.kids.len() {
                    let (parent, c) = self.kids[k];
                    self.push_child(parent as usize, pos, c, self.weights[parent as usize]);
                }
            } else {
                // systematic resampling: `limit` evenly spaced points over the children's
                // cumulative weight, from one random offset
                run.resampled = true;
                let share = total / self.limit as f64;
                let mut point = rng.unit() * share;
                let mut cumulative = 0.0;
                for k in 0..self.kids.len() {
                    let (parent, c) = self.kids[k];
                    cumulative += self.weights[parent as usize];
                    while point < cumulative && self.next_weights.len() < self.limit {
                        self.push_child(parent as usize, pos, c, share);
                        point += share;
                    }
                }
            }
            std::mem::swap(&mut self.boards, &mut self.next_boards);
            std::mem::swap(&mut self.used, &mut self.next_used);
            std::mem::swap(&mut self.weights, &mut self.next_weights);
        }
        run
    }

    /// Adds to the next depth's population parent `i`'s board with candidate `c` at
    /// `pos`, weighing `weight`.
    /// The children listed at each depth of the last run, from its start (the run stops
    /// listing at the first depth with none).
    pub(super) fn listed(&self) -> &[u64] {
        &self.listed
    }

    fn push_child(&mut self, i: usize, pos: usize, c: u64, weight: f64) {
        let (cells, pieces) = (self.cells, self.pieces);
        let at = self.next_boards.len();
        self.next_boards
            .extend_from_slice(&self.boards[i * cells..(i + 1) * cells]);
        self.next_boards[at + pos] = c as u32;
        let at = self.next_used.len();
        self.next_used
            .extend_from_slice(&self.used[i * pieces..(i + 1) * pieces]);
        self.next_used[at + candidate_piece(c)] = 1;
        self.next_weights.push(weight);
    }
}
