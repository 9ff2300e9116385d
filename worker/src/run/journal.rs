//! The durable journal: every finished result is written to disk (and fsynced) before it
//! is sent, and removed only when the coordinator has acknowledged it. After a crash,
//! restart or reconnect, whatever is still in the journal is sent again; the coordinator
//! treats repeats as idempotent (`duplicate`).

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use e2fleet_engine::UnitResult;
use e2fleet_engine::engine::EngineKind;
use e2fleet_proto::api::{JobId, LeaseId, Report, UnitId};
use serde::{Deserialize, Serialize};

/// One result waiting for its acknowledgement (the file format is this struct as JSON:
/// ids as text, the unit id as a number).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Entry {
    /// The lease it answers.
    pub lease_id: LeaseId,
    /// The unit.
    pub unit_id: UnitId,
    /// The job.
    pub job_id: JobId,
    /// The exact result.
    pub result: UnitResult,
    /// Engine-thread seconds.
    pub engine_seconds: f64,
    /// Engine kind.
    pub engine_kind: EngineKind,
    /// Engine build id.
    pub engine_build: String,
}

impl Entry {
    /// The report this entry becomes.
    pub fn report(&self) -> Report {
        Report {
            lease_id: self.lease_id,
            unit_id: self.unit_id,
            result: self.result.clone(),
            engine_seconds: self.engine_seconds,
            engine_kind: self.engine_kind,
            engine_build: self.engine_build.clone(),
        }
    }
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

    fn path(&self, lease_id: LeaseId) -> PathBuf {
        // a lease id is a parsed UUID: always a safe file name
        self.dir.join(format!("{lease_id}.json"))
    }

    /// Writes an entry durably (`0600`): temp file, fsync, rename, fsync the directory.
    pub fn write(&self, entry: &Entry) -> Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.path(entry.lease_id);
        let tmp = path.with_extension("tmp");
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
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
    pub fn remove(&self, lease_id: LeaseId) -> Result<()> {
        match fs::remove_file(self.path(lease_id)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// Moves an entry the coordinator refused for good into `rejected/`.
    pub fn reject(&self, lease_id: LeaseId) -> Result<()> {
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
