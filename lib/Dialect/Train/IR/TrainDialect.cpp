//===- TrainDialect.cpp - the train dialect -------------------------------===//

#include "spillway/Dialect/Train/IR/TrainDialect.h"
#include "spillway/Dialect/Train/IR/TrainOps.h"

using namespace mlir;
using namespace spillway::train;

#include "spillway/Dialect/Train/IR/TrainDialect.cpp.inc"

void TrainDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "spillway/Dialect/Train/IR/TrainOps.cpp.inc"
      >();
}
