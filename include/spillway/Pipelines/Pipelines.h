//===- Pipelines.h - the driver's pipelines as library functions -*- C++ -*-===//
#ifndef SPILLWAY_PIPELINES_PIPELINES_H
#define SPILLWAY_PIPELINES_PIPELINES_H

#include "mlir/Pass/PassManager.h"
#include "spillway/Dialect/Sched/Transforms/Passes.h"
#include "spillway/Schedule/CostModel.h"

#include <optional>
#include <string>

namespace spillway {

/// What a training step stores in bf16 (spillwayc --precision; the products'
/// numerics on a GPU are the lowering's).
enum class StoragePrecision {
  FP32,
  /// train-mixed-precision: bf16 working weights and activations around
  /// fp32 compute, fp32 master weights and optimizer state.
  BF16Mixed,
};

/// Optimizer choice and its compile-time hyper-parameters (the executable's
/// flags override them at run time). Defaults are torch.optim.AdamW's.
struct TrainingPipelineOptions {
  /// Which decomposed patterns train-fuse-patterns replaces ("all", "none",
  /// or a comma-separated subset).
  std::string fusePatterns = "all";
  StoragePrecision precision = StoragePrecision::FP32;
  std::string optimizer = "adamw";
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weightDecay = 0.01;
  /// FOAM (optimizer "foam"): fold level and update scale.
  int64_t foamLevel = 2;
  double foamAlpha = 0.25;
  /// Global gradient-norm clipping's max_norm (0: off): a barrier every
  /// update of the step follows (train-attach-optimizer{grad-clip}).
  double gradClip = 0;
  /// How the optimizer stores its moments m and v: "fp32", or "bf16" (2
  /// bytes per element, rounded to nearest even as they are stored;
  /// train-attach-optimizer{state-dtype}, train.optimizer_state_dtype).
  std::string optimizerStateDtype = "fp32";
  /// Data-parallel ranks sharding an offload plan's AdamW state (ZeRO
  /// stage 1; train-attach-optimizer{state-shards},
  /// train.optimizer_state_shards); 1: every rank keeps it whole.
  int64_t optimizerStateShards = 1;
  /// ZeRO stage 2 of an offload plan: its gradient blocks sharded over the
  /// optimizerStateShards ranks too (train-attach-optimizer{shard-gradients}).
  bool gradientShards = false;
};

/// Forward + loss in the train dialect -> one training step: fused patterns,
/// the precision policy, gradients of the loss for every parameter, then the
/// optimizer update of each.
void populateTrainingPipeline(mlir::OpPassManager &pm,
                              const TrainingPipelineOptions &options);

/// The forward graph only (spillwayc --forward): fused patterns and the
/// precision policy.
void populateForwardPipeline(mlir::OpPassManager &pm,
                             const TrainingPipelineOptions &options);

/// Annotates a training step for planning (train-partition-layers: the
/// layer and phase of every op, the module's train.layers); attributes
/// only. spillwayc --report runs it on a copy of the step.
void populatePlanningPipeline(mlir::OpPassManager &pm);

/// With `offload`, the step keeps its parameters, optimizer state and
/// gradients in per-layer blocks on the tiers `placement` names
/// (sched-place, sched-insert-transfers, sched-assign-buffers with the
/// budgets) and the lowering moves them with the runtime's spw_move family.
struct OffloadOptions {
  /// sched-place's placement option: CLASS=TIER,... (the classes it leaves
  /// out stay on the GPU; sched-place checks it).
  std::string placement;
  uint64_t gpuBytes = 0, hostBytes = 0; ///< budgets; 0 = unlimited
  /// The device's memory (the hardware profile's): without gpuBytes, the
  /// budget the step arena is what the plan's GPU arena leaves of; 0: unknown.
  uint64_t deviceBytes = 0;
  /// Told when sched-assign-buffers finds a budget too small (the pass
  /// fails too); not part of the textual pipeline.
  sched::OverBudgetHandler onOverBudget;
};

/// The schedule of a training step: M micro-batches in `order`, the
/// optimizer overlap F in [0, 1], recompute, and an optional offload plan.
/// One field per option of the registered pipeline `spillway-schedule`.
struct ScheduleOptions {
  int64_t microbatches = 1;
  schedule::Order order = schedule::Order::Horizontal;
  double overlapFraction = 0.0;
  bool recompute = true;
  std::optional<OffloadOptions> offload;
  /// sched-outline-tasks before convert-sched-to-train: the step calls one
  /// function per distinct task computation instead of holding every op (what
  /// spillwayc compiles an executable from: compile time then grows with the
  /// step's length, not its square). --emit mlir prints the step without it.
  bool outlineTasks = false;
  /// Stop before sched-outline-tasks and convert-sched-to-train: the step
  /// stays in the sched dialect (what predictTrace reads). Not a pipeline
  /// option: spillwayc's --report-trace sets it on a copy of the plan.
  bool stopInSched = false;

  /// The options as `spillway-opt --spillway-schedule="..."` takes them.
  std::string pipelineOptions() const;
};

/// Runs a training step as a schedule of M micro-batches in `order`
/// (horizontal or snake), every tensor resident: train-partition-layers,
/// convert-train-to-sched, sched-microbatch{microbatches=M},
/// sched-order{order}, sched-overlap-optimizer{fraction=overlapFraction}
/// (each update right after its gradient, the fraction F in [0, 1] of it
/// just before the layer's next forward), sched-recompute (unless
/// `recompute` is false: the cost model assumes it), with `offload` the
/// offload passes, then convert-sched-to-train. The executable applies the
/// updates still deferred after the last step before it saves or
/// checkpoints. The result is again a flat
/// train step (the tasks inlined in the schedule's order, or with
/// `outlineTasks` each a call to a function identical tasks share; slices
/// and gradient accumulation explicit) for populateLowerToRuntimePipeline.
/// spillwayc runs it after populateTrainingPipeline when --microbatches,
/// --schedule, --overlap-optimizer or an offload plan is given. M must divide every input's leading dimension
/// (sched-microbatch fails otherwise).
void populateSchedulePipeline(mlir::OpPassManager &pm,
                              const ScheduleOptions &options);

/// Registers the pipelines by name for spillway-opt: `spillway-train`
/// (populateTrainingPipeline, TrainingPipelineOptions' fields as options),
/// `spillway-schedule` (populateSchedulePipeline; its options are
/// ScheduleOptions') and `spillway-lower-to-runtime`
/// (populateLowerToRuntimePipeline: target, precision). In that order they
/// are spillwayc's compile up to the LLVM dialect.
void registerPipelines();

/// A training step -> LLVM dialect calls against the runtime's C ABI, for
/// `target` "cpu" or "cuda" with `precision` "fp32" or "bf16" (cuda only).
void populateLowerToRuntimePipeline(mlir::OpPassManager &pm,
                                    llvm::StringRef target = "cpu",
                                    llvm::StringRef precision = "fp32");

} // namespace spillway

#endif
