#!/usr/bin/env bash
# Configures (once) and builds Spillway into build/ with Ninja and ccache.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/build.ninja ]; then
  cmake -G Ninja -S . -B build -DCMAKE_BUILD_TYPE=Release \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit
fi
mkdir -p build/demo
ninja -C build
