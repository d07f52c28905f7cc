#!/usr/bin/env bash
# One command on a fresh Debian 12 machine: install dependencies, build
# Spillway, train the bundled MLP on the CPU (a smoke test), then the demo
# (scripts/demo.sh): a small GPT-2 trained on Genesis with an SSD offload
# plan, and text sampled from it.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
bash scripts/build.sh

echo "== Compiling examples/mlp/mlp.onnx (MLP classifier + softmax cross-entropy loss)"
build/bin/spillwayc examples/mlp/mlp.onnx -o build/demo/mlp
echo "== Training it for 300 steps with AdamW on the CPU"
build/demo/mlp --input x=examples/mlp/x.npy --input y=examples/mlp/y.npy \
  --steps 300 --lr 1e-2 --print-every 100 --save build/demo/mlp.safetensors

bash scripts/demo.sh
