//! JamesGallicchio `.puz`: blank lines and lines starting with `c` are ignored; a
//! `cols [rows]` header, then one tile per line as `N E S W` with an optional `+`/`-`.

use super::{ColourMap, LoadErrorKind, RawPuzzle, data_lines, four, header_size, int_field};

pub(crate) fn parse(text: &str, name: &str) -> Result<RawPuzzle, LoadErrorKind> {
    let mut lines = data_lines(text, |l| {
        l == "c" || l.starts_with("c ") || l.starts_with('#')
    });
    let Some((line, header)) = lines.next() else {
        return Err(LoadErrorKind::Empty);
    };
    let fields: Vec<&str> = header.split_whitespace().collect();
    let (w, h) = match fields.as_slice() {
        [c] => {
            let c = int_field(c, line, "board size")?;
            (c, c)
        }
        [c, r] => (
            int_field(c, line, "board columns")?,
            int_field(r, line, "board rows")?,
        ),
        _ => {
            return Err(LoadErrorKind::Syntax {
                line,
                message: "expected a `cols [rows]` header".into(),
            });
        }
    };
    let (width, height) = header_size(w, h, line)?;
    let mut pieces = Vec::new();
    let mut piece_lines = Vec::new();
    for (line, l) in lines {
        let mut fields: Vec<&str> = l.split_whitespace().collect();
        if matches!(fields.last(), Some(&"+") | Some(&"-")) {
            fields.pop();
        }
        pieces.push(four(&fields, line)?);
        piece_lines.push(line);
        if pieces.len() > width * height {
            return Err(LoadErrorKind::Syntax {
                line,
                message: format!("more tiles than the {width}x{height} board has cells"),
            });
        }
    }
    Ok(RawPuzzle {
        name: name.to_string(),
        width,
        height,
        pieces,
        hints: Vec::new(),
        piece_lines,
        default_colours: ColourMap::Identity,
        default_offset: 0,
        notes: Vec::new(),
    })
}
