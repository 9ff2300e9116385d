//! A job's status.

use e2fleet_engine::search::estimate::{self, TreeEstimate};

use e2fleet_proto::api::status::{DeepestBoard, Estimate, JobStatus, ResultGroup, Waiting};
use e2fleet_proto::api::{JobId, JobState};

use super::RATE_WINDOW_MS;
use crate::fleet::policy::TREE_EFFORT;
use crate::fleet::{Fleet, FleetError};
use crate::store::{JobRecord, RateSample, Tx};

/// Solutions shown in a job's status.
const SOLUTIONS_SHOWN: usize = 100;

impl Fleet {
    /// The status of one job.
    pub async fn job_status(&self, job_id: JobId) -> Result<JobStatus, FleetError> {
        let now = self.now();
        let live_since = now - 2 * self.config.lease.as_millis() as i64;
        let mut status = self
            .store
            .read(move |tx| {
                let job = tx
                    .job(job_id)?
                    .ok_or_else(|| FleetError::NotFound(format!("job {job_id}")))?;
                job_status(tx, job, now, live_since)
            })
            .await?;
        // the tree estimate: made once per job (tens of ms), off the async threads
        let ctx = self.context(job_id).await?;
        let tree = tokio::task::spawn_blocking(move || {
            ctx.tree
                .get_or_init(|| {
                    estimate::estimate_tree(&ctx.spec.plan, TREE_EFFORT, seed_of(job_id))
                })
                .clone()
        })
        .await
        .map_err(|e| FleetError::FailedPrecondition(format!("tree estimate: {e}")))?;
        add_tree_estimate(&mut status, &tree);
        Ok(status)
    }

    /// The status of every counting job, newest first (with tree estimates already made);
    /// a study's probe jobs are listed with their study.
    pub async fn list_jobs(&self) -> Result<Vec<JobStatus>, FleetError> {
        let now = self.now();
        let live_since = now - 2 * self.config.lease.as_millis() as i64;
        self.store
            .read(move |tx| {
                tx.list_jobs()?
                    .into_iter()
                    .filter(|job| job.probe.is_none())
                    .map(|job| job_status(tx, job, now, live_since))
                    .collect::<Result<Vec<_>, FleetError>>()
            })
            .await
            .map(|mut jobs| {
                for j in jobs.iter_mut() {
                    if let Some(tree) = self.made_tree_estimate(j.job_id) {
                        add_tree_estimate(j, &tree);
                    }
                }
                jobs
            })
    }

    /// What the dashboard needs to draw any board of a job: size, every piece's colours
    /// (URDL at rotation 0), the hints and the fill order.
    pub async fn job_puzzle(&self, job_id: JobId) -> Result<serde_json::Value, FleetError> {
        let ctx = self.context(job_id).await?;
        let p = &ctx.spec.puzzle;
        Ok(serde_json::json!({
            "job_id": job_id,
            "name": p.name(),
            "width": p.width(),
            "height": p.height(),
            "pieces": p.pieces(),
            "hints": p.hints(),
            "fill_order": ctx.spec.order.cells(),
        }))
    }
}

/// A job's status; `live_since` is when a worker seen since counts as online.
fn job_status(
    tx: &mut dyn Tx,
    job: JobRecord,
    now: i64,
    live_since: i64,
) -> Result<JobStatus, FleetError> {
    let total = job.totals();
    let units = tx.unit_counts(job.id)?;
    let waiting = if job.state == JobState::Running && units.open > 0 {
        Waiting {
            workers_online: tx.live_workers(live_since)? as u64,
            parties_online: tx.live_parties(live_since)? as u64,
            ..tx.waiting_units(job.id)?
        }
        .explained()
    } else {
        Waiting::default()
    };
    let mut solutions = Vec::new();
    for r in tx.solution_bodies_of_job(job.id, 20)? {
        solutions.extend(r.solutions);
    }
    solutions.truncate(SOLUTIONS_SHOWN);
    // the deepest depth any node reached (the enumeration's too); its board is known when
    // a unit's result reached it
    let reached = total.iter().rposition(|&n| n > 0).map_or(0, |d| d + 1);
    let deepest = match tx.deepest_body_of_job(job.id)? {
        Some(r) if r.max_depth >= reached => DeepestBoard {
            depth: r.max_depth,
            board: r.deepest,
        },
        _ => DeepestBoard {
            depth: reached,
            board: Vec::new(),
        },
    };
    let samples = tx.rate_samples(Some(job.id), 0)?;
    let results = tx
        .result_breakdown(job.id)?
        .into_iter()
        .map(|b| ResultGroup {
            verdict: b.verdict,
            engine_kind: b.engine_kind,
            engine_build: b.engine_build,
            results: b.results,
            nodes: b.nodes,
        })
        .collect();
    let end = job.finished_ms.unwrap_or(now);
    // the window starts when work started (first lease), not at submission
    let started = tx.first_lease_of_job(job.id)?.unwrap_or(job.created_ms);
    let window_start = (end - RATE_WINDOW_MS).max(started);
    let received = tx.nodes_since(Some(job.id), window_start)?;
    let seconds = ((end - window_start) as f64 / 1000.0).max(1.0);
    let unfinished = units.open + units.leased;
    let accepted_nodes: u64 = job.accepted.iter().sum();
    let estimate = (units.done > 0 && unfinished > 0).then(|| Estimate {
        remaining_nodes: accepted_nodes as f64 / units.done as f64 * unfinished as f64,
        how: "mean accepted nodes per finished unit x unfinished units (a rough guide: subtrees vary by orders of magnitude)".into(),
        ..Estimate::default()
    });
    Ok(JobStatus {
        job_id: job.id,
        name: job.name,
        state: job.state,
        order: job.order,
        depths: job.depths,
        split_depth: job.split_depth,
        budget: job.budget,
        replicas: job.replicas,
        spot_check: job.spot_check,
        created_ms: job.created_ms,
        finished_ms: job.finished_ms,
        units,
        nodes_total: total.iter().sum(),
        nodes_by_depth: total,
        enumeration_nodes: job.enumeration.iter().sum(),
        split_nodes: job.split.iter().sum(),
        unit_nodes: accepted_nodes,
        solutions_count: job.enumeration_solutions + job.accepted_solutions,
        solutions,
        deepest,
        conservation_ok: job.conservation_ok,
        per_core_nodes_per_s: RateSample::per_core(&samples),
        aggregate_nodes_per_s: received.verified as f64 / seconds,
        aggregate_raw_nodes_per_s: received.raw as f64 / seconds,
        estimate,
        results,
        waiting,
        priority: job.schedule.priority,
        share: job.schedule.share,
        paused: job.schedule.paused,
    })
}

impl Fleet {
    /// A job's tree estimate, if already made.
    fn made_tree_estimate(&self, job: JobId) -> Option<TreeEstimate> {
        self.cached_context(job)
            .and_then(|ctx| ctx.tree.get().cloned())
    }
}

/// The probes' seed for a job: the same estimate on every request and every coordinator.
fn seed_of(job: JobId) -> u64 {
    u64::from_le_bytes(job.0.as_bytes()[..8].try_into().expect("8 bytes"))
}

/// Adds the tree estimate to a running job's status: the tree's size (an interval when
/// the estimate supports one, else what it is at least), what is counted and what is
/// extrapolated, and how long the rest takes at the job's aggregate rate (unknown without
/// an interval: a time from a guess would mislead).
fn add_tree_estimate(status: &mut JobStatus, tree: &TreeEstimate) {
    if status.state != JobState::Running {
        return;
    }
    let counted = status.nodes_total as f64;
    let nodes = tree.point(counted);
    let interval = tree.interval(counted);
    let left = nodes - counted;
    let eta = interval
        .filter(|_| status.aggregate_nodes_per_s > 0.0)
        .map(|_| left / status.aggregate_nodes_per_s);
    let tree_how = format!(
        "{}; {} nodes counted exactly so far, the rest extrapolated",
        tree.method(),
        e2fleet_proto::text::thousands(status.nodes_total)
    );
    let estimate = status.estimate.get_or_insert_with(|| Estimate {
        remaining_nodes: left,
        how: "the tree estimate less the nodes counted (no unit has finished yet)".into(),
        ..Estimate::default()
    });
    estimate.tree_nodes = Some(nodes);
    estimate.tree_low = interval.map(|i| i.0);
    estimate.tree_high = interval.map(|i| i.1);
    estimate.tree_at_least = Some(tree.lower(counted));
    estimate.eta_seconds = eta;
    estimate.tree_how = tree_how;
}
