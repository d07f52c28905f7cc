//===- tiers.h - running an offload plan -----------------------------------===//
//
// What the driver (main.cpp) calls around an offload plan's steps: the
// plan's blocks live in a TensorStore (GPU arena, pinned host arena, SSD
// swap) from tiers_start on; the generated step moves them with the spw_move
// family (spillway_rt.h). Parameters and AdamW state keep a plain copy in
// the context (ParamInfo) for loading, --save and checkpoints:
// tiers_scatter copies it into the homes, tiers_gather back.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_TIERS_H
#define SPILLWAY_RUNTIME_SRC_TIERS_H

#include "runtime_internal.h"
#include "storage/io_engine.h"

#include <string>
#include <vector>

namespace spw {

// True when the model declared an offload plan.
bool has_tiers(const spw_ctx *ctx);
// Creates the arenas and the swap space (in `ssd_dirs`, else the compiled
// directories, else the current one) and places every block's home.
void tiers_start(spw_ctx *ctx, const std::vector<std::string> &ssd_dirs,
                 storage::Backend backend);
// The parameters and AdamW state of the context into the homes / back (and
// the parameters' tensors pointed at their own storage again).
// tiers_scatter then frees the plain copies (tiers_release_copies);
// tiers_gather allocates them again.
void tiers_scatter(spw_ctx *ctx);
void tiers_gather(spw_ctx *ctx);
void tiers_release_copies(spw_ctx *ctx);
// Where the plan keeps the gradient slice [begin, end) of parameter `param`
// that spw_adamw_defer holds until the next step (its `pending` block's
// home); null when the plan has no such block (no plan, or no deferral).
float *tiers_pending_grad(spw_ctx *ctx, int32_t param, int64_t begin,
                          int64_t end);
// Bracket one training step: per-step bytes and time blocked on I/O.
void tiers_step_begin(spw_ctx *ctx);
void tiers_step_end(spw_ctx *ctx);
// One line for the banner.
std::string tiers_describe(const spw_ctx *ctx);
// The last line: measured against predicted time, bytes against the plan.
std::string tiers_summary(const spw_ctx *ctx, double seconds, int64_t steps);
// --stats-json: predicted and measured bytes per link per iteration, peaks,
// I/O wait and overlap (docs/runtime.md, "Offload").
std::string tiers_stats_json(const spw_ctx *ctx, double seconds,
                             int64_t steps);

} // namespace spw

#endif
