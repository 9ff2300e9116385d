#!/usr/bin/env bash
# Runs one e2fleet worker inside an HTCondor job's scratch directory (see
# e2fleet-worker.sub). The identity and journal live in the scratch directory: a worker
# stopped by SIGTERM reports its cursors before it exits, so nothing is lost when the
# scratch directory goes away.
set -euo pipefail
: "${E2FLEET_COORDINATOR:?set coordinator= on condor_submit}"
: "${E2FLEET_ENROLL_TOKEN:?set token= on condor_submit}"
chmod +x ./e2fleet-worker
exec ./e2fleet-worker run \
  --threads "${E2FLEET_THREADS:-1}" \
  --data-dir "${_CONDOR_SCRATCH_DIR:-.}/e2fleet-worker-data" \
  --cache-dir "${_CONDOR_SCRATCH_DIR:-.}/e2fleet-cache" \
  --nice 0 \
  --log-format json
