#!/usr/bin/env bash
# Start to agent ready, against the bare runtime doing nothing, side by side in one run
# (issue: gVisor and UML environments). Alternating rounds; medians.
#
#  gvisor: virtperf's launch (bundle, runsc run, agent hello over the pipe) vs `runsc --network=none
#          do /bin/true` (runsc's own minimal path, to exit).                       target <= 1.5x
#  uml:    virtperf's launch (init script, linux.uml boot, agent hello on tty1) vs linux.uml
#          booting the same way to a trivial init that writes one line on tty1.      target <= 1.3x
#  container: virtperf's launch (runc run of its bundle, agent hello over the pipe) vs a bare
#          `runc run` of a bundle of the host's root, read-only, running /bin/true.   target <= 1.3x
#  qemu microvm: virtperf's "kernel boot" phase (QEMU spawned -> the guest init's first line) vs
#          QEMU booting the same kernel and initramfs (the image virtperf built, same machine,
#          vCPUs, memory and kernel command line) to a shell init that mounts what virtperf's init
#          mounts and prints one line on the serial console.                     target <= 1.1x
#
# virtperf's figure is the instance's stored start time (the runtime's process started → hello,
# host clock); beside it, "ready" (asked for → hello: what virtperf prepared first, included) and
# the PSS once ready, from the report's start-up (docs/lifecycle.md).
# Usage (root): bench/start.sh     ROUNDS=5 by default
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/virtperf}
ROUNDS=${ROUNDS:-5}
[ "$(id -u)" = 0 ] || { echo "bench/start.sh: needs root"; exit 3; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cat > "$tmp/init.sh" <<'EOF'
#!/bin/sh
mount -t proc proc /proc
echo ready > /dev/tty1
exec sleep 1000
EOF
chmod +x "$tmp/init.sh"

python3 - "$BIN" "$ROUNDS" "$tmp" <<'PY'
import glob, json, os, statistics, subprocess, sys, time
binary, rounds, tmp = sys.argv[1], int(sys.argv[2]), sys.argv[3]

ready = {}
def vp_start(env):
    db = os.path.join(tmp, "s.db")
    out = subprocess.run([binary, "run", "--env", env, "--workload", "noop", "--reps", "1", "--warmup", "0",
                          "--json", "--db", db], capture_output=True, text=True, check=True)
    e = [x for x in json.loads(out.stdout)["environments"] if x["kind"] == env][0]
    s = e.get("startup") or {}
    pss = [m["mean"] for m in s.get("memory", []) if m["name"] == "PSS"]
    ready.setdefault(env, []).append((s.get("ready_ms", {}).get("mean"), pss[0] if pss else None))
    return e["start_ms_mean"]

bundle = os.path.join(tmp, "bundle")
os.makedirs(bundle)
subprocess.run(["runc", "spec", "--bundle", bundle], check=True)
with open(os.path.join(bundle, "config.json")) as f:
    spec = json.load(f)
# A root of its own as virtperf's bundle has (pivot_root cannot move the host's "/"): the host's
# /usr bound read-only, /bin and /lib as the host links them.
rootfs = os.path.join(bundle, "rootfs")
os.makedirs(os.path.join(rootfs, "usr"))
for d in ("bin", "sbin", "lib", "lib64"):
    if os.path.islink("/" + d):
        os.symlink(os.readlink("/" + d), os.path.join(rootfs, d))
spec["root"] = {"path": "rootfs", "readonly": True}
spec["mounts"].append({"destination": "/usr", "type": "bind", "source": "/usr", "options": ["rbind", "ro"]})
spec["process"]["terminal"] = False
spec["process"]["args"] = ["/bin/true"]
# No cgroup file system inside (a hybrid v1/v2 host refuses it; virtperf's bundle mounts none).
spec["mounts"] = [m for m in spec["mounts"] if m["type"] != "cgroup"]
with open(os.path.join(bundle, "config.json"), "w") as f:
    json.dump(spec, f)

def bare_runc(r):
    t0 = time.monotonic()
    subprocess.run(["runc", "run", "--bundle", bundle, f"vpbench{os.getpid()}-{r}"], check=True,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return (time.monotonic() - t0) * 1e3

def bare_runsc():
    t0 = time.monotonic()
    subprocess.run(["runsc", "--network=none", "do", "/bin/true"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return (time.monotonic() - t0) * 1e3

def bare_uml():
    args = ["linux.uml", "mem=256M", "root=/dev/root", "rootfstype=hostfs", "hostfs=/", "ro",
            "init=" + os.path.join(tmp, "init.sh"), "con=null", "con0=null,fd:2", "con1=fd:0,fd:1", "quiet"]
    t0 = time.monotonic()
    p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         env=dict(os.environ, TMPDIR=tmp), start_new_session=True)
    line = p.stdout.readline()
    ms = (time.monotonic() - t0) * 1e3
    os.killpg(p.pid, 9)
    p.wait()
    assert b"ready" in line, line
    return ms

def vp_boot_microvm():
    """virtperf's microvm launch: its "kernel boot" phase (ms) and the image it booted."""
    db = os.path.join(tmp, "m.db")
    out = subprocess.run([binary, "run", "--env", "qemu:machine=microvm", "--workload", "noop", "--reps", "1",
                          "--warmup", "0", "--json", "--db", db], capture_output=True, text=True, check=True)
    e = [x for x in json.loads(out.stdout)["environments"] if x["kind"] == "qemu"][0]
    boot = [p["mean"] for p in (e.get("startup") or {}).get("phases", []) if p["name"] == "kernel boot"]
    return boot[0]

def microvm_image():
    """The image virtperf boots a microvm from (virtio-mmio drivers, this binary as its agent)."""
    real = os.path.realpath(binary)
    found = []
    for d in glob.glob(os.path.expanduser("~/.cache/virtperf/images/*/image.json")):
        with open(d) as f:
            img = json.load(f)
        if os.path.realpath(img.get("agent", "")) == real and "virtio_mmio" in img.get("modules", []):
            found.append((os.path.getmtime(d), os.path.dirname(d)))
    assert found, "no microvm image of this binary: run virtperf with qemu:machine=microvm once"
    return max(found)[1]

def tsc_khz():
    with open("/proc/cpuinfo") as f:
        for l in f:
            if l.startswith("cpu MHz"):
                return int(float(l.split(":")[1]) * 1000)

def bare_microvm(image):
    init = ("mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev; "
            "mount -t tmpfs tmp /tmp; echo virtperf-bare: start > /dev/console")
    append = f"console=ttyS0 quiet panic=-1 tsc_early_khz={tsc_khz()} rdinit=/bin/sh -- -c \"{init}\""
    args = ["qemu-system-x86_64", "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
            "-machine", "microvm", "-accel", "tcg", "-smp", "1", "-m", "512M",
            "-kernel", os.path.join(image, "vmlinux"), "-initrd", os.path.join(image, "initramfs.cpio"),
            "-append", append, "-chardev", "stdio,id=con,signal=off", "-serial", "chardev:con"]
    t0 = time.monotonic()
    p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    ms = None
    deadline = t0 + 60
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        if b"virtperf-bare: start" in line:
            ms = (time.monotonic() - t0) * 1e3
            break
    os.killpg(p.pid, 9)
    p.wait()
    assert ms is not None, "the bare microvm never printed its line"
    return ms

res = {"container": ([], []), "gvisor": ([], []), "uml": ([], []), "qemu microvm": ([], [])}
image = None
for r in range(rounds):
    res["container"][1].append(bare_runc(r)); res["container"][0].append(vp_start("container"))
    res["gvisor"][1].append(bare_runsc()); res["gvisor"][0].append(vp_start("gvisor"))
    res["uml"][1].append(bare_uml()); res["uml"][0].append(vp_start("uml"))
    res["qemu microvm"][0].append(vp_boot_microvm())
    image = image or microvm_image()
    res["qemu microvm"][1].append(bare_microvm(image))
    print(f"round {r+1}: container virtperf {res['container'][0][-1]:.0f} ms / runc run true {res['container'][1][-1]:.0f} ms;"
          f" gvisor virtperf {res['gvisor'][0][-1]:.0f} ms / runsc do true {res['gvisor'][1][-1]:.0f} ms;"
          f" uml virtperf {res['uml'][0][-1]:.0f} ms / bare boot {res['uml'][1][-1]:.0f} ms;"
          f" microvm kernel boot virtperf {res['qemu microvm'][0][-1]:.0f} ms / bare {res['qemu microvm'][1][-1]:.0f} ms",
          flush=True)
v, b = statistics.median(res["qemu microvm"][0]), statistics.median(res["qemu microvm"][1])
print(f"qemu microvm: kernel boot (QEMU spawned to the init's first line), median {v:.0f} ms vs bare {b:.0f} ms:"
      f" ratio {v/b:.2f} (target <= 1.1); image {image}")
for env, target in (("container", 1.3), ("gvisor", 1.5), ("uml", 1.3)):
    v, b = statistics.median(res[env][0]), statistics.median(res[env][1])
    rd = [x for x, _ in ready[env] if x is not None]
    pss = [p for _, p in ready[env] if p is not None]
    extra = (f"; ready (asked for to hello) median {statistics.median(rd):.0f} ms" if rd else "") + \
            (f", PSS once ready {statistics.median(pss):.1f} MiB" if pss else "")
    print(f"{env}: start to agent ready, median {v:.0f} ms vs bare {b:.0f} ms: ratio {v/b:.2f} (target <= {target}){extra}")
PY
