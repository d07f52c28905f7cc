//===- blas.h - the fast CPU kernels' GEMM --------------------------------===//
//
// One single-precision GEMM through the BLAS the runtime links (OpenBLAS,
// docs/runtime.md "Kernels" says why), cut across the kernel threads
// (parallel.h): the rows of C when it has at least as many rows as
// columns, else its columns, each chunk one single-threaded BLAS call. The
// BLAS's own threads stay at one, so the runtime has one pool and a
// chunk's bits depend only on its operands and the thread count.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_CPU_BLAS_H
#define SPILLWAY_RUNTIME_SRC_CPU_BLAS_H

#include <cstdint>

namespace spw::cpu {

// A row-major matrix operand: op(X) = X (trans false: [rows, cols] with
// leading dimension ld) or X^T (trans true: X stored [cols, rows]).
struct GemmOperand {
  const float *p;
  bool trans;
  int64_t ld;
};

// C[M,N] (row-major, leading dimension ldc) = alpha * op(A)[M,K] op(B)[K,N]
// + beta * C. beta 0 does not read C.
void sgemm(int64_t M, int64_t N, int64_t K, float alpha, GemmOperand A,
           GemmOperand B, float beta, float *C, int64_t ldc);

// The linked BLAS and its version, e.g. "OpenBLAS 0.3.21".
const char *blas_name();

} // namespace spw::cpu

#endif
