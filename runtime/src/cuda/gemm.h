//===- gemm.h - row-major GEMMs through cuBLASLt --------------------------===//
//
// The GEMM the CUDA kernels share (kernels_gemm.cu): matmul, gemm and linear
// use it, and so do the attention kernels and the benchmark for their own
// products. Precision follows l.precision (FP32: fp32 products and
// accumulation, never TF32; BF16: bf16 tensor-core products with fp32
// accumulation), storage is fp32 either way.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_CUDA_GEMM_H
#define SPILLWAY_RUNTIME_SRC_CUDA_GEMM_H

#include "cuda/kernels.h"

#include <cstdint>

namespace spw::cuda {

// C = alpha * op(A) op(B) + beta * C, row-major, on l.stream, for `batch`
// matrices. op(A) is M x K: A is [M,K], or [K,M] when transA. op(B) is
// K x N: B is [K,N], or [N,K] when transB. C is [M,N] (read only when
// beta != 0). Matrix i of each operand starts at i * stride elements:
// strideA / strideB 0 broadcasts that operand to every batch; strideC 0
// (with batch > 1) means the packed M * N. Throws spw::Error or CudaError.
void matmul_f32(const Launch &l, const float *A, const float *B, float *C,
                int64_t M, int64_t N, int64_t K, bool transA, bool transB,
                float alpha, float beta, int64_t batch = 1,
                int64_t strideA = 0, int64_t strideB = 0,
                int64_t strideC = 0);

// GEMM plans made so far (in this process) that run with fp32 products
// although l.precision is BF16: the heuristic had no bf16 algorithm for the
// problem (the first one is reported on stderr).
int64_t gemm_fp32_fallbacks();

// spillway-cuda-check's hook: while `skip` is true, BF16 plans are made as
// if the heuristic had no bf16 algorithm, so the fp32 fallback runs.
// Clears the plan cache.
void skip_fast_bf16_for_testing(bool skip);

} // namespace spw::cuda

#endif // SPILLWAY_RUNTIME_SRC_CUDA_GEMM_H
