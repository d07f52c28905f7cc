//===- SchedDialect.cpp - the sched dialect -------------------------------===//

#include "spillway/Dialect/Sched/IR/SchedDialect.h"
#include "spillway/Dialect/Sched/IR/SchedOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "spillway/runtime/tier.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace spillway::sched;

#include "spillway/Dialect/Sched/IR/SchedDialect.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "spillway/Dialect/Sched/IR/SchedTypes.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "spillway/Dialect/Sched/IR/SchedAttrs.cpp.inc"

// The dialect's tiers are the runtime ABI's (tier.h): the lowering passes a
// tier to the runtime as its number.
static_assert(int(Tier::gpu) == SPW_TIER_GPU && int(Tier::host) == SPW_TIER_HOST &&
              int(Tier::ssd) == SPW_TIER_SSD &&
              getMaxEnumValForTier() + 1 == SPW_NUM_TIERS,
              "sched::Tier and spw_tier disagree");

void SchedDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "spillway/Dialect/Sched/IR/SchedAttrs.cpp.inc"
      >();
}

void SchedDialect::initialize() {
  registerAttributes();
  addTypes<
#define GET_TYPEDEF_LIST
#include "spillway/Dialect/Sched/IR/SchedTypes.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "spillway/Dialect/Sched/IR/SchedOps.cpp.inc"
      >();
}
