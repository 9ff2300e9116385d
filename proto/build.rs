//! Compiles `proto/e2fleet/v2/*.proto` with the pure-Rust protox (no system protoc).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/e2fleet/v2/fleet.proto"];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}
