#!/usr/bin/env python3
"""Instructions, conditional branches and (callgrind's model of) mispredicts per node.

    tools/enginebench/instr.py ENGINE_BIN [NODES]

ENGINE_BIN: a compiled engine built without AVX-512 (valgrind cannot run it): `bench
--target-cpu x86-64-v3` (or `generic`) with its own `--cache-dir`, then the
`e2fleet-engine-<key>` there. It walks NODES (default 20,000,000) nodes from the root
under `valgrind --tool=callgrind --branch-sim=yes`, then 1 node, and divides the
difference by NODES - 1, so start-up and table loading drop out. Exact and repeatable:
the figure to quote beside a speed.
"""
import re, subprocess, sys


def events(binary, nodes):
    p = subprocess.Popen(['valgrind', '--tool=callgrind', '--branch-sim=yes', '--callgrind-out-file=/dev/null', binary],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdout.readline()
    p.stdin.write(f'run {nodes} 1 - -\n')
    p.stdin.flush()
    for line in p.stdout:
        if line.startswith('end'):
            break
    p.stdin.close()
    err = p.stderr.read()
    p.wait()
    m = re.search(r'Collected : ([\d ]+)', err)
    if not m:
        sys.exit(f'valgrind: {err[-600:]}')
    # events: Ir Bc Bcm Bi Bim
    return [int(x) for x in m.group(1).split()]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    nodes = int(sys.argv[2]) if len(sys.argv) > 2 else 20_000_000
    big, one = events(binary, nodes), events(binary, 1)
    per = [(b - o) / (nodes - 1) for b, o in zip(big, one)]
    print(f'{per[0]:.2f} instructions, {per[1]:.2f} conditional branches, {per[2]:.3f} mispredicted (model), '
          f'{per[3]:.3f} indirect, {per[4]:.3f} mispredicted, per node')


if __name__ == '__main__':
    main()
