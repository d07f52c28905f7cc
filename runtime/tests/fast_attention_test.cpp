//===- fast_attention_test.cpp - fast attention against the reference -----===//

#include "cpu/parallel.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

using namespace spwtest;
using spw::cpu::KernelSet;
using spw::cpu::testing::ScopedKernelSet;
using spw::cpu::testing::ScopedThreads;

namespace {

struct Case {
  int64_t B, H, Hkv, S, D;
  bool causal;
};

struct Out {
  std::vector<float> y, dq, dk, dv;
};

Out run(KernelSet set, const Case &c, uint64_t seed, bool grads = true) {
  ScopedKernelSet guard(set);
  const std::vector<int64_t> qd = {c.B, c.H, c.S, c.D},
                             kd = {c.B, c.Hkv, c.S, c.D};
  const size_t nq = size_t(c.B * c.H * c.S * c.D),
               nk = size_t(c.B * c.Hkv * c.S * c.D);
  // Inputs in [-2, 2): with scale 1/sqrt(D) the logits spread over a few
  // units, so the softmax is far from uniform.
  auto q = f32(qd, randoms(nq, seed, -2, 2)),
       k = f32(kd, randoms(nk, seed + 1, -2, 2)),
       v = f32(kd, randoms(nk, seed + 2)), dy = f32(qd, randoms(nq, seed + 3));
  auto y = make(SPW_F32, qd), dq = make(SPW_F32, qd), dk = make(SPW_F32, kd),
       dv = make(SPW_F32, kd);
  const double scale = 1.0 / std::sqrt(double(c.D));
  EXPECT_EQ(call(spw_op_attention, {q.get(), k.get(), v.get()}, {y.get()},
                 {c.causal}, {scale}),
            "");
  Out o{values(*y), {}, {}, {}};
  if (grads) {
    EXPECT_EQ(call(spw_op_attention_grad,
                   {q.get(), k.get(), v.get(), dy.get()},
                   {dq.get(), dk.get(), dv.get()}, {c.causal}, {scale}),
              "");
    o.dq = values(*dq);
    o.dk = values(*dk);
    o.dv = values(*dv);
  }
  return o;
}

// Float accumulation over S <= 257 keys and D <= 80 terms, each term's
// rounding ~6e-8 relative, plus a few-ulp exp: the error bound grows like
// sqrt(terms) * eps in practice; 2e-5 of the result's largest magnitude
// leaves an order of magnitude of room while a wrong mask, scale or
// normalization (errors of order 1e-1) fails.
void expect_close(const std::vector<float> &got, const std::vector<float> &ref,
                  const char *what, const Case &c) {
  ASSERT_EQ(got.size(), ref.size());
  float mx = 0;
  for (float r : ref)
    mx = std::max(mx, std::fabs(r));
  const float tol = 2e-5f * std::max(mx, 1e-3f);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], ref[i], tol)
        << what << " at " << i << " B" << c.B << " H" << c.H << " Hkv" << c.Hkv
        << " S" << c.S << " D" << c.D << " causal " << c.causal;
}

bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

TEST(FastAttention, MatchesReference) {
  const int64_t heads[][2] = {{1, 1}, {4, 2}, {6, 6}, {8, 1}};
  uint64_t seed = 100;
  for (int64_t B : {1, 2})
    for (auto hh : heads)
      for (int64_t S : {1, 7, 64, 130, 257})
        for (int64_t D : {8, 64, 80})
          for (bool causal : {false, true}) {
            if (B * hh[0] * S * D > 2 * 8 * 130 * 80 && B == 2)
              continue; // keep the reference's double loops quick
            const Case c{B, hh[0], hh[1], S, D, causal};
            seed += 10;
            const Out f = run(KernelSet::Fast, c, seed),
                      r = run(KernelSet::Reference, c, seed);
            expect_close(f.y, r.y, "y", c);
            expect_close(f.dq, r.dq, "dq", c);
            expect_close(f.dk, r.dk, "dk", c);
            expect_close(f.dv, r.dv, "dv", c);
          }
}

TEST(FastAttention, FastPathIsTaken) {
  // The reference accumulates in double, the fast path in float: over 257
  // keys their bits cannot all agree.
  const Case c{1, 4, 2, 257, 64, false};
  const Out f = run(KernelSet::Fast, c, 7), r = run(KernelSet::Reference, c, 7);
  EXPECT_FALSE(same_bits(f.y, r.y));
  EXPECT_FALSE(same_bits(f.dq, r.dq));
  EXPECT_FALSE(same_bits(f.dk, r.dk));
}

TEST(FastAttention, Deterministic) {
  const Case c{2, 8, 2, 130, 64, true};
  const Out a = run(KernelSet::Fast, c, 3), b = run(KernelSet::Fast, c, 3);
  EXPECT_TRUE(same_bits(a.y, b.y));
  EXPECT_TRUE(same_bits(a.dq, b.dq));
  EXPECT_TRUE(same_bits(a.dk, b.dk));
  EXPECT_TRUE(same_bits(a.dv, b.dv));
  Out one, two;
  {
    ScopedThreads t(1);
    one = run(KernelSet::Fast, c, 3);
  }
  {
    ScopedThreads t(2);
    two = run(KernelSet::Fast, c, 3);
  }
  expect_close(one.y, two.y, "y threads", c);
  expect_close(one.dq, two.dq, "dq threads", c);
  expect_close(one.dk, two.dk, "dk threads", c);
  expect_close(one.dv, two.dv, "dv threads", c);
}

TEST(FastAttention, NullResults) {
  ScopedKernelSet fast(KernelSet::Fast);
  const Case c{1, 4, 2, 70, 16, true};
  const Out full = run(KernelSet::Fast, c, 11);
  const std::vector<int64_t> qd = {1, 4, 70, 16}, kd = {1, 2, 70, 16};
  auto q = f32(qd, randoms(4480, 11, -2, 2)), k = f32(kd, randoms(2240, 12, -2, 2)),
       v = f32(kd, randoms(2240, 13)), dy = f32(qd, randoms(4480, 14));
  auto dk = make(SPW_F32, kd);
  ASSERT_EQ(call(spw_op_attention_grad, {q.get(), k.get(), v.get(), dy.get()},
                 {nullptr, dk.get(), nullptr}, {1}, {0.25}),
            "");
  EXPECT_TRUE(same_bits(values(*dk), full.dk));
  auto dq = make(SPW_F32, qd), dv = make(SPW_F32, kd);
  ASSERT_EQ(call(spw_op_attention_grad, {q.get(), k.get(), v.get(), dy.get()},
                 {dq.get(), nullptr, dv.get()}, {1}, {0.25}),
            "");
  EXPECT_TRUE(same_bits(values(*dq), full.dq));
  EXPECT_TRUE(same_bits(values(*dv), full.dv));
}

TEST(FastAttention, SpecialValues) {
  ScopedKernelSet fast(KernelSet::Fast);
  // Large logits (scale 50): the max subtraction keeps them finite and the
  // result matches the reference; a NaN in q row 0 (causal) gives NaN there
  // only; an infinite q row gives NaN as the reference does.
  const std::vector<int64_t> d = {1, 1, 40, 8};
  std::vector<float> qv = randoms(320, 5, -2, 2), kv = randoms(320, 6, -2, 2),
                     vv = randoms(320, 7);
  auto q = f32(d, qv), k = f32(d, kv), v = f32(d, vv);
  auto yf = make(SPW_F32, d), yr = make(SPW_F32, d);
  ASSERT_EQ(call(spw_op_attention, {q.get(), k.get(), v.get()}, {yf.get()}, {0},
                 {50.0}),
            "");
  {
    ScopedKernelSet ref(KernelSet::Reference);
    ASSERT_EQ(call(spw_op_attention, {q.get(), k.get(), v.get()}, {yr.get()},
                   {0}, {50.0}),
              "");
  }
  for (int64_t i = 0; i < 320; ++i)
    ASSERT_NEAR(yf->as<float>()[i], yr->as<float>()[i], 1e-4) << i;
  qv[0] = NAN;
  for (int d2 = 0; d2 < 8; ++d2)
    qv[8 * 5 + d2] = INFINITY;
  auto q2 = f32(d, qv);
  ASSERT_EQ(call(spw_op_attention, {q2.get(), k.get(), v.get()}, {yf.get()},
                 {1}, {1.0}),
            "");
  {
    ScopedKernelSet ref(KernelSet::Reference);
    ASSERT_EQ(call(spw_op_attention, {q2.get(), k.get(), v.get()}, {yr.get()},
                   {1}, {1.0}),
              "");
  }
  for (int64_t i = 0; i < 320; ++i) {
    const float f = yf->as<float>()[i], r = yr->as<float>()[i];
    if (std::isnan(r))
      EXPECT_TRUE(std::isnan(f)) << i;
    else
      ASSERT_NEAR(f, r, 1e-4) << i;
  }
  EXPECT_TRUE(std::isnan(yf->as<float>()[0]));
  EXPECT_FALSE(std::isnan(yf->as<float>()[8]));
}

TEST(FastAttention, SameChecks) {
  ScopedKernelSet fast(KernelSet::Fast);
  auto q = f32({2, 4, 5, 3}, randoms(120, 1)), k3 = f32({2, 3, 5, 3}, randoms(90, 2));
  auto y = make(SPW_F32, {2, 4, 5, 3});
  EXPECT_NE(call(spw_op_attention, {q.get(), k3.get(), k3.get()}, {y.get()},
                 {0}, {1.0}).find("not a multiple"),
            std::string::npos);
}

} // namespace
