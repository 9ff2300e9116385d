//! Honesty of order studies, measured on boards whose trees are counted exactly under
//! every candidate order: repeated studies (different seeds) of each board, and
//!
//! - coverage: how often an order's stated 95% interval holds its exact count, and how
//!   often its "at least" bound is above it;
//! - ranking: for every pair of orders whose intervals do not overlap, whether the study
//!   orders them as their exact counts do; and for every pair whose exact counts differ
//!   by more than 10%, whether the means order them so.
//!
//! The figures in docs/benchmarks.md ("Order studies") come from
//!
//! `cargo bench -p e2fleet-engine --bench study -- [--studies N] [--particles P] [--rounds R] [--only NAME]`
//!
//! (the same probes and merge a fleet study runs: `e2fleet_engine::search::estimate::probe`).

use std::time::Instant;

use e2fleet_engine::formats::{LoadOptions, load_file};
use e2fleet_engine::plan::SearchPlan;
use e2fleet_engine::search::estimate::probe::local_study;
use e2fleet_engine::testing::count_tree;
use e2fleet_engine::{FillOrder, OrderSpec};

/// The boards: (name, file under `puzzles/`).
const BOARDS: &[(&str, &str)] = &[
    ("brendan 5x5 set 1", "brendan/set1/pieces_05x05.txt"),
    ("brendan 5x5 set 2", "brendan/set2/pieces_05x05.txt"),
    ("brendan 6x6 set 1", "brendan/set1/pieces_06x06.txt"),
    ("brendan 6x6 set 2", "brendan/set2/pieces_06x06.txt"),
];

/// 16x16 boards counted exactly under one order: (name, file, order, nodes). Coverage and
/// bounds only (no ranking: their other orders are not counted).
const ONE_ORDER: &[(&str, &str, &str, f64)] = &[
    (
        "bench-easy rows 0-5",
        "bench/bench-easy-rows0-5.json",
        "row-major",
        6_427_237.0,
    ),
    (
        "bench-easy",
        "bench/bench-easy.json",
        "row-major",
        3_577_121_570.0,
    ),
    (
        "bench-easy 16 hints",
        "bench/bench-easy-16-hints.json",
        "row-major",
        10_121_892_990.0,
    ),
];

/// Strata per order, as a fleet study makes them.
const MAX_STRATA: usize = 32;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let studies: u64 = flag("--studies").map_or(20, |s| s.parse().unwrap());
    let particles: usize = flag("--particles").map_or(4096, |s| s.parse().unwrap());
    let rounds: usize = flag("--rounds").map_or(16, |s| s.parse().unwrap());
    let only = flag("--only");
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../puzzles/");
    println!(
        "{studies} studies a board, {rounds} rounds of probes of {particles} boards below at most {MAX_STRATA} strata\n"
    );
    println!(
        "| board | orders | exact nodes (min - max) | intervals stated | of which hold it | lower bounds above it | separated pairs ranked as exact | pairs >10% apart ranked as exact by mean | s a study |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    one_order(studies, particles, rounds, only.as_deref(), root);
    for &(name, file) in BOARDS {
        if only.as_deref().is_some_and(|o| !name.contains(o)) {
            continue;
        }
        let puzzle = load_file(
            std::path::Path::new(&format!("{root}{file}")),
            &LoadOptions::default(),
        )
        .unwrap();
        let orders = OrderSpec::candidates(&puzzle);
        let plans: Vec<SearchPlan> = orders
            .iter()
            .map(|o| SearchPlan::new(&puzzle, &FillOrder::new(&puzzle, o).unwrap()))
            .collect();
        let truth: Vec<f64> = orders
            .iter()
            .map(|o| count_tree(&puzzle, o) as f64)
            .collect();
        for (o, t) in orders.iter().zip(&truth) {
            eprintln!("{name} {o}: {t:.0} nodes");
        }
        let (mut stated, mut held, mut above, mut total) = (0, 0, 0, 0);
        let (mut separated, mut separated_right) = (0, 0);
        let (mut apart, mut apart_right) = (0, 0);
        let started = Instant::now();
        for seed in 0..studies {
            let estimates: Vec<_> = plans
                .iter()
                .map(|p| {
                    local_study(p, particles, rounds, MAX_STRATA, seed)
                        .unwrap()
                        .tree
                })
                .collect();
            for (e, &t) in estimates.iter().zip(&truth) {
                total += 1;
                if let Some((l, h)) = e.interval(0.0) {
                    stated += 1;
                    held += usize::from(l <= t && t <= h);
                }
                above += usize::from(e.lower(0.0) > t);
            }
            for i in 0..plans.len() {
                for j in 0..plans.len() {
                    if truth[i] >= truth[j] {
                        continue;
                    }
                    // i is smaller by its exact count
                    if let (Some((_, hi)), Some((lj, _))) =
                        (estimates[i].interval(0.0), estimates[j].interval(0.0))
                        && hi < lj
                    {
                        separated += 1;
                        separated_right += 1;
                    } else if let (Some((li, _)), Some((_, hj))) =
                        (estimates[i].interval(0.0), estimates[j].interval(0.0))
                        && hj < li
                    {
                        // separated the wrong way round
                        separated += 1;
                    }
                    if truth[j] > 1.1 * truth[i] {
                        apart += 1;
                        apart_right += usize::from(estimates[i].nodes < estimates[j].nodes);
                    }
                }
            }
        }
        let seconds = started.elapsed().as_secs_f64() / studies as f64;
        let (lo, hi) = truth
            .iter()
            .fold((f64::MAX, 0f64), |(l, h), &t| (l.min(t), h.max(t)));
        println!(
            "| {name} | {} | {lo:.4e} - {hi:.4e} | {stated}/{total} | {held}/{stated} ({:.1}%) | {above}/{total} | {separated_right}/{separated} | {apart_right}/{apart} | {seconds:.1} |",
            orders.len(),
            100.0 * held as f64 / stated.max(1) as f64
        );
    }
}

/// The 16x16 boards of [`ONE_ORDER`]: intervals stated and held, bounds above the count,
/// the mean against the count and how deep every round's probes reached.
fn one_order(studies: u64, particles: usize, rounds: usize, only: Option<&str>, root: &str) {
    for &(name, file, order, truth) in ONE_ORDER {
        if only.is_some_and(|o| !name.contains(o)) {
            continue;
        }
        let puzzle = load_file(
            std::path::Path::new(&format!("{root}{file}")),
            &LoadOptions::default(),
        )
        .unwrap();
        let order = FillOrder::new(&puzzle, &order.parse::<OrderSpec>().unwrap()).unwrap();
        let plan = SearchPlan::new(&puzzle, &order);
        let (mut stated, mut held, mut above) = (0, 0, 0);
        let (mut lo, mut hi) = (f64::MAX, 0f64);
        let (mut reached, mut depths) = (usize::MAX, 0);
        let started = Instant::now();
        for seed in 0..studies {
            let e = local_study(&plan, particles, rounds, MAX_STRATA, seed)
                .unwrap()
                .tree;
            if let Some((l, h)) = e.interval(0.0) {
                stated += 1;
                held += usize::from(l <= truth && truth <= h);
            }
            above += usize::from(e.lower(0.0) > truth);
            (lo, hi) = (lo.min(e.nodes / truth), hi.max(e.nodes / truth));
            (reached, depths) = (reached.min(e.reached), e.depths);
        }
        let seconds = started.elapsed().as_secs_f64() / studies as f64;
        println!(
            "| {name} (one order; mean / count {lo:.3} - {hi:.3}; every round reached depth {reached} of {depths}) | 1 | {truth:.4e} | {stated}/{studies} | {held}/{stated} | {above}/{studies} | - | - | {seconds:.1} |"
        );
    }
}
