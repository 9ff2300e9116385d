//! A fleet on hosts of its own: coordinators and workers run as the real programs, each
//! on its host ([`crate::hosts`]); every worker reaches every coordinator through an
//! emulated link of its own ([`crate::link`]), by name and over TLS with the fleet's own
//! CA, as a volunteer's machine reaches a coordinator on the internet. Coordinators on
//! PostgreSQL reach the database through links of their own too, so a coordinator's host
//! can be cut off whole.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use e2fleet_coordinator::client::Operator;
use e2fleet_coordinator::store::testing::PostgresServer;
use e2fleet_engine::formats::{LoadOptions, load_file, to_site_json};
use e2fleet_proto::api::status::JobStatus;
use e2fleet_proto::api::{JobId, JobRequest, JobState};

use crate::hosts::{Host, Net};
use crate::link::{Link, Shape};

/// The fleet's enrolment token.
pub const ENROLL: &str = "netfleet-enroll-0123456789abcdef";
/// The fleet's admin token.
pub const ADMIN: &str = "netfleet-admin-0123456789abcdef";
/// The port coordinators listen on (and the first their links offer workers).
pub const PORT: u16 = 7733;

/// Coordinator `i`'s name, as workers dial it.
pub fn coordinator_name(i: usize) -> String {
    match i {
        0 => "coordinator.netfleet.test".into(),
        _ => format!("coordinator-{}.netfleet.test", i + 1),
    }
}

/// The programs a fleet runs.
#[derive(Clone, Debug)]
pub struct Binaries {
    /// `e2fleet-coordinator`.
    pub coordinator: PathBuf,
    /// `e2fleet-worker`.
    pub worker: PathBuf,
}

impl Binaries {
    /// From `E2FLEET_BIN_DIR`, else beside this program (or its parent folder: a test
    /// binary lives in `target/<profile>/deps`).
    pub fn find() -> Result<Binaries> {
        let mut dirs = Vec::new();
        if let Ok(d) = std::env::var("E2FLEET_BIN_DIR") {
            dirs.push(PathBuf::from(d));
        }
        if let Ok(exe) = std::env::current_exe()
            && let Some(d) = exe.parent()
        {
            dirs.push(d.to_path_buf());
            if let Some(up) = d.parent() {
                dirs.push(up.to_path_buf());
            }
        }
        for d in &dirs {
            let (c, w) = (d.join("e2fleet-coordinator"), d.join("e2fleet-worker"));
            if c.exists() && w.exists() {
                return Ok(Binaries {
                    coordinator: c,
                    worker: w,
                });
            }
        }
        bail!(
            "e2fleet-coordinator and e2fleet-worker not found in {dirs:?}: build them (cargo build) or set E2FLEET_BIN_DIR"
        )
    }
}

/// A program running on a host, with its output in a log file. Killed when dropped.
pub struct Proc {
    child: Child,
    /// Its log (stdout and stderr).
    pub log: PathBuf,
}

impl Proc {
    fn signal(&self, sig: &str) {
        let _ = std::process::Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status();
    }

    /// SIGSTOP: the process holds still, as a laptop whose lid closed.
    pub fn freeze(&self) {
        self.signal("STOP");
    }

    /// SIGCONT.
    pub fn thaw(&self) {
        self.signal("CONT");
    }

    /// SIGTERM: a clean stop.
    pub fn terminate(&self) {
        self.signal("TERM");
    }

    /// Waits up to `limit` for the process to exit; its exit status.
    pub fn wait(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let start = Instant::now();
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            if start.elapsed() >= limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether it still runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// What it logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.signal("CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One worker host of a fleet.
#[derive(Clone, Debug)]
pub struct WorkerSpec {
    /// Its host name.
    pub name: String,
    /// Its link to every coordinator.
    pub shape: Shape,
    /// Engine threads.
    pub threads: usize,
    /// More `run` flags (e.g. `--cpu-percent 10`).
    pub extra: Vec<String>,
}

/// What a fleet is made of.
#[derive(Clone, Debug)]
pub struct FleetSpec {
    /// Coordinators (more than one share a PostgreSQL database).
    pub coordinators: usize,
    /// Lease length, seconds.
    pub lease_seconds: u64,
    /// The worker hosts.
    pub workers: Vec<WorkerSpec>,
    /// The workers' `--engine`.
    pub engine: String,
}

/// A coordinator's host.
pub struct CoordinatorHost {
    /// The host.
    pub host: Host,
    /// The running coordinator.
    pub proc: Option<Proc>,
    /// Its link to the database (PostgreSQL only).
    pub db_link: Option<Link>,
    db: String,
    log: PathBuf,
}

/// A worker's host.
pub struct WorkerHost {
    /// The host.
    pub host: Host,
    /// Its links, one per coordinator.
    pub links: Vec<Link>,
    /// The running worker.
    pub proc: Option<Proc>,
    /// Its data directory.
    pub data_dir: PathBuf,
    log: PathBuf,
    threads: usize,
    extra: Vec<String>,
}

/// A running fleet; everything goes when it is dropped.
pub struct Fleet {
    /// The fleet's coordinators.
    pub coordinators: Vec<CoordinatorHost>,
    /// The fleet's workers.
    pub workers: Vec<WorkerHost>,
    spec: FleetSpec,
    bins: Binaries,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    // dropped in this order: processes (above), then the database, the files, the hosts
    _pg: Option<PostgresServer>,
    /// Where its files live (kept after the run with `E2FLEET_NETFLEET_KEEP=1`).
    pub dir: PathBuf,
    _temp: Option<tempfile::TempDir>,
    net: Net,
}

impl Fleet {
    /// Makes the hosts and links, starts the coordinators and checks this machine's
    /// hardware class once (so every worker joins without running the verification
    /// suite again); the workers are started by [`Fleet::start_worker`].
    pub async fn start(spec: FleetSpec) -> Result<Fleet> {
        let bins = Binaries::find()?;
        let mut net = Net::create()?;
        let temp = tempfile::Builder::new()
            .prefix("e2fleet-netfleet-")
            .tempdir()?;
        let (dir, temp) = if std::env::var_os("E2FLEET_NETFLEET_KEEP").is_some() {
            let kept = temp.keep();
            println!("  (files kept in {})", kept.display());
            (kept, None)
        } else {
            (temp.path().to_path_buf(), Some(temp))
        };
        let names: Vec<String> = (0..spec.coordinators).map(coordinator_name).collect();
        let mut chosts = Vec::new();
        for i in 0..spec.coordinators {
            chosts.push(net.add_host(&format!("coordinator-{}", i + 1), &[])?);
        }
        let mut cert_names = names.clone();
        cert_names.extend(chosts.iter().map(|h| h.addr.to_string()));
        let tls = e2fleet_coordinator::tls::self_signed(&dir.join("tls"), &cert_names)
            .map_err(anyhow::Error::msg)?;
        let pg = if spec.coordinators > 1 {
            Some(PostgresServer::start().map_err(anyhow::Error::msg)?)
        } else {
            None
        };
        let mut coordinators = Vec::new();
        for (i, host) in chosts.into_iter().enumerate() {
            let (db, db_link) = match &pg {
                Some(pg) => {
                    let server: SocketAddr = pg_addr(pg.url())?;
                    let link = Link::start(
                        SocketAddr::new(IpAddr::V4(host.far), 5432),
                        server,
                        None,
                        Shape::LOOPBACK,
                    )
                    .await?;
                    let url =
                        pg.url()
                            .replacen(&server.to_string(), &format!("{}:5432", host.far), 1);
                    let db = e2fleet_coordinator::store::testing::create_database(&url, "netfleet")
                        .await
                        .map_err(anyhow::Error::msg)?;
                    (db, Some(link))
                }
                None => (dir.join("e2fleet.db").display().to_string(), None),
            };
            coordinators.push(CoordinatorHost {
                log: dir.join(format!("coordinator-{}.log", i + 1)),
                host,
                proc: None,
                db_link,
                db,
            });
        }
        let dial: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut workers = Vec::new();
        for (k, w) in spec.workers.iter().enumerate() {
            let host = net.add_host(&w.name, &dial)?;
            let mut links = Vec::new();
            for (i, c) in coordinators.iter().enumerate() {
                // the coordinator sees each worker host at an address of its own
                let source = net.add_far_address(&c.host, 10 + k as u8)?;
                links.push(
                    Link::start(
                        SocketAddr::new(IpAddr::V4(host.far), PORT + i as u16),
                        SocketAddr::new(IpAddr::V4(c.host.addr), PORT),
                        Some(IpAddr::V4(source)),
                        w.shape,
                    )
                    .await?,
                );
            }
            workers.push(WorkerHost {
                log: dir.join(format!("worker-{}.log", w.name)),
                data_dir: dir.join(format!("worker-{}", w.name)),
                host,
                links,
                proc: None,
                threads: w.threads,
                extra: w.extra.clone(),
            });
        }
        let mut fleet = Fleet {
            coordinators,
            workers,
            spec,
            bins,
            ca: tls.ca,
            cert: tls.cert,
            key: tls.key,
            _pg: pg,
            dir,
            _temp: temp,
            net,
        };
        for i in 0..fleet.coordinators.len() {
            fleet.start_coordinator(i).await?;
        }
        fleet.verify_class().await?;
        Ok(fleet)
    }

    /// Starts (or starts again) coordinator `i` and waits until it answers.
    pub async fn start_coordinator(&mut self, i: usize) -> Result<()> {
        let c = &self.coordinators[i];
        let mut cmd = self.net.command(&c.host, &self.bins.coordinator);
        cmd.args([
            "serve",
            "--listen",
            &format!("0.0.0.0:{PORT}"),
            "--db",
            &c.db,
        ])
        .arg("--tls-cert")
        .arg(&self.cert)
        .arg("--tls-key")
        .arg(&self.key)
        .args([
            "--lease-seconds",
            &self.spec.lease_seconds.to_string(),
            "--log-format",
            "json",
        ])
        .env("E2FLEET_ENROLL_TOKEN", ENROLL)
        .env("E2FLEET_ADMIN_TOKEN", ADMIN);
        let proc = spawn_logged(cmd, &c.log)?;
        self.coordinators[i].proc = Some(proc);
        let start = Instant::now();
        loop {
            if self.admin(i).await.is_ok() {
                return Ok(());
            }
            if start.elapsed() > Duration::from_secs(60) {
                bail!(
                    "coordinator {} did not answer in 60 s: {}",
                    i + 1,
                    tail(&self.coordinators[i].log)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Kills coordinator `i` (SIGKILL: a crash, a reboot).
    pub fn kill_coordinator(&mut self, i: usize) {
        self.coordinators[i].proc = None;
    }

    /// The operator API of coordinator `i`, straight from the harness's namespace.
    pub async fn admin(&self, i: usize) -> Result<Operator> {
        let url = format!("https://{}:{PORT}", self.coordinators[i].host.addr);
        Operator::connect(&url, Some(&self.ca), ADMIN)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// Runs the verification suite once for this machine's hardware class, through
    /// coordinator 0.
    async fn verify_class(&self) -> Result<()> {
        let url = format!("https://{}:{PORT}", self.coordinators[0].host.addr);
        let out = tokio::process::Command::new(&self.bins.worker)
            .args([
                "verify",
                "--coordinator",
                &url,
                "--engine",
                &self.spec.engine,
            ])
            .arg("--ca-cert")
            .arg(&self.ca)
            .env("E2FLEET_ENROLL_TOKEN", ENROLL)
            .current_dir(&self.dir)
            .output()
            .await?;
        if !out.status.success() {
            bail!(
                "verify failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// Submits `puzzle` split into about `units` units with node budget `budget`.
    pub async fn submit(&self, puzzle: &Path, units: usize, budget: Option<u64>) -> Result<JobId> {
        let p = load_file(puzzle, &LoadOptions::default())
            .map_err(|e| anyhow::anyhow!("{}: {e}", puzzle.display()))?;
        let created = self
            .admin(0)
            .await?
            .submit(&JobRequest {
                name: p.name().to_string(),
                puzzle_json: to_site_json(&p),
                order: None,
                split_depth: None,
                target_units: Some(units),
                budget,
                replicas: 1,
                spot_check: 0.0,
                priority: 0,
                share: 1.0,
            })
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(created.job_id)
    }

    /// Starts worker `i` on its host, joining every coordinator by name over its links.
    pub fn start_worker(&mut self, i: usize) -> Result<()> {
        let urls: Vec<String> = (0..self.coordinators.len())
            .map(|c| format!("https://{}:{}", coordinator_name(c), PORT + c as u16))
            .collect();
        let w = &self.workers[i];
        let mut cmd = self.net.command(&w.host, &self.bins.worker);
        cmd.args(["run", "--coordinator", &urls.join(",")])
            .arg("--ca-cert")
            .arg(&self.ca)
            .arg("--data-dir")
            .arg(&w.data_dir)
            .args([
                "--threads",
                &w.threads.to_string(),
                "--nice",
                "0",
                "--on-battery",
                "run",
                "--log-format",
                "json",
                "--engine",
                &self.spec.engine,
            ])
            .args(&w.extra)
            .env("E2FLEET_ENROLL_TOKEN", ENROLL)
            .env("RUST_LOG", "info");
        let proc = spawn_logged(cmd, &w.log)?;
        self.workers[i].proc = Some(proc);
        Ok(())
    }

    /// Starts every worker.
    pub fn start_workers(&mut self) -> Result<()> {
        (0..self.workers.len()).try_for_each(|i| self.start_worker(i))
    }

    /// Engine threads over all workers.
    pub fn threads(&self) -> usize {
        self.workers.iter().map(|w| w.threads).sum()
    }

    /// A job's status from coordinator `i`.
    pub async fn job(&self, i: usize, job: JobId) -> Result<JobStatus> {
        self.admin(i)
            .await?
            .job(job)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// Waits until `job` completes (asking any coordinator that answers); fails after
    /// `limit` with what the workers said last.
    pub async fn wait_complete(&self, job: JobId, limit: Duration) -> Result<JobStatus> {
        let start = Instant::now();
        loop {
            for i in 0..self.coordinators.len() {
                if let Ok(s) = self.job(i, job).await
                    && s.state == JobState::Complete
                {
                    return Ok(s);
                }
            }
            if start.elapsed() > limit {
                let mut said = String::new();
                for w in &self.workers {
                    said.push_str(&format!("\n--- {}: {}", w.host.name, tail(&w.log)));
                }
                let status = self.job(0, job).await.map(|s| format!("{s:?}"));
                bail!("the job did not complete in {limit:?}: {status:?}{said}");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The log of worker `i`.
    pub fn worker_log(&self, i: usize) -> String {
        std::fs::read_to_string(&self.workers[i].log).unwrap_or_default()
    }

    /// The log path of worker `i`.
    pub fn worker_log_path(&self, i: usize) -> &Path {
        &self.workers[i].log
    }

    /// Worker `i`'s process.
    pub fn worker(&mut self, i: usize) -> &mut Proc {
        self.workers[i].proc.as_mut().expect("started")
    }

    /// Cuts worker `i` off from every coordinator (bytes wait for the heal).
    pub fn partition_worker(&self, i: usize) {
        self.workers[i].links.iter().for_each(Link::partition);
    }

    /// Heals worker `i`'s links.
    pub fn heal_worker(&self, i: usize) {
        self.workers[i].links.iter().for_each(Link::heal);
    }

    /// Cuts coordinator `c` off from everything: every worker's link to it, and its
    /// database.
    pub fn partition_coordinator(&self, c: usize) {
        for w in &self.workers {
            w.links[c].partition();
        }
        if let Some(l) = &self.coordinators[c].db_link {
            l.partition();
        }
    }

    /// Heals coordinator `c`'s links.
    pub fn heal_coordinator(&self, c: usize) {
        for w in &self.workers {
            w.links[c].heal();
        }
        if let Some(l) = &self.coordinators[c].db_link {
            l.heal();
        }
    }

    /// Every open connection of worker `i` loses its bytes without a reset.
    pub fn blackhole_worker(&self, i: usize) -> usize {
        self.workers[i].links.iter().map(Link::blackhole).sum()
    }

    /// Every open connection of worker `i` is reset.
    pub fn reset_worker(&self, i: usize) -> usize {
        self.workers[i].links.iter().map(Link::reset).sum()
    }

    /// Connections open on worker `i`'s links.
    pub fn open_connections(&self, i: usize) -> usize {
        self.workers[i].links.iter().map(Link::open).sum()
    }

    /// Checks what a volunteer's network looks like: a worker host reaches the
    /// coordinator only through its own link, by name (its relay), never the
    /// coordinator's own address; the coordinator's host cannot dial a worker host at all
    /// (nothing inbound, as behind a home router). What it checked, in words.
    pub fn check_topology(&self) -> Result<String> {
        let c = &self.coordinators[0].host;
        for w in &self.workers {
            ensure!(
                self.net.dials(Some(&w.host), w.host.far, PORT),
                "{} cannot reach its own link's far end",
                w.host.name
            );
            ensure!(
                !self.net.dials(Some(&w.host), c.addr, PORT),
                "{} reaches the coordinator's address without its link",
                w.host.name
            );
            ensure!(
                !self.net.dials(Some(c), w.host.addr, 22),
                "the coordinator's host reaches {} (workers must only dial out)",
                w.host.name
            );
        }
        Ok(format!(
            "{} worker host(s) reach the coordinator only through their own link, by name over TLS; the coordinator's host cannot reach them",
            self.workers.len()
        ))
    }

    /// Another address at the far end of coordinator `c`'s link, to dial it from.
    pub fn add_far_address(&self, c: usize, last_octet: u8) -> Result<std::net::Ipv4Addr> {
        self.net
            .add_far_address(&self.coordinators[c].host, last_octet)
    }

    /// The CA file clients trust.
    pub fn ca(&self) -> &Path {
        &self.ca
    }
}

fn spawn_logged(mut cmd: std::process::Command, log: &Path) -> Result<Proc> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("cannot open {}", log.display()))?;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .context("cannot start a fleet program")?;
    Ok(Proc {
        child,
        log: log.to_path_buf(),
    })
}

/// The last lines of a log, for a failure's message.
pub fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// The address in a `postgres://user@host:port/db` URL.
fn pg_addr(url: &str) -> Result<SocketAddr> {
    let rest = url.split("://").nth(1).context("a postgres URL")?;
    let authority = rest.split('/').next().unwrap_or("");
    let hostport = authority.rsplit('@').next().unwrap_or(authority);
    hostport
        .parse()
        .with_context(|| format!("{hostport} is not host:port"))
}
