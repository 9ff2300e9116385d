//! Order studies: which fill order gives the smallest tree, estimated by the fleet's
//! probe units before a long search is started with it.

use serde::{Deserialize, Serialize};

use super::ids::{JobId, StudyId};

/// A study to start. Fields left `None` take the coordinator's defaults.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StudyRequest {
    /// Human name.
    pub name: String,
    /// The puzzle as site JSON.
    pub puzzle_json: String,
    /// The fill orders to compare.
    pub orders: Vec<String>,
    /// Boards in each probe's population.
    pub particles: Option<u32>,
    /// Probes per stratum at most.
    pub rounds: Option<u32>,
    /// Runs per probe on different hosts.
    pub replicas: u32,
    /// Fraction of probes run twice.
    pub spot_check: f64,
    /// Priority among jobs.
    pub priority: i32,
}

/// A study started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StudyCreated {
    /// The study.
    pub study_id: StudyId,
    /// Probe units created over all its orders.
    pub units: u64,
}

/// One order of a study as estimated so far.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StudyOrder {
    /// The fill order spec.
    pub order: String,
    /// The job its probes belong to.
    pub job_id: JobId,
    /// The mean estimate of the whole tree's nodes.
    pub estimate: f64,
    /// The 95% interval's low end, when the probes have seen the tree's tail.
    pub low: Option<f64>,
    /// The 95% interval's high end.
    pub high: Option<f64>,
    /// A bound the tree is above at 95%, whatever its tail.
    pub at_least: f64,
    /// Complete rounds merged.
    pub rounds: u32,
    /// Rounds planned.
    pub rounds_planned: u32,
    /// Strata: the fillings of the first `strata_depth` depths.
    pub strata: u32,
    /// The depth the strata are enumerated to.
    pub strata_depth: u32,
    /// Mean estimate per depth (index 0: depth 1).
    pub nodes_by_depth: Vec<f64>,
    /// Standard error per depth.
    pub error_by_depth: Vec<f64>,
    /// Placed neighbours of the cell filled at each depth.
    pub constraints_by_depth: Vec<u32>,
    /// The cells in fill order.
    pub cells: Vec<u32>,
    /// How the estimate was made and what it states.
    pub how: String,
    /// Rank, 1 = best.
    pub rank: u32,
    /// Known worse than the best (their intervals do not overlap).
    pub separated: bool,
}

/// A study and its ranking.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StudyStatus {
    /// The study.
    pub study_id: StudyId,
    /// Human name.
    pub name: String,
    /// `running`, `converged`, `exhausted` (every planned probe ran) or `cancelled`.
    pub state: String,
    /// When it was started, ms since the epoch.
    pub created_ms: i64,
    /// Board width.
    pub width: u32,
    /// Board height.
    pub height: u32,
    /// Boards in each probe.
    pub particles: u32,
    /// The orders, best first.
    pub orders: Vec<StudyOrder>,
    /// The puzzle's hint cells.
    pub hints: Vec<u32>,
}

impl StudyStatus {
    /// Whether the study has ended (converged, exhausted or cancelled).
    pub fn ended(&self) -> bool {
        self.state != "running"
    }
}
