//! Workers (`migrations/sqlite/0001_init.sql`, `0003_verification.sql`): identities, tokens,
//! liveness, errors and quarantine.

use e2fleet_engine::engine::EngineKind;
use e2fleet_proto::api::{AccountId, HostInfo, WorkerId};

use super::{ConnExt, Row, SqlTx, args};
use crate::store::tx::{StoreResult, Workers};
use crate::store::{Seen, WorkerRecord};

/// The columns [`from_row`] reads, in order (`w.` prefixed).
const COLUMNS: &str = "w.id, w.token_hash, w.hostname, w.cpu_model, w.cores, w.arch, w.os, \
     w.rustc_version, w.worker_version, w.target_features, w.engine_kind, w.engine_build, w.class_id, \
     w.registered_ms, w.last_seen_ms, w.per_core_rate, w.threads, w.units_done, w.errors, w.quarantined, \
     w.account_id, w.paused, w.network_wait, w.round_trip_ms";

/// What [`Workers::worker_seen`] sets; its parameters are [`seen_values`], then the
/// worker's id.
pub(super) const SEEN: &str = "last_seen_ms = ?, per_core_rate = COALESCE(?, per_core_rate), \
     threads = COALESCE(?, threads), engine_kind = COALESCE(?, engine_kind), \
     engine_build = COALESCE(?, engine_build), paused = COALESCE(?, paused), \
     network_wait = COALESCE(?, network_wait), round_trip_ms = COALESCE(?, round_trip_ms)";

/// The parameters of [`SEEN`] and the worker's id after them.
pub(super) fn seen_values(id: WorkerId, now_ms: i64, seen: &Seen<'_>) -> Vec<super::Value> {
    args![
        now_ms,
        seen.rate.map(|r| r.0),
        seen.rate.map(|r| r.1 as i64),
        seen.engine.map(|e| e.0.as_str()),
        seen.engine.map(|e| e.1),
        seen.paused,
        seen.link.map(|l| l.0),
        seen.link.map(|l| l.1),
        id.to_string()
    ]
    .to_vec()
}

/// Reads a row of [`COLUMNS`], then `leases_held` if `with_leases`.
fn from_row(r: &Row, with_leases: bool) -> StoreResult<WorkerRecord> {
    let engine_kind: EngineKind = r.parsed(10)?;
    Ok(WorkerRecord {
        id: r.parsed(0)?,
        account_id: r.parsed(20)?,
        token_hash: r.get(1)?,
        host: HostInfo {
            hostname: r.get(2)?,
            cpu_model: r.get(3)?,
            cores: r.get::<i64>(4)? as u32,
            arch: r.get(5)?,
            os: r.get(6)?,
            rustc_version: r.get(7)?,
            worker_version: r.get(8)?,
            target_features: r.get(9)?,
            engine_kind,
            // the release is part of the class; the worker row keeps the last build
            engine_release: String::new(),
        },
        engine_build: r.get(11)?,
        class_id: r.get(12)?,
        registered_ms: r.get(13)?,
        last_seen_ms: r.get(14)?,
        per_core_rate: r.get(15)?,
        threads: r.get::<i64>(16)? as u32,
        units_done: r.get::<i64>(17)? as u64,
        errors: r.get::<i64>(18)? as u64,
        quarantined: r.get(19)?,
        paused: r.get(21)?,
        network_wait: r.get(22)?,
        round_trip_ms: r.get(23)?,
        leases_held: if with_leases {
            r.get::<i64>(24)? as u64
        } else {
            0
        },
    })
}

impl Workers for SqlTx<'_> {
    fn upsert_worker(&mut self, w: &WorkerRecord) -> StoreResult<()> {
        let h = &w.host;
        self.c.execute("INSERT INTO workers (id, token_hash, hostname, cpu_model, cores, arch, os, rustc_version, worker_version, registered_ms, last_seen_ms, \
               engine_kind, engine_build, target_features, class_id, account_id) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
             ON CONFLICT(id) DO UPDATE SET token_hash = excluded.token_hash, hostname = excluded.hostname, cpu_model = excluded.cpu_model, \
               cores = excluded.cores, arch = excluded.arch, os = excluded.os, rustc_version = excluded.rustc_version, \
               worker_version = excluded.worker_version, last_seen_ms = excluded.last_seen_ms, engine_kind = excluded.engine_kind, \
               engine_build = excluded.engine_build, target_features = excluded.target_features, class_id = excluded.class_id, \
               paused = ''", args![
            w.id.to_string(),
            w.token_hash,
            h.hostname,
            h.cpu_model,
            h.cores as i64,
            h.arch,
            h.os,
            h.rustc_version,
            h.worker_version,
            w.registered_ms,
            w.last_seen_ms,
            h.engine_kind.as_str(),
            w.engine_build,
            h.target_features,
            w.class_id,
            w.account_id.as_str()
        ])?;
        Ok(())
    }

    fn worker(&mut self, id: WorkerId) -> StoreResult<Option<WorkerRecord>> {
        self.c.map_row(
            &format!("SELECT {COLUMNS} FROM workers w WHERE w.id = ?"),
            args![id.to_string()],
            |r| from_row(r, false),
        )
    }

    fn worker_by_token_hash(&mut self, hash: &str) -> StoreResult<Option<WorkerRecord>> {
        self.c.map_row(
            &format!("SELECT {COLUMNS} FROM workers w WHERE w.token_hash = ?"),
            args![hash],
            |r| from_row(r, false),
        )
    }

    fn list_workers(&mut self) -> StoreResult<Vec<WorkerRecord>> {
        let rows = self.c.map(&format!(
            "SELECT {COLUMNS}, (SELECT COUNT(*) FROM leases l WHERE l.worker_id = w.id AND l.state = 'active') \
             FROM workers w ORDER BY w.hostname, w.id"
        ), &[], |r| from_row(r, true))?;
        Ok(rows)
    }

    fn identities_of_account_since(
        &mut self,
        account: &AccountId,
        since_ms: i64,
    ) -> StoreResult<u64> {
        let n: i64 = self.c.one(
            "SELECT COUNT(*) FROM workers WHERE account_id = ? AND last_seen_ms >= ?",
            args![account.as_str(), since_ms],
        )?;
        Ok(n as u64)
    }

    fn worker_seen(&mut self, id: WorkerId, now_ms: i64, seen: &Seen<'_>) -> StoreResult<()> {
        let sql = format!("UPDATE workers SET {SEEN} WHERE id = ?");
        self.c
            .execute_deferred(&sql, &seen_values(id, now_ms, seen))
    }

    fn worker_unit_done(&mut self, id: WorkerId) -> StoreResult<()> {
        self.c.execute_deferred(
            "UPDATE workers SET units_done = units_done + 1 WHERE id = ?",
            args![id.to_string()],
        )?;
        Ok(())
    }

    fn worker_error(&mut self, id: WorkerId, threshold: u64) -> StoreResult<bool> {
        // the identity, not its host label: another identity naming the same host is
        // another identity
        let quarantined: Option<bool> = self.c.map_row(
            "UPDATE workers SET errors = errors + 1, quarantined = CASE WHEN quarantined = 1 OR errors + 1 >= ? THEN 1 ELSE 0 END \
                 WHERE id = ? RETURNING quarantined",
            args![threshold as i64, id.to_string()],
            |r| r.get(0),
        )?;
        Ok(quarantined.unwrap_or(false))
    }

    fn release_worker(&mut self, id: WorkerId) -> StoreResult<bool> {
        Ok(self.c.execute(
            "UPDATE workers SET quarantined = 0, errors = 0 WHERE id = ? AND quarantined = 1",
            args![id.to_string()],
        )? == 1)
    }

    fn release_host(&mut self, hostname: &str) -> StoreResult<u64> {
        Ok(self.c.execute(
            "UPDATE workers SET quarantined = 0, errors = 0 WHERE hostname = ? AND quarantined = 1",
            args![hostname],
        )? as u64)
    }
}
