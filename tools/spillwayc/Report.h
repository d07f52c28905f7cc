//===- Report.h - spillwayc --report: the planned iteration as text/JSON --===//
#ifndef SPILLWAYC_REPORT_H
#define SPILLWAYC_REPORT_H

#include "spillway/Schedule/CostModel.h"
#include "spillway/Schedule/IterationSummary.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>
#include <vector>

namespace spillwayc {

/// Everything the report shows.
struct PlanReport {
  std::string model;   ///< the input file
  std::string profilePath;
  spillway::schedule::HardwareProfile profile;
  spillway::schedule::IterationSummary summary;
  spillway::schedule::SummaryTotals totals;
  spillway::schedule::Budgets budgets;
  bool ssdUnlimited = false; ///< no SSD budget: the profile's SSDs hold anything
  spillway::schedule::Choice choice;
  /// The executable follows the chosen plan's placement (an offload plan:
  /// --place / --gpu-mem / --host-mem with -o).
  bool offloadPlan = false;
  /// The parameters FOAM folds (train.foam), in module order, and its level.
  std::vector<std::string> foamParams;
  int64_t foamLevel = -1;
  /// --ssd-tbw: the SSDs' rated endurance in terabytes written (10^12
  /// bytes), for the drive lifetime at the predicted speed.
  std::optional<double> ssdTbw;
  /// An offload compile: the plan the executable follows when the planner's
  /// exact arenas changed the chosen one (refused it, or refilled the host
  /// budget from it); --report-json's "executable".
  std::optional<spillway::schedule::CostEstimate> executable;
  /// An offload compile that planned: the exact arenas of the plan the
  /// executable runs (sched.buffers' gpu_bytes, host_bytes, ssd_bytes and
  /// step_arena_bytes, -1 without --gpu-mem or the profile's GPU memory);
  /// --report-json's "arenas".
  struct Arenas {
    uint64_t gpu = 0, host = 0, ssd = 0;
    int64_t step = -1;
  };
  std::optional<Arenas> arenas;
};

/// The human-readable report (stdout of --report).
void printReport(const PlanReport &r, llvm::raw_ostream &os);
/// After the report, for an offload plan's executable whose plan is not the
/// report's chosen one (the planner's exact arenas refused it, or refilled
/// the host budget from it): that plan, as the report prints one.
void printExecutablePlan(const spillway::schedule::CostEstimate &e,
                         llvm::raw_ostream &os);
/// After the report, for an offload plan's executable: the SSD bytes its
/// plan writes per iteration (`planBytes`, each transfer rounded up to
/// 4 KiB as the swap writes it), per token and with --ssd-tbw the drive
/// lifetime at `iterationSec`; nothing when it writes none.
void printPlanSsdWear(const PlanReport &r, uint64_t planBytes,
                      double iterationSec, llvm::raw_ostream &os);
/// The same as JSON (--report-json): `chosen` and `baseline` as
/// estimateToJSON writes them, plus the summary, budgets and profile.
std::string reportToJSON(const PlanReport &r);

} // namespace spillwayc

#endif
