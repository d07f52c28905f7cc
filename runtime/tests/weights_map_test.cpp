//===- weights_map_test.cpp - reading weights in place from a weights map -===//
//
// check_weights and WeightsPlan::read (driver/weights.cpp) on a hand-made
// map: every byte range of every parameter reads what the logical blob
// holds, across segment boundaries, from two sources and the map's inline
// region, with uncovered bytes as zeros. An offload plan's start reads such
// ranges (a block's piece of a parameter), so each range is checked, not
// only whole parameters.
//
//===----------------------------------------------------------------------===//

#include "driver/driver.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sys/stat.h>
#include <xxhash.h>

namespace fs = std::filesystem;

namespace {

struct MapFixture : ::testing::Test {
  fs::path dir;
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("spw-weights-map-" + std::to_string(::getpid()));
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  std::string write(const std::string &name, const std::string &bytes) {
    const std::string p = (dir / name).string();
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  static std::string source_json(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    std::string b((std::istreambuf_iterator<char>(in)), {});
    const size_t a = std::min<size_t>(b.size(), 65536);
    const std::string s = b.substr(0, a) + b.substr(b.size() - a);
    struct stat st;
    EXPECT_EQ(::stat(path.c_str(), &st), 0);
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx",
                  (unsigned long long)XXH3_64bits(s.data(), s.size()));
    return spw::format("{\"path\": \"%s\", \"bytes\": %zu, \"mtime_ns\": "
                       "%lld, \"sample\": \"%s\", \"later\": [1, {\"x\": "
                       "null}]}",
                       path.c_str(), b.size(),
                       (long long)st.st_mtim.tv_sec * 1000000000 +
                           st.st_mtim.tv_nsec,
                       hex);
  }
};

TEST_F(MapFixture, EveryRangeReadsTheLogicalBlob) {
  // Three f32 parameters at 0, 160 (after 12 bytes of padding) and 360.
  auto ctx = spw::make_context();
  ctx->defer_alloc = true;
  const int64_t d0[] = {37}, d1[] = {50}, d2[] = {13};
  spw_declare_weights(ctx.get(), 412);
  spw_declare_param(ctx.get(), "a", SPW_F32, 1, d0, 0);
  spw_declare_param(ctx.get(), "b", SPW_F32, 1, d1, 160);
  spw_declare_param(ctx.get(), "c", SPW_F32, 1, d2, 360);
  ASSERT_FALSE(ctx->failed()) << ctx->error;

  std::mt19937 rng(7);
  std::string blob(412, '\0');
  for (char &c : blob)
    c = char(rng() & 0xff);
  // Segments: [0,100) from s0 at 7; [100,140) inline; [140,160) uncovered
  // (the end of "a" and the padding after it); [160,161) from s1 at 3 (a
  // one-byte segment inside a float); [161,200) from s0 at 200; [200,210)
  // uncovered (inside "b"); [210,300) from s0 at 249; [300,300) empty;
  // [300,412) inline.
  std::string expected = blob;
  std::memset(expected.data() + 140, 0, 20);
  std::memset(expected.data() + 200, 0, 10);
  const std::string s0 = write("s0.bin", std::string(7, 'x') +
                                             blob.substr(0, 100) +
                                             std::string(93, 'y') +
                                             blob.substr(161, 139));
  const std::string s1 = write("s1.bin", "abc" + blob.substr(160, 1) + "z");
  std::string inline_bytes = blob.substr(100, 40) + blob.substr(300, 112);
  auto header = [&](int64_t start) {
    return spw::format(
        "{\"format\": \"spillway-weights-map\", \"version\": 1, \"size\": 412, "
        "\"future\": {\"a\": [true, false, -1.5e3]}, \"sources\": [%s, %s], "
        "\"segments\": [[0, 100, 0, 7], [100, 40, -1, %lld], [160, 1, 1, 3], "
        "[161, 39, 0, 200], [210, 90, 0, 249], [300, 0, 1, 0], [300, 112, -1, %lld]]}",
        source_json(s0).c_str(), source_json(s1).c_str(), (long long)start,
        (long long)start + 40);
  };
  std::string h = header(1000000);
  const int64_t start = 16 + int64_t(h.size());
  h = header(start);
  h.resize(size_t(start - 16), ' ');
  std::string map = "SPWWMAP1";
  for (int i = 0; i < 8; ++i)
    map += char((h.size() >> (8 * i)) & 0xff);
  const std::string path = write("m.map", map + h + inline_bytes);

  spw::driver::WeightsPlan plan =
      spw::driver::check_weights(ctx.get(), path, true);
  ASSERT_TRUE(plan.map);
  const int64_t offsets[] = {0, 160, 360};
  for (size_t i = 0; i < 3; ++i) {
    const int64_t bytes = ctx->params[i].value->bytes();
    for (int64_t b = 0; b < bytes; ++b)
      for (int64_t n = 0; b + n <= bytes; n += 1 + n / 3) {
        std::string got(size_t(n), '?');
        plan.read(ctx.get(), i, b, size_t(n), got.data());
        ASSERT_EQ(got, expected.substr(size_t(offsets[i] + b), size_t(n)))
            << "parameter " << i << " bytes [" << b << ", " << b + n << ")";
      }
  }

  // A raw file of exactly the model's size that starts with the magic.
  const std::string raw = write("magic.raw", "SPWWMAP1" + blob.substr(8));
  spw::driver::WeightsPlan rp = spw::driver::check_weights(ctx.get(), raw, true);
  EXPECT_FALSE(rp.map);
  std::string got(8, '?');
  rp.read(ctx.get(), 0, 0, 8, got.data());
  EXPECT_EQ(got, "SPWWMAP1");
}

} // namespace
