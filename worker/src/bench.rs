//! `e2fleet-worker bench`: per-core nodes/s of this machine's engine on benchmark
//! boards, with the exact node count walked and the compile time, so a speed figure is
//! always reported with the count that proves what was walked.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use e2fleet_engine::engine::{Engine, EngineError, Feed, Work};
use e2fleet_engine::formats::{LoadOptions, load_file, parse_str};
use e2fleet_engine::search::RunOptions;
use e2fleet_engine::suite::{BUILTIN_PUZZLES, builtin_label, builtin_puzzle};
use e2fleet_engine::unit::{StopReason, UnitResult};
use e2fleet_engine::{OrderSpec, Unit};
use serde::Serialize;

use crate::engine_args::{EngineArgs, EngineFactory};

/// The boards `bench` runs when none is named: an easy and a hard 16x16 board, and a
/// small board with few colours (Brendan Owen's set 1, 7x7), all built into the binary.
pub const DEFAULT_BOARDS: [&str; 3] = ["bench-easy", "bench-hard", "brendan-set1-07x07"];

/// Flags of `bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Boards to run: a built-in name (bench-easy, bench-hard, brendan-set1-07x07, ...;
    /// default: those three) or a puzzle file.
    #[arg(long = "board")]
    boards: Vec<String>,
    /// Seconds of search per board and run.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Runs per board; the median is reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Fill order.
    #[arg(long, default_value = "row-major")]
    order: OrderSpec,
    /// Walk the units a job split at this depth would lease, one after another from the
    /// first, instead of the whole tree from the root: the per-core speed a fleet sees
    /// (0: the root; at most 64; the first 100,000 units of a larger split). Hard boards
    /// with many hints may need a deep split for more than a few units (bench-hard has 2
    /// units at depth 12 and ~150 at 48).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=64))]
    split_depth: u32,
    /// With `--split-depth`: walk each unit at most this many nodes (a budget) before
    /// taking the next, so a run samples many units instead of the first one or two; the
    /// same list of work for every engine, and a fairer picture of a split whose first
    /// units are far larger than a run.
    #[arg(long, requires = "split_depth", value_parser = clap::value_parser!(u64).range(1..))]
    unit_budget: Option<u64>,
    #[command(flatten)]
    engine: EngineArgs,
    /// Print one JSON object per board.
    #[arg(long)]
    json: bool,
}

/// The machine a bench ran on: speeds depend on the CPU's microarchitecture as much as on
/// the engine (the walk the race picks, and the ratios to other engines, differ between
/// Zen 4 and Zen 5 EPYCs), so a figure travels with it.
#[derive(Serialize, Clone)]
struct Machine {
    /// The CPU as the operating system names it.
    cpu: String,
    /// What compiled engines are built for: `--target-cpu`, and for `native` the CPU
    /// rustc resolves it to here (`native (znver4)`).
    target_cpu: String,
    /// Logical cores (a bench runs one engine thread).
    cores: usize,
    /// The compiler that builds compiled engines.
    rustc: String,
}

impl Machine {
    fn detect(engine: &EngineArgs) -> Machine {
        // rustc is asked which CPU `native` is only when engines are built for it
        let target_cpu = match engine.target_cpu.as_str() {
            "native" => crate::host::native_cpu(&engine.rustc)
                .map_or_else(|| "native".to_string(), |cpu| format!("native ({cpu})")),
            t => t.to_string(),
        };
        Machine {
            cpu: crate::host::cpu_model(),
            target_cpu,
            cores: crate::host::cores(),
            rustc: crate::host::rustc_version(&engine.rustc),
        }
    }
}

#[derive(Serialize)]
struct BoardReport {
    board: String,
    machine: Machine,
    engine: String,
    engine_build: String,
    compile_s: f64,
    compile_cached: bool,
    /// The walk a compiled engine runs (`list` or `slots`).
    #[serde(skip_serializing_if = "Option::is_none")]
    walk: Option<&'static str>,
    /// How that walk was chosen (a race's ratio when raced).
    #[serde(skip_serializing_if = "Option::is_none")]
    walk_choice: Option<e2fleet_engine::compiled::walk::Choice>,
    /// How `--engine auto` chose between the lane and compiled engines (a race's
    /// lanes/compiled ratio), when it raced them.
    #[serde(skip_serializing_if = "Option::is_none")]
    lanes_race: Option<e2fleet_engine::lanes_race::LanesRace>,
    /// Wall seconds from the puzzle to a ready engine: builds (both walks' under `--walk
    /// auto`), start and the race.
    setup_s: f64,
    runs: Vec<Run>,
    median_nodes_per_s: f64,
    /// The clock a busy core ran at right after the runs, measured by a chain of
    /// dependent one-cycle instructions (`host::clock_ghz`; absent off x86-64): an
    /// estimate.
    #[serde(skip_serializing_if = "Option::is_none")]
    clock_ghz: Option<f64>,
    /// That clock over the median nodes/s: the engine's cost per node in cycles, which
    /// compares machines of different clocks where nodes/s does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    cycles_per_node: Option<f64>,
    /// Depth of the units walked (0: the root unit).
    split_depth: u32,
    /// Units walked in order from the first (the first [`MAX_UNITS`] of a larger split).
    units: usize,
    /// Whether those are all the units of the split.
    all_units: bool,
    /// Each unit's budget (`--unit-budget`).
    #[serde(skip_serializing_if = "Option::is_none")]
    unit_budget: Option<u64>,
}

#[derive(Serialize, Clone)]
struct Run {
    nodes: u64,
    seconds: f64,
    nodes_per_s: f64,
    /// The whole tree (or every unit) was walked before the time ran out.
    finished: bool,
    /// Units walked to their end (with a split depth).
    units_done: usize,
    /// Units walked to their budget (`--unit-budget`).
    #[serde(skip_serializing_if = "Option::is_none")]
    units_budgeted: Option<usize>,
}

/// A board by built-in name, else as a file.
fn load_board(board: &str) -> Result<e2fleet_engine::Puzzle> {
    if let Some(text) = builtin_puzzle(board) {
        return Ok(parse_str(
            text,
            &builtin_label(board, text),
            &LoadOptions::default(),
        )?);
    }
    let path = PathBuf::from(board);
    if !path.exists() {
        anyhow::bail!(
            "no built-in board and no file named {board:?} (built-in: {})",
            BUILTIN_PUZZLES.join(", ")
        );
    }
    load_file(&path, &LoadOptions::default()).with_context(|| format!("cannot load {board}"))
}

/// The first units (at most [`MAX_UNITS`]) a job of `plan` split at `depth` would lease,
/// in order, and whether they are all of them (the root alone at 0). The nodes of the
/// cells above the split are the job's, not a unit's: not timed here.
fn units_at(plan: &e2fleet_engine::plan::SearchPlan, depth: usize) -> Result<(Vec<Unit>, bool)> {
    if depth == 0 {
        return Ok((vec![Unit::root()], true));
    }
    let depth = depth.min(plan.len());
    let mut units = Vec::new();
    let all = e2fleet_engine::search::Walker::new(plan).enumerate_first(
        &[],
        depth,
        MAX_UNITS,
        &mut |prefix| units.push(Unit::prefix(prefix.to_vec())),
    )?;
    anyhow::ensure!(
        !units.is_empty(),
        "no filling of the first {depth} cells: nothing to walk below them"
    );
    Ok((units, all))
}

/// Units `bench --split-depth` takes (it walks them from the first; a hard board's split
/// can have hundreds of millions, more than any run reaches and than memory holds, and
/// enumerating no further than these keeps the set-up short).
const MAX_UNITS: usize = 100_000;

/// Hands `bench`'s units to an engine in order until the time is up, and adds up
/// what they walked.
struct Timed<'u> {
    units: &'u [Unit],
    /// Each unit's budget (`--unit-budget`).
    budget: Option<u64>,
    next: usize,
    t0: Instant,
    limit: Duration,
    nodes: u64,
    units_done: usize,
    /// Units walked to their budget (`--unit-budget`).
    budgets_spent: usize,
    /// A unit was stopped by the time: the run is over.
    over: bool,
    error: Option<EngineError>,
}

impl<'a> Feed<'a> for Timed<'_> {
    fn next(&mut self) -> Option<Work<'a>> {
        if self.over || self.error.is_some() || self.t0.elapsed() >= self.limit {
            return None;
        }
        let unit = self.units.get(self.next)?.clone();
        self.next += 1;
        let (t0, limit) = (self.t0, self.limit);
        Some(Work {
            tag: self.next - 1,
            unit,
            options: RunOptions {
                budget: self.budget,
                ..RunOptions::default()
            },
            control: Box::new(move |_: u64| t0.elapsed() >= limit),
        })
    }

    fn done(&mut self, _: Work<'a>, result: Result<UnitResult, EngineError>, _: f64) {
        match result {
            Ok(r) => {
                self.nodes += r.committed;
                match r.stop {
                    Some(StopReason::Finished) => self.units_done += 1,
                    // walked to its budget: the next unit
                    Some(StopReason::Budget) => self.budgets_spent += 1,
                    _ => self.over = true,
                }
            }
            Err(e) => self.error = Some(e),
        }
    }
}

/// Runs `bench`.
pub fn run(args: BenchArgs) -> Result<()> {
    let boards = if args.boards.is_empty() {
        DEFAULT_BOARDS.iter().map(|b| b.to_string()).collect()
    } else {
        args.boards.clone()
    };
    let machine = Machine::detect(&args.engine);
    if !args.json {
        println!(
            "machine: {}, engines built for {}, {} cores, {}",
            machine.cpu,
            machine.target_cpu,
            machine.cores,
            if machine.rustc.is_empty() {
                "no rustc"
            } else {
                &machine.rustc
            }
        );
    }
    for board in boards {
        let puzzle = load_board(&board)?;
        let plan = e2fleet_engine::SearchSpec::new(puzzle, &args.order)?.plan;
        let started = Instant::now();
        let factory = args.engine.factory(&plan, false)?;
        let build_wall = started.elapsed();
        let (compile_s, compile_cached) = match factory.program() {
            Some(p) => (p.compile_time.as_secs_f64(), p.cached),
            None => (build_wall.as_secs_f64(), false),
        };
        let (units, all_units) = units_at(&plan, args.split_depth as usize)?;
        let mut engine = factory.make();
        let runs = timed_runs(engine.as_mut(), &units, all_units, &args)?;
        let median =
            e2fleet_proto::api::status::median(runs.iter().map(|r| r.nodes_per_s).collect())
                .unwrap_or(0.0);
        let clock_ghz = crate::host::clock_ghz();
        let cycles_per_node = clock_ghz
            .filter(|_| median > 0.0)
            .map(|ghz| ghz * 1e9 / median);
        let report = BoardReport {
            board: board.clone(),
            machine: machine.clone(),
            engine: engine.kind().to_string(),
            engine_build: engine.build_id(),
            compile_s,
            compile_cached,
            walk: factory.built().map(|b| b.walk_name()),
            walk_choice: factory.built().map(|b| b.choice.clone()),
            lanes_race: factory.lanes_race().cloned(),
            setup_s: build_wall.as_secs_f64(),
            median_nodes_per_s: median,
            clock_ghz,
            cycles_per_node,
            runs,
            split_depth: args.split_depth,
            units: units.len(),
            all_units,
            unit_budget: args.unit_budget,
        };
        if args.json {
            println!("{}", serde_json::to_string(&report)?);
        } else {
            print_report(&report, &factory);
        }
    }
    Ok(())
}

/// `args.runs` timed runs over `units` in order, as many at once as the engine walks
/// (the lane engine several), until the time is up: then no new unit starts and the ones
/// walking stop at their next poll.
fn timed_runs(
    engine: &mut dyn Engine,
    units: &[Unit],
    all_units: bool,
    args: &BenchArgs,
) -> Result<Vec<Run>> {
    let mut runs = Vec::new();
    for _ in 0..args.runs.max(1) {
        let limit = Duration::from_secs_f64(args.seconds);
        let t0 = Instant::now();
        // the units in order, as many at once as the engine walks (the lane engine
        // two), until the time is up: then no new unit starts and the ones walking
        // stop at their next poll
        let mut feed = Timed {
            units,
            budget: args.unit_budget,
            next: 0,
            t0,
            limit,
            nodes: 0,
            units_done: 0,
            budgets_spent: 0,
            over: false,
            error: None,
        };
        match feed.next() {
            // the root alone: the engine's walk of one unit (the lane engine cuts it into
            // pieces for its lanes)
            Some(mut root) if units.len() == 1 => {
                let result = engine.run(&root.unit, root.options, root.control.as_mut());
                feed.done(root, result, 0.0);
            }
            Some(first) => engine.run_feed(first, &mut feed),
            None => {}
        }
        if let Some(e) = feed.error {
            return Err(e.into());
        }
        let (nodes, units_done, budgets_spent) = (feed.nodes, feed.units_done, feed.budgets_spent);
        let seconds = t0.elapsed().as_secs_f64();
        runs.push(Run {
            nodes,
            seconds,
            nodes_per_s: nodes as f64 / seconds,
            finished: all_units && units_done + budgets_spent == units.len(),
            units_done,
            units_budgeted: args.unit_budget.map(|_| budgets_spent),
        });
    }
    Ok(runs)
}

/// A board's report as text.
fn print_report(report: &BoardReport, factory: &EngineFactory) {
    let walked = match report.split_depth {
        0 => String::new(),
        d if report.all_units => {
            format!(", the {} units of a split at depth {d}", report.units)
        }
        d => format!(", the first {} units of a split at depth {d}", report.units),
    };
    let walked = match report.unit_budget {
        Some(b) => format!("{walked}, at most {b} nodes each"),
        None => walked,
    };
    let cycles = match (report.cycles_per_node, report.clock_ghz) {
        (Some(c), Some(ghz)) => format!(" = {c:.1} cycles per node at ~{ghz:.2} GHz"),
        _ => String::new(),
    };
    println!(
        "{}: {} engine, {:.1} M nodes/s per core (median of {}{walked}){cycles}, compile {:.2} s{}",
        report.board,
        report.engine,
        report.median_nodes_per_s / 1e6,
        report.runs.len(),
        report.compile_s,
        if report.compile_cached {
            " (cached)"
        } else {
            ""
        }
    );
    if let Some(b) = factory.built() {
        println!("    {}; ready in {:.2} s", b.describe(), report.setup_s);
    }
    if let Some(r) = factory.lanes_race() {
        println!(
            "    the lane engine against the compiled engine on this puzzle: {:.2}x ({}); the {} engine kept",
            r.ratio,
            match r.rounds {
                0 => "remembered".to_string(),
                n => format!("{n} alternated rounds"),
            },
            if r.lanes { "lane" } else { "compiled" }
        );
    }
    for r in &report.runs {
        let done = match (report.split_depth, r.finished) {
            (0, true) => " (whole tree)".to_string(),
            (0, false) => String::new(),
            (_, true) => " (every unit)".to_string(),
            (_, false) => format!(" ({} units walked to their end)", r.units_done),
        };
        let done = match r.units_budgeted {
            Some(b) => format!("{done} ({b} units to their budget)"),
            None => done,
        };
        println!(
            "    {} nodes in {:.2} s = {:.1} M/s{done}",
            r.nodes,
            r.seconds,
            r.nodes_per_s / 1e6,
        );
    }
}
