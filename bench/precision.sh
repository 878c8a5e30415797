#!/usr/bin/env bash
# The default experiment's cells both ways, side by side in one run (issue: rigorous in reasonable
# time):
#   A. the fixed design users ran so far: reps = 10 on one launch of each environment (95 % Fieller
#      intervals that cover that launch only);
#   B. examples/default.toml as it ships: precision mode on launches (4 launches of one repetition,
#      more launches where a ratio is short of ±5 %, within its budget; intervals from the spread
#      of launch means,
#      stated at the level that keeps 95 % coverage under the stopping rule).
# Both run the same environments and workloads with the same calibrated operation counts per trial.
# Printed: wall time of each (target: B <= 0.5 × A), and per ratio (environment × workload ×
# headline metric) the half-width of its interval in % of the ratio, A beside B.
#
# Usage: bench/precision.sh     (needs root and the default's environments; skips what the host cannot run)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/virtperf}
EXP=${EXP:-examples/default.toml}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
now() { date +%s.%N; }

# A: the same experiment, precision mode off, 10 repetitions on one launch.
python3 - "$EXP" > "$tmp/fixed.toml" <<'PY'
import re, sys
out = []
top = True  # the top-level settings, before the first [[env]] or [[workload]] table
for line in open(sys.argv[1]):
    top = top and not line.startswith("[")
    key = line.split("=")[0].strip()
    if top and key in ("precision", "budget", "launches", "reps", "warmup"):
        continue
    if top and key == "name":
        out.append('name = "default, fixed: reps = 10 on one launch"\nreps = 10\nwarmup = 1\nlaunches = 1\n')
        continue
    out.append(line)
sys.stdout.write("".join(out))
PY

echo "== A. fixed: reps = 10, one launch ($EXP without precision)"
t0=$(now)
"$BIN" run "$tmp/fixed.toml" --json --db "$tmp/a.db" > "$tmp/a.json" 2> "$tmp/a.err" || { tail -20 "$tmp/a.err"; exit 1; }
t1=$(now)
echo "== B. precision mode: $EXP as it ships"
"$BIN" run "$EXP" --json --db "$tmp/b.db" > "$tmp/b.json" 2> "$tmp/b.err" || { tail -20 "$tmp/b.err"; exit 1; }
t2=$(now)
grep -E "skipped environment|budget" "$tmp/a.err" "$tmp/b.err" || true

python3 - "$t0" "$t1" "$t2" "$tmp/a.json" "$tmp/b.json" <<'PY'
import json, sys
t0, t1, t2 = map(float, sys.argv[1:4])
a, b = json.load(open(sys.argv[4])), json.load(open(sys.argv[5]))

def headlines(doc):
    """(environment, workload, metric) -> (half-width % of the ratio, n, launches), headline metrics."""
    watched = {(c["environment"], c["workload"], c["metric"]) for c in (doc.get("precision") or {}).get("cells", [])}
    out = {}
    for r in doc["results"]:
        o = r.get("overhead")
        if r.get("peer") or r.get("instance") is not None or not o:
            continue
        key = (r["environment"], r["workload"], r["metric"])
        hw = None
        if o.get("ci95"):
            hw = (o["ci95"][1] - o["ci95"][0]) / 2 / abs(o["ratio"]) * 100
        out[key] = (hw, r["n"], r["launches"], o["ratio"])
    return out, watched

ha, _ = headlines(a)
hb, watched = headlines(b)
wa, wb = t1 - t0, t2 - t1
print(f"   wall time A (reps = 10, one launch) : {wa:7.1f} s   trials {a['trials']['ok'] + a['trials']['warmup']}")
print(f"   wall time B (precision, launches)   : {wb:7.1f} s   trials {b['trials']['ok'] + b['trials']['warmup']}")
print(f"   B / A                                : {wb / wa:7.2f}   (target <= 0.5)")
print()
print(f"   {'environment / workload / metric':<52} {'A ±%':>7} {'n':>4} {'B ±%':>7} {'n':>4} {'L':>3}  B<=A")
tighter = total = 0
five_a = five_b = 0
for key in sorted(watched):
    if key not in ha or key not in hb:
        continue
    (x, na, _, _), (y, nb, lb, _) = ha[key], hb[key]
    fa = f"{x:7.2f}" if x is not None else "      —"
    fb = f"{y:7.2f}" if y is not None else "      —"
    ok = x is not None and y is not None and y <= x
    total += 1
    tighter += ok
    five_a += x is not None and x <= 5
    five_b += y is not None and y <= 5
    print(f"   {' / '.join(key)[:52]:<52} {fa} {na:>4} {fb} {nb:>4} {lb:>3}  {'yes' if ok else 'no'}")
print()
print(f"   ratios within ±5 %: A {five_a} of {total} (intervals of one launch), B {five_b} of {total} (intervals over launches)")
print(f"   B's interval as tight as A's or tighter: {tighter} of {total}")
p = b.get("precision") or {}
print(f"   precision mode: {p.get('met', 0)} of {len(p.get('cells', []))} ratios met ±{p.get('target_percent')} %")
PY
