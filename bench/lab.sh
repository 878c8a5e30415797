# Sourced by the network benchmarks: a lab path like the one `virtperf run` builds (src/lab) — two
# network namespaces, tester (t, 198.18.0.1) and environment (e0, 198.18.0.10), joined by veths
# through a bridge in a third, MTU 1500, flows steered to one CPU each, every link shaped to $RATE
# bits/s when set — for the reference tools, and the cleanup of it all.
# Sets $tmp (a scratch directory), $P (this script's namespace prefix), $pids (to kill on exit).
tmp=$(mktemp -d)
P="vpb$$"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for n in "$P-t" "$P-e0" "$P-hub"; do ip netns delete "$n" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

# Shapes the egress of $2 in namespace $1 like virtperf's lab with [lab] rate = $RATE (bits/s):
# tbf charging each frame its wire overhead (crates/virtperf/src/lab/mod.rs: shape_args).
shape() {
  [ -n "${RATE:-}" ] || return 0
  local burst=$((RATE / 8 / 1000)); [ "$burst" -gt 32768 ] && burst=32768
  [ "$burst" -lt 6152 ] && burst=6152
  tc -n "$1" qdisc add dev "$2" root tbf rate "${RATE}bit" burst "$burst" latency 50ms overhead 24 mpu 84
}
# Receive packet steering on every CPU, as virtperf's lab sets it (in-order delivery per flow).
steer() {
  local mask; mask=$(printf '%x' $(( (1 << $(nproc)) - 1 )))
  ip netns exec "$1" sh -c "echo $mask > /sys/class/net/$2/queues/rx-0/rps_cpus"
}

lab_up() {
  ip netns add "$P-hub"; ip -n "$P-hub" link set lo up
  ip -n "$P-hub" link add br0 type bridge; ip -n "$P-hub" link set br0 up
  local i=0
  for ep in "t:198.18.0.1" "e0:198.18.0.10"; do
    local ns="$P-${ep%%:*}" addr=${ep#*:}
    ip netns add "$ns"; ip -n "$ns" link set lo up
    ip -n "$P-hub" link add "h$i" mtu 1500 type veth peer name eth0 netns "$ns"
    ip -n "$P-hub" link set "h$i" master br0 up
    ip -n "$ns" addr add "$addr/24" dev eth0; ip -n "$ns" link set eth0 up
    steer "$ns" eth0; steer "$P-hub" "h$i"
    # As virtperf's lab without all-pairs workloads: only the tester's link is the wire.
    [ "$i" = 0 ] && { shape "$ns" eth0; shape "$P-hub" "h$i"; }
    i=$((i + 1))
  done
}
lab_down() { for n in "$P-t" "$P-e0" "$P-hub"; do ip netns delete "$n" 2>/dev/null || true; done; }

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
