//===- Passes.h - sched dialect passes --------------------------*- C++ -*-===//
#ifndef SPILLWAY_DIALECT_SCHED_TRANSFORMS_PASSES_H
#define SPILLWAY_DIALECT_SCHED_TRANSFORMS_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "spillway/Dialect/Sched/IR/SchedDialect.h"
#include "spillway/Schedule/CostModel.h"

#include <functional>

namespace spillway::sched {
#define GEN_PASS_DECL
#include "spillway/Dialect/Sched/Transforms/Passes.h.inc"

/// A tier whose arena outgrows its budget in sched-assign-buffers: the
/// smallest budget that fits this placement is `neededBytes`. The pass
/// still fails with its error; a planner trying several plans reads this
/// instead of the message.
struct OverBudget {
  schedule::Tier tier = schedule::Tier::GPU;
  uint64_t neededBytes = 0, budgetBytes = 0;
};
using OverBudgetHandler = std::function<void(const OverBudget &)>;
std::unique_ptr<mlir::Pass>
createSchedAssignBuffersPass(const SchedAssignBuffersPassOptions &options,
                             OverBudgetHandler onOverBudget);

#define GEN_PASS_REGISTRATION
#include "spillway/Dialect/Sched/Transforms/Passes.h.inc"
} // namespace spillway::sched

#endif
