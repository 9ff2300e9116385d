#!/usr/bin/env bash
# The worker for Linux systems without Debian packages: a tarball with the release binary,
# the volunteer guide, the units and the settings example, and its SHA-256 beside it
# (`sha256sum -c` checks it); signed too when a release key is given (minisign format:
# `minisign -Vm FILE -P KEY` checks it).
#
#   tools/release/tarball.sh [--key release-key/release.key]
#   (E2FLEET_PROFILE=dev packs the development build instead, to try the script quickly)
#
# Writes target/dist/e2fleet-worker-VERSION-PLATFORM.tar.gz (+ .sha256, + .minisig).
set -euo pipefail
cd "$(dirname "$0")/../.."
key=""
if [ "${1:-}" = --key ]; then key=$2; fi
profile=${E2FLEET_PROFILE:-release}
bin=target/$([ "$profile" = dev ] && echo debug || echo "$profile")
cargo build -q --profile "$profile" -p e2fleet-worker -p e2fleet-coordinator
version=$("$bin/e2fleet-worker" --version | awk '{print $2}')
platform="$(uname -m)-linux"
name="e2fleet-worker-$version-$platform"
out=target/dist
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/$name" "$out"
install -m 0755 "$bin/e2fleet-worker" "$stage/$name/"
install -m 0644 docs/volunteer-guide.md README.md deploy/systemd/e2fleet-worker.service \
  deploy/systemd/worker.env.example "$stage/$name/"
tar -C "$stage" --owner=0 --group=0 --numeric-owner --sort=name --mtime=@0 -czf "$out/$name.tar.gz" "$name"
(cd "$out" && sha256sum "$name.tar.gz" >"$name.tar.gz.sha256")
echo "$out/$name.tar.gz"
cat "$out/$name.tar.gz.sha256"
if [ -n "$key" ]; then
  # the coordinator's signer, so the tarball and the worker releases share one key
  "$bin/e2fleet-coordinator" release sign "$out/$name.tar.gz" --key "$key"
fi
