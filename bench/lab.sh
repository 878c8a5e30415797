# Sourced by the network benchmarks: a lab path like the one `virtperf run` builds (src/lab) — two
# network namespaces, tester (t, 198.18.0.1) and environment (e0, 198.18.0.10), joined by veths
# through a bridge in a third, MTU 1500 — for the reference tools, and the cleanup of it all.
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
    i=$((i + 1))
  done
}
lab_down() { for n in "$P-t" "$P-e0" "$P-hub"; do ip netns delete "$n" 2>/dev/null || true; done; }

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
