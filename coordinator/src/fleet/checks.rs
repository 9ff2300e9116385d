//! What can be checked of a result without re-running it: its shape, counts above the
//! prefix, the budget, the cursor, every solution and the deepest board (for a study's
//! probe: its shape, that each depth's children could come from the boards above, and
//! that it claims nothing else). A result that fails here is wrong whatever other runs
//! say.

use e2fleet_engine::search::Walker;
use e2fleet_engine::unit::StopReason;
use e2fleet_engine::verify::verify_board;
use e2fleet_engine::{Unit, UnitResult};

use super::JobCtx;

/// Checks `r` as a result of `unit` under `budget`; the reason when it cannot be right.
pub(crate) fn check_result(
    ctx: &JobCtx,
    unit: &Unit,
    budget: Option<u64>,
    r: &UnitResult,
) -> Result<(), String> {
    let plan = &ctx.spec.plan;
    let puzzle = &ctx.spec.puzzle;
    let depths = plan.len();
    if let Some(particles) = ctx.probe_particles {
        // a study's probe: children listed per depth, not a walk's counts
        return e2fleet_engine::search::estimate::probe::check_probe(
            r,
            &unit.prefix,
            depths,
            particles as usize,
            plan.initial_used.len(),
        );
    }
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
    if let Some(budget) = budget
        && r.committed > budget
    {
        return Err(format!(
            "committed {} nodes, above the budget {budget}",
            r.committed
        ));
    }
    if let Some(cursor) = &r.cursor {
        if let Some(budget) = budget
            && r.stop == Some(StopReason::Budget)
            && r.committed != budget
        {
            return Err("a budget stop must commit exactly the budget".into());
        }
        let mut path = unit.prefix.clone();
        path.extend_from_slice(cursor);
        verify_board(puzzle, &path, false).map_err(|e| format!("cursor: {e}"))?;
        Walker::new(plan)
            .check_path(&path)
            .map_err(|e| format!("cursor: {e}"))?;
    }
    if (r.solutions.len() as u64) > r.solutions_count
        || (depths > 0 && r.solutions_count != r.nodes_by_depth[depths - 1])
    {
        return Err("solution count disagrees with the last depth's node count".into());
    }
    for s in &r.solutions {
        verify_board(puzzle, s, true).map_err(|e| format!("solution: {e}"))?;
        if !unit.prefix.iter().all(|p| s.contains(p)) {
            return Err("a solution does not extend the unit's prefix".into());
        }
    }
    if r.max_depth > depths || r.deepest.len() != r.max_depth {
        return Err("deepest board and max_depth disagree".into());
    }
    verify_board(puzzle, &r.deepest, false).map_err(|e| format!("deepest board: {e}"))?;
    Walker::new(plan)
        .check_path(&r.deepest)
        .map_err(|e| format!("deepest board: {e}"))?;
    Ok(())
}
