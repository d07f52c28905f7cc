// IN PROGRESS: placeholder until the real pass lands.
#include "spillway/Dialect/Train/Transforms/Passes.h"

namespace spillway::train {
#define GEN_PASS_DEF_TRAINAUTODIFFPASS
#include "spillway/Dialect/Train/Transforms/Passes.h.inc"
} // namespace spillway::train

namespace {
struct TrainAutodiffPass : spillway::train::impl::TrainAutodiffPassBase<TrainAutodiffPass> {
  using Base::Base;
  void runOnOperation() override { signalPassFailure(); }
};
} // namespace
