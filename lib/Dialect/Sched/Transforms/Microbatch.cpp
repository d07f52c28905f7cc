//===- Microbatch.cpp - split an iteration's batch into micro-batches -----===//
//
// Forward and backward tasks are replicated per micro-batch on slices of the
// batch inputs, with their types re-derived for the smaller batch; what the
// updates and the iteration's results read is averaged over the replicas.
// The arithmetic and its conditions are in Passes.td.
//
//===----------------------------------------------------------------------===//

#include "spillway/Dialect/Sched/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "spillway/Dialect/Sched/IR/SchedOps.h"
#include "spillway/Dialect/Train/IR/TrainOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

namespace spillway::sched {
#define GEN_PASS_DEF_SCHEDMICROBATCHPASS
#include "spillway/Dialect/Sched/Transforms/Passes.h.inc"
} // namespace spillway::sched

using namespace mlir;
using namespace spillway;
using namespace spillway::sched;

namespace {

struct SchedMicrobatchPass
    : sched::impl::SchedMicrobatchPassBase<SchedMicrobatchPass> {
  using SchedMicrobatchPassBase::SchedMicrobatchPassBase;
  void runOnOperation() override;
  LogicalResult split(IterationOp iteration);
};

/// The name of iteration input `i` for diagnostics: the step argument's
/// `train.name`, else its position.
std::string inputName(IterationOp iteration, unsigned i) {
  if (auto fn = iteration->getParentOfType<func::FuncOp>())
    if (i < fn.getNumArguments())
      if (auto name = fn.getArgAttrOfType<StringAttr>(i, "train.name"))
        return ("'" + name.getValue() + "'").str();
  return ("#" + Twine(i)).str();
}

/// The op of `task` computing its result `index`.
Operation *producerInTask(TaskOp task, unsigned index) {
  auto yield = cast<YieldOp>(task.getBlock().getTerminator());
  return yield.getValues()[index].getDefiningOp();
}

/// Fails unless iteration result `v` is a mean over the batch.
LogicalResult checkMeanLoss(Operation *user, Value v) {
  auto task = v.getDefiningOp<TaskOp>();
  Operation *def =
      task ? producerInTask(task, cast<OpResult>(v).getResultNumber())
           : nullptr;
  if (auto xent = dyn_cast_or_null<train::SoftmaxCrossEntropyLossOp>(def)) {
    if (xent.getReduction() == "mean")
      return success();
  } else if (isa_and_nonnull<train::ReduceMeanOp>(def)) {
    return success();
  }
  return user->emitError("sched-microbatch: the iteration's result ")
         << v.getType()
         << " is not a mean over the batch (softmax_cross_entropy_loss with "
            "reduction = \"mean\", or reduce_mean): averaging micro-batch "
            "values would not reproduce it";
}

/// Which results of each task depend on the batch inputs.
llvm::DenseSet<Value> batchDependent(IterationOp iteration) {
  llvm::DenseSet<Value> dep;
  for (Value arg : iteration.getBlock().getArguments())
    dep.insert(arg);
  for (Operation &op : iteration.getBlock().without_terminator()) {
    auto task = dyn_cast<TaskOp>(op);
    if (!task) {
      if (llvm::any_of(op.getOperands(), [&](Value v) { return dep.contains(v); }))
        dep.insert(op.result_begin(), op.result_end());
      continue;
    }
    llvm::DenseSet<Value> inner;
    for (auto [operand, arg] :
         llvm::zip(task.getInputs(), task.getBlock().getArguments()))
      if (dep.contains(operand))
        inner.insert(arg);
    for (Operation &x : task.getBlock().without_terminator())
      if (llvm::any_of(x.getOperands(),
                       [&](Value v) { return inner.contains(v); }))
        inner.insert(x.result_begin(), x.result_end());
    auto yield = cast<YieldOp>(task.getBlock().getTerminator());
    for (auto [res, y] : llvm::zip(task.getResults(), yield.getValues()))
      if (inner.contains(y))
        dep.insert(res);
  }
  return dep;
}

RankedTensorType divideBatch(RankedTensorType t, int64_t m) {
  SmallVector<int64_t> shape(t.getShape());
  shape[0] /= m;
  return RankedTensorType::get(shape, t.getElementType());
}

/// Re-derives the types inside a replica whose block arguments already have
/// the micro-batch's types.
LogicalResult retype(TaskOp task, int64_t m) {
  llvm::DenseMap<Value, Type> oldType;
  for (auto [arg, operand] :
       llvm::zip(task.getBlock().getArguments(), task.getInputs())) {
    if (arg.getType() != operand.getType()) {
      oldType[arg] = arg.getType();
      arg.setType(operand.getType());
    }
  }
  for (Operation &op : task.getBlock().without_terminator()) {
    SmallVector<Value> batched;
    for (Value v : op.getOperands())
      if (oldType.count(v))
        batched.push_back(v);
    if (batched.empty())
      continue;
    SmallVector<Type> types;
    if (auto infer = dyn_cast<InferTypeOpInterface>(op)) {
      if (failed(infer.inferReturnTypes(
              op.getContext(), op.getLoc(), op.getOperands(),
              op.getAttrDictionary(), op.getPropertiesStorage(),
              op.getRegions(), types)))
        return op.emitError("sched-microbatch: cannot infer this op's type "
                            "for a micro-batch of ")
               << m;
    } else {
      bool shapeOp = isa<train::ReshapeOp, train::BroadcastToOp,
                         train::SliceOp, train::SliceGradOp>(op);
      for (Value r : op.getResults()) {
        auto t = dyn_cast<RankedTensorType>(r.getType());
        bool isBatched =
            t && (shapeOp || llvm::any_of(batched, [&](Value v) {
                    return oldType[v] == t;
                  }));
        if (isBatched && (t.getRank() == 0 || t.getDimSize(0) % m != 0))
          return op.emitError("sched-microbatch: result ")
                 << t << " has no leading batch dimension dividing into " << m
                 << " micro-batches";
        types.push_back(isBatched ? Type(divideBatch(t, m)) : r.getType());
      }
    }
    for (auto [r, t] : llvm::zip(op.getResults(), types))
      if (r.getType() != t) {
        oldType[r] = r.getType();
        r.setType(t);
      }
  }
  auto yield = cast<YieldOp>(task.getBlock().getTerminator());
  for (auto [res, y] : llvm::zip(task.getResults(), yield.getValues()))
    res.setType(y.getType());
  return success();
}

} // namespace

void SchedMicrobatchPass::runOnOperation() {
  if (microbatches < 1) {
    getOperation().emitError(
        "sched-microbatch: microbatches must be at least 1, got ")
        << microbatches;
    return signalPassFailure();
  }
  SmallVector<IterationOp> iterations;
  getOperation().walk([&](IterationOp it) { iterations.push_back(it); });
  for (IterationOp it : iterations)
    if (failed(split(it)))
      return signalPassFailure();
}

LogicalResult SchedMicrobatchPass::split(IterationOp iteration) {
  if (iteration.getMicrobatches() != 1)
    return iteration.emitError("sched-microbatch: the iteration is already "
                               "split into ")
           << iteration.getMicrobatches() << " micro-batches";
  int64_t m = microbatches;
  if (m == 1)
    return success();
  Block &block = iteration.getBlock();
  auto terminator = cast<YieldOp>(block.getTerminator());
  for (Operation &op : block.without_terminator())
    if (!isa<TaskOp>(op))
      return op.emitError("sched-microbatch: expected only tasks in the "
                          "iteration (it runs right after "
                          "convert-train-to-sched), found ")
             << op.getName();

  for (auto [i, arg] : llvm::enumerate(block.getArguments())) {
    auto t = dyn_cast<RankedTensorType>(arg.getType());
    if (!t || t.getRank() == 0 || ShapedType::isDynamic(t.getDimSize(0)) ||
        t.getDimSize(0) % m != 0)
      return iteration.emitError("sched-microbatch: input ")
             << inputName(iteration, i) << " of type " << arg.getType()
             << " has no leading batch dimension that divides into " << m
             << " micro-batches";
  }
  for (Value v : terminator.getValues())
    if (failed(checkMeanLoss(terminator, v)))
      return failure();

  llvm::DenseSet<Value> dep = batchDependent(iteration);
  iteration.setMicrobatches(m);
  iteration.removeOrderAttr(); // the replicas come out task-major

  // replicas[v][k]: replica k of a value computed per micro-batch.
  llvm::DenseMap<Value, SmallVector<Value>> replicas;
  OpBuilder b = OpBuilder::atBlockBegin(&block);
  for (BlockArgument arg : block.getArguments()) {
    auto t = cast<RankedTensorType>(arg.getType());
    for (int64_t k = 0; k < m; ++k)
      replicas[arg].push_back(
          SliceOp::create(b, arg.getLoc(), divideBatch(t, m), arg, k, m));
  }

  // The value micro-batch-independent consumers read in place of `v`.
  llvm::DenseMap<Value, Value> combined;
  auto combine = [&](Value v, Operation *before) -> Value {
    auto it = replicas.find(v);
    if (it == replicas.end())
      return v;
    if (!dep.contains(v))
      return it->second.front();
    Value &c = combined[v];
    if (!c) {
      OpBuilder cb(before);
      c = AccumulateOp::create(cb, v.getLoc(), v.getType(),
                               AccumulateKind::mean, it->second);
    }
    return c;
  };

  SmallVector<TaskOp> tasks(block.getOps<TaskOp>());
  for (TaskOp task : tasks) {
    if (task.getPhase() == Phase::opt) {
      for (OpOperand &use : task->getOpOperands())
        use.set(combine(use.get(), task));
      continue;
    }
    OpBuilder tb(task);
    for (int64_t k = 0; k < m; ++k) {
      auto copy = cast<TaskOp>(tb.clone(*task));
      copy.setMbAttr(tb.getI64IntegerAttr(k));
      for (OpOperand &use : copy->getOpOperands()) {
        auto it = replicas.find(use.get());
        if (it != replicas.end())
          use.set(it->second[k]);
      }
      if (failed(retype(copy, m)))
        return failure();
      if (failed(verify(copy)))
        return copy.emitError("sched-microbatch: ")
               << stringifyPhase(copy.getPhase()) << " task of layer "
               << copy.getLayer() << " does not split into " << m
               << " micro-batches (see the error above)";
      for (auto [orig, res] : llvm::zip(task.getResults(), copy.getResults()))
        replicas[orig].push_back(res);
    }
  }
  for (OpOperand &use : terminator->getOpOperands())
    use.set(combine(use.get(), terminator));
  // The originals now feed only each other: erase users first.
  for (TaskOp task : llvm::reverse(tasks))
    if (task.getPhase() != Phase::opt) {
      assert(task->use_empty() && "replicas replaced every outside use");
      task.erase();
    }
  return success();
}
