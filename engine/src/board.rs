//! Board primitives: colours, sides, rotations, placements and cell geometry.
//!
//! Conventions follow `COUNTING.md`: a piece is four colours in URDL order at rotation 0,
//! colour 0 is the grey rim, `rot` counts clockwise quarter turns and `rot1(u,r,d,l) =
//! (l,u,r,d)`, and a cell is `pos = y * width + x` with 0 at the top left. The model
//! ([`crate::model`]) and its checks ([`crate::validate`]) both build on these.

use serde::{Deserialize, Serialize};

/// A colour on a piece edge. `0` is the grey rim colour.
pub type Colour = u8;

/// The grey rim colour.
pub const GREY: Colour = 0;

/// Largest board side the model accepts (cells along one edge).
pub const MAX_SIDE: usize = 64;
/// Largest number of cells (and so pieces) the model accepts.
pub const MAX_CELLS: usize = 1024;
/// Largest colour value the model accepts. `0xFF` stays free as an "empty" marker.
pub const MAX_COLOUR: Colour = 250;

/// Side indices, URDL.
pub const UP: usize = 0;
/// Right side index.
pub const RIGHT: usize = 1;
/// Down side index.
pub const DOWN: usize = 2;
/// Left side index.
pub const LEFT: usize = 3;
/// Human names of the four sides, indexed like the colour arrays.
pub const SIDE_NAMES: [&str; 4] = ["up", "right", "down", "left"];

/// The colours a piece shows when turned `rot` clockwise quarter turns.
///
/// Placed side `s` shows `piece[(s - rot) mod 4]`, so `rotate([u,r,d,l], 1) == [l,u,r,d]`.
pub fn rotate(piece: [Colour; 4], rot: u8) -> [Colour; 4] {
    let r = (rot & 3) as usize;
    [
        piece[(4 - r) & 3],
        piece[(5 - r) & 3],
        piece[(6 - r) & 3],
        piece[(7 - r) & 3],
    ]
}

/// The rotations of a piece that are distinct candidates (COUNTING.md rule 3): rotations
/// that give the same four colours as a lower rotation are dropped.
pub fn distinct_rotations(piece: [Colour; 4]) -> impl Iterator<Item = u8> {
    (0u8..4).filter(move |&rot| (0..rot).all(|lower| rotate(piece, lower) != rotate(piece, rot)))
}

/// The lowest rotation of `piece` that shows the same colours as `rot` does.
pub fn canonical_rotation(piece: [Colour; 4], rot: u8) -> u8 {
    let shown = rotate(piece, rot);
    (0u8..4)
        .find(|&r| rotate(piece, r) == shown)
        .unwrap_or(rot & 3)
}

/// One piece on one cell with one rotation: a hint, a prefix step, a cursor step or a
/// cell of a reported board.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Placement {
    /// Cell index, `y * width + x`.
    pub pos: u16,
    /// Piece id, `0..width*height`.
    pub piece: u16,
    /// Clockwise quarter turns, `0..4`.
    pub rot: u8,
}

impl Placement {
    /// A placement of `piece` at `pos` turned `rot` quarter turns clockwise.
    pub fn new(pos: usize, piece: usize, rot: u8) -> Self {
        Placement {
            pos: pos as u16,
            piece: piece as u16,
            rot,
        }
    }
}

/// Where a cell sits on the board, which fixes which of its sides face the rim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CellGeometry {
    /// `true` for each side (URDL) that faces off the board.
    pub rim: [bool; 4],
    /// The neighbouring cell on each side, `None` where the side faces the rim.
    pub neighbour: [Option<usize>; 4],
}

/// Rim sides and neighbours of cell `pos` on a `width` x `height` board.
pub fn geometry(width: usize, height: usize, pos: usize) -> CellGeometry {
    let (x, y) = (pos % width, pos / width);
    let rim = [y == 0, x + 1 == width, y + 1 == height, x == 0];
    let neighbour = [
        (!rim[UP]).then(|| pos - width),
        (!rim[RIGHT]).then(|| pos + 1),
        (!rim[DOWN]).then(|| pos + width),
        (!rim[LEFT]).then(|| pos - 1),
    ];
    CellGeometry { rim, neighbour }
}

/// Human name of a cell: row letter (A at the top) and 1-based column, e.g. `I8`.
pub fn cell_name(width: usize, pos: usize) -> String {
    let (x, y) = (pos % width, pos / width);
    if y < 26 {
        format!("{}{}", (b'A' + y as u8) as char, x + 1)
    } else {
        format!("r{}c{}", y + 1, x + 1)
    }
}

/// Packs four URDL colours into one word, side `s` in bits `8*s..8*s+8`.
pub fn pack(colours: [Colour; 4]) -> u32 {
    u32::from_le_bytes(colours)
}

/// Unpacks a word made by [`pack`].
pub fn unpack(word: u32) -> [Colour; 4] {
    word.to_le_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_moves_left_edge_up() {
        assert_eq!(rotate([1, 2, 3, 4], 1), [4, 1, 2, 3]);
        assert_eq!(rotate([1, 2, 3, 4], 2), [3, 4, 1, 2]);
        assert_eq!(rotate([1, 2, 3, 4], 3), [2, 3, 4, 1]);
        assert_eq!(rotate([1, 2, 3, 4], 4), [1, 2, 3, 4]);
    }

    #[test]
    fn symmetric_pieces_have_fewer_candidates() {
        assert_eq!(distinct_rotations([1, 2, 3, 4]).count(), 4);
        assert_eq!(
            distinct_rotations([1, 2, 1, 2]).collect::<Vec<_>>(),
            vec![0, 1]
        );
        assert_eq!(
            distinct_rotations([5, 5, 5, 5]).collect::<Vec<_>>(),
            vec![0]
        );
        assert_eq!(canonical_rotation([1, 2, 1, 2], 3), 1);
        assert_eq!(canonical_rotation([1, 2, 1, 2], 2), 0);
    }

    #[test]
    fn cell_names_match_the_community_notation() {
        assert_eq!(cell_name(16, 135), "I8");
        assert_eq!(cell_name(16, 0), "A1");
        assert_eq!(cell_name(16, 255), "P16");
    }

    #[test]
    fn geometry_knows_the_rim() {
        let g = geometry(3, 2, 0);
        assert_eq!(g.rim, [true, false, false, true]);
        assert_eq!(g.neighbour, [None, Some(1), Some(3), None]);
        let g = geometry(3, 2, 5);
        assert_eq!(g.rim, [false, true, true, false]);
        assert_eq!(g.neighbour, [Some(2), None, None, Some(4)]);
    }
}
