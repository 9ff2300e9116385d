//! # e2fleet-engine
//!
//! The trusted core of e2fleet: the puzzle model, file formats, fill orders, the reference
//! search and exact node accounting, as defined by `COUNTING.md`. It knows nothing of the
//! network or of storage; the coordinator and the worker both build on it.
//!
//! # Layout
//! - [`board`]: colours, sides, rotations, placements and cell geometry.
//! - [`model`]: the validated [`Puzzle`] (with [`board`]'s primitives re-exported).
//! - [`validate`]: the checks behind [`Puzzle::new`], with specific errors.
//! - [`formats`]: loaders for every community format (site JSON, 16-bit CSV, e2pieces
//!   text, Brendan Owen's sets, `.puz`, Blackwood lists), format detection and the site
//!   JSON writer.
//! - [`order`]: fill orders (scans from any corner, comb orders, explicit lists).
//! - [`plan`]: the per-(puzzle, order) search tables both engines use.
//! - [`spec`]: a puzzle text + order spec -> puzzle, fill order and plan, in one call.
//! - [`search`]: the reference walker: units, budgets, cursors, continuations, prefix
//!   enumeration and continuation splitting; tree estimates (`search::estimate`).
//! - [`unit`](mod@unit): work units and their exact results.
//! - [`verify`]: the independent board verifier and the score.
//! - [`certificate`]: a finished job as a file anyone can audit (format, Merkle root,
//!   the tiling check, re-run comparison).
//! - [`suite`]: verification suites (fixed units with golden exact results).
//! - [`compiled`]: the compiled engine: code generator, local rustc build and cache, child process.
//! - [`lanes`]: the lane engine: a branch-free walk of several units at once in one thread
//!   (two on boards of at most 128 pieces and 16 colours, four on 16x16 boards).
//! - [`lanes_race`]: which of the lane and compiled engines `auto` runs on a board,
//!   raced on its own tree.
//! - [`engine`]: one interface over every engine kind.
//! - [`testing`]: random planted puzzles and the brute-force oracle for tests.
//!
//! # Example
//! ```
//! use e2fleet_engine::{formats, order::FillOrder, plan::SearchPlan, search::{Walker, RunOptions, NoControl}, unit::Unit};
//! let text = "3 3\n0 1 1 0\n0 1 1 1\n0 0 1 1\n1 1 1 0\n1 1 1 1\n1 0 1 1\n1 1 0 0\n1 1 0 1\n1 0 0 1\n";
//! let puzzle = formats::parse_str(text, "tiny.txt", &formats::LoadOptions::default()).unwrap();
//! let plan = SearchPlan::new(&puzzle, &FillOrder::row_major(&puzzle));
//! let result = Walker::new(&plan).run(&Unit::root(), RunOptions::default(), &mut NoControl).unwrap();
//! assert!(result.solutions_count > 0);
//! ```

pub mod board;
pub mod certificate;
pub mod compiled;
pub mod engine;
pub mod formats;
pub mod lanes;
pub mod lanes_race;
pub mod model;
pub mod order;
pub mod plan;
pub mod search;
pub mod spec;
pub mod suite;
pub mod testing;
pub mod unit;
pub mod validate;
pub mod verify;

pub use model::{Placement, Puzzle};
pub use order::{FillOrder, OrderSpec};
pub use spec::SearchSpec;
pub use unit::{Unit, UnitResult};
