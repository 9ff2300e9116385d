//! `e2fleet-worker bench`: per-core placements/s of this machine's engine on benchmark
//! boards, with the exact node count walked and the compile time, so a speed figure is
//! always reported with the count that proves what was walked.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use e2fleet_engine::formats::{LoadOptions, load_file, parse_str};
use e2fleet_engine::search::RunOptions;
use e2fleet_engine::suite::{BUILTIN_PUZZLES, builtin_label, builtin_puzzle};
use e2fleet_engine::{OrderSpec, Unit};
use serde::Serialize;

use crate::engine_args::EngineArgs;

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
    #[command(flatten)]
    engine: EngineArgs,
    /// Print one JSON object per board.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct BoardReport {
    board: String,
    engine: String,
    engine_build: String,
    compile_s: f64,
    compile_cached: bool,
    runs: Vec<Run>,
    median_nodes_per_s: f64,
}

#[derive(Serialize, Clone)]
struct Run {
    nodes: u64,
    seconds: f64,
    nodes_per_s: f64,
    finished: bool,
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

/// Runs `bench`.
pub fn run(args: BenchArgs) -> Result<()> {
    let boards = if args.boards.is_empty() {
        DEFAULT_BOARDS.iter().map(|b| b.to_string()).collect()
    } else {
        args.boards.clone()
    };
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
        let mut engine = factory.make();
        let mut runs = Vec::new();
        for _ in 0..args.runs.max(1) {
            let limit = Duration::from_secs_f64(args.seconds);
            let t0 = Instant::now();
            let mut control = |_: u64| t0.elapsed() >= limit;
            let r = engine.run(&Unit::root(), RunOptions::default(), &mut control)?;
            let seconds = t0.elapsed().as_secs_f64();
            runs.push(Run {
                nodes: r.committed,
                seconds,
                nodes_per_s: r.committed as f64 / seconds,
                finished: r.finished(),
            });
        }
        let median =
            e2fleet_proto::api::status::median(runs.iter().map(|r| r.nodes_per_s).collect())
                .unwrap_or(0.0);
        let report = BoardReport {
            board: board.clone(),
            engine: engine.kind().to_string(),
            engine_build: engine.build_id(),
            compile_s,
            compile_cached,
            median_nodes_per_s: median,
            runs,
        };
        if args.json {
            println!("{}", serde_json::to_string(&report)?);
        } else {
            println!(
                "{}: {} engine, {:.1} M nodes/s per core (median of {}), compile {:.2} s{}",
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
            for r in &report.runs {
                println!(
                    "    {} nodes in {:.2} s = {:.1} M/s{}",
                    r.nodes,
                    r.seconds,
                    r.nodes_per_s / 1e6,
                    if r.finished { " (whole tree)" } else { "" }
                );
            }
        }
    }
    Ok(())
}
