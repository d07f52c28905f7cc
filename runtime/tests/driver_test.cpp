//===- driver_test.cpp - spw_main end to end, through a real executable ---===//
//
// Runs spillway_runtime_test_model (tests/test_model.cpp: a hand-written
// model linked with the runtime) with files written here, and checks exit
// codes, output and the files it writes.
//
//===----------------------------------------------------------------------===//

#include "executable_fixture.h"
#include "storage/checkpoint.h"
#include "storage/io_engine.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace spwtest;
namespace fs = std::filesystem;

namespace {

class Driver : public ExecutableTest {
protected:
  Driver() : ExecutableTest(SPW_TEST_MODEL_EXE) {}

  void SetUp() override {
    ExecutableTest::SetUp();
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
  Result train(const std::string &extra, const std::string &env = "") {
    return run("--input x=x.npy --input y=y.npy --weights m.weights " + extra,
               env);
  }
};

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
  EXPECT_CONTAINS(spwtest::without_timings(log), "\"lr\": 0.05}");
  // The timings follow (docs/runtime.md, --log-json).
  EXPECT_CONTAINS(log, "\"lr\": 0.05, \"elapsed_s\": ");
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
  // The loss was steady before: the message points at the batch and the
  // model first, not at --lr.
  EXPECT_CONTAINS(r.err, "error: loss became NaN at step 3 (step 2's was ");
  EXPECT_CONTAINS(r.err, "not growing), from finite weights: check batch 2 "
                         "of input 'x', batch 2 of input 'y' and the model");
  EXPECT_CONTAINS(r.err, "`spillwayc -v` lists the parameters");
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

TEST_F(Driver, RawWeightsMustHaveTheModelsSize) {
  write("short.weights", read("m.weights").substr(0, 100));
  Result r = train("--weights short.weights");
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "error: weights file 'short.weights' is 100 bytes, "
                         "the model's weights are 152 bytes; was it written "
                         "for another model?");
  write("long.weights", read("m.weights") + std::string(8, '\0'));
  r = train("--weights long.weights");
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "error: weights file 'long.weights' is 160 bytes, "
                         "the model's weights are 152 bytes; was it written "
                         "for another model?");
}

// The data section of a .safetensors image (the parameters, in order).
std::string st_data(const std::string &st) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= uint64_t(uint8_t(st[size_t(i)])) << (8 * i);
  return st.substr(8 + n);
}

std::string make_st(const std::string &header, const std::string &data) {
  std::string out;
  for (int i = 0; i < 8; ++i)
    out += char((uint64_t(header.size()) >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string entry(const std::string &name, const std::string &dtype,
                  const std::string &shape, int64_t begin, int64_t end) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":[" + shape +
         "],\"data_offsets\":[" + std::to_string(begin) + "," +
         std::to_string(end) + "]}";
}

// The test model's four parameters over the 152 bytes of m.weights.
std::string model_header(const std::string &extra = "") {
  return "{" + entry("fc1.weight", "F32", "5,3", 0, 60) + "," +
         entry("fc1.bias", "F32", "5", 60, 80) + "," +
         entry("fc2.weight", "F32", "5,3", 80, 140) + "," +
         entry("fc2.bias", "F32", "3", 140, 152) + extra + "}";
}

TEST_F(Driver, ResumesFromSavedSafetensors) {
  // The reproducer of the bug: this used to read the JSON header as floats.
  ASSERT_EQ(train("--steps 6 --lr 0.05 --save a.safetensors").rc, 0);
  Result r = run("--input x=x.npy --input y=y.npy --weights a.safetensors "
                 "--steps 0 --save b.safetensors");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_CONTAINS(r.out, "  weights: a.safetensors");
  // Loaded bit for bit: saving again gives the same file.
  EXPECT_EQ(read("b.safetensors"), read("a.safetensors"));

  // The forward pass depends only on the weights and the batch: step 1 of a
  // run resumed after 6 steps sees the weights of step 7 of a continuous run
  // and, with 3 batches, the same batch (6 % 3 == 0), so the same loss. (The
  // updates then differ: the AdamW moments and step count start afresh.)
  ASSERT_EQ(train("--steps 7 --lr 0.05 --log-json full.jsonl").rc, 0);
  r = run("--input x=x.npy --input y=y.npy --weights a.safetensors --steps 1 "
          "--lr 0.05 --log-json resumed.jsonl");
  ASSERT_EQ(r.rc, 0) << r.err;
  std::istringstream full(spwtest::without_timings(read("full.jsonl")));
  std::string line, last;
  while (std::getline(full, line))
    last = line;
  std::string resumed = spwtest::without_timings(read("resumed.jsonl"));
  ASSERT_EQ(last.rfind("{\"step\": 7, \"loss\": ", 0), 0u) << last;
  EXPECT_EQ("{\"step\": 1, " + last.substr(12) + "\n", resumed);
  auto full_losses = json_losses(read("full.jsonl"));
  EXPECT_LT(full_losses[6], full_losses[0]); // trained weights were loaded
}

TEST_F(Driver, LoadsSafetensorsByName) {
  // Another writer: its own tensor order, metadata with escapes, whitespace,
  // no padding, an extra tensor (ignored with a warning).
  const std::string w = read("m.weights");
  std::string header =
      "{\"__metadata__\": {\"format\": \"pt\", \"note\": \"a\\\"b\\u00e9\"},"
      " " + entry("fc2.bias", "F32", "3", 0, 12) + ", " +
      entry("step", "I64", "", 12, 20) + ",\n" +
      entry("fc2.weight", "F32", "5,3", 20, 80) + "," +
      entry("fc1.bias", "F32", "5", 80, 100) + "," +
      entry("fc1.weight", "F32", "5,3", 100, 160) + "}";
  std::string data = w.substr(140, 12) + std::string(8, '\x07') +
                     w.substr(80, 60) + w.substr(60, 20) + w.substr(0, 60);
  write("other.bin", make_st(header, data));
  Result r = run("--input x=x.npy --input y=y.npy --weights other.bin "
                 "--steps 0 --save out.safetensors");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_CONTAINS(r.err, "warning: weights file 'other.bin' has 1 tensor "
                         "that the model does not declare (ignored): step");
  EXPECT_EQ(st_data(read("out.safetensors")), w);
  // Format detection is by content, not name: a raw file named .safetensors.
  fs::copy_file(path("m.weights"), path("raw.safetensors"));
  r = run("--input x=x.npy --input y=y.npy --weights raw.safetensors "
          "--steps 0 --save out2.safetensors");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(st_data(read("out2.safetensors")), w);
}

TEST_F(Driver, RawWeightsThatLookLikeSafetensors) {
  // First bytes: a small u64 and '{', as a safetensors header would start;
  // but the file has the model's exact size and binary "JSON": raw.
  std::string w = read("m.weights");
  const unsigned char head[9] = {20, 0, 0, 0, 0, 0, 0, 0, '{'};
  w.replace(0, 9, reinterpret_cast<const char *>(head), 9);
  write("odd.weights", w);
  Result r = run("--input x=x.npy --input y=y.npy --weights odd.weights "
                 "--steps 0 --save out.safetensors");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(st_data(read("out.safetensors")), w);
}

TEST_F(Driver, SafetensorsErrors) {
  const std::string w = read("m.weights");
  auto load = [&](const std::string &file, const std::string &bytes) {
    write(file, bytes);
    return run("--input x=x.npy --input y=y.npy --weights " + file);
  };
  auto expect_error = [&](const Result &r, const std::string &msg) {
    EXPECT_EQ(r.rc, 1) << r.out;
    EXPECT_CONTAINS(r.err, "error: " + msg);
    EXPECT_EQ(r.out, ""); // nothing ran
  };
  ASSERT_EQ(load("good.st", make_st(model_header(), w)).rc, 0);

  const std::string saved = make_st(model_header(), w);
  expect_error(load("trunc.st", saved.substr(0, saved.size() - 4)),
               "weights file 'trunc.st': tensor 'fc2.bias': data_offsets "
               "[140, 152] run past the end of the data section (148 bytes); "
               "is the file truncated?");
  expect_error(load("trunc2.st", saved.substr(0, 40)),
               "weights file 'trunc2.st' looks like a .safetensors file, but "
               "is truncated: its header is " +
                   std::to_string(model_header().size()) +
                   " bytes, and only 32 bytes follow the 8-byte length");
  expect_error(load("long.st", saved + "x"),
               "weights file 'long.st': the data section is 153 bytes, but "
               "the tensors' data_offsets end at 152");

  std::string shape = model_header();
  shape.replace(shape.find("[5,3]"), 5, "[3,5]");
  expect_error(load("shape.st", make_st(shape, w)),
               "weights file 'shape.st': tensor 'fc1.weight' is F32 [3,5], "
               "but the model's parameter is F32 [5,3]; was it saved from "
               "another model?");
  std::string dtype = model_header();
  dtype.replace(dtype.find("\"F32\",\"shape\":[5]"), 5, "\"I32\"");
  expect_error(load("dtype.st", make_st(dtype, w)),
               "weights file 'dtype.st': tensor 'fc1.bias' is I32 [5], but "
               "the model's parameter is F32 [5]");

  std::string missing = "{" + entry("fc1.weight", "F32", "5,3", 0, 60) + "," +
                        entry("fc2.weight", "F32", "5,3", 60, 120) + "}";
  expect_error(load("missing.st",
                    make_st(missing, w.substr(0, 60) + w.substr(80, 60))),
               "weights file 'missing.st' has no tensor 'fc1.bias' (missing 2 "
               "of the model's 4 parameters: fc1.bias, fc2.bias); was it "
               "saved from another model?");

  std::string offsets = model_header();
  offsets.replace(offsets.find("[60,80]"), 7, "[56,76]");
  expect_error(load("offsets.st", make_st(offsets, w)),
               "weights file 'offsets.st': tensor 'fc1.bias': data_offsets "
               "[56, 76] overlap those of tensor 'fc1.weight'");

  std::string json = model_header();
  json.replace(json.find(",\"fc1.bias\""), 1, " ");
  expect_error(load("json.st", make_st(json, w)),
               "weights file 'json.st': malformed .safetensors header (at "
               "byte 66 of the JSON): expected ',' or '}', found '\"'");

  // A wrong-shaped extra tensor does not matter, but a bad one still does:
  // the whole header is validated.
  expect_error(
      load("extra.st",
           make_st(model_header("," + entry("x", "F32", "2", 152, 160)), w)),
      "weights file 'extra.st': tensor 'x': data_offsets [152, 160] run past "
      "the end of the data section (152 bytes)");
}
// ---- bad input -------------------------------------------------------------

// Runs with `timeout` so that a regression that blocks (a FIFO opened for
// reading waits for a writer) fails instead of hanging the suite.
const char kNoHang[] = "timeout 120";

bool chattr(const std::string &flag, const std::string &path) {
  const std::string cmd = "chattr " + flag + " '" + path + "' 2>/dev/null";
  return std::system(cmd.c_str()) == 0;
}

TEST_F(Driver, NonFiniteInputsAndWeightsAreRefused) {
  auto x = randoms(36, 100);
  x[12 + 5] = NAN; // batch 1, flat index 5 of the batch
  write("xnan.npy", spw::write_npy("<f4", {3, 4, 3}, x.data(), 144));
  Result r = run("--input x=xnan.npy --input y=y.npy --weights m.weights "
                 "--steps 3 --save out.safetensors");
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "error: input 'x' (xnan.npy): batch 1 holds NaN at "
                         "flat index 5 of the batch (flat index 17 of the "
                         "file)");
  EXPECT_EQ(r.out.find("step 1"), std::string::npos) << r.out;
  x[12 + 5] = -INFINITY;
  write("xinf.npy", spw::write_npy("<f4", {3, 4, 3}, x.data(), 144));
  r = run("--input x=xinf.npy --input y=y.npy --weights m.weights");
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "batch 1 holds -Inf at flat index 5");

  std::string w = read("m.weights");
  const float nan = NAN;
  w.replace(60 + 2 * 4, 4, reinterpret_cast<const char *>(&nan), 4);
  write("nan.weights", w);
  r = run("--input x=x.npy --input y=y.npy --weights nan.weights --steps 2 "
          "--save out.safetensors");
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "error: weights file 'nan.weights': parameter "
                         "'fc1.bias' [5] holds NaN at flat index 2");
  EXPECT_FALSE(fs::exists(path("out.safetensors")));
}

TEST_F(Driver, SpecialFilesAreRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0644), 0);
  auto expect_refused = [&](const Result &r, const std::string &msg) {
    EXPECT_EQ(r.rc, 1) << r.err;
    EXPECT_CONTAINS(r.err, msg);
    EXPECT_EQ(r.out.find("step 1"), std::string::npos) << r.out;
  };
  expect_refused(run("--input x=fifo --input y=y.npy --weights m.weights",
                     kNoHang),
                 "error: input 'x': .npy file 'fifo' is a FIFO (named pipe), "
                 "not a regular file");
  expect_refused(run("--input x=x.npy --input y=y.npy --weights fifo",
                     kNoHang),
                 "error: weights file 'fifo' is a FIFO (named pipe), not a "
                 "regular file");
  expect_refused(train("--save fifo", kNoHang),
                 "error: --save 'fifo' is a FIFO (named pipe); the run writes "
                 "a regular file there and will not replace it");
  expect_refused(train("--log-json fifo", kNoHang),
                 "error: --log-json 'fifo' is a FIFO (named pipe)");
  struct stat st;
  ASSERT_EQ(::stat(path("fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));

  // A character device (made here: a regression must not replace the
  // machine's /dev/null) stays one.
  if (::mknod(path("null").c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0)
    GTEST_SKIP() << "mknod: " << std::strerror(errno);
  expect_refused(train("--steps 2 --save null", kNoHang),
                 "error: --save 'null' is a character device");
  // The writer itself refuses too (the driver checks before it writes).
  EXPECT_THROW(spw::write_file_atomic(path("null"), "x"), spw::Error);
  ASSERT_EQ(::stat(path("null").c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

// A forward model's --outputs files are replaced at the end; a FIFO there
// is found before the first step (and neither blocks nor is replaced).
TEST_F(Driver, ForwardOutputFilesAreCheckedBeforeTheSteps) {
  auto x = randoms(24, 200, -2, 2);
  write("fx.npy", spw::write_npy("<f4", {3, 2, 4}, x.data(), 96));
  auto w = randoms(15, 201);
  write("fm.weights", std::string(reinterpret_cast<char *>(w.data()), 60));
  fs::create_directory(path("out"));
  ASSERT_EQ(::mkfifo(path("out/mask.npy").c_str(), 0644), 0);
  Result r = run("--input x=fx.npy --weights fm.weights --outputs out",
                 kNoHang, SPW_FORWARD_MODEL_EXE);
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "error: --outputs 'out/mask.npy' is a FIFO (named "
                         "pipe); the run writes a regular file there");
  EXPECT_EQ(r.out.find("step 1"), std::string::npos) << r.out;
  struct stat st;
  ASSERT_EQ(::stat(path("out/mask.npy").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));

  // The outputs of all steps are kept until the end: more steps than
  // memory for them is an error before the first.
  r = run("--input x=fx.npy --weights fm.weights --outputs out2 "
          "--steps 100000000000",
          kNoHang, SPW_FORWARD_MODEL_EXE);
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "error: --outputs: 100000000000 steps of output "
                         "'logits/out' need 2400000000000 bytes");
  EXPECT_EQ(r.out.find("step 1"), std::string::npos) << r.out;
}

// A forward model's --outputs file that is one of its inputs is refused
// before anything is written (exit 2).
TEST_F(Driver, ForwardOutputsDoNotOverwriteInputs) {
  auto x = randoms(24, 200, -2, 2);
  fs::create_directory(path("out"));
  write("out/mask.npy", spw::write_npy("<f4", {3, 2, 4}, x.data(), 96));
  const std::string before = read("out/mask.npy");
  auto w = randoms(15, 201);
  write("fm.weights", std::string(reinterpret_cast<char *>(w.data()), 60));
  Result r = run("--input x=out/mask.npy --weights fm.weights --outputs out",
                 kNoHang, SPW_FORWARD_MODEL_EXE);
  EXPECT_EQ(r.rc, 2);
  EXPECT_CONTAINS(r.err, "error: --outputs file 'out/mask.npy' is the same "
                         "file as --input x=out/mask.npy: the run would "
                         "overwrite what it reads");
  EXPECT_EQ(read("out/mask.npy"), before);
}

TEST_F(Driver, OutputsAreCheckedBeforeTraining) {
  auto expect_early = [&](const Result &r, const std::string &msg) {
    EXPECT_EQ(r.rc, 1) << r.err;
    EXPECT_CONTAINS(r.err, msg);
    // Found before step 1, not after the last one.
    EXPECT_EQ(r.out.find("step 1"), std::string::npos) << r.out;
  };
  expect_early(train("--steps 5 --save nodir/out.safetensors"),
               "error: --save 'nodir/out.safetensors': directory 'nodir' "
               "does not exist; create it first");
  write("file", "x");
  expect_early(train("--steps 5 --save file/out.safetensors"),
               "error: --save 'file/out.safetensors': a part of the path is "
               "not a directory");
  expect_early(train("--steps 5 --log-json nodir/log.jsonl"),
               "error: --log-json 'nodir/log.jsonl': directory 'nodir' does "
               "not exist");
  expect_early(train("--steps 5 --checkpoint-dir file/ck"),
               "error: --checkpoint-dir 'file/ck': a part of the path is not "
               "a directory");
  expect_early(train("--steps 5 --checkpoint-dir file"),
               "error: cannot create --checkpoint-dir directory 'file': "
               "'file' is a regular file, not a directory");
  // A missing --checkpoint-dir under a directory that takes files is fine.
  Result ok = train("--steps 2 --checkpoint-dir new/ck --save out.safetensors");
  EXPECT_EQ(ok.rc, 0) << ok.err;
  EXPECT_TRUE(fs::exists(path("out.safetensors")));

  // access(2) says yes to root on an immutable directory: only creating a
  // file there tells.
  fs::create_directory(path("ro"));
  if (!chattr("+i", path("ro")))
    GTEST_SKIP() << "chattr +i is not available here";
  Result r = train("--steps 5 --checkpoint-dir ro");
  Result s = train("--steps 5 --save ro/out.safetensors");
  chattr("-i", path("ro"));
  expect_early(r, "error: --checkpoint-dir 'ro': cannot create files in "
                  "directory 'ro': Operation not permitted");
  expect_early(s, "error: --save 'ro/out.safetensors': cannot create files "
                  "in directory 'ro'");
}

TEST_F(Driver, FailedSaveRescuesTheWeights) {
  ASSERT_EQ(train("--steps 4 --lr 0.05 --save want.safetensors").rc, 0);
  // The directory takes files, so the up-front check passes; the write of
  // the temporary fails only at the end (a full disk, injected).
  write("out.safetensors", "old");
  fs::create_directory(path("rescue"));
  Result r = train("--steps 4 --lr 0.05 --save out.safetensors",
                   "TMPDIR=" + path("rescue") +
                       " SPILLWAY_TEST_ENOSPC=out.safetensors");
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.out, "step 4/4");
  EXPECT_CONTAINS(r.err, "error: --save: cannot write 'out.safetensors.tmp.");
  EXPECT_CONTAINS(r.err, "; the trained weights were written to '" +
                             path("rescue") + "/out.safetensors.rescued-");
  EXPECT_EQ(read("out.safetensors"), "old");
  std::vector<fs::path> rescued;
  for (const auto &e : fs::directory_iterator(path("rescue")))
    rescued.push_back(e.path());
  ASSERT_EQ(rescued.size(), 1u);
  EXPECT_EQ(read("rescue/" + rescued[0].filename().string()),
            read("want.safetensors"));
  // The failed write left no temporary behind.
  for (const auto &e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos)
        << e.path();
}

// A --save file that cannot be replaced (chattr +i or +a) is found before
// step 1, not when the rename fails at the end.
TEST_F(Driver, UnreplaceableSaveIsRefusedBeforeTraining) {
  write("out.safetensors", "old");
  write("log.jsonl", "old");
  if (!chattr("+i", path("out.safetensors")))
    GTEST_SKIP() << "chattr +i is not available here";
  Result r = train("--steps 4 --save out.safetensors");
  chattr("-i", path("out.safetensors"));
  ASSERT_TRUE(chattr("+a", path("log.jsonl")));
  Result a = train("--steps 4 --log-json log.jsonl");
  chattr("-a", path("log.jsonl"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "error: --save 'out.safetensors' is immutable "
                         "(chattr +i), so the run could not replace it: "
                         "remove the attribute (chattr -i)");
  EXPECT_EQ(r.out.find("step 1"), std::string::npos) << r.out;
  EXPECT_EQ(a.rc, 1);
  EXPECT_CONTAINS(a.err, "error: --log-json 'log.jsonl' is append-only "
                         "(chattr +a)");
  EXPECT_EQ(read("out.safetensors"), "old");
}

// --save through a symlink replaces the link's target, as --log-json writes
// through it; the link stays.
TEST_F(Driver, SaveFollowsSymlinks) {
  fs::create_directory(path("d"));
  fs::create_symlink("d/target.safetensors", path("link.safetensors"));
  fs::create_symlink("d/log.jsonl", path("link.jsonl"));
  Result r = train("--steps 2 --save link.safetensors --log-json link.jsonl");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(path("link.safetensors")));
  ASSERT_TRUE(fs::exists(path("d/target.safetensors")));
  ASSERT_EQ(train("--steps 2 --save want.safetensors").rc, 0);
  EXPECT_EQ(read("d/target.safetensors"), read("want.safetensors"));
  EXPECT_EQ(json_losses(read("d/log.jsonl")).size(), 2u);
  // A second save replaces the target again, through the link.
  ASSERT_EQ(train("--steps 3 --save link.safetensors").rc, 0);
  EXPECT_TRUE(fs::is_symlink(path("link.safetensors")));
  EXPECT_NE(read("d/target.safetensors"), read("want.safetensors"));
}

// The writability probe carries its pid; a killed run's probe is removed by
// the next run that probes the directory.
TEST_F(Driver, StaleProbesAreRemoved) {
  const std::string dead = ".spillway-probe-" + std::to_string(dead_pid()) + "-ab12Cd";
  const std::string live =
      ".spillway-probe-" + std::to_string(::getpid()) + "-ab12Cd";
  write(dead, "");
  write(live, "");
  Result r = train("--steps 1 --save out.safetensors");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_FALSE(fs::exists(path(dead)));
  EXPECT_TRUE(fs::exists(path(live)));
  for (const auto &e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n != live)
      EXPECT_EQ(n.find(".spillway-probe-"), std::string::npos) << n;
  }
}

// A checkpoint whose checksums match but which holds a NaN (crafted: the
// writer never writes one) is refused at the resume, naming the tensor.
TEST_F(Driver, ResumedNonFiniteStateIsRefused) {
  namespace st = spw::storage;
  ASSERT_EQ(train("--steps 2 --checkpoint-dir ck").rc, 0);
  auto rewrite = [&](const std::string &tensor, size_t element, float value) {
    st::IoEngine engine(st::EngineConfig{});
    st::CheckpointOptions opts;
    std::optional<st::LoadedCheckpoint> c =
        st::load_newest_checkpoint(engine, path("ck"), opts);
    ASSERT_TRUE(c.has_value());
    std::vector<std::string> bytes;
    for (const st::CheckpointTensor &t : c->tensors)
      bytes.emplace_back(static_cast<const char *>(c->data(t)),
                         size_t(t.bytes));
    std::vector<st::CheckpointTensorRef> refs;
    for (size_t i = 0; i < c->tensors.size(); ++i) {
      const st::CheckpointTensor &t = c->tensors[i];
      if (t.name == tensor)
        std::memcpy(bytes[i].data() + element * 4, &value, 4);
      refs.push_back({t.name, t.dtype, t.shape, bytes[i].data(), t.bytes});
    }
    st::write_checkpoint(engine, path("ck"), c->step, refs, c->metadata,
                         opts);
  };
  rewrite("param/fc1.bias", 2, NAN);
  Result r = train("--steps 4 --checkpoint-dir ck --resume");
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "error: checkpoint '" + std::string("ck/step-00000002") +
                             "': parameter 'fc1.bias' [5] holds NaN at flat "
                             "index 2, which training never writes");
  EXPECT_EQ(r.out.find("step 3/"), std::string::npos) << r.out;
  rewrite("param/fc1.bias", 2, 0.5f);
  rewrite("adam_v/fc2.weight", 1, -1.0f);
  r = train("--steps 4 --checkpoint-dir ck --resume");
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "the second moment (adam_v) of 'fc2.weight' [5,3] "
                         "holds a negative value (-1) at flat index 1");
  rewrite("adam_v/fc2.weight", 1, 0.0f);
  rewrite("adam_m/fc1.weight", 0, INFINITY);
  r = train("--steps 4 --checkpoint-dir ck --resume");
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "the first moment (adam_m) of 'fc1.weight' [5,3] "
                         "holds +Inf at flat index 0");
  rewrite("adam_m/fc1.weight", 0, 0.0f);
  r = train("--steps 4 --checkpoint-dir ck --resume");
  EXPECT_EQ(r.rc, 0) << r.err;
}

// A checkpoint that cannot be written (here: ENOSPC, injected) ends the
// run, but the weights of the steps run go to --save, or to a rescue file.
TEST_F(Driver, FailedCheckpointRescuesTheWeights) {
  ASSERT_EQ(train("--steps 3 --lr 0.05 --save want.safetensors").rc, 0);
  fs::create_directory(path("rescue"));
  const std::string env =
      "TMPDIR=" + path("rescue") + " SPILLWAY_IO_FAULTS=enospc@1/write";
  Result r = train("--steps 3 --lr 0.05 --checkpoint-dir ck", env);
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "error: cannot write the checkpoint of step 3");
  EXPECT_CONTAINS(r.err, "; the weights after step 3 were written to '" +
                             path("rescue") +
                             "/weights.safetensors.rescued-");
  std::vector<fs::path> rescued;
  for (const auto &e : fs::directory_iterator(path("rescue")))
    rescued.push_back(e.path());
  ASSERT_EQ(rescued.size(), 1u);
  EXPECT_EQ(read("rescue/" + rescued[0].filename().string()),
            read("want.safetensors"));

  r = train("--steps 3 --lr 0.05 --checkpoint-dir ck2 --save out.safetensors",
            env);
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "; the weights after step 3 were written to "
                         "'out.safetensors'");
  EXPECT_EQ(read("out.safetensors"), read("want.safetensors"));
}

TEST_F(Driver, StaleTemporariesAreRemoved) {
  const std::string dead = std::to_string(dead_pid());
  const std::string live = std::to_string(::getpid());
  write("out.safetensors.tmp." + dead, "left by a killed run");
  write("out.safetensors.tmp." + live, "a running writer's");
  write("other.safetensors.tmp." + dead, "another file's");
  Result r = train("--steps 1 --save out.safetensors");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_FALSE(fs::exists(path("out.safetensors.tmp." + dead)));
  EXPECT_TRUE(fs::exists(path("out.safetensors.tmp." + live)));
  EXPECT_TRUE(fs::exists(path("other.safetensors.tmp." + dead)));
}

TEST_F(Driver, HugeInputsAreCheckedAgainstMemoryFirst) {
  // 2^28 batches of [4,3] floats: a 12 GiB file, sparse here. Under a 2 GB
  // address-space limit the driver says so before it allocates anything
  // (a regression fails on the limit instead of taking the machine).
  const int64_t batches = int64_t(1) << 28;
  const char none = 0;
  write("huge.npy", spw::write_npy("<f4", {batches, 4, 3}, &none, 0));
  fs::resize_file(path("huge.npy"),
                  fs::file_size(path("huge.npy")) + uint64_t(batches) * 48);
  Result r = run("--input x=huge.npy --input y=y.npy --weights m.weights",
                 "ulimit -v 2000000 &&");
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "error: the parameters, their gradients and AdamW "
                         "state, and the inputs need 12884902");
  EXPECT_CONTAINS(r.err, "available (the address-space limit (ulimit -v))");
  EXPECT_EQ(r.out, "");
}

TEST_F(Driver, HyperParameterFlagsNameTheFlag) {
  const std::pair<std::string, std::string> cases[] = {
      {"--lr nan", "invalid value 'nan' for --lr: expected a number in "
                   "[0, 1e+06]"},
      {"--lr inf", "invalid value 'inf' for --lr"},
      {"--weight-decay nan", "invalid value 'nan' for --weight-decay: "
                             "expected a number in [0, 1e+06]"},
      {"--beta1 -nan", "invalid value '-nan' for --beta1: expected a number "
                       "in [0, 1)"},
      {"--beta2 1", "invalid value '1' for --beta2"},
      // eps 0 divides 0 by 0 for an element whose gradient was always 0.
      {"--eps 0", "invalid value '0' for --eps: expected a number in (0, 1]"},
  };
  for (const auto &[flags, msg] : cases) {
    Result r = train(flags);
    EXPECT_EQ(r.rc, 2) << flags;
    EXPECT_CONTAINS(r.err, "error: " + msg);
  }
}

TEST_F(Driver, LoopbackDelaysIsTheLoopbackDevicesFlag) {
  Result r = train("--loopback-delays 3");
  EXPECT_EQ(r.rc, 2);
  EXPECT_CONTAINS(r.err, "error: --loopback-delays seeds the loopback "
                         "device's copies; this run is on --device cpu");
  r = train("--device loopback --loopback-delays -1");
  EXPECT_EQ(r.rc, 2);
  EXPECT_CONTAINS(r.err, "invalid value '-1' for --loopback-delays");
  Result cpu = train("--steps 3 --save cpu.safetensors");
  ASSERT_EQ(cpu.rc, 0) << cpu.err;
  for (const char *seed : {"0", "7"}) {
    r = train(std::string("--steps 3 --device loopback --save l.safetensors "
                          "--loopback-delays ") +
              seed);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(read("l.safetensors"), read("cpu.safetensors")) << seed;
  }
}

} // namespace
