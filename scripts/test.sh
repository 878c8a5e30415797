#!/usr/bin/env bash
# `make test` after the build: the unit and end-to-end tests, with two pieces of work that need no
# test run beside them, one after the other, at the lowest priority and one compiler at a time (no
# more than the one CPU hog every test is made to pass beside): virtperf's UML kernel (~3 minutes of
# two CPUs that the first UML test would otherwise wait for; the e2e harness waits for it on the
# cache's lock) and the lint gates (cargo fmt --check, cargo clippy -D warnings, in a target
# directory of their own since cargo locks the tests'). They take the CPU the end-to-end tests leave
# idle (about half of it). Both the tests and the lint must pass; the lint's output follows the tests'.
set -uo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
BIN=target/release/virtperf
setsid nice -n 19 bash -c '
  if [ "$(id -u)" = 0 ] && [ -x "$1" ]; then
    t0=$(date +%s)
    if "$1" image build --uml --jobs 1 >/dev/null 2>"$2.uml"; then
      echo "background: virtperf'"'"'s UML kernel ready ($(( $(date +%s) - t0 )) s)"
    else
      echo "background: virtperf image build --uml failed (the UML tests say why): $(tail -1 "$2.uml")"
    fi
    rm -f "$2.uml"
  fi
  CARGO_BUILD_JOBS=1 CARGO_TARGET_DIR=target/lint scripts/lint.sh
' background "$BIN" "$log" > "$log" 2>&1 &
bg=$!
# An interrupted `make test` stops the background work too (a background job ignores the
# terminal's SIGINT).
trap 'kill -- -"$bg" 2>/dev/null; rm -f "$log" "$log.uml"' EXIT
trap 'exit 130' INT TERM
VIRTPERF_UNIT_REQUIRE=1 cargo test --release --workspace --locked
tests=$?
wait "$bg"
lint_rc=$?
cat "$log"
if [ "$tests" -ne 0 ] || [ "$lint_rc" -ne 0 ]; then
  echo "make test: FAILED (tests exit $tests, lint exit $lint_rc)" >&2
  exit 1
fi
