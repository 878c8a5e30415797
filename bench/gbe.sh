#!/usr/bin/env bash
# The emulated Gigabit wire ([lab] rate = "1gbit"), against its analytic ceiling and against iperf3
# on the same shaped path, side by side in one run:
#
#  1. TCP goodput, both directions (environment → tester, tester → environment): iperf3 and
#     virtperf's tcp_stream, each as a share of the ceiling 1e9 × 1448 / 1538 = 941.49 Mbit/s.
#     Target: within 2 % of the ceiling, never above it; virtperf / iperf3 >= 0.98.
#  2. 1518-byte UDP frames offered above the line: frames/s received, as a share of the frame-rate
#     ceiling 1e9 / ((1518 + 20) × 8) = 81 274/s; iperf3 -u -l 1472 and virtperf's udp_stream.
#
# Rounds alternate which tool goes first (this host is noisy); medians are compared.
# Usage (root): bench/gbe.sh        ROUNDS=3 SECS=5 by default
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/virtperf}
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-5}
RATE=1000000000
[ "$(id -u)" = 0 ] || { echo "bench/gbe.sh: needs root (network namespaces)"; exit 3; }
command -v iperf3 >/dev/null || { echo "bench/gbe.sh: iperf3 missing (scripts/install-deps.sh installs it)"; exit 3; }
. bench/lab.sh
TCP_CEIL=0.941495; UDP_CEIL=81274
for f in ip_out ip_in ip_udp vp_out vp_in vp_udp; do : > "$tmp/$f"; done

iperf() { # $1: out|in|udp
  lab_up
  ip netns exec "$P-t" iperf3 -s -1 -B 198.18.0.1 >/dev/null 2>&1 &
  pids+=($!); sleep 0.3
  local args=(-c 198.18.0.1 -B 198.18.0.10 -t "$SECS" -J)
  case $1 in in) args+=(-R) ;; udp) args+=(-u -b 2G -l 1472) ;; esac
  ip netns exec "$P-e0" iperf3 "${args[@]}" > "$tmp/j" 2>/dev/null || true
  wait "${pids[-1]}" 2>/dev/null || true
  python3 - "$tmp/j" "$1" >> "$tmp/ip_$1" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))["end"]
if sys.argv[2] == "udp":
    s = e["sum"]; print((s["packets"] - s["lost_packets"]) / s["seconds"])
else:
    print(e["sum_received"]["bits_per_second"] / 1e9)
PY
  lab_down
}
virtperf() {
  "$BIN" run --env native --workload "tcp_stream:duration=${SECS}s,direction=[out,in]" \
    --workload "udp_stream:frame_size=1518,rate=90000,duration=${SECS}s" --lab rate=1gbit \
    --reps 1 --warmup 0 --json --db "$tmp/vp.db" > "$tmp/v" 2>/dev/null
  python3 - "$tmp/v" "$tmp" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    w, m = r["workload"], r["metric"]
    f = {"tcp_goodput": "vp_out" if "direction=out" in w else "vp_in", "udp_recv_rate": "vp_udp"}.get(m)
    if f:
        open(f"{sys.argv[2]}/{f}", "a").write(f'{r["mean"] * (1000 if m == "udp_recv_rate" else 1)}\n')
PY
}
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then iperf out; iperf in; iperf udp; virtperf; else virtperf; iperf out; iperf in; iperf udp; fi
  echo "round $r: TCP out iperf3 $(tail -1 "$tmp/ip_out") virtperf $(tail -1 "$tmp/vp_out");" \
       "TCP in iperf3 $(tail -1 "$tmp/ip_in") virtperf $(tail -1 "$tmp/vp_in");" \
       "UDP 1518 iperf3 $(tail -1 "$tmp/ip_udp") virtperf $(tail -1 "$tmp/vp_udp") frames/s"
done
for d in out in; do
  i=$(median < "$tmp/ip_$d"); v=$(median < "$tmp/vp_$d")
  awk -v i="$i" -v v="$v" -v c="$TCP_CEIL" -v d="$d" 'BEGIN {
    printf "TCP %s, median Gbit/s: iperf3 %.4f (%.1f %% of the ceiling), virtperf %.4f (%.1f %%): virtperf/iperf3 %.3f (target >= 0.98; each within 2 %% of %.4f)\n", d, i, i/c*100, v, v/c*100, v/i, c }'
done
i=$(median < "$tmp/ip_udp"); v=$(median < "$tmp/vp_udp")
awk -v i="$i" -v v="$v" -v c="$UDP_CEIL" 'BEGIN {
  printf "UDP 1518-byte frames/s, median: iperf3 %.0f (%.1f %% of %d), virtperf %.0f (%.1f %%)\n", i, i/c*100, c, v, v/c*100 }'
