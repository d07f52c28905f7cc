//===- TrainDialect.h - the train dialect -----------------------*- C++ -*-===//
#ifndef SPILLWAY_DIALECT_TRAIN_IR_TRAINDIALECT_H
#define SPILLWAY_DIALECT_TRAIN_IR_TRAINDIALECT_H

#include "mlir/IR/Dialect.h"

#include "spillway/Dialect/Train/IR/TrainDialect.h.inc"

namespace spillway::train {
/// Module attribute naming the weights file (relative to the MLIR file).
inline constexpr llvm::StringLiteral kWeightsAttrName = "train.weights";
/// Argument attribute carrying the ONNX graph input name.
inline constexpr llvm::StringLiteral kInputNameAttrName = "train.name";
} // namespace spillway::train

#endif
