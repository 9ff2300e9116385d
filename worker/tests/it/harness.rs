//! A coordinator in this process and worker processes from the real binary.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use e2fleet_coordinator::fleet::{Fleet, FleetConfig, system_clock};
use e2fleet_coordinator::store::Store;
use e2fleet_coordinator::store::testing::database_for;
use e2fleet_engine::formats::{LoadOptions, load_file, to_site_json};
use e2fleet_proto::api::JobRequest;

pub const ENROLL: &str = "enroll-test-0123456789";

pub struct Coordinator {
    pub url: String,
    pub port: u16,
    pub fleet: Arc<Fleet>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Coordinator {
    pub async fn start(db: &Path, port: u16, lease: Duration) -> Coordinator {
        let store = Store::connect(&database_for(db).await).await.unwrap();
        let fleet = Arc::new(Fleet::new(
            store,
            FleetConfig {
                lease,
                quarantine_after: 3,
                archive_after: None,
                accounts: Default::default(),
                enroll_token: ENROLL.into(),
                admin_token: ADMIN.into(),
                trust: Default::default(),
            },
            system_clock(),
        ));
        let listener = loop {
            match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
                Ok(l) => break l,
                Err(_) if port != 0 => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(e) => panic!("{e}"),
            }
        };
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let f = fleet.clone();
        let task = tokio::spawn(async move {
            e2fleet_coordinator::server::serve(listener, f, async {
                let _ = rx.await;
            })
            .await
            .unwrap();
        });
        Coordinator {
            url: format!("http://127.0.0.1:{port}"),
            port,
            fleet,
            stop: Some(tx),
            task: Some(task),
        }
    }

    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        // connections of live workers keep a graceful shutdown waiting: bound it, then
        // drop the server for real (port and connections), as a crash would
        let mut task = self.task.take().unwrap();
        if tokio::time::timeout(Duration::from_secs(2), &mut task)
            .await
            .is_err()
        {
            task.abort();
            let _ = task.await;
        }
    }

    pub async fn submit(&self, rel: &str, split_depth: usize, budget: Option<u64>) -> String {
        let p = load_file(&puzzle_path(rel), &LoadOptions::default()).unwrap();
        self.fleet
            .submit_job(JobRequest {
                name: rel.into(),
                puzzle_json: to_site_json(&p),
                order: None,
                split_depth: Some(split_depth),
                target_units: None,
                budget,
                replicas: 1,
                spot_check: 0.0,
                priority: 0,
                share: 1.0,
            })
            .await
            .unwrap()
            .job_id
            .to_string()
    }

    /// A job's status as the JSON the API serves (tests index it by key).
    pub async fn job(&self, id: &str) -> serde_json::Value {
        let status = self.fleet.job_status(id.parse().unwrap()).await.unwrap();
        serde_json::to_value(status).unwrap()
    }

    /// A suite's conformance matrix as the JSON the API serves.
    pub async fn matrix(&self, suite: &str) -> serde_json::Value {
        serde_json::to_value(self.fleet.verification_matrix(suite).await.unwrap()).unwrap()
    }

    /// Polls until the job is complete (or panics after `limit`).
    pub async fn wait_complete(&self, id: &str, limit: Duration) -> serde_json::Value {
        let start = Instant::now();
        loop {
            let doc = self.job(id).await;
            if doc["state"] == "complete" {
                return doc;
            }
            assert!(
                start.elapsed() < limit,
                "job not complete in {limit:?}: {doc}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Polls until some unit of the job has been leased.
    pub async fn wait_leased(&self, id: &str) {
        let start = Instant::now();
        loop {
            let doc = self.job(id).await;
            if doc["units"]["leased"].as_i64().unwrap_or(0) > 0 {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "nothing leased: {doc}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

pub fn puzzle_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../puzzles")
        .join(rel)
}

/// A child process, killed (SIGKILL) when dropped.
pub struct Proc(pub Child);

impl Proc {
    /// Sends a signal (`-TERM`, `-KILL`, ...).
    pub fn signal(&self, sig: &str) {
        Command::new("kill")
            .args([sig, &self.0.id().to_string()])
            .status()
            .unwrap();
    }

    /// Whether it still runs.
    #[allow(dead_code)]
    pub fn alive(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }

    /// Waits for the process to exit (bounded).
    pub async fn wait(&mut self, limit: Duration) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(s) = self.0.try_wait().unwrap() {
                return s;
            }
            assert!(start.elapsed() < limit, "process did not exit in {limit:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a worker process with two engine threads; its log is `<data_dir>.log`.
pub fn worker(url: &str, data_dir: &Path, hostname: &str, extra: &[&str]) -> Proc {
    worker_with(url, data_dir, hostname, 2, extra, false)
}

/// Starts a worker process with `threads` engine threads, in its own process group when
/// `own_group` (as service managers start it); its log is `<data_dir>.log`.
pub fn worker_with(
    url: &str,
    data_dir: &Path,
    hostname: &str,
    threads: u32,
    extra: &[&str],
    own_group: bool,
) -> Proc {
    worker_as(url, ENROLL, data_dir, hostname, threads, extra, own_group)
}

/// [`worker_with`], enrolled with `token` (an account's enrolment token).
pub fn worker_as(
    url: &str,
    token: &str,
    data_dir: &Path,
    hostname: &str,
    threads: u32,
    extra: &[&str],
    own_group: bool,
) -> Proc {
    use std::os::unix::process::CommandExt;
    let log = std::fs::File::create(data_dir.with_extension("log")).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_e2fleet-worker"));
    cmd.args(["run", "--coordinator", url, "--token", token])
        .args(["--threads", &threads.to_string(), "--nice", "0"])
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--hostname", hostname])
        .arg("--cache-dir")
        .arg(shared_cache())
        .args(extra)
        .env("RUST_LOG", "info")
        // a developer's unplugged laptop must not pause every test's workers (a test of
        // the battery pause says `--on-battery pause`, which wins over this)
        .env("E2FLEET_ON_BATTERY", "run")
        .stdout(Stdio::null())
        .stderr(log);
    if own_group {
        cmd.process_group(0);
    }
    Proc(cmd.spawn().unwrap())
}

/// The coordinator binary next to the worker binary, brought up to date once per test
/// run (`cargo test --workspace` has built it already; `-p e2fleet-worker` alone has not,
/// and an old binary would test old code).
/// The compiled-engine cache the tests share (builds are reused across tests and runs): a
/// private folder of this user's, as the worker requires.
pub fn shared_cache() -> PathBuf {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let probe = tempfile::NamedTempFile::new().unwrap();
    let uid = probe.as_file().metadata().unwrap().uid();
    let dir = std::env::temp_dir().join(format!("e2fleet-worker-test-cache-{uid}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

pub fn coordinator_bin() -> PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    BUILT.call_once(|| {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-q", "-p", "e2fleet-coordinator"])
            .status()
            .unwrap();
        assert!(status.success());
    });
    PathBuf::from(env!("CARGO_BIN_EXE_e2fleet-worker")).with_file_name("e2fleet-coordinator")
}

/// The admin token of coordinator processes started by [`serve`].
pub const ADMIN: &str = "admin-test-0123456789";

/// Starts the coordinator binary (3 s leases); returns it and its URL.
pub fn serve(db: &Path, listen: &str, extra: &[&str]) -> (Proc, String) {
    let (proc, url, _) = serve_lines(db, listen, extra);
    (proc, url)
}

/// [`serve`], also returning what the coordinator printed before it listened.
pub fn serve_lines(db: &Path, listen: &str, extra: &[&str]) -> (Proc, String, Vec<String>) {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(coordinator_bin())
        .args(["serve", "--listen", listen, "--lease-seconds", "3"])
        .arg("--db")
        .arg(db)
        .args(extra)
        .env("E2FLEET_ENROLL_TOKEN", ENROLL)
        .env("E2FLEET_ADMIN_TOKEN", ADMIN)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let mut before = Vec::new();
    let addr = loop {
        let line = lines
            .next()
            .expect("coordinator printed its address")
            .unwrap();
        if let Some(rest) = line.strip_prefix("coordinator listening on ") {
            break rest.split_whitespace().next().unwrap().to_string();
        }
        before.push(line);
    };
    (Proc(child), addr, before)
}

/// Polls a job through the coordinator binary's `job` command until `until` holds
/// (bounded).
pub async fn wait_job(
    url: &str,
    job: &str,
    limit: Duration,
    until: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let start = Instant::now();
    loop {
        let doc = admin(url, &["job", job]);
        if until(&doc) {
            return doc;
        }
        assert!(
            start.elapsed() < limit,
            "job did not get there in {limit:?}: {}",
            doc["units"]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Runs an admin subcommand of the coordinator binary with `--json`.
pub fn admin(url: &str, args: &[&str]) -> serde_json::Value {
    json_of(Command::new(coordinator_bin()).args(args).args([
        "--coordinator",
        url,
        "--admin-token",
        ADMIN,
        "--json",
    ]))
}

/// Runs `command`, checks it succeeded (else fails with its stderr) and parses its stdout
/// as JSON.
pub fn json_of(command: &mut Command) -> serde_json::Value {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs the worker binary with `args` and parses its JSON output (see [`json_of`]).
pub fn worker_json(args: &[&str]) -> serde_json::Value {
    json_of(Command::new(env!("CARGO_BIN_EXE_e2fleet-worker")).args(args))
}

/// Nodes of results by verdict.
pub fn nodes_with_verdict(doc: &serde_json::Value, verdict: &str) -> i64 {
    doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["verdict"] == verdict)
        .map(|r| r["nodes"].as_i64().unwrap())
        .sum()
}

/// Sends raw bytes and reads what comes back until the peer closes (bounded).
pub async fn raw_exchange(addr: &str, bytes: &[u8]) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = s.write_all(bytes).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    out
}

/// `GET path` over HTTP/1.1 from a coordinator at `url` (`http://`): its status and body.
pub async fn http_get(url: &str, path: &str) -> (u16, String) {
    let addr = url.trim_start_matches("http://");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let answer = String::from_utf8_lossy(&raw_exchange(addr, request.as_bytes()).await).to_string();
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}
