//! Prefix work on the reference walker: enumerating the fillings of the first cells (a
//! job's units), splitting a waiting continuation into sibling prefixes (COUNTING.md),
//! and checking that a path is a legal filling.

use super::{Leaf, NoControl, UnitError, Walker};
use crate::model::Placement;
use crate::plan::{SENTINEL, SearchPlan, candidate_piece};
use crate::unit::Unit;

impl Walker<'_> {
    /// Enumerates every legal filling of the first `depth` cells below `prefix`, calling
    /// `visit` with each; returns the nodes per depth (index 0 = depth 1) the enumeration
    /// committed, which by COUNTING.md count toward the job total.
    pub fn enumerate(
        &mut self,
        prefix: &[Placement],
        depth: usize,
        visit: &mut dyn FnMut(&[Placement]),
    ) -> Result<Vec<u64>, UnitError> {
        self.enumerate_under(prefix, depth, visit, &mut NoControl)
            .map(|(nodes, _)| nodes)
    }

    /// The first `max` fillings of [`Walker::enumerate`], in the same order, and whether
    /// they are all of them. The walk stops soon after the `max`-th (at its next poll,
    /// [`super::POLL_INTERVAL`] nodes at most), so a split of hundreds of millions of
    /// prefixes costs no more than the ones asked for.
    pub fn enumerate_first(
        &mut self,
        prefix: &[Placement],
        depth: usize,
        max: usize,
        visit: &mut dyn FnMut(&[Placement]),
    ) -> Result<bool, UnitError> {
        struct Enough<'a>(&'a std::cell::Cell<usize>, usize);
        impl super::Control for Enough<'_> {
            fn poll(&mut self, _committed: u64) -> bool {
                self.0.get() > self.1
            }
        }
        let seen = std::cell::Cell::new(0usize);
        let mut first = |p: &[Placement]| {
            if seen.get() < max {
                visit(p);
            }
            seen.set(seen.get() + 1);
        };
        let (_, finished) =
            self.enumerate_under(prefix, depth, &mut first, &mut Enough(&seen, max))?;
        Ok(finished && seen.get() <= max)
    }

    /// [`Walker::enumerate`], giving up (`None`) once it has committed more than
    /// `max_nodes` nodes or found more than `max_prefixes` fillings: a claim about a tree
    /// is checked for no more than what it claims (the walk stops at its next poll).
    pub fn enumerate_bounded(
        &mut self,
        prefix: &[Placement],
        depth: usize,
        max_nodes: u64,
        max_prefixes: usize,
        visit: &mut dyn FnMut(&[Placement]),
    ) -> Result<Option<Vec<u64>>, UnitError> {
        struct Bound<'a>(&'a std::cell::Cell<usize>, usize, u64);
        impl super::Control for Bound<'_> {
            fn poll(&mut self, committed: u64) -> bool {
                self.0.get() > self.1 || committed > self.2
            }
        }
        let seen = std::cell::Cell::new(0usize);
        let mut counted = |p: &[Placement]| {
            seen.set(seen.get() + 1);
            if seen.get() <= max_prefixes {
                visit(p);
            }
        };
        let (nodes, finished) = self.enumerate_under(
            prefix,
            depth,
            &mut counted,
            &mut Bound(&seen, max_prefixes, max_nodes),
        )?;
        let total: u64 = nodes.iter().fold(0u64, |a, &n| a.saturating_add(n));
        Ok((finished && seen.get() <= max_prefixes && total <= max_nodes).then_some(nodes))
    }

    /// [`Walker::enumerate`] under `control`; the nodes, and whether it walked to the end.
    fn enumerate_under(
        &mut self,
        prefix: &[Placement],
        depth: usize,
        visit: &mut dyn FnMut(&[Placement]),
        control: &mut dyn super::Control,
    ) -> Result<(Vec<u64>, bool), UnitError> {
        let depths = self.plan.len();
        if depth > depths || prefix.len() > depth {
            return Err(UnitError::TooDeep {
                len: depth.max(prefix.len()),
                depths,
            });
        }
        self.reset();
        self.descend(0, prefix, "prefix")?;
        let mut nodes = vec![0u64; depths];
        let mut deepest = 0;
        let mut deepest_board = Vec::new();
        let mut sink = Prefixes { visit };
        let finished = if prefix.len() == depth {
            visit_prefix(&mut sink, self, depth);
            true
        } else {
            matches!(
                self.walk(
                    prefix.len(),
                    prefix.len(),
                    depth,
                    u64::MAX,
                    &mut nodes,
                    &mut deepest,
                    &mut deepest_board,
                    &mut sink,
                    control,
                ),
                super::Outcome::Finished
            )
        };
        Ok((nodes, finished))
    }

    /// The untried siblings of `placement` at `depth` given the board below it: every
    /// candidate after it in canonical order that is legal now.
    fn untried_siblings(&mut self, depth: usize) -> Vec<Placement> {
        let mut out = Vec::new();
        let mut i = self.cur[depth] as usize;
        loop {
            let c = self.plan.candidates[i];
            if c == SENTINEL {
                return out;
            }
            i += 1;
            if self.used[candidate_piece(c)] == 0
                && (c as u32 & self.steps[depth].mask) == self.expect[depth]
            {
                out.push(self.plan.placement(depth, c));
            }
        }
    }

    /// For each depth of `path` from `floor` down (index 0 = depth `floor + 1`): how
    /// many untried siblings its placement has (candidates after it in canonical order
    /// that are legal on the board above it) and the first of them. A continuation with
    /// cursor `path[floor..]` walks exactly these after the cursor's own subtree, the
    /// deepest first; [`crate::lanes`] cuts a lone unit into pieces along them.
    pub fn siblings_along(
        &mut self,
        path: &[Placement],
        floor: usize,
    ) -> Result<Vec<(usize, Option<Placement>)>, UnitError> {
        self.check_path(path)?;
        let mut out = vec![(0, None); path.len().saturating_sub(floor)];
        for depth in (floor..path.len()).rev() {
            self.unplace(depth);
            let siblings = self.untried_siblings(depth);
            out[depth - floor] = (siblings.len(), siblings.first().copied());
        }
        Ok(out)
    }

    /// Splits a continuation at its shallowest cursor level (COUNTING.md): the untried
    /// siblings of the first cursor placement become plain prefix units (their creator
    /// counts each last placement as one node at depth `d + 1`), and what is left is the
    /// continuation of `prefix + cursor[0]` with the rest of the cursor.
    pub fn split_continuation(&mut self, unit: &Unit) -> Result<Split, UnitError> {
        let depths = self.plan.len();
        let floor = unit.prefix.len();
        if floor + unit.cursor.len() > depths {
            return Err(UnitError::TooDeep {
                len: floor + unit.cursor.len(),
                depths,
            });
        }
        let Some((&first, rest)) = unit.cursor.split_first() else {
            return Ok(Split {
                remaining: unit.clone(),
                siblings: Vec::new(),
            });
        };
        self.reset();
        self.descend(0, &unit.prefix, "prefix")?;
        self.descend(floor, &[first], "cursor")?;
        self.unplace(floor);
        let siblings = self
            .untried_siblings(floor)
            .into_iter()
            .map(|s| {
                let mut prefix = unit.prefix.clone();
                prefix.push(s);
                Unit::prefix(prefix)
            })
            .collect();
        let mut prefix = unit.prefix.clone();
        prefix.push(first);
        Ok(Split {
            remaining: Unit {
                prefix,
                cursor: rest.to_vec(),
            },
            siblings,
        })
    }
}

/// The shallowest depth with at least `target` prefixes (or the last depth, or the first
/// with none): where a tree is split into about `target` units.
pub fn split_depth_for(plan: &SearchPlan, target: usize) -> usize {
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

/// The result of [`Walker::split_continuation`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split {
    /// The continuation one level deeper (its cursor's first placement moved into the
    /// prefix; already counted by the stopped run, so not counted again).
    pub remaining: Unit,
    /// New plain prefix units, one per untried sibling; each counts as one node at depth
    /// `d + 1` for whoever creates it.
    pub siblings: Vec<Unit>,
}

struct Prefixes<'v> {
    visit: &'v mut dyn FnMut(&[Placement]),
}

fn visit_prefix(sink: &mut Prefixes<'_>, walker: &Walker<'_>, limit: usize) {
    let prefix = walker.placements(0, limit);
    (sink.visit)(&prefix);
}

impl Leaf for Prefixes<'_> {
    fn leaf(&mut self, walker: &Walker<'_>, limit: usize) {
        visit_prefix(self, walker, limit);
    }
}

impl Walker<'_> {
    /// Checks that `path` is a legal filling of the first `path.len()` depths.
    pub fn check_path(&mut self, path: &[Placement]) -> Result<(), UnitError> {
        if path.len() > self.plan.len() {
            return Err(UnitError::TooDeep {
                len: path.len(),
                depths: self.plan.len(),
            });
        }
        self.reset();
        self.descend(0, path, "prefix")
    }
}
