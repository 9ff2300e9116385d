//! A coordinator in this process and worker processes from the real binary.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use e2fleet_coordinator::fleet::{Fleet, FleetConfig, JobRequest, system_clock};
use e2fleet_coordinator::store::Store;
use e2fleet_engine::formats::{LoadOptions, load_file, to_site_json};

pub const ENROLL: &str = "enroll-test";

pub struct Coordinator {
    pub url: String,
    pub port: u16,
    pub fleet: Arc<Fleet>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Coordinator {
    pub async fn start(db: &Path, port: u16, lease: Duration) -> Coordinator {
        let store = Store::open(db).await.unwrap();
        let fleet = Arc::new(Fleet::new(
            store,
            FleetConfig {
                lease,
                quarantine_after: 3,
                enroll_token: ENROLL.into(),
                admin_token: "admin".into(),
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
                order: "row-major".into(),
                split_depth: Some(split_depth),
                target_units: 0,
                budget,
                replicas: 1,
                spot_check: 0.0,
            })
            .await
            .unwrap()
            .0
    }

    pub async fn job(&self, id: &str) -> serde_json::Value {
        self.fleet.job_status(id).await.unwrap()
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

/// A worker process.
pub struct Worker(pub Child);

impl Worker {
    pub fn start(url: &str, data_dir: &Path, hostname: &str, extra: &[&str]) -> Worker {
        let log = std::fs::File::create(data_dir.with_extension("log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_e2fleet-worker"))
            .args([
                "run",
                "--coordinator",
                url,
                "--token",
                ENROLL,
                "--threads",
                "2",
                "--nice",
                "0",
            ])
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--hostname", hostname])
            .arg("--cache-dir")
            .arg(std::env::temp_dir().join("e2fleet-worker-test-cache"))
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        Worker(child)
    }

    pub fn signal(&self, sig: &str) {
        Command::new("kill")
            .args([sig, &self.0.id().to_string()])
            .status()
            .unwrap();
    }

    /// Waits for the process to exit (bounded).
    pub async fn wait(mut self, limit: Duration) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(s) = self.0.try_wait().unwrap() {
                return s;
            }
            assert!(start.elapsed() < limit, "worker did not exit in {limit:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
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
