//===- tensor_store_test.cpp - the tiered tensor store ---------------------===//
//
// Data survives every link, counters are exact, placement is checked, and
// failures (no room, bad moves, an injected -EIO) are errors naming the
// tensor. Runs on the CPU backend (CpuDeviceMemory) over a real swap file
// in a temporary directory.
//
//===----------------------------------------------------------------------===//
#include "storage/tensor_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

using namespace spw::storage;
namespace fs = std::filesystem;

namespace {

uint64_t mix(uint64_t x) { // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void fill(void *p, uint64_t bytes, uint64_t seed) {
  auto *c = static_cast<unsigned char *>(p);
  for (uint64_t i = 0; i < bytes; ++i)
    c[i] = (unsigned char)(mix(seed * 1000003 + i / 8) >> (8 * (i % 8)));
}

// The index of the first byte that differs from the pattern, or -1.
int64_t mismatch(const void *p, uint64_t bytes, uint64_t seed) {
  auto *c = static_cast<const unsigned char *>(p);
  for (uint64_t i = 0; i < bytes; ++i)
    if (c[i] != (unsigned char)(mix(seed * 1000003 + i / 8) >> (8 * (i % 8))))
      return int64_t(i);
  return -1;
}

uint64_t round_up(uint64_t n, uint64_t g) { return (n + g - 1) / g * g; }

std::string expect_error(const std::function<void()> &f) {
  try {
    f();
  } catch (const spw::Error &e) {
    return e.what();
  }
  ADD_FAILURE() << "expected spw::Error";
  return "";
}

// A temporary directory on a disk file system (O_DIRECT needs one; tmpfs
// makes the engine fall back to buffered I/O, which is fine too).
struct TempDir {
  fs::path path;
  TempDir() {
    const char *base = std::getenv("SPILLWAY_TEST_DIR");
    std::string tmpl =
        (fs::path(base ? base : fs::temp_directory_path().string()) /
         "spw-store-XXXXXX")
            .string();
    if (!mkdtemp(tmpl.data()))
      throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

struct Rig {
  TempDir dir;
  PinnedPool pool;
  std::unique_ptr<IoEngine> engine;
  std::unique_ptr<SwapSpace> swap;
  CpuDeviceMemory gpu;
  std::unique_ptr<TensorStore> store;

  Rig(uint64_t gpu_bytes, uint64_t host_bytes, uint64_t ssd_bytes,
      FaultInjector *faults = nullptr)
      : pool(host_bytes), gpu(gpu_bytes) {
    EngineConfig cfg;
    cfg.request_bytes = 256 << 10;
    cfg.queue_depth = 8;
    cfg.pool = &pool;
    cfg.faults = faults;
    cfg.notice = [](const std::string &) {};
    engine = std::make_unique<IoEngine>(cfg);
    swap = std::make_unique<SwapSpace>(
        *engine, std::vector<std::string>{dir.path.string()}, ssd_bytes);
    store = std::make_unique<TensorStore>(gpu, pool, swap.get());
  }
  ~Rig() {
    store.reset(); // waits for its moves before the engine goes
    swap.reset();
    engine.reset();
  }
};

} // namespace

TEST(TensorStore, RoundTripManyTensorsOfRandomSizes) {
  Rig rig(32 << 20, 32 << 20, 64 << 20);
  TensorStore &s = *rig.store;
  std::mt19937_64 rng(42);
  std::vector<TensorId> ids;
  uint64_t total = 0, total_ssd = 0;
  for (int i = 0; i < 48; ++i) {
    uint64_t bytes = 1 + rng() % (400 << 10);
    if (i % 7 == 0)
      bytes = round_up(bytes, 4096); // some exactly aligned
    TensorId t = s.add("t" + std::to_string(i), bytes);
    ids.push_back(t);
    total += bytes;
    total_ssd += round_up(bytes, s.granule(Tier::Ssd));
    s.allocate(t, Tier::Host);
    fill(s.host_address(t), bytes, t);
  }
  // host -> gpu, drop host; gpu -> host, drop gpu; host -> ssd, drop host;
  // ssd -> host; host -> gpu; check the GPU copy.
  std::vector<Token> toks;
  for (TensorId t : ids)
    toks.push_back(s.upload(t));
  for (auto &k : toks)
    k.wait();
  for (TensorId t : ids)
    s.release(t, Tier::Host);
  toks.clear();
  for (TensorId t : ids)
    toks.push_back(s.download(t));
  for (auto &k : toks)
    k.wait();
  for (TensorId t : ids) {
    s.release(t, Tier::Gpu);
    toks.push_back(s.write_back(t));
  }
  for (auto &k : toks)
    k.wait();
  toks.clear();
  for (TensorId t : ids) {
    s.release(t, Tier::Host);
    EXPECT_TRUE(s.resident(t, Tier::Ssd));
    EXPECT_FALSE(s.resident(t, Tier::Host));
  }
  for (TensorId t : ids)
    toks.push_back(s.fetch(t, Priority::Demand));
  for (auto &k : toks)
    k.wait();
  toks.clear();
  for (TensorId t : ids)
    toks.push_back(s.upload(t));
  for (auto &k : toks)
    k.wait();
  for (TensorId t : ids)
    EXPECT_EQ(mismatch(s.gpu_address(t), s.bytes(t), t), -1)
        << "tensor " << s.name(t) << " of " << s.bytes(t) << " bytes";

  LinkBytes m = s.moved();
  EXPECT_EQ(m.h2d, 2 * total);
  EXPECT_EQ(m.d2h, total);
  EXPECT_EQ(m.ssd_write, total_ssd);
  EXPECT_EQ(m.ssd_read, total_ssd);
  EXPECT_EQ(s.failed_moves(), 0u);
  TierUsage host = s.usage(Tier::Host);
  EXPECT_EQ(host.capacity, 32u << 20);
  EXPECT_GE(host.peak, total);
}

TEST(TensorStore, ConcurrentMovesFromSeveralThreads) {
  Rig rig(32 << 20, 48 << 20, 64 << 20);
  TensorStore &s = *rig.store;
  const int kThreads = 4, kPerThread = 8, kRounds = 5;
  std::vector<std::vector<TensorId>> mine(kThreads);
  uint64_t total = 0, total_ssd = 0;
  std::mt19937_64 rng(7);
  for (int th = 0; th < kThreads; ++th)
    for (int i = 0; i < kPerThread; ++i) {
      uint64_t bytes = 4096 + rng() % (300 << 10);
      TensorId t = s.add(
          "w" + std::to_string(th) + "." + std::to_string(i), bytes);
      mine[th].push_back(t);
      total += bytes;
      total_ssd += round_up(bytes, s.granule(Tier::Ssd));
    }
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th)
    threads.emplace_back([&, th] {
      try {
        for (TensorId t : mine[th]) {
          s.allocate(t, Tier::Host);
          fill(s.host_address(t), s.bytes(t), t);
        }
        for (int r = 0; r < kRounds; ++r) {
          std::vector<Token> toks;
          for (TensorId t : mine[th])
            toks.push_back(s.write_back(t));
          for (auto &k : toks)
            k.wait();
          toks.clear();
          for (TensorId t : mine[th]) {
            s.release(t, Tier::Host);
            toks.push_back(s.fetch(t));
          }
          for (auto &k : toks)
            k.wait();
          toks.clear();
          for (TensorId t : mine[th])
            toks.push_back(s.upload(t));
          for (auto &k : toks)
            k.wait();
          toks.clear();
          for (TensorId t : mine[th]) {
            s.release(t, Tier::Host);
            toks.push_back(s.download(t));
          }
          for (auto &k : toks)
            k.wait();
          for (TensorId t : mine[th]) {
            s.release(t, Tier::Gpu);
            if (mismatch(s.host_address(t), s.bytes(t), t) != -1)
              bad++;
          }
        }
      } catch (const std::exception &e) {
        ADD_FAILURE() << e.what();
        bad++;
      }
    });
  for (auto &t : threads)
    t.join();
  EXPECT_EQ(bad.load(), 0);
  LinkBytes m = s.moved();
  EXPECT_EQ(m.ssd_write, kRounds * total_ssd);
  EXPECT_EQ(m.ssd_read, kRounds * total_ssd);
  EXPECT_EQ(m.h2d, kRounds * total);
  EXPECT_EQ(m.d2h, kRounds * total);
}

TEST(TensorStore, ExplicitPlacementAndOverlapRejection) {
  Rig rig(1 << 20, 4 << 20, 4 << 20);
  TensorStore &s = *rig.store;
  TensorId a = s.add("layer0.w", 1000); // 1024 on the GPU (256 granule)
  TensorId b = s.add("layer1.w", 5000);
  TensorId c = s.add("layer2.w", 256);

  EXPECT_EQ(s.place(a, Tier::Gpu, 512).offset, 512u);
  EXPECT_EQ(s.extent(a, Tier::Gpu)->length, 1024u);
  std::string e = expect_error([&] { s.place(b, Tier::Gpu, 1024); });
  EXPECT_NE(e.find("'layer1.w'"), std::string::npos) << e;
  EXPECT_NE(e.find("overlaps tensor 'layer0.w' at [512, 1536)"),
            std::string::npos)
      << e;
  e = expect_error([&] { s.place(b, Tier::Gpu, 0); }); // ends inside a
  EXPECT_NE(e.find("overlaps tensor 'layer0.w'"), std::string::npos) << e;
  e = expect_error([&] { s.place(b, Tier::Gpu, 100); });
  EXPECT_NE(e.find("not a multiple of 256"), std::string::npos) << e;
  e = expect_error([&] { s.place(b, Tier::Gpu, (1 << 20) - 256); });
  EXPECT_NE(e.find("lies outside"), std::string::npos) << e;
  e = expect_error([&] { s.place(a, Tier::Gpu, 4096); });
  EXPECT_NE(e.find("already has a gpu extent"), std::string::npos) << e;
  EXPECT_FALSE(s.resident(b, Tier::Gpu)); // failed placements left nothing

  // Touching ranges are fine; first-fit fills the gap before `a`.
  EXPECT_EQ(s.place(b, Tier::Gpu, 1536).offset, 1536u);
  EXPECT_EQ(s.allocate(c, Tier::Gpu).offset, 0u);
  s.release(a, Tier::Gpu);
  TensorId d = s.add("layer3.w", 512);
  EXPECT_EQ(s.allocate(d, Tier::Gpu).offset, 256u);

  // Host and SSD extents follow the O_DIRECT granule.
  uint64_t g = s.granule(Tier::Ssd);
  EXPECT_GE(g, 512u);
  EXPECT_EQ(s.place(a, Tier::Ssd, 2 * g).offset, 2 * g);
  e = expect_error([&] { s.place(b, Tier::Ssd, 2 * g); });
  EXPECT_NE(e.find("overlaps tensor 'layer0.w'"), std::string::npos) << e;
  EXPECT_EQ(s.place(b, Tier::Host, 0).offset, 0u);
  EXPECT_EQ(s.extent(b, Tier::Host)->length,
            round_up(5000, s.granule(Tier::Host)));

  // Data moves between explicitly placed extents.
  fill(s.host_address(b), 5000, 99);
  s.write_back(b).wait(); // b's SSD extent allocated first-fit: not over a
  EXPECT_EQ(s.extent(b, Tier::Ssd)->offset, 0u);
  std::memset(s.host_address(b), 0, 5000);
  s.fetch(b).wait();
  EXPECT_EQ(mismatch(s.host_address(b), 5000, 99), -1);
  s.upload(b).wait();
  EXPECT_EQ(mismatch(static_cast<char *>(rig.gpu.address(1536)), 5000, 99),
            -1);
}

TEST(TensorStore, OutOfSpaceSaysWhatIsNeededAndFree) {
  Rig rig(64 << 10, 256 << 10, 1 << 20);
  TensorStore &s = *rig.store;
  TensorId big = s.add("embedding", 100 << 10);
  TensorId small = s.add("bias", 40 << 10);
  s.allocate(small, Tier::Gpu);
  std::string e = expect_error([&] { s.allocate(big, Tier::Gpu); });
  EXPECT_NE(e.find("no room on the gpu tier for tensor 'embedding'"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("needs " + human_bytes(100 << 10)), std::string::npos)
      << e;
  EXPECT_NE(e.find(human_bytes(24 << 10) + " of " + human_bytes(64 << 10) +
                   " is free"),
            std::string::npos)
      << e;

  // move() allocates the destination and reports the same way.
  s.allocate(big, Tier::Host);
  e = expect_error([&] { s.upload(big); });
  EXPECT_NE(e.find("no room on the gpu tier for tensor 'embedding'"),
            std::string::npos)
      << e;
  EXPECT_FALSE(s.resident(big, Tier::Gpu));

  // Fragmentation: enough bytes free in total but no range large enough.
  TensorId h1 = s.add("h1", 64 << 10), h2 = s.add("h2", 64 << 10);
  s.allocate(h1, Tier::Host); // [100K, 164K)
  s.allocate(h2, Tier::Host); // [164K, 228K)
  s.release(h1, Tier::Host);
  TensorId h3 = s.add("h3", 96 << 10);
  e = expect_error([&] { s.allocate(h3, Tier::Host); });
  EXPECT_NE(e.find("largest free range is " + human_bytes(64 << 10)),
            std::string::npos)
      << e;
}

// Per-tag counters (the offload plan's block classes): each tensor's moves
// count under its tag, and the tags sum to moved().
TEST(TensorStore, MovedBytesByTag) {
  Rig rig(1 << 20, 1 << 20, 1 << 20);
  TensorStore &s = *rig.store;
  TensorId a = s.add("params/layer0", 8192, 0);
  TensorId b = s.add("optimizer/layer0", 5000, 1);
  for (TensorId t : {a, b})
    s.allocate(t, Tier::Host);
  s.upload(a).wait();
  s.write_back(b).wait();
  s.release(b, Tier::Host);
  s.fetch(b, Priority::Demand).wait();
  const LinkBytes pa = s.moved_by_tag(0), ob = s.moved_by_tag(1);
  EXPECT_EQ(pa, (LinkBytes{0, 0, 8192, 0}));
  // SSD extents are whole 4 KiB blocks.
  EXPECT_EQ(ob, (LinkBytes{8192, 8192, 0, 0}));
  EXPECT_EQ(s.moved_by_tag(2), LinkBytes{});
  const LinkBytes all = s.moved();
  EXPECT_EQ(all.h2d, pa.h2d + ob.h2d);
  EXPECT_EQ(all.ssd_read, pa.ssd_read + ob.ssd_read);
  EXPECT_EQ(all.ssd_write, pa.ssd_write + ob.ssd_write);
  std::string e = expect_error([&] { s.add("x", 16, TensorStore::kNumTags); });
  EXPECT_NE(e.find("tensor 'x': tag 8 outside [0, 8)"), std::string::npos) << e;
}

TEST(TensorStore, BadRequestsAreClearErrors) {
  Rig rig(1 << 20, 1 << 20, 1 << 20);
  TensorStore &s = *rig.store;
  TensorId t = s.add("attn.qkv", 8192);
  std::string e = expect_error([&] { s.id("nope"); });
  EXPECT_NE(e.find("unknown tensor 'nope'"), std::string::npos) << e;
  e = expect_error([&] { s.move(77, Tier::Host, Tier::Gpu); });
  EXPECT_NE(e.find("unknown tensor id 77"), std::string::npos) << e;
  e = expect_error([&] { s.add("attn.qkv", 10); });
  EXPECT_NE(e.find("already in the store"), std::string::npos) << e;
  e = expect_error([&] { s.fetch(t); });
  EXPECT_NE(e.find("tensor 'attn.qkv' is not resident on the ssd tier"),
            std::string::npos)
      << e;
  e = expect_error([&] { s.move(t, Tier::Gpu, Tier::Ssd); });
  EXPECT_NE(e.find("no gpu->ssd link"), std::string::npos) << e;
  e = expect_error([&] { s.host_address(t); });
  EXPECT_NE(e.find("no copy on the host tier"), std::string::npos) << e;
  EXPECT_EQ(s.moved(), LinkBytes{});
  EXPECT_EQ(parse_tier("ssd"), Tier::Ssd);
  e = expect_error([&] { parse_tier("nvme"); });
  EXPECT_NE(e.find("unknown tier 'nvme'"), std::string::npos) << e;
}

namespace {
// A DeviceMemory whose copies complete only when the test says so: makes
// in-flight hazards deterministic.
struct HeldDevice : DeviceMemory {
  std::vector<char> mem = std::vector<char>(1 << 20);
  std::vector<std::pair<std::shared_ptr<Completion>, std::function<void()>>>
      held;
  std::mutex mu;
  const char *kind() const override { return "held"; }
  uint64_t size() const override { return mem.size(); }
  void *address(uint64_t o) const override {
    return const_cast<char *>(mem.data()) + o;
  }
  Token hold(std::function<void()> f) {
    auto c = std::make_shared<Completion>(1);
    std::lock_guard<std::mutex> lock(mu);
    held.emplace_back(c, std::move(f));
    return Token(c);
  }
  Token copy_h2d(uint64_t o, const void *h, uint64_t n,
                 const std::string &) override {
    return hold([=, this] { std::memcpy(mem.data() + o, h, n); });
  }
  Token copy_d2h(void *h, uint64_t o, uint64_t n,
                 const std::string &) override {
    return hold([=, this] { std::memcpy(h, mem.data() + o, n); });
  }
  void compute_waits(const Token &t) override { t.wait(); }
  void complete_all() {
    std::lock_guard<std::mutex> lock(mu);
    for (auto &[c, f] : held) {
      f();
      c->piece_done();
    }
    held.clear();
  }
};
} // namespace

TEST(TensorStore, HazardsWithMovesInFlightAreRefusedAndReleaseWaits) {
  TempDir dir;
  PinnedPool pool(1 << 20);
  EngineConfig cfg;
  cfg.pool = &pool;
  cfg.notice = [](const std::string &) {};
  IoEngine engine(cfg);
  SwapSpace swap(engine, {dir.path.string()}, 1 << 20);
  HeldDevice dev;
  {
    TensorStore s(dev, pool, &swap);
    TensorId t = s.add("mlp.w1", 10000);
    s.allocate(t, Tier::Gpu);
    fill(dev.address(s.extent(t, Tier::Gpu)->offset), 10000, 5);
    Token down = s.download(t);
    EXPECT_FALSE(down.done());
    std::string e = expect_error([&] { s.write_back(t); });
    EXPECT_NE(e.find("tensor 'mlp.w1': its host copy is still being filled "
                     "by the move gpu->host"),
              std::string::npos)
        << e;
    e = expect_error([&] { s.upload(t); });
    EXPECT_NE(e.find("still being filled"), std::string::npos) << e;
    e = expect_error([&] { s.download(t); });
    EXPECT_NE(e.find("in use by the move gpu->host in flight"),
              std::string::npos)
        << e;
    EXPECT_EQ(s.moved().d2h, 0u); // not complete: not counted

    // release() of the filling copy waits for the copy to finish.
    std::atomic<bool> released{false};
    std::thread rel([&] {
      s.release(t, Tier::Host);
      released = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(released.load());
    dev.complete_all();
    rel.join();
    EXPECT_TRUE(released.load());
    EXPECT_FALSE(s.resident(t, Tier::Host));
    EXPECT_EQ(s.moved().d2h, 10000u);

    // Host -> SSD while GPU -> host... again, then a clean path.
    Token d2 = s.download(t);
    dev.complete_all();
    d2.wait();
    s.write_back(t).wait();
    EXPECT_EQ(s.moved().ssd_write, round_up(10000, s.granule(Tier::Ssd)));
  }
}

TEST(TensorStore, InjectedEioFailsTheMoveWithTheTensorName) {
  // The first engine completion fails with -EIO.
  ScriptedFaults faults("eio@1");
  Rig rig(1 << 20, 1 << 20, 1 << 20, &faults);
  TensorStore &s = *rig.store;
  TensorId t = s.add("blocks.3.mlp.w2", 12345);
  s.allocate(t, Tier::Host);
  fill(s.host_address(t), 12345, 3);
  Token tok = s.write_back(t);
  std::string e = expect_error([&] { tok.wait(); });
  EXPECT_NE(e.find("blocks.3.mlp.w2"), std::string::npos) << e;
  EXPECT_FALSE(tok.error().empty());
  EXPECT_EQ(faults.injected(), 1);
  EXPECT_EQ(s.failed_moves(), 1u);
  EXPECT_EQ(s.moved().ssd_write, 0u); // a failed move moved nothing

  // The SSD copy it was filling is not silently used.
  s.release(t, Tier::Host);
  e = expect_error([&] { s.fetch(t); });
  EXPECT_NE(e.find("tensor 'blocks.3.mlp.w2': its ssd copy is invalid"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("blocks.3.mlp.w2"), std::string::npos) << e;

  // Writing it again (the fault was one-shot) makes it good.
  s.allocate(t, Tier::Host);
  fill(s.host_address(t), 12345, 3);
  s.write_back(t).wait();
  std::memset(s.host_address(t), 0, 12345);
  s.fetch(t).wait();
  EXPECT_EQ(mismatch(s.host_address(t), 12345, 3), -1);
  LinkBytes m = s.moved();
  EXPECT_EQ(m.ssd_write, round_up(12345, s.granule(Tier::Ssd)));
  EXPECT_EQ(m.ssd_read, m.ssd_write);
}

TEST(CpuDeviceMemory, CopiesAreAsynchronousAndChecked) {
  CpuDeviceMemory dev(1 << 20);
  std::vector<char> a(300000), b(300000);
  fill(a.data(), a.size(), 1);
  Token up = dev.copy_h2d(4096, a.data(), a.size(), "x");
  up.wait();
  Token down = dev.copy_d2h(b.data(), 4096, b.size(), "x");
  down.wait();
  EXPECT_EQ(mismatch(b.data(), b.size(), 1), -1);
  std::string e = expect_error(
      [&] { dev.copy_h2d((1 << 20) - 10, a.data(), 100, "lm_head"); });
  EXPECT_NE(e.find("'lm_head'"), std::string::npos) << e;
  EXPECT_TRUE(dev.copy_h2d(0, a.data(), 0, "empty").done());
}
