//! Jobs: submission (validation, split depth, enumeration into units), specs with
//! self-tests for workers, cancellation.

use std::sync::Arc;

use e2fleet_engine::Unit;
use e2fleet_engine::plan::SearchPlan;
use e2fleet_engine::search::{NoControl, RunOptions, Walker, estimate};
use e2fleet_proto::api::{JobCreated, JobId, JobRequest, JobSpec, JobState, SelfTest};
use sha2::{Digest, Sha256};
use tracing::{info, warn};

use super::policy::{
    DEFAULT_ORDER, DEFAULT_PER_CORE_NODES_PER_S, DEFAULT_TARGET_UNITS, MAX_REPLICAS, MAX_SHARE,
    MAX_UNITS_PER_JOB, SELF_TEST_BUDGETS, TREE_EFFORT, UNIT_SECONDS, quorum_for,
};
use super::{Fleet, FleetError, JobCtx, REPORT_MAX_SOLUTIONS, finish_if_done};
use crate::store::{JobRecord, NewJob, NewUnit, RateSample, Schedule, UnitKind};

impl Fleet {
    /// Validates, splits and stores a job.
    pub async fn submit_job(&self, request: JobRequest) -> Result<JobCreated, FleetError> {
        check_request(&request)?;
        // `study:ID`: the order that study ranked best
        let winner = match request
            .order
            .as_deref()
            .and_then(|o| o.strip_prefix("study:"))
        {
            Some(id) => Some(self.study_winner(id.parse()?).await?),
            None => None,
        };
        let order = winner
            .as_deref()
            .or(request.order.as_deref())
            .unwrap_or(DEFAULT_ORDER);
        let spec = e2fleet_engine::SearchSpec::from_site_json(&request.puzzle_json, order)
            .map_err(|e| FleetError::InvalidArgument(e.to_string()))?;
        let depths = spec.plan.len();
        let (depth, sizing_notes) = self.split_depth_of(&request, &spec).await?;
        let (enumeration, prefixes) = enumerate_prefixes(&spec.plan, depth)?;
        let job_id = JobId::random();
        let now = self.now();
        let enumeration_solutions = if depth == depths && depth > 0 {
            prefixes.len() as u64
        } else {
            0
        };
        let job = NewJob {
            record: JobRecord {
                id: job_id,
                name: request.name.clone(),
                order: spec.order.spec().to_string(),
                depths,
                split_depth: depth,
                budget: request.budget,
                replicas: request.replicas,
                spot_check: request.spot_check,
                state: JobState::Running,
                created_ms: now,
                finished_ms: None,
                enumeration,
                enumeration_solutions,
                split: vec![0; depths],
                accepted: vec![0; depths],
                accepted_solutions: 0,
                conservation_ok: None,
                schedule: Schedule {
                    priority: request.priority,
                    share: request.share,
                    paused: false,
                },
                probe: None,
            },
            puzzle_json: e2fleet_engine::formats::to_site_json(&spec.puzzle),
        };
        let new_units: Vec<NewUnit> = prefixes
            .into_iter()
            .enumerate()
            .map(|(i, p)| NewUnit {
                unit: Unit::prefix(p),
                parent: None,
                kind: UnitKind::Root,
                quorum: quorum_for(job_id, i as u64, request.replicas, request.spot_check),
            })
            .collect();
        let count = new_units.len();
        let mut warnings = e2fleet_engine::formats::duplicate_notes(&spec.puzzle);
        warnings.extend(sizing_notes);
        let runs_needed = new_units.iter().map(|u| u.quorum).max().unwrap_or(1);
        warnings.extend(self.replica_warning(&request, runs_needed, now).await?);
        for w in &warnings {
            warn!(%job_id, warning = %w, "job submitted with a warning");
        }
        self.store
            .write(move |tx| {
                tx.insert_job(&job)?;
                tx.insert_units(job_id, &new_units, now)?;
                if new_units.is_empty() {
                    finish_if_done(tx, job_id, now)?;
                }
                Ok::<_, FleetError>(())
            })
            .await?;
        self.store.refresh_statistics();
        self.contexts.lock().expect("context cache").insert(
            job_id,
            Arc::new(JobCtx {
                spec,
                self_tests: Default::default(),
                budget: request.budget,
                probe_particles: None,
                tree: Default::default(),
            }),
        );
        self.shares_changed();
        info!(%job_id, units = count, depth, "job split");
        Ok(JobCreated {
            job_id,
            units: count,
            split_depth: depth,
            warnings,
        })
    }

    /// The split depth of a job (the one asked for, or from the unit count asked for, or
    /// from the tree estimate and the fleet's speed: units of about a minute), and notes
    /// on how it was chosen.
    async fn split_depth_of(
        &self,
        request: &JobRequest,
        spec: &e2fleet_engine::SearchSpec,
    ) -> Result<(usize, Vec<String>), FleetError> {
        let depths = spec.plan.len();
        let mut sizing_notes = Vec::new();
        let depth = match request.split_depth {
            Some(d) if d > depths => {
                return Err(FleetError::InvalidArgument(format!(
                    "split depth {d} is past the {depths} free cells"
                )));
            }
            Some(d) => d,
            // neither a depth, a unit count nor a budget: units of about a minute
            None if request.target_units.is_none() && request.budget.is_none() => {
                let now = self.now();
                let per_core = self
                    .store
                    .read(move |tx| {
                        Ok::<_, FleetError>(RateSample::per_core(
                            &tx.rate_samples(None, now - 3_600_000)?,
                        ))
                    })
                    .await?
                    .unwrap_or(DEFAULT_PER_CORE_NODES_PER_S);
                let plan = spec.plan.clone();
                let digest = Sha256::digest(request.puzzle_json.as_bytes());
                let job_seed = u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"));
                let sized =
                    tokio::task::spawn_blocking(move || size_by_time(&plan, per_core, job_seed))
                        .await
                        .map_err(|e| {
                            FleetError::FailedPrecondition(format!("sizing units: {e}"))
                        })?;
                sizing_notes.extend(sized.note);
                sized.depth
            }
            None => choose_split_depth(
                &spec.plan,
                request.target_units.unwrap_or(DEFAULT_TARGET_UNITS).max(1),
            ),
        };
        Ok((depth, sizing_notes))
    }

    /// A warning when a job needs more different workers for its runs than are online.
    async fn replica_warning(
        &self,
        request: &JobRequest,
        runs_needed: u32,
        now: i64,
    ) -> Result<Option<String>, FleetError> {
        if runs_needed > 1 {
            let since = now - 2 * self.config.lease.as_millis() as i64;
            let online = self.store.read(move |tx| tx.live_workers(since)).await?;
            if online < runs_needed {
                return Ok(Some(format!(
                    "this job runs {} units on {runs_needed} different workers ({}), and {online} worker{} online: \
                     those units will wait after their first run until {} more join{} (another machine, or another \
                     `e2fleet-worker run` here with its own --data-dir); `job ID` says what is waiting",
                    if request.replicas > 1 {
                        "all its"
                    } else {
                        "some of its"
                    },
                    if request.replicas > 1 {
                        format!("--replicas {}", request.replicas)
                    } else {
                        format!("--spot-check {}", request.spot_check)
                    },
                    if online == 1 { " is" } else { "s are" },
                    runs_needed - online,
                    if runs_needed - online == 1 { "s" } else { "" },
                )));
            }
        }
        Ok(None)
    }

    /// A job's puzzle, order and self-tests.
    pub async fn job_spec(&self, job_id: JobId) -> Result<JobSpec, FleetError> {
        let ctx = self.context(job_id).await?;
        let source = self
            .store
            .read(move |tx| tx.job_source(job_id))
            .await?
            .ok_or_else(|| FleetError::NotFound(format!("job {job_id}")))?;
        Ok(JobSpec {
            job_id,
            puzzle_json: source.puzzle_json,
            order: source.order,
            // a probe job runs no engine: nothing to test
            self_tests: match ctx.probe_particles {
                Some(_) => Vec::new(),
                None => ctx
                    .self_tests
                    .get_or_init(|| self_tests(&ctx.spec.plan))
                    .clone(),
            },
            probe_particles: ctx.probe_particles,
        })
    }

    /// Cancels a job: no more leases, held leases are told to stop.
    pub async fn cancel_job(&self, job_id: JobId) -> Result<(), FleetError> {
        let now = self.now();
        self.store
            .write(move |tx| {
                let job = tx
                    .job(job_id)?
                    .ok_or_else(|| FleetError::NotFound(format!("job {job_id}")))?;
                if job.state != JobState::Running {
                    return Err(FleetError::FailedPrecondition(format!(
                        "job is {}",
                        job.state
                    )));
                }
                cancel_running(tx, job_id, now)
            })
            .await?;
        info!(%job_id, "job cancelled");
        Ok(())
    }
}

/// Cancels a running job in `tx`: its held leases are told to stop, its units and the
/// job end as cancelled.
pub(super) fn cancel_running(
    tx: &mut dyn crate::store::Tx,
    job_id: JobId,
    now: i64,
) -> Result<(), FleetError> {
    tx.cancel_job_leases(job_id)?;
    tx.cancel_job_units(job_id)?;
    tx.finish_job(job_id, JobState::Cancelled, now, None)?;
    Ok(())
}

/// A split chosen by time, and what the operator should know about it.
pub struct Sized {
    /// The split depth.
    pub depth: usize,
    /// Said when no depth gives units of a human duration.
    pub note: Option<String>,
}

/// The split depth whose units take about [`UNIT_SECONDS`] on one core at `per_core`
/// nodes/s: the shallowest depth where the tree estimate's nodes per prefix fall to that
/// (0, one unit, for a tree smaller than one such unit), never more than
/// [`MAX_UNITS_PER_JOB`] units. A tree too big for that (the real Eternity II) gets
/// [`DEFAULT_TARGET_UNITS`] units and a note to give a budget.
pub fn size_by_time(plan: &SearchPlan, per_core: f64, seed: u64) -> Sized {
    let target = UNIT_SECONDS * per_core;
    // the mean: on a heavy-tailed tree usually low, so units may come out bigger than a
    // minute; a unit that runs long is split while it runs (see `leasing`)
    let tree = estimate::estimate_tree(plan, TREE_EFFORT, seed).point(0.0);
    if tree <= target {
        return Sized {
            depth: 0,
            note: None,
        };
    }
    let mut walker = Walker::new(plan);
    for depth in 1..=plan.len() {
        let counts = walker
            .enumerate(&[], depth, &mut |_| {})
            .expect("root enumeration");
        let prefixes = counts[depth - 1] as f64;
        let known = counts.iter().sum::<u64>() as f64;
        if prefixes == 0.0 || prefixes > MAX_UNITS_PER_JOB as f64 {
            break;
        }
        if (tree - known) / prefixes <= target {
            return Sized { depth, note: None };
        }
    }
    let depth = choose_split_depth(plan, DEFAULT_TARGET_UNITS);
    let years = tree / per_core / (365.25 * 86400.0);
    Sized {
        depth,
        note: Some(format!(
            "this tree is estimated at ~{:.1e} nodes, ~{years:.1e} years on one core: no split gives units of about a minute, \
             so it is split into about {DEFAULT_TARGET_UNITS} units that will not finish; give --budget N (nodes per run) so every \
             run ends with an exact cursor and continues",
            tree
        )),
    }
}

/// The shallowest depth with at least `target` prefixes (or the last depth).
pub fn choose_split_depth(plan: &SearchPlan, target: usize) -> usize {
    e2fleet_engine::search::split_depth_for(plan, target)
}

/// Self-test units with their exact results: a few budgeted slices of the tree,
/// computed by the reference engine.
pub fn self_tests(plan: &SearchPlan) -> Vec<SelfTest> {
    let mut tests = Vec::new();
    let mut walker = Walker::new(plan);
    let mut unit = Unit::root();
    for budget in SELF_TEST_BUDGETS {
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

/// The prefixes of `plan` at `depth` (each a unit) and the enumeration's per-depth counts;
/// refused past [`MAX_UNITS_PER_JOB`].
fn enumerate_prefixes(
    plan: &e2fleet_engine::plan::SearchPlan,
    depth: usize,
) -> Result<(Vec<u64>, Vec<Vec<e2fleet_engine::Placement>>), FleetError> {
    let mut prefixes: Vec<Vec<e2fleet_engine::Placement>> = Vec::new();
    let mut too_many = false;
    let enumeration = Walker::new(plan)
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
    Ok((enumeration, prefixes))
}

/// The request's own limits: replicas, spot checks, share and budget.
fn check_request(request: &JobRequest) -> Result<(), FleetError> {
    if request.replicas == 0 || request.replicas > MAX_REPLICAS {
        return Err(FleetError::InvalidArgument(format!(
            "replicas must be 1..={MAX_REPLICAS}"
        )));
    }
    if !(0.0..=1.0).contains(&request.spot_check) {
        return Err(FleetError::InvalidArgument(
            "spot_check must be within 0..=1".into(),
        ));
    }
    if !(request.share.is_finite() && request.share > 0.0 && request.share <= MAX_SHARE) {
        return Err(FleetError::InvalidArgument(format!(
            "a share must be a number above 0 and at most {MAX_SHARE}, not {}",
            request.share
        )));
    }
    if request.budget == Some(0) {
        return Err(FleetError::InvalidArgument(
            "a budget must be at least 1 node".into(),
        ));
    }
    Ok(())
}
