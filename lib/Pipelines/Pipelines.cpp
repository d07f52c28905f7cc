//===- Pipelines.cpp - the driver's pipelines -----------------------------===//

#include "spillway/Pipelines/Pipelines.h"

#include "mlir/Transforms/Passes.h"
#include "spillway/Conversion/Passes.h"
#include "spillway/Dialect/Sched/Transforms/Passes.h"
#include "spillway/Dialect/Train/Transforms/Passes.h"

using namespace mlir;

void spillway::populateForwardPipeline(OpPassManager &pm,
                                       const TrainingPipelineOptions &options) {
  train::TrainFusePatternsPassOptions fuse;
  fuse.patterns = options.fusePatterns;
  pm.addPass(train::createTrainFusePatternsPass(fuse));
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
  pm.addPass(train::createTrainAttachOptimizerPass(opt));
}

void spillway::populatePlanningPipeline(OpPassManager &pm) {
  pm.addPass(train::createTrainPartitionLayersPass());
}

void spillway::populateSchedulePipeline(OpPassManager &pm,
                                        int64_t microbatches,
                                        llvm::StringRef order,
                                        double overlapFraction,
                                        bool recompute,
                                        const OffloadOptions *offload,
                                        bool outlineTasks) {
  pm.addPass(train::createTrainPartitionLayersPass());
  pm.addPass(createConvertTrainToSchedPass());
  sched::SchedMicrobatchPassOptions mb;
  mb.microbatches = microbatches;
  pm.addPass(sched::createSchedMicrobatchPass(mb));
  sched::SchedOrderPassOptions ord;
  ord.order = order.str();
  pm.addPass(sched::createSchedOrderPass(ord));
  sched::SchedOverlapOptimizerPassOptions overlap;
  overlap.fraction = overlapFraction;
  pm.addPass(sched::createSchedOverlapOptimizerPass(overlap));
  // After the order: recompute is decided per fwd/bwd pair, whatever the
  // order, and placement sees only the activations it keeps.
  if (recompute)
    pm.addPass(sched::createSchedRecomputePass());
  if (offload) {
    sched::SchedPlacePassOptions place;
    place.placement = offload->placement;
    pm.addPass(sched::createSchedPlacePass(place));
    pm.addPass(sched::createSchedInsertTransfersPass());
    sched::SchedAssignBuffersPassOptions buffers;
    buffers.gpuMem = offload->gpuBytes;
    buffers.hostMem = offload->hostBytes;
    pm.addPass(sched::createSchedAssignBuffersPass(buffers));
  }
  if (outlineTasks)
    pm.addPass(sched::createSchedOutlineTasksPass());
  pm.addPass(createConvertSchedToTrainPass());
}

void spillway::populateLowerToRuntimePipeline(OpPassManager &pm,
                                              StringRef target,
                                              StringRef precision) {
  ConvertTrainToRuntimePassOptions options;
  options.target = target.str();
  options.precision = precision.str();
  pm.addPass(createConvertTrainToRuntimePass(options));
}
