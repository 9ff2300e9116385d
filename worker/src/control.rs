//! `e2fleet-worker status | pause | resume | stop`: a running worker, steered from another
//! terminal (or a service manager) through its control socket
//! ([`crate::run::local_control`]), which only its user can open.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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
    /// `stop` only: wait up to this many seconds for the worker to exit (its units
    /// reported), and fail if it has not.
    #[arg(long, value_name = "SECONDS")]
    wait: Option<u64>,
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
    if what == "stop"
        && let Some(seconds) = args.wait
    {
        wait_for_exit(&args.data_dir, Duration::from_secs(seconds))?;
        println!("stopped");
        return Ok(());
    }
    println!(
        "{} | {} units walking on {} engine threads, {} queued | {} units reported | {:.1} M nodes/s per core | coordinator {}",
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

/// Waits until the worker on `data_dir` no longer answers on its control socket (it
/// removes the socket as it exits; a killed one leaves it refusing connections).
fn wait_for_exit(data_dir: &Path, within: Duration) -> Result<()> {
    let until = Instant::now() + within;
    while request(data_dir, "status").is_ok() {
        if Instant::now() >= until {
            bail!(
                "the worker is still running after {} s (it may be delivering results to an unreachable coordinator)",
                within.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}
