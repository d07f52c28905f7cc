#!/usr/bin/env bash
# Checkpoint speed: how fast an executable with an all-SSD offload plan
# writes a checkpoint (--checkpoint-dir) and resumes from one (--resume),
# against the bytes it writes and what the disk moves (fio, sequential
# O_DIRECT 1 MiB x 32 io_uring, write then read, in the same directory).
# Target: >= 0.8 of fio for both. The plan keeps the state on SSD, so a
# checkpoint reads it from the swap before writing it (a resume reads the
# checkpoint and writes the swap): the rows "SSD to SSD" compare with what
# fio's read then write of the same bytes take, 1 / (1/read + 1/write) GB/s,
# the rest with fio's write or read alone. Also torch.save / torch.load of tensors of
# the same shapes and bytes (fp32), when torch is importable (else the row
# says so and is skipped).
#
# usage: bench/checkpoint.sh [--dir DIR] [--rounds R] [--layers L] [--d-model D]
#                            [--heads H] [--vocab V] [--seq S] [--batch B]
#                            [--microbatches M] [--gpu-mem SIZE --host-mem SIZE]
#                            [-o OUT.json]
#   --dir DIR: where the checkpoints, the swap files, fio's and torch's files go
#     (default ${BENCH_DIR:-build/bench}/checkpoint); all on one file system.
#   defaults: R = 3, a GPT of L = 8, D = 1024, H = 16, V = 8192, S = 8, B = 2
#     (118M parameters: 1.4 GB of checkpoint, params + AdamW m and v), M = 2,
#     snake; budgets: the smallest the cost model's plan fits, + 25%.
# What is timed, per round (each run under GNU time; medians over R rounds):
#   start    EXE --steps 0                       (load the weights, exit)
#   train    EXE --steps 1
#   ckpt     EXE --steps 1 --checkpoint-dir C    (the same step, then a checkpoint)
#   resume   EXE --steps 1 --checkpoint-dir C --resume   (reads it; nothing to train)
# Each run's lines are timestamped as they come (bench/stamp_lines.py), so
# the step's compute drops out:
#   checkpoint write s = (exit - "step 1/1" line) of ckpt - the same of train:
#     everything the checkpoint adds after the step (gathering the state off
#     its tiers, writing, fsyncs); also the executable's own "(N ms)" (the
#     storage write alone) and the wall-clock difference ckpt - train;
#   resume s = "resume: from" line - "checkpoints:" line of resume: reading,
#     checking and restoring the checkpoint; also the wall difference
#     resume - start.
# Bytes = the checkpoint's files. Every run's peak RSS is recorded too
# (today's executable gathers the whole state into memory for a checkpoint).
# env: SPILLWAYC (default build/bin/spillwayc), FIO (default: fio on PATH;
#      FIO=none: skip it), PYTHON (default python3, for torch).
# Progress to stderr, the table last, every number and command to
# bench/results/checkpoint-<host>-<UTC time>.json (-o to choose).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ARGV="$*"
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit "${1:-2}"; }
die() { echo "checkpoint.sh: $*" >&2; exit 1; }
log() { echo "checkpoint.sh: $*" >&2; }
DIR="" ROUNDS=3 L=8 D=1024 H=16 V=8192 S=8 B=2 M=2 GPUMEM="" HOSTMEM="" OUTJSON=""
while [ $# -gt 0 ]; do
  case $1 in
    --dir|--rounds|--layers|--d-model|--heads|--vocab|--seq|--batch|--microbatches|--gpu-mem|--host-mem|-o)
      [ $# -ge 2 ] || { echo "checkpoint.sh: $1 needs a value" >&2; usage; } ;;
  esac
  case $1 in
    --dir) DIR=$2; shift ;; --rounds) ROUNDS=$2; shift ;;
    --layers) L=$2; shift ;; --d-model) D=$2; shift ;; --heads) H=$2; shift ;;
    --vocab) V=$2; shift ;; --seq) S=$2; shift ;; --batch) B=$2; shift ;;
    --microbatches) M=$2; shift ;; --gpu-mem) GPUMEM=$2; shift ;; --host-mem) HOSTMEM=$2; shift ;;
    -o) OUTJSON=$2; shift ;;
    -h|--help) usage 0 ;;
    *) echo "checkpoint.sh: unknown argument '$1'" >&2; usage ;;
  esac
  shift
done
for v in ROUNDS L D H V S B M; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "each of --rounds, --layers, --d-model, --heads, --vocab, --seq, --batch, --microbatches must be a positive integer, not '${!v}'"
done
[ $((B % M)) -eq 0 ] || die "--microbatches $M does not divide the batch $B"
{ [ -n "$GPUMEM" ] && [ -n "$HOSTMEM" ]; } || { [ -z "$GPUMEM" ] && [ -z "$HOSTMEM" ]; } ||
  die "give both --gpu-mem and --host-mem, or neither"
SPILLWAYC=${SPILLWAYC:-$ROOT/build/bin/spillwayc}
[ -x "$SPILLWAYC" ] || die "no spillwayc at $SPILLWAYC (scripts/build.sh)"
[ -x /usr/bin/time ] || die "needs /usr/bin/time (GNU time)"
FIO=${FIO:-$(command -v fio || true)}
[ "$FIO" = none ] && FIO=""
[ -n "$FIO" ] || log "fio not found (apt-get install -y fio): the disk's bandwidth is not measured and no ratio is printed"
PYTHON=${PYTHON:-python3}
BENCH_DIR=${BENCH_DIR:-$ROOT/build/bench}
[ -n "$DIR" ] || DIR=$BENCH_DIR/checkpoint
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
[ -n "$OUTJSON" ] || OUTJSON=$ROOT/bench/results/checkpoint-$(hostname -s)-$(date -u +%Y%m%dT%H%M%SZ).json
mkdir -p "$(dirname "$OUTJSON")"
WORK=$(mktemp -d "$DIR/run.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# 1. The model (cached, like offload.sh's) and its executable.
MODEL=$BENCH_DIR/gpt-L$L-D$D-H$H-V$V-S$S-B$B
if [ ! -f "$MODEL/gpt.onnx" ]; then
  log "writing the model to $MODEL"
  "$PYTHON" "$ROOT/bench/make_gpt_onnx.py" --out "$MODEL" --layers "$L" --d-model "$D" --heads "$H" \
    --vocab "$V" --seq "$S" --batch "$B" >&2
fi
PLAN=(--microbatches "$M" --schedule snake --place params=ssd,optimizer=ssd,gradients=ssd --hw "$ROOT/profiles/cpu-ci.json")
if [ -z "$GPUMEM" ]; then
  log "planning with 4 KiB budgets, to read the smallest budgets that fit"
  "$SPILLWAYC" "$MODEL/gpt.onnx" "${PLAN[@]}" --gpu-mem 4K --host-mem 4K --report-json "$WORK/needed.json" \
    > "$WORK/needed.log" 2>&1 || true
  [ -f "$WORK/needed.json" ] || { cat "$WORK/needed.log" >&2; die "spillwayc wrote no report"; }
  read -r GPUMEM HOSTMEM < <("$PYTHON" -c '
import json, sys
n = json.load(open(sys.argv[1]))["chosen"]["needed_bytes"]
mib = lambda b: -(-b * 5 // 4 // (1 << 20))  # + 25%, whole MiB
print("%dM %dM" % (mib(n["gpu"]), mib(n["host"])))' "$WORK/needed.json")
fi
COMPILE=("$SPILLWAYC" "$MODEL/gpt.onnx" -o "$WORK/exe" "${PLAN[@]}" --gpu-mem "$GPUMEM" --host-mem "$HOSTMEM")
log "compiling: ${COMPILE[*]}"
"${COMPILE[@]}" > "$WORK/compile.log" 2>&1 || { tail -5 "$WORK/compile.log" >&2; die "the compile failed"; }
EXE=("$WORK/exe" --input "tokens=$MODEL/tokens.npy" --input "targets=$MODEL/targets.npy" --ssd "$WORK/ssd")
mkdir -p "$WORK/ssd"

# 2. The runs. timed NAME ROUND CMD...: GNU time into WORK/NAME-ROUND.time, the
# output timestamped line by line into WORK/NAME-ROUND.jsonl (and plain in .log).
timed() {
  local name=$1 r=$2; shift 2
  printf '%s\n' "$*" > "$WORK/$name.cmd"
  "$PYTHON" "$ROOT/bench/stamp_lines.py" "$WORK/$name-$r.jsonl" \
    /usr/bin/time -f "%e %U %S %M" -o "$WORK/$name-$r.time" "$@" > /dev/null 2>&1 ||
    { "$PYTHON" -c 'import json,sys; [print(json.loads(l).get("line", "")) for l in open(sys.argv[1])]' \
        "$WORK/$name-$r.jsonl" | tail -5 >&2; die "$name (round $r) failed: $*"; }
  "$PYTHON" -c 'import json,sys; [print(json.loads(l)["line"]) for l in open(sys.argv[1]) if "line" in json.loads(l)]' \
    "$WORK/$name-$r.jsonl" > "$WORK/$name-$r.log"
}
for r in $(seq 1 "$ROUNDS"); do
  rm -rf "$WORK/ckpt"
  timed start "$r" "${EXE[@]}" --steps 0
  timed train "$r" "${EXE[@]}" --steps 1
  timed ckpt "$r" "${EXE[@]}" --steps 1 --checkpoint-dir "$WORK/ckpt"
  du -b --apparent-size -s "$WORK"/ckpt/step-* | awk '{print $1}' > "$WORK/ckpt-$r.bytes"
  timed resume "$r" "${EXE[@]}" --steps 1 --checkpoint-dir "$WORK/ckpt" --resume
  grep -q "nothing to train" "$WORK/resume-$r.log" || die "the resumed run did not resume from the checkpoint (see $WORK/resume-$r.log)"
  log "round $r/$ROUNDS: start $(cut -d' ' -f1 "$WORK/start-$r.time") s, train $(cut -d' ' -f1 "$WORK/train-$r.time") s, ckpt $(cut -d' ' -f1 "$WORK/ckpt-$r.time") s, resume $(cut -d' ' -f1 "$WORK/resume-$r.time") s"
done
BYTES=$(cat "$WORK/ckpt-1.bytes")

# 3. fio in the same directory: the checkpoint's bytes (at least 256 MiB), written then read.
if [ -n "$FIO" ]; then
  FSIZE=$(( (BYTES > 268435456 ? BYTES : 268435456) / 1048576 ))M
  for r in $(seq 1 "$ROUNDS"); do
    for op in write read; do
      "$FIO" --name=ckpt-$op --filename="$WORK/fio.bin" --rw=$op --bs=1M --iodepth=32 --ioengine=io_uring \
        --direct=1 --numjobs=1 --size="$FSIZE" --output-format=json > "$WORK/fio-$op-$r.json" 2>"$WORK/fio.err" ||
        { cat "$WORK/fio.err" >&2; die "fio failed"; }
    done
  done
  rm -f "$WORK/fio.bin"
  FIOCMD="$FIO --rw=write|read --bs=1M --iodepth=32 --ioengine=io_uring --direct=1 --numjobs=1 --size=$FSIZE --filename=$DIR/.../fio.bin"
fi

# 4. torch.save / torch.load of fp32 tensors of the checkpoint's shapes (params, m, v).
TORCH=missing
if "$PYTHON" -c "import torch" 2>/dev/null; then
  TORCH=$("$PYTHON" -c "import torch; print(torch.__version__)")
  log "torch $TORCH: torch.save and torch.load of the same tensors"
  for r in $(seq 1 "$ROUNDS"); do
    "$PYTHON" - "$MODEL/gpt.onnx" "$WORK/torch.pt" > "$WORK/torch-$r.json" <<'PY'
import json, os, sys, time
import onnx, torch
model, path = sys.argv[1:]
m = onnx.load(model, load_external_data=False)
ts = {}
for t in m.graph.initializer:  # each parameter and its AdamW m and v, fp32
    for kind in ("param", "adam_m", "adam_v"):
        ts[f"{kind}/{t.name}"] = torch.randn(*t.dims) if kind == "param" else torch.rand(*t.dims)
nbytes = sum(x.numel() * x.element_size() for x in ts.values())
t0 = time.perf_counter()
torch.save(ts, path)
t1 = time.perf_counter()
fd = os.open(path, os.O_RDONLY); os.fsync(fd); os.close(fd)
t2 = time.perf_counter()
os.posix_fadvise(os.open(path, os.O_RDONLY), 0, 0, os.POSIX_FADV_DONTNEED)  # a cold read, as the resume's O_DIRECT one
t3 = time.perf_counter()
back = torch.load(path)
t4 = time.perf_counter()
assert len(back) == len(ts)
print(json.dumps({"bytes": nbytes, "file_bytes": os.path.getsize(path), "save_s": t1 - t0,
                  "save_fsync_s": t2 - t0, "load_s": t4 - t3}))
os.remove(path)
PY
  done
else
  log "torch is not importable ($PYTHON -c 'import torch' failed): the torch.save row is skipped"
fi

COMMIT=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
"$PYTHON" - "$WORK" "$ROUNDS" "$OUTJSON" "bench/checkpoint.sh $ARGV" "$BYTES" "$TORCH" "${COMPILE[*]}" \
  "${FIOCMD:-}" "$COMMIT" "$DIR" "$GPUMEM" "$HOSTMEM" "$MODEL" <<'PY'
import glob, json, os, platform, re, statistics, subprocess, sys
(work, rounds, out, command, nbytes, torch_version, compile_cmd, fio_cmd, commit, bdir,
 gpumem, hostmem, model) = sys.argv[1:]
rounds, nbytes = int(rounds), int(nbytes)
med = statistics.median
def timed(name):
    rows = []
    for r in range(1, rounds + 1):
        wall, user, sys_, rss = open(f"{work}/{name}-{r}.time").read().split()[-4:]
        rows.append({"wall_s": float(wall), "cpu_s": float(user) + float(sys_), "peak_rss_bytes": int(rss) * 1024})
    return {"command": open(f"{work}/{name}.cmd").read().strip(), "rounds": rows,
            "wall_s_median": med(x["wall_s"] for x in rows),
            "peak_rss_bytes_max": max(x["peak_rss_bytes"] for x in rows)}
runs = {n: timed(n) for n in ("start", "train", "ckpt", "resume")}
# The executable's own report of the write: "  checkpoint DIR (SIZE, N ms)".
own = []
for r in range(1, rounds + 1):
    m = re.search(r"checkpoint \S+ \([^,]*, ([0-9.]+) ms\)", open(f"{work}/ckpt-{r}.log").read())
    own.append(float(m[1]) / 1e3 if m else None)
def stamps(name, r):
    return [json.loads(l) for l in open(f"{work}/{name}-{r}.jsonl")]
def after_step(name, r):  # seconds from the last step's line to the exit
    ls = stamps(name, r)
    step = [x["t"] for x in ls if x.get("line", "").startswith("step ")]
    if not step:
        raise SystemExit(f"checkpoint.sh: no 'step' line in {name} round {r}")
    return ls[-1]["t"] - step[-1]
def between(name, r, a, b):  # seconds from the first line starting with a to the first with b
    ls = stamps(name, r)
    ta = next(x["t"] for x in ls if x.get("line", "").lstrip().startswith(a))
    tb = next(x["t"] for x in ls if x.get("line", "").lstrip().startswith(b))
    return tb - ta
write_s = [after_step("ckpt", r) - after_step("train", r) for r in range(1, rounds + 1)]
resume_s = [between("resume", r, "checkpoints:", "resume: from") for r in range(1, rounds + 1)]
write_wall = [runs["ckpt"]["rounds"][i]["wall_s"] - runs["train"]["rounds"][i]["wall_s"] for i in range(rounds)]
resume_wall = [runs["resume"]["rounds"][i]["wall_s"] - runs["start"]["rounds"][i]["wall_s"] for i in range(rounds)]
fio = {}
for op in ("write", "read"):
    v = []
    for p in sorted(glob.glob(f"{work}/fio-{op}-*.json")):
        t = open(p).read()
        v.append(json.loads(t[t.index("{"):])["jobs"][0][op]["bw_bytes"] / 1e9)
    fio[op] = {"gbps": v, "gbps_median": med(v)} if v else None
# The plan keeps the state on SSD: a checkpoint reads it from the swap and
# writes it to the checkpoint, a resume reads the checkpoint and writes the
# swap. What the disk does for that is fio's read then write of the same
# bytes: 1 / (1 / read + 1 / write).
if fio.get("read") and fio.get("write"):
    fio["copy"] = {"gbps_median": 1 / (1 / fio["read"]["gbps_median"] + 1 / fio["write"]["gbps_median"]),
                   "from": "fio read then write of the same bytes"}
torch_rows = [json.loads(open(p).read()) for p in sorted(glob.glob(f"{work}/torch-*.json"))]
gb = lambda s: nbytes / s / 1e9 if s and s > 0 else None
w_med, r_med = med(write_s), med(resume_s)
own_med = med(x for x in own if x is not None) if any(x is not None for x in own) else None
rows = [("checkpoint write (after the step: ckpt - train)", w_med, gb(w_med), "write"),
        ("checkpoint write (the executable's own ms)", own_med, gb(own_med), "write"),
        ("checkpoint write (wall: ckpt - train)", med(write_wall), gb(med(write_wall)), "write"),
        ("resume (checkpoints: -> resume: from)", r_med, gb(r_med), "read"),
        ("resume (wall: resume - start)", med(resume_wall), gb(med(resume_wall)), "read"),
        ("checkpoint write, SSD to SSD (vs fio read+write)", w_med, gb(w_med), "copy"),
        ("resume, SSD to SSD (vs fio read+write)", r_med, gb(r_med), "copy")]
if torch_rows:
    tb = torch_rows[0]["bytes"]
    for label, key, op in (("torch.save", "save_s", "write"), ("torch.save + fsync", "save_fsync_s", "write"),
                           ("torch.load (cold)", "load_s", "read")):
        s = med(t[key] for t in torch_rows)
        rows.append((label, s, tb / s / 1e9, op))
fs = subprocess.run(["findmnt", "-n", "-o", "SOURCE,FSTYPE", "-T", bdir], capture_output=True, text=True).stdout.split()
summary = {"schema": "spillway-checkpoint-bench-1", "command": command, "commit": commit,
           "machine": {"host": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count(),
                       "dir": bdir, "filesystem": " ".join(fs), "load_average_at_end": os.getloadavg()},
           "model": json.load(open(os.path.join(model, "config.json"))), "compile": compile_cmd,
           "budgets": {"gpu_mem": gpumem, "host_mem": hostmem},
           "checkpoint_bytes": nbytes, "target_ratio": 0.8, "runs": runs,
           "checkpoint_write_s": write_s, "checkpoint_write_s_own": own, "checkpoint_write_s_wall_difference": write_wall,
           "resume_s": resume_s, "resume_s_wall_difference": resume_wall,
           "fio": fio, "fio_command": fio_cmd or None,
           "torch": {"version": torch_version, "rounds": torch_rows} if torch_rows else {"version": None, "skipped": "torch is not importable"},
           "table": [{"what": w, "seconds": s, "gbps": g, "fio_op": op,
                      "ratio_to_fio": (g / fio[op]["gbps_median"]) if g and fio.get(op) else None} for w, s, g, op in rows]}
with open(out, "w") as f:
    json.dump(summary, f, indent=1)
    f.write("\n")
mb = nbytes / 1e6
print(f"checkpoint: {mb:.1f} MB ({nbytes} bytes) of params + AdamW m, v; dir {bdir} ({' '.join(fs)}); "
      f"median of {rounds}; peak RSS: start {runs['start']['peak_rss_bytes_max'] / 1e6:.0f} MB, "
      f"train {runs['train']['peak_rss_bytes_max'] / 1e6:.0f} MB, ckpt {runs['ckpt']['peak_rss_bytes_max'] / 1e6:.0f} MB, "
      f"resume {runs['resume']['peak_rss_bytes_max'] / 1e6:.0f} MB")
for op in ("write", "read", "copy"):
    print(f"fio {op}: " + (f"{fio[op]['gbps_median']:.3f} GB/s" if fio.get(op) else "not measured"))
print(f"{'what':48} {'seconds':>8} {'GB/s':>7} {'/ fio':>6}")
for t in summary["table"]:
    s = f"{t['seconds']:8.3f}" if t["seconds"] is not None else f"{'-':>8}"
    g = f"{t['gbps']:7.3f}" if t["gbps"] else f"{'-':>7}"
    r = t["ratio_to_fio"]
    rs = f"{r:6.3f}" + ("" if r >= 0.8 else "  BELOW 0.8") if r else f"{'-':>6}"
    print(f"{t['what']:48} {s} {g} {rs}")
if not torch_rows:
    print("torch.save: skipped (torch is not importable)")
print(f"summary: {out}")
PY
