//! The puzzle model: the validated [`Puzzle`], with the board primitives it is made of
//! ([`crate::board`], re-exported here).
//!
//! A [`Puzzle`] can only be built through [`Puzzle::new`], which runs every check in
//! [`crate::validate`]; the rest of the crate relies on those invariants.

pub use crate::board::*;
use crate::validate::{self, ValidationError};

/// A validated edge-matching puzzle: board size, pieces and hints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Puzzle {
    name: String,
    width: usize,
    height: usize,
    pieces: Vec<[Colour; 4]>,
    hints: Vec<Placement>,
}

impl Puzzle {
    /// Builds a puzzle, running every validation check (sizes, piece shapes and counts,
    /// colour parity, hints). Fails with the first problem found.
    pub fn new(
        name: impl Into<String>,
        width: usize,
        height: usize,
        pieces: Vec<[Colour; 4]>,
        hints: Vec<Placement>,
    ) -> Result<Self, ValidationError> {
        validate::check_size(width, height)?;
        validate::check_pieces(width, height, &pieces)?;
        validate::check_hints(width, height, &pieces, &hints)?;
        let mut hints = hints;
        hints.sort_by_key(|hint| hint.pos);
        Ok(Puzzle {
            name: name.into(),
            width,
            height,
            pieces,
            hints,
        })
    }

    /// A short human name (from the file, or the file stem).
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Board width in cells.
    pub fn width(&self) -> usize {
        self.width
    }
    /// Board height in cells.
    pub fn height(&self) -> usize {
        self.height
    }
    /// Number of cells, equal to the number of pieces.
    pub fn cells(&self) -> usize {
        self.width * self.height
    }
    /// The pieces, URDL at rotation 0, indexed by piece id.
    pub fn pieces(&self) -> &[[Colour; 4]] {
        &self.pieces
    }
    /// The hints, sorted by cell.
    pub fn hints(&self) -> &[Placement] {
        &self.hints
    }
    /// The largest colour value used by any piece.
    pub fn max_colour(&self) -> Colour {
        self.pieces
            .iter()
            .flat_map(|p| p.iter().copied())
            .max()
            .unwrap_or(0)
    }
    /// Number of distinct non-grey colours.
    pub fn colour_count(&self) -> usize {
        let mut seen = [false; 256];
        for &c in self.pieces.iter().flatten() {
            seen[c as usize] = true;
        }
        seen[1..].iter().filter(|&&s| s).count()
    }
    /// Returns a copy with a new name.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }
    /// Returns a copy with extra hints added (validated like the originals).
    pub fn with_extra_hints(&self, extra: &[Placement]) -> Result<Self, ValidationError> {
        let mut hints = self.hints.clone();
        hints.extend_from_slice(extra);
        Puzzle::new(
            self.name.clone(),
            self.width,
            self.height,
            self.pieces.clone(),
            hints,
        )
    }
    /// The colours `placement` shows on each side (URDL).
    pub fn placed_colours(&self, placement: Placement) -> [Colour; 4] {
        rotate(self.pieces[placement.piece as usize], placement.rot)
    }
    /// Rim sides and neighbours of a cell.
    pub fn geometry(&self, pos: usize) -> CellGeometry {
        geometry(self.width, self.height, pos)
    }
    /// Human name of a cell, `A1` for the top-left, rows as letters (then `r17` style past Z).
    pub fn cell_name(&self, pos: usize) -> String {
        cell_name(self.width, pos)
    }
    /// Pieces that repeat an earlier piece exactly or as a rotated copy: `(earlier,
    /// later, turns)` with `rotate(pieces[earlier], turns) == pieces[later]`. Legal, but
    /// almost always a data error: a puzzle with one usually has no solution.
    pub fn duplicate_pieces(&self) -> Vec<(usize, usize, u8)> {
        let mut seen: std::collections::HashMap<[Colour; 4], usize> =
            std::collections::HashMap::new();
        let mut out = Vec::new();
        for (i, &p) in self.pieces.iter().enumerate() {
            // the smallest of its rotations names the piece however it is turned
            let key = (0..4).map(|r| rotate(p, r)).min().expect("four rotations");
            match seen.get(&key) {
                Some(&first) => {
                    let turns = (0..4u8)
                        .find(|&r| rotate(self.pieces[first], r) == p)
                        .expect("same piece up to rotation");
                    out.push((first, i, turns));
                }
                None => {
                    seen.insert(key, i);
                }
            }
        }
        out
    }
}
