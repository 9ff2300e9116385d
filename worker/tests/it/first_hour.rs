//! What a newcomer meets in the first hour, as a newcomer would meet it: the real
//! binaries, run from outside the repository where that matters.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::harness::{ADMIN, coordinator_bin, puzzle_path, serve, worker_json};

fn worker_bin() -> &'static str {
    env!("CARGO_BIN_EXE_e2fleet-worker")
}

/// An error names each cause once: a cause chain whose message already contains its
/// cause printed it twice.
#[test]
fn a_bad_fill_order_is_said_once() {
    let out = Command::new(worker_bin())
        .arg("solve")
        .arg(puzzle_path("e2/official.json"))
        .args(["--order", "cells:135,0,1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.matches("holds a hint").count(),
        1,
        "each cause once: {err}"
    );
    assert!(err.contains("cell 135"), "{err}");
    // a file that cannot be read: the reason once
    let out = Command::new(worker_bin())
        .args(["solve", "/nonexistent/board.json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(err.matches("No such file").count(), 1, "{err}");
}

#[test]
fn a_coordinator_url_without_a_scheme_is_refused_at_once_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let out = Command::new(worker_bin())
        .args(["run", "--coordinator", "127.0.0.1:7733", "--token", "t"])
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(started.elapsed() < Duration::from_secs(10), "it retried");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("has no scheme") && err.contains("http://127.0.0.1:7733"),
        "{err}"
    );
    // and the admin CLI says the same
    let out = Command::new(coordinator_bin())
        .args([
            "jobs",
            "--coordinator",
            "localhost:7733",
            "--admin-token",
            ADMIN,
        ])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("has no scheme"));
}

#[test]
fn bench_runs_its_built_in_boards_from_any_directory() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(worker_bin())
        .args([
            "bench",
            "--seconds",
            "0.05",
            "--runs",
            "1",
            "--engine",
            "reference",
            "--json",
        ])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let boards: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let names: Vec<&str> = boards
        .iter()
        .map(|b| b["board"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["bench-easy", "bench-hard", "brendan-set1-07x07"]);
    // every figure names the machine it was measured on
    for b in &boards {
        assert!(!b["machine"]["cpu"].as_str().unwrap().is_empty(), "{b}");
        assert!(b["machine"]["cores"].as_u64().unwrap() >= 1, "{b}");
        assert!(
            b["machine"]["target_cpu"]
                .as_str()
                .unwrap()
                .starts_with("native"),
            "{b}"
        );
    }
    assert!(
        boards
            .iter()
            .all(|b| b["median_nodes_per_s"].as_f64().unwrap() > 0.0)
    );
    // and, on x86-64, the clock it ran at and what a node cost in cycles
    for b in boards.iter().filter(|_| cfg!(target_arch = "x86_64")) {
        let ghz = b["clock_ghz"].as_f64().unwrap();
        let cycles = b["cycles_per_node"].as_f64().unwrap();
        let per_s = b["median_nodes_per_s"].as_f64().unwrap();
        assert!((cycles - ghz * 1e9 / per_s).abs() < 1e-6 * cycles, "{b}");
    }
    let out = Command::new(worker_bin())
        .args(["bench", "--board", "no-such-board", "--seconds", "0.05"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("built-in: "));
}

/// A 16x16 board builds both walks and races them the first time, says which walk runs
/// and why, and remembers the choice; so does a low-colour board (its mask walk with and
/// without the slot lookup); a board no walk by slots applies to has the list walk alone.
#[test]
fn bench_says_which_walk_runs_and_races_once() {
    let cache = tempfile::tempdir().unwrap();
    let bench = |board: &str| {
        let mut args = vec!["bench", "--board", board, "--seconds", "0.2", "--runs", "1"];
        args.extend(["--json", "--engine", "compiled", "--cache-dir"]);
        args.push(cache.path().to_str().unwrap());
        worker_json(&args)
    };
    let first = bench("bench-hard");
    assert_eq!(first["walk_choice"]["how"], "raced", "{first}");
    let walk = first["walk"].as_str().unwrap().to_string();
    let ratio = first["walk_choice"]["ratio"].as_f64().unwrap();
    assert_eq!(walk == "slots", ratio >= 1.03, "{first}");
    assert_eq!(
        first["engine_build"].as_str().unwrap().ends_with("-slots"),
        walk == "slots",
        "{first}"
    );
    let again = bench("bench-hard");
    assert_eq!(again["walk_choice"]["how"], "remembered", "{again}");
    assert_eq!(again["walk"], walk.as_str());
    assert_eq!(again["engine_build"], first["engine_build"]);
    // `--emit-source` writes the program that runs: the race's winner, not the walk by
    // slots whatever the race said
    let emitted = |extra: &[&str]| {
        let file = cache.path().join("emitted.rs");
        let mut args = vec!["bench", "--board", "bench-hard", "--seconds", "0.1"];
        args.extend([
            "--runs",
            "1",
            "--json",
            "--engine",
            "compiled",
            "--cache-dir",
        ]);
        args.push(cache.path().to_str().unwrap());
        args.extend(["--emit-source", file.to_str().unwrap()]);
        args.extend(extra);
        let report = worker_json(&args);
        (report, std::fs::read_to_string(&file).unwrap())
    };
    let (_, list_source) = emitted(&["--walk", "list"]);
    let (_, slots_source) = emitted(&["--walk", "slots"]);
    assert_ne!(list_source, slots_source);
    let (report, source) = emitted(&[]);
    assert_eq!(report["walk"], walk.as_str(), "{report}");
    let runs = if walk == "slots" {
        &slots_source
    } else {
        &list_source
    };
    assert!(
        source == *runs,
        "the emitted source is not the {walk} walk's"
    );
    let small = bench("brendan-set1-07x07");
    assert_eq!(small["walk_choice"]["how"], "raced", "{small}");
    let ratio = small["walk_choice"]["ratio"].as_f64().unwrap();
    assert_eq!(small["walk"] == "slots", ratio >= 1.03, "{small}");
    // set 2 10x10: 64 inner pieces leave no room for the lookup's block offset
    let board = puzzle_path("brendan/set2/pieces_10x10.txt");
    let only = bench(board.to_str().unwrap());
    assert_eq!(only["walk"], "list", "{only}");
    assert_eq!(only["walk_choice"]["how"], "list_only", "{only}");
}

/// A compiled engine that fails to build still leaves its source behind for the user to
/// read (`--emit-source` is written before the error is returned).
#[test]
fn a_failed_build_still_writes_the_emitted_source() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("engine.rs");
    let out = Command::new(worker_bin())
        .args([
            "bench",
            "--board",
            "brendan-set1-05x05",
            "--engine",
            "compiled",
        ])
        .args(["--rustc", "/bin/false", "--seconds", "0.1", "--runs", "1"])
        .arg("--cache-dir")
        .arg(dir.path())
        .arg("--emit-source")
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot build the compiled engine"));
    let source = std::fs::read_to_string(&file).unwrap();
    assert!(
        source.starts_with("// Generated by e2fleet-engine"),
        "{}",
        &source[..80.min(source.len())]
    );
}

#[test]
fn bench_walks_the_units_of_a_split_to_the_exact_count() {
    // Brendan set 1 5x5: 113,211 nodes in all, 83 of them in the first three cells (the
    // job's enumeration), the other 113,128 in the 62 units of a split at depth 3; the
    // lane engine walks them two at a time, to the same count
    for engine in ["reference", "lanes"] {
        let report = worker_json(&[
            "bench",
            "--board",
            "brendan-set1-05x05",
            "--split-depth",
            "3",
            "--seconds",
            "60",
            "--runs",
            "1",
            "--engine",
            engine,
            "--json",
        ]);
        assert_eq!(report["engine"], engine);
        assert_eq!(report["split_depth"], 3);
        assert_eq!(report["units"], 62);
        let run = &report["runs"][0];
        assert_eq!(run["nodes"], 113_211 - 83, "{engine}");
        assert_eq!(run["units_done"], 62, "{engine}");
        assert_eq!(run["finished"], true, "{engine}");
    }
    // a board the lane engine does not take (a fill order that gives a cell three placed
    // neighbours) runs as `auto`: here, without rustc, the reference engine
    let report = bench_without_rustc(&[&THREE_NEIGHBOURS[..], &["--engine", "lanes"]].concat());
    assert_eq!(report["engine"], "reference");
    // bench-hard (256 pieces) is the lane engine's wide form (x86-64's)
    if cfg!(target_arch = "x86_64") {
        let report = bench_without_rustc(&["--board", "bench-hard", "--engine", "lanes"]);
        assert_eq!(report["engine"], "lanes");
    }
}

/// Brendan set 1 5x5 filled row 0, row 2, then row 1 and the rest: row 1's cells have
/// three placed neighbours, which neither form of the lane engine takes.
const THREE_NEIGHBOURS: [&str; 4] = [
    "--board",
    "brendan-set1-05x05",
    "--order",
    "cells:0,1,2,3,4,10,11,12,13,14,5,6,7,8,9,15,16,17,18,19,20,21,22,23,24",
];

/// `bench ARGS --seconds 0.1 --runs 1` with `rustc` as the compiler to use.
fn bench_run(args: &[&str], rustc: &str) -> std::process::Output {
    std::process::Command::new(worker_bin())
        .arg("bench")
        .args(args)
        .args(["--seconds", "0.1", "--runs", "1"])
        .env("RUSTC", rustc)
        .output()
        .unwrap()
}

/// The report of `bench ARGS --seconds 0.1 --runs 1 --json`, which must succeed.
fn bench_report(args: &[&str], rustc: &str) -> serde_json::Value {
    let args: Vec<&str> = args.iter().copied().chain(["--json"]).collect();
    let out = bench_run(&args, rustc);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap()
}

/// [`bench_report`] with no rustc to be found.
fn bench_without_rustc(args: &[&str]) -> serde_json::Value {
    bench_report(args, "/nonexistent/rustc")
}

/// `--engine auto` races the lane engine against the compiled engine for a split's units
/// (two at a time) on a board the lane engine walks, and keeps the faster (remembered in
/// the cache); a lone unit walks compiled (one lane is slower than the compiled walk);
/// without rustc, the lane engine for both.
#[test]
fn auto_races_the_lane_engine_for_a_split_and_walks_a_lone_unit_compiled() {
    let cache = crate::harness::shared_cache();
    let cache = cache.to_str().unwrap();
    let board = ["--board", "brendan-set1-05x05"];
    let bench = |split: &str, rustc: &str| -> serde_json::Value {
        let split = ["--split-depth", split, "--cache-dir", cache];
        bench_report(&[&board[..], &split[..]].concat(), rustc)
    };
    // a split's units: the engine the race kept (the lane and compiled engines agreed on
    // every unit of it, or there would be no report)
    let split = bench("3", "rustc");
    let race = &split["lanes_race"];
    let kept = if race["lanes"] == true {
        "lanes"
    } else {
        "compiled"
    };
    assert_eq!(split["engine"], kept, "{split}");
    assert!(race["ratio"].as_f64().unwrap() > 0.0, "{split}");
    // remembered: the next start does not race again
    assert_eq!(bench("3", "rustc")["lanes_race"]["rounds"], 0);
    assert_eq!(bench("0", "rustc")["engine"], "compiled");
    // the race is a cross-check too: a compiled build that miscounts (a unit that ends
    // counts one node too many at depth 6) is caught by the lane engine and never used
    let faulty = tempfile::tempdir().unwrap();
    let fault = [
        "--split-depth",
        "3",
        "--fault-depth",
        "6",
        "--cache-dir",
        faulty.path().to_str().unwrap(),
    ];
    let out = bench_run(&[&board[..], &fault[..]].concat(), "rustc");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the lane and compiled engines disagree"),
        "{err}"
    );
    assert_eq!(bench("0", "/nonexistent/rustc")["engine"], "lanes");
    // without rustc: bench-hard in the lane engine's wide form, and a board past the lane
    // engine's tables in the reference engine
    if cfg!(target_arch = "x86_64") {
        let report = bench_without_rustc(&["--board", "bench-hard"]);
        assert_eq!(report["engine"], "lanes");
    }
    assert_eq!(
        bench_without_rustc(&THREE_NEIGHBOURS)["engine"],
        "reference"
    );
}

/// `solve --split-depth` with a budget walks every unit in continuation slices, on any
/// engine: the lane engine (two slices at a time) gives what the reference engine gives,
/// to the digit and board by board.
#[test]
fn solve_walks_a_split_in_slices_alike_on_every_engine() {
    let path = puzzle_path("brendan/set1/pieces_05x05.txt");
    let solve = |engine: &str| {
        worker_json(&[
            "solve",
            path.to_str().unwrap(),
            "--split-depth",
            "3",
            "--budget",
            "500",
            "--engine",
            engine,
            "--json",
        ])
    };
    let (reference, lanes) = (solve("reference"), solve("lanes"));
    assert_eq!(lanes["engine"], "lanes");
    assert_eq!(reference["nodes_total"], 113_211);
    assert_eq!(reference["split"]["slices"], 259);
    assert_eq!(reference["split"]["conservation_ok"], true);
    for field in [
        "nodes_total",
        "nodes_by_depth",
        "solutions_count",
        "solutions",
        "max_depth",
        "deepest",
        "split",
    ] {
        assert_eq!(lanes[field], reference[field], "{field}");
    }
}

/// Runs `submit ARGS --json` on the coordinator binary; (success, stdout, stderr).
fn submit(url: &str, args: &[&str]) -> (bool, String, String) {
    let args: Vec<&str> = ["submit"]
        .into_iter()
        .chain(args.iter().copied())
        .chain(["--json"])
        .collect();
    admin_cli(url, &args)
}

#[test]
fn submit_takes_the_loader_flags_and_says_what_it_had_to_assume() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, url) = serve(&dir.path().join("c.db"), "127.0.0.1:0", &[]);
    let path = |rel: &str| puzzle_path(rel).to_str().unwrap().to_string();
    // a header-less 12x6 text: refused without its size, with the flag to give it
    let clue2 = path("clues/clue2.txt");
    let (ok, _, err) = submit(&url, &[&clue2, "--split-depth", "2"]);
    assert!(!ok);
    assert!(err.contains("--size WxH"), "{err}");
    let (ok, out, _) = submit(&url, &[&clue2, "--size", "12x6", "--split-depth", "2"]);
    assert!(ok);
    assert!(out.contains("\"job_id\""), "{out}");
    // a .puz file does not say how its colours are numbered: it says so
    let puz = path("e2/e2.puz");
    let (ok, _, err) = submit(&url, &[&puz, "--split-depth", "1"]);
    assert!(ok);
    assert!(err.contains("--colours blackwood --rot-offset 2"), "{err}");
    let (ok, _, err) = submit(
        &url,
        &[
            &puz,
            "--colours",
            "blackwood",
            "--rot-offset",
            "2",
            "--split-depth",
            "1",
        ],
    );
    assert!(ok);
    assert!(!err.contains("note:"), "{err}");
    // a repeated piece is named
    let text = std::fs::read_to_string(puzzle_path("brendan/set1/pieces_04x04.txt")).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    let last = lines.len() - 1;
    lines[last] = lines[last - 1];
    let dup = dir.path().join("dup.txt");
    std::fs::write(&dup, lines.join("\n")).unwrap();
    let (ok, out, err) = submit(&url, &[dup.to_str().unwrap(), "--split-depth", "2"]);
    assert!(ok);
    assert!(
        err.contains("piece 15 is an exact copy of piece 14"),
        "{err}"
    );
    let doc: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(
        doc["warnings"][0]
            .as_str()
            .unwrap()
            .contains("piece 15 is an exact copy of piece 14"),
        "the coordinator says it too: {doc}"
    );
}

/// Runs an admin subcommand of the coordinator binary; (success, stdout, stderr).
fn admin_cli(url: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(coordinator_bin())
        .args(args)
        .args(["--coordinator", url, "--admin-token", ADMIN])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Sharing the fleet from the command line as the operator guide shows it: `submit
/// --share`, `job set`, `pause`, `resume`, and `job` saying what it is.
#[test]
fn jobs_are_scheduled_paused_and_resumed_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, url) = serve(&dir.path().join("c.db"), "127.0.0.1:0", &[]);
    let six = puzzle_path("brendan/set1/pieces_06x06.txt");
    let (ok, out, err) = submit(
        &url,
        &[six.to_str().unwrap(), "--split-depth", "4", "--share", "2"],
    );
    assert!(ok, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    let job = doc["job_id"].as_str().unwrap().to_string();
    let (ok, out, err) = admin_cli(
        &url,
        &["job", "set", &job, "--priority", "-1", "--share", "5"],
    );
    assert!(ok, "{err}");
    assert!(out.contains("priority -1, share 5"), "{out}");
    let (ok, _, err) = admin_cli(&url, &["job", "set", &job]);
    assert!(!ok && err.contains("--priority"), "{err}");
    assert!(admin_cli(&url, &["pause", &job]).0);
    let (_, out, _) = admin_cli(&url, &["job", &job]);
    assert!(
        out.contains("paused") && out.contains("schedule: priority -1, share 5"),
        "{out}"
    );
    assert!(out.contains("estimate: tree ~"), "{out}");
    assert!(admin_cli(&url, &["resume", &job]).0);
    let (_, out, _) = admin_cli(&url, &["job", &job, "--json"]);
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (
            doc["paused"].as_bool(),
            doc["share"].as_f64(),
            doc["priority"].as_i64()
        ),
        (Some(false), Some(5.0), Some(-1))
    );
}

#[cfg_attr(
    not(has_systemd),
    ignore = "needs systemd-analyze to check the unit: apt-get install systemd"
)]
#[tokio::test(flavor = "multi_thread")]
async fn a_user_service_is_written_checked_and_its_command_line_joins_a_fleet() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let (_coordinator, url) = crate::harness::serve(&dir.path().join("c.db"), "127.0.0.1:0", &[]);
    let token = dir.path().join("token");
    std::fs::write(&token, format!("{}\n", crate::harness::ENROLL)).unwrap();
    let out = Command::new(worker_bin())
        .args(["service", "install", "--no-start", "--coordinator", &url])
        .arg("--token-file")
        .arg(&token)
        .env("HOME", &home)
        .env_remove("XDG_CONFIG_HOME")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config = home.join(".config/e2fleet");
    for file in ["worker.env", "worker.token"] {
        let mode = std::fs::metadata(config.join(file))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{file}");
    }
    let unit = home.join(".config/systemd/user/e2fleet-worker.service");
    // systemd's own check, as the user's manager would load it
    let runtime = dir.path().join("run");
    std::fs::create_dir_all(&runtime).unwrap();
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
    let verify = Command::new("systemd-analyze")
        .args(["--user", "verify"])
        .arg(&unit)
        .env("HOME", &home)
        .env("XDG_RUNTIME_DIR", &runtime)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&verify.stderr).to_string()
        + &String::from_utf8_lossy(&verify.stdout);
    assert!(verify.status.success() && said.trim().is_empty(), "{said}");
    // its command line, run as systemd would: the environment file, %h, nothing else
    let text = std::fs::read_to_string(&unit).unwrap();
    let exec = text
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap();
    let words: Vec<String> = exec
        .split_whitespace()
        .map(|w| w.replace("%h", home.to_str().unwrap()))
        .collect();
    let env = std::fs::read_to_string(config.join("worker.env")).unwrap();
    let mut cmd = Command::new(&words[0]);
    cmd.args(&words[1..])
        .env_clear()
        .env("HOME", &home)
        .env("E2FLEET_ON_BATTERY", "run");
    for line in env
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains('='))
    {
        let (k, v) = line.split_once('=').unwrap();
        cmd.env(k, v);
    }
    let mut worker = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let data = home.join(".local/share/e2fleet-worker");
    let start = std::time::Instant::now();
    loop {
        let status = Command::new(worker_bin())
            .args(["status", "--json", "--data-dir"])
            .arg(&data)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&status.stdout);
        if text.contains("\"state\":\"running") {
            break;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "the user service's worker never joined: {text}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let stop = Command::new(worker_bin())
        .args(["stop", "--wait", "30", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        stop.status.success(),
        "{}",
        String::from_utf8_lossy(&stop.stderr)
    );
    assert!(worker.wait().unwrap().success());
}
