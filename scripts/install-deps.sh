#!/usr/bin/env bash
# Installs what virtperf needs and is missing, from Debian's packages. Idempotent and quiet when
# everything is there. Without root it only says what to install.
set -euo pipefail

# command-to-look-for:debian-package
NEEDS=(
  "cc:gcc"            # builds the bundled SQLite
  "runc:runc"         # container environment (default OCI runtime)
  "crun:crun"         # container environment, runtime=crun
  "runsc:runsc"       # gvisor environment
  "linux.uml:user-mode-linux"  # uml environment
  "ip:iproute2"       # the lab: network namespaces, bridge, veths
  "tc:iproute2"       # the lab: link emulation (tbf, netem)
  "iperf3:iperf3"     # bench/net.sh: the reference for tcp_stream and udp_stream
  "qemu-system-x86_64:qemu-system-x86"  # qemu environment
  "busybox:busybox-static"  # the qemu guest image's userland (must be the static build)
  "xz:xz-utils"       # unpacks the guest kernel (bzImage payload)
  "objcopy:binutils"  # strips debug info from the agent copied into the guest image
  "python3:python3"   # bench/*.sh drive the side-by-side runs
  "make:make"         # the uml environment's own kernel where the packaged one cannot run here
  "flex:flex"         #   (virtperf image build --uml: linux-source-6.12 + the xstate patch)
  "bison:bison"
  "bc:bc"
  "patch:patch"
  "strace:strace"     # e2e: proves the patched UML kernel hands ptrace the host's XSAVE size
  "mke2fs:e2fsprogs"  # formats the guests' scratch disks (ext4) on the host
  "fio:fio"           # bench/disk.sh: the reference for the disk workload
  "cyclictest:rt-tests"  # bench/timer.sh: the reference for the timer workload
  "stress-ng:stress-ng"  # bench/mechanisms.sh: references for syscall, fork and ctxswitch
  "chromium-headless-shell:chromium-headless-shell"  # e2e: the HTML report checked in a real browser
)

missing=()
for pair in "${NEEDS[@]}"; do
  cmd=${pair%%:*}; pkg=${pair#*:}
  command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg")
done
# A dynamically linked busybox (Debian's `busybox`) cannot run in the guest image. (ldd exits 1 on
# a static binary: read its words first, or pipefail takes that for "dynamic" and reinstalls.)
if command -v busybox >/dev/null 2>&1; then
  linkage=$(ldd "$(command -v busybox)" 2>&1 || true)
  case "$linkage" in
    *"not a dynamic"*) ;;
    *) missing+=("busybox-static") ;;
  esac
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "install-deps: no cargo on PATH. Install a Rust toolchain (rustup, or Debian's 'cargo' if it is recent enough: this workspace needs Rust >= 1.75)." >&2
  missing+=("cargo")
fi

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  echo "install-deps: missing packages: ${missing[*]}; run as root, or: sudo apt-get install -y ${missing[*]}" >&2
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
