//===- SchedOps.cpp - sched dialect ops -----------------------------------===//

#include "spillway/Dialect/Sched/IR/SchedOps.h"
#include "spillway/runtime/hyperparams.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/DenseMap.h"
#include <cstdlib>
#include <tuple>

using namespace mlir;
using namespace spillway::sched;

#include "spillway/Dialect/Sched/IR/SchedEnums.cpp.inc"

#define GET_OP_CLASSES
#include "spillway/Dialect/Sched/IR/SchedOps.cpp.inc"

/// The block's arguments are the region's inputs and its yield the results.
static LogicalResult verifyRegionSignature(Operation *op, Block &block,
                                           TypeRange inputs,
                                           TypeRange results) {
  if (block.getArgumentTypes() != inputs)
    return op->emitOpError("block arguments (")
           << block.getArgumentTypes() << ") must match the operands ("
           << inputs << ")";
  auto yield = cast<YieldOp>(block.getTerminator());
  if (yield.getValues().getTypes() != results)
    return yield.emitOpError("yields (")
           << yield.getValues().getTypes() << ") but its parent "
           << op->getName() << " returns (" << results << ")";
  return success();
}

//===----------------------------------------------------------------------===//
// IterationOp
//===----------------------------------------------------------------------===//

void IterationOp::build(OpBuilder &b, OperationState &state,
                        TypeRange results, ValueRange inputs) {
  state.addOperands(inputs);
  state.addTypes(results);
  Region *region = state.addRegion();
  Block *block = new Block;
  region->push_back(block);
  for (Value v : inputs)
    block->addArgument(v.getType(), v.getLoc());
}

LogicalResult IterationOp::verify() {
  if (getMicrobatches() < 1)
    return emitOpError("needs at least one micro-batch, got ")
           << getMicrobatches();
  if (auto order = getOrder())
    if (*order != "horizontal" && *order != "snake")
      return emitOpError("order must be 'horizontal' or 'snake', got '")
             << *order << "'";
  // The offload passes' attributes: each needs the one before it.
  auto placement = getPlacementAttr();
  if (auto on = getOptimizerOn()) {
    if (!placement)
      return emitOpError("optimizer_on needs a placement");
    StringRef expect = placement.getOptimizer() == Tier::gpu ? "gpu" : "cpu";
    if (*on != expect)
      return emitOpError("optimizer_on must be '")
             << expect << "' for optimizer state homed on "
             << stringifyTier(placement.getOptimizer()) << ", got '" << *on
             << "'";
  }
  if (auto master = getMaster()) {
    if (!placement)
      return emitOpError("master needs a placement");
    auto tier = symbolizeTier(*master);
    if (!tier)
      return emitOpError("master must be 'gpu', 'host' or 'ssd', got '")
             << *master << "'";
    // The update reads and writes the masters where it runs: a GPU
    // optimizer's on the GPU, a CPU optimizer's off it.
    if ((*tier == Tier::gpu) != (placement.getOptimizer() == Tier::gpu))
      return emitOpError("master weights homed on ")
             << *master << " with optimizer state homed on "
             << stringifyTier(placement.getOptimizer())
             << ": both on the GPU (GPU optimizer) or both off it (CPU "
                "optimizer)";
    ArrayRef<int32_t> split = placement.layerTiers("master");
    if (!split.empty() && *tier != Tier(*llvm::max_element(split)))
      return emitOpError("master = ")
             << *master << " but its slowest layer is on "
             << stringifyTier(Tier(*llvm::max_element(split)));
    // The attribute cannot tell the master weights' home; here it is known.
    DictionaryAttr cuts = placement.getCuts();
    if (auto v = cuts ? cuts.getAs<DenseI64ArrayAttr>("master")
                      : DenseI64ArrayAttr())
      for (size_t i = 0; i + 1 < size_t(v.size()); i += 2)
        if (placement.homeOf("master", *tier, v[i]) != Tier::ssd)
          return emitOpError("the placement cuts layer ")
                 << v[i] << " of master, homed on "
                 << stringifyTier(placement.homeOf("master", *tier, v[i]))
                 << "; a cut block is homed on ssd, its first elements on "
                    "host";
  }
  if (placement && !getMaster() &&
      (!placement.layerTiers("master").empty() ||
       (placement.getCuts() && placement.getCuts().get("master"))))
    return emitOpError("the placement splits master weights the iteration "
                       "does not have (no `master`)");
  if (getUpdatedAttr() && !placement)
    return emitOpError("updated needs a placement");
  if (auto deferred = getDeferredAttr()) {
    auto updated = getUpdatedAttr();
    if (!updated)
      return emitOpError("deferred needs updated");
    if (deferred.size() != int64_t(updated.size()))
      return emitOpError("deferred lists ")
             << deferred.size() << " layers, updated " << updated.size();
    for (auto [l, d] : llvm::enumerate(deferred.asArrayRef()))
      if (d < 0)
        return emitOpError("deferred: layer ")
               << l << " defers a negative number of elements (" << d << ")";
  }
  // One training step: the body of a function (by name, so the dialect does
  // not depend on func).
  Operation *parent = (*this)->getParentOp();
  if (!parent || parent->getName().getStringRef() != "func.func")
    return emitOpError("expects parent op 'func.func'");
  return verifyRegionSignature(*this, getBlock(), getInputs().getTypes(),
                               getResultTypes());
}

LogicalResult IterationOp::verifyRegions() {
  // Each task runs once: (phase, layer, micro-batch) names one task; with M
  // micro-batches each fwd/bwd layer has all of them. (The tasks' own
  // verifiers, which ran first, checked each index is in range.)
  int64_t count = getMicrobatches();
  llvm::DenseMap<std::tuple<int, int64_t, int64_t>, TaskOp> seen;
  llvm::DenseMap<std::pair<int, int64_t>, int64_t> perLayer;
  SmallVector<std::pair<int, int64_t>> layerOrder;
  for (TaskOp task : getBlock().getOps<TaskOp>()) {
    int phase = static_cast<int>(task.getPhase());
    // A deferred opt task is the layer's second opt task: its own key.
    int64_t mb = task.getMb()        ? static_cast<int64_t>(*task.getMb())
                 : task.getDeferred() ? -2
                                      : -1;
    auto [it, inserted] =
        seen.try_emplace({phase, int64_t(task.getLayer()), mb}, task);
    if (!inserted) {
      InFlightDiagnostic diag =
          task.emitOpError("repeats ")
          << stringifyPhase(task.getPhase())
          << (task.getDeferred() ? " deferred" : "") << " layer("
          << task.getLayer() << ")";
      if (mb >= 0)
        diag << " mb(" << mb << ")";
      diag.attachNote(it->second.getLoc()) << "the first is here";
      return diag;
    }
    if (task.getPhase() != Phase::opt && count > 1) {
      auto key = std::make_pair(phase, int64_t(task.getLayer()));
      if (perLayer[key]++ == 0)
        layerOrder.push_back(key);
    }
  }
  for (auto key : layerOrder)
    if (perLayer[key] != count)
      return emitOpError("has ")
             << perLayer[key] << " of the " << count << " micro-batches of "
             << stringifyPhase(static_cast<Phase>(key.first)) << " layer("
             << key.second << "): each fwd/bwd layer runs every micro-batch";
  return success();
}

//===----------------------------------------------------------------------===//
// TaskOp
//===----------------------------------------------------------------------===//

void TaskOp::build(OpBuilder &b, OperationState &state, TypeRange results,
                   ValueRange inputs, Phase phase, int64_t layer,
                   std::optional<int64_t> mb) {
  state.addOperands(inputs);
  state.addTypes(results);
  auto &props = state.getOrAddProperties<Properties>();
  props.phase = PhaseAttr::get(b.getContext(), phase);
  props.layer = b.getI64IntegerAttr(layer);
  if (mb)
    props.mb = b.getI64IntegerAttr(*mb);
  Region *region = state.addRegion();
  Block *block = new Block;
  region->push_back(block);
  for (Value v : inputs)
    block->addArgument(v.getType(), v.getLoc());
}

LogicalResult TaskOp::verify() {
  auto iteration = cast<IterationOp>((*this)->getParentOp());
  int64_t count = iteration.getMicrobatches();
  if (getDeferred()) {
    if (getPhase() != Phase::opt)
      return emitOpError("only an opt task can be deferred, not a ")
             << stringifyPhase(getPhase()) << " task";
    if (!getInputs().empty() || getNumResults() != 0)
      return emitOpError("a deferred opt task applies updates kept from the "
                         "previous iteration: it takes no operands and "
                         "returns nothing");
  }
  if (getPhase() == Phase::opt) {
    if (getMb())
      return emitOpError("an opt task runs once per iteration and takes no "
                         "micro-batch index");
  } else if (count > 1) {
    if (!getMb())
      return emitOpError("a ")
             << stringifyPhase(getPhase())
             << " task of an iteration with " << count
             << " micro-batches needs a micro-batch index";
    if (static_cast<int64_t>(*getMb()) >= count)
      return emitOpError("micro-batch ")
             << *getMb() << " is out of range: the iteration has " << count
             << " micro-batches";
  } else if (getMb() && *getMb() != 0) {
    return emitOpError("micro-batch ")
           << *getMb() << " is out of range: the iteration has 1 micro-batch";
  }
  return verifyRegionSignature(*this, getBlock(), getInputs().getTypes(),
                               getResultTypes());
}

//===----------------------------------------------------------------------===//
// SliceOp, AccumulateOp
//===----------------------------------------------------------------------===//

LogicalResult SliceOp::verify() {
  auto in = getInput().getType();
  auto out = getResult().getType();
  int64_t count = getCount(), index = getIndex();
  if (index >= count)
    return emitOpError("micro-batch ")
           << index << " is out of range: the batch is split into " << count;
  if (in.getRank() == 0)
    return emitOpError("input must have a leading (batch) dimension");
  int64_t batch = in.getDimSize(0);
  if (ShapedType::isDynamic(batch) || batch % count != 0)
    return emitOpError("leading dimension ")
           << batch << " does not divide into " << count << " micro-batches";
  SmallVector<int64_t> shape(in.getShape());
  shape[0] = batch / count;
  auto expected = RankedTensorType::get(shape, in.getElementType());
  if (out != expected)
    return emitOpError("result type ")
           << out << " must be " << expected << " (" << count
           << " micro-batches of " << in << ")";
  return success();
}

LogicalResult AccumulateOp::verify() {
  if (getValues().empty())
    return emitOpError("needs at least one value");
  if (!isa<FloatType>(getResult().getType().getElementType()))
    return emitOpError("accumulates floating-point tensors only, got ")
           << getResult().getType();
  return success();
}

void spillway::sched::producerTasks(Value v, SmallVectorImpl<TaskOp> &out) {
  Operation *def = v.getDefiningOp();
  if (!def)
    return;
  if (auto t = dyn_cast<TaskOp>(def))
    return out.push_back(t);
  for (Value x : def->getOperands())
    producerTasks(x, out);
}

//===----------------------------------------------------------------------===//
// Blocks
//===----------------------------------------------------------------------===//

/// Tiers from fastest (gpu) to slowest (ssd).
static int speedRank(Tier t) { return static_cast<int>(t); }

LogicalResult MoveOp::verify() {
  // One link per move: the store moves between adjacent tiers only (SSD data
  // always passes through pinned host memory).
  if (std::abs(speedRank(getTo()) - speedRank(getFrom())) != 1)
    return emitOpError("moves along one link (ssd <-> host <-> gpu), not ")
           << stringifyTier(getFrom()) << " -> " << stringifyTier(getTo());
  if (getBlockClass() == BlockClass::gradstage && getTo() == Tier::ssd)
    return emitOpError("gradstage blocks are staging and never go to ssd");
  if (getBlockClass() == BlockClass::pending)
    return emitOpError("pending blocks (deferred gradient slices) stay at "
                       "home; they never move");
  return success();
}

LogicalResult AllocOp::verify() {
  if (getBlockClass() != BlockClass::params)
    return emitOpError("allocates copies of params blocks (rounded from "
                       "their masters), not ")
           << stringifyBlockClass(getBlockClass());
  if (getTier() == Tier::ssd)
    return emitOpError("allocates a copy where compute writes it (gpu or "
                       "host), not ssd");
  return success();
}

LogicalResult AwaitOp::verify() {
  if (getTimepoints().empty())
    return emitOpError("needs at least one timepoint");
  return success();
}

LogicalResult BindOp::verify() {
  if (getBlockClass() != BlockClass::params &&
      getBlockClass() != BlockClass::optimizer &&
      getBlockClass() != BlockClass::master)
    return emitOpError("binds params, optimizer or master blocks, not ")
           << stringifyBlockClass(getBlockClass());
  if (getTier() == Tier::ssd)
    return emitOpError("compute cannot read a block on ssd; move it to host "
                       "or gpu first");
  return success();
}

LogicalResult StageGradsOp::verify() {
  if (getInto() != BlockClass::gradients && getInto() != BlockClass::gradstage)
    return emitOpError("stages into a gradients or gradstage block, not ")
           << stringifyBlockClass(getInto());
  size_t n = getParams().size();
  if (n == 0 || getGrads().size() % n != 0)
    return emitOpError("has ")
           << getGrads().size() << " gradients for " << n
           << " parameters; expected a whole number of micro-batches";
  for (size_t i = 0; i < getGrads().size(); ++i)
    if (getGrads()[i].getType() != getGrads()[i % n].getType())
      return emitOpError("gradient #")
             << i << " has type " << getGrads()[i].getType()
             << " but the same parameter's gradient #" << (i % n) << " has "
             << getGrads()[i % n].getType();
  return success();
}

LogicalResult GradNormsOp::verify() {
  if (getTier() == Tier::ssd)
    return emitOpError("reads the gradients on gpu or host; a copy on ssd "
                       "must come to host first");
  return success();
}

LogicalResult ClipGradNormOp::verify() {
  namespace hp = spillway::hyperparams;
  const double maxNorm = getMaxNorm().convertToDouble();
  if (!hp::in_range(hp::kGradClip, maxNorm) || maxNorm == 0)
    return emitOpError("max_norm must be positive and at most 1e6, not ")
           << maxNorm;
  if (getParams().empty())
    return emitOpError("needs the updated parameters whose norms it sums");
  return success();
}

LogicalResult PutActivationOp::verify() {
  // The runtime frees the value's memory here: a later reader would read
  // freed memory, so the value must be dead after the put.
  Operation *self = getOperation();
  for (Operation *user : getValue().getUsers())
    if (user != self && user->getBlock() == self->getBlock() &&
        self->isBeforeInBlock(user))
      return emitOpError("frees its value, but ")
             << user->getName()
             << " reads it later; read the sched.take_activation of index "
             << getIndex() << " instead";
  return success();
}
