//! Compiles `proto/e2fleet/v2/*.proto` with the pure-Rust protox (no system protoc), and
//! keeps the encoded descriptor set for gRPC reflection (`grpcurl` and friends).

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/e2fleet/v2/fleet.proto"];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("e2fleet_v2_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}
