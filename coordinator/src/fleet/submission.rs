//! Jobs: submission (validation, split depth, enumeration into units), specs with
//! self-tests for workers, cancellation.

use super::*;

impl Fleet {
    /// Validates, splits and stores a job; returns (job id, units, split depth).
    pub async fn submit_job(
        &self,
        request: JobRequest,
    ) -> Result<(String, usize, usize), FleetError> {
        if request.replicas == 0 || request.replicas > 9 {
            return Err(FleetError::InvalidArgument("replicas must be 1..=9".into()));
        }
        if !(0.0..=1.0).contains(&request.spot_check) {
            return Err(FleetError::InvalidArgument(
                "spot_check must be within 0..=1".into(),
            ));
        }
        if request.budget == Some(0) {
            return Err(FleetError::InvalidArgument(
                "a budget must be at least 1 node".into(),
            ));
        }
        let ctx = job_context(
            &request.puzzle_json,
            &request.order,
            request.budget.unwrap_or(0) as i64,
        )?;
        let depths = ctx.plan.len();
        let depth = match request.split_depth {
            Some(d) if d > depths => {
                return Err(FleetError::InvalidArgument(format!(
                    "split depth {d} is past the {depths} free cells"
                )));
            }
            Some(d) => d,
            None => choose_split_depth(&ctx.plan, request.target_units.max(1)),
        };
        let mut prefixes = Vec::new();
        let mut too_many = false;
        let enumeration = Walker::new(&ctx.plan)
            .enumerate(&[], depth, &mut |p| {
                if prefixes.len() < MAX_UNITS_PER_JOB {
                    prefixes.push(p.to_vec());
                } else {
                    too_many = true;
                }
            })
            .map_err(|e| FleetError::InvalidArgument(e.to_string()))?;
        if too_many {
            return Err(FleetError::InvalidArgument(format!(
                "split depth {depth} makes more than {MAX_UNITS_PER_JOB} units; choose a smaller depth"
            )));
        }
        let job_id = uuid::Uuid::new_v4().to_string();
        let now = self.now();
        let enumeration_solutions = if depth == depths && depth > 0 {
            prefixes.len() as i64
        } else {
            0
        };
        let row = JobRow {
            id: job_id.clone(),
            name: request.name.clone(),
            puzzle_json: e2fleet_engine::formats::to_site_json(&ctx.puzzle),
            order_spec: ctx.order.spec().to_string(),
            depths: depths as i64,
            split_depth: depth as i64,
            budget: request.budget.unwrap_or(0) as i64,
            replicas: request.replicas as i64,
            spot_check: request.spot_check,
            state: "running".into(),
            created_ms: now,
            finished_ms: None,
            enumeration_json: to_json(&enumeration),
            enumeration_solutions,
            split_json: to_json(&vec![0u64; depths]),
            accepted_json: to_json(&vec![0u64; depths]),
            accepted_solutions: 0,
            conservation_ok: None,
        };
        let new_units: Vec<NewUnit> = prefixes
            .iter()
            .enumerate()
            .map(|(i, p)| NewUnit {
                prefix_json: units::encode_path(p),
                cursor_json: "[]".into(),
                parent_id: None,
                kind: "root",
                quorum: quorum_for(&job_id, i as u64, request.replicas, request.spot_check),
            })
            .collect();
        let count = new_units.len();
        let id = job_id.clone();
        self.store
            .write(move |c| {
                jobs::insert(c, &row)?;
                units::insert_batch(c, &id, &new_units, now)?;
                if new_units.is_empty() {
                    finish_if_done(c, &id, now)?;
                }
                Ok::<_, FleetError>(())
            })
            .await?;
        self.contexts
            .lock()
            .expect("context cache")
            .insert(job_id.clone(), Arc::new(ctx));
        info!(%job_id, units = count, depth, "job split");
        Ok((job_id, count, depth))
    }

    /// A job's puzzle, order and self-tests.
    pub async fn job_spec(&self, job_id: &str) -> Result<JobSpec, FleetError> {
        let ctx = self.context(job_id).await?;
        let mut conn = self.store.pool().acquire().await?;
        let job = jobs::get_with_puzzle(&mut conn, job_id)
            .await?
            .ok_or_else(|| FleetError::NotFound(format!("job {job_id}")))?;
        Ok(JobSpec {
            puzzle_json: job.puzzle_json,
            order: job.order_spec,
            self_tests: ctx.self_tests.get_or_init(|| self_tests(&ctx.plan)).clone(),
        })
    }

    /// Cancels a job: no more leases, held leases are told to stop.
    pub async fn cancel_job(&self, job_id: &str) -> Result<(), FleetError> {
        let (id, now) = (job_id.to_string(), self.now());
        self.store
            .write(move |c| {
                let job = jobs::get_tx(c, &id)?
                    .ok_or_else(|| FleetError::NotFound(format!("job {id}")))?;
                if job.state != "running" {
                    return Err(FleetError::FailedPrecondition(format!(
                        "job is {}",
                        job.state
                    )));
                }
                leases::cancel_job(c, &id)?;
                units::cancel_job(c, &id)?;
                jobs::finish(c, &id, "cancelled", now, None)?;
                Ok(())
            })
            .await?;
        info!(%job_id, "job cancelled");
        Ok(())
    }
}

/// The shallowest depth with at least `target` prefixes (or the last depth).
pub fn choose_split_depth(plan: &SearchPlan, target: usize) -> usize {
    let mut walker = Walker::new(plan);
    for depth in 1..=plan.len() {
        let counts = walker
            .enumerate(&[], depth, &mut |_| {})
            .expect("root enumeration");
        if counts[depth - 1] as usize >= target || counts[depth - 1] == 0 {
            return depth;
        }
    }
    plan.len()
}

/// Self-test units with their exact results: a few budgeted slices of the tree,
/// computed by the reference engine.
pub fn self_tests(plan: &SearchPlan) -> Vec<SelfTest> {
    let mut tests = Vec::new();
    let mut walker = Walker::new(plan);
    let mut unit = Unit::root();
    for budget in [5_000u64, 50_000, 200_000] {
        let options = RunOptions {
            budget: Some(budget),
            max_solutions: REPORT_MAX_SOLUTIONS,
        };
        let Ok(expected) = walker.run(&unit, options, &mut NoControl) else {
            break;
        };
        let next = expected.cursor.clone();
        tests.push(SelfTest {
            unit: unit.clone(),
            budget: Some(budget),
            expected,
        });
        match next {
            Some(cursor) => unit = unit.continuation(cursor),
            None => break,
        }
    }
    tests
}
