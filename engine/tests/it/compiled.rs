//! The compiled engine against the reference engine, to the digit: known counts, random
//! puzzles in every fill-order kind and group size, random prefixes and budgets with their
//! cursors; plus the build cache and every failure path (rustc missing or failing, a
//! corrupted cache entry, a crashing engine process).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use e2fleet_engine::compiled::cache::Cache;
use e2fleet_engine::compiled::{BuildOptions, CodegenOptions, CompileError, CompiledProgram};
use e2fleet_engine::engine::{Engine, EngineError, Feed, ReferenceEngine, Work};
use e2fleet_engine::plan::SearchPlan;
use e2fleet_engine::search::{Control, NoControl, Walker};
use e2fleet_engine::testing::{Rng, order_of_kind, random_puzzle};
use e2fleet_engine::unit::{StopReason, UnitResult};
use e2fleet_engine::{FillOrder, OrderSpec, Puzzle, Unit};

use crate::{agree_down_a_chain, load, opts, random_round};

/// The build cache of test `name`: a folder of the target's scratch space, emptied the
/// first time this run asks for it, so every run starts cold and leaves one copy behind
/// (not one per run in the system's temp folder).
fn cache_dir(name: &str) -> PathBuf {
    use std::os::unix::fs::DirBuilderExt;
    static EMPTIED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("engine-compiled")
        .join(name);
    let mut emptied = EMPTIED.lock().unwrap();
    if !emptied.iter().any(|n| n == name) {
        let _ = std::fs::remove_dir_all(&dir);
        emptied.push(name.to_string());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .unwrap();
    dir
}

fn options(name: &str) -> BuildOptions {
    BuildOptions {
        cache_dir: cache_dir(name),
        ..BuildOptions::default()
    }
}

fn plan(puzzle: &Puzzle, spec: &OrderSpec) -> Arc<SearchPlan> {
    Arc::new(SearchPlan::new(
        puzzle,
        &FillOrder::new(puzzle, spec).unwrap(),
    ))
}

fn engines(
    plan: &Arc<SearchPlan>,
    group: usize,
    cache: &str,
) -> (ReferenceEngine, Box<dyn Engine>) {
    // boards of at most 128 pieces with their slot lookup where it applies (the plain
    // mask walk: `low_colour_boards_agree_under_budgets`), larger ones the list walk (the
    // slot walk: `slot_walk_matches_reference`)
    let codegen = CodegenOptions {
        group: Some(group),
        poll_interval: 997,
        slots: plan.pieces <= 128,
        ..CodegenOptions::default()
    };
    engines_with(plan, &codegen, cache)
}

fn engines_with(
    plan: &Arc<SearchPlan>,
    codegen: &CodegenOptions,
    cache: &str,
) -> (ReferenceEngine, Box<dyn Engine>) {
    let program = CompiledProgram::build(plan, codegen, &options(cache)).unwrap();
    (
        ReferenceEngine::new(plan.clone()),
        Box::new(program.engine(plan.clone())),
    )
}

/// The whole tree from the root, walked by both engines: (reference, compiled).
fn whole_tree(
    (mut reference, mut compiled): (ReferenceEngine, Box<dyn Engine>),
) -> (
    e2fleet_engine::unit::UnitResult,
    e2fleet_engine::unit::UnitResult,
) {
    let r = reference
        .run(&Unit::root(), opts(None), &mut NoControl)
        .unwrap();
    let c = compiled
        .run(&Unit::root(), opts(None), &mut NoControl)
        .unwrap();
    (r, c)
}

/// The first `count` prefixes `depth` deep, each walked by both engines under a random
/// budget of at most 100,000 nodes: they agree on every field.
fn agree_on_first_prefixes(
    (reference, compiled): (&mut ReferenceEngine, &mut dyn Engine),
    plan: &SearchPlan,
    (depth, count): (usize, usize),
    rng: &mut Rng,
    what: &str,
) {
    let mut prefixes = Vec::new();
    Walker::new(plan)
        .enumerate_first(&[], depth, count, &mut |p| prefixes.push(p.to_vec()))
        .unwrap();
    for p in prefixes {
        let u = Unit::prefix(p);
        let budget = Some(1 + rng.below(100_000) as u64);
        let r = reference.run(&u, opts(budget), &mut NoControl).unwrap();
        let c = compiled.run(&u, opts(budget), &mut NoControl).unwrap();
        assert_eq!(c, r, "{what} prefix depth {depth}");
    }
}

/// `slices` random budgets of at most `most` nodes down a continuation chain from the
/// root, then the first `prefixes` prefixes at a random depth of up to twice the board's
/// width (a square board), all agreeing: [`agree_down_a_chain`], [`agree_on_first_prefixes`].
fn agree_on_slices_and_prefixes(
    (reference, compiled): (&mut ReferenceEngine, &mut dyn Engine),
    plan: &SearchPlan,
    ((slices, most), prefixes): ((usize, usize), usize),
    rng: &mut Rng,
    what: &str,
) {
    let budgets: Vec<u64> = (0..slices).map(|_| 1 + rng.below(most) as u64).collect();
    agree_down_a_chain((&mut *reference, &mut *compiled), budgets, what);
    let size = plan.cells.isqrt();
    let depth = 1 + rng.below(2 * size);
    agree_on_first_prefixes((reference, compiled), plan, (depth, prefixes), rng, what);
}

#[test]
fn known_counts_compiled() {
    for (rel, nodes, solutions) in [
        ("brendan/set1/pieces_05x05.txt", 113_211u64, 16u64),
        ("brendan/set1/pieces_06x06.txt", 69_284_103, 260),
        ("bench/bench-easy-rows0-5.json", 6_427_237, 1),
    ] {
        let puzzle = load(rel);
        let plan = plan(&puzzle, &OrderSpec::default());
        let (mut reference, mut compiled) = engines(&plan, 4, "known");
        let c = compiled
            .run(&Unit::root(), opts(None), &mut NoControl)
            .unwrap();
        assert_eq!(
            (c.committed, c.solutions_count),
            (nodes, solutions),
            "{rel}"
        );
        if nodes < 10_000_000 {
            let r = reference
                .run(&Unit::root(), opts(None), &mut NoControl)
                .unwrap();
            assert_eq!(c, r, "{rel}");
        }
    }
}

/// Whole trees, budget slices with cursors, continuations and random prefixes: the two
/// engines agree on every field of every result.
#[test]
fn compiled_matches_reference_on_random_puzzles() {
    let mut rng = Rng::new(2026);
    for round in 0..16 {
        let ((w, h), puzzle, spec) = random_round(&mut rng, round);
        let plan = plan(&puzzle, &spec);
        let group = 1 + round % 5;
        let (mut reference, mut compiled) = engines(&plan, group, "random");
        let started = std::time::Instant::now();
        let whole_r = reference
            .run(&Unit::root(), opts(None), &mut NoControl)
            .unwrap();
        eprintln!(
            "round {round}: {w}x{h} {} nodes in {:?}",
            whole_r.committed,
            started.elapsed()
        );
        let whole_c = compiled
            .run(&Unit::root(), opts(None), &mut NoControl)
            .unwrap();
        assert_eq!(whole_c, whole_r, "round {round} {spec}");
        // budgets: slice the whole tree, comparing every slice and cursor
        let most = 1 + whole_r.committed as usize / 4;
        agree_down_a_chain(
            (&mut reference, compiled.as_mut()),
            (0..30).map(|_| 1 + rng.below(most) as u64),
            &format!("round {round}"),
        );
        // random prefixes at random depths
        let depth = rng.below(plan.len() + 1);
        let mut prefixes = Vec::new();
        Walker::new(&plan)
            .enumerate(&[], depth, &mut |p| prefixes.push(p.to_vec()))
            .unwrap();
        for p in prefixes.iter().take(6) {
            let u = Unit::prefix(p.clone());
            let budget = (rng.below(3) > 0).then(|| 1 + rng.below(50) as u64);
            let r = reference.run(&u, opts(budget), &mut NoControl).unwrap();
            let c = compiled.run(&u, opts(budget), &mut NoControl).unwrap();
            assert_eq!(c, r, "round {round} prefix depth {depth}");
        }
    }
}

#[test]
fn bench_boards_agree_under_budgets() {
    for rel in [
        "bench/bench-hard.json",
        "bench/bench-easy.json",
        "e2/official.json",
    ] {
        let plan = plan(&load(rel), &OrderSpec::default());
        let (mut reference, mut compiled) = engines(&plan, 4, "bench");
        let budgets = [1, 7, 1000, 123_457, 2_000_000];
        agree_down_a_chain((&mut reference, compiled.as_mut()), budgets, rel);
    }
}

/// Low-colour boards of at most 128 pieces, where the compiled engine walks a bucket's
/// free pieces as mask bits (one mask word up to 64 pieces, two above): budget slices down
/// a continuation chain and whole small trees agree with the reference walker to the digit,
/// with group sizes that put the slices' ends inside and at the edges of groups.
#[test]
fn low_colour_boards_agree_under_budgets() {
    for (rel, group) in [
        ("brendan/set1/pieces_07x07.txt", 6),
        ("brendan/set2/pieces_08x08.txt", 4),
        ("brendan/set2/pieces_09x09.txt", 5),
        ("brendan/set1/pieces_10x10.txt", 6),
        // the default group of 7x7 to 10x10 boards: one row
        ("brendan/set2/pieces_07x07.txt", 7),
        ("brendan/set1/pieces_09x09.txt", 9),
        ("brendan/set2/pieces_10x10.txt", 10),
        ("clues/e2-clue-clue1.json", 3),
    ] {
        let plan = plan(&load(rel), &OrderSpec::default());
        let budgets = [1, 7, 1000, 123_457, 2_000_000, 5_000_000];
        // the plain mask walk, then with the slot lookup where it applies
        for slots in [false, true] {
            let codegen = CodegenOptions {
                group: Some(group),
                poll_interval: 997,
                slots,
                ..CodegenOptions::default()
            };
            let (mut reference, mut compiled) = engines_with(&plan, &codegen, "low-colour");
            let what = format!("{rel} slots {slots}");
            agree_down_a_chain((&mut reference, compiled.as_mut()), budgets, &what);
        }
    }
    // a split used mask (9x9: rim pieces in one word, inner ones in the other) under a
    // comb and a random permutation of the cells, whose units resume mid-group through
    // the runtime's own reading of the mask
    let puzzle = load("brendan/set1/pieces_09x09.txt");
    let mut rng = Rng::new(99);
    for kind in [8, 10] {
        let plan = plan(&puzzle, &order_of_kind(&puzzle, kind, &mut rng));
        let (mut reference, mut compiled) = engines(&plan, 4, "low-colour");
        let budgets = [3, 999, 250_001, 1_000_000];
        agree_down_a_chain((&mut reference, compiled.as_mut()), budgets, "set 1 9x9");
    }
    let puzzle = load("brendan/set2/pieces_05x05.txt");
    let plan = plan(&puzzle, &OrderSpec::default());
    let (r, c) = whole_tree(engines(&plan, 6, "low-colour"));
    assert_eq!(c, r, "set 2 5x5 whole");
}

/// A group is one line of the fill on boards with a used mask filled line by line in
/// lines of 7 to 10 cells (rows, or columns in a column scan), else 6.
#[test]
fn the_default_group_is_a_line_on_mid_sized_mask_boards() {
    use e2fleet_engine::compiled::codegen::default_group;
    let columns = OrderSpec::Scan {
        columns: true,
        from: e2fleet_engine::order::Corner::TopLeft,
    };
    for (rel, order, group) in [
        ("brendan/set1/pieces_06x06.txt", OrderSpec::default(), 6),
        ("brendan/set1/pieces_07x07.txt", OrderSpec::default(), 7),
        ("brendan/set2/pieces_08x08.txt", OrderSpec::default(), 8),
        ("brendan/set2/pieces_09x09.txt", columns.clone(), 9),
        ("brendan/set1/pieces_10x10.txt", OrderSpec::default(), 10),
        ("bench/bench-hard.json", OrderSpec::default(), 6),
        ("brendan/set1/pieces_05x05.txt", OrderSpec::default(), 6),
    ] {
        assert_eq!(default_group(&plan(&load(rel), &order)), group, "{rel}");
    }
    // an order that is no scan keeps 6
    let puzzle = load("brendan/set1/pieces_09x09.txt");
    let order = order_of_kind(&puzzle, 10, &mut Rng::new(5));
    assert_eq!(default_group(&plan(&puzzle, &order)), 6);
}

/// Two-word boards lay the used mask out so that each table's pieces are one word: the
/// Brendan 9x9 and 10x10 split where their inner pieces start, one-word boards and
/// boards without a used mask keep the plain layout.
#[test]
fn two_word_masks_split_where_the_inner_pieces_start() {
    use e2fleet_engine::compiled::codegen::emit;
    for (rel, split) in [
        ("brendan/set1/pieces_08x08.txt", 64),
        ("brendan/set1/pieces_09x09.txt", 32),
        ("brendan/set2/pieces_10x10.txt", 36),
        ("e2/official.json", 64),
    ] {
        let plan = plan(&load(rel), &OrderSpec::default());
        let source = emit(&plan, &CodegenOptions::default(), "");
        assert!(source.contains(&format!("mask_split: {split},")), "{rel}");
    }
}

/// With `CodegenOptions::slots` on a low-colour board, a mask level inside a group looks
/// its bucket up from the slot of the candidate its enclosing loop holds (`NEXT`: one
/// load from a free bit to the next cell's free mask), unless some transition's entries
/// would not fit one word: every level but a row's first on the Brendan boards up to
/// 9x9, none on set 2 10x10 (64 inner pieces fill the word) nor on boards of more than
/// 128 pieces (no mask walk); without the option, or with one-level functions, none. The
/// `NEXT` tables stay dense (the buckets' blocks packed in `BYBIT`: 3,198-11,562 entries
/// on these boards, against 60,000-262,000 with a block of its own per bucket). The
/// counts are the other tests' business; this one fails if the lookup silently stops
/// being made or its tables grow sparse again.
#[test]
fn mask_levels_chain_their_buckets_where_every_entry_fits_a_word() {
    use e2fleet_engine::compiled::codegen::{emit, slot_lookup_applies};
    for (rel, chained, most_entries) in [
        ("brendan/set1/pieces_06x06.txt", 30, 6_000),
        ("brendan/set1/pieces_07x07.txt", 42, 7_000),
        ("brendan/set2/pieces_08x08.txt", 56, 19_000),
        ("brendan/set1/pieces_09x09.txt", 72, 23_000),
        ("brendan/set2/pieces_10x10.txt", 0, 0),
        ("e2/official.json", 0, 0),
    ] {
        let plan = plan(&load(rel), &OrderSpec::default());
        let count = |options: &CodegenOptions| {
            emit(&plan, options, "")
                .matches(": u64 = unsafe { *NEXT")
                .count()
        };
        let slots = CodegenOptions {
            slots: true,
            ..CodegenOptions::default()
        };
        let plain = CodegenOptions::default();
        assert_eq!((count(&slots), count(&plain)), (chained, 0), "{rel}");
        // `static NEXTi: [u64; N]`, summed
        let entries: usize = emit(&plan, &slots, "")
            .lines()
            .filter(|l| l.starts_with("static NEXT"))
            .filter_map(|l| {
                l.split("[u64; ")
                    .nth(1)?
                    .split(']')
                    .next()?
                    .parse::<usize>()
                    .ok()
            })
            .sum();
        assert!(entries <= most_entries, "{rel}: {entries} NEXT entries");
        assert_eq!(entries > 0, chained > 0, "{rel}");
        assert_eq!(slot_lookup_applies(&plan, &plain), chained > 0, "{rel}");
        // a function a level long has no level before one in it, so nothing to chain
        let single = CodegenOptions {
            group: Some(1),
            ..slots
        };
        assert_eq!(
            (count(&single), slot_lookup_applies(&plan, &single)),
            (0, false),
            "{rel}"
        );
    }
}

/// The slot walk (`CodegenOptions::slots`, one branch and one call site per candidate
/// slot) against the reference walker: budget slices down a continuation chain on the
/// hard, clue and easy 16x16 boards; a whole tree with its solution; and random 12x12
/// boards in every fill-order kind (the walk applies to some, the others keep the list
/// walk), with chains and random prefixes under budgets, which resume through the
/// runtime's cold scan into the bucket functions.
#[test]
fn slot_walk_matches_reference() {
    use e2fleet_engine::compiled::codegen::slot_walk_applies;
    let codegen = CodegenOptions {
        poll_interval: 997,
        slots: true,
        ..CodegenOptions::default()
    };
    for rel in [
        "bench/bench-hard.json",
        "e2/official.json",
        "e2/centre-clue.json",
        "bench/bench-easy.json",
    ] {
        let plan = plan(&load(rel), &OrderSpec::default());
        assert!(slot_walk_applies(&plan), "{rel}");
        let (mut reference, mut compiled) = engines_with(&plan, &codegen, "slots");
        let budgets = [1, 7, 1000, 123_457, 2_000_000];
        agree_down_a_chain((&mut reference, compiled.as_mut()), budgets, rel);
    }
    let rows = plan(
        &load("bench/bench-easy-rows0-5.json"),
        &OrderSpec::default(),
    );
    let (r, c) = whole_tree(engines_with(&rows, &codegen, "slots"));
    assert_eq!((c.committed, c.solutions_count), (6_427_237, 1));
    assert_eq!(c, r, "bench-easy rows 0-5, whole tree");
    let mut rng = Rng::new(1111);
    let mut applied = 0;
    for round in 0..6 {
        let inner = 9 + rng.below(4) as u8;
        let hints = rng.below(4);
        let (puzzle, _) = random_puzzle(&mut rng, 12, 12, 3, inner, hints);
        let spec = order_of_kind(&puzzle, [0, 2, 5, 7, 8, 9][round], &mut rng);
        let plan = plan(&puzzle, &spec);
        applied += slot_walk_applies(&plan) as usize;
        let (mut reference, mut compiled) = engines_with(&plan, &codegen, "slots");
        let what = format!("round {round} {spec}");
        let budgets: Vec<u64> = (0..8).map(|_| 1 + rng.below(200_000) as u64).collect();
        agree_down_a_chain((&mut reference, compiled.as_mut()), budgets, &what);
        let depth = 1 + rng.below(12);
        agree_on_first_prefixes(
            (&mut reference, compiled.as_mut()),
            &plan,
            (depth, 4),
            &mut rng,
            &what,
        );
    }
    assert!(
        applied >= 3,
        "the slot walk applied to {applied} of 6 random orders"
    );
}

/// The list walk's two candidate layouts against the reference walker: the piece id in
/// the candidate's low byte and the up colour moved above the colours (boards of 129-256
/// pieces, every 16x16 board), the plan's layout with the piece in the top bits (more
/// pieces), in fill orders that key on every side (scans from other corners, by columns,
/// a comb, random permutations of the cells, an order with extra-side checks on
/// the side the byte layout moves): budget chains and
/// random prefixes, which resume through the runtime's reading of the board. It also
/// fails if 16x16 boards silently stop getting the byte layout.
#[test]
fn list_walk_layouts_agree_in_every_order_kind() {
    use e2fleet_engine::compiled::codegen::emit;
    let mut rng = Rng::new(1812);
    for (size, kinds) in [(12, [0, 1, 6, 8, 10]), (17, [0, 3, 5, 9, 10])] {
        for (round, kind) in kinds.into_iter().enumerate() {
            let inner = 9 + rng.below(4) as u8;
            let hints = if kind == 0 { 0 } else { rng.below(3) };
            let (puzzle, _) = random_puzzle(&mut rng, size, size, 3, inner, hints);
            let spec = match kind {
                // rows 0 and 2, then row 1 from the right: a cell of row 1 keys on its up
                // and right neighbours and checks its down one as an extra side (the up
                // colour of the cell below, which the byte layout moves)
                0 => {
                    let row = |r: usize| (0..size).map(move |c| r * size + c);
                    let cells = row(0).chain(row(2)).chain(row(1).rev());
                    OrderSpec::Cells(cells.chain((3..size).flat_map(row)).collect())
                }
                _ => order_of_kind(&puzzle, kind, &mut rng),
            };
            let plan = plan(&puzzle, &spec);
            let what = format!("{size}x{size} {spec}");
            let source = emit(&plan, &CodegenOptions::default(), "");
            assert_eq!(
                source.contains("as u8) as usize"),
                size == 12,
                "{what}: the byte layout on 129-256 pieces only"
            );
            let (mut reference, mut compiled) = engines(&plan, 3 + round, "layouts");
            agree_on_slices_and_prefixes(
                (&mut reference, compiled.as_mut()),
                &plan,
                ((6, 300_000), 3),
                &mut rng,
                &what,
            );
        }
    }
}

/// Pruned levels of the list walk (`Prune`): each level's copy of the bucket tables
/// without the pieces placed above its cut, brought up to date at the level's first head
/// and wherever the cold scan enters one of its heads, its cut moving up and down as
/// bring-ups come often or seldom. Levels of one or two groups, cuts that move every few
/// hundred nodes, random boards of 144 and 289 pieces in row, column, comb and random
/// (12x12 only: on 17x17 finding prefixes can take minutes) orders: budget slices down a continuation chain (every resume enters mid-group
/// through the scan), prefixes, and one engine process running unit after unit (the
/// levels' records outlive a unit), all agree with the reference walker to the digit.
#[test]
fn pruned_levels_agree_under_budgets_and_resumes() {
    use e2fleet_engine::compiled::codegen::{Prune, emit};
    let mut rng = Rng::new(2112);
    for (round, (size, kind)) in [(12, 0), (12, 6), (17, 3), (12, 8), (17, 5), (12, 9)]
        .into_iter()
        .enumerate()
    {
        let inner = 9 + rng.below(4) as u8;
        let hints = rng.below(3);
        let (puzzle, _) = random_puzzle(&mut rng, size, size, 3, inner, hints);
        let spec = order_of_kind(&puzzle, kind, &mut rng);
        let plan = plan(&puzzle, &spec);
        let group = 2 + round % 3;
        let every = 2 * group;
        let prune = Prune {
            every,
            lag: rng.below(every + 1),
            few: 50 + rng.below(200) as u64,
            many: 300 + rng.below(2000) as u64,
        };
        let what = format!("{size}x{size} {spec} group {group} {prune:?}");
        let codegen = CodegenOptions {
            group: Some(group),
            poll_interval: 997,
            prune: Some(prune),
            ..CodegenOptions::default()
        };
        assert!(
            emit(&plan, &codegen, "").contains("refilter"),
            "{what}: no level pruned"
        );
        let (mut reference, mut compiled) = engines_with(&plan, &codegen, "pruned");
        agree_on_slices_and_prefixes(
            (&mut reference, compiled.as_mut()),
            &plan,
            ((8, 400_000), 4),
            &mut rng,
            &what,
        );
        // a unit in the root's last subtree brings the levels up to date with a path
        // unlike the first prefixes', and those start where the scan enters level 1 at its
        // second head: a level's copies must be brought up to date there too
        let mut last = Vec::new();
        Walker::new(&plan)
            .enumerate(&[], 1, &mut |p| last = p.to_vec())
            .unwrap();
        let far = Unit::prefix(last);
        let r = reference
            .run(&far, opts(Some(300_000)), &mut NoControl)
            .unwrap();
        let c = compiled
            .run(&far, opts(Some(300_000)), &mut NoControl)
            .unwrap();
        assert_eq!(c, r, "{what} the last subtree");
        agree_on_first_prefixes(
            (&mut reference, compiled.as_mut()),
            &plan,
            (every + group - 1, 6),
            &mut rng,
            &what,
        );
    }
}

/// Where the list walk prunes by default: boards of more than 128 pieces walked by fused
/// groups (not the slot walk, not the mask walk of smaller boards), and not with
/// `Prune::OFF`.
#[test]
fn the_list_walk_prunes_its_levels_by_default() {
    use e2fleet_engine::compiled::codegen::{Prune, emit};
    let hard = plan(&load("bench/bench-hard.json"), &OrderSpec::default());
    let prunes = |plan: &SearchPlan, codegen: &CodegenOptions| {
        emit(plan, codegen, "").contains("refilter(st")
    };
    assert!(prunes(&hard, &CodegenOptions::default()));
    let off = CodegenOptions {
        prune: Some(Prune::OFF),
        ..CodegenOptions::default()
    };
    assert!(!prunes(&hard, &off));
    let slots = CodegenOptions {
        slots: true,
        ..CodegenOptions::default()
    };
    assert!(!prunes(&hard, &slots));
    let small = plan(
        &load("brendan/set1/pieces_07x07.txt"),
        &OrderSpec::default(),
    );
    assert!(!prunes(&small, &CodegenOptions::default()));
}

/// `Walk::Auto` where the slot walk applies: both walks built, raced (their counts
/// compared on the way), the decision sealed in the cache and taken from it next time; a
/// tampered decision is raced again; the chosen build counts like the reference walker.
/// Where no walk by slots applies, the list build alone, no race; on a low-colour board,
/// a race of the mask walk with and without its slot lookup.
#[test]
fn the_auto_walk_races_once_and_remembers() {
    use e2fleet_engine::compiled::walk::{
        self, Choice, MAX_RACE_ROUNDS, RACE_ROUNDS, SLOTS_MARGIN, Walk,
    };
    let codegen = CodegenOptions {
        poll_interval: 997,
        ..CodegenOptions::default()
    };
    let build = options("slots");
    let plan = plan(&load("bench/bench-hard.json"), &OrderSpec::default());
    let first = walk::build(&plan, &codegen, &build, Walk::Auto).unwrap();
    let Choice::Raced {
        ratio,
        nodes,
        units,
        rounds,
    } = first.choice.clone()
    else {
        panic!("not raced: {:?}", first.choice);
    };
    // the sample's units, not the root: bench-hard's subtrees walk their budgets
    assert_eq!(units, walk::RACE_UNITS, "raced on the root alone");
    assert!(
        (RACE_ROUNDS..=MAX_RACE_ROUNDS).contains(&rounds),
        "{rounds} rounds"
    );
    assert!(nodes > 1_000_000 && ratio > 0.0, "{nodes} {ratio}");
    assert_eq!(first.program.slots, ratio >= SLOTS_MARGIN, "{ratio}");
    let again = walk::build(&plan, &codegen, &build, Walk::Auto).unwrap();
    let Choice::Remembered { ratio: kept } = again.choice else {
        panic!("raced again: {:?}", again.choice);
    };
    assert!((kept - ratio).abs() < 1e-3, "{kept} {ratio}");
    assert_eq!(again.program.key(), first.program.key());
    let reference = ReferenceEngine::new(plan.clone());
    let mut compiled = again.program.engine(plan.clone());
    let mut reference = reference;
    let budgets = [1, 1000, 123_457];
    agree_down_a_chain((&mut reference, &mut compiled), budgets, "auto walk");

    // a decision file that does not match its seal is not believed
    let memo = std::fs::read_dir(&build.cache_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.starts_with("e2fleet-walk-") && !name.ends_with(".seal")
        })
        .expect("the decision is in the cache");
    let flipped = if first.program.slots { "list" } else { "slots" };
    std::fs::write(&memo, format!("{flipped} 9.9\n")).unwrap();
    let third = walk::build(&plan, &codegen, &build, Walk::Auto).unwrap();
    assert!(
        matches!(third.choice, Choice::Raced { .. }),
        "{:?}",
        third.choice
    );

    // forced walks, and a board the slot walk does not apply to
    let list = walk::build(&plan, &codegen, &build, Walk::List).unwrap();
    let slots = walk::build(&plan, &codegen, &build, Walk::Slots).unwrap();
    assert!(!list.program.slots && slots.program.slots);
    assert_eq!(
        (list.choice, slots.choice),
        (Choice::Forced, Choice::Forced)
    );
    assert!(
        slots
            .program
            .engine(plan.clone())
            .build_id()
            .ends_with("-slots")
    );
    assert!(
        !list
            .program
            .engine(plan.clone())
            .build_id()
            .ends_with("-slots")
    );
    let small = plan_of("brendan/set2/pieces_10x10.txt");
    let only = walk::build(&small, &codegen, &build, Walk::Auto).unwrap();
    assert_eq!(only.choice, Choice::ListOnly);
    assert!(!only.program.slots);

    // a low-colour board races its mask walk against the same with the slot lookup
    let low = plan_of("brendan/set1/pieces_07x07.txt");
    let raced = walk::build(&low, &codegen, &build, Walk::Auto).unwrap();
    let Choice::Raced { ratio, .. } = raced.choice else {
        panic!("not raced: {:?}", raced.choice);
    };
    assert_eq!(raced.program.slots, ratio >= SLOTS_MARGIN, "{ratio}");
    let mut compiled = raced.program.engine(low.clone());
    let mut reference = ReferenceEngine::new(low.clone());
    let budgets = [1, 1000, 123_457];
    agree_down_a_chain((&mut reference, &mut compiled), budgets, "auto walk, 7x7");
}

/// The race's sample: the same units for the same puzzle, as many as asked, spread over
/// the tree, each a legal prefix at a job's split depth with a subtree below it.
#[test]
fn the_race_samples_job_like_units_reproducibly() {
    use e2fleet_engine::compiled::walk::{default_choices, race_sample};
    for rel in ["bench/bench-hard.json", "e2/official.json"] {
        let plan = plan_of(rel);
        let choices = default_choices(&plan);
        let a = race_sample(&plan, 8, choices, 1);
        assert_eq!(a, race_sample(&plan, 8, choices, 1), "{rel}");
        assert_eq!(race_sample(&plan, 8, 0, 1), [Unit::root()], "{rel}");
        assert_eq!(a.len(), 8, "{rel}");
        // bench-hard's 40 hints leave it two live units at the top (as a job's split
        // would); the real E2's top branches widely
        let distinct: std::collections::HashSet<_> = a.iter().collect();
        let least = if rel.starts_with("e2") { 6 } else { 2 };
        assert!(
            distinct.len() >= least,
            "{rel}: {} distinct",
            distinct.len()
        );
        let mut walker = Walker::new(&plan);
        for u in &a {
            let depth = u.prefix.len();
            assert!(
                depth >= plan.len() / 32 && depth <= plan.len() / 4,
                "{rel}: {depth}"
            );
            let mut children = 0;
            walker
                .enumerate_first(&u.prefix, u.prefix.len() + 1, 1, &mut |_| children += 1)
                .unwrap();
            assert!(children > 0, "{rel}: a sampled unit with nothing below it");
        }
    }
}

fn plan_of(rel: &str) -> Arc<SearchPlan> {
    plan(&load(rel), &OrderSpec::default())
}

#[test]
fn a_requested_stop_matches_a_budget_stop() {
    let puzzle = load("bench/bench-hard.json");
    let plan = plan(&puzzle, &OrderSpec::default());
    let (mut reference, mut compiled) = engines(&plan, 4, "stop");
    let mut polls = 0;
    let stopped = compiled
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

/// A [`Control`] that pauses the walk after poll `pause_at`, holds it paused through
/// the next poll for `hold`, then resumes it (or, with `stop_paused`, stops it while it is
/// still paused), and stops it at poll `stop_at`.
struct Pauses {
    polls: u32,
    pause_at: u32,
    hold: Duration,
    stop_paused: bool,
    stop_at: u32,
    paused: bool,
    counts: Vec<u64>,
}

impl Control for Pauses {
    fn poll(&mut self, committed: u64) -> bool {
        self.polls += 1;
        self.counts.push(committed);
        if self.polls == self.pause_at {
            self.paused = true;
        } else if self.paused {
            // held: the engine was told before this poll and waits here with the caller
            std::thread::sleep(self.hold);
            if self.stop_paused {
                return true;
            }
            self.paused = false;
        }
        self.polls >= self.stop_at
    }

    fn paused(&mut self) -> bool {
        self.paused
    }
}

/// A paused compiled engine (the protocol's `pause` and `resume`) goes on exactly where it
/// was: a walk paused and resumed, or stopped while paused, ends exactly as a budget stop
/// at the same count, and the engine's next unit walks unpaused.
#[test]
fn a_paused_engine_goes_on_exactly_where_it_was() {
    let puzzle = load("bench/bench-hard.json");
    let plan = plan(&puzzle, &OrderSpec::default());
    let (mut reference, mut compiled) = engines(&plan, 4, "pause");
    for stop_paused in [false, true] {
        let mut control = Pauses {
            polls: 0,
            pause_at: 2,
            hold: Duration::from_millis(300),
            stop_paused,
            stop_at: 6,
            paused: false,
            counts: Vec::new(),
        };
        let stopped = compiled
            .run(&Unit::root(), opts(None), &mut control)
            .unwrap();
        assert_eq!(stopped.stop, Some(StopReason::Requested));
        let polls = if stop_paused { 3 } else { 6 };
        assert_eq!(control.counts.len(), polls, "{:?}", control.counts);
        // a stop is taken at the engine's next countdown check, which may be past what
        // was last read
        assert!(stopped.committed >= control.counts[polls - 1]);
        let same = reference
            .run(&Unit::root(), opts(Some(stopped.committed)), &mut NoControl)
            .unwrap();
        assert_eq!(same.cursor, stopped.cursor);
        assert_eq!(same.nodes_by_depth, stopped.nodes_by_depth);
        // the same process, its next unit: not held by the pause of the last
        let next = compiled
            .run(&Unit::root(), opts(Some(20_000)), &mut NoControl)
            .unwrap();
        let want = reference
            .run(&Unit::root(), opts(Some(20_000)), &mut NoControl)
            .unwrap();
        assert_eq!(next, want);
    }
}

#[test]
fn the_cache_is_hit_and_keyed_by_flags() {
    let puzzle = load("brendan/set1/pieces_04x04.txt");
    let plan = plan(&puzzle, &OrderSpec::default());
    let build = options("cache");
    let first = CompiledProgram::build(&plan, &CodegenOptions::default(), &build).unwrap();
    let second = CompiledProgram::build(&plan, &CodegenOptions::default(), &build).unwrap();
    assert!(
        second.cached,
        "a second build of the same key compiles nothing"
    );
    assert_eq!(first.key(), second.key());
    let generic = BuildOptions {
        target_cpu: None,
        ..build.clone()
    };
    let third = CompiledProgram::build(&plan, &CodegenOptions::default(), &generic).unwrap();
    assert_ne!(third.key(), first.key(), "flags are part of the key");
}

#[test]
fn concurrent_builders_of_one_key_both_succeed() {
    let puzzle = load("brendan/set1/pieces_05x05.txt");
    let plan = plan(&puzzle, &OrderSpec::default());
    let build = options("concurrent");
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .map(|_| s.spawn(|| CompiledProgram::build(&plan, &CodegenOptions::default(), &build)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in results {
        let program = r.unwrap();
        let result = program
            .engine(plan.clone())
            .run(&Unit::root(), opts(None), &mut NoControl)
            .unwrap();
        assert_eq!(result.committed, 113_211);
    }
}

#[test]
fn a_corrupted_cache_entry_is_rebuilt() {
    let puzzle = load("brendan/set1/pieces_04x04.txt");
    let plan = plan(&puzzle, &OrderSpec::default());
    let build = options("corrupt");
    let program = CompiledProgram::build(&plan, &CodegenOptions::default(), &build).unwrap();
    let bytes = std::fs::read(program.path()).unwrap();
    std::fs::write(program.path(), &bytes[..bytes.len() / 3]).unwrap();
    let again = CompiledProgram::build(&plan, &CodegenOptions::default(), &build).unwrap();
    assert!(!again.cached, "the broken binary was replaced");
    let r = again
        .engine(plan.clone())
        .run(&Unit::root(), opts(None), &mut NoControl)
        .unwrap();
    assert_eq!(r.committed, 4_470);
}

#[test]
fn rustc_missing_or_failing_is_a_clear_error() {
    let puzzle = load("brendan/set1/pieces_03x03.txt");
    let plan = plan(&puzzle, &OrderSpec::default());
    let missing = BuildOptions {
        rustc: "/nonexistent/rustc".into(),
        ..options("missing")
    };
    let err = CompiledProgram::build(&plan, &CodegenOptions::default(), &missing).unwrap_err();
    assert!(matches!(err, CompileError::RustcMissing { .. }), "{err}");
    // a "rustc" that answers -vV but fails to compile, with a message on stderr
    let dir = cache_dir("failing");
    let fake = dir.join("fake-rustc");
    std::fs::write(
        &fake,
        "#!/bin/sh\nif [ \"$1\" = -vV ]; then echo 'rustc 0.0.0-fake'; exit 0; fi\necho 'error: out of cheese' >&2\nexit 1\n",
    )
    .unwrap();
    make_executable(&fake);
    let failing = BuildOptions {
        rustc: fake,
        ..options("failing")
    };
    let err = CompiledProgram::build(&plan, &CodegenOptions::default(), &failing).unwrap_err();
    match err {
        CompileError::RustcFailed { stderr, .. } => assert!(stderr.contains("out of cheese")),
        other => panic!("expected RustcFailed, got {other}"),
    }
    // and one that hangs is killed at the timeout
    let slow = dir.join("slow-rustc");
    std::fs::write(
        &slow,
        "#!/bin/sh\nif [ \"$1\" = -vV ]; then echo 'rustc slow'; exit 0; fi\nexec sleep 30\n",
    )
    .unwrap();
    make_executable(&slow);
    let hanging = BuildOptions {
        rustc: slow,
        timeout: Duration::from_millis(300),
        ..options("slow")
    };
    let err = CompiledProgram::build(&plan, &CodegenOptions::default(), &hanging).unwrap_err();
    assert!(matches!(err, CompileError::Timeout(_)), "{err}");
}

/// A 4x4 board's program in the cache `cache`, replaced by one that greets correctly and
/// then dies on the first unit it is sent (sealed as the cache would seal a build of its
/// own, so it is started).
fn crashing_program(cache: &str) -> (Arc<SearchPlan>, CompiledProgram) {
    let puzzle = load("brendan/set1/pieces_04x04.txt");
    let plan = plan(&puzzle, &OrderSpec::default());
    let program =
        CompiledProgram::build(&plan, &CodegenOptions::default(), &options(cache)).unwrap();
    let greeting = format!(
        "e2fleet-engine {} {} {}",
        e2fleet_engine::compiled::codegen::PROTOCOL_VERSION,
        program.key(),
        plan.len()
    );
    replace_sealed(
        &program,
        &format!("#!/bin/sh\necho '{greeting}'\nread line\nkill -SEGV $$\n"),
    );
    (plan, program)
}

#[test]
fn a_crashing_engine_process_is_an_error_not_a_hang() {
    let (plan, program) = crashing_program("crash");
    let mut engine = program.engine(plan.clone());
    let err = engine
        .run(&Unit::root(), opts(None), &mut NoControl)
        .unwrap_err();
    assert!(matches!(err, EngineError::Failed(_)), "{err}");
    assert!(err.to_string().contains("exited"), "{err}");
}

#[test]
fn illegal_units_never_reach_the_process() {
    let puzzle = load("brendan/set1/pieces_04x04.txt");
    let plan = plan(&puzzle, &OrderSpec::default());
    let (_, mut compiled) = engines(&plan, 4, "illegal");
    let bad = Unit::prefix(vec![e2fleet_engine::Placement::new(5, 0, 0)]);
    let err = compiled.run(&bad, opts(None), &mut NoControl).unwrap_err();
    assert!(matches!(err, EngineError::Unit(_)), "{err}");
    // the engine still works afterwards
    assert_eq!(
        compiled
            .run(&Unit::root(), opts(None), &mut NoControl)
            .unwrap()
            .committed,
        4_470
    );
}

/// Replaces a cached build with `script`, sealed with the cache's own key.
fn replace_sealed(program: &CompiledProgram, script: &str) {
    let dir = program.path().parent().unwrap();
    let tmp = dir.join("replacement");
    std::fs::write(&tmp, script).unwrap();
    make_executable(&tmp);
    Cache::open(dir)
        .unwrap()
        .seal(&tmp, program.path())
        .unwrap();
    std::fs::rename(&tmp, program.path()).unwrap();
}

#[test]
fn a_replaced_cached_engine_is_rebuilt_never_run() {
    use sha2::{Digest, Sha256};
    let puzzle = load("brendan/set1/pieces_04x04.txt");
    let plan = plan(&puzzle, &OrderSpec::default());
    let build = options("replaced");
    let program = CompiledProgram::build(&plan, &CodegenOptions::default(), &build).unwrap();
    // another user's program in its place: it greets correctly, and the attacker also
    // writes a plain checksum beside it (what the cache trusted before)
    let marker = build.cache_dir.join("the-replacement-ran");
    let greeting = format!(
        "e2fleet-engine {} {} {}",
        e2fleet_engine::compiled::codegen::PROTOCOL_VERSION,
        program.key(),
        plan.len()
    );
    let script = format!(
        "#!/bin/sh\ntouch '{}'\necho '{greeting}'\nread line\n",
        marker.display()
    );
    std::fs::write(program.path(), &script).unwrap();
    make_executable(program.path());
    let sum: String = Sha256::digest(script.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut plain = program.path().clone().into_os_string();
    plain.push(".sha256");
    std::fs::write(plain, sum).unwrap();
    // an engine made before the replacement checks the seal before it starts a process
    let err = program
        .engine(plan.clone())
        .run(&Unit::root(), opts(None), &mut NoControl)
        .unwrap_err();
    assert!(err.to_string().contains("never run"), "{err}");
    assert!(!marker.exists(), "the replaced binary was run");
    // a new build finds no sealed binary and builds a fresh one
    std::fs::write(program.path(), &script).unwrap();
    make_executable(program.path());
    let again = CompiledProgram::build(&plan, &CodegenOptions::default(), &build).unwrap();
    assert!(!again.cached, "the replaced binary was rebuilt");
    let r = again
        .engine(plan.clone())
        .run(&Unit::root(), opts(None), &mut NoControl)
        .unwrap();
    assert_eq!(r.committed, 4_470);
    assert!(!marker.exists(), "the replaced binary was run");
}

#[test]
fn a_cache_folder_others_can_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let puzzle = load("brendan/set1/pieces_03x03.txt");
    let plan = plan(&puzzle, &OrderSpec::default());
    let shared = options("shared");
    std::fs::set_permissions(&shared.cache_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = CompiledProgram::build(&plan, &CodegenOptions::default(), &shared).unwrap_err();
    assert!(
        err.to_string().contains("can be written by other users"),
        "{err}"
    );
    // nor is a link to a folder (which could be pointed elsewhere later)
    let private = options("private-target");
    let link = private.cache_dir.with_extension("link");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&private.cache_dir, &link).unwrap();
    let linked = BuildOptions {
        cache_dir: link,
        ..private.clone()
    };
    let err = CompiledProgram::build(&plan, &CodegenOptions::default(), &linked).unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
    // a folder the cache creates itself is private, and its key is the user's alone
    let fresh = BuildOptions {
        cache_dir: private.cache_dir.join("made-here"),
        ..private
    };
    CompiledProgram::build(&plan, &CodegenOptions::default(), &fresh).unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&fresh.cache_dir), 0o700);
    assert_eq!(mode(&fresh.cache_dir.join("cache.key")), 0o600);
}

#[test]
fn a_silent_engine_is_killed_not_waited_for() {
    let puzzle = load("brendan/set1/pieces_04x04.txt");
    let plan = plan(&puzzle, &OrderSpec::default());
    let hang = CodegenOptions {
        fault_hang: true,
        ..CodegenOptions::default()
    };
    let build = BuildOptions {
        engine_silence: Duration::from_secs(1),
        ..options("hang")
    };
    // it greets, so it builds; then it never answers a unit
    let program = CompiledProgram::build(&plan, &hang, &build).unwrap();
    let started = std::time::Instant::now();
    let err = program
        .engine(plan.clone())
        .run(&Unit::root(), opts(None), &mut NoControl)
        .unwrap_err();
    assert!(matches!(err, EngineError::Failed(_)), "{err}");
    assert!(err.to_string().contains("said nothing"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn rustc_runs_under_a_memory_limit() {
    let puzzle = load("brendan/set1/pieces_04x04.txt");
    let plan = plan(&puzzle, &OrderSpec::default());
    let starved = BuildOptions {
        rustc_memory: Some(64 << 20),
        timeout: Duration::from_secs(60),
        ..options("starved")
    };
    let err = CompiledProgram::build(&plan, &CodegenOptions::default(), &starved).unwrap_err();
    assert!(matches!(err, CompileError::RustcFailed { .. }), "{err}");
}

#[test]
fn plans_too_large_to_compile_are_left_to_the_reference_engine() {
    use e2fleet_engine::compiled::MAX_COMPILED_ENTRIES;
    let mut rng = Rng::new(3);
    let big = e2fleet_engine::testing::checkerboard_puzzle(&mut rng, 12, 90);
    let plan = Arc::new(SearchPlan::new(&big, &FillOrder::row_major(&big)));
    assert!(plan.offsets.len() + plan.candidates.len() > MAX_COMPILED_ENTRIES);
    let err =
        CompiledProgram::build(&plan, &CodegenOptions::default(), &options("big")).unwrap_err();
    assert!(matches!(err, CompileError::TooLarge(_)), "{err}");
    // and nothing was written: no source, no rustc run
    let written = std::fs::read_dir(options("big").cache_dir).unwrap().count();
    assert_eq!(written, 0);
}

fn make_executable(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_zero_budget_is_refused_by_both_engines() {
    let puzzle = load("brendan/set1/pieces_04x04.txt");
    let plan = plan(&puzzle, &OrderSpec::default());
    let (mut reference, mut compiled) = engines(&plan, 4, "zero");
    for engine in [&mut reference as &mut dyn Engine, compiled.as_mut()] {
        let err = engine
            .run(&Unit::root(), opts(Some(0)), &mut NoControl)
            .unwrap_err();
        assert!(err.to_string().contains("at least 1"), "{err}");
    }
}

/// A feed of units, each with its budget and the poll at which its control asks for a
/// stop (none: never); keeps every answer by tag.
struct Queue {
    todo: Vec<(Unit, Option<u64>, Option<u32>)>,
    next: usize,
    answers: Vec<Vec<Result<UnitResult, EngineError>>>,
}

impl Queue {
    fn new(todo: Vec<(Unit, Option<u64>, Option<u32>)>) -> Queue {
        let n = todo.len();
        Queue {
            todo,
            next: 0,
            answers: (0..n).map(|_| Vec::new()).collect(),
        }
    }
}

impl<'a> Feed<'a> for Queue {
    fn next(&mut self) -> Option<Work<'a>> {
        let (unit, budget, stop_at) = self.todo.get(self.next)?.clone();
        self.next += 1;
        let mut polls = 0;
        Some(Work {
            tag: self.next - 1,
            unit,
            options: opts(budget),
            control: Box::new(move |_: u64| {
                polls += 1;
                stop_at.is_some_and(|at| polls >= at)
            }),
        })
    }
    fn done(&mut self, work: Work<'a>, result: Result<UnitResult, EngineError>, _: f64) {
        self.answers[work.tag].push(result);
    }
}

/// Units of a few hundred to a few hundred thousand nodes through `run_feed`, which sends
/// short ones ahead of their turn: each is the reference walker's to the digit, and a stop
/// asked for one unit stops that unit only (a `stop` names its unit), exactly as a budget
/// stop at the same count. Every 50th unit is the whole tree, stopped at its second poll
/// while units wait behind it in the process: it must stop (and they must not); a short
/// unit may end before its stop arrives (the stop then names a unit that has ended).
#[test]
fn units_sent_ahead_walk_exactly_and_a_stop_stops_only_its_own() {
    let plan = plan_of("brendan/set1/pieces_06x06.txt");
    let (mut reference, mut compiled) = engines(&plan, 6, "ahead");
    let mut prefixes = Vec::new();
    Walker::new(&plan)
        .enumerate_first(&[], 6, 400, &mut |p| prefixes.push(p.to_vec()))
        .unwrap();
    let mut rng = Rng::new(30);
    let todo: Vec<(Unit, Option<u64>, Option<u32>)> = prefixes
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            if i % 50 == 25 {
                return (Unit::root(), None, Some(2));
            }
            let budget = (rng.below(3) == 0).then(|| 1 + rng.below(20_000) as u64);
            let stop_at = (rng.below(8) == 0).then(|| 1 + rng.below(3) as u32);
            (Unit::prefix(p), budget, stop_at)
        })
        .collect();
    let mut feed = Queue::new(todo.clone());
    let first = feed.next().unwrap();
    compiled.run_feed(first, &mut feed);
    for (i, (unit, budget, stop_at)) in todo.iter().enumerate() {
        assert_eq!(feed.answers[i].len(), 1, "unit {i}: one answer");
        let got = feed.answers[i][0].as_ref().unwrap();
        if unit.prefix.is_empty() {
            assert_eq!(got.stop, Some(StopReason::Requested), "unit {i}: the tree");
        }
        if got.stop == Some(StopReason::Requested) {
            assert!(
                stop_at.is_some(),
                "unit {i} stopped though its control never asked"
            );
            let same = reference
                .run(unit, opts(Some(got.committed)), &mut NoControl)
                .unwrap();
            assert_eq!(got.cursor, same.cursor, "unit {i}");
            assert_eq!(got.nodes_by_depth, same.nodes_by_depth, "unit {i}");
        } else {
            let want = reference.run(unit, opts(*budget), &mut NoControl).unwrap();
            assert_eq!(got, &want, "unit {i}, budget {budget:?}");
        }
    }
}

/// The protocol's `stop <n>`: it stops unit `n` while it runs and nothing once `n` has
/// ended, however it crosses the results in the pipes.
#[test]
fn a_stop_names_its_unit() {
    use std::io::{BufRead, BufReader, Write};
    let plan = plan_of("bench/bench-hard.json");
    let program = CompiledProgram::build(
        &plan,
        &CodegenOptions {
            poll_interval: 1000,
            ..CodegenOptions::default()
        },
        &options("stop-names"),
    )
    .unwrap();
    let mut child = std::process::Command::new(program.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut to = child.stdin.take().unwrap();
    let mut from = BufReader::new(child.stdout.take().unwrap());
    let mut hello = String::new();
    from.read_line(&mut hello).unwrap();
    assert!(hello.starts_with("e2fleet-engine 3 "), "{hello}");
    let mut result = |to: &mut std::process::ChildStdin, send: &str| {
        writeln!(to, "{send}").unwrap();
        to.flush().unwrap();
        let mut stop = String::new();
        loop {
            let mut line = String::new();
            assert!(from.read_line(&mut line).unwrap() > 0, "the engine ended");
            if line.starts_with("result ") {
                stop = line.split(' ').nth(1).unwrap().to_string();
            }
            if line.starts_with("end") {
                return stop;
            }
        }
    };
    // unit 1: walked to its budget; a stop naming it after it ended is ignored by unit 2
    assert_eq!(result(&mut to, "run 5000 1 - -"), "budget");
    writeln!(to, "stop 1").unwrap();
    assert_eq!(result(&mut to, "run 5000 1 - -"), "budget");
    // unit 3 runs with no budget until a stop that names it
    writeln!(to, "stop 3").unwrap();
    assert_eq!(result(&mut to, "run 0 1 - -"), "requested");
    drop(to);
    let _ = child.wait();
}

/// A process that dies on every unit: every unit of a feed is answered once, with an
/// error, whether it was walking or waiting behind another in the process, and the feed
/// ends.
#[test]
fn units_waiting_in_a_process_that_dies_are_answered_once() {
    let (plan, program) = crashing_program("ahead-crash");
    let mut engine = program.engine(plan.clone());
    let todo: Vec<(Unit, Option<u64>, Option<u32>)> =
        (0..5).map(|_| (Unit::root(), Some(100), None)).collect();
    let mut feed = Queue::new(todo);
    let first = feed.next().unwrap();
    engine.run_feed(first, &mut feed);
    for (i, answers) in feed.answers.iter().enumerate() {
        assert_eq!(answers.len(), 1, "unit {i}");
        assert!(
            matches!(answers[0], Err(EngineError::Failed(_))),
            "unit {i}"
        );
    }
}
