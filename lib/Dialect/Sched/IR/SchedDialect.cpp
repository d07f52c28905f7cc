//===- SchedDialect.cpp - the sched dialect -------------------------------===//

#include "spillway/Dialect/Sched/IR/SchedDialect.h"
#include "spillway/Dialect/Sched/IR/SchedOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "spillway/runtime/tier.h"
#include "llvm/ADT/TypeSwitch.h"

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

LogicalResult
PlacementAttr::verify(function_ref<InFlightDiagnostic()> emitError, Tier params,
                      Tier optimizer, Tier gradients, Tier activations,
                      DictionaryAttr layers) {
  if (!layers)
    return success();
  for (NamedAttribute entry : layers) {
    StringRef cls = entry.getName().getValue();
    // The master weights' class tier is the iteration's `master`.
    std::optional<Tier> base;
    if (cls == "params")
      base = params;
    else if (cls == "optimizer")
      base = optimizer;
    else if (cls == "gradients")
      base = gradients;
    else if (cls == "activations")
      base = activations;
    else if (cls != "master")
      return emitError() << "placement layers: '" << cls
                         << "' is not a class that splits by layer (params, "
                            "optimizer, gradients, master, activations)";
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
