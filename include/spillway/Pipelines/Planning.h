//===- Planning.h - choosing and building a training step's plan -*- C++ -*-===//
//
// The planner behind spillwayc's --report and offload plans, as library
// functions over one options struct: the cost model ranks the plans of a
// training step (searchPlans), and planOffload builds the first ranked plan
// whose exact arenas (sched-assign-buffers) fit the budgets, or says which
// budget was too small and what would fit.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_PIPELINES_PLANNING_H
#define SPILLWAY_PIPELINES_PLANNING_H

#include "spillway/Pipelines/Pipelines.h"
#include "spillway/Schedule/CostModel.h"
#include "spillway/Schedule/HardwareProfile.h"
#include "spillway/Schedule/IterationSummary.h"
#include "spillway/Schedule/PlacementSpec.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Pass/PassManager.h"

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace spillway {

enum class OptimizerKind { AdamW, Foam };

/// What the user fixed about the plan (spillwayc's flags, parsed); what is
/// left open the cost model searches. validatePlanningOptions checks the
/// combinations once.
struct PlanningOptions {
  std::optional<unsigned> microbatches;  ///< --microbatches (open: 1..16)
  std::optional<schedule::Order> order;  ///< --schedule (open: auto)
  std::optional<double> overlap;         ///< --overlap-optimizer (open: searched)
  bool recompute = true;                 ///< --recompute on|off
  OptimizerKind optimizer = OptimizerKind::AdamW;
  /// The products' numerics the lowering gives the target (--precision,
  /// --target): which of the profile's GPU rates the cost model applies.
  schedule::Precision products = schedule::Precision::FP32;
  /// --place entries as given (CLASS=TIER, CLASS[a:b]=TIER, fractions
  /// CLASS=TIER:F,TIER:F; schedule/PlacementSpec.h): sched-place reads them
  /// as they are; with a profile they also pin the search (checked then).
  std::vector<std::string> place;
  /// --split-placement: the planner may split a class by layer to fill the
  /// host budget (SearchSpace::splitByLayer).
  bool splitByLayer = true;
  std::optional<uint64_t> gpuMem, hostMem; ///< budgets (open: the profile's)
  /// --ranks: the data-parallel ranks the plan is costed for (each with
  /// these budgets and the step's batch; the network link of the cost
  /// model). The executable runs under any mpirun -np.
  unsigned ranks = 1;
  /// --zero: the ZeRO stage the ranks run (the executable's --zero):
  /// 1 costs each rank's sharded optimizer state and its exchange
  /// (IterationSummary::zeroStage); resident plans only.
  unsigned zero = 0;
  /// The executable follows an offload plan (--place, --gpu-mem or
  /// --host-mem with an executable to build).
  bool offload = false;
  /// With a profile: its SSDs the plan may use (--ssd; empty: all).
  std::vector<std::string> ssdDirs;
  /// The schedule outlines its tasks (ScheduleOptions::outlineTasks): what
  /// an executable is compiled from.
  bool outlineTasks = false;
  /// Called with every pass manager the planner runs (e.g. to time its
  /// passes); not part of the plan.
  std::function<void(mlir::PassManager &)> instrument;

  /// The executable's schedule before the cost model has its say: M (1
  /// when open), the order (snake when open), F (0 when open).
  int64_t exeMicrobatches() const { return microbatches ? *microbatches : 1; }
  schedule::Order exeOrder() const {
    return order ? *order : schedule::Order::Snake;
  }
  double exeOverlap() const { return overlap ? *overlap : 0.0; }
};

/// The first combination of options that cannot be planned (e.g. FOAM with
/// an optimizer overlap), as the message spillwayc prints; "" when none.
std::string validatePlanningOptions(const PlanningOptions &options);

/// The search space, budgets and profile of a plan, read and checked
/// before anything compiles.
struct PlanSpace {
  std::string profilePath;
  schedule::HardwareProfile profile;
  schedule::SearchSpace space;
  schedule::Budgets budgets;
  bool ssdUnlimited = false; ///< no SSD budget: the SSDs hold anything
  /// --place parsed; its ranges and fractions pin layers once the layers
  /// are known (searchPlans).
  schedule::PlacementSpec spec;
};

/// Reads the profile at `profilePath` and the options into a PlanSpace;
/// nullopt with the message in `error`.
std::optional<PlanSpace> readPlanSpace(const PlanningOptions &options,
                                       const std::string &profilePath,
                                       std::string &error);

/// The cost model's view of a training step and its ranked plans.
struct PlanSearch {
  schedule::IterationSummary summary;
  schedule::SummaryTotals totals;
  schedule::Choice choice;
  /// The parameters FOAM folds (train.foam), in module order, and its level.
  std::vector<std::string> foamParams;
  int64_t foamLevel = -1;
  /// The profile's GPU memory: the offload plan's GPU budget without
  /// --gpu-mem (OffloadOptions::deviceBytes).
  uint64_t deviceMemoryBytes = 0;
  /// What the search ran with (its pins resolved to layers): planOffload
  /// refills a split plan's host budget with them (schedule::fillHost).
  schedule::SearchSpace space;
  schedule::Budgets budgets;
  schedule::HardwareProfile profile;
};

/// Partitions a copy of the training step `step` (left unchanged), summarizes
/// it and ranks its plans. Failure: `error` says why, or is empty when the
/// partition's diagnostics already did.
std::optional<PlanSearch> searchPlans(mlir::ModuleOp step,
                                      const PlanningOptions &options,
                                      const PlanSpace &space,
                                      std::string &error);

/// When the cost model's best plan does not fit the budgets: the message
/// naming the budgets and what the closest plan needs; "" when it fits.
std::string costModelOverBudget(const PlanSearch &search,
                                const PlanSpace &space);

/// An offload plan as built: the schedule pipeline's options and, with a
/// cost model, the ranked plan it follows and its rank (0: the best).
struct OffloadPlan {
  ScheduleOptions schedule;
  std::optional<schedule::CostEstimate> estimate;
  size_t rank = 0;
};

/// The outcome of planOffload: the plan, or the plan that failed and, when
/// it failed for its budgets, the tier over budget with the smallest budget
/// that fits it.
struct OffloadOutcome {
  bool succeeded = false;
  OffloadPlan plan;
  std::optional<sched::OverBudget> overBudget;
};

/// Schedules `module` (a training step) with an offload plan: with `search`
/// (a cost model) and a budget given, the first of (up to 32) ranked plans
/// whose exact arenas fit; otherwise, or when none fits, the first plan,
/// whose diagnostics say why it fails. `announce` is called with the plan
/// about to be kept or tried last (spillwayc's -v notes). On success the
/// module holds the scheduled step, with the cost model's prediction
/// (sched.prediction) when there is one.
OffloadOutcome
planOffload(mlir::OwningOpRef<mlir::ModuleOp> &module,
            const PlanningOptions &options,
            const PlanSearch *search,
            const std::function<void(const OffloadPlan &)> &announce = {});

/// The schedule without an offload plan: M, F and recompute as given (or
/// their defaults), the order as given, else `estimate`'s (the cost model's
/// choice), else snake.
ScheduleOptions residentSchedule(const PlanningOptions &options,
                                 const schedule::CostEstimate *estimate);

/// The schedule of an offload candidate: residentSchedule's, with the
/// pinned classes as given and the rest from `estimate` (none: the GPU,
/// sched-place's default).
ScheduleOptions offloadSchedule(const PlanningOptions &options,
                                const PlanSearch *search,
                                const schedule::CostEstimate *estimate);

} // namespace spillway

#endif
