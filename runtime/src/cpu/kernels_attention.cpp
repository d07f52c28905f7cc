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
#include "cpu/parallel.h"

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

// ---- fast attention (cpu::fast_kernels()) --------------------------------------
//
// Flash-style: query blocks of kBq rows against key blocks of kBk rows with
// an online softmax (running max m, sum l, rescaled float accumulator), so a
// thread holds O(kBq*kBk + kBq*D) floats. Scores are q.k^T with K's block
// transposed so the inner loop runs over keys (vectorizable); P.V runs over
// D. Forward threads over (b, h); backward over (b, kv head), looping the
// group's query heads and query blocks in order inside the chunk, so dK and
// dV are each summed by one thread in a fixed order.

constexpr int64_t kBq = 32, kBk = 64;

// e^x for x <= 0 (and -inf -> 0, NaN -> NaN): x = n ln2 + r, |r| <= ln2/2,
// e^r by its degree-7 Taylor polynomial (truncation < 1e-8 relative).
inline float fast_exp(float x) {
  const float xc = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float t = xc * 1.44269504f;
  float n = (t + 12582912.0f) - 12582912.0f;
  n = n == n ? n : 0.0f;
  const float r = (xc - n * 0.693145752f) - n * 1.42860677e-6f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t bits = (int32_t(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  const float e = p * scale;
  return x < -87.0f ? 0.0f : e;
}

// s[i][j] = scale * q_i . k_j for rows [0, nq) of qb and keys [0, nk) of kb
// (kt: scratch [D][kBk]); -inf where causal hides key j0 + j from row i0 + i.
__attribute__((target_clones("avx512f", "avx2", "default"))) void
attn_scores(const float *qb, const float *kb, int64_t nq, int64_t nk,
            int64_t D, float scale, bool causal, int64_t i0, int64_t j0,
            float *kt, float *s) {
  for (int64_t j = 0; j < nk; ++j)
    for (int64_t d = 0; d < D; ++d)
      kt[d * kBk + j] = kb[j * D + d];
  for (int64_t i = 0; i < nq; ++i) {
    float *si = s + i * kBk;
    for (int64_t j = 0; j < nk; ++j)
      si[j] = 0.0f;
    for (int64_t d = 0; d < D; ++d) {
      const float qd = qb[i * D + d];
      const float *ktd = kt + d * kBk;
      for (int64_t j = 0; j < nk; ++j)
        si[j] += qd * ktd[j];
    }
    for (int64_t j = 0; j < nk; ++j)
      si[j] = (causal && j0 + j > i0 + i) ? -INFINITY : si[j] * scale;
  }
}

// acc[i][:] += sum_j p[i][j] * v_j.
__attribute__((target_clones("avx512f", "avx2", "default"))) void
attn_pv(const float *p, const float *vb, int64_t nq, int64_t nk, int64_t D,
        float *acc) {
  for (int64_t i = 0; i < nq; ++i)
    for (int64_t j = 0; j < nk; ++j) {
      const float pij = p[i * kBk + j];
      const float *vj = vb + j * D;
      float *ai = acc + i * D;
      for (int64_t d = 0; d < D; ++d)
        ai[d] += pij * vj[d];
    }
}

// Forward over one query block: y rows (unnormalized acc / l), m and l.
void attn_block_forward(const AttnShape &a, const float *qh, const float *kh,
                        const float *vh, int64_t i0, int64_t nq, float *kt,
                        float *s, float *acc, float *m, float *l) {
  const int64_t D = a.D;
  std::fill(acc, acc + nq * D, 0.0f);
  std::fill(m, m + nq, -INFINITY);
  std::fill(l, l + nq, 0.0f);
  const int64_t jend = a.causal ? i0 + nq : a.S;
  for (int64_t j0 = 0; j0 < jend; j0 += kBk) {
    const int64_t nk = std::min(kBk, jend - j0);
    attn_scores(qh + i0 * D, kh + j0 * D, nq, nk, D, float(a.scale), a.causal,
                i0, j0, kt, s);
    for (int64_t i = 0; i < nq; ++i) {
      float *si = s + i * kBk;
      float mx = m[i];
      for (int64_t j = 0; j < nk; ++j)
        mx = std::max(mx, si[j]);
      const float alpha = fast_exp(m[i] - mx);
      float sum = 0.0f;
      for (int64_t j = 0; j < nk; ++j) {
        si[j] = fast_exp(si[j] - mx);
        sum += si[j];
      }
      l[i] = l[i] * alpha + sum;
      m[i] = mx;
      float *ai = acc + i * D;
      for (int64_t d = 0; d < D; ++d)
        ai[d] *= alpha;
    }
    attn_pv(s, vh + j0 * D, nq, nk, D, acc);
  }
}

void attention_fast(const AttnShape &a, const float *q, const float *k,
                    const float *v, float *y) {
  const int64_t group = a.H / a.Hkv, SD = a.S * a.D, D = a.D;
  cpu::parallel_for(a.B * a.H, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> kt(size_t(D * kBk)), s(size_t(kBq * kBk)),
        acc(size_t(kBq * D)), m(kBq), l(kBq);
    for (int64_t bh = lo; bh < hi; ++bh) {
      const int64_t b = bh / a.H, h = bh % a.H;
      const int64_t kvh = b * a.Hkv + h / group;
      const float *qh = q + bh * SD, *kh = k + kvh * SD, *vh = v + kvh * SD;
      for (int64_t i0 = 0; i0 < a.S; i0 += kBq) {
        const int64_t nq = std::min(kBq, a.S - i0);
        attn_block_forward(a, qh, kh, vh, i0, nq, kt.data(), s.data(),
                           acc.data(), m.data(), l.data());
        for (int64_t i = 0; i < nq; ++i) {
          const float inv = 1.0f / l[size_t(i)];
          for (int64_t d = 0; d < D; ++d)
            y[bh * SD + (i0 + i) * D + d] = acc[size_t(i * D + d)] * inv;
        }
      }
    }
  });
}

// dst[j][:] += sum_i w[i][j] * src_i (dK from dS and q, dV from P and dy).
__attribute__((target_clones("avx512f", "avx2", "default"))) void
attn_wt_src(const float *w, const float *src, int64_t nq, int64_t nk,
            int64_t D, float *dst) {
  for (int64_t j = 0; j < nk; ++j) {
    float *dj = dst + j * D;
    for (int64_t i = 0; i < nq; ++i) {
      const float wij = w[i * kBk + j];
      const float *si = src + i * D;
      for (int64_t d = 0; d < D; ++d)
        dj[d] += wij * si[d];
    }
  }
}

void attention_grad_fast(const AttnShape &a, const float *q, const float *k,
                         const float *v, const float *dy, float *dq, float *dk,
                         float *dv) {
  const int64_t group = a.H / a.Hkv, SD = a.S * a.D, D = a.D;
  const float scale = float(a.scale);
  cpu::parallel_for(a.B * a.Hkv, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> kt(size_t(D * kBk)), s(size_t(kBq * kBk)),
        dp(size_t(kBq * kBk)), acc(size_t(kBq * D)), m(kBq), l(kBq), di(kBq),
        dqb(size_t(kBq * D)), dka(static_cast<size_t>(SD)),
        dva(static_cast<size_t>(SD));
    for (int64_t kvh = lo; kvh < hi; ++kvh) {
      const int64_t b = kvh / a.Hkv, hk = kvh % a.Hkv;
      const float *kh = k + kvh * SD, *vh = v + kvh * SD;
      std::fill(dka.begin(), dka.end(), 0.0f);
      std::fill(dva.begin(), dva.end(), 0.0f);
      for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        const int64_t bh = b * a.H + h;
        const float *qh = q + bh * SD, *dyh = dy + bh * SD;
        for (int64_t i0 = 0; i0 < a.S; i0 += kBq) {
          const int64_t nq = std::min(kBq, a.S - i0);
          // Row statistics and y (recomputed): D_i = dy_i . y_i.
          attn_block_forward(a, qh, kh, vh, i0, nq, kt.data(), s.data(),
                             acc.data(), m.data(), l.data());
          for (int64_t i = 0; i < nq; ++i) {
            const float inv = 1.0f / l[size_t(i)];
            float dot = 0.0f;
            for (int64_t d = 0; d < D; ++d)
              dot += dyh[(i0 + i) * D + d] * (acc[size_t(i * D + d)] * inv);
            di[size_t(i)] = dot;
            l[size_t(i)] = inv;
          }
          std::fill(dqb.begin(), dqb.end(), 0.0f);
          const int64_t jend = a.causal ? i0 + nq : a.S;
          for (int64_t j0 = 0; j0 < jend; j0 += kBk) {
            const int64_t nk = std::min(kBk, jend - j0);
            attn_scores(qh + i0 * D, kh + j0 * D, nq, nk, D, scale, a.causal,
                        i0, j0, kt.data(), s.data());
            // dP = dy V^T (V's block transposed into kt by attn_scores'
            // layout, scale 1, no mask).
            attn_scores(dyh + i0 * D, vh + j0 * D, nq, nk, D, 1.0f, false, 0,
                        0, kt.data(), dp.data());
            for (int64_t i = 0; i < nq; ++i)
              for (int64_t j = 0; j < nk; ++j) {
                const float pij =
                    fast_exp(s[size_t(i * kBk + j)] - m[size_t(i)]) *
                    l[size_t(i)];
                s[size_t(i * kBk + j)] = pij;
                dp[size_t(i * kBk + j)] =
                    pij * (dp[size_t(i * kBk + j)] - di[size_t(i)]) * scale;
              }
            if (dq)
              attn_pv(dp.data(), kh + j0 * D, nq, nk, D, dqb.data());
            if (dk)
              attn_wt_src(dp.data(), qh + i0 * D, nq, nk, D,
                          dka.data() + j0 * D);
            if (dv)
              attn_wt_src(s.data(), dyh + i0 * D, nq, nk, D,
                          dva.data() + j0 * D);
          }
          if (dq)
            std::copy(dqb.begin(), dqb.begin() + nq * D, dq + bh * SD + i0 * D);
        }
      }
      if (dk)
        std::copy(dka.begin(), dka.end(), dk + kvh * SD);
      if (dv)
        std::copy(dva.begin(), dva.end(), dv + kvh * SD);
    }
  });
}

void attention(spw_tensor *const *ins, spw_tensor *const *outs,
               const int64_t *iattrs, const double *fattrs) {
  const spw_tensor &q = input(ins, 0, "q"), &k = input(ins, 1, "k"),
                   &v = input(ins, 2, "v");
  spw_tensor &y = output(outs, 0, "y");
  const AttnShape a = attn_check(q, k, v, iattrs, fattrs);
  expect_like(y, q, "result", "q");
  if (cpu::fast_kernels())
    return attention_fast(a, q.as<float>(), k.as<float>(), v.as<float>(),
                          y.as<float>());
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
  if (cpu::fast_kernels())
    return attention_grad_fast(a, q.as<float>(), k.as<float>(), v.as<float>(),
                               dy.as<float>(), dq ? dq->as<float>() : nullptr,
                               dk ? dk->as<float>() : nullptr,
                               dv ? dv->as<float>() : nullptr);
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
