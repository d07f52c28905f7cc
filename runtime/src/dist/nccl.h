//===- nccl.h - device gradients averaged by NCCL -------------------------===//
//
// A CUDA run's gradients are in GPU memory: NCCL all-reduces them there, on
// the device's compute stream, instead of MPI through host copies
// (`--collectives`, docs/runtime.md "Data parallel"). Like MPI, NCCL is
// loaded at run time (libnccl.so.2, the CUDA toolkit's; SPILLWAY_NCCL_LIBRARY
// names another, e.g. the tests' stand-in), its C API declared here, so a
// build needs no NCCL and an executable runs where it is absent. The
// communicator is bootstrapped through the job's host collectives (MPI, or
// Gloo under torchrun): rank 0 makes the unique id and broadcasts it
// (dist.h); one rank alone makes a communicator of one, which runs the
// whole path on one GPU. With --zero 1 it also exchanges ZeRO's shards.
// Defined in nccl.cpp.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_DIST_NCCL_H
#define SPILLWAY_RUNTIME_SRC_DIST_NCCL_H

#include <cstdint>
#include <string>
#include <vector>

namespace spw::nccl {

// Loads NCCL; returns why it cannot be ("" when loaded). Each rank alone.
std::string load();
// Joins every rank of the job (dist::size(), dist::rank()) into one
// communicator on the current GPU, after load() succeeded on every rank.
// Collective over MPI. Throws spw::Error when it cannot be made.
void join();
bool active();
// "NCCL 2.28.9 (libnccl.so.2)", for the banner.
std::string describe();
// In place: the sum over the ranks of n float32 values in device memory,
// ordered on `stream` (a cudaStream_t) after the work issued there.
void allreduce_sum(float *dev, int64_t n, void *stream);
// ZeRO (zero.h), in place in device memory, ordered on `stream`: rank r's
// counts[r] values at dev + displs[r] become their sum over the ranks on
// rank r (a reduce-scatter); and every rank's part goes to every rank (an
// all-gather). The shards are uneven (cut at 64 elements), which NCCL's
// ncclReduceScatter and ncclAllGather do not take without padding: one
// ncclReduce (ncclBroadcast) per rank rooted at it, in one group, needs no
// scratch memory and moves the same bytes.
void reduce_scatter_sum(float *dev, const std::vector<int64_t> &counts,
                        const std::vector<int64_t> &displs, void *stream);
void allgather(float *dev, const std::vector<int64_t> &counts,
               const std::vector<int64_t> &displs, void *stream);
// The same of bf16 elements (ZeRO's sharded masters: the working copies).
void allgather(uint16_t *dev, const std::vector<int64_t> &counts,
               const std::vector<int64_t> &displs, void *stream);
// Leaves the communicator (at the end of a run that succeeded).
void finish();

} // namespace spw::nccl

#endif // SPILLWAY_RUNTIME_SRC_DIST_NCCL_H
