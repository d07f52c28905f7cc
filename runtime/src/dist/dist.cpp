//===- dist.cpp - data-parallel ranks over Open MPI
//-------------------------===//
//
// Open MPI loaded at start (dist.h says why, and why by these names). The
// declarations below are mpi.h's for Open MPI 4 and 5 with every handle a
// pointer; nothing from mpi.h is compiled in, so building needs no MPI.
//
//===----------------------------------------------------------------------===//

#include "dist/dist.h"

#include "dist/gloo.h"
#include "support.h"
#include "trace.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <dlfcn.h>
#include <functional>
#include <mutex>
#include <pthread.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace spw::dist {
namespace {

using Handle = void *; // MPI_Comm, MPI_Datatype, MPI_Op: pointers in Open MPI
constexpr int kThreadFunneled = 1;                  // MPI_THREAD_FUNNELED
constexpr int kThreadSerialized = 2;                // MPI_THREAD_SERIALIZED
void *const kInPlace = reinterpret_cast<void *>(1); // MPI_IN_PLACE

struct Mpi {
  int (*init_thread)(int *, char ***, int, int *);
  int (*finalize)();
  int (*abort)(Handle, int);
  int (*comm_rank)(Handle, int *);
  int (*comm_size)(Handle, int *);
  int (*allreduce)(const void *, void *, int, Handle, Handle, Handle);
  int (*allgather)(const void *, int, Handle, void *, int, Handle, Handle);
  int (*allgatherv)(const void *, int, Handle, void *, const int *, const int *,
                    Handle, Handle);
  int (*gatherv)(const void *, int, Handle, void *, const int *, const int *,
                 Handle, int, Handle);
  int (*reduce_scatter)(const void *, void *, const int *, Handle, Handle,
                        Handle);
  int (*bcast)(void *, int, Handle, int, Handle);
  int (*barrier)(Handle);
  int (*library_version)(char *, int *);
  Handle comm_world, f32, f64, u64, u16, byte, sum, min, max;
};

struct State {
  int rank = 0, size = 1;
  bool joined = false;
  bool gloo = false; // a torchrun-style job (gloo.h), else mpirun's
  // The library may be called from the exchange thread (one thread at a
  // time): Gloo, or Open MPI at MPI_THREAD_SERIALIZED.
  bool serialized = false;
  bool threaded = false; // use_exchange_thread
  Mpi mpi{};
  Traffic traffic;
};
State g;

// An environment variable as a non-negative int, or -1 when unset.
int env_int(const char *name) {
  const char *v = std::getenv(name);
  if (!v || !*v)
    return -1;
  char *end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end || x < 0 || x > INT_MAX)
    fail("%s=%s is not a rank count or index", name, v);
  return int(x);
}

template <typename F> void load(void *lib, F &fn, const char *name) {
  fn = reinterpret_cast<F>(::dlsym(lib, name));
  if (!fn)
    fail("Open MPI's libmpi has no '%s' (is it Open MPI 4 or later?)", name);
}

Handle object(void *lib, const char *name) {
  void *p = ::dlsym(lib, name);
  if (!p)
    fail("the loaded libmpi has no '%s': it is not Open MPI, whose ABI this "
         "executable speaks (install Debian's openmpi-bin and "
         "libopenmpi3, and launch with its mpirun)",
         name);
  return p;
}

// What a rank says when mpirun ends the job under it (SIGTERM: another
// rank failed or died, or the job was interrupted): it would otherwise
// vanish mid-collective without a word. Async-signal-safe: a prepared
// message and write(2).
// Before the first step (a start-up failure elsewhere, most often) there is
// nothing to resume: the early message says so.
char g_stopped[256], g_stopped_early[320];
size_t g_stopped_len = 0, g_stopped_early_len = 0;
volatile sig_atomic_t g_trained = 0;
extern "C" void on_stopped(int sig) {
  if (g_trained ? g_stopped_len : g_stopped_early_len)
    (void)!::write(2, g_trained ? g_stopped : g_stopped_early,
                   g_trained ? g_stopped_len : g_stopped_early_len);
  ::_exit(128 + sig);
}

void check(int rc, const char *what) {
  // MPI's default handler (MPI_ERRORS_ARE_FATAL) ends the job before a
  // failing call returns; this is for a handler that returns.
  if (rc != 0)
    fail("%s failed (MPI error %d)", what, rc);
}

// MPI counts are ints: a long buffer goes in pieces.
constexpr int64_t kPiece = int64_t(1) << 30;

// Per-rank counts and displacements (elements) as MPI's ints. A ZeRO shard
// is one parameter's 1/N: past 2^31 elements (8 GiB of float32 on one rank)
// MPI's vector collectives cannot address it.
// A per-rank list (counts, displacements) has one value per rank.
void check_per_rank(const std::vector<int64_t> &v, const char *what) {
  if (v.size() != size_t(g.size))
    fail("%s: %zu per-rank values for %d ranks", what, v.size(), g.size);
}

std::vector<int> mpi_ints(const std::vector<int64_t> &v, const char *what) {
  check_per_rank(v, what);
  std::vector<int> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] < 0 || v[i] > INT_MAX)
      fail("%s: %lld elements for rank %zu, outside what one MPI call "
           "addresses (2^31 - 1)",
           what, (long long)v[i], i);
    out[i] = int(v[i]);
  }
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

// The exchange thread (dist.h, start_reduce_scatter_sum): jobs run one at
// a time in the order started. A failed job's error is kept; the jobs
// after it are skipped (the ranks' order of collectives is broken) and
// every wait throws it. Made at the first job and never destroyed: a rank
// that fails exits with the thread perhaps still in a collective.
class Exchanges {
public:
  Ticket start(std::function<void(Traffic &)> job) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!running_) {
      running_ = true;
      std::thread([this] { run(); }).detach();
    }
    queue_.push_back(std::move(job));
    cv_.notify_all();
    return ++started_;
  }
  // Waits until job `ticket` (and every one before it) is done.
  void wait(Ticket ticket) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_ >= ticket; });
    if (error_)
      std::rethrow_exception(error_);
  }
  // Waits until no job is left: the main thread's collectives call the
  // library only then.
  void idle() {
    Ticket last;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (done_ == started_)
        return;
      last = started_;
    }
    wait(last);
  }
  // A rank that failed: the queued jobs are dropped (the job is ending),
  // and the one running is given `seconds` to end. Returns whether none is
  // left running.
  bool abandon(double seconds) {
    std::unique_lock<std::mutex> lock(mu_);
    done_ += queue_.size();
    queue_.clear();
    cv_.notify_all();
    return cv_.wait_for(lock, std::chrono::duration<double>(seconds),
                        [&] { return done_ == started_; });
  }
  // What the jobs done so far carried (dist::traffic adds it).
  Traffic traffic() {
    std::lock_guard<std::mutex> lock(mu_);
    return traffic_;
  }

private:
  void run() {
    // The signal handlers (a launcher's SIGTERM) run on the main thread.
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    for (;;) {
      std::function<void(Traffic &)> job;
      bool skip;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return !queue_.empty(); });
        job = std::move(queue_.front());
        queue_.pop_front();
        skip = error_ != nullptr;
      }
      Traffic t;
      std::exception_ptr error;
      if (!skip) {
        try {
          job(t);
        } catch (...) {
          error = std::current_exception();
        }
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (error && !error_)
        error_ = error;
      traffic_.reduce_scattered += t.reduce_scattered;
      traffic_.seconds += t.seconds;
      traffic_.overlapped += t.overlapped;
      ++done_;
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void(Traffic &)>> queue_;
  Ticket started_ = 0, done_ = 0;
  bool running_ = false;
  std::exception_ptr error_;
  Traffic traffic_;
};
Exchanges *g_exchanges = nullptr; // made by the first job (main thread)

// Before the main thread calls the library: the exchange thread is idle.
void serialize() {
  if (g_exchanges)
    g_exchanges->idle();
}

// Installs the SIGTERM handler of a rank of a job (on_stopped) and its
// message: `launcher` says who stops a job ("mpirun ends").
void say_when_stopped(const char *launcher) {
  g_trained = 0;
  const int n = std::snprintf(
      g_stopped, sizeof g_stopped,
      "rank %d: stopped by SIGTERM, as %s a job when another rank fails or "
      "dies or the job is interrupted; with --checkpoint-dir, resume the job "
      "from its last complete checkpoint with --resume\n",
      g.rank, launcher);
  g_stopped_len = n > 0 ? std::min(size_t(n), sizeof g_stopped - 1) : 0;
  const int e = std::snprintf(
      g_stopped_early, sizeof g_stopped_early,
      "rank %d: stopped by SIGTERM before training started, as %s a job "
      "when another rank fails or dies or the job is interrupted: nothing "
      "was trained; when another rank failed at start-up, its error says "
      "what to fix\n",
      g.rank, launcher);
  g_stopped_early_len =
      e > 0 ? std::min(size_t(e), sizeof g_stopped_early - 1) : 0;
  std::signal(SIGTERM, on_stopped);
}

// torchrun's environment (RANK, WORLD_SIZE = `size` > 1, MASTER_ADDR,
// MASTER_PORT; LOCAL_RANK optional): the job meets at the store and runs
// its collectives over Gloo (gloo.h).
void join_torchrun_style(int size) {
  const int rank = env_int("RANK");
  if (rank < 0)
    fail("WORLD_SIZE=%d asks for a job of %d ranks without mpirun, but "
         "RANK is not set: launch with torchrun (`torchrun --nproc-per-node "
         "%d --no-python EXE ...`), which sets RANK, LOCAL_RANK, "
         "MASTER_ADDR and MASTER_PORT, or with `mpirun -np %d EXE ...`",
         size, size, size, size);
  if (rank >= size)
    fail("RANK=%d is not a rank of a job of WORLD_SIZE=%d ranks (0 .. %d)",
         rank, size, size - 1);
  if (const int local = env_int("LOCAL_RANK"); local >= size)
    fail("LOCAL_RANK=%d is not below WORLD_SIZE=%d", local, size);
  g.rank = rank;
  g.size = size;
  g.gloo = true;
  gloo::join(rank, size);
  g.joined = true;
  g.serialized = true; // a Gloo context serves one thread at a time
  // torchrun's workers know its run id; another launcher is not named.
  say_when_stopped(std::getenv("TORCHELASTIC_RUN_ID")
                       ? "torchrun ends"
                       : "the job's launcher ends");
}

} // namespace

int rank() { return g.rank; }
int local_rank() {
  if (!g.joined)
    return 0;
  // torchrun sets LOCAL_RANK; a hand launch on one machine may leave it
  // out, and then the rank is the machine's.
  const int r = env_int(g.gloo ? "LOCAL_RANK" : "OMPI_COMM_WORLD_LOCAL_RANK");
  return r < 0 ? (g.gloo ? g.rank : 0) : r;
}
int size() { return g.size; }
int local_size() {
  const int n =
      env_int(g.gloo ? "LOCAL_WORLD_SIZE" : "OMPI_COMM_WORLD_LOCAL_SIZE");
  return n > 0 && n <= g.size ? n : g.size;
}
bool binds_ranks() { return !g.gloo; }
std::string launch_command(int n) {
  if (!g.joined) // alone: either launcher
    return format("mpirun -np %d, or torchrun --nproc-per-node %d "
                  "--no-python",
                  n, n);
  return g.gloo ? format("torchrun --nproc-per-node %d --no-python", n)
                : format("mpirun -np %d", n);
}
const char *launcher() { return g.gloo ? "torchrun-style" : "mpirun"; }
const char *host_collectives() { return g.gloo ? "Gloo" : "MPI"; }

void init() {
  const int ompi_size = env_int("OMPI_COMM_WORLD_SIZE");
  const int torch_size = env_int("WORLD_SIZE");
  if (ompi_size < 0) {
    if (torch_size > 1)
      join_torchrun_style(torch_size);
    // A job of one: torch's single process. A RANK it cannot have, or no
    // ranks at all, is a launcher's mistake (N processes would each train
    // alone and write the same files).
    if (torch_size == 0)
      fail("WORLD_SIZE=0 is not a number of ranks: a job has 1 or more");
    if (const int rank = env_int("RANK"); torch_size == 1 && rank > 0)
      fail("RANK=%d is not a rank of a job of WORLD_SIZE=1 (its one rank is "
           "0): set WORLD_SIZE to the job's number of ranks",
           rank);
    return;
  }
  // RTLD_GLOBAL: Open MPI's components (dlopened by libmpi itself) resolve
  // libmpi's symbols from the global scope.
  void *lib = ::dlopen("libmpi.so.40", RTLD_NOW | RTLD_GLOBAL);
  if (!lib)
    fail("mpirun launched this process (OMPI_COMM_WORLD_SIZE=%d) but Open "
         "MPI's library cannot be loaded: %s; install it (Debian: apt-get "
         "install openmpi-bin) on every machine of the job",
         ompi_size, ::dlerror());
  Mpi &m = g.mpi;
  load(lib, m.library_version, "MPI_Get_library_version");
  char version[256 + 1] = {}; // MPI_MAX_LIBRARY_VERSION_STRING
  int len = 0;
  check(m.library_version(version, &len), "MPI_Get_library_version");
  if (!std::strstr(version, "Open MPI"))
    fail("libmpi.so.40 is '%.80s', not Open MPI, whose ABI this executable "
         "speaks; launch with Open MPI's mpirun",
         version);
  load(lib, m.init_thread, "MPI_Init_thread");
  load(lib, m.finalize, "MPI_Finalize");
  load(lib, m.abort, "MPI_Abort");
  load(lib, m.comm_rank, "MPI_Comm_rank");
  load(lib, m.comm_size, "MPI_Comm_size");
  load(lib, m.allreduce, "MPI_Allreduce");
  load(lib, m.allgather, "MPI_Allgather");
  load(lib, m.allgatherv, "MPI_Allgatherv");
  load(lib, m.gatherv, "MPI_Gatherv");
  load(lib, m.reduce_scatter, "MPI_Reduce_scatter");
  load(lib, m.bcast, "MPI_Bcast");
  load(lib, m.barrier, "MPI_Barrier");
  m.comm_world = object(lib, "ompi_mpi_comm_world");
  m.f32 = object(lib, "ompi_mpi_float");
  m.f64 = object(lib, "ompi_mpi_double");
  m.u64 = object(lib, "ompi_mpi_uint64_t");
  m.byte = object(lib, "ompi_mpi_byte");
  m.u16 = object(lib, "ompi_mpi_uint16_t");
  m.sum = object(lib, "ompi_mpi_op_sum");
  m.min = object(lib, "ompi_mpi_op_min");
  m.max = object(lib, "ompi_mpi_op_max");
  int provided = 0;
  check(m.init_thread(nullptr, nullptr, kThreadSerialized, &provided),
        "MPI_Init_thread");
  g.joined = true;
  check(m.comm_rank(m.comm_world, &g.rank), "MPI_Comm_rank");
  check(m.comm_size(m.comm_world, &g.size), "MPI_Comm_size");
  if (provided < kThreadFunneled)
    fail("Open MPI gives thread level %d; the runtime needs "
         "MPI_THREAD_FUNNELED at least (MPI_THREAD_SERIALIZED to overlap "
         "ZeRO stage 2's exchanges with the backward)",
         provided);
  // Below MPI_THREAD_SERIALIZED the exchanges run where they start.
  g.serialized = provided >= kThreadSerialized;
  if (g.size > 1) {
    say_when_stopped("mpirun ends");
  }
  if (g.size != ompi_size)
    fail("OMPI_COMM_WORLD_SIZE=%d, but Open MPI started a job of %d rank%s: "
         "this process was not launched by mpirun (the variable was set by "
         "hand?); launch with `mpirun -np %d EXE ...`, or unset it",
         ompi_size, g.size, g.size == 1 ? "" : "s", ompi_size);
  if (torch_size >= 0 && torch_size != g.size)
    fail("WORLD_SIZE=%d but mpirun started %d ranks; unset WORLD_SIZE or "
         "make them agree",
         torch_size, g.size);
}

void training_started() { g_trained = 1; }

void finalize() {
  if (!g.joined)
    return;
  serialize();
  g.joined = false;
  if (!g.gloo) {
    g.mpi.finalize();
    return;
  }
  // Every rank's last collective is complete on every rank before any
  // closes its connections (a rank ahead would end a slower one's).
  try {
    gloo::barrier();
  } catch (const Error &) {
    // Another rank failed after this one finished: its error says so.
  }
  gloo::leave();
}

void abort_job(int code) {
  // Gloo: this rank's exit closes its connections, and every other rank's
  // next collective fails, naming the cause (gloo.cpp's failed()); torchrun
  // also stops the others when one exits with an error. An exchange still
  // on the exchange thread is left alone when it does not end soon: the
  // process ends without the exit-time destructors it would race with.
  if (g_exchanges && g.gloo && !g_exchanges->abandon(2.0)) {
    std::fflush(nullptr);
    std::_Exit(code == 0 ? 1 : code);
  }
  if (g.joined && g.size > 1 && !g.gloo) {
    // This rank failed and said why: mpirun's SIGTERM to it is no news.
    std::signal(SIGTERM, SIG_DFL);
    g.mpi.abort(g.mpi.comm_world, code == 0 ? 1 : code);
  }
}

void allreduce_sum(float *x, int64_t n) {
  if (!g.joined || g.size == 1)
    return;
  serialize();
  const auto t0 = std::chrono::steady_clock::now();
  if (g.gloo)
    gloo::allreduce_sum(x, n);
  else
    for (int64_t at = 0; at < n; at += kPiece)
      check(g.mpi.allreduce(kInPlace, x + at, int(std::min(kPiece, n - at)),
                            g.mpi.f32, g.mpi.sum, g.mpi.comm_world),
            "MPI_Allreduce");
  g.traffic.bytes += n * int64_t(sizeof(float));
  g.traffic.seconds += seconds_since(t0);
}

namespace {
// The reduce-scatter itself, on whichever thread may call the library now.
void reduce_scatter_raw(const float *x, float *out,
                        const std::vector<int64_t> &counts) {
  if (g.gloo) {
    gloo::reduce_scatter_sum(x, out, counts);
    return;
  }
  const std::vector<int> c = mpi_ints(counts, "MPI_Reduce_scatter");
  check(g.mpi.reduce_scatter(x, out, c.data(), g.mpi.f32, g.mpi.sum,
                             g.mpi.comm_world),
        "MPI_Reduce_scatter");
}

int64_t total(const std::vector<int64_t> &counts) {
  int64_t n = 0;
  for (int64_t k : counts)
    n += k;
  return n;
}
} // namespace

void reduce_scatter_sum(const float *x, float *out,
                        const std::vector<int64_t> &counts) {
  if (!g.joined || g.size == 1) {
    std::copy(x, x + (counts.empty() ? 0 : counts[0]), out);
    return;
  }
  serialize();
  check_per_rank(counts, "reduce-scatter");
  const auto t0 = std::chrono::steady_clock::now();
  reduce_scatter_raw(x, out, counts);
  g.traffic.reduce_scattered += total(counts) * int64_t(sizeof(float));
  g.traffic.seconds += seconds_since(t0);
}

Ticket start_reduce_scatter_sum(std::shared_ptr<ReduceScatter> job) {
  // What the thread would fail on, said here, on the caller's thread.
  if (g.joined && g.size > 1) {
    check_per_rank(job->counts, "reduce-scatter");
    if (!g.gloo)
      (void)mpi_ints(job->counts, "MPI_Reduce_scatter");
  }
  const int64_t n = total(job->counts);
  const int mine = g.joined ? g.rank : 0;
  if (int64_t(job->x.size()) != n ||
      int64_t(job->out.size()) != job->counts[size_t(mine)])
    fail("reduce-scatter of '%s': %zu elements in, %zu out for counts of "
         "%lld in all, %lld on this rank",
         job->name.c_str(), job->x.size(), job->out.size(), (long long)n,
         (long long)job->counts[size_t(mine)]);
  if (!g.joined || g.size == 1 || !g.threaded) {
    reduce_scatter_sum(job->x.data(), job->out.data(), job->counts);
    return 0;
  }
  if (!g_exchanges)
    g_exchanges = new Exchanges;
  const int64_t issued = trace::enabled() ? trace::now_us() : -1;
  return g_exchanges->start([job, issued, n](Traffic &t) {
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t begin = issued >= 0 ? trace::now_us() : -1;
    reduce_scatter_raw(job->x.data(), job->out.data(), job->counts);
    t.reduce_scattered = n * int64_t(sizeof(float));
    t.seconds = t.overlapped = seconds_since(t0);
    // The span is the exchange; queued_us says how long before it the
    // step started it (the jobs before it ran meanwhile).
    if (begin >= 0)
      trace::span(trace::Lane::Network, 0, "reduce-scatter " + job->name, begin,
                  trace::now_us(),
                  format("\"bytes\": %lld, \"queued_us\": %lld",
                         (long long)(n * int64_t(sizeof(float))),
                         (long long)(begin - issued)));
  });
}

bool use_exchange_thread(bool on) {
  g.threaded = on && g.serialized;
  return g.threaded;
}

bool exchange_thread() { return g.joined && g.size > 1 && g.threaded; }

double finish(Ticket ticket) {
  if (ticket == 0 || !g_exchanges)
    return 0; // ran in start
  const auto t0 = std::chrono::steady_clock::now();
  g_exchanges->wait(ticket);
  const double waited = seconds_since(t0);
  g.traffic.waited += waited;
  return waited;
}

namespace {
// In place: rank r's counts[r] elements (`elem` bytes each, MPI type
// `type`) from element displs[r] of x to every rank.
void allgather_elements(void *x, Handle type, int64_t elem,
                        const std::vector<int64_t> &counts,
                        const std::vector<int64_t> &displs) {
  if (!g.joined || g.size == 1)
    return;
  serialize();
  const auto t0 = std::chrono::steady_clock::now();
  int64_t n = 0;
  for (int64_t k : counts)
    n += k;
  if (g.gloo) {
    // Gloo gathers into one buffer in rank order: through a copy, then
    // each rank's elements to their place.
    check_per_rank(counts, "all-gather");
    check_per_rank(displs, "all-gather");
    char *base = static_cast<char *>(x);
    const int64_t mine = counts[size_t(g.rank)] * elem;
    std::vector<char> in(base + displs[size_t(g.rank)] * elem,
                         base + displs[size_t(g.rank)] * elem + mine);
    std::vector<char> all(size_t(n * elem));
    std::vector<int64_t> bytes(counts.size());
    for (size_t r = 0; r < counts.size(); ++r)
      bytes[r] = counts[r] * elem;
    gloo::allgatherv(in.data(), all.data(), bytes);
    int64_t at = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      std::copy_n(all.data() + at, bytes[r], base + displs[r] * elem);
      at += bytes[r];
    }
  } else {
    const std::vector<int> c = mpi_ints(counts, "MPI_Allgatherv"),
                           d = mpi_ints(displs, "MPI_Allgatherv");
    check(g.mpi.allgatherv(kInPlace, 0, type, x, c.data(), d.data(), type,
                           g.mpi.comm_world),
          "MPI_Allgatherv");
  }
  g.traffic.allgathered += n * elem;
  g.traffic.seconds += seconds_since(t0);
}
} // namespace

void allgather_in_place(float *x, const std::vector<int64_t> &counts,
                        const std::vector<int64_t> &displs) {
  allgather_elements(x, g.mpi.f32, sizeof(float), counts, displs);
}

void allgather_in_place(double *x, const std::vector<int64_t> &counts,
                        const std::vector<int64_t> &displs) {
  allgather_elements(x, g.mpi.f64, sizeof(double), counts, displs);
}

void allgather_in_place(uint16_t *x, const std::vector<int64_t> &counts,
                        const std::vector<int64_t> &displs) {
  allgather_elements(x, g.mpi.u16, sizeof(uint16_t), counts, displs);
}

void gather_to_root(const float *x, int64_t n, float *out,
                    const std::vector<int64_t> &counts,
                    const std::vector<int64_t> &displs) {
  if (!g.joined || g.size == 1) {
    std::copy(x, x + n, out);
    return;
  }
  serialize();
  if (g.gloo) {
    // Gloo gathers equal sizes: each rank's elements padded to the
    // largest rank's, then put in their place on rank 0.
    check_per_rank(counts, "gather");
    check_per_rank(displs, "gather");
    const int64_t most = *std::max_element(counts.begin(), counts.end());
    if (most == 0)
      return;
    if (n != counts[size_t(g.rank)])
      fail("gather: %lld elements from rank %d, which counts %lld",
           (long long)n, g.rank, (long long)counts[size_t(g.rank)]);
    std::vector<float> in(size_t(most), 0.0f);
    std::copy_n(x, n, in.begin());
    std::vector<float> all(g.rank == 0 ? size_t(most * g.size) : 0);
    gloo::gather(in.data(), all.data(), most * int64_t(sizeof(float)));
    if (g.rank == 0)
      for (int r = 0; r < g.size; ++r)
        std::copy_n(all.begin() + r * most, counts[size_t(r)],
                    out + displs[size_t(r)]);
    return;
  }
  if (n < 0 || n > INT_MAX)
    fail("MPI_Gatherv: %lld elements from one rank", (long long)n);
  const std::vector<int> c = mpi_ints(counts, "MPI_Gatherv"),
                         d = mpi_ints(displs, "MPI_Gatherv");
  check(g.mpi.gatherv(x, int(n), g.mpi.f32, out, c.data(), d.data(), g.mpi.f32,
                      0, g.mpi.comm_world),
        "MPI_Gatherv");
}

Traffic traffic() {
  Traffic t = g.traffic;
  if (g_exchanges) {
    const Traffic e = g_exchanges->traffic();
    t.reduce_scattered += e.reduce_scattered;
    t.seconds += e.seconds;
    t.overlapped += e.overlapped;
  }
  return t;
}

void note_traffic(int64_t bytes, double seconds) {
  g.traffic.bytes += bytes;
  g.traffic.seconds += seconds;
}

void note_zero_traffic(int64_t reduce_scattered, int64_t allgathered,
                       double seconds) {
  g.traffic.reduce_scattered += reduce_scattered;
  g.traffic.allgathered += allgathered;
  g.traffic.seconds += seconds;
}

void allreduce_sum(double *x, int64_t n) {
  if (!g.joined || g.size == 1)
    return;
  serialize();
  if (g.gloo)
    return gloo::allreduce_sum(x, n);
  for (int64_t at = 0; at < n; at += kPiece)
    check(g.mpi.allreduce(kInPlace, x + at, int(std::min(kPiece, n - at)),
                          g.mpi.f64, g.mpi.sum, g.mpi.comm_world),
          "MPI_Allreduce");
}

bool all_equal(uint64_t value) {
  if (!g.joined || g.size == 1)
    return true;
  serialize();
  if (g.gloo) {
    const std::vector<uint64_t> all = allgather(value);
    return std::all_of(all.begin(), all.end(),
                       [&](uint64_t v) { return v == all[0]; });
  }
  uint64_t lo = value, hi = value;
  check(
      g.mpi.allreduce(kInPlace, &lo, 1, g.mpi.u64, g.mpi.min, g.mpi.comm_world),
      "MPI_Allreduce");
  check(
      g.mpi.allreduce(kInPlace, &hi, 1, g.mpi.u64, g.mpi.max, g.mpi.comm_world),
      "MPI_Allreduce");
  return lo == hi;
}

std::vector<uint64_t> allgather(uint64_t value) {
  if (!g.joined || g.size == 1)
    return {value};
  serialize();
  std::vector<uint64_t> all(size_t(g.size));
  if (g.gloo) {
    gloo::allgatherv(&value, all.data(),
                     std::vector<int64_t>(size_t(g.size), sizeof value));
    return all;
  }
  check(g.mpi.allgather(&value, 1, g.mpi.u64, all.data(), 1, g.mpi.u64,
                        g.mpi.comm_world),
        "MPI_Allgather");
  return all;
}

std::string ranks_differing(uint64_t value) {
  const std::vector<uint64_t> all = allgather(value);
  std::string out;
  for (int r = 1; r < g.size; ++r)
    if (all[size_t(r)] != all[0])
      out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

void broadcast(void *data, int64_t n) {
  if (!g.joined || g.size == 1)
    return;
  serialize();
  if (g.gloo)
    return gloo::broadcast(data, n);
  char *p = static_cast<char *>(data);
  for (int64_t at = 0; at < n; at += kPiece)
    check(g.mpi.bcast(p + at, int(std::min(kPiece, n - at)), g.mpi.byte, 0,
                      g.mpi.comm_world),
          "MPI_Bcast");
}

void barrier() {
  if (g.joined && g.size > 1)
    serialize();
  if (g.joined && g.size > 1 && g.gloo)
    gloo::barrier();
  else if (g.joined && g.size > 1)
    check(g.mpi.barrier(g.mpi.comm_world), "MPI_Barrier");
}

} // namespace spw::dist
