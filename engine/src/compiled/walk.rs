//! Which walk a compiled engine runs, chosen per puzzle and per machine.
//!
//! The generator has two walks with the same counts ([`CodegenOptions::slots`]): the list
//! walk, and on the boards [`codegen::slot_walk_applies`] to, the slot walk. Which is
//! faster depends on the board and on the CPU (1.16-1.2x for the slot walk on bench-hard,
//! ~1.03x on the real Eternity II, 0.75x on bench-easy, on a Zen 5; the slot walk's code is
//! several times larger, so a smaller instruction cache or a weaker indirect predictor
//! moves the balance). [`Walk::Auto`] therefore does not guess: it builds both and races
//! them on the puzzle's own tree, alternating, from the root, and keeps the slot walk only
//! when it is clearly faster ([`SLOTS_MARGIN`]). The race doubles as a cross-check: both
//! programs must count the same nodes, depth by depth, or the build is refused.
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
use crate::search::{NoControl, RunOptions};
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
    /// The slot walk where it applies, the list walk elsewhere.
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
}

/// The slot walk is kept only when its median per-round speed ratio to the list walk is
/// at least this: its first compile is 2-4x longer and its code several times larger, so
/// a tie (or noise) goes to the list walk.
pub const SLOTS_MARGIN: f64 = 1.03;

/// Alternated rounds of a race.
pub const RACE_ROUNDS: usize = 3;

/// Target length of one program's run in a round.
const ROUND_TARGET: Duration = Duration::from_millis(250);

/// Nodes of the calibration run that sizes the rounds.
const CALIBRATION_NODES: u64 = 2_000_000;

/// How the walk of a build was chosen.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "how", rename_all = "snake_case")]
pub enum Choice {
    /// Asked for by name.
    Forced,
    /// The slot walk does not apply to this plan: the list walk, no race.
    ListOnly,
    /// Raced now: `ratio` is the median of the rounds' slot/list speed ratios.
    Raced {
        /// Median slot/list nodes/s ratio.
        ratio: f64,
        /// Nodes each program walked per round (the first nodes of the root).
        nodes: u64,
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
            Choice::ListOnly => format!("{walk} walk (the slot walk does not apply here)"),
            Choice::Raced {
                ratio,
                nodes,
                rounds,
            } => format!(
                "{walk} walk (raced on this machine: the slot walk ran at {ratio:.3}x the list walk's speed, median of {rounds} rounds of {nodes} nodes)"
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

fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
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
    let applies = codegen::slot_walk_applies(plan);
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
    let list = CompiledProgram::build(plan, &list_options, build)?;
    let slot_key = match CompiledProgram::key_of(plan, &slot_options, build) {
        Ok(k) => k,
        Err(e) => return Ok(slot_failure(list, e)),
    };
    let cache = Cache::open(&build.cache_dir)?;
    let memo = cache.path(&format!(
        "e2fleet-walk-{}-{}",
        &list.key[..16],
        &slot_key[..16]
    ));
    if let Some((slots, ratio)) = remembered(&cache, &memo) {
        let program = if slots {
            match CompiledProgram::build(plan, &slot_options, build) {
                Ok(p) => p,
                Err(e) => return Ok(slot_failure(list, e)),
            }
        } else {
            list
        };
        return Ok(Built {
            program,
            choice: Choice::Remembered { ratio },
        });
    }
    let slots = match CompiledProgram::build(plan, &slot_options, build) {
        Ok(p) => p,
        Err(e) => return Ok(slot_failure(list, e)),
    };
    let (ratios, nodes) = race(plan, &list, &slots)?;
    let keep = keeps_slots(&ratios);
    let ratio = median(&ratios).unwrap_or(0.0);
    remember(&cache, &memo, keep, ratio);
    Ok(Built {
        program: if keep { slots } else { list },
        choice: Choice::Raced {
            ratio,
            nodes,
            rounds: ratios.len(),
        },
    })
}

fn slot_failure(list: CompiledProgram, e: CompileError) -> Built {
    Built {
        program: list,
        choice: Choice::SlotBuildFailed {
            error: e.to_string(),
        },
    }
}

/// Runs both programs on the first nodes of the root, alternating; returns the per-round
/// slot/list speed ratios and the nodes of a round. Refuses the pair if their counts
/// differ anywhere.
fn race(
    plan: &std::sync::Arc<SearchPlan>,
    list: &CompiledProgram,
    slots: &CompiledProgram,
) -> Result<(Vec<f64>, u64), CompileError> {
    let mut a = list.engine(plan.clone());
    let mut b = slots.engine(plan.clone());
    let timed =
        |e: &mut super::CompiledEngine, nodes: u64| -> Result<(UnitResult, f64), CompileError> {
            let options = RunOptions {
                budget: Some(nodes),
                max_solutions: 1,
            };
            let t = Instant::now();
            let r = e
                .run(&Unit::root(), options, &mut NoControl)
                .map_err(|e| CompileError::Start(format!("walk race: {e}")))?;
            Ok((r, t.elapsed().as_secs_f64().max(1e-9)))
        };
    let agree = |x: &UnitResult, y: &UnitResult, nodes: u64| {
        if x == y {
            Ok(())
        } else {
            Err(CompileError::Start(format!(
                "the list and slot walks disagree on the first {nodes} nodes of the root: one build is wrong"
            )))
        }
    };
    // start both processes and size the rounds on the list walk's speed
    let (x, _) = timed(&mut a, CALIBRATION_NODES)?;
    let (y, _) = timed(&mut b, CALIBRATION_NODES)?;
    agree(&x, &y, CALIBRATION_NODES)?;
    let (_, t) = timed(&mut a, CALIBRATION_NODES)?;
    let scale = ROUND_TARGET.as_secs_f64() / t;
    let nodes = ((CALIBRATION_NODES as f64 * scale) as u64).clamp(CALIBRATION_NODES, 1 << 30);
    let mut ratios = Vec::with_capacity(RACE_ROUNDS);
    for _ in 0..RACE_ROUNDS {
        let (x, tl) = timed(&mut a, nodes)?;
        let (y, ts) = timed(&mut b, nodes)?;
        agree(&x, &y, nodes)?;
        ratios.push(tl / ts);
    }
    Ok((ratios, nodes))
}

/// A remembered decision: (slot walk kept, ratio), when the sealed file is there and reads.
fn remembered(cache: &Cache, memo: &Path) -> Option<(bool, f64)> {
    if !cache.is_sealed(memo) {
        return None;
    }
    let text = std::fs::read_to_string(memo).ok()?;
    let mut words = text.split_whitespace();
    let slots = match words.next()? {
        "slots" => true,
        "list" => false,
        _ => return None,
    };
    let ratio = words.next()?.parse().ok()?;
    Some((slots, ratio))
}

/// Writes the decision (best effort: a worker that cannot write it races again next start).
fn remember(cache: &Cache, memo: &Path, slots: bool, ratio: f64) {
    let tmp = memo.with_extension("tmp");
    let text = format!("{} {ratio:.4}\n", if slots { "slots" } else { "list" });
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

    #[test]
    fn release_ids_name_the_walk_policy() {
        assert_eq!(Walk::List.release_suffix(), "");
        assert_ne!(Walk::Auto.release_suffix(), Walk::Slots.release_suffix());
    }
}
