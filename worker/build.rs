//! The tools the PostgreSQL and TLS-recipe tests need (`tools/build/optional_tools.rs`):
//! `cfg(has_postgres)`, `cfg(has_openssl)`, and the full-disk update test's
//! `cfg(has_mounts)` and the user service test's `cfg(has_systemd)`.

include!("../tools/build/optional_tools.rs");

fn main() {
    optional_tool("postgres", postgres());
    optional_tool("openssl", openssl());
    optional_tool("mounts", mounts());
    optional_tool("systemd", systemd());
}
