#!/usr/bin/env bash
# fio vs Spillway's I/O engine on the lent H200 machine (prepared here, run
# there). The machine has no network and runs in a copy of this repository:
# build spillway-iobench here (it is linked statically) and carry its build
# directory's bin/, e.g. with the device tool:
#   command: bash bench/device/iobench-h200.sh     carry: ["build-store/bin"]
# It measures on the repository's own disk (where shared/hardware's probe
# measured "workdir disk": 2.1 GB/s write, 2.14 GB/s read at 1 MiB x QD32),
# 3 rounds of 4 GiB. Where fio is absent it compares against the numbers
# recorded in ../shared/hardware/h200.json and says so in the table and the
# JSON ("baseline"). The summary goes to $OUT (when the device tool sets it)
# and to bench/results/.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
IOBENCH=${IOBENCH:-$(ls -1 "$ROOT"/build*/bin/spillway-iobench 2>/dev/null | head -1)}
if [ -z "$IOBENCH" ] || [ ! -x "$IOBENCH" ]; then
  echo "iobench-h200: no build*/bin/spillway-iobench in this copy: carry the build's bin/ directory" >&2
  exit 1
fi
export IOBENCH
REC=""
# The recorded probe numbers: from shared/ where the copy has it, else the
# copy of its "ssd" section kept in bench/baselines/.
for c in "$ROOT/../shared/hardware/h200.json" "$ROOT/shared/hardware/h200.json" \
         "$ROOT/bench/baselines/h200-ssd.json"; do
  [ -f "$c" ] && { REC=$c; break; }
done
echo "== machine"; nproc; free -g | head -2; uname -r; df -h "$ROOT" | tail -1
findmnt -n -T "$ROOT" 2>/dev/null; ulimit -l
cat /proc/sys/kernel/io_uring_disabled 2>/dev/null | sed 's/^/kernel.io_uring_disabled=/'
FIO=${FIO:-$(command -v fio || true)}
[ "$FIO" = none ] && FIO=""
if [ -z "$FIO" ]; then
  if [ -z "$REC" ]; then
    echo "iobench-h200: fio is absent and no h200.json was found: nothing to compare against" >&2
    exit 1
  fi
  echo "== fio absent: baseline = numbers recorded in $REC"
  export RECORDED_BASELINE=$REC FIO=none
else
  echo "== baseline: fio ($("$FIO" --version)) on this machine"
fi
mkdir -p "$ROOT/bench/results"
SUMMARY="$ROOT/bench/results/iobench-h200-$(date -u +%Y%m%dT%H%M%SZ).json"
BENCH_DIR="$ROOT" bash "$ROOT/bench/iobench.sh" -r "${ROUNDS:-3}" -s "${SIZE:-4G}" -b 1M -q 32 -o "$SUMMARY"
rc=$?
# A second, shorter look at the request size and depth the probe found
# best for reads (256 KiB x QD64), engine only, for the record.
echo "== engine at 256 KiB x QD64 (probe: read 2.50 GB/s)"
"$IOBENCH" --path "$ROOT/iob-256k.bin" --size "${SIZE:-4G}" --request 256K --depth 64 --op both 2>&1
rm -f "$ROOT/iob-256k.bin"
if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then cp "$SUMMARY" "$OUT/"; fi
exit $rc
