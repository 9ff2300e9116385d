//! Which engine `auto` runs on a board the lane engine takes: the lane engine or the
//! compiled one, raced on the puzzle's own tree.
//!
//! Neither wins everywhere. On Brendan's sets the lane engine is 1.08-1.25x the compiled
//! engine (its walk has no branch on the tree, and those trees mispredict); on an easy
//! board such as the E2 clue puzzle 2 (12x6, 9 colours) the compiled walk's branches
//! predict well and it runs ~1.6x the lane engine; on the hard 16x16 boards the lane
//! engine's wide form is 1.1-1.2x the compiled engine on Zen 4 (the real E2 near this
//! race's margin), and many times faster on a split whose units are a few thousand nodes
//! (no round trip to a process between them: `docs/engine-design.md`). So, as for the compiled engine's two walks ([`crate::compiled::walk`]), `auto` does not guess: it
//! walks the same seeded sample of units ([`crate::compiled::walk::race_sample`]) on both, the lane
//! engine as many at a time as it walks a job's units, in alternated rounds, and keeps the
//! lane engine only when it is clearly faster ([`LANES_MARGIN`]). Both must return the
//! same results, unit by unit, or the race is refused (one of them is wrong). The decision
//! is remembered in the build cache (a sealed file named after the compiled build and the
//! lane engine's release), so a restarted worker does not race again.

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use crate::compiled::cache::Cache;
use crate::compiled::walk::{
    MAX_RACE_ROUNDS, RACE_ROUNDS, median, remember_as, remembered_as, settled_at, sized_sample,
    timed_units,
};
use crate::compiled::{BuildOptions, CompileError, CompiledProgram};
use crate::engine::{Engine, EngineError, Feed, Work};
use crate::lanes::{LaneEngine, LaneTables, lanes_release};
use crate::plan::SearchPlan;
use crate::search::{NoControl, RunOptions};
use crate::unit::{Unit, UnitResult};

/// The lane engine is kept only when its median per-round speed ratio to the compiled
/// engine is at least this (a tie goes to the compiled engine, built already).
pub const LANES_MARGIN: f64 = 1.03;

/// How a race between the lane and compiled engines went.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LanesRace {
    /// The lane engine is kept.
    pub lanes: bool,
    /// Median per-round lanes/compiled nodes/s ratio.
    pub ratio: f64,
    /// Rounds raced now; 0 when the decision was remembered from an earlier start.
    pub rounds: usize,
}

/// Races the lane engine against `program` on `plan` (or reads the remembered decision).
pub fn race(
    plan: &Arc<SearchPlan>,
    program: &CompiledProgram,
    tables: &Arc<LaneTables>,
    build: &BuildOptions,
) -> Result<LanesRace, CompileError> {
    let cache = Cache::open(&build.cache_dir)?;
    let memo = cache.path(&format!(
        "e2fleet-lanes-{}-{}",
        &program.key()[..16],
        lanes_release()
    ));
    if let Some((lanes, ratio)) = remembered_as(&cache, &memo, ["lanes", "compiled"]) {
        return Ok(LanesRace {
            lanes,
            ratio,
            rounds: 0,
        });
    }
    let mut compiled = program.engine(plan.clone());
    let mut lanes = LaneEngine::with_tables(plan.clone(), tables.clone());
    // size the rounds on the compiled engine's speed; a sample whose subtrees are too
    // small (most of its units end before their budget) is taken again nearer the root
    // (the root alone at last: one unit, which the lane engine walks in one lane, so a
    // tree that small stays compiled)
    let (units, nodes) = sized_sample(plan, &mut compiled)?;
    let agree = |x: &[UnitResult], y: &[UnitResult]| {
        crate::compiled::walk::agree("the lane and compiled engines", x, y, nodes)
    };
    let mut ratios = Vec::with_capacity(MAX_RACE_ROUNDS);
    while ratios.len() < RACE_ROUNDS
        || (ratios.len() < MAX_RACE_ROUNDS && !settled_at(&ratios, LANES_MARGIN))
    {
        // who goes first alternates
        let ((x, tc), (y, tl)) = if ratios.len() % 2 == 0 {
            let x = timed_units(&mut compiled, &units, nodes)?;
            (x, timed_lanes(&mut lanes, &units, nodes)?)
        } else {
            let y = timed_lanes(&mut lanes, &units, nodes)?;
            (timed_units(&mut compiled, &units, nodes)?, y)
        };
        agree(&x, &y)?;
        ratios.push(tc / tl);
    }
    let ratio = median(&ratios).unwrap_or(0.0);
    let keep = ratio >= LANES_MARGIN;
    remember_as(
        &cache,
        &memo,
        if keep { "lanes" } else { "compiled" },
        ratio,
    );
    Ok(LanesRace {
        lanes: keep,
        ratio,
        rounds: ratios.len(),
    })
}

/// Walks `units` on the lane engine (two at a time), `nodes` each; their results in
/// order and the seconds taken.
fn timed_lanes(
    engine: &mut LaneEngine,
    units: &[Unit],
    nodes: u64,
) -> Result<(Vec<UnitResult>, f64), CompileError> {
    struct InOrder<'u> {
        units: &'u [Unit],
        next: usize,
        nodes: u64,
        results: Vec<Option<Result<UnitResult, EngineError>>>,
    }
    impl<'a> Feed<'a> for InOrder<'_> {
        fn next(&mut self) -> Option<Work<'a>> {
            let unit = self.units.get(self.next)?.clone();
            self.next += 1;
            Some(Work {
                tag: self.next - 1,
                unit,
                options: RunOptions {
                    budget: Some(self.nodes),
                    max_solutions: 1,
                },
                control: Box::new(NoControl),
            })
        }
        fn done(&mut self, work: Work<'a>, result: Result<UnitResult, EngineError>, _: f64) {
            self.results[work.tag] = Some(result);
        }
    }
    let mut feed = InOrder {
        units,
        next: 0,
        nodes,
        results: (0..units.len()).map(|_| None).collect(),
    };
    let t = Instant::now();
    if let Some(first) = feed.next() {
        engine.run_feed(first, &mut feed);
    }
    let seconds = t.elapsed().as_secs_f64().max(1e-9);
    let results = feed
        .results
        .into_iter()
        .map(|r| match r {
            Some(Ok(r)) => Ok(r),
            Some(Err(e)) => Err(CompileError::Start(format!("lanes race: {e}"))),
            None => Err(CompileError::Start("lanes race: a unit not walked".into())),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((results, seconds))
}
