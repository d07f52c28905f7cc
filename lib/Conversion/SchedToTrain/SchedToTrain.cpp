//===- SchedToTrain.cpp - a schedule as a flat train step -----------------===//
//
// Inlines every task of a sched.iteration in order and rewrites the
// micro-batch ops (slice, accumulate) as train ops, so the lowering to the
// runtime runs the schedule's computation in the schedule's order. An
// offload plan's ops (moves, awaits, binds, drops, gradients, activations)
// stay in the flat step where they stand: convert-train-to-runtime lowers
// them with the train ops around them (its OffloadOps.cpp).
//
//===----------------------------------------------------------------------===//

#include "spillway/Conversion/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "spillway/Dialect/Sched/IR/SchedOps.h"
#include "spillway/Dialect/Train/IR/TrainOps.h"

namespace spillway {
#define GEN_PASS_DEF_CONVERTSCHEDTOTRAINPASS
#include "spillway/Conversion/Passes.h.inc"
} // namespace spillway

using namespace mlir;
using namespace spillway;

namespace {

struct ConvertSchedToTrainPass
    : spillway::impl::ConvertSchedToTrainPassBase<ConvertSchedToTrainPass> {
  void runOnOperation() override;
};

/// Moves `block`'s ops (not its terminator) before `before`, its arguments
/// replaced by `args`; returns what the terminator yielded.
SmallVector<Value> inlineBlock(Block &block, ValueRange args,
                               Operation *before) {
  for (auto [arg, v] : llvm::zip(block.getArguments(), args))
    arg.replaceAllUsesWith(v);
  auto yield = cast<sched::YieldOp>(block.getTerminator());
  SmallVector<Value> results(yield.getValues());
  for (Operation &op : llvm::make_early_inc_range(block.without_terminator()))
    op.moveBefore(before);
  return results;
}

LogicalResult lower(Operation *op, OpBuilder &b) {
  b.setInsertionPoint(op);
  if (auto task = dyn_cast<sched::TaskOp>(op)) {
    // The task's call (sched-outline-tasks) or optimizer updates say which
    // task they are, for the runtime's task markers
    // (convert-train-to-runtime): the computation the runtime times.
    auto which = b.getDenseI64ArrayAttr(
        {int64_t(task.getPhase()), int64_t(task.getLayer()),
         task.getMb() ? int64_t(*task.getMb()) : -1});
    for (Operation &inner : task.getBlock().without_terminator())
      if (isa<func::CallOp, train::AdamWOp, train::AdamWDeferOp,
              train::AdamWApplyPendingOp, train::FoamOp,
              train::ClipGradNormOp>(inner))
        inner.setAttr(train::kTaskAttrName, which);
    SmallVector<Value> results =
        inlineBlock(task.getBlock(), task.getInputs(), task);
    task->replaceAllUsesWith(results);
    task.erase();
    return success();
  }
  if (auto slice = dyn_cast<sched::SliceOp>(op)) {
    auto type = slice.getResult().getType();
    int64_t rank = type.getRank();
    SmallVector<int64_t> starts(rank, 0), steps(rank, 1);
    starts[0] = static_cast<int64_t>(slice.getIndex()) * type.getDimSize(0);
    Value v = train::SliceOp::create(b, slice.getLoc(), type, slice.getInput(),
                                     starts, steps);
    slice.replaceAllUsesWith(v);
    slice.erase();
    return success();
  }
  if (auto acc = dyn_cast<sched::AccumulateOp>(op)) {
    Value sum = acc.getValues().front();
    for (Value v : acc.getValues().drop_front())
      sum = train::AddOp::create(b, acc.getLoc(), sum, v);
    if (acc.getKind() == sched::AccumulateKind::mean) {
      auto elem = acc.getResult().getType().getElementType();
      auto scalar = RankedTensorType::get({}, elem);
      Value n = train::ConstantOp::create(
          b, acc.getLoc(),
          DenseElementsAttr::get(
              scalar, b.getFloatAttr(elem, acc.getValues().size())));
      sum = train::DivOp::create(b, acc.getLoc(), sum, n);
    }
    acc.replaceAllUsesWith(sum);
    acc.erase();
    return success();
  }
  // An offload plan's moves and bindings stay, in order, for
  // convert-train-to-runtime.
  if (isa<sched::MoveOp, sched::AllocOp, sched::AwaitOp, sched::DropOp,
          sched::BindOp,
          sched::StageGradsOp, sched::AccumulateGradsOp, sched::GradientOp,
          sched::GradNormsOp, sched::ClipGradNormOp, sched::PutActivationOp,
          sched::TakeActivationOp>(op))
    return success();
  return op->emitError("convert-sched-to-train: ")
         << op->getName()
         << " needs the runtime's memory tiers; this lowering runs "
            "everything resident";
}

} // namespace

void ConvertSchedToTrainPass::runOnOperation() {
  SmallVector<sched::IterationOp> iterations;
  getOperation().walk(
      [&](sched::IterationOp it) { iterations.push_back(it); });
  OpBuilder b(&getContext());
  for (sched::IterationOp it : iterations) {
    Block &block = it.getBlock();
    for (Operation &op : llvm::make_early_inc_range(block.without_terminator()))
      if (failed(lower(&op, b)))
        return signalPassFailure();
    SmallVector<Value> results = inlineBlock(block, it.getInputs(), it);
    it->replaceAllUsesWith(results);
    it.erase();
  }
}
