//! Writing the worker's own files: whole or not at all, and only its user can read them.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Writes `path` so that only its owner can read it (it may hold a secret), whole or not
/// at all: `NAME.tmp` beside it is created `0600`, written and synced, then renamed over
/// it (a crash leaves the old file or the new one, never half of one).
pub fn save_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    let tmp = path.with_file_name(name);
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_private_file_is_replaced_whole_and_only_its_owner_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.minisig");
        std::fs::write(dir.path().join("a"), b"beside it").unwrap();
        super::save_private(&path, b"one").unwrap();
        super::save_private(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // a file whose name differs only in its extension is left alone
        assert_eq!(std::fs::read(dir.path().join("a")).unwrap(), b"beside it");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }
}
