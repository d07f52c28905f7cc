//===- optimizer_kernels.cu - AdamW and FOAM on the GPU --------------------===//
//
// The arithmetic is runtime/src/optimizer.cpp's, term by term, with the
// round-to-nearest intrinsics (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn)
// so nvcc cannot contract a multiply and an add into one FMA: the CPU
// kernel (x86-64 without FMA) rounds each one, and so must this one for the
// two backends to agree bit for bit.
//
//===----------------------------------------------------------------------===//

#include "bf16.h"
#include "cuda/cuda_check.h"
#include "cuda/optimizer_kernels.h"

#include <cmath>
#include <cstring>

namespace spw::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kItemsPerThread = 4;
constexpr int64_t kElementsPerBlock = int64_t(kThreads) * kItemsPerThread;

// The table a multi-tensor launch reads: tensor i owns the blocks from
// first_block[i] to first_block[i + 1].
struct TensorEntry {
  AdamWTensor t;
  int64_t first_block;
};

__device__ __forceinline__ float mul(float a, float b) {
  return __fmul_rn(a, b);
}
__device__ __forceinline__ float add(float a, float b) {
  return __fadd_rn(a, b);
}
__device__ __forceinline__ float sub(float a, float b) {
  return __fsub_rn(a, b);
}

// One moment element: float32, or bf16 (`half`) widened; stored rounded to
// nearest even, returning the stored value (optimizer.cpp's loaded/stored).
__device__ __forceinline__ float load_state(const void *p, int64_t i,
                                            bool half) {
  return half ? to_float(static_cast<const bf16 *>(p)[i])
              : static_cast<const float *>(p)[i];
}
__device__ __forceinline__ float store_state(void *p, int64_t i, bool half,
                                             float x) {
  if (!half) {
    static_cast<float *>(p)[i] = x;
    return x;
  }
  const bf16 b = to_bf16(x);
  static_cast<bf16 *>(p)[i] = b;
  return to_float(b);
}

__global__ void adamw_multi_kernel(const TensorEntry *table, int count,
                                   AdamWScalars s) {
  // The tensor this block works on: the last whose first block <= ours.
  const int64_t block = blockIdx.x;
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (table[mid].first_block <= block)
      lo = mid;
    else
      hi = mid - 1;
  }
  const AdamWTensor t = table[lo].t;
  const int64_t base = (block - table[lo].first_block) * kElementsPerBlock;
  for (int k = 0; k < kItemsPerThread; ++k) {
    const int64_t i = base + int64_t(k) * kThreads + threadIdx.x;
    if (i >= t.n)
      return;
    const float g = s.scaled ? mul(t.g[i], s.scale) : t.g[i];
    float w = t.w[i], m = load_state(t.m, i, t.half),
          v = load_state(t.v, i, t.half);
    if (s.decays)
      w = mul(w, s.decay);
    // torch's lerp, both of its forms, as the CPU kernel.
    if (s.w1 < 0.5f)
      m = add(m, mul(s.w1, sub(g, m)));
    else
      m = sub(g, mul(sub(g, m), sub(1.0f, s.w1)));
    v = mul(v, s.b2);
    v = add(v, mul(mul(s.w2, g), g));
    m = store_state(t.m, i, t.half, m);
    v = store_state(t.v, i, t.half, v);
    const float denom = add(__fdiv_rn(__fsqrt_rn(v), s.bc2_sqrt), s.eps);
    w = add(w, __fdiv_rn(mul(s.neg_step, m), denom));
    t.w[i] = w;
  }
}

__global__ void foam_kernel(float *w, void *m, void *v, bool half,
                            const float *g, int64_t rows, int64_t cols,
                            int64_t block, int64_t blocks_per_row,
                            FoamScalars s) {
  const int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= rows * blocks_per_row)
    return;
  const int64_t r = b / blocks_per_row, k = b % blocks_per_row;
  const int64_t lo = k * block;
  const int64_t hi = lo + block < cols ? lo + block : cols;
  const float *gr = g + r * cols;
  float *wr = w + r * cols;
  float sum = 0.0f, sumsq = 0.0f;
  for (int64_t j = lo; j < hi; ++j) {
    sum = add(sum, gr[j]);
    sumsq = add(sumsq, mul(gr[j], gr[j]));
  }
  const float gbar = mul(sum, s.inv_block), qbar = mul(sumsq, s.inv_block);
  const float mk = store_state(
      m, b, half, add(mul(load_state(m, b, half), s.b1), mul(gbar, s.w1)));
  const float vk = store_state(
      v, b, half, add(mul(load_state(v, b, half), s.b2), mul(qbar, s.w2)));
  for (int64_t j = lo; j < hi; ++j) {
    const float res = sub(gr[j], gbar);
    const float mj = add(mk, res);
    const float vj = add(vk, mul(res, res));
    const float upd = __fdiv_rn(mul(s.alpha, mj), add(__fsqrt_rn(vj), s.eps));
    float x = add(wr[j], mul(s.neg_step, upd));
    if (s.decays)
      x = add(x, mul(x, s.neg_decay));
    wr[j] = x;
  }
}

} // namespace

AdamWScalars adamw_scalars(double lr, double beta1, double beta2, double eps,
                           double weight_decay, int64_t step,
                           double grad_scale) {
  const double t = double(step);
  const double bc1 = 1.0 - std::pow(beta1, t);
  const double bc2 = 1.0 - std::pow(beta2, t);
  AdamWScalars s;
  s.decay = float(1.0 - lr * weight_decay);
  s.w1 = float(1.0 - beta1);
  s.b2 = float(beta2);
  s.w2 = float(1.0 - beta2);
  s.bc2_sqrt = float(std::sqrt(bc2));
  s.eps = float(eps);
  s.neg_step = float(-(lr / bc1));
  s.decays = weight_decay != 0.0;
  s.scale = float(grad_scale);
  s.scaled = s.scale != 1.0f;
  return s;
}

size_t adamw_scratch_bytes(size_t count) {
  return count * sizeof(TensorEntry);
}

void adamw_multi(const std::vector<AdamWTensor> &ts, const AdamWScalars &s,
                 void *scratch, cudaStream_t stream, void *pinned_table) {
  std::vector<TensorEntry> table;
  table.reserve(ts.size());
  int64_t blocks = 0;
  for (const AdamWTensor &t : ts) {
    if (t.n <= 0)
      continue;
    table.push_back({t, blocks});
    blocks += (t.n + kElementsPerBlock - 1) / kElementsPerBlock;
  }
  if (table.empty())
    return;
  if (blocks > 0x7fffffff)
    throw CudaError("adamw_multi: " + std::to_string(blocks) +
                    " blocks exceed one launch's grid; update in groups");
  const size_t table_bytes = table.size() * sizeof(TensorEntry);
  if (pinned_table) {
    // Asynchronous: the caller keeps the pinned table until the copy ran.
    std::memcpy(pinned_table, table.data(), table_bytes);
    SPW_CUDA(cudaMemcpyAsync(scratch, pinned_table, table_bytes,
                             cudaMemcpyHostToDevice, stream));
  } else {
    // The host waits for the copy (pageable memory), so `table` may go out
    // of scope.
    SPW_CUDA(cudaMemcpyAsync(scratch, table.data(), table_bytes,
                             cudaMemcpyHostToDevice, stream));
    SPW_CUDA(cudaStreamSynchronize(stream));
  }
  adamw_multi_kernel<<<unsigned(blocks), kThreads, 0, stream>>>(
      static_cast<const TensorEntry *>(scratch), int(table.size()), s);
  SPW_CUDA(cudaGetLastError());
}

FoamScalars foam_scalars(double lr, double beta1, double beta2, double eps,
                         double weight_decay, double alpha, int level,
                         int64_t step) {
  const double t = double(step);
  const double bc1 = 1.0 - std::pow(beta1, t);
  const double bc2 = 1.0 - std::pow(beta2, t);
  FoamScalars s;
  s.b1 = float(beta1);
  s.w1 = float(1.0 - beta1);
  s.b2 = float(beta2);
  s.w2 = float(1.0 - beta2);
  s.inv_block = float(1.0 / double(int64_t(1) << level));
  s.neg_step = float(-(lr * std::sqrt(bc2) / bc1));
  s.alpha = float(alpha);
  s.eps = float(eps);
  s.neg_decay = float(-(lr * weight_decay));
  s.decays = weight_decay > 0.0;
  return s;
}

void foam(float *w, void *m, void *v, bool half, const float *g, int64_t rows,
          int64_t cols, int level, const FoamScalars &s, cudaStream_t stream) {
  if (level < 0 || level > 16)
    throw CudaError("foam: level " + std::to_string(level) +
                    " is outside [0, 16]");
  const int64_t block = int64_t(1) << level;
  const int64_t per_row = (cols + block - 1) / block;
  const int64_t n = rows * per_row;
  if (n == 0)
    return;
  const int64_t grid = (n + kThreads - 1) / kThreads;
  if (grid > 0x7fffffff)
    throw CudaError("foam: " + std::to_string(grid) +
                    " blocks exceed one launch's grid");
  foam_kernel<<<unsigned(grid), kThreads, 0, stream>>>(w, m, v, half, g, rows,
                                                       cols, block, per_row, s);
  SPW_CUDA(cudaGetLastError());
}

} // namespace spw::cuda
