//! The coordinator's command line.

mod admin;
pub mod args;
mod print;
mod releases;
mod serve;
mod study;

use anyhow::Result;

use args::{Cli, Command};

/// Runs one command.
pub async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Serve(args) => serve::serve(args).await,
        Command::MigrateStore { from, to } => migrate_store(&from, &to).await,
        Command::ReleaseKey { action } => releases::key(action),
        Command::Release { action } => releases::release(action),
        other => admin::run(other).await,
    }
}

async fn migrate_store(from: &std::path::Path, to: &str) -> Result<()> {
    use e2fleet_coordinator::store::{Database, migrate};
    if !matches!(to.parse::<Database>(), Ok(Database::Postgres(_))) {
        anyhow::bail!("--to must be a PostgreSQL address (postgres://user:password@host/database)");
    }
    let copied = migrate::sqlite_to_postgres(from, to).await?;
    for (table, rows) in &copied.tables {
        crate::outln!("{table:<16} {rows:>12} rows");
    }
    let shown = to
        .parse::<Database>()
        .map(|d| d.to_string())
        .unwrap_or_default();
    crate::outln!(
        "copied {} rows from {} to {shown}, checked; serve with --db {shown}",
        copied.rows(),
        from.display()
    );
    Ok(())
}
