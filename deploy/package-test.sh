#!/usr/bin/env bash
# Builds the .deb packages and installs them for real on this machine (root; called by
# .ci/run): checks both units with systemd-analyze verify, runs each unit's command line
# as its user with its environment, as systemd would (no systemd runs as init here), lets
# the packaged worker join the packaged coordinator and walk bench-easy, removes the
# worker package mid-job (its units must come back at their exact cursors), installs it
# again (same identity, same journal), and checks the job's total to the node. Purges
# both packages at the end: users, settings and state gone.
#
#   deploy/package-test.sh            (E2FLEET_DEB_PROFILE=dev builds faster packages)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "deploy/package-test.sh installs packages: run it as root"; exit 1; }
profile=${E2FLEET_DEB_PROFILE:-release}
port=17733
url="http://127.0.0.1:$port"
expected_nodes=3577121570   # bench-easy's whole tree (e2fleet_engine::testing::BENCH_EASY)
logs=$(mktemp -d -t e2fleet-package.XXXXXX)
pids=()

step() { printf '== %s\n' "$*"; }
fail() { echo "FAILED: $*"; for f in "$logs"/*.log; do echo "--- $f"; tail -20 "$f"; done; exit 1; }
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  apt-get purge -y -qq e2fleet-worker e2fleet-coordinator >/dev/null 2>&1 || true
  rm -rf "$logs"
}
trap cleanup EXIT

# What systemd would start for UNIT: its User, EnvironmentFile, Environment and Nice,
# then ExecStart, in the background; the pid goes to $started.
unit_value() { sed -n "s/^$2=//p" "$1"; }
run_unit() {
  local unit=$1 log=$2 user envfile nice execstart
  user=$(unit_value "$unit" User)
  envfile=$(unit_value "$unit" EnvironmentFile)
  nice=$(unit_value "$unit" Nice)
  execstart=$(unit_value "$unit" ExecStart)
  mapfile -t envs < <(unit_value "$unit" Environment)
  (
    # systemd starts a unit with a clean environment
    for v in $(compgen -e); do case $v in PATH|LANG) ;; *) unset "$v" ;; esac; done
    set -a
    # shellcheck disable=SC1090
    . "$envfile"
    set +a
    for e in "${envs[@]}"; do export "${e?}"; done
    # shellcheck disable=SC2086
    exec nice -n "${nice:-0}" runuser -u "$user" -- $execstart
  ) >"$log" 2>&1 &
  started=$!
  pids+=("$started")
}
wait_for() {  # SECONDS WHAT COMMAND...: every started unit must stay up meanwhile
  local until=$((SECONDS + $1)) what=$2 pid
  shift 2
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $until ] || fail "$what (waited $1 s)"
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null || fail "$what: a unit's process exited"; done
    sleep 0.5
  done
}

step "building the packages (cargo deb, profile $profile)"
cargo deb -q -p e2fleet-coordinator --profile "$profile" -o target/debian >/dev/null
cargo deb -q -p e2fleet-worker --profile "$profile" -o target/debian >/dev/null
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
coordinator_deb=target/debian/e2fleet-coordinator_${version}-1_$(dpkg --print-architecture).deb
worker_deb=target/debian/e2fleet-worker_${version}-1_$(dpkg --print-architecture).deb

step "installing them"
apt-get purge -y -qq e2fleet-worker e2fleet-coordinator >/dev/null 2>&1 || true
apt-get install -y -qq "./$coordinator_deb" "./$worker_deb" >"$logs/install.log" 2>&1 || fail "apt-get install"
getent passwd e2fleet >/dev/null || fail "no e2fleet user"
getent passwd e2fleet-worker >/dev/null || fail "no e2fleet-worker user"
[ "$(stat -c '%a %U' /etc/e2fleet/worker.token)" = "600 e2fleet-worker" ] || fail "worker.token is not 0600 e2fleet-worker"
[ "$(stat -c '%a %U' /etc/e2fleet/coordinator.env)" = "600 root" ] || fail "coordinator.env is not 0600 root"
grep -q change-me /etc/e2fleet/coordinator.env && fail "coordinator.env kept the example tokens"
[ -s /etc/e2fleet/worker.token ] && fail "worker.token is not empty on a fresh install"

step "systemd-analyze verify on the installed units"
for unit in e2fleet-coordinator e2fleet-worker; do
  out=$(systemd-analyze verify "/usr/lib/systemd/system/$unit.service" 2>&1 || true)
  [ -z "$out" ] || fail "$unit.service: $out"
done

step "the coordinator, as its unit runs it"
sed -i "s/^E2FLEET_LISTEN=.*/E2FLEET_LISTEN=127.0.0.1:$port/" /etc/e2fleet/coordinator.env
run_unit /usr/lib/systemd/system/e2fleet-coordinator.service "$logs/coordinator.log"
wait_for 30 "the coordinator answers" curl -fsS "$url/healthz"
set -a
# shellcheck disable=SC1091
. /etc/e2fleet/coordinator.env
set +a
export E2FLEET_COORDINATOR=$url
job=$(e2fleet-coordinator submit /usr/share/e2fleet/puzzles/bench/bench-easy.json --units 200 --json | sed -n 's/.*"job_id": *"\([^"]*\)".*/\1/p')
[ -n "$job" ] || fail "submit printed no job id"

step "the worker, as its unit runs it (token in the file the package made)"
printf '%s\n' "$E2FLEET_ENROLL_TOKEN" >/etc/e2fleet/worker.token
sed -i "s#^E2FLEET_COORDINATOR=.*#E2FLEET_COORDINATOR=$url#" /etc/e2fleet/worker.env
run_unit /usr/lib/systemd/system/e2fleet-worker.service "$logs/worker.log"
worker=$started
wait_for 120 "the worker reports units" sh -c "e2fleet-worker status --data-dir /var/lib/e2fleet-worker --json | grep -q '\"units_reported\":[1-9]'"
e2fleet-worker status --data-dir /var/lib/e2fleet-worker
worker_id() { sed -n 's/.*"worker_id": *"\([^"]*\)".*/\1/p' /var/lib/e2fleet-worker/identity.json; }
identity=$(worker_id)
[ -n "$identity" ] || fail "no worker id in identity.json"

step "apt-get remove e2fleet-worker while it walks"
apt-get remove -y -qq e2fleet-worker >"$logs/remove.log" 2>&1 || fail "apt-get remove"
wait "$worker" || fail "the worker did not exit cleanly"
pids=("${pids[0]}")   # the coordinator
grep -q "stopped cleanly" "$logs/worker.log" || fail "the worker's log does not say it stopped cleanly"
held=$(e2fleet-coordinator job "$job" --json | sed -n 's/.*"leased": *\([0-9]*\).*/\1/p' | head -1)
[ -n "$held" ] || fail "no leased count in the job's JSON"
[ "$held" = 0 ] || fail "$held units still leased after the worker was removed"
[ -f /var/lib/e2fleet-worker/identity.json ] || fail "removal deleted the worker's state"

step "installing the worker again: same identity, the job finishes"
apt-get install -y -qq "./$worker_deb" >>"$logs/install.log" 2>&1 || fail "apt-get install (again)"
run_unit /usr/lib/systemd/system/e2fleet-worker.service "$logs/worker-again.log"
wait_for 600 "the job completes" sh -c "e2fleet-coordinator job $job --json | grep -q '\"state\": *\"complete\"'"
e2fleet-worker stop --data-dir /var/lib/e2fleet-worker --wait 60 >/dev/null
[ "$(worker_id)" = "$identity" ] || fail "the worker's identity changed across remove and install"
doc=$(e2fleet-coordinator job "$job" --json)
grep -q "\"nodes_total\": *$expected_nodes," <<<"$doc" || fail "nodes_total is not $expected_nodes: $doc"
grep -q '"solutions_count": *1,' <<<"$doc" || fail "solutions_count is not 1"
echo "job $job: $expected_nodes nodes, 1 solution: exact"

step "purging both packages"
for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
pids=()
apt-get purge -y -qq e2fleet-worker e2fleet-coordinator >"$logs/purge.log" 2>&1 || fail "apt-get purge"
getent passwd e2fleet-worker >/dev/null && fail "purge left the e2fleet-worker user"
[ -e /var/lib/e2fleet-worker ] && fail "purge left /var/lib/e2fleet-worker"
[ -e /etc/e2fleet ] && fail "purge left /etc/e2fleet"
echo "packages: ok"
