#!/usr/bin/env bash
# Builds spillway-onnx-fuzzer (clang-22, ASan + UBSan + libFuzzer) in
# build-fuzz/ and fuzzes the ONNX importer for FUZZ_SECONDS (default 120),
# starting from a fresh copy of the seed corpus: the importer's test fixtures,
# the examples' models and test/fuzz/seeds/ (make-seeds.py). First replays
# test/fuzz/crashes/, the inputs that crashed it before. Exits non-zero on a crash,
# sanitizer report, hang or out-of-memory; the input that caused it is left in
# build-fuzz/fuzz-artifacts/ and replays with
#   build-fuzz/bin/spillway-onnx-fuzzer FILE
#   build/bin/spillway-translate --import-onnx FILE   (name it .onnx or .onnxtext)
set -euo pipefail
cd "$(dirname "$0")/../.."
export CCACHE_BASEDIR="$PWD"
# Debug info names the build directory; without this every checkout path
# (CI's clones) would miss the cache.
export CCACHE_NOHASHDIR=true
FUZZ_SECONDS=${FUZZ_SECONDS:-120}
CXX_FUZZ=${CXX_FUZZ:-clang++-22}
CC_FUZZ=${CC_FUZZ:-clang-22}
command -v "$CXX_FUZZ" >/dev/null ||
  { echo "run-fuzzer: $CXX_FUZZ not found (scripts/install-deps.sh installs clang-22)" >&2; exit 1; }

if [ ! -f build-fuzz/build.ninja ]; then
  CC=$CC_FUZZ CXX=$CXX_FUZZ cmake -G Ninja -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Release \
    -DSPILLWAY_FUZZ=ON -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
    -DPython3_EXECUTABLE="$(command -v python3)" >/dev/null
fi
ninja -C build-fuzz spillway-onnx-fuzzer

symbolizer=/usr/lib/llvm-22/bin/llvm-symbolizer
[ -x "$symbolizer" ] && export ASAN_SYMBOLIZER_PATH="$symbolizer"
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

# Corpus and the fuzzer's scratch files in one directory, memory-backed when
# /dev/shm is there, removed however the run ends.
tmproot=${TMPDIR:-/tmp}
[ -d /dev/shm ] && [ -w /dev/shm ] && tmproot=/dev/shm
work=$(mktemp -d "$tmproot/spillway-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
corpus=$work/corpus
mkdir -p "$corpus" "$work/tmp"
export TMPDIR=$work/tmp

# Every crash found so far stays fixed: replay test/fuzz/crashes/ first.
shopt -s nullglob
known=(test/fuzz/crashes/*)
if [ "${#known[@]}" -gt 0 ] &&
   ! build-fuzz/bin/spillway-onnx-fuzzer "${known[@]}" >build-fuzz/fuzz-replay.log 2>&1; then
  echo "run-fuzzer: a reproducer in test/fuzz/crashes/ still fails; log: build-fuzz/fuzz-replay.log" >&2
  grep -E 'Running: |runtime error|ERROR: ' build-fuzz/fuzz-replay.log | tail -3 >&2 || true
  exit 1
fi

# Large models (test/parity, ~200-500 KB) make every mutation slow and raise
# -max_len for all inputs; the small fixtures cover the same ops.
while IFS= read -r f; do
  cp "$f" "$corpus/${f//\//_}"
done < <(find test/fuzz/seeds test/Target/ONNX examples -maxdepth 2 -type f \
           \( -name '*.onnx' -o -name '*.onnxtext' \) -size -64k)

artifacts=build-fuzz/fuzz-artifacts
mkdir -p "$artifacts"
log=build-fuzz/fuzz.log
# -timeout: an input that takes this long is a hang (a finding), not slowness.
status=0
# A fixed seed and input count make a commit's run reproducible (CI fuzzes
# exactly what was fuzzed before submitting); FUZZ_SEED/FUZZ_RUNS explore more.
build-fuzz/bin/spillway-onnx-fuzzer "$corpus" \
  -seed="${FUZZ_SEED:-1}" -runs="${FUZZ_RUNS:-60000}" \
  -max_total_time="$FUZZ_SECONDS" -timeout=30 -rss_limit_mb=4096 \
  -dict=test/fuzz/onnxtext.dict -print_final_stats=1 -print_funcs=0 \
  -artifact_prefix="$artifacts/" >"$log" 2>&1 || status=$?

done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
cov=$(sed -n 's/.* cov: \([0-9]*\) ft: \([0-9]*\) corp: \([^ ]*\).*/cov \1, features \2, corpus \3/p' \
  <<<"${done_line:-$(grep -E ' cov: ' "$log" | tail -1)}")
if [ "$status" -ne 0 ]; then
  echo "run-fuzzer: FAILED (exit $status) after ${execs:-?} inputs; log: $log" >&2
  grep -E 'ERROR: (AddressSanitizer|libFuzzer|UndefinedBehaviorSanitizer)|runtime error|^artifact_prefix|Test unit written' "$log" | head -5 >&2 || true
  grep -E '^ +#[0-9]+ ' "$log" | head -15 >&2 || true
  exit "$status"
fi
echo "run-fuzzer: no crash: ${execs} inputs (${rate}/s, seed ${FUZZ_SEED:-1}, at most ${FUZZ_SECONDS}s), ${cov}"
