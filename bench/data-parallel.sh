#!/usr/bin/env bash
# Data parallel on this machine's cores: the same GPT, the same rows per
# step, trained by one process (batch N*b in N micro-batches, T threads)
# and by `mpirun -np N` ranks of batch b (T/N threads each, one core each
# when N = T), in tokens per second, with the time the ranks spent
# averaging (the executable's measured all-reduce share), and a check that
# both end with the same weights (bit-identical for N = 2). The peer is the
# one-process run on the same cores: what data parallelism costs or gains
# here is the split of the cores between processes against the threads of
# one, and the averaging. Then the ranks again with --zero 1 (the AdamW
# state sharded), against the same ranks with the whole state on each:
# tokens per second, each rank's peak RSS (GNU time), the state per rank
# and the bytes exchanged, and the same weights. Last, an offload plan
# (--place P, each rank swapping to its own directory) compiled for the
# ranks with the state sharded (spillwayc --zero 1 --ranks N) against the
# same plan with the whole state on each rank: each rank's SSD swap, SSD
# bytes per iteration (all, and the optimizer's), pinned host arena, peak
# RSS and tokens per second, and the same weights, and the plan cut for
# ZeRO stage 2 (spillwayc --zero 2: the gradient blocks sharded too, each
# layer's gradients reduce-scattered as its backward completes), with each
# rank's gradient SSD and d2h bytes (run as a user runs it: the
# executable's --overlap-exchanges auto, whose choice the banner says), and
# that plan twice more, its reduce-scatters on the exchange thread during
# the next layer's backward (--overlap-exchanges on) against where they
# start (off, the baseline): tokens per second, the step's time in the
# exchanges, the thread's and the step's waits for it; the same again with
# --precision bf16-mixed (the f32 masters in master blocks on SSD, sharded
# too with --zero 1, the bf16 working copies all-gathered): each rank's SSD
# bytes per iteration (all, the optimizer's and the masters'), the bytes
# exchanged and tokens per second. Then the ranks once
# more, launched the way torchrun launches them (RANK, WORLD_SIZE,
# MASTER_ADDR, MASTER_PORT, by test/e2e/launch_ranks.py: the collectives on
# Gloo over TCP) against the same ranks under mpirun (Open MPI's shared
# memory), --zero 0 and --zero 1: tokens per second, the time the
# exchanges took, the bytes Gloo sent (the loopback interface's, counted
# in /proc/net/dev around each run: every rank's, start-up included)
# against what the executable says a ring sends, and the same weights
# (skipped, and said, where the runtime was built without Gloo).
#
# usage: bench/data-parallel.sh [--ranks N] [--layers L] [--d-model D]
#                               [--heads H] [--vocab V] [--seq S]
#                               [--batch b] [--steps K] [--threads T]
#                               [--place P] [--out DIR] [-h]
#   defaults: N=2, L=6 D=384 H=6 V=8192 S=128 b=4 (17.0M parameters, the
#   cpu-vs-torch "small" GPT), K=6 steps (steady: median of steps 2..K),
#   T = nproc, P = params=ssd,optimizer=ssd,gradients=ssd. Needs Open
#   MPI's mpirun (scripts/install-deps.sh).
# Progress to stderr; a table last on stdout; every number and command to
# DIR/data-parallel-<host>-<UTC time>.json (default bench/results).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ARGV="$*"
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit "${1:-2}"; }
die() { echo "data-parallel.sh: error: $*" >&2; exit 1; }
log() { echo "data-parallel.sh: $*" >&2; }
N=2 L=6 D=384 H=6 V=8192 S=128 B=4 STEPS=6 THREADS=$(nproc) OUTDIR=$ROOT/bench/results
PLACE=params=ssd,optimizer=ssd,gradients=ssd
while [ $# -gt 0 ]; do
  case $1 in
    --ranks|--layers|--d-model|--heads|--vocab|--seq|--batch|--steps|--threads|--place|--out)
      [ $# -ge 2 ] || { echo "data-parallel.sh: $1 needs a value" >&2; usage; } ;;
  esac
  case $1 in
    --ranks) N=$2; shift ;; --layers) L=$2; shift ;; --d-model) D=$2; shift ;;
    --heads) H=$2; shift ;; --vocab) V=$2; shift ;; --seq) S=$2; shift ;;
    --batch) B=$2; shift ;; --steps) STEPS=$2; shift ;; --threads) THREADS=$2; shift ;;
    --place) PLACE=$2; shift ;; --out) OUTDIR=$2; shift ;;
    -h|--help) usage 0 ;;
    *) echo "data-parallel.sh: unknown argument '$1'" >&2; usage ;;
  esac
  shift
done
for v in N L D H V S B STEPS THREADS; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, not '${!v}'"
done
[ "$N" -ge 2 ] || die "--ranks must be at least 2 (one rank is the baseline)"
[ "$STEPS" -ge 3 ] || die "--steps must be at least 3 (the first step holds the start-up)"
[ $((THREADS % N)) = 0 ] || die "--threads $THREADS does not split evenly over $N ranks"
command -v mpirun >/dev/null || die "no mpirun: install Open MPI (bash scripts/install-deps.sh)"
[ -x /usr/bin/time ] || die "needs /usr/bin/time (GNU time: apt-get install time) for each rank's peak RSS"
SPILLWAYC=$ROOT/build/bin/spillwayc
[ -x "$SPILLWAYC" ] || die "no $SPILLWAYC: build first (bash scripts/build.sh)"
MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
WORK=${BENCH_DIR:-$ROOT/build/bench}/data-parallel
rm -rf "$WORK" && mkdir -p "$WORK" "$OUTDIR"
cd "$WORK"

tag="L$L-D$D-H$H-V$V-S$S"
log "generating the GPT ($tag) at batch $B and $((N * B))"
python3 "$ROOT/bench/make_gpt_onnx.py" --out rank --layers "$L" --d-model "$D" --heads "$H" \
  --vocab "$V" --seq "$S" --batch "$B" > /dev/null
python3 "$ROOT/bench/make_gpt_onnx.py" --out whole --layers "$L" --d-model "$D" --heads "$H" \
  --vocab "$V" --seq "$S" --batch $((N * B)) > /dev/null
"$SPILLWAYC" whole/gpt.onnx --microbatches "$N" -o one > /dev/null
"$SPILLWAYC" rank/gpt.onnx -o dp > /dev/null
log "compiling the offload plan --place $PLACE for the ranks, whole and sharded"
"$SPILLWAYC" rank/gpt.onnx --place "$PLACE" -o dpo > /dev/null
"$SPILLWAYC" rank/gpt.onnx --place "$PLACE" --zero 1 --ranks "$N" -o zo > /dev/null
"$SPILLWAYC" rank/gpt.onnx --place "$PLACE" --zero 2 --ranks "$N" -o z2o > /dev/null
# bf16-mixed: the masters on SSD unless --place says where.
PLACE_MIXED=$PLACE
[[ $PLACE == *master=* ]] || PLACE_MIXED="$PLACE,master=ssd"
log "compiling the bf16-mixed plan --place $PLACE_MIXED for the ranks, whole and sharded"
"$SPILLWAYC" rank/gpt.onnx --precision bf16-mixed --place "$PLACE_MIXED" -o dpm > /dev/null
"$SPILLWAYC" rank/gpt.onnx --precision bf16-mixed --place "$PLACE_MIXED" --zero 1 --ranks "$N" \
  -o zm > /dev/null
IN=(--weights one.weights --input tokens=whole/tokens.npy --input targets=whole/targets.npy
    --steps "$STEPS" --print-every 1)
ONE=(./one "${IN[@]}" --threads "$THREADS" --log-json one.jsonl --save one.safetensors)
# Each rank under GNU time: its peak RSS to NAME.rss.RANK.
ranks() { # NAME ARGS...: the N ranks of ./dp (EXE=./other for another)
  local name=$1; shift
  "${MPIRUN[@]}" -np "$N" sh -c '/usr/bin/time -f %M -o "$0.rss.$OMPI_COMM_WORLD_RANK" "$@"' \
    "$name" "${EXE:-./dp}" "${IN[@]}" --threads $((THREADS / N)) --log-json "$name.jsonl" \
    --save "$name.safetensors" "$@"
}
DP=(ranks dp)
ZERO=(ranks zero --zero 1)
log "one process, $THREADS threads: ${ONE[*]}"
"${ONE[@]}" > one.out
log "$N ranks, $((THREADS / N)) thread(s) each: ${DP[*]}"
"${DP[@]}" > dp.out
log "$N ranks with the AdamW state sharded: ${ZERO[*]}"
"${ZERO[@]}" > zero.out
mkdir -p ssd-whole ssd-zero ssd-zero2
log "$N ranks, offload plan, whole state: ./dpo --ssd ssd-whole"
EXE=./dpo ranks offw --ssd ssd-whole --stats-json offw.json > offw.out
log "$N ranks, offload plan cut for the ranks (--zero 1): ./zo --ssd ssd-zero"
EXE=./zo ranks offz --ssd ssd-zero --stats-json offz.json > offz.out
log "$N ranks, offload plan with the gradients sharded too (--zero 2): ./z2o --ssd ssd-zero2"
EXE=./z2o ranks offz2 --ssd ssd-zero2 --stats-json offz2.json > offz2.out
mkdir -p ssd-zero2t ssd-zero2i
log "the same, --overlap-exchanges on: ./z2o --ssd ssd-zero2t"
EXE=./z2o ranks offz2t --ssd ssd-zero2t --overlap-exchanges on > offz2t.out
log "the same, --overlap-exchanges off: ./z2o --ssd ssd-zero2i"
EXE=./z2o ranks offz2i --ssd ssd-zero2i --overlap-exchanges off > offz2i.out
mkdir -p ssd-mixed-whole ssd-mixed-zero
log "$N ranks, bf16-mixed offload plan, whole masters and state: ./dpm --ssd ssd-mixed-whole"
EXE=./dpm ranks mixw --ssd ssd-mixed-whole --stats-json mixw.json > mixw.out
log "$N ranks, bf16-mixed offload plan cut for the ranks (--zero 1): ./zm --ssd ssd-mixed-zero"
EXE=./zm ranks mixz --ssd ssd-mixed-zero --stats-json mixz.json > mixz.out
# torchrun-style (Gloo) against mpirun (MPI): the same ranks and threads.
GLOO=1
lo_tx() { awk '$1 == "lo:" { print $10 }' /proc/net/dev; }
gloo_ranks() { # NAME ARGS...: ./dp's N ranks (EXE=./other), torchrun-style; NAME.lo: bytes sent
  local name=$1; shift
  local before rc=0
  before=$(lo_tx)
  python3 "$ROOT/test/e2e/launch_ranks.py" -n "$N" -- "${EXE:-./dp}" "${IN[@]}" --threads $((THREADS / N)) \
    --log-json "$name.jsonl" --save "$name.safetensors" "$@" > "$name.out" 2> "$name.err" || rc=$?
  echo $(( $(lo_tx) - before )) > "$name.lo"
  return $rc
}
log "$N ranks launched torchrun-style (Gloo): launch_ranks.py -n $N ./dp"
if ! gloo_ranks gloo; then
  grep -q "built without Gloo\|libgloo0" gloo.err || die "the torchrun-style ranks failed: $(cat gloo.err)"
  log "skipping Gloo: $(grep -m1 error gloo.err)"
  GLOO=0
fi
if [ "$GLOO" = 1 ]; then
  log "$N ranks launched torchrun-style with --zero 1"
  gloo_ranks gloo-zero --zero 1 || die "the torchrun-style --zero 1 ranks failed: $(cat gloo-zero.err)"
  mkdir -p ssd-gloo2t ssd-gloo2i
  log "$N ranks torchrun-style, the --zero 2 plan with --overlap-exchanges on, then off"
  EXE=./z2o gloo_ranks gloo-z2t --ssd ssd-gloo2t --overlap-exchanges on \
    || die "the torchrun-style --zero 2 ranks failed: $(cat gloo-z2t.err)"
  EXE=./z2o gloo_ranks gloo-z2i --ssd ssd-gloo2i --overlap-exchanges off \
    || die "the torchrun-style --zero 2 ranks failed: $(cat gloo-z2i.err)"
fi
if [ "$N" = 2 ]; then CMP=--exact; else CMP="--atol 1e-4"; fi
python3 "$ROOT/test/e2e/compare_weights.py" dp.safetensors one.safetensors $CMP > same.out \
  || die "the $N ranks' weights differ from one process's: $(cat same.out)"
python3 "$ROOT/test/e2e/compare_weights.py" zero.safetensors dp.safetensors --exact > zero-same.out \
  || die "the sharded ranks' weights differ from the unsharded ranks': $(cat zero-same.out)"
python3 "$ROOT/test/e2e/compare_weights.py" offz.safetensors offw.safetensors --exact > off-same.out \
  || die "the sharded offload plan's weights differ from the whole plan's: $(cat off-same.out)"
python3 "$ROOT/test/e2e/compare_weights.py" offz2.safetensors offw.safetensors $CMP > off2-same.out \
  || die "the --zero 2 offload plan's weights differ from the whole plan's: $(cat off2-same.out)"
python3 "$ROOT/test/e2e/compare_weights.py" offz2i.safetensors offz2t.safetensors --exact > off2i-same.out \
  || die "the --zero 2 plan's weights with --overlap-exchanges off differ from on: $(cat off2i-same.out)"
python3 "$ROOT/test/e2e/compare_weights.py" mixz.safetensors mixw.safetensors --exact > mix-same.out \
  || die "the bf16-mixed plan's sharded masters give other weights than its whole ones: $(cat mix-same.out)"
if [ "$GLOO" = 1 ]; then
  python3 "$ROOT/test/e2e/compare_weights.py" gloo.safetensors dp.safetensors $CMP > gloo-same.out \
    || die "the torchrun-style ranks' weights differ from mpirun's: $(cat gloo-same.out)"
  python3 "$ROOT/test/e2e/compare_weights.py" gloo-zero.safetensors zero.safetensors $CMP > gloo-zero-same.out \
    || die "the torchrun-style --zero 1 weights differ from mpirun's: $(cat gloo-zero-same.out)"
fi

OUTJSON=$OUTDIR/data-parallel-$(hostname -s 2>/dev/null || echo host)-$(date -u +%Y%m%dT%H%M%SZ).json
python3 - "$OUTJSON" "$N" "$THREADS" "$tag" "$B" "$STEPS" "$ARGV" "${ONE[*]}" "${DP[*]}" "$PLACE" "$GLOO" "$PLACE_MIXED" <<'PY'
import json, re, statistics, sys, platform
out, n, threads, tag, b, steps, argv, one_cmd, dp_cmd, place, gloo, place_mixed = sys.argv[1:]
n, threads, b, steps = int(n), int(threads), int(b), int(steps)

def steady(path):
    rows = [json.loads(l) for l in open(path)]
    # elapsed_s is cumulative: step k's time is its difference; step 1
    # holds the start-up and is left out.
    t = [r["elapsed_s"] for r in rows]
    per = [t[i] - t[i - 1] for i in range(1, len(t))]
    tokens = rows[0]["tokens"]
    s = statistics.median(per)
    return s, tokens / s, rows[-1]["loss"]

s1, tok1, loss1 = steady("one.jsonl")
sn, tokn, lossn = steady("dp.jsonl")
sz, tokz, lossz = steady("zero.jsonl")
avg = re.search(r"averaged (\S+ \S+) per step .* in ([0-9.]+) ms per step, ([0-9.]+)% of the step time",
                open("dp.out").read())
zx = re.search(r"reduce-scattered (\S+ \S+) .*all-gathered (\S+ \S+) .* in ([0-9.]+) ms per step, ([0-9.]+)% of the step time",
               open("zero.out").read())
zstate = re.search(r"zero: stage 1, AdamW state sharded over \d+ ranks?: (\S+ \S+) on this rank of (\S+ \S+)",
                   open("zero.out").read())
def rss(name):
    return [int(open(f"{name}.rss.{r}").read().split()[-1]) * 1024 for r in range(n)]
rss_dp, rss_zero = rss("dp"), rss("zero")
same = open("same.out").read().strip()
zsame = open("zero-same.out").read().strip()
osame = open("off-same.out").read().strip()
so_w, tok_w, _ = steady("offw.jsonl")
so_z, tok_z, _ = steady("offz.jsonl")
so_z2, tok_z2, _ = steady("offz2.jsonl")
so_z2t, tok_z2t, _ = steady("offz2t.jsonl")
so_z2i, tok_z2i, _ = steady("offz2i.jsonl")
m = re.search(r"zero: each layer's reduce-scatters (.*)", open("offz2.out").read())
auto_choice = m.group(1) if m else "not said"
def overlap(path):
    """--zero 2's exchanges from the last line: the step's ms per step in
    them (its own collectives and its waits), the reduce-scatters the
    exchange thread ran during the backward, and the step's waits for those
    (the inline run: none on the thread)."""
    t = open(path).read()
    m = re.search(r"in ([0-9.]+) ms per step, [0-9.]+% of the step time"
                  r"(?:; besides, the exchange thread reduce-scattered for ([0-9.]+) ms "
                  r"per step from each layer's staging on, of which the step waited "
                  r"([0-9.]+) ms)?", t)
    if not m:
        return {}
    return {"step_in_exchanges_ms_per_step": float(m.group(1)),
            "overlapped_ms_per_step": float(m.group(2) or 0),
            "waited_ms_per_step": float(m.group(3) or 0)}
ov_z2t, ov_z2i = overlap("offz2t.out"), overlap("offz2i.out")
rss_offw, rss_offz, rss_offz2 = rss("offw"), rss("offz"), rss("offz2")
osame2 = open("off2-same.out").read().strip()
def offload(name):
    """Rank 0's and each rank's plan: SSD swap, SSD bytes per iteration
    (all links, and the optimizer class's), pinned host arena."""
    per = []
    for r in range(n):
        f = f"{name}.json" + ("" if r == 0 else f".rank-{r}")
        s = json.load(open(f))
        it = s["bytes_per_iteration"]
        opt = s["bytes_per_iteration_by_class"]["optimizer"]
        mst = s["bytes_per_iteration_by_class"].get("master", {})
        grd = [s["bytes_per_iteration_by_class"].get(c, {}) for c in ("gradients", "gradstage")]
        per.append({"ssd_bytes": s["planned_bytes"]["ssd"],
                    "host_bytes": s["planned_bytes"]["host"],
                    "ssd_per_iteration": it["ssd_read"] + it["ssd_write"],
                    "optimizer_ssd_per_iteration": opt["ssd_read"] + opt["ssd_write"],
                    "master_ssd_per_iteration": mst.get("ssd_read", 0) + mst.get("ssd_write", 0),
                    "gradient_ssd_per_iteration": sum(g.get("ssd_read", 0) + g.get("ssd_write", 0) for g in grd),
                    "d2h_per_iteration": it["d2h"],
                    "as_planned": s["bytes_per_iteration"] == s["predicted_bytes_per_iteration"]})
    return per
off_w, off_z, off_z2 = offload("offw"), offload("offz"), offload("offz2")
so_mw, tok_mw, _ = steady("mixw.jsonl")
so_mz, tok_mz, _ = steady("mixz.jsonl")
rss_mixw, rss_mixz = rss("mixw"), rss("mixz")
mix_w, mix_z = offload("mixw"), offload("mixz")
msame = open("mix-same.out").read().strip()
def exchanged(path):
    """The data-parallel line's per-step bytes: averaged (--zero 0), or
    reduce-scattered and all-gathered (--zero 1)."""
    t = open(path).read()
    m = re.search(r"reduce-scattered ([0-9.]+ \S+) .*?all-gathered ([0-9.]+ \S+)", t)
    if m:
        return {"reduce_scattered_per_step": m.group(1), "allgathered_per_step": m.group(2)}
    m = re.search(r"averaged ([0-9.]+ \S+) per step", t)
    return {"averaged_per_step": m.group(1)} if m else {}
res = {
    "schema": "spillway-bench-data-parallel-1",
    "machine": {"host": platform.node(), "cpus": threads},
    "model": f"GPT {tag}", "ranks": n, "batch_per_rank": b, "batch": n * b,
    "steps": steps, "argv": argv,
    "one_process": {"command": one_cmd, "threads": threads, "steady_s_per_step": s1,
                    "tokens_per_s": tok1, "final_loss": loss1},
    "data_parallel": {"command": dp_cmd, "threads_per_rank": threads // n,
                      "steady_s_per_step": sn, "tokens_per_s": tokn, "final_loss": lossn,
                      "averaged_per_step": avg.group(1) if avg else None,
                      "allreduce_ms_per_step": float(avg.group(2)) if avg else None,
                      "allreduce_share_of_run": float(avg.group(3)) / 100 if avg else None},
    "ratio_tokens_per_s_data_parallel_over_one_process": tokn / tok1,
    "weights": same,
    "peak_rss_bytes_per_rank": rss_dp,
    "zero1": {"command": "mpirun -np N ./dp ... --zero 1", "steady_s_per_step": sz,
              "tokens_per_s": tokz, "final_loss": lossz,
              "adamw_state_rank0": zstate.group(1) if zstate else None,
              "adamw_state_whole": zstate.group(2) if zstate else None,
              "reduce_scattered_per_step": zx.group(1) if zx else None,
              "allgathered_per_step": zx.group(2) if zx else None,
              "exchange_ms_per_step": float(zx.group(3)) if zx else None,
              "exchange_share_of_run": float(zx.group(4)) / 100 if zx else None,
              "peak_rss_bytes_per_rank": rss_zero,
              "weights_vs_unsharded": zsame},
    "ratio_tokens_per_s_zero1_over_unsharded": tokz / tokn,
    "ratio_peak_rss_zero1_over_unsharded": [z / d for z, d in zip(rss_zero, rss_dp)],
    "offload": {"place": place,
                "whole": {"steady_s_per_step": so_w, "tokens_per_s": tok_w,
                          "peak_rss_bytes_per_rank": rss_offw, "per_rank": off_w},
                "zero1": {"steady_s_per_step": so_z, "tokens_per_s": tok_z,
                          "peak_rss_bytes_per_rank": rss_offz, "per_rank": off_z},
                "zero2": {"steady_s_per_step": so_z2, "tokens_per_s": tok_z2,
                          "peak_rss_bytes_per_rank": rss_offz2, "per_rank": off_z2,
                          "exchanged": exchanged("offz2.out"),
                          "overlap_exchanges_auto": auto_choice,
                          "weights_vs_whole": osame2},
                "zero2_overlap_exchanges_on": {"steady_s_per_step": so_z2t, "tokens_per_s": tok_z2t,
                          "exchange_time": ov_z2t},
                "zero2_overlap_exchanges_off": {"steady_s_per_step": so_z2i, "tokens_per_s": tok_z2i,
                          "exchange_time": ov_z2i,
                          "weights_vs_on": open("off2i-same.out").read().strip()},
                "ratio_tokens_per_s_zero2_overlap_on_over_off": tok_z2t / tok_z2i,
                "ratio_tokens_per_s_zero1_over_whole": tok_z / tok_w,
                "ratio_ssd_per_iteration_zero1_over_whole":
                    [z["ssd_per_iteration"] / w["ssd_per_iteration"] for z, w in zip(off_z, off_w)],
                "ratio_tokens_per_s_zero2_over_zero1": tok_z2 / tok_z,
                "ratio_ssd_per_iteration_zero2_over_zero1":
                    [z2["ssd_per_iteration"] / z["ssd_per_iteration"] for z2, z in zip(off_z2, off_z)],
                "ratio_d2h_per_iteration_zero2_over_zero1":
                    [z2["d2h_per_iteration"] / z["d2h_per_iteration"] for z2, z in zip(off_z2, off_z)],
                "weights_vs_whole": osame},
    "offload_bf16_mixed": {"place": place_mixed,
                "whole": {"steady_s_per_step": so_mw, "tokens_per_s": tok_mw,
                          "peak_rss_bytes_per_rank": rss_mixw, "per_rank": mix_w,
                          "exchanged": exchanged("mixw.out")},
                "zero1": {"steady_s_per_step": so_mz, "tokens_per_s": tok_mz,
                          "peak_rss_bytes_per_rank": rss_mixz, "per_rank": mix_z,
                          "exchanged": exchanged("mixz.out")},
                "ratio_tokens_per_s_zero1_over_whole": tok_mz / tok_mw,
                "ratio_ssd_per_iteration_zero1_over_whole":
                    [z["ssd_per_iteration"] / w["ssd_per_iteration"] for z, w in zip(mix_z, mix_w)],
                "weights_vs_whole": msame},
}
def exchange(path):
    """The exchanges' ms per step and share of the run, from the last line."""
    m = re.search(r"in ([0-9.]+) ms per step, ([0-9.]+)% of the step time", open(path).read())
    return (float(m.group(1)), float(m.group(2)) / 100) if m else (None, None)
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
def ring_bytes(path):
    """What the executable says a ring sends per rank per step."""
    m = re.search(r"a ring (?:all-reduce )?sends about ([0-9.]+) (\S+) per rank", open(path).read())
    return float(m.group(1)) * UNITS[m.group(2)] if m else None
def sent(name):
    """Bytes each rank sent per step over the loopback (all the run's / steps / ranks)."""
    return int(open(f"{name}.lo").read()) / steps / n
if gloo == "1":
    sg, tokg, _ = steady("gloo.jsonl")
    sgz, tokgz, _ = steady("gloo-zero.jsonl")
    res["torchrun_style"] = {
        "command": "test/e2e/launch_ranks.py -n N ./dp ... (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; Gloo)",
        "zero0": {"steady_s_per_step": sg, "tokens_per_s": tokg,
                  "exchange_ms_per_step": exchange("gloo.out")[0],
                  "loopback_bytes_per_rank_per_step": sent("gloo"),
                  "ring_bytes_per_rank_per_step": ring_bytes("gloo.out"),
                  "mpi_exchange_ms_per_step": exchange("dp.out")[0],
                  "weights_vs_mpirun": open("gloo-same.out").read().strip()},
        "zero1": {"steady_s_per_step": sgz, "tokens_per_s": tokgz,
                  "exchange_ms_per_step": exchange("gloo-zero.out")[0],
                  "loopback_bytes_per_rank_per_step": sent("gloo-zero"),
                  "ring_bytes_per_rank_per_step": ring_bytes("gloo-zero.out"),
                  "mpi_exchange_ms_per_step": exchange("zero.out")[0],
                  "weights_vs_mpirun": open("gloo-zero-same.out").read().strip()},
        "zero2_overlap_exchanges": {
            "on": {"steady_s_per_step": steady("gloo-z2t.jsonl")[0],
                   "tokens_per_s": steady("gloo-z2t.jsonl")[1],
                   "exchange_time": overlap("gloo-z2t.out")},
            "off": {"steady_s_per_step": steady("gloo-z2i.jsonl")[0],
                    "tokens_per_s": steady("gloo-z2i.jsonl")[1],
                    "exchange_time": overlap("gloo-z2i.out")},
            "ratio_tokens_per_s_on_over_off": steady("gloo-z2t.jsonl")[1] / steady("gloo-z2i.jsonl")[1]},
        "ratio_tokens_per_s_gloo_over_mpi": tokg / tokn,
        "ratio_tokens_per_s_gloo_over_mpi_zero1": tokgz / tokz,
    }
else:
    res["torchrun_style"] = "skipped: the runtime was built without Gloo"
json.dump(res, open(out, "w"), indent=1)
print(f"GPT {tag}, {n * b} rows per step ({n} x {b}), steady step = median of steps 2..{steps}")
print(f"{'run':34} {'s/step':>8} {'tok/s':>9} {'final loss':>11}")
print(f"{'one process, ' + str(threads) + ' threads, M=' + str(n):34} {s1:8.4f} {tok1:9.1f} {loss1:11.6f}")
print(f"{str(n) + ' ranks x ' + str(threads // n) + ' thread(s)':34} {sn:8.4f} {tokn:9.1f} {lossn:11.6f}")
print(f"data parallel / one process: {tokn / tok1:.3f}x tokens/s; all-reduce "
      + (f"{avg.group(2)} ms per step ({float(avg.group(3)):.1f}% of the run), {avg.group(1)} averaged per step"
         if avg else "not reported"))
print(f"weights: {same}")
print()
print(f"ZeRO-1 (--zero 1) against the same {n} ranks with the whole AdamW state on each:")
print(f"{'run':34} {'s/step':>8} {'tok/s':>9} {'peak RSS MB per rank':>24}")
print(f"{str(n) + ' ranks, --zero 0':34} {sn:8.4f} {tokn:9.1f} {' '.join(f'{x / 1e6:.0f}' for x in rss_dp):>24}")
print(f"{str(n) + ' ranks, --zero 1':34} {sz:8.4f} {tokz:9.1f} {' '.join(f'{x / 1e6:.0f}' for x in rss_zero):>24}")
print(f"zero 1 / zero 0: {tokz / tokn:.3f}x tokens/s, peak RSS "
      + ", ".join(f"rank {r} {z / d:.3f}x" for r, (z, d) in enumerate(zip(rss_zero, rss_dp)))
      + (f"; AdamW state {zstate.group(1)} on rank 0 of {zstate.group(2)}" if zstate else "")
      + (f"; {zx.group(1)} reduce-scattered + {zx.group(2)} all-gathered per step in {zx.group(3)} ms" if zx else ""))
print(f"weights: {zsame} (zero 1 against zero 0)")
print()
def plan_table(title, runs, columns):
    """Per rank of each (label, s/step, tok/s, per_rank, rss) run: the
    columns (header, key of per_rank's dicts in MB, width); then the
    sharded runs' ratios against the whole one (runs[k] / runs[0]), and
    with three runs the third's against the second's."""
    print(title)
    print(f"{'plan':30} {'s/step':>8} {'tok/s':>9} {'ssd swap MB':>12} {'ssd MB/iter':>12} "
          + " ".join(f"{h:>{w}}" for h, _, w in columns) + f" {'peak RSS MB':>12}")
    for label, s_, t_, per, rs in runs:
        for r, (p, x) in enumerate(zip(per, rs)):
            print(f"{label + ', rank ' + str(r):30} {s_:8.4f} {t_:9.1f} {p['ssd_bytes'] / 1e6:12.1f} "
                  f"{p['ssd_per_iteration'] / 1e6:12.1f} "
                  + " ".join(f"{p[k] / 1e6:{w}.1f}" for _, k, w in columns) + f" {x / 1e6:12.0f}")
    def ratio(a, b):
        (la, _, ta, pa, _), (lb, _, tb, pb, _) = a, b
        return (f"{la} / {lb}: {ta / tb:.3f}x tokens/s, SSD bytes per iteration "
                + ", ".join(f"rank {r} {x['ssd_per_iteration'] / y['ssd_per_iteration']:.3f}x"
                            for r, (x, y) in enumerate(zip(pa, pb))))
    for k in range(1, len(runs)):
        print(ratio(runs[k], runs[0]))
    if len(runs) == 3:
        print(ratio(runs[2], runs[1]) + ", d2h bytes per iteration "
              + ", ".join(f"rank {r} {x['d2h_per_iteration'] / y['d2h_per_iteration']:.3f}x"
                          for r, (x, y) in enumerate(zip(runs[2][3], runs[1][3]))))
    print("every step as planned: " + str(all(p["as_planned"] for run in runs for p in run[3])))
plan_table(f"Offload plan --place {place}, {n} ranks (each on its own --ssd directory), per rank:",
           ((f"whole state", so_w, tok_w, off_w, rss_offw),
            (f"--zero 1 --ranks {n}", so_z, tok_z, off_z, rss_offz),
            (f"--zero 2 --ranks {n}", so_z2, tok_z2, off_z2, rss_offz2)),
           (("of it optimizer", "optimizer_ssd_per_iteration", 16),
            ("gradients", "gradient_ssd_per_iteration", 10),
            ("d2h MB/iter", "d2h_per_iteration", 12), ("host arena MB", "host_bytes", 14)))
print(f"exchanged per step: zero 1 {exchanged('offz.out')}, zero 2 {exchanged('offz2.out')}")
print(f"--zero 2 --overlap-exchanges auto (the row above): {auto_choice}")
if ov_z2t and ov_z2i:
    print(f"--zero 2 --overlap-exchanges on ({so_z2t:.4f} s/step, {tok_z2t:.1f} tok/s) against off "
          f"({so_z2i:.4f} s/step, {tok_z2i:.1f} tok/s): {tok_z2t / tok_z2i:.3f}x tokens/s; the step in "
          f"exchanges {ov_z2t['step_in_exchanges_ms_per_step']:.1f} ms per step (off: "
          f"{ov_z2i['step_in_exchanges_ms_per_step']:.1f}), the exchange thread's reduce-scatters "
          f"{ov_z2t['overlapped_ms_per_step']:.1f} ms during the backward, the step waiting "
          f"{ov_z2t['waited_ms_per_step']:.1f} ms of them; weights "
          + open("off2i-same.out").read().strip())
print(f"weights: {osame} (zero 1 offload against whole); {osame2} (zero 2 against whole)")
print()
plan_table(f"bf16-mixed offload plan --place {place_mixed}, {n} ranks, per rank:",
           ((f"whole masters and state", so_mw, tok_mw, mix_w, rss_mixw),
            (f"--zero 1 --ranks {n}", so_mz, tok_mz, mix_z, rss_mixz)),
           (("optimizer", "optimizer_ssd_per_iteration", 10), ("masters", "master_ssd_per_iteration", 8)))
xw, xz = exchanged("mixw.out"), exchanged("mixz.out")
print(f"exchanged per step: whole {xw}, zero 1 {xz} (the bf16 working copies all-gathered, the masters never)")
print(f"weights: {msame} (sharded masters against whole)")
print()
if gloo == "1":
    t = res["torchrun_style"]
    print(f"torchrun-style launch (Gloo over TCP) against mpirun (MPI), {n} ranks x {threads // n} thread(s):")
    print(f"{'run':34} {'s/step':>8} {'tok/s':>9} {'exchange ms/step':>17}")
    for label, s_, t_, ex in ((f"mpirun, --zero 0", sn, tokn, t["zero0"]["mpi_exchange_ms_per_step"]),
                              (f"torchrun-style, --zero 0", sg, tokg, t["zero0"]["exchange_ms_per_step"]),
                              (f"mpirun, --zero 1", sz, tokz, t["zero1"]["mpi_exchange_ms_per_step"]),
                              (f"torchrun-style, --zero 1", sgz, tokgz, t["zero1"]["exchange_ms_per_step"])):
        print(f"{label:34} {s_:8.4f} {t_:9.1f} {ex if ex is not None else float('nan'):17.1f}")
    print(f"Gloo / MPI: {tokg / tokn:.3f}x tokens/s (--zero 0), {tokgz / tokz:.3f}x (--zero 1); "
          f"weights: {t['zero0']['weights_vs_mpirun']}, "
          f"{t['zero1']['weights_vs_mpirun']}")
    z2 = t["zero2_overlap_exchanges"]
    print(f"torchrun-style --zero 2 --overlap-exchanges on ({z2['on']['tokens_per_s']:.1f} tok/s) against off "
          f"({z2['off']['tokens_per_s']:.1f} tok/s): {z2['ratio_tokens_per_s_on_over_off']:.3f}x tokens/s; "
          f"the step in exchanges {z2['on']['exchange_time'].get('step_in_exchanges_ms_per_step', float('nan')):.1f} "
          f"ms per step (off: {z2['off']['exchange_time'].get('step_in_exchanges_ms_per_step', float('nan')):.1f})")
    for z in ("zero0", "zero1"):
        r = t[z]["ring_bytes_per_rank_per_step"]
        print(f"Gloo sent per rank per step, --{z[:4]} {z[4]}: {t[z]['loopback_bytes_per_rank_per_step'] / 2**20:.1f} MiB "
              f"measured on the loopback (start-up included), "
              + (f"{r / 2**20:.1f} MiB a ring sends (the executable's line)" if r else "no ring figure"))
else:
    print("torchrun-style launch: skipped (the runtime was built without Gloo)")
print(f"results: {out}")
PY
