//! Integration tests of the engine crate: known counts, brute-force differentials,
//! exact accounting (splits, budgets, continuations), formats, bad input, the verifier.

mod accounting;
mod bad_input;
mod certificate;
mod codegen;
mod compiled;
mod estimate;
mod formats;
mod known_counts;
mod lanes;
mod properties;
mod suite;

use std::path::PathBuf;

use e2fleet_engine::engine::{Engine, ReferenceEngine};
use e2fleet_engine::formats::{LoadOptions, load_file};
use e2fleet_engine::plan::SearchPlan;
use e2fleet_engine::search::{NoControl, RunOptions, Walker};
use e2fleet_engine::testing::{Rng, order_of_kind, random_puzzle};
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

/// Options for differential runs: `budget`, and up to 50 solution boards kept.
pub fn opts(budget: Option<u64>) -> RunOptions {
    RunOptions {
        budget,
        max_solutions: 50,
    }
}

/// Walks one continuation chain from the root with the reference engine and `other`, a
/// slice per budget (until the tree ends), comparing every result: counts, cursor,
/// deepest board and solutions.
pub fn agree_down_a_chain(
    (reference, other): (&mut ReferenceEngine, &mut dyn Engine),
    budgets: impl IntoIterator<Item = u64>,
    what: &str,
) {
    let mut unit = Unit::root();
    for budget in budgets {
        let r = reference
            .run(&unit, opts(Some(budget)), &mut NoControl)
            .unwrap();
        let o = other
            .run(&unit, opts(Some(budget)), &mut NoControl)
            .unwrap();
        assert_eq!(o, r, "{what} budget {budget}");
        match r.cursor {
            Some(cursor) => unit = unit.continuation(cursor),
            None => break,
        }
    }
}

/// Round `round` of a random differential test: a board size from a fixed cycle of small
/// shapes, a random puzzle on it (0-3 hints, 1-3 rim colours, few inner colours) and a
/// fill order of the round's kind. Returns (size, puzzle, order).
pub fn random_round(rng: &mut Rng, round: usize) -> ((usize, usize), Puzzle, OrderSpec) {
    let (w, h) = [
        (3, 3),
        (4, 4),
        (5, 3),
        (4, 5),
        (5, 5),
        (6, 4),
        (2, 6),
        (6, 5),
    ][round % 8];
    // few colours on big boards make trees of billions of nodes: keep them walkable
    let inner = if w * h > 20 {
        5 + rng.below(4)
    } else {
        2 + rng.below(6)
    } as u8;
    let hints = rng.below(4);
    let rim = 1 + rng.below(3) as u8;
    let (puzzle, _) = random_puzzle(rng, w, h, rim, inner, hints);
    let spec = order_of_kind(&puzzle, round, rng);
    ((w, h), puzzle, spec)
}
