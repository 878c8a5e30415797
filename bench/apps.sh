#!/usr/bin/env bash
# Services against the tools users run, side by side in one run (issue: apps).
#
#  1. nginx's capacity: virtperf's closed-loop client against wrk (`client = "wrk"`: wrk run on
#     the lab's tester as users run it, `-t` one thread per tester CPU, `-c` the same
#     connections, `-d` the same duration) on the same nginx — the same configuration, file and
#     placement — in each environment. Both are cases of one experiment in case groups, so each
#     pair of trials ran seconds apart on the same launch; the ratio is of the medians over REPS
#     trials each, and the median of the pairs' ratios is printed too. Target: within 10 %.
#
# Usage (root): bench/apps.sh        REPS=5 SECS=3 ENVS="native container gvisor uml" by default
#                                    (add qemu to ENVS for a guest: TCG here, minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/virtperf}
REPS=${REPS:-5}
SECS=${SECS:-3}
ENVS=${ENVS:-"native container gvisor uml"}
[ "$(id -u)" = 0 ] || { echo "bench/apps.sh: needs root (the lab's namespaces)"; exit 3; }
for t in nginx wrk; do
  command -v "$t" >/dev/null || { echo "bench/apps.sh: $t missing (scripts/install-deps.sh installs it)"; exit 3; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

{
  printf 'name = "bench apps"\nreps = %s\nwarmup = 1\norder = "paired"\nskip_unavailable = true\n' "$REPS"
  for e in $ENVS; do printf '\n[[env]]\nkind = "%s"\n' "$e"; done
  for c in virtperf wrk; do
    printf '\n[[workload]]\nkind = "nginx"\nname = "nginx-%s"\nclient = "%s"\nduration = "%ss"\nloads = "none"\n' "$c" "$c" "$SECS"
  done
} > "$tmp/apps.toml"

t0=$(date +%s)
"$BIN" run "$tmp/apps.toml" --db "$tmp/apps.db" > /dev/null 2> "$tmp/err" || { cat "$tmp/err"; exit 1; }
"$BIN" export --db "$tmp/apps.db" --format json > "$tmp/raw.json"
echo "run: $(( $(date +%s) - t0 )) s for $(echo $ENVS | wc -w) environments x 2 clients x $((REPS + 1)) trials of ${SECS} s"
python3 - "$tmp/raw.json" <<'PY'
import json, statistics, sys
raw = json.load(open(sys.argv[1]))
by = {}
for t in raw["trials"]:
    if t["status"] != "ok" or t["warmup"]:
        continue
    v = [s["value"] for s in t["samples"] if s["metric"] == "nginx_capacity"]
    if v:
        by.setdefault(t["environment"], {}).setdefault(t["workload"], []).append((t["rep"], v[0]))
worst = 0.0
print("%-12s %14s %14s %8s %12s" % ("environment", "virtperf req/s", "wrk req/s", "ratio", "pairs' median"))
for env, w in by.items():
    a, b = dict(w.get("nginx-virtperf", [])), dict(w.get("nginx-wrk", []))
    if not a or not b:
        print("%-12s: a client has no trials (%s)" % (env, sorted(w)))
        worst = float("inf")
        continue
    ma, mb = statistics.median(a.values()), statistics.median(b.values())
    pairs = [a[r] / b[r] for r in a if r in b]
    r = ma / mb
    worst = max(worst, abs(r - 1))
    print("%-12s %14.0f %14.0f %8.3f %12.3f" % (env, ma, mb, r, statistics.median(pairs) if pairs else float("nan")))
print("nginx capacity, virtperf against wrk: worst %.1f %% off (target: within 10 %%) — %s"
      % (worst * 100, "PASS" if worst <= 0.10 else "FAIL"))
PY
