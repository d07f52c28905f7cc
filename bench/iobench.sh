#!/usr/bin/env bash
# fio vs Spillway's I/O engine: sequential O_DIRECT write and read of the same
# file, alternating the two tools for R rounds, median of each. Target: the
# engine reaches >= 0.95 of fio's throughput for both ops.
#
# usage: bench/iobench.sh [-r ROUNDS] [-s SIZE] [-b REQUEST] [-q DEPTH] [-f FILE] [-o OUT.json]
#   defaults: 5 rounds, 2G, 1M, 32, FILE=${BENCH_DIR:-/tmp}/spillway-iobench-$$.bin (removed after)
# env: IOBENCH=path/to/spillway-iobench (default: build/bin or build-*/bin of this repo)
#      FIO=path/to/fio (FIO=none: behave as if fio were absent)
#      FIO_EXTRA="--fixedbufs=1 ..."  more fio options (recorded in the summary)
#      FIO_HUGEPAGES=auto|reserve|off  fio's buffers (default auto). The engine's
#        pinned pool is backed by transparent huge pages, so a 1 MiB request is a
#        few large DMA segments; fio's default 4 KiB-page buffers make 256, which
#        a virtio disk (max_segments 254) splits in two. For a fair baseline fio
#        gets huge pages too (--iomem=mmaphuge --fixedbufs=1), which needs
#        reserved hugetlb pages: auto uses them when enough are free, reserve
#        (root) reserves them for the run and restores vm.nr_hugepages after,
#        off (or too few pages) runs fio with 4 KiB pages and says the ratio
#        then flatters the engine.
#      RECORDED_BASELINE=FILE.json  where fio is missing, compare against the
#        numbers recorded in that hardware profile (shared/hardware/h200.json:
#        ssd[0].odirect_uring_1MiB_qd32_{write,read}_gbps) instead of failing
# Every measurement is one fio job (ioengine=io_uring, direct=1, numjobs=1,
# rw=write|read, bs, iodepth, size) or one spillway-iobench run with the same
# file, size, request and depth. Neither tool's timing includes an fsync.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=5 SIZE=2G BS=1M QD=32 FILE="" OUTJSON=""
while getopts "r:s:b:q:f:o:h" opt; do
  case $opt in
    r) ROUNDS=$OPTARG ;; s) SIZE=$OPTARG ;; b) BS=$OPTARG ;; q) QD=$OPTARG ;;
    f) FILE=$OPTARG ;; o) OUTJSON=$OPTARG ;;
    *) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 2 ;;
  esac
done
COMMAND="${FIO_EXTRA:+FIO_EXTRA='$FIO_EXTRA' }bench/iobench.sh $*"

IOBENCH=${IOBENCH:-}
if [ -z "$IOBENCH" ]; then
  for c in "$ROOT"/build/bin/spillway-iobench "$ROOT"/build-*/bin/spillway-iobench; do
    [ -x "$c" ] && { IOBENCH=$c; break; }
  done
fi
[ -n "$IOBENCH" ] && [ -x "$IOBENCH" ] || {
  echo "iobench.sh: spillway-iobench not found: build it (ninja -C build spillway-iobench) or set IOBENCH" >&2; exit 1; }
FIO=${FIO:-$(command -v fio || true)}
[ "$FIO" = none ] && FIO=""
if [ -z "$FIO" ] && [ -z "${RECORDED_BASELINE:-}" ]; then
  echo "iobench.sh: fio not found (scripts/install-deps.sh installs it), and no RECORDED_BASELINE given" >&2; exit 1
fi

# fio's buffer memory (see FIO_HUGEPAGES above).
to_bytes() { python3 -c "import re,sys;m=re.fullmatch(r'(\d+)([KMG]?)(i?B)?',sys.argv[1],re.I);print(int(m[1])*{'':1,'K':1<<10,'M':1<<20,'G':1<<30}[m[2].upper()])" "$1"; }
HP_RESTORE=""
FIO_MEM=""
FIO_MEM_NOTE=""
if [ -n "$FIO" ]; then
  need=$(( ($(to_bytes "$QD") * $(to_bytes "$BS") + (2 << 20) - 1) / (2 << 20) + 2 ))
  free_hp=$(awk '/^HugePages_Free:/ {print $2}' /proc/meminfo 2>/dev/null || echo 0)
  mode=${FIO_HUGEPAGES:-auto}
  if [ "$mode" = reserve ] && [ "$free_hp" -lt "$need" ]; then
    old=$(cat /proc/sys/vm/nr_hugepages)
    if echo $(( old + need - free_hp )) >/proc/sys/vm/nr_hugepages 2>/dev/null; then
      HP_RESTORE=$old
      free_hp=$(awk '/^HugePages_Free:/ {print $2}' /proc/meminfo)
      echo "iobench.sh: reserved $need hugetlb pages for fio (vm.nr_hugepages $old -> $(cat /proc/sys/vm/nr_hugepages); restored at exit)" >&2
    else
      echo "iobench.sh: cannot reserve hugetlb pages (not root?)" >&2
    fi
  fi
  if [ "$mode" != off ] && [ "$free_hp" -ge "$need" ]; then
    FIO_MEM="--iomem=mmaphuge --fixedbufs=1"
  else
    FIO_MEM_NOTE="fio used 4 KiB-page buffers (FIO_HUGEPAGES=${mode}, $free_hp free hugetlb pages, $need needed): the ratio flatters the engine; rerun as root with FIO_HUGEPAGES=reserve"
    echo "iobench.sh: $FIO_MEM_NOTE" >&2
  fi
fi

REMOVE=0
if [ -z "$FILE" ]; then
  DIR=${BENCH_DIR:-/tmp}
  [ -d "$DIR" ] || { echo "iobench.sh: BENCH_DIR '$DIR' is not a directory" >&2; exit 1; }
  FILE="$DIR/spillway-iobench-$$.bin"; REMOVE=1
fi
TMP=$(mktemp -d)
cleanup() {
  rm -rf "$TMP"; [ "$REMOVE" = 1 ] && rm -f "$FILE"
  [ -n "$HP_RESTORE" ] && echo "$HP_RESTORE" >/proc/sys/vm/nr_hugepages; true
}
trap cleanup EXIT

echo "iobench.sh: $ROUNDS rounds, size $SIZE, request $BS, depth $QD, file $FILE" >&2
echo "iobench.sh: spillway-iobench = $IOBENCH; fio = ${FIO:-absent (baseline: ${RECORDED_BASELINE:-})} ${FIO_MEM}" >&2

# Lay the file out once, untimed, so neither tool pays for allocation.
"$IOBENCH" --path "$FILE" --size "$SIZE" --request "$BS" --depth "$QD" --op write --no-verify \
  >/dev/null 2>"$TMP/prep.err" || { cat "$TMP/prep.err" >&2; exit 1; }

fio_run() { # op round
  "$FIO" --name=spillway-$1 --filename="$FILE" --rw="$1" --bs="$BS" --iodepth="$QD" \
    --ioengine=io_uring --direct=1 --numjobs=1 --size="$SIZE" --output-format=json $FIO_MEM ${FIO_EXTRA:-} \
    >"$TMP/fio-$1-$2.json" 2>"$TMP/fio.err" || { cat "$TMP/fio.err" >&2; exit 1; }
}
spw_run() { # op round
  # A read verifies every byte afterwards, untimed (the file holds what the
  # preceding spillway write put there).
  local verify=--no-verify; [ "$1" = read ] && verify=""
  "$IOBENCH" --path "$FILE" --size "$SIZE" --request "$BS" --depth "$QD" --op "$1" $verify \
    >"$TMP/spw-$1-$2.json" 2>"$TMP/spw.err" || { cat "$TMP/spw.err" >&2; exit 1; }
}

for r in $(seq 1 "$ROUNDS"); do
  for op in write read; do
    if [ -n "$FIO" ]; then fio_run $op $r; fi
    spw_run $op $r
    # The spillway write must come last before the reads: its read verifies its pattern.
  done
  echo "iobench.sh: round $r/$ROUNDS done" >&2
done
grep -h "spillway:" "$TMP"/spw.err "$TMP/prep.err" 2>/dev/null | sort -u >&2 || true

mkdir -p "$ROOT/bench/results"
HOST=$(hostname 2>/dev/null || echo unknown)
[ -n "$OUTJSON" ] || OUTJSON="$ROOT/bench/results/iobench-$HOST-$(date -u +%Y%m%dT%H%M%SZ).json"
FSINFO=$(findmnt -n -o SOURCE,FSTYPE -T "$(dirname "$FILE")" 2>/dev/null | tr -s ' ' || echo "?")
FIOVER=$([ -n "$FIO" ] && "$FIO" --version || echo "absent")
python3 - "$TMP" "$ROUNDS" "$OUTJSON" "$COMMAND" "$HOST" "$FSINFO" "$FIOVER" "${RECORDED_BASELINE:-}" "$FILE" "$BS" "$QD" "$FIO_MEM ${FIO_EXTRA:-}" "$FIO_MEM_NOTE" <<'PY'
import json, os, platform, statistics, sys
tmp, rounds, out, command, host, fsinfo, fiover, recorded, path, bs, qd, fio_opts, fio_note = sys.argv[1:]
rounds = int(rounds)
def spw(op, r):
    with open(f"{tmp}/spw-{op}-{r}.json") as f:
        return json.loads(f.readline())
def fio(op, r):
    p = f"{tmp}/fio-{op}-{r}.json"
    if not os.path.exists(p):
        return None
    with open(p) as f:
        txt = f.read()
    j = json.loads(txt[txt.index("{"):])  # fio may print notes before the JSON
    return j["jobs"][0][op]["bw_bytes"] / 1e9
summary = {"command": command, "machine": {"host": host, "kernel": platform.release(),
           "cpus": os.cpu_count(), "file": path, "filesystem": fsinfo, "fio": fiover},
           "target_ratio": 0.95, "fio_extra_options": fio_opts.strip(), "ops": {}}
if fio_note:
    summary["fio_note"] = fio_note
baseline = "fio"
rec = None
if recorded:
    with open(recorded) as f:
        rec = json.load(f)["ssd"][0]
head = "fio GB/s" if os.path.exists(f"{tmp}/fio-write-1.json") else "recorded"
print(f"{'op':6} {head:>9} {'spillway GB/s':>14} {'ratio':>6}   (median of {rounds}; target >= 0.95)")
ok = True
for op in ("write", "read"):
    s = [spw(op, r)["gbps"] for r in range(1, rounds + 1)]
    fv = [fio(op, r) for r in range(1, rounds + 1)]
    if all(v is not None for v in fv):
        f_med = statistics.median(fv)
    else:
        baseline = f"recorded: {recorded} (fio absent here)"
        f_med = rec[f"odirect_uring_1MiB_qd32_{op}_gbps"]
        fv = None
    s_med = statistics.median(s)
    ratio = s_med / f_med
    ok = ok and ratio >= 0.95
    first = spw(op, 1)
    summary["ops"][op] = {"fio_gbps_median": round(f_med, 4), "spillway_gbps_median": round(s_med, 4),
                          "ratio": round(ratio, 4), "meets_target": ratio >= 0.95,
                          "fio_gbps": fv and [round(v, 4) for v in fv], "spillway_gbps": s,
                          "spillway_backend": first["backend"], "registered": first["registered"],
                          "direct": first["direct"], "bytes": first["bytes"],
                          "request_bytes": first["request_bytes"], "queue_depth": first["queue_depth"]}
    print(f"{op:6} {f_med:9.3f} {s_med:14.3f} {ratio:6.3f}   {'ok' if ratio >= 0.95 else 'BELOW TARGET'}")
summary["baseline"] = baseline
if baseline != "fio" and (bs.upper() not in ("1M", "1MIB", "1048576") or qd != "32"):
    print("note: the recorded baseline was measured at 1 MiB x QD32, not at these settings")
print(f"baseline: {baseline}; backend: {summary['ops']['read']['spillway_backend']}, "
      f"registered buffers: {summary['ops']['read']['registered']}, O_DIRECT: {summary['ops']['read']['direct']}")
with open(out, "w") as f:
    json.dump(summary, f, indent=1)
    f.write("\n")
if fio_note:
    print(f"note: {fio_note}")
print(f"summary: {out}")
sys.exit(0 if ok else 3)
PY
