//! Which walk a compiled engine runs, chosen per puzzle and per machine.
//!
//! The generator has two walks with the same counts ([`CodegenOptions::slots`]): the list
//! walk, and on the boards [`codegen::slots_apply`] to, a walk by slots: the slot walk on
//! boards of more than 128 pieces ([`codegen::slot_walk_applies`]), the mask walk with its
//! next bucket looked up from the slot in hand on smaller ones
//! ([`codegen::slot_lookup_applies`]). Which is faster depends on the board and on the
//! CPU (on a Zen 5 the slot walk is 1.22-1.28x on bench-hard and the real Eternity II
//! boards, ~1.1x on a planted E2-recipe board, and 0.8-0.9x on bench-easy's units; its
//! code is several times larger, so a smaller instruction cache or a weaker indirect
//! predictor moves the balance; on a Zen 4 the slot lookup is 1.05-1.09x on Brendan 6x6
//! to 9x9 and 0.92x on an E2 clue puzzle). [`Walk::Auto`] therefore does not guess: it
//! builds both (at once) and races them on the puzzle's own tree (a seeded sample of units
//! spread over it, [`race_sample`]), alternating (who goes first too), and keeps the walk
//! by slots only when it is clearly faster ([`SLOTS_MARGIN`]). A race runs
//! [`RACE_ROUNDS`] rounds, and more, up to [`MAX_RACE_ROUNDS`], while its median is within
//! the rounds' own spread of the margin ([`settled`]): a busy minute on a shared machine
//! widens the spread and so lengthens the race instead of deciding it. The race doubles as a
//! cross-check: both programs must return the same results, depth by depth, or the build
//! is refused.
//!
//! The decision is remembered in the build cache (a sealed file named after both builds),
//! so a restarted worker does not race again; a new compiler, flags or engine release
//! makes new builds and so a new race.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::cache::Cache;
use super::codegen::{self, CodegenOptions};
use super::{BuildOptions, CompileError, CompiledProgram};
use crate::engine::Engine;
use crate::plan::SearchPlan;
use crate::search::{NoControl, RunOptions, Walker};
use crate::unit::{Unit, UnitResult};

/// Which walk to build.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Walk {
    /// The faster of the two on this machine and puzzle (a race, remembered in the cache).
    #[default]
    Auto,
    /// The list walk (always).
    List,
    /// The walk by slots where one applies (the slot walk, or the mask walk's slot
    /// lookup), the list walk elsewhere.
    Slots,
}

impl Walk {
    /// How release ids name the walk policy (empty for the list walk).
    pub fn release_suffix(self) -> &'static str {
        match self {
            Walk::Auto => "-auto",
            Walk::List => "",
            Walk::Slots => "-slots",
        }
    }

    /// The engine release of compiled engines built with `options`, this walk policy and
    /// this CPU target (`None` = generic): the same for every puzzle, unlike a build id
    /// (which also says which walk a build runs: `-slots` at its end for the slot walk).
    pub fn release_id(self, options: &CodegenOptions, target_cpu: Option<&str>) -> String {
        let mut id = format!(
            "compiled-{}-{}-g{}",
            codegen::generator_id(),
            target_cpu.unwrap_or("generic"),
            options.group.map_or("auto".to_string(), |g| g.to_string())
        );
        if let Some(d) = options.fault_depth {
            id.push_str(&format!("-FAULT{d}"));
        }
        if options.fault_hang {
            id.push_str("-HANG");
        }
        id.push_str(self.release_suffix());
        id
    }
}

/// The slot walk is kept only when its median per-round speed ratio to the list walk is
/// at least this: its first compile is 2-4x longer and its code several times larger, so
/// a tie (or noise) goes to the list walk.
pub const SLOTS_MARGIN: f64 = 1.03;

/// Alternated rounds of a race, at least.
pub const RACE_ROUNDS: usize = 5;

/// Alternated rounds of a race, at most: a race not [`settled`] after [`RACE_ROUNDS`]
/// (its median within the rounds' own spread of [`SLOTS_MARGIN`]) runs more, one at a
/// time, up to this. The decision is remembered until the next engine release, so a busy
/// minute on a shared machine should not make it: on a Zen 4 one race of three on Brendan
/// 7x7 measured 1.024x in such a minute against 1.089x in the two others, and kept the
/// slower walk.
pub const MAX_RACE_ROUNDS: usize = 15;

/// Units of the tree a race walks in each round ([`race_sample`]).
pub const RACE_UNITS: usize = 8;

/// Seed of the race's sample.
const RACE_SEED: u64 = 0x6532_666c_6565_7421;

/// Target length of one program's share of a round (all the sampled units).
const ROUND_TARGET: Duration = Duration::from_millis(200);

/// Nodes per unit of the first calibration run that sizes the rounds.
const CALIBRATION_NODES: u64 = 250_000;

/// Fewest nodes a round of a race walks: below it (subtrees too small) the sample is taken
/// nearer the root.
pub(crate) const MIN_RACE_NODES: u64 = 10_000_000;

/// How the walk of a build was chosen.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "how", rename_all = "snake_case")]
pub enum Choice {
    /// Asked for by name.
    Forced,
    /// No walk by slots applies to this plan: the list walk, no race.
    ListOnly,
    /// Raced now: `ratio` is the median of the rounds' slot/list speed ratios.
    Raced {
        /// Median slot/list nodes/s ratio.
        ratio: f64,
        /// Nodes each program walked per round (all the sampled units).
        nodes: u64,
        /// Units of the sample ([`RACE_UNITS`], or 1: the root, for a tree too small).
        units: usize,
        /// Rounds.
        rounds: usize,
    },
    /// A race of an earlier start, remembered in the cache.
    Remembered {
        /// Its median slot/list ratio.
        ratio: f64,
    },
    /// The slot build failed (the list walk runs; the reason is kept).
    SlotBuildFailed {
        /// Why.
        error: String,
    },
}

/// A build with its walk.
#[derive(Clone, Debug)]
pub struct Built {
    /// The program to run.
    pub program: CompiledProgram,
    /// How its walk was chosen.
    pub choice: Choice,
}

impl Built {
    /// `"slots"` or `"list"`: the walk the program runs.
    pub fn walk_name(&self) -> &'static str {
        if self.program.slots { "slots" } else { "list" }
    }

    /// One line for people: the walk and why.
    pub fn describe(&self) -> String {
        let walk = self.walk_name();
        match &self.choice {
            Choice::Forced => format!("{walk} walk (asked for)"),
            Choice::ListOnly => format!("{walk} walk (no walk by slots applies here)"),
            Choice::Raced {
                ratio,
                nodes,
                units,
                rounds,
            } => format!(
                "{walk} walk (raced on this machine: the walk by slots ran at {ratio:.3}x the list walk's speed, median of {rounds} rounds of {nodes} nodes in {units} unit{})",
                if *units == 1 { "" } else { "s" }
            ),
            Choice::Remembered { ratio } => {
                format!("{walk} walk (an earlier race on this machine: slot/list {ratio:.3}x)")
            }
            Choice::SlotBuildFailed { error } => {
                format!("{walk} walk (the slot build failed: {error})")
            }
        }
    }
}

/// Whether a race with these per-round slot/list ratios keeps the slot walk.
pub fn keeps_slots(ratios: &[f64]) -> bool {
    median(ratios).is_some_and(|m| m >= SLOTS_MARGIN)
}

/// Whether a race's per-round slot/list ratios decide it: their median is further from
/// [`SLOTS_MARGIN`] than half the spread of their middle half (the interquartile range),
/// so one more round is unlikely to move it across. No ratio, or one not a number, is no
/// decision to wait for.
pub fn settled(ratios: &[f64]) -> bool {
    settled_at(ratios, SLOTS_MARGIN)
}

/// [`settled`] against `margin`.
pub(crate) fn settled_at(ratios: &[f64], margin: f64) -> bool {
    let v = finite_sorted(ratios);
    if v.len() < ratios.len() || v.is_empty() {
        return true;
    }
    let n = v.len();
    let spread = v[(3 * n) / 4] - v[n / 4];
    (v[n / 2] - margin).abs() > spread / 2.0
}

pub(crate) fn median(values: &[f64]) -> Option<f64> {
    let v = finite_sorted(values);
    v.get(v.len() / 2).copied()
}

/// The finite ones of `values`, ascending.
fn finite_sorted(values: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    v
}

/// Builds the program for `plan` with the walk `walk` asks for (`codegen.slots` is
/// ignored: the walk decides it).
pub fn build(
    plan: &std::sync::Arc<SearchPlan>,
    codegen: &CodegenOptions,
    build: &BuildOptions,
    walk: Walk,
) -> Result<Built, CompileError> {
    let list_options = CodegenOptions {
        slots: false,
        ..codegen.clone()
    };
    let slot_options = CodegenOptions {
        slots: true,
        ..codegen.clone()
    };
    let applies = codegen::slots_apply(plan, codegen);
    let forced = |options: &CodegenOptions| {
        CompiledProgram::build(plan, options, build).map(|program| Built {
            program,
            choice: if applies {
                Choice::Forced
            } else {
                Choice::ListOnly
            },
        })
    };
    match walk {
        Walk::List => return forced(&list_options),
        Walk::Slots => return forced(&slot_options),
        Walk::Auto if !applies => return forced(&list_options),
        Walk::Auto => {}
    }
    // the keys first (this builds the runtime library once, before the builds below)
    let list_key = CompiledProgram::key_of(plan, &list_options, build)?;
    let slot_key = CompiledProgram::key_of(plan, &slot_options, build);
    let cache = Cache::open(&build.cache_dir)?;
    let memo = slot_key
        .as_ref()
        .ok()
        .map(|k| memo_path(&cache, &list_key, k));
    if let Some((slots, ratio)) = memo.as_deref().and_then(|m| remembered(&cache, m)) {
        let program = if slots {
            match CompiledProgram::build(plan, &slot_options, build) {
                Ok(p) => p,
                Err(e) => {
                    let list = CompiledProgram::build(plan, &list_options, build)?;
                    return Ok(slot_failure(list, e));
                }
            }
        } else {
            CompiledProgram::build(plan, &list_options, build)?
        };
        return Ok(Built {
            program,
            choice: Choice::Remembered { ratio },
        });
    }
    // both builds at once (two rustc processes: the first start on a 16x16 board waits
    // for the slower one, not for the sum)
    let (list, slots) = std::thread::scope(|s| {
        let slots = s.spawn(|| match &slot_key {
            Ok(_) => CompiledProgram::build(plan, &slot_options, build),
            Err(e) => Err(e.clone()),
        });
        let list = CompiledProgram::build(plan, &list_options, build);
        let slots = slots
            .join()
            .unwrap_or_else(|_| Err(CompileError::Io("the slot build panicked".into())));
        (list, slots)
    });
    let list = list?;
    let slots = match slots {
        Ok(p) => p,
        Err(e) => return Ok(slot_failure(list, e)),
    };
    let memo = memo_path(&cache, &list.key, &slots.key);
    let (ratios, nodes, units) = race(plan, &list, &slots)?;
    let keep = keeps_slots(&ratios);
    let ratio = median(&ratios).unwrap_or(0.0);
    remember(&cache, &memo, keep, ratio);
    Ok(Built {
        program: if keep { slots } else { list },
        choice: Choice::Raced {
            ratio,
            nodes,
            units,
            rounds: ratios.len(),
        },
    })
}

/// Where the decision for this pair of builds is kept.
fn memo_path(cache: &Cache, list_key: &str, slot_key: &str) -> std::path::PathBuf {
    cache.path(&format!(
        "e2fleet-walk-{}-{}",
        &list_key[..16],
        &slot_key[..16]
    ))
}

fn slot_failure(list: CompiledProgram, e: CompileError) -> Built {
    Built {
        program: list,
        choice: Choice::SlotBuildFailed {
            error: e.to_string(),
        },
    }
}

/// Runs both programs on the same sample of the puzzle's tree ([`race_sample`]),
/// alternating; returns the per-round slot/list speed ratios and the nodes each program
/// walks in a round, and the units of the sample. Refuses the pair if their results
/// differ anywhere.
fn race(
    plan: &std::sync::Arc<SearchPlan>,
    list: &CompiledProgram,
    slots: &CompiledProgram,
) -> Result<(Vec<f64>, u64, usize), CompileError> {
    let mut a = list.engine(plan.clone());
    let mut b = slots.engine(plan.clone());
    let agree = |x: &[UnitResult], y: &[UnitResult], nodes: u64| {
        agree("the list and slot walks", x, y, nodes)
    };
    // size the rounds on the list walk's speed; a sample whose subtrees are too small for
    // that is taken again nearer the root, down to the root itself
    let (units, nodes) = sized_sample(plan, &mut a)?;
    let timed = |e: &mut super::CompiledEngine, nodes: u64| timed_units(e, &units, nodes);
    let (x, _) = timed(&mut a, nodes)?;
    let (y, _) = timed(&mut b, nodes)?;
    agree(&x, &y, nodes)?;
    let walked = x.iter().map(|r| r.committed).sum();
    let mut ratios = Vec::with_capacity(MAX_RACE_ROUNDS);
    while ratios.len() < RACE_ROUNDS || (ratios.len() < MAX_RACE_ROUNDS && !settled(&ratios)) {
        // who goes first alternates, so a machine getting busier or quieter through the
        // race favours neither
        let ((x, tl), (y, ts)) = if ratios.len() % 2 == 0 {
            let x = timed(&mut a, nodes)?;
            (x, timed(&mut b, nodes)?)
        } else {
            let y = timed(&mut b, nodes)?;
            (timed(&mut a, nodes)?, y)
        };
        agree(&x, &y, nodes)?;
        ratios.push(tl / ts);
    }
    Ok((ratios, walked, units.len()))
}

/// A race's sample ([`race_sample`]) and the nodes each of its units walks in a round,
/// sized on `engine`'s speed so a round takes about [`ROUND_TARGET`] (runs long enough
/// that a unit's set-up and the pipe do not count). A sample whose units walked less
/// than half their budgets in the calibration run (and less than [`MIN_RACE_NODES`] in
/// all) is taken again nearer the root, down to the root itself. (A race that asked for
/// [`MIN_RACE_NODES`] whatever the budgets would race every fast board, the real E2 among
/// them, on the root alone: calibration stops at 8 units of 1,000,000 nodes on any board
/// walked at more than ~80 M nodes/s.)
pub(crate) fn sized_sample(
    plan: &SearchPlan,
    engine: &mut super::CompiledEngine,
) -> Result<(Vec<Unit>, u64), CompileError> {
    let mut choices = default_choices(plan);
    loop {
        let units = race_sample(plan, RACE_UNITS, choices, RACE_SEED);
        let mut nodes = CALIBRATION_NODES;
        let (walked, t) = loop {
            let (r, t) = timed_units(engine, &units, nodes)?;
            let walked: u64 = r.iter().map(|r| r.committed).sum();
            if t >= ROUND_TARGET.as_secs_f64() / 8.0 || nodes >= 1 << 28 {
                break (walked, t);
            }
            nodes *= 4;
        };
        // big enough: the units walk at least half their budgets (or MIN_RACE_NODES in
        // all), so they are not dead ends a few nodes deep
        let budgets = nodes * units.len() as u64;
        if walked >= MIN_RACE_NODES.min(budgets / 2) || choices == 0 {
            let scale = ROUND_TARGET.as_secs_f64() / t;
            return Ok((units, ((nodes as f64 * scale) as u64).clamp(nodes, 1 << 30)));
        }
        choices /= 2;
    }
}

/// `Ok` when two engines (`who`, as a sentence names them) returned the same results on a
/// race's units of `nodes` nodes; else the disagreement: one of them is wrong, and a race
/// never keeps either.
pub(crate) fn agree(
    who: &str,
    x: &[UnitResult],
    y: &[UnitResult],
    nodes: u64,
) -> Result<(), CompileError> {
    if x == y {
        Ok(())
    } else {
        Err(CompileError::Disagreement(format!(
            "{who} disagree on {} units of {nodes} nodes: one of them is wrong",
            x.len()
        )))
    }
}

/// Walks `units` with a budget of `nodes` each; their results and the seconds taken.
pub(crate) fn timed_units(
    e: &mut super::CompiledEngine,
    units: &[Unit],
    nodes: u64,
) -> Result<(Vec<UnitResult>, f64), CompileError> {
    let options = RunOptions {
        budget: Some(nodes),
        max_solutions: 1,
    };
    let t = Instant::now();
    let results = units
        .iter()
        .map(|u| e.run(u, options, &mut NoControl))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CompileError::Start(format!("walk race: {e}")))?;
    Ok((results, t.elapsed().as_secs_f64().max(1e-9)))
}

/// Choices of a race's descents for `plan`: `plan.len() / 32`, 1 to 12 (where jobs are
/// split).
pub fn default_choices(plan: &SearchPlan) -> usize {
    (plan.len() / 32).clamp(1, 12)
}

/// Units sampled across the tree the way a job's units are spread over it: `k` random
/// descents (a seeded generator, so the same puzzle gets the same sample) from the root
/// through `choices` cells of more than one candidate (a cell with one is passed through,
/// up to `plan.len() / 4` cells), each a legal prefix with children; the root alone for
/// no choice. The first nodes from the root alone are a poor sample: on bench-easy the
/// slot walk wins them by 9% and loses a whole-tree run by 25%.
pub fn race_sample(plan: &SearchPlan, k: usize, choices: usize, seed: u64) -> Vec<Unit> {
    if choices == 0 {
        return vec![Unit::root()];
    }
    let deepest = (plan.len() / 4).max(choices).min(plan.len());
    let mut state = seed;
    let mut next = move || {
        // splitmix64
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut walker = Walker::new(plan);
    let mut units = Vec::new();
    for _ in 0..k * 64 {
        if units.len() == k {
            break;
        }
        let (mut prefix, mut made) = (Vec::new(), 0);
        let mut alive = true;
        while made < choices && prefix.len() < deepest {
            let mut children = Vec::new();
            let listed = walker.enumerate_first(&prefix, prefix.len() + 1, 4096, &mut |p| {
                children.extend(p.last().copied())
            });
            if listed.is_err() || children.is_empty() {
                alive = false;
                break;
            }
            made += (children.len() > 1) as usize;
            prefix.push(children[(next() % children.len() as u64) as usize]);
        }
        if alive {
            units.push(Unit::prefix(prefix));
        }
    }
    if units.is_empty() {
        units.push(Unit::root());
    }
    units
}

/// A remembered decision: (slot walk kept, ratio), when the sealed file is there and reads.
fn remembered(cache: &Cache, memo: &Path) -> Option<(bool, f64)> {
    remembered_as(cache, memo, ["slots", "list"])
}

/// A remembered decision between `words[0]` (`true`) and `words[1]`, with its ratio.
pub(crate) fn remembered_as(cache: &Cache, memo: &Path, words: [&str; 2]) -> Option<(bool, f64)> {
    if !cache.is_sealed(memo) {
        return None;
    }
    let text = std::fs::read_to_string(memo).ok()?;
    let mut read = text.split_whitespace();
    let first = read.next()?;
    let kept = if first == words[0] {
        true
    } else if first == words[1] {
        false
    } else {
        return None;
    };
    let ratio = read.next()?.parse().ok()?;
    Some((kept, ratio))
}

/// Writes the decision (best effort: a worker that cannot write it races again next start).
fn remember(cache: &Cache, memo: &Path, slots: bool, ratio: f64) {
    remember_as(cache, memo, if slots { "slots" } else { "list" }, ratio)
}

/// Writes a decision `word` with its ratio (best effort).
pub(crate) fn remember_as(cache: &Cache, memo: &Path, word: &str, ratio: f64) {
    let tmp = memo.with_extension("tmp");
    let text = format!("{word} {ratio:.4}\n");
    let written = std::fs::write(&tmp, text).is_ok()
        && cache.seal(&tmp, memo).is_ok()
        && std::fs::rename(&tmp, memo).is_ok();
    if !written {
        let _ = std::fs::remove_file(&tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slot_walk_is_kept_only_when_clearly_faster() {
        assert!(keeps_slots(&[1.2, 1.15, 1.18]));
        assert!(keeps_slots(&[0.9, 1.05, 1.04]));
        assert!(!keeps_slots(&[1.02, 1.01, 1.2]));
        assert!(!keeps_slots(&[0.75, 0.76, 0.74]));
        assert!(!keeps_slots(&[]));
        assert!(!keeps_slots(&[f64::NAN]));
    }

    /// A race runs on while its median is within half its interquartile range of the
    /// margin.
    #[test]
    fn a_race_is_settled_when_its_median_is_clear_of_the_margin() {
        // Brendan 7x7 on a quiet Zen 4, and an E2 clue puzzle the lookup loses on
        assert!(settled(&[1.09, 1.08, 1.10, 1.07, 1.11]));
        assert!(settled(&[0.97, 0.98, 0.96, 0.99, 0.97]));
        assert!(settled(&[0.75, 0.76, 0.74, 0.80, 0.70]));
        // a busy minute: a median near the margin and a wide spread
        assert!(!settled(&[0.95, 1.10, 1.02, 1.05, 0.99]));
        assert!(!settled(&[1.04, 1.20, 0.90, 1.06, 1.01]));
        // nothing to wait for
        assert!(settled(&[]));
        assert!(settled(&[1.0, f64::NAN]));
    }

    #[test]
    fn release_ids_name_the_walk_policy() {
        assert_eq!(Walk::List.release_suffix(), "");
        assert_ne!(Walk::Auto.release_suffix(), Walk::Slots.release_suffix());
    }
}
