//! The board verifier: checks any full or partial board against the puzzle's rules.
//!
//! The coordinator runs this on every solution and deepest board a worker reports before
//! accepting it, so it shares no code with the search tables: it re-derives every rule
//! from the puzzle directly.

use thiserror::Error;

use crate::model::{GREY, Placement, Puzzle, SIDE_NAMES, cell_name};
use crate::order::FillOrder;
use crate::plan::SearchPlan;
use crate::search::{UnitError, Walker};

/// What is wrong with a reported board.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BoardError {
    /// A field is out of range.
    #[error("placement {index} has {field} {value}, expected 0..{limit}")]
    OutOfRange {
        /// Index in the list.
        index: usize,
        /// Field name.
        field: &'static str,
        /// Value.
        value: usize,
        /// Limit.
        limit: usize,
    },
    /// Two placements on one cell.
    #[error("cell {pos} ({cell}) is filled twice")]
    CellTwice {
        /// Cell.
        pos: usize,
        /// Name.
        cell: String,
    },
    /// One piece placed twice.
    #[error("piece {piece} is placed twice")]
    PieceTwice {
        /// Piece.
        piece: usize,
    },
    /// A placement contradicts a hint.
    #[error("cell {pos} ({cell}) must hold hint piece {hint_piece} rot {hint_rot}")]
    HintBroken {
        /// Cell.
        pos: usize,
        /// Name.
        cell: String,
        /// Hint piece.
        hint_piece: usize,
        /// Hint rotation.
        hint_rot: u8,
    },
    /// A side breaks the rim rule.
    #[error("cell {pos} ({cell}) shows colour {colour} on its {side} side, which {rule}")]
    Rim {
        /// Cell.
        pos: usize,
        /// Name.
        cell: String,
        /// Side.
        side: &'static str,
        /// Colour.
        colour: u8,
        /// Rule broken.
        rule: &'static str,
    },
    /// Two neighbours do not match.
    #[error("cells {pos} ({cell}) and {other} do not match on the {side} side: {a} vs {b}")]
    Mismatch {
        /// Cell.
        pos: usize,
        /// Name.
        cell: String,
        /// Neighbour.
        other: usize,
        /// Side.
        side: &'static str,
        /// Colour on the cell.
        a: u8,
        /// Colour on the neighbour.
        b: u8,
    },
    /// A complete board was required but cells are empty.
    #[error("the board is not complete: {empty} cells are empty, the first is {first}")]
    Incomplete {
        /// Empty count.
        empty: usize,
        /// First empty cell.
        first: usize,
    },
    /// The board is not a legal path of the fill order.
    #[error("not a path of the fill order: {0}")]
    Path(UnitError),
}

// the message names the cause itself ("{0}"), so it is not also a `source()`: an error
// chain then says each cause once
impl From<UnitError> for BoardError {
    fn from(e: UnitError) -> Self {
        BoardError::Path(e)
    }
}

/// Checks that `board` (hints may be included or left out) obeys every rule: cells and
/// pieces used once, hints respected, grey exactly on the rim, neighbours matching.
/// With `complete`, every cell must be filled.
pub fn verify_board(
    puzzle: &Puzzle,
    board: &[Placement],
    complete: bool,
) -> Result<(), BoardError> {
    let cells = puzzle.cells();
    let mut at: Vec<Option<Placement>> = vec![None; cells];
    let mut piece_used = vec![false; cells];
    let mut hint_at = vec![None; cells];
    for &h in puzzle.hints() {
        hint_at[h.pos as usize] = Some(h);
    }
    for (index, &p) in board.iter().enumerate() {
        for (field, value, limit) in [
            ("pos", p.pos as usize, cells),
            ("piece", p.piece as usize, cells),
            ("rot", p.rot as usize, 4),
        ] {
            if value >= limit {
                return Err(BoardError::OutOfRange {
                    index,
                    field,
                    value,
                    limit,
                });
            }
        }
        let pos = p.pos as usize;
        if let Some(h) = hint_at[pos] {
            if puzzle.placed_colours(h) != puzzle.placed_colours(p) || h.piece != p.piece {
                return Err(BoardError::HintBroken {
                    pos,
                    cell: cell_name(puzzle.width(), pos),
                    hint_piece: h.piece as usize,
                    hint_rot: h.rot,
                });
            }
            continue;
        }
        if at[pos].is_some() {
            return Err(BoardError::CellTwice {
                pos,
                cell: cell_name(puzzle.width(), pos),
            });
        }
        at[pos] = Some(p);
    }
    for &h in puzzle.hints() {
        at[h.pos as usize] = Some(h);
    }
    for p in at.iter().flatten() {
        if piece_used[p.piece as usize] {
            return Err(BoardError::PieceTwice {
                piece: p.piece as usize,
            });
        }
        piece_used[p.piece as usize] = true;
    }
    for (pos, p) in at.iter().enumerate() {
        let Some(p) = p else { continue };
        let shown = puzzle.placed_colours(*p);
        let geo = puzzle.geometry(pos);
        for side in 0..4 {
            let colour = shown[side];
            let cell = || cell_name(puzzle.width(), pos);
            match geo.neighbour[side] {
                None if colour != GREY => {
                    return Err(BoardError::Rim {
                        pos,
                        cell: cell(),
                        side: SIDE_NAMES[side],
                        colour,
                        rule: "faces the rim and must be grey",
                    });
                }
                Some(_) if colour == GREY => {
                    return Err(BoardError::Rim {
                        pos,
                        cell: cell(),
                        side: SIDE_NAMES[side],
                        colour,
                        rule: "faces into the board and must not be grey",
                    });
                }
                Some(n) => {
                    if let Some(q) = at[n] {
                        let other = puzzle.placed_colours(q)[(side + 2) % 4];
                        if other != colour {
                            return Err(BoardError::Mismatch {
                                pos,
                                cell: cell(),
                                other: n,
                                side: SIDE_NAMES[side],
                                a: colour,
                                b: other,
                            });
                        }
                    }
                }
                None => {}
            }
        }
    }
    if complete {
        let empty: Vec<usize> = (0..cells).filter(|&c| at[c].is_none()).collect();
        if let Some(&first) = empty.first() {
            return Err(BoardError::Incomplete {
                empty: empty.len(),
                first,
            });
        }
    }
    Ok(())
}

/// Checks that `path` is a legal filling of the first `path.len()` cells of `order`, in
/// canonical rotations (how prefixes, cursors and deepest boards are reported), and also
/// passes [`verify_board`].
pub fn verify_path(
    puzzle: &Puzzle,
    order: &FillOrder,
    path: &[Placement],
) -> Result<(), BoardError> {
    verify_board(puzzle, path, false)?;
    let plan = SearchPlan::new(puzzle, order);
    Walker::new(&plan).check_path(path)?;
    Ok(())
}

/// Matched non-grey adjacencies on a (partial) board, hints included: the community's
/// "score", at most `2WH - W - H`.
pub fn score(puzzle: &Puzzle, board: &[Placement]) -> usize {
    let mut at: Vec<Option<[u8; 4]>> = vec![None; puzzle.cells()];
    for &p in puzzle.hints().iter().chain(board) {
        if (p.pos as usize) < at.len() && (p.piece as usize) < puzzle.cells() {
            at[p.pos as usize] = Some(puzzle.placed_colours(p));
        }
    }
    let mut matched = 0;
    for pos in 0..puzzle.cells() {
        let Some(shown) = at[pos] else { continue };
        let geo = puzzle.geometry(pos);
        for side in [1usize, 2] {
            if let Some(n) = geo.neighbour[side]
                && let Some(other) = at[n]
                && other[(side + 2) % 4] == shown[side]
                && shown[side] != GREY
            {
                matched += 1;
            }
        }
    }
    matched
}
