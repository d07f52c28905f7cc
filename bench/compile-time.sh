#!/usr/bin/env bash
# Compile-time benchmark: how spillwayc's wall time and peak
# memory grow with the model's layers L and the micro-batches M. For each
# L x M of the grid it compiles a GPT (bench/make_gpt_onnx.py) to an
# executable with the offload plan of bench/offload.sh (parameters, AdamW
# state and gradients on SSD), the snake order and the whole optimizer
# update overlapped:
#   spillwayc gpt.onnx -o exe --microbatches M --schedule snake \
#     --overlap-optimizer 1 --place params=ssd,optimizer=ssd,gradients=ssd
# and prints a table of seconds (wall and CPU) and peak resident memory of
# the whole compile, and the CPU seconds of each phase: the ONNX import, the
# MLIR passes (all of them, and the slowest), the translation to LLVM IR,
# LLVM code generation, the link (spillwayc --pass-timing=FILE, which
# records each pass and phase). CPU seconds are what to compare on a loaded
# machine: wall time there grows with the load.
#
# usage: bench/compile-time.sh [--small] [--layers L[,L...]] [--microbatches M[,M...]]
#                              [--d-model D] [--heads H] [--vocab V] [--seq S]
#                              [--batch B] [--emit exe|obj|llvm] [-o OUT.json]
#   defaults: --layers 8,20,40,80 --microbatches 4,16,64, D=256 H=4 V=4096
#   S=32 B=64 (80 layers: 65M parameters), --emit exe,
#   OUT = bench/results/compile-time-<host>-<UTC time>.json.
#   Each M must divide B.
#   --small: --layers 2,4 --microbatches 2,4, B=4: a smoke run of seconds.
# env: SPILLWAYC=path/to/spillwayc (default: build/bin/spillwayc of this repo;
#        one without --pass-timing, an older build, gives totals only)
#      BENCH_DIR=dir for the generated models and executables (default:
#        build/bench, git-ignored); a model of the same size is reused.
# Progress goes to stderr; the table to stdout; every number and the exact
# commands to OUT.json.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ARGV="$*"
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit "${1:-2}"; }

LAYERS=8,20,40,80 MBS=4,16,64 DMODEL=256 HEADS=4 VOCAB=4096 SEQ=32 BATCH=64
EMIT=exe OUTJSON=""
while [ $# -gt 0 ]; do
  case $1 in
    --layers|--microbatches|--d-model|--heads|--vocab|--seq|--batch|--emit|-o|--out)
      [ $# -ge 2 ] || { echo "compile-time.sh: $1 needs a value" >&2; usage; } ;;
  esac
  case $1 in
    --small) LAYERS=2,4 MBS=2,4 BATCH=4 ;;
    --layers) LAYERS=$2; shift ;; --microbatches) MBS=$2; shift ;;
    --d-model) DMODEL=$2; shift ;; --heads) HEADS=$2; shift ;;
    --vocab) VOCAB=$2; shift ;; --seq) SEQ=$2; shift ;; --batch) BATCH=$2; shift ;;
    --emit) EMIT=$2; shift ;;
    -o|--out) OUTJSON=$2; shift ;;
    -h|--help) usage 0 ;;
    *) echo "compile-time.sh: unknown argument '$1'" >&2; usage ;;
  esac
  shift
done
case $EMIT in exe|obj|llvm) ;; *) echo "compile-time.sh: --emit exe, obj or llvm, not '$EMIT'" >&2; exit 2 ;; esac
for m in ${MBS//,/ }; do
  [ $((BATCH % m)) -eq 0 ] || { echo "compile-time.sh: M=$m does not divide the batch $BATCH" >&2; exit 2; }
done

SPILLWAYC=${SPILLWAYC:-$ROOT/build/bin/spillwayc}
BENCH_DIR=${BENCH_DIR:-$ROOT/build/bench}
[ -x "$SPILLWAYC" ] || { echo "compile-time.sh: no spillwayc at $SPILLWAYC (scripts/build.sh)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "compile-time.sh: needs /usr/bin/time (GNU time) for the peak memory" >&2; exit 1; }
TIMING=1
case $("$SPILLWAYC" --help 2>&1) in *--pass-timing*) ;; *) TIMING=0 ;; esac
[ -n "$OUTJSON" ] || OUTJSON=$ROOT/bench/results/compile-time-$(hostname -s)-$(date -u +%Y%m%dT%H%M%SZ).json
mkdir -p "$BENCH_DIR" "$(dirname "$OUTJSON")"
RUNS=$(mktemp -d "$BENCH_DIR/compile-time.XXXXXX")
trap 'rm -rf "$RUNS"' EXIT

for l in ${LAYERS//,/ }; do
  model=$BENCH_DIR/gpt-L$l-D$DMODEL-H$HEADS-V$VOCAB-S$SEQ-B$BATCH
  if [ ! -f "$model/gpt.onnx" ]; then
    echo "compile-time.sh: writing the $l-layer model to $model" >&2
    python3 "$ROOT/bench/make_gpt_onnx.py" --out "$model" --layers "$l" --d-model "$DMODEL" \
      --heads "$HEADS" --vocab "$VOCAB" --seq "$SEQ" --batch "$BATCH" >&2
  fi
  for m in ${MBS//,/ }; do
    run=$RUNS/L$l-M$m; mkdir -p "$run"
    cmd=("$SPILLWAYC" "$model/gpt.onnx" -o "$run/out" --emit "$EMIT" --microbatches "$m"
         --schedule snake --overlap-optimizer 1 --place params=ssd,optimizer=ssd,gradients=ssd)
    [ $TIMING = 1 ] && cmd+=(--pass-timing "$run/timing.json")
    echo "compile-time.sh: L=$l M=$m: ${cmd[*]}" >&2
    if ! /usr/bin/time -f "%e %U %S %M" -o "$run/time" "${cmd[@]}" > "$run/log" 2>&1; then
      echo "compile-time.sh: the compile failed (L=$l M=$m):" >&2; tail -5 "$run/log" >&2; exit 1
    fi
    echo "$l $m ${cmd[*]}" > "$run/cmd"
    rm -f "$run/out" "$run/out.weights" # up to a few hundred MB each
  done
done

python3 - "$RUNS" "$OUTJSON" "$SPILLWAYC" "$ARGV" "$EMIT" <<'PY'
import json, os, sys, platform, datetime
runs, out, spillwayc, argv, emit = sys.argv[1:]
phases = ["import-onnx", "translate-to-llvm-ir", "llvm-codegen", "link"]
results = []
for name in sorted(os.listdir(runs), key=lambda n: tuple(int(x[1:]) for x in n.split("-"))):
    d = os.path.join(runs, name)
    l, m, cmd = open(os.path.join(d, "cmd")).read().split(" ", 2)
    wall, user, sys_, rss_kb = open(os.path.join(d, "time")).read().split()[-4:]
    r = {"layers": int(l), "microbatches": int(m), "command": cmd.strip(),
         "seconds": float(wall), "cpu_seconds": float(user) + float(sys_),
         "peak_rss_mb": int(rss_kb) / 1024.0}
    t = os.path.join(d, "timing.json")
    if os.path.exists(t):
        records = json.load(open(t))["records"]
        r["records"] = records
        per = {p: {"seconds": 0.0, "cpu_seconds": 0.0, "peak_rss_mb": 0.0}
               for p in phases + ["mlir-passes"]}
        for rec in records:
            p = rec["name"] if rec["name"] in phases else "mlir-passes"
            per[p]["seconds"] += rec["seconds"]
            per[p]["cpu_seconds"] += rec.get("cpu_seconds", 0.0)
            per[p]["peak_rss_mb"] = max(per[p]["peak_rss_mb"], rec["peak_rss_mb"])
        r["phases"] = per
        passes = [x for x in records if x["name"] not in phases]
        if passes:
            slow = max(passes, key=lambda x: x.get("cpu_seconds", 0.0))
            r["slowest_pass"] = {"name": slow["name"], "seconds": slow["seconds"],
                                 "cpu_seconds": slow.get("cpu_seconds", 0.0)}
    results.append(r)

cols = ["L", "M", "wall s", "cpu s", "peak MB", "import", "passes", "slowest pass",
        "to LLVM IR", "codegen", "link"]
rows = []
for r in results:
    p = r.get("phases")
    f = lambda k: "%.2f" % p[k]["cpu_seconds"] if p else "-"
    slow = r.get("slowest_pass")
    rows.append([str(r["layers"]), str(r["microbatches"]), "%.2f" % r["seconds"],
                 "%.2f" % r["cpu_seconds"], "%.0f" % r["peak_rss_mb"],
                 f("import-onnx"), f("mlir-passes"),
                 "%s %.2f" % (slow["name"], slow["cpu_seconds"]) if slow else "-",
                 f("translate-to-llvm-ir"), f("llvm-codegen"),
                 "%.2f" % p["link"]["seconds"] if p else "-"])
w = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
print("per phase: CPU seconds (link: wall seconds, the linker is a child process)")
print("  ".join(c.rjust(w[i]) for i, c in enumerate(cols)))
for row in rows:
    print("  ".join(x.rjust(w[i]) for i, x in enumerate(row)))
json.dump({"benchmark": "compile-time", "host": platform.node(),
           "utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "spillwayc": spillwayc, "arguments": argv, "emit": emit,
           "results": results}, open(out, "w"), indent=1)
print("wrote", out, file=sys.stderr)
PY
