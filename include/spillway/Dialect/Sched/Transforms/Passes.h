//===- Passes.h - sched dialect passes --------------------------*- C++ -*-===//
#ifndef SPILLWAY_DIALECT_SCHED_TRANSFORMS_PASSES_H
#define SPILLWAY_DIALECT_SCHED_TRANSFORMS_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "spillway/Dialect/Sched/IR/SchedDialect.h"

namespace spillway::sched {
#define GEN_PASS_DECL
#include "spillway/Dialect/Sched/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "spillway/Dialect/Sched/Transforms/Passes.h.inc"
} // namespace spillway::sched

#endif
