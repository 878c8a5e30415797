#!/usr/bin/env bash
# Runs a command beside load that comes and goes: a CPU hog switched on and off at random, each
# phase 0.2-2 s (VIRTPERF_JITTER_SEED fixes the sequence). A machine's load often looks like this
# (a build, a browser tab, a backup), and it is what a constant hog does not show: a test whose
# reference was measured at another moment than its figure fails here. `make test-jitter` runs
# the whole suite this way (docs/testing.md, "Under load").
#   scripts/jitter.sh CMD ARGS...      VIRTPERF_HOGS=N for N hogs at once (default 1)
set -euo pipefail
RANDOM=${VIRTPERF_JITTER_SEED:-$$}
hogs=${VIRTPERF_HOGS:-1}
hog=""
driver=""
stop() {
  [ -n "$driver" ] && kill "$driver" 2>/dev/null || true
  [ -n "$driver" ] && wait "$driver" 2>/dev/null || true
}
trap stop EXIT
(
  hog=""
  end_hog() { [ -n "$hog" ] && kill "$hog" 2>/dev/null; [ -n "$hog" ] && wait "$hog" 2>/dev/null; hog=""; }
  trap 'end_hog; exit 0' TERM INT
  phase() { local t=$(( 2 + RANDOM % 19 )); sleep "$(( t / 10 )).$(( t % 10 ))" & wait $! || true; }
  while :; do
    if command -v stress-ng >/dev/null 2>&1; then stress-ng --cpu "$hogs" --quiet & else sh -c 'while :; do :; done' & fi
    hog=$!
    phase
    end_hog
    phase
  done
) &
driver=$!
echo "jitter: $hogs CPU hog(s) on and off at random (0.2-2 s phases) beside: $* (driver pid $driver)" >&2
status=0
"$@" || status=$?
exit "$status"
