//===- kernels_nn.cpp - softmax, norms and cross entropy on the CPU -------===//
//
// Row-wise ops: softmax(_grad), layer_norm(_grad), rms_norm(_grad) and
// softmax_cross_entropy_loss(_grad); row statistics in double, two passes
// (mean, then the squared deviations) for layer norm.
// Fast kernels (cpu::fast_kernels()), after the same checks: threaded over
// rows, each row vectorized in float with vmath::exp_f, row sums in 16
// float lanes or double lanes; the norm grads' dscale/dbias are column sums
// over the rows in order (threaded over columns), so no result depends on
// the thread count.
// The family's shared conventions (determinism, operand checks) are in
// cpu/kernels.h.
//
//===----------------------------------------------------------------------===//

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

// The fast paths (below the reference kernels), after the same checks.
void softmax_fast(const float *px, float *py, int64_t outer, int64_t n,
                  int64_t inner);
void softmax_grad_fast(const float *py, const float *pd, float *po,
                       int64_t outer, int64_t n, int64_t inner);
void rms_norm_fast(const float *px, const float *ps, float *py, int64_t outer,
                   int64_t n, double eps);
void rms_norm_grad_fast(const float *px, const float *ps, const float *pd,
                        spw_tensor *dx, spw_tensor *dscale, int64_t outer,
                        int64_t n, double eps);
void xent_fast(const spw_tensor &logits, const std::vector<int64_t> &lab,
               std::vector<double> &loss);
void xent_grad_fast(const spw_tensor &logits, const std::vector<int64_t> &lab,
                    double scale, float *out);
void layer_norm_fast(const float *px, const float *ps, const float *pb,
                     float *py, int64_t outer, int64_t n, double eps);
void layer_norm_grad_fast(const float *px, const float *ps, const float *pd,
                          spw_tensor *dx, spw_tensor *dscale, spw_tensor *dbias,
                          int64_t outer, int64_t n, double eps);

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
  if (cpu::fast_kernels())
    return softmax_fast(px, py, s.outer, s.n, s.inner);
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
  if (cpu::fast_kernels())
    return softmax_grad_fast(py, pd, po, s.outer, s.n, s.inner);
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
  if (cpu::fast_kernels())
    return layer_norm_fast(px, ps, pb, py, outer, n, eps);
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
  if (cpu::fast_kernels())
    return layer_norm_grad_fast(px, ps, pd, dx, dscale, dbias, outer, n, eps);
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
  if (cpu::fast_kernels()) {
    // Per-row losses in parallel, summed here in row order (deterministic).
    std::vector<double> loss(static_cast<size_t>(N));
    xent_fast(logits, lab, loss);
    for (int64_t i = 0; i < N; ++i)
      if (lab[size_t(i)] >= 0) {
        total += loss[size_t(i)];
        ++count;
      }
    y.as<float>()[0] =
        float(at.sum ? total : (count > 0 ? total / double(count) : NAN));
    return;
  }
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
  if (cpu::fast_kernels())
    return xent_grad_fast(logits, lab, scale, out);
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
  if (cpu::fast_kernels())
    return rms_norm_fast(px, ps, py, outer, n, eps);
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
  if (cpu::fast_kernels()) {
    if (n > 0)
      rms_norm_grad_fast(px, ps, pd, dx, dscale, outer, n, eps);
    return;
  }
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


// ---- fast row kernels ---------------------------------------------------------
//
// Threaded over rows (parallel_for; every row within one chunk), each row's
// loops vectorized (target_clones), float math with vmath::exp_f. Row sums
// accumulate in 16 float lanes (rows of up to 8192: 512 terms a lane) or in
// double, summed in a fixed order, so bits do not depend on the thread count.

constexpr int kLanes = 16;

// Rows per chunk so that a chunk holds at least ~16K elements.
int64_t row_grain(int64_t n) {
  return std::max<int64_t>(1, (int64_t(1) << 14) / std::max<int64_t>(n, 1));
}

__attribute__((target_clones("avx512f", "avx2", "default"))) float
row_max(const float *__restrict x, int64_t n) {
  float m[kLanes];
  for (int l = 0; l < kLanes; ++l)
    m[l] = -INFINITY;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l)
      m[l] = x[i + l] > m[l] ? x[i + l] : m[l];
  float r = -INFINITY;
  for (int l = 0; l < kLanes; ++l)
    r = m[l] > r ? m[l] : r;
  for (; i < n; ++i)
    r = x[i] > r ? x[i] : r;
  return r;
}

// e[i] = exp(x[i] - mx); returns their sum (16 lanes, then in double).
__attribute__((target_clones("avx512f", "avx2", "default"))) double
row_exp_sum(const float *__restrict x, float *__restrict e, int64_t n,
            float mx) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float v = cpu::vmath::exp_f(x[i + l] - mx);
      e[i + l] = v;
      acc[l] += v;
    }
  double s = 0.0;
  for (; i < n; ++i) {
    e[i] = cpu::vmath::exp_f(x[i] - mx);
    s += double(e[i]);
  }
  for (int l = 0; l < kLanes; ++l)
    s += double(acc[l]);
  return s;
}

// sum of exp(x[i] - mx), nothing stored.
__attribute__((target_clones("avx512f", "avx2", "default"))) double
row_exp_sum_only(const float *__restrict x, int64_t n, float mx) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l)
      acc[l] += cpu::vmath::exp_f(x[i + l] - mx);
  double s = 0.0;
  for (; i < n; ++i)
    s += double(cpu::vmath::exp_f(x[i] - mx));
  for (int l = 0; l < kLanes; ++l)
    s += double(acc[l]);
  return s;
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void
row_scale(float *__restrict y, int64_t n, float c) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = y[i] * c;
}

// Per-row losses lse - x[label] (0 for ignored rows) into loss[i].
void xent_fast(const spw_tensor &logits, const std::vector<int64_t> &lab,
               std::vector<double> &loss) {
  const int64_t N = logits.dims[0], C = logits.dims[1];
  const float *px = logits.as<float>();
  cpu::parallel_for(N, row_grain(C), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      if (lab[size_t(i)] < 0) {
        loss[size_t(i)] = 0.0;
        continue;
      }
      const float *row = px + i * C;
      const float mx = row_max(row, C);
      const double s = row_exp_sum_only(row, C, mx);
      loss[size_t(i)] =
          double(mx) + std::log(s) - double(row[lab[size_t(i)]]);
    }
  });
}

// dlogits = scale * (softmax - onehot): exp(x - max) stored, then scaled.
void xent_grad_fast(const spw_tensor &logits, const std::vector<int64_t> &lab,
                    double scale, float *out) {
  const int64_t N = logits.dims[0], C = logits.dims[1];
  const float *px = logits.as<float>();
  cpu::parallel_for(N, row_grain(C), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      float *orow = out + i * C;
      if (lab[size_t(i)] < 0) {
        std::fill(orow, orow + C, 0.0f);
        continue;
      }
      const float *row = px + i * C;
      const float mx = row_max(row, C);
      const double s = row_exp_sum(row, orow, C, mx);
      const int64_t l = lab[size_t(i)];
      const double el = double(orow[l]);
      row_scale(orow, C, float(scale / s));
      orow[l] = float(scale * (el / s - 1.0));
    }
  });
}

// Row mean and 1/sqrt(var + eps) in double lanes (two passes, as the
// reference: mean, then squared deviations).
__attribute__((target_clones("avx512f", "avx2", "default"))) void
row_moments(const float *__restrict x, int64_t n, double eps, float &mean_out,
            float &rstd_out) {
  double acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l)
      acc[l] += double(x[i + l]);
  double s = 0.0;
  for (; i < n; ++i)
    s += double(x[i]);
  for (int l = 0; l < 8; ++l)
    s += acc[l];
  const double mean = s / double(n);
  double v8[8] = {};
  for (i = 0; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) {
      const double d = double(x[i + l]) - mean;
      v8[l] += d * d;
    }
  double v = 0.0;
  for (; i < n; ++i) {
    const double d = double(x[i]) - mean;
    v += d * d;
  }
  for (int l = 0; l < 8; ++l)
    v += v8[l];
  mean_out = float(mean);
  rstd_out = float(1.0 / std::sqrt(v / double(n) + eps));
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void
layer_norm_row(const float *__restrict x, const float *__restrict s,
               const float *__restrict b, float *__restrict y, int64_t n,
               float mean, float rstd) {
  if (b) {
    for (int64_t i = 0; i < n; ++i)
      y[i] = (x[i] - mean) * rstd * s[i] + b[i];
  } else {
    for (int64_t i = 0; i < n; ++i)
      y[i] = (x[i] - mean) * rstd * s[i];
  }
}

void layer_norm_fast(const float *px, const float *ps, const float *pb,
                     float *py, int64_t outer, int64_t n, double eps) {
  cpu::parallel_for(outer, row_grain(n), [&](int64_t lo, int64_t hi) {
    for (int64_t o = lo; o < hi; ++o) {
      float mean, rstd;
      row_moments(px + o * n, n, eps, mean, rstd);
      layer_norm_row(px + o * n, ps, pb, py + o * n, n, mean, rstd);
    }
  });
}

// dx of one row: rstd (g - mean(g) - xhat mean(g xhat)), g = dy * scale.
__attribute__((target_clones("avx512f", "avx2", "default"))) void
layer_norm_grad_row(const float *__restrict x, const float *__restrict s,
                    const float *__restrict dy, float *__restrict dx,
                    int64_t n, float mean, float rstd) {
  float ag[kLanes] = {}, agx[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float xh = (x[i + l] - mean) * rstd, g = dy[i + l] * s[i + l];
      ag[l] += g;
      agx[l] += g * xh;
    }
  double sg = 0.0, sgx = 0.0;
  for (; i < n; ++i) {
    const float xh = (x[i] - mean) * rstd, g = dy[i] * s[i];
    sg += double(g);
    sgx += double(g * xh);
  }
  for (int l = 0; l < kLanes; ++l) {
    sg += double(ag[l]);
    sgx += double(agx[l]);
  }
  const float mg = float(sg / double(n)), mgx = float(sgx / double(n));
  for (i = 0; i < n; ++i) {
    const float xh = (x[i] - mean) * rstd, g = dy[i] * s[i];
    dx[i] = rstd * (g - mg - xh * mgx);
  }
}

// dscale[i] += dy xhat, dbias[i] += dy over rows [0, outer) for columns
// [lo, hi): rows in order, double accumulators (any thread count, same bits).
__attribute__((target_clones("avx512f", "avx2", "default"))) void
layer_norm_param_cols(const float *__restrict x, const float *__restrict dy,
                      const float *__restrict mean, const float *__restrict rstd,
                      double *__restrict ds, double *__restrict db,
                      int64_t outer, int64_t n, int64_t lo, int64_t hi) {
  for (int64_t o = 0; o < outer; ++o) {
    const float *xr = x + o * n, *dr = dy + o * n;
    const float m = mean[o], r = rstd[o];
    for (int64_t i = lo; i < hi; ++i) {
      ds[i] += double(dr[i] * ((xr[i] - m) * r));
      db[i] += double(dr[i]);
    }
  }
}

void layer_norm_grad_fast(const float *px, const float *ps, const float *pd,
                          spw_tensor *dx, spw_tensor *dscale, spw_tensor *dbias,
                          int64_t outer, int64_t n, double eps) {
  std::vector<float> mean(static_cast<size_t>(outer)),
      rstd(static_cast<size_t>(outer));
  cpu::parallel_for(outer, row_grain(n), [&](int64_t lo, int64_t hi) {
    for (int64_t o = lo; o < hi; ++o) {
      row_moments(px + o * n, n, eps, mean[size_t(o)], rstd[size_t(o)]);
      if (dx)
        layer_norm_grad_row(px + o * n, ps, pd + o * n,
                            dx->as<float>() + o * n, n, mean[size_t(o)],
                            rstd[size_t(o)]);
    }
  });
  if (!dscale && !dbias)
    return;
  std::vector<double> ds(size_t(n), 0.0), db(size_t(n), 0.0);
  // Columns in chunks of at least 64; each column's sum runs over the rows
  // in order within one chunk.
  cpu::parallel_for(n, 64, [&](int64_t lo, int64_t hi) {
    layer_norm_param_cols(px, pd, mean.data(), rstd.data(), ds.data(),
                          db.data(), outer, n, lo, hi);
  });
  for (int64_t i = 0; i < n; ++i) {
    if (dscale)
      dscale->as<float>()[i] = float(ds[size_t(i)]);
    if (dbias)
      dbias->as<float>()[i] = float(db[size_t(i)]);
  }
}


// softmax over n (stride `inner`) for outer blocks; rows contiguous when
// inner == 1, otherwise every block's n x inner slab runs vectorized over
// the inner positions with double sums.
void softmax_fast(const float *px, float *py, int64_t outer, int64_t n,
                  int64_t inner) {
  if (inner == 1) {
    cpu::parallel_for(outer, row_grain(n), [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) {
        const float mx = row_max(px + o * n, n);
        const double s = row_exp_sum(px + o * n, py + o * n, n, mx);
        row_scale(py + o * n, n, float(1.0 / s));
      }
    });
    return;
  }
  cpu::parallel_for(outer, row_grain(n * inner), [&](int64_t lo, int64_t hi) {
    std::vector<float> mx(static_cast<size_t>(inner));
    std::vector<double> sum(static_cast<size_t>(inner));
    for (int64_t o = lo; o < hi; ++o) {
      const float *x = px + o * n * inner;
      float *y = py + o * n * inner;
      std::fill(mx.begin(), mx.end(), -INFINITY);
      std::fill(sum.begin(), sum.end(), 0.0);
      for (int64_t k = 0; k < n; ++k)
        for (int64_t j = 0; j < inner; ++j)
          mx[size_t(j)] = std::max(mx[size_t(j)], x[k * inner + j]);
      for (int64_t k = 0; k < n; ++k)
        for (int64_t j = 0; j < inner; ++j) {
          const float e = cpu::vmath::exp_f(x[k * inner + j] - mx[size_t(j)]);
          y[k * inner + j] = e;
          sum[size_t(j)] += double(e);
        }
      for (int64_t j = 0; j < inner; ++j)
        mx[size_t(j)] = float(1.0 / sum[size_t(j)]); // reused: 1/sum
      for (int64_t k = 0; k < n; ++k)
        for (int64_t j = 0; j < inner; ++j)
          y[k * inner + j] *= mx[size_t(j)];
    }
  });
}

// sum of a[i] * b[i] (16 float lanes, then double).
__attribute__((target_clones("avx512f", "avx2", "default"))) double
row_dot(const float *__restrict a, const float *__restrict b, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l)
      acc[l] += a[i + l] * b[i + l];
  double s = 0.0;
  for (; i < n; ++i)
    s += double(a[i] * b[i]);
  for (int l = 0; l < kLanes; ++l)
    s += double(acc[l]);
  return s;
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void
softmax_grad_row(const float *__restrict y, const float *__restrict dy,
                 float *__restrict dx, int64_t n, float dot) {
  for (int64_t i = 0; i < n; ++i)
    dx[i] = y[i] * (dy[i] - dot);
}

void softmax_grad_fast(const float *py, const float *pd, float *po,
                       int64_t outer, int64_t n, int64_t inner) {
  if (inner == 1) {
    cpu::parallel_for(outer, row_grain(n), [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) {
        const float dot = float(row_dot(pd + o * n, py + o * n, n));
        softmax_grad_row(py + o * n, pd + o * n, po + o * n, n, dot);
      }
    });
    return;
  }
  cpu::parallel_for(outer, row_grain(n * inner), [&](int64_t lo, int64_t hi) {
    std::vector<double> dot(static_cast<size_t>(inner));
    for (int64_t o = lo; o < hi; ++o) {
      const int64_t base = o * n * inner;
      std::fill(dot.begin(), dot.end(), 0.0);
      for (int64_t k = 0; k < n; ++k)
        for (int64_t j = 0; j < inner; ++j)
          dot[size_t(j)] +=
              double(pd[base + k * inner + j] * py[base + k * inner + j]);
      for (int64_t k = 0; k < n; ++k)
        for (int64_t j = 0; j < inner; ++j) {
          const int64_t i = base + k * inner + j;
          po[i] = py[i] * (pd[i] - float(dot[size_t(j)]));
        }
    }
  });
}

// ---- fast rms norm ----

__attribute__((target_clones("avx512f", "avx2", "default"))) double
row_sumsq(const float *__restrict x, int64_t n) {
  double acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l)
      acc[l] += double(x[i + l]) * double(x[i + l]);
  double s = 0.0;
  for (; i < n; ++i)
    s += double(x[i]) * double(x[i]);
  for (int l = 0; l < 8; ++l)
    s += acc[l];
  return s;
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void
rms_norm_row(const float *__restrict x, const float *__restrict s,
             float *__restrict y, int64_t n, float r) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = x[i] * r * s[i];
}

void rms_norm_fast(const float *px, const float *ps, float *py, int64_t outer,
                   int64_t n, double eps) {
  cpu::parallel_for(outer, row_grain(n), [&](int64_t lo, int64_t hi) {
    for (int64_t o = lo; o < hi; ++o) {
      const float r =
          float(1.0 / std::sqrt(row_sumsq(px + o * n, n) / double(n) + eps));
      rms_norm_row(px + o * n, ps, py + o * n, n, r);
    }
  });
}

// dot = sum dy s x (16 float lanes); dx = r s dy - x r^3 dot / n.
__attribute__((target_clones("avx512f", "avx2", "default"))) void
rms_norm_grad_row(const float *__restrict x, const float *__restrict s,
                  const float *__restrict dy, float *__restrict dx, int64_t n,
                  float r) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l)
      acc[l] += dy[i + l] * s[i + l] * x[i + l];
  double dot = 0.0;
  for (; i < n; ++i)
    dot += double(dy[i] * s[i] * x[i]);
  for (int l = 0; l < kLanes; ++l)
    dot += double(acc[l]);
  const float c = float(double(r) * r * r * dot / double(n));
  for (i = 0; i < n; ++i)
    dx[i] = r * s[i] * dy[i] - x[i] * c;
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void
rms_norm_param_cols(const float *__restrict x, const float *__restrict dy,
                    const float *__restrict r, double *__restrict ds,
                    int64_t outer, int64_t n, int64_t lo, int64_t hi) {
  for (int64_t o = 0; o < outer; ++o) {
    const float *xr = x + o * n, *dr = dy + o * n;
    const float ro = r[o];
    for (int64_t i = lo; i < hi; ++i)
      ds[i] += double(dr[i] * xr[i] * ro);
  }
}

void rms_norm_grad_fast(const float *px, const float *ps, const float *pd,
                        spw_tensor *dx, spw_tensor *dscale, int64_t outer,
                        int64_t n, double eps) {
  std::vector<float> r(static_cast<size_t>(outer));
  cpu::parallel_for(outer, row_grain(n), [&](int64_t lo, int64_t hi) {
    for (int64_t o = lo; o < hi; ++o) {
      r[size_t(o)] =
          float(1.0 / std::sqrt(row_sumsq(px + o * n, n) / double(n) + eps));
      if (dx)
        rms_norm_grad_row(px + o * n, ps, pd + o * n, dx->as<float>() + o * n,
                          n, r[size_t(o)]);
    }
  });
  if (!dscale)
    return;
  std::vector<double> ds(static_cast<size_t>(n), 0.0);
  cpu::parallel_for(n, 64, [&](int64_t lo, int64_t hi) {
    rms_norm_param_cols(px, pd, r.data(), ds.data(), outer, n, lo, hi);
  });
  for (int64_t i = 0; i < n; ++i)
    dscale->as<float>()[i] = float(ds[size_t(i)]);
}

} // namespace

SPW_KERNEL_DEF(softmax) {
  (void)fattrs;
  guarded(ctx, "softmax", [&] { softmax(ins, outs, iattrs); });
}
SPW_KERNEL_DEF(layer_norm) {
  guarded(ctx, "layer_norm", [&] { layer_norm(ins, outs, iattrs, fattrs); });
}
SPW_KERNEL_DEF(softmax_cross_entropy_loss) {
  (void)fattrs;
  guarded(ctx, "softmax_cross_entropy_loss",
          [&] { xent(ins, outs, iattrs); });
}
SPW_KERNEL_DEF(softmax_grad) {
  (void)fattrs;
  guarded(ctx, "softmax_grad", [&] { softmax_grad(ins, outs, iattrs); });
}
SPW_KERNEL_DEF(layer_norm_grad) {
  guarded(ctx, "layer_norm_grad",
          [&] { layer_norm_grad(ins, outs, iattrs, fattrs); });
}
SPW_KERNEL_DEF(softmax_cross_entropy_loss_grad) {
  (void)fattrs;
  guarded(ctx, "softmax_cross_entropy_loss_grad",
          [&] { xent_grad(ins, outs, iattrs); });
}
SPW_KERNEL_DEF(rms_norm) {
  guarded(ctx, "rms_norm", [&] { rms_norm(ins, outs, iattrs, fattrs); });
}
SPW_KERNEL_DEF(rms_norm_grad) {
  guarded(ctx, "rms_norm_grad",
          [&] { rms_norm_grad(ins, outs, iattrs, fattrs); });
}
