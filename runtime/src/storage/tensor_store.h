//===- tensor_store.h - tensors placed over GPU, pinned host and SSD ------===//
//
// The tiered tensor store: every tensor the executor knows has a name, a
// size and, per tier, an optional extent (offset, length) in that tier's
// arena:
//
//   Gpu   a DeviceMemory arena (CUDA device memory; on the CPU backend a
//         host arena of the budgeted size, so plans and byte traffic are the
//         same as on a GPU)
//   Host  one block of the engine's PinnedPool (registered with the rings,
//         so SSD transfers use fixed buffers)
//   Ssd   a SwapSpace (preallocated O_DIRECT files striped over directories)
//
// Extents are allocated first-fit by the store, or placed at an explicit
// offset (the planner assigns static offsets); overlapping placements are
// refused. Moves along the four links (Ssd->Host, Host->Gpu, Gpu->Host,
// Host->Ssd) are asynchronous and return Tokens; counters of the bytes moved
// per link count every move whose token completed successfully.
//
// Hazards are checked, not silently ordered: a move may not read a copy that
// an in-flight move is still filling, nor overwrite a copy an in-flight move
// is reading or filling (spw::Error naming the tensor and the other move;
// wait on its token first). release() waits for the moves that use the copy.
//
// Thread-safe: moves, placements and queries may come from several threads.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_STORAGE_TENSOR_STORE_H
#define SPILLWAY_RUNTIME_STORAGE_TENSOR_STORE_H

#include "spillway/runtime/tier.h"
#include "storage/io_engine.h"

#include <array>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace spw::storage {

// The ABI's tiers (spillway/runtime/tier.h), by the same numbers.
enum class Tier : uint8_t { Gpu = SPW_TIER_GPU, Host = SPW_TIER_HOST, Ssd = SPW_TIER_SSD };
constexpr int kNumTiers = SPW_NUM_TIERS;
const char *tier_name(Tier t); // "gpu", "host", "ssd"
// Parses "gpu" | "host" | "ssd"; throws spw::Error.
Tier parse_tier(const std::string &s);

// ---- GPU memory ---------------------------------------------------------------

// The GPU tier: one arena allocated once, and asynchronous copies between it
// and host memory. The CUDA backend implements it with a device allocation,
// an H2D and a D2H stream and events; CpuDeviceMemory below is the CPU
// backend's. Copies in one direction complete in submission order.
class DeviceMemory {
public:
  virtual ~DeviceMemory() = default;
  virtual const char *kind() const = 0; // "cpu", "cuda"
  virtual uint64_t size() const = 0;    // bytes in the arena
  // The device address of arena offset `offset` (on the CPU backend an
  // ordinary pointer).
  virtual void *address(uint64_t offset) const = 0;
  // Copies `bytes` from host memory to the arena at `offset` (or back).
  // Returns at once; `what` names the tensor in errors. The range must lie
  // in the arena (spw::Error otherwise, before anything is queued).
  virtual Token copy_h2d(uint64_t offset, const void *host, uint64_t bytes,
                         const std::string &what) = 0;
  virtual Token copy_d2h(void *host, uint64_t offset, uint64_t bytes,
                         const std::string &what) = 0;
  // Compute work the device issues after this call waits for `t` (a token of this memory's
  // copy_h2d). CUDA: cudaStreamWaitEvent on the compute stream; the host does not block. The CPU
  // and loopback devices compute on the calling thread: t.wait().
  virtual void compute_waits(const Token &t) = 0;

protected:
  // What every copy checks before anything is queued (spw::Error naming
  // `what` otherwise): the range lies in the arena, called `arena` in the
  // message ("GPU", "loopback GPU"), and a host buffer is given.
  void check_copy(uint64_t offset, const void *host, uint64_t bytes,
                  const char *dir, const std::string &what,
                  const char *arena = "GPU") const;
};

// "GPU memory" on the CPU backend: a host arena of the budgeted size. Each
// direction has its own copy worker thread (as a GPU has a copy engine per
// direction), so tokens complete asynchronously like real ones.
class CpuDeviceMemory : public DeviceMemory {
public:
  explicit CpuDeviceMemory(uint64_t bytes);
  ~CpuDeviceMemory() override; // finishes queued copies, then stops
  const char *kind() const override { return "cpu"; }
  uint64_t size() const override { return size_; }
  void *address(uint64_t offset) const override { return base_ + offset; }
  Token copy_h2d(uint64_t offset, const void *host, uint64_t bytes,
                 const std::string &what) override;
  Token copy_d2h(void *host, uint64_t offset, uint64_t bytes,
                 const std::string &what) override;
  void compute_waits(const Token &t) override { t.wait(); }

private:
  struct Copy {
    void *dst;
    const void *src;
    uint64_t bytes;
    std::shared_ptr<Completion> done;
  };
  struct Worker {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Copy> queue;
    bool stop = false;
    std::thread thread;
  };
  Token enqueue(Worker &w, void *dst, const void *src, uint64_t bytes);
  static void run(Worker *w);

  char *base_ = nullptr;
  uint64_t size_ = 0;
  Worker h2d_, d2h_;
};

// ---- the store ------------------------------------------------------------------

using TensorId = uint32_t;

// A range of one tier's arena. `length` is the tensor's size rounded up to
// the tier's granule (see TensorStore::granule).
struct Extent {
  uint64_t offset = 0;
  uint64_t length = 0;
};

// Bytes moved per link, counting the moves that completed successfully.
// h2d / d2h count the tensor's bytes; ssd_read / ssd_write count what the
// SSD transferred: the tensor's bytes rounded up to the swap alignment
// (O_DIRECT transfers whole aligned blocks).
struct LinkBytes {
  uint64_t ssd_read = 0, ssd_write = 0, h2d = 0, d2h = 0;
  bool operator==(const LinkBytes &) const = default;
};

struct TierUsage {
  uint64_t capacity = 0; // bytes the tier's arena holds (0: tier absent)
  uint64_t in_use = 0;   // bytes covered by extents now
  uint64_t peak = 0;     // most bytes ever covered at once
};

struct TensorStoreConfig {
  // Bytes of the PinnedPool the host tier takes as its arena (one block,
  // allocated at construction). 0: the whole pool.
  uint64_t host_bytes = 0;
};

class TensorStore {
public:
  // `gpu` and `pool` must outlive the store; `ssd` may be null (no SSD
  // tier) and must outlive it otherwise. Throws spw::Error when the pool has
  // no free block of host_bytes.
  TensorStore(DeviceMemory &gpu, PinnedPool &pool, SwapSpace *ssd,
              const TensorStoreConfig &config = {});
  ~TensorStore(); // waits for every move in flight
  TensorStore(const TensorStore &) = delete;
  TensorStore &operator=(const TensorStore &) = delete;

  // Declares a tensor of `bytes` bytes (> 0); names are unique.
  // `tag` (0..kNumTags-1) groups tensors for moved_by_tag (the offload
  // plan's block classes).
  TensorId add(const std::string &name, uint64_t bytes, int tag = 0);
  // Throws spw::Error for an unknown name.
  TensorId id(const std::string &name) const;
  std::optional<TensorId> find(const std::string &name) const;
  const std::string &name(TensorId t) const;
  uint64_t bytes(TensorId t) const;
  size_t num_tensors() const;

  // Extent offsets and lengths on `tier` are multiples of this: 256 on the
  // GPU (CUDA's allocation alignment), the O_DIRECT alignment (>= 4 KiB) on
  // host and SSD, so the host copy can be transferred to the SSD as is.
  uint64_t granule(Tier tier) const;
  uint64_t extent_length(TensorId t, Tier tier) const;

  // Gives the tensor an extent on `tier`: first-fit, or at `offset`
  // (which must be a multiple of granule(tier), lie in the arena and overlap
  // no other extent). Throws spw::Error when the tensor already has one
  // there, on an overlap (naming the other tensor), or when the tier has no
  // room (how much is needed, free, and the largest free range).
  Extent allocate(TensorId t, Tier tier);
  Extent place(TensorId t, Tier tier, uint64_t offset);
  // Frees the tensor's extent on `tier` (nothing if it has none), after
  // waiting for the moves in flight that read or fill it.
  void release(TensorId t, Tier tier);

  std::optional<Extent> extent(TensorId t, Tier tier) const;
  bool resident(TensorId t, Tier tier) const { return extent(t, tier).has_value(); }
  // Where the tensor's copy on the GPU / host tier lives (spw::Error if it
  // has none there). The executor's kernels and the tests use these.
  void *gpu_address(TensorId t) const;
  void *host_address(TensorId t) const;

  // Moves a copy along one link: Ssd->Host, Host->Gpu, Gpu->Host,
  // Host->Ssd. The source copy stays. The destination extent is allocated
  // first-fit when the tensor has none there. Returns at once; the token
  // fails with the engine's (or device's) error, which names the tensor.
  // Throws spw::Error at once for an unknown tensor, a link that does not
  // exist, a tensor with no copy on `from`, no room on `to`, or a hazard
  // with a move in flight. `prio` is handed to the I/O engine for SSD moves.
  Token move(TensorId t, Tier from, Tier to,
             Priority prio = Priority::Demand);
  Token fetch(TensorId t, Priority prio = Priority::Prefetch) { // Ssd->Host
    return move(t, Tier::Ssd, Tier::Host, prio);
  }
  Token upload(TensorId t) { return move(t, Tier::Host, Tier::Gpu); }
  Token download(TensorId t) { return move(t, Tier::Gpu, Tier::Host); }
  Token write_back(TensorId t, Priority prio = Priority::WriteBack) {
    return move(t, Tier::Host, Tier::Ssd, prio);
  }

  // Counters of the moves whose tokens have completed successfully.
  LinkBytes moved() const;
  // The same for the tensors added with `tag`.
  static constexpr int kNumTags = 8;
  LinkBytes moved_by_tag(int tag) const;
  // Moves whose tokens completed with an error.
  uint64_t failed_moves() const;
  TierUsage usage(Tier tier) const;
  // Waits for every move in flight (errors are left to their tokens).
  void wait_all();

private:
  struct Copy {
    std::optional<Extent> extent;
    int readers = 0;        // in-flight moves reading this copy
    bool filling = false;   // an in-flight move is writing it
    std::string bad;        // the move that last filled it failed: why
  };
  struct Tensor {
    std::string name;
    uint64_t bytes = 0;
    std::array<Copy, kNumTiers> copies;
    int tag = 0;
  };
  struct Pending {
    TensorId tensor;
    Tier from, to;
    uint64_t link_bytes;
    Token token;
  };
  struct Arena {
    uint64_t capacity = 0, granule = 1, in_use = 0, peak = 0;
    std::map<uint64_t, std::pair<uint64_t, TensorId>> used; // off -> (len, t)
  };

  Tensor &tensor_locked(TensorId t);
  const Tensor &tensor_locked(TensorId t) const;
  Arena &arena(Tier tier) { return arenas_[int(tier)]; }
  const Arena &arena(Tier tier) const { return arenas_[int(tier)]; }
  void check_tier(Tier tier) const;
  Extent insert_locked(TensorId t, Tier tier, uint64_t offset, bool explicit_);
  std::optional<uint64_t> first_fit_locked(const Arena &a, uint64_t len) const;
  // Retires the moves whose tokens are done: counters, hazard state.
  void reap_locked() const;
  std::string pending_desc_locked(TensorId t, Tier tier) const;

  DeviceMemory &gpu_;
  PinnedPool &pool_;
  SwapSpace *ssd_;
  char *host_base_ = nullptr;

  mutable std::mutex mu_;
  // A deque: name() hands out references that must survive later add()s.
  // Mutable: queries retire completed moves (reap_locked) before answering.
  mutable std::deque<Tensor> tensors_;
  std::unordered_map<std::string, TensorId> by_name_;
  std::array<Arena, kNumTiers> arenas_;
  mutable std::vector<Pending> pending_;
  mutable LinkBytes moved_;
  mutable std::array<LinkBytes, kNumTags> moved_by_tag_{};
  mutable uint64_t failed_ = 0;
};

} // namespace spw::storage

#endif
