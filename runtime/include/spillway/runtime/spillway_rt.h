/*===- spillway_rt.h - the C ABI generated code calls ----------------------===
 *
 * The compiler (convert-train-to-runtime) lowers a training step to calls of
 * these functions. Every tensor is an opaque handle owned by the context:
 * parameters and inputs live as long as the context, tensors made by
 * spw_alloc live until the end of the current step.
 *
 * A generated object defines two functions the runtime calls:
 *   void spw_model_declare(spw_ctx *ctx);  -- spw_declare_* calls, once
 *   void spw_model_step(spw_ctx *ctx);     -- one training step
 * and `main`, which calls spw_main(argc, argv).
 *
 * Kernel entry points share one signature:
 *   void spw_op_NAME(spw_ctx *ctx, spw_tensor *const *ins,
 *                    spw_tensor *const *outs, const int64_t *iattrs,
 *                    const double *fattrs);
 * Outputs are allocated by the caller (spw_alloc) with the static shapes the
 * compiler inferred; the kernel fills them. An absent optional input is NULL.
 * The per-op layout of ins/outs/iattrs/fattrs is kernels.def's table, the
 * contract between lowering and runtime.
 *===----------------------------------------------------------------------===*/
#ifndef SPILLWAY_RUNTIME_SPILLWAY_RT_H
#define SPILLWAY_RUNTIME_SPILLWAY_RT_H

#include <stdint.h>

#include "spillway/runtime/tier.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spw_ctx spw_ctx;
typedef struct spw_tensor spw_tensor;

/* SPW_BOOL: one byte per element, 0 or 1 (comparison results, masks).
 * SPW_BF16: bfloat16 storage of float32 values (the upper 16 bits, rounded
 * to nearest even); only cast reads and writes it. */
enum spw_dtype { SPW_F32 = 1, SPW_I64 = 2, SPW_I32 = 3, SPW_BOOL = 4,
                 SPW_BF16 = 5 };

/* Runtime entry: parses the executable's command line and trains. */
int spw_main(int argc, char **argv);

/* ---- model description (called from spw_model_declare) ---------------- */
/* Total size in bytes of the weights file the parameters' offsets refer to. */
void spw_declare_weights(spw_ctx *ctx, int64_t total_bytes);
/* Returns the parameter's index (0, 1, ... in call order). The name is the
 * ONNX initializer name: --save keys and error messages use it. */
int32_t spw_declare_param(spw_ctx *ctx, const char *name, int32_t dtype,
                          int32_t rank, const int64_t *dims, int64_t offset);
/* The prefix a wrapper module put before the names of the model's own
 * state_dict (e.g. "model." for forward(ids, labels) -> loss around an HF
 * model): --save writes the names without it, --weights finds a tensor under
 * either name. */
void spw_declare_state_dict_prefix(spw_ctx *ctx, const char *prefix);
/* Another state_dict name of parameter `index` (a tie, e.g. GPT-2's
 * transformer.wte.weight of lm_head.weight): --save writes the value under it
 * too, --weights may find it there. */
void spw_declare_param_alias(spw_ctx *ctx, int32_t index, const char *name);
/* Parameter `index` is the rows of the model's parameter `source` (its
 * state-dict name, with the wrapper prefix) that the export reads: the
 * exporter's optimizer folded the parameter into them. --save writes it under its own name and says so; a
 * --weights file that has `source` but not it gets an error saying how to
 * compile the parameter whole. */
void spw_declare_param_fold(spw_ctx *ctx, int32_t index, const char *source);
/* Returns the input's index. */
int32_t spw_declare_input(spw_ctx *ctx, const char *name, int32_t dtype,
                          int32_t rank, const int64_t *dims);
/* Forward-only models (spillwayc --forward) declare named outputs instead of
 * a loss; the executable writes them with --outputs DIR. Returns the index. */
int32_t spw_declare_output(spw_ctx *ctx, const char *name, int32_t dtype,
                           int32_t rank, const int64_t *dims);
/* spillwayc --target cuda: the executable runs on the GPU by default (its
 * --device flag chooses), with products in `precision` 0 (fp32) or 1 (bf16
 * inputs, fp32 accumulation). First in spw_model_declare. Defined only in
 * the CUDA runtime library (libspillway_cuda.a), which such executables
 * link. */
void spw_use_cuda(spw_ctx *ctx, int32_t precision);
/* Compile-time optimizer defaults; the executable's flags override them. */
void spw_declare_adamw(spw_ctx *ctx, double lr, double beta1, double beta2,
                       double eps, double weight_decay);
/* Global gradient-norm clipping (spillwayc --grad-clip F): the step computes
 * the gradients' norm (spw_clip_grad_norm) before its first update, and
 * every AdamW update scales its gradient by the step's clip coefficient.
 * `max_norm` is the compile-time value (the executable's --grad-clip
 * overrides it; 0 turns clipping off). Declared once, before the step. */
void spw_declare_grad_clip(spw_ctx *ctx, double max_norm);
/* The step stores its activations and working weights as bf16 (spillwayc
 * --precision bf16-mixed; the casts are the step's own ops): the banner says
 * so, and --check-gradients, whose finite differences bf16 rounding would
 * swallow, is refused. Declared once, before the step. */
void spw_declare_bf16_mixed(spw_ctx *ctx);
/* AdamW's and FOAM's moments are stored as `dtype`: SPW_F32 (the default)
 * or SPW_BF16 (spillwayc --optimizer-state-dtype bf16): rounded to nearest
 * even as each update stores them, widened as it reads them; the arithmetic
 * stays float32. Optimizer blocks then hold 2 bytes per state element, and
 * checkpoints the widened float32 values. Declared before the tiers, the
 * device and any optimizer state. */
void spw_declare_optimizer_state_dtype(spw_ctx *ctx, int32_t dtype);
/* The offload plan's optimizer blocks hold one rank's shard of each AdamW
 * moment (ZeRO stage 1, spillwayc --zero 1 --ranks N): `ranks` ranks, each
 * keeping the elements spw_zero_shard_cut(n, r, ranks, align) ..
 * spw_zero_shard_cut(n, r + 1, ranks, align) in a slot of the largest
 * rank's shard (spillway/runtime/zero_shard.h). The run must have that
 * many ranks and runs --zero 1. Declared before the tiers. */
void spw_declare_optimizer_shards(spw_ctx *ctx, int32_t ranks, int64_t align);
/* After spw_declare_optimizer_shards (ZeRO stage 2, spillwayc --zero 2
 * --ranks N): the plan's gradient and gradstage blocks hold this rank's
 * shard of each member's f32 gradient too, in slots laid out as
 * spw_zero_sharded_layout lays out a master block. spw_stage_grads sums a
 * member's micro-batch gradients and reduce-scatters the sum over the ranks
 * before it stages the shard; spw_gradient returns the shard's mean (the
 * rest of the tensor is not read). Declared before the tiers. */
void spw_declare_gradient_shards(spw_ctx *ctx);
/* Parameter `param` (2-D, f32) is updated by FOAM (spw_foam) with state
 * folded in blocks of 2^level elements of each row: its m and v are rows x
 * ceil(cols / 2^level) each. `alpha` is the compile-time default (the
 * executable's --foam-alpha overrides it). Before the tiers are declared. */
void spw_declare_foam(spw_ctx *ctx, int32_t param, int64_t level,
                      double alpha);

/* ---- one step (called from spw_model_step) ----------------------------- */
spw_tensor *spw_input(spw_ctx *ctx, int32_t index);
spw_tensor *spw_param(spw_ctx *ctx, int32_t index);
/* The bf16 working copy of f32 parameter `index` (bf16-mixed): its value
 * rounded to nearest even, so the step reads what a cast of spw_param would
 * give without rounding the weights at every read. Without an offload plan
 * the runtime keeps it, made again at the first read after an update or a
 * load changed the value. In an offload plan with master blocks it is the
 * copy in the layer's params block bound by spw_bind (an error while none
 * is bound), which every update writes with its new master's rounding; an
 * offload plan without master blocks keeps none (an error). The runtime
 * owns it, as a parameter's. */
spw_tensor *spw_param_work(spw_ctx *ctx, int32_t index);
/* A step-lifetime tensor, uninitialized. */
spw_tensor *spw_alloc(spw_ctx *ctx, int32_t dtype, int32_t rank,
                      const int64_t *dims);
/* A step-lifetime tensor holding a copy of `data` (numel * dtype size bytes). */
spw_tensor *spw_constant(spw_ctx *ctx, int32_t dtype, int32_t rank,
                         const int64_t *dims, const void *data);
/* A step tensor of type (dtype, rank, dims) sharing x's data: a reshape
 * without a copy (same dtype, same element count). Its memory is x's: the
 * view is not released itself, and x is released only after the last use
 * of x and of its views. */
spw_tensor *spw_view(spw_ctx *ctx, spw_tensor *x, int32_t dtype,
                     int32_t rank, const int64_t *dims);
/* The step reads `t` (a tensor of spw_alloc or spw_constant) no more: its
 * memory may be reused by later allocations of the step. The handle stays
 * valid but holds no data; releasing it again, or releasing a parameter's,
 * an input's or a freed activation's, does nothing. The compiler calls it
 * after each step tensor's last use. */
void spw_release(spw_ctx *ctx, spw_tensor *t);
/* The step's loss (a float32 scalar). */
void spw_set_loss(spw_ctx *ctx, spw_tensor *loss);
/* A forward-only model's output `index` for this step. */
void spw_set_output(spw_ctx *ctx, int32_t index, spw_tensor *value);
/* d loss / d param: kept by the runtime (gradient checks read it). */
void spw_param_grad(spw_ctx *ctx, int32_t param, spw_tensor *grad);
/* Records the gradient like spw_param_grad, then (unless the runtime is only
 * evaluating gradients) applies one AdamW update to the parameter with the
 * given defaults, each overridden by the executable's flags when set. */
void spw_adamw(spw_ctx *ctx, int32_t param, spw_tensor *grad, double lr,
               double beta1, double beta2, double eps, double weight_decay);
/* The barrier of gradient clipping (spw_declare_grad_clip): the n gradients
 * are every updated parameter's of the step (micro-batch mean), complete.
 * As torch.nn.utils.clip_grad_norm_(max_norm): norm = the 2-norm of the
 * per-tensor 2-norms, coefficient = min(1, max_norm / (norm + 1e-6)) in
 * float32 (max_norm the executable's --grad-clip when given). Returns a
 * step tensor (f32 scalar) holding the coefficient; the step's AdamW
 * updates that follow (spw_adamw, _range, _defer) multiply their gradient
 * by it, and one that comes before it fails. The driver logs the norm. */
spw_tensor *spw_clip_grad_norm(spw_ctx *ctx, int32_t n,
                               spw_tensor *const *grads, double max_norm);
/* The same, knowing each gradient's parameter (params[i], -1: not known):
 * under ZeRO (--zero 1) a known parameter's gradient is reduce-scattered
 * and its norm taken from the ranks' shards, the same bits. */
spw_tensor *spw_clip_grad_norm_params(spw_ctx *ctx, int32_t n,
                                      spw_tensor *const *grads,
                                      const int64_t *params, double max_norm);
/* Records the gradient like spw_param_grad, then (unless evaluating) applies
 * one FOAM update (blocked state folding, docs/runtime.md "FOAM") to a
 * parameter declared with spw_declare_foam; the AdamW hyper-parameter
 * overrides apply to it too. */
void spw_foam(spw_ctx *ctx, int32_t param, spw_tensor *grad, double lr,
              double beta1, double beta2, double eps, double weight_decay,
              double alpha);
/* Optimizer overlap (sched-overlap-optimizer). Element ranges [begin, end)
 * index the parameter in row-major order; `grad` is the whole gradient.
 * spw_adamw_range: spw_adamw restricted to elements [begin, end) (of the
 *   parameter and its moments); the other elements are untouched.
 * spw_adamw_defer: records the gradient like spw_adamw, then keeps the update
 *   of [begin, end) pending: that gradient slice, the step number and the
 *   hyper-parameters in effect. Nothing else changes.
 * spw_adamw_apply_pending: applies the pending update of exactly [begin,
 *   end) made in an earlier step, as spw_adamw_range would have then, and
 *   forgets it; nothing pending (the first step, after a flush) is a no-op.
 * spw_adamw_flush: applies every pending update (parameters in declaration
 *   order); the driver calls it after the last step and before it saves or
 *   checkpoints, so the weights are those of ordinary training.
 * A parameter may not be read (spw_param) or updated over a range with an
 * update pending: that would use stale weights. */
void spw_adamw_range(spw_ctx *ctx, int32_t param, spw_tensor *grad,
                     int64_t begin, int64_t end, double lr, double beta1,
                     double beta2, double eps, double weight_decay);
void spw_adamw_defer(spw_ctx *ctx, int32_t param, spw_tensor *grad,
                     int64_t begin, int64_t end, double lr, double beta1,
                     double beta2, double eps, double weight_decay);
void spw_adamw_apply_pending(spw_ctx *ctx, int32_t param, int64_t begin,
                             int64_t end);
void spw_adamw_flush(spw_ctx *ctx);

/* ---- tasks (sched-outline-tasks) ------------------------------------------ *
 * The step says which task runs: around each task's call, begin (phase
 * SPW_PHASE_*, its layer, its micro-batch or -1) and end. The runtime counts
 * the time in tasks (the offload telemetry's device busy fraction) and, with
 * --trace, draws each task as a span "fwd L3 mb1" on the compute lane. */
enum spw_phase { SPW_PHASE_FWD = 0, SPW_PHASE_BWD = 1, SPW_PHASE_OPT = 2 };
void spw_task_begin(spw_ctx *ctx, int32_t phase, int32_t layer,
                    int32_t microbatch);
void spw_task_end(spw_ctx *ctx);

/* ---- offload plans (sched-insert-transfers / sched-assign-buffers) ------- *
 * A model compiled with a placement keeps each layer's parameters, AdamW
 * state and gradients in *blocks* (one per layer and class) homed on a tier
 * at static offsets, and its step moves them with these calls
 * (docs/runtime.md, "Offload"). Tiers: enum spw_tier (tier.h): 0 gpu, 1 host
 * (pinned), 2 ssd. Classes: block_classes.def. Priorities: 0 demand,
 * 1 prefetch, 2 writeback. */
enum spw_block_class {
#define SPW_BLOCK_CLASS(ENUM, name, value) SPW_BLOCK_##ENUM = value,
#include "spillway/runtime/block_classes.def"
};
/* Arena sizes of the plan's peaks, the default SSD directories (comma
 * separated; the executable's --ssd overrides them) and the plan's bytes per
 * iteration predicted[4] = {ssd_read, ssd_write, h2d, d2h}. */
void spw_declare_tiers(spw_ctx *ctx, int64_t gpu_bytes, int64_t host_bytes,
                       int64_t ssd_bytes, const char *ssd_dirs,
                       const int64_t *predicted);
/* The cost model's prediction for the plan (spillwayc --hw): seconds per
 * iteration and the resource that bounds it ("compute", "pcie", "ssd",
 * "cpu_optimizer"); --stats-json and the last line report them next to the
 * measured time. */
void spw_declare_prediction(spw_ctx *ctx, double seconds, const char *bound);
/* The device memory the executor's step tensors (activations kept on the
 * GPU, gradients, scratch) may take: the plan's GPU budget (spillwayc
 * --gpu-mem, else the --hw profile's GPU memory) less the plan's GPU arena.
 * Recorded in the context (step_arena_budget) for the device's step arena;
 * not declared: unbounded. */
void spw_declare_step_arena(spw_ctx *ctx, int64_t bytes);
/* Block (cls, layer) of `bytes` bytes: its home tier (-1: none) and offset
 * there, and its n members: parameter indices and byte offsets (for the
 * optimizer class, offsets of m; v follows at bytes / 2 + offset).
 * A plan that declares master blocks (SPW_BLOCK_MASTER, only after
 * spw_declare_bf16_mixed) is bf16-mixed: a layer's master block holds its
 * parameters' f32 values (4 bytes an element, offsets multiples of 4), the
 * params block the same members in the same order as their bf16 working
 * copies (2 bytes an element, offsets multiples of 2); every params block
 * has its master block and every master block its params block (checked
 * when the tiers start). */
void spw_declare_block(spw_ctx *ctx, int32_t cls, int32_t layer,
                       int64_t bytes, int32_t home, int64_t home_offset,
                       int32_t n, const int64_t *params,
                       const int64_t *offsets);
/* Splits block (cls, layer) (params, master or optimizer) for the
 * optimizer overlap: part 0 holds the first `split_bytes` (a multiple of
 * 256) of its members (for the optimizer, of m and of v: part 0 is [m | v]
 * of those bytes), part 1 the rest; on every tier part 1 starts at part 0's
 * size rounded up to 256 (GPU) or 4096 (host, SSD) bytes. A layer's blocks
 * split at the same element (split_bytes / 2 for a bf16-mixed plan's params
 * block, split_bytes / 4 otherwise), or none is split. Before tiers start. */
void spw_declare_split(spw_ctx *ctx, int32_t cls, int32_t layer,
                       int64_t split_bytes);
/* Homes part 0 of split block (cls, layer) apart from part 1: on tier
 * `home` (0 gpu, 1 host, 2 ssd; another than the block's) at byte `offset`
 * of that tier's arena (a multiple of 256 on the GPU, 4096 on host and
 * SSD), where part 0's extent starts; part 1 keeps the block's home, at
 * home_offset plus its part offset. A block cut between two tiers, its
 * first bytes on the faster one (the plan fills a tier's budget to the
 * byte). Each part's home copy stays (spw_drop_part of the other part's
 * copy on a tier where one part is homed, not spw_drop); copies elsewhere
 * go part by part at the move's `at` plus the part's offset. A split
 * params, master or optimizer block only, not sharded over the ranks;
 * after spw_declare_split, before tiers start. */
void spw_declare_part_home(spw_ctx *ctx, int32_t cls, int32_t layer,
                           int32_t home, int64_t offset);
/* Starts a move of the block's copy on `from` to `to` (one link), placing
 * the destination at offset `at` when the block has no copy there yet.
 * Returns a token for spw_await. */
int32_t spw_move(spw_ctx *ctx, int32_t cls, int32_t layer, int32_t from,
                 int32_t to, int32_t prio, int64_t at);
/* The same for part `part` (0 or 1) of a split block; `at` is where the
 * block's copy starts on `to` (the part goes at its offset from there; of
 * a block that is not cut, beside its other part when that is there). */
int32_t spw_move_part(spw_ctx *ctx, int32_t cls, int32_t layer, int32_t part,
                      int32_t from, int32_t to, int32_t prio, int64_t at);
/* A copy of params block `layer` (part `part`, or the whole block for -1)
 * on `tier` (gpu or host) at `at`, like a move's destination, but with no
 * bytes read from another tier: a bf16-mixed plan's working copies rounded
 * from the layer's master block, which must be bound on `tier` (sched.alloc:
 * the update that follows rewrites what it changes). */
void spw_alloc_copy(spw_ctx *ctx, int32_t cls, int32_t layer, int32_t part,
                    int32_t tier, int64_t at);
void spw_await(spw_ctx *ctx, int32_t token);
/* Frees the block's copy on a tier other than its home (of a cut block,
 * a tier where neither part is homed). */
void spw_drop(spw_ctx *ctx, int32_t cls, int32_t layer, int32_t tier);
/* Frees part `part` of a split block's copy there (not its home copy). */
void spw_drop_part(spw_ctx *ctx, int32_t cls, int32_t layer, int32_t part,
                   int32_t tier);
/* From here the step's parameters (params, or master in a bf16-mixed plan),
 * their bf16 working copies (params in a bf16-mixed plan: what
 * spw_param_work reads, and what each update of the master rewrites, so
 * the plan binds it where the update runs) or AdamW state (optimizer) of
 * the layer are the block's copy on `tier` (of a split block, the parts
 * that are there; a parameter is readable whole only where it is
 * contiguous). */
void spw_bind(spw_ctx *ctx, int32_t cls, int32_t layer, int32_t tier);
/* Sums a backward run's micro-batch gradients (n = members x micro-batches,
 * micro-batch by micro-batch) into the GPU copy of block (cls, layer):
 * mode 0 writes (creating the copy at `at` when absent), 1 adds. */
void spw_stage_grads(spw_ctx *ctx, int32_t cls, int32_t layer, int32_t mode,
                     int32_t n, spw_tensor *const *grads, int64_t at);
/* On `tier`: gradients (layer) = gradstage (mode 0) or += it (mode 1). */
void spw_accumulate_grads(spw_ctx *ctx, int32_t layer, int32_t mode,
                          int32_t tier, int64_t at);
/* A step tensor: the accumulated gradient of `param` in the gradients
 * block's copy on `tier`, divided by `divisor`. */
spw_tensor *spw_gradient(spw_ctx *ctx, int32_t param, int32_t layer,
                         int32_t tier, int64_t divisor);
/* Gradient clipping in an offload plan (sched.grad_norms,
 * sched.clip_grad_norm): spw_grad_norms takes, for each member of block
 * (gradients, layer) on `tier` (gpu or host), the norm spw_clip_grad_norm
 * would of its mean (each element divided by `divisor`) and keeps it for the
 * step; spw_clip_grad_norm_of then returns the coefficient of the n
 * parameters' norms (in that order) as spw_clip_grad_norm does, and fails
 * when one was not taken this step. */
void spw_grad_norms(spw_ctx *ctx, int32_t layer, int32_t tier,
                    int64_t divisor);
spw_tensor *spw_clip_grad_norm_of(spw_ctx *ctx, int32_t n,
                                  const int64_t *params, double max_norm);

/* Activations off the GPU: block (SPW_BLOCK_ACTIVATIONS, index) of `bytes`
 * bytes, without a home (every copy is placed by spw_move's `at` and freed
 * by spw_drop). spw_put_activation copies x into the block's GPU copy
 * (placed at `at` when absent) and frees x's memory: x must not be read
 * again. spw_take_activation returns a new step tensor of the given type
 * (the one that was put) holding the block's GPU copy. */
void spw_declare_activation(spw_ctx *ctx, int32_t index, int64_t bytes);
void spw_put_activation(spw_ctx *ctx, int32_t index, spw_tensor *x,
                        int64_t at);
spw_tensor *spw_take_activation(spw_ctx *ctx, int32_t index, int32_t dtype,
                                int32_t rank, const int64_t *dims);

/* ---- kernels ------------------------------------------------------------ *
 * One entry point per row of kernels.def, which gives each one's layout. */
#define SPW_KERNEL(name, n_ins, n_outs, n_iattrs, n_fattrs)                    \
  void spw_op_##name(spw_ctx *ctx, spw_tensor *const *ins,                     \
                     spw_tensor *const *outs, const int64_t *iattrs,           \
                     const double *fattrs);
#include "spillway/runtime/kernels.def"

#ifdef __cplusplus
}
#endif

#endif /* SPILLWAY_RUNTIME_SPILLWAY_RT_H */
