//! Loaders: the real set loads identically from every format, detection works, the writer
//! round-trips, and the Brendan solution files verify.

use e2fleet_engine::formats::{
    ColourMap, Format, LoadOptions, detect, load_file, parse_str, to_site_json,
};
use e2fleet_engine::model::Placement;
use e2fleet_engine::verify::verify_board;

use crate::{load, puzzle_path};

fn with(rel: &str, options: LoadOptions) -> e2fleet_engine::Puzzle {
    load_file(&puzzle_path(rel), &options).unwrap()
}

#[test]
fn the_real_set_loads_identically_from_every_format() {
    let json = load("e2/official.json");
    assert_eq!(json.hints().len(), 5);
    let centre = json.hints().iter().find(|h| h.pos == 135).unwrap();
    assert_eq!(
        json.placed_colours(*centre),
        [8, 9, 9, 12],
        "the centre clue places as URDL (8,9,9,12)"
    );
    let forms = [
        ("e2/official.csv", LoadOptions::default()),
        ("e2/e2pieces.txt", LoadOptions::default()),
        ("e2/blackwood_pieces.txt", LoadOptions::default()),
        (
            "e2/e2.puz",
            LoadOptions {
                colours: Some(ColourMap::Blackwood),
                rotation_offset: Some(2),
                ..LoadOptions::default()
            },
        ),
        (
            "e2/fabri-e2pieces.txt",
            LoadOptions {
                colours: Some(ColourMap::Fabri),
                ..LoadOptions::default()
            },
        ),
    ];
    for (rel, options) in forms {
        let other = with(rel, options);
        assert_eq!(other.pieces(), json.pieces(), "{rel}");
        assert_eq!((other.width(), other.height()), (16, 16));
    }
    // the CSV carries the five clues as pins
    let csv = load("e2/official.csv");
    assert_eq!(csv.hints(), json.hints());
}

#[test]
fn the_real_set_has_the_published_structure() {
    let p = load("e2/e2pieces.txt");
    let mut sides = [0usize; 23];
    for &c in p.pieces().iter().flatten() {
        sides[c as usize] += 1;
    }
    assert_eq!(sides[0], 64);
    assert!(sides[1..=5].iter().all(|&n| n == 24));
    assert!(sides[6..=10].iter().all(|&n| n == 48));
    assert!(sides[11..=22].iter().all(|&n| n == 50));
}

#[test]
fn all_three_site_json_schemas_load() {
    let a = load("bench/bench-easy.json");
    assert_eq!(a.hints().len(), 18);
    let b = load("clues/e2-clue-clue2.json");
    assert_eq!((b.width(), b.height()), (12, 6));
    let c = load("planted/inst_n10_c22_s1.json");
    assert_eq!((c.width(), c.height(), c.hints().len()), (10, 10, 5));
}

#[test]
fn clue_text_files_need_their_size() {
    let err = load_file(&puzzle_path("clues/clue2.txt"), &LoadOptions::default()).unwrap_err();
    assert!(err.to_string().contains("header"), "{err}");
    let p = with(
        "clues/clue2.txt",
        LoadOptions {
            size: Some((12, 6)),
            ..LoadOptions::default()
        },
    );
    assert_eq!(p.cells(), 72);
}

#[test]
fn detection_picks_the_right_format() {
    let cases = [
        ("e2/official.json", Format::SiteJson),
        ("e2/official.csv", Format::Csv16),
        ("e2/e2pieces.txt", Format::Text),
        ("e2/e2.puz", Format::Puz),
        ("e2/blackwood_pieces.txt", Format::Blackwood),
        ("brendan/set1/pieces_06x06.txt", Format::Text),
    ];
    for (rel, format) in cases {
        let text = std::fs::read_to_string(puzzle_path(rel)).unwrap();
        assert_eq!(detect(rel, &text), format, "{rel}");
    }
}

#[test]
fn site_json_round_trips() {
    for rel in [
        "e2/official.json",
        "bench/bench-hard.json",
        "brendan/set2/pieces_06x06.txt",
    ] {
        let p = load(rel);
        let again = parse_str(&to_site_json(&p), "again.json", &LoadOptions::default()).unwrap();
        assert_eq!(again.pieces(), p.pieces());
        assert_eq!(again.hints(), p.hints());
        assert_eq!((again.width(), again.height()), (p.width(), p.height()));
    }
}

/// Brendan's solution files: line k is `x y r` for piece k, y counted from the bottom.
#[test]
fn brendan_solutions_verify() {
    for size in ["03x03", "04x04", "05x05", "06x06"] {
        let puzzle = load(&format!("brendan/set1/pieces_{size}.txt"));
        let text = std::fs::read_to_string(puzzle_path(&format!(
            "brendan/solutions_set1/solutions_{size}.txt"
        )))
        .unwrap();
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        lines.next();
        let board: Vec<Placement> = lines
            .enumerate()
            .map(|(piece, l)| {
                let v: Vec<usize> = l.split_whitespace().map(|t| t.parse().unwrap()).collect();
                let row = puzzle.height() - 1 - v[1];
                Placement::new(row * puzzle.width() + v[0], piece, v[2] as u8)
            })
            .collect();
        verify_board(&puzzle, &board, true).unwrap();
    }
}

#[test]
fn the_loader_says_what_it_assumed_and_names_repeated_pieces() {
    use e2fleet_engine::formats::{load_file_noted, parse_str_noted};
    // the real set has no repeated piece; neither has any shipped puzzle
    assert!(load("e2/official.json").duplicate_pieces().is_empty());
    // a .puz file: colours and turns are assumed, and said
    let puz = load_file_noted(&puzzle_path("e2/e2.puz"), &LoadOptions::default()).unwrap();
    assert!(
        puz.notes
            .iter()
            .any(|n| n.contains("--colours blackwood --rot-offset 2")),
        "{:?}",
        puz.notes
    );
    let told = LoadOptions {
        colours: Some(ColourMap::Blackwood),
        rotation_offset: Some(2),
        ..LoadOptions::default()
    };
    assert!(
        load_file_noted(&puzzle_path("e2/e2.puz"), &told)
            .unwrap()
            .notes
            .is_empty()
    );
    // a header-less square text: its size is assumed, and said
    let text = "0 1 1 0\n0 1 1 1\n0 0 1 1\n1 1 1 0\n1 1 1 1\n1 0 1 1\n1 1 0 0\n1 1 0 1\n1 0 0 1\n";
    let loaded = parse_str_noted(text, "tiny.txt", &LoadOptions::default()).unwrap();
    assert!(
        loaded.notes[0].contains("read as a 3x3 board"),
        "{:?}",
        loaded.notes
    );
    // Brendan's 3x3 has none; with edge piece 7 replaced by a copy of edge piece 6 turned
    // once, and edge piece 5 by an exact copy of piece 4, both are named, with the turn
    let text = std::fs::read_to_string(puzzle_path("brendan/set1/pieces_03x03.txt")).unwrap();
    let clean = parse_str_noted(&text, "b.txt", &LoadOptions::default()).unwrap();
    assert!(clean.notes.is_empty(), "{:?}", clean.notes);
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let p = clean.puzzle.pieces();
    let turned = e2fleet_engine::model::rotate(p[6], 1);
    lines[1 + 7] = format!("{} {} {} {}", turned[0], turned[1], turned[2], turned[3]);
    lines[1 + 5] = lines[1 + 4].clone();
    let loaded = parse_str_noted(&lines.join("\n"), "dup.txt", &LoadOptions::default()).unwrap();
    assert_eq!(loaded.puzzle.duplicate_pieces(), vec![(4, 5, 0), (6, 7, 1)]);
    assert!(
        loaded
            .notes
            .iter()
            .any(|n| n == "piece 5 is an exact copy of piece 4")
    );
    assert!(
        loaded
            .notes
            .iter()
            .any(|n| n == "piece 7 is piece 6 turned 1 quarter turn")
    );
    assert!(loaded.notes.iter().any(|n| n.contains("data error")));
}
