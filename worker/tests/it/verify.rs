//! `verify --offline`: the built-in suite passes with both engines, and a deliberately
//! wrong engine (test-only fault injection) fails with a verdict naming the unit and the
//! first differing depth.

use std::process::Command;

fn verify(extra: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_e2fleet-worker"))
        .args(["verify", "--offline", "--cache-dir"])
        .arg(std::env::temp_dir().join("e2fleet-worker-test-cache"))
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
