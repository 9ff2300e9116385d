//! Building generated programs with the local rustc, and the binary cache.
//!
//! A binary is keyed by a SHA-256 of (generated source, `rustc -vV`, flags), so a new
//! compiler or new flags never reuse an old build. Builds write to a unique temporary file
//! and are renamed into place, so two processes building the same key at once both end up
//! with a complete binary. rustc runs as a child with a timeout and is killed if dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::CompileError;

/// How to compile generated programs.
#[derive(Clone, Debug)]
pub struct BuildOptions {
    /// The rustc to run.
    pub rustc: PathBuf,
    /// Where binaries are cached.
    pub cache_dir: PathBuf,
    /// `-C target-cpu=...`; `None` builds for the generic target (needed for valgrind).
    pub target_cpu: Option<String>,
    /// Extra rustc arguments.
    pub extra_flags: Vec<String>,
    /// rustc is killed after this long.
    pub timeout: Duration,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions {
            rustc: PathBuf::from("rustc"),
            cache_dir: std::env::temp_dir().join("e2fleet-engine-cache"),
            target_cpu: Some("native".into()),
            extra_flags: Vec::new(),
            timeout: Duration::from_secs(120),
        }
    }
}

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
        flags.extend(self.extra_flags.iter().cloned());
        flags
    }
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
    h.finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Compiles `source` to `dest` (atomically), returning how long rustc took.
pub fn compile(
    source: &str,
    dest: &Path,
    options: &BuildOptions,
    extra: &[String],
) -> Result<Duration, CompileError> {
    let dir = dest.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)
        .map_err(|e| CompileError::Io(format!("cannot create {}: {e}", dir.display())))?;
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
    let mut stderr = String::new();
    if let Some(mut e) = guard.0.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut stderr);
    }
    let _ = std::fs::remove_file(&src_path);
    if !status.success() {
        let _ = std::fs::remove_file(&tmp_bin);
        return Err(CompileError::RustcFailed {
            status: status.to_string(),
            stderr,
        });
    }
    // the checksum goes in first: a reader that sees the binary also sees its checksum
    let sum = file_sha256(&tmp_bin)
        .map_err(|e| CompileError::Io(format!("cannot read the build: {e}")))?;
    let sum_tmp = dir.join(format!("{unique}.sha256"));
    std::fs::write(&sum_tmp, &sum)
        .and_then(|_| std::fs::rename(&sum_tmp, checksum_path(dest)))
        .map_err(|e| CompileError::Io(format!("cannot write the checksum: {e}")))?;
    std::fs::rename(&tmp_bin, dest)
        .map_err(|e| CompileError::Io(format!("cannot move the build into the cache: {e}")))?;
    Ok(elapsed)
}

fn checksum_path(binary: &Path) -> PathBuf {
    let mut name = binary.file_name().unwrap_or_default().to_os_string();
    name.push(".sha256");
    binary.with_file_name(name)
}

fn file_sha256(path: &Path) -> std::io::Result<String> {
    let bytes = std::fs::read(path)?;
    Ok(Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// `true` when the cached binary still has the checksum written when it was built (a
/// truncated or overwritten binary may well still start, so a greeting is not enough).
pub fn checksum_ok(binary: &Path) -> bool {
    match (
        std::fs::read_to_string(checksum_path(binary)),
        file_sha256(binary),
    ) {
        (Ok(expected), Ok(actual)) => expected.trim() == actual,
        _ => false,
    }
}
