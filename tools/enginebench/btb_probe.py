#!/usr/bin/env python3
"""How many taken branches this core's branch target buffers hold.

    tools/enginebench/btb_probe.py [--ghz 2.8]

Writes and builds (rustc -O, in a temporary directory) a program of chains of N taken
`jmp`s, each to the next, 4, 8 or 16 bytes apart, looped, and prints the time per jump for
N from 256 to 16,384: flat while the buffers hold the chain, then a cliff (a jump the
buffers miss is found only when decoded). A diagnostic for walks with many branch sites
(the slot walk; docs/benchmarks.md, session 16), x86-64 only.
"""
import argparse, os, subprocess, sys, tempfile

SIZES = [256, 512, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384]
SPACINGS = [4, 8, 16]


def program():
    out = ['use std::time::Instant;', 'use std::arch::global_asm;']
    fns = []
    for s in SPACINGS:
        for n in SIZES:
            name = f'chain_{s}_{n}'
            body = [f'.globl {name}', '.p2align 6', f'{name}:', 'mov rcx, rdi', '.p2align 6', '2:']
            for _ in range(n):
                body += ['jmp 3f', f'.skip {s - 2}, 0xcc', '3:']
            body += ['dec rcx', 'jnz 2b', 'ret']
            out.append('global_asm!(' + ', '.join(f'"{line}"' for line in body) + ');')
            fns.append((name, s, n))
    out.append('extern "C" {' + ' '.join(f'fn {f}(it: u64);' for f, _, _ in fns) + '}')
    out.append('fn main() { let ghz: f64 = std::env::args().nth(1).unwrap().parse().unwrap(); unsafe {')
    for f, s, n in fns:
        it = max(1, 200_000_000 // n)
        out.append(f'{f}({it}); let t = Instant::now(); {f}({it}); let e = t.elapsed().as_secs_f64() / ({it} as f64 * {n} as f64);'
                   f' println!("{s:2} bytes apart, {n:6} jumps: {{:.2}} ns = {{:.1}} cycles a jump", e * 1e9, e * ghz * 1e9);')
    out.append('} }')
    return '\n'.join(out)


def main():
    a = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    a.add_argument('--ghz', type=float, default=2.8, help="the clock, for cycles (e2fleet-worker bench prints it)")
    args = a.parse_args()
    d = tempfile.mkdtemp()
    src, exe = os.path.join(d, 'btb.rs'), os.path.join(d, 'btb')
    open(src, 'w').write(program())
    subprocess.run(['rustc', '-O', src, '-o', exe], check=True)
    sys.exit(subprocess.run([exe, str(args.ghz)]).returncode)


if __name__ == '__main__':
    main()
