//! `e2fleet-worker solve`: walk a whole tree, a budgeted slice of it, a continuation, or
//! every unit of a split, and report exact counts.
//!
//! With `--split-depth D` the tree is enumerated to depth D, every prefix unit is walked
//! (on `--threads` threads; with `--budget`, in budget-sized continuation slices until it
//! finishes) and the conservation check `enumeration + units = total` is printed per depth.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use e2fleet_engine::engine::{Engine, EngineKind};
use e2fleet_engine::plan::SearchPlan;
use e2fleet_engine::search::{RunOptions, Walker};
use e2fleet_engine::{OrderSpec, Placement, Puzzle, Unit, UnitResult};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

use crate::engine_args::{EngineArgs, EngineFactory};
use e2fleet_engine::formats::PuzzleArgs;

/// Flags of `solve`.
#[derive(Args, Debug)]
pub struct SolveArgs {
    #[command(flatten)]
    puzzle: PuzzleArgs,
    /// Fill order: row-major, rows:tl|tr|bl|br, cols:tl|tr|bl|br, comb:K or cells:C1,C2,...
    #[arg(long, default_value = "row-major")]
    order: OrderSpec,
    /// Split the tree into prefix units at this depth and walk each one.
    #[arg(long)]
    split_depth: Option<usize>,
    /// Stop after committing this many nodes and print the cursor (per slice with
    /// --split-depth, where every unit is then resumed until it finishes).
    #[arg(long)]
    budget: Option<u64>,
    #[command(flatten)]
    engine: EngineArgs,
    /// Print one JSON object instead of the human summary.
    #[arg(long)]
    json: bool,
    /// Resume a continuation: a JSON cursor list (for the whole tree), a JSON object
    /// `{"prefix": [...], "cursor": [...]}`, or a file holding either.
    #[arg(long)]
    resume: Option<String>,
    /// Solution boards to keep (the count is always exact).
    #[arg(long, default_value_t = 100)]
    max_solutions: usize,
    /// Threads for --split-depth (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
}

/// The JSON report of `solve`.
#[derive(Serialize)]
struct Report {
    puzzle: String,
    order: String,
    engine: EngineKind,
    engine_build: String,
    prefix: Vec<Placement>,
    nodes_total: u64,
    nodes_by_depth: Vec<u64>,
    solutions_count: u64,
    solutions: Vec<Vec<Placement>>,
    max_depth: usize,
    deepest: Vec<Placement>,
    elapsed_s: f64,
    nodes_per_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    cursor: Option<Vec<Placement>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    split: Option<SplitReport>,
}

/// The conservation check of a split run.
#[derive(Serialize)]
struct SplitReport {
    depth: usize,
    units: usize,
    enumeration_nodes: u64,
    enumeration_by_depth: Vec<u64>,
    unit_nodes: u64,
    slices: u64,
    conservation_ok: bool,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ResumeInput {
    Cursor(Vec<Placement>),
    Unit {
        #[serde(default)]
        prefix: Vec<Placement>,
        cursor: Vec<Placement>,
    },
}

fn parse_resume(text: &str) -> Result<Unit> {
    let json = if text.trim_start().starts_with(['[', '{']) {
        text.to_string()
    } else {
        std::fs::read_to_string(text).with_context(|| format!("cannot read resume file {text}"))?
    };
    let input: ResumeInput = serde_json::from_str(&json)
        .context("--resume must be a JSON cursor list or {prefix, cursor}")?;
    Ok(match input {
        ResumeInput::Cursor(cursor) => Unit {
            prefix: Vec::new(),
            cursor,
        },
        ResumeInput::Unit { prefix, cursor } => Unit { prefix, cursor },
    })
}

/// Runs `solve`.
pub fn run(args: SolveArgs) -> Result<()> {
    let loaded = args.puzzle.load().context("cannot load the puzzle")?;
    for note in &loaded.notes {
        eprintln!("note: {note}");
    }
    let puzzle = loaded.puzzle;
    let spec = e2fleet_engine::SearchSpec::new(puzzle, &args.order).context("bad fill order")?;
    let (puzzle, plan) = (&spec.puzzle, spec.plan.clone());
    let factory = args.engine.factory(&plan, !args.json)?;
    let unit = match &args.resume {
        Some(text) => parse_resume(text)?,
        None => Unit::root(),
    };
    let started = Instant::now();
    let (result, split) = match args.split_depth {
        None => (run_single(&args, &factory, &unit)?, None),
        Some(depth) => {
            if !unit.cursor.is_empty() {
                bail!("--split-depth cannot be combined with a --resume cursor");
            }
            let (r, s) = run_split(&args, &plan, &factory, &unit, depth)?;
            (r, Some(s))
        }
    };
    let elapsed = started.elapsed().as_secs_f64();
    let engine = factory.make();
    let nodes_total = split
        .as_ref()
        .map(|s| s.enumeration_nodes + s.unit_nodes)
        .unwrap_or(result.committed);
    let report = Report {
        puzzle: puzzle.name().to_string(),
        order: args.order.to_string(),
        engine: engine.kind(),
        engine_build: engine.build_id(),
        prefix: unit.prefix.clone(),
        nodes_total,
        nodes_by_depth: result.nodes_by_depth.clone(),
        solutions_count: result.solutions_count,
        solutions: result.solutions.clone(),
        max_depth: result.max_depth,
        deepest: result.deepest.clone(),
        elapsed_s: elapsed,
        nodes_per_s: if elapsed > 0.0 {
            nodes_total as f64 / elapsed
        } else {
            0.0
        },
        cursor: result.cursor.clone(),
        split,
    };
    let text = if args.json {
        format!("{}\n", serde_json::to_string(&report)?)
    } else {
        human(puzzle, &report)
    };
    write_stdout(&text)
}

/// Writes to stdout; a closed pipe (`| head`) is not an error worth a panic.
fn write_stdout(text: &str) -> Result<()> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

fn progress_bar(json: bool) -> ProgressBar {
    if json {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}").expect("valid template"),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

fn run_single(args: &SolveArgs, factory: &EngineFactory, unit: &Unit) -> Result<UnitResult> {
    let mut engine = factory.make();
    let bar = progress_bar(args.json);
    let started = Instant::now();
    let mut control = |committed: u64| {
        let rate = committed as f64 / started.elapsed().as_secs_f64().max(1e-9);
        bar.set_message(format!("{committed} nodes, {:.1} M nodes/s", rate / 1e6));
        false
    };
    let options = RunOptions {
        budget: args.budget,
        max_solutions: args.max_solutions,
    };
    let result = engine.run(unit, options, &mut control)?;
    bar.finish_and_clear();
    Ok(result)
}

fn run_split(
    args: &SolveArgs,
    plan: &Arc<SearchPlan>,
    factory: &EngineFactory,
    root: &Unit,
    depth: usize,
) -> Result<(UnitResult, SplitReport)> {
    let mut prefixes = Vec::new();
    let enumeration = Walker::new(plan)
        .enumerate(&root.prefix, depth, &mut |p| prefixes.push(p.to_vec()))
        .context("cannot enumerate prefixes")?;
    let units: Vec<Unit> = prefixes.into_iter().map(Unit::prefix).collect();
    let threads = args.threads.unwrap_or_else(crate::host::cores).max(1);
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let bar = progress_bar(args.json);
    let results: Vec<Result<(UnitResult, u64)>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut engine = factory.make();
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(unit) = units.get(i) else { break };
                        let (result, slices) = walk_unit_in_slices(engine.as_mut(), unit, args)?;
                        let finished = done.fetch_add(1, Ordering::Relaxed) + 1;
                        bar.set_message(format!("{finished}/{} units", units.len()));
                        out.push((i, result, slices));
                    }
                    anyhow::Ok(out)
                })
            })
            .collect();
        let mut all: Vec<(usize, UnitResult, u64)> = Vec::new();
        let mut errors = Vec::new();
        for w in workers {
            match w.join().expect("worker thread panicked") {
                Ok(v) => all.extend(v),
                Err(e) => errors.push(Err(e)),
            }
        }
        all.sort_by_key(|(i, _, _)| *i);
        errors
            .into_iter()
            .chain(all.into_iter().map(|(_, r, s)| Ok((r, s))))
            .collect()
    });
    bar.finish_and_clear();
    let mut total = UnitResult {
        nodes_by_depth: enumeration.clone(),
        ..UnitResult::default()
    };
    let mut unit_nodes = 0;
    let mut slices = 0;
    for r in results {
        let (r, s) = r?;
        unit_nodes += r.committed;
        slices += s;
        total.absorb(&r, args.max_solutions);
    }
    let enumeration_nodes: u64 = enumeration.iter().sum();
    total.committed = enumeration_nodes + unit_nodes;
    let conservation_ok = total.nodes_by_depth.iter().sum::<u64>() == total.committed;
    if total.max_depth < depth && enumeration[depth.saturating_sub(1)] > 0 {
        total.max_depth = depth;
    }
    Ok((
        total,
        SplitReport {
            depth,
            units: units.len(),
            enumeration_nodes,
            enumeration_by_depth: enumeration,
            unit_nodes,
            slices,
            conservation_ok,
        },
    ))
}

/// Walks a unit to the end, in budget-sized continuation slices when a budget is set.
fn walk_unit_in_slices(
    engine: &mut dyn Engine,
    unit: &Unit,
    args: &SolveArgs,
) -> Result<(UnitResult, u64)> {
    let options = RunOptions {
        budget: args.budget,
        max_solutions: args.max_solutions,
    };
    let mut total = UnitResult::default();
    let mut current = unit.clone();
    let mut slices = 0;
    loop {
        let r = engine.run(&current, options, &mut |_| false)?;
        slices += 1;
        let cursor = r.cursor.clone();
        if total.nodes_by_depth.is_empty() {
            total = r;
        } else {
            total.absorb(&r, args.max_solutions);
        }
        match cursor {
            None => {
                total.cursor = None;
                return Ok((total, slices));
            }
            Some(c) => current = unit.continuation(c),
        }
    }
}

fn human(puzzle: &Puzzle, r: &Report) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "puzzle     {} ({}x{}, {} hints)",
        r.puzzle,
        puzzle.width(),
        puzzle.height(),
        puzzle.hints().len()
    );
    let _ = writeln!(out, "order      {}", r.order);
    let _ = writeln!(out, "engine     {} ({})", r.engine, r.engine_build);
    if let Some(s) = &r.split {
        let _ = writeln!(
            out,
            "split      depth {}: {} units, enumeration {} nodes + units {} nodes ({} slices)",
            s.depth, s.units, s.enumeration_nodes, s.unit_nodes, s.slices
        );
        let _ = writeln!(
            out,
            "conservation {}",
            if s.conservation_ok {
                "holds: enumeration + units = total, depth by depth"
            } else {
                "BROKEN"
            }
        );
    }
    let _ = writeln!(out, "nodes      {}", r.nodes_total);
    let _ = writeln!(out, "solutions  {}", r.solutions_count);
    let _ = writeln!(
        out,
        "max depth  {} of {}",
        r.max_depth,
        r.nodes_by_depth.len()
    );
    let _ = writeln!(
        out,
        "time       {:.3} s, {:.2} M nodes/s (one process)",
        r.elapsed_s,
        r.nodes_per_s / 1e6
    );
    if let Some(c) = &r.cursor {
        let _ = writeln!(
            out,
            "stopped    budget reached; resume with --resume '{}'",
            serde_json::to_string(c).unwrap_or_default()
        );
    }
    let _ = writeln!(out, "by depth   {:?}", r.nodes_by_depth);
    out
}
