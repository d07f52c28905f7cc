#!/usr/bin/env bash
# Builds what the GPU machine runs for issue 6 (here, where spillwayc and nvcc
# are; that machine has no MLIR and no network) into build/device/, which
# the device tool carries:
#   bash scripts/device/prepare-cuda.sh [--bench]
#   device tool: command "bash scripts/device/cuda-check.sh"  carry ["build/device"]
# Contents:
#   spillway-cuda-check              every kernel against the CPU backend
#   spillway-cuda-bench              GEMMs against cuBLAS's best, attention TFLOP/s
#   gpt-fp32, gpt-bf16, gpt-foam,    a 2-block GPT (0.5M parameters, S = 128)
#   gpt-mixed (--precision bf16-mixed),
#   gpt-mixed-offload (bf16-mixed with params on host, a GPU optimizer),
#   gpt-mixed-state16 (bf16-mixed with bf16 optimizer state)
#                                    compiled with --target cuda, its
#                                    weights, tokens and targets: 50 training
#                                    steps on the GPU against --device cpu
#   bench-350M, bench-1.3B (--bench) the benchmark GPTs of bench/device/
#   bench-*-mixed (bf16-mixed)
#                                    cuda-vs-torch.sh, executables only: their
#                                    weights are regenerated there with the
#                                    same seed (bench/make_gpt_onnx.py)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$ROOT/build/bin
OUTDIR=$ROOT/build/device
BENCH=0
[ "${1:-}" = "--bench" ] && BENCH=1
for t in spillwayc spillway-cuda-check spillway-cuda-bench; do
  [ -x "$BIN/$t" ] || { echo "prepare-cuda: $BIN/$t missing: run scripts/build.sh where nvcc is" >&2; exit 1; }
done
rm -rf "$OUTDIR" && mkdir -p "$OUTDIR"
cp "$BIN/spillway-cuda-check" "$BIN/spillway-cuda-bench" "$OUTDIR/"
WORK=$ROOT/build/bench/device-models
mkdir -p "$WORK"
echo "== small GPT for the training check"
python3 "$ROOT/bench/make_gpt_onnx.py" --out "$WORK/small" --layers 2 --d-model 128 --heads 2 \
  --vocab 512 --seq 128 --batch 4 --seed 1 > /dev/null
"$BIN/spillwayc" "$WORK/small/gpt.onnx" --target cuda --precision fp32 -o "$OUTDIR/gpt-fp32"
"$BIN/spillwayc" "$WORK/small/gpt.onnx" --target cuda --precision bf16 -o "$OUTDIR/gpt-bf16"
"$BIN/spillwayc" "$WORK/small/gpt.onnx" --target cuda --precision fp32 --optimizer foam -o "$OUTDIR/gpt-foam"
"$BIN/spillwayc" "$WORK/small/gpt.onnx" --target cuda --precision bf16-mixed -o "$OUTDIR/gpt-mixed"
# bf16-mixed with an offload plan: bf16 params blocks on host, the f32
# masters and the state on the GPU (a GPU optimizer).
"$BIN/spillwayc" "$WORK/small/gpt.onnx" --target cuda --precision bf16-mixed \
  --place params=host,optimizer=gpu,gradients=host -o "$OUTDIR/gpt-mixed-offload"
# bf16-mixed with its optimizer state stored as bf16 (the AdamW kernel's
# bf16 moments), resident.
"$BIN/spillwayc" "$WORK/small/gpt.onnx" --target cuda --precision bf16-mixed \
  --optimizer-state-dtype bf16 -o "$OUTDIR/gpt-mixed-state16"
rm -f "$OUTDIR/gpt-bf16.weights" "$OUTDIR/gpt-foam.weights" "$OUTDIR/gpt-mixed.weights" \
  "$OUTDIR/gpt-mixed-offload.weights" "$OUTDIR/gpt-mixed-state16.weights" # the same as gpt-fp32's
cp "$WORK/small/tokens.npy" "$WORK/small/targets.npy" "$OUTDIR/"
if [ "$BENCH" = 1 ]; then
  # The shapes of ../shared/hardware/probe/gpt_torch.py's 350M and 1.3B runs:
  # V = 50304, S = 1024, B = 8, 24 blocks of 16 heads.
  for spec in "350M 1024" "1.3B 2048"; do
    set -- $spec
    echo "== bench GPT $1 (D = $2): generating and compiling (the weights stay here)"
    d=$WORK/bench-$1
    [ -f "$d/gpt.onnx" ] || python3 "$ROOT/bench/make_gpt_onnx.py" --out "$d" --layers 24 \
      --d-model "$2" --heads 16 --vocab 50304 --seq 1024 --batch 8 --seed 0 > /dev/null
    "$BIN/spillwayc" "$d/gpt.onnx" --target cuda -o "$d/exe"
    cp "$d/exe" "$OUTDIR/bench-$1"
    "$BIN/spillwayc" "$d/gpt.onnx" --target cuda --precision bf16-mixed -o "$d/exe-mixed"
    cp "$d/exe-mixed" "$OUTDIR/bench-$1-mixed"
    rm -f "$d/exe.weights" "$d/exe-mixed.weights" # regenerated there
  done
fi
strip "$OUTDIR"/gpt-fp32 "$OUTDIR"/gpt-bf16 "$OUTDIR"/gpt-foam "$OUTDIR"/gpt-mixed \
  "$OUTDIR"/gpt-mixed-offload "$OUTDIR"/gpt-mixed-state16 "$OUTDIR"/bench-* 2>/dev/null || true
# What the GPU machine's scripts print first: which code they run.
{
  echo "commit $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "uncommitted files: $(git -C "$ROOT" status --porcelain 2>/dev/null | wc -l)"
  echo "prepared $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} > "$OUTDIR/BUILD_INFO"
du -sh "$OUTDIR"
ls -la "$OUTDIR"
