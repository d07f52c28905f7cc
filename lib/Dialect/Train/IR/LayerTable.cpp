//===- LayerTable.cpp - the module's train.layers -------------------------===//

#include "spillway/Dialect/Train/IR/LayerTable.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

using namespace mlir;
using namespace spillway::train;

LogicalResult spillway::train::verifyLayerTable(
    Attribute table, function_ref<InFlightDiagnostic()> emitError) {
  auto array = dyn_cast<ArrayAttr>(table);
  if (!array)
    return emitError() << kLayersAttrName
                       << " must be an array of #train.layer, got " << table;
  const int64_t n = array.size();
  DenseMap<Attribute, int64_t> owner;
  for (auto [i, a] : llvm::enumerate(array)) {
    auto layer = dyn_cast<LayerAttr>(a);
    if (!layer)
      return emitError() << kLayersAttrName << "[" << i
                         << "] is not a #train.layer: " << a;
    for (FlatSymbolRefAttr p : layer.getParams())
      if (auto [it, fresh] = owner.try_emplace(p, i); !fresh)
        return emitError() << kLayersAttrName << ": parameter " << p
                           << " is owned by two layers (" << it->second
                           << " and " << i << ")";
    for (SharedParamAttr s : layer.getShared())
      for (ArrayRef<int64_t> list : {s.getUsedBy(), s.getGradFrom()})
        for (int64_t l : list)
          if (l >= n)
            return emitError()
                   << kLayersAttrName << "[" << i << "] ('" << layer.getName()
                   << "'): layer " << l << " of " << s.getParam()
                   << "'s sharing is not in the table (" << n << " layers)";
  }
  return success();
}

FailureOr<std::optional<LayerTable>> LayerTable::read(ModuleOp module) {
  Attribute table = module->getAttr(kLayersAttrName);
  if (!table)
    return std::optional<LayerTable>();
  if (failed(verifyLayerTable(table, [&] { return module.emitError(); })))
    return failure();
  return std::optional<LayerTable>(LayerTable(cast<ArrayAttr>(table)));
}

void LayerTable::write(ModuleOp module, ArrayRef<LayerAttr> layers) {
  SmallVector<Attribute> entries(layers.begin(), layers.end());
  module->setAttr(kLayersAttrName, Builder(module.getContext())
                                       .getArrayAttr(entries));
}

bool LayerTable::anySharedParams() const {
  return llvm::any_of(entries(),
                      [](LayerAttr l) { return l.sharesParams(); });
}

SmallVector<int64_t> LayerTable::gradFrom(size_t l) const {
  SmallVector<int64_t> from;
  for (SharedParamAttr s : (*this)[l].getShared())
    llvm::append_range(from, s.getGradFrom());
  return from;
}
