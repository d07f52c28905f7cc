//===- SchedDialect.cpp - the sched dialect -------------------------------===//

#include "spillway/Dialect/Sched/IR/SchedDialect.h"
#include "spillway/Dialect/Sched/IR/SchedOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "spillway/runtime/tier.h"
#include "llvm/ADT/TypeSwitch.h"

#include <map>

using namespace mlir;
using namespace spillway::sched;

#include "spillway/Dialect/Sched/IR/SchedDialect.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "spillway/Dialect/Sched/IR/SchedTypes.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "spillway/Dialect/Sched/IR/SchedAttrs.cpp.inc"

// The dialect's tiers are the runtime ABI's (tier.h): the lowering passes a
// tier to the runtime as its number.
static_assert(int(Tier::gpu) == SPW_TIER_GPU && int(Tier::host) == SPW_TIER_HOST &&
              int(Tier::ssd) == SPW_TIER_SSD &&
              getMaxEnumValForTier() + 1 == SPW_NUM_TIERS,
              "sched::Tier and spw_tier disagree");

/// The tier the attribute gives class `cls`: none for the master weights,
/// whose tier is the iteration's `master`; failure for a name that is no
/// class.
static FailureOr<std::optional<Tier>> classTier(StringRef cls, Tier params,
                                                Tier optimizer, Tier gradients,
                                                Tier activations) {
  if (cls == "params")
    return std::optional<Tier>(params);
  if (cls == "optimizer")
    return std::optional<Tier>(optimizer);
  if (cls == "gradients")
    return std::optional<Tier>(gradients);
  if (cls == "activations")
    return std::optional<Tier>(activations);
  if (cls == "master")
    return std::optional<Tier>();
  return failure();
}

/// `cuts`: per class (params, optimizer, master), ascending layers each cut
/// at E > 0 elements, a layer cut in two classes at one E (its blocks split
/// at one element), and the block's home SSD (where the class's tier is
/// known here: the master weights' is the iteration's).
static LogicalResult verifyCuts(function_ref<InFlightDiagnostic()> emitError,
                                Tier params, Tier optimizer,
                                DictionaryAttr layers, DictionaryAttr cuts) {
  if (!cuts)
    return success();
  std::map<int64_t, std::pair<int64_t, StringRef>> byLayer;
  for (NamedAttribute entry : cuts) {
    StringRef cls = entry.getName().getValue();
    if (cls != "params" && cls != "optimizer" && cls != "master")
      return emitError() << "placement cuts: '" << cls
                         << "' is not a class whose blocks are cut (params, "
                            "optimizer, master)";
    // (The master weights' home is checked by the iteration, which knows
    // it.)
    std::optional<Tier> base =
        *classTier(cls, params, optimizer, Tier::gpu, Tier::gpu);
    auto pairs = dyn_cast<DenseI64ArrayAttr>(entry.getValue());
    if (!pairs || pairs.empty() || pairs.size() % 2)
      return emitError() << "placement cuts: " << cls
                         << " needs an array<i64> of (layer, elements) pairs";
    ArrayRef<int64_t> v = pairs.asArrayRef();
    DenseI32ArrayAttr tiers =
        layers ? layers.getAs<DenseI32ArrayAttr>(cls) : DenseI32ArrayAttr();
    for (size_t i = 0; i < v.size(); i += 2) {
      const int64_t l = v[i], e = v[i + 1];
      if (l < 0 || e <= 0 || (i && l <= v[i - 2]))
        return emitError() << "placement cuts: " << cls << " (" << l << ", "
                           << e
                           << ") is not a layer (ascending) and a positive "
                              "number of elements";
      std::optional<Tier> home = base;
      if (tiers && l < tiers.size())
        home = Tier(tiers[l]);
      if (home && *home != Tier::ssd)
        return emitError() << "placement cuts: layer " << l << " of " << cls
                           << " is homed on " << stringifyTier(*home)
                           << "; a cut block is homed on ssd, its first "
                              "elements on host";
      auto [it, fresh] = byLayer.try_emplace(l, e, cls);
      if (!fresh && it->second.first != e)
        return emitError() << "placement cuts: layer " << l << " cuts "
                           << it->second.second << " at " << it->second.first
                           << " elements and " << cls << " at " << e
                           << " (a layer's blocks split at one element)";
    }
  }
  return success();
}

LogicalResult
PlacementAttr::verify(function_ref<InFlightDiagnostic()> emitError, Tier params,
                      Tier optimizer, Tier gradients, Tier activations,
                      DictionaryAttr layers, DictionaryAttr cuts) {
  if (failed(verifyCuts(emitError, params, optimizer, layers, cuts)))
    return failure();
  if (!layers)
    return success();
  for (NamedAttribute entry : layers) {
    StringRef cls = entry.getName().getValue();
    FailureOr<std::optional<Tier>> known =
        classTier(cls, params, optimizer, gradients, activations);
    if (failed(known))
      return emitError() << "placement layers: '" << cls
                         << "' is not a class that splits by layer (params, "
                            "optimizer, gradients, master, activations)";
    std::optional<Tier> base = *known;
    auto tiers = dyn_cast<DenseI32ArrayAttr>(entry.getValue());
    if (!tiers || tiers.empty())
      return emitError() << "placement layers: " << cls
                         << " needs a non-empty array<i32> of tiers";
    // A split lives off the GPU, but for the parameters and activations: a
    // layer's optimizer state or masters on the GPU would change where its
    // update runs, its gradients where the backward leaves them;
    // GPU-resident parameter blocks are loaded by no layer, a layer's
    // activations kept on the GPU are read there by its backward
    // (sched-insert-transfers).
    const bool gpuOk = cls == "params" || cls == "activations";
    Tier slowest = Tier::gpu;
    bool offGpu = false;
    for (int32_t t : tiers.asArrayRef()) {
      if (t != int32_t(Tier::host) && t != int32_t(Tier::ssd) &&
          !(gpuOk && t == int32_t(Tier::gpu)))
        return emitError() << "placement layers: " << cls << " tier " << t
                           << (gpuOk ? " is not gpu (0), host (1) or ssd (2)"
                                     : " is not host (1) or ssd (2)");
      slowest = std::max(slowest, Tier(t));
      offGpu |= t != int32_t(Tier::gpu);
    }
    if (!offGpu)
      return emitError() << "placement layers: " << cls
                         << " has every layer on the GPU: place it whole";
    if (base && *base != slowest)
      return emitError() << "placement layers: " << cls << " = "
                         << stringifyTier(*base)
                         << " but its slowest layer is on "
                         << stringifyTier(slowest);
  }
  return success();
}

ArrayRef<int32_t> PlacementAttr::layerTiers(StringRef cls) const {
  if (DictionaryAttr layers = getLayers())
    if (auto tiers = layers.getAs<DenseI32ArrayAttr>(cls))
      return tiers.asArrayRef();
  return {};
}

int64_t PlacementAttr::cutOf(StringRef cls, int64_t layer) const {
  DictionaryAttr cuts = getCuts();
  auto pairs = cuts ? cuts.getAs<DenseI64ArrayAttr>(cls) : DenseI64ArrayAttr();
  if (!pairs)
    return 0;
  ArrayRef<int64_t> v = pairs.asArrayRef();
  for (size_t i = 0; i + 1 < v.size(); i += 2)
    if (v[i] == layer)
      return v[i + 1];
  return 0;
}

int64_t PlacementAttr::layerCut(int64_t layer) const {
  int64_t e = 0;
  for (StringRef cls : {"params", "optimizer", "master"})
    e = std::max(e, cutOf(cls, layer));
  return e;
}

Tier PlacementAttr::homeOf(StringRef cls, Tier base, int64_t layer) const {
  ArrayRef<int32_t> tiers = layerTiers(cls);
  if (layer >= 0 && layer < int64_t(tiers.size()))
    return Tier(tiers[layer]);
  return base;
}

void SchedDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "spillway/Dialect/Sched/IR/SchedAttrs.cpp.inc"
      >();
}

void SchedDialect::initialize() {
  registerAttributes();
  addTypes<
#define GET_TYPEDEF_LIST
#include "spillway/Dialect/Sched/IR/SchedTypes.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "spillway/Dialect/Sched/IR/SchedOps.cpp.inc"
      >();
}
