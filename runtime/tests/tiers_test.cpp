//===- tiers_test.cpp - the offload plan's runtime entry points -----------===//
//
// What the generated step calls (spw_declare_tiers ... spw_gradient) checks
// its inputs and says what is wrong, and a plan's blocks hold the
// parameters between tiers_scatter and tiers_gather. The byte-exact,
// end-to-end behaviour is test/e2e/offload.test's.
//
//===----------------------------------------------------------------------===//

#include "host_optimizer.h"
#include "spillway/runtime/zero_shard.h"
#include "storage/tensor_store.h"
#include "test_util.h"
#include "tiers.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <tuple>

namespace {

// A context with one f32 parameter "w" of 6 elements: 0.5, 1.5, ...
std::unique_ptr<spw_ctx> context_with_param() {
  auto ctx = spw::make_context();
  const int64_t dims[] = {2, 3};
  spw_declare_param(ctx.get(), "w", SPW_F32, 2, dims, 0);
  float *w = ctx->params[0].value->as<float>();
  for (int i = 0; i < 6; ++i)
    w[i] = 0.5f + float(i);
  return ctx;
}

TEST(Tiers, StepCallsWithoutAPlanAreErrors) {
  auto ctx = context_with_param();
  spw_move(ctx.get(), 0, 0, 1, 0, 0, 0);
  EXPECT_NE(ctx->error.find("spw_move: no offload plan declared"),
            std::string::npos)
      << ctx->error;
  ctx->error.clear();
  spw_await(ctx.get(), 0);
  EXPECT_NE(ctx->error.find("spw_await: no offload plan declared"),
            std::string::npos)
      << ctx->error;
  ctx->error.clear();
  const int64_t members[] = {0}, offsets[] = {0};
  spw_declare_block(ctx.get(), 0, 0, 24, 0, 0, 1, members, offsets);
  EXPECT_NE(ctx->error.find("no offload plan declared"), std::string::npos)
      << ctx->error;
}

TEST(Tiers, BadBlocksAreRefusedNamingThem) {
  auto ctx = context_with_param();
  const int64_t predicted[4] = {0, 0, 0, 0};
  spw_declare_tiers(ctx.get(), 4096, 0, 0, "", predicted);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  const int64_t members[] = {0};
  struct Case {
    int64_t bytes, offset;
    int64_t member;
    const char *want;
  } cases[] = {
      {24, 2, 0, "at offset 2 does not fit"},           // misaligned
      {24, 4, 0, "at offset 4 does not fit"},           // past the end
      {24, INT64_MAX - 3, 0, "does not fit"},           // would overflow
      {24, 0, 7, "parameter index 7 out of range"},     // unknown parameter
      {-1, 0, 0, "invalid block"},                      // negative size
  };
  for (const Case &c : cases) {
    ctx->error.clear();
    const int64_t m[] = {c.member}, o[] = {c.offset};
    spw_declare_block(ctx.get(), 0, 0, c.bytes, 0, 0, 1, m, o);
    EXPECT_NE(ctx->error.find(c.want), std::string::npos)
        << "want '" << c.want << "', got '" << ctx->error << "'";
  }
  ctx->error.clear();
  const int64_t ok[] = {0};
  spw_declare_block(ctx.get(), 0, 0, 24, 0, 0, 1, members, ok);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  spw_declare_block(ctx.get(), 0, 0, 24, 0, 0, 1, members, ok);
  EXPECT_NE(ctx->error.find("declared twice"), std::string::npos)
      << ctx->error;
  // The parameters and their state live only in their blocks: a params or
  // optimizer block without a home would lose them.
  for (int32_t cls : {0, 1}) {
    ctx->error.clear();
    spw_declare_block(ctx.get(), cls, 1, cls == 0 ? 24 : 48, -1, 0, 1,
                      members, ok);
    EXPECT_NE(ctx->error.find("holds 1 parameter but has no home"),
              std::string::npos)
        << ctx->error;
  }
}

TEST(Tiers, ParametersLiveInTheirBlockBetweenScatterAndGather) {
  auto ctx = context_with_param();
  const int64_t predicted[4] = {0, 0, 0, 0};
  spw_declare_tiers(ctx.get(), 4096, 0, 0, "", predicted);
  const int64_t members[] = {0}, offsets[] = {0};
  // Parameters homed at offset 256 of the GPU arena.
  spw_declare_block(ctx.get(), 0, 0, 24, 0, 256, 1, members, offsets);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  spw::tiers_start(ctx.get(), {}, spw::storage::Backend::Threads);
  spw::tiers_scatter(ctx.get());
  // The plain copy is gone: reading the parameter before a bind is an error.
  spw_param(ctx.get(), 0);
  EXPECT_NE(ctx->error.find("no copy of it is bound"), std::string::npos)
      << ctx->error;
  ctx->error.clear();
  // Bound, it reads the block's GPU copy, which holds the values.
  spw_bind(ctx.get(), 0, 0, 0);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  spw_tensor *w = spw_param(ctx.get(), 0);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(w->as<float>()[i], 0.5f + float(i));
  w->as<float>()[3] = -7.0f; // an update in the block
  // A bind to a tier without a copy, and a drop of the home, are errors.
  spw_bind(ctx.get(), 0, 0, 1);
  EXPECT_NE(ctx->error.find("has no copy on host"), std::string::npos)
      << ctx->error;
  ctx->error.clear();
  spw_drop(ctx.get(), 0, 0, 0);
  EXPECT_NE(ctx->error.find("home copy on gpu cannot be dropped"),
            std::string::npos)
      << ctx->error;
  ctx->error.clear();
  spw::tiers_gather(ctx.get());
  const spw_tensor &v = *ctx->params[0].value;
  EXPECT_EQ(v.data, v.owned.get());
  EXPECT_EQ(v.as<float>()[3], -7.0f);
  EXPECT_EQ(v.as<float>()[5], 5.5f);
}

// A parameter "v" of 128 elements (512 bytes): k, k = 0..127.
std::unique_ptr<spw_ctx> context_with_long_param() {
  auto ctx = spw::make_context();
  const int64_t dims[] = {128};
  spw_declare_param(ctx.get(), "v", SPW_F32, 1, dims, 0);
  float *v = ctx->params[0].value->as<float>();
  for (int i = 0; i < 128; ++i)
    v[i] = float(i);
  return ctx;
}

TEST(Tiers, SplitBlocksBindTheirPartsAndUpdateEachOnItsOwn) {
  auto ctx = context_with_long_param();
  const int64_t predicted[4] = {0, 0, 0, 0};
  spw_declare_tiers(ctx.get(), 4096, 16384, 0, "", predicted);
  const int64_t members[] = {0}, offsets[] = {0};
  // Parameters and AdamW state homed on host; the first 64 elements (256
  // bytes) are part 0.
  spw_declare_block(ctx.get(), 0, 0, 512, 1, 0, 1, members, offsets);
  spw_declare_block(ctx.get(), 1, 0, 1024, 1, 8192, 1, members, offsets);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  for (auto [split, want] : {std::pair<int64_t, const char *>{100, "a multiple of 256"},
                             {512, "a multiple of 256 inside the block"},
                             {0, "split at 0 bytes"}}) {
    spw_declare_split(ctx.get(), 0, 0, split);
    EXPECT_NE(ctx->error.find(want), std::string::npos)
        << split << ": " << ctx->error;
    ctx->error.clear();
  }
  spw_declare_split(ctx.get(), 0, 0, 256);
  spw_declare_split(ctx.get(), 1, 0, 256);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  spw_declare_split(ctx.get(), 1, 0, 256);
  EXPECT_NE(ctx->error.find("split twice"), std::string::npos) << ctx->error;
  ctx->error.clear();
  spw::tiers_start(ctx.get(), {}, spw::storage::Backend::Threads);
  spw::tiers_scatter(ctx.get());

  // On host the parts are 4 KiB apart: each element is where its part
  // says, but the whole parameter is not readable in one piece.
  spw::ParamInfo &p = ctx->params[0];
  spw_bind(ctx.get(), 0, 0, 1);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  EXPECT_EQ(p.bound_split, 64);
  ASSERT_NE(p.bound_w_part[0], nullptr);
  ASSERT_NE(p.bound_w_part[1], nullptr);
  EXPECT_EQ(p.bound_w_part[0][5], 5.0f);
  EXPECT_EQ(p.bound_w_part[1][0], 64.0f);
  EXPECT_EQ(p.bound_w_part[1][63], 127.0f);
  EXPECT_EQ(p.value->data, nullptr);
  spw_param(ctx.get(), 0);
  EXPECT_NE(ctx->error.find("no copy of it is bound"), std::string::npos)
      << ctx->error;
  ctx->error.clear();

  // An update within one part runs; one spanning both parts here fails.
  spw_bind(ctx.get(), 1, 0, 1);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  ctx->step = 1;
  std::vector<float> g(128, 0.5f);
  auto grad = spwtest::f32({128}, g);
  spw_adamw_range(ctx.get(), 0, grad.get(), 64, 128, 0.1, 0.9, 0.999, 1e-8,
                  0.0);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  // Bound on host, the update runs on the CPU optimizer's threads (the
  // step's next move of the block would wait for it).
  ASSERT_EQ(spw::host_optimizer_finish(ctx.get(), false), "");
  const float updated = p.bound_w_part[1][0];
  EXPECT_LT(updated, 64.0f);                // updated
  EXPECT_EQ(p.bound_w_part[0][63], 63.0f);  // untouched
  spw_adamw_range(ctx.get(), 0, grad.get(), 0, 128, 0.1, 0.9, 0.999, 1e-8,
                  0.0);
  EXPECT_NE(ctx->error.find("span both parts of its split block"),
            std::string::npos)
      << ctx->error;
  ctx->error.clear();

  // Part 1 alone on the GPU: bound there, part 0 is not.
  int32_t t = spw_move_part(ctx.get(), 0, 0, 1, 1, 0, 0, 0);
  spw_await(ctx.get(), t);
  spw_bind(ctx.get(), 0, 0, 0);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  EXPECT_EQ(p.bound_w_part[0], nullptr);
  EXPECT_EQ(p.bound_w_part[1][0], updated); // the GPU copy of part 1
  spw_adamw_range(ctx.get(), 0, grad.get(), 0, 64, 0.1, 0.9, 0.999, 1e-8,
                  0.0);
  EXPECT_NE(ctx->error.find("are not bound"), std::string::npos)
      << ctx->error;
  ctx->error.clear();
  // Both parts on the GPU are back to back: the parameter reads whole.
  t = spw_move_part(ctx.get(), 0, 0, 0, 1, 0, 0, 0);
  spw_await(ctx.get(), t);
  spw_bind(ctx.get(), 0, 0, 0);
  spw_tensor *w = spw_param(ctx.get(), 0);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  EXPECT_EQ(w->as<float>()[63], 63.0f);
  EXPECT_EQ(w->as<float>()[64], updated);
  // Parts: 2 only, and the GPU copy goes part by part.
  spw_move_part(ctx.get(), 0, 0, 2, 1, 0, 0, 0);
  EXPECT_NE(ctx->error.find("has no part 2 (2 parts)"), std::string::npos)
      << ctx->error;
  ctx->error.clear();
  spw_drop_part(ctx.get(), 0, 0, 0, 0);
  spw_drop_part(ctx.get(), 0, 0, 1, 0);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;

  // Gathered, the plain copies have both parts' values (part 1 updated).
  spw::tiers_gather(ctx.get());
  const float *v = ctx->params[0].value->as<float>();
  EXPECT_EQ(v[0], 0.0f);
  EXPECT_EQ(v[63], 63.0f);
  EXPECT_EQ(v[64], updated);
  EXPECT_EQ(ctx->params[0].adam_m.size(), 128u);
  EXPECT_EQ(ctx->params[0].adam_m[0], 0.0f);
  EXPECT_NE(ctx->params[0].adam_m[64], 0.0f);
  EXPECT_EQ(p.bound_split, -1);
}

// An activation block: put copies the tensor into the GPU copy and frees
// the tensor's memory; the block goes to host and back; take gives a new
// tensor with the same values. Every misuse is an error naming the block.
TEST(Tiers, ActivationsPutMoveTake) {
  auto ctx = context_with_param();
  const int64_t predicted[4] = {0, 0, 0, 0};
  spw_declare_tiers(ctx.get(), 4096, 8192, 0, "", predicted);
  spw_declare_activation(ctx.get(), 3, 24);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  spw_declare_activation(ctx.get(), 3, 24);
  EXPECT_NE(ctx->error.find("activation block 3 declared twice"),
            std::string::npos)
      << ctx->error;
  ctx->error.clear();
  spw_declare_activation(ctx.get(), 4, 0);
  EXPECT_NE(ctx->error.find("invalid activation block"), std::string::npos)
      << ctx->error;
  ctx->error.clear();
  spw::tiers_start(ctx.get(), {}, spw::storage::Backend::Threads);

  const int64_t dims[] = {2, 3};
  auto x = spw::make_tensor(SPW_F32, 2, dims, "x");
  for (int i = 0; i < 6; ++i)
    x->as<float>()[i] = float(i) * 1.25f;
  // Not declared, wrong size, no offset: errors, and x keeps its memory.
  spw_put_activation(ctx.get(), 9, x.get(), 0);
  EXPECT_NE(ctx->error.find("declares no activations block for layer 9"),
            std::string::npos)
      << ctx->error;
  ctx->error.clear();
  const int64_t small[] = {2, 2};
  auto y = spw::make_tensor(SPW_F32, 2, small, "y");
  spw_put_activation(ctx.get(), 3, y.get(), 0);
  EXPECT_NE(ctx->error.find("activations/3: the tensor f32 [2,2] has 16 "
                            "bytes, the block 24"),
            std::string::npos)
      << ctx->error;
  ctx->error.clear();
  spw_put_activation(ctx.get(), 3, x.get(), -1);
  EXPECT_NE(ctx->error.find("no offset for its GPU copy"), std::string::npos)
      << ctx->error;
  ctx->error.clear();
  ASSERT_NE(x->data, nullptr);
  // Taken before anything was put.
  spw_take_activation(ctx.get(), 3, SPW_F32, 2, dims);
  EXPECT_NE(ctx->error.find("activations/3: nothing was put into it"),
            std::string::npos)
      << ctx->error;
  ctx->error.clear();

  spw_put_activation(ctx.get(), 3, x.get(), 256);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  EXPECT_EQ(x->data, nullptr); // its memory is gone
  EXPECT_EQ(x->owned, nullptr);
  spw_put_activation(ctx.get(), 3, x.get(), 256);
  EXPECT_NE(ctx->error.find("already freed"), std::string::npos)
      << ctx->error;
  ctx->error.clear();
  spw_await(ctx.get(), spw_move(ctx.get(), SPW_BLOCK_ACTIVATIONS, 3,
                                SPW_TIER_GPU, SPW_TIER_HOST, 2, 4096));
  spw_drop(ctx.get(), SPW_BLOCK_ACTIVATIONS, 3, SPW_TIER_GPU);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  spw_take_activation(ctx.get(), 3, SPW_F32, 2, dims);
  EXPECT_NE(ctx->error.find("activations/3 has no GPU copy"),
            std::string::npos)
      << ctx->error;
  ctx->error.clear();
  spw_await(ctx.get(), spw_move(ctx.get(), SPW_BLOCK_ACTIVATIONS, 3,
                                SPW_TIER_HOST, SPW_TIER_GPU, 0, 512));
  spw_drop(ctx.get(), SPW_BLOCK_ACTIVATIONS, 3, SPW_TIER_HOST);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  const int64_t other[] = {3, 2};
  spw_take_activation(ctx.get(), 3, SPW_F32, 2, other);
  EXPECT_NE(ctx->error.find("taken as another type than the f32 [2,3]"),
            std::string::npos)
      << ctx->error;
  ctx->error.clear();
  spw_tensor *back = spw_take_activation(ctx.get(), 3, SPW_F32, 2, dims);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  ASSERT_EQ(back->numel, 6);
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(back->as<float>()[i], float(i) * 1.25f);
  spw_drop(ctx.get(), SPW_BLOCK_ACTIVATIONS, 3, SPW_TIER_GPU);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
}

// The run's SSD wear line (tiers_ssd_writes): the training steps' SSD
// bytes, per step and token, against the plan's. Each step here writes an
// activation block of 24 bytes to SSD: one 4 KiB O_DIRECT write.
TEST(Tiers, SsdWritesAreSummedAndComparedWithThePlan) {
  std::string dir =
      (std::filesystem::temp_directory_path() / "spw_wear_XXXXXX").string();
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  for (int64_t planned : {4096, 8192}) {
    auto ctx = context_with_param();
    const int64_t predicted[4] = {0, planned, 0, 0};
    spw_declare_tiers(ctx.get(), 4096, 8192, 8192, "", predicted);
    spw_declare_activation(ctx.get(), 0, 24);
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    spw::tiers_start(ctx.get(), {dir}, spw::storage::Backend::Threads);
    const int64_t dims[] = {2, 3};
    // No step yet: nothing to say.
    EXPECT_EQ(spw::tiers_ssd_writes(ctx.get(), 6), "");
    for (int step = 0; step < 3; ++step) {
      spw::tiers_step_begin(ctx.get());
      auto x = spw::make_tensor(SPW_F32, 2, dims, "x");
      spw_put_activation(ctx.get(), 0, x.get(), 0);
      spw_await(ctx.get(), spw_move(ctx.get(), SPW_BLOCK_ACTIVATIONS, 0,
                                    SPW_TIER_GPU, SPW_TIER_HOST, 2, 0));
      spw_drop(ctx.get(), SPW_BLOCK_ACTIVATIONS, 0, SPW_TIER_GPU);
      spw_await(ctx.get(), spw_move(ctx.get(), SPW_BLOCK_ACTIVATIONS, 0,
                                    SPW_TIER_HOST, SPW_TIER_SSD, 2, 0));
      spw_drop(ctx.get(), SPW_BLOCK_ACTIVATIONS, 0, SPW_TIER_HOST);
      spw_drop(ctx.get(), SPW_BLOCK_ACTIVATIONS, 0, SPW_TIER_SSD);
      spw::tiers_step_end(ctx.get());
      ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    }
    // 3 x 4096 bytes; 4096 / 6 tokens = 683 bytes a token.
    const std::string line = spw::tiers_ssd_writes(ctx.get(), 6);
    if (planned == 4096)
      EXPECT_EQ(line, "ssd writes: 12.3 KB in 3 steps (4.1 KB/step, 683 "
                      "B/token), as planned");
    else
      EXPECT_EQ(line, "ssd writes: 12.3 KB in 3 steps (4.1 KB/step, 683 "
                      "B/token), NOT as planned (the plan writes 8192 bytes "
                      "per step)");
    // Without a token input: per step only.
    EXPECT_EQ(spw::tiers_ssd_writes(ctx.get(), 0).rfind(
                  "ssd writes: 12.3 KB in 3 steps (4.1 KB/step), ", 0),
              0u);
    const std::string json = spw::tiers_stats_json(ctx.get(), 1.0, 3, 6);
    EXPECT_NE(json.find("\"ssd_writes\": {\"bytes\": 12288, \"steps\": 3, "
                        "\"bytes_per_step\": 4096, \"tokens_per_step\": 6, "
                        "\"bytes_per_token\": 682.66666666666663, "
                        "\"planned_bytes_per_step\": " +
                        std::to_string(planned) + ", \"as_planned\": " +
                        (planned == 4096 ? "true" : "false") +
                        ", \"outside_steps_bytes\": 0}"),
              std::string::npos)
        << json;
  }
  std::filesystem::remove_all(dir);
}

// --stats-json's step_arena: the device's step arena, the most the step's
// tensors held in it, and what the plan's GPU budget left them
// (spw_declare_step_arena; null when none was declared).
TEST(Tiers, StatsReportTheStepArenaAgainstThePlan) {
  for (int64_t planned : {-1, 6144}) {
    auto ctx = context_with_param();
    const int64_t predicted[4] = {0, 0, 0, 0};
    spw_declare_tiers(ctx.get(), 4096, 0, 0, "", predicted);
    if (planned >= 0)
      spw_declare_step_arena(ctx.get(), planned);
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    spw::device_start(ctx.get(),
                      spw::make_loopback_device(1 << 20, spw::Precision::FP32));
    spw::tiers_start(ctx.get(), {}, spw::storage::Backend::Threads);
    spw::Device &d = *ctx->device;
    void *a = d.step_alloc(8192, "a");
    void *b = d.step_alloc(4096, "b");
    d.step_free(a);
    d.step_free(b);
    const int64_t peak = d.step_bytes_peak();
    EXPECT_GE(peak, 8192 + 4096);
    const std::string json = spw::tiers_stats_json(ctx.get(), 1.0, 0, 0);
    EXPECT_NE(
        json.find(
            "\"step_arena\": {\"bytes\": " + std::to_string(1 << 20) +
            ", \"peak\": " + std::to_string(peak) + ", \"planned\": " +
            (planned < 0 ? std::string("null") : std::to_string(planned)) +
            "}"),
        std::string::npos)
        << json;
    d.reset_step();
  }
}

// A layer's parameters and AdamW state split at the same element (their
// binds share the split point), or neither does.
TEST(Tiers, ParamsAndStateSplitTogether) {
  auto ctx = spw::make_context();
  const int64_t dims[] = {256};
  spw_declare_param(ctx.get(), "v", SPW_F32, 1, dims, 0);
  const int64_t predicted[4] = {0, 0, 0, 0};
  spw_declare_tiers(ctx.get(), 8192, 0, 0, "", predicted);
  const int64_t members[] = {0}, offsets[] = {0};
  spw_declare_block(ctx.get(), 0, 0, 1024, 0, 0, 1, members, offsets);
  spw_declare_block(ctx.get(), 1, 0, 2048, 0, 1024, 1, members, offsets);
  spw_declare_split(ctx.get(), 0, 0, 256);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  spw_declare_split(ctx.get(), 1, 0, 512);
  EXPECT_NE(ctx->error.find("optimizer/layer0 split at 512 bytes, but "
                            "params/layer0 at 256"),
            std::string::npos)
      << ctx->error;
  ctx->error.clear();
  try {
    spw::tiers_start(ctx.get(), {}, spw::storage::Backend::Threads);
    ADD_FAILURE() << "a params split without the state's started";
  } catch (const spw::Error &e) {
    EXPECT_NE(std::string(e.what()).find("split at the same bytes (or "
                                         "neither)"),
              std::string::npos)
        << e.what();
  }
}

} // namespace

namespace {

// On a device whose memory the host cannot read (the loopback device: its
// bytes scrambled, fresh memory NaN), the GPU tier is the device's memory:
// a bound parameter is a device tensor there, staged gradients and their
// mean are computed by the device, an update of GPU-bound state runs on the
// device with the CPU's bits, activations go in and out through it, and
// gather reads it all back.
TEST(Tiers, OnTheLoopbackDeviceTheGpuTierIsTheDevicesMemory) {
  auto ctx = context_with_param();
  const int64_t predicted[4] = {0, 0, 0, 0};
  spw_declare_tiers(ctx.get(), 4096, 8192, 0, "", predicted);
  const int64_t members[] = {0}, offsets[] = {0};
  spw_declare_block(ctx.get(), 0, 0, 24, SPW_TIER_GPU, 256, 1, members,
                    offsets);
  spw_declare_block(ctx.get(), 1, 0, 48, SPW_TIER_GPU, 512, 1, members,
                    offsets);
  spw_declare_block(ctx.get(), 2, 0, 24, -1, 0, 1, members, offsets);
  spw_declare_activation(ctx.get(), 0, 24);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  spw::device_start(ctx.get(),
                    spw::make_loopback_device(1 << 20, spw::Precision::FP32));
  spw::Device &d = *ctx->device;
  spw::tiers_start(ctx.get(), {}, spw::storage::Backend::Threads);
  spw::tiers_scatter(ctx.get());
  spw_bind(ctx.get(), 0, 0, SPW_TIER_GPU);
  spw_bind(ctx.get(), 1, 0, SPW_TIER_GPU);
  spw_tensor *w = spw_param(ctx.get(), 0);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  EXPECT_TRUE(w->on_device);
  float host[6];
  d.download(host, w->data, 24);
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(host[i], 0.5f + float(i));
  EXPECT_NE(w->as<float>()[0], 0.5f); // device bytes are not the host's

  // Two micro-batches' gradients (device tensors) staged, then the mean.
  const int64_t dims[] = {2, 3};
  const float g1[6] = {0.1f, 0.2f, 0.3f, -0.4f, 0.5f, 0.6f};
  const float g2[6] = {0.7f, -0.8f, 0.9f, 1.0f, 1.1f, -1.2f};
  spw_tensor *grads[] = {spw_alloc(ctx.get(), SPW_F32, 2, dims),
                         spw_alloc(ctx.get(), SPW_F32, 2, dims)};
  d.upload(grads[0]->data, g1, 24);
  d.upload(grads[1]->data, g2, 24);
  spw_stage_grads(ctx.get(), 2, 0, 0, 2, grads, 1024);
  spw_tensor *mean = spw_gradient(ctx.get(), 0, 0, SPW_TIER_GPU, 2);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  ASSERT_TRUE(mean->on_device);
  float want_g[6], got_g[6];
  for (int i = 0; i < 6; ++i)
    want_g[i] = (g1[i] + g2[i]) / 2.0f;
  d.download(got_g, mean->data, 24);
  EXPECT_EQ(std::memcmp(got_g, want_g, 24), 0);

  // The update of GPU-bound state runs on the device, with the CPU's bits.
  ctx->step = 1;
  spw_adamw(ctx.get(), 0, mean, 0.1, 0.9, 0.999, 1e-8, 0.01);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  float want_w[6], m[6] = {}, v[6] = {};
  for (int i = 0; i < 6; ++i)
    want_w[i] = 0.5f + float(i);
  spw::adamw_kernel(want_w, m, v, want_g, 6, 1,
                    spw::AdamWHparams{0.1, 0.9, 0.999, 1e-8, 0.01});

  // An activation put into the GPU tier and taken back, by the device.
  spw_tensor *x = spw_alloc(ctx.get(), SPW_F32, 2, dims);
  d.upload(x->data, g2, 24);
  spw_put_activation(ctx.get(), 0, x, 2048);
  spw_tensor *back = spw_take_activation(ctx.get(), 0, SPW_F32, 2, dims);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  EXPECT_EQ(x->data, nullptr);
  d.download(host, back->data, 24);
  EXPECT_EQ(std::memcmp(host, g2, 24), 0);
  spw::tiers_gather(ctx.get());
  const float *got_w = ctx->params[0].value->as<float>();
  EXPECT_EQ(std::memcmp(got_w, want_w, 24), 0);
  EXPECT_EQ(std::memcmp(ctx->params[0].adam_m.data(), m, 24), 0);
  EXPECT_EQ(std::memcmp(ctx->params[0].adam_v.data(), v, 24), 0);
}

// Gradient clipping in a plan: spw_grad_norms takes the norm of a layer's
// gradient mean in its block (here on the loopback device's GPU tier, which
// the host cannot read), and spw_clip_grad_norm_of turns the recorded norms
// into the coefficient spw_clip_grad_norm gives for the same mean as a
// tensor. Out of order or misplaced calls are errors naming what is wrong.
TEST(Tiers, GradientNormsInBlocksGiveTheResidentCoefficient) {
  const int64_t dims[] = {2, 3};
  const float g1[6] = {0.1f, 0.2f, 0.3f, -0.4f, 0.5f, 0.6f};
  const float g2[6] = {0.7f, -0.8f, 0.9f, 1.0f, 1.1f, -1.2f};
  // The resident run: spw_clip_grad_norm of the mean as a host tensor.
  auto ref = context_with_param();
  spw_declare_grad_clip(ref.get(), 0.5);
  ref->step = 1;
  auto mean = spwtest::make(SPW_F32, {2, 3});
  for (int i = 0; i < 6; ++i)
    mean->as<float>()[i] = (g1[i] + g2[i]) / 2.0f;
  spw_tensor *grads_ref[] = {mean.get()};
  spw_clip_grad_norm(ref.get(), 1, grads_ref, 0.5);
  ASSERT_TRUE(ref->error.empty()) << ref->error;
  ASSERT_LT(ref->grad_clip.scale, 1.0f); // it clips

  auto ctx = context_with_param();
  spw_declare_grad_clip(ctx.get(), 0.5);
  const int64_t predicted[4] = {0, 0, 0, 0};
  spw_declare_tiers(ctx.get(), 4096, 8192, 0, "", predicted);
  const int64_t members[] = {0}, offsets[] = {0};
  spw_declare_block(ctx.get(), 0, 0, 24, SPW_TIER_GPU, 256, 1, members,
                    offsets);
  spw_declare_block(ctx.get(), 1, 0, 48, SPW_TIER_GPU, 512, 1, members,
                    offsets);
  spw_declare_block(ctx.get(), 2, 0, 24, -1, 0, 1, members, offsets);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  spw::device_start(ctx.get(),
                    spw::make_loopback_device(1 << 20, spw::Precision::FP32));
  spw::Device &d = *ctx->device;
  spw::tiers_start(ctx.get(), {}, spw::storage::Backend::Threads);
  spw::tiers_scatter(ctx.get());
  ctx->step = 1;
  spw_tensor *grads[] = {spw_alloc(ctx.get(), SPW_F32, 2, dims),
                         spw_alloc(ctx.get(), SPW_F32, 2, dims)};
  d.upload(grads[0]->data, g1, 24);
  d.upload(grads[1]->data, g2, 24);
  // Before any norm is taken the coefficient cannot be computed.
  const int64_t params[] = {0};
  spw_clip_grad_norm_of(ctx.get(), 1, params, 0.5);
  EXPECT_NE(ctx->error.find("the norm of parameter 'w''s gradient was not "
                            "taken at step 1 (spw_grad_norms of its layer "
                            "must come first)"),
            std::string::npos)
      << ctx->error;
  ctx->error.clear();
  spw_stage_grads(ctx.get(), 2, 0, 0, 2, grads, 1024);
  spw_grad_norms(ctx.get(), 0, SPW_TIER_HOST, 2);
  EXPECT_NE(ctx->error.find("spw_grad_norms: gradients/layer0 has no copy "
                            "on host"),
            std::string::npos)
      << ctx->error;
  ctx->error.clear();
  spw_grad_norms(ctx.get(), 0, SPW_TIER_GPU, 2);
  spw_clip_grad_norm_of(ctx.get(), 1, params, 0.5);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  EXPECT_EQ(ctx->grad_clip.step, 1);
  EXPECT_EQ(ctx->grad_clip.norm, ref->grad_clip.norm);
  EXPECT_EQ(ctx->grad_clip.scale, ref->grad_clip.scale);
  // A norm taken at step 1 does not serve step 2.
  ctx->step = 2;
  spw_clip_grad_norm_of(ctx.get(), 1, params, 0.5);
  EXPECT_NE(ctx->error.find("was not taken at step 2"), std::string::npos)
      << ctx->error;
  ctx->error.clear();
  const int64_t unknown[] = {3};
  spw_clip_grad_norm_of(ctx.get(), 1, unknown, 0.5);
  EXPECT_NE(ctx->error.find("parameter index 3 out of range"),
            std::string::npos)
      << ctx->error;
}

} // namespace
// The optimizer overlap's deferred gradient slice is kept in the plan's
// `pending` block (its home in the host arena), not beside it, and the
// deferred update applied from there is the one made from a plain copy.
TEST(Tiers, DeferredGradientSliceLivesInItsPendingBlock) {
  auto run = [](bool planned) {
    auto ctx = context_with_param();
    if (planned) {
      const int64_t predicted[4] = {0, 0, 0, 0};
      spw_declare_tiers(ctx.get(), 0, 8192, 0, "", predicted);
      const int64_t members[] = {0}, offsets[] = {0};
      // The leading 4 of w's 6 elements, at offset 4096 of the host arena.
      spw_declare_block(ctx.get(), SPW_BLOCK_PENDING, 0, 16, 1, 4096, 1,
                        members, offsets);
      EXPECT_TRUE(ctx->error.empty()) << ctx->error;
      spw::tiers_start(ctx.get(), {}, spw::storage::Backend::Threads);
    }
    spwtest::Tensor g = spwtest::f32({2, 3}, {1, -2, 3, -4, 5, -6});
    ctx->step = 1;
    spw_adamw_defer(ctx.get(), 0, g.get(), 0, 4, 0.1, 0.9, 0.999, 1e-8, 0.01);
    EXPECT_TRUE(ctx->error.empty()) << ctx->error;
    const spw::PendingAdamW &q = ctx->params[0].pending.at(0);
    if (planned) {
      float *slot = spw::tiers_pending_grad(ctx.get(), 0, 0, 4, false);
      EXPECT_NE(slot, nullptr);
      EXPECT_EQ(q.planned, slot);
      EXPECT_TRUE(q.grad.empty());
      for (int i = 0; i < 4; ++i)
        EXPECT_EQ(slot[i], g->as<float>()[i]);
      // More elements than the block holds: an error naming it.
      EXPECT_THROW(spw::tiers_pending_grad(ctx.get(), 0, 0, 5, false), spw::Error);
    } else {
      EXPECT_EQ(q.planned, nullptr);
    }
    ctx->step = 2;
    spw_adamw_apply_pending(ctx.get(), 0, 0, 4);
    EXPECT_TRUE(ctx->error.empty()) << ctx->error;
    std::vector<float> w(6);
    std::memcpy(w.data(), ctx->params[0].value->data, 6 * sizeof(float));
    return w;
  };
  EXPECT_EQ(run(true), run(false));
}

// ---- a bf16-mixed plan: bf16 working copies in the params blocks -----------

namespace {

using Bits = std::vector<uint32_t>;
using Halves = std::vector<uint16_t>;
constexpr double kLr = 0.1, kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8,
                 kDecay = 0.01;

// Values bf16 rounds: halfway cases to even both ways, a carry into the
// exponent, values far from any bf16.
float tricky(int i) {
  static const float v[] = {
      1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.5f,  0x1.fffffep0f, 0.1f,
      -0.3f,          3.14159f,           -7.77f, 1e-3f};
  return v[i % 9] * float(1 + i / 9);
}

std::vector<float> tricky_values(int first, int n) {
  std::vector<float> out;
  for (int i = 0; i < n; ++i)
    out.push_back(tricky(first + i));
  return out;
}

Bits bits(const float *x, size_t n) {
  Bits out(n);
  std::memcpy(out.data(), x, n * 4);
  return out;
}
Bits bits(const std::vector<float> &x) { return bits(x.data(), x.size()); }

Halves rounded(const float *x, size_t n) {
  Halves out;
  for (size_t i = 0; i < n; ++i)
    out.push_back(spw::to_bf16(x[i]).bits);
  return out;
}
Halves rounded(const std::vector<float> &x) {
  return rounded(x.data(), x.size());
}

// n elements of type T at `p`: a GPU-tier (device) address or a host one.
template <class T>
std::vector<T> fetch(spw_ctx *ctx, const void *p, size_t n, bool gpu) {
  std::vector<T> out(n);
  if (!p) {
    ADD_FAILURE() << "nothing bound";
    return out;
  }
  if (gpu)
    ctx->device->download(out.data(), p, int64_t(n * sizeof(T)));
  else
    std::memcpy(out.data(), p, n * sizeof(T));
  return out;
}

// The resident fp32 run: AdamW at step 1 of the ranges of a plain copy.
std::vector<float>
resident_adamw(const std::vector<float> &w, const std::vector<float> &g,
               const std::vector<std::pair<int, int>> &ranges) {
  auto ctx = spw::make_context();
  const int64_t dims[] = {int64_t(w.size())};
  spw_declare_param(ctx.get(), "r", SPW_F32, 1, dims, 0);
  std::memcpy(ctx->params[0].value->data, w.data(), w.size() * 4);
  ctx->step = 1;
  auto grad = spwtest::f32({int64_t(g.size())}, g);
  for (auto [lo, hi] : ranges)
    spw_adamw_range(ctx.get(), 0, grad.get(), lo, hi, kLr, kBeta1, kBeta2, kEps,
                    kDecay);
  EXPECT_TRUE(ctx->error.empty()) << ctx->error;
  return spwtest::values(*ctx->params[0].value);
}

// A step tensor holding `g`, where the device's update reads it.
spw_tensor *device_grad(spw_ctx *ctx, const std::vector<float> &g) {
  const int64_t dims[] = {int64_t(g.size())};
  spw_tensor *t = spw_alloc(ctx, SPW_F32, 1, dims);
  ctx->device->upload(t->data, g.data(), int64_t(g.size() * 4));
  return t;
}

std::unique_ptr<spw::Device> device_of(bool loopback) {
  return loopback ? spw::make_loopback_device(1 << 20, spw::Precision::FP32)
                  : spw::make_cpu_device();
}

// A bf16-mixed model with parameters "a" (6 elements) and "b" (5) of one
// layer, and (plan) their params (bf16: 12 + 10 bytes), master (f32) and
// optimizer blocks, all homed on `home`.
std::unique_ptr<spw_ctx> bf16_plan(int home) {
  auto ctx = spw::make_context();
  const int64_t da[] = {6}, db[] = {5};
  spw_declare_param(ctx.get(), "a", SPW_F32, 1, da, 0);
  spw_declare_param(ctx.get(), "b", SPW_F32, 1, db, 24);
  for (int i = 0; i < 2; ++i) {
    spw::ParamInfo &p = ctx->params[size_t(i)];
    const std::vector<float> v = tricky_values(6 * i, int(p.value->numel));
    std::memcpy(p.value->data, v.data(), v.size() * 4);
  }
  spw_declare_bf16_mixed(ctx.get());
  const int64_t predicted[4] = {0, 0, 0, 0};
  spw_declare_tiers(ctx.get(), 4096, 16384, 0, "", predicted);
  const bool gpu = home == SPW_TIER_GPU;
  const int64_t members[] = {0, 1}, work_at[] = {0, 12}, master_at[] = {0, 24};
  spw_declare_block(ctx.get(), SPW_BLOCK_PARAMS, 0, 24, home, 0, 2, members,
                    work_at);
  spw_declare_block(ctx.get(), SPW_BLOCK_MASTER, 0, 44, home, gpu ? 256 : 4096,
                    2, members, master_at);
  spw_declare_block(ctx.get(), SPW_BLOCK_OPTIMIZER, 0, 88, home,
                    gpu ? 512 : 8192, 2, members, master_at);
  return ctx;
}

// Bound on the GPU tier the update runs on the device, on the host tier on
// the CPU optimizer's threads; either way the master is the resident fp32
// AdamW's and the working copy its rounding, bit for bit, and gather gives
// the masters back.
TEST(Tiers, Bf16PlanUpdatesTheMasterAndItsWorkingCopy) {
  for (bool loopback : {false, true})
    for (int tier : {SPW_TIER_GPU, SPW_TIER_HOST}) {
      const bool gpu = tier == SPW_TIER_GPU;
      SCOPED_TRACE(std::string(loopback ? "loopback" : "cpu") +
                   (gpu ? ", gpu tier" : ", host tier"));
      auto ctx = bf16_plan(tier);
      ASSERT_TRUE(ctx->error.empty()) << ctx->error;
      std::vector<float> initial[2];
      for (int i = 0; i < 2; ++i)
        initial[i] = spwtest::values(*ctx->params[size_t(i)].value);
      spw::device_start(ctx.get(), device_of(loopback));
      spw::tiers_start(ctx.get(), {}, spw::storage::Backend::Threads);
      EXPECT_TRUE(spw::tiers_bf16_params(ctx.get()));
      EXPECT_EQ(spw::tiers_stream_members(ctx.get(), SPW_BLOCK_PARAMS),
                std::vector<int32_t>({0, 1}));
      spw::tiers_scatter(ctx.get());
      spw_param_work(ctx.get(), 0);
      EXPECT_NE(ctx->error.find("parameter 'a' is read while no copy of its "
                                "bf16 working copy is bound"),
                std::string::npos)
          << ctx->error;
      ctx->error.clear();
      for (int cls : {SPW_BLOCK_PARAMS, SPW_BLOCK_MASTER, SPW_BLOCK_OPTIMIZER})
        spw_bind(ctx.get(), cls, 0, tier);
      ASSERT_TRUE(ctx->error.empty()) << ctx->error;

      // The params block holds the rounding of the values.
      for (int i = 0; i < 2; ++i) {
        spw::ParamInfo &p = ctx->params[size_t(i)];
        const size_t n = initial[i].size();
        EXPECT_EQ(p.work_on_device, gpu);
        EXPECT_EQ(fetch<uint16_t>(ctx.get(), p.bound_work_part[0], n, gpu),
                  rounded(initial[i]));
        if (gpu) {
          spw_tensor *w = spw_param_work(ctx.get(), i);
          ASSERT_TRUE(ctx->error.empty()) << ctx->error;
          EXPECT_EQ(w->dtype, SPW_BF16);
          EXPECT_TRUE(w->on_device);
          EXPECT_EQ(w->data, p.bound_work_part[0]);
          EXPECT_EQ(fetch<uint16_t>(ctx.get(), w->data, n, true),
                    rounded(initial[i]));
        }
      }

      ctx->step = 1;
      std::vector<float> g[2], want[2];
      for (int i = 0; i < 2; ++i) {
        const int n = int(initial[i].size());
        for (int k = 0; k < n; ++k)
          g[i].push_back(0.25f * float(k + 1) * (k % 2 ? -1.0f : 1.0f));
        want[i] = resident_adamw(initial[i], g[i], {{0, n}});
        ASSERT_NE(bits(want[i]), bits(initial[i])); // the update changes it
        spw_adamw(ctx.get(), i, device_grad(ctx.get(), g[i]), kLr, kBeta1,
                  kBeta2, kEps, kDecay);
        ASSERT_TRUE(ctx->error.empty()) << ctx->error;
        EXPECT_EQ(spw::tiers_host_bound(ctx.get(), i), !gpu);
      }
      if (!gpu) {
        // The working copies go to the GPU tier for the next forward: the
        // move waits for the CPU optimizer's writes.
        spw_await(ctx.get(), spw_move(ctx.get(), SPW_BLOCK_PARAMS, 0,
                                      SPW_TIER_HOST, SPW_TIER_GPU, 0, 0));
        spw_bind(ctx.get(), SPW_BLOCK_PARAMS, 0, SPW_TIER_GPU);
        ASSERT_TRUE(ctx->error.empty()) << ctx->error;
        ASSERT_EQ(spw::host_optimizer_finish(ctx.get(), false), "");
      }
      for (int i = 0; i < 2; ++i) {
        spw::ParamInfo &p = ctx->params[size_t(i)];
        const size_t n = want[i].size();
        const void *master = gpu ? p.dev_value->data : p.value->data;
        EXPECT_EQ(bits(fetch<float>(ctx.get(), master, n, gpu)), bits(want[i]));
        // Read as the step reads it, from the GPU tier (the master need not
        // be there).
        spw_tensor *w = spw_param_work(ctx.get(), i);
        ASSERT_TRUE(ctx->error.empty()) << ctx->error;
        EXPECT_EQ(fetch<uint16_t>(ctx.get(), w->data, n, true),
                  rounded(want[i]));
      }
      if (!gpu)
        spw_drop(ctx.get(), SPW_BLOCK_PARAMS, 0, SPW_TIER_GPU);
      spw::tiers_gather(ctx.get());
      ASSERT_TRUE(ctx->error.empty()) << ctx->error;
      for (int i = 0; i < 2; ++i) {
        spw::ParamInfo &p = ctx->params[size_t(i)];
        EXPECT_EQ(bits(spwtest::values(*p.value)), bits(want[i]));
        EXPECT_EQ(p.bound_work_part[0], nullptr);
        EXPECT_EQ(p.dev_work->data, nullptr);
        EXPECT_EQ(p.adam_m.size(), want[i].size());
      }
    }
}

// bf16 optimizer state (--optimizer-state-dtype bf16) without a plan:
// parameters "a" (6 elements) and "b" (5) trained `steps` steps with the
// gradients of grads_at(step) on `loopback` or the CPU; their weights and
// (widened) moments after.
struct Trained {
  std::vector<float> w[2], m[2], v[2];
};
std::vector<float> grads_at(int step, int i, int n) {
  std::vector<float> g;
  for (int k = 0; k < n; ++k)
    g.push_back(0.25f * float(k + 1 + step + i) * (k % 2 ? -1.0f : 1.0f));
  return g;
}
Trained resident_bf16_state(int steps, bool loopback) {
  auto ctx = spw::make_context();
  const int64_t da[] = {6}, db[] = {5};
  spw_declare_param(ctx.get(), "a", SPW_F32, 1, da, 0);
  spw_declare_param(ctx.get(), "b", SPW_F32, 1, db, 24);
  for (int i = 0; i < 2; ++i) {
    spw::ParamInfo &p = ctx->params[size_t(i)];
    const std::vector<float> v = tricky_values(6 * i, int(p.value->numel));
    std::memcpy(p.value->data, v.data(), v.size() * 4);
  }
  spw_declare_optimizer_state_dtype(ctx.get(), SPW_BF16);
  spw::device_start(ctx.get(), device_of(loopback));
  for (int t = 1; t <= steps; ++t) {
    ctx->step = t;
    for (int i = 0; i < 2; ++i) {
      const int n = int(ctx->params[size_t(i)].value->numel);
      spw_adamw(ctx.get(), i, device_grad(ctx.get(), grads_at(t, i, n)), kLr,
                kBeta1, kBeta2, kEps, kDecay);
    }
    spw::clear_step(ctx.get());
  }
  spw::device_pull(ctx.get());
  EXPECT_TRUE(ctx->error.empty()) << ctx->error;
  Trained out;
  for (int i = 0; i < 2; ++i) {
    const spw::ParamInfo &p = ctx->params[size_t(i)];
    out.w[i] = spwtest::values(*p.value);
    out.m[i] = p.adam_m;
    out.v[i] = p.adam_v;
  }
  return out;
}

// An offload plan with bf16 optimizer state: the optimizer block holds 2
// bytes per moment element (m of a and b at 0 and 12 of 22, v after), in
// an fp32 plan and in a bf16-mixed one (master blocks). Bound on the GPU
// tier (the device's update) or on host (the CPU optimizer), two steps,
// then gathered (the moments widened), scattered again (rounded: exact)
// and a third step: the resident run's weights and moments, bit for bit.
TEST(Tiers, Bf16StatePlanUpdatesAsTheResidentRun) {
  for (bool mixed : {false, true})
    for (bool loopback : {false, true})
      for (int tier : {SPW_TIER_GPU, SPW_TIER_HOST}) {
        const bool gpu = tier == SPW_TIER_GPU;
        SCOPED_TRACE(std::string(mixed ? "bf16-mixed, " : "fp32, ") +
                     (loopback ? "loopback" : "cpu") +
                     (gpu ? ", gpu tier" : ", host tier"));
        auto ctx = spw::make_context();
        const int64_t da[] = {6}, db[] = {5};
        spw_declare_param(ctx.get(), "a", SPW_F32, 1, da, 0);
        spw_declare_param(ctx.get(), "b", SPW_F32, 1, db, 24);
        for (int i = 0; i < 2; ++i) {
          spw::ParamInfo &p = ctx->params[size_t(i)];
          const std::vector<float> v =
              tricky_values(6 * i, int(p.value->numel));
          std::memcpy(p.value->data, v.data(), v.size() * 4);
        }
        if (mixed)
          spw_declare_bf16_mixed(ctx.get());
        spw_declare_optimizer_state_dtype(ctx.get(), SPW_BF16);
        const int64_t predicted[4] = {0, 0, 0, 0};
        spw_declare_tiers(ctx.get(), 4096, 16384, 0, "", predicted);
        const int64_t members[] = {0, 1}, f32_at[] = {0, 24},
                      half_at[] = {0, 12};
        spw_declare_block(ctx.get(), SPW_BLOCK_PARAMS, 0, mixed ? 24 : 44, tier,
                          0, 2, members, mixed ? half_at : f32_at);
        if (mixed)
          spw_declare_block(ctx.get(), SPW_BLOCK_MASTER, 0, 44, tier,
                            gpu ? 256 : 4096, 2, members, f32_at);
        spw_declare_block(ctx.get(), SPW_BLOCK_OPTIMIZER, 0, 44, tier,
                          gpu ? 512 : 8192, 2, members, half_at);
        ASSERT_TRUE(ctx->error.empty()) << ctx->error;
        spw::device_start(ctx.get(), device_of(loopback));
        spw::tiers_start(ctx.get(), {}, spw::storage::Backend::Threads);
        ASSERT_TRUE(ctx->error.empty()) << ctx->error;
        auto steps = [&](int first, int last) {
          spw::tiers_scatter(ctx.get());
          for (int cls :
               {SPW_BLOCK_PARAMS, SPW_BLOCK_MASTER, SPW_BLOCK_OPTIMIZER})
            if (cls != SPW_BLOCK_MASTER || mixed)
              spw_bind(ctx.get(), cls, 0, tier);
          ASSERT_TRUE(ctx->error.empty()) << ctx->error;
          EXPECT_TRUE(ctx->params[0].bound_m.half);
          for (int t = first; t <= last; ++t) {
            ctx->step = t;
            for (int i = 0; i < 2; ++i) {
              const int n = int(ctx->params[size_t(i)].value->numel);
              spw_adamw(ctx.get(), i, device_grad(ctx.get(), grads_at(t, i, n)),
                        kLr, kBeta1, kBeta2, kEps, kDecay);
              ASSERT_TRUE(ctx->error.empty()) << ctx->error;
            }
            ASSERT_EQ(spw::host_optimizer_finish(ctx.get(), false), "");
          }
          spw::tiers_gather(ctx.get());
          ASSERT_TRUE(ctx->error.empty()) << ctx->error;
        };
        steps(1, 2);
        const Trained two = resident_bf16_state(2, loopback);
        for (int i = 0; i < 2; ++i) {
          const spw::ParamInfo &p = ctx->params[size_t(i)];
          EXPECT_EQ(bits(spwtest::values(*p.value)), bits(two.w[i]));
          EXPECT_EQ(bits(p.adam_m), bits(two.m[i]));
          EXPECT_EQ(bits(p.adam_v), bits(two.v[i]));
          EXPECT_EQ(rounded(p.adam_v), rounded(two.v[i]));
        }
        steps(3, 3);
        const Trained three = resident_bf16_state(3, loopback);
        for (int i = 0; i < 2; ++i) {
          const spw::ParamInfo &p = ctx->params[size_t(i)];
          EXPECT_EQ(bits(spwtest::values(*p.value)), bits(three.w[i]));
          EXPECT_EQ(bits(p.adam_m), bits(three.m[i]));
          EXPECT_EQ(bits(p.adam_v), bits(three.v[i]));
        }
      }
}

// The optimizer block of a bf16-state plan holds 2 bytes per element: the
// layout that fits bf16 moments overruns as f32 ones.
TEST(Tiers, Bf16StatePlanSizesTheOptimizerBlockAtTwoBytes) {
  for (bool half : {false, true}) {
    SCOPED_TRACE(half ? "bf16 state" : "f32 state");
    auto ctx = spw::make_context();
    const int64_t da[] = {6}, db[] = {5};
    spw_declare_param(ctx.get(), "a", SPW_F32, 1, da, 0);
    spw_declare_param(ctx.get(), "b", SPW_F32, 1, db, 24);
    if (half)
      spw_declare_optimizer_state_dtype(ctx.get(), SPW_BF16);
    const int64_t predicted[4] = {0, 0, 0, 0};
    spw_declare_tiers(ctx.get(), 4096, 16384, 0, "", predicted);
    // m of a at 0 and b at 12 in 22 bytes: bf16 state only.
    const int64_t members[] = {0, 1}, at[] = {0, 12};
    spw_declare_block(ctx.get(), SPW_BLOCK_OPTIMIZER, 0, 44, SPW_TIER_HOST, 0,
                      2, members, at);
    if (half) {
      EXPECT_TRUE(ctx->error.empty()) << ctx->error;
    } else {
      EXPECT_NE(ctx->error.find("block optimizer/layer0: parameter 'a' at "
                                "offset 0 does not fit"),
                std::string::npos)
          << ctx->error;
    }
    // The dtype is declared before the tiers.
    ctx->error.clear();
    spw_declare_optimizer_state_dtype(ctx.get(), SPW_BF16);
    EXPECT_NE(ctx->error.find("declared before the tiers"), std::string::npos)
        << ctx->error;
  }
}

// The updates deferred by the optimizer overlap, applied outside the steps
// (tiers_flush_deferred) a layer at a time: the master, working copy and
// state copies on the tier where the update runs, and written back home.
// Homed on host the update runs on the CPU optimizer (or, without an
// optimizer block, inline on host); homed on the GPU, on the device.
TEST(Tiers, Bf16PlanFlushesDeferredUpdatesIntoMasterAndWorkingCopy) {
  struct Case {
    int home;
    bool optimizer_block, loopback;
  } cases[] = {{SPW_TIER_HOST, true, false},
               {SPW_TIER_HOST, false, false},
               {SPW_TIER_GPU, true, true}};
  for (const Case &c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "home " << c.home << ", optimizer block "
                 << c.optimizer_block << ", loopback " << c.loopback);
    auto ctx = spw::make_context();
    const int64_t dims[] = {6};
    spw_declare_param(ctx.get(), "a", SPW_F32, 1, dims, 0);
    const std::vector<float> v0 = tricky_values(3, 6);
    std::memcpy(ctx->params[0].value->data, v0.data(), 24);
    spw_declare_bf16_mixed(ctx.get());
    const int64_t predicted[4] = {0, 0, 0, 0};
    spw_declare_tiers(ctx.get(), 4096, 16384, 0, "", predicted);
    const int64_t members[] = {0}, offsets[] = {0};
    const bool gpu = c.home == SPW_TIER_GPU;
    spw_declare_block(ctx.get(), SPW_BLOCK_PARAMS, 0, 12, c.home, 0, 1, members,
                      offsets);
    spw_declare_block(ctx.get(), SPW_BLOCK_MASTER, 0, 24, c.home,
                      gpu ? 256 : 4096, 1, members, offsets);
    if (c.optimizer_block)
      spw_declare_block(ctx.get(), SPW_BLOCK_OPTIMIZER, 0, 48, c.home,
                        gpu ? 512 : 8192, 1, members, offsets);
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    spw::device_start(ctx.get(), device_of(c.loopback));
    spw::tiers_start(ctx.get(), {}, spw::storage::Backend::Threads);
    spw::tiers_scatter(ctx.get());
    const std::vector<float> g = {0.5f, -1.0f, 0.25f, 2.0f, -0.125f, 1.5f};
    ctx->step = 1;
    spw_adamw_defer(ctx.get(), 0, device_grad(ctx.get(), g), 0, 6, kLr, kBeta1,
                    kBeta2, kEps, kDecay);
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    ctx->step = 2;
    std::vector<int32_t> applied;
    spw::tiers_flush_deferred(ctx.get(), [&](const std::vector<int32_t> &m) {
      applied = m;
      spw_adamw_flush(ctx.get());
      ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    });
    EXPECT_EQ(applied, std::vector<int32_t>({0}));
    spw::ParamInfo &p = ctx->params[0];
    EXPECT_TRUE(p.pending.empty());
    EXPECT_EQ(p.bound_work_part[0], nullptr); // unbound after
    const std::vector<float> want = resident_adamw(v0, g, {{0, 6}});
    // The working copy went home with the master.
    const int tier = c.home;
    spw_bind(ctx.get(), SPW_BLOCK_PARAMS, 0, tier);
    spw_bind(ctx.get(), SPW_BLOCK_MASTER, 0, tier);
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    EXPECT_EQ(fetch<uint16_t>(ctx.get(), p.bound_work_part[0], 6, gpu),
              rounded(want));
    EXPECT_EQ(bits(fetch<float>(
                  ctx.get(), gpu ? p.dev_value->data : p.value->data, 6, gpu)),
              bits(want));
  }
}

// Split blocks: the params block's 2-byte elements split at the same
// element as the master's and the state's 4-byte ones, each part is
// updated on its own (part 1 by the CPU optimizer on host copies, part 0 by
// the device on GPU copies), and each update writes the rounding of its
// elements only.
TEST(Tiers, Bf16PlanSplitsAtTheSameElementAndUpdatesEachPart) {
  for (bool loopback : {false, true}) {
    SCOPED_TRACE(loopback ? "loopback" : "cpu");
    auto ctx = spw::make_context();
    const int64_t dims[] = {256};
    spw_declare_param(ctx.get(), "v", SPW_F32, 1, dims, 0);
    const std::vector<float> v0 = tricky_values(0, 256);
    std::memcpy(ctx->params[0].value->data, v0.data(), 1024);
    spw_declare_bf16_mixed(ctx.get());
    const int64_t predicted[4] = {0, 0, 0, 0};
    spw_declare_tiers(ctx.get(), 4096, 32768, 0, "", predicted);
    const int64_t members[] = {0}, offsets[] = {0};
    spw_declare_block(ctx.get(), SPW_BLOCK_PARAMS, 0, 512, SPW_TIER_HOST, 0, 1,
                      members, offsets);
    spw_declare_block(ctx.get(), SPW_BLOCK_MASTER, 0, 1024, SPW_TIER_HOST, 8192,
                      1, members, offsets);
    spw_declare_block(ctx.get(), SPW_BLOCK_OPTIMIZER, 0, 2048, SPW_TIER_HOST,
                      16384, 1, members, offsets);
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    // 256 bytes of the params block are 128 elements: the master splits at
    // 512 bytes, the state at 512 bytes of m (and of v).
    spw_declare_split(ctx.get(), SPW_BLOCK_PARAMS, 0, 256);
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    spw_declare_split(ctx.get(), SPW_BLOCK_MASTER, 0, 256);
    EXPECT_NE(ctx->error.find("master/layer0 split at 256 bytes (element "
                              "64), but params/layer0 at 256 bytes (element "
                              "128)"),
              std::string::npos)
        << ctx->error;
    ctx->error.clear();
    spw_declare_split(ctx.get(), SPW_BLOCK_OPTIMIZER, 0, 768);
    EXPECT_NE(ctx->error.find("optimizer/layer0 split at 768 bytes (element "
                              "192), but params/layer0 at 256 bytes (element "
                              "128)"),
              std::string::npos)
        << ctx->error;
    ctx->error.clear();
    spw_declare_split(ctx.get(), SPW_BLOCK_MASTER, 0, 512);
    spw_declare_split(ctx.get(), SPW_BLOCK_OPTIMIZER, 0, 512);
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    spw::device_start(ctx.get(), device_of(loopback));
    spw::tiers_start(ctx.get(), {}, spw::storage::Backend::Threads);
    spw::tiers_scatter(ctx.get());
    spw::ParamInfo &p = ctx->params[0];

    for (int cls : {SPW_BLOCK_PARAMS, SPW_BLOCK_MASTER, SPW_BLOCK_OPTIMIZER})
      spw_bind(ctx.get(), cls, 0, SPW_TIER_HOST);
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    EXPECT_EQ(p.bound_split, 128);
    ASSERT_NE(p.bound_work_part[1], nullptr);
    EXPECT_EQ(fetch<uint16_t>(ctx.get(), p.bound_work_part[0], 128, false),
              rounded(v0.data(), 128));
    EXPECT_EQ(fetch<uint16_t>(ctx.get(), p.bound_work_part[1], 128, false),
              rounded(v0.data() + 128, 128));

    std::vector<float> g;
    for (int k = 0; k < 256; ++k)
      g.push_back(0.01f * float(k % 17) - 0.07f);
    const std::vector<float> half = resident_adamw(v0, g, {{128, 256}});
    const std::vector<float> want =
        resident_adamw(v0, g, {{128, 256}, {0, 128}});
    ctx->step = 1;
    spw_tensor *grad = device_grad(ctx.get(), g);
    spw_adamw_range(ctx.get(), 0, grad, 128, 256, kLr, kBeta1, kBeta2, kEps,
                    kDecay);
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    ASSERT_EQ(spw::host_optimizer_finish(ctx.get(), false), "");
    EXPECT_EQ(bits(p.bound_w_part[1], 128), bits(half.data() + 128, 128));
    EXPECT_EQ(bits(p.bound_w_part[0], 128), bits(v0.data(), 128));
    EXPECT_EQ(fetch<uint16_t>(ctx.get(), p.bound_work_part[1], 128, false),
              rounded(half.data() + 128, 128));
    EXPECT_EQ(fetch<uint16_t>(ctx.get(), p.bound_work_part[0], 128, false),
              rounded(v0.data(), 128)); // untouched

    // Part 0 of the three blocks on the GPU: updated by the device.
    const int64_t gpu_at[] = {0, 1024, 2048};
    const int classes[] = {SPW_BLOCK_PARAMS, SPW_BLOCK_MASTER,
                           SPW_BLOCK_OPTIMIZER};
    for (int k = 0; k < 3; ++k)
      spw_await(ctx.get(),
                spw_move_part(ctx.get(), classes[k], 0, 0, SPW_TIER_HOST,
                              SPW_TIER_GPU, 0, gpu_at[k]));
    for (int cls : classes)
      spw_bind(ctx.get(), cls, 0, SPW_TIER_GPU);
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    EXPECT_TRUE(p.work_on_device);
    EXPECT_EQ(p.bound_work_part[1], nullptr);
    spw_adamw_range(ctx.get(), 0, grad, 0, 128, kLr, kBeta1, kBeta2, kEps,
                    kDecay);
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    EXPECT_EQ(bits(fetch<float>(ctx.get(), p.bound_w_part[0], 128, true)),
              bits(want.data(), 128));
    EXPECT_EQ(fetch<uint16_t>(ctx.get(), p.bound_work_part[0], 128, true),
              rounded(want.data(), 128));
    // Part 1 of the params block too: back to back on the GPU, the step
    // reads the working copy whole.
    spw_await(ctx.get(), spw_move_part(ctx.get(), SPW_BLOCK_PARAMS, 0, 1,
                                       SPW_TIER_HOST, SPW_TIER_GPU, 0, 0));
    spw_bind(ctx.get(), SPW_BLOCK_PARAMS, 0, SPW_TIER_GPU);
    spw_tensor *w = spw_param_work(ctx.get(), 0);
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    EXPECT_EQ(fetch<uint16_t>(ctx.get(), w->data, 256, true), rounded(want));

    // Home again, gathered: the masters of both parts' updates.
    for (int cls : classes) {
      spw_await(ctx.get(), spw_move_part(ctx.get(), cls, 0, 0, SPW_TIER_GPU,
                                         SPW_TIER_HOST, 2, 0));
      spw_drop(ctx.get(), cls, 0, SPW_TIER_GPU);
    }
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    spw::tiers_gather(ctx.get());
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    EXPECT_EQ(bits(spwtest::values(*p.value)), bits(want));
  }
}

// A plan's params and master blocks split at different elements, found once
// the plan is complete (the params block was split before the plan had a
// master block, when its element size was not known).
TEST(Tiers, Bf16PlanRefusesSplitsThatDisagreeAtStart) {
  auto ctx = spw::make_context();
  const int64_t dims[] = {256};
  spw_declare_param(ctx.get(), "v", SPW_F32, 1, dims, 0);
  spw_declare_bf16_mixed(ctx.get());
  const int64_t predicted[4] = {0, 0, 0, 0};
  spw_declare_tiers(ctx.get(), 8192, 0, 0, "", predicted);
  const int64_t members[] = {0}, offsets[] = {0};
  spw_declare_block(ctx.get(), SPW_BLOCK_PARAMS, 0, 512, SPW_TIER_GPU, 0, 1,
                    members, offsets);
  spw_declare_split(ctx.get(), SPW_BLOCK_PARAMS, 0, 256);
  spw_declare_block(ctx.get(), SPW_BLOCK_MASTER, 0, 1024, SPW_TIER_GPU, 1024, 1,
                    members, offsets);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  try {
    spw::tiers_start(ctx.get(), {}, spw::storage::Backend::Threads);
    ADD_FAILURE() << "a split params block with a whole master started";
  } catch (const spw::Error &e) {
    EXPECT_NE(std::string(e.what()).find(
                  "params/layer0 is split at 256 bytes (element 128) but "
                  "master/layer0 at 0 bytes (element 0)"),
              std::string::npos)
        << e.what();
  }
}

std::string start_error(spw_ctx *ctx) {
  try {
    spw::tiers_start(ctx, {}, spw::storage::Backend::Threads);
  } catch (const spw::Error &e) {
    return e.what();
  }
  return "";
}

// Starting the tiers fails with an error containing `want`, or ("")
// succeeds.
void expect_start_error(spw_ctx *ctx, const char *want) {
  const std::string e = start_error(ctx);
  if (*want)
    EXPECT_NE(e.find(want), std::string::npos) << e;
  else
    EXPECT_EQ(e, "");
}

// A master block cut for ZeRO's ranks must be laid out as the compiler lays
// it out (spw_zero_sharded_layout of 4-byte elements, split where the
// params block is): one of the whole values, or one of 2 ranks split
// elsewhere, is refused at the start, naming both layouts.
TEST(Tiers, CutMasterBlockMustBeTheShardsLayout) {
  struct Case {
    int64_t master_bytes, params_split, master_split;
    const char *want;
  };
  const Case cases[] = {
      {1024, 0, 0,
       "master/layer0 (1024 bytes, split at 0) is not laid out as a master "
       "block cut for 2 ranks is (512 bytes, split at 0)"},
      // 128 elements deferred (the params block's first 256 bytes): each
      // rank's shard is in one part, so each part keeps a slot of 128
      // elements, part 1 from 512 bytes.
      {1024, 256, 256,
       "master/layer0 (1024 bytes, split at 256) is not laid out as a "
       "master block cut for 2 ranks is (1024 bytes, split at 512)"},
      {1024, 256, 512, ""},
      {512, 0, 0, ""},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.want);
    auto ctx = spw::make_context();
    const int64_t dims[] = {256};
    spw_declare_param(ctx.get(), "v", SPW_F32, 1, dims, 0);
    spw_declare_bf16_mixed(ctx.get());
    spw_declare_optimizer_shards(ctx.get(), 2, 64);
    const int64_t predicted[4] = {0, 0, 0, 0};
    spw_declare_tiers(ctx.get(), 8192, 8192, 0, "", predicted);
    const int64_t members[] = {0}, offsets[] = {0};
    spw_declare_block(ctx.get(), SPW_BLOCK_PARAMS, 0, 512, SPW_TIER_GPU, 0, 1,
                      members, offsets);
    spw_declare_block(ctx.get(), SPW_BLOCK_MASTER, 0, c.master_bytes,
                      SPW_TIER_HOST, 0, 1, members, offsets);
    if (c.params_split)
      spw_declare_split(ctx.get(), SPW_BLOCK_PARAMS, 0, c.params_split);
    if (c.master_split)
      spw_declare_split(ctx.get(), SPW_BLOCK_MASTER, 0, c.master_split);
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    expect_start_error(ctx.get(), c.want);
  }
}

// ZeRO stage 2: a gradient or gradstage block cut for the ranks is laid
// out as a master block is (4-byte elements: 128 of v's 256 per rank);
// the whole gradient's bytes are refused, as is the declaration before
// the optimizer shards it is cut by.
TEST(Tiers, CutGradientBlocksMustBeTheShardsLayout) {
  struct Case {
    int32_t cls;
    int64_t bytes;
    const char *want;
  };
  const Case cases[] = {
      {SPW_BLOCK_GRADIENTS, 1024,
       "gradients/layer0 (1024 bytes, split at 0) is not laid out as a "
       "gradients block cut for 2 ranks is (512 bytes, split at 0)"},
      {SPW_BLOCK_GRADSTAGE, 1024,
       "gradstage/layer0 (1024 bytes, split at 0) is not laid out as a "
       "gradstage block cut for 2 ranks is (512 bytes, split at 0)"},
      {SPW_BLOCK_GRADIENTS, 512, ""},
      {SPW_BLOCK_GRADSTAGE, 512, ""},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.want);
    auto ctx = spw::make_context();
    const int64_t dims[] = {256};
    spw_declare_param(ctx.get(), "v", SPW_F32, 1, dims, 0);
    spw_declare_optimizer_shards(ctx.get(), 2, 64);
    spw_declare_gradient_shards(ctx.get());
    const int64_t predicted[4] = {0, 0, 0, 0};
    spw_declare_tiers(ctx.get(), 8192, 8192, 0, "", predicted);
    const int64_t members[] = {0}, offsets[] = {0};
    spw_declare_block(ctx.get(), c.cls, 0, c.bytes, SPW_TIER_HOST, 0, 1,
                      members, offsets);
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    expect_start_error(ctx.get(), c.want);
  }
  auto ctx = spw::make_context();
  spw_declare_gradient_shards(ctx.get());
  EXPECT_NE(ctx->error.find("gradient shards declared before the optimizer "
                            "shards"),
            std::string::npos)
      << ctx->error;
}

// What a bf16-mixed plan refuses, each saying what is wrong.
TEST(Tiers, Bf16PlanRefusals) {
  const int64_t predicted[4] = {0, 0, 0, 0};
  const int64_t one[] = {0}, two[] = {0, 1}, swapped[] = {1, 0};
  const int64_t at1[] = {0}, work_at[] = {0, 12}, master_at[] = {0, 24};
  {
    // A master block without spw_declare_bf16_mixed.
    auto ctx = context_with_param();
    spw_declare_tiers(ctx.get(), 4096, 0, 0, "", predicted);
    spw_declare_block(ctx.get(), SPW_BLOCK_MASTER, 0, 24, SPW_TIER_GPU, 0, 1,
                      one, at1);
    EXPECT_NE(ctx->error.find("spw_declare_block: block master/layer0: "
                              "master blocks hold the f32 master weights of "
                              "a bf16-mixed model (spw_declare_bf16_mixed "
                              "must come before the tiers)"),
              std::string::npos)
        << ctx->error;
  }
  {
    // A params block of bf16 size in an fp32 plan (no master block).
    auto ctx = context_with_param();
    spw_declare_bf16_mixed(ctx.get());
    spw_declare_tiers(ctx.get(), 4096, 0, 0, "", predicted);
    spw_declare_block(ctx.get(), SPW_BLOCK_PARAMS, 0, 12, SPW_TIER_GPU, 0, 1,
                      one, at1);
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    EXPECT_NE(start_error(ctx.get()).find("block params/layer0: parameter "
                                          "'w' at offset 0 does not fit in "
                                          "12 bytes"),
              std::string::npos);
  }
  {
    // A params block without its master block, and a master block of
    // other members.
    auto ctx = bf16_plan(SPW_TIER_GPU);
    const int64_t dc[] = {4};
    spw_declare_param(ctx.get(), "c", SPW_F32, 1, dc, 44);
    const int64_t third[] = {2};
    spw_declare_block(ctx.get(), SPW_BLOCK_PARAMS, 1, 8, SPW_TIER_GPU, 1024, 1,
                      third, at1);
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    EXPECT_NE(start_error(ctx.get()).find(
                  "params/layer1 holds 'c' but the plan declares no "
                  "master/layer1"),
              std::string::npos);
  }
  {
    auto ctx = bf16_plan(SPW_TIER_GPU);
    spw_declare_block(ctx.get(), SPW_BLOCK_PARAMS, 1, 24, SPW_TIER_GPU, 1024, 2,
                      two, work_at);
    spw_declare_block(ctx.get(), SPW_BLOCK_MASTER, 1, 48, SPW_TIER_GPU, 1280, 2,
                      swapped, master_at);
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    EXPECT_NE(start_error(ctx.get()).find(
                  "params/layer1 holds 'a', 'b' but master/layer1 holds 'b', "
                  "'a'"),
              std::string::npos);
  }
  {
    // A master block without its params block.
    auto ctx = bf16_plan(SPW_TIER_GPU);
    spw_declare_block(ctx.get(), SPW_BLOCK_MASTER, 1, 48, SPW_TIER_GPU, 1280, 2,
                      two, master_at);
    EXPECT_NE(start_error(ctx.get()).find("master/layer1 holds 'a', 'b' but "
                                          "the plan declares no "
                                          "params/layer1"),
              std::string::npos);
  }
  {
    // An fp32 plan keeps no working copy: the compiler reads its
    // parameters with spw_param.
    auto ctx = context_with_param();
    spw_declare_bf16_mixed(ctx.get());
    spw_declare_tiers(ctx.get(), 4096, 0, 0, "", predicted);
    spw_declare_block(ctx.get(), SPW_BLOCK_PARAMS, 0, 24, SPW_TIER_GPU, 0, 1,
                      one, at1);
    spw::tiers_start(ctx.get(), {}, spw::storage::Backend::Threads);
    spw::tiers_scatter(ctx.get());
    spw_bind(ctx.get(), SPW_BLOCK_PARAMS, 0, SPW_TIER_GPU);
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    spw_param_work(ctx.get(), 0);
    EXPECT_NE(ctx->error.find("keep no bf16 working copy"), std::string::npos)
        << ctx->error;
  }
  // An update whose working copy is bound on the other side than its
  // master and state: refused before anything changes.
  for (bool work_on_gpu : {false, true}) {
    SCOPED_TRACE(work_on_gpu ? "working copy on the gpu" : "on host");
    auto ctx = bf16_plan(SPW_TIER_HOST);
    spw::device_start(ctx.get(), device_of(/*loopback=*/true));
    spw::tiers_start(ctx.get(), {}, spw::storage::Backend::Threads);
    spw::tiers_scatter(ctx.get());
    const int64_t gpu_at[] = {0, 256, 512};
    const int classes[] = {SPW_BLOCK_PARAMS, SPW_BLOCK_MASTER,
                           SPW_BLOCK_OPTIMIZER};
    for (int k = 0; k < 3; ++k) {
      spw_await(ctx.get(), spw_move(ctx.get(), classes[k], 0, SPW_TIER_HOST,
                                    SPW_TIER_GPU, 0, gpu_at[k]));
      const bool on_gpu = (classes[k] == SPW_BLOCK_PARAMS) == work_on_gpu;
      spw_bind(ctx.get(), classes[k], 0, on_gpu ? SPW_TIER_GPU : SPW_TIER_HOST);
    }
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    spw::ParamInfo &p = ctx->params[0];
    const void *master = work_on_gpu ? p.value->data : p.dev_value->data;
    const std::vector<float> before =
        fetch<float>(ctx.get(), master, 6, !work_on_gpu);
    ctx->step = 1;
    spw_adamw(ctx.get(), 0, device_grad(ctx.get(), std::vector<float>(6, 0.5f)),
              kLr, kBeta1, kBeta2, kEps, kDecay);
    EXPECT_NE(ctx->error.find(
                  work_on_gpu
                      ? "parameter 'a': its bf16 working copy is bound on the "
                        "GPU but its update runs on host; the plan binds the "
                        "params block where the update runs"
                      : "parameter 'a': its bf16 working copy is bound on "
                        "host but its update runs on the GPU; the plan binds "
                        "the params block where the update runs"),
              std::string::npos)
        << ctx->error;
    EXPECT_EQ(bits(fetch<float>(ctx.get(), master, 6, !work_on_gpu)),
              bits(before));
  }
}

// The start, checkpoints and --save stream a bf16-mixed plan's values
// through its master blocks (f32, bit-exact both ways), and the params
// blocks then hold their rounding, wherever each block is homed.
TEST(Tiers, Bf16PlanStreamsTheMastersAndRoundsIntoTheParamsBlocks) {
  std::string dir =
      (std::filesystem::temp_directory_path() / "spw_bf16_XXXXXX").string();
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  for (bool loopback : {false, true}) {
    SCOPED_TRACE(loopback ? "loopback" : "cpu");
    auto ctx = spw::make_context();
    const int64_t n[3] = {6, 5, 300};
    int64_t off = 0;
    for (int i = 0; i < 3; ++i) {
      const int64_t dims[] = {n[i]};
      spw_declare_param(ctx.get(), std::string(1, char('a' + i)).c_str(),
                        SPW_F32, 1, dims, off);
      off += 4 * n[i];
    }
    spw_declare_bf16_mixed(ctx.get());
    const int64_t predicted[4] = {0, 0, 0, 0};
    spw_declare_tiers(ctx.get(), 4096, 32768, 8192, "", predicted);
    // Layer 0: working copies on the GPU, master on host; layer 1 the
    // other way round; layer 2 both on SSD. The master blocks are declared
    // in the other order: they set the stream's.
    const int64_t at0[] = {0};
    for (int l = 0; l < 3; ++l) {
      const int64_t m[] = {l};
      const int home[] = {SPW_TIER_GPU, SPW_TIER_HOST, SPW_TIER_SSD};
      const int64_t home_at[] = {0, 0, 0};
      spw_declare_block(ctx.get(), SPW_BLOCK_PARAMS, l, 2 * n[l], home[l],
                        home_at[l], 1, m, at0);
    }
    for (int l = 2; l >= 0; --l) {
      const int64_t m[] = {l};
      const int home[] = {SPW_TIER_HOST, SPW_TIER_GPU, SPW_TIER_SSD};
      const int64_t home_at[] = {4096, 1024, 4096};
      spw_declare_block(ctx.get(), SPW_BLOCK_MASTER, l, 4 * n[l], home[l],
                        home_at[l], 1, m, at0);
    }
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    spw::device_start(ctx.get(), device_of(loopback));
    spw::tiers_start(ctx.get(), {dir}, spw::storage::Backend::Threads);
    EXPECT_EQ(spw::tiers_stream_members(ctx.get(), SPW_BLOCK_PARAMS),
              std::vector<int32_t>({2, 1, 0}));

    std::vector<float> values[3];
    for (int i = 0; i < 3; ++i)
      values[i] = tricky_values(7 * i, int(n[i]));
    std::vector<int64_t> seen(3, 0);
    spw::tiers_stream_in(ctx.get(), SPW_BLOCK_PARAMS,
                         [&](const spw::BlockRange &r) {
                           EXPECT_EQ(r.kind, spw::kTensorValue);
                           std::memcpy(r.data, values[r.param].data() + r.begin,
                                       size_t(r.count) * 4);
                           seen[size_t(r.param)] += r.count;
                         });
    EXPECT_EQ(seen, std::vector<int64_t>(n, n + 3));
    std::vector<float> out[3];
    for (int i = 0; i < 3; ++i)
      out[i].assign(size_t(n[i]), 0.0f);
    spw::tiers_stream_out(ctx.get(), SPW_BLOCK_PARAMS,
                          [&](const spw::BlockRange &r) {
                            std::memcpy(out[r.param].data() + r.begin, r.data,
                                        size_t(r.count) * 4);
                          });
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(bits(out[i]), bits(values[i])) << i;

    // The working copies, where the step would bind them.
    spw_bind(ctx.get(), SPW_BLOCK_PARAMS, 0, SPW_TIER_GPU);
    spw_tensor *w = spw_param_work(ctx.get(), 0);
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    EXPECT_EQ(fetch<uint16_t>(ctx.get(), w->data, 6, true), rounded(values[0]));
    spw_bind(ctx.get(), SPW_BLOCK_PARAMS, 1, SPW_TIER_HOST);
    EXPECT_EQ(
        fetch<uint16_t>(ctx.get(), ctx->params[1].bound_work_part[0], 5, false),
        rounded(values[1]));
    spw_await(ctx.get(), spw_move(ctx.get(), SPW_BLOCK_PARAMS, 2, SPW_TIER_SSD,
                                  SPW_TIER_HOST, 0, 8192));
    spw_bind(ctx.get(), SPW_BLOCK_PARAMS, 2, SPW_TIER_HOST);
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    EXPECT_EQ(fetch<uint16_t>(ctx.get(), ctx->params[2].bound_work_part[0], 300,
                              false),
              rounded(values[2]));
    spw_drop(ctx.get(), SPW_BLOCK_PARAMS, 2, SPW_TIER_HOST);

    // The master blocks themselves are not streamed.
    EXPECT_THROW(spw::tiers_stream_out(ctx.get(), SPW_BLOCK_MASTER,
                                       [](const spw::BlockRange &) {}),
                 spw::Error);
    spw::tiers_gather(ctx.get());
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(bits(spwtest::values(*ctx->params[size_t(i)].value)),
                bits(values[i]));
  }
  std::filesystem::remove_all(dir);
}

} // namespace

namespace {

// spw_alloc_copy (sched.alloc): a params copy made on a tier without
// reading another tier's, rounded from the master block bound there; a
// copy where one exists, or without the masters bound there, is refused.
TEST(Tiers, Bf16PlanAllocatesAParamsCopyRoundedFromTheBoundMasters) {
  for (bool loopback : {false, true}) {
    SCOPED_TRACE(loopback ? "loopback" : "cpu");
    auto ctx = bf16_plan(SPW_TIER_HOST);
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    std::vector<float> initial[2];
    for (int i = 0; i < 2; ++i)
      initial[i] = spwtest::values(*ctx->params[size_t(i)].value);
    spw::device_start(ctx.get(), device_of(loopback));
    spw::tiers_start(ctx.get(), {}, spw::storage::Backend::Threads);
    spw::tiers_scatter(ctx.get());
    // Not where the masters are bound.
    spw_alloc_copy(ctx.get(), SPW_BLOCK_PARAMS, 0, -1, SPW_TIER_GPU, 0);
    EXPECT_NE(ctx->error.find("spw_alloc_copy: params/layer0: its master "
                              "block is not bound on gpu"),
              std::string::npos)
        << ctx->error;
    ctx->error.clear();
    // Over the home copy.
    spw_bind(ctx.get(), SPW_BLOCK_MASTER, 0, SPW_TIER_HOST);
    spw_alloc_copy(ctx.get(), SPW_BLOCK_PARAMS, 0, -1, SPW_TIER_HOST, 0);
    EXPECT_NE(ctx->error.find("params/layer0 already has a copy of part 0 on "
                              "host"),
              std::string::npos)
        << ctx->error;
    ctx->error.clear();
    // Only params blocks.
    spw_alloc_copy(ctx.get(), SPW_BLOCK_OPTIMIZER, 0, -1, SPW_TIER_GPU, 0);
    EXPECT_NE(ctx->error.find("only a bf16-mixed plan's params blocks"),
              std::string::npos)
        << ctx->error;
    ctx->error.clear();
    // The masters on the GPU tier, then a params copy there made from them.
    spw_await(ctx.get(), spw_move(ctx.get(), SPW_BLOCK_MASTER, 0,
                                  SPW_TIER_HOST, SPW_TIER_GPU, 0, 1024));
    spw_bind(ctx.get(), SPW_BLOCK_MASTER, 0, SPW_TIER_GPU);
    spw_alloc_copy(ctx.get(), SPW_BLOCK_PARAMS, 0, -1, SPW_TIER_GPU, 0);
    spw_bind(ctx.get(), SPW_BLOCK_PARAMS, 0, SPW_TIER_GPU);
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    for (int i = 0; i < 2; ++i) {
      spw_tensor *w = spw_param_work(ctx.get(), i);
      ASSERT_TRUE(ctx->error.empty()) << ctx->error;
      EXPECT_EQ(fetch<uint16_t>(ctx.get(), w->data, initial[i].size(), true),
                rounded(initial[i]));
    }
    spw_drop(ctx.get(), SPW_BLOCK_PARAMS, 0, SPW_TIER_GPU);
    spw_drop(ctx.get(), SPW_BLOCK_MASTER, 0, SPW_TIER_GPU);
    spw::tiers_gather(ctx.get());
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  }
}

} // namespace

// ---- blocks cut between two tiers (spw_declare_part_home) ------------------

namespace {

using spw::storage::LinkBytes;
constexpr int kGpu = SPW_TIER_GPU, kHost = SPW_TIER_HOST, kSsd = SPW_TIER_SSD;
const int kCutClasses[2] = {SPW_BLOCK_PARAMS, SPW_BLOCK_OPTIMIZER};

// Where the params and optimizer blocks of parameter "v" (128 f32 elements;
// both split at element 64: 256 + 256 and 512 + 512 bytes) are homed, per
// block [params, optimizer]: the block's home, which part 1 keeps, and part
// 0's home when the block is cut (-1: not cut).
struct CutHomes {
  const char *name;
  int home[2];
  int64_t home_at[2];
  int part0[2];
  int64_t part0_at[2];
  int home_of(int c, int k) const {
    return k == 0 && part0[c] >= 0 ? part0[c] : home[c];
  }
};
// Whole on SSD; the same with part 0 on host (the host budget filled to the
// byte); on host with part 0 on the GPU.
const CutHomes kUncut = {"uncut", {kSsd, kSsd}, {0, 8192}, {-1, -1}, {0, 0}};
const CutHomes kHostSsd = {
    "host|ssd", {kSsd, kSsd}, {0, 8192}, {kHost, kHost}, {0, 4096}};
const CutHomes kGpuHost = {
    "gpu|host", {kHost, kHost}, {0, 8192}, {kGpu, kGpu}, {2048, 2560}};
// The slots of the step's copies (a part at its offset from there).
const int64_t kGpuSlot[2] = {0, 512}, kHostSlot[2] = {16384, 24576};

std::unique_ptr<spw_ctx> cut_plan(const CutHomes &h, bool loopback,
                                  const std::string &dir) {
  auto ctx = spw::make_context();
  const int64_t dims[] = {128};
  spw_declare_param(ctx.get(), "v", SPW_F32, 1, dims, 0);
  const std::vector<float> v0 = tricky_values(0, 128);
  std::memcpy(ctx->params[0].value->data, v0.data(), 512);
  const int64_t predicted[4] = {0, 0, 0, 0};
  spw_declare_tiers(ctx.get(), 4096, 32768, 16384, "", predicted);
  const int64_t members[] = {0}, offsets[] = {0}, bytes[2] = {512, 1024};
  for (int c = 0; c < 2; ++c) {
    spw_declare_block(ctx.get(), kCutClasses[c], 0, bytes[c], h.home[c],
                      h.home_at[c], 1, members, offsets);
    spw_declare_split(ctx.get(), kCutClasses[c], 0, 256);
    if (h.part0[c] >= 0)
      spw_declare_part_home(ctx.get(), kCutClasses[c], 0, h.part0[c],
                            h.part0_at[c]);
  }
  spw::device_start(ctx.get(), device_of(loopback));
  if (ctx->error.empty())
    spw::tiers_start(ctx.get(), {dir}, spw::storage::Backend::Threads);
  return ctx;
}

// A step's moves, part by part along the links (gpu 0 - host 1 - ssd 2),
// and the bytes each adds to its block class's counts.
struct CutMoves {
  spw_ctx *ctx;
  const CutHomes &h;
  LinkBytes want[2];
  void move(int c, int k, int from, int to) {
    const int64_t at = to == kGpu ? kGpuSlot[c] : kHostSlot[c];
    spw_await(ctx, spw_move_part(ctx, kCutClasses[c], 0, k, from, to, 0, at));
    // Each part's bytes; the SSD moves whole 4 KiB blocks.
    const uint64_t part = c == 0 ? 256 : 512;
    LinkBytes &w = want[c];
    if (from == kSsd)
      w.ssd_read += 4096;
    else if (to == kSsd)
      w.ssd_write += 4096;
    else if (to == kGpu)
      w.h2d += part;
    else
      w.d2h += part;
  }
  // Part k of block c from its home to tier d, and back (its copies on the
  // way dropped).
  void bring(int c, int k, int d) {
    for (int x = h.home_of(c, k); x != d; x += d > x ? 1 : -1)
      move(c, k, x, x + (d > x ? 1 : -1));
  }
  void send_home(int c, int k, int d) {
    const int home = h.home_of(c, k), dir = home > d ? 1 : -1;
    for (int x = d; x != home; x += dir)
      move(c, k, x, x + dir);
    for (int x = d; x != home; x += dir)
      spw_drop_part(ctx, kCutClasses[c], 0, k, x);
  }
  // This step's bytes of each class, as --stats-json reports them.
  void expect_counted() {
    const std::string json = spw::tiers_stats_json(ctx, 1.0, 1, 0);
    for (int c = 0; c < 2; ++c) {
      const LinkBytes &w = want[c];
      const std::string line =
          std::string("\"") + (c ? "optimizer" : "params") +
          "\": {\"ssd_read\": " + std::to_string(w.ssd_read) +
          ", \"ssd_write\": " + std::to_string(w.ssd_write) +
          ", \"h2d\": " + std::to_string(w.h2d) +
          ", \"d2h\": " + std::to_string(w.d2h) + "}";
      EXPECT_NE(json.find(line), std::string::npos) << line << "\n" << json;
      want[c] = {};
    }
  }
};

struct Steps {
  Bits w, m, v;
};

// The resident run: AdamW of a plain copy, step t over both halves with
// gradient g[t - 1].
Steps resident_steps(const std::vector<float> &w,
                     const std::vector<std::vector<float>> &g) {
  auto ctx = spw::make_context();
  const int64_t dims[] = {int64_t(w.size())};
  spw_declare_param(ctx.get(), "r", SPW_F32, 1, dims, 0);
  std::memcpy(ctx->params[0].value->data, w.data(), w.size() * 4);
  const int64_t half = int64_t(w.size()) / 2, n = int64_t(w.size());
  for (size_t t = 0; t < g.size(); ++t) {
    ctx->step = int64_t(t + 1);
    auto grad = spwtest::f32({n}, g[t]);
    spw_adamw_range(ctx.get(), 0, grad.get(), 0, half, kLr, kBeta1, kBeta2,
                    kEps, kDecay);
    spw_adamw_range(ctx.get(), 0, grad.get(), half, n, kLr, kBeta1, kBeta2,
                    kEps, kDecay);
  }
  EXPECT_TRUE(ctx->error.empty()) << ctx->error;
  const spw::ParamInfo &p = ctx->params[0];
  return {bits(spwtest::values(*p.value)), bits(p.adam_m), bits(p.adam_v)};
}

std::string scratch_dir(const char *name) {
  std::string dir =
      (std::filesystem::temp_directory_path() / (std::string(name) + "_XXXXXX"))
          .string();
  if (!::mkdtemp(dir.data()))
    ADD_FAILURE() << "mkdtemp " << dir;
  return dir;
}

// A block cut between two tiers steps as the same block whole does, part
// by part: step 1 updates host copies (the CPU optimizer), part 1's
// elements first, step 2 GPU copies (the device); each part moves from its
// own home (a part homed on a tier is used there, not moved), its copies
// elsewhere go at the move's slot, and everything goes home after. The
// weights and moments are the resident run's, bit for bit, and each step's
// link bytes those of the moves made.
TEST(Tiers, CutBlocksStepAsWholeOnesPartByPart) {
  const std::string dir = scratch_dir("spw_cut");
  std::vector<std::vector<float>> g(2);
  for (int t = 0; t < 2; ++t)
    for (int k = 0; k < 128; ++k)
      g[size_t(t)].push_back(0.01f * float((k + 5 * t) % 23) - 0.1f);
  const std::vector<float> v0 = tricky_values(0, 128);
  const Steps want = resident_steps(v0, g);
  ASSERT_NE(want.w, bits(v0));
  for (bool loopback : {false, true}) {
    Steps uncut;
    for (const CutHomes *h : {&kUncut, &kHostSsd, &kGpuHost}) {
      SCOPED_TRACE(std::string(loopback ? "loopback, " : "cpu, ") + h->name);
      auto ctx = cut_plan(*h, loopback, dir);
      ASSERT_TRUE(ctx->error.empty()) << ctx->error;
      spw::tiers_scatter(ctx.get());
      spw::ParamInfo &p = ctx->params[0];
      CutMoves s{ctx.get(), *h, {}};
      for (int step = 1; step <= 2; ++step) {
        const int d = step == 1 ? kHost : kGpu;
        spw::tiers_step_begin(ctx.get());
        for (int c = 0; c < 2; ++c)
          for (int k = 0; k < 2; ++k)
            s.bring(c, k, d);
        for (int cls : kCutClasses)
          spw_bind(ctx.get(), cls, 0, d);
        ASSERT_TRUE(ctx->error.empty()) << ctx->error;
        EXPECT_EQ(p.bound_split, 64);
        // Whole only where the parts are back to back: GPU copies in one
        // slot, not a part at its home and the other in a slot, nor host
        // copies (4 KiB apart).
        const bool whole = d == kGpu && h != &kGpuHost;
        spw_tensor &value = d == kGpu ? *p.dev_value : *p.value;
        EXPECT_EQ(value.data, whole ? p.bound_w_part[0] : nullptr);
        ctx->step = step;
        spw_tensor *grad = device_grad(ctx.get(), g[size_t(step - 1)]);
        for (auto [lo, hi] :
             step == 1 ? std::vector<std::pair<int, int>>{{64, 128}, {0, 64}}
                       : std::vector<std::pair<int, int>>{{0, 64}, {64, 128}})
          spw_adamw_range(ctx.get(), 0, grad, lo, hi, kLr, kBeta1, kBeta2, kEps,
                          kDecay);
        ASSERT_TRUE(ctx->error.empty()) << ctx->error;
        for (int c = 0; c < 2; ++c)
          for (int k = 0; k < 2; ++k)
            s.send_home(c, k, d);
        ASSERT_TRUE(ctx->error.empty()) << ctx->error;
        spw::tiers_step_end(ctx.get());
        ASSERT_TRUE(ctx->error.empty()) << ctx->error;
        s.expect_counted();
      }
      spw::tiers_gather(ctx.get());
      ASSERT_TRUE(ctx->error.empty()) << ctx->error;
      const Steps got = {bits(spwtest::values(*p.value)), bits(p.adam_m),
                         bits(p.adam_v)};
      EXPECT_EQ(got.w, want.w);
      EXPECT_EQ(got.m, want.m);
      EXPECT_EQ(got.v, want.v);
      if (h == &kUncut)
        uncut = got;
      EXPECT_EQ(got.w, uncut.w);
      EXPECT_EQ(got.m, uncut.m);
      EXPECT_EQ(got.v, uncut.v);
    }
  }
  std::filesystem::remove_all(dir);
}

// Streamed in and out (the start, checkpoints, --save), a cut block's parts
// are read and written at their own homes (a part on the GPU through the
// device), the ranges in the same order as a whole block's (a checkpoint
// appends each tensor whole), bit for bit.
TEST(Tiers, CutBlocksStreamEachPartAtItsHome) {
  const std::string dir = scratch_dir("spw_cut_stream");
  using Range = std::tuple<int32_t, int, int64_t, int64_t>;
  std::vector<float> in[3]; // value, m, v
  for (int kind = 0; kind < 3; ++kind)
    in[kind] = tricky_values(11 * kind + 1, 128);
  for (bool loopback : {false, true}) {
    std::vector<Range> uncut_order;
    for (const CutHomes *h : {&kUncut, &kHostSsd, &kGpuHost}) {
      SCOPED_TRACE(std::string(loopback ? "loopback, " : "cpu, ") + h->name);
      auto ctx = cut_plan(*h, loopback, dir);
      ASSERT_TRUE(ctx->error.empty()) << ctx->error;
      std::vector<Range> order;
      for (int cls : kCutClasses)
        spw::tiers_stream_in(ctx.get(), cls, [&](const spw::BlockRange &r) {
          std::memcpy(r.data, in[r.kind].data() + r.begin, size_t(r.count) * 4);
        });
      std::vector<float> out[3];
      for (std::vector<float> &o : out)
        o.assign(128, 0.0f);
      for (int cls : kCutClasses)
        spw::tiers_stream_out(ctx.get(), cls, [&](const spw::BlockRange &r) {
          order.push_back({r.param, r.kind, r.begin, r.count});
          std::memcpy(out[r.kind].data() + r.begin, r.data,
                      size_t(r.count) * 4);
        });
      for (int kind = 0; kind < 3; ++kind)
        EXPECT_EQ(bits(out[kind]), bits(in[kind])) << kind;
      if (h == &kUncut)
        uncut_order = order;
      EXPECT_EQ(order, uncut_order);

      // Each part where its home is, bound there (from SSD, on host).
      spw::ParamInfo &p = ctx->params[0];
      for (int c = 0; c < 2; ++c)
        for (int k = 0; k < 2; ++k) {
          SCOPED_TRACE(::testing::Message() << "class " << c << " part " << k);
          int d = h->home_of(c, k);
          if (d == kSsd) {
            spw_await(ctx.get(), spw_move_part(ctx.get(), kCutClasses[c], 0, k,
                                               kSsd, kHost, 0, kHostSlot[c]));
            d = kHost;
          }
          spw_bind(ctx.get(), kCutClasses[c], 0, d);
          ASSERT_TRUE(ctx->error.empty()) << ctx->error;
          const bool gpu = d == kGpu;
          auto part = [&](int kind) {
            return bits(in[kind].data() + 64 * k, 64);
          };
          if (c == 0) {
            EXPECT_EQ(bits(fetch<float>(ctx.get(), p.bound_w_part[k], 64, gpu)),
                      part(0));
          } else {
            EXPECT_EQ(
                bits(fetch<float>(ctx.get(), p.bound_m_part[k].p, 64, gpu)),
                part(1));
            EXPECT_EQ(
                bits(fetch<float>(ctx.get(), p.bound_v_part[k].p, 64, gpu)),
                part(2));
          }
          if (d != h->home_of(c, k))
            spw_drop_part(ctx.get(), kCutClasses[c], 0, k, d);
          ASSERT_TRUE(ctx->error.empty()) << ctx->error;
        }
    }
  }
  std::filesystem::remove_all(dir);
}

// The updates the optimizer overlap deferred (part 0's elements), applied
// outside the steps (tiers_flush_deferred): where part 0 of the state is
// homed (host, or the GPU), each part copied there from its own home and
// written back to it after; the resident run's bits.
TEST(Tiers, CutBlocksFlushDeferredUpdatesFromEachPartsHome) {
  const std::string dir = scratch_dir("spw_cut_flush");
  std::vector<float> g;
  for (int k = 0; k < 128; ++k)
    g.push_back(0.02f * float(k % 13) - 0.11f);
  const std::vector<float> v0 = tricky_values(0, 128);
  for (bool loopback : {false, true})
    for (const CutHomes *h : {&kHostSsd, &kGpuHost}) {
      SCOPED_TRACE(std::string(loopback ? "loopback, " : "cpu, ") + h->name);
      auto ctx = cut_plan(*h, loopback, dir);
      ASSERT_TRUE(ctx->error.empty()) << ctx->error;
      spw::tiers_scatter(ctx.get());
      ctx->step = 1;
      spw_adamw_defer(ctx.get(), 0, device_grad(ctx.get(), g), 0, 64, kLr,
                      kBeta1, kBeta2, kEps, kDecay);
      ASSERT_TRUE(ctx->error.empty()) << ctx->error;
      ctx->step = 2;
      spw::tiers_flush_deferred(ctx.get(), [&](const std::vector<int32_t> &) {
        spw_adamw_flush(ctx.get());
        ASSERT_TRUE(ctx->error.empty()) << ctx->error;
      });
      spw::tiers_gather(ctx.get());
      ASSERT_TRUE(ctx->error.empty()) << ctx->error;
      const spw::ParamInfo &p = ctx->params[0];
      EXPECT_EQ(bits(spwtest::values(*p.value)),
                bits(resident_adamw(v0, g, {{0, 64}})));
    }
  std::filesystem::remove_all(dir);
}

// What spw_declare_part_home refuses, and the drops of a cut block's home
// copies, each with what is wrong.
TEST(Tiers, CutBlockRefusals) {
  auto ctx = context_with_long_param();
  const int64_t predicted[4] = {0, 0, 0, 0};
  spw_declare_tiers(ctx.get(), 4096, 32768, 16384, "", predicted);
  const int64_t members[] = {0}, offsets[] = {0};
  spw_declare_block(ctx.get(), SPW_BLOCK_PARAMS, 0, 512, kSsd, 0, 1, members,
                    offsets);
  spw_declare_block(ctx.get(), SPW_BLOCK_OPTIMIZER, 0, 1024, kSsd, 8192, 1,
                    members, offsets);
  spw_declare_block(ctx.get(), SPW_BLOCK_GRADIENTS, 0, 512, kHost, 8192, 1,
                    members, offsets);
  spw_declare_block(ctx.get(), SPW_BLOCK_PARAMS, 1, 512, kHost, 12288, 1,
                    members, offsets);
  spw_declare_split(ctx.get(), SPW_BLOCK_PARAMS, 0, 256);
  spw_declare_split(ctx.get(), SPW_BLOCK_OPTIMIZER, 0, 256);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  struct Case {
    int cls, layer, home;
    int64_t offset;
    const char *want;
  } cases[] = {
      {SPW_BLOCK_PARAMS, 3, kHost, 0,
       "spw_declare_part_home: the plan declares no params block for layer 3"},
      {SPW_BLOCK_GRADIENTS, 0, kGpu, 0,
       "gradients/layer0: only params, master and optimizer blocks are cut "
       "between two tiers"},
      {SPW_BLOCK_PARAMS, 1, kGpu, 0,
       "params/layer1 is not split: spw_declare_split cuts it in two parts "
       "first"},
      {SPW_BLOCK_PARAMS, 0, kSsd, 0,
       "params/layer0: part 0's home is the block's own (ssd); a cut block's "
       "parts are homed on two tiers"},
      {SPW_BLOCK_PARAMS, 0, 3, 0, "params/layer0: unknown tier 3"},
      {SPW_BLOCK_PARAMS, 0, kHost, 256,
       "params/layer0: part 0 (256 bytes) homed at byte 256 of the host arena "
       "(32768 bytes): the offset is a multiple of 4096 and the part lies "
       "inside"},
      {SPW_BLOCK_PARAMS, 0, kGpu, 128, "a multiple of 256"},
      {SPW_BLOCK_PARAMS, 0, kGpu, 4096, "homed at byte 4096 of the gpu arena"},
      {SPW_BLOCK_PARAMS, 0, kHost, -4096, "homed at byte -4096"},
  };
  for (const Case &c : cases) {
    ctx->error.clear();
    spw_declare_part_home(ctx.get(), c.cls, c.layer, c.home, c.offset);
    EXPECT_NE(ctx->error.find(c.want), std::string::npos)
        << "want '" << c.want << "', got '" << ctx->error << "'";
  }
  ctx->error.clear();
  spw_declare_part_home(ctx.get(), SPW_BLOCK_PARAMS, 0, kHost, 0);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  spw_declare_part_home(ctx.get(), SPW_BLOCK_PARAMS, 0, kGpu, 0);
  EXPECT_NE(ctx->error.find("params/layer0: part 0's home declared twice"),
            std::string::npos)
      << ctx->error;
  ctx->error.clear();

  const std::string dir = scratch_dir("spw_cut_refusals");
  spw::tiers_start(ctx.get(), {dir}, spw::storage::Backend::Threads);
  spw::tiers_scatter(ctx.get());
  spw_declare_part_home(ctx.get(), SPW_BLOCK_PARAMS, 0, kHost, 4096);
  EXPECT_NE(ctx->error.find("the offload plan has started; a part's home is "
                            "declared before"),
            std::string::npos)
      << ctx->error;
  // Each part's home copy stays; a whole drop where one part is homed says
  // to drop the other's copy instead.
  struct Drop {
    int part, tier;
    const char *want;
  } drops[] = {
      {-1, kHost,
       "spw_drop: params/layer0: part 0's home copy is on host and cannot be "
       "dropped; drop part 1's copy there instead (spw_drop_part)"},
      {-1, kSsd,
       "spw_drop: params/layer0: part 1's home copy is on ssd and cannot be "
       "dropped; drop part 0's copy there instead (spw_drop_part)"},
      {0, kHost,
       "spw_drop_part: params/layer0: part 0's home copy on host cannot be "
       "dropped"},
      {1, kSsd,
       "spw_drop_part: params/layer0: part 1's home copy on ssd cannot be "
       "dropped"},
  };
  for (const Drop &d : drops) {
    ctx->error.clear();
    if (d.part < 0)
      spw_drop(ctx.get(), SPW_BLOCK_PARAMS, 0, d.tier);
    else
      spw_drop_part(ctx.get(), SPW_BLOCK_PARAMS, 0, d.part, d.tier);
    EXPECT_NE(ctx->error.find(d.want), std::string::npos)
        << "want '" << d.want << "', got '" << ctx->error << "'";
  }
  ctx->error.clear();
  // A cut block's copy goes where its move says: no offset is an error.
  spw_move_part(ctx.get(), SPW_BLOCK_PARAMS, 0, 1, kSsd, kHost, 0, -1);
  EXPECT_NE(ctx->error.find("params/layer0: no offset for its copy of part 1 "
                            "on host"),
            std::string::npos)
      << ctx->error;
  ctx->error.clear();
  // Where neither part is homed, the whole copy drops as a whole block's.
  spw_await(ctx.get(), spw_move_part(ctx.get(), SPW_BLOCK_PARAMS, 0, 0, kHost,
                                     kGpu, 0, 0));
  spw_drop(ctx.get(), SPW_BLOCK_PARAMS, 0, kGpu);
  // Part 1 beside part 0's home on host, then dropped alone.
  spw_await(ctx.get(), spw_move_part(ctx.get(), SPW_BLOCK_PARAMS, 0, 1, kSsd,
                                     kHost, 0, 16384));
  spw_bind(ctx.get(), SPW_BLOCK_PARAMS, 0, kHost);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  EXPECT_EQ(ctx->params[0].bound_w_part[1][0], 64.0f);
  EXPECT_EQ(ctx->params[0].bound_w_part[0][63], 63.0f);
  spw_drop_part(ctx.get(), SPW_BLOCK_PARAMS, 0, 1, kHost);
  ASSERT_TRUE(ctx->error.empty()) << ctx->error;
  std::filesystem::remove_all(dir);

  // ZeRO's sharded blocks are not cut.
  auto zero = context_with_long_param();
  spw_declare_optimizer_shards(zero.get(), 2, SPW_ZERO_SHARD_ALIGN);
  spw_declare_tiers(zero.get(), 4096, 32768, 0, "", predicted);
  spw_declare_block(zero.get(), SPW_BLOCK_PARAMS, 0, 512, kHost, 0, 1, members,
                    offsets);
  spw_declare_split(zero.get(), SPW_BLOCK_PARAMS, 0, 256);
  ASSERT_TRUE(zero->error.empty()) << zero->error;
  spw_declare_part_home(zero.get(), SPW_BLOCK_PARAMS, 0, kGpu, 0);
  EXPECT_NE(zero->error.find("params/layer0: a block sharded over the ranks "
                             "(ZeRO) is not cut between two tiers"),
            std::string::npos)
      << zero->error;
}

} // namespace

namespace {

// A bf16-mixed plan's cut blocks: the masters' values streamed in at each
// part's home (part 0 on host, part 1 on SSD) are rounded into the params
// block's parts at theirs (part 0 on the GPU, through the device; part 1
// on host), and stream out as they went in.
TEST(Tiers, Bf16PlanRoundsCutMastersIntoCutParamsBlocks) {
  const std::string dir = scratch_dir("spw_cut_bf16");
  const std::vector<float> values = tricky_values(3, 256);
  for (bool loopback : {false, true}) {
    SCOPED_TRACE(loopback ? "loopback" : "cpu");
    auto ctx = spw::make_context();
    const int64_t dims[] = {256};
    spw_declare_param(ctx.get(), "v", SPW_F32, 1, dims, 0);
    spw_declare_bf16_mixed(ctx.get());
    const int64_t predicted[4] = {0, 0, 0, 0};
    spw_declare_tiers(ctx.get(), 4096, 32768, 16384, "", predicted);
    const int64_t members[] = {0}, offsets[] = {0};
    spw_declare_block(ctx.get(), SPW_BLOCK_PARAMS, 0, 512, kHost, 0, 1, members,
                      offsets);
    spw_declare_block(ctx.get(), SPW_BLOCK_MASTER, 0, 1024, kSsd, 0, 1, members,
                      offsets);
    spw_declare_block(ctx.get(), SPW_BLOCK_OPTIMIZER, 0, 2048, kHost, 12288, 1,
                      members, offsets);
    // Element 128 of each.
    spw_declare_split(ctx.get(), SPW_BLOCK_PARAMS, 0, 256);
    spw_declare_split(ctx.get(), SPW_BLOCK_MASTER, 0, 512);
    spw_declare_split(ctx.get(), SPW_BLOCK_OPTIMIZER, 0, 512);
    spw_declare_part_home(ctx.get(), SPW_BLOCK_PARAMS, 0, kGpu, 0);
    spw_declare_part_home(ctx.get(), SPW_BLOCK_MASTER, 0, kHost, 8192);
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    spw::device_start(ctx.get(), device_of(loopback));
    spw::tiers_start(ctx.get(), {dir}, spw::storage::Backend::Threads);
    spw::tiers_stream_in(
        ctx.get(), SPW_BLOCK_PARAMS, [&](const spw::BlockRange &r) {
          std::memcpy(r.data, values.data() + r.begin, size_t(r.count) * 4);
        });
    std::vector<float> out(256, 0.0f);
    spw::tiers_stream_out(
        ctx.get(), SPW_BLOCK_PARAMS, [&](const spw::BlockRange &r) {
          std::memcpy(out.data() + r.begin, r.data, size_t(r.count) * 4);
        });
    EXPECT_EQ(bits(out), bits(values));
    spw::ParamInfo &p = ctx->params[0];
    spw_bind(ctx.get(), SPW_BLOCK_PARAMS, 0, kGpu);
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    EXPECT_EQ(p.bound_work_part[1], nullptr);
    EXPECT_EQ(fetch<uint16_t>(ctx.get(), p.bound_work_part[0], 128, true),
              rounded(values.data(), 128));
    spw_bind(ctx.get(), SPW_BLOCK_PARAMS, 0, kHost);
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    EXPECT_EQ(p.bound_work_part[0], nullptr);
    EXPECT_EQ(fetch<uint16_t>(ctx.get(), p.bound_work_part[1], 128, false),
              rounded(values.data() + 128, 128));
    // The master's part 0 at its host home.
    spw_bind(ctx.get(), SPW_BLOCK_MASTER, 0, kHost);
    ASSERT_TRUE(ctx->error.empty()) << ctx->error;
    EXPECT_EQ(bits(p.bound_w_part[0], 128), bits(values.data(), 128));
    EXPECT_EQ(p.bound_w_part[1], nullptr);
  }
  std::filesystem::remove_all(dir);
}

} // namespace
