//===- Passes.h - conversion passes -----------------------------*- C++ -*-===//
#ifndef SPILLWAY_CONVERSION_PASSES_H
#define SPILLWAY_CONVERSION_PASSES_H

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "spillway/Dialect/Sched/IR/SchedDialect.h"
#include "spillway/Dialect/Train/IR/TrainDialect.h"

namespace spillway {
#define GEN_PASS_DECL
#include "spillway/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "spillway/Conversion/Passes.h.inc"
} // namespace spillway

#endif
