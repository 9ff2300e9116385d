#!/usr/bin/env python3
"""The prototype of the generator's slot walk (`--slots`, engine/src/compiled/codegen.rs):
a generated list-walk program rewritten as a slot walk, kept to reproduce the measurements.

Issue #15, session 11 (docs/benchmarks.md, "session 11"). Each candidate bucket becomes a
function with one static used-test branch and one call site per candidate slot (the
predictor sees one branch per slot, not one per depth), a placement is counted by the
callee (the next depth's bucket, reached through a key -> function table) on entry, and
a bucket reached from a single depth has that depth's cells as constants. Every node
count, cursor, deepest board and solution is the list walk's (checked on bench-hard,
bench-easy's whole tree, the real E2 boards and resumed cursors); faster on hard 16x16
boards, slower on easy ones: see docs/benchmarks.md.

    e2fleet-worker bench --board B --seconds 0.3 --runs 1 --cache-dir C --emit-source B.rs
    python3 docs/experiments/slot_walk.py B.rs B-slots.rs
    rustc --edition=2021 -Copt-level=s -Ccodegen-units=1 -Cpanic=abort -Ctarget-cpu=native \
        --extern e2fleet_rt=C/libe2fleet_rt-*.rlib -o B-slots B-slots.rs
    # then feed either binary "run 300000000 1 - -" on stdin and time it to the "end" line

Only boards of more than 128 pieces (the list walk) in an order without extra-side
checks (every row-major order) are handled.
"""
import re, sys
src, out = sys.argv[1], sys.argv[2]
s = open(src).read()
S = 0xffffffffffffffff
def arr(name, ty):
    m = re.search(r'static %s: \[%s; (\d+)\] = \[(.*?)\];' % (name, re.escape(ty)), s, re.S)
    body = m.group(2).replace('\n', '')
    return [S if x.strip() == 'S' else int(x, 0) for x in body.split(',') if x.strip()]
cands = arr('CANDS', 'u64'); offs = arr('OFFS', 'u32'); dpos = arr('DPOS', 'u16')
m = re.search(r'static DKEY: \[\[u32; 6\]; (\d+)\] = \[(.*?)\];', s, re.S)
dkey = [list(map(int, t.split(','))) for t in re.findall(r'\[([\d, ]+)\]', m.group(2))]
depths = len(dpos)
assert all(k[5] == 0 for k in dkey), 'orders with extra-side checks are not handled'
assert 'static CANDS' in s and 'static MASK' not in s, 'list-walk boards only (more than 128 pieces)'
stride = int(re.search(r'stride_log2: (\d+)', s).group(1))
tsize = 1 << (2 * stride)
ncells = int(re.search(r'Program \{ cells: (\d+)', s).group(1))
i0 = s.index('fn g0(')
j = s.rfind('#[', 0, i0)
if j > s.rfind('}\n', 0, i0): i0 = j
i1 = s.index('static HEADS'); i2 = s.index('\n', i1) + 1
head, tail = s[:i0], s[i2:]
# the depths that can reach each bucket (keys of their table)
reach = {}
for d in range(depths):
    base = dkey[d][0]
    for k in range(base, base + tsize):
        x = offs[k]
        if cands[x] != S:
            reach.setdefault(x, set()).add(d)
SOLKEY = len(offs)
# Keys whose high colour is the previous depth's placed cell and whose low colour is not
# (a cell below a hint, keyed by its left colour alone) are read through a transposed copy
# of their table, so that the placed cell's colour is always the low part of a key.
targets = [('b%d' % x) if x in reach else 'bempty' for x in offs] + ['bsol'] * 256
transposed = {}
for d in range(1, depths):
    k = dkey[d]
    if k[1] == dpos[d - 1] and k[3] != dpos[d - 1]:
        if k[0] not in transposed:
            transposed[k[0]] = len(targets)
            n = 1 << stride
            targets += [targets[k[0] + (a << stride) + b] for b in range(n) for a in range(n)]
        dkey[d] = [transposed[k[0]], k[3], k[4], k[1], k[2], k[5]]
def cell_off(cell, shift): return cell * 16 + shift // 8
nx = [(k[0], cell_off(k[1], k[2]), cell_off(k[3], k[4])) for k in dkey] + [(SOLKEY, ncells * 16, ncells * 16)]
o = []
o.append('type Bf = fn(&mut St, usize, usize) -> bool;\n')
o.append('const DEPTHS: usize = %d;\n' % depths)
o.append('static NX: [(u32, u16, u16); %d] = [%s];\n' % (depths + 1, ','.join('(%d,%d,%d)' % t for t in nx)))
# ME[d]: which of depth d's key colours (1: high, 2: low) is the previous depth's placed cell
o.append('static ME: [u8; %d] = [%s];\n' % (depths + 1, ','.join(['0'] + [str((dkey[d][1] == dpos[d - 1]) + 2 * (dkey[d][3] == dpos[d - 1])) for d in range(1, depths)] + ['0'])))
o.append('static POS16: [u16; %d] = [%s];\n' % (depths, ','.join(str(p * 16) for p in dpos)))
o.append('''#[inline(always)]
fn colour(st: &St, off: usize) -> usize { unsafe { *(st.cells.as_ptr() as *const u8).add(off) as usize } }
#[inline(always)]
fn cnt(st: &mut St, pos16: usize) -> &mut u64 { unsafe { &mut *((st.cells.as_mut_ptr() as *mut u8).add(pos16 + 8) as *mut u64) } }
#[inline(always)]
fn cell(st: &mut St, pos16: usize) -> &mut u64 { unsafe { &mut *((st.cells.as_mut_ptr() as *mut u8).add(pos16) as *mut u64) } }
#[inline(always)]
fn bf(k: usize) -> Bf { unsafe { *BF.get_unchecked(k) } }
/// The placement of `c` at depth `d - 1`, counted; true if the unit stops here.
#[inline(always)]
fn enter(st: &mut St, d: usize, slot: usize, last: bool) -> bool {
    let c = cand(slot);
    let pos16 = unsafe { *POS16.get_unchecked(d - 1) } as usize;
    *cell(st, pos16) = c;
    let n = cnt(st, pos16); *n = n.wrapping_add(1);
    if *n == 0 { st.first_visit(d - 1); }
    if last { st.solution(); }
    st.left -= 1;
    st.left == 0 && st.slow(d - 1)
}
#[inline(never)]
fn bempty(st: &mut St, d: usize, c: usize) -> bool { enter(st, d, c, false) }
''')
def desc(x):
    # the next depth's key parts: (me?, shift, board offset) for the high and the low colour
    if x + 1 == depths:
        return ((False, 0, ncells * 16), (False, 0, ncells * 16))
    k = dkey[x + 1]
    return tuple((k[c] == dpos[x], k[c + 1], cell_off(k[c], k[c + 1])) for c in (1, 3))
# one function per bucket: count the caller's placement, then try each slot in canonical order
for st0 in sorted(reach):
    ds = reach[st0]
    deeper = sorted(ds)
    o.append('#[inline(never)]\nfn b%d(st: &mut St, d: usize, c: usize) -> bool {\nif enter(st, d, c, false) { return true; }\n' % st0)
    dd = {desc(x) for x in deeper}
    pats = {tuple(p[0] for p in t) for t in dd}
    shifts = {p[1] for t in dd for p in t if p[0]}
    assert len(shifts) <= 1
    sh = shifts.pop() if shifts else 0
    if deeper:
        if len(pats) == 1:
            ame, bme = pats.pop()
            o.append('let nx = unsafe { *NX.get_unchecked(d + 1) }; let kb = nx.0 as usize%s%s;\n' % (
                '' if ame else ' + (colour(st, nx.1 as usize) << %d)' % stride, '' if bme else ' + colour(st, nx.2 as usize)'))
            mode = (ame, bme)
        else:
            o.append('let nx = unsafe { *NX.get_unchecked(d + 1) }; let me = unsafe { *ME.get_unchecked(d + 1) }; let mul = [0usize, %d, 1, %d][me as usize & 3]; let kb = nx.0 as usize + (if me & 1 != 0 { 0 } else { colour(st, nx.1 as usize) << %d }) + (if me & 2 != 0 { 0 } else { colour(st, nx.2 as usize) });\n' % (1 << stride, (1 << stride) + 1, stride))
            mode = None
    i = st0
    while cands[i] != S:
        c = cands[i]; p = (c >> 32) & 1023
        r = (c >> sh) & 0xFF
        if mode is None:
            key = 'kb + %d * mul' % r
        else:
            key = 'kb' + (' + %d' % (r << stride) if mode[0] else '') + (' + %d' % r if mode[1] else '')
        o.append('if st.used[%d] == 0 {\nst.used[%d] = 1;\nif bf(%s)(st, d + 1, %d) { return true; }\nst.used[%d] = 0;\n}\n' % (p, p, key, i, p))
        i += 1
    o.append('false\n}\n')
o.append('#[inline(never)]\nfn bsol(st: &mut St, d: usize, c: usize) -> bool { enter(st, d, c, true) }\n')
o.append('static BF: [Bf; %d] = [%s];\n' % (len(targets), ','.join(targets)))
for d in range(1, depths):
    # scan has counted the placement at d - 1: take that count back, the callee counts it again
    o.append('fn h%d(st: &mut St) -> bool { let pos16 = POS16[%d] as usize; let n = cnt(st, pos16); *n = n.wrapping_sub(1); st.left += 1; let c = *cell(st, pos16); let slot = CANDS.iter().position(|&x| x == c).unwrap(); let nx = NX[%d]; let k = nx.0 as usize + (colour(st, nx.1 as usize) << %d) + colour(st, nx.2 as usize); BF[k](st, %d, slot) }\n' % (d, d - 1, d, stride, d))
o.append('static HEADS: [Option<fn(&mut St) -> bool>; %d] = [None,%s];\n' % (depths, ','.join('Some(h%d)' % d for d in range(1, depths))))
open(out, 'w').write(head + ''.join(o) + tail)
print(len(reach), 'buckets', file=sys.stderr)
