//! Units: batch creation, the leasable queue, state changes.
//!
//! Row fields mirror the columns documented in `migrations/0001_init.sql`.
#![allow(missing_docs)]

use e2fleet_engine::Placement;
use sqlx::{FromRow, QueryBuilder, Sqlite, SqliteConnection};

use super::StoreError;

/// A stored unit.
#[derive(Debug, Clone, FromRow)]
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

/// A unit to create.
pub struct NewUnit {
    pub prefix_json: String,
    pub cursor_json: String,
    pub parent_id: Option<i64>,
    pub kind: &'static str,
    pub quorum: i64,
}

/// Inserts units in batches (one statement per 500 rows).
pub async fn insert_batch(
    c: &mut SqliteConnection,
    job_id: &str,
    units: &[NewUnit],
    now_ms: i64,
) -> Result<(), StoreError> {
    for chunk in units.chunks(500) {
        let mut q: QueryBuilder<Sqlite> = QueryBuilder::new(
            "INSERT INTO units (job_id, prefix_json, cursor_json, parent_id, kind, quorum, needed, state, created_ms) ",
        );
        q.push_values(chunk, |mut b, u| {
            b.push_bind(job_id)
                .push_bind(&u.prefix_json)
                .push_bind(&u.cursor_json)
                .push_bind(u.parent_id)
                .push_bind(u.kind)
                .push_bind(u.quorum)
                .push_bind(u.quorum)
                .push_bind("open")
                .push_bind(now_ms);
        });
        q.build().execute(&mut *c).await?;
    }
    Ok(())
}

/// One unit.
pub async fn get(c: &mut SqliteConnection, id: i64) -> Result<Option<UnitRow>, StoreError> {
    Ok(sqlx::query_as("SELECT * FROM units WHERE id = ?")
        .bind(id)
        .fetch_optional(c)
        .await?)
}

/// Leasable units of running jobs that `hostname` neither holds nor has a valid result
/// for (a replica must come from another host; a rejected run may be redone anywhere).
pub async fn leasable(
    c: &mut SqliteConnection,
    hostname: &str,
    limit: i64,
) -> Result<Vec<UnitRow>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT u.* FROM units u JOIN jobs j ON j.id = u.job_id \
         WHERE u.state = 'open' AND j.state = 'running' \
           AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.unit_id = u.id AND l.hostname = ?1 AND l.state = 'active') \
           AND NOT EXISTS (SELECT 1 FROM results r WHERE r.unit_id = u.id AND r.hostname = ?1 AND r.verdict != 'wrong') \
         ORDER BY u.id LIMIT ?2",
    )
    .bind(hostname)
    .bind(limit)
    .fetch_all(c)
    .await?)
}

/// An open continuation unit nobody holds, to split for idle workers.
pub async fn splittable(c: &mut SqliteConnection) -> Result<Option<UnitRow>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT u.* FROM units u JOIN jobs j ON j.id = u.job_id \
         WHERE u.state = 'open' AND j.state = 'running' AND u.cursor_json != '[]' \
           AND u.active_leases = 0 AND u.results = 0 AND u.needed = 1 \
         ORDER BY u.id LIMIT 1",
    )
    .fetch_optional(c)
    .await?)
}

/// Rewrites a unit's prefix and cursor (after a split).
pub async fn set_path(
    c: &mut SqliteConnection,
    id: i64,
    prefix_json: &str,
    cursor_json: &str,
) -> Result<(), StoreError> {
    sqlx::query("UPDATE units SET prefix_json = ?, cursor_json = ? WHERE id = ?")
        .bind(prefix_json)
        .bind(cursor_json)
        .bind(id)
        .execute(c)
        .await?;
    Ok(())
}

/// Updates the counters and recomputes the state of a unit that is not done:
/// `open` while more runs are needed than are out, `busy` otherwise.
pub async fn adjust(
    c: &mut SqliteConnection,
    id: i64,
    leases_delta: i64,
    results_delta: i64,
    needed: Option<i64>,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE units SET active_leases = active_leases + ?, results = results + ?, needed = COALESCE(?, needed), \
           state = CASE WHEN state IN ('done', 'cancelled') THEN state \
                        WHEN results + ? + active_leases + ? < COALESCE(?, needed) THEN 'open' ELSE 'busy' END \
         WHERE id = ?",
    )
    .bind(leases_delta)
    .bind(results_delta)
    .bind(needed)
    .bind(results_delta)
    .bind(leases_delta)
    .bind(needed)
    .bind(id)
    .execute(c)
    .await?;
    Ok(())
}

/// Marks a unit done with its accepted result.
pub async fn mark_done(
    c: &mut SqliteConnection,
    id: i64,
    result_id: i64,
) -> Result<(), StoreError> {
    sqlx::query("UPDATE units SET state = 'done', accepted_result_id = ? WHERE id = ?")
        .bind(result_id)
        .bind(id)
        .execute(c)
        .await?;
    Ok(())
}

/// Asks for one more run of a unit whose results disagree (also a done one: its
/// accepted result stays counted until a quorum decides otherwise).
pub async fn request_deciding_run(
    c: &mut SqliteConnection,
    id: i64,
    quorum: i64,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE units SET quorum = MAX(quorum, ?), needed = results + active_leases + 1, state = 'open' WHERE id = ?",
    )
    .bind(quorum)
    .bind(id)
    .execute(c)
    .await?;
    Ok(())
}

/// Units created from `parent` (continuations and split siblings).
pub async fn children(c: &mut SqliteConnection, parent: i64) -> Result<Vec<UnitRow>, StoreError> {
    Ok(sqlx::query_as("SELECT * FROM units WHERE parent_id = ?")
        .bind(parent)
        .fetch_all(c)
        .await?)
}

/// Cancels a unit (its outputs were revoked, or its job was cancelled).
pub async fn cancel(c: &mut SqliteConnection, id: i64) -> Result<(), StoreError> {
    sqlx::query("UPDATE units SET state = 'cancelled' WHERE id = ?")
        .bind(id)
        .execute(c)
        .await?;
    Ok(())
}

/// Cancels every unfinished unit of a job.
pub async fn cancel_job(c: &mut SqliteConnection, job_id: &str) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE units SET state = 'cancelled' WHERE job_id = ? AND state IN ('open', 'busy')",
    )
    .bind(job_id)
    .execute(c)
    .await?;
    Ok(())
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

/// 1 if the job has an unfinished unit, else 0.
pub async fn unfinished(c: &mut SqliteConnection, job_id: &str) -> Result<i64, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM units WHERE job_id = ? AND state IN ('open', 'busy'))",
    )
    .bind(job_id)
    .fetch_one(c)
    .await?)
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
