//===- parallel.cpp - the CPU kernels' thread pool ------------------------===//
//
// Workers sleep on a condition variable between jobs after a short spin (a
// step issues a few hundred kernels back to back; waking a sleeping thread
// costs tens of microseconds, a spin only while the next kernel is coming).
// A job's chunks are claimed through an atomic counter, so a slow thread
// delays nothing it has not claimed; the chunk boundaries themselves are
// fixed (parallel.h).
//
//===----------------------------------------------------------------------===//

#include "cpu/parallel.h"

#include "support.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <sched.h>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace spw::cpu {
namespace {

void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// True on the pool's workers and on a thread running a job's chunks: a
// parallel_for there runs its chunks in the caller.
thread_local bool t_inside = false;

class Pool {
public:
  explicit Pool(int threads) {
    for (int i = 1; i < threads; ++i)
      workers_.emplace_back([this] { work(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
      ++generation_;
    }
    cv_.notify_all();
    for (std::thread &t : workers_)
      t.join();
  }

  // False when another thread is running a job on the pool.
  bool try_run(int64_t chunks, const std::function<void(int64_t)> &chunk) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock())
      return false;
    {
      std::lock_guard<std::mutex> l(mu_);
      job_ = &chunk;
      chunks_ = chunks;
      next_.store(0, std::memory_order_relaxed);
      done_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    t_inside = true;
    claim(chunk, chunks);
    t_inside = false;
    // No worker picks the job up after this; those that did are counted in
    // active_ and may still run its last chunks.
    {
      std::lock_guard<std::mutex> l(mu_);
      job_ = nullptr;
    }
    while (done_.load(std::memory_order_acquire) < chunks ||
           active_.load(std::memory_order_acquire) > 0)
      cpu_relax();
    return true;
  }

private:
  void claim(const std::function<void(int64_t)> &chunk, int64_t chunks) {
    for (;;) {
      const int64_t c = next_.fetch_add(1, std::memory_order_relaxed);
      if (c >= chunks)
        return;
      chunk(c);
      done_.fetch_add(1, std::memory_order_release);
    }
  }

  void work() {
    t_inside = true; // a kernel's chunk that calls parallel_for runs it here
    uint64_t seen = 0;
    for (;;) {
      // Spin a little for the next job, then sleep.
      for (int i = 0; i < 20000 &&
                      generation_.load(std::memory_order_acquire) == seen;
           ++i)
        cpu_relax();
      const std::function<void(int64_t)> *job;
      int64_t chunks;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return generation_.load() != seen; });
        seen = generation_.load();
        if (stop_)
          return;
        job = job_;
        chunks = chunks_;
        if (job)
          active_.fetch_add(1, std::memory_order_relaxed);
      }
      if (job) {
        claim(*job, chunks);
        active_.fetch_sub(1, std::memory_order_release);
      }
    }
  }

  std::mutex busy_; // held by the thread running a job
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  const std::function<void(int64_t)> *job_ = nullptr;
  int64_t chunks_ = 0;
  std::atomic<int64_t> next_{0}, done_{0};
  std::atomic<int> active_{0}; // workers holding the current job
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

KernelSet g_set = KernelSet::Fast;
int g_threads = 0; // 0: not configured yet
Pool *g_pool = nullptr;
std::once_flag g_pool_once;

int configured_threads() {
  if (g_threads == 0)
    g_threads = available_cpus();
  return g_threads;
}

Pool &pool() {
  std::call_once(g_pool_once, [] {
    // Never destroyed: kernels may run from other threads' destructors
    // at exit, and the workers hold no resources the OS does not reclaim.
    g_pool = new Pool(configured_threads());
  });
  return *g_pool;
}

} // namespace

const char *kernel_set_name(KernelSet k) {
  return k == KernelSet::Fast ? "fast" : "reference";
}

int available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0)
      return n;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? int(hw) : 1;
}

void configure_kernels(KernelSet set, int threads) {
  if (g_pool)
    fail("the kernel threads are configured after a kernel ran");
  g_set = set;
  g_threads = threads > 0 ? threads : available_cpus();
}

KernelSet kernel_set() { return g_set; }

int threads() {
  return g_set == KernelSet::Reference ? 1 : configured_threads();
}

int64_t chunk_count(int64_t n, int64_t grain) {
  if (n <= 0)
    return 0;
  const int64_t g = grain > 0 ? grain : 1;
  const int64_t by_grain = (n + g - 1) / g;
  return std::min<int64_t>(threads(), by_grain);
}

void parallel_for_chunks(int64_t n, int64_t grain,
                         const std::function<void(int64_t, int64_t)> &f) {
  const int64_t chunks = chunk_count(n, grain);
  if (chunks <= 0)
    return;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(chunks));
  const std::function<void(int64_t)> chunk = [&](int64_t c) {
    const int64_t begin = n * c / chunks, end = n * (c + 1) / chunks;
    try {
      f(begin, end);
    } catch (...) {
      errors[size_t(c)] = std::current_exception();
    }
  };
  if (chunks == 1 || t_inside || !pool().try_run(chunks, chunk))
    for (int64_t c = 0; c < chunks; ++c)
      chunk(c);
  for (std::exception_ptr &e : errors)
    if (e)
      std::rethrow_exception(e);
}

namespace testing {
ScopedKernelSet::ScopedKernelSet(KernelSet set) : saved_(g_set) { g_set = set; }
ScopedKernelSet::~ScopedKernelSet() { g_set = saved_; }
ScopedThreads::ScopedThreads(int threads) : saved_(configured_threads()) {
  g_threads = threads > 0 ? threads : 1;
}
ScopedThreads::~ScopedThreads() { g_threads = saved_; }
} // namespace testing

} // namespace spw::cpu
