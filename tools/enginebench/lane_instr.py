#!/usr/bin/env python3
"""Instructions per node of the lane engine's wide kernels on a board's split units.

    tools/enginebench/lane_instr.py WORKER BOARD [SPLIT_DEPTH]

Runs `WORKER bench --engine lanes --split-depth D --unit-budget 5000000` under
`valgrind --tool=callgrind --dump-instr=yes` for 2 and for 8 seconds and divides the
difference of the instructions by the difference of the nodes (start-up drops out).
Valgrind hides AVX-512, so the walk runs the SSSE3 kernel: that figure is exact. The
AVX-512 kernel walks the same nodes in the same rounds (the kernels differ only in how
a child's mask is worked out), so its figure is the same count with the SSSE3 loop's
rounds priced at the AVX-512 loop's length, read off the disassembly (a round is
straight-line code: one pass of each instruction), and the steps taken outside the loop
priced at the difference of the two loops a step.
"""
import collections, json, re, subprocess, sys


def loops(worker):
    """The kernels' loops of six steps: (start, end, instructions, kernel, two reads)."""
    syms = subprocess.run(['nm', '-S', worker], capture_output=True, text=True, check=True).stdout
    found = []
    for line in syms.splitlines():
        parts = line.split()
        if len(parts) != 4 or not re.search(r'kernel\d+drive_(ssse3|avx512)', parts[3]):
            continue
        start, size = int(parts[0], 16), int(parts[1], 16)
        dis = subprocess.run(['objdump', '-d', '--no-show-raw-insn', '-M', 'intel',
                              f'--start-address={start}', f'--stop-address={start + size}', worker],
                             capture_output=True, text=True, check=True).stdout
        ins = [(int(m.group(1), 16), m.group(2), m.group(3)) for m in
               (re.match(r'\s+([0-9a-f]+):\s+(\S+)\s*(.*)', l) for l in dis.splitlines()) if m]
        at = {a: i for i, (a, _, _) in enumerate(ins)}
        for i, (a, op, arg) in enumerate(ins):
            m = re.match(r'([0-9a-f]+) ', arg)
            if not op.startswith('j') or not m or int(m.group(1), 16) not in at:
                continue
            j = at[int(m.group(1), 16)]
            if j >= i:
                continue
            body = ins[j:i + 1]
            shuf = sum('pshufb' in x[1] for x in body)
            perm = sum('vpermb' in x[1] for x in body)
            steps = shuf // 2 if shuf else perm
            if steps != 6:
                continue
            # the second read: the next depth's `b`, at 0x12 from the position
            two = any(x[1] == 'movzx' and '+0x12]' in x[2] for x in body)
            found.append((body[0][0], body[-1][0], len(body), 'ssse3' if shuf else 'avx512', two))
    return found


def run(worker, board, split, seconds):
    out = f'/tmp/lane_instr.{seconds}.out'
    p = subprocess.run(['valgrind', '--tool=callgrind', '--dump-instr=yes', f'--callgrind-out-file={out}',
                        worker, 'bench', '--board', board, '--engine', 'lanes', '--split-depth', str(split),
                        '--unit-budget', '5000000', '--seconds', str(seconds), '--runs', '1', '--json'],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f'valgrind: {p.stderr[-600:]}')
    nodes = json.loads(p.stdout)['runs'][0]['nodes']
    # self cost per instruction address (the `calls=` lines' next line is inclusive: skipped)
    cost, cur, call = collections.Counter(), 0, False
    for line in open(out):
        if line.startswith('calls='):
            call = True
            continue
        m = re.match(r'^(0x[0-9a-f]+|\+\d+|-\d+|\*)\s+\S+\s+(\d+)', line)
        if not m:
            continue
        a = m.group(1)
        cur = int(a, 16) if a.startswith('0x') else cur + int(a) if a[0] in '+-' else cur
        if call:
            call = False
            continue
        cost[cur] += int(m.group(2))
    return nodes, cost


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    worker, board = sys.argv[1], sys.argv[2]
    split = int(sys.argv[3]) if len(sys.argv) > 3 else 12
    found = loops(worker)
    (n2, c2), (n8, c8) = run(worker, board, split, 2), run(worker, board, split, 8)
    dn, dt = n8 - n2, sum(c8.values()) - sum(c2.values())
    # the SSSE3 loop the walk ran, and the AVX-512 loop of the same reads
    def inside(c, lp):
        return sum(v for a, v in c.items() if lp[0] <= a <= lp[1])
    ssse3 = max((l for l in found if l[3] == 'ssse3'), key=lambda l: inside(c8, l))
    avx = [l for l in found if l[3] == 'avx512' and l[4] == ssse3[4]]
    dl = inside(c8, ssse3) - inside(c2, ssse3)
    rounds = dl / ssse3[2]
    print(f'{board}: {dn:,} nodes; SSSE3 kernel {dt / dn:.2f} instructions a node '
          f'(its loop {ssse3[2] / 6:.2f} a step, {"two reads" if ssse3[4] else "one read"})')
    if avx:
        a = min(l[2] for l in avx)
        outside = (dt - dl) - (dn - rounds * 6) * (ssse3[2] - a) / 6
        print(f'{board}: AVX-512 kernel {(rounds * a + outside) / dn:.2f} instructions a node '
              f'(its loop {a / 6:.2f} a step)')


if __name__ == '__main__':
    main()
