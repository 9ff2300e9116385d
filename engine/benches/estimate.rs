//! Coverage of the tree estimates on boards whose trees are counted exactly: for each
//! board and fill order, repeated estimates with different seeds, and how often the
//! stated 95% interval holds the count, how often the "at least" bound is above it (it
//! must not be, beyond 5%), the estimate's spread and its cost. The figures in
//! docs/benchmarks.md ("Tree estimates") come from
//!
//! `cargo bench -p e2fleet-engine --bench estimate -- [--seeds N] [--particles P] [--runs R] [--only NAME]`
//!
//! and, for a board of unknown size, `-- --puzzle FILE [--order SPEC] [--seeds N]`.

use std::time::Instant;

use e2fleet_engine::formats::{LoadOptions, load_file};
use e2fleet_engine::plan::SearchPlan;
use e2fleet_engine::search::estimate::knuth::estimate_split;
use e2fleet_engine::search::estimate::{Effort, estimate_tree};
use e2fleet_engine::search::{NoControl, RunOptions, Walker};
use e2fleet_engine::unit::Unit;
use e2fleet_engine::{FillOrder, OrderSpec};

/// Boards with exactly counted trees: (name, file, order, nodes; 0: counted here by the
/// reference walker first).
const BOARDS: &[(&str, &str, &str, f64)] = &[
    (
        "brendan 5x5 set 1",
        "brendan/set1/pieces_05x05.txt",
        "row-major",
        113_211.0,
    ),
    (
        "brendan 5x5 set 1, cols:br",
        "brendan/set1/pieces_05x05.txt",
        "cols:br",
        0.0,
    ),
    (
        "brendan 6x6 set 1, cols:br",
        "brendan/set1/pieces_06x06.txt",
        "cols:br",
        0.0,
    ),
    (
        "brendan 6x6 set 1, comb:2",
        "brendan/set1/pieces_06x06.txt",
        "comb:2",
        0.0,
    ),
    (
        "brendan 6x6 set 1",
        "brendan/set1/pieces_06x06.txt",
        "row-major",
        69_284_103.0,
    ),
    (
        "brendan 6x6 set 2",
        "brendan/set2/pieces_06x06.txt",
        "row-major",
        44_024_849.0,
    ),
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

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let seeds: u64 = flag("--seeds").map_or(20, |s| s.parse().unwrap());
    let effort = Effort {
        particles: flag("--particles").map_or(Effort::JOB.particles, |s| s.parse().unwrap()),
        runs: flag("--runs").map_or(Effort::JOB.runs, |s| s.parse().unwrap()),
    };
    let only = flag("--only");
    if let Some(file) = flag("--puzzle") {
        // one board of unknown size: what the coordinator would say of it
        let puzzle = load_file(std::path::Path::new(&file), &LoadOptions::default()).unwrap();
        let spec = flag("--order").unwrap_or_else(|| "row-major".into());
        let order = FillOrder::new(&puzzle, &spec.parse::<OrderSpec>().unwrap()).unwrap();
        let plan = SearchPlan::new(&puzzle, &order);
        for seed in 0..seeds {
            let started = Instant::now();
            let e = estimate_tree(&plan, effort, seed);
            println!(
                "{file} {spec} seed {seed}: mean {:.3e}, at least {:.3e}, interval {:?}, {:.2} s; {}",
                e.nodes,
                e.at_least,
                e.interval(0.0),
                started.elapsed().as_secs_f64(),
                e.method()
            );
        }
        return;
    }
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../puzzles/");
    println!(
        "effort: {} particles x {} runs; {seeds} estimates a board\n",
        effort.particles, effort.runs
    );
    println!(
        "| board | nodes | depths reached by every run (of) | intervals stated | of which hold it | lower bounds above it | mean / truth (min - max) | s an estimate | Knuth (old) mean / truth (min - max) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for &(name, file, order, truth) in BOARDS {
        if only.as_deref().is_some_and(|o| !name.contains(o)) {
            continue;
        }
        let puzzle = load_file(
            std::path::Path::new(&format!("{root}{file}")),
            &LoadOptions::default(),
        )
        .unwrap();
        let order = FillOrder::new(&puzzle, &order.parse::<OrderSpec>().unwrap()).unwrap();
        let plan = SearchPlan::new(&puzzle, &order);
        let truth = if truth > 0.0 {
            truth
        } else {
            Walker::new(&plan)
                .run(&Unit::root(), RunOptions::default(), &mut NoControl)
                .unwrap()
                .committed as f64
        };
        let (mut stated, mut held, mut above) = (0, 0, 0);
        let (mut lo, mut hi, mut sum) = (f64::MAX, 0f64, 0.0);
        let (mut reached, mut depths) = (usize::MAX, 0);
        let (mut klo, mut khi, mut ksum) = (f64::MAX, 0f64, 0.0);
        let started = Instant::now();
        for seed in 0..seeds {
            let e = estimate_tree(&plan, effort, seed);
            if let Some((l, h)) = e.interval(0.0) {
                stated += 1;
                if l <= truth && truth <= h {
                    held += 1;
                }
            }
            if e.lower(0.0) > truth {
                above += 1;
            }
            (reached, depths) = (reached.min(e.reached), e.depths);
            let r = e.nodes / truth;
            (lo, hi, sum) = (lo.min(r), hi.max(r), sum + r);
        }
        let seconds = started.elapsed().as_secs_f64() / seeds as f64;
        for seed in 0..seeds {
            let split = e2fleet_engine::search::split_depth_for(&plan, 64);
            let k = estimate_split(&plan, split, 200, 50, seed).nodes / truth;
            (klo, khi, ksum) = (klo.min(k), khi.max(k), ksum + k);
        }
        let n = seeds as f64;
        println!(
            "| {name} | {truth:.0} | {reached} ({depths}) | {stated}/{seeds} | {held}/{stated} | {above}/{seeds} | {:.3} ({lo:.3} - {hi:.3}) | {seconds:.2} | {:.2e} ({klo:.2e} - {khi:.2e}) |",
            sum / n,
            ksum / n
        );
    }
}
