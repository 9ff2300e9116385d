#!/usr/bin/env bash
# Runs e2fleet across emulated internet links on this machine (root: hosts are network
# namespaces). `tools/netfleet/run.sh list` names the scenarios; `tools/netfleet/run.sh
# partition-long` runs one in its full form, `--quick` the short form the tests run,
# `all` every scenario. Builds what it needs first (the workspace's development profile,
# the one the tests and ./local-fleet.sh share).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "$(id -u)" != 0 ]; then
  echo "tools/netfleet/run.sh: needs root (it makes network namespaces); try sudo" >&2
  exit 1
fi
cargo build --quiet -p e2fleet-coordinator -p e2fleet-worker -p e2fleet-netfleet
if [ "${1:-}" = list ]; then
  exec target/debug/e2fleet-netfleet list
fi
exec target/debug/e2fleet-netfleet run "$@"
