//===- forward_test.cpp - forward-only models and --outputs, end to end ----===//
//
// Runs spillway_runtime_forward_model (tests/forward_model.cpp: a hand-written
// forward-only model, outputs of every dtype and no loss) and checks the .npy
// files --outputs writes, the --steps default and the usage errors.
//
//===----------------------------------------------------------------------===//

#include "executable_fixture.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/wait.h>

using namespace spwtest;
namespace fs = std::filesystem;

namespace {

class Forward : public ExecutableTest {
protected:
  Forward() : ExecutableTest(SPW_FORWARD_MODEL_EXE) {}
  std::vector<float> x, w; // 3 batches of [2,4]; w [4,3] then b [3]

  void SetUp() override {
    ExecutableTest::SetUp();
    x = randoms(24, 200, -2, 2);
    x[0] = 100; // logits far from 0 in batch 0: mask/rowmax are robust
    write("x.npy", spw::write_npy("<f4", {3, 2, 4}, x.data(), 96));
    w = randoms(15, 201);
    write("m.weights", std::string(reinterpret_cast<char *>(w.data()), 60));
  }
  Result forward(const std::string &extra, const std::string &env = "") {
    return run("--input x=x.npy --weights m.weights " + extra, env);
  }

  // logits of batch `b`, computed here in double.
  std::vector<double> logits(int b) const {
    std::vector<double> l(6);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) {
        double s = w[size_t(12 + j)];
        for (int k = 0; k < 4; ++k)
          s += double(x[size_t(b * 8 + i * 4 + k)]) * w[size_t(k * 3 + j)];
        l[size_t(i * 3 + j)] = s;
      }
    return l;
  }
};

TEST_F(Forward, WritesEveryOutputAsNpyStepsDefaultToBatches) {
  Result r = forward("--outputs out");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_CONTAINS(r.out, "forward-only: 3 steps");
  EXPECT_CONTAINS(r.out, "output logits/out: f32 [2,3]");
  EXPECT_CONTAINS(r.out, "wrote output logits/out [3,2,3] to out/logits_out.npy");

  // '/' in the output name becomes '_' in the file name.
  spw::NpyArray l = spw::read_npy(path("out/logits_out.npy"));
  EXPECT_EQ(l.descr, "<f4");
  EXPECT_EQ(l.shape, (std::vector<int64_t>{3, 2, 3}));
  spw::NpyArray m = spw::read_npy(path("out/mask.npy"));
  EXPECT_EQ(m.descr, "|b1");
  EXPECT_EQ(m.shape, (std::vector<int64_t>{3, 2, 3}));
  spw::NpyArray c = spw::read_npy(path("out/count.npy"));
  EXPECT_EQ(c.descr, "<i4");
  EXPECT_EQ(c.shape, (std::vector<int64_t>{3}));
  spw::NpyArray x64 = spw::read_npy(path("out/rowmax.npy"));
  EXPECT_EQ(x64.descr, "<i8");
  EXPECT_EQ(x64.shape, (std::vector<int64_t>{3, 2}));

  const float *lv = reinterpret_cast<const float *>(l.data.data());
  const int32_t *cv = reinterpret_cast<const int32_t *>(c.data.data());
  const int64_t *rv = reinterpret_cast<const int64_t *>(x64.data.data());
  for (int s = 0; s < 3; ++s) { // step s+1 at index s, on batch s
    auto ref = logits(s);
    int32_t count = 0;
    for (int e = 0; e < 6; ++e) {
      // The executable's fast kernels accumulate in float: 1e-5 relative.
      EXPECT_NEAR(lv[s * 6 + e], ref[size_t(e)],
                  1e-5 * std::max(1.0, std::fabs(double(ref[size_t(e)]))))
          << s << "," << e;
      const float got = lv[s * 6 + e];
      EXPECT_EQ(m.data[size_t(s * 6 + e)], got > 0 ? 1 : 0);
      count += got > 0;
    }
    EXPECT_EQ(cv[s], count);
    for (int i = 0; i < 2; ++i) {
      float mx = std::max({lv[s * 6 + i * 3], lv[s * 6 + i * 3 + 1],
                           lv[s * 6 + i * 3 + 2]});
      EXPECT_EQ(rv[s * 2 + i], int64_t(std::trunc(mx)));
    }
  }
  EXPECT_GT(rv[0], 1); // batch 0 row 0 has x = 100: a large, truncated max
}

TEST_F(Forward, ExplicitStepsCycleThroughBatches) {
  Result r = forward("--outputs=res --steps 5");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  spw::NpyArray l = spw::read_npy(path("res/logits_out.npy"));
  EXPECT_EQ(l.shape, (std::vector<int64_t>{5, 2, 3}));
  const float *lv = reinterpret_cast<const float *>(l.data.data());
  for (int e = 0; e < 6; ++e) {
    EXPECT_EQ(lv[3 * 6 + e], lv[e]);     // step 4 runs batch 0
    EXPECT_EQ(lv[4 * 6 + e], lv[6 + e]); // step 5 runs batch 1
  }
  r = forward("--outputs res --steps 0");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_EQ(spw::read_npy(path("res/count.npy")).shape,
            (std::vector<int64_t>{0}));
}

TEST_F(Forward, RunsWithoutOutputsDirAndOneBatchDefaultsToOneStep) {
  write("x1.npy", spw::write_npy("<f4", {2, 4}, x.data(), 32));
  Result r = run("--input x=x1.npy --weights m.weights");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_CONTAINS(r.out, "forward-only: 1 steps");
  EXPECT_FALSE(fs::exists(path("out")));
}

TEST_F(Forward, TrainingFlagsAreUsageErrors) {
  for (const char *flag : {"--lr 0.1", "--check-gradients", "--save s.st",
                           "--weight-decay 0", "--log-json l.json"}) {
    Result r = forward(std::string("--outputs out ") + flag);
    EXPECT_EQ(r.rc, 2) << flag;
    EXPECT_CONTAINS(r.err, "error: this executable was compiled with "
                           "--forward: ");
    EXPECT_CONTAINS(r.err, std::string(flag).substr(0, std::string(flag).find(' ')) +
                               " is a training flag");
  }
  EXPECT_FALSE(fs::exists(path("out")));
}

TEST_F(Forward, OutputsFlagOnATrainingModelIsAUsageError) {
  Result r = run("--outputs out", "", SPW_TEST_MODEL_EXE);
  EXPECT_EQ(r.rc, 2);
  EXPECT_CONTAINS(r.err, "--outputs is for forward-only models");
  r = run("--outputs", "", SPW_FORWARD_MODEL_EXE);
  EXPECT_EQ(r.rc, 2);
  EXPECT_CONTAINS(r.err, "--outputs needs a value");
  EXPECT_CONTAINS(run("--help").out, "--outputs DIR");
}

TEST_F(Forward, RuntimeErrors) {
  Result r = forward("--outputs out", "SPW_TEST_SKIP_OUTPUT=1");
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "error: step 1: the model did not set output 'mask' "
                         "(spw_set_output)");
  write("file", "x");
  r = forward("--outputs file");
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "cannot create --outputs directory 'file'");
}

// spw_set_output checks the declared dtype and shape.
TEST(ForwardContext, SetOutputChecksDtypeAndShape) {
  auto ctx = spw::make_context();
  const int64_t d[] = {2};
  EXPECT_EQ(spw_declare_output(ctx.get(), "y", SPW_F32, 1, d), 0);
  EXPECT_EQ(spw_declare_output(ctx.get(), "m", SPW_BOOL, 1, d), 1);
  auto good = f32({2}, {1, 2});
  spw_set_output(ctx.get(), 0, good.get());
  ASSERT_EQ(ctx->error, "");
  EXPECT_TRUE(ctx->outputs[0].set);
  EXPECT_EQ(values(*ctx->outputs[0].value), (std::vector<float>{1, 2}));
  spw::clear_step(ctx.get());
  EXPECT_FALSE(ctx->outputs[0].set);
  spw_set_output(ctx.get(), 1, good.get());
  EXPECT_EQ(ctx->error,
            "spw_set_output: output 'm' is f32 [2], but it was declared bool "
            "[2]");
  ctx->error.clear();
  spw_set_output(ctx.get(), 2, good.get());
  EXPECT_EQ(ctx->error,
            "spw_set_output: output index 2 out of range (2 outputs declared)");
  ctx->error.clear();
  spw_declare_output(ctx.get(), "y", SPW_F32, 1, d);
  EXPECT_EQ(ctx->error, "spw_declare_output: output 'y' declared twice");
}

} // namespace
