//===- loopback_memory.cpp - the loopback device's GPU tier ---------------===//

#include "loopback_memory.h"

#include "device.h"
#include "storage/tensor_store.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

namespace spw {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// dst[i] = src[i] ^ kLoopbackScramble: either direction of the scrambling.
void scramble_copy(void *dst, const void *src, uint64_t bytes) {
  auto *d = static_cast<uint8_t *>(dst);
  const auto *s = static_cast<const uint8_t *>(src);
  for (uint64_t i = 0; i < bytes; ++i)
    d[i] = uint8_t(s[i] ^ kLoopbackScramble);
}

class LoopbackTierMemory final : public storage::DeviceMemory {
public:
  LoopbackTierMemory(char *base, uint64_t bytes, const LoopbackCopyOptions &o)
      : base_(base), size_(bytes), options_(o) {
    h2d_.d2h = false;
    d2h_.d2h = true;
    h2d_.thread = std::thread(run, &h2d_);
    d2h_.thread = std::thread(run, &d2h_);
  }
  ~LoopbackTierMemory() override {
    // Queued copies still run (their delays cut short): a token handed out
    // always completes.
    for (Engine *e : {&h2d_, &d2h_}) {
      {
        std::lock_guard<std::mutex> lock(e->mu);
        e->stop = true;
      }
      e->cv.notify_all();
      e->thread.join();
    }
  }

  const char *kind() const override { return "loopback"; }
  uint64_t size() const override { return size_; }
  void *address(uint64_t offset) const override { return base_ + offset; }

  storage::Token copy_h2d(uint64_t offset, const void *host, uint64_t bytes,
                          const std::string &what) override {
    check_copy(offset, host, bytes, "host-to-device", what, "loopback GPU");
    return issue(h2d_, base_ + offset, host, bytes,
                 uint8_t(kPoisonByte ^ kLoopbackScramble));
  }
  storage::Token copy_d2h(void *host, uint64_t offset, uint64_t bytes,
                          const std::string &what) override {
    check_copy(offset, host, bytes, "device-to-host", what, "loopback GPU");
    return issue(d2h_, host, base_ + offset, bytes, kPoisonByte);
  }
  // Kernels run on the thread that issues them.
  void compute_waits(const storage::Token &t) override { t.wait(); }

private:
  struct Copy {
    void *dst;
    const void *src;
    uint64_t bytes;
    int64_t delay_us;
    std::shared_ptr<storage::Completion> done;
  };
  // One copy engine: a FIFO and the thread that drains it.
  struct Engine {
    bool d2h = false;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Copy> queue;
    uint64_t issued = 0; // copies issued so far: the next one's delay index
    bool stop = false;
    std::thread thread;
  };


  storage::Token issue(Engine &e, void *dst, const void *src, uint64_t bytes,
                       uint8_t poison) {
    if (bytes == 0)
      return storage::Token();
    auto done = std::make_shared<storage::Completion>(1);
    {
      std::lock_guard<std::mutex> lock(e.mu);
      // Under the lock, so the poison and the queue order agree when copies
      // are issued from several threads.
      std::memset(dst, poison, bytes);
      const int64_t delay = loopback_copy_delay_us(options_, e.d2h, e.issued++);
      e.queue.push_back({dst, src, bytes, delay, done});
    }
    e.cv.notify_all();
    return storage::Token(done);
  }

  static void run(Engine *e) {
    for (;;) {
      Copy c;
      {
        std::unique_lock<std::mutex> lock(e->mu);
        e->cv.wait(lock, [&] { return e->stop || !e->queue.empty(); });
        if (e->queue.empty())
          return; // stopping, and everything queued is done
        c = std::move(e->queue.front());
        e->queue.pop_front();
        if (c.delay_us > 0)
          e->cv.wait_for(lock, std::chrono::microseconds(c.delay_us),
                         [&] { return e->stop; });
      }
      scramble_copy(c.dst, c.src, c.bytes);
      c.done->piece_done();
    }
  }

  char *base_;
  uint64_t size_;
  LoopbackCopyOptions options_;
  Engine h2d_, d2h_;
};

} // namespace

int64_t loopback_copy_delay_us(const LoopbackCopyOptions &o, bool d2h,
                               uint64_t index) {
  if (o.seed == 0 || o.max_delay_us <= 0)
    return 0;
  // Counter-based: the delay depends on (seed, direction, index) only.
  const uint64_t h =
      splitmix64(splitmix64(o.seed) ^ (2 * index + (d2h ? 1 : 0)));
  return int64_t(h % (uint64_t(o.max_delay_us) + 1));
}

std::unique_ptr<storage::DeviceMemory>
make_loopback_tier_memory(char *device_base, uint64_t bytes,
                          const LoopbackCopyOptions &o) {
  if (!device_base)
    fail("loopback GPU tier: no device buffer");
  if (bytes == 0)
    fail("GPU arena: size 0");
  if (o.max_delay_us < 0)
    fail("loopback GPU tier: max_delay_us %lld is negative",
         (long long)o.max_delay_us);
  return std::make_unique<LoopbackTierMemory>(device_base, bytes, o);
}

} // namespace spw
