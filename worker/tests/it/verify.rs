//! `verify --offline`: the built-in suite passes with both engines, and a deliberately
//! wrong engine (test-only fault injection) fails with a verdict naming the unit and the
//! first differing depth. `verify --coordinator`: results go to the coordinator, which
//! judges them per hardware class and shows the class in its conformance matrix.

use std::process::Command;

fn verify(extra: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_e2fleet-worker"))
        .args(["verify", "--offline", "--cache-dir"])
        .arg(crate::harness::shared_cache())
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
fn the_suite_passes_with_both_engines() {
    for engine in ["reference", "compiled"] {
        let (ok, text) = verify(&["--engine", engine]);
        assert!(ok, "{engine}: {text}");
        assert!(text.contains("VERIFIED: all 12 units agree"), "{text}");
    }
}

/// With `--engine auto` (the default) the suite checks both engines, racing neither: the
/// lane engine on the boards of its narrow form, the compiled engine on the 16x16 boards
/// (which the lane engine's wide form takes too; a job's race checks the two against each
/// other on its own units).
#[test]
fn the_auto_suite_checks_the_lane_and_the_compiled_engine() {
    let (ok, text) = verify(&["--json"]);
    assert!(ok, "{text}");
    let doc: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let engine_of = |name: &str| {
        doc["units"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {doc}"))["engine"]
            .clone()
    };
    assert_eq!(engine_of("brendan1-5x5-whole"), "lanes", "{doc}");
    assert_eq!(engine_of("hard-root-budget"), "compiled", "{doc}");
    assert_eq!(engine_of("e2-clues-budget"), "compiled", "{doc}");
}

/// The suite's 16x16 units run the slot walk, and nothing races for them: a fresh cache
/// holds no remembered walk after the suite.
#[test]
fn the_suite_runs_the_slot_walk_without_racing() {
    let cache = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_e2fleet-worker"))
        .args([
            "verify",
            "--offline",
            "--engine",
            "compiled",
            "--json",
            "--cache-dir",
        ])
        .arg(cache.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["verified"], true, "{doc}");
    let builds: Vec<(String, String)> = doc["units"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| {
            (
                u["name"].as_str().unwrap().to_string(),
                u["engine_build"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let slots = builds.iter().filter(|(_, b)| b.ends_with("-slots")).count();
    assert!(
        slots >= 4 && slots < builds.len(),
        "16x16 units on the slot walk, the rest on the list walk: {builds:?}"
    );
    for (name, build) in &builds {
        if name.contains("hard") || name.contains("e2-") {
            assert!(build.ends_with("-slots"), "{name}: {build}");
        }
    }
    let memos: Vec<_> = std::fs::read_dir(cache.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("e2fleet-walk-"))
        .collect();
    assert!(memos.is_empty(), "the suite raced: {memos:?}");
}

#[test]
fn a_wrong_engine_fails_with_the_unit_and_depth() {
    let (ok, text) = verify(&["--engine", "compiled", "--fault-depth", "6"]);
    assert!(!ok, "{text}");
    assert!(text.contains("DISAGREES"), "{text}");
    assert!(
        text.contains("FAILED:") && text.contains("brendan1-5x5-whole"),
        "{text}"
    );
    assert!(text.contains("first differing depth 7"), "{text}");
}

fn verify_with(url: &str, extra: &[&str]) -> (bool, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_e2fleet-worker"))
        .args([
            "verify",
            "--coordinator",
            url,
            "--token",
            crate::harness::ENROLL,
        ])
        .args(["--hostname", "verifier", "--json", "--cache-dir"])
        .arg(crate::harness::shared_cache())
        .args(extra)
        .output()
        .unwrap();
    let doc = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.success(), doc)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_go_to_the_coordinator_and_into_its_matrix() {
    let dir = tempfile::tempdir().unwrap();
    let c = crate::harness::Coordinator::start(
        &dir.path().join("c.db"),
        0,
        std::time::Duration::from_secs(30),
    )
    .await;
    let url = c.url.clone();
    let (ok, doc) = tokio::task::spawn_blocking({
        let url = url.clone();
        move || verify_with(&url, &["--engine", "reference"])
    })
    .await
    .unwrap();
    assert!(ok, "{doc}");
    assert_eq!(doc["verified"], true);
    assert_eq!(doc["class_flagged"], false);
    assert_eq!(doc["units"].as_array().unwrap().len(), 12);
    let good_class = doc["class_id"].as_str().unwrap().to_string();

    let (ok, doc) = tokio::task::spawn_blocking(move || {
        verify_with(&url, &["--engine", "compiled", "--fault-depth", "6"])
    })
    .await
    .unwrap();
    assert!(!ok, "{doc}");
    assert_eq!(doc["class_flagged"], true);
    assert!(
        doc["verdict"]
            .as_str()
            .unwrap()
            .contains("first differing depth 7"),
        "{doc}"
    );
    let bad_class = doc["class_id"].as_str().unwrap().to_string();
    assert_ne!(
        good_class, bad_class,
        "another engine build is another class"
    );

    let m = c.matrix("default").await;
    let flagged: Vec<(String, bool)> = m["classes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["id"].as_str().unwrap().to_string(),
                k["flagged"].as_bool().unwrap(),
            )
        })
        .collect();
    assert!(flagged.contains(&(good_class, false)), "{flagged:?}");
    assert!(flagged.contains(&(bad_class, true)), "{flagged:?}");
    c.stop().await;
}
