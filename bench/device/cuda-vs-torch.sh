#!/usr/bin/env bash
# Issue 6's benchmark, on the lent H200 (prepared here, run there): a GPT
# compiled by Spillway (--target cuda, bf16 products) trained in GPU memory
# against PyTorch eager on the same model, batch and sequence length
# (bench/torch_gpt_baseline.py: bf16 autocast, fused AdamW, SDPA), at 350M
# and 1.3B parameters (the shapes of ../shared/hardware/probe/gpt_torch.py:
# V 50304, S 1024, B 8, 24 blocks); then the kernel benchmarks
# (spillway-cuda-bench: GEMMs against cuBLAS's best, attention TFLOP/s) and
# PyTorch SDPA on the same attention shapes.
#   here:        scripts/build.sh && bash scripts/device/prepare-cuda.sh --bench
#   device tool: command "bash bench/device/cuda-vs-torch.sh --sizes 350M"  carry ["build/device"]
#                then "bash bench/device/cuda-vs-torch.sh --sizes 1.3B --no-kernels" if time is left
# (one command may run 600 s: each stage has a timeout and the script skips
# a stage whose timeout would end after --budget seconds, 540 by default;
# Spillway's run comes before PyTorch's, the point of the run; the log and
# the JSON rows are written to $OUT as they come: three files in all,
# cuda-vs-torch.log, cuda-vs-torch-rows.jsonl and the result JSON, within
# the device tool's 8).
# The executables come from here; their weights are regenerated there by
# bench/make_gpt_onnx.py with the seed they were compiled from and passed as
# .safetensors (bench/onnx_to_safetensors.py). Options: --sizes 350M,1.3B
# --steps N (timed steps after 2 warm-up steps; default 8) --no-kernels
# --budget SECONDS --precision bf16|bf16-mixed (default bf16: the products
# only; bf16-mixed runs bench-SIZE-mixed, bf16 activations and working
# weights, against the same PyTorch autocast run: issue 20's comparison).
# Output: a table last; JSON to $OUT/cuda-vs-torch.json and bench/results/.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEV=${DEV:-$ROOT/build/device}
OUTDIR=${OUT:-$ROOT/bench/results}
WORK=${WORK:-/tmp/spillway-bench}
SIZES=350M,1.3B
STEPS=8
KERNELS=1
BUDGET=540
PRECISION=bf16
while [ $# -gt 0 ]; do
  case $1 in
    --sizes) SIZES=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --no-kernels) KERNELS=0; shift ;;
    --budget) BUDGET=$2; shift 2 ;;
    --precision)
      case ${2:-} in bf16|bf16-mixed) PRECISION=$2 ;; *) echo "cuda-vs-torch: --precision is bf16 or bf16-mixed" >&2; exit 2 ;; esac
      shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; exit 0 ;;
    *) echo "cuda-vs-torch: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUTDIR" "$WORK"
. "$ROOT/scripts/device/cuda-env.sh"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
JSON=$OUTDIR/cuda-vs-torch-rows.jsonl
: > "$JSON"
# Every output goes to one log in $OUT (the device tool returns 8 files).
exec > >(tee "$OUTDIR/cuda-vs-torch.log") 2>&1
# Whether a stage whose timeouts add up to $1 seconds ends within the budget.
fits() {
  if [ $((SECONDS + $1)) -gt "$BUDGET" ]; then
    echo "cuda-vs-torch: skipping $2 (would end after the ${BUDGET} s budget; ${SECONDS} s used)"
    return 1
  fi
}
cat "$DEV/BUILD_INFO" 2>/dev/null || echo "no BUILD_INFO: build/device predates it"
echo "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
python3 -c 'import torch; print("torch", torch.__version__)' 2>&1

dmodel() { case $1 in 350M) echo 1024 ;; 1.3B) echo 2048 ;; *) echo "" ;; esac; }
IFS=, read -ra SIZE_LIST <<< "$SIZES"
for size in "${SIZE_LIST[@]}"; do
  D=$(dmodel "$size")
  EXE=$DEV/bench-$size
  [ "$PRECISION" = bf16 ] || EXE=$DEV/bench-$size-mixed
  [ -n "$D" ] && [ -x "$EXE" ] || { echo "cuda-vs-torch: no $EXE (run scripts/device/prepare-cuda.sh --bench here and carry build/device)" >&2; continue; }
  m=$WORK/$size
  echo "== $size: weights (bench/make_gpt_onnx.py, seed 0)"
  if [ ! -f "$m/weights.safetensors" ]; then
    fits 480 "$size" || continue
    if ! timeout 240 python3 "$ROOT/bench/make_gpt_onnx.py" --out "$m" --layers 24 --d-model "$D" \
         --heads 16 --vocab 50304 --seq 1024 --batch 8 --seed 0 > /dev/null ||
       ! timeout 240 python3 "$ROOT/bench/onnx_to_safetensors.py" "$m/gpt.onnx" "$m/weights.safetensors"; then
      echo "cuda-vs-torch: could not make the $size weights; skipping it" >&2
      echo "{\"size\": \"$size\", \"spillway_error\": \"weights not made\"}" >> "$JSON"
      continue
    fi
    rm -f "$m/gpt.onnx.data"
  fi
  N=$(python3 -c "import json; print(json.load(open('$m/config.json'))['params'])")
  log=$WORK/cuda-vs-torch-$size
  rm -f "$log-spillway.log" "$log-torch.json"
  if fits 200 "Spillway $size"; then
    echo "== $size: Spillway (--target cuda, --precision $PRECISION)"
    timeout 200 "$EXE" --input tokens="$m/tokens.npy" --input targets="$m/targets.npy" \
      --weights "$m/weights.safetensors" --steps $((STEPS + 2)) --print-every 1 > "$log-spillway.log" 2>&1
    tail -6 "$log-spillway.log"
  fi
  if fits 150 "PyTorch $size"; then
    echo "== $size: PyTorch eager"
    timeout 150 python3 "$ROOT/bench/torch_gpt_baseline.py" --d-model "$D" --layers 24 --heads 16 \
      --vocab 50304 --seq 1024 --batch 8 --steps "$STEPS" --name "gpt-$size" > "$log-torch.json"
    cat "$log-torch.json"
  fi
  python3 - "$size" "$N" "$log-spillway.log" "$log-torch.json" "$PRECISION" >> "$JSON" <<'PY'
import json, re, sys
size, n, log, tj, precision = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
try:
    text = open(log).read()
except OSError:
    text = "not run (time budget)"
m = re.search(r"steady state: ([0-9.]+) s/step", text)
row = {"size": size, "params": n, "tokens_per_step": 8 * 1024, "spillway_precision": precision}
if m:
    s = float(m.group(1))
    row.update(spillway_s_per_step=s, spillway_tokens_per_s=8192 / s,
               spillway_model_tflops=6 * n * 8192 / s / 1e12)
else:
    row["spillway_error"] = (text.strip().splitlines() or ["no output"])[-1]
try:
    t = json.load(open(tj))
    row.update(torch_s_per_step=t["s_per_step"], torch_tokens_per_s=t["tokens_per_s"],
               torch_model_tflops=6 * n * t["tokens_per_s"] / 1e12, torch=t["framework"])
except Exception as e:
    row["torch_error"] = str(e)
if "spillway_tokens_per_s" in row and "torch_tokens_per_s" in row:
    row["spillway_over_torch"] = row["spillway_tokens_per_s"] / row["torch_tokens_per_s"]
print(json.dumps(row))
PY
done

if [ "$KERNELS" = 1 ] && [ -x "$DEV/spillway-cuda-bench" ] && fits 180 "the kernel benchmarks"; then
  echo "== kernels: spillway-cuda-bench (GEMMs vs cuBLAS's best, attention)"
  timeout 120 "$DEV/spillway-cuda-bench" --d-model 1024 > "$WORK/cuda-bench.log" 2>&1
  grep -v '^json: ' "$WORK/cuda-bench.log"
  grep '^json: ' "$WORK/cuda-bench.log" | sed 's/^json: //' >> "$JSON"
  echo "== kernels: PyTorch SDPA on the same attention shapes (bf16)"
  timeout 60 python3 - >> "$JSON" <<'PY'
import json, torch, torch.nn.functional as F
for hd in (64, 128):
    B, H, S = 8, 1024 // hd, 1024
    q, k, v = (torch.randn(B, H, S, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    def run():
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y.backward(torch.ones_like(y))
    def timed(f, n=10):
        for _ in range(3): f()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(n): f()
        b.record(); torch.cuda.synchronize()
        return a.elapsed_time(b) / n
    fwd = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    both = timed(run)
    flops = 2.0 * B * H * S * S * hd
    print(json.dumps({"kind": "attention_torch_sdpa", "shape": f"[{B},{H},{S},{hd}]", "precision": "bf16",
                      "fwd_ms": fwd, "bwd_ms": both - fwd, "fwd_tflops": flops / fwd / 1e9,
                      "bwd_tflops": 2.5 * flops / (both - fwd) / 1e9}))
PY
fi

python3 - "$JSON" "$OUTDIR/cuda-vs-torch-h200-$STAMP.json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
out = {"command": "bash bench/device/cuda-vs-torch.sh", "rows": rows}
json.dump(out, open(sys.argv[2], "w"), indent=1)
print("\n== GPT training in GPU memory: Spillway vs PyTorch eager (tokens/s, model TFLOP/s = 6 N tokens/s)")
print(f"{'size':6} {'params':>8} {'spillway tok/s':>15} {'TF':>6} {'torch tok/s':>12} {'TF':>6} {'ratio':>6}")
for r in rows:
    if "size" not in r:
        continue
    sp = r.get("spillway_tokens_per_s"); tp = r.get("torch_tokens_per_s")
    f = lambda x, fmt: (fmt % x) if x is not None else "-"
    print(f"{r['size']:6} {r['params']/1e9:7.2f}B {f(sp, '%15.0f')} {f(r.get('spillway_model_tflops'), '%6.0f')} "
          f"{f(tp, '%12.0f')} {f(r.get('torch_model_tflops'), '%6.0f')} {f(r.get('spillway_over_torch'), '%6.3f')}"
          + ("  " + r.get("spillway_error", "") if "spillway_error" in r else ""))
att = [r for r in rows if r.get("kind", "").startswith("attention")]
if att:
    print("\n== attention fwd+bwd (causal), TFLOP/s")
    for r in att:
        print(f"{r['kind']:22} {r['shape']:16} {r['precision']:5} fwd {r['fwd_tflops']:6.1f}  bwd {r['bwd_tflops']:6.1f}")
g = [r for r in rows if r.get("kind") == "gemm"]
if g:
    worst = min(g, key=lambda r: r["best_over_ours"])
    print(f"\nGEMMs: {len(g)} shapes, worst best/ours {worst['best_over_ours']:.3f} ({worst['what']}, {worst['precision']})")
print(f"\nwrote {sys.argv[2]}")
PY
