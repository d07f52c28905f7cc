//===- kernels_attention.cpp - attention on the CPU -----------------------===//
//
// attention and attention_grad (kernels.def): q [B,H,S,D], k and v
// [B,Hkv,S,D], query head h reading kv head h / (H / Hkv); each query
// row's softmax probabilities are computed in double.
// The family's shared conventions (determinism, operand checks) are in
// cpu/kernels.h.
//
//===----------------------------------------------------------------------===//

#include "cpu/kernels.h"

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

SPW_KERNEL_DEF(attention) {
  guarded(ctx, "attention", [&] { attention(ins, outs, iattrs, fattrs); });
}
SPW_KERNEL_DEF(attention_grad) {
  guarded(ctx, "attention_grad",
          [&] { attention_grad(ins, outs, iattrs, fattrs); });
}
