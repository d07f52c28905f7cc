//===- checkpoint_test.cpp - crash-safe checkpoints ------------------------===//
//
// The checkpoint writer and loader (storage/checkpoint.h) on their own:
// round trips, torn and corrupted checkpoints, injected -ENOSPC, pruning, and
// a SIGKILL at every phase of a write (in a forked child).
//
//===----------------------------------------------------------------------===//

#include "executable_fixture.h"
#include "storage/checkpoint.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <csignal>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

using namespace spw::storage;
using spwtest::Result;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path &p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void spill(const fs::path &p, const std::string &bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

struct Tensors {
  std::vector<std::string> names;
  std::vector<int32_t> dtypes;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::string> bytes;

  std::vector<CheckpointTensorRef> refs() const {
    std::vector<CheckpointTensorRef> out;
    for (size_t i = 0; i < names.size(); ++i)
      out.push_back({names[i], dtypes[i], shapes[i], bytes[i].data(),
                     bytes[i].size()});
    return out;
  }
};

// `n` tensors of random dtypes and shapes (some empty) and contents; the odd
// ones hold only bytes 0..3, so zstd has something to compress.
Tensors random_tensors(size_t n, uint64_t seed, int64_t max_elems) {
  std::mt19937_64 rng(seed);
  Tensors t;
  const int32_t dtypes[] = {SPW_F32, SPW_I64, SPW_I32, SPW_BOOL};
  for (size_t i = 0; i < n; ++i) {
    int32_t dt = dtypes[rng() % 4];
    int64_t elems = i % 7 == 3 ? 0 : int64_t(rng() % uint64_t(max_elems + 1));
    std::vector<int64_t> shape = {elems};
    if (elems % 2 == 0 && elems > 0)
      shape = {2, elems / 2};
    std::string b(size_t(elems * spw::dtype_size(dt)), '\0');
    for (char &c : b)
      c = i % 2 ? char(rng() % 4) : char(rng());
    t.names.push_back("t" + std::to_string(i) + (i % 5 ? "" : "/odd \"name\""));
    t.dtypes.push_back(dt);
    t.shapes.push_back(shape);
    t.bytes.push_back(std::move(b));
  }
  return t;
}

class Checkpoint : public ::testing::Test {
protected:
  fs::path dir;
  std::vector<std::string> notices;
  CheckpointOptions opts;

  void SetUp() override {
    std::string tmpl =
        (fs::temp_directory_path() / "spw_ckpt_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir = tmpl;
    opts.notice = [this](const std::string &m) { notices.push_back(m); };
    opts.chunk_bytes = 64 << 10; // many chunks from small tensors
  }
  void TearDown() override { fs::remove_all(dir); }

  std::string root() const { return (dir / "ckpt").string(); }
  std::string step_dir(int64_t s) const {
    return (dir / "ckpt" / checkpoint_dir_name(s)).string();
  }

  CheckpointWriteResult write(int64_t step, const Tensors &t,
                              IoEngine *engine = nullptr) {
    EngineConfig cfg;
    IoEngine own(cfg);
    return write_checkpoint(engine ? *engine : own, root(), step, t.refs(),
                            {{"who", "test"}, {"step", std::to_string(step)}},
                            opts);
  }
  std::optional<LoadedCheckpoint> load_newest() {
    IoEngine engine(EngineConfig{});
    return load_newest_checkpoint(engine, root(), opts);
  }
  void expect_same(const LoadedCheckpoint &c, const Tensors &t) {
    ASSERT_EQ(c.tensors.size(), t.names.size());
    for (size_t i = 0; i < t.names.size(); ++i) {
      const CheckpointTensor &x = c.tensors[i];
      EXPECT_EQ(x.name, t.names[i]);
      EXPECT_EQ(x.dtype, t.dtypes[i]);
      EXPECT_EQ(x.shape, t.shapes[i]);
      ASSERT_EQ(x.bytes, t.bytes[i].size());
      EXPECT_EQ(std::string(static_cast<const char *>(c.data(x)), x.bytes),
                t.bytes[i])
          << "tensor " << x.name;
    }
  }
  std::string all_notices() const {
    std::string s;
    for (auto &n : notices)
      s += n + "\n";
    return s;
  }
};

TEST_F(Checkpoint, DirNames) {
  EXPECT_EQ(checkpoint_dir_name(42), "step-00000042");
  EXPECT_EQ(checkpoint_dir_name(123456789), "step-123456789");
  EXPECT_EQ(parse_checkpoint_dir_name("step-00000042"), 42);
  EXPECT_EQ(parse_checkpoint_dir_name("step-123456789"), 123456789);
  EXPECT_EQ(parse_checkpoint_dir_name("step-0000042"), -1);
  EXPECT_EQ(parse_checkpoint_dir_name("step-00000042x"), -1);
  EXPECT_EQ(parse_checkpoint_dir_name("step-012345678"), -1);
  EXPECT_EQ(parse_checkpoint_dir_name(".step-00000042.tmp-12"), -1);
}

class CheckpointRoundTrip : public Checkpoint,
                            public ::testing::WithParamInterface<bool> {};

TEST_P(CheckpointRoundTrip, ManyTensorsOfRandomSizes) {
  opts.zstd = GetParam();
  for (uint64_t seed : {1u, 2u, 3u}) {
    Tensors t = random_tensors(40, seed, 50000);
    CheckpointWriteResult w = write(int64_t(seed), t);
    EXPECT_EQ(w.dir, step_dir(int64_t(seed)));
    EXPECT_GT(w.raw_bytes, 0u);
    EXPECT_TRUE(fs::exists(fs::path(w.dir) / "MANIFEST.json"));
    auto c = load_newest();
    ASSERT_TRUE(c);
    EXPECT_EQ(c->step, int64_t(seed));
    EXPECT_EQ(c->dir, w.dir);
    expect_same(*c, t);
    ASSERT_TRUE(c->meta("who"));
    EXPECT_EQ(*c->meta("who"), "test");
    EXPECT_EQ(*c->meta("step"), std::to_string(seed));
    if (opts.zstd) // half the tensors hold only values 0..3
      EXPECT_LT(w.stored_bytes, w.raw_bytes);
  }
  EXPECT_EQ(all_notices(), "");
  const std::string manifest = slurp(fs::path(step_dir(3)) / "MANIFEST.json");
  EXPECT_CONTAINS(manifest, "\"format\": \"spillway-checkpoint\"");
  EXPECT_CONTAINS(manifest,
                  std::string("\"compression\": \"") +
                      (opts.zstd ? "zstd" : "none") + "\"");
  EXPECT_CONTAINS(manifest, "\"name\": \"t0/odd \\\"name\\\"\"");
}

TEST_P(CheckpointRoundTrip, EmptyAndChunkSized) {
  opts.zstd = GetParam();
  Tensors none;
  write(0, none);
  auto c = load_newest();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->step, 0);
  EXPECT_TRUE(c->tensors.empty());
  // Exactly one chunk, and one byte more.
  Tensors t;
  t.names = {"a", "b"};
  t.dtypes = {SPW_BOOL, SPW_BOOL};
  t.shapes = {{64 << 10}, {1}};
  t.bytes = {std::string(64 << 10, '\x5a'), "\x01"};
  write(1, t);
  c = load_newest();
  ASSERT_TRUE(c);
  expect_same(*c, t);
}

TEST_P(CheckpointRoundTrip, StagingFromARegisteredPool) {
  opts.zstd = GetParam();
  Tensors t = random_tensors(30, 5, 30000);
  uint64_t raw = 0;
  for (const std::string &b : t.bytes)
    raw += (b.size() + 63) / 64 * 64;
  PinnedPool pool(size_t(checkpoint_staging_bytes(raw, opts)));
  EngineConfig cfg;
  cfg.pool = &pool;
  IoEngine engine(cfg);
  write(7, t, &engine);
  EXPECT_EQ(pool.bytes_in_use(), 0u);
  auto c = load_newest_checkpoint(engine, root(), opts);
  ASSERT_TRUE(c);
  expect_same(*c, t);
  EXPECT_EQ(all_notices(), "");
}

INSTANTIATE_TEST_SUITE_P(Compression, CheckpointRoundTrip,
                         ::testing::Values(false, true),
                         [](const auto &info) {
                           return info.param ? "zstd" : "raw";
                         });

class TornCheckpoint : public Checkpoint,
                       public ::testing::WithParamInterface<bool> {
protected:
  Tensors t1 = random_tensors(10, 11, 40000), t2 = random_tensors(10, 12, 40000);

  void SetUp() override {
    Checkpoint::SetUp();
    opts.zstd = GetParam();
    write(1, t1);
    write(2, t2);
  }
  void expect_step1(const std::string &why) {
    notices.clear();
    auto c = load_newest();
    ASSERT_TRUE(c);
    EXPECT_EQ(c->step, 1);
    expect_same(*c, t1);
    EXPECT_CONTAINS(all_notices(), why);
  }
};

TEST_P(TornCheckpoint, LeftoverTmpDirIsSkipped) {
  // A writer killed before its rename: a tmp dir with a complete-looking
  // manifest is never loaded.
  fs::path tmp = dir / "ckpt" / ".step-00000003.tmp-999999";
  fs::copy(step_dir(2), tmp);
  notices.clear();
  auto c = load_newest();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->step, 2);
  EXPECT_CONTAINS(all_notices(), "skipping '" + tmp.string() +
                                     "': an unfinished checkpoint write");
}

TEST_P(TornCheckpoint, MissingManifest) {
  fs::remove(fs::path(step_dir(2)) / "MANIFEST.json");
  expect_step1("skipping checkpoint '" + step_dir(2) +
               "': MANIFEST.json is missing; trying the next older one");
}

TEST_P(TornCheckpoint, TruncatedManifest) {
  fs::path m = fs::path(step_dir(2)) / "MANIFEST.json";
  std::string text = slurp(m);
  spill(m, text.substr(0, text.size() / 2));
  expect_step1("skipping checkpoint '" + step_dir(2) +
               "': MANIFEST.json: it has no manifest_xxh3 line (truncated?)");
  spill(m, text.substr(0, text.size() - 10));
  expect_step1("MANIFEST.json: its manifest_xxh3 is not 16 hex digits");
  spill(m, "");
  expect_step1("MANIFEST.json: it has no manifest_xxh3 line");
}

TEST_P(TornCheckpoint, EditedManifest) {
  fs::path m = fs::path(step_dir(2)) / "MANIFEST.json";
  std::string text = slurp(m);
  text.replace(text.find("\"step\": 2"), 9, "\"step\": 3");
  spill(m, text);
  expect_step1("MANIFEST.json: its checksum does not match");
}

TEST_P(TornCheckpoint, FlippedDataByte) {
  fs::path d = fs::path(step_dir(2)) / "data";
  std::string bytes = slurp(d);
  bytes[bytes.size() / 3] ^= 0x10;
  spill(d, bytes);
  expect_step1("skipping checkpoint '" + step_dir(2) + "': chunk ");
  EXPECT_CONTAINS(all_notices(), d.string());
}

TEST_P(TornCheckpoint, TruncatedData) {
  fs::path d = fs::path(step_dir(2)) / "data";
  fs::resize_file(d, fs::file_size(d) - 4096);
  expect_step1("(truncated)");
}

TEST_P(TornCheckpoint, NoValidCheckpointAtAll) {
  fs::remove(fs::path(step_dir(2)) / "MANIFEST.json");
  fs::remove(fs::path(step_dir(1)) / "data");
  notices.clear();
  EXPECT_FALSE(load_newest());
  EXPECT_CONTAINS(all_notices(), step_dir(2));
  EXPECT_CONTAINS(all_notices(), step_dir(1));
}

INSTANTIATE_TEST_SUITE_P(Compression, TornCheckpoint,
                         ::testing::Values(false, true),
                         [](const auto &info) {
                           return info.param ? "zstd" : "raw";
                         });

// MANIFEST.json for `body` (everything between the braces, each line ending
// ",\n"), with a valid manifest_xxh3: the checksum guards against storage
// errors, not against whoever writes the file.
std::string signed_manifest(const std::string &body) {
  std::string t = "{\n" + body;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                (unsigned long long)XXH3_64bits(t.data(), t.size()));
  return t + "  \"manifest_xxh3\": \"" + hex + "\"\n}\n";
}

struct Crafted {
  const char *what;
  std::string header;  // data_bytes .. raw_bytes
  std::string tensors; // the "tensors" array
  std::string chunks;  // the "chunks" array
  const char *reason;  // in the notice
};

// Manifests with a valid checksum whose numbers would make a trusting loader
// read or write out of bounds (the first two did, under ASan): each must be
// skipped as invalid, never crash.
TEST_F(Checkpoint, CraftedManifestsAreInvalidNotFatal) {
  const char *chunk0 = R"({"offset": 0, "stored": 64, "raw": 64, )"
                       R"("xxh3": "0000000000000000"})";
  const std::vector<Crafted> cases = {
      {"alignment past data_bytes (offset check wrapped: 8 GiB read)",
       R"("data_bytes": 8192, "alignment": 8589934592, "compression": "none", "chunk_bytes": 8589934592, "raw_bytes": 64)",
       "[]",
       R"([{"offset": 8589934592, "stored": 64, "raw": 64, "xxh3": "0000000000000000"}])",
       "\"alignment\" 8589934592"},
      {"raw sizes summing past 2^64 (wrapped raw_bytes: zstd wrote past it)",
       R"("data_bytes": 12288, "alignment": 4096, "compression": "zstd", "chunk_bytes": 9223372036854775807, "raw_bytes": 64)",
       "[]",
       R"([{"offset": 0, "stored": @Z, "raw": 9223372036854775807, "xxh3": "0000000000000000"},
 {"offset": 4096, "stored": @Z, "raw": 9223372036854775807, "xxh3": "0000000000000000"},
 {"offset": 8192, "stored": @Z, "raw": 66, "xxh3": "0000000000000000"}])",
       "\"chunk_bytes\" 9223372036854775807"},
      {"raw sizes past raw_bytes",
       R"("data_bytes": 8192, "alignment": 4096, "compression": "zstd", "chunk_bytes": 65536, "raw_bytes": 64)",
       "[]",
       R"([{"offset": 0, "stored": 64, "raw": 65536, "xxh3": "0000000000000000"},
 {"offset": 4096, "stored": 64, "raw": 64, "xxh3": "0000000000000000"}])",
       "chunk 0: the chunks hold more than \"raw_bytes\" 64"},
      {"alignment not a power of two",
       R"("data_bytes": 8190, "alignment": 4095, "compression": "none", "chunk_bytes": 65536, "raw_bytes": 64)",
       "[]", std::string("[") + chunk0 + "]", "is not a power of two"},
      {"alignment too small",
       R"("data_bytes": 8192, "alignment": 1, "compression": "none", "chunk_bytes": 65536, "raw_bytes": 64)",
       "[]", std::string("[") + chunk0 + "]", "\"alignment\" 1 is not"},
      {"data_bytes not a multiple of the alignment",
       R"("data_bytes": 8000, "alignment": 4096, "compression": "none", "chunk_bytes": 65536, "raw_bytes": 64)",
       "[]", std::string("[") + chunk0 + "]", "\"data_bytes\" 8000"},
      {"chunk_bytes 0",
       R"("data_bytes": 8192, "alignment": 4096, "compression": "none", "chunk_bytes": 0, "raw_bytes": 64)",
       "[]", std::string("[") + chunk0 + "]", "\"chunk_bytes\" 0"},
      {"chunk past the end of the data",
       R"("data_bytes": 8192, "alignment": 4096, "compression": "none", "chunk_bytes": 65536, "raw_bytes": 8192)",
       "[]",
       R"([{"offset": 4096, "stored": 8192, "raw": 8192, "xxh3": "0000000000000000"}])",
       "chunk 0: stored range [4096, +8192) is misplaced"},
      {"chunk offset near 2^63",
       R"("data_bytes": 8192, "alignment": 4096, "compression": "none", "chunk_bytes": 65536, "raw_bytes": 64)",
       "[]",
       R"([{"offset": 9223372036854771712, "stored": 64, "raw": 64, "xxh3": "0000000000000000"}])",
       "is misplaced"},
      {"zstd chunk bigger than zstd makes",
       R"("data_bytes": 1048576, "alignment": 4096, "compression": "zstd", "chunk_bytes": 4096, "raw_bytes": 64)",
       "[]",
       R"([{"offset": 0, "stored": 1048576, "raw": 64, "xxh3": "0000000000000000"}])",
       "more than zstd makes"},
      {"tensor past raw_bytes",
       R"("data_bytes": 4096, "alignment": 4096, "compression": "none", "chunk_bytes": 65536, "raw_bytes": 64)",
       R"([{"name": "w", "dtype": "f32", "shape": [32], "offset": 0, "bytes": 128}])",
       std::string("[") + chunk0 + "]", "tensor 'w': bytes [0, +128) run past"},
      {"tensor bytes not dtype x shape",
       R"("data_bytes": 4096, "alignment": 4096, "compression": "none", "chunk_bytes": 65536, "raw_bytes": 64)",
       R"([{"name": "w", "dtype": "f32", "shape": [4611686018427387904], "offset": 0, "bytes": 0}])",
       std::string("[") + chunk0 + "]", "tensor 'w': 0 bytes do not match"},
      {"tensor offset misaligned",
       R"("data_bytes": 4096, "alignment": 4096, "compression": "none", "chunk_bytes": 65536, "raw_bytes": 64)",
       R"([{"name": "w", "dtype": "f32", "shape": [2], "offset": 3, "bytes": 8}])",
       std::string("[") + chunk0 + "]", "tensor 'w': offset 3 is not"},
  };
  // The data: a zstd frame of 64 KiB at 0, 4096 and 8192 ("@Z" is its
  // size), so that the loader gets as far as decompressing.
  std::string frame(ZSTD_compressBound(64 << 10), '\0');
  frame.resize(ZSTD_compress(frame.data(), frame.size(),
                             std::string(64 << 10, 'A').data(), 64 << 10, 1));
  ASSERT_LT(frame.size(), 4096u);
  std::string data(1 << 20, '\0');
  for (size_t at : {0, 4096, 8192})
    data.replace(at, frame.size(), frame);
  Tensors t1 = random_tensors(4, 61, 1000);
  for (bool zstd : {false, true}) {
    opts.zstd = zstd;
    fs::remove_all(root());
    write(1, t1);
    for (const Crafted &c : cases) {
      SCOPED_TRACE(c.what);
      fs::remove_all(step_dir(2));
      fs::create_directories(step_dir(2));
      spill(fs::path(step_dir(2)) / "data", data);
      spill(fs::path(step_dir(2)) / "MANIFEST.json",
            signed_manifest(
                "  \"format\": \"spillway-checkpoint\",\n  \"version\": 1,\n"
                "  \"step\": 2,\n  \"data_file\": \"data\",\n  " +
                std::regex_replace(c.header, std::regex(", "), ",\n  ") +
                ",\n  \"metadata\": {},\n  \"tensors\": " + c.tensors +
                ",\n  \"chunks\": " +
                std::regex_replace(c.chunks, std::regex("@Z"),
                                   std::to_string(frame.size())) +
                ",\n"));
      notices.clear();
      auto c2 = load_newest();
      ASSERT_TRUE(c2) << all_notices();
      EXPECT_EQ(c2->step, 1);
      expect_same(*c2, t1);
      EXPECT_CONTAINS(all_notices(), "skipping checkpoint '" + step_dir(2) +
                                         "': MANIFEST.json: ");
      EXPECT_CONTAINS(all_notices(), c.reason);
    }
  }
}

TEST_F(Checkpoint, EnospcFailsClearlyAndKeepsThePreviousOne) {
  Tensors t1 = random_tensors(8, 21, 60000), t2 = random_tensors(8, 22, 60000);
  write(1, t1);
  ScriptedFaults faults("enospc@3/write");
  EngineConfig cfg;
  cfg.faults = &faults;
  IoEngine engine(cfg);
  try {
    write(2, t2, &engine);
    FAIL() << "the write should have failed";
  } catch (const spw::Error &e) {
    std::string msg = e.what();
    EXPECT_CONTAINS(msg, "cannot write the checkpoint of step 2 to '" +
                             step_dir(2) + "'");
    EXPECT_CONTAINS(msg, "No space left on device");
    EXPECT_CONTAINS(msg, "check free space");
  }
  EXPECT_GE(faults.injected(), 1);
  EXPECT_FALSE(fs::exists(step_dir(2)));
  for (auto &e : fs::directory_iterator(root()))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos)
        << e.path();
  auto c = load_newest();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->step, 1);
  expect_same(*c, t1);
  // The engine keeps working: the next checkpoint succeeds.
  write(3, t2);
  c = load_newest();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->step, 3);
}

// Not only spw::Error: a std::bad_alloc (SPILLWAY_TEST_CRASH_HOW=bad_alloc
// throws one at the phase instead of the SIGKILL) at any phase before the
// rename still removes the tmp dir and becomes one spw::Error with context.
TEST_F(Checkpoint, AnyExceptionCleansUp) {
  Tensors t1 = random_tensors(6, 23, 60000), t2 = random_tensors(6, 24, 60000);
  write(1, t1);
  for (const char *phase :
       {"data-partial", "data-written", "data-synced", "manifest-written"}) {
    SCOPED_TRACE(phase);
    ::setenv("SPILLWAY_TEST_CRASH_AT", phase, 1);
    ::setenv("SPILLWAY_TEST_CRASH_HOW", "bad_alloc", 1);
    try {
      write(2, t2);
      ADD_FAILURE() << "the write should have failed";
    } catch (const spw::Error &e) {
      EXPECT_CONTAINS(std::string(e.what()),
                      "cannot write the checkpoint of step 2 to '" +
                          step_dir(2) + "': out of memory (the checkpoints");
    } catch (...) {
      ADD_FAILURE() << "not a spw::Error";
    }
    ::unsetenv("SPILLWAY_TEST_CRASH_AT");
    ::unsetenv("SPILLWAY_TEST_CRASH_HOW");
    for (auto &e : fs::directory_iterator(root()))
      EXPECT_EQ(e.path().filename().string(), "step-00000001");
  }
  auto c = load_newest();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->step, 1);
  expect_same(*c, t1);
}

// A read error is not a torn checkpoint: with every read failing, loading
// stops with a CheckpointReadError naming the newest dir, skips nothing and
// changes nothing; a checksum mismatch (the data read fine) still skips.
TEST_F(Checkpoint, ReadErrorsStopTheLoad) {
  Tensors t1 = random_tensors(6, 41, 60000), t2 = random_tensors(6, 42, 60000);
  write(1, t1);
  write(2, t2);
  {
    ScriptedFaults faults("eio@1+/read");
    EngineConfig cfg;
    cfg.faults = &faults;
    IoEngine engine(cfg);
    try {
      load_newest_checkpoint(engine, root(), opts);
      FAIL() << "the load should have failed";
    } catch (const CheckpointReadError &e) {
      std::string msg = e.what();
      EXPECT_CONTAINS(msg, "cannot read checkpoint '" + step_dir(2) +
                               "': read of ");
      EXPECT_CONTAINS(msg, " of '" + step_dir(2) + "/data' ");
      EXPECT_CONTAINS(msg, "Input/output error");
      EXPECT_CONTAINS(msg, "it is not skipped and nothing in '" + root() +
                               "' is changed");
    }
    EXPECT_GE(faults.injected(), 1);
  }
  EXPECT_EQ(all_notices().find("skipping checkpoint"), std::string::npos)
      << all_notices();
  ASSERT_EQ(list_checkpoints(root()).size(), 2u);
  auto c = load_newest();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->step, 2);
  expect_same(*c, t2);

  std::string data = slurp(fs::path(step_dir(2)) / "data");
  data[10] ^= 1;
  spill(fs::path(step_dir(2)) / "data", data);
  c = load_newest();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->step, 1);
  EXPECT_CONTAINS(all_notices(), "skipping checkpoint '" + step_dir(2) +
                                     "': chunk 0 (bytes ");
}

// A FIFO or device where a checkpoint file should be is refused at once
// (O_NONBLOCK, fstat), naming it: not a hang, and not skipped as if torn.
TEST_F(Checkpoint, SpecialFilesStopTheLoad) {
  Tensors t1 = random_tensors(3, 43, 1000), t2 = random_tensors(3, 44, 1000);
  write(1, t1);
  write(2, t2);
  const fs::path data = fs::path(step_dir(2)) / "data";
  const fs::path manifest = fs::path(step_dir(2)) / "MANIFEST.json";
  const std::string good = slurp(data);
  auto expect_refused = [&](const fs::path &p, const std::string &kind) {
    SCOPED_TRACE(p.string());
    try {
      load_newest();
      ADD_FAILURE() << "the load should have failed";
    } catch (const CheckpointReadError &e) {
      EXPECT_CONTAINS(std::string(e.what()),
                      "cannot read checkpoint '" + step_dir(2) + "': '" +
                          p.string() + "' is " + kind +
                          ", not a regular file");
    }
  };
  fs::remove(data);
  ASSERT_EQ(::mkfifo(data.c_str(), 0644), 0);
  expect_refused(data, "a FIFO");
  fs::remove(data);
  fs::create_symlink("/dev/zero", data);
  expect_refused(data, "a character device");
  fs::remove(data);
  spill(data, good);
  const std::string text = slurp(manifest);
  fs::remove(manifest);
  ASSERT_EQ(::mkfifo(manifest.c_str(), 0644), 0);
  expect_refused(manifest, "a FIFO");
  fs::remove(manifest);
  fs::create_directory(manifest);
  expect_refused(manifest, "a directory");
  fs::remove(manifest);
  spill(manifest, text);
  auto c = load_newest();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->step, 2);
}

// Pruning removes only what it read and found invalid (or valid and old): a
// dir whose manifest cannot be read is kept, with a notice.
TEST_F(Checkpoint, UnreadableOnesAreNeverPruned) {
  Tensors t = random_tensors(3, 45, 1000);
  opts.keep = 1;
  write(1, t);
  const fs::path manifest = fs::path(step_dir(1)) / "MANIFEST.json";
  fs::remove(manifest);
  fs::create_directory(manifest);
  CheckpointWriteResult r = write(2, t);
  EXPECT_TRUE(r.pruned.empty());
  EXPECT_TRUE(fs::exists(step_dir(1)));
  EXPECT_CONTAINS(all_notices(), "keeping '" + step_dir(1) + "': '" +
                                     manifest.string() +
                                     "' is a directory, not a regular file");
  EXPECT_CONTAINS(all_notices(), "so whether it is intact is unknown; not "
                                 "pruned");
  // Once it reads (and is found invalid), it goes.
  fs::remove(manifest);
  r = write(3, t);
  ASSERT_EQ(r.pruned.size(), 2u);
  EXPECT_EQ(list_checkpoints(root()).size(), 1u);
}

// An out-of-memory after the rename (SPILLWAY_TEST_CRASH_HOW=bad_alloc)
// must not say that nothing changed: the new checkpoint is in place, and the
// message says so, and what of the fsync and the pruning was done.
TEST_F(Checkpoint, OutOfMemoryAfterPublishingSaysWhatWasPublished) {
  Tensors t1 = random_tensors(4, 46, 60000), t2 = random_tensors(4, 47, 60000);
  write(1, t1);
  struct Env {
    Env(const char *phase) {
      ::setenv("SPILLWAY_TEST_CRASH_AT", phase, 1);
      ::setenv("SPILLWAY_TEST_CRASH_HOW", "bad_alloc", 1);
    }
    ~Env() {
      ::unsetenv("SPILLWAY_TEST_CRASH_AT");
      ::unsetenv("SPILLWAY_TEST_CRASH_HOW");
    }
  };
  auto message = [&](int64_t step, const char *phase, const Tensors &t) {
    Env env(phase);
    try {
      write(step, t);
    } catch (const CheckpointPublishedError &e) {
      // Its own type: the caller need not rescue the weights it holds.
      return std::string(e.what());
    } catch (const spw::Error &e) {
      return "not a CheckpointPublishedError: " + std::string(e.what());
    }
    return std::string("no error");
  };
  std::string msg = message(2, "renamed", t2);
  EXPECT_CONTAINS(msg, "the checkpoint of step 2 is published as '" +
                           step_dir(2) + "' but '" + root() +
                           "' was not fsynced, so it may not survive a power "
                           "loss, and no older checkpoint was pruned; then: "
                           "out of memory (--resume continues from '" +
                           step_dir(2) + "')");
  EXPECT_EQ(msg.find("untouched"), std::string::npos) << msg;
  EXPECT_EQ(list_checkpoints(root()).size(), 2u);
  auto c = load_newest();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->step, 2);
  expect_same(*c, t2);
  // The same step again: swapped in, still published.
  msg = message(2, "renamed", t1);
  EXPECT_CONTAINS(msg, "the checkpoint of step 2 is published as '" +
                           step_dir(2) + "' but ");
  c = load_newest();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->step, 2);
  expect_same(*c, t1);

  opts.keep = 1;
  msg = message(3, "pruned", t2);
  EXPECT_CONTAINS(msg, "the checkpoint of step 3 is published as '" +
                           step_dir(3) +
                           "' and fsynced, and 2 older ones were pruned; "
                           "then: out of memory");
  c = load_newest();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->step, 3);
  expect_same(*c, t2);
}

// One run per directory: a second holder of ROOT/LOCK is refused, naming the
// first's pid and host; a lock left by a killed process is no holder.
TEST_F(Checkpoint, SecondLockHolderIsRefusedNamingTheFirst) {
  spwtest::LockHolder holder(root());
  const pid_t child = holder.pid();
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  try {
    CheckpointDirLock second(root());
    ADD_FAILURE() << "the second lock should have been refused";
  } catch (const spw::Error &e) {
    EXPECT_CONTAINS(std::string(e.what()),
                    "--checkpoint-dir '" + root() +
                        "' is in use by another run (pid " +
                        std::to_string(child) + " on host " + host + " since ");
    EXPECT_CONTAINS(std::string(e.what()), "says '" + root() + "/LOCK'");
  }
  holder.release();
  {
    CheckpointDirLock again(root());
    EXPECT_TRUE(again.held());
    EXPECT_CONTAINS(slurp(fs::path(root()) / "LOCK"),
                    "pid " + std::to_string(::getpid()) + " on host ");
  }
  // Released with the object: the next one gets it.
  CheckpointDirLock next(root());
  EXPECT_TRUE(next.held());
  // LOCK is neither a checkpoint nor a leftover.
  EXPECT_TRUE(list_checkpoints(root()).empty());
}

TEST_F(Checkpoint, KeepPrunesOlderOnes) {
  Tensors t = random_tensors(3, 31, 1000);
  opts.keep = 2;
  for (int64_t s = 1; s <= 5; ++s) {
    CheckpointWriteResult w = write(s, t);
    if (s >= 3) {
      ASSERT_EQ(w.pruned.size(), 1u);
      EXPECT_EQ(w.pruned[0], step_dir(s - 2));
    }
  }
  auto list = list_checkpoints(root());
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].first, 5);
  EXPECT_EQ(list[1].first, 4);

  // keep 1: only the new one stays. Leftover tmp dirs of dead writers go;
  // one of a live process (our parent) stays.
  fs::create_directories(dir / "ckpt" / ".step-00000009.tmp-999999999");
  const std::string live =
      ".step-00000009.tmp-" + std::to_string(long(::getppid()));
  fs::create_directories(dir / "ckpt" / live);
  opts.keep = 1;
  write(6, t);
  list = list_checkpoints(root());
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].first, 6);
  EXPECT_FALSE(fs::exists(dir / "ckpt" / ".step-00000009.tmp-999999999"));
  EXPECT_TRUE(fs::exists(dir / "ckpt" / live));

  // A torn newer one (a dir without a valid manifest: all that the resume
  // can have skipped) is removed; a valid newer one (another run's) is left
  // with a notice.
  fs::create_directories(step_dir(8));
  notices.clear();
  CheckpointWriteResult w = write(7, t);
  EXPECT_FALSE(fs::exists(step_dir(8)));
  EXPECT_EQ(w.pruned, (std::vector<std::string>{step_dir(8), step_dir(6)}));
  EXPECT_EQ(all_notices(), "");
  write(9, t);
  opts.keep = 2;
  w = write(8, t);
  EXPECT_TRUE(w.pruned.empty());
  EXPECT_CONTAINS(all_notices(), "keeping '" + step_dir(9) +
                                     "': a valid checkpoint of a later step "
                                     "than the one just written (8)");
  list = list_checkpoints(root());
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].first, 9);
  EXPECT_EQ(list[1].first, 8);
}

// Only checkpoints whose manifest validates count toward keep: a torn older
// one is removed, not kept in place of a valid one.
TEST_F(Checkpoint, TornOnesDoNotCountTowardKeep) {
  Tensors t = random_tensors(3, 32, 1000);
  opts.keep = 2;
  write(1, t);
  write(2, t);
  fs::path m = fs::path(step_dir(2)) / "MANIFEST.json";
  std::string text = slurp(m);
  spill(m, text.substr(0, text.size() / 2)); // torn
  CheckpointWriteResult w = write(3, t);
  EXPECT_EQ(w.pruned, std::vector<std::string>{step_dir(2)});
  auto list = list_checkpoints(root());
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].first, 3);
  EXPECT_EQ(list[1].first, 1);
  // keep 1 with the new one's own manifest bad still keeps the new one.
  fs::remove(fs::path(step_dir(3)) / "MANIFEST.json");
  opts.keep = 1;
  fs::remove_all(step_dir(1));
  w = write(4, t);
  EXPECT_EQ(w.pruned, std::vector<std::string>{step_dir(3)});
  notices.clear();
  auto c = load_newest();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->step, 4);
  EXPECT_EQ(all_notices(), "");
}

// Pruning's "valid" agrees with the loader's: a dir the resume skipped (a
// torn data file, a chunk failing its checksum: the manifest is fine) never
// counts toward keep, so the one resumed from is kept, not pruned; a dir not
// read in this run counts only with a data file as long as its manifest
// says; a step the resume skipped and that is written again is valid.
TEST_F(Checkpoint, PruningAgreesWithTheLoader) {
  Tensors t = random_tensors(3, 33, 30000);
  opts.keep = 2;
  auto resume_skipping = [&](int64_t bad, int64_t from) {
    notices.clear();
    auto c = load_newest();
    ASSERT_TRUE(c);
    EXPECT_EQ(c->step, from);
    EXPECT_CONTAINS(all_notices(),
                    "skipping checkpoint '" + step_dir(bad) + "'");
  };
  auto expect_kept = [&](std::vector<int64_t> want) {
    std::vector<int64_t> got;
    for (auto &[s, p] : list_checkpoints(root()))
      got.push_back(s);
    EXPECT_EQ(got, want);
  };
  const fs::path data4 = fs::path(step_dir(4)) / "data";
  write(2, t);
  write(4, t);
  fs::resize_file(data4, 100); // torn data, intact manifest
  resume_skipping(4, 2);
  CheckpointWriteResult w = write(6, t);
  EXPECT_EQ(w.pruned, std::vector<std::string>{step_dir(4)});
  expect_kept({6, 2});

  // A flipped byte: only reading the chunk shows it.
  std::string bytes = slurp(fs::path(step_dir(6)) / "data");
  bytes[5] ^= 1;
  spill(fs::path(step_dir(6)) / "data", bytes);
  resume_skipping(6, 2);
  w = write(8, t);
  EXPECT_EQ(w.pruned, std::vector<std::string>{step_dir(6)});
  expect_kept({8, 2});

  // Not read in this run: a short or missing data file is invalid.
  fs::resize_file(fs::path(step_dir(8)) / "data", 100);
  w = write(10, t);
  EXPECT_EQ(w.pruned, std::vector<std::string>{step_dir(8)});
  expect_kept({10, 2});
  fs::remove(fs::path(step_dir(10)) / "data");
  w = write(12, t);
  EXPECT_EQ(w.pruned, std::vector<std::string>{step_dir(10)});
  expect_kept({12, 2});

  // Skipped, then written again: the new one counts, the old verdict not.
  bytes = slurp(fs::path(step_dir(12)) / "data");
  bytes[5] ^= 1;
  spill(fs::path(step_dir(12)) / "data", bytes);
  resume_skipping(12, 2);
  write(12, t);
  w = write(14, t);
  EXPECT_EQ(w.pruned, std::vector<std::string>{step_dir(2)});
  expect_kept({14, 12});
}

// Anything but a directory (or a symlink to one) named step-NNNNNNNN stops
// the listing, the load and the writer with a message naming it; it is not
// blamed on the storage, not skipped, and not swapped away by a rewrite.
TEST_F(Checkpoint, NonDirectoriesNamedLikeCheckpointsAreNamed) {
  Tensors t = random_tensors(3, 34, 1000);
  write(1, t);
  const fs::path p = step_dir(2);
  auto expect_named = [&](const std::string &kind) {
    SCOPED_TRACE(kind);
    const std::string msg = "'" + p.string() + "' is " + kind +
                            ", not a checkpoint directory; move it out of '" +
                            root() + "'";
    try {
      load_newest();
      ADD_FAILURE() << "the load should have failed";
    } catch (const CheckpointReadError &e) {
      EXPECT_EQ(std::string(e.what()), msg);
    }
    try {
      list_checkpoints(root());
      ADD_FAILURE() << "the listing should have failed";
    } catch (const CheckpointReadError &e) {
      EXPECT_EQ(std::string(e.what()), msg);
    }
    try {
      write(2, t);
      ADD_FAILURE() << "the write should have failed";
    } catch (const spw::Error &e) {
      EXPECT_CONTAINS(std::string(e.what()), msg);
    }
  };
  spill(p, "mine");
  expect_named("a regular file");
  EXPECT_EQ(slurp(p), "mine");
  fs::remove(p);
  ASSERT_EQ(::mkfifo(p.c_str(), 0644), 0);
  expect_named("a FIFO");
  fs::remove(p);
  fs::create_symlink(dir / "nowhere", p);
  expect_named("a dangling symbolic link");
  fs::remove(p);
  fs::create_symlink("/dev/null", p);
  expect_named("a symbolic link to a character device");
  fs::remove(p);
  auto c = load_newest();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->step, 1);
}

// Peak resident memory (VmHWM) in bytes, or -1.
long long peak_rss() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0)
      return std::atoll(line.c_str() + 6) * 1024;
  return -1;
}

// The loader streams the data file through a few chunk-sized staging
// buffers: its peak memory is the raw stream plus those, not twice the
// checkpoint (the whole file image and the raw stream at once).
TEST_F(Checkpoint, LoadingStreamsChunks) {
  const size_t mib = 1 << 20;
  Tensors t;
  t.names = {"big"};
  t.dtypes = {SPW_BOOL};
  t.shapes = {{int64_t(96 * mib)}};
  std::mt19937_64 rng(71);
  t.bytes.emplace_back(96 * mib, '\0');
  for (size_t i = 0; i < t.bytes[0].size(); i += 8) {
    uint64_t r = rng();
    std::memcpy(&t.bytes[0][i], &r, 8);
  }
  opts.chunk_bytes = mib;
  write(1, t);
  {
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5"; // resets VmHWM to the current resident size
  }
  const long long before = peak_rss();
  if (before < 0)
    GTEST_SKIP() << "no VmHWM in /proc/self/status";
  auto c = load_newest();
  const long long grew = peak_rss() - before;
  ASSERT_TRUE(c);
  expect_same(*c, t);
  EXPECT_LT(grew, (long long)(96 + 32) * (long long)mib)
      << "the load peaked at " << grew / mib << " MiB more";
}

// Loading opens the files read-only: a checkpoint without write permission
// (chmod 0444) loads. As root (which ignores modes) the load runs in a
// child that has dropped to uid/gid 65534.
TEST_F(Checkpoint, ReadOnlyFilesLoad) {
  Tensors t = random_tensors(5, 81, 20000);
  for (bool zstd : {false, true}) {
    opts.zstd = zstd;
    fs::remove_all(root());
    write(1, t);
    for (const fs::path p : {dir, fs::path(root()), fs::path(step_dir(1))})
      fs::permissions(p, fs::perms(0555));
    for (const char *f : {"data", "MANIFEST.json"})
      fs::permissions(fs::path(step_dir(1)) / f, fs::perms(0444));
    std::fflush(nullptr);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      if (::geteuid() == 0 &&
          (::setresgid(65534, 65534, 65534) != 0 ||
           ::setresuid(65534, 65534, 65534) != 0))
        std::_Exit(5);
      if (::access(step_dir(1).c_str(), W_OK) == 0)
        std::_Exit(6); // still allowed to write: the test proves nothing
      try {
        IoEngine engine(EngineConfig{});
        LoadedCheckpoint c = load_checkpoint(engine, step_dir(1));
        if (c.tensors.size() != t.names.size())
          std::_Exit(7);
        for (size_t i = 0; i < t.names.size(); ++i)
          if (std::string(static_cast<const char *>(c.data(c.tensors[i])),
                          c.tensors[i].bytes) != t.bytes[i])
            std::_Exit(8);
      } catch (const std::exception &e) {
        std::fprintf(stderr, "load failed: %s\n", e.what());
        std::_Exit(9);
      }
      std::_Exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << (zstd ? "zstd" : "raw");
    for (const fs::path p : {dir, fs::path(root()), fs::path(step_dir(1))})
      fs::permissions(p, fs::perms(0755));
  }
}

// SPILLWAY_TEST_RENAME for the scope (test-only: "fallback" acts as if
// renameat2(RENAME_EXCHANGE) were unsupported).
struct RenameMode {
  explicit RenameMode(const char *mode) {
    if (*mode)
      ::setenv("SPILLWAY_TEST_RENAME", mode, 1);
  }
  ~RenameMode() { ::unsetenv("SPILLWAY_TEST_RENAME"); }
};

TEST_F(Checkpoint, RewritingAStepReplacesIt) {
  Tensors a = random_tensors(3, 41, 1000), b = random_tensors(3, 42, 1000);
  for (const char *mode : {"", "fallback"}) {
    SCOPED_TRACE(*mode ? mode : "exchange");
    fs::remove_all(root());
    opts.keep = 1;
    write(4, a);
    {
      RenameMode m(mode);
      write(4, b);
    }
    auto c = load_newest();
    ASSERT_TRUE(c);
    EXPECT_EQ(c->step, 4);
    expect_same(*c, b);
    for (auto &e : fs::directory_iterator(root())) // no old one left aside
      EXPECT_EQ(e.path().filename().string(), "step-00000004");
  }
}

// Without RENAME_EXCHANGE, a failed rename into place puts the old step-N
// back where it was.
TEST_F(Checkpoint, RewriteFallbackRestoresTheOldOneOnFailure) {
  Tensors a = random_tensors(3, 43, 1000), b = random_tensors(3, 44, 1000);
  write(4, a);
  try {
    RenameMode m("fallback-fail");
    write(4, b);
    FAIL() << "the write should have failed";
  } catch (const spw::Error &e) {
    EXPECT_CONTAINS(std::string(e.what()), "cannot rename '");
    EXPECT_CONTAINS(std::string(e.what()), "Input/output error");
  }
  auto c = load_newest();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->step, 4);
  expect_same(*c, a);
  for (auto &e : fs::directory_iterator(root()))
    EXPECT_EQ(e.path().filename().string(), "step-00000004");
}

// A SIGKILL at each phase of rewriting step 2 with keep 1 (in a forked
// child): step 2 is always loadable, the old one before the swap and the new
// one from then on.
TEST_F(Checkpoint, KillAtEveryPhaseOfARewrite) {
  Tensors t1 = random_tensors(6, 53, 60000), t2 = random_tensors(6, 54, 60000);
  opts.keep = 1;
  for (const char *mode : {"", "fallback"}) {
    for (size_t i = 0; i < kNumCrashPhases; ++i) {
      const std::string phase = kCrashPhases[i];
      SCOPED_TRACE(phase + (*mode ? " (fallback)" : " (exchange)"));
      fs::remove_all(root());
      write(2, t1);
      std::fflush(nullptr);
      pid_t pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        RenameMode m(mode);
        ::setenv("SPILLWAY_TEST_CRASH_AT", phase.c_str(), 1);
        try {
          write(2, t2);
        } catch (...) {
          std::_Exit(3);
        }
        std::_Exit(4);
      }
      int status = 0;
      ASSERT_EQ(::waitpid(pid, &status, 0), pid);
      ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status);
      auto c = load_newest();
      ASSERT_TRUE(c);
      EXPECT_EQ(c->step, 2);
      const bool published = phase == "renamed" || phase == "pruned";
      expect_same(*c, published ? t2 : t1);
      write(3, t1); // cleans up after the dead writer
      for (auto &e : fs::directory_iterator(root()))
        EXPECT_EQ(e.path().filename().string(), "step-00000003");
    }
  }
}

// A SIGKILL at each phase of the write of step 2 (in a forked child): the
// newest valid checkpoint afterwards is step 1 before the rename and step 2
// from then on, never a broken one.
TEST_F(Checkpoint, KillAtEveryPhase) {
  Tensors t1 = random_tensors(6, 51, 60000), t2 = random_tensors(6, 52, 60000);
  for (size_t i = 0; i < kNumCrashPhases; ++i) {
    const std::string phase = kCrashPhases[i];
    SCOPED_TRACE(phase);
    fs::remove_all(root());
    write(1, t1);
    std::fflush(nullptr);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::setenv("SPILLWAY_TEST_CRASH_AT", phase.c_str(), 1);
      ::setenv("SPILLWAY_TEST_CRASH_STEP", "2", 1);
      try {
        write(2, t2);
      } catch (...) {
        std::_Exit(3);
      }
      std::_Exit(4); // not killed: the hook did not fire
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status);
    EXPECT_EQ(WTERMSIG(status), SIGKILL);
    notices.clear();
    auto c = load_newest();
    ASSERT_TRUE(c);
    const bool published = phase == "renamed" || phase == "pruned";
    EXPECT_EQ(c->step, published ? 2 : 1);
    expect_same(*c, published ? t2 : t1);
    if (!published)
      EXPECT_CONTAINS(all_notices(), "an unfinished checkpoint write");
    // The next write cleans up after the dead writer.
    write(3, t1);
    for (auto &e : fs::directory_iterator(root()))
      EXPECT_EQ(e.path().filename().string()[0], 's') << e.path();
  }
}

} // namespace

// ---- streamed: CheckpointWriter and CheckpointReader ------------------------

namespace {

std::vector<CheckpointTensorSpec> specs_of(const Tensors &t) {
  std::vector<CheckpointTensorSpec> out;
  for (size_t i = 0; i < t.names.size(); ++i)
    out.push_back({t.names[i], t.dtypes[i], t.shapes[i], t.bytes[i].size()});
  return out;
}

// The tensors' bytes concatenated (no gaps): what a caller streams.
std::string concatenated(const Tensors &t) {
  std::string s;
  for (const std::string &b : t.bytes)
    s += b;
  return s;
}

} // namespace

class StreamedCheckpoint : public Checkpoint,
                           public ::testing::WithParamInterface<bool> {};
INSTANTIATE_TEST_SUITE_P(Compression, StreamedCheckpoint, ::testing::Bool(),
                         [](const auto &info) {
                           return info.param ? "zstd" : "raw";
                         });

// Pieces of any size (1 byte, across tensors, across chunks) make the same
// files as write_checkpoint of whole tensors, byte for byte.
TEST_P(StreamedCheckpoint, PiecesMakeTheSameCheckpoint) {
  opts.zstd = GetParam();
  Tensors t = random_tensors(30, 7, 40000);
  write(1, t);
  const std::string data1 = slurp(fs::path(step_dir(1)) / "data");
  const std::string man1 = slurp(fs::path(step_dir(1)) / "MANIFEST.json");
  const std::string all = concatenated(t);
  std::mt19937_64 rng(3);
  {
    IoEngine engine(EngineConfig{});
    CheckpointWriter w(engine, root(), 2, specs_of(t),
                       {{"who", "test"}, {"step", "1"}}, opts);
    size_t at = 0;
    while (at < all.size()) {
      const size_t n = std::min(all.size() - at,
                                size_t(rng() % 3 == 0 ? 1 : rng() % 100000));
      w.append(all.data() + at, n);
      at += n;
    }
    EXPECT_EQ(w.next_tensor(), t.names.size());
    w.finish();
  }
  EXPECT_EQ(slurp(fs::path(step_dir(2)) / "data"), data1);
  // The same manifest but for the step.
  std::string man2 = slurp(fs::path(step_dir(2)) / "MANIFEST.json");
  EXPECT_EQ(man2.substr(0, man2.find("\"step\"")),
            man1.substr(0, man1.find("\"step\"")));
  auto c = load_newest();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->step, 2);
  expect_same(*c, t);
}

// Too few or too many bytes: an error naming the tensor, and no checkpoint
// (the tmp dir removed); an abandoned writer removes its tmp dir too.
TEST_P(StreamedCheckpoint, WrongByteCountsAreErrors) {
  opts.zstd = GetParam();
  Tensors t = random_tensors(5, 9, 3000);
  const std::string all = concatenated(t);
  IoEngine engine(EngineConfig{});
  auto tmp_dirs = [&] {
    size_t n = 0;
    for (auto &e : fs::directory_iterator(root()))
      n += e.path().filename().string().find(".tmp-") != std::string::npos;
    return n;
  };
  {
    CheckpointWriter w(engine, root(), 1, specs_of(t), {}, opts);
    w.append(all.data(), all.size() - 1);
    try {
      w.finish();
      ADD_FAILURE() << "finished with a byte missing";
    } catch (const spw::Error &e) {
      EXPECT_CONTAINS(std::string(e.what()), "cannot write the checkpoint of step 1");
      EXPECT_CONTAINS(std::string(e.what()), "of its");
    }
    EXPECT_EQ(tmp_dirs(), 0u);
  }
  {
    CheckpointWriter w(engine, root(), 1, specs_of(t), {}, opts);
    std::string more = all + "x";
    try {
      w.append(more.data(), more.size());
      ADD_FAILURE() << "appended a byte too many";
    } catch (const spw::Error &e) {
      EXPECT_CONTAINS(std::string(e.what()), "1 bytes appended beyond the 5 tensors'");
    }
    EXPECT_EQ(tmp_dirs(), 0u);
  }
  {
    CheckpointWriter w(engine, root(), 1, specs_of(t), {}, opts);
    w.append(all.data(), all.size() / 2);
    EXPECT_EQ(tmp_dirs(), 1u);
  } // abandoned
  EXPECT_EQ(tmp_dirs(), 0u);
  EXPECT_TRUE(list_checkpoints(root()).empty());
}

// Reads of any offsets and lengths, in any order, give the tensors' bytes;
// each chunk is verified when read.
TEST_P(StreamedCheckpoint, ReaderReadsAnyRange) {
  opts.zstd = GetParam();
  Tensors t = random_tensors(20, 11, 60000);
  write(1, t);
  IoEngine engine(EngineConfig{});
  CheckpointReader r(engine, step_dir(1));
  EXPECT_EQ(r.step(), 1);
  ASSERT_EQ(r.tensors().size(), t.names.size());
  EXPECT_EQ(*r.meta("who"), "test");
  std::mt19937_64 rng(5);
  for (int k = 0; k < 300; ++k) {
    const size_t i = size_t(rng() % t.names.size());
    const CheckpointTensor *x = r.find(t.names[i]);
    ASSERT_NE(x, nullptr);
    if (x->bytes == 0)
      continue;
    const uint64_t off = rng() % x->bytes;
    const uint64_t n = 1 + rng() % (x->bytes - off);
    std::string got(size_t(n), '\0');
    r.read(*x, off, n, got.data());
    ASSERT_EQ(got, t.bytes[i].substr(size_t(off), size_t(n)))
        << t.names[i] << " [" << off << ", +" << n << ")";
  }
  std::string past(8, '\0');
  const CheckpointTensor &last = r.tensors().back();
  EXPECT_THROW(r.read(last, last.bytes, 1, past.data()), spw::Error);
}

// A chunk flipped in the middle: the reads before it succeed, the read that
// reaches it fails naming it (not a CheckpointReadError: the checkpoint is
// invalid), and open_newest_checkpoint below it gives the older one, which
// reject_checkpoint's verdict keeps the writer's pruning from counting.
TEST_P(StreamedCheckpoint, ChunkFlippedMidRead) {
  opts.zstd = GetParam();
  Tensors t1 = random_tensors(12, 21, 60000), t2 = random_tensors(12, 22, 60000);
  write(1, t1);
  write(2, t2);
  fs::path d = fs::path(step_dir(2)) / "data";
  std::string bytes = slurp(d);
  const size_t at = bytes.size() * 2 / 3;
  bytes[at] ^= 0x01;
  spill(d, bytes);
  IoEngine engine(EngineConfig{});
  auto r = open_newest_checkpoint(engine, root(), opts);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->step(), 2);
  std::string raw(size_t(r->raw_bytes()), '\0');
  uint64_t done = 0;
  std::string why;
  try {
    while (done < raw.size()) {
      const uint64_t n = std::min<uint64_t>(raw.size() - done, 10000);
      r->read_raw(done, n, raw.data() + done);
      done += n;
    }
  } catch (const CheckpointReadError &e) {
    FAIL() << "a bad chunk is no read error: " << e.what();
  } catch (const spw::Error &e) {
    why = e.what();
  }
  EXPECT_GT(done, 0u);
  EXPECT_LT(done, raw.size());
  EXPECT_CONTAINS(why, d.string());
  EXPECT_CONTAINS(why, opts.zstd ? "chunk" : "fails its checksum");
  reject_checkpoint(opts, r->dir(), why);
  EXPECT_CONTAINS(all_notices(), "skipping checkpoint '" + step_dir(2) +
                                     "': chunk ");
  auto older = open_newest_checkpoint(engine, root(), opts, r->step());
  ASSERT_TRUE(older);
  EXPECT_EQ(older->step(), 1);
  // The loader agrees, and the next write prunes the rejected one.
  auto c = load_newest();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->step, 1);
  expect_same(*c, t1);
  opts.keep = 2;
  CheckpointWriteResult w = write(3, t2);
  EXPECT_EQ(w.pruned, std::vector<std::string>{step_dir(2)});
}
