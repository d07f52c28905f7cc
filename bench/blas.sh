#!/usr/bin/env bash
# Which BLAS the fast CPU kernels use (docs/runtime.md, "Kernels"): Debian's
# OpenBLAS (pthread build) and BLIS (OpenMP build) timed on the GPT
# benchmark's sgemm shapes, each on 1 thread, on T library threads, and on T
# threads of our own with one library thread each (the runtime's way), next
# to NumPy's sgemm on 1024^3 in the same run.
# usage: bench/blas.sh [--threads T] [--python PY] [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
T=$(nproc); PY=python3; OUT=bench/results
[ -x /work/big/torchenv/bin/python ] && PY=/work/big/torchenv/bin/python
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) T=$2; shift 2 ;;
    --python) PY=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "blas.sh: unknown flag '$1' (see --help)" >&2; exit 2 ;;
  esac
done
A=/usr/lib/x86_64-linux-gnu
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
[ -f $A/openblas-pthread/libopenblas.a ] || { echo "blas.sh: needs libopenblas-dev" >&2; exit 1; }
g++ -O2 -I/usr/include/x86_64-linux-gnu/openblas-pthread bench/blas_sgemm.cpp \
  -o "$W/openblas" $A/openblas-pthread/libopenblas.a -lpthread
if [ -f $A/blis-openmp/libblis.a ]; then
  g++ -O2 -I/usr/include/x86_64-linux-gnu/blis-openmp bench/blas_sgemm.cpp \
    -o "$W/blis" $A/blis-openmp/libblis.a -fopenmp -lpthread
else
  echo "blas.sh: BLIS not installed (apt-get install libblis-dev): its rows are skipped" >&2
fi
mkdir -p "$OUT"
J="$OUT/blas-$(hostname)-$(date -u +%Y%m%dT%H%M%SZ).json"
{
  for lib in openblas blis; do
    [ -x "$W/$lib" ] && OMP_NUM_THREADS=$T "$W/$lib" "$T" "$lib"
  done
  OMP_NUM_THREADS=$T OPENBLAS_NUM_THREADS=$T "$PY" -c '
import json, time, numpy as np
a = np.random.rand(1024, 1024).astype(np.float32); b = np.random.rand(1024, 1024).astype(np.float32)
a @ b; best = 1e9
for _ in range(20):
    t = time.perf_counter(); a @ b; best = min(best, time.perf_counter() - t)
print(json.dumps({"blas": "numpy " + np.__version__, "M": 1024, "N": 1024, "K": 1024,
                  "gflops_library_threads": round(2 * 1024**3 / best / 1e9, 1)}))'
} | tee "$J.lines"
"$PY" - "$J" "$J.lines" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[2])]
json.dump({"bench": "blas", "rows": rows}, open(sys.argv[1], "w"), indent=1)
print("shape            lib       1 thread  lib threads  own threads  (GFLOP/s)")
for r in rows:
    print(f"{r['M']:>4}x{r['N']:>4}x{r['K']:>4}  {r['blas']:<10}{r.get('gflops_1_thread', 0):>8}"
          f"{r.get('gflops_library_threads', 0):>12}{r.get('gflops_own_threads', 0):>12}")
PY
rm -f "$J.lines"
echo "JSON: $J"
