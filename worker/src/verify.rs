//! `e2fleet-worker verify --offline`: runs the built-in verification suite with this
//! machine's engine (the same engine `run` would build) and prints a verdict and per-core
//! rates. It is how a person checks a new CPU, compiler or engine build against known
//! exact results. Exit status 1 when any unit disagrees.

use std::time::Instant;

use anyhow::{Result, bail};
use clap::Args;
use e2fleet_engine::search::{NoControl, RunOptions};
use e2fleet_engine::suite::{default_suite, resolve};
use e2fleet_proto::REPORT_MAX_SOLUTIONS;
use serde::Serialize;

use crate::engine_args::EngineArgs;

/// Flags of `verify`.
#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// Run the built-in suite on this machine only (submitting results to a coordinator
    /// is not available yet).
    #[arg(long, required = true)]
    offline: bool,
    #[command(flatten)]
    engine: EngineArgs,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct UnitReport {
    name: String,
    agrees: bool,
    detail: Option<String>,
    nodes: u64,
    seconds: f64,
    nodes_per_s: f64,
    speed_unit: bool,
    engine: String,
    engine_build: String,
}

/// Runs `verify`.
pub fn run(args: VerifyArgs) -> Result<()> {
    let _ = args.offline;
    let started = Instant::now();
    let mut reports = Vec::new();
    for u in default_suite() {
        let resolved = resolve(&u).map_err(anyhow::Error::msg)?;
        let factory = args.engine.factory(&resolved.plan, false)?;
        let mut engine = factory.make();
        let t = Instant::now();
        let result = engine.run(
            &resolved.unit,
            RunOptions {
                budget: u.budget,
                max_solutions: REPORT_MAX_SOLUTIONS,
            },
            &mut NoControl,
        )?;
        let seconds = t.elapsed().as_secs_f64();
        let detail = match &u.expected {
            Some(e) => e.disagreement(&result),
            None => Some("the suite has no expected result for this unit".into()),
        };
        let report = UnitReport {
            name: u.name.clone(),
            agrees: detail.is_none(),
            detail,
            nodes: result.committed,
            seconds,
            nodes_per_s: result.committed as f64 / seconds.max(1e-9),
            speed_unit: u.speed,
            engine: engine.kind().to_string(),
            engine_build: engine.build_id(),
        };
        if !args.json {
            println!(
                "{:<22} {:<9} {:>10} nodes {:>8.1} M/s per core  {}{}",
                report.name,
                if report.agrees { "agrees" } else { "DISAGREES" },
                report.nodes,
                report.nodes_per_s / 1e6,
                report.engine_build,
                report
                    .detail
                    .as_ref()
                    .map(|d| format!("  ({d})"))
                    .unwrap_or_default()
            );
        }
        reports.push(report);
    }
    let failed: Vec<&UnitReport> = reports.iter().filter(|r| !r.agrees).collect();
    let speed: Vec<f64> = reports
        .iter()
        .filter(|r| r.speed_unit)
        .map(|r| r.nodes_per_s)
        .collect();
    let mut sorted = speed.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or(0.0);
    let verdict = if failed.is_empty() {
        format!(
            "VERIFIED: all {} units agree with their exact results; speed units {:.1} M placements/s per core (median); {:.1} s",
            reports.len(),
            median / 1e6,
            started.elapsed().as_secs_f64()
        )
    } else {
        format!(
            "FAILED: {} of {} units disagree; first: {} ({})",
            failed.len(),
            reports.len(),
            failed[0].name,
            failed[0].detail.clone().unwrap_or_default()
        )
    };
    if args.json {
        println!(
            "{}",
            serde_json::json!({"verified": failed.is_empty(), "verdict": verdict, "per_core_nodes_per_s": median, "units": reports})
        );
    } else {
        println!("{verdict}");
    }
    if !failed.is_empty() {
        bail!("this engine build disagrees with the known results: do not use it for real work");
    }
    Ok(())
}
