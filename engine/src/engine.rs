//! One interface over every engine kind, so callers (the worker, the CLI, the
//! verification suite) do not care which engine walks a unit.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::plan::SearchPlan;
use crate::search::{Control, RunOptions, UnitError, Walker};
use crate::unit::{Unit, UnitResult};

/// Which kind of engine produced a result. Rates are never mixed across kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EngineKind {
    /// The portable table-driven interpreter in this crate.
    Reference,
    /// Puzzle-specialised Rust compiled on the machine that runs it.
    Compiled,
    /// The branch-free mask walk of several units at once in one thread ([`crate::lanes`]).
    Lanes,
}

impl EngineKind {
    /// The text form (JSON, database, logs).
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Reference => "reference",
            EngineKind::Compiled => "compiled",
            EngineKind::Lanes => "lanes",
        }
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for EngineKind {
    type Err = String;
    fn from_str(s: &str) -> Result<EngineKind, String> {
        match s {
            "reference" => Ok(EngineKind::Reference),
            "compiled" => Ok(EngineKind::Compiled),
            "lanes" => Ok(EngineKind::Lanes),
            _ => Err(format!(
                "{s:?} is not an engine kind (reference, compiled or lanes)"
            )),
        }
    }
}

/// Why an engine could not produce a result.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The unit does not fit the puzzle.
    #[error(transparent)]
    Unit(#[from] UnitError),
    /// The engine itself failed (a crashed child process, a protocol error).
    #[error("engine failure: {0}")]
    Failed(String),
}

/// Walks units of one puzzle and fill order.
pub trait Engine: Send {
    /// The kind of engine.
    fn kind(&self) -> EngineKind;
    /// An identifier of this build of the engine (reported with every result).
    fn build_id(&self) -> String;
    /// Walks one unit.
    fn run(
        &mut self,
        unit: &Unit,
        options: RunOptions,
        control: &mut dyn Control,
    ) -> Result<UnitResult, EngineError>;

    /// Walks `first` and then every unit `feed` hands out until it has none, each result
    /// going back through [`Feed::done`] with the seconds its walk took, less the time
    /// its control held it ([`Control::held`]). An engine that walks several units at once
    /// (the lane engine) takes the next one whenever a lane is free; the default walks
    /// them one after another with [`Engine::run`].
    fn run_feed<'a>(&mut self, first: Work<'a>, feed: &mut dyn Feed<'a>) {
        let mut work = Some(first);
        while let Some(mut w) = work.take().or_else(|| feed.next()) {
            let started = std::time::Instant::now();
            let result = self.run(&w.unit, w.options, w.control.as_mut());
            let seconds = started.elapsed().saturating_sub(w.control.held());
            feed.done(w, result, seconds.as_secs_f64());
        }
    }

    /// How many units the engine holds at once through [`Engine::run_feed`]: the lane
    /// engine walks two in one thread (six on boards past 128 pieces or 16 colours); the
    /// compiled engine walks one and has the next waiting in its process. A caller with
    /// one unit in hand and more to come hands an engine of more than one its units
    /// through a feed; one unit at a time is as fast on the others. Default: 1.
    fn units_in_hand(&self) -> usize {
        1
    }
}

/// One unit to walk, with how its walk is steered.
pub struct Work<'a> {
    /// The caller's tag for this unit.
    pub tag: usize,
    /// The unit.
    pub unit: Unit,
    /// Its budget and solution cap.
    pub options: RunOptions,
    /// Polled as the walk goes (stops, pauses).
    pub control: Box<dyn Control + 'a>,
}

/// Hands an engine its units and takes their results back ([`Engine::run_feed`]).
pub trait Feed<'a> {
    /// The next unit to walk, if any.
    fn next(&mut self) -> Option<Work<'a>>;
    /// A unit's result, and the seconds of this thread's time its walk took (an engine
    /// that walks units side by side splits its time between them by the nodes each
    /// walked).
    fn done(&mut self, work: Work<'a>, result: Result<UnitResult, EngineError>, seconds: f64);
}

/// The reference engine over a shared plan.
#[derive(Clone)]
pub struct ReferenceEngine {
    plan: Arc<SearchPlan>,
}

impl ReferenceEngine {
    /// An engine for `plan`.
    pub fn new(plan: Arc<SearchPlan>) -> Self {
        ReferenceEngine { plan }
    }
}

impl Engine for ReferenceEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Reference
    }
    fn build_id(&self) -> String {
        reference_release()
    }
    fn run(
        &mut self,
        unit: &Unit,
        options: RunOptions,
        control: &mut dyn Control,
    ) -> Result<UnitResult, EngineError> {
        Ok(Walker::new(&self.plan).run(unit, options, control)?)
    }
}

/// The reference engine's release (and build) id: it is the same program for every puzzle.
pub fn reference_release() -> String {
    format!("reference-{}", env!("CARGO_PKG_VERSION"))
}
