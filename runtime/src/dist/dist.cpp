//===- dist.cpp - data-parallel ranks over Open MPI
//-------------------------===//
//
// Open MPI loaded at start (dist.h says why, and why by these names). The
// declarations below are mpi.h's for Open MPI 4 and 5 with every handle a
// pointer; nothing from mpi.h is compiled in, so building needs no MPI.
//
//===----------------------------------------------------------------------===//

#include "dist/dist.h"

#include "support.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <unistd.h>
#include <vector>

namespace spw::dist {
namespace {

using Handle = void *; // MPI_Comm, MPI_Datatype, MPI_Op: pointers in Open MPI
constexpr int kThreadFunneled = 1;                  // MPI_THREAD_FUNNELED
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
  Handle comm_world, f32, f64, u64, byte, sum, min, max;
};

struct State {
  int rank = 0, size = 1;
  bool joined = false;
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
char g_stopped[256];
size_t g_stopped_len = 0;
extern "C" void on_stopped(int sig) {
  if (g_stopped_len)
    (void)!::write(2, g_stopped, g_stopped_len);
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
std::vector<int> mpi_ints(const std::vector<int64_t> &v, const char *what) {
  if (v.size() != size_t(g.size))
    fail("%s: %zu per-rank values for %d ranks", what, v.size(), g.size);
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

} // namespace

int rank() { return g.rank; }
int local_rank() {
  if (!g.joined)
    return 0;
  const int r = env_int("OMPI_COMM_WORLD_LOCAL_RANK");
  return r < 0 ? 0 : r;
}
int size() { return g.size; }

void init() {
  const int ompi_size = env_int("OMPI_COMM_WORLD_SIZE");
  const int torch_size = env_int("WORLD_SIZE");
  if (ompi_size < 0) {
    if (torch_size > 1)
      fail("WORLD_SIZE=%d asks for %d ranks, but this process was not "
           "launched by mpirun, and torchrun-style launching (RANK, "
           "WORLD_SIZE, MASTER_ADDR) is not supported yet; launch with "
           "`mpirun -np %d EXE ...`",
           torch_size, torch_size, torch_size);
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
  m.sum = object(lib, "ompi_mpi_op_sum");
  m.min = object(lib, "ompi_mpi_op_min");
  m.max = object(lib, "ompi_mpi_op_max");
  int provided = 0;
  check(m.init_thread(nullptr, nullptr, kThreadFunneled, &provided),
        "MPI_Init_thread");
  g.joined = true;
  check(m.comm_rank(m.comm_world, &g.rank), "MPI_Comm_rank");
  check(m.comm_size(m.comm_world, &g.size), "MPI_Comm_size");
  if (provided < kThreadFunneled)
    fail("Open MPI gives thread level %d; the runtime needs "
         "MPI_THREAD_FUNNELED (its worker threads never call MPI)",
         provided);
  if (g.size > 1) {
    const int n = std::snprintf(
        g_stopped, sizeof g_stopped,
        "rank %d: stopped by SIGTERM, as mpirun ends a job when another "
        "rank fails or dies or the job is interrupted; with "
        "--checkpoint-dir, resume the job from its last complete "
        "checkpoint with --resume\n",
        g.rank);
    g_stopped_len = n > 0 ? std::min(size_t(n), sizeof g_stopped - 1) : 0;
    std::signal(SIGTERM, on_stopped);
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

void finalize() {
  if (g.joined) {
    g.joined = false;
    g.mpi.finalize();
  }
}

void abort_job(int code) {
  if (g.joined && g.size > 1) {
    // This rank failed and said why: mpirun's SIGTERM to it is no news.
    std::signal(SIGTERM, SIG_DFL);
    g.mpi.abort(g.mpi.comm_world, code == 0 ? 1 : code);
  }
}

void allreduce_sum(float *x, int64_t n) {
  if (!g.joined || g.size == 1)
    return;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t at = 0; at < n; at += kPiece)
    check(g.mpi.allreduce(kInPlace, x + at, int(std::min(kPiece, n - at)),
                          g.mpi.f32, g.mpi.sum, g.mpi.comm_world),
          "MPI_Allreduce");
  g.traffic.bytes += n * int64_t(sizeof(float));
  g.traffic.seconds += seconds_since(t0);
}

void reduce_scatter_sum(const float *x, float *out,
                        const std::vector<int64_t> &counts) {
  if (!g.joined || g.size == 1) {
    std::copy(x, x + (counts.empty() ? 0 : counts[0]), out);
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int> c = mpi_ints(counts, "MPI_Reduce_scatter");
  check(g.mpi.reduce_scatter(x, out, c.data(), g.mpi.f32, g.mpi.sum,
                             g.mpi.comm_world),
        "MPI_Reduce_scatter");
  int64_t n = 0;
  for (int64_t k : counts)
    n += k;
  g.traffic.reduce_scattered += n * int64_t(sizeof(float));
  g.traffic.seconds += seconds_since(t0);
}

namespace {
// In place: rank r's counts[r] elements (`elem` bytes each, MPI type
// `type`) from element displs[r] of x to every rank.
void allgather_elements(void *x, Handle type, int64_t elem,
                        const std::vector<int64_t> &counts,
                        const std::vector<int64_t> &displs) {
  if (!g.joined || g.size == 1)
    return;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int> c = mpi_ints(counts, "MPI_Allgatherv"),
                         d = mpi_ints(displs, "MPI_Allgatherv");
  check(g.mpi.allgatherv(kInPlace, 0, type, x, c.data(), d.data(), type,
                         g.mpi.comm_world),
        "MPI_Allgatherv");
  int64_t n = 0;
  for (int64_t k : counts)
    n += k;
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

void gather_to_root(const float *x, int64_t n, float *out,
                    const std::vector<int64_t> &counts,
                    const std::vector<int64_t> &displs) {
  if (!g.joined || g.size == 1) {
    std::copy(x, x + n, out);
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

Traffic traffic() { return g.traffic; }

void note_traffic(int64_t bytes, double seconds) {
  g.traffic.bytes += bytes;
  g.traffic.seconds += seconds;
}

void allreduce_sum(double *x, int64_t n) {
  if (!g.joined || g.size == 1)
    return;
  for (int64_t at = 0; at < n; at += kPiece)
    check(g.mpi.allreduce(kInPlace, x + at, int(std::min(kPiece, n - at)),
                          g.mpi.f64, g.mpi.sum, g.mpi.comm_world),
          "MPI_Allreduce");
}

bool all_equal(uint64_t value) {
  if (!g.joined || g.size == 1)
    return true;
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
  std::vector<uint64_t> all(size_t(g.size));
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
  char *p = static_cast<char *>(data);
  for (int64_t at = 0; at < n; at += kPiece)
    check(g.mpi.bcast(p + at, int(std::min(kPiece, n - at)), g.mpi.byte, 0,
                      g.mpi.comm_world),
          "MPI_Bcast");
}

void barrier() {
  if (g.joined && g.size > 1)
    check(g.mpi.barrier(g.mpi.comm_world), "MPI_Barrier");
}

} // namespace spw::dist
