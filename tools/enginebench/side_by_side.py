#!/usr/bin/env python3
"""Ours against the public engine (and against other builds of ours), alternated run by run.

    tools/enginebench/side_by_side.py --peer PEER_BIN puzzles/bench/bench-hard.json \\
        [--worker target/release/e2fleet-worker] [--walk auto|list|slots ...] \\
        [--engine auto|lanes|compiled ...] [--old OLD_WORKER] [--rounds 5] [--seconds 4] \\
        [--split-depth D --unit-budget N]

Each round runs, in turn (the order reversed every other round), `e2fleet-worker bench
--board B --seconds S --runs 1 --walk W --json` for every walk asked for, the same for an
older worker (`--old`, e.g. a build of the commit an issue was filed on, in a git worktree)
and the public engine's `run_dfs_codegen_jit --chain2 --opt native --budget-s S --puzzle
B.json` (built by peer.sh). It prints per-engine medians of M nodes/s and of cycles per node
(our bench's `cycles_per_node`; the public engine's from the clock our runs measured in
the same round), and the ratios of the medians and the median of the per-round ratios.
With `--split-depth D --unit-budget N` our runs walk the units a job split at depth D
would lease, each to at most N nodes (`bench --split-depth D --unit-budget N`): the
per-core speed a fleet sees; without, the root as one unit (which the lane engine walks
in all its lanes, cut into pieces). Either way `--engine auto`'s race decides between
the lane and the compiled engines unless `--engine` names engines to run side by side.
The public engine has no units; it walks from the root as always, so that comparison is
of the same board and the same depths (the nodes of a hard 16x16 board are 150-180 deep either way), not of the
same nodes.
Boards in Brendan's text format (a `W H` line, then `u r d l` per piece) and site JSON of
schema C (`size`, `num_colors`: the planted boards) are written as site JSON of schema A
for the public engine next to a temporary copy; schema A boards go as they are.
Don't compile or run anything else while it runs: both cores are the measurement.
"""
import argparse, json, os, re, statistics as st, subprocess, sys, tempfile


def site_json(board, tmp):
    if board.endswith('.json'):
        j = json.load(open(board))
        if 'width' in j:
            return board
        # schema C (`size`, `num_colors`: the planted boards): the public engine reads
        # schema A, so the same board is written as that next to a temporary copy
        out = os.path.join(tmp, os.path.basename(board))
        with open(out, 'w') as f:
            json.dump({'name': j.get('name', os.path.basename(board)), 'width': j['size'],
                       'height': j['size'], 'numColors': j['num_colors'],
                       'pieces': j['pieces'], 'hints': j.get('hints', [])}, f)
        return out
    rows = [l.split() for l in open(board) if l.strip()]
    if len(rows[0]) != 2:
        sys.exit(f'{board}: not a "W H" text board; give the public engine site JSON')
    w, h = int(rows[0][0]), int(rows[0][1])
    pieces = [[int(x) for x in r[:4]] for r in rows[1:]]
    out = os.path.join(tmp, os.path.basename(board) + '.json')
    with open(out, 'w') as f:
        json.dump({'name': os.path.basename(board), 'width': w, 'height': h,
                   'numColors': max(max(p) for p in pieces) + 1, 'pieces': pieces, 'hints': []}, f)
    return out


SPLIT = []  # `--split-depth D --unit-budget N` for our runs, when asked for


def ours(worker, board, seconds, walk, engine=None):
    cmd = [worker, 'bench', '--board', board, '--seconds', str(seconds), '--runs', '1', '--json']
    cmd += SPLIT
    if walk:
        cmd += ['--walk', walk]
    if engine:
        cmd += ['--engine', engine]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f'{" ".join(cmd)}: {out.stderr.strip()}')
    j = json.loads(out.stdout.strip().splitlines()[-1])
    return j['median_nodes_per_s'] / 1e6, j.get('clock_ghz')


def peer(binary, board_json, seconds):
    out = subprocess.run([binary, '--chain2', '--opt', 'native', '--budget-s', str(seconds),
                          '--puzzle', board_json], capture_output=True, text=True)
    m = re.search(r'nps=(\d+)', out.stdout + out.stderr)
    if not m:
        sys.exit(f'public engine: no nps= in its output: {out.stderr.strip()[-400:]}')
    return int(m.group(1)) / 1e6, None


def main():
    a = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    a.add_argument('board')
    a.add_argument('--peer', help='run_dfs_codegen_jit (peer.sh prints its path)')
    a.add_argument('--worker', default='target/release/e2fleet-worker')
    a.add_argument('--walk', action='append', help='walks of ours to run (default: the worker\'s default)')
    a.add_argument('--engine', action='append', help='engines of ours to run, each beside the walks (auto, lanes, compiled)')
    a.add_argument('--old', help='an older e2fleet-worker to run beside (its default walk)')
    a.add_argument('--rounds', type=int, default=5)
    a.add_argument('--seconds', type=float, default=4)
    a.add_argument('--split-depth', type=int, help='our runs walk a split\'s units (see above)')
    a.add_argument('--unit-budget', type=int, default=5_000_000)
    args = a.parse_args()
    if args.split_depth is not None:
        SPLIT.extend(['--split-depth', str(args.split_depth), '--unit-budget', str(args.unit_budget)])
    # (name, worker, walk, engine) for ours; the first run of each compiles and caches its
    # engine (and runs `auto`'s race)
    mine = [(f'ours ({w})' if w else 'ours', args.worker, w, None) for w in (args.walk or [None])]
    if args.engine:
        mine = [(f'ours ({e})', args.worker, None, e) for e in args.engine] + (mine if args.walk else [])
    if args.old:
        mine.append(('old', args.old, None, None))
    for _, worker, walk, engine in mine:
        ours(worker, args.board, 0.5, walk, engine)
    engines = [(n, lambda wk=wk, w=w, e=e: ours(wk, args.board, args.seconds, w, e))
               for n, wk, w, e in mine]
    if args.peer:
        pj = site_json(args.board, tempfile.mkdtemp())
        engines.append(('public', lambda: peer(args.peer, pj, args.seconds)))
    rates = {n: [] for n, _ in engines}
    clocks = []  # GHz, as our runs measured it
    for r in range(args.rounds):
        order = engines if r % 2 == 0 else list(reversed(engines))
        for name, run in order:
            rate, ghz = run()
            rates[name].append(rate)
            if ghz:
                clocks.append(ghz)
    base = engines[0][0]
    units = f', ours on a split at depth {args.split_depth} ({args.unit_budget} nodes a unit at most)' if SPLIT else ''
    print(f'{args.board}: {args.rounds} alternated rounds of {args.seconds:g} s{units}')
    ghz = st.median(clocks) if clocks else None
    for name, _ in engines:
        v = rates[name]
        cyc = f', {ghz * 1e3 / st.median(v):.1f} cycles/node at ~{ghz:.2f} GHz' if ghz else ''
        line = f'  {name:14} {st.median(v):7.1f} M nodes/s{cyc}  [{" ".join(f"{x:.1f}" for x in v)}]'
        if name != base:
            per = [b / x for b, x in zip(rates[base], v)]
            line += f'  {base} / {name}: {st.median(rates[base]) / st.median(v):.3f} (per round {st.median(per):.3f})'
        print(line)


if __name__ == '__main__':
    main()
