#!/usr/bin/env python3
"""Whether a generated engine waits on the dependent chain from one node to the next: the
same program built as it is and with 3 cycles added to one step of that chain, then timed
alternated (ab.py, which checks first that both count the same).

    tools/enginebench/chain_probe.py SOURCE.rs RUNTIME.rlib [NODES [ROUNDS]]

SOURCE.rs: `e2fleet-worker bench --board B --walk list --seconds 0.3 --runs 1 --cache-dir C
--emit-source SOURCE.rs`; RUNTIME.rlib: `C/libe2fleet_rt-*.rlib`. The step delayed is the
one each walk cannot start the next node without:

- a mask level (boards of at most 128 pieces): the load of the candidate a free bit stands
  for, `*r{d}.add(p{d})`, whose colour makes the next key; and where the next level looks
  its bucket up from the slot in hand (`NEXT`), that lookup, which is then the chain (the
  candidate's load is then off it, and its delay costs an instruction);
- a list level (larger boards): the load of the next bucket's first candidate,
  `FIRST[k{d}]`.

The delay is a multiply by 1 read from a volatile static (`imul`, 3 cycles, and a load off
the chain). If the node waits on the chain, each node costs ~3 cycles more (a ratio of
about 1 - 3 / cycles per node); if it waits on something else (mispredicted branches), the
ratio stays near 1 (one instruction more). Issue #15, session 17: Brendan set 1 7x7's mask
walk 0.907-0.913 (+2.3-2.5 cycles a node), bench-hard's list walk 0.935-0.982 (+0.5-1.5).
"""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab  # noqa: E402

# engine/src/compiled/toolchain.rs, the list walk's flags
FLAGS = ['--edition=2021', '-Copt-level=3', '-Cpanic=abort', '-Cdebuginfo=0', '-Ctarget-cpu=native',
         '-Crelocation-model=static', '-Ccodegen-units=4', '-Clto=off']

ONE = ('static mut ONE: usize = 1;\n#[inline(always)]\n'
       'fn one() -> usize { unsafe { core::ptr::read_volatile(&raw const ONE) } }\n')


def delayed(src):
    """The source with the chain's step delayed, and how many levels were changed."""
    out, mask = re.subn(r'unsafe \{ \*r(\d+)\.add\(p\1\) \}', r'unsafe { *r\1.add(p\1 * one()) }', src)
    out, chained = re.subn(r'unsafe \{ \*NEXT(\d+)\.as_ptr\(\)\.add\((.*?)\) \}',
                           r'unsafe { *NEXT\1.as_ptr().add((\2) * one()) }', out)
    out, lists = re.subn(r'= FIRST\[k(\d+)\];', r'= FIRST[k\1 * one()];', out)
    return out.replace('static mut ST:', ONE + 'static mut ST:', 1), mask + chained, lists


def build(source, runtime, binary):
    subprocess.run(['rustc', *FLAGS, '--extern', f'e2fleet_rt={runtime}', source, '-o', binary],
                   check=True, stderr=subprocess.DEVNULL)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    source, runtime = sys.argv[1], sys.argv[2]
    nodes = int(sys.argv[3]) if len(sys.argv) > 3 else 300_000_000
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    src = open(source).read()
    slow, mask, lists = delayed(src)
    if mask + lists == 0:
        sys.exit(f'{source}: no mask or list level found (a slot walk has neither)')
    print(f'delayed: {mask} mask levels, {lists} list levels')
    with tempfile.TemporaryDirectory() as tmp:
        slow_src = os.path.join(tmp, 'delayed.rs')
        open(slow_src, 'w').write(slow)
        base, late = os.path.join(tmp, 'as_is'), os.path.join(tmp, 'delayed')
        build(source, runtime, base)
        build(slow_src, runtime, late)
        ab.compare(nodes, rounds, [base, late])


if __name__ == '__main__':
    main()
