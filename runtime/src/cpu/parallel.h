//===- parallel.h - the CPU kernels' threads and kernel set ---------------===//
//
// One process-wide pool of kernel threads (the caller plus threads() - 1
// workers) and the choice between the two CPU kernel sets:
//
//   fast       (default) BLAS GEMMs, blocked attention, vectorized and
//              threaded row and elementwise kernels; float accumulation
//              where the reference accumulates in double.
//   reference  the single-threaded double-accumulating kernels, for the
//              tests that compare with NumPy at tight tolerances
//              (EXE --kernels reference).
//
// Determinism: parallel_for cuts [0, n) into chunks that depend only on n,
// the grain and threads(), never on which thread is free, and every kernel
// computes each output element within one chunk in a fixed order, so the
// same executable, thread count and inputs give the same bits run to run.
// When the pool is busy (a kernel called from a second thread, e.g. the CPU
// optimizer of an offload plan while the step computes), the caller runs
// the same chunks itself, in order: the same bits again.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_CPU_PARALLEL_H
#define SPILLWAY_RUNTIME_SRC_CPU_PARALLEL_H

#include <cstdint>
#include <functional>

namespace spw::cpu {

enum class KernelSet : int { Fast = 0, Reference = 1 };
const char *kernel_set_name(KernelSet k);

// Set once at start (spw_main, from --kernels and --threads) before any
// kernel runs; threads 0 means the CPUs this process may run on.
void configure_kernels(KernelSet set, int threads);
KernelSet kernel_set();
inline bool fast_kernels() { return kernel_set() == KernelSet::Fast; }
int threads();
// The CPUs this process may run on (sched_getaffinity), at least 1.
int available_cpus();

// The chunk count parallel_for uses for n items of at least `grain` each.
int64_t chunk_count(int64_t n, int64_t grain);

// Runs f(begin, end) over [0, n) cut into chunk_count(n, grain) contiguous
// chunks of near-equal size, on the pool (the caller takes chunk 0). An
// exception thrown by f is rethrown here after every chunk has finished
// (the first one, in chunk order).
void parallel_for_chunks(int64_t n, int64_t grain,
                         const std::function<void(int64_t, int64_t)> &f);

template <class F> void parallel_for(int64_t n, int64_t grain, F &&f) {
  if (n <= 0)
    return;
  if (chunk_count(n, grain) <= 1) {
    f(int64_t(0), n);
    return;
  }
  parallel_for_chunks(n, grain, std::function<void(int64_t, int64_t)>(f));
}

namespace testing {
// Tests only: the kernel set, or the thread count the chunks are cut for,
// for this object's lifetime (the pool keeps its workers; a job with more
// chunks than threads has them claimed in turn).
class ScopedKernelSet {
public:
  explicit ScopedKernelSet(KernelSet set);
  ~ScopedKernelSet();

private:
  KernelSet saved_;
};
class ScopedThreads {
public:
  explicit ScopedThreads(int threads);
  ~ScopedThreads();

private:
  int saved_;
};
} // namespace testing

} // namespace spw::cpu

#endif
