//! Wire <-> domain conversions. Every conversion from the wire is checked: values out of
//! range become a [`WireError`] that names the field, never a panic.

use e2fleet_engine::suite::SuiteUnit;
use e2fleet_engine::unit::StopReason;
use e2fleet_engine::{Placement, UnitResult};

use crate::v1;

/// A wire message that does not make a valid domain value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError(pub String);

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WireError {}

/// A domain placement on the wire.
pub fn placement_to_wire(p: &Placement) -> v1::Placement {
    v1::Placement {
        pos: p.pos as u32,
        piece: p.piece as u32,
        rot: p.rot as u32,
    }
}

/// A wire placement as a domain one.
pub fn placement_from_wire(p: &v1::Placement, field: &str) -> Result<Placement, WireError> {
    if p.pos > u16::MAX as u32 || p.piece > u16::MAX as u32 || p.rot > 3 {
        return Err(WireError(format!(
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
pub fn path_to_wire(path: &[Placement]) -> Vec<v1::Placement> {
    path.iter().map(placement_to_wire).collect()
}

/// A list of wire placements as domain ones.
pub fn path_from_wire(path: &[v1::Placement], field: &str) -> Result<Vec<Placement>, WireError> {
    path.iter().map(|p| placement_from_wire(p, field)).collect()
}

/// A domain result on the wire.
pub fn result_to_wire(r: &UnitResult) -> v1::UnitResult {
    v1::UnitResult {
        nodes_by_depth: r.nodes_by_depth.clone(),
        committed: r.committed,
        solutions_count: r.solutions_count,
        solutions: r
            .solutions
            .iter()
            .map(|s| v1::Board {
                cells: path_to_wire(s),
            })
            .collect(),
        max_depth: r.max_depth as u32,
        deepest: Some(v1::Board {
            cells: path_to_wire(&r.deepest),
        }),
        stopped: r.cursor.is_some(),
        cursor: r.cursor.as_deref().map(path_to_wire).unwrap_or_default(),
        stop_reason: match r.stop {
            Some(StopReason::Budget) => "budget",
            Some(StopReason::Requested) => "requested",
            _ => "finished",
        }
        .into(),
    }
}

/// A wire result as a domain one, with its internal consistency checked (the committed
/// count is the sum of the per-depth counts, a stop has a cursor).
pub fn result_from_wire(r: &v1::UnitResult, depths: usize) -> Result<UnitResult, WireError> {
    if r.nodes_by_depth.len() != depths {
        return Err(WireError(format!(
            "nodes_by_depth has {} entries, the job has {depths} depths",
            r.nodes_by_depth.len()
        )));
    }
    let sum = r
        .nodes_by_depth
        .iter()
        .try_fold(0u64, |a, &b| a.checked_add(b))
        .ok_or_else(|| WireError("nodes_by_depth overflows".into()))?;
    if sum != r.committed {
        return Err(WireError(format!(
            "committed is {} but nodes_by_depth adds up to {sum}",
            r.committed
        )));
    }
    if r.max_depth as usize > depths {
        return Err(WireError("max_depth is past the last depth".into()));
    }
    let stop = match r.stop_reason.as_str() {
        "finished" | "" => StopReason::Finished,
        "budget" => StopReason::Budget,
        "requested" => StopReason::Requested,
        other => return Err(WireError(format!("unknown stop_reason {other:?}"))),
    };
    if r.stopped != (stop != StopReason::Finished) || (r.stopped && r.cursor.is_empty()) {
        return Err(WireError("stopped, stop_reason and cursor disagree".into()));
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
        deepest: r
            .deepest
            .as_ref()
            .map(|b| path_from_wire(&b.cells, "deepest"))
            .transpose()?
            .unwrap_or_default(),
        cursor: if r.stopped {
            Some(path_from_wire(&r.cursor, "cursor")?)
        } else {
            None
        },
        stop: Some(stop),
    })
}

/// A verification unit as handed to workers (its expected result is not sent).
pub fn suite_unit_to_wire(u: &SuiteUnit) -> v1::SuiteUnitSpec {
    v1::SuiteUnitSpec {
        name: u.name.clone(),
        puzzle: u.puzzle.clone(),
        order: u.order.clone(),
        prefix_depth: u.prefix_depth as u32,
        prefix_index: u.prefix_index as u64,
        budget: u.budget.unwrap_or(0),
        speed: u.speed,
    }
}

/// A verification unit from the wire, without an expected result.
pub fn suite_unit_from_wire(u: &v1::SuiteUnitSpec) -> SuiteUnit {
    SuiteUnit {
        name: u.name.clone(),
        puzzle: u.puzzle.clone(),
        order: u.order.clone(),
        prefix_depth: u.prefix_depth as usize,
        prefix_index: u.prefix_index as usize,
        budget: (u.budget > 0).then_some(u.budget),
        speed: u.speed,
        expected: None,
    }
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
        w.nodes_by_depth = vec![u64::MAX, 2];
        assert!(result_from_wire(&w, 2).is_err());
    }
}
