#!/usr/bin/env bash
# Placement by layer against whole classes: the host budget swept from what
# the smallest plan needs to more than everything, on a GPT whose state does
# not fit, under a GPU budget that holds no class. At each budget spillwayc
# plans twice (--split-placement on and off; the plans' exact arenas and
# bytes, test/e2e/placement_sweep.py); the predicted SSD bytes per iteration
# and the predicted iteration time against --host-mem are drawn as an SVG,
# and at a few budgets both plans' executables train on the CPU device:
# measured seconds per iteration next to the prediction, measured SSD bytes
# next to the plan's.
#
# usage: bench/placement-sweep.sh [--layers L] [--d-model D] [--vocab V]
#            [--gpu-mem BYTES] [--from MiB] [--to MiB] [--step MiB]
#            [--measure MiB,MiB,...] [--steps N] [--hw PROFILE.json] [-o OUT]
#   defaults: L=8 D=128 V=2048 (2.1M parameters, 34 MB of parameters, AdamW
#   state and gradients), --gpu-mem 7340032, 5..42 MiB in steps of 1,
#   --measure 10,20,30, N=6, --hw profiles/cpu-ci.json,
#   OUT = bench/results/placement-sweep-<host>-<UTC time> (.json, .svg).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
log() { echo "placement-sweep.sh: $*" >&2; }
die() { echo "placement-sweep.sh: error: $*" >&2; exit 1; }

LAYERS=8 DMODEL=128 VOCAB=2048 GPUMEM=7340032 FROM=5 TO=42 STEP=1
MEASURE=10,20,30 STEPS=6 HW=$ROOT/profiles/cpu-ci.json OUT=
while [ $# -gt 0 ]; do
  case $1 in
    --layers|--d-model|--vocab|--gpu-mem|--from|--to|--step|--measure|--steps|--hw|-o)
      [ $# -ge 2 ] || die "$1 needs a value" ;;
  esac
  case $1 in
    --layers) LAYERS=$2; shift ;; --d-model) DMODEL=$2; shift ;;
    --vocab) VOCAB=$2; shift ;; --gpu-mem) GPUMEM=$2; shift ;;
    --from) FROM=$2; shift ;; --to) TO=$2; shift ;; --step) STEP=$2; shift ;;
    --measure) MEASURE=$2; shift ;; --steps) STEPS=$2; shift ;;
    --hw) HW=$2; shift ;; -o) OUT=$2; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (--help lists them)" ;;
  esac
  shift
done
SPILLWAYC=${SPILLWAYC:-$ROOT/build/bin/spillwayc}
[ -x "$SPILLWAYC" ] || die "spillwayc not found at $SPILLWAYC: build it first (scripts/build.sh), or set SPILLWAYC"
[ -f "$HW" ] || die "hardware profile $HW not found"
python3 -c "import onnx, numpy" 2>/dev/null || die "python3 with the onnx and numpy packages is needed (scripts/install-deps.sh)"
BENCH_DIR=${BENCH_DIR:-$ROOT/build/bench}
NAME=gpt-L$LAYERS-D$DMODEL-H4-V$VOCAB-S32-B4
MDIR=$BENCH_DIR/$NAME
if [ -f "$MDIR/gpt.onnx.data" ] && [ -f "$MDIR/tokens.npy" ]; then
  log "reusing $MDIR"
else
  log "generating $NAME into $MDIR"
  python3 "$ROOT/bench/make_gpt_onnx.py" --out "$MDIR" --layers "$LAYERS" --d-model "$DMODEL" \
    --heads 4 --vocab "$VOCAB" --seq 32 --batch 4 >&2 || die "model generation failed"
fi
WORK=$BENCH_DIR/placement-sweep-$NAME
mkdir -p "$WORK/ssd"
[ -n "$OUT" ] || OUT=$ROOT/bench/results/placement-sweep-$(hostname -s)-$(date -u +%Y%m%dT%H%M%SZ)
log "planning --host-mem $FROM..$TO MiB (step $STEP), --gpu-mem $GPUMEM, $(basename "$HW")"
python3 "$ROOT/test/e2e/placement_sweep.py" --spillwayc "$SPILLWAYC" --model "$MDIR/gpt.onnx" \
  --hw "$HW" --gpu-mem "$GPUMEM" --host-from "$FROM" --host-to "$TO" --host-step "$STEP" \
  --out "$WORK/plans" --json "$WORK/rows.json" --no-check
log "training both plans at $MEASURE MiB ($STEPS steps each, CPU device)"
python3 "$ROOT/bench/placement_sweep.py" "$WORK/rows.json" --out "$OUT" \
  --title "$NAME: placement by layer vs whole classes ($(basename "$HW"), --gpu-mem $GPUMEM)" \
  --measure "$MEASURE" --spillwayc "$SPILLWAYC" --model "$MDIR/gpt.onnx" --hw "$HW" \
  --gpu-mem "$GPUMEM" --steps "$STEPS" --ssd "$WORK/ssd" --work "$WORK"
