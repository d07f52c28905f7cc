//===- Order.cpp - order the tasks of an iteration ------------------------===//
//
// Horizontal (per micro-batch: forward through every layer, then backward)
// or snake (per layer: every micro-batch, direction alternating). The new
// order is checked against the dataflow and the parameter updates before
// anything moves. The rules are in Passes.td.
//
//===----------------------------------------------------------------------===//

#include "spillway/Dialect/Sched/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "spillway/Dialect/Sched/IR/SchedOps.h"
#include "spillway/Dialect/Train/IR/TrainOps.h"
#include "spillway/Schedule/VisitSequence.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/StringMap.h"
#include <functional>
#include <map>

namespace spillway::sched {
#define GEN_PASS_DEF_SCHEDORDERPASS
#include "spillway/Dialect/Sched/Transforms/Passes.h.inc"
} // namespace spillway::sched

using namespace mlir;
using namespace spillway;
using namespace spillway::sched;

namespace {

struct SchedOrderPass : sched::impl::SchedOrderPassBase<SchedOrderPass> {
  using SchedOrderPassBase::SchedOrderPassBase;
  void runOnOperation() override;
  LogicalResult reorder(IterationOp iteration);
};

int64_t mbOf(TaskOp t) { return t.getMb() ? static_cast<int64_t>(*t.getMb()) : 0; }

std::string describe(TaskOp t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << stringifyPhase(t.getPhase()) << " layer(" << t.getLayer() << ")";
  if (t.getMb())
    os << " mb(" << *t.getMb() << ")";
  return s;
}

/// The tasks in the chosen order.
SmallVector<TaskOp> chooseOrder(ArrayRef<TaskOp> tasks, bool snake,
                                int64_t count) {
  SmallVector<int64_t> fwdLayers, bwdLayers, optLayers;
  std::map<std::tuple<int, int64_t, int64_t>, SmallVector<TaskOp>> byKey;
  for (TaskOp t : tasks) {
    int phase = static_cast<int>(t.getPhase());
    byKey[{phase, t.getLayer(), t.getPhase() == Phase::opt ? 0 : mbOf(t)}]
        .push_back(t);
    auto &layers = t.getPhase() == Phase::fwd   ? fwdLayers
                   : t.getPhase() == Phase::bwd ? bwdLayers
                                                : optLayers;
    if (!llvm::is_contained(layers, (int64_t)t.getLayer()))
      layers.push_back(t.getLayer());
  }
  llvm::sort(fwdLayers);
  llvm::sort(bwdLayers, std::greater<int64_t>());
  llvm::sort(optLayers);

  SmallVector<TaskOp> order;
  auto emit = [&](Phase p, int64_t layer, int64_t mb) {
    auto it = byKey.find({static_cast<int>(p), layer, mb});
    if (it != byKey.end())
      order.append(it->second.begin(), it->second.end());
  };
  for (const schedule::Visit &v : schedule::visitSequence(
           std::vector<int64_t>(fwdLayers.begin(), fwdLayers.end()),
           std::vector<int64_t>(bwdLayers.begin(), bwdLayers.end()),
           snake ? schedule::Order::Snake : schedule::Order::Horizontal,
           count))
    emit(v.backward ? Phase::bwd : Phase::fwd, v.layer, v.microbatch);
  for (int64_t layer : optLayers)
    emit(Phase::opt, layer, 0);
  return order;
}

} // namespace

void SchedOrderPass::runOnOperation() {
  if (order != "horizontal" && order != "snake") {
    getOperation().emitError("sched-order: order must be horizontal or "
                             "snake, got '")
        << order << "'";
    return signalPassFailure();
  }
  SmallVector<IterationOp> iterations;
  getOperation().walk([&](IterationOp it) { iterations.push_back(it); });
  for (IterationOp it : iterations)
    if (failed(reorder(it)))
      return signalPassFailure();
}

LogicalResult SchedOrderPass::reorder(IterationOp iteration) {
  Block &block = iteration.getBlock();
  SmallVector<TaskOp> tasks(block.getOps<TaskOp>());
  // A deferred update belongs before its layer's first read; reordering
  // would move it among the updates at the end.
  for (TaskOp t : tasks)
    if (t.getDeferred())
      return t.emitError("sched-order: the iteration has deferred updates: "
                         "run sched-order before sched-overlap-optimizer");
  SmallVector<TaskOp> sequence =
      chooseOrder(tasks, order == "snake", iteration.getMicrobatches());
  assert(sequence.size() == tasks.size() && "every task placed once");

  // The task whose result (possibly through slices and accumulates) `v` is.
  llvm::DenseMap<Operation *, size_t> position;
  for (auto [i, t] : llvm::enumerate(sequence))
    position[t] = i;

  // Dataflow: a task after every task it reads.
  for (TaskOp t : sequence)
    for (Value v : t.getInputs()) {
      SmallVector<TaskOp> from;
      producerTasks(v, from);
      for (TaskOp p : from)
        if (position[p] > position[t])
          return t.emitError("sched-order: the ")
                 << order << " order would run " << describe(t)
                 << " before " << describe(p) << ", whose result it reads";
    }
  // Parameters: every read before the update.
  llvm::StringMap<TaskOp> updatedBy;
  for (TaskOp t : sequence) {
    WalkResult r = t.walk([&](Operation *op) {
      if (auto read = dyn_cast<train::ParamValueOp>(op)) {
        auto it = updatedBy.find(read.getParam());
        if (it != updatedBy.end()) {
          t.emitError("sched-order: the ")
              << order << " order would run " << describe(t)
              << ", which reads @" << read.getParam() << ", after "
              << describe(it->second) << ", which updates it";
          return WalkResult::interrupt();
        }
      }
      return WalkResult::advance();
    });
    if (r.wasInterrupted())
      return failure();
    t.walk([&](Operation *update) {
      if (train::isOptimizerUpdate(update))
        updatedBy.try_emplace(train::getUpdatedParam(update), t);
    });
  }

  // Move: other ops just before their first user, then the task.
  Operation *end = block.getTerminator();
  llvm::DenseSet<Operation *> placed;
  std::function<void(Operation *)> place = [&](Operation *op) {
    if (!placed.insert(op).second)
      return;
    for (Value v : op->getOperands())
      if (Operation *def = v.getDefiningOp();
          def && def->getBlock() == &block && !isa<TaskOp>(def))
        place(def);
    op->moveBefore(end);
  };
  SmallVector<Operation *> others;
  for (Operation &op : block.without_terminator())
    if (!isa<TaskOp>(op))
      others.push_back(&op);
  for (TaskOp t : sequence)
    place(t);
  for (Operation *op : others)
    place(op);

  // Accumulate in the order the micro-batches now arrive. The key is the
  // defining op's position in the block; values not defined by an op of the
  // block (the iteration's block arguments, values from above) are available
  // from the start and keep their listed order ahead of the others, so the
  // comparison is a strict weak ordering whatever the operands are.
  llvm::DenseMap<Operation *, int64_t> arrivalIndex;
  int64_t next = 0;
  for (Operation &op : block)
    arrivalIndex[&op] = ++next;
  auto arrival = [&](Value v) -> int64_t {
    if (Operation *def = v.getDefiningOp())
      if (auto it = arrivalIndex.find(def); it != arrivalIndex.end())
        return it->second;
    return 0;
  };
  for (auto acc : block.getOps<AccumulateOp>()) {
    SmallVector<Value> values(acc.getValues());
    llvm::stable_sort(values, [&](Value a, Value b) {
      return arrival(a) < arrival(b);
    });
    acc.getValuesMutable().assign(values);
  }
  iteration.setOrder(StringRef(order));

  if (remarks) {
    // Consecutive fwd/bwd tasks of one layer share its parameters' load.
    std::vector<int64_t> visited;
    llvm::SmallSet<int64_t, 16> layers;
    for (TaskOp t : sequence)
      if (t.getPhase() != Phase::opt) {
        visited.push_back(t.getLayer());
        layers.insert(t.getLayer());
      }
    size_t loads = schedule::parameterLoads(visited).size();
    iteration.emitRemark() << order << " order of " << layers.size()
                           << " layers x " << iteration.getMicrobatches()
                           << " micro-batches: " << loads << " layer loads";
  }
  return success();
}
