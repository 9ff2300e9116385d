//! Jobs (`migrations/sqlite/0001_init.sql`): creation, state and the running per-depth totals.

use e2fleet_proto::api::{JobId, JobState};

use super::codec::{counts_at, decode_budget, decode_counts, encode_budget, encode_counts};
use super::{ConnExt, Row, SqlTx, args};
use crate::store::tx::{Jobs, StoreResult};
use crate::store::{JobHead, JobProbe, JobRecord, JobSource, NewJob, Schedule};

/// Every column but the puzzle (tens of KiB, needed only to set a job up), in the order
/// [`from_row`] reads.
const COLUMNS: &str = "SELECT id, name, order_spec, depths, split_depth, budget, replicas, \
     spot_check, state, created_ms, finished_ms, enumeration_json, enumeration_solutions, split_json, \
     accepted_json, accepted_solutions, conservation_ok, priority, share, paused, study_id, \
     probe_particles FROM jobs";

/// Reads a row of [`COLUMNS`] (by position: a name lookup per field costs more than the
/// query on the write path).
fn from_row(r: &Row) -> StoreResult<JobRecord> {
    Ok(JobRecord {
        id: r.parsed(0)?,
        name: r.get(1)?,
        order: r.get(2)?,
        depths: r.get::<i64>(3)? as usize,
        split_depth: r.get::<i64>(4)? as usize,
        budget: decode_budget(r.get(5)?),
        replicas: r.get::<i64>(6)? as u32,
        spot_check: r.get(7)?,
        state: r.parsed(8)?,
        created_ms: r.get(9)?,
        finished_ms: r.get(10)?,
        enumeration: counts_at(r, 11)?,
        enumeration_solutions: r.get::<i64>(12)? as u64,
        split: counts_at(r, 13)?,
        accepted: counts_at(r, 14)?,
        accepted_solutions: r.get::<i64>(15)? as u64,
        conservation_ok: r.get(16)?,
        schedule: Schedule {
            priority: r.get(17)?,
            share: r.get(18)?,
            paused: r.get(19)?,
        },
        probe: match (r.get::<Option<String>>(20)?, r.get::<Option<i64>>(21)?) {
            (Some(study), Some(particles)) => Some(JobProbe {
                study: study.parse().map_err(|e| {
                    crate::store::StoreError::Corrupt(format!("jobs.study_id: {e}"))
                })?,
                particles: particles as u32,
            }),
            _ => None,
        },
    })
}

impl SqlTx<'_> {
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
        let known = match &self.accepted {
            Some((job, text)) if column == "accepted_json" && *job == id => Some(text.clone()),
            _ => None,
        };
        let text: String = match known {
            Some(text) => text,
            None => self.c.one(
                &format!("SELECT {column} FROM jobs WHERE id = ?"),
                args![id.to_string()],
            )?,
        };
        let mut counts = decode_counts(&text, column)?;
        change(&mut counts);
        let text = encode_counts(&counts);
        self.c.execute_deferred(
            &format!(
                "UPDATE jobs SET {column} = ?, accepted_solutions = accepted_solutions + ? WHERE id = ?"
            ),
            args![text.clone(), solutions, id.to_string()],
        )?;
        if column == "accepted_json" {
            self.accepted = Some((id, text));
        }
        Ok(())
    }
}

impl Jobs for SqlTx<'_> {
    fn insert_job(&mut self, job: &NewJob) -> StoreResult<()> {
        let j = &job.record;
        self.c.execute("INSERT INTO jobs (id, name, puzzle_json, order_spec, depths, split_depth, budget, replicas, spot_check, state, created_ms, enumeration_json, enumeration_solutions, split_json, accepted_json, priority, share, paused, study_id, probe_particles) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", args![
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
            j.schedule.paused,
            j.probe.map(|p| p.study.to_string()),
            j.probe.map(|p| i64::from(p.particles))
        ])?;
        Ok(())
    }

    fn set_schedule(&mut self, id: JobId, schedule: &Schedule) -> StoreResult<bool> {
        Ok(self.c.execute(
            "UPDATE jobs SET priority = ?, share = ?, paused = ? WHERE id = ?",
            args![
                schedule.priority,
                schedule.share,
                schedule.paused,
                id.to_string()
            ],
        )? == 1)
    }

    fn running_schedules(&mut self) -> StoreResult<Vec<(JobId, Schedule)>> {
        let rows = self.c.map("SELECT id, priority, share, paused FROM jobs WHERE state = 'running' ORDER BY created_ms, id", &[], |r| {
            Ok((
                r.parsed(0)?,
                Schedule {
                    priority: r.get(1)?,
                    share: r.get(2)?,
                    paused: r.get(3)?,
                },
            ))
        })?;
        Ok(rows)
    }

    fn job(&mut self, id: JobId) -> StoreResult<Option<JobRecord>> {
        self.c.map_row(
            &format!("{COLUMNS} WHERE id = ?"),
            args![id.to_string()],
            from_row,
        )
    }

    fn list_jobs(&mut self) -> StoreResult<Vec<JobRecord>> {
        let rows = self.c.map(
            &format!("{COLUMNS} ORDER BY created_ms DESC"),
            &[],
            from_row,
        )?;
        Ok(rows)
    }

    fn job_source(&mut self, id: JobId) -> StoreResult<Option<JobSource>> {
        self.c.map_row(
            "SELECT puzzle_json, order_spec, budget, probe_particles FROM jobs WHERE id = ?",
            args![id.to_string()],
            |r| {
                Ok(JobSource {
                    puzzle_json: r.get(0)?,
                    order: r.get(1)?,
                    budget: decode_budget(r.get(2)?),
                    probe_particles: r.get::<Option<i64>>(3)?.map(|p| p as u32),
                })
            },
        )
    }

    fn job_head(&mut self, id: JobId) -> StoreResult<Option<JobHead>> {
        self.c.map_row(
            "SELECT id, state, replicas, spot_check FROM jobs WHERE id = ?",
            args![id.to_string()],
            |r| {
                Ok(JobHead {
                    id: r.parsed(0)?,
                    state: r.parsed(1)?,
                    replicas: r.get::<i64>(2)? as u32,
                    spot_check: r.get(3)?,
                })
            },
        )
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
        self.c.execute("UPDATE jobs SET state = ?, finished_ms = ?, conservation_ok = ? WHERE id = ? AND state = 'running'", args![state.as_str(), now_ms, conservation_ok, id.to_string()])?;
        Ok(())
    }

    fn reopen_job(&mut self, id: JobId) -> StoreResult<bool> {
        Ok(self.c.execute(
            "UPDATE jobs SET state = 'running', finished_ms = NULL, conservation_ok = NULL \
             WHERE id = ? AND state = 'complete'",
            args![id.to_string()],
        )? == 1)
    }
}
