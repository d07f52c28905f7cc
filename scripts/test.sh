#!/usr/bin/env bash
# Builds Spillway and runs every test: the ONNX importer under libFuzzer
# (ASan + UBSan) for a bounded time (FUZZ_SECONDS, default 120; 0 skips all
# fuzzing) and the executable's .npy, safetensors, weights and checkpoint-
# manifest readers (RUNTIME_FUZZ_SECONDS each, default 30; test/fuzz/run-fuzzer.sh),
# then, under CTest, the runtime's GoogleTests, the lit suite (dialect, passes,
# ONNX import, lowering, end-to-end training against the NumPy reference and
# PyTorch, finite-difference gradient checks) and the ONNX conformance run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
if [ "${FUZZ_SECONDS:-120}" != 0 ]; then
  bash test/fuzz/run-fuzzer.sh
fi
ctest --test-dir build --output-on-failure -j2
