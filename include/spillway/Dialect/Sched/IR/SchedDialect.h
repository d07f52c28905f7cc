//===- SchedDialect.h - the sched dialect -----------------------*- C++ -*-===//
#ifndef SPILLWAY_DIALECT_SCHED_IR_SCHEDDIALECT_H
#define SPILLWAY_DIALECT_SCHED_IR_SCHEDDIALECT_H

#include "mlir/IR/Dialect.h"

#include "spillway/Dialect/Sched/IR/SchedDialect.h.inc"

#endif
