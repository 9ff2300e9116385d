//! The tools the dashboard and PostgreSQL tests need (`tools/build/optional_tools.rs`):
//! `cfg(has_browser)`, `cfg(has_postgres)`.
//!
//! Also: the migrations are compiled in (`sqlx::migrate!`), so a new migration file must
//! rebuild the crate.

include!("../tools/build/optional_tools.rs");

fn main() {
    println!("cargo:rerun-if-changed=../migrations");
    optional_tool("browser", browser());
    optional_tool("postgres", postgres());
}
