//! e2pieces-style text: one piece per line as four integers, an optional `W H` header
//! (W = columns). Brendan Owen's `pieces_WWxHH.txt` files are this format with a header.

use super::{ColourMap, LoadErrorKind, RawPuzzle, data_lines, four, header_size, int_field};

pub(crate) fn parse(
    text: &str,
    name: &str,
    size: Option<(usize, usize)>,
) -> Result<RawPuzzle, LoadErrorKind> {
    let mut lines = data_lines(text, |l| l.starts_with('#')).peekable();
    let mut header = None;
    if let Some(&(line, first)) = lines.peek() {
        let fields: Vec<&str> = first.split_whitespace().collect();
        if fields.len() == 2 {
            let w = int_field(fields[0], line, "board width")?;
            let h = int_field(fields[1], line, "board height")?;
            header = Some(header_size(w, h, line)?);
            lines.next();
        }
    }
    let mut pieces = Vec::new();
    let mut piece_lines = Vec::new();
    for (line, l) in lines {
        let fields: Vec<&str> = l.split_whitespace().collect();
        pieces.push(four(&fields, line)?);
        piece_lines.push(line);
        if pieces.len() > crate::model::MAX_CELLS {
            return Err(LoadErrorKind::Syntax {
                line,
                message: format!("more than {} pieces", crate::model::MAX_CELLS),
            });
        }
    }
    let mut notes = Vec::new();
    let (width, height) = match size.or(header) {
        Some(s) => s,
        None => {
            let side = (pieces.len() as f64).sqrt().round() as usize;
            if side * side != pieces.len() {
                return Err(LoadErrorKind::Syntax {
                    line: 1,
                    message: format!(
                        "{} pieces do not make a square board and there is no `W H` header line; add one, or pass --size WxH (W = columns)",
                        pieces.len()
                    ),
                });
            }
            notes.push(format!(
                "no `W H` header line: read as a {side}x{side} board ({} pieces); pass --size WxH if it is another shape",
                pieces.len()
            ));
            (side, side)
        }
    };
    Ok(RawPuzzle {
        name: name.to_string(),
        width,
        height,
        pieces,
        hints: Vec::new(),
        piece_lines,
        default_colours: ColourMap::Identity,
        default_offset: 0,
        notes,
    })
}
