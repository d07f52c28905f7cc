#!/usr/bin/env bash
# Builds the fuzz targets (clang-22, ASan + UBSan + libFuzzer) in build-fuzz/
# and fuzzes, each from a fresh copy of its seed corpus, after replaying the
# inputs that crashed it before:
#   onnx       the ONNX importer, FUZZ_SECONDS (default 120); seeds: the
#              importer's test fixtures, the examples' models and
#              test/fuzz/seeds/ (make-seeds.py); reproducers: test/fuzz/crashes/
#   npy, safetensors, weights, checkpoint-manifest
#              the training executable's readers (tools/spillway-runtime-
#              fuzzers), RUNTIME_FUZZ_SECONDS each (default 30); seeds and
#              reproducers: test/fuzz/runtime/NAME/{seeds,crashes}/
# FUZZ_TARGETS picks some (default: all five). Exits non-zero on a crash,
# sanitizer report, hang or out-of-memory; the input that caused it is left
# in build-fuzz/fuzz-artifacts/ (the runtime ones under NAME/) and replays
# with
#   build-fuzz/bin/spillway-onnx-fuzzer FILE    (or spillway-NAME-fuzzer)
#   build/bin/spillway-translate --import-onnx FILE   (name it .onnx or .onnxtext)
# The runtime fuzzers' headers say how their inputs replay through a model.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CCACHE_BASEDIR="$PWD"
# Debug info names the build directory; without this every checkout path
# (CI's clones) would miss the cache.
export CCACHE_NOHASHDIR=true
FUZZ_SECONDS=${FUZZ_SECONDS:-120}
RUNTIME_FUZZ_SECONDS=${RUNTIME_FUZZ_SECONDS:-30}
FUZZ_TARGETS=${FUZZ_TARGETS:-onnx npy safetensors weights checkpoint-manifest}
CXX_FUZZ=${CXX_FUZZ:-clang++-22}
CC_FUZZ=${CC_FUZZ:-clang-22}
command -v "$CXX_FUZZ" >/dev/null ||
  { echo "run-fuzzer: $CXX_FUZZ not found (scripts/install-deps.sh installs clang-22)" >&2; exit 1; }

if [ ! -f build-fuzz/build.ninja ]; then
  CC=$CC_FUZZ CXX=$CXX_FUZZ cmake -G Ninja -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Release \
    -DSPILLWAY_FUZZ=ON -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
    -DPython3_EXECUTABLE="$(command -v python3)" >/dev/null
fi
targets=()
for t in $FUZZ_TARGETS; do targets+=("spillway-$t-fuzzer"); done
ninja -C build-fuzz "${targets[@]}"

symbolizer=/usr/lib/llvm-22/bin/llvm-symbolizer
[ -x "$symbolizer" ] && export ASAN_SYMBOLIZER_PATH="$symbolizer"
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

# Corpus and the fuzzer's scratch files in one directory, memory-backed when
# /dev/shm is there, removed however the run ends.
tmproot=${TMPDIR:-/tmp}
[ -d /dev/shm ] && [ -w /dev/shm ] && tmproot=/dev/shm
work=$(mktemp -d "$tmproot/spillway-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/tmp"
export TMPDIR=$work/tmp

fuzz_onnx() {
  local corpus=$work/corpus-onnx
  mkdir -p "$corpus"
  # Every crash found so far stays fixed: replay test/fuzz/crashes/ first.
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
  local status=0
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
}

# fuzz_runtime NAME: a runtime reader's target, seeds and reproducers under
# test/fuzz/runtime/NAME/.
fuzz_runtime() {
  local name=$1 bin=build-fuzz/bin/spillway-$1-fuzzer
  local src=test/fuzz/runtime/$1 corpus=$work/corpus-$1
  local artifacts=build-fuzz/fuzz-artifacts/$1 log=build-fuzz/fuzz-$1.log
  mkdir -p "$corpus" "$artifacts"
  local known=("$src"/crashes/*)
  if [ "${#known[@]}" -gt 0 ] &&
     ! "$bin" -close_fd_mask=3 "${known[@]}" >"build-fuzz/fuzz-$name-replay.log" 2>&1; then
    echo "run-fuzzer: $name: a reproducer in $src/crashes/ still fails; log: build-fuzz/fuzz-$name-replay.log" >&2
    grep -E 'Running: |runtime error|ERROR: ' "build-fuzz/fuzz-$name-replay.log" | tail -3 >&2 || true
    return 1
  fi
  cp "$src"/seeds/* "$corpus"/
  local dict=() status=0
  [ -f "$src/dict" ] && dict=(-dict="$src/dict")
  # The driver prints a banner or an error for every input: -close_fd_mask
  # keeps the log to libFuzzer's lines (reports still reach it).
  # As for the importer, a fixed seed and input count (sized to take about
  # RUNTIME_FUZZ_SECONDS on a CI machine; the time limit is the backstop).
  local runs
  case $name in
    npy) runs=200000 ;;
    safetensors) runs=150000 ;;
    weights) runs=60000 ;;
    *) runs=40000 ;;
  esac
  "$bin" "$corpus" -seed="${FUZZ_SEED:-1}" -runs="${RUNTIME_FUZZ_RUNS:-$runs}" \
    -max_total_time="$RUNTIME_FUZZ_SECONDS" -timeout=30 -rss_limit_mb=4096 \
    -max_len=65536 -close_fd_mask=3 "${dict[@]}" -print_final_stats=1 \
    -print_funcs=0 -artifact_prefix="$artifacts/" >"$log" 2>&1 || status=$?
  local execs cov
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  cov=$(grep -E ' cov: ' "$log" | tail -1 |
        sed -n 's/.* cov: \([0-9]*\) ft: \([0-9]*\) corp: \([^ ]*\).*/cov \1, features \2, corpus \3/p')
  if [ "$status" -ne 0 ]; then
    echo "run-fuzzer: $name: FAILED (exit $status) after ${execs:-?} inputs; log: $log" >&2
    grep -E 'ERROR: (AddressSanitizer|libFuzzer|UndefinedBehaviorSanitizer)|runtime error|^artifact_prefix|Test unit written' "$log" | head -5 >&2 || true
    grep -E '^ +#[0-9]+ ' "$log" | head -15 >&2 || true
    return "$status"
  fi
  echo "run-fuzzer: $name: no crash: ${execs} inputs (seed ${FUZZ_SEED:-1}, at most ${RUNTIME_FUZZ_SECONDS}s), ${cov}"
}

shopt -s nullglob
for t in $FUZZ_TARGETS; do
  if [ "$t" = onnx ]; then
    fuzz_onnx
  else
    fuzz_runtime "$t"
  fi
done
