//! `e2fleet-coordinator`: run the coordinator (`serve`) or talk to a running one
//! (`submit`, `jobs`, `job`, `workers`, `fleet`, `cancel`, `release-host`, `verify`).
//!
//! - `cli/args.rs`: the command line (clap);
//! - `cli/serve.rs`: `serve`;
//! - `cli/admin.rs`: the operator commands, through [`e2fleet_coordinator::client`];
//! - `cli/print.rs`: their text output.

mod cli;

use clap::Parser;

/// `println!` that ends the program quietly when stdout is closed (`... | head`), instead
/// of panicking on the broken pipe.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if writeln!(std::io::stdout(), $($arg)*).is_err() {
            std::process::exit(0);
        }
    }};
}

/// `print!`, quietly ending on a closed stdout.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if write!(std::io::stdout(), $($arg)*).is_err() {
            std::process::exit(0);
        }
    }};
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match cli::run(cli::args::Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
