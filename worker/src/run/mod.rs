//! `e2fleet-worker run`: the fleet client volunteers start with one command.
//!
//! Registers with the machine's labels (keeping its identity across restarts in the data
//! directory), runs the verification units its hardware class lacks, fetches each job's
//! spec, builds that job's engine locally (cached) and self-tests it against units with
//! known exact results before leasing real work, then keeps one engine per thread busy,
//! heartbeats progress and reports exact results.
//!
//! Never loses work: every result is journalled (fsync) before it is sent and re-sent
//! until acknowledged ([`journal`]); a stop (SIGINT/SIGTERM, or [`Controls::stop`])
//! stops the engines at once and reports their exact cursors; when the coordinator is
//! unreachable the engines keep working on held leases while calls back off with jitter.
//! Made for other people's networks: calls overlap (a lease call, a heartbeat and several
//! reports in flight at once), the lease queue is sized from the measured round trip and
//! the pace units finish at, a dead link is found by keepalive pings, and a machine that
//! slept asks at once which of its leases still hold.
//!
//! # Layout
//! - this file: the flags ([`RunArgs`]), the configuration they become ([`RunConfig`])
//!   and [`run`]: join, verify this machine, then the loop;
//! - `fleet_loop/`: the loop, a struct whose methods are its phases (collect results,
//!   report, heartbeat, prepare jobs, feed engines, lease, pause, stop);
//! - [`controls`]: stop and pause from outside the loop, and the loop's snapshot of
//!   itself; [`local_control`]: the control socket `status`, `pause`, `resume` and `stop`
//!   reach it through; `signals.rs`: signals, niceness and the status line;
//! - `connection.rs`: registration, backoff and round trips around
//!   [`crate::api::Coordinator`]; [`identity`]: the saved identity;
//! - `pacing.rs`: the lease queue's size, the unit pace, network-wait accounting and
//!   sleep detection;
//! - `jobs.rs`: verification of this class, job specs, engine builds and self-tests;
//! - `executor/`: the engine threads (its tests in `executor/tests.rs`); [`journal`]: results on disk until acknowledged;
//! - [`pause`]: when the engines pause (the pause file, its owner, battery, the hours set,
//!   other programs' CPU use), and giving the held units back after a long pause.

mod connection;
pub mod controls;
mod executor;
mod fleet_loop;
pub mod identity;
mod jobs;
pub mod journal;
pub mod local_control;
mod pacing;
pub mod pause;
mod signals;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use e2fleet_proto::logs::LogFormat;
use tonic::Code;

use crate::api::Coordinator;
use crate::connect_args::ConnectArgs;
use crate::engine_args::EngineArgs;
use connection::Connection;
pub use controls::Controls;
use pause::{Conditions, Hours, OnBattery};

/// Flags of `run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Coordinator URL; several coordinators of one fleet (on one PostgreSQL database) as
    /// a comma-separated list: calls are spread over those that answer, and go on through
    /// the others while one is down.
    #[arg(long, env = "E2FLEET_COORDINATOR")]
    coordinator: String,
    #[command(flatten)]
    connect: ConnectArgs,
    /// Engine threads (default: every core).
    #[arg(long, env = "E2FLEET_THREADS")]
    threads: Option<usize>,
    /// Where the identity and the result journal live.
    #[arg(long, env = "E2FLEET_DATA_DIR", default_value = "e2fleet-worker-data")]
    data_dir: PathBuf,
    /// Report this host name instead of the detected one.
    #[arg(long, env = "E2FLEET_HOSTNAME")]
    hostname: Option<String>,
    /// Stop after this many units.
    #[arg(long)]
    stop_after_units: Option<u64>,
    /// Stop after this many seconds.
    #[arg(long)]
    stop_after_seconds: Option<u64>,
    /// While this file exists the engines pause (default: `<data-dir>/pause`).
    #[arg(long)]
    pause_file: Option<PathBuf>,
    /// On battery: pause the engines until the machine is plugged in again, or run.
    #[arg(long, value_enum, env = "E2FLEET_ON_BATTERY", default_value = "pause")]
    on_battery: OnBattery,
    /// Pause while other programs use more than this percentage of the machine's CPU time,
    /// averaged over 10 s (this worker's engines and compiles do not count; Linux). Off
    /// unless set.
    #[arg(long, env = "E2FLEET_MAX_OTHER_CPU", value_parser = clap::value_parser!(u8).range(1..=100))]
    max_other_cpu: Option<u8>,
    /// Pause while any of these programs runs (games, video calls): names as the system
    /// lists processes (`ps -e`), comma-separated, case-insensitive; Linux.
    #[arg(long, env = "E2FLEET_PAUSE_WHILE", value_delimiter = ',')]
    pause_while: Vec<String>,
    /// Walk only this percentage of each engine thread's time (BOINC's "use at most N% of
    /// CPU time"): 200 ms of walking, then a rest in which the engine holds still, so a
    /// laptop runs cooler and quieter. Rests are not engine time: the per-core rate stays
    /// the rate of walking. 100 (the default) walks all the time.
    #[arg(long, env = "E2FLEET_CPU_PERCENT", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100))]
    cpu_percent: u32,
    /// Run only in this daily window of local time, e.g. 19:00-07:00 (across midnight) or
    /// 09:00-17:00; outside it the engines pause. Off unless set.
    #[arg(long, env = "E2FLEET_RUN_HOURS")]
    run_hours: Option<Hours>,
    /// After this many seconds paused, give the held units back: running ones stop at their
    /// exact cursor and report it (the coordinator leases the rest elsewhere), unstarted
    /// ones are released, and nothing more is leased until the pause ends.
    #[arg(long, env = "E2FLEET_GIVE_BACK_AFTER", default_value_t = 900)]
    give_back_after: u64,
    /// Test only: where Linux's power supplies are read.
    #[arg(long, hide = true, default_value = "/sys/class/power_supply")]
    power_supply_dir: PathBuf,
    /// Lower this process's CPU priority by this much (nice), 0 to keep it.
    #[arg(long, env = "E2FLEET_NICE", default_value_t = 10)]
    nice: u8,
    /// Take the signed worker releases the coordinator offers (docs/volunteer-guide.md,
    /// "Updates"): a newer build is fetched, checked against the fleet's release key,
    /// switched to between units and rolled back if it fails its checks here. The
    /// package turns this on.
    #[arg(long, value_enum, env = "E2FLEET_UPDATES", default_value = "off")]
    updates: Switch,
    /// The fleet's release key: the base64 line of the operator's release.pub (without
    /// it, the coordinator's key is pinned the first time an update is offered).
    #[arg(long, env = "E2FLEET_RELEASE_KEY")]
    release_key: Option<String>,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Test only: after the engine passed its self-tests, add one node at the shallowest
    /// counted depth of every result (a machine that computes wrong), to prove that
    /// cross-checks catch it and quarantine the host.
    #[arg(long, hide = true)]
    fault_misreport: bool,
    #[command(flatten)]
    engine: EngineArgs,
}

/// On or off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Switch {
    /// On.
    On,
    /// Off.
    Off,
}

/// What `run` works from: [`RunArgs`] checked and resolved once (the token read, the
/// transport policy applied). Library code never reads the environment.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// Coordinator URL, or a comma-separated list of one fleet's coordinators.
    pub coordinator: String,
    /// CA certificate to trust for `https://`.
    pub ca_cert: Option<PathBuf>,
    /// The enrolment token.
    pub token: Secret,
    /// Engine threads.
    pub threads: usize,
    /// Where the identity, the journal and the engine cache live.
    pub data_dir: PathBuf,
    /// Host name to report instead of the detected one.
    pub hostname: Option<String>,
    /// Stop after this many units.
    pub stop_after_units: Option<u64>,
    /// Stop after this long.
    pub stop_after: Option<Duration>,
    /// While this file exists the engines pause.
    pub pause_file: PathBuf,
    /// What to do on battery.
    pub on_battery: OnBattery,
    /// Pause while other programs use more than this percentage of the CPU.
    pub max_other_cpu: Option<u8>,
    /// Pause while any of these programs runs.
    pub pause_while: Vec<String>,
    /// Walk this percentage of each engine thread's time.
    pub cpu_percent: u32,
    /// Daily window of local time to run in.
    pub run_hours: Option<Hours>,
    /// Give the held units back after this long paused.
    pub give_back_after: Duration,
    /// Where Linux's power supplies are read.
    pub power_supply_dir: PathBuf,
    /// Logs are text (a status line on a terminal) rather than JSON.
    pub text_logs: bool,
    /// Test only: misreport every result (see [`RunArgs`]).
    pub fault_misreport: bool,
    /// How engines are chosen and built.
    pub engine: EngineArgs,
    /// Signed updates.
    pub updates: crate::update::UpdateConfig,
}

/// A secret string that never prints (`Debug` shows its length only).
#[derive(Clone)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({} characters)", self.0.len())
    }
}

impl RunArgs {
    /// `--pause-while`, checked: at most 32 names of at most 64 characters, and a `/proc`
    /// to look for them in.
    fn pause_while_names(&self) -> Result<Vec<String>> {
        let names: Vec<String> = self
            .pause_while
            .iter()
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .collect();
        if names.len() > 32
            || names
                .iter()
                .any(|n| n.chars().count() > 64 || n.contains('/'))
        {
            anyhow::bail!(
                "--pause-while takes at most 32 program names (not paths) of at most 64 characters"
            );
        }
        if !names.is_empty() && !std::path::Path::new("/proc").is_dir() {
            anyhow::bail!(
                "--pause-while reads the process list in /proc, which this system has not"
            );
        }
        Ok(names)
    }

    /// The configuration these flags give: the token read and the transport checked.
    pub fn config(&self) -> Result<RunConfig> {
        self.connect.check_transport(&self.coordinator)?;
        let mut engine = self.engine.clone();
        // compiled engines live with the identity unless told otherwise
        engine
            .cache_dir
            .get_or_insert_with(|| self.data_dir.join("engines"));
        Ok(RunConfig {
            coordinator: self.coordinator.clone(),
            ca_cert: self.connect.ca_cert.clone(),
            token: Secret(self.connect.token()?),
            threads: self.threads.unwrap_or_else(crate::host::cores).max(1),
            data_dir: self.data_dir.clone(),
            hostname: self.hostname.clone(),
            stop_after_units: self.stop_after_units,
            stop_after: self.stop_after_seconds.map(Duration::from_secs),
            pause_file: self
                .pause_file
                .clone()
                .unwrap_or_else(|| self.data_dir.join("pause")),
            on_battery: self.on_battery,
            max_other_cpu: self.max_other_cpu,
            pause_while: self.pause_while_names()?,
            cpu_percent: self.cpu_percent,
            run_hours: self.run_hours,
            give_back_after: Duration::from_secs(self.give_back_after),
            power_supply_dir: self.power_supply_dir.clone(),
            text_logs: self.log_format == LogFormat::Text,
            fault_misreport: self.fault_misreport,
            engine,
            updates: crate::update::UpdateConfig {
                on: self.updates == Switch::On,
                key: self.release_key.clone(),
            },
        })
    }
}

/// Runs `run` as the program does: logs, niceness, signals, then [`run`].
pub fn run_command(args: RunArgs) -> Result<()> {
    // on a terminal the status line replaces routine logs; RUST_LOG overrides
    let watching =
        args.log_format == LogFormat::Text && std::io::IsTerminal::is_terminal(&std::io::stderr());
    e2fleet_proto::logs::init(args.log_format, if watching { "warn" } else { "info" });
    signals::set_nice(args.nice);
    let config = args.config()?;
    // a newer verified build installed here runs instead; a new build checks itself on
    // this machine before it joins (and rolls back if it fails)
    let engine = config.engine.clone();
    crate::update::at_start(&config.data_dir, &config.updates, || {
        crate::verify::check_offline(&engine)
    })?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    loop {
        let controls = Controls::new();
        let delivered = runtime.block_on(async {
            signals::spawn_handler(controls.clone());
            run(config.clone(), controls.clone()).await
        })?;
        let Some(version) = controls.update_to() else {
            println!("e2fleet-worker: stopped cleanly, {delivered} results delivered");
            return Ok(());
        };
        println!(
            "e2fleet-worker: {delivered} results delivered; switching to the update {version}"
        );
        // returns only if the new build cannot be run (then rolled back): go on with this one
        let e = crate::update::switch_and_exec(&config.data_dir, &version);
        tracing::error!(error = %format!("{e:#}"), "the update could not run; this build goes on");
    }
}

/// Joins the fleet and works until `controls` asks it to stop (or a `stop_after` limit):
/// registers, verifies this machine's hardware class, then leases, walks and reports.
/// Returns the results delivered.
pub async fn run(config: RunConfig, controls: Controls) -> Result<u64> {
    {
        let mut private = std::fs::DirBuilder::new();
        private.recursive(true);
        std::os::unix::fs::DirBuilderExt::mode(&mut private, 0o700);
        private.create(&config.data_dir).with_context(|| {
            format!(
                "cannot create the data directory {}",
                config.data_dir.display()
            )
        })?;
    }
    // `e2fleet-worker status | pause | resume | stop` from the start (also: a second
    // worker on this data directory is refused here)
    let _control = local_control::serve(&config.data_dir, controls.clone())?;
    controls.publish(controls::Snapshot {
        state: "joining".into(),
        threads: config.threads,
        coordinator: config.coordinator.clone(),
        ..Default::default()
    });
    let journal = journal::Journal::open(&config.data_dir)?;
    let api = Coordinator::lazy(&config.coordinator, config.ca_cert.as_deref())
        .map_err(anyhow::Error::msg)?;
    let mut conn = Connection::new(
        api,
        config.token.0.clone(),
        crate::host::host_info(config.hostname.as_deref(), &config.engine),
        identity::identity_path(&config.data_dir),
    );
    let conditions = Conditions::new(
        config.pause_file.clone(),
        config.on_battery,
        config.max_other_cpu,
        config.run_hours,
        config.power_supply_dir.clone(),
    )?
    .pause_while(&config.pause_while, PathBuf::from("/proc"));
    join(&mut conn, &controls).await?;
    let console = signals::Console::new(config.text_logs);
    let mut fleet =
        fleet_loop::FleetLoop::new(config, conn, journal, conditions, console, controls);
    fleet.verify_this_machine().await;
    fleet.run().await
}

/// Registers (again, with a saved identity: the coordinator learns this run's labels and
/// hardware class) until the coordinator answers, or a stop.
async fn join(conn: &mut Connection, controls: &Controls) -> Result<()> {
    if conn.has_token() {
        match conn.register().await {
            Ok(()) => {}
            Err(s) if s.code() == Code::Unauthenticated => conn.forget_token(),
            // away: the saved token serves until it is back
            Err(s) => conn.fail("register", &s, std::time::Instant::now()),
        }
    }
    while !conn.has_token() {
        match conn.register().await {
            Ok(()) => {}
            Err(s) if s.code() == Code::Unauthenticated => {
                anyhow::bail!(
                    "the coordinator at {} refused the enrolment token: {}",
                    conn.api.url,
                    s.message()
                )
            }
            Err(s) if s.code() == Code::Unimplemented => {
                anyhow::bail!(
                    "the coordinator at {} does not speak this worker's protocol (e2fleet.v2): upgrade the older of the two",
                    conn.api.url
                )
            }
            Err(s) => {
                conn.fail("register", &s, std::time::Instant::now());
                tokio::select! {
                    _ = tokio::time::sleep_until(conn.next_try.into()) => {}
                    _ = controls.changed() => {
                        if controls.stopping() {
                            anyhow::bail!("stopped before the coordinator at {} answered", conn.api.url);
                        }
                    }
                }
            }
        }
    }
    Ok(())
}
