// The fast CPU kernels of the GEMM and shape families, and the kernel
// threads: against the reference kernels (cpu/parallel.h).
#include "cpu/parallel.h"
#include "host_optimizer.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <stdexcept>

using namespace spwtest;
using spw::cpu::KernelSet;
using spw::cpu::testing::ScopedKernelSet;
using spw::cpu::testing::ScopedThreads;

namespace {

bool same_bits(const spw_tensor &a, const spw_tensor &b) {
  return a.bytes() == b.bytes() &&
         std::memcmp(a.data, b.data, size_t(a.bytes())) == 0;
}

// Runs `k` with each kernel set on the same inputs into fresh outputs of
// `dims`; returns {reference, fast}.
std::pair<Tensor, Tensor> both(Kernel k, std::initializer_list<spw_tensor *> ins,
                               const std::vector<int64_t> &dims,
                               std::initializer_list<int64_t> iattrs = {},
                               std::initializer_list<double> fattrs = {}) {
  auto ref = make(SPW_F32, dims), fast = make(SPW_F32, dims);
  {
    ScopedKernelSet s(KernelSet::Reference);
    EXPECT_EQ(call(k, ins, {ref.get()}, iattrs, fattrs), "");
  }
  {
    ScopedKernelSet s(KernelSet::Fast);
    EXPECT_EQ(call(k, ins, {fast.get()}, iattrs, fattrs), "");
  }
  return {std::move(ref), std::move(fast)};
}

// Float accumulation over K terms of products of values in [-1, 1): the
// error is within K * 2^-24 of the terms' magnitude sum; 1e-5 relative to
// sqrt(K) (typical) keeps the test tight enough to catch a wrong index.
void expect_close(const spw_tensor &ref, const spw_tensor &got, double tol) {
  ASSERT_EQ(ref.numel, got.numel);
  for (int64_t i = 0; i < ref.numel; ++i)
    ASSERT_NEAR(got.as<float>()[i], ref.as<float>()[i], tol) << "at " << i;
}

TEST(FastKernels, ParallelForCutsTheSameChunksAndRethrows) {
  ScopedKernelSet s(KernelSet::Fast);
  ScopedThreads t(3);
  EXPECT_EQ(spw::cpu::chunk_count(10, 4), 3);
  EXPECT_EQ(spw::cpu::chunk_count(10, 100), 1);
  std::vector<int> hits(1000, 0);
  spw::cpu::parallel_for(1000, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      ++hits[size_t(i)];
  });
  EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), 1000);
  EXPECT_THROW(spw::cpu::parallel_for(100, 1,
                                      [&](int64_t lo, int64_t) {
                                        if (lo > 0)
                                          throw std::runtime_error("chunk");
                                      }),
               std::runtime_error);
  // Nested: runs in the caller, every element once.
  std::atomic<int> nested{0};
  spw::cpu::parallel_for(4, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      spw::cpu::parallel_for(10, 1, [&](int64_t a, int64_t b) {
        nested += int(b - a);
      });
  });
  EXPECT_EQ(nested.load(), 40);
}

TEST(FastKernels, GemmShapesAndTransposesMatchTheReference) {
  for (auto [M, N, K] : {std::array<int64_t, 3>{1, 1, 1}, {3, 70, 5},
                         {130, 33, 257}, {64, 300, 64}, {7, 1, 1000}}) {
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        auto a = f32(ta ? std::vector<int64_t>{K, M} : std::vector<int64_t>{M, K},
                     randoms(size_t(M * K), 1));
        auto b = f32(tb ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N},
                     randoms(size_t(K * N), 2));
        auto c = f32({N}, randoms(size_t(N), 3));
        auto [ref, fast] = both(spw_op_gemm, {a.get(), b.get(), c.get()},
                                {M, N}, {ta, tb}, {0.5, 2.0});
        SCOPED_TRACE(::testing::Message() << M << "x" << N << "x" << K
                                          << " ta=" << ta << " tb=" << tb);
        expect_close(*ref, *fast, 1e-5 * std::sqrt(double(K)) + 1e-6);
      }
  }
}

TEST(FastKernels, BatchedMatmulAndLinearMatchTheReference) {
  auto a = f32({3, 1, 17, 40}, randoms(3 * 17 * 40, 4));
  auto b = f32({4, 40, 9}, randoms(4 * 40 * 9, 5));
  auto [ref, fast] = both(spw_op_matmul, {a.get(), b.get()}, {3, 4, 17, 9});
  expect_close(*ref, *fast, 1e-5 * std::sqrt(40.0));
  auto x = f32({2, 65, 48}, randoms(2 * 65 * 48, 6));
  auto w = f32({48, 100}, randoms(48 * 100, 7));
  auto bias = f32({100}, randoms(100, 8));
  auto [lref, lfast] = both(spw_op_linear, {x.get(), w.get(), bias.get()},
                            {2, 65, 100});
  expect_close(*lref, *lfast, 1e-5 * std::sqrt(48.0));
  // beta 0 reads no c: a NaN there stays out, as in the reference.
  auto nan_c = f32({100}, std::vector<float>(100, NAN));
  auto x2 = f32({65, 48}, randoms(65 * 48, 9));
  auto [gref, gfast] = both(spw_op_gemm, {x2.get(), w.get(), nan_c.get()},
                            {65, 100}, {0, 0}, {1.0, 0.0});
  expect_close(*gref, *gfast, 1e-4);
}

TEST(FastKernels, GemmIsDeterministicAtAThreadCount) {
  ScopedThreads t(2);
  auto a = f32({500, 300}, randoms(500 * 300, 10));
  auto b = f32({300, 200}, randoms(300 * 200, 11));
  auto [r1, f1] = both(spw_op_matmul, {a.get(), b.get()}, {500, 200});
  auto [r2, f2] = both(spw_op_matmul, {a.get(), b.get()}, {500, 200});
  EXPECT_TRUE(same_bits(*f1, *f2));
  EXPECT_TRUE(same_bits(*r1, *r2));
  // The fast path really ran: float accumulation differs from double
  // somewhere in 100k sums of 300 terms.
  EXPECT_FALSE(same_bits(*r1, *f1));
}

TEST(FastKernels, CopiesAndSumsGiveTheReferenceBits) {
  for (int threads : {1, 2, 3}) {
    ScopedThreads t(threads);
    auto x = f32({8, 128, 6, 64}, randoms(8 * 128 * 6 * 64, 12));
    auto [tr, tf] = both(spw_op_transpose, {x.get()}, {8, 6, 128, 64},
                         {0, 2, 1, 3});
    EXPECT_TRUE(same_bits(*tr, *tf)) << threads;
    auto row = f32({1536}, randoms(1536, 13));
    auto [br, bf] = both(spw_op_broadcast_to, {row.get()}, {40, 1536});
    EXPECT_TRUE(same_bits(*br, *bf)) << threads;
    auto g = f32({1024, 1536}, randoms(1024 * 1536, 14));
    auto [sr, sf] = both(spw_op_sum_to_shape, {g.get()}, {1536});
    EXPECT_TRUE(same_bits(*sr, *sf)) << threads;
    auto [cr, cf] = both(spw_op_sum_to_shape, {g.get()}, {1024, 1});
    EXPECT_TRUE(same_bits(*cr, *cf)) << threads;
    auto [rr, rf] = both(spw_op_reduce_sum, {g.get()}, {1536}, {1, 0});
    EXPECT_TRUE(same_bits(*rr, *rf)) << threads;
  }
}

TEST(FastKernels, AdamWAndFoamGiveTheSameBitsAtEveryThreadCount) {
  const int64_t rows = 300, cols = 1000, n = rows * cols;
  spw::AdamWHparams h;
  h.lr = 1e-3, h.beta1 = 0.9, h.beta2 = 0.999, h.eps = 1e-8,
  h.weight_decay = 0.01;
  std::vector<float> g = randoms(size_t(n), 15);
  std::vector<std::vector<float>> out;
  for (int threads : {1, 2, 5}) {
    ScopedKernelSet s(KernelSet::Fast);
    ScopedThreads t(threads);
    std::vector<float> w = randoms(size_t(n), 16), m(size_t(n), 0.f),
                       v(size_t(n), 0.f);
    for (int64_t step = 1; step <= 3; ++step)
      spw::adamw_kernel(w.data(), m.data(), v.data(), g.data(), n, step, h);
    std::vector<float> fw = randoms(size_t(n), 17),
                       fm(size_t(rows * 250), 0.f), fv(size_t(rows * 250), 0.f);
    for (int64_t step = 1; step <= 3; ++step)
      spw::foam_kernel(fw.data(), fm.data(), fv.data(), g.data(), rows, cols,
                       2, step, h, 0.25);
    w.insert(w.end(), fw.begin(), fw.end());
    out.push_back(std::move(w));
  }
  EXPECT_EQ(out[0], out[1]);
  EXPECT_EQ(out[0], out[2]);
}

} // namespace
