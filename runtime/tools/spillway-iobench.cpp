//===- spillway-iobench.cpp - sequential SSD bandwidth through the engine --===//
//
// Writes then reads one sequential range through Spillway's IoEngine (the
// same code path the tensor store's SSD moves take) and prints one JSON
// object per measurement on stdout; progress goes to stderr.
//
// What is timed: submitting every request and waiting for the last
// completion. Not timed: preallocating the file, filling the buffers with
// the pattern, the fsync after a write pass, and verification. The data is
// a verifiable pattern (every 4 KiB block carries its own file offset at
// both ends); after the timed read passes one untimed read pass checks every
// byte. Files are opened O_DIRECT, so the page cache plays no part; where
// the file system refuses O_DIRECT (tmpfs) the engine falls back to
// buffered I/O, says so, and the JSON says "direct": false.
//
//===----------------------------------------------------------------------===//
#include "storage/io_engine.h"

#include <cerrno>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <memory>
#include <string>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <vector>

using namespace spw::storage;
using spw::fail;

namespace {

const char *kUsage = R"(usage: spillway-iobench (--path FILE | --ssd DIR[,DIR...]) [options]

Measures sequential write and read bandwidth through Spillway's I/O engine
(io_uring, O_DIRECT, registered buffers from a pinned pool) and prints one
JSON object per measurement on stdout:
  {"op":"write","bytes":...,"seconds":...,"gbps":...,"request_bytes":...,
   "queue_depth":...,"backend":"io_uring","registered":true,"direct":true,
   "files":[...],"repeat":1}
gbps is 10^9 bytes per second. Progress and notices go to stderr.

  --path FILE          a file (created and preallocated when too short; kept)
  --ssd DIR[,DIR...]   a swap space striped over one temporary file per
                       directory, each with its own queue (files are unlinked
                       at once: nothing is left behind)
  --size SIZE          bytes to write and read (default 2G; a multiple of 4K)
  --request SIZE       largest request handed to the kernel (default 1M;
                       a multiple of 4K, at most 1G)
  --depth N            requests in flight per queue (default 32; 1 to 4096)
  --op write|read|both default both; 'read' needs a --path FILE written
                       before (by --op write or both with the same --size)
  --backend auto|io_uring|threads   default auto (io_uring, falling back to
                       a pread/pwrite thread pool where it is refused)
  --buffer-pool SIZE   pinned staging memory; requests cycle through it
                       (default 2 x depth x request x queues; at least one
                       request, at most half the physical memory)
  --no-register        do not register the pool with the rings (plain
                       read/write instead of read_fixed/write_fixed)
  --repeat N           measure each op N times (default 1)
  --no-verify          skip the untimed verification read
  -h, --help           this text

SIZE: 4096, 512K, 1M, 1MiB, 2G, 1.5GiB (binary units).
Example: spillway-iobench --path /mnt/nvme/iob.bin --size 4G --request 1M --depth 32
)";

[[noreturn]] void usage_error(const std::string &msg) {
  std::fprintf(stderr, "spillway-iobench: %s\n(see --help)\n", msg.c_str());
  std::exit(2);
}

struct Options {
  std::string path;
  std::vector<std::string> dirs;
  uint64_t size = uint64_t(2) << 30;
  uint64_t request = 1 << 20;
  unsigned depth = 32;
  bool do_write = true, do_read = true;
  Backend backend = Backend::Auto;
  uint64_t pool = 0;
  bool reg = true, verify = true;
  unsigned repeat = 1;
};

unsigned parse_count(const std::string &s, const char *flag) {
  char *end = nullptr;
  errno = 0;
  long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end || errno || v < 1 || v > 1 << 20)
    usage_error(spw::format("%s: expected a positive integer, got '%s'", flag,
                            s.c_str()));
  return unsigned(v);
}

Options parse_args(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      size_t eq = a.find('=');
      if (eq != std::string::npos)
        return a.substr(eq + 1);
      if (i + 1 >= argc)
        usage_error(a + " needs a value");
      return argv[++i];
    };
    std::string flag = a.substr(0, a.find('='));
    try {
      if (a == "-h" || a == "--help") {
        std::fputs(kUsage, stdout);
        std::exit(0);
      } else if (flag == "--path") {
        o.path = value();
      } else if (flag == "--ssd") {
        std::string v = value();
        size_t start = 0;
        while (start <= v.size()) {
          size_t comma = v.find(',', start);
          std::string d = v.substr(start, comma - start);
          if (d.empty())
            usage_error("--ssd: empty directory name in '" + v + "'");
          o.dirs.push_back(d);
          if (comma == std::string::npos)
            break;
          start = comma + 1;
        }
      } else if (flag == "--size") {
        o.size = parse_size(value(), "--size");
      } else if (flag == "--request") {
        o.request = parse_size(value(), "--request");
      } else if (flag == "--depth") {
        o.depth = parse_count(value(), "--depth");
      } else if (flag == "--op") {
        std::string v = value();
        if (v == "write")
          o.do_read = false;
        else if (v == "read")
          o.do_write = false;
        else if (v != "both")
          usage_error("--op: expected write, read or both, got '" + v + "'");
      } else if (flag == "--backend") {
        o.backend = parse_backend(value());
      } else if (flag == "--buffer-pool") {
        o.pool = parse_size(value(), "--buffer-pool");
      } else if (a == "--no-register") {
        o.reg = false;
      } else if (a == "--no-verify") {
        o.verify = false;
      } else if (flag == "--repeat") {
        o.repeat = parse_count(value(), "--repeat");
      } else {
        usage_error("unknown argument '" + a + "'");
      }
    } catch (const spw::Error &e) {
      usage_error(e.what());
    }
  }
  if (o.path.empty() == o.dirs.empty())
    usage_error("give exactly one of --path FILE and --ssd DIR[,DIR...]");
  if (o.size == 0 || o.size % 4096)
    usage_error("--size must be a positive multiple of 4 KiB, got " +
                std::to_string(o.size));
  if (o.request == 0 || o.request % 4096 || o.request > kMaxRegisteredPiece)
    usage_error("--request must be a multiple of 4 KiB between 4 KiB and "
                "1 GiB, got " +
                human_bytes(o.request));
  if (o.depth > 4096)
    usage_error("--depth must be between 1 and 4096, got " +
                std::to_string(o.depth));
  // The pool is populated (and locked) up front, so check it against the
  // machine before allocating anything.
  unsigned queues = o.dirs.empty() ? 1 : unsigned(o.dirs.size());
  bool default_pool = o.pool == 0;
  if (default_pool)
    o.pool = uint64_t(2) * o.depth * o.request * queues;
  if (o.pool < o.request)
    usage_error("--buffer-pool " + human_bytes(o.pool) +
                " is smaller than one --request of " + human_bytes(o.request));
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) {
    uint64_t phys = uint64_t(pages) * uint64_t(page);
    if (o.pool > phys / 2)
      usage_error(
          (default_pool ? "the default buffer pool (2 x --depth x --request x "
                          "queues) of "
                        : "--buffer-pool ") +
          human_bytes(o.pool) + " is more than half of this machine's " +
          human_bytes(phys) + " of physical memory; lower " +
          (default_pool ? "--depth or --request, or give a smaller "
                          "--buffer-pool"
                        : "--buffer-pool"));
  }
  return o;
}

// ---- the pattern ------------------------------------------------------------------
// Every 4 KiB block at file offset `o` holds o^kTag in its first word,
// ~o^kTag in its last, and a fixed pseudo-random body: a block that lands at
// the wrong offset, a torn block, or a buffer the read never filled is seen.
constexpr uint64_t kBlock = 4096, kWords = kBlock / 8;
constexpr uint64_t kTag = 0x5350494c4c574159ull; // "SPILLWAY"

uint64_t body_word(uint64_t i) {
  uint64_t x = i * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  return x ^ (x >> 31);
}

void fill_body(char *buf, uint64_t len) {
  auto *w = reinterpret_cast<uint64_t *>(buf);
  for (uint64_t i = 0; i < len / 8; ++i)
    w[i] = body_word(i % kWords);
}

void stamp(char *buf, uint64_t len, uint64_t file_off) {
  for (uint64_t b = 0; b < len; b += kBlock) {
    auto *w = reinterpret_cast<uint64_t *>(buf + b);
    w[0] = (file_off + b) ^ kTag;
    w[kWords - 1] = ~(file_off + b) ^ kTag;
  }
}

void verify(const char *buf, uint64_t len, uint64_t file_off) {
  for (uint64_t b = 0; b < len; b += kBlock) {
    auto *w = reinterpret_cast<const uint64_t *>(buf + b);
    uint64_t o = file_off + b;
    if (w[0] != (o ^ kTag) || w[kWords - 1] != (~o ^ kTag)) {
      uint64_t got = w[0] ^ kTag;
      fail("verification failed: the 4 KiB block at offset %llu holds %s",
           (unsigned long long)o,
           got % kBlock == 0 && got < (uint64_t(1) << 50)
               ? spw::format("the block written at offset %llu",
                             (unsigned long long)got)
                     .c_str()
               : "data spillway-iobench did not write (was the file "
                 "written by spillway-iobench --op write?)");
    }
    for (uint64_t i = 1; i + 1 < kWords; ++i)
      if (w[i] != body_word(i))
        fail("verification failed: byte %llu of the block at offset %llu "
             "differs from what was written",
             (unsigned long long)(i * 8), (unsigned long long)o);
  }
}

// ---- targets ----------------------------------------------------------------------

struct Target {
  virtual ~Target() = default;
  virtual Token io(IoOp op, uint64_t off, char *buf, uint64_t len) = 0;
  virtual void sync() {}
  virtual bool direct() const = 0;
  virtual std::vector<std::string> files() const = 0;
};

uint64_t free_bytes(const std::string &dir) {
  struct statvfs vfs;
  if (statvfs(dir.c_str(), &vfs) != 0)
    fail("cannot stat the file system of '%s': %s", dir.c_str(),
         std::strerror(errno));
  return uint64_t(vfs.f_bavail) * vfs.f_frsize;
}

struct FileTarget : Target {
  IoEngine &engine;
  FileId id;
  std::string path;

  FileTarget(IoEngine &e, const std::string &p, uint64_t size, bool writing)
      : engine(e), path(p) {
    std::string dir = p.find('/') == std::string::npos
                          ? std::string(".")
                          : p.substr(0, p.rfind('/') + 1);
    struct stat st;
    if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      fail("--path %s: directory '%s' does not exist", p.c_str(), dir.c_str());
    bool exists = stat(p.c_str(), &st) == 0;
    if (exists && S_ISDIR(st.st_mode))
      fail("--path %s is a directory (use --ssd DIR for directories)",
           p.c_str());
    if (exists && !S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode))
      fail("--path %s is not a regular file", p.c_str());
    // A block device's size is not in st_size; the kernel bounds its I/O.
    uint64_t have = !exists ? 0 : S_ISBLK(st.st_mode) ? UINT64_MAX
                                                      : uint64_t(st.st_size);
    if (!writing && have < size)
      fail("--path %s holds %s but --op read needs %s: write it first "
           "(--op write or both, same --size)",
           p.c_str(), human_bytes(have).c_str(), human_bytes(size).c_str());
    if (writing && exists && S_ISREG(st.st_mode)) {
      uint64_t allocated = uint64_t(st.st_blocks) * 512;
      uint64_t need = size > allocated ? size - allocated : 0;
      uint64_t avail = free_bytes(dir);
      if (need > avail)
        fail("not enough space in '%s' for --path %s: needs %s more, %s free",
             dir.c_str(), p.c_str(), human_bytes(need).c_str(),
             human_bytes(avail).c_str());
    } else if (writing && !exists) {
      uint64_t avail = free_bytes(dir);
      if (size > avail)
        fail("not enough space in '%s' for --path %s: needs %s, %s free",
             dir.c_str(), p.c_str(), human_bytes(size).c_str(),
             human_bytes(avail).c_str());
    }
    id = engine.open(p, writing, 0);
    const FileInfo &f = engine.file(id);
    if (size % f.align)
      fail("--size %llu is not a multiple of %s's O_DIRECT alignment %zu",
           (unsigned long long)size, p.c_str(), f.align);
    // Preallocate, as a swap file is: the timed writes then never wait on
    // block allocation (fio lays out its file before timing too).
    bool regular = !exists || S_ISREG(st.st_mode);
    if (writing && have < size && regular)
      if (int r = posix_fallocate(f.fd, 0, off_t(size)); r != 0)
        fail("cannot preallocate %s of %s: %s", human_bytes(size).c_str(),
             p.c_str(), std::strerror(r));
  }
  ~FileTarget() override { engine.close(id, false); }
  Token io(IoOp op, uint64_t off, char *buf, uint64_t len) override {
    return engine.submit(op, {{id, off, buf, len}},
                         op == IoOp::Read ? Priority::Demand
                                          : Priority::WriteBack,
                         "iobench");
  }
  void sync() override {
    if (fsync(engine.file(id).fd) != 0)
      fail("fsync %s: %s", path.c_str(), std::strerror(errno));
  }
  bool direct() const override { return engine.file(id).direct; }
  std::vector<std::string> files() const override { return {path}; }
};

struct SwapTarget : Target {
  SwapSpace swap;
  bool direct_ = true;
  SwapTarget(IoEngine &e, const std::vector<std::string> &dirs, uint64_t size)
      : swap(e, dirs, size) {
    for (const Segment &s : swap.map(0, nullptr, std::min(swap.size(), size)))
      direct_ = direct_ && e.file(s.file).direct;
  }
  Token io(IoOp op, uint64_t off, char *buf, uint64_t len) override {
    return op == IoOp::Read
               ? swap.read(off, buf, len, Priority::Demand, "iobench")
               : swap.write(off, buf, len, Priority::WriteBack, "iobench");
  }
  bool direct() const override { return direct_; }
  std::vector<std::string> files() const override { return swap.paths(); }
};

// ---- one pass ---------------------------------------------------------------------

struct Slots {
  std::vector<char *> bufs;
  uint64_t request;
};

// Runs one sequential pass over [0, size) keeping every slot in flight;
// returns the seconds from the first submission to the last completion.
// `check` verifies each completed read (untimed passes only).
double run_pass(Target &t, IoOp op, uint64_t size, Slots &slots, bool check) {
  struct InFlight {
    Token tok;
    size_t slot;
    uint64_t off, len;
  };
  std::deque<InFlight> inflight;
  size_t n = slots.bufs.size();
  auto retire = [&]() {
    InFlight f = std::move(inflight.front());
    inflight.pop_front();
    f.tok.wait(); // throws the engine's error
    if (check)
      verify(slots.bufs[f.slot], f.len, f.off);
  };
  auto t0 = std::chrono::steady_clock::now();
  uint64_t k = 0;
  for (uint64_t off = 0; off < size; off += slots.request, ++k) {
    if (inflight.size() == n)
      retire();
    size_t slot = size_t(k % n);
    uint64_t len = std::min(slots.request, size - off);
    char *buf = slots.bufs[slot];
    if (op == IoOp::Write)
      stamp(buf, len, off); // two words per 4 KiB block
    inflight.push_back({t.io(op, off, buf, len), slot, off, len});
  }
  while (!inflight.empty())
    retire();
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count();
}

std::string json_str(const std::string &s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      r += '\\';
    if ((unsigned char)c < 0x20)
      r += spw::format("\\u%04x", c);
    else
      r += c;
  }
  return r + "\"";
}

int run(const Options &o) {
  unsigned queues = o.dirs.empty() ? 1 : unsigned(o.dirs.size());
  uint64_t pool_bytes = o.pool; // validated by parse_args
  PinnedPool pool(pool_bytes);
  if (!pool.locked())
    std::fprintf(stderr,
                 "spillway-iobench: the buffer pool could not be locked in "
                 "memory (ulimit -l); continuing\n");

  EngineConfig cfg;
  cfg.backend = o.backend;
  cfg.request_bytes = o.request;
  cfg.queue_depth = o.depth;
  cfg.register_buffers = o.reg;
  cfg.pool = &pool;
  IoEngine engine(cfg, queues);

  std::unique_ptr<Target> target;
  if (!o.path.empty())
    target = std::make_unique<FileTarget>(engine, o.path, o.size, o.do_write);
  else
    target = std::make_unique<SwapTarget>(engine, o.dirs, o.size);

  Slots slots{{}, o.request};
  size_t n = size_t(pool_bytes / o.request);
  for (size_t i = 0; i < n; ++i) {
    auto *b = static_cast<char *>(pool.allocate(o.request, 4096));
    if (!b)
      break;
    fill_body(b, o.request);
    slots.bufs.push_back(b);
  }
  if (slots.bufs.empty())
    fail("the buffer pool has no room for one request");

  std::string files = "[";
  for (const std::string &f : target->files())
    files += (files.size() > 1 ? "," : "") + json_str(f);
  files += "]";
  std::fprintf(stderr,
               "spillway-iobench: %s over %s (%s, %s buffers, %s), request "
               "%s, depth %u, %zu buffers in flight\n",
               human_bytes(o.size).c_str(), files.c_str(),
               backend_name(engine.backend()),
               engine.buffers_registered() ? "registered" : "unregistered",
               target->direct() ? "O_DIRECT: no page cache"
                                : "BUFFERED: the page cache is involved",
               human_bytes(o.request).c_str(), o.depth, slots.bufs.size());

  auto report = [&](const char *op, double secs, unsigned rep) {
    double gbps = double(o.size) / secs / 1e9;
    std::printf("{\"op\":\"%s\",\"bytes\":%llu,\"seconds\":%.6f,\"gbps\":%.4f,"
                "\"request_bytes\":%llu,\"queue_depth\":%u,\"backend\":\"%s\","
                "\"registered\":%s,\"direct\":%s,\"files\":%s,"
                "\"buffer_pool_bytes\":%llu,\"repeat\":%u}\n",
                op, (unsigned long long)o.size, secs, gbps,
                (unsigned long long)o.request, o.depth,
                backend_name(engine.backend()),
                engine.buffers_registered() ? "true" : "false",
                target->direct() ? "true" : "false", files.c_str(),
                (unsigned long long)pool_bytes, rep);
    std::fflush(stdout);
    std::fprintf(stderr, "spillway-iobench: %-5s %s in %.3f s: %.3f GB/s\n", op,
                 human_bytes(o.size).c_str(), secs, gbps);
  };

  bool written = false;
  if (o.do_write) {
    for (unsigned r = 1; r <= o.repeat; ++r) {
      double secs = run_pass(*target, IoOp::Write, o.size, slots, false);
      target->sync(); // untimed: O_DIRECT data is already on the device
      report("write", secs, r);
    }
    written = true;
  } else if (!o.dirs.empty()) {
    std::fprintf(stderr, "spillway-iobench: writing the swap space first "
                         "(untimed)\n");
    run_pass(*target, IoOp::Write, o.size, slots, false);
    written = true;
  }
  if (o.do_read) {
    for (unsigned r = 1; r <= o.repeat; ++r)
      report("read", run_pass(*target, IoOp::Read, o.size, slots, false), r);
  }
  if (o.verify && (o.do_read || written)) {
    std::fprintf(stderr, "spillway-iobench: verifying (untimed read)...\n");
    run_pass(*target, IoOp::Read, o.size, slots, true);
    std::fprintf(stderr, "spillway-iobench: verified %s\n",
                 human_bytes(o.size).c_str());
  }
  target.reset();
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  Options o = parse_args(argc, argv);
  try {
    return run(o);
  } catch (const spw::Error &e) {
    std::fprintf(stderr, "spillway-iobench: error: %s\n", e.what());
    return 1;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "spillway-iobench: error: %s\n", e.what());
    return 1;
  }
}
