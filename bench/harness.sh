#!/usr/bin/env bash
# The harness's own cost, side by side in one run (issue: testbed core).
#
#  1. Per-trial cost of the whole harness: N `noop` trials through `virtperf run` (plan, agent
#     round trip, host CPU probe, one SQLite transaction per trial), against the reference: the
#     same N requests piped straight into a bare `virtperf agent` (no orchestrator, no database).
#  2. The avionics experiment (native + container, memcpy 10 MiB × 10, 1000 repetitions): wall
#     time of the run divided by the sum of its workload times (target <= 1.2), and the native
#     row's 95 % CI half-width as a % of its mean (target < 1 %).
#
# Usage: bench/harness.sh            (REPS=1000 NOOP=2000 by default; needs root + runc for the container)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/virtperf}
REPS=${REPS:-1000}
NOOP=${NOOP:-2000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
now() { date +%s.%N; }

echo "== 1. per-trial cost: virtperf run (noop) vs bare agent over a pipe, $NOOP trials each"
python3 - "$NOOP" > "$tmp/requests" <<'PY'
import sys
n = int(sys.argv[1])
for i in range(1, n + 1):
    print('{"v":1,"tag":%d,"type":"run","workload":{"kind":"noop","params":{}}}' % i)
print('{"v":1,"tag":%d,"type":"shutdown"}' % (n + 1))
PY
t0=$(now); "$BIN" agent < "$tmp/requests" > "$tmp/agent.out"; t1=$(now)
t2=$(now); "$BIN" run --env native --workload noop --reps "$NOOP" --warmup 0 --order sequential \
    --db "$tmp/noop.db" --json > "$tmp/noop.json" 2>/dev/null; t3=$(now)
python3 - "$t0" "$t1" "$t2" "$t3" "$NOOP" "$tmp/agent.out" <<'PY'
import sys
t0, t1, t2, t3, n = map(float, sys.argv[1:6])
results = sum(1 for l in open(sys.argv[6]) if '"type":"result"' in l)
assert results == int(n), f"bare agent answered {results} of {int(n)}"
bare, full = (t1 - t0) / n * 1e6, (t3 - t2) / n * 1e6
print(f"   bare agent (reference) : {bare:8.1f} us/trial")
print(f"   virtperf run, full     : {full:8.1f} us/trial  (includes process start, launch, report)")
print(f"   ratio full/bare        : {full / bare:8.2f}x   harness cost per trial: {full - bare:.1f} us")
PY

echo "== 2. avionics: --env native --env container --workload memcpy --reps $REPS"
t0=$(now)
"$BIN" run --env native --env container --workload memcpy --reps "$REPS" --json --db "$tmp/av.db" > "$tmp/av.json" 2>"$tmp/av.err" \
  || { cat "$tmp/av.err"; exit 1; }
t1=$(now)
"$BIN" export --format json --db "$tmp/av.db" -o "$tmp/av.samples.json"
python3 - "$t0" "$t1" "$tmp/av.json" "$tmp/av.samples.json" <<'PY'
import json, sys
t0, t1 = float(sys.argv[1]), float(sys.argv[2])
rep = json.load(open(sys.argv[3]))
raw = json.load(open(sys.argv[4]))
wall = t1 - t0
work = sum(s["value"] for t in raw["trials"] for s in t["samples"] if s["metric"] == "memcpy_time") / 1e3
guest = sum((t["guest_ns"] or 0) for t in raw["trials"]) / 1e9
trials = len(raw["trials"])
print(f"   trials                 : {trials} (warm-ups included)")
print(f"   wall time of the run   : {wall:8.2f} s")
print(f"   sum of memcpy times    : {work:8.2f} s   -> wall / workload = {wall / work:.3f} (target <= 1.2)")
print(f"   sum of agent work time : {guest:8.2f} s   -> wall / agent work = {wall / guest:.3f}")
print(f"   per-trial overhead     : {(wall - work) / trials * 1e3:8.3f} ms")
for r in rep["results"]:
    if r["metric"] != "memcpy_time":
        continue
    half = (r["ci95"][1] - r["ci95"][0]) / 2 / r["mean"] * 100
    cv = r["cv"] * 100 if r["cv"] is not None else float("nan")
    o = r["overhead"]
    ov = f'  overhead x{o["ratio"]:.3f} [{o["ci95"][0]:.3f}, {o["ci95"][1]:.3f}]' if o and o["ci95"] else ""
    print(f'   {r["environment"]:<10} memcpy {r["mean"]:.3f} ms  CI half-width {half:.2f}% (target < 1% for native), CV {cv:.1f}%{ov}')
PY
