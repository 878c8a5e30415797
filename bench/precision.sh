#!/usr/bin/env bash
# The default experiment's ratios under today's design and the paired one, side by side in one run,
# each with the same 4½-minute budget (issue: the first answer, precise):
#   A. the design before: order = "random" (a round of every environment × case shuffled whole,
#      so one case's trials in two environments may run seconds apart), counts = "each" (each
#      environment its own 0.2 s count), unpaired ratios (ratio of means, Fieller), precision mode
#      adding a launch of the furthest cell's noisier side and stopping at a 99 % interval;
#   B. examples/default.toml as it ships: order = "paired" (case groups), equal counts, the
#      geometric mean of paired ratios over launch blocks, precision mode planning blocks of the
#      baseline and the environments that need them by value per second (Stein's, each ratio's pilot
#      grown where its blocks are cheap, a third stage where its blocks came out noisier; 95 %).
# Printed: wall times; per ratio (environment × workload × headline metric) the half-width each
# states (A at its 99 %, B at 95 %); how many are within ±5 % and ±2 % (target: B ≥ 3 × A and ≥ 15
# of 45 within ±5 %); the median half-widths; B's data read unpaired (report --estimate unpaired);
# the host-wide slowdowns each run saw; then the coverage table of the simulation (stats::sim).
#
# Usage: bench/precision.sh     (needs root and the default's environments; skips what the host cannot run)
#        KEEP=DIR bench/precision.sh keeps both runs' databases and reports in DIR
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/virtperf}
EXP=${EXP:-examples/default.toml}
RUNS=${RUNS:-1000}
tmp=${KEEP:-$(mktemp -d)}
[ -n "${KEEP:-}" ] || trap 'rm -rf "$tmp"' EXIT
now() { date +%s.%N; }

# A: today's design on the same experiment.
python3 - "$EXP" > "$tmp/today.toml" <<'PY'
import sys
out, top = [], True
for line in open(sys.argv[1]):
    top = top and not line.startswith("[")
    key = line.split("=")[0].strip()
    if top and key in ("order", "counts"):
        continue
    if top and key == "name":
        out.append('name = "default, before: random order, each its own count, unpaired"\norder = "random"\ncounts = "each"\n')
        continue
    out.append(line)
sys.stdout.write("".join(out))
PY

echo "== A. before: random order, each its own count, unpaired ratios"
t0=$(now)
"$BIN" run "$tmp/today.toml" --json --db "$tmp/a.db" > "$tmp/a.json" 2> "$tmp/a.err" || { tail -20 "$tmp/a.err"; exit 1; }
t1=$(now)
echo "== B. paired: $EXP as it ships"
"$BIN" run "$EXP" --json --db "$tmp/b.db" > "$tmp/b.json" 2> "$tmp/b.err" || { tail -20 "$tmp/b.err"; exit 1; }
t2=$(now)
"$BIN" report --db "$tmp/b.db" --json --estimate unpaired > "$tmp/bu.json"
grep -E "skipped environment" "$tmp/a.err" "$tmp/b.err" || true

python3 - "$t0" "$t1" "$t2" "$tmp/a.json" "$tmp/b.json" "$tmp/bu.json" <<'PY'
import json, statistics, sys
t0, t1, t2 = map(float, sys.argv[1:4])
a, b, bu = (json.load(open(f)) for f in sys.argv[4:7])

def stated(doc):
    """(environment, workload kind, metric) -> (half-width % as stated, its level, the ratio)."""
    watched = {(c["environment"], c["workload"], c["metric"]) for c in (doc.get("precision") or {}).get("cells", [])}
    out = {}
    for r in doc["results"]:
        o = r.get("overhead")
        key = (r["environment"], r["workload"], r["metric"])
        if r.get("peer") or r.get("instance") is not None or not o or key not in watched:
            continue
        ci = o.get("ci") or o.get("ci95")
        hw = (ci[1] - ci[0]) / 2 / abs(o["ratio"]) * 100 if ci else None
        out[(r["environment"], r["kind"], r["metric"])] = (hw, o.get("ci_level", 0.95), o["ratio"])
    return out

sa, sb, sbu = stated(a), stated(b), stated(bu)
keys = sorted(set(sa) | set(sb))
def f(x):
    return f"{x:7.2f}" if x is not None else "      —"
print(f"   wall time A (before) : {t1 - t0:6.1f} s   trials {a['trials']['ok'] + a['trials']['warmup']}")
print(f"   wall time B (paired) : {t2 - t1:6.1f} s   trials {b['trials']['ok'] + b['trials']['warmup']}")
print()
print(f"   {'environment / workload / metric':<44} {'A ratio':>8} {'A ±%':>7} {'B ratio':>8} {'B ±%':>7} {'B unp.':>7}")
for k in keys:
    x, y, z = sa.get(k, (None, 0, None)), sb.get(k, (None, 0, None)), sbu.get(k, (None, 0, None))
    ra = f"{x[2]:8.3g}" if x[2] else "       —"
    rb = f"{y[2]:8.3g}" if y[2] else "       —"
    print(f"   {' / '.join(k)[:44]:<44} {ra} {f(x[0])} {rb} {f(y[0])} {f(z[0])}")
def count(s, lim):
    return sum(1 for v in s.values() if v[0] is not None and v[0] <= lim)
def med(s):
    v = [x[0] for x in s.values() if x[0] is not None]
    return statistics.median(v) if v else float("nan")
n = len(keys)
la = sorted({x[1] for x in sa.values()}); lb = sorted({x[1] for x in sb.values()})
print()
print(f"   within ±5 %: A {count(sa, 5)} of {n} (stated at {la}), B {count(sb, 5)} of {n} (stated at {lb}); target B >= 3 × A and >= 15")
print(f"   within ±2 %: A {count(sa, 2)}, B {count(sb, 2)}")
print(f"   median half-width: A ±{med(sa):.1f} %, B ±{med(sb):.1f} %, B's data read unpaired ±{med(sbu):.1f} %")
for name, d in (("A", a), ("B", b)):
    dist = d.get("disturbances", [])
    print(f"   {name}: the host slowed down as a whole {len(dist)} time(s)" + (f"; e.g. at {dist[0]['at']} for {dist[0]['seconds']:.1f} s over {dist[0]['environments']} environments" if dist else ""))
PY
echo
echo "== coverage of the stated intervals under simulated real-run noise (crates/stats/src/sim.rs, $RUNS runs a cell)"
cargo run -q --release --locked -p virtperf-stats --example coverage "$RUNS"
