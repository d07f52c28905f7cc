//===- gloo.h - collectives of a torchrun-style job over Gloo -------------===//
//
// A job launched the way torchrun launches one (RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT in each rank's environment, no
// mpirun) meets at the rendezvous store (store.h) and runs its collectives
// over Gloo, as torch.distributed's "gloo" backend does. Gloo comes from
// libspillway_gloo.so, whose bytes the runtime carries (gloo_abi.h says
// why) and loads at join(); it needs the system's libgloo.so.0 (Debian:
// libgloo0). dist.cpp calls these for a joined job only; each throws
// spw::Error naming what to do.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_DIST_GLOO_H
#define SPILLWAY_RUNTIME_SRC_DIST_GLOO_H

#include <cstdint>
#include <string>
#include <vector>

namespace spw::dist::gloo {

// Joins rank `rank` of `size` through the store at MASTER_ADDR:MASTER_PORT
// (served by rank 0, or by torchrun's agent when
// TORCHELASTIC_USE_AGENT_STORE=True).
void join(int rank, int size);
// Leaves the job (closes Gloo's connections; rank 0 stops its store).
void leave();

void allreduce_sum(float *x, int64_t n);
void allreduce_sum(double *x, int64_t n);
// Rank r's counts[r] bytes at `in` to every rank's `out`, in rank order.
// Rank r's counts[r] elements of the sum over ranks of x, those from
// counts[0] + ... + counts[r - 1] on, into out (the shim's direct
// exchange: each rank sends (N - 1) / N of x).
void reduce_scatter_sum(const float *x, float *out,
                        const std::vector<int64_t> &counts);
void allgatherv(const void *in, void *out, const std::vector<int64_t> &counts);
// Every rank's `bytes` bytes at `in` into rank 0's `out`, in rank order.
void gather(const void *in, void *out, int64_t bytes);
// Rank 0's n bytes at `data` to every rank.
void broadcast(void *data, int64_t n);
void barrier();

} // namespace spw::dist::gloo

#endif // SPILLWAY_RUNTIME_SRC_DIST_GLOO_H
