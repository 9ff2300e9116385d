//! The lane engine against the reference engine, to the digit: low-colour boards under
//! budgets and down continuation chains, random puzzles in every fill-order kind, whole
//! small trees, units walked two at a time through a feed, requested stops, and the
//! boards it refuses.

use std::sync::Arc;

use e2fleet_engine::engine::{Engine, EngineError, Feed, ReferenceEngine, Work};
use e2fleet_engine::lanes::{LaneEngine, NotEligible};
use e2fleet_engine::plan::SearchPlan;
use e2fleet_engine::search::{NoControl, Walker};
use e2fleet_engine::testing::Rng;
use e2fleet_engine::unit::{StopReason, UnitResult};
use e2fleet_engine::{FillOrder, OrderSpec, Puzzle, Unit};

use crate::{agree_down_a_chain, load, opts, random_round};

fn plan(puzzle: &Puzzle, spec: &OrderSpec) -> Arc<SearchPlan> {
    let order = FillOrder::new(puzzle, spec).expect("order");
    Arc::new(SearchPlan::new(puzzle, &order))
}

fn engines(plan: &Arc<SearchPlan>) -> (ReferenceEngine, LaneEngine) {
    (
        ReferenceEngine::new(plan.clone()),
        LaneEngine::new(plan.clone()).expect("a lane board"),
    )
}

/// A feed of units with their budgets; keeps every result by tag.
struct Units {
    todo: Vec<(Unit, Option<u64>)>,
    next: usize,
    results: Vec<Option<UnitResult>>,
    seconds: f64,
}

impl Units {
    fn new(todo: Vec<(Unit, Option<u64>)>) -> Units {
        let n = todo.len();
        Units {
            todo,
            next: 0,
            results: vec![None; n],
            seconds: 0.0,
        }
    }

    fn take<'a>(&mut self) -> Option<Work<'a>> {
        let (unit, budget) = self.todo.get(self.next)?.clone();
        self.next += 1;
        Some(Work {
            tag: self.next - 1,
            unit,
            options: opts(budget),
            control: Box::new(NoControl),
        })
    }
}

impl<'a> Feed<'a> for Units {
    fn next(&mut self) -> Option<Work<'a>> {
        self.take()
    }
    fn done(&mut self, work: Work<'a>, result: Result<UnitResult, EngineError>, seconds: f64) {
        assert!(self.results[work.tag].is_none(), "one result per unit");
        self.results[work.tag] = Some(result.expect("a result"));
        self.seconds += seconds;
    }
}

/// The first `count` prefixes `depth` deep, each under a budget drawn from `rng` (or
/// none), walked two at a time through a feed: every result is the reference's.
fn pairs_agree(plan: &Arc<SearchPlan>, depth: usize, count: usize, rng: &mut Rng, what: &str) {
    let mut prefixes = Vec::new();
    Walker::new(plan)
        .enumerate_first(&[], depth, count, &mut |p| prefixes.push(p.to_vec()))
        .unwrap();
    let todo: Vec<(Unit, Option<u64>)> = prefixes
        .into_iter()
        .map(|p| {
            let budget = (rng.below(4) > 0).then(|| 1 + rng.below(300_000) as u64);
            (Unit::prefix(p), budget)
        })
        .collect();
    let (mut reference, mut lanes) = engines(plan);
    let mut feed = Units::new(todo.clone());
    let first = feed.take().expect("a unit");
    lanes.run_feed(first, &mut feed);
    for (i, (unit, budget)) in todo.iter().enumerate() {
        let r = reference.run(unit, opts(*budget), &mut NoControl).unwrap();
        let l = feed.results[i].as_ref().expect("every unit walked");
        assert_eq!(l, &r, "{what}: unit {i} budget {budget:?}");
    }
}

/// Brendan's sets and a clue board: budget slices down a continuation chain agree with
/// the reference walker to the digit, one lane at a time.
#[test]
fn low_colour_boards_agree_under_budgets() {
    for rel in [
        "brendan/set1/pieces_07x07.txt",
        "brendan/set2/pieces_08x08.txt",
        "brendan/set2/pieces_09x09.txt",
        "brendan/set1/pieces_10x10.txt",
        "brendan/set2/pieces_10x10.txt",
    ] {
        let plan = plan(&load(rel), &OrderSpec::default());
        let (mut reference, mut lanes) = engines(&plan);
        let budgets = [1, 7, 1000, 123_457, 2_000_000, 1 << 20, 3_000_001];
        agree_down_a_chain(
            (&mut reference, &mut lanes as &mut dyn Engine),
            budgets,
            rel,
        );
    }
}

/// Whole trees (every node, solutions and their boards) of the two smallest Brendan
/// boards that take long enough to mean something, walked as pairs of units.
#[test]
fn whole_trees_agree_walked_in_pairs() {
    let mut rng = Rng::new(7);
    for rel in [
        "brendan/set2/pieces_05x05.txt",
        "brendan/set1/pieces_06x06.txt",
    ] {
        let plan = plan(&load(rel), &OrderSpec::default());
        let mut prefixes = Vec::new();
        Walker::new(&plan)
            .enumerate(&[], 3, &mut |p| prefixes.push(p.to_vec()))
            .unwrap();
        let todo: Vec<(Unit, Option<u64>)> = prefixes
            .into_iter()
            .map(|p| (Unit::prefix(p), None))
            .collect();
        let (mut reference, mut lanes) = engines(&plan);
        let mut feed = Units::new(todo.clone());
        let first = feed.take().expect("a unit");
        lanes.run_feed(first, &mut feed);
        let mut total = UnitResult::default();
        for (i, (unit, _)) in todo.iter().enumerate() {
            let r = reference.run(unit, opts(None), &mut NoControl).unwrap();
            let l = feed.results[i].as_ref().expect("every unit walked");
            assert_eq!(l, &r, "{rel}: unit {i}");
            total.absorb(l, 1000);
        }
        let whole = reference
            .run(&Unit::root(), opts(None), &mut NoControl)
            .unwrap();
        let below: u64 = whole.nodes_by_depth[3..].iter().sum();
        assert_eq!(
            total.committed, below,
            "{rel}: the units add up to the tree"
        );
        assert_eq!(total.solutions_count, whole.solutions_count, "{rel}");
        pairs_agree(&plan, 4, 60, &mut rng, rel);
    }
    // Brendan set 1 6x6: 69,284,103 nodes and 260 solutions (docs/counting.md)
    let plan = plan(
        &load("brendan/set1/pieces_06x06.txt"),
        &OrderSpec::default(),
    );
    let (_, mut lanes) = engines(&plan);
    let whole = lanes
        .run(&Unit::root(), opts(None), &mut NoControl)
        .unwrap();
    assert_eq!((whole.committed, whole.solutions_count), (69_284_103, 260));
}

/// Random puzzles (hints, every fill-order kind) the lane engine takes: whole trees,
/// budget chains and prefixes walked in pairs all agree with the reference walker.
#[test]
fn lanes_match_reference_on_random_puzzles() {
    let mut rng = Rng::new(2027);
    let mut walked = 0;
    for round in 0..40 {
        let (_, puzzle, spec) = random_round(&mut rng, round);
        let plan = plan(&puzzle, &spec);
        let (mut reference, mut lanes) = match LaneEngine::new(plan.clone()) {
            Ok(l) => (ReferenceEngine::new(plan.clone()), l),
            Err(NotEligible::ExtraSides) => continue,
            Err(e) => panic!("round {round}: {e}"),
        };
        walked += 1;
        let whole_r = reference
            .run(&Unit::root(), opts(None), &mut NoControl)
            .unwrap();
        let whole_l = lanes
            .run(&Unit::root(), opts(None), &mut NoControl)
            .unwrap();
        assert_eq!(whole_l, whole_r, "round {round} {spec}");
        let most = 1 + whole_r.committed as usize / 4;
        agree_down_a_chain(
            (&mut reference, &mut lanes as &mut dyn Engine),
            (0..30).map(|_| 1 + rng.below(most) as u64),
            &format!("round {round} {spec}"),
        );
        let depth = rng.below(plan.len() + 1);
        pairs_agree(&plan, depth, 12, &mut rng, &format!("round {round} {spec}"));
    }
    assert!(
        walked >= 25,
        "most random puzzles are lane boards ({walked} of 40)"
    );
}

/// A stop the control asks for ends exactly like a budget stop at that count.
#[test]
fn a_requested_stop_matches_a_budget_stop() {
    let plan = plan(
        &load("brendan/set2/pieces_10x10.txt"),
        &OrderSpec::default(),
    );
    let (mut reference, mut lanes) = engines(&plan);
    let mut polls = 0;
    let stopped = lanes
        .run(&Unit::root(), opts(None), &mut |_c: u64| {
            polls += 1;
            polls >= 3
        })
        .unwrap();
    assert_eq!(stopped.stop, Some(StopReason::Requested));
    let same = reference
        .run(&Unit::root(), opts(Some(stopped.committed)), &mut NoControl)
        .unwrap();
    assert_eq!(same.cursor, stopped.cursor);
    assert_eq!(same.nodes_by_depth, stopped.nodes_by_depth);
}

/// Boards it does not walk say why: more than 128 pieces, or a fill order that gives a
/// cell three placed neighbours.
#[test]
fn boards_it_does_not_walk_say_why() {
    let hard = plan(&load("bench/bench-hard.json"), &OrderSpec::default());
    assert!(matches!(
        LaneEngine::new(hard).err(),
        Some(NotEligible::TooManyPieces(256))
    ));
    // a unit that does not fit the puzzle is an error, as for every engine
    let plan = plan(
        &load("brendan/set1/pieces_07x07.txt"),
        &OrderSpec::default(),
    );
    let (_, mut lanes) = engines(&plan);
    let bad = Unit::prefix(vec![e2fleet_engine::Placement::new(3, 0, 0)]);
    assert!(matches!(
        lanes.run(&bad, opts(None), &mut NoControl),
        Err(EngineError::Unit(_))
    ));
}
