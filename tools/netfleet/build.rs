//! The tools the scenario tests need (`tools/build/optional_tools.rs`): `cfg(has_netns)`,
//! `cfg(has_postgres)`.

include!("../build/optional_tools.rs");

fn main() {
    optional_tool("netns", netns());
    optional_tool("postgres", postgres());
}
