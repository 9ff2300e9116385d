//! Keeping a long campaign's database small and flat: decided units older than the
//! detail window ([`FleetConfig::archive_after`]) are archived, a batch per write so the
//! writer never stalls long (see `store/sql/archive.rs` for what a row keeps).
//!
//! The pass walks done units in order of decision and remembers where it stopped; units
//! it passes over (a kept best board or solution, a lease still out, a result still
//! disputed) are looked at again when the walk starts over, every
//! [`RESCAN_EVERY_MS`]. What the detail window keeps whole is what the dashboard's
//! recent figures read: rates, per-minute history, per-result labels.

use std::sync::Mutex;

use super::{Fleet, FleetConfig, FleetError};

/// Units archived per write transaction (a few ms of the writer's time).
pub const ARCHIVE_BATCH: usize = 256;

/// Most batches per pass (the rest waits for the next tick).
const BATCHES_PER_PASS: usize = 64;

/// How often the walk starts again from the oldest decision.
pub const RESCAN_EVERY_MS: i64 = 60_000;

/// Where the archiver's walk stands: (when it started, (decision time, unit id) reached).
#[derive(Default)]
pub(crate) struct ArchiveWalk(Mutex<(i64, (i64, i64))>);

impl FleetConfig {
    /// The detail window in ms, when archiving is on.
    pub fn archive_after_ms(&self) -> Option<i64> {
        self.archive_after.map(|d| d.as_millis() as i64)
    }
}

impl Fleet {
    /// Archives what has been decided for longer than the detail window; how many units
    /// went. Nothing when archiving is off.
    pub async fn archive_decided(&self) -> Result<usize, FleetError> {
        let Some(after) = self.config.archive_after_ms() else {
            return Ok(0);
        };
        let now = self.now();
        let cutoff = now - after;
        let mut from = {
            let mut walk = self.archive_walk.0.lock().expect("archive walk");
            if now - walk.0 >= RESCAN_EVERY_MS || now < walk.0 {
                *walk = (now, (i64::MIN, i64::MIN));
            }
            walk.1
        };
        let mut archived = 0;
        for _ in 0..BATCHES_PER_PASS {
            let pass = self
                .store
                .write(move |tx| tx.archive_decided(cutoff, from, ARCHIVE_BATCH))
                .await?;
            archived += pass.archived;
            from = pass.last;
            self.archive_walk.0.lock().expect("archive walk").1 = from;
            if pass.scanned < ARCHIVE_BATCH {
                break;
            }
        }
        if archived > 0 {
            tracing::debug!(archived, "decided units archived");
        }
        Ok(archived)
    }
}
