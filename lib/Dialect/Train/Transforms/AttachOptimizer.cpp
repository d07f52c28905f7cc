// IN PROGRESS: placeholder until the real pass lands.
#include "spillway/Dialect/Train/Transforms/Passes.h"

namespace spillway::train {
#define GEN_PASS_DEF_TRAINATTACHOPTIMIZERPASS
#include "spillway/Dialect/Train/Transforms/Passes.h.inc"
} // namespace spillway::train

namespace {
struct TrainAttachOptimizerPass : spillway::train::impl::TrainAttachOptimizerPassBase<TrainAttachOptimizerPass> {
  using Base::Base;
  void runOnOperation() override { signalPassFailure(); }
};
} // namespace
