# Sourced by the GPU machine's scripts: puts the directories holding
# cuBLASLt 13 and NCCL 2 on LD_LIBRARY_PATH. Spillway's CUDA executables
# link cuBLASLt dynamically (the toolkit ships no static one) with an rpath
# to the toolkit they were built against, and load libnccl.so.2 at run time
# (--collectives nccl, runtime/src/dist/nccl.h; ~200 MB, too large to
# carry); this finds each where that image keeps it: a CUDA toolkit under
# /usr/local, the dynamic linker's cache, or PyTorch's nvidia wheels.

# The directory holding library $1 (a file name), or nothing.
spw_find_lib() {
  local lib=$1 d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda-13*/lib64 \
           /usr/local/cuda-13*/targets/x86_64-linux/lib; do
    [ -e "$d/$lib" ] && { echo "$d"; return; }
  done
  d=$(ldconfig -p 2>/dev/null | awk -v lib="$lib" '$1 == lib {print $NF; exit}')
  [ -n "$d" ] && { dirname "$d"; return; }
  local sp
  sp=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
  [ -n "$sp" ] && find $sp -path '*nvidia*' -name "$lib" 2>/dev/null | head -1 | xargs -r dirname
}
# Prepends directory $1 to LD_LIBRARY_PATH unless it is there.
spw_add_lib_dir() {
  case ":${LD_LIBRARY_PATH:-}:" in
    *":$1:"*) ;;
    *) export LD_LIBRARY_PATH="$1${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;;
  esac
}

SPW_CUBLASLT_DIR=$(spw_find_lib libcublasLt.so.13)
if [ -n "$SPW_CUBLASLT_DIR" ]; then
  spw_add_lib_dir "$SPW_CUBLASLT_DIR"
else
  echo "warning: libcublasLt.so.13 not found (CUDA toolkit, ldconfig, PyTorch's nvidia wheels); the CUDA executables will not start" >&2
fi
# None: the NCCL checks are skipped, saying so (cuda-check.sh).
SPW_NCCL_DIR=$(spw_find_lib libnccl.so.2)
[ -n "$SPW_NCCL_DIR" ] && spw_add_lib_dir "$SPW_NCCL_DIR"
true
