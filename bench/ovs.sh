#!/usr/bin/env bash
# virtperf's Open vSwitch path against a bare one, side by side in one run (issue: the shared data
# path): TCP goodput through OVS's userspace datapath (datapath_type=netdev) between two network
# namespaces,
#   A. bare: two namespaces and a hub running ovsdb-server + ovs-vswitchd by hand, iperf3 across;
#   B. virtperf: `--env native --workload tcp_stream --lab switch=ovs` (its own lab, unshaped).
# Same kernel, same switch build, same unshaped veths with receive packet steering, checksums
# filled in by the senders in both.
# Printed: each round's Gbit/s, the medians and their ratio (virtperf / bare), and the CPU of
# ovs-vswitchd per second in each.
#
# Usage: bench/ovs.sh      (ROUNDS=3 SECS=5; needs root, openvswitch-switch, ethtool, iperf3)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/virtperf}
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-5}
for p in ovs-vswitchd ovsdb-server ovsdb-tool ovs-vsctl ethtool iperf3; do
  command -v "$p" >/dev/null || { echo "bench/ovs.sh: $p is missing (make deps)"; exit 1; }
done
tmp=$(mktemp -d)
ns=vpbench$$
cleanup() {
  [ -f "$tmp/vswitchd.pid" ] && kill "$(cat "$tmp/vswitchd.pid")" 2>/dev/null || true
  [ -f "$tmp/ovsdb.pid" ] && kill "$(cat "$tmp/ovsdb.pid")" 2>/dev/null || true
  for n in a b hub; do ip netns delete "$ns-$n" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# A: the bare path.
for n in hub a b; do ip netns add "$ns-$n"; ip -n "$ns-$n" link set lo up; done
ip -n "$ns-hub" link add h1 type veth peer name eth0 netns "$ns-a"
ip -n "$ns-hub" link add h2 type veth peer name eth0 netns "$ns-b"
ip -n "$ns-a" addr add 198.18.200.1/24 dev eth0
ip -n "$ns-b" addr add 198.18.200.2/24 dev eth0
for n in a b; do ip -n "$ns-$n" link set eth0 up; ip netns exec "$ns-$n" ethtool -K eth0 tx off >/dev/null; done
ip -n "$ns-hub" link set h1 up; ip -n "$ns-hub" link set h2 up
# Receive packet steering on every veth, as the lab sets it (docs/lab.md: in-order delivery).
mask=$(python3 -c "print(format((1 << $(nproc)) - 1, 'x'))")
for n in a b; do ip netns exec "$ns-$n" sh -c "echo $mask > /sys/class/net/eth0/queues/rx-0/rps_cpus"; done
for h in h1 h2; do ip netns exec "$ns-hub" sh -c "echo $mask > /sys/class/net/$h/queues/rx-0/rps_cpus"; done
export OVS_RUNDIR=$tmp OVS_LOGDIR=$tmp OVS_DBDIR=$tmp OVS_SYSCONFDIR=$tmp
ovsdb-tool create "$tmp/conf.db" /usr/share/openvswitch/vswitch.ovsschema
ip netns exec "$ns-hub" ovsdb-server "$tmp/conf.db" --remote="punix:$tmp/db.sock" --unixctl="$tmp/ovsdb.ctl" \
  --pidfile="$tmp/ovsdb.pid" --detach --no-chdir --log-file="$tmp/ovsdb.log" 2>/dev/null
ovs-vsctl --db="unix:$tmp/db.sock" --no-wait init
ip netns exec "$ns-hub" ovs-vswitchd "unix:$tmp/db.sock" --unixctl="$tmp/vswitchd.ctl" --pidfile="$tmp/vswitchd.pid" \
  --detach --no-chdir --log-file="$tmp/vswitchd.log" 2>/dev/null
ovs-vsctl --db="unix:$tmp/db.sock" add-br br0 -- set bridge br0 datapath_type=netdev
ovs-vsctl --db="unix:$tmp/db.sock" add-port br0 h1
ovs-vsctl --db="unix:$tmp/db.sock" add-port br0 h2
ip -n "$ns-hub" link set br0 up
cpu_of() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

echo "== TCP through OVS's userspace datapath, $SECS s a round, $ROUNDS rounds each, interleaved"
: > "$tmp/bare"; : > "$tmp/vp"
for r in $(seq "$ROUNDS"); do
  ip netns exec "$ns-b" iperf3 -s -1 -B 198.18.200.2 >/dev/null 2>&1 &
  sleep 0.3
  c0=$(cpu_of "$(cat "$tmp/vswitchd.pid")")
  g=$(ip netns exec "$ns-a" iperf3 -c 198.18.200.2 -t "$SECS" -J | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9)')
  c1=$(cpu_of "$(cat "$tmp/vswitchd.pid")")
  wait
  echo "$g $(python3 -c "print(($c1 - $c0) / $hz / $SECS)")" >> "$tmp/bare"
  "$BIN" run --env native --workload "tcp_stream:duration=${SECS}s" --lab switch=ovs --reps 1 --warmup 1 \
    --json --db "$tmp/vp$r.db" > "$tmp/vp$r.json" 2>/dev/null
  python3 - "$tmp/vp$r.json" "$SECS" >> "$tmp/vp" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
row = lambda m: next(r for r in d["results"] if r["metric"] == m and r["environment"] == "native")
print(row("tcp_goodput")["mean"], row("switch_cpu_time")["mean"] / 1e3 / float(sys.argv[2]))
PY
  python3 -c "import sys; b, v = float(sys.argv[1]), float(sys.argv[2]); print(f'   round $r: bare {b:.3f} Gbit/s, virtperf {v:.3f} Gbit/s')" \
    "$(tail -1 "$tmp/bare" | cut -d' ' -f1)" "$(tail -1 "$tmp/vp" | cut -d' ' -f1)"
done
python3 - "$tmp/bare" "$tmp/vp" <<'PY'
import statistics, sys
bare = [list(map(float, l.split())) for l in open(sys.argv[1])]
vp = [list(map(float, l.split())) for l in open(sys.argv[2])]
mb, mv = statistics.median(x[0] for x in bare), statistics.median(x[0] for x in vp)
cb, cv = statistics.median(x[1] for x in bare), statistics.median(x[1] for x in vp)
print(f"   bare OVS + iperf3   : {mb:.3f} Gbit/s (median), ovs-vswitchd {cb:.2f} CPUs")
print(f"   virtperf switch=ovs : {mv:.3f} Gbit/s (median), ovs-vswitchd {cv:.2f} CPUs (its switch_cpu_time)")
print(f"   virtperf / bare     : {mv / mb:.3f}")
PY
