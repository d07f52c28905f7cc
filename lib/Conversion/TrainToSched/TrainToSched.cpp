//===- TrainToSched.cpp - a partitioned step as a sched.iteration ---------===//
//
// The ops of the step, already labelled with their layer and phase by
// train-partition-layers, are moved into one sched.task per (phase, layer) in
// the horizontal order of one whole batch; values crossing tasks become task
// results and operands.
//
//===----------------------------------------------------------------------===//

#include "spillway/Conversion/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "spillway/Dialect/Sched/IR/SchedOps.h"
#include "spillway/Dialect/Train/IR/TrainOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

namespace spillway {
#define GEN_PASS_DEF_CONVERTTRAINTOSCHEDPASS
#include "spillway/Conversion/Passes.h.inc"
} // namespace spillway

using namespace mlir;
using namespace spillway;
using sched::Phase;

namespace {

struct TaskKey {
  Phase phase;
  int64_t layer;
};

/// Horizontal order of one batch: fwd 0..L-1, bwd L-1..0, opt 0..L-1.
bool comesBefore(const TaskKey &a, const TaskKey &b) {
  if (a.phase != b.phase)
    return static_cast<int>(a.phase) < static_cast<int>(b.phase);
  return a.phase == Phase::bwd ? a.layer > b.layer : a.layer < b.layer;
}

std::string describe(const TaskKey &k) {
  return (sched::stringifyPhase(k.phase) + " of layer " + Twine(k.layer))
      .str();
}

struct ConvertTrainToSchedPass
    : spillway::impl::ConvertTrainToSchedPassBase<ConvertTrainToSchedPass> {
  void runOnOperation() override;
  LogicalResult convert(func::FuncOp step);
};

} // namespace

void ConvertTrainToSchedPass::runOnOperation() {
  func::FuncOp step;
  for (auto fn : getOperation().getOps<func::FuncOp>()) {
    if (fn.isExternal())
      continue;
    bool labelled = false;
    fn.walk([&](Operation *op) {
      if (op->hasAttr("train.phase"))
        labelled = true;
    });
    if (!labelled)
      continue;
    if (step) {
      fn.emitError("convert-train-to-sched: more than one function is "
                   "partitioned into layers (also @")
          << step.getName() << ")";
      return signalPassFailure();
    }
    step = fn;
  }
  if (!step) {
    getOperation().emitError("convert-train-to-sched: no function carries "
                             "train.layer/train.phase: run "
                             "train-partition-layers first");
    return signalPassFailure();
  }
  if (failed(convert(step)))
    signalPassFailure();
}

LogicalResult ConvertTrainToSchedPass::convert(func::FuncOp step) {
  if (!step.getBody().hasOneBlock())
    return step.emitError("convert-train-to-sched: the step must be one block");
  Block &body = step.getBody().front();
  Operation *ret = body.getTerminator();

  // Parameter reads, constants and what is computed from them alone (a
  // weight's transpose) are recomputed in every task that uses them rather
  // than passed along: a weight is loaded by each task that needs it (what
  // the cost model counts), never kept alive as a crossing value. So is the
  // f32 copy of a bf16 forward value: the bf16 value is what crosses tasks
  // (a gradient's rounding stays where it is: the update reads the f32
  // gradient its micro-batches accumulate). Walking
  // backwards, a chain's later ops are copied first, so their operands then
  // have uses in the new task and are copied too.
  auto widensBf16 = [](Operation &op) {
    auto cast = dyn_cast<train::CastOp>(op);
    auto phase = op.getAttrOfType<StringAttr>("train.phase");
    return cast && cast.widensBf16() && phase && phase.getValue() == "fwd";
  };
  llvm::SmallPtrSet<Operation *, 32> fromWeights;
  for (Operation &op : body.without_terminator())
    if (isa<train::ParamValueOp, train::ConstantOp>(op) ||
        (isPure(&op) && op.getNumResults() == 1 && op.getNumOperands() > 0 &&
         llvm::all_of(op.getOperands(), [&](Value v) {
           return fromWeights.contains(v.getDefiningOp());
         })))
      fromWeights.insert(&op);
  for (Operation &op : llvm::make_early_inc_range(
           llvm::reverse(body.without_terminator()))) {
    if (!fromWeights.contains(&op) && !widensBf16(op))
      continue;
    auto layer = op.getAttr("train.layer");
    auto phase = op.getAttr("train.phase");
    llvm::MapVector<std::pair<Attribute, Attribute>, SmallVector<OpOperand *>>
        usesByTask;
    for (OpOperand &use : op.getUses()) {
      Operation *user = use.getOwner();
      auto key = std::make_pair(user->getAttr("train.layer"),
                                user->getAttr("train.phase"));
      if (key.first && key.second &&
          (key.first != layer || key.second != phase))
        usesByTask[key].push_back(&use);
    }
    for (auto &[key, uses] : usesByTask) {
      Operation *first = uses.front()->getOwner();
      for (OpOperand *use : uses)
        if (use->getOwner()->isBeforeInBlock(first))
          first = use->getOwner();
      OpBuilder cb(first);
      Operation *copy = cb.clone(op);
      copy->setAttr("train.layer", key.first);
      copy->setAttr("train.phase", key.second);
      for (OpOperand *use : uses)
        use->set(copy->getResult(0));
    }
  }

  // Every op's task.
  SmallVector<Operation *> ops;
  DenseMap<Operation *, TaskKey> keyOf;
  SmallVector<TaskKey> keys;
  for (Operation &op : body.without_terminator()) {
    auto layer = op.getAttrOfType<IntegerAttr>("train.layer");
    auto phaseName = op.getAttrOfType<StringAttr>("train.phase");
    std::optional<Phase> phase =
        phaseName ? sched::symbolizePhase(phaseName.getValue()) : std::nullopt;
    if (!layer || !phase)
      return op.emitError("convert-train-to-sched: op has no train.layer and "
                          "train.phase (fwd, bwd or opt): run "
                          "train-partition-layers first");
    TaskKey key{*phase, layer.getInt()};
    keyOf[&op] = key;
    ops.push_back(&op);
    if (llvm::none_of(keys, [&](const TaskKey &k) {
          return k.phase == key.phase && k.layer == key.layer;
        }))
      keys.push_back(key);
  }
  llvm::stable_sort(keys, comesBefore);
  auto indexOf = [&](const TaskKey &k) {
    return llvm::find_if(keys,
                         [&](const TaskKey &x) {
                           return x.phase == k.phase && x.layer == k.layer;
                         }) -
           keys.begin();
  };

  // Legal only if no task reads what a later task computes.
  for (Operation *op : ops)
    for (Value v : op->getOperands())
      if (Operation *def = v.getDefiningOp())
        if (indexOf(keyOf[def]) > indexOf(keyOf[op]))
          return op->emitError("convert-train-to-sched: this op (")
                 << describe(keyOf[op]) << ") reads a value computed by "
                 << def->getName() << " (" << describe(keyOf[def])
                 << "), which runs later in the iteration";

  OpBuilder b(ret);
  auto iteration = sched::IterationOp::create(
      b, step.getLoc(), ret->getOperandTypes(), step.getArguments());
  for (auto [arg, inner] :
       llvm::zip(step.getArguments(), iteration.getBlock().getArguments()))
    arg.replaceUsesWithIf(inner, [&](OpOperand &use) {
      return use.getOwner() != iteration;
    });

  OpBuilder ib = OpBuilder::atBlockEnd(&iteration.getBlock());
  for (const TaskKey &key : keys) {
    SmallVector<Operation *> members;
    for (Operation *op : ops)
      if (keyOf[op].phase == key.phase && keyOf[op].layer == key.layer)
        members.push_back(op);
    llvm::SmallPtrSet<Operation *, 32> inTask(members.begin(), members.end());
    llvm::SetVector<Value> inputs, outputs;
    for (Operation *op : members) {
      for (Value v : op->getOperands())
        if (!inTask.contains(v.getDefiningOp()))
          inputs.insert(v);
      for (Value r : op->getResults())
        if (llvm::any_of(r.getUsers(), [&](Operation *user) {
              return !inTask.contains(user);
            }))
          outputs.insert(r);
    }
    auto task = sched::TaskOp::create(
        ib, members.front()->getLoc(), ValueRange(outputs.getArrayRef()).getTypes(),
        inputs.getArrayRef(), key.phase, key.layer, std::nullopt);
    Block &tb = task.getBlock();
    for (Operation *op : members) {
      op->moveBefore(&tb, tb.end());
      op->removeAttr("train.layer");
      op->removeAttr("train.phase");
    }
    for (auto [cv, arg] : llvm::zip(inputs, tb.getArguments())) {
      Value v = cv;
      v.replaceUsesWithIf(arg, [&](OpOperand &use) {
        return task->isProperAncestor(use.getOwner());
      });
    }
    OpBuilder tbb = OpBuilder::atBlockEnd(&tb);
    sched::YieldOp::create(tbb, task.getLoc(), outputs.getArrayRef());
    for (auto [cv, res] : llvm::zip(outputs, task.getResults())) {
      Value v = cv;
      v.replaceUsesWithIf(res, [&](OpOperand &use) {
        return !task->isProperAncestor(use.getOwner());
      });
    }
  }
  sched::YieldOp::create(ib, ret->getLoc(), ret->getOperands());
  ret->setOperands(iteration.getResults());
  return success();
}
