#!/usr/bin/env bash
# Installs what virtperf needs and is missing, from Debian's packages. Idempotent and quiet when
# everything is there. Without root it only says what to install.
#   scripts/install-deps.sh        everything: the environments, the tests' and benches' references
#   scripts/install-deps.sh run    what `make run` (examples/default.toml) needs, no more: a fresh
#                                  machine's first answer does not wait for a browser and libvirt
set -euo pipefail
SCOPE=${1:-all}

# What `make run` needs (the default experiment's environments, the guest image, virtperf's UML
# kernel where the packaged one cannot run); the rest is for tests, benches and other examples.
RUN_NEEDS=(cc runc runsc linux.uml ip tc qemu-system-x86_64 busybox xz objcopy make flex bison bc patch)

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
  "stress-ng:stress-ng"  # bench/mechanisms.sh: references for syscall, fork and ctxswitch; the stress-ng workload
  "sysbench:sysbench"    # the sysbench workload (tools inside environments)
  "glusterd:glusterfs-server"   # the pfs workload's servers (seed 001's parallel file system)
  "glusterfs:glusterfs-client"  #   and its client on the tester (FUSE)
  "nginx:nginx"                 # the nginx workload's server (docs/apps.md)
  "wrk:wrk"                     # bench/apps.sh: the reference for nginx's capacity
  "redis-server:redis-server"   # the redis workload's server
  "redis-benchmark:redis-tools" #   and its reference client (bench/apps.sh)
  "pasta:passt"                 # container network = "pasta" (rootless Podman's network)
  "slirp4netns:slirp4netns"     # container network = "slirp4netns" (RootlessKit's, older Podman's)
  "pg_ctlcluster:postgresql"    # the postgres workload's server, initdb and pgbench (its client)
  "chromium-headless-shell:chromium-headless-shell"  # e2e: the HTML report checked in a real browser
  "virsh:libvirt-clients"              # libvirt environment: virtperf drives libvirt with virsh
  "libvirtd:libvirt-daemon-system"     #   the system daemon (qemu:///system)
  "virt-xml-validate:libvirt-clients"  #   unit test: the domain XML against libvirt's schema
  "xmllint:libxml2-utils"              #   (virt-xml-validate runs xmllint)
  "qemu-img:qemu-utils"                #   e2e: a domain's qcow2 disk, which holds its snapshot
  "ssh:openssh-client"                 # remote hosts: virtperf reaches them with ssh
  "sshd:openssh-server"                # e2e: a "remote host" is a namespace running its own sshd
  "ovs-vswitchd:openvswitch-switch"    # the lab's switch = "ovs" (userspace datapath, started by the run)
  "ethtool:ethtool"                    #   (its ports need checksums filled in by the sender)
  "/usr/lib/x86_64-linux-gnu/libvirt/connection-driver/libvirt_driver_qemu.so:libvirt-daemon-driver-qemu"
  "/usr/share/containers/seccomp.json:golang-github-containers-common"  # container seccomp=default (docs/knobs.md)
)

missing=()
for pair in "${NEEDS[@]}"; do
  cmd=${pair%%:*}; pkg=${pair#*:}
  if [ "$SCOPE" = run ] && [[ ! " ${RUN_NEEDS[*]} " == *" $cmd "* ]]; then continue; fi
  if [ "${cmd#/}" != "$cmd" ]; then [ -e "$cmd" ] || missing+=("$pkg"); continue; fi
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

if [ "$(id -u)" != 0 ]; then
  if [ ${#missing[@]} -gt 0 ]; then
    echo "install-deps: missing packages: ${missing[*]}; run as root, or: sudo apt-get install -y ${missing[*]}" >&2
  fi
  exit 0
fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # No package starts a service while it installs (openssh-server would listen on every
  # address, libvirt would start its default network): policy-rc.d says no, and is removed after.
  policy=/usr/sbin/policy-rc.d
  own_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod 755 "$policy"; own_policy=1
  fi
  trap '[ "$own_policy" = 1 ] && rm -f "$policy"' EXIT
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# /dev/kvm with Debian's udev permissions (root:kvm 0660) where no udev ran: libvirt's QEMU runs
# as root here, but libvirt probes /dev/kvm as its `libvirt-qemu` user, and with a root-only node
# it finds its cached capabilities stale on every start (68 s per domain instead of 0.6 s).
if [ -c /dev/kvm ] && getent group kvm >/dev/null && [ "$(stat -c %G /dev/kvm)" != kvm ]; then
  chgrp kvm /dev/kvm && chmod 0660 /dev/kvm || true
fi

# The libvirt environment needs the system daemon answering. QEMU's output goes to a file of
# libvirt's own instead of through virtlogd (stdio_handler = "file"): one daemon less that must be
# up for a domain to start. Where an init system runs, it starts the daemon; elsewhere (containers,
# CI machines without systemd), this does. Failures here are not fatal: doctor says why.
if command -v libvirtd >/dev/null 2>&1; then
  conf=/etc/libvirt/qemu.conf
  if [ -f "$conf" ] && ! grep -Eq '^[[:space:]]*stdio_handler[[:space:]]*=' "$conf"; then
    printf '\n# set by virtperf scripts/install-deps.sh: QEMU writes its log itself (no virtlogd needed)\nstdio_handler = "file"\n' >> "$conf"
    restart_libvirtd=1
  fi
  if ! virsh -c qemu:///system version --daemon >/dev/null 2>&1 || [ "${restart_libvirtd:-0}" = 1 ]; then
    if [ -d /run/systemd/system ]; then
      systemctl restart virtlogd.socket libvirtd.service >/dev/null 2>&1 || true
    else
      if [ -f /run/libvirtd.pid ] && kill -0 "$(cat /run/libvirtd.pid)" 2>/dev/null; then
        kill "$(cat /run/libvirtd.pid)" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$(cat /run/libvirtd.pid 2>/dev/null)" 2>/dev/null || break; sleep 0.1; done
      fi
      virtlogd -d >/dev/null 2>&1 || true
      libvirtd -d >/dev/null 2>&1 || true
    fi
    for _ in $(seq 100); do
      virsh -c qemu:///system version --daemon >/dev/null 2>&1 && break
      sleep 0.1
    done
    virsh -c qemu:///system version --daemon >/dev/null 2>&1 \
      || echo "install-deps: libvirtd does not answer; the libvirt environment will be refused (see: virtperf doctor)" >&2
  fi
fi
