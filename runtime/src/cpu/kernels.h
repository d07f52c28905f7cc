//===- kernels.h - what the CPU kernel families share ---------------------===//
//
// The CPU kernels of the C ABI (kernels.def), one file per family like
// runtime/src/cuda: kernels_elementwise.cpp, kernels_gemm.cpp,
// kernels_nn.cpp, kernels_shape.cpp and kernels_attention.cpp. Each file
// defines its entry points with SPW_KERNEL_DEF.
//
// Single-threaded reference kernels. Reductions (sums, softmax denominators,
// layer-norm statistics, matmul inner products) accumulate in double in a
// fixed order, so results are deterministic run to run.
//
// Every kernel checks its operands' dtypes and the output shape the compiler
// allocated against the shape it computes; a mismatch is an error naming the
// op and both shapes.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_CPU_KERNELS_H
#define SPILLWAY_RUNTIME_SRC_CPU_KERNELS_H

#include "context.h"
#include "device.h"
#include "kernel_checks.h"

#include <array>
#include <cstddef>
#include <cstdint>

namespace spw::cpu {

// Calls f(linear_index, offsets) for every index of the row-major iteration
// space `dims`, where offsets[k] = sum_d index[d] * strides[k][d].
template <size_t N, class F>
void for_each_index(int rank, const int64_t *dims,
                    const std::array<const int64_t *, N> &strides, F &&f) {
  std::array<int64_t, N> off{};
  if (rank == 0) {
    f(int64_t(0), off);
    return;
  }
  for (int d = 0; d < rank; ++d)
    if (dims[d] == 0)
      return;
  int64_t idx[kMaxRank] = {};
  const int64_t last = dims[rank - 1];
  std::array<int64_t, N> inner{};
  for (size_t k = 0; k < N; ++k)
    inner[k] = strides[k][rank - 1];
  int64_t lin = 0;
  while (true) {
    std::array<int64_t, N> o = off;
    for (int64_t j = 0; j < last; ++j) {
      f(lin++, o);
      for (size_t k = 0; k < N; ++k)
        o[k] += inner[k];
    }
    int d = rank - 2;
    for (; d >= 0; --d) {
      ++idx[d];
      for (size_t k = 0; k < N; ++k)
        off[k] += strides[k][d];
      if (idx[d] < dims[d])
        break;
      for (size_t k = 0; k < N; ++k)
        off[k] -= strides[k][d] * dims[d];
      idx[d] = 0;
    }
    if (d < 0)
      return;
  }
}

} // namespace spw::cpu

// Each entry point hands the op to the context's device (device.h), which
// runs the CPU kernel in place (the CPU device), on host copies (loopback)
// or its own kernel.
#define SPW_KERNEL_DEF(name)                                                   \
  static void cpu_op_##name(spw_ctx *, spw_tensor *const *,                    \
                            spw_tensor *const *, const int64_t *,              \
                            const double *);                                   \
  extern "C" void spw_op_##name(spw_ctx *ctx, spw_tensor *const *ins,          \
                                spw_tensor *const *outs,                       \
                                const int64_t *iattrs, const double *fattrs) { \
    run_on_device(ctx, Op::name, cpu_op_##name, ins, outs, iattrs, fattrs);   \
  }                                                                            \
  static void cpu_op_##name(spw_ctx *ctx, spw_tensor *const *ins,              \
                            spw_tensor *const *outs, const int64_t *iattrs,    \
                            const double *fattrs)

#endif // SPILLWAY_RUNTIME_SRC_CPU_KERNELS_H
