#!/usr/bin/env bash
# Installs everything Spillway needs to build and test on Debian 12, idempotently.
# Safe to run again: apt-get and pip skip what is already there.
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: run as root (no sudo on this machine)" >&2; exit 1; }
  SUDO="sudo"
fi

PKGS=(
  build-essential cmake ninja-build ccache git python3 python3-pip
  llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools
  liburing-dev libonnx-dev libprotobuf-dev protobuf-compiler libonnx-testdata
  libgtest-dev zlib1g-dev libzstd-dev libxxhash-dev libopenblas-dev
  clang-22 libclang-rt-22-dev
  fio
  openmpi-bin libopenmpi-dev
  libgloo-dev
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all Debian packages present"
fi

# Python side: lit (test driver), numpy (reference implementation), onnx (fixture tooling),
# onnxruntime (forward reference). Installed for the python3 on PATH.
PY=${PYTHON:-python3}
need_py=()
for m in lit numpy onnx onnxruntime; do
  "$PY" -c "import $m" 2>/dev/null || need_py+=("$m")
done
if [ "${#need_py[@]}" -gt 0 ]; then
  echo "install-deps: pip installing ${need_py[*]}"
  "$PY" -m pip install -q "${need_py[@]}" 2>/dev/null || "$PY" -m pip install -q --break-system-packages "${need_py[@]}"
else
  echo "install-deps: python modules present"
fi
