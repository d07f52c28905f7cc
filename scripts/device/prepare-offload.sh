#!/usr/bin/env bash
# Builds what scripts/device/offload-check.sh runs on the H200 (issue 17),
# here, where spillwayc is (that machine has no MLIR): build/device-offload/
#   matrix/   the offload matrix subset (offload_check.py's MATRIX): the
#             examples' one-block GPT, --target cuda --precision fp32, snake
#             F=0.5, M=1 and 4, parameters/optimizer/gradients on SSD, and
#             everything with the activations on host (tiny weights beside)
#   bench/    the benchmark GPT (default 2.7B: L=32 D=2560 H=32 V=50304
#             S=1024 B=8, M=4) compiled seven ways, executables only:
#               bench-snake       snake, optimizer overlap F=1, state on SSD
#               bench-horizontal  horizontal F=0 (ZeRO-Infinity's order)
#               bench-resident    the same schedule, no offload plan
#               bench-whole       snake F=1, the planner's placement (no
#                                 class pinned) in whole classes
#               bench-split       the same split by layer (issue 23)
#               bench-whole-f0    bench-whole at F=0
#               bench-split-f0    bench-split at F=0, where the planner may
#                                 also cut a block between host and SSD
#             (every executable packed into executables.tar.xz: 3 MiB, not 33)
#             the offload plans under --gpu-mem 16GiB --host-mem 24GiB with
#             params, optimizer state and gradients pinned to SSD (the
#             planner places the activations), cost model profiles/h200.json;
#             plan-*.json (the cost model's reports), tokens.npy,
#             targets.npy, config.json (the model's make_gpt_onnx.py
#             arguments: its weights are made there, bench/device/
#             gpt_weights.py) and bench.json (what offload_check.py needs)
# and, unless --no-cuda-check, build/device/ by scripts/device/prepare-cuda.sh
# (cuda-check.sh's executables).
# The 2.7B step is compiled without its 11 GB of weights: a twin of width
# 3 H (same layers, heads, vocabulary, sequence, batch) is imported and its
# forward graph widened (bench/device/widen_gpt_step.py).
#
# usage: scripts/device/prepare-offload.sh [--tiny] [--no-cuda-check]
#          [--target cuda|cpu|auto] [--layers L] [--d-model D] [--heads H]
#          [--vocab V] [--seq S] [--batch B] [--microbatches M]
#          [--gpu-mem SIZE] [--host-mem SIZE] [--precision bf16|bf16-mixed]
#   --precision: the benchmark's executables (the matrix stays fp32):
#           bf16 (the default for cuda: bf16 products) or bf16-mixed (bf16
#           activations and working weights: issue 20's 2.7B offload run);
#           the CPU target computes in fp32 and takes only bf16-mixed.
#   --tiny: L=2 D=64 H=4 V=512 S=40 B=8 M=4, budgets 64M/256M, no
#           build/device: for checking the plumbing here (offload-check.sh
#           --local); --target cpu (or auto) where spillwayc has no CUDA.
# Then on the device machine: see offload-check.sh (carry build/device and
# build/device-offload).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${BIN:-$ROOT/build/bin}
OUTDIR=${OFFLOAD_DIR:-$ROOT/build/device-offload}
WORK=${PREP_WORK:-$ROOT/build/bench/device-offload}
LAYERS=32 DMODEL=2560 HEADS=32 VOCAB=50304 SEQ=1024 BATCH=8 M=4
GPUMEM=16GiB HOSTMEM=24GiB TARGET=cuda CUDACHECK=1 TINY=0 BENCH_PRECISION=
die() { echo "prepare-offload: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case $1 in
    --layers|--d-model|--heads|--vocab|--seq|--batch|--microbatches|--gpu-mem|--host-mem|--target|--precision)
      [ $# -ge 2 ] || die "$1 needs a value" ;;
  esac
  case $1 in
    --tiny) TINY=1 LAYERS=2 DMODEL=64 HEADS=4 VOCAB=512 SEQ=40 BATCH=8 M=4 GPUMEM=64M HOSTMEM=256M CUDACHECK=0 ;;
    --no-cuda-check) CUDACHECK=0 ;;
    --target) TARGET=$2; shift ;;
    --precision) BENCH_PRECISION=$2; shift ;;
    --layers) LAYERS=$2; shift ;; --d-model) DMODEL=$2; shift ;; --heads) HEADS=$2; shift ;;
    --vocab) VOCAB=$2; shift ;; --seq) SEQ=$2; shift ;; --batch) BATCH=$2; shift ;;
    --microbatches) M=$2; shift ;; --gpu-mem) GPUMEM=$2; shift ;; --host-mem) HOSTMEM=$2; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
  shift
done
[ -x "$BIN/spillwayc" ] || die "$BIN/spillwayc missing: run scripts/build.sh"
# auto: cuda where the CUDA backend was built (nvcc found), else cpu.
[ "$TARGET" = auto ] && { [ -x "$BIN/spillway-cuda-check" ] && TARGET=cuda || TARGET=cpu; }
case $TARGET in cuda|cpu) ;; *) die "--target must be cuda, cpu or auto" ;; esac
PRECISION=()
[ "$TARGET" = cuda ] && PRECISION=(--precision bf16)
case $BENCH_PRECISION in
  "") ;;
  bf16-mixed) PRECISION=(--precision bf16-mixed) ;;
  bf16) [ "$TARGET" = cuda ] || die "--precision bf16 needs --target cuda (the CPU computes in fp32)" ;;
  *) die "--precision must be bf16 or bf16-mixed" ;;
esac
if [ "$CUDACHECK" = 1 ]; then
  bash "$ROOT/scripts/device/prepare-cuda.sh"
fi
rm -rf "$OUTDIR" "$WORK"
mkdir -p "$OUTDIR/matrix" "$OUTDIR/bench" "$WORK"
HW=$ROOT/profiles/h200.json
SPWC=("$BIN/spillwayc" --target "$TARGET")

echo "== matrix subset: examples/gpt/gpt_block.onnx, fp32"
python3 - "$ROOT" <<'PY' > "$WORK/matrix.tsv"
import sys
sys.path.insert(0, sys.argv[1] + "/scripts/device")
import offload_check
for tag, place, _, m in offload_check.matrix_configs():
    print(f"{tag}\t{place}\t{m}")
PY
while IFS=$'\t' read -r tag place m; do
  "${SPWC[@]}" "$ROOT/examples/gpt/gpt_block.onnx" --precision fp32 --microbatches "$m" \
    --schedule snake --overlap-optimizer 0.5 --place "$place" --hw "$HW" -o "$OUTDIR/matrix/$tag"
done < "$WORK/matrix.tsv"

echo "== bench GPT L=$LAYERS D=$DMODEL H=$HEADS V=$VOCAB S=$SEQ B=$BATCH, M=$M"
TWIN=$((3 * HEADS))
GEN=(python3 "$ROOT/bench/make_gpt_onnx.py" --layers "$LAYERS" --heads "$HEADS" --vocab "$VOCAB"
     --seq "$SEQ" --batch "$BATCH" --seed 0)
# The full model's graph only (a sparse weights file: its config, tokens and
# targets), then the twin, whose forward graph is widened to it.
"${GEN[@]}" --d-model "$DMODEL" --out "$WORK/full" --graph-only > /dev/null
rm -f "$WORK/full/gpt.onnx.data" "$WORK/full/gpt.onnx"
"${GEN[@]}" --d-model "$TWIN" --out "$WORK/twin" > /dev/null
"${SPWC[@]}" "$WORK/twin/gpt.onnx" --forward --emit=mlir -o "$WORK/twin.mlir"
printf '\002\000\000\000\000\000\000\000{}' > "$WORK/none.safetensors" # an empty .safetensors
python3 "$ROOT/bench/device/widen_gpt_step.py" "$WORK/twin.mlir" --twin-d "$TWIN" --d-model "$DMODEL" \
  --heads "$HEADS" --weights none.safetensors -o "$WORK/gpt.mlir"
PLACE=params=ssd,optimizer=ssd,gradients=ssd
B=$OUTDIR/bench
declare -A CMD
CMD[snake]="${SPWC[*]} ${PRECISION[*]} $WORK/gpt.mlir --hw $HW --microbatches $M --schedule snake --overlap-optimizer 1 --place $PLACE --gpu-mem $GPUMEM --host-mem $HOSTMEM --report-json $B/plan-snake.json -o $B/bench-snake"
CMD[horizontal]="${SPWC[*]} ${PRECISION[*]} $WORK/gpt.mlir --hw $HW --microbatches $M --schedule horizontal --overlap-optimizer 0 --place $PLACE --gpu-mem $GPUMEM --host-mem $HOSTMEM --report-json $B/plan-horizontal.json -o $B/bench-horizontal"
CMD[resident]="${SPWC[*]} ${PRECISION[*]} $WORK/gpt.mlir --microbatches $M --schedule snake -o $B/bench-resident"
# Issue 23: the planner's placement under the same budgets (no class
# pinned), whole classes against split by layer, at F=1 and at F=0 (an
# overlap deferring all of every layer leaves the planner no block it may
# cut between host and SSD).
NAMES=(snake horizontal resident whole split whole-f0 split-f0)
for c in whole split whole-f0 split-f0; do
  flag=off; [ "${c%-f0}" = split ] && flag=on
  f=1; [ "${c%-f0}" = "$c" ] || f=0
  CMD[$c]="${SPWC[*]} ${PRECISION[*]} $WORK/gpt.mlir --hw $HW --microbatches $M --schedule snake --overlap-optimizer $f --split-placement $flag --gpu-mem $GPUMEM --host-mem $HOSTMEM --report-json $B/plan-$c.json -o $B/bench-$c"
done
for c in "${NAMES[@]}"; do
  echo "-- $c: ${CMD[$c]}"
  # shellcheck disable=SC2086
  ${CMD[$c]}
  rm -f "$B/bench-$c.weights" # the empty file: the weights are made there
done
# The resident executable's cost-model prediction: the same schedule with
# every class on the GPU (planning only).
"${SPWC[@]}" ${PRECISION[@]+"${PRECISION[@]}"} "$WORK/gpt.mlir" --hw "$HW" --microbatches "$M" --schedule snake \
  --overlap-optimizer 0 --place params=gpu,optimizer=gpu,gradients=gpu,activations=gpu \
  --report-json "$B/plan-resident.json" > /dev/null
cp "$WORK/full/config.json" "$WORK/full/tokens.npy" "$WORK/full/targets.npy" "$B/"
INFO="commit $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown), $(git -C "$ROOT" status --porcelain 2>/dev/null | wc -l) uncommitted files, prepared $(date -u +%Y-%m-%dT%H:%M:%SZ)"
CMDS=()
for c in "${NAMES[@]}"; do CMDS+=("${CMD[$c]}"); done
python3 - "$ROOT" "$B" "$LAYERS-$DMODEL-$HEADS-$VOCAB-$SEQ-$BATCH" "$GPUMEM" "$HOSTMEM" "$M" "$PLACE" "$INFO" \
  "${NAMES[*]}" "${CMDS[@]}" <<'PY'
import json, sys
root, b, name, gpu, host, m, place, info, names, *cmds = sys.argv[1:]
sys.path.insert(0, root + "/scripts/device")
from offload_check import plan_of
names = names.split()
cfg = json.load(open(f"{b}/config.json"))
json.dump({"name": name, "model": cfg, "budgets": {"gpu_mem": gpu, "host_mem": host},
           "microbatches": int(m), "placement": place, "hw_profile": "profiles/h200.json",
           "build_info": info,
           "compile_commands": dict(zip(names, cmds))},
          open(f"{b}/bench.json", "w"), indent=1)
for c in names:
    rep = json.load(open(f"{b}/plan-{c}.json"))
    ch = plan_of(rep)  # the plan the executable runs
    # The exact arenas of an offload plan; the model's peaks of the
    # resident one (planning only).
    ar = rep.get("arenas")
    mem = (f"arenas gpu {ar['gpu'] / 2**30:.1f} GiB (+ step {(ar['step'] or 0) / 2**30:.1f} GiB), "
           f"host {ar['host'] / 2**30:.1f} GiB, ssd {ar['ssd'] / 2**30:.1f} GiB" if ar else
           f"model peaks gpu {ch['peak_bytes']['gpu'] / 2**30:.1f} GiB, ssd {ch['peak_bytes']['ssd'] / 2**30:.1f} GiB")
    print(f"{c:10}: cost model {ch['predicted_iteration_s']:.2f} s/iter ({ch['bound']}-bound), "
          f"{mem}, {cfg['params'] / 1e9:.2f}B parameters")
PY
echo "$INFO" > "$OUTDIR/BUILD_INFO"
for f in "$OUTDIR"/matrix/* "$B"/bench-*; do
  case $f in *.weights) ;; *) strip "$f" ;; esac
done
# The 13 executables (6 of the matrix, 7 of the bench) share their runtime: xz with a 64 MiB dictionary packs
# them into a few MiB (offload-check.sh unpacks them where they run).
echo "== packing the executables into $OUTDIR/executables.tar.xz"
(cd "$OUTDIR" && python3 - matrix/* bench/bench-* <<'PY'
import lzma, os, sys, tarfile
# A dictionary larger than an executable, so each one after the first is
# mostly matches into the ones before (the default's 8 MiB is smaller).
filters = [{"id": lzma.FILTER_LZMA2, "preset": 3, "dict_size": 64 << 20}]
with lzma.open("executables.tar.xz", "wb", format=lzma.FORMAT_XZ, filters=filters) as z, \
        tarfile.open(fileobj=z, mode="w") as t:
    for f in sys.argv[1:]:
        t.add(f)
for f in sys.argv[1:]:
    os.remove(f)
PY
)
# The device tool carries at most 64 MiB, the working tree included.
TREE=$(cd "$ROOT" && { git ls-files -z | xargs -0 du -cb 2>/dev/null || true; } | tail -1 | cut -f1)
TREE=${TREE:-0}
DIRS=("$OUTDIR")
[ -d "$ROOT/build/device" ] && [ "$TINY" = 0 ] && DIRS+=("$ROOT/build/device")
CARRY=$(du -scb "${DIRS[@]}" | tail -1 | cut -f1)
echo "carried: $((CARRY >> 20)) MiB + working tree $((TREE >> 20)) MiB (the device tool's limit: 64 MiB)"
[ $((CARRY + TREE)) -lt $((62 << 20)) ] || die "too much to carry: $(((CARRY + TREE) >> 20)) MiB"
