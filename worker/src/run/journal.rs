//! The durable journal: every finished result is written to disk (and fsynced) before it
//! is sent, and removed only when the coordinator has acknowledged it. After a crash,
//! restart or reconnect, whatever is still in the journal is sent again; the coordinator
//! treats repeats as idempotent (`duplicate`).

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use e2fleet_engine::UnitResult;
use serde::{Deserialize, Serialize};

/// One result waiting for its acknowledgement.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Entry {
    /// The lease it answers.
    pub lease_id: String,
    /// The unit.
    pub unit_id: i64,
    /// The job.
    pub job_id: String,
    /// The exact result.
    pub result: UnitResult,
    /// Engine-thread seconds.
    pub engine_seconds: f64,
    /// Engine kind.
    pub engine_kind: String,
    /// Engine build id.
    pub engine_build: String,
}

/// The journal directory.
pub struct Journal {
    dir: PathBuf,
}

impl Journal {
    /// Opens (creating) the journal under `data_dir`.
    pub fn open(data_dir: &Path) -> Result<Journal> {
        let dir = data_dir.join("journal");
        fs::create_dir_all(dir.join("rejected"))
            .with_context(|| format!("cannot create the journal in {}", dir.display()))?;
        Ok(Journal { dir })
    }

    fn path(&self, lease_id: &str) -> PathBuf {
        // lease ids are UUIDs from the coordinator; keep file names safe whatever they are
        let safe: String = lease_id
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        self.dir.join(format!("{safe}.json"))
    }

    /// Writes an entry durably: temp file, fsync, rename, fsync the directory.
    pub fn write(&self, entry: &Entry) -> Result<()> {
        let path = self.path(&entry.lease_id);
        let tmp = path.with_extension("tmp");
        let mut f =
            File::create(&tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
        f.write_all(serde_json::to_string(entry)?.as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, &path)?;
        File::open(&self.dir)?.sync_all()?;
        Ok(())
    }

    /// Every entry still waiting, oldest file name first.
    pub fn pending(&self) -> Result<Vec<Entry>> {
        let mut out = Vec::new();
        let mut names: Vec<PathBuf> = fs::read_dir(&self.dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        names.sort();
        for p in names {
            match fs::read_to_string(&p)
                .ok()
                .and_then(|t| serde_json::from_str(&t).ok())
            {
                Some(entry) => out.push(entry),
                None => {
                    // a torn or foreign file: keep it for inspection, out of the way
                    let _ = fs::rename(
                        &p,
                        self.dir
                            .join("rejected")
                            .join(p.file_name().unwrap_or_default()),
                    );
                }
            }
        }
        Ok(out)
    }

    /// Removes an acknowledged entry.
    pub fn remove(&self, lease_id: &str) -> Result<()> {
        match fs::remove_file(self.path(lease_id)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// Moves an entry the coordinator refused for good into `rejected/`.
    pub fn reject(&self, lease_id: &str) -> Result<()> {
        let p = self.path(lease_id);
        let _ = fs::rename(
            &p,
            self.dir
                .join("rejected")
                .join(p.file_name().unwrap_or_default()),
        );
        Ok(())
    }
}
