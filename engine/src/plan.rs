//! The search plan: everything about a (puzzle, fill order) pair that never changes during
//! a search, precomputed once.
//!
//! For each depth the plan knows the cell, which of its sides face the rim, a hint, a cell
//! filled earlier ("dynamic" sides) or a cell filled later. Static sides (rim, hint, later
//! cell) are applied when the candidate lists are built, so the walk never checks them.
//! Up to two dynamic sides form the lookup key `colour_a * C + colour_b` into a dense
//! bucket table; any further dynamic side (only odd fill orders have them) is checked with
//! one mask compare. Depths with the same static shape share one table.
//!
//! A candidate is one `u64`: the placed URDL colours in the low 32 bits ([`crate::model::pack`]),
//! the piece id in bits 32..48 and the rotation in bits 48..50. Buckets list candidates in
//! canonical order (ascending piece id, then rotation, duplicate orientations dropped) and
//! end with [`SENTINEL`]. Both engines read this plan: the reference walker interprets it,
//! the code generator bakes it into constants.

use std::collections::HashMap;

use crate::model::{Colour, GREY, Placement, Puzzle, distinct_rotations, pack, rotate};
use crate::order::FillOrder;

/// Ends every bucket.
pub const SENTINEL: u64 = u64::MAX;
/// The board value of an empty cell.
pub const EMPTY: u32 = u32::MAX;

/// Packs a candidate.
pub fn candidate(colours: [Colour; 4], piece: usize, rot: u8) -> u64 {
    pack(colours) as u64 | (piece as u64) << 32 | (rot as u64) << 48
}

/// The piece id of a candidate.
#[inline(always)]
pub fn candidate_piece(c: u64) -> usize {
    (c >> 32) as u16 as usize
}

/// The rotation of a candidate.
#[inline(always)]
pub fn candidate_rot(c: u64) -> u8 {
    ((c >> 48) & 3) as u8
}

/// What constrains one side of the cell filled at some depth.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SideRule {
    /// Faces off the board: must be grey.
    Rim,
    /// Faces a hint: must equal this colour.
    Fixed(Colour),
    /// Faces a cell filled later: must not be grey.
    Free,
    /// Faces a cell filled earlier at this depth index: must match it (read at run time).
    Dynamic(usize),
}

/// One dynamic side read from the board: the neighbour's cell and the shift of the colour
/// it shows towards us.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoardRead {
    /// Neighbour cell, or the dummy cell (`cells`, always 0) when unused.
    pub cell: usize,
    /// Bit shift of the facing colour in the neighbour's packed word.
    pub shift: u32,
}

/// The per-depth facts the walk needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DepthPlan {
    /// The cell filled at this depth.
    pub pos: usize,
    /// Side rules, URDL.
    pub rules: [SideRule; 4],
    /// The two key reads (dummy reads where the depth has fewer dynamic sides).
    pub key: [BoardRead; 2],
    /// Dynamic sides past the first two: (read, side) pairs, checked with a mask.
    pub extra: Vec<(BoardRead, usize)>,
    /// Mask over the packed colours of the extra sides (0 when there are none).
    pub extra_mask: u32,
    /// Offset of this depth's table in [`SearchPlan::offsets`].
    pub table: usize,
}

/// All precomputed facts for one puzzle and fill order.
#[derive(Clone, Debug)]
pub struct SearchPlan {
    /// Board width.
    pub width: usize,
    /// Board height.
    pub height: usize,
    /// Number of cells; the board array has one more (the dummy cell, always 0).
    pub cells: usize,
    /// Number of pieces.
    pub pieces: usize,
    /// Table stride: largest colour + 1.
    pub colours: usize,
    /// Per-depth plans, index 0 = depth 1.
    pub depths: Vec<DepthPlan>,
    /// Bucket start offsets into [`SearchPlan::candidates`], `colours^2` per table.
    pub offsets: Vec<u32>,
    /// Number of distinct tables.
    pub tables: usize,
    /// All buckets, each ending in [`SENTINEL`]. Index 0 is the shared empty bucket.
    pub candidates: Vec<u64>,
    /// The board with the hints placed: packed colours, [`EMPTY`] elsewhere, plus the
    /// dummy cell.
    pub initial_board: Vec<u32>,
    /// Pieces used by hints.
    pub initial_used: Vec<u8>,
    /// The hints.
    pub hints: Vec<Placement>,
    /// Pieces' rotation-0 colours.
    pub piece_colours: Vec<[Colour; 4]>,
}

/// Most bucket offsets a plan may have (distinct tables x colours^2): 4 MiB of offsets.
/// The real Eternity II with its clues needs 13,754 and the hard benchmark board 29,095;
/// a puzzle past this (many hints of many colours on a big board) would make tables,
/// generated source and compile times no volunteer's machine should be asked for.
pub const MAX_TABLE_ENTRIES: usize = 1 << 20;

/// Most candidates (piece placements in all buckets) a plan may have: 8 MiB.
pub const MAX_CANDIDATES: usize = 1 << 20;

/// A puzzle whose plan would pass [`MAX_TABLE_ENTRIES`] or [`MAX_CANDIDATES`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the search tables would be too large ({what}: {size}, the limit is {limit}): {tables} distinct cell shapes x {colours} colours squared; fewer hints or colours, or a smaller board"
)]
pub struct PlanTooLarge {
    /// What passed its limit.
    pub what: &'static str,
    /// Its size.
    pub size: usize,
    /// The limit.
    pub limit: usize,
    /// Distinct tables (cell shapes) the fill order makes.
    pub tables: usize,
    /// Colours.
    pub colours: usize,
}

impl SearchPlan {
    /// Builds the plan for `puzzle` walked in `order` (a plan past the size limits panics:
    /// [`SearchPlan::try_new`] for puzzles from outside).
    pub fn new(puzzle: &Puzzle, order: &FillOrder) -> Self {
        Self::try_new(puzzle, order).expect("a plan within the size limits")
    }

    /// Builds the plan for `puzzle` walked in `order`, refusing one past
    /// [`MAX_TABLE_ENTRIES`] or [`MAX_CANDIDATES`] before allocating it.
    pub fn try_new(puzzle: &Puzzle, order: &FillOrder) -> Result<Self, PlanTooLarge> {
        let cells = puzzle.cells();
        let colours = puzzle.max_colour() as usize + 1;
        let mut depth_of_cell = vec![usize::MAX; cells];
        for (depth, &pos) in order.cells().iter().enumerate() {
            depth_of_cell[pos] = depth;
        }
        let mut hint_at: Vec<Option<Placement>> = vec![None; cells];
        let mut initial_board = vec![EMPTY; cells + 1];
        initial_board[cells] = 0;
        let mut initial_used = vec![0u8; puzzle.pieces().len()];
        for &hint in puzzle.hints() {
            hint_at[hint.pos as usize] = Some(hint);
            initial_board[hint.pos as usize] = pack(puzzle.placed_colours(hint));
            initial_used[hint.piece as usize] = 1;
        }
        let dummy = BoardRead {
            cell: cells,
            shift: 0,
        };

        let mut tables: HashMap<[TableSide; 4], usize> = HashMap::new();
        let mut table_shapes: Vec<[TableSide; 4]> = Vec::new();
        let mut depths = Vec::with_capacity(order.len());
        for (depth, &pos) in order.cells().iter().enumerate() {
            let geo = puzzle.geometry(pos);
            let mut rules = [SideRule::Free; 4];
            for side in 0..4 {
                rules[side] = match geo.neighbour[side] {
                    None => SideRule::Rim,
                    Some(n) => match hint_at[n] {
                        Some(h) => SideRule::Fixed(puzzle.placed_colours(h)[(side + 2) % 4]),
                        None if depth_of_cell[n] < depth => SideRule::Dynamic(depth_of_cell[n]),
                        None => SideRule::Free,
                    },
                };
            }
            let mut key = [dummy; 2];
            let mut extra = Vec::new();
            let mut shape = [TableSide::Free; 4];
            let mut keys_used = 0;
            for side in 0..4 {
                shape[side] = match rules[side] {
                    SideRule::Rim => TableSide::Rim,
                    SideRule::Fixed(c) => TableSide::Fixed(c),
                    SideRule::Free => TableSide::Free,
                    SideRule::Dynamic(_) => {
                        let read = BoardRead {
                            cell: geo.neighbour[side].unwrap_or(cells),
                            shift: 8 * ((side as u32 + 2) % 4),
                        };
                        if keys_used < 2 {
                            key[keys_used] = read;
                            keys_used += 1;
                            TableSide::Key(keys_used as u8 - 1)
                        } else {
                            extra.push((read, side));
                            TableSide::Free
                        }
                    }
                };
            }
            let extra_mask = extra.iter().fold(0u32, |m, &(_, s)| m | 0xFF << (8 * s));
            let table = *tables.entry(shape).or_insert_with(|| {
                table_shapes.push(shape);
                table_shapes.len() - 1
            });
            depths.push(DepthPlan {
                pos,
                rules,
                key,
                extra,
                extra_mask,
                table: table * colours * colours,
            });
        }

        let too_large = |what, size, limit| PlanTooLarge {
            what,
            size,
            limit,
            tables: table_shapes.len(),
            colours,
        };
        let entries = table_shapes.len().saturating_mul(colours * colours);
        if entries > MAX_TABLE_ENTRIES {
            return Err(too_large("bucket offsets", entries, MAX_TABLE_ENTRIES));
        }
        let mut candidates = vec![SENTINEL];
        let mut offsets = vec![0u32; entries];
        for (t, shape) in table_shapes.iter().enumerate() {
            let mut buckets: Vec<Vec<u64>> = vec![Vec::new(); colours * colours];
            for (piece, &base) in puzzle.pieces().iter().enumerate() {
                if initial_used[piece] != 0 {
                    continue;
                }
                for rot in distinct_rotations(base) {
                    let shown = rotate(base, rot);
                    let mut keys = [0usize; 2];
                    let fits = (0..4).all(|side| match shape[side] {
                        TableSide::Rim => shown[side] == GREY,
                        TableSide::Fixed(c) => shown[side] == c,
                        TableSide::Free => shown[side] != GREY,
                        TableSide::Key(k) => {
                            keys[k as usize] = shown[side] as usize;
                            shown[side] != GREY
                        }
                    });
                    if fits {
                        buckets[keys[0] * colours + keys[1]].push(candidate(shown, piece, rot));
                    }
                }
            }
            for (key, bucket) in buckets.into_iter().enumerate() {
                if bucket.is_empty() {
                    continue;
                }
                offsets[t * colours * colours + key] = candidates.len() as u32;
                candidates.extend(bucket);
                candidates.push(SENTINEL);
                if candidates.len() > MAX_CANDIDATES {
                    return Err(too_large("candidates", candidates.len(), MAX_CANDIDATES));
                }
            }
        }

        Ok(SearchPlan {
            width: puzzle.width(),
            height: puzzle.height(),
            cells,
            pieces: puzzle.pieces().len(),
            colours,
            depths,
            offsets,
            tables: table_shapes.len(),
            candidates,
            initial_board,
            initial_used,
            hints: puzzle.hints().to_vec(),
            piece_colours: puzzle.pieces().to_vec(),
        })
    }

    /// Number of depths (free cells).
    pub fn len(&self) -> usize {
        self.depths.len()
    }

    /// `true` when every cell is a hint.
    pub fn is_empty(&self) -> bool {
        self.depths.is_empty()
    }

    /// Index of the first candidate of the bucket for `depth` given the board.
    #[inline(always)]
    pub fn bucket_start(&self, board: &[u32], depth: usize) -> usize {
        let d = &self.depths[depth];
        let a = (board[d.key[0].cell] >> d.key[0].shift) & 0xFF;
        let b = (board[d.key[1].cell] >> d.key[1].shift) & 0xFF;
        self.offsets[d.table + a as usize * self.colours + b as usize] as usize
    }

    /// The packed colours the extra sides of `depth` must show, given the board.
    #[inline(always)]
    pub fn extra_expect(&self, board: &[u32], depth: usize) -> u32 {
        self.depths[depth].extra.iter().fold(0, |e, &(read, side)| {
            e | ((board[read.cell] >> read.shift) & 0xFF) << (8 * side)
        })
    }

    /// The placement a candidate stands for at `depth`.
    pub fn placement(&self, depth: usize, c: u64) -> Placement {
        Placement::new(self.depths[depth].pos, candidate_piece(c), candidate_rot(c))
    }
}

/// How one side of a table's cells is treated when its candidate lists are built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum TableSide {
    Rim,
    Fixed(Colour),
    Free,
    Key(u8),
}
