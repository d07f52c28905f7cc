//===- tiers.h - running an offload plan -----------------------------------===//
//
// What the driver (main.cpp, driver/) calls around an offload plan's steps: the
// plan's blocks live in a TensorStore (GPU arena, pinned host arena, SSD
// swap) from tiers_start on; the generated step moves them with the spw_move
// family (spillway_rt.h). The parameters and AdamW state the blocks hold
// live only there: the start, checkpoints, --resume and --save stream them
// block by block between the homes and the files (tiers_stream_in/out);
// tiers_scatter / tiers_gather copy between the homes and plain copies in
// the context (ParamInfo) where a caller has them (tests, plan-less paths).
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_TIERS_H
#define SPILLWAY_RUNTIME_SRC_TIERS_H

#include "context.h"
#include "storage/io_engine.h"

#include <functional>
#include <string>
#include <vector>

namespace spw {

// True when the model declared an offload plan.
bool has_tiers(const spw_ctx *ctx);
// True when the plan's blocks of class `cls` (SPW_BLOCK_PARAMS: the value,
// SPW_BLOCK_OPTIMIZER: the AdamW / FOAM state) hold parameter `param`: its
// copies are the blocks', bound by spw_bind, not the device's own.
bool tiers_hold(const spw_ctx *ctx, size_t param, int cls);
// True when the plan declares master blocks (a bf16-mixed plan): its params
// blocks hold the parameters' bf16 working copies, its master blocks the
// f32 values the optimizer updates.
bool tiers_bf16_params(const spw_ctx *ctx);
// True when such a plan's params block holds parameter `param`: each
// update of its master writes the rounding into the bound working copy.
bool tiers_hold_work(const spw_ctx *ctx, int32_t param);
// True when such a plan is cut for ZeRO's ranks (spw_declare_optimizer_
// shards): each rank's master blocks hold its shard of the f32 values, as
// its optimizer blocks hold its shard of the moments, and the ranks
// all-gather the bf16 working copies of what they updated. Streaming the
// values out (--save, a checkpoint) is then collective.
bool tiers_shards_masters(const spw_ctx *ctx);
// Creates the arenas and the swap space (in `ssd_dirs`, else the compiled
// directories, else the current one) and places every block's home (each
// part's of a block cut between two tiers, spw_declare_part_home).
void tiers_start(spw_ctx *ctx, const std::vector<std::string> &ssd_dirs,
                 storage::Backend backend);
// The parameters and AdamW state of the context into the homes / back (and
// the parameters' tensors pointed at their own storage again).
// tiers_scatter then frees the plain copies (tiers_release_copies);
// tiers_gather allocates them again.
void tiers_scatter(spw_ctx *ctx);
void tiers_gather(spw_ctx *ctx);
void tiers_release_copies(spw_ctx *ctx);
// Streaming a plan's blocks between their homes and files, block by block in
// bounded memory (the initial load, checkpoints, --save, --resume): no
// phase holds more than one block's host copy beyond the plan's arenas.
// One piece of a block's host copy: parameter `param`'s tensor `kind`,
// elements [begin, begin + count) at `data` (float32; bf16 optimizer state
// is widened for `fn` to read and rounded to nearest even from what it
// writes).
enum BlockTensor { kTensorValue = 0, kTensorAdamM = 1, kTensorAdamV = 2 };
struct BlockRange {
  int32_t param = 0;
  int kind = kTensorValue;
  int64_t begin = 0, count = 0;
  void *data = nullptr;
};
using BlockRangeFn = std::function<void(const BlockRange &)>;
// For every homed block of class `cls` (SPW_BLOCK_PARAMS, SPW_BLOCK_OPTIMIZER;
// in a bf16-mixed plan SPW_BLOCK_PARAMS streams the master blocks' f32
// values, and tiers_stream_in then fills every params block with their
// rounding, a layer at a time), one at a time in declaration order: a host copy
// of the block (its home on the host tier, the host arena for a block homed on
// SSD, a bounded staging buffer for one homed on the GPU, whose ranges are then
// cut into pieces of at most kStreamStagingBytes; part by part for a block cut
// between two tiers) and `fn` on each range.
// tiers_stream_in: the copy starts undefined, `fn` fills every range and the
// copy goes to the home; tiers_stream_out: the copy holds the home's bytes for
// `fn` to read. Every element of every member of the class's blocks is visited
// once. ZeRO's sharded optimizer blocks (spw_declare_optimizer_shards): in,
// each rank's ranges are its shard's elements; out, every rank must call it
// (collective) and rank 0's `fn` sees every moment whole, the other ranks'
// nothing.
constexpr uint64_t kStreamStagingBytes = uint64_t(8) << 20;
void tiers_stream_in(spw_ctx *ctx, int cls, const BlockRangeFn &fn);
void tiers_stream_out(spw_ctx *ctx, int cls, const BlockRangeFn &fn);
// The parameters of the class's homed blocks in the order tiers_stream_in/out
// visit them (a checkpoint's tensor order); the others keep plain copies.
std::vector<int32_t> tiers_stream_members(const spw_ctx *ctx, int cls);
// Applies the deferred updates (spw_adamw_defer) of the plan's parameters a
// layer at a time, never gathering the model: for each params block with a
// member whose update is pending, its and its layer's optimizer (and
// master) block's copies on the tier where the update runs (the GPU when the
// state is homed there, part 0's home deciding for a cut block: the deferred
// elements are part 0's; else the host; the other when that one has no
// room), written back to their homes after, bound as a step binds them, and
// `apply(members)` to apply those members' updates.
void tiers_flush_deferred(
    spw_ctx *ctx,
    const std::function<void(const std::vector<int32_t> &)> &apply);
// Where the plan keeps the gradient slice [begin, end) of parameter `param`
// that spw_adamw_defer holds until the next step (its `pending` block's
// home); null when the plan has no such block (no plan, or no deferral).
// `on_gpu`: the update runs on the device (the block must be homed on the
// GPU tier), else on host (homed on host); anything else is an error.
float *tiers_pending_grad(spw_ctx *ctx, int32_t param, int64_t begin,
                          int64_t end, bool on_gpu);
// Bracket one training step: per-step bytes and time blocked on I/O.
void tiers_step_begin(spw_ctx *ctx);
void tiers_step_end(spw_ctx *ctx);
// A step that failed instead: the completions of ZeRO stage 2's exchanges
// still pending are dropped, not run (what they would fill is the failed
// step's; the exchange thread keeps its own buffers).
void tiers_step_failed(spw_ctx *ctx);
// false: the next steps (validation, --val-data) run as the plan says but
// add nothing to the statistics (bytes per iteration, telemetry, I/O wait),
// which stay those of the training steps; true again after them.
void tiers_count_steps(spw_ctx *ctx, bool counting);
// The last step's telemetry for the progress line: "busy 93%  wait 0.01s
// overlap 88%" (docs/runtime.md, "Offload"); empty before the first step.
std::string tiers_progress(const spw_ctx *ctx);
// The last step's telemetry as a JSON object (--log-json's "offload"), or
// "" before the first step.
std::string tiers_step_json(const spw_ctx *ctx);
// One line for the banner.
std::string tiers_describe(const spw_ctx *ctx);
// The last line: measured against predicted time, bytes against the plan.
std::string tiers_summary(const spw_ctx *ctx, double seconds, int64_t steps);
// The run's very last line for a plan that writes to SSD: the training
// steps' measured SSD write volume (the swap drives' wear), per step and,
// with `tokens_per_step` > 0, per token, against the plan's; "" for a plan
// without SSD writes (docs/runtime.md, "Offload").
std::string tiers_ssd_writes(const spw_ctx *ctx, int64_t tokens_per_step);
// --stats-json: predicted and measured bytes per link per iteration, peaks,
// I/O wait and overlap, the SSD writes (docs/runtime.md, "Offload").
std::string tiers_stats_json(const spw_ctx *ctx, double seconds,
                             int64_t steps, int64_t tokens_per_step);

// The CPU optimizer's hooks (host_optimizer.h). The plan's CPU optimizer
// state, made at first use; null without a plan.
struct HostOptimizer;
HostOptimizer *tiers_host_optimizer(const spw_ctx *ctx);
// True when parameter `param`'s params and optimizer blocks (and master
// block, in a bf16-mixed plan) are all bound on the host tier (spw_bind).
bool tiers_host_bound(const spw_ctx *ctx, int32_t param);
// An update of `param` in flight on the host copies of its params,
// optimizer and master blocks (`parts`: bit k for part k of a split block):
// whatever next reads, overwrites, frees or binds those copies waits for `t`
// first.
void tiers_note_host_update(spw_ctx *ctx, int32_t param, int parts,
                            const storage::Token &t);
// ZeRO: the all-gather of elements [begin, end) of `param`'s values, which
// the CPU optimizer is updating in its params block's host copy, runs once
// the block's updates are done, before the copy moves, is freed or bound
// (or at the step's end, a checkpoint or the run's end), so the update
// keeps hiding behind the compute that follows it. Collective: every rank
// calls it for the same updates.
// `at`: element `begin` in the bound host copy.
void tiers_defer_gather(spw_ctx *ctx, int32_t param, int64_t begin,
                        int64_t end, float *at);
// The same of the bf16 working copies (tiers_shards_masters): `at` is
// element `begin` of the params block's bound host copy. It replaces the
// all-gather of the rounding spw_alloc_copy made of them (tiers_gathering).
void tiers_defer_gather(spw_ctx *ctx, int32_t param, int64_t begin, int64_t end,
                        bf16 *at);
// The update of elements [begin, end) of `param` all-gathers its working
// copies (tiers_shards_masters): the all-gather spw_alloc_copy recorded of
// their rounding is not needed.
void tiers_gathering(spw_ctx *ctx, int32_t param, int64_t begin, int64_t end);

} // namespace spw

#endif
