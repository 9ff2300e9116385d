//! `e2fleet-worker status | pause | resume | stop`: a running worker, steered from another
//! terminal (or a service manager) through its control socket
//! ([`crate::run::local_control`]), which only its user can open.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Args;
use e2fleet_proto::text::thousands;

use crate::run::local_control::{Answer, request};

/// Flags of the control commands.
#[derive(Args, Debug)]
pub struct ControlArgs {
    /// The running worker's data directory (its `run --data-dir`).
    #[arg(long, env = "E2FLEET_DATA_DIR", default_value = "e2fleet-worker-data")]
    data_dir: PathBuf,
    /// Print the worker's answer as JSON.
    #[arg(long)]
    json: bool,
}

/// Sends `what` (`status`, `pause`, `resume` or `stop`) and prints the worker's answer.
pub fn run(what: &str, args: &ControlArgs) -> Result<()> {
    let answer = request(&args.data_dir, what)?;
    if args.json {
        println!("{}", serde_json::to_string(&answer)?);
    }
    let Answer {
        ok: true,
        status: Some(s),
        ..
    } = answer
    else {
        bail!(
            "the worker refused: {}",
            answer.error.unwrap_or_else(|| "no reason given".into())
        );
    };
    if args.json {
        return Ok(());
    }
    match what {
        "pause" => println!("paused: the engines hold still until `e2fleet-worker resume`"),
        "resume" => println!("resumed (other pause rules may still hold it)"),
        "stop" => {
            println!("stopping: running units report their exact cursors, then the worker exits")
        }
        _ => {}
    }
    println!(
        "{} | {}/{} engines busy, {} queued | {} units reported | {:.1} M nodes/s per core | coordinator {}",
        s.state,
        s.engines_busy,
        s.threads,
        s.queued,
        thousands(s.units_reported),
        s.per_core_nodes_per_s / 1e6,
        s.coordinator
    );
    Ok(())
}
