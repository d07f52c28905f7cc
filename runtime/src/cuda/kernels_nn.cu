//===- kernels_nn.cu - softmax, norms and cross entropy on the GPU --------===//
//
// Row-wise ops: rows of up to kWarpRowMax elements go one warp per row (8
// rows per block), longer rows one block per row; reductions are warp
// shuffles then one shared-memory step, in a fixed order, so results are
// deterministic. Rows are read with float4 loads where the row length and
// every pointer allow it. Softmax keeps an online (max, sum) pair so its
// statistics take one pass; layer norm takes two passes (mean, then the
// squared deviations) like the CPU, not the cancellation-prone E[x^2] -
// E[x]^2.
//
// The parameter gradients of the norms (dscale, dbias) sum over rows: the
// row kernel stores each row's statistics, a column kernel sums chunks of
// rows into per-chunk partials in scratch, and a last kernel adds the
// partials in chunk order (deterministic, no atomics).
//
// Cross entropy: one kernel computes each row's loss, a single block sums
// them in a fixed order. Labels are on the device, so an out-of-range label
// (which the CPU rejects with an error) cannot fail the call here: its row
// yields NaN (loss and gradient) instead of reading out of bounds.
//
//===----------------------------------------------------------------------===//

#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "kernel_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace spw::cuda {
namespace {

using namespace spw::checks;

constexpr int64_t kWarpRowMax = 1024; // longer rows get a block each
constexpr int kWarpsPerBlock = 8;     // warp-per-row blocks
constexpr int kThreads = 256;         // element-wise and column kernels
constexpr int kFinalThreads = 1024;   // single-block reductions
constexpr int kRowBlockMax = 1024;    // block-per-row kernels' largest block
// Kernels launched with more than 256 threads carry __launch_bounds__ of
// their largest block, so the compiler keeps their registers within what it
// may use (64 per thread at 1024 threads; past it the launch fails with
// cudaErrorLaunchOutOfResources). A row kernel's warp-per-row form runs 256.
#define SPW_ROW_BOUNDS __launch_bounds__(W ? 32 * kWarpsPerBlock : kRowBlockMax)

// ---- reductions -------------------------------------------------------------

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// A softmax denominator in flight: sum of exp(x - m) over the values seen.
struct MaxSum {
  float m, s;
};

// Special values end as the CPU's two passes end them: a NaN makes s NaN
// (m never becomes NaN: fmaxf and `v > m` skip it, s carries it), a +inf
// makes s NaN (the CPU's exp(inf - inf)), and a row of -inf keeps s = 0
// (the CPU's 0/0 follows when the caller divides).
__device__ __forceinline__ MaxSum ms_merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  // An empty side (s = 0, m = -inf) adds nothing; exp(-inf - -inf) would be
  // NaN. A side whose s is NaN stays NaN, whatever its m.
  const float fa = a.s == 0.0f ? 0.0f : a.s * expf(a.m - m);
  const float fb = b.s == 0.0f ? 0.0f : b.s * expf(b.m - m);
  return {m, fa + fb};
}

__device__ __forceinline__ void ms_add(MaxSum &a, float v) {
  if (v > a.m) {
    // exp(v - v) is 1, or NaN for v = +inf.
    a.s = (a.s == 0.0f ? 0.0f : a.s * expf(a.m - v)) +
          (v == INFINITY ? NAN : 1.0f);
    a.m = v;
  } else if (v != -INFINITY) { // a masked -inf adds nothing; a NaN adds NaN
    a.s += expf(v - a.m);
  }
}

__device__ __forceinline__ MaxSum warp_max_sum(MaxSum a) {
  for (int o = 16; o > 0; o >>= 1) {
    MaxSum b{__shfl_xor_sync(0xffffffffu, a.m, o),
             __shfl_xor_sync(0xffffffffu, a.s, o)};
    a = ms_merge(a, b);
  }
  return a;
}

// The threads that share a row: a warp (W) or the whole block. `first` and
// `step` walk the rows this group owns.
struct Group {
  int tid, size;
  int64_t first, step;
};

template <bool W> __device__ __forceinline__ Group row_group() {
  if constexpr (W) {
    const int warps = int(blockDim.x) / 32;
    return {int(threadIdx.x) & 31, 32,
            int64_t(blockIdx.x) * warps + int(threadIdx.x) / 32,
            int64_t(gridDim.x) * warps};
  } else {
    return {int(threadIdx.x), int(blockDim.x), int64_t(blockIdx.x),
            int64_t(gridDim.x)};
  }
}

// Sums over the group; every thread gets the result. Block groups need
// blockDim.x a multiple of 32 and every thread of the block calling.
template <bool W> __device__ __forceinline__ float group_sum(float v) {
  v = warp_sum(v);
  if constexpr (W) {
    return v;
  } else {
    __shared__ float sh[32];
    __syncthreads(); // the previous reduction's readers are done with sh
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0)
      sh[warp] = v;
    __syncthreads();
    return warp_sum(lane < int(blockDim.x >> 5) ? sh[lane] : 0.0f);
  }
}

// Two sums at once (one barrier pair instead of two).
template <bool W> __device__ __forceinline__ void group_sum2(float &a,
                                                             float &b) {
  a = warp_sum(a);
  b = warp_sum(b);
  if constexpr (!W) {
    __shared__ float sa[32], sb[32];
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
      sa[warp] = a;
      sb[warp] = b;
    }
    __syncthreads();
    const bool in = lane < int(blockDim.x >> 5);
    a = warp_sum(in ? sa[lane] : 0.0f);
    b = warp_sum(in ? sb[lane] : 0.0f);
  }
}

template <bool W> __device__ __forceinline__ MaxSum group_max_sum(MaxSum a) {
  a = warp_max_sum(a);
  if constexpr (W) {
    return a;
  } else {
    __shared__ float sm[32], ss[32];
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
      sm[warp] = a.m;
      ss[warp] = a.s;
    }
    __syncthreads();
    MaxSum b{-INFINITY, 0.0f};
    if (lane < int(blockDim.x >> 5))
      b = MaxSum{sm[lane], ss[lane]};
    return warp_max_sum(b);
  }
}

// ---- vector access ----------------------------------------------------------

// V consecutive floats; element i of a row of V-vectors is floats
// [i * V, i * V + V).
template <int V> struct Vec {
  float v[V];
};

template <int V>
__device__ __forceinline__ Vec<V> ld(const float *__restrict__ p, int64_t i) {
  Vec<V> r;
  if constexpr (V == 4) {
    const float4 t = reinterpret_cast<const float4 *>(p)[i];
    r.v[0] = t.x, r.v[1] = t.y, r.v[2] = t.z, r.v[3] = t.w;
  } else {
    r.v[0] = p[i];
  }
  return r;
}

template <int V>
__device__ __forceinline__ void st(float *__restrict__ p, int64_t i,
                                   const Vec<V> &r) {
  if constexpr (V == 4)
    reinterpret_cast<float4 *>(p)[i] =
        make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
  else
    p[i] = r.v[0];
}

// ---- softmax ----------------------------------------------------------------

// Rows along the last axis (inner == 1).
template <bool W, int V>
__global__ void SPW_ROW_BOUNDS softmax_rows(const float *__restrict__ x,
                                            float *__restrict__ y, int64_t rows,
                                            int64_t n) {
  const Group g = row_group<W>();
  const int64_t nv = n / V;
  for (int64_t r = g.first; r < rows; r += g.step) {
    const float *xr = x + r * n;
    float *yr = y + r * n;
    MaxSum a{-INFINITY, 0.0f};
    for (int64_t i = g.tid; i < nv; i += g.size) {
      const Vec<V> v = ld<V>(xr, i);
#pragma unroll
      for (int k = 0; k < V; ++k)
        ms_add(a, v.v[k]);
    }
    a = group_max_sum<W>(a);
    const float inv = 1.0f / a.s;
    for (int64_t i = g.tid; i < nv; i += g.size) {
      Vec<V> v = ld<V>(xr, i);
#pragma unroll
      for (int k = 0; k < V; ++k)
        v.v[k] = expf(v.v[k] - a.m) * inv;
      st<V>(yr, i, v);
    }
  }
}

// dx = y (dy - sum(dy y)) along the last axis.
template <bool W, int V>
__global__ void SPW_ROW_BOUNDS softmax_grad_rows(const float *__restrict__ y,
                                                 const float *__restrict__ dy,
                                                 float *__restrict__ dx,
                                                 int64_t rows, int64_t n) {
  const Group g = row_group<W>();
  const int64_t nv = n / V;
  for (int64_t r = g.first; r < rows; r += g.step) {
    const float *yr = y + r * n, *dr = dy + r * n;
    float *outr = dx + r * n;
    float dot = 0.0f;
    for (int64_t i = g.tid; i < nv; i += g.size) {
      const Vec<V> a = ld<V>(yr, i), b = ld<V>(dr, i);
#pragma unroll
      for (int k = 0; k < V; ++k)
        dot += a.v[k] * b.v[k];
    }
    dot = group_sum<W>(dot);
    for (int64_t i = g.tid; i < nv; i += g.size) {
      Vec<V> a = ld<V>(yr, i);
      const Vec<V> b = ld<V>(dr, i);
#pragma unroll
      for (int k = 0; k < V; ++k)
        a.v[k] = a.v[k] * (b.v[k] - dot);
      st<V>(outr, i, a);
    }
  }
}

// An axis with inner > 1: one thread per (outer, inner) column, consecutive
// threads on consecutive inner indices (coalesced).
__global__ void softmax_cols(const float *__restrict__ x,
                             float *__restrict__ y, int64_t outer, int64_t n,
                             int64_t inner) {
  const int64_t total = outer * inner;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = t / inner, in = t - o * inner;
    const float *xc = x + o * n * inner + in;
    float *yc = y + o * n * inner + in;
    MaxSum a{-INFINITY, 0.0f};
    for (int64_t k = 0; k < n; ++k)
      ms_add(a, xc[k * inner]);
    const float inv = 1.0f / a.s;
    for (int64_t k = 0; k < n; ++k)
      yc[k * inner] = expf(xc[k * inner] - a.m) * inv;
  }
}

__global__ void softmax_grad_cols(const float *__restrict__ y,
                                  const float *__restrict__ dy,
                                  float *__restrict__ dx, int64_t outer,
                                  int64_t n, int64_t inner) {
  const int64_t total = outer * inner;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = t / inner, in = t - o * inner;
    const int64_t base = o * n * inner + in;
    float dot = 0.0f;
    for (int64_t k = 0; k < n; ++k)
      dot += y[base + k * inner] * dy[base + k * inner];
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = base + k * inner;
      dx[i] = y[i] * (dy[i] - dot);
    }
  }
}

// ---- layer norm / rms norm --------------------------------------------------

template <bool W, int V>
__global__ void SPW_ROW_BOUNDS layer_norm_rows(const float *__restrict__ x,
                                               const float *__restrict__ scale,
                                               const float *__restrict__ bias,
                                               float *__restrict__ y,
                                               int64_t rows, int64_t n,
                                               float eps) {
  const Group g = row_group<W>();
  const int64_t nv = n / V;
  for (int64_t r = g.first; r < rows; r += g.step) {
    const float *xr = x + r * n;
    float *yr = y + r * n;
    float s = 0.0f;
    for (int64_t i = g.tid; i < nv; i += g.size) {
      const Vec<V> a = ld<V>(xr, i);
#pragma unroll
      for (int k = 0; k < V; ++k)
        s += a.v[k];
    }
    const float mean = group_sum<W>(s) / float(n);
    float q = 0.0f;
    for (int64_t i = g.tid; i < nv; i += g.size) {
      const Vec<V> a = ld<V>(xr, i);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float d = a.v[k] - mean;
        q += d * d;
      }
    }
    const float var = group_sum<W>(q) / float(n);
    const float rstd = 1.0f / sqrtf(var + eps);
    for (int64_t i = g.tid; i < nv; i += g.size) {
      Vec<V> a = ld<V>(xr, i);
      const Vec<V> sc = ld<V>(scale, i);
      if (bias) {
        const Vec<V> b = ld<V>(bias, i);
#pragma unroll
        for (int k = 0; k < V; ++k)
          a.v[k] = (a.v[k] - mean) * rstd * sc.v[k] + b.v[k];
      } else {
#pragma unroll
        for (int k = 0; k < V; ++k)
          a.v[k] = (a.v[k] - mean) * rstd * sc.v[k];
      }
      st<V>(yr, i, a);
    }
  }
}

// dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy scale; stores each
// row's (mean, rstd) for the parameter gradients when `stats` is set.
template <bool W, int V>
__global__ void SPW_ROW_BOUNDS layer_norm_grad_rows(
    const float *__restrict__ x, const float *__restrict__ scale,
    const float *__restrict__ dy, float *__restrict__ dx,
    float2 *__restrict__ stats, int64_t rows, int64_t n, float eps) {
  const Group g = row_group<W>();
  const int64_t nv = n / V;
  for (int64_t r = g.first; r < rows; r += g.step) {
    const float *xr = x + r * n, *dr = dy + r * n;
    float s = 0.0f;
    for (int64_t i = g.tid; i < nv; i += g.size) {
      const Vec<V> a = ld<V>(xr, i);
#pragma unroll
      for (int k = 0; k < V; ++k)
        s += a.v[k];
    }
    const float mean = group_sum<W>(s) / float(n);
    float q = 0.0f;
    for (int64_t i = g.tid; i < nv; i += g.size) {
      const Vec<V> a = ld<V>(xr, i);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float d = a.v[k] - mean;
        q += d * d;
      }
    }
    const float var = group_sum<W>(q) / float(n);
    const float rstd = 1.0f / sqrtf(var + eps);
    if (stats && g.tid == 0)
      stats[r] = make_float2(mean, rstd);
    if (!dx)
      continue;
    float sg = 0.0f, sgx = 0.0f;
    for (int64_t i = g.tid; i < nv; i += g.size) {
      const Vec<V> a = ld<V>(xr, i), d = ld<V>(dr, i), sc = ld<V>(scale, i);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float gk = d.v[k] * sc.v[k];
        sg += gk;
        sgx += gk * (a.v[k] - mean) * rstd;
      }
    }
    group_sum2<W>(sg, sgx);
    const float mean_g = sg / float(n), mean_gx = sgx / float(n);
    float *outr = dx + r * n;
    for (int64_t i = g.tid; i < nv; i += g.size) {
      Vec<V> a = ld<V>(xr, i);
      const Vec<V> d = ld<V>(dr, i), sc = ld<V>(scale, i);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float xhat = (a.v[k] - mean) * rstd;
        a.v[k] = rstd * (d.v[k] * sc.v[k] - mean_g - xhat * mean_gx);
      }
      st<V>(outr, i, a);
    }
  }
}

template <bool W, int V>
__global__ void SPW_ROW_BOUNDS rms_norm_rows(const float *__restrict__ x,
                                             const float *__restrict__ scale,
                                             float *__restrict__ y,
                                             int64_t rows, int64_t n,
                                             float eps) {
  const Group g = row_group<W>();
  const int64_t nv = n / V;
  for (int64_t r = g.first; r < rows; r += g.step) {
    const float *xr = x + r * n;
    float *yr = y + r * n;
    float ss = 0.0f;
    for (int64_t i = g.tid; i < nv; i += g.size) {
      const Vec<V> a = ld<V>(xr, i);
#pragma unroll
      for (int k = 0; k < V; ++k)
        ss += a.v[k] * a.v[k];
    }
    const float rr = 1.0f / sqrtf(group_sum<W>(ss) / float(n) + eps);
    for (int64_t i = g.tid; i < nv; i += g.size) {
      Vec<V> a = ld<V>(xr, i);
      const Vec<V> sc = ld<V>(scale, i);
#pragma unroll
      for (int k = 0; k < V; ++k)
        a.v[k] = a.v[k] * rr * sc.v[k];
      st<V>(yr, i, a);
    }
  }
}

// dx_j = r s_j dy_j - x_j r^3 / n * sum_i dy_i s_i x_i (the CPU's formula);
// stores each row's r for dscale when `stats` is set.
template <bool W, int V>
__global__ void SPW_ROW_BOUNDS rms_norm_grad_rows(
    const float *__restrict__ x, const float *__restrict__ scale,
    const float *__restrict__ dy, float *__restrict__ dx,
    float *__restrict__ stats, int64_t rows, int64_t n, float eps) {
  const Group g = row_group<W>();
  const int64_t nv = n / V;
  for (int64_t r = g.first; r < rows; r += g.step) {
    const float *xr = x + r * n, *dr = dy + r * n;
    float ss = 0.0f, dot = 0.0f;
    for (int64_t i = g.tid; i < nv; i += g.size) {
      const Vec<V> a = ld<V>(xr, i), d = ld<V>(dr, i), sc = ld<V>(scale, i);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        ss += a.v[k] * a.v[k];
        dot += d.v[k] * sc.v[k] * a.v[k];
      }
    }
    group_sum2<W>(ss, dot);
    const float rr = 1.0f / sqrtf(ss / float(n) + eps);
    if (stats && g.tid == 0)
      stats[r] = rr;
    if (!dx)
      continue;
    const float c = rr * rr * rr * dot / float(n);
    float *outr = dx + r * n;
    for (int64_t i = g.tid; i < nv; i += g.size) {
      Vec<V> a = ld<V>(xr, i);
      const Vec<V> d = ld<V>(dr, i), sc = ld<V>(scale, i);
#pragma unroll
      for (int k = 0; k < V; ++k)
        a.v[k] = rr * sc.v[k] * d.v[k] - a.v[k] * c;
      st<V>(outr, i, a);
    }
  }
}

// Parameter gradients, pass 1: block (tile, chunk) sums rows
// [chunk * chunk_rows, +chunk_rows) of columns [tile * 32, +32) into
// partial_*[chunk * n + column]. Layer norm (stats2): dscale += dy xhat,
// dbias += dy; rms norm (stats1): dscale += dy x r.
constexpr int kColTile = 32, kColRows = 8; // blockDim (32, 8)

__global__ void norm_param_partial(const float *__restrict__ x,
                                   const float *__restrict__ dy,
                                   const float2 *__restrict__ stats2,
                                   const float *__restrict__ stats1,
                                   int64_t rows, int64_t n,
                                   int64_t chunk_rows,
                                   float *__restrict__ partial_s,
                                   float *__restrict__ partial_b) {
  __shared__ float sh_s[kColRows][kColTile + 1], sh_b[kColRows][kColTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t j = int64_t(blockIdx.x) * kColTile + tx;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * chunk_rows;
  const int64_t r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
  float as = 0.0f, ab = 0.0f;
  if (j < n) {
    for (int64_t r = r0 + ty; r < r1; r += kColRows) {
      const float d = dy[r * n + j], xv = x[r * n + j];
      if (stats2) {
        const float2 st2 = stats2[r];
        as += d * (xv - st2.x) * st2.y;
        ab += d;
      } else {
        as += d * xv * stats1[r];
      }
    }
  }
  sh_s[ty][tx] = as;
  sh_b[ty][tx] = ab;
  __syncthreads();
  if (ty == 0 && j < n) {
    float s = 0.0f, b = 0.0f;
    for (int k = 0; k < kColRows; ++k) {
      s += sh_s[k][tx];
      b += sh_b[k][tx];
    }
    if (partial_s)
      partial_s[chunk * n + j] = s;
    if (partial_b)
      partial_b[chunk * n + j] = b;
  }
}

// Pass 2: out[j] = sum over chunks of partial[chunk * n + j], in order.
__global__ void norm_param_final(const float *__restrict__ partial_s,
                                 const float *__restrict__ partial_b,
                                 int64_t chunks, int64_t n,
                                 float *__restrict__ ds,
                                 float *__restrict__ db) {
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < n;
       j += int64_t(gridDim.x) * blockDim.x) {
    if (ds) {
      float s = 0.0f;
      for (int64_t c = 0; c < chunks; ++c)
        s += partial_s[c * n + j];
      ds[j] = s;
    }
    if (db) {
      float b = 0.0f;
      for (int64_t c = 0; c < chunks; ++c)
        b += partial_b[c * n + j];
      db[j] = b;
    }
  }
}

// ---- cross entropy ----------------------------------------------------------

__device__ __forceinline__ int64_t label_at(const void *labels, bool is64,
                                            int64_t i) {
  return is64 ? static_cast<const int64_t *>(labels)[i]
              : int64_t(static_cast<const int32_t *>(labels)[i]);
}

struct XentArgs {
  const void *labels;
  bool is64;
  bool has_ignore;
  int64_t ignore_index;
};

// Each row's loss lse(row) - row[label] (0 when ignored, NaN for a label out
// of range) and whether it counts toward the mean.
template <bool W, int V>
__global__ void SPW_ROW_BOUNDS xent_rows(const float *__restrict__ logits,
                                         XentArgs xa, int64_t rows, int64_t C,
                                         float *__restrict__ row_loss,
                                         int *__restrict__ row_counted) {
  const Group g = row_group<W>();
  const int64_t nv = C / V;
  for (int64_t r = g.first; r < rows; r += g.step) {
    // The same label for the whole group, so `continue` is uniform.
    const int64_t lab = label_at(xa.labels, xa.is64, r);
    if (xa.has_ignore && lab == xa.ignore_index) {
      if (g.tid == 0) {
        row_loss[r] = 0.0f;
        row_counted[r] = 0;
      }
      continue;
    }
    if (lab < 0 || lab >= C) {
      if (g.tid == 0) {
        row_loss[r] = NAN;
        row_counted[r] = 1;
      }
      continue;
    }
    const float *xr = logits + r * C;
    MaxSum a{-INFINITY, 0.0f};
    for (int64_t i = g.tid; i < nv; i += g.size) {
      const Vec<V> v = ld<V>(xr, i);
#pragma unroll
      for (int k = 0; k < V; ++k)
        ms_add(a, v.v[k]);
    }
    a = group_max_sum<W>(a);
    if (g.tid == 0) {
      row_loss[r] = a.m + logf(a.s) - xr[lab];
      row_counted[r] = 1;
    }
  }
}

// One block: the loss, summed in a fixed order (in double, like the CPU).
__global__ void __launch_bounds__(kFinalThreads)
    xent_final(const float *__restrict__ row_loss,
               const int *__restrict__ row_counted, int64_t rows, bool sum,
               float *__restrict__ y) {
  __shared__ double sh_t[kFinalThreads], sh_c[kFinalThreads];
  double t = 0.0, c = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    t += double(row_loss[r]);
    c += double(row_counted[r]);
  }
  sh_t[threadIdx.x] = t;
  sh_c[threadIdx.x] = c;
  __syncthreads();
  for (int s = int(blockDim.x) / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s) {
      sh_t[threadIdx.x] += sh_t[threadIdx.x + s];
      sh_c[threadIdx.x] += sh_c[threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const double total = sh_t[0], count = sh_c[0];
    // Mean over zero counted labels is 0/0 = NaN, as on the CPU.
    y[0] = float(sum ? total : (count > 0 ? total / count : NAN));
  }
}

// One block: the gradient's scale, dloss (sum) or dloss / counted labels
// (mean; 0 when none counts, as on the CPU).
__global__ void __launch_bounds__(kFinalThreads)
    xent_grad_scale(XentArgs xa, int64_t rows, bool sum,
                    const float *__restrict__ dloss,
                    float *__restrict__ scale) {
  __shared__ double sh_c[kFinalThreads];
  double c = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const int64_t lab = label_at(xa.labels, xa.is64, r);
    c += (xa.has_ignore && lab == xa.ignore_index) ? 0.0 : 1.0;
  }
  sh_c[threadIdx.x] = c;
  __syncthreads();
  for (int s = int(blockDim.x) / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s)
      sh_c[threadIdx.x] += sh_c[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const double d = double(dloss[0]), count = sh_c[0];
    scale[0] = float(sum ? d : (count > 0 ? d / count : 0.0));
  }
}

// dlogits = scale (softmax(row) - onehot(label)); ignored rows 0, rows with
// an out-of-range label NaN.
template <bool W, int V>
__global__ void SPW_ROW_BOUNDS xent_grad_rows(const float *__restrict__ logits,
                                              XentArgs xa, int64_t rows,
                                              int64_t C,
                                              const float *__restrict__ scale,
                                              float *__restrict__ dl) {
  const Group g = row_group<W>();
  const int64_t nv = C / V;
  const float sc = scale[0];
  for (int64_t r = g.first; r < rows; r += g.step) {
    const int64_t lab = label_at(xa.labels, xa.is64, r);
    const float *xr = logits + r * C;
    float *outr = dl + r * C;
    const bool ignored = xa.has_ignore && lab == xa.ignore_index;
    if (ignored || lab < 0 || lab >= C) {
      Vec<V> z;
#pragma unroll
      for (int k = 0; k < V; ++k)
        z.v[k] = ignored ? 0.0f : NAN;
      for (int64_t i = g.tid; i < nv; i += g.size)
        st<V>(outr, i, z);
      continue;
    }
    MaxSum a{-INFINITY, 0.0f};
    for (int64_t i = g.tid; i < nv; i += g.size) {
      const Vec<V> v = ld<V>(xr, i);
#pragma unroll
      for (int k = 0; k < V; ++k)
        ms_add(a, v.v[k]);
    }
    a = group_max_sum<W>(a);
    const float lse = a.m + logf(a.s);
    for (int64_t i = g.tid; i < nv; i += g.size) {
      Vec<V> v = ld<V>(xr, i);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float p = expf(v.v[k] - lse);
        v.v[k] = sc * (i * V + k == lab ? p - 1.0f : p);
      }
      st<V>(outr, i, v);
    }
  }
}

// ---- host side --------------------------------------------------------------

// Checks scale/bias against the normalized dims [axis, rank) of x.
void check_norm_param(const spw_tensor &p, const spw_tensor &x, int64_t axis,
                      const char *what) {
  expect_dtype(p, SPW_F32, what);
  std::vector<int64_t> want(x.dims + axis, x.dims + x.rank);
  if (!shape_is(p, want))
    fail("%s has shape %s, expected the normalized dims %s of x %s", what,
         p.shape().c_str(), shape_str(want.data(), int(want.size())).c_str(),
         x.shape().c_str());
}

const double *need_fattrs(const double *fattrs) {
  if (!fattrs)
    fail("float attributes are NULL");
  return fattrs;
}

unsigned flat_grid(const Launch &l, int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return unsigned(std::max<int64_t>(
      1, std::min<int64_t>(blocks, int64_t(l.sm_count) * 32)));
}

// How a row kernel runs: a warp or a block per row, float4 or scalar.
struct RowPlan {
  bool warp = false, vec = false;
  unsigned grid = 1, block = 32;
};

bool aligned16(const void *p) {
  return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

RowPlan row_plan(int64_t rows, int64_t n,
                 std::initializer_list<const void *> ptrs) {
  RowPlan p;
  p.vec = n % 4 == 0;
  for (const void *q : ptrs)
    p.vec = p.vec && aligned16(q);
  constexpr int64_t kMaxGrid = int64_t(1) << 30; // rows beyond: grid-stride
  if (n <= kWarpRowMax) {
    p.warp = true;
    p.block = 32 * kWarpsPerBlock;
    p.grid = unsigned(std::min<int64_t>(
        (rows + kWarpsPerBlock - 1) / kWarpsPerBlock, kMaxGrid));
  } else {
    // About 8 elements per thread, 128 to 1024 threads.
    const int64_t want = ((n + 7) / 8 + 31) / 32 * 32;
    p.block = unsigned(std::clamp<int64_t>(want, 128, kRowBlockMax));
    p.grid = unsigned(std::min<int64_t>(rows, kMaxGrid));
  }
  return p;
}

// Launches kernel<warp?, 4 or 1> with the plan's geometry on l.stream.
#define SPW_ROW_LAUNCH(kernel, plan, l, ...)                                   \
  do {                                                                         \
    if ((plan).warp && (plan).vec)                                             \
      kernel<true, 4><<<(plan).grid, (plan).block, 0, (l).stream>>>(           \
          __VA_ARGS__);                                                        \
    else if ((plan).warp)                                                      \
      kernel<true, 1><<<(plan).grid, (plan).block, 0, (l).stream>>>(           \
          __VA_ARGS__);                                                        \
    else if ((plan).vec)                                                       \
      kernel<false, 4><<<(plan).grid, (plan).block, 0, (l).stream>>>(          \
          __VA_ARGS__);                                                        \
    else                                                                       \
      kernel<false, 1><<<(plan).grid, (plan).block, 0, (l).stream>>>(          \
          __VA_ARGS__);                                                        \
    SPW_CUDA(cudaGetLastError());                                              \
  } while (0)

struct AxisSplit {
  int64_t outer, n, inner;
};

AxisSplit split_at(const spw_tensor &t, int64_t axis) {
  if (t.rank == 0)
    return {1, 1, 1};
  return {prod(t.dims, 0, axis), t.dims[axis], prod(t.dims, axis + 1, t.rank)};
}

void softmax_op(const Launch &l, spw_tensor *const *ins,
                spw_tensor *const *outs, const int64_t *iattrs,
                const double *) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  expect_dtype(x, SPW_F32, "x");
  expect_like(y, x, "result", "x");
  const AxisSplit s = split_at(x, axis_of(x, need_iattrs(iattrs)[0]));
  if (x.numel == 0)
    return;
  const float *px = x.as<float>();
  float *py = y.as<float>();
  if (s.inner == 1) {
    const RowPlan p = row_plan(s.outer, s.n, {px, py});
    SPW_ROW_LAUNCH(softmax_rows, p, l, px, py, s.outer, s.n);
  } else {
    softmax_cols<<<flat_grid(l, s.outer * s.inner), kThreads, 0, l.stream>>>(
        px, py, s.outer, s.n, s.inner);
    SPW_CUDA(cudaGetLastError());
  }
}

void softmax_grad_op(const Launch &l, spw_tensor *const *ins,
                     spw_tensor *const *outs, const int64_t *iattrs,
                     const double *) {
  const spw_tensor &y = input(ins, 0, "y"), &dy = input(ins, 1, "dy");
  spw_tensor &dx = output(outs, 0, "dx");
  expect_dtype(y, SPW_F32, "y");
  expect_like(dy, y, "dy", "y");
  expect_like(dx, y, "result", "y");
  const AxisSplit s = split_at(y, axis_of(y, need_iattrs(iattrs)[0]));
  if (y.numel == 0)
    return;
  const float *py = y.as<float>(), *pd = dy.as<float>();
  float *po = dx.as<float>();
  if (s.inner == 1) {
    const RowPlan p = row_plan(s.outer, s.n, {py, pd, po});
    SPW_ROW_LAUNCH(softmax_grad_rows, p, l, py, pd, po, s.outer, s.n);
  } else {
    softmax_grad_cols<<<flat_grid(l, s.outer * s.inner), kThreads, 0,
                        l.stream>>>(py, pd, po, s.outer, s.n, s.inner);
    SPW_CUDA(cudaGetLastError());
  }
}

void layer_norm_op(const Launch &l, spw_tensor *const *ins,
                   spw_tensor *const *outs, const int64_t *iattrs,
                   const double *fattrs) {
  const spw_tensor &x = input(ins, 0, "x"), &scale = input(ins, 1, "scale");
  const spw_tensor *bias = ins[2];
  spw_tensor &y = output(outs, 0, "y");
  need_fattrs(fattrs);
  expect_dtype(x, SPW_F32, "x");
  expect_like(y, x, "result", "x");
  const int64_t axis = axis_of(x, need_iattrs(iattrs)[0]);
  check_norm_param(scale, x, axis, "scale");
  if (bias)
    check_norm_param(*bias, x, axis, "bias");
  const float eps = float(fattrs[0]);
  const int64_t rows = prod(x.dims, 0, axis), n = prod(x.dims, axis, x.rank);
  if (x.numel == 0)
    return;
  const float *px = x.as<float>(), *ps = scale.as<float>();
  const float *pb = bias ? bias->as<float>() : nullptr;
  float *py = y.as<float>();
  const RowPlan p = row_plan(rows, n, {px, ps, pb, py});
  SPW_ROW_LAUNCH(layer_norm_rows, p, l, px, ps, pb, py, rows, n, eps);
}

// Pass 1 and 2 of the norms' parameter gradients (see the file comment).
void norm_param_grads(const Launch &l, const float *x, const float *dy,
                      const float2 *stats2, const float *stats1, int64_t rows,
                      int64_t n, float *ds, float *db) {
  const int64_t tiles = (n + kColTile - 1) / kColTile;
  if (tiles > INT32_MAX)
    fail("normalized size %lld is too large", (long long)n);
  // Enough blocks to fill the GPU, at least kColRows rows per chunk, and
  // at most 1024 chunks (gridDim.y and the partials stay small).
  const int64_t want = (int64_t(l.sm_count) * 8 + tiles - 1) / tiles;
  const int64_t max_chunks = std::max<int64_t>(1, rows / kColRows);
  const int64_t target =
      std::clamp<int64_t>(want, 1, std::min<int64_t>(max_chunks, 1024));
  const int64_t chunk_rows = (rows + target - 1) / target;
  const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  float *ps = ds ? static_cast<float *>(l.scratch(
                       chunks * n * int64_t(sizeof(float)),
                       "norm dscale partials"))
                 : nullptr;
  float *pb = db ? static_cast<float *>(l.scratch(
                       chunks * n * int64_t(sizeof(float)),
                       "norm dbias partials"))
                 : nullptr;
  const dim3 grid{unsigned(tiles), unsigned(chunks)};
  const dim3 block{kColTile, kColRows};
  norm_param_partial<<<grid, block, 0, l.stream>>>(
      x, dy, stats2, stats1, rows, n, chunk_rows, ps, pb);
  SPW_CUDA(cudaGetLastError());
  norm_param_final<<<flat_grid(l, n), kThreads, 0, l.stream>>>(ps, pb, chunks,
                                                                n, ds, db);
  SPW_CUDA(cudaGetLastError());
}

void layer_norm_grad_op(const Launch &l, spw_tensor *const *ins,
                        spw_tensor *const *outs, const int64_t *iattrs,
                        const double *fattrs) {
  const spw_tensor &x = input(ins, 0, "x"), &scale = input(ins, 1, "scale");
  const spw_tensor &dy = input(ins, 2, "dy");
  if (!outs)
    fail("results are NULL");
  spw_tensor *dx = outs[0], *dscale = outs[1], *dbias = outs[2];
  need_fattrs(fattrs);
  expect_dtype(x, SPW_F32, "x");
  expect_like(dy, x, "dy", "x");
  const int64_t axis = axis_of(x, need_iattrs(iattrs)[0]);
  check_norm_param(scale, x, axis, "scale");
  if (dx)
    expect_like(*dx, x, "dx", "x");
  if (dscale)
    expect_like(*dscale, scale, "dscale", "scale");
  if (dbias)
    expect_like(*dbias, scale, "dbias", "scale");
  const float eps = float(fattrs[0]);
  const int64_t rows = prod(x.dims, 0, axis), n = prod(x.dims, axis, x.rank);
  float *ds = dscale ? dscale->as<float>() : nullptr;
  float *db = dbias ? dbias->as<float>() : nullptr;
  if (x.numel == 0) {
    // No rows: the sums over rows are zero (n may still be > 0).
    if (ds && n > 0)
      SPW_CUDA(cudaMemsetAsync(ds, 0, size_t(n) * sizeof(float), l.stream));
    if (db && n > 0)
      SPW_CUDA(cudaMemsetAsync(db, 0, size_t(n) * sizeof(float), l.stream));
    return;
  }
  const float *px = x.as<float>(), *ps = scale.as<float>(),
              *pd = dy.as<float>();
  float *po = dx ? dx->as<float>() : nullptr;
  const bool params = ds || db;
  if (!po && !params)
    return;
  float2 *stats = params ? static_cast<float2 *>(l.scratch(
                               rows * int64_t(sizeof(float2)),
                               "layer_norm_grad row statistics"))
                         : nullptr;
  const RowPlan p = row_plan(rows, n, {px, ps, pd, po});
  SPW_ROW_LAUNCH(layer_norm_grad_rows, p, l, px, ps, pd, po, stats, rows, n,
                 eps);
  if (params)
    norm_param_grads(l, px, pd, stats, nullptr, rows, n, ds, db);
}

void rms_norm_op(const Launch &l, spw_tensor *const *ins,
                 spw_tensor *const *outs, const int64_t *iattrs,
                 const double *fattrs) {
  const spw_tensor &x = input(ins, 0, "x"), &scale = input(ins, 1, "scale");
  spw_tensor &y = output(outs, 0, "y");
  need_fattrs(fattrs);
  expect_dtype(x, SPW_F32, "x");
  expect_like(y, x, "result", "x");
  const int64_t axis = axis_of(x, need_iattrs(iattrs)[0]);
  check_norm_param(scale, x, axis, "scale");
  const float eps = float(fattrs[0]);
  const int64_t rows = prod(x.dims, 0, axis), n = prod(x.dims, axis, x.rank);
  if (x.numel == 0)
    return;
  const float *px = x.as<float>(), *ps = scale.as<float>();
  float *py = y.as<float>();
  const RowPlan p = row_plan(rows, n, {px, ps, py});
  SPW_ROW_LAUNCH(rms_norm_rows, p, l, px, ps, py, rows, n, eps);
}

void rms_norm_grad_op(const Launch &l, spw_tensor *const *ins,
                      spw_tensor *const *outs, const int64_t *iattrs,
                      const double *fattrs) {
  const spw_tensor &x = input(ins, 0, "x"), &scale = input(ins, 1, "scale");
  const spw_tensor &dy = input(ins, 2, "dy");
  if (!outs)
    fail("results are NULL");
  spw_tensor *dx = outs[0], *dscale = outs[1];
  need_fattrs(fattrs);
  expect_dtype(x, SPW_F32, "x");
  expect_like(dy, x, "dy", "x");
  const int64_t axis = axis_of(x, need_iattrs(iattrs)[0]);
  check_norm_param(scale, x, axis, "scale");
  if (dx)
    expect_like(*dx, x, "dx", "x");
  if (dscale)
    expect_like(*dscale, scale, "dscale", "scale");
  const float eps = float(fattrs[0]);
  const int64_t rows = prod(x.dims, 0, axis), n = prod(x.dims, axis, x.rank);
  float *ds = dscale ? dscale->as<float>() : nullptr;
  if (x.numel == 0) {
    if (ds && n > 0)
      SPW_CUDA(cudaMemsetAsync(ds, 0, size_t(n) * sizeof(float), l.stream));
    return;
  }
  const float *px = x.as<float>(), *ps = scale.as<float>(),
              *pd = dy.as<float>();
  float *po = dx ? dx->as<float>() : nullptr;
  if (!po && !ds)
    return;
  float *stats = ds ? static_cast<float *>(l.scratch(
                          rows * int64_t(sizeof(float)),
                          "rms_norm_grad row statistics"))
                    : nullptr;
  const RowPlan p = row_plan(rows, n, {px, ps, pd, po});
  SPW_ROW_LAUNCH(rms_norm_grad_rows, p, l, px, ps, pd, po, stats, rows, n,
                 eps);
  if (ds)
    norm_param_grads(l, px, pd, nullptr, stats, rows, n, ds, nullptr);
}

struct XentAttrs {
  bool sum;
  bool has_ignore;
  int64_t ignore_index;
};

XentAttrs xent_attrs(const int64_t *iattrs) {
  need_iattrs(iattrs);
  if (iattrs[0] != 0 && iattrs[0] != 1)
    fail("reduction must be 0 (mean) or 1 (sum), got %lld",
         (long long)iattrs[0]);
  return {iattrs[0] == 1, iattrs[1] != 0, iattrs[2]};
}

// The CPU's xent_labels checks but the values: those are on the device.
void check_xent(const spw_tensor &logits, const spw_tensor &labels) {
  expect_dtype(logits, SPW_F32, "logits");
  expect_index_dtype(labels, "labels");
  if (logits.rank != 2)
    fail("logits must be [N,C], got %s", logits.shape().c_str());
  expect_shape(labels, {logits.dims[0]}, "labels");
}

void xent_op(const Launch &l, spw_tensor *const *ins, spw_tensor *const *outs,
             const int64_t *iattrs, const double *) {
  const spw_tensor &logits = input(ins, 0, "logits"),
                   &labels = input(ins, 1, "labels");
  spw_tensor &y = output(outs, 0, "loss");
  const XentAttrs at = xent_attrs(iattrs);
  check_xent(logits, labels);
  expect_dtype(y, SPW_F32, "result");
  if (y.numel != 1)
    fail("result must be a scalar, got %s", y.shape().c_str());
  const int64_t N = logits.dims[0], C = logits.dims[1];
  const XentArgs xa{labels.data, labels.dtype == SPW_I64, at.has_ignore,
                    at.ignore_index};
  float *row_loss = nullptr;
  int *row_counted = nullptr;
  if (N > 0) {
    row_loss = static_cast<float *>(
        l.scratch(N * int64_t(sizeof(float)), "cross-entropy row losses"));
    row_counted = static_cast<int *>(
        l.scratch(N * int64_t(sizeof(int)), "cross-entropy row counts"));
    const float *pl = logits.as<float>();
    const RowPlan p = row_plan(N, C, {pl});
    SPW_ROW_LAUNCH(xent_rows, p, l, pl, xa, N, C, row_loss, row_counted);
  }
  // Even with N == 0 the loss is written (NaN for mean, 0 for sum).
  xent_final<<<1, kFinalThreads, 0, l.stream>>>(row_loss, row_counted, N,
                                                at.sum, y.as<float>());
  SPW_CUDA(cudaGetLastError());
}

void xent_grad_op(const Launch &l, spw_tensor *const *ins,
                  spw_tensor *const *outs, const int64_t *iattrs,
                  const double *) {
  const spw_tensor &logits = input(ins, 0, "logits"),
                   &labels = input(ins, 1, "labels"),
                   &dloss = input(ins, 2, "dloss");
  spw_tensor &dl = output(outs, 0, "dlogits");
  const XentAttrs at = xent_attrs(iattrs);
  check_xent(logits, labels);
  expect_dtype(dloss, SPW_F32, "dloss");
  if (dloss.numel != 1)
    fail("dloss must be a scalar, got %s", dloss.shape().c_str());
  expect_like(dl, logits, "result", "logits");
  const int64_t N = logits.dims[0], C = logits.dims[1];
  if (dl.numel == 0)
    return;
  const XentArgs xa{labels.data, labels.dtype == SPW_I64, at.has_ignore,
                    at.ignore_index};
  float *scale = static_cast<float *>(
      l.scratch(int64_t(sizeof(float)), "cross-entropy gradient scale"));
  xent_grad_scale<<<1, kFinalThreads, 0, l.stream>>>(
      xa, N, at.sum, dloss.as<float>(), scale);
  SPW_CUDA(cudaGetLastError());
  const float *pl = logits.as<float>();
  float *po = dl.as<float>();
  const RowPlan p = row_plan(N, C, {pl, po});
  SPW_ROW_LAUNCH(xent_grad_rows, p, l, pl, xa, N, C, scale, po);
}

} // namespace

Kernel nn_kernel_for(Op op) {
  switch (op) {
  case Op::softmax:
    return softmax_op;
  case Op::softmax_grad:
    return softmax_grad_op;
  case Op::layer_norm:
    return layer_norm_op;
  case Op::layer_norm_grad:
    return layer_norm_grad_op;
  case Op::rms_norm:
    return rms_norm_op;
  case Op::rms_norm_grad:
    return rms_norm_grad_op;
  case Op::softmax_cross_entropy_loss:
    return xent_op;
  case Op::softmax_cross_entropy_loss_grad:
    return xent_grad_op;
  default:
    return nullptr;
  }
}

} // namespace spw::cuda
