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

/// A layer that shares parameters with another (reads one another layer
/// owns: `uses`; owns one other layers read: `shared`;
/// train::LayerAttr::sharesParams) keeps its parameters on the GPU: the
/// executor moves parameters per layer. sched-insert-transfers refuses to
/// move such a layer's parameters, and the planner pins params to the GPU
/// when any layer of the module's train.layers shares them.
bool anyLayerSharesParameters(mlir::ModuleOp module);

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
