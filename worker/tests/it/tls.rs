//! TLS set up exactly as docs/operator-guide.md says, both ways: the coordinator's own CA
//! (`serve --tls-self-signed`) and the openssl recipe (run from the guide's text, so the
//! guide and this test cannot drift apart). Each ends on a real fleet's exact total.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::harness::{ADMIN, coordinator_bin, json_of, puzzle_path, serve, serve_lines, worker};
use e2fleet_engine::testing::{BRENDAN_5X5, assert_exact};

/// Runs an admin subcommand against a TLS coordinator trusting `ca`.
fn tls_admin(url: &str, ca: &Path, args: &[&str]) -> serde_json::Value {
    json_of(
        Command::new(coordinator_bin())
            .args(args)
            .args(["--coordinator", url, "--admin-token", ADMIN, "--json"])
            .arg("--ca-cert")
            .arg(ca),
    )
}

/// Submits Brendan 5x5, runs one worker trusting `ca`, and checks the exact total.
async fn a_job_completes_over_tls(url: &str, ca: &Path, data: &Path) {
    let puzzle = puzzle_path("brendan/set1/pieces_05x05.txt");
    let job = tls_admin(
        url,
        ca,
        &["submit", puzzle.to_str().unwrap(), "--split-depth", "3"],
    )["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    let _w = worker(
        url,
        data,
        "w",
        &["--engine", "reference", "--ca-cert", ca.to_str().unwrap()],
    );
    let start = Instant::now();
    let doc = loop {
        let doc = tls_admin(url, ca, &["job", &job]);
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_coordinators_own_ca_as_the_guide_says() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let flags = ["--tls-self-signed", "--tls-name", "localhost,127.0.0.1"];
    let (mut coordinator, url, said) = serve_lines(&db, "127.0.0.1:0", &flags);
    let ca = said
        .iter()
        .find_map(|l| l.strip_prefix("clients trust this coordinator with: --ca-cert "))
        .unwrap_or_else(|| panic!("no --ca-cert line in {said:?}"))
        .to_string();
    let ca = Path::new(&ca).to_path_buf();
    assert_eq!(
        ca,
        dir.path().join("tls").join("ca.pem"),
        "next to the database"
    );
    assert!(said.iter().any(|l| l.starts_with("made a TLS certificate")));
    let key_mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(dir.path().join("tls").join("server-key.pem"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(key_mode & 0o077, 0, "the server key is private");
    let ignore = std::fs::read_to_string(dir.path().join("tls").join(".gitignore")).unwrap();
    assert!(
        ignore.lines().any(|l| l.trim() == "*"),
        "the keys' folder keeps itself out of git: {ignore}"
    );
    assert!(url.starts_with("https://"), "{url}");
    a_job_completes_over_tls(&url, &ca, &dir.path().join("w1")).await;
    // a client that does not trust the CA is refused, and says why
    let out = Command::new(coordinator_bin())
        .args(["jobs", "--coordinator", &url, "--admin-token", ADMIN])
        .output()
        .unwrap();
    assert!(!out.status.success(), "an untrusted certificate must fail");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--ca-cert"), "{err}");
    // a restart reuses the CA: the clients' copy of ca.pem keeps working
    let before = std::fs::read(&ca).unwrap();
    coordinator.signal("-TERM");
    coordinator.wait(Duration::from_secs(10)).await;
    let (_coordinator, url, said) = serve_lines(&db, "127.0.0.1:0", &flags);
    assert!(
        !said.iter().any(|l| l.starts_with("made a TLS certificate")),
        "{said:?}"
    );
    assert_eq!(std::fs::read(&ca).unwrap(), before);
    assert!(
        tls_admin(&url, &ca, &["fleet"])["workers"]["total"]
            .as_u64()
            .unwrap()
            >= 1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(has_openssl),
    ignore = "no openssl on PATH: apt-get install openssl"
)]
async fn the_openssl_recipe_in_the_guide_makes_a_certificate_clients_accept() {
    let guide = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operator-guide.md"),
    )
    .unwrap();
    let after = guide
        .split("<!-- tls-recipe")
        .nth(1)
        .expect("the guide marks its TLS recipe");
    let script = after
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a sh block after the marker");
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("sh")
        .args(["-e", "-c", script])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the guide's recipe fails: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let (_coordinator, url) = serve(
        &dir.path().join("c.db"),
        "127.0.0.1:0",
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    // the recipe names localhost among the coordinator's names
    let url = url.replace("127.0.0.1", "localhost");
    a_job_completes_over_tls(&url, &dir.path().join("ca.pem"), &dir.path().join("w")).await;
}
