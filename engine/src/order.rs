//! Fill orders: which free cell is filled at each depth.
//!
//! An [`OrderSpec`] is what a person writes (`row-major`, `cols:br`, `comb:12`,
//! `cells:0,1,17,...`); a [`FillOrder`] is that spec resolved against one puzzle: a
//! permutation of the cells that are not hints. Depth `k` (1-based) fills `cells()[k-1]`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::model::Puzzle;

/// Which corner a scan starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Corner {
    /// Top left.
    TopLeft,
    /// Top right.
    TopRight,
    /// Bottom left.
    BottomLeft,
    /// Bottom right.
    BottomRight,
}

impl Corner {
    const ALL: [(Corner, &'static str); 4] = [
        (Corner::TopLeft, "tl"),
        (Corner::TopRight, "tr"),
        (Corner::BottomLeft, "bl"),
        (Corner::BottomRight, "br"),
    ];
    fn code(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(c, _)| *c == self)
            .map(|(_, s)| *s)
            .unwrap_or("tl")
    }
}

/// A fill order as written by a person, before it meets a puzzle.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OrderSpec {
    /// Row by row (`rows:*`) or column by column (`cols:*`) from one corner.
    /// `row-major` is `rows:tl`, the default.
    Scan {
        /// `true` for column-major.
        columns: bool,
        /// The starting corner.
        from: Corner,
    },
    /// Comb order: the first `rows` rows in row-major order from the top left, then the
    /// remaining rows column by column (short vertical "teeth"), left to right.
    Comb {
        /// Rows of scan before the teeth.
        rows: usize,
    },
    /// The border first, then the next ring inwards, and so on: each ring clockwise
    /// from its corner on the side of `from` (`spiral:tl` runs along the top row, down the
    /// right column, back along the bottom and up the left, then the ring inside it).
    Spiral {
        /// The corner the outer ring starts at.
        from: Corner,
    },
    /// Outwards from one cell (a hint, usually): the ring of cells around it, then the
    /// next ring, each clockwise from its top-left corner, cells off the board skipped.
    Around {
        /// The cell the rings are centred on.
        cell: usize,
    },
    /// An explicit list of cells, which must be exactly the non-hint cells.
    Cells(Vec<usize>),
}

impl Default for OrderSpec {
    fn default() -> Self {
        OrderSpec::Scan {
            columns: false,
            from: Corner::TopLeft,
        }
    }
}

impl fmt::Display for OrderSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OrderSpec::Scan {
                columns: false,
                from: Corner::TopLeft,
            } => write!(f, "row-major"),
            OrderSpec::Scan { columns, from } => {
                write!(
                    f,
                    "{}:{}",
                    if *columns { "cols" } else { "rows" },
                    from.code()
                )
            }
            OrderSpec::Comb { rows } => write!(f, "comb:{rows}"),
            OrderSpec::Spiral { from } => write!(f, "spiral:{}", from.code()),
            OrderSpec::Around { cell } => write!(f, "around:{cell}"),
            OrderSpec::Cells(cells) => {
                let list: Vec<String> = cells.iter().map(|c| c.to_string()).collect();
                write!(f, "cells:{}", list.join(","))
            }
        }
    }
}

/// A fill order that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OrderError {
    /// The text is not a known order.
    #[error(
        "unknown fill order {0:?}: expected row-major, rows:tl|tr|bl|br, cols:tl|tr|bl|br, spiral:tl|tr|bl|br, around:CELL, comb:K or cells:C1,C2,..."
    )]
    Syntax(String),
    /// The comb has more rows than the board.
    #[error("comb:{rows} needs 1..={height} rows of scan on this {height}-row board")]
    CombRows {
        /// Rows asked for.
        rows: usize,
        /// Board height.
        height: usize,
    },
    /// An explicit list names a cell that does not exist.
    #[error("cell {cell} in the fill order is off the board (the board has {cells} cells)")]
    CellOutOfRange {
        /// The cell.
        cell: usize,
        /// Cells on the board.
        cells: usize,
    },
    /// An explicit list names a hint cell.
    #[error("cell {0} in the fill order holds a hint; list only the free cells")]
    HintCell(usize),
    /// An explicit list repeats a cell.
    #[error("cell {0} appears twice in the fill order")]
    Repeated(usize),
    /// An explicit list leaves free cells out.
    #[error("the fill order leaves out {count} free cells, the first is {first}")]
    Missing {
        /// How many.
        count: usize,
        /// The lowest one left out.
        first: usize,
    },
}

impl FromStr for OrderSpec {
    type Err = OrderError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        let syntax = || OrderError::Syntax(text.to_string());
        if text == "row-major" || text.is_empty() {
            return Ok(OrderSpec::default());
        }
        if text == "column-major" {
            return Ok(OrderSpec::Scan {
                columns: true,
                from: Corner::TopLeft,
            });
        }
        let (kind, arg) = text.split_once(':').ok_or_else(syntax)?;
        match kind {
            "rows" | "cols" | "spiral" => {
                let from = Corner::ALL
                    .iter()
                    .find(|(_, code)| *code == arg)
                    .map(|(c, _)| *c)
                    .ok_or_else(syntax)?;
                Ok(if kind == "spiral" {
                    OrderSpec::Spiral { from }
                } else {
                    OrderSpec::Scan {
                        columns: kind == "cols",
                        from,
                    }
                })
            }
            "comb" => Ok(OrderSpec::Comb {
                rows: arg.parse().map_err(|_| syntax())?,
            }),
            "around" => Ok(OrderSpec::Around {
                cell: arg.trim().parse().map_err(|_| syntax())?,
            }),
            "cells" => arg
                .split(',')
                .map(|c| c.trim().parse::<usize>().map_err(|_| syntax()))
                .collect::<Result<Vec<_>, _>>()
                .map(OrderSpec::Cells),
            _ => Err(syntax()),
        }
    }
}

/// A fill order resolved against a puzzle: the free cells, in the order they are filled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FillOrder {
    spec: OrderSpec,
    cells: Vec<usize>,
}

impl FillOrder {
    /// Resolves `spec` against `puzzle`, skipping hint cells.
    pub fn new(puzzle: &Puzzle, spec: &OrderSpec) -> Result<Self, OrderError> {
        let (w, h) = (puzzle.width(), puzzle.height());
        let mut is_hint = vec![false; puzzle.cells()];
        for hint in puzzle.hints() {
            is_hint[hint.pos as usize] = true;
        }
        let all: Vec<usize> = match spec {
            OrderSpec::Scan { columns, from } => {
                let flip_x = matches!(from, Corner::TopRight | Corner::BottomRight);
                let flip_y = matches!(from, Corner::BottomLeft | Corner::BottomRight);
                let mut cells = Vec::with_capacity(w * h);
                let (outer, inner) = if *columns { (w, h) } else { (h, w) };
                for a in 0..outer {
                    for b in 0..inner {
                        let (mut x, mut y) = if *columns { (a, b) } else { (b, a) };
                        if flip_x {
                            x = w - 1 - x;
                        }
                        if flip_y {
                            y = h - 1 - y;
                        }
                        cells.push(y * w + x);
                    }
                }
                cells
            }
            OrderSpec::Comb { rows } => {
                if *rows == 0 || *rows > h {
                    return Err(OrderError::CombRows {
                        rows: *rows,
                        height: h,
                    });
                }
                let mut cells: Vec<usize> = (0..rows * w).collect();
                for x in 0..w {
                    for y in *rows..h {
                        cells.push(y * w + x);
                    }
                }
                cells
            }
            OrderSpec::Spiral { from } => spiral(w, h, *from),
            OrderSpec::Around { cell } => {
                if *cell >= puzzle.cells() {
                    return Err(OrderError::CellOutOfRange {
                        cell: *cell,
                        cells: puzzle.cells(),
                    });
                }
                around(w, h, *cell)
            }
            OrderSpec::Cells(list) => {
                let mut seen = vec![false; puzzle.cells()];
                for &cell in list {
                    if cell >= puzzle.cells() {
                        return Err(OrderError::CellOutOfRange {
                            cell,
                            cells: puzzle.cells(),
                        });
                    }
                    if is_hint[cell] {
                        return Err(OrderError::HintCell(cell));
                    }
                    if seen[cell] {
                        return Err(OrderError::Repeated(cell));
                    }
                    seen[cell] = true;
                }
                let missing: Vec<usize> = (0..puzzle.cells())
                    .filter(|&c| !seen[c] && !is_hint[c])
                    .collect();
                if let Some(&first) = missing.first() {
                    return Err(OrderError::Missing {
                        count: missing.len(),
                        first,
                    });
                }
                list.clone()
            }
        };
        let cells = all.into_iter().filter(|&c| !is_hint[c]).collect();
        Ok(FillOrder {
            spec: spec.clone(),
            cells,
        })
    }

    /// The default order (row-major from the top left) for `puzzle`.
    pub fn row_major(puzzle: &Puzzle) -> Self {
        Self::new(puzzle, &OrderSpec::default()).expect("row-major is valid on every puzzle")
    }

    /// The spec this order came from.
    pub fn spec(&self) -> &OrderSpec {
        &self.spec
    }

    /// The cells in fill order; depth `k` fills `cells()[k - 1]`.
    pub fn cells(&self) -> &[usize] {
        &self.cells
    }

    /// Number of depths (free cells).
    pub fn len(&self) -> usize {
        self.cells.len()
    }

    /// `true` when every cell is a hint.
    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }
}

impl OrderSpec {
    /// The orders worth comparing on `puzzle` before a long search: the eight scanline
    /// orientations (rows and columns from each corner), the four spirals, the comb
    /// orders with two, a quarter and half of the rows scanned first, and outwards from
    /// each hint (at most eight).
    pub fn candidates(puzzle: &Puzzle) -> Vec<OrderSpec> {
        let height = puzzle.height();
        let mut out = OrderSpec::scanlines();
        for (from, _) in Corner::ALL {
            out.push(OrderSpec::Spiral { from });
        }
        let mut combs: Vec<usize> = [2, height / 4, height / 2]
            .into_iter()
            .filter(|&r| r >= 1 && r < height)
            .collect();
        combs.sort_unstable();
        combs.dedup();
        out.extend(combs.into_iter().map(|rows| OrderSpec::Comb { rows }));
        out.extend(puzzle.hints().iter().take(8).map(|h| OrderSpec::Around {
            cell: h.pos as usize,
        }));
        out
    }

    /// The eight scanline orientations.
    pub fn scanlines() -> Vec<OrderSpec> {
        let mut out = Vec::new();
        for columns in [false, true] {
            for (from, _) in Corner::ALL {
                out.push(OrderSpec::Scan { columns, from });
            }
        }
        out
    }
}

/// The cells of a `w` x `h` board outwards from `cell`: the cell, then each ring around
/// it clockwise from the ring's top-left corner, off-board cells skipped.
fn around(w: usize, h: usize, cell: usize) -> Vec<usize> {
    let (cx, cy) = ((cell % w) as isize, (cell / w) as isize);
    let mut out = vec![cell];
    let on = |x: isize, y: isize| x >= 0 && y >= 0 && (x as usize) < w && (y as usize) < h;
    for r in 1..w.max(h) as isize {
        let mut ring = Vec::with_capacity(8 * r as usize);
        for x in cx - r..=cx + r {
            ring.push((x, cy - r));
        }
        for y in cy - r + 1..=cy + r {
            ring.push((cx + r, y));
        }
        for x in (cx - r..cx + r).rev() {
            ring.push((x, cy + r));
        }
        for y in (cy - r + 1..cy + r).rev() {
            ring.push((cx - r, y));
        }
        out.extend(
            ring.into_iter()
                .filter(|&(x, y)| on(x, y))
                .map(|(x, y)| y as usize * w + x as usize),
        );
    }
    out
}

/// The cells of a `w` x `h` board ring by ring from the border inwards, each ring
/// clockwise from its corner on the side of `from`.
fn spiral(w: usize, h: usize, from: Corner) -> Vec<usize> {
    // the top-left spiral, then turned: a clockwise spiral from another corner is the
    // top-left one of the board rotated so that corner is at the top left
    let mut cells = Vec::with_capacity(w * h);
    let (rw, rh) = match from {
        Corner::TopLeft | Corner::BottomRight => (w, h),
        Corner::TopRight | Corner::BottomLeft => (h, w),
    };
    let (mut top, mut left, mut bottom, mut right) =
        (0isize, 0isize, rh as isize - 1, rw as isize - 1);
    let mut ring: Vec<(usize, usize)> = Vec::with_capacity(w * h);
    while top <= bottom && left <= right {
        for x in left..=right {
            ring.push((x as usize, top as usize));
        }
        for y in top + 1..=bottom {
            ring.push((right as usize, y as usize));
        }
        if top < bottom {
            for x in (left..right).rev() {
                ring.push((x as usize, bottom as usize));
            }
        }
        if left < right {
            for y in (top + 1..bottom).rev() {
                ring.push((left as usize, y as usize));
            }
        }
        top += 1;
        left += 1;
        bottom -= 1;
        right -= 1;
    }
    for (x, y) in ring {
        // (x, y) on the turned board back to the real one
        let (bx, by) = match from {
            Corner::TopLeft => (x, y),
            // turned a quarter: the real top right is the turned top left
            Corner::TopRight => (w - 1 - y, x),
            Corner::BottomRight => (w - 1 - x, h - 1 - y),
            Corner::BottomLeft => (y, h - 1 - x),
        };
        cells.push(by * w + bx);
    }
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_round_trip_through_text() {
        for text in ["row-major", "cols:br", "rows:tr", "comb:3", "cells:3,2,1,0"] {
            let spec: OrderSpec = text.parse().unwrap();
            assert_eq!(spec.to_string(), text);
        }
        assert!("spiral".parse::<OrderSpec>().is_err());
        assert_eq!(
            "spiral:br".parse::<OrderSpec>().unwrap().to_string(),
            "spiral:br"
        );
        assert!("cols:xx".parse::<OrderSpec>().is_err());
    }

    #[test]
    fn spirals_cover_every_cell_once_starting_at_their_corner_along_the_border() {
        for (w, h) in [(1, 1), (2, 3), (4, 4), (5, 3), (16, 16)] {
            for (from, _) in Corner::ALL {
                let cells = spiral(w, h, from);
                let mut sorted = cells.clone();
                sorted.sort_unstable();
                assert_eq!(sorted, (0..w * h).collect::<Vec<_>>(), "{w}x{h} {from:?}");
                let corner = match from {
                    Corner::TopLeft => 0,
                    Corner::TopRight => w - 1,
                    Corner::BottomLeft => (h - 1) * w,
                    Corner::BottomRight => w * h - 1,
                };
                assert_eq!(cells[0], corner, "{w}x{h} {from:?}");
                // each step moves to a neighbouring cell
                for pair in cells.windows(2) {
                    let (a, b) = (pair[0], pair[1]);
                    let d = (a % w).abs_diff(b % w) + (a / w).abs_diff(b / w);
                    assert_eq!(d, 1, "{w}x{h} {from:?}: {a} -> {b}");
                }
                // the border comes first
                let border = 2 * (w + h) - 4;
                if w > 1 && h > 1 {
                    assert!(
                        cells[..border]
                            .iter()
                            .all(|&c| c % w == 0 || c % w == w - 1 || c / w == 0 || c / w == h - 1)
                    );
                }
            }
        }
        // clockwise: from the top left along the top row
        assert_eq!(&spiral(4, 4, Corner::TopLeft)[..5], &[0, 1, 2, 3, 7]);
        assert_eq!(&spiral(4, 4, Corner::TopRight)[..5], &[3, 7, 11, 15, 14]);
    }

    #[test]
    fn around_a_cell_covers_the_board_once_nearest_rings_first() {
        for (w, h, cell) in [(4, 4, 0), (4, 4, 5), (5, 3, 14), (16, 16, 135), (1, 1, 0)] {
            let cells = around(w, h, cell);
            let mut sorted = cells.clone();
            sorted.sort_unstable();
            assert_eq!(
                sorted,
                (0..w * h).collect::<Vec<_>>(),
                "{w}x{h} around {cell}"
            );
            assert_eq!(cells[0], cell);
            let ring = |c: usize| (c % w).abs_diff(cell % w).max((c / w).abs_diff(cell / w));
            assert!(cells.windows(2).all(|p| ring(p[0]) <= ring(p[1])));
        }
        // the first ring around cell 5 of a 4x4 board, clockwise from its top left
        assert_eq!(&around(4, 4, 5)[..9], &[5, 0, 1, 2, 6, 10, 9, 8, 4]);
    }

    #[test]
    fn candidates_are_distinct_valid_orders() {
        let mut rng = crate::testing::Rng::new(3);
        let (puzzle, _) = crate::testing::random_puzzle(&mut rng, 16, 16, 5, 17, 3);
        let c = OrderSpec::candidates(&puzzle);
        assert_eq!(c.len(), 8 + 4 + 3 + 3);
        let texts: std::collections::HashSet<String> = c.iter().map(|o| o.to_string()).collect();
        assert_eq!(texts.len(), c.len());
        for o in c {
            assert_eq!(o.to_string().parse::<OrderSpec>().unwrap(), o);
            FillOrder::new(&puzzle, &o).unwrap();
        }
    }
}
