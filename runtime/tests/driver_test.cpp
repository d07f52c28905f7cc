//===- driver_test.cpp - spw_main end to end, through a real executable ---===//
//
// Runs spillway_runtime_test_model (tests/test_model.cpp: a hand-written
// model linked with the runtime) with files written here, and checks exit
// codes, output and the files it writes.
//
//===----------------------------------------------------------------------===//

#include "test_util.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/wait.h>

using namespace spwtest;
namespace fs = std::filesystem;

namespace {

struct Result {
  int rc;
  std::string out, err;
};

class Driver : public ::testing::Test {
protected:
  fs::path dir;

  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "spw_driver_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir = tmpl;
    // x: 3 batches of [4,3]; y: 3 batches of [4]; weights: 38 floats.
    auto x = randoms(36, 100);
    write("x.npy", spw::write_npy("<f4", {3, 4, 3}, x.data(), 144));
    std::vector<int64_t> y = {0, 1, 2, 1, 2, 2, 0, 1, 1, 0, 0, 2};
    write("y.npy", spw::write_npy("<i8", {3, 4}, y.data(), 96));
    std::vector<int32_t> y32(y.begin(), y.end());
    write("y32.npy", spw::write_npy("<i4", {3, 4}, y32.data(), 48));
    auto w = randoms(38, 101, -0.7f, 0.7f);
    write("m.weights", std::string(reinterpret_cast<char *>(w.data()), 152));
  }
  void TearDown() override { fs::remove_all(dir); }

  std::string path(const std::string &name) const { return (dir / name).string(); }
  void write(const std::string &name, const std::string &bytes) {
    std::ofstream(path(name), std::ios::binary) << bytes;
  }
  std::string read(const std::string &name) const {
    std::ifstream f(path(name), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }

  Result run(const std::string &args, const std::string &env = "",
             const std::string &exe = SPW_TEST_MODEL_EXE) {
    std::string cmd = "cd '" + dir.string() + "' && " + env + " '" + exe +
                      "' " + args + " >stdout.txt 2>stderr.txt";
    int status = std::system(cmd.c_str());
    Result r;
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = read("stdout.txt");
    r.err = read("stderr.txt");
    return r;
  }
  Result train(const std::string &extra, const std::string &env = "") {
    return run("--input x=x.npy --input y=y.npy --weights m.weights " + extra,
               env);
  }
};

#define EXPECT_CONTAINS(hay, needle)                                           \
  EXPECT_NE((hay).find(needle), std::string::npos)                             \
      << "expected to find: " << (needle) << "\nin:\n"                         \
      << (hay)

std::vector<double> json_losses(const std::string &log) {
  std::vector<double> losses;
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    size_t at = line.find("\"loss\": ");
    if (at != std::string::npos)
      losses.push_back(std::atof(line.c_str() + at + 8));
  }
  return losses;
}

TEST_F(Driver, TrainsLogsAndSaves) {
  Result r = train("--steps 60 --lr 0.05 --print-every 20 --log-json log.jsonl "
                   "--save out.safetensors");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_CONTAINS(r.out, "spillway: 4 parameters (38 elements");
  EXPECT_CONTAINS(r.out, "lr=0.05 (flag; compiled 0.001)");
  EXPECT_CONTAINS(r.out, "weight_decay=0.01");
  EXPECT_CONTAINS(r.out, "input y: i64 [4] from y.npy (3 batches)");
  EXPECT_CONTAINS(r.out, "step 20/60  loss ");
  EXPECT_CONTAINS(r.out, "step 60/60  loss ");
  EXPECT_EQ(r.out.find("step 10/60"), std::string::npos);
  EXPECT_CONTAINS(r.out, "done: 60 steps in ");
  std::string log = read("log.jsonl");
  auto losses = json_losses(log);
  ASSERT_EQ(losses.size(), 60u);
  EXPECT_CONTAINS(log, "{\"step\": 1, \"loss\": ");
  EXPECT_CONTAINS(log, "\"lr\": 0.05}");
  // The three batches cycle, so compare the same batch early and late.
  EXPECT_LT(losses[57], losses[0] * 0.7);

  std::string st = read("out.safetensors");
  ASSERT_GT(st.size(), 8u);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= uint64_t(uint8_t(st[size_t(i)])) << (8 * i);
  ASSERT_EQ(st.size(), 8 + n + 152);
  std::string header = st.substr(8, n);
  EXPECT_CONTAINS(header, "\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[5,3],"
                          "\"data_offsets\":[0,60]}");
  EXPECT_CONTAINS(header, "\"fc2.bias\":{\"dtype\":\"F32\",\"shape\":[3],"
                          "\"data_offsets\":[140,152]}");
  EXPECT_CONTAINS(header, "\"__metadata__\":{\"format\":\"pt\"}");
  EXPECT_NE(st.substr(8 + n), read("m.weights")); // trained
  EXPECT_FALSE(fs::exists(path("out.safetensors.tmp")));

  // Deterministic: a second run writes the same bytes.
  ASSERT_EQ(train("--steps 60 --lr 0.05 --save out2.safetensors").rc, 0);
  EXPECT_EQ(read("out2.safetensors"), st);
}

TEST_F(Driver, ZeroLearningRateKeepsWeights) {
  Result r = train("--steps 3 --lr 0 --save same.safetensors");
  ASSERT_EQ(r.rc, 0) << r.err;
  std::string st = read("same.safetensors");
  EXPECT_EQ(st.substr(st.size() - 152), read("m.weights"));
}

TEST_F(Driver, Int32LabelsAndSingleBatch) {
  auto x = randoms(12, 7);
  write("x1.npy", spw::write_npy("<f4", {4, 3}, x.data(), 48));
  Result r = run("--input x=x1.npy --input y=y32.npy --weights m.weights "
                 "--steps 2");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_CONTAINS(r.out, "input x: f32 [4,3] from x1.npy (1 batch)");
}

TEST_F(Driver, DefaultWeightsNextToExecutable) {
  fs::copy_file(SPW_TEST_MODEL_EXE, path("model"));
  fs::permissions(path("model"), fs::perms::owner_all);
  Result missing = run("--input x=x.npy --input y=y.npy", "", path("model"));
  EXPECT_EQ(missing.rc, 1);
  EXPECT_CONTAINS(missing.err, "error: weights file '" + path("model.weights") +
                                   "' not found: pass --weights FILE");
  fs::copy_file(path("m.weights"), path("model.weights"));
  Result r = run("--input x=x.npy --input y=y.npy", "", path("model"));
  EXPECT_EQ(r.rc, 0) << r.err;
}

TEST_F(Driver, GradientCheck) {
  Result r = train("--check-gradients --seed 3");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_CONTAINS(r.out, "gradcheck fc1.weight: 15/15 elements ok, max abs err");
  EXPECT_CONTAINS(r.out, "gradcheck fc2.bias: 3/3 elements ok");
  EXPECT_CONTAINS(r.out, "gradient check passed");
  Result few = train("--check-gradients --fd-samples 4 --fd-eps 1e-3 "
                     "--fd-tol 5e-2");
  ASSERT_EQ(few.rc, 0) << few.out;
  EXPECT_CONTAINS(few.out, "gradcheck fc1.weight: 4/4 elements ok");

  Result bad = train("--check-gradients", "SPW_TEST_BAD_GRAD=1");
  EXPECT_EQ(bad.rc, 1);
  EXPECT_CONTAINS(bad.out, "gradcheck fc1.weight: 0/15 elements ok");
  EXPECT_CONTAINS(bad.out, "gradcheck fc1.bias: 5/5 elements ok");
  EXPECT_CONTAINS(bad.out, "gradient check FAILED");

  // Evaluate-only: the weights are not updated.
  Result save = train("--check-gradients --save g.safetensors");
  ASSERT_EQ(save.rc, 0);
  std::string st = read("g.safetensors");
  EXPECT_EQ(st.substr(st.size() - 152), read("m.weights"));
}

TEST_F(Driver, NanLossStops) {
  Result r = train("--steps 10 --log-json l.jsonl", "SPW_TEST_NAN_AT=3");
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "error: loss became NaN at step 3; lower --lr");
  EXPECT_EQ(json_losses(read("l.jsonl")).size(), 3u); // the last is null
  EXPECT_CONTAINS(read("l.jsonl"), "{\"step\": 3, \"loss\": null");
}

TEST_F(Driver, UsageErrors) {
  Result r = train("--bogus 3");
  EXPECT_EQ(r.rc, 2);
  EXPECT_CONTAINS(r.err, "error: unknown flag '--bogus'");
  r = train("--steps 1x");
  EXPECT_EQ(r.rc, 2);
  EXPECT_CONTAINS(r.err, "invalid value '1x' for --steps");
  r = train("--lr");
  EXPECT_EQ(r.rc, 2);
  EXPECT_CONTAINS(r.err, "--lr needs a value");
  r = train("--beta1 1.0");
  EXPECT_EQ(r.rc, 2);
  EXPECT_CONTAINS(r.err, "--beta1");
  r = train("--fd-tol 0.1");
  EXPECT_EQ(r.rc, 2);
  EXPECT_CONTAINS(r.err, "need --check-gradients");
  r = train("--input z=x.npy");
  EXPECT_EQ(r.rc, 2);
  EXPECT_CONTAINS(r.err, "the model has no input 'z' (its inputs: x, y)");
  r = run("--help");
  EXPECT_EQ(r.rc, 0);
  EXPECT_CONTAINS(r.out, "--check-gradients");
}

TEST_F(Driver, InputErrors) {
  Result r = run("--input x=x.npy --weights m.weights");
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "error: input 'y' has no data: pass --input "
                         "y=FILE.npy");

  double d[36] = {};
  write("x64.npy", spw::write_npy("<f8", {3, 4, 3}, d, sizeof d));
  r = run("--input x=x64.npy --input y=y.npy --weights m.weights");
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "input 'x' (x64.npy): dtype is float64 ('<f8'), "
                         "expected float32: convert with "
                         "arr.astype(np.float32)");

  float f[10] = {};
  write("xs.npy", spw::write_npy("<f4", {2, 5}, f, sizeof f));
  r = run("--input x=xs.npy --input y=y.npy --weights m.weights");
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "input 'x' (xs.npy): shape is (2, 5), expected "
                         "(4, 3) (one batch) or (B, 4, 3)");

  r = run("--input x=x.npy --input y=x.npy --weights m.weights");
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "input 'y' (x.npy): dtype is float32 ('<f4'), "
                         "expected int64 (or int32): convert with "
                         "arr.astype(np.int64)");

  std::string good = read("x.npy");
  write("trunc.npy", good.substr(0, good.size() - 3));
  r = run("--input x=trunc.npy --input y=y.npy --weights m.weights");
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "input 'x': trunc.npy: truncated .npy file");

  r = run("--input x=nope.npy --input y=y.npy --weights m.weights");
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "cannot open .npy file 'nope.npy'");

  // Labels are range-checked by the kernel, with the step number.
  std::vector<int64_t> y = {0, 1, 5, 1};
  write("ybad.npy", spw::write_npy("<i8", {4}, y.data(), 32));
  r = run("--input x=x.npy --input y=ybad.npy --weights m.weights");
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "error: step 1: softmax_cross_entropy_loss: label 5 "
                         "at position 2 is out of range [0, 3)");
}

TEST_F(Driver, WeightsTooSmall) {
  write("short.weights", read("m.weights").substr(0, 100));
  Result r = train("--weights short.weights");
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "weights file 'short.weights' is 100 bytes, but the "
                         "model expects 152");
}

} // namespace
