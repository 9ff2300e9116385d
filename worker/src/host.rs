//! What this machine is: the labels sent at registration (`run` and `verify`). The
//! coordinator shows them and groups rates and hardware classes by them; it never trusts
//! them. The CPU label carries the microarchitecture rustc detects (`AMD EPYC (znver4)`).

use e2fleet_proto::api::HostInfo;

fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown-host".into())
}

/// The CPU as the operating system names it (on some machines only a family name, such
/// as `AMD EPYC`: [`native_cpu`] names the microarchitecture).
pub fn cpu_model() -> String {
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

/// Logical cores (1 where the OS does not say).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `rustc -V` of the compiler engines are built with (empty if it cannot be run).
pub fn rustc_version(rustc: &std::path::Path) -> String {
    std::process::Command::new(rustc)
        .arg("-V")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// The CPU rustc builds for when asked for `native` on this machine (`znver4`,
/// `skylake`, `apple-m1`, ...), from `rustc --print target-cpus`: the microarchitecture,
/// which decides how fast each walk runs, where the
/// OS's model name may give only the family. `None` when rustc cannot be run or does
/// not say.
pub fn native_cpu(rustc: &std::path::Path) -> Option<String> {
    let out = std::process::Command::new(rustc)
        .args(["--print", "target-cpus"])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    native_cpu_in(&String::from_utf8_lossy(&out.stdout))
}

/// The CPU named on the `native` line of `rustc --print target-cpus`
/// (`native - Select the CPU of the current host (currently znver4).`).
fn native_cpu_in(listing: &str) -> Option<String> {
    let line = listing
        .lines()
        .find(|l| l.trim_start().starts_with("native"))?;
    let (_, rest) = line.split_once("currently ")?;
    let cpu = rest.trim_end().trim_end_matches(").").trim_end_matches(')');
    (!cpu.is_empty()).then(|| cpu.to_string())
}

/// The CPU as a worker reports it: the OS's model name and, when rustc names it, the
/// microarchitecture (`AMD EPYC (znver4)`), so machines the OS names alike but that run
/// the engine at different speeds (Zen 4 and Zen 5 EPYCs)
/// are told apart in the fleet's per-core rates and in hardware classes.
pub fn cpu_label(model: &str, native: Option<&str>) -> String {
    match native {
        Some(cpu) if !model.contains(cpu) => format!("{model} ({cpu})"),
        _ => model.to_string(),
    }
}

/// The clock a busy core of this machine runs at, in GHz: a chain of dependent
/// rotate-and-add steps (two one-cycle instructions each on x86-64 cores of the last
/// fifteen years) timed in this thread, the fastest of a few tries. An estimate: boost
/// clocks move with load and temperature, and engines run in a process of their own. It
/// turns nodes/s into cycles per node, the figure that compares an engine across machines
/// whose clocks differ (a Zen 4 EPYC measured ~2.7-2.8 GHz where a Zen 5 one ran at
/// ~3.7: most of the gap between their nodes/s).
/// `None` off x86-64, where those instructions' latencies differ from core to core.
pub fn clock_ghz() -> Option<f64> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    const STEPS: u64 = 4_000_000; // 8 M cycles a try, ~3 ms at 3 GHz
    chain(std::hint::black_box(STEPS / 4)); // wakes the core up
    (0..5)
        .map(|_| {
            let t = std::time::Instant::now();
            std::hint::black_box(chain(std::hint::black_box(STEPS)));
            CYCLES_PER_STEP * STEPS as f64 / t.elapsed().as_secs_f64().max(1e-9) / 1e9
        })
        .reduce(f64::max)
}

/// Cycles one step of [`chain`] takes: a rotate by a constant and an add, each waiting
/// for the one before (nothing lets a compiler merge steps: rustc 1.95 emits one `rol`
/// and one `add` a step, unrolled).
const CYCLES_PER_STEP: f64 = 2.0;

#[inline(never)]
fn chain(steps: u64) -> u64 {
    let mut x = 0x2545_F491_4F6C_DD1D_u64;
    for _ in 0..steps {
        x = x.rotate_left(7).wrapping_add(0x9E37_79B9_7F4A_7C15);
    }
    x
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
        cpu_model: cpu_label(&cpu_model(), native_cpu(&engine.rustc).as_deref()),
        cores: cores() as u32,
        arch: std::env::consts::ARCH.into(),
        os: std::env::consts::OS.into(),
        rustc_version,
        worker_version: crate::update::version_text(),
        target_features: target_features(),
        engine_kind,
        engine_release,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_native_cpu_is_read_from_rustcs_listing() {
        let listing = "Available CPUs for this target:\n    alderlake               - Select the alderlake processor.\n    native                  - Select the CPU of the current host (currently znver4).\n    znver4                  - Select the znver4 processor.\n";
        assert_eq!(super::native_cpu_in(listing).as_deref(), Some("znver4"));
        assert_eq!(
            super::native_cpu_in("    native - Select the CPU of the current host.\n"),
            None
        );
        assert_eq!(super::native_cpu_in(""), None);
    }

    #[test]
    fn the_cpu_label_names_the_microarchitecture_once() {
        use super::cpu_label;
        assert_eq!(cpu_label("AMD EPYC", Some("znver4")), "AMD EPYC (znver4)");
        assert_eq!(cpu_label("AMD EPYC", None), "AMD EPYC");
        assert_eq!(
            cpu_label("generic znver4 box", Some("znver4")),
            "generic znver4 box"
        );
    }

    /// The probe runs its chain and lands in the range of real clocks (a loaded machine
    /// only slows a try down, and the fastest try counts).
    #[test]
    fn the_clock_probe_measures_a_plausible_clock() {
        let ghz = super::clock_ghz();
        if cfg!(target_arch = "x86_64") {
            let ghz = ghz.expect("a clock on this architecture");
            assert!((0.1..10.0).contains(&ghz), "{ghz} GHz");
        } else {
            assert_eq!(ghz, None);
        }
    }
}
