//===- Microbatch.cpp - split an iteration's batch into micro-batches -----===//
//
// Forward and backward tasks are replicated per micro-batch on slices of the
// batch inputs, with their types re-derived for the smaller batch; what the
// updates and the iteration's results read is averaged over the replicas.
// Before anything is rewritten, the forward is checked to keep batch rows
// independent (checkRowwise). The arithmetic and its conditions are in
// Passes.td.
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
  if (auto xent = dyn_cast_or_null<train::SoftmaxCrossEntropyLossOp>(def))
    if (xent.getReduction() == "mean")
      return success();
  if (isa_and_nonnull<train::ReduceMeanOp>(def))
    return user->emitError("sched-microbatch: the iteration's result ")
           << v.getType()
           << " is a reduce_mean loss, which is not supported: only a "
              "softmax_cross_entropy_loss with reduction = \"mean\" is; use "
              "--microbatches 1";
  return user->emitError("sched-microbatch: the iteration's result ")
         << v.getType()
         << " is not a mean over the batch (softmax_cross_entropy_loss with "
            "reduction = \"mean\"): averaging micro-batch values would not "
            "reproduce it";
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
                    auto was = cast<RankedTensorType>(oldType[v]);
                    // A cast changes the element type only; a sum_to_shape
                    // (the gradient of a broadcast) that keeps the rank and
                    // dim 0 sums within batch rows.
                    if (isa<train::CastOp>(op))
                      return was.getShape() == t.getShape();
                    if (isa<train::SumToShapeOp>(op))
                      return was.getRank() == t.getRank() &&
                             t.getRank() > 0 &&
                             was.getDimSize(0) == t.getDimSize(0);
                    return was == t;
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

//===----------------------------------------------------------------------===//
// Batch-row analysis: before anything is rewritten, the forward computation
// must keep the rows of the batch independent, so that replica m computes
// exactly rows [m·n, (m+1)·n) of every batched value from slice m of the
// inputs. Retyping only halves dim 0; an op that slices, moves, contracts or
// reduces the batch would silently compute something else.
//===----------------------------------------------------------------------===//

/// A value of the forward computation reachable from the batch inputs.
enum class Rows {
  /// Dim 0 is B·k (k >= 1) and batch element b is rows [b·k, (b+1)·k).
  batched,
  /// The mean loss over the batch (softmax_cross_entropy_loss, mean).
  meanLoss,
};

int64_t normAxis(int64_t axis, int64_t rank) {
  return axis < 0 ? axis + rank : axis;
}

int64_t rankOf(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t ? t.getRank() : -1;
}

int64_t dim0(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && t.getRank() > 0 ? t.getDimSize(0) : ShapedType::kDynamic;
}

/// Why `op` cannot run per micro-batch, or "" when it keeps batch rows
/// independent given which of its operands are batched.
std::string whyNotRowwise(Operation *op,
                          const llvm::DenseMap<Value, Rows> &rows,
                          int64_t batch) {
  auto isB = [&](Value v) {
    auto it = rows.find(v);
    return it != rows.end() && it->second == Rows::batched;
  };
  const std::string moves = "moves the batch dimension";
  const std::string slices = "slices the batch dimension";
  const std::string contracts = "contracts the batch dimension";
  const std::string reduces = "reduces the batch dimension";
  const std::string unknown = "is not known to keep batch rows independent";
  for (Value v : op->getOperands()) {
    auto it = rows.find(v);
    if (it != rows.end() && it->second == Rows::meanLoss)
      return "reads the loss, a mean over the batch (" + unknown + ")";
  }
  // The result keeps dim 0 of the batched operand `v`.
  auto keepsDim0 = [&](Value v, Value result) {
    return rankOf(result) >= 1 && rankOf(result) == rankOf(v) &&
           dim0(result) == dim0(v);
  };
  // Numpy broadcasting of `operands` to `result`: each batched operand has
  // the result's rank and dim 0; each other one is broadcast along dim 0
  // (lower rank, or dim 0 of 1), so it is the same for every micro-batch.
  auto broadcastOk = [&](ValueRange operands, Value result) -> std::string {
    for (Value v : operands) {
      if (isB(v)) {
        if (!keepsDim0(v, result))
          return moves;
      } else if (rankOf(v) == rankOf(result) && dim0(v) != 1) {
        return "combines the batch with a tensor not split with it (" +
               unknown + ")";
      }
    }
    return "";
  };
  Value result = op->getNumResults() == 1 ? op->getResult(0) : Value();
  if (!result)
    return unknown;

  // Elementwise: numpy broadcasting keeps dim 0 when every batched operand
  // has the result's rank.
  if (isa<train::AddOp, train::SubOp, train::MulOp, train::DivOp, train::PowOp,
          train::EqualOp, train::LessOp, train::LessOrEqualOp, train::GreaterOp,
          train::WhereOp, train::CastOp, train::NegOp, train::ReluOp,
          train::TanhOp, train::ExpOp, train::LogOp, train::SqrtOp,
          train::ReciprocalOp, train::ErfOp, train::SigmoidOp, train::CosOp,
          train::SinOp, train::SiluOp, train::GeluOp, train::BroadcastToOp>(op))
    return broadcastOk(op->getOperands(), result);
  if (auto s = dyn_cast<train::SoftmaxOp>(op))
    return normAxis(s.getAxis(), rankOf(result)) == 0
               ? reduces
               : broadcastOk(op->getOperands(), result);
  if (auto n = dyn_cast<train::LayerNormOp>(op)) {
    if (!isB(n.getInput()) || isB(n.getScale()) ||
        (n.getBias() && isB(n.getBias())))
      return unknown;
    return normAxis(n.getAxis(), rankOf(result)) <= 0 ? reduces : "";
  }
  if (auto n = dyn_cast<train::RmsNormOp>(op)) {
    if (!isB(n.getInput()) || isB(n.getScale()))
      return unknown;
    return normAxis(n.getAxis(), rankOf(result)) <= 0 ? reduces : "";
  }
  if (isa<train::RopeOp>(op))
    return isB(op->getOperand(0)) ? broadcastOk(op->getOperands(), result)
                                  : unknown;
  if (auto a = dyn_cast<train::AttentionOp>(op)) {
    // Per batch element: Q, K and V all carry the batch at dim 0.
    for (Value v : {a.getQuery(), a.getKey(), a.getValue()})
      if (!isB(v) || !keepsDim0(v, result))
        return isB(v) ? moves : unknown;
    return "";
  }
  if (isa<train::ReduceSumOp, train::ReduceMeanOp, train::ReduceMaxOp>(op)) {
    auto axes = op->getAttrOfType<DenseI64ArrayAttr>("axes");
    int64_t rank = rankOf(op->getOperand(0));
    if (!axes || axes.empty())
      return reduces; // every axis
    for (int64_t a : axes.asArrayRef())
      if (normAxis(a, rank) == 0)
        return reduces;
    // Axes after 0 leave dim 0 in front (kept or dropped alike).
    return dim0(result) == dim0(op->getOperand(0)) ? "" : moves;
  }
  if (auto t = dyn_cast<train::TransposeOp>(op))
    return !t.getPerm().empty() && t.getPerm()[0] == 0 ? "" : moves;
  if (auto r = dyn_cast<train::ReshapeOp>(op)) {
    // Reshape keeps row-major order, and batch element b is the b-th
    // contiguous run of numel/B elements of the input. So rows stay grouped
    // by batch element exactly when the result's dim 0 is a multiple of B:
    // element b is result rows [b·k, (b+1)·k), k = dim0/B (a flatten of
    // leading dims [B, S, ..] -> [B·S, ..], or the unflatten back).
    int64_t d = dim0(result);
    return !ShapedType::isDynamic(d) && d > 0 && d % batch == 0 ? "" : moves;
  }
  if (auto s = dyn_cast<train::SliceOp>(op)) {
    if (s.getStarts().empty() || s.getStarts()[0] != 0 ||
        s.getSteps()[0] != 1 || dim0(result) != dim0(s.getInput()))
      return slices;
    return "";
  }
  if (auto c = dyn_cast<train::ConcatOp>(op)) {
    if (normAxis(c.getAxis(), rankOf(result)) == 0)
      return "concatenates along the batch dimension";
    for (Value v : c.getInputs())
      if (!isB(v) || !keepsDim0(v, result))
        return isB(v) ? moves : unknown;
    return "";
  }
  if (auto g = dyn_cast<train::GatherOp>(op)) {
    // An embedding lookup: rows of batched indices pick rows of the table.
    if (isB(g.getData()))
      return normAxis(g.getAxis(), rankOf(g.getData())) == 0 ||
                     isB(g.getIndices())
                 ? slices
                 : (dim0(result) == dim0(g.getData()) ? "" : moves);
    return normAxis(g.getAxis(), rankOf(g.getData())) == 0 &&
                   rankOf(g.getIndices()) >= 1
               ? ""
               : moves;
  }
  if (auto l = dyn_cast<train::LinearOp>(op)) {
    if (isB(l.getWeight()) || (l.getBias() && isB(l.getBias())))
      return contracts;
    return rankOf(l.getInput()) >= 2 && keepsDim0(l.getInput(), result)
               ? ""
               : contracts;
  }
  if (auto m = dyn_cast<train::MatMulOp>(op)) {
    // lhs [.., M, K] · rhs [.., K, N]: a batched lhs keeps its batch as dim
    // 0 of the result when it is the M rows (rank 2) or a leading batch
    // dimension (rank >= 3); a batched rhs only as a leading batch dimension
    // (rank >= 3) of a batched matmul. Rank 1 lhs or rank 2 rhs: the batch
    // is the contracted K (or N, moved).
    Value lhs = m.getLhs(), rhs = m.getRhs();
    if ((isB(lhs) && rankOf(lhs) < 2) || (isB(rhs) && rankOf(rhs) < 3))
      return contracts;
    for (Value v : {lhs, rhs}) {
      if (isB(v)) {
        if (!keepsDim0(v, result))
          return moves;
      } else if (rankOf(v) > 2 && rankOf(v) == rankOf(result) && dim0(v) != 1) {
        return "combines the batch with a tensor not split with it (" +
               unknown + ")";
      }
    }
    return "";
  }
  if (auto g = dyn_cast<train::GemmOp>(op)) {
    if (isB(g.getB()))
      return contracts;
    if (!isB(g.getA()))
      return unknown;
    if (g.getTransA())
      return contracts;
    if (g.getC() && !isB(g.getC()) && rankOf(g.getC()) == 2 &&
        dim0(g.getC()) != 1)
      return unknown;
    if (g.getC() && isB(g.getC()) && !keepsDim0(g.getC(), result))
      return moves;
    return dim0(result) == dim0(g.getA()) ? "" : moves;
  }
  return unknown;
}

/// Checks, before any rewriting, that every op of the `fwd` tasks reading a
/// value reachable from the batch inputs keeps batch rows independent (see
/// whyNotRowwise); the `bwd` tasks mirror the forward.
LogicalResult checkRowwise(IterationOp iteration, int64_t m) {
  Block &block = iteration.getBlock();
  int64_t batch = ShapedType::kDynamic;
  for (BlockArgument arg : block.getArguments())
    batch =
        ShapedType::isDynamic(batch) ? dim0(arg) : std::min(batch, dim0(arg));
  llvm::DenseMap<Value, Rows> rows;
  for (auto [i, arg] : llvm::enumerate(block.getArguments())) {
    if (dim0(arg) % batch != 0)
      return iteration.emitError("sched-microbatch: cannot split the batch "
                                 "into ")
             << m << " micro-batches: input " << inputName(iteration, i)
             << " of type " << arg.getType()
             << " has a leading dimension that is not a multiple of the "
                "batch "
             << batch << "; use --microbatches 1";
    rows[arg] = Rows::batched;
  }
  for (TaskOp task : block.getOps<TaskOp>()) {
    if (task.getPhase() != Phase::fwd)
      continue;
    for (auto [operand, arg] :
         llvm::zip(task.getInputs(), task.getBlock().getArguments())) {
      auto it = rows.find(operand);
      if (it != rows.end())
        rows[arg] = it->second;
    }
    for (Operation &op : task.getBlock().without_terminator()) {
      if (llvm::none_of(op.getOperands(),
                        [&](Value v) { return rows.count(v); }))
        continue;
      if (auto xent = dyn_cast<train::SoftmaxCrossEntropyLossOp>(op)) {
        auto isB = [&](Value v) {
          auto it = rows.find(v);
          return it != rows.end() && it->second == Rows::batched;
        };
        if (xent.getReduction() == "mean" && isB(xent.getLogits()) &&
            isB(xent.getLabels()) &&
            dim0(xent.getLogits()) == dim0(xent.getLabels())) {
          rows[xent.getResult()] = Rows::meanLoss;
          continue;
        }
        return op.emitError("sched-microbatch: cannot split the batch into ")
               << m << " micro-batches: '" << op.getName()
               << "' reduces the batch dimension (only reduction = \"mean\" "
                  "over logits and labels that both carry the batch at dim 0 "
                  "is supported); use --microbatches 1";
      }
      std::string why = whyNotRowwise(&op, rows, batch);
      if (!why.empty())
        return op.emitError("sched-microbatch: cannot split the batch into ")
               << m << " micro-batches: '" << op.getName() << "' " << why
               << "; use --microbatches 1";
      for (Value r : op.getResults())
        rows[r] = Rows::batched;
    }
    auto yield = cast<YieldOp>(task.getBlock().getTerminator());
    for (auto [res, y] : llvm::zip(task.getResults(), yield.getValues())) {
      auto it = rows.find(y);
      if (it != rows.end())
        rows[res] = it->second;
    }
  }
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
  if (failed(checkRowwise(iteration, m)))
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
