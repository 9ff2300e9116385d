//! Verification suites: small, fixed pieces of real search trees with their exact
//! results, run on any machine to check a CPU, a compiler or an engine build.
//!
//! A [`SuiteUnit`] names a built-in puzzle, a fill order, a prefix (the `prefix_index`-th
//! prefix of depth `prefix_depth` in canonical order) and an optional budget. Its
//! [`SuiteExpected`] holds the exact per-depth counts and the [`result_digest`] of the full
//! result (cursor, solutions and deepest board included). The default suite is
//! `engine/suite/default.json`; its expectations are golden values produced by the
//! reference engine (regenerated only with `E2FLEET_REGEN_SUITE=1`, and cross-checked in
//! the tests against published counts and the brute force).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::plan::SearchPlan;
use crate::search::Walker;
use crate::spec::SearchSpec;
use crate::unit::{Unit, UnitResult, result_digest};

/// One verification unit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuiteUnit {
    /// Short unique name.
    pub name: String,
    /// Built-in puzzle name (see [`builtin_puzzle`]).
    pub puzzle: String,
    /// Fill order spec.
    pub order: String,
    /// Depth of the unit's prefix (0 = the whole tree).
    pub prefix_depth: usize,
    /// Which prefix of that depth, in canonical order.
    pub prefix_index: usize,
    /// Node budget, for units that end in a budget stop.
    pub budget: Option<u64>,
    /// Counts toward the speed table.
    #[serde(default)]
    pub speed: bool,
    /// The exact expected result, when known.
    pub expected: Option<SuiteExpected>,
}

/// The exact result a unit must produce.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuiteExpected {
    /// Committed nodes.
    pub committed: u64,
    /// Solutions.
    pub solutions_count: u64,
    /// Nodes per depth (to name the first differing depth).
    pub nodes_by_depth: Vec<u64>,
    /// [`result_digest`] of the whole result.
    pub digest: String,
}

impl SuiteExpected {
    /// The expectation a result would set.
    pub fn of(r: &UnitResult) -> Self {
        SuiteExpected {
            committed: r.committed,
            solutions_count: r.solutions_count,
            nodes_by_depth: r.nodes_by_depth.clone(),
            digest: result_digest(r),
        }
    }

    /// `None` when `r` agrees exactly, else what differs.
    pub fn disagreement(&self, r: &UnitResult) -> Option<String> {
        if let Some(d) = (0..self.nodes_by_depth.len().max(r.nodes_by_depth.len()))
            .find(|&d| self.nodes_by_depth.get(d) != r.nodes_by_depth.get(d))
        {
            return Some(format!(
                "first differing depth {}: expected {} nodes, got {}",
                d + 1,
                self.nodes_by_depth.get(d).copied().unwrap_or(0),
                r.nodes_by_depth.get(d).copied().unwrap_or(0)
            ));
        }
        if r.solutions_count != self.solutions_count {
            return Some(format!(
                "expected {} solutions, got {}",
                self.solutions_count, r.solutions_count
            ));
        }
        if result_digest(r) != self.digest {
            return Some(
                "counts agree but the cursor, solution boards or deepest board differ".into(),
            );
        }
        None
    }
}

/// Names of the built-in puzzles ([`builtin_puzzle`]).
pub const BUILTIN_PUZZLES: &[&str] = &[
    "brendan-set1-04x04",
    "brendan-set1-05x05",
    "brendan-set2-05x05",
    "brendan-set1-06x04",
    "brendan-set1-06x06",
    "brendan-set1-07x07",
    "brendan-set2-07x07",
    "bench-easy",
    "bench-easy-rows0-5",
    "bench-easy-rows0-7",
    "bench-hard",
    "clue1",
    "planted-10x10",
    "e2-official",
];

/// The puzzles the built-in suite and `bench` use, embedded in the binary (so a worker
/// binary alone can run them, from any directory).
pub fn builtin_puzzle(name: &str) -> Option<&'static str> {
    Some(match name {
        "brendan-set1-04x04" => include_str!("../../puzzles/brendan/set1/pieces_04x04.txt"),
        "brendan-set1-05x05" => include_str!("../../puzzles/brendan/set1/pieces_05x05.txt"),
        "brendan-set2-05x05" => include_str!("../../puzzles/brendan/set2/pieces_05x05.txt"),
        "brendan-set1-06x04" => include_str!("../../puzzles/brendan/set1/pieces_06x04.txt"),
        "brendan-set1-06x06" => include_str!("../../puzzles/brendan/set1/pieces_06x06.txt"),
        "brendan-set1-07x07" => include_str!("../../puzzles/brendan/set1/pieces_07x07.txt"),
        "brendan-set2-07x07" => include_str!("../../puzzles/brendan/set2/pieces_07x07.txt"),
        "bench-easy" => include_str!("../../puzzles/bench/bench-easy.json"),
        "bench-easy-rows0-5" => include_str!("../../puzzles/bench/bench-easy-rows0-5.json"),
        "bench-easy-rows0-7" => include_str!("../../puzzles/bench/bench-easy-rows0-7.json"),
        "bench-hard" => include_str!("../../puzzles/bench/bench-hard.json"),
        "clue1" => include_str!("../../puzzles/clues/e2-clue-clue1.json"),
        "planted-10x10" => include_str!("../../puzzles/planted/inst_n10_c22_s1.json"),
        "e2-official" => include_str!("../../puzzles/e2/official.json"),
        _ => return None,
    })
}

/// A file name for a built-in puzzle's text (its extension tells the loader the format).
pub fn builtin_label(name: &str, text: &str) -> String {
    if text.trim_start().starts_with('{') {
        format!("{name}.json")
    } else {
        format!("{name}.txt")
    }
}

/// The default suite shipped with e2fleet.
pub fn default_suite() -> Vec<SuiteUnit> {
    serde_json::from_str(include_str!("../suite/default.json")).expect("the built-in suite parses")
}

/// A unit resolved against its puzzle: the plan to run it on and the unit itself.
pub struct Resolved {
    /// The search plan.
    pub plan: Arc<SearchPlan>,
    /// The unit.
    pub unit: Unit,
}

/// Loads a suite unit's puzzle and finds its prefix.
pub fn resolve(u: &SuiteUnit) -> Result<Resolved, String> {
    let text = builtin_puzzle(&u.puzzle)
        .ok_or_else(|| format!("unknown built-in puzzle {:?}", u.puzzle))?;
    let plan = SearchSpec::load(text, &builtin_label(&u.puzzle, text), &u.order)
        .map_err(|e| e.to_string())?
        .plan;
    let mut found = None;
    let mut seen = 0usize;
    Walker::new(&plan)
        .enumerate(&[], u.prefix_depth, &mut |p| {
            if seen == u.prefix_index {
                found = Some(p.to_vec());
            }
            seen += 1;
        })
        .map_err(|e| e.to_string())?;
    let prefix = found.ok_or_else(|| {
        format!(
            "{}: depth {} has only {seen} prefixes",
            u.name, u.prefix_depth
        )
    })?;
    Ok(Resolved {
        plan,
        unit: Unit::prefix(prefix),
    })
}
