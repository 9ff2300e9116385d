//! Leases: handing out units (with expiry and idle-time continuation splitting) and
//! releases (heartbeats: `heartbeats.rs`). Each operation is one store write; the `*_tx` functions are
//! its synchronous body.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use e2fleet_engine::engine::EngineKind;
use e2fleet_engine::search::Walker;
use e2fleet_proto::api::{AccountId, JobId, Lease, LeaseId, Probe, UnitId};
use tracing::{info, instrument, warn};

use super::batches;
use super::policy::{
    MAX_LEASES_PER_CALL, MAX_LEASES_PER_REQUEST, MAX_SPLIT_LEVELS, YIELD_AFTER_MS,
    YIELD_LOOK_EVERY_MS, YIELD_PATIENCE_MS, lease_cap,
};
use super::{Fleet, FleetError, LeasedUnit};
use crate::store::{
    AccountRecord, LeaseRecord, LeaseState, LeaseView, Leasing, NewUnit, StoreError, Tx, UnitKind,
    UnitRecord, WorkerRecord, WriteLock,
};

impl Fleet {
    /// Returns expired leases' units to the queue.
    pub async fn expire_leases(&self) -> Result<usize, FleetError> {
        let now = self.now();
        self.store.write(move |tx| expire(tx, now)).await
    }

    /// Leases up to `max` units to a worker that will run them with `engine` (kind and
    /// build; `None`: what it said last); a study's probe units only if it `probes`.
    #[instrument(skip_all, fields(worker_id = %worker.id, max))]
    pub async fn lease_units(
        self: &Arc<Self>,
        worker: &WorkerRecord,
        max: usize,
        engine: Option<(EngineKind, &str)>,
        probes: bool,
    ) -> Result<Vec<Lease>, FleetError> {
        let max = max.clamp(1, MAX_LEASES_PER_REQUEST);
        if !self.lease_limits.allow(&worker.id, &worker.account_id) {
            return Err(FleetError::TooMany(
                "too many lease requests; slow down (retry with backoff)".into(),
            ));
        }
        if let Some(reason) = self.flagged_reason(worker).await? {
            return Err(FleetError::FailedPrecondition(format!(
                "no real work for hardware class {}: {reason}; run a fixed build (e2fleet-worker verify --coordinator ...)",
                worker.class_id
            )));
        }
        let queued = QueuedLease {
            worker: worker.clone(),
            max,
            engine: engine.map(|(kind, build)| (kind, build.to_string())),
            probes,
            now: self.now(),
        };
        let leases = self.lease_in_batch(queued).await?;
        if leases.is_empty() {
            self.lease_limits.found_nothing(worker.id);
        }
        Ok(leases)
    }

    /// Queues a lease request for the next batch ([`super::batches`]) and waits for its
    /// answer.
    async fn lease_in_batch(
        self: &Arc<Self>,
        queued: QueuedLease,
    ) -> Result<Vec<Lease>, FleetError> {
        batches::submit(
            self,
            (|f| &f.lease_requests, WriteLock::Leases),
            |f, tx, items| f.lease_batch_tx(tx, items),
            queued,
        )
        .await
    }

    fn lease_tx(
        &self,
        tx: &mut dyn Tx,
        worker: &WorkerRecord,
        max: usize,
        (engine, probes): (Option<(EngineKind, &str)>, bool),
        now: i64,
    ) -> Result<Vec<Lease>, FleetError> {
        // overdue leases go back to the queue before handing out work; the background
        // task does this too, so here it runs at most once a second
        self.expire_now_and_then(tx, now)?;
        tx.workers_seen_leasing(&[(worker.id, engine)], now)?;
        let view = tx.lease_view(worker.id, &worker.account_id)?;
        let Some((max, account)) = self.room(worker, view, max) else {
            return Ok(Vec::new());
        };
        let who = Leasing {
            worker: worker.id,
            account: &worker.account_id,
            trusted: self.trusted(&account),
            live_parties: self.live_parties(tx, now)?,
        };
        let plan = self.lease_plan(tx, now, max)?;
        let mut rows = self.leasable(tx, &who, plan.as_deref(), max)?;
        if rows.len() < max {
            // idle capacity: split a waiting continuation into sibling prefixes
            // (a unit that cannot be split is logged and left as it is: this path has
            // already written, and a failure here would roll back its whole batch)
            // (a unit's split changes what a report on it counts: not beside a report
            // batch; the next idle call splits it)
            let unit = match tx.run_alone()? {
                true => tx.splittable_unit()?,
                false => None,
            };
            if let Some(unit) = unit {
                match self.split_unit(tx, &unit, now) {
                    // read the units again even when no sibling was made: the split
                    // still moved the unit's first cursor step into its prefix, and a
                    // lease must hand out the unit as it is stored (it may be in `rows`)
                    Ok(_) => rows = self.leasable(tx, &who, plan.as_deref(), max)?,
                    Err(FleetError::Store(
                        e @ (StoreError::Sqlite(_) | StoreError::Db(_) | StoreError::Postgres(_)),
                    )) => {
                        return Err(e.into());
                    }
                    Err(e) => warn!(unit_id = %unit.id, error = %e, "continuation not split"),
                }
            }
        }
        if !rows.is_empty() {
            let ids: Vec<UnitId> = rows.iter().map(|r| r.id).collect();
            let claimed = tx.claim_open_units(&ids)?;
            rows.retain(|r| claimed.contains(&r.id));
        }
        if !probes {
            // a worker that does not run probes is never handed one (it would walk the
            // prefix and report a count where a probe's children are expected)
            let mut kept = Vec::with_capacity(rows.len());
            for row in rows {
                if self.context_tx(tx, row.job_id)?.probe_particles.is_none() {
                    kept.push(row);
                }
            }
            rows = kept;
        }
        if rows.is_empty() {
            self.ask_running_unit_to_yield(tx, now)?;
        }
        let mut grants = Vec::with_capacity(rows.len());
        for row in rows {
            let (lease, grant) = self.grant(tx, worker, row, now)?;
            tx.insert_lease(&lease)?;
            tx.lease_taken(lease.unit_id)?;
            grants.push(grant);
        }
        Ok(grants)
    }

    /// A batch of lease requests (see [`super::batches`]), each decided in order by the
    /// same rules as [`Fleet::lease_tx`]. With one job running (else each request is
    /// written alone), a part of the batch (up to a second request of a worker or of a
    /// volunteer account) reads its views and each request's candidate units in one
    /// statement each, as if each asked alone for its own units and those of the
    /// requests before it; each takes its own from what those before it left, and the
    /// part's leases are written together. A request that finds fewer units than it may
    /// take (a continuation is then split for it) is written alone, after its part.
    pub(super) fn lease_batch_tx(
        &self,
        tx: &mut dyn Tx,
        items: Vec<QueuedLease>,
    ) -> Result<Vec<Result<Vec<Lease>, FleetError>>, FleetError> {
        let mut answers: Vec<Option<Result<Vec<Lease>, FleetError>>> =
            (0..items.len()).map(|_| None).collect();
        let Some(now) = items.iter().map(|q| q.now).max() else {
            return Ok(Vec::new());
        };
        let alone = |fleet: &Fleet, tx: &mut dyn Tx, q: &QueuedLease| {
            let engine = q.engine.as_ref().map(|(k, b)| (*k, b.as_str()));
            match fleet.lease_tx(tx, &q.worker, q.max, (engine, q.probes), q.now) {
                // a store failure fails the batch (the writer rolls it back)
                Err(FleetError::Store(e)) => Err(FleetError::Store(e)),
                answer => Ok(answer),
            }
        };
        if self.lease_plan(tx, now, 1)?.is_some() {
            // several jobs share the fleet: each request takes its own plan's parts
            for (i, q) in items.iter().enumerate() {
                answers[i] = Some(alone(self, tx, q)?);
            }
            return Ok(answers.into_iter().map(|a| a.expect("answered")).collect());
        }
        self.expire_now_and_then(tx, now)?;
        let mut next = 0;
        while next < items.len() {
            // the part: no worker twice (a volunteer account's identities may come
            // several times: each is weighed with what the part granted the account
            // before it, as a write after the part's would read it)
            let mut end = next;
            while end < items.len() {
                let q = &items[end];
                if items[next..end].iter().any(|p| p.worker.id == q.worker.id) {
                    break;
                }
                end += 1;
            }
            let part = &items[next..end];
            let seen: Vec<_> = part
                .iter()
                .map(|q| {
                    let engine = q.engine.as_ref().map(|(k, b)| (*k, b.as_str()));
                    (q.worker.id, engine)
                })
                .collect();
            tx.workers_seen_leasing(&seen, now)?;
            let who: Vec<_> = part
                .iter()
                .map(|q| (q.worker.id, &q.worker.account_id))
                .collect();
            let views = tx.lease_views(&who)?;
            // (as if no other request of the part were granted: at least what each may take)
            let rooms: Vec<Option<(usize, AccountRecord)>> = part
                .iter()
                .zip(&views)
                .map(|(q, view)| self.room(&q.worker, view.clone(), q.max))
                .collect();
            let live_parties = if rooms.iter().any(Option::is_some) {
                self.live_parties(tx, now)?
            } else {
                0
            };
            // enough of the oldest open units for every request of the part, and a quarter
            // and 16 more (a few may be barred to some: a request short of units goes
            // alone), and the disputed ones if a trusted worker asks
            let wanted: usize = rooms.iter().flatten().map(|(max, _)| max).sum();
            let trusted: Vec<bool> = rooms
                .iter()
                .map(|room| room.as_ref().is_some_and(|(_, a)| self.trusted(a)))
                .collect();
            let disputed = if trusted.contains(&true) { wanted } else { 0 };
            // (claimed as they are read)
            let open = if wanted > 0 {
                tx.open_units_with_runs(wanted + wanted / 4 + 16, disputed)?
            } else {
                Vec::new()
            };
            let mut taken: Vec<UnitId> = Vec::new();
            let mut leases: Vec<LeaseRecord> = Vec::new();
            // leases the part granted each volunteer account so far
            let mut granted: Vec<(&AccountId, u64)> = Vec::new();
            let mut short = None;
            let mut idle = false;
            for (k, (q, view)) in part.iter().zip(views).enumerate() {
                // a volunteer account's leases count those the part granted it so far
                let account = &q.worker.account_id;
                let earlier = granted
                    .iter()
                    .find(|(a, _)| *a == account)
                    .map_or(0, |(_, n)| *n);
                let room = match view {
                    Some(mut view) if earlier > 0 => {
                        view.account_leases += earlier;
                        self.room(&q.worker, Some(view), q.max)
                    }
                    view => self.room(&q.worker, view, q.max),
                };
                let Some((max, _)) = &room else {
                    answers[next + k] = Some(Ok(Vec::new()));
                    continue;
                };
                let who = Leasing {
                    worker: q.worker.id,
                    account: &q.worker.account_id,
                    trusted: trusted[k],
                    live_parties,
                };
                // as `Units::leasable_units` would answer it now: disputed units first to a
                // trusted worker, then the oldest, each once, none another request took
                let mut rows: Vec<UnitRecord> = Vec::with_capacity(*max);
                for c in &open {
                    if rows.len() == *max {
                        break;
                    }
                    if (!c.disputed || who.trusted)
                        && !taken.contains(&c.unit.id)
                        && !rows.iter().any(|r| r.id == c.unit.id)
                        && c.open_to(&who)
                    {
                        rows.push(c.unit.clone());
                    }
                }
                if rows.len() < *max {
                    short = Some(next + k);
                    break;
                }
                taken.extend(rows.iter().map(|u| u.id));
                if !q.probes {
                    // (see `lease_tx`: never a probe to a worker that does not run them)
                    let mut kept = Vec::with_capacity(rows.len());
                    for row in rows {
                        if self.context_tx(tx, row.job_id)?.probe_particles.is_none() {
                            kept.push(row);
                        }
                    }
                    rows = kept;
                }
                idle |= rows.is_empty();
                if !account.is_operator() && !rows.is_empty() {
                    match granted.iter_mut().find(|(a, _)| *a == account) {
                        Some((_, n)) => *n += rows.len() as u64,
                        None => granted.push((account, rows.len() as u64)),
                    }
                }
                let mut grants = Vec::with_capacity(rows.len());
                for row in rows {
                    let (lease, grant) = self.grant(tx, &q.worker, row, q.now)?;
                    leases.push(lease);
                    grants.push(grant);
                }
                answers[next + k] = Some(Ok(grants));
            }
            tx.insert_leases(&leases)?;
            if idle {
                self.ask_running_unit_to_yield(tx, now)?;
            }
            match short {
                Some(i) => {
                    answers[i] = Some(alone(self, tx, &items[i])?);
                    next = i + 1;
                }
                None => next = end,
            }
        }
        Ok(answers
            .into_iter()
            .map(|a| a.expect("every request answered"))
            .collect())
    }

    /// How many units `worker` may be leased now of the `max` it asks for, with its
    /// account (`None`: none; the worker or account is quarantined, revoked or gone, or
    /// its share is out).
    fn room(
        &self,
        worker: &WorkerRecord,
        view: Option<LeaseView>,
        max: usize,
    ) -> Option<(usize, AccountRecord)> {
        let view = view?;
        let account = view.account.filter(|a| a.active() && !view.quarantined)?;
        // at most about five units per engine thread out at once, whatever it asks for
        let cap = lease_cap(worker.threads, worker.host.cores);
        let mut max = max.min(cap.saturating_sub(view.worker_leases) as usize);
        // and a volunteer account's identities together at most its share, however many
        // it registers
        if !account.id.is_operator() {
            max = max.min(
                self.config
                    .accounts
                    .leases
                    .saturating_sub(view.account_leases) as usize,
            );
        }
        (max > 0).then_some((max, account))
    }

    /// A lease of `row` for `worker`, as stored and as told (remembered for its report).
    fn grant(
        &self,
        tx: &mut dyn Tx,
        worker: &WorkerRecord,
        row: UnitRecord,
        now: i64,
    ) -> Result<(LeaseRecord, Lease), FleetError> {
        self.shares_granted(row.job_id, 1);
        // a job's budget never changes: read from the cached job context
        let ctx = self.context_tx(tx, row.job_id)?;
        let budget = ctx.budget;
        let probe = ctx.probe_particles.map(|particles| Probe {
            particles,
            seed: super::studies::probe_seed(row.job_id, row.id),
        });
        let lease = LeaseRecord {
            id: LeaseId::random(),
            unit_id: row.id,
            worker_id: worker.id,
            account_id: worker.account_id.clone(),
            hostname: worker.host.hostname.clone(),
            budget,
            created_ms: now,
            deadline_ms: now + self.config.lease.as_millis() as i64,
            state: LeaseState::Active,
        };
        self.remember_lease(
            lease.id,
            LeasedUnit {
                job_id: row.job_id,
                budget,
                unit: row.unit.clone(),
            },
        );
        info!(lease_id = %lease.id, unit_id = %row.id, job_id = %row.job_id, "unit leased");
        let grant = Lease {
            lease_id: lease.id,
            unit_id: row.id,
            job_id: row.job_id,
            unit: row.unit,
            budget,
            deadline_ms: lease.deadline_ms,
            probe,
        };
        Ok((lease, grant))
    }

    /// Up to `max` units `who` may run: any job's when `plan` is `None` (one job running),
    /// else each job's part of the plan in turn, then what is left of `max` from the same
    /// jobs in the same order (a job short of units leaves its part to the others).
    fn leasable(
        &self,
        tx: &mut dyn Tx,
        who: &Leasing<'_>,
        plan: Option<&[Vec<(JobId, usize)>]>,
        max: usize,
    ) -> Result<Vec<UnitRecord>, FleetError> {
        let Some(plan) = plan else {
            return Ok(tx.leasable_units(who, None, max)?);
        };
        let mut rows: Vec<UnitRecord> = Vec::with_capacity(max);
        for group in plan {
            // jobs that gave fewer units than asked have no more for this worker
            let mut exhausted = Vec::new();
            for &(job, part) in group {
                let n = part.min(max - rows.len());
                if n > 0 {
                    let got = tx.leasable_units(who, Some(job), n)?;
                    if got.len() < n {
                        exhausted.push(job);
                    }
                    rows.extend(got);
                }
            }
            for &(job, _) in group {
                if rows.len() >= max {
                    break;
                }
                if exhausted.contains(&job) {
                    continue;
                }
                let more = tx.leasable_units(who, Some(job), max)?;
                for unit in more {
                    if rows.len() < max && !rows.iter().any(|r| r.id == unit.id) {
                        rows.push(unit);
                    }
                }
            }
            if rows.len() >= max {
                break;
            }
        }
        Ok(rows)
    }

    /// Splits a waiting continuation at every level of its cursor (at most
    /// [`MAX_SPLIT_LEVELS`]): the untried siblings at each level become plain prefix units
    /// (one counted node each), and the unit keeps the subtree of its cursor's last
    /// placement. On a heavy-tailed tree the mass is near where the stopped run was (deep
    /// in its cursor's branch), and only a split down to there gives idle threads units
    /// from it: siblings at the shallow levels alone are mostly dead ends.
    fn split_unit(&self, tx: &mut dyn Tx, row: &UnitRecord, now: i64) -> Result<bool, FleetError> {
        let ctx = self.context_tx(tx, row.job_id)?;
        let mut walker = Walker::new(&ctx.spec.plan);
        let mut remaining = row.unit.clone();
        let mut siblings: Vec<NewUnit> = Vec::new();
        let mut by_depth: Vec<(usize, i64)> = Vec::new();
        for _ in 0..MAX_SPLIT_LEVELS {
            if remaining.cursor.is_empty() {
                break;
            }
            let depth = remaining.prefix.len();
            let split = walker.split_continuation(&remaining).map_err(|e| {
                FleetError::FailedPrecondition(format!("cannot split unit {}: {e}", row.id))
            })?;
            if !split.siblings.is_empty() {
                by_depth.push((depth, split.siblings.len() as i64));
            }
            siblings.extend(split.siblings.into_iter().map(|unit| NewUnit {
                unit,
                parent: Some(row.id),
                kind: UnitKind::Split,
                quorum: row.quorum,
            }));
            remaining = split.remaining;
        }
        tx.insert_units(row.job_id, &siblings, now)?;
        // a late result on an expired lease of this unit would answer the unit as it was
        tx.supersede_expired_leases(row.id)?;
        tx.set_unit_path(row.id, &remaining)?;
        for (depth, n) in by_depth {
            tx.add_split_nodes(row.job_id, depth, n)?;
        }
        Ok(!siblings.is_empty())
    }

    /// A worker found nothing to do: if a unit has run long on a job with nothing else to
    /// lease, its lease is asked to stop at its exact cursor and report (heard at its
    /// worker's next heartbeat). The stopped run counts (only such units are asked: the
    /// operator's, quorum one, no other run), and the rest becomes a continuation that
    /// the next idle lease call splits into sibling units. At most once a second, and one
    /// unit a job at a time.
    fn ask_running_unit_to_yield(&self, tx: &mut dyn Tx, now: i64) -> Result<(), FleetError> {
        let last = self.last_yield_ms.load(Ordering::Relaxed);
        if (now - last < YIELD_LOOK_EVERY_MS && now >= last) || !tx.run_alone()? {
            return Ok(());
        }
        self.last_yield_ms.store(now, Ordering::Relaxed);
        if let Some(lease) = tx.yield_candidate(now - YIELD_AFTER_MS, now - YIELD_PATIENCE_MS)? {
            tx.request_yield(lease, now)?;
            info!(lease_id = %lease, "a long-running unit asked to stop at its cursor for idle threads");
        }
        Ok(())
    }

    /// Gives a worker's unstarted leases back to the queue.
    pub async fn release_leases(
        &self,
        worker: &WorkerRecord,
        lease_ids: &[LeaseId],
    ) -> Result<usize, FleetError> {
        let worker_id = worker.id;
        let lease_ids: Vec<LeaseId> = lease_ids
            .iter()
            .take(MAX_LEASES_PER_CALL)
            .copied()
            .collect();
        let n = self
            .store
            .write(move |tx| {
                let mut n = 0;
                for id in &lease_ids {
                    if let Some(unit_id) = tx.release_lease(*id, worker_id)? {
                        tx.lease_returned(unit_id)?;
                        n += 1;
                    }
                }
                Ok::<_, FleetError>(n)
            })
            .await?;
        info!(worker_id = %worker.id, released = n, "leases released");
        Ok(n)
    }
}

/// A lease request waiting for its batch ([`super::batches`]).
pub(super) struct QueuedLease {
    worker: WorkerRecord,
    max: usize,
    engine: Option<(EngineKind, String)>,
    probes: bool,
    now: i64,
}

impl Fleet {
    /// Expires overdue leases at most once a second, when this write excludes report
    /// batches (a report is decided by whether its lease is still active); else the
    /// next lease write tries, and the background task expires them in any case.
    fn expire_now_and_then(&self, tx: &mut dyn Tx, now: i64) -> Result<(), FleetError> {
        let last = self.last_expiry_ms.load(Ordering::Relaxed);
        if (now - last >= 1000 || now < last) && tx.run_alone()? {
            expire(tx, now)?;
            self.last_expiry_ms.store(now, Ordering::Relaxed);
        }
        Ok(())
    }
}

fn expire(tx: &mut dyn Tx, now: i64) -> Result<usize, FleetError> {
    let expired = tx.expire_overdue_leases(now)?;
    for unit_id in &expired {
        tx.lease_returned(*unit_id)?;
    }
    if !expired.is_empty() {
        info!(leases = expired.len(), "leases expired");
    }
    Ok(expired.len())
}
