#!/usr/bin/env bash
# CPU training speed: a Spillway executable (the model resident, AdamW,
# spillwayc's defaults) against PyTorch eager on the CPU (fp32,
# torch.optim.AdamW at its defaults, which are Spillway's), same GPT
# (bench/make_gpt_onnx.py's), batch, sequence, initialization, tokens and
# thread count, in tokens per second (target >= 1.0x at each size). Also, in
# the same run: NumPy's sgemm GFLOP/s on 1024^3 (numpy of the same python,
# the same threads) and each executable's model GFLOP/s (6 * N * tokens/s)
# as a fraction of it; and the executable with --kernels reference at the
# small size for a few steps (the single-threaded reference kernels: the
# "before" number).
#
# usage: bench/cpu-vs-torch.sh [--sizes small,100m] [--steps N] [--warmup W]
#                              [--threads T] [--reference-steps R]
#                              [--precision fp32|bf16-mixed]
#                              [--python PY] [--out DIR] [-h]
#   --sizes LIST   tiny: L=2 D=64 H=2 V=512 S=32 B=2 (a smoke run of seconds);
#                  small: L=6 D=384 H=6 V=8192 S=128 B=8 (17.0M parameters;
#                    13.8M without the untied LM head, the issue's count);
#                  100m:  L=12 D=768 H=12 V=8192 S=128 B=8 (97.7M parameters)
#                  (default small,100m)
#   --steps N      steps each side runs (default 5); the first W are not timed
#   --warmup W     untimed steps (default 1: the executable's first step holds
#                  its start-up); seconds/step = mean of steps W+1..N
#   --threads T    threads of both (default: nproc); an executable without
#                  --threads runs its own way, and the table says so
#   --reference-steps R   the --kernels reference run at the small (and tiny) size:
#                  R steps (default 2; timed: steps 2..R); 0: skip it
#   --precision P  fp32 (default), or bf16-mixed: the executable compiled with
#                  spillwayc --precision bf16-mixed against PyTorch under
#                  torch.autocast("cpu", bfloat16) (Lightning's bf16-mixed), and
#                  the fp32 executable again in the same run (bf16-mixed over
#                  fp32: what the bf16 roundings cost on a CPU computing in fp32)
#   --python PY    the python with torch and numpy (default
#                  /work/big/torchenv/bin/python when it exists, else python3);
#                  without torch the torch rows are skipped and the script says so
#   --out DIR      where the JSON goes (default bench/results)
# env: SPILLWAYC (default build/bin/spillwayc of this repo), BENCH_DIR (models
#      and executables, default build/bench; a model of the same size is reused).
# Executable step times come from the arrival of its "step k/N" lines
# (--print-every 1), torch's from time.perf_counter around each step.
# Progress to stderr; a table last on stdout; every number, command and the
# machine to DIR/cpu-vs-torch-<host>-<UTC time>.json.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ARGV="$*"
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit "${1:-2}"; }
die() { echo "cpu-vs-torch.sh: error: $*" >&2; exit 1; }
log() { echo "cpu-vs-torch.sh: $*" >&2; }
SIZES=small,100m STEPS=5 WARMUP=1 THREADS=$(nproc) REFSTEPS=2 OUTDIR=$ROOT/bench/results PRECISION=fp32
PY=/work/big/torchenv/bin/python
[ -x "$PY" ] || PY=python3
while [ $# -gt 0 ]; do
  case $1 in
    --sizes|--steps|--warmup|--threads|--reference-steps|--python|--out|--precision)
      [ $# -ge 2 ] || { echo "cpu-vs-torch.sh: $1 needs a value" >&2; usage; } ;;
  esac
  case $1 in
    --sizes) SIZES=$2; shift ;; --steps) STEPS=$2; shift ;; --warmup) WARMUP=$2; shift ;;
    --threads) THREADS=$2; shift ;; --reference-steps) REFSTEPS=$2; shift ;;
    --python) PY=$2; shift ;; --out) OUTDIR=$2; shift ;; --precision) PRECISION=$2; shift ;;
    -h|--help) usage 0 ;;
    *) echo "cpu-vs-torch.sh: unknown argument '$1'" >&2; usage ;;
  esac
  shift
done
for v in STEPS THREADS; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "--${v,,} must be a positive integer, not '${!v}'"
done
[[ $WARMUP =~ ^[0-9]+$ ]] && [ "$WARMUP" -lt "$STEPS" ] || die "--warmup must be an integer in [0, --steps), not '$WARMUP'"
[[ $REFSTEPS =~ ^[0-9]+$ ]] || die "--reference-steps must be a non-negative integer, not '$REFSTEPS'"
[ "$REFSTEPS" != 1 ] || die "--reference-steps 1 times nothing (step 1 holds the start-up): 0 or >= 2"
case $PRECISION in fp32|bf16-mixed) ;; *) die "--precision must be fp32 or bf16-mixed, not '$PRECISION'" ;; esac
IFS=, read -r -a SIZE_LIST <<<"$SIZES"
[ ${#SIZE_LIST[@]} -gt 0 ] || die "--sizes is empty (small, 100m)"
for s in "${SIZE_LIST[@]}"; do
  case $s in tiny|small|100m) ;; *) die "unknown size '$s' (tiny, small, 100m)" ;; esac
done
SPILLWAYC=${SPILLWAYC:-$ROOT/build/bin/spillwayc}
[ -x "$SPILLWAYC" ] || die "spillwayc not found at $SPILLWAYC: build it first (scripts/build.sh), or set SPILLWAYC"
python3 -c "import onnx, numpy" 2>/dev/null || die "python3 with the onnx and numpy packages is needed to write the models (scripts/install-deps.sh)"
"$PY" -c "import numpy" 2>/dev/null || die "$PY cannot import numpy (pass --python PY)"
TORCH_OK=1
"$PY" -c "import torch" 2>/dev/null || {
  TORCH_OK=0
  log "torch is not importable by $PY: the PyTorch rows are skipped (pass --python PY, a python with torch)"
}
BENCH_DIR=${BENCH_DIR:-$ROOT/build/bench}
mkdir -p "$BENCH_DIR" "$OUTDIR"
BENCH_DIR=$(cd "$BENCH_DIR" && pwd)
OUTJSON=$OUTDIR/cpu-vs-torch-$(hostname -s 2>/dev/null || echo host)-$(date -u +%Y%m%dT%H%M%SZ).json
WORK=$(mktemp -d "$BENCH_DIR/cpu-vs-torch.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")

dims() {  # size -> L D H V S B
  case $1 in
    tiny) echo "2 64 2 512 32 2" ;;
    small) echo "6 384 6 8192 128 8" ;;
    100m) echo "12 768 12 8192 128 8" ;;
  esac
}

# timed_exe OUT.json CMD...: runs an executable, timestamping its stdout
# lines as they arrive; OUT.json gets the step lines' arrival times, the
# losses, the wall time and the CPU time.
timed_exe() {
  local out=$1; shift
  python3 - "$out" "$@" <<'PY'
import json, os, re, subprocess, sys, time
out, cmd = sys.argv[1], sys.argv[2:]
t0 = time.monotonic()
p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
steps, lines = [], []
for line in p.stdout:
    now = time.monotonic() - t0
    lines.append(line.rstrip("\n"))
    m = re.match(r"step (\d+)/(\d+)\s+loss (\S+)", line)
    if m:
        steps.append({"step": int(m.group(1)), "t": now, "loss": float(m.group(3))})
        print(f"cpu-vs-torch.sh:   step {m.group(1)}/{m.group(2)} loss {m.group(3)} at {now:.2f} s",
              file=sys.stderr, flush=True)
_, status, ru = os.wait4(p.pid, 0)
rc = os.waitstatus_to_exitcode(status)
json.dump({"rc": rc, "wall_s": time.monotonic() - t0, "cpu_s": ru.ru_utime + ru.ru_stime,
           "steps": steps, "output": lines[-40:]}, open(out, "w"))
if rc:
    print("\n".join(lines[-20:]), file=sys.stderr)
    sys.exit(f"cpu-vs-torch.sh: error: the executable failed (exit {rc}): {' '.join(cmd)}")
PY
}

# 1. NumPy's sgemm on 1024^3, the same threads.
SGEMM_CMD=(env OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS" "$PY" -c '
import json, time, numpy as np
n = 1024
rng = np.random.default_rng(0)
a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
for _ in range(3):
    a @ b  # warm-up
s = []
for _ in range(20):
    t0 = time.perf_counter(); a @ b; s.append(time.perf_counter() - t0)
s.sort()
cfg = {}
try:
    cfg = {k: v.get("name") if isinstance(v, dict) else str(v) for k, v in np.show_config(mode="dicts").get("Build Dependencies", {}).items()}
except Exception:
    pass
print(json.dumps({"n": n, "seconds": s, "best_gflops": 2 * n**3 / s[0] / 1e9,
                  "median_gflops": 2 * n**3 / s[len(s) // 2] / 1e9, "numpy": np.__version__, "blas": cfg}))')
log "NumPy sgemm 1024^3 with $PY, $THREADS thread(s)"
"${SGEMM_CMD[@]}" > "$WORK/sgemm.json" || die "the NumPy sgemm run failed"

# 2. Per size: the model, the executable, its run, torch's run.
declare -a SIZE_JSONS=()
for size in "${SIZE_LIST[@]}"; do
  read -r L D H V S B <<<"$(dims "$size")"
  NAME=gpt-L$L-D$D-H$H-V$V-S$S-B$B
  MDIR=$BENCH_DIR/$NAME
  GEN=(python3 "$ROOT/bench/make_gpt_onnx.py" --out "$MDIR" --layers "$L" --d-model "$D" --heads "$H"
       --vocab "$V" --seq "$S" --batch "$B")
  if [ -f "$MDIR/config.json" ] && [ -f "$MDIR/gpt.onnx.data" ] && [ -f "$MDIR/tokens.npy" ]; then
    log "$size: reusing $MDIR"
  else
    log "$size: writing $NAME into $MDIR"
    "${GEN[@]}" >&2 || die "model generation failed"
  fi
  EXE=$BENCH_DIR/cpu-vs-torch-exe-$NAME-$PRECISION
  COMPILE=("$SPILLWAYC" "$MDIR/gpt.onnx" --precision "$PRECISION" -o "$EXE")
  log "$size: compiling: ${COMPILE[*]}"
  t0=$(date +%s%N)
  "${COMPILE[@]}" > "$WORK/compile-$size.log" 2>&1 || { tail -20 "$WORK/compile-$size.log" >&2; die "spillwayc failed for $size"; }
  t1=$(date +%s%N)
  HELP=$("$EXE" --help 2>&1 || true)
  HAS_THREADS=0 HAS_KERNELS=0
  grep -q -- "--threads" <<<"$HELP" && HAS_THREADS=1
  grep -q -- "--kernels" <<<"$HELP" && HAS_KERNELS=1
  TFLAG=()
  [ $HAS_THREADS = 1 ] && TFLAG=(--threads "$THREADS")
  [ $HAS_THREADS = 1 ] || log "$size: the executable has no --threads: it runs its own kernels' threads"
  RUN=("$EXE" --input "tokens=$MDIR/tokens.npy" --input "targets=$MDIR/targets.npy" --steps "$STEPS"
       --print-every 1 "${TFLAG[@]}")
  log "$size: running: ${RUN[*]}"
  timed_exe "$WORK/exe-$size.json" "${RUN[@]}"
  FP32=()
  if [ "$PRECISION" != fp32 ]; then
    FP32EXE=$BENCH_DIR/cpu-vs-torch-exe-$NAME-fp32
    "$SPILLWAYC" "$MDIR/gpt.onnx" -o "$FP32EXE" > "$WORK/compile-fp32-$size.log" 2>&1 || { tail -20 "$WORK/compile-fp32-$size.log" >&2; die "spillwayc failed for $size (fp32)"; }
    FP32=("$FP32EXE" --input "tokens=$MDIR/tokens.npy" --input "targets=$MDIR/targets.npy" --steps "$STEPS"
          --print-every 1 "${TFLAG[@]}")
    log "$size: running the fp32 executable: ${FP32[*]}"
    timed_exe "$WORK/fp32-$size.json" "${FP32[@]}"
  fi
  REF=()
  if [ "$size" != 100m ] && [ "$REFSTEPS" -ge 2 ]; then
    if [ $HAS_KERNELS = 1 ]; then
      REF=("$EXE" --input "tokens=$MDIR/tokens.npy" --input "targets=$MDIR/targets.npy" --steps "$REFSTEPS"
           --print-every 1 --kernels reference "${TFLAG[@]}")
      log "$size: running the reference kernels: ${REF[*]}"
      timed_exe "$WORK/ref-$size.json" "${REF[@]}"
    else
      log "$size: the executable has no --kernels: its kernels are the reference ones (the run above is the before number)"
    fi
  fi
  TORCH=("$PY" "$ROOT/bench/torch_gpt_cpu.py" --layers "$L" --d-model "$D" --heads "$H" --vocab "$V"
         --seq "$S" --batch "$B" --tokens "$MDIR/tokens.npy" --targets "$MDIR/targets.npy"
         --threads "$THREADS" --warmup "$WARMUP" --steps $((STEPS - WARMUP)) --name "$size")
  [ "$PRECISION" = fp32 ] || TORCH+=(--autocast bf16)
  if [ $TORCH_OK = 1 ]; then
    log "$size: running PyTorch: OMP_NUM_THREADS=$THREADS ${TORCH[*]}"
    OMP_NUM_THREADS=$THREADS "${TORCH[@]}" > "$WORK/torch-$size.json" || die "the PyTorch run failed for $size"
  fi
  python3 - "$WORK" "$size" "$MDIR/config.json" "${GEN[*]}" "${COMPILE[*]}" "$(( (t1 - t0) / 1000000 ))" \
    "${RUN[*]}" "${REF[*]+${REF[*]}}" "OMP_NUM_THREADS=$THREADS ${TORCH[*]}" "$TORCH_OK" "$HAS_THREADS" \
    "$HAS_KERNELS" "$WARMUP" "$PRECISION" "${FP32[*]+${FP32[*]}}" > "$WORK/size-$size.json" <<'PY'
import json, os, statistics, sys
(work, size, config, gen, compile_cmd, compile_ms, run, ref, torch_cmd, torch_ok, has_threads,
 has_kernels, warmup, precision, fp32_run) = sys.argv[1:]
warmup = int(warmup)
cfg = json.load(open(config))
def timing(path, skip):
    r = json.load(open(path))
    t = [s["t"] for s in r["steps"]]
    steps = [b - a for a, b in zip(t, t[1:])]  # steps[i] = step i + 2
    timed = steps[max(skip, 1) - 1:]           # steps skip+1 .. N (step 1 holds the start-up)
    r["step_s"] = steps
    r["timed_steps"] = [max(skip, 1) + 1, len(t)]
    r["s_per_step"] = sum(timed) / len(timed) if timed else None
    r["s_per_step_median"] = statistics.median(timed) if timed else None
    r["losses"] = [s["loss"] for s in r["steps"]]
    return r
tokens = cfg["batch"] * cfg["seq"]
out = {"size": size, "precision": precision, "model": cfg, "tokens_per_step": tokens, "generate": gen,
       "compile": {"command": compile_cmd, "seconds": int(compile_ms) / 1000},
       "executable_has_threads_flag": has_threads == "1", "executable_has_kernels_flag": has_kernels == "1"}
e = timing(f"{work}/exe-{size}.json", warmup)
e["command"] = run
e["tokens_per_s"] = tokens / e["s_per_step"]
e["model_gflops"] = 6 * cfg["params"] * e["tokens_per_s"] / 1e9
out["spillway"] = e
if fp32_run:
    f = timing(f"{work}/fp32-{size}.json", warmup)
    f["command"] = fp32_run
    f["tokens_per_s"] = tokens / f["s_per_step"]
    f["model_gflops"] = 6 * cfg["params"] * f["tokens_per_s"] / 1e9
    out["spillway_fp32"] = f
    out["precision_over_fp32"] = e["tokens_per_s"] / f["tokens_per_s"]
if ref:
    r = timing(f"{work}/ref-{size}.json", 1)
    r["command"] = ref
    r["tokens_per_s"] = tokens / r["s_per_step"]
    r["model_gflops"] = 6 * cfg["params"] * r["tokens_per_s"] / 1e9
    out["spillway_reference_kernels"] = r
if torch_ok == "1":
    t = json.load(open(f"{work}/torch-{size}.json"))
    t["command"] = torch_cmd
    out["torch"] = t
    out["spillway_over_torch"] = e["tokens_per_s"] / t["tokens_per_s"]
    if t["params"] != cfg["params"]:
        out["warning"] = f"torch's model has {t['params']} parameters, the ONNX one {cfg['params']}"
print(json.dumps(out))
PY
  SIZE_JSONS+=("$WORK/size-$size.json")
done

# 3. The table and the JSON.
python3 - "$ROOT" "$WORK/sgemm.json" "$OUTJSON" "bench/cpu-vs-torch.sh $ARGV" "${SGEMM_CMD[*]}" "$THREADS" \
  "$LOAD0" "$SPILLWAYC" "$PY" "${SIZE_JSONS[@]}" <<'PY'
import json, os, platform, subprocess, sys
root, sgemm_path, out, command, sgemm_cmd, threads, load0, spillwayc, py, *sizes = sys.argv[1:]
def lscpu(key):
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.split(":")[0].strip() == key:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None
rev = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                     capture_output=True, text=True).stdout.strip() or None
sg = json.load(open(sgemm_path))
sg["command"] = sgemm_cmd
rows = [json.load(open(p)) for p in sizes]
for r in rows:
    for k in ("spillway", "spillway_fp32", "spillway_reference_kernels"):
        if k in r:
            r[k]["fraction_of_numpy_sgemm"] = r[k]["model_gflops"] / sg["best_gflops"]
    if "torch" in r:
        r["torch"]["fraction_of_numpy_sgemm"] = r["torch"]["model_gflops"] / sg["best_gflops"]
machine = {"host": platform.node(), "kernel": platform.release(), "cpu_model": lscpu("Model name"),
           "cpus": os.cpu_count(), "cores_per_socket": lscpu("Core(s) per socket"),
           "sockets": lscpu("Socket(s)"), "threads_per_core": lscpu("Thread(s) per core"),
           "flags_avx512f": "avx512f" in (lscpu("Flags") or ""),
           "loadavg_before": load0, "loadavg_after": " ".join(open("/proc/loadavg").read().split()[:3])}
summary = {"schema": "spillway-cpu-vs-torch-1", "command": command, "source_tree": rev, "spillwayc": spillwayc,
           "python": py, "threads": int(threads), "machine": machine, "numpy_sgemm": sg, "sizes": rows,
           "notes": ["tokens/s = batch * seq / mean seconds per step over the timed steps (the warm-up ones "
                     "and, for the executable, step 1 with its start-up excluded)",
                     "model GFLOP/s = 6 * parameters * tokens/s (parameters include the untied LM head)",
                     "the executable's step times: the arrival of its 'step k/N' lines; torch's: perf_counter "
                     "around forward + backward + AdamW step + zero_grad"]}
with open(out, "w") as f:
    json.dump(summary, f, indent=1)
    f.write("\n")
print(f"{machine['cpu_model']}, {machine['cpus']} CPUs, {threads} thread(s); load {load0} before, "
      f"{machine['loadavg_after']} after")
print(f"NumPy {sg['numpy']} sgemm 1024^3: {sg['best_gflops']:.1f} GFLOP/s best, {sg['median_gflops']:.1f} median")
hdr = f"{'size':6} {'params':>7} {'who':24} {'s/step':>8} {'tokens/s':>10} {'GFLOP/s':>8} {'of sgemm':>8} {'loss 1':>7}"
print(hdr)
for r in rows:
    cfg = r["model"]
    def line(who, d):
        print(f"{r['size']:6} {cfg['params'] / 1e6:6.1f}M {who:24} {d['s_per_step']:8.3f} {d['tokens_per_s']:10.1f} "
              f"{d['model_gflops']:8.2f} {d['fraction_of_numpy_sgemm']:8.3f} {d['losses'][0]:7.3f}")
    e = r["spillway"]
    mixed = r.get("precision", "fp32") != "fp32"
    line(("spillway bf16-mixed" if mixed else "spillway")
         + ("" if r["executable_has_threads_flag"] else " (no --threads)"), e)
    if "spillway_fp32" in r:
        line("spillway fp32", r["spillway_fp32"])
    if "spillway_reference_kernels" in r:
        line("spillway --kernels ref", r["spillway_reference_kernels"])
    if "torch" in r:
        line("torch eager bf16 autocast" if mixed else "torch eager fp32", r["torch"])
for r in rows:
    if "spillway_over_torch" in r:
        x = r["spillway_over_torch"]
        print(f"{r['size']}: spillway / torch tokens/s = {x:.2f}x (target >= 1.0x: {'met' if x >= 1.0 else 'NOT met'})"
              + (" (both bf16-mixed: spillway --precision bf16-mixed, torch autocast bf16)"
                 if r.get("precision", "fp32") != "fp32" else ""))
    if "precision_over_fp32" in r:
        print(f"{r['size']}: spillway bf16-mixed / spillway fp32 tokens/s = {r['precision_over_fp32']:.2f}x")
    else:
        print(f"{r['size']}: no torch row (torch not importable by {py}; pass --python PY)")
    if "spillway_reference_kernels" in r:
        ref = r["spillway_reference_kernels"]
        print(f"{r['size']}: fast / reference kernels = {ref['s_per_step'] / r['spillway']['s_per_step']:.2f}x")
    if "warning" in r:
        print(f"{r['size']}: WARNING {r['warning']}")
print(f"JSON: {out}")
PY
