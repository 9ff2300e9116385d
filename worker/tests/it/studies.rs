//! An order study on a real fleet of processes: the coordinator, a worker that runs the
//! probes on its engine threads, and the operator's `study --wait --json` and `submit
//! --order study:ID`.

use std::path::Path;

use e2fleet_engine::formats::{LoadOptions, load_file};
use e2fleet_engine::testing::count_tree;

use crate::harness::{admin, puzzle_path, serve, worker};

fn exact(puzzle: &Path, order: &str) -> f64 {
    let puzzle = load_file(puzzle, &LoadOptions::default()).unwrap();
    count_tree(&puzzle, &order.parse().unwrap()) as f64
}

#[test]
fn a_study_runs_on_a_worker_and_its_winner_is_submitted_in_one_step() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, url) = serve(&dir.path().join("c.db"), "127.0.0.1:0", &[]);
    let _w = worker(
        &url,
        &dir.path().join("w"),
        "prober",
        &["--engine", "reference"],
    );
    let five = puzzle_path("brendan/set1/pieces_05x05.txt");
    let five_text = five.to_str().unwrap();
    let doc = admin(
        &url,
        &[
            "study",
            five_text,
            "--order",
            "spiral:tl",
            "--all-scanlines",
            "--particles",
            "256",
            "--rounds",
            "8",
            "--wait",
        ],
    );
    let orders = doc["orders"].as_array().unwrap();
    assert_eq!(orders.len(), 9, "{doc}");
    assert!(["converged", "exhausted"].contains(&doc["state"].as_str().unwrap()));
    let mut last = 0.0;
    for o in orders {
        let estimate = o["estimate"].as_f64().unwrap();
        assert!(estimate >= last, "best first: {doc}");
        last = estimate;
        let truth = exact(&five, o["order"].as_str().unwrap());
        assert!((estimate / truth - 1.0).abs() < 0.2, "{o} against {truth}");
        if let (Some(low), Some(high)) = (o["low"].as_f64(), o["high"].as_f64()) {
            assert!(low <= estimate && estimate <= high, "{o}");
        }
    }
    let study = doc["study"].as_str().unwrap();
    let job = admin(
        &url,
        &[
            "submit",
            five_text,
            "--order",
            &format!("study:{study}"),
            "--units",
            "10",
        ],
    );
    let status = admin(&url, &["job", job["job_id"].as_str().unwrap()]);
    assert_eq!(status["order"], orders[0]["order"], "{status}");
    // and the list of studies has it
    let listed = admin(&url, &["study-status", study]);
    assert_eq!(listed["study"], study);
}
