//! The coordinator binary against a hostile volunteer and a stranger on the network,
//! with real processes: what they try and what it costs them.

use std::process::Command;
use std::time::{Duration, Instant};

use e2fleet_proto::v2;

use crate::harness::{ADMIN, admin, coordinator_bin, puzzle_path, serve, worker_as, worker_with};
use e2fleet_engine::testing::{BRENDAN_5X5, assert_exact};

/// Resident memory of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_strangers_sending_15_mib_each_cost_the_coordinator_little() {
    let dir = tempfile::tempdir().unwrap();
    let (coordinator, url) = serve(&dir.path().join("c.db"), "127.0.0.1:0", &[]);
    let pid = coordinator.0.id();
    // settle: the first requests warm up the runtime and the database
    let _ = admin(&url, &["fleet"]);
    let before = rss_kib(pid);
    let big = "x".repeat(15 << 20);
    let mut calls = Vec::new();
    for i in 0..8 {
        let (url, big) = (url.clone(), big.clone());
        calls.push(tokio::spawn(async move {
            let channel = tonic::transport::Endpoint::from_shared(url)
                .unwrap()
                .connect()
                .await
                .unwrap();
            if i % 2 == 0 {
                let mut c = v2::worker_service_client::WorkerServiceClient::new(channel)
                    .max_encoding_message_size(64 << 20);
                c.report_result(v2::ReportResultRequest {
                    lease_id: big,
                    ..Default::default()
                })
                .await
                .unwrap_err()
                .code()
            } else {
                let mut c = v2::operator_service_client::OperatorServiceClient::new(channel)
                    .max_encoding_message_size(64 << 20);
                c.submit_job(v2::SubmitJobRequest {
                    puzzle_json: big,
                    ..Default::default()
                })
                .await
                .unwrap_err()
                .code()
            }
        }));
    }
    for c in calls {
        assert_eq!(c.await.unwrap(), tonic::Code::Unauthenticated);
    }
    let after = rss_kib(pid);
    assert!(
        after < before + 32 * 1024,
        "the coordinator grew from {before} KiB to {after} KiB on requests it refused"
    );
}

#[test]
fn empty_short_and_equal_tokens_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    for (enroll, admin_token, wanted) in [
        ("", ADMIN, "enrolment token has 0 characters"),
        ("short", ADMIN, "at least 16"),
        (
            "enroll-token-0123456789",
            "",
            "admin token has 0 characters",
        ),
        (ADMIN, ADMIN, "must differ"),
    ] {
        let out = Command::new(coordinator_bin())
            .args(["serve", "--listen", "127.0.0.1:0"])
            .arg("--db")
            .arg(dir.path().join("c.db"))
            .env("E2FLEET_ENROLL_TOKEN", enroll)
            .env("E2FLEET_ADMIN_TOKEN", admin_token)
            .output()
            .unwrap();
        assert!(
            !out.status.success(),
            "started with {enroll:?}/{admin_token:?}"
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(wanted), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misreporting_workers_of_one_volunteer_account_cannot_move_a_total() {
    let dir = tempfile::tempdir().unwrap();
    let (_coordinator, url) = serve(
        &dir.path().join("c.db"),
        "127.0.0.1:0",
        &["--account-quarantine-after", "2"],
    );
    let token = admin(&url, &["account", "add", "mallory", "--team", "red"])["token"]
        .as_str()
        .unwrap()
        .to_string();
    let puzzle = puzzle_path("brendan/set1/pieces_05x05.txt");
    let job = admin(
        &url,
        &["submit", puzzle.to_str().unwrap(), "--split-depth", "3"],
    )["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    // two of mallory's machines lie on every result; one borrows an honest worker's name
    let liar = |name: &str, data: &str| {
        worker_as(
            &url,
            &token,
            &dir.path().join(data),
            name,
            1,
            &["--engine", "reference", "--fault-misreport"],
            false,
        )
    };
    let _m1 = liar("mallory-box", "m1");
    let _m2 = liar("honest-1", "m2");
    // the liars have joined before any honest worker does
    let joined = Instant::now();
    while admin(&url, &["workers"]).as_array().map_or(0, Vec::len) < 2 {
        assert!(
            joined.elapsed() < Duration::from_secs(60),
            "the liars never registered"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _h1 = worker_with(
        &url,
        &dir.path().join("h1"),
        "honest-1",
        1,
        &["--engine", "reference"],
        false,
    );
    let _h2 = worker_with(
        &url,
        &dir.path().join("h2"),
        "honest-2",
        1,
        &["--engine", "reference"],
        false,
    );
    let started = Instant::now();
    let doc = loop {
        let doc = admin(&url, &["job", &job]);
        if doc["state"] == "complete" {
            break doc;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{}",
            doc["units"]
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_exact(&doc, BRENDAN_5X5);
    let accounts = admin(&url, &["account", "list"]);
    let mallory = accounts
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == "mallory")
        .unwrap();
    assert_eq!(mallory["quarantined"], true, "{mallory}");
    // her team is the operator's label: it changes by the CLI, and moves nothing
    assert_eq!(mallory["team"], "red", "{mallory}");
    let moved = admin(&url, &["account", "team", "mallory", "blue"]);
    assert_eq!(
        (&moved["team"], &moved["members"]),
        (&"blue".into(), &1.into())
    );
    let out = admin(&url, &["account", "team", "mallory", "--none"]);
    assert_eq!(out["members"], 0);
    assert!(
        admin(&url, &["account", "list"])
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["team"].is_null()),
        "no team left"
    );
    let workers = admin(&url, &["workers"]);
    for w in workers.as_array().unwrap() {
        if w["account"] == "operator" {
            assert_eq!(
                w["quarantined"], false,
                "an honest worker named like a liar: {w}"
            );
        }
    }
}

/// The worker's side: plain http:// to another machine is refused
/// unless allowed; the token can come from a private file instead of a command line; the
/// identity, journal and engine cache are the worker user's alone.
#[test]
fn a_worker_keeps_its_secrets_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let worker_bin = env!("CARGO_BIN_EXE_e2fleet-worker");
    // 192.0.2.1 is a documentation address: refused before any connection is tried
    let started = Instant::now();
    let out = Command::new(worker_bin)
        .args([
            "run",
            "--coordinator",
            "http://192.0.2.1:7733",
            "--token",
            "t",
        ])
        .arg("--data-dir")
        .arg(dir.path().join("refused"))
        .env_remove("E2FLEET_ALLOW_PLAINTEXT")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "it tried to connect"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unencrypted")
            && err.contains("--allow-plaintext")
            && err.contains("https://"),
        "{err}"
    );

    let (_coordinator, url) = serve(&dir.path().join("c.db"), "127.0.0.1:0", &[]);
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{}\n", crate::harness::ENROLL)).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let data = dir.path().join("w");
    let log = std::fs::File::create(dir.path().join("w.log")).unwrap();
    let _worker = crate::harness::Proc(
        Command::new(worker_bin)
            .args([
                "run",
                "--coordinator",
                &url,
                "--nice",
                "0",
                "--threads",
                "1",
            ])
            .arg("--token-file")
            .arg(&token_file)
            .arg("--data-dir")
            .arg(&data)
            .env_remove("E2FLEET_ENROLL_TOKEN")
            .env_remove("E2FLEET_CACHE_DIR")
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    // it enrolled with the file's token and built its engine in <data-dir>/engines
    let key = data.join("engines").join("cache.key");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !(key.exists() && data.join("identity.json").exists()) {
        assert!(
            Instant::now() < deadline,
            "the worker did not start: see w.log"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let workers = admin(&url, &["workers"]);
    assert_eq!(workers.as_array().unwrap().len(), 1, "{workers}");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&data.join("identity.json")), 0o600);
    assert_eq!(mode(&data.join("engines")), 0o700);
    assert_eq!(mode(&key), 0o600);
}
