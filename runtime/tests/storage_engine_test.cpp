//===- storage_engine_test.cpp - the SSD I/O engine -----------------------===//
//
// Data integrity through both backends, striping, priorities, and every
// fault the kernel can hand back (injected with ScriptedFaults): each case
// either recovers with the right bytes or fails with an error naming file,
// offset, length and tensor.
//
//===----------------------------------------------------------------------===//

#include "storage/io_engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <tuple>
#include <mutex>
#include <random>
#include <sys/resource.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

using namespace spw::storage;
namespace fs = std::filesystem;

namespace {

constexpr size_t KiB = 1024, MiB = 1024 * KiB;

// A scratch directory under $TMPDIR (or /tmp), removed afterwards.
class TempDir {
public:
  TempDir() {
    const char *t = getenv("TMPDIR");
    std::string tmpl = std::string(t && *t ? t : "/tmp") + "/spw-eng-XXXXXX";
    if (!mkdtemp(tmpl.data()))
      throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string &path() const { return path_; }
  std::string file(const std::string &name) const { return path_ + "/" + name; }

private:
  std::string path_;
};

// Page-aligned heap memory (not from a pool).
struct HeapBuf {
  explicit HeapBuf(size_t n) : p(static_cast<char *>(std::aligned_alloc(4096, n))) {}
  ~HeapBuf() { std::free(p); }
  char *p;
};

void fill_random(char *p, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = rng();
    memcpy(p + i, &v, 8);
  }
  for (; i < n; ++i)
    p[i] = char(rng());
}

// Collects notices instead of printing them.
struct Notices {
  std::mutex mu;
  std::vector<std::string> said;
  std::function<void(const std::string &)> sink() {
    return [this](const std::string &m) {
      std::lock_guard<std::mutex> lk(mu);
      said.push_back(m);
    };
  }
  int count(const std::string &needle) {
    std::lock_guard<std::mutex> lk(mu);
    return int(std::count_if(said.begin(), said.end(), [&](auto &s) {
      return s.find(needle) != std::string::npos;
    }));
  }
};

// For an io_uring engine given a pool: true when buffer registration was
// refused, which is only acceptable for a non-root user (it counts against
// RLIMIT_MEMLOCK, 8 MiB by default) and must then have been said once, with
// buffers_registered() false. Prints a note, so a refusal never passes
// silently; the caller still checks the data.
bool registration_refused(IoEngine &eng, Notices &notes) {
  EXPECT_EQ(eng.backend(), Backend::Uring);
  if (eng.buffers_registered()) {
    EXPECT_EQ(notes.count("registering the"), 0);
    return false;
  }
  EXPECT_NE(geteuid(), 0u) << "registration refused for root";
  EXPECT_EQ(notes.count("registering the"), 1);
  EXPECT_EQ(notes.count("locked-memory limit"), 1);
  std::cout << "[   NOTE   ] io_uring buffer registration refused here "
               "(RLIMIT_MEMLOCK); checking the data with unregistered "
               "buffers\n";
  return true;
}

// The direct-path tests mean O_DIRECT: the test directory's file system must
// take it. Where it does not (tmpfs before Linux 6.6) the test is skipped
// loudly rather than passing on buffered I/O.
#define expect_direct(eng, f)                                                  \
  do {                                                                         \
    if (!(eng).file(f).direct)                                                 \
      GTEST_SKIP() << "the file system of '" << (eng).file(f).path             \
                   << "' refuses O_DIRECT; set TMPDIR to a directory on one " \
                      "that takes it";                                         \
  } while (0)

std::string error_of(const Token &t) {
  try {
    t.wait();
  } catch (const spw::Error &e) {
    return e.what();
  }
  return {};
}

template <class F> std::string thrown_by(F &&f) {
  try {
    f();
  } catch (const spw::Error &e) {
    return e.what();
  }
  return {};
}

// Writes random disjoint extents covering a file (all in flight at once,
// random priorities), then reads random extents back concurrently and
// compares them with the image. `wbuf` and `rbuf` are `size` bytes each.
void round_trip(IoEngine &eng, FileId f, char *wbuf, char *rbuf, size_t size,
                uint64_t seed) {
  std::mt19937_64 rng(seed);
  const size_t a = 4096;
  for (int round = 0; round < 3; ++round) {
    fill_random(wbuf, size, seed * 31 + round);
    std::vector<std::pair<size_t, size_t>> extents;
    for (size_t off = 0; off < size;) {
      size_t len = std::min(size - off, (1 + rng() % 96) * a);
      extents.push_back({off, len});
      off += len;
    }
    std::shuffle(extents.begin(), extents.end(), rng);
    std::vector<Token> tokens;
    for (auto [off, len] : extents)
      tokens.push_back(eng.write(f, off, wbuf + off, len,
                                 Priority(rng() % kNumPriorities), "image"));
    for (auto &t : tokens)
      t.wait();
    tokens.clear();
    memset(rbuf, 0xAB, size);
    // Random disjoint reads (a random part of the file, other cuts than the
    // writes), all in flight at once.
    std::vector<std::pair<size_t, size_t>> reads;
    for (size_t off = 0; off < size;) {
      size_t len = std::min(size - off, (1 + rng() % 200) * a);
      if (rng() % 3)
        reads.push_back({off, len});
      off += len;
    }
    std::shuffle(reads.begin(), reads.end(), rng);
    for (auto [off, len] : reads)
      tokens.push_back(eng.read(f, off, rbuf + off, len,
                                Priority(rng() % kNumPriorities), "image"));
    for (auto &t : tokens)
      t.wait();
    for (auto [off, len] : reads)
      ASSERT_EQ(memcmp(rbuf + off, wbuf + off, len), 0)
          << "round " << round << " read at " << off << " of " << len;
    // And the whole file once, in one request.
    memset(rbuf, 0, size);
    eng.read(f, 0, rbuf, size, Priority::Demand, "image").wait();
    ASSERT_EQ(memcmp(rbuf, wbuf, size), 0) << "round " << round;
  }
}

struct RoundTripCase {
  Backend backend;
  bool pool;
};

class EngineRoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(EngineRoundTrip, RandomExtentsKeepTheirBytes) {
  TempDir dir;
  const size_t size = 8 * MiB;
  PinnedPool pool(2 * size);
  HeapBuf hw(size), hr(size);
  char *w = hw.p, *r = hr.p;
  if (GetParam().pool) {
    w = static_cast<char *>(pool.allocate(size));
    r = static_cast<char *>(pool.allocate(size));
    ASSERT_TRUE(w && r);
  }
  EngineConfig cfg;
  cfg.backend = GetParam().backend;
  cfg.request_bytes = 128 * KiB;
  cfg.queue_depth = 8;
  cfg.pool = &pool;
  Notices notes;
  cfg.notice = notes.sink();
  IoEngine eng(cfg, 2);
  EXPECT_EQ(eng.backend(), GetParam().backend);
  bool refused = false;
  if (GetParam().backend == Backend::Uring)
    refused = registration_refused(eng, notes);
  else
    EXPECT_FALSE(eng.buffers_registered());
  FileId f = eng.open(dir.file("data.bin"), true, 1);
  EXPECT_EQ(eng.file(f).queue, 1u);
  expect_direct(eng, f);
  round_trip(eng, f, w, r, size, 7 + unsigned(GetParam().backend));
  EngineStats s = eng.stats();
  EXPECT_EQ(s.bytes_written, 3 * size);
  EXPECT_GE(s.bytes_read, 3 * size);
  EXPECT_GE(s.submissions, s.bytes_written / cfg.request_bytes);
  EXPECT_EQ(s.resubmits, 0u);
  // Nothing else said: at most the one registration notice.
  EXPECT_EQ(notes.said.size(), refused ? 1u : 0u)
      << (notes.said.empty() ? "" : notes.said[0]);
}

INSTANTIATE_TEST_SUITE_P(
    Backends, EngineRoundTrip,
    ::testing::Values(RoundTripCase{Backend::Uring, true},
                      RoundTripCase{Backend::Uring, false},
                      RoundTripCase{Backend::Threads, true},
                      RoundTripCase{Backend::Threads, false}),
    [](const auto &info) {
      return std::string(info.param.backend == Backend::Uring ? "Uring"
                                                              : "Threads") +
             (info.param.pool ? "Pool" : "Heap");
    });

// A buffer straddling two registered 1 GiB pieces of the pool is split at
// the edge (one fixed buffer cannot span two registrations: -EFAULT).
TEST(EngineRoundTripEdge, BufferAcrossTheRegisteredGiBEdge) {
  TempDir dir;
  PinnedPool pool(kMaxRegisteredPiece + 4 * MiB);
  void *head = pool.allocate(kMaxRegisteredPiece - 2 * MiB);
  char *w = static_cast<char *>(pool.allocate(4 * MiB));
  ASSERT_TRUE(head && w);
  ASSERT_EQ(size_t(w - pool.base()), kMaxRegisteredPiece - 2 * MiB);
  pool.free(head);
  char *r = static_cast<char *>(pool.allocate(4 * MiB));
  ASSERT_EQ(r, pool.base());
  EngineConfig cfg;
  cfg.backend = Backend::Uring;
  cfg.request_bytes = 3 * MiB; // one piece would cross the edge
  cfg.pool = &pool;
  Notices notes;
  cfg.notice = notes.sink();
  IoEngine eng(cfg);
  bool refused = registration_refused(eng, notes);
  FileId f = eng.open(dir.file("edge.bin"), true);
  expect_direct(eng, f);
  fill_random(w, 4 * MiB, 21);
  eng.write(f, 0, w, 4 * MiB, Priority::WriteBack, "edge").wait();
  eng.read(f, 0, r, 4 * MiB, Priority::Demand, "edge").wait();
  EXPECT_EQ(memcmp(w, r, 4 * MiB), 0);
  memset(w, 0, 4 * MiB);
  eng.read(f, 0, w, 4 * MiB, Priority::Demand, "edge").wait();
  EXPECT_EQ(memcmp(w, r, 4 * MiB), 0);
  EXPECT_EQ(eng.stats().submissions, 6u); // 2 MiB + 2 MiB, then 3 + 1 MiB, 2 + 2 MiB
  if (refused)
    GTEST_SKIP() << "buffer registration refused (locked-memory limit); the "
                    "split at the 1 GiB edge and the data were checked with "
                    "plain reads and writes, fixed buffers were not";
}

// Many threads submitting at once to two files on two queues.
TEST(EngineConcurrency, ManySubmittersManyRequests) {
  TempDir dir;
  for (Backend b : {Backend::Uring, Backend::Threads}) {
    EngineConfig cfg;
    cfg.backend = b;
    cfg.request_bytes = 64 * KiB;
    cfg.queue_depth = 16;
    IoEngine eng(cfg, 2);
    FileId files[2] = {eng.open(dir.file("a.bin"), true, 0),
                       eng.open(dir.file("b.bin"), true, 1)};
    const size_t chunk = 96 * KiB, per_thread = 40;
    const int threads = 4;
    HeapBuf src(chunk * per_thread * threads), dst(chunk * per_thread * threads);
    fill_random(src.p, chunk * per_thread * threads, 99);
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&, t] {
        std::vector<Token> tok;
        for (size_t i = 0; i < per_thread; ++i) {
          size_t k = t * per_thread + i;
          tok.push_back(eng.write(files[k % 2], k * chunk, src.p + k * chunk,
                                  chunk, Priority(k % 3), "w"));
        }
        for (auto &x : tok)
          x.wait();
        tok.clear();
        for (size_t i = 0; i < per_thread; ++i) {
          size_t k = t * per_thread + i;
          tok.push_back(eng.read(files[k % 2], k * chunk, dst.p + k * chunk,
                                 chunk, Priority(k % 3), "r"));
        }
        for (auto &x : tok)
          x.wait();
      });
    for (auto &t : ts)
      t.join();
    EXPECT_EQ(memcmp(src.p, dst.p, chunk * per_thread * threads), 0)
        << backend_name(b);
    EXPECT_EQ(eng.stats().requests, 2u * per_thread * threads);
  }
}

// The destructor waits for what is in flight.
TEST(EngineConcurrency, DestructorDrains) {
  TempDir dir;
  HeapBuf buf(4 * MiB);
  fill_random(buf.p, 4 * MiB, 3);
  std::vector<Token> tokens;
  {
    EngineConfig cfg;
    cfg.request_bytes = 256 * KiB;
    IoEngine eng(cfg);
    FileId f = eng.open(dir.file("d.bin"), true);
    for (int i = 0; i < 16; ++i)
      tokens.push_back(eng.write(f, i * 256 * KiB, buf.p + i * 256 * KiB,
                                 256 * KiB, Priority::WriteBack, "t"));
  }
  for (auto &t : tokens) {
    EXPECT_TRUE(t.done());
    EXPECT_EQ(t.error(), "");
  }
  EXPECT_EQ(fs::file_size(dir.file("d.bin")), 4 * MiB);
}

// A file opened read-only (here also chmod 0444, which only binds a
// non-root user) can be read through both backends; a write to it is refused
// before anything is submitted, naming the file; create + read_only is an
// error.
TEST(EngineReadOnly, ReadOnlyFileCanBeReadAndRefusesWrites) {
  TempDir dir;
  const std::string path = dir.file("ro.bin");
  const size_t size = 1 * MiB;
  HeapBuf src(size), dst(size);
  fill_random(src.p, size, 77);
  {
    std::ofstream out(path, std::ios::binary);
    out.write(src.p, std::streamsize(size));
  }
  ASSERT_EQ(chmod(path.c_str(), 0444), 0);
  for (Backend b : {Backend::Uring, Backend::Threads}) {
    EngineConfig cfg;
    cfg.backend = b;
    cfg.request_bytes = 256 * KiB;
    IoEngine eng(cfg);
    if (geteuid() != 0) // root opens a 0444 file for writing regardless
      EXPECT_NE(thrown_by([&] { eng.open(path, false); }).find("'" + path + "'"),
                std::string::npos);
    FileId f = eng.open(path, /*create=*/false, 0, /*read_only=*/true);
    EXPECT_TRUE(eng.file(f).read_only);
    memset(dst.p, 0, size);
    eng.read(f, 0, dst.p, size, Priority::Demand, "ro").wait();
    EXPECT_EQ(memcmp(src.p, dst.p, size), 0) << backend_name(b);
    std::string err = thrown_by(
        [&] { eng.write(f, 0, src.p, 4096, Priority::WriteBack, "ro-tensor"); });
    EXPECT_NE(err.find("'" + path + "'"), std::string::npos) << err;
    EXPECT_NE(err.find("read-only"), std::string::npos) << err;
    EXPECT_NE(err.find("ro-tensor"), std::string::npos) << err;
    EXPECT_EQ(eng.stats().requests, 1u); // the write was never queued
    eng.close(f);
    err = thrown_by([&] { eng.open(dir.file("new.bin"), true, 0, true); });
    EXPECT_NE(err.find("read-only"), std::string::npos) << err;
    EXPECT_FALSE(fs::exists(dir.file("new.bin")));
  }
  // Untouched by all of the above.
  std::ifstream in(path, std::ios::binary);
  in.read(dst.p, std::streamsize(size));
  EXPECT_EQ(memcmp(src.p, dst.p, size), 0);
}

// When the eventfd of a later queue is refused (here: the descriptor limit
// leaves room for exactly one), the engine fails to start and closes the
// eventfds of the queues before it.
TEST(EngineStart, RefusedEventfdLeaksNothing) {
  auto is_open = [](int fd) { return fcntl(fd, F_GETFD) != -1; };
  int f1 = 0;
  while (is_open(f1))
    ++f1;
  int f2 = f1 + 1;
  while (is_open(f2))
    ++f2;
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  rlimit tight = old;
  tight.rlim_cur = rlim_t(f2); // only f1 is free below the limit
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &tight), 0);
  EngineConfig cfg;
  cfg.backend = Backend::Uring;
  std::string err = thrown_by([&] { IoEngine eng(cfg, 3); });
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  EXPECT_NE(err.find("eventfd for I/O queue 1 failed"), std::string::npos)
      << err;
  EXPECT_FALSE(is_open(f1)) << "queue 0's eventfd leaked";
}

// ---- striping -----------------------------------------------------------------

TEST(SwapSpaceTest, StripesOverDirectoriesAndEachFileGetsItsShare) {
  TempDir root;
  std::vector<std::string> dirs;
  for (int k = 0; k < 3; ++k) {
    dirs.push_back(root.file("ssd" + std::to_string(k)));
    fs::create_directory(dirs.back());
  }
  EngineConfig cfg;
  cfg.request_bytes = 256 * KiB;
  cfg.queue_depth = 8;
  IoEngine eng(cfg, 3);
  const uint64_t stripe = cfg.request_bytes;
  const uint64_t size = 10 * stripe + 8 * KiB; // 11 stripes: 4, 4, 3
  HeapBuf src(size), dst(size);
  fill_random(src.p, size, 5);
  {
    SwapSpace swap(eng, dirs, size, /*keep_files=*/true);
    ASSERT_EQ(swap.paths().size(), 3u);
    EXPECT_EQ(swap.size(), size);
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(swap.paths()[k].rfind(dirs[k] + "/spillway-swap-", 0), 0u);
      EXPECT_EQ(fs::file_size(swap.paths()[k]), (k < 2 ? 4 : 3) * stripe);
    }
    auto segs = swap.map(stripe - 4096, src.p, 2 * stripe);
    ASSERT_EQ(segs.size(), 3u);
    EXPECT_EQ(segs[0].offset, stripe - 4096);
    EXPECT_EQ(segs[0].length, 4096u);
    EXPECT_EQ(segs[1].offset, 0u);
    EXPECT_EQ(segs[2].offset, 0u);
    EXPECT_EQ(segs[2].length, stripe - 4096);
    EXPECT_NE(segs[1].file, segs[2].file);
    EXPECT_EQ(eng.file(segs[1].file).queue, 1u);
    EXPECT_EQ(eng.file(segs[2].file).queue, 2u);

    // Written in a few uneven requests, read back in others.
    std::vector<Token> t;
    uint64_t cuts[] = {0, 12 * KiB, stripe + 4 * KiB, 5 * stripe, size};
    for (int i = 0; i + 1 < 5; ++i)
      t.push_back(swap.write(cuts[i], src.p + cuts[i], cuts[i + 1] - cuts[i],
                             Priority::WriteBack, "stripe"));
    for (auto &x : t)
      x.wait();
    swap.read(0, dst.p, size, Priority::Demand, "stripe").wait();
    EXPECT_EQ(memcmp(src.p, dst.p, size), 0);
    EXPECT_THROW(swap.read(size - 4096, dst.p, 8192, Priority::Demand, "x"),
                 spw::Error);

    // Each file holds exactly its stripes.
    for (int k = 0; k < 3; ++k) {
      std::vector<char> content(fs::file_size(swap.paths()[k]));
      int fd = ::open(swap.paths()[k].c_str(), O_RDONLY);
      ASSERT_GE(fd, 0);
      ASSERT_EQ(pread(fd, content.data(), content.size(), 0),
                ssize_t(content.size()));
      ::close(fd);
      for (uint64_t s = k, j = 0; s * stripe < size; s += 3, ++j) {
        uint64_t len = std::min(stripe, size - s * stripe);
        EXPECT_EQ(memcmp(content.data() + j * stripe, src.p + s * stripe, len),
                  0)
            << "file " << k << " stripe " << s;
      }
    }
  }
  // keep_files leaves them for the caller.
  for (auto &d : dirs)
    EXPECT_FALSE(fs::is_empty(d));
}

TEST(SwapSpaceTest, FilesAreUnlinkedAtOnceByDefault) {
  TempDir root;
  EngineConfig cfg;
  IoEngine eng(cfg);
  HeapBuf buf(MiB);
  fill_random(buf.p, MiB, 1);
  SwapSpace swap(eng, {root.path()}, 4 * MiB);
  EXPECT_TRUE(fs::is_empty(root.path()));
  swap.write(MiB, buf.p, MiB, Priority::WriteBack, "t").wait();
  HeapBuf back(MiB);
  swap.read(MiB, back.p, MiB, Priority::Demand, "t").wait();
  EXPECT_EQ(memcmp(buf.p, back.p, MiB), 0);
}

TEST(SwapSpaceTest, TooLittleSpaceFailsBeforeCreatingAnything) {
  TempDir root;
  IoEngine eng(EngineConfig{});
  uint64_t pib = uint64_t(1) << 50;
  std::string err = thrown_by([&] { SwapSpace s(eng, {root.path()}, pib); });
  EXPECT_NE(err.find("swap space needs 1 PiB in '" + root.path() +
                     "' but only "),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("is free; free space or pass other --ssd directories"),
            std::string::npos)
      << err;
  EXPECT_TRUE(fs::is_empty(root.path()));
}

TEST(SwapSpaceTest, MissingOrNonDirectoryIsAClearError) {
  TempDir root;
  IoEngine eng(EngineConfig{});
  std::string missing = root.file("nope");
  std::string err = thrown_by([&] { SwapSpace s(eng, {missing}, MiB); });
  EXPECT_NE(err.find("'" + missing + "'"), std::string::npos) << err;
  EXPECT_NE(err.find("No such file or directory"), std::string::npos) << err;
  std::string plain = root.file("plain");
  { std::ofstream(plain) << "x"; }
  err = thrown_by([&] { SwapSpace s(eng, {plain}, MiB); });
  EXPECT_NE(err.find("'" + plain + "' is not a directory"), std::string::npos)
      << err;
}

// ---- priorities ---------------------------------------------------------------

// Holds the worker inside the first completion until the test has queued
// everything else, then records the order in which pieces complete.
class Gate : public FaultInjector {
public:
  int rewrite_completion(const PieceInfo &p, int res) override {
    std::unique_lock<std::mutex> lk(mu_);
    order_.push_back(p.what);
    if (order_.size() == 1) {
      cv_.notify_all();
      cv_.wait(lk, [&] { return open_; });
    }
    return res;
  }
  void wait_first() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return !order_.empty(); });
  }
  void open() {
    std::lock_guard<std::mutex> lk(mu_);
    open_ = true;
    cv_.notify_all();
  }
  std::vector<std::string> order() {
    std::lock_guard<std::mutex> lk(mu_);
    return order_;
  }

private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  std::vector<std::string> order_;
};

class EnginePriority : public ::testing::TestWithParam<Backend> {};

TEST_P(EnginePriority, DemandOvertakesPrefetchOvertakesWriteBack) {
  TempDir dir;
  Gate gate;
  EngineConfig cfg;
  cfg.backend = GetParam();
  cfg.queue_depth = 1;
  cfg.request_bytes = 64 * KiB;
  cfg.faults = &gate;
  IoEngine eng(cfg);
  FileId f = eng.open(dir.file("p.bin"), true);
  ASSERT_EQ(ftruncate(eng.file(f).fd, 16 * 64 * KiB), 0); // reads see data
  HeapBuf buf(16 * 64 * KiB);
  memset(buf.p, 7, 16 * 64 * KiB);
  std::vector<Token> t;
  t.push_back(eng.write(f, 0, buf.p, 64 * KiB, Priority::WriteBack, "w0"));
  gate.wait_first(); // the worker now holds w0's completion
  for (int i = 1; i <= 8; ++i)
    t.push_back(eng.write(f, i * 64 * KiB, buf.p + i * 64 * KiB, 64 * KiB,
                          Priority::WriteBack, "w" + std::to_string(i)));
  t.push_back(eng.read(f, 9 * 64 * KiB, buf.p + 9 * 64 * KiB, 64 * KiB,
                       Priority::Prefetch, "p1"));
  t.push_back(eng.read(f, 10 * 64 * KiB, buf.p + 10 * 64 * KiB, 64 * KiB,
                       Priority::Demand, "d1"));
  t.push_back(eng.read(f, 11 * 64 * KiB, buf.p + 11 * 64 * KiB, 64 * KiB,
                       Priority::Prefetch, "p2"));
  gate.open();
  eng.drain();
  std::vector<std::string> want = {"w0", "d1", "p1", "p2", "w1", "w2",
                                   "w3", "w4", "w5", "w6", "w7", "w8"};
  EXPECT_EQ(gate.order(), want);
}

INSTANTIATE_TEST_SUITE_P(Backends, EnginePriority,
                         ::testing::Values(Backend::Uring, Backend::Threads),
                         [](const auto &info) {
                           return std::string(info.param == Backend::Uring
                                                  ? "Uring"
                                                  : "Threads");
                         });

// ---- faults -------------------------------------------------------------------

struct FaultCase {
  std::string script;
  Backend backend;
};

class EngineRecovers : public ::testing::TestWithParam<FaultCase> {};

// Transient faults are retried or resubmitted; the bytes stay right.
TEST_P(EngineRecovers, FromTransientFaults) {
  TempDir dir;
  ScriptedFaults faults(GetParam().script);
  PinnedPool pool(4 * MiB);
  EngineConfig cfg;
  cfg.backend = GetParam().backend;
  cfg.request_bytes = 128 * KiB;
  cfg.queue_depth = 4;
  cfg.pool = &pool;
  cfg.faults = &faults;
  IoEngine eng(cfg);
  FileId f = eng.open(dir.file("f.bin"), true);
  expect_direct(eng, f); // the realign-down of short transfers needs it
  const size_t size = 2 * MiB;
  char *w = static_cast<char *>(pool.allocate(size));
  char *r = static_cast<char *>(pool.allocate(size));
  fill_random(w, size, 11);
  std::vector<Token> t;
  for (size_t off = 0; off < size; off += 256 * KiB)
    t.push_back(eng.write(f, off, w + off, 256 * KiB, Priority::WriteBack, "x"));
  for (auto &x : t)
    x.wait();
  t.clear();
  for (size_t off = 0; off < size; off += 192 * KiB) {
    size_t len = std::min<size_t>(192 * KiB, size - off);
    t.push_back(eng.read(f, off, r + off, len, Priority::Demand, "x"));
  }
  for (auto &x : t)
    x.wait();
  EXPECT_EQ(memcmp(w, r, size), 0);
  EXPECT_GE(faults.injected(), 4);
  EXPECT_GE(eng.stats().resubmits, uint64_t(faults.injected()));
  EXPECT_EQ(eng.stats().bytes_written, size);
  EXPECT_EQ(eng.stats().bytes_read, size);
}

std::vector<FaultCase> transient_cases() {
  std::vector<FaultCase> v;
  for (std::string k :
       {"short", "short512", "zero", "eagain", "eintr", "ecanceled"})
    for (Backend b : {Backend::Uring, Backend::Threads})
      v.push_back({k + "@1," + k + "@5/write," + k + "@2/read," + k +
                       "@9/read," + k + "@10/read",
                   b});
  // Several shorts in a row (a 4 KiB remainder cannot shrink further).
  v.push_back({"short@3/read,short@4/read,short@5/read,short@6/read",
               Backend::Uring});
  return v;
}

INSTANTIATE_TEST_SUITE_P(
    Faults, EngineRecovers, ::testing::ValuesIn(transient_cases()),
    [](const auto &info) {
      std::string s = info.param.script.substr(0, info.param.script.find('@'));
      if (info.param.script.find("@3/read") != std::string::npos)
        s += "Run";
      return s + (info.param.backend == Backend::Uring ? "Uring" : "Threads");
    });

// A short transfer that is no multiple of the O_DIRECT alignment: the engine
// counts only the aligned part as done and resubmits from there (the bytes
// past it move again), for reads and writes alike.
TEST(EngineRealign, UnalignedShortTransfersAreRealignedDown) {
  TempDir dir;
  for (Backend b : {Backend::Uring, Backend::Threads}) {
    // Write completion 1 (the first 128 KiB piece) reports 127.5 KiB, which
    // is realigned down to 124 KiB; completion 2 is the 4 KiB remainder,
    // whose 3.5 KiB realigns to no progress and is retried (completion 3).
    // Read completion 1 is realigned like write completion 1.
    ScriptedFaults faults("short512@1/write,short512@2/write,short512@1/read");
    EngineConfig cfg;
    cfg.backend = b;
    cfg.request_bytes = 128 * KiB;
    cfg.queue_depth = 1; // completions in file order
    cfg.faults = &faults;
    IoEngine eng(cfg);
    FileId f = eng.open(dir.file("a.bin"), true);
    expect_direct(eng, f);
    ASSERT_EQ(eng.file(f).align % 512, 0u);
    ASSERT_GT(eng.file(f).align, 512u);
    const size_t size = 512 * KiB;
    HeapBuf w(size), r(size);
    fill_random(w.p, size, 31 + unsigned(b));
    eng.write(f, 0, w.p, size, Priority::WriteBack, "t").wait();
    memset(r.p, 0, size);
    eng.read(f, 0, r.p, size, Priority::Demand, "t").wait();
    EXPECT_EQ(memcmp(w.p, r.p, size), 0) << backend_name(b);
    EXPECT_EQ(faults.injected(), 3);
    EngineStats s = eng.stats();
    EXPECT_EQ(s.resubmits, 3u) << backend_name(b);
    EXPECT_EQ(s.submissions, 4u + 4u + 3u) << backend_name(b);
    EXPECT_EQ(s.bytes_written, size);
    EXPECT_EQ(s.bytes_read, size);
  }
}

class EngineFails : public ::testing::TestWithParam<Backend> {};

// A hard error names the operation, length, offset, file and tensor.
TEST_P(EngineFails, HardErrorsNameFileOffsetLengthAndTensor) {
  TempDir dir;
  struct Case {
    std::string script;
    IoOp op;
    std::string reason;
  } cases[] = {
      {"enospc@1", IoOp::Write, "No space left on device"},
      {"eio@1/read", IoOp::Read, "Input/output error"},
      {"eagain@1+", IoOp::Write, "Resource temporarily unavailable"},
      {"zero@1+/read", IoOp::Read, "no progress"},
  };
  HeapBuf buf(4 * MiB);
  memset(buf.p, 1, 4 * MiB);
  for (const Case &c : cases) {
    ScriptedFaults faults(c.script);
    EngineConfig cfg;
    cfg.backend = GetParam();
    cfg.faults = &faults;
    cfg.retries = 3;
    IoEngine eng(cfg);
    std::string path = dir.file("e.bin");
    FileId f = eng.open(path, true);
    if (c.op == IoOp::Read) // something to read first
      eng.write(f, 0, buf.p, 8 * MiB / 2, Priority::Demand, "prep").wait();
    Token t = c.op == IoOp::Write
                  ? eng.write(f, 4194304 - 1048576, buf.p, 1048576,
                              Priority::WriteBack, "layer3.w")
                  : eng.read(f, 3145728, buf.p, 1048576, Priority::Demand,
                             "layer3.w");
    std::string err = error_of(t);
    std::string op = c.op == IoOp::Write ? "write" : "read";
    EXPECT_NE(err.find(op + " of 1048576 bytes at offset 3145728 of '" + path +
                       "' (tensor 'layer3.w') failed: " + c.reason),
              std::string::npos)
        << c.script << ": " << err;
    EXPECT_TRUE(t.done());
    if (c.script == "zero@1+/read")
      EXPECT_NE(err.find("shorter than expected"), std::string::npos) << err;
    if (c.script.back() == '+')
      EXPECT_NE(err.find("3 retries"), std::string::npos) << err;
    eng.close(f);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, EngineFails,
                         ::testing::Values(Backend::Uring, Backend::Threads),
                         [](const auto &info) {
                           return std::string(info.param == Backend::Uring
                                                  ? "Uring"
                                                  : "Threads");
                         });

TEST(EngineFallback, RefusedRegistrationUsesPlainBuffersAndSaysSoOnce) {
  TempDir dir;
  ScriptedFaults faults("register=enomem");
  PinnedPool pool(4 * MiB);
  Notices notes;
  EngineConfig cfg;
  cfg.backend = Backend::Uring;
  cfg.pool = &pool;
  cfg.faults = &faults;
  cfg.notice = notes.sink();
  IoEngine eng(cfg, 2);
  EXPECT_EQ(eng.backend(), Backend::Uring);
  EXPECT_FALSE(eng.buffers_registered());
  EXPECT_EQ(notes.count("unregistered buffers"), 1);
  EXPECT_EQ(notes.count("Cannot allocate memory"), 1);
  FileId f = eng.open(dir.file("r.bin"), true, 1);
  char *w = static_cast<char *>(pool.allocate(MiB));
  char *r = static_cast<char *>(pool.allocate(MiB));
  fill_random(w, MiB, 4);
  eng.write(f, 0, w, MiB, Priority::WriteBack, "t").wait();
  eng.read(f, 0, r, MiB, Priority::Demand, "t").wait();
  EXPECT_EQ(memcmp(w, r, MiB), 0);
}

// io_uring_submit_and_wait failing over and over: after `retries` more
// failures the queue gives up, fails what it holds and what comes later
// with an error naming the queue, its file and the errno; drain() and the
// destructor return (they used to hang on a spinning worker).
TEST(EngineSubmit, FailingForeverFailsTheQueueInsteadOfHanging) {
  TempDir dir;
  // Call 1 is the idle worker's wait for work; call 2 carries all four
  // pieces of the write, which are then in flight when the queue gives up.
  ScriptedFaults faults("submit=ebadf@2");
  Notices notes;
  EngineConfig cfg;
  cfg.backend = Backend::Uring;
  cfg.request_bytes = 256 * KiB;
  cfg.retries = 3;
  cfg.faults = &faults;
  cfg.notice = notes.sink();
  HeapBuf buf(MiB);
  memset(buf.p, 7, MiB);
  std::string path = dir.file("s.bin");
  {
    IoEngine eng(cfg);
    FileId f = eng.open(path, true);
    Token t = eng.write(f, 0, buf.p, MiB, Priority::WriteBack, "layer9.w");
    eng.drain();
    std::string err = error_of(t);
    EXPECT_NE(err.find("write of 262144 bytes at offset "), std::string::npos)
        << err;
    EXPECT_NE(err.find("of '" + path + "' (tensor 'layer9.w') failed: "
                       "io_uring_submit_and_wait on I/O queue 0 failed 4 "
                       "times in a row (Bad file descriptor); the queue "
                       "serves '" + path + "' and has stopped"),
              std::string::npos)
        << err;
    // Later requests fail at once, with the same reason.
    err = error_of(eng.read(f, 0, buf.p, MiB, Priority::Demand, "again"));
    EXPECT_NE(err.find("I/O queue 0 failed 4 times in a row"),
              std::string::npos)
        << err;
    EXPECT_EQ(notes.count("I/O queue 0 failed 4 times in a row"), 1);
  }
  // A few failures in a row are ridden out.
  ScriptedFaults few("submit=eagain@2*3");
  cfg.faults = &few;
  IoEngine eng(cfg);
  FileId f = eng.open(path, true);
  HeapBuf back(MiB);
  fill_random(buf.p, MiB, 23);
  eng.write(f, 0, buf.p, MiB, Priority::WriteBack, "w").wait();
  eng.read(f, 0, back.p, MiB, Priority::Demand, "r").wait();
  EXPECT_EQ(memcmp(buf.p, back.p, MiB), 0);
  EXPECT_EQ(few.submit_result(), 0); // all three used up
  EXPECT_EQ(eng.stats().bytes_written, MiB);
}

TEST(EngineFallback, RefusedRingFallsBackToThreadsUnderAuto) {
  TempDir dir;
  ScriptedFaults faults("ring=eperm");
  Notices notes;
  EngineConfig cfg;
  cfg.faults = &faults;
  cfg.notice = notes.sink();
  IoEngine eng(cfg, 3);
  EXPECT_EQ(eng.backend(), Backend::Threads);
  EXPECT_EQ(eng.num_queues(), 3u);
  EXPECT_EQ(notes.count("io_uring is refused"), 1);
  EXPECT_EQ(notes.said.size(), 1u);
  FileId f = eng.open(dir.file("t.bin"), true, 2);
  HeapBuf w(MiB), r(MiB);
  fill_random(w.p, MiB, 8);
  eng.write(f, 0, w.p, MiB, Priority::WriteBack, "t").wait();
  eng.read(f, 0, r.p, MiB, Priority::Demand, "t").wait();
  EXPECT_EQ(memcmp(w.p, r.p, MiB), 0);
}

TEST(EngineFallback, RefusedRingIsAnErrorWhenIoUringIsRequired) {
  ScriptedFaults faults("ring=eperm");
  EngineConfig cfg;
  cfg.backend = Backend::Uring;
  cfg.faults = &faults;
  std::string err = thrown_by([&] { IoEngine eng(cfg); });
  EXPECT_NE(err.find("io_uring is refused"), std::string::npos) << err;
  EXPECT_NE(err.find("--io-backend threads"), std::string::npos) << err;
}

TEST(EngineFallback, FaultScriptFromTheEnvironment) {
  TempDir dir;
  setenv("SPILLWAY_IO_FAULTS", "eio@1", 1);
  std::string err;
  {
    IoEngine eng(EngineConfig{});
    unsetenv("SPILLWAY_IO_FAULTS");
    FileId f = eng.open(dir.file("env.bin"), true);
    HeapBuf b(4096);
    err = error_of(eng.write(f, 0, b.p, 4096, Priority::Demand, "envt"));
  }
  EXPECT_NE(err.find("Input/output error"), std::string::npos) << err;
  EXPECT_THROW(ScriptedFaults("eio@0"), spw::Error);
  EXPECT_THROW(ScriptedFaults("bogus@1"), spw::Error);
  EXPECT_THROW(ScriptedFaults("ring=enomem"), spw::Error);
  EXPECT_THROW(ScriptedFaults("short@2/sideways"), spw::Error);
  EXPECT_THROW(ScriptedFaults("direct=eio"), spw::Error);
  EXPECT_THROW(ScriptedFaults("submit=eperm"), spw::Error);
  EXPECT_THROW(ScriptedFaults("submit=eio*0"), spw::Error);
  EXPECT_THROW(ScriptedFaults("submit=eio*x"), spw::Error);
  EXPECT_THROW(ScriptedFaults("submit=eio@0"), spw::Error);
  EXPECT_THROW(ScriptedFaults("register=enomem@2"), spw::Error);
  EXPECT_NO_THROW(ScriptedFaults("submit=ebusy@3*2"));
}

TEST(EngineFallback, TmpfsWorksDirectOrBuffered) {
  if (!fs::is_directory("/dev/shm"))
    GTEST_SKIP() << "no /dev/shm";
  std::string path = "/dev/shm/spw-eng-test-" + std::to_string(getpid());
  Notices notes;
  EngineConfig cfg;
  cfg.notice = notes.sink();
  {
    IoEngine eng(cfg);
    FileId f = eng.open(path, true);
    // Either tmpfs takes O_DIRECT (Linux >= 6.6) or the engine said it
    // falls back to buffered I/O.
    EXPECT_EQ(eng.file(f).direct, notes.count("O_DIRECT") == 0);
    HeapBuf w(MiB), r(MiB);
    fill_random(w.p, MiB, 2);
    eng.write(f, 4096, w.p, MiB, Priority::WriteBack, "t").wait();
    eng.read(f, 4096, r.p, MiB, Priority::Demand, "t").wait();
    EXPECT_EQ(memcmp(w.p, r.p, MiB), 0);
  }
  unlink(path.c_str());
}

// A file system that refuses O_DIRECT (open: EINVAL) gets buffered I/O, said
// once per file system; buffered files take any offset and length.
TEST(EngineFallback, RefusedDirectIoUsesBufferedIo) {
  TempDir dir;
  ScriptedFaults faults("direct=einval");
  Notices notes;
  EngineConfig cfg;
  cfg.faults = &faults;
  cfg.notice = notes.sink();
  IoEngine eng(cfg);
  FileId f = eng.open(dir.file("b1.bin"), true);
  FileId g = eng.open(dir.file("b2.bin"), true);
  EXPECT_FALSE(eng.file(f).direct);
  EXPECT_EQ(eng.file(f).align, 1u);
  EXPECT_EQ(notes.count("refuses O_DIRECT; using buffered I/O"), 1);
  std::vector<char> w(300000), r(300000);
  fill_random(w.data(), w.size(), 13);
  eng.write(g, 77, w.data() + 3, w.size() - 3, Priority::Demand, "t").wait();
  eng.read(g, 77, r.data() + 3, r.size() - 3, Priority::Demand, "t").wait();
  EXPECT_EQ(memcmp(w.data() + 3, r.data() + 3, w.size() - 3), 0);
  // And a swap space there works too.
  HeapBuf a(MiB), b(MiB);
  fill_random(a.p, MiB, 17);
  SwapSpace swap(eng, {dir.path()}, 3 * MiB);
  swap.write(2 * MiB, a.p, MiB, Priority::WriteBack, "s").wait();
  swap.read(2 * MiB, b.p, MiB, Priority::Demand, "s").wait();
  EXPECT_EQ(memcmp(a.p, b.p, MiB), 0);
  EXPECT_EQ(notes.said.size(), 1u);
}

TEST(EngineValidation, MisalignedRequestsAreRefusedUpFront) {
  TempDir dir;
  IoEngine eng(EngineConfig{});
  std::string path = dir.file("m.bin");
  FileId f = eng.open(path, true);
  if (!eng.file(f).direct)
    GTEST_SKIP() << "no O_DIRECT on " << dir.path();
  EXPECT_GE(eng.file(f).align, 4096u);
  HeapBuf b(MiB);
  for (auto [off, bufoff, len] : {std::tuple<uint64_t, size_t, uint64_t>{100, 0, 4096},
                                  {0, 512, 4096},
                                  {0, 0, 1000}}) {
    std::string err = thrown_by(
        [&] { eng.write(f, off, b.p + bufoff, len, Priority::Demand, "emb"); });
    EXPECT_NE(err.find("'" + path + "'"), std::string::npos) << err;
    EXPECT_NE(err.find("tensor 'emb'"), std::string::npos) << err;
  }
  EXPECT_EQ(eng.stats().requests, 0u);
  EXPECT_THROW(eng.read(f + 7, 0, b.p, 4096, Priority::Demand, "x"), spw::Error);
  EngineConfig bad;
  bad.request_bytes = 1000;
  EXPECT_THROW(IoEngine e(bad), spw::Error);
  bad.request_bytes = MiB;
  bad.queue_depth = 0;
  EXPECT_THROW(IoEngine e(bad), spw::Error);
}

// ---- pool and helpers ---------------------------------------------------------

TEST(PinnedPoolTest, FirstFitAlignedAndCoalescing) {
  PinnedPool pool(1 * MiB);
  EXPECT_EQ(pool.size(), MiB);
  void *a = pool.allocate(4096);
  void *b = pool.allocate(64 * KiB, 64 * KiB);
  void *c = pool.allocate(5000);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % (64 * KiB), 0u);
  EXPECT_TRUE(pool.contains(c, 8192));
  EXPECT_EQ(pool.bytes_in_use(), 4096 + 64 * KiB + 8192);
  EXPECT_EQ(pool.allocate(2 * MiB), nullptr);
  pool.free(b);
  pool.free(a);
  pool.free(c);
  EXPECT_EQ(pool.bytes_in_use(), 0u);
  // Everything coalesced back into one range.
  void *all = pool.allocate(MiB);
  EXPECT_EQ(all, pool.base());
  pool.free(all);
  EXPECT_THROW(pool.free(pool.base() + 4096), spw::Error);
  EXPECT_THROW(pool.allocate(4096, 3000), spw::Error);
}

// Populating the pool: EINVAL (MADV_POPULATE_WRITE unknown) touches every
// page; ENOMEM and other errors throw instead of touching pages that are not
// there (which would only wake the OOM killer).
int advise_einval(void *, size_t, int) { return errno = EINVAL, -1; }
int advise_enomem(void *, size_t, int) { return errno = ENOMEM, -1; }
int advise_efault(void *, size_t, int) { return errno = EFAULT, -1; }

TEST(PinnedPoolTest, PopulateFallsBackOnlyWhenUnsupported) {
  HeapBuf b(64 * KiB);
  memset(b.p, 0x5A, 64 * KiB);
  detail::populate_pool(b.p, 64 * KiB, advise_einval);
  size_t page = size_t(sysconf(_SC_PAGESIZE));
  for (size_t off = 0; off < 64 * KiB; off += page)
    EXPECT_EQ(b.p[off], 0) << off; // touched
  EXPECT_EQ(b.p[1], 0x5A);
  memset(b.p, 0x5A, 64 * KiB);
  std::string err =
      thrown_by([&] { detail::populate_pool(b.p, 64 * KiB, advise_enomem); });
  EXPECT_NE(err.find("cannot populate a pinned staging pool of 64 KiB: out of "
                     "memory; lower"),
            std::string::npos)
      << err;
  EXPECT_EQ(b.p[0], 0x5A); // not touched
  err = thrown_by([&] { detail::populate_pool(b.p, 64 * KiB, advise_efault); });
  EXPECT_NE(err.find("Bad address"), std::string::npos) << err;
  EXPECT_EQ(b.p[0], 0x5A);
  // The real thing.
  PinnedPool pool(4 * MiB);
  EXPECT_EQ(pool.size(), 4 * MiB);
}

TEST(StorageHelpers, SizesAndBackends) {
  EXPECT_EQ(parse_size("4096", "--x"), 4096u);
  EXPECT_EQ(parse_size("4G", "--x"), 4ull << 30);
  EXPECT_EQ(parse_size("512M", "--x"), 512ull << 20);
  EXPECT_EQ(parse_size("1MiB", "--x"), 1ull << 20);
  EXPECT_EQ(parse_size("1.5GiB", "--x"), 3ull << 29);
  EXPECT_EQ(parse_size("64k", "--x"), 64ull << 10);
  for (const char *bad : {"", "G", "1.2.3", "12X", "-4", "1.3B", "4 G"}) {
    std::string err = thrown_by([&] { parse_size(bad, "--swap-size"); });
    EXPECT_NE(err.find("--swap-size"), std::string::npos) << bad;
  }
  EXPECT_EQ(human_bytes(17), "17 B");
  EXPECT_EQ(human_bytes(4096), "4 KiB");
  EXPECT_EQ(human_bytes(512ull << 20), "512 MiB");
  EXPECT_EQ(human_bytes(3ull << 29), "1.5 GiB");
  EXPECT_EQ(parse_backend("uring"), Backend::Uring);
  EXPECT_EQ(parse_backend("io_uring"), Backend::Uring);
  EXPECT_EQ(parse_backend("threads"), Backend::Threads);
  EXPECT_EQ(parse_backend("auto"), Backend::Auto);
  EXPECT_THROW(parse_backend("aio"), spw::Error);
  EXPECT_STREQ(backend_name(Backend::Uring), "io_uring");
}

TEST(CompletionTest, FirstErrorWinsAndWaitThrows) {
  auto c = std::make_shared<Completion>(2);
  Token t(c);
  EXPECT_FALSE(t.done());
  c->add_pieces(1);
  c->piece_done("first");
  c->piece_done("second");
  EXPECT_FALSE(t.done());
  std::thread th([&] { c->piece_done(); });
  EXPECT_THROW(t.wait(), spw::Error);
  th.join();
  EXPECT_EQ(t.error(), "first");
  Token empty;
  EXPECT_TRUE(empty.done());
  empty.wait();
}

} // namespace
