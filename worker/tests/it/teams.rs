//! A volunteer names their team from their own machine (`e2fleet-worker team`), with the
//! identity a `run` saved: the account joins, leaves, and cannot flip teams without end;
//! the operator's own machines are in no team.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::harness::{admin, serve, worker_as, worker_with};

/// `e2fleet-worker team ARGS --coordinator URL --data-dir DATA`.
fn team(url: &str, data: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_e2fleet-worker"))
        .arg("team")
        .args(args)
        .args(["--coordinator", url])
        .arg("--data-dir")
        .arg(data)
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Waits (bounded) until the worker saved its identity.
async fn joined(data: &Path) {
    let started = Instant::now();
    while !data.join("identity.json").exists() {
        assert!(started.elapsed() < Duration::from_secs(60), "never joined");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The team of `account`, as the operator's `account list` shows it.
fn team_of(url: &str, account: &str) -> serde_json::Value {
    admin(url, &["account", "list"])
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == account)
        .map(|a| a["team"].clone())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volunteer_names_their_team_from_their_worker() {
    let dir = tempfile::tempdir().unwrap();
    let (_coordinator, url) = serve(&dir.path().join("c.db"), "127.0.0.1:0", &[]);
    let token = admin(&url, &["account", "add", "vic"])["token"]
        .as_str()
        .unwrap()
        .to_string();
    let data = dir.path().join("vic");
    // nothing speaks for the account before its worker joined
    let out = team(&url, &data, &["lab"]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("no identity"), "{}", text(&out));

    let _vic = worker_as(
        &url,
        &token,
        &data,
        "vic-box",
        1,
        &["--engine", "reference"],
        false,
    );
    joined(&data).await;
    let out = team(&url, &data, &["lab"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("your account is in team lab, which has 1 account(s)"),
        "{}",
        text(&out)
    );
    assert_eq!(team_of(&url, "vic"), "lab");
    let out = team(&url, &data, &["--none"]);
    assert!(text(&out).contains("in no team"), "{}", text(&out));
    assert!(team_of(&url, "vic").is_null());
    // a label, but each change a write: five at once, then one a minute
    for name in ["a", "b", "c"] {
        assert!(team(&url, &data, &[name]).status.success());
    }
    let out = team(&url, &data, &["d"]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("too often"), "{}", text(&out));
    assert_eq!(team_of(&url, "vic"), "c");

    // the operator's machines are not ranked, so in no team
    let op = dir.path().join("op");
    let _op = worker_with(&url, &op, "op-box", 1, &["--engine", "reference"], false);
    joined(&op).await;
    let out = team(&url, &op, &["lab"]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("in no team"), "{}", text(&out));
}
