//! Reports: recording each result exactly once, verifying it, and deciding units by
//! quorum (accept, confirm, overturn with revocation, or ask for a deciding run).

use super::*;

impl Fleet {
    /// Records one result, exactly once, and decides its unit when a quorum agrees.
    pub async fn report(
        &self,
        worker: &WorkerRow,
        report: Report,
    ) -> Result<ReportOutcome, FleetError> {
        let now = self.now();
        let mut tx = self.store.begin().await?;
        let lease = leases::get(&mut tx, &report.lease_id)
            .await?
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
        let digest = result_digest(&report.result);
        if let Some(existing) = results::by_lease(&mut tx, &lease.id).await? {
            tx.commit().await?;
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
        let unit = units::get(&mut tx, lease.unit_id)
            .await?
            .expect("lease has a unit");
        let job = jobs::get(&mut tx, &unit.job_id)
            .await?
            .expect("unit has a job");
        let lease_was_active = lease.state == "active";
        leases::set_state(&mut tx, &lease.id, "reported").await?;
        if unit.state == "cancelled" || job.state == "cancelled" {
            if lease_was_active {
                units::adjust(&mut tx, unit.id, -1, 0, None).await?;
            }
            tx.commit().await?;
            return Ok(ReportOutcome {
                status: "rejected",
                detail: "the unit was cancelled".into(),
            });
        }
        let ctx = self.context(&unit.job_id).await?;
        let unit_value = Unit {
            prefix: units::decode_path(&unit.prefix_json, "prefix")?,
            cursor: units::decode_path(&unit.cursor_json, "cursor")?,
        };
        let check = check_result(&ctx, &unit_value, lease.budget, &report.result);
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
            result_json: to_json(&report.result),
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
        results::insert(&mut tx, &row).await?;
        if let Err(why) = check {
            warn!(worker_id = %worker.id, unit_id = unit.id, %why, "result failed verification");
            if lease_was_active {
                units::adjust(&mut tx, unit.id, -1, 0, None).await?;
            }
            let quarantined =
                workers::add_error(&mut tx, &worker.id, self.config.quarantine_after).await?;
            tx.commit().await?;
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
        units::adjust(
            &mut tx,
            unit.id,
            if lease_was_active { -1 } else { 0 },
            1,
            None,
        )
        .await?;
        let outcome = self.decide(&mut tx, unit.id, &row.lease_id, now).await?;
        if outcome.status == "mismatch" && jobs::reopen(&mut tx, &unit.job_id).await? {
            warn!(job_id = %unit.job_id, unit_id = unit.id, "a late result disputes a completed job; re-opened for a deciding run");
        }
        // only a unit that just became (or stayed) done can complete its job
        if matches!(outcome.status, "accepted" | "replica" | "wrong") {
            finish_if_done(&mut tx, &unit.job_id, now).await?;
        }
        tx.commit().await?;
        Ok(outcome)
    }

    /// Looks at all valid results of a unit and accepts, confirms, overturns or asks for
    /// a deciding run.
    async fn decide(
        &self,
        tx: &mut Tx,
        unit_id: i64,
        lease_id: &str,
        now: i64,
    ) -> Result<ReportOutcome, FleetError> {
        let unit = units::get(tx, unit_id).await?.expect("unit exists");
        let valid = results::for_unit(tx, unit_id).await?;
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
            Some(id) => results::get(tx, id).await?,
            None => None,
        };
        let mine = valid
            .iter()
            .find(|r| r.lease_id == lease_id)
            .expect("just inserted");
        if (best.len() as i64) < quorum {
            units::request_deciding_run(tx, unit_id, quorum).await?;
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
                results::set_verdict(tx, r.id, "wrong").await?;
                if workers::add_error(tx, &r.worker_id, self.config.quarantine_after).await? {
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
                    self.revoke(tx, &unit, old).await?;
                }
                self.accept(tx, &unit, winner, now).await?;
                winner.id
            }
        };
        for r in &best {
            if r.id != accepted_id {
                results::set_verdict(tx, r.id, "agree").await?;
            }
        }
        units::mark_done(tx, unit_id, accepted_id).await?;
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

    async fn accept(
        &self,
        tx: &mut Tx,
        unit: &UnitRow,
        r: &ResultRow,
        now: i64,
    ) -> Result<(), FleetError> {
        let result: UnitResult = parse_json(&r.result_json, "result")?;
        let job = jobs::get(tx, &unit.job_id).await?.expect("unit has a job");
        let mut accepted = job.counts("accepted")?;
        add_counts(&mut accepted, &result.nodes_by_depth);
        jobs::set_totals(
            tx,
            &job.id,
            &accepted,
            job.accepted_solutions + result.solutions_count as i64,
            &job.counts("split")?,
        )
        .await?;
        results::set_verdict(tx, r.id, "accepted").await?;
        workers::add_done(tx, &r.worker_id).await?;
        if let Some(cursor) = result.cursor {
            let quorum = quorum_for(
                &job.id,
                unit.id as u64 ^ 0x5bd1_e995,
                job.replicas as u32,
                job.spot_check,
            );
            let child = NewUnit {
                prefix_json: unit.prefix_json.clone(),
                cursor_json: units::encode_path(&cursor),
                parent_id: Some(unit.id),
                kind: "continuation",
                quorum,
            };
            units::insert_batch(tx, &job.id, &[child], now).await?;
        }
        Ok(())
    }

    /// Takes an accepted result back out of the totals, with everything created from it.
    async fn revoke(&self, tx: &mut Tx, unit: &UnitRow, r: &ResultRow) -> Result<(), FleetError> {
        let result: UnitResult = parse_json(&r.result_json, "result")?;
        self.subtract(
            tx,
            &unit.job_id,
            &result.nodes_by_depth,
            result.solutions_count,
            None,
        )
        .await?;
        results::set_verdict(tx, r.id, "wrong").await?;
        let _ = workers::add_error(tx, &r.worker_id, self.config.quarantine_after).await?;
        let mut stack: Vec<UnitRow> = units::children(tx, unit.id)
            .await?
            .into_iter()
            .filter(|c| c.kind == "continuation")
            .collect();
        while let Some(child) = stack.pop() {
            if child.kind == "split" {
                let depth = units::decode_path(&child.prefix_json, "prefix")?;
                self.subtract(tx, &child.job_id, &[], 0, Some(depth.len() - 1))
                    .await?;
            }
            if let Some(id) = child.accepted_result_id
                && let Some(accepted) = results::get(tx, id).await?
            {
                let res: UnitResult = parse_json(&accepted.result_json, "result")?;
                self.subtract(
                    tx,
                    &child.job_id,
                    &res.nodes_by_depth,
                    res.solutions_count,
                    None,
                )
                .await?;
                results::set_verdict(tx, id, "wrong").await?;
            }
            units::cancel(tx, child.id).await?;
            stack.extend(units::children(tx, child.id).await?);
        }
        Ok(())
    }

    async fn subtract(
        &self,
        tx: &mut Tx,
        job_id: &str,
        nodes: &[u64],
        solutions: u64,
        split_depth_index: Option<usize>,
    ) -> Result<(), FleetError> {
        let job = jobs::get(tx, job_id).await?.expect("job exists");
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
        )
        .await?;
        Ok(())
    }
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
