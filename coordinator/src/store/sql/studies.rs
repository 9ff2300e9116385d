//! Order studies (`migrations/sqlite/0021_studies.sql`): the study rows, and the accepted
//! probes of a study's jobs with their strata.

use e2fleet_proto::api::{JobId, StudyId};

use super::codec::{decode_sparse_counts, path_at};
use super::{ConnExt, Row, SqlTx, args};
use crate::store::tx::{StoreResult, Studies};
use crate::store::{AcceptedProbe, JobRecord, StudyRecord};

const COLUMNS: &str =
    "SELECT id, name, puzzle_json, particles, rounds, state, created_ms, finished_ms FROM studies";

fn from_row(r: &Row) -> StoreResult<StudyRecord> {
    Ok(StudyRecord {
        id: r.parsed(0)?,
        name: r.get(1)?,
        puzzle_json: r.get(2)?,
        particles: r.get::<i64>(3)? as u32,
        rounds: r.get::<i64>(4)? as u32,
        state: r.get(5)?,
        created_ms: r.get(6)?,
        finished_ms: r.get(7)?,
    })
}

impl Studies for SqlTx<'_> {
    fn insert_study(&mut self, s: &StudyRecord) -> StoreResult<()> {
        self.c.execute(
            "INSERT INTO studies (id, name, puzzle_json, particles, rounds, state, created_ms) \
             VALUES (?, ?, ?, ?, ?, ?, ?)",
            args![
                s.id.to_string(),
                s.name,
                s.puzzle_json,
                i64::from(s.particles),
                i64::from(s.rounds),
                s.state,
                s.created_ms
            ],
        )?;
        Ok(())
    }

    fn study(&mut self, id: StudyId) -> StoreResult<Option<StudyRecord>> {
        self.c.map_row(
            &format!("{COLUMNS} WHERE id = ?"),
            args![id.to_string()],
            from_row,
        )
    }

    fn list_studies(&mut self) -> StoreResult<Vec<StudyRecord>> {
        self.c.map(
            &format!("{COLUMNS} ORDER BY created_ms DESC, id"),
            &[],
            from_row,
        )
    }

    fn running_studies(&mut self) -> StoreResult<Vec<StudyId>> {
        self.c.map(
            "SELECT id FROM studies WHERE state = 'running' ORDER BY created_ms",
            &[],
            |r| r.parsed(0),
        )
    }

    fn study_jobs(&mut self, id: StudyId) -> StoreResult<Vec<JobRecord>> {
        let ids: Vec<JobId> = self.c.map(
            "SELECT id FROM jobs WHERE study_id = ? ORDER BY created_ms, name, id",
            args![id.to_string()],
            |r| r.parsed(0),
        )?;
        let mut jobs = Vec::with_capacity(ids.len());
        for job in ids {
            if let Some(j) = crate::store::tx::Jobs::job(self, job)? {
                jobs.push(j);
            }
        }
        Ok(jobs)
    }

    fn end_study(&mut self, id: StudyId, state: &str, now_ms: i64) -> StoreResult<bool> {
        Ok(self.c.execute(
            "UPDATE studies SET state = ?, finished_ms = ? WHERE id = ? AND state = 'running'",
            args![state, now_ms, id.to_string()],
        )? == 1)
    }

    fn accepted_probes(&mut self, job: JobId) -> StoreResult<Vec<AcceptedProbe>> {
        self.c.map(
            "SELECT u.prefix_json, r.counts, j.depths FROM results r \
             JOIN units u ON u.id = r.unit_id JOIN jobs j ON j.id = r.job_id \
             WHERE r.job_id = ? AND r.verdict = 'accepted' ORDER BY r.unit_id",
            args![job.to_string()],
            |r| {
                Ok(AcceptedProbe {
                    prefix: path_at(r, 0, "prefix")?.unwrap_or_default(),
                    counts: decode_sparse_counts(r.value(1)?, r.get::<i64>(2)? as usize)?,
                })
            },
        )
    }
}
