#!/usr/bin/env bash
# The demo (the end of scripts/setup.sh; test/e2e/demo.test runs it with
# fewer steps): a GPT-2 of 1.23M parameters, exported by torch.onnx.export at
# its defaults (examples/gpt/demo_train.onnx), trained on the bytes of Genesis
# with an SSD offload plan, then sampled. About a minute on 2 cores.
#
# Environment: STEPS (default 300), OUT (build/demo/gpt), SPILLWAYC
# (build/bin/spillwayc), PYTHON (python3), SAMPLE_BYTES (300).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
STEPS="${STEPS:-300}"
OUT="${OUT:-$ROOT/build/demo/gpt}"
SPILLWAYC="${SPILLWAYC:-$ROOT/build/bin/spillwayc}"
PYTHON="${PYTHON:-python3}"
SAMPLE_BYTES="${SAMPLE_BYTES:-300}"
EVAL_EVERY=$(( STEPS / 4 > 0 ? STEPS / 4 : 1 ))
WARMUP=$(( STEPS / 10 ))
# Two micro-batches of 4 rows: the snake order reuses each layer's loaded
# parameters across them.
MICROBATCHES=2
GPT="$ROOT/examples/gpt"
mkdir -p "$OUT/ssd"

echo "== Tokenizing examples/gpt/genesis.txt (Genesis, KJV, public domain) as bytes: the last 10% for validation"
"$PYTHON" "$ROOT/scripts/prepare-text.py" "$GPT/genesis.txt" -o "$OUT/genesis.bin"

echo "== Measuring this machine for the cost model (CPU kernels, memcpy, the SSD directory $OUT/ssd)"
"$SPILLWAYC" --probe-hw "$OUT/hw.json" --ssd "$OUT/ssd" --probe-seconds 0.2 \
  --probe-ssd-size 64M | tail -n 1

echo "== Compiling examples/gpt/demo_train.onnx (GPT-2, 6 layers x 128 wide, 1.23M parameters, Hugging Face's"
echo "   loss; torch.onnx.export defaults) with an SSD offload plan: parameters and AdamW state on SSD, gradients"
echo "   in host memory, 2 micro-batches in the snake order, half of each layer's update overlapped with its"
echo "   next forward; the report's SSD wear for a drive rated for 600 TB written"
"$SPILLWAYC" "$GPT/demo_train.onnx" -o "$OUT/gpt" --lr 5e-3 \
  --place params=ssd,optimizer=ssd,gradients=host --microbatches "$MICROBATCHES" --schedule snake \
  --overlap-optimizer 0.5 --ssd "$OUT/ssd" --hw "$OUT/hw.json" --report --ssd-tbw 600

echo "== Training it for $STEPS steps on the CPU (cosine schedule, validation every $EVAL_EVERY steps),"
echo "   streaming the weights and optimizer state through $OUT/ssd"
"$OUT/gpt" --data "$OUT/genesis.bin" --val-data "$OUT/genesis_val.bin" --eval-every "$EVAL_EVERY" \
  --eval-batches 8 --steps "$STEPS" --lr-schedule cosine --warmup "$WARMUP" --seed 1 \
  --save "$OUT/gpt.safetensors"

echo "== Sampling $SAMPLE_BYTES bytes from the trained model (examples/gpt/sample.py: onnxruntime runs"
echo "   examples/gpt/demo_forward.onnx with the saved weights)"
"$PYTHON" "$GPT/sample.py" "$OUT/gpt.safetensors" --prompt "And God said" --bytes "$SAMPLE_BYTES"
