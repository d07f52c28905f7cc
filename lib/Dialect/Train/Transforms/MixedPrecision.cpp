//===- MixedPrecision.cpp - bf16 storage around fp32 compute --------------===//
//
// The forward graph as bf16-mixed training computes it: every parameter read
// through its bf16 working copy, every activation stored as bf16, each op
// computing in fp32 from what it reads. A rounding is a pair of train.cast
// ops (f32 -> bf16 -> f32), so the bf16 value is what crosses a layer
// boundary (train-partition-layers keeps the cast back in the reader's
// layer) and train-autodiff rounds the matching cotangent. The rules are in
// Passes.td.
//
//===----------------------------------------------------------------------===//

#include "spillway/Dialect/Train/IR/TrainOps.h"
#include "spillway/Dialect/Train/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

namespace spillway::train {
#define GEN_PASS_DEF_TRAINMIXEDPRECISIONPASS
#include "spillway/Dialect/Train/Transforms/Passes.h.inc"
} // namespace spillway::train

using namespace mlir;
using namespace spillway::train;

namespace {

/// Ops that only move, select or negate values: rounding their result is
/// rounding their operands, so a value only they read is rounded where their
/// chain ends (once, and the bf16 value is what a boundary there stores).
bool movesValues(Operation *op) {
  return isa<ReshapeOp, TransposeOp, SliceOp, ConcatOp, GatherOp,
             BroadcastToOp, NegOp, ReluOp, ReduceMaxOp>(op);
}

/// Matrix products: their operands are bf16 values on every device (a GPU's
/// bf16 GEMM rounds what it reads; the CPU multiplies the rounded values).
bool multiplies(Operation *op) {
  return isa<MatMulOp, GemmOp, LinearOp, AttentionOp>(op);
}

bool isF32Tensor(Type t) {
  auto rt = dyn_cast<RankedTensorType>(t);
  return rt && rt.getElementType().isF32();
}

struct TrainMixedPrecisionPass
    : spillway::train::impl::TrainMixedPrecisionPassBase<
          TrainMixedPrecisionPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (module->hasAttr(kPrecisionAttrName)) {
      module.emitError("train-mixed-precision: the module is bf16-mixed "
                       "already (")
          << kPrecisionAttrName << "): rounding it again changes nothing";
      return signalPassFailure();
    }
    // Autodiff must see the roundings: each one's gradient rule rounds the
    // matching cotangent, and gradients accumulate in f32.
    WalkResult differentiated = module.walk([&](Operation *op) {
      if (isa<ParamGradOp>(op) || isOptimizerUpdate(op)) {
        op->emitError("train-mixed-precision runs on the forward graph, "
                      "before train-autodiff; this module holds gradients "
                      "already");
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (differentiated.wasInterrupted())
      return signalPassFailure();
    for (auto fn : module.getOps<func::FuncOp>())
      if (!fn.isExternal())
        runOn(fn);
    module->setAttr(kPrecisionAttrName,
                    StringAttr::get(module.getContext(), "bf16-mixed"));
  }

  void runOn(func::FuncOp fn) {
    DenseMap<Value, Origin> origin;
    // The loss and what is computed from it stay fp32.
    llvm::DenseSet<Value> fromLoss;
    auto originOf = [&](Value v) {
      if (isa<BlockArgument>(v))
        return Origin::Input;
      auto it = origin.find(v);
      return it == origin.end() ? Origin::Const : it->second;
    };

    // `v` (f32) through bf16 and back, at b's insertion point.
    auto roundedCopy = [&](OpBuilder &b, Value v) {
      auto type = cast<RankedTensorType>(v.getType());
      auto bf16 = RankedTensorType::get(type.getShape(), b.getBF16Type());
      Value stored = CastOp::create(b, v.getLoc(), bf16, v);
      Value back = CastOp::create(b, v.getLoc(), type, stored);
      origin[stored] = origin[back] = originOf(v);
      return back;
    };
    // Rounds `v` after `after`: every other use of `v` reads the rounded
    // value.
    auto round = [&](Value v, Operation *after) {
      OpBuilder b(after->getContext());
      b.setInsertionPointAfter(after);
      Value back = roundedCopy(b, v);
      v.replaceAllUsesExcept(back, back.getDefiningOp<CastOp>().getInput()
                                       .getDefiningOp());
    };

    SmallVector<Operation *> ops;
    for (Operation &op : fn.getBody().getOps())
      ops.push_back(&op);
    for (Operation *op : ops) {
      if (op->hasTrait<OpTrait::IsTerminator>())
        continue;
      if (auto pv = dyn_cast<ParamValueOp>(op)) {
        origin[pv.getResult()] = Origin::Param;
        if (isF32Tensor(pv.getType())) {
          round(pv.getResult(), op);
          ++numParamReads;
        }
        continue;
      }
      // Only activations (Mixed) are rounded; what comes from inputs alone
      // (a mask, positions) or constants keeps its fp32 values.
      Origin o = Origin::Const;
      bool afterLoss = false;
      for (Value v : op->getOperands()) {
        o = joinOrigins(o, originOf(v));
        afterLoss |= fromLoss.contains(v);
      }
      for (Value r : op->getResults())
        origin[r] = o;
      if (isa<SoftmaxCrossEntropyLossOp>(op) || afterLoss) {
        fromLoss.insert(op->result_begin(), op->result_end());
        continue;
      }
      // A product's operand computed from inputs or constants alone (a
      // model's float features) is rounded for that product only: the
      // other readers (a mask's) keep its f32 values.
      if (multiplies(op))
        for (OpOperand &use : op->getOpOperands()) {
          Value v = use.get();
          Origin vo = originOf(v);
          if ((vo != Origin::Input && vo != Origin::Const) ||
              !isF32Tensor(v.getType()))
            continue;
          OpBuilder b(op);
          use.set(roundedCopy(b, v));
          ++numProductInputs;
        }
      // A cast the model makes itself keeps its own meaning.
      if (o != Origin::Mixed || isa<CastOp>(op))
        continue;
      for (Value r : op->getResults()) {
        auto rt = dyn_cast<RankedTensorType>(r.getType());
        if (!isF32Tensor(r.getType()) || rt.getRank() == 0 || r.use_empty() ||
            llvm::all_of(r.getUsers(), movesValues))
          continue;
        round(r, op);
        ++numActivations;
      }
    }
  }
};

} // namespace
