//! The 16-bit CSV of the McGavin/Blackwood tools: line 1 is the board side, then one line
//! per piece `t,r,b,l,x,y,rot` where each colour is a 16-bit binary word
//! (`1111111111111111` = grey) and `x,y,rot` is a pin (`0,0,0` = no pin; a real pin at
//! cell 0 with rotation 0 cannot be written in this format).

use crate::model::Placement;

use super::{ColourMap, LoadErrorKind, RawPuzzle, data_lines, header_size, int_field};

const GREY_WORD: &str = "1111111111111111";

pub(crate) fn parse(text: &str, name: &str) -> Result<RawPuzzle, LoadErrorKind> {
    let mut lines = data_lines(text, |l| l.starts_with('#'));
    let Some((line, header)) = lines.next() else {
        return Err(LoadErrorKind::Empty);
    };
    let side = int_field(header.trim_end_matches(','), line, "board side")?;
    let (width, height) = header_size(side, side, line)?;
    let mut pieces = Vec::new();
    let mut piece_lines = Vec::new();
    let mut hints = Vec::new();
    for (line, l) in lines {
        let fields: Vec<&str> = l.split(',').map(str::trim).collect();
        if fields.len() != 7 {
            return Err(LoadErrorKind::Syntax {
                line,
                message: format!("expected `t,r,b,l,x,y,rot`, found {} fields", fields.len()),
            });
        }
        let mut colours = [0u32; 4];
        for (i, f) in fields[..4].iter().enumerate() {
            colours[i] = if *f == GREY_WORD {
                0
            } else if f.len() == 16 && f.bytes().all(|b| b == b'0' || b == b'1') {
                u32::from_str_radix(f, 2).unwrap_or(u32::MAX)
            } else {
                return Err(LoadErrorKind::Syntax {
                    line,
                    message: format!("colour {f:?} is not a 16-digit binary word"),
                });
            };
        }
        let x = int_field(fields[4], line, "pin x")? as usize;
        let y = int_field(fields[5], line, "pin y")? as usize;
        let rot = int_field(fields[6], line, "pin rotation")?;
        if (x, y, rot) != (0, 0, 0) {
            if x >= width || y >= height || rot > 3 {
                return Err(LoadErrorKind::Syntax {
                    line,
                    message: format!("pin {x},{y},{rot} is off the {width}x{height} board"),
                });
            }
            hints.push(Placement::new(y * width + x, pieces.len(), rot as u8));
        }
        pieces.push(colours);
        piece_lines.push(line);
        if pieces.len() > width * height {
            return Err(LoadErrorKind::Syntax {
                line,
                message: format!("more pieces than the {width}x{height} board has cells"),
            });
        }
    }
    Ok(RawPuzzle {
        name: name.to_string(),
        width,
        height,
        pieces,
        hints,
        piece_lines,
        default_colours: ColourMap::Identity,
        default_offset: 0,
        notes: Vec::new(),
    })
}
