//! Units: batch creation, the leasable queue, state changes.
//!
//! Row fields mirror the columns documented in `migrations/0001_init.sql`. Everything
//! but [`counts_by_state`] is on the write path (synchronous, see [`super::writer`]).
#![allow(missing_docs)]

use e2fleet_engine::Placement;
use rusqlite::{Connection, OptionalExtension, Row, params};
use sqlx::SqliteConnection;

use super::StoreError;

/// A stored unit.
#[derive(Debug, Clone)]
pub struct UnitRow {
    pub id: i64,
    pub job_id: String,
    pub prefix_json: String,
    pub cursor_json: String,
    pub parent_id: Option<i64>,
    pub kind: String,
    pub quorum: i64,
    pub needed: i64,
    pub state: String,
    pub active_leases: i64,
    pub results: i64,
    pub accepted_result_id: Option<i64>,
    pub created_ms: i64,
}

/// The columns [`UnitRow::from_row`] reads, in order (`u.` for queries that alias units).
const COLUMNS: &str = "id, job_id, prefix_json, cursor_json, parent_id, kind, quorum, needed, state, \
     active_leases, results, accepted_result_id, created_ms";
const U_COLUMNS: &str = "u.id, u.job_id, u.prefix_json, u.cursor_json, u.parent_id, u.kind, u.quorum, \
     u.needed, u.state, u.active_leases, u.results, u.accepted_result_id, u.created_ms";

impl UnitRow {
    /// Reads a row of [`COLUMNS`] (by position: a name lookup per field costs more than
    /// the query on the write path).
    fn from_row(r: &Row<'_>) -> rusqlite::Result<UnitRow> {
        Ok(UnitRow {
            id: r.get(0)?,
            job_id: r.get(1)?,
            prefix_json: r.get(2)?,
            cursor_json: r.get(3)?,
            parent_id: r.get(4)?,
            kind: r.get(5)?,
            quorum: r.get(6)?,
            needed: r.get(7)?,
            state: r.get(8)?,
            active_leases: r.get(9)?,
            results: r.get(10)?,
            accepted_result_id: r.get(11)?,
            created_ms: r.get(12)?,
        })
    }
}

/// A unit to create.
pub struct NewUnit {
    pub prefix_json: String,
    pub cursor_json: String,
    pub parent_id: Option<i64>,
    pub kind: &'static str,
    pub quorum: i64,
}

/// Inserts units (one prepared statement, executed per row: on the writer thread that is
/// cheaper than building multi-row statements).
pub fn insert_batch(
    c: &Connection,
    job_id: &str,
    units: &[NewUnit],
    now_ms: i64,
) -> Result<(), StoreError> {
    let mut insert = c.prepare_cached(
        "INSERT INTO units (job_id, prefix_json, cursor_json, parent_id, kind, quorum, needed, state, created_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, 'open', ?7)",
    )?;
    for u in units {
        insert.execute(params![
            job_id,
            u.prefix_json,
            u.cursor_json,
            u.parent_id,
            u.kind,
            u.quorum,
            now_ms
        ])?;
    }
    Ok(())
}

/// One unit.
pub fn get(c: &Connection, id: i64) -> Result<Option<UnitRow>, StoreError> {
    Ok(
        c.prepare_cached(&format!("SELECT {COLUMNS} FROM units WHERE id = ?"))?
            .query_row([id], UnitRow::from_row)
            .optional()?,
    )
}

/// Leasable units of running jobs that `hostname` neither holds nor has a valid result
/// for (a replica must come from another host; a rejected run may be redone anywhere).
pub fn leasable(c: &Connection, hostname: &str, limit: i64) -> Result<Vec<UnitRow>, StoreError> {
    let mut q = c.prepare_cached(&format!(
        "SELECT {U_COLUMNS} FROM units u JOIN jobs j ON j.id = u.job_id \
         WHERE u.state = 'open' AND j.state = 'running' \
           AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.unit_id = u.id AND l.hostname = ?1 AND l.state = 'active') \
           AND NOT EXISTS (SELECT 1 FROM results r WHERE r.unit_id = u.id AND r.hostname = ?1 AND r.verdict != 'wrong') \
         ORDER BY u.id LIMIT ?2"
    ))?;
    let rows = q.query_map(params![hostname, limit], UnitRow::from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// An open continuation unit nobody holds, to split for idle workers.
pub fn splittable(c: &Connection) -> Result<Option<UnitRow>, StoreError> {
    Ok(c.prepare_cached(&format!(
        "SELECT {U_COLUMNS} FROM units u JOIN jobs j ON j.id = u.job_id \
         WHERE u.state = 'open' AND j.state = 'running' AND u.cursor_json != '[]' \
           AND u.active_leases = 0 AND u.results = 0 AND u.needed = 1 \
         ORDER BY u.id LIMIT 1"
    ))?
    .query_row([], UnitRow::from_row)
    .optional()?)
}

/// Rewrites a unit's prefix and cursor (after a split).
pub fn set_path(
    c: &Connection,
    id: i64,
    prefix_json: &str,
    cursor_json: &str,
) -> Result<(), StoreError> {
    c.prepare_cached("UPDATE units SET prefix_json = ?, cursor_json = ? WHERE id = ?")?
        .execute(params![prefix_json, cursor_json, id])?;
    Ok(())
}

/// Updates the counters and recomputes the state of a unit that is not done:
/// `open` while more runs are needed than are out, `busy` otherwise.
pub fn adjust(
    c: &Connection,
    id: i64,
    leases_delta: i64,
    results_delta: i64,
    needed: Option<i64>,
) -> Result<(), StoreError> {
    c.prepare_cached(
        "UPDATE units SET active_leases = active_leases + ?1, results = results + ?2, needed = COALESCE(?3, needed), \
           state = CASE WHEN state IN ('done', 'cancelled') THEN state \
                        WHEN results + ?2 + active_leases + ?1 < COALESCE(?3, needed) THEN 'open' ELSE 'busy' END \
         WHERE id = ?4",
    )?
    .execute(params![leases_delta, results_delta, needed, id])?;
    Ok(())
}

/// Marks a unit done with its accepted result.
pub fn mark_done(c: &Connection, id: i64, result_id: i64) -> Result<(), StoreError> {
    c.prepare_cached("UPDATE units SET state = 'done', accepted_result_id = ? WHERE id = ?")?
        .execute(params![result_id, id])?;
    Ok(())
}

/// Asks for one more run of a unit whose results disagree (also a done one: its
/// accepted result stays counted until a quorum decides otherwise).
pub fn request_deciding_run(c: &Connection, id: i64, quorum: i64) -> Result<(), StoreError> {
    c.prepare_cached(
        "UPDATE units SET quorum = MAX(quorum, ?), needed = results + active_leases + 1, state = 'open' WHERE id = ?",
    )?
    .execute(params![quorum, id])?;
    Ok(())
}

/// Units created from `parent` (continuations and split siblings).
pub fn children(c: &Connection, parent: i64) -> Result<Vec<UnitRow>, StoreError> {
    let mut q = c.prepare_cached(&format!("SELECT {COLUMNS} FROM units WHERE parent_id = ?"))?;
    let rows = q.query_map([parent], UnitRow::from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Cancels a unit (its outputs were revoked, or its job was cancelled).
pub fn cancel(c: &Connection, id: i64) -> Result<(), StoreError> {
    c.prepare_cached("UPDATE units SET state = 'cancelled' WHERE id = ?")?
        .execute([id])?;
    Ok(())
}

/// Cancels every unfinished unit of a job.
pub fn cancel_job(c: &Connection, job_id: &str) -> Result<(), StoreError> {
    c.prepare_cached(
        "UPDATE units SET state = 'cancelled' WHERE job_id = ? AND state IN ('open', 'busy')",
    )?
    .execute([job_id])?;
    Ok(())
}

/// Whether the job has an unfinished unit.
pub fn unfinished(c: &Connection, job_id: &str) -> Result<bool, StoreError> {
    Ok(c.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM units WHERE job_id = ? AND state IN ('open', 'busy'))",
    )?
    .query_row([job_id], |r| r.get(0))?)
}

/// Units of a job per state.
pub async fn counts_by_state(
    c: &mut SqliteConnection,
    job_id: &str,
) -> Result<Vec<(String, i64)>, StoreError> {
    Ok(
        sqlx::query_as("SELECT state, COUNT(*) FROM units WHERE job_id = ? GROUP BY state")
            .bind(job_id)
            .fetch_all(c)
            .await?,
    )
}

/// How units store a path (prefix or cursor): a JSON array with one integer per
/// placement, `pos << 18 | piece << 2 | rot` — about 9 bytes per placement instead of ~30
/// for `{"pos":..,"piece":..,"rot":..}`, which matters for jobs of millions of deep
/// prefixes. An empty path is `[]`. Rows written in the object form still decode.
pub fn encode_path(path: &[Placement]) -> String {
    let mut out = String::with_capacity(2 + path.len() * 10);
    out.push('[');
    for (i, p) in path.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let code = (u64::from(p.pos) << 18) | (u64::from(p.piece) << 2) | u64::from(p.rot & 3);
        out.push_str(&code.to_string());
    }
    out.push(']');
    out
}

/// Decodes [`encode_path`] (or the older JSON object form).
pub fn decode_path(text: &str, what: &str) -> Result<Vec<Placement>, StoreError> {
    if let Ok(codes) = serde_json::from_str::<Vec<u64>>(text) {
        return codes
            .into_iter()
            .map(|c| {
                let (pos, piece) = (c >> 18, (c >> 2) & 0xffff);
                if pos > u64::from(u16::MAX) {
                    return Err(StoreError::Corrupt(format!("{what}: placement code {c}")));
                }
                Ok(Placement {
                    pos: pos as u16,
                    piece: piece as u16,
                    rot: (c & 3) as u8,
                })
            })
            .collect();
    }
    super::parse_json(text, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_round_trip_and_old_rows_decode() {
        let path = vec![
            Placement::new(0, 0, 0),
            Placement::new(255, 1023, 3),
            Placement::new(65535, 65535, 2),
        ];
        let text = encode_path(&path);
        assert_eq!(decode_path(&text, "p").unwrap(), path);
        assert_eq!(encode_path(&[]), "[]");
        assert!(decode_path("[]", "p").unwrap().is_empty());
        let old = serde_json::to_string(&path).unwrap();
        assert_eq!(decode_path(&old, "p").unwrap(), path);
        assert!(text.len() * 2 < old.len(), "{text} vs {old}");
        assert!(decode_path("[1", "p").is_err());
    }
}
