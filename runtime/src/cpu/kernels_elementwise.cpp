//===- kernels_elementwise.cpp - elementwise ops on the CPU ---------------===//
//
// The unary, binary, comparison, where, pow and cast kernels of the C ABI,
// and the elementwise gradients (relu/tanh/gelu/silu_grad). Binary ops
// broadcast like numpy.
// Fast kernels: every loop cut into chunks of ~16K elements (broadcasts by
// rows of the result) with the reference's element operations, so the same
// bits; gelu and gelu_grad in float with vmath's erfc/exp.
// The family's shared conventions (determinism, operand checks) are in
// cpu/kernels.h.
//
//===----------------------------------------------------------------------===//

#include "bf16.h"
#include "cpu/kernels.h"
#include "cpu/parallel.h"
#include "cpu/vmath.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

using namespace spw;

namespace {

using namespace spw::checks;
using spw::cpu::for_each_index;

// ---- elementwise binary ----------------------------------------------------

// Elements per chunk of the fast kernels' threaded elementwise loops.
constexpr int64_t kGrain = int64_t(1) << 14;

// for_each_index, threaded (fast kernels): the rows of y's last dim cut
// into chunks of ~kGrain elements; each row's offsets from its index. The
// same f per element, so the same bits; a failing f reports the first
// failing element, as the serial loop does (chunks rethrow in order).
template <size_t N, class F>
void for_each_index_threaded(int rank, const int64_t *dims,
                             const std::array<const int64_t *, N> &strides,
                             F &&f) {
  if (rank == 0)
    return for_each_index<N>(rank, dims, strides, f);
  for (int d = 0; d < rank; ++d)
    if (dims[d] == 0)
      return;
  const int64_t last = dims[rank - 1];
  const int64_t rows = prod(dims, 0, rank - 1);
  cpu::parallel_for(
      rows, std::max<int64_t>(1, kGrain / last), [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
          std::array<int64_t, N> o{};
          int64_t rem = r;
          for (int d = rank - 2; d >= 0; --d) {
            const int64_t id = rem % dims[d];
            rem /= dims[d];
            for (size_t k = 0; k < N; ++k)
              o[k] += id * strides[k][d];
          }
          int64_t lin = r * last;
          for (int64_t j = 0; j < last; ++j) {
            f(lin++, o);
            for (size_t k = 0; k < N; ++k)
              o[k] += strides[k][rank - 1];
          }
        }
      });
}

enum class BinOp { Add, Sub, Mul, Div };

template <class T> T apply(BinOp op, T a, T b) {
  switch (op) {
  case BinOp::Add: return a + b;
  case BinOp::Sub: return a - b;
  case BinOp::Mul: return a * b;
  case BinOp::Div:
    if constexpr (std::is_integral_v<T>) {
      if (b == 0)
        fail("integer division by zero");
      if (b == -1) // avoids the overflow of INT_MIN / -1
        return T(0) - a;
    }
    return a / b;
  }
  return a;
}

template <class T>
void binary_typed(BinOp op, const spw_tensor &a, const spw_tensor &b,
                  spw_tensor &y) {
  const T *pa = a.as<T>(), *pb = b.as<T>();
  T *py = y.as<T>();
  if (same_shape(a, b)) {
    // Fast: the same element operations, cut into chunks (same bits).
    const int64_t grain = cpu::fast_kernels() ? kGrain : y.numel;
    cpu::parallel_for(y.numel, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i)
        py[i] = apply<T>(op, pa[i], pb[i]);
    });
    return;
  }
  auto sa = broadcast_strides(a, y.rank, y.dims, "a");
  auto sb = broadcast_strides(b, y.rank, y.dims, "b");
  auto f = [&](int64_t i, const std::array<int64_t, 2> &o) {
    py[i] = apply<T>(op, pa[o[0]], pb[o[1]]);
  };
  if (cpu::fast_kernels())
    return for_each_index_threaded<2>(y.rank, y.dims,
                                      {sa.data(), sb.data()}, f);
  for_each_index<2>(y.rank, y.dims, {sa.data(), sb.data()}, f);
}

void binary(BinOp op, spw_tensor *const *ins, spw_tensor *const *outs) {
  const spw_tensor &a = input(ins, 0, "a"), &b = input(ins, 1, "b");
  spw_tensor &y = output(outs, 0, "y");
  if (a.dtype != b.dtype)
    fail("operand dtypes differ: %s and %s", dtype_name(a.dtype),
         dtype_name(b.dtype));
  expect_dtype(y, a.dtype, "result");
  expect_shape(y, broadcast_shape(a, b), "result");
  switch (a.dtype) {
  case SPW_F32: return binary_typed<float>(op, a, b, y);
  case SPW_I64: return binary_typed<int64_t>(op, a, b, y);
  case SPW_I32: return binary_typed<int32_t>(op, a, b, y);
  default: fail("unsupported dtype %s", dtype_name(a.dtype));
  }
}

// ---- unary -------------------------------------------------------------------

constexpr double kSqrt2OverPi = 0.79788456080286535588; // sqrt(2/pi)
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794; // 1/sqrt(2*pi)

double gelu_ref(double x, bool approx) {
  if (approx)
    return 0.5 * x *
           (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1.0 + std::erf(x * kInvSqrt2));
}

double gelu_deriv(double x, bool approx) {
  if (approx) {
    double u = kSqrt2OverPi * (x + 0.044715 * x * x * x);
    double t = std::tanh(u);
    double du = kSqrt2OverPi * (1.0 + 3.0 * 0.044715 * x * x);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
  }
  double cdf = 0.5 * (1.0 + std::erf(x * kInvSqrt2));
  double pdf = kInvSqrt2Pi * std::exp(-0.5 * x * x);
  return cdf + x * pdf;
}

// The checked operands of a unary f32 op (shared by the fast kernels).
struct UnaryF32 {
  const spw_tensor &x;
  spw_tensor &y;
};
UnaryF32 unary_f32_operands(spw_tensor *const *ins, spw_tensor *const *outs) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  expect_dtype(x, SPW_F32, "x");
  expect_like(y, x, "result", "x");
  return {x, y};
}

template <class F>
void unary_f32(spw_tensor *const *ins, spw_tensor *const *outs, F f) {
  auto [x, y] = unary_f32_operands(ins, outs);
  const float *px = x.as<float>();
  float *py = y.as<float>();
  // Fast: the same f per element, cut into chunks (same bits).
  const int64_t grain = cpu::fast_kernels() ? kGrain : x.numel;
  cpu::parallel_for(x.numel, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      py[i] = f(px[i]);
  });
}

// f(a, b) elementwise over two same-shaped f32 inputs.
struct BinaryF32 {
  const spw_tensor &x, &dy;
  spw_tensor &dx;
};
BinaryF32 binary_same_f32_operands(spw_tensor *const *ins,
                                   spw_tensor *const *outs, const char *n0,
                                   const char *n1) {
  const spw_tensor &x = input(ins, 0, n0), &dy = input(ins, 1, n1);
  spw_tensor &dx = output(outs, 0, "dx");
  expect_dtype(x, SPW_F32, n0);
  expect_like(dy, x, n1, n0);
  expect_like(dx, x, "result", n0);
  return {x, dy, dx};
}

template <class F>
void binary_same_f32(spw_tensor *const *ins, spw_tensor *const *outs,
                     const char *n0, const char *n1, F f) {
  auto [x, dy, dx] = binary_same_f32_operands(ins, outs, n0, n1);
  const float *px = x.as<float>(), *pd = dy.as<float>();
  float *po = dx.as<float>();
  const int64_t grain = cpu::fast_kernels() ? kGrain : x.numel;
  cpu::parallel_for(x.numel, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      po[i] = f(px[i], pd[i]);
  });
}

template <class T> void neg_typed(const spw_tensor &x, spw_tensor &y) {
  const T *px = x.as<T>();
  T *py = y.as<T>();
  const int64_t grain = cpu::fast_kernels() ? kGrain : x.numel;
  cpu::parallel_for(x.numel, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      if constexpr (std::is_floating_point_v<T>)
        py[i] = -px[i]; // flips the sign bit: -(+0) is -0 (0 - x: +0)
      else
        py[i] = T(0) - px[i];
    }
  });
}

int64_t gelu_mode(const int64_t *iattrs) {
  int64_t approx = need_iattrs(iattrs)[0];
  if (approx != 0 && approx != 1)
    fail("approximate must be 0 (none) or 1 (tanh), got %lld",
         (long long)approx);
  return approx;
}

// ---- pow, comparisons, where (broadcasting) -------------------------------

// Calls f(i, offsets) for every element i of y, offsets[k] being the element
// of ts[k] (numpy-broadcast to y's shape) that lines up with it.
template <size_t N, class F>
void over_broadcast(const spw_tensor &y,
                    const std::array<const spw_tensor *, N> &ts,
                    const std::array<const char *, N> &names, F &&f) {
  std::array<std::array<int64_t, kMaxRank>, N> st;
  std::array<const int64_t *, N> sp;
  for (size_t k = 0; k < N; ++k) {
    st[k] = broadcast_strides(*ts[k], y.rank, y.dims, names[k]);
    sp[k] = st[k].data();
  }
  if (cpu::fast_kernels())
    return for_each_index_threaded<N>(y.rank, y.dims, sp, f);
  for_each_index<N>(y.rank, y.dims, sp, f);
}

double sigmoid_ref(double x) {
  // Stable on both tails.
  if (x >= 0)
    return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

// Integer a ** b by squaring, wrapping on overflow as numpy does; a negative
// exponent is an error, as numpy's "Integers to negative integer powers are
// not allowed".
template <class T> void int_pow(const spw_tensor &a, const spw_tensor &b,
                                spw_tensor &y) {
  using U = std::make_unsigned_t<T>;
  const T *pa = a.as<T>(), *pb = b.as<T>();
  T *py = y.as<T>();
  over_broadcast<2>(y, {&a, &b}, {"a", "b"},
                    [&](int64_t i, const std::array<int64_t, 2> &o) {
                      T e = pb[o[1]];
                      if (e < 0)
                        fail("integer base %lld to the negative power %lld "
                             "(element %lld of the result): integers to "
                             "negative integer powers are not allowed",
                             (long long)pa[o[0]], (long long)e, (long long)i);
                      U base = U(pa[o[0]]), r = 1;
                      for (U k = U(e); k; k >>= 1) {
                        if (k & 1)
                          r = U(r * base);
                        base = U(base * base);
                      }
                      py[i] = T(r);
                    });
}

void pow_op(spw_tensor *const *ins, spw_tensor *const *outs) {
  const spw_tensor &a = input(ins, 0, "a"), &b = input(ins, 1, "b");
  spw_tensor &y = output(outs, 0, "y");
  if (a.dtype != SPW_F32 && a.dtype != SPW_I64 && a.dtype != SPW_I32)
    fail("a has dtype %s; pow takes f32, i64 or i32", dtype_name(a.dtype));
  expect_dtype(b, a.dtype, "b");
  expect_dtype(y, a.dtype, "result");
  expect_shape(y, broadcast_all({&a, &b}), "result");
  if (a.dtype == SPW_I64)
    return int_pow<int64_t>(a, b, y);
  if (a.dtype == SPW_I32)
    return int_pow<int32_t>(a, b, y);
  const float *pa = a.as<float>(), *pb = b.as<float>();
  float *py = y.as<float>();
  // std::pow's special cases (pow(x, 0) = 1, negative base with an integral
  // exponent, NaN otherwise); computed in double, rounded once.
  over_broadcast<2>(y, {&a, &b}, {"a", "b"},
                    [&](int64_t i, const std::array<int64_t, 2> &o) {
                      py[i] = float(std::pow(double(pa[o[0]]),
                                             double(pb[o[1]])));
                    });
}

enum class Cmp { Eq, Lt, Le, Gt };

template <class T, bool IsBool>
void compare_typed(Cmp c, const spw_tensor &a, const spw_tensor &b,
                   spw_tensor &y) {
  const T *pa = a.as<T>(), *pb = b.as<T>();
  uint8_t *py = y.as<uint8_t>();
  over_broadcast<2>(y, {&a, &b}, {"a", "b"},
                    [&](int64_t i, const std::array<int64_t, 2> &o) {
                      T u = pa[o[0]], v = pb[o[1]];
                      if constexpr (IsBool) {
                        u = T(u != 0);
                        v = T(v != 0);
                      }
                      bool r = false;
                      switch (c) {
                      case Cmp::Eq: r = u == v; break;
                      case Cmp::Lt: r = u < v; break;
                      case Cmp::Le: r = u <= v; break;
                      case Cmp::Gt: r = u > v; break;
                      }
                      py[i] = r ? 1 : 0;
                    });
}

void compare(Cmp c, spw_tensor *const *ins, spw_tensor *const *outs) {
  const spw_tensor &a = input(ins, 0, "a"), &b = input(ins, 1, "b");
  spw_tensor &y = output(outs, 0, "y");
  if (a.dtype != b.dtype)
    fail("operand dtypes differ: %s and %s", dtype_name(a.dtype),
         dtype_name(b.dtype));
  expect_dtype(y, SPW_BOOL, "result");
  expect_shape(y, broadcast_all({&a, &b}), "result");
  switch (a.dtype) {
  case SPW_F32: return compare_typed<float, false>(c, a, b, y);
  case SPW_I64: return compare_typed<int64_t, false>(c, a, b, y);
  case SPW_I32: return compare_typed<int32_t, false>(c, a, b, y);
  case SPW_BOOL: return compare_typed<uint8_t, true>(c, a, b, y);
  default: fail("unsupported dtype %s", dtype_name(a.dtype));
  }
}

template <class U>
void where_typed(const spw_tensor &c, const spw_tensor &a, const spw_tensor &b,
                 spw_tensor &y) {
  const uint8_t *pc = c.as<uint8_t>();
  const U *pa = a.as<U>(), *pb = b.as<U>();
  U *py = y.as<U>();
  over_broadcast<3>(y, {&c, &a, &b}, {"cond", "a", "b"},
                    [&](int64_t i, const std::array<int64_t, 3> &o) {
                      py[i] = pc[o[0]] ? pa[o[1]] : pb[o[2]];
                    });
}

void where_op(spw_tensor *const *ins, spw_tensor *const *outs) {
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
  case 8: return where_typed<uint64_t>(c, a, b, y);
  case 4: return where_typed<uint32_t>(c, a, b, y);
  case 1: return where_typed<uint8_t>(c, a, b, y);
  default: fail("unsupported dtype %s", dtype_name(a.dtype));
  }
}

// ---- cast ----------------------------------------------------------------------

// One element of cast. S/D are the C types (uint8_t for bool). Float to
// integer truncates toward zero (numpy astype / ONNX Cast); values outside
// the integer range, which C++ leaves undefined, saturate, and NaN gives 0.
// Integer narrowing wraps (two's complement, as numpy astype). ->bool is
// x != 0 (NaN is true); bool reads any nonzero byte as 1.
template <class D, class S> D cast_value(S v, bool from_bool, bool to_bool) {
  if (from_bool)
    v = S(v != S(0));
  if (to_bool)
    return D(v != S(0) ? 1 : 0);
  if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D>) {
    if (std::isnan(v))
      return D(0);
    const double t = std::trunc(double(v));
    if (t >= double(std::numeric_limits<D>::max()))
      return std::numeric_limits<D>::max();
    if (t <= double(std::numeric_limits<D>::min()))
      return std::numeric_limits<D>::min();
    return D(t);
  } else {
    return static_cast<D>(v);
  }
}

template <class D, class S> void cast_typed(const spw_tensor &x, spw_tensor &y) {
  const S *px = x.as<S>();
  D *py = y.as<D>();
  const bool from_bool = x.dtype == SPW_BOOL, to_bool = y.dtype == SPW_BOOL;
  const int64_t grain = cpu::fast_kernels() ? kGrain : x.numel;
  cpu::parallel_for(x.numel, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      py[i] = cast_value<D, S>(px[i], from_bool, to_bool);
  });
}

template <class S> void cast_from(const spw_tensor &x, spw_tensor &y) {
  switch (y.dtype) {
  case SPW_F32: return cast_typed<float, S>(x, y);
  case SPW_I64: return cast_typed<int64_t, S>(x, y);
  case SPW_I32: return cast_typed<int32_t, S>(x, y);
  case SPW_BOOL: return cast_typed<uint8_t, S>(x, y);
  default: fail("unsupported result dtype %s", dtype_name(y.dtype));
  }
}

// bf16 storage (bf16.h): float32 rounded to nearest even, and back exactly.
// Only to and from float32, so no value is rounded twice.
void cast_bf16(const spw_tensor &x, spw_tensor &y) {
  const int64_t grain = cpu::fast_kernels() ? kGrain : x.numel;
  if (x.dtype == SPW_F32 && y.dtype == SPW_BF16) {
    const float *px = x.as<float>();
    bf16 *py = y.as<bf16>();
    cpu::parallel_for(x.numel, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i)
        py[i] = to_bf16(px[i]);
    });
  } else if (x.dtype == SPW_BF16 && y.dtype == SPW_F32) {
    const bf16 *px = x.as<bf16>();
    float *py = y.as<float>();
    cpu::parallel_for(x.numel, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i)
        py[i] = to_float(px[i]);
    });
  } else if (x.dtype == SPW_BF16 && y.dtype == SPW_BF16) {
    std::memcpy(y.data, x.data, size_t(x.bytes()));
  } else {
    fail("cast from %s to %s: bf16 converts to and from f32 only",
         dtype_name(x.dtype), dtype_name(y.dtype));
  }
}

void cast_op(spw_tensor *const *ins, spw_tensor *const *outs) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  if (!same_shape(x, y))
    fail("result has shape %s, expected %s", y.shape().c_str(),
         x.shape().c_str());
  if (x.dtype == SPW_BF16 || y.dtype == SPW_BF16)
    return cast_bf16(x, y);
  switch (x.dtype) {
  case SPW_F32: return cast_from<float>(x, y);
  case SPW_I64: return cast_from<int64_t>(x, y);
  case SPW_I32: return cast_from<int32_t>(x, y);
  case SPW_BOOL: return cast_from<uint8_t>(x, y);
  default: fail("unsupported dtype %s", dtype_name(x.dtype));
  }
}


// ---- fast gelu (float, vmath polynomials) ----------------------------------

// gelu(x) = x Phi(x), Phi(x) = erfc(-x/sqrt2)/2 (exact form), or
// x (1 + tanh u)/2 = x / (1 + e^{-2u}) (tanh form): both relative-accurate
// in the negative tail where 1 + erf(x/sqrt2) would cancel.
__attribute__((target_clones("avx512f", "avx2", "default"))) void
gelu_fast(const float *__restrict x, float *__restrict y, int64_t n,
          bool approx) {
  using namespace cpu::vmath;
  if (approx) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i];
      const float u = 0.79788456f * (v + 0.044715f * v * v * v);
      float m = -2.0f * u;
      m = m > 88.0f ? 88.0f : m;
      // -inf: the reference's -inf * (1 + tanh) = -inf * 0 is NaN.
      const float g = v / (1.0f + exp_f(m));
      y[i] = v == -__builtin_inff() ? __builtin_nanf("") : g;
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = v * (0.5f * erfc_f(v * -0.70710678f));
  }
}

// dy * gelu'(x): Phi(x) + x phi(x) (exact), or the tanh form's derivative
// with 1 + t = 2/(1+E), 1 - t = 2E/(1+E), E = e^{-2u}.
__attribute__((target_clones("avx512f", "avx2", "default"))) void
gelu_grad_fast(const float *__restrict x, const float *__restrict dy,
               float *__restrict dx, int64_t n, bool approx) {
  using namespace cpu::vmath;
  if (approx) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i];
      const float u = 0.79788456f * (v + 0.044715f * v * v * v);
      const float du = 0.79788456f * (1.0f + 0.134145f * v * v);
      float m = -2.0f * u;
      m = m > 88.0f ? 88.0f : m;
      const float e = exp_f(m), inv = 1.0f / (1.0f + e);
      const float opt = 2.0f * inv, omt = 2.0f * e * inv;
      const float d = dy[i] * (0.5f * opt + 0.5f * v * (opt * omt) * du);
      dx[i] = v == -__builtin_inff() ? __builtin_nanf("") : d; // as above
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float cdf = 0.5f * erfc_f(v * -0.70710678f);
    const float pdf = 0.39894228f * exp_f(-0.5f * v * v);
    dx[i] = dy[i] * (cdf + v * pdf);
  }
}

void gelu_fast_op(spw_tensor *const *ins, spw_tensor *const *outs,
                  bool approx) {
  auto [x, y] = unary_f32_operands(ins, outs);
  const float *px = x.as<float>();
  float *py = y.as<float>();
  cpu::parallel_for(x.numel, kGrain, [&](int64_t lo, int64_t hi) {
    gelu_fast(px + lo, py + lo, hi - lo, approx);
  });
}

void gelu_grad_fast_op(spw_tensor *const *ins, spw_tensor *const *outs,
                       bool approx) {
  auto [x, dy, dx] = binary_same_f32_operands(ins, outs, "x", "dy");
  const float *px = x.as<float>(), *pd = dy.as<float>();
  float *po = dx.as<float>();
  cpu::parallel_for(x.numel, kGrain, [&](int64_t lo, int64_t hi) {
    gelu_grad_fast(px + lo, pd + lo, po + lo, hi - lo, approx);
  });
}

} // namespace

SPW_KERNEL_DEF(add) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "add", [&] { binary(BinOp::Add, ins, outs); });
}
SPW_KERNEL_DEF(sub) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "sub", [&] { binary(BinOp::Sub, ins, outs); });
}
SPW_KERNEL_DEF(mul) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "mul", [&] { binary(BinOp::Mul, ins, outs); });
}
SPW_KERNEL_DEF(div) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "div", [&] { binary(BinOp::Div, ins, outs); });
}
SPW_KERNEL_DEF(neg) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "neg", [&] {
    const spw_tensor &x = input(ins, 0, "x");
    spw_tensor &y = output(outs, 0, "y");
    expect_like(y, x, "result", "x");
    switch (x.dtype) {
    case SPW_F32: return neg_typed<float>(x, y);
    case SPW_I64: return neg_typed<int64_t>(x, y);
    case SPW_I32: return neg_typed<int32_t>(x, y);
    default: fail("unsupported dtype %s", dtype_name(x.dtype));
    }
  });
}
SPW_KERNEL_DEF(relu) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "relu", [&] {
    // max(x, 0) as ONNX and onnxruntime: NaN stays NaN and -0 stays -0
    // (`v > 0 ? v : 0` made both +0).
    unary_f32(ins, outs, [](float v) { return v < 0.0f ? 0.0f : v; });
  });
}
SPW_KERNEL_DEF(tanh) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "tanh",
          [&] { unary_f32(ins, outs, [](float v) { return std::tanh(v); }); });
}
SPW_KERNEL_DEF(gelu) {
  (void)fattrs;
  guarded(ctx, "gelu", [&] {
    bool approx = gelu_mode(iattrs) == 1;
    if (cpu::fast_kernels())
      return gelu_fast_op(ins, outs, approx);
    unary_f32(ins, outs,
              [approx](float v) { return float(gelu_ref(v, approx)); });
  });
}
SPW_KERNEL_DEF(relu_grad) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "relu_grad", [&] {
    // A NaN in x or dy gives NaN, not a silent 0 where x <= 0 or x is NaN.
    binary_same_f32(ins, outs, "x", "dy", [](float x, float dy) {
      if (std::isnan(x))
        return x;
      return x > 0.0f || std::isnan(dy) ? dy : 0.0f;
    });
  });
}
SPW_KERNEL_DEF(tanh_grad) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "tanh_grad", [&] {
    binary_same_f32(ins, outs, "y", "dy", [](float y, float dy) {
      return float(double(dy) * (1.0 - double(y) * double(y)));
    });
  });
}
SPW_KERNEL_DEF(gelu_grad) {
  (void)fattrs;
  guarded(ctx, "gelu_grad", [&] {
    bool approx = gelu_mode(iattrs) == 1;
    if (cpu::fast_kernels())
      return gelu_grad_fast_op(ins, outs, approx);
    binary_same_f32(ins, outs, "x", "dy", [approx](float x, float dy) {
      return float(double(dy) * gelu_deriv(x, approx));
    });
  });
}
#define SPW_UNARY_F32(name, expr)                                              \
  SPW_KERNEL_DEF(name) {                                                       \
    (void)iattrs, (void)fattrs;                                                \
    guarded(ctx, #name, [&] {                                                  \
      unary_f32(ins, outs, [](float f) {                                       \
        const double v = double(f);                                            \
        return float(expr);                                                    \
      });                                                                      \
    });                                                                        \
  }
SPW_UNARY_F32(exp, std::exp(v))
SPW_UNARY_F32(log, std::log(v))
SPW_UNARY_F32(sqrt, std::sqrt(v))
SPW_UNARY_F32(reciprocal, 1.0 / v)
SPW_UNARY_F32(erf, std::erf(v))
SPW_UNARY_F32(sigmoid, sigmoid_ref(v))
SPW_UNARY_F32(cos, std::cos(v))
SPW_UNARY_F32(sin, std::sin(v))
SPW_UNARY_F32(silu, v * sigmoid_ref(v))
#undef SPW_UNARY_F32
SPW_KERNEL_DEF(silu_grad) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "silu_grad", [&] {
    binary_same_f32(ins, outs, "x", "dy", [](float x, float dy) {
      const double s = sigmoid_ref(x);
      return float(double(dy) * s * (1.0 + double(x) * (1.0 - s)));
    });
  });
}
SPW_KERNEL_DEF(pow) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "pow", [&] { pow_op(ins, outs); });
}
SPW_KERNEL_DEF(equal) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "equal", [&] { compare(Cmp::Eq, ins, outs); });
}
SPW_KERNEL_DEF(less) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "less", [&] { compare(Cmp::Lt, ins, outs); });
}
SPW_KERNEL_DEF(less_or_equal) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "less_or_equal", [&] { compare(Cmp::Le, ins, outs); });
}
SPW_KERNEL_DEF(greater) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "greater", [&] { compare(Cmp::Gt, ins, outs); });
}
SPW_KERNEL_DEF(where) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "where", [&] { where_op(ins, outs); });
}
SPW_KERNEL_DEF(cast) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "cast", [&] { cast_op(ins, outs); });
}
