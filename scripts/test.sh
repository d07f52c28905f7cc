#!/usr/bin/env bash
# Builds Spillway and runs every test: the runtime's GoogleTests and the lit
# suite (dialect, passes, ONNX import, lowering, end-to-end training against
# the NumPy reference, finite-difference gradient checks), all under CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j2
