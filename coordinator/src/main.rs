//! `e2fleet-coordinator`: run the coordinator (`serve`) or talk to a running one
//! (`submit`, `jobs`, `job`, `workers`, `fleet`, `cancel`, `release-host`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use e2fleet_coordinator::fleet::{Fleet, FleetConfig, random_token, system_clock};
use e2fleet_coordinator::store::Store;
use e2fleet_engine::formats::{self, LoadOptions};
use e2fleet_proto::v1;
use e2fleet_proto::v1::operator_service_client::OperatorServiceClient;
use tonic::Request;
use tonic::transport::Channel;
use tracing::info;

/// e2fleet coordinator: splits puzzles into units, leases them, adds results up exactly.
/// `println!` that ends the program quietly when stdout is closed (`... | head`), instead
/// of panicking on the broken pipe.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if writeln!(std::io::stdout(), $($arg)*).is_err() {
            std::process::exit(0);
        }
    }};
}

/// `print!`, quietly ending on a closed stdout.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if write!(std::io::stdout(), $($arg)*).is_err() {
            std::process::exit(0);
        }
    }};
}

#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the coordinator (gRPC and the HTTP API on one port).
    Serve(ServeArgs),
    /// Submit a puzzle as a job.
    Submit(SubmitArgs),
    /// List jobs.
    Jobs(AdminArgs),
    /// Show one job.
    Job {
        /// The job id.
        id: String,
        /// Keep showing live progress until the job ends.
        #[arg(long)]
        watch: bool,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// List workers.
    Workers(AdminArgs),
    /// Fleet summary: workers and both rates.
    Fleet(AdminArgs),
    /// Cancel a job.
    Cancel {
        /// The job id.
        id: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Lift a host's quarantine.
    ReleaseHost {
        /// Host name.
        hostname: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Verification suites and the conformance matrix of hardware classes.
    Verify {
        #[command(subcommand)]
        action: VerifyCommand,
    },
}

#[derive(Subcommand)]
enum VerifyCommand {
    /// Store (or replace) a suite: a JSON array of units {name, puzzle, order,
    /// prefix_depth, prefix_index, budget, speed, expected?}. Units without an expected
    /// result get one when two hardware classes agree.
    Submit {
        /// The suite file.
        file: std::path::PathBuf,
        /// Suite name (default: the file name without extension).
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Hardware classes x suite units: agrees / DISAGREES / pending / not run, with
    /// per-core rates, and the speed table.
    Matrix {
        /// Suite name.
        #[arg(long, default_value = "default")]
        suite: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "E2FLEET_LISTEN", default_value = "127.0.0.1:7733")]
    listen: String,
    /// SQLite database file.
    #[arg(long, env = "E2FLEET_DB", default_value = "e2fleet.db")]
    db: PathBuf,
    /// Token workers enrol with (generated and printed if not given).
    #[arg(long, env = "E2FLEET_ENROLL_TOKEN")]
    enroll_token: Option<String>,
    /// Token operator calls need (generated and printed if not given).
    #[arg(long, env = "E2FLEET_ADMIN_TOKEN")]
    admin_token: Option<String>,
    /// Lease length in seconds.
    #[arg(long, env = "E2FLEET_LEASE_SECONDS", default_value_t = 60)]
    lease_seconds: u64,
    /// Wrong results after which a host is quarantined.
    #[arg(long, env = "E2FLEET_QUARANTINE_AFTER", default_value_t = 3)]
    quarantine_after: i64,
    /// Log format: text or json.
    #[arg(long, default_value = "text")]
    log_format: String,
    /// Serve TLS with this certificate chain (PEM); needs --tls-key.
    #[arg(long, env = "E2FLEET_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "E2FLEET_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

#[derive(clap::Args, Clone)]
struct AdminArgs {
    /// Coordinator URL.
    #[arg(
        long,
        env = "E2FLEET_COORDINATOR",
        default_value = "http://127.0.0.1:7733"
    )]
    coordinator: String,
    /// Admin token.
    #[arg(long, env = "E2FLEET_ADMIN_TOKEN")]
    admin_token: String,
    /// CA certificate (PEM) to trust for an https:// coordinator (default: system roots).
    #[arg(long, env = "E2FLEET_CA_CERT")]
    ca_cert: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct SubmitArgs {
    /// Puzzle file (any supported format).
    puzzle: PathBuf,
    /// Job name (default: the puzzle's name).
    #[arg(long)]
    name: Option<String>,
    /// Fill order.
    #[arg(long, default_value = "row-major")]
    order: String,
    /// Split depth.
    #[arg(long, conflicts_with = "units")]
    split_depth: Option<u32>,
    /// Target number of units (the coordinator picks the depth).
    #[arg(long)]
    units: Option<u32>,
    /// Node budget per run (budget stops become continuation units).
    #[arg(long)]
    budget: Option<u64>,
    /// Run every unit on this many different hosts.
    #[arg(long, default_value_t = 1, conflicts_with = "spot_check")]
    replicas: u32,
    /// Run this fraction of units twice.
    #[arg(long)]
    spot_check: Option<f64>,
    #[command(flatten)]
    admin: AdminArgs,
}

fn init_logs(format: &str) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    // logs go to stderr: stdout is for the program's own output
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if format == "json" {
        logs.json().init();
    } else {
        logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
}

async fn serve(args: ServeArgs) -> Result<()> {
    init_logs(&args.log_format);
    let enroll_token = args.enroll_token.clone().unwrap_or_else(random_token);
    let admin_token = args.admin_token.clone().unwrap_or_else(random_token);
    if args.enroll_token.is_none() {
        outln!("E2FLEET_ENROLL_TOKEN={enroll_token}");
    }
    if args.admin_token.is_none() {
        outln!("E2FLEET_ADMIN_TOKEN={admin_token}");
    }
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(
            e2fleet_coordinator::tls::server_config(cert, key)
                .map_err(|e| anyhow::anyhow!("TLS: {e}"))?,
        ),
        _ => None,
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let store = Store::open(&args.db)
        .await
        .with_context(|| format!("cannot open database {}", args.db.display()))?;
    let fleet = Arc::new(Fleet::new(
        store,
        FleetConfig {
            lease: Duration::from_secs(args.lease_seconds.max(1)),
            quarantine_after: args.quarantine_after.max(1),
            enroll_token,
            admin_token,
        },
        system_clock(),
    ));
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    info!(%addr, db = %args.db.display(), "coordinator listening");
    outln!("coordinator listening on {scheme}://{addr} (dashboard: {scheme}://{addr}/)");
    // SIGINT (Ctrl-C) or SIGTERM (systemd, docker, Kubernetes): stop accepting, finish
    // the requests in flight; every write is a committed transaction either way
    let shutdown = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        info!("shutting down");
    };
    e2fleet_coordinator::server::serve_with(listener, fleet, shutdown, tls).await?;
    Ok(())
}

async fn client(admin: &AdminArgs) -> Result<OperatorServiceClient<Channel>> {
    let channel = e2fleet_proto::endpoint::endpoint(&admin.coordinator, admin.ca_cert.as_deref())
        .map_err(anyhow::Error::msg)?
        .connect()
        .await
        .with_context(|| format!("cannot reach the coordinator at {}", admin.coordinator))?;
    Ok(OperatorServiceClient::new(channel))
}

fn authed<T>(admin: &AdminArgs, message: T) -> Result<Request<T>> {
    let mut r = Request::new(message);
    r.metadata_mut().insert(
        "authorization",
        format!("Bearer {}", admin.admin_token).parse()?,
    );
    Ok(r)
}

fn print_job(doc: &serde_json::Value, json: bool) {
    if json {
        outln!("{doc}");
        return;
    }
    let u = &doc["units"];
    outln!(
        "{}  {}  {}\n  units: {} done, {} leased, {} open\n  nodes: {} (enumeration {} + split {} + units {})\n  solutions: {}   deepest: {}\n  conservation: {}\n  per-core rate: {}   aggregate rate: {}",
        doc["job_id"].as_str().unwrap_or(""),
        doc["name"].as_str().unwrap_or(""),
        doc["state"].as_str().unwrap_or(""),
        u["done"],
        u["leased"],
        u["open"],
        doc["nodes_total"],
        doc["enumeration_nodes"],
        doc["split_nodes"],
        doc["unit_nodes"],
        doc["solutions_count"],
        doc["deepest"]["depth"],
        match doc["conservation_ok"].as_bool() {
            Some(true) =>
                "holds (enumeration + split + units = total, recomputed from stored results)",
            Some(false) => "BROKEN",
            None => "checked at completion",
        },
        rate(&doc["per_core_nodes_per_s"], "per core"),
        rate(&doc["aggregate_nodes_per_s"], "fleet"),
    );
}

fn rate(v: &serde_json::Value, what: &str) -> String {
    match v.as_f64() {
        Some(r) => format!("{:.1} M nodes/s {what}", r / 1e6),
        None => "n/a".into(),
    }
}

async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Serve(args) => serve(args).await,
        Command::Submit(args) => {
            let puzzle = formats::load_file(&args.puzzle, &LoadOptions::default())?;
            let mut c = client(&args.admin).await?;
            let r = c
                .submit_job(authed(
                    &args.admin,
                    v1::SubmitJobRequest {
                        name: args
                            .name
                            .clone()
                            .unwrap_or_else(|| puzzle.name().to_string()),
                        puzzle_json: formats::to_site_json(&puzzle),
                        order: args.order.clone(),
                        split_depth: args.split_depth.unwrap_or(0),
                        target_units: args.units.unwrap_or(if args.split_depth.is_some() {
                            0
                        } else {
                            1000
                        }),
                        budget: args.budget.unwrap_or(0),
                        replicas: args.replicas,
                        spot_check: args.spot_check.unwrap_or(0.0),
                    },
                )?)
                .await?
                .into_inner();
            if args.admin.json {
                outln!(
                    "{}",
                    serde_json::json!({"job_id": r.job_id, "units": r.units, "split_depth": r.split_depth})
                );
            } else {
                outln!(
                    "job {} submitted: {} units at depth {}",
                    r.job_id,
                    r.units,
                    r.split_depth
                );
            }
            Ok(())
        }
        Command::Jobs(admin) => {
            let mut c = client(&admin).await?;
            let r = c
                .list_jobs(authed(&admin, v1::ListJobsRequest {})?)
                .await?
                .into_inner();
            for j in r.jobs {
                let doc: serde_json::Value = serde_json::from_str(&j.json)?;
                print_job(&doc, admin.json);
            }
            Ok(())
        }
        Command::Job { id, watch, admin } => {
            let mut c = client(&admin).await?;
            let started = std::time::Instant::now();
            loop {
                let r = c
                    .get_job(authed(&admin, v1::GetJobRequest { job_id: id.clone() })?)
                    .await?
                    .into_inner();
                let doc: serde_json::Value = serde_json::from_str(&r.json)?;
                if !watch || doc["state"] != "running" {
                    if watch {
                        eprintln!();
                    }
                    print_job(&doc, admin.json);
                    return Ok(());
                }
                let u = &doc["units"];
                let done = u["done"].as_u64().unwrap_or(0);
                let total =
                    done + u["open"].as_u64().unwrap_or(0) + u["leased"].as_u64().unwrap_or(0);
                eprint!(
                    "\r[{:>5.0} s] units {done}/{total}  nodes {}  {}  {}   ",
                    started.elapsed().as_secs_f64(),
                    doc["nodes_total"],
                    rate(&doc["per_core_nodes_per_s"], "per core"),
                    rate(&doc["aggregate_nodes_per_s"], "fleet aggregate"),
                );
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        Command::Workers(admin) => {
            let mut c = client(&admin).await?;
            let r = c
                .list_workers(authed(&admin, v1::ListWorkersRequest {})?)
                .await?
                .into_inner();
            let doc: serde_json::Value = serde_json::from_str(&r.json)?;
            if admin.json {
                outln!("{doc}");
            } else {
                for w in doc.as_array().into_iter().flatten() {
                    outln!(
                        "{:<20} {:<12} {:<28} cores {:>3}  {:>8} units  {} errors  {:.1} M/s per core  {}",
                        w["hostname"].as_str().unwrap_or(""),
                        w["state"].as_str().unwrap_or(""),
                        w["cpu_model"].as_str().unwrap_or(""),
                        w["cores"],
                        w["units_done"],
                        w["errors"],
                        w["per_core_rate"].as_f64().unwrap_or(0.0) / 1e6,
                        w["engine_build"].as_str().unwrap_or(""),
                    );
                }
            }
            Ok(())
        }
        Command::Fleet(admin) => {
            let mut c = client(&admin).await?;
            let r = c
                .fleet_status(authed(&admin, v1::FleetStatusRequest {})?)
                .await?
                .into_inner();
            let doc: serde_json::Value = serde_json::from_str(&r.json)?;
            outln!(
                "{}",
                if admin.json {
                    doc.to_string()
                } else {
                    serde_json::to_string_pretty(&doc)?
                }
            );
            Ok(())
        }
        Command::Cancel { id, admin } => {
            let mut c = client(&admin).await?;
            c.cancel_job(authed(&admin, v1::CancelJobRequest { job_id: id.clone() })?)
                .await?;
            outln!("job {id} cancelled");
            Ok(())
        }
        Command::ReleaseHost { hostname, admin } => {
            let mut c = client(&admin).await?;
            let r = c
                .release_host(authed(
                    &admin,
                    v1::ReleaseHostRequest {
                        hostname: hostname.clone(),
                    },
                )?)
                .await?
                .into_inner();
            if r.released == 0 {
                bail!("no worker has host name {hostname:?}");
            }
            outln!("released {} worker(s) on {hostname}", r.released);
            Ok(())
        }
        Command::Verify {
            action: VerifyCommand::Submit { file, name, admin },
        } => {
            let suite_json = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let name = name.unwrap_or_else(|| {
                file.file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default()
            });
            let mut c = client(&admin).await?;
            let r = c
                .submit_suite(authed(&admin, v1::SubmitSuiteRequest { name, suite_json })?)
                .await?
                .into_inner();
            if admin.json {
                outln!(
                    "{}",
                    serde_json::json!({"suite": r.name, "units": r.units, "with_expected": r.with_expected})
                );
            } else {
                outln!(
                    "suite {}: {} units, {} with expected results (the rest are fixed when two hardware classes agree)",
                    r.name,
                    r.units,
                    r.with_expected
                );
            }
            Ok(())
        }
        Command::Verify {
            action: VerifyCommand::Matrix { suite, admin },
        } => {
            let mut c = client(&admin).await?;
            let r = c
                .verification_matrix(authed(&admin, v1::VerificationMatrixRequest { suite })?)
                .await?
                .into_inner();
            let doc: serde_json::Value = serde_json::from_str(&r.json)?;
            if admin.json {
                outln!("{doc}");
            } else {
                out!("{}", matrix_table(&doc));
            }
            Ok(())
        }
    }
}

/// The conformance matrix as text: one row per hardware class, one column per unit.
fn matrix_table(doc: &serde_json::Value) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let units = doc["units"].as_array().cloned().unwrap_or_default();
    let classes = doc["classes"].as_array().cloned().unwrap_or_default();
    let _ = writeln!(
        out,
        "suite {}: {} units, {} hardware classes",
        doc["suite"].as_str().unwrap_or(""),
        units.len(),
        classes.len()
    );
    for (i, u) in units.iter().enumerate() {
        let _ = writeln!(
            out,
            "  U{:<3} {:<24} {}",
            i + 1,
            u["name"].as_str().unwrap_or(""),
            match u["expected_source"].as_str() {
                Some("") | None => "expected: not yet known".to_string(),
                Some(s) => format!("expected: {s}"),
            }
        );
    }
    let _ = write!(out, "\n{:<13} {:<9}", "class", "status");
    for i in 0..units.len() {
        let _ = write!(out, " {:>5}", format!("U{}", i + 1));
    }
    let _ = writeln!(out, "  per-core (speed units)  what");
    for c in &classes {
        let _ = write!(
            out,
            "{:<13} {:<9}",
            c["id"].as_str().unwrap_or(""),
            if c["flagged"].as_bool() == Some(true) {
                "FLAGGED"
            } else {
                "ok"
            }
        );
        for u in &units {
            let cell = &c["cells"][u["name"].as_str().unwrap_or("")];
            let mark = match cell["verdict"].as_str() {
                Some("agrees") => "ok",
                Some("DISAGREES") => "DIFF",
                Some("pending") => "?",
                _ => "-",
            };
            let _ = write!(out, " {mark:>5}");
        }
        let speed = c["speed_nodes_per_s"]
            .as_f64()
            .map(|v| format!("{:.1} M/s", v / 1e6))
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(
            out,
            "  {:>22}  {} / {} {} / {} / {} [{}]",
            speed,
            c["cpu_model"].as_str().unwrap_or(""),
            c["arch"].as_str().unwrap_or(""),
            c["os"].as_str().unwrap_or(""),
            c["rustc_version"].as_str().unwrap_or(""),
            c["engine_release"].as_str().unwrap_or(""),
            c["target_features"].as_str().unwrap_or(""),
        );
    }
    let _ = writeln!(
        out,
        "\nok = agrees with the exact result, DIFF = DISAGREES (the class gets no real work), ? = no expected result yet, - = not run"
    );
    out
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run(Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
