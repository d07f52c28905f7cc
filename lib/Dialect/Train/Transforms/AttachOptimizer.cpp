//===- AttachOptimizer.cpp - parameter gradients to optimizer updates -----===//

#include "spillway/Dialect/Train/IR/TrainOps.h"
#include "spillway/Dialect/Train/Transforms/Passes.h"
#include "spillway/runtime/hyperparams.h"
#include "spillway/runtime/zero_shard.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/STLExtras.h"

#include <cmath>

namespace spillway::train {
#define GEN_PASS_DEF_TRAINATTACHOPTIMIZERPASS
#include "spillway/Dialect/Train/Transforms/Passes.h.inc"
} // namespace spillway::train

using namespace mlir;
using namespace spillway::train;

namespace {

/// Ops a parameter's value passes through unchanged in meaning on its way
/// to where it is used (a view, a transposed copy, a cast).
bool isView(Operation *op) { return isa<ReshapeOp, TransposeOp, CastOp>(op); }

/// Ops a logits tensor passes through on its way to the loss: views, a
/// bias, slices, and the elementwise scaling and capping models put there
/// (logits * scale, logits / temperature, cap * tanh(logits / cap)).
bool carriesLogits(Operation *op) {
  return isView(op) ||
         isa<AddOp, SubOp, MulOp, DivOp, NegOp, TanhOp, SliceOp>(op);
}

/// True when `v` reaches the logits of a softmax cross-entropy loss through
/// ops that carry logits (carriesLogits).
bool reachesLogits(Value v) {
  SmallVector<Value> work{v};
  llvm::DenseSet<Value> seen;
  while (!work.empty()) {
    Value x = work.pop_back_val();
    if (!seen.insert(x).second)
      continue;
    for (OpOperand &use : x.getUses()) {
      Operation *user = use.getOwner();
      if (auto loss = dyn_cast<SoftmaxCrossEntropyLossOp>(user);
          loss && loss.getLogits() == x)
        return true;
      if (carriesLogits(user))
        for (Value r : user->getResults())
          work.push_back(r);
    }
  }
  return false;
}

/// The parameters FOAM folds (FOAM.md): weight matrices, i.e. 2-D
/// parameters a matrix product multiplies (through views of their values),
/// except embeddings (a gather's table; a positional table that is only
/// added is no matrix product's operand either) and LM heads (a product
/// whose result, through ops that carry logits, becomes the loss's
/// logits). A tied embedding and head is both.
llvm::DenseSet<StringRef> weightMatrices(ModuleOp module) {
  llvm::DenseSet<StringRef> multiplied, excluded;
  module.walk([&](ParamValueOp pv) {
    if (cast<RankedTensorType>(pv.getType()).getRank() != 2)
      return;
    SmallVector<Value> work{pv.getResult()};
    while (!work.empty()) {
      Value x = work.pop_back_val();
      for (OpOperand &use : x.getUses()) {
        Operation *user = use.getOwner();
        if (isView(user)) {
          work.push_back(user->getResult(0));
          continue;
        }
        if (isa<GatherOp>(user) && use.getOperandNumber() == 0)
          excluded.insert(pv.getParam());
        if (isa<MatMulOp, GemmOp, LinearOp>(user) &&
            !(isa<GemmOp>(user) && use.getOperandNumber() == 2) &&
            !(isa<LinearOp>(user) && use.getOperandNumber() == 2)) {
          multiplied.insert(pv.getParam());
          if (reachesLogits(user->getResult(0)))
            excluded.insert(pv.getParam());
        }
      }
    }
  });
  llvm::DenseSet<StringRef> folded;
  for (StringRef p : multiplied)
    if (!excluded.contains(p))
      folded.insert(p);
  return folded;
}

struct TrainAttachOptimizerPass
    : spillway::train::impl::TrainAttachOptimizerPassBase<
          TrainAttachOptimizerPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (optimizer != "adamw" && optimizer != "foam") {
      module.emitError("train-attach-optimizer: unknown optimizer '")
          << optimizer << "'; supported optimizers: adamw, foam";
      return signalPassFailure();
    }
    if (stateDtype != "fp32" && stateDtype != "bf16") {
      module.emitError("train-attach-optimizer: unknown state-dtype '")
          << stateDtype << "'; the optimizer state is stored as fp32 or bf16";
      return signalPassFailure();
    }
    if (stateShards < 1 || stateShards > kMaxOptimizerStateShards) {
      module.emitError("train-attach-optimizer: state-shards ")
          << int64_t(stateShards) << " is outside [1, "
          << kMaxOptimizerStateShards << "]";
      return signalPassFailure();
    }
    if (shardGradients && stateShards < 2) {
      module.emitError("train-attach-optimizer: shard-gradients shards the "
                       "gradients over the state-shards ranks; give "
                       "state-shards N > 1");
      return signalPassFailure();
    }
    if (stateShards > 1 && optimizer == "foam") {
      module.emitError("train-attach-optimizer: state-shards ")
          << int64_t(stateShards)
          << " shards AdamW's state; FOAM's is folded already";
      return signalPassFailure();
    }
    if (auto given =
            module->getAttrOfType<StringAttr>(kOptimizerStateDtypeAttrName);
        given && given.getValue() != stateDtype) {
      module.emitError("train-attach-optimizer: the module's ")
          << kOptimizerStateDtypeAttrName << " is \"" << given.getValue()
          << "\" but state-dtype is " << stateDtype;
      return signalPassFailure();
    }
    // (Options copied from a PassOptions struct all count as given, so the
    // values tell: anything but FOAM's defaults names a FOAM setting.)
    if (optimizer != "foam" && (foamLevel != 2 || foamAlpha != 0.25)) {
      module.emitError("train-attach-optimizer: foam-level and foam-alpha "
                       "apply to optimizer=foam");
      return signalPassFailure();
    }
    if (optimizer == "foam" &&
        (foamLevel < 0 || foamLevel > 16 || !(foamAlpha >= 1e-30) ||
         !(foamAlpha <= 1e6))) {
      module.emitError("train-attach-optimizer: invalid foam options: need "
                       "foam-level in [0, 16] and foam-alpha in [1e-30, 1e6]");
      return signalPassFailure();
    }
    // Checked here so a bad flag names the option rather than failing the
    // verifier of every train.adamw.
    // The ranges are the executable's (hyperparams.h); NaN fails them.
    namespace hp = spillway::hyperparams;
    const std::pair<const hp::Range *, double> values[] = {
        {&hp::kLr, lr},
        {&hp::kBeta1, beta1},
        {&hp::kBeta2, beta2},
        {&hp::kEps, eps},
        {&hp::kWeightDecay, weightDecay}};
    for (const auto &[range, value] : values) {
      if (!hp::in_range(*range, value)) {
        module.emitError("train-attach-optimizer: invalid adamw options: ")
            << (range->flag + 2) << " is " << value << ", expected "
            << hp::expected(*range);
        return signalPassFailure();
      }
      if (std::string why = hp::float32_problem(*range, value); !why.empty()) {
        module.emitError("train-attach-optimizer: invalid adamw options: ")
            << (range->flag + 2) << " is " << value << ": " << why;
        return signalPassFailure();
      }
    }

    if (!hp::in_range(hp::kGradClip, gradClip)) {
      module.emitError("train-attach-optimizer: invalid grad-clip ")
          << gradClip << ": expected " << hp::expected(hp::kGradClip)
          << " (0: off)";
      return signalPassFailure();
    }
    if (gradClip > 0) {
      if (std::string why = hp::float32_problem(hp::kGradClip, gradClip);
          !why.empty()) {
        module.emitError("train-attach-optimizer: invalid grad-clip ")
            << gradClip << ": " << why;
        return signalPassFailure();
      }
      if (optimizer == "foam") {
        module.emitError("train-attach-optimizer: grad-clip with "
                         "optimizer=foam: FOAM updates take no clip "
                         "coefficient (use optimizer=adamw, or no "
                         "grad-clip)");
        return signalPassFailure();
      }
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
    module.walk([&](Operation *op) {
      if (isOptimizerUpdate(op))
        updated.insert(getUpdatedParam(op));
    });
    for (ParamGradOp grad : grads)
      if (!updated.insert(grad.getParam()).second) {
        grad.emitOpError("parameter @")
            << grad.getParam()
            << " already has a gradient or optimizer update in this step; "
               "was the module differentiated or optimized twice?";
        return signalPassFailure();
      }

    llvm::DenseSet<StringRef> folded;
    if (optimizer == "foam") {
      folded = weightMatrices(module);
      if (folded.empty())
        module.emitWarning("train-attach-optimizer: optimizer=foam folds no "
                           "parameter: the model has no weight matrix "
                           "besides its embeddings and LM head, so every "
                           "parameter gets AdamW");
    }
    OpBuilder b(&getContext());
    auto f64 = [&](double v) { return b.getF64FloatAttr(v); };
    // Gradient clipping: the norm after the last gradient, every update
    // after it (where the last param_grad was, in their order).
    Value clip;
    Operation *after = nullptr;
    if (gradClip > 0) {
      if (!llvm::all_of(grads, [&](ParamGradOp g) {
            return g->getBlock() == grads.front()->getBlock();
          })) {
        grads.front().emitOpError("train-attach-optimizer: grad-clip needs "
                                  "every train.param_grad in one block");
        return signalPassFailure();
      }
      ParamGradOp last = grads.front();
      for (ParamGradOp g : grads)
        if (last->isBeforeInBlock(g))
          last = g;
      // Declaration order, the order the runtime sums the norms in.
      llvm::StringMap<unsigned> order;
      for (ParamOp p : module.getOps<ParamOp>())
        order.try_emplace(p.getSymName(), order.size());
      SmallVector<ParamGradOp> byParam(grads);
      llvm::stable_sort(byParam, [&](ParamGradOp x, ParamGradOp y) {
        return order.lookup(x.getParam()) < order.lookup(y.getParam());
      });
      SmallVector<Value> values;
      for (ParamGradOp g : byParam)
        values.push_back(g.getGrad());
      b.setInsertionPointAfter(last);
      auto norm = ClipGradNormOp::create(b, last.getLoc(), values, gradClip);
      clip = norm.getCoef();
      after = norm;
    }
    for (ParamGradOp grad : grads) {
      b.setInsertionPoint(grad);
      if (after)
        b.setInsertionPointAfter(after);
      if (folded.contains(grad.getParam())) {
        FoamOp::create(b, grad.getLoc(), grad.getParamAttr(), grad.getGrad(),
                       f64(lr), f64(beta1), f64(beta2), f64(eps),
                       f64(weightDecay), b.getI64IntegerAttr(foamLevel),
                       f64(foamAlpha));
        grad.erase();
        continue;
      }
      auto update = AdamWOp::create(
          b, grad.getLoc(), grad.getParamAttr(), grad.getGrad(), clip,
          f64(lr), f64(beta1), f64(beta2), f64(eps), f64(weightDecay),
          /*begin=*/IntegerAttr(), /*end=*/IntegerAttr());
      if (after)
        after = update;
      grad.erase();
    }
    // fp32 state is the default: no attribute, so the module is what it
    // was before the option existed.
    if (stateDtype == "bf16")
      module->setAttr(kOptimizerStateDtypeAttrName, b.getStringAttr("bf16"));
    // The runtime cuts the shards at the norm's blocks when it clips.
    if (stateShards > 1) {
      const int64_t align =
          gradClip > 0 ? SPW_ZERO_SHARD_ALIGN_CLIPPED : SPW_ZERO_SHARD_ALIGN;
      SmallVector<NamedAttribute> fields = {
          b.getNamedAttr("ranks", b.getI64IntegerAttr(stateShards)),
          b.getNamedAttr("align", b.getI64IntegerAttr(align))};
      if (shardGradients)
        fields.push_back(b.getNamedAttr("gradients", b.getBoolAttr(true)));
      module->setAttr(kOptimizerStateShardsAttrName,
                      b.getDictionaryAttr(fields));
    }
  }
};
} // namespace
