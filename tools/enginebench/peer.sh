#!/usr/bin/env bash
# Builds the public Rust engine (dfs-codegen, github.com/raphael-anjou/eternity2) in DIR,
# outside this repository, for side-by-side runs (side_by_side.py). Nothing of it is
# copied into e2fleet.
#
#   tools/enginebench/peer.sh [DIR]                 # default ../peer, beside the clone
#   E2_PEER_GIT_DIR=/path/to/repo.git tools/enginebench/peer.sh DIR   # from a local mirror
#
# Prints the path of run_dfs_codegen_jit. Its runs: `--chain2 --opt native --budget-s N
# --puzzle P.json` (site JSON), nodes/s in its `nps=` field.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(realpath -m "${1:-"$here/../peer"}")
case "$dir/" in "$here"/*) echo "peer.sh: build it outside this repository, not in $dir" >&2; exit 2 ;; esac
mkdir -p "$dir"
engine="$dir/research/experiments/dfs-study/engine"
paths=(research/experiments/dfs-study/engine research/experiments/common)
if [ ! -f "$engine/Cargo.toml" ]; then
  if [ -n "${E2_PEER_GIT_DIR:-}" ]; then
    git --git-dir="$E2_PEER_GIT_DIR" archive HEAD "${paths[@]}" | tar x -C "$dir"
  else
    tmp=$(mktemp -d)
    git clone -q --depth 1 --filter=blob:none --sparse https://github.com/raphael-anjou/eternity2 "$tmp/src"
    git -C "$tmp/src" sparse-checkout set "${paths[@]}"
    (cd "$tmp/src" && tar c "${paths[@]}") | tar x -C "$dir"
    rm -rf "$tmp"
  fi
fi
(cd "$engine" && cargo build --release -q)
echo "$engine/target/release/run_dfs_codegen_jit"
