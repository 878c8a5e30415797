#!/usr/bin/env bash
# TCP across a path between two hosts: iperf3 against virtperf's `native` environment on host b
# (launched over SSH, its agent's line relayed), with the tester here, side by side in one run.
# Here the "hosts" are two network namespaces joined by a veth (198.18.7.1 here, 198.18.7.2 = b),
# b running its own sshd, as in the e2e tests; on a real lab, point the same experiment at it.
#
#   1. iperf3 -c 198.18.7.1 from b (b sends, as tcp_stream's direction=out), ROUNDS × SECS
#      virtperf: native on host b, tcp_stream duration=SECS, ROUNDS repetitions
#   2. the tester on b ([lab] tester_host = "b"), the environment here:
#      iperf3 -c 198.18.7.2 from here (here sends) against virtperf's native here → tester on b
#   target: virtperf / iperf3 >= 0.9 in both
#
# Usage (root): bench/remote.sh     ROUNDS=5 SECS=3 by default
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${BIN:-target/release/virtperf}")
ROUNDS=${ROUNDS:-5}
SECS=${SECS:-3}
[ "$(id -u)" = 0 ] || { echo "bench/remote.sh: needs root"; exit 3; }
for p in iperf3 ssh ssh-keygen /usr/sbin/sshd nsenter; do
  command -v "$p" >/dev/null || { echo "bench/remote.sh: $p missing (scripts/install-deps.sh installs it)"; exit 3; }
done
tmp=$(mktemp -d)
S=vpbench-b-$$; C=vpbench-a-$$
made_run_sshd=0
cleanup() {
  [ -f "$tmp/sshd.pid" ] && kill "$(cat "$tmp/sshd.pid")" 2>/dev/null || true
  [ -n "${srv:-}" ] && kill "$srv" 2>/dev/null || true
  ip netns delete "$C" 2>/dev/null || true
  ip netns delete "$S" 2>/dev/null || true
  [ "$made_run_sshd" = 1 ] && rmdir /run/sshd 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add "$S"; ip netns add "$C"
ip -n "$C" link add eth0 type veth peer name eth0 netns "$S"
ip -n "$C" addr add 198.18.7.1/24 dev eth0; ip -n "$S" addr add 198.18.7.2/24 dev eth0
for ns in "$C" "$S"; do ip -n "$ns" link set eth0 up; ip -n "$ns" link set lo up; done
for k in hostkey clientkey; do ssh-keygen -q -t ed25519 -N '' -f "$tmp/$k"; done
cp "$tmp/clientkey.pub" "$tmp/authorized_keys"
cat > "$tmp/sshd_config" <<CFG
Port 22
ListenAddress 198.18.7.2
HostKey $tmp/hostkey
PidFile $tmp/sshd.pid
AuthorizedKeysFile $tmp/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
UsePAM no
StrictModes no
AcceptEnv VIRTPERF_*
CFG
cat > "$tmp/ssh_config" <<CFG
Host b
  HostName 198.18.7.2
  User root
  IdentityFile $tmp/clientkey
  IdentitiesOnly yes
  UserKnownHostsFile /dev/null
  StrictHostKeyChecking no
  LogLevel ERROR
  SetEnv VIRTPERF_STATE_DIR=$tmp/remote-state VIRTPERF_CACHE=$tmp/remote-cache
CFG
[ -d /run/sshd ] || { mkdir -p /run/sshd; made_run_sshd=1; }
nsenter --net=/run/netns/"$S" /usr/sbin/sshd -f "$tmp/sshd_config"
for _ in $(seq 50); do nsenter --net=/run/netns/"$C" ssh -F "$tmp/ssh_config" -o BatchMode=yes b true 2>/dev/null && break; sleep 0.2; done
cat > "$tmp/exp.toml" <<EXP
name = "bench-remote"
[[host]]
name = "b"
ssh = "b"
ssh_config = "$tmp/ssh_config"
addr = "198.18.7.2"
local_addr = "198.18.7.1"
[[env]]
kind = "native"
name = "native@b"
host = "b"
[[workload]]
kind = "tcp_stream"
duration = "${SECS}s"
EXP
# ROUNDS iperf3 runs, server in namespace $1 on $2, client in $3 sending; Gbit/s per line in $4.
iperf_rounds() {
  : > "$4"
  for _ in $(seq "$ROUNDS"); do
    nsenter --net=/run/netns/"$1" iperf3 -s -1 -B "$2" > /dev/null 2>&1 & srv=$!
    sleep 0.3
    nsenter --net=/run/netns/"$3" iperf3 -c "$2" -t "$SECS" -J > "$tmp/i.json" 2>/dev/null || true
    wait "$srv" 2>/dev/null || true; srv=
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"]/1e9)' "$tmp/i.json" >> "$4"
  done
}
# 1. iperf3: server here (C), client on b (S) sending.
iperf_rounds "$C" 198.18.7.1 "$S" "$tmp/iperf"
nsenter --net=/run/netns/"$C" "$BIN" run "$tmp/exp.toml" --reps "$ROUNDS" --warmup 1 --json --db "$tmp/v.db" > "$tmp/v.json"
# 2. The tester on b: iperf3's server on b, the client here.
sed -e 's/^host = "b"$//' -e 's/^name = "native@b"$/name = "native here"/' "$tmp/exp.toml" > "$tmp/exp2.toml"
printf '[lab]\ntester_host = "b"\n' >> "$tmp/exp2.toml"
iperf_rounds "$S" 198.18.7.2 "$C" "$tmp/iperf2"
nsenter --net=/run/netns/"$C" "$BIN" run "$tmp/exp2.toml" --reps "$ROUNDS" --warmup 1 --json --db "$tmp/v2.db" > "$tmp/v2.json"
python3 - "$tmp/iperf" "$tmp/v.json" "$tmp/iperf2" "$tmp/v2.json" <<'PY'
import json, statistics, sys
def pair(ipf, vf, env, what, iwhat):
    ip = [float(x) for x in open(ipf) if x.strip()]
    doc = json.load(open(vf))
    v = [r for r in doc["results"] if r["environment"] == env and r["metric"] == "tcp_goodput"][0]["mean"]
    print(f"iperf3 ({iwhat}):{' ' * (26 - len(iwhat))}mean {statistics.mean(ip):.3f} Gbit/s over {len(ip)} rounds")
    print(f"virtperf {what}:{' ' * (24 - len(what))}mean {v:.3f} Gbit/s")
    print(f"ratio virtperf / iperf3: {v / statistics.mean(ip):.3f}   (target >= 0.9)")
pair(sys.argv[1], sys.argv[2], "native@b", "native@b tcp_stream", "b → here")
pair(sys.argv[3], sys.argv[4], "native here", "here → tester on b", "here → b")
PY
