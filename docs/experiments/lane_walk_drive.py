"""Walks a list of units on a compiled engine, each under the same budget, and prints
the per-depth counts and the speed: the other side of docs/experiments/lane_walk.rs.

    python3 lane_walk_drive.py ENGINE UNITS_FILE BUDGET
"""
import subprocess, sys, time
eng, pre, per = sys.argv[1], sys.argv[2], int(sys.argv[3])
p = subprocess.Popen([eng], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
p.stdout.readline()
tot = None; walked = 0
prefixes = [l.strip() for l in open(pre) if l.strip()]
t = time.perf_counter()
for pr in prefixes:
    p.stdin.write(f'run {per} 1 {pr} -\n'); p.stdin.flush()
    for line in p.stdout:
        if line.startswith('nodes '):
            v = [int(x) for x in line.split()[1:]]
            tot = v if tot is None else [a + b for a, b in zip(tot, v)]
        if line.startswith('end'): break
el = time.perf_counter() - t
print('depths', ' '.join(map(str, tot)))
print(f'engine walked={sum(tot)} {el:.3f}s {sum(tot)/el/1e6:.1f} M nodes/s')
