#!/usr/bin/env bash
# The disk workload against fio, natively, on the same file system and the same file size, side by
# side in one run:
#
#   sequential 1 MiB records: write (+ fsync at the end, fio end_fsync=1) and read (the file's pages
#                             dropped first: fio's invalidate=1, virtperf's posix_fadvise)
#   random 4 KiB records:     randread and randwrite (IOPS), as many records as the file holds
#   each buffered and with O_DIRECT (direct=1 / direct=true); every record once in the random
#   phases (fio's random map); files created by writing them (fio --fallocate=none), as virtperf does
#
# Target: virtperf >= 0.9 × fio's throughput and IOPS. Rounds alternate which tool goes first
# (this host is noisy); medians are compared.
# Usage: bench/disk.sh     ROUNDS=3 SIZE=256MiB DIR=/var/tmp by default (the file system measured)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/virtperf}
ROUNDS=${ROUNDS:-3}
SIZE=${SIZE:-256MiB}
DIR=${DIR:-/var/tmp}
command -v fio >/dev/null || { echo "bench/disk.sh: fio missing (scripts/install-deps.sh installs it)"; exit 3; }
tmp=$(mktemp -d "$DIR/vp-bench-disk.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fsz=${SIZE/MiB/M}; fsz=${fsz/GiB/G}
for f in fio vp; do : > "$tmp/$f"; done

# One fio job: $1 rw, $2 bs, $3 direct → "test value" (MB/s for sequential, IOPS for random).
fio_one() {
  local name="$1-$2-d$3"
  fio --name=vp --directory="$tmp" --filename=fio.dat --size="$fsz" --rw="$1" --bs="$2" \
      --direct="$3" --ioengine=psync --end_fsync=1 --invalidate=1 --fallocate=none --output-format=json \
      > "$tmp/fio.json" 2>/dev/null
  python3 - "$tmp/fio.json" "$name" "$1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
side = "read" if "read" in sys.argv[3] else "write"
v = j[side]["iops"] if sys.argv[3].startswith("rand") else j[side]["bw_bytes"] / 1e6
print(sys.argv[2], v)
PY
}
fio_all() {
  for d in 0 1; do
    # The sequential read and the random read need the file written first (untimed by fio).
    fio_one write 1M $d; fio_one read 1M $d; fio_one randread 4k $d; fio_one randwrite 4k $d
    rm -f "$tmp/fio.dat"
  done >> "$tmp/fio"
}
vp_all() {
  VIRTPERF_SCRATCH="$tmp/vs" "$BIN" run --env native \
    --workload "disk:file_size=$SIZE,record_size=[1MiB,4KiB],direct=[false,true],modes=[write,read,randread,randwrite]" \
    --reps 1 --warmup 0 --json --db "$tmp/vp.db" > "$tmp/v" 2>/dev/null
  rm -f "$tmp/vp.db"
  python3 - "$tmp/v" >> "$tmp/vp" <<'PY'
import json, sys
want = {("disk_write", 1 << 20): "write-1M", ("disk_read", 1 << 20): "read-1M",
        ("disk_randread_iops", 4096): "randread-4k", ("disk_randwrite_iops", 4096): "randwrite-4k"}
for r in json.load(open(sys.argv[1]))["results"]:
    p = r["params"]
    k = want.get((r["metric"], p["record_size"]))
    if k and r.get("instance") is None:
        print(f'{k}-d{1 if p["direct"] else 0}', r["mean"])
PY
}
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then fio_all; vp_all; else vp_all; fio_all; fi
  echo "round $r done"
done
python3 - "$tmp/fio" "$tmp/vp" <<'PY'
import sys, statistics as st
def load(p):
    d = {}
    for l in open(p):
        k, v = l.split(); d.setdefault(k, []).append(float(v))
    return {k: st.median(v) for k, v in d.items()}
f, v = load(sys.argv[1]), load(sys.argv[2])
worst = None
print(f'{"test":<18} {"fio":>10} {"virtperf":>10} {"ratio":>7}  (MB/s sequential, IOPS random; medians)')
for k in sorted(f):
    if k not in v: continue
    ratio = v[k] / f[k]
    worst = ratio if worst is None else min(worst, ratio)
    print(f"{k:<18} {f[k]:>10.1f} {v[k]:>10.1f} {ratio:>7.3f}")
print(f"lowest virtperf/fio: {worst:.3f} (target >= 0.9)")
PY
