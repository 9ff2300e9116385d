#!/usr/bin/env bash
# A local fleet in one command: builds e2fleet, starts a coordinator on a fresh embedded
# SQLite database, submits a puzzle (bench-easy by default), runs a worker on every core,
# shows live progress and ends with the exact verified total and both rates.
#
#   ./local-fleet.sh [PUZZLE] [extra submit flags, e.g. --units 200 --budget 100000000]
#
# Environment (all optional):
#   E2FLEET_PORT=7734           the coordinator's port (default 7733)
#   E2FLEET_THREADS=N           engine threads (default: every core)
#   E2FLEET_WORKER_FLAGS="..."  more flags for the worker, e.g. "--walk list" (the
#                               compiled engine's walk; default: raced per puzzle)
#   E2FLEET_KEEP=1              keep the database and the logs afterwards
#   E2FLEET_EXIT_WHEN_DONE=1    exit at the end instead of keeping the dashboard up (what a
#                               run from a terminal does by default)
set -euo pipefail
cd "$(dirname "$0")"
puzzle=${1:-puzzles/bench/bench-easy.json}
shift || true
submit_flags=("$@")
if [ ${#submit_flags[@]} -eq 0 ]; then
  submit_flags=(--units 100)
fi
port=${E2FLEET_PORT:-7733}
if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
  echo "port $port is in use (another local fleet?): choose another, e.g. E2FLEET_PORT=$((port + 1)) $0 $*"
  exit 1
fi

echo "building e2fleet (the first build takes ~7 minutes on 2 cores of a recent server CPU; \`cargo test\` reuses it)..."
cargo build -p e2fleet-coordinator -p e2fleet-worker
bin=target/debug

work=$(mktemp -d -t e2fleet-local.XXXXXX)
E2FLEET_ENROLL_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
E2FLEET_ADMIN_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
export E2FLEET_ENROLL_TOKEN E2FLEET_ADMIN_TOKEN
export E2FLEET_COORDINATOR="http://127.0.0.1:$port"
coordinator_pid=""
worker_pid=""

cleanup() {
  trap - EXIT INT TERM
  if [ -n "$worker_pid" ] && kill -0 "$worker_pid" 2>/dev/null; then
    kill -TERM "$worker_pid" 2>/dev/null || true   # the worker reports its exact cursors
    wait "$worker_pid" 2>/dev/null || true
  fi
  if [ -n "$coordinator_pid" ] && kill -0 "$coordinator_pid" 2>/dev/null; then
    kill -INT "$coordinator_pid" 2>/dev/null || true
    wait "$coordinator_pid" 2>/dev/null || true
  fi
  if [ "${E2FLEET_KEEP:-0}" = 1 ]; then
    echo "kept: $work (database e2fleet.db, logs *.log)"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
trap 'echo; echo "stopping..."; exit 130' INT TERM

"$bin/e2fleet-coordinator" serve --listen "127.0.0.1:$port" --db "$work/e2fleet.db" \
  --lease-seconds 30 >"$work/coordinator.log" 2>&1 &
coordinator_pid=$!
for _ in $(seq 1 100); do
  if "$bin/e2fleet-coordinator" jobs >/dev/null 2>&1; then break; fi
  if ! kill -0 "$coordinator_pid" 2>/dev/null; then
    echo "the coordinator did not start:"; cat "$work/coordinator.log"; exit 1
  fi
  sleep 0.1
done
echo "coordinator on $E2FLEET_COORDINATOR (database $work/e2fleet.db)"
echo
echo "  dashboard: $E2FLEET_COORDINATOR/    (open it in a browser; admin token: $E2FLEET_ADMIN_TOKEN)"
echo

job=$("$bin/e2fleet-coordinator" submit "$puzzle" "${submit_flags[@]}" --json)
job_id=$(echo "$job" | sed -E 's/.*"job_id":"([^"]+)".*/\1/')
echo "submitted $puzzle as job $job_id: $job"

read -ra worker_flags <<<"${E2FLEET_WORKER_FLAGS:-}"
# a demo asked for now runs on a laptop's battery too (a volunteer's worker pauses there)
E2FLEET_ON_BATTERY=${E2FLEET_ON_BATTERY:-run} E2FLEET_NICE=${E2FLEET_NICE:-0} \
  "$bin/e2fleet-worker" run ${E2FLEET_THREADS:+--threads "$E2FLEET_THREADS"} "${worker_flags[@]}" \
  --data-dir "$work/worker" --hostname local-worker \
  --cache-dir "${XDG_CACHE_HOME:-$HOME/.cache}/e2fleet/engines" >"$work/worker.log" 2>&1 &
worker_pid=$!
echo "worker started on ${E2FLEET_THREADS:-$(nproc)} cores (log: $work/worker.log)"
echo "  it first checks this machine against the verification suite and compiles the engine"
echo "  for this puzzle: ~10-20 s the first time (its walks, and the lane engine, raced on"
echo "  it), cached after; units start moving then"

"$bin/e2fleet-coordinator" job "$job_id" --watch &
watch_pid=$!
# a worker that ends before the job does (a flag it refuses, a crash) ends the demo with
# its log, rather than leaving a watch that never moves
while kill -0 "$watch_pid" 2>/dev/null; do
  if ! kill -0 "$worker_pid" 2>/dev/null; then
    kill "$watch_pid" 2>/dev/null || true
    wait "$watch_pid" 2>/dev/null || true
    echo
    echo "the worker stopped before the job was done; the end of its log ($work/worker.log):"
    tail -n 20 "$work/worker.log"
    exit 1
  fi
  sleep 1
done
wait "$watch_pid"
echo
echo "Two rates, never mixed: per-core = one engine thread's nodes/s (median over units);"
echo "aggregate = nodes per wall-clock second across the whole fleet."
# Interactive runs keep the coordinator (and so the dashboard) up until Ctrl-C;
# scripts (no terminal, or E2FLEET_EXIT_WHEN_DONE=1) end here.
if [ -t 1 ] && [ "${E2FLEET_EXIT_WHEN_DONE:-0}" != 1 ]; then
  kill -TERM "$worker_pid" 2>/dev/null || true
  wait "$worker_pid" 2>/dev/null || true
  worker_pid=""
  echo
  echo "The dashboard stays up at $E2FLEET_COORDINATOR/ — press Ctrl-C to stop the coordinator."
  wait "$coordinator_pid" || true
fi
