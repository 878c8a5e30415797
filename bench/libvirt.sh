#!/usr/bin/env bash
# What libvirt adds to a QEMU guest: the same guest (same kernel, initramfs, agent, virtio NIC on
# the lab's tap, TCG here) launched by virtperf's own QEMU command line (`qemu`) and as a libvirt
# domain (`libvirt`), side by side in one run, and, for the start, a bare `virsh create` of the
# very domain XML virtperf generates (the daemon's own path, to the guest's first console line).
#
#   memcpy (host clock) and tcp_stream goodput: libvirt / qemu      expected ≈ 1 (the same guest;
#                                                                 this host's noise: ±15 % at 5 reps)
#   start to agent ready: libvirt vs qemu, and vs the bare virsh create to the same console line
#
# Usage (root): bench/libvirt.sh     REPS=5 by default
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/virtperf}
REPS=${REPS:-5}
[ "$(id -u)" = 0 ] || { echo "bench/libvirt.sh: needs root"; exit 3; }
virsh -q -c qemu:///system version --daemon >/dev/null 2>&1 || { echo "bench/libvirt.sh: libvirtd does not answer (make deps starts it)"; exit 3; }
tmp=$(mktemp -d)
trap 'virsh -q destroy vpbench-bare >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT

"$BIN" run --env native --env qemu --env libvirt:domain_type=qemu \
  --workload memcpy:size=8MiB,copies=10 --workload tcp_stream:duration=2s \
  --reps "$REPS" --warmup 1 --json --db "$tmp/b.db" > "$tmp/run.json"

# The bare daemon path: virsh create of the domain XML virtperf generates (no NIC), timed to the
# agent's first console line on its socket.
mkdir -p "$tmp/bare"
"$BIN" image domain-xml vpbench-bare --socket-dir "$tmp/bare" --set domain_type=qemu > "$tmp/bare.xml"
python3 - "$tmp" <<'PY'
import json, os, socket, statistics, subprocess, sys, time
tmp = sys.argv[1]
def bare():
    t0 = time.monotonic()
    subprocess.run(["virsh", "-q", "create", f"{tmp}/bare.xml"], check=True, capture_output=True)
    s = socket.socket(socket.AF_UNIX)
    while True:
        try:
            s.connect(f"{tmp}/bare/agent.sock"); break
        except OSError:
            time.sleep(0.01)
    s.settimeout(60)
    buf = b""
    while b'"hello"' not in buf:
        d = s.recv(4096)
        if not d: break
        buf += d
    t = time.monotonic() - t0
    s.close()
    subprocess.run(["virsh", "-q", "destroy", "vpbench-bare"], capture_output=True)
    return t * 1e3
bares = [bare() for _ in range(3)]
doc = json.load(open(f"{tmp}/run.json"))
def mean(env, metric):
    return [r for r in doc["results"] if r["environment"] == env and r["metric"] == metric][0]["mean"]
lv, q = "libvirt:domain_type=qemu", "qemu"
print(f"{'metric':<28}{'qemu':>12}{'libvirt':>12}{'libvirt/qemu':>14}")
for m, unit in [("memcpy_time", "ms"), ("tcp_goodput", "Gbit/s"), ("host_cpu_time", "ms")]:
    a, b = mean(q, m), mean(lv, m)
    print(f"{m + ' (' + unit + ')':<28}{a:>12.3f}{b:>12.3f}{b / a:>14.3f}")
starts = {e["name"]: e["start_ms_mean"] for e in doc["environments"]}
print(f"{'start to agent ready (ms)':<28}{starts[q]:>12.0f}{starts[lv]:>12.0f}{starts[lv] / starts[q]:>14.3f}")
print(f"bare virsh create to the agent's hello: median {statistics.median(bares):.0f} ms (of {len(bares)}); "
      f"virtperf's libvirt start / bare = {starts[lv] / statistics.median(bares):.3f}")
PY
