//===- TrainDialect.cpp - the train dialect -------------------------------===//

#include "spillway/Dialect/Train/IR/TrainDialect.h"
#include "spillway/Dialect/Train/IR/LayerTable.h"
#include "spillway/Dialect/Train/IR/TrainAttrs.h"
#include "spillway/Dialect/Train/IR/TrainOps.h"

using namespace mlir;
using namespace spillway::train;

#include "spillway/Dialect/Train/IR/TrainDialect.cpp.inc"

void TrainDialect::initialize() {
  registerAttributes();
  addOperations<
#define GET_OP_LIST
#include "spillway/Dialect/Train/IR/TrainOps.cpp.inc"
      >();
}

LogicalResult TrainDialect::verifyOperationAttribute(Operation *op,
                                                     NamedAttribute attr) {
  if (attr.getName() == kPrecisionAttrName) {
    auto value = dyn_cast<StringAttr>(attr.getValue());
    if (!isa<ModuleOp>(op) || !value || value.getValue() != "bf16-mixed")
      return op->emitError()
             << kPrecisionAttrName
             << " is the module's \"bf16-mixed\" (train-mixed-precision "
                "sets it), got "
             << attr.getValue() << (isa<ModuleOp>(op) ? "" : " on an op");
    return success();
  }
  if (attr.getName() == kOptimizerStateDtypeAttrName) {
    auto value = dyn_cast<StringAttr>(attr.getValue());
    if (!isa<ModuleOp>(op) || !value ||
        (value.getValue() != "fp32" && value.getValue() != "bf16"))
      return op->emitError()
             << kOptimizerStateDtypeAttrName
             << " is the module's \"fp32\" or \"bf16\" "
                "(train-attach-optimizer's state-dtype sets it), got "
             << attr.getValue() << (isa<ModuleOp>(op) ? "" : " on an op");
    return success();
  }
  if (attr.getName() == kOptimizerStateShardsAttrName) {
    auto value = dyn_cast<DictionaryAttr>(attr.getValue());
    auto ranks = value ? value.getAs<IntegerAttr>("ranks") : IntegerAttr();
    auto align = value ? value.getAs<IntegerAttr>("align") : IntegerAttr();
    // `gradients = true`: ZeRO stage 2 (shard-gradients).
    auto grads = value ? value.get("gradients") : Attribute();
    const size_t fields = grads ? 3 : 2;
    if (!isa<ModuleOp>(op) || !ranks || !align || value.size() != fields ||
        (grads && !isa<BoolAttr>(grads)) || ranks.getInt() < 2 ||
        ranks.getInt() > kMaxOptimizerStateShards ||
        (align.getInt() != 64 && align.getInt() != 65536))
      return op->emitError()
             << kOptimizerStateShardsAttrName
             << " is the module's {ranks = N, align = A} with N in [2, "
             << kMaxOptimizerStateShards
             << "] and A 64 or 65536, plus gradients = true for ZeRO stage 2 "
                "(train-attach-optimizer's state-shards and shard-gradients "
                "set it), got "
             << attr.getValue() << (isa<ModuleOp>(op) ? "" : " on an op");
    return success();
  }
  if (attr.getName() != kLayersAttrName)
    return success();
  if (!isa<ModuleOp>(op))
    return op->emitError() << kLayersAttrName << " belongs on the module";
  return verifyLayerTable(attr.getValue(), [&] { return op->emitError(); });
}
