//! Reports: recording each result exactly once, verifying it, and deciding units by
//! quorum (accept, confirm, overturn with revocation, or ask for a deciding run). A
//! report is one job on the store's writer thread ([`Store::write`]).

use rusqlite::Connection;

use super::*;

impl Fleet {
    /// Records one result, exactly once, and decides its unit when a quorum agrees.
    pub async fn report(
        self: &Arc<Self>,
        worker: &WorkerRow,
        report: Report,
    ) -> Result<ReportOutcome, FleetError> {
        let now = self.now();
        // the CPU work (digest, encoding, verification) happens here, in parallel, not
        // on the writer thread that every write queues for
        let digest = result_digest(&report.result);
        let result_json = to_json(&report.result);
        let pre = self.precheck(&report).await?;
        let (fleet, worker) = (self.clone(), worker.clone());
        self.store
            .write(move |c| fleet.report_tx(c, &worker, report, (digest, result_json), pre, now))
            .await
    }

    /// Verifies a report against its unit as granted (remembered at lease time, or read)
    /// before the write ([`check_result`]); `None` for an unknown lease (the write path
    /// answers that).
    async fn precheck(&self, report: &Report) -> Result<Option<Prechecked>, FleetError> {
        let LeasedUnit {
            job_id,
            budget,
            prefix_json,
            cursor_json,
        } = match self.recall_lease(&report.lease_id) {
            Some(hint) => hint,
            None => {
                // not granted by this process (a restart) or reported twice: read it
                let mut conn = self.store.pool().acquire().await?;
                let Some((budget, job_id, prefix_json, cursor_json)) =
                    leases::with_unit(&mut conn, &report.lease_id).await?
                else {
                    return Ok(None);
                };
                LeasedUnit {
                    job_id,
                    budget,
                    prefix_json,
                    cursor_json,
                }
            }
        };
        let ctx = self.context(&job_id).await?;
        let unit = Unit {
            prefix: units::decode_path(&prefix_json, "prefix")?,
            cursor: units::decode_path(&cursor_json, "cursor")?,
        };
        let check = check_result(&ctx, &unit, budget, &report.result);
        Ok(Some(Prechecked {
            budget,
            prefix_json,
            cursor_json,
            check,
        }))
    }

    fn report_tx(
        &self,
        tx: &Connection,
        worker: &WorkerRow,
        report: Report,
        (digest, result_json): (String, String),
        pre: Option<Prechecked>,
        now: i64,
    ) -> Result<ReportOutcome, FleetError> {
        let lease = leases::get(tx, &report.lease_id)?
            .ok_or_else(|| FleetError::NotFound(format!("lease {}", report.lease_id)))?;
        if lease.worker_id != worker.id {
            return Err(FleetError::PermissionDenied(
                "the lease belongs to another worker".into(),
            ));
        }
        if lease.unit_id != report.unit_id {
            return Err(FleetError::InvalidArgument(
                "the lease is for another unit".into(),
            ));
        }
        if let Some(existing) = results::by_lease(tx, &lease.id)? {
            return if existing.digest == digest {
                Ok(ReportOutcome {
                    status: "duplicate",
                    detail: "already recorded".into(),
                })
            } else {
                Err(FleetError::InvalidArgument(
                    "a different result was already reported on this lease".into(),
                ))
            };
        }
        let unit = units::get(tx, lease.unit_id)?.expect("lease has a unit");
        let job = jobs::head_tx(tx, &unit.job_id)?.expect("unit has a job");
        // everything that can refuse the report is decided before the first write (a
        // failure after one would roll back the writer's whole batch)
        let check = match pre {
            // the unit is as it was when the report was checked (it is only rewritten
            // by a split, which needs it unleased: rare, but then check again here)
            Some(p)
                if p.budget == lease.budget
                    && p.prefix_json == unit.prefix_json
                    && p.cursor_json == unit.cursor_json =>
            {
                p.check
            }
            _ => {
                let ctx = self.context_tx(tx, &unit.job_id)?;
                let unit_value = Unit {
                    prefix: units::decode_path(&unit.prefix_json, "prefix")?,
                    cursor: units::decode_path(&unit.cursor_json, "cursor")?,
                };
                check_result(&ctx, &unit_value, lease.budget, &report.result)
            }
        };
        let lease_was_active = lease.state == "active";
        leases::set_state(tx, &lease.id, "reported")?;
        if unit.state == "cancelled" || job.state == "cancelled" {
            if lease_was_active {
                units::adjust(tx, unit.id, -1, 0, None)?;
            }
            return Ok(ReportOutcome {
                status: "rejected",
                detail: "the unit was cancelled".into(),
            });
        }
        let row = ResultRow {
            id: 0,
            job_id: unit.job_id.clone(),
            unit_id: unit.id,
            lease_id: lease.id.clone(),
            worker_id: worker.id.clone(),
            hostname: worker.hostname.clone(),
            cpu_model: worker.cpu_model.clone(),
            engine_kind: report.engine_kind.clone(),
            engine_build: report.engine_build.clone(),
            digest,
            result_json,
            committed: report.result.committed as i64,
            solutions: report.result.solutions_count as i64,
            max_depth: report.result.max_depth as i64,
            engine_seconds: if report.engine_seconds.is_finite() {
                report.engine_seconds.max(0.0)
            } else {
                0.0
            },
            verdict: if check.is_ok() { "pending" } else { "wrong" }.into(),
            received_ms: now,
        };
        results::insert(tx, &row)?;
        if let Err(why) = check {
            warn!(worker_id = %worker.id, unit_id = unit.id, %why, "result failed verification");
            if lease_was_active {
                units::adjust(tx, unit.id, -1, 0, None)?;
            }
            let quarantined = workers::add_error(tx, &worker.id, self.config.quarantine_after)?;
            return Ok(ReportOutcome {
                status: "rejected",
                detail: format!(
                    "{why}{}",
                    if quarantined {
                        "; host quarantined"
                    } else {
                        ""
                    }
                ),
            });
        }
        units::adjust(tx, unit.id, if lease_was_active { -1 } else { 0 }, 1, None)?;
        let outcome = self.decide(tx, (&job, &unit), (&row.lease_id, &report.result), now)?;
        if outcome.status == "mismatch" && jobs::reopen(tx, &unit.job_id)? {
            warn!(job_id = %unit.job_id, unit_id = unit.id, "a late result disputes a completed job; re-opened for a deciding run");
        }
        // only a unit that just became (or stayed) done can complete its job
        if matches!(outcome.status, "accepted" | "replica" | "wrong") {
            finish_if_done(tx, &unit.job_id, now)?;
        }
        Ok(outcome)
    }

    /// Looks at all valid results of a unit and accepts, confirms, overturns or asks for
    /// a deciding run.
    fn decide(
        &self,
        tx: &Connection,
        (job, unit): (&JobHead, &UnitRow),
        (lease_id, result): (&str, &UnitResult),
        now: i64,
    ) -> Result<ReportOutcome, FleetError> {
        // `unit` was read before this report's counters changed: its quorum, accepted
        // result and path are what decide uses, and those are still current
        let unit_id = unit.id;
        let valid = results::for_unit(tx, unit_id)?;
        let mut groups: Vec<(String, Vec<&ResultRow>)> = Vec::new();
        for r in &valid {
            match groups.iter_mut().find(|(d, _)| *d == r.digest) {
                Some((_, g)) => g.push(r),
                None => groups.push((r.digest.clone(), vec![r])),
            }
        }
        let disputed = groups.len() > 1;
        let quorum = if disputed {
            unit.quorum.max(2)
        } else {
            unit.quorum
        };
        let (best_digest, best) = groups
            .iter()
            .max_by(|a, b| a.1.len().cmp(&b.1.len()).then(b.1[0].id.cmp(&a.1[0].id)))
            .map(|(d, g)| (d.clone(), g.clone()))
            .expect("the new result is valid");
        let current = match unit.accepted_result_id {
            Some(id) => results::get(tx, id)?,
            None => None,
        };
        let mine = valid
            .iter()
            .find(|r| r.lease_id == lease_id)
            .expect("just inserted");
        if (best.len() as i64) < quorum {
            units::request_deciding_run(tx, unit_id, quorum)?;
            return Ok(ReportOutcome {
                status: if disputed {
                    "mismatch"
                } else {
                    "pending_check"
                },
                detail: format!("{} of {quorum} agreeing results", best.len()),
            });
        }
        // a quorum exists: losers are wrong
        for (digest, group) in &groups {
            if *digest == best_digest {
                continue;
            }
            for r in group {
                results::set_verdict(tx, r.id, "wrong")?;
                if workers::add_error(tx, &r.worker_id, self.config.quarantine_after)? {
                    warn!(worker_id = %r.worker_id, hostname = %r.hostname, "host quarantined after wrong results");
                }
            }
        }
        let winner = best[0];
        let accepted_id = match &current {
            Some(c) if c.digest == best_digest => c.id,
            other => {
                if let Some(old) = other {
                    warn!(unit_id, "accepted result overturned by a quorum");
                    self.revoke(tx, unit, old)?;
                }
                // the new result is in hand: no need to parse it back
                let parsed;
                let winner_result = if winner.lease_id == lease_id {
                    result
                } else {
                    // (rows from `results::for_unit` come without their result)
                    let stored = results::get(tx, winner.id)?.expect("winner is stored");
                    parsed = parse_json::<UnitResult>(&stored.result_json, "result")?;
                    &parsed
                };
                self.accept(tx, (job, unit), (winner, winner_result), now)?;
                winner.id
            }
        };
        for r in &best {
            if r.id != accepted_id {
                results::set_verdict(tx, r.id, "agree")?;
            }
        }
        units::mark_done(tx, unit_id, accepted_id)?;
        let status = if mine.digest != best_digest {
            "wrong"
        } else if mine.id == accepted_id {
            "accepted"
        } else {
            "replica"
        };
        Ok(ReportOutcome {
            status,
            detail: format!("{} agreeing of quorum {quorum}", best.len()),
        })
    }

    fn accept(
        &self,
        tx: &Connection,
        (job, unit): (&JobHead, &UnitRow),
        (r, result): (&ResultRow, &UnitResult),
        now: i64,
    ) -> Result<(), FleetError> {
        // the running totals are read fresh (a revocation in this report may have
        // changed them); only the accepted column is parsed and rewritten
        let (mut accepted, solutions) = jobs::accepted_tx(tx, &job.id)?;
        add_counts(&mut accepted, &result.nodes_by_depth);
        jobs::set_accepted(
            tx,
            &job.id,
            &accepted,
            solutions + result.solutions_count as i64,
        )?;
        results::set_verdict(tx, r.id, "accepted")?;
        workers::add_done(tx, &r.worker_id)?;
        if let Some(cursor) = &result.cursor {
            let quorum = quorum_for(
                &job.id,
                unit.id as u64 ^ 0x5bd1_e995,
                job.replicas as u32,
                job.spot_check,
            );
            let child = NewUnit {
                prefix_json: unit.prefix_json.clone(),
                cursor_json: units::encode_path(cursor),
                parent_id: Some(unit.id),
                kind: "continuation",
                quorum,
            };
            units::insert_batch(tx, &job.id, &[child], now)?;
        }
        Ok(())
    }

    /// Takes an accepted result back out of the totals, with everything created from it.
    fn revoke(&self, tx: &Connection, unit: &UnitRow, r: &ResultRow) -> Result<(), FleetError> {
        let result: UnitResult = parse_json(&r.result_json, "result")?;
        self.subtract(
            tx,
            &unit.job_id,
            &result.nodes_by_depth,
            result.solutions_count,
            None,
        )?;
        results::set_verdict(tx, r.id, "wrong")?;
        let _ = workers::add_error(tx, &r.worker_id, self.config.quarantine_after)?;
        let mut stack: Vec<UnitRow> = units::children(tx, unit.id)?
            .into_iter()
            .filter(|c| c.kind == "continuation")
            .collect();
        while let Some(child) = stack.pop() {
            if child.kind == "split" {
                let depth = units::decode_path(&child.prefix_json, "prefix")?;
                self.subtract(tx, &child.job_id, &[], 0, Some(depth.len() - 1))?;
            }
            if let Some(id) = child.accepted_result_id
                && let Some(accepted) = results::get(tx, id)?
            {
                let res: UnitResult = parse_json(&accepted.result_json, "result")?;
                self.subtract(
                    tx,
                    &child.job_id,
                    &res.nodes_by_depth,
                    res.solutions_count,
                    None,
                )?;
                results::set_verdict(tx, id, "wrong")?;
            }
            units::cancel(tx, child.id)?;
            stack.extend(units::children(tx, child.id)?);
        }
        Ok(())
    }

    fn subtract(
        &self,
        tx: &Connection,
        job_id: &str,
        nodes: &[u64],
        solutions: u64,
        split_depth_index: Option<usize>,
    ) -> Result<(), FleetError> {
        let job = jobs::get_tx(tx, job_id)?.expect("job exists");
        let mut accepted = job.counts("accepted")?;
        for (a, n) in accepted.iter_mut().zip(nodes) {
            *a -= n;
        }
        let mut split = job.counts("split")?;
        if let Some(d) = split_depth_index {
            split[d] -= 1;
        }
        jobs::set_totals(
            tx,
            job_id,
            &accepted,
            job.accepted_solutions - solutions as i64,
            &split,
        )?;
        Ok(())
    }
}

/// A report verified before its write, with what it was verified against.
struct Prechecked {
    budget: i64,
    prefix_json: String,
    cursor_json: String,
    check: Result<(), String>,
}

/// Checks what can be checked of a result without re-running it: shape, counts above the
/// prefix, the budget, the cursor, every solution and the deepest board.
fn check_result(ctx: &JobCtx, unit: &Unit, budget: i64, r: &UnitResult) -> Result<(), String> {
    let depths = ctx.plan.len();
    let floor = unit.prefix.len();
    if r.nodes_by_depth.len() != depths {
        return Err(format!(
            "nodes_by_depth has {} entries, expected {depths}",
            r.nodes_by_depth.len()
        ));
    }
    if r.nodes_by_depth[..floor].iter().any(|&n| n != 0) {
        return Err("nodes counted at or above the unit's prefix".into());
    }
    if budget > 0 && r.committed > budget as u64 {
        return Err(format!(
            "committed {} nodes, above the budget {budget}",
            r.committed
        ));
    }
    if let Some(cursor) = &r.cursor {
        if budget > 0
            && r.stop == Some(e2fleet_engine::unit::StopReason::Budget)
            && r.committed != budget as u64
        {
            return Err("a budget stop must commit exactly the budget".into());
        }
        let mut path = unit.prefix.clone();
        path.extend_from_slice(cursor);
        verify_board(&ctx.puzzle, &path, false).map_err(|e| format!("cursor: {e}"))?;
        Walker::new(&ctx.plan)
            .check_path(&path)
            .map_err(|e| format!("cursor: {e}"))?;
    }
    if (r.solutions.len() as u64) > r.solutions_count
        || (depths > 0 && r.solutions_count != r.nodes_by_depth[depths - 1])
    {
        return Err("solution count disagrees with the last depth's node count".into());
    }
    for s in &r.solutions {
        verify_board(&ctx.puzzle, s, true).map_err(|e| format!("solution: {e}"))?;
        if !unit.prefix.iter().all(|p| s.contains(p)) {
            return Err("a solution does not extend the unit's prefix".into());
        }
    }
    if r.max_depth > depths || r.deepest.len() != r.max_depth {
        return Err("deepest board and max_depth disagree".into());
    }
    verify_board(&ctx.puzzle, &r.deepest, false).map_err(|e| format!("deepest board: {e}"))?;
    Walker::new(&ctx.plan)
        .check_path(&r.deepest)
        .map_err(|e| format!("deepest board: {e}"))?;
    Ok(())
}
