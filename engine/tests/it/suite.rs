//! The built-in verification suite: its golden expectations are what the reference engine
//! produces, and the whole-tree units match the published counts. Regenerate with
//! `E2FLEET_REGEN_SUITE=1 cargo test -p e2fleet-engine --test it suite` and review the diff.

use e2fleet_engine::search::{NoControl, RunOptions};
use e2fleet_engine::suite::{SuiteExpected, default_suite, resolve};

#[test]
fn the_default_suite_matches_the_reference_engine_and_published_counts() {
    let mut suite = default_suite();
    let regen = std::env::var("E2FLEET_REGEN_SUITE").is_ok();
    for u in suite.iter_mut() {
        let r = resolve(u).unwrap();
        let result = e2fleet_engine::search::Walker::new(&r.plan)
            .run(
                &r.unit,
                RunOptions {
                    budget: u.budget,
                    max_solutions: 64,
                },
                &mut NoControl,
            )
            .unwrap();
        let got = SuiteExpected::of(&result);
        if regen {
            u.expected = Some(got);
            continue;
        }
        let expected = u
            .expected
            .as_ref()
            .unwrap_or_else(|| panic!("{} has no expected result", u.name));
        assert_eq!(expected.disagreement(&result), None, "{}", u.name);
    }
    let published = [
        ("brendan1-5x5-whole", 113_211u64, 16u64),
        ("brendan2-5x5-whole", 94_459, 4),
        ("easy-rows0-7-whole", 308_435, 1),
        ("easy-rows0-5-whole", 6_427_237, 1),
        ("brendan1-4x4-comb", 0, 36),
    ];
    for (name, nodes, solutions) in published {
        let e = suite
            .iter()
            .find(|u| u.name == name)
            .unwrap()
            .expected
            .clone()
            .unwrap();
        if nodes > 0 {
            assert_eq!(e.committed, nodes, "{name}");
        }
        assert_eq!(
            e.solutions_count, solutions,
            "{name} (solutions do not depend on the order)"
        );
    }
    if regen {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("suite/default.json");
        let mut text = String::from("[\n");
        for (i, u) in suite.iter().enumerate() {
            text.push_str("  ");
            text.push_str(&serde_json::to_string(u).unwrap());
            text.push_str(if i + 1 < suite.len() { ",\n" } else { "\n" });
        }
        text.push_str("]\n");
        std::fs::write(path, text).unwrap();
    }
}
