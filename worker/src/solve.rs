//! `e2fleet-worker solve`: walk a whole tree, a budgeted slice of it, a continuation, or
//! every unit of a split, and report exact counts.
//!
//! With `--split-depth D` the tree is enumerated to depth D, every prefix unit is walked
//! (on `--threads` threads; with `--budget`, in budget-sized continuation slices until it
//! finishes) and the conservation check `enumeration + units = total` is printed per depth.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use e2fleet_engine::engine::{EngineError, EngineKind, Feed, Work};
use e2fleet_engine::plan::SearchPlan;
use e2fleet_engine::search::{RunOptions, Walker};
use e2fleet_engine::{OrderSpec, Placement, Puzzle, Unit, UnitResult};
use e2fleet_proto::text::thousands;
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

use crate::engine_args::{EngineArgs, EngineFactory};
use e2fleet_engine::formats::PuzzleArgs;

/// Flags of `solve`.
#[derive(Args, Debug)]
pub struct SolveArgs {
    #[command(flatten)]
    puzzle: PuzzleArgs,
    /// Fill order: row-major, rows:tl|tr|bl|br, cols:tl|tr|bl|br, spiral:tl|tr|bl|br, around:CELL,
    /// comb:K or cells:C1,C2,...
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
                    let mut feed = Slices {
                        units: &units,
                        next: &next,
                        done: &done,
                        bar: &bar,
                        options: RunOptions {
                            budget: args.budget,
                            max_solutions: args.max_solutions,
                        },
                        pending: Vec::new(),
                        open: HashMap::new(),
                        out: Vec::new(),
                        error: None,
                    };
                    if let Some(first) = feed.next() {
                        engine.run_feed(first, &mut feed);
                    }
                    match feed.error {
                        Some(e) => Err(e),
                        None => anyhow::Ok(feed.out),
                    }
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

/// Hands one thread's engine the units of a split, from a counter the threads share,
/// and, with a budget, each unit's continuation slices as they come back (the lane engine
/// walks two at a time); adds up each unit's slices.
struct Slices<'u> {
    units: &'u [Unit],
    next: &'u AtomicUsize,
    done: &'u AtomicUsize,
    bar: &'u ProgressBar,
    options: RunOptions,
    /// Continuations still to walk: (unit index, continuation).
    pending: Vec<(usize, Unit)>,
    /// Units partly walked: their slices so far, added up, and how many.
    open: HashMap<usize, (UnitResult, u64)>,
    /// Units walked to the end: (index, result, slices).
    out: Vec<(usize, UnitResult, u64)>,
    error: Option<anyhow::Error>,
}

impl<'a> Feed<'a> for Slices<'_> {
    fn next(&mut self) -> Option<Work<'a>> {
        if self.error.is_some() {
            return None;
        }
        let (tag, unit) = match self.pending.pop() {
            Some(p) => p,
            None => {
                let i = self.next.fetch_add(1, Ordering::Relaxed);
                (i, self.units.get(i)?.clone())
            }
        };
        Some(Work {
            tag,
            unit,
            options: self.options,
            control: Box::new(|_: u64| false),
        })
    }

    fn done(&mut self, work: Work<'a>, result: Result<UnitResult, EngineError>, _: f64) {
        let r = match result {
            Ok(r) => r,
            Err(e) => {
                self.error = Some(e.into());
                return;
            }
        };
        let cursor = r.cursor.clone();
        let (total, slices) = self
            .open
            .entry(work.tag)
            .or_insert_with(|| (UnitResult::default(), 0));
        if *slices == 0 {
            *total = r;
        } else {
            total.absorb(&r, self.options.max_solutions);
        }
        *slices += 1;
        match cursor {
            Some(c) => {
                let unit = self.units[work.tag].continuation(c);
                self.pending.push((work.tag, unit));
            }
            None => {
                let (mut total, slices) = self.open.remove(&work.tag).expect("a unit walked");
                total.cursor = None;
                self.out.push((work.tag, total, slices));
                let finished = self.done.fetch_add(1, Ordering::Relaxed) + 1;
                self.bar
                    .set_message(format!("{finished}/{} units", self.units.len()));
            }
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
    let _ = writeln!(out, "nodes      {}", thousands(r.nodes_total));
    let _ = writeln!(out, "solutions  {}", thousands(r.solutions_count));
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
