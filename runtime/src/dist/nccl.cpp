//===- nccl.cpp - device gradients averaged by NCCL -----------------------===//
//
// nccl.h says what. The declarations below are nccl.h's (NCCL 2.x) for the
// calls used: nothing from nccl.h is compiled in.
//
//===----------------------------------------------------------------------===//

#include "dist/nccl.h"

#include "dist/dist.h"
#include "support.h"

#include <cstdlib>
#include <cstring>
#include <dlfcn.h>

namespace spw::nccl {
namespace {

using Result = int;  // ncclResult_t: ncclSuccess = 0
using Comm = void *; // ncclComm_t
struct UniqueId {
  char internal[128]; // NCCL_UNIQUE_ID_BYTES
};
constexpr int kFloat32 = 7; // ncclFloat32
constexpr int kBfloat16 = 9; // ncclBfloat16
constexpr int kSum = 0;     // ncclSum

struct Api {
  Result (*get_version)(int *);
  Result (*get_unique_id)(UniqueId *);
  Result (*comm_init_rank)(Comm *, int, UniqueId, int);
  Result (*comm_destroy)(Comm);
  Result (*all_reduce)(const void *, void *, size_t, int, int, Comm, void *);
  Result (*reduce)(const void *, void *, size_t, int, int, int, Comm, void *);
  Result (*broadcast)(const void *, void *, size_t, int, int, Comm, void *);
  Result (*group_start)();
  Result (*group_end)();
  const char *(*error_string)(Result);
};

struct State {
  Api api{};
  Comm comm = nullptr;
  std::string library;
  int version = 0;
};
State g;

void check(Result r, const char *what) {
  if (r != 0)
    fail("%s failed: %s (NCCL error %d)", what,
         g.api.error_string ? g.api.error_string(r) : "?", r);
}

template <typename F> bool load(void *lib, F &fn, const char *name) {
  fn = reinterpret_cast<F>(::dlsym(lib, name));
  return fn != nullptr;
}

} // namespace

std::string load() {
  if (g.api.all_reduce)
    return "";
  const char *named = std::getenv("SPILLWAY_NCCL_LIBRARY");
  g.library = named && *named ? named : "libnccl.so.2";
  void *lib = ::dlopen(g.library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    return format("NCCL cannot be loaded (%s): install it (the CUDA "
                  "toolkit's libnccl.so.2, or Debian's libnccl2) where the "
                  "loader finds it (LD_LIBRARY_PATH)",
                  ::dlerror());
  Api a{};
  const char *missing = nullptr;
  auto need = [&](auto &fn, const char *name) {
    if (!missing && !load(lib, fn, name))
      missing = name;
  };
  need(a.error_string, "ncclGetErrorString");
  need(a.get_version, "ncclGetVersion");
  need(a.get_unique_id, "ncclGetUniqueId");
  need(a.comm_init_rank, "ncclCommInitRank");
  need(a.comm_destroy, "ncclCommDestroy");
  need(a.all_reduce, "ncclAllReduce");
  need(a.reduce, "ncclReduce");
  need(a.broadcast, "ncclBroadcast");
  need(a.group_start, "ncclGroupStart");
  need(a.group_end, "ncclGroupEnd");
  if (missing)
    return format("'%s' has no '%s' (is it NCCL 2?)", g.library.c_str(),
                  missing);
  int version = 0;
  if (a.get_version(&version) != 0 || version < 20000)
    return format("'%s' is NCCL version code %d; the runtime needs NCCL 2",
                  g.library.c_str(), version);
  g.api = a;
  g.version = version;
  return "";
}

void join() {
  if (g.comm)
    return;
  if (!g.api.all_reduce)
    fail("NCCL joined before it was loaded");
  Api &a = g.api;
  // Rank 0's id to every rank (MPI), then every rank joins.
  UniqueId id{};
  if (dist::rank() == 0)
    check(a.get_unique_id(&id), "ncclGetUniqueId");
  dist::broadcast(&id, sizeof id);
  check(a.comm_init_rank(&g.comm, dist::size(), id, dist::rank()),
        "ncclCommInitRank");
}

bool active() { return g.comm != nullptr; }

std::string describe() {
  // NCCL 2.9+: major * 10000 + minor * 100 + patch.
  return format("NCCL %d.%d.%d (%s)", g.version / 10000, g.version / 100 % 100,
                g.version % 100, g.library.c_str());
}

void allreduce_sum(float *dev, int64_t n, void *stream) {
  if (!g.comm)
    fail("NCCL all-reduce before the communicator was made");
  if (n <= 0)
    return;
  check(g.api.all_reduce(dev, dev, size_t(n), kFloat32, kSum, g.comm, stream),
        "ncclAllReduce");
}

namespace {
// One NCCL call per rank with a part, rank r's part rooted at r, in one
// group (NCCL runs them together); the group ends even when a call fails.
template <class F>
void per_rank(const char *what, const std::vector<int64_t> &counts,
              const std::vector<int64_t> &displs, F &&call) {
  if (!g.comm)
    fail("NCCL %s before the communicator was made", what);
  if (counts.size() != size_t(dist::size()) || displs.size() != counts.size())
    fail("NCCL %s: %zu per-rank counts for %d ranks", what, counts.size(),
         dist::size());
  check(g.api.group_start(), "ncclGroupStart");
  Result first = 0;
  for (size_t r = 0; r < counts.size(); ++r)
    if (counts[r] > 0 && first == 0)
      first = call(int(r), size_t(counts[r]), displs[r]);
  const Result end = g.api.group_end();
  check(first, what);
  check(end, "ncclGroupEnd");
}
} // namespace

void reduce_scatter_sum(float *dev, const std::vector<int64_t> &counts,
                        const std::vector<int64_t> &displs, void *stream) {
  per_rank("ncclReduce", counts, displs, [&](int root, size_t n, int64_t at) {
    return g.api.reduce(dev + at, dev + at, n, kFloat32, kSum, root, g.comm,
                        stream);
  });
}

namespace {
// Rank r's counts[r] elements (`elem` bytes, NCCL type `type`) at element
// displs[r] broadcast from it, in place.
void broadcast_parts(char *dev, size_t elem, int type,
                     const std::vector<int64_t> &counts,
                     const std::vector<int64_t> &displs, void *stream) {
  per_rank("ncclBroadcast", counts, displs,
           [&](int root, size_t n, int64_t at) {
             char *x = dev + size_t(at) * elem;
             return g.api.broadcast(x, x, n, type, root, g.comm, stream);
           });
}
} // namespace

void allgather(float *dev, const std::vector<int64_t> &counts,
               const std::vector<int64_t> &displs, void *stream) {
  broadcast_parts(reinterpret_cast<char *>(dev), sizeof(float), kFloat32,
                  counts, displs, stream);
}

void allgather(uint16_t *dev, const std::vector<int64_t> &counts,
               const std::vector<int64_t> &displs, void *stream) {
  broadcast_parts(reinterpret_cast<char *>(dev), sizeof(uint16_t), kBfloat16,
                  counts, displs, stream);
}

void finish() {
  if (g.comm) {
    g.api.comm_destroy(g.comm);
    g.comm = nullptr;
  }
}

} // namespace spw::nccl
