//! Real processes only: the coordinator binary and worker binaries on loopback, with the
//! failures a fleet meets in the wild. Each test ends on the exact total of the job
//! (nothing lost, nothing counted twice) with conservation holding:
//! - the coordinator SIGKILLed mid-job and restarted on the same database;
//! - a worker SIGKILLed in the middle of its units, and a new one started;
//! - a worker cut off from the coordinator (a proxy that stops forwarding) for longer
//!   than a lease, then reconnected, its late results arriving after others redid them;
//! - a worker that misreports counts (test-only `--fault-misreport`): outvoted by a
//!   deciding run, its result marked wrong, its host quarantined;
//! - garbage bytes, garbage HTTP, undecodable and oversized gRPC messages, reports on
//!   leases the caller does not hold: each refused with a clear status, the coordinator
//!   unharmed;
//! - SIGTERM to a worker's whole process group (what systemd, Slurm and HTCondor do):
//!   compiled engines keep running until the worker stops them and collects exact cursors;
//! - a worker told to stop after N units: it walks and reports N, and holds no lease;
//! - a laptop on battery: it computes nothing until plugged in (nor, paused by SIGUSR1
//!   before it holds anything, until SIGUSR2); a stop signal before then ends it at once;
//!   and a pause longer than `--give-back-after`: the held units come back at their exact
//!   cursors; a paused compiled engine uses no CPU until resumed;
//! - and the whole fleet over TLS (`--tls-cert/--tls-key`, clients with `--ca-cert`).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use e2fleet_engine::testing::{BRENDAN_5X5, BRENDAN_6X6, assert_exact};
use e2fleet_proto::v2;
use e2fleet_proto::v2::worker_service_client::WorkerServiceClient;

use crate::harness::{
    ADMIN, ENROLL, Proc, admin, coordinator_bin, json_of, puzzle_path, raw_exchange, serve,
    wait_job, worker_json, worker_with,
};

/// Submits Brendan 6x6 split at depth 2 with a node budget per run (so units end in
/// budget stops and continuations).
fn submit_6x6(url: &str, budget: &str, extra: &[&str]) -> String {
    let puzzle = puzzle_path("brendan/set1/pieces_06x06.txt");
    let mut args = vec![
        "submit",
        puzzle.to_str().unwrap(),
        "--split-depth",
        "2",
        "--budget",
        budget,
    ];
    args.extend_from_slice(extra);
    admin(url, &args)["job_id"].as_str().unwrap().to_string()
}

/// Submits Brendan 6x6 split at depth 5: 2,466 tiny units (~28 k nodes each).
fn submit_tiny_units(url: &str) -> String {
    let puzzle = puzzle_path("brendan/set1/pieces_06x06.txt");
    admin(
        url,
        &["submit", puzzle.to_str().unwrap(), "--split-depth", "5"],
    )["job_id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Starts a worker process with one engine thread.
fn worker(url: &str, data: &Path, host: &str, extra: &[&str], own_group: bool) -> Proc {
    worker_with(url, data, host, 1, extra, own_group)
}

/// Polls the job until it is complete (bounded).
async fn wait_complete(url: &str, job: &str, limit: Duration) -> serde_json::Value {
    wait_job(url, job, limit, |d| d["state"] == "complete").await
}

fn units_done(doc: &serde_json::Value) -> u64 {
    doc["units"]["done"].as_u64().unwrap()
}

/// 2,466 tiny units (Brendan 6x6 split at depth 5, ~28 k nodes each) on one engine
/// thread: the worker starts each leased unit at once. With a fixed wait between a lease
/// and the start of its units (up to 200 ms per round) this job took ~40 s here; now ~9 s
/// with the reference engine, and the bound leaves a slow or busy CI machine three times
/// that while still failing the old loop. The job also gets a per-core rate although no
/// unit is long enough to time alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_of_tiny_units_is_not_paced_by_the_worker_loop() {
    let dir = tempfile::tempdir().unwrap();
    let (_coordinator, url) = serve(&dir.path().join("c.db"), "127.0.0.1:0", &[]);
    let job = submit_tiny_units(&url);
    let started = Instant::now();
    let _worker = worker(
        &url,
        &dir.path().join("w"),
        "w",
        &["--engine", "reference"],
        false,
    );
    let doc = wait_complete(&url, &job, Duration::from_secs(120)).await;
    let took = started.elapsed();
    assert_exact(&doc, BRENDAN_6X6);
    assert_eq!(units_done(&doc), 2466);
    assert!(
        took < Duration::from_secs(30),
        "2,466 tiny units on one thread took {took:?}: the worker loop waits between units"
    );
    assert!(
        doc["per_core_nodes_per_s"]
            .as_f64()
            .is_some_and(|r| r > 0.0),
        "short units still give a per-core rate: {}",
        doc["per_core_nodes_per_s"]
    );
}

/// `--stop-after-units N` walks and reports exactly N units, then exits by itself: the
/// units it leased last run too (they once stayed leased, to expire, when the limit came
/// with the engines idle).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_told_to_stop_after_n_units_reports_n_and_holds_none() {
    let dir = tempfile::tempdir().unwrap();
    let (_coordinator, url) = serve(&dir.path().join("c.db"), "127.0.0.1:0", &[]);
    let job = submit_tiny_units(&url);
    for (run, n) in [(1, 30u64), (2, 7)] {
        let mut w = worker(
            &url,
            &dir.path().join("w"),
            "w",
            &[
                "--engine",
                "reference",
                "--stop-after-units",
                &n.to_string(),
            ],
            false,
        );
        assert!(w.wait(Duration::from_secs(120)).await.success());
        let doc = admin(&url, &["job", &job]);
        let done = if run == 1 { n } else { 30 + n };
        assert_eq!(
            (units_done(&doc), doc["units"]["leased"].as_u64()),
            (done, Some(0)),
            "{}",
            doc["units"]
        );
    }
}

/// Waits until the worker's log (`<data_dir>.log`) has `line` (bounded).
async fn wait_log(data: &Path, line: &str, limit: Duration) -> String {
    let start = Instant::now();
    loop {
        let log = std::fs::read_to_string(data.with_extension("log")).unwrap_or_default();
        if log.contains(line) {
            return log;
        }
        assert!(
            start.elapsed() < limit,
            "no \"{line}\" in the worker's log in {limit:?}:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Pauses a worker the way its owner can (the pause file in its data directory), and waits
/// until it says so.
async fn pause_by_file(data: &Path) {
    std::fs::write(data.join("pause"), "").unwrap();
    wait_log(
        data,
        "engines paused: the pause file exists",
        Duration::from_secs(10),
    )
    .await;
}

/// One of Linux's power supplies in `dir` (as under `/sys/class/power_supply`).
fn power_supply(dir: &Path, name: &str, files: &[(&str, &str)]) {
    std::fs::create_dir_all(dir.join(name)).unwrap();
    for (file, value) in files {
        std::fs::write(dir.join(name).join(file), format!("{value}\n")).unwrap();
    }
}

/// A laptop unplugged (its power supplies in a folder of the test's): the worker joins,
/// says why it waits, runs nothing (not even its verification units) and leases nothing
/// while on battery, and computes the job exactly once it is plugged in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_on_battery_computes_nothing_until_plugged_in() {
    let dir = tempfile::tempdir().unwrap();
    let (_coordinator, url) = serve(&dir.path().join("c.db"), "127.0.0.1:0", &[]);
    let job = submit_6x6(&url, "2000000", &[]);
    let power = dir.path().join("power");
    power_supply(&power, "AC", &[("type", "Mains"), ("online", "0")]);
    power_supply(
        &power,
        "BAT0",
        &[("type", "Battery"), ("status", "Discharging")],
    );
    let data = dir.path().join("laptop");
    let mut worker = worker(
        &url,
        &data,
        "laptop",
        &[
            "--engine",
            "reference",
            "--on-battery",
            "pause",
            "--power-supply-dir",
            power.to_str().unwrap(),
        ],
        false,
    );
    wait_log(
        &data,
        "paused (on battery): this machine's verification waits",
        Duration::from_secs(60),
    )
    .await;
    // a few of the loop's rounds on battery: still nothing leased
    tokio::time::sleep(Duration::from_secs(2)).await;
    let doc = admin(&url, &["job", &job]);
    assert_eq!(
        (units_done(&doc), doc["units"]["leased"].as_u64()),
        (0, Some(0)),
        "{}",
        doc["units"]
    );
    let log = std::fs::read_to_string(data.with_extension("log")).unwrap();
    assert!(!log.contains("running verification units"), "{log}");
    // SIGUSR1 before the worker holds anything pauses it (its default action would end
    // the process): plugged in, it still waits, until SIGUSR2
    worker.signal("-USR1");
    wait_log(
        &data,
        "paused (by its owner: `e2fleet-worker resume` (or SIGUSR2) resumes): this machine's verification waits",
        Duration::from_secs(10),
    )
    .await;
    power_supply(&power, "AC", &[("online", "1")]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(worker.alive(), "SIGUSR1 ended the waiting worker");
    let doc = admin(&url, &["job", &job]);
    assert_eq!(
        (units_done(&doc), doc["units"]["leased"].as_u64()),
        (0, Some(0)),
        "plugged in but paused by SIGUSR1: {}",
        doc["units"]
    );
    worker.signal("-USR2");
    let doc = wait_complete(&url, &job, Duration::from_secs(120)).await;
    assert_exact(&doc, BRENDAN_6X6);
}

/// Before it holds a unit (here: still joining a coordinator that is not there), a
/// worker ends at once on a stop signal, with the status a stop by signal has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_signal_before_anything_is_held_ends_the_worker_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let data = dir.path().join("w");
    let mut w = worker(
        &format!("http://127.0.0.1:{port}"),
        &data,
        "w",
        &["--engine", "reference"],
        false,
    );
    // joining: its calls to the absent coordinator are failing
    wait_log(
        &data,
        "waiting for the coordinator",
        Duration::from_secs(30),
    )
    .await;
    // pause and resume are not fatal while joining
    w.signal("-USR1");
    w.signal("-USR2");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(w.alive(), "SIGUSR1/SIGUSR2 ended a joining worker");
    w.signal("-TERM");
    let status = w.wait(Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(130), "{status:?}");
}

/// A pause longer than `--give-back-after` hands the held units back without losing or
/// repeating a node: the running one stops at its exact cursor and reports it (the rest
/// is leased again as a continuation), the queued one is released, nothing is leased
/// while paused (the operator's `workers` says why), and the job still ends on its exact
/// total after the pause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_pause_gives_the_held_units_back_at_their_exact_cursors() {
    let dir = tempfile::tempdir().unwrap();
    let (_coordinator, url) = serve(&dir.path().join("c.db"), "127.0.0.1:0", &[]);
    let job = submit_6x6(&url, "20000000", &[]);
    let data = dir.path().join("w");
    let mut w = worker(
        &url,
        &data,
        "w",
        &["--engine", "reference", "--give-back-after", "1"],
        false,
    );
    let started = Instant::now();
    while admin(&url, &["job", &job])["units"]["leased"].as_u64() == Some(0) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "nothing leased"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    pause_by_file(&data).await;
    wait_log(&data, "giving the held units back", Duration::from_secs(10)).await;
    let started = Instant::now();
    let doc = loop {
        let doc = admin(&url, &["job", &job]);
        if doc["units"]["leased"].as_u64() == Some(0) {
            break doc;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "units still held after the give-back: {}",
            doc["units"]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(w.alive(), "a paused worker stays up");
    assert_ne!(
        doc["state"], "complete",
        "the pause came too late to test anything"
    );
    // the operator sees why (`workers`, the dashboard)
    let paused_as = || {
        admin(&url, &["workers"])[0]["paused"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(paused_as(), "the pause file exists");
    assert_eq!(admin(&url, &["fleet"])["workers"]["paused"], 1);
    // paused: nothing more is leased
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        admin(&url, &["job", &job])["units"]["leased"].as_u64(),
        Some(0)
    );
    std::fs::remove_file(data.join("pause")).unwrap();
    let doc = wait_complete(&url, &job, Duration::from_secs(120)).await;
    assert_exact(&doc, BRENDAN_6X6);
    assert_eq!(paused_as(), "");
    assert_eq!(admin(&url, &["fleet"])["workers"]["paused"], 0);
}

/// CPU seconds used so far by the processes whose parent is `pid` (Linux `/proc`, whose
/// clock ticks are 1/100 s): a worker's compiled engines.
fn children_cpu_s(pid: u32) -> f64 {
    let mut ticks = 0u64;
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // after the command's parenthesis: state, ppid, ..., utime (12th), stime (13th)
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() > 12 && f[1] == pid.to_string() {
            ticks += f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0);
        }
    }
    ticks as f64 / 100.0
}

/// A paused worker stops computing at once, compiled engines included. A compiled engine
/// walks in a process of its own and goes on between the worker's looks at its progress,
/// so being read no more does not stop it (it filled ~100 s of progress lines before it
/// blocked): it is told to hold still (the engine protocol's `pause`), keeps its place in
/// the tree, and goes on where it was when the pause ends. The worker runs at
/// `--cpu-percent 50`, whose rests hold the engine still the same way: it uses about
/// half a core.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_compiled_engine_uses_no_cpu_until_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let (_coordinator, url) = serve(&dir.path().join("c.db"), "127.0.0.1:0", &[]);
    // Brendan set 1 7x7 (a tree of ~10^11 nodes) in runs of up to 10^11 nodes: a unit
    // runs far longer than this test
    let puzzle = puzzle_path("brendan/set1/pieces_07x07.txt");
    let job = admin(
        &url,
        &[
            "submit",
            puzzle.to_str().unwrap(),
            "--split-depth",
            "1",
            "--budget",
            "100000000000",
        ],
    )["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    let data = dir.path().join("w");
    let mut w = worker(
        &url,
        &data,
        "w",
        &[
            "--engine",
            "compiled",
            "--walk",
            "list",
            "--cpu-percent",
            "50",
        ],
        false,
    );
    let pid = w.0.id();
    let started = Instant::now();
    // an engine walking: a unit leased and the worker's children using CPU
    loop {
        let leased = admin(&url, &["job", &job])["units"]["leased"].as_u64();
        let before = children_cpu_s(pid);
        tokio::time::sleep(Duration::from_millis(500)).await;
        if leased > Some(0) && children_cpu_s(pid) - before > 0.1 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no compiled engine walking after 120 s (leased: {leased:?})"
        );
    }
    pause_by_file(&data).await;
    // the engine holds at its next countdown check (~4 M nodes, milliseconds)
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = children_cpu_s(pid);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let used = children_cpu_s(pid) - held;
    assert!(
        used < 0.3,
        "a paused worker's engine used {used:.2} s of CPU in 3 s"
    );
    assert!(w.alive(), "a paused worker stays up");
    std::fs::remove_file(data.join("pause")).unwrap();
    wait_log(&data, "engines resumed", Duration::from_secs(10)).await;
    let resumed = children_cpu_s(pid);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let used = children_cpu_s(pid) - resumed;
    // about 2 s: walking half the time (less if the machine is busy)
    assert!(
        used > 0.4 && used < 2.8,
        "the resumed engine at --cpu-percent 50 used {used:.2} s of CPU in 4 s"
    );
    // and it stops where it is, its exact cursor reported
    w.signal("-TERM");
    assert!(w.wait(Duration::from_secs(30)).await.success());
    let doc = admin(&url, &["job", &job]);
    assert_eq!(doc["units"]["leased"].as_u64(), Some(0), "{}", doc["units"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_the_coordinator_mid_job_and_restart_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let (mut coordinator, url) = serve(&db, "127.0.0.1:0", &[]);
    // small budgets: many round trips, so the kill surely lands mid-job
    let job = submit_6x6(&url, "100000", &[]);
    let _worker = worker(
        &url,
        &dir.path().join("w"),
        "w",
        &["--engine", "reference"],
        false,
    );
    let doc = wait_job(&url, &job, Duration::from_secs(60), |d| {
        d["nodes_total"].as_u64().unwrap() >= 10_000_000 || d["state"] != "running"
    })
    .await;
    assert_eq!(doc["state"], "running", "the kill must land mid-job");
    coordinator.signal("-KILL");
    coordinator.wait(Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let port = url.rsplit(':').next().unwrap();
    let (_coordinator, url2) = serve(&db, &format!("127.0.0.1:{port}"), &[]);
    let doc = wait_complete(&url2, &job, Duration::from_secs(120)).await;
    assert_exact(&doc, BRENDAN_6X6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_a_worker_mid_unit_and_start_a_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let (_coordinator, url) = serve(&dir.path().join("c.db"), "127.0.0.1:0", &[]);
    let job = submit_6x6(&url, "3000000", &[]);
    let mut first = worker(
        &url,
        &dir.path().join("w1"),
        "w1",
        &["--engine", "reference"],
        false,
    );
    let doc = wait_job(&url, &job, Duration::from_secs(60), |d| {
        units_done(d) >= 3 && d["units"]["leased"].as_u64().unwrap() > 0
    })
    .await;
    assert_eq!(doc["state"], "running");
    first.signal("-KILL");
    first.wait(Duration::from_secs(10)).await;
    // another machine takes over; the dead worker's leases expire and are re-leased
    let _second = worker(
        &url,
        &dir.path().join("w2"),
        "w2",
        &["--engine", "reference"],
        false,
    );
    let doc = wait_complete(&url, &job, Duration::from_secs(120)).await;
    assert_exact(&doc, BRENDAN_6X6);
}

/// A TCP proxy that can cut the line: while cut, open connections are dropped and new
/// ones are accepted but never forwarded (a black hole, as a dead network looks).
struct Proxy {
    url: String,
    cut: Arc<AtomicBool>,
}

impl Proxy {
    async fn start(upstream: String) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let cut = Arc::new(AtomicBool::new(false));
        let flag = cut.clone();
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let flag = flag.clone();
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    if flag.load(Ordering::SeqCst) {
                        // black hole: hold the connection silently until the line is back
                        while flag.load(Ordering::SeqCst) {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        drop(client);
                        return;
                    }
                    let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let _ = server.set_nodelay(true);
                    let _ = client.set_nodelay(true);
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    let up = async {
                        let _ = tokio::io::copy(&mut cr, &mut sw).await;
                    };
                    let down = async {
                        let _ = tokio::io::copy(&mut sr, &mut cw).await;
                    };
                    let watch = async {
                        while !flag.load(Ordering::SeqCst) {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    };
                    // the first to finish ends the connection (both directions dropped)
                    tokio::select! {
                        _ = async { tokio::join!(up, down) } => {}
                        _ = watch => {}
                    }
                });
            }
        });
        Proxy { url, cut }
    }

    fn set_cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_cut_off_longer_than_a_lease_rejoins_without_double_counting() {
    let dir = tempfile::tempdir().unwrap();
    let (_coordinator, url) = serve(&dir.path().join("c.db"), "127.0.0.1:0", &[]);
    let proxy = Proxy::start(url.trim_start_matches("http://").to_string()).await;
    let job = submit_6x6(&url, "1000000", &[]);
    let _far = worker(
        &proxy.url,
        &dir.path().join("far"),
        "far",
        &["--engine", "reference"],
        false,
    );
    wait_job(&url, &job, Duration::from_secs(60), |d| {
        units_done(d) >= 3 && d["units"]["leased"].as_u64().unwrap() > 0
    })
    .await;
    proxy.set_cut(true);
    // the far worker keeps computing what it holds; its leases (3 s) expire and a
    // nearby worker redoes those units
    let _near = worker(
        &url,
        &dir.path().join("near"),
        "near",
        &["--engine", "reference"],
        false,
    );
    // until the far worker's leases have expired and the near one has redone units
    let done_far = units_done(&admin(&url, &["job", &job]));
    let start = Instant::now();
    while admin(&url, &["fleet"])["units_last_minute"]["expired"]
        .as_u64()
        .unwrap_or(0)
        == 0
    {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the far worker's leases never expired"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_job(&url, &job, Duration::from_secs(60), |d| {
        units_done(d) > done_far
    })
    .await;
    let far = admin(&url, &["workers"])
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["hostname"] == "far")
        .cloned()
        .unwrap();
    let seen_ms_before = far["last_seen_ms"].as_i64().unwrap();
    proxy.set_cut(false);
    let doc = wait_complete(&url, &job, Duration::from_secs(180)).await;
    assert_exact(&doc, BRENDAN_6X6);
    // the far worker came back and was heard from again
    let start = Instant::now();
    loop {
        let far = admin(&url, &["workers"])
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["hostname"] == "far")
            .cloned()
            .unwrap();
        if far["last_seen_ms"].as_i64().unwrap() > seen_ms_before {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the far worker never reconnected"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // what it finished while cut off arrived late: kept as a replica or ignored, never
    // added twice (the total above is exact)
    let log = std::fs::read_to_string(dir.path().join("far.log")).unwrap();
    assert!(log.contains("coordinator reachable again"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misreporting_worker_is_outvoted_and_its_host_quarantined() {
    let dir = tempfile::tempdir().unwrap();
    let (_coordinator, url) = serve(
        &dir.path().join("c.db"),
        "127.0.0.1:0",
        &["--quarantine-after", "1"],
    );
    let job = submit_6x6(&url, "2000000", &["--replicas", "2"]);
    // the liar starts first so that it surely takes part
    let _liar = worker(
        &url,
        &dir.path().join("liar"),
        "liar",
        &["--engine", "reference", "--fault-misreport"],
        false,
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _a = worker(
        &url,
        &dir.path().join("a"),
        "honest-a",
        &["--engine", "reference"],
        false,
    );
    let _b = worker(
        &url,
        &dir.path().join("b"),
        "honest-b",
        &["--engine", "reference"],
        false,
    );
    let doc = wait_complete(&url, &job, Duration::from_secs(240)).await;
    assert_exact(&doc, BRENDAN_6X6);
    let workers = admin(&url, &["workers"]);
    for w in workers.as_array().unwrap() {
        let liar = w["hostname"] == "liar";
        assert_eq!(w["quarantined"], liar, "{w}");
        if liar {
            assert!(w["errors"].as_i64().unwrap() >= 1, "{w}");
        }
    }
    let fleet = admin(&url, &["fleet"]);
    assert!(fleet["wrong_results"].as_i64().unwrap() >= 1, "{fleet}");
    let wrong = doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["verdict"] == "wrong");
    assert!(wrong, "the lie is on record: {}", doc["results"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_oversized_messages_are_refused_and_the_coordinator_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (mut coordinator, url) = serve(&dir.path().join("c.db"), "127.0.0.1:0", &[]);
    let addr = url.trim_start_matches("http://").to_string();
    let job = submit_6x6(&url, "5000000", &[]);

    // raw garbage, and a broken HTTP/2 preface: the connection is closed
    let mut noise = vec![0u8; 64 * 1024];
    for (i, b) in noise.iter_mut().enumerate() {
        *b = (i * 131 % 251) as u8;
    }
    raw_exchange(&addr, &noise).await;
    raw_exchange(
        &addr,
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\xff\xff\xff\xff\xff\xff\xff\xff\xff",
    )
    .await;
    // a garbage HTTP/1.1 request line: 400
    let reply = raw_exchange(&addr, b"GARBAGE /\x01\x02 HTTP/1.1\r\n\r\n").await;
    assert!(
        String::from_utf8_lossy(&reply).starts_with("HTTP/1.1 400"),
        "{}",
        String::from_utf8_lossy(&reply)
    );

    // gRPC: a client that allows large messages, as a hostile one would
    let mut client = WorkerServiceClient::connect(url.clone())
        .await
        .unwrap()
        .max_encoding_message_size(64 << 20)
        .max_decoding_message_size(64 << 20);
    let reg = client
        .register_worker(v2::RegisterWorkerRequest {
            enroll_token: ENROLL.into(),
            host: Some(v2::HostInfo {
                hostname: "noisy".into(),
                engine_kind: v2::EngineKind::Reference.into(),
                ..Default::default()
            }),
            previous_worker_id: String::new(),
            previous_worker_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let token = reg.worker_token.clone();
    // an oversized report (20 MiB of solutions) is refused before it is decoded
    let huge = v2::ReportResultRequest {
        lease_id: "x".repeat(20 << 20),
        ..Default::default()
    };
    let err = client
        .report_result(with_token(&token, huge))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err.code(),
            tonic::Code::OutOfRange | tonic::Code::ResourceExhausted
        ),
        "oversized: {err:?}"
    );
    // a report on a lease this worker does not hold
    let err = client
        .report_result(with_token(
            &token,
            v2::ReportResultRequest {
                lease_id: "no-such-lease".into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err.code(),
            tonic::Code::NotFound
                | tonic::Code::PermissionDenied
                | tonic::Code::InvalidArgument
                | tonic::Code::FailedPrecondition
        ),
        "foreign lease: {err:?}"
    );
    // a wrong token
    let mut bad = tonic::Request::new(v2::LeaseUnitsRequest {
        max_units: 1,
        ..Default::default()
    });
    bad.metadata_mut()
        .insert("authorization", "Bearer not-a-token".parse().unwrap());
    assert_eq!(
        client.lease_units(bad).await.unwrap_err().code(),
        tonic::Code::Unauthenticated
    );
    // undecodable protobuf in a well-formed gRPC frame: a lease id that is not UTF-8
    let channel = tonic::transport::Endpoint::from_shared(url.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let err = grpc
        .unary::<Junk, v2::ReportResultResponse, _>(
            with_token(
                &token,
                Junk {
                    lease_id: vec![0xff, 0xfe, 0xfd],
                },
            ),
            tonic::codegen::http::uri::PathAndQuery::from_static(
                "/e2fleet.v2.WorkerService/ReportResult",
            ),
            tonic_prost::ProstCodec::default(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            err.code(),
            tonic::Code::InvalidArgument | tonic::Code::Internal
        ),
        "undecodable: {err:?}"
    );

    assert!(coordinator.alive(), "the coordinator survived");
    // and it still does its job, exactly
    let _w = worker(
        &url,
        &dir.path().join("w"),
        "w",
        &["--engine", "reference"],
        false,
    );
    let doc = wait_complete(&url, &job, Duration::from_secs(120)).await;
    assert_exact(&doc, BRENDAN_6X6);
}

fn with_token<T>(token: &str, message: T) -> tonic::Request<T> {
    e2fleet_proto::client::authed(token, message)
}

/// What no honest client sends: field 1 of `ReportResultRequest` (a string) as bytes.
#[derive(Clone, PartialEq, prost::Message)]
struct Junk {
    #[prost(bytes = "vec", tag = "1")]
    lease_id: Vec<u8>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_to_the_whole_process_group_still_reports_exact_cursors() {
    let dir = tempfile::tempdir().unwrap();
    let (_coordinator, url) = serve(&dir.path().join("c.db"), "127.0.0.1:0", &[]);
    // budgets large enough that a unit is mid-walk when the signal lands
    let job = submit_6x6(&url, "20000000", &[]);
    let mut w = worker(
        &url,
        &dir.path().join("w1"),
        "w1",
        &["--engine", "compiled"],
        true,
    );
    wait_job(&url, &job, Duration::from_secs(120), |d| units_done(d) >= 2).await;
    // as systemd (KillMode=control-group), Slurm and HTCondor do: every process
    Command::new("kill")
        .args(["-TERM", "--", &format!("-{}", w.0.id())])
        .status()
        .unwrap();
    let status = w.wait(Duration::from_secs(30)).await;
    assert!(status.success(), "clean exit: {status:?}");
    let log = std::fs::read_to_string(dir.path().join("w1.log")).unwrap();
    assert!(log.contains("stopping"), "{log}");
    // an engine killed by the group signal would lose its unit's work ("engine failed
    // on a unit ... exited in the middle of a unit")
    assert!(
        !log.contains("engine failed") && !log.contains("unit failed"),
        "every engine survived the group signal and reported its cursor: {log}"
    );
    assert!(log.contains("worker stopped cleanly"), "{log}");
    // the stop was a clean budget-like stop: continuations exist, nothing re-run from
    // scratch; another worker finishes the job exactly
    let _w2 = worker(
        &url,
        &dir.path().join("w2"),
        "w2",
        &["--engine", "reference"],
        false,
    );
    let doc = wait_complete(&url, &job, Duration::from_secs(120)).await;
    assert_exact(&doc, BRENDAN_6X6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_over_tls_with_its_own_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert_pem, key_pem) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_pem, cert.cert.pem()).unwrap();
    std::fs::write(&key_pem, cert.key_pair.serialize_pem()).unwrap();
    let (mut coordinator, url) = serve(
        &dir.path().join("c.db"),
        "127.0.0.1:0",
        &[
            "--tls-cert",
            cert_pem.to_str().unwrap(),
            "--tls-key",
            key_pem.to_str().unwrap(),
        ],
    );
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let url = url.replace("127.0.0.1", "localhost");
    let ca = cert_pem.to_str().unwrap();
    let tls_admin = |args: &[&str]| -> serde_json::Value {
        json_of(Command::new(coordinator_bin()).args(args).args([
            "--coordinator",
            &url,
            "--admin-token",
            ADMIN,
            "--ca-cert",
            ca,
            "--json",
        ]))
    };
    let puzzle = puzzle_path("brendan/set1/pieces_05x05.txt");
    let job = tls_admin(&["submit", puzzle.to_str().unwrap(), "--split-depth", "3"])["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    // a client that does not trust the certificate is refused
    let out = Command::new(coordinator_bin())
        .args(["jobs", "--coordinator", &url, "--admin-token", ADMIN])
        .output()
        .unwrap();
    assert!(!out.status.success(), "an untrusted certificate must fail");
    let _w = worker(
        &url,
        &dir.path().join("w"),
        "w",
        &["--engine", "reference", "--ca-cert", ca],
        false,
    );
    let start = Instant::now();
    let doc = loop {
        let doc = tls_admin(&["job", &job]);
        if doc["state"] == "complete" {
            break doc;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{}",
            doc["units"]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_exact(&doc, BRENDAN_5X5);
    assert!(coordinator.alive());
}

/// `e2fleet-worker status --json` of the worker whose data directory is `data`.
fn control(what: &str, data: &Path) -> serde_json::Value {
    worker_json(&[what, "--data-dir", data.to_str().unwrap(), "--json"])
}

/// Polls `status` until `until` holds (bounded; a worker still starting has no socket
/// yet).
async fn wait_status(data: &Path, until: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let start = Instant::now();
    loop {
        let out = Command::new(env!("CARGO_BIN_EXE_e2fleet-worker"))
            .args(["status", "--json", "--data-dir", data.to_str().unwrap()])
            .output()
            .unwrap();
        let s: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        if out.status.success() && until(&s["status"]) {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{s} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A running worker steered from another process through its control socket, which only
/// its user can open: `status` while it works, `pause` (the engines hold still and the
/// coordinator hears it), `resume`, then `stop` (its units report their exact cursors and
/// it exits cleanly); a second worker on the same data directory is refused, a request the
/// socket does not know is answered with the ones it does, and the job still adds up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_worker_is_steered_through_its_control_socket() {
    use std::io::{BufRead, Write};
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let (_coordinator, url) = serve(&dir.path().join("c.db"), "127.0.0.1:0", &[]);
    let job = submit_6x6(&url, "2000000", &[]);
    let data = dir.path().join("w");
    let mut w = worker(&url, &data, "steered", &["--engine", "reference"], false);
    wait_job(&url, &job, Duration::from_secs(60), |d| units_done(d) >= 1).await;
    let s = wait_status(&data, |s| s["state"] == "running").await;
    assert_eq!(s["ok"], true);
    assert_eq!(s["status"]["threads"], 1, "{s}");
    assert_eq!(s["status"]["paused_by_owner"], false);
    let socket = data.join("control.sock");
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "the socket is its user's alone");
    // a second worker on this data directory is refused at once
    let mut twin = worker(&url, &data, "twin", &["--engine", "reference"], false);
    let status = twin.wait(Duration::from_secs(30)).await;
    assert!(
        !status.success(),
        "a second worker on one data directory ran"
    );
    // an unknown request
    let mut raw = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    raw.write_all(b"reboot\n").unwrap();
    let mut line = String::new();
    std::io::BufReader::new(raw).read_line(&mut line).unwrap();
    assert!(
        line.contains("\"ok\":false") && line.contains("status, pause, resume or stop"),
        "{line}"
    );
    // pause: the engines hold still, the coordinator is told
    let s = control("pause", &data);
    assert_eq!(s["status"]["paused_by_owner"], true, "{s}");
    wait_status(&data, |s| {
        s["state"]
            .as_str()
            .is_some_and(|t| t.starts_with("paused (by its owner"))
    })
    .await;
    let start = Instant::now();
    while admin(&url, &["fleet"])["workers"]["paused"] != 1 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the coordinator never heard of the pause"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    control("resume", &data);
    wait_status(&data, |s| s["state"] == "running").await;
    // stop: the worker reports where its units stopped and exits cleanly
    let s = control("stop", &data);
    assert_eq!(s["status"]["state"], "stopping", "{s}");
    assert!(w.wait(Duration::from_secs(60)).await.success());
    assert!(!socket.exists(), "the socket goes with the worker");
    let out = Command::new(env!("CARGO_BIN_EXE_e2fleet-worker"))
        .args(["status", "--data-dir", data.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no worker answers"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // the rest of the job, walked by another worker, adds up
    let _finisher = worker(
        &url,
        &dir.path().join("f"),
        "finisher",
        &["--engine", "reference"],
        false,
    );
    let doc = wait_complete(&url, &job, Duration::from_secs(180)).await;
    assert_exact(&doc, BRENDAN_6X6);
}

/// `--pause-while NAME`: the engines hold still while a program of that name runs (here a
/// copy of `sleep` called `e2fleet-game`, named in another case) and go on when it ends;
/// the worker says why it waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_pauses_while_a_named_program_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (_coordinator, url) = serve(&dir.path().join("c.db"), "127.0.0.1:0", &[]);
    let job = submit_6x6(&url, "2000000", &[]);
    let game = dir.path().join("e2fleet-game");
    std::fs::copy("/bin/sleep", &game).unwrap();
    let mut playing = Command::new(&game).arg("300").spawn().unwrap();
    let data = dir.path().join("w");
    let _w = worker(
        &url,
        &data,
        "player",
        &[
            "--engine",
            "reference",
            "--pause-while",
            "zoom,E2FLEET-Game",
        ],
        false,
    );
    wait_status(&data, |s| {
        s["state"]
            .as_str()
            .is_some_and(|t| t.starts_with("paused (while E2FLEET-Game runs)"))
    })
    .await;
    let done = units_done(&admin(&url, &["job", &job]));
    playing.kill().unwrap();
    playing.wait().unwrap();
    wait_status(&data, |s| s["state"] == "running").await;
    wait_job(&url, &job, Duration::from_secs(60), |d| {
        units_done(d) > done
    })
    .await;
}
