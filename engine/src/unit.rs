//! Work units and their results, as defined in `COUNTING.md`.
//!
//! A [`Unit`] is a prefix (a legal filling of the first `d` cells of the fill order) plus
//! an optional cursor (where an earlier, budget-stopped run of the same prefix stopped).
//! With an empty cursor it means "walk everything below the prefix"; with a cursor it is a
//! continuation: the subtree of the cursor's last placement, then the untried siblings of
//! each cursor placement, deepest first, up to depth `d + 1`.
//!
//! A [`UnitResult`] counts nodes strictly below the prefix, per absolute depth, and so
//! satisfies `unit.nodes = committed + continuation.nodes` exactly.

use serde::{Deserialize, Serialize};

use crate::model::Placement;

/// A piece of the search tree to walk.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Unit {
    /// Placements at depths `1..=d`, in fill order.
    pub prefix: Vec<Placement>,
    /// Placements at depths `d+1..=j` where an earlier run stopped; empty for a plain unit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cursor: Vec<Placement>,
}

impl Unit {
    /// The whole tree: empty prefix, no cursor.
    pub fn root() -> Self {
        Unit::default()
    }
    /// A plain prefix unit.
    pub fn prefix(prefix: Vec<Placement>) -> Self {
        Unit {
            prefix,
            cursor: Vec::new(),
        }
    }
    /// The continuation of `self` after a run stopped at `cursor`. The cursor of a
    /// continuation that stopped again is already absolute (it starts at depth `d + 1`).
    pub fn continuation(&self, cursor: Vec<Placement>) -> Self {
        Unit {
            prefix: self.prefix.clone(),
            cursor,
        }
    }
    /// `d`, the prefix depth.
    pub fn depth(&self) -> usize {
        self.prefix.len()
    }
}

/// Why a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The whole unit was walked.
    Finished,
    /// The node budget was reached.
    Budget,
    /// The caller asked it to stop (shutdown, preemption); reported like a budget stop.
    Requested,
}

/// The exact outcome of walking a unit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitResult {
    /// Nodes committed per absolute depth; index `k - 1` is depth `k`. Its length is the
    /// number of free cells. Depths at or above the prefix are zero.
    pub nodes_by_depth: Vec<u64>,
    /// Sum of `nodes_by_depth`.
    pub committed: u64,
    /// Exact number of solutions found (nodes at the last depth).
    pub solutions_count: u64,
    /// The first solutions found, each a full board (hints included) sorted by cell;
    /// capped, while `solutions_count` is always exact.
    pub solutions: Vec<Vec<Placement>>,
    /// The deepest depth of any node this run committed (the prefix depth if none).
    pub max_depth: usize,
    /// The first board that reached `max_depth`: the placements at depths `1..=max_depth`.
    pub deepest: Vec<Placement>,
    /// Where the walk stopped, when it did not finish: the placements on the current path
    /// below the prefix (depths `d+1..=j`), the last one just committed.
    pub cursor: Option<Vec<Placement>>,
    /// Why the run ended.
    pub stop: Option<StopReason>,
}

impl UnitResult {
    /// `true` when the unit was walked to the end.
    pub fn finished(&self) -> bool {
        self.cursor.is_none()
    }

    /// Adds another result's counts into this one (depth by depth), keeping the first
    /// solutions up to `cap` and the deepest board (earlier one on ties).
    pub fn absorb(&mut self, other: &UnitResult, cap: usize) {
        if self.nodes_by_depth.len() < other.nodes_by_depth.len() {
            self.nodes_by_depth.resize(other.nodes_by_depth.len(), 0);
        }
        for (mine, theirs) in self.nodes_by_depth.iter_mut().zip(&other.nodes_by_depth) {
            *mine += theirs;
        }
        self.committed += other.committed;
        self.solutions_count += other.solutions_count;
        for solution in &other.solutions {
            if self.solutions.len() >= cap {
                break;
            }
            self.solutions.push(solution.clone());
        }
        if other.max_depth > self.max_depth {
            self.max_depth = other.max_depth;
            self.deepest = other.deepest.clone();
        }
    }
}

/// The SHA-256 (hex) of a result's canonical form: per-depth counts, cursor, solution
/// count and boards, deepest depth and board. Two runs agree exactly when their digests
/// are equal; the coordinator compares replicas with it and verification suites store it.
///
/// The canonical form is compact JSON with sorted keys —
/// `{"cursor":..,"deepest":..,"max_depth":..,"nodes":..,"solutions":..,"solutions_count":..}`,
/// each placement as `{"piece":..,"pos":..,"rot":..}` — written straight into the hash
/// (the coordinator digests every report; building a `serde_json::Value` first cost ~5x
/// more). Stored digests depend on this exact text: the test below pins it to the
/// `serde_json::json!` form it was first defined by.
pub fn result_digest(r: &UnitResult) -> String {
    use sha2::{Digest, Sha256};
    // numbers through `itoa` and bytes through `hex`, not `write!`: the formatting
    // machinery was most of a digest's time (the coordinator digests every report)
    fn number(out: &mut String, n: impl itoa::Integer) {
        out.push_str(itoa::Buffer::new().format(n));
    }
    fn path(out: &mut String, path: &[Placement]) {
        out.push('[');
        for (i, p) in path.iter().enumerate() {
            out.push_str(if i == 0 {
                r#"{"piece":"#
            } else {
                r#",{"piece":"#
            });
            number(out, p.piece);
            out.push_str(r#","pos":"#);
            number(out, p.pos);
            out.push_str(r#","rot":"#);
            number(out, p.rot);
            out.push('}');
        }
        out.push(']');
    }
    let mut out = String::with_capacity(64 + 12 * r.nodes_by_depth.len() + 32 * r.deepest.len());
    out.push_str(r#"{"cursor":"#);
    match &r.cursor {
        Some(c) => path(&mut out, c),
        None => out.push_str("null"),
    }
    out.push_str(r#","deepest":"#);
    path(&mut out, &r.deepest);
    out.push_str(r#","max_depth":"#);
    number(&mut out, r.max_depth);
    out.push_str(r#","nodes":["#);
    for (i, n) in r.nodes_by_depth.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        number(&mut out, *n);
    }
    out.push_str(r#"],"solutions":["#);
    for (i, s) in r.solutions.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        path(&mut out, s);
    }
    out.push_str(r#"],"solutions_count":"#);
    number(&mut out, r.solutions_count);
    out.push('}');
    hex::encode(Sha256::digest(out.as_bytes()))
}

/// Adds `b` into `a` depth by depth.
pub fn add_counts(a: &mut Vec<u64>, b: &[u64]) {
    if a.len() < b.len() {
        a.resize(b.len(), 0);
    }
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

#[cfg(test)]
mod digest_tests {
    use super::*;
    use proptest::prelude::*;

    /// The definition the stored digests were made with.
    fn digest_by_definition(r: &UnitResult) -> String {
        use sha2::{Digest, Sha256};
        let canonical = serde_json::json!({
            "nodes": r.nodes_by_depth,
            "cursor": r.cursor,
            "solutions_count": r.solutions_count,
            "solutions": r.solutions,
            "max_depth": r.max_depth,
            "deepest": r.deepest,
        });
        hex::encode(Sha256::digest(canonical.to_string().as_bytes()))
    }

    fn placement() -> impl Strategy<Value = Placement> {
        (any::<u16>(), any::<u16>(), 0u8..4).prop_map(|(pos, piece, rot)| Placement {
            pos,
            piece,
            rot,
        })
    }

    proptest! {
        #[test]
        fn digest_matches_its_definition(
            nodes in prop::collection::vec(any::<u64>(), 0..40),
            cursor in prop::option::of(prop::collection::vec(placement(), 0..8)),
            solutions in prop::collection::vec(prop::collection::vec(placement(), 0..6), 0..3),
            deepest in prop::collection::vec(placement(), 0..10),
            solutions_count in any::<u64>(),
            max_depth in 0usize..300,
        ) {
            let r = UnitResult {
                nodes_by_depth: nodes,
                committed: 0,
                solutions_count,
                solutions,
                max_depth,
                deepest,
                cursor,
                stop: None,
            };
            prop_assert_eq!(result_digest(&r), digest_by_definition(&r));
        }
    }
}
