//===- cuda_device.cpp - the CUDA backend behind the runtime interface -----===//
//
// One GPU, three streams: compute (every kernel, in the step's order), H2D
// and D2H (copies in and out, ordered against compute by events, the
// runtime's completion tokens). Memory:
//   - the step arena: one cudaMalloc, reserved at the first step tensor
//     (after the parameters, optimizer state and inputs have theirs), then
//     bump-allocated and reset after every step; never managed memory;
//   - long-lived buffers: one cudaMalloc each, at start;
//   - a pinned host staging area (cudaHostAlloc, once) that uploads and
//     downloads go through in chunks, so copies run at pinned speed and
//     the caller's memory is free as soon as upload() returns;
//   - an offload plan's GPU tier (make_tier_memory, cuda_tier_memory.cpp):
//     one more cudaMalloc, made before the step arena is reserved so the
//     arena's default size leaves room for it, with its own copy streams;
//     the plan's pinned staging pool is page-locked in place
//     (register_host_memory), so SSD reads land where its copies read.
// Kernels come from kernel_for (kernels.cu); an op without one runs on host
// copies of its tensors with the CPU kernel (counted, and reported after
// training). AdamW updates are queued and launched together (one
// multi-tensor launch) before anything else touches the device; the
// launches' tensor tables cycle through a ring of pinned buffers, so a
// flush waits only for the launch kAdamWTables flushes back.
//
// spw_use_cuda, the C ABI entry generated code calls for --target cuda,
// lives here: linking this file is what makes an executable a CUDA one.
//
//===----------------------------------------------------------------------===//

#include "context.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_tier_memory.h"
#include "cuda/kernels.h"
#include "cuda/optimizer_kernels.h"
#include "dist/dist.h"
#include "storage/tensor_store.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <vector>

namespace spw::cuda {
namespace {

constexpr int64_t kAlign = 256;
constexpr int64_t kStageChunk = int64_t(8) << 20; // two chunks in flight
constexpr int64_t kLtWorkspace = int64_t(64) << 20;
// Left free when the arena takes "most of the free memory": cuBLASLt,
// the CUDA context's own allocations and the allocator's granularity.
constexpr int64_t kArenaHeadroom = int64_t(2) << 30;
// Pinned AdamW tensor tables in flight at once: a flush reuses the table of
// the launch this many flushes back, waiting only for that one's copy.
constexpr int kAdamWTables = 3;

int64_t align_up(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

std::string gib(int64_t bytes) {
  return format("%.1f GiB", double(bytes) / double(int64_t(1) << 30));
}

class CudaDevice final : public Device {
public:
  CudaDevice(int64_t arena_bytes, Precision precision)
      : requested_arena_(arena_bytes), precision_(precision) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
      fail("--device cuda: no CUDA device is usable (cudaGetDeviceCount: "
           "%s); run on a machine with an NVIDIA GPU and driver, or with "
           "--device cpu",
           e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    // Data parallel: the ranks on one machine take a GPU each (mpirun's
    // local rank; round robin when there are more ranks than GPUs).
    const int dev = dist::local_rank() % count;
    SPW_CUDA(cudaSetDevice(dev));
    SPW_CUDA(cudaGetDeviceProperties(&prop_, dev));
    if (prop_.major < 9)
      fail("--device cuda: the kernels are built for sm_90 (Hopper) and "
           "newer, and device %d (%s) is sm_%d%d; run with --device cpu",
           dev, prop_.name, prop_.major, prop_.minor);
    SPW_CUDA(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
    SPW_CUDA(cudaStreamCreateWithFlags(&h2d_, cudaStreamNonBlocking));
    SPW_CUDA(cudaStreamCreateWithFlags(&d2h_, cudaStreamNonBlocking));
    SPW_CUDA(cudaEventCreateWithFlags(&compute_mark_,
                                      cudaEventDisableTiming));
    for (int i = 0; i < 2; ++i) {
      SPW_CUDA(cudaEventCreateWithFlags(&stage_done_[i],
                                        cudaEventDisableTiming));
      // Recorded once so the first wait on it returns at once.
      SPW_CUDA(cudaEventRecord(stage_done_[i], h2d_));
    }
    for (AdamWTable &t : tables_) {
      SPW_CUDA(cudaEventCreateWithFlags(&t.done, cudaEventDisableTiming));
      SPW_CUDA(cudaEventRecord(t.done, compute_));
    }
    SPW_CUDA(cudaHostAlloc(reinterpret_cast<void **>(&stage_),
                           size_t(2 * kStageChunk), cudaHostAllocDefault));
    if (cublasLtCreate(&lt_) != CUBLAS_STATUS_SUCCESS)
      fail("cublasLtCreate failed: is libcublasLt of CUDA 13 installed?");
    lt_workspace_ = alloc(kLtWorkspace, "cuBLASLt workspace");
  }

  ~CudaDevice() override {
    // Errors here have nowhere to go; the process is ending anyway.
    cudaDeviceSynchronize();
    for (void *p : registered_)
      cudaHostUnregister(p);
    if (arena_)
      cudaFree(arena_);
    for (auto &[p, bytes] : buffers_)
      cudaFree(p);
    if (table_dev_)
      cudaFree(table_dev_);
    for (AdamWTable &t : tables_) {
      if (t.host)
        cudaFreeHost(t.host);
      cudaEventDestroy(t.done);
    }
    if (stage_)
      cudaFreeHost(stage_);
    if (lt_)
      cublasLtDestroy(lt_);
    cudaEventDestroy(compute_mark_);
    for (cudaEvent_t ev : stage_done_)
      cudaEventDestroy(ev);
    cudaStreamDestroy(compute_);
    cudaStreamDestroy(h2d_);
    cudaStreamDestroy(d2h_);
  }

  std::string name() const override {
    return format("cuda (%s, %s, sm_%d%d)", prop_.name,
                  gib(int64_t(prop_.totalGlobalMem)).c_str(), prop_.major,
                  prop_.minor);
  }

  void *step_alloc(int64_t bytes, const char *what) override {
    // Queued AdamW updates read gradients that may just have been released:
    // launch them before the memory can be handed out again.
    flush_adamw();
    if (!arena_)
      reserve_arena();
    const int64_t at = books_.allocate(bytes);
    if (at < 0)
      fail("%s: %lld bytes do not fit in the GPU step arena (%lld of %lld "
           "bytes in use, the largest free range %lld): raise "
           "--device-arena, or compile the model with an offload plan or "
           "fewer tokens per micro-batch",
           what, (long long)bytes, (long long)books_.in_use(),
           (long long)arena_bytes_, (long long)books_.largest_free());
    return arena_ + at;
  }
  void step_free(void *p) override {
    // Reuse is safe without waiting: every kernel runs on the compute
    // stream in issue order, a queued AdamW flushes before the next launch
    // and uploads wait for the compute stream first.
    char *c = static_cast<char *>(p);
    if (arena_ && c >= arena_ && c < arena_ + arena_bytes_)
      books_.free(c - arena_);
  }
  void reset_step() override {
    flush_adamw();
    books_.reset();
  }
  int64_t step_bytes_in_use() const override { return books_.in_use(); }
  int64_t step_bytes_peak() const override { return books_.peak(); }
  int64_t step_arena_bytes() const override {
    return arena_ ? arena_bytes_ : planned_arena_bytes();
  }

  void *alloc(int64_t bytes, const char *what) override {
    void *p = nullptr;
    const cudaError_t e = cudaMalloc(&p, size_t(std::max<int64_t>(bytes, 1)));
    if (e != cudaSuccess) {
      cudaGetLastError(); // clear the sticky-free error state
      fail("%s: cudaMalloc of %lld bytes failed (%s); the model's "
           "parameters and state do not fit on %s: compile it with an "
           "offload plan",
           what, (long long)bytes, cudaGetErrorString(e), prop_.name);
    }
    buffers_[p] = bytes;
    return p;
  }
  void *collective_stream() override {
    flush_adamw();
    return compute_;
  }
  void release(void *p) override {
    auto it = buffers_.find(p);
    if (it == buffers_.end())
      return;
    flush_adamw();
    SPW_CUDA(cudaStreamSynchronize(compute_));
    SPW_CUDA(cudaFree(p));
    buffers_.erase(it);
  }

  void upload(void *dev, const void *host, int64_t bytes) override {
    flush_adamw();
    // The copy may overwrite memory earlier kernels still read.
    SPW_CUDA(cudaEventRecord(compute_mark_, compute_));
    SPW_CUDA(cudaStreamWaitEvent(h2d_, compute_mark_, 0));
    for (int64_t off = 0; off < bytes; off += kStageChunk) {
      const int64_t n = std::min(kStageChunk, bytes - off);
      const int slot = next_slot_;
      next_slot_ ^= 1;
      char *stage = stage_ + slot * kStageChunk;
      SPW_CUDA(cudaEventSynchronize(stage_done_[slot]));
      std::memcpy(stage, static_cast<const char *>(host) + off, size_t(n));
      SPW_CUDA(cudaMemcpyAsync(static_cast<char *>(dev) + off, stage,
                               size_t(n), cudaMemcpyHostToDevice, h2d_));
      SPW_CUDA(cudaEventRecord(stage_done_[slot], h2d_));
    }
    // Kernels issued from now on see the data.
    SPW_CUDA(cudaEventRecord(compute_mark_, h2d_));
    SPW_CUDA(cudaStreamWaitEvent(compute_, compute_mark_, 0));
  }

  void download(void *host, const void *dev, int64_t bytes) override {
    flush_adamw();
    SPW_CUDA(cudaEventRecord(compute_mark_, compute_));
    SPW_CUDA(cudaStreamWaitEvent(d2h_, compute_mark_, 0));
    for (int64_t off = 0; off < bytes; off += kStageChunk) {
      const int64_t n = std::min(kStageChunk, bytes - off);
      SPW_CUDA(cudaMemcpyAsync(stage_, static_cast<const char *>(dev) + off,
                               size_t(n), cudaMemcpyDeviceToHost, d2h_));
      SPW_CUDA(cudaStreamSynchronize(d2h_));
      std::memcpy(static_cast<char *>(host) + off, stage_, size_t(n));
    }
  }

  void copy(void *dst, const void *src, int64_t bytes) override {
    flush_adamw();
    if (bytes > 0)
      SPW_CUDA(cudaMemcpyAsync(dst, src, size_t(bytes),
                               cudaMemcpyDeviceToDevice, compute_));
  }
  void fill(void *dev, uint8_t byte, int64_t bytes) override {
    flush_adamw();
    if (bytes > 0)
      SPW_CUDA(cudaMemsetAsync(dev, byte, size_t(bytes), compute_));
  }
  void synchronize() override {
    flush_adamw();
    SPW_CUDA(cudaStreamSynchronize(h2d_));
    SPW_CUDA(cudaStreamSynchronize(compute_));
    SPW_CUDA(cudaStreamSynchronize(d2h_));
    SPW_CUDA(cudaGetLastError());
  }

  void run(Op op, KernelEntry host, spw_ctx *ctx, spw_tensor *const *ins,
           spw_tensor *const *outs, const int64_t *iattrs,
           const double *fattrs) override {
    flush_adamw();
    const Arity a = op_arity(op, iattrs);
    check_kernel_tensors(op, ins, a.ins, "input");
    check_kernel_tensors(op, outs, a.outs, "output");
    if (Kernel k = kernel_for(op)) {
      Launch l;
      l.stream = compute_;
      l.lt = lt_;
      l.lt_workspace = lt_workspace_;
      l.lt_workspace_bytes = size_t(kLtWorkspace);
      l.precision = precision_;
      l.device = this;
      l.sm_count = prop_.multiProcessorCount;
      k(l, ins, outs, iattrs, fattrs);
      return;
    }
    // No kernel: the CPU one on host copies; correct, slow, and counted.
    ++fallbacks_[op];
    run_on_host_copies(*this, op, host, ctx, ins, outs, a, iattrs, fattrs);
  }

  void adamw(float *w, StateMem m, StateMem v, const float *g, int64_t n,
             const AdamWHparams &h, int64_t step) override {
    // Queued: one launch updates every parameter of a run of updates with
    // the same scalars (a step's AdamW calls, as generated code makes them).
    const AdamWScalars s = adamw_scalars(h.lr, h.beta1, h.beta2, h.eps,
                                         h.weight_decay, step, h.grad_scale);
    if (!pending_.empty() && !same_scalars(s, pending_scalars_))
      flush_adamw();
    pending_scalars_ = s;
    pending_.push_back({w, m.p, v.p, g, n, m.half});
  }
  void foam(float *w, StateMem m, StateMem v, const float *g, int64_t rows,
            int64_t cols, int level, const AdamWHparams &h, double alpha,
            int64_t step) override {
    flush_adamw();
    spw::cuda::foam(w, m.p, v.p, m.half, g, rows, cols, level,
                    foam_scalars(h.lr, h.beta1, h.beta2, h.eps, h.weight_decay,
                                 alpha, level, step),
                    compute_);
  }

  std::string host_fallbacks() const override {
    std::string s;
    for (const auto &[op, n] : fallbacks_)
      s += (s.empty() ? "" : ", ") +
           format("%s x%lld", op_name(op), (long long)n);
    return s;
  }

  std::unique_ptr<storage::DeviceMemory>
  make_tier_memory(uint64_t bytes) override {
    // Once reserved at its default size the step arena holds most of the
    // free memory; made first, the tier is left out of that default.
    if (arena_ && requested_arena_ <= 0)
      fail("the offload plan's GPU tier (%s) is made after the step arena "
           "took the free GPU memory; make it before the first step "
           "tensor, or pass --device-arena",
           storage::human_bytes(bytes).c_str());
    return make_cuda_tier_memory(bytes, compute_, [this] { flush_adamw(); });
  }

  void register_host_memory(void *p, uint64_t bytes) override {
    if (!p || bytes == 0)
      return;
    if (registered_.count(p))
      fail("register_host_memory: %p is registered already", p);
    // Portable: pinned for every CUDA context, not just this device's.
    const cudaError_t e =
        cudaHostRegister(p, size_t(bytes), cudaHostRegisterPortable);
    if (e != cudaSuccess) {
      cudaGetLastError(); // not sticky: clear it
      fail("cannot page-lock the pinned staging pool (%s at %p) for the "
           "GPU's copies: cudaHostRegister: %s",
           storage::human_bytes(bytes).c_str(), p, cudaGetErrorString(e));
    }
    registered_.insert(p);
  }
  void unregister_host_memory(void *p) override {
    auto it = registered_.find(p);
    if (it == registered_.end())
      return;
    registered_.erase(it);
    // Copies from or to it (any stream, the GPU tier's too) are over
    // before its pages are unlocked. Called while a plan is torn down, so
    // errors are not thrown: the next synchronize() reports them.
    cudaDeviceSynchronize();
    cudaHostUnregister(p);
  }

private:
  int64_t requested_arena_;
  Precision precision_;
  cudaDeviceProp prop_{};
  cudaStream_t compute_ = nullptr, h2d_ = nullptr, d2h_ = nullptr;
  cudaEvent_t compute_mark_ = nullptr;
  cudaEvent_t stage_done_[2] = {};
  char *stage_ = nullptr; // pinned, 2 x kStageChunk
  int next_slot_ = 0;
  cublasLtHandle_t lt_ = nullptr;
  void *lt_workspace_ = nullptr;
  char *arena_ = nullptr;
  int64_t arena_bytes_ = 0;
  ArenaAllocator books_;
  std::map<void *, int64_t> buffers_;
  std::map<Op, int64_t> fallbacks_;
  // Host memory page-locked by register_host_memory.
  std::set<void *> registered_;
  // Queued AdamW updates, their scalars, and the tables they launch with:
  // one device table (every launch and its table copy run on the compute
  // stream, in order) and a ring of pinned host tables, each free again
  // once its `done` event (recorded after the launch) has passed.
  std::vector<AdamWTensor> pending_;
  AdamWScalars pending_scalars_{};
  struct AdamWTable {
    void *host = nullptr;
    cudaEvent_t done = nullptr;
  };
  AdamWTable tables_[kAdamWTables];
  int next_table_ = 0;
  void *table_dev_ = nullptr;
  size_t table_capacity_ = 0;

  static bool same_scalars(const AdamWScalars &a, const AdamWScalars &b) {
    // Field by field: the struct has padding memcmp would compare.
    return a.decay == b.decay && a.w1 == b.w1 && a.b2 == b.b2 &&
           a.w2 == b.w2 && a.bc2_sqrt == b.bc2_sqrt && a.eps == b.eps &&
           a.neg_step == b.neg_step && a.decays == b.decays &&
           a.scale == b.scale && a.scaled == b.scaled;
  }

  int64_t planned_arena_bytes() const {
    if (requested_arena_ > 0)
      return align_up(requested_arena_);
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess)
      return 0;
    return std::max<int64_t>(0, (int64_t(free) - kArenaHeadroom) / kAlign *
                                    kAlign);
  }

  void reserve_arena() {
    const int64_t bytes = planned_arena_bytes();
    if (bytes <= 0)
      fail("the GPU has no memory left for the step arena after the "
           "parameters, optimizer state and inputs; compile the model "
           "with an offload plan");
    const cudaError_t e =
        cudaMalloc(reinterpret_cast<void **>(&arena_), size_t(bytes));
    if (e != cudaSuccess) {
      cudaGetLastError();
      arena_ = nullptr;
      fail("cannot reserve a GPU step arena of %lld bytes (%s): lower "
           "--device-arena",
           (long long)bytes, cudaGetErrorString(e));
    }
    arena_bytes_ = bytes;
    books_.reset(bytes);
  }

  void flush_adamw() {
    if (pending_.empty())
      return;
    const size_t need = adamw_scratch_bytes(pending_.size());
    if (need > table_capacity_) {
      // Every table grows together; launches in flight read the old ones.
      SPW_CUDA(cudaStreamSynchronize(compute_));
      if (table_dev_)
        SPW_CUDA(cudaFree(table_dev_));
      table_dev_ = nullptr;
      for (AdamWTable &t : tables_) {
        if (t.host)
          SPW_CUDA(cudaFreeHost(t.host));
        t.host = nullptr;
      }
      table_capacity_ = 0;
      const size_t cap = std::max(need * 2, size_t(4096));
      SPW_CUDA(cudaMalloc(&table_dev_, cap));
      for (AdamWTable &t : tables_)
        SPW_CUDA(cudaHostAlloc(&t.host, cap, cudaHostAllocDefault));
      table_capacity_ = cap;
    }
    // This pinned table is free once the launch that last used it, and
    // with it that launch's table copy, has run.
    AdamWTable &t = tables_[next_table_];
    next_table_ = (next_table_ + 1) % kAdamWTables;
    SPW_CUDA(cudaEventSynchronize(t.done));
    std::vector<AdamWTensor> ts;
    ts.swap(pending_);
    adamw_multi(ts, pending_scalars_, table_dev_, compute_, t.host);
    SPW_CUDA(cudaEventRecord(t.done, compute_));
  }
};

std::unique_ptr<Device> make_cuda_device(int64_t arena_bytes,
                                         Precision precision) {
  try {
    return std::make_unique<CudaDevice>(arena_bytes, precision);
  } catch (const CudaError &e) {
    fail("starting the CUDA backend: %s", e.what());
  }
}

} // namespace
} // namespace spw::cuda

extern "C" void spw_use_cuda(spw_ctx *ctx, int32_t precision) {
  spw::guarded(ctx, "spw_use_cuda", [&] {
    if (precision != 0 && precision != 1)
      spw::fail("precision %d is neither 0 (fp32) nor 1 (bf16)", precision);
    ctx->cuda_factory = &spw::cuda::make_cuda_device;
    ctx->precision = precision ? spw::Precision::BF16 : spw::Precision::FP32;
  });
}
