//===- kernels_cpu.cpp - the CPU kernels of spillway_rt.h -----------------===//
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

#include "kernel_checks.h"
#include "runtime_internal.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

using namespace spw;

namespace {

using namespace spw::checks;

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

// ---- elementwise binary ----------------------------------------------------

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
    for (int64_t i = 0; i < y.numel; ++i)
      py[i] = apply<T>(op, pa[i], pb[i]);
    return;
  }
  auto sa = broadcast_strides(a, y.rank, y.dims, "a");
  auto sb = broadcast_strides(b, y.rank, y.dims, "b");
  for_each_index<2>(y.rank, y.dims, {sa.data(), sb.data()},
                    [&](int64_t i, const std::array<int64_t, 2> &o) {
                      py[i] = apply<T>(op, pa[o[0]], pb[o[1]]);
                    });
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

// ---- matmul ------------------------------------------------------------------

// C[M,N] = alpha * A[M,K] B[K,N] (+ beta * Cin, when given as a pointer with
// strides). A and B are addressed with arbitrary strides; B is packed
// row-major first when it is not, so the inner loop (i-k-j order) runs over
// contiguous memory.
struct MatView {
  const float *p;
  int64_t s0, s1; // strides of the two dims
};

void matmul2d(MatView A, MatView B, float *C, int64_t M, int64_t N, int64_t K,
              double alpha, const MatView *Cin, double beta,
              std::vector<float> &pack, std::vector<double> &acc) {
  const float *Bp = B.p;
  if (!(B.s1 == 1 && B.s0 == N)) {
    pack.resize(size_t(K * N));
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j)
        pack[size_t(k * N + j)] = B.p[k * B.s0 + j * B.s1];
    Bp = pack.data();
  }
  acc.resize(size_t(N));
  for (int64_t i = 0; i < M; ++i) {
    std::fill(acc.begin(), acc.end(), 0.0);
    double *ac = acc.data();
    for (int64_t k = 0; k < K; ++k) {
      const double a = A.p[i * A.s0 + k * A.s1];
      const float *brow = Bp + k * N;
      for (int64_t j = 0; j < N; ++j)
        ac[j] += a * double(brow[j]);
    }
    float *crow = C + i * N;
    if (Cin) {
      for (int64_t j = 0; j < N; ++j)
        crow[j] = float(alpha * ac[j] +
                        beta * double(Cin->p[i * Cin->s0 + j * Cin->s1]));
    } else {
      for (int64_t j = 0; j < N; ++j)
        crow[j] = float(alpha * ac[j]);
    }
  }
}

void matmul(spw_tensor *const *ins, spw_tensor *const *outs) {
  const spw_tensor &a = input(ins, 0, "a"), &b = input(ins, 1, "b");
  spw_tensor &y = output(outs, 0, "y");
  expect_dtype(a, SPW_F32, "a");
  expect_dtype(b, SPW_F32, "b");
  expect_dtype(y, SPW_F32, "result");
  if (a.rank < 1 || b.rank < 1)
    fail("operands must have rank >= 1, got %s and %s", a.shape().c_str(),
         b.shape().c_str());
  // numpy: a 1-D a is [1,K] and b 1-D is [K,1], the added dim dropped after.
  const int64_t M = a.rank >= 2 ? a.dims[a.rank - 2] : 1;
  const int64_t K = a.dims[a.rank - 1];
  const int64_t Kb = b.rank >= 2 ? b.dims[b.rank - 2] : b.dims[0];
  const int64_t N = b.rank >= 2 ? b.dims[b.rank - 1] : 1;
  if (K != Kb)
    fail("inner dimensions differ: %s x %s", a.shape().c_str(),
         b.shape().c_str());
  // Batch dims broadcast like numpy.
  spw_tensor ab, bb; // shape-only views of the batch dims
  ab.rank = std::max(a.rank - 2, 0);
  bb.rank = std::max(b.rank - 2, 0);
  std::copy(a.dims, a.dims + ab.rank, ab.dims);
  std::copy(b.dims, b.dims + bb.rank, bb.dims);
  std::vector<int64_t> expect;
  try {
    expect = broadcast_shape(ab, bb);
  } catch (const Error &) {
    fail("batch dimensions of %s and %s are not broadcast-compatible",
         a.shape().c_str(), b.shape().c_str());
  }
  const int batch_rank = int(expect.size());
  if (a.rank >= 2)
    expect.push_back(M);
  if (b.rank >= 2)
    expect.push_back(N);
  expect_shape(y, expect, "result");
  auto sa = broadcast_strides(ab, batch_rank, expect.data(), "a");
  auto sb = broadcast_strides(bb, batch_rank, expect.data(), "b");
  std::vector<float> pack;
  std::vector<double> acc;
  const float *pa = a.as<float>(), *pb = b.as<float>();
  float *py = y.as<float>();
  for_each_index<2>(batch_rank, expect.data(), {sa.data(), sb.data()},
                    [&](int64_t bi, const std::array<int64_t, 2> &o) {
                      MatView A{pa + o[0] * M * K, K, 1};
                      MatView B{pb + o[1] * K * N, N, 1};
                      matmul2d(A, B, py + bi * M * N, M, N, K, 1.0, nullptr,
                               0.0, pack, acc);
                    });
}

void gemm(spw_tensor *const *ins, spw_tensor *const *outs,
          const int64_t *iattrs, const double *fattrs) {
  const spw_tensor &a = input(ins, 0, "a"), &b = input(ins, 1, "b");
  const spw_tensor *c = ins ? ins[2] : nullptr;
  spw_tensor &y = output(outs, 0, "y");
  need_iattrs(iattrs);
  if (!fattrs)
    fail("float attributes are NULL");
  const bool ta = iattrs[0] != 0, tb = iattrs[1] != 0;
  const double alpha = fattrs[0], beta = fattrs[1];
  expect_dtype(a, SPW_F32, "a");
  expect_dtype(b, SPW_F32, "b");
  expect_dtype(y, SPW_F32, "result");
  if (a.rank != 2 || b.rank != 2)
    fail("operands must be 2-D, got %s and %s", a.shape().c_str(),
         b.shape().c_str());
  const int64_t M = ta ? a.dims[1] : a.dims[0], K = ta ? a.dims[0] : a.dims[1];
  const int64_t Kb = tb ? b.dims[1] : b.dims[0], N = tb ? b.dims[0] : b.dims[1];
  if (K != Kb)
    fail("inner dimensions differ: %s%s x %s%s", a.shape().c_str(),
         ta ? "^T" : "", b.shape().c_str(), tb ? "^T" : "");
  expect_shape(y, {M, N}, "result");
  MatView A{a.as<float>(), ta ? 1 : K, ta ? M : 1};
  MatView B{b.as<float>(), tb ? 1 : N, tb ? K : 1};
  MatView Cv{};
  if (c) {
    expect_dtype(*c, SPW_F32, "c");
    int64_t md[2] = {M, N};
    auto s = broadcast_strides(*c, 2, md, "c");
    Cv = MatView{c->as<float>(), s[0], s[1]};
  }
  // beta = 0 does not read c (BLAS, onnxruntime and the CUDA kernel): a NaN
  // or Inf in c adds nothing, where 0 * NaN would be NaN.
  const bool use_c = c && beta != 0.0;
  std::vector<float> pack;
  std::vector<double> acc;
  matmul2d(A, B, y.as<float>(), M, N, K, alpha, use_c ? &Cv : nullptr, beta,
           pack, acc);
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

template <class F>
void unary_f32(spw_tensor *const *ins, spw_tensor *const *outs, F f) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  expect_dtype(x, SPW_F32, "x");
  expect_like(y, x, "result", "x");
  const float *px = x.as<float>();
  float *py = y.as<float>();
  for (int64_t i = 0; i < x.numel; ++i)
    py[i] = f(px[i]);
}

// f(a, b) elementwise over two same-shaped f32 inputs.
template <class F>
void binary_same_f32(spw_tensor *const *ins, spw_tensor *const *outs,
                     const char *n0, const char *n1, F f) {
  const spw_tensor &x = input(ins, 0, n0), &dy = input(ins, 1, n1);
  spw_tensor &dx = output(outs, 0, "dx");
  expect_dtype(x, SPW_F32, n0);
  expect_like(dy, x, n1, n0);
  expect_like(dx, x, "result", n0);
  const float *px = x.as<float>(), *pd = dy.as<float>();
  float *po = dx.as<float>();
  for (int64_t i = 0; i < x.numel; ++i)
    po[i] = f(px[i], pd[i]);
}

template <class T> void neg_typed(const spw_tensor &x, spw_tensor &y) {
  const T *px = x.as<T>();
  T *py = y.as<T>();
  for (int64_t i = 0; i < x.numel; ++i) {
    if constexpr (std::is_floating_point_v<T>)
      py[i] = -px[i]; // flips the sign bit: -(+0) is -0 (0 - x would be +0)
    else
      py[i] = T(0) - px[i];
  }
}

int64_t gelu_mode(const int64_t *iattrs) {
  int64_t approx = need_iattrs(iattrs)[0];
  if (approx != 0 && approx != 1)
    fail("approximate must be 0 (none) or 1 (tanh), got %lld",
         (long long)approx);
  return approx;
}

// ---- softmax -----------------------------------------------------------------

struct AxisSplit {
  int64_t outer, n, inner;
};

AxisSplit split_at(const spw_tensor &t, int64_t axis) {
  if (t.rank == 0)
    return {1, 1, 1};
  return {prod(t.dims, 0, axis), t.dims[axis], prod(t.dims, axis + 1, t.rank)};
}

void softmax(spw_tensor *const *ins, spw_tensor *const *outs,
             const int64_t *iattrs) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  expect_dtype(x, SPW_F32, "x");
  expect_like(y, x, "result", "x");
  AxisSplit s = split_at(x, axis_of(x, need_iattrs(iattrs)[0]));
  const float *px = x.as<float>();
  float *py = y.as<float>();
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t in = 0; in < s.inner; ++in) {
      const int64_t base = o * s.n * s.inner + in;
      double mx = -INFINITY;
      for (int64_t k = 0; k < s.n; ++k)
        mx = std::max(mx, double(px[base + k * s.inner]));
      double sum = 0.0;
      for (int64_t k = 0; k < s.n; ++k)
        sum += std::exp(double(px[base + k * s.inner]) - mx);
      for (int64_t k = 0; k < s.n; ++k)
        py[base + k * s.inner] =
            float(std::exp(double(px[base + k * s.inner]) - mx) / sum);
    }
}

void softmax_grad(spw_tensor *const *ins, spw_tensor *const *outs,
                  const int64_t *iattrs) {
  const spw_tensor &y = input(ins, 0, "y"), &dy = input(ins, 1, "dy");
  spw_tensor &dx = output(outs, 0, "dx");
  expect_dtype(y, SPW_F32, "y");
  expect_like(dy, y, "dy", "y");
  expect_like(dx, y, "result", "y");
  AxisSplit s = split_at(y, axis_of(y, need_iattrs(iattrs)[0]));
  const float *py = y.as<float>(), *pd = dy.as<float>();
  float *po = dx.as<float>();
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t in = 0; in < s.inner; ++in) {
      const int64_t base = o * s.n * s.inner + in;
      double dot = 0.0;
      for (int64_t k = 0; k < s.n; ++k)
        dot += double(pd[base + k * s.inner]) * double(py[base + k * s.inner]);
      for (int64_t k = 0; k < s.n; ++k) {
        int64_t i = base + k * s.inner;
        po[i] = float(double(py[i]) * (double(pd[i]) - dot));
      }
    }
}

// ---- layer norm -----------------------------------------------------------------

// Checks scale/bias against the normalized dims [axis, rank) of x.
void check_norm_param(const spw_tensor &p, const spw_tensor &x, int64_t axis,
                      const char *what) {
  expect_dtype(p, SPW_F32, what);
  std::vector<int64_t> want(x.dims + axis, x.dims + x.rank);
  if (!shape_is(p, want))
    fail("%s has shape %s, expected the normalized dims %s of x %s", what,
         p.shape().c_str(), vec_str(want).c_str(), x.shape().c_str());
}

void layer_norm(spw_tensor *const *ins, spw_tensor *const *outs,
                const int64_t *iattrs, const double *fattrs) {
  const spw_tensor &x = input(ins, 0, "x"), &scale = input(ins, 1, "scale");
  const spw_tensor *bias = ins[2];
  spw_tensor &y = output(outs, 0, "y");
  if (!fattrs)
    fail("float attributes are NULL");
  expect_dtype(x, SPW_F32, "x");
  expect_like(y, x, "result", "x");
  const int64_t axis = axis_of(x, need_iattrs(iattrs)[0]);
  check_norm_param(scale, x, axis, "scale");
  if (bias)
    check_norm_param(*bias, x, axis, "bias");
  const double eps = fattrs[0];
  const int64_t outer = prod(x.dims, 0, axis), n = prod(x.dims, axis, x.rank);
  const float *px = x.as<float>(), *ps = scale.as<float>();
  const float *pb = bias ? bias->as<float>() : nullptr;
  float *py = y.as<float>();
  for (int64_t o = 0; o < outer; ++o) {
    const float *row = px + o * n;
    double mean = 0.0;
    for (int64_t i = 0; i < n; ++i)
      mean += row[i];
    mean /= double(n);
    double var = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      double d = row[i] - mean;
      var += d * d;
    }
    var /= double(n);
    const double rstd = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < n; ++i) {
      double v = (row[i] - mean) * rstd * ps[i];
      if (pb)
        v += pb[i];
      py[o * n + i] = float(v);
    }
  }
}

void layer_norm_grad(spw_tensor *const *ins, spw_tensor *const *outs,
                     const int64_t *iattrs, const double *fattrs) {
  const spw_tensor &x = input(ins, 0, "x"), &scale = input(ins, 1, "scale");
  const spw_tensor &dy = input(ins, 2, "dy");
  if (!outs)
    fail("results are NULL");
  spw_tensor *dx = outs[0], *dscale = outs[1], *dbias = outs[2];
  if (!fattrs)
    fail("float attributes are NULL");
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
  const double eps = fattrs[0];
  const int64_t outer = prod(x.dims, 0, axis), n = prod(x.dims, axis, x.rank);
  const float *px = x.as<float>(), *ps = scale.as<float>(),
              *pd = dy.as<float>();
  std::vector<double> ds(size_t(n), 0.0), db(size_t(n), 0.0), xhat(static_cast<size_t>(n));
  for (int64_t o = 0; o < outer; ++o) {
    const float *row = px + o * n, *drow = pd + o * n;
    double mean = 0.0;
    for (int64_t i = 0; i < n; ++i)
      mean += row[i];
    mean /= double(n);
    double var = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      double d = row[i] - mean;
      var += d * d;
    }
    var /= double(n);
    const double rstd = 1.0 / std::sqrt(var + eps);
    double mean_g = 0.0, mean_gx = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      xhat[size_t(i)] = (row[i] - mean) * rstd;
      double g = double(drow[i]) * ps[i];
      mean_g += g;
      mean_gx += g * xhat[size_t(i)];
      ds[size_t(i)] += double(drow[i]) * xhat[size_t(i)];
      db[size_t(i)] += drow[i];
    }
    mean_g /= double(n);
    mean_gx /= double(n);
    if (dx) {
      float *out = dx->as<float>() + o * n;
      for (int64_t i = 0; i < n; ++i) {
        double g = double(drow[i]) * ps[i];
        out[i] = float(rstd * (g - mean_g - xhat[size_t(i)] * mean_gx));
      }
    }
  }
  if (dscale)
    for (int64_t i = 0; i < n; ++i)
      dscale->as<float>()[i] = float(ds[size_t(i)]);
  if (dbias)
    for (int64_t i = 0; i < n; ++i)
      dbias->as<float>()[i] = float(db[size_t(i)]);
}

// ---- gather ------------------------------------------------------------------

// Reads index j of an i64/i32 tensor, wrapping negatives into [0, n) and
// failing (naming the op's context) when out of range.
int64_t index_at(const spw_tensor &idx, int64_t j, int64_t n,
                 int64_t axis) {
  int64_t v = idx.dtype == SPW_I64 ? idx.as<int64_t>()[j]
                                   : int64_t(idx.as<int32_t>()[j]);
  if (v < -n || v >= n)
    fail("index %lld at position %lld of indices is out of range for axis "
         "%lld of size %lld (valid: %lld..%lld)",
         (long long)v, (long long)j, (long long)axis, (long long)n,
         (long long)-n, (long long)(n - 1));
  return v < 0 ? v + n : v;
}

std::vector<int64_t> gather_shape(const spw_tensor &data,
                                  const spw_tensor &idx, int64_t axis) {
  std::vector<int64_t> s(data.dims, data.dims + axis);
  s.insert(s.end(), idx.dims, idx.dims + idx.rank);
  s.insert(s.end(), data.dims + axis + 1, data.dims + data.rank);
  return s;
}

void gather(spw_tensor *const *ins, spw_tensor *const *outs,
            const int64_t *iattrs) {
  const spw_tensor &data = input(ins, 0, "data"),
                   &idx = input(ins, 1, "indices");
  spw_tensor &y = output(outs, 0, "y");
  expect_index_dtype(idx, "indices");
  if (data.rank < 1)
    fail("data must have rank >= 1");
  const int64_t axis = axis_of(data, need_iattrs(iattrs)[0]);
  expect_dtype(y, data.dtype, "result");
  expect_shape(y, gather_shape(data, idx, axis), "result");
  const int64_t outer = prod(data.dims, 0, axis), n = data.dims[axis];
  const int64_t inner = prod(data.dims, axis + 1, data.rank);
  const int64_t es = dtype_size(data.dtype), ni = idx.numel;
  std::vector<int64_t> rows(static_cast<size_t>(ni));
  for (int64_t j = 0; j < ni; ++j)
    rows[size_t(j)] = index_at(idx, j, n, axis);
  const char *src = static_cast<const char *>(data.data);
  char *dst = static_cast<char *>(y.data);
  const size_t chunk = size_t(inner * es);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < ni; ++j)
      std::memcpy(dst + (o * ni + j) * inner * es,
                  src + (o * n + rows[size_t(j)]) * inner * es, chunk);
}

void gather_grad(spw_tensor *const *ins, spw_tensor *const *outs,
                 const int64_t *iattrs) {
  const spw_tensor &idx = input(ins, 0, "indices"), &dy = input(ins, 1, "dy");
  spw_tensor &dd = output(outs, 0, "ddata");
  expect_index_dtype(idx, "indices");
  expect_dtype(dy, SPW_F32, "dy");
  expect_dtype(dd, SPW_F32, "result");
  if (dd.rank < 1)
    fail("result must have rank >= 1");
  const int64_t axis = axis_of(dd, need_iattrs(iattrs)[0]);
  expect_shape(dy, gather_shape(dd, idx, axis), "dy");
  const int64_t outer = prod(dd.dims, 0, axis), n = dd.dims[axis];
  const int64_t inner = prod(dd.dims, axis + 1, dd.rank), ni = idx.numel;
  std::vector<int64_t> rows(static_cast<size_t>(ni));
  for (int64_t j = 0; j < ni; ++j)
    rows[size_t(j)] = index_at(idx, j, n, axis);
  float *pd = dd.as<float>();
  const float *pg = dy.as<float>();
  std::fill(pd, pd + dd.numel, 0.0f);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < ni; ++j) {
      float *dst = pd + (o * n + rows[size_t(j)]) * inner;
      const float *src = pg + (o * ni + j) * inner;
      for (int64_t k = 0; k < inner; ++k)
        dst[k] += src[k];
    }
}

// ---- shape ops -------------------------------------------------------------------

void reshape(spw_tensor *const *ins, spw_tensor *const *outs) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  expect_dtype(y, x.dtype, "result");
  if (y.numel != x.numel)
    fail("cannot reshape %s (%lld elements) to %s (%lld elements)",
         x.shape().c_str(), (long long)x.numel, y.shape().c_str(),
         (long long)y.numel);
  if (y.data != x.data && x.numel > 0)
    std::memcpy(y.data, x.data, size_t(x.bytes()));
}

template <class T>
void gather_strided(const spw_tensor &x, spw_tensor &y, const int64_t *xs) {
  const T *px = x.as<T>();
  T *py = y.as<T>();
  for_each_index<1>(y.rank, y.dims, {xs},
                    [&](int64_t i, const std::array<int64_t, 1> &o) {
                      py[i] = px[o[0]];
                    });
}

void copy_strided(const spw_tensor &x, spw_tensor &y, const int64_t *xs) {
  switch (dtype_size(x.dtype)) {
  case 8: return gather_strided<int64_t>(x, y, xs);
  case 4: return gather_strided<int32_t>(x, y, xs);
  case 1: return gather_strided<uint8_t>(x, y, xs);
  default: fail("unsupported dtype %s", dtype_name(x.dtype));
  }
}

void transpose(spw_tensor *const *ins, spw_tensor *const *outs,
               const int64_t *iattrs) {
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
  copy_strided(x, y, ys);
}

void broadcast_to(spw_tensor *const *ins, spw_tensor *const *outs) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  expect_dtype(y, x.dtype, "result");
  auto s = broadcast_strides(x, y.rank, y.dims, "x");
  copy_strided(x, y, s.data());
}

// Sums x into y, where y's strides over x's index space are `ys` (0 on
// summed dims); y = sum * scale.
template <class T>
void sum_into(const spw_tensor &x, spw_tensor &y, const int64_t *ys,
              double scale) {
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
  // Floats start at -0, the identity of IEEE addition: a sum of -0s is -0
  // (as onnxruntime's and numpy's), anything else is what +0 would give.
  std::vector<Acc> acc(size_t(y.numel), std::is_floating_point_v<T> && x.numel > 0
                                            ? Acc(-0.0)
                                            : Acc(0));
  const T *px = x.as<T>();
  for_each_index<1>(x.rank, x.dims, {ys},
                    [&](int64_t i, const std::array<int64_t, 1> &o) {
                      acc[size_t(o[0])] += Acc(px[i]);
                    });
  T *py = y.as<T>();
  for (int64_t i = 0; i < y.numel; ++i) {
    if constexpr (std::is_floating_point_v<T>)
      py[i] = T(acc[size_t(i)] * scale);
    else
      py[i] = scale == 1.0 ? T(acc[size_t(i)])
                           : T(double(acc[size_t(i)]) * scale);
  }
}

void sum_dispatch(const spw_tensor &x, spw_tensor &y, const int64_t *ys,
                  double scale) {
  switch (x.dtype) {
  case SPW_F32: return sum_into<float>(x, y, ys, scale);
  case SPW_I64: return sum_into<int64_t>(x, y, ys, scale);
  case SPW_I32: return sum_into<int32_t>(x, y, ys, scale);
  default: fail("unsupported dtype %s", dtype_name(x.dtype));
  }
}

// Validates reduce's i[n, axes] against x and the result y (keepdims or
// not); fills y's strides over x's index space (0 on reduced dims) and
// returns the number of elements reduced into each result element.
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

void reduce(spw_tensor *const *ins, spw_tensor *const *outs,
            const int64_t *iattrs, bool mean) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  int64_t ys[kMaxRank] = {};
  const int64_t count = reduce_strides(x, y, iattrs, ys);
  double scale = 1.0;
  if (mean) {
    if (x.dtype != SPW_F32)
      fail("reduce_mean supports only f32, got %s", dtype_name(x.dtype));
    scale = count > 0 ? 1.0 / double(count) : NAN;
  }
  sum_dispatch(x, y, ys, scale);
}

void sum_to_shape(spw_tensor *const *ins, spw_tensor *const *outs) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  expect_dtype(y, x.dtype, "result");
  auto s = broadcast_strides(y, x.rank, x.dims, "result");
  sum_dispatch(x, y, s.data(), 1.0);
}

// ---- cross entropy --------------------------------------------------------------

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

// Validates logits/labels; returns the label of each row (-1 if ignored).
std::vector<int64_t> xent_labels(const spw_tensor &logits,
                                 const spw_tensor &labels,
                                 const XentAttrs &at) {
  expect_dtype(logits, SPW_F32, "logits");
  expect_index_dtype(labels, "labels");
  if (logits.rank != 2)
    fail("logits must be [N,C], got %s", logits.shape().c_str());
  const int64_t N = logits.dims[0], C = logits.dims[1];
  expect_shape(labels, {N}, "labels");
  std::vector<int64_t> out(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) {
    int64_t l = labels.dtype == SPW_I64 ? labels.as<int64_t>()[i]
                                        : int64_t(labels.as<int32_t>()[i]);
    if (at.has_ignore && l == at.ignore_index) {
      out[size_t(i)] = -1;
      continue;
    }
    if (l < 0 || l >= C)
      fail("label %lld at position %lld is out of range [0, %lld)",
           (long long)l, (long long)i, (long long)C);
    out[size_t(i)] = l;
  }
  return out;
}

// log-sum-exp of a row, and its max, in double.
double row_lse(const float *row, int64_t C, double &mx) {
  mx = -INFINITY;
  for (int64_t c = 0; c < C; ++c)
    mx = std::max(mx, double(row[c]));
  double s = 0.0;
  for (int64_t c = 0; c < C; ++c)
    s += std::exp(double(row[c]) - mx);
  return mx + std::log(s);
}

void xent(spw_tensor *const *ins, spw_tensor *const *outs,
          const int64_t *iattrs) {
  const spw_tensor &logits = input(ins, 0, "logits"),
                   &labels = input(ins, 1, "labels");
  spw_tensor &y = output(outs, 0, "loss");
  XentAttrs at = xent_attrs(iattrs);
  std::vector<int64_t> lab = xent_labels(logits, labels, at);
  expect_dtype(y, SPW_F32, "result");
  if (y.numel != 1)
    fail("result must be a scalar, got %s", y.shape().c_str());
  const int64_t N = logits.dims[0], C = logits.dims[1];
  double total = 0.0;
  int64_t count = 0;
  for (int64_t i = 0; i < N; ++i) {
    if (lab[size_t(i)] < 0)
      continue;
    const float *row = logits.as<float>() + i * C;
    double mx;
    total += row_lse(row, C, mx) - double(row[lab[size_t(i)]]);
    ++count;
  }
  // Mean over zero non-ignored labels is 0/0 = NaN, as in PyTorch and ONNX.
  y.as<float>()[0] =
      float(at.sum ? total : (count > 0 ? total / double(count) : NAN));
}

void xent_grad(spw_tensor *const *ins, spw_tensor *const *outs,
               const int64_t *iattrs) {
  const spw_tensor &logits = input(ins, 0, "logits"),
                   &labels = input(ins, 1, "labels"),
                   &dloss = input(ins, 2, "dloss");
  spw_tensor &dl = output(outs, 0, "dlogits");
  XentAttrs at = xent_attrs(iattrs);
  std::vector<int64_t> lab = xent_labels(logits, labels, at);
  expect_dtype(dloss, SPW_F32, "dloss");
  if (dloss.numel != 1)
    fail("dloss must be a scalar, got %s", dloss.shape().c_str());
  expect_like(dl, logits, "result", "logits");
  const int64_t N = logits.dims[0], C = logits.dims[1];
  int64_t count = 0;
  for (int64_t l : lab)
    count += l >= 0;
  double scale = double(dloss.as<float>()[0]);
  if (!at.sum)
    scale = count > 0 ? scale / double(count) : 0.0;
  float *out = dl.as<float>();
  for (int64_t i = 0; i < N; ++i) {
    float *orow = out + i * C;
    if (lab[size_t(i)] < 0) {
      std::fill(orow, orow + C, 0.0f);
      continue;
    }
    const float *row = logits.as<float>() + i * C;
    double mx;
    double lse = row_lse(row, C, mx);
    for (int64_t c = 0; c < C; ++c) {
      double p = std::exp(double(row[c]) - lse);
      if (c == lab[size_t(i)])
        p -= 1.0;
      orow[c] = float(scale * p);
    }
  }
}


// ---- Issue 3: elementwise with broadcasting ------------------------------------

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
  for (int64_t i = 0; i < x.numel; ++i)
    py[i] = cast_value<D, S>(px[i], from_bool, to_bool);
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

void cast_op(spw_tensor *const *ins, spw_tensor *const *outs) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  if (!same_shape(x, y))
    fail("result has shape %s, expected %s", y.shape().c_str(),
         x.shape().c_str());
  switch (x.dtype) {
  case SPW_F32: return cast_from<float>(x, y);
  case SPW_I64: return cast_from<int64_t>(x, y);
  case SPW_I32: return cast_from<int32_t>(x, y);
  case SPW_BOOL: return cast_from<uint8_t>(x, y);
  default: fail("unsupported dtype %s", dtype_name(x.dtype));
  }
}

// ---- reduce_max ----------------------------------------------------------------

template <class T, bool IsBool>
void max_into(const spw_tensor &x, spw_tensor &y, const int64_t *ys) {
  T init;
  if constexpr (std::is_floating_point_v<T>)
    init = -std::numeric_limits<T>::infinity();
  else
    init = std::numeric_limits<T>::lowest();
  std::vector<T> acc(size_t(y.numel), init);
  const T *px = x.as<T>();
  for_each_index<1>(x.rank, x.dims, {ys},
                    [&](int64_t i, const std::array<int64_t, 1> &o) {
                      T v = px[i];
                      if constexpr (IsBool)
                        v = T(v != 0);
                      T &m = acc[size_t(o[0])];
                      if constexpr (std::is_floating_point_v<T>) {
                        if (v > m || std::isnan(v)) // NaN propagates
                          m = v;
                      } else if (v > m) {
                        m = v;
                      }
                    });
  if (y.numel > 0)
    std::memcpy(y.data, acc.data(), size_t(y.bytes()));
}

void reduce_max(spw_tensor *const *ins, spw_tensor *const *outs,
                const int64_t *iattrs) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  int64_t ys[kMaxRank] = {};
  reduce_strides(x, y, iattrs, ys);
  switch (x.dtype) {
  case SPW_F32: return max_into<float, false>(x, y, ys);
  case SPW_I64: return max_into<int64_t, false>(x, y, ys);
  case SPW_I32: return max_into<int32_t, false>(x, y, ys);
  case SPW_BOOL: return max_into<uint8_t, true>(x, y, ys);
  default: fail("unsupported dtype %s", dtype_name(x.dtype));
  }
}

// ---- concat, slice -------------------------------------------------------------

void concat(spw_tensor *const *ins, spw_tensor *const *outs,
            const int64_t *iattrs) {
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
  for (int64_t o = 0; o < outer; ++o)
    for (const spw_tensor *xk : xs) {
      const int64_t chunk = xk->dims[axis] * inner;
      if (chunk > 0)
        std::memcpy(dst, static_cast<const char *>(xk->data) + o * chunk,
                    size_t(chunk));
      dst += chunk;
    }
}

// Validates i[starts[0..rank), steps[0..rank)] of a slice `small` of `big`
// (small[i] = big[starts + i * steps] per dim); fills `strides`, small's
// element strides into big, and returns the element offset of small[0].
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

template <class U>
void slice_copy(const spw_tensor &x, spw_tensor &y, int64_t base,
                const int64_t *xs, bool scatter) {
  U *px = static_cast<U *>(x.data) + base;
  U *py = y.as<U>();
  if (scatter) // x[base + ...] = y
    for_each_index<1>(y.rank, y.dims, {xs},
                      [&](int64_t i, const std::array<int64_t, 1> &o) {
                        px[o[0]] = py[i];
                      });
  else
    for_each_index<1>(y.rank, y.dims, {xs},
                      [&](int64_t i, const std::array<int64_t, 1> &o) {
                        py[i] = px[o[0]];
                      });
}

void slice_bytes(const spw_tensor &big, spw_tensor &small, int64_t base,
                 const int64_t *xs, bool scatter) {
  if (small.numel == 0)
    return;
  switch (dtype_size(big.dtype)) {
  case 8: return slice_copy<uint64_t>(big, small, base, xs, scatter);
  case 4: return slice_copy<uint32_t>(big, small, base, xs, scatter);
  case 1: return slice_copy<uint8_t>(big, small, base, xs, scatter);
  default: fail("unsupported dtype %s", dtype_name(big.dtype));
  }
}

void slice(spw_tensor *const *ins, spw_tensor *const *outs,
           const int64_t *iattrs) {
  const spw_tensor &x = input(ins, 0, "x");
  spw_tensor &y = output(outs, 0, "y");
  int64_t xs[kMaxRank] = {};
  const int64_t base = slice_map(x, y, iattrs, xs, "x", "result");
  slice_bytes(x, y, base, xs, false);
}

void slice_grad(spw_tensor *const *ins, spw_tensor *const *outs,
                const int64_t *iattrs) {
  const spw_tensor &dy = input(ins, 0, "dy");
  spw_tensor &dx = output(outs, 0, "dx");
  int64_t xs[kMaxRank] = {};
  const int64_t base = slice_map(dx, dy, iattrs, xs, "result", "dy");
  if (dx.numel > 0)
    std::memset(dx.data, 0, size_t(dx.bytes()));
  // Distinct elements of dy land on distinct elements of dx (steps != 0):
  // assignment is the sum.
  slice_bytes(dx, const_cast<spw_tensor &>(dy), base, xs, true);
}

// ---- linear ----------------------------------------------------------------------

void linear(spw_tensor *const *ins, spw_tensor *const *outs) {
  const spw_tensor &x = input(ins, 0, "x"), &w = input(ins, 1, "w");
  const spw_tensor *b = ins[2];
  spw_tensor &y = output(outs, 0, "y");
  expect_dtype(x, SPW_F32, "x");
  expect_dtype(w, SPW_F32, "w");
  expect_dtype(y, SPW_F32, "result");
  if (x.rank < 1)
    fail("x must have rank >= 1, got %s", x.shape().c_str());
  if (w.rank != 2)
    fail("w must be [K,N], got %s", w.shape().c_str());
  const int64_t K = x.dims[x.rank - 1], N = w.dims[1];
  if (w.dims[0] != K)
    fail("inner dimensions differ: x %s, w %s", x.shape().c_str(),
         w.shape().c_str());
  if (b) {
    expect_dtype(*b, SPW_F32, "b");
    expect_shape(*b, {N}, "b");
  }
  std::vector<int64_t> want(x.dims, x.dims + x.rank - 1);
  want.push_back(N);
  expect_shape(y, want, "result");
  const int64_t M = prod(x.dims, 0, x.rank - 1);
  MatView A{x.as<float>(), K, 1}, B{w.as<float>(), N, 1};
  MatView C{b ? b->as<float>() : nullptr, 0, 1};
  std::vector<float> pack;
  std::vector<double> acc;
  matmul2d(A, B, y.as<float>(), M, N, K, 1.0, b ? &C : nullptr, 1.0, pack,
           acc);
}

// ---- rms norm --------------------------------------------------------------------

void rms_norm(spw_tensor *const *ins, spw_tensor *const *outs,
              const int64_t *iattrs, const double *fattrs) {
  const spw_tensor &x = input(ins, 0, "x"), &scale = input(ins, 1, "scale");
  spw_tensor &y = output(outs, 0, "y");
  if (!fattrs)
    fail("float attributes are NULL");
  expect_dtype(x, SPW_F32, "x");
  expect_like(y, x, "result", "x");
  const int64_t axis = axis_of(x, need_iattrs(iattrs)[0]);
  check_norm_param(scale, x, axis, "scale");
  const double eps = fattrs[0];
  const int64_t outer = prod(x.dims, 0, axis), n = prod(x.dims, axis, x.rank);
  if (n == 0)
    return;
  const float *px = x.as<float>(), *ps = scale.as<float>();
  float *py = y.as<float>();
  for (int64_t o = 0; o < outer; ++o) {
    const float *row = px + o * n;
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i)
      ss += double(row[i]) * double(row[i]);
    const double r = 1.0 / std::sqrt(ss / double(n) + eps);
    for (int64_t i = 0; i < n; ++i)
      py[o * n + i] = float(double(row[i]) * r * double(ps[i]));
  }
}

void rms_norm_grad(spw_tensor *const *ins, spw_tensor *const *outs,
                   const int64_t *iattrs, const double *fattrs) {
  const spw_tensor &x = input(ins, 0, "x"), &scale = input(ins, 1, "scale");
  const spw_tensor &dy = input(ins, 2, "dy");
  if (!outs)
    fail("results are NULL");
  spw_tensor *dx = outs[0], *dscale = outs[1];
  if (!fattrs)
    fail("float attributes are NULL");
  expect_dtype(x, SPW_F32, "x");
  expect_like(dy, x, "dy", "x");
  const int64_t axis = axis_of(x, need_iattrs(iattrs)[0]);
  check_norm_param(scale, x, axis, "scale");
  if (dx)
    expect_like(*dx, x, "dx", "x");
  if (dscale)
    expect_like(*dscale, scale, "dscale", "scale");
  const double eps = fattrs[0];
  const int64_t outer = prod(x.dims, 0, axis), n = prod(x.dims, axis, x.rank);
  const float *px = x.as<float>(), *ps = scale.as<float>(),
              *pd = dy.as<float>();
  std::vector<double> ds(size_t(n), 0.0);
  for (int64_t o = 0; o < outer && n > 0; ++o) {
    const float *row = px + o * n, *drow = pd + o * n;
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i)
      ss += double(row[i]) * double(row[i]);
    const double r = 1.0 / std::sqrt(ss / double(n) + eps);
    // y_i = x_i r s_i, r = (mean(x^2) + eps)^-1/2, dr/dx_j = -r^3 x_j / n:
    // dx_j = r s_j dy_j - x_j r^3 / n * sum_i dy_i s_i x_i.
    double dot = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      dot += double(drow[i]) * double(ps[i]) * double(row[i]);
      ds[size_t(i)] += double(drow[i]) * double(row[i]) * r;
    }
    if (dx) {
      float *out = dx->as<float>() + o * n;
      const double c = r * r * r * dot / double(n);
      for (int64_t i = 0; i < n; ++i)
        out[i] = float(r * double(ps[i]) * double(drow[i]) -
                       double(row[i]) * c);
    }
  }
  if (dscale)
    for (int64_t i = 0; i < n; ++i)
      dscale->as<float>()[i] = float(ds[size_t(i)]);
}

// ---- rope ------------------------------------------------------------------------

// `t` (f32) numpy-broadcast to the shape of `like`, materialized.
std::vector<float> expand_to(const spw_tensor &t, const spw_tensor &like,
                             const char *what) {
  expect_dtype(t, SPW_F32, what);
  std::vector<float> out(static_cast<size_t>(like.numel));
  auto s = broadcast_strides(t, like.rank, like.dims, what);
  const float *pt = t.as<float>();
  for_each_index<1>(like.rank, like.dims, {s.data()},
                    [&](int64_t i, const std::array<int64_t, 1> &o) {
                      out[size_t(i)] = pt[o[0]];
                    });
  return out;
}

// rope (grad = false): y = x cos + rotate_half(x) sin, with
// rotate_half(x) = concat(-x[h:], x[:h]), h = D/2.
// rope_grad (grad = true), its transpose: with u = dy sin,
// dx = dy cos + concat(u[h:], -u[:h]).
void rope(spw_tensor *const *ins, spw_tensor *const *outs, bool grad) {
  const char *xname = grad ? "dy" : "x";
  const spw_tensor &x = input(ins, 0, xname), &c = input(ins, 1, "cos"),
                   &s = input(ins, 2, "sin");
  spw_tensor &y = output(outs, 0, grad ? "dx" : "y");
  expect_dtype(x, SPW_F32, xname);
  expect_like(y, x, "result", xname);
  if (x.rank < 1)
    fail("%s must have rank >= 1, got %s", xname, x.shape().c_str());
  const int64_t D = x.dims[x.rank - 1];
  if (D % 2 != 0)
    fail("the last dim of %s %s must be even", xname, x.shape().c_str());
  std::vector<float> cv = expand_to(c, x, "cos"), sv = expand_to(s, x, "sin");
  const int64_t h = D / 2, rows = D > 0 ? x.numel / D : 0;
  const float *px = x.as<float>();
  float *py = y.as<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = px + r * D, *cr = cv.data() + r * D,
                *sr = sv.data() + r * D;
    float *yr = py + r * D;
    for (int64_t d = 0; d < D; ++d) {
      double rot;
      if (!grad)
        rot = d < h ? -double(xr[d + h]) : double(xr[d - h]);
      else
        rot = d < h ? double(xr[d + h]) * sr[d + h]
                    : -double(xr[d - h]) * sr[d - h];
      const double v = double(xr[d]) * cr[d] + (grad ? rot : rot * sr[d]);
      yr[d] = float(v);
    }
  }
}

// ---- attention -------------------------------------------------------------------

struct AttnShape {
  int64_t B, H, Hkv, S, D;
  bool causal;
  double scale;
};

AttnShape attn_check(const spw_tensor &q, const spw_tensor &k,
                     const spw_tensor &v, const int64_t *iattrs,
                     const double *fattrs) {
  need_iattrs(iattrs);
  if (!fattrs)
    fail("float attributes are NULL");
  if (iattrs[0] != 0 && iattrs[0] != 1)
    fail("causal must be 0 or 1, got %lld", (long long)iattrs[0]);
  expect_dtype(q, SPW_F32, "q");
  expect_dtype(k, SPW_F32, "k");
  expect_dtype(v, SPW_F32, "v");
  if (q.rank != 4)
    fail("q must be [B,H,S,D], got %s", q.shape().c_str());
  if (k.rank != 4)
    fail("k must be [B,Hkv,S,D], got %s", k.shape().c_str());
  AttnShape a{q.dims[0], q.dims[1], k.dims[1], q.dims[2], q.dims[3],
              iattrs[0] == 1, fattrs[0]};
  expect_shape(k, {a.B, a.Hkv, a.S, a.D}, "k");
  expect_shape(v, {a.B, a.Hkv, a.S, a.D}, "v");
  if (a.Hkv < 1 || a.H % a.Hkv != 0)
    fail("the %lld query heads of q %s are not a multiple of the %lld kv "
         "heads of k %s",
         (long long)a.H, q.shape().c_str(), (long long)a.Hkv,
         k.shape().c_str());
  return a;
}

// Softmax probabilities of query row i of (q head qh, kv head kh): p[0..n),
// n = i + 1 when causal, S otherwise. Returns n.
int64_t attn_probs(const AttnShape &a, const float *qi, const float *kh,
                   int64_t i, std::vector<double> &p) {
  const int64_t n = a.causal ? i + 1 : a.S;
  double mx = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    const float *kj = kh + j * a.D;
    double s = 0.0;
    for (int64_t d = 0; d < a.D; ++d)
      s += double(qi[d]) * double(kj[d]);
    p[size_t(j)] = s * a.scale;
    mx = std::max(mx, p[size_t(j)]);
  }
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    p[size_t(j)] = std::exp(p[size_t(j)] - mx);
    sum += p[size_t(j)];
  }
  for (int64_t j = 0; j < n; ++j)
    p[size_t(j)] /= sum;
  return n;
}

void attention(spw_tensor *const *ins, spw_tensor *const *outs,
               const int64_t *iattrs, const double *fattrs) {
  const spw_tensor &q = input(ins, 0, "q"), &k = input(ins, 1, "k"),
                   &v = input(ins, 2, "v");
  spw_tensor &y = output(outs, 0, "y");
  const AttnShape a = attn_check(q, k, v, iattrs, fattrs);
  expect_like(y, q, "result", "q");
  const int64_t group = a.H / a.Hkv, SD = a.S * a.D;
  std::vector<double> p(size_t(a.S)), acc(size_t(a.D));
  for (int64_t b = 0; b < a.B; ++b)
    for (int64_t h = 0; h < a.H; ++h) {
      const int64_t kvh = b * a.Hkv + h / group;
      const float *qh = q.as<float>() + (b * a.H + h) * SD;
      const float *kh = k.as<float>() + kvh * SD, *vh = v.as<float>() + kvh * SD;
      float *yh = y.as<float>() + (b * a.H + h) * SD;
      for (int64_t i = 0; i < a.S; ++i) {
        const int64_t n = attn_probs(a, qh + i * a.D, kh, i, p);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < n; ++j) {
          const float *vj = vh + j * a.D;
          for (int64_t d = 0; d < a.D; ++d)
            acc[size_t(d)] += p[size_t(j)] * double(vj[d]);
        }
        for (int64_t d = 0; d < a.D; ++d)
          yh[i * a.D + d] = float(acc[size_t(d)]);
      }
    }
}

void attention_grad(spw_tensor *const *ins, spw_tensor *const *outs,
                    const int64_t *iattrs, const double *fattrs) {
  const spw_tensor &q = input(ins, 0, "q"), &k = input(ins, 1, "k"),
                   &v = input(ins, 2, "v"), &dy = input(ins, 3, "dy");
  if (!outs)
    fail("results are NULL");
  spw_tensor *dq = outs[0], *dk = outs[1], *dv = outs[2];
  const AttnShape a = attn_check(q, k, v, iattrs, fattrs);
  expect_like(dy, q, "dy", "q");
  if (dq)
    expect_like(*dq, q, "dq", "q");
  if (dk)
    expect_like(*dk, k, "dk", "k");
  if (dv)
    expect_like(*dv, v, "dv", "v");
  const int64_t group = a.H / a.Hkv, SD = a.S * a.D;
  // dK and dV sum over the query heads sharing a kv head, and over rows.
  std::vector<double> dk_acc(size_t(k.numel), 0.0), dv_acc(size_t(v.numel), 0.0);
  std::vector<double> p(size_t(a.S)), ds(size_t(a.S)), dqi(size_t(a.D));
  for (int64_t b = 0; b < a.B; ++b)
    for (int64_t h = 0; h < a.H; ++h) {
      const int64_t kvh = b * a.Hkv + h / group;
      const float *qh = q.as<float>() + (b * a.H + h) * SD;
      const float *dyh = dy.as<float>() + (b * a.H + h) * SD;
      const float *kh = k.as<float>() + kvh * SD, *vh = v.as<float>() + kvh * SD;
      double *dkh = dk_acc.data() + kvh * SD, *dvh = dv_acc.data() + kvh * SD;
      for (int64_t i = 0; i < a.S; ++i) {
        const float *qi = qh + i * a.D, *dyi = dyh + i * a.D;
        const int64_t n = attn_probs(a, qi, kh, i, p);
        // dP_j = dy_i . v_j;  dS_j = p_j (dP_j - sum_l p_l dP_l)
        double dot = 0.0;
        for (int64_t j = 0; j < n; ++j) {
          const float *vj = vh + j * a.D;
          double dp = 0.0;
          for (int64_t d = 0; d < a.D; ++d)
            dp += double(dyi[d]) * double(vj[d]);
          ds[size_t(j)] = dp;
          dot += p[size_t(j)] * dp;
        }
        std::fill(dqi.begin(), dqi.end(), 0.0);
        for (int64_t j = 0; j < n; ++j) {
          const double pj = p[size_t(j)];
          const double g = pj * (ds[size_t(j)] - dot) * a.scale;
          const float *kj = kh + j * a.D;
          double *dkj = dkh + j * a.D, *dvj = dvh + j * a.D;
          for (int64_t d = 0; d < a.D; ++d) {
            dqi[size_t(d)] += g * double(kj[d]);
            dkj[d] += g * double(qi[d]);
            dvj[d] += pj * double(dyi[d]);
          }
        }
        if (dq) {
          float *out = dq->as<float>() + (b * a.H + h) * SD + i * a.D;
          for (int64_t d = 0; d < a.D; ++d)
            out[d] = float(dqi[size_t(d)]);
        }
      }
    }
  if (dk)
    for (int64_t i = 0; i < k.numel; ++i)
      dk->as<float>()[i] = float(dk_acc[size_t(i)]);
  if (dv)
    for (int64_t i = 0; i < v.numel; ++i)
      dv->as<float>()[i] = float(dv_acc[size_t(i)]);
}

} // namespace

// Each entry point runs its CPU kernel, or hands a context with a device
// (device.h) to the device, which may call the CPU kernel back.
#define SPW_KERNEL_DEF(name)                                                   \
  static void cpu_op_##name(spw_ctx *, spw_tensor *const *,                    \
                            spw_tensor *const *, const int64_t *,              \
                            const double *);                                   \
  extern "C" void spw_op_##name(spw_ctx *ctx, spw_tensor *const *ins,          \
                                spw_tensor *const *outs,                       \
                                const int64_t *iattrs, const double *fattrs) { \
    if (ctx && ctx->device)                                                    \
      return run_on_device(ctx, Op::name, cpu_op_##name, ins, outs, iattrs,    \
                           fattrs);                                            \
    cpu_op_##name(ctx, ins, outs, iattrs, fattrs);                             \
  }                                                                            \
  static void cpu_op_##name(spw_ctx *ctx, spw_tensor *const *ins,              \
                            spw_tensor *const *outs, const int64_t *iattrs,    \
                            const double *fattrs)

SPW_KERNEL_DEF(matmul) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "matmul", [&] { matmul(ins, outs); });
}
SPW_KERNEL_DEF(gemm) {
  guarded(ctx, "gemm", [&] { gemm(ins, outs, iattrs, fattrs); });
}
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
    unary_f32(ins, outs,
              [approx](float v) { return float(gelu_ref(v, approx)); });
  });
}
SPW_KERNEL_DEF(softmax) {
  (void)fattrs;
  guarded(ctx, "softmax", [&] { softmax(ins, outs, iattrs); });
}
SPW_KERNEL_DEF(layer_norm) {
  guarded(ctx, "layer_norm", [&] { layer_norm(ins, outs, iattrs, fattrs); });
}
SPW_KERNEL_DEF(gather) {
  (void)fattrs;
  guarded(ctx, "gather", [&] { gather(ins, outs, iattrs); });
}
SPW_KERNEL_DEF(reshape) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "reshape", [&] { reshape(ins, outs); });
}
SPW_KERNEL_DEF(transpose) {
  (void)fattrs;
  guarded(ctx, "transpose", [&] { transpose(ins, outs, iattrs); });
}
SPW_KERNEL_DEF(reduce_sum) {
  (void)fattrs;
  guarded(ctx, "reduce_sum", [&] { reduce(ins, outs, iattrs, false); });
}
SPW_KERNEL_DEF(reduce_mean) {
  (void)fattrs;
  guarded(ctx, "reduce_mean", [&] { reduce(ins, outs, iattrs, true); });
}
SPW_KERNEL_DEF(softmax_cross_entropy_loss) {
  (void)fattrs;
  guarded(ctx, "softmax_cross_entropy_loss",
          [&] { xent(ins, outs, iattrs); });
}
SPW_KERNEL_DEF(sum_to_shape) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "sum_to_shape", [&] { sum_to_shape(ins, outs); });
}
SPW_KERNEL_DEF(broadcast_to) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "broadcast_to", [&] { broadcast_to(ins, outs); });
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
    binary_same_f32(ins, outs, "x", "dy", [approx](float x, float dy) {
      return float(double(dy) * gelu_deriv(x, approx));
    });
  });
}
SPW_KERNEL_DEF(softmax_grad) {
  (void)fattrs;
  guarded(ctx, "softmax_grad", [&] { softmax_grad(ins, outs, iattrs); });
}
SPW_KERNEL_DEF(layer_norm_grad) {
  guarded(ctx, "layer_norm_grad",
          [&] { layer_norm_grad(ins, outs, iattrs, fattrs); });
}
SPW_KERNEL_DEF(gather_grad) {
  (void)fattrs;
  guarded(ctx, "gather_grad", [&] { gather_grad(ins, outs, iattrs); });
}
SPW_KERNEL_DEF(softmax_cross_entropy_loss_grad) {
  (void)fattrs;
  guarded(ctx, "softmax_cross_entropy_loss_grad",
          [&] { xent_grad(ins, outs, iattrs); });
}

// ---- Issue 3 -----------------------------------------------------------------

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
SPW_KERNEL_DEF(reduce_max) {
  (void)fattrs;
  guarded(ctx, "reduce_max", [&] { reduce_max(ins, outs, iattrs); });
}
SPW_KERNEL_DEF(concat) {
  (void)fattrs;
  guarded(ctx, "concat", [&] { concat(ins, outs, iattrs); });
}
SPW_KERNEL_DEF(slice) {
  (void)fattrs;
  guarded(ctx, "slice", [&] { slice(ins, outs, iattrs); });
}
SPW_KERNEL_DEF(slice_grad) {
  (void)fattrs;
  guarded(ctx, "slice_grad", [&] { slice_grad(ins, outs, iattrs); });
}
SPW_KERNEL_DEF(linear) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "linear", [&] { linear(ins, outs); });
}
SPW_KERNEL_DEF(rms_norm) {
  guarded(ctx, "rms_norm", [&] { rms_norm(ins, outs, iattrs, fattrs); });
}
SPW_KERNEL_DEF(rms_norm_grad) {
  guarded(ctx, "rms_norm_grad",
          [&] { rms_norm_grad(ins, outs, iattrs, fattrs); });
}
SPW_KERNEL_DEF(rope) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "rope", [&] { rope(ins, outs, false); });
}
SPW_KERNEL_DEF(rope_grad) {
  (void)iattrs, (void)fattrs;
  guarded(ctx, "rope_grad", [&] { rope(ins, outs, true); });
}
SPW_KERNEL_DEF(attention) {
  guarded(ctx, "attention", [&] { attention(ins, outs, iattrs, fattrs); });
}
SPW_KERNEL_DEF(attention_grad) {
  guarded(ctx, "attention_grad",
          [&] { attention_grad(ins, outs, iattrs, fattrs); });
}
