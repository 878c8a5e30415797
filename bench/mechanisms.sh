#!/usr/bin/env bash
# virtperf's microbenchmarks against stress-ng's stressors of the same mechanism, natively, side by
# side in one run (one stress-ng worker each):
#
#   fork        fork + _exit + waitpid          vs  stress-ng --fork 1 (bogo ops/s of real time)
#   pipe switch half a pipe round trip between  vs  stress-ng --switch 1 --switch-method pipe
#               two threads (pipe_rr / 2)           ("nanosecs per context switch", its own figure)
#   syscall     getppid via syscall(2)          vs  stress-ng --x86syscall 1 --x86syscall-func getpid
#                                                   (stress-ng runs it on Intel CPUs only; skipped
#                                                   elsewhere, and said so)
#
# stress-ng's processes are not virtperf's threads, and its fork child does a little more before
# exiting: the ratios say how far apart two honest measurements of one mechanism are, not which
# is right. virtperf's futex hand-off (ctxswitch) is printed beside them for reference.
# Usage: bench/mechanisms.sh      ROUNDS=3 by default
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/virtperf}
ROUNDS=${ROUNDS:-3}
command -v stress-ng >/dev/null || { echo "bench/mechanisms.sh: stress-ng missing (apt-get install stress-ng)"; exit 3; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# $1 yaml key ("rate" = 1e9 / bogo ops per second of real time), then stress-ng's arguments
sng() {
  local key=$1; shift
  rm -f "$tmp/s.yaml"
  stress-ng "$@" --metrics-brief --yaml "$tmp/s.yaml" >/dev/null 2>&1 || true
  python3 - "$tmp/s.yaml" "$key" <<'PY'
import sys, re, os
t = open(sys.argv[1]).read() if os.path.exists(sys.argv[1]) else ""
if sys.argv[2] == "rate":
    m = re.search(r"bogo-ops-per-second-real-time:\s*([0-9.e+]+)", t)
    print(1e9 / float(m.group(1)) if m else "nan")
else:
    m = re.search(sys.argv[2] + r":\s*([0-9.e+]+)", t)
    print(float(m.group(1)) if m else "nan")
PY
}
# $1 workload, $2 metric, $3 divisor → ns/op
vp() {
  "$BIN" run --env native --workload "$1" --reps 1 --warmup 0 --json --db "$tmp/vp.db" > "$tmp/v.json" 2>/dev/null
  rm -f "$tmp/vp.db"
  python3 - "$tmp/v.json" "$2" "${3:-1}" <<'PY'
import json, sys
print(next(r["mean"] for r in json.load(open(sys.argv[1]))["results"] if r["metric"] == sys.argv[2]) / float(sys.argv[3]))
PY
}
for r in $(seq "$ROUNDS"); do
  {
    echo "fork $(sng rate --fork 1 --fork-ops 3000) $(vp fork:iterations=3000 fork_time)"
    echo "pipe-switch $(sng nanosecs-per-context-switch-pipe-method --switch 1 --switch-method pipe --switch-ops 100000) $(vp pipe_rr:iterations=50000 pipe_rr_time 2)"
    echo "syscall $(sng rate --x86syscall 1 --x86syscall-func getpid --x86syscall-ops 2000000) $(vp syscall:iterations=2000000 syscall_time)"
    echo "futex-switch nan $(vp ctxswitch:iterations=50000 ctxswitch_time)"
  } >> "$tmp/all"
  echo "round $r done"
done
python3 - "$tmp/all" <<'PY'
import sys, statistics as st
d = {}
for l in open(sys.argv[1]):
    k, a, b = l.split()
    d.setdefault(k, []).append((float(a), float(b)))
print(f'{"ns/op":<12} {"stress-ng":>10} {"virtperf":>10} {"virtperf/stress-ng":>19}  (medians of rounds)')
for k, v in d.items():
    a, b = st.median(x[0] for x in v), st.median(x[1] for x in v)
    ratio = f"{b / a:>19.2f}" if a == a else f'{"(no stress-ng figure)":>19}'
    print(f"{k:<12} {a:>10.1f} {b:>10.1f} {ratio}")
PY
