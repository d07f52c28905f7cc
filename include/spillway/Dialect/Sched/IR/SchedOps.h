//===- SchedOps.h - sched dialect ops and types -----------------*- C++ -*-===//
#ifndef SPILLWAY_DIALECT_SCHED_IR_SCHEDOPS_H
#define SPILLWAY_DIALECT_SCHED_IR_SCHEDOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "spillway/Dialect/Sched/IR/SchedDialect.h"

#include "spillway/Dialect/Sched/IR/SchedEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "spillway/Dialect/Sched/IR/SchedAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "spillway/Dialect/Sched/IR/SchedTypes.h.inc"

#define GET_OP_CLASSES
#include "spillway/Dialect/Sched/IR/SchedOps.h.inc"

namespace spillway::sched {
/// Appends the tasks whose results `v` is computed from in the iteration's
/// block, through the ops between tasks (slices, accumulates): the tasks a
/// reader of `v` must run after.
void producerTasks(mlir::Value v, llvm::SmallVectorImpl<TaskOp> &out);
} // namespace spillway::sched

#endif
