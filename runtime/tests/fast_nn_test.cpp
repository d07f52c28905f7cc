//===- fast_nn_test.cpp - fast row and elementwise kernels vs reference ---===//
//
// The fast kernels (float math, vmath polynomials, threaded) against the
// reference kernels (double) on awkward sizes and special values, their
// determinism, and the kernels whose fast path must give identical bits.

#include "cpu/parallel.h"
#include "cpu/vmath.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

using namespace spwtest;
using spw::cpu::KernelSet;
using spw::cpu::testing::ScopedKernelSet;
using spw::cpu::testing::ScopedThreads;

namespace {

// Runs k with the given kernel set on fresh outputs of the given shapes.
std::vector<Tensor> run(KernelSet set, Kernel k, std::vector<spw_tensor *> ins,
                        const std::vector<std::vector<int64_t>> &out_shapes,
                        std::vector<int64_t> ia = {},
                        std::vector<double> fa = {}) {
  ScopedKernelSet guard(set);
  std::vector<Tensor> outs;
  std::vector<spw_tensor *> po;
  for (auto &s : out_shapes) {
    outs.push_back(make(SPW_F32, s));
    std::memset(outs.back()->data, 0x7f, size_t(outs.back()->numel) * 4);
    po.push_back(outs.back().get());
  }
  auto ctx = spw::make_context();
  k(ctx.get(), ins.data(), po.data(), ia.empty() ? nullptr : ia.data(),
    fa.empty() ? nullptr : fa.data());
  EXPECT_EQ(ctx->error, "");
  return outs;
}

bool same_bits(const spw_tensor &a, const spw_tensor &b) {
  return a.numel == b.numel &&
         std::memcmp(a.data, b.data, size_t(a.numel) * 4) == 0;
}

// |fast - ref| <= rel |ref| + abs_tol, NaN where the reference is NaN,
// equal infinities. Returns the number of mismatches (first few reported).
int64_t compare(const spw_tensor &fast, const spw_tensor &ref, double rel,
                double abs_tol, const char *what) {
  int64_t bad = 0;
  for (int64_t i = 0; i < ref.numel; ++i) {
    const double f = fast.as<float>()[i], r = ref.as<float>()[i];
    bool ok = std::isnan(r) ? std::isnan(f)
              : std::isinf(r) ? f == r
                              : std::fabs(f - r) <= rel * std::fabs(r) + abs_tol;
    if (!ok && bad++ < 5)
      ADD_FAILURE() << what << " element " << i << ": fast " << f << " ref "
                    << r;
  }
  return bad;
}

std::vector<int64_t> labels_for(int64_t N, int64_t C, uint64_t seed,
                                int64_t ignore) {
  auto r = randoms(size_t(N), seed, 0.0f, 1.0f);
  std::vector<int64_t> l(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i)
    l[size_t(i)] = (i % 5 == 3) ? ignore
                                : std::min<int64_t>(C - 1, int64_t(r[size_t(i)] * C));
  return l;
}

// ---- cross entropy ---------------------------------------------------------------

// Loss: per-row float exp sums (16 lanes, ~1e-7 relative) and log in
// double: 1e-5 relative of the mean loss. Grad: exp_f is a few ulp and the
// row sum ~1e-7 relative, so 1e-5 relative per element (plus 1e-12 for
// the underflowing tail).
void check_xent(int64_t N, int64_t C, float lo, float hi, uint64_t seed,
                bool with_masks) {
  auto x = randoms(size_t(N * C), seed, lo, hi);
  if (with_masks)
    for (size_t i = 0; i < x.size(); i += 7)
      x[i] = -INFINITY;
  auto logits = f32({N, C}, x);
  auto lab = labels_for(N, C, seed + 1, -100);
  if (with_masks) // a label never sits on a -inf logit
    for (int64_t i = 0; i < N; ++i)
      if (lab[size_t(i)] >= 0 && (i * C + lab[size_t(i)]) % 7 == 0)
        lab[size_t(i)] = (lab[size_t(i)] + 1) % C;
  if (C == 1 && with_masks)
    return;
  auto labels = i64({N}, lab);
  auto dloss = f32({}, {1.5f});
  for (int64_t red : {0, 1}) {
    std::vector<int64_t> ia = {red, 1, -100};
    auto rf = run(KernelSet::Fast, spw_op_softmax_cross_entropy_loss,
                  {logits.get(), labels.get()}, {{}}, ia);
    auto rr = run(KernelSet::Reference, spw_op_softmax_cross_entropy_loss,
                  {logits.get(), labels.get()}, {{}}, ia);
    EXPECT_EQ(compare(*rf[0], *rr[0], 1e-5, 1e-7, "loss"), 0)
        << N << "x" << C << " reduction " << red;
    auto gf = run(KernelSet::Fast, spw_op_softmax_cross_entropy_loss_grad,
                  {logits.get(), labels.get(), dloss.get()}, {{N, C}}, ia);
    auto gr = run(KernelSet::Reference, spw_op_softmax_cross_entropy_loss_grad,
                  {logits.get(), labels.get(), dloss.get()}, {{N, C}}, ia);
    EXPECT_EQ(compare(*gf[0], *gr[0], 1e-5, 1e-12, "dlogits"), 0)
        << N << "x" << C << " reduction " << red;
  }
}

// exp_f's special arguments (a NaN logit reaches it from the cross-entropy
// of weights holding NaN: the weights fuzzer's crash, a NaN converted to
// int under UBSan).
TEST(FastNN, ExpOfSpecialValues) {
  using spw::cpu::vmath::exp_f;
  EXPECT_TRUE(std::isnan(exp_f(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(exp_f(-std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(exp_f(std::numeric_limits<float>::infinity()),
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(exp_f(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(exp_f(0.0f), 1.0f);
  EXPECT_NEAR(exp_f(1.0f), std::exp(1.0f), 2e-7f * std::exp(1.0f));
}

TEST(FastNN, CrossEntropyMatchesReference) {
  check_xent(1, 1, -1, 1, 1, false);
  check_xent(1, 7, -3, 3, 2, false);
  check_xent(3, 384, -5, 5, 3, false);
  check_xent(1000, 7, -2, 2, 4, false);
  check_xent(37, 8193, -4, 4, 5, false);
}

TEST(FastNN, CrossEntropyLargeLogitsAndMasks) {
  check_xent(17, 8193, -80, 80, 6, false);
  check_xent(9, 385, -80, 80, 7, true);
  check_xent(5, 1000, 0, 0, 8, false); // all zeros: uniform softmax
}

TEST(FastNN, CrossEntropyAllIgnoredIsNaNAndZeroGrad) {
  auto logits = f32({3, 16}, randoms(48, 9));
  auto labels = i64({3}, {-100, -100, -100});
  auto dloss = f32({}, {1.0f});
  std::vector<int64_t> ia = {0, 1, -100};
  auto l = run(KernelSet::Fast, spw_op_softmax_cross_entropy_loss,
               {logits.get(), labels.get()}, {{}}, ia);
  EXPECT_TRUE(std::isnan(l[0]->as<float>()[0]));
  auto g = run(KernelSet::Fast, spw_op_softmax_cross_entropy_loss_grad,
               {logits.get(), labels.get(), dloss.get()}, {{3, 16}}, ia);
  for (float v : values(*g[0]))
    EXPECT_EQ(v, 0.0f);
}

TEST(FastNN, CrossEntropyKeepsChecks) {
  ScopedKernelSet fast(KernelSet::Fast);
  auto logits = f32({2, 4}, randoms(8, 10));
  auto labels = i64({2}, {1, 4});
  auto y = make(SPW_F32, {});
  std::string err = call(spw_op_softmax_cross_entropy_loss,
                         {logits.get(), labels.get()}, {y.get()}, {0, 0, 0});
  EXPECT_NE(err.find("out of range"), std::string::npos) << err;
}

TEST(FastNN, CrossEntropyDeterministicAndFastPathTaken) {
  const int64_t N = 64, C = 8193;
  auto logits = f32({N, C}, randoms(size_t(N * C), 11, -6, 6));
  auto labels = i64({N}, labels_for(N, C, 12, -100));
  auto dloss = f32({}, {1.0f});
  std::vector<int64_t> ia = {0, 1, -100};
  auto g1 = run(KernelSet::Fast, spw_op_softmax_cross_entropy_loss_grad,
                {logits.get(), labels.get(), dloss.get()}, {{N, C}}, ia);
  auto g2 = run(KernelSet::Fast, spw_op_softmax_cross_entropy_loss_grad,
                {logits.get(), labels.get(), dloss.get()}, {{N, C}}, ia);
  EXPECT_TRUE(same_bits(*g1[0], *g2[0]));
  std::vector<Tensor> t1, t2;
  {
    ScopedThreads one(1);
    t1 = run(KernelSet::Fast, spw_op_softmax_cross_entropy_loss,
             {logits.get(), labels.get()}, {{}}, ia);
  }
  {
    ScopedThreads two(2);
    t2 = run(KernelSet::Fast, spw_op_softmax_cross_entropy_loss,
             {logits.get(), labels.get()}, {{}}, ia);
  }
  // Per-row losses and a row-order sum: the thread count does not matter.
  EXPECT_TRUE(same_bits(*t1[0], *t2[0]));
  // Float exp: some element differs from the double reference in its bits
  // (this fails if the fast set ran the reference code).
  auto gr = run(KernelSet::Reference, spw_op_softmax_cross_entropy_loss_grad,
                {logits.get(), labels.get(), dloss.get()}, {{N, C}}, ia);
  EXPECT_FALSE(same_bits(*g1[0], *gr[0]));
}

// ---- layer norm ------------------------------------------------------------------

// Statistics in double, the row in float: y within a few ulp of the
// reference's double (1e-5 relative + 1e-6 absolute near zero crossings).
// Grads: float row sums (16 lanes), 1e-4 relative of the row's largest
// |dx| for dx (a difference of sums), 1e-5 relative for dscale/dbias
// (double column sums of float products).
void check_layer_norm(int64_t rows, int64_t n, bool bias, uint64_t seed) {
  auto x = f32({rows, n}, randoms(size_t(rows * n), seed, -3, 5));
  auto s = f32({n}, randoms(size_t(n), seed + 1, 0.5, 1.5));
  auto b = f32({n}, randoms(size_t(n), seed + 2));
  auto dy = f32({rows, n}, randoms(size_t(rows * n), seed + 3));
  std::vector<int64_t> ia = {1};
  std::vector<double> fa = {1e-5};
  auto yf = run(KernelSet::Fast, spw_op_layer_norm,
                {x.get(), s.get(), bias ? b.get() : nullptr}, {{rows, n}}, ia, fa);
  auto yr = run(KernelSet::Reference, spw_op_layer_norm,
                {x.get(), s.get(), bias ? b.get() : nullptr}, {{rows, n}}, ia, fa);
  EXPECT_EQ(compare(*yf[0], *yr[0], 1e-5, 1e-6, "layer_norm y"), 0)
      << rows << "x" << n;
  auto gf = run(KernelSet::Fast, spw_op_layer_norm_grad,
                {x.get(), s.get(), dy.get()}, {{rows, n}, {n}, {n}}, ia, fa);
  auto gr = run(KernelSet::Reference, spw_op_layer_norm_grad,
                {x.get(), s.get(), dy.get()}, {{rows, n}, {n}, {n}}, ia, fa);
  double mx = 0;
  for (float v : values(*gr[0]))
    mx = std::max(mx, double(std::fabs(v)));
  EXPECT_EQ(compare(*gf[0], *gr[0], 1e-5, 1e-4 * mx + 1e-7, "dx"), 0);
  EXPECT_EQ(compare(*gf[1], *gr[1], 1e-5, 1e-5, "dscale"), 0);
  EXPECT_EQ(compare(*gf[2], *gr[2], 1e-5, 1e-5, "dbias"), 0);
}

TEST(FastNN, LayerNormMatchesReference) {
  check_layer_norm(1, 1, true, 20);
  check_layer_norm(3, 7, false, 21);
  check_layer_norm(1000, 7, true, 22);
  check_layer_norm(3, 384, true, 23);
  check_layer_norm(5, 8193, false, 24);
  check_layer_norm(130, 768, true, 25);
}

TEST(FastNN, LayerNormDeterministicAcrossThreads) {
  const int64_t rows = 200, n = 384;
  auto x = f32({rows, n}, randoms(size_t(rows * n), 30, -2, 2));
  auto s = f32({n}, randoms(size_t(n), 31));
  auto dy = f32({rows, n}, randoms(size_t(rows * n), 32));
  std::vector<int64_t> ia = {1};
  std::vector<double> fa = {1e-5};
  std::vector<Tensor> a, b;
  {
    ScopedThreads one(1);
    a = run(KernelSet::Fast, spw_op_layer_norm_grad,
            {x.get(), s.get(), dy.get()}, {{rows, n}, {n}, {n}}, ia, fa);
  }
  {
    ScopedThreads two(2);
    b = run(KernelSet::Fast, spw_op_layer_norm_grad,
            {x.get(), s.get(), dy.get()}, {{rows, n}, {n}, {n}}, ia, fa);
  }
  // Rows and columns each within one chunk, sums in a fixed order.
  for (int k = 0; k < 3; ++k)
    EXPECT_TRUE(same_bits(*a[size_t(k)], *b[size_t(k)])) << k;
  auto r = run(KernelSet::Reference, spw_op_layer_norm_grad,
               {x.get(), s.get(), dy.get()}, {{rows, n}, {n}, {n}}, ia, fa);
  EXPECT_FALSE(same_bits(*a[0], *r[0])); // the float path ran
}

// ---- softmax, rms norm --------------------------------------------------------------

// Softmax: exp_f few ulp, sums ~1e-7 relative: 1e-5 relative (1e-12
// absolute for the underflowing tail). Grad: y (dy - dot) with dot a float
// sum: 1e-5 relative plus 1e-6 of the row scale for the cancellation.
void check_softmax(std::vector<int64_t> dims, int64_t axis, float lo, float hi,
                   uint64_t seed) {
  int64_t n = 1;
  for (int64_t d : dims)
    n *= d;
  auto x = f32(dims, randoms(size_t(n), seed, lo, hi));
  auto dy = f32(dims, randoms(size_t(n), seed + 1));
  auto yf = run(KernelSet::Fast, spw_op_softmax, {x.get()}, {dims}, {axis});
  auto yr = run(KernelSet::Reference, spw_op_softmax, {x.get()}, {dims}, {axis});
  EXPECT_EQ(compare(*yf[0], *yr[0], 1e-5, 1e-12, "softmax"), 0) << axis;
  auto gf = run(KernelSet::Fast, spw_op_softmax_grad, {yr[0].get(), dy.get()},
                {dims}, {axis});
  auto gr = run(KernelSet::Reference, spw_op_softmax_grad,
                {yr[0].get(), dy.get()}, {dims}, {axis});
  EXPECT_EQ(compare(*gf[0], *gr[0], 1e-5, 1e-6, "softmax_grad"), 0) << axis;
}

TEST(FastNN, SoftmaxMatchesReference) {
  check_softmax({1, 1}, 1, -1, 1, 70);
  check_softmax({3, 7}, 1, -3, 3, 71);
  check_softmax({1000, 7}, 1, -3, 3, 72);
  check_softmax({3, 8193}, 1, -80, 80, 73);
  check_softmax({4, 384, 5}, 1, -5, 5, 74); // inner axis != last
  check_softmax({3, 7, 17}, 0, -5, 5, 75);
}

TEST(FastNN, SoftmaxMaskedRows) {
  std::vector<float> v = randoms(2 * 33, 76, -4, 4);
  for (int i = 0; i < 33; i += 2)
    v[size_t(i)] = -INFINITY;
  auto x = f32({2, 33}, v);
  auto yf = run(KernelSet::Fast, spw_op_softmax, {x.get()}, {{2, 33}}, {1});
  auto yr = run(KernelSet::Reference, spw_op_softmax, {x.get()}, {{2, 33}}, {1});
  EXPECT_EQ(compare(*yf[0], *yr[0], 1e-5, 0, "masked softmax"), 0);
  for (int i = 0; i < 33; i += 2)
    EXPECT_EQ(yf[0]->as<float>()[i], 0.0f);
}

void check_rms_norm(int64_t rows, int64_t n, uint64_t seed) {
  auto x = f32({rows, n}, randoms(size_t(rows * n), seed, -3, 3));
  auto s = f32({n}, randoms(size_t(n), seed + 1, 0.5, 1.5));
  auto dy = f32({rows, n}, randoms(size_t(rows * n), seed + 2));
  std::vector<int64_t> ia = {1};
  std::vector<double> fa = {1e-6};
  auto yf = run(KernelSet::Fast, spw_op_rms_norm, {x.get(), s.get()},
                {{rows, n}}, ia, fa);
  auto yr = run(KernelSet::Reference, spw_op_rms_norm, {x.get(), s.get()},
                {{rows, n}}, ia, fa);
  // Double sum of squares, the row in float: a few ulp.
  EXPECT_EQ(compare(*yf[0], *yr[0], 1e-5, 0, "rms_norm"), 0);
  auto gf = run(KernelSet::Fast, spw_op_rms_norm_grad,
                {x.get(), s.get(), dy.get()}, {{rows, n}, {n}}, ia, fa);
  auto gr = run(KernelSet::Reference, spw_op_rms_norm_grad,
                {x.get(), s.get(), dy.get()}, {{rows, n}, {n}}, ia, fa);
  double mx = 0;
  for (float v : values(*gr[0]))
    mx = std::max(mx, double(std::fabs(v)));
  // dx is a difference (float dot): 1e-4 of the row's largest |dx|.
  EXPECT_EQ(compare(*gf[0], *gr[0], 1e-5, 1e-4 * mx + 1e-7, "dx"), 0);
  EXPECT_EQ(compare(*gf[1], *gr[1], 1e-5, 1e-5, "dscale"), 0);
}

TEST(FastNN, RmsNormMatchesReference) {
  check_rms_norm(1, 1, 80);
  check_rms_norm(3, 7, 81);
  check_rms_norm(1000, 7, 82);
  check_rms_norm(5, 8193, 83);
  check_rms_norm(130, 384, 84);
}

TEST(FastNN, SoftmaxAndRmsNormFastPathTaken) {
  const int64_t r = 50, n = 1000;
  auto x = f32({r, n}, randoms(size_t(r * n), 90, -6, 6));
  auto s = f32({n}, randoms(size_t(n), 91));
  auto a = run(KernelSet::Fast, spw_op_softmax, {x.get()}, {{r, n}}, {1});
  auto b = run(KernelSet::Fast, spw_op_softmax, {x.get()}, {{r, n}}, {1});
  auto c = run(KernelSet::Reference, spw_op_softmax, {x.get()}, {{r, n}}, {1});
  EXPECT_TRUE(same_bits(*a[0], *b[0]));
  EXPECT_FALSE(same_bits(*a[0], *c[0]));
  auto d = run(KernelSet::Fast, spw_op_rms_norm, {x.get(), s.get()}, {{r, n}},
               {1}, {1e-6});
  auto e = run(KernelSet::Reference, spw_op_rms_norm, {x.get(), s.get()},
               {{r, n}}, {1}, {1e-6});
  EXPECT_FALSE(same_bits(*d[0], *e[0]));
}

// ---- gelu --------------------------------------------------------------------------

// erfc_f/exp_f are ~1e-7 relative: 1e-5 relative covers them with margin.
// gelu'(x) crosses zero near x = -0.75 (cancellation of cdf + x pdf), so
// the grad also gets 1e-6 absolute per unit dy. The reference's
// 0.5 x (1 + erf) (or 1 + tanh) cancels in double for x < -5: its own
// absolute error there is ~|x| 2^-53 (it gives -0 where gelu is ~1e-30),
// while the fast form (erfc, 1/(1+e^-2u)) stays relative-accurate; so
// 2e-14 absolute for y.
void check_gelu(int64_t n, float lo, float hi, uint64_t seed) {
  auto x = f32({n}, randoms(size_t(n), seed, lo, hi));
  auto dy = f32({n}, randoms(size_t(n), seed + 1));
  for (int64_t approx : {0, 1}) {
    std::vector<int64_t> ia = {approx};
    auto yf = run(KernelSet::Fast, spw_op_gelu, {x.get()}, {{n}}, ia);
    auto yr = run(KernelSet::Reference, spw_op_gelu, {x.get()}, {{n}}, ia);
    EXPECT_EQ(compare(*yf[0], *yr[0], 1e-5, 2e-14, "gelu"), 0) << approx;
    auto gf = run(KernelSet::Fast, spw_op_gelu_grad, {x.get(), dy.get()},
                  {{n}}, ia);
    auto gr = run(KernelSet::Reference, spw_op_gelu_grad, {x.get(), dy.get()},
                  {{n}}, ia);
    EXPECT_EQ(compare(*gf[0], *gr[0], 1e-5, 1e-6, "gelu_grad"), 0) << approx;
  }
}

TEST(FastElementwise, GeluMatchesReference) {
  check_gelu(1, -1, 1, 40);
  check_gelu(7, -3, 3, 41);
  check_gelu(8193, -6, 6, 42);
  check_gelu(100000, -12, 12, 43);
  auto special = f32({6}, {0.0f, -0.0f, 80.0f, -80.0f, INFINITY, -INFINITY});
  auto f = run(KernelSet::Fast, spw_op_gelu, {special.get()}, {{6}}, {0});
  auto r = run(KernelSet::Reference, spw_op_gelu, {special.get()}, {{6}}, {0});
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(f[0]->as<float>()[i], r[0]->as<float>()[i]) << i;
  EXPECT_EQ(f[0]->as<float>()[4], INFINITY);
}

TEST(FastElementwise, GeluFastPathTakenAndDeterministic) {
  const int64_t n = 100000;
  auto x = f32({n}, randoms(size_t(n), 50, -5, 5));
  auto a = run(KernelSet::Fast, spw_op_gelu, {x.get()}, {{n}}, {0});
  std::vector<Tensor> b;
  {
    ScopedThreads one(1);
    b = run(KernelSet::Fast, spw_op_gelu, {x.get()}, {{n}}, {0});
  }
  EXPECT_TRUE(same_bits(*a[0], *b[0])); // elementwise: any cut, same bits
  auto r = run(KernelSet::Reference, spw_op_gelu, {x.get()}, {{n}}, {0});
  EXPECT_FALSE(same_bits(*a[0], *r[0]));
}

// ---- the threaded generic helpers: identical bits -------------------------------

TEST(FastElementwise, ThreadedHelpersGiveReferenceBits) {
  const int64_t n = 70001; // several chunks, an odd tail
  auto a = f32({n}, randoms(size_t(n), 60, -3, 3));
  auto b = f32({n}, randoms(size_t(n), 61, -3, 3));
  for (Kernel k : {spw_op_add, spw_op_sub, spw_op_mul, spw_op_div}) {
    auto f = run(KernelSet::Fast, k, {a.get(), b.get()}, {{n}});
    auto r = run(KernelSet::Reference, k, {a.get(), b.get()}, {{n}});
    EXPECT_TRUE(same_bits(*f[0], *r[0]));
  }
  for (Kernel k : {spw_op_relu, spw_op_tanh, spw_op_exp, spw_op_sigmoid,
                   spw_op_silu}) {
    auto f = run(KernelSet::Fast, k, {a.get()}, {{n}});
    auto r = run(KernelSet::Reference, k, {a.get()}, {{n}});
    EXPECT_TRUE(same_bits(*f[0], *r[0]));
  }
  for (Kernel k : {spw_op_relu_grad, spw_op_tanh_grad, spw_op_silu_grad}) {
    auto f = run(KernelSet::Fast, k, {a.get(), b.get()}, {{n}});
    auto r = run(KernelSet::Reference, k, {a.get(), b.get()}, {{n}});
    EXPECT_TRUE(same_bits(*f[0], *r[0]));
  }
}

TEST(FastElementwise, IntegerDivisionByZeroStillFails) {
  ScopedKernelSet fast(KernelSet::Fast);
  const int64_t n = 50000;
  std::vector<int64_t> va(size_t(n), 7), vb(size_t(n), 1);
  vb[size_t(n - 3)] = 0; // in the last chunk
  auto a = i64({n}, va), b = i64({n}, vb);
  auto y = make(SPW_I64, {n});
  std::string err = call(spw_op_div, {a.get(), b.get()}, {y.get()});
  EXPECT_NE(err.find("integer division by zero"), std::string::npos) << err;
}

} // namespace

namespace {

// Broadcasting helpers threaded over the rows of the result: the same
// element operations, so identical bits and identical first errors.
TEST(FastElementwise, ThreadedBroadcastGivesReferenceBits) {
  auto a = f32({64, 1, 301}, randoms(64 * 301, 100, -2, 2));
  auto b = f32({33, 1}, randoms(33, 101, 0.5, 2));
  const std::vector<int64_t> ys = {64, 33, 301};
  for (Kernel k : {spw_op_add, spw_op_div, spw_op_pow}) {
    auto f = run(KernelSet::Fast, k, {a.get(), b.get()}, {ys});
    auto r = run(KernelSet::Reference, k, {a.get(), b.get()}, {ys});
    EXPECT_TRUE(same_bits(*f[0], *r[0]));
  }
  // where and a comparison (bool results) on a [N,1] x [1,M] broadcast.
  auto c = f32({700, 1}, randoms(700, 102)), d = f32({1, 41}, randoms(41, 103));
  std::vector<Tensor> cmp;
  for (KernelSet set : {KernelSet::Fast, KernelSet::Reference}) {
    ScopedKernelSet g(set);
    cmp.push_back(make(SPW_BOOL, {700, 41}));
    ASSERT_EQ(call(spw_op_less, {c.get(), d.get()}, {cmp.back().get()}), "");
  }
  EXPECT_EQ(std::memcmp(cmp[0]->data, cmp[1]->data, 700 * 41), 0);
  auto wf = run(KernelSet::Fast, spw_op_where, {cmp[1].get(), c.get(), d.get()},
                {{700, 41}});
  auto wr = run(KernelSet::Reference, spw_op_where,
                {cmp[1].get(), c.get(), d.get()}, {{700, 41}});
  EXPECT_TRUE(same_bits(*wf[0], *wr[0]));
  auto nf = run(KernelSet::Fast, spw_op_neg, {a.get()}, {{64, 1, 301}});
  auto nr = run(KernelSet::Reference, spw_op_neg, {a.get()}, {{64, 1, 301}});
  EXPECT_TRUE(same_bits(*nf[0], *nr[0]));
}

TEST(FastElementwise, ThreadedBroadcastReportsTheFirstError) {
  const int64_t n = 40000;
  std::vector<int64_t> e(size_t(n), 2);
  e[size_t(n - 10)] = -1;
  e[size_t(n - 5)] = -3;
  auto base = i64({1}, {3}), ex = i64({n, 1}, e); // rows: several chunks
  std::string errs[2];
  int k = 0;
  for (KernelSet set : {KernelSet::Fast, KernelSet::Reference}) {
    ScopedKernelSet g(set);
    auto y = make(SPW_I64, {n, 1});
    errs[k++] = call(spw_op_pow, {base.get(), ex.get()}, {y.get()});
  }
  EXPECT_NE(errs[0].find("negative power -1"), std::string::npos) << errs[0];
  EXPECT_EQ(errs[0], errs[1]);
}

} // namespace
