#!/usr/bin/env bash
# The timer workload against cyclictest (Debian rt-tests) on the same host, side by side in one
# run: one thread, SCHED_OTHER (and SCHED_FIFO 80 where permitted), 1 ms absolute-deadline sleeps
# on CLOCK_MONOTONIC (cyclictest -i 1000, clock_nanosleep by default; --default-system: no host tuning), DURATION each, the tools taking turns going first.
# Both lateness distributions are summarised the same way (min, mean, p50, p99, max in µs, from
# 1 µs histograms); the ratios virtperf/cyclictest should be near 1 within this host's noise —
# a wake-up's lateness is the kernel's and the hypervisor's, not the tool's.
# Usage: bench/timer.sh        ROUNDS=3 DURATION=5 (seconds) by default
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/virtperf}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
command -v cyclictest >/dev/null || { echo "bench/timer.sh: cyclictest missing (apt-get install rt-tests, or scripts/install-deps.sh)"; exit 3; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
loops=$((DURATION * 1000))

# $1 priority (0 = SCHED_OTHER) → "min mean p50 p99 max"
cyc() {
  local prio=()
  [ "$1" -gt 0 ] && prio=(-p "$1")
  cyclictest -q -t 1 -i 1000 -l "$loops" --default-system "${prio[@]}" -h 10000 > "$tmp/c.txt" 2>/dev/null || true
  python3 - "$tmp/c.txt" <<'PY'
import sys
hist, mn, mx, avg = [], None, None, None
for l in open(sys.argv[1]):
    p = l.split()
    if len(p) == 2 and p[0].isdigit():
        hist.append((int(p[0]), int(p[1])))
    if l.startswith("# Min Latencies:"): mn = float(p[-1])
    if l.startswith("# Avg Latencies:"): avg = float(p[-1])
    if l.startswith("# Max Latencies:"): mx = float(p[-1])
n = sum(c for _, c in hist)
def q(f):
    acc = 0
    for us, c in hist:
        acc += c
        if acc >= f * n: return us
    return hist[-1][0]
print(mn, avg, q(0.5), q(0.99), mx)
PY
}
vp() {
  "$BIN" run --env native --workload "timer:interval=1ms,duration=${DURATION}s,priority=$1" \
    --reps 1 --warmup 0 --json --db "$tmp/vp.db" > "$tmp/v.json" 2>/dev/null
  rm -f "$tmp/vp.db"
  python3 - "$tmp/v.json" <<'PY'
import json, sys
r = {x["metric"]: x["mean"] for x in json.load(open(sys.argv[1]))["results"]}
print(*(r[f"timer_{k}"] for k in ("min", "mean", "p50", "p99", "max")))
PY
}
for prio in 0 80; do
  : > "$tmp/cyc-$prio"; : > "$tmp/vp-$prio"
  for r in $(seq "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then cyc "$prio" >> "$tmp/cyc-$prio"; vp "$prio" >> "$tmp/vp-$prio"
    else vp "$prio" >> "$tmp/vp-$prio"; cyc "$prio" >> "$tmp/cyc-$prio"; fi
  done
  echo "priority $prio: $ROUNDS rounds done"
done
python3 - "$tmp" <<'PY'
import sys, statistics as st
names = ["min", "mean", "p50", "p99", "max"]
for prio in ("0", "80"):
    rows = {}
    for tool in ("cyc", "vp"):
        vals = [list(map(float, l.split())) for l in open(f"{sys.argv[1]}/{tool}-{prio}") if l.strip()]
        rows[tool] = [st.median(v[i] for v in vals) for i in range(5)]
    print(f"\npriority {prio} ({'SCHED_FIFO' if prio != '0' else 'SCHED_OTHER'}), µs, medians of rounds:")
    print(f'{"":<6}' + "".join(f"{n:>10}" for n in names))
    print(f'{"cyclic":<6}' + "".join(f"{v:>10.1f}" for v in rows["cyc"]))
    print(f'{"vp":<6}' + "".join(f"{v:>10.1f}" for v in rows["vp"]))
    print(f'{"ratio":<6}' + "".join(f"{(b / a if a else float('nan')):>10.2f}" for a, b in zip(rows["cyc"], rows["vp"])))
PY
