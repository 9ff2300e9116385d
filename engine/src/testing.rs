//! Test support shared by this crate's tests and the other crates' tests: random puzzles
//! with a planted solution, and a brute-force counter that shares no code with the
//! search tables.
//!
//! The brute force tries every unused piece in every distinct rotation at every cell of
//! the fill order and checks the four sides straight from the rules in `COUNTING.md`.
//! It is slow on purpose: it is the oracle the reference engine (and through it every
//! other engine) is compared against.

use crate::model::{GREY, Placement, Puzzle, distinct_rotations, geometry, rotate};
use crate::order::{Corner, OrderSpec};

/// A small deterministic random generator (splitmix64), so tests need no extra crate.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    /// Shuffles a slice in place.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
    }
}

/// A random `width` x `height` puzzle with a planted solution: edge colours drawn from
/// `1..=rim_colours` on the rim joins and `1..=inner_colours` inside (few colours give
/// symmetric and duplicate pieces), pieces shuffled and turned at random, and `hints`
/// cells pinned to the planted solution.
pub fn random_puzzle(
    rng: &mut Rng,
    width: usize,
    height: usize,
    rim_colours: u8,
    inner_colours: u8,
    hints: usize,
) -> (Puzzle, Vec<Placement>) {
    let cells = width * height;
    // horizontal[y][x]: colour between (x,y) and (x+1,y); vertical: between (x,y) and (x,y+1)
    let mut right = vec![0u8; cells];
    let mut down = vec![0u8; cells];
    for y in 0..height {
        for x in 0..width {
            let pos = y * width + x;
            let on_rim_row = y == 0 || y + 1 == height;
            let on_rim_col = x == 0 || x + 1 == width;
            if x + 1 < width {
                let n = if on_rim_row {
                    rim_colours
                } else {
                    inner_colours
                };
                right[pos] = 1 + rng.below(n as usize) as u8;
            }
            if y + 1 < height {
                let n = if on_rim_col {
                    rim_colours
                } else {
                    inner_colours
                };
                down[pos] = 1 + rng.below(n as usize) as u8;
            }
        }
    }
    let mut solved = Vec::with_capacity(cells);
    for pos in 0..cells {
        let (x, y) = (pos % width, pos / width);
        let up = if y == 0 { GREY } else { down[pos - width] };
        let left = if x == 0 { GREY } else { right[pos - 1] };
        let r = if x + 1 == width { GREY } else { right[pos] };
        let d = if y + 1 == height { GREY } else { down[pos] };
        solved.push([up, r, d, left]);
    }
    let mut ids: Vec<usize> = (0..cells).collect();
    rng.shuffle(&mut ids);
    // piece ids[pos] is the one that sits at pos; it is stored turned back by `turn`.
    let mut pieces = vec![[0u8; 4]; cells];
    let mut solution = Vec::with_capacity(cells);
    for pos in 0..cells {
        let turn = rng.below(4) as u8;
        pieces[ids[pos]] = rotate(solved[pos], (4 - turn) & 3);
        solution.push(Placement::new(pos, ids[pos], turn));
    }
    let mut hint_cells: Vec<usize> = (0..cells).collect();
    rng.shuffle(&mut hint_cells);
    let hint_list: Vec<Placement> = hint_cells[..hints.min(cells)]
        .iter()
        .map(|&pos| solution[pos])
        .collect();
    let puzzle = Puzzle::new(
        format!("random-{width}x{height}"),
        width,
        height,
        pieces,
        hint_list,
    )
    .expect("a planted puzzle is valid");
    (puzzle, solution)
}

/// A `side` x `side` planted puzzle of many colours with every other cell (a
/// checkerboard) pinned as a hint: nearly every free cell sees four fixed colours of its
/// own, so the plan needs a table per free cell — the shape of puzzle that makes search
/// tables (and generated source) blow up, for testing the limits.
pub fn checkerboard_puzzle(rng: &mut Rng, side: usize, colours: u8) -> Puzzle {
    let (puzzle, solution) = random_puzzle(rng, side, side, colours, colours, 0);
    let hints: Vec<Placement> = solution
        .into_iter()
        .filter(|p| {
            let pos = p.pos as usize;
            (pos % side + pos / side).is_multiple_of(2)
        })
        .collect();
    puzzle
        .with_extra_hints(&hints)
        .expect("hints from the planted solution")
}

/// Per-depth node counts (index 0 = depth 1) and the solution count, by brute force.
pub fn brute_force(puzzle: &Puzzle, order: &[usize]) -> (Vec<u64>, u64) {
    let cells = puzzle.cells();
    let mut board: Vec<Option<[u8; 4]>> = vec![None; cells];
    let mut used = vec![false; cells];
    for &h in puzzle.hints() {
        board[h.pos as usize] = Some(puzzle.placed_colours(h));
        used[h.piece as usize] = true;
    }
    let mut nodes = vec![0u64; order.len()];
    let mut solutions = 0;
    fn go(
        puzzle: &Puzzle,
        order: &[usize],
        depth: usize,
        board: &mut Vec<Option<[u8; 4]>>,
        used: &mut Vec<bool>,
        nodes: &mut Vec<u64>,
        solutions: &mut u64,
    ) {
        if depth == order.len() {
            *solutions += 1;
            return;
        }
        let pos = order[depth];
        let geo = geometry(puzzle.width(), puzzle.height(), pos);
        for piece in 0..puzzle.cells() {
            if used[piece] {
                continue;
            }
            for rot in distinct_rotations(puzzle.pieces()[piece]) {
                let shown = rotate(puzzle.pieces()[piece], rot);
                let legal = (0..4).all(|side| match geo.neighbour[side] {
                    None => shown[side] == GREY,
                    Some(n) => {
                        shown[side] != GREY
                            && board[n].is_none_or(|other| other[(side + 2) % 4] == shown[side])
                    }
                });
                if !legal {
                    continue;
                }
                nodes[depth] += 1;
                board[pos] = Some(shown);
                used[piece] = true;
                go(puzzle, order, depth + 1, board, used, nodes, solutions);
                board[pos] = None;
                used[piece] = false;
            }
        }
    }
    go(
        puzzle,
        order,
        0,
        &mut board,
        &mut used,
        &mut nodes,
        &mut solutions,
    );
    (nodes, solutions)
}

/// One of the 13 kinds of fill order, picked by `kind % 13`: the 8 scans, a comb with a
/// random number of rows, a random explicit permutation of the free cells (9 and 10), a
/// spiral from a random corner, or outwards from a random cell.
pub fn order_of_kind(puzzle: &Puzzle, kind: usize, rng: &mut Rng) -> OrderSpec {
    let corners = [
        Corner::TopLeft,
        Corner::TopRight,
        Corner::BottomLeft,
        Corner::BottomRight,
    ];
    match kind % 13 {
        k @ 0..=7 => OrderSpec::Scan {
            columns: k >= 4,
            from: corners[k % 4],
        },
        8 => OrderSpec::Comb {
            rows: 1 + rng.below(puzzle.height()),
        },
        11 => OrderSpec::Spiral {
            from: corners[rng.below(4)],
        },
        12 => OrderSpec::Around {
            cell: rng.below(puzzle.cells()),
        },
        _ => {
            let hints: Vec<usize> = puzzle.hints().iter().map(|h| h.pos as usize).collect();
            let mut cells: Vec<usize> =
                (0..puzzle.cells()).filter(|c| !hints.contains(c)).collect();
            rng.shuffle(&mut cells);
            OrderSpec::Cells(cells)
        }
    }
}

/// The nodes of `puzzle`'s whole tree in `order`, counted by the reference walker.
pub fn count_tree(puzzle: &Puzzle, order: &OrderSpec) -> u64 {
    let order = crate::FillOrder::new(puzzle, order).expect("a valid order");
    let plan = crate::plan::SearchPlan::new(puzzle, &order);
    crate::search::Walker::new(&plan)
        .run(
            &crate::Unit::root(),
            crate::search::RunOptions::default(),
            &mut crate::search::NoControl,
        )
        .expect("the root unit runs")
        .committed
}

/// A board whose whole tree (row-major) is counted: what the fleet tests hold every job on
/// it to.
#[derive(Clone, Copy, Debug)]
pub struct Known {
    /// The file under `puzzles/`.
    pub file: &'static str,
    /// Nodes of the whole tree.
    pub nodes: u64,
    /// Solutions.
    pub solutions: u64,
}

/// Brendan Owen's set 1 4x4.
pub const BRENDAN_4X4: Known = Known {
    file: "brendan/set1/pieces_04x04.txt",
    nodes: 4_470,
    solutions: 36,
};

/// Brendan Owen's set 1 5x5.
pub const BRENDAN_5X5: Known = Known {
    file: "brendan/set1/pieces_05x05.txt",
    nodes: 113_211,
    solutions: 16,
};

/// Brendan Owen's set 1 6x6.
pub const BRENDAN_6X6: Known = Known {
    file: "brendan/set1/pieces_06x06.txt",
    nodes: 69_284_103,
    solutions: 260,
};

/// The 16x16 benchmark board with one solution.
pub const BENCH_EASY: Known = Known {
    file: "bench/bench-easy.json",
    nodes: 3_577_121_570,
    solutions: 1,
};

/// bench-easy without two of its hints.
pub const BENCH_EASY_16: Known = Known {
    file: "bench/bench-easy-16-hints.json",
    nodes: 10_121_892_990,
    solutions: 1,
};

/// Panics unless `doc`, a job's status as its JSON reads, is complete and exact: `known`'s
/// nodes and solutions, with conservation holding.
pub fn assert_exact(doc: &serde_json::Value, known: Known) {
    assert_eq!(doc["state"], "complete", "{}: {}", known.file, doc["units"]);
    assert_eq!(doc["nodes_total"], known.nodes, "{}: {doc}", known.file);
    assert_eq!(doc["solutions_count"], known.solutions, "{}", known.file);
    assert_eq!(doc["conservation_ok"], true, "{}", known.file);
}
