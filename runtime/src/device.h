//===- device.h - the backend interface behind the C ABI -------------------===//
//
// Every run computes on a Device, and the devices are peers behind this one
// interface: the CPU device (cpu_device.cpp: host memory, the CPU kernels
// called directly), the CUDA backend (runtime/src/cuda, built where nvcc
// is, chosen by `spillwayc --target cuda`) and the loopback device, which
// does everything the CUDA backend's host side does (arena, uploads,
// downloads, the residency of every tensor) on scrambled host memory with
// the CPU kernels, so that side is tested on machines without a GPU
// (`--device loopback`).
//
// Every spw_op_* entry point hands its context to Device::run; the
// runtime's host code (the optimizer on host state, the loss, outputs,
// checkpoints) reads device tensors only through download(), which on the
// CPU device (host_visible) is a copy within host memory or nothing.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_DEVICE_H
#define SPILLWAY_RUNTIME_SRC_DEVICE_H

#include "bf16.h"
#include "loopback_memory.h"
#include "spillway/runtime/spillway_rt.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace spw {
namespace storage {
class DeviceMemory;
}

// Optimizer-state memory (AdamW's m or v, FOAM's folded ones): float32
// elements, or bf16 ones (`half`) under --optimizer-state-dtype bf16
// (spw_declare_optimizer_state_dtype). The arithmetic is float32 either way;
// bf16 state is widened as it is read and rounded to nearest even as it is
// stored, and the update reads the stored (rounded) moments.
struct StateMem {
  void *p = nullptr;
  bool half = false;
  StateMem() = default;
  StateMem(void *p, bool half) : p(p), half(half) {}
  StateMem(float *p) : p(p) {} // float32 state, as every caller had
  StateMem(bf16 *p) : p(p), half(true) {}
  int64_t elem() const { return half ? 2 : 4; }
  // Element e.
  StateMem operator+(int64_t e) const {
    return {static_cast<char *>(p) + e * elem(), half};
  }
  bool operator==(const StateMem &o) const { return p == o.p; }
  explicit operator bool() const { return p != nullptr; }
  float *f32() const { return static_cast<float *>(p); }
  bf16 *b16() const { return static_cast<bf16 *>(p); }
};

// The loopback device stores every device byte XOR kLoopbackScramble, and
// fresh or released memory as kPoisonByte (every f32 made of it is a NaN),
// so host code reading device memory directly gets garbage.
constexpr uint8_t kLoopbackScramble = 0xa5, kPoisonByte = 0xff;

// Every kernel of the C ABI, in kernels.def's order.
enum class Op : int {
#define SPW_KERNEL(name, ins, outs, iattrs, fattrs) name,
#include "spillway/runtime/kernels.def"
  Count
};
constexpr int kNumOps = int(Op::Count);

const char *op_name(Op op);

// The signature of every spw_op_* entry point (and of the CPU kernels).
using KernelEntry = void (*)(spw_ctx *ctx, spw_tensor *const *ins,
                             spw_tensor *const *outs, const int64_t *iattrs,
                             const double *fattrs);
// The C ABI entry point of `op` (it dispatches on the context's device).
KernelEntry entry_point(Op op);

// How many tensors an op's ins and outs hold (kernels.def's layout; some
// may be NULL, an absent optional one). A variadic op's count is read from
// its iattrs (concat's n), 0 when iattrs is NULL.
struct Arity {
  int ins = 0, outs = 0;
};
Arity op_arity(Op op, const int64_t *iattrs);

// Numerics the compiler chose (spillwayc --precision): fp32 everywhere, or
// bf16 products (GEMMs, attention) with fp32 accumulation, fp32 storage and
// fp32 master weights.
enum class Precision : int { FP32 = 0, BF16 = 1 };
const char *precision_name(Precision p);

struct AdamWHparams;

// The step arena's allocator: offsets into `capacity` bytes, 256-aligned,
// best fit among the free ranges, neighbours merged when freed, everything
// free again after reset(). Devices keep the bytes; this keeps the books.
// peak() is the highest end offset ever handed out (what the arena had to
// hold, fragmentation included).
class ArenaAllocator {
public:
  static constexpr int64_t kAlign = 256;
  explicit ArenaAllocator(int64_t capacity = 0) { reset(capacity); }
  void reset(int64_t capacity);
  void reset() { reset(capacity_); }
  // The offset of `bytes` (at least 1), or -1 when no free range fits.
  int64_t allocate(int64_t bytes);
  // Frees the range allocate() returned at `offset`; returns its size
  // (aligned), or -1 for an offset that is not an allocation.
  int64_t free(int64_t offset);
  int64_t capacity() const { return capacity_; }
  int64_t in_use() const { return in_use_; }
  int64_t peak() const { return peak_; }
  int64_t largest_free() const;

private:
  int64_t capacity_ = 0, in_use_ = 0, peak_ = 0;
  std::map<int64_t, int64_t> free_;       // offset -> size
  std::map<int64_t, int64_t> allocated_;  // offset -> size
};

class Device {
public:
  virtual ~Device();
  // "cuda (NVIDIA H200, 139.8 GiB)", "loopback".
  virtual std::string name() const = 0;

  // Step tensors: on the GPU and loopback devices allocated from an arena
  // reserved once at start (ArenaAllocator, 256-byte aligned), on the CPU
  // device heap buffers (64-byte aligned, no arena); freed one by one by
  // step_free or all together by reset_step() at the end of the step.
  // Throws spw::Error naming the request when the arena is full.
  virtual void *step_alloc(int64_t bytes, const char *what) = 0;
  // Returns a step allocation early (spw_release): later step_alloc calls
  // may reuse it. Work already issued that reads it is ordered before any
  // reuse (one compute stream). Pointers not from step_alloc are ignored.
  virtual void step_free(void *p) = 0;
  virtual void reset_step() = 0;
  // Bytes of the step arena in use now, the highest end offset it reached
  // (ArenaAllocator::peak), and its size.
  virtual int64_t step_bytes_in_use() const = 0;
  virtual int64_t step_bytes_peak() const = 0;
  virtual int64_t step_arena_bytes() const = 0;

  // Buffers that live as long as the context (parameters, optimizer state,
  // the input batches). Throws spw::Error naming `what` when out of memory.
  virtual void *alloc(int64_t bytes, const char *what) = 0;
  virtual void release(void *p) = 0;

  // Copies in stream order with the kernels: upload returns once `host`
  // may be reused; download returns once `host` holds the data.
  virtual void upload(void *dev, const void *host, int64_t bytes) = 0;
  virtual void download(void *host, const void *dev, int64_t bytes) = 0;
  virtual void copy(void *dst, const void *src, int64_t bytes) = 0;
  virtual void fill(void *dev, uint8_t byte, int64_t bytes) = 0;
  // Waits for everything issued so far; throws on an asynchronous error.
  virtual void synchronize() = 0;

  // Runs kernel `op` on device tensors. `host` is the CPU kernel of the
  // same op: a device without its own kernel for `op` may run it on host
  // copies of the tensors (counted, see host_fallbacks()).
  virtual void run(Op op, KernelEntry host, spw_ctx *ctx,
                   spw_tensor *const *ins, spw_tensor *const *outs,
                   const int64_t *iattrs, const double *fattrs) = 0;

  // One AdamW / FOAM update of device buffers, with the CPU optimizer's
  // float32 arithmetic (runtime/src/optimizer.cpp), at step `step`.
  virtual void adamw(float *w, StateMem m, StateMem v, const float *g,
                     int64_t n, const AdamWHparams &h, int64_t step) = 0;
  virtual void foam(float *w, StateMem m, StateMem v, const float *g,
                    int64_t rows, int64_t cols, int level,
                    const AdamWHparams &h, double alpha, int64_t step) = 0;

  // Ops that ran on host copies so far, "name xN, ..." ("" when none).
  virtual std::string host_fallbacks() const = 0;

  // The stream device-side collectives (NCCL, dist/nccl.h) are ordered on,
  // after every kernel and copy issued so far (a cudaStream_t on CUDA; the
  // loopback device, whose kernels have run when they return, gives a token
  // for the tests' stand-in library); null: a device whose collectives go
  // through host memory (MPI).
  virtual void *collective_stream() { return nullptr; }

  // True when this device's memory is the host's (the CPU device; IREE's
  // host-visible device-local memory): a host buffer is already a device
  // buffer, so the parameters and inputs need no second copy, and host
  // code may read device tensors in place.
  virtual bool host_visible() const { return false; }

  // The offload plan's GPU tier: `bytes` of this device's memory (its
  // addresses are device tensors' data) with the copy engines that fill and
  // drain it.
  virtual std::unique_ptr<storage::DeviceMemory>
  make_tier_memory(uint64_t bytes) = 0;
  // Host memory tier copies read and write (the pinned staging pool): CUDA
  // page-locks it (cudaHostRegister) so copies are asynchronous DMA; the CPU
  // and loopback devices do nothing.
  virtual void register_host_memory(void *p, uint64_t bytes) = 0;
  virtual void unregister_host_memory(void *p) = 0;
};

// What every device's run() does first: each of a kernel's n tensors (ins
// or outs) is a device tensor that has not been released; throws otherwise.
void check_kernel_tensors(Op op, spw_tensor *const *ts, int n,
                          const char *what);
// Runs `host` (the op's CPU kernel) on host copies of the device tensors:
// inputs downloaded, outputs starting as NaN bytes and uploaded after.
void run_on_host_copies(Device &d, Op op, KernelEntry host, spw_ctx *ctx,
                        spw_tensor *const *ins, spw_tensor *const *outs,
                        const Arity &a, const int64_t *iattrs,
                        const double *fattrs);

// The CPU device: host memory, the CPU kernels run in place, the CPU
// optimizer arithmetic; no step arena (step tensors are heap buffers, freed
// one by one as on the CPU backend always).
std::unique_ptr<Device> make_cpu_device();

// The loopback device: scrambled host memory, the CPU kernels on host
// copies, the CPU optimizer arithmetic. `arena_bytes` sizes its step arena; `copies` seeds the delays
// of its GPU tier's copies (make_loopback_tier_memory, --loopback-delays).
std::unique_ptr<Device>
make_loopback_device(int64_t arena_bytes, Precision precision,
                     const LoopbackCopyOptions &copies = {});

// The factory of the CUDA backend: registered by spw_use_cuda (defined only
// in the CUDA runtime library, which `spillwayc --target cuda` links).
// `arena_bytes` 0: most of the free GPU memory after the context's buffers.
using DeviceFactory = std::unique_ptr<Device> (*)(int64_t arena_bytes,
                                                  Precision precision);

} // namespace spw

#endif // SPILLWAY_RUNTIME_SRC_DEVICE_H
