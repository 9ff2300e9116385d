//! The coordinator's command line.

mod admin;
pub mod args;
mod print;
mod serve;

use anyhow::Result;

use args::{Cli, Command};

/// Runs one command.
pub async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Serve(args) => serve::serve(args).await,
        other => admin::run(other).await,
    }
}
