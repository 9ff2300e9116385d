//! Wire <-> domain conversions: the only place `e2fleet.v2` messages meet the rest of the
//! code. Every conversion from the wire is checked: a value out of range, an unknown enum
//! or a malformed id becomes a [`WireError`] that names the field, never a panic.
//!
//! - this file: placements, results and every enum;
//! - `work`: host labels, job requests, leases, specs, reports, verification;
//! - `status`: the operators' read models;
//! - `study`: order studies.

mod status;
mod study;
mod work;

pub use work::{suite_unit_from_wire, suite_unit_to_wire};

use std::str::FromStr;

use e2fleet_engine::engine::EngineKind;
use e2fleet_engine::unit::StopReason;
use e2fleet_engine::{Placement, UnitResult};

use crate::api::{AccountKind, BadId, JobState, ReportStatus, ResultVerdict, Verdict, WorkerState};
use crate::v2;

/// A wire message that does not make a valid domain value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// A value is malformed, out of range or inconsistent.
    #[error("{0}")]
    Invalid(String),
    /// An id does not parse (so it names nothing that exists).
    #[error(transparent)]
    BadId(#[from] BadId),
}

/// A malformed value.
fn invalid(text: String) -> WireError {
    WireError::Invalid(text)
}

/// Parses an id field.
pub fn id_from_wire<T: FromStr<Err = BadId>>(text: &str) -> Result<T, WireError> {
    Ok(text.parse()?)
}

/// A domain placement on the wire.
pub fn placement_to_wire(p: &Placement) -> v2::Placement {
    v2::Placement {
        pos: p.pos as u32,
        piece: p.piece as u32,
        rot: p.rot as u32,
    }
}

/// A wire placement as a domain one.
pub fn placement_from_wire(p: &v2::Placement, field: &str) -> Result<Placement, WireError> {
    if p.pos > u16::MAX as u32 || p.piece > u16::MAX as u32 || p.rot > 3 {
        return Err(invalid(format!(
            "{field}: placement {}.{}.{} out of range",
            p.pos, p.piece, p.rot
        )));
    }
    Ok(Placement::new(
        p.pos as usize,
        p.piece as usize,
        p.rot as u8,
    ))
}

/// A list of domain placements on the wire.
pub fn path_to_wire(path: &[Placement]) -> Vec<v2::Placement> {
    path.iter().map(placement_to_wire).collect()
}

/// A list of wire placements as domain ones.
pub fn path_from_wire(path: &[v2::Placement], field: &str) -> Result<Vec<Placement>, WireError> {
    path.iter().map(|p| placement_from_wire(p, field)).collect()
}

fn board_to_wire(path: &[Placement]) -> v2::Board {
    v2::Board {
        cells: path_to_wire(path),
    }
}

fn board_from_wire(b: Option<&v2::Board>, field: &str) -> Result<Vec<Placement>, WireError> {
    b.map(|b| path_from_wire(&b.cells, field))
        .transpose()
        .map(Option::unwrap_or_default)
}

/// An engine kind on the wire.
pub fn engine_kind_to_wire(k: EngineKind) -> v2::EngineKind {
    match k {
        EngineKind::Reference => v2::EngineKind::Reference,
        EngineKind::Compiled => v2::EngineKind::Compiled,
        EngineKind::Lanes => v2::EngineKind::Lanes,
    }
}

/// A wire engine kind (an enum field's raw value) as a domain one.
pub fn engine_kind_from_wire(raw: i32, field: &str) -> Result<EngineKind, WireError> {
    match v2::EngineKind::try_from(raw) {
        Ok(v2::EngineKind::Reference) => Ok(EngineKind::Reference),
        Ok(v2::EngineKind::Compiled) => Ok(EngineKind::Compiled),
        Ok(v2::EngineKind::Lanes) => Ok(EngineKind::Lanes),
        _ => Err(invalid(format!("{field}: engine kind {raw} is not known"))),
    }
}

/// Maps between a domain enum and its wire enum, both ways; UNSPECIFIED and unknown
/// numbers are errors.
macro_rules! enum_wire {
    ($to:ident, $from:ident, $domain:ty, $wire:ty, $what:literal, { $($d:ident <=> $w:ident),* $(,)? }) => {
        /// The wire form.
        pub fn $to(v: $domain) -> $wire {
            match v {
                $(<$domain>::$d => <$wire>::$w,)*
            }
        }

        /// The domain form of a wire enum's raw value.
        pub fn $from(raw: i32) -> Result<$domain, WireError> {
            match <$wire>::try_from(raw) {
                $(Ok(<$wire>::$w) => Ok(<$domain>::$d),)*
                _ => Err(invalid(format!(concat!($what, " {} is not known"), raw))),
            }
        }
    };
}

enum_wire!(report_status_to_wire, report_status_from_wire, ReportStatus, v2::ReportStatus, "report status", {
    Accepted <=> Accepted,
    Replica <=> Replica,
    Duplicate <=> Duplicate,
    PendingCheck <=> PendingCheck,
    Mismatch <=> Mismatch,
    Wrong <=> Wrong,
    Rejected <=> Rejected,
    Late <=> Late,
});

enum_wire!(verdict_to_wire, verdict_from_wire, Verdict, v2::Verdict, "verdict", {
    Agrees <=> Agrees,
    Disagrees <=> Disagrees,
    Pending <=> Pending,
    NotRun <=> NotRun,
});

enum_wire!(job_state_to_wire, job_state_from_wire, JobState, v2::JobState, "job state", {
    Running <=> Running,
    Complete <=> Complete,
    Cancelled <=> Cancelled,
});

enum_wire!(worker_state_to_wire, worker_state_from_wire, WorkerState, v2::WorkerState, "worker state", {
    Online <=> Online,
    Idle <=> Idle,
    Offline <=> Offline,
    Quarantined <=> Quarantined,
});

enum_wire!(account_kind_to_wire, account_kind_from_wire, AccountKind, v2::AccountKind, "account kind", {
    Operator <=> Operator,
    Volunteer <=> Volunteer,
});

enum_wire!(result_verdict_to_wire, result_verdict_from_wire, ResultVerdict, v2::ResultVerdict, "result verdict", {
    Pending <=> Pending,
    Accepted <=> Accepted,
    Agree <=> Agree,
    Wrong <=> Wrong,
    Void <=> Void,
});

/// A domain result on the wire.
pub fn result_to_wire(r: &UnitResult) -> v2::UnitResult {
    v2::UnitResult {
        nodes_by_depth: r.nodes_by_depth.clone(),
        committed: r.committed,
        solutions_count: r.solutions_count,
        solutions: r.solutions.iter().map(|s| board_to_wire(s)).collect(),
        max_depth: r.max_depth as u32,
        deepest: Some(board_to_wire(&r.deepest)),
        stop_reason: match r.stop {
            Some(StopReason::Budget) => v2::StopReason::Budget,
            Some(StopReason::Requested) => v2::StopReason::Requested,
            _ => v2::StopReason::Finished,
        }
        .into(),
        cursor: r.cursor.as_deref().map(path_to_wire).unwrap_or_default(),
    }
}

/// A wire result as a domain one, with its internal consistency checked (the committed
/// count is the sum of the per-depth counts, a stop has a cursor and a finished run none).
pub fn result_from_wire(r: &v2::UnitResult, depths: usize) -> Result<UnitResult, WireError> {
    if r.nodes_by_depth.len() != depths {
        return Err(invalid(format!(
            "nodes_by_depth has {} entries, the job has {depths} depths",
            r.nodes_by_depth.len()
        )));
    }
    let sum = r
        .nodes_by_depth
        .iter()
        .try_fold(0u64, |a, &b| a.checked_add(b))
        .ok_or_else(|| invalid("nodes_by_depth overflows".into()))?;
    if sum != r.committed {
        return Err(invalid(format!(
            "committed is {} but nodes_by_depth adds up to {sum}",
            r.committed
        )));
    }
    if r.max_depth as usize > depths {
        return Err(invalid("max_depth is past the last depth".into()));
    }
    let stop = match v2::StopReason::try_from(r.stop_reason) {
        Ok(v2::StopReason::Finished | v2::StopReason::Unspecified) => StopReason::Finished,
        Ok(v2::StopReason::Budget) => StopReason::Budget,
        Ok(v2::StopReason::Requested) => StopReason::Requested,
        Err(_) => {
            return Err(invalid(format!(
                "stop_reason {} is not known",
                r.stop_reason
            )));
        }
    };
    let stopped = stop != StopReason::Finished;
    if stopped == r.cursor.is_empty() {
        return Err(invalid("stop_reason and cursor disagree".into()));
    }
    Ok(UnitResult {
        nodes_by_depth: r.nodes_by_depth.clone(),
        committed: r.committed,
        solutions_count: r.solutions_count,
        solutions: r
            .solutions
            .iter()
            .map(|b| path_from_wire(&b.cells, "solutions"))
            .collect::<Result<_, _>>()?,
        max_depth: r.max_depth as usize,
        deepest: board_from_wire(r.deepest.as_ref(), "deepest")?,
        cursor: if stopped {
            Some(path_from_wire(&r.cursor, "cursor")?)
        } else {
            None
        },
        stop: Some(stop),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_round_trip() {
        let r = UnitResult {
            nodes_by_depth: vec![1, 2, 3],
            committed: 6,
            solutions_count: 1,
            solutions: vec![vec![Placement::new(0, 1, 2)]],
            max_depth: 3,
            deepest: vec![Placement::new(4, 5, 1)],
            cursor: Some(vec![Placement::new(2, 3, 0)]),
            stop: Some(StopReason::Budget),
        };
        assert_eq!(result_from_wire(&result_to_wire(&r), 3).unwrap(), r);
    }

    #[test]
    fn inconsistent_results_are_rejected() {
        let mut w = result_to_wire(&UnitResult {
            nodes_by_depth: vec![1, 2],
            committed: 3,
            stop: Some(StopReason::Finished),
            ..UnitResult::default()
        });
        assert!(result_from_wire(&w, 2).is_ok());
        assert!(result_from_wire(&w, 3).is_err());
        w.committed = 4;
        assert!(result_from_wire(&w, 2).is_err());
        w.committed = 3;
        w.stop_reason = v2::StopReason::Budget.into();
        assert!(result_from_wire(&w, 2).is_err(), "a stop needs a cursor");
        w.stop_reason = 99;
        assert!(result_from_wire(&w, 2).is_err());
        w.stop_reason = 0;
        w.nodes_by_depth = vec![u64::MAX, 2];
        assert!(result_from_wire(&w, 2).is_err());
    }

    #[test]
    fn every_enum_round_trips_and_unspecified_is_refused() {
        for s in ReportStatus::ALL {
            assert_eq!(
                report_status_from_wire(report_status_to_wire(*s).into()).unwrap(),
                *s
            );
        }
        for v in Verdict::ALL {
            assert_eq!(verdict_from_wire(verdict_to_wire(*v).into()).unwrap(), *v);
        }
        for s in JobState::ALL {
            assert_eq!(
                job_state_from_wire(job_state_to_wire(*s).into()).unwrap(),
                *s
            );
        }
        for s in WorkerState::ALL {
            assert_eq!(
                worker_state_from_wire(worker_state_to_wire(*s).into()).unwrap(),
                *s
            );
        }
        for v in ResultVerdict::ALL {
            assert_eq!(
                result_verdict_from_wire(result_verdict_to_wire(*v).into()).unwrap(),
                *v
            );
        }
        assert!(report_status_from_wire(0).is_err());
        assert!(verdict_from_wire(77).is_err());
        assert!(engine_kind_from_wire(0, "kind").is_err());
        assert_eq!(
            engine_kind_from_wire(engine_kind_to_wire(EngineKind::Compiled).into(), "k").unwrap(),
            EngineKind::Compiled
        );
    }
}
