//! # e2fleet-worker
//!
//! The program volunteers run: `run` joins a fleet; `solve` walks a puzzle on this machine
//! (whole or split into units, with exact per-depth counts); `bench` measures per-core speed;
//! `verify` checks the engine against known results; `audit` checks a published job;
//! `status`, `pause`, `resume` and `stop` steer a running worker; `service install` makes
//! it a systemd user service.
//!
//! The command line only: each subcommand's flags and code live in the library
//! (`lib.rs` has the map).

use clap::{Parser, Subcommand};
use e2fleet_worker::{audit, bench, control, run, service, solve, team, verify};

/// e2fleet worker: lends this machine's cores to an e2fleet fleet (`run`), checks its
/// engine against exact results (`verify`), and walks puzzles on its own (`solve`,
/// `bench`). Every count it reports is exact.
#[derive(Parser)]
#[command(version = version())]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Walk a puzzle's search tree (or part of it) and report exact counts.
    Solve(solve::SolveArgs),
    /// Measure per-core nodes/s on benchmark boards (exact counts alongside), and
    /// what a node costs in cycles at the clock a busy core runs at.
    Bench(bench::BenchArgs),
    /// Join a fleet: lease units from a coordinator and walk them on every core.
    Run(run::RunArgs),
    /// Check this machine's engine against the built-in suite of exact results.
    Verify(verify::VerifyArgs),
    /// Check a job's certificate: its structure, and a sample of units re-run here.
    Audit(audit::AuditArgs),
    /// Put your volunteer account in a team (or, with --none, in none), with the identity
    /// of a worker that has joined: the stats page ranks teams by their accounts' credit.
    Team(team::TeamArgs),
    /// What a running worker (on this machine, as this user) is doing.
    Status(control::ControlArgs),
    /// Pause a running worker's engines until `resume`.
    Pause(control::ControlArgs),
    /// Resume a worker paused with `pause`.
    Resume(control::ControlArgs),
    /// Stop a running worker: its units report their exact cursors, then it exits.
    Stop(control::ControlArgs),
    /// Run the worker as a systemd user service of yours (no root needed; the package
    /// installs a system service instead).
    Service {
        #[command(subcommand)]
        action: service::ServiceCommand,
    },
}

/// This build's version, from its stamp (what `release publish` reads).
fn version() -> &'static str {
    static VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VERSION.get_or_init(e2fleet_worker::update::version_text)
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Solve(args) => solve::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Run(args) => run::run_command(args),
        Command::Verify(args) => verify::run(args),
        Command::Audit(args) => audit::run(args),
        Command::Team(args) => team::run(args),
        Command::Status(args) => control::run("status", &args),
        Command::Pause(args) => control::run("pause", &args),
        Command::Resume(args) => control::run("resume", &args),
        Command::Stop(args) => control::run("stop", &args),
        Command::Service { action } => service::run(action),
    };
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
