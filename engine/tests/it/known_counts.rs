//! Exact counts published by the community or measured and cross-checked (FORMATS.md,
//! COUNTING.md). Any engine change that moves one of these is a bug.

use e2fleet_engine::plan::SearchPlan;
use e2fleet_engine::search::Walker;
use e2fleet_engine::verify::verify_board;
use e2fleet_engine::{FillOrder, OrderSpec};

use crate::{load, whole_tree};

fn check(rel: &str, nodes: u64, solutions: u64) {
    let puzzle = load(rel);
    let r = whole_tree(&puzzle, &OrderSpec::default());
    assert_eq!(
        (r.committed, r.solutions_count),
        (nodes, solutions),
        "{rel}"
    );
    assert_eq!(r.nodes_by_depth.iter().sum::<u64>(), r.committed);
    assert_eq!(*r.nodes_by_depth.last().unwrap(), solutions);
    for s in &r.solutions {
        verify_board(&puzzle, s, true).expect("every reported solution verifies");
    }
}

#[test]
fn brendan_set1_small_boards() {
    check("brendan/set1/pieces_03x03.txt", 132, 16);
    check("brendan/set1/pieces_04x04.txt", 4_470, 36);
    check("brendan/set1/pieces_05x05.txt", 113_211, 16);
}

#[test]
fn brendan_set2_small_boards() {
    check("brendan/set2/pieces_03x03.txt", 116, 8);
    check("brendan/set2/pieces_04x04.txt", 4_735, 48);
    check("brendan/set2/pieces_05x05.txt", 94_459, 4);
}

#[test]
fn bench_easy_with_rows_pinned() {
    check("bench/bench-easy-rows0-7.json", 308_435, 1);
    check("bench/bench-easy-rows0-5.json", 6_427_237, 1);
}

#[test]
fn brendan_set1_6x6_whole_tree() {
    check("brendan/set1/pieces_06x06.txt", 69_284_103, 260);
}

/// Fillings of the top-left 3x3 block of the real set: 2,633,221, or 2,582,369 with the
/// centre clue's piece on the board (FORMATS.md census numbers).
#[test]
fn real_set_top_left_3x3_census() {
    let block = [0usize, 1, 2, 16, 17, 18, 32, 33, 34];
    for (rel, expected) in [
        ("e2/e2pieces.txt", 2_633_221u64),
        ("e2/centre-clue.json", 2_582_369),
    ] {
        let puzzle = load(rel);
        let hints: Vec<usize> = puzzle.hints().iter().map(|h| h.pos as usize).collect();
        let mut cells = block.to_vec();
        cells.extend((0..256).filter(|c| !block.contains(c) && !hints.contains(c)));
        let order = FillOrder::new(&puzzle, &OrderSpec::Cells(cells)).unwrap();
        let plan = SearchPlan::new(&puzzle, &order);
        let mut count = 0u64;
        let nodes = Walker::new(&plan)
            .enumerate(&[], 9, &mut |_| count += 1)
            .unwrap();
        assert_eq!(count, expected, "{rel}");
        assert_eq!(nodes[8], expected);
    }
}

/// A 2x2 corner block of the real set has 1,312 fillings.
#[test]
fn real_set_corner_2x2_census() {
    let puzzle = load("e2/e2pieces.txt");
    let block = [0usize, 1, 16, 17];
    let mut cells = block.to_vec();
    cells.extend((0..256).filter(|c| !block.contains(c)));
    let order = FillOrder::new(&puzzle, &OrderSpec::Cells(cells)).unwrap();
    let plan = SearchPlan::new(&puzzle, &order);
    let nodes = Walker::new(&plan).enumerate(&[], 4, &mut |_| {}).unwrap();
    assert_eq!(nodes[3], 1_312);
}

/// `enumerate_first` hands over the first fillings in `enumerate`'s order and says whether
/// they were all: the real set's 3x3 corner block (2,633,221 fillings) stops soon after
/// the first 1,000 (the walk polls every 2^20 nodes); Brendan 5x5 at depth 3 has 62, all of them.
#[test]
fn the_first_prefixes_are_the_enumeration_s_first() {
    let puzzle = load("brendan/set1/pieces_05x05.txt");
    let plan = SearchPlan::new(
        &puzzle,
        &FillOrder::new(&puzzle, &OrderSpec::default()).unwrap(),
    );
    let mut all = Vec::new();
    Walker::new(&plan)
        .enumerate(&[], 3, &mut |p| all.push(p.to_vec()))
        .unwrap();
    assert_eq!(all.len(), 62);
    for (max, complete) in [(10, false), (61, false), (62, true), (1000, true)] {
        let mut first = Vec::new();
        let got = Walker::new(&plan)
            .enumerate_first(&[], 3, max, &mut |p| first.push(p.to_vec()))
            .unwrap();
        assert_eq!(got, complete, "max {max}");
        assert_eq!(first, all[..max.min(62)], "max {max}");
    }

    let puzzle = load("e2/e2pieces.txt");
    let block = [0usize, 1, 2, 16, 17, 18, 32, 33, 34];
    let mut cells = block.to_vec();
    cells.extend((0..256).filter(|c| !block.contains(c)));
    let plan = SearchPlan::new(
        &puzzle,
        &FillOrder::new(&puzzle, &OrderSpec::Cells(cells)).unwrap(),
    );
    let mut first = 0;
    let complete = Walker::new(&plan)
        .enumerate_first(&[], 9, 1_000, &mut |_| first += 1)
        .unwrap();
    assert!(!complete);
    assert_eq!(first, 1_000);
}
