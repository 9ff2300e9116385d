//! The generated source of a few boards held to a digest: a change to the code generator
//! that is meant to be a refactor must leave every emitted program byte for byte the
//! same. A change meant to alter the programs updates the digests below (the failure
//! prints the new ones) and says why in its commit.

use e2fleet_engine::compiled::CodegenOptions;
use e2fleet_engine::compiled::codegen::{Prune, emit};
use e2fleet_engine::plan::SearchPlan;
use e2fleet_engine::{FillOrder, OrderSpec};
use sha2::{Digest, Sha256};

use crate::load;

/// (board, what the options exercise, options); each program is emitted with the build
/// key "digest".
fn cases() -> Vec<(&'static str, &'static str, CodegenOptions)> {
    let slots = CodegenOptions {
        slots: true,
        ..CodegenOptions::default()
    };
    vec![
        // one-word mask walk, and with the slot lookup
        (
            "brendan/set1/pieces_07x07.txt",
            "default",
            CodegenOptions::default(),
        ),
        ("brendan/set1/pieces_07x07.txt", "slots", slots.clone()),
        // two candidates of one piece in a bucket
        ("brendan/set2/pieces_08x08.txt", "slots", slots.clone()),
        // two-word masks: split where the inner pieces start, windows
        ("brendan/set1/pieces_09x09.txt", "slots", slots.clone()),
        (
            "brendan/set2/pieces_10x10.txt",
            "default",
            CodegenOptions::default(),
        ),
        // an E2 clue puzzle (at most 128 pieces)
        ("clues/e2-clue-clue1.json", "slots", slots.clone()),
        // 16x16: the list walk with pruned levels, the slot walk
        (
            "bench/bench-easy.json",
            "default",
            CodegenOptions::default(),
        ),
        ("bench/bench-easy.json", "slots", slots.clone()),
        ("e2/official.json", "default", CodegenOptions::default()),
        (
            "bench/bench-hard.json",
            "group 1, no pruning, faults",
            CodegenOptions {
                group: Some(1),
                prune: Some(Prune::OFF),
                fault_depth: Some(7),
                ..CodegenOptions::default()
            },
        ),
        (
            "brendan/set1/pieces_06x06.txt",
            "hang",
            CodegenOptions {
                fault_hang: true,
                poll_interval: 1000,
                ..CodegenOptions::default()
            },
        ),
    ]
}

/// One per case of [`cases`], in order.
const DIGESTS: &[&str] = &[
    "6e77f74d6577a8904dbdb17f",
    "03abc87c620eb7a3bb183b45",
    "dc027633a8fc65c2cef85804",
    "17b9ec04b952ec46cb79ab33",
    "c6a7a73f65d95fd9ea03036a",
    "9969e31643a958eb8caf9ed0",
    "8bcb3ee138db90431f3d5d37",
    "20196f29f49362edb108d349",
    "50f2de2567a41c58e56b812d",
    "7fcf8cf377a83c776d8c6016",
    "cdfcaa0dd8155d6e06cdb15a",
];

#[test]
fn generated_programs_are_byte_for_byte_the_same() {
    let mut found = Vec::new();
    for (rel, what, options) in cases() {
        let puzzle = load(rel);
        let order = FillOrder::new(&puzzle, &OrderSpec::default()).expect("order");
        let plan = SearchPlan::new(&puzzle, &order);
        let source = emit(&plan, &options, "digest");
        let digest: String = Sha256::digest(source.as_bytes())[..12]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        found.push((rel, what, digest));
    }
    let now: Vec<&str> = found.iter().map(|f| f.2.as_str()).collect();
    assert_eq!(
        now,
        DIGESTS,
        "the generated programs changed:\n{}",
        found
            .iter()
            .map(|(rel, what, d)| format!("    \"{d}\", // {rel}, {what}\n"))
            .collect::<String>()
    );
}
