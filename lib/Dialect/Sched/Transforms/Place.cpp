//===- Place.cpp - the tier of every tensor class --------------------------===//
//
// Turns a placement spec (from the cost model's choice or --place) into the
// iteration's `placement` attribute, refusing what the executor cannot run.
// The rules are in Passes.td.
//
//===----------------------------------------------------------------------===//

#include "spillway/Dialect/Sched/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "spillway/Dialect/Sched/IR/SchedOps.h"
#include "spillway/Dialect/Train/IR/TrainDialect.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"

namespace spillway::sched {
#define GEN_PASS_DEF_SCHEDPLACEPASS
#include "spillway/Dialect/Sched/Transforms/Passes.h.inc"
} // namespace spillway::sched

using namespace mlir;
using namespace spillway;
using namespace spillway::sched;

namespace {

constexpr llvm::StringLiteral kClasses[] = {"params", "optimizer", "gradients",
                                            "activations"};

/// Activations off the GPU move the fwd task results that bwd tasks read
/// (sched-insert-transfers). After sched-recompute those are the kept
/// values, which non-bwd tasks read too; a result only bwd tasks read is a
/// forward intermediate kept for the backward, which the plan (and the cost
/// model's activation bytes) does not cover.
LogicalResult checkActivationsMovable(IterationOp it, StringRef tier) {
  for (TaskOp task : it.getBlock().getOps<TaskOp>()) {
    if (task.getPhase() != Phase::fwd)
      continue;
    for (OpResult r : task->getResults())
      if (!r.use_empty() && llvm::all_of(r.getUsers(), [](Operation *u) {
            auto t = dyn_cast<TaskOp>(u);
            return t && t.getPhase() == Phase::bwd;
          }))
        return task.emitOpError("sched-place: activations=")
               << tier << " needs sched-recompute first: result #"
               << r.getResultNumber()
               << " is a forward intermediate only the backward reads; run "
                  "sched-recompute (spillwayc --recompute on, the default) "
                  "or place activations=gpu";
  }
  return success();
}

struct SchedPlacePass : sched::impl::SchedPlacePassBase<SchedPlacePass> {
  using SchedPlacePassBase::SchedPlacePassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto precision = module->getAttrOfType<StringAttr>(train::kPrecisionAttrName);
    const bool bf16Mixed = precision && precision.getValue() == "bf16-mixed";
    llvm::StringMap<std::string> tiers;
    for (llvm::StringLiteral c : kClasses)
      tiers[c] = "gpu";
    llvm::StringMap<bool> given;
    SmallVector<StringRef> items;
    StringRef(placement).split(items, ',', -1, /*KeepEmpty=*/false);
    for (StringRef item : items) {
      auto [cls, tier] = item.trim().split('=');
      cls = cls.trim();
      tier = tier.trim();
      if (tier.empty()) {
        module.emitError("sched-place: '")
            << item << "' is not CLASS=TIER (e.g. params=ssd)";
        return signalPassFailure();
      }
      if (cls == "master" && !bf16Mixed) {
        module.emitError("sched-place: 'master': there are no separate "
                         "master weights to place; the f32 parameters are "
                         "their own master weights, so place them with "
                         "params=TIER (a model compiled with --precision "
                         "bf16-mixed has f32 master weights next to its "
                         "bf16 parameters)");
        return signalPassFailure();
      }
      if (!tiers.count(cls) && cls != "master") {
        module.emitError("sched-place: unknown tensor class '")
            << cls
            << "' (classes: params, optimizer, gradients, activations, and "
               "master under bf16-mixed)";
        return signalPassFailure();
      }
      if (!symbolizeTier(tier)) {
        module.emitError("sched-place: unknown tier '")
            << tier << "' for " << cls << " (tiers: gpu, host, ssd)";
        return signalPassFailure();
      }
      if (given.lookup(cls)) {
        module.emitError("sched-place: class '") << cls << "' is placed twice";
        return signalPassFailure();
      }
      given[cls] = true;
      tiers[cls] = tier.str();
    }
    // The master weights live with the optimizer state unless placed.
    if (bf16Mixed && !given.lookup("master"))
      tiers["master"] = tiers["optimizer"];
    if (bf16Mixed &&
        (tiers["master"] == "gpu") != (tiers["optimizer"] == "gpu")) {
      module.emitError("sched-place: master=")
          << tiers["master"] << " with optimizer=" << tiers["optimizer"]
          << ": the update reads and writes the master weights where it "
             "runs, so they are on the GPU when the optimizer state is "
             "(GPU optimizer) and off it when it is not (CPU optimizer)";
      return signalPassFailure();
    }
    Builder b(&getContext());
    auto tierOf = [&](StringRef c) { return *symbolizeTier(tiers[c]); };
    auto placed =
        PlacementAttr::get(&getContext(), tierOf("params"),
                           tierOf("optimizer"), tierOf("gradients"),
                           tierOf("activations"));
    StringRef side = placed.getOptimizer() == Tier::gpu ? "gpu" : "cpu";
    bool any = false;
    WalkResult r = module.walk([&](IterationOp it) {
      any = true;
      if (!it.getOrder()) {
        it.emitOpError("sched-place: order the tasks first (sched-order)");
        return WalkResult::interrupt();
      }
      for (Operation &op : it.getBlock())
        if (isa<MoveOp, AllocOp, AwaitOp, DropOp, BindOp, StageGradsOp>(op)) {
          op.emitOpError("sched-place: the iteration already has transfers");
          return WalkResult::interrupt();
        }
      if (tiers["activations"] != "gpu" &&
          failed(checkActivationsMovable(it, tiers["activations"])))
        return WalkResult::interrupt();
      it.setPlacementAttr(placed);
      it.setOptimizerOnAttr(b.getStringAttr(side));
      if (bf16Mixed)
        it.setMasterAttr(b.getStringAttr(tiers["master"]));
      return WalkResult::advance();
    });
    if (r.wasInterrupted())
      return signalPassFailure();
    if (!any) {
      module.emitError("sched-place: no sched.iteration to place (run "
                       "convert-train-to-sched first)");
      return signalPassFailure();
    }
  }
};

} // namespace
