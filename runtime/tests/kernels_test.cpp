//===- kernels_test.cpp - CPU kernels against naive references and FD -----===//

#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

using namespace spwtest;

namespace {

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

} // namespace
