//===- Recompute.cpp - recompute a layer's forward inside its backward ----===//
//
// A bwd task that reads values the forward computes only for the backward
// (internal results of a fwd task) takes that fwd task's inputs instead and
// recomputes the values from them; the fwd task then stops yielding them.
// What stays across the fwd/bwd gap is what the forward keeps anyway: the
// layer-boundary activations and the loss. The rule is in Passes.td.
//
//===----------------------------------------------------------------------===//

#include "spillway/Dialect/Sched/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "spillway/Dialect/Sched/IR/SchedOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

namespace spillway::sched {
#define GEN_PASS_DEF_SCHEDRECOMPUTEPASS
#include "spillway/Dialect/Sched/Transforms/Passes.h.inc"
} // namespace spillway::sched

using namespace mlir;
using namespace spillway;
using namespace spillway::sched;

namespace {

struct SchedRecomputePass
    : sched::impl::SchedRecomputePassBase<SchedRecomputePass> {
  using SchedRecomputePassBase::SchedRecomputePassBase;
  void runOnOperation() override;
  LogicalResult recompute(IterationOp iteration);
  LogicalResult recomputeInto(OpBuilder &b, TaskOp bwd, TaskOp fwd,
                              ArrayRef<unsigned> operandIndices);
  void dropUnusedResults(TaskOp fwd);

  // Counts for the remark, per iteration.
  int64_t recomputedOps = 0, recomputingTasks = 0, droppedResults = 0;
};

std::string describe(TaskOp t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << stringifyPhase(t.getPhase()) << " layer(" << t.getLayer() << ")";
  if (t.getMb())
    os << " mb(" << *t.getMb() << ")";
  return s;
}

bool isPhase(Operation *op, Phase phase) {
  auto task = dyn_cast<TaskOp>(op);
  return task && task.getPhase() == phase;
}

/// True when running `op` again gives the same values and changes nothing:
/// no effects, or only reads (parameters, which only opt tasks update).
bool isRecomputable(Operation *op) {
  if (op->getNumRegions() != 0)
    return false;
  if (isMemoryEffectFree(op))
    return true;
  auto effects = dyn_cast<MemoryEffectOpInterface>(op);
  if (!effects)
    return false;
  SmallVector<MemoryEffects::EffectInstance> list;
  effects.getEffects(list);
  return llvm::all_of(list, [](const MemoryEffects::EffectInstance &e) {
    return isa<MemoryEffects::Read>(e.getEffect());
  });
}

/// Erases the block arguments of `task` (and their operands) that nothing
/// in the body reads.
void eraseUnusedInputs(TaskOp task) {
  Block &block = task.getBlock();
  for (int i = static_cast<int>(block.getNumArguments()) - 1; i >= 0; --i)
    if (block.getArgument(i).use_empty()) {
      task.getInputsMutable().erase(i);
      block.eraseArgument(i);
    }
}

} // namespace

void SchedRecomputePass::runOnOperation() {
  SmallVector<IterationOp> iterations;
  getOperation().walk([&](IterationOp it) { iterations.push_back(it); });
  for (IterationOp it : iterations)
    if (failed(recompute(it)))
      return signalPassFailure();
}

LogicalResult SchedRecomputePass::recompute(IterationOp iteration) {
  Block &block = iteration.getBlock();
  recomputedOps = recomputingTasks = droppedResults = 0;
  // Placement decides where kept activations live; it must see the
  // activations this pass keeps, not the other way round.
  for (Operation &op : block)
    if (isa<MoveOp, AllocOp, AwaitOp, DropOp, BindOp, StageGradsOp,
            AccumulateGradsOp,
            GradientOp>(op))
      return op.emitError("sched-recompute: expected no residency or "
                          "transfer ops (it runs before sched-place), found ")
             << op.getName();

  // Internal results, decided once before anything is rewritten: read, and
  // read by bwd tasks only.
  llvm::DenseSet<Value> internal;
  SmallVector<TaskOp> fwdTasks, bwdTasks;
  for (TaskOp task : block.getOps<TaskOp>()) {
    if (task.getPhase() == Phase::bwd)
      bwdTasks.push_back(task);
    if (task.getPhase() != Phase::fwd)
      continue;
    fwdTasks.push_back(task);
    for (OpResult r : task->getResults())
      if (!r.use_empty() && llvm::all_of(r.getUsers(), [](Operation *user) {
            return isPhase(user, Phase::bwd);
          }))
        internal.insert(r);
  }

  for (TaskOp bwd : bwdTasks) {
    // The internal values this task reads, by the fwd task computing them.
    llvm::MapVector<Operation *, SmallVector<unsigned>> byProducer;
    for (auto [i, v] : llvm::enumerate(bwd.getInputs()))
      if (internal.contains(v))
        byProducer[v.getDefiningOp()].push_back(i);
    if (byProducer.empty())
      continue;
    ++recomputingTasks;
    SmallVector<unsigned> replaced;
    // One insertion point for all producers: the clones come in the order
    // of the operands they replace.
    OpBuilder b = OpBuilder::atBlockBegin(&bwd.getBlock());
    for (auto &[fwd, indices] : byProducer) {
      if (failed(recomputeInto(b, bwd, cast<TaskOp>(fwd), indices)))
        return failure();
      replaced.append(indices);
    }
    // Descending, so earlier positions stay valid; the fwd inputs appended
    // by recomputeInto sit after all of these.
    llvm::sort(replaced, std::greater<unsigned>());
    for (unsigned i : replaced) {
      bwd.getInputsMutable().erase(i);
      bwd.getBlock().eraseArgument(i);
    }
  }

  // Last first: a later task that stops reading an input can leave an
  // earlier task's result unread.
  for (TaskOp fwd : llvm::reverse(fwdTasks))
    dropUnusedResults(fwd);
  // Slices only the dropped values' tasks read (none in a graph where
  // every slice feeds the loss, but kept tidy for hand-written ones).
  for (Operation &op : llvm::make_early_inc_range(block))
    if (isa<SliceOp>(op) && op.use_empty())
      op.erase();
  if (remarks)
    iteration.emitRemark() << "recomputed " << recomputedOps
                           << " forward ops in " << recomputingTasks
                           << " bwd tasks; dropped " << droppedResults
                           << " fwd task results";
  return success();
}

LogicalResult
SchedRecomputePass::recomputeInto(OpBuilder &b, TaskOp bwd, TaskOp fwd,
                                  ArrayRef<unsigned> operandIndices) {
  Block &fwdBlock = fwd.getBlock();
  auto yield = cast<YieldOp>(fwdBlock.getTerminator());

  // The ops of fwd that the read results need, back to its block arguments.
  llvm::SetVector<Operation *> needed;
  SmallVector<Value> worklist;
  for (unsigned i : operandIndices)
    worklist.push_back(
        yield.getValues()[cast<OpResult>(bwd.getInputs()[i]).getResultNumber()]);
  while (!worklist.empty()) {
    Operation *def = worklist.pop_back_val().getDefiningOp();
    if (!def || !needed.insert(def))
      continue;
    llvm::append_range(worklist, def->getOperands());
  }
  for (Operation *op : needed)
    if (!isRecomputable(op))
      return op->emitError("sched-recompute: cannot recompute '")
             << op->getName() << "' of " << describe(fwd) << " in "
             << describe(bwd)
             << ": it has side effects or regions, so running it again "
                "could change the result";

  // fwd's block arguments as values of bwd: an operand bwd already has, or a
  // new one (fwd's input dominates fwd, which runs before bwd).
  Block &bwdBlock = bwd.getBlock();
  IRMapping map;
  auto mapInput = [&](BlockArgument arg) {
    if (arg.getOwner() != &fwdBlock || map.contains(arg))
      return;
    Value outer = fwd.getInputs()[arg.getArgNumber()];
    for (auto [i, v] : llvm::enumerate(bwd.getInputs()))
      if (v == outer)
        return map.map(arg, bwdBlock.getArgument(i));
    bwd.getInputsMutable().append(outer);
    map.map(arg, bwdBlock.addArgument(outer.getType(), outer.getLoc()));
  };
  for (unsigned i : operandIndices)
    if (auto arg = dyn_cast<BlockArgument>(yield.getValues()[cast<OpResult>(
            bwd.getInputs()[i]).getResultNumber()]))
      mapInput(arg);

  // Clone in fwd's order, before bwd's own ops.
  for (Operation &op : fwdBlock.without_terminator()) {
    if (!needed.contains(&op))
      continue;
    for (Value v : op.getOperands())
      if (auto arg = dyn_cast<BlockArgument>(v))
        mapInput(arg);
    Operation *clone = b.clone(op, map);
    clone->setAttr("sched.recompute", b.getUnitAttr());
    ++recomputedOps;
  }
  for (unsigned i : operandIndices) {
    unsigned result = cast<OpResult>(bwd.getInputs()[i]).getResultNumber();
    bwdBlock.getArgument(i).replaceAllUsesWith(
        map.lookupOrDefault(yield.getValues()[result]));
  }
  return success();
}

void SchedRecomputePass::dropUnusedResults(TaskOp fwd) {
  SmallVector<unsigned> kept;
  for (OpResult r : fwd->getResults())
    if (!r.use_empty())
      kept.push_back(r.getResultNumber());
  if (kept.size() == fwd->getNumResults())
    return;
  droppedResults += fwd->getNumResults() - kept.size();

  auto yield = cast<YieldOp>(fwd.getBlock().getTerminator());
  SmallVector<Value> values;
  SmallVector<Type> types;
  for (unsigned i : kept) {
    values.push_back(yield.getValues()[i]);
    types.push_back(fwd->getResult(i).getType());
  }
  yield.getValuesMutable().assign(values);

  OpBuilder b(fwd);
  std::optional<int64_t> mb;
  if (fwd.getMb())
    mb = static_cast<int64_t>(*fwd.getMb());
  auto slim = TaskOp::create(b, fwd.getLoc(), types, fwd.getInputs(),
                             fwd.getPhase(), fwd.getLayer(), mb);
  slim->setDiscardableAttrs(fwd->getDiscardableAttrDictionary());
  slim.getBody().takeBody(fwd.getBody());
  for (auto [newIndex, oldIndex] : llvm::enumerate(kept))
    fwd->getResult(oldIndex).replaceAllUsesWith(slim->getResult(newIndex));
  fwd.erase();

  // What only the dropped results needed (pure, or parameter reads).
  // Last first, so an op whose only users go is seen after them.
  SmallVector<Operation *> ops;
  for (Operation &op : slim.getBlock().without_terminator())
    ops.push_back(&op);
  for (Operation *op : llvm::reverse(ops))
    if (isOpTriviallyDead(op))
      op->erase();
  eraseUnusedInputs(slim);
  // A forward that only the backward read is now all recomputed there.
  if (slim->getNumResults() == 0 &&
      llvm::hasSingleElement(slim.getBlock().getOperations()))
    slim.erase();
}
