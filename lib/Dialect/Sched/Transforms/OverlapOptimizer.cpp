//===- OverlapOptimizer.cpp - updates next to their gradients and forward -===//
//
// Moves each layer's opt task to just after its gradient is complete and
// defers the update of a fraction of its elements to just before the
// layer's next forward, where its parameters are loaded anyway. The
// deferred part is applied with the gradient, step and hyper-parameters of
// the iteration that deferred it, so the weights are those of ordinary
// training. The rules are in Passes.td.
//
//===----------------------------------------------------------------------===//

#include "spillway/Dialect/Sched/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "spillway/Dialect/Sched/IR/SchedOps.h"
#include "spillway/Dialect/Train/IR/LayerTable.h"
#include "spillway/Dialect/Train/IR/TrainOps.h"
#include "spillway/Schedule/CostModel.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

namespace spillway::sched {
#define GEN_PASS_DEF_SCHEDOVERLAPOPTIMIZERPASS
#include "spillway/Dialect/Sched/Transforms/Passes.h.inc"
} // namespace spillway::sched

using namespace mlir;
using namespace spillway;
using namespace spillway::sched;

namespace {

struct SchedOverlapOptimizerPass
    : sched::impl::SchedOverlapOptimizerPassBase<SchedOverlapOptimizerPass> {
  using SchedOverlapOptimizerPassBase::SchedOverlapOptimizerPassBase;
  void runOnOperation() override;
  LogicalResult overlap(IterationOp iteration, const train::LayerTable &layers);
  /// `granule`, doubled under bf16-mixed or bf16 optimizer state
  /// (runOnOperation).
  int64_t elementGranule = 0;
};

/// Builds the `train.adamw_defer` of `update`'s parameter over elements
/// [begin, end) with its gradient, clip coefficient and hyper-parameters.
void createDeferredUpdate(OpBuilder &b, train::AdamWOp update, int64_t begin,
                          int64_t end) {
  train::AdamWDeferOp::create(b, update.getLoc(), update.getParamAttr(),
                         b.getI64IntegerAttr(begin), b.getI64IntegerAttr(end),
                         update.getGrad(), update.getClip(), update.getLrAttr(),
                         update.getBeta1Attr(), update.getBeta2Attr(),
                         update.getEpsAttr(), update.getWeightDecayAttr());
}

} // namespace

void SchedOverlapOptimizerPass::runOnOperation() {
  if (granule < 1) {
    getOperation().emitError("sched-overlap-optimizer: granule must be at "
                             "least 1 element, got ")
        << int64_t(granule);
    return signalPassFailure();
  }
  if (!(fraction >= 0.0 && fraction <= 1.0)) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", double(fraction));
    getOperation().emitError("sched-overlap-optimizer: fraction must lie in "
                             "[0, 1], got ")
        << text;
    return signalPassFailure();
  }
  SmallVector<IterationOp> iterations;
  // bf16-mixed (an offload plan's params blocks hold 2 bytes per element)
  // or bf16 optimizer state (its optimizer blocks hold 2 bytes per moment
  // element): the same 256 bytes take twice the elements. Both at once
  // still double it once: no block holds less than 2 bytes per element.
  auto precision =
      getOperation()->getAttrOfType<StringAttr>(train::kPrecisionAttrName);
  const bool twoByteBlocks =
      (precision && precision.getValue() == "bf16-mixed") ||
      train::optimizerStateElementBytes(getOperation()) == 2;
  elementGranule = twoByteBlocks ? 2 * int64_t(granule) : int64_t(granule);
  getOperation().walk([&](IterationOp it) { iterations.push_back(it); });
  for (IterationOp it : iterations) {
    auto module = it->getParentOfType<ModuleOp>();
    auto layers = module ? train::LayerTable::read(module)
                         : FailureOr<std::optional<train::LayerTable>>();
    if (failed(layers))
      return signalPassFailure();
    if (!*layers) {
      it.emitError("sched-overlap-optimizer: the module has no train.layers: "
                   "run train-partition-layers first");
      return signalPassFailure();
    }
    if (failed(overlap(it, **layers)))
      return signalPassFailure();
  }
}

LogicalResult
SchedOverlapOptimizerPass::overlap(IterationOp iteration,
                                   const train::LayerTable &layers) {
  Block &block = iteration.getBlock();
  SmallVector<TaskOp> tasks(block.getOps<TaskOp>());
  for (TaskOp t : tasks) {
    if (t.getDeferred())
      return t.emitError("sched-overlap-optimizer: the iteration already has "
                         "deferred updates (the pass ran before)");
    if (t.getLayer() >= layers.size())
      return t.emitError("sched-overlap-optimizer: layer ")
             << t.getLayer() << " is not in train.layers (" << layers.size()
             << " layers)";
  }

  // Where each task runs now, which parameters each reads, and each layer's
  // last bwd and first fwd task.
  llvm::DenseMap<Operation *, size_t> position;
  for (auto [i, t] : llvm::enumerate(tasks))
    position[t] = i;
  llvm::StringMap<size_t> lastRead;
  llvm::StringMap<size_t> firstRead;
  llvm::DenseMap<int64_t, size_t> lastBwd, firstFwd;
  for (auto [i, t] : llvm::enumerate(tasks)) {
    if (t.getPhase() == Phase::opt)
      continue;
    t.walk([&](train::ParamValueOp read) {
      lastRead[read.getParam()] = i;
      firstRead.try_emplace(read.getParam(), i);
    });
    if (t.getPhase() == Phase::bwd)
      lastBwd[t.getLayer()] = i;
    else
      firstFwd.try_emplace(t.getLayer(), i);
  }

  OpBuilder b(&getContext());
  // The last opt task placed after each task, so that several keep layer
  // order.
  llvm::DenseMap<Operation *, Operation *> lastPlacedAfter;
  SmallVector<TaskOp> optTasks;
  for (TaskOp t : tasks)
    if (t.getPhase() == Phase::opt)
      optTasks.push_back(t);
  llvm::sort(optTasks, [](TaskOp a, TaskOp c) {
    return a.getLayer() < c.getLayer();
  });

  for (TaskOp opt : optTasks) {
    int64_t layer = opt.getLayer();
    ArrayRef<FlatSymbolRefAttr> owned = layers[layer].getParams();
    SmallVector<train::AdamWOp> updates;
    llvm::StringSet<> updated;
    WalkResult walk = opt.walk([&](Operation *op) {
      if (auto u = dyn_cast<train::AdamWOp>(op)) {
        if (!llvm::any_of(owned, [&](FlatSymbolRefAttr p) {
              return p.getValue() == u.getParam();
            })) {
          u.emitError("sched-overlap-optimizer: the opt task of layer ")
              << layer << " updates @" << u.getParam()
              << ", which train.layers[" << layer << "] does not list";
          return WalkResult::interrupt();
        }
        if (u.getBeginAttr()) {
          u.emitError("sched-overlap-optimizer: the update of @")
              << u.getParam() << " is already split into element ranges";
          return WalkResult::interrupt();
        }
        updates.push_back(u);
        updated.insert(u.getParam());
      } else if (auto f = dyn_cast<train::FoamOp>(op)) {
        // Moved whole, never split: FOAM's state is per block of a row.
        if (fraction > 0.0) {
          f.emitError("sched-overlap-optimizer: cannot defer part of the "
                      "FOAM update of @")
              << f.getParam()
              << ": only AdamW updates split by element (use fraction 0)";
          return WalkResult::interrupt();
        }
        updated.insert(f.getParam());
      } else if (fraction > 0.0 && !isa<YieldOp>(op) && op != opt &&
                 !isMemoryEffectFree(op)) {
        op->emitError("sched-overlap-optimizer: cannot defer part of ")
            << op->getName()
            << ": only train.adamw updates split by element (use fraction 0)";
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();

    // 1. The earliest place the update may run: after its gradient is
    // complete and every read of what it updates.
    std::optional<size_t> after;
    auto atLeast = [&](size_t i) { after = after ? std::max(*after, i) : i; };
    if (auto it = lastBwd.find(layer); it != lastBwd.end())
      atLeast(it->second);
    for (int64_t from : layers.gradFrom(layer))
      if (auto it = lastBwd.find(from); it != lastBwd.end())
        atLeast(it->second);
    for (auto &name : updated)
      if (auto it = lastRead.find(name.getKey()); it != lastRead.end())
        atLeast(it->second);
    for (Value v : opt.getInputs()) {
      SmallVector<TaskOp> from;
      producerTasks(v, from);
      for (TaskOp p : from)
        atLeast(position[p]);
    }
    if (after) {
      Operation *anchor = tasks[*after];
      Operation *prev = anchor;
      if (auto it = lastPlacedAfter.find(anchor); it != lastPlacedAfter.end())
        prev = it->second;
      opt->moveAfter(prev);
      lastPlacedAfter[anchor] = opt;
      // The accumulates (and slices) it reads come along, just before it;
      // their own operands are all before the anchor.
      std::function<void(Operation *)> pull = [&](Operation *op) {
        for (Value v : op->getOperands())
          if (Operation *def = v.getDefiningOp();
              def && def->getBlock() == &block && !isa<TaskOp>(def) &&
              opt->isBeforeInBlock(def)) {
            def->moveBefore(opt);
            pull(def);
          }
      };
      pull(opt);
    }

    // 2. The deferred fraction: the first D elements of the layer's
    // parameters, concatenated in train.layers order.
    if (fraction == 0.0 || updates.empty())
      continue;
    llvm::StringMap<train::AdamWOp> byParam;
    for (train::AdamWOp u : updates)
      byParam[u.getParam()] = u;
    int64_t total = 0;
    for (FlatSymbolRefAttr p : owned)
      if (auto it = byParam.find(p.getValue()); it != byParam.end())
        total += it->second.getGrad().getType().getNumElements();
    // The cost model counts the deferred bytes with the same function.
    const int64_t deferred =
        schedule::deferredElements(fraction, total, elementGranule);
    if (deferred == 0)
      continue;
    SmallVector<std::pair<StringRef, int64_t>> ranges; // param, end
    int64_t offset = 0;
    for (FlatSymbolRefAttr sym : owned) {
      StringRef p = sym.getValue();
      auto it = byParam.find(p);
      if (it == byParam.end())
        continue;
      train::AdamWOp u = it->second;
      int64_t n = u.getGrad().getType().getNumElements();
      int64_t d = std::clamp<int64_t>(deferred - offset, 0, n);
      offset += n;
      if (d == 0)
        continue;
      ranges.push_back({p, d});
      b.setInsertionPoint(u);
      createDeferredUpdate(b, u, 0, d);
      if (d < n) {
        u.setBeginAttr(b.getI64IntegerAttr(d));
        u.setEndAttr(b.getI64IntegerAttr(n));
      } else {
        u.erase();
      }
    }

    // 3. Its application, before the first read of those parameters: the
    // layer's first fwd task unless a shared parameter is read earlier.
    std::optional<size_t> before;
    auto atMost = [&](size_t i) { before = before ? std::min(*before, i) : i; };
    if (auto it = firstFwd.find(layer); it != firstFwd.end())
      atMost(it->second);
    for (auto [p, d] : ranges)
      if (auto it = firstRead.find(p); it != firstRead.end())
        atMost(it->second);
    // Nothing reads them: the start of the iteration, still before the
    // opt task defers them again.
    Operation *insertBefore =
        before ? tasks[*before].getOperation() : &block.front();
    b.setInsertionPoint(insertBefore);
    auto apply = TaskOp::create(b, opt.getLoc(), TypeRange{}, ValueRange{},
                                Phase::opt, layer, std::nullopt);
    apply.setDeferred(true);
    b.setInsertionPointToStart(&apply.getBlock());
    for (auto [p, d] : ranges)
      train::AdamWApplyPendingOp::create(
          b, opt.getLoc(), FlatSymbolRefAttr::get(&getContext(), p),
          b.getI64IntegerAttr(0), b.getI64IntegerAttr(d));
    YieldOp::create(b, opt.getLoc());
  }
  return success();
}
