//! Building generated programs with the local rustc, and the binary cache.
//!
//! A binary is keyed by a SHA-256 of (generated source, `rustc -vV`, flags), so a new
//! compiler or new flags never reuse an old build. Builds write to a unique temporary file,
//! are sealed ([`super::cache`]) and renamed into place, so two processes building the
//! same key at once both end up with a complete binary. rustc runs as a child with a
//! timeout and a memory limit, and is killed if dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::CompileError;
use super::cache::Cache;

/// How to compile generated programs.
#[derive(Clone, Debug)]
pub struct BuildOptions {
    /// The rustc to run.
    pub rustc: PathBuf,
    /// Where binaries are cached (a private folder: see [`super::cache`]).
    pub cache_dir: PathBuf,
    /// `-C target-cpu=...`; `None` builds for the generic target (needed for valgrind).
    pub target_cpu: Option<String>,
    /// Extra rustc arguments.
    pub extra_flags: Vec<String>,
    /// rustc is killed after this long.
    pub timeout: Duration,
    /// Most memory (bytes of data) rustc may use; `None` for no limit.
    pub rustc_memory: Option<u64>,
    /// Most memory (bytes of data) an engine process may use; `None` for no limit.
    pub engine_memory: Option<u64>,
    /// An engine process that says nothing for this long (no progress, no result) is
    /// taken for hung and killed. Engines report progress many times a second.
    pub engine_silence: Duration,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions {
            rustc: PathBuf::from("rustc"),
            cache_dir: super::cache::default_dir(),
            target_cpu: Some("native".into()),
            extra_flags: Vec::new(),
            timeout: Duration::from_secs(120),
            rustc_memory: Some(4 << 30),
            engine_memory: Some(1 << 30),
            engine_silence: Duration::from_secs(60),
        }
    }
}

/// Whether engines are linked as position-dependent executables: Linux on x86-64, where
/// that is supported and the absolute addressing it allows saves instructions (macOS and
/// most aarch64 systems require position-independent executables).
const STATIC_RELOCATION: bool = cfg!(all(target_os = "linux", target_arch = "x86_64"));

impl BuildOptions {
    /// The flags passed to rustc, in order.
    pub fn flags(&self) -> Vec<String> {
        let mut flags: Vec<String> = [
            "--edition=2021",
            "-Copt-level=3",
            "-Ccodegen-units=1",
            "-Cpanic=abort",
            "-Cdebuginfo=0",
            "-Cstrip=symbols",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if let Some(cpu) = &self.target_cpu {
            flags.push(format!("-Ctarget-cpu={cpu}"));
        }
        if STATIC_RELOCATION {
            // a position-dependent executable: the generated code indexes its tables by
            // absolute address instead of loading each table's address first (the real
            // E2 with the slot walk 41.3 -> 37.5 instructions per node, bench-hard 42.0 ->
            // 38.1, the list walk 43.8 -> 40.5; speed unchanged within noise)
            flags.push("-Crelocation-model=static".into());
        }
        flags.extend(self.extra_flags.iter().cloned());
        flags
    }
}

/// Caps the data memory of a just-started child (Linux; elsewhere a no-op). Set from the
/// parent right after the spawn: the few instructions the child runs before are not a
/// way to allocate gigabytes.
pub(crate) fn limit_memory(child: &Child, bytes: Option<u64>) -> Result<(), CompileError> {
    #[cfg(target_os = "linux")]
    if let Some(bytes) = bytes {
        use rustix::process::{Pid, Resource, Rlimit, prlimit};
        let pid = Pid::from_child(child);
        let limit = Rlimit {
            current: Some(bytes),
            maximum: Some(bytes),
        };
        prlimit(Some(pid), Resource::Data, limit)
            .map_err(|e| CompileError::Io(format!("cannot limit a child's memory: {e}")))?;
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (child, bytes);
    Ok(())
}

/// Kills and reaps a child process when dropped.
pub(crate) struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `rustc -vV`, which names the exact compiler build.
pub fn rustc_version(rustc: &Path) -> Result<String, CompileError> {
    let out = Command::new(rustc)
        .arg("-vV")
        .output()
        .map_err(|e| CompileError::RustcMissing {
            rustc: rustc.display().to_string(),
            error: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(CompileError::RustcMissing {
            rustc: rustc.display().to_string(),
            error: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The cache key of a source built with these options.
pub fn cache_key(source: &str, rustc_version: &str, options: &BuildOptions) -> String {
    let mut h = Sha256::new();
    h.update(source.as_bytes());
    h.update(b"\0");
    h.update(rustc_version.as_bytes());
    for f in options.flags() {
        h.update(b"\0");
        h.update(f.as_bytes());
    }
    hex::encode(&h.finalize()[..16])
}

/// Compiles `source` to `dest` (atomically), returning how long rustc took.
pub fn compile(
    source: &str,
    cache: &Cache,
    dest: &Path,
    options: &BuildOptions,
    extra: &[String],
) -> Result<Duration, CompileError> {
    let dir = cache.dir();
    let unique = format!(
        "tmp-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    let src_path = dir.join(format!("{unique}.rs"));
    let tmp_bin = dir.join(&unique);
    std::fs::write(&src_path, source)
        .map_err(|e| CompileError::Io(format!("cannot write {}: {e}", src_path.display())))?;
    let started = Instant::now();
    let child = Command::new(&options.rustc)
        .args(options.flags())
        .args(extra)
        .arg("-o")
        .arg(&tmp_bin)
        .arg(&src_path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| CompileError::RustcMissing {
            rustc: options.rustc.display().to_string(),
            error: e.to_string(),
        })?;
    let mut guard = KillOnDrop(child);
    limit_memory(&guard.0, options.rustc_memory)?;
    // drained while rustc runs (a full pipe would stall it), the first 64 KiB kept
    let stderr = guard.0.stderr.take().map(|mut e| {
        std::thread::spawn(move || {
            use std::io::Read;
            let mut kept = Vec::new();
            let _ = (&mut e).take(64 << 10).read_to_end(&mut kept);
            let _ = std::io::copy(&mut e, &mut std::io::sink());
            String::from_utf8_lossy(&kept).into_owned()
        })
    });
    let status = loop {
        match guard.0.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > options.timeout => {
                let _ = std::fs::remove_file(&src_path);
                return Err(CompileError::Timeout(options.timeout));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(CompileError::Io(e.to_string())),
        }
    };
    let elapsed = started.elapsed();
    let stderr = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
    let _ = std::fs::remove_file(&src_path);
    if !status.success() {
        let _ = std::fs::remove_file(&tmp_bin);
        return Err(CompileError::RustcFailed {
            status: status.to_string(),
            stderr,
        });
    }
    cache.seal(&tmp_bin, dest)?;
    std::fs::rename(&tmp_bin, dest)
        .map_err(|e| CompileError::Io(format!("cannot move the build into the cache: {e}")))?;
    Ok(elapsed)
}
