//! Flags that choose and build an engine, shared by `solve`, `bench` and `run`.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use e2fleet_engine::compiled::codegen::Prune;
use e2fleet_engine::compiled::walk::{self, Built, Walk};
use e2fleet_engine::compiled::{BuildOptions, CodegenOptions, CompiledProgram};
use e2fleet_engine::engine::{Engine, EngineKind, ReferenceEngine};
use e2fleet_engine::lanes::{LaneEngine, LaneForm, LaneTables};
use e2fleet_engine::lanes_race::{self, LanesRace};
use e2fleet_engine::plan::SearchPlan;

/// Which engine to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EngineChoice {
    /// On the boards the lane engine takes (up to 256 pieces and 32 colours, with at most
    /// 16 candidates a bucket past 128 pieces or 16 colours), the faster of the lane and
    /// compiled engines on this puzzle and machine (raced once, ~2 s, remembered in the
    /// cache); the lane engine without rustc. Elsewhere compiled when rustc is available,
    /// reference otherwise.
    Auto,
    /// The portable table-driven interpreter.
    Reference,
    /// Puzzle-specialised Rust built with the local rustc.
    Compiled,
    /// The branch-free walk of several units at once (two on boards of at most 128
    /// pieces and 16 colours, such as Brendan's sets; four on larger ones), in this
    /// process, on the boards it takes (no rustc needed), without a race; others as
    /// `auto`.
    Lanes,
}

/// Engine flags.
#[derive(Args, Debug, Clone)]
pub struct EngineArgs {
    /// Engine: auto (compiled if rustc is there, else reference; on the boards the lane
    /// engine takes, the lane engine instead where a race on the puzzle finds it faster,
    /// or without rustc), reference, compiled, or lanes (the lane engine on every board
    /// it takes, several units at once in one thread; others as auto).
    #[arg(long, value_enum, default_value = "auto")]
    pub engine: EngineChoice,
    /// Where compiled engines are cached.
    #[arg(long, env = "E2FLEET_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// rustc to build compiled engines with.
    #[arg(long, env = "RUSTC", default_value = "rustc")]
    pub rustc: PathBuf,
    /// CPU to compile for (`native`, a CPU name, or `generic` for a portable build).
    #[arg(long, default_value = "native")]
    pub target_cpu: String,
    /// Depths fused into one function in compiled engines (default: chosen per puzzle,
    /// 6, or a board's row of 7-10 cells on boards of at most 128 pieces).
    #[arg(long)]
    pub group: Option<usize>,
    /// Pruned levels of the list walk (boards of more than 128 pieces): `EVERY,LAG`
    /// (depths per level, and how far above a level's first depth its cut starts), or
    /// `off`. Default: levels of four groups, cuts starting two groups up. Same counts
    /// either way.
    #[arg(long, value_parser = parse_prune)]
    pub prune: Option<Prune>,
    /// Walk of compiled engines: `auto` builds both walks on boards a walk by slots
    /// applies to and races them on the puzzle for ~2 s (up to ~6 s when they are close),
    /// once per puzzle and machine (remembered in the cache); `list`; or `slots`. On
    /// boards of more than 128 pieces in row or column order the slot walk (one branch
    /// per candidate slot, a ~2x longer first compile; on Zen 5 ~1.2-1.3x on hard 16x16
    /// boards and 0.8-0.9x on bench-easy, on Zen 4 0.96-1.06x and 1.17x); on low-colour
    /// boards of at most 128 pieces the next bucket looked up from the slot in hand (Zen
    /// 4: Brendan 6x6 to 9x9 1.05-1.09x, an E2 clue puzzle 0.92x). Same counts either
    /// way.
    #[arg(long, value_enum, default_value = "auto")]
    pub walk: Walk,
    /// Same as `--walk slots`.
    #[arg(long, hide = true)]
    pub slots: bool,
    /// Also write the generated source of the compiled engine to this file: the walk that
    /// runs (with `--walk auto`, the race's winner), or, when no compiled engine is built,
    /// the walk asked for.
    #[arg(long)]
    pub emit_source: Option<PathBuf>,
    /// Test only: build a compiled engine that miscounts at this depth (fault injection,
    /// to prove self-tests and cross-checks catch a broken build).
    #[arg(long, hide = true)]
    pub fault_depth: Option<usize>,
    /// The lane engine only in its narrow form ([`EngineArgs::unraced`]).
    #[arg(skip)]
    narrow_lanes_only: bool,
}

/// `--prune`: `off` or `EVERY,LAG`.
fn parse_prune(s: &str) -> Result<Prune, String> {
    if s == "off" {
        return Ok(Prune::OFF);
    }
    let (every, lag) = s.split_once(',').ok_or("expected EVERY,LAG or off")?;
    let number = |v: &str| v.trim().parse::<usize>().map_err(|e| format!("{v:?}: {e}"));
    Ok(Prune {
        every: number(every)?,
        lag: number(lag)?,
        ..Prune::default_for(1)
    })
}

/// Makes engines of one kind for one plan (one per thread).
pub struct EngineFactory {
    plan: Arc<SearchPlan>,
    built: Option<Built>,
    lanes: Option<Arc<LaneTables>>,
    race: Option<LanesRace>,
}

impl EngineArgs {
    /// Whether these flags walk `plan` with the lane engine without compiling (`--engine
    /// lanes` on a board it takes).
    pub fn lanes_take(&self, plan: &SearchPlan) -> bool {
        self.engine == EngineChoice::Lanes
            && LaneTables::new(plan)
                .is_ok_and(|t| !self.narrow_lanes_only || t.form() == LaneForm::Narrow)
    }

    /// The build options these flags describe.
    pub fn build_options(&self) -> BuildOptions {
        let mut o = BuildOptions {
            rustc: self.rustc.clone(),
            target_cpu: (self.target_cpu != "generic").then(|| self.target_cpu.clone()),
            ..BuildOptions::default()
        };
        if let Some(dir) = &self.cache_dir {
            o.cache_dir = dir.clone();
        }
        o
    }

    fn codegen(&self) -> CodegenOptions {
        CodegenOptions {
            group: self.group,
            fault_depth: self.fault_depth,
            prune: self.prune,
            ..CodegenOptions::default()
        }
    }

    /// The walk policy (`--slots` is `--walk slots`).
    pub fn walk(&self) -> Walk {
        if self.slots { Walk::Slots } else { self.walk }
    }

    /// The same engines without races, for runs that check counts rather than speed
    /// ([`crate::verify::run_units`]): the slot walk instead of a race for the walk
    /// (`auto`; a forced walk stays), and for `auto` the lane engine on the boards its
    /// narrow form takes (at most 128 pieces and 16 colours) instead of a race against the
    /// compiled engine, and the compiled engine on the others: so a suite checks both
    /// engines, as every board of the suite is one the lane engine's wide form takes (and
    /// a job's race checks the two engines' results against each other on its own units
    /// before either walks one).
    pub fn unraced(&self) -> EngineArgs {
        let mut e = self.clone();
        if e.walk() == Walk::Auto {
            e.walk = Walk::Slots;
        }
        if e.engine == EngineChoice::Auto {
            e.engine = EngineChoice::Lanes;
            e.narrow_lanes_only = true;
        }
        e
    }

    /// The engine kind and release these flags will run, for the hardware class: compiled
    /// when chosen (or, for `auto` and `lanes`, when rustc answers), reference otherwise;
    /// `auto` and `lanes` add the lane engine's release (`auto` names the engine of the
    /// boards past the lane engine's tables, `lanes` the lane engine).
    pub fn release(&self, rustc_version: &str) -> (EngineKind, String) {
        let (kind, release) = self.release_past_lanes(rustc_version);
        let lanes = e2fleet_engine::lanes::lanes_release();
        match self.engine {
            EngineChoice::Auto => (kind, format!("{release}+{lanes}")),
            EngineChoice::Lanes => (EngineKind::Lanes, format!("{lanes}+{release}")),
            _ => (kind, release),
        }
    }

    /// The engine kind and release of the boards the lane engine does not take.
    fn release_past_lanes(&self, rustc_version: &str) -> (EngineKind, String) {
        let compiled = match self.engine {
            EngineChoice::Reference => false,
            EngineChoice::Compiled => true,
            EngineChoice::Auto | EngineChoice::Lanes => !rustc_version.is_empty(),
        };
        if compiled {
            let target = self.build_options().target_cpu;
            (
                EngineKind::Compiled,
                self.walk().release_id(&self.codegen(), target.as_deref()),
            )
        } else {
            (
                EngineKind::Reference,
                e2fleet_engine::engine::reference_release(),
            )
        }
    }

    /// The engine kind these flags ask for when leasing work (what they will run if the
    /// compiled build works).
    pub fn kind(&self) -> EngineKind {
        match self.engine {
            EngineChoice::Reference => EngineKind::Reference,
            EngineChoice::Lanes => EngineKind::Lanes,
            EngineChoice::Auto | EngineChoice::Compiled => EngineKind::Compiled,
        }
    }

    /// Builds (or finds) what the chosen engine needs for `plan`.
    pub fn factory(&self, plan: &Arc<SearchPlan>, verbose: bool) -> Result<EngineFactory> {
        let codegen = self.codegen();
        // `--emit-source`: the walk that runs (a compiled build's `slots`); with no
        // compiled build (the lane or reference engine, or a build that failed: its source
        // is what the user wants to read), the one asked for (`auto`: the walk by slots,
        // where it applies)
        let emit = |slots: Option<bool>| -> Result<()> {
            let Some(path) = &self.emit_source else {
                return Ok(());
            };
            let emitted = CodegenOptions {
                slots: slots.unwrap_or(self.walk() != Walk::List),
                ..codegen.clone()
            };
            let source = e2fleet_engine::compiled::codegen::emit(plan, &emitted, "");
            std::fs::write(path, source).with_context(|| format!("cannot write {}", path.display()))
        };
        let tables = match self.engine {
            EngineChoice::Auto | EngineChoice::Lanes => match LaneTables::new(plan) {
                Ok(t) if self.narrow_lanes_only && t.form() != LaneForm::Narrow => None,
                Ok(t) => Some(Arc::new(t)),
                // a board past the lane engine's tables: compiled (or reference)
                Err(e) => {
                    if verbose && self.engine == EngineChoice::Lanes {
                        eprintln!(
                            "note: the lane engine does not take this board ({e}); compiled or reference as --engine auto"
                        );
                    }
                    None
                }
            },
            _ => None,
        };
        let lanes = |tables: Arc<LaneTables>, race: Option<LanesRace>| -> Result<EngineFactory> {
            emit(None)?;
            Ok(EngineFactory {
                plan: plan.clone(),
                built: None,
                lanes: Some(tables),
                race,
            })
        };
        if self.engine == EngineChoice::Lanes
            && let Some(t) = &tables
        {
            return lanes(t.clone(), None);
        }
        let build = || walk::build(plan, &codegen, &self.build_options(), self.walk());
        let built = match self.engine {
            EngineChoice::Reference => Ok(None),
            EngineChoice::Compiled => build()
                .map(Some)
                .context("cannot build the compiled engine"),
            EngineChoice::Auto | EngineChoice::Lanes => match build() {
                Ok(b) => Ok(Some(b)),
                // no compiled engine: the lane engine where it walks (one lane for a lone
                // unit is still ~3x the reference engine), else the reference engine
                Err(_) if tables.is_some() => {
                    return lanes(tables.clone().expect("some"), None);
                }
                Err(e) => {
                    if verbose {
                        eprintln!("note: using the reference engine: {e}");
                    }
                    Ok(None)
                }
            },
        };
        // `auto`, both engines at hand: the faster on this puzzle and machine, raced
        // (remembered in the cache); a split's units and a lone unit alike (the lane
        // engine walks a lone unit in all its lanes, cut into pieces)
        let mut race = None;
        if self.engine == EngineChoice::Auto
            && let (Ok(Some(b)), Some(t)) = (&built, &tables)
        {
            let r = lanes_race::race(plan, &b.program, t, &self.build_options())
                .context("racing the lane engine against the compiled engine")?;
            if verbose {
                eprintln!(
                    "lane engine against the compiled engine on this puzzle: {:.2}x ({}), {} kept",
                    r.ratio,
                    if r.rounds == 0 {
                        "remembered".to_string()
                    } else {
                        format!("{} rounds", r.rounds)
                    },
                    if r.lanes {
                        "the lane engine"
                    } else {
                        "the compiled engine"
                    }
                );
            }
            if r.lanes {
                return lanes(t.clone(), Some(r));
            }
            race = Some(r);
        }
        emit(match &built {
            Ok(Some(b)) => Some(b.program.slots),
            _ => None,
        })?;
        let built = built?;
        if verbose && let Some(b) = &built {
            let p = &b.program;
            if p.cached {
                eprintln!(
                    "compiled engine {} (cached), {}",
                    &p.key()[..12],
                    b.describe()
                );
            } else {
                eprintln!(
                    "compiled engine {} built in {:.2} s, {}",
                    &p.key()[..12],
                    p.compile_time.as_secs_f64(),
                    b.describe()
                );
            }
        }
        Ok(EngineFactory {
            plan: plan.clone(),
            built,
            lanes: None,
            race,
        })
    }
}

impl EngineFactory {
    /// A factory for the reference engine.
    pub fn reference(plan: &Arc<SearchPlan>) -> EngineFactory {
        EngineFactory {
            plan: plan.clone(),
            built: None,
            lanes: None,
            race: None,
        }
    }

    /// The plan the engines walk.
    pub fn plan(&self) -> &Arc<SearchPlan> {
        &self.plan
    }

    /// How `auto` chose between the lane and compiled engines, when it raced them.
    pub fn lanes_race(&self) -> Option<&LanesRace> {
        self.race.as_ref()
    }

    /// A new engine instance.
    pub fn make(&self) -> Box<dyn Engine> {
        if let Some(tables) = &self.lanes {
            return Box::new(LaneEngine::with_tables(self.plan.clone(), tables.clone()));
        }
        match self.program() {
            Some(p) => Box::new(p.engine(self.plan.clone())),
            None => Box::new(ReferenceEngine::new(self.plan.clone())),
        }
    }

    /// The compiled program, when the engine is compiled.
    pub fn program(&self) -> Option<&CompiledProgram> {
        self.built.as_ref().map(|b| &b.program)
    }

    /// The compiled build with how its walk was chosen, when the engine is compiled.
    pub fn built(&self) -> Option<&Built> {
        self.built.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prune_reads_off_or_every_and_lag() {
        assert_eq!(parse_prune("off").unwrap(), Prune::OFF);
        let p = parse_prune("24,12").unwrap();
        assert_eq!((p.every, p.lag), (24, 12));
        assert_eq!(
            (p.few, p.many),
            (Prune::default_for(1).few, Prune::default_for(1).many)
        );
        for bad in ["", "24", "24,x", "-1,2", "on"] {
            assert!(parse_prune(bad).is_err(), "{bad:?}");
        }
    }
}
