//! `e2fleet-netfleet`: runs the scenarios of a fleet across the internet on one machine
//! (root, for the network namespaces).

use clap::{Parser, Subcommand};
use e2fleet_netfleet::scenarios::{self, Options, SCENARIOS};

/// A many-host e2fleet on one machine: hosts in network namespaces, emulated links, and
/// scenarios checked to the digit.
#[derive(Parser)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List the scenarios.
    List,
    /// Run scenarios (all of them with `all`).
    Run {
        /// Scenario names, or `all`.
        #[arg(required = true)]
        names: Vec<String>,
        /// The short form the test suite runs (10 s leases, shorter outages).
        #[arg(long)]
        quick: bool,
        /// The workers' engine: reference (no rustc, the same speed everywhere), auto,
        /// compiled or lanes.
        #[arg(long, default_value = "reference")]
        engine: String,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::List => {
            for (name, what) in SCENARIOS {
                println!("{name:16} {what}");
            }
            std::process::ExitCode::SUCCESS
        }
        Command::Run {
            names,
            quick,
            engine,
        } => {
            if let Some(why) = e2fleet_netfleet::hosts::unavailable() {
                eprintln!("e2fleet-netfleet: cannot make hosts here: {why}");
                return std::process::ExitCode::FAILURE;
            }
            let names: Vec<String> = if names.iter().any(|n| n == "all") {
                SCENARIOS.iter().map(|s| s.0.to_string()).collect()
            } else {
                names
            };
            let opts = Options { quick, engine };
            let runtime = tokio::runtime::Runtime::new().expect("a runtime");
            let mut failed = 0;
            for name in &names {
                println!("{name}{}:", if quick { " (quick)" } else { "" });
                match runtime.block_on(scenarios::run(name, &opts)) {
                    Ok(_) => println!("  PASS"),
                    Err(e) => {
                        failed += 1;
                        println!("  FAIL: {e:#}");
                    }
                }
            }
            if failed == 0 {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::FAILURE
            }
        }
    }
}
