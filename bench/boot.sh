#!/usr/bin/env bash
# QEMU boot to agent ready, against a bare QEMU boot of the same kernel to a busybox init, side by
# side in one run (issue: QEMU guests). Alternating rounds; medians.           target <= 1.3x
#
#  virtperf: `virtperf run --env qemu:machine=microvm --workload noop`: the instance's stored start
#            time (QEMU launch → the agent's hello on the virtio console, host clock), which covers
#            kernel boot, init, loading the virtio modules and starting the agent.
#  bare:     the same QEMU (-M microvm, the same ELF vmlinux via PVH, same memory, same accelerator)
#            booting a busybox-only initramfs whose init prints one line on the serial console.
#
# Also: an unchanged `virtperf image build` (the cache hit)                   target <= 1 s
# Usage (root): bench/boot.sh     ROUNDS=5 by default
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/virtperf}
ROUNDS=${ROUNDS:-5}
[ "$(id -u)" = 0 ] || { echo "bench/boot.sh: needs root"; exit 3; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$BIN" image build --json > "$tmp/image.json"

python3 - "$BIN" "$ROUNDS" "$tmp" <<'PY'
import json, os, statistics, subprocess, sys, time
binary, rounds, tmp = sys.argv[1], int(sys.argv[2]), sys.argv[3]
image = json.load(open(os.path.join(tmp, "image.json")))

def newc(entries, out):
    """A newc cpio archive: (name, mode, data, (rdev major, minor))."""
    with open(out, "wb") as f:
        for ino, (name, mode, data, rdev) in enumerate(entries + [("TRAILER!!!", 0, b"", (0, 0))], 1):
            n = name.encode() + b"\0"
            hdr = "070701" + "".join("%08X" % v for v in
                  (ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1], len(n), 0))
            f.write(hdr.encode() + n + b"\0" * (-(110 + len(n)) % 4) + data + b"\0" * (-len(data) % 4))

busybox = open("/bin/busybox", "rb").read()
init = b"#!/bin/busybox sh\n/bin/busybox echo ready\nexec /bin/busybox sleep 1000\n"
bare = os.path.join(tmp, "bare.cpio")
newc([("dev", 0o40755, b"", (0, 0)), ("dev/console", 0o20600, b"", (5, 1)), ("bin", 0o40755, b"", (0, 0)),
      ("bin/busybox", 0o100755, busybox, (0, 0)), ("init", 0o100755, init, (0, 0))], bare)

# Both boots get what virtperf gives a microvm under TCG (env/qemu.rs: machine_append): the TSC
# frequency, which this machine type cannot calibrate without HPET/PM timer on a busy host.
mhz = [float(l.split(":")[1]) for l in open("/proc/cpuinfo") if l.startswith("cpu MHz")][0]
tsc = "tsc_early_khz=%d" % int(mhz * 1000)

def bare_boot():
    args = ["qemu-system-x86_64", "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
            "-machine", "microvm", "-accel", "tcg", "-smp", "1", "-m", "512M",
            "-kernel", image["vmlinux"], "-initrd", bare, "-append", "console=ttyS0 quiet panic=-1 " + tsc,
            "-serial", "stdio"]
    t0 = time.monotonic()
    p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    ok = False
    for line in p.stdout:
        if b"ready" in line:
            ok = True
            break
    ms = (time.monotonic() - t0) * 1e3
    p.kill(); p.wait()
    if not ok:
        sys.exit("bare boot: QEMU ended without the init's line")
    return ms

def vp_boot():
    db = os.path.join(tmp, "b.db")
    out = subprocess.run([binary, "run", "--env", "qemu:machine=microvm,accel=tcg,memory=512MiB", "--workload", "noop",
                          "--reps", "1", "--warmup", "0", "--boot-timeout", "60s", "--json", "--db", db],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["environments"][0]["start_ms_mean"]

def cache_hit():
    t0 = time.monotonic()
    subprocess.run([binary, "image", "build"], check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - t0

v, b = [], []
for r in range(rounds):
    b.append(bare_boot()); v.append(vp_boot())
    print(f"round {r+1}: virtperf boot to agent ready {v[-1]:.0f} ms / bare QEMU boot to busybox init {b[-1]:.0f} ms", flush=True)
hits = [cache_hit() for _ in range(3)]
mv, mb = statistics.median(v), statistics.median(b)
print(f"qemu (microvm, TCG, {image['kernel_source']}): boot to agent ready, median {mv:.0f} ms vs bare {mb:.0f} ms: "
      f"ratio {mv/mb:.2f} (target <= 1.3)")
print(f"unchanged image rebuild: median {statistics.median(hits):.3f} s (target <= 1 s)")
PY
