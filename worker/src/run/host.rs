//! What this machine is: the fingerprint sent at registration.

use e2fleet_proto::v1;

fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown-host".into())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| {
                    l.starts_with("model name")
                        || l.starts_with("Model")
                        || l.starts_with("Hardware")
                })
                .and_then(|l| l.split_once(':').map(|(_, v)| v.trim().to_string()))
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

fn rustc_version(rustc: &std::path::Path) -> String {
    std::process::Command::new(rustc)
        .arg("-V")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// This machine's fingerprint; `hostname` overrides the detected name.
pub fn host_info(hostname_override: Option<&str>, rustc: &std::path::Path) -> v1::HostInfo {
    v1::HostInfo {
        hostname: hostname_override
            .map(str::to_string)
            .unwrap_or_else(hostname),
        cpu_model: cpu_model(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()) as u32,
        arch: std::env::consts::ARCH.into(),
        os: std::env::consts::OS.into(),
        rustc_version: rustc_version(rustc),
        worker_version: env!("CARGO_PKG_VERSION").into(),
    }
}
