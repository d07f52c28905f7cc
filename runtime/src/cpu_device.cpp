//===- cpu_device.cpp - the CPU device: host memory, kernels in place ------===//
//
// The CPU device is a peer of the CUDA and loopback devices behind
// spw::Device, whose memory is the host's (host_visible): kernels run the
// CPU kernels directly on the tensors' data, copies are memmoves (none when
// source and destination are one buffer: a parameter's device copy is its
// host copy), the optimizer is the CPU arithmetic, and the offload plan's
// GPU tier is a CpuDeviceMemory. Step tensors are heap buffers freed one by
// one (spw_release) or at reset_step, so a CPU run's memory is what it was
// before the devices were peers.
//
//===----------------------------------------------------------------------===//

#include "device.h"
#include "context.h"
#include "storage/tensor_store.h"

#include <cstring>
#include <iterator>
#include <map>
#include <unordered_map>

namespace spw {
namespace {

class CpuDevice final : public Device {
public:
  ~CpuDevice() override {
    reset_step();
    for (auto &[bytes, p] : kept_)
      std::free(p);
    for (auto &[p, bytes] : buffers_)
      std::free(p);
  }

  std::string name() const override { return "cpu"; }
  bool host_visible() const override { return true; }

  // (alloc_step_tensor checks a large one against the host's memory.)
  // A freed step buffer of 1 MiB or more is kept for the next request of
  // its size (every step asks for the same sizes): fresh large buffers are
  // mmaps whose pages fault in again each step, ~8% of a GPT step. The
  // kept ones and those in use stay within the step's peak so far.
  void *step_alloc(int64_t bytes, const char *what) override {
    void *p = nullptr;
    if (auto it = kept_.find(bytes); it != kept_.end()) {
      p = it->second;
      kept_.erase(it);
      kept_bytes_ -= bytes;
    } else {
      while (!kept_.empty() && kept_bytes_ + in_use_ + bytes > peak_) {
        auto victim = std::prev(kept_.end()); // the largest
        kept_bytes_ -= victim->first;
        std::free(victim->second);
        kept_.erase(victim);
      }
      p = raw_alloc(bytes, what);
    }
    step_[p] = bytes;
    in_use_ += bytes;
    peak_ = std::max(peak_, in_use_);
    return p;
  }
  void step_free(void *p) override {
    auto it = step_.find(p);
    if (it == step_.end())
      return;
    in_use_ -= it->second;
    keep_or_free(p, it->second);
    step_.erase(it);
  }
  void reset_step() override {
    for (auto &[p, bytes] : step_) {
      in_use_ -= bytes;
      keep_or_free(p, bytes);
    }
    step_.clear();
    in_use_ = 0;
  }
  int64_t step_bytes_in_use() const override { return in_use_; }
  int64_t step_bytes_peak() const override { return peak_; }
  int64_t step_arena_bytes() const override { return 0; } // no arena

  void *alloc(int64_t bytes, const char *what) override {
    void *p = raw_alloc(bytes, what);
    buffers_[p] = bytes;
    return p;
  }
  void release(void *p) override {
    auto it = buffers_.find(p);
    if (it == buffers_.end())
      return;
    std::free(p);
    buffers_.erase(it);
  }

  void upload(void *dev, const void *host, int64_t bytes) override {
    copy(dev, host, bytes);
  }
  void download(void *host, const void *dev, int64_t bytes) override {
    copy(host, dev, bytes);
  }
  void copy(void *dst, const void *src, int64_t bytes) override {
    if (dst != src && bytes > 0)
      std::memmove(dst, src, size_t(bytes));
  }
  void fill(void *dev, uint8_t byte, int64_t bytes) override {
    if (bytes > 0)
      std::memset(dev, byte, size_t(bytes));
  }
  void synchronize() override {}

  void run(Op op, KernelEntry host, spw_ctx *ctx, spw_tensor *const *ins,
           spw_tensor *const *outs, const int64_t *iattrs,
           const double *fattrs) override {
    (void)op;
    // Host memory is this device's: every tensor is resident; the CPU
    // kernels check their own arguments (a released tensor included).
    host(ctx, ins, outs, iattrs, fattrs);
  }

  void adamw(float *w, StateMem m, StateMem v, const float *g, int64_t n,
             const AdamWHparams &h, int64_t step) override {
    adamw_kernel(w, m, v, g, n, step, h);
  }
  void foam(float *w, StateMem m, StateMem v, const float *g, int64_t rows,
            int64_t cols, int level, const AdamWHparams &h, double alpha,
            int64_t step) override {
    foam_kernel(w, m, v, g, rows, cols, level, step, h, alpha);
  }

  std::string host_fallbacks() const override { return ""; }

  std::unique_ptr<storage::DeviceMemory>
  make_tier_memory(uint64_t bytes) override {
    return std::make_unique<storage::CpuDeviceMemory>(bytes);
  }
  // Host memory needs no registration to be copied from.
  void register_host_memory(void *, uint64_t) override {}
  void unregister_host_memory(void *) override {}

private:
  static void *raw_alloc(int64_t bytes, const char *what) {
    // 64-byte aligned, as the CPU backend's buffers (alloc_buffer).
    const size_t n = size_t((std::max<int64_t>(bytes, 1) + 63) / 64 * 64);
    void *p = std::aligned_alloc(64, n);
    if (!p)
      fail("%s: cannot allocate %lld bytes", what, (long long)bytes);
    return p;
  }

  void keep_or_free(void *p, int64_t bytes) {
    if (bytes >= (int64_t(1) << 20) && kept_bytes_ + in_use_ + bytes <= peak_) {
      kept_.emplace(bytes, p);
      kept_bytes_ += bytes;
    } else {
      std::free(p);
    }
  }

  std::unordered_map<void *, int64_t> step_, buffers_;
  std::multimap<int64_t, void *> kept_; // freed step buffers by size
  int64_t in_use_ = 0, peak_ = 0, kept_bytes_ = 0;
};

} // namespace

std::unique_ptr<Device> make_cpu_device() {
  return std::make_unique<CpuDevice>();
}

} // namespace spw
