//! Integration tests of the engine crate: known counts, brute-force differentials,
//! exact accounting (splits, budgets, continuations), formats, bad input, the verifier.

mod accounting;
mod bad_input;
mod certificate;
mod compiled;
mod estimate;
mod formats;
mod known_counts;
mod lanes;
mod properties;
mod suite;

use std::path::PathBuf;

use e2fleet_engine::formats::{LoadOptions, load_file};
use e2fleet_engine::plan::SearchPlan;
use e2fleet_engine::search::{NoControl, RunOptions, Walker};
use e2fleet_engine::{FillOrder, OrderSpec, Puzzle, Unit, UnitResult};

/// Path of a file under the repository's `puzzles/`.
pub fn puzzle_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../puzzles")
        .join(rel)
}

/// Loads a puzzle from `puzzles/` with default options.
pub fn load(rel: &str) -> Puzzle {
    load_file(&puzzle_path(rel), &LoadOptions::default()).expect("puzzle loads")
}

/// Walks the whole tree of `puzzle` in `order`.
pub fn whole_tree(puzzle: &Puzzle, order: &OrderSpec) -> UnitResult {
    let order = FillOrder::new(puzzle, order).expect("order");
    let plan = SearchPlan::new(puzzle, &order);
    Walker::new(&plan)
        .run(&Unit::root(), RunOptions::default(), &mut NoControl)
        .expect("root unit runs")
}
