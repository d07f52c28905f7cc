//===- Planning.cpp - choosing and building a training step's plan --------===//

#include "spillway/Pipelines/Planning.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "spillway/Dialect/Sched/Transforms/Passes.h"
#include "spillway/Dialect/Train/IR/TrainOps.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace spillway;
using namespace spillway::schedule;

std::string spillway::validatePlanningOptions(const PlanningOptions &o) {
  if (o.optimizer == OptimizerKind::Foam && o.exeOverlap() > 0)
    return "--overlap-optimizer with --optimizer foam: FOAM's folded "
           "state is kept per block of a row, so its updates are not "
           "split between iterations; use --overlap-optimizer 0 (or "
           "--optimizer adamw)";
  if (o.microbatches && *o.microbatches == 0)
    return "--microbatches must be at least 1";
  return {};
}

std::optional<PlanSpace>
spillway::readPlanSpace(const PlanningOptions &options,
                        const std::string &profilePath, std::string &error) {
  PlanSpace in;
  if (profilePath.empty()) {
    error = "--report and --report-json need a hardware profile: --hw "
            "PROFILE.json (profiles/cpu-ci.json for this machine's CPU "
            "backend, profiles/h200.json, or one --probe-hw wrote)";
    return std::nullopt;
  }
  in.profilePath = profilePath;
  auto profile = readHardwareProfile(profilePath, error);
  if (!profile)
    return std::nullopt;
  in.profile = std::move(*profile);
  if (options.ranks > 1 && !(in.profile.networkGBps > 0)) {
    error = "--ranks " + std::to_string(options.ranks) +
            ": the hardware profile '" + profilePath +
            "' gives no network rate to average the gradients over; add "
            "\"network\": {\"gbps\": G} (the bytes per second each rank "
            "sends during an all-reduce, e.g. nccl-tests' busbw / 2 or "
            "osu_allreduce's)";
    return std::nullopt;
  }

  // --ssd: the profile's SSDs the plan may use.
  if (!options.ssdDirs.empty()) {
    std::vector<SSDProfile> chosen;
    for (const std::string &d : options.ssdDirs) {
      llvm::SmallString<256> abs(d);
      llvm::sys::fs::make_absolute(abs);
      auto it = llvm::find_if(in.profile.ssds, [&](const SSDProfile &p) {
        return p.path == d || p.path == std::string(abs);
      });
      if (it == in.profile.ssds.end()) {
        std::string known;
        for (const SSDProfile &p : in.profile.ssds)
          known += (known.empty() ? "" : ", ") + p.path;
        error = "--ssd '" + d + "': the profile '" + profilePath +
                "' has no measurement of it (its SSDs: " +
                (known.empty() ? std::string("none") : known) +
                "); measure it with --probe-hw --ssd";
        return std::nullopt;
      }
      // One device named twice would count its bandwidth twice.
      if (llvm::any_of(chosen, [&](const SSDProfile &p) {
            return p.path == it->path;
          })) {
        error = "--ssd '" + d + "': the SSD '" + it->path +
                "' is already chosen; name each SSD once";
        return std::nullopt;
      }
      chosen.push_back(*it);
    }
    in.profile.ssds = std::move(chosen);
  }

  if (options.order)
    in.space.orders = {*options.order};
  if (options.microbatches)
    in.space.microBatches = {*options.microbatches};
  if (options.overlap)
    in.space.overlaps = {*options.overlap};
  // FOAM's updates run whole (its state is per block of a row): no
  // optimizer overlap to plan.
  if (options.optimizer == OptimizerKind::Foam)
    in.space.overlaps = {0.0};
  auto spec = parsePlacement(options.place, error);
  if (!spec) {
    error = "--place: " + error;
    return std::nullopt;
  }
  for (int k = 0; k < kNumTensorClasses; ++k) {
    const ClassSpec &cs = spec->classes[k];
    bool ssd = cs.whole == Tier::SSD;
    for (auto &[t, _] : cs.fractions)
      ssd |= t == Tier::SSD;
    for (const ClassSpec::Range &r : cs.ranges)
      ssd |= r.tier == Tier::SSD;
    ssd |= !cs.cuts.empty();
    if (ssd && in.profile.ssds.empty()) {
      error = "--place " + cs.text + ": the profile '" + profilePath +
              "' lists no SSD";
      return std::nullopt;
    }
    if (!cs.byLayer() && cs.whole)
      in.space.pinned[k] = *cs.whole;
  }
  in.spec = std::move(*spec);
  in.space.splitByLayer = options.splitByLayer;
  in.budgets.gpuBytes = options.gpuMem ? *options.gpuMem
                                       : in.profile.gpuMemoryBytes;
  in.budgets.hostBytes = options.hostMem ? *options.hostMem
                                         : in.profile.hostMemoryBytes;
  // No SSD budget flag: the SSDs hold whatever the plan puts there.
  in.budgets.ssdBytes = UINT64_MAX;
  in.ssdUnlimited = true;

  if (options.offload) {
    // The plan the executable follows: its own M and overlap. Without
    // recompute the backward reads forward intermediates the plan does
    // not move: activations stay on the GPU unless pinned (then
    // sched-place says what to do).
    in.space.microBatches = {unsigned(options.exeMicrobatches())};
    in.space.overlaps = {options.exeOverlap()};
    if (!options.recompute &&
        !in.space.pinned[int(TensorClass::Activations)])
      in.space.pinned[int(TensorClass::Activations)] = Tier::GPU;
  }
  return in;
}

namespace {
/// "123456 bytes (120.56 KiB)".
std::string bytesAndGiB(uint64_t b) {
  const char *units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = double(b);
  int u = -1;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  if (u < 0)
    return llvm::formatv("{0} bytes", b);
  return llvm::formatv("{0} bytes ({1:f2} {2})", b, v, units[u]);
}
} // namespace

std::optional<PlanSearch> spillway::searchPlans(ModuleOp step,
                                                const PlanningOptions &options,
                                                const PlanSpace &in,
                                                std::string &error) {
  OwningOpRef<ModuleOp> copy(step.clone());
  PassManager pm(step.getContext());
  if (options.instrument)
    options.instrument(pm);
  populatePlanningPipeline(pm);
  if (failed(pm.run(*copy))) {
    error.clear();
    return std::nullopt;
  }
  PlanSearch r;
  SearchSpace space = in.space;
  auto summary = summarizeIteration(*copy, error, &r.totals);
  if (!summary) {
    error = "--report: " + error;
    return std::nullopt;
  }
  r.summary = std::move(*summary);
  r.summary.compute = options.products;
  r.summary.ranks = options.ranks;
  r.summary.zeroStage = options.zero;
  r.summary.zeroOptimizerBytes = zeroOptimizerBytesPerRank(r.summary);
  if (options.microbatches && r.summary.batchSize &&
      r.summary.batchSize % *options.microbatches) {
    error = llvm::formatv("--microbatches {0} does not divide the batch "
                          "of {1} (the leading dimension of the step's "
                          "inputs)",
                          *options.microbatches, r.summary.batchSize);
    return std::nullopt;
  }
  // Master weights apart from the parameters exist under bf16-mixed only
  // (sched-place says the same of a whole class).
  if (const ClassSpec &m = in.spec[TensorClass::Master];
      m.byLayer() && !r.summary.bf16Storage) {
    error = "--place '" + (m.cuts.empty() ? m.text : m.cuts.front().text) +
            "': there are no separate master weights to place; the f32 "
            "parameters are their own master weights, so place them with "
            "params (a model compiled with --precision bf16-mixed has f32 "
            "master weights next to its bf16 parameters)";
    return std::nullopt;
  }
  // Layer ranges and fractions of --place pin layers, each weighed by its
  // parameters' bytes as sched-place weighs them.
  std::vector<uint64_t> layerBytes;
  for (const LayerCost &l : r.summary.layers)
    layerBytes.push_back(l.paramBytes);
  for (int k = 0; k < kNumTensorClasses; ++k) {
    const ClassSpec &cs = in.spec.classes[k];
    if (!cs.byLayer())
      continue;
    std::string warning;
    auto pins = resolveLayers(cs, TensorClass(k), layerBytes, std::nullopt,
                              error, &warning);
    if (!warning.empty())
      mlir::emitWarning(step.getLoc()) << "--place: " << warning;
    if (!pins) {
      error = "--place: " + error;
      return std::nullopt;
    }
    // A split lives off the GPU but for the parameters and activations
    // (sched-place says the same).
    const bool onGpu = llvm::any_of(
        *pins, [](std::optional<Tier> t) { return t == Tier::GPU; });
    const bool offGpu = llvm::any_of(
        *pins, [](std::optional<Tier> t) { return t && t != Tier::GPU; });
    if (onGpu && (offGpu || llvm::is_contained(*pins, std::nullopt)) &&
        TensorClass(k) != TensorClass::Params &&
        TensorClass(k) != TensorClass::Activations) {
      error = "--place '" + cs.text + "' puts some layers of " +
              tensorClassName(TensorClass(k)) +
              " on the GPU and leaves others off it: a class split by "
              "layer lives on host and SSD (the GPU's tier is all of a "
              "class or none, but for params and activations); place the "
              "rest with " +
              tensorClassName(TensorClass(k)) + "=host or " +
              tensorClassName(TensorClass(k)) + "=ssd";
      return std::nullopt;
    }
    // Every layer pinned: the class is fixed, its tier the slowest.
    if (!llvm::is_contained(*pins, std::nullopt)) {
      Tier slowest = Tier::GPU;
      for (std::optional<Tier> t : *pins)
        slowest = std::max(slowest, *t);
      space.pinned[k] = slowest;
    }
    space.pinnedLayers[k] = std::move(*pins);
    for (const ClassSpec::Cut &cut : cs.cuts)
      space.pinnedCuts[k][size_t(cut.layer)] = cut.host();
  }
  copy->walk([&](train::FoamOp f) {
    r.foamParams.push_back(f.getParam().str());
    r.foamLevel = int64_t(f.getLevelAttr().getInt());
  });
  r.choice = choose(r.summary, space, in.budgets, in.profile);
  r.space = space;
  r.budgets = in.budgets;
  r.profile = in.profile;
  r.deviceMemoryBytes = in.profile.gpuMemoryBytes;
  if (!r.choice.best.valid) {
    // Say why with the first candidate of the space under the pins.
    Candidate c;
    c.order = in.space.orders.front();
    c.microBatches = in.space.microBatches.front();
    c.overlap = in.space.overlaps.front();
    c.placement.cuts = space.pinnedCuts;
    for (int k = 0; k < kNumTensorClasses; ++k) {
      if (space.pinned[k])
        c.placement.tier[k] = *space.pinned[k];
      const auto &pins = space.pinnedLayers[k];
      if (!pins.empty() && !llvm::is_contained(pins, std::nullopt)) {
        c.placement.layers[k].clear();
        for (std::optional<Tier> t : pins)
          c.placement.layers[k].push_back(*t);
      }
    }
    c.placement.normalize();
    CostEstimate e = estimate(r.summary, c, in.budgets, in.profile);
    error = "no valid plan: " +
            (e.valid ? r.choice.best.invalidReason : e.invalidReason);
    return std::nullopt;
  }
  return r;
}

std::string spillway::costModelOverBudget(const PlanSearch &search,
                                          const PlanSpace &in) {
  const CostEstimate &best = search.choice.best;
  if (best.fits)
    return {};
  const auto &need = best.neededBytes;
  return "plan over budget: no plan fits gpu " +
         bytesAndGiB(in.budgets.gpuBytes) + ", host " +
         bytesAndGiB(in.budgets.hostBytes) + "; the closest (" +
         best.candidate.str() + ") needs at least gpu " +
         bytesAndGiB(need[int(Tier::GPU)]) + ", host " +
         bytesAndGiB(need[int(Tier::Host)]) + ", ssd " +
         bytesAndGiB(need[int(Tier::SSD)]);
}

ScheduleOptions spillway::residentSchedule(const PlanningOptions &options,
                                           const CostEstimate *estimate) {
  ScheduleOptions s;
  s.microbatches = options.exeMicrobatches();
  s.order = options.order ? *options.order
            : estimate    ? estimate->candidate.order
                          : options.exeOrder();
  s.overlapFraction = options.exeOverlap();
  s.recompute = options.recompute;
  s.outlineTasks = options.outlineTasks;
  return s;
}

ScheduleOptions spillway::offloadSchedule(const PlanningOptions &options,
                                          const PlanSearch *search,
                                          const CostEstimate *estimate) {
  ScheduleOptions s = residentSchedule(options, estimate);
  OffloadOptions o;
  // Without the cost model, --place as given (sched-place checks it and
  // resolves its ranges and fractions); with it, the chosen plan's
  // placement, which holds the pins: each class's tier and the layers of a
  // class split by layer.
  if (!(search && estimate)) {
    for (const std::string &entry : options.place)
      o.placement += (o.placement.empty() ? "" : ",") + entry;
  } else {
    // Master weights only under bf16-mixed (the summary's masterBytes):
    // elsewhere sched-place refuses the class, placed or not.
    const bool hasMaster = search->summary.bf16Storage;
    const bool masterGiven = llvm::any_of(options.place, [](StringRef e) {
      return e.trim().starts_with("master");
    });
    const Placement &pl = estimate->candidate.placement;
    for (TensorClass c :
         {TensorClass::Params, TensorClass::Master, TensorClass::Optimizer,
          TensorClass::Gradients, TensorClass::Activations}) {
      if (c == TensorClass::Master && !hasMaster && !masterGiven)
        continue;
      o.placement += std::string(o.placement.empty() ? "" : ",") +
                     tensorClassName(c) + "=" + tierName(pl[c]);
      if (pl.split(c))
        o.placement += "," + layerRanges(c, pl.layers[int(c)], pl[c]);
      if (!pl.cuts[int(c)].empty())
        o.placement += "," + cutItems(c, pl.cuts[int(c)]);
    }
  }
  o.gpuBytes = options.gpuMem.value_or(0);
  o.hostBytes = options.hostMem.value_or(0);
  o.deviceBytes = search ? search->deviceMemoryBytes : 0;
  s.offload = std::move(o);
  return s;
}

namespace {
/// Runs the schedule pipeline of `plan` on `module`; `overBudget` receives
/// what sched-assign-buffers reports.
LogicalResult runPlan(ModuleOp module, OffloadPlan &plan,
                      std::optional<sched::OverBudget> &overBudget,
                      const PlanningOptions &options) {
  overBudget.reset();
  plan.schedule.offload->onOverBudget = [&](const sched::OverBudget &o) {
    overBudget = o;
  };
  PassManager pm(module.getContext());
  if (options.instrument)
    options.instrument(pm);
  populateSchedulePipeline(pm, plan.schedule);
  LogicalResult ran = pm.run(module);
  plan.schedule.offload->onOverBudget = nullptr;
  return ran;
}

/// Runs `plan` on a copy of `unplanned` into `trial`, its diagnostics
/// silenced (a plan the exact arenas refuse is not the user's error yet).
LogicalResult tryPlan(ModuleOp unplanned, OwningOpRef<ModuleOp> &trial,
                      OffloadPlan &plan,
                      std::optional<sched::OverBudget> &overBudget,
                      const PlanningOptions &options) {
  trial = unplanned.clone();
  ScopedDiagnosticHandler quiet(unplanned.getContext(),
                                [](Diagnostic &) { return success(); });
  return runPlan(*trial, plan, overBudget, options);
}

/// The cost model's prediction for the plan, for the executable's report.
void recordPrediction(ModuleOp module, const CostEstimate &e) {
  Builder b(module.getContext());
  module->setAttr(
      "sched.prediction",
      b.getDictionaryAttr(
          {b.getNamedAttr("iteration_s", b.getF64FloatAttr(e.iterationSec)),
           b.getNamedAttr("bound", b.getStringAttr(boundName(e.bound)))}));
}
/// Whether a scheduled step keeps anything on SSD: it reads or writes SSD
/// bytes (sched.buffers' bytes_per_iteration). A layer's activations on
/// SSD have no home block, so the blocks' homes do not say it.
bool usesSsd(ModuleOp m) {
  auto buffers = m->getAttrOfType<DictionaryAttr>("sched.buffers");
  auto bytes =
      buffers ? buffers.getAs<DictionaryAttr>("bytes_per_iteration") : nullptr;
  if (!bytes)
    return false;
  auto moved = [&](StringRef link) {
    auto v = bytes.getAs<IntegerAttr>(link);
    return v && v.getInt() > 0;
  };
  return moved("ssd_read") || moved("ssd_write");
}

/// A tier's arena in a scheduled step (sched.buffers' gpu_bytes or
/// host_bytes).
uint64_t exactBytes(ModuleOp m, StringRef key) {
  auto buffers = m->getAttrOfType<DictionaryAttr>("sched.buffers");
  auto bytes = buffers ? buffers.getAs<IntegerAttr>(key) : nullptr;
  return bytes ? bytes.getValue().getZExtValue() : 0;
}
uint64_t exactHostBytes(ModuleOp m) { return exactBytes(m, "host_bytes"); }

/// Placement by layer, refilled with the exact arenas (docs/cost-model.md):
/// the model's peaks estimate sched-assign-buffers' arenas, mostly from
/// above (it double-buffers every staged class; the arenas mostly take
/// one slot, docs/cost-model.md), so a plan filled to the model's budgets
/// leaves some of the real host budget unused (or the model fits nothing
/// where the arenas fit). While the exact host arena is under the
/// budget, fill again (schedule::fillHost, from the plan kept) as if each
/// budget were larger by the model's excess over the plan's arena, and keep
/// the plan when its exact arenas fit; when they do not, try half the host
/// excess.
/// `unplanned` is the step before scheduling; `planned` and `plan` are the
/// plan kept, replaced by a fuller one that fits.
void refillHost(ModuleOp unplanned, OwningOpRef<ModuleOp> &planned,
                OffloadPlan &plan, const PlanSearch &search,
                const PlanningOptions &options) {
  if (!plan.estimate || !search.space.splitByLayer || !options.hostMem)
    return;
  const uint64_t budget = search.budgets.hostBytes;
  uint64_t exact = exactHostBytes(*planned);
  auto modelHost = [&] {
    return double(plan.estimate->neededBytes[int(Tier::Host)]);
  };
  // The model's host budget that matches the real one for the plan kept:
  // the budget plus the model's excess (or less its shortfall).
  double target = double(budget) + modelHost() - double(exact);
  // The GPU's excess stays: the GPU arena does not change with the host's.
  const uint64_t gpuExcess = uint64_t(
      std::max<int64_t>(0, int64_t(plan.estimate->neededBytes[int(Tier::GPU)]) -
                               int64_t(exactBytes(*planned, "gpu_bytes"))));
  // Nothing left on SSD (no SSD bytes moved), or within 1% of the budget:
  // a cut (fillHost's last step, growCut's after) fills the rest, so
  // another round gains little.
  auto full = [&] {
    return !usesSsd(*planned) || budget - exact < budget / 100;
  };
  for (int round = 0;
       round < 10 && exact < budget && target > modelHost() && !full();
       ++round) {
    Budgets inflated = search.budgets;
    inflated.hostBytes = uint64_t(target);
    inflated.gpuBytes += gpuExcess;
    auto filled = fillHost(search.summary, search.space, *plan.estimate,
                           inflated, search.profile);
    if (!filled || filled->candidate.str() == plan.estimate->candidate.str())
      return; // no SSD block left that the model's budget takes
    OffloadPlan next = plan;
    next.schedule = offloadSchedule(options, &search, &*filled);
    OwningOpRef<ModuleOp> trial;
    std::optional<sched::OverBudget> overBudget;
    if (failed(tryPlan(unplanned, trial, next, overBudget, options))) {
      // Too full: halfway back to the plan kept.
      target = (target + modelHost()) / 2;
      continue;
    }
    // Kept: its estimate under the real budgets (the exact arenas fit).
    CostEstimate e = estimate(search.summary, filled->candidate, search.budgets,
                              search.profile);
    next.estimate = std::move(e);
    plan = std::move(next);
    planned = std::move(trial);
    exact = exactHostBytes(*planned);
    plan.estimate->splitNote =
        filled->splitNote +
        llvm::formatv("; refilled with the exact arenas: host {0} bytes, "
                      "{1:f1}% of --host-mem",
                      exact, 100.0 * double(exact) / double(budget))
            .str();
    target = double(budget) + modelHost() - double(exact);
  }
}
/// The fill's cut (one of its own, not a pinned one) grown by what the
/// plan's exact host arena leaves of the budget: part 0's extent takes it
/// byte for byte, where the model's peaks, estimates, stopped the fill
/// short (the refill's rounds move whole blocks, whose exact arenas the
/// model can misjudge by more than the rest). When that cut holds all of
/// its block but a granule, or the fill cut none, the first block wholly on
/// SSD that can be cut (params, master, optimizer; layer order) is cut
/// for the rest. Each growth halves while the exact arenas do not fit.
void growCut(ModuleOp unplanned, OwningOpRef<ModuleOp> &planned,
             OffloadPlan &plan, const PlanSearch &search,
             const PlanningOptions &options) {
  if (!plan.estimate || !search.space.splitByLayer || !options.hostMem)
    return;
  const IterationSummary &s = search.summary;
  const uint64_t budget = search.budgets.hostBytes;
  const int64_t g = cutGranule(s.bf16Storage || s.bf16OptimizerState);
  const TensorClass cuttable[] = {TensorClass::Params, TensorClass::Master,
                                  TensorClass::Optimizer};
  // Grows (or makes) the cut of block (k, l) from e elements on host;
  // true when the block is then cut all but a granule (more room may go to
  // another block).
  auto grow = [&](TensorClass k, size_t l, int64_t e) {
    const int64_t n = int64_t(s.layers[l].numParams);
    const double perElement = double(blockBytes(s.layers[l], k)) / double(n);
    const uint64_t exact = exactHostBytes(*planned);
    for (uint64_t room = exact < budget ? (budget - exact) / 4096 * 4096 : 0;
         room >= 4096; room /= 2) {
      const int64_t grown = std::min<int64_t>(
          e + int64_t(double(room) / perElement) / g * g, n - g);
      if (grown <= e)
        return e >= n - g;
      Candidate c = plan.estimate->candidate;
      c.placement.cuts[int(k)][l] = double(grown) / double(n);
      OffloadPlan next = plan;
      next.estimate = estimate(s, c, search.budgets, search.profile);
      if (!next.estimate->valid)
        return false;
      next.schedule = offloadSchedule(options, &search, &*next.estimate);
      OwningOpRef<ModuleOp> trial;
      std::optional<sched::OverBudget> overBudget;
      if (failed(tryPlan(unplanned, trial, next, overBudget, options)))
        continue;
      const uint64_t got = exactHostBytes(*trial);
      const std::string &before = plan.estimate->splitNote;
      next.estimate->splitNote =
          (before.empty() ? std::string("split by layer") : before) +
          llvm::formatv("; {0} of layer {1} cut to {2:f1}% with the exact "
                        "arenas: host {3} bytes, {4:f1}% of --host-mem",
                        tensorClassName(k), l,
                        100.0 * double(grown) / double(n), got,
                        100.0 * double(got) / double(budget))
              .str();
      plan = std::move(next);
      planned = std::move(trial);
      return grown >= n - g;
    }
    return e >= n - g;
  };
  // The fill's own cut first (a copy: grow() replaces the plan).
  const auto cuts = plan.estimate->candidate.placement.cuts;
  bool full = true;
  for (TensorClass k : cuttable)
    for (auto [l, share] : cuts[int(k)])
      if (!search.space.pinnedCuts[int(k)].count(l) && l < s.layers.size() &&
          full) {
        const int64_t n = int64_t(s.layers[l].numParams);
        full = n && blockBytes(s.layers[l], k) &&
               grow(k, l, cutElements(share, n, g));
      }
  if (!full)
    return;
  for (TensorClass k : cuttable) {
    const auto &pins = search.space.pinnedLayers[int(k)];
    for (size_t l = 0; l < s.layers.size(); ++l) {
      const Candidate &c = plan.estimate->candidate;
      if ((l < pins.size() && pins[l]) ||
          (search.space.pinned[int(k)] && pins.empty()) ||
          !plannerMayCut(s, c.placement, k, l, c.overlap))
        continue;
      if (!grow(k, l, 0))
        return;
    }
  }
}

/// Placement by layer from the other end: the kept plan's order, M, F and
/// activations with every class it may split homed on SSD (pins kept),
/// refilled with the exact arenas. The greedy fill is path-dependent: a
/// class the kept plan holds whole on host is, from here, a set of blocks
/// that compete by SSD time saved per byte with the others', which can
/// write fewer SSD bytes in the same budget. Kept when it ranks first
/// (schedule::preferred, both fitting: their exact arenas do).
void fillFromSsd(ModuleOp unplanned, OwningOpRef<ModuleOp> &planned,
                 OffloadPlan &plan, const PlanSearch &search,
                 const PlanningOptions &options) {
  // Homing blocks on SSD never makes a plan that writes none faster.
  if (!plan.estimate || !search.space.splitByLayer || !options.hostMem ||
      plan.estimate->bytes.ssdWrite + plan.estimate->bytes.ssdRead == 0)
    return;
  Candidate c = plan.estimate->candidate;
  bool changed = false;
  for (TensorClass k : {TensorClass::Params, TensorClass::Master,
                        TensorClass::Optimizer, TensorClass::Gradients}) {
    const auto &pins = search.space.pinnedLayers[int(k)];
    if (c.placement[k] == Tier::GPU ||
        (search.space.pinned[int(k)] && pins.empty()))
      continue;
    std::vector<Tier> tiers(search.summary.layers.size(), Tier::SSD);
    for (size_t l = 0; l < pins.size() && l < tiers.size(); ++l)
      if (pins[l])
        tiers[l] = *pins[l];
    changed |= tiers != std::vector<Tier>(tiers.size(), c.placement.at(k, 0)) ||
               c.placement.split(k);
    c.placement.layers[int(k)] = std::move(tiers);
  }
  c.placement.normalize();
  if (!changed || c.str() == plan.estimate->candidate.str())
    return;
  OffloadPlan alt = plan;
  alt.estimate = estimate(search.summary, c, search.budgets, search.profile);
  if (!alt.estimate->valid)
    return;
  alt.schedule = offloadSchedule(options, &search, &*alt.estimate);
  OwningOpRef<ModuleOp> trial;
  std::optional<sched::OverBudget> overBudget;
  if (failed(tryPlan(unplanned, trial, alt, overBudget, options)))
    return;
  refillHost(unplanned, trial, alt, search, options);
  growCut(unplanned, trial, alt, search, options);
  CostEstimate a = *alt.estimate, k = *plan.estimate;
  a.fits = k.fits = true;
  if (!preferred(a, k, search.budgets))
    return;
  plan = std::move(alt);
  planned = std::move(trial);
}
} // namespace

OffloadOutcome
spillway::planOffload(OwningOpRef<ModuleOp> &module,
                      const PlanningOptions &options, const PlanSearch *search,
                      const std::function<void(const OffloadPlan &)> &announce) {
  OffloadOutcome out;
  auto planFor = [&](size_t rank) {
    OffloadPlan p;
    // Rank 0 is the cost model's best plan (ranked starts with it).
    const CostEstimate *e = !search      ? nullptr
                            : rank == 0 ? &search->choice.best
                                        : &search->choice.ranked[rank];
    p.schedule = offloadSchedule(options, search, e);
    if (e)
      p.estimate = *e;
    p.rank = rank;
    return p;
  };
  // With a cost model the planner has the last word on fitting: its arenas
  // (homes, transfer slots, alignment) are exact where the model's peaks
  // are estimates. Take the first ranked plan whose schedule the budgets
  // hold; stop at the first that fails for another reason (its error is
  // the answer).
  const bool budgeted = options.gpuMem || options.hostMem;
  if (search && budgeted && search->choice.ranked.size() > 1) {
    // Plans split by layer come in families (one fill per seed, alike in
    // what the model misses about the exact arenas): after kMaxSplit of
    // them fail, only whole-class plans are tried (kMaxPlans of them, as
    // without splitting), which the refill then splits with the exact
    // arenas.
    constexpr size_t kMaxPlans = 32, kMaxSplit = 8;
    size_t tried = 0, splitTried = 0;
    for (size_t i = 0; i < search->choice.ranked.size() && tried < kMaxPlans;
         ++i) {
      const Placement &pl = search->choice.ranked[i].candidate.placement;
      const bool split =
          llvm::any_of(pl.layers,
                       [](const std::vector<Tier> &v) { return !v.empty(); }) ||
          llvm::any_of(pl.cuts, [](const auto &c) { return !c.empty(); });
      if (split && splitTried == kMaxSplit)
        continue;
      (split ? splitTried : tried) += 1;
      OffloadPlan plan = planFor(i);
      OwningOpRef<ModuleOp> trial;
      std::optional<sched::OverBudget> overBudget;
      if (succeeded(tryPlan(*module, trial, plan, overBudget, options))) {
        refillHost(*module, trial, plan, *search, options);
        growCut(*module, trial, plan, *search, options);
        fillFromSsd(*module, trial, plan, *search, options);
        if (announce)
          announce(plan);
        module = std::move(trial);
        recordPrediction(*module, *plan.estimate);
        out.succeeded = true;
        out.plan = std::move(plan);
        return out;
      }
      if (!overBudget)
        break; // another error: the plain run below reports it
    }
  }
  // The first plan, whose diagnostics are the user's answer if it fails.
  out.plan = planFor(0);
  if (announce)
    announce(out.plan);
  out.succeeded = succeeded(runPlan(*module, out.plan, out.overBudget, options));
  if (out.succeeded && out.plan.estimate)
    recordPrediction(*module, *out.plan.estimate);
  return out;
}
