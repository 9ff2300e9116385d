//! Exact accounting (COUNTING.md): conservation at every split depth, budget stops and
//! continuations that add up to the whole tree, continuation splitting into sibling
//! prefixes, determinism of stops.

use e2fleet_engine::plan::SearchPlan;
use e2fleet_engine::search::{Control, NoControl, RunOptions, Walker};
use e2fleet_engine::testing::{Rng, random_puzzle};
use e2fleet_engine::unit::{StopReason, add_counts};
use e2fleet_engine::verify::verify_path;
use e2fleet_engine::{FillOrder, OrderSpec, Puzzle, Unit, UnitResult};

use crate::load;

fn run(plan: &SearchPlan, unit: &Unit, budget: Option<u64>) -> UnitResult {
    Walker::new(plan)
        .run(
            unit,
            RunOptions {
                budget,
                max_solutions: 10_000,
            },
            &mut NoControl,
        )
        .unwrap()
}

/// Walks a unit to the end: in budget slices, and at each stop either resuming the
/// continuation or splitting it into sibling prefixes (counting each new prefix as a
/// node, as the coordinator does). Returns per-depth counts and solution count.
fn walk_sliced(plan: &SearchPlan, unit: &Unit, rng: &mut Rng, max_budget: u64) -> (Vec<u64>, u64) {
    let mut counts = vec![0u64; plan.len()];
    let mut solutions = 0;
    let mut queue = vec![unit.clone()];
    while let Some(u) = queue.pop() {
        let budget = 1 + rng.below(max_budget as usize) as u64;
        let r = run(plan, &u, Some(budget));
        assert!(r.committed <= budget);
        add_counts(&mut counts, &r.nodes_by_depth);
        solutions += r.solutions_count;
        let Some(cursor) = r.cursor else {
            assert_eq!(r.stop, Some(StopReason::Finished));
            continue;
        };
        assert_eq!(r.committed, budget, "a stop happens exactly at the budget");
        assert_eq!(r.stop, Some(StopReason::Budget));
        let cont = u.continuation(cursor);
        if rng.below(2) == 0 {
            queue.push(cont);
        } else {
            let split = Walker::new(plan).split_continuation(&cont).unwrap();
            for s in &split.siblings {
                counts[s.depth() - 1] += 1;
                if s.depth() == plan.len() {
                    solutions += 1;
                }
            }
            queue.extend(split.siblings);
            queue.push(split.remaining);
        }
    }
    (counts, solutions)
}

fn plan_for(puzzle: &Puzzle, spec: &OrderSpec) -> SearchPlan {
    SearchPlan::new(puzzle, &FillOrder::new(puzzle, spec).unwrap())
}

#[test]
fn conservation_at_every_split_depth() {
    let puzzle = load("brendan/set1/pieces_05x05.txt");
    let plan = plan_for(&puzzle, &OrderSpec::default());
    let whole = run(&plan, &Unit::root(), None);
    for depth in 0..=plan.len() {
        let mut prefixes = Vec::new();
        let enumeration = Walker::new(&plan)
            .enumerate(&[], depth, &mut |p| prefixes.push(p.to_vec()))
            .unwrap();
        let mut total = enumeration.clone();
        let mut solutions = if depth == plan.len() {
            prefixes.len() as u64
        } else {
            0
        };
        for p in &prefixes {
            verify_path(&puzzle, &FillOrder::row_major(&puzzle), p).unwrap();
            let r = run(&plan, &Unit::prefix(p.clone()), None);
            assert!(r.nodes_by_depth[..depth].iter().all(|&n| n == 0));
            add_counts(&mut total, &r.nodes_by_depth);
            solutions += r.solutions_count;
        }
        assert_eq!(total, whole.nodes_by_depth, "depth {depth}");
        assert_eq!(solutions, whole.solutions_count);
    }
}

#[test]
fn budgets_and_continuations_add_up_to_the_whole_tree() {
    let mut rng = Rng::new(7);
    for (rel, max_budget) in [
        ("brendan/set1/pieces_04x04.txt", 40),
        ("brendan/set1/pieces_05x05.txt", 5_000),
        ("bench/bench-easy-rows0-9.json", 20),
    ] {
        let puzzle = load(rel);
        let plan = plan_for(&puzzle, &OrderSpec::default());
        let whole = run(&plan, &Unit::root(), None);
        for _ in 0..5 {
            let (counts, solutions) = walk_sliced(&plan, &Unit::root(), &mut rng, max_budget);
            assert_eq!(counts, whole.nodes_by_depth, "{rel}");
            assert_eq!(solutions, whole.solutions_count, "{rel}");
        }
    }
}

#[test]
fn budgets_on_random_puzzles_and_orders() {
    let mut rng = Rng::new(99);
    for round in 0..60 {
        let (puzzle, _) =
            random_puzzle(&mut rng, 3 + round % 2, 3 + round % 3 / 2, 2, 3, round % 3);
        let spec = match round % 4 {
            0 => OrderSpec::default(),
            1 => "cols:br".parse().unwrap(),
            2 => OrderSpec::Comb { rows: 2 },
            _ => "rows:bl".parse().unwrap(),
        };
        let plan = plan_for(&puzzle, &spec);
        let whole = run(&plan, &Unit::root(), None);
        // split first, then slice every unit
        let depth = rng.below(plan.len() + 1);
        let mut prefixes = Vec::new();
        let mut counts = Walker::new(&plan)
            .enumerate(&[], depth, &mut |p| prefixes.push(p.to_vec()))
            .unwrap();
        let mut solutions = if depth == plan.len() {
            prefixes.len() as u64
        } else {
            0
        };
        for p in prefixes {
            let (c, s) = walk_sliced(&plan, &Unit::prefix(p), &mut rng, 30);
            add_counts(&mut counts, &c);
            solutions += s;
        }
        assert_eq!(counts, whole.nodes_by_depth, "round {round}");
        assert_eq!(solutions, whole.solutions_count);
    }
}

#[test]
fn a_stop_is_deterministic_and_its_cursor_is_the_last_commit() {
    let puzzle = load("brendan/set1/pieces_05x05.txt");
    let plan = plan_for(&puzzle, &OrderSpec::default());
    let a = run(&plan, &Unit::root(), Some(12_345));
    let b = run(&plan, &Unit::root(), Some(12_345));
    assert_eq!(a, b);
    let cursor = a.cursor.clone().unwrap();
    verify_path(&puzzle, &FillOrder::row_major(&puzzle), &cursor).unwrap();
    // the cursor's last placement is at the deepest depth with a node counted last
    assert!(cursor.len() <= a.max_depth);
    // unit.nodes = committed + continuation.nodes
    let rest = run(&plan, &Unit::root().continuation(cursor), None);
    let whole = run(&plan, &Unit::root(), None);
    let mut sum = a.nodes_by_depth.clone();
    add_counts(&mut sum, &rest.nodes_by_depth);
    assert_eq!(sum, whole.nodes_by_depth);
}

struct StopAfter(u64);
impl Control for StopAfter {
    fn poll(&mut self, committed: u64) -> bool {
        committed >= self.0
    }
}

#[test]
fn a_requested_stop_reports_like_a_budget_stop() {
    let puzzle = load("brendan/set1/pieces_06x06.txt");
    let plan = plan_for(&puzzle, &OrderSpec::default());
    let stopped = Walker::new(&plan)
        .run(&Unit::root(), RunOptions::default(), &mut StopAfter(1))
        .unwrap();
    assert_eq!(stopped.stop, Some(StopReason::Requested));
    let same = run(&plan, &Unit::root(), Some(stopped.committed));
    assert_eq!(same.cursor, stopped.cursor);
    assert_eq!(same.nodes_by_depth, stopped.nodes_by_depth);
}

#[test]
fn bad_units_are_rejected_with_the_reason() {
    let puzzle = load("brendan/set1/pieces_04x04.txt");
    let plan = plan_for(&puzzle, &OrderSpec::default());
    let good = run(&plan, &Unit::root(), Some(5)).cursor.unwrap();
    let mut walker = Walker::new(&plan);
    // wrong cell
    let mut bad = good.clone();
    bad[0].pos = 5;
    let err = walker
        .run(&Unit::prefix(bad), RunOptions::default(), &mut NoControl)
        .unwrap_err();
    assert!(err.to_string().contains("another cell"), "{err}");
    // same piece twice
    let mut bad = good.clone();
    bad[1].piece = bad[0].piece;
    assert!(
        walker
            .run(&Unit::prefix(bad), RunOptions::default(), &mut NoControl)
            .is_err()
    );
    // a piece that does not fit
    let mut bad = good.clone();
    bad[0].rot = (bad[0].rot + 1) % 4;
    assert!(
        walker
            .run(&Unit::prefix(bad), RunOptions::default(), &mut NoControl)
            .is_err()
    );
}
