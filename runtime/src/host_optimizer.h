//===- host_optimizer.h - the CPU optimizer on host threads ---------------===//
//
// When an offload plan binds a parameter and its optimizer state on the host
// tier (spillwayc --place optimizer=host or =ssd: the CPU optimizer; in a
// bf16-mixed plan its master and bf16 working copy too), its update
// (spw_adamw, spw_adamw_range, spw_foam, spw_adamw_apply_pending) runs on
// host worker threads (HostTasks) while the step goes on: the same kernel
// on the same pointers, so the same bits (and the working copy's rounding,
// written by the same task). The plan's blocks remember each update's
// tokens (tiers_note_host_update); a move that reads or overwrites that
// host copy, a drop of it, a bind on the host tier, a gather and the step's
// end wait for those updates only.
//
// The gradient an update reads stays with the task until it finishes: the
// recorded copy (ParamInfo::grad's buffer, freed then; at most
// kRecordedBytesInFlight of them besides the newest are held, else the
// step waits for the oldest update) or the deferred update's own slice
// (back to ParamInfo::spare_grads at the step's end).
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_HOST_OPTIMIZER_H
#define SPILLWAY_RUNTIME_SRC_HOST_OPTIMIZER_H

#include "host_tasks.h"
#include "context.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

namespace spw {

// Per offload plan (owned by its Tiers, tiers_host_optimizer).
struct HostOptimizer {
  ~HostOptimizer(); // runs what is queued before the gradients go

  int threads = 0; // --optimizer-threads; 0: default_host_threads()
  std::unique_ptr<HostTasks> tasks; // started by the first update
  // This step's updates: their tokens (one per chunk) and the gradient
  // buffer they read.
  struct Update {
    int32_t param = -1;
    int64_t begin = 0, end = 0; // the elements it updates
    std::vector<storage::Token> tokens;
    std::vector<char> recorded;  // ParamInfo::grad's buffer, or
    std::vector<float> deferred; // a deferred update's slice
  };
  std::vector<Update> in_flight;
  std::atomic<int64_t> busy_ns{0}; // task time, summed over the workers
  int64_t busy_ns_at_step_end = 0;
  double step_seconds = 0, total_seconds = 0;
  // Time the step's thread blocked on updates (a move, drop or bind of
  // their blocks, the step end): all steps, and the last step's.
  int64_t wait_ns = 0, wait_ns_at_step_end = 0;
  double step_wait_seconds = 0;
  // Waits for `t` (rethrowing its error), counting the time blocked.
  void wait(const storage::Token &t);
};

// The recorded gradients the CPU optimizer's running updates may hold
// (docs/runtime.md, "Memory bound"): part of the constant above the budgets.
constexpr size_t kRecordedBytesInFlight = size_t(32) << 20;

// --optimizer-threads (0: the default). Before the first step.
void host_optimizer_configure(spw_ctx *ctx, int threads);

// True when parameter p's update runs on the host workers: the plan binds
// p and its optimizer state on the host tier.
bool host_optimizer_runs(spw_ctx *ctx, const ParamInfo &p);

// Submits an update whose pointers the caller resolved exactly as for the
// inline kernel: AdamW of elements [begin, end) (g: element begin's
// gradient), reading either the recorded gradient (deferred null; g points
// into p.grad), the deferred update's slice *deferred (taken over; g
// points into it) or, `planned`, the slice in the plan's pending block (which
// the next deferral's write waits for this update to leave). FOAM of the
// whole parameter (g: p.grad). `work` (non-null in a bf16-mixed plan): the
// bf16 working copy of the updated elements, which each task writes with
// the rounding of its elements after updating them.
void host_optimizer_adamw(spw_ctx *ctx, ParamInfo &p, float *w, StateMem m,
                          StateMem v, const float *g, int64_t begin,
                          int64_t end, int64_t step, const AdamWHparams &h,
                          std::vector<float> *deferred, bool planned = false,
                          bf16 *work = nullptr);
void host_optimizer_foam(spw_ctx *ctx, ParamInfo &p, float *w, StateMem m,
                         StateMem v, const float *g, int64_t rows, int64_t cols,
                         int level, int64_t step, const AdamWHparams &h,
                         double alpha, bf16 *work = nullptr);

// Waits for every update in flight and hands their gradient buffers back;
// returns the first error ("" if none). `step_end`: also closes the step's
// host optimizer time. (tiers_step_end, tiers_gather, tiers_scatter.)
std::string host_optimizer_finish(spw_ctx *ctx, bool step_end);

// Seconds the host workers spent in updates (summed over the threads): in
// the last step, and in all steps. 0 without an offload plan.
double host_optimizer_seconds(const spw_ctx *ctx);
double host_optimizer_total_seconds(const spw_ctx *ctx);
// Seconds the step's thread blocked waiting for updates in the last step.
double host_optimizer_wait_seconds(const spw_ctx *ctx);

// The pieces, for the tests: one update split into tasks of at least
// `min_elems` elements (AdamW: element ranges; FOAM: whole rows), at most
// one per worker. The kernels are elementwise (FOAM: row by row), so any
// split gives the single call's bits. Each task adds its time to *busy_ns
// (may be null) and, with `work`, writes its elements' rounding there.
std::vector<storage::Token>
submit_adamw_tasks(HostTasks &tasks, const std::string &name, float *w,
                   StateMem m, StateMem v, const float *g, int64_t n,
                   int64_t step, const AdamWHparams &h, int64_t min_elems,
                   std::atomic<int64_t> *busy_ns, bf16 *work = nullptr);
std::vector<storage::Token>
submit_foam_tasks(HostTasks &tasks, const std::string &name, float *w,
                  StateMem m, StateMem v, const float *g, int64_t rows,
                  int64_t cols, int level, int64_t step, const AdamWHparams &h,
                  double alpha, int64_t min_elems,
                  std::atomic<int64_t> *busy_ns, bf16 *work = nullptr);
// The smallest task the optimizer submits, in elements.
constexpr int64_t kHostUpdateMinElems = int64_t(1) << 16;

} // namespace spw

#endif
