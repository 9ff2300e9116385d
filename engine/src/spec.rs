//! A search spec: a puzzle (as text in any format), a fill order spec, and the search plan
//! they make. The coordinator (jobs), the worker (jobs it is handed) and verification
//! suites all start from one, through [`SearchSpec::load`].

use std::sync::Arc;

use crate::formats::{LoadOptions, parse_str};
use crate::order::{FillOrder, OrderSpec};
use crate::plan::SearchPlan;
use crate::{Puzzle, order};

/// A loaded puzzle, its fill order and its plan.
#[derive(Clone)]
pub struct SearchSpec {
    /// The puzzle.
    pub puzzle: Puzzle,
    /// The fill order.
    pub order: FillOrder,
    /// The search plan (shared by every engine of this spec).
    pub plan: Arc<SearchPlan>,
}

/// Why a spec could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// The puzzle text does not parse or is not a valid puzzle.
    #[error("puzzle: {0}")]
    Puzzle(String),
    /// The order spec does not parse or does not fit the puzzle.
    #[error(transparent)]
    Order(#[from] order::OrderError),
    /// The search tables would be too large to build or compile.
    #[error(transparent)]
    TooLarge(#[from] crate::plan::PlanTooLarge),
}

impl SearchSpec {
    /// Loads `text` (its format detected from `label`'s extension and the content) with
    /// the fill order `order` (`row-major`, `comb:12`, ...).
    pub fn load(text: &str, label: &str, order: &str) -> Result<SearchSpec, SpecError> {
        let puzzle = parse_str(text, label, &LoadOptions::default())
            .map_err(|e| SpecError::Puzzle(e.kind.to_string()))?;
        let spec: OrderSpec = order.parse()?;
        Self::new(puzzle, &spec)
    }

    /// Loads a puzzle in site JSON (what the fleet sends) with the fill order `order`.
    pub fn from_site_json(json: &str, order: &str) -> Result<SearchSpec, SpecError> {
        Self::load(json, "job.json", order)
    }

    /// The spec of an already loaded puzzle.
    pub fn new(puzzle: Puzzle, order: &OrderSpec) -> Result<SearchSpec, SpecError> {
        let order = FillOrder::new(&puzzle, order)?;
        let plan = Arc::new(SearchPlan::try_new(&puzzle, &order)?);
        Ok(SearchSpec {
            puzzle,
            order,
            plan,
        })
    }
}
