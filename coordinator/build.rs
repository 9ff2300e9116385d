//! Finds out whether a headless browser is there for the dashboard tests: with one
//! (`chromium` on PATH, or `$CHROMIUM`), `cfg(has_browser)` is set and they run; without,
//! they are marked ignored with the reason, which `cargo test` prints where a person sees
//! it. `E2FLEET_REQUIRE_BROWSER=1` (CI) makes a missing browser an error.
//!
//! Also: the migrations are compiled in (`sqlx::migrate!`), so a new migration file must
//! rebuild the crate.

fn main() {
    println!("cargo:rerun-if-changed=../migrations");
    println!("cargo:rustc-check-cfg=cfg(has_browser)");
    println!("cargo:rerun-if-env-changed=PATH");
    println!("cargo:rerun-if-env-changed=CHROMIUM");
    println!("cargo:rerun-if-env-changed=E2FLEET_REQUIRE_BROWSER");
    let name = std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".into());
    let on_path = std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(&name).is_file()));
    let found = on_path || std::path::Path::new(&name).is_file();
    if found {
        println!("cargo:rustc-cfg=has_browser");
    } else if std::env::var("E2FLEET_REQUIRE_BROWSER").as_deref() == Ok("1") {
        panic!("E2FLEET_REQUIRE_BROWSER=1 but no chromium on PATH: apt-get install chromium");
    }
}
