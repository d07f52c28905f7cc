#!/usr/bin/env bash
# Issue 6's device test script: the CUDA backend against the CPU backend on
# the lent GPU machine (prepared here, run there; a few minutes of GPU time).
# That machine runs a copy of this repository without network and without
# MLIR: build what it runs here and carry it,
#   here:        scripts/build.sh && bash scripts/device/prepare-cuda.sh
#   device tool: command "bash scripts/device/cuda-check.sh"  carry ["build/device"]
# (scripts/device/offload-check.sh runs it first, with a smaller --budget.)
# Steps:
#   1. spillway-cuda-check: every CUDA kernel on fresh random inputs (never
#      zeros) against the CPU backend, fp32 and bf16, outputs poisoned with
#      NaN bytes first, guard bytes after every tensor, every CUDA call
#      checked; the AdamW and FOAM kernels bit for bit;
#   2. a 2-block GPT trained 50 steps on the GPU (--device cuda) and on the
#      CPU (--device cpu) by the same executable: the loss curves must agree
#      (fp32: 1e-3 relative, bf16: 3e-2; a wrong kernel moves them by O(1)),
#      for AdamW in fp32 and bf16 and for FOAM in fp32, and for AdamW in
#      bf16-mixed (--precision bf16-mixed: bf16 activations and working
#      weights; 3e-2 as bf16) resident and, last, with an offload plan
#      (params on host, a GPU optimizer: the update rounds the working
#      copies on the GPU into a copy made from the bound masters,
#      sched.alloc), and resident with bf16 optimizer state
#      (--optimizer-state-dtype bf16);
#   3. NCCL (--collectives nccl, issue 21): the fp32 GPT 20 steps on the GPU
#      with a communicator of one rank (ncclAllReduce and the div kernel on
#      every gradient) and with --collectives mpi (no average alone): the
#      weights bit for bit (libnccl.so.2 from the toolkit or PyTorch's
#      wheels, cuda-env.sh; none found: SKIP).
# Time: the kernel check may run 180 s, each of the 14 training runs 45 s
# (810 s at most; each takes seconds on an H200); a stage that
# would not start 10 s before --budget SECONDS (default 480) is skipped and
# said so, and no stage's timeout runs past the budget, so the table always
# prints. --dry-run prints the commands and their time allotments.
# Ends with a short table. Exit status 0 only when everything ran and
# passed. $OUT (the device tool's) gets two files: cuda-check.log (this
# output, then the kernel check's full log) and cuda-check-losses.jsonl
# (every training run's --log-json lines, each with its run's name).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEV=${DEV:-$ROOT/build/device}
OUTDIR=${OUT:-/tmp/spillway-cuda-check}
BUDGET=480 DRY=0
KERNEL_TIMEOUT=180 TRAIN_TIMEOUT=45
while [ $# -gt 0 ]; do
  case $1 in
    --budget) [ $# -ge 2 ] || { echo "cuda-check: --budget needs seconds" >&2; exit 2; }
              BUDGET=$2; shift ;;
    --dry-run) DRY=1 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; exit 0 ;;
    *) echo "cuda-check: unknown option '$1' (--budget SECONDS, --dry-run)" >&2; exit 2 ;;
  esac
  shift
done
[[ $BUDGET =~ ^[0-9]+$ ]] || { echo "cuda-check: --budget '$BUDGET' is not a number of seconds" >&2; exit 2; }
mkdir -p "$OUTDIR"
LOG=$OUTDIR/cuda-check.log
LOSSES=$OUTDIR/cuda-check-losses.jsonl
WORK=$(mktemp -d /tmp/spillway-cuda-check.XXXXXX)
if [ "$DRY" = 0 ] && [ ! -x "$DEV/spillway-cuda-check" ]; then
  echo "cuda-check: $DEV/spillway-cuda-check is missing: run scripts/device/prepare-cuda.sh here and carry build/device" >&2
  exit 2
fi
# cuBLASLt 13 is linked dynamically (the toolkit ships no static one): the
# toolkit's, or the one PyTorch's wheels bring.
[ "$DRY" = 1 ] || . "$ROOT/scripts/device/cuda-env.sh"

# Seconds a stage may run: its own timeout, or less where the budget ends
# first; 0 (skip it) when under 10 s would be left.
allot() {
  local left=$((BUDGET - SECONDS))
  local t=$(( $1 < left ? $1 : left ))
  if [ "$t" -ge 10 ]; then echo "$t"; else echo 0; fi
}

declare -a ROWS
record() { ROWS+=("$(printf '%-34s %-6s %s' "$1" "$2" "$3")"); }

train_pair() { # name exe tolerance [extra flags]
  local name=$1 exe=$2 tol=$3; shift 3
  local I="--input tokens=$DEV/tokens.npy --input targets=$DEV/targets.npy --weights $DEV/gpt-fp32.weights"
  if [ "$DRY" = 1 ]; then
    echo "[$name: 2 x ${TRAIN_TIMEOUT} s] $DEV/$exe $I --steps 50 --device cpu|cuda --log-json $WORK/$name-{cpu,gpu}.jsonl $*"
    return 0
  fi
  local t
  t=$(allot "$TRAIN_TIMEOUT")
  if [ "$t" = 0 ]; then record "$name (rtol $tol)" SKIP "time budget (${SECONDS} of ${BUDGET} s used)"; return 1; fi
  echo "== $name: 50 steps on the CPU and on the GPU (each at most $t s)"
  timeout "$t" "$DEV/$exe" $I --steps 50 --device cpu --log-json "$WORK/$name-cpu.jsonl" "$@" | tail -2
  local c=${PIPESTATUS[0]}
  t=$(allot "$TRAIN_TIMEOUT")
  if [ "$t" = 0 ]; then record "$name (rtol $tol)" SKIP "time budget (${SECONDS} of ${BUDGET} s used)"; return 1; fi
  timeout "$t" "$DEV/$exe" $I --steps 50 --device cuda --log-json "$WORK/$name-gpu.jsonl" "$@" 2>&1 | tail -6
  local g=${PIPESTATUS[0]}
  local d
  for d in cpu gpu; do
    [ -f "$WORK/$name-$d.jsonl" ] &&
      sed "s/^{/{\"run\": \"$name\", \"device\": \"$d\", /" "$WORK/$name-$d.jsonl" >> "$LOSSES"
  done
  if [ "$c" != 0 ] || [ "$g" != 0 ]; then
    record "$name" FAIL "exit status cpu $c, gpu $g (124: timed out)"; return 1
  fi
  local cmp
  cmp=$(python3 "$ROOT/test/e2e/compare_losses.py" "$WORK/$name-gpu.jsonl" "$WORK/$name-cpu.jsonl" --rtol "$tol" 2>&1)
  local rc=$?
  local worst
  worst=$(python3 - "$WORK/$name-gpu.jsonl" "$WORK/$name-cpu.jsonl" <<'PY'
import json, sys
g = [json.loads(l)["loss"] for l in open(sys.argv[1])]
c = [json.loads(l)["loss"] for l in open(sys.argv[2])]
print(f"max rel diff {max(abs(a - b) / abs(b) for a, b in zip(g, c)):.2e}, final loss gpu {g[-1]:.5f} cpu {c[-1]:.5f}")
PY
)
  echo "$cmp"
  record "$name (rtol $tol)" "$([ $rc = 0 ] && echo ok || echo FAIL)" "$worst"
  return $rc
}

# NCCL with one rank against no averaging: the same weights bit for bit.
nccl_one_rank() {
  local I="--input tokens=$DEV/tokens.npy --input targets=$DEV/targets.npy --weights $DEV/gpt-fp32.weights --steps 20 --device cuda"
  local name="nccl one rank (exact)"
  if [ "$DRY" = 1 ]; then
    echo "[nccl: 2 x ${TRAIN_TIMEOUT} s] $DEV/gpt-fp32 $I --collectives nccl|mpi --save $WORK/nccl-{nccl,mpi}.safetensors"
    return 0
  fi
  if [ -z "${SPW_NCCL_DIR:-}" ]; then
    record "$name" SKIP "no libnccl.so.2 (toolkit, ldconfig, PyTorch's nvidia wheels)"; return 0
  fi
  echo "== NCCL: 20 steps with a communicator of one, and without (libnccl in $SPW_NCCL_DIR)"
  local c t rc=0
  for c in nccl mpi; do
    t=$(allot "$TRAIN_TIMEOUT")
    if [ "$t" = 0 ]; then record "$name" SKIP "time budget (${SECONDS} of ${BUDGET} s used)"; return 1; fi
    timeout "$t" "$DEV/gpt-fp32" $I --collectives "$c" --save "$WORK/nccl-$c.safetensors" 2>&1 | grep -E "collectives|done|error" | tail -3
    local s=${PIPESTATUS[0]}
    if [ "$s" != 0 ]; then record "$name" FAIL "--collectives $c: exit status $s (124: timed out)"; return 1; fi
  done
  local cmp
  cmp=$(python3 "$ROOT/test/e2e/compare_weights.py" "$WORK/nccl-nccl.safetensors" "$WORK/nccl-mpi.safetensors" --exact 2>&1)
  rc=$?
  echo "$cmp"
  record "$name" "$([ $rc = 0 ] && echo ok || echo FAIL)" "$(echo "$cmp" | tail -1)"
  return $rc
}

if [ "$DRY" = 1 ]; then
  echo "cuda-check --dry-run: budget $BUDGET s; the kernel check at most $KERNEL_TIMEOUT s, 14 training runs at most $TRAIN_TIMEOUT s each"
  echo "[kernels: ${KERNEL_TIMEOUT} s] $DEV/spillway-cuda-check"
  train_pair adamw-fp32 gpt-fp32 1e-3
  train_pair adamw-bf16 gpt-bf16 3e-2
  train_pair foam-fp32 gpt-foam 1e-3
  train_pair adamw-bf16-mixed gpt-mixed 3e-2
  train_pair adamw-bf16-mixed-offload gpt-mixed-offload 3e-2
  train_pair adamw-bf16-mixed-state16 gpt-mixed-state16 3e-2
  nccl_one_rank
  echo "results: $LOG, $LOSSES"
  rm -rf "$WORK"
  exit 0
fi
: > "$LOSSES"
{
  echo "== machine"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || echo "nvidia-smi: not found"
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  cat "$DEV/BUILD_INFO" 2>/dev/null || echo "no BUILD_INFO: build/device predates it"
  failed=0
  echo "== spillway-cuda-check (budget $BUDGET s)"
  t=$(allot "$KERNEL_TIMEOUT")
  if [ "$t" = 0 ]; then
    record "kernels (spillway-cuda-check)" SKIP "time budget"; failed=1
  else
    timeout "$t" "$DEV/spillway-cuda-check" > "$WORK/kernels.log" 2>&1
    rc=$?
    grep -v "^ok " "$WORK/kernels.log"
    record "kernels (spillway-cuda-check)" "$([ $rc = 0 ] && echo ok || echo FAIL)" \
      "$(grep -c '^ok ' "$WORK/kernels.log") ok, $(grep -c '^FAIL' "$WORK/kernels.log") failed, exit $rc$([ $rc = 124 ] && echo ' (timed out)')"
    [ $rc = 0 ] || failed=1
  fi
  train_pair adamw-fp32 gpt-fp32 1e-3 || failed=1
  train_pair adamw-bf16 gpt-bf16 3e-2 || failed=1
  train_pair foam-fp32 gpt-foam 1e-3 || failed=1
  train_pair adamw-bf16-mixed gpt-mixed 3e-2 || failed=1
  train_pair adamw-bf16-mixed-offload gpt-mixed-offload 3e-2 || failed=1
  train_pair adamw-bf16-mixed-state16 gpt-mixed-state16 3e-2 || failed=1
  nccl_one_rank || failed=1
  echo
  echo "== summary"
  printf '%s\n' "${ROWS[@]}"
  echo "== $([ $failed = 0 ] && echo PASSED || echo FAILED) ($SECONDS s)"
  exit $failed
} 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
# The kernel check's every line, after the summary (one file back, not two).
[ -f "$WORK/kernels.log" ] && { echo; echo "== spillway-cuda-check, full log"; cat "$WORK/kernels.log"; } >> "$LOG"
rm -rf "$WORK"
exit "$rc"
