//===- TrainToRuntime.cpp - train dialect to runtime calls ----------------===//
// IN PROGRESS (lead): replaced by the real lowering.
#include "spillway/Conversion/Passes.h"

namespace spillway {
#define GEN_PASS_DEF_CONVERTTRAINTORUNTIMEPASS
#include "spillway/Conversion/Passes.h.inc"
} // namespace spillway

namespace {
struct ConvertTrainToRuntimePass
    : spillway::impl::ConvertTrainToRuntimePassBase<ConvertTrainToRuntimePass> {
  void runOnOperation() override {
    getOperation().emitError("convert-train-to-runtime: not implemented yet");
    signalPassFailure();
  }
};
} // namespace
