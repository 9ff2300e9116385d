//! Command-line flags that say how to read a puzzle file, shared by every subcommand.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use e2fleet_engine::Puzzle;
use e2fleet_engine::formats::{self, ColourMap, Format, LoadOptions};

/// Where the puzzle is and how to read it.
#[derive(Args, Debug, Clone)]
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
    /// Loads and validates the puzzle.
    pub fn load(&self) -> Result<Puzzle> {
        let options = LoadOptions {
            format: self.format,
            colours: self.colours.clone(),
            rotation_offset: self.rot_offset,
            size: self.size,
        };
        formats::load_file(&self.puzzle, &options).context("cannot load the puzzle")
    }
}
