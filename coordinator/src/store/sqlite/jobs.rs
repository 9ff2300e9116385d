//! Jobs (`migrations/0001_init.sql`): creation, state and the running per-depth totals.

use e2fleet_proto::api::{JobId, JobState};
use rusqlite::{OptionalExtension, Row, params};

use super::codec::{counts_at, decode_budget, decode_counts, encode_budget, encode_counts};
use super::{SqliteTx, parsed};
use crate::store::tx::{Jobs, StoreResult};
use crate::store::{JobHead, JobRecord, JobSource, NewJob, Schedule};

/// Every column but the puzzle (tens of KiB, needed only to set a job up), in the order
/// [`from_row`] reads.
const COLUMNS: &str = "SELECT id, name, order_spec, depths, split_depth, budget, replicas, \
     spot_check, state, created_ms, finished_ms, enumeration_json, enumeration_solutions, split_json, \
     accepted_json, accepted_solutions, conservation_ok, priority, share, paused FROM jobs";

/// Reads a row of [`COLUMNS`] (by position: a name lookup per field costs more than the
/// query on the write path).
fn from_row(r: &Row<'_>) -> rusqlite::Result<JobRecord> {
    Ok(JobRecord {
        id: parsed(r, 0)?,
        name: r.get(1)?,
        order: r.get(2)?,
        depths: r.get::<_, i64>(3)? as usize,
        split_depth: r.get::<_, i64>(4)? as usize,
        budget: decode_budget(r.get(5)?),
        replicas: r.get::<_, i64>(6)? as u32,
        spot_check: r.get(7)?,
        state: parsed(r, 8)?,
        created_ms: r.get(9)?,
        finished_ms: r.get(10)?,
        enumeration: counts_at(r, 11)?,
        enumeration_solutions: r.get::<_, i64>(12)? as u64,
        split: counts_at(r, 13)?,
        accepted: counts_at(r, 14)?,
        accepted_solutions: r.get::<_, i64>(15)? as u64,
        conservation_ok: r.get(16)?,
        schedule: Schedule {
            priority: r.get(17)?,
            share: r.get(18)?,
            paused: r.get(19)?,
        },
    })
}

impl SqliteTx<'_> {
    /// Reads one column of counts, changes it and writes it back, moving the solutions
    /// total by `solutions` in the same statement (two statements per accepted unit: the
    /// report path runs this once per decided unit).
    fn update_counts(
        &mut self,
        id: JobId,
        column: &'static str,
        solutions: i64,
        change: impl FnOnce(&mut Vec<u64>),
    ) -> StoreResult<()> {
        let text: String = self
            .c
            .prepare_cached(&format!("SELECT {column} FROM jobs WHERE id = ?"))?
            .query_row([id.to_string()], |r| r.get(0))?;
        let mut counts = decode_counts(&text, column)?;
        change(&mut counts);
        self.c
            .prepare_cached(&format!(
                "UPDATE jobs SET {column} = ?, accepted_solutions = accepted_solutions + ? WHERE id = ?"
            ))?
            .execute(params![encode_counts(&counts), solutions, id.to_string()])?;
        Ok(())
    }
}

impl Jobs for SqliteTx<'_> {
    fn insert_job(&mut self, job: &NewJob) -> StoreResult<()> {
        let j = &job.record;
        self.c.prepare_cached(
            "INSERT INTO jobs (id, name, puzzle_json, order_spec, depths, split_depth, budget, replicas, spot_check, state, created_ms, enumeration_json, enumeration_solutions, split_json, accepted_json, priority, share, paused) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )?
        .execute(params![
            j.id.to_string(),
            j.name,
            job.puzzle_json,
            j.order,
            j.depths as i64,
            j.split_depth as i64,
            encode_budget(j.budget),
            j.replicas as i64,
            j.spot_check,
            j.state.as_str(),
            j.created_ms,
            encode_counts(&j.enumeration),
            j.enumeration_solutions as i64,
            encode_counts(&j.split),
            encode_counts(&j.accepted),
            j.schedule.priority,
            j.schedule.share,
            j.schedule.paused
        ])?;
        Ok(())
    }

    fn set_schedule(&mut self, id: JobId, schedule: &Schedule) -> StoreResult<bool> {
        Ok(self
            .c
            .prepare_cached("UPDATE jobs SET priority = ?, share = ?, paused = ? WHERE id = ?")?
            .execute(params![
                schedule.priority,
                schedule.share,
                schedule.paused,
                id.to_string()
            ])?
            == 1)
    }

    fn running_schedules(&mut self) -> StoreResult<Vec<(JobId, Schedule)>> {
        let mut q = self.c.prepare_cached(
            "SELECT id, priority, share, paused FROM jobs WHERE state = 'running' ORDER BY created_ms, id",
        )?;
        let rows = q.query_map([], |r| {
            Ok((
                parsed(r, 0)?,
                Schedule {
                    priority: r.get(1)?,
                    share: r.get(2)?,
                    paused: r.get(3)?,
                },
            ))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn job(&mut self, id: JobId) -> StoreResult<Option<JobRecord>> {
        Ok(self
            .c
            .prepare_cached(&format!("{COLUMNS} WHERE id = ?"))?
            .query_row([id.to_string()], from_row)
            .optional()?)
    }

    fn list_jobs(&mut self) -> StoreResult<Vec<JobRecord>> {
        let mut q = self
            .c
            .prepare_cached(&format!("{COLUMNS} ORDER BY created_ms DESC"))?;
        let rows = q.query_map([], from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn job_source(&mut self, id: JobId) -> StoreResult<Option<JobSource>> {
        Ok(self
            .c
            .prepare_cached("SELECT puzzle_json, order_spec, budget FROM jobs WHERE id = ?")?
            .query_row([id.to_string()], |r| {
                Ok(JobSource {
                    puzzle_json: r.get(0)?,
                    order: r.get(1)?,
                    budget: decode_budget(r.get(2)?),
                })
            })
            .optional()?)
    }

    fn job_head(&mut self, id: JobId) -> StoreResult<Option<JobHead>> {
        Ok(self
            .c
            .prepare_cached("SELECT id, state, replicas, spot_check FROM jobs WHERE id = ?")?
            .query_row([id.to_string()], |r| {
                Ok(JobHead {
                    id: parsed(r, 0)?,
                    state: parsed(r, 1)?,
                    replicas: r.get::<_, i64>(2)? as u32,
                    spot_check: r.get(3)?,
                })
            })
            .optional()?)
    }

    fn add_accepted(&mut self, id: JobId, nodes: &[u64], solutions: u64) -> StoreResult<()> {
        self.update_counts(id, "accepted_json", solutions as i64, |c| {
            e2fleet_engine::unit::add_counts(c, nodes)
        })
    }

    fn subtract_accepted(&mut self, id: JobId, nodes: &[u64], solutions: u64) -> StoreResult<()> {
        self.update_counts(id, "accepted_json", -(solutions as i64), |c| {
            for (a, n) in c.iter_mut().zip(nodes) {
                *a -= n;
            }
        })
    }

    fn add_split_nodes(&mut self, id: JobId, depth: usize, count: i64) -> StoreResult<()> {
        self.update_counts(id, "split_json", 0, |c| {
            c[depth] = c[depth].wrapping_add_signed(count);
        })
    }

    fn finish_job(
        &mut self,
        id: JobId,
        state: JobState,
        now_ms: i64,
        conservation_ok: Option<bool>,
    ) -> StoreResult<()> {
        self.c.prepare_cached("UPDATE jobs SET state = ?, finished_ms = ?, conservation_ok = ? WHERE id = ? AND state = 'running'")?
            .execute(params![state.as_str(), now_ms, conservation_ok, id.to_string()])?;
        Ok(())
    }

    fn reopen_job(&mut self, id: JobId) -> StoreResult<bool> {
        Ok(self
            .c
            .prepare_cached(
                "UPDATE jobs SET state = 'running', finished_ms = NULL, conservation_ok = NULL \
             WHERE id = ? AND state = 'complete'",
            )?
            .execute([id.to_string()])?
            == 1)
    }
}
