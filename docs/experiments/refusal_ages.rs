// Experiment (issue #15, session 21): how long before its refusal was a refused piece
// placed? The branchy walk of `edge_tables.rs` (row-major 16x16, no hints) from the root,
// counting for every candidate refused as used the depth its piece was placed at; then,
// for a few sets of "cut" depths, the share of refusals whose piece lies above the cut
// in force (and so could be left out of a copy of the tables made there), against how
// often the walk enters a cut depth (each entry is a copy to bring up to date).
//
//     rustc -O --edition=2021 docs/experiments/refusal_ages.rs -o /tmp/ra
//     /tmp/ra puzzles/e2/e2pieces.txt 100000000
//
// Result (100 M nodes): 1.77 refusals per node, half of them of pieces placed more than
// 70 levels up; one cut at depth 128 would leave out 70% of them, entered ~1,500 times.
// That is what the list walk's pruned levels (`codegen::Prune`) build on.
#![allow(dead_code, unused_imports)]
include!("edge_tables.rs");
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let (w, h, pieces) = parse(&a[1]);
    let n = pieces.len();
    let t = build(w, h, &pieces);
    let budget: u64 = a[2].parse().unwrap();
    let mut wk = fresh(&t, n);
    let mut pdepth = vec![0usize; n + 8];
    let mut age_hist = vec![0u64; 300];
    let mut refusals_at = vec![0u64; 300];
    let mut h2 = vec![0u64; 300*300];
    let mut empties = 0u64; let mut exam = 0u64; let mut nodes = 0u64;
    let mut entries = vec![0u64; 300];
    let mut d = 0usize; let mut i: u32 = t.first[t.dt[0][0] as usize];
    let mut left = budget;
    entries[0] += 1;
    'outer: loop {
        let c = t.cands[i as usize];
        let p = (c & 0xFFFF) as usize;
        exam += 1;
        if wk.used[p] == 0 {
            wk.used[p] = 1; pdepth[p] = d; wk.board[d] = c; wk.stack[d] = i; wk.count[d] += 1; nodes += 1;
            left -= 1; d += 1;
            if left == 0 { break; }
            i = next_first(&t, &wk.board, d); entries[d] += 1;
            continue;
        }
        if p == t.taken { empties += 1; } else { age_hist[d - pdepth[p]] += 1; h2[d*300+pdepth[p]] += 1; refusals_at[d] += 1; }
        let mut cc = c; let mut ii = i;
        loop {
            if cc & LASTB == 0 { i = ii + 1; break; }
            if d == 0 { break 'outer; }
            d -= 1;
            ii = wk.stack[d]; cc = t.cands[ii as usize];
            wk.used[(cc & 0xFFFF) as usize] = 0;
        }
    }
    let refusals: u64 = age_hist.iter().sum();
    println!("nodes {} examined {} ({:.3}/node) refusals {} ({:.3}/node) empties {} ({:.3}/node)", nodes, exam, exam as f64/nodes as f64, refusals, refusals as f64/nodes as f64, empties, empties as f64/nodes as f64);
    let mut cum = 0u64;
    for (k, &v) in age_hist.iter().enumerate() { cum += v; if v > 0 && (k < 20 || k % 10 == 0) { println!("age<= {:3}: {:.3}", k, cum as f64 / refusals as f64); } }
    // depth profile
    let maxd = wk.count.iter().rposition(|&x| x > 0).unwrap();
    let mind = wk.count.iter().position(|&x| x > 0).unwrap();
    println!("depths {}..{}", mind, maxd);
    for dd in (0..=maxd).step_by(8) { println!("d {:3} nodes {:12} entries {:12} refusals {:12}", dd, wk.count[dd], entries[dd], refusals_at[dd]); }
    let sets: Vec<(&str, Vec<usize>)> = vec![("64,128", vec![64,128]), ("128", vec![128]), ("112", vec![112]), ("120",vec![120]), ("8s", (0..300).step_by(8).collect()), ("16s", (0..300).step_by(16).collect()), ("32s", (0..300).step_by(32).collect()), ("every", (0..300).collect())];
    for (name, b) in &sets {
        let mut elim = 0u64; let mut ev = 0u64;
        for &k in b { if k < 300 { ev += entries[k]; } }
        for dd in 0..300 { let bd = b.iter().copied().filter(|&k| k <= dd).max().unwrap_or(0); for pd in 0..bd { elim += h2[dd*300+pd]; } }
        println!("B {:8} eliminated {:.3} of refusals ({:.3}/node) events {:.6}/node", name, elim as f64/refusals as f64, elim as f64/nodes as f64, ev as f64/nodes as f64);
    }
    // epoch schemes: boundary every E levels, filter pieces placed at depth < boundary
    for e in [4usize, 8, 16, 32, 64] {
        // recompute by ages: need per (d, pd); approximate using events
        let ev: u64 = (0..300).filter(|k| k % e == 0).map(|k| entries[k]).sum();
        println!("E {:2} events {} ({:.6}/node)", e, ev, ev as f64 / nodes as f64);
    }
}
