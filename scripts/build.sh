#!/usr/bin/env bash
# Configures (once) and builds Spillway into build/ with Ninja and ccache.
set -euo pipefail
cd "$(dirname "$0")/.."
# Paths under the checkout are hashed relative to it, so every clone (CI's
# included) shares one compiler cache.
export CCACHE_BASEDIR="$PWD"
if [ ! -f build/build.ninja ]; then
  cmake -G Ninja -S . -B build -DCMAKE_BUILD_TYPE=Release \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
    -DPython3_EXECUTABLE="$(command -v python3)"
fi
mkdir -p build/demo
ninja -C build
