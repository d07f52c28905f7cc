//===- zero_test.cpp - ZeRO-1's shards and sharded AdamW updates ----------===//
//
// dist/zero.h: each rank keeps and updates the AdamW state of its shard of
// a parameter's elements. In one process (no MPI) a rank is simulated by
// giving the parameter that rank's shard: its update must change exactly
// the shard's elements, with the bits of the unsharded update, whole or
// split by the optimizer overlap, and keep moments of the shard's size.
//
//===----------------------------------------------------------------------===//

#include "dist/zero.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace spwtest;

namespace {

constexpr double kLr = 0.01, kB1 = 0.9, kB2 = 0.999, kEps = 1e-8, kWd = 0.1;
constexpr int64_t kN = 300;

std::unique_ptr<spw_ctx> context_with_param() {
  auto ctx = spw::make_context();
  const int64_t dims[] = {kN};
  spw_declare_param(ctx.get(), "layer.w", SPW_F32, 1, dims, 0);
  float *w = ctx->params[0].value->as<float>();
  for (int64_t i = 0; i < kN; ++i)
    w[i] = 0.01f * float(i % 37) - 0.2f;
  return ctx;
}

Tensor grad_of_step(int t) {
  std::vector<float> g(kN);
  for (int64_t i = 0; i < kN; ++i)
    g[size_t(i)] = 0.003f * float((i * 5 + t * 3) % 41) - 0.06f;
  return f32({kN}, g);
}

TEST(Zero, ShardsCoverTheElementsInRankOrderAtWholeVectors) {
  for (int ranks : {1, 2, 3, 4, 7, 8})
    for (int64_t n :
         {int64_t(0), int64_t(1), int64_t(63), int64_t(64), int64_t(300),
          int64_t(4096), int64_t(100003), (int64_t(1) << 40) + 17}) {
      int64_t at = 0, largest = 0;
      for (int r = 0; r < ranks; ++r) {
        const spw::zero::Shard s = spw::zero::shard_of(n, r, ranks);
        EXPECT_EQ(s.first, at) << "n " << n << " rank " << r << "/" << ranks;
        EXPECT_LE(s.first, s.last);
        if (r + 1 < ranks)
          EXPECT_EQ(s.last % 64, 0) << "n " << n << " rank " << r;
        largest = std::max(largest, s.size());
        at = s.last;
      }
      EXPECT_EQ(at, n) << "n " << n << " ranks " << ranks;
      // Balanced: no shard above the even share by more than the cut's
      // rounding (64 elements per cut).
      EXPECT_LE(largest, n / ranks + 64 + 1) << "n " << n;
    }
  // With clipping, cut at the norm's 64 Ki-element blocks: every shard
  // but the last starts and ends at a block.
  for (int ranks : {2, 3, 8})
    for (int64_t n : {int64_t(1000), int64_t(65536), int64_t(3 * 65536 + 5),
                      int64_t(100) << 20}) {
      int64_t at = 0;
      for (int r = 0; r < ranks; ++r) {
        const spw::zero::Shard s = spw::zero::shard_of(n, r, ranks, 65536);
        EXPECT_EQ(s.first, at);
        EXPECT_EQ(s.first % 65536, 0) << "n " << n << " rank " << r;
        at = s.last;
      }
      EXPECT_EQ(at, n);
    }
  // A parameter of at most 64 elements lives on the last rank, and one
  // of fewer than 64 per rank on a few.
  EXPECT_EQ(spw::zero::shard_of(100, 0, 2).size(), 0);
  EXPECT_EQ(spw::zero::shard_of(100, 1, 2).size(), 100);
  for (int r = 0; r < 6; ++r)
    EXPECT_EQ(spw::zero::shard_of(64, r, 7).size(), r == 6 ? 64 : 0);
  EXPECT_EQ(spw::zero::shard_of(64, 6, 7).size(), 64);
}

// Each of 3 simulated ranks runs 4 steps on its shard, every update whole
// (spw_adamw) or, `overlap`, split into [0, 150) deferred and [150, 300)
// now, as sched-overlap-optimizer splits it.
void check_shards_match_the_whole_update(bool overlap) {
  constexpr int kRanks = 3;
  auto whole = context_with_param();
  const std::vector<float> start(whole->params[0].value->as<float>(),
                                 whole->params[0].value->as<float>() + kN);
  for (int t = 1; t <= 4; ++t) {
    whole->step = t;
    auto g = grad_of_step(t);
    spw_adamw(whole.get(), 0, g.get(), kLr, kB1, kB2, kEps, kWd);
  }
  ASSERT_EQ(whole->error, "");
  const spw::ParamInfo &pw = whole->params[0];
  for (int r = 0; r < kRanks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    auto ctx = context_with_param();
    ctx->zero_stage = 1;
    spw::ParamInfo &p = ctx->params[0];
    const spw::zero::Shard s = spw::zero::shard_of(kN, r, kRanks);
    p.shard_lo = s.first;
    p.shard_hi = s.last;
    for (int t = 1; t <= 4; ++t) {
      ctx->step = t;
      auto g = grad_of_step(t);
      if (overlap) {
        spw_adamw_apply_pending(ctx.get(), 0, 0, 150);
        spw_adamw_defer(ctx.get(), 0, g.get(), 0, 150, kLr, kB1, kB2, kEps,
                        kWd);
        spw_adamw_range(ctx.get(), 0, g.get(), 150, kN, kLr, kB1, kB2, kEps,
                        kWd);
      } else {
        spw_adamw(ctx.get(), 0, g.get(), kLr, kB1, kB2, kEps, kWd);
      }
      ASSERT_EQ(ctx->error, "");
    }
    spw_adamw_flush(ctx.get());
    ASSERT_EQ(ctx->error, "");
    const float *w = p.value->as<float>();
    for (int64_t i = 0; i < kN; ++i) {
      const float want = i >= s.first && i < s.last ? pw.value->as<float>()[i]
                                                    : start[size_t(i)];
      ASSERT_EQ(std::memcmp(&w[i], &want, sizeof(float)), 0)
          << "element " << i << ": " << w[i] << " vs " << want;
    }
    // The moments of the shard only, those of the whole update.
    ASSERT_EQ(int64_t(p.adam_m.size()), s.size());
    ASSERT_EQ(int64_t(p.adam_v.size()), s.size());
    EXPECT_EQ(std::memcmp(p.adam_m.data(), pw.adam_m.data() + s.first,
                          size_t(s.size()) * sizeof(float)),
              0);
    EXPECT_EQ(std::memcmp(p.adam_v.data(), pw.adam_v.data() + s.first,
                          size_t(s.size()) * sizeof(float)),
              0);
    // A restored checkpoint's whole moment is cut to the shard.
    std::vector<float> m = pw.adam_m;
    spw::zero::keep_shard(p, m);
    EXPECT_EQ(m, p.adam_m);
  }
}

TEST(Zero, ShardedUpdatesAreTheWholeUpdatesBits) {
  check_shards_match_the_whole_update(false);
}

TEST(Zero, ShardedOverlapUpdatesAreTheWholeUpdatesBits) {
  check_shards_match_the_whole_update(true);
}

} // namespace
