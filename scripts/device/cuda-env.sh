# Sourced by the GPU machine's scripts: puts the directory holding cuBLASLt
# 13 (and libnccl.so.2, below) on LD_LIBRARY_PATH. Spillway's CUDA executables link it dynamically
# (the toolkit ships no static cuBLASLt) with an rpath to the toolkit they
# were built against; this finds it where that image keeps it instead: a
# CUDA toolkit under /usr/local, the dynamic linker's cache, or PyTorch's
# nvidia wheels.
spw_find_cublaslt() {
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda-13*/lib64 \
           /usr/local/cuda-13*/targets/x86_64-linux/lib; do
    [ -e "$d/libcublasLt.so.13" ] && { echo "$d"; return; }
  done
  d=$(ldconfig -p 2>/dev/null | awk '/libcublasLt\.so\.13 /{print $NF; exit}')
  [ -n "$d" ] && { dirname "$d"; return; }
  local sp
  sp=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
  [ -n "$sp" ] && find $sp -path '*nvidia*' -name 'libcublasLt.so.13' 2>/dev/null | head -1 | xargs -r dirname
}
SPW_CUBLASLT_DIR=$(spw_find_cublaslt)
if [ -n "$SPW_CUBLASLT_DIR" ]; then
  export LD_LIBRARY_PATH="$SPW_CUBLASLT_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  echo "warning: libcublasLt.so.13 not found (CUDA toolkit, ldconfig, PyTorch's nvidia wheels); the CUDA executables will not start" >&2
fi

# NCCL (--collectives nccl, runtime/src/dist/nccl.h) is loaded at run time
# as libnccl.so.2: the toolkit's, the linker cache's or PyTorch's nvidia
# wheels' (nvidia/nccl/lib). Too large to carry (~200 MB).
spw_find_nccl() {
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda-13*/lib64 \
           /usr/local/cuda-13*/targets/x86_64-linux/lib; do
    [ -e "$d/libnccl.so.2" ] && { echo "$d"; return; }
  done
  d=$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 /{print $NF; exit}')
  [ -n "$d" ] && { dirname "$d"; return; }
  local sp
  sp=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
  [ -n "$sp" ] && find $sp -path '*nvidia*' -name 'libnccl.so.2' 2>/dev/null | head -1 | xargs -r dirname
}
SPW_NCCL_DIR=$(spw_find_nccl)
if [ -n "$SPW_NCCL_DIR" ]; then
  case ":${LD_LIBRARY_PATH:-}:" in
    *":$SPW_NCCL_DIR:"*) ;;
    *) export LD_LIBRARY_PATH="$SPW_NCCL_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;;
  esac
fi
