//! Blackwood's piece list (`EternityII_Solver/Util.cs`): `id top right bottom left` per
//! line, ids 1-based in order, colours in Blackwood numbering, each piece listed turned two
//! quarter turns from the standard orientation. `#` starts a comment. Always 16x16 when it
//! has 256 pieces; otherwise the nearest square.

use super::{ColourMap, LoadErrorKind, RawPuzzle, data_lines, four, int_field};

pub(crate) fn parse(text: &str, name: &str) -> Result<RawPuzzle, LoadErrorKind> {
    let mut pieces = Vec::new();
    let mut piece_lines = Vec::new();
    for (line, l) in data_lines(text, |l| l.starts_with('#')) {
        let fields: Vec<&str> = l.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(LoadErrorKind::Syntax {
                line,
                message: format!(
                    "expected `id top right bottom left`, found {} fields",
                    fields.len()
                ),
            });
        }
        let id = int_field(fields[0], line, "piece id")? as usize;
        if id != pieces.len() + 1 {
            return Err(LoadErrorKind::Syntax {
                line,
                message: format!(
                    "piece id {id} out of sequence, expected {}",
                    pieces.len() + 1
                ),
            });
        }
        pieces.push(four(&fields[1..], line)?);
        piece_lines.push(line);
        if pieces.len() > crate::model::MAX_CELLS {
            return Err(LoadErrorKind::Syntax {
                line,
                message: "too many pieces".into(),
            });
        }
    }
    let side = (pieces.len() as f64).sqrt().round() as usize;
    Ok(RawPuzzle {
        name: name.to_string(),
        width: side,
        height: side,
        pieces,
        hints: Vec::new(),
        piece_lines,
        default_colours: ColourMap::Blackwood,
        default_offset: 2,
        notes: Vec::new(),
    })
}
