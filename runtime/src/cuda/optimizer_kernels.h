//===- optimizer_kernels.h - AdamW and FOAM on the GPU ---------------------===//
//
// The CUDA backend's optimizer updates (a multi-tensor fused AdamW and a
// fused FOAM kernel). Each does the CPU runtime's float32
// arithmetic (runtime/src/optimizer.cpp) operation by operation, with every
// multiply and add rounded on its own (no fused multiply-add), so the GPU
// and the CPU backend give the same bits; spillway-cuda-check compares
// them. Plain host API: device pointers in, launches on `stream`.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_CUDA_OPTIMIZER_KERNELS_H
#define SPILLWAY_RUNTIME_SRC_CUDA_OPTIMIZER_KERNELS_H

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

namespace spw::cuda {

/// The step's AdamW scalars, computed on the host exactly as the CPU
/// kernel computes them (double, then cast to float).
/// `scale`: gradient clipping's coefficient, multiplied into each gradient
/// element first when `scaled` (it is not 1).
struct AdamWScalars {
  float decay, w1, b2, w2, bc2_sqrt, eps, neg_step, scale;
  bool decays, scaled;
};
AdamWScalars adamw_scalars(double lr, double beta1, double beta2, double eps,
                           double weight_decay, int64_t step,
                           double grad_scale = 1.0);

/// One tensor of a multi-tensor AdamW update: n elements of the parameter
/// w, its moments m and v, and its gradient g (all device pointers). The
/// moments are float32, or bf16 when `half` (--optimizer-state-dtype bf16:
/// widened as read, rounded to nearest even as stored, and the update uses
/// the stored values, as the CPU kernel does).
struct AdamWTensor {
  float *w;
  void *m, *v;
  const float *g;
  int64_t n;
  bool half;
};

/// Updates every tensor of `ts` with one launch (blocks are dealt out over
/// the tensors by their sizes). `scratch` is a device buffer the launch
/// uses for the tensor table: at least adamw_scratch_bytes(ts.size()), one
/// per stream (a launch on another stream could still be reading it).
/// Without `pinned_table` the host waits for the table's copy; with one
/// (pinned host memory of adamw_scratch_bytes) nothing waits, and the
/// caller may reuse it only once the copy has run (an event after it).
size_t adamw_scratch_bytes(size_t count);
void adamw_multi(const std::vector<AdamWTensor> &ts, const AdamWScalars &s,
                 void *scratch, cudaStream_t stream,
                 void *pinned_table = nullptr);

/// FOAM's step scalars (docs/runtime.md, "FOAM").
struct FoamScalars {
  float b1, w1, b2, w2, inv_block, neg_step, alpha, eps, neg_decay;
  bool decays;
};
FoamScalars foam_scalars(double lr, double beta1, double beta2, double eps,
                         double weight_decay, double alpha, int level,
                         int64_t step);

/// One FOAM update of a [rows, cols] weight w with gradient g and folded
/// moments m, v of [rows, ceil(cols / 2^level)]: one thread per block of
/// 2^level elements of a row, reading its gradient twice (the means, then
/// the update) and its folded state once; no temporaries. `half`: the
/// folded moments are bf16 (as AdamWTensor's).
void foam(float *w, void *m, void *v, bool half, const float *g, int64_t rows,
          int64_t cols, int level, const FoamScalars &s, cudaStream_t stream);

} // namespace spw::cuda

#endif
