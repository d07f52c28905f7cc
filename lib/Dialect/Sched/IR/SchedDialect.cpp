//===- SchedDialect.cpp - the sched dialect -------------------------------===//

#include "spillway/Dialect/Sched/IR/SchedDialect.h"
#include "spillway/Dialect/Sched/IR/SchedOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace spillway::sched;

#include "spillway/Dialect/Sched/IR/SchedDialect.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "spillway/Dialect/Sched/IR/SchedTypes.cpp.inc"

void SchedDialect::initialize() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "spillway/Dialect/Sched/IR/SchedTypes.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "spillway/Dialect/Sched/IR/SchedOps.cpp.inc"
      >();
}
