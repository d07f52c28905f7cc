#!/usr/bin/env bash
# One command on a fresh Debian 12 machine: install dependencies, build
# Spillway, compile the bundled MLP example and train it on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
bash scripts/build.sh

echo "== Compiling examples/mlp/mlp.onnx (MLP classifier + softmax cross-entropy loss)"
build/bin/spillwayc examples/mlp/mlp.onnx -o build/demo/mlp -v
echo "== Training it for 300 steps with AdamW on the CPU"
build/demo/mlp --input x=examples/mlp/x.npy --input y=examples/mlp/y.npy \
  --steps 300 --lr 1e-2 --print-every 25 --save build/demo/mlp.safetensors
