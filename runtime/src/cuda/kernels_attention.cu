//===- kernels_attention.cu - fused causal attention on the GPU -----------===//
//
// attention and attention_grad (spillway_rt.h): q [B,H,S,D], k and v
// [B,Hkv,S,D], query head h reading kv head h / (H / Hkv). The results are
// cpu/kernels_attention.cpp's: scores q.k * scale, key j masked for row i
// when causal and j > i (a row always keeps key 0, so no row is fully
// masked), softmax over the row, any D.
//
// The fast path is flash-attention style in fp32 on the CUDA cores: a block
// of 256 threads owns 64 query rows (or one key block in the backward), K/V
// (or Q/dY) tiles stream through shared memory, softmax is online, and the
// S x S matrix never exists. Tiles are zero-padded to DMAX in {64, 128, 256}
// columns, so any D <= 256 runs there (float4 loads when D % 4 == 0 and the
// tensors are 16-byte aligned, scalar loads otherwise). A larger D, or a
// device without the shared memory, runs simple kernels: one warp per row.
//
// Precision::BF16 with D a multiple of 16 up to 128 (the common head dims
// 64, 80, 96, 128) runs the same passes on the tensor cores instead (tc::
// below: bf16 operands, fp32 accumulation and softmax); any other D at
// BF16 runs the fp32 path, which is within bf16's tolerance.
//
// The backward recomputes what the forward does not save (its only output
// is y): pass 1 runs the forward's tiles again and keeps, per query row,
// L = logsumexp of the scaled scores and Delta = dy . o (= sum_j P_ij
// (dy_i . v_j), the term softmax's backward subtracts), never o itself.
// Then P_ij = exp(s_ij * scale - L_i), dS_ij = P_ij (dy_i . v_j - Delta_i)
// * scale, and
//   dq_i = sum_j dS_ij k_j       one block per query block (no atomics),
//   dk_j = sum_i dS_ij q_i,      one block per key block, looping over the
//   dv_j = sum_i P_ij dy_i       query heads of its group (no atomics),
// so every result is deterministic.
//
//===----------------------------------------------------------------------===//

#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "kernel_checks.h"

#include <cuda_bf16.h>
#include <mma.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace spw::cuda {
namespace {

using namespace spw::checks;

constexpr int kThreads = 256; // 16 x 16: ty = tid / 16, tx = tid % 16
constexpr int kBQ = 64;       // query rows per tile

struct AttnArgs {
  const float *q, *k, *v, *dy;
  float *y;            // forward result (null in the statistics pass)
  float *lse, *delta;  // [B*H*S] statistics of the backward
  float *dq, *dk, *dv; // gradients, any of them null
  int64_t B, H, Hkv, S, D, group;
  float scale;
  int causal;
  int vec; // float4 loads/stores: D % 4 == 0 and 16-byte aligned tensors
};

// ---- helpers -----------------------------------------------------------

__host__ __device__ __forceinline__ int64_t min64(int64_t x, int64_t y) {
  return x < y ? x : y;
}

__device__ __forceinline__ float f4(const float4 &v, int k) {
  return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
}

// Reductions over the 16 lanes sharing a ty (lanes 0-15 or 16-31 of a
// warp): xor offsets below 16 never cross between the halves.
__device__ __forceinline__ float sum16(float x) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1)
    x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float max16(float x) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ __forceinline__ float sum32(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Copies rows [0, valid) of a row-major [*, D] block at g into sm with row
// stride DP, for `rows` rows: columns >= D and rows >= valid become 0, so
// padded products add nothing (and never read garbage that could be NaN).
template <int DP>
__device__ void load_tile(float *sm, const float *g, int rows, int valid,
                          int64_t D, int vec) {
  if (vec) {
    constexpr int C4 = DP / 4;
    for (int idx = threadIdx.x; idx < rows * C4; idx += kThreads) {
      const int r = idx / C4, c = (idx - r * C4) * 4;
      float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
      if (r < valid && c < D) // D % 4 == 0: c + 3 < D too
        x = __ldg(reinterpret_cast<const float4 *>(g + r * D + c));
      *reinterpret_cast<float4 *>(sm + r * DP + c) = x;
    }
  } else {
    for (int idx = threadIdx.x; idx < rows * DP; idx += kThreads) {
      const int r = idx / DP, c = idx - r * DP;
      sm[idx] = (r < valid && c < D) ? __ldg(g + r * D + c) : 0.f;
    }
  }
}

// acc[i][j] = A[ty + 16 i] . B[tx + 16 j] over columns [0, d4), A and B
// row-major with stride DP (d4: D rounded up to 4; the pad is zero).
template <int RA, int RB, int DP>
__device__ __forceinline__ void mm_abt(float (&acc)[RA][RB], const float *A,
                                       const float *Bm, int d4, int ty,
                                       int tx) {
#pragma unroll
  for (int i = 0; i < RA; ++i)
#pragma unroll
    for (int j = 0; j < RB; ++j)
      acc[i][j] = 0.f;
#pragma unroll 2
  for (int d = 0; d < d4; d += 4) {
    float4 a[RA], b[RB];
#pragma unroll
    for (int i = 0; i < RA; ++i)
      a[i] = *reinterpret_cast<const float4 *>(A + (ty + 16 * i) * DP + d);
#pragma unroll
    for (int j = 0; j < RB; ++j)
      b[j] = *reinterpret_cast<const float4 *>(Bm + (tx + 16 * j) * DP + d);
#pragma unroll
    for (int i = 0; i < RA; ++i)
#pragma unroll
      for (int j = 0; j < RB; ++j) {
        float s = acc[i][j];
        s = fmaf(a[i].x, b[j].x, s);
        s = fmaf(a[i].y, b[j].y, s);
        s = fmaf(a[i].z, b[j].z, s);
        s = fmaf(a[i].w, b[j].w, s);
        acc[i][j] = s;
      }
  }
}

// acc[i][c][e] += sum_{j < N} A[ty + 16 i][j] * M[j][tx * 4 + 64 c + e]:
// A row-major with stride AS, M row-major with stride DP.
template <int RA, int NC, int N, int AS, int DP>
__device__ __forceinline__ void mm_ab(float (&acc)[RA][NC][4], const float *A,
                                      const float *M, int ty, int tx) {
#pragma unroll 2
  for (int j = 0; j < N; j += 4) {
    float4 a[RA];
#pragma unroll
    for (int i = 0; i < RA; ++i)
      a[i] = *reinterpret_cast<const float4 *>(A + (ty + 16 * i) * AS + j);
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      float4 m[NC];
#pragma unroll
      for (int c = 0; c < NC; ++c)
        m[c] = *reinterpret_cast<const float4 *>(M + (j + jj) * DP + tx * 4 +
                                                 64 * c);
#pragma unroll
      for (int i = 0; i < RA; ++i) {
        const float p = f4(a[i], jj);
#pragma unroll
        for (int c = 0; c < NC; ++c) {
          acc[i][c][0] = fmaf(p, m[c].x, acc[i][c][0]);
          acc[i][c][1] = fmaf(p, m[c].y, acc[i][c][1]);
          acc[i][c][2] = fmaf(p, m[c].z, acc[i][c][2]);
          acc[i][c][3] = fmaf(p, m[c].w, acc[i][c][3]);
        }
      }
    }
  }
}

// Writes row i of acc times mul[i] to g (row-major [*, D]) for the rows
// below `valid`, columns tx * 4 + 64 c + e below D.
template <int RA, int NC>
__device__ __forceinline__ void
store_rows(float *g, const float (&acc)[RA][NC][4], const float (&mul)[RA],
           int valid, int64_t D, int vec, int ty, int tx) {
#pragma unroll
  for (int i = 0; i < RA; ++i) {
    const int r = ty + 16 * i;
    if (r >= valid)
      continue;
    float *row = g + r * D;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int col = tx * 4 + 64 * c;
      if (vec) {
        if (col < D)
          *reinterpret_cast<float4 *>(row + col) =
              make_float4(acc[i][c][0] * mul[i], acc[i][c][1] * mul[i],
                          acc[i][c][2] * mul[i], acc[i][c][3] * mul[i]);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (col + e < D)
            row[col + e] = acc[i][c][e] * mul[i];
      }
    }
  }
}

// Key block size of the tiled kernels: 32 for DMAX 256 keeps the shared
// memory under 227 KB and the accumulators in registers.
template <int DMAX> __host__ __device__ constexpr int key_block() {
  return DMAX == 256 ? 32 : 64;
}

template <int DMAX> constexpr int fwd_smem() {
  constexpr int DP = DMAX + 4, BK = key_block<DMAX>();
  return (kBQ * DP + 2 * BK * DP + kBQ * (BK + 4)) * int(sizeof(float));
}
template <int DMAX> constexpr int dq_smem() {
  constexpr int DP = DMAX + 4, BK = key_block<DMAX>();
  return (2 * kBQ * DP + 2 * BK * DP + kBQ * (BK + 4)) * int(sizeof(float));
}
template <int DMAX> constexpr int dkv_smem() {
  constexpr int DP = DMAX + 4, BK = key_block<DMAX>();
  return (2 * kBQ * DP + 2 * BK * DP + BK * (kBQ + 4)) * int(sizeof(float));
}

// ---- forward (and the backward's statistics pass) ------------------------

// One block per (batch, head, 64 query rows), looping over key blocks with
// an online softmax. kStats: instead of y, write L = m + log(l) and
// Delta = dy . o per row.
template <int DMAX, bool kStats>
__global__ void __launch_bounds__(kThreads)
    attn_fwd_tiled(AttnArgs a, int64_t tiles, int64_t nqb) {
  constexpr int BK = key_block<DMAX>(), DP = DMAX + 4, PS = BK + 4;
  constexpr int RQ = kBQ / 16, RK = BK / 16, NC = DMAX / 64;
  extern __shared__ float4 smem4[];
  float *Qs = reinterpret_cast<float *>(smem4);
  float *Ks = Qs + kBQ * DP, *Vs = Ks + BK * DP, *Ps = Vs + BK * DP;
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  const int d4 = int((a.D + 3) / 4 * 4);
  const int64_t SD = a.S * a.D;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t bh = t / nqb, qb = nqb - 1 - t % nqb; // late rows first
    const int64_t b = bh / a.H, h = bh % a.H;
    const int64_t kvh = b * a.Hkv + h / a.group;
    const int64_t q0 = qb * kBQ;
    const int nq = int(min64(kBQ, a.S - q0));
    const float *kg = a.k + kvh * SD, *vg = a.v + kvh * SD;
    __syncthreads(); // the previous tile is done with shared memory
    load_tile<DP>(Qs, a.q + bh * SD + q0 * a.D, kBQ, nq, a.D, a.vec);
    float o[RQ][NC][4], m[RQ], l[RQ];
#pragma unroll
    for (int i = 0; i < RQ; ++i) {
      m[i] = -INFINITY;
      l[i] = 0.f;
#pragma unroll
      for (int c = 0; c < NC; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          o[i][c][e] = 0.f;
    }
    // Causal: keys past the tile's last row are masked for all its rows.
    const int64_t kend = a.causal ? min64(a.S, q0 + kBQ) : a.S;
    for (int64_t k0 = 0; k0 < kend; k0 += BK) {
      const int nk = int(min64(BK, a.S - k0));
      __syncthreads(); // done reading Ks, Vs, Ps of the previous block
      load_tile<DP>(Ks, kg + k0 * a.D, BK, nk, a.D, a.vec);
      load_tile<DP>(Vs, vg + k0 * a.D, BK, nk, a.D, a.vec);
      __syncthreads();
      float s[RQ][RK];
      mm_abt<RQ, RK, DP>(s, Qs, Ks, d4, ty, tx);
#pragma unroll
      for (int i = 0; i < RQ; ++i) {
        const int64_t row = q0 + ty + 16 * i;
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < RK; ++j) {
          const int64_t key = k0 + tx + 16 * j;
          const bool ok = tx + 16 * j < nk && (!a.causal || key <= row);
          s[i][j] = ok ? s[i][j] * a.scale : -INFINITY;
          mx = fmaxf(mx, s[i][j]);
        }
        const float mn = fmaxf(m[i], max16(mx));
        // A row with no key yet (only padded rows past the diagonal) keeps
        // everything 0 rather than exp(-inf - -inf) = NaN.
        const float ref = mn == -INFINITY ? 0.f : mn;
        const float alpha = expf(m[i] - ref);
        float ps = 0.f;
#pragma unroll
        for (int j = 0; j < RK; ++j) {
          const float p = s[i][j] == -INFINITY ? 0.f : expf(s[i][j] - ref);
          ps += p;
          Ps[(ty + 16 * i) * PS + tx + 16 * j] = p;
        }
        l[i] = l[i] * alpha + sum16(ps);
        m[i] = mn;
#pragma unroll
        for (int c = 0; c < NC; ++c)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            o[i][c][e] *= alpha;
      }
      __syncthreads();
      mm_ab<RQ, NC, BK, PS, DP>(o, Ps, Vs, ty, tx);
    }
    float inv[RQ];
#pragma unroll
    for (int i = 0; i < RQ; ++i)
      // l = 0 (every visible score -inf) or NaN: NaN, the CPU's 0/0. Padded
      // rows past the tile's end are never stored.
      inv[i] = l[i] > 0.f ? 1.f / l[i] : NAN;
    if constexpr (!kStats) {
      store_rows<RQ, NC>(a.y + bh * SD + q0 * a.D, o, inv, nq, a.D, a.vec, ty,
                         tx);
    } else {
#pragma unroll
      for (int i = 0; i < RQ; ++i) {
        const int r = ty + 16 * i;
        float part = 0.f;
        if (r < nq) {
          const float *dyr = a.dy + bh * SD + (q0 + r) * a.D;
#pragma unroll
          for (int c = 0; c < NC; ++c)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int col = tx * 4 + 64 * c + e;
              if (col < a.D)
                part += o[i][c][e] * dyr[col];
            }
        }
        const float dot = sum16(part) * inv[i]; // all lanes shuffle
        if (r < nq && tx == 0) {
          a.lse[bh * a.S + q0 + r] = m[i] + logf(l[i]);
          a.delta[bh * a.S + q0 + r] = dot;
        }
      }
    }
  }
}

// ---- backward: dq -------------------------------------------------------

// One block per (batch, head, 64 query rows): dq = sum over key blocks of
// dS K, with dS recomputed from L and Delta.
template <int DMAX>
__global__ void __launch_bounds__(kThreads)
    attn_dq_tiled(AttnArgs a, int64_t tiles, int64_t nqb) {
  constexpr int BK = key_block<DMAX>(), DP = DMAX + 4, PS = BK + 4;
  constexpr int RQ = kBQ / 16, RK = BK / 16, NC = DMAX / 64;
  extern __shared__ float4 smem4[];
  float *Qs = reinterpret_cast<float *>(smem4);
  float *Ys = Qs + kBQ * DP, *Ks = Ys + kBQ * DP, *Vs = Ks + BK * DP;
  float *Ps = Vs + BK * DP;
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  const int d4 = int((a.D + 3) / 4 * 4);
  const int64_t SD = a.S * a.D;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t bh = t / nqb, qb = nqb - 1 - t % nqb;
    const int64_t b = bh / a.H, h = bh % a.H;
    const int64_t kvh = b * a.Hkv + h / a.group;
    const int64_t q0 = qb * kBQ;
    const int nq = int(min64(kBQ, a.S - q0));
    const float *kg = a.k + kvh * SD, *vg = a.v + kvh * SD;
    __syncthreads();
    load_tile<DP>(Qs, a.q + bh * SD + q0 * a.D, kBQ, nq, a.D, a.vec);
    load_tile<DP>(Ys, a.dy + bh * SD + q0 * a.D, kBQ, nq, a.D, a.vec);
    float L[RQ], Dl[RQ], acc[RQ][NC][4];
#pragma unroll
    for (int i = 0; i < RQ; ++i) {
      const int r = ty + 16 * i;
      L[i] = r < nq ? a.lse[bh * a.S + q0 + r] : 0.f;
      Dl[i] = r < nq ? a.delta[bh * a.S + q0 + r] : 0.f;
#pragma unroll
      for (int c = 0; c < NC; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          acc[i][c][e] = 0.f;
    }
    const int64_t kend = a.causal ? min64(a.S, q0 + kBQ) : a.S;
    for (int64_t k0 = 0; k0 < kend; k0 += BK) {
      const int nk = int(min64(BK, a.S - k0));
      __syncthreads();
      load_tile<DP>(Ks, kg + k0 * a.D, BK, nk, a.D, a.vec);
      load_tile<DP>(Vs, vg + k0 * a.D, BK, nk, a.D, a.vec);
      __syncthreads();
      float s[RQ][RK], dp[RQ][RK];
      mm_abt<RQ, RK, DP>(s, Qs, Ks, d4, ty, tx);
      mm_abt<RQ, RK, DP>(dp, Ys, Vs, d4, ty, tx);
#pragma unroll
      for (int i = 0; i < RQ; ++i) {
        const int64_t row = q0 + ty + 16 * i;
#pragma unroll
        for (int j = 0; j < RK; ++j) {
          const int64_t key = k0 + tx + 16 * j;
          const bool ok = ty + 16 * i < nq && tx + 16 * j < nk &&
                          (!a.causal || key <= row);
          const float p = ok ? expf(s[i][j] * a.scale - L[i]) : 0.f;
          Ps[(ty + 16 * i) * PS + tx + 16 * j] =
              p * (dp[i][j] - Dl[i]) * a.scale;
        }
      }
      __syncthreads();
      mm_ab<RQ, NC, BK, PS, DP>(acc, Ps, Ks, ty, tx);
    }
    float one[RQ];
#pragma unroll
    for (int i = 0; i < RQ; ++i)
      one[i] = 1.f;
    store_rows<RQ, NC>(a.dq + bh * SD + q0 * a.D, acc, one, nq, a.D, a.vec,
                       ty, tx);
  }
}

// ---- backward: dk, dv ---------------------------------------------------

// One block per (batch, kv head, BK key rows): dk and dv accumulate in
// registers over every query head of the group and every query block that
// can see the keys, in a fixed order.
template <int DMAX>
__global__ void __launch_bounds__(kThreads)
    attn_dkv_tiled(AttnArgs a, int64_t tiles, int64_t nkb) {
  constexpr int BK = key_block<DMAX>(), DP = DMAX + 4, PS = kBQ + 4;
  constexpr int RQ = kBQ / 16, RK = BK / 16, NC = DMAX / 64;
  extern __shared__ float4 smem4[];
  float *Ks = reinterpret_cast<float *>(smem4);
  float *Vs = Ks + BK * DP, *Qs = Vs + BK * DP, *Ys = Qs + kBQ * DP;
  float *Ps = Ys + kBQ * DP; // [BK][PS]: P^T, then dS^T
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  const int d4 = int((a.D + 3) / 4 * 4);
  const int64_t SD = a.S * a.D;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t kvh = t / nkb, kb = t % nkb; // causal: early keys first
    const int64_t b = kvh / a.Hkv, kvi = kvh % a.Hkv;
    const int64_t k0 = kb * BK;
    const int nk = int(min64(BK, a.S - k0));
    __syncthreads();
    load_tile<DP>(Ks, a.k + kvh * SD + k0 * a.D, BK, nk, a.D, a.vec);
    load_tile<DP>(Vs, a.v + kvh * SD + k0 * a.D, BK, nk, a.D, a.vec);
    float dk[RK][NC][4], dv[RK][NC][4];
#pragma unroll
    for (int i = 0; i < RK; ++i)
#pragma unroll
      for (int c = 0; c < NC; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          dk[i][c][e] = dv[i][c][e] = 0.f;
    // Causal: rows before k0 see none of these keys; start at the query
    // block holding row k0.
    const int64_t qstart = a.causal ? k0 / kBQ * kBQ : 0;
    for (int64_t hh = 0; hh < a.group; ++hh) {
      const int64_t bh = b * a.H + kvi * a.group + hh;
      for (int64_t q0 = qstart; q0 < a.S; q0 += kBQ) {
        const int nq = int(min64(kBQ, a.S - q0));
        __syncthreads(); // done with Qs, Ys, Ps of the previous block
        load_tile<DP>(Qs, a.q + bh * SD + q0 * a.D, kBQ, nq, a.D, a.vec);
        load_tile<DP>(Ys, a.dy + bh * SD + q0 * a.D, kBQ, nq, a.D, a.vec);
        float L[RQ], Dl[RQ];
#pragma unroll
        for (int j = 0; j < RQ; ++j) {
          const int c = tx + 16 * j;
          L[j] = c < nq ? a.lse[bh * a.S + q0 + c] : 0.f;
          Dl[j] = c < nq ? a.delta[bh * a.S + q0 + c] : 0.f;
        }
        __syncthreads();
        // s[i][j] = k_(ty+16i) . q_(tx+16j): the transposed score tile.
        float s[RK][RQ], dp[RK][RQ];
        mm_abt<RK, RQ, DP>(s, Ks, Qs, d4, ty, tx);
#pragma unroll
        for (int i = 0; i < RK; ++i) {
          const int64_t key = k0 + ty + 16 * i;
#pragma unroll
          for (int j = 0; j < RQ; ++j) {
            const int64_t row = q0 + tx + 16 * j;
            const bool ok = ty + 16 * i < nk && tx + 16 * j < nq &&
                            (!a.causal || key <= row);
            s[i][j] = ok ? expf(s[i][j] * a.scale - L[j]) : 0.f;
            Ps[(ty + 16 * i) * PS + tx + 16 * j] = s[i][j];
          }
        }
        __syncthreads();
        mm_ab<RK, NC, kBQ, PS, DP>(dv, Ps, Ys, ty, tx); // dv += P^T dY
        mm_abt<RK, RQ, DP>(dp, Vs, Ys, d4, ty, tx);     // dP^T = V dY^T
        __syncthreads(); // everyone is done reading P^T
#pragma unroll
        for (int i = 0; i < RK; ++i)
#pragma unroll
          for (int j = 0; j < RQ; ++j)
            Ps[(ty + 16 * i) * PS + tx + 16 * j] =
                s[i][j] * (dp[i][j] - Dl[j]) * a.scale;
        __syncthreads();
        mm_ab<RK, NC, kBQ, PS, DP>(dk, Ps, Qs, ty, tx); // dk += dS^T Q
      }
    }
    float one[RK];
#pragma unroll
    for (int i = 0; i < RK; ++i)
      one[i] = 1.f;
    if (a.dk)
      store_rows<RK, NC>(a.dk + kvh * SD + k0 * a.D, dk, one, nk, a.D, a.vec,
                         ty, tx);
    if (a.dv)
      store_rows<RK, NC>(a.dv + kvh * SD + k0 * a.D, dv, one, nk, a.D, a.vec,
                         ty, tx);
  }
}

// ---- bf16 tensor-core kernels (Precision::BF16, D % 16 == 0, D <= 128) ---
//
// The same three passes as the tiled fp32 kernels, with every product on
// the tensor cores through nvcuda::wmma 16x16x16 bf16 fragments and fp32
// accumulators. Blocks of 128 threads (4 warps); a block owns 64 query rows
// (or 64 keys in dk / dv) and each warp 16 of them, so the softmax and the
// score tiles are warp-private: warps meet only at the barriers around the
// shared K / V (or Q / dY) tiles. Inputs stay fp32 in memory and are
// rounded to bf16 (round to nearest even) as they are staged into shared
// memory, zero-padded to DH in {64, 80, 96, 128} columns (D 16, 32, 48 run
// as 64, D 112 as 128) and to 64 rows.
//
// Fragments are touched only through load/store/fill/mma, so the element-
// to-lane mapping never matters: each 16 x 64 score tile goes through the
// warp's fp32 scratch in shared memory, where lane pairs own a row (lane /
// 2; columns 2 j + lane % 2) for the per-row work (mask, online softmax,
// dS), and P or dS goes back as a bf16 operand tile. The forward keeps o in
// registers in that same row layout, since the online softmax rescales it
// by row: each key block's P V lands in fresh accumulators, goes through
// the scratch, and is added as o = o * alpha + PV. dq, dk and dv need no
// rescaling and stay in accumulator fragments for the whole pass.
//
// Scores are kept in base 2 (s * scale * log2 e, exp2f), so this path's
// statistics pass writes L in base 2; only its own kernels read it.
namespace tc {

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragBr = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBc = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

constexpr int kThreads = 128; // 4 warps
constexpr int kWarps = 4;
constexpr int kB = 64;        // rows of a tile: queries or keys
constexpr int kPL = kB + 8;   // row stride of a warp's bf16 P / dS tile
constexpr int kSL = kB + 4;   // row stride of a warp's fp32 16 x 64 scratch
constexpr float kLog2e = 1.4426950408889634f;

// Shared memory is declared 128-byte aligned (tc_smem): wmma loads and
// stores need 32-byte aligned fragment addresses, and every region and
// fragment offset below is a multiple of 32 bytes.
//
// bf16 tiles [64][DH + 8]: rows 16 B apart in banks, so 8 rows of 16 bytes
// (one fragment load phase) hit distinct banks; the row stride keeps every
// 16-row, 16-column fragment 32-byte aligned.
template <int DH> constexpr int tile_bytes() { return kB * (DH + 8) * 2; }
template <int DH> constexpr int fwd_smem() {
  // Q, K, V tiles; per warp a [16][DH + 4] fp32 scratch and a [16][kPL] P.
  return 3 * tile_bytes<DH>() + kWarps * 16 * (DH + 4) * 4 +
         kWarps * 16 * kPL * 2;
}
template <int DH> constexpr int bwd_smem() {
  // Four tiles, per warp a [16][kSL] scratch and a [16][kPL] P / dS, and
  // L and Delta of the 64 query rows (dk / dv; dq leaves them unused).
  return 4 * tile_bytes<DH>() + kWarps * 16 * kSL * 4 +
         kWarps * 16 * kPL * 2 + 2 * kB * 4;
}

// Stages rows [0, valid) x columns [0, D) of the fp32 [*, D] block at g
// into the bf16 tile sm [64][DH + 8]; the rest of the 64 x DH is zero.
template <int DH>
__device__ void stage(bf16 *sm, const float *g, int valid, int64_t D,
                      int vec) {
  constexpr int LD = DH + 8;
  if (vec) {
    constexpr int C4 = DH / 4;
    for (int idx = threadIdx.x; idx < kB * C4; idx += kThreads) {
      const int r = idx / C4, c = (idx - r * C4) * 4;
      float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
      if (r < valid && c < D) // D % 4 == 0: c + 3 < D too
        x = __ldg(reinterpret_cast<const float4 *>(g + r * D + c));
      __nv_bfloat162 *d = reinterpret_cast<__nv_bfloat162 *>(sm + r * LD + c);
      d[0] = __floats2bfloat162_rn(x.x, x.y);
      d[1] = __floats2bfloat162_rn(x.z, x.w);
    }
  } else {
    for (int idx = threadIdx.x; idx < kB * DH; idx += kThreads) {
      const int r = idx / DH, c = idx - r * DH;
      sm[r * LD + c] =
          __float2bfloat16((r < valid && c < D) ? __ldg(g + r * D + c) : 0.f);
    }
  }
}

// C [16][64] (fp32, row stride ldc) = A [16][DH] B [64][DH]^T: one warp,
// A and B bf16 row-major with stride DH + 8.
template <int DH>
__device__ __forceinline__ void mm_abt(float *C, int ldc, const bf16 *A,
                                       const bf16 *Bm) {
  constexpr int LD = DH + 8;
  FragC c[4];
#pragma unroll
  for (int n = 0; n < 4; ++n)
    wmma::fill_fragment(c[n], 0.f);
#pragma unroll 2 // fully unrolled, the loads run ahead into dk / dv's spills
  for (int kk = 0; kk < DH / 16; ++kk) {
    FragA fa;
    wmma::load_matrix_sync(fa, A + 16 * kk, LD);
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      FragBc fb; // B^T: B's rows are the columns
      wmma::load_matrix_sync(fb, Bm + 16 * n * LD + 16 * kk, LD);
      wmma::mma_sync(c[n], fa, fb, c[n]);
    }
  }
#pragma unroll
  for (int n = 0; n < 4; ++n)
    wmma::store_matrix_sync(C + 16 * n, c[n], ldc, wmma::mem_row_major);
}

// acc[n] += P [16][64] M [64][DH] columns 16 n ..: one warp, P bf16 with
// stride kPL, M bf16 row-major with stride DH + 8.
template <int DH>
__device__ __forceinline__ void mm_ab(FragC (&acc)[DH / 16], const bf16 *P,
                                      const bf16 *M) {
  constexpr int LD = DH + 8;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    FragA fa;
    wmma::load_matrix_sync(fa, P + 16 * kk, kPL);
#pragma unroll
    for (int n = 0; n < DH / 16; ++n) {
      FragBr fb;
      wmma::load_matrix_sync(fb, M + 16 * kk * LD + 16 * n, LD);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

// One warp writes rows [0, valid) x columns [0, D) of its fp32 scratch
// sw [16][ld] to the row-major [*, D] block at g (coalesced).
template <int DH>
__device__ __forceinline__ void write_rows(float *g, const float *sw, int ld,
                                           int valid, int64_t D, int vec,
                                           int lane) {
  if (vec) {
    constexpr int C4 = DH / 4;
    for (int idx = lane; idx < 16 * C4; idx += 32) {
      const int r = idx / C4, c = (idx - r * C4) * 4;
      if (r < valid && c < D)
        *reinterpret_cast<float4 *>(g + r * D + c) =
            *reinterpret_cast<const float4 *>(sw + r * ld + c);
    }
  } else {
    for (int idx = lane; idx < 16 * DH; idx += 32) {
      const int r = idx / DH, c = idx - r * DH;
      if (r < valid && c < D)
        g[r * D + c] = sw[r * ld + c];
    }
  }
}

// ---- forward (and the statistics pass) ----------------------------------

// One block per (batch, head, 64 query rows), late rows first; kStats:
// L (base 2) and Delta = dy . o instead of y. Delta takes dy rounded to
// bf16, as dP = dY V^T does: dS = P (dP - Delta) cancels to ~0 where the
// softmax is nearly constant (a row with one key: exactly 0), and with
// fp32 dy here the difference of the two roundings (~4e-3 of |dP|) would
// be all that remains of such a gradient.
template <int DH, bool kStats>
__global__ void __launch_bounds__(kThreads)
    attn_fwd_tc(AttnArgs a, int64_t tiles, int64_t nqb) {
  constexpr int LD = DH + 8, SW = DH + 4, NT = DH / 16, NH = DH / 2;
  extern __shared__ __align__(128) unsigned char tc_smem[];
  bf16 *Qs = reinterpret_cast<bf16 *>(tc_smem);
  bf16 *Ks = Qs + kB * LD, *Vs = Ks + kB * LD;
  float *scratch = reinterpret_cast<float *>(Vs + kB * LD);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float *Sw = scratch + warp * 16 * SW; // [16][SW]: S, then P V, then o
  bf16 *Pw = reinterpret_cast<bf16 *>(scratch + kWarps * 16 * SW) +
             warp * 16 * kPL;
  const bf16 *Qw = Qs + warp * 16 * LD;
  const int r = lane >> 1, h = lane & 1; // this lane's row and column parity
  const float scale2 = a.scale * kLog2e;
  const int64_t SD = a.S * a.D;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t bh = t / nqb, qb = nqb - 1 - t % nqb;
    const int64_t b = bh / a.H, hd = bh % a.H;
    const int64_t kvh = b * a.Hkv + hd / a.group;
    const int64_t q0 = qb * kB;
    const int nq = int(min64(kB, a.S - q0));
    const float *kg = a.k + kvh * SD, *vg = a.v + kvh * SD;
    const int64_t row = q0 + warp * 16 + r;
    __syncthreads(); // the previous tile is done with shared memory
    stage<DH>(Qs, a.q + bh * SD + q0 * a.D, nq, a.D, a.vec);
    float o[NH], m = -INFINITY, l = 0.f;
#pragma unroll
    for (int j = 0; j < NH; ++j)
      o[j] = 0.f;
    const int64_t kend = a.causal ? min64(a.S, q0 + kB) : a.S;
    for (int64_t k0 = 0; k0 < kend; k0 += kB) {
      const int nk = int(min64(kB, a.S - k0));
      __syncthreads(); // done with K and V of the previous block
      stage<DH>(Ks, kg + k0 * a.D, nk, a.D, a.vec);
      stage<DH>(Vs, vg + k0 * a.D, nk, a.D, a.vec);
      __syncthreads();
      mm_abt<DH>(Sw, SW, Qw, Ks);
      __syncwarp();
      float sv[32], mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const int col = 2 * j + h;
        const bool ok = col < nk && (!a.causal || k0 + col <= row);
        sv[j] = ok ? Sw[r * SW + col] * scale2 : -INFINITY;
        mx = fmaxf(mx, sv[j]);
      }
      const float mn = fmaxf(m, fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1)));
      // A row with no key yet keeps everything 0, not exp(-inf - -inf).
      const float ref = mn == -INFINITY ? 0.f : mn;
      const float alpha = exp2f(m - ref);
      float ps = 0.f;
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const bf16 p =
            __float2bfloat16(sv[j] == -INFINITY ? 0.f : exp2f(sv[j] - ref));
        ps += __bfloat162float(p); // l sums what P V multiplies
        Pw[r * kPL + 2 * j + h] = p;
      }
      l = l * alpha + ps + __shfl_xor_sync(0xffffffffu, ps, 1);
      m = mn;
      __syncwarp(); // P written, S read by every lane
      FragC pv[NT];
#pragma unroll
      for (int n = 0; n < NT; ++n)
        wmma::fill_fragment(pv[n], 0.f);
      mm_ab<DH>(pv, Pw, Vs);
#pragma unroll
      for (int n = 0; n < NT; ++n)
        wmma::store_matrix_sync(Sw + 16 * n, pv[n], SW, wmma::mem_row_major);
      __syncwarp();
#pragma unroll
      for (int j = 0; j < NH; ++j)
        o[j] = o[j] * alpha + Sw[r * SW + 2 * j + h];
    }
    // l = 0 (every visible score -inf) or NaN: NaN, the CPU's 0/0.
    const float inv = l > 0.f ? 1.f / l : NAN;
    __syncwarp(); // every lane has read its P V
#pragma unroll
    for (int j = 0; j < NH; ++j)
      Sw[r * SW + 2 * j + h] = o[j] * inv;
    __syncwarp();
    const int wq = nq - warp * 16; // this warp's valid rows (may be <= 0)
    if constexpr (!kStats) {
      write_rows<DH>(a.y + bh * SD + (q0 + warp * 16) * a.D, Sw, SW, wq, a.D,
                     a.vec, lane);
    } else {
      if (h == 0 && r < wq)
        a.lse[bh * a.S + row] = m + log2f(l);
      for (int i = 0; i < 16 && i < wq; ++i) { // warp-uniform bound
        const float *dyr = a.dy + bh * SD + (q0 + warp * 16 + i) * a.D;
        float part = 0.f;
        for (int c = lane; c < a.D; c += 32)
          part = fmaf(Sw[i * SW + c],
                      __bfloat162float(__float2bfloat16(dyr[c])), part);
        part = sum32(part);
        if (lane == 0)
          a.delta[bh * a.S + q0 + warp * 16 + i] = part;
      }
    }
  }
}

// ---- backward: dq -------------------------------------------------------

// One block per (batch, head, 64 query rows): dq = sum over key blocks of
// dS K, dS = P (dY V^T - Delta) scale with P = exp2(S scale log2 e - L).
template <int DH>
__global__ void __launch_bounds__(kThreads)
    attn_dq_tc(AttnArgs a, int64_t tiles, int64_t nqb) {
  constexpr int LD = DH + 8, NT = DH / 16;
  extern __shared__ __align__(128) unsigned char tc_smem[];
  bf16 *Qs = reinterpret_cast<bf16 *>(tc_smem);
  bf16 *Ys = Qs + kB * LD, *Ks = Ys + kB * LD, *Vs = Ks + kB * LD;
  float *scratch = reinterpret_cast<float *>(Vs + kB * LD);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float *Sw = scratch + warp * 16 * kSL;
  bf16 *Pw = reinterpret_cast<bf16 *>(scratch + kWarps * 16 * kSL) +
             warp * 16 * kPL;
  const int r = lane >> 1, h = lane & 1;
  const float scale2 = a.scale * kLog2e;
  const int64_t SD = a.S * a.D;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t bh = t / nqb, qb = nqb - 1 - t % nqb;
    const int64_t b = bh / a.H, hd = bh % a.H;
    const int64_t kvh = b * a.Hkv + hd / a.group;
    const int64_t q0 = qb * kB;
    const int nq = int(min64(kB, a.S - q0));
    const float *kg = a.k + kvh * SD, *vg = a.v + kvh * SD;
    const int64_t row = q0 + warp * 16 + r;
    const bool rok = warp * 16 + r < nq;
    const float L = rok ? a.lse[bh * a.S + row] : 0.f;
    const float Dl = rok ? a.delta[bh * a.S + row] : 0.f;
    __syncthreads(); // the previous tile is done with shared memory
    stage<DH>(Qs, a.q + bh * SD + q0 * a.D, nq, a.D, a.vec);
    stage<DH>(Ys, a.dy + bh * SD + q0 * a.D, nq, a.D, a.vec);
    FragC acc[NT];
#pragma unroll
    for (int n = 0; n < NT; ++n)
      wmma::fill_fragment(acc[n], 0.f);
    const int64_t kend = a.causal ? min64(a.S, q0 + kB) : a.S;
    for (int64_t k0 = 0; k0 < kend; k0 += kB) {
      const int nk = int(min64(kB, a.S - k0));
      __syncthreads();
      stage<DH>(Ks, kg + k0 * a.D, nk, a.D, a.vec);
      stage<DH>(Vs, vg + k0 * a.D, nk, a.D, a.vec);
      __syncthreads();
      mm_abt<DH>(Sw, kSL, Qs + warp * 16 * LD, Ks); // S = Q K^T
      __syncwarp();
      float p[32];
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const int col = 2 * j + h;
        const bool ok = rok && col < nk && (!a.causal || k0 + col <= row);
        p[j] = ok ? exp2f(Sw[r * kSL + col] * scale2 - L) : 0.f;
      }
      __syncwarp(); // S read
      mm_abt<DH>(Sw, kSL, Ys + warp * 16 * LD, Vs); // dP = dY V^T
      __syncwarp();
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const int col = 2 * j + h;
        Pw[r * kPL + col] =
            __float2bfloat16(p[j] * (Sw[r * kSL + col] - Dl) * a.scale);
      }
      __syncwarp();
      mm_ab<DH>(acc, Pw, Ks); // dq += dS K
    }
    __syncthreads(); // every warp is done with K and V: reuse them
    float *Ow = reinterpret_cast<float *>(Ks) + warp * 16 * (DH + 4);
#pragma unroll
    for (int n = 0; n < NT; ++n)
      wmma::store_matrix_sync(Ow + 16 * n, acc[n], DH + 4,
                              wmma::mem_row_major);
    __syncwarp();
    write_rows<DH>(a.dq + bh * SD + (q0 + warp * 16) * a.D, Ow, DH + 4,
                   nq - warp * 16, a.D, a.vec, lane);
  }
}

// ---- backward: dk, dv ---------------------------------------------------

// One block per (batch, kv head, 64 keys), each warp 16 keys: dk and dv
// accumulate over every query head of the group and every query block that
// sees the keys, in a fixed order. Works on the transposed tiles: S^T =
// K Q^T, dP^T = V dY^T, dv += P^T dY, dk += dS^T Q.
template <int DH>
__global__ void __launch_bounds__(kThreads)
    attn_dkv_tc(AttnArgs a, int64_t tiles, int64_t nkb) {
  constexpr int LD = DH + 8, NT = DH / 16;
  extern __shared__ __align__(128) unsigned char tc_smem[];
  bf16 *Ks = reinterpret_cast<bf16 *>(tc_smem);
  bf16 *Vs = Ks + kB * LD, *Qs = Vs + kB * LD, *Ys = Qs + kB * LD;
  float *scratch = reinterpret_cast<float *>(Ys + kB * LD);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float *Sw = scratch + warp * 16 * kSL;
  bf16 *Pw = reinterpret_cast<bf16 *>(scratch + kWarps * 16 * kSL) +
             warp * 16 * kPL;
  float *Ls = reinterpret_cast<float *>(
      reinterpret_cast<bf16 *>(scratch + kWarps * 16 * kSL) +
      kWarps * 16 * kPL);
  float *Ds = Ls + kB;
  const int r = lane >> 1, h = lane & 1; // r: this lane's key row
  const float scale2 = a.scale * kLog2e;
  const int64_t SD = a.S * a.D;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t kvh = t / nkb, kb = t % nkb;
    const int64_t b = kvh / a.Hkv, kvi = kvh % a.Hkv;
    const int64_t k0 = kb * kB;
    const int nk = int(min64(kB, a.S - k0));
    const int64_t key = k0 + warp * 16 + r;
    const bool kok = warp * 16 + r < nk;
    __syncthreads();
    stage<DH>(Ks, a.k + kvh * SD + k0 * a.D, nk, a.D, a.vec);
    stage<DH>(Vs, a.v + kvh * SD + k0 * a.D, nk, a.D, a.vec);
    FragC dk[NT], dv[NT];
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      wmma::fill_fragment(dk[n], 0.f);
      wmma::fill_fragment(dv[n], 0.f);
    }
    // Causal: rows before k0 see none of these keys.
    const int64_t qstart = a.causal ? k0 : 0;
    for (int64_t hh = 0; hh < a.group; ++hh) {
      const int64_t bh = b * a.H + kvi * a.group + hh;
      for (int64_t q0 = qstart; q0 < a.S; q0 += kB) {
        const int nq = int(min64(kB, a.S - q0));
        __syncthreads(); // done with Q, dY, L, Delta of the previous block
        stage<DH>(Qs, a.q + bh * SD + q0 * a.D, nq, a.D, a.vec);
        stage<DH>(Ys, a.dy + bh * SD + q0 * a.D, nq, a.D, a.vec);
        if (threadIdx.x < kB) {
          const int i = threadIdx.x;
          Ls[i] = i < nq ? a.lse[bh * a.S + q0 + i] : 0.f;
          Ds[i] = i < nq ? a.delta[bh * a.S + q0 + i] : 0.f;
        }
        __syncthreads();
        mm_abt<DH>(Sw, kSL, Ks + warp * 16 * LD, Qs); // S^T = K Q^T
        __syncwarp();
#pragma unroll
        for (int j = 0; j < 32; ++j) {
          const int col = 2 * j + h; // query q0 + col
          const bool ok = kok && col < nq && (!a.causal || key <= q0 + col);
          Pw[r * kPL + col] = __float2bfloat16(
              ok ? exp2f(Sw[r * kSL + col] * scale2 - Ls[col]) : 0.f);
        }
        __syncwarp(); // P^T written, S^T read
        mm_ab<DH>(dv, Pw, Ys);                        // dv += P^T dY
        mm_abt<DH>(Sw, kSL, Vs + warp * 16 * LD, Ys); // dP^T = V dY^T
        __syncwarp(); // dP^T stored, P^T read by every lane
        // dS^T over P^T in place: each lane rewrites only its own elements
        // (P read back as the bf16 that dv used, which frees 32 registers).
#pragma unroll
        for (int j = 0; j < 32; ++j) {
          const int col = 2 * j + h;
          const float p = __bfloat162float(Pw[r * kPL + col]);
          Pw[r * kPL + col] =
              __float2bfloat16(p * (Sw[r * kSL + col] - Ds[col]) * a.scale);
        }
        __syncwarp();
        mm_ab<DH>(dk, Pw, Qs); // dk += dS^T Q
      }
    }
    __syncthreads(); // every warp is done with Q and dY: reuse them
    float *Ow = reinterpret_cast<float *>(Qs) + warp * 16 * (DH + 4);
    if (a.dk) {
#pragma unroll
      for (int n = 0; n < NT; ++n)
        wmma::store_matrix_sync(Ow + 16 * n, dk[n], DH + 4,
                                wmma::mem_row_major);
      __syncwarp();
      write_rows<DH>(a.dk + kvh * SD + (k0 + warp * 16) * a.D, Ow, DH + 4,
                     nk - warp * 16, a.D, a.vec, lane);
      __syncwarp(); // read before dv overwrites it
    }
    if (a.dv) {
#pragma unroll
      for (int n = 0; n < NT; ++n)
        wmma::store_matrix_sync(Ow + 16 * n, dv[n], DH + 4,
                                wmma::mem_row_major);
      __syncwarp();
      write_rows<DH>(a.dv + kvh * SD + (k0 + warp * 16) * a.D, Ow, DH + 4,
                     nk - warp * 16, a.D, a.vec, lane);
    }
  }
}

} // namespace tc

// ---- simple kernels: one warp per row, any D ------------------------------

__device__ __forceinline__ float warp_dot(const float *x, const float *y,
                                          int64_t D, int lane) {
  float s = 0.f;
  for (int64_t d = lane; d < D; d += 32)
    s = fmaf(x[d], y[d], s);
  return sum32(s);
}

// One warp per query row, online softmax. y != null: the row of y is the
// accumulator (each lane owns columns lane + 32 n). Otherwise the
// statistics: Delta = sum_j e^(s_j - m) (dy . v_j) / l, rescaled online
// like l, needs no vector.
__global__ void attn_fwd_simple(AttnArgs a) {
  const int lane = threadIdx.x & 31;
  const int64_t rows = a.B * a.H * a.S;
  const int64_t warps = int64_t(gridDim.x) * (kThreads / 32);
  for (int64_t w = (int64_t(blockIdx.x) * kThreads + threadIdx.x) / 32;
       w < rows; w += warps) {
    const int64_t bh = w / a.S, i = w % a.S;
    const int64_t b = bh / a.H, h = bh % a.H;
    const int64_t kvh = b * a.Hkv + h / a.group;
    const float *qi = a.q + w * a.D;
    const float *kh = a.k + kvh * a.S * a.D, *vh = a.v + kvh * a.S * a.D;
    float *yi = a.y ? a.y + w * a.D : nullptr;
    const float *dyi = a.dy ? a.dy + w * a.D : nullptr;
    if (yi)
      for (int64_t d = lane; d < a.D; d += 32)
        yi[d] = 0.f;
    const int64_t n = a.causal ? i + 1 : a.S;
    float m = -INFINITY, l = 0.f, t = 0.f;
    for (int64_t j = 0; j < n; ++j) {
      const float s = warp_dot(qi, kh + j * a.D, a.D, lane) * a.scale;
      const float mn = fmaxf(m, s);
      const float alpha = expf(m - mn), p = expf(s - mn);
      l = l * alpha + p;
      m = mn;
      if (yi) {
        const float *vj = vh + j * a.D;
        for (int64_t d = lane; d < a.D; d += 32)
          yi[d] = yi[d] * alpha + p * vj[d];
      } else {
        t = t * alpha + p * warp_dot(dyi, vh + j * a.D, a.D, lane);
      }
    }
    if (yi) {
      const float inv = 1.f / l;
      for (int64_t d = lane; d < a.D; d += 32)
        yi[d] *= inv;
    } else if (lane == 0) {
      a.lse[w] = m + logf(l);
      a.delta[w] = t / l;
    }
  }
}

// One warp per query row: dq_i = sum_j dS_ij k_j, accumulated in dq's row.
__global__ void attn_dq_simple(AttnArgs a) {
  const int lane = threadIdx.x & 31;
  const int64_t rows = a.B * a.H * a.S;
  const int64_t warps = int64_t(gridDim.x) * (kThreads / 32);
  for (int64_t w = (int64_t(blockIdx.x) * kThreads + threadIdx.x) / 32;
       w < rows; w += warps) {
    const int64_t bh = w / a.S, i = w % a.S;
    const int64_t b = bh / a.H, h = bh % a.H;
    const int64_t kvh = b * a.Hkv + h / a.group;
    const float *qi = a.q + w * a.D, *dyi = a.dy + w * a.D;
    const float *kh = a.k + kvh * a.S * a.D, *vh = a.v + kvh * a.S * a.D;
    float *dqi = a.dq + w * a.D;
    const float L = a.lse[w], Dl = a.delta[w];
    for (int64_t d = lane; d < a.D; d += 32)
      dqi[d] = 0.f;
    const int64_t n = a.causal ? i + 1 : a.S;
    for (int64_t j = 0; j < n; ++j) {
      const float *kj = kh + j * a.D;
      const float p = expf(warp_dot(qi, kj, a.D, lane) * a.scale - L);
      const float ds =
          p * (warp_dot(dyi, vh + j * a.D, a.D, lane) - Dl) * a.scale;
      for (int64_t d = lane; d < a.D; d += 32)
        dqi[d] += ds * kj[d];
    }
  }
}

// One warp per key row: dk_j, dv_j over the group's heads and the rows
// that see key j, accumulated in the rows of dk / dv (either may be null).
__global__ void attn_dkv_simple(AttnArgs a) {
  const int lane = threadIdx.x & 31;
  const int64_t rows = a.B * a.Hkv * a.S;
  const int64_t warps = int64_t(gridDim.x) * (kThreads / 32);
  for (int64_t w = (int64_t(blockIdx.x) * kThreads + threadIdx.x) / 32;
       w < rows; w += warps) {
    const int64_t kvh = w / a.S, j = w % a.S;
    const int64_t b = kvh / a.Hkv, kvi = kvh % a.Hkv;
    const float *kj = a.k + w * a.D, *vj = a.v + w * a.D;
    float *dkj = a.dk ? a.dk + w * a.D : nullptr;
    float *dvj = a.dv ? a.dv + w * a.D : nullptr;
    for (int64_t d = lane; d < a.D; d += 32) {
      if (dkj)
        dkj[d] = 0.f;
      if (dvj)
        dvj[d] = 0.f;
    }
    for (int64_t hh = 0; hh < a.group; ++hh) {
      const int64_t bh = b * a.H + kvi * a.group + hh;
      for (int64_t i = a.causal ? j : 0; i < a.S; ++i) {
        const int64_t r = bh * a.S + i;
        const float *qi = a.q + r * a.D, *dyi = a.dy + r * a.D;
        const float p =
            expf(warp_dot(qi, kj, a.D, lane) * a.scale - a.lse[r]);
        const float ds =
            p * (warp_dot(dyi, vj, a.D, lane) - a.delta[r]) * a.scale;
        for (int64_t d = lane; d < a.D; d += 32) {
          if (dkj)
            dkj[d] += ds * qi[d];
          if (dvj)
            dvj[d] += p * dyi[d];
        }
      }
    }
  }
}

// ---- host ---------------------------------------------------------------

void expect_f32(const spw_tensor &t, const char *what) {
  if (t.dtype != SPW_F32)
    fail("%s must be %s, got %s", what, dtype_name(SPW_F32),
         dtype_name(t.dtype));
}

void expect_shape4(const spw_tensor &t, const int64_t (&dims)[4],
                   const char *what) {
  bool same = t.rank == 4;
  for (int i = 0; same && i < 4; ++i)
    same = t.dims[i] == dims[i];
  if (!same)
    fail("%s has shape %s, expected %s", what, t.shape().c_str(),
         shape_str(dims, 4).c_str());
}

// cpu/kernels_attention.cpp's attn_check, message for message.
AttnArgs attn_check(const spw_tensor &q, const spw_tensor &k,
                    const spw_tensor &v, const int64_t *iattrs,
                    const double *fattrs) {
  if (!iattrs)
    fail("integer attributes are NULL");
  if (!fattrs)
    fail("float attributes are NULL");
  if (iattrs[0] != 0 && iattrs[0] != 1)
    fail("causal must be 0 or 1, got %lld", (long long)iattrs[0]);
  expect_f32(q, "q");
  expect_f32(k, "k");
  expect_f32(v, "v");
  if (q.rank != 4)
    fail("q must be [B,H,S,D], got %s", q.shape().c_str());
  if (k.rank != 4)
    fail("k must be [B,Hkv,S,D], got %s", k.shape().c_str());
  AttnArgs a{};
  a.B = q.dims[0];
  a.H = q.dims[1];
  a.Hkv = k.dims[1];
  a.S = q.dims[2];
  a.D = q.dims[3];
  const int64_t kdims[4] = {a.B, a.Hkv, a.S, a.D};
  expect_shape4(k, kdims, "k");
  expect_shape4(v, kdims, "v");
  if (a.Hkv < 1 || a.H % a.Hkv != 0)
    fail("the %lld query heads of q %s are not a multiple of the %lld kv "
         "heads of k %s",
         (long long)a.H, q.shape().c_str(), (long long)a.Hkv,
         k.shape().c_str());
  a.group = a.H / a.Hkv;
  a.causal = iattrs[0] == 1;
  a.scale = float(fattrs[0]);
  a.q = q.as<const float>();
  a.k = k.as<const float>();
  a.v = v.as<const float>();
  return a;
}

bool aligned16(const void *p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

int max_smem_optin() {
  static const int bytes = [] {
    int dev = 0, v = 0;
    SPW_CUDA(cudaGetDevice(&dev));
    SPW_CUDA(cudaDeviceGetAttribute(
        &v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    return v;
  }();
  return bytes;
}

// The DMAX of the tiled path for D, or 0: the simple kernels.
int tiled_dmax(int64_t D) {
  const int dmax = D <= 64 ? 64 : D <= 128 ? 128 : D <= 256 ? 256 : 0;
  const int need = dmax == 64    ? dq_smem<64>()
                   : dmax == 128 ? dq_smem<128>()
                                 : dq_smem<256>(); // dq needs the most
  if (dmax == 0 || need > max_smem_optin())
    return 0;
  return dmax;
}

// The DH of the bf16 tensor-core path for D (Precision::BF16, D % 16 == 0,
// D <= 128), or 0: the fp32 paths.
int tc_dh(const Launch &l, int64_t D) {
  if (l.precision != Precision::BF16 || D < 16 || D > 128 || D % 16 != 0)
    return 0;
  const int dh = D <= 64 ? 64 : D <= 80 ? 80 : D <= 96 ? 96 : 128;
  const int need = dh == 64   ? tc::bwd_smem<64>()
                   : dh == 80 ? tc::bwd_smem<80>()
                   : dh == 96 ? tc::bwd_smem<96>()
                              : tc::bwd_smem<128>(); // the largest
  return need <= max_smem_optin() ? dh : 0;
}

unsigned grid_for(int64_t tiles) {
  return unsigned(std::min<int64_t>(tiles, int64_t(1) << 30));
}

// Raises a kernel's dynamic shared memory limit; once per kernel (the
// static local of each instantiation of the caller).
template <class K> bool allow_smem(K kernel, int bytes) {
  SPW_CUDA(cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  return true;
}

template <int DMAX, bool kStats>
void launch_fwd(const Launch &l, const AttnArgs &a) {
  constexpr int smem = fwd_smem<DMAX>();
  static const bool ready = allow_smem(attn_fwd_tiled<DMAX, kStats>, smem);
  (void)ready;
  const int64_t nqb = (a.S + kBQ - 1) / kBQ, tiles = a.B * a.H * nqb;
  attn_fwd_tiled<DMAX, kStats>
      <<<grid_for(tiles), kThreads, smem, l.stream>>>(a, tiles, nqb);
  SPW_CUDA(cudaGetLastError());
}

template <int DMAX> void launch_bwd(const Launch &l, const AttnArgs &a) {
  launch_fwd<DMAX, true>(l, a);
  if (a.dq) {
    constexpr int smem = dq_smem<DMAX>();
    static const bool ready = allow_smem(attn_dq_tiled<DMAX>, smem);
    (void)ready;
    const int64_t nqb = (a.S + kBQ - 1) / kBQ, tiles = a.B * a.H * nqb;
    attn_dq_tiled<DMAX>
        <<<grid_for(tiles), kThreads, smem, l.stream>>>(a, tiles, nqb);
    SPW_CUDA(cudaGetLastError());
  }
  if (a.dk || a.dv) {
    constexpr int smem = dkv_smem<DMAX>(), BK = key_block<DMAX>();
    static const bool ready = allow_smem(attn_dkv_tiled<DMAX>, smem);
    (void)ready;
    const int64_t nkb = (a.S + BK - 1) / BK, tiles = a.B * a.Hkv * nkb;
    attn_dkv_tiled<DMAX>
        <<<grid_for(tiles), kThreads, smem, l.stream>>>(a, tiles, nkb);
    SPW_CUDA(cudaGetLastError());
  }
}

template <int DH, bool kStats>
void launch_fwd_tc(const Launch &l, const AttnArgs &a) {
  constexpr int smem = tc::fwd_smem<DH>();
  static const bool ready = allow_smem(tc::attn_fwd_tc<DH, kStats>, smem);
  (void)ready;
  const int64_t nqb = (a.S + tc::kB - 1) / tc::kB, tiles = a.B * a.H * nqb;
  tc::attn_fwd_tc<DH, kStats>
      <<<grid_for(tiles), tc::kThreads, smem, l.stream>>>(a, tiles, nqb);
  SPW_CUDA(cudaGetLastError());
}

template <int DH> void launch_bwd_tc(const Launch &l, const AttnArgs &a) {
  constexpr int smem = tc::bwd_smem<DH>();
  launch_fwd_tc<DH, true>(l, a);
  const int64_t nb = (a.S + tc::kB - 1) / tc::kB;
  if (a.dq) {
    static const bool ready = allow_smem(tc::attn_dq_tc<DH>, smem);
    (void)ready;
    const int64_t tiles = a.B * a.H * nb;
    tc::attn_dq_tc<DH>
        <<<grid_for(tiles), tc::kThreads, smem, l.stream>>>(a, tiles, nb);
    SPW_CUDA(cudaGetLastError());
  }
  if (a.dk || a.dv) {
    static const bool ready = allow_smem(tc::attn_dkv_tc<DH>, smem);
    (void)ready;
    const int64_t tiles = a.B * a.Hkv * nb;
    tc::attn_dkv_tc<DH>
        <<<grid_for(tiles), tc::kThreads, smem, l.stream>>>(a, tiles, nb);
    SPW_CUDA(cudaGetLastError());
  }
}

unsigned warp_grid(int64_t rows) {
  return grid_for((rows + kThreads / 32 - 1) / (kThreads / 32));
}

void attention_fwd(const Launch &l, spw_tensor *const *ins,
                   spw_tensor *const *outs, const int64_t *iattrs,
                   const double *fattrs) {
  const spw_tensor &q = input(ins, 0, "q"), &k = input(ins, 1, "k"),
                   &v = input(ins, 2, "v");
  if (!outs || !outs[0])
    fail("result 0 (y) is NULL");
  spw_tensor &y = *outs[0];
  AttnArgs a = attn_check(q, k, v, iattrs, fattrs);
  expect_like(y, q, "result", "q");
  if (y.numel == 0)
    return;
  a.y = y.as<float>();
  a.vec = a.D % 4 == 0 && aligned16(a.q) && aligned16(a.k) &&
          aligned16(a.v) && aligned16(a.y);
  switch (tc_dh(l, a.D)) {
  case 64:
    return launch_fwd_tc<64, false>(l, a);
  case 80:
    return launch_fwd_tc<80, false>(l, a);
  case 96:
    return launch_fwd_tc<96, false>(l, a);
  case 128:
    return launch_fwd_tc<128, false>(l, a);
  default:
    break;
  }
  switch (tiled_dmax(a.D)) {
  case 64:
    return launch_fwd<64, false>(l, a);
  case 128:
    return launch_fwd<128, false>(l, a);
  case 256:
    return launch_fwd<256, false>(l, a);
  default:
    attn_fwd_simple<<<warp_grid(a.B * a.H * a.S), kThreads, 0, l.stream>>>(
        a);
    SPW_CUDA(cudaGetLastError());
  }
}

void attention_bwd(const Launch &l, spw_tensor *const *ins,
                   spw_tensor *const *outs, const int64_t *iattrs,
                   const double *fattrs) {
  const spw_tensor &q = input(ins, 0, "q"), &k = input(ins, 1, "k"),
                   &v = input(ins, 2, "v"), &dy = input(ins, 3, "dy");
  if (!outs)
    fail("results are NULL");
  spw_tensor *dq = outs[0], *dk = outs[1], *dv = outs[2];
  AttnArgs a = attn_check(q, k, v, iattrs, fattrs);
  expect_like(dy, q, "dy", "q");
  if (dq)
    expect_like(*dq, q, "dq", "q");
  if (dk)
    expect_like(*dk, k, "dk", "k");
  if (dv)
    expect_like(*dv, v, "dv", "v");
  if (q.numel == 0) {
    // H == 0 leaves k non-empty: no query reads it, its gradients are 0.
    for (spw_tensor *g : {dk, dv})
      if (g && g->numel > 0)
        SPW_CUDA(cudaMemsetAsync(g->data, 0, size_t(g->bytes()), l.stream));
    return;
  }
  if (!dq && !dk && !dv)
    return;
  a.dy = dy.as<const float>();
  a.dq = dq ? dq->as<float>() : nullptr;
  a.dk = dk ? dk->as<float>() : nullptr;
  a.dv = dv ? dv->as<float>() : nullptr;
  const int64_t rows = a.B * a.H * a.S;
  a.lse = static_cast<float *>(
      l.scratch(rows * int64_t(sizeof(float)), "attention_grad logsumexp"));
  a.delta = static_cast<float *>(
      l.scratch(rows * int64_t(sizeof(float)), "attention_grad delta"));
  bool vec = a.D % 4 == 0 && aligned16(a.q) && aligned16(a.k) &&
             aligned16(a.v) && aligned16(a.dy);
  for (const float *p : {a.dq, a.dk, a.dv})
    vec = vec && aligned16(p); // null is aligned
  a.vec = vec;
  switch (tc_dh(l, a.D)) {
  case 64:
    return launch_bwd_tc<64>(l, a);
  case 80:
    return launch_bwd_tc<80>(l, a);
  case 96:
    return launch_bwd_tc<96>(l, a);
  case 128:
    return launch_bwd_tc<128>(l, a);
  default:
    break;
  }
  switch (tiled_dmax(a.D)) {
  case 64:
    return launch_bwd<64>(l, a);
  case 128:
    return launch_bwd<128>(l, a);
  case 256:
    return launch_bwd<256>(l, a);
  default:
    break;
  }
  const unsigned qgrid = warp_grid(rows);
  attn_fwd_simple<<<qgrid, kThreads, 0, l.stream>>>(a); // a.y null: stats
  SPW_CUDA(cudaGetLastError());
  if (a.dq) {
    attn_dq_simple<<<qgrid, kThreads, 0, l.stream>>>(a);
    SPW_CUDA(cudaGetLastError());
  }
  if (a.dk || a.dv) {
    attn_dkv_simple<<<warp_grid(a.B * a.Hkv * a.S), kThreads, 0,
                      l.stream>>>(a);
    SPW_CUDA(cudaGetLastError());
  }
}

} // namespace

Kernel attention_kernel_for(Op op) {
  switch (op) {
  case Op::attention:
    return attention_fwd;
  case Op::attention_grad:
    return attention_bwd;
  default:
    return nullptr;
  }
}

} // namespace spw::cuda
