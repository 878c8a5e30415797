#!/usr/bin/env bash
# Network workloads against iperf3, side by side in one run, on the same lab path (issue: lab).
#
# The path: two network namespaces joined by veths through a bridge in a third namespace,
# 198.18.0.0/24, MTU 1500 — the topology `virtperf run` builds for every run with network
# workloads (src/lab). This script builds one like it for iperf3, runs iperf3, tears it down,
# then runs virtperf, which builds and tears down its own. Alternating rounds (iperf3, virtperf,
# iperf3, virtperf…) so that drift on the host hits both alike; ratios are of the medians.
#
#  1. TCP: `virtperf tcp_stream` goodput vs `iperf3` TCP (1 stream): target >= 0.9x.
#  2. UDP 64-byte frames, unlimited: `virtperf udp_stream:frame_size=64` received datagrams/s vs
#     `iperf3 -u -b 0 -l 18` (18-byte payload = 64-byte frame): target >= 1.0x.
#
# Usage (root): bench/net.sh        ROUNDS=3 SECS=5 by default
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/virtperf}
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-5}
[ "$(id -u)" = 0 ] || { echo "bench/net.sh: needs root (network namespaces)"; exit 3; }
command -v iperf3 >/dev/null || { echo "bench/net.sh: iperf3 missing (scripts/install-deps.sh installs it)"; exit 3; }
. bench/lab.sh

# iperf3 in the same roles as virtperf's direction=out: the environment (e0) sends, the tester receives.
iperf() { # args: extra client flags; prints the client's JSON
  ip netns exec "$P-t" iperf3 -s -1 -B 198.18.0.1 >/dev/null 2>&1 &
  pids+=($!)
  sleep 0.3
  ip netns exec "$P-e0" iperf3 -c 198.18.0.1 -B 198.18.0.10 -t "$SECS" -J "$@"
  wait "${pids[-1]}" 2>/dev/null || true
}

vp() { # args: workload spec; prints the JSON report
  # --warmup 1, virtperf's default: the first trial after the agents start runs ~30 % slower
  # (11.8-15.5 vs 19-21 Gbit/s here, cause not yet found); reports exclude warm-ups anyway.
  "$BIN" run --env native --workload "$1" --reps 1 --warmup 1 --json --db "$tmp/vp.db" 2>/dev/null
}


: > "$tmp/tcp_ip"; : > "$tmp/tcp_vp"; : > "$tmp/udp_ip"; : > "$tmp/udp_vp"
for r in $(seq "$ROUNDS"); do
  lab_up
  iperf > "$tmp/j" ; python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["end"]["sum_received"]["bits_per_second"]/1e9)' "$tmp/j" >> "$tmp/tcp_ip"
  iperf -u -b 0 -l 18 > "$tmp/j"
  # Datagrams the receiver got per second (sent − lost, over the test's duration).
  python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["end"]["sum"]; print((s["packets"]-s["lost_packets"])/s["seconds"]/1e3)' "$tmp/j" >> "$tmp/udp_ip"
  lab_down
  vp "tcp_stream:duration=${SECS}s" > "$tmp/v"
  python3 -c 'import json,sys; print([r["mean"] for r in json.load(open(sys.argv[1]))["results"] if r["metric"]=="tcp_goodput"][0])' "$tmp/v" >> "$tmp/tcp_vp"
  vp "udp_stream:frame_size=64,duration=${SECS}s" > "$tmp/v"
  python3 -c 'import json,sys; print([r["mean"] for r in json.load(open(sys.argv[1]))["results"] if r["metric"]=="udp_recv_rate"][0])' "$tmp/v" >> "$tmp/udp_vp"
  echo "round $r: tcp iperf3 $(tail -1 "$tmp/tcp_ip") / virtperf $(tail -1 "$tmp/tcp_vp") Gbit/s;" \
       "udp64 iperf3 $(tail -1 "$tmp/udp_ip") / virtperf $(tail -1 "$tmp/udp_vp") kdatagrams/s"
done

ti=$(median < "$tmp/tcp_ip"); tv=$(median < "$tmp/tcp_vp")
ui=$(median < "$tmp/udp_ip"); uv=$(median < "$tmp/udp_vp")
awk -v ti="$ti" -v tv="$tv" -v ui="$ui" -v uv="$uv" 'BEGIN {
  printf "TCP goodput, median: iperf3 %.3f Gbit/s, virtperf tcp_stream %.3f Gbit/s: ratio %.3f (target >= 0.9)\n", ti, tv, tv/ti
  printf "UDP 64-byte frames received, median: iperf3 %.1f k/s, virtperf udp_stream %.1f k/s: ratio %.3f (target >= 1.0)\n", ui, uv, uv/ui
}'
