//! Probe units: the population estimator as fleet work, and what a study makes of them.
//!
//! A study estimates one tree per candidate fill order. Its tree is the exact enumeration
//! of the order's first `k` depths (its strata: every filling of those depths) plus, for
//! each stratum, the subtree below it. A **probe unit** is one population run
//! ([`super::population`]) of a fixed number of boards below one stratum, from a fixed
//! seed. Everything random in it comes from the seed, so two machines that run the same
//! probe produce the same result, and a probe is cross-checked like any counting unit.
//!
//! **A probe's result is integers.** Every board of a run carries the same weight: the
//! run starts from one board of weight 1; children inherit their parent's weight; a
//! resampled depth gives every survivor the same share. So if `K_d` children are listed
//! at depth `d` and the population holds `P` boards, the depth's estimate is `w_d K_d`,
//! where `w` starts at 1 and becomes `w K_d / P` after each depth with `K_d > P` (where it
//! was resampled). A probe reports the `K_d` (in [`UnitResult::nodes_by_depth`], at their
//! absolute depths) and the coordinator turns them into estimates with [`probe_nodes`]:
//! the report is exact, digestible and checkable, and no floating point crosses the wire.
//!
//! **Merging.** A study runs the same number of probes per stratum in rounds; round `r`
//! takes the `r`-th probe of every stratum, so it is a stratified run over the whole
//! tree: the enumeration's exact nodes plus one estimate per stratum. Rounds are
//! independent unbiased estimates of the tree, so everything [`super::TreeEstimate`] says
//! of runs holds of rounds ([`study_estimate`]): the mean and standard error per depth and
//! in total, the "at least" bound (Markov over the rounds' order statistics) and the 95%
//! interval when the tail has been seen. Stratifying removes the variance between the
//! top subtrees, which a single run from the root pays for.

use crate::model::{Placement, pack, rotate};
use crate::plan::SearchPlan;
use crate::search::{UnitError, Walker};
use crate::unit::{StopReason, UnitResult};

use super::population::{Population, SEEN_DEPTHS};
use super::{Rng, TreeEstimate, lower_bound, mean_and_error, tail_seen};

/// The largest population a probe may ask for (a 16x16 board and its used pieces are
/// ~1.3 KiB a board, twice over while a depth is built: ~45 MiB at this size).
pub const MAX_PARTICLES: usize = 16_384;

/// Runs one probe: a population of `particles` boards from `prefix` (a legal filling of
/// the plan's first depths) to the bottom, with every random choice drawn from `seed`.
/// The result lists the children the population found at each absolute depth (see the
/// module docs); its `deepest` board is the prefix.
pub fn probe(
    plan: &SearchPlan,
    prefix: &[Placement],
    particles: usize,
    seed: u64,
) -> Result<UnitResult, UnitError> {
    probe_run(plan, prefix, particles, seed).map(|(result, _)| result)
}

/// [`probe`], with the estimate the population made of each depth below the prefix.
fn probe_run(
    plan: &SearchPlan,
    prefix: &[Placement],
    particles: usize,
    seed: u64,
) -> Result<(UnitResult, Vec<f64>), UnitError> {
    Walker::new(plan).check_path(prefix)?;
    let particles = particles.clamp(1, MAX_PARTICLES);
    let mut board = plan.initial_board.clone();
    let mut used = plan.initial_used.clone();
    for p in prefix {
        board[p.pos as usize] = pack(rotate(plan.piece_colours[p.piece as usize], p.rot));
        used[p.piece as usize] = 1;
    }
    let start = prefix.len();
    let mut population = Population::new(plan, particles);
    population.reset(&board, &used);
    let mut by_depth = vec![0.0; plan.len() - start];
    population.run(start, &mut Rng::new(seed), &mut by_depth);
    let mut nodes_by_depth = vec![0u64; plan.len()];
    for (i, &k) in population.listed().iter().enumerate() {
        nodes_by_depth[start + i] = k;
    }
    let result = UnitResult {
        committed: nodes_by_depth.iter().sum(),
        nodes_by_depth,
        solutions_count: 0,
        solutions: Vec::new(),
        max_depth: start,
        deepest: prefix.to_vec(),
        cursor: None,
        stop: Some(StopReason::Finished),
    };
    Ok((result, by_depth))
}

/// A study's strata for one order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Strata {
    /// The depth `k` the study enumerates to.
    pub depth: usize,
    /// The enumeration's nodes per absolute depth (index 0: depth 1), counted exactly.
    pub exact: Vec<u64>,
    /// The fillings of the first `k` depths, each a stratum.
    pub prefixes: Vec<Vec<Placement>>,
}

/// A study's strata for one order. `k` is the deepest
/// depth (at most [`MAX_STRATA_DEPTH`]) whose fillings number at most `max_strata`; 0 (one
/// stratum, the root) when even depth 1 has more. A tree that ends within `k` depths has no
/// strata: the enumeration counted it.
pub fn strata(plan: &SearchPlan, max_strata: usize) -> Result<Strata, UnitError> {
    let mut chosen = Strata {
        depth: 0,
        exact: vec![0u64; plan.len()],
        prefixes: vec![Vec::new()],
    };
    for k in 1..=MAX_STRATA_DEPTH.min(plan.len()) {
        let mut prefixes = Vec::new();
        let mut walker = Walker::new(plan);
        let Some(nodes) = walker.enumerate_bounded(&[], k, u64::MAX, max_strata, &mut |p| {
            prefixes.push(p.to_vec())
        })?
        else {
            break;
        };
        if prefixes.len() > max_strata {
            break;
        }
        let mut exact = nodes;
        exact.resize(plan.len(), 0);
        let done = prefixes.is_empty() || k == plan.len();
        chosen = Strata {
            depth: k,
            exact,
            prefixes: if k == plan.len() {
                Vec::new()
            } else {
                prefixes
            },
        };
        if done {
            break;
        }
    }
    Ok(chosen)
}

/// The deepest depth a study enumerates to for its strata.
pub const MAX_STRATA_DEPTH: usize = 8;

/// The seed of probe `round` of stratum `stratum` in a study seeded `seed`.
pub fn probe_seed(seed: u64, stratum: u64, round: u64) -> u64 {
    let mut rng =
        Rng::new(seed ^ stratum.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ round.rotate_left(32));
    rng.next()
}

/// A whole study of one order on this machine: `rounds` probes of `particles` boards
/// below each of at most `max_strata` strata, merged. What the fleet does with probe
/// units, in one process (for benchmarks, tests and a quick look before a fleet study).
pub fn local_study(
    plan: &SearchPlan,
    particles: usize,
    rounds: usize,
    max_strata: usize,
    seed: u64,
) -> Result<StudyEstimate, UnitError> {
    let Strata {
        depth: k,
        exact,
        prefixes,
    } = strata(plan, max_strata)?;
    let mut all = Vec::with_capacity(prefixes.len());
    for (j, prefix) in prefixes.iter().enumerate() {
        let mut probes = Vec::with_capacity(rounds);
        for r in 0..rounds {
            let result = probe(
                plan,
                prefix,
                particles,
                probe_seed(seed, j as u64, r as u64),
            )?;
            probes.push(probe_nodes(&result.nodes_by_depth, k, particles));
        }
        all.push(probes);
    }
    Ok(study_estimate(&exact, &all, particles))
}

/// The nodes a probe's counts stand for at each absolute depth (index `d - 1`: depth `d`),
/// for a probe of `particles` boards below a prefix `prefix_depth` deep.
pub fn probe_nodes(counts: &[u64], prefix_depth: usize, particles: usize) -> Vec<f64> {
    let particles = particles.max(1) as f64;
    let mut out = vec![0.0; counts.len()];
    let mut weight = 1.0;
    for d in prefix_depth.min(counts.len())..counts.len() {
        let k = counts[d] as f64;
        if k == 0.0 {
            break;
        }
        out[d] = weight * k;
        if k > particles {
            weight *= k / particles;
        }
    }
    out
}

/// Checks a reported probe against its unit before it is recorded: a probe of
/// `particles` boards below `prefix` on a tree `depths` deep, with at most `pieces` pieces
/// in four rotations to choose from at a cell.
pub fn check_probe(
    result: &UnitResult,
    prefix: &[Placement],
    depths: usize,
    particles: usize,
    pieces: usize,
) -> Result<(), String> {
    let counts = &result.nodes_by_depth;
    if counts.len() != depths {
        return Err(format!(
            "a probe lists children at {} depths; the tree has {depths}",
            counts.len()
        ));
    }
    if let Some(d) = counts[..prefix.len().min(depths)]
        .iter()
        .position(|&k| k != 0)
    {
        return Err(format!(
            "a probe below a prefix {} deep lists children at depth {}",
            prefix.len(),
            d + 1
        ));
    }
    let fan = 4 * pieces as u64;
    let mut boards = 1u64;
    let mut ended = false;
    for (d, &k) in counts.iter().enumerate().skip(prefix.len()) {
        if ended && k != 0 {
            return Err(format!(
                "a probe lists children at depth {} after a depth with none",
                d + 1
            ));
        }
        if k > boards.saturating_mul(fan) {
            return Err(format!(
                "a probe lists {k} children at depth {} from {boards} boards of at most {fan} candidates",
                d + 1
            ));
        }
        ended = k == 0;
        boards = k.min(particles as u64);
    }
    let sum: u64 = counts.iter().sum();
    if result.committed != sum {
        return Err(format!(
            "a probe's total {} is not the sum of its depths {sum}",
            result.committed
        ));
    }
    if result.solutions_count != 0 || !result.solutions.is_empty() || result.cursor.is_some() {
        return Err("a probe reports no solutions and no cursor".into());
    }
    if result.max_depth != prefix.len() || result.deepest != prefix {
        return Err("a probe's deepest board is its prefix".into());
    }
    Ok(())
}

/// One stratum's probes: the nodes each stands for per absolute depth
/// ([`probe_nodes`]), in the order they were run.
pub type StratumProbes = Vec<Vec<f64>>;

/// A study's estimate of one order's tree.
#[derive(Clone, Debug, PartialEq)]
pub struct StudyEstimate {
    /// The estimate, over complete rounds (its `runs`; `by_depth` is indexed by absolute
    /// depth, index 0: depth 1).
    pub tree: TreeEstimate,
    /// The standard error of each depth's mean.
    pub by_depth_error: Vec<f64>,
}

/// Merges an order's probes into its tree's estimate: `exact` is the enumeration's nodes
/// per absolute depth (every depth down to the strata), `strata` each stratum's probes,
/// `particles` each probe's population. Only complete rounds count (as many as the
/// stratum with the fewest probes has); with no strata (the enumeration was the whole
/// tree), the count is exact.
pub fn study_estimate(exact: &[u64], strata: &[StratumProbes], particles: usize) -> StudyEstimate {
    let depths = exact.len();
    let exact_nodes: Vec<f64> = exact.iter().map(|&n| n as f64).collect();
    if strata.is_empty() {
        let total = exact_nodes.iter().sum();
        return StudyEstimate {
            tree: TreeEstimate::exact(total, exact_nodes),
            by_depth_error: vec![0.0; depths],
        };
    }
    let rounds = strata.iter().map(Vec::len).min().unwrap_or(0);
    let mut totals = Vec::with_capacity(rounds);
    let mut per_depth: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); depths];
    let mut reached = depths;
    let mut expansions = 0.0;
    for r in 0..rounds {
        let mut round = exact_nodes.clone();
        let mut deepest = 0;
        for probes in strata {
            let nodes = &probes[r];
            for (sum, n) in round.iter_mut().zip(nodes) {
                *sum += n;
            }
            deepest = deepest.max(nodes.iter().rposition(|&n| n > 0.0).map_or(0, |d| d + 1));
            expansions += nodes.iter().filter(|&&n| n > 0.0).count() as f64 * particles as f64;
        }
        reached = reached.min(deepest.max(exact.iter().rposition(|&n| n > 0).map_or(0, |d| d + 1)));
        totals.push(round.iter().sum::<f64>());
        for (d, n) in round.into_iter().enumerate() {
            per_depth[d].push(n);
        }
    }
    let mut by_depth = Vec::with_capacity(depths);
    let mut by_depth_error = Vec::with_capacity(depths);
    for xs in &per_depth {
        if xs.is_empty() {
            by_depth.push(0.0);
            by_depth_error.push(f64::INFINITY);
            continue;
        }
        let (mean, se) = mean_and_error(xs);
        by_depth.push(mean);
        by_depth_error.push(if se.is_finite() { se } else { f64::INFINITY });
    }
    let (nodes, std_error) = if rounds == 0 {
        (exact_nodes.iter().sum(), f64::INFINITY)
    } else {
        mean_and_error(&totals)
    };
    let exact_sum: f64 = exact_nodes.iter().sum();
    StudyEstimate {
        tree: TreeEstimate {
            nodes,
            std_error,
            at_least: lower_bound(&totals).max(exact_sum),
            tail_seen: rounds > 0
                && tail_seen(&totals)
                && reached * SEEN_DEPTHS.1 >= depths * SEEN_DEPTHS.0,
            by_depth,
            runs: rounds,
            particles,
            expansions: expansions as u64,
            exact: exact_sum,
            reached,
            depths,
        },
        by_depth_error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FillOrder;
    use crate::formats::{LoadOptions, load_file};

    /// Brendan Owen's set 1 board `side` x `side`, row-major.
    fn plan(side: usize) -> SearchPlan {
        let path = format!(
            "{}/../puzzles/brendan/set1/pieces_{side:02}x{side:02}.txt",
            env!("CARGO_MANIFEST_DIR")
        );
        let puzzle = load_file(std::path::Path::new(&path), &LoadOptions::default()).unwrap();
        SearchPlan::new(&puzzle, &FillOrder::row_major(&puzzle))
    }

    #[test]
    fn a_probes_counts_stand_for_what_the_population_estimated() {
        let plan = plan(5);
        let Strata {
            depth: k, prefixes, ..
        } = strata(&plan, 16).unwrap();
        for seed in 0..6 {
            for particles in [1, 7, 64, 512] {
                for prefix in [&[][..], &prefixes[seed as usize % prefixes.len()][..]] {
                    let (result, by_depth) = probe_run(&plan, prefix, particles, seed).unwrap();
                    let nodes = probe_nodes(&result.nodes_by_depth, prefix.len(), particles);
                    for (d, n) in by_depth.iter().enumerate() {
                        let got = nodes[prefix.len() + d];
                        assert!(
                            (got - n).abs() <= 1e-9 * n.max(1.0),
                            "depth {d}: {got} vs {n}"
                        );
                    }
                    assert_eq!(
                        probe(&plan, prefix, particles, seed).unwrap(),
                        result,
                        "a probe is reproducible from its seed"
                    );
                    let pieces = plan.initial_used.len();
                    check_probe(&result, prefix, plan.len(), particles, pieces).unwrap();
                }
            }
        }
        assert!(k >= 1);
    }

    #[test]
    fn a_probe_that_does_not_add_up_or_claims_too_much_is_refused() {
        let plan = plan(5);
        let pieces = plan.initial_used.len();
        let good = probe(&plan, &[], 64, 3).unwrap();
        let check = |r: &UnitResult| check_probe(r, &[], plan.len(), 64, pieces);
        check(&good).unwrap();
        let mut r = good.clone();
        r.committed += 1;
        assert!(check(&r).unwrap_err().contains("sum"));
        let mut r = good.clone();
        r.nodes_by_depth[1] = 1_000_000;
        r.committed = r.nodes_by_depth.iter().sum();
        assert!(check(&r).unwrap_err().contains("candidates"));
        let mut r = good.clone();
        let last = r.nodes_by_depth.len() - 1;
        r.nodes_by_depth[last - 1] = 0;
        r.nodes_by_depth[last] = 1;
        r.committed = r.nodes_by_depth.iter().sum();
        assert!(check(&r).is_err());
        let mut r = good.clone();
        r.nodes_by_depth.pop();
        assert!(check(&r).unwrap_err().contains("depths"));
        let mut r = good;
        r.solutions_count = 1;
        assert!(check(&r).is_err());
    }

    #[test]
    fn a_study_of_a_tree_its_probes_hold_whole_is_exact() {
        // 4x4: every probe of 100,000 boards holds its stratum's whole subtree
        let plan = plan(4);
        let e = local_study(&plan, 100_000.min(MAX_PARTICLES), 2, 16, 1).unwrap();
        let truth = Walker::new(&plan)
            .run(
                &crate::unit::Unit::root(),
                Default::default(),
                &mut crate::search::NoControl,
            )
            .unwrap();
        assert_eq!(e.tree.nodes, truth.committed as f64);
        assert_eq!(e.tree.std_error, 0.0);
        for (d, &n) in truth.nodes_by_depth.iter().enumerate() {
            assert_eq!(e.tree.by_depth[d], n as f64, "depth {}", d + 1);
        }
    }

    #[test]
    fn a_study_of_brendan_5x5_holds_its_count() {
        let plan = plan(5);
        let truth = Walker::new(&plan)
            .run(
                &crate::unit::Unit::root(),
                Default::default(),
                &mut crate::search::NoControl,
            )
            .unwrap()
            .committed as f64;
        let mut held = 0;
        for seed in 0..10 {
            let e = local_study(&plan, 256, 8, 32, seed).unwrap();
            assert!(e.tree.at_least <= truth);
            if let Some((lo, hi)) = e.tree.interval(0.0) {
                held += usize::from((lo..=hi).contains(&truth));
            }
        }
        assert!(held >= 8, "{held}/10 intervals hold the count");
    }
}
