//===- cuda_tier_memory.cpp - the CUDA backend's GPU tier -----------------===//

#include "cuda/cuda_tier_memory.h"

#include "cuda/cuda_check.h"
#include "storage/tensor_store.h"

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace spw::cuda {
namespace {

// cudaError_t names by value, looked up before any callback runs: a stream
// callback may make no CUDA call, cudaGetErrorName included.
const std::vector<std::string> &error_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v(1000);
    for (int i = 0; i < int(v.size()); ++i)
      v[size_t(i)] = cudaGetErrorName(cudaError_t(i));
    return v;
  }();
  return names;
}

// What a copy's callback needs: it owns a reference to the token's state
// until the copy is over.
struct Done {
  std::shared_ptr<storage::Completion> completion;
  std::string what; // "host-to-device copy of 'layers.3.w'"
};

// Runs on a CUDA driver thread once everything before it on the copy
// stream has run (exactly once, with the error of a failed stream). It
// only completes the token: no CUDA calls.
void CUDART_CB copy_done(cudaStream_t, cudaError_t status, void *p) {
  std::unique_ptr<Done> d(static_cast<Done *>(p));
  if (status == cudaSuccess) {
    d->completion->piece_done();
    return;
  }
  const auto &names = error_names();
  const int code = int(status);
  d->completion->piece_done(d->what + " failed on the GPU: " +
                            (code >= 0 && code < int(names.size())
                                 ? names[size_t(code)]
                                 : "cudaError " + std::to_string(code)));
}

class CudaTierMemory final : public storage::DeviceMemory {
public:
  CudaTierMemory(uint64_t bytes, cudaStream_t compute,
                 std::function<void()> launch_queued)
      : compute_(compute), launch_queued_(std::move(launch_queued)),
        size_(bytes) {
    error_names();
    const cudaError_t e =
        cudaMalloc(reinterpret_cast<void **>(&base_), size_t(bytes));
    if (e != cudaSuccess) {
      cudaGetLastError(); // not sticky: clear it
      base_ = nullptr;
      fail("the offload plan's GPU tier: cudaMalloc of %s failed (%s); "
           "compile the model with a smaller --gpu-mem",
           storage::human_bytes(bytes).c_str(), cudaGetErrorString(e));
    }
    try {
      SPW_CUDA(cudaStreamCreateWithFlags(&h2d_, cudaStreamNonBlocking));
      SPW_CUDA(cudaStreamCreateWithFlags(&d2h_, cudaStreamNonBlocking));
      SPW_CUDA(cudaEventCreateWithFlags(&issued_, cudaEventDisableTiming));
    } catch (const CudaError &err) {
      release();
      fail("the offload plan's GPU tier: %s", err.what());
    }
  }
  ~CudaTierMemory() override { release(); }

  const char *kind() const override { return "cuda"; }
  uint64_t size() const override { return size_; }
  void *address(uint64_t offset) const override { return base_ + offset; }

  storage::Token copy_h2d(uint64_t offset, const void *host, uint64_t bytes,
                          const std::string &what) override {
    check_copy(offset, host, bytes, "host-to-device", what);
    return issue(h2d_, base_ + offset, host, bytes, cudaMemcpyHostToDevice,
                 "host-to-device", what);
  }
  storage::Token copy_d2h(void *host, uint64_t offset, uint64_t bytes,
                          const std::string &what) override {
    check_copy(offset, host, bytes, "device-to-host", what);
    return issue(d2h_, host, base_ + offset, bytes, cudaMemcpyDeviceToHost,
                 "device-to-host", what);
  }

  void compute_waits(const storage::Token &t) override {
    if (t.done()) {
      t.wait(); // nothing to order; throws the copy's error
      return;
    }
    cudaEvent_t after = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = in_flight_.find(t.completion().get());
      if (it != in_flight_.end()) {
        after = it->second.event;
        // Under the lock: reap_locked cannot recycle the event before the
        // wait has captured its recording.
        SPW_CUDA(cudaStreamWaitEvent(compute_, after, 0));
      }
    }
    // Not a copy of this memory (an I/O token, say): only the host can
    // wait for it.
    if (!after)
      t.wait();
  }

private:
  struct InFlight {
    std::shared_ptr<storage::Completion> completion;
    cudaEvent_t event; // recorded on the copy stream after the copy
  };


  storage::Token issue(cudaStream_t stream, void *dst, const void *src,
                       uint64_t bytes, cudaMemcpyKind kind, const char *dir,
                       const std::string &what) {
    if (bytes == 0)
      return storage::Token();
    auto completion = std::make_shared<storage::Completion>(1);
    // Queued compute work (the device's AdamW updates) first: the copy is
    // ordered after everything issued before it.
    if (launch_queued_)
      launch_queued_();
    std::lock_guard<std::mutex> lock(mu_);
    reap_locked();
    cudaEvent_t event = nullptr;
    try {
      if (!free_events_.empty()) {
        event = free_events_.back();
        free_events_.pop_back();
      } else {
        SPW_CUDA(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
      }
      // After the compute work issued so far (one event for every copy:
      // a wait takes the recording current when it is made, and the lock
      // keeps record and wait together).
      SPW_CUDA(cudaEventRecord(issued_, compute_));
      SPW_CUDA(cudaStreamWaitEvent(stream, issued_, 0));
      SPW_CUDA(cudaMemcpyAsync(dst, src, size_t(bytes), kind, stream));
      SPW_CUDA(cudaEventRecord(event, stream));
      auto done = std::make_unique<Done>(
          Done{completion, std::string(dir) + " copy of '" + what + "'"});
      // cudaStreamAddCallback, not cudaLaunchHostFunc: its callback runs
      // even after a device error, and is told the error, so the token
      // fails instead of never completing.
      SPW_CUDA(cudaStreamAddCallback(stream, copy_done, done.get(), 0));
      done.release(); // copy_done owns it now
    } catch (const CudaError &e) {
      if (event)
        free_events_.push_back(event);
      fail("%s copy of '%s' (%s): %s", dir, what.c_str(),
           storage::human_bytes(bytes).c_str(), e.what());
    }
    in_flight_.emplace(completion.get(), InFlight{completion, event});
    return storage::Token(completion);
  }

  // Copies whose callbacks ran: their events are complete, and a later
  // recording cannot affect a wait made before it, so they are reused.
  void reap_locked() {
    for (auto it = in_flight_.begin(); it != in_flight_.end();)
      if (it->second.completion->done()) {
        free_events_.push_back(it->second.event);
        it = in_flight_.erase(it);
      } else {
        ++it;
      }
  }

  void release() {
    // Every callback runs before the streams drain, so every token handed
    // out completes. Errors here have nowhere to go.
    if (h2d_)
      cudaStreamSynchronize(h2d_);
    if (d2h_)
      cudaStreamSynchronize(d2h_);
    for (auto &[c, f] : in_flight_)
      cudaEventDestroy(f.event);
    in_flight_.clear();
    for (cudaEvent_t e : free_events_)
      cudaEventDestroy(e);
    free_events_.clear();
    if (issued_)
      cudaEventDestroy(issued_);
    if (h2d_)
      cudaStreamDestroy(h2d_);
    if (d2h_)
      cudaStreamDestroy(d2h_);
    if (base_)
      cudaFree(base_);
    issued_ = nullptr;
    h2d_ = d2h_ = nullptr;
    base_ = nullptr;
  }

  cudaStream_t compute_;
  cudaStream_t h2d_ = nullptr, d2h_ = nullptr;
  cudaEvent_t issued_ = nullptr; // the compute stream's mark at an issue
  std::function<void()> launch_queued_;
  char *base_ = nullptr;
  uint64_t size_;
  std::mutex mu_;
  std::unordered_map<const storage::Completion *, InFlight> in_flight_;
  std::vector<cudaEvent_t> free_events_;
};

} // namespace

std::unique_ptr<storage::DeviceMemory>
make_cuda_tier_memory(uint64_t bytes, cudaStream_t compute,
                      std::function<void()> launch_queued) {
  if (bytes == 0)
    fail("GPU arena: size 0");
  return std::make_unique<CudaTierMemory>(bytes, compute,
                                          std::move(launch_queued));
}

} // namespace spw::cuda
