//! What this machine is: the labels sent at registration (`run` and `verify`). The
//! coordinator shows them and groups rates and hardware classes by them; it never trusts
//! them.

use e2fleet_proto::api::HostInfo;

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

/// The CPU features engines can use on this machine (detected at run time), sorted and
/// comma-separated. Part of the hardware class: a build for `native` differs with them.
pub fn target_features() -> String {
    let mut found: Vec<&str> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! probe {
            ($($f:tt),*) => { $( if std::arch::is_x86_feature_detected!($f) { found.push($f); } )* };
        }
        probe!(
            "sse4.2", "popcnt", "avx", "avx2", "bmi1", "bmi2", "lzcnt", "fma", "avx512f",
            "avx512bw", "avx512vl"
        );
    }
    #[cfg(target_arch = "aarch64")]
    {
        macro_rules! probe {
            ($($f:tt),*) => { $( if std::arch::is_aarch64_feature_detected!($f) { found.push($f); } )* };
        }
        probe!("neon", "sve", "sve2", "lse");
    }
    found.sort_unstable();
    found.join(",")
}

/// This machine's fingerprint; `hostname` overrides the detected name; `engine` chooses
/// the engine kind and release reported for the hardware class.
pub fn host_info(
    hostname_override: Option<&str>,
    engine: &crate::engine_args::EngineArgs,
) -> HostInfo {
    let rustc_version = rustc_version(&engine.rustc);
    let (engine_kind, engine_release) = engine.release(&rustc_version);
    HostInfo {
        hostname: hostname_override
            .map(str::to_string)
            .unwrap_or_else(hostname),
        cpu_model: cpu_model(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()) as u32,
        arch: std::env::consts::ARCH.into(),
        os: std::env::consts::OS.into(),
        rustc_version,
        worker_version: env!("CARGO_PKG_VERSION").into(),
        target_features: target_features(),
        engine_kind,
        engine_release,
    }
}
