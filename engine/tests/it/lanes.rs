//! The lane engine against the reference engine, to the digit, in both its forms (the
//! narrow one, two lanes, and the wide one, six lanes, with each kernel this processor
//! runs: SSSE3, and AVX-512 where it has it): low-colour boards under budgets
//! and down continuation chains, random puzzles in every fill-order kind, whole small
//! trees, units walked several at a time through a feed, requested stops, the hard 16x16
//! boards (wide), and the boards it refuses.

use std::sync::Arc;

use e2fleet_engine::engine::{Engine, EngineError, Feed, ReferenceEngine, Work};
use e2fleet_engine::lanes::{LaneEngine, LaneForm, LaneTables, NotEligible, WideKernel};
use e2fleet_engine::plan::SearchPlan;
use e2fleet_engine::search::{NoControl, Walker};
use e2fleet_engine::testing::{Rng, random_puzzle};
use e2fleet_engine::unit::{StopReason, UnitResult};
use e2fleet_engine::{FillOrder, OrderSpec, Puzzle, Unit};

use crate::{agree_down_a_chain, load, opts, random_round};

fn plan(puzzle: &Puzzle, spec: &OrderSpec) -> Arc<SearchPlan> {
    let order = FillOrder::new(puzzle, spec).expect("order");
    Arc::new(SearchPlan::new(puzzle, &order))
}

/// The lane engine's two forms of tables, the wide one with each of its kernels.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Form {
    /// What [`LaneTables::new`] takes on boards of at most 128 pieces.
    Narrow,
    /// [`LaneTables::wide_with`] the kernel, whatever the board.
    Wide(WideKernel),
}

impl Form {
    fn is_wide(self) -> bool {
        matches!(self, Form::Wide(_))
    }
}

const FORMS: [Form; 3] = [
    Form::Narrow,
    Form::Wide(WideKernel::Avx512),
    Form::Wide(WideKernel::Ssse3),
];

/// The wide form with the kernel [`LaneTables::new`] takes here.
fn best_wide() -> Form {
    Form::Wide(WideKernel::best().unwrap_or(WideKernel::Ssse3))
}

/// The forms this machine has (the wide form is x86-64's, each kernel where the
/// processor has its instructions).
fn forms_here() -> Vec<Form> {
    FORMS
        .into_iter()
        .filter(|&f| match f {
            Form::Narrow => true,
            Form::Wide(k) => k.here(),
        })
        .collect()
}

/// The wide form's kernels this machine runs.
fn kernels_here() -> Vec<WideKernel> {
    WideKernel::ALL.into_iter().filter(|k| k.here()).collect()
}

fn lanes_in(plan: &Arc<SearchPlan>, form: Form) -> Result<LaneEngine, NotEligible> {
    let tables = match form {
        Form::Narrow => LaneTables::new(plan)?,
        Form::Wide(kernel) => LaneTables::wide_with(plan, kernel)?,
    };
    let name = if form.is_wide() {
        LaneForm::Wide
    } else {
        LaneForm::Narrow
    };
    if plan.pieces <= 128 || form.is_wide() {
        assert_eq!(tables.form(), name, "{form:?}");
    }
    if let Form::Wide(kernel) = form {
        assert_eq!(tables.kernel(), Some(kernel));
    }
    assert_eq!(
        tables.lanes(),
        if tables.form() == LaneForm::Wide {
            6
        } else {
            2
        }
    );
    Ok(LaneEngine::with_tables(plan.clone(), Arc::new(tables)))
}

fn engines(plan: &Arc<SearchPlan>, form: Form) -> (ReferenceEngine, LaneEngine) {
    (
        ReferenceEngine::new(plan.clone()),
        lanes_in(plan, form).expect("a lane board"),
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
/// none, on a board whose subtrees end), walked several at a time through a feed: every
/// result is the reference's.
fn pairs_agree(
    (plan, form): (&Arc<SearchPlan>, Form),
    depth: usize,
    count: usize,
    rng: &mut Rng,
    what: &str,
) {
    let mut prefixes = Vec::new();
    Walker::new(plan)
        .enumerate_first(&[], depth, count, &mut |p| prefixes.push(p.to_vec()))
        .unwrap();
    let todo: Vec<(Unit, Option<u64>)> = prefixes
        .into_iter()
        .map(|p| {
            let budget =
                (rng.below(4) > 0 || plan.pieces > 128).then(|| 1 + rng.below(300_000) as u64);
            (Unit::prefix(p), budget)
        })
        .collect();
    let (mut reference, mut lanes) = engines(plan, form);
    let mut feed = Units::new(todo.clone());
    let first = feed.take().expect("a unit");
    lanes.run_feed(first, &mut feed);
    for (i, (unit, budget)) in todo.iter().enumerate() {
        let r = reference.run(unit, opts(*budget), &mut NoControl).unwrap();
        let l = feed.results[i].as_ref().expect("every unit walked");
        assert_eq!(l, &r, "{what} {form:?}: unit {i} budget {budget:?}");
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
        for form in FORMS {
            let (mut reference, mut lanes) = match lanes_in(&plan, form) {
                Ok(l) => (ReferenceEngine::new(plan.clone()), l),
                // low colours: buckets past the wide form's 16 candidates
                Err(NotEligible::LongBucket(_) | NotEligible::Processor(_)) if form.is_wide() => {
                    continue;
                }
                Err(e) => panic!("{rel} {form:?}: {e}"),
            };
            let budgets = [1, 7, 1000, 123_457, 2_000_000, 1 << 20, 3_000_001];
            agree_down_a_chain(
                (&mut reference, &mut lanes as &mut dyn Engine),
                budgets,
                &format!("{rel} {form:?}"),
            );
        }
    }
}

/// Whole trees (every node, solutions and their boards) of the two smallest Brendan
/// boards that take long enough to mean something, walked as pairs of units.
#[test]
fn whole_trees_agree_walked_in_pairs() {
    let mut rng = Rng::new(7);
    let mut wide = 0;
    for rel in [
        "brendan/set2/pieces_05x05.txt",
        "brendan/set1/pieces_06x06.txt",
    ] {
        let plan = plan(&load(rel), &OrderSpec::default());
        let depth = 3;
        let mut prefixes = Vec::new();
        Walker::new(&plan)
            .enumerate(&[], depth, &mut |p| prefixes.push(p.to_vec()))
            .unwrap();
        let todo: Vec<(Unit, Option<u64>)> = prefixes
            .into_iter()
            .map(|p| (Unit::prefix(p), None))
            .collect();
        let mut reference = ReferenceEngine::new(plan.clone());
        let whole = reference
            .run(&Unit::root(), opts(None), &mut NoControl)
            .unwrap();
        let mut walked: Vec<Vec<UnitResult>> = Vec::new();
        for form in FORMS {
            let mut lanes = match lanes_in(&plan, form) {
                Ok(l) => l,
                Err(NotEligible::LongBucket(_) | NotEligible::Processor(_)) if form.is_wide() => {
                    continue;
                }
                Err(e) => panic!("{rel} {form:?}: {e}"),
            };
            wide += usize::from(form.is_wide());
            let mut feed = Units::new(todo.clone());
            let first = feed.take().expect("a unit");
            lanes.run_feed(first, &mut feed);
            let mut total = UnitResult::default();
            for l in &feed.results {
                total.absorb(l.as_ref().expect("every unit walked"), 1000);
            }
            let below: u64 = whole.nodes_by_depth[depth..].iter().sum();
            assert_eq!(
                total.committed, below,
                "{rel} {form:?}: the units add up to the tree"
            );
            assert_eq!(total.solutions_count, whole.solutions_count, "{rel}");
            walked.push(feed.results.into_iter().map(Option::unwrap).collect());
            pairs_agree((&plan, form), 4, 60, &mut rng, rel);
        }
        for (i, (unit, _)) in todo.iter().enumerate() {
            let r = reference.run(unit, opts(None), &mut NoControl).unwrap();
            for w in &walked {
                assert_eq!(w[i], r, "{rel}: unit {i}");
            }
        }
    }
    assert!(
        wide > 0 || !cfg!(target_arch = "x86_64"),
        "the wide form walked a whole tree"
    );
    // Brendan set 1 6x6: 69,284,103 nodes and 260 solutions (docs/counting.md)
    let plan = plan(
        &load("brendan/set1/pieces_06x06.txt"),
        &OrderSpec::default(),
    );
    let (_, mut lanes) = engines(&plan, Form::Narrow);
    let whole = lanes
        .run(&Unit::root(), opts(None), &mut NoControl)
        .unwrap();
    assert_eq!((whole.committed, whole.solutions_count), (69_284_103, 260));
}

/// Random puzzles (hints, every fill-order kind) each form takes: whole trees, budget
/// chains and prefixes walked several at a time all agree with the reference walker.
#[test]
fn lanes_match_reference_on_random_puzzles() {
    let mut rng = Rng::new(2027);
    let mut walked = [0; FORMS.len()];
    // the wide form's rounds by kernel: one board read a key (scan orders) or two
    let mut reads = [0; 2];
    for round in 0..40 {
        let (_, puzzle, spec) = random_round(&mut rng, round);
        let plan = plan(&puzzle, &spec);
        // the narrow form draws its budgets from `rng`, so the puzzles are those this test
        // had before the wide form (whose trees are known to be small); the wide form
        // draws from a generator of its own (the same draws for each kernel)
        for (f, form) in FORMS.into_iter().enumerate() {
            let mut own = Rng::new(round as u64);
            let rng = if form == Form::Narrow {
                &mut rng
            } else {
                &mut own
            };
            let (mut reference, mut lanes) = match lanes_in(&plan, form) {
                Ok(l) => (ReferenceEngine::new(plan.clone()), l),
                Err(NotEligible::ExtraSides) => continue,
                Err(NotEligible::LongBucket(_) | NotEligible::Processor(_)) if form.is_wide() => {
                    continue;
                }
                Err(e) => panic!("round {round} {form:?}: {e}"),
            };
            walked[f] += 1;
            if form == best_wide() {
                let two = LaneTables::wide(&plan).expect("taken above").two_reads();
                reads[two as usize] += 1;
            }
            let what = format!("round {round} {spec} {form:?}");
            let whole_r = reference
                .run(&Unit::root(), opts(None), &mut NoControl)
                .unwrap();
            let whole_l = lanes
                .run(&Unit::root(), opts(None), &mut NoControl)
                .unwrap();
            assert_eq!(whole_l, whole_r, "{what}");
            let most = 1 + whole_r.committed as usize / 4;
            agree_down_a_chain(
                (&mut reference, &mut lanes as &mut dyn Engine),
                (0..30).map(|_| 1 + rng.below(most) as u64),
                &what,
            );
            let depth = rng.below(plan.len() + 1);
            pairs_agree((&plan, form), depth, 12, rng, &what);
        }
    }
    let kernels_walked = FORMS
        .iter()
        .zip(walked)
        .filter(|(f, _)| forms_here().contains(f) && f.is_wide());
    assert!(
        walked[0] >= 25 && kernels_walked.clone().all(|(_, n)| n >= 10),
        "most random puzzles are lane boards (narrow {}, wide by kernel {:?} of 40)",
        walked[0],
        kernels_walked.collect::<Vec<_>>()
    );
    assert!(
        reads.iter().all(|&n| n >= 3) || !cfg!(target_arch = "x86_64"),
        "the wide form's both kernels walk random puzzles (one read {}, two {})",
        reads[0],
        reads[1]
    );
}

/// The hard 16x16 boards, which only the wide form takes: budget slices down a
/// continuation chain, and the units of a split under budgets walked six at a time,
/// agree with the reference walker to the digit.
#[test]
#[cfg(target_arch = "x86_64")]
fn the_hard_16x16_boards_agree_in_the_wide_form() {
    let mut rng = Rng::new(16);
    for (rel, depth) in [
        ("bench/bench-hard.json", 40),
        ("e2/official.json", 20),
        ("e2/centre-clue.json", 20),
        ("planted/inst_n16_c22_s1.json", 30),
    ] {
        let plan = plan(&load(rel), &OrderSpec::default());
        assert_eq!(
            LaneTables::new(&plan).map(|t| (t.form(), t.kernel())),
            Ok((LaneForm::Wide, WideKernel::best())),
            "{rel}: the board's form and the fastest kernel here"
        );
        for kernel in kernels_here() {
            let (mut reference, mut lanes) = engines(&plan, Form::Wide(kernel));
            let what = format!("{rel} {kernel}");
            agree_down_a_chain(
                (&mut reference, &mut lanes as &mut dyn Engine),
                [1, 2, 999, 123_457, 1 << 20, 1_500_001],
                &what,
            );
            pairs_agree((&plan, Form::Wide(kernel)), depth, 14, &mut rng, &what);
        }
    }
}

/// A stop the control asks for ends exactly like a budget stop at that count.
#[test]
fn a_requested_stop_matches_a_budget_stop() {
    for (rel, form) in [
        ("brendan/set2/pieces_10x10.txt", Form::Narrow),
        ("e2/centre-clue.json", best_wide()),
    ]
    .into_iter()
    .filter(|(_, f)| forms_here().contains(f))
    {
        let plan = plan(&load(rel), &OrderSpec::default());
        let (mut reference, mut lanes) = engines(&plan, form);
        stop_matches_budget(&mut reference, &mut lanes, 3, rel);
    }
}

/// Walks the root with a stop asked for at the `polls`-th poll, and checks it ends as the
/// reference walker's budget stop at the same count: cursor and counts per depth.
fn stop_matches_budget(
    reference: &mut ReferenceEngine,
    lanes: &mut LaneEngine,
    polls: usize,
    what: &str,
) {
    let mut asked = 0;
    let stopped = lanes
        .run(&Unit::root(), opts(None), &mut |_c: u64| {
            asked += 1;
            asked >= polls
        })
        .unwrap();
    assert_eq!(stopped.stop, Some(StopReason::Requested), "{what}");
    let same = reference
        .run(&Unit::root(), opts(Some(stopped.committed)), &mut NoControl)
        .unwrap();
    assert_eq!(same.cursor, stopped.cursor, "{what}");
    assert_eq!(same.nodes_by_depth, stopped.nodes_by_depth, "{what}");
}

/// A lone unit walks in every lane, cut into pieces: with pieces cut every few nodes
/// (so a small tree is cut hundreds of times, and budgets end inside pieces walked ahead
/// of the order), whole trees, continuation chains under budgets, continuations of
/// prefixes and requested stops all end exactly as the reference walker does.
#[test]
fn a_lone_unit_cut_into_pieces_agrees() {
    let mut rng = Rng::new(4242);
    let mut walked = 0;
    for round in 0..24 {
        let (_, puzzle, spec) = random_round(&mut rng, round);
        let plan = plan(&puzzle, &spec);
        for form in forms_here() {
            let Ok(lanes) = lanes_in(&plan, form) else {
                continue;
            };
            let mut reference = ReferenceEngine::new(plan.clone());
            let whole = reference
                .run(&Unit::root(), opts(None), &mut NoControl)
                .unwrap();
            // a few thousand pieces a tree at most (each cut costs a walk down its path)
            let least = whole.committed / 4_000;
            for slice in [1, 3, 17, 200].map(|s| s.max(least)) {
                let what = format!("round {round} {spec} {form:?} slice {slice}");
                let mut lanes =
                    LaneEngine::with_tables(plan.clone(), lanes.tables()).with_slice(slice);
                let l = lanes
                    .run(&Unit::root(), opts(None), &mut NoControl)
                    .unwrap();
                assert_eq!(l, whole, "{what}");
                let most = 1 + whole.committed / 3;
                agree_down_a_chain(
                    (&mut reference, &mut lanes as &mut dyn Engine),
                    (0..12).map(|_| 1 + rng.below(most as usize) as u64),
                    &what,
                );
                // a continuation below a prefix, and a stop asked for
                if let Some(prefix) = whole.deepest.get(..plan.len() / 3) {
                    let unit = Unit::prefix(prefix.to_vec());
                    let r = reference.run(&unit, opts(Some(5)), &mut NoControl).unwrap();
                    if let Some(cursor) = r.cursor {
                        let next = unit.continuation(cursor);
                        let budget = Some(1 + rng.below(most as usize) as u64);
                        assert_eq!(
                            lanes.run(&next, opts(budget), &mut NoControl).unwrap(),
                            reference.run(&next, opts(budget), &mut NoControl).unwrap(),
                            "{what}: a continuation"
                        );
                    }
                }
                walked += 1;
            }
        }
    }
    assert!(
        walked >= 60,
        "most random puzzles are lane boards ({walked})"
    );
    // the hard boards, where pieces are cut by the estimates: budgets across many
    // pieces, and a stop asked for
    #[cfg(target_arch = "x86_64")]
    for rel in ["e2/official.json", "planted/inst_n16_c22_s1.json"] {
        let plan = plan(&load(rel), &OrderSpec::default());
        let (mut reference, lanes) = engines(&plan, best_wide());
        let mut lanes = lanes.with_slice(5_000);
        agree_down_a_chain(
            (&mut reference, &mut lanes as &mut dyn Engine),
            [1, 4_999, 5_001, 777_777, 2_000_003],
            rel,
        );
        stop_matches_budget(&mut reference, &mut lanes, 2, rel);
    }
}

/// Boards it does not walk say why: a fill order that gives a cell three placed
/// neighbours, or (in the wide form) a bucket longer than a frame's mask; and a unit that
/// does not fit the puzzle is an error in both forms.
#[test]
fn boards_it_does_not_walk_say_why() {
    let small = load("brendan/set1/pieces_07x07.txt");
    // fill the first row, then the third, then the second: the second row's cells have
    // three placed neighbours
    let w = small.width();
    let cells: Vec<String> = (0..w)
        .chain(2 * w..3 * w)
        .chain(w..2 * w)
        .chain(3 * w..small.width() * small.height())
        .map(|c| c.to_string())
        .collect();
    let spec: OrderSpec = format!("cells:{}", cells.join(","))
        .parse()
        .expect("an order");
    let three = plan(&small, &spec);
    assert!(matches!(
        LaneEngine::new(three.clone()).err(),
        Some(NotEligible::ExtraSides)
    ));
    let wide = cfg!(target_arch = "x86_64");
    assert!(
        !wide
            || matches!(
                LaneTables::wide(&three).err(),
                Some(NotEligible::ExtraSides)
            )
    );
    let rows = plan(&small, &OrderSpec::default());
    // two inner colours on 8x8: 36 inner pieces in 4 buckets a cell
    let (few, _) = random_puzzle(&mut Rng::new(3), 8, 8, 1, 2, 0);
    assert!(
        !wide
            || matches!(
                LaneTables::wide(&plan(&few, &OrderSpec::default())).err(),
                Some(NotEligible::LongBucket(n)) if n > 16
            )
    );
    // a unit that does not fit the puzzle is an error, as for every engine
    for form in forms_here() {
        let (_, mut lanes) = engines(&rows, form);
        let bad = Unit::prefix(vec![e2fleet_engine::Placement::new(3, 0, 0)]);
        assert!(matches!(
            lanes.run(&bad, opts(None), &mut NoControl),
            Err(EngineError::Unit(_))
        ));
    }
    if !wide {
        return;
    }
    let hard = plan(&load("bench/bench-hard.json"), &OrderSpec::default());
    let (_, mut lanes) = engines(&hard, best_wide());
    let bad = Unit::prefix(vec![e2fleet_engine::Placement::new(3, 0, 0)]);
    assert!(matches!(
        lanes.run(&bad, opts(None), &mut NoControl),
        Err(EngineError::Unit(_))
    ));
}
