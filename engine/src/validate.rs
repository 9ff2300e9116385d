//! Semantic checks on a puzzle: sizes, piece shapes and counts, colour parity, hints.
//!
//! Every check returns a [`ValidationError`] that says what is wrong, where (piece id,
//! cell, side) and what was expected, so a person fixing a file knows what to change.
//! Parsers in [`crate::formats`] add the file name and line on top.

use thiserror::Error;

use crate::board::{
    Colour, GREY, MAX_CELLS, MAX_COLOUR, MAX_SIDE, Placement, SIDE_NAMES, cell_name, geometry,
    rotate,
};

/// What is wrong with a puzzle's content.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ValidationError {
    /// A side is below 2 or above [`MAX_SIDE`], or there are too many cells.
    #[error(
        "board size {width}x{height} is not supported: each side must be 2..={MAX_SIDE} and the board at most {MAX_CELLS} cells"
    )]
    BoardSize {
        /// Width given.
        width: usize,
        /// Height given.
        height: usize,
    },
    /// The number of pieces does not equal the number of cells.
    #[error("a {width}x{height} board needs {expected} pieces, found {found}")]
    PieceCount {
        /// Width.
        width: usize,
        /// Height.
        height: usize,
        /// `width * height`.
        expected: usize,
        /// Pieces in the file.
        found: usize,
    },
    /// A colour is larger than [`MAX_COLOUR`].
    #[error("piece {piece} has colour {colour}, above the largest supported colour {MAX_COLOUR}")]
    ColourOutOfRange {
        /// Piece id (0-based).
        piece: usize,
        /// The colour.
        colour: u32,
    },
    /// A piece whose grey sides fit no cell: grey on opposite sides, or three or four greys.
    #[error(
        "piece {piece} {colours:?} fits no cell: grey must be on no side (interior), one side (edge) or two adjacent sides (corner)"
    )]
    BadPieceShape {
        /// Piece id.
        piece: usize,
        /// Its URDL colours.
        colours: [Colour; 4],
    },
    /// Wrong number of corner, edge or interior pieces for the board.
    #[error(
        "a {width}x{height} board needs {expected} {category} pieces, found {found} (a wrong colour or wrong board size?)"
    )]
    CategoryCount {
        /// `corner`, `edge` or `interior`.
        category: &'static str,
        /// Width.
        width: usize,
        /// Height.
        height: usize,
        /// The count the board needs.
        expected: usize,
        /// The count found.
        found: usize,
    },
    /// A non-grey colour appears an odd number of times, so some edge can never be matched.
    #[error(
        "colour {colour} appears on {count} piece sides, an odd number: every matched edge uses two sides, so the file is probably corrupt (pieces with it: {pieces:?})"
    )]
    OddColourCount {
        /// The colour.
        colour: Colour,
        /// How many sides carry it.
        count: usize,
        /// Up to 8 pieces that carry it.
        pieces: Vec<usize>,
    },
    /// A hint field is outside its range.
    #[error("hint {index} has {field} {value}, expected 0..{limit}")]
    HintOutOfRange {
        /// Index of the hint in the input.
        index: usize,
        /// `pos`, `piece` or `rot`.
        field: &'static str,
        /// The value given.
        value: usize,
        /// One past the largest allowed value.
        limit: usize,
    },
    /// Two hints on one cell.
    #[error("hints {first} and {second} are both on cell {pos} ({cell})")]
    DuplicateHintCell {
        /// The cell.
        pos: usize,
        /// Its human name.
        cell: String,
        /// First hint index.
        first: usize,
        /// Second hint index.
        second: usize,
    },
    /// Two hints use one piece.
    #[error("hints {first} and {second} both use piece {piece}")]
    DuplicateHintPiece {
        /// The piece.
        piece: usize,
        /// First hint index.
        first: usize,
        /// Second hint index.
        second: usize,
    },
    /// A hint shows grey into the board or a colour onto the rim.
    #[error(
        "hint piece {piece} rot {rot} on cell {pos} ({cell}) shows colour {colour} on its {side} side, which {expected}"
    )]
    HintAgainstRim {
        /// The cell.
        pos: usize,
        /// Human cell name.
        cell: String,
        /// The piece.
        piece: usize,
        /// The rotation.
        rot: u8,
        /// Side name.
        side: &'static str,
        /// The colour shown.
        colour: Colour,
        /// What the side needed.
        expected: &'static str,
    },
    /// Two neighbouring hints do not match.
    #[error(
        "hints on cells {pos} ({cell}) and {other_pos} ({other_cell}) do not match: {colour} on the {side} side meets {other_colour}"
    )]
    HintsDisagree {
        /// First cell.
        pos: usize,
        /// Its name.
        cell: String,
        /// Neighbouring cell.
        other_pos: usize,
        /// Its name.
        other_cell: String,
        /// Side of the first cell facing the second.
        side: &'static str,
        /// Colour on the first.
        colour: Colour,
        /// Colour on the second.
        other_colour: Colour,
    },
}

impl ValidationError {
    /// The piece id the error is about, if any (parsers map it to a file line).
    pub fn piece(&self) -> Option<usize> {
        match self {
            ValidationError::ColourOutOfRange { piece, .. }
            | ValidationError::BadPieceShape { piece, .. } => Some(*piece),
            _ => None,
        }
    }
}

/// Checks the board dimensions.
pub fn check_size(width: usize, height: usize) -> Result<(), ValidationError> {
    let ok = (2..=MAX_SIDE).contains(&width)
        && (2..=MAX_SIDE).contains(&height)
        && width * height <= MAX_CELLS;
    if ok {
        Ok(())
    } else {
        Err(ValidationError::BoardSize { width, height })
    }
}

/// What kind of cell a piece fits, from its grey sides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PieceKind {
    /// Two adjacent grey sides.
    Corner,
    /// One grey side.
    Edge,
    /// No grey side.
    Interior,
}

/// Classifies a piece by its grey sides; `None` if it fits no cell.
pub fn piece_kind(colours: [Colour; 4]) -> Option<PieceKind> {
    let grey: Vec<usize> = (0..4).filter(|&s| colours[s] == GREY).collect();
    match grey.as_slice() {
        [] => Some(PieceKind::Interior),
        [_] => Some(PieceKind::Edge),
        [a, b] if (b - a) % 2 == 1 => Some(PieceKind::Corner),
        _ => None,
    }
}

/// Checks piece count, colour range, shapes, category counts and colour parity.
pub fn check_pieces(
    width: usize,
    height: usize,
    pieces: &[[Colour; 4]],
) -> Result<(), ValidationError> {
    let cells = width * height;
    if pieces.len() != cells {
        return Err(ValidationError::PieceCount {
            width,
            height,
            expected: cells,
            found: pieces.len(),
        });
    }
    let mut counts = [0usize; 3];
    for (piece, &colours) in pieces.iter().enumerate() {
        if let Some(&colour) = colours.iter().find(|&&c| c > MAX_COLOUR) {
            return Err(ValidationError::ColourOutOfRange {
                piece,
                colour: colour as u32,
            });
        }
        match piece_kind(colours) {
            Some(PieceKind::Corner) => counts[0] += 1,
            Some(PieceKind::Edge) => counts[1] += 1,
            Some(PieceKind::Interior) => counts[2] += 1,
            None => return Err(ValidationError::BadPieceShape { piece, colours }),
        }
    }
    let expected = [
        4,
        2 * (width - 2) + 2 * (height - 2),
        (width - 2) * (height - 2),
    ];
    for (i, category) in ["corner", "edge", "interior"].into_iter().enumerate() {
        if counts[i] != expected[i] {
            return Err(ValidationError::CategoryCount {
                category,
                width,
                height,
                expected: expected[i],
                found: counts[i],
            });
        }
    }
    let mut colour_sides = [0usize; 256];
    for &c in pieces.iter().flatten() {
        colour_sides[c as usize] += 1;
    }
    if let Some(colour) = (1..256).find(|&c| colour_sides[c] % 2 == 1) {
        let with: Vec<usize> = pieces
            .iter()
            .enumerate()
            .filter(|(_, p)| p.contains(&(colour as Colour)))
            .map(|(i, _)| i)
            .take(8)
            .collect();
        return Err(ValidationError::OddColourCount {
            colour: colour as Colour,
            count: colour_sides[colour],
            pieces: with,
        });
    }
    Ok(())
}

/// Checks hint ranges, duplicates, rim legality and agreement between neighbouring hints.
pub fn check_hints(
    width: usize,
    height: usize,
    pieces: &[[Colour; 4]],
    hints: &[Placement],
) -> Result<(), ValidationError> {
    let cells = width * height;
    let mut by_cell: Vec<Option<usize>> = vec![None; cells];
    let mut by_piece: Vec<Option<usize>> = vec![None; pieces.len()];
    for (index, hint) in hints.iter().enumerate() {
        for (field, value, limit) in [
            ("pos", hint.pos as usize, cells),
            ("piece", hint.piece as usize, pieces.len()),
            ("rot", hint.rot as usize, 4),
        ] {
            if value >= limit {
                return Err(ValidationError::HintOutOfRange {
                    index,
                    field,
                    value,
                    limit,
                });
            }
        }
        let pos = hint.pos as usize;
        if let Some(first) = by_cell[pos] {
            return Err(ValidationError::DuplicateHintCell {
                pos,
                cell: cell_name(width, pos),
                first,
                second: index,
            });
        }
        by_cell[pos] = Some(index);
        if let Some(first) = by_piece[hint.piece as usize] {
            return Err(ValidationError::DuplicateHintPiece {
                piece: hint.piece as usize,
                first,
                second: index,
            });
        }
        by_piece[hint.piece as usize] = Some(index);
    }
    for hint in hints {
        let pos = hint.pos as usize;
        let shown = rotate(pieces[hint.piece as usize], hint.rot);
        let geo = geometry(width, height, pos);
        for side in 0..4 {
            let colour = shown[side];
            let wrong = if geo.rim[side] {
                (colour != GREY).then_some("faces the rim and must be grey (0)")
            } else {
                (colour == GREY).then_some("faces into the board and must not be grey")
            };
            if let Some(expected) = wrong {
                return Err(ValidationError::HintAgainstRim {
                    pos,
                    cell: cell_name(width, pos),
                    piece: hint.piece as usize,
                    rot: hint.rot,
                    side: SIDE_NAMES[side],
                    colour,
                    expected,
                });
            }
            if let Some(other_pos) = geo.neighbour[side]
                && let Some(other_index) = by_cell[other_pos]
            {
                let other = hints[other_index];
                let other_colour = rotate(pieces[other.piece as usize], other.rot)[(side + 2) % 4];
                if other_colour != colour {
                    return Err(ValidationError::HintsDisagree {
                        pos,
                        cell: cell_name(width, pos),
                        other_pos,
                        other_cell: cell_name(width, other_pos),
                        side: SIDE_NAMES[side],
                        colour,
                        other_colour,
                    });
                }
            }
        }
    }
    Ok(())
}
