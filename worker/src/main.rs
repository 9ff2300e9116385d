//! # e2fleet-worker
//!
//! The program volunteers run. Today it carries the single-machine commands:
//! `solve` (walk a puzzle's tree, whole or split into units, with exact per-depth counts)
//! and the shared puzzle-loading flags. The fleet client (`run`) builds on the same
//! engine interface.
//!
//! # Layout
//! - `main.rs`: the command line (clap) and dispatch.
//! - `puzzle_args.rs`: flags that say how to read a puzzle file.
//! - `solve.rs`: the `solve` command, its JSON report and the human summary.
//! - `bench.rs`: the `bench` command (per-core speed with exact counts).
//! - `engine_args.rs`: flags that choose and build an engine.

mod bench;
mod engine_args;
mod puzzle_args;
mod solve;

use clap::{Parser, Subcommand};

/// e2fleet worker: exact edge-matching search on this machine.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Walk a puzzle's search tree (or part of it) and report exact counts.
    Solve(solve::SolveArgs),
    /// Measure per-core placements/s on benchmark boards (exact counts alongside).
    Bench(bench::BenchArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Solve(args) => solve::run(args),
        Command::Bench(args) => bench::run(args),
    };
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
