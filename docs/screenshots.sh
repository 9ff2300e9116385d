#!/usr/bin/env bash
# Regenerates the dashboard screenshots in docs/screenshots/ from a real local fleet:
# a coordinator on a temporary database, one worker on every core, bench-easy worked to
# completion (a solved board), the Eternity II centre-clue puzzle running with node
# budgets (a deepest board with its hint).
#
#   docs/screenshots.sh            # needs Debian's chromium (apt-get install chromium)
#
# Environment: E2FLEET_PORT (default 7744), CHROMIUM (default chromium).
set -euo pipefail
cd "$(dirname "$0")/.."
port=${E2FLEET_PORT:-7744}
chromium=${CHROMIUM:-chromium}
out=docs/screenshots

cargo build --release -q -p e2fleet-coordinator -p e2fleet-worker
bin=target/release
work=$(mktemp -d -t e2fleet-shots.XXXXXX)
export E2FLEET_ENROLL_TOKEN=shots-enroll-0123456789 E2FLEET_ADMIN_TOKEN=shots-admin-0123456789
export E2FLEET_COORDINATOR="http://127.0.0.1:$port"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

"$bin/e2fleet-coordinator" serve --listen "127.0.0.1:$port" --db "$work/db" --lease-seconds 20 \
  >"$work/coordinator.log" 2>&1 &
pids+=($!)
until "$bin/e2fleet-coordinator" jobs >/dev/null 2>&1; do
  if ! kill -0 "${pids[0]}" 2>/dev/null; then
    echo "the coordinator did not start:"; cat "$work/coordinator.log"; exit 1
  fi
  sleep 0.2
done

easy=$("$bin/e2fleet-coordinator" submit puzzles/bench/bench-easy.json --units 100 --json | sed -E 's/.*"job_id":"([^"]+)".*/\1/')
"$bin/e2fleet-worker" run --data-dir "$work/w1" --hostname lab-server-01 --nice 0 >"$work/w1.log" 2>&1 &
pids+=($!)
"$bin/e2fleet-coordinator" job "$easy" --watch >/dev/null
# a second hardware class for the verification page: this machine's reference engine
"$bin/e2fleet-worker" verify --coordinator "$E2FLEET_COORDINATOR" --engine reference --hostname lab-server-01 >/dev/null
e2=$("$bin/e2fleet-coordinator" submit puzzles/e2/centre-clue.json --units 400 --budget 200000000 --json \
  | sed -E 's/.*"job_id":"([^"]+)".*/\1/')
# a volunteer in a team, for the stats page: an account of its own and one engine thread
"$bin/e2fleet-coordinator" account add alice --team blue --json >"$work/alice.json"
alice=$(sed -E 's/.*"token":"([^"]+)".*/\1/' "$work/alice.json")
"$bin/e2fleet-worker" run --data-dir "$work/w2" --hostname alice-laptop --threads 1 --nice 0 \
  --token "$alice" >"$work/w2.log" 2>&1 &
pids+=($!)
# an order study of the real puzzle, ahead of the jobs (its probes take ~40 s on 2 threads)
study=$("$bin/e2fleet-coordinator" study puzzles/e2/official.json --candidates --priority 1 --wait --json \
  | sed -E 's/.*"study":"([^"]+)".*/\1/')
sleep 40

shot() { # shot NAME PATH HEIGHT
  "$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$work/chrome" --hide-scrollbars --window-size=1400,"$3" \
    --virtual-time-budget=4000 --screenshot="$out/$1.png" "$E2FLEET_COORDINATOR$2" 2>/dev/null
  echo "wrote $out/$1.png"
}
shot fleet / 1250
shot job-running "/jobs/$e2" 1900
shot job-complete "/jobs/$easy" 1500
shot workers /workers 600
shot verification /verification 1100
shot stats /stats 900
shot study "/studies/$study" 2400
