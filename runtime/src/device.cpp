//===- device.cpp - op tables, dispatch and the loopback device ------------===//
//
// The loopback device is the CUDA backend's host side on host memory: a
// step arena reserved once (ArenaAllocator), long-lived buffers, copies in
// and out, the residency of every tensor checked at each kernel. Like a
// GPU's, its memory is not the host's: every byte is stored XOR-scrambled,
// kernels run on host copies (downloaded inputs, uploaded outputs), and
// fresh or released step memory reads back as NaN bytes. Host code that
// reads a device tensor's data without a download, a kernel that reads an
// output it did not write, or a read after spw_release therefore all show
// up as wrong results in the tests that compare it with the CPU backend
// bit for bit.
//
//===----------------------------------------------------------------------===//

#include "context.h"
#include "device.h"
#include "loopback_memory.h"
#include "storage/tensor_store.h"
#include "trace.h"

#include <cstring>
#include <map>
#include <vector>

namespace spw {

const char *op_name(Op op) {
  static const char *const names[] = {
#define SPW_KERNEL(name, ins, outs, iattrs, fattrs) #name,
#include "spillway/runtime/kernels.def"
  };
  const int i = int(op);
  return i >= 0 && i < kNumOps ? names[i] : "?";
}

KernelEntry entry_point(Op op) {
  static const KernelEntry entries[] = {
#define SPW_KERNEL(name, ins, outs, iattrs, fattrs) &spw_op_##name,
#include "spillway/runtime/kernels.def"
  };
  const int i = int(op);
  return i >= 0 && i < kNumOps ? entries[i] : nullptr;
}

Arity op_arity(Op op, const int64_t *iattrs) {
  static constexpr Arity arities[] = {
#define SPW_KERNEL(name, ins, outs, iattrs, fattrs) {ins, outs},
#include "spillway/runtime/kernels.def"
  };
  const int i = int(op);
  if (i < 0 || i >= kNumOps)
    return {};
  Arity a = arities[i];
  if (a.ins < 0)
    a.ins = iattrs ? int(iattrs[SPW_KERNEL_INS_IATTR_INDEX(a.ins)]) : 0;
  return a;
}

const char *precision_name(Precision p) {
  return p == Precision::BF16 ? "bf16 products, fp32 accumulation"
                              : "fp32";
}

Device::~Device() = default;

void ArenaAllocator::reset(int64_t capacity) {
  capacity_ = capacity / kAlign * kAlign;
  in_use_ = 0;
  free_.clear();
  allocated_.clear();
  if (capacity_ > 0)
    free_[0] = capacity_;
}

int64_t ArenaAllocator::allocate(int64_t bytes) {
  const int64_t need =
      (std::max<int64_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  // Best fit; ties go to the lowest offset, which keeps the top free.
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it)
    if (it->second >= need &&
        (best == free_.end() || it->second < best->second))
      best = it;
  if (best == free_.end())
    return -1;
  const int64_t at = best->first, size = best->second;
  free_.erase(best);
  if (size > need)
    free_[at + need] = size - need;
  allocated_[at] = need;
  in_use_ += need;
  peak_ = std::max(peak_, at + need);
  return at;
}

int64_t ArenaAllocator::free(int64_t offset) {
  auto it = allocated_.find(offset);
  if (it == allocated_.end())
    return -1;
  const int64_t freed = it->second;
  int64_t at = offset, size = freed;
  allocated_.erase(it);
  in_use_ -= freed;
  // Merge with the free neighbours on either side.
  auto next = free_.lower_bound(at);
  if (next != free_.end() && next->first == at + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == at) {
      at = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_[at] = size;
  return freed;
}

int64_t ArenaAllocator::largest_free() const {
  int64_t m = 0;
  for (const auto &[at, size] : free_)
    m = std::max(m, size);
  return m;
}

void check_kernel_tensors(Op op, spw_tensor *const *ts, int n,
                          const char *what) {
  for (int i = 0; i < n; ++i) {
    const spw_tensor *t = ts ? ts[i] : nullptr;
    if (!t)
      continue;
    if (!t->data && t->numel > 0)
      fail("%s %d (%s %s) of %s was released (spw_release) before this use",
           what, i, dtype_name(t->dtype), t->shape().c_str(), op_name(op));
    // A host tensor here means the runtime forgot an upload.
    if (!t->on_device)
      fail("%s %d (%s %s) of %s is in host memory: the runtime did not "
           "place it on the device",
           what, i, dtype_name(t->dtype), t->shape().c_str(), op_name(op));
  }
}

void run_on_host_copies(Device &d, Op op, KernelEntry host, spw_ctx *ctx,
                        spw_tensor *const *ins, spw_tensor *const *outs,
                        const Arity &a, const int64_t *iattrs,
                        const double *fattrs) {
  std::vector<std::unique_ptr<spw_tensor>> owned;
  std::vector<spw_tensor *> hin(size_t(a.ins), nullptr);
  std::vector<spw_tensor *> hout(size_t(a.outs), nullptr);
  auto twin = [&](const spw_tensor *t) {
    owned.push_back(make_tensor(t->dtype, t->rank, t->dims, op_name(op)));
    return owned.back().get();
  };
  for (int i = 0; i < a.ins; ++i)
    if (ins[i]) {
      hin[size_t(i)] = twin(ins[i]);
      d.download(hin[size_t(i)]->data, ins[i]->data, ins[i]->bytes());
    }
  for (int i = 0; i < a.outs; ++i)
    if (outs[i]) {
      hout[size_t(i)] = twin(outs[i]);
      std::memset(hout[size_t(i)]->data, 0xff, size_t(outs[i]->bytes()));
    }
  host(ctx, hin.data(), hout.data(), iattrs, fattrs);
  for (int i = 0; i < a.outs; ++i)
    if (outs[i])
      d.upload(outs[i]->data, hout[size_t(i)]->data, outs[i]->bytes());
}

void run_on_device(spw_ctx *ctx, Op op, KernelEntry host,
                   spw_tensor *const *ins, spw_tensor *const *outs,
                   const int64_t *iattrs, const double *fattrs) {
  guarded(ctx, op_name(op), [&] {
    trace::Scope kernel(op_name(op)); // --trace: the kernel's span
    ctx->device->run(op, host, ctx, ins, outs, iattrs, fattrs);
  });
}

namespace {

constexpr int64_t kAlign = 256;
constexpr uint8_t kScramble = kLoopbackScramble; // device = host ^ kScramble
constexpr uint8_t kPoison = kPoisonByte; // every f32 made of it is a NaN

void scramble_copy(void *dst, const void *src, int64_t bytes) {
  auto *d = static_cast<uint8_t *>(dst);
  const auto *s = static_cast<const uint8_t *>(src);
  for (int64_t i = 0; i < bytes; ++i)
    d[i] = uint8_t(s[i] ^ kScramble);
}

int64_t align_up(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

class LoopbackDevice final : public Device {
public:
  LoopbackDevice(int64_t arena_bytes, Precision precision,
                 const LoopbackCopyOptions &copies)
      : arena_bytes_(align_up(arena_bytes)), precision_(precision),
        copies_(copies) {
    // Reserved once, like the GPU arena; pages are touched only as used.
    arena_ = static_cast<char *>(std::aligned_alloc(
        size_t(kAlign), size_t(std::max<int64_t>(arena_bytes_, kAlign))));
    if (!arena_)
      fail("loopback device: cannot reserve a step arena of %lld bytes "
           "(lower --device-arena)",
           (long long)arena_bytes_);
    books_.reset(arena_bytes_);
  }
  ~LoopbackDevice() override {
    std::free(arena_);
    for (auto &[p, bytes] : buffers_)
      std::free(p);
  }

  std::string name() const override { return "loopback"; }
  void *collective_stream() override { return this; }

  void *step_alloc(int64_t bytes, const char *what) override {
    const int64_t at = books_.allocate(bytes);
    if (at < 0)
      fail("%s: %lld bytes do not fit in the device's step arena (%lld of "
           "%lld bytes in use, the largest free range %lld): raise "
           "--device-arena",
           what, (long long)bytes, (long long)books_.in_use(),
           (long long)arena_bytes_, (long long)books_.largest_free());
    char *p = arena_ + at;
    // NaN bytes: see the file comment.
    std::memset(p, kPoison ^ kScramble,
                size_t(align_up(std::max<int64_t>(bytes, 1))));
    return p;
  }
  void step_free(void *p) override {
    char *c = static_cast<char *>(p);
    if (c < arena_ || c >= arena_ + arena_bytes_)
      return;
    const int64_t size = books_.free(c - arena_);
    // A read after the release now sees NaN bytes.
    if (size > 0)
      std::memset(c, kPoison ^ kScramble, size_t(size));
  }
  void reset_step() override { books_.reset(); }
  int64_t step_bytes_in_use() const override { return books_.in_use(); }
  int64_t step_bytes_peak() const override { return books_.peak(); }
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
    scramble_copy(dev, host, bytes);
  }
  void download(void *host, const void *dev, int64_t bytes) override {
    check_device(dev, bytes, "download");
    scramble_copy(host, dev, bytes);
  }
  void copy(void *dst, const void *src, int64_t bytes) override {
    check_device(dst, bytes, "copy");
    check_device(src, bytes, "copy");
    std::memmove(dst, src, size_t(bytes));
  }
  void fill(void *dev, uint8_t byte, int64_t bytes) override {
    check_device(dev, bytes, "fill");
    std::memset(dev, byte ^ kScramble, size_t(bytes));
  }
  void synchronize() override {}

  void run(Op op, KernelEntry host, spw_ctx *ctx, spw_tensor *const *ins,
           spw_tensor *const *outs, const int64_t *iattrs,
           const double *fattrs) override {
    const Arity a = op_arity(op, iattrs);
    check_tensors(op, ins, a.ins, "input");
    check_tensors(op, outs, a.outs, "output");
    // As CudaDevice runs an op it has no kernel for.
    run_on_host_copies(*this, op, host, ctx, ins, outs, a, iattrs, fattrs);
  }

  void adamw(float *w, StateMem m, StateMem v, const float *g, int64_t n,
             const AdamWHparams &h, int64_t step) override {
    Host hw(*this, w, n * 4), hg(*this, g, n * 4), hm(*this, m.p, n * m.elem()),
        hv(*this, v.p, n * v.elem());
    adamw_kernel(hw.f32(), hm.state(m), hv.state(v), hg.f32(), n, step, h);
  }
  void foam(float *w, StateMem m, StateMem v, const float *g, int64_t rows,
            int64_t cols, int level, const AdamWHparams &h, double alpha,
            int64_t step) override {
    const int64_t nb = (cols + (int64_t(1) << level) - 1) >> level;
    Host hw(*this, w, rows * cols * 4), hg(*this, g, rows * cols * 4),
        hm(*this, m.p, rows * nb * m.elem()),
        hv(*this, v.p, rows * nb * v.elem());
    foam_kernel(hw.f32(), hm.state(m), hv.state(v), hg.f32(), rows, cols, level,
                step, h, alpha);
  }

  std::string host_fallbacks() const override { return ""; }

  // The GPU tier in a buffer of this device (so kernels accept its
  // addresses), NaN bytes until a copy fills them; its copies run on their
  // own threads after seeded delays (loopback_memory.h).
  std::unique_ptr<storage::DeviceMemory>
  make_tier_memory(uint64_t bytes) override {
    char *base = static_cast<char *>(
        alloc(int64_t(bytes), "the offload plan's GPU tier"));
    std::memset(base, kPoison ^ kScramble, size_t(bytes));
    return make_loopback_tier_memory(base, bytes, copies_);
  }
  // Host memory needs no registration to be copied from.
  void register_host_memory(void *, uint64_t) override {}
  void unregister_host_memory(void *) override {}

private:
  // A host copy of n device floats, written back when it goes out of scope
  // (the gradient's too: harmless, it is unchanged).
  // A host copy of `bytes` device bytes, written back when it goes.
  struct Host {
    LoopbackDevice &d;
    void *dev;
    std::vector<float> h; // float-aligned for every element type
    int64_t bytes;
    Host(LoopbackDevice &d, const void *dev, int64_t bytes)
        : d(d), dev(const_cast<void *>(dev)), h(size_t((bytes + 3) / 4)),
          bytes(bytes) {
      d.download(h.data(), dev, bytes);
    }
    ~Host() { d.upload(dev, h.data(), bytes); }
    float *f32() { return h.data(); }
    StateMem state(StateMem like) { return {h.data(), like.half}; }
  };

  int64_t arena_bytes_;
  Precision precision_;
  LoopbackCopyOptions copies_; // for make_loopback_tier_memory
  char *arena_ = nullptr;
  ArenaAllocator books_;
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
  // The shared checks, and that the memory is this device's.
  void check_tensors(Op op, spw_tensor *const *ts, int n,
                     const char *what) const {
    check_kernel_tensors(op, ts, n, what);
    for (int i = 0; i < n; ++i)
      if (ts && ts[i])
        check_device(ts[i]->data, ts[i]->bytes(), op_name(op));
  }
};

} // namespace

std::unique_ptr<Device>
make_loopback_device(int64_t arena_bytes, Precision precision,
                     const LoopbackCopyOptions &copies) {
  return std::make_unique<LoopbackDevice>(arena_bytes, precision, copies);
}

} // namespace spw
