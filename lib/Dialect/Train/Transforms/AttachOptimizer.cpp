//===- AttachOptimizer.cpp - parameter gradients to optimizer updates -----===//

#include "spillway/Dialect/Train/IR/TrainOps.h"
#include "spillway/Dialect/Train/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringSet.h"

namespace spillway::train {
#define GEN_PASS_DEF_TRAINATTACHOPTIMIZERPASS
#include "spillway/Dialect/Train/Transforms/Passes.h.inc"
} // namespace spillway::train

using namespace mlir;
using namespace spillway::train;

namespace {
struct TrainAttachOptimizerPass
    : spillway::train::impl::TrainAttachOptimizerPassBase<
          TrainAttachOptimizerPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (optimizer != "adamw") {
      module.emitError("train-attach-optimizer: unknown optimizer '")
          << optimizer << "'; supported optimizers: adamw";
      return signalPassFailure();
    }
    // Checked here so a bad flag names the option rather than failing the
    // verifier of every train.adamw.
    if (lr < 0.0 || beta1 < 0.0 || beta1 >= 1.0 || beta2 < 0.0 ||
        beta2 >= 1.0 || eps <= 0.0 || weightDecay < 0.0) {
      module.emitError("train-attach-optimizer: invalid adamw options: need "
                       "lr >= 0, beta1 and beta2 in [0, 1), eps > 0, "
                       "weight-decay >= 0");
      return signalPassFailure();
    }

    SmallVector<ParamGradOp> grads;
    module.walk([&](ParamGradOp op) { grads.push_back(op); });
    if (grads.empty()) {
      if (module.getOps<ParamOp>().empty()) {
        module.emitWarning(
            "train-attach-optimizer: module has no parameters to optimize");
        return;
      }
      module.emitError("train-attach-optimizer: module has no "
                       "train.param_grad ops: run train-autodiff first, or "
                       "the loss depends on no parameter (nothing to train)");
      return signalPassFailure();
    }
    // One update per parameter per step: a second one means the step was
    // differentiated or optimized twice.
    llvm::StringSet<> updated;
    module.walk([&](AdamWOp op) { updated.insert(op.getParam()); });
    for (ParamGradOp grad : grads)
      if (!updated.insert(grad.getParam()).second) {
        grad.emitOpError("parameter @")
            << grad.getParam()
            << " already has a gradient or optimizer update in this step; "
               "was the module differentiated or optimized twice?";
        return signalPassFailure();
      }

    OpBuilder b(&getContext());
    auto f64 = [&](double v) { return b.getF64FloatAttr(v); };
    for (ParamGradOp grad : grads) {
      b.setInsertionPoint(grad);
      AdamWOp::create(b, grad.getLoc(), grad.getParamAttr(), grad.getGrad(),
                      f64(lr), f64(beta1), f64(beta2), f64(eps),
                      f64(weightDecay), /*begin=*/IntegerAttr(),
                      /*end=*/IntegerAttr());
      grad.erase();
    }
  }
};
} // namespace
