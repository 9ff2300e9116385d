//! How big is a tree nobody has walked?
//!
//! Every estimator here counts what the walk counts: committed placements below a
//! starting node, depth by depth, with the same plan and the same tests as the engines.
//!
//! - [`estimate_tree`] and [`estimate_below`] run a **population** of weighted partial
//!   boards down the tree (sequential importance resampling, "go with the winners"):
//!   at each depth every board's children are listed, their weights (the parent's) add
//!   up to an unbiased estimate of that depth's nodes, and when there are more children
//!   than the population holds, it is resampled systematically in proportion to weight,
//!   each survivor carrying the total's equal share. The deep branches that a single
//!   random probe almost never reaches stay in the population as long as any board has
//!   a child. Several independent runs give the spread.
//! - [`knuth::estimate_split`] is Knuth's random-probe estimator (Knuth 1975) below a
//!   sample of a split's prefixes: each probe a single path. Kept as the baseline the
//!   population estimator is measured against: on hard 16x16 trees almost every probe
//!   dies early, and the mean of a few thousand probes is orders of magnitude low.
//!
//! **What is stated.** Both estimators are unbiased, but on heavy-tailed trees the mean of
//! a few runs is usually below the truth and a normal interval built from their spread
//! says nothing. So an estimate states two things of different strength:
//! - an **"at least"** bound that holds at 95% whatever the tree: each run is a
//!   non-negative unbiased estimate `X` of the size `N`, so `P(X >= cN) <= 1/c` (Markov);
//!   with `R` independent runs, the chance that `k` of them reach `cN` is at most the
//!   binomial tail `P(Bin(R, 1/c) >= k)`. With `k` half the runs and `c` set so that tail
//!   is 5%, the `k`-th largest run divided by `c` is below `N` in at least 95% of
//!   estimates ([`TreeEstimate::at_least`]);
//! - a **95% interval** (mean +- Student's t x standard error of the runs) only when the
//!   tail has been seen: every run's population reached three quarters of the tree's
//!   depths ([`population::SEEN_DEPTHS`]), and the runs agree (a relative standard error of at most [`TAIL_SEEN_RSE`], no run holding
//!   more than [`TAIL_SEEN_SHARE`] of the sum). Otherwise the estimate says "at least"
//!   and gives its mean as a guess. A population that died out at depth 48 of 240 knows
//!   nothing of the depths below, and that is where a hard board keeps its mass: bench-easy
//!   without two of its hints has ~2.8x bench-easy's nodes, all of the difference in
//!   branches no sample reaches, and every estimate of it agrees on bench-easy's size.
//!
//! Coverage of both, measured on boards whose trees are counted exactly, is in
//! `docs/benchmarks.md` ("Tree estimates") and `cargo bench -p e2fleet-engine --bench
//! estimate` reproduces it.

pub mod improve;
pub mod knuth;
pub mod population;
pub mod probe;

pub use population::{Effort, estimate_below, estimate_tree};

use crate::plan::{SENTINEL, SearchPlan, candidate_piece};

/// The largest relative standard error (standard error / mean) of the runs at which the
/// two-sided interval is stated.
pub const TAIL_SEEN_RSE: f64 = 0.2;

/// The largest share of the runs' sum one run may hold for the two-sided interval to be
/// stated (one run holding most of the sum means the tail was seen once, by luck).
pub const TAIL_SEEN_SHARE: f64 = 0.35;

/// The confidence of every bound and interval stated.
pub const CONFIDENCE: f64 = 0.95;

/// An estimate of a tree's size (nodes below a starting node, the walk's nodes).
#[derive(Clone, Debug, PartialEq)]
pub struct TreeEstimate {
    /// The mean of the runs: unbiased, and on heavy-tailed trees usually below the truth.
    pub nodes: f64,
    /// Standard error of `nodes` (from the runs' spread).
    pub std_error: f64,
    /// A bound the size is above at 95%, whatever its tail (see the module docs).
    pub at_least: f64,
    /// Whether the runs agree well enough for a two-sided interval.
    pub tail_seen: bool,
    /// The mean estimate of the nodes at each depth below the start (index 0: the
    /// start's children).
    pub by_depth: Vec<f64>,
    /// Independent runs.
    pub runs: usize,
    /// Boards in each run's population.
    pub particles: usize,
    /// Boards expanded in all (the estimate's cost, in the walk's own currency).
    pub expansions: u64,
    /// Nodes counted exactly (an enumeration's, or the tree itself when it was small
    /// enough to count), included in `nodes` and `at_least`.
    pub exact: f64,
    /// The deepest depth below the start every run reached.
    pub reached: usize,
    /// The depths below the start.
    pub depths: usize,
}

impl TreeEstimate {
    /// An exactly known size.
    pub fn exact(nodes: f64, by_depth: Vec<f64>) -> TreeEstimate {
        TreeEstimate {
            nodes,
            std_error: 0.0,
            at_least: nodes,
            tail_seen: true,
            by_depth: by_depth.clone(),
            runs: 0,
            particles: 0,
            expansions: 0,
            exact: nodes,
            reached: by_depth.iter().rposition(|&n| n > 0.0).map_or(0, |d| d + 1),
            depths: by_depth.len(),
        }
    }

    /// Whether the size is known exactly (no sampling).
    pub fn is_exact(&self) -> bool {
        self.runs == 0
    }

    /// The 95% interval, never below `floor` (nodes already known to exist): `None` when
    /// the runs have not seen the tail and only [`TreeEstimate::lower`] can be said.
    pub fn interval(&self, floor: f64) -> Option<(f64, f64)> {
        if self.is_exact() {
            return Some((self.nodes.max(floor), self.nodes.max(floor)));
        }
        if !self.tail_seen {
            return None;
        }
        let half = student_t95(self.runs.saturating_sub(1)) * self.std_error;
        let low = (self.nodes - half).max(self.at_least).max(floor);
        Some((low, (self.nodes + half).max(floor)))
    }

    /// What can be said for certain at 95%: at least this many nodes (and never fewer
    /// than `floor`).
    pub fn lower(&self, floor: f64) -> f64 {
        self.at_least.max(floor)
    }

    /// The best single figure: the mean, never below `floor`.
    pub fn point(&self, floor: f64) -> f64 {
        self.nodes.max(floor)
    }

    /// How it was made, in a sentence.
    pub fn method(&self) -> String {
        if self.is_exact() {
            return "counted exactly".into();
        }
        let spread = if self.tail_seen {
            "every run saw the bottom of the tree and they agree: the 95% interval is from their spread".to_string()
        } else if self.reached * population::SEEN_DEPTHS.1 < self.depths * population::SEEN_DEPTHS.0
        {
            format!(
                "the runs died out by depth {} of {}, so the tree's mass may lie in deeper branches they never reached: only a lower bound is stated, and the mean is a guess",
                self.reached, self.depths
            )
        } else {
            "the runs disagree (the tree's mass is in rare branches they have not all seen): only a lower bound is stated, and the mean is a guess".to_string()
        };
        format!(
            "{} independent runs of {} weighted partial boards resampled depth by depth ({:.2e} boards expanded); {spread}",
            self.runs, self.particles, self.expansions as f64
        )
    }
}

/// A bound a size is above with probability at least [`CONFIDENCE`], from `runs`
/// (independent, non-negative, unbiased estimates of it): the runs' order statistics and
/// Markov's inequality, as the module docs set out.
pub fn lower_bound(runs: &[f64]) -> f64 {
    let r = runs.len();
    if r == 0 {
        return 0.0;
    }
    let k = r.div_ceil(2);
    let c = markov_factor(r, k, 1.0 - CONFIDENCE);
    let mut sorted = runs.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    sorted[k - 1] / c
}

/// The smallest `c` with `P(Bin(r, 1/c) >= k) <= alpha`.
pub fn markov_factor(r: usize, k: usize, alpha: f64) -> f64 {
    // the tail grows with p: bisect on p
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for _ in 0..100 {
        let p = (lo + hi) / 2.0;
        if binomial_tail(r, k, p) <= alpha {
            lo = p;
        } else {
            hi = p;
        }
    }
    1.0 / lo.max(f64::MIN_POSITIVE)
}

/// `P(Bin(n, p) >= k)`.
fn binomial_tail(n: usize, k: usize, p: f64) -> f64 {
    let mut sum = 0.0;
    for i in k..=n {
        sum += (ln_choose(n, i) + i as f64 * p.ln() + (n - i) as f64 * (1.0 - p).ln()).exp();
    }
    sum
}

fn ln_choose(n: usize, k: usize) -> f64 {
    (1..=k).map(|i| ((n - k + i) as f64 / i as f64).ln()).sum()
}

/// The two-sided 95% quantile of Student's t with `df` degrees of freedom.
pub fn student_t95(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => TABLE[df - 1],
        _ => 1.96 + 2.4 / df as f64,
    }
}

/// Mean and standard error of `xs` (infinite with fewer than two).
pub(crate) fn mean_and_error(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    if xs.len() < 2 {
        return (mean, f64::INFINITY);
    }
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, (var / n).sqrt())
}

/// Whether runs agree well enough for a two-sided interval (see the module docs).
pub(crate) fn tail_seen(runs: &[f64]) -> bool {
    let (mean, se) = mean_and_error(runs);
    let sum: f64 = runs.iter().sum();
    let largest = runs.iter().copied().fold(0.0, f64::max);
    runs.len() >= 8 && mean > 0.0 && se / mean <= TAIL_SEEN_RSE && largest <= TAIL_SEEN_SHARE * sum
}

/// A small deterministic generator (SplitMix64): estimates are reproducible from a seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.unit() * n as f64) as usize % n
    }
}

/// The candidates the walk would accept at `depth` on `board` with `used`, into `out`.
#[inline]
fn children(plan: &SearchPlan, board: &[u32], used: &[u8], depth: usize, out: &mut Vec<u64>) {
    out.clear();
    let mut i = plan.bucket_start(board, depth);
    let (mask, expect) = (
        plan.depths[depth].extra_mask,
        plan.extra_expect(board, depth),
    );
    loop {
        let c = plan.candidates[i];
        i += 1;
        if c == SENTINEL {
            break;
        }
        if used[candidate_piece(c)] == 0 && (c as u32 & mask) == expect {
            out.push(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_markov_factor_makes_the_binomial_tail_five_percent() {
        for (r, k) in [(1, 1), (8, 4), (16, 8), (32, 16)] {
            let c = markov_factor(r, k, 0.05);
            assert!(binomial_tail(r, k, 1.0 / c) <= 0.05 + 1e-9);
            assert!(binomial_tail(r, k, 1.0 / (c * 0.99)) > 0.05);
        }
        // one run: Markov itself, X / 20
        assert!((markov_factor(1, 1, 0.05) - 20.0).abs() < 1e-6);
    }

    #[test]
    fn a_lower_bound_of_a_skewed_estimator_holds_at_least_95_percent_of_the_time() {
        // runs that are 1000 with probability 1/1000 and 0 otherwise: mean 1
        let mut rng = Rng::new(7);
        let mut above = 0;
        for _ in 0..2000 {
            let runs: Vec<f64> = (0..16)
                .map(|_| if rng.below(1000) == 0 { 1000.0 } else { 0.0 })
                .collect();
            if lower_bound(&runs) > 1.0 {
                above += 1;
            }
        }
        assert!(above <= 100, "{above} of 2000 bounds above the mean");
    }

    #[test]
    fn t_quantiles_fall_towards_the_normal() {
        assert!(student_t95(1) > student_t95(2));
        assert!(student_t95(30) > student_t95(31));
        assert!((student_t95(1000) - 1.96).abs() < 0.01);
    }
}
