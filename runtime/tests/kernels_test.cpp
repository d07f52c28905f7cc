//===- kernels_test.cpp - CPU kernels against naive references and FD -----===//

#include "cpu/parallel.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

using namespace spwtest;

namespace {

// These tests pin the reference kernels (exact values, double accumulation):
// every test of this binary runs them unless it asks for the fast ones
// (fast_*_test.cpp compare the two with cpu::testing::ScopedKernelSet).
const spw::cpu::testing::ScopedKernelSet kReferenceByDefault(
    spw::cpu::KernelSet::Reference);

// ---- forward kernels against hand-computed / naive references --------------

TEST(Binary, SameShapeF32) {
  auto a = f32({2, 2}, {1, 2, 3, 4}), b = f32({2, 2}, {10, 20, 30, 40});
  auto y = make(SPW_F32, {2, 2});
  ASSERT_EQ(call(spw_op_add, {a.get(), b.get()}, {y.get()}), "");
  EXPECT_EQ(values(*y), (std::vector<float>{11, 22, 33, 44}));
  ASSERT_EQ(call(spw_op_sub, {a.get(), b.get()}, {y.get()}), "");
  EXPECT_EQ(values(*y), (std::vector<float>{-9, -18, -27, -36}));
  ASSERT_EQ(call(spw_op_mul, {a.get(), b.get()}, {y.get()}), "");
  EXPECT_EQ(values(*y), (std::vector<float>{10, 40, 90, 160}));
  ASSERT_EQ(call(spw_op_div, {b.get(), a.get()}, {y.get()}), "");
  EXPECT_EQ(values(*y), (std::vector<float>{10, 10, 10, 10}));
}

TEST(Binary, BroadcastBothSides) {
  // [2,1,3] + [4,1] -> [2,4,3]
  auto a = f32({2, 1, 3}, randoms(6, 1)), b = f32({4, 1}, randoms(4, 2));
  auto y = make(SPW_F32, {2, 4, 3});
  ASSERT_EQ(call(spw_op_sub, {a.get(), b.get()}, {y.get()}), "");
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k)
        EXPECT_EQ(y->as<float>()[(i * 4 + j) * 3 + k],
                  a->as<float>()[i * 3 + k] - b->as<float>()[j]);
}

TEST(Binary, ScalarAndRankZero) {
  auto a = f32({2, 3}, {1, 2, 3, 4, 5, 6}), s = f32({}, {2});
  auto y = make(SPW_F32, {2, 3});
  ASSERT_EQ(call(spw_op_mul, {s.get(), a.get()}, {y.get()}), "");
  EXPECT_EQ(values(*y), (std::vector<float>{2, 4, 6, 8, 10, 12}));
  auto y0 = make(SPW_F32, {});
  auto s2 = f32({}, {5});
  ASSERT_EQ(call(spw_op_add, {s.get(), s2.get()}, {y0.get()}), "");
  EXPECT_EQ(values(*y0), (std::vector<float>{7}));
}

TEST(Binary, ZeroSizedDim) {
  auto a = make(SPW_F32, {0, 3}), b = f32({3}, {1, 2, 3});
  auto y = make(SPW_F32, {0, 3});
  EXPECT_EQ(call(spw_op_add, {a.get(), b.get()}, {y.get()}), "");
}

TEST(Binary, Integers) {
  auto a = i64({3}, {7, -7, 9}), b = i64({3}, {2, 2, -1});
  auto y = make(SPW_I64, {3});
  ASSERT_EQ(call(spw_op_div, {a.get(), b.get()}, {y.get()}), "");
  EXPECT_EQ(y->as<int64_t>()[0], 3); // truncates, as ONNX Div
  EXPECT_EQ(y->as<int64_t>()[1], -3);
  EXPECT_EQ(y->as<int64_t>()[2], -9);
  auto c = i32({2}, {1, 2}), d = i32({1}, {40});
  auto z = make(SPW_I32, {2});
  ASSERT_EQ(call(spw_op_add, {c.get(), d.get()}, {z.get()}), "");
  EXPECT_EQ(z->as<int32_t>()[1], 42);
  auto zero = i64({1}, {0});
  std::string err = call(spw_op_div, {a.get(), zero.get()}, {y.get()});
  EXPECT_NE(err.find("div: integer division by zero"), std::string::npos)
      << err;
}

TEST(Binary, Errors) {
  auto a = f32({2, 3}, randoms(6, 1)), b = f32({4}, randoms(4, 1));
  auto y = make(SPW_F32, {2, 3});
  std::string err = call(spw_op_add, {a.get(), b.get()}, {y.get()});
  EXPECT_NE(err.find("add: shapes [2,3] and [4] are not broadcast-compatible"),
            std::string::npos)
      << err;
  auto b2 = f32({3}, randoms(3, 1));
  auto wrong = make(SPW_F32, {3, 2});
  err = call(spw_op_mul, {a.get(), b2.get()}, {wrong.get()});
  EXPECT_NE(err.find("result has shape [3,2], expected [2,3]"),
            std::string::npos)
      << err;
  auto bi = i64({3}, {1, 2, 3});
  err = call(spw_op_add, {a.get(), bi.get()}, {y.get()});
  EXPECT_NE(err.find("dtypes differ"), std::string::npos) << err;
}

TEST(Context, ErrorIsStickyAndKernelsStop) {
  auto ctx = spw::make_context();
  auto a = f32({2}, {1, 2}), b = f32({3}, {1, 2, 3});
  auto y = make(SPW_F32, {2});
  spw_tensor *ins[] = {a.get(), b.get()}, *outs[] = {y.get()};
  spw_op_add(ctx.get(), ins, outs, nullptr, nullptr);
  ASSERT_TRUE(ctx->failed());
  std::string first = ctx->error;
  y->as<float>()[0] = -1;
  spw_tensor *ins2[] = {a.get(), a.get()};
  spw_op_add(ctx.get(), ins2, outs, nullptr, nullptr);
  EXPECT_EQ(y->as<float>()[0], -1); // did not run
  EXPECT_EQ(ctx->error, first);
  // Handles returned after an error are usable dummies, never NULL.
  EXPECT_NE(spw_alloc(ctx.get(), SPW_F32, 0, nullptr), nullptr);
}

std::vector<float> naive_matmul(const float *a, const float *b, int M, int K,
                                int N) {
  std::vector<float> y(size_t(M * N));
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0;
      for (int k = 0; k < K; ++k)
        s += double(a[i * K + k]) * b[k * N + j];
      y[size_t(i * N + j)] = float(s);
    }
  return y;
}

TEST(Matmul, TwoD) {
  auto a = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  auto b = f32({3, 2}, {7, 8, 9, 10, 11, 12});
  auto y = make(SPW_F32, {2, 2});
  ASSERT_EQ(call(spw_op_matmul, {a.get(), b.get()}, {y.get()}), "");
  EXPECT_EQ(values(*y), (std::vector<float>{58, 64, 139, 154}));
}

TEST(Matmul, BatchBroadcast) {
  // a [2,1,3,4] x b [3,4,5] -> [2,3,3,5]
  auto a = f32({2, 1, 3, 4}, randoms(24, 3)), b = f32({3, 4, 5}, randoms(60, 4));
  auto y = make(SPW_F32, {2, 3, 3, 5});
  ASSERT_EQ(call(spw_op_matmul, {a.get(), b.get()}, {y.get()}), "");
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      auto ref = naive_matmul(a->as<float>() + i * 12, b->as<float>() + j * 20,
                              3, 4, 5);
      for (int e = 0; e < 15; ++e)
        EXPECT_FLOAT_EQ(y->as<float>()[(i * 3 + j) * 15 + e], ref[size_t(e)]);
    }
}

TEST(Matmul, OneDAndErrors) {
  auto a = f32({3}, {1, 2, 3}), b = f32({3, 2}, {1, 0, 0, 1, 1, 1});
  auto y = make(SPW_F32, {2});
  ASSERT_EQ(call(spw_op_matmul, {a.get(), b.get()}, {y.get()}), "");
  EXPECT_EQ(values(*y), (std::vector<float>{4, 5}));
  auto bad = f32({2, 2}, {1, 2, 3, 4});
  auto y2 = make(SPW_F32, {2, 2});
  std::string err = call(spw_op_matmul, {b.get(), b.get()}, {y2.get()});
  EXPECT_NE(err.find("matmul: inner dimensions differ: [3,2] x [3,2]"),
            std::string::npos)
      << err;
}

TEST(Gemm, TransposesAlphaBetaAndBroadcastC) {
  const int M = 3, K = 4, N = 2;
  auto at = f32({K, M}, randoms(12, 5)); // A^T stored
  auto bt = f32({N, K}, randoms(8, 6));  // B^T stored
  auto c = f32({N}, {0.5f, -1.5f});
  auto y = make(SPW_F32, {M, N});
  ASSERT_EQ(call(spw_op_gemm, {at.get(), bt.get(), c.get()}, {y.get()}, {1, 1},
                 {2.0, 3.0}),
            "");
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0;
      for (int k = 0; k < K; ++k)
        s += double(at->as<float>()[k * M + i]) * bt->as<float>()[j * K + k];
      EXPECT_NEAR(y->as<float>()[i * N + j], 2 * s + 3 * c->as<float>()[j],
                  1e-5);
    }
  // c absent
  auto a = f32({M, K}, randoms(12, 7)), b = f32({K, N}, randoms(8, 8));
  ASSERT_EQ(call(spw_op_gemm, {a.get(), b.get(), nullptr}, {y.get()}, {0, 0},
                 {1.0, 1.0}),
            "");
  auto ref = naive_matmul(a->as<float>(), b->as<float>(), M, K, N);
  for (int e = 0; e < M * N; ++e)
    EXPECT_FLOAT_EQ(y->as<float>()[e], ref[size_t(e)]);
}

TEST(Unary, NegReluTanhGelu) {
  auto x = f32({4}, {-2, -0.5f, 0.5f, 1});
  auto y = make(SPW_F32, {4});
  ASSERT_EQ(call(spw_op_neg, {x.get()}, {y.get()}), "");
  EXPECT_EQ(values(*y), (std::vector<float>{2, 0.5f, -0.5f, -1}));
  ASSERT_EQ(call(spw_op_relu, {x.get()}, {y.get()}), "");
  EXPECT_EQ(values(*y), (std::vector<float>{0, 0, 0.5f, 1}));
  ASSERT_EQ(call(spw_op_tanh, {x.get()}, {y.get()}), "");
  EXPECT_FLOAT_EQ(y->as<float>()[3], 0.76159415595576488812f);
  ASSERT_EQ(call(spw_op_gelu, {x.get()}, {y.get()}, {0}), "");
  EXPECT_FLOAT_EQ(y->as<float>()[3], 0.8413447460685429f);   // x * Phi(x)
  EXPECT_FLOAT_EQ(y->as<float>()[0], -0.04550026389635842f);
  ASSERT_EQ(call(spw_op_gelu, {x.get()}, {y.get()}, {1}), "");
  EXPECT_FLOAT_EQ(y->as<float>()[3], 0.8411919906082768f);   // tanh form
  EXPECT_NE(call(spw_op_gelu, {x.get()}, {y.get()}, {2}).find("approximate"),
            std::string::npos);
}

TEST(Softmax, InnerAxis) {
  // softmax over axis 1 of [2,3,2]
  auto x = f32({2, 3, 2}, randoms(12, 9, -3, 3));
  auto y = make(SPW_F32, {2, 3, 2});
  ASSERT_EQ(call(spw_op_softmax, {x.get()}, {y.get()}, {1}), "");
  for (int o = 0; o < 2; ++o)
    for (int in = 0; in < 2; ++in) {
      double s = 0;
      for (int k = 0; k < 3; ++k)
        s += std::exp(double(x->as<float>()[(o * 3 + k) * 2 + in]));
      for (int k = 0; k < 3; ++k) {
        int i = (o * 3 + k) * 2 + in;
        EXPECT_NEAR(y->as<float>()[i], std::exp(double(x->as<float>()[i])) / s,
                    1e-7);
      }
    }
  auto big = f32({2}, {1000, 1000}); // no overflow
  auto yb = make(SPW_F32, {2});
  ASSERT_EQ(call(spw_op_softmax, {big.get()}, {yb.get()}, {0}), "");
  EXPECT_EQ(values(*yb), (std::vector<float>{0.5f, 0.5f}));
}

TEST(LayerNorm, OverTrailingDims) {
  // normalize [3,4] of x [2,3,4] (axis 1)
  auto x = f32({2, 3, 4}, randoms(24, 10, -2, 2));
  auto scale = f32({3, 4}, randoms(12, 11)), bias = f32({3, 4}, randoms(12, 12));
  auto y = make(SPW_F32, {2, 3, 4});
  ASSERT_EQ(call(spw_op_layer_norm, {x.get(), scale.get(), bias.get()},
                 {y.get()}, {1}, {1e-5}),
            ""); 
  for (int o = 0; o < 2; ++o) {
    const float *r = x->as<float>() + o * 12;
    double mean = 0, var = 0;
    for (int i = 0; i < 12; ++i)
      mean += r[i];
    mean /= 12;
    for (int i = 0; i < 12; ++i)
      var += (r[i] - mean) * (r[i] - mean);
    var /= 12;
    for (int i = 0; i < 12; ++i)
      EXPECT_NEAR(y->as<float>()[o * 12 + i],
                  (r[i] - mean) / std::sqrt(var + 1e-5) * scale->as<float>()[i] +
                      bias->as<float>()[i],
                  1e-5);
  }
  auto bad_scale = f32({4}, randoms(4, 1));
  std::string err = call(spw_op_layer_norm, {x.get(), bad_scale.get(), nullptr},
                         {y.get()}, {1}, {1e-5});
  EXPECT_NE(err.find("scale has shape [4], expected the normalized dims [3,4]"),
            std::string::npos)
      << err;
}

TEST(Gather, AxisOneNegativeIndexAndOutOfRange) {
  auto data = f32({2, 3, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  auto idx = i64({2}, {2, -3});
  auto y = make(SPW_F32, {2, 2, 2});
  ASSERT_EQ(call(spw_op_gather, {data.get(), idx.get()}, {y.get()}, {1}), "");
  EXPECT_EQ(values(*y), (std::vector<float>{4, 5, 0, 1, 10, 11, 6, 7}));
  auto idx32 = i32({2, 1}, {1, 0});
  auto y32 = make(SPW_F32, {2, 1, 3, 2});
  ASSERT_EQ(call(spw_op_gather, {data.get(), idx32.get()}, {y32.get()}, {0}),
            "");
  EXPECT_EQ(y32->as<float>()[0], 6);
  auto bad = i64({2}, {1, 7});
  std::string err =
      call(spw_op_gather, {data.get(), bad.get()}, {y.get()}, {1});
  EXPECT_NE(err.find("gather: index 7 at position 1 of indices is out of range "
                     "for axis 1 of size 3"),
            std::string::npos)
      << err;
}

TEST(Shape, ReshapeAndTranspose) {
  auto x = f32({2, 3, 4}, randoms(24, 13));
  auto r = make(SPW_F32, {6, 4});
  ASSERT_EQ(call(spw_op_reshape, {x.get()}, {r.get()}), "");
  EXPECT_EQ(values(*r), values(*x));
  auto y = make(SPW_F32, {4, 2, 3});
  ASSERT_EQ(call(spw_op_transpose, {x.get()}, {y.get()}, {2, 0, 1}), "");
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 3; ++c)
        EXPECT_EQ(y->as<float>()[(a * 2 + b) * 3 + c],
                  x->as<float>()[(b * 3 + c) * 4 + a]);
  auto xi = i64({2, 1}, {5, 6});
  auto yi = make(SPW_I64, {1, 2});
  ASSERT_EQ(call(spw_op_transpose, {xi.get()}, {yi.get()}, {1, 0}), "");
  EXPECT_EQ(yi->as<int64_t>()[1], 6);
  EXPECT_NE(call(spw_op_transpose, {x.get()}, {y.get()}, {2, 2, 1})
                .find("not a permutation"),
            std::string::npos);
}

TEST(Reduce, SumMeanKeepdimsOrNot) {
  auto x = f32({2, 3, 4}, randoms(24, 14));
  auto keep = make(SPW_F32, {1, 3, 1}), flat = make(SPW_F32, {3});
  ASSERT_EQ(call(spw_op_reduce_sum, {x.get()}, {keep.get()}, {2, 0, 2}), "");
  ASSERT_EQ(call(spw_op_reduce_mean, {x.get()}, {flat.get()}, {2, 2, 0}), "");
  for (int j = 0; j < 3; ++j) {
    double s = 0;
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 4; ++k)
        s += x->as<float>()[(i * 3 + j) * 4 + k];
    EXPECT_NEAR(keep->as<float>()[j], s, 1e-6);
    EXPECT_NEAR(flat->as<float>()[j], s / 8, 1e-6);
  }
  auto bad = make(SPW_F32, {2});
  EXPECT_NE(call(spw_op_reduce_sum, {x.get()}, {bad.get()}, {1, 1})
                .find("expected [2,1,4] (keepdims) or [2,4]"),
            std::string::npos);
}

TEST(Broadcast, SumToShapeAndBroadcastTo) {
  auto x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  auto row = make(SPW_F32, {3}), col = make(SPW_F32, {2, 1});
  ASSERT_EQ(call(spw_op_sum_to_shape, {x.get()}, {row.get()}), "");
  EXPECT_EQ(values(*row), (std::vector<float>{5, 7, 9}));
  ASSERT_EQ(call(spw_op_sum_to_shape, {x.get()}, {col.get()}), "");
  EXPECT_EQ(values(*col), (std::vector<float>{6, 15}));
  auto all = make(SPW_F32, {});
  ASSERT_EQ(call(spw_op_sum_to_shape, {x.get()}, {all.get()}), "");
  EXPECT_EQ(values(*all), (std::vector<float>{21}));
  auto b = make(SPW_F32, {2, 2, 3});
  ASSERT_EQ(call(spw_op_broadcast_to, {col.get()}, {b.get()}), "");
  // [2,1] aligns with the last two dims of [2,2,3]
  EXPECT_EQ(values(*b), (std::vector<float>{6, 6, 6, 15, 15, 15, 6, 6, 6, 15,
                                            15, 15}));
  auto bad = make(SPW_F32, {2});
  EXPECT_NE(call(spw_op_sum_to_shape, {x.get()}, {bad.get()})
                .find("cannot broadcast"),
            std::string::npos);
  // Adjoint identity: <broadcast_to(v), w> == <v, sum_to_shape(w)>.
  auto v = f32({3, 1}, randoms(3, 20)), w = f32({2, 3, 4}, randoms(24, 21));
  auto bv = make(SPW_F32, {2, 3, 4}), sw = make(SPW_F32, {3, 1});
  ASSERT_EQ(call(spw_op_broadcast_to, {v.get()}, {bv.get()}), "");
  ASSERT_EQ(call(spw_op_sum_to_shape, {w.get()}, {sw.get()}), "");
  double lhs = 0, rhs = 0;
  for (int i = 0; i < 24; ++i)
    lhs += double(bv->as<float>()[i]) * w->as<float>()[i];
  for (int i = 0; i < 3; ++i)
    rhs += double(v->as<float>()[i]) * sw->as<float>()[i];
  EXPECT_NEAR(lhs, rhs, 1e-5);
}

TEST(CrossEntropy, MeanSumIgnoreAndErrors) {
  auto logits = f32({2, 3}, {1, 2, 3, 1, 1, 1});
  auto labels = i64({2}, {2, 0});
  auto loss = make(SPW_F32, {});
  // row 0: log(e+e^2+e^3) - 3 = 0.40760596; row 1: log 3 = 1.0986123
  ASSERT_EQ(call(spw_op_softmax_cross_entropy_loss,
                 {logits.get(), labels.get()}, {loss.get()}, {0, 0, 0}),
            "");
  EXPECT_FLOAT_EQ(loss->as<float>()[0], (0.40760596f + 1.0986123f) / 2);
  ASSERT_EQ(call(spw_op_softmax_cross_entropy_loss,
                 {logits.get(), labels.get()}, {loss.get()}, {1, 0, 0}),
            "");
  EXPECT_FLOAT_EQ(loss->as<float>()[0], 0.40760596f + 1.0986123f);
  // ignore_index 0 drops row 1: the mean is over one row
  ASSERT_EQ(call(spw_op_softmax_cross_entropy_loss,
                 {logits.get(), labels.get()}, {loss.get()}, {0, 1, 0}),
            "");
  EXPECT_FLOAT_EQ(loss->as<float>()[0], 0.40760596f);
  auto labels32 = i32({2}, {2, -100});
  ASSERT_EQ(call(spw_op_softmax_cross_entropy_loss,
                 {logits.get(), labels32.get()}, {loss.get()}, {0, 1, -100}),
            "");
  EXPECT_FLOAT_EQ(loss->as<float>()[0], 0.40760596f);
  auto bad = i64({2}, {2, 3});
  std::string err = call(spw_op_softmax_cross_entropy_loss,
                         {logits.get(), bad.get()}, {loss.get()}, {0, 0, 0});
  EXPECT_NE(err.find("softmax_cross_entropy_loss: label 3 at position 1 is out "
                     "of range [0, 3)"),
            std::string::npos)
      << err;
  // A label equal to ignore_index is fine even when out of [0, C).
  auto neg = i64({2}, {-1, 1});
  EXPECT_EQ(call(spw_op_softmax_cross_entropy_loss, {logits.get(), neg.get()},
                 {loss.get()}, {0, 1, -1}),
            "");
  EXPECT_FLOAT_EQ(loss->as<float>()[0], 1.0986123f);
}

// ---- gradient kernels against central finite differences ----------------------

// L(x) = sum_i w_i * f(x)_i, accumulated in double.
using Forward = std::function<std::vector<float>(const std::vector<float> &)>;

double objective(const Forward &f, const std::vector<float> &x,
                 const std::vector<float> &w) {
  auto y = f(x);
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i)
    s += double(w[i]) * y[i];
  return s;
}

// Central differences of the objective in float32 inputs with step h;
// compares each element with `analytic` to |fd - an| <= tol * (1 + |fd|).
void expect_matches_fd(const Forward &f, std::vector<float> x,
                       const std::vector<float> &w,
                       const std::vector<float> &analytic, double h = 1e-2,
                       double tol = 2e-3) {
  ASSERT_EQ(x.size(), analytic.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float orig = x[i];
    x[i] = float(orig + h);
    const double hp = x[i];
    const double lp = objective(f, x, w);
    x[i] = float(orig - h);
    const double hm = x[i];
    const double lm = objective(f, x, w);
    x[i] = orig;
    const double fd = (lp - lm) / (hp - hm);
    EXPECT_NEAR(analytic[i], fd, tol * (1 + std::fabs(fd))) << "element " << i;
  }
}

Forward unary_forward(Kernel k, std::vector<int64_t> dims,
                      std::initializer_list<int64_t> ia = {}) {
  std::vector<int64_t> attrs(ia);
  return [=](const std::vector<float> &x) {
    auto t = f32(dims, x);
    auto y = make(SPW_F32, dims);
    auto ctx = spw::make_context();
    spw_tensor *ins[] = {t.get()}, *outs[] = {y.get()};
    k(ctx.get(), ins, outs, attrs.empty() ? nullptr : attrs.data(), nullptr);
    EXPECT_EQ(ctx->error, "");
    return values(*y);
  };
}

TEST(Grad, Relu) {
  std::vector<float> x = {-1.5f, -0.3f, 0.2f, 0.7f, 1.9f, -2.2f};
  auto w = randoms(6, 30);
  auto tx = f32({2, 3}, x), dy = f32({2, 3}, w);
  auto dx = make(SPW_F32, {2, 3});
  ASSERT_EQ(call(spw_op_relu_grad, {tx.get(), dy.get()}, {dx.get()}), "");
  expect_matches_fd(unary_forward(spw_op_relu, {2, 3}), x, w, values(*dx));
}

TEST(Grad, TanhFromOutput) {
  auto x = randoms(8, 31, -2, 2), w = randoms(8, 32);
  auto tx = f32({8}, x), y = make(SPW_F32, {8}), dy = f32({8}, w);
  auto dx = make(SPW_F32, {8});
  ASSERT_EQ(call(spw_op_tanh, {tx.get()}, {y.get()}), "");
  ASSERT_EQ(call(spw_op_tanh_grad, {y.get(), dy.get()}, {dx.get()}), "");
  expect_matches_fd(unary_forward(spw_op_tanh, {8}), x, w, values(*dx));
}

TEST(Grad, GeluBothApproximations) {
  auto x = randoms(10, 33, -3, 3), w = randoms(10, 34);
  for (int64_t approx : {0, 1}) {
    auto tx = f32({10}, x), dy = f32({10}, w), dx = make(SPW_F32, {10});
    ASSERT_EQ(call(spw_op_gelu_grad, {tx.get(), dy.get()}, {dx.get()},
                   {approx}),
              "");
    expect_matches_fd(unary_forward(spw_op_gelu, {10}, {approx}), x, w,
                      values(*dx));
  }
}

TEST(Grad, SoftmaxInnerAndLastAxis) {
  for (int64_t axis : {1, 2}) {
    auto x = randoms(24, 35, -2, 2), w = randoms(24, 36);
    auto tx = f32({2, 3, 4}, x), y = make(SPW_F32, {2, 3, 4});
    auto dy = f32({2, 3, 4}, w), dx = make(SPW_F32, {2, 3, 4});
    ASSERT_EQ(call(spw_op_softmax, {tx.get()}, {y.get()}, {axis}), "");
    ASSERT_EQ(call(spw_op_softmax_grad, {y.get(), dy.get()}, {dx.get()},
                   {axis}),
              "");
    expect_matches_fd(unary_forward(spw_op_softmax, {2, 3, 4}, {axis}), x, w,
                      values(*dx));
  }
}

TEST(Grad, LayerNormAllThreeOutputs) {
  const std::vector<int64_t> xd = {2, 3, 4}, pd = {4};
  auto x = randoms(24, 37, -2, 2), s = randoms(4, 38, 0.5, 1.5);
  auto b = randoms(4, 39), w = randoms(24, 40);
  auto ln = [&](const std::vector<float> &xv, const std::vector<float> &sv,
                const std::vector<float> &bv) {
    auto tx = f32(xd, xv), ts = f32(pd, sv), tb = f32(pd, bv);
    auto y = make(SPW_F32, xd);
    EXPECT_EQ(call(spw_op_layer_norm, {tx.get(), ts.get(), tb.get()}, {y.get()},
                   {2}, {1e-5}),
              "");
    return values(*y);
  };
  auto tx = f32(xd, x), ts = f32(pd, s), dy = f32(xd, w);
  auto dx = make(SPW_F32, xd), ds = make(SPW_F32, pd), db = make(SPW_F32, pd);
  ASSERT_EQ(call(spw_op_layer_norm_grad, {tx.get(), ts.get(), dy.get()},
                 {dx.get(), ds.get(), db.get()}, {2}, {1e-5}),
            "");
  expect_matches_fd([&](auto &v) { return ln(v, s, b); }, x, w, values(*dx));
  expect_matches_fd([&](auto &v) { return ln(x, v, b); }, s, w, values(*ds));
  expect_matches_fd([&](auto &v) { return ln(x, s, v); }, b, w, values(*db));
  // Outputs the compiler does not need may be NULL.
  EXPECT_EQ(call(spw_op_layer_norm_grad, {tx.get(), ts.get(), dy.get()},
                 {dx.get(), nullptr, nullptr}, {2}, {1e-5}),
            "");
}

TEST(Grad, GatherScatterAddsDuplicates) {
  const std::vector<int64_t> dd = {4, 3};
  auto data = randoms(12, 41), w = randoms(9, 42);
  auto idx = i64({3}, {1, -1, 1}); // row 1 twice, row 3 once
  auto fwd = [&](const std::vector<float> &v) {
    auto t = f32(dd, v);
    auto y = make(SPW_F32, {3, 3});
    EXPECT_EQ(call(spw_op_gather, {t.get(), idx.get()}, {y.get()}, {0}), "");
    return values(*y);
  };
  auto dy = f32({3, 3}, w), dd_t = make(SPW_F32, dd);
  ASSERT_EQ(call(spw_op_gather_grad, {idx.get(), dy.get()}, {dd_t.get()}, {0}),
            "");
  expect_matches_fd(fwd, data, w, values(*dd_t));
  EXPECT_EQ(dd_t->as<float>()[0], 0.0f);
  EXPECT_FLOAT_EQ(dd_t->as<float>()[3], w[0] + w[6]);
  auto bad = i64({3}, {1, 4, 0});
  std::string err =
      call(spw_op_gather_grad, {bad.get(), dy.get()}, {dd_t.get()}, {0});
  EXPECT_NE(err.find("gather_grad: index 4"), std::string::npos) << err;
}

TEST(Grad, CrossEntropyMeanSumIgnore) {
  auto logits = randoms(12, 43, -2, 2);
  auto labels = i64({4}, {2, 0, -100, 1});
  for (int64_t reduction : {0, 1}) {
    auto fwd = [&](const std::vector<float> &v) {
      auto t = f32({4, 3}, v);
      auto y = make(SPW_F32, {});
      EXPECT_EQ(call(spw_op_softmax_cross_entropy_loss, {t.get(), labels.get()},
                     {y.get()}, {reduction, 1, -100}),
                "");
      return values(*y);
    };
    auto t = f32({4, 3}, logits), dloss = f32({}, {0.7f});
    auto dl = make(SPW_F32, {4, 3});
    ASSERT_EQ(call(spw_op_softmax_cross_entropy_loss_grad,
                   {t.get(), labels.get(), dloss.get()}, {dl.get()},
                   {reduction, 1, -100}),
              "");
    expect_matches_fd(fwd, logits, {0.7f}, values(*dl));
    for (int c = 0; c < 3; ++c) // ignored row
      EXPECT_EQ(dl->as<float>()[6 + c], 0.0f);
  }
}

// ---- the ops real exporters emit, and the fused ops ------------------------

Tensor boolean(const std::vector<int64_t> &dims,
               const std::vector<uint8_t> &v) {
  Tensor t = make(SPW_BOOL, dims);
  if (int64_t(v.size()) != t->numel)
    throw std::runtime_error("test tensor: wrong number of values");
  std::memcpy(t->data, v.data(), v.size());
  return t;
}

std::vector<uint8_t> bools(const spw_tensor &t) {
  return std::vector<uint8_t>(t.as<uint8_t>(), t.as<uint8_t>() + t.numel);
}
std::vector<int64_t> ints64(const spw_tensor &t) {
  return std::vector<int64_t>(t.as<int64_t>(), t.as<int64_t>() + t.numel);
}
std::vector<int32_t> ints32(const spw_tensor &t) {
  return std::vector<int32_t>(t.as<int32_t>(), t.as<int32_t>() + t.numel);
}

#define EXPECT_ERR(expr, needle)                                               \
  do {                                                                         \
    std::string err_ = (expr);                                                 \
    EXPECT_NE(err_.find(needle), std::string::npos)                            \
        << "expected: " << (needle) << "\ngot: " << err_;                      \
  } while (0)

TEST(Dtype, BoolIsOneByte) {
  EXPECT_EQ(spw::dtype_size(SPW_BOOL), 1);
  EXPECT_STREQ(spw::dtype_name(SPW_BOOL), "bool");
  auto ctx = spw::make_context();
  const int64_t d[] = {3};
  const uint8_t v[] = {1, 0, 1};
  spw_tensor *c = spw_constant(ctx.get(), SPW_BOOL, 1, d, v);
  ASSERT_EQ(ctx->error, "");
  EXPECT_EQ(c->bytes(), 3);
  EXPECT_EQ(c->as<uint8_t>()[2], 1);
  spw_tensor *a = spw_alloc(ctx.get(), SPW_BOOL, 1, d);
  ASSERT_EQ(ctx->error, "");
  EXPECT_EQ(a->bytes(), 3);
}

TEST(Shape, EveryDtypeMovesBytes) {
  // reshape, transpose, broadcast_to and gather on bool and i32 data.
  auto b = boolean({2, 3}, {1, 0, 0, 0, 1, 1});
  auto br = make(SPW_BOOL, {3, 2}), bt = make(SPW_BOOL, {3, 2});
  ASSERT_EQ(call(spw_op_reshape, {b.get()}, {br.get()}), "");
  EXPECT_EQ(bools(*br), bools(*b));
  ASSERT_EQ(call(spw_op_transpose, {b.get()}, {bt.get()}, {1, 0}), "");
  EXPECT_EQ(bools(*bt), (std::vector<uint8_t>{1, 0, 0, 1, 0, 1}));
  auto bb = make(SPW_BOOL, {2, 2, 3});
  ASSERT_EQ(call(spw_op_broadcast_to, {b.get()}, {bb.get()}), "");
  EXPECT_EQ(bools(*bb), (std::vector<uint8_t>{1, 0, 0, 0, 1, 1, 1, 0, 0, 0,
                                               1, 1}));
  auto idx = i64({2}, {2, 0});
  auto bg = make(SPW_BOOL, {2, 2});
  ASSERT_EQ(call(spw_op_gather, {b.get(), idx.get()}, {bg.get()}, {1}), "");
  EXPECT_EQ(bools(*bg), (std::vector<uint8_t>{0, 1, 1, 0}));
  auto v = i32({3}, {4, 5, 6});
  auto vg = make(SPW_I32, {2});
  ASSERT_EQ(call(spw_op_gather, {v.get(), idx.get()}, {vg.get()}, {0}), "");
  EXPECT_EQ(ints32(*vg), (std::vector<int32_t>{6, 4}));
  // Arithmetic on bool is refused, not silently skipped.
  auto y = make(SPW_BOOL, {2, 3});
  EXPECT_ERR(call(spw_op_add, {b.get(), b.get()}, {y.get()}),
             "add: unsupported dtype bool");
  EXPECT_ERR(call(spw_op_neg, {b.get()}, {y.get()}),
             "neg: unsupported dtype bool");
  auto s = make(SPW_BOOL, {});
  EXPECT_ERR(call(spw_op_reduce_sum, {b.get()}, {s.get()}, {2, 0, 1}),
             "reduce_sum: unsupported dtype bool");
}

TEST(Unary, ExportedElementwiseF32) {
  auto xs = randoms(12, 50, -4, 4);
  xs[0] = -100; // sigmoid/silu tails
  xs[1] = 100;
  auto pos = randoms(12, 51, 0.01f, 5);
  struct Case {
    Kernel k;
    const char *name;
    double (*ref)(double);
    bool positive;
  };
  const Case cases[] = {
      {spw_op_exp, "exp", [](double v) { return std::exp(v); }, false},
      {spw_op_log, "log", [](double v) { return std::log(v); }, true},
      {spw_op_sqrt, "sqrt", [](double v) { return std::sqrt(v); }, true},
      {spw_op_reciprocal, "reciprocal", [](double v) { return 1 / v; }, true},
      {spw_op_erf, "erf", [](double v) { return std::erf(v); }, false},
      {spw_op_sigmoid, "sigmoid",
       [](double v) { return 1 / (1 + std::exp(-v)); }, false},
      {spw_op_cos, "cos", [](double v) { return std::cos(v); }, false},
      {spw_op_sin, "sin", [](double v) { return std::sin(v); }, false},
      {spw_op_silu, "silu", [](double v) { return v / (1 + std::exp(-v)); },
       false},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.name);
    const auto &in = c.positive ? pos : xs;
    auto x = f32({3, 4}, in), y = make(SPW_F32, {3, 4});
    ASSERT_EQ(call(c.k, {x.get()}, {y.get()}), "");
    for (int i = 0; i < 12; ++i)
      EXPECT_FLOAT_EQ(y->as<float>()[i], float(c.ref(double(in[size_t(i)]))))
          << "element " << i;
    auto wrong = make(SPW_F32, {4, 3});
    EXPECT_ERR(call(c.k, {x.get()}, {wrong.get()}),
               std::string(c.name) + ": result is f32 [4,3], but x is f32 [3,4]");
    auto xi = i64({2}, {1, 2});
    auto yi = make(SPW_I64, {2});
    EXPECT_ERR(call(c.k, {xi.get()}, {yi.get()}), "x must be f32, got i64");
  }
  // Special values.
  auto sp = f32({4}, {0, -1, INFINITY, -INFINITY}), y = make(SPW_F32, {4});
  ASSERT_EQ(call(spw_op_log, {sp.get()}, {y.get()}), "");
  EXPECT_EQ(y->as<float>()[0], -INFINITY);
  EXPECT_TRUE(std::isnan(y->as<float>()[1]));
  ASSERT_EQ(call(spw_op_reciprocal, {sp.get()}, {y.get()}), "");
  EXPECT_EQ(y->as<float>()[0], INFINITY);
  EXPECT_EQ(y->as<float>()[2], 0.0f);
  ASSERT_EQ(call(spw_op_sigmoid, {sp.get()}, {y.get()}), "");
  EXPECT_EQ(values(*y), (std::vector<float>{0.5f, 0.26894142f, 1, 0}));
}

TEST(Pow, BroadcastAndStdPowSpecialCases) {
  auto a = f32({2, 3}, {2, -2, -8, 0, 4, -1.5f});
  auto b = f32({3}, {3, 2, 1.0f / 3});
  auto y = make(SPW_F32, {2, 3});
  ASSERT_EQ(call(spw_op_pow, {a.get(), b.get()}, {y.get()}), "");
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      float want = std::pow(a->as<float>()[i * 3 + j], b->as<float>()[j]);
      float got = y->as<float>()[i * 3 + j];
      if (std::isnan(want))
        EXPECT_TRUE(std::isnan(got)) << i << "," << j;
      else
        EXPECT_FLOAT_EQ(got, want) << i << "," << j;
    }
  EXPECT_EQ(y->as<float>()[0], 8.0f);
  EXPECT_EQ(y->as<float>()[1], 4.0f);
  EXPECT_TRUE(std::isnan(y->as<float>()[2])); // negative base, fractional exp
  auto z = f32({4}, {0, NAN, 1, 2}), e = f32({4}, {0, 0, NAN, -1});
  auto yz = make(SPW_F32, {4});
  ASSERT_EQ(call(spw_op_pow, {z.get(), e.get()}, {yz.get()}), "");
  EXPECT_EQ(values(*yz)[0], 1.0f); // pow(0, 0)
  EXPECT_EQ(values(*yz)[1], 1.0f); // pow(NaN, 0)
  EXPECT_EQ(values(*yz)[2], 1.0f); // pow(1, NaN)
  EXPECT_EQ(values(*yz)[3], 0.5f);
  auto ai = i64({2}, {1, 2}), bi = boolean({2}, {1, 0});
  EXPECT_ERR(call(spw_op_pow, {ai.get(), ai.get()}, {y.get()}),
             "pow: result must be i64, got f32");
  EXPECT_ERR(call(spw_op_pow, {a.get(), ai.get()}, {y.get()}),
             "pow: b must be f32, got i64");
  EXPECT_ERR(call(spw_op_pow, {bi.get(), bi.get()}, {y.get()}),
             "pow: a has dtype bool; pow takes f32, i64 or i32");
  auto bad = make(SPW_F32, {3});
  EXPECT_ERR(call(spw_op_pow, {a.get(), b.get()}, {bad.get()}),
             "result has shape [3], expected [2,3]");
}

TEST(Pow, IntegerBySquaringWrapsAndRefusesNegativeExponents) {
  // i64, [2,3] ** [3]: exact where double would round (3^39 > 2^53), and
  // wrapping modulo 2^64 on overflow as numpy does.
  auto a = i64({2, 3}, {3, -2, 0, 7, 2, -1});
  auto b = i64({3}, {39, 5, 0});
  auto y = make(SPW_I64, {2, 3});
  ASSERT_EQ(call(spw_op_pow, {a.get(), b.get()}, {y.get()}), "");
  int64_t three39 = 1;
  for (int k = 0; k < 39; ++k)
    three39 *= 3;
  uint64_t seven39 = 1;
  for (int k = 0; k < 39; ++k)
    seven39 *= 7u;
  EXPECT_EQ(ints64(*y), (std::vector<int64_t>{three39, -32, 1, int64_t(seven39),
                                              32, 1}));
  // i32 wraps modulo 2^32: 2^31 is INT32_MIN, 2^32 is 0.
  auto c = i32({3}, {2, 2, -3}), e = i32({3}, {31, 32, 3});
  auto yc = make(SPW_I32, {3});
  ASSERT_EQ(call(spw_op_pow, {c.get(), e.get()}, {yc.get()}), "");
  EXPECT_EQ(ints32(*yc),
            (std::vector<int32_t>{std::numeric_limits<int32_t>::min(), 0, -27}));
  // numpy: "Integers to negative integer powers are not allowed", even for 1.
  auto base = i64({2}, {1, 2}), neg = i64({2}, {2, -1});
  auto yn = make(SPW_I64, {2});
  EXPECT_ERR(call(spw_op_pow, {base.get(), neg.get()}, {yn.get()}),
             "pow: integer base 2 to the negative power -1 (element 1 of the "
             "result): integers to negative integer powers are not allowed");
}

TEST(Compare, AllDtypesBroadcastBoolResult) {
  // f32 with NaN: every comparison with NaN is false.
  auto a = f32({2, 3}, {1, 2, 3, NAN, 5, -1}), b = f32({3}, {2, 2, NAN});
  auto y = make(SPW_BOOL, {2, 3});
  ASSERT_EQ(call(spw_op_equal, {a.get(), b.get()}, {y.get()}), "");
  EXPECT_EQ(bools(*y), (std::vector<uint8_t>{0, 1, 0, 0, 0, 0}));
  ASSERT_EQ(call(spw_op_less, {a.get(), b.get()}, {y.get()}), "");
  EXPECT_EQ(bools(*y), (std::vector<uint8_t>{1, 0, 0, 0, 0, 0}));
  ASSERT_EQ(call(spw_op_less_or_equal, {a.get(), b.get()}, {y.get()}), "");
  EXPECT_EQ(bools(*y), (std::vector<uint8_t>{1, 1, 0, 0, 0, 0}));
  ASSERT_EQ(call(spw_op_greater, {a.get(), b.get()}, {y.get()}), "");
  EXPECT_EQ(bools(*y), (std::vector<uint8_t>{0, 0, 0, 0, 1, 0}));
  // i64 scalar against a vector; large values compare exactly.
  auto c = i64({3}, {(int64_t(1) << 53) + 1, -5, 7}),
       s = i64({}, {int64_t(1) << 53});
  auto yc = make(SPW_BOOL, {3});
  ASSERT_EQ(call(spw_op_greater, {c.get(), s.get()}, {yc.get()}), "");
  EXPECT_EQ(bools(*yc), (std::vector<uint8_t>{1, 0, 0}));
  ASSERT_EQ(call(spw_op_equal, {s.get(), c.get()}, {yc.get()}), "");
  EXPECT_EQ(bools(*yc), (std::vector<uint8_t>{0, 0, 0}));
  // i32, [2,1] vs [1,2] -> [2,2]
  auto d = i32({2, 1}, {1, 3}), e = i32({1, 2}, {1, 2});
  auto yd = make(SPW_BOOL, {2, 2});
  ASSERT_EQ(call(spw_op_less_or_equal, {d.get(), e.get()}, {yd.get()}), "");
  EXPECT_EQ(bools(*yd), (std::vector<uint8_t>{1, 1, 0, 0}));
  // bool: false < true
  auto p = boolean({2}, {0, 1}), q = boolean({2, 1}, {1, 0});
  auto yp = make(SPW_BOOL, {2, 2});
  ASSERT_EQ(call(spw_op_less, {p.get(), q.get()}, {yp.get()}), "");
  EXPECT_EQ(bools(*yp), (std::vector<uint8_t>{1, 0, 0, 0}));
  ASSERT_EQ(call(spw_op_equal, {p.get(), q.get()}, {yp.get()}), "");
  EXPECT_EQ(bools(*yp), (std::vector<uint8_t>{0, 1, 1, 0}));
  // errors
  EXPECT_ERR(call(spw_op_equal, {a.get(), c.get()}, {y.get()}),
             "equal: operand dtypes differ: f32 and i64");
  auto yf = make(SPW_F32, {2, 3});
  EXPECT_ERR(call(spw_op_less, {a.get(), b.get()}, {yf.get()}),
             "less: result must be bool, got f32");
  auto bad = f32({2}, {1, 2});
  EXPECT_ERR(call(spw_op_greater, {a.get(), bad.get()}, {y.get()}),
             "shapes [2,3] and [2] are not broadcast-compatible");
}

TEST(Where, BroadcastAllThreeAnyDtype) {
  // cond [2,1], a [3], b [] -> [2,3]
  auto c = boolean({2, 1}, {1, 0});
  auto a = f32({3}, {1, 2, 3}), b = f32({}, {-1});
  auto y = make(SPW_F32, {2, 3});
  ASSERT_EQ(call(spw_op_where, {c.get(), a.get(), b.get()}, {y.get()}), "");
  EXPECT_EQ(values(*y), (std::vector<float>{1, 2, 3, -1, -1, -1}));
  // i64 data, cond broadcasting along the other axis
  auto c2 = boolean({3}, {0, 1, 0});
  auto ai = i64({2, 1}, {10, 20}), bi = i64({2, 3}, {1, 2, 3, 4, 5, 6});
  auto yi = make(SPW_I64, {2, 3});
  ASSERT_EQ(call(spw_op_where, {c2.get(), ai.get(), bi.get()}, {yi.get()}), "");
  EXPECT_EQ(ints64(*yi), (std::vector<int64_t>{1, 10, 3, 4, 20, 6}));
  // i32 and bool data
  auto a32 = i32({3}, {7, 8, 9}), b32 = i32({3}, {-7, -8, -9});
  auto y32 = make(SPW_I32, {3});
  ASSERT_EQ(call(spw_op_where, {c2.get(), a32.get(), b32.get()}, {y32.get()}),
            "");
  EXPECT_EQ(ints32(*y32), (std::vector<int32_t>{-7, 8, -9}));
  auto ab = boolean({3}, {1, 1, 1}), bb = boolean({}, {0});
  auto yb = make(SPW_BOOL, {3});
  ASSERT_EQ(call(spw_op_where, {c2.get(), ab.get(), bb.get()}, {yb.get()}), "");
  EXPECT_EQ(bools(*yb), (std::vector<uint8_t>{0, 1, 0}));
  // errors
  auto fc = f32({3}, {1, 0, 1});
  EXPECT_ERR(call(spw_op_where, {fc.get(), a32.get(), b32.get()}, {y32.get()}),
             "where: cond must be bool, got f32");
  EXPECT_ERR(call(spw_op_where, {c2.get(), a32.get(), bi.get()}, {y32.get()}),
             "operand dtypes differ: i32 and i64");
  auto c4 = boolean({4}, {0, 1, 0, 1});
  EXPECT_ERR(call(spw_op_where, {c4.get(), a.get(), b.get()}, {y.get()}),
             "shapes [4], [3] and [] are not broadcast-compatible");
  auto wrong = make(SPW_F32, {3, 2});
  EXPECT_ERR(call(spw_op_where, {c.get(), a.get(), b.get()}, {wrong.get()}),
             "result has shape [3,2], expected [2,3]");
}

TEST(Cast, EveryPairOfDtypes) {
  auto x = f32({8}, {-2.7f, 2.7f, -0.0f, 0.5f, 3e9f, -3e9f, NAN, INFINITY});
  auto yi64 = make(SPW_I64, {8}), yi32 = make(SPW_I32, {8}),
       yb = make(SPW_BOOL, {8}), yf = make(SPW_F32, {8});
  ASSERT_EQ(call(spw_op_cast, {x.get()}, {yi64.get()}), "");
  // Truncation toward zero; NaN -> 0; out of range saturates.
  EXPECT_EQ(ints64(*yi64), (std::vector<int64_t>{-2, 2, 0, 0, 3000000000,
                                                 -3000000000, 0, INT64_MAX}));
  ASSERT_EQ(call(spw_op_cast, {x.get()}, {yi32.get()}), "");
  EXPECT_EQ(ints32(*yi32), (std::vector<int32_t>{-2, 2, 0, 0, INT32_MAX,
                                                 INT32_MIN, 0, INT32_MAX}));
  ASSERT_EQ(call(spw_op_cast, {x.get()}, {yb.get()}), "");
  EXPECT_EQ(bools(*yb), (std::vector<uint8_t>{1, 1, 0, 1, 1, 1, 1, 1}));
  ASSERT_EQ(call(spw_op_cast, {x.get()}, {yf.get()}), ""); // identity
  EXPECT_EQ(std::memcmp(yf->data, x->data, 32), 0);

  // i64 -> f32 rounds to nearest; -> i32 wraps; -> bool is != 0.
  auto a = i64({4}, {(int64_t(1) << 24) + 1, -3, int64_t(1) << 32, 0});
  auto af = make(SPW_F32, {4}), a32 = make(SPW_I32, {4}),
       ab = make(SPW_BOOL, {4});
  ASSERT_EQ(call(spw_op_cast, {a.get()}, {af.get()}), "");
  EXPECT_EQ(values(*af), (std::vector<float>{16777216.0f, -3, 4294967296.0f,
                                             0}));
  ASSERT_EQ(call(spw_op_cast, {a.get()}, {a32.get()}), "");
  EXPECT_EQ(ints32(*a32), (std::vector<int32_t>{16777217, -3, 0, 0}));
  ASSERT_EQ(call(spw_op_cast, {a.get()}, {ab.get()}), "");
  EXPECT_EQ(bools(*ab), (std::vector<uint8_t>{1, 1, 1, 0}));

  auto b = i32({3}, {-5, 0, 123456789});
  auto b64 = make(SPW_I64, {3}), bf = make(SPW_F32, {3}),
       bb = make(SPW_BOOL, {3});
  ASSERT_EQ(call(spw_op_cast, {b.get()}, {b64.get()}), "");
  EXPECT_EQ(ints64(*b64), (std::vector<int64_t>{-5, 0, 123456789}));
  ASSERT_EQ(call(spw_op_cast, {b.get()}, {bf.get()}), "");
  EXPECT_EQ(values(*bf), (std::vector<float>{-5, 0, 123456792.0f}));
  ASSERT_EQ(call(spw_op_cast, {b.get()}, {bb.get()}), "");
  EXPECT_EQ(bools(*bb), (std::vector<uint8_t>{1, 0, 1}));

  auto c = boolean({2, 2}, {0, 1, 1, 0});
  auto cf = make(SPW_F32, {2, 2}), c64 = make(SPW_I64, {2, 2}),
       c32 = make(SPW_I32, {2, 2}), cb = make(SPW_BOOL, {2, 2});
  ASSERT_EQ(call(spw_op_cast, {c.get()}, {cf.get()}), "");
  EXPECT_EQ(values(*cf), (std::vector<float>{0, 1, 1, 0}));
  ASSERT_EQ(call(spw_op_cast, {c.get()}, {c64.get()}), "");
  EXPECT_EQ(ints64(*c64), (std::vector<int64_t>{0, 1, 1, 0}));
  ASSERT_EQ(call(spw_op_cast, {c.get()}, {c32.get()}), "");
  EXPECT_EQ(ints32(*c32), (std::vector<int32_t>{0, 1, 1, 0}));
  ASSERT_EQ(call(spw_op_cast, {c.get()}, {cb.get()}), "");
  EXPECT_EQ(bools(*cb), (std::vector<uint8_t>{0, 1, 1, 0}));

  auto wrong = make(SPW_F32, {4});
  EXPECT_ERR(call(spw_op_cast, {c.get()}, {wrong.get()}),
             "cast: result has shape [4], expected [2,2]");
}

// The rounding bf16 storage uses (bf16.h), against the definition: the
// nearer of the two bf16 values around x (distances exact in double), the
// even one on a tie, infinity past the largest bf16 (as if the next value
// were 2^128); a NaN is the quiet NaN 0x7FC0 (torch's). Every upper half
// with 40 lower halves (the tie, its neighbours, both ends, random).
TEST(Cast, Bf16RoundsToNearestEvenAndBackExactly) {
  auto reference = [](uint32_t u) -> uint16_t {
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f))
      return uint16_t(0x7fc0u);
    if (std::isinf(f))
      return uint16_t(u >> 16);
    const uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
    auto value = [](uint32_t bits) {
      if ((bits & 0x7fffffffu) == 0x7f800000u)
        return std::copysign(std::ldexp(1.0, 128), bits >> 31 ? -1.0 : 1.0);
      float v;
      std::memcpy(&v, &bits, 4);
      return double(v);
    };
    const double dlo = std::fabs(double(f) - value(lo)),
                 dhi = std::fabs(value(hi) - double(f));
    if (dlo != dhi)
      return uint16_t((dlo < dhi ? lo : hi) >> 16);
    return uint16_t(((lo >> 16) & 1u ? hi : lo) >> 16);
  };
  std::vector<uint32_t> lows = {0,      1,      2,      0x7ffe, 0x7fff,
                                0x8000, 0x8001, 0x8002, 0xfffe, 0xffff};
  uint64_t state = 88172645463325252ull;
  while (lows.size() < 40) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    lows.push_back(uint32_t(state & 0xffffu));
  }
  const int64_t n = int64_t(1 << 16) * int64_t(lows.size());
  auto x = make(SPW_F32, {n});
  auto y = make(SPW_BF16, {n});
  auto *xb = x->as<uint32_t>();
  for (uint32_t hi = 0; hi < (1u << 16); ++hi)
    for (size_t k = 0; k < lows.size(); ++k)
      xb[hi * lows.size() + k] = hi << 16 | lows[k];
  ASSERT_EQ(call(spw_op_cast, {x.get()}, {y.get()}), "");
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i)
    if (y->as<uint16_t>()[i] != reference(xb[i]) && wrong++ < 5)
      ADD_FAILURE() << std::hex << "f32 0x" << xb[i] << " -> bf16 0x"
                    << y->as<uint16_t>()[i] << ", expected 0x"
                    << reference(xb[i]);
  EXPECT_EQ(wrong, 0);

  // bf16 -> f32 is exact: every pattern, NaN payloads included.
  auto b = make(SPW_BF16, {1 << 16});
  auto f = make(SPW_F32, {1 << 16});
  for (uint32_t v = 0; v < (1u << 16); ++v)
    b->as<uint16_t>()[v] = uint16_t(v);
  ASSERT_EQ(call(spw_op_cast, {b.get()}, {f.get()}), "");
  for (uint32_t v = 0; v < (1u << 16); ++v)
    ASSERT_EQ(f->as<uint32_t>()[v], v << 16) << v;

  // Only to and from f32: anything else would round twice.
  auto i = i64({2}, {1, 2});
  auto ib = make(SPW_BF16, {2});
  EXPECT_ERR(call(spw_op_cast, {i.get()}, {ib.get()}),
             "cast: cast from i64 to bf16: bf16 converts to and from f32 only");
}

TEST(Reduce, MaxTiesInfNanAndDtypes) {
  auto x = f32({2, 3, 2}, randoms(12, 60));
  auto y = make(SPW_F32, {3}), yk = make(SPW_F32, {1, 3, 1});
  ASSERT_EQ(call(spw_op_reduce_max, {x.get()}, {y.get()}, {2, 0, 2}), "");
  ASSERT_EQ(call(spw_op_reduce_max, {x.get()}, {yk.get()}, {2, 2, 0}), "");
  for (int j = 0; j < 3; ++j) {
    float m = -INFINITY;
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 2; ++k)
        m = std::max(m, x->as<float>()[(i * 3 + j) * 2 + k]);
    EXPECT_EQ(y->as<float>()[j], m);
    EXPECT_EQ(yk->as<float>()[j], m);
  }
  // Ties, all -inf, NaN propagates.
  auto t = f32({3, 3}, {2, 5, 5, -INFINITY, -INFINITY, -INFINITY, 1, NAN, 3});
  auto yt = make(SPW_F32, {3});
  ASSERT_EQ(call(spw_op_reduce_max, {t.get()}, {yt.get()}, {1, 1}), "");
  EXPECT_EQ(yt->as<float>()[0], 5.0f);
  EXPECT_EQ(yt->as<float>()[1], -INFINITY);
  EXPECT_TRUE(std::isnan(yt->as<float>()[2]));
  // Integers and bool
  auto a = i64({2, 2}, {INT64_MIN, -7, 3, 3});
  auto ya = make(SPW_I64, {2});
  ASSERT_EQ(call(spw_op_reduce_max, {a.get()}, {ya.get()}, {1, 1}), "");
  EXPECT_EQ(ints64(*ya), (std::vector<int64_t>{-7, 3}));
  auto b = i32({2, 2}, {-4, 9, -5, 2});
  auto yb = make(SPW_I32, {1, 2});
  ASSERT_EQ(call(spw_op_reduce_max, {b.get()}, {yb.get()}, {1, 0}), "");
  EXPECT_EQ(ints32(*yb), (std::vector<int32_t>{-4, 9}));
  auto c = boolean({2, 2}, {0, 0, 0, 1});
  auto yc = make(SPW_BOOL, {2});
  ASSERT_EQ(call(spw_op_reduce_max, {c.get()}, {yc.get()}, {1, 1}), "");
  EXPECT_EQ(bools(*yc), (std::vector<uint8_t>{0, 1}));
  // Empty reduced dim: -inf.
  auto e = make(SPW_F32, {2, 0});
  auto ye = make(SPW_F32, {2});
  ASSERT_EQ(call(spw_op_reduce_max, {e.get()}, {ye.get()}, {1, 1}), "");
  EXPECT_EQ(values(*ye), (std::vector<float>{-INFINITY, -INFINITY}));
  auto bad = make(SPW_F32, {2});
  EXPECT_ERR(call(spw_op_reduce_max, {x.get()}, {bad.get()}, {1, 1}),
             "reduce_max: result has shape [2], expected [2,1,2] (keepdims) "
             "or [2,2]");
  auto wrongd = make(SPW_I64, {3});
  EXPECT_ERR(call(spw_op_reduce_max, {x.get()}, {wrongd.get()}, {2, 0, 2}),
             "result must be f32, got i64");
}

TEST(Concat, AxesAndDtypes) {
  auto a = f32({2, 1}, {1, 2}), b = f32({2, 3}, {3, 4, 5, 6, 7, 8}),
       c = make(SPW_F32, {2, 0});
  auto y = make(SPW_F32, {2, 4});
  ASSERT_EQ(call(spw_op_concat, {a.get(), c.get(), b.get()}, {y.get()}, {1, 3}),
            "");
  EXPECT_EQ(values(*y), (std::vector<float>{1, 3, 4, 5, 2, 6, 7, 8}));
  auto p = i64({1, 2}, {1, 2}), q = i64({2, 2}, {3, 4, 5, 6});
  auto yi = make(SPW_I64, {3, 2});
  ASSERT_EQ(call(spw_op_concat, {q.get(), p.get()}, {yi.get()}, {0, 2}), "");
  EXPECT_EQ(ints64(*yi), (std::vector<int64_t>{3, 4, 5, 6, 1, 2}));
  auto r = boolean({2}, {1, 0}), s = boolean({1}, {1});
  auto yb = make(SPW_BOOL, {3});
  ASSERT_EQ(call(spw_op_concat, {r.get(), s.get()}, {yb.get()}, {0, 2}), "");
  EXPECT_EQ(bools(*yb), (std::vector<uint8_t>{1, 0, 1}));
  auto u = i32({3}, {5, 6, 7});
  auto yu = make(SPW_I32, {3});
  ASSERT_EQ(call(spw_op_concat, {u.get()}, {yu.get()}, {0, 1}), "");
  EXPECT_EQ(ints32(*yu), (std::vector<int32_t>{5, 6, 7}));
  // errors
  EXPECT_ERR(call(spw_op_concat, {a.get(), p.get()}, {y.get()}, {1, 2}),
             "concat: x1 is i64 [1,2], but x0 is f32 [2,1] (only axis 1 may "
             "differ)");
  auto bad = make(SPW_F32, {2, 5});
  EXPECT_ERR(call(spw_op_concat, {a.get(), b.get()}, {bad.get()}, {1, 2}),
             "result has shape [2,5], expected [2,4]");
  EXPECT_ERR(call(spw_op_concat, {a.get(), b.get()}, {y.get()}, {2, 2}),
             "axis 2 is out of range for rank 2");
  EXPECT_ERR(call(spw_op_concat, {a.get(), b.get()}, {y.get()}, {1, 0}),
             "operand count 0 must be >= 1");
}

// Naive slice of a row-major x of shape xd.
template <class T>
std::vector<T> naive_slice(const T *x, const std::vector<int64_t> &xd,
                           const std::vector<int64_t> &yd,
                           const std::vector<int64_t> &starts,
                           const std::vector<int64_t> &steps) {
  int64_t n = 1;
  for (int64_t d : yd)
    n *= d;
  std::vector<T> out;
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, off = 0, stride = 1;
    for (int d = int(yd.size()) - 1; d >= 0; --d) {
      int64_t id = rem % yd[size_t(d)];
      rem /= yd[size_t(d)];
      off += (starts[size_t(d)] + id * steps[size_t(d)]) * stride;
      stride *= xd[size_t(d)];
    }
    out.push_back(x[off]);
  }
  return out;
}

TEST(Slice, PositiveNegativeStepsAndDtypes) {
  const std::vector<int64_t> xd = {4, 5, 3};
  auto x = f32(xd, randoms(60, 70));
  struct Case {
    std::vector<int64_t> yd, starts, steps;
  };
  const Case cases[] = {
      {{2, 3, 3}, {1, 0, 0}, {1, 2, 1}},
      {{4, 5, 3}, {3, 4, 2}, {-1, -1, -1}},  // full reversal
      {{2, 2, 1}, {3, 4, 1}, {-2, -3, 5}},
      {{1, 5, 2}, {2, 0, 0}, {7, 1, 2}},
      {{0, 5, 3}, {9, 0, 0}, {1, 1, 1}},  // empty: start not checked
  };
  for (const Case &c : cases) {
    auto y = make(SPW_F32, c.yd);
    std::vector<int64_t> ia = c.starts;
    ia.insert(ia.end(), c.steps.begin(), c.steps.end());
    auto ctx = spw::make_context();
    spw_tensor *ins[] = {x.get()}, *outs[] = {y.get()};
    spw_op_slice(ctx.get(), ins, outs, ia.data(), nullptr);
    ASSERT_EQ(ctx->error, "");
    EXPECT_EQ(values(*y),
              naive_slice(x->as<float>(), xd, c.yd, c.starts, c.steps));
  }
  auto xi = i64({5}, {0, 1, 2, 3, 4});
  auto yi = make(SPW_I64, {3});
  ASSERT_EQ(call(spw_op_slice, {xi.get()}, {yi.get()}, {4, -2}), "");
  EXPECT_EQ(ints64(*yi), (std::vector<int64_t>{4, 2, 0}));
  auto xb = boolean({2, 3}, {1, 0, 0, 0, 1, 1});
  auto yb = make(SPW_BOOL, {2, 2});
  ASSERT_EQ(call(spw_op_slice, {xb.get()}, {yb.get()}, {1, 2, -1, -2}), "");
  EXPECT_EQ(bools(*yb), (std::vector<uint8_t>{1, 0, 0, 1}));
  auto x32 = i32({3}, {7, 8, 9});
  auto y32 = make(SPW_I32, {1});
  ASSERT_EQ(call(spw_op_slice, {x32.get()}, {y32.get()}, {1, 1}), "");
  EXPECT_EQ(ints32(*y32), (std::vector<int32_t>{8}));
  // errors
  EXPECT_ERR(call(spw_op_slice, {xi.get()}, {yi.get()}, {4, 2}),
             "slice: dim 0: 3 elements from 4 with step 2 do not fit in size 5");
  EXPECT_ERR(call(spw_op_slice, {xi.get()}, {yi.get()}, {-1, 1}),
             "do not fit");
  EXPECT_ERR(call(spw_op_slice, {xi.get()}, {yi.get()}, {0, 0}),
             "step of dim 0 is 0");
  auto wrong_rank = make(SPW_I64, {1, 3});
  EXPECT_ERR(call(spw_op_slice, {xi.get()}, {wrong_rank.get()}, {0, 0, 1, 1}),
             "result has rank 2, but x has rank 1");
  auto wrong_dtype = make(SPW_I32, {3});
  EXPECT_ERR(call(spw_op_slice, {xi.get()}, {wrong_dtype.get()}, {0, 1}),
             "result is i32, but x is i64");
}

TEST(Linear, WithAndWithoutBias) {
  auto x = f32({2, 3, 4}, randoms(24, 80)), w = f32({4, 5}, randoms(20, 81));
  auto b = f32({5}, randoms(5, 82));
  auto y = make(SPW_F32, {2, 3, 5});
  ASSERT_EQ(call(spw_op_linear, {x.get(), w.get(), b.get()}, {y.get()}), "");
  auto ref = naive_matmul(x->as<float>(), w->as<float>(), 6, 4, 5);
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 5; ++j)
      EXPECT_NEAR(y->as<float>()[i * 5 + j],
                  ref[size_t(i * 5 + j)] + b->as<float>()[j], 1e-6);
  ASSERT_EQ(call(spw_op_linear, {x.get(), w.get(), nullptr}, {y.get()}), "");
  for (int e = 0; e < 30; ++e)
    EXPECT_FLOAT_EQ(y->as<float>()[e], ref[size_t(e)]);
  auto x1 = f32({4}, {1, 0, 0, 1});
  auto y1 = make(SPW_F32, {5});
  ASSERT_EQ(call(spw_op_linear, {x1.get(), w.get(), nullptr}, {y1.get()}), "");
  for (int j = 0; j < 5; ++j)
    EXPECT_FLOAT_EQ(y1->as<float>()[j],
                    w->as<float>()[j] + w->as<float>()[15 + j]);
  auto wt = f32({5, 4}, randoms(20, 83));
  EXPECT_ERR(call(spw_op_linear, {x.get(), wt.get(), nullptr}, {y.get()}),
             "linear: inner dimensions differ: x [2,3,4], w [5,4]");
  auto bb = f32({4}, randoms(4, 84));
  EXPECT_ERR(call(spw_op_linear, {x.get(), w.get(), bb.get()}, {y.get()}),
             "b has shape [4], expected [5]");
  auto yb = make(SPW_F32, {6, 5});
  EXPECT_ERR(call(spw_op_linear, {x.get(), w.get(), b.get()}, {yb.get()}),
             "result has shape [6,5], expected [2,3,5]");
}

TEST(RmsNorm, OverTrailingDims) {
  auto x = f32({2, 3, 4}, randoms(24, 90, -2, 2));
  auto scale = f32({3, 4}, randoms(12, 91));
  auto y = make(SPW_F32, {2, 3, 4});
  ASSERT_EQ(call(spw_op_rms_norm, {x.get(), scale.get()}, {y.get()}, {1},
                 {1e-6}),
            "");
  for (int o = 0; o < 2; ++o) {
    const float *r = x->as<float>() + o * 12;
    double ss = 0;
    for (int i = 0; i < 12; ++i)
      ss += double(r[i]) * r[i];
    const double inv = 1 / std::sqrt(ss / 12 + 1e-6);
    for (int i = 0; i < 12; ++i)
      EXPECT_FLOAT_EQ(y->as<float>()[o * 12 + i],
                      float(r[i] * inv * scale->as<float>()[i]));
  }
  auto bad = f32({4}, randoms(4, 1));
  EXPECT_ERR(call(spw_op_rms_norm, {x.get(), bad.get()}, {y.get()}, {1}, {1e-6}),
             "rms_norm: scale has shape [4], expected the normalized dims "
             "[3,4]");
  EXPECT_ERR(call(spw_op_rms_norm, {x.get(), scale.get()}, {y.get()}, {1}),
             "float attributes are NULL");
  EXPECT_ERR(call(spw_op_rms_norm, {x.get(), scale.get()}, {y.get()}, {3},
                  {1e-6}),
             "axis 3 is out of range for rank 3");
}

// rope reference: y = x cos + rotate_half(x) sin, cos/sin [S, D] broadcast to
// x [B, H, S, D].
TEST(Rope, RotateHalfWithBroadcastCosSin) {
  const int B = 2, H = 2, S = 3, D = 4;
  auto x = f32({B, H, S, D}, randoms(48, 100));
  auto c = f32({S, D}, randoms(12, 101)), s = f32({S, D}, randoms(12, 102));
  auto y = make(SPW_F32, {B, H, S, D});
  ASSERT_EQ(call(spw_op_rope, {x.get(), c.get(), s.get()}, {y.get()}), "");
  for (int r = 0; r < B * H * S; ++r) {
    const float *xr = x->as<float>() + r * D;
    const int pos = r % S;
    for (int d = 0; d < D; ++d) {
      float rot = d < D / 2 ? -xr[d + D / 2] : xr[d - D / 2];
      double want = double(xr[d]) * c->as<float>()[pos * D + d] +
                    double(rot) * s->as<float>()[pos * D + d];
      EXPECT_FLOAT_EQ(y->as<float>()[r * D + d], float(want));
    }
  }
  // Hand-computed: x = [1, 2, 3, 4], cos = 0, sin = 1 -> [-3, -4, 1, 2].
  auto x1 = f32({4}, {1, 2, 3, 4}), c0 = f32({1}, {0}), s1 = f32({}, {1});
  auto y1 = make(SPW_F32, {4});
  ASSERT_EQ(call(spw_op_rope, {x1.get(), c0.get(), s1.get()}, {y1.get()}), "");
  EXPECT_EQ(values(*y1), (std::vector<float>{-3, -4, 1, 2}));
  auto odd = f32({3}, {1, 2, 3});
  auto yo = make(SPW_F32, {3});
  EXPECT_ERR(call(spw_op_rope, {odd.get(), c0.get(), s1.get()}, {yo.get()}),
             "rope: the last dim of x [3] must be even");
  auto big = f32({2, 4}, randoms(8, 1));
  EXPECT_ERR(call(spw_op_rope, {x1.get(), big.get(), s1.get()}, {y1.get()}),
             "cos of shape [2,4] cannot broadcast to [4]");
}

// Naive attention for q [B,H,S,D], k/v [B,Hkv,S,D].
std::vector<float> naive_attention(const spw_tensor &q, const spw_tensor &k,
                                   const spw_tensor &v, bool causal,
                                   double scale) {
  const int64_t B = q.dims[0], H = q.dims[1], S = q.dims[2], D = q.dims[3];
  const int64_t Hkv = k.dims[1];
  std::vector<float> y(size_t(q.numel));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kh = h / (H / Hkv);
      auto Q = [&](int64_t i, int64_t d) {
        return double(q.as<float>()[((b * H + h) * S + i) * D + d]);
      };
      auto K = [&](int64_t j, int64_t d) {
        return double(k.as<float>()[((b * Hkv + kh) * S + j) * D + d]);
      };
      auto V = [&](int64_t j, int64_t d) {
        return double(v.as<float>()[((b * Hkv + kh) * S + j) * D + d]);
      };
      for (int64_t i = 0; i < S; ++i) {
        std::vector<double> sc(size_t(S), -INFINITY);
        double mx = -INFINITY;
        for (int64_t j = 0; j < S; ++j) {
          if (causal && j > i)
            continue;
          double s = 0;
          for (int64_t d = 0; d < D; ++d)
            s += Q(i, d) * K(j, d);
          sc[size_t(j)] = s * scale;
          mx = std::max(mx, sc[size_t(j)]);
        }
        double sum = 0;
        for (double &s : sc) {
          s = std::exp(s - mx);
          sum += s;
        }
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < S; ++j)
            acc += sc[size_t(j)] / sum * V(j, d);
          y[size_t(((b * H + h) * S + i) * D + d)] = float(acc);
        }
      }
    }
  return y;
}

TEST(Attention, CausalAndGroupedQueryHeads) {
  const int64_t B = 2, H = 4, Hkv = 2, S = 5, D = 3;
  auto q = f32({B, H, S, D}, randoms(size_t(B * H * S * D), 110, -2, 2));
  auto k = f32({B, Hkv, S, D}, randoms(size_t(B * Hkv * S * D), 111, -2, 2));
  auto v = f32({B, Hkv, S, D}, randoms(size_t(B * Hkv * S * D), 112));
  auto y = make(SPW_F32, {B, H, S, D});
  for (int64_t causal : {0, 1}) {
    ASSERT_EQ(call(spw_op_attention, {q.get(), k.get(), v.get()}, {y.get()},
                   {causal}, {0.6}),
              "");
    auto ref = naive_attention(*q, *k, *v, causal, 0.6);
    for (size_t i = 0; i < ref.size(); ++i)
      EXPECT_NEAR(y->as<float>()[i], ref[i], 1e-6) << "causal " << causal;
    // Causal row 0 attends only to key 0: y = v[0] of the kv head.
    if (causal)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d)
          EXPECT_EQ(y->as<float>()[(h * S) * D + d],
                    v->as<float>()[((h / 2) * S) * D + d]);
  }
  // errors
  auto k3 = f32({B, 3, S, D}, randoms(size_t(B * 3 * S * D), 1));
  EXPECT_ERR(call(spw_op_attention, {q.get(), k3.get(), k3.get()}, {y.get()},
                  {0}, {1.0}),
             "attention: the 4 query heads of q [2,4,5,3] are not a multiple "
             "of the 3 kv heads");
  auto vbad = f32({B, Hkv, S, 2}, randoms(size_t(B * Hkv * S * 2), 1));
  EXPECT_ERR(call(spw_op_attention, {q.get(), k.get(), vbad.get()}, {y.get()},
                  {0}, {1.0}),
             "v has shape [2,2,5,2], expected [2,2,5,3]");
  EXPECT_ERR(call(spw_op_attention, {q.get(), k.get(), v.get()}, {y.get()},
                  {2}, {1.0}),
             "causal must be 0 or 1, got 2");
  EXPECT_ERR(call(spw_op_attention, {q.get(), k.get(), v.get()}, {y.get()},
                  {0}),
             "float attributes are NULL");
  auto y3 = make(SPW_F32, {B, H, S});
  EXPECT_ERR(call(spw_op_attention, {q.get(), k.get(), v.get()}, {y3.get()},
                  {0}, {1.0}),
             "result is f32 [2,4,5], but q is f32 [2,4,5,3]");
}

// ---- gradients of those ops against central finite differences ------------

TEST(Grad, Silu) {
  auto x = randoms(10, 120, -4, 4), w = randoms(10, 121);
  auto tx = f32({10}, x), dy = f32({10}, w), dx = make(SPW_F32, {10});
  ASSERT_EQ(call(spw_op_silu_grad, {tx.get(), dy.get()}, {dx.get()}), "");
  expect_matches_fd(unary_forward(spw_op_silu, {10}), x, w, values(*dx));
}

TEST(Grad, SliceScattersIntoZeros) {
  const std::vector<int64_t> xd = {4, 5}, yd = {2, 3};
  const std::vector<int64_t> ia = {3, 4, -2, -2}; // rows 3,1; cols 4,2,0
  auto x = randoms(20, 122), w = randoms(6, 123);
  auto fwd = [&](const std::vector<float> &v) {
    auto t = f32(xd, v);
    auto y = make(SPW_F32, yd);
    auto ctx = spw::make_context();
    spw_tensor *ins[] = {t.get()}, *outs[] = {y.get()};
    spw_op_slice(ctx.get(), ins, outs, ia.data(), nullptr);
    EXPECT_EQ(ctx->error, "");
    return values(*y);
  };
  auto dy = f32(yd, w), dx = make(SPW_F32, xd);
  auto ctx = spw::make_context();
  spw_tensor *ins[] = {dy.get()}, *outs[] = {dx.get()};
  spw_op_slice_grad(ctx.get(), ins, outs, ia.data(), nullptr);
  ASSERT_EQ(ctx->error, "");
  expect_matches_fd(fwd, x, w, values(*dx));
  EXPECT_EQ(dx->as<float>()[3 * 5 + 4], w[0]);
  EXPECT_EQ(dx->as<float>()[1 * 5 + 0], w[5]);
  EXPECT_EQ(dx->as<float>()[0], 0.0f);
  auto bad = make(SPW_F32, {3, 5});
  EXPECT_ERR(call(spw_op_slice_grad, {dy.get()}, {bad.get()}, {3, 4, -2, -2}),
             "slice_grad: dim 0: 2 elements from 3 with step -2 do not fit in "
             "size 3");
}

TEST(Grad, RmsNormBothOutputs) {
  const std::vector<int64_t> xd = {3, 2, 4}, pd = {2, 4};
  auto x = randoms(24, 124, -2, 2), s = randoms(8, 125, 0.5, 1.5);
  auto w = randoms(24, 126);
  auto rn = [&](const std::vector<float> &xv, const std::vector<float> &sv) {
    auto tx = f32(xd, xv), ts = f32(pd, sv);
    auto y = make(SPW_F32, xd);
    EXPECT_EQ(call(spw_op_rms_norm, {tx.get(), ts.get()}, {y.get()}, {1},
                   {1e-5}),
              "");
    return values(*y);
  };
  auto tx = f32(xd, x), ts = f32(pd, s), dy = f32(xd, w);
  auto dx = make(SPW_F32, xd), ds = make(SPW_F32, pd);
  ASSERT_EQ(call(spw_op_rms_norm_grad, {tx.get(), ts.get(), dy.get()},
                 {dx.get(), ds.get()}, {1}, {1e-5}),
            "");
  expect_matches_fd([&](auto &v) { return rn(v, s); }, x, w, values(*dx));
  expect_matches_fd([&](auto &v) { return rn(x, v); }, s, w, values(*ds));
  EXPECT_EQ(call(spw_op_rms_norm_grad, {tx.get(), ts.get(), dy.get()},
                 {nullptr, ds.get()}, {1}, {1e-5}),
            "");
  auto bad = make(SPW_F32, {8});
  EXPECT_ERR(call(spw_op_rms_norm_grad, {tx.get(), ts.get(), dy.get()},
                  {dx.get(), bad.get()}, {1}, {1e-5}),
             "rms_norm_grad: dscale is f32 [8], but scale is f32 [2,4]");
}

TEST(Grad, Rope) {
  const std::vector<int64_t> xd = {2, 3, 6};
  auto x = randoms(36, 127), w = randoms(36, 128);
  auto c = f32({3, 6}, randoms(18, 129)), s = f32({3, 1}, randoms(3, 130));
  auto fwd = [&](const std::vector<float> &v) {
    auto t = f32(xd, v);
    auto y = make(SPW_F32, xd);
    EXPECT_EQ(call(spw_op_rope, {t.get(), c.get(), s.get()}, {y.get()}), "");
    return values(*y);
  };
  auto dy = f32(xd, w), dx = make(SPW_F32, xd);
  ASSERT_EQ(call(spw_op_rope_grad, {dy.get(), c.get(), s.get()}, {dx.get()}),
            "");
  expect_matches_fd(fwd, x, w, values(*dx));
  auto wrong = make(SPW_F32, {2, 3, 4});
  EXPECT_ERR(call(spw_op_rope_grad, {dy.get(), c.get(), s.get()}, {wrong.get()}),
             "rope_grad: result is f32 [2,3,4], but dy is f32 [2,3,6]");
}

TEST(Grad, AttentionGqaCausalAndNot) {
  const int64_t B = 2, H = 4, Hkv = 2, S = 4, D = 3;
  const std::vector<int64_t> qd = {B, H, S, D}, kd = {B, Hkv, S, D};
  auto q = randoms(size_t(B * H * S * D), 131, -1.5f, 1.5f);
  auto k = randoms(size_t(B * Hkv * S * D), 132, -1.5f, 1.5f);
  auto v = randoms(size_t(B * Hkv * S * D), 133);
  auto w = randoms(size_t(B * H * S * D), 134);
  const double scale = 0.7;
  for (int64_t causal : {0, 1}) {
    SCOPED_TRACE(causal ? "causal" : "non-causal");
    auto att = [&](const std::vector<float> &qv, const std::vector<float> &kv,
                   const std::vector<float> &vv) {
      auto tq = f32(qd, qv), tk = f32(kd, kv), tv = f32(kd, vv);
      auto y = make(SPW_F32, qd);
      EXPECT_EQ(call(spw_op_attention, {tq.get(), tk.get(), tv.get()},
                     {y.get()}, {causal}, {scale}),
                "");
      return values(*y);
    };
    auto tq = f32(qd, q), tk = f32(kd, k), tv = f32(kd, v), dy = f32(qd, w);
    auto dq = make(SPW_F32, qd), dk = make(SPW_F32, kd), dv = make(SPW_F32, kd);
    ASSERT_EQ(call(spw_op_attention_grad,
                   {tq.get(), tk.get(), tv.get(), dy.get()},
                   {dq.get(), dk.get(), dv.get()}, {causal}, {scale}),
              "");
    expect_matches_fd([&](auto &x) { return att(x, k, v); }, q, w, values(*dq));
    expect_matches_fd([&](auto &x) { return att(q, x, v); }, k, w, values(*dk));
    expect_matches_fd([&](auto &x) { return att(q, k, x); }, v, w, values(*dv));
    // GQA == multi-head attention with each kv head repeated for its query
    // heads; dK, dV are the sums over those repeats.
    std::vector<float> kr, vr;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        const size_t off = size_t((b * Hkv + h / 2) * S * D);
        kr.insert(kr.end(), k.begin() + long(off), k.begin() + long(off + S * D));
        vr.insert(vr.end(), v.begin() + long(off), v.begin() + long(off + S * D));
      }
    auto tkr = f32(qd, kr), tvr = f32(qd, vr);
    auto dq2 = make(SPW_F32, qd), dk2 = make(SPW_F32, qd),
         dv2 = make(SPW_F32, qd);
    ASSERT_EQ(call(spw_op_attention_grad,
                   {tq.get(), tkr.get(), tvr.get(), dy.get()},
                   {dq2.get(), dk2.get(), dv2.get()}, {causal}, {scale}),
              "");
    for (int64_t i = 0; i < B * H * S * D; ++i)
      EXPECT_NEAR(dq2->as<float>()[i], dq->as<float>()[i], 1e-6);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t kh = 0; kh < Hkv; ++kh)
        for (int64_t e = 0; e < S * D; ++e) {
          const int64_t g = (b * Hkv + kh) * S * D + e;
          const int64_t h0 = (b * H + 2 * kh) * S * D + e, h1 = h0 + S * D;
          EXPECT_NEAR(dk->as<float>()[g],
                      dk2->as<float>()[h0] + dk2->as<float>()[h1], 1e-6);
          EXPECT_NEAR(dv->as<float>()[g],
                      dv2->as<float>()[h0] + dv2->as<float>()[h1], 1e-6);
        }
    // Outputs the compiler does not need may be NULL.
    EXPECT_EQ(call(spw_op_attention_grad,
                   {tq.get(), tk.get(), tv.get(), dy.get()},
                   {nullptr, dk.get(), nullptr}, {causal}, {scale}),
              "");
  }
  auto dq = make(SPW_F32, qd), dk = make(SPW_F32, kd), dv = make(SPW_F32, kd);
  auto tq = f32(qd, q), tk = f32(kd, k), tv = f32(kd, v);
  auto dybad = make(SPW_F32, kd);
  EXPECT_ERR(call(spw_op_attention_grad,
                  {tq.get(), tk.get(), tv.get(), dybad.get()},
                  {dq.get(), dk.get(), dv.get()}, {0}, {scale}),
             "attention_grad: dy is f32 [2,2,4,3], but q is f32 [2,4,4,3]");
  EXPECT_ERR(call(spw_op_attention_grad, {tq.get(), tk.get(), tv.get(), tq.get()},
                  {dq.get(), dq.get(), dv.get()}, {0}, {scale}),
             "dk is f32 [2,4,4,3], but k is f32 [2,2,4,3]");
}

// ---- special values (NaN, +-Inf, -0) ------------------------------------------
//
// test/e2e/special-values.test checks the forward kernels against
// onnxruntime through a compiled model; these check what a model cannot
// reach: the backward kernels, which must pass a NaN on (a NaN input never
// gives a silently finite gradient), and the sign bits of the forward fixes.

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

bool bits_equal(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

TEST(SpecialValues, ReluKeepsNaNAndNegativeZero) {
  auto x = f32({6}, {kNaN, kInf, -kInf, -0.0f, 0.0f, -3.0f});
  auto y = make(SPW_F32, {6});
  ASSERT_EQ(call(spw_op_relu, {x.get()}, {y.get()}), "");
  const float *p = y->as<float>();
  EXPECT_TRUE(std::isnan(p[0]));
  EXPECT_EQ(p[1], kInf);
  EXPECT_TRUE(bits_equal(p[2], 0.0f));
  EXPECT_TRUE(bits_equal(p[3], -0.0f)); // max(-0, 0) is x, as onnxruntime
  EXPECT_TRUE(bits_equal(p[4], 0.0f));
  EXPECT_TRUE(bits_equal(p[5], 0.0f));
}

TEST(SpecialValues, NegFlipsTheSignOfZero) {
  auto x = f32({3}, {0.0f, -0.0f, kNaN}), y = make(SPW_F32, {3});
  ASSERT_EQ(call(spw_op_neg, {x.get()}, {y.get()}), "");
  EXPECT_TRUE(bits_equal(y->as<float>()[0], -0.0f));
  EXPECT_TRUE(bits_equal(y->as<float>()[1], 0.0f));
  EXPECT_TRUE(std::isnan(y->as<float>()[2]));
}

TEST(SpecialValues, SumOfNegativeZerosIsNegativeZero) {
  auto x = f32({3, 2}, {-0.0f, -0.0f, -0.0f, 0.0f, kInf, -kInf});
  auto y = make(SPW_F32, {3});
  for (Kernel k : {spw_op_reduce_sum, spw_op_reduce_mean}) {
    ASSERT_EQ(call(k, {x.get()}, {y.get()}, {1, 1}), "");
    EXPECT_TRUE(bits_equal(y->as<float>()[0], -0.0f));
    EXPECT_TRUE(bits_equal(y->as<float>()[1], 0.0f));
    EXPECT_TRUE(std::isnan(y->as<float>()[2]));
  }
  // sum_to_shape (the gradient of a broadcast) sums the same way.
  auto x2 = f32({2, 2}, {-0.0f, -0.0f, -0.0f, 0.0f}), col = make(SPW_F32, {1, 2});
  ASSERT_EQ(call(spw_op_sum_to_shape, {x2.get()}, {col.get()}), "");
  EXPECT_TRUE(bits_equal(col->as<float>()[0], -0.0f));
  EXPECT_TRUE(bits_equal(col->as<float>()[1], 0.0f));
}

TEST(SpecialValues, ReduceMaxPropagatesNaNAnywhere) {
  auto x = f32({3, 3}, {kNaN, 1, 2, 1, 2, kNaN, -kInf, kInf, 1});
  auto y = make(SPW_F32, {3});
  ASSERT_EQ(call(spw_op_reduce_max, {x.get()}, {y.get()}, {1, 1}), "");
  EXPECT_TRUE(std::isnan(y->as<float>()[0]));
  EXPECT_TRUE(std::isnan(y->as<float>()[1]));
  EXPECT_EQ(y->as<float>()[2], kInf);
}

TEST(SpecialValues, GemmWithBetaZeroDoesNotReadC) {
  auto a = f32({1, 2}, {1, 2}), b = f32({2, 2}, {1, 0, 0, 1});
  auto c = f32({2}, {kNaN, kInf}), y = make(SPW_F32, {1, 2});
  ASSERT_EQ(call(spw_op_gemm, {a.get(), b.get(), c.get()}, {y.get()}, {0, 0},
                 {1.0, 0.0}),
            "");
  EXPECT_EQ(values(*y), (std::vector<float>{1, 2})); // not 0 * NaN, 0 * inf
  ASSERT_EQ(call(spw_op_gemm, {a.get(), b.get(), c.get()}, {y.get()}, {0, 0},
                 {1.0, 1.0}),
            "");
  EXPECT_TRUE(std::isnan(y->as<float>()[0])); // beta = 1 reads them
  EXPECT_EQ(y->as<float>()[1], kInf);
}

TEST(SpecialValues, ReluGradPropagatesNaN) {
  // x NaN (dy finite), x < 0 with dy NaN, x > 0 with dy NaN, x = -0, x < 0.
  auto x = f32({5}, {kNaN, -1.0f, 2.0f, -0.0f, -kInf});
  auto dy = f32({5}, {0.5f, kNaN, kNaN, 3.0f, kInf});
  auto dx = make(SPW_F32, {5});
  ASSERT_EQ(call(spw_op_relu_grad, {x.get(), dy.get()}, {dx.get()}), "");
  const float *p = dx->as<float>();
  EXPECT_TRUE(std::isnan(p[0]));
  EXPECT_TRUE(std::isnan(p[1]));
  EXPECT_TRUE(std::isnan(p[2]));
  EXPECT_EQ(p[3], 0.0f);
  EXPECT_EQ(p[4], 0.0f); // a select, not dy * 0
}

// Every element of `t` in [begin, end) is NaN.
void expect_nan(const spw_tensor &t, int64_t begin, int64_t end,
                const char *what) {
  for (int64_t i = begin; i < end; ++i)
    EXPECT_TRUE(std::isnan(t.as<float>()[i]))
        << what << " element " << i << " is " << t.as<float>()[i];
}

TEST(SpecialValues, ElementwiseGradsPropagateNaN) {
  auto x = f32({3}, {kNaN, 0.5f, -1.0f}), dy = f32({3}, {1.0f, kNaN, 2.0f});
  auto dx = make(SPW_F32, {3});
  ASSERT_EQ(call(spw_op_tanh_grad, {x.get(), dy.get()}, {dx.get()}), "");
  expect_nan(*dx, 0, 2, "tanh_grad");
  ASSERT_EQ(call(spw_op_silu_grad, {x.get(), dy.get()}, {dx.get()}), "");
  expect_nan(*dx, 0, 2, "silu_grad");
  for (int64_t approx : {0, 1}) {
    ASSERT_EQ(call(spw_op_gelu_grad, {x.get(), dy.get()}, {dx.get()}, {approx}),
              "");
    expect_nan(*dx, 0, 2, "gelu_grad");
  }
  auto r = f32({1, 4}, {kNaN, 1, 2, 3}), dr = make(SPW_F32, {1, 4});
  auto cc = f32({4}, {1, 1, 1, 1}), ss = f32({4}, {1, 1, 1, 1});
  ASSERT_EQ(call(spw_op_rope_grad, {r.get(), cc.get(), ss.get()}, {dr.get()}),
            "");
  EXPECT_TRUE(std::isnan(dr->as<float>()[0])); // dy[0] cos[0]
  EXPECT_TRUE(std::isnan(dr->as<float>()[2])); // and its rotated partner
}

TEST(SpecialValues, RowGradsPropagateNaN) {
  // Row 0 holds a NaN, row 1 is ordinary: row 0's gradient is NaN, row 1's
  // finite.
  auto x = f32({2, 3}, {kNaN, 1, 2, 0.5f, -1, 2});
  auto dy = f32({2, 3}, {1, -1, 0.5f, 0.25f, 1, -2});
  auto scale = f32({3}, {1, 2, 3});
  auto dx = make(SPW_F32, {2, 3}), ds = make(SPW_F32, {3}),
       db = make(SPW_F32, {3});
  auto finite_row1 = [&](const spw_tensor &t, const char *what) {
    for (int64_t i = 3; i < 6; ++i)
      EXPECT_TRUE(std::isfinite(t.as<float>()[i])) << what << " element " << i;
  };
  ASSERT_EQ(call(spw_op_softmax, {x.get()}, {dx.get()}, {1}), "");
  auto y = f32({2, 3}, values(*dx)), dsm = make(SPW_F32, {2, 3});
  ASSERT_EQ(call(spw_op_softmax_grad, {y.get(), dy.get()}, {dsm.get()}, {1}), "");
  expect_nan(*dsm, 0, 3, "softmax_grad");
  finite_row1(*dsm, "softmax_grad");
  ASSERT_EQ(call(spw_op_layer_norm_grad, {x.get(), scale.get(), dy.get()},
                 {dx.get(), ds.get(), db.get()}, {1}, {1e-5}),
            "");
  expect_nan(*dx, 0, 3, "layer_norm_grad dx");
  finite_row1(*dx, "layer_norm_grad dx");
  expect_nan(*ds, 0, 3, "layer_norm_grad dscale");
  ASSERT_EQ(call(spw_op_rms_norm_grad, {x.get(), scale.get(), dy.get()},
                 {dx.get(), ds.get()}, {1}, {1e-5}),
            "");
  expect_nan(*dx, 0, 3, "rms_norm_grad dx");
  finite_row1(*dx, "rms_norm_grad dx");
  expect_nan(*ds, 0, 3, "rms_norm_grad dscale");
  auto labels = i64({2}, {1, 2}), dloss = f32({}, {1.0f});
  ASSERT_EQ(call(spw_op_softmax_cross_entropy_loss_grad,
                 {x.get(), labels.get(), dloss.get()}, {dx.get()}, {1, 0, 0}),
            "");
  expect_nan(*dx, 0, 3, "softmax_cross_entropy_loss_grad");
  finite_row1(*dx, "softmax_cross_entropy_loss_grad");
  // gather_grad and slice_grad move dy: a NaN lands where it belongs.
  auto idx = i64({2}, {1, 1}), dd = make(SPW_F32, {3, 3});
  ASSERT_EQ(call(spw_op_gather_grad, {idx.get(), x.get()}, {dd.get()}, {0}), "");
  expect_nan(*dd, 3, 4, "gather_grad");
  ASSERT_EQ(call(spw_op_slice_grad, {x.get()}, {dd.get()}, {0, 0, 1, 1}), "");
  expect_nan(*dd, 0, 1, "slice_grad");
}

TEST(SpecialValues, AttentionGradPropagatesNaN) {
  // Query row 0 holds a NaN (causal: it sees key 0 only): its output, its dq
  // and the dk, dv of key 0 are NaN.
  const std::vector<int64_t> d = {1, 1, 3, 2};
  auto q = f32(d, {kNaN, 0, 1, 0, 0.5f, 1}), k = f32(d, {1, 0, 0, 1, 1, 1});
  auto v = f32(d, {1, 2, 3, 4, 5, 6}), dy = f32(d, {1, 1, 1, 1, 1, 1});
  auto y = make(SPW_F32, d), dq = make(SPW_F32, d), dk = make(SPW_F32, d),
       dv = make(SPW_F32, d);
  ASSERT_EQ(call(spw_op_attention, {q.get(), k.get(), v.get()}, {y.get()}, {1},
                 {1.0}),
            "");
  expect_nan(*y, 0, 2, "attention y");
  ASSERT_EQ(call(spw_op_attention_grad, {q.get(), k.get(), v.get(), dy.get()},
                 {dq.get(), dk.get(), dv.get()}, {1}, {1.0}),
            "");
  expect_nan(*dq, 0, 2, "attention_grad dq");
  expect_nan(*dk, 0, 2, "attention_grad dk"); // key 0 is seen by row 0
  expect_nan(*dv, 0, 2, "attention_grad dv");
}

} // namespace
