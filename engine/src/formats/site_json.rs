//! eternity2.dev "site JSON" (the community interchange format) in its three schemas:
//! A `{name,width,height,numColors,pieces,hints}`, B (datasets: `id,family,...,maxScore`)
//! and C (`name,size,num_colors,target,...`). Also the writer for schema A.

use serde::Serialize;
use serde_json::Value;

use crate::model::{Placement, Puzzle};

use super::{ColourMap, LoadErrorKind, RawPuzzle, header_size};

fn json_error(message: impl Into<String>) -> LoadErrorKind {
    LoadErrorKind::Json {
        message: message.into(),
    }
}

fn uint(value: &Value, what: &str) -> Result<u32, LoadErrorKind> {
    value
        .as_u64()
        .filter(|&v| v <= u32::MAX as u64)
        .map(|v| v as u32)
        .ok_or_else(|| {
            json_error(format!(
                "{what} is {value}, expected a non-negative integer"
            ))
        })
}

pub(crate) fn parse(text: &str, stem: &str) -> Result<RawPuzzle, LoadErrorKind> {
    let root: Value = serde_json::from_str(text).map_err(|e| {
        json_error(format!(
            "invalid JSON at line {} column {}: {e}",
            e.line(),
            e.column()
        ))
    })?;
    let obj = root
        .as_object()
        .ok_or_else(|| json_error("expected a JSON object with `pieces`"))?;
    let name = obj
        .get("name")
        .or_else(|| obj.get("id"))
        .and_then(Value::as_str)
        .unwrap_or(stem)
        .to_string();
    let (w, h) = match (obj.get("width"), obj.get("height"), obj.get("size")) {
        (Some(w), Some(h), _) => (uint(w, "`width`")?, uint(h, "`height`")?),
        (None, None, Some(s)) => {
            let s = uint(s, "`size`")?;
            (s, s)
        }
        _ => return Err(json_error("missing `width` and `height` (or `size`)")),
    };
    let (width, height) = header_size(w, h, 1).map_err(|e| match e {
        LoadErrorKind::Invalid { error, .. } => LoadErrorKind::Invalid { error, line: None },
        other => other,
    })?;
    let colour_limit = match obj.get("numColors").or_else(|| obj.get("num_colors")) {
        Some(v) => Some(uint(v, "`numColors`")?),
        None => None,
    };
    let pieces_value = obj
        .get("pieces")
        .and_then(Value::as_array)
        .ok_or_else(|| json_error("missing `pieces` array"))?;
    if pieces_value.len() > crate::model::MAX_CELLS {
        return Err(json_error(format!(
            "`pieces` has {} entries, more than the {} supported",
            pieces_value.len(),
            crate::model::MAX_CELLS
        )));
    }
    let mut pieces = Vec::with_capacity(pieces_value.len());
    for (i, p) in pieces_value.iter().enumerate() {
        let arr = p.as_array().filter(|a| a.len() == 4).ok_or_else(|| {
            json_error(format!("pieces[{i}] is {p}, expected [up,right,down,left]"))
        })?;
        let mut colours = [0u32; 4];
        for side in 0..4 {
            colours[side] = uint(&arr[side], &format!("pieces[{i}][{side}]"))?;
            if let Some(limit) = colour_limit
                && colours[side] > limit
            {
                return Err(json_error(format!(
                    "pieces[{i}][{side}] is colour {}, above numColors = {limit}",
                    colours[side]
                )));
            }
        }
        pieces.push(colours);
    }
    let mut hints = Vec::new();
    if let Some(list) = obj.get("hints") {
        let list = list
            .as_array()
            .ok_or_else(|| json_error("`hints` must be an array of {pos,piece,rot}"))?;
        for (i, hint) in list.iter().enumerate() {
            let field = |k: &str| {
                hint.get(k)
                    .ok_or_else(|| json_error(format!("hints[{i}] has no `{k}`")))
                    .and_then(|v| uint(v, &format!("hints[{i}].{k}")))
            };
            let (pos, piece, rot) = (field("pos")?, field("piece")?, field("rot")?);
            if pos > u16::MAX as u32 || piece > u16::MAX as u32 || rot > 3 {
                return Err(json_error(format!(
                    "hints[{i}] = {hint} is out of range (rot must be 0..4)"
                )));
            }
            hints.push(Placement::new(pos as usize, piece as usize, rot as u8));
        }
    }
    Ok(RawPuzzle {
        name,
        width,
        height,
        pieces,
        hints,
        piece_lines: Vec::new(),
        default_colours: ColourMap::Identity,
        default_offset: 0,
        notes: Vec::new(),
    })
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SiteJson<'a> {
    name: &'a str,
    width: usize,
    height: usize,
    num_colors: u8,
    pieces: &'a [[u8; 4]],
    hints: &'a [Placement],
}

/// Writes `puzzle` as site JSON (schema A).
pub fn to_site_json(puzzle: &Puzzle) -> String {
    serde_json::to_string(&SiteJson {
        name: puzzle.name(),
        width: puzzle.width(),
        height: puzzle.height(),
        num_colors: puzzle.max_colour(),
        pieces: puzzle.pieces(),
        hints: puzzle.hints(),
    })
    .expect("a puzzle always serialises")
}
