//! Property tests: the reference engine against the brute force on random planted
//! puzzles (up to 4x4 and 5x3, with and without hints, with symmetric pieces), in every
//! kind of fill order.

use e2fleet_engine::FillOrder;
use e2fleet_engine::testing::{Rng, brute_force, order_of_kind, random_puzzle};
use e2fleet_engine::verify::verify_board;
use proptest::prelude::*;

use crate::whole_tree;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn reference_matches_brute_force(
        seed in any::<u64>(),
        size in prop::sample::select(vec![(2usize, 2usize), (3, 2), (3, 3), (4, 3), (3, 4), (4, 4), (5, 3), (3, 5), (2, 5)]),
        rim in 1u8..4,
        inner in 1u8..5,
        hints in 0usize..4,
        kind in 0usize..13,
    ) {
        let mut rng = Rng::new(seed);
        let (puzzle, solution) = random_puzzle(&mut rng, size.0, size.1, rim, inner, hints);
        let spec = order_of_kind(&puzzle, kind, &mut rng);
        let order = FillOrder::new(&puzzle, &spec).unwrap();
        let (nodes, solutions) = brute_force(&puzzle, order.cells());
        let result = whole_tree(&puzzle, &spec);
        prop_assert_eq!(&result.nodes_by_depth, &nodes);
        prop_assert_eq!(result.solutions_count, solutions);
        prop_assert!(solutions >= 1, "the planted solution is always found");
        verify_board(&puzzle, &solution, true).unwrap();
        for s in &result.solutions {
            verify_board(&puzzle, s, true).unwrap();
        }
    }
}

#[test]
fn plans_past_the_size_limits_are_refused_before_they_are_built() {
    use e2fleet_engine::plan::{MAX_TABLE_ENTRIES, SearchPlan};
    use e2fleet_engine::testing::{Rng, checkerboard_puzzle};
    use e2fleet_engine::{FillOrder, SearchSpec};
    let mut rng = Rng::new(7);
    let huge = checkerboard_puzzle(&mut rng, 32, 200);
    let err = SearchPlan::try_new(&huge, &FillOrder::row_major(&huge)).unwrap_err();
    assert!(err.size > MAX_TABLE_ENTRIES, "{err}");
    assert!(err.to_string().contains("too large"), "{err}");
    let json = e2fleet_engine::formats::to_site_json(&huge);
    let err = SearchSpec::from_site_json(&json, "row-major")
        .err()
        .unwrap();
    assert!(err.to_string().contains("too large"), "{err}");
    // the real Eternity II, hard boards and small ones are far inside the limits
    for rel in [
        "e2/official.json",
        "bench/bench-hard.json",
        "brendan/set1/pieces_10x10.txt",
    ] {
        let p = crate::load(rel);
        let plan = SearchPlan::try_new(&p, &FillOrder::row_major(&p)).unwrap();
        assert!(
            plan.offsets.len() * 16 < MAX_TABLE_ENTRIES,
            "{rel}: {}",
            plan.offsets.len()
        );
    }
}
