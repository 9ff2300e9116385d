#!/usr/bin/env python3
"""What a generated engine's node waits on: the same program built as it is and with a few
cycles of latency added to one step, then timed alternated (ab.py, which checks first that
both count the same).

    tools/enginebench/chain_probe.py SOURCE.rs RUNTIME.rlib [NODES [ROUNDS]] \\
        [--at chain|used|target] [--cycles 3|6|9...]

SOURCE.rs: `e2fleet-worker bench --board B --walk list|slots --seconds 0.3 --runs 1
--cache-dir C --emit-source SOURCE.rs`; RUNTIME.rlib: `C/libe2fleet_rt-*.rlib`. The step
delayed (`--at`):

- `chain` (the default): the step each walk cannot start the next node without. A mask
  level (boards of at most 128 pieces): the load of the candidate a free bit stands for,
  `*r{d}.add(p{d})`, whose colour makes the next key; and where the next level looks its
  bucket up from the slot in hand (`NEXT`), that lookup, which is then the chain. A list
  level (larger boards): the load of the next bucket's first candidate, `FIRST[k{d}]`.
- `used`: a list level's used test, `st.used[p{d}]`, so each test resolves later (a
  mispredicted one is found out later).
- `target`: the slot walk's call target, the key `bf(k)` reads `BFT` with.

The delay is `imul r, r, 1` in inline assembly, `--cycles / 3` of them in a row (3 cycles
each, one instruction, nothing LLVM can fold). If the node waits on the step every time,
each node costs the added cycles more (a ratio of about 1 - cycles / cycles per node); if
it waits on something else, one instruction more. A ratio in between says how often the
step is waited on, for the delay given: lengthening a step measures its slack, and a
shorter step need not gain as much (docs/benchmarks.md, session 19).

Issue #15 figures. Session 17 (`chain`, 3 cycles, then from a multiply by a volatile 1):
Brendan set 1 7x7's mask walk 0.907-0.913 (+2.3-2.5 cycles a node), bench-hard's list
walk 0.935-0.982 (+0.5-1.5). Session 19 (9 cycles, the real E2 pieces): list walk `chain`
0.861 (+4.5), `used` 0.815 (+6.3); the real E2's slot walk `target` 0.869 (+4.2); set 1
8x8's mask walk `chain` 0.824 (+5.5).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab  # noqa: E402

# engine/src/compiled/toolchain.rs and mod.rs: the list and mask walks' flags (the slot
# walk's add -Copt-level=s)
FLAGS = ['--edition=2021', '-Copt-level=3', '-Cpanic=abort', '-Cdebuginfo=0', '-Ctarget-cpu=native',
         '-Crelocation-model=static', '-Ccodegen-units=4', '-Clto=off']


def delay_fn(cycles):
    """A function that returns its argument `cycles` later (x86-64)."""
    imuls = '\\n'.join(['imul {0}, {0}, 1'] * (cycles // 3))
    return ('#[inline(always)]\n'
            'fn delay(mut x: usize) -> usize {\n'
            f'    unsafe {{ core::arch::asm!("{imuls}", inout(reg) x, options(pure, nomem, nostack)) }}\n'
            '    x\n'
            '}\n')


def delayed(src, at, cycles):
    """The source with the step `at` delayed by `cycles`, and how many places changed."""
    if at == 'chain':
        out, a = re.subn(r'unsafe \{ \*r(\d+)\.add\(p\1\) \}', r'unsafe { *r\1.add(delay(p\1)) }', src)
        out, b = re.subn(r'unsafe \{ \*NEXT(\d+)\.as_ptr\(\)\.add\((.*?)\) \}',
                         r'unsafe { *NEXT\1.as_ptr().add(delay(\2)) }', out)
        out, c = re.subn(r'= FIRST\[k(\d+)\];', r'= FIRST[delay(k\1)];', out)
        n = a + b + c
    elif at == 'used':
        out, n = re.subn(r'if !\(st\.used\[p(\d+)\] != 0\) \{', r'if delay(st.used[p\1] as usize) == 0 {', src)
    else:
        out, n = re.subn(r'(fn bf\(k: usize\) -> Bf \{.*?)\.add\(k\)', r'\1.add(delay(k))', src)
    return out.replace('static mut ST:', delay_fn(cycles) + 'static mut ST:', 1), n


def build(source, runtime, binary, slots):
    flags = FLAGS + (['-Copt-level=s'] if slots else [])
    subprocess.run(['rustc', *flags, '--extern', f'e2fleet_rt={runtime}', source, '-o', binary],
                   check=True, stderr=subprocess.DEVNULL)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('source')
    p.add_argument('runtime')
    p.add_argument('nodes', nargs='?', type=int, default=300_000_000)
    p.add_argument('rounds', nargs='?', type=int, default=5)
    p.add_argument('--at', choices=['chain', 'used', 'target'], default='chain')
    p.add_argument('--cycles', type=int, default=3)
    a = p.parse_args()
    if a.cycles < 3 or a.cycles % 3:
        sys.exit('--cycles: a multiple of 3 (one imul each)')
    src = open(a.source).read()
    slots = 'fn bf(k: usize)' in src
    slow, n = delayed(src, a.at, a.cycles)
    if n == 0:
        sys.exit(f'{a.source}: nothing to delay at {a.at!r} (chain: mask and list levels; '
                 'used: list levels; target: the slot walk)')
    print(f'delayed {a.at} by {a.cycles} cycles in {n} places')
    with tempfile.TemporaryDirectory() as tmp:
        slow_src = os.path.join(tmp, 'delayed.rs')
        open(slow_src, 'w').write(slow)
        base, late = os.path.join(tmp, 'as_is'), os.path.join(tmp, 'delayed')
        build(a.source, a.runtime, base, slots)
        build(slow_src, a.runtime, late, slots)
        ab.compare(a.nodes, a.rounds, [base, late])


if __name__ == '__main__':
    main()
