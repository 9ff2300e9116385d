//! The tools the PostgreSQL and TLS-recipe tests need (`tools/build/optional_tools.rs`):
//! `cfg(has_postgres)`, `cfg(has_openssl)`, and the full-disk update test's
//! `cfg(has_mounts)`.

include!("../tools/build/optional_tools.rs");

fn main() {
    optional_tool("postgres", postgres());
    optional_tool("openssl", openssl());
    optional_tool("mounts", mounts());
}
