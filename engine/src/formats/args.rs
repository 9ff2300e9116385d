//! The command-line flags that say how to read a puzzle file, one set for every command
//! that reads one (`e2fleet-worker solve`, `e2fleet-coordinator submit`, ...). Only with
//! the `cli` feature (clap).

use std::path::PathBuf;

use super::{ColourMap, Format, LoadError, LoadOptions, Loaded, load_file_noted};

/// Where the puzzle is and how to read it.
#[derive(clap::Args, Debug, Clone)]
pub struct PuzzleArgs {
    /// Puzzle file: site JSON, 16-bit CSV, e2pieces/Brendan text, .puz or Blackwood list.
    pub puzzle: PathBuf,
    /// Force the file format instead of detecting it (json, csv, text, puz, blackwood).
    #[arg(long)]
    pub format: Option<Format>,
    /// Relabel the file's colours: identity, blackwood, fabri, or a comma list.
    #[arg(long)]
    pub colours: Option<ColourMap>,
    /// The file lists every piece already turned this many clockwise quarter turns.
    #[arg(long)]
    pub rot_offset: Option<u8>,
    /// Board size WxH for text files without a header (W = columns).
    #[arg(long, value_parser = parse_size)]
    pub size: Option<(usize, usize)>,
}

fn parse_size(text: &str) -> Result<(usize, usize), String> {
    let (w, h) = text
        .split_once('x')
        .ok_or_else(|| format!("size {text:?} must look like 12x6"))?;
    Ok((
        w.parse().map_err(|_| format!("bad width in {text:?}"))?,
        h.parse().map_err(|_| format!("bad height in {text:?}"))?,
    ))
}

impl PuzzleArgs {
    /// The loader options these flags say.
    pub fn options(&self) -> LoadOptions {
        LoadOptions {
            format: self.format,
            colours: self.colours.clone(),
            rotation_offset: self.rot_offset,
            size: self.size,
        }
    }

    /// Loads and validates the puzzle, with what the loader had to assume.
    pub fn load(&self) -> Result<Loaded, LoadError> {
        load_file_noted(&self.puzzle, &self.options())
    }
}
