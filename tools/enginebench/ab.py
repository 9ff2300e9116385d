#!/usr/bin/env python3
"""Engine binaries against each other, alternated run by run, from the root of their puzzle.

    tools/enginebench/ab.py NODES ROUNDS BASELINE OTHER...

Each binary is a compiled engine: a cached one (the cache directory's
`e2fleet-engine-<key>`; `bench --cache-dir D` puts them where you want) or a hand build of
a source `bench --emit-source F` wrote, edited or not (rustc with the flags of
engine/src/compiled/toolchain.rs and `--extern e2fleet_rt=` the cached runtime library).
Every binary walks NODES nodes from the root (`run NODES 1 - -` on its stdin) once per
round, in turn, the order reversed every other round; the output is each one's median M
nodes/s and the median of its per-round ratio to BASELINE. First every binary walks
min(NODES, 50,000,000) nodes and must report what BASELINE reports (its `result`, `nodes`,
`cursor`, `deepest` and solution lines): an edited build that counts differently is refused.
"""
import statistics as st, subprocess, sys, time


def start(binary):
    p = subprocess.Popen([binary], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    p.stdout.readline()  # the engine's hello
    return p


def walk(p, nodes):
    t = time.perf_counter()
    p.stdin.write(f'run {nodes} 1 - -\n')
    p.stdin.flush()
    done = 0
    for line in p.stdout:
        if line.startswith('nodes '):
            done = sum(int(x) for x in line.split()[1:])
        if line.startswith('end'):
            break
    return done / (time.perf_counter() - t) / 1e6


def report(binary, nodes):
    """What a fresh run of `binary` reports for `nodes` nodes from the root, progress
    lines left out."""
    p = start(binary)
    p.stdin.write(f'run {nodes} 1 - -\n')
    p.stdin.flush()
    lines = []
    for line in p.stdout:
        if not line.startswith('progress'):
            lines.append(line)
        if line.startswith('end'):
            break
    p.stdin.close()
    p.wait()
    return lines


def check_counts(binaries, nodes):
    """Exits unless every binary reports what the first does."""
    nodes = min(nodes, 50_000_000)
    want = report(binaries[0], nodes)
    for b in binaries[1:]:
        got = report(b, nodes)
        if got != want:
            first = next(i for i, (x, y) in enumerate(zip(want + [''], got + [''])) if x != y)
            sys.exit(f'{b} counts differently from {binaries[0]} over {nodes} nodes:\n'
                     f'  {want[first][:160] if first < len(want) else "(nothing)"}\n'
                     f'  {got[first][:160] if first < len(got) else "(nothing)"}')


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    compare(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:])


def compare(nodes, rounds, binaries):
    """Checks the counts, then times the binaries alternated and prints the medians."""
    check_counts(binaries, nodes)
    procs = [start(b) for b in binaries]
    rates = [[] for _ in binaries]
    for r in range(rounds):
        order = range(len(binaries)) if r % 2 == 0 else reversed(range(len(binaries)))
        for i in order:
            rates[i].append(walk(procs[i], nodes))
    for i, b in enumerate(binaries):
        per = [x / y for x, y in zip(rates[i], rates[0])]
        print(f'{b}: median {st.median(rates[i]):.1f} M nodes/s, per-round ratio to the first '
              f'{st.median(per):.3f}  [{" ".join(f"{x:.1f}" for x in rates[i])}]')
    for p in procs:
        p.stdin.close()
        p.wait()


if __name__ == '__main__':
    main()
