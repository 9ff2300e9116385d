// The tools some tests need and a fresh machine may lack, probed by the build scripts of
// the crates whose tests use them (`include!`d there). A tool that is there sets
// `cfg(has_<name>)` and its tests run; one that is missing leaves the cfg unset and its
// tests are marked ignored with the reason, so `cargo test` lists them as ignored, with
// the install command, in its summary. `E2FLEET_REQUIRE_<NAME>=1` (CI sets them all) makes
// a missing tool a build error instead.
//
// A build script runs again when PATH, the tool's variables or the folders it is looked
// for in change (installing a package touches them).

use std::path::{Path, PathBuf};

/// Declares `cfg(has_<name>)` and sets it when `found` is `Ok`; panics when it is `Err`
/// and `E2FLEET_REQUIRE_<NAME>` is set.
#[allow(dead_code)]
fn optional_tool(name: &str, found: Result<(), String>) {
    let require = format!("E2FLEET_REQUIRE_{}", name.to_uppercase());
    println!("cargo:rustc-check-cfg=cfg(has_{name})");
    println!("cargo:rerun-if-env-changed={require}");
    println!("cargo:rerun-if-env-changed=PATH");
    match found {
        Ok(()) => println!("cargo:rustc-cfg=has_{name}"),
        Err(why) if std::env::var_os(&require).is_some_and(|v| !v.is_empty() && v != "0") => {
            panic!("{require} is set, but {why}")
        }
        // the tests say why they are ignored
        Err(_) => {}
    }
}

/// The folders of PATH, each watched for a tool appearing in it.
#[allow(dead_code)]
fn path_dirs() -> Vec<PathBuf> {
    let dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).filter(|d| d.is_dir()).collect())
        .unwrap_or_default();
    for d in &dirs {
        println!("cargo:rerun-if-changed={}", d.display());
    }
    dirs
}

/// `name` on PATH (or a path to it).
#[allow(dead_code)]
fn on_path(name: &str) -> bool {
    Path::new(name).is_file() || path_dirs().iter().any(|d| d.join(name).is_file())
}

/// A headless browser for the dashboard tests (`chromium`, or `$CHROMIUM`).
#[allow(dead_code)]
fn browser() -> Result<(), String> {
    println!("cargo:rerun-if-env-changed=CHROMIUM");
    let name = std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".into());
    on_path(&name)
        .then_some(())
        .ok_or_else(|| format!("no {name} on PATH: apt-get install chromium"))
}

/// PostgreSQL's server programs (`initdb`, `pg_ctl`) for a throwaway server: on PATH or in
/// Debian's `/usr/lib/postgresql/N/bin`.
#[allow(dead_code)]
fn postgres() -> Result<(), String> {
    let lib = Path::new("/usr/lib/postgresql");
    if lib.is_dir() {
        println!("cargo:rerun-if-changed={}", lib.display());
    }
    let in_lib = std::fs::read_dir(lib).into_iter().flatten().flatten().any(|e| {
        let bin = e.path().join("bin");
        bin.join("initdb").is_file() && bin.join("pg_ctl").is_file()
    });
    (in_lib || (on_path("initdb") && on_path("pg_ctl")))
        .then_some(())
        .ok_or_else(|| "no PostgreSQL server programs: apt-get install postgresql".into())
}

/// `openssl`, for the guide's certificate recipe.
#[allow(dead_code)]
fn openssl() -> Result<(), String> {
    on_path("openssl")
        .then_some(())
        .ok_or_else(|| "no openssl on PATH: apt-get install openssl".into())
}

/// systemd's unit checker (`systemd-analyze verify`), for the units the worker writes.
#[allow(dead_code)]
fn systemd() -> Result<(), String> {
    on_path("systemd-analyze")
        .then_some(())
        .ok_or_else(|| "no systemd-analyze on PATH: apt-get install systemd".into())
}

/// A private mount namespace for one process (a tiny filesystem to fill): root and
/// util-linux's `unshare`.
#[allow(dead_code)]
fn mounts() -> Result<(), String> {
    if !is_root() {
        return Err("mounting a filesystem needs root".into());
    }
    on_path("unshare")
        .then_some(())
        .ok_or_else(|| "no `unshare` on PATH: apt-get install util-linux".into())
}

#[allow(dead_code)]
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// Network namespaces for a many-host fleet: root and iproute2's `ip`.
#[allow(dead_code)]
fn netns() -> Result<(), String> {
    if !is_root() {
        return Err("network namespaces need root".into());
    }
    on_path("ip")
        .then_some(())
        .ok_or_else(|| "no `ip` on PATH: apt-get install iproute2".into())
}
