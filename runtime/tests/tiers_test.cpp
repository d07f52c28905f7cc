//===- tiers_test.cpp - the offload plan's runtime entry points -----------===//
//
// What the generated step calls (spw_declare_tiers ... spw_gradient) checks
// its inputs and says what is wrong, and a plan's blocks hold the
// parameters between tiers_scatter and tiers_gather. The byte-exact,
// end-to-end behaviour is test/e2e/offload.test's.
//
//===----------------------------------------------------------------------===//

#include "host_optimizer.h"
#include "test_util.h"
#include "tiers.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

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
