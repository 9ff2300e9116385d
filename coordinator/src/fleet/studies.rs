//! Order studies: which fill order gives the smallest tree, measured by the fleet before
//! a long search is started with it.
//!
//! A study compares candidate orders of one puzzle. Each order becomes a job whose
//! units are probes (`e2fleet_engine::search::estimate::probe`): the order's first `k`
//! depths are enumerated exactly (its strata, at most [`MAX_STRATA`]), and every stratum
//! gets one probe per round, up to the study's rounds. A probe is a unit like any other:
//! leased (only to workers that say they run probes), reported, checked
//! ([`e2fleet_engine::search::estimate::probe::check_probe`]), cross-checked by digest when
//! the job replicates or spot-checks (its seed is fixed by its job and unit, so two runs
//! agree to the digit), accepted by the same quorum rules, and credited.
//!
//! The estimate of an order is read from its accepted probes, stratum by stratum, over
//! complete rounds ([`e2fleet_engine::search::estimate::probe::study_estimate`]). A study
//! **converges** when the best order (fewest estimated nodes) has a 95% interval and
//! every other order is either known worse (its "at least" bound is above the best's
//! interval) or tied with it (both intervals stated, overlapping, each within
//! [`TIE_WIDTH`] of its estimate): then what is left of its probes is cancelled. Otherwise
//! it runs until every planned probe has run (`exhausted`): on hard boards the probes do
//! not see the bottom of the tree, only bounds are stated, and the ranking by mean is a
//! guess the page says is one.

use std::collections::HashMap;

use e2fleet_engine::search::estimate::probe::{
    self, MAX_PARTICLES, StudyEstimate, probe_nodes, study_estimate,
};
use e2fleet_engine::{Placement, SearchSpec, Unit};
use e2fleet_proto::api::{
    JobId, JobState, StudyCreated, StudyId, StudyOrder, StudyRequest, StudyStatus, UnitId,
};
use sha2::{Digest, Sha256};
use tracing::info;

use super::policy::{MAX_REPLICAS, quorum_for};
use super::{Fleet, FleetError, finish_if_done};
use crate::store::{JobProbe, JobRecord, NewJob, NewUnit, Schedule, StudyRecord, Tx, UnitKind};

/// Boards in a probe's population unless the study says otherwise (a 16x16 probe is
/// then ~0.1-1 s of one core).
pub const DEFAULT_PARTICLES: u32 = 4096;

/// Probes per stratum unless the study says otherwise.
pub const DEFAULT_ROUNDS: u32 = 16;

/// Most probes per stratum a study may plan.
pub const MAX_ROUNDS: u32 = 64;

/// Complete rounds before a study may converge (a two-sided interval needs 8 runs).
pub const MIN_ROUNDS: usize = 8;

/// Most strata per order.
pub const MAX_STRATA: usize = 32;

/// Most orders in one study.
pub const MAX_ORDERS: usize = 32;

/// The longest order text (a `cells:` list of a 32x32 board fits).
pub const MAX_ORDER_CHARS: usize = 8192;

/// Two orders whose intervals overlap are called tied once each interval's half-width is
/// at most this share of its estimate.
pub const TIE_WIDTH: f64 = 0.1;

impl Fleet {
    /// Validates a study, enumerates each order's strata and stores its probe units.
    pub async fn submit_study(&self, request: StudyRequest) -> Result<StudyCreated, FleetError> {
        let particles = request.particles.unwrap_or(DEFAULT_PARTICLES);
        let rounds = request.rounds.unwrap_or(DEFAULT_ROUNDS);
        check_study(&request, particles, rounds)?;
        let puzzle_json = request.puzzle_json.clone();
        let orders = request.orders.clone();
        // parsing every order and enumerating its strata is CPU work: off the async threads
        let planned = tokio::task::spawn_blocking(move || plan_orders(&puzzle_json, &orders))
            .await
            .map_err(|e| FleetError::FailedPrecondition(format!("planning the study: {e}")))??;
        let study_id = StudyId::random();
        let now = self.now();
        let puzzle_json = e2fleet_engine::formats::to_site_json(&planned[0].0.puzzle);
        let study = StudyRecord {
            id: study_id,
            name: request.name.clone(),
            puzzle_json: puzzle_json.clone(),
            particles,
            rounds,
            state: "running".into(),
            created_ms: now,
            finished_ms: None,
        };
        let mut jobs = Vec::with_capacity(planned.len());
        let mut units_total = 0u64;
        for (spec, strata) in planned {
            let job_id = JobId::random();
            let depths = spec.plan.len();
            let units: Vec<NewUnit> = (0..rounds as usize)
                .flat_map(|r| {
                    strata
                        .prefixes
                        .iter()
                        .enumerate()
                        .map(move |(j, p)| (r, j, p))
                })
                .map(|(r, j, p)| NewUnit {
                    unit: Unit::prefix(p.clone()),
                    parent: None,
                    kind: UnitKind::Root,
                    quorum: quorum_for(
                        job_id,
                        (r * strata.prefixes.len() + j) as u64,
                        request.replicas,
                        request.spot_check,
                    ),
                })
                .collect();
            units_total += units.len() as u64;
            let record = JobRecord {
                id: job_id,
                name: format!("{} [{}]", request.name, spec.order.spec()),
                order: spec.order.spec().to_string(),
                depths,
                split_depth: strata.depth,
                budget: None,
                replicas: request.replicas,
                spot_check: request.spot_check,
                state: JobState::Running,
                created_ms: now,
                finished_ms: None,
                enumeration: strata.exact.clone(),
                enumeration_solutions: 0,
                split: vec![0; depths],
                accepted: vec![0; depths],
                accepted_solutions: 0,
                conservation_ok: None,
                schedule: Schedule {
                    priority: request.priority,
                    share: 1.0,
                    paused: false,
                },
                probe: Some(JobProbe {
                    study: study_id,
                    particles,
                }),
            };
            jobs.push((
                NewJob {
                    record,
                    puzzle_json: puzzle_json.clone(),
                },
                units,
            ));
        }
        self.store
            .write(move |tx| {
                tx.insert_study(&study)?;
                for (job, units) in &jobs {
                    tx.insert_job(job)?;
                    tx.insert_units(job.record.id, units, now)?;
                    if units.is_empty() {
                        finish_if_done(tx, job.record.id, now)?;
                    }
                }
                Ok::<_, FleetError>(())
            })
            .await?;
        self.store.refresh_statistics();
        self.shares_changed();
        info!(%study_id, units = units_total, "study submitted");
        Ok(StudyCreated {
            study_id,
            units: units_total,
        })
    }

    /// One study with each order's estimate so far, best first, merged at most once per
    /// [`RUNNING_TTL`] while it runs and per [`ENDED_TTL`] once it has ended: the public
    /// pages read it every two seconds, from any number of browsers.
    pub async fn study_status(&self, id: StudyId) -> Result<StudyStatus, FleetError> {
        if let Some(status) = self.merged_studies.get(id) {
            return Ok(status);
        }
        let status = self.merge_study(id).await?;
        self.merged_studies.put(&status);
        Ok(status)
    }

    /// [`Fleet::study_status`], read and merged from the store.
    async fn merge_study(&self, id: StudyId) -> Result<StudyStatus, FleetError> {
        let (study, jobs) = self
            .store
            .read(move |tx| {
                let study = tx
                    .study(id)?
                    .ok_or_else(|| FleetError::NotFound(format!("study {id}")))?;
                let mut jobs = Vec::new();
                for job in tx.study_jobs(id)? {
                    let probes = tx.accepted_probes(job.id)?;
                    jobs.push((job, probes));
                }
                Ok::<_, FleetError>((study, jobs))
            })
            .await?;
        let mut contexts = Vec::with_capacity(jobs.len());
        for (job, _) in &jobs {
            contexts.push(self.context(job.id).await?);
        }
        let (particles, rounds) = (study.particles, study.rounds);
        let orders = tokio::task::spawn_blocking(move || {
            jobs.iter()
                .zip(&contexts)
                .map(|((job, probes), ctx)| StudyOrder {
                    rounds_planned: rounds,
                    ..order_status(job, probes, &ctx.spec, particles)
                })
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| FleetError::FailedPrecondition(format!("merging probes: {e}")))?;
        let spec = SearchSpec::from_site_json(&study.puzzle_json, "row-major")
            .map_err(|e| FleetError::InvalidArgument(e.to_string()))?;
        let mut status = StudyStatus {
            study_id: study.id,
            name: study.name,
            state: study.state,
            created_ms: study.created_ms,
            width: spec.puzzle.width() as u32,
            height: spec.puzzle.height() as u32,
            particles: study.particles,
            orders,
            hints: spec
                .puzzle
                .hints()
                .iter()
                .map(|h| u32::from(h.pos))
                .collect(),
        };
        rank(&mut status.orders);
        Ok(status)
    }

    /// Every study, newest first.
    pub async fn list_studies(&self) -> Result<Vec<StudyStatus>, FleetError> {
        let ids: Vec<StudyId> = self
            .store
            .read(|tx| Ok::<_, FleetError>(tx.list_studies()?.into_iter().map(|s| s.id).collect()))
            .await?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            out.push(self.study_status(id).await?);
        }
        Ok(out)
    }

    /// Ends the studies that have converged (cancelling their remaining probes) or run
    /// every probe they planned. Run by the coordinator every few seconds.
    pub async fn settle_studies(&self) -> Result<(), FleetError> {
        let running = self.store.read(|tx| tx.running_studies()).await?;
        for id in running {
            // decided on a fresh merge, never on one kept for the pages
            let status = self.merge_study(id).await?;
            let now = self.now();
            if converged(&status.orders) {
                let jobs: Vec<JobId> = status.orders.iter().map(|o| o.job_id).collect();
                self.store
                    .write(move |tx| {
                        for &job in &jobs {
                            stop_probes(tx, job, now)?;
                        }
                        tx.end_study(id, "converged", now)?;
                        Ok::<_, FleetError>(())
                    })
                    .await?;
                self.merged_studies.forget(id);
                info!(study_id = %id, "study converged");
            } else {
                let jobs: Vec<JobId> = status.orders.iter().map(|o| o.job_id).collect();
                let ended = self
                    .store
                    .read(move |tx| {
                        for job in jobs {
                            if tx.job_has_unfinished_units(job)? {
                                return Ok::<_, FleetError>(false);
                            }
                        }
                        Ok(true)
                    })
                    .await?;
                if ended {
                    self.store
                        .write(move |tx| Ok::<_, FleetError>(tx.end_study(id, "exhausted", now)?))
                        .await?;
                    self.merged_studies.forget(id);
                    info!(study_id = %id, "study ran every planned probe");
                }
            }
        }
        Ok(())
    }

    /// Stops a running study: its jobs' remaining probes are cancelled and the jobs with
    /// them; what ran stays and is still merged.
    pub async fn cancel_study(&self, id: StudyId) -> Result<(), FleetError> {
        let now = self.now();
        self.store
            .write(move |tx| {
                let study = tx
                    .study(id)?
                    .ok_or_else(|| FleetError::NotFound(format!("study {id}")))?;
                if study.state != "running" {
                    return Err(FleetError::FailedPrecondition(format!(
                        "study is {}",
                        study.state
                    )));
                }
                for job in tx.study_jobs(id)? {
                    if job.state == JobState::Running {
                        super::submission::cancel_running(tx, job.id, now)?;
                    }
                }
                tx.end_study(id, "cancelled", now)?;
                Ok(())
            })
            .await?;
        self.merged_studies.forget(id);
        info!(study_id = %id, "study cancelled");
        Ok(())
    }

    /// The order a finished study ranked best, for `submit --order study:ID`.
    pub async fn study_winner(&self, id: StudyId) -> Result<String, FleetError> {
        let status = self.study_status(id).await?;
        if !status.ended() {
            return Err(FleetError::FailedPrecondition(format!(
                "study {id} is still running; wait for it (`study-status {id}`) or name an order"
            )));
        }
        status
            .orders
            .first()
            .filter(|o| o.rounds > 0)
            .map(|o| o.order.clone())
            .ok_or_else(|| {
                FleetError::FailedPrecondition(format!("study {id} has no estimate to rank by"))
            })
    }
}

/// How long an ended study's merged ranking is served from memory (an overturned probe
/// can still change it, so it is merged again now and then).
pub const ENDED_TTL: std::time::Duration = std::time::Duration::from_secs(60);

/// How long a running study's merged ranking is served from memory (the dashboard's
/// refresh period).
pub const RUNNING_TTL: std::time::Duration = std::time::Duration::from_secs(2);

/// Most studies kept merged in memory.
const ENDED_KEPT: usize = 256;

/// Studies' rankings as last merged, kept for [`RUNNING_TTL`] or [`ENDED_TTL`].
#[derive(Default)]
pub(crate) struct MergedStudies(
    std::sync::Mutex<HashMap<StudyId, (StudyStatus, std::time::Instant)>>,
);

impl MergedStudies {
    fn get(&self, id: StudyId) -> Option<StudyStatus> {
        let map = self.0.lock().expect("merged studies");
        map.get(&id)
            .filter(|(s, at)| at.elapsed() < if s.ended() { ENDED_TTL } else { RUNNING_TTL })
            .map(|(s, _)| s.clone())
    }

    /// Drops a study's kept ranking (it has just ended here).
    fn forget(&self, id: StudyId) {
        self.0.lock().expect("merged studies").remove(&id);
    }

    fn put(&self, status: &StudyStatus) {
        let mut map = self.0.lock().expect("merged studies");
        if map.len() >= ENDED_KEPT {
            map.retain(|_, (_, at)| at.elapsed() < ENDED_TTL);
            if map.len() >= ENDED_KEPT {
                map.clear();
            }
        }
        map.insert(status.study_id, (status.clone(), std::time::Instant::now()));
    }
}

/// The seed of a probe unit's population: fixed by its job and unit, so every run of the
/// unit (replicas, spot checks, a rerun after an expired lease) is the same probe.
pub fn probe_seed(job: JobId, unit: UnitId) -> u64 {
    let digest = Sha256::digest(format!("e2fleet probe {job} {}", unit.0).as_bytes());
    u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"))
}

/// Cancels what is left of a converged study's job and completes it (its accepted probes
/// stay, and conservation is checked as for any job).
fn stop_probes(tx: &mut dyn Tx, job: JobId, now: i64) -> Result<(), FleetError> {
    let Some(record) = tx.job(job)? else {
        return Ok(());
    };
    if record.state != JobState::Running {
        return Ok(());
    }
    tx.cancel_job_leases(job)?;
    tx.cancel_job_units(job)?;
    finish_if_done(tx, job, now)
}

/// A study's own limits.
fn check_study(request: &StudyRequest, particles: u32, rounds: u32) -> Result<(), FleetError> {
    let bad = |m: String| Err(FleetError::InvalidArgument(m));
    if request.orders.len() < 2 || request.orders.len() > MAX_ORDERS {
        return bad(format!(
            "a study compares 2..={MAX_ORDERS} orders, not {}",
            request.orders.len()
        ));
    }
    if particles == 0 || particles as usize > MAX_PARTICLES {
        return bad(format!(
            "a probe holds 1..={MAX_PARTICLES} boards, not {particles}"
        ));
    }
    if !(2..=MAX_ROUNDS).contains(&rounds) {
        return bad(format!(
            "a study plans 2..={MAX_ROUNDS} rounds, not {rounds}"
        ));
    }
    if request.replicas == 0 || request.replicas > MAX_REPLICAS {
        return bad(format!("replicas must be 1..={MAX_REPLICAS}"));
    }
    if !(0.0..=1.0).contains(&request.spot_check) {
        return bad("spot_check must be within 0..=1".into());
    }
    if let Some(o) = request.orders.iter().find(|o| o.len() > MAX_ORDER_CHARS) {
        return bad(format!(
            "an order is at most {MAX_ORDER_CHARS} characters (this one has {})",
            o.len()
        ));
    }
    if request.name.chars().count() > 200 {
        return bad("a study's name is at most 200 characters".into());
    }
    Ok(())
}

/// Each order resolved against the puzzle, with its strata; an order that does not fit
/// the puzzle, or two that are the same order, is an error naming it.
fn plan_orders(
    puzzle_json: &str,
    orders: &[String],
) -> Result<Vec<(SearchSpec, probe::Strata)>, FleetError> {
    let mut out: Vec<(SearchSpec, probe::Strata)> = Vec::with_capacity(orders.len());
    for text in orders {
        let spec = SearchSpec::from_site_json(puzzle_json, text)
            .map_err(|e| FleetError::InvalidArgument(format!("order {text:?}: {e}")))?;
        if let Some((same, _)) = out
            .iter()
            .find(|(s, _)| s.order.cells() == spec.order.cells())
        {
            return Err(FleetError::InvalidArgument(format!(
                "orders {} and {} fill the cells in the same order on this puzzle",
                same.order.spec(),
                spec.order.spec()
            )));
        }
        let strata = probe::strata(&spec.plan, MAX_STRATA)
            .map_err(|e| FleetError::InvalidArgument(format!("order {text:?}: {e}")))?;
        out.push((spec, strata));
    }
    Ok(out)
}

/// One order's estimate from its accepted probes.
fn order_status(
    job: &JobRecord,
    probes: &[crate::store::AcceptedProbe],
    spec: &SearchSpec,
    particles: u32,
) -> StudyOrder {
    let k = job.split_depth;
    let strata = if k == 0 {
        1
    } else {
        job.enumeration.get(k - 1).copied().unwrap_or(0) as usize
    };
    // every stratum's probes, in the order its units were decided
    let mut index: HashMap<&[Placement], usize> = HashMap::new();
    let mut by_stratum: Vec<Vec<Vec<f64>>> = Vec::new();
    for p in probes {
        let next = index.len();
        let i = *index.entry(p.prefix.as_slice()).or_insert(next);
        if i == by_stratum.len() {
            by_stratum.push(Vec::new());
        }
        by_stratum[i].push(probe_nodes(&p.counts, k, particles as usize));
    }
    // strata no probe has come back from yet hold back every round
    let tree_done = job.split_depth >= job.depths || strata == 0;
    if !tree_done {
        by_stratum.resize(strata.max(by_stratum.len()), Vec::new());
    } else {
        by_stratum.clear();
    }
    let StudyEstimate {
        tree,
        by_depth_error,
    } = study_estimate(&job.enumeration, &by_stratum, particles as usize);
    let interval = tree.interval(0.0);
    let cells = spec.order.cells();
    StudyOrder {
        order: job.order.clone(),
        job_id: job.id,
        estimate: tree.point(0.0),
        low: interval.map(|i| i.0),
        high: interval.map(|i| i.1),
        at_least: tree.lower(0.0),
        rounds: tree.runs as u32,
        rounds_planned: 0,
        strata: strata as u32,
        strata_depth: k as u32,
        nodes_by_depth: tree.by_depth.clone(),
        error_by_depth: by_depth_error
            .iter()
            .map(|e| if e.is_finite() { *e } else { 0.0 })
            .collect(),
        constraints_by_depth: constraints(spec),
        cells: cells.iter().map(|&c| c as u32).collect(),
        how: how(&tree, strata, k, particles),
        rank: 0,
        separated: false,
    }
}

/// What an order's estimate rests on, in a sentence.
fn how(
    tree: &e2fleet_engine::search::estimate::TreeEstimate,
    strata: usize,
    k: usize,
    particles: u32,
) -> String {
    if tree.is_exact() && tree.runs == 0 && strata == 0 {
        return "counted exactly: the enumeration of the strata was the whole tree".into();
    }
    let base = format!(
        "{} complete rounds of {strata} strata (the fillings of depth {k}, counted exactly), one probe of {particles} boards each",
        tree.runs
    );
    if tree.runs == 0 {
        return format!("{base}: no round is complete yet");
    }
    if tree.tail_seen {
        format!(
            "{base}; the rounds saw the bottom of the tree and agree: the 95% interval is from their spread"
        )
    } else if tree.reached * 4 < tree.depths * 3 {
        format!(
            "{base}; the probes died out by depth {} of {}: the tree's mass may lie deeper than any probe reached, so only a lower bound is stated and the mean is a guess",
            tree.reached, tree.depths
        )
    } else {
        format!(
            "{base}; the rounds disagree or are too few for an interval: only a lower bound is stated and the mean is a guess"
        )
    }
}

/// The placed neighbours (earlier cells and hints) of the cell each depth fills.
fn constraints(spec: &SearchSpec) -> Vec<u32> {
    let (w, h) = (spec.puzzle.width(), spec.puzzle.height());
    let mut placed = vec![false; w * h];
    for hint in spec.puzzle.hints() {
        placed[hint.pos as usize] = true;
    }
    let mut out = Vec::with_capacity(spec.order.len());
    for &cell in spec.order.cells() {
        let (x, y) = (cell % w, cell / w);
        let mut n = 0;
        if x > 0 && placed[cell - 1] {
            n += 1;
        }
        if x + 1 < w && placed[cell + 1] {
            n += 1;
        }
        if y > 0 && placed[cell - w] {
            n += 1;
        }
        if y + 1 < h && placed[cell + w] {
            n += 1;
        }
        out.push(n);
        placed[cell] = true;
    }
    out
}

/// Sorts orders best first (fewest estimated nodes; orders without a complete round
/// last), numbers them, and marks those known worse than the best: their 95% lower bound
/// is above the best's interval.
pub fn rank(orders: &mut [StudyOrder]) {
    orders.sort_by(|a, b| {
        (a.rounds == 0)
            .cmp(&(b.rounds == 0))
            .then(a.estimate.total_cmp(&b.estimate))
    });
    let best_high = orders.first().and_then(|o| o.high);
    for (i, o) in orders.iter_mut().enumerate() {
        o.rank = i as u32 + 1;
        o.separated =
            i > 0 && best_high.is_some_and(|h| o.at_least > h || o.low.is_some_and(|l| l > h));
    }
}

/// Whether a ranking is settled (see the module docs).
pub fn converged(orders: &[StudyOrder]) -> bool {
    let Some(best) = orders.first() else {
        return false;
    };
    if orders.iter().any(|o| (o.rounds as usize) < MIN_ROUNDS) {
        return false;
    }
    let tight = |o: &StudyOrder| match (o.low, o.high) {
        (Some(l), Some(h)) => (h - l) / 2.0 <= TIE_WIDTH * o.estimate.max(f64::MIN_POSITIVE),
        _ => false,
    };
    best.high.is_some()
        && orders[1..]
            .iter()
            .all(|o| o.separated || (tight(o) && tight(best)))
}
