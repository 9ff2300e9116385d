//! Leases: handing out units (with expiry and idle-time continuation splitting),
//! heartbeats and releases.

use super::*;

impl Fleet {
    /// Returns expired leases' units to the queue.
    pub async fn expire_leases(&self) -> Result<usize, FleetError> {
        let mut tx = self.store.begin().await?;
        let n = expire(&mut tx, self.now()).await?;
        tx.commit().await?;
        Ok(n)
    }

    /// Leases up to `max` units to a worker.
    pub async fn lease_units(
        &self,
        worker: &WorkerRow,
        max: usize,
        engine: (&str, &str),
    ) -> Result<Vec<LeaseGrant>, FleetError> {
        let max = max.clamp(1, 256) as i64;
        if let Some(reason) = self.flagged_reason(&worker.class_id).await? {
            return Err(FleetError::FailedPrecondition(format!(
                "no real work for hardware class {}: {reason}; run a fixed build (e2fleet-worker verify --coordinator ...)",
                worker.class_id
            )));
        }
        let now = self.now();
        let mut tx = self.store.begin().await?;
        // overdue leases go back to the queue before handing out work; the background
        // task does this too, so here it runs at most once a second
        let last = self
            .last_expiry_ms
            .load(std::sync::atomic::Ordering::Relaxed);
        if now - last >= 1000 || now < last {
            expire(&mut tx, now).await?;
            self.last_expiry_ms
                .store(now, std::sync::atomic::Ordering::Relaxed);
        }
        let quarantined = workers::touch(&mut tx, &worker.id, now, None, Some(engine)).await?;
        if quarantined.is_none_or(|q| q) {
            tx.commit().await?;
            return Ok(Vec::new());
        }
        let mut rows = units::leasable(&mut tx, &worker.hostname, max).await?;
        if (rows.len() as i64) < max {
            // idle capacity: split a waiting continuation into sibling prefixes
            if let Some(unit) = units::splittable(&mut tx).await?
                && self.split_unit(&mut tx, &unit, now).await?
            {
                rows = units::leasable(&mut tx, &worker.hostname, max).await?;
            }
        }
        let mut grants = Vec::with_capacity(rows.len());
        for row in rows {
            // a job's budget never changes: read from the cached job context
            let budget = self.context(&row.job_id).await?.budget;
            let lease = LeaseRow {
                id: uuid::Uuid::new_v4().to_string(),
                unit_id: row.id,
                worker_id: worker.id.clone(),
                hostname: worker.hostname.clone(),
                budget,
                created_ms: now,
                deadline_ms: now + self.config.lease.as_millis() as i64,
                state: "active".into(),
            };
            leases::insert(&mut tx, &lease).await?;
            units::adjust(&mut tx, row.id, 1, 0, None).await?;
            grants.push(LeaseGrant {
                lease_id: lease.id,
                unit_id: row.id,
                job_id: row.job_id.clone(),
                unit: Unit {
                    prefix: units::decode_path(&row.prefix_json, "prefix")?,
                    cursor: units::decode_path(&row.cursor_json, "cursor")?,
                },
                budget: (budget > 0).then_some(budget as u64),
                deadline_ms: lease.deadline_ms,
            });
        }
        tx.commit().await?;
        Ok(grants)
    }

    async fn split_unit(&self, tx: &mut Tx, row: &UnitRow, now: i64) -> Result<bool, FleetError> {
        let ctx = self.context(&row.job_id).await?;
        let unit = Unit {
            prefix: units::decode_path(&row.prefix_json, "prefix")?,
            cursor: units::decode_path(&row.cursor_json, "cursor")?,
        };
        let split = Walker::new(&ctx.plan)
            .split_continuation(&unit)
            .map_err(|e| {
                FleetError::FailedPrecondition(format!("cannot split unit {}: {e}", row.id))
            })?;
        let job = jobs::get(tx, &row.job_id).await?.expect("unit has a job");
        let mut split_counts = job.counts("split")?;
        let depth = unit.prefix.len();
        split_counts[depth] += split.siblings.len() as u64;
        let siblings: Vec<NewUnit> = split
            .siblings
            .iter()
            .map(|s| NewUnit {
                prefix_json: units::encode_path(&s.prefix),
                cursor_json: "[]".into(),
                parent_id: Some(row.id),
                kind: "split",
                quorum: row.quorum,
            })
            .collect();
        units::insert_batch(tx, &row.job_id, &siblings, now).await?;
        units::set_path(
            tx,
            row.id,
            &units::encode_path(&split.remaining.prefix),
            &units::encode_path(&split.remaining.cursor),
        )
        .await?;
        jobs::set_totals(
            tx,
            &row.job_id,
            &job.counts("accepted")?,
            job.accepted_solutions,
            &split_counts,
        )
        .await?;
        Ok(!siblings.is_empty())
    }

    /// Extends a worker's leases; returns the new deadline and the leases it must stop.
    pub async fn heartbeat(
        &self,
        worker: &WorkerRow,
        lease_ids: &[String],
        rate: f64,
        threads: u32,
    ) -> Result<(i64, Vec<String>), FleetError> {
        let now = self.now();
        let deadline = now + self.config.lease.as_millis() as i64;
        let mut tx = self.store.begin().await?;
        let mut stop = Vec::new();
        for id in lease_ids.iter().take(1024) {
            if !leases::extend(&mut tx, id, &worker.id, deadline).await? {
                stop.push(id.clone());
            }
        }
        let rate = rate.is_finite().then_some((rate.max(0.0), threads as i64));
        workers::touch(&mut tx, &worker.id, now, rate, None).await?;
        tx.commit().await?;
        Ok((deadline, stop))
    }

    /// Gives a worker's unstarted leases back to the queue.
    pub async fn release_leases(
        &self,
        worker: &WorkerRow,
        lease_ids: &[String],
    ) -> Result<usize, FleetError> {
        let mut tx = self.store.begin().await?;
        let mut n = 0;
        for id in lease_ids.iter().take(1024) {
            if let Some(unit_id) = leases::release(&mut tx, id, &worker.id).await? {
                units::adjust(&mut tx, unit_id, -1, 0, None).await?;
                n += 1;
            }
        }
        tx.commit().await?;
        info!(worker_id = %worker.id, released = n, "leases released");
        Ok(n)
    }
}

async fn expire(tx: &mut Tx, now: i64) -> Result<usize, FleetError> {
    let expired = leases::expire_overdue(tx, now).await?;
    for unit_id in &expired {
        units::adjust(tx, *unit_id, -1, 0, None).await?;
    }
    if !expired.is_empty() {
        info!(leases = expired.len(), "leases expired");
    }
    Ok(expired.len())
}
