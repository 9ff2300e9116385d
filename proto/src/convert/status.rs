//! Conversions of the operators' read models.

use std::collections::BTreeMap;

use super::*;
use crate::api::status::*;

impl From<&JobStatus> for v2::JobStatus {
    fn from(j: &JobStatus) -> v2::JobStatus {
        v2::JobStatus {
            job_id: j.job_id.to_string(),
            name: j.name.clone(),
            state: job_state_to_wire(j.state).into(),
            order: j.order.clone(),
            depths: j.depths as u32,
            split_depth: j.split_depth as u32,
            budget: j.budget.unwrap_or(0),
            replicas: j.replicas,
            spot_check: j.spot_check,
            created_unix_ms: j.created_ms,
            finished_unix_ms: j.finished_ms,
            units: Some(v2::UnitCounts {
                open: j.units.open,
                leased: j.units.leased,
                done: j.units.done,
                cancelled: j.units.cancelled,
            }),
            nodes_total: j.nodes_total,
            nodes_by_depth: j.nodes_by_depth.clone(),
            enumeration_nodes: j.enumeration_nodes,
            split_nodes: j.split_nodes,
            unit_nodes: j.unit_nodes,
            solutions_count: j.solutions_count,
            solutions: j.solutions.iter().map(|s| board_to_wire(s)).collect(),
            deepest: Some(v2::DeepestBoard {
                depth: j.deepest.depth as u32,
                board: Some(board_to_wire(&j.deepest.board)),
            }),
            conservation_ok: j.conservation_ok,
            per_core_nodes_per_s: j.per_core_nodes_per_s,
            aggregate_nodes_per_s: j.aggregate_nodes_per_s,
            aggregate_raw_nodes_per_s: j.aggregate_raw_nodes_per_s,
            estimate: j.estimate.as_ref().map(|e| v2::Estimate {
                remaining_nodes: e.remaining_nodes,
                how: e.how.clone(),
                tree_nodes: e.tree_nodes,
                tree_low: e.tree_low,
                tree_high: e.tree_high,
                eta_seconds: e.eta_seconds,
                tree_how: e.tree_how.clone(),
                tree_at_least: e.tree_at_least,
            }),
            results: j
                .results
                .iter()
                .map(|g| v2::ResultGroup {
                    verdict: result_verdict_to_wire(g.verdict).into(),
                    engine_kind: engine_kind_to_wire(g.engine_kind).into(),
                    engine_build: g.engine_build.clone(),
                    results: g.results,
                    nodes: g.nodes,
                })
                .collect(),
            waiting: Some(v2::Waiting {
                for_another_worker: j.waiting.for_another_worker,
                for_another_account: j.waiting.for_another_account,
                disputed: j.waiting.disputed,
                workers_needed: j.waiting.workers_needed,
                workers_online: j.waiting.workers_online,
                parties_online: j.waiting.parties_online,
                reason: j.waiting.reason.clone(),
                disputes: j
                    .waiting
                    .disputes
                    .iter()
                    .map(|d| v2::Dispute {
                        unit_id: d.unit_id,
                        parties: d.parties.clone(),
                    })
                    .collect(),
            }),
            priority: j.priority,
            share: j.share,
            paused: j.paused,
        }
    }
}

impl TryFrom<&v2::JobStatus> for JobStatus {
    type Error = WireError;
    fn try_from(j: &v2::JobStatus) -> Result<JobStatus, WireError> {
        let units = j.units.unwrap_or_default();
        let deepest = j.deepest.clone().unwrap_or_default();
        Ok(JobStatus {
            job_id: id_from_wire(&j.job_id)?,
            name: j.name.clone(),
            state: job_state_from_wire(j.state)?,
            order: j.order.clone(),
            depths: j.depths as usize,
            split_depth: j.split_depth as usize,
            budget: (j.budget > 0).then_some(j.budget),
            replicas: j.replicas,
            spot_check: j.spot_check,
            created_ms: j.created_unix_ms,
            finished_ms: j.finished_unix_ms,
            units: UnitCounts {
                open: units.open,
                leased: units.leased,
                done: units.done,
                cancelled: units.cancelled,
            },
            nodes_total: j.nodes_total,
            nodes_by_depth: j.nodes_by_depth.clone(),
            enumeration_nodes: j.enumeration_nodes,
            split_nodes: j.split_nodes,
            unit_nodes: j.unit_nodes,
            solutions_count: j.solutions_count,
            solutions: j
                .solutions
                .iter()
                .map(|b| path_from_wire(&b.cells, "solutions"))
                .collect::<Result<_, _>>()?,
            deepest: DeepestBoard {
                depth: deepest.depth as usize,
                board: board_from_wire(deepest.board.as_ref(), "deepest")?,
            },
            conservation_ok: j.conservation_ok,
            per_core_nodes_per_s: j.per_core_nodes_per_s,
            aggregate_nodes_per_s: j.aggregate_nodes_per_s,
            aggregate_raw_nodes_per_s: j.aggregate_raw_nodes_per_s,
            estimate: j.estimate.as_ref().map(|e| Estimate {
                remaining_nodes: e.remaining_nodes,
                how: e.how.clone(),
                tree_nodes: e.tree_nodes,
                tree_low: e.tree_low,
                tree_high: e.tree_high,
                eta_seconds: e.eta_seconds,
                tree_how: e.tree_how.clone(),
                tree_at_least: e.tree_at_least,
            }),
            results: j
                .results
                .iter()
                .map(|g| {
                    Ok(ResultGroup {
                        verdict: result_verdict_from_wire(g.verdict)?,
                        engine_kind: engine_kind_from_wire(g.engine_kind, "engine_kind")?,
                        engine_build: g.engine_build.clone(),
                        results: g.results,
                        nodes: g.nodes,
                    })
                })
                .collect::<Result<_, WireError>>()?,
            waiting: j
                .waiting
                .as_ref()
                .map(|w| Waiting {
                    for_another_worker: w.for_another_worker,
                    for_another_account: w.for_another_account,
                    disputed: w.disputed,
                    workers_needed: w.workers_needed,
                    workers_online: w.workers_online,
                    parties_online: w.parties_online,
                    reason: w.reason.clone(),
                    disputes: w
                        .disputes
                        .iter()
                        .map(|d| crate::api::status::Dispute {
                            unit_id: d.unit_id,
                            parties: d.parties.clone(),
                        })
                        .collect(),
                })
                .unwrap_or_default(),
            priority: j.priority,
            share: j.share,
            paused: j.paused,
        })
    }
}

fn groups_to_wire(groups: &[RateGroup]) -> Vec<v2::RateGroup> {
    groups
        .iter()
        .map(|g| v2::RateGroup {
            key: g.key.clone(),
            results: g.results,
            median_nodes_per_s: g.median_nodes_per_s,
        })
        .collect()
}

fn groups_from_wire(groups: &[v2::RateGroup]) -> Vec<RateGroup> {
    groups
        .iter()
        .map(|g| RateGroup {
            key: g.key.clone(),
            results: g.results,
            median_nodes_per_s: g.median_nodes_per_s,
        })
        .collect()
}

impl From<&FleetStatus> for v2::FleetStatusResponse {
    fn from(f: &FleetStatus) -> v2::FleetStatusResponse {
        let w = &f.workers;
        let pc = &f.per_core_nodes_per_s;
        let u = &f.units_last_minute;
        v2::FleetStatusResponse {
            workers: Some(v2::WorkerCounts {
                total: w.total,
                online: w.online,
                idle: w.idle,
                offline: w.offline,
                quarantined: w.quarantined,
                paused: w.paused,
            }),
            aggregate_raw_nodes_per_s: f.aggregate_nodes_per_s.raw,
            aggregate_verified_nodes_per_s: f.aggregate_nodes_per_s.verified,
            aggregate_series: f
                .aggregate_series
                .iter()
                .map(|m| v2::MinuteSample {
                    minute_unix_ms: m.minute_unix_ms,
                    raw_nodes_per_s: m.raw_nodes_per_s,
                    verified_nodes_per_s: m.verified_nodes_per_s,
                    units_completed: m.units_completed,
                    leases_created: m.leases_created,
                    leases_expired: m.leases_expired,
                })
                .collect(),
            per_core: Some(v2::PerCoreRates {
                overall: pc.overall,
                by_cpu_model: groups_to_wire(&pc.by_cpu_model),
                by_engine_kind: groups_to_wire(&pc.by_engine_kind),
                by_host: groups_to_wire(&pc.by_host),
            }),
            units_last_minute: Some(v2::UnitEvents {
                leased: u.leased,
                completed: u.completed,
                expired: u.expired,
            }),
            wrong_results: f.wrong_results,
        }
    }
}

impl From<&v2::FleetStatusResponse> for FleetStatus {
    fn from(f: &v2::FleetStatusResponse) -> FleetStatus {
        let w = f.workers.unwrap_or_default();
        let pc = f.per_core.clone().unwrap_or_default();
        let u = f.units_last_minute.unwrap_or_default();
        FleetStatus {
            workers: WorkerCounts {
                total: w.total,
                online: w.online,
                idle: w.idle,
                offline: w.offline,
                quarantined: w.quarantined,
                paused: w.paused,
            },
            aggregate_nodes_per_s: AggregateRate {
                what: AGGREGATE_WHAT.into(),
                raw: f.aggregate_raw_nodes_per_s,
                verified: f.aggregate_verified_nodes_per_s,
            },
            aggregate_series: f
                .aggregate_series
                .iter()
                .map(|m| MinuteSample {
                    minute_unix_ms: m.minute_unix_ms,
                    raw_nodes_per_s: m.raw_nodes_per_s,
                    verified_nodes_per_s: m.verified_nodes_per_s,
                    units_completed: m.units_completed,
                    leases_created: m.leases_created,
                    leases_expired: m.leases_expired,
                })
                .collect(),
            per_core_nodes_per_s: PerCoreRates {
                what: PER_CORE_WHAT.into(),
                overall: pc.overall,
                by_cpu_model: groups_from_wire(&pc.by_cpu_model),
                by_engine_kind: groups_from_wire(&pc.by_engine_kind),
                by_host: groups_from_wire(&pc.by_host),
            },
            units_last_minute: UnitEvents {
                leased: u.leased,
                completed: u.completed,
                expired: u.expired,
            },
            wrong_results: f.wrong_results,
        }
    }
}

impl From<&WorkerStatus> for v2::WorkerStatus {
    fn from(w: &WorkerStatus) -> v2::WorkerStatus {
        v2::WorkerStatus {
            id: w.id.to_string(),
            account: w.account.to_string(),
            host: Some((&w.host).into()),
            engine_build: w.engine_build.clone(),
            class_id: w.class_id.clone(),
            registered_unix_ms: w.registered_ms,
            last_seen_unix_ms: w.last_seen_ms,
            per_core_rate: w.per_core_rate,
            threads: w.threads,
            paused: w.paused.clone(),
            network_wait: w.network_wait,
            round_trip_ms: w.round_trip_ms,
            units_done: w.units_done,
            errors: w.errors,
            quarantined: w.quarantined,
            leases_held: w.leases_held,
            state: worker_state_to_wire(w.state).into(),
        }
    }
}

impl TryFrom<&v2::WorkerStatus> for WorkerStatus {
    type Error = WireError;
    fn try_from(w: &v2::WorkerStatus) -> Result<WorkerStatus, WireError> {
        Ok(WorkerStatus {
            id: id_from_wire(&w.id)?,
            account: id_from_wire(&w.account)?,
            host: w
                .host
                .as_ref()
                .ok_or_else(|| invalid("worker without host".into()))?
                .try_into()?,
            engine_build: w.engine_build.clone(),
            class_id: w.class_id.clone(),
            registered_ms: w.registered_unix_ms,
            last_seen_ms: w.last_seen_unix_ms,
            per_core_rate: w.per_core_rate,
            threads: w.threads,
            paused: w.paused.clone(),
            network_wait: w.network_wait,
            round_trip_ms: w.round_trip_ms,
            units_done: w.units_done,
            errors: w.errors,
            quarantined: w.quarantined,
            leases_held: w.leases_held,
            state: worker_state_from_wire(w.state)?,
        })
    }
}

impl From<&VerificationMatrix> for v2::VerificationMatrixResponse {
    fn from(m: &VerificationMatrix) -> v2::VerificationMatrixResponse {
        v2::VerificationMatrixResponse {
            suite: m.suite.clone(),
            units: m
                .units
                .iter()
                .map(|u| v2::MatrixUnit {
                    spec: Some(v2::SuiteUnitSpec {
                        name: u.name.clone(),
                        puzzle: u.puzzle.clone(),
                        order: u.order.clone(),
                        prefix_depth: u.prefix_depth as u32,
                        prefix_index: u.prefix_index as u64,
                        budget: u.budget.unwrap_or(0),
                        speed: u.speed,
                    }),
                    expected: u.expected.as_ref().map(|e| v2::ExpectedSummary {
                        committed: e.committed,
                        solutions_count: e.solutions_count,
                        digest: e.digest.clone(),
                    }),
                    expected_source: u.expected_source.clone(),
                })
                .collect(),
            classes: m
                .classes
                .iter()
                .map(|c| v2::MatrixClass {
                    id: c.id.clone(),
                    cpu_model: c.cpu_model.clone(),
                    arch: c.arch.clone(),
                    os: c.os.clone(),
                    rustc_version: c.rustc_version.clone(),
                    target_features: c.target_features.clone(),
                    engine_kind: engine_kind_to_wire(c.engine_kind).into(),
                    engine_release: c.engine_release.clone(),
                    first_seen_unix_ms: c.first_seen_ms,
                    flagged: c.flagged,
                    hosts: c.hosts.clone(),
                    // in the suite's order: the map's keys are names, the wire keeps order
                    cells: m
                        .units
                        .iter()
                        .filter_map(|u| c.cells.get(&u.name).map(|cell| (u, cell)))
                        .map(|(u, cell)| v2::MatrixCell {
                            unit: u.name.clone(),
                            verdict: verdict_to_wire(cell.verdict).into(),
                            results: cell.results,
                            nodes: cell.nodes,
                            per_core_nodes_per_s: cell.per_core_nodes_per_s,
                            engine_build: cell.engine_build.clone(),
                            hosts: cell.hosts.clone(),
                            last_unix_ms: cell.last_ms,
                        })
                        .collect(),
                    speed_nodes_per_s: c.speed_nodes_per_s,
                })
                .collect(),
        }
    }
}

impl TryFrom<&v2::VerificationMatrixResponse> for VerificationMatrix {
    type Error = WireError;
    fn try_from(m: &v2::VerificationMatrixResponse) -> Result<VerificationMatrix, WireError> {
        let units = m
            .units
            .iter()
            .map(|u| {
                let spec = u.spec.clone().unwrap_or_default();
                MatrixUnit {
                    name: spec.name,
                    puzzle: spec.puzzle,
                    order: spec.order,
                    prefix_depth: spec.prefix_depth as usize,
                    prefix_index: spec.prefix_index as usize,
                    budget: (spec.budget > 0).then_some(spec.budget),
                    speed: spec.speed,
                    expected: u.expected.as_ref().map(|e| ExpectedSummary {
                        committed: e.committed,
                        solutions_count: e.solutions_count,
                        digest: e.digest.clone(),
                    }),
                    expected_source: u.expected_source.clone(),
                }
            })
            .collect();
        let classes = m
            .classes
            .iter()
            .map(|c| {
                let cells = c
                    .cells
                    .iter()
                    .map(|cell| {
                        Ok((
                            cell.unit.clone(),
                            MatrixCell {
                                verdict: verdict_from_wire(cell.verdict)?,
                                results: cell.results,
                                nodes: cell.nodes,
                                per_core_nodes_per_s: cell.per_core_nodes_per_s,
                                engine_build: cell.engine_build.clone(),
                                hosts: cell.hosts.clone(),
                                last_ms: cell.last_unix_ms,
                            },
                        ))
                    })
                    .collect::<Result<BTreeMap<_, _>, WireError>>()?;
                Ok(MatrixClass {
                    id: c.id.clone(),
                    cpu_model: c.cpu_model.clone(),
                    arch: c.arch.clone(),
                    os: c.os.clone(),
                    rustc_version: c.rustc_version.clone(),
                    target_features: c.target_features.clone(),
                    engine_kind: engine_kind_from_wire(c.engine_kind, "engine_kind")?,
                    engine_release: c.engine_release.clone(),
                    first_seen_ms: c.first_seen_unix_ms,
                    flagged: c.flagged,
                    hosts: c.hosts.clone(),
                    cells,
                    speed_nodes_per_s: c.speed_nodes_per_s,
                })
            })
            .collect::<Result<Vec<_>, WireError>>()?;
        Ok(VerificationMatrix {
            suite: m.suite.clone(),
            what: MATRIX_WHAT.into(),
            units,
            speed_table: VerificationMatrix::speed_table_of(&classes),
            classes,
        })
    }
}

impl From<&AccountStatus> for v2::AccountStatus {
    fn from(a: &AccountStatus) -> v2::AccountStatus {
        v2::AccountStatus {
            id: a.id.to_string(),
            kind: account_kind_to_wire(a.kind).into(),
            created_unix_ms: a.created_ms,
            revoked_unix_ms: a.revoked_ms,
            trusted: a.trusted,
            confirmed_streak: a.confirmed_streak,
            confirmed_results: a.confirmed_results,
            confirmed_nodes: a.confirmed_nodes,
            credit_results: a.credit_results,
            credit_nodes: a.credit_nodes,
            errors: a.errors,
            quarantined: a.quarantined,
            workers: a.workers,
            team: a.team.as_ref().map(ToString::to_string).unwrap_or_default(),
        }
    }
}

impl TryFrom<&v2::AccountStatus> for AccountStatus {
    type Error = WireError;
    fn try_from(a: &v2::AccountStatus) -> Result<AccountStatus, WireError> {
        Ok(AccountStatus {
            id: id_from_wire(&a.id)?,
            kind: account_kind_from_wire(a.kind)?,
            created_ms: a.created_unix_ms,
            revoked_ms: a.revoked_unix_ms,
            trusted: a.trusted,
            confirmed_streak: a.confirmed_streak,
            confirmed_results: a.confirmed_results,
            confirmed_nodes: a.confirmed_nodes,
            credit_results: a.credit_results,
            credit_nodes: a.credit_nodes,
            errors: a.errors,
            quarantined: a.quarantined,
            workers: a.workers,
            team: match a.team.as_str() {
                "" => None,
                t => Some(id_from_wire(t)?),
            },
        })
    }
}
