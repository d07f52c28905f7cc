//===- tier_memory_check.cpp - a device's GPU tier against its contract ---===//
//
// spillway-tier-memory-check: the copy contract of storage::DeviceMemory
// (docs/storage.md, "DeviceMemory") on the memory a device makes for an
// offload plan (Device::make_tier_memory), with the plan's staging pool
// registered (Device::register_host_memory), through the device's own
// compute work (fill, copy, download: its compute stream on CUDA):
//   - round trip: host -> tier -> host;
//   - a D2H issued right after a kernel that writes its source reads what
//     the kernel wrote (the copy waits for compute issued before it);
//   - an H2D issued right after a kernel that reads its destination does
//     not change what the kernel read;
//   - after compute_waits(token), a kernel reads what the H2D brought;
//   - copies in one direction complete in issue order;
//   - a copy outside the arena is an error naming the tensor.
// --device loopback runs here (a CTest; the loopback tier's delays and NaN
// poison make a missing wait fail); --device cuda on the GPU machine, where
// 64 MiB transfers take long enough that a missing event wait shows.
// Exit status: 0 all passed, 1 a check failed, 2 an error (the message).
//
//===----------------------------------------------------------------------===//

#include "context.h"
#include "storage/tensor_store.h"

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace spw;

namespace {

constexpr int kOrderCopies = 32;

int failures = 0;

void line(const char *name, bool ok, const std::string &why = "") {
  std::printf("%-34s %s%s%s\n", name, ok ? "ok" : "FAIL",
              ok || why.empty() ? "" : ": ", ok ? "" : why.c_str());
  failures += !ok;
}

void pattern(char *p, uint64_t n, uint32_t salt) {
  for (uint64_t i = 0; i < n; i += 4) {
    const uint32_t v = uint32_t(i / 4) * 2654435761u + salt;
    std::memcpy(p + i, &v, 4);
  }
}

// "" when equal, else where they first differ.
std::string diff(const char *a, const char *b, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i)
    if (a[i] != b[i])
      return format("byte %llu of %llu differs", (unsigned long long)i,
                    (unsigned long long)n);
  return "";
}

std::unique_ptr<Device> make_device(const std::string &name, spw_ctx *ctx) {
  if (name == "loopback")
    return make_loopback_device(int64_t(1) << 20, Precision::FP32, {.seed = 1});
#if SPW_TIER_CHECK_CUDA
  if (name == "cuda") {
    spw_use_cuda(ctx, 0);
    if (ctx->failed())
      fail("%s", ctx->error.c_str());
    return ctx->cuda_factory(int64_t(256) << 20, Precision::FP32);
  }
#else
  (void)ctx;
#endif
  fail("--device %s: this build checks %s", name.c_str(),
#if SPW_TIER_CHECK_CUDA
       "loopback or cuda"
#else
       "loopback (no CUDA backend built)"
#endif
  );
}

// `kBytes`: one transfer.
void run(Device &dev, const uint64_t kBytes) {
  std::unique_ptr<storage::DeviceMemory> tier =
      dev.make_tier_memory(2 * kBytes);
  storage::PinnedPool pool(4 * kBytes);
  dev.register_host_memory(pool.base(), pool.size());
  std::printf("device %s, tier kind %s, %s, staging pool %s\n",
              dev.name().c_str(), tier->kind(),
              storage::human_bytes(tier->size()).c_str(),
              storage::human_bytes(pool.size()).c_str());
  char *a = static_cast<char *>(pool.allocate(kBytes));
  char *b = static_cast<char *>(pool.allocate(kBytes));
  char *c = static_cast<char *>(pool.allocate(kBytes));
  std::vector<char> want(kBytes), got(kBytes);
  char *scratch = static_cast<char *>(dev.alloc(int64_t(kBytes), "scratch"));
  char *at = static_cast<char *>(tier->address(kBytes));

  // Round trip.
  pattern(a, kBytes, 1);
  tier->copy_h2d(kBytes, a, kBytes, "round trip").wait();
  std::memset(b, 0, kBytes);
  tier->copy_d2h(b, kBytes, kBytes, "round trip").wait();
  line("round trip", diff(a, b, kBytes).empty(), diff(a, b, kBytes));

  // D2H after a kernel that writes its source.
  dev.fill(at, 0x3c, int64_t(kBytes));
  tier->copy_d2h(b, kBytes, kBytes, "after fill").wait();
  std::memset(want.data(), 0x3c, kBytes);
  line("d2h after a writing kernel", diff(want.data(), b, kBytes).empty(),
       diff(want.data(), b, kBytes));

  // H2D after a kernel that reads its destination: the kernel sees the
  // bytes from before the copy.
  pattern(a, kBytes, 2);
  tier->copy_h2d(kBytes, a, kBytes, "before read").wait();
  dev.copy(scratch, at, int64_t(kBytes));
  pattern(c, kBytes, 3);
  storage::Token over = tier->copy_h2d(kBytes, c, kBytes, "after read");
  dev.download(got.data(), scratch, int64_t(kBytes));
  over.wait();
  line("h2d after a reading kernel", diff(a, got.data(), kBytes).empty(),
       diff(a, got.data(), kBytes));

  // compute_waits: the kernel after it reads what the copy brought, the
  // host never having waited for the copy.
  pattern(a, kBytes, 4);
  storage::Token up = tier->copy_h2d(kBytes, a, kBytes, "waited for");
  tier->compute_waits(up);
  dev.copy(scratch, at, int64_t(kBytes));
  dev.download(got.data(), scratch, int64_t(kBytes));
  line("compute_waits", diff(a, got.data(), kBytes).empty(),
       diff(a, got.data(), kBytes));

  // Issue order, each direction.
  const uint64_t piece = kBytes / kOrderCopies;
  for (int dir = 0; dir < 2; ++dir) {
    std::vector<storage::Token> ts;
    for (int i = 0; i < kOrderCopies; ++i) {
      const uint64_t off = uint64_t(i) * piece;
      ts.push_back(dir == 0 ? tier->copy_h2d(off, a + off, piece, "order")
                            : tier->copy_d2h(b + off, off, piece, "order"));
    }
    ts.back().wait();
    int early = 0;
    for (const storage::Token &t : ts)
      early += !t.done();
    line(dir == 0 ? "h2d in issue order" : "d2h in issue order", early == 0,
         format("%d copies not done after the last", early));
  }
  line("order's data", diff(a, b, kBytes).empty(), diff(a, b, kBytes));

  // A bad range.
  std::string err;
  try {
    tier->copy_h2d(tier->size() - 256, a, 512, "blocks.7.w");
  } catch (const Error &e) {
    err = e.what();
  }
  line("out of range names the tensor",
       err.find("'blocks.7.w'") != std::string::npos, err);

  dev.release(scratch);
  tier.reset();
  dev.unregister_host_memory(pool.base());
  dev.synchronize();
}

} // namespace

int main(int argc, char **argv) {
  std::string device = "loopback";
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--device" && i + 1 < argc) {
      device = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: spillway-tier-memory-check [--device loopback|"
                   "cuda]\n");
      return 2;
    }
  }
  try {
    auto ctx = make_context();
    std::unique_ptr<Device> dev = make_device(device, ctx.get());
    // Long enough on a GPU for a missing wait to show; small on the host.
    run(*dev, device == "cuda" ? uint64_t(64) << 20 : uint64_t(4) << 20);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "spillway-tier-memory-check: %s\n", e.what());
    return 2;
  }
  std::printf("%s\n", failures ? "FAILED" : "all passed");
  return failures ? 1 : 0;
}
