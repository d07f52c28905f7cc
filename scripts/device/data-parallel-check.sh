#!/usr/bin/env bash
# Data parallel on a multi-GPU machine (issue 21): N ranks of `mpirun -np N`,
# one GPU each, against one process on one GPU training the same rows per
# step (batch N x b in N micro-batches): the final weights compared, tokens
# per second of each, and the ranks' measured all-reduce share; the ranks
# twice, their gradients averaged by NCCL (--collectives nccl; libnccl.so.2
# found by cuda-env.sh) and through host memory over MPI (--collectives
# mpi), then with the AdamW state sharded (--zero 1), its shards exchanged
# by NCCL on the GPUs and through host memory over MPI, and last an
# offload plan compiled for the ranks with its optimizer blocks sharded
# (spillwayc --place params=ssd,optimizer=host,gradients=host --zero 1
# --ranks N: the CPU optimizer on each rank's shard) against one process
# of the same plan, each rank's bytes per link checked against its plan,
# a bf16-mixed one with the GPU optimizer (its masters sharded, the
# bf16 working copies all-gathered by NCCL), and one cut for ZeRO stage 2
# (--zero 2, the GPU optimizer, the gradients on SSD sharded too: each
# layer's gradients reduce-scattered by NCCL on the GPU before the shard
# moves off it), and that plan through host memory (--collectives mpi)
# with its reduce-scatters on the exchange thread during the next layer's
# backward (--overlap-exchanges on) against inline (off): where a GPU
# rank's cores are free, the overlap's first measurement.
# Then the ranks launched the way torchrun launches them (launch_ranks.py:
# RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; NCCL bootstrapped over Gloo,
# which needs libgloo0 there), --collectives nccl with and without --zero 1:
# the NCCL-over-Gloo path, which the CPU tests cannot run.
#
#   here (spillwayc, nvcc):  bash scripts/device/data-parallel-check.sh --prepare N
#                            builds build/device-dp/ for N GPUs (the GPT of
#                            scripts/device/prepare-cuda.sh, batch b = 4 per
#                            rank, fp32 so both runs round alike)
#   there:                   bash scripts/device/data-parallel-check.sh [--steps K] [--dry-run]
#                            device tool: carry ["build/device-dp"]
# There needs N GPUs, and Open MPI's mpirun for all but the torchrun-style
# runs (the H200 test machine has neither MPI nor a second GPU: this script
# is for a machine with N GPUs; it says what is missing, and stops without
# the GPUs, or runs the torchrun-style runs alone without mpirun). Weights: bit-identical expected for N = 2 (the
# average of two gradients is the micro-batch mean's sum); otherwise within
# 1e-4 (MPI groups the sum otherwise). Rows go to $OUT/data-parallel.txt as
# they come; the table prints last.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DIR=${DP_DIR:-$ROOT/build/device-dp}
PREPARE="" STEPS=20 DRY=0
while [ $# -gt 0 ]; do
  case $1 in
    --prepare) [ $# -ge 2 ] || { echo "data-parallel-check: --prepare needs the GPU count N" >&2; exit 2; }
               PREPARE=$2; shift ;;
    --steps) [ $# -ge 2 ] || { echo "data-parallel-check: --steps needs a count" >&2; exit 2; }
             STEPS=$2; shift ;;
    --dry-run) DRY=1 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; exit 0 ;;
    *) echo "data-parallel-check: unknown option '$1' (--prepare N, --steps K, --dry-run)" >&2; exit 2 ;;
  esac
  shift
done
[[ $STEPS =~ ^[1-9][0-9]*$ ]] && [ "$STEPS" -ge 3 ] || { echo "data-parallel-check: --steps must be an integer >= 3" >&2; exit 2; }

if [ -n "$PREPARE" ]; then
  [[ $PREPARE =~ ^[0-9]+$ ]] && [ "$PREPARE" -ge 2 ] || { echo "data-parallel-check: --prepare N needs N >= 2 GPUs" >&2; exit 2; }
  BIN=${BIN:-$ROOT/build/bin}
  [ -x "$BIN/spillwayc" ] || { echo "data-parallel-check: $BIN/spillwayc missing: run scripts/build.sh where nvcc is" >&2; exit 1; }
  rm -rf "$DIR" && mkdir -p "$DIR"
  W=${DP_WORK:-$ROOT/build/bench/device-dp-models}
  rm -rf "$W" && mkdir -p "$W"
  GPT=(--layers 2 --d-model 128 --heads 2 --vocab 512 --seq 128 --seed 1)
  python3 "$ROOT/bench/make_gpt_onnx.py" --out "$W/rank" "${GPT[@]}" --batch 4 > /dev/null
  python3 "$ROOT/bench/make_gpt_onnx.py" --out "$W/whole" "${GPT[@]}" --batch $((4 * PREPARE)) > /dev/null
  "$BIN/spillwayc" "$W/whole/gpt.onnx" --target cuda --precision fp32 --microbatches "$PREPARE" -o "$DIR/one"
  "$BIN/spillwayc" "$W/rank/gpt.onnx" --target cuda --precision fp32 -o "$DIR/dp"
  PLACE=(--place params=ssd,optimizer=host,gradients=host)
  "$BIN/spillwayc" "$W/whole/gpt.onnx" --target cuda --precision fp32 --microbatches "$PREPARE" \
    "${PLACE[@]}" -o "$DIR/one-offload"
  "$BIN/spillwayc" "$W/rank/gpt.onnx" --target cuda --precision fp32 "${PLACE[@]}" \
    --zero 1 --ranks "$PREPARE" -o "$DIR/dp-offload"
  # bf16-mixed with the GPU optimizer: the masters sharded too, the bf16
  # working copies all-gathered by NCCL (ncclBfloat16 broadcasts).
  MIXED=(--precision bf16-mixed --place params=ssd,optimizer=gpu,gradients=gpu,master=gpu)
  "$BIN/spillwayc" "$W/whole/gpt.onnx" --target cuda --microbatches "$PREPARE" \
    "${MIXED[@]}" -o "$DIR/one-mixed"
  "$BIN/spillwayc" "$W/rank/gpt.onnx" --target cuda "${MIXED[@]}" \
    --zero 1 --ranks "$PREPARE" -o "$DIR/dp-mixed"
  # ZeRO stage 2 with the GPU optimizer: the gradient blocks (on SSD) cut
  # for the ranks, reduce-scattered by NCCL on the GPU as each layer's
  # backward completes.
  GRAD=(--place params=ssd,optimizer=gpu,gradients=ssd)
  "$BIN/spillwayc" "$W/whole/gpt.onnx" --target cuda --precision fp32 --microbatches "$PREPARE" \
    "${GRAD[@]}" -o "$DIR/one-grad"
  "$BIN/spillwayc" "$W/rank/gpt.onnx" --target cuda --precision fp32 "${GRAD[@]}" \
    --zero 2 --ranks "$PREPARE" -o "$DIR/dp-grad"
  rm -f "$DIR/dp.weights" "$DIR/one-offload.weights" "$DIR/dp-offload.weights" \
    "$DIR/one-mixed.weights" "$DIR/dp-mixed.weights" \
    "$DIR/one-grad.weights" "$DIR/dp-grad.weights" # one.weights: the same parameters
  cp "$W/whole/tokens.npy" "$W/whole/targets.npy" "$DIR/"
  cp "$ROOT/test/e2e/compare_weights.py" "$ROOT/test/e2e/check_offload_stats.py" \
     "$ROOT/test/e2e/launch_ranks.py" "$DIR/"
  echo "$PREPARE" > "$DIR/ranks"
  strip "$DIR/one" "$DIR/dp" "$DIR/one-offload" "$DIR/dp-offload" "$DIR/one-mixed" \
    "$DIR/dp-mixed" "$DIR/one-grad" "$DIR/dp-grad" 2>/dev/null || true
  echo "data-parallel-check: built $DIR for $PREPARE GPUs ($(du -sm "$DIR" | cut -f1) MiB)"
  exit 0
fi

[ -f "$DIR/ranks" ] || { echo "data-parallel-check: $DIR missing: run --prepare N here first and carry build/device-dp" >&2; exit 1; }
N=$(cat "$DIR/ranks")
OUT=${OUT:-$DIR/out}
mkdir -p "$OUT"
ROWS=$OUT/data-parallel.txt
IN=(--weights "$DIR/one.weights" --input "tokens=$DIR/tokens.npy" --input "targets=$DIR/targets.npy"
    --steps "$STEPS" --device cuda)
ONE=("$DIR/one" "${IN[@]}" --log-json "$OUT/one.jsonl" --save "$OUT/one.safetensors")
ONE_OFFLOAD=("$DIR/one-offload" "${IN[@]}" --ssd "$OUT/ssd-one" --save "$OUT/one-offload.safetensors")
ONE_MIXED=("$DIR/one-mixed" "${IN[@]}" --ssd "$OUT/ssd-one" --save "$OUT/one-mixed.safetensors")
ONE_GRAD=("$DIR/one-grad" "${IN[@]}" --ssd "$OUT/ssd-one" --save "$OUT/one-grad.safetensors")
MPIRUN=(mpirun -np "$N")
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
LAUNCH=(python3 "$DIR/launch_ranks.py" -n "$N" --)
dp() { # NAME EXE FLAGS...: the N ranks (a name gloo-*: torchrun-style)
  local name=$1 exe=$2; shift 2
  local launcher="${MPIRUN[*]}"
  [[ $name == gloo-* ]] && launcher="${LAUNCH[*]}"
  echo "$launcher $DIR/$exe ${IN[*]} --log-json $OUT/$name.jsonl --save $OUT/$name.safetensors $*"
}
# name, executable, the one-process run whose weights it must end with, flags
VARIANTS=("dp-nccl dp one --collectives nccl" "dp-mpi dp one --collectives mpi"
          "dp-zero dp one --zero 1 --collectives nccl"
          "dp-zero-mpi dp one --zero 1 --collectives mpi"
          "dp-zero-offload dp-offload one-offload --ssd $OUT/ssd-ranks --stats-json $OUT/dp-zero-offload.json"
          "dp-zero-mixed dp-mixed one-mixed --ssd $OUT/ssd-ranks --collectives nccl --stats-json $OUT/dp-zero-mixed.json"
          "dp-zero2 dp-grad one-grad --ssd $OUT/ssd-ranks --collectives nccl --stats-json $OUT/dp-zero2.json"
          "dp-zero2-thread dp-grad one-grad --ssd $OUT/ssd-ranks --collectives mpi --overlap-exchanges on --stats-json $OUT/dp-zero2-thread.json"
          "dp-zero2-inline dp-grad one-grad --ssd $OUT/ssd-ranks --collectives mpi --overlap-exchanges off --stats-json $OUT/dp-zero2-inline.json"
          "gloo-nccl dp one --collectives nccl"
          "gloo-zero dp one --zero 1 --collectives nccl")
run_of() { local v=($1); echo "${v[0]} ${v[1]} ${v[*]:3}"; }
if [ "$DRY" = 1 ]; then
  echo "data-parallel-check --dry-run: $N GPUs, $STEPS steps"
  echo "[one GPU] ${ONE[*]}"
  echo "[one GPU] ${ONE_OFFLOAD[*]}"
  echo "[one GPU] ${ONE_MIXED[*]}"
  echo "[one GPU] ${ONE_GRAD[*]}"
  for v in "${VARIANTS[@]}"; do echo "[$N GPUs] $(dp $(run_of "$v"))"; done
  exit 0
fi
. "$ROOT/scripts/device/cuda-env.sh"
HAVE_MPI=yes
command -v mpirun > /dev/null || { HAVE_MPI=no; echo "data-parallel-check: no mpirun on this machine (Open MPI, Debian: openmpi-bin): the mpirun runs are skipped, the torchrun-style ones run" | tee -a "$ROWS" >&2; }
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "$GPUS" -ge "$N" ] || { echo "data-parallel-check: built for $N GPUs, this machine has $GPUS: run --prepare $GPUS where spillwayc is" | tee -a "$ROWS" >&2; exit 1; }
mkdir -p "$OUT/ssd-one" "$OUT/ssd-ranks"
echo "one GPU: ${ONE[*]}" | tee -a "$ROWS"
"${ONE[@]}" > "$OUT/one.out"
echo "one GPU: ${ONE_OFFLOAD[*]}" | tee -a "$ROWS"
"${ONE_OFFLOAD[@]}" > "$OUT/one-offload.out"
echo "one GPU: ${ONE_MIXED[*]}" | tee -a "$ROWS"
"${ONE_MIXED[@]}" > "$OUT/one-mixed.out"
echo "one GPU: ${ONE_GRAD[*]}" | tee -a "$ROWS"
"${ONE_GRAD[@]}" > "$OUT/one-grad.out"
if [ "$N" = 2 ]; then CMP=--exact; else CMP="--atol 1e-4"; fi
ok=yes
for v in "${VARIANTS[@]}"; do
  fields=($v)
  name=${fields[0]} ref=${fields[2]}
  if [[ $name != gloo-* && $HAVE_MPI = no ]]; then
    echo "$name: skipped (no mpirun)" | tee -a "$ROWS"; continue
  fi
  cmd=$(dp $(run_of "$v"))
  echo "$N GPUs: $cmd" | tee -a "$ROWS"
  if ! $cmd > "$OUT/$name.out" 2>&1; then
    echo "$name: FAILED: $(tail -3 "$OUT/$name.out")" | tee -a "$ROWS"; ok=NO; continue
  fi
  grep -E "collectives:|zero:|^offload:" "$OUT/$name.out" | tee -a "$ROWS" || true
  SAME=$(python3 "$DIR/compare_weights.py" "$OUT/$name.safetensors" "$OUT/$ref.safetensors" $CMP 2>&1) && same=yes || { same=NO; ok=NO; }
  echo "$name weights against $ref ($CMP): $same: $SAME" | tee -a "$ROWS"
  if [ -f "$OUT/$name.json" ]; then # each rank's bytes per link: its plan's
    for r in $(seq 0 $((N - 1))); do
      f=$OUT/$name.json; [ "$r" = 0 ] || f=$f.rank-$r
      python3 "$DIR/check_offload_stats.py" "$f" --steps "$STEPS" --expect ssd 2>&1 | tee -a "$ROWS" || ok=NO
    done
  fi
done
python3 - "$OUT" "$N" <<'PY' | tee -a "$ROWS"
import json, os, statistics, sys
out, n = sys.argv[1], int(sys.argv[2])
def steady(name):
    rows = [json.loads(l) for l in open(f"{out}/{name}.jsonl")]
    t = [r["elapsed_s"] for r in rows]
    s = statistics.median(t[i] - t[i - 1] for i in range(1, len(t)))
    return s, rows[0]["tokens"] / s
s1, t1 = steady("one")
print(f"{'run':22} {'s/step':>9} {'tok/s':>10}")
print(f"{'1 GPU':22} {s1:9.5f} {t1:10.0f}")
for name in ("dp-nccl", "dp-mpi", "dp-zero", "dp-zero-mpi", "dp-zero-offload",
             "dp-zero-mixed", "dp-zero2", "dp-zero2-thread", "dp-zero2-inline",
             "gloo-nccl", "gloo-zero"):
    label = str(n) + " GPUs " + (name[3:] if name.startswith("dp-") else name)
    if not os.path.exists(f"{out}/{name}.jsonl"):
        print(f"{label:22} failed or skipped")
        continue
    sn, tn = steady(name)
    line = [l for l in open(f"{out}/{name}.out") if l.startswith("data parallel:")]
    print(f"{label:22} {sn:9.5f} {tn:10.0f}  ({tn / t1:.2f}x)  "
          + (line[0].strip() if line else "no data-parallel line"))
PY
[ "$ok" = yes ]
