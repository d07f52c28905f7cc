//===- zero.h - ZeRO-1: the optimizer state sharded over the ranks --------===//
//
// `--zero 1` (docs/runtime.md, "Data parallel"): each rank keeps the AdamW
// moments of 1/N of every parameter's elements (its shard), DeepSpeed's
// ZeRO stage 1. A step's gradient is reduce-scattered (each rank receives
// the mean of its shard; the full mean where gradient clipping needs every
// element's for the norm), each rank updates its shard of the values, and
// the updated values are all-gathered, so every rank again holds the whole
// model for the next forward. AdamW is elementwise: the bits are those of
// the unsharded update. Checkpoints gather the moments to rank 0, which
// writes the format one process writes; a resume keeps each rank's shard.
//
// The state this shards is the one the runtime keeps itself, or an offload
// plan's optimizer blocks when the compiler cut them for the job's ranks
// (spillwayc --zero 1 --ranks N: spw_declare_optimizer_shards; each member
// of a block holds the rank's shard in a slot of the largest rank's), and
// AdamW's (FOAM folds its state already). Every function here but the
// layout's is collective: each rank calls it at the same point of the same
// schedule.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_DIST_ZERO_H
#define SPILLWAY_RUNTIME_SRC_DIST_ZERO_H

#include "context.h"
#include "dist/dist.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace spw::zero {

// True when the run shards the optimizer state (--zero 1).
inline bool active(const spw_ctx *ctx) { return ctx->zero_stage >= 1; }
// The stage an offload plan cut for the ranks runs (declared_shards > 0):
// 2 when its gradient blocks are cut too (spw_declare_gradient_shards).
inline int cut_stage(const spw_ctx *ctx) {
  return ctx->gradient_shards ? 2 : 1;
}

// Why the model's state cannot be sharded, naming what to do; "" when it
// can.
std::string unsupported(const spw_ctx *ctx);
// Gives every parameter its shard (ParamInfo::shard_lo, shard_hi), before
// the state is made (device_start).
void start(spw_ctx *ctx);

// Elements of p's moment that one rank's optimizer block holds: its
// state_numel, or the largest rank's shard when the plan's blocks are cut
// for the ranks (spw_declare_optimizer_shards).
int64_t slot_numel(const spw_ctx *ctx, const ParamInfo &p);

// Parameter p's shard on rank r: elements [first, last).
struct Shard {
  int64_t first = 0, last = 0;
  int64_t size() const { return last - first; }
};
Shard shard_of(const ParamInfo &p, int r);
// Rank r's shard of n elements cut for `ranks` ranks: contiguous, in rank
// order, cut at multiples of `align` elements (64: whole vectors for every
// kernel; 65536 with gradient clipping: whole blocks of the norm; at most
// `align` elements: the last rank's whole), covering [0, n).
Shard shard_of(int64_t n, int r, int ranks, int64_t align = 64);

// With gradient clipping: the norm of p's whole mean gradient `grad` (its
// shard reduce-scattered here), grad_norm's bits: each rank sums its whole
// blocks' squares, the ranks exchange the per-block sums and every rank
// adds them in block order, as grad_norm does.
// `divisor`: each element divided first (an offload plan's accumulator of
// M micro-batches, as grad_norm divides it).
float grad_norm_of_shards(spw_ctx *ctx, const ParamInfo &p,
                          const spw_tensor *grad, float divisor = 1.0f);

// The same from this rank's shard of the accumulator alone (its elements
// [shard_lo, shard_hi) at `shard`: an offload plan's gradient block cut for
// the ranks, ZeRO stage 2).
float grad_norm_of_shard(spw_ctx *ctx, const ParamInfo &p, const float *shard,
                         bool on_device, float divisor = 1.0f);
// The rank's shard of the mean over the ranks of `grad` (parameter p's
// whole gradient, host or device memory), in place: elements outside the
// shard keep this rank's own values, which nothing reads.
// `wait` false: where NCCL exchanges device memory, the exchange is only
// issued, in the device's stream order (what follows there reads it
// safely); the caller waits once for several and adds their time
// (dist::note_zero_traffic). Elsewhere it is done on return either way.
void reduce_scatter_mean(spw_ctx *ctx, ParamInfo &p, spw_tensor *grad,
                         bool wait = true);
// True when reduce_scatter_mean of a device tensor goes through NCCL on
// the device (else through host memory).
bool exchanges_on_device(const spw_ctx *ctx);
// ZeRO stage 2 overlapped with the next layer's backward (spw_stage_grads):
// reduce_scatter_mean in two halves, through host memory (not NCCL).
// exchange_for gives the exchange's buffers for p: the whole vector `x`
// the exchange thread reads, and `out`, this rank's shard.
// start_reduce_scatter_mean starts it on `grad`, p's whole gradient, which
// on a device whose memory is the host's must be a view of job->x (the sum
// is made there: no copy), else is downloaded into it (grad may go once
// this returns); it returns the second half, which waits for the exchange
// and leaves job->out holding this rank's shard of the mean, the bits
// reduce_scatter_mean leaves in grad's shard.
std::shared_ptr<dist::ReduceScatter> exchange_for(const ParamInfo &p);
std::function<void()>
start_reduce_scatter_mean(spw_ctx *ctx, ParamInfo &p, spw_tensor *grad,
                          std::shared_ptr<dist::ReduceScatter> job);
// After the ranks updated their shards of elements [begin, end) of p's
// values: every rank's updated elements to every rank.
// The values are those the update wrote: the device's copy, or `at`
// (element `begin` of the copy an offload plan bound: in device memory, or
// with `host` in the host copy its CPU optimizer updated, once its tasks
// are done: tiers_defer_gather).
void gather_values(spw_ctx *ctx, ParamInfo &p, int64_t begin, int64_t end,
                   float *at = nullptr, bool host = false);
// An offload plan with sharded bf16-mixed masters (each rank's master
// blocks hold its shard): the ranks' bf16 working copies of their updated
// elements [begin, end) to every rank, in the params block's copy at `at`
// (element `begin`; device memory, or the host copy with `host`). The
// masters stay sharded: half the bytes of gathering f32 values.
void gather_work(spw_ctx *ctx, const ParamInfo &p, int64_t begin, int64_t end,
                 bf16 *at, bool host);
// An offload plan's streaming out of an optimizer block (a checkpoint):
// this rank's shard of p's moment goes to rank 0 a piece of at most 1 Mi
// elements at a time, `read(first, count, out)` giving its elements
// [first, first + count) of the shard (0: the shard's first) as f32, and
// rank 0 calls `emit(begin, count, data)` with each piece of the whole
// moment, in element order; the other ranks emit nothing. Memory: a piece
// (4 MiB) on each rank, and the gathered piece on rank 0.
void gather_to_root_in_pieces(
    const ParamInfo &p,
    const std::function<void(int64_t, int64_t, float *)> &read,
    const std::function<void(int64_t, int64_t, const float *)> &emit);
// For a checkpoint, after device_pull (the plain copies adam_m, adam_v
// hold each rank's shard): per parameter, whether any rank has its moments
// yet (a rank whose shard is empty has none of its own), the same on every
// rank.
std::vector<char> state_present(spw_ctx *ctx);
// Parameter p's whole moment (`v`: adam_v, else adam_m) into rank 0's `out`
// (resized to state_numel; the other ranks' stays empty): one parameter at
// a time, so rank 0 never holds more than one moment beyond its shard.
void gather_moment(const ParamInfo &p, bool v, std::vector<float> &out);
// A restored moment of p (all state_numel elements) cut to this rank's
// shard.
void keep_shard(const ParamInfo &p, std::vector<float> &moment);

} // namespace spw::zero

#endif // SPILLWAY_RUNTIME_SRC_DIST_ZERO_H
