//! Conversions of order studies.

use super::*;
use crate::api::{StudyCreated, StudyOrder, StudyRequest, StudyStatus};

impl From<&StudyRequest> for v2::SubmitStudyRequest {
    fn from(r: &StudyRequest) -> v2::SubmitStudyRequest {
        v2::SubmitStudyRequest {
            name: r.name.clone(),
            puzzle_json: r.puzzle_json.clone(),
            orders: r.orders.clone(),
            particles: r.particles.unwrap_or(0),
            rounds: r.rounds.unwrap_or(0),
            replicas: r.replicas,
            spot_check: r.spot_check,
            priority: r.priority,
        }
    }
}

impl From<&v2::SubmitStudyRequest> for StudyRequest {
    fn from(r: &v2::SubmitStudyRequest) -> StudyRequest {
        StudyRequest {
            name: r.name.clone(),
            puzzle_json: r.puzzle_json.clone(),
            orders: r.orders.clone(),
            particles: (r.particles > 0).then_some(r.particles),
            rounds: (r.rounds > 0).then_some(r.rounds),
            replicas: r.replicas.max(1),
            spot_check: r.spot_check,
            priority: r.priority,
        }
    }
}

impl From<&StudyCreated> for v2::SubmitStudyResponse {
    fn from(c: &StudyCreated) -> v2::SubmitStudyResponse {
        v2::SubmitStudyResponse {
            study_id: c.study_id.to_string(),
            units: c.units,
        }
    }
}

impl TryFrom<&v2::SubmitStudyResponse> for StudyCreated {
    type Error = WireError;
    fn try_from(c: &v2::SubmitStudyResponse) -> Result<StudyCreated, WireError> {
        Ok(StudyCreated {
            study_id: id_from_wire(&c.study_id)?,
            units: c.units,
        })
    }
}

impl From<&StudyOrder> for v2::StudyOrder {
    fn from(o: &StudyOrder) -> v2::StudyOrder {
        v2::StudyOrder {
            order: o.order.clone(),
            job_id: o.job_id.to_string(),
            estimate: o.estimate,
            low: o.low,
            high: o.high,
            at_least: o.at_least,
            rounds: o.rounds,
            rounds_planned: o.rounds_planned,
            strata: o.strata,
            strata_depth: o.strata_depth,
            nodes_by_depth: o.nodes_by_depth.clone(),
            error_by_depth: o.error_by_depth.clone(),
            constraints_by_depth: o.constraints_by_depth.clone(),
            cells: o.cells.clone(),
            how: o.how.clone(),
            rank: o.rank,
            separated: o.separated,
        }
    }
}

impl TryFrom<&v2::StudyOrder> for StudyOrder {
    type Error = WireError;
    fn try_from(o: &v2::StudyOrder) -> Result<StudyOrder, WireError> {
        Ok(StudyOrder {
            order: o.order.clone(),
            job_id: id_from_wire(&o.job_id)?,
            estimate: o.estimate,
            low: o.low,
            high: o.high,
            at_least: o.at_least,
            rounds: o.rounds,
            rounds_planned: o.rounds_planned,
            strata: o.strata,
            strata_depth: o.strata_depth,
            nodes_by_depth: o.nodes_by_depth.clone(),
            error_by_depth: o.error_by_depth.clone(),
            constraints_by_depth: o.constraints_by_depth.clone(),
            cells: o.cells.clone(),
            how: o.how.clone(),
            rank: o.rank,
            separated: o.separated,
        })
    }
}

impl From<&StudyStatus> for v2::StudyStatus {
    fn from(s: &StudyStatus) -> v2::StudyStatus {
        v2::StudyStatus {
            study_id: s.study_id.to_string(),
            name: s.name.clone(),
            state: s.state.clone(),
            created_unix_ms: s.created_ms,
            width: s.width,
            height: s.height,
            particles: s.particles,
            orders: s.orders.iter().map(Into::into).collect(),
            hints: s.hints.clone(),
        }
    }
}

impl TryFrom<&v2::StudyStatus> for StudyStatus {
    type Error = WireError;
    fn try_from(s: &v2::StudyStatus) -> Result<StudyStatus, WireError> {
        Ok(StudyStatus {
            study_id: id_from_wire(&s.study_id)?,
            name: s.name.clone(),
            state: s.state.clone(),
            created_ms: s.created_unix_ms,
            width: s.width,
            height: s.height,
            particles: s.particles,
            orders: s
                .orders
                .iter()
                .map(StudyOrder::try_from)
                .collect::<Result<_, _>>()?,
            hints: s.hints.clone(),
        })
    }
}
