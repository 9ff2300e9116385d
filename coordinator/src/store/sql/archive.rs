//! The archive (`migrations/sqlite/0013_archive.sql`): a unit decided before the detail window
//! moves out of `units`, `results` and `leases` into one row of small integers, its
//! accepted digest as 32 bytes, its counts and its budget stop. A continuation whose
//! parent is archived keeps neither prefix nor cursor: they are its parent's prefix and
//! its parent's stop (matched by the stop's 64-bit fingerprint), so a chain of
//! continuations stores its prefix once. A stop is stored against the unit's own cursor
//! (the placements they share, then the rest): a budget's walk moves the deep end of the
//! path, so a 200-deep stop costs a few bytes instead of ~600.
//!
//! The rest of the store sees archived units as done units: [`SqliteTx::restore`] puts
//! one back (unit, a lease and a result per agreeing run, folded) before a recheck or an
//! overturn touches it, and the counting, certificate and audit reads add the archive
//! in ([`SqliteTx::archived_rows`] and friends).

use std::collections::HashMap;
use std::rc::Rc;

use super::Value;
use e2fleet_engine::unit::StopReason;
use e2fleet_engine::{Placement, Unit, UnitResult};
use e2fleet_proto::api::{JobId, UnitId};

use super::codec::{
    decode_path_blob, decode_sparse_counts, decode_stop_delta, digest_bytes, digest_hex,
    encode_path, encode_stop_delta, path_at, path_tag, unit_at,
};
use super::{ConnExt, SqlTx, args};
use crate::store::tx::{Archive, StoreResult};
use crate::store::{
    AccountNeed, ArchivePass, CertificateRow, DAY_MS, ResultBreakdown, StoreError, UnitKind,
    UnitRecord, UnitState,
};

/// A unit kind's number in the archive.
fn kind_code(kind: UnitKind) -> i64 {
    match kind {
        UnitKind::Root => 0,
        UnitKind::Continuation => 1,
        UnitKind::Split => 2,
    }
}

fn kind_of(code: i64) -> StoreResult<UnitKind> {
    match code {
        0 => Ok(UnitKind::Root),
        1 => Ok(UnitKind::Continuation),
        2 => Ok(UnitKind::Split),
        _ => Err(StoreError::Corrupt(format!("archived unit kind {code}"))),
    }
}

/// One agreeing run of an archived unit: worker and engine numbers, standing, and the day
/// it was credited on.
#[derive(Clone, Debug, PartialEq)]
struct Runner {
    worker: i64,
    engine: i64,
    trusted: bool,
    /// `Some(day)` credited on that day, `Some(None)` not credited, `None` archived before
    /// per-result credit (`migrations/sqlite/0014_credit.sql`): [`SqlTx::restore`] works it
    /// out as that migration does.
    credited: Option<Option<i64>>,
}

/// `worker.engine.t|u.day|-` per run, space-separated, the accepted one first (rows
/// archived before per-result credit have no fourth part).
fn encode_runners(runners: &[Runner]) -> String {
    runners
        .iter()
        .map(|r| {
            let standing = if r.trusted { 't' } else { 'u' };
            let credited = match r.credited.flatten() {
                Some(day) => day.to_string(),
                None => "-".to_string(),
            };
            format!("{}.{}.{standing}.{credited}", r.worker, r.engine)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn decode_runners(text: &str) -> StoreResult<Vec<Runner>> {
    let bad = || StoreError::Corrupt(format!("archived runners {text:.40}"));
    text.split(' ')
        .map(|run| {
            let mut parts = run.split('.');
            let (Some(w), Some(e), Some(s), d, None) = (
                parts.next(),
                parts.next(),
                parts.next(),
                parts.next(),
                parts.next(),
            ) else {
                return Err(bad());
            };
            let credited = match d {
                None => None,
                Some("-") => Some(None),
                Some(day) => Some(Some(day.parse().map_err(|_| bad())?)),
            };
            Ok(Runner {
                credited,
                worker: w.parse().map_err(|_| bad())?,
                engine: e.parse().map_err(|_| bad())?,
                trusted: match s {
                    "t" => true,
                    "u" => false,
                    _ => return Err(bad()),
                },
            })
        })
        .collect()
}

/// A result of an archived unit as stored: what it is in the certificate and totals.
fn archived_result(
    counts: &Value,
    depths: usize,
    (committed, solutions, max_depth): (i64, i64, i64),
    stop: Option<Vec<Placement>>,
) -> StoreResult<UnitResult> {
    Ok(UnitResult {
        nodes_by_depth: decode_sparse_counts(counts, depths)?,
        committed: committed as u64,
        solutions_count: solutions as u64,
        solutions: Vec::new(),
        max_depth: max_depth as usize,
        deepest: Vec::new(),
        stop: Some(if stop.is_some() {
            StopReason::Budget
        } else {
            StopReason::Finished
        }),
        cursor: stop,
    })
}

fn blob_path(blob: Option<Vec<u8>>, what: &str) -> StoreResult<Option<Vec<Placement>>> {
    blob.map(|b| decode_path_blob(&b, what)).transpose()
}

/// The result rows of a unit the archiver reads.
struct ResultRow {
    id: i64,
    verdict: String,
    worker_id: String,
    account_id: String,
    standing: String,
    engine_kind: String,
    engine_build: String,
    digest: String,
    committed: i64,
    solutions: i64,
    max_depth: i64,
    counts: Option<Value>,
    stop: Option<Vec<u8>>,
    body_kept: bool,
    credited_day: Option<i64>,
}

impl SqlTx<'_> {
    /// The archive's number for a job; `create` makes one when it has none.
    fn job_num(&mut self, job: &str, create: bool) -> StoreResult<Option<i64>> {
        let found = self.c.map_row(
            "SELECT num FROM archive_jobs WHERE job_id = ?",
            args![job],
            |r| r.get(0),
        )?;
        if found.is_some() || !create {
            return Ok(found);
        }
        Ok(Some(self.c.one(
            "INSERT INTO archive_jobs (job_id) VALUES (?) RETURNING num",
            args![job],
        )?))
    }

    fn worker_num(&mut self, worker: &str) -> StoreResult<i64> {
        if let Some(n) = self.c.map_row(
            "SELECT num FROM archive_workers WHERE worker_id = ?",
            args![worker],
            |r| r.get(0),
        )? {
            return Ok(n);
        }
        self.c.one(
            "INSERT INTO archive_workers (worker_id) VALUES (?) RETURNING num",
            args![worker],
        )
    }

    fn engine_num(&mut self, kind: &str, build: &str) -> StoreResult<i64> {
        if let Some(n) = self.c.map_row(
            "SELECT num FROM archive_engines WHERE kind = ? AND build = ?",
            args![kind, build],
            |r| r.get(0),
        )? {
            return Ok(n);
        }
        self.c.one(
            "INSERT INTO archive_engines (kind, build) VALUES (?, ?) RETURNING num",
            args![kind, build],
        )
    }

    fn tally(
        &mut self,
        job: i64,
        verdict: &str,
        engine: i64,
        results: i64,
        nodes: i64,
    ) -> StoreResult<()> {
        self.c
            .execute("INSERT INTO archive_tallies (job, verdict, engine, results, nodes) VALUES (?1, ?2, ?3, ?4, ?5) \
                 ON CONFLICT (job, verdict, engine) DO UPDATE SET results = archive_tallies.results + ?4, nodes = archive_tallies.nodes + ?5", args![job, verdict, engine, results, nodes])?;
        Ok(())
    }

    /// Archives unit `id` when it can go: done, no lease out nor expired since `cutoff_ms`
    /// (a late report on it is still compared: the archive keeps no lease), every result
    /// accepted or agreeing and folded. Whether it went. A study's probe units stay (a
    /// study reads each accepted probe with its stratum, and its units are few).
    fn archive_unit(&mut self, id: i64, cutoff_ms: i64) -> StoreResult<bool> {
        let unit = self.c.map_row(
            "SELECT job_id, parent_id, kind, quorum, prefix_json, cursor_json, accepted_result_id, \
                   decided_ms, active_leases, state FROM units WHERE id = ? \
               AND job_id NOT IN (SELECT id FROM jobs WHERE probe_particles IS NOT NULL)",
            args![id],
            |r| {
                Ok((
                    r.get::<String>(0)?,
                    r.get::<Option<i64>>(1)?,
                    r.parsed::<UnitKind>(2)?,
                    r.get::<i64>(3)?,
                    unit_at(r, 4, 5)?,
                    r.get::<Option<i64>>(6)?,
                    r.get::<Option<i64>>(7)?.unwrap_or(0),
                    r.get::<i64>(8)?,
                    r.get::<String>(9)?,
                ))
            },
        )?;
        let Some((job_id, parent, kind, quorum, path, Some(accepted), decided_ms, 0, state)) = unit
        else {
            return Ok(false);
        };
        if state != UnitState::Done.as_str() {
            return Ok(false);
        }
        let out: bool = self.c.one(
            "SELECT EXISTS (SELECT 1 FROM leases WHERE unit_id = ?1 \
                   AND (state = 'active' OR (state = 'expired' AND deadline_ms > ?2)))",
            args![id, cutoff_ms],
        )?;
        if out {
            return Ok(false);
        }
        let rows = self.unit_results(id)?;
        let Some(winner) = rows.iter().find(|r| r.id == accepted) else {
            return Ok(false);
        };
        let settled = rows.iter().all(|r| {
            matches!(r.verdict.as_str(), "accepted" | "agree")
                && !r.body_kept
                && r.counts.is_some()
                && r.digest == winner.digest
        });
        if winner.verdict != "accepted" || !settled {
            return Ok(false);
        }
        let Ok(digest) = digest_bytes(&winner.digest) else {
            return Ok(false);
        };
        let job = self.job_num(&job_id, true)?.expect("created");
        let derived = self.derived_from_parent(job, (kind, parent), &path)?;
        let (prefix, cursor) = if derived {
            (None, None)
        } else {
            (
                Some(encode_path(&path.prefix)),
                Some(encode_path(&path.cursor)),
            )
        };
        // the stop against this unit's cursor, and its fingerprint for the next link
        let stop = blob_path(winner.stop.clone(), "stop")?;
        let stop_tag = stop.as_deref().map(path_tag);
        let stop = stop.map(|stop| encode_stop_delta(&path.cursor, &stop));
        let mut runners = Vec::with_capacity(rows.len());
        for r in std::iter::once(winner).chain(rows.iter().filter(|r| r.id != accepted)) {
            let engine = self.engine_num(&r.engine_kind, &r.engine_build)?;
            runners.push(Runner {
                worker: self.worker_num(&r.worker_id)?,
                engine,
                trusted: r.standing == "trusted",
                credited: Some(r.credited_day),
            });
            self.tally(job, &r.verdict, engine, 1, r.committed)?;
        }
        let other_identity = rows.iter().any(|r| r.worker_id != winner.worker_id);
        let other_account = rows.iter().any(|r| r.account_id != winner.account_id);
        let alone = i64::from(!other_identity) | (i64::from(!other_account) << 1);
        self.c
            .execute("INSERT INTO archive (job, unit, parent, kind, quorum, prefix, cursor, digest, committed, \
                   solutions, max_depth, counts, stop, stop_tag, worker, runners, alone, decided_ms) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", args![
                job,
                id,
                parent,
                kind_code(kind),
                quorum,
                prefix,
                cursor,
                digest,
                winner.committed,
                winner.solutions,
                winner.max_depth,
                winner.counts,
                stop,
                stop_tag,
                runners[0].worker,
                encode_runners(&runners),
                alone,
                decided_ms
            ])?;
        for sql in [
            "DELETE FROM result_bodies WHERE result_id IN (SELECT id FROM results WHERE unit_id = ?)",
            "DELETE FROM results WHERE unit_id = ?",
            "DELETE FROM leases WHERE unit_id = ?",
            "DELETE FROM units WHERE id = ?",
        ] {
            self.c.execute(sql, args![id])?;
        }
        self.c.execute(
            "UPDATE archive_jobs SET units = units + 1 WHERE num = ?",
            args![job],
        )?;
        Ok(true)
    }

    /// The results of unit `id`, in the order they came.
    fn unit_results(&mut self, id: i64) -> StoreResult<Vec<ResultRow>> {
        let rows = self.c.map("SELECT id, verdict, worker_id, account_id, standing, engine_kind, engine_build, digest, \
               committed, solutions, max_depth, counts, stop, body_kept, credited_day FROM results WHERE unit_id = ? ORDER BY id", args![id], |r| {
            Ok(ResultRow {
                id: r.get(0)?,
                verdict: r.get(1)?,
                worker_id: r.get(2)?,
                account_id: r.get(3)?,
                standing: r.get(4)?,
                engine_kind: r.get(5)?,
                engine_build: r.get(6)?,
                digest: r.get(7)?,
                committed: r.get(8)?,
                solutions: r.get(9)?,
                max_depth: r.get(10)?,
                counts: r.get(11)?,
                stop: r.get(12)?,
                body_kept: r.get(13)?,
                credited_day: r.get(14)?,
            })
        })?;
        Ok(rows)
    }

    /// Whether a unit's path is derived from its archived parent (a continuation whose
    /// prefix is its parent's and whose cursor is its parent's stop): then the archive
    /// stores neither.
    fn derived_from_parent(
        &mut self,
        job: i64,
        (kind, parent): (UnitKind, Option<i64>),
        path: &Unit,
    ) -> StoreResult<bool> {
        Ok(match (kind, parent) {
            (UnitKind::Continuation, Some(p)) => self
                .c
                .map_row(
                    "SELECT prefix, stop_tag FROM archive WHERE job = ? AND unit = ?",
                    args![job, p],
                    |r| Ok((r.get::<Option<Vec<u8>>>(0)?, r.get::<Option<i64>>(1)?)),
                )?
                .is_some_and(|(prefix, tag)| {
                    tag == Some(path_tag(&path.cursor))
                        && prefix.is_none_or(|p| {
                            // decoded: the parent may be stored in another path form
                            decode_path_blob(&p, "prefix").is_ok_and(|p| p == path.prefix)
                        })
                }),
            _ => false,
        })
    }

    /// An archived unit's prefix and cursor (a derived one's from its ancestors: up the
    /// chain to the first that keeps its own, then down it, each stop decoded against the
    /// cursor it was stored against and becoming the next unit's cursor).
    fn archived_path(&mut self, job: i64, unit: i64) -> StoreResult<Unit> {
        type Link = (
            Option<i64>,
            Option<Vec<u8>>,
            Option<Vec<u8>>,
            Option<Vec<u8>>,
        );
        let step = |tx: &mut Self, unit: i64| -> StoreResult<Link> {
            tx.c.map_row(
                "SELECT parent, prefix, cursor, stop FROM archive WHERE job = ? AND unit = ?",
                args![job, unit],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )?
            .ok_or_else(|| StoreError::Corrupt(format!("archived unit {unit} has no row")))
        };
        // the stops of the ancestors between this unit and the first that keeps its path
        let mut stops = Vec::new();
        let (mut parent, mut prefix, mut cursor, _) = step(self, unit)?;
        while prefix.is_none() {
            let p = parent.ok_or_else(|| {
                StoreError::Corrupt(format!("archived unit {unit}: no prefix and no parent"))
            })?;
            let (grandparent, p_prefix, p_cursor, p_stop) = step(self, p)?;
            stops.push(p_stop.ok_or_else(|| {
                StoreError::Corrupt(format!("archived unit {p}: continued but has no stop"))
            })?);
            (parent, prefix, cursor) = (grandparent, p_prefix, p_cursor);
        }
        let prefix = decode_path_blob(&prefix.expect("found"), "prefix")?;
        let mut cursor = blob_path(cursor, "cursor")?.unwrap_or_default();
        for stop in stops.iter().rev() {
            cursor = decode_stop_delta(&cursor, stop, "stop")?;
        }
        Ok(Unit { prefix, cursor })
    }

    /// Puts archived unit `unit` of job number `job` back: its unit row (done, decided by
    /// its accepted result), a reported lease and a folded result per agreeing run; its
    /// derived children get their prefix and cursor written out first.
    pub(super) fn restore(&mut self, job: i64, unit: i64) -> StoreResult<()> {
        let path = self.archived_path(job, unit)?;
        #[allow(clippy::type_complexity)]
        let (parent, kind, quorum, digest, figures, counts, stop, runners, decided_ms): (
            Option<i64>,
            i64,
            i64,
            Vec<u8>,
            (i64, i64, i64),
            Value,
            Option<Vec<u8>>,
            String,
            i64,
        ) = self
            .c
            .first("SELECT parent, kind, quorum, digest, committed, solutions, max_depth, counts, stop, runners, \
                   decided_ms FROM archive WHERE job = ? AND unit = ?", args![job, unit], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    (r.get(4)?, r.get(5)?, r.get(6)?),
                    r.get(7)?,
                    r.get(8)?,
                    r.get(9)?,
                    r.get(10)?,
                ))
            })?;
        let runners = decode_runners(&runners)?;
        let prefix = encode_path(&path.prefix);
        let stop = stop
            .map(|delta| decode_stop_delta(&path.cursor, &delta, "stop"))
            .transpose()?
            .map(|stop| encode_path(&stop));
        self.c.execute(
            "UPDATE archive SET prefix = ?1, cursor = ?2 WHERE parent = ?3 AND prefix IS NULL",
            args![prefix, stop, unit],
        )?;
        let (job_id, budget): (String, i64) = self
            .c
            .first("SELECT a.job_id, j.budget FROM archive_jobs a JOIN jobs j ON j.id = a.job_id WHERE a.num = ?", args![job], |r| Ok((r.get(0)?, r.get(1)?)))?;
        let n = runners.len() as i64;
        self.c
            .execute("INSERT INTO units (id, job_id, prefix_json, cursor_json, parent_id, kind, quorum, needed, state, \
                   active_leases, results, created_ms, decided_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'done', 0, ?8, ?9, ?9)", args![
                unit,
                job_id,
                prefix,
                encode_path(&path.cursor),
                parent,
                kind_of(kind)?.as_str(),
                quorum,
                n,
                decided_ms
            ])?;
        let digest = digest_hex(&digest);
        let mut who: Vec<(String, String, String, String)> = Vec::with_capacity(runners.len());
        for run in &runners {
            who.push(self.c.first(
                "SELECT w.id, w.hostname, w.cpu_model, w.account_id FROM archive_workers a \
                     JOIN workers w ON w.id = a.worker_id WHERE a.num = ?",
                args![run.worker],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )?);
        }
        // archived before per-result credit: a volunteer's run held credit when another
        // account agreed (one run per account), as the migration that added it says
        let mut holders: Vec<&str> = Vec::new();
        let credited: Vec<Option<i64>> = runners
            .iter()
            .zip(&who)
            .map(|(run, (_, _, _, account))| match run.credited {
                Some(day) => day,
                None => {
                    let confirmed = who.iter().any(|w| w.3 != *account);
                    let first = !holders.contains(&account.as_str());
                    (account != "operator" && confirmed && first).then(|| {
                        holders.push(account);
                        decided_ms.div_euclid(DAY_MS)
                    })
                }
            })
            .collect();
        for (i, (run, (worker_id, hostname, cpu_model, account_id))) in
            runners.iter().zip(who.iter().cloned()).enumerate()
        {
            let (engine_kind, engine_build): (String, String) = self.c.first(
                "SELECT kind, build FROM archive_engines WHERE num = ?",
                args![run.engine],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            let lease = uuid::Uuid::new_v4().to_string();
            self.c
                .execute("INSERT INTO leases (id, unit_id, worker_id, hostname, budget, created_ms, deadline_ms, state, account_id) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, 'reported', ?7)", args![lease, unit, worker_id, hostname, budget, decided_ms, account_id])?;
            let verdict = if i == 0 { "accepted" } else { "agree" };
            let id: i64 = self.c.one("INSERT INTO results (job_id, unit_id, lease_id, worker_id, hostname, cpu_model, engine_kind, \
                       engine_build, digest, committed, solutions, max_depth, engine_seconds, verdict, received_ms, \
                       account_id, standing, counts, stop, body_kept, credited_day) \
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, 0, ?) RETURNING id", args![
                    job_id,
                    unit,
                    lease,
                    worker_id,
                    hostname,
                    cpu_model,
                    engine_kind,
                    engine_build,
                    digest,
                    figures.0,
                    figures.1,
                    figures.2,
                    verdict,
                    decided_ms,
                    account_id,
                    if run.trusted { "trusted" } else { "untrusted" },
                    counts,
                    stop,
                    credited[i]
                ])?;
            if i == 0 {
                self.c.execute(
                    "UPDATE units SET accepted_result_id = ? WHERE id = ?",
                    args![id, unit],
                )?;
            }
            self.tally(job, verdict, run.engine, -1, -figures.0)?;
        }
        self.c.execute(
            "DELETE FROM archive WHERE job = ? AND unit = ?",
            args![job, unit],
        )?;
        self.c.execute(
            "UPDATE archive_jobs SET units = units - 1 WHERE num = ?",
            args![job],
        )?;
        Ok(())
    }

    /// Restores every archived unit the query `sql` (selecting job number and unit) finds.
    fn restore_found(&mut self, sql: &str, params: &[Value]) -> StoreResult<usize> {
        let found: Vec<(i64, i64)> = { self.c.map(sql, params, |r| Ok((r.get(0)?, r.get(1)?)))? };
        for &(job, unit) in &found {
            self.restore(job, unit)?;
        }
        Ok(found.len())
    }

    /// Restores the archived children of `parent` (an overturn walks them).
    pub(super) fn restore_children(&mut self, parent: UnitId) -> StoreResult<usize> {
        self.restore_found(
            "SELECT job, unit FROM archive WHERE parent = ? ORDER BY unit",
            args![parent.0],
        )
    }

    /// Restores the archived units whose accepted result `column` (`worker_id` or
    /// `account_id`) is `id` and that no other identity (`worker_id`) or account
    /// (`account_id`) confirmed: what a history recheck or a voided account reaches.
    pub(super) fn restore_unconfirmed(&mut self, column: &str, id: &str) -> StoreResult<usize> {
        let (workers, bit) = match column {
            "worker_id" => ("SELECT num FROM archive_workers WHERE worker_id = ?1", 1),
            _ => (
                "SELECT a.num FROM archive_workers a JOIN workers w ON w.id = a.worker_id WHERE w.account_id = ?1",
                2,
            ),
        };
        self.restore_found(
            &format!(
                "SELECT job, unit FROM archive WHERE worker IN ({workers}) AND alone > 0 AND (alone & {bit}) != 0 \
                 ORDER BY unit"
            ),
            args![id],
        )
    }

    /// The archived units of a job as certificate rows, by id.
    pub(super) fn archived_rows(&mut self, job: JobId) -> StoreResult<Vec<CertificateRow>> {
        let job_id = job.to_string();
        let Some(num) = self.job_num(&job_id, false)? else {
            return Ok(Vec::new());
        };
        let depths = self.job_depths(&job_id)?;
        // the chains' tips: unit -> (prefix, stop), taken by the one continuation after it
        let mut tips: HashMap<i64, (Rc<Vec<Placement>>, Vec<Placement>)> = HashMap::new();
        let mut out = Vec::new();
        let sql = "SELECT unit, parent, kind, quorum, prefix, cursor, digest, committed, solutions, max_depth, \
               counts, stop, runners, decided_ms FROM archive WHERE job = ? ORDER BY unit";
        self.c.for_each(sql, args![num], &mut |r| {
            let id: i64 = r.get(0)?;
            let parent: Option<i64> = r.get(1)?;
            let (prefix, cursor) = match path_at(r, 4, "prefix")? {
                Some(prefix) => (
                    Rc::new(prefix),
                    path_at(r, 5, "cursor")?.unwrap_or_default(),
                ),
                None => parent.and_then(|p| tips.remove(&p)).ok_or_else(|| {
                    StoreError::Corrupt(format!("archived unit {id}: its parent is not archived"))
                })?,
            };
            let stop = r
                .get::<Option<Vec<u8>>>(11)?
                .map(|delta| decode_stop_delta(&cursor, &delta, "stop"))
                .transpose()?;
            if let Some(stop) = &stop {
                tips.insert(id, (prefix.clone(), stop.clone()));
            }
            let runners = decode_runners(&r.get::<String>(12)?)?.len() as u32;
            let result = archived_result(
                r.value(10)?,
                depths,
                (r.get(7)?, r.get(8)?, r.get(9)?),
                stop,
            )?;
            out.push(CertificateRow {
                unit: UnitRecord {
                    id: UnitId(id),
                    job_id: job,
                    unit: Unit {
                        prefix: (*prefix).clone(),
                        cursor,
                    },
                    parent: parent.map(UnitId),
                    kind: kind_of(r.get(2)?)?,
                    quorum: r.get::<i64>(3)? as u32,
                    needed: runners,
                    state: UnitState::Done,
                    active_leases: 0,
                    results: runners,
                    accepted_result: None,
                    created_ms: r.get(13)?,
                    account_need: AccountNeed::None,
                    disputed: false,
                },
                accepted: Some((result, digest_hex(&r.get::<Vec<u8>>(6)?), runners)),
            });
            Ok(())
        })?;
        Ok(out)
    }

    /// The accepted results of a job's archived units (the conservation check).
    pub(super) fn archived_results(&mut self, job: JobId) -> StoreResult<Vec<UnitResult>> {
        Ok(self
            .archived_rows(job)?
            .into_iter()
            .filter_map(|row| row.accepted.map(|(result, _, _)| result))
            .collect())
    }

    /// An archived unit's accepted digest, if it is archived in `job`.
    pub(super) fn archived_digest(
        &mut self,
        job: JobId,
        unit: UnitId,
    ) -> StoreResult<Option<String>> {
        let Some(num) = self.job_num(&job.to_string(), false)? else {
            return Ok(None);
        };
        let digest: Option<Vec<u8>> = self.c.map_row(
            "SELECT digest FROM archive WHERE job = ? AND unit = ?",
            args![num, unit.0],
            |r| r.get(0),
        )?;
        Ok(digest.map(|d| digest_hex(&d)))
    }

    /// How many of a job's units are archived.
    pub(super) fn archived_units_of(&mut self, job: JobId) -> StoreResult<u64> {
        let n: Option<i64> = self.c.map_row(
            "SELECT units FROM archive_jobs WHERE job_id = ?",
            args![job.to_string()],
            |r| r.get(0),
        )?;
        Ok(n.unwrap_or(0) as u64)
    }

    /// What a job's archived results add to its breakdown.
    pub(super) fn archived_breakdown(&mut self, job: JobId) -> StoreResult<Vec<ResultBreakdown>> {
        let rows = self.c.map(
            "SELECT t.verdict, e.kind, e.build, t.results, t.nodes FROM archive_tallies t \
             JOIN archive_jobs a ON a.num = t.job JOIN archive_engines e ON e.num = t.engine \
             WHERE a.job_id = ? AND t.results > 0",
            args![job.to_string()],
            |r| {
                Ok(ResultBreakdown {
                    verdict: r.parsed(0)?,
                    engine_kind: r.parsed(1)?,
                    engine_build: r.get(2)?,
                    results: r.get::<i64>(3)? as u64,
                    nodes: r.get::<i64>(4)? as u64,
                })
            },
        )?;
        Ok(rows)
    }

    fn job_depths(&mut self, job_id: &str) -> StoreResult<usize> {
        let depths: i64 = self
            .c
            .one("SELECT depths FROM jobs WHERE id = ?", args![job_id])?;
        Ok(depths as usize)
    }
}

impl Archive for SqlTx<'_> {
    fn archive_decided(
        &mut self,
        cutoff_ms: i64,
        after: (i64, i64),
        limit: usize,
    ) -> StoreResult<ArchivePass> {
        let found: Vec<(i64, i64)> = {
            self.c.map(
                "SELECT decided_ms, id FROM units INDEXED BY units_decided \
                 WHERE state = 'done' AND decided_ms <= ?1 AND (decided_ms, id) > (?2, ?3) \
                 ORDER BY decided_ms, id LIMIT ?4",
                args![cutoff_ms, after.0, after.1, limit as i64],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?
        };
        let mut pass = ArchivePass {
            archived: 0,
            scanned: found.len(),
            last: found.last().copied().unwrap_or(after),
        };
        for (_, id) in found {
            if self.archive_unit(id, cutoff_ms)? {
                pass.archived += 1;
            }
        }
        Ok(pass)
    }

    fn is_archived(&mut self, unit: UnitId) -> StoreResult<bool> {
        // one primary-key probe per job: the jobs are few, the archive is keyed by job first
        self
            .c
            .one("SELECT EXISTS (SELECT 1 FROM archive WHERE job IN (SELECT num FROM archive_jobs) AND unit = ?)", args![unit.0])
    }

    fn archived_units(&mut self) -> StoreResult<u64> {
        let n: i64 = self.c.one(
            "SELECT COALESCE(CAST(SUM(units) AS BIGINT), 0) FROM archive_jobs",
            &[],
        )?;
        Ok(n as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runners_round_trip_and_rows_from_before_per_result_credit_still_read() {
        let runners = vec![
            Runner {
                worker: 3,
                engine: 1,
                trusted: true,
                credited: Some(Some(20_791)),
            },
            Runner {
                worker: 12,
                engine: 2,
                trusted: false,
                credited: Some(None),
            },
        ];
        let text = encode_runners(&runners);
        assert_eq!(text, "3.1.t.20791 12.2.u.-");
        assert_eq!(decode_runners(&text).unwrap(), runners);
        // archived before: no fourth part, worked out on restore
        let old = decode_runners("3.1.t 12.2.u").unwrap();
        assert_eq!(
            old.iter().map(|r| r.credited).collect::<Vec<_>>(),
            [None, None]
        );
        for bad in ["3.1.t.x", "3.1.t.1.2", "3.1", "3.1.q"] {
            assert!(decode_runners(bad).is_err(), "{bad}");
        }
    }
}
