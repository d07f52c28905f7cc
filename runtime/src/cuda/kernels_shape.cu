//===- kernels_shape.cu - shape ops, reductions, gather and rope on the GPU ===//
//
// reshape, transpose, concat, slice(_grad), broadcast_to, the reductions
// (reduce_sum / reduce_mean / reduce_max / sum_to_shape), gather(_grad) and
// rope(_grad). The host side checks operands exactly like
// cpu/kernels_shape.cpp.
//
// Copies with strides (transpose, broadcast_to, slice) coalesce the result's
// dims on the host (size-1 dims dropped, dims merged where the source is
// contiguous across them); when the innermost source stride is 1 or 0 each
// thread moves a 16-byte vector, and a transpose that moves the contiguous
// dim goes through 32x32 shared-memory tiles so reads and writes are both
// coalesced.
//
// A reduction is a chain of [A, R, B] -> [A, B] passes, one per run of
// adjacent reduced dims, innermost first (intermediates in step scratch):
// B == 1 is a row reduction (a warp per row, or a block per row chunk when
// rows are long and few, then a second pass over the chunks); B > 1 a
// column reduction whose 32 lanes read 32 adjacent columns (coalesced), with
// R split into chunks over blocks and summed by a second pass. Float sums
// accumulate in float; integer sums wrap like the CPU's int64 total cast
// back.
//
// gather and gather_grad cannot fail from a kernel: the CPU backend rejects
// out-of-range indices; here gather writes zeros for such a row and
// gather_grad drops it. gather_grad adds with atomics (the order of the
// additions of a row varies run to run).
//
//===----------------------------------------------------------------------===//

#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "kernel_checks.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace spw::cuda {
namespace {

using namespace spw::checks;

constexpr int kThreads = 256;

// ---- host-side checks (cpu/kernels_shape.cpp's, message for message) -----

using Strides = std::array<int64_t, kMaxRank>;

std::vector<int64_t> gather_shape(const spw_tensor &data,
                                  const spw_tensor &idx, int64_t axis) {
  std::vector<int64_t> s(data.dims, data.dims + axis);
  s.insert(s.end(), idx.dims, idx.dims + idx.rank);
  s.insert(s.end(), data.dims + axis + 1, data.dims + data.rank);
  return s;
}

// ---- launch machinery ------------------------------------------------------

template <class T, int N> struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

bool aligned(const void *p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

unsigned grid_cap(const Launch &l, int64_t blocks_per_sm) {
  return unsigned(int64_t(std::max(l.sm_count, 1)) * blocks_per_sm);
}

// A grid-stride loop's grid: one wave of full-occupancy blocks at most.
unsigned grid_for(const Launch &l, int64_t work) {
  const int64_t blocks = (work + kThreads - 1) / kThreads;
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(blocks,
                                                         grid_cap(l, 8))));
}

// A coalesced iteration space (dims outermost first) and each operand's
// element strides over it.
template <int K> struct Strided {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t st[K][kMaxRank] = {};
};

template <int K>
Strided<K> coalesce(int rank, const int64_t *dims,
                    const std::array<const int64_t *, K> &st) {
  Strided<K> m;
  for (int d = 0; d < rank; ++d) {
    if (dims[d] == 1)
      continue;
    bool merge = m.rank > 0;
    for (int k = 0; merge && k < K; ++k)
      merge = m.st[k][m.rank - 1] == st[size_t(k)][d] * dims[d];
    if (merge) {
      m.dims[m.rank - 1] *= dims[d];
      for (int k = 0; k < K; ++k)
        m.st[k][m.rank - 1] = st[size_t(k)][d];
      continue;
    }
    m.dims[m.rank] = dims[d];
    for (int k = 0; k < K; ++k)
      m.st[k][m.rank] = st[size_t(k)][d];
    ++m.rank;
  }
  if (m.rank == 0) { // a single element
    m.rank = 1;
    m.dims[0] = 1;
  }
  return m;
}

// Offsets of index `o` over dims [0, count): count = m.rank - 1 for the
// outer dims of a row, m.rank for all. Unrolled so the kernel parameter is
// read with constant indices.
template <class I, int K>
__device__ __forceinline__ void offsets_of(const Strided<K> &m, int count,
                                           I o, int64_t (&off)[K]) {
#pragma unroll
  for (int k = 0; k < K; ++k)
    off[k] = 0;
#pragma unroll
  for (int d = kMaxRank - 1; d >= 0; --d) {
    if (d < count) {
      const I n = I(m.dims[d]);
      const I q = o / n;
      const I c = o - q * n;
      o = q;
#pragma unroll
      for (int k = 0; k < K; ++k)
        off[k] += int64_t(c) * m.st[k][d];
    }
  }
}

// ---- strided copies --------------------------------------------------------

// small[i] = big[off(i)] (gather), or big[off(i)] = small[i] (scatter), for
// the contiguous `small` whose coalesced dims are m (st[0]: strides into
// big). N elements per thread along the innermost dim, whose big stride is
// inner_st (1 or, gathering, 0 when N > 1).
template <int N, bool Scatter, class I, class U>
__global__ void __launch_bounds__(kThreads)
    strided_copy(int64_t nvec, Strided<1> m, I inner, int64_t inner_st,
                 U *big, U *small) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t v = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; v < nvec;
       v += stride) {
    const I i = I(v) * I(N);
    const I o = i / inner;
    const I c = i - o * inner;
    int64_t off[1];
    offsets_of<I>(m, m.rank - 1, o, off);
    const int64_t b = off[0] + int64_t(c) * inner_st;
    using V = Vec<U, N>;
    if constexpr (Scatter) {
      if constexpr (N == 1)
        big[b] = small[i];
      else
        *reinterpret_cast<V *>(big + b) =
            *reinterpret_cast<const V *>(small + int64_t(i));
    } else {
      V r;
      if constexpr (N == 1) {
        r.v[0] = big[b];
      } else if (inner_st == 0) {
        const U t = big[b];
#pragma unroll
        for (int j = 0; j < N; ++j)
          r.v[j] = t;
      } else {
        r = *reinterpret_cast<const V *>(big + b);
      }
      *reinterpret_cast<V *>(small + int64_t(i)) = r;
    }
  }
}

// A batch of 2-D transposes: y[.., a, .., b] = x[..] where x is contiguous
// along a (stride 1) and y along b. `batch` holds the other dims with their
// x (st[0]) and y (st[1]) strides; x's stride along b is xsb, y's along a
// ysa.
constexpr int kTile = 32;
constexpr int kTileRows = 8;

template <class U>
__global__ void __launch_bounds__(kTile * kTileRows)
    transpose_tiled(Strided<2> batch, int64_t tiles, int64_t tiles_a,
                    int64_t tiles_b, int64_t A, int64_t B, int64_t xsb,
                    int64_t ysa, const U *__restrict__ x, U *__restrict__ y) {
  __shared__ U tile[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t tb = t % tiles_b, rest = t / tiles_b;
    const int64_t ta = rest % tiles_a, bi = rest / tiles_a;
    int64_t off[2];
    offsets_of<int64_t>(batch, batch.rank, bi, off);
    const int64_t a0 = ta * kTile, b0 = tb * kTile;
    for (int j = ty; j < kTile; j += kTileRows) {
      const int64_t a = a0 + tx, b = b0 + j;
      if (a < A && b < B)
        tile[j][tx] = x[off[0] + a + b * xsb];
    }
    __syncthreads();
    for (int j = ty; j < kTile; j += kTileRows) {
      const int64_t a = a0 + j, b = b0 + tx;
      if (a < A && b < B)
        y[off[1] + a * ysa + b] = tile[tx][j];
    }
    __syncthreads();
  }
}

// Copies with a coalesced map m (st[0]: strides into big, base included in
// `big`), small contiguous.
template <bool Scatter, class U>
void launch_copy(const Launch &l, const Strided<1> &m, int64_t numel, U *big,
                 U *small) {
  const int64_t inner = m.dims[m.rank - 1], inner_st = m.st[0][m.rank - 1];
  const bool small_index = uint64_t(numel) <= 0xffffffffull;
  constexpr int V = int(16 / sizeof(U));
  bool vec = small_index && inner % V == 0 && aligned(small, 16) &&
             (inner_st == 1 || (inner_st == 0 && !Scatter));
  if (vec && inner_st == 1) {
    vec = aligned(big, 16);
    for (int d = 0; vec && d + 1 < m.rank; ++d)
      vec = m.st[0][d] % V == 0;
  }
  if (vec) {
    const int64_t nvec = numel / V;
    strided_copy<V, Scatter, uint32_t>
        <<<grid_for(l, nvec), kThreads, 0, l.stream>>>(
            nvec, m, uint32_t(inner), inner_st, big, small);
  } else if (small_index) {
    strided_copy<1, Scatter, uint32_t>
        <<<grid_for(l, numel), kThreads, 0, l.stream>>>(
            numel, m, uint32_t(inner), inner_st, big, small);
  } else {
    strided_copy<1, Scatter, uint64_t>
        <<<grid_for(l, numel), kThreads, 0, l.stream>>>(
            numel, m, uint64_t(inner), inner_st, big, small);
  }
  SPW_CUDA(cudaGetLastError());
}

// y (contiguous, dims y.dims) = x[base + sum idx_d * xs[d]], or the scatter.
template <bool Scatter, class U>
void copy_typed(const Launch &l, void *big, int64_t base,
                const spw_tensor &y, const int64_t *xs) {
  if (y.numel == 0)
    return;
  const Strided<1> m = coalesce<1>(y.rank, y.dims, {xs});
  launch_copy<Scatter>(l, m, y.numel, static_cast<U *>(big) + base,
                       static_cast<U *>(y.data));
}

template <bool Scatter>
void copy_bytes(const Launch &l, int32_t dtype, void *big, int64_t base,
                const spw_tensor &y, const int64_t *xs) {
  switch (dtype_size(dtype)) {
  case 8: return copy_typed<Scatter, uint64_t>(l, big, base, y, xs);
  case 4: return copy_typed<Scatter, uint32_t>(l, big, base, y, xs);
  case 1: return copy_typed<Scatter, uint8_t>(l, big, base, y, xs);
  default: fail("unsupported dtype %s", dtype_name(dtype));
  }
}

// ---- reshape, transpose, broadcast_to ---------------------------------------

void reshape_kernel(const Launch &l, spw_tensor *const *ins,
                    spw_tensor *const *outs, const int64_t *,
                    const double *) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  expect_dtype(y, x.dtype, "result");
  if (y.numel != x.numel)
    fail("cannot reshape %s (%lld elements) to %s (%lld elements)",
         x.shape().c_str(), (long long)x.numel, y.shape().c_str(),
         (long long)y.numel);
  if (y.data != x.data && x.numel > 0)
    SPW_CUDA(cudaMemcpyAsync(y.data, x.data, size_t(x.bytes()),
                             cudaMemcpyDeviceToDevice, l.stream));
}

template <class U>
void transpose_typed(const Launch &l, const spw_tensor &x, spw_tensor &y,
                     const int64_t *ys) {
  if (y.numel == 0)
    return;
  const Strided<1> m = coalesce<1>(y.rank, y.dims, {ys});
  const int r = m.rank;
  int k = -1; // the dim x is contiguous along
  for (int d = 0; d < r; ++d)
    if (m.st[0][d] == 1)
      k = d;
  if (m.st[0][r - 1] == 1 || k < 0 || m.dims[k] < 4 || m.dims[r - 1] < 4)
    return launch_copy<false>(l, m, y.numel, x.as<U>(), y.as<U>());
  // y's own (row-major) strides over the coalesced dims.
  int64_t yst[kMaxRank];
  int64_t s = 1;
  for (int d = r - 1; d >= 0; --d) {
    yst[d] = s;
    s *= m.dims[d];
  }
  Strided<2> batch;
  for (int d = 0; d < r - 1; ++d) {
    if (d == k)
      continue;
    batch.dims[batch.rank] = m.dims[d];
    batch.st[0][batch.rank] = m.st[0][d];
    batch.st[1][batch.rank] = yst[d];
    ++batch.rank;
  }
  const int64_t A = m.dims[k], B = m.dims[r - 1];
  const int64_t tiles_a = (A + kTile - 1) / kTile;
  const int64_t tiles_b = (B + kTile - 1) / kTile;
  const int64_t nbatch = y.numel / (A * B);
  const int64_t tiles = nbatch * tiles_a * tiles_b;
  const unsigned grid = unsigned(std::min<int64_t>(tiles, grid_cap(l, 8)));
  transpose_tiled<U><<<grid, dim3(kTile, kTileRows), 0, l.stream>>>(
      batch, tiles, tiles_a, tiles_b, A, B, m.st[0][r - 1], yst[k],
      x.as<const U>(), y.as<U>());
  SPW_CUDA(cudaGetLastError());
}

void transpose_kernel(const Launch &l, spw_tensor *const *ins,
                      spw_tensor *const *outs, const int64_t *iattrs,
                      const double *) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  expect_dtype(y, x.dtype, "result");
  if (x.rank > 0)
    need_iattrs(iattrs);
  int64_t xstride[kMaxRank], ys[kMaxRank];
  bool seen[kMaxRank] = {};
  std::vector<int64_t> want(size_t(x.rank));
  int64_t s = 1;
  for (int i = x.rank - 1; i >= 0; --i) {
    xstride[i] = s;
    s *= x.dims[i];
  }
  for (int i = 0; i < x.rank; ++i) {
    int64_t p = iattrs[i];
    if (p < 0 || p >= x.rank || seen[p])
      fail("perm is not a permutation of 0..%d", x.rank - 1);
    seen[p] = true;
    want[size_t(i)] = x.dims[p];
    ys[i] = xstride[p];
  }
  expect_shape(y, want, "result");
  switch (dtype_size(x.dtype)) {
  case 8: return transpose_typed<uint64_t>(l, x, y, ys);
  case 4: return transpose_typed<uint32_t>(l, x, y, ys);
  case 1: return transpose_typed<uint8_t>(l, x, y, ys);
  default: fail("unsupported dtype %s", dtype_name(x.dtype));
  }
}

void broadcast_to_kernel(const Launch &l, spw_tensor *const *ins,
                         spw_tensor *const *outs, const int64_t *,
                         const double *) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  expect_dtype(y, x.dtype, "result");
  Strides s = broadcast_strides(x, y.rank, y.dims, "x");
  copy_bytes<false>(l, x.dtype, x.data, 0, y, s.data());
}

// ---- concat -----------------------------------------------------------------

// dst[r * dpitch + c] = src[r * spitch + c] in units W (pitches in W).
template <class W>
__global__ void __launch_bounds__(kThreads)
    copy_rows(int64_t n, int64_t width, const W *__restrict__ src,
              int64_t spitch, W *__restrict__ dst, int64_t dpitch) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const int64_t r = i / width, c = i - r * width;
    dst[r * dpitch + c] = src[r * spitch + c];
  }
}

template <class W>
void launch_rows(const Launch &l, const char *src, int64_t spitch, char *dst,
                 int64_t dpitch, int64_t rows, int64_t width) {
  const int64_t w = int64_t(sizeof(W));
  const int64_t n = rows * (width / w);
  copy_rows<W><<<grid_for(l, n), kThreads, 0, l.stream>>>(
      n, width / w, reinterpret_cast<const W *>(src), spitch / w,
      reinterpret_cast<W *>(dst), dpitch / w);
  SPW_CUDA(cudaGetLastError());
}

// `rows` rows of `width` bytes, with byte pitches: the widest unit that
// divides every address, pitch and the width.
void copy_2d(const Launch &l, const void *src, int64_t spitch, void *dst,
             int64_t dpitch, int64_t rows, int64_t width) {
  if (rows == 0 || width == 0)
    return;
  if (rows == 1 || (spitch == width && dpitch == width)) {
    SPW_CUDA(cudaMemcpyAsync(dst, src, size_t(rows * width),
                             cudaMemcpyDeviceToDevice, l.stream));
    return;
  }
  const uint64_t bits = reinterpret_cast<uintptr_t>(src) |
                        reinterpret_cast<uintptr_t>(dst) | uint64_t(spitch) |
                        uint64_t(dpitch) | uint64_t(width);
  const char *s = static_cast<const char *>(src);
  char *d = static_cast<char *>(dst);
  if (bits % 16 == 0)
    launch_rows<uint4>(l, s, spitch, d, dpitch, rows, width);
  else if (bits % 8 == 0)
    launch_rows<uint2>(l, s, spitch, d, dpitch, rows, width);
  else if (bits % 4 == 0)
    launch_rows<uint32_t>(l, s, spitch, d, dpitch, rows, width);
  else if (bits % 2 == 0)
    launch_rows<uint16_t>(l, s, spitch, d, dpitch, rows, width);
  else
    launch_rows<uint8_t>(l, s, spitch, d, dpitch, rows, width);
}

void concat_kernel(const Launch &l, spw_tensor *const *ins,
                   spw_tensor *const *outs, const int64_t *iattrs,
                   const double *) {
  need_iattrs(iattrs);
  const int64_t axis = iattrs[0], n = iattrs[1];
  if (n < 1)
    fail("operand count %lld must be >= 1", (long long)n);
  spw_tensor &y = output(outs, 0, "y");
  const spw_tensor &x0 = input(ins, 0, "x0");
  if (x0.rank < 1)
    fail("operands must have rank >= 1, got x0 %s", x0.shape().c_str());
  axis_of(x0, axis);
  std::vector<const spw_tensor *> xs;
  int64_t total = 0;
  for (int64_t k = 0; k < n; ++k) {
    const std::string name = format("x%lld", (long long)k);
    const spw_tensor &xk = input(ins, int(k), name.c_str());
    bool ok = xk.dtype == x0.dtype && xk.rank == x0.rank;
    for (int d = 0; ok && d < x0.rank; ++d)
      ok = d == axis || xk.dims[d] == x0.dims[d];
    if (!ok)
      fail("%s is %s %s, but x0 is %s %s (only axis %lld may differ)",
           name.c_str(), dtype_name(xk.dtype), xk.shape().c_str(),
           dtype_name(x0.dtype), x0.shape().c_str(), (long long)axis);
    total += xk.dims[axis];
    xs.push_back(&xk);
  }
  std::vector<int64_t> want(x0.dims, x0.dims + x0.rank);
  want[size_t(axis)] = total;
  expect_dtype(y, x0.dtype, "result");
  expect_shape(y, want, "result");
  const int64_t outer = prod(x0.dims, 0, axis);
  const int64_t inner = prod(x0.dims, axis + 1, x0.rank) * dtype_size(x0.dtype);
  char *dst = static_cast<char *>(y.data);
  int64_t at = 0; // byte offset of x_k's block within a row of y
  for (const spw_tensor *xk : xs) {
    const int64_t chunk = xk->dims[axis] * inner;
    copy_2d(l, xk->data, chunk, dst + at, total * inner, outer, chunk);
    at += chunk;
  }
}

// ---- slice, slice_grad ------------------------------------------------------

// cpu/kernels_shape.cpp's slice_map: validates i[starts, steps]; fills small's
// element strides into big and returns the offset of small[0].
int64_t slice_map(const spw_tensor &big, const spw_tensor &small,
                  const int64_t *iattrs, int64_t *strides,
                  const char *bigname, const char *smallname) {
  if (small.rank != big.rank)
    fail("%s has rank %d, but %s has rank %d", smallname, small.rank, bigname,
         big.rank);
  if (small.dtype != big.dtype)
    fail("%s is %s, but %s is %s", smallname, dtype_name(small.dtype),
         bigname, dtype_name(big.dtype));
  const int r = big.rank;
  if (r > 0)
    need_iattrs(iattrs);
  int64_t bs[kMaxRank];
  int64_t s = 1;
  for (int d = r - 1; d >= 0; --d) {
    bs[d] = s;
    s *= big.dims[d];
  }
  const bool empty = small.numel == 0;
  int64_t base = 0;
  for (int d = 0; d < r; ++d) {
    const int64_t start = iattrs[d], step = iattrs[r + d], n = small.dims[d];
    if (step == 0)
      fail("step of dim %d is 0", d);
    if (!empty) {
      int64_t span = 0, last = 0;
      const bool overflow = __builtin_mul_overflow(n - 1, step, &span) ||
                            __builtin_add_overflow(start, span, &last);
      if (overflow || start < 0 || start >= big.dims[d] || last < 0 ||
          last >= big.dims[d])
        fail("dim %d: %lld elements from %lld with step %lld do not fit in "
             "size %lld (%s %s, %s %s)",
             d, (long long)n, (long long)start, (long long)step,
             (long long)big.dims[d], smallname, small.shape().c_str(), bigname,
             big.shape().c_str());
      base += start * bs[d];
    }
    strides[d] = step * bs[d];
  }
  return base;
}

void slice_kernel(const Launch &l, spw_tensor *const *ins,
                  spw_tensor *const *outs, const int64_t *iattrs,
                  const double *) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  int64_t xs[kMaxRank] = {};
  const int64_t base = slice_map(x, y, iattrs, xs, "x", "result");
  if (y.numel == 0)
    return;
  copy_bytes<false>(l, x.dtype, x.data, base, y, xs);
}

void slice_grad_kernel(const Launch &l, spw_tensor *const *ins,
                       spw_tensor *const *outs, const int64_t *iattrs,
                       const double *) {
  const spw_tensor &dy = input(ins, 0, "dy");
  spw_tensor &dx = output(outs, 0, "dx");
  int64_t xs[kMaxRank] = {};
  const int64_t base = slice_map(dx, dy, iattrs, xs, "result", "dy");
  if (dx.numel > 0)
    SPW_CUDA(cudaMemsetAsync(dx.data, 0, size_t(dx.bytes()), l.stream));
  if (dy.numel == 0)
    return;
  // Distinct elements of dy land on distinct elements of dx (steps != 0):
  // assignment is the sum.
  copy_bytes<true>(l, dx.dtype, dx.data, base, dy, xs);
}

// ---- reductions -------------------------------------------------------------

// Op: Acc (the accumulator), init, load (an element to Acc), combine, and
// store (Acc and the final scale to an element).
template <class T> struct SumOp {
  // Integers accumulate unsigned: wrapping, like the CPU's int64 total
  // cast back to T.
  using Acc = std::conditional_t<std::is_floating_point_v<T>, float,
                                 unsigned long long>;
  // Floats start at -0, the identity of IEEE addition, so a sum of -0s is
  // -0 as on the CPU (+0 + -0 would be +0); an empty sum is +0 (`empty`).
  static __device__ __forceinline__ Acc init() {
    if constexpr (std::is_floating_point_v<T>)
      return -0.0f;
    else
      return Acc(0);
  }
  static __device__ __forceinline__ Acc empty() { return Acc(0); }
  static __device__ __forceinline__ Acc load(T v) {
    if constexpr (std::is_floating_point_v<T>)
      return v;
    else
      return Acc(static_cast<long long>(v));
  }
  static __device__ __forceinline__ Acc combine(Acc a, Acc b) { return a + b; }
  static __device__ __forceinline__ T store(Acc a, float scale) {
    if constexpr (std::is_floating_point_v<T>)
      return a * scale;
    else
      return T(static_cast<long long>(a)); // integer sums are never scaled
  }
};

// uint8_t is SPW_BOOL: nonzero reads as 1, as on the CPU.
template <class T> struct MaxOp {
  using Acc = std::conditional_t<
      std::is_floating_point_v<T>, float,
      std::conditional_t<sizeof(T) == 8, long long, int>>;
  static __device__ __forceinline__ Acc init() {
    if constexpr (std::is_floating_point_v<T>)
      return -INFINITY;
    else if constexpr (std::is_same_v<T, uint8_t>)
      return 0;
    else if constexpr (sizeof(T) == 8)
      return -0x7fffffffffffffffll - 1;
    else
      return -0x7fffffff - 1;
  }
  static __device__ __forceinline__ Acc load(T v) {
    if constexpr (std::is_same_v<T, uint8_t>)
      return v != 0 ? 1 : 0;
    else
      return Acc(v);
  }
  static __device__ __forceinline__ Acc combine(Acc a, Acc b) {
    if constexpr (std::is_floating_point_v<T>)
      return (b > a || isnan(b)) ? b : a; // NaN propagates
    else
      return b > a ? b : a;
  }
  static __device__ __forceinline__ T store(Acc a, float) { return T(a); }
  static __device__ __forceinline__ Acc empty() { return init(); }
};

__device__ __forceinline__ int64_t imin(int64_t a, int64_t b) {
  return a < b ? a : b;
}

template <class Op, class A>
__device__ __forceinline__ A warp_reduce(A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = Op::combine(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The block-wide reduction of v; the result is valid in thread 0.
template <class Op, class A> __device__ A block_reduce(A v) {
  __shared__ A part[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_reduce<Op>(v);
  __syncthreads(); // part may still be read by a previous call
  if (lane == 0)
    part[warp] = v;
  __syncthreads();
  const int nwarps = (blockDim.x + 31) / 32;
  v = lane < nwarps ? part[lane] : Op::init();
  if (warp == 0)
    v = warp_reduce<Op>(v);
  return v;
}

// Folds x[begin, end) (begin and end multiples of N, x aligned for N) into
// acc, with threads t = first, first + step, ...
template <int N, class Op, class T>
__device__ __forceinline__ typename Op::Acc
fold_range(typename Op::Acc acc, const T *x, int64_t begin, int64_t end,
           int first, int step) {
  const int64_t jump = int64_t(step) * N;
  for (int64_t k = begin + int64_t(first) * N; k < end; k += jump) {
    if constexpr (N == 1) {
      acc = Op::combine(acc, Op::load(x[k]));
    } else {
      const Vec<T, N> v = *reinterpret_cast<const Vec<T, N> *>(x + k);
#pragma unroll
      for (int j = 0; j < N; ++j)
        acc = Op::combine(acc, Op::load(v.v[j]));
    }
  }
  return acc;
}

// y[r] = reduce(x[r*R, (r+1)*R)), one warp per row.
template <int N, class Op, class T>
__global__ void __launch_bounds__(kThreads)
    reduce_rows_warp(const T *__restrict__ x, T *__restrict__ y, int64_t rows,
                     int64_t R, float scale) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t(gridDim.x) * (kThreads / 32);
  for (int64_t r = int64_t(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
       r < rows; r += warps) {
    auto acc = fold_range<N, Op>(Op::init(), x + r * R, 0, R, lane, 32);
    acc = warp_reduce<Op>(acc);
    if (lane == 0)
      y[r] = Op::store(acc, scale);
  }
}

// y[r] = reduce(row r), one thread per row (rows shorter than a warp).
template <class Op, class T>
__global__ void __launch_bounds__(kThreads)
    reduce_rows_thread(const T *__restrict__ x, T *__restrict__ y,
                       int64_t rows, int64_t R, float scale) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += stride)
    y[r] = Op::store(fold_range<1, Op>(Op::init(), x + r * R, 0, R, 0, 1),
                     scale);
}

// y[b] = reduce(chunk b % chunks of row b / chunks), one block per chunk.
template <int N, class Op, class T>
__global__ void __launch_bounds__(kThreads)
    reduce_rows_block(const T *__restrict__ x, T *__restrict__ y,
                      int64_t rows, int64_t R, int64_t chunks,
                      int64_t chunk_len, float scale) {
  for (int64_t b = blockIdx.x; b < rows * chunks; b += gridDim.x) {
    const int64_t r = b / chunks, begin = (b % chunks) * chunk_len;
    const int64_t end = imin(R, begin + chunk_len);
    auto acc = fold_range<N, Op>(Op::init(), x + r * R, begin, end,
                                 int(threadIdx.x), kThreads);
    acc = block_reduce<Op>(acc);
    if (threadIdx.x == 0)
      y[b] = Op::store(acc, scale);
  }
}

// Column reduction of x[A, R, B] over R: block (32 x 8) t covers columns
// [tb*32, tb*32 + 32) of slab a and rows [ch*chunk_len, ...) of chunk ch;
// writes y[(ch * A + a) * B + b] (with one chunk, y[a, b]).
constexpr int kColRows = 8;

template <class Op, class T>
__global__ void __launch_bounds__(32 * kColRows)
    reduce_cols(const T *__restrict__ x, T *__restrict__ y, int64_t A,
                int64_t R, int64_t B, int64_t tiles_b, int64_t chunks,
                int64_t chunk_len, float scale) {
  using Acc = typename Op::Acc;
  __shared__ Acc part[kColRows][33];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t total = A * tiles_b * chunks;
  for (int64_t t = blockIdx.x; t < total; t += gridDim.x) {
    const int64_t ch = t % chunks, rest = t / chunks;
    const int64_t tb = rest % tiles_b, a = rest / tiles_b;
    const int64_t b = tb * 32 + tx;
    const int64_t r0 = ch * chunk_len, r1 = imin(R, r0 + chunk_len);
    Acc acc = Op::init();
    if (b < B) {
      const T *p = x + a * R * B + b;
      for (int64_t r = r0 + ty; r < r1; r += kColRows)
        acc = Op::combine(acc, Op::load(p[r * B]));
    }
    part[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && b < B) {
#pragma unroll
      for (int j = 1; j < kColRows; ++j)
        acc = Op::combine(acc, part[j][tx]);
      y[(ch * A + a) * B + b] = Op::store(acc, scale);
    }
    __syncthreads();
  }
}

template <class Op, class T>
__global__ void __launch_bounds__(kThreads)
    fill_value(T *y, int64_t n, float scale) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    y[i] = Op::store(Op::empty(), scale);
}

template <class Op, class T>
void rows_pass(const Launch &l, const T *x, T *y, int64_t rows, int64_t R,
               float scale) {
  constexpr int V = int(16 / sizeof(T));
  const bool vec = R % V == 0 && aligned(x, 16);
  if (R < 32) {
    reduce_rows_thread<Op><<<grid_for(l, rows), kThreads, 0, l.stream>>>(
        x, y, rows, R, scale);
    SPW_CUDA(cudaGetLastError());
    return;
  }
  if (R <= 2048) {
    const int64_t blocks = (rows + kThreads / 32 - 1) / (kThreads / 32);
    const unsigned grid =
        unsigned(std::min<int64_t>(blocks, grid_cap(l, 8)));
    if (vec)
      reduce_rows_warp<V, Op><<<grid, kThreads, 0, l.stream>>>(x, y, rows, R,
                                                               scale);
    else
      reduce_rows_warp<1, Op><<<grid, kThreads, 0, l.stream>>>(x, y, rows, R,
                                                               scale);
    SPW_CUDA(cudaGetLastError());
    return;
  }
  // Long rows: a block per row; few of them are split in chunks (a chunk
  // at least 8192 elements) summed by a second pass.
  const int64_t target = grid_cap(l, 4);
  int64_t chunks = 1;
  if (rows < target)
    chunks = std::max<int64_t>(
        1, std::min((target + rows - 1) / rows, R / 8192));
  int64_t chunk_len = (R + chunks - 1) / chunks;
  chunk_len = (chunk_len + V - 1) / V * V; // keeps vector alignment
  chunks = (R + chunk_len - 1) / chunk_len;
  T *dst = y;
  if (chunks > 1)
    dst = static_cast<T *>(
        l.scratch(rows * chunks * int64_t(sizeof(T)), "reduction partials"));
  const float s = chunks > 1 ? 1.0f : scale;
  const unsigned grid =
      unsigned(std::min<int64_t>(rows * chunks, grid_cap(l, 8)));
  if (vec)
    reduce_rows_block<V, Op><<<grid, kThreads, 0, l.stream>>>(
        x, dst, rows, R, chunks, chunk_len, s);
  else
    reduce_rows_block<1, Op><<<grid, kThreads, 0, l.stream>>>(
        x, dst, rows, R, chunks, chunk_len, s);
  SPW_CUDA(cudaGetLastError());
  if (chunks > 1)
    rows_pass<Op>(l, dst, y, rows, chunks, scale);
}

template <class Op, class T>
void cols_pass(const Launch &l, const T *x, T *y, int64_t A, int64_t R,
               int64_t B, float scale, bool split = true) {
  const int64_t tiles_b = (B + 31) / 32;
  const int64_t tiles = A * tiles_b;
  // Enough blocks to fill the GPU, a chunk at least 64 rows.
  const int64_t target = grid_cap(l, 8);
  int64_t chunks = 1;
  if (split && tiles < target)
    chunks = std::max<int64_t>(
        1, std::min((target + tiles - 1) / tiles, R / 64));
  const int64_t chunk_len = (R + chunks - 1) / chunks;
  chunks = (R + chunk_len - 1) / chunk_len;
  T *dst = y;
  if (chunks > 1)
    dst = static_cast<T *>(
        l.scratch(chunks * A * B * int64_t(sizeof(T)), "reduction partials"));
  const unsigned grid =
      unsigned(std::min<int64_t>(tiles * chunks, grid_cap(l, 8)));
  reduce_cols<Op><<<grid, dim3(32, kColRows), 0, l.stream>>>(
      x, dst, A, R, B, tiles_b, chunks, chunk_len,
      chunks > 1 ? 1.0f : scale);
  SPW_CUDA(cudaGetLastError());
  if (chunks > 1) // partials [chunks, A*B]: reduce the leading axis
    cols_pass<Op>(l, dst, y, 1, chunks, A * B, scale, false);
}

// Reduces x into y, where ys are y's strides over x's index space (0 on
// reduced dims, row-major over the kept ones); y = reduction * scale.
template <class Op, class T>
void reduce_typed(const Launch &l, const spw_tensor &x, spw_tensor &y,
                  const int64_t *ys, float scale) {
  if (y.numel == 0)
    return;
  if (x.numel == 0) { // an empty reduction: the identity, scaled
    fill_value<Op><<<grid_for(l, y.numel), kThreads, 0, l.stream>>>(
        y.as<T>(), y.numel, scale);
    SPW_CUDA(cudaGetLastError());
    return;
  }
  // Runs of adjacent kept / reduced dims (size-1 dims dropped).
  std::vector<std::pair<int64_t, bool>> g;
  for (int d = 0; d < x.rank; ++d) {
    if (x.dims[d] == 1)
      continue;
    const bool red = ys[d] == 0;
    if (!g.empty() && g.back().second == red)
      g.back().first *= x.dims[d];
    else
      g.push_back({x.dims[d], red});
  }
  auto has_reduced = [&] {
    for (auto &e : g)
      if (e.second)
        return true;
    return false;
  };
  if (!has_reduced()) { // every reduced dim has size 1
    if constexpr (!std::is_same_v<T, uint8_t>) {
      if (scale == 1.0f) {
        SPW_CUDA(cudaMemcpyAsync(y.data, x.data, size_t(y.bytes()),
                                 cudaMemcpyDeviceToDevice, l.stream));
        return;
      }
    }
    // A bool max normalizes bytes: a pass over rows of one.
    return rows_pass<Op>(l, x.as<const T>(), y.as<T>(), y.numel, 1, scale);
  }
  const T *src = x.as<const T>();
  while (true) {
    size_t p = g.size();
    while (!g[p - 1].second)
      --p;
    --p; // the innermost reduced run
    int64_t A = 1, B = 1;
    for (size_t i = 0; i < p; ++i)
      A *= g[i].first;
    for (size_t i = p + 1; i < g.size(); ++i)
      B *= g[i].first;
    const int64_t R = g[p].first;
    g.erase(g.begin() + std::ptrdiff_t(p));
    if (p > 0 && p < g.size() && !g[p - 1].second && !g[p].second) {
      g[p - 1].first *= g[p].first;
      g.erase(g.begin() + std::ptrdiff_t(p));
    }
    const bool last = !has_reduced();
    T *dst = last ? y.as<T>()
                  : static_cast<T *>(l.scratch(A * B * int64_t(sizeof(T)),
                                               "reduction intermediate"));
    const float s = last ? scale : 1.0f;
    if (B == 1)
      rows_pass<Op>(l, src, dst, A, R, s);
    else
      cols_pass<Op>(l, src, dst, A, R, B, s);
    if (last)
      return;
    src = dst;
  }
}

template <template <class> class Op>
void reduce_dispatch(const Launch &l, const spw_tensor &x, spw_tensor &y,
                     const int64_t *ys, float scale, bool with_bool) {
  switch (x.dtype) {
  case SPW_F32: return reduce_typed<Op<float>, float>(l, x, y, ys, scale);
  case SPW_I64:
    return reduce_typed<Op<int64_t>, int64_t>(l, x, y, ys, scale);
  case SPW_I32:
    return reduce_typed<Op<int32_t>, int32_t>(l, x, y, ys, scale);
  case SPW_BOOL:
    if (with_bool)
      return reduce_typed<Op<uint8_t>, uint8_t>(l, x, y, ys, scale);
    [[fallthrough]];
  default: fail("unsupported dtype %s", dtype_name(x.dtype));
  }
}

// cpu/kernels_shape.cpp's reduce_strides: validates i[n, axes] against x and y
// (keepdims or not), fills ys and returns the count reduced per result.
int64_t reduce_strides(const spw_tensor &x, const spw_tensor &y,
                       const int64_t *iattrs, int64_t *ys) {
  expect_dtype(y, x.dtype, "result");
  need_iattrs(iattrs);
  const int64_t n = iattrs[0];
  if (n <= 0 || n > x.rank)
    fail("axis count %lld is invalid for rank %d", (long long)n, x.rank);
  bool reduced[kMaxRank] = {};
  for (int64_t i = 0; i < n; ++i) {
    int64_t a = iattrs[1 + i];
    if (a < 0 || a >= x.rank)
      fail("axis %lld is out of range for rank %d", (long long)a, x.rank);
    reduced[a] = true;
  }
  std::vector<int64_t> keep, squeezed;
  int64_t count = 1;
  for (int i = 0; i < x.rank; ++i) {
    keep.push_back(reduced[i] ? 1 : x.dims[i]);
    if (!reduced[i])
      squeezed.push_back(x.dims[i]);
    else
      count *= x.dims[i];
  }
  if (!shape_is(y, keep) && !shape_is(y, squeezed))
    fail("result has shape %s, expected %s (keepdims) or %s", y.shape().c_str(),
         vec_str(keep).c_str(), vec_str(squeezed).c_str());
  int64_t s = 1;
  for (int i = x.rank - 1; i >= 0; --i) {
    ys[i] = reduced[i] ? 0 : s;
    if (!reduced[i])
      s *= x.dims[i];
  }
  return count;
}

template <bool Mean>
void reduce_kernel(const Launch &l, spw_tensor *const *ins,
                   spw_tensor *const *outs, const int64_t *iattrs,
                   const double *) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  int64_t ys[kMaxRank] = {};
  const int64_t count = reduce_strides(x, y, iattrs, ys);
  double scale = 1.0;
  if (Mean) {
    if (x.dtype != SPW_F32)
      fail("reduce_mean supports only f32, got %s", dtype_name(x.dtype));
    scale = count > 0 ? 1.0 / double(count) : NAN;
  }
  reduce_dispatch<SumOp>(l, x, y, ys, float(scale), false);
}

void reduce_max_kernel(const Launch &l, spw_tensor *const *ins,
                       spw_tensor *const *outs, const int64_t *iattrs,
                       const double *) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  int64_t ys[kMaxRank] = {};
  reduce_strides(x, y, iattrs, ys);
  reduce_dispatch<MaxOp>(l, x, y, ys, 1.0f, true);
}

void sum_to_shape_kernel(const Launch &l, spw_tensor *const *ins,
                         spw_tensor *const *outs, const int64_t *,
                         const double *) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  expect_dtype(y, x.dtype, "result");
  Strides s = broadcast_strides(y, x.rank, x.dims, "result");
  reduce_dispatch<SumOp>(l, x, y, s.data(), 1.0f, false);
}

// ---- gather, gather_grad ----------------------------------------------------

template <class Idx>
__device__ __forceinline__ int64_t row_of(const Idx *idx, int64_t j,
                                          int64_t n) {
  int64_t v = int64_t(idx[j]);
  if (v < 0)
    v += n;
  return v; // out of range when not in [0, n)
}

// y[o, j, k] = data[o, idx[j], k] with k in vectors of N (innerv of them).
template <int N, class I, class U, class Idx>
__global__ void __launch_bounds__(kThreads)
    gather_rows(const U *__restrict__ data, const Idx *__restrict__ idx,
                U *__restrict__ y, int64_t n, I ni, I innerv, int64_t nvec) {
  using V = Vec<U, N>;
  const V *src = reinterpret_cast<const V *>(data);
  V *dst = reinterpret_cast<V *>(y);
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t v = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; v < nvec;
       v += stride) {
    const I q = I(v) / innerv, k = I(v) - q * innerv;
    const I o = q / ni, j = q - o * ni;
    const int64_t row = row_of(idx, int64_t(j), n);
    V r;
    if (row >= 0 && row < n) {
      r = src[(int64_t(o) * n + row) * int64_t(innerv) + int64_t(k)];
    } else {
#pragma unroll
      for (int e = 0; e < N; ++e)
        r.v[e] = U(0);
    }
    dst[v] = r;
  }
}

template <int N, class U, class Idx>
void launch_gather(const Launch &l, const U *data, const Idx *idx, U *y,
                   int64_t n, int64_t ni, int64_t inner, int64_t numel) {
  const int64_t nvec = numel / N;
  if (uint64_t(numel) <= 0xffffffffull)
    gather_rows<N, uint32_t><<<grid_for(l, nvec), kThreads, 0, l.stream>>>(
        data, idx, y, n, uint32_t(ni), uint32_t(inner / N), nvec);
  else
    gather_rows<N, uint64_t><<<grid_for(l, nvec), kThreads, 0, l.stream>>>(
        data, idx, y, n, uint64_t(ni), uint64_t(inner / N), nvec);
  SPW_CUDA(cudaGetLastError());
}

template <class U, class Idx>
void gather_typed(const Launch &l, const spw_tensor &data,
                  const spw_tensor &idx, spw_tensor &y, int64_t n, int64_t ni,
                  int64_t inner) {
  constexpr int V = int(16 / sizeof(U));
  const U *pd = data.as<const U>();
  const Idx *pi = idx.as<const Idx>();
  U *py = y.as<U>();
  if (inner % V == 0 && aligned(pd, 16) && aligned(py, 16))
    launch_gather<V>(l, pd, pi, py, n, ni, inner, y.numel);
  else
    launch_gather<1>(l, pd, pi, py, n, ni, inner, y.numel);
}

template <class U>
void gather_index(const Launch &l, const spw_tensor &data,
                  const spw_tensor &idx, spw_tensor &y, int64_t n, int64_t ni,
                  int64_t inner) {
  if (idx.dtype == SPW_I64)
    gather_typed<U, int64_t>(l, data, idx, y, n, ni, inner);
  else
    gather_typed<U, int32_t>(l, data, idx, y, n, ni, inner);
}

void gather_kernel(const Launch &l, spw_tensor *const *ins,
                   spw_tensor *const *outs, const int64_t *iattrs,
                   const double *) {
  const spw_tensor &data = input(ins, 0, "data"),
                   &idx = input(ins, 1, "indices");
  spw_tensor &y = output(outs, 0, "y");
  expect_index_dtype(idx, "indices");
  if (data.rank < 1)
    fail("data must have rank >= 1");
  const int64_t axis = axis_of(data, need_iattrs(iattrs)[0]);
  expect_dtype(y, data.dtype, "result");
  expect_shape(y, gather_shape(data, idx, axis), "result");
  // Index range checks are the CPU backend's: see the file comment.
  const int64_t n = data.dims[axis], ni = idx.numel;
  const int64_t inner = prod(data.dims, axis + 1, data.rank);
  if (y.numel == 0)
    return;
  switch (dtype_size(data.dtype)) {
  case 8: return gather_index<uint64_t>(l, data, idx, y, n, ni, inner);
  case 4: return gather_index<uint32_t>(l, data, idx, y, n, ni, inner);
  case 1: return gather_index<uint8_t>(l, data, idx, y, n, ni, inner);
  default: fail("unsupported dtype %s", dtype_name(data.dtype));
  }
}

// ddata[o, idx[j], k] += dy[o, j, k], k in vectors of N.
template <int N, class Idx>
__global__ void __launch_bounds__(kThreads)
    scatter_add_rows(const Idx *__restrict__ idx, const float *__restrict__ dy,
                     float *dd, int64_t n, int64_t ni, int64_t innerv,
                     int64_t nvec) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t v = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; v < nvec;
       v += stride) {
    const int64_t q = v / innerv, k = v - q * innerv;
    const int64_t o = q / ni, j = q - o * ni;
    const int64_t row = row_of(idx, j, n);
    if (row < 0 || row >= n)
      continue;
    const int64_t at = (o * n + row) * innerv + k;
    if constexpr (N == 4) {
      const float4 g = reinterpret_cast<const float4 *>(dy)[v];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      atomicAdd(reinterpret_cast<float4 *>(dd) + at, g);
#else
      float *p = dd + at * 4;
      atomicAdd(p, g.x);
      atomicAdd(p + 1, g.y);
      atomicAdd(p + 2, g.z);
      atomicAdd(p + 3, g.w);
#endif
    } else {
      atomicAdd(dd + at, dy[v]);
    }
  }
}

template <class Idx>
void gather_grad_typed(const Launch &l, const spw_tensor &idx,
                       const spw_tensor &dy, spw_tensor &dd, int64_t n,
                       int64_t ni, int64_t inner) {
  const Idx *pi = idx.as<const Idx>();
  const float *pg = dy.as<const float>();
  float *pd = dd.as<float>();
  if (inner % 4 == 0 && aligned(pg, 16) && aligned(pd, 16)) {
    const int64_t nvec = dy.numel / 4;
    scatter_add_rows<4><<<grid_for(l, nvec), kThreads, 0, l.stream>>>(
        pi, pg, pd, n, ni, inner / 4, nvec);
  } else {
    scatter_add_rows<1><<<grid_for(l, dy.numel), kThreads, 0, l.stream>>>(
        pi, pg, pd, n, ni, inner, dy.numel);
  }
  SPW_CUDA(cudaGetLastError());
}

void gather_grad_kernel(const Launch &l, spw_tensor *const *ins,
                        spw_tensor *const *outs, const int64_t *iattrs,
                        const double *) {
  const spw_tensor &idx = input(ins, 0, "indices"), &dy = input(ins, 1, "dy");
  spw_tensor &dd = output(outs, 0, "ddata");
  expect_index_dtype(idx, "indices");
  expect_dtype(dy, SPW_F32, "dy");
  expect_dtype(dd, SPW_F32, "result");
  if (dd.rank < 1)
    fail("result must have rank >= 1");
  const int64_t axis = axis_of(dd, need_iattrs(iattrs)[0]);
  expect_shape(dy, gather_shape(dd, idx, axis), "dy");
  // Index range checks are the CPU backend's: see the file comment.
  const int64_t n = dd.dims[axis], ni = idx.numel;
  const int64_t inner = prod(dd.dims, axis + 1, dd.rank);
  if (dd.numel == 0)
    return;
  SPW_CUDA(cudaMemsetAsync(dd.data, 0, size_t(dd.bytes()), l.stream));
  if (dy.numel == 0)
    return;
  if (idx.dtype == SPW_I64)
    gather_grad_typed<int64_t>(l, idx, dy, dd, n, ni, inner);
  else
    gather_grad_typed<int32_t>(l, idx, dy, dd, n, ni, inner);
}

// ---- rope, rope_grad --------------------------------------------------------

// One thread per pair (d, d + h) of a row of x [rows, 2h]: cos and sin are
// read through their broadcast strides, m over x's leading dims (st[0]
// cos, st[1] sin) and cs / ss along the last dim. rope:
//   y[d] = x[d] c[d] - x[d+h] s[d],  y[d+h] = x[d+h] c[d+h] + x[d] s[d+h];
// rope_grad (its transpose):
//   dx[d] = dy[d] c[d] + dy[d+h] s[d+h],
//   dx[d+h] = dy[d+h] c[d+h] - dy[d] s[d].
template <bool Grad, class I>
__global__ void __launch_bounds__(kThreads)
    rope_pairs(int64_t npairs, I h, Strided<2> m, int64_t cs, int64_t ss,
               const float *__restrict__ x, const float *__restrict__ c,
               const float *__restrict__ s, float *__restrict__ y) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < npairs;
       p += stride) {
    const I r = I(p) / h, d = I(p) - r * h;
    int64_t off[2];
    offsets_of<I>(m, m.rank, r, off);
    const int64_t lo = int64_t(d), hi = int64_t(d) + int64_t(h);
    const int64_t xr = int64_t(r) * 2 * int64_t(h);
    const float x1 = x[xr + lo], x2 = x[xr + hi];
    const float c1 = c[off[0] + lo * cs], c2 = c[off[0] + hi * cs];
    const float s1 = s[off[1] + lo * ss], s2 = s[off[1] + hi * ss];
    if constexpr (!Grad) {
      y[xr + lo] = x1 * c1 - x2 * s1;
      y[xr + hi] = x2 * c2 + x1 * s2;
    } else {
      y[xr + lo] = x1 * c1 + x2 * s2;
      y[xr + hi] = x2 * c2 - x1 * s1;
    }
  }
}

template <bool Grad>
void rope_kernel(const Launch &l, spw_tensor *const *ins,
                 spw_tensor *const *outs, const int64_t *, const double *) {
  const char *xname = Grad ? "dy" : "x";
  const spw_tensor &x = input(ins, 0, xname), &c = input(ins, 1, "cos"),
                   &s = input(ins, 2, "sin");
  spw_tensor &y = output(outs, 0, Grad ? "dx" : "y");
  expect_dtype(x, SPW_F32, xname);
  expect_like(y, x, "result", xname);
  if (x.rank < 1)
    fail("%s must have rank >= 1, got %s", xname, x.shape().c_str());
  const int64_t D = x.dims[x.rank - 1];
  if (D % 2 != 0)
    fail("the last dim of %s %s must be even", xname, x.shape().c_str());
  expect_dtype(c, SPW_F32, "cos");
  const Strides cst = broadcast_strides(c, x.rank, x.dims, "cos");
  expect_dtype(s, SPW_F32, "sin");
  const Strides sst = broadcast_strides(s, x.rank, x.dims, "sin");
  if (x.numel == 0)
    return;
  const Strided<2> m =
      coalesce<2>(x.rank - 1, x.dims, {cst.data(), sst.data()});
  const int64_t h = D / 2, npairs = x.numel / 2;
  const int64_t cs = cst[size_t(x.rank - 1)], ss = sst[size_t(x.rank - 1)];
  const float *px = x.as<const float>(), *pc = c.as<const float>(),
              *ps = s.as<const float>();
  float *py = y.as<float>();
  if (uint64_t(npairs) <= 0xffffffffull)
    rope_pairs<Grad, uint32_t><<<grid_for(l, npairs), kThreads, 0,
                                 l.stream>>>(npairs, uint32_t(h), m, cs, ss,
                                             px, pc, ps, py);
  else
    rope_pairs<Grad, uint64_t><<<grid_for(l, npairs), kThreads, 0,
                                 l.stream>>>(npairs, uint64_t(h), m, cs, ss,
                                             px, pc, ps, py);
  SPW_CUDA(cudaGetLastError());
}

} // namespace

Kernel shape_kernel_for(Op op) {
  switch (op) {
  case Op::reshape: return reshape_kernel;
  case Op::transpose: return transpose_kernel;
  case Op::concat: return concat_kernel;
  case Op::slice: return slice_kernel;
  case Op::slice_grad: return slice_grad_kernel;
  case Op::broadcast_to: return broadcast_to_kernel;
  case Op::sum_to_shape: return sum_to_shape_kernel;
  case Op::reduce_sum: return reduce_kernel<false>;
  case Op::reduce_mean: return reduce_kernel<true>;
  case Op::reduce_max: return reduce_max_kernel;
  case Op::gather: return gather_kernel;
  case Op::gather_grad: return gather_grad_kernel;
  case Op::rope: return rope_kernel<false>;
  case Op::rope_grad: return rope_kernel<true>;
  default: return nullptr;
  }
}

} // namespace spw::cuda
