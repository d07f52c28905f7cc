//===- dist.h - data-parallel ranks over Open MPI or Gloo ---------------===//
//
// One process per rank, launched by `mpirun -np N EXE ...`, or the way
// torchrun launches one (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT: the
// collectives are then Gloo's, gloo.h). The executable does not link MPI:
// a run that mpirun launched (OMPI_COMM_WORLD_SIZE in the environment)
// loads Open MPI's libmpi.so.40 at start, so the same binary runs alone on
// a machine without MPI (the GPU machine, a user's laptop). Open MPI's
// handles (MPI_COMM_WORLD, MPI_FLOAT, MPI_SUM) are the addresses of its
// predefined objects (mpi.h's OMPI_PREDEFINED_GLOBAL), looked up by name in
// the loaded library; the library's version string must say Open MPI,
// whose ABI that is. Defined in dist.cpp.
//
// Every collective is started by the main thread, in the same order on
// every rank: the schedule is static, so each rank calls the same entry
// points in the same order (docs/runtime.md, "Data parallel"). ZeRO stage
// 2's reduce-scatters run on the exchange thread (start_reduce_scatter_sum)
// while the step goes on; no two threads are ever in MPI or Gloo at once.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_DIST_DIST_H
#define SPILLWAY_RUNTIME_SRC_DIST_DIST_H

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace spw::dist {

// This process's place in the job: rank 0 of 1 unless mpirun launched it.
int rank();
int size();
// This rank's index among the job's ranks on its machine (mpirun's
// OMPI_COMM_WORLD_LOCAL_RANK; 0 alone): which GPU it takes.
int local_rank();
inline bool active() { return size() > 1; }
// The job's ranks on this machine (LOCAL_WORLD_SIZE, Open MPI's
// OMPI_COMM_WORLD_LOCAL_SIZE; without them the job's), and whether the
// launcher bound each to its own cores (mpirun does; torchrun does not).
int local_size();
bool binds_ranks();
// How to launch a job of n ranks the way this one was launched: "mpirun
// -np N", or "torchrun --nproc-per-node N --no-python" (alone: both).
std::string launch_command(int n);
// Who launched the job: "mpirun", or "torchrun-style" (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT; gloo.h).
const char *launcher();
// The library of the collectives on host memory: "MPI" (Open MPI's) or
// "Gloo" (a torchrun-style job's).
const char *host_collectives();

// Joins the job mpirun launched, or the torchrun-style job the environment
// describes (WORLD_SIZE > 1 without mpirun: over Gloo, gloo.h); a no-op
// otherwise. Throws spw::Error, naming what to do, when the environment
// says a job but it cannot be joined (MPI or Gloo not loadable, a
// variable missing or out of range, the rendezvous not reached).
void init();
// Leaves the job (MPI_Finalize) after a run that succeeded on this rank.
void finalize();
// The first step begins: a rank its launcher stops from here on says to
// resume from a checkpoint (before, that nothing was trained).
void training_started();
// Ends the whole job from a rank that failed: the other ranks wait in a
// collective this one will never reach. Prints nothing; the caller printed
// the error. Returns only when there is no job.
void abort_job(int code);

// In place, over every rank: x = sum over ranks of x. Collective.
void allreduce_sum(float *x, int64_t n);
void allreduce_sum(double *x, int64_t n);
// ZeRO (zero.h). counts[r] elements of the sum over ranks of x, those
// from sum(counts[0..r-1]) on, into rank r's `out`. Collective.
void reduce_scatter_sum(const float *x, float *out,
                        const std::vector<int64_t> &counts);
// The same, left running: ZeRO stage 2 overlaps each layer's reduce-scatter
// with the next layer's backward. The exchange thread, the one thread
// besides the main one that calls MPI or Gloo, runs the exchanges in the
// order they were started (the same on every rank); every other collective
// here first waits until it has none left, so no two calls are ever in the
// library at once (Open MPI at MPI_THREAD_SERIALIZED). The job owns its
// buffers, which the thread keeps alive while it runs: `x` (the whole
// vector, filled by the caller) and `out` (this rank's counts[rank]
// elements, read after finish). Alone, without use_exchange_thread(true),
// or where Open MPI gives no MPI_THREAD_SERIALIZED, the exchange runs in
// start and finish returns at once. `name` labels the trace's network
// lane.
struct ReduceScatter {
  std::vector<float> x, out;
  std::vector<int64_t> counts;
  std::string name;
};
// Whether exchanges go to the exchange thread from now on (default: no);
// returns whether they will (false where the library cannot serve two
// threads: Open MPI below MPI_THREAD_SERIALIZED).
bool use_exchange_thread(bool on);
// Whether start_reduce_scatter_sum leaves exchanges to the thread now.
bool exchange_thread();
using Ticket = uint64_t;
Ticket start_reduce_scatter_sum(std::shared_ptr<ReduceScatter> job);
// Waits for exchange `ticket` and those started before it; throws the
// first failed one's error (another rank failed). Returns the seconds the
// caller waited.
double finish(Ticket ticket);
// In place: rank r's counts[r] elements at x + displs[r] go to every rank.
void allgather_in_place(float *x, const std::vector<int64_t> &counts,
                        const std::vector<int64_t> &displs);
void allgather_in_place(double *x, const std::vector<int64_t> &counts,
                        const std::vector<int64_t> &displs);
// The same of 2-byte elements (bf16 working copies: ZeRO's sharded
// masters).
void allgather_in_place(uint16_t *x, const std::vector<int64_t> &counts,
                        const std::vector<int64_t> &displs);
// Rank r's n = counts[r] elements at x to rank 0's out + displs[r] (`out`
// is read only on rank 0). Collective.
void gather_to_root(const float *x, int64_t n, float *out,
                    const std::vector<int64_t> &counts,
                    const std::vector<int64_t> &displs);
// True on every rank exactly when every rank passed the same value.
bool all_equal(uint64_t value);
// The ranks whose value differs from rank 0's, as "1, 3" (for the error).
std::string ranks_differing(uint64_t value);
// Every rank's value, in rank order, on every rank ({value} alone).
std::vector<uint64_t> allgather(uint64_t value);
// Rank 0's bytes on every rank (n the same on every rank). Collective.
void broadcast(void *data, int64_t n);
// Waits until every rank got here.
void barrier();

// What this rank's float32 all-reduces carried and how long they took
// (the gradients' averages and the loss's), since the start: the measured
// side of the cost model's network link.
struct Traffic {
  int64_t bytes = 0; // the buffers reduced (each rank sends about 2 (N-1)/N of this)
  // ZeRO: the buffers reduce-scattered and all-gathered (each rank sends
  // about (N-1)/N of each).
  int64_t reduce_scattered = 0, allgathered = 0;
  double seconds = 0; // all of them
  // Of `seconds`: the exchanges the exchange thread ran while the step went
  // on (start_reduce_scatter_sum), and the time the step waited for them
  // (finish).
  double overlapped = 0, waited = 0;
};
Traffic traffic();
// Adds an average made without MPI (NCCL's, dist/nccl.h) to traffic().
void note_traffic(int64_t bytes, double seconds);
// Adds ZeRO's exchanges made by NCCL: buffers reduce-scattered and
// all-gathered.
void note_zero_traffic(int64_t reduce_scattered, int64_t allgathered,
                       double seconds);

} // namespace spw::dist

#endif // SPILLWAY_RUNTIME_SRC_DIST_DIST_H
