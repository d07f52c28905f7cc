//===- hw_probe_test.cpp - the machine probe behind spillwayc --probe-hw --===//

#include "spillway/runtime/hw_probe.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

TEST(HwProbe, MeasuresEverythingQuickly) {
  spw::probe::ProbeOptions o;
  o.ssd_dirs = {std::filesystem::current_path().string()};
  o.ssd_bytes = 8 << 20;
  o.memcpy_bytes = 16 << 20;
  o.matmul_size = 64;
  o.adamw_params = 1 << 16;
  o.min_seconds = 0.02;
  std::vector<std::string> said;
  o.progress = [&](const std::string &s) { said.push_back(s); };
  spw::probe::HostMeasurement m;
  std::string error;
  ASSERT_TRUE(spw::probe::probe_host(o, m, error)) << error;
  EXPECT_GT(m.memory_bytes, 0u);
  EXPECT_GT(m.cores, 0u);
  EXPECT_GT(m.memcpy_gbps, 0);
  EXPECT_GT(m.matmul_gflops, 0);
  EXPECT_EQ(m.matmul_size, 64u);
  EXPECT_GT(m.adamw_params_per_s, 0);
  ASSERT_EQ(m.ssds.size(), 1u);
  EXPECT_EQ(m.ssds[0].bytes, 8u << 20);
  EXPECT_GT(m.ssds[0].read_gbps, 0);
  EXPECT_GT(m.ssds[0].write_gbps, 0);
  EXPECT_GT(m.ssds[0].combined_gbps, 0);
  EXPECT_FALSE(m.ssds[0].backend.empty());
  EXPECT_GE(said.size(), 7u); // progress for every measurement
}

TEST(HwProbe, MissingDirectoryIsAnError) {
  spw::probe::ProbeOptions o;
  o.ssd_dirs = {"/nonexistent/spillway-probe"};
  o.ssd_bytes = 4 << 20;
  o.memcpy_bytes = 1 << 20;
  o.matmul_size = 16;
  o.adamw_params = 1024;
  o.min_seconds = 0.001;
  spw::probe::HostMeasurement m;
  std::string error;
  EXPECT_FALSE(spw::probe::probe_host(o, m, error));
  EXPECT_NE(error.find("/nonexistent/spillway-probe"), std::string::npos)
      << error;
}
