//! Knuth's random-probe estimator (Knuth 1975, "Estimating the efficiency of backtrack
//! programs"), stratified by a split: the baseline the population estimator is measured
//! against.
//!
//! One probe walks down from a node choosing uniformly among the children it finds at each
//! depth (the candidates the walk itself would accept: same plan, same tests); with `k_i`
//! children at the `i`-th step, `k_1 + k_1 k_2 + k_1 k_2 k_3 + ...` is an unbiased
//! estimate of the nodes below the node (the walk's nodes: committed placements).
//!
//! A job's tree is the exact enumeration to its split depth plus the subtrees of its `N`
//! prefixes. [`estimate_split`] probes a uniform sample of `m` prefixes, `p` probes each,
//! and scales: `N x` the mean of the sampled prefixes' estimates. Its standard error comes
//! from the spread of those per-prefix estimates (`N sqrt((1 - m/N) s^2 / m)`, which holds
//! the probes' own noise too). Subtree sizes are heavy-tailed: the interval is honest about
//! what was seen, and on hard trees the true size is more often above it than below.

use crate::model::{Placement, pack, rotate};
use crate::plan::{SearchPlan, candidate_piece};

use super::super::Walker;
use super::{Rng, children, mean_and_error};

/// Knuth's estimate of a split tree.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KnuthEstimate {
    /// Estimated nodes of the whole tree (the enumeration's exact nodes included).
    pub nodes: f64,
    /// Standard error of `nodes`.
    pub std_error: f64,
    /// Prefixes at the split depth.
    pub prefixes: usize,
    /// Prefixes probed.
    pub sampled: usize,
    /// Probes in all.
    pub probes: usize,
}

impl KnuthEstimate {
    /// The 95% interval (normal approximation), never below `floor` (nodes already known).
    pub fn interval(&self, floor: f64) -> (f64, f64) {
        let half = 1.96 * self.std_error;
        (
            (self.nodes - half).max(floor),
            (self.nodes + half).max(floor),
        )
    }
}

/// Board and used pieces for probing, reset to a prefix before each probe.
struct Probe<'p> {
    plan: &'p SearchPlan,
    board: Vec<u32>,
    used: Vec<u8>,
    fits: Vec<u64>,
}

impl<'p> Probe<'p> {
    fn new(plan: &'p SearchPlan) -> Probe<'p> {
        Probe {
            plan,
            board: plan.initial_board.clone(),
            used: plan.initial_used.clone(),
            fits: Vec::new(),
        }
    }

    fn set(&mut self, placements: &[Placement]) {
        self.board.copy_from_slice(&self.plan.initial_board);
        self.used.copy_from_slice(&self.plan.initial_used);
        for p in placements {
            let colours = rotate(self.plan.piece_colours[p.piece as usize], p.rot);
            self.board[p.pos as usize] = pack(colours);
            self.used[p.piece as usize] = 1;
        }
    }

    /// One probe below the current board, from `depth`: its estimate of the nodes below.
    fn probe(&mut self, depth: usize, rng: &mut Rng) -> f64 {
        let plan = self.plan;
        let mut placed: Vec<(usize, usize, u32)> = Vec::new();
        let (mut weight, mut total) = (1.0f64, 0.0f64);
        for d in depth..plan.len() {
            children(plan, &self.board, &self.used, d, &mut self.fits);
            if self.fits.is_empty() {
                break;
            }
            weight *= self.fits.len() as f64;
            total += weight;
            let c = self.fits[rng.below(self.fits.len())];
            let pos = plan.depths[d].pos;
            placed.push((pos, candidate_piece(c), self.board[pos]));
            self.board[pos] = c as u32;
            self.used[candidate_piece(c)] = 1;
        }
        for (pos, piece, before) in placed.into_iter().rev() {
            self.board[pos] = before;
            self.used[piece] = 0;
        }
        total
    }
}

/// Estimates the whole tree of `plan` split at `split_depth`: the enumeration to that depth
/// exactly, the subtrees below a uniform sample of at most `max_sampled` of its prefixes
/// with `probes` probes each.
pub fn estimate_split(
    plan: &SearchPlan,
    split_depth: usize,
    max_sampled: usize,
    probes: usize,
    seed: u64,
) -> KnuthEstimate {
    let mut prefixes: Vec<Vec<Placement>> = Vec::new();
    let enumeration = Walker::new(plan)
        .enumerate(&[], split_depth, &mut |p| prefixes.push(p.to_vec()))
        .unwrap_or_default();
    let known: f64 = enumeration.iter().sum::<u64>() as f64;
    let n = prefixes.len();
    if n == 0 || split_depth >= plan.len() {
        return KnuthEstimate {
            nodes: known,
            std_error: 0.0,
            prefixes: n,
            sampled: 0,
            probes: 0,
        };
    }
    let mut rng = Rng::new(seed);
    // a uniform sample without replacement (partial Fisher-Yates)
    let m = max_sampled.clamp(1, n);
    let mut order: Vec<usize> = (0..n).collect();
    for i in 0..m {
        let j = i + rng.below(n - i);
        order.swap(i, j);
    }
    let mut probe = Probe::new(plan);
    let per_prefix: Vec<(f64, f64)> = order[..m]
        .iter()
        .map(|&k| {
            probe.set(&prefixes[k]);
            let xs: Vec<f64> = (0..probes.max(2))
                .map(|_| probe.probe(split_depth, &mut rng))
                .collect();
            mean_and_error(&xs)
        })
        .collect();
    let means: Vec<f64> = per_prefix.iter().map(|p| p.0).collect();
    let (mean, _) = mean_and_error(&means);
    let spread = if m > 1 {
        means.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (m as f64 - 1.0)
    } else {
        f64::INFINITY
    };
    // two-stage sampling (Cochran): between prefixes, with the finite-population
    // correction, plus the probes' own noise within each sampled prefix
    let (nf, mf) = (n as f64, m as f64);
    let within: f64 = per_prefix.iter().map(|p| p.1 * p.1).sum();
    let between = if m < n {
        nf * nf * (1.0 - mf / nf) * spread / mf
    } else {
        0.0
    };
    KnuthEstimate {
        nodes: known + nf * mean,
        std_error: (between + nf / mf * within).sqrt(),
        prefixes: n,
        sampled: m,
        probes: m * probes.max(2),
    }
}
