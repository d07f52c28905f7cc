//===- device.cpp - op tables, dispatch and the loopback device ------------===//
//
// The loopback device is the CUDA backend's host side on host memory: a
// step arena reserved once and bump-allocated, long-lived buffers, copies
// in and out, the residency of every tensor checked at each kernel. Its
// step allocations are filled with NaN bytes, so a kernel that reads an
// output it did not write, or host code that reads a tensor it never
// downloaded, shows up as a wrong result in the tests that compare it with
// the CPU backend bit for bit.
//
//===----------------------------------------------------------------------===//

#include "device.h"
#include "runtime_internal.h"

#include <cstring>
#include <map>
#include <unordered_map>

namespace spw {

const char *op_name(Op op) {
  static const char *const names[] = {
#define SPW_OP_NAME(name) #name,
      SPW_OPS(SPW_OP_NAME)
#undef SPW_OP_NAME
  };
  const int i = int(op);
  return i >= 0 && i < kNumOps ? names[i] : "?";
}

KernelEntry entry_point(Op op) {
  static const KernelEntry entries[] = {
#define SPW_OP_ENTRY(name) &spw_op_##name,
      SPW_OPS(SPW_OP_ENTRY)
#undef SPW_OP_ENTRY
  };
  const int i = int(op);
  return i >= 0 && i < kNumOps ? entries[i] : nullptr;
}

Arity op_arity(Op op, const int64_t *iattrs) {
  switch (op) {
  case Op::gemm:
  case Op::layer_norm:
  case Op::softmax_cross_entropy_loss_grad:
  case Op::where:
  case Op::linear:
  case Op::rope:
  case Op::rope_grad:
  case Op::attention:
    return {3, 1};
  case Op::layer_norm_grad:
    return {3, 3};
  case Op::rms_norm_grad:
    return {3, 2};
  case Op::attention_grad:
    return {4, 3};
  case Op::concat:
    return {iattrs ? int(iattrs[1]) : 0, 1};
  case Op::matmul:
  case Op::add:
  case Op::sub:
  case Op::mul:
  case Op::div:
  case Op::gather:
  case Op::softmax_cross_entropy_loss:
  case Op::relu_grad:
  case Op::tanh_grad:
  case Op::gelu_grad:
  case Op::softmax_grad:
  case Op::gather_grad:
  case Op::silu_grad:
  case Op::pow:
  case Op::equal:
  case Op::less:
  case Op::less_or_equal:
  case Op::greater:
  case Op::rms_norm:
    return {2, 1};
  default:
    return {1, 1};
  }
}

const char *precision_name(Precision p) {
  return p == Precision::BF16 ? "bf16 products, fp32 accumulation"
                              : "fp32";
}

Device::~Device() = default;

void run_on_device(spw_ctx *ctx, Op op, KernelEntry host,
                   spw_tensor *const *ins, spw_tensor *const *outs,
                   const int64_t *iattrs, const double *fattrs) {
  guarded(ctx, op_name(op), [&] {
    ctx->device->run(op, host, ctx, ins, outs, iattrs, fattrs);
  });
}

namespace {

constexpr int64_t kAlign = 256;

int64_t align_up(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

class LoopbackDevice final : public Device {
public:
  LoopbackDevice(int64_t arena_bytes, Precision precision)
      : arena_bytes_(align_up(arena_bytes)), precision_(precision) {
    // Reserved once, like the GPU arena; pages are touched only as used.
    arena_ = static_cast<char *>(std::aligned_alloc(
        size_t(kAlign), size_t(std::max<int64_t>(arena_bytes_, kAlign))));
    if (!arena_)
      fail("loopback device: cannot reserve a step arena of %lld bytes "
           "(lower --device-arena)",
           (long long)arena_bytes_);
  }
  ~LoopbackDevice() override {
    std::free(arena_);
    for (auto &[p, bytes] : buffers_)
      std::free(p);
  }

  std::string name() const override { return "loopback"; }

  void *step_alloc(int64_t bytes, const char *what) override {
    const int64_t need = align_up(std::max<int64_t>(bytes, 1));
    if (need > arena_bytes_ - used_)
      fail("%s: %lld bytes do not fit in the device's step arena (%lld of "
           "%lld bytes in use): raise --device-arena",
           what, (long long)bytes, (long long)used_, (long long)arena_bytes_);
    char *p = arena_ + used_;
    used_ += need;
    peak_ = std::max(peak_, used_);
    std::memset(p, 0xff, size_t(need)); // NaN bytes: see the file comment
    return p;
  }
  void reset_step() override { used_ = 0; }
  int64_t step_bytes_in_use() const override { return used_; }
  int64_t step_bytes_peak() const override { return peak_; }
  int64_t step_arena_bytes() const override { return arena_bytes_; }

  void *alloc(int64_t bytes, const char *what) override {
    void *p = std::aligned_alloc(size_t(kAlign),
                                 size_t(align_up(std::max<int64_t>(bytes, 1))));
    if (!p)
      fail("%s: cannot allocate %lld bytes on the loopback device", what,
           (long long)bytes);
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
    check_device(dev, bytes, "upload");
    std::memmove(dev, host, size_t(bytes));
  }
  void download(void *host, const void *dev, int64_t bytes) override {
    check_device(dev, bytes, "download");
    std::memmove(host, dev, size_t(bytes));
  }
  void copy(void *dst, const void *src, int64_t bytes) override {
    check_device(dst, bytes, "copy");
    check_device(src, bytes, "copy");
    std::memmove(dst, src, size_t(bytes));
  }
  void fill(void *dev, uint8_t byte, int64_t bytes) override {
    check_device(dev, bytes, "fill");
    std::memset(dev, byte, size_t(bytes));
  }
  void synchronize() override {}

  void run(Op op, KernelEntry host, spw_ctx *ctx, spw_tensor *const *ins,
           spw_tensor *const *outs, const int64_t *iattrs,
           const double *fattrs) override {
    // A kernel's tensors are all device tensors: a host one here means
    // the runtime forgot an upload.
    const Arity a = op_arity(op, iattrs);
    check_tensors(op, ins, a.ins, "input");
    check_tensors(op, outs, a.outs, "output");
    host(ctx, ins, outs, iattrs, fattrs);
  }

  void adamw(float *w, float *m, float *v, const float *g, int64_t n,
             const AdamWHparams &h, int64_t step) override {
    adamw_kernel(w, m, v, g, n, step, h);
  }
  void foam(float *w, float *m, float *v, const float *g, int64_t rows,
            int64_t cols, int level, const AdamWHparams &h, double alpha,
            int64_t step) override {
    foam_kernel(w, m, v, g, rows, cols, level, step, h, alpha);
  }

  std::string host_fallbacks() const override { return ""; }

private:
  int64_t arena_bytes_;
  Precision precision_;
  char *arena_ = nullptr;
  int64_t used_ = 0, peak_ = 0;
  std::map<void *, int64_t> buffers_; // address order: lookups by range

  bool is_device(const void *p, int64_t bytes) const {
    const char *c = static_cast<const char *>(p);
    if (c >= arena_ && c + bytes <= arena_ + arena_bytes_)
      return true;
    auto it = buffers_.upper_bound(const_cast<void *>(p));
    if (it == buffers_.begin())
      return false;
    --it;
    const char *b = static_cast<const char *>(it->first);
    return c >= b && c + bytes <= b + it->second;
  }
  void check_device(const void *p, int64_t bytes, const char *what) const {
    if (bytes > 0 && !is_device(p, bytes))
      fail("loopback device: %s of %lld bytes at %p outside device memory",
           what, (long long)bytes, p);
  }
  void check_tensors(Op op, spw_tensor *const *ts, int n,
                     const char *what) const {
    for (int i = 0; i < n; ++i) {
      const spw_tensor *t = ts ? ts[i] : nullptr;
      if (!t)
        continue;
      if (!t->on_device)
        fail("%s %d (%s %s) of %s is in host memory: the runtime did not "
             "place it on the device",
             what, i, dtype_name(t->dtype), t->shape().c_str(), op_name(op));
      check_device(t->data, t->bytes(), op_name(op));
    }
  }
};

} // namespace

std::unique_ptr<Device> make_loopback_device(int64_t arena_bytes,
                                             Precision precision) {
  return std::make_unique<LoopbackDevice>(arena_bytes, precision);
}

} // namespace spw
