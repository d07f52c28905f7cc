//===- Passes.h - train dialect passes --------------------------*- C++ -*-===//
#ifndef SPILLWAY_DIALECT_TRAIN_TRANSFORMS_PASSES_H
#define SPILLWAY_DIALECT_TRAIN_TRANSFORMS_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "spillway/Dialect/Train/IR/TrainDialect.h"

namespace spillway::train {
#define GEN_PASS_DECL
#include "spillway/Dialect/Train/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "spillway/Dialect/Train/Transforms/Passes.h.inc"
} // namespace spillway::train

#endif
