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
#include "spillway/Dialect/Train/IR/LayerTable.h"
#include "spillway/Dialect/Train/IR/TrainDialect.h"
#include "spillway/Dialect/Train/IR/TrainOps.h"
#include "spillway/Schedule/PlacementSpec.h"
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

/// Activations off the GPU move the fwd task results that bwd tasks read
/// (sched-insert-transfers). After sched-recompute those are the kept
/// values, which non-bwd tasks read too; a result only bwd tasks read is a
/// forward intermediate kept for the backward, which the plan (and the cost
/// model's activation bytes) does not cover.
/// `tierOf` gives the home of each layer's activations; `split`: they are
/// split by layer.
LogicalResult checkActivationsMovable(
    IterationOp it, function_ref<schedule::Tier(int64_t)> tierOf, bool split) {
  for (TaskOp task : it.getBlock().getOps<TaskOp>()) {
    const schedule::Tier tier = tierOf(int64_t(task.getLayer()));
    if (task.getPhase() != Phase::fwd || tier == schedule::Tier::GPU)
      continue;
    for (OpResult r : task->getResults())
      if (!r.use_empty() && llvm::all_of(r.getUsers(), [](Operation *u) {
            auto t = dyn_cast<TaskOp>(u);
            return t && t.getPhase() == Phase::bwd;
          })) {
        // As --place names them: the class, or this layer's range of it.
        const std::string what =
            split ? "activations[" + std::to_string(task.getLayer()) + ":" +
                        std::to_string(task.getLayer() + 1) + "]"
                  : std::string("activations");
        return task.emitOpError("sched-place: ")
               << what << "=" << schedule::tierName(tier)
               << " needs sched-recompute first: result #"
               << r.getResultNumber()
               << " is a forward intermediate only the backward reads; run "
                  "sched-recompute (spillwayc --recompute on, the default) "
                  "or place "
               << what << "=gpu";
      }
  }
  return success();
}

struct SchedPlacePass : sched::impl::SchedPlacePassBase<SchedPlacePass> {
  using SchedPlacePassBase::SchedPlacePassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto precision = module->getAttrOfType<StringAttr>(train::kPrecisionAttrName);
    const bool bf16Mixed = precision && precision.getValue() == "bf16-mixed";
    using schedule::TensorClass;
    std::string error;
    SmallVector<StringRef> items;
    StringRef(placement).split(items, ',', -1, /*KeepEmpty=*/false);
    std::vector<std::string> list;
    for (StringRef item : items)
      list.push_back(item.str());
    auto spec = schedule::parsePlacement(list, error);
    if (!spec) {
      module.emitError("sched-place: ") << error;
      return signalPassFailure();
    }
    const schedule::ClassSpec &masterSpec = (*spec)[TensorClass::Master];
    if (masterSpec.given() && !bf16Mixed) {
      module.emitError("sched-place: 'master': there are no separate "
                       "master weights to place; the f32 parameters are "
                       "their own master weights, so place them with "
                       "params=TIER (a model compiled with --precision "
                       "bf16-mixed has f32 master weights next to its "
                       "bf16 parameters)");
      return signalPassFailure();
    }
    // Ranges and fractions resolve against train.layers; a fraction weighs
    // each layer by its parameters' bytes, which every class's block of the
    // layer is proportional to (AdamW's moments, gradients, masters).
    std::vector<uint64_t> layerBytes;
    std::vector<int64_t> layerElements;
    bool byLayer =
        llvm::any_of(spec->classes,
                     [](const schedule::ClassSpec &c) { return c.byLayer(); });
    if (byLayer) {
      auto layers = train::LayerTable::read(module);
      if (failed(layers))
        return signalPassFailure();
      if (!*layers) {
        module.emitError("sched-place: a placement by layer needs the "
                         "module's train.layers (run train-partition-layers)");
        return signalPassFailure();
      }
      for (train::LayerAttr entry : **layers) {
        uint64_t n = 0;
        int64_t e = 0;
        for (FlatSymbolRefAttr s : entry.getParams())
          if (auto p = module.lookupSymbol<train::ParamOp>(s.getAttr())) {
            n += uint64_t(p.getNumBytes());
            e += p.getType().getNumElements();
          }
        layerBytes.push_back(n);
        layerElements.push_back(e);
      }
    }
    // Per class: its tier, and per layer when the spec splits it. Classes
    // it omits stay on the GPU; the master weights live with the optimizer
    // state (layer by layer) unless placed.
    std::array<schedule::Tier, schedule::kNumTensorClasses> whole;
    std::array<std::vector<schedule::Tier>, schedule::kNumTensorClasses> split;
    // Blocks cut between host and SSD: per class, (layer, elements on host),
    // on a multiple of the cut granule (the cost model rounds alike).
    std::array<SmallVector<int64_t>, schedule::kNumTensorClasses> cuts;
    const int64_t granule = schedule::cutGranule(
        bf16Mixed || train::optimizerStateElementBytes(module) == 2);
    llvm::DenseMap<int64_t, std::pair<int64_t, std::string>> cutAt;
    auto roundCut =
        [&](TensorClass c,
            const schedule::ClassSpec::Cut &cut) -> std::optional<int64_t> {
      const int64_t n = layerElements[cut.layer];
      const int64_t e = schedule::cutElements(cut.host(), n, granule);
      if (e <= 0 || e >= n) {
        module.emitError("sched-place: '")
            << cut.text << "': layer " << cut.layer << " has " << n
            << " elements and a cut falls on a multiple of " << granule
            << ", so its host part would hold "
            << (e <= 0 ? "none" : "all of them")
            << "; place the layer whole (e.g. " << schedule::tensorClassName(c)
            << "[" << cut.layer << ":" << cut.layer + 1
            << "]=" << (e <= 0 ? "ssd" : "host") << ")";
        return std::nullopt;
      }
      auto [it, fresh] = cutAt.try_emplace(cut.layer, e, cut.text);
      if (!fresh && it->second.first != e) {
        module.emitError("sched-place: '")
            << cut.text << "' cuts layer " << cut.layer << " at element " << e
            << " but '" << it->second.second << "' at " << it->second.first
            << ": a layer's params, master and optimizer blocks are cut at "
               "one element (give them the same fractions)";
        return std::nullopt;
      }
      return e;
    };
    for (TensorClass c :
         {TensorClass::Params, TensorClass::Optimizer, TensorClass::Master,
          TensorClass::Gradients, TensorClass::Activations}) {
      const schedule::ClassSpec &cs = (*spec)[c];
      if (c == TensorClass::Master && !cs.given()) {
        whole[int(c)] = whole[int(TensorClass::Optimizer)];
        split[int(c)] = split[int(TensorClass::Optimizer)];
        cuts[int(c)] = cuts[int(TensorClass::Optimizer)];
        continue;
      }
      whole[int(c)] = cs.whole.value_or(schedule::Tier::GPU);
      if (!cs.byLayer())
        continue;
      // Master layers no range names stay with the optimizer state's.
      const bool withOptimizer = c == TensorClass::Master && !cs.whole;
      if (withOptimizer)
        whole[int(c)] = whole[int(TensorClass::Optimizer)];
      std::string warning;
      auto tiers = schedule::resolveLayers(cs, c, layerBytes, whole[int(c)],
                                           error, &warning);
      if (!warning.empty())
        mlir::emitWarning(module.getLoc()) << "sched-place: " << warning;
      if (tiers && withOptimizer && !split[int(TensorClass::Optimizer)].empty())
        for (size_t l = 0; l < tiers->size(); ++l)
          if (!llvm::any_of(cs.ranges,
                            [&](const schedule::ClassSpec::Range &r) {
                              return int64_t(l) >= r.begin &&
                                     (r.end < 0 || int64_t(l) < r.end);
                            }))
            (*tiers)[l] = split[int(TensorClass::Optimizer)][l];
      if (!tiers) {
        module.emitError("sched-place: ") << error;
        return signalPassFailure();
      }
      for (const schedule::ClassSpec::Cut &cut : cs.cuts) {
        auto e = roundCut(c, cut);
        if (!e)
          return signalPassFailure();
        cuts[int(c)].append({cut.layer, *e});
      }
      if (withOptimizer)
        for (size_t i = 0; i < cuts[int(TensorClass::Optimizer)].size();
             i += 2) {
          const int64_t l = cuts[int(TensorClass::Optimizer)][i];
          if (!llvm::any_of(cs.cuts,
                            [&](const schedule::ClassSpec::Cut &x) {
                              return x.layer == l;
                            }) &&
              (*tiers)[l] == schedule::Tier::SSD)
            cuts[int(c)].append({l, cuts[int(TensorClass::Optimizer)][i + 1]});
        }
      std::vector<schedule::Tier> &v = split[int(c)];
      for (auto t : *tiers)
        v.push_back(*t);
      // The parameters may keep layers resident on the GPU (no load brings
      // them), the activations layers the backward reads there; the other
      // classes' GPU tier is the whole model's.
      if (c != TensorClass::Params && c != TensorClass::Activations &&
          llvm::is_contained(v, schedule::Tier::GPU) &&
          llvm::any_of(
              v, [](schedule::Tier t) { return t != schedule::Tier::GPU; })) {
        size_t g = llvm::find(v, schedule::Tier::GPU) - v.begin();
        module.emitError("sched-place: '")
            << cs.text << "' leaves layer " << g << " of "
            << schedule::tensorClassName(c)
            << " on the GPU and others off it: a class split by layer lives "
               "on host and SSD (the GPU's tier is all of a class or none, "
               "but for params and activations: where the optimizer runs and "
               "where the "
               "backward leaves the gradients are the whole model's); place "
               "the rest with "
            << schedule::tensorClassName(c) << "=host or "
            << schedule::tensorClassName(c) << "=ssd";
        return signalPassFailure();
      }
      whole[int(c)] = *llvm::max_element(v);
      if (llvm::all_of(v, [&](schedule::Tier t) { return t == v[0]; }))
        v.clear();
      // Layers in order, as the attribute lists them.
      SmallVector<std::pair<int64_t, int64_t>> pairs;
      for (size_t i = 0; i < cuts[int(c)].size(); i += 2)
        pairs.push_back({cuts[int(c)][i], cuts[int(c)][i + 1]});
      llvm::sort(pairs);
      cuts[int(c)].clear();
      for (auto [l, e] : pairs)
        cuts[int(c)].append({l, e});
    }
    llvm::StringMap<std::string> tiers;
    for (int c = 0; c < schedule::kNumTensorClasses; ++c)
      tiers[schedule::tensorClassName(TensorClass(c))] =
          schedule::tierName(whole[c]);
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
    SmallVector<NamedAttribute> layerTiers;
    for (TensorClass c :
         {TensorClass::Params, TensorClass::Optimizer, TensorClass::Gradients,
          TensorClass::Master, TensorClass::Activations}) {
      if (split[int(c)].empty() || (c == TensorClass::Master && !bf16Mixed))
        continue;
      SmallVector<int32_t> v;
      for (schedule::Tier t : split[int(c)])
        v.push_back(int32_t(t));
      layerTiers.push_back(b.getNamedAttr(schedule::tensorClassName(c),
                                          b.getDenseI32ArrayAttr(v)));
    }
    SmallVector<NamedAttribute> cutList;
    for (TensorClass c :
         {TensorClass::Params, TensorClass::Optimizer, TensorClass::Master})
      if (!cuts[int(c)].empty() && (c != TensorClass::Master || bf16Mixed))
        cutList.push_back(b.getNamedAttr(schedule::tensorClassName(c),
                                         b.getDenseI64ArrayAttr(cuts[int(c)])));
    auto placed = PlacementAttr::getChecked(
        [&] { return module.emitError("sched-place: "); }, &getContext(),
        tierOf("params"), tierOf("optimizer"), tierOf("gradients"),
        tierOf("activations"),
        layerTiers.empty() ? DictionaryAttr() : b.getDictionaryAttr(layerTiers),
        cutList.empty() ? DictionaryAttr() : b.getDictionaryAttr(cutList));
    if (!placed)
      return signalPassFailure();
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
      const std::vector<schedule::Tier> &actLayers =
          split[int(TensorClass::Activations)];
      auto actTier = [&](int64_t l) {
        return l >= 0 && l < int64_t(actLayers.size())
                   ? actLayers[l]
                   : whole[int(TensorClass::Activations)];
      };
      if (whole[int(TensorClass::Activations)] != schedule::Tier::GPU &&
          failed(checkActivationsMovable(it, actTier, !actLayers.empty())))
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
