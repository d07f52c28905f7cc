//===- optimizer_test.cpp - AdamW's ranged/deferred updates, and FOAM -----===//
//
// The optimizer overlap (sched-overlap-optimizer) splits a parameter's AdamW
// update into an element range updated now and one deferred to the next
// step. These tests check that the split gives spw_adamw's bits exactly, that
// the flush matters, and that every misuse that would train on stale or
// twice-updated weights is an error naming the parameter.
//
//===----------------------------------------------------------------------===//

#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <tuple>

using namespace spwtest;

namespace {

constexpr double kLr = 0.01, kB1 = 0.9, kB2 = 0.999, kEps = 1e-8, kWd = 0.1;

// A context with one f32 parameter "layer.w" of 7 elements.
std::unique_ptr<spw_ctx> context_with_param() {
  auto ctx = spw::make_context();
  const int64_t dims[] = {7};
  spw_declare_param(ctx.get(), "layer.w", SPW_F32, 1, dims, 0);
  float *w = ctx->params[0].value->as<float>();
  for (int i = 0; i < 7; ++i)
    w[i] = 0.25f * float(i) - 0.6f;
  return ctx;
}

Tensor grad_of_step(int t) {
  std::vector<float> g(7);
  for (int i = 0; i < 7; ++i)
    g[size_t(i)] = 0.03f * float((i * 5 + t * 3) % 11) - 0.15f;
  return f32({7}, g);
}

bool same_bits(const float *a, const float *b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

TEST(OptimizerOverlap, SplitAndDeferredUpdatesMatchWholeUpdatesBitForBit) {
  auto whole = context_with_param();
  auto split = context_with_param();
  for (int t = 1; t <= 4; ++t) {
    whole->step = split->step = t;
    auto g = grad_of_step(t);
    spw_adamw(whole.get(), 0, g.get(), kLr, kB1, kB2, kEps, kWd);
    // The steady-state iteration: last step's deferred part first, then
    // [0, 3) deferred and [3, 7) now.
    spw_adamw_apply_pending(split.get(), 0, 0, 3);
    spw_adamw_defer(split.get(), 0, g.get(), 0, 3, kLr, kB1, kB2, kEps, kWd);
    spw_adamw_range(split.get(), 0, g.get(), 3, 7, kLr, kB1, kB2, kEps, kWd);
    ASSERT_EQ(split->error, "");
  }
  const float *ww = whole->params[0].value->as<float>();
  const float *ws = split->params[0].value->as<float>();
  // Before the flush the deferred elements hold step 3's weights...
  EXPECT_TRUE(same_bits(ww + 3, ws + 3, 4));
  EXPECT_FALSE(same_bits(ww, ws, 3));
  // ...after it, every weight and moment is the whole update's.
  spw_adamw_flush(split.get());
  ASSERT_EQ(split->error, "");
  EXPECT_TRUE(same_bits(ww, ws, 7));
  EXPECT_TRUE(same_bits(whole->params[0].adam_m.data(),
                        split->params[0].adam_m.data(), 7));
  EXPECT_TRUE(same_bits(whole->params[0].adam_v.data(),
                        split->params[0].adam_v.data(), 7));
  EXPECT_TRUE(split->params[0].pending.empty());
  // Nothing is pending now: the next step's apply does nothing, and a second
  // flush neither.
  split->step = 5;
  spw_adamw_apply_pending(split.get(), 0, 0, 3);
  spw_adamw_flush(split.get());
  EXPECT_EQ(split->error, "");
  EXPECT_TRUE(same_bits(ww, ws, 7));
}

TEST(OptimizerOverlap, DeferredUpdateKeepsItsStepAndHyperparameters) {
  // Deferred at step 1 with lr 0.01, applied at step 2 under lr 0.5: the
  // result is step 1's update with lr 0.01, as spw_adamw made it then.
  auto whole = context_with_param();
  auto later = context_with_param();
  whole->step = later->step = 1;
  auto g = grad_of_step(1);
  spw_adamw(whole.get(), 0, g.get(), kLr, kB1, kB2, kEps, kWd);
  spw_adamw_defer(later.get(), 0, g.get(), 0, 7, kLr, kB1, kB2, kEps, kWd);
  later->step = 2;
  later->overrides.lr = 0.5;
  spw_adamw_apply_pending(later.get(), 0, 0, 7);
  ASSERT_EQ(later->error, "");
  EXPECT_TRUE(same_bits(whole->params[0].value->as<float>(),
                        later->params[0].value->as<float>(), 7));
}

TEST(OptimizerOverlap, EvaluateOnlyRecordsTheGradientAndDefersNothing) {
  auto ctx = context_with_param();
  ctx->step = 1;
  ctx->evaluate_only = true;
  auto g = grad_of_step(1);
  spw_adamw_defer(ctx.get(), 0, g.get(), 0, 3, kLr, kB1, kB2, kEps, kWd);
  spw_adamw_range(ctx.get(), 0, g.get(), 3, 7, kLr, kB1, kB2, kEps, kWd);
  EXPECT_EQ(ctx->error, "");
  EXPECT_TRUE(ctx->params[0].pending.empty());
  EXPECT_EQ(ctx->params[0].grad.size(), 7u * 4u);
  EXPECT_TRUE(ctx->params[0].adam_m.empty());
}

// Runs `f` on a fresh context at step 2 with [0, 3) deferred at step 1, and
// returns the error it leaves.
std::string error_with_pending(
    const std::function<void(spw_ctx *, spw_tensor *)> &f) {
  auto ctx = context_with_param();
  ctx->step = 1;
  auto g = grad_of_step(1);
  spw_adamw_defer(ctx.get(), 0, g.get(), 0, 3, kLr, kB1, kB2, kEps, kWd);
  if (!ctx->error.empty())
    return "setup: " + ctx->error;
  ctx->step = 2;
  f(ctx.get(), g.get());
  return ctx->error;
}

TEST(OptimizerOverlap, Errors) {
  auto has = [](const std::string &error, const std::string &want) {
    return testing::AssertionResult(error.find(want) != std::string::npos)
           << "error: '" << error << "'\nexpected: '" << want << "'";
  };
  // Ranges outside the parameter, or empty.
  for (auto [b, e] : {std::pair<int64_t, int64_t>{5, 9}, {3, 3}, {-1, 2}}) {
    auto ctx = context_with_param();
    ctx->step = 1;
    auto g = grad_of_step(1);
    spw_adamw_range(ctx.get(), 0, g.get(), b, e, kLr, kB1, kB2, kEps, kWd);
    EXPECT_TRUE(has(ctx->error,
                    "spw_adamw_range: element range [" + std::to_string(b) +
                        ", " + std::to_string(e) +
                        ") of parameter 'layer.w' is empty or outside its 7 "
                        "elements"));
  }
  {
    auto ctx = context_with_param();
    spw_adamw_apply_pending(ctx.get(), 3, 0, 1);
    EXPECT_TRUE(has(ctx->error, "spw_adamw_apply_pending: parameter index 3 "
                                "out of range (1 parameters declared)"));
  }
  // Reading, updating or deferring elements with an update pending.
  EXPECT_TRUE(has(error_with_pending([](spw_ctx *c, spw_tensor *) {
                    spw_param(c, 0);
                  }),
                  "spw_param: parameter 'layer.w' is read while the update of "
                  "its elements [0, 3) deferred at step 1 is still pending"));
  EXPECT_TRUE(has(error_with_pending([](spw_ctx *c, spw_tensor *g) {
                    spw_adamw(c, 0, g, kLr, kB1, kB2, kEps, kWd);
                  }),
                  "spw_adamw: updating elements [0, 7) of parameter 'layer.w', "
                  "but the update of [0, 3) deferred at step 1 is still "
                  "pending: apply it first"));
  EXPECT_TRUE(has(error_with_pending([](spw_ctx *c, spw_tensor *g) {
                    spw_adamw_range(c, 0, g, 2, 5, kLr, kB1, kB2, kEps, kWd);
                  }),
                  "spw_adamw_range: updating elements [2, 5) of parameter "
                  "'layer.w', but the update of [0, 3) deferred at step 1"));
  EXPECT_TRUE(has(error_with_pending([](spw_ctx *c, spw_tensor *g) {
                    spw_adamw_defer(c, 0, g, 0, 3, kLr, kB1, kB2, kEps, kWd);
                  }),
                  "spw_adamw_defer: deferring the update of elements [0, 3) "
                  "of parameter 'layer.w', but the update of [0, 3) deferred "
                  "at step 1 is still pending"));
  // Applying other elements than were deferred.
  EXPECT_TRUE(has(error_with_pending([](spw_ctx *c, spw_tensor *) {
                    spw_adamw_apply_pending(c, 0, 0, 4);
                  }),
                  "spw_adamw_apply_pending: applying the update of elements "
                  "[0, 4) of parameter 'layer.w', but the update of [0, 3)"));
  // Applying in the step that deferred it.
  EXPECT_TRUE(has(error_with_pending([](spw_ctx *c, spw_tensor *) {
                    c->step = 1;
                    spw_adamw_apply_pending(c, 0, 0, 3);
                  }),
                  "parameter 'layer.w': the update of [0, 3) deferred at step "
                  "1 is applied at step 1; a deferred update is applied in a "
                  "later step"));
  // The disjoint rest may be updated, and applying the right range works.
  EXPECT_EQ(error_with_pending([](spw_ctx *c, spw_tensor *g) {
              spw_adamw_range(c, 0, g, 3, 7, kLr, kB1, kB2, kEps, kWd);
              spw_adamw_apply_pending(c, 0, 0, 3);
              spw_param(c, 0);
            }),
            "");
}

// ---- FOAM -----------------------------------------------------------------

// A context with one f32 parameter "fc.w" of shape [3, 6] and FOAM at
// `level` (blocks of 2^level elements of each row; 6 columns leave a padded
// last block at level 2).
std::unique_ptr<spw_ctx> context_with_foam(int64_t level) {
  auto ctx = spw::make_context();
  const int64_t dims[] = {3, 6};
  spw_declare_param(ctx.get(), "fc.w", SPW_F32, 2, dims, 0);
  float *w = ctx->params[0].value->as<float>();
  for (int i = 0; i < 18; ++i)
    w[i] = 0.1f * float(i % 7) - 0.3f;
  spw_declare_foam(ctx.get(), 0, level, 1.0);
  return ctx;
}

TEST(Foam, FoldedStateHasRowsTimesBlocksPerMoment) {
  for (int64_t level : {0, 1, 2, 3}) {
    auto ctx = context_with_foam(level);
    ASSERT_EQ(ctx->error, "");
    const int64_t blocks = (6 + (int64_t(1) << level) - 1) >> level;
    EXPECT_EQ(ctx->params[0].state_numel(), 3 * blocks);
    EXPECT_EQ(ctx->params[0].state_dims(), (std::vector<int64_t>{3, blocks}));
    ctx->step = 1;
    std::vector<float> g(18);
    for (int i = 0; i < 18; ++i)
      g[size_t(i)] = 0.05f * float((i * 7) % 9) - 0.2f;
    auto grad = f32({3, 6}, g);
    spw_foam(ctx.get(), 0, grad.get(), kLr, kB1, kB2, kEps, 0.0, 1.0);
    ASSERT_EQ(ctx->error, "");
    EXPECT_EQ(ctx->params[0].adam_m.size(), size_t(3 * blocks));
    EXPECT_EQ(ctx->params[0].adam_v.size(), size_t(3 * blocks));
  }
}

// Level 0, alpha 1, no decay, first step from zero state: m = (1 - b1) g,
// v = (1 - b2) g^2, so the step is lr * g / (|g| + eps / sqrt(1 - b2)):
// lr * sign(g) to within eps.
TEST(Foam, FirstStepAtLevelZeroIsSignDescent) {
  auto ctx = context_with_foam(0);
  std::vector<float> w0(ctx->params[0].value->as<float>(),
                        ctx->params[0].value->as<float>() + 18);
  std::vector<float> g(18);
  for (int i = 0; i < 18; ++i)
    g[size_t(i)] = (i % 2 ? 1.0f : -1.0f) * (0.01f + 0.02f * float(i));
  auto grad = f32({3, 6}, g);
  ctx->step = 1;
  spw_foam(ctx.get(), 0, grad.get(), kLr, kB1, kB2, kEps, 0.0, 1.0);
  ASSERT_EQ(ctx->error, "");
  const float *w = ctx->params[0].value->as<float>();
  for (int i = 0; i < 18; ++i)
    EXPECT_NEAR(w[i], w0[size_t(i)] - kLr * (g[size_t(i)] > 0 ? 1 : -1), 1e-6)
        << "element " << i;
}

TEST(Foam, EvaluateOnlyRecordsTheGradient) {
  auto ctx = context_with_foam(2);
  std::vector<float> w0(ctx->params[0].value->as<float>(),
                        ctx->params[0].value->as<float>() + 18);
  ctx->evaluate_only = true;
  ctx->step = 1;
  auto grad = f32({3, 6}, std::vector<float>(18, 0.5f));
  spw_foam(ctx.get(), 0, grad.get(), kLr, kB1, kB2, kEps, kWd, 0.25);
  ASSERT_EQ(ctx->error, "");
  EXPECT_TRUE(same_bits(ctx->params[0].value->as<float>(), w0.data(), 18));
  EXPECT_EQ(ctx->params[0].grad.size(), 18 * sizeof(float));
  EXPECT_TRUE(ctx->params[0].adam_m.empty());
}

TEST(Foam, Errors) {
  auto has = [](const std::string &error, const std::string &want) {
    return testing::AssertionResult(error.find(want) != std::string::npos)
           << "error: '" << error << "'\nexpected: '" << want << "'";
  };
  {
    auto ctx = context_with_param(); // 1-D
    spw_declare_foam(ctx.get(), 0, 2, 0.25);
    EXPECT_TRUE(has(ctx->error, "spw_declare_foam: parameter 'layer.w' is "
                                "f32 [7]; FOAM folds only 2-D f32 weights"));
  }
  for (auto [level, alpha, want] :
       {std::tuple<int64_t, double, const char *>{
            17, 0.25, "FOAM level 17 is outside [0, 16]"},
        {-1, 0.25, "FOAM level -1 is outside [0, 16]"},
        {2, 0.0, "FOAM alpha 0 is outside [1e-30, 1e6]"}}) {
    auto ctx = spw::make_context();
    const int64_t dims[] = {2, 4};
    spw_declare_param(ctx.get(), "m", SPW_F32, 2, dims, 0);
    spw_declare_foam(ctx.get(), 0, level, alpha);
    EXPECT_TRUE(has(ctx->error, want));
  }
  {
    auto ctx = context_with_foam(2);
    spw_declare_foam(ctx.get(), 5, 2, 0.25);
    EXPECT_TRUE(has(ctx->error, "spw_declare_foam: parameter index 5 out of "
                                "range (1 parameters declared)"));
  }
  // The optimizer the parameter was declared for, and no other.
  {
    auto ctx = context_with_foam(2);
    ctx->step = 1;
    auto grad = f32({3, 6}, std::vector<float>(18, 0.5f));
    spw_adamw(ctx.get(), 0, grad.get(), kLr, kB1, kB2, kEps, kWd);
    EXPECT_TRUE(has(ctx->error, "spw_adamw: parameter 'fc.w' is declared for "
                                "FOAM but updated by AdamW"));
  }
  {
    auto ctx = context_with_param();
    ctx->step = 1;
    auto g = grad_of_step(1);
    spw_foam(ctx.get(), 0, g.get(), kLr, kB1, kB2, kEps, kWd, 0.25);
    EXPECT_TRUE(has(ctx->error, "spw_foam: parameter 'layer.w' is declared "
                                "for AdamW but updated by FOAM"));
  }
}

} // namespace

// ---- gradient clipping (spw_declare_grad_clip, spw_clip_grad_norm) --------

namespace {

// Two parameters ("a" of 7 elements, "b" of 3), clipping declared with
// `max_norm` unless it is 0.
std::unique_ptr<spw_ctx> clip_context(double max_norm) {
  auto ctx = context_with_param();
  const int64_t dims[] = {3};
  spw_declare_param(ctx.get(), "layer.b", SPW_F32, 1, dims, 28);
  float *b = ctx->params[1].value->as<float>();
  for (int i = 0; i < 3; ++i)
    b[i] = 0.5f - 0.125f * float(i);
  if (max_norm > 0)
    spw_declare_grad_clip(ctx.get(), max_norm);
  return ctx;
}

Tensor bias_grad_of_step(int t) {
  return f32({3}, {0.2f * float(t), -0.7f, 0.05f * float(t % 3)});
}

// torch's clip_grad_norm_ by hand: the per-tensor norms as float32, the norm
// of them, coefficient min(1, reciprocal(norm + 1e-6) * max_norm).
std::pair<float, float> torch_norm_and_coef(const spw_tensor &a,
                                            const spw_tensor &b,
                                            double max_norm) {
  auto norm = [](const spw_tensor &t) {
    double s = 0;
    for (int64_t i = 0; i < t.numel; ++i)
      s += double(t.as<float>()[i]) * double(t.as<float>()[i]);
    return float(std::sqrt(s));
  };
  const double na = norm(a), nb = norm(b);
  const float total = float(std::sqrt(na * na + nb * nb));
  const float coef = (1.0f / (total + 1e-6f)) * float(max_norm);
  return {total, std::min(coef, 1.0f)};
}

Tensor scaled(const spw_tensor &g, float s) {
  std::vector<float> v(size_t(g.numel));
  for (int64_t i = 0; i < g.numel; ++i)
    v[size_t(i)] = g.as<float>()[i] * s;
  return f32(std::vector<int64_t>(g.dims, g.dims + g.rank), v);
}

} // namespace

TEST(GradClip, UpdatesMatchTorchsPreScaledGradientsBitForBit) {
  // 0.05 clips (the gradients' norm is about 1); 100 does not.
  for (double max_norm : {0.05, 100.0}) {
    auto clip = clip_context(max_norm);
    auto ref = clip_context(0);
    for (int t = 1; t <= 3; ++t) {
      clip->step = ref->step = t;
      auto ga = grad_of_step(t), gb = bias_grad_of_step(t);
      spw_tensor *grads[] = {ga.get(), gb.get()};
      spw_tensor *c = spw_clip_grad_norm(clip.get(), 2, grads, max_norm);
      ASSERT_EQ(clip->error, "");
      const auto [norm, coef] = torch_norm_and_coef(*ga, *gb, max_norm);
      EXPECT_EQ(clip->grad_clip.norm, double(norm));
      EXPECT_EQ(*c->as<float>(), coef);
      EXPECT_EQ(coef < 1.0f, max_norm < 1);
      spw_adamw(clip.get(), 0, ga.get(), kLr, kB1, kB2, kEps, kWd);
      spw_adamw(clip.get(), 1, gb.get(), kLr, kB1, kB2, kEps, kWd);
      auto sa = scaled(*ga, coef), sb = scaled(*gb, coef);
      spw_adamw(ref.get(), 0, sa.get(), kLr, kB1, kB2, kEps, kWd);
      spw_adamw(ref.get(), 1, sb.get(), kLr, kB1, kB2, kEps, kWd);
      ASSERT_EQ(clip->error, "");
      ASSERT_EQ(ref->error, "");
    }
    for (int p = 0; p < 2; ++p)
      EXPECT_TRUE(same_bits(clip->params[size_t(p)].value->as<float>(),
                            ref->params[size_t(p)].value->as<float>(),
                            size_t(clip->params[size_t(p)].value->numel)))
          << "max_norm " << max_norm << ", parameter " << p;
  }
}

TEST(GradClip, DeferredUpdateKeepsItsStepsCoefficient) {
  auto whole = clip_context(0.05);
  auto split = clip_context(0.05);
  for (int t = 1; t <= 3; ++t) {
    whole->step = split->step = t;
    auto ga = grad_of_step(t), gb = bias_grad_of_step(t);
    spw_tensor *grads[] = {ga.get(), gb.get()};
    spw_clip_grad_norm(whole.get(), 2, grads, 0.05);
    spw_adamw(whole.get(), 0, ga.get(), kLr, kB1, kB2, kEps, kWd);
    // The applied update is step t - 1's, with its coefficient, after this
    // step computed another one.
    spw_clip_grad_norm(split.get(), 2, grads, 0.05);
    spw_adamw_apply_pending(split.get(), 0, 0, 3);
    spw_adamw_defer(split.get(), 0, ga.get(), 0, 3, kLr, kB1, kB2, kEps, kWd);
    spw_adamw_range(split.get(), 0, ga.get(), 3, 7, kLr, kB1, kB2, kEps, kWd);
    ASSERT_EQ(split->error, "");
  }
  spw_adamw_flush(split.get());
  ASSERT_EQ(split->error, "");
  EXPECT_TRUE(same_bits(whole->params[0].value->as<float>(),
                        split->params[0].value->as<float>(), 7));
}

TEST(GradClip, OverrideZeroTurnsItOff) {
  auto ctx = clip_context(0.05);
  auto ref = clip_context(0);
  ctx->overrides.grad_clip = 0.0;
  ctx->step = ref->step = 1;
  auto ga = grad_of_step(1), gb = bias_grad_of_step(1);
  spw_tensor *grads[] = {ga.get(), gb.get()};
  spw_tensor *c = spw_clip_grad_norm(ctx.get(), 2, grads, 0.05);
  EXPECT_EQ(*c->as<float>(), 1.0f);
  EXPECT_TRUE(std::isnan(ctx->grad_clip.norm));
  spw_adamw(ctx.get(), 0, ga.get(), kLr, kB1, kB2, kEps, kWd);
  spw_adamw(ref.get(), 0, ga.get(), kLr, kB1, kB2, kEps, kWd);
  ASSERT_EQ(ctx->error, "");
  EXPECT_TRUE(same_bits(ctx->params[0].value->as<float>(),
                        ref->params[0].value->as<float>(), 7));
}

TEST(GradClip, Errors) {
  // An update before the step's norm breaks the barrier.
  {
    auto ctx = clip_context(1.0);
    ctx->step = 1;
    auto g = grad_of_step(1);
    spw_adamw(ctx.get(), 0, g.get(), kLr, kB1, kB2, kEps, kWd);
    EXPECT_NE(ctx->error.find("spw_adamw: parameter 'layer.w' is updated at "
                              "step 1 before the step's gradient norm is "
                              "computed (spw_clip_grad_norm)"),
              std::string::npos)
        << ctx->error;
  }
  // The norm of step 1 does not cover step 2's updates.
  {
    auto ctx = clip_context(1.0);
    ctx->step = 1;
    auto ga = grad_of_step(1), gb = bias_grad_of_step(1);
    spw_tensor *grads[] = {ga.get(), gb.get()};
    spw_clip_grad_norm(ctx.get(), 2, grads, 1.0);
    ctx->step = 2;
    spw_adamw_range(ctx.get(), 0, ga.get(), 0, 3, kLr, kB1, kB2, kEps, kWd);
    EXPECT_NE(ctx->error.find("updated at step 2 before the step's gradient "
                              "norm"),
              std::string::npos)
        << ctx->error;
  }
  // A norm in a model that declared no clipping.
  {
    auto ctx = clip_context(0);
    ctx->step = 1;
    auto g = grad_of_step(1);
    spw_tensor *grads[] = {g.get()};
    spw_clip_grad_norm(ctx.get(), 1, grads, 1.0);
    EXPECT_NE(ctx->error.find("spw_clip_grad_norm: the model computes a "
                              "gradient norm but declared no gradient "
                              "clipping"),
              std::string::npos)
        << ctx->error;
  }
  {
    auto ctx = spw::make_context();
    spw_declare_grad_clip(ctx.get(), -1.0);
    EXPECT_NE(ctx->error.find("spw_declare_grad_clip: max_norm -1: expected "
                              "a positive finite number"),
              std::string::npos)
        << ctx->error;
  }
}

namespace {

// bf16 state's reference (--optimizer-state-dtype bf16): torch's AdamW
// element loop in float32 with the moments widened as read, rounded to
// nearest even as stored, and the stored values used for the weight.
void reference_adamw_bf16(std::vector<float> &w, std::vector<spw::bf16> &m,
                          std::vector<spw::bf16> &v,
                          const std::vector<float> &g, int64_t step) {
  const float decay = float(1.0 - kLr * kWd), w1 = float(1.0 - kB1),
              b2 = float(kB2), w2 = float(1.0 - kB2),
              bc2 = float(std::sqrt(1.0 - std::pow(kB2, double(step)))),
              eps = float(kEps),
              neg = float(-(kLr / (1.0 - std::pow(kB1, double(step)))));
  for (size_t i = 0; i < w.size(); ++i) {
    const float m0 = spw::to_float(m[i]), v0 = spw::to_float(v[i]);
    m[i] = spw::to_bf16(m0 + w1 * (g[i] - m0));
    v[i] = spw::to_bf16(v0 * b2 + w2 * g[i] * g[i]);
    const float denom = std::sqrt(spw::to_float(v[i])) / bc2 + eps;
    w[i] = w[i] * decay + neg * spw::to_float(m[i]) / denom;
  }
}

std::vector<uint16_t> halves(const std::vector<spw::bf16> &x) {
  std::vector<uint16_t> out;
  for (spw::bf16 b : x)
    out.push_back(b.bits);
  return out;
}

std::vector<float> grad_values(int t, int n) {
  std::vector<float> g(size_t(n), 0.0f);
  for (int i = 0; i < n; ++i)
    g[size_t(i)] = 0.03f * float((i * 5 + t * 3) % 11) - 0.15f;
  return g;
}

} // namespace

// The kernel with bf16 moments is the reference loop bit for bit, in one
// call or in ranges (elements are independent), and its moments differ
// from float32 state's rounding of them only where rounding the stored
// moment changed the update (so the update reads the stored values).
TEST(StateBf16, AdamWKernelStoresRoundedMomentsAndUpdatesWithThem) {
  const int n = 300000; // several chunks of the kernel's parallel loop
  std::vector<float> w(n), wr;
  for (int i = 0; i < n; ++i)
    w[size_t(i)] = 0.001f * float(i % 997) - 0.4f;
  std::vector<spw::bf16> m(n, spw::bf16{0}), v(n, spw::bf16{0}), mr, vr;
  wr = w;
  mr = m;
  vr = v;
  std::vector<float> ws = w;
  std::vector<spw::bf16> ms = m, vs = v;
  const spw::AdamWHparams h{kLr, kB1, kB2, kEps, kWd};
  for (int t = 1; t <= 3; ++t) {
    const std::vector<float> g = grad_values(t, n);
    spw::adamw_kernel(w.data(), spw::StateMem(m.data()),
                      spw::StateMem(v.data()), g.data(), n, t, h);
    reference_adamw_bf16(wr, mr, vr, g, t);
    // In three ranges.
    for (auto [lo, hi] : {std::pair<int, int>{0, 7}, {7, 65541}, {65541, n}})
      spw::adamw_kernel(ws.data() + lo, spw::StateMem(ms.data() + lo),
                        spw::StateMem(vs.data() + lo), g.data() + lo, hi - lo,
                        t, h);
  }
  EXPECT_TRUE(same_bits(w.data(), wr.data(), size_t(n)));
  EXPECT_EQ(halves(m), halves(mr));
  EXPECT_EQ(halves(v), halves(vr));
  EXPECT_TRUE(same_bits(w.data(), ws.data(), size_t(n)));
  EXPECT_EQ(halves(m), halves(ms));
  EXPECT_EQ(halves(v), halves(vs));
  // Not float32 state's weights: the rounding is real.
  std::vector<float> wf(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    wf[size_t(i)] = 0.001f * float(i % 997) - 0.4f;
  std::vector<float> mf(static_cast<size_t>(n), 0.0f), vf = mf;
  for (int t = 1; t <= 3; ++t) {
    const std::vector<float> g = grad_values(t, n);
    spw::adamw_kernel(wf.data(), mf.data(), vf.data(), g.data(), n, t, h);
  }
  EXPECT_FALSE(same_bits(w.data(), wf.data(), size_t(n)));
}

// FOAM's folded moments in bf16, against a scalar reference of FOAM.md's
// update (the runtime's float32 operations in order) on stored moments.
TEST(StateBf16, FoamKernelStoresRoundedFoldedMomentsAndUpdatesWithThem) {
  const int64_t rows = 5, cols = 37, level = 2, block = 4,
                nb = (cols + block - 1) / block;
  const double alpha = 0.5;
  std::vector<float> w(size_t(rows * cols));
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = 0.01f * float(i % 13) - 0.05f;
  std::vector<float> wr = w;
  std::vector<spw::bf16> m(size_t(rows * nb), spw::bf16{0}), v = m, mr = m,
                                                             vr = m;
  const spw::AdamWHparams h{kLr, kB1, kB2, kEps, kWd};
  for (int t = 1; t <= 3; ++t) {
    const std::vector<float> g = grad_values(t, int(rows * cols));
    spw::foam_kernel(w.data(), spw::StateMem(m.data()), spw::StateMem(v.data()),
                     g.data(), rows, cols, level, t, h, alpha);
    const double bc1 = 1.0 - std::pow(kB1, t), bc2 = 1.0 - std::pow(kB2, t);
    const float b1 = float(kB1), w1 = float(1.0 - kB1), b2 = float(kB2),
                w2 = float(1.0 - kB2), inv = float(1.0 / double(block)),
                neg_step = float(-(kLr * std::sqrt(bc2) / bc1)),
                a = float(alpha), eps = float(kEps),
                neg_decay = float(-(kLr * kWd));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < nb; ++k) {
        const int64_t lo = k * block, hi = std::min(cols, lo + block);
        float sum = 0.0f, sumsq = 0.0f;
        for (int64_t j = lo; j < hi; ++j) {
          sum += g[size_t(r * cols + j)];
          sumsq += g[size_t(r * cols + j)] * g[size_t(r * cols + j)];
        }
        const float gb = sum * inv, qb = sumsq * inv;
        spw::bf16 &mk = mr[size_t(r * nb + k)], &vk = vr[size_t(r * nb + k)];
        mk = spw::to_bf16(spw::to_float(mk) * b1 + gb * w1);
        vk = spw::to_bf16(spw::to_float(vk) * b2 + qb * w2);
        for (int64_t j = lo; j < hi; ++j) {
          const float res = g[size_t(r * cols + j)] - gb;
          const float mj = spw::to_float(mk) + res;
          const float vj = spw::to_float(vk) + res * res;
          float x = wr[size_t(r * cols + j)] +
                    neg_step * (a * mj / (std::sqrt(vj) + eps));
          x = x + x * neg_decay;
          wr[size_t(r * cols + j)] = x;
        }
      }
  }
  EXPECT_TRUE(same_bits(w.data(), wr.data(), w.size()));
  EXPECT_EQ(halves(m), halves(mr));
  EXPECT_EQ(halves(v), halves(vr));
}

// Resident bf16 state: the device keeps it (on the CPU device too, in host
// memory), 2 bytes per element; spw_adamw and spw_adamw_range give the
// kernel's bits on cpu and loopback; device_pull widens it into adam_m /
// adam_v and device_push rounds them back (a checkpoint's round trip).
TEST(StateBf16, ResidentStateIsTheDevicesOnEveryDevice) {
  for (bool loopback : {false, true}) {
    SCOPED_TRACE(loopback ? "loopback" : "cpu");
    auto ctx = context_with_param();
    std::vector<float> w(ctx->params[0].value->as<float>(),
                         ctx->params[0].value->as<float>() + 7);
    spw_declare_optimizer_state_dtype(ctx.get(), SPW_BF16);
    ASSERT_FALSE(ctx->failed()) << ctx->error;
    spw::device_start(ctx.get(), loopback ? spw::make_loopback_device(
                                                1 << 20, spw::Precision::FP32)
                                          : spw::make_cpu_device());
    spw::ParamInfo &p = ctx->params[0];
    ASSERT_TRUE(p.dev_m);
    EXPECT_TRUE(p.dev_m.half);
    EXPECT_EQ(spw::state_bytes(ctx.get(), p), 14);
    std::vector<spw::bf16> m(7, spw::bf16{0}), v = m;
    for (int t = 1; t <= 3; ++t) {
      ctx->step = t;
      Tensor g = grad_of_step(t);
      spw_tensor *dg = spw_alloc(ctx.get(), SPW_F32, 1, g->dims);
      ctx->device->upload(dg->data, g->data, 28);
      if (t == 2) { // in two ranges
        spw_adamw_range(ctx.get(), 0, dg, 0, 3, kLr, kB1, kB2, kEps, kWd);
        spw_adamw_range(ctx.get(), 0, dg, 3, 7, kLr, kB1, kB2, kEps, kWd);
      } else {
        spw_adamw(ctx.get(), 0, dg, kLr, kB1, kB2, kEps, kWd);
      }
      ASSERT_FALSE(ctx->failed()) << ctx->error;
      spw::adamw_kernel(w.data(), spw::StateMem(m.data()),
                        spw::StateMem(v.data()), g->as<float>(), 7, t,
                        spw::AdamWHparams{kLr, kB1, kB2, kEps, kWd});
      spw::clear_step(ctx.get());
    }
    spw::device_pull(ctx.get());
    EXPECT_TRUE(same_bits(p.value->as<float>(), w.data(), 7));
    ASSERT_EQ(p.adam_m.size(), 7u);
    for (size_t i = 0; i < 7; ++i) {
      EXPECT_EQ(p.adam_m[i], spw::to_float(m[i]));
      EXPECT_EQ(p.adam_v[i], spw::to_float(v[i]));
    }
    // A checkpoint of float32 state restored into bf16 state rounds it.
    p.adam_m[0] = 1.0f + 0x1p-9f;     // halfway: rounds to even (1.0)
    p.adam_m[1] = 1.0f + 3 * 0x1p-9f; // halfway: rounds up to 1 + 2^-7
    spw::device_push(ctx.get());
    spw::device_pull(ctx.get());
    EXPECT_EQ(p.adam_m[0], 1.0f);
    EXPECT_EQ(p.adam_m[1], 1.0f + 0x1p-7f);
  }
}

TEST(StateBf16, DeclarationErrors) {
  {
    auto ctx = context_with_param();
    spw_declare_optimizer_state_dtype(ctx.get(), SPW_I32);
    EXPECT_NE(ctx->error.find("optimizer state dtype 3: AdamW and FOAM state "
                              "is f32 (1) or bf16 (5)"),
              std::string::npos)
        << ctx->error;
  }
  {
    auto ctx = context_with_param();
    spw::device_start(ctx.get(),
                      spw::make_loopback_device(1 << 20, spw::Precision::FP32));
    spw_declare_optimizer_state_dtype(ctx.get(), SPW_BF16);
    EXPECT_NE(ctx->error.find("declared before the tiers and before the run's "
                              "device starts"),
              std::string::npos)
        << ctx->error;
    EXPECT_FALSE(ctx->state_bf16);
  }
  {
    // Without a device the CPU's own float32 state cannot hold it.
    auto ctx = context_with_param();
    spw_declare_optimizer_state_dtype(ctx.get(), SPW_BF16);
    ctx->step = 1;
    Tensor g = grad_of_step(1);
    spw_adamw(ctx.get(), 0, g.get(), kLr, kB1, kB2, kEps, kWd);
    EXPECT_NE(ctx->error.find("parameter 'layer.w': its bf16 optimizer state "
                              "is neither on the device nor bound"),
              std::string::npos)
        << ctx->error;
  }
}
