#!/usr/bin/env bash
# What a rootless container's network costs against a veth, virtperf's knob beside iperf3 through
# the same helpers wired by hand, side by side in one run (issue: what each knob costs;
# docs/knobs.md, "The container's network"):
#
#   virtperf: --env container --env container:network=pasta,network_mtu=$MTU
#             --env container:network=slirp4netns,network_mtu=$MTU, workloads tcp_stream out and
#             in (one direction at a time, as iperf3 runs; `both` at once loads a single-threaded
#             helper with two flows) and tcp_rr; each helper's ratio against the plain container
#             (a veth on the lab).
#   reference: namespaces of the bench's own — a tester, an endpoint joined to it by a veth
#             (198.18.77.0/24, MTU 1500 like the lab's), and an inner namespace that the real
#             pasta or slirp4netns, started in the endpoint, joins to it with the same flags
#             virtperf uses (env/container_net.rs). iperf3 -s runs in the endpoint (veth) or the
#             inner namespace (a helper); iperf3 -c in the tester, out (-R: the container sends)
#             and in; round trips by a python3 TCP ping-pong of 1 byte (no netperf in Debian's
#             main), the same client for all three, from the tester in (as tcp_rr:direction=in)
#             and from the container out (direction=out: the container's own connections, which
#             slirp4netns NATs and pasta proxies, not the forwarded ports).
#
# Rounds alternate veth / pasta / slirp4netns; medians. RootlessKit's own table (its docs,
# iperf3 -c from the namespace to the host, 2020s hardware) is printed beside for scale.
# Usage (root): bench/knobs-net.sh    ROUNDS=3, REPS=5, MTU=65520, SECS=3 by default
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/virtperf}
ROUNDS=${ROUNDS:-3}
REPS=${REPS:-5}
MTU=${MTU:-65520}
SECS=${SECS:-3}
[ "$(id -u)" = 0 ] || { echo "bench/knobs-net.sh: needs root"; exit 3; }
for t in iperf3 pasta slirp4netns python3 ip; do
  command -v "$t" >/dev/null || { echo "bench/knobs-net.sh: $t missing (make deps)"; exit 3; }
done
tag="vpkn$$"
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for n in t e i; do ip netns del "$tag$n" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# virtperf first, while nothing else runs.
echo "== virtperf (reps $REPS, inner MTU $MTU)"
"$BIN" run --db "$tmp/vp.db" --env container \
  --env "container:network=pasta,network_mtu=$MTU" --env "container:network=slirp4netns,network_mtu=$MTU" \
  --workload "tcp_stream:direction=out,duration=${SECS}s" --workload "tcp_stream:direction=in,duration=${SECS}s" \
  --workload tcp_rr:direction=in --workload tcp_rr:direction=out --reps "$REPS" --json \
  >"$tmp/vp.json" 2>"$tmp/vp.err" || { tail -20 "$tmp/vp.err"; exit 1; }

# The reference's namespaces: tester <-veth-> endpoint; inner made per helper.
ip netns add "${tag}t"
ip netns add "${tag}e"
ip link add "${tag}a" netns "${tag}t" type veth peer name "${tag}b" netns "${tag}e"
ip -n "${tag}t" link set "${tag}a" name eth0
ip -n "${tag}e" link set "${tag}b" name eth0
for n in t e; do ip -n "$tag$n" link set lo up; ip -n "$tag$n" link set eth0 up mtu 1500; done
ip -n "${tag}t" addr add 198.18.77.1/24 dev eth0
ip -n "${tag}e" addr add 198.18.77.2/24 dev eth0

PONG='
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(4)
while True:
    c, _ = s.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while (b := c.recv(1)):
        c.sendall(b)
    c.close()'
PING='
import socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2]))); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for _ in range(500): c.sendall(b"x"); c.recv(1)
n, t0 = 0, time.perf_counter()
while time.perf_counter() - t0 < 1.0:
    c.sendall(b"x"); c.recv(1); n += 1
print((time.perf_counter() - t0) / n * 1e6)'
serve() { # $1 the container's namespace: iperf3 and a ping-pong there, one ping-pong in the tester
  ip netns exec "$1" iperf3 -s -p 5201 >/dev/null 2>&1 &
  echo $! >"$tmp/srv"; pids+=($!)
  ip netns exec "$1" python3 -c "$PONG" 5202 &
  echo $! >>"$tmp/srv"; pids+=($!)
  ip netns exec "${tag}t" python3 -c "$PONG" 5203 &
  echo $! >>"$tmp/srv"; pids+=($!)
  sleep 0.5
}
unserve() { while read -r p; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done <"$tmp/srv"; }

helper() { # $1 pasta|slirp4netns: the inner namespace and its helper; its pid in $tmp/helper
  ip netns add "${tag}i"
  ip -n "${tag}i" link set lo up
  case $1 in
    pasta)
      ip netns exec "${tag}e" ip route replace default via 198.18.77.1 dev eth0
      ip netns exec "${tag}e" pasta -f -q -4 --runas 0:0 --config-net --no-map-gw -i eth0 \
        -g 198.18.77.1 -m "$MTU" -t 5201-5202 -u 5201-5202 --netns "/run/netns/${tag}i" \
        >"$tmp/helper.log" 2>&1 &
      echo $! >"$tmp/helper"; pids+=($!)
      for _ in $(seq 50); do ip -n "${tag}i" -4 addr show | grep -q 198.18.77.2 && break; sleep 0.1; done
      ;;
    slirp4netns)
      rm -f "$tmp/api"
      ip netns exec "${tag}e" slirp4netns --configure --mtu "$MTU" --disable-host-loopback \
        --enable-seccomp --cidr 198.19.77.0/24 --api-socket "$tmp/api" --netns-type=path \
        "/run/netns/${tag}i" tap0 >"$tmp/helper.log" 2>&1 &
      echo $! >"$tmp/helper"; pids+=($!)
      for _ in $(seq 50); do [ -S "$tmp/api" ] && break; sleep 0.1; done
      for port in 5201 5202; do
        python3 - "$tmp/api" "$port" <<'PY'
import json, socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
s.sendall(json.dumps({"execute": "add_hostfwd", "arguments": {"proto": "tcp", "host_addr": "0.0.0.0",
    "host_port": int(sys.argv[2]), "guest_addr": "198.19.77.100", "guest_port": int(sys.argv[2])}}).encode())
r = json.loads(s.recv(4096))
assert "error" not in r, r
PY
      done
      ;;
  esac
}
unhelper() { kill "$(cat "$tmp/helper")" 2>/dev/null || true; wait "$(cat "$tmp/helper")" 2>/dev/null || true; ip netns del "${tag}i"; }

measure() { # one round, $1 the container's namespace: "out_gbit in_gbit rr_in_us rr_out_us"
  local out in rr_in rr_out
  out=$(ip netns exec "${tag}t" iperf3 -c 198.18.77.2 -p 5201 -t "$SECS" -R -J | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9)')
  in=$(ip netns exec "${tag}t" iperf3 -c 198.18.77.2 -p 5201 -t "$SECS" -J | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9)')
  rr_in=$(ip netns exec "${tag}t" python3 -c "$PING" 198.18.77.2 5202)
  rr_out=$(ip netns exec "$1" python3 -c "$PING" 198.18.77.1 5203)
  echo "$out $in $rr_in $rr_out"
}

echo "== reference: iperf3 and a ping-pong through the same helpers ($ROUNDS rounds, $SECS s each)"
: >"$tmp/ref"
for r in $(seq "$ROUNDS"); do
  serve "${tag}e"; echo "veth $(measure "${tag}e")" >>"$tmp/ref"; unserve
  for h in pasta slirp4netns; do
    helper "$h"; serve "${tag}i"; echo "$h $(measure "${tag}i")" >>"$tmp/ref"; unserve; unhelper
  done
  echo "   round $r done"
done

python3 - "$tmp/vp.json" "$tmp/ref" "$MTU" <<'PY'
import json, statistics, sys
run = json.load(open(sys.argv[1]))
ref = {}
for line in open(sys.argv[2]):
    k, *v = line.split()
    ref.setdefault(k, []).append([float(x) for x in v])
med = {k: [statistics.median(c) for c in zip(*v)] for k, v in ref.items()}
def row(env, workload, metric):
    for r in run["results"]:
        if r["environment"] == env and r["workload"].startswith(workload) and r["metric"] == metric:
            return r
def vp(env, workload, metric):
    r = row(env, workload, metric)
    o = (r or {}).get("overhead") or {}
    ci = o.get("ci95") or [float("nan")] * 2
    return o.get("ratio", float("nan")), ci, ((r or {}).get("verdict") or {}).get("phrase", "—")
mtu = sys.argv[3]
print(f"\n{'helper':12} {'metric':11} {'virtperf (ratio to veth, 95 %; medians)':44} {'reference (ratio to veth; medians)':28}")
for h in ["pasta", "slirp4netns"]:
    env = f"container:network={h},network_mtu={mtu}"
    cases = [("tcp_stream:direction=out", "tcp_goodput", "stream out"),
             ("tcp_stream:direction=in", "tcp_goodput", "stream in"),
             ("tcp_rr:direction=in", "tcp_rr_latency", "rr, in"), ("tcp_rr:direction=out", "tcp_rr_latency", "rr, out")]
    for i, (workload, metric, name) in enumerate(cases):
        r, ci, phrase = vp(env, workload, metric)
        ref_ratio = med[h][i] / med["veth"][i]
        fmt = (lambda v: f"{v:.2f} Gbit/s") if i < 2 else (lambda v: f"{v:.1f} us")
        own = (row(env, workload, metric) or {}).get("median", float("nan"))
        base = (row("container", workload, metric) or {}).get("median", float("nan"))
        print(f"{h:12} {name:11} ×{r:.3f} [{ci[0]:.3f}, {ci[1]:.3f}] {phrase[:22]:22} ×{ref_ratio:.3f}")
        print(f"{'':12} {'':11} {fmt(own)} against {fmt(base):29} {fmt(med[h][i])} against {fmt(med['veth'][i])}")
print("\nRootlessKit's table (docs/network.md, 26 Jul 2026: iperf3 from the namespace out to the host, MTU 1500 / 65520):")
print("  slirp4netns 1.69 / 8.11 Gbit/s; pasta 0.24 / 31.9; gvisor-tap-vsock 2.46 / 8.75; lxc-user-nic 49.1 / 50.7; rootful veth 49.3 / 50.8")
PY
