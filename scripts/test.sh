#!/usr/bin/env bash
# Builds Spillway and runs every test: the runtime's GoogleTests and the lit
# suite (dialect, passes, ONNX import, lowering, end-to-end training against
# the NumPy reference, finite-difference gradient checks), all under CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j2
# The ONNX importer under libFuzzer (ASan + UBSan) for a bounded time
# (FUZZ_SECONDS, default 120; 0 skips it).
if [ "${FUZZ_SECONDS:-120}" != 0 ]; then
  bash test/fuzz/run-fuzzer.sh
fi
