#!/usr/bin/env bash
# The CUDA kernels against the CPU backend, on the lent GPU machine (issue 6's
# device test script; prepared here, run there). The machine runs in a copy
# of this repository without network: build spillway-cuda-check here (it is
# linked with the static CUDA runtime; `scripts/build.sh` builds it wherever
# nvcc is) and carry it, e.g. with the device tool:
#   command: bash scripts/device/cuda-check.sh   carry: ["build/bin/spillway-cuda-check"]
# It prints the GPU, runs every check (each kernel on fresh random inputs,
# T steps, bit for bit against the CPU runtime, guards around every tensor)
# and ends with a short table. Exit status: the check's (0 all passed, 1 a
# mismatch, 2 no GPU or a CUDA error). The output also goes to $OUT when the
# device tool sets it.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# build/ first (what scripts/build.sh makes), then any other build*/.
CHECK=${CHECK:-$(ls -1 "$ROOT"/build/bin/spillway-cuda-check "$ROOT"/build*/bin/spillway-cuda-check 2>/dev/null | head -1)}
if [ -z "$CHECK" ] || [ ! -x "$CHECK" ]; then
  echo "cuda-check: no build*/bin/spillway-cuda-check in this copy: build it where nvcc is (scripts/build.sh) and carry it" >&2
  exit 2
fi
LOG=${OUT:-/tmp}/cuda-check.log
{
  echo "== machine"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || echo "nvidia-smi: not found"
  echo "== spillway-cuda-check ($CHECK)"
  timeout 300 "$CHECK"
  rc=$?
  echo "== exit status $rc"
  exit $rc
} 2>&1 | tee "$LOG"
exit "${PIPESTATUS[0]}"
