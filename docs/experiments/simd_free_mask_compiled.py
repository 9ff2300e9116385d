#!/usr/bin/env python3
"""Experiment (issue #15, session 19): the walk of simd_free_mask.rs compiled the way the
engine compiles a puzzle, against a branchy walk generated the same way.

Writes a Rust program with one function per depth of a 16x16 row-major board (no hints),
fused six depths to a function like the engine's list walk, in two forms: `b` tests each
candidate's used byte with a branch (the list walk's shape), `s` works out the bucket's
free candidates with SSSE3 and visits the set bits (simd_free_mask.rs). The tables are
simd_free_mask.rs's (and edge_tables.rs's), built at start.

    docs/experiments/simd_free_mask_compiled.py > /tmp/walk.rs
    rustc --edition=2021 -Copt-level=3 -Cpanic=abort -Ctarget-cpu=native /tmp/walk.rs -o /tmp/walk
    /tmp/walk puzzles/e2/e2pieces.txt r 50000000   # the table-driven reference: nodes and a hash of the per-depth counts
    /tmp/walk puzzles/e2/e2pieces.txt b 300000000  # branchy, M nodes/s
    /tmp/walk puzzles/e2/e2pieces.txt s 300000000  # free masks, M nodes/s

Result on the Zen 4 machine (300 M nodes from the root, 5 alternated rounds): `b` 99-116
M nodes/s (about the engine's own list walk on this board), `s` 87-106, per-round ratio
median 0.92. Same counts, to the digit, for all three.

Two more branchy walks (session 20), each against `b` (7 alternated rounds of 300 M nodes):
`e` reads each key's bucket end from a second table and loops `while i < end`, no flag
tested (0.97); `q` loads the bucket's next slot and that piece's used byte before the used
test and takes them as the next candidate when the one in hand is refused (0.965). The
candidate table carries one padding slot so `q` may read past a bucket's end.
"""
import os

W = H = 16
L = W * H
GROUP = 6
CS = 32
ZERO = L + 1

here = os.path.dirname(os.path.abspath(__file__))
src = open(os.path.join(here, 'simd_free_mask.rs')).read()
# the shared tables and branchy walk, then simd_free_mask.rs's bucket lanes (up to its walk)
tables = (open(os.path.join(here, 'edge_tables.rs')).read()
          + src[src.index('use std::arch::x86_64::*;'):src.index('fn simd_walk(')])
out = [tables, '''
static mut CANDS: *const u64 = core::ptr::null();
static mut FIRST: *const u32 = core::ptr::null();
static mut END: *const u32 = core::ptr::null();
static mut BYKEY: *const Rec = core::ptr::null();
static mut OH: *const [__m128i; 2] = core::ptr::null();
static mut USED: [u8; 512] = [0; 512];
static mut BOARD: [u64; 272] = [0; 272];
static mut COUNT: [u64; 272] = [0; 272];
static mut LEFT: u64 = 0;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let (w, h, pieces) = parse(&a[1]);
    assert!(w == 16 && h == 16);
    let n = pieces.len();
    let t = build(w, h, &pieces);
    let s = simd_tables(&t, n);
    let bykey: Vec<Rec> = s.recof.iter().map(|&r| s.recs[r as usize]).collect();
    let b: u64 = a[3].parse().unwrap();
    // per key: one past the bucket's last candidate (an empty bucket: its start, so no try)
    let end: Vec<u32> = t.first.iter().map(|&f| { let mut i = f as usize; if t.cands[i] & 0xFFFF == t.taken as u64 { return f; } while t.cands[i] & LASTB == 0 { i += 1; } (i + 1) as u32 }).collect();
    unsafe {
        let mut padded = t.cands.clone(); padded.push(t.taken as u64 | LASTB);
        CANDS = padded.as_ptr(); FIRST = t.first.as_ptr(); END = end.as_ptr(); BYKEY = bykey.as_ptr(); OH = s.oh.as_ptr();
        USED[t.taken] = 1; LEFT = b;
        let st = Instant::now();
        match a[2].as_str() {
            "s" => { s0(_mm_setzero_si128(), _mm_setzero_si128(), 0); }
            "b" => { b0(0); }
            "e" => { e0(0); }
            "q" => { q0(0); }
            _ => { let mut wk = fresh(&t, n); scalar(&t, &mut wk, 0, b); COUNT[..t.l].copy_from_slice(&wk.count[..t.l]); }
        }
        let e = st.elapsed().as_secs_f64();
        let c = &*(&raw const COUNT);
        let tot: u64 = c.iter().sum();
        let mut hsh: u64 = 0; for (k, &v) in c.iter().enumerate() { hsh = hsh.wrapping_mul(1000003).wrapping_add(v ^ k as u64); }
        println!("{} {} nodes hash {:x} {:.1} M/s", a[2], tot, hsh, tot as f64 / e / 1e6);
    }
}
''']
P = out.append


def cls(x, y):
    xc = 0 if x == 0 else (2 if x == W - 1 else 1)
    yc = 0 if y == 0 else (2 if y == H - 1 else 1)
    return yc * 3 + xc


for mode in ('s', 'b', 'e', 'q'):
    for d in range(L + 1):
        inl = '#[inline(never)]' if d % GROUP == 0 else '#[inline(always)]'
        if mode == 's':
            P(f"{inl} unsafe fn s{d}(clo: __m128i, chi: __m128i, lc: u32) -> bool {{")
        else:
            P(f"{inl} unsafe fn {mode}{d}(lc: u32) -> bool {{")
        if d == L:
            P("false }")
            continue
        x, y = d % W, d // W
        kb, lm, abv = cls(x, y) * CS * CS, (0xFF if x > 0 else 0), (d - W if y > 0 else ZERO)
        P(f" let top = ((*(&raw const BOARD).cast::<u64>().add({abv}) >> 24) & 0xFF) as u32;")
        place = (f"*(&raw mut BOARD).cast::<u64>().add({d}) = c; *(&raw mut COUNT).cast::<u64>().add({d}) += 1;"
                 " LEFT -= 1; if LEFT == 0 { return true; }")
        if mode == 's':
            P(f" let k = {kb} + (lc & {lm}) * 32 + top; let r = &*BYKEY.add(k as usize);")
            P(" let mut f = free_of(clo, chi, r); let cb = r.base as usize;")
            P(" while f != 0 { let i = f.trailing_zeros() as usize; f &= f - 1; let c = *CANDS.add(cb + i);")
            P(f"  {place}")
            P("  let o = &*OH.add((c & 0xFFFF) as usize);")
            P(f"  if s{d + 1}(_mm_or_si128(clo, o[0]), _mm_or_si128(chi, o[1]), (c >> 16) as u32 & 0xFF) {{ return true; }} }}")
        elif mode == 'q':
            P(f" let k = {kb} + (lc & {lm}) * 32 + top; let mut i = *FIRST.add(k as usize) as usize;")
            P(" let mut c = *CANDS.add(i); let mut u = *(&raw const USED).cast::<u8>().add((c & 0xFFFF) as usize);")
            P(" loop { let cn = *CANDS.add(i + 1); let un = *(&raw const USED).cast::<u8>().add((cn & 0xFFFF) as usize);")
            P("  if u == 0 { let p = (c & 0xFFFF) as usize; let up = (&raw mut USED).cast::<u8>().add(p); *up = 1;")
            P(f"   {place}")
            P(f"   if q{d + 1}((c >> 16) as u32 & 0xFF) {{ return true; }} *up = 0;")
            P("   if c & LASTB != 0 { break; } i += 1; c = *CANDS.add(i); u = *(&raw const USED).cast::<u8>().add((c & 0xFFFF) as usize);")
            P("  } else { if c & LASTB != 0 { break; } i += 1; c = cn; u = un; } }")
        elif mode == 'e':
            P(f" let k = {kb} + (lc & {lm}) * 32 + top; let mut i = *FIRST.add(k as usize) as usize; let e = *END.add(k as usize) as usize;")
            P(" while i < e { let c = *CANDS.add(i); let p = (c & 0xFFFF) as usize; let u = (&raw mut USED).cast::<u8>().add(p);")
            P(f"  if *u == 0 {{ *u = 1; {place}")
            P(f"   if e{d + 1}((c >> 16) as u32 & 0xFF) {{ return true; }} *u = 0; }}")
            P("  i += 1; }")
        else:
            P(f" let k = {kb} + (lc & {lm}) * 32 + top; let mut i = *FIRST.add(k as usize) as usize;")
            P(" loop { let c = *CANDS.add(i); let p = (c & 0xFFFF) as usize; let u = (&raw mut USED).cast::<u8>().add(p);")
            P(f"  if *u == 0 {{ *u = 1; {place}")
            P(f"   if b{d + 1}((c >> 16) as u32 & 0xFF) {{ return true; }} *u = 0; }}")
            P("  if c & LASTB != 0 { break; } i += 1; }")
        P(" false }")
print('\n'.join(out))
