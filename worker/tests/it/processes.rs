//! Real processes only: the coordinator binary and the worker binary on loopback. The
//! coordinator is killed with SIGKILL in the middle of a job and started again on the same
//! database; the job still ends at the exact total.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{Worker, puzzle_path};

/// The coordinator binary next to the worker binary (built on demand when this crate's
/// tests run alone).
fn coordinator_bin() -> PathBuf {
    let bin =
        PathBuf::from(env!("CARGO_BIN_EXE_e2fleet-worker")).with_file_name("e2fleet-coordinator");
    if !bin.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "e2fleet-coordinator"])
            .status()
            .unwrap();
        assert!(status.success());
    }
    bin
}

struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(db: &std::path::Path, listen: &str) -> (Proc, String) {
    let mut child = Command::new(coordinator_bin())
        .args(["serve", "--listen", listen, "--lease-seconds", "5"])
        .arg("--db")
        .arg(db)
        .env("E2FLEET_ENROLL_TOKEN", crate::harness::ENROLL)
        .env("E2FLEET_ADMIN_TOKEN", "admin")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("coordinator printed its address")
            .unwrap();
        if let Some(rest) = line.strip_prefix("coordinator listening on ") {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    (Proc(child), addr)
}

fn admin(url: &str, args: &[&str]) -> serde_json::Value {
    let out = Command::new(coordinator_bin())
        .args(args)
        .args(["--coordinator", url, "--admin-token", "admin", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_the_coordinator_mid_job_and_restart_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let (coordinator, url) = serve(&db, "127.0.0.1:0");
    let puzzle = puzzle_path("brendan/set1/pieces_06x06.txt");
    let job = admin(
        &url,
        &[
            "submit",
            puzzle.to_str().unwrap(),
            "--split-depth",
            "2",
            "--budget",
            "300000",
        ],
    );
    let job_id = job["job_id"].as_str().unwrap().to_string();
    let _worker = Worker::start(&url, &dir.path().join("w"), "w", &["--engine", "reference"]);
    // let it get well into the job
    let start = Instant::now();
    loop {
        let doc = admin(&url, &["job", &job_id]);
        if doc["units"]["done"].as_u64().unwrap() >= 30 {
            assert_eq!(doc["state"], "running", "the kill must land mid-job");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no progress: {doc}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut coordinator = coordinator;
    Command::new("kill")
        .args(["-KILL", &coordinator.0.id().to_string()])
        .status()
        .unwrap();
    let _ = coordinator.0.wait();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let port = url.rsplit(':').next().unwrap();
    let (_coordinator, url2) = serve(&db, &format!("127.0.0.1:{port}"));
    let start = Instant::now();
    let doc = loop {
        let doc = admin(&url2, &["job", &job_id]);
        if doc["state"] == "complete" {
            break doc;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "not complete: {}",
            doc["units"]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(doc["nodes_total"], 69_284_103);
    assert_eq!(doc["solutions_count"], 260);
    assert_eq!(doc["conservation_ok"], true);
}
