//===- hw_probe.cpp - measure this machine for the cost model --------------===//
//
// Each measurement runs the code path the CPU backend uses, long enough
// (ProbeOptions::min_seconds, after one untimed warm-up) to be stable:
//  - memcpy: one thread copying between two buffers larger than the caches
//    (the CPU backend's "host <-> GPU" copies are such memcpys);
//  - matmul: spw_op_matmul on square f32 matrices (2 n^3 FLOP per call);
//  - AdamW: spw_adamw on one f32 parameter (gradient recorded, then updated);
//  - SSD: a SwapSpace in each directory, written then read sequentially in
//    1 MiB requests 32 deep (the engine's defaults), then half of it read
//    while the other half is written, timed until both finish.
//
//===----------------------------------------------------------------------===//

#include "spillway/runtime/hw_probe.h"

#include "context.h"
#include "storage/io_engine.h"

#include <chrono>
#include <cstring>
#include <deque>
#include <unistd.h>

using namespace spw;
using namespace spw::storage;
using spw::probe::SSDMeasurement;
using spw::probe::HostMeasurement;
using Clock = std::chrono::steady_clock;

namespace {
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// Runs `body` once untimed, then until `min_seconds` have passed; returns
/// (calls, seconds).
template <class F>
std::pair<uint64_t, double> repeat_for(double min_seconds, F &&body) {
  body();
  uint64_t calls = 0;
  auto t0 = Clock::now();
  double secs = 0;
  do {
    body();
    ++calls;
    secs = since(t0);
  } while (secs < min_seconds);
  return {calls, secs};
}

double measure_memcpy(uint64_t bytes, double min_seconds) {
  Buffer a = alloc_buffer(int64_t(bytes)), b = alloc_buffer(int64_t(bytes));
  std::memset(a.get(), 1, bytes);
  std::memset(b.get(), 2, bytes);
  auto [calls, secs] = repeat_for(min_seconds, [&] {
    std::memcpy(b.get(), a.get(), bytes);
    asm volatile("" ::: "memory"); // the copy is not dead
  });
  return double(bytes) * double(calls) / secs / 1e9;
}

double measure_matmul(unsigned n, double min_seconds) {
  std::unique_ptr<spw_ctx> ctx = make_context();
  int64_t dims[2] = {n, n};
  auto a = make_tensor(SPW_F32, 2, dims, "a");
  auto b = make_tensor(SPW_F32, 2, dims, "b");
  auto y = make_tensor(SPW_F32, 2, dims, "y");
  for (int64_t i = 0; i < a->numel; ++i) {
    a->as<float>()[i] = float(i % 7) * 0.25f;
    b->as<float>()[i] = float(i % 5) * 0.5f;
  }
  spw_tensor *ins[2] = {a.get(), b.get()}, *outs[1] = {y.get()};
  auto [calls, secs] = repeat_for(min_seconds, [&] {
    spw_op_matmul(ctx.get(), ins, outs, nullptr, nullptr);
  });
  if (ctx->failed())
    fail("matmul: %s", ctx->error.c_str());
  return 2.0 * double(n) * n * n * double(calls) / secs / 1e9;
}

double measure_adamw(uint64_t n, double min_seconds) {
  std::unique_ptr<spw_ctx> ctx = make_context();
  int64_t dims[1] = {int64_t(n)};
  spw_declare_weights(ctx.get(), int64_t(n) * 4);
  int32_t p = spw_declare_param(ctx.get(), "probe", SPW_F32, 1, dims, 0);
  auto g = make_tensor(SPW_F32, 1, dims, "grad");
  for (uint64_t i = 0; i < n; ++i)
    g->as<float>()[i] = float(i % 11) * 1e-3f;
  ctx->step = 1;
  auto [calls, secs] = repeat_for(min_seconds, [&] {
    spw_adamw(ctx.get(), p, g.get(), 1e-3, 0.9, 0.999, 1e-8, 0.01);
  });
  if (ctx->failed())
    fail("AdamW: %s", ctx->error.c_str());
  return double(n) * double(calls) / secs;
}

/// Sequential requests over [next, end) of the swap space, one per buffer in
/// flight; returns when all have completed. Reads and writes go at the same
/// priority so that, run together, neither waits behind the other.
struct Stream {
  Stream(IoOp op, uint64_t next, uint64_t end, std::vector<char *> bufs)
      : op(op), next(next), end(end), bufs(std::move(bufs)) {}
  IoOp op;
  uint64_t next, end;
  std::vector<char *> bufs;
  std::deque<std::pair<Token, size_t>> inflight;
  size_t used = 0;
};

double run_streams(SwapSpace &swap, std::vector<Stream> streams,
                   uint64_t request) {
  auto t0 = Clock::now();
  bool busy = true;
  while (busy) {
    busy = false;
    for (Stream &s : streams) {
      // Fill up to the stream's buffers, then retire the oldest.
      while (s.next < s.end && s.inflight.size() < s.bufs.size()) {
        size_t slot = s.used++ % s.bufs.size();
        uint64_t len = std::min(request, s.end - s.next);
        Token t = s.op == IoOp::Read
                      ? swap.read(s.next, s.bufs[slot], len, Priority::Prefetch,
                                  "probe read")
                      : swap.write(s.next, s.bufs[slot], len,
                                   Priority::Prefetch, "probe write");
        s.inflight.emplace_back(std::move(t), slot);
        s.next += len;
      }
      if (!s.inflight.empty()) {
        s.inflight.front().first.wait(); // throws the engine's error
        s.inflight.pop_front();
      }
      busy = busy || s.next < s.end || !s.inflight.empty();
    }
  }
  return since(t0);
}

SSDMeasurement measure_ssd(const std::string &dir, uint64_t bytes,
                           const std::function<void(const std::string &)> &say) {
  const uint64_t request = uint64_t(1) << 20;
  const unsigned depth = 32;
  bytes = std::max<uint64_t>(bytes / request, 2) * request;
  PinnedPool pool(2 * depth * request);
  EngineConfig cfg;
  cfg.pool = &pool;
  cfg.request_bytes = request;
  cfg.queue_depth = depth;
  cfg.notice = say;
  IoEngine engine(cfg, 1);
  SwapSpace swap(engine, {dir}, bytes);
  std::vector<char *> bufs;
  for (unsigned i = 0; i < 2 * depth; ++i) {
    auto *b = static_cast<char *>(pool.allocate(request, 4096));
    std::memset(b, int(i), request);
    bufs.push_back(b);
  }
  std::vector<char *> first(bufs.begin(), bufs.begin() + depth),
      second(bufs.begin() + depth, bufs.end());
  SSDMeasurement m;
  m.dir = dir;
  m.bytes = bytes;
  m.backend = backend_name(engine.backend());
  m.direct = engine.file(0).direct;
  say(format("SSD %s: writing %s sequentially (%s, %s)", dir.c_str(),
             human_bytes(bytes).c_str(), m.backend.c_str(),
             m.direct ? "O_DIRECT" : "buffered: the page cache is involved"));
  m.write_gbps =
      double(bytes) /
      run_streams(swap, {Stream{IoOp::Write, 0, bytes, first}}, request) / 1e9;
  say(format("SSD %s: reading it back", dir.c_str()));
  m.read_gbps =
      double(bytes) /
      run_streams(swap, {Stream{IoOp::Read, 0, bytes, first}}, request) / 1e9;
  say(format("SSD %s: reading one half while writing the other", dir.c_str()));
  uint64_t half = bytes / 2 / request * request;
  m.combined_gbps =
      double(bytes) /
      run_streams(swap,
                  {Stream{IoOp::Read, 0, half, first},
                   Stream{IoOp::Write, half, bytes, second}},
                  request) /
      1e9;
  engine.drain();
  return m;
}
} // namespace

bool spw::probe::probe_host(const ProbeOptions &o, HostMeasurement &out,
                            std::string &error) {
  auto say = [&](const std::string &s) {
    if (o.progress)
      o.progress(s);
  };
  try {
    out = HostMeasurement{};
    out.memory_bytes =
        uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGESIZE));
    out.cores = unsigned(sysconf(_SC_NPROCESSORS_ONLN));
    say(format("memcpy of %s buffers (one thread)",
               storage::human_bytes(o.memcpy_bytes).c_str()));
    out.memcpy_gbps = measure_memcpy(o.memcpy_bytes, o.min_seconds);
    say(format("  %.2f GB/s copied", out.memcpy_gbps));
    say(format("CPU backend matmul, f32 %ux%u", o.matmul_size, o.matmul_size));
    out.matmul_size = o.matmul_size;
    out.matmul_gflops = measure_matmul(o.matmul_size, o.min_seconds);
    say(format("  %.3f GFLOP/s", out.matmul_gflops));
    say(format("CPU backend AdamW, %llu parameters",
               (unsigned long long)o.adamw_params));
    out.adamw_params_per_s = measure_adamw(o.adamw_params, o.min_seconds);
    say(format("  %.3g params/s", out.adamw_params_per_s));
    for (const std::string &dir : o.ssd_dirs) {
      out.ssds.push_back(measure_ssd(dir, o.ssd_bytes, say));
      const SSDMeasurement &m = out.ssds.back();
      say(format("  read %.3f GB/s, write %.3f GB/s, both at once %.3f GB/s",
                 m.read_gbps, m.write_gbps, m.combined_gbps));
    }
    return true;
  } catch (const std::exception &e) {
    error = e.what();
    return false;
  }
}
