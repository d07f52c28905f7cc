//===- IterationSummary.h - the cost model's input, read from the IR -----===//
//
// Builds the CostModel's IterationSummary (one LayerCost per layer, forward
// order) from a training step that `train-partition-layers` has annotated:
// the module's `train.layers`, every op's `train.layer` / `train.phase`.
// docs/cost-model.md ("The iteration summary from the IR") states the rules;
// unlike CostModel.h this part reads MLIR (the train dialect).
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_SCHEDULE_ITERATIONSUMMARY_H
#define SPILLWAY_SCHEDULE_ITERATIONSUMMARY_H

#include "spillway/Schedule/CostModel.h"

#include "mlir/IR/BuiltinOps.h"

#include <optional>
#include <string>

namespace spillway::schedule {

/// What the summary saw besides the per-layer costs (for the report and
/// the tests).
struct SummaryTotals {
  uint64_t paramBytes = 0;       ///< every train.param of the module
  uint64_t unreadParamBytes = 0; ///< parameters the step never reads (no layer)
  uint64_t numParams = 0;        ///< elements of every train.param
  unsigned numLayers = 0;
  /// Tokens one iteration trains: the elements of the step's token input
  /// (its one integer [B, S] argument not named as labels,
  /// spillway/runtime/token_inputs.h: the executable's rule too); 0 when
  /// the step has none or several.
  uint64_t tokensPerIteration = 0;
  std::string tokenInput; ///< that argument's train.name ("" unnamed)
};

/// FLOPs of one op of the step, whole batch, by the table in
/// docs/cost-model.md (matmul-like 2·M·N·K, attention 4·B·H·S²·D halved when
/// causal, its gradient 2.5× that, elementwise and norms a few per element,
/// shape ops and parameter reads 0). The optimizer's ops count 0 here: the
/// model times them with cpu_optimizer_params_per_s.
double opFlops(mlir::Operation *op);

/// The summary of the annotated step. Fails (nothing, `error` set) when the
/// module has no `train.layers` (run train-partition-layers first), an op
/// lacks its annotations, or a shape is dynamic.
std::optional<IterationSummary> summarizeIteration(mlir::ModuleOp module,
                                                   std::string &error,
                                                   SummaryTotals *totals =
                                                       nullptr);

} // namespace spillway::schedule

#endif
