//===- LayerTable.h - the module's train.layers ------------------*- C++ -*-===//
//
// The one reader of `train.layers`, the table `train-partition-layers`
// writes: the sched passes, the cost model's summary and the driver take
// its entries from here. The dialect verifier checks a table once
// (verifyLayerTable); a reader that finds one the verifier would reject (it
// did not run) reports the same error.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_DIALECT_TRAIN_IR_LAYERTABLE_H
#define SPILLWAY_DIALECT_TRAIN_IR_LAYERTABLE_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "spillway/Dialect/Train/IR/TrainAttrs.h"
#include <optional>

namespace spillway::train {

/// The module attribute holding the layer table.
inline constexpr llvm::StringLiteral kLayersAttrName = "train.layers";

/// Checks a `train.layers` value: an array of #train.layer whose `shared`
/// entries name their layer's own parameters and whose layer indices lie in
/// the table, no parameter owned by two layers.
mlir::LogicalResult
verifyLayerTable(mlir::Attribute table,
                 llvm::function_ref<mlir::InFlightDiagnostic()> emitError);

class LayerTable {
public:
  /// The table of `module`: nullopt when it has none; failure, reported at
  /// the module, when it is malformed.
  static mlir::FailureOr<std::optional<LayerTable>> read(mlir::ModuleOp module);

  /// Sets `module`'s table to `layers`.
  static void write(mlir::ModuleOp module, llvm::ArrayRef<LayerAttr> layers);

  size_t size() const { return table.size(); }
  LayerAttr operator[](size_t l) const {
    return llvm::cast<LayerAttr>(table[l]);
  }
  auto entries() const { return table.getAsRange<LayerAttr>(); }
  auto begin() const { return entries().begin(); }
  auto end() const { return entries().end(); }

  /// Whether some layer shares parameters with another (a tied weight).
  bool anySharedParams() const;
  /// The layers whose backward produces a part of the gradient of one of
  /// layer `l`'s shared parameters, in the table's order per parameter.
  llvm::SmallVector<int64_t> gradFrom(size_t l) const;

private:
  explicit LayerTable(mlir::ArrayAttr table) : table(table) {}
  mlir::ArrayAttr table; // of LayerAttr (verified)
};

} // namespace spillway::train

#endif
