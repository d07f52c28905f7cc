#!/usr/bin/env bash
# Peak memory and time of spillwayc and of the executable on a GPT whose
# weights are ONNX external data (issue 22): plain compile, --report alone,
# compile with an all-SSD offload plan, and that executable's start
# (--steps 0: load the weights, scatter them to their tiers, exit). Each is
# timed by GNU time (wall, user + sys CPU, peak RSS); the executable's swap
# files go to --ssd DIR.
#
# usage: bench/bounded-memory.sh --model DIR [--ssd DIR] [--label NAME]
#                                [--microbatches M] [--gpu-mem SIZE] [--host-mem SIZE]
#                                [--compile-only] [--keep] [-o OUT.json]
#   --model DIR   a bench/make_gpt_onnx.py output (gpt.onnx, its data, tokens.npy, targets.npy)
#   --ssd DIR     the executable's swap directory (default: DIR/ssd); needs the
#                 plan's SSD bytes free (params + AdamW m, v + gradients: 16 B per parameter)
#   --label NAME  goes into the file name: bench/results/bounded-memory-NAME-<UTC date>.json
#                 (default: the git commit)
#   defaults: --microbatches 8 --gpu-mem 2304MiB --host-mem 3584MiB, snake, F = 0:
#   the plan of the 1.42B GPT (24 layers, D 2048, V 50304, S 1024, B 8) needs
#   1.93 GiB of GPU and 3.09 GiB of host memory by the cost model.
#   --compile-only: the three spillwayc runs, not the executable's start (for a
#   spillwayc whose executables need a newer runtime than the one at hand).
#   --keep: leave the executables and swap files (default: removed at the end:
#   each executable's .weights is the model's size, the swap 16 B per parameter).
# env: SPILLWAYC (default build/bin/spillwayc of this checkout).
# Progress to stderr, the table last to stdout, every number and command to the JSON.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ARGV="$*"
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit "${1:-2}"; }
MODEL="" SSD="" LABEL="" MB=8 GPU=2304MiB HOST=3584MiB KEEP=0 OUTJSON="" COMPILE_ONLY=0
while [ $# -gt 0 ]; do
  case $1 in
    --model|--ssd|--label|--microbatches|--gpu-mem|--host-mem|-o)
      [ $# -ge 2 ] || { echo "bounded-memory.sh: $1 needs a value" >&2; usage; } ;;
  esac
  case $1 in
    --model) MODEL=$2; shift ;; --ssd) SSD=$2; shift ;; --label) LABEL=$2; shift ;;
    --microbatches) MB=$2; shift ;; --gpu-mem) GPU=$2; shift ;; --host-mem) HOST=$2; shift ;;
    --keep) KEEP=1 ;; --compile-only) COMPILE_ONLY=1 ;; -o) OUTJSON=$2; shift ;;
    -h|--help) usage 0 ;;
    *) echo "bounded-memory.sh: unknown argument '$1'" >&2; usage ;;
  esac
  shift
done
[ -n "$MODEL" ] || { echo "bounded-memory.sh: --model DIR is required" >&2; usage; }
[ -f "$MODEL/gpt.onnx" ] || { echo "bounded-memory.sh: no gpt.onnx in '$MODEL' (bench/make_gpt_onnx.py --out '$MODEL' ...)" >&2; exit 1; }
MODEL=$(cd "$MODEL" && pwd)
SPILLWAYC=${SPILLWAYC:-$ROOT/build/bin/spillwayc}
[ -x "$SPILLWAYC" ] || { echo "bounded-memory.sh: no spillwayc at $SPILLWAYC (scripts/build.sh)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "bounded-memory.sh: needs /usr/bin/time (GNU time)" >&2; exit 1; }
[ -n "$SSD" ] || SSD=$MODEL/ssd
mkdir -p "$SSD"
[ -n "$LABEL" ] || LABEL=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -n "$OUTJSON" ] || OUTJSON=$ROOT/bench/results/bounded-memory-$LABEL-$(date -u +%Y%m%d).json
WORK=$(mktemp -d "$MODEL/bounded-memory.XXXXXX")
cleanup() { [ "$KEEP" = 1 ] || rm -rf "$WORK" "$SSD"/spillway-* 2>/dev/null; true; }
trap cleanup EXIT
PLAN=(--microbatches "$MB" --schedule snake --overlap-optimizer 0
      --place params=ssd,optimizer=ssd,gradients=ssd --gpu-mem "$GPU" --host-mem "$HOST")

# run NAME CMD...: GNU time's wall, user, sys, peak RSS (KiB) into WORK/NAME.time.
run() {
  local name=$1; shift
  echo "bounded-memory.sh: $name: $*" >&2
  printf '%s\n' "$*" > "$WORK/$name.cmd"
  if ! /usr/bin/time -f "%e %U %S %M" -o "$WORK/$name.time" "$@" > "$WORK/$name.log" 2>&1; then
    echo "bounded-memory.sh: $name failed:" >&2; tail -5 "$WORK/$name.log" >&2; exit 1
  fi
  tail -1 "$WORK/$name.time" >&2
}
run compile "$SPILLWAYC" "$MODEL/gpt.onnx" -o "$WORK/plain"
ls -l "$WORK"/plain* > "$WORK/compile.files"
rm -f "$WORK/plain" "$WORK/plain.weights"
run report "$SPILLWAYC" "$MODEL/gpt.onnx" --hw "$ROOT/profiles/cpu-ci.json" --report "${PLAN[@]}"
run compile_offload "$SPILLWAYC" "$MODEL/gpt.onnx" -o "$WORK/ssd" --hw "$ROOT/profiles/cpu-ci.json" "${PLAN[@]}"
ls -l "$WORK"/ssd* > "$WORK/compile_offload.files"
[ "$COMPILE_ONLY" = 1 ] || run start_steps0 "$WORK/ssd" --input "tokens=$MODEL/tokens.npy" --input "targets=$MODEL/targets.npy" \
  --steps 0 --ssd "$SSD"

COMMIT=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
python3 - "$WORK" "$OUTJSON" "$ARGV" "$MODEL" "$SPILLWAYC" "$COMMIT" <<'PY'
import datetime, json, os, platform, sys
work, out, argv, model, spillwayc, commit = sys.argv[1:]
cfg = json.load(open(os.path.join(model, "config.json")))
def files(name):
    p = os.path.join(work, name + ".files")
    return [dict(zip(("bytes", "path"), (int(l.split()[4]), l.split()[-1]))) for l in open(p)] if os.path.exists(p) else None
rows = {}
for name in ("compile", "report", "compile_offload", "start_steps0"):
    if not os.path.exists(os.path.join(work, name + ".time")):
        continue  # --compile-only
    wall, user, sys_, rss = open(os.path.join(work, name + ".time")).read().split()[-4:]
    log = open(os.path.join(work, name + ".log")).read()
    rows[name] = {"command": open(os.path.join(work, name + ".cmd")).read().strip(),
                  "wall_s": float(wall), "cpu_s": round(float(user) + float(sys_), 2),
                  "peak_rss_bytes": int(rss) * 1024, "peak_rss_gb": round(int(rss) * 1024 / 1e9, 3),
                  "log_tail": log.strip().splitlines()[-6:]}
    if files(name):
        rows[name]["outputs"] = files(name)
summary = {"schema": "spillway-bounded-memory-1", "command": "bench/bounded-memory.sh " + argv,
           "when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "machine": {"host": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count(),
                       "load_average_at_end": os.getloadavg()},
           "spillwayc": spillwayc, "commit": commit, "model": {"dir": model, **cfg,
           "onnx_data_bytes": os.path.getsize(os.path.join(model, "gpt.onnx.data")) if os.path.exists(os.path.join(model, "gpt.onnx.data")) else None},
           "runs": rows}
with open(out, "w") as f:
    json.dump(summary, f, indent=1)
    f.write("\n")
print(f"{'run':16} {'wall s':>8} {'cpu s':>8} {'peak RSS GB':>12}")
for name, r in rows.items():
    print(f"{name:16} {r['wall_s']:8.1f} {r['cpu_s']:8.1f} {r['peak_rss_gb']:12.3f}")
print(f"summary: {out}")
PY
