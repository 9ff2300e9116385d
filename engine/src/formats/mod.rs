//! Puzzle file formats: detection, loading with file/line-precise errors, and writing.
//!
//! Every loader turns a file into the internal convention (URDL, clockwise rotations,
//! grey = 0, row-major cells) and then builds a [`Puzzle`], so validation is the same for
//! all formats. Per-file quirks (colour relabelling, pieces listed already turned `k`
//! quarter turns) are [`LoadOptions`]; the Blackwood format sets them itself.
//!
//! | format | what it looks like |
//! |---|---|
//! | [`Format::SiteJson`] | eternity2.dev JSON, schemas A (`name,width,height,numColors`), B (`id,family,...`) and C (`size,num_colors`) |
//! | [`Format::Csv16`] | first line the side, then `t,r,b,l,x,y,rot` with 16-bit binary colours |
//! | [`Format::Text`] | e2pieces text and Brendan Owen's `pieces_WWxHH.txt`: 4 integers a line, optional `W H` header |
//! | [`Format::Puz`] | JamesGallicchio `.puz`: `c` comments, `cols [rows]`, then `N E S W [+/-]` |
//! | [`Format::Blackwood`] | `id top right bottom left`, Blackwood colours, pieces turned 2 |

// Load errors carry the file name and a precise cause; they are cold and small in number.
#![allow(clippy::result_large_err)]

#[cfg(feature = "cli")]
mod args;
mod blackwood;
mod csv16;
mod puz;
mod site_json;
mod text;

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use thiserror::Error;

use crate::model::{Colour, MAX_COLOUR, Placement, Puzzle, rotate};
use crate::validate::ValidationError;

#[cfg(feature = "cli")]
pub use args::PuzzleArgs;
pub use site_json::to_site_json;

/// Largest puzzle file accepted, in bytes.
pub const MAX_FILE_BYTES: usize = 16 << 20;

/// The supported formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// eternity2.dev site JSON (all three schemas).
    SiteJson,
    /// The 16-bit binary CSV.
    Csv16,
    /// e2pieces-style text, including Brendan Owen's sets.
    Text,
    /// JamesGallicchio `.puz`.
    Puz,
    /// Blackwood's piece list.
    Blackwood,
}

impl FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "json" | "site-json" => Format::SiteJson,
            "csv" | "csv16" => Format::Csv16,
            "text" | "e2pieces" | "brendan" => Format::Text,
            "puz" => Format::Puz,
            "blackwood" => Format::Blackwood,
            _ => {
                return Err(format!(
                    "unknown format {s:?}: expected json, csv, text, puz or blackwood"
                ));
            }
        })
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::SiteJson => "json",
            Format::Csv16 => "csv",
            Format::Text => "text",
            Format::Puz => "puz",
            Format::Blackwood => "blackwood",
        })
    }
}

/// A colour relabelling from a file's numbers to the standard ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ColourMap {
    /// File colours are used as they are.
    #[default]
    Identity,
    /// Blackwood ("jblackwood") numbering, as in `blackwood_pieces.txt` and `e2.puz`.
    Blackwood,
    /// fabri1983's numbering (grey = 22).
    Fabri,
    /// An explicit table: file colour `i` becomes `table[i]`.
    Table(Vec<Colour>),
}

const BLACKWOOD_LETTERS: &str = "abglqejotchmrfkpudinsvw";
const FABRI_TABLE: [Colour; 23] = [
    6, 11, 16, 9, 14, 19, 7, 12, 17, 10, 15, 20, 8, 13, 18, 21, 22, 1, 4, 2, 5, 3, 0,
];

impl ColourMap {
    fn table(&self) -> Option<Vec<Colour>> {
        match self {
            ColourMap::Identity => None,
            ColourMap::Blackwood => Some(
                BLACKWOOD_LETTERS
                    .bytes()
                    .map(|letter| letter - b'a')
                    .collect(),
            ),
            ColourMap::Fabri => Some(FABRI_TABLE.to_vec()),
            ColourMap::Table(t) => Some(t.clone()),
        }
    }
}

impl FromStr for ColourMap {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "identity" | "standard" => Ok(ColourMap::Identity),
            "blackwood" => Ok(ColourMap::Blackwood),
            "fabri" => Ok(ColourMap::Fabri),
            list => list
                .split(',')
                .map(|c| c.trim().parse::<Colour>())
                .collect::<Result<Vec<_>, _>>()
                .map(ColourMap::Table)
                .map_err(|_| {
                    format!(
                        "unknown colour map {s:?}: expected identity, blackwood, fabri or a comma list of standard colours"
                    )
                }),
        }
    }
}

/// How to read a file.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// Force a format instead of detecting it.
    pub format: Option<Format>,
    /// Relabel colours (formats with their own numbering set this themselves).
    pub colours: Option<ColourMap>,
    /// The file lists each piece already turned this many clockwise quarter turns.
    pub rotation_offset: Option<u8>,
    /// Board size (width, height) for text files without a header.
    pub size: Option<(usize, usize)>,
}

/// Why a file could not be loaded.
#[derive(Debug, Error)]
#[error("{file}: {kind}")]
pub struct LoadError {
    /// File name or label.
    pub file: String,
    /// What went wrong.
    pub kind: LoadErrorKind,
}

/// The kinds of load failure.
#[derive(Debug, Error)]
pub enum LoadErrorKind {
    /// The file could not be read.
    #[error("cannot read the file: {0}")]
    Io(std::io::Error),
    /// Nothing but blank lines and comments.
    #[error("the file is empty")]
    Empty,
    /// NUL bytes or invalid UTF-8.
    #[error("the file holds binary data, not a puzzle (first bad byte at offset {offset})")]
    Binary {
        /// Byte offset.
        offset: usize,
    },
    /// Bigger than [`MAX_FILE_BYTES`].
    #[error("the file is {bytes} bytes, above the {MAX_FILE_BYTES}-byte limit")]
    TooLarge {
        /// Size.
        bytes: usize,
    },
    /// A line that does not parse.
    #[error("line {line}: {message}")]
    Syntax {
        /// 1-based line.
        line: usize,
        /// What is wrong and what was expected.
        message: String,
    },
    /// JSON that does not parse or lacks a field.
    #[error("{message}")]
    Json {
        /// What is wrong.
        message: String,
    },
    /// The content parses but is not a valid puzzle.
    #[error("{}{error}", line.map(|l| format!("line {l}: ")).unwrap_or_default())]
    Invalid {
        /// What is wrong.
        error: ValidationError,
        /// The line of the piece involved, where known.
        line: Option<usize>,
    },
}

// the message names the cause itself ("{0}"), so it is not also a `source()`: an error
// chain then says each cause once
impl From<std::io::Error> for LoadErrorKind {
    fn from(e: std::io::Error) -> Self {
        LoadErrorKind::Io(e)
    }
}

/// What a parser hands back before validation.
pub(crate) struct RawPuzzle {
    pub name: String,
    pub width: usize,
    pub height: usize,
    pub pieces: Vec<[u32; 4]>,
    pub hints: Vec<Placement>,
    /// The file line of each piece, for error messages.
    pub piece_lines: Vec<usize>,
    /// The format's own colour map and rotation offset, if it has one.
    pub default_colours: ColourMap,
    pub default_offset: u8,
    /// What the reader had to assume (said to the user, see [`Loaded::notes`]).
    pub notes: Vec<String>,
}

/// A loaded puzzle and what the loader had to assume or noticed on the way: a board size
/// inferred from the piece count, a format that does not say how its colours are
/// numbered, repeated pieces. Commands print the notes; nothing is guessed silently.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The puzzle.
    pub puzzle: Puzzle,
    /// One sentence each.
    pub notes: Vec<String>,
}

/// The notes about repeated pieces (exact or rotated copies) of a puzzle.
pub fn duplicate_notes(puzzle: &Puzzle) -> Vec<String> {
    let duplicates = puzzle.duplicate_pieces();
    let mut notes: Vec<String> = duplicates
        .iter()
        .take(10)
        .map(|&(first, later, turns)| {
            if turns == 0 {
                format!("piece {later} is an exact copy of piece {first}")
            } else {
                format!(
                    "piece {later} is piece {first} turned {turns} quarter turn{}",
                    if turns == 1 { "" } else { "s" }
                )
            }
        })
        .collect();
    if duplicates.len() > 10 {
        notes.push(format!(
            "... and {} more repeated pieces",
            duplicates.len() - 10
        ));
    }
    if !duplicates.is_empty() {
        notes.push(
            "repeated pieces are legal (the official clue puzzles have some), but in a hand-made or converted file they usually mean a data error and a puzzle with no solution: check the file"
                .into(),
        );
    }
    notes
}

/// Guesses the format from the name and content.
pub fn detect(name: &str, text: &str) -> Format {
    let lower = name.to_ascii_lowercase();
    let trimmed = text.trim_start_matches('\u{feff}').trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        return Format::SiteJson;
    }
    if lower.ends_with(".csv") {
        return Format::Csv16;
    }
    if lower.ends_with(".puz") {
        return Format::Puz;
    }
    let mut lines = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'));
    let first = lines.next().unwrap_or("");
    let second = lines.next().unwrap_or("");
    if first == "c" || first.starts_with("c ") {
        return Format::Puz;
    }
    if first.split_whitespace().count() == 1 && second.contains(',') {
        return Format::Csv16;
    }
    let fields: Vec<&str> = first.split_whitespace().collect();
    if fields.len() == 5 && fields[0] == "1" && fields.iter().all(|f| f.parse::<u32>().is_ok()) {
        return Format::Blackwood;
    }
    Format::Text
}

/// Reads and parses a puzzle file.
pub fn load_file(path: &Path, options: &LoadOptions) -> Result<Puzzle, LoadError> {
    let label = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| LoadError {
        file: label.clone(),
        kind: e.into(),
    })?;
    parse_bytes(&bytes, &label, options)
}

/// Parses puzzle bytes; `label` names the source in errors and becomes the default name.
pub fn parse_bytes(bytes: &[u8], label: &str, options: &LoadOptions) -> Result<Puzzle, LoadError> {
    parse_str(check_bytes(bytes, label)?, label, options)
}

/// The bytes as text, if they can be a puzzle file at all (size, no binary data).
fn check_bytes<'b>(bytes: &'b [u8], label: &str) -> Result<&'b str, LoadError> {
    let fail = |kind| LoadError {
        file: label.to_string(),
        kind,
    };
    if bytes.len() > MAX_FILE_BYTES {
        return Err(fail(LoadErrorKind::TooLarge { bytes: bytes.len() }));
    }
    if let Some(offset) = bytes.iter().position(|&b| b == 0) {
        return Err(fail(LoadErrorKind::Binary { offset }));
    }
    std::str::from_utf8(bytes).map_err(|e| {
        fail(LoadErrorKind::Binary {
            offset: e.valid_up_to(),
        })
    })
}

/// Reads and parses a puzzle file, with what the loader had to assume ([`Loaded`]).
pub fn load_file_noted(path: &Path, options: &LoadOptions) -> Result<Loaded, LoadError> {
    let label = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| LoadError {
        file: label.clone(),
        kind: e.into(),
    })?;
    let text = check_bytes(&bytes, &label)?;
    parse_str_noted(text, &label, options)
}

/// Parses puzzle text; `label` names the source in errors and becomes the default name.
pub fn parse_str(text: &str, label: &str, options: &LoadOptions) -> Result<Puzzle, LoadError> {
    parse_str_noted(text, label, options).map(|l| l.puzzle)
}

/// [`parse_str`] with what the loader had to assume ([`Loaded`]).
pub fn parse_str_noted(
    text: &str,
    label: &str,
    options: &LoadOptions,
) -> Result<Loaded, LoadError> {
    let fail = |kind| LoadError {
        file: label.to_string(),
        kind,
    };
    let meaningful = text.lines().any(|l| {
        let l = l.trim();
        !l.is_empty() && !l.starts_with('#')
    });
    if !meaningful {
        return Err(fail(LoadErrorKind::Empty));
    }
    let format = options.format.unwrap_or_else(|| detect(label, text));
    let stem = Path::new(label)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or(label)
        .to_string();
    let mut raw = match format {
        Format::SiteJson => site_json::parse(text, &stem),
        Format::Csv16 => csv16::parse(text, &stem),
        Format::Text => text::parse(text, &stem, options.size),
        Format::Puz => puz::parse(text, &stem),
        Format::Blackwood => blackwood::parse(text, &stem),
    }
    .map_err(fail)?;
    if format == Format::Puz && options.colours.is_none() && options.rotation_offset.is_none() {
        raw.notes.push(
            "a .puz file does not say how its colours are numbered or how its pieces are turned: \
             read with its numbers as they are and no turn (the Eternity II files in puzzles/e2/ \
             need --colours blackwood --rot-offset 2; pass --colours identity to silence this)"
                .into(),
        );
    }
    let mut notes = std::mem::take(&mut raw.notes);
    let puzzle = finish(raw, options).map_err(fail)?;
    notes.extend(duplicate_notes(&puzzle));
    Ok(Loaded { puzzle, notes })
}

fn finish(raw: RawPuzzle, options: &LoadOptions) -> Result<Puzzle, LoadErrorKind> {
    let map = options.colours.clone().unwrap_or(raw.default_colours);
    let table = map.table();
    let offset = options.rotation_offset.unwrap_or(raw.default_offset) & 3;
    let mut pieces = Vec::with_capacity(raw.pieces.len());
    for (i, file_piece) in raw.pieces.iter().enumerate() {
        let line = raw.piece_lines.get(i).copied();
        let mut colours = [0 as Colour; 4];
        for side in 0..4 {
            let c = file_piece[side];
            let mapped = match &table {
                Some(t) => t.get(c as usize).map(|&m| m as u32),
                None => Some(c),
            };
            match mapped {
                Some(m) if m <= MAX_COLOUR as u32 => colours[side] = m as Colour,
                _ => {
                    return Err(LoadErrorKind::Invalid {
                        error: ValidationError::ColourOutOfRange {
                            piece: i,
                            colour: c,
                        },
                        line,
                    });
                }
            }
        }
        pieces.push(rotate(colours, (4 - offset) & 3));
    }
    let hints = raw
        .hints
        .iter()
        .map(|h| Placement {
            rot: (h.rot + offset) & 3,
            ..*h
        })
        .collect();
    Puzzle::new(raw.name, raw.width, raw.height, pieces, hints).map_err(|error| {
        let line = error.piece().and_then(|p| raw.piece_lines.get(p).copied());
        LoadErrorKind::Invalid { error, line }
    })
}

/// Parses one integer field of a text line, with a precise error.
pub(crate) fn int_field(token: &str, line: usize, what: &str) -> Result<u32, LoadErrorKind> {
    token.parse::<u32>().map_err(|_| LoadErrorKind::Syntax {
        line,
        message: format!("{what} {token:?} is not a non-negative integer"),
    })
}

/// Non-empty, non-comment lines with their 1-based numbers.
pub(crate) fn data_lines<'t>(
    text: &'t str,
    is_comment: impl Fn(&str) -> bool + 't,
) -> impl Iterator<Item = (usize, &'t str)> + 't {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim().trim_start_matches('\u{feff}')))
        .filter(move |(_, l)| !l.is_empty() && !is_comment(l))
}

/// Parses a line of exactly four colour fields.
pub(crate) fn four(fields: &[&str], line: usize) -> Result<[u32; 4], LoadErrorKind> {
    if fields.len() != 4 {
        return Err(LoadErrorKind::Syntax {
            line,
            message: format!(
                "expected 4 colours (a piece), found {} fields",
                fields.len()
            ),
        });
    }
    let mut out = [0u32; 4];
    for (i, f) in fields.iter().enumerate() {
        out[i] = int_field(f, line, "colour")?;
    }
    Ok(out)
}

/// Checks a header size before allocating anything for it.
pub(crate) fn header_size(w: u32, h: u32, line: usize) -> Result<(usize, usize), LoadErrorKind> {
    crate::validate::check_size(w as usize, h as usize).map_err(|error| {
        LoadErrorKind::Invalid {
            error,
            line: Some(line),
        }
    })?;
    Ok((w as usize, h as usize))
}
