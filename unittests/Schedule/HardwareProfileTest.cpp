//===- HardwareProfileTest.cpp - the profile's JSON schema ----------------===//

#include "spillway/Schedule/HardwareProfile.h"

#include <gtest/gtest.h>

using namespace spillway::schedule;

namespace {
HardwareProfile sample() {
  HardwareProfile p;
  p.name = "sample";
  p.source = "made up";
  p.backend = "cuda";
  p.gpuBf16TFlops = 450;
  p.gpuFp32TFlops = 50;
  p.gpuMemoryBytes = 1ull << 37;
  p.hostMemoryBytes = 1ull << 36;
  p.hostMemcpyGBps = 33;
  p.cpuOptimizerParamsPerSec = 4e9;
  p.h2dGBps = 55;
  p.d2hGBps = 55;
  p.bidirectionalGBps = 90;
  p.ssds = {{"/a", 2.1, 2.0, 3.0}, {"/b", 1, 1, 1.5}};
  return p;
}

/// `sample()` as JSON with `from` replaced by `to` (the first occurrence).
std::string edited(const std::string &from, const std::string &to) {
  std::string s = writeHardwareProfile(sample());
  size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from << " not in " << s;
  return s.replace(at, from.size(), to);
}

std::string errorOf(const std::string &json) {
  std::string error;
  auto p = parseHardwareProfile(json, "hw.json", error);
  EXPECT_FALSE(p.has_value());
  return error;
}
} // namespace

TEST(HardwareProfile, RoundTrips) {
  std::string error;
  auto p = parseHardwareProfile(writeHardwareProfile(sample()), "x", error);
  ASSERT_TRUE(p) << error;
  EXPECT_EQ(p->name, "sample");
  EXPECT_EQ(p->source, "made up");
  EXPECT_EQ(p->gpuMemoryBytes, 1ull << 37);
  EXPECT_DOUBLE_EQ(p->bidirectionalGBps, 90);
  ASSERT_EQ(p->ssds.size(), 2u);
  EXPECT_EQ(p->ssds[1].path, "/b");
  // Striping adds devices, never a device's reads and writes.
  EXPECT_DOUBLE_EQ(p->ssdReadGBps(), 3.1);
  EXPECT_DOUBLE_EQ(p->ssdWriteGBps(), 3.0);
  EXPECT_DOUBLE_EQ(p->ssdCombinedGBps(), 4.5);
}

TEST(HardwareProfile, MissingKeyIsNamed) {
  // Renaming a key makes it both missing and unknown: missing is said first.
  EXPECT_EQ(errorOf(edited("\"h2d_gbps\"", "\"h2d\"")),
            "hardware profile 'hw.json' pcie: missing key 'h2d_gbps'");
  EXPECT_EQ(errorOf(edited("\"ssd\"", "\"ssds\"")),
            "hardware profile 'hw.json': missing key 'ssd'");
}

TEST(HardwareProfile, UnknownKeyIsNamed) {
  EXPECT_EQ(errorOf(edited("\"h2d_gbps\"", "\"h2d_gbs\": 1, \"h2d_gbps\"")),
            "hardware profile 'hw.json' pcie: unknown key 'h2d_gbs'");
  EXPECT_EQ(errorOf(edited("\"name\"", "\"color\": \"red\", \"name\"")),
            "hardware profile 'hw.json': unknown key 'color'");
}

TEST(HardwareProfile, WrongTypeIsNamed) {
  EXPECT_EQ(errorOf(edited("\"bf16_tflops\": 450", "\"bf16_tflops\": \"fast\"")),
            "hardware profile 'hw.json' gpu: 'bf16_tflops' must be a number");
  EXPECT_EQ(errorOf(edited("\"memory_bytes\": 137438953472",
                           "\"memory_bytes\": 1.5")),
            "hardware profile 'hw.json' gpu: 'memory_bytes' must be an integer (bytes)");
  EXPECT_EQ(errorOf(edited("\"path\": \"/a\"", "\"path\": 7")),
            "hardware profile 'hw.json' ssd[0]: 'path' must be a string");
}

TEST(HardwareProfile, RatesMustBePositive) {
  EXPECT_EQ(errorOf(edited("\"read_gbps\": 1", "\"read_gbps\": 0")),
            "hardware profile 'hw.json' ssd[1]: 'read_gbps' must be positive, got 0.000000");
  EXPECT_EQ(errorOf(edited("\"memcpy_gbps\": 33", "\"memcpy_gbps\": -33")),
            "hardware profile 'hw.json' host: 'memcpy_gbps' must be positive, got -33.000000");
}

TEST(HardwareProfile, RatesMustBeFinite) {
  // 1e400 overflows a double: an infinite rate would make every transfer
  // free.
  EXPECT_EQ(errorOf(edited("\"read_gbps\": 1", "\"read_gbps\": 1e400")),
            "hardware profile 'hw.json' ssd[1]: 'read_gbps' must be a finite number, got inf");
  EXPECT_EQ(errorOf(edited("\"h2d_gbps\": 55", "\"h2d_gbps\": -1e400")),
            "hardware profile 'hw.json' pcie: 'h2d_gbps' must be a finite number, got -inf");
}

TEST(HardwareProfile, DuplicateSSDPathIsRejected) {
  // One device listed twice would double the modelled bandwidth.
  EXPECT_EQ(errorOf(edited("\"path\": \"/b\"", "\"path\": \"/a\"")),
            "hardware profile 'hw.json' ssd[1]: duplicate path '/a' (each SSD "
            "is listed once)");
}

TEST(HardwareProfile, SchemaAndSyntax) {
  EXPECT_EQ(errorOf(edited("spillway-hw-profile-1", "spillway-hw-profile-9")),
            "hardware profile 'hw.json': 'schema' is 'spillway-hw-profile-9', "
            "expected 'spillway-hw-profile-1'");
  EXPECT_EQ(errorOf(edited("\"cuda\"", "\"tpu\"")),
            "hardware profile 'hw.json': 'backend' must be \"cuda\" or \"cpu\", got 'tpu'");
  EXPECT_NE(errorOf("{").find("hardware profile 'hw.json': not valid JSON"),
            std::string::npos);
  std::string error;
  EXPECT_FALSE(readHardwareProfile("/nonexistent/hw.json", error));
  EXPECT_NE(error.find("cannot read hardware profile '/nonexistent/hw.json'"),
            std::string::npos);
}

TEST(HardwareProfile, CommittedProfilesParse) {
  for (const char *name : {"h200.json", "cpu-ci.json"}) {
    std::string error;
    auto p = readHardwareProfile(
        std::string(SPILLWAY_SOURCE_DIR) + "/profiles/" + name, error);
    ASSERT_TRUE(p) << error;
    EXPECT_FALSE(p->source.empty()) << name << " should say where it came from";
    EXPECT_FALSE(p->ssds.empty());
  }
}

TEST(HardwareProfile, NetworkIsOptionalAndChecked) {
  std::string error;
  HardwareProfile p = sample();
  EXPECT_EQ(writeHardwareProfile(p).find("network"), std::string::npos);
  p.networkGBps = 12.5;
  const std::string json = writeHardwareProfile(p);
  auto back = parseHardwareProfile(json, "x", error);
  ASSERT_TRUE(back) << error;
  EXPECT_DOUBLE_EQ(back->networkGBps, 12.5);
  auto without =
      parseHardwareProfile(writeHardwareProfile(sample()), "x", error);
  ASSERT_TRUE(without) << error;
  EXPECT_DOUBLE_EQ(without->networkGBps, 0);
  auto edit = [&](const std::string &from, const std::string &to) {
    std::string s = json;
    s.replace(s.find(from), from.size(), to);
    return errorOf(s);
  };
  EXPECT_EQ(edit("\"gbps\": 12.5", "\"gbps\": -1"),
            "hardware profile 'hw.json' network: 'gbps' must be positive, "
            "got -1.000000");
  EXPECT_EQ(edit("\"gbps\": 12.5", "\"gbps\": 1, \"latency\": 2"),
            "hardware profile 'hw.json' network: unknown key 'latency'");
  EXPECT_EQ(edit("{\"gbps\": 12.5}", "12.5"),
            "hardware profile 'hw.json': 'network' must be an object");
}

TEST(HardwareProfile, RatesTooSmallForFiniteTimesAreRefused) {
  // Positive, but 1e-320 GB/s makes every predicted time infinite.
  EXPECT_EQ(errorOf(edited("\"h2d_gbps\": 55", "\"h2d_gbps\": 1e-320")),
            "hardware profile 'hw.json' pcie: 'h2d_gbps' must be at least "
            "1e-12, got 9.99989e-321");
}
