//! Leases: handing out units (with expiry and idle-time continuation splitting),
//! heartbeats and releases. Each operation is one job on the store's writer thread
//! ([`Store::write`]); the `*_tx` functions are its synchronous body.

use rusqlite::Connection;

use super::*;

impl Fleet {
    /// Returns expired leases' units to the queue.
    pub async fn expire_leases(&self) -> Result<usize, FleetError> {
        let now = self.now();
        self.store.write(move |c| expire(c, now)).await
    }

    /// Leases up to `max` units to a worker.
    pub async fn lease_units(
        self: &Arc<Self>,
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
        let (fleet, worker) = (self.clone(), worker.clone());
        let engine = (engine.0.to_string(), engine.1.to_string());
        self.store
            .write(move |c| fleet.lease_tx(c, &worker, max, (&engine.0, &engine.1), now))
            .await
    }

    fn lease_tx(
        &self,
        c: &Connection,
        worker: &WorkerRow,
        max: i64,
        engine: (&str, &str),
        now: i64,
    ) -> Result<Vec<LeaseGrant>, FleetError> {
        // overdue leases go back to the queue before handing out work; the background
        // task does this too, so here it runs at most once a second
        let last = self
            .last_expiry_ms
            .load(std::sync::atomic::Ordering::Relaxed);
        if now - last >= 1000 || now < last {
            expire(c, now)?;
            self.last_expiry_ms
                .store(now, std::sync::atomic::Ordering::Relaxed);
        }
        let quarantined = workers::touch(c, &worker.id, now, None, Some(engine))?;
        if quarantined.is_none_or(|q| q) {
            return Ok(Vec::new());
        }
        let mut rows = units::leasable(c, &worker.hostname, max)?;
        if (rows.len() as i64) < max {
            // idle capacity: split a waiting continuation into sibling prefixes
            // (a unit that cannot be split is logged and left as it is: this path has
            // already written, and a failure here would roll back its whole batch)
            if let Some(unit) = units::splittable(c)? {
                match self.split_unit(c, &unit, now) {
                    // read the units again even when no sibling was made: the split
                    // still moved the unit's first cursor step into its prefix, and a
                    // lease must hand out the unit as it is stored (it may be in `rows`)
                    Ok(_) => rows = units::leasable(c, &worker.hostname, max)?,
                    Err(FleetError::Store(e @ (StoreError::Sqlite(_) | StoreError::Db(_)))) => {
                        return Err(e.into());
                    }
                    Err(e) => warn!(unit_id = unit.id, error = %e, "continuation not split"),
                }
            }
        }
        let mut grants = Vec::with_capacity(rows.len());
        for row in rows {
            // a job's budget never changes: read from the cached job context
            let budget = self.context_tx(c, &row.job_id)?.budget;
            let lease = LeaseRow {
                // a v4 UUID from the thread-local CSPRNG (`new_v4` asks the kernel for
                // every id: a system call per lease on the writer thread)
                id: uuid::Builder::from_random_bytes(rand::random())
                    .into_uuid()
                    .to_string(),
                unit_id: row.id,
                worker_id: worker.id.clone(),
                hostname: worker.hostname.clone(),
                budget,
                created_ms: now,
                deadline_ms: now + self.config.lease.as_millis() as i64,
                state: "active".into(),
            };
            leases::insert(c, &lease)?;
            units::adjust(c, row.id, 1, 0, None)?;
            self.remember_lease(
                &lease.id,
                LeasedUnit {
                    job_id: row.job_id.clone(),
                    budget,
                    prefix_json: row.prefix_json.clone(),
                    cursor_json: row.cursor_json.clone(),
                },
            );
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
        Ok(grants)
    }

    fn split_unit(&self, c: &Connection, row: &UnitRow, now: i64) -> Result<bool, FleetError> {
        let ctx = self.context_tx(c, &row.job_id)?;
        let unit = Unit {
            prefix: units::decode_path(&row.prefix_json, "prefix")?,
            cursor: units::decode_path(&row.cursor_json, "cursor")?,
        };
        let split = Walker::new(&ctx.plan)
            .split_continuation(&unit)
            .map_err(|e| {
                FleetError::FailedPrecondition(format!("cannot split unit {}: {e}", row.id))
            })?;
        let job = jobs::get_tx(c, &row.job_id)?.expect("unit has a job");
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
        units::insert_batch(c, &row.job_id, &siblings, now)?;
        units::set_path(
            c,
            row.id,
            &units::encode_path(&split.remaining.prefix),
            &units::encode_path(&split.remaining.cursor),
        )?;
        jobs::set_totals(
            c,
            &row.job_id,
            &job.counts("accepted")?,
            job.accepted_solutions,
            &split_counts,
        )?;
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
        let worker_id = worker.id.clone();
        let lease_ids: Vec<String> = lease_ids.iter().take(1024).cloned().collect();
        let rate = rate.is_finite().then_some((rate.max(0.0), threads as i64));
        self.store
            .write(move |c| {
                let mut stop = Vec::new();
                for id in lease_ids {
                    if !leases::extend(c, &id, &worker_id, deadline)? {
                        stop.push(id);
                    }
                }
                workers::touch(c, &worker_id, now, rate, None)?;
                Ok((deadline, stop))
            })
            .await
    }

    /// Gives a worker's unstarted leases back to the queue.
    pub async fn release_leases(
        &self,
        worker: &WorkerRow,
        lease_ids: &[String],
    ) -> Result<usize, FleetError> {
        let worker_id = worker.id.clone();
        let lease_ids: Vec<String> = lease_ids.iter().take(1024).cloned().collect();
        let n = self
            .store
            .write(move |c| {
                let mut n = 0;
                for id in &lease_ids {
                    if let Some(unit_id) = leases::release(c, id, &worker_id)? {
                        units::adjust(c, unit_id, -1, 0, None)?;
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

fn expire(c: &Connection, now: i64) -> Result<usize, FleetError> {
    let expired = leases::expire_overdue(c, now)?;
    for unit_id in &expired {
        units::adjust(c, *unit_id, -1, 0, None)?;
    }
    if !expired.is_empty() {
        info!(leases = expired.len(), "leases expired");
    }
    Ok(expired.len())
}
