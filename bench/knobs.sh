#!/usr/bin/env bash
# What Docker's default seccomp profile costs, virtperf's knob against a bare runc, side by side in
# one run (issue: what each knob costs; docs/knobs.md):
#
#   virtperf: --env container --knobs container:seccomp, workloads syscall (getppid) and pipe_rr;
#             the knob's paired ratio (the container with the profile / the one without).
#   reference: a bare `runc run` of a bundle of its own (the host's /usr bound read-only), with and
#             without the OCI section that profile makes, running stress-ng's own stressors of the
#             same mechanisms: for system calls python3's os.getppid() in a loop (the same call;
#             its interpreter adds ~200 ns a call, so the filter's cost is compared in ns added per
#             call, not as a ratio; stress-ng's `--get` calls some the profile refuses, which then
#             return at once and make it look faster), and for pipes stress-ng's `--switch
#             --switch-method pipe` (a pipe round trip between two processes). The section is
#             resolved here in Python, apart from virtperf's resolver (env/seccomp.rs), the way
#             moby's setupSeccomp does for a container with no capabilities: two implementations
#             that agree are evidence for both.
#
# Rounds alternate with and without the filter; medians of python's ns per call and stress-ng's
# bogo ops/s.
# Usage (root): bench/knobs.sh      ROUNDS=5, REPS=10, LAUNCHES=3 by default
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/virtperf}
ROUNDS=${ROUNDS:-5}
REPS=${REPS:-10}
LAUNCHES=${LAUNCHES:-3}
PROFILE=/usr/share/containers/seccomp.json
[ "$(id -u)" = 0 ] || { echo "bench/knobs.sh: needs root"; exit 3; }
for t in runc stress-ng python3; do
  command -v "$t" >/dev/null || { echo "bench/knobs.sh: $t missing (make deps)"; exit 3; }
done
[ -f "$PROFILE" ] || { echo "bench/knobs.sh: $PROFILE missing (apt-get install golang-github-containers-common)"; exit 3; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

python3 - "$BIN" "$ROUNDS" "$REPS" "$LAUNCHES" "$PROFILE" "$tmp" <<'PY'
import json, os, platform, re, statistics, subprocess, sys
binary, rounds, reps, launches, profile, tmp = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]

def kernel_at_least(v):
    want = [int(x) for x in re.findall(r"\d+", v)[:2]] + [0]
    have = [int(x) for x in re.findall(r"\d+", platform.release())[:2]]
    return have >= want[:2]

def oci_section(path, caps=()):
    """Docker's profile resolved for a container with `caps` on this host (moby's setupSeccomp)."""
    p = json.load(open(path))
    arch, native = "amd64", "SCMP_ARCH_X86_64"
    arches = []
    for m in p.get("archMap", []):
        if m["architecture"] == native:
            arches += [m["architecture"]] + m.get("subArchitectures", [])
    rules = []
    for r in p.get("syscalls", []):
        ex, inc = r.get("excludes") or {}, r.get("includes") or {}
        if arch in ex.get("arches", []) or any(c in caps for c in ex.get("caps", [])):
            continue
        if ex.get("minKernel") and kernel_at_least(ex["minKernel"]):
            continue
        if inc.get("arches") and arch not in inc["arches"]:
            continue
        if any(c not in caps for c in inc.get("caps", [])):
            continue
        if inc.get("minKernel") and not kernel_at_least(inc["minKernel"]):
            continue
        s = {"names": r.get("names") or [r["name"]], "action": r["action"]}
        if r.get("args"):
            s["args"] = r["args"]
        if r.get("errnoRet") is not None:
            s["errnoRet"] = r["errnoRet"]
        rules.append(s)
    sec = {"defaultAction": p["defaultAction"], "architectures": arches, "syscalls": rules}
    if p.get("defaultErrnoRet") is not None:
        sec["defaultErrnoRet"] = p["defaultErrnoRet"]
    return sec

def bundle(name, seccomp):
    b = os.path.join(tmp, name)
    os.makedirs(b)
    subprocess.run(["runc", "spec", "--bundle", b], check=True)
    spec = json.load(open(os.path.join(b, "config.json")))
    rootfs = os.path.join(b, "rootfs")
    for d in ("usr", "tmp"):
        os.makedirs(os.path.join(rootfs, d))
    for d in ("bin", "sbin", "lib", "lib64"):
        if os.path.islink("/" + d):
            os.symlink(os.readlink("/" + d), os.path.join(rootfs, d))
    spec["root"] = {"path": "rootfs", "readonly": True}
    spec["mounts"] = [m for m in spec["mounts"] if m["type"] != "cgroup"]
    spec["mounts"].append({"destination": "/usr", "type": "bind", "source": "/usr", "options": ["rbind", "ro"]})
    spec["mounts"].append({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev"]})
    spec["process"]["terminal"] = False
    spec["process"]["cwd"] = "/tmp"
    spec["process"]["noNewPrivileges"] = True
    caps = []
    spec["process"]["capabilities"] = {"bounding": caps, "effective": caps, "permitted": caps}
    if seccomp:
        spec["linux"]["seccomp"] = oci_section(profile, caps)
    json.dump(spec, open(os.path.join(b, "config.json"), "w"))
    return b

bundles = {"plain": bundle("plain", False), "filtered": bundle("filtered", True)}
STRESSORS = {
    "syscall": ["/usr/bin/python3", "-c", "import os, time\nn = 2000000\nt = time.perf_counter()\n"
                "for _ in range(n): os.getppid()\nprint('rate', n / (time.perf_counter() - t))"],
    "pipe_rr": ["/usr/bin/stress-ng", "--switch", "1", "--switch-method", "pipe", "--switch-ops", "400000", "--metrics-brief"],
}

def stress(which, args, r):
    """The reference's rate: dd's bytes per second, stress-ng's bogo ops/s (real time)."""
    b = bundles[which]
    spec = json.load(open(os.path.join(b, "config.json")))
    spec["process"]["args"] = args
    json.dump(spec, open(os.path.join(b, "config.json"), "w"))
    out = subprocess.run(["runc", "run", "--bundle", b, f"vpknob{os.getpid()}-{which}-{r}"],
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    text = out.stdout + out.stderr
    m = re.search(r"^rate ([\d.]+)$", text, re.M)
    if m:
        return float(m.group(1))
    # stress-ng: metrc: [pid] stressor bogo ops real time usr time sys time bogo ops/s (real time) ...
    for line in text.splitlines():
        f = line.split()
        if "switch" in f:
            i = f.index("switch")
            try:
                return float(f[i + 5])
            except (IndexError, ValueError):
                pass
    raise SystemExit(f"bench/knobs.sh: stress-ng {' '.join(args)} under the {which} bundle printed no rate (exit {out.returncode}): {text[-400:]}")

ref = {w: {"plain": [], "filtered": []} for w in STRESSORS}
for r in range(rounds):
    for w, args in STRESSORS.items():
        for which in (("plain", "filtered") if r % 2 == 0 else ("filtered", "plain")):
            ref[w][which].append(stress(which, args, r))

db = os.path.join(tmp, "k.db")
out = subprocess.run([binary, "run", "--env", "native", "--env", "container", "--knobs", "container:seccomp",
                      "--workload", "syscall", "--workload", "pipe_rr", "--reps", reps, "--launches", launches,
                      "--json", "--db", db], capture_output=True, text=True, check=True)
doc = json.loads(out.stdout)
print(f"seccomp=default (Docker's profile, {profile}) against no filter, {rounds} rounds of stress-ng, virtperf {reps} reps x {launches} launches:")
print(f"{'mechanism':<10} {'virtperf: the knob (time ratio, 95 %), added':<44} {'the reference in bare runc (medians)':<52}")
for w in STRESSORS:
    k = [x for x in doc.get("knob_costs", []) if x["workload"] == w and x["metric"] == f"{w}_time"]
    if not k:
        raise SystemExit(f"bench/knobs.sh: no knob cost for {w}: {json.dumps(doc.get('knob_costs'))[:400]}")
    o = k[0]["overhead"]
    ci = o.get("ci") or [float("nan")] * 2
    plain = [x for x in doc["results"] if x["environment"] == "container" and x["metric"] == f"{w}_time"][0]
    added = (o["ratio"] - 1.0) * plain["mean"]
    mine = f"x{o['ratio']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}] {k[0]['verdict']['word']}, {added:+.0f} {plain['unit'].split('/')[0]}"
    pm, fm = statistics.median(ref[w]["plain"]), statistics.median(ref[w]["filtered"])
    if w == "syscall":
        theirs = f"{1e9 / pm:.0f} vs {1e9 / fm:.0f} ns a call (python3): {1e9 / fm - 1e9 / pm:+.0f} ns"
    else:
        theirs = f"x{pm / fm:.3f} ({pm:,.0f} vs {fm:,.0f} bogo ops/s, stress-ng)"
    print(f"{w:<10} {mine:<44} {theirs:<52}")
PY
