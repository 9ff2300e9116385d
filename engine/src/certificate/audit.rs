//! Auditing a certificate: what can be checked without re-running anything
//! ([`check_structure`]), and how a unit re-run here is compared with its entry
//! ([`compare_run`]), with the sample that decides which units to re-run
//! ([`choose_sample`]) and what a sample proves ([`pass_probability`]).
//!
//! # Why the tiling check is exact
//! The enumeration to the split depth is re-derived from the puzzle, so the auditor knows
//! every prefix the job had to cover. A region still to account for is "the nodes strictly
//! below prefix `p` that come after path `p + a` in depth-first order" (`a` empty: all of
//! them). A unit `(p, a)` must cover it: its result accounts for the nodes up to its stop
//! `s` (which must come strictly after `a`), and the continuation `(p, s)` must cover the
//! rest. When no unit `(p, a)` exists, the coordinator must have split that continuation:
//! the auditor re-derives the split (COUNTING.md) — the rest below `p + a[0]`, and a plain
//! prefix unit for each untried legal sibling, each counted as one node — and goes on.
//! Every unit must be used exactly once. So the units cover the tree with no gap and no
//! overlap, and the totals follow from the counts; whether each count is right is what
//! re-running a sample checks.

use std::collections::HashMap;

use thiserror::Error;

use super::{CertUnit, Certificate, placements};
use crate::search::Walker;
use crate::spec::SearchSpec;
use crate::unit::{Unit, UnitResult, result_digest};
use crate::verify::{score, verify_board};

/// Why a certificate fails its audit. Each names what is wrong (a unit by its id).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AuditError {
    /// The puzzle or order does not load.
    #[error("the certificate's puzzle or order does not load: {0}")]
    Spec(String),
    /// Its header does not fit its puzzle.
    #[error("{0}")]
    Header(String),
    /// It claims more than the auditor agreed to check ([`super::Limits`]).
    #[error("{0}")]
    TooLarge(String),
    /// A unit is malformed or its result cannot be right.
    #[error("unit {id}: {why}")]
    Unit {
        /// The unit id.
        id: u64,
        /// What is wrong.
        why: String,
    },
    /// Two units are the same piece of the tree.
    #[error(
        "units {first} and {second} are the same prefix and cursor: the tree would be counted twice there"
    )]
    Duplicate {
        /// The first.
        first: u64,
        /// The second.
        second: u64,
    },
    /// Part of the tree no unit covers.
    #[error("no unit covers the tree below prefix {prefix:?}{after}: a unit is missing")]
    Uncovered {
        /// The prefix codes.
        prefix: Vec<u32>,
        /// ", after cursor [...]" or nothing.
        after: String,
    },
    /// A unit that covers no part of the tree the others leave.
    #[error(
        "unit {id} (prefix {prefix:?}) is not part of the tree the other units leave: a stray or duplicated unit"
    )]
    Stray {
        /// The unit id.
        id: u64,
        /// Its prefix codes.
        prefix: Vec<u32>,
    },
    /// Counts that do not add up.
    #[error(
        "{what} at depth {depth}: the certificate says {stated}, the units and the enumeration give {actual}"
    )]
    Sum {
        /// Which sum.
        what: &'static str,
        /// 1-based depth (0: not per depth).
        depth: usize,
        /// What the certificate says.
        stated: u64,
        /// What was re-derived.
        actual: u64,
    },
    /// A solution or best board is not what it claims.
    #[error("{what}: {why}")]
    Board {
        /// Which board.
        what: String,
        /// What is wrong.
        why: String,
    },
    /// The Merkle root does not match the units.
    #[error("the Merkle root over the units is {actual}, the certificate says {stated}")]
    Root {
        /// What it says.
        stated: String,
        /// What the units hash to.
        actual: String,
    },
    /// A unit re-run here disagrees with its entry.
    #[error("unit {id}: re-run on this machine {why}")]
    Rerun {
        /// The unit id.
        id: u64,
        /// How it differs.
        why: String,
    },
}

/// What [`check_structure`] checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Structure {
    /// Units in the certificate.
    pub units: usize,
    /// Units with an accepted result.
    pub decided: usize,
    /// Units of them that are continuations (prefix and cursor).
    pub continuations: usize,
    /// Prefix nodes re-derived from continuation splits.
    pub split_nodes: u64,
    /// Prefixes of the re-derived enumeration.
    pub prefixes: usize,
    /// The job's total nodes.
    pub nodes: u64,
    /// Solution boards verified.
    pub solutions_verified: usize,
    /// Best boards verified.
    pub boards_verified: usize,
}

/// Loads the certificate's puzzle and order.
pub fn spec(cert: &Certificate) -> Result<SearchSpec, AuditError> {
    SearchSpec::from_site_json(&cert.puzzle, &cert.order)
        .map_err(|e| AuditError::Spec(e.to_string()))
}

/// The unit at `index` as placements.
pub fn unit_of(spec: &SearchSpec, u: &CertUnit) -> Result<Unit, AuditError> {
    let bad = |e: super::CertificateError| AuditError::Unit {
        id: u.id,
        why: e.to_string(),
    };
    Ok(Unit {
        prefix: placements(&spec.plan, 0, &u.prefix).map_err(bad)?,
        cursor: placements(&spec.plan, u.prefix.len(), &u.cursor).map_err(bad)?,
    })
}

/// Every check that needs no re-run: header, enumeration, each unit on its own, the
/// tiling, the sums, the solutions, the best boards and the Merkle root.
pub fn check_structure(cert: &Certificate, spec: &SearchSpec) -> Result<Structure, AuditError> {
    check_structure_within(cert, spec, &super::Limits::default())
}

/// [`check_structure`], refusing before the work a certificate whose claims pass
/// `limits`: its enumeration is re-derived only when the nodes it states are within
/// `limits.enumeration_nodes`, and the walk stops as soon as it finds more nodes than
/// stated or more prefixes than the certificate has units.
pub fn check_structure_within(
    cert: &Certificate,
    spec: &SearchSpec,
    limits: &super::Limits,
) -> Result<Structure, AuditError> {
    let plan = &spec.plan;
    let depths = plan.len();
    check_header(cert, depths)?;
    let (enumeration, prefixes, enumeration_solutions) = rederive_enumeration(cert, plan, limits)?;

    // each unit on its own
    let mut walker = Walker::new(plan);
    let mut by_path: HashMap<(&[u32], &[u32]), usize> = HashMap::with_capacity(cert.units.len());
    for (i, u) in cert.units.iter().enumerate() {
        check_unit(cert, spec, &mut walker, u)?;
        if let Some(&j) = by_path.get(&(&u.prefix[..], &u.cursor[..])) {
            return Err(AuditError::Duplicate {
                first: cert.units[j].id,
                second: u.id,
            });
        }
        by_path.insert((&u.prefix, &u.cursor), i);
    }

    let split = check_tiling(cert, plan, &mut walker, &by_path, &prefixes)?;

    // the sums
    let mut totals = enumeration.clone();
    crate::unit::add_counts(&mut totals, &split);
    let mut decided = 0;
    for u in &cert.units {
        if let Some(r) = &u.result {
            decided += 1;
            crate::unit::add_counts(&mut totals, &r.nodes_by_depth(depths));
        }
    }
    check_sum("total nodes", &cert.totals, &totals)?;
    let solutions = enumeration_solutions
        + if depths > 0 {
            totals[depths - 1] - enumeration[depths - 1]
        } else {
            0
        };
    if cert.solutions_count != solutions {
        return Err(AuditError::Sum {
            what: "solutions",
            depth: 0,
            stated: cert.solutions_count,
            actual: solutions,
        });
    }
    if cert.job.complete && decided != cert.units.len() {
        let open = cert
            .units
            .iter()
            .find(|u| u.result.is_none())
            .expect("one is open");
        return Err(AuditError::Unit {
            id: open.id,
            why: "has no result in a certificate of a complete job".into(),
        });
    }

    // the boards
    check_solutions(cert, spec)?;
    check_best(cert, spec, &mut walker)?;

    Ok(Structure {
        units: cert.units.len(),
        decided,
        continuations: cert.units.iter().filter(|u| !u.cursor.is_empty()).count(),
        split_nodes: split.iter().sum(),
        prefixes: prefixes.len(),
        nodes: totals.iter().sum(),
        solutions_verified: cert.solutions.len(),
        boards_verified: cert.best.len(),
    })
}

/// The certificate's header against its puzzle and order: depths, vector lengths, split
/// depth, budget, and the Merkle root over its units.
fn check_header(cert: &Certificate, depths: usize) -> Result<(), AuditError> {
    if cert.depths != depths {
        return Err(AuditError::Header(format!(
            "the certificate says {} free cells, its puzzle and order have {depths}",
            cert.depths
        )));
    }
    for (what, v) in [
        ("enumeration", &cert.enumeration),
        ("split", &cert.split),
        ("totals", &cert.totals),
    ] {
        if v.len() != depths {
            return Err(AuditError::Header(format!(
                "{what} has {} depths, expected {depths}",
                v.len()
            )));
        }
    }
    if cert.split_depth > depths {
        return Err(AuditError::Header(format!(
            "split depth {} is deeper than the tree ({depths})",
            cert.split_depth
        )));
    }
    if cert.budget == Some(0) {
        return Err(AuditError::Header("a budget of zero nodes".into()));
    }
    let actual_root = super::merkle_root(&cert.units);
    if actual_root != cert.merkle_root {
        return Err(AuditError::Root {
            stated: cert.merkle_root.clone(),
            actual: actual_root,
        });
    }

    Ok(())
}

/// The enumeration to the split depth, re-derived: never more than the certificate claims
/// (cheap checks first). Its per-depth counts, its prefixes (as placement codes) and its
/// solutions.
#[allow(clippy::type_complexity)]
fn rederive_enumeration(
    cert: &Certificate,
    plan: &crate::plan::SearchPlan,
    limits: &super::Limits,
) -> Result<(Vec<u64>, Vec<Vec<u32>>, u64), AuditError> {
    let depths = plan.len();
    let stated: u64 = cert
        .enumeration
        .iter()
        .fold(0u64, |a, &n| a.saturating_add(n));
    if stated > limits.enumeration_nodes {
        return Err(AuditError::TooLarge(format!(
            "the certificate states {stated} enumeration nodes to re-derive; the limit is {} (raise it to audit this one)",
            limits.enumeration_nodes
        )));
    }
    let mut prefixes: Vec<Vec<u32>> = Vec::new();
    let enumeration = Walker::new(plan)
        .enumerate_bounded(&[], cert.split_depth, stated, cert.units.len(), &mut |p| {
            prefixes.push(super::codes(p))
        })
        .map_err(|e| AuditError::Header(e.to_string()))?
        .ok_or_else(|| {
            AuditError::Header(format!(
                "the enumeration to depth {} has more than the {stated} nodes the certificate states, or more prefixes than its {} units",
                cert.split_depth,
                cert.units.len()
            ))
        })?;
    check_sum("enumeration nodes", &cert.enumeration, &enumeration)?;
    let enumeration_solutions = if cert.split_depth == depths && depths > 0 {
        prefixes.len() as u64
    } else {
        0
    };
    if cert.enumeration_solutions != enumeration_solutions {
        return Err(AuditError::Sum {
            what: "enumeration solutions",
            depth: 0,
            stated: cert.enumeration_solutions,
            actual: enumeration_solutions,
        });
    }

    Ok((enumeration, prefixes, enumeration_solutions))
}

/// The tiling: from every prefix, the units and their continuations cover the tree once,
/// with the siblings a continuation split made in between; no unit is left over. The
/// split nodes per depth.
fn check_tiling(
    cert: &Certificate,
    plan: &crate::plan::SearchPlan,
    walker: &mut Walker<'_>,
    by_path: &HashMap<(&[u32], &[u32]), usize>,
    prefixes: &[Vec<u32>],
) -> Result<Vec<u64>, AuditError> {
    let depths = plan.len();
    let mut used = vec![false; cert.units.len()];
    let mut split = vec![0u64; depths];
    let mut todo: Vec<(Vec<u32>, Vec<u32>)> = prefixes
        .iter()
        .rev()
        .map(|p| (p.clone(), Vec::new()))
        .collect();
    while let Some((prefix, after)) = todo.pop() {
        if let Some(&i) = by_path.get(&(&prefix[..], &after[..])) {
            used[i] = true;
            if let Some(stop) = cert.units[i].result.as_ref().and_then(|r| r.stop.clone()) {
                todo.push((prefix, stop));
            }
            continue;
        }
        if after.is_empty() {
            return Err(AuditError::Uncovered {
                prefix,
                after: String::new(),
            });
        }
        let region = Unit {
            prefix: placements(plan, 0, &prefix).map_err(|e| AuditError::Header(e.to_string()))?,
            cursor: placements(plan, prefix.len(), &after)
                .map_err(|e| AuditError::Header(e.to_string()))?,
        };
        let parts = walker
            .split_continuation(&region)
            .map_err(|e| AuditError::Uncovered {
                prefix: prefix.clone(),
                after: format!(", after cursor {after:?} ({e})"),
            })?;
        for sibling in parts.siblings.iter().rev() {
            split[prefix.len()] += 1;
            todo.push((super::codes(&sibling.prefix), Vec::new()));
        }
        todo.push((
            super::codes(&parts.remaining.prefix),
            super::codes(&parts.remaining.cursor),
        ));
    }
    if let Some(i) = used.iter().position(|&u| !u) {
        return Err(AuditError::Stray {
            id: cert.units[i].id,
            prefix: cert.units[i].prefix.clone(),
        });
    }
    check_sum("split nodes", &cert.split, &split)?;

    Ok(split)
}

fn check_sum(what: &'static str, stated: &[u64], actual: &[u64]) -> Result<(), AuditError> {
    for (k, (s, a)) in stated.iter().zip(actual).enumerate() {
        if s != a {
            return Err(AuditError::Sum {
                what,
                depth: k + 1,
                stated: *s,
                actual: *a,
            });
        }
    }
    Ok(())
}

/// What one unit's entry must satisfy on its own.
fn check_unit(
    cert: &Certificate,
    spec: &SearchSpec,
    walker: &mut Walker<'_>,
    u: &CertUnit,
) -> Result<(), AuditError> {
    let depths = spec.plan.len();
    let bad = |why: String| AuditError::Unit { id: u.id, why };
    let unit = unit_of(spec, u)?;
    let mut path = unit.prefix.clone();
    path.extend_from_slice(&unit.cursor);
    walker
        .check_path(&path)
        .map_err(|e| bad(format!("its prefix and cursor are not a legal path: {e}")))?;
    let Some(r) = &u.result else {
        return Ok(());
    };
    let floor = u.prefix.len();
    if !r.nodes.is_empty() && (r.from < floor || r.from + r.nodes.len() > depths) {
        return Err(bad(format!(
            "counts nodes at depths {}..{}, outside {}..{depths} below its prefix",
            r.from + 1,
            r.from + r.nodes.len(),
            floor + 1
        )));
    }
    if r.nodes.first() == Some(&0) || r.nodes.last() == Some(&0) {
        return Err(bad("its counts are not in compact form".into()));
    }
    let committed = r.committed();
    let deepest = if r.nodes.is_empty() {
        floor
    } else {
        r.from + r.nodes.len()
    };
    if r.max_depth != deepest {
        return Err(bad(format!(
            "says it reached depth {}, its counts end at depth {deepest}",
            r.max_depth
        )));
    }
    if let Some(budget) = cert.budget
        && committed > budget
    {
        return Err(bad(format!(
            "committed {committed} nodes, above the budget {budget}"
        )));
    }
    if let Some(stop) = &r.stop {
        if committed == 0 {
            return Err(bad("stopped without committing a node".into()));
        }
        if stop <= &u.cursor {
            return Err(bad(
                "its stop is not after where it started: the walk would go back over counted nodes"
                    .into(),
            ));
        }
        let mut stop_path = unit.prefix.clone();
        stop_path.extend(placements(&spec.plan, floor, stop).map_err(|e| bad(e.to_string()))?);
        walker
            .check_path(&stop_path)
            .map_err(|e| bad(format!("its stop is not a legal path: {e}")))?;
    }
    Ok(())
}

fn check_solutions(cert: &Certificate, spec: &SearchSpec) -> Result<(), AuditError> {
    if cert.solutions.len() as u64 > cert.solutions_count {
        return Err(AuditError::Board {
            what: "solutions".into(),
            why: format!(
                "{} boards for {} solutions",
                cert.solutions.len(),
                cert.solutions_count
            ),
        });
    }
    let mut seen = std::collections::HashSet::new();
    for (i, s) in cert.solutions.iter().enumerate() {
        let what = || format!("solution {}", i + 1);
        verify_board(&spec.puzzle, s, true).map_err(|e| AuditError::Board {
            what: what(),
            why: e.to_string(),
        })?;
        let mut sorted = s.clone();
        sorted.sort();
        if !seen.insert(sorted) {
            return Err(AuditError::Board {
                what: what(),
                why: "listed twice".into(),
            });
        }
    }
    Ok(())
}

fn check_best(
    cert: &Certificate,
    spec: &SearchSpec,
    walker: &mut Walker<'_>,
) -> Result<(), AuditError> {
    let by_id: HashMap<u64, &CertUnit> = cert.units.iter().map(|u| (u.id, u)).collect();
    for (i, b) in cert.best.iter().enumerate() {
        let bad = |why: String| AuditError::Board {
            what: format!("best board {} (unit {})", i + 1, b.unit),
            why,
        };
        let board = placements(&spec.plan, 0, &b.board).map_err(|e| bad(e.to_string()))?;
        if board.len() != b.depth {
            return Err(bad(format!(
                "{} placements for depth {}",
                board.len(),
                b.depth
            )));
        }
        verify_board(&spec.puzzle, &board, false).map_err(|e| bad(e.to_string()))?;
        walker.check_path(&board).map_err(|e| bad(e.to_string()))?;
        let actual = score(&spec.puzzle, &board);
        if actual != b.score {
            return Err(bad(format!("scores {actual}, not {}", b.score)));
        }
        let unit = by_id
            .get(&b.unit)
            .ok_or_else(|| bad("names a unit the certificate does not have".into()))?;
        let reached = unit.result.as_ref().map(|r| r.max_depth);
        if reached != Some(b.depth) || !b.board.starts_with(&unit.prefix) {
            return Err(bad(format!(
                "is not a board of that unit (it reached depth {reached:?} below prefix {:?})",
                unit.prefix
            )));
        }
    }
    Ok(())
}

/// Compares a result re-run here on unit `u` (with the certificate's budget and
/// solution cap) with its entry: per-depth counts, stop, deepest depth, then the digest
/// (which also covers the solution and deepest boards).
pub fn compare_run(spec: &SearchSpec, u: &CertUnit, run: &UnitResult) -> Result<(), AuditError> {
    let depths = spec.plan.len();
    let bad = |why: String| AuditError::Rerun { id: u.id, why };
    let Some(entry) = &u.result else {
        return Err(bad(
            "has no result in the certificate to compare with".into()
        ));
    };
    let stated = entry.nodes_by_depth(depths);
    if let Some(k) = (0..depths).find(|&k| run.nodes_by_depth.get(k) != Some(&stated[k])) {
        return Err(bad(format!(
            "counts {} nodes at depth {}, the certificate says {} ({} committed here, {} there)",
            run.nodes_by_depth.get(k).copied().unwrap_or(0),
            k + 1,
            stated[k],
            run.committed,
            entry.committed()
        )));
    }
    let stop = run.cursor.as_ref().map(|c| super::codes(c));
    if stop != entry.stop {
        return Err(bad(format!(
            "stops at {stop:?}, the certificate says {:?}",
            entry.stop
        )));
    }
    if run.max_depth != entry.max_depth {
        return Err(bad(format!(
            "reaches depth {}, the certificate says {}",
            run.max_depth, entry.max_depth
        )));
    }
    let digest = result_digest(run);
    if digest != entry.digest {
        return Err(bad(format!(
            "has digest {digest}, the certificate says {} (same counts: the solution or deepest boards differ)",
            entry.digest
        )));
    }
    Ok(())
}

/// `n` distinct indices of decided units, drawn with `seed` (all of them when there are
/// fewer), in certificate order.
pub fn choose_sample(cert: &Certificate, n: usize, seed: u64) -> Vec<usize> {
    let mut decided: Vec<usize> = (0..cert.units.len())
        .filter(|&i| cert.units[i].result.is_some())
        .collect();
    let n = n.min(decided.len());
    let mut state = seed;
    for i in 0..n {
        let j = i + (splitmix(&mut state) % (decided.len() - i) as u64) as usize;
        decided.swap(i, j);
    }
    let mut chosen = decided[..n].to_vec();
    chosen.sort_unstable();
    chosen
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The probability that a certificate with `forged` wrong units out of `units` passes a
/// uniform sample of `sample` distinct units (none of the forged ones drawn).
pub fn pass_probability(units: usize, forged: usize, sample: usize) -> f64 {
    if forged == 0 {
        return 1.0;
    }
    if sample + forged > units {
        return 0.0;
    }
    (0..sample)
        .map(|i| (units - forged - i) as f64 / (units - i) as f64)
        .product()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_probability_is_the_hypergeometric_zero_term() {
        assert_eq!(pass_probability(10, 0, 5), 1.0);
        assert_eq!(pass_probability(10, 1, 10), 0.0);
        assert!((pass_probability(10, 1, 1) - 0.9).abs() < 1e-12);
        assert!((pass_probability(10, 2, 2) - (8.0 / 10.0) * (7.0 / 9.0)).abs() < 1e-12);
        assert_eq!(pass_probability(5, 3, 3), 0.0);
    }
}
