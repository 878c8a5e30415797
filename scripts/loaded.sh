#!/usr/bin/env bash
# Runs a command beside one CPU hog (`stress-ng --cpu 1`, a busy shell loop where stress-ng is
# missing): the load a user's machine often has. `make test-loaded` runs the whole suite this way;
# every test that measures the machine must still pass (docs/testing.md, "Under load").
#   scripts/loaded.sh CMD ARGS...      VIRTPERF_HOGS=N for N hogs (default 1)
set -euo pipefail
hogs=${VIRTPERF_HOGS:-1}
pids=()
stop() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap stop EXIT
for _ in $(seq "$hogs"); do
  if command -v stress-ng >/dev/null 2>&1; then
    stress-ng --cpu 1 --quiet &
  else
    sh -c 'while :; do :; done' &
  fi
  pids+=("$!")
done
echo "loaded: $hogs CPU hog(s) running beside: $* (pids ${pids[*]})" >&2
status=0
"$@" || status=$?
exit "$status"
