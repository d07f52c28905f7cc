//===- Pipelines.cpp - the driver's pipelines -----------------------------===//

#include "spillway/Pipelines/Pipelines.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "spillway/Conversion/Passes.h"
#include "spillway/Dialect/Sched/Transforms/Passes.h"
#include "spillway/Dialect/Train/Transforms/Passes.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

#include <cstdlib>

using namespace mlir;

void spillway::populateForwardPipeline(OpPassManager &pm,
                                       const TrainingPipelineOptions &options) {
  train::TrainFusePatternsPassOptions fuse;
  fuse.patterns = options.fusePatterns;
  pm.addPass(train::createTrainFusePatternsPass(fuse));
  if (options.precision == StoragePrecision::BF16Mixed)
    pm.addPass(train::createTrainMixedPrecisionPass());
}

void spillway::populateTrainingPipeline(OpPassManager &pm,
                                        const TrainingPipelineOptions &options) {
  populateForwardPipeline(pm, options);
  pm.addPass(train::createTrainAutodiffPass());
  // The reverse sweep repeats transposes and constants; merge them before
  // they become runtime calls.
  pm.addPass(createCSEPass());
  train::TrainAttachOptimizerPassOptions opt;
  opt.optimizer = options.optimizer;
  opt.lr = options.lr;
  opt.beta1 = options.beta1;
  opt.beta2 = options.beta2;
  opt.eps = options.eps;
  opt.weightDecay = options.weightDecay;
  opt.foamLevel = options.foamLevel;
  opt.foamAlpha = options.foamAlpha;
  opt.gradClip = options.gradClip;
  opt.stateDtype = options.optimizerStateDtype;
  opt.stateShards = options.optimizerStateShards;
  opt.shardGradients = options.gradientShards;
  pm.addPass(train::createTrainAttachOptimizerPass(opt));
}

void spillway::populatePlanningPipeline(OpPassManager &pm) {
  pm.addPass(train::createTrainPartitionLayersPass());
}

void spillway::populateSchedulePipeline(OpPassManager &pm,
                                        const ScheduleOptions &options) {
  pm.addPass(train::createTrainPartitionLayersPass());
  pm.addPass(createConvertTrainToSchedPass());
  sched::SchedMicrobatchPassOptions mb;
  mb.microbatches = options.microbatches;
  pm.addPass(sched::createSchedMicrobatchPass(mb));
  sched::SchedOrderPassOptions ord;
  ord.order = schedule::orderName(options.order);
  pm.addPass(sched::createSchedOrderPass(ord));
  sched::SchedOverlapOptimizerPassOptions overlap;
  overlap.fraction = options.overlapFraction;
  pm.addPass(sched::createSchedOverlapOptimizerPass(overlap));
  // After the order: recompute is decided per fwd/bwd pair, whatever the
  // order, and placement sees only the activations it keeps.
  if (options.recompute)
    pm.addPass(sched::createSchedRecomputePass());
  if (const std::optional<OffloadOptions> &offload = options.offload) {
    sched::SchedPlacePassOptions place;
    place.placement = offload->placement;
    pm.addPass(sched::createSchedPlacePass(place));
    pm.addPass(sched::createSchedInsertTransfersPass());
    sched::SchedAssignBuffersPassOptions buffers;
    buffers.gpuMem = offload->gpuBytes;
    buffers.hostMem = offload->hostBytes;
    buffers.deviceMem = offload->deviceBytes;
    pm.addPass(
        sched::createSchedAssignBuffersPass(buffers, offload->onOverBudget));
  }
  if (options.stopInSched)
    return;
  if (options.outlineTasks)
    pm.addPass(sched::createSchedOutlineTasksPass());
  pm.addPass(createConvertSchedToTrainPass());
}

namespace {
/// The shortest text that reads back as `v` (0.5, not 0.50000000000000000).
std::string exactDouble(double v) {
  for (int digits = 6; digits < 17; ++digits) {
    std::string s = llvm::formatv("{0}", llvm::format("%.*g", digits, v));
    if (std::strtod(s.c_str(), nullptr) == v)
      return s;
  }
  return llvm::formatv("{0}", llvm::format("%.17g", v));
}
} // namespace

std::string spillway::ScheduleOptions::pipelineOptions() const {
  std::string s = llvm::formatv(
      "microbatches={0} order={1} overlap-optimizer={2} recompute={3}",
      microbatches, schedule::orderName(order), exactDouble(overlapFraction),
      recompute ? "true" : "false");
  if (offload)
    s += llvm::formatv(" offload=true placement={0} gpu-mem={1} host-mem={2}",
                       offload->placement, offload->gpuBytes,
                       offload->hostBytes)
             .str();
  if (offload && offload->deviceBytes)
    s += llvm::formatv(" device-mem={0}", offload->deviceBytes).str();
  if (outlineTasks)
    s += " outline-tasks=true";
  return s;
}

namespace {
/// The registered pipelines' option defaults are the option structs' own.
const spillway::TrainingPipelineOptions kTrainingDefaults;
const spillway::ScheduleOptions kScheduleDefaults;
} // namespace

namespace {
/// `spillway-schedule`'s options: ScheduleOptions, spelled as spillwayc's
/// flags are (budgets in bytes).
struct SchedulePipelineOptions
    : public PassPipelineOptions<SchedulePipelineOptions> {
  Option<int64_t> microbatches{*this, "microbatches",
                               llvm::cl::desc("Micro-batches per iteration"),
                               llvm::cl::init(kScheduleDefaults.microbatches)};
  Option<spillway::schedule::Order> order{
      *this, "order", llvm::cl::desc("Layer order of the micro-batches"),
      llvm::cl::init(kScheduleDefaults.order),
      llvm::cl::values(
          clEnumValN(spillway::schedule::Order::Horizontal, "horizontal",
                     "per micro-batch, every layer (ZeRO-Infinity)"),
          clEnumValN(spillway::schedule::Order::Snake, "snake",
                     "per layer, every micro-batch (GreedySnake)"))};
  Option<double> overlapOptimizer{
      *this, "overlap-optimizer",
      llvm::cl::desc("Fraction of each update moved into the next forward"),
      llvm::cl::init(kScheduleDefaults.overlapFraction)};
  Option<bool> recompute{
      *this, "recompute",
      llvm::cl::desc("Keep only layer-boundary activations (sched-recompute)"),
      llvm::cl::init(kScheduleDefaults.recompute)};
  Option<bool> offload{*this, "offload",
                       llvm::cl::desc("Run the offload passes (sched-place, "
                                      "sched-insert-transfers, "
                                      "sched-assign-buffers)"),
                       llvm::cl::init(false)};
  Option<std::string> placement{
      *this, "placement",
      llvm::cl::desc("With offload: CLASS=TIER,... (sched-place)")};
  Option<uint64_t> gpuMem{*this, "gpu-mem",
                          llvm::cl::desc("With offload: the GPU budget in "
                                         "bytes (0: unlimited)"),
                          llvm::cl::init(0)};
  Option<uint64_t> hostMem{*this, "host-mem",
                           llvm::cl::desc("With offload: the host budget in "
                                          "bytes (0: unlimited)"),
                           llvm::cl::init(0)};
  Option<uint64_t> deviceMem{
      *this, "device-mem",
      llvm::cl::desc("With offload: the device's memory in bytes, the GPU "
                     "budget without gpu-mem (0: unknown)"),
      llvm::cl::init(0)};
  Option<bool> outlineTasks{
      *this, "outline-tasks",
      llvm::cl::desc("Outline each task's computation into a function shared "
                     "by identical tasks (sched-outline-tasks), as spillwayc "
                     "does for an executable"),
      llvm::cl::init(false)};
};
} // namespace

namespace {
/// `spillway-train`'s options: TrainingPipelineOptions, spelled as
/// spillwayc's flags are.
struct TrainingPipelineCLOptions
    : public PassPipelineOptions<TrainingPipelineCLOptions> {
  Option<std::string> fusePatterns{
      *this, "fuse-patterns",
      llvm::cl::desc("Decomposed patterns to fuse: all, none, or a subset"),
      llvm::cl::init(kTrainingDefaults.fusePatterns)};
  Option<spillway::StoragePrecision> precision{
      *this, "precision", llvm::cl::desc("What the step stores in bf16"),
      llvm::cl::init(kTrainingDefaults.precision),
      llvm::cl::values(
          clEnumValN(spillway::StoragePrecision::FP32, "fp32", "nothing"),
          clEnumValN(spillway::StoragePrecision::BF16Mixed, "bf16-mixed",
                     "working weights and activations "
                     "(train-mixed-precision)"))};
  Option<std::string> optimizer{*this, "optimizer",
                                llvm::cl::desc("adamw or foam"),
                                llvm::cl::init(kTrainingDefaults.optimizer)};
  Option<double> lr{*this, "lr", llvm::cl::desc("Learning rate"),
                    llvm::cl::init(kTrainingDefaults.lr)};
  Option<double> beta1{*this, "beta1", llvm::cl::desc("AdamW beta1"),
                       llvm::cl::init(kTrainingDefaults.beta1)};
  Option<double> beta2{*this, "beta2", llvm::cl::desc("AdamW beta2"),
                       llvm::cl::init(kTrainingDefaults.beta2)};
  Option<double> eps{*this, "eps", llvm::cl::desc("AdamW epsilon"),
                     llvm::cl::init(kTrainingDefaults.eps)};
  Option<double> weightDecay{*this, "weight-decay",
                             llvm::cl::desc("AdamW weight decay"),
                             llvm::cl::init(kTrainingDefaults.weightDecay)};
  Option<int64_t> foamLevel{*this, "foam-level",
                            llvm::cl::desc("FOAM fold level"),
                            llvm::cl::init(kTrainingDefaults.foamLevel)};
  Option<double> foamAlpha{*this, "foam-alpha",
                           llvm::cl::desc("FOAM update scale"),
                           llvm::cl::init(kTrainingDefaults.foamAlpha)};
  Option<double> gradClip{
      *this, "grad-clip",
      llvm::cl::desc("Global gradient-norm clipping's max_norm (0: off)"),
      llvm::cl::init(kTrainingDefaults.gradClip)};
  Option<std::string> optimizerStateDtype{
      *this, "optimizer-state-dtype",
      llvm::cl::desc("How the optimizer stores m and v: fp32 or bf16"),
      llvm::cl::init(kTrainingDefaults.optimizerStateDtype)};
  Option<int64_t> optimizerStateShards{
      *this, "optimizer-state-shards",
      llvm::cl::desc("Ranks sharding an offload plan's AdamW state (ZeRO "
                     "stage 1; 1: whole)"),
      llvm::cl::init(kTrainingDefaults.optimizerStateShards)};
  Option<bool> gradientShards{
      *this, "gradient-shards",
      llvm::cl::desc("With optimizer-state-shards N > 1: the offload plan's "
                     "gradient blocks sharded too (ZeRO stage 2)"),
      llvm::cl::init(kTrainingDefaults.gradientShards)};
};

/// `spillway-lower-to-runtime`'s options (spillwayc --target, --precision).
struct LowerToRuntimeCLOptions
    : public PassPipelineOptions<LowerToRuntimeCLOptions> {
  Option<std::string> target{*this, "target", llvm::cl::desc("cpu or cuda"),
                             llvm::cl::init("cpu")};
  Option<std::string> precision{
      *this, "precision", llvm::cl::desc("fp32, or bf16 (cuda only)"),
      llvm::cl::init("fp32")};
};
} // namespace

void spillway::registerPipelines() {
  PassPipelineRegistration<TrainingPipelineCLOptions>(
      "spillway-train",
      "A forward + loss step as spillwayc makes it a training step "
      "(populateTrainingPipeline): fused patterns, autodiff, cse, the "
      "optimizer",
      [](OpPassManager &pm, const TrainingPipelineCLOptions &o) {
        TrainingPipelineOptions options;
        options.fusePatterns = o.fusePatterns;
        options.precision = o.precision;
        options.optimizer = o.optimizer;
        options.lr = o.lr;
        options.beta1 = o.beta1;
        options.beta2 = o.beta2;
        options.eps = o.eps;
        options.weightDecay = o.weightDecay;
        options.foamLevel = o.foamLevel;
        options.foamAlpha = o.foamAlpha;
        options.gradClip = o.gradClip;
        options.optimizerStateDtype = o.optimizerStateDtype;
        options.optimizerStateShards = o.optimizerStateShards;
        options.gradientShards = o.gradientShards;
        populateTrainingPipeline(pm, options);
      });
  PassPipelineRegistration<LowerToRuntimeCLOptions>(
      "spillway-lower-to-runtime",
      "A (scheduled) training step as runtime calls in the LLVM dialect "
      "(populateLowerToRuntimePipeline)",
      [](OpPassManager &pm, const LowerToRuntimeCLOptions &o) {
        populateLowerToRuntimePipeline(pm, o.target, o.precision);
      });
  PassPipelineRegistration<SchedulePipelineOptions>(
      "spillway-schedule",
      "A training step as spillwayc schedules it (populateSchedulePipeline): "
      "micro-batches, order, optimizer overlap, recompute and an offload "
      "plan; spillwayc --print-pipeline prints the options of a compile",
      [](OpPassManager &pm, const SchedulePipelineOptions &o) {
        ScheduleOptions options;
        options.microbatches = o.microbatches;
        options.order = o.order;
        options.overlapFraction = o.overlapOptimizer;
        options.recompute = o.recompute;
        if (o.offload)
          options.offload = OffloadOptions{o.placement, o.gpuMem, o.hostMem,
                                           o.deviceMem, nullptr};
        options.outlineTasks = o.outlineTasks;
        populateSchedulePipeline(pm, options);
      });
}

void spillway::populateLowerToRuntimePipeline(OpPassManager &pm,
                                              StringRef target,
                                              StringRef precision) {
  ConvertTrainToRuntimePassOptions options;
  options.target = target.str();
  options.precision = precision.str();
  pm.addPass(createConvertTrainToRuntimePass(options));
}
