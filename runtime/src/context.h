//===- context.h - the model's context: parameters, inputs, the step ------===//
//
// spw_ctx, the struct behind the C ABI's opaque context handle, and what it
// holds: the declared parameters (values, gradients, optimizer state, their
// offload-plan and device bindings), inputs and outputs, the AdamW
// hyper-parameters, the step's tensors and the sticky error. Also the
// functions the entry points and the driver call on it (context.cpp), the
// device glue (device_start / pull / push, run_on_device), the CPU optimizer
// arithmetic (optimizer.cpp) and `guarded`, which turns an entry point's
// spw::Error into the context's error (support.h says why).
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_CONTEXT_H
#define SPILLWAY_RUNTIME_SRC_CONTEXT_H

#include "bf16.h"
#include "device.h"
#include "spillway/runtime/spillway_rt.h"
#include "support.h"
#include "tensor.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace spw {

struct AdamWHparams {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
  // Gradient clipping's coefficient for the step (spw_clip_grad_norm), a
  // float32 value: the kernels multiply each gradient element by it, as
  // torch's clip_grad_norm_ multiplies the gradients before AdamW. 1: none.
  double grad_scale = 1.0;
};

// An AdamW update of elements [begin, end) of a parameter, deferred by
// spw_adamw_defer at `step`: applying it later with these very inputs gives
// the update that step would have made, bit for bit.
struct PendingAdamW {
  int64_t begin = 0, end = 0;
  int64_t step = 0;
  AdamWHparams h;        // the effective hyper-parameters at `step`
  std::vector<float> grad; // gradient elements [begin, end)
  // The offload plan's copy of them instead (tiers_pending_grad): null when
  // `grad` holds them.
  float *planned = nullptr;
  bool planned_on_device = false; // `planned` is in the device's memory
  // Instead of `grad` when the state is on the device: a device buffer.
  float *dev_grad = nullptr;
};

struct ParamInfo {
  std::string name;
  std::vector<std::string> aliases; // spw_declare_param_alias: its ties' names
  std::string folded_from; // spw_declare_param_fold: rows of this parameter
  int64_t offset = 0;
  std::unique_ptr<spw_tensor> value;
  std::vector<char> grad;   // last recorded gradient (bytes), empty if none
  // Lazily allocated, state_numel each: the live state of the CPU's own
  // update with float32 state, else the plain copy device_pull and
  // tiers_gather fill (checkpoints, --save; exact: bf16 state widens).
  std::vector<float> adam_m, adam_v;
  // FOAM (spw_declare_foam): the state is folded in blocks of 2^foam_level
  // elements of each row; -1: AdamW, one state element per element.
  int32_t foam_level = -1;
  double foam_alpha = 0.25; // the compile-time default
  // Elements of each moment (m, v) the parameter's optimizer keeps.
  int64_t state_numel() const;
  // ZeRO (dist/zero.h): this rank keeps the moments of elements
  // [shard_lo, shard_hi) only (shard_hi < 0: of all), and updates only
  // those; element e's moments are at index e - shard_lo.
  int64_t shard_lo = 0, shard_hi = -1;
  // The moments' elements this rank keeps.
  int64_t state_local_numel() const {
    return shard_hi >= 0 ? shard_hi - shard_lo : state_numel();
  }
  // The shape of each moment: the parameter's, or [rows, folded columns].
  std::vector<int64_t> state_dims() const;
  // An offload plan's bound AdamW state (spw_bind of an optimizer block);
  // null: adam_m / adam_v.
  StateMem bound_m, bound_v;
  // A parameter of a block split by the optimizer overlap (bound_split >=
  // 0): its elements below bound_split are in part 0, the rest in part 1.
  // Element e of the value / m / v is at bound_*[0] + e below the split and
  // at bound_*[1] + (e - bound_split) from it; null: that part has no copy
  // where the block was bound. value->data is set only where the whole
  // parameter is contiguous. bound_split < 0: value->data, bound_m and
  // bound_v as above.
  int64_t bound_split = -1;
  float *bound_w_part[2] = {};
  StateMem bound_m_part[2], bound_v_part[2];
  // ZeRO's sharded optimizer block, split: the element bound_m_part[k] /
  // bound_v_part[k] hold first (part 0 this rank's shard_lo, part 1
  // max(shard_lo, bound_split)); -1: 0 and bound_split as above.
  int64_t state_first[2] = {-1, -1};
  // The same for the f32 values of a bf16-mixed plan's master block cut for
  // ZeRO's ranks (tiers_shards_masters): bound_w_part[k] holds elements
  // from value_first[k] on (part 0: shard_lo); -1: the values are whole.
  int64_t value_first[2] = {-1, -1};
  // The last bind of the params / optimizer block was of its GPU-tier
  // copy: bound_w_part (and dev_value's data) / bound_m* and bound_v* are
  // device addresses, and the update runs on the device. Else host ones
  // (value's data), and the update is the CPU's.
  bool w_on_device = false, state_on_device = false;
  std::vector<PendingAdamW> pending; // deferred updates not yet applied
  // The step whose gradient was last averaged over the data-parallel ranks
  // (reduce_grad): a step's gradient is averaged once, however many
  // entry points read it (the overlap's two ranges, clipping's norm).
  int64_t reduced_step = -1;
  // Gradient buffers of applied deferred updates, reused by the next defer
  // (a fresh allocation every step would fault its pages in again).
  std::vector<std::vector<float>> spare_grads;
  std::vector<std::pair<float *, int64_t>> spare_dev_grads; // (buffer, n)
  // On a device (device.h): the parameter's device copy, which the step
  // reads and the optimizer updates (`value` is refreshed from it by
  // device_pull), and the device's m and v (state_numel each, zero until
  // the first update: state_live). With bf16 state the CPU device keeps
  // them too (bf16 in host memory), adam_m / adam_v being float32.
  std::unique_ptr<spw_tensor> dev_value;
  StateMem dev_m, dev_v;
  bool state_live = false;
  // bf16-mixed without an offload plan (spw_param_work): the bf16 working
  // copy the step reads, on the device, rounded from dev_value by the cast
  // kernel at the first read after the value changed. Every write of the
  // value (an update, a load) marks it stale (param_written). work_owned:
  // its memory is the device's allocation (this case), not a block's.
  std::unique_ptr<spw_tensor> dev_work;
  bool work_stale = true;
  bool work_owned = false;
  // A bf16-mixed offload plan (master blocks) keeps the working copy in the
  // params block instead: spw_bind of it sets these as bound_w_part for the
  // master (same bound_split; [1] null for a whole block), and dev_work
  // becomes a view of the GPU-tier copy where it is contiguous. Every
  // update writes the rounding of its new master elements there.
  bf16 *bound_work_part[2] = {};
  bool work_on_device = false;
};

// The parameter's value changed (an update, a load): its bf16 working copy
// is made again at its next read.
inline void param_written(ParamInfo &p) { p.work_stale = true; }

struct Tiers; // tiers.cpp: an offload plan's blocks and the tensor store

struct InputInfo {
  std::string name;
  std::unique_ptr<spw_tensor> view; // data points into `batches`
  Buffer batches;                   // B consecutive batches
  int64_t num_batches = 0;
  // On a device: all B batches there, and the step's batch in them.
  std::unique_ptr<spw_tensor> dev_view;
  void *dev_batches = nullptr;
};

// A forward-only model's output (spw_declare_output). `value` has the
// declared dtype and shape; spw_set_output copies the step's tensor into it.
struct OutputInfo {
  std::string name;
  std::unique_ptr<spw_tensor> value;
  bool set = false; // set during the current step
};

struct AdamWOverrides {
  std::optional<double> lr, beta1, beta2, eps, weight_decay;
  std::optional<double> foam_alpha; // FOAM's alpha (--foam-alpha)
  std::optional<double> grad_clip;  // --grad-clip (0: off)
};

// Global gradient-norm clipping (spw_declare_grad_clip, spw_clip_grad_norm).
struct GradClip {
  bool declared = false;  // the step computes the norm before its updates
  double max_norm = 0;    // the compile-time value
  int64_t step = 0;       // the step whose norm was computed last
  double norm = 0;        // that step's total norm (before clipping)
  float scale = 1.0f;     // and its coefficient, min(1, max / (norm + 1e-6))
  // An offload plan's per-parameter norms (spw_grad_norms), by parameter
  // index, and the step each was taken at, for spw_clip_grad_norm_of.
  std::vector<float> part_norm;
  std::vector<int64_t> part_step;
};

} // namespace spw

struct spw_ctx {
  int64_t weights_bytes = -1; // from spw_declare_weights; -1 = not declared
  std::string state_dict_prefix; // spw_declare_state_dict_prefix
  std::vector<spw::ParamInfo> params;
  std::vector<spw::InputInfo> inputs;
  std::vector<spw::OutputInfo> outputs; // non-empty: a forward-only model
  std::optional<spw::AdamWHparams> declared_adamw;
  spw::AdamWOverrides overrides;
  spw::GradClip grad_clip;
  bool bf16_mixed = false; // spw_declare_bf16_mixed
  // spw_declare_optimizer_state_dtype(SPW_BF16): AdamW / FOAM moments are
  // stored as bf16 (StateMem) wherever they live.
  bool state_bf16 = false;
  // --zero: 1 shards the optimizer state over the data-parallel ranks
  // (dist/zero.h); 0 keeps it whole on every rank.
  int zero_stage = 0;
  // spw_declare_optimizer_shards: the offload plan's optimizer blocks hold
  // one of `declared_shards` ranks' shards, cut at multiples of
  // `declared_shard_align` elements (0: whole state).
  int declared_shards = 0;
  int64_t declared_shard_align = 0;
  // ZeRO stage 2 (spw_declare_gradient_shards): the plan's gradient and
  // gradstage blocks hold this rank's shard of each member's gradient too.
  bool gradient_shards = false;
  std::shared_ptr<spw::Tiers> tiers; // set by spw_declare_tiers
  // Bytes the step's tensors may take on the device beside the plan's GPU
  // arena (spw_declare_step_arena); -1: no bound declared.
  int64_t step_arena_budget = -1;
  // Backend: the model's compile target (spw_use_cuda registers the CUDA
  // factory) and precision; `device` is the one the run computes on
  // (device_start: the CPU, CUDA or loopback device, --device), never null
  // once the run has started.
  spw::DeviceFactory cuda_factory = nullptr;
  spw::Precision precision = spw::Precision::FP32;
  std::unique_ptr<spw::Device> device;
  // spw_constant's device copies, uploaded once: generated code passes the
  // same compile-time data every step. Keyed by address, size and a hash
  // of the bytes, so a caller that reuses a buffer gets a fresh copy.
  std::map<std::tuple<const void *, int64_t, uint64_t>, void *>
      device_constants;

  // Per-step state.
  std::vector<std::unique_ptr<spw_tensor>> step_tensors;
  spw_tensor *loss = nullptr;
  // The step's gradient tensors already averaged over the data-parallel
  // ranks (reduce_grad; clipping's norm sees them before the updates).
  std::vector<const spw_tensor *> reduced_grads;
  int64_t step = 0;            // global step number, counted from 1
  bool evaluate_only = false;  // spw_adamw records gradients but does not update
  // The declarations make no buffers for parameters, inputs and outputs
  // (spw_main: it checks the files and the memory first, then calls
  // allocate_declared).
  bool defer_alloc = false;
  std::string error;           // first error; sticky until the driver clears it
  // The first non-finite gradient of the step (spw_adamw & co. record it and
  // skip the updates from there on): the driver reports it after reading the
  // loss, which, when it is non-finite too, is the better diagnosis.
  std::string grad_error;
  spw_tensor dummy;            // returned by entry points after an error
  float dummy_storage = 0.0f;

  // The offload plan's GPU tier is the device's memory: it goes first.
  ~spw_ctx() { tiers.reset(); }

  bool failed() const { return !error.empty(); }
  void set_error(const std::string &msg) {
    if (error.empty())
      error = msg;
  }
};

namespace spw {

std::unique_ptr<spw_ctx> make_context();
// Gives the parameters and outputs that were declared with defer_alloc their
// buffers (outputs zeroed; parameters are read from the weights next); the
// inputs get theirs when loaded. `skip_plan_params`: the parameters an
// offload plan's params blocks hold get none (the driver streams them into
// their homes, as tiers_scatter leaves them: no plain copy).
void allocate_declared(spw_ctx *ctx, bool skip_plan_params = false);
// Frees all step-lifetime tensors and forgets the loss and which outputs the
// step set.
void clear_step(spw_ctx *ctx);
// Checks a parameter's gradient against its dtype and shape, and copies it
// to host (ParamInfo::grad) when host code reads it: `host_update`, or the
// gradient check.
// Data parallel (dist.h): replaces `grad` by its mean over the ranks, once
// per step (ParamInfo::reduced_step; `param` < 0: a tensor not yet known as
// a parameter's, clipping's). Every update entry point calls it first, so
// every rank updates with the same gradient. A no-op on one rank and when
// the step only evaluates.
void reduce_grad(spw_ctx *ctx, int32_t param, spw_tensor *grad);
// The same for n float32 values at `data` (device memory when `on_device`
// and the device's memory is not the host's), `what` naming them in
// --trace (a span "allreduce WHAT" on the compute lane, which it blocks).
void reduce_mean(spw_ctx *ctx, float *data, bool on_device, int64_t n,
                 const std::string &what);
// x[i] = x[i] / d for n float32 values in device memory, by the device's
// div kernel (float32 division, the bits of the host's).
void divide_on_device(spw_ctx *ctx, float *x, int64_t n, float d);
void record_grad(spw_ctx *ctx, int32_t param, const spw_tensor *grad,
                 bool host_update);
// A step tensor on the context's device (uninitialized) or host.
spw_tensor *alloc_step_tensor(spw_ctx *ctx, int32_t dtype, int32_t rank,
                              const int64_t *dims, const char *what);
// Copies the bytes of tensor `t` (host or device) into `host`.
void read_tensor(spw_ctx *ctx, const spw_tensor &t, void *host);
// Starts the run's device: creates the device copies of the parameters,
// their optimizer state and the input batches (device_start; none on a
// host-visible device, whose copies are the host's, nor for an offload
// plan's members), refreshes the host copies from the device (device_pull:
// parameters and live optimizer state) and the device from the host
// (device_push, after the host copies changed: a checkpoint restored, a
// gradient check's perturbation).
void device_start(spw_ctx *ctx, std::unique_ptr<Device> device);
void device_pull(spw_ctx *ctx);
void device_push(spw_ctx *ctx);
void device_push_param(spw_ctx *ctx, size_t param);
// Bytes of each of a parameter's moments (m, v) in the context's state
// dtype; and copies of a moment between its float32 plain copy and device
// state (rounded to nearest even into bf16 state; widened, exactly, out).
int64_t state_bytes(const spw_ctx *ctx, const ParamInfo &p);
void upload_state(Device &d, StateMem dev, const std::vector<float> &host);
void download_state(Device &d, std::vector<float> &host, StateMem dev);
// The CPU optimizer arithmetic on raw arrays (optimizer.cpp): one AdamW
// update of n elements, one FOAM update of a [rows, cols] weight with
// state folded at `level`; every backend's kernels match them.
void adamw_kernel(float *w, StateMem m, StateMem v, const float *g, int64_t n,
                  int64_t step, const AdamWHparams &h);
void foam_kernel(float *w, StateMem m, StateMem v, const float *g, int64_t rows,
                 int64_t cols, int level, int64_t step, const AdamWHparams &h,
                 double alpha);
// y[i] = to_bf16(x[i]) for i < n: the bf16 working copy of updated master
// elements (a bf16-mixed offload plan's params block).
void round_to_bf16(const float *x, bf16 *y, int64_t n);
// The same on the context's device (device memory; the cast kernel, in
// stream order); throws the context's error when the kernel fails.
void round_to_bf16_on_device(spw_ctx *ctx, const float *x, bf16 *y,
                             int64_t n);
// Runs kernel `op` on the context's device (guarded: errors go to the
// context); `host` is the op's CPU kernel.
void run_on_device(spw_ctx *ctx, Op op, KernelEntry host,
                   spw_tensor *const *ins, spw_tensor *const *outs,
                   const int64_t *iattrs, const double *fattrs);
// The AdamW hyper-parameters in effect for a call with these defaults (and
// the step's clip coefficient, once its norm is computed).
AdamWHparams effective_adamw(const spw_ctx *ctx, const AdamWHparams &call);
// The max_norm gradient clipping uses: --grad-clip, else the compiled
// value; 0 when the model has no clipping or it is turned off.
double effective_grad_clip(const spw_ctx *ctx);
// Gradient clipping's per-tensor norm (optimizer.cpp): the float32 2-norm
// of x[i] / divisor over n floats at `data`, in device memory when
// `on_device` (read back a chunk at a time); the same bits wherever the
// values are.
float grad_norm(spw_ctx *ctx, const float *data, bool on_device, int64_t n,
                float divisor);
// The per-block sums grad_norm adds: of each 64 Ki-element block of the
// n floats at `data` (which start a block), each divided by `divisor`, in
// order.
std::vector<double> block_sums_of_squares(spw_ctx *ctx, const float *data,
                                          bool on_device, int64_t n,
                                          float divisor = 1.0f);

// Runs an entry point's body unless the context already failed; turns a
// thrown spw::Error into the context's error, prefixed with `what`.
template <class F> void guarded(spw_ctx *ctx, const char *what, F &&body) {
  if (!ctx || ctx->failed())
    return;
  try {
    body();
  } catch (const Error &e) {
    ctx->set_error(std::string(what) + ": " + e.what());
  } catch (const std::bad_alloc &) {
    ctx->set_error(std::string(what) + ": out of memory");
  } catch (const std::exception &e) {
    ctx->set_error(std::string(what) + ": " + e.what());
  }
}

} // namespace spw

namespace spw {
// The name --save writes for parameter `name`: without the wrapper's
// prefix (spw_declare_state_dict_prefix), as the model's own state_dict()
// names it.
inline std::string saved_name(const spw_ctx *ctx, const std::string &name) {
  const std::string &p = ctx->state_dict_prefix;
  if (!p.empty() && name.size() > p.size() && name.compare(0, p.size(), p) == 0)
    return name.substr(p.size());
  return name;
}
} // namespace spw

#endif // SPILLWAY_RUNTIME_SRC_CONTEXT_H
