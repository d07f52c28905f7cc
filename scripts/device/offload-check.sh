#!/usr/bin/env bash
# Issue 17 on the H200: offload plans on a CUDA GPU (prepared here, run
# there). The device tool lends 15 device minutes in all (the machine's
# start included) and runs one command for at most 600 s, so the check is
# two commands of one script:
#   here:  scripts/build.sh && bash scripts/device/prepare-offload.sh
#          (build/device: cuda-check's executables; build/device-offload:
#          the matrix subset and the 2.7B benchmark, executables only)
#   device tool, carry ["build/device", "build/device-offload"]:
#     1. bash scripts/device/offload-check.sh --part 1     (timeout_s 330)
#          a. scripts/device/cuda-check.sh (every kernel against the CPU, a
#             GPT trained on both), within --cuda-budget seconds (200)
#          b. the offload matrix subset (snake F=0.5, M=1 and 4; parameters,
#             optimizer state and gradients on SSD; everything with the
#             activations on host): each executable trained 4 steps with
#             --device cuda and --device cpu; fp32, so the weights must agree
#             to 1e-5 by max relative error (max |cuda - cpu| over every
#             element, over the model's largest |cpu| weight), and every step
#             move exactly the plan's bytes per link
#     2. bash scripts/device/offload-check.sh --part 2     (timeout_s 510)
#          c. the benchmark: a GPT of 2.78B parameters (L=32 D=2560 H=32
#             V=50304, 8 x 1024 tokens, M=4) under --gpu-mem 16GiB
#             --host-mem 24GiB with parameters, optimizer state and
#             gradients on SSD: horizontal F=0 (ZeRO-Infinity's order)
#             against snake with the optimizer overlap F=1, at the same
#             batch and budgets, and the same model resident in GPU memory;
#             prints each iteration time, the ratio (target >= 2.0x),
#             snake's measured / cost-model iteration time (target <= 1.10),
#             its transfer overlap from --stats-json (target >= 0.90) and
#             the offload efficiency, tokens/s offloaded / tokens/s resident
#             (target >= 0.90); the result JSON (with the commands) is
#             $OUT/offload-h200-<UTC time>.json: commit it under bench/results/
#   issue 23 (placement by layer), after part 1:
#     3. bash scripts/device/offload-check.sh --part 3     (timeout_s 510)
#          d. the benchmark GPT under the same budgets with the planner's
#             placement (no class pinned): whole classes against classes
#             split by layer between host and SSD, at snake F=0 (where the
#             planner may also cut a block between them) and then F=1; each
#             iteration time, the ratio whole / split of each pair, and the
#             SSD bytes read and written per iteration of each
#             (--stats-json); the result JSON is
#             $OUT/offload-placement-h200-<UTC time>.json
# Each part stops starting work --budget seconds after its start (part 1:
# 300, parts 2 and 3: 480; runs that are not expected to end in time are skipped,
# and said so) and prints a short table last. Every row goes to $OUT as it
# comes. $OUT gets at most 5 files (the device tool returns 8):
# offload-check.log, offload-check-rows.jsonl, cuda-check.log,
# cuda-check-losses.jsonl, offload-h200-*.json.
#
# Options: --part 1|2|3|all (default all: parts 1 and 2, for a machine without
# the tool's limit), --budget SECONDS (per part), --cuda-budget SECONDS,
# --device D (default cuda) and --ref-device D (default cpu), --local (this
# machine: --device loopback, no cuda-check, the bench on the loopback
# device; after prepare-offload.sh --tiny), --dry-run (the commands and the
# time budget; runs nothing), --help. Environment: OUT (the result files;
# default /tmp/spillway-offload-check), WORK (scratch), SSD_DIR (the
# benchmark's swap: default build/offload-ssd, on the repository's disk),
# OFFLOAD_DIR (default build/device-offload).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OFF=${OFFLOAD_DIR:-$ROOT/build/device-offload}
PART=all BUDGET="" CUDA_BUDGET=200 DEVICE=cuda REF=cpu LOCAL=0 DRY=0
die() { echo "offload-check: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --part|--budget|--cuda-budget|--device|--ref-device) [ $# -ge 2 ] || die "$1 needs a value" ;;
  esac
  case $1 in
    --part) PART=$2; shift ;;
    --budget) BUDGET=$2; shift ;;
    --cuda-budget) CUDA_BUDGET=$2; shift ;;
    --device) DEVICE=$2; shift ;;
    --ref-device) REF=$2; shift ;;
    --local) LOCAL=1 DEVICE=loopback ;;
    --dry-run) DRY=1 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
  shift
done
case $PART in 1|2|3|all) ;; *) die "--part must be 1, 2, 3 or all" ;; esac
for v in "$CUDA_BUDGET" ${BUDGET:+"$BUDGET"}; do
  [[ $v =~ ^[0-9]+$ ]] || die "'$v' is not a number of seconds"
done
OUTDIR=${OUT:-/tmp/spillway-offload-check}
WORK=${WORK:-/tmp/spillway-offload-check-work}
SSD=${SSD_DIR:-$ROOT/build/offload-ssd}
mkdir -p "$OUTDIR" "$WORK"
ROWS=$OUTDIR/offload-check-rows.jsonl
PY=(python3 "$ROOT/scripts/device/offload_check.py")
DRYFLAG=()
[ "$DRY" = 1 ] && DRYFLAG=(--dry-run)
TEE=""
if [ "$DRY" = 0 ]; then
  exec > >(tee -a "$OUTDIR/offload-check.log") 2>&1
  TEE=$!
fi
[ "$DRY" = 1 ] || : > "$ROWS"

budget_of() { # the part's budget in seconds
  if [ -n "$BUDGET" ]; then echo "$BUDGET"; elif [ "$1" = 1 ]; then echo 300; else echo 480; fi
}

part1() {
  local start=$SECONDS budget
  budget=$(budget_of 1)
  local deadline=$(( $(date +%s) + budget ))
  echo "== part 1: cuda-check and the offload matrix subset (budget $budget s)"
  if [ "$LOCAL" = 1 ]; then
    [ "$DRY" = 1 ] || "${PY[@]}" row --rows "$ROWS" --stage cuda-check --name cuda-check.sh \
      --status SKIP --detail "--local: no GPU"
  elif [ "$DRY" = 1 ]; then
    bash "$ROOT/scripts/device/cuda-check.sh" --budget "$CUDA_BUDGET" --dry-run
  else
    bash "$ROOT/scripts/device/cuda-check.sh" --budget "$CUDA_BUDGET"
    local rc=$?
    "${PY[@]}" row --rows "$ROWS" --stage cuda-check --name cuda-check.sh \
      --status "$([ $rc = 0 ] && echo ok || echo FAIL)" \
      --detail "exit $rc; its table above, cuda-check.log"
  fi
  "${PY[@]}" matrix --rows "$ROWS" --work "$WORK/matrix" --device "$DEVICE" --ref-device "$REF" \
    --exe-dir "$OFF/matrix" --deadline "$deadline" ${DRYFLAG[@]+"${DRYFLAG[@]}"}
  echo "== part 1 took $((SECONDS - start)) s"
}

# Where the benchmark's weights go: RAM (/dev/shm is tmpfs; 11 GB at 2.7B),
# so the disk holds the plans' SSD state (41 GiB); the work directory
# without a writable /dev/shm or with --local.
weights_dir() {
  if [ "$LOCAL" != 1 ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
    echo /dev/shm/spillway-bench
  else
    echo "$WORK/weights"
  fi
}

# The command that reruns part N as this run was asked (for the results).
rerun_command() {
  echo "bash scripts/device/offload-check.sh --part $1$([ -n "$BUDGET" ] && echo " --budget $BUDGET")$([ "$DEVICE" != cuda ] && echo " --device $DEVICE") (prepared by scripts/device/prepare-offload.sh)"
}

part2() {
  local start=$SECONDS budget
  budget=$(budget_of 2)
  local deadline=$(( $(date +%s) + budget ))
  local wdir
  wdir=$(weights_dir)
  mkdir -p "$wdir"
  local stamp
  stamp=$(date -u +%Y%m%dT%H%M%SZ)
  echo "== part 2: the benchmark (budget $budget s)"
  # The plans' swap on the repository's own disk (not /tmp, which may be
  # RAM): the disk shared/hardware/h200.json measured.
  mkdir -p "$SSD"
  [ "$DRY" = 1 ] || { df -h "$SSD" /dev/shm 2>/dev/null; findmnt -n -T "$SSD" 2>/dev/null; } | sed 's/^/   /'
  "${PY[@]}" bench --rows "$ROWS" --work "$WORK/bench" --device "$DEVICE" --deadline "$deadline" \
    --bench-dir "$OFF/bench" --weights-dir "$wdir" --ssd "$SSD" \
    --result-json "$OUTDIR/offload-h200-$stamp.json" \
    --command "$(rerun_command 2)" \
    ${DRYFLAG[@]+"${DRYFLAG[@]}"}
  rm -rf "$SSD"
  echo "== part 2 took $((SECONDS - start)) s"
}

part3() {
  local start=$SECONDS budget
  budget=$(budget_of 3)
  local deadline=$(( $(date +%s) + budget ))
  local wdir
  wdir=$(weights_dir)
  mkdir -p "$wdir" "$SSD"
  local stamp
  stamp=$(date -u +%Y%m%dT%H%M%SZ)
  echo "== part 3: placement by layer against whole classes (budget $budget s)"
  "${PY[@]}" bench --rows "$ROWS" --work "$WORK/placement" --device "$DEVICE" --deadline "$deadline" \
    --bench-dir "$OFF/bench" --weights-dir "$wdir" --ssd "$SSD" --configs whole-f0,split-f0,whole,split \
    --result-json "$OUTDIR/offload-placement-h200-$stamp.json" \
    --command "$(rerun_command 3)" \
    ${DRYFLAG[@]+"${DRYFLAG[@]}"}
  rm -rf "$SSD"
  echo "== part 3 took $((SECONDS - start)) s"
}

if [ "$DRY" = 1 ]; then
  echo "offload-check --dry-run: part $PART; part 1 budget $(budget_of 1) s (cuda-check $CUDA_BUDGET s of it), parts 2 and 3 budget $(budget_of 2) s"
  echo "device tool: carry [\"build/device\", \"build/device-offload\"]; command 'bash scripts/device/offload-check.sh --part 1' (timeout_s 330), then '--part 2' (timeout_s 510)"
fi
for d in "$OFF/matrix" "$OFF/bench"; do
  [ -d "$d" ] || die "$d is missing: run scripts/device/prepare-offload.sh here and carry build/device-offload"
done
# prepare-offload.sh packs the executables (33 MB) into 3 MiB of xz.
if [ "$DRY" = 0 ] && [ -f "$OFF/executables.tar.xz" ]; then
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="data")' \
    "$OFF/executables.tar.xz" "$OFF" || die "cannot unpack $OFF/executables.tar.xz"
fi
[ "$DRY" = 1 ] || { echo "== machine"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -2
  nproc; free -g | head -2; cat "$OFF/BUILD_INFO" 2>/dev/null; }
[ "$DRY" = 1 ] || [ "$DEVICE" != cuda ] || . "$ROOT/scripts/device/cuda-env.sh"
case $PART in
  1) part1 ;;
  2) part2 ;;
  3) part3 ;;
  all) part1; part2 ;;
esac
[ "$DRY" = 1 ] && exit 0
"${PY[@]}" table --rows "$ROWS"
rc=$?
# The log's tee finishes before the command returns (the tool then copies $OUT).
exec >&- 2>&-
[ -n "$TEE" ] && wait "$TEE" 2>/dev/null
exit "$rc"
