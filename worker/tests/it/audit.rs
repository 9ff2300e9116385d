//! `e2fleet-worker audit` on certificates of jobs real workers ran: Brendan 6x6 audited
//! whole (the audit equals the job, and is recorded at the coordinator), a budgeted
//! bench-easy board sampled, and a forged certificate failing with the unit named.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use e2fleet_engine::certificate::{decode, encode, merkle_root};

use crate::harness::*;

/// Runs `e2fleet-worker audit FILE --json ...`; (exit success, the JSON report).
fn audit(file: &Path, extra: &[&str]) -> (bool, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_e2fleet-worker"))
        .arg("audit")
        .arg(file)
        .args(["--json", "--engine", "reference", "--threads", "2"])
        .args(extra)
        .env_remove("E2FLEET_COORDINATOR")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let report = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("{e}: {text}\n{}", String::from_utf8_lossy(&out.stderr)));
    (out.status.success(), report)
}

async fn export(c: &Coordinator, job: &str, file: &Path) {
    let bytes = c
        .fleet
        .certificate(job.parse().unwrap(), false)
        .await
        .unwrap();
    std::fs::write(file, bytes).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brendan_6x6_audited_whole_equals_the_job_and_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&dir.path().join("c.db"), 0, Duration::from_secs(30)).await;
    let job = c.submit("brendan/set1/pieces_06x06.txt", 4, None).await;
    let _w = worker(
        &c.url,
        &dir.path().join("w"),
        "w",
        &["--engine", "reference"],
    );
    let doc = c.wait_complete(&job, Duration::from_secs(120)).await;
    let file = dir.path().join("6x6.e2cert");
    export(&c, &job, &file).await;

    let (ok, report) = audit(
        &file,
        &[
            "--all",
            "--coordinator",
            &c.url,
            "--token",
            ENROLL,
            "--hostname",
            "auditor",
        ],
    );
    assert!(ok, "{report}");
    assert_eq!(report["passed"], true);
    assert_eq!(report["nodes"], 69_284_103);
    assert_eq!(report["nodes"], doc["nodes_total"]);
    assert_eq!(report["solutions"], 260);
    assert_eq!(report["solutions_verified"], 260);
    let units = report["units"].as_u64().unwrap();
    assert_eq!(report["rerun"], units);
    assert_eq!(report["rerun_agreed"], units);
    // the re-runs add up to the job's unit nodes
    assert_eq!(report["rerun_nodes"], doc["unit_nodes"]);
    assert_eq!(report["coordinator"]["agreed"], units);
    let audits = c.fleet.job_audits(job.parse().unwrap()).await.unwrap();
    assert_eq!(audits.total, 1);
    assert_eq!(audits.classes[0].units_agreed, units);
    assert_eq!(audits.audits[0].hostname, "auditor");

    // the published root must match
    let (ok, _) = audit(&file, &["--sample", "1", "--root", &"0".repeat(64)]);
    assert!(!ok);

    // a forger who changes one unit's counts and the totals, and re-seals the file
    let mut cert = decode(&std::fs::read(&file).unwrap()).unwrap();
    let victim = cert
        .units
        .iter()
        .position(|u| u.result.as_ref().unwrap().nodes.len() > 3)
        .unwrap();
    let id = cert.units[victim].id;
    let r = cert.units[victim].result.as_mut().unwrap();
    r.nodes[2] += 5;
    let depth = r.from + 2;
    cert.totals[depth] += 5;
    cert.merkle_root = merkle_root(&cert.units);
    let forged = dir.path().join("forged.e2cert");
    std::fs::write(&forged, encode(&cert)).unwrap();
    let (ok, report) = audit(&forged, &["--all"]);
    assert!(!ok);
    assert_eq!(report["passed"], false);
    assert_eq!(report["mismatched"], serde_json::json!([id]));
    let failure = report["failure"].as_str().unwrap();
    assert!(failure.contains(&format!("unit {id}")), "{failure}");
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budgeted_bench_easy_job_round_trips_through_a_sampled_audit() {
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&dir.path().join("c.db"), 0, Duration::from_secs(30)).await;
    let job = c
        .submit("bench/bench-easy-rows0-5.json", 1, Some(20_000))
        .await;
    let _w = worker(
        &c.url,
        &dir.path().join("w"),
        "w",
        &["--engine", "reference"],
    );
    let doc = c.wait_complete(&job, Duration::from_secs(120)).await;
    assert_eq!(doc["nodes_total"], 6_427_237);
    let file = dir.path().join("easy.e2cert");
    export(&c, &job, &file).await;
    let (ok, report) = audit(&file, &["--sample", "25", "--seed", "3"]);
    assert!(ok, "{report}");
    assert_eq!(report["nodes"], 6_427_237);
    assert_eq!(report["solutions"], 1);
    assert_eq!(report["rerun_agreed"], 25);
    assert!(report["continuations"].as_u64().unwrap() > 0, "{report}");
    // what a sample of 25 proves is printed with it
    let p = report["pass_probability"][0][1].as_f64().unwrap();
    let n = report["decided"].as_f64().unwrap();
    assert!((p - (n - 25.0) / n).abs() < 1e-9, "{report}");
    c.stop().await;
}

/// A published certificate must not be a way to exhaust the people who check it: a small
/// gzip that unpacks to gigabytes, a claimed split so deep that its enumeration runs for
/// days, a claimed enumeration far past what the auditor agreed to walk. Each is refused
/// within seconds, before the work, naming the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_certificate_cannot_exhaust_its_auditor() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let c = Coordinator::start(&dir.path().join("c.db"), 0, Duration::from_secs(30)).await;
    let job = c.submit("brendan/set1/pieces_06x06.txt", 4, None).await;
    let _w = worker(
        &c.url,
        &dir.path().join("w"),
        "w",
        &["--engine", "reference"],
    );
    c.wait_complete(&job, Duration::from_secs(120)).await;
    let file = dir.path().join("6x6.e2cert");
    export(&c, &job, &file).await;
    let timed = |f: &Path, extra: &[&str]| {
        let started = std::time::Instant::now();
        let (ok, report) = audit(f, extra);
        (ok, report, started.elapsed())
    };

    // a gzip bomb: 256 MiB of zeros in a few hundred kilobytes
    let bomb = dir.path().join("bomb.e2cert");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    for _ in 0..256 {
        gz.write_all(&vec![0u8; 1 << 20]).unwrap();
    }
    std::fs::write(&bomb, gz.finish().unwrap()).unwrap();
    let (ok, report, took) = timed(&bomb, &["--max-body-mib", "16"]);
    assert!(!ok && took < Duration::from_secs(10), "{took:?}");
    assert!(
        report["failure"]
            .as_str()
            .unwrap()
            .contains("unpacks to more than"),
        "{report}"
    );

    // a split claimed deep in the tree, with a small enumeration stated: the walk stops
    // as soon as the tree has more than stated
    let mut cert = decode(&std::fs::read(&file).unwrap()).unwrap();
    let depths = cert.depths;
    cert.split_depth = depths - 2;
    let deep = dir.path().join("deep.e2cert");
    std::fs::write(&deep, encode(&cert)).unwrap();
    let (ok, report, took) = timed(&deep, &["--sample", "1"]);
    assert!(!ok && took < Duration::from_secs(20), "{took:?}");
    assert!(
        report["failure"].as_str().unwrap().contains("more than"),
        "{report}"
    );

    // an enumeration stated past the auditor's limit: refused before any walking
    cert.enumeration[0] = 1_000_000_000_000_000;
    let huge = dir.path().join("huge.e2cert");
    std::fs::write(&huge, encode(&cert)).unwrap();
    let (ok, report, took) = timed(&huge, &["--sample", "1"]);
    assert!(!ok && took < Duration::from_secs(10), "{took:?}");
    assert!(
        report["failure"]
            .as_str()
            .unwrap()
            .contains("--max-enumeration")
            || report["failure"].as_str().unwrap().contains("limit"),
        "{report}"
    );
    c.stop().await;
}
