//===- kernels_elementwise.cu - elementwise ops on the GPU -----------------===//
//
// The unary, binary, comparison, where, pow and cast kernels of the C ABI,
// and the elementwise gradients (relu/tanh/gelu/silu_grad). The host side
// checks operands exactly like cpu/kernels_elementwise.cpp (same
// conditions, same messages); the device side is one of two launches:
//   - contiguous: every operand has the result's shape; a grid-stride loop
//     over 16-byte vectors (when every pointer is aligned) with a scalar
//     tail;
//   - strided: numpy broadcasting (up to rank 8). The iteration space is
//     coalesced on the host (size-1 dims dropped, dims merged where every
//     operand is contiguous across them), so a bias [D] added to [N,S,D]
//     becomes [N*S, D] with strides (D,1) and (0,1). Each thread takes N
//     consecutive elements of one row of the innermost dim: operands with
//     inner stride 1 are read as vectors, those with stride 0 (broadcast
//     along the row) as one scalar. Other inner strides use N = 1.
// Math is float (expf, tanhf, erff, normcdff...) where the CPU computes in
// double and rounds once: within the fp32 tolerance of spillway-cuda-check.
//
// A device kernel cannot throw: integer division by zero and an integer
// pow with a negative exponent, errors on the CPU backend, give 0 here.
//
//===----------------------------------------------------------------------===//

#include "bf16.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "kernel_checks.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace spw::cuda {
namespace {

using namespace spw::checks;

constexpr int kThreads = 256;

// ---- host-side checks (cpu/kernels_elementwise.cpp's, message for message)

int64_t gelu_mode(const int64_t *iattrs) {
  int64_t approx = need_iattrs(iattrs)[0];
  if (approx != 0 && approx != 1)
    fail("approximate must be 0 (none) or 1 (tanh), got %lld",
         (long long)approx);
  return approx;
}

// ---- launch machinery ------------------------------------------------------

template <class T, int N> struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

// Elements per 16-byte access of the widest type involved.
template <class... T> constexpr int vec_width() {
  constexpr size_t widest = std::max({sizeof(T)...});
  return int(16 / widest);
}

bool aligned(const void *p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// A grid-stride loop's grid: one wave of full-occupancy blocks at most.
unsigned grid_for(const Launch &l, int64_t work) {
  const int64_t blocks = (work + kThreads - 1) / kThreads;
  const int64_t cap = int64_t(std::max(l.sm_count, 1)) * 8;
  return unsigned(std::max<int64_t>(1, std::min(blocks, cap)));
}

// The coalesced iteration space of a broadcast: dims (outermost first) and
// each operand's element strides over them.
template <int K> struct Strided {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t st[K][kMaxRank] = {};
};

template <int K>
Strided<K> coalesce(int rank, const int64_t *dims,
                    const std::array<std::array<int64_t, kMaxRank>, K> &st) {
  Strided<K> m;
  for (int d = 0; d < rank; ++d) {
    if (dims[d] == 1)
      continue;
    bool merge = m.rank > 0;
    for (int k = 0; merge && k < K; ++k)
      merge = m.st[k][m.rank - 1] == st[size_t(k)][size_t(d)] * dims[d];
    if (merge) {
      m.dims[m.rank - 1] *= dims[d];
      for (int k = 0; k < K; ++k)
        m.st[k][m.rank - 1] = st[size_t(k)][size_t(d)];
      continue;
    }
    m.dims[m.rank] = dims[d];
    for (int k = 0; k < K; ++k)
      m.st[k][m.rank] = st[size_t(k)][size_t(d)];
    ++m.rank;
  }
  if (m.rank == 0) { // a single element
    m.rank = 1;
    m.dims[0] = 1;
  }
  return m;
}

// Offsets of outer index `o` over dims [0, m.rank - 1) (all but the
// innermost). The loop is unrolled so the kernel parameter is read with
// constant indices.
template <class I, int K>
__device__ __forceinline__ void outer_offsets(const Strided<K> &m, I o,
                                              int64_t (&off)[K]) {
#pragma unroll
  for (int k = 0; k < K; ++k)
    off[k] = 0;
#pragma unroll
  for (int d = kMaxRank - 2; d >= 0; --d) {
    if (d <= m.rank - 2) {
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

template <int N, class T>
__device__ __forceinline__ Vec<T, N> load_vec(const T *p, int64_t off,
                                              int64_t inner_stride) {
  Vec<T, N> r;
  if constexpr (N == 1) {
    r.v[0] = p[off];
  } else if (inner_stride == 0) {
    const T t = p[off];
#pragma unroll
    for (int j = 0; j < N; ++j)
      r.v[j] = t;
  } else {
    r = *reinterpret_cast<const Vec<T, N> *>(p + off);
  }
  return r;
}

template <int N, class F, class Y, class... V>
__device__ __forceinline__ void apply_vec(Vec<Y, N> &out, const F &f,
                                          const V &...in) {
#pragma unroll
  for (int j = 0; j < N; ++j)
    out.v[j] = f(in.v[j]...);
}

// y[i] = f(x[i]...) over n elements, N at a time.
template <int N, class F, class Y, class... X>
__global__ void __launch_bounds__(kThreads)
    ew_contig(int64_t n, F f, Y *y, const X *__restrict__... x) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nv = n / N;
  for (int64_t v = tid; v < nv; v += stride) {
    Vec<Y, N> out;
    apply_vec<N>(out, f, reinterpret_cast<const Vec<X, N> *>(x)[v]...);
    reinterpret_cast<Vec<Y, N> *>(y)[v] = out;
  }
  for (int64_t i = nv * N + tid; i < n; i += stride)
    y[i] = f(x[i]...);
}

template <int N, class I, class F, class Y, class... X, size_t... K>
__device__ __forceinline__ void
ew_strided_body(int64_t nvec, const Strided<sizeof...(X)> &m, I inner,
                const int64_t *inner_st, const F &f, Y *y,
                std::index_sequence<K...>, const X *...x) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t v = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; v < nvec;
       v += stride) {
    const I i = I(v) * I(N);
    const I o = i / inner;
    const I c = i - o * inner;
    int64_t off[sizeof...(X)];
    outer_offsets<I>(m, o, off);
    Vec<Y, N> out;
    apply_vec<N>(out, f,
                 load_vec<N>(x, off[K] + int64_t(c) * inner_st[K],
                             inner_st[K])...);
    *reinterpret_cast<Vec<Y, N> *>(y + int64_t(i)) = out;
  }
}

template <int K> struct InnerStrides {
  int64_t s[K];
};

// y (contiguous, the iteration space) = f(x...) with broadcasting: see the
// file comment. The innermost dim is a multiple of N.
template <int N, class I, class F, class Y, class... X>
__global__ void __launch_bounds__(kThreads)
    ew_strided(int64_t nvec, Strided<sizeof...(X)> m, I inner,
               InnerStrides<sizeof...(X)> inner_st, F f, Y *y,
               const X *__restrict__... x) {
  ew_strided_body<N, I>(nvec, m, inner, inner_st.s, f, y,
                        std::index_sequence_for<X...>{}, x...);
}

template <class F, class Y, class... X>
void run_contig(const Launch &l, int64_t n, F f, Y *y, const X *...x) {
  if (n == 0)
    return;
  constexpr int V = vec_width<Y, X...>();
  if constexpr (V > 1) {
    const bool ok = aligned(y, V * sizeof(Y)) &&
                    (aligned(x, V * sizeof(X)) && ...);
    if (ok && n >= V) {
      ew_contig<V><<<grid_for(l, n / V), kThreads, 0, l.stream>>>(n, f, y,
                                                                   x...);
      SPW_CUDA(cudaGetLastError());
      return;
    }
  }
  ew_contig<1><<<grid_for(l, n), kThreads, 0, l.stream>>>(n, f, y, x...);
  SPW_CUDA(cudaGetLastError());
}

template <int N, class I, class F, class Y, class... X>
void launch_strided(const Launch &l, const Strided<sizeof...(X)> &m,
                    int64_t numel, F f, Y *y, const X *...x) {
  constexpr int K = sizeof...(X);
  InnerStrides<K> is;
  for (int k = 0; k < K; ++k)
    is.s[k] = m.st[k][m.rank - 1];
  const int64_t nvec = numel / N;
  ew_strided<N, I><<<grid_for(l, nvec), kThreads, 0, l.stream>>>(
      nvec, m, I(m.dims[m.rank - 1]), is, f, y, x...);
  SPW_CUDA(cudaGetLastError());
}

// y = f(x...) with numpy broadcasting of every operand t[k] (data p[k]) to
// y's shape, which the caller checked is their broadcast.
template <class F, class Y, class... X>
void broadcast_ptrs(const Launch &l, const spw_tensor &yt, F f,
                    const spw_tensor *const *t, const char *const *nm,
                    const X *...p) {
  constexpr int K = sizeof...(X);
  Y *y = static_cast<Y *>(yt.data);
  bool all_same = true;
  for (int k = 0; k < K; ++k)
    all_same = all_same && same_shape(*t[k], yt);
  if (all_same)
    return run_contig(l, yt.numel, f, y, p...);
  std::array<std::array<int64_t, kMaxRank>, K> st;
  for (int k = 0; k < K; ++k)
    st[size_t(k)] = broadcast_strides(*t[k], yt.rank, yt.dims, nm[k]);
  const Strided<K> m = coalesce<K>(yt.rank, yt.dims, st);
  const int64_t inner = m.dims[m.rank - 1];
  bool contiguous = m.rank == 1;
  for (int k = 0; k < K; ++k)
    contiguous = contiguous && m.st[k][0] == 1;
  if (contiguous) // e.g. [1,5] + [5]
    return run_contig(l, yt.numel, f, y, p...);
  const bool small = uint64_t(yt.numel) <= 0xffffffffull;
  constexpr int V = vec_width<Y, X...>();
  if constexpr (V > 1) {
    // Vectors when every operand reads whole aligned vectors of a row or
    // one broadcast scalar.
    bool vec = small && inner % V == 0 && aligned(y, V * sizeof(Y));
    const void *ptrs[K] = {p...};
    const size_t sizes[K] = {sizeof(X)...};
    for (int k = 0; vec && k < K; ++k) {
      const int64_t s = m.st[k][m.rank - 1];
      if (s == 0)
        continue;
      vec = s == 1 && aligned(ptrs[k], V * sizes[k]);
      for (int d = 0; vec && d + 1 < m.rank; ++d)
        vec = m.st[k][d] % V == 0;
    }
    if (vec)
      return launch_strided<V, uint32_t>(l, m, yt.numel, f, y, p...);
  }
  if (small)
    return launch_strided<1, uint32_t>(l, m, yt.numel, f, y, p...);
  launch_strided<1, uint64_t>(l, m, yt.numel, f, y, p...);
}

template <class F, class Y, class... X, size_t... K>
void broadcast_seq(const Launch &l, const spw_tensor &yt,
                   const spw_tensor *const *t, const char *const *nm,
                   std::index_sequence<K...>) {
  broadcast_ptrs<F, Y, X...>(l, yt, F{}, t, nm,
                             static_cast<const X *>(t[K]->data)...);
}

template <class F, class Y, class... X>
void run_broadcast(const Launch &l, const spw_tensor &yt,
                   std::array<const spw_tensor *, sizeof...(X)> t,
                   std::array<const char *, sizeof...(X)> names) {
  if (yt.numel == 0)
    return;
  broadcast_seq<F, Y, X...>(l, yt, t.data(), names.data(),
                            std::index_sequence_for<X...>{});
}

// ---- functors ---------------------------------------------------------------

template <class T> using Unsigned = std::make_unsigned_t<T>;

enum class Bin { Add, Sub, Mul, Div };

template <Bin B, class T> struct BinF {
  __device__ T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      // Two's-complement wrap, as the CPU's int arithmetic does in practice.
      using U = Unsigned<T>;
      if constexpr (B == Bin::Add)
        return T(U(a) + U(b));
      else if constexpr (B == Bin::Sub)
        return T(U(a) - U(b));
      else if constexpr (B == Bin::Mul)
        return T(U(a) * U(b));
      else {
        if (b == 0) // the CPU fails; a kernel cannot
          return T(0);
        if (b == -1) // INT_MIN / -1 overflows
          return T(U(0) - U(a));
        return T(a / b);
      }
    } else {
      if constexpr (B == Bin::Add)
        return a + b;
      else if constexpr (B == Bin::Sub)
        return a - b;
      else if constexpr (B == Bin::Mul)
        return a * b;
      else
        return a / b;
    }
  }
};

template <class T> struct NegF {
  __device__ T operator()(T a) const {
    if constexpr (std::is_integral_v<T>)
      return T(Unsigned<T>(0) - Unsigned<T>(a));
    else
      return -a; // flips the sign bit: -(+0) is -0, as on the CPU
  }
};

constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

__device__ __forceinline__ float sigmoidf(float x) {
  // Stable on both tails, like the CPU's sigmoid_ref.
  if (x >= 0.0f)
    return 1.0f / (1.0f + expf(-x));
  const float e = expf(x);
  return e / (1.0f + e);
}

enum class Un {
  Relu, Tanh, GeluErf, GeluTanh, Exp, Log, Sqrt, Recip, Erf, Sigmoid, Cos,
  Sin, Silu
};

template <Un U> struct UnF {
  __device__ float operator()(float x) const {
    if constexpr (U == Un::Relu)
      return x < 0.0f ? 0.0f : x; // NaN stays NaN, -0 stays -0 (fmaxf drops NaN)
    else if constexpr (U == Un::Tanh)
      return tanhf(x);
    else if constexpr (U == Un::GeluErf)
      return x * normcdff(x); // 0.5 x (1 + erf(x/sqrt2)), exact in the tail
    else if constexpr (U == Un::GeluTanh)
      return 0.5f * x *
             (1.0f + tanhf(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
    else if constexpr (U == Un::Exp)
      return expf(x);
    else if constexpr (U == Un::Log)
      return logf(x);
    else if constexpr (U == Un::Sqrt)
      return sqrtf(x);
    else if constexpr (U == Un::Recip)
      return 1.0f / x;
    else if constexpr (U == Un::Erf)
      return erff(x);
    else if constexpr (U == Un::Sigmoid)
      return sigmoidf(x);
    else if constexpr (U == Un::Cos)
      return cosf(x);
    else if constexpr (U == Un::Sin)
      return sinf(x);
    else
      return x * sigmoidf(x);
  }
};

enum class Grad { Relu, Tanh, GeluErf, GeluTanh, Silu };

template <Grad G> struct GradF {
  // (x or y, dy) -> dx
  __device__ float operator()(float x, float dy) const {
    if constexpr (G == Grad::Relu) {
      if (isnan(x)) // a NaN in x or dy is passed on, as on the CPU
        return x;
      return x > 0.0f || isnan(dy) ? dy : 0.0f;
    } else if constexpr (G == Grad::Tanh) {
      return dy * (1.0f - x * x); // x is y = tanh(input) here
    } else if constexpr (G == Grad::GeluErf) {
      const float pdf = kInvSqrt2Pi * expf(-0.5f * x * x);
      return dy * (normcdff(x) + x * pdf);
    } else if constexpr (G == Grad::GeluTanh) {
      const float u = kSqrt2OverPi * (x + 0.044715f * x * x * x);
      const float t = tanhf(u);
      const float du = kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
      return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
    } else {
      const float s = sigmoidf(x);
      return dy * s * (1.0f + x * (1.0f - s));
    }
  }
};

template <class T> struct PowF {
  __device__ T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      if (b < 0) // the CPU fails; a kernel cannot
        return T(0);
      using U = Unsigned<T>;
      U base = U(a), r = 1;
      for (U k = U(b); k; k >>= 1) {
        if (k & 1)
          r = U(r * base);
        base = U(base * base);
      }
      return T(r);
    } else {
      return powf(a, b); // pow's special cases, as std::pow
    }
  }
};

enum class Cmp { Eq, Lt, Le, Gt };

// uint8_t is SPW_BOOL here: any nonzero byte reads as 1, as on the CPU.
template <Cmp C, class T> struct CmpF {
  __device__ uint8_t operator()(T u, T v) const {
    if constexpr (std::is_same_v<T, uint8_t>) {
      u = T(u != 0);
      v = T(v != 0);
    }
    bool r;
    if constexpr (C == Cmp::Eq)
      r = u == v;
    else if constexpr (C == Cmp::Lt)
      r = u < v;
    else if constexpr (C == Cmp::Le)
      r = u <= v;
    else
      r = u > v;
    return r ? 1 : 0;
  }
};

template <class U> struct WhereF {
  __device__ U operator()(uint8_t c, U a, U b) const { return c ? a : b; }
};

// cpu/kernels_elementwise.cpp's cast_value: float -> int truncates toward
// zero and saturates (NaN -> 0); integer narrowing wraps; -> bool is
// x != 0; a bool reads any nonzero byte as 1.
template <class D, class S> struct CastF {
  __device__ D operator()(S v) const {
    constexpr bool from_bool = std::is_same_v<S, uint8_t>;
    constexpr bool to_bool = std::is_same_v<D, uint8_t>;
    if constexpr (from_bool)
      v = S(v != S(0));
    if constexpr (to_bool) {
      return D(v != S(0) ? 1 : 0);
    } else if constexpr (std::is_floating_point_v<S> &&
                         std::is_integral_v<D>) {
      if (isnan(v))
        return D(0);
      // The limits without numeric_limits (host constexpr functions).
      constexpr D hi = D(Unsigned<D>(~Unsigned<D>(0)) >> 1);
      constexpr D lo = D(-hi - 1);
      const double t = trunc(double(v));
      if (t >= double(hi))
        return hi;
      if (t <= double(lo))
        return lo;
      return D(t);
    } else {
      return static_cast<D>(v);
    }
  }
};

// ---- kernels ----------------------------------------------------------------

template <Bin B>
void binary(const Launch &l, spw_tensor *const *ins, spw_tensor *const *outs,
            const int64_t *, const double *) {
  const spw_tensor &a = input(ins, 0, "a"), &b = input(ins, 1, "b");
  spw_tensor &y = output(outs, 0, "y");
  if (a.dtype != b.dtype)
    fail("operand dtypes differ: %s and %s", dtype_name(a.dtype),
         dtype_name(b.dtype));
  expect_dtype(y, a.dtype, "result");
  expect_shape(y, broadcast_all({&a, &b}), "result");
  switch (a.dtype) {
  case SPW_F32:
    return run_broadcast<BinF<B, float>, float, float, float>(
        l, y, {&a, &b}, {"a", "b"});
  case SPW_I64:
    return run_broadcast<BinF<B, int64_t>, int64_t, int64_t, int64_t>(
        l, y, {&a, &b}, {"a", "b"});
  case SPW_I32:
    return run_broadcast<BinF<B, int32_t>, int32_t, int32_t, int32_t>(
        l, y, {&a, &b}, {"a", "b"});
  default: fail("unsupported dtype %s", dtype_name(a.dtype));
  }
}

void neg_kernel(const Launch &l, spw_tensor *const *ins,
                spw_tensor *const *outs, const int64_t *, const double *) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  expect_like(y, x, "result", "x");
  switch (x.dtype) {
  case SPW_F32:
    return run_contig(l, x.numel, NegF<float>{}, y.as<float>(),
                      x.as<const float>());
  case SPW_I64:
    return run_contig(l, x.numel, NegF<int64_t>{}, y.as<int64_t>(),
                      x.as<const int64_t>());
  case SPW_I32:
    return run_contig(l, x.numel, NegF<int32_t>{}, y.as<int32_t>(),
                      x.as<const int32_t>());
  default: fail("unsupported dtype %s", dtype_name(x.dtype));
  }
}

template <class F>
void unary_f32(const Launch &l, spw_tensor *const *ins,
               spw_tensor *const *outs, F f) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  expect_dtype(x, SPW_F32, "x");
  expect_like(y, x, "result", "x");
  run_contig(l, x.numel, f, y.as<float>(), x.as<const float>());
}

template <Un U>
void unary(const Launch &l, spw_tensor *const *ins, spw_tensor *const *outs,
           const int64_t *, const double *) {
  unary_f32(l, ins, outs, UnF<U>{});
}

void gelu_kernel(const Launch &l, spw_tensor *const *ins,
                 spw_tensor *const *outs, const int64_t *iattrs,
                 const double *) {
  if (gelu_mode(iattrs) == 1)
    unary_f32(l, ins, outs, UnF<Un::GeluTanh>{});
  else
    unary_f32(l, ins, outs, UnF<Un::GeluErf>{});
}

// f(x, dy) over two same-shaped f32 inputs (the CPU's binary_same_f32).
template <class F>
void grad_f32(const Launch &l, spw_tensor *const *ins,
              spw_tensor *const *outs, const char *n0, F f) {
  const spw_tensor &x = input(ins, 0, n0), &dy = input(ins, 1, "dy");
  spw_tensor &dx = output(outs, 0, "dx");
  expect_dtype(x, SPW_F32, n0);
  expect_like(dy, x, "dy", n0);
  expect_like(dx, x, "result", n0);
  run_contig(l, x.numel, f, dx.as<float>(), x.as<const float>(),
             dy.as<const float>());
}

template <Grad G>
void grad(const Launch &l, spw_tensor *const *ins, spw_tensor *const *outs,
          const int64_t *, const double *) {
  grad_f32(l, ins, outs, G == Grad::Tanh ? "y" : "x", GradF<G>{});
}

void gelu_grad_kernel(const Launch &l, spw_tensor *const *ins,
                      spw_tensor *const *outs, const int64_t *iattrs,
                      const double *) {
  if (gelu_mode(iattrs) == 1)
    grad_f32(l, ins, outs, "x", GradF<Grad::GeluTanh>{});
  else
    grad_f32(l, ins, outs, "x", GradF<Grad::GeluErf>{});
}

void pow_kernel(const Launch &l, spw_tensor *const *ins,
                spw_tensor *const *outs, const int64_t *, const double *) {
  const spw_tensor &a = input(ins, 0, "a"), &b = input(ins, 1, "b");
  spw_tensor &y = output(outs, 0, "y");
  if (a.dtype != SPW_F32 && a.dtype != SPW_I64 && a.dtype != SPW_I32)
    fail("a has dtype %s; pow takes f32, i64 or i32", dtype_name(a.dtype));
  expect_dtype(b, a.dtype, "b");
  expect_dtype(y, a.dtype, "result");
  expect_shape(y, broadcast_all({&a, &b}), "result");
  if (a.dtype == SPW_I64)
    return run_broadcast<PowF<int64_t>, int64_t, int64_t, int64_t>(
        l, y, {&a, &b}, {"a", "b"});
  if (a.dtype == SPW_I32)
    return run_broadcast<PowF<int32_t>, int32_t, int32_t, int32_t>(
        l, y, {&a, &b}, {"a", "b"});
  run_broadcast<PowF<float>, float, float, float>(l, y, {&a, &b},
                                                  {"a", "b"});
}

template <Cmp C>
void compare(const Launch &l, spw_tensor *const *ins, spw_tensor *const *outs,
             const int64_t *, const double *) {
  const spw_tensor &a = input(ins, 0, "a"), &b = input(ins, 1, "b");
  spw_tensor &y = output(outs, 0, "y");
  if (a.dtype != b.dtype)
    fail("operand dtypes differ: %s and %s", dtype_name(a.dtype),
         dtype_name(b.dtype));
  expect_dtype(y, SPW_BOOL, "result");
  expect_shape(y, broadcast_all({&a, &b}), "result");
  switch (a.dtype) {
  case SPW_F32:
    return run_broadcast<CmpF<C, float>, uint8_t, float, float>(
        l, y, {&a, &b}, {"a", "b"});
  case SPW_I64:
    return run_broadcast<CmpF<C, int64_t>, uint8_t, int64_t, int64_t>(
        l, y, {&a, &b}, {"a", "b"});
  case SPW_I32:
    return run_broadcast<CmpF<C, int32_t>, uint8_t, int32_t, int32_t>(
        l, y, {&a, &b}, {"a", "b"});
  case SPW_BOOL:
    return run_broadcast<CmpF<C, uint8_t>, uint8_t, uint8_t, uint8_t>(
        l, y, {&a, &b}, {"a", "b"});
  default: fail("unsupported dtype %s", dtype_name(a.dtype));
  }
}

template <class U>
void where_typed(const Launch &l, const spw_tensor &c, const spw_tensor &a,
                 const spw_tensor &b, const spw_tensor &y) {
  run_broadcast<WhereF<U>, U, uint8_t, U, U>(l, y, {&c, &a, &b},
                                             {"cond", "a", "b"});
}

void where_kernel(const Launch &l, spw_tensor *const *ins,
                  spw_tensor *const *outs, const int64_t *, const double *) {
  const spw_tensor &c = input(ins, 0, "cond"), &a = input(ins, 1, "a"),
                   &b = input(ins, 2, "b");
  spw_tensor &y = output(outs, 0, "y");
  expect_dtype(c, SPW_BOOL, "cond");
  if (a.dtype != b.dtype)
    fail("operand dtypes differ: %s and %s", dtype_name(a.dtype),
         dtype_name(b.dtype));
  expect_dtype(y, a.dtype, "result");
  expect_shape(y, broadcast_all({&c, &a, &b}), "result");
  switch (dtype_size(a.dtype)) {
  case 8: return where_typed<uint64_t>(l, c, a, b, y);
  case 4: return where_typed<uint32_t>(l, c, a, b, y);
  case 1: return where_typed<uint8_t>(l, c, a, b, y);
  default: fail("unsupported dtype %s", dtype_name(a.dtype));
  }
}

template <class S>
void cast_from(const Launch &l, const spw_tensor &x, spw_tensor &y) {
  const S *px = x.as<const S>();
  const int64_t n = x.numel;
  switch (y.dtype) {
  case SPW_F32:
    return run_contig(l, n, CastF<float, S>{}, y.as<float>(), px);
  case SPW_I64:
    return run_contig(l, n, CastF<int64_t, S>{}, y.as<int64_t>(), px);
  case SPW_I32:
    return run_contig(l, n, CastF<int32_t, S>{}, y.as<int32_t>(), px);
  case SPW_BOOL:
    return run_contig(l, n, CastF<uint8_t, S>{}, y.as<uint8_t>(), px);
  default: fail("unsupported result dtype %s", dtype_name(y.dtype));
  }
}

// bf16 storage with bf16.h's rounding (not __float2bfloat16_rn, whose NaN
// differs), so the GPU stores the CPU's bits.
struct ToBf16F {
  __device__ bf16 operator()(float v) const { return to_bf16(v); }
};
struct FromBf16F {
  __device__ float operator()(bf16 v) const { return to_float(v); }
};
struct CopyBf16F {
  __device__ bf16 operator()(bf16 v) const { return v; }
};

void cast_kernel(const Launch &l, spw_tensor *const *ins,
                 spw_tensor *const *outs, const int64_t *, const double *) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  if (!same_shape(x, y))
    fail("result has shape %s, expected %s", y.shape().c_str(),
         x.shape().c_str());
  if (x.dtype == SPW_F32 && y.dtype == SPW_BF16)
    return run_contig(l, x.numel, ToBf16F{}, y.as<bf16>(),
                      x.as<const float>());
  if (x.dtype == SPW_BF16 && y.dtype == SPW_F32)
    return run_contig(l, x.numel, FromBf16F{}, y.as<float>(),
                      x.as<const bf16>());
  if (x.dtype == SPW_BF16 && y.dtype == SPW_BF16)
    return run_contig(l, x.numel, CopyBf16F{}, y.as<bf16>(),
                      x.as<const bf16>());
  if (x.dtype == SPW_BF16 || y.dtype == SPW_BF16)
    fail("cast from %s to %s: bf16 converts to and from f32 only",
         dtype_name(x.dtype), dtype_name(y.dtype));
  switch (x.dtype) {
  case SPW_F32: return cast_from<float>(l, x, y);
  case SPW_I64: return cast_from<int64_t>(l, x, y);
  case SPW_I32: return cast_from<int32_t>(l, x, y);
  case SPW_BOOL: return cast_from<uint8_t>(l, x, y);
  default: fail("unsupported dtype %s", dtype_name(x.dtype));
  }
}

} // namespace

Kernel elementwise_kernel_for(Op op) {
  switch (op) {
  case Op::add: return binary<Bin::Add>;
  case Op::sub: return binary<Bin::Sub>;
  case Op::mul: return binary<Bin::Mul>;
  case Op::div: return binary<Bin::Div>;
  case Op::neg: return neg_kernel;
  case Op::relu: return unary<Un::Relu>;
  case Op::tanh: return unary<Un::Tanh>;
  case Op::gelu: return gelu_kernel;
  case Op::exp: return unary<Un::Exp>;
  case Op::log: return unary<Un::Log>;
  case Op::sqrt: return unary<Un::Sqrt>;
  case Op::reciprocal: return unary<Un::Recip>;
  case Op::erf: return unary<Un::Erf>;
  case Op::sigmoid: return unary<Un::Sigmoid>;
  case Op::cos: return unary<Un::Cos>;
  case Op::sin: return unary<Un::Sin>;
  case Op::silu: return unary<Un::Silu>;
  case Op::pow: return pow_kernel;
  case Op::equal: return compare<Cmp::Eq>;
  case Op::less: return compare<Cmp::Lt>;
  case Op::less_or_equal: return compare<Cmp::Le>;
  case Op::greater: return compare<Cmp::Gt>;
  case Op::where: return where_kernel;
  case Op::cast: return cast_kernel;
  case Op::relu_grad: return grad<Grad::Relu>;
  case Op::tanh_grad: return grad<Grad::Tanh>;
  case Op::gelu_grad: return gelu_grad_kernel;
  case Op::silu_grad: return grad<Grad::Silu>;
  default: return nullptr;
  }
}

} // namespace spw::cuda
