#!/usr/bin/env bash
# CPU optimizer throughput: the runtime's AdamW kernel (spw::adamw_kernel,
# what the CPU device and an offload plan's CPU optimizer run) in elements
# per second, against the memory bandwidth of its access pattern (read w,
# m, v, g; write w, m, v: 28 bytes per element, measured by a plain loop on
# the same threads: the limit; target >= 0.8 of it) and against PyTorch's
# torch.optim.AdamW on the CPU (foreach=True, the baseline; foreach=False
# and fused=True too), same elements, same threads, default
# hyper-parameters (Spillway's are torch's: lr 1e-3, betas 0.9/0.999,
# eps 1e-8, weight decay 0.01). FOAM (level L) too: its elements/s and the
# bytes it moves per element (fewer: its m and v are folded).
#
# usage: bench/optimizer.sh [--elements N] [--repeat R] [--threads T]
#                           [--foam-level L] [--python PY] [--out DIR] [-h]
#   --elements N   elements per array (default 64M = 64 x 2^20; K, M, G binary)
#   --repeat R     timed steps per row after one warm-up step (default 5; median)
#   --threads T    threads of both (default: nproc)
#   --foam-level L FOAM's fold, blocks of 2^L (default 2)
#   --python PY    the python with torch (default /work/big/torchenv/bin/python
#                  when it exists, else python3); without torch the torch rows
#                  are skipped and the script says so
#   --out DIR      where the JSON goes (default bench/results)
# env: OPTBENCH (default build/bin/spillway-optbench of this repo)
# Progress to stderr; the table last on stdout; every number and command to
# DIR/optimizer-<host>-<UTC time>.json.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ARGV="$*"
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit "${1:-2}"; }
die() { echo "optimizer.sh: error: $*" >&2; exit 1; }
log() { echo "optimizer.sh: $*" >&2; }
N=64M REPEAT=5 THREADS=$(nproc) LEVEL=2 OUTDIR=$ROOT/bench/results
PY=/work/big/torchenv/bin/python
[ -x "$PY" ] || PY=python3
while [ $# -gt 0 ]; do
  case $1 in
    --elements|--repeat|--threads|--foam-level|--python|--out)
      [ $# -ge 2 ] || { echo "optimizer.sh: $1 needs a value" >&2; usage; } ;;
  esac
  case $1 in
    --elements) N=$2; shift ;; --repeat) REPEAT=$2; shift ;; --threads) THREADS=$2; shift ;;
    --foam-level) LEVEL=$2; shift ;; --python) PY=$2; shift ;; --out) OUTDIR=$2; shift ;;
    -h|--help) usage 0 ;;
    *) echo "optimizer.sh: unknown argument '$1'" >&2; usage ;;
  esac
  shift
done
[[ $REPEAT =~ ^[1-9][0-9]*$ ]] || die "--repeat must be a positive integer, not '$REPEAT'"
[[ $THREADS =~ ^[1-9][0-9]*$ ]] || die "--threads must be a positive integer, not '$THREADS'"
OPTBENCH=${OPTBENCH:-$ROOT/build/bin/spillway-optbench}
[ -x "$OPTBENCH" ] || die "no spillway-optbench at $OPTBENCH: build it (scripts/build.sh), or set OPTBENCH"
mkdir -p "$OUTDIR"
OUTJSON=$OUTDIR/optimizer-$(hostname -s 2>/dev/null || echo host)-$(date -u +%Y%m%dT%H%M%SZ).json
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# 1. The runtime's kernels and the bandwidth loop.
CMD=("$OPTBENCH" --elements "$N" --repeat "$REPEAT" --threads "$THREADS" --foam-level "$LEVEL")
log "running: ${CMD[*]}"
"${CMD[@]}" > "$WORK/spillway.json" || die "spillway-optbench failed"
ELEMENTS=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["elements"])' "$WORK/spillway.json")

# 2. torch.optim.AdamW on the CPU, the same elements and threads.
TORCH_CMD=("$PY" - "$ELEMENTS" "$REPEAT" "$THREADS")
if "$PY" -c "import torch" 2>/dev/null; then
  log "running torch.optim.AdamW with $PY (foreach=True, foreach=False, fused=True)"
  OMP_NUM_THREADS=$THREADS "${TORCH_CMD[@]}" > "$WORK/torch.json" <<'PY' || die "the torch run failed"
import json, statistics, sys, time
import torch
n, repeat, threads = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
rows = []
for name, kw in (("foreach=True", {"foreach": True}), ("foreach=False", {"foreach": False}),
                 ("fused=True", {"fused": True})):
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.empty(n).uniform_(0.1, 0.11))  # one flat parameter
    p.grad = torch.empty(n).uniform_(-0.01, 0.01)
    try:
        opt = torch.optim.AdamW([p], **kw)  # defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, wd 0.01
        opt.step()  # warm-up: creates exp_avg and exp_avg_sq (first touch)
    except (RuntimeError, TypeError, ValueError) as e:
        rows.append({"variant": name, "error": str(e).splitlines()[0]})
        continue
    s = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        opt.step()
        s.append(time.perf_counter() - t0)
    med = statistics.median(s)
    rows.append({"variant": name, "seconds": s, "median_s": med, "elements_per_s": n / med,
                 "gbps_at_28_bytes": 28 * n / med / 1e9})
    del opt, p
print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "elements": n,
                  "rows": rows}))
PY
  TORCH_OK=1
else
  log "torch is not importable by $PY: the torch rows are skipped (pass --python PY, a python with torch)"
  echo '{"skipped": "torch is not importable by '"$PY"' (pass --python PY)"}' > "$WORK/torch.json"
  TORCH_OK=0
fi

# 3. Table and JSON.
python3 - "$WORK/spillway.json" "$WORK/torch.json" "$OUTJSON" "bench/optimizer.sh $ARGV" \
  "${CMD[*]}" "OMP_NUM_THREADS=$THREADS ${TORCH_CMD[*]} <<torch script in bench/optimizer.sh>>" "$TORCH_OK" <<'PY'
import json, os, platform, subprocess, sys
sp_path, torch_path, out, command, sp_cmd, torch_cmd, torch_ok = sys.argv[1:]
sp, th = json.load(open(sp_path)), json.load(open(torch_path))
def lscpu(key):
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.split(":")[0].strip() == key:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None
rev = subprocess.run(["git", "-C", os.path.dirname(out), "rev-parse", "--short", "HEAD"],
                     capture_output=True, text=True).stdout.strip() or None
machine = {"host": platform.node(), "cpu_model": lscpu("Model name"), "cpus": os.cpu_count(),
           "cores_per_socket": lscpu("Core(s) per socket"), "threads_per_core": lscpu("Thread(s) per core"),
           "loadavg": open("/proc/loadavg").read().split()[:3]}
bw, ad, fo = sp.get("bandwidth"), sp.get("adamw"), sp.get("foam")
summary = {"schema": "spillway-optimizer-bench-1", "command": command, "source_tree": rev,
           "commands": {"spillway": sp_cmd, "torch": torch_cmd if torch_ok == "1" else None},
           "machine": machine, "spillway": sp, "torch": th}
base = None
if torch_ok == "1":
    base = next((r for r in th["rows"] if r["variant"] == "foreach=True" and "elements_per_s" in r), None)
if ad and base:
    summary["adamw_over_torch_foreach"] = ad["elements_per_s"] / base["elements_per_s"]
if ad and bw:
    summary["adamw_fraction_of_bandwidth"] = ad["elements_per_s"] / bw["elements_per_s"]
with open(out, "w") as f:
    json.dump(summary, f, indent=1)
    f.write("\n")
n = sp["elements"]
print(f"{n} elements ({n * 4 / 2**20:.0f} MiB per array), {sp['threads']} thread(s) "
      f"({sp['pool']}); {machine['cpu_model']}; median of {sp['repeat']}")
print(f"{'what':34} {'elements/s':>12} {'GB/s':>8} {'of limit':>9} {'vs torch':>9}")
def row(name, eps, gbps, lim=None, vs=None):
    print(f"{name:34} {eps:12.4g} {gbps:8.2f} " + (f"{lim:9.3f}" if lim is not None else f"{'-':>9}")
          + " " + (f"{vs:8.2f}x" if vs is not None else f"{'-':>9}"))
if bw:
    row("memory bandwidth loop (28 B/el)", bw["elements_per_s"], bw["gbps"], 1.0)
if ad:
    row("spillway adamw_kernel", ad["elements_per_s"], ad["gbps_at_28_bytes"],
        ad["elements_per_s"] / bw["elements_per_s"] if bw else None,
        ad["elements_per_s"] / base["elements_per_s"] if base else None)
if fo:
    row(f"spillway foam_kernel L={fo['level']} ({fo['bytes_per_element']:g} B/el)", fo["elements_per_s"], fo["gbps"],
        fo["gbps"] / bw["gbps"] if bw else None,
        fo["elements_per_s"] / base["elements_per_s"] if base else None)
if torch_ok == "1":
    for r in th["rows"]:
        if "error" in r:
            print(f"torch AdamW {r['variant']:22} refused: {r['error']}")
        else:
            row(f"torch {th['torch'].split('+')[0]} AdamW {r['variant']}", r["elements_per_s"], r["gbps_at_28_bytes"],
                r["elements_per_s"] / bw["elements_per_s"] if bw else None)
else:
    print(f"torch rows skipped: {th['skipped']}")
if "adamw_fraction_of_bandwidth" in summary:
    f = summary["adamw_fraction_of_bandwidth"]
    print(f"adamw: {f:.3f} of the memory bandwidth limit (target >= 0.8): {'met' if f >= 0.8 else 'BELOW'}")
if "adamw_over_torch_foreach" in summary:
    print(f"adamw: {summary['adamw_over_torch_foreach']:.2f}x torch.optim.AdamW(foreach=True)")
if torch_ok == "1" and th["threads"] != sp["threads"]:
    print(f"NOTE: torch ran {th['threads']} threads, the runtime's kernels {sp['threads']} ({sp['pool']}): "
          f"the ratios are not at equal threads")
print(f"GB/s of FOAM at its own bytes per element; 'of limit' = GB/s / the loop's GB/s. JSON: {out}")
PY
