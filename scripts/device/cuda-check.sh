#!/usr/bin/env bash
# Issue 6's device test script: the CUDA backend against the CPU backend on
# the lent GPU machine (prepared here, run there; a few minutes of GPU time).
# That machine runs a copy of this repository without network and without
# MLIR: build what it runs here and carry it,
#   here:        scripts/build.sh && bash scripts/device/prepare-cuda.sh
#   device tool: command "bash scripts/device/cuda-check.sh"  carry ["build/device"]
# Steps:
#   1. spillway-cuda-check: every CUDA kernel on fresh random inputs (never
#      zeros) against the CPU backend, fp32 and bf16, outputs poisoned with
#      NaN bytes first, guard bytes after every tensor, every CUDA call
#      checked; the AdamW and FOAM kernels bit for bit;
#   2. a 2-block GPT trained 50 steps on the GPU (--device cuda) and on the
#      CPU (--device cpu) by the same executable: the loss curves must agree
#      (fp32: 1e-3 relative, bf16: 3e-2; a wrong kernel moves them by O(1)),
#      for AdamW in fp32 and bf16 and for FOAM in fp32.
# Ends with a short table. Exit status 0 only when everything passed. The
# log also goes to $OUT (the device tool's) as cuda-check.log.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEV=${DEV:-$ROOT/build/device}
OUTDIR=${OUT:-/tmp/spillway-cuda-check}
mkdir -p "$OUTDIR"
LOG=$OUTDIR/cuda-check.log
if [ ! -x "$DEV/spillway-cuda-check" ]; then
  echo "cuda-check: $DEV/spillway-cuda-check is missing: run scripts/device/prepare-cuda.sh here and carry build/device" >&2
  exit 2
fi
# cuBLASLt 13 is linked dynamically (the toolkit ships no static one): the
# toolkit's, or the one PyTorch's wheels bring.
. "$ROOT/scripts/device/cuda-env.sh"

declare -a ROWS
record() { ROWS+=("$(printf '%-34s %-6s %s' "$1" "$2" "$3")"); }

train_pair() { # name exe tolerance [extra flags]
  local name=$1 exe=$2 tol=$3; shift 3
  local I="--input tokens=$DEV/tokens.npy --input targets=$DEV/targets.npy --weights $DEV/gpt-fp32.weights"
  echo "== $name: 50 steps on the CPU and on the GPU"
  timeout 60 "$DEV/$exe" $I --steps 50 --device cpu --log-json "$OUTDIR/$name-cpu.jsonl" "$@" | tail -2
  local c=${PIPESTATUS[0]}
  timeout 60 "$DEV/$exe" $I --steps 50 --device cuda --log-json "$OUTDIR/$name-gpu.jsonl" "$@" 2>&1 | tail -6
  local g=${PIPESTATUS[0]}
  if [ "$c" != 0 ] || [ "$g" != 0 ]; then
    record "$name" FAIL "exit status cpu $c, gpu $g"; return 1
  fi
  local cmp
  cmp=$(python3 "$ROOT/test/e2e/compare_losses.py" "$OUTDIR/$name-gpu.jsonl" "$OUTDIR/$name-cpu.jsonl" --rtol "$tol" 2>&1)
  local rc=$?
  local worst
  worst=$(python3 - "$OUTDIR/$name-gpu.jsonl" "$OUTDIR/$name-cpu.jsonl" <<'PY'
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

{
  echo "== machine"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || echo "nvidia-smi: not found"
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  cat "$DEV/BUILD_INFO" 2>/dev/null || echo "no BUILD_INFO: build/device predates it"
  failed=0
  echo "== spillway-cuda-check"
  timeout 240 "$DEV/spillway-cuda-check" > "$OUTDIR/kernels.log" 2>&1
  rc=$?
  grep -v "^ok " "$OUTDIR/kernels.log"
  record "kernels (spillway-cuda-check)" "$([ $rc = 0 ] && echo ok || echo FAIL)" \
    "$(grep -c '^ok ' "$OUTDIR/kernels.log") ok, $(grep -c '^FAIL' "$OUTDIR/kernels.log") failed, exit $rc"
  [ $rc = 0 ] || failed=1
  train_pair adamw-fp32 gpt-fp32 1e-3 || failed=1
  train_pair adamw-bf16 gpt-bf16 3e-2 || failed=1
  train_pair foam-fp32 gpt-foam 1e-3 || failed=1
  echo
  echo "== summary"
  printf '%s\n' "${ROWS[@]}"
  echo "== $([ $failed = 0 ] && echo PASSED || echo FAILED)"
  exit $failed
} 2>&1 | tee "$LOG"
exit "${PIPESTATUS[0]}"
