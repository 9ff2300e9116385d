//! The engine cache: a private folder of built engines, each sealed with a keyed checksum
//! and checked again before every launch.
//!
//! What it defends against (see `docs/security.md`): another local user replacing a
//! cached binary with a program of their own, which the worker would then run with its
//! rights. Three checks, all before anything in the folder is used:
//!
//! - the folder is created `0700`; an existing one must belong to this user and must not
//!   be writable by its group or by others (a shared `/tmp` folder is refused);
//! - every build is sealed with an HMAC-SHA256 of its file name and contents under a
//!   random key that lives in the folder (`cache.key`, `0600`): whoever can write the
//!   folder but not read the key cannot forge a seal, and a plain checksum beside the
//!   file (which anyone could recompute) is not trusted;
//! - the seal is checked when a build is found in the cache *and* each time an engine
//!   process is started from it, so a binary replaced after it was built is never run.
//!
//! The one user the cache cannot defend against is the worker's own user, who could as
//! well replace the worker.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::CompileError;

type HmacSha256 = Hmac<Sha256>;

/// File name of the cache's secret.
const KEY_FILE: &str = "cache.key";

/// The default cache folder when no other is given: `$XDG_CACHE_HOME/e2fleet/engines`,
/// else `~/.cache/e2fleet/engines`, else a per-user folder in the system temp folder.
pub fn default_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|x| !x.is_empty()) {
        return PathBuf::from(x).join("e2fleet").join("engines");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h)
            .join(".cache")
            .join("e2fleet")
            .join("engines");
    }
    std::env::temp_dir().join(format!("e2fleet-engines-{}", user_id()))
}

#[cfg(unix)]
fn user_id() -> u32 {
    rustix::process::getuid().as_raw()
}

#[cfg(not(unix))]
fn user_id() -> u32 {
    0
}

/// An opened, checked cache folder and its key.
#[derive(Clone)]
pub struct Cache {
    dir: PathBuf,
    key: [u8; 32],
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache").field("dir", &self.dir).finish()
    }
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> CompileError {
    CompileError::Io(format!("{what} {}: {e}", path.display()))
}

impl Cache {
    /// Opens (creating it `0700` if needed) the cache folder `dir`, refusing one this user
    /// does not own or that others can write, and reads (or makes) its key.
    pub fn open(dir: &Path) -> Result<Cache, CompileError> {
        if !dir.exists() {
            let mut builder = DirBuilder::new();
            builder.recursive(true);
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            builder
                .create(dir)
                .map_err(|e| io_error("cannot create", dir, e))?;
        }
        check_private(dir)?;
        let key = read_or_make_key(&dir.join(KEY_FILE))?;
        Ok(Cache {
            dir: dir.to_path_buf(),
            key,
        })
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of a cached file.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn seal_path(file: &Path) -> PathBuf {
        let mut name = file.file_name().unwrap_or_default().to_os_string();
        name.push(".seal");
        file.with_file_name(name)
    }

    fn mac_of(&self, file: &Path) -> std::io::Result<String> {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("any key length");
        mac.update(file.file_name().unwrap_or_default().as_encoded_bytes());
        mac.update(b"\0");
        let mut f = File::open(file)?;
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            mac.update(&buf[..n]);
        }
        Ok(hex::encode(mac.finalize().into_bytes()))
    }

    /// Seals `file` (a build about to be moved into place at `dest`): writes `dest`'s seal.
    /// The seal goes in first, so a reader that sees the file also sees its seal.
    pub fn seal(&self, file: &Path, dest: &Path) -> Result<(), CompileError> {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("any key length");
        mac.update(dest.file_name().unwrap_or_default().as_encoded_bytes());
        mac.update(b"\0");
        let bytes = fs::read(file).map_err(|e| io_error("cannot read", file, e))?;
        mac.update(&bytes);
        let sealed = hex::encode(mac.finalize().into_bytes());
        let tmp = file.with_extension("seal-tmp");
        fs::write(&tmp, sealed)
            .and_then(|_| fs::rename(&tmp, Self::seal_path(dest)))
            .map_err(|e| io_error("cannot write the seal of", dest, e))
    }

    /// `true` when `file` is exactly what this cache built under that name.
    pub fn is_sealed(&self, file: &Path) -> bool {
        match (fs::read_to_string(Self::seal_path(file)), self.mac_of(file)) {
            (Ok(expected), Ok(actual)) => {
                // compare without an early exit (the seal is a secret-keyed value)
                let (e, a) = (expected.trim().as_bytes(), actual.as_bytes());
                e.len() == a.len() && e.iter().zip(a).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
            }
            _ => false,
        }
    }

    /// Removes a cached file and its seal.
    pub fn remove(&self, file: &Path) {
        let _ = fs::remove_file(file);
        let _ = fs::remove_file(Self::seal_path(file));
    }
}

/// Refuses a folder this user does not own or that its group or others can write.
#[cfg(unix)]
fn check_private(dir: &Path) -> Result<(), CompileError> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::symlink_metadata(dir).map_err(|e| io_error("cannot read", dir, e))?;
    if !meta.is_dir() {
        return Err(CompileError::Io(format!(
            "{} is not a folder (a symbolic link is not accepted as the engine cache)",
            dir.display()
        )));
    }
    if meta.uid() != user_id() {
        return Err(CompileError::Io(format!(
            "the engine cache {} belongs to another user (uid {}); choose a folder of your own with --cache-dir",
            dir.display(),
            meta.uid()
        )));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(CompileError::Io(format!(
            "the engine cache {} can be written by other users (mode {:o}); run `chmod go-w {}` or choose another folder with --cache-dir",
            dir.display(),
            meta.mode() & 0o777,
            dir.display()
        )));
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_dir: &Path) -> Result<(), CompileError> {
    Ok(())
}

fn read_or_make_key(path: &Path) -> Result<[u8; 32], CompileError> {
    let read = |path: &Path| -> Result<[u8; 32], CompileError> {
        let mut key = [0u8; 32];
        let mut f = File::open(path).map_err(|e| io_error("cannot read", path, e))?;
        f.read_exact(&mut key)
            .map_err(|e| io_error("cannot read", path, e))?;
        Ok(key)
    };
    if path.exists() {
        return read(path);
    }
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| CompileError::Io(format!("no randomness: {e}")))?;
    // written whole under a unique name, then linked into place: a reader never sees half
    // a key, and of two processes making one at once the first link wins
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let tmp = path.with_extension(format!("tmp-{}-{nanos}", std::process::id()));
    let mut options = OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
        .open(&tmp)
        .and_then(|mut f| f.write_all(&key).and_then(|_| f.sync_all()))
        .map_err(|e| io_error("cannot write", &tmp, e))?;
    let linked = fs::hard_link(&tmp, path);
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(key),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read(path),
        Err(e) => Err(io_error("cannot create", path, e)),
    }
}
