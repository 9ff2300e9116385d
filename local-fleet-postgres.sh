#!/usr/bin/env bash
# A local fleet on PostgreSQL in one command: starts a throwaway PostgreSQL server, two
# coordinators on it (ports 7733 and 7734: the same fleet, either dashboard), a worker on
# each (half the cores each), submits a puzzle (bench-easy by default) and ends with the
# exact total read from both coordinators.
#
#   ./local-fleet-postgres.sh [PUZZLE] [extra submit flags]
#   E2FLEET_DRILL=1 ./local-fleet-postgres.sh     # the fault drill, see below
#
# The fault drill: a third of the way in, coordinator A is SIGKILLed. Coordinator B and
# its worker carry on; A's worker keeps its results in its journal, and the units it held
# go back to the queue when their leases expire. A is restarted on the same port, its
# worker reconnects and hands in its journal (a result already redone is compared, not
# counted twice). The drill passes when the job completes with conservation holding on
# both coordinators, with the same totals, and (for bench-easy) the known whole-tree
# count, 3,577,121,570 nodes.
#
# Needs PostgreSQL's server binaries (Debian: apt-get install postgresql); run as root,
# the server runs as the postgres user. Environment: E2FLEET_PORT (A's port, B is +1),
# E2FLEET_THREADS (per worker), E2FLEET_KEEP=1 (keep the data and logs).
set -euo pipefail
cd "$(dirname "$0")"
puzzle=${1:-puzzles/bench/bench-easy.json}
shift || true
submit_flags=("$@")
if [ ${#submit_flags[@]} -eq 0 ]; then
  submit_flags=(--units 100)
fi
port_a=${E2FLEET_PORT:-7733}
port_b=$((port_a + 1))
for port in "$port_a" "$port_b"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "port $port is in use: choose others, e.g. E2FLEET_PORT=$((port_a + 10)) $0"
    exit 1
  fi
done
pg_bin=""
if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
  pg_bin=$(dirname "$(command -v initdb)")
else
  for d in /usr/lib/postgresql/*/bin; do [ -x "$d/initdb" ] && pg_bin=$d; done
fi
if [ -z "$pg_bin" ]; then
  echo "no PostgreSQL server binaries (initdb, pg_ctl): apt-get install postgresql"
  exit 1
fi
threads=${E2FLEET_THREADS:-$(( ($(nproc) + 1) / 2 ))}

echo "building e2fleet..."
cargo build -p e2fleet-coordinator -p e2fleet-worker
bin=target/debug

work=$(mktemp -d -t e2fleet-pg.XXXXXX)
chmod 755 "$work"
as_pg=()
if [ "$(id -u)" = 0 ]; then
  as_pg=(runuser -u postgres --)
  mkdir "$work/pg"
  chown postgres "$work/pg"
fi
pg_port=$(( port_a + 20000 ))
E2FLEET_ENROLL_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
E2FLEET_ADMIN_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
export E2FLEET_ENROLL_TOKEN E2FLEET_ADMIN_TOKEN
a="http://127.0.0.1:$port_a"
b="http://127.0.0.1:$port_b"
db="postgres://postgres@127.0.0.1:$pg_port/postgres"
pids=()

cleanup() {
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  "${as_pg[@]}" "$pg_bin/pg_ctl" -D "$work/pg/data" -m fast stop >/dev/null 2>&1 || true
  if [ "${E2FLEET_KEEP:-0}" = 1 ]; then echo "kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'echo; echo "stopping..."; exit 130' INT TERM

mkdir -p "$work/pg"
"${as_pg[@]}" "$pg_bin/initdb" -D "$work/pg/data" -U postgres --auth=trust >"$work/initdb.log"
"${as_pg[@]}" "$pg_bin/pg_ctl" -D "$work/pg/data" -l "$work/pg/server.log" -w \
  -o "-p $pg_port -c listen_addresses=127.0.0.1 -c unix_socket_directories=$work/pg" start >/dev/null
echo "PostgreSQL on 127.0.0.1:$pg_port (data $work/pg/data)"

serve() { # port log
  "$bin/e2fleet-coordinator" serve --listen "127.0.0.1:$1" --db "$db" --lease-seconds 20 >"$2" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 200); do
    if "$bin/e2fleet-coordinator" jobs --coordinator "http://127.0.0.1:$1" >/dev/null 2>&1; then return; fi
    sleep 0.1
  done
  echo "the coordinator on port $1 did not start:"; cat "$2"; exit 1
}
serve "$port_a" "$work/coordinator-a.log"
coordinator_a=${pids[-1]}
serve "$port_b" "$work/coordinator-b.log"
echo "coordinators: A $a/  B $b/  (one fleet; admin token $E2FLEET_ADMIN_TOKEN)"

job=$("$bin/e2fleet-coordinator" submit "$puzzle" "${submit_flags[@]}" --coordinator "$a" --json)
job_id=$(echo "$job" | sed -E 's/.*"job_id":"([^"]+)".*/\1/')
echo "submitted $puzzle to A as job $job_id"
for side in a b; do
  url=$a; [ "$side" = b ] && url=$b
  E2FLEET_ON_BATTERY=${E2FLEET_ON_BATTERY:-run} "$bin/e2fleet-worker" run --coordinator "$url" --threads "$threads" --nice 0 \
    --data-dir "$work/worker-$side" --hostname "worker-$side" \
    --cache-dir "${XDG_CACHE_HOME:-$HOME/.cache}/e2fleet/engines" >"$work/worker-$side.log" 2>&1 &
  pids+=($!)
done
echo "a worker on each coordinator, $threads engine threads each"

field() { # json key
  echo "$1" | sed -nE "s/.*\"$2\":\"?([^\",}]*)\"?.*/\1/p" | head -1
}
status() { "$bin/e2fleet-coordinator" job "$job_id" --coordinator "$1" --json 2>/dev/null || true; }

if [ "${E2FLEET_DRILL:-0}" = 1 ]; then
  total_units=$(field "$job" units)
  while :; do
    doc=$(status "$b")
    done_units=$(echo "$doc" | sed -nE 's/.*"units":\{[^}]*"done":([0-9]+).*/\1/p')
    if [ -n "$done_units" ] && [ "$done_units" -ge $(( total_units / 3 )) ]; then break; fi
    if [ "$(field "$doc" state)" = complete ]; then break; fi
    sleep 0.5
  done
  echo "drill: $done_units of $total_units units done; SIGKILL coordinator A (pid $coordinator_a)"
  kill -KILL "$coordinator_a"
  sleep 3
  echo "drill: B alone for a while, then A restarted on port $port_a"
  sleep 10
  serve "$port_a" "$work/coordinator-a2.log"
fi

"$bin/e2fleet-coordinator" job "$job_id" --coordinator "$b" --watch
doc_a=$(status "$a")
doc_b=$(status "$b")
echo
ok=1
for side in A B; do
  doc=$doc_a; [ "$side" = B ] && doc=$doc_b
  echo "coordinator $side: state $(field "$doc" state), nodes $(field "$doc" nodes_total), solutions $(field "$doc" solutions_count), conservation $(field "$doc" conservation_ok)"
  [ "$(field "$doc" state)" = complete ] && [ "$(field "$doc" conservation_ok)" = true ] || ok=0
done
[ "$(field "$doc_a" nodes_total)" = "$(field "$doc_b" nodes_total)" ] || ok=0
if [ "$puzzle" = puzzles/bench/bench-easy.json ] && [ "$(field "$doc_b" nodes_total)" != 3577121570 ]; then ok=0; fi
if [ "$ok" = 1 ]; then echo "PASS: exact on both coordinators"; else echo "FAIL"; exit 1; fi
