//! Signed updates, end to end with real processes: the coordinator binary serving a
//! releases folder made by its own `release-key generate` and `release publish`, and a
//! worker process with `--updates on`. "Newer builds" are copies of the worker binary
//! whose version stamp is rewritten (the stamp is what a build says it is, and what
//! `release publish` reads), so the switch runs a different file that reports a
//! different version.
//! - a newer signed build: the worker switches in place between units (same process),
//!   confirms it after the built-in checks, reports the new version, and the job's total
//!   is exact;
//! - each bad release (a bad signature, another key, a downgrade, a truncated and an
//!   oversized download, a full disk): refused with the reason in the log, and the
//!   running build goes on walking;
//! - a new build that cannot start: the next start rolls it back, the old build walks
//!   on, never takes that version again, and the total is exact.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use e2fleet_engine::testing::{BRENDAN_6X6, assert_exact};

use crate::harness::{
    Proc, admin, coordinator_bin, http_get, puzzle_path, serve, wait_job, worker_with,
};

/// This build's version (the stamp's).
fn own_version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

/// A copy of `binary` in `dir` whose stamp says `version` (same width as the original's).
fn restamped(binary: &Path, dir: &Path, version: &str) -> PathBuf {
    let mut bytes = std::fs::read(binary).unwrap();
    let old = format!("E2FLEET_WORKER_RELEASE={};", own_version());
    let new = format!("E2FLEET_WORKER_RELEASE={version};");
    assert_eq!(
        old.len(),
        new.len(),
        "a test version must be as wide as {}",
        own_version()
    );
    let at = bytes
        .windows(old.len())
        .position(|w| w == old.as_bytes())
        .expect("the worker binary carries its version stamp");
    bytes[at..at + new.len()].copy_from_slice(new.as_bytes());
    let out = dir.join(format!("e2fleet-worker-{version}"));
    std::fs::write(&out, bytes).unwrap();
    out
}

/// A newer version of the same width as this build's: `9.0.N`.
fn newer(n: u32) -> String {
    let v = format!("9.0.{n}");
    assert_eq!(v.len(), own_version().len());
    v
}

fn coordinator_cli(args: &[&str]) -> std::process::Output {
    let out = Command::new(coordinator_bin()).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `release-key generate` into `dir/NAME`; returns the key folder and the public key.
fn generate_key(dir: &Path, name: &str) -> (PathBuf, String) {
    let keys = dir.join(name);
    let out = coordinator_cli(&["release-key", "generate", "--dir", keys.to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    let public = text.lines().last().unwrap().trim().to_string();
    (keys, public)
}

fn publish(releases: &Path, keys: &Path, binary: &Path) {
    coordinator_cli(&[
        "release",
        "publish",
        binary.to_str().unwrap(),
        "--key",
        keys.join("release.key").to_str().unwrap(),
        "--releases",
        releases.to_str().unwrap(),
    ]);
}

fn served_binary(releases: &Path, version: &str) -> PathBuf {
    releases
        .join("worker")
        .join(e2fleet_proto::release::this_platform())
        .join(version)
        .join("e2fleet-worker")
}

fn log_of(data: &Path) -> String {
    std::fs::read_to_string(data.with_extension("log")).unwrap_or_default()
}

/// Waits until the worker's log contains `needle` (bounded).
async fn wait_log(data: &Path, needle: &str, limit: Duration) -> String {
    let start = Instant::now();
    loop {
        let log = log_of(data);
        if log.contains(needle) {
            return log;
        }
        assert!(
            start.elapsed() < limit,
            "the worker never logged {needle:?}; its log:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The reported versions of the workers called `host`.
fn versions_of(url: &str, host: &str) -> Vec<String> {
    admin(url, &["workers"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["hostname"] == host)
        .map(|w| w["worker_version"].as_str().unwrap().to_string())
        .collect()
}

fn units_done(url: &str, job: &str) -> u64 {
    admin(url, &["job", job])["units"]["done"].as_u64().unwrap()
}

/// Brendan 6x6 in many budgeted runs (a few seconds on one thread).
fn submit_6x6(url: &str) -> String {
    let puzzle = puzzle_path(BRENDAN_6X6.file);
    admin(
        url,
        &[
            "submit",
            puzzle.to_str().unwrap(),
            "--split-depth",
            "3",
            "--budget",
            "40000",
        ],
    )["job_id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Waits until the job has more units done than `than` (the worker walks on).
async fn walks_on(url: &str, job: &str, than: u64) -> u64 {
    let start = Instant::now();
    loop {
        let done = units_done(url, job);
        if done > than {
            return done;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the worker stopped walking"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A coordinator serving a releases folder, and the fleet's release key.
struct Fleet {
    dir: tempfile::TempDir,
    releases: PathBuf,
    /// The key's folder (`release.key`, `release.pub`).
    keys: PathBuf,
    /// The public key's base64 line.
    public: String,
    url: String,
    _coordinator: Proc,
}

impl Fleet {
    fn start() -> Fleet {
        let dir = tempfile::tempdir().unwrap();
        let releases = dir.path().join("releases");
        let (keys, public) = generate_key(dir.path(), "key");
        let (coordinator, url) = serve(
            &dir.path().join("c.db"),
            "127.0.0.1:0",
            &["--releases", releases.to_str().unwrap()],
        );
        Fleet {
            dir,
            releases,
            keys,
            public,
            url,
            _coordinator: coordinator,
        }
    }

    /// Signs `binary` with the fleet's key and offers it.
    fn publish(&self, binary: &Path) {
        publish(&self.releases, &self.keys, binary);
    }

    /// A copy of this worker binary stamped `version`.
    fn build(&self, version: &str) -> PathBuf {
        restamped(
            Path::new(env!("CARGO_BIN_EXE_e2fleet-worker")),
            self.dir.path(),
            version,
        )
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_switches_to_a_newer_signed_build_between_units_and_the_total_stays_exact() {
    let fleet = Fleet::start();
    let (dir, url) = (fleet.dir.path(), fleet.url.as_str());
    let job = submit_6x6(url);
    let data = dir.join("w");
    let mut worker = worker_with(url, &data, "updating", 1, &["--updates", "on"], false);
    walks_on(url, &job, 5).await;
    assert_eq!(versions_of(url, "updating"), [own_version()]);
    // the operator publishes a newer build while the worker walks
    let v = newer(1);
    fleet.publish(&fleet.build(&v));
    wait_log(&data, "update confirmed", Duration::from_secs(60)).await;
    let doc = wait_job(url, &job, Duration::from_secs(120), |d| {
        d["state"] == "complete"
    })
    .await;
    assert_exact(&doc, BRENDAN_6X6);
    let log = log_of(&data);
    assert!(log.contains("pinned the fleet's release key"), "{log}");
    assert!(log.contains("stopping to switch to the update"), "{log}");
    // the same process, now the new build, and the coordinator knows it as such
    assert!(
        worker.0.try_wait().unwrap().is_none(),
        "the worker process exited"
    );
    // (it registers again as the new build once it has confirmed itself)
    let start = Instant::now();
    while versions_of(url, "updating") != std::slice::from_ref(&v) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the coordinator does not know the worker as {v}: {:?}",
            versions_of(url, "updating")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let current = std::fs::read_to_string(data.join("releases/current")).unwrap();
    assert_eq!(current.trim(), v);
    assert!(!data.join("releases/trial").exists());
    // what the dashboard's workers page reads: the release offered, per platform
    let (status, body) = http_get(url, "/api/releases").await;
    assert_eq!(status, 200, "{body}");
    let offered: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(offered["offered"][0]["version"], v.as_str());
    assert_eq!(
        offered["offered"][0]["platform"],
        e2fleet_proto::release::this_platform()
    );
    // the binary is for workers: a stranger without a token gets none (and no slot)
    let binary = format!(
        "/downloads/worker/{}/{v}/e2fleet-worker",
        e2fleet_proto::release::this_platform()
    );
    assert_eq!(http_get(url, &binary).await.0, 401);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_releases_are_refused_and_the_running_build_walks_on() {
    let fleet = Fleet::start();
    let (dir, url, releases) = (fleet.dir.path(), fleet.url.as_str(), &fleet.releases);
    let (other_keys, _) = generate_key(dir, "other");
    // a long job: the worker walks through every case
    let puzzle = puzzle_path(e2fleet_engine::testing::BENCH_EASY_16.file);
    let job = admin(
        url,
        &["submit", puzzle.to_str().unwrap(), "--units", "4000"],
    )["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    let data = dir.join("w");
    let _worker = worker_with(
        url,
        &data,
        "careful",
        1,
        &["--updates", "on", "--release-key", &fleet.public],
        false,
    );
    let mut done = walks_on(url, &job, 2).await;
    let platform = e2fleet_proto::release::this_platform();

    // signed by another key
    publish(releases, &other_keys, &fleet.build(&newer(1)));
    wait_log(&data, "different key", Duration::from_secs(30)).await;
    done = walks_on(url, &job, done).await;

    // a signature that does not hold (its bytes changed, its statement intact)
    let v = newer(2);
    fleet.publish(&fleet.build(&v));
    let sig = served_binary(releases, &v).with_extension("minisig");
    let text = std::fs::read_to_string(&sig).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let flipped: String = lines[1]
        .chars()
        .enumerate()
        .map(|(i, c)| {
            if i == 20 {
                if c == 'A' { 'B' } else { 'A' }
            } else {
                c
            }
        })
        .collect();
    lines[1] = flipped;
    std::fs::write(&sig, lines.join("\n") + "\n").unwrap();
    wait_log(&data, "signature does not hold", Duration::from_secs(30)).await;
    done = walks_on(url, &job, done).await;

    // truncated on the way (the file served is shorter than the release)
    let v = newer(3);
    fleet.publish(&fleet.build(&v));
    let served = served_binary(releases, &v);
    let len = std::fs::metadata(&served).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&served)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    wait_log(
        &data,
        &format!("ended after {} of {len} bytes", len / 2),
        Duration::from_secs(30),
    )
    .await;
    done = walks_on(url, &job, done).await;

    // oversized (more bytes than the release has)
    let v = newer(4);
    fleet.publish(&fleet.build(&v));
    let served = served_binary(releases, &v);
    let mut bytes = std::fs::read(&served).unwrap();
    bytes.extend_from_slice(&[0u8; 100_000]);
    std::fs::write(&served, bytes).unwrap();
    wait_log(&data, "larger than the", Duration::from_secs(30)).await;
    done = walks_on(url, &job, done).await;

    // a downgrade, even properly signed
    let older = "0.0.9";
    assert_eq!(older.len(), own_version().len());
    fleet.publish(&fleet.build(older));
    wait_log(
        &data,
        "a downgrade is never installed",
        Duration::from_secs(30),
    )
    .await;
    walks_on(url, &job, done).await;

    // every refusal named its version, nothing was switched to, and the coordinator
    // still sees this build
    let log = log_of(&data);
    assert_eq!(log.matches("update refused").count(), 5, "{log}");
    assert!(!data.join("releases/current").exists());
    assert_eq!(versions_of(url, "careful"), [own_version()]);
    assert!(releases.join("worker").join(&platform).exists());
}

#[cfg_attr(
    not(has_mounts),
    ignore = "needs root and `unshare` (util-linux) to give the worker a full disk"
)]
#[tokio::test(flavor = "multi_thread")]
async fn a_full_disk_refuses_the_update_and_the_worker_walks_on() {
    let fleet = Fleet::start();
    let (dir, url) = (fleet.dir.path(), fleet.url.as_str());
    let job = submit_6x6(url);
    let data = dir.join("w");
    std::fs::create_dir_all(data.join("releases")).unwrap();
    // the worker in a mount namespace of its own, its releases folder a 1 MiB tmpfs
    let log = std::fs::File::create(data.with_extension("log")).unwrap();
    let script = format!(
        "mount -t tmpfs -o size=1m tmpfs '{}' && exec \"$@\"",
        data.join("releases").display()
    );
    let _worker = Proc(
        Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &script, "sh"])
            .arg(env!("CARGO_BIN_EXE_e2fleet-worker"))
            .args([
                "run",
                "--coordinator",
                url,
                "--token",
                crate::harness::ENROLL,
            ])
            .args(["--threads", "1", "--nice", "0", "--hostname", "full"])
            .arg("--data-dir")
            .arg(&data)
            .arg("--cache-dir")
            .arg(crate::harness::shared_cache())
            .args(["--updates", "on", "--release-key", &fleet.public])
            .env("RUST_LOG", "info")
            .env("E2FLEET_ON_BATTERY", "run")
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let done = walks_on(url, &job, 2).await;
    fleet.publish(&fleet.build(&newer(1)));
    wait_log(&data, "No space left on device", Duration::from_secs(30)).await;
    walks_on(url, &job, done).await;
    let doc = wait_job(url, &job, Duration::from_secs(120), |d| {
        d["state"] == "complete"
    })
    .await;
    assert_exact(&doc, BRENDAN_6X6);
    assert_eq!(versions_of(url, "full"), [own_version()]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_build_that_cannot_start_is_rolled_back_and_never_taken_again() {
    let fleet = Fleet::start();
    let (dir, url) = (fleet.dir.path(), fleet.url.as_str());
    let job = submit_6x6(url);
    let data = dir.join("w");
    // a signed "release" that exits at once: /bin/false with a version stamp
    let broken = dir.join("broken");
    let mut bytes = std::fs::read("/bin/false").unwrap();
    bytes.extend_from_slice(format!("E2FLEET_WORKER_RELEASE={};", newer(7)).as_bytes());
    std::fs::write(&broken, bytes).unwrap();
    fleet.publish(&broken);
    let mut first = worker_with(url, &data, "rolled", 1, &["--updates", "on"], false);
    // it switches and the new build dies: the process ends (a service manager restarts it)
    let start = Instant::now();
    while first.0.try_wait().unwrap().is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the worker never switched"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(log_of(&data).contains("switching to the update"));
    assert_eq!(
        std::fs::read_to_string(data.join("releases/trial"))
            .unwrap()
            .lines()
            .next(),
        Some(newer(7).as_str())
    );
    // restarted: the unconfirmed trial is rolled back, this build walks the job to the end
    let _second = worker_with(url, &data, "rolled", 1, &["--updates", "on"], false);
    let doc = wait_job(url, &job, Duration::from_secs(120), |d| {
        d["state"] == "complete"
    })
    .await;
    assert_exact(&doc, BRENDAN_6X6);
    let log = log_of(&data);
    assert!(log.contains("rolled back"), "{log}");
    assert!(!data.join("releases/trial").exists());
    assert!(!data.join("releases/current").exists());
    let refused = std::fs::read_to_string(data.join("releases/refused")).unwrap();
    assert_eq!(refused.trim(), newer(7));
    assert_eq!(versions_of(url, "rolled"), [own_version()]);
}
