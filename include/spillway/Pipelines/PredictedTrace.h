//===- PredictedTrace.h - the plan's iteration as the model sees it -------===//
//
// spillwayc --report-trace FILE: one iteration of an offload plan, played
// op by op in the sched dialect with the hardware profile's rates, written
// as a Chrome trace in the lanes of the executable's --trace (compute, h2d,
// d2h, ssd read, ssd write, cpu optimizer 0), so the predicted and the
// measured timelines open side by side in Perfetto. docs/cost-model.md,
// "The predicted trace", states the rules.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_PIPELINES_PREDICTEDTRACE_H
#define SPILLWAY_PIPELINES_PREDICTEDTRACE_H

#include "mlir/IR/BuiltinOps.h"
#include "spillway/Schedule/CostModel.h"

#include <optional>
#include <string>

namespace spillway {

struct PredictedTrace {
  std::string json;        ///< {"traceEvents": [...]}
  double iterationSec = 0; ///< when the last span ends
  size_t spans = 0;
};

/// Plays `scheduled`'s iteration (the sched dialect after
/// sched-assign-buffers: ScheduleOptions::stopInSched) with `summary`'s
/// FLOPs and `hw`'s rates. Fails, with the reason in `error`, when the
/// module has no such iteration.
std::optional<PredictedTrace>
predictTrace(mlir::ModuleOp scheduled,
             const schedule::IterationSummary &summary,
             const schedule::HardwareProfile &hw, std::string &error);

} // namespace spillway

#endif
