//===- Report.cpp - spillwayc --report: the planned iteration as text/JSON -===//

#include "Report.h"

#include "spillway/runtime/zero_shard.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <cmath>

using namespace spillway::schedule;

namespace {
int64_t roundBytes(double b) { return int64_t(std::llround(b)); }

/// `arenasFit`: the plan compiled, so its exact arenas (sched-assign-buffers)
/// fit the budgets whatever the model's peaks say.
void printEstimate(const char *label, const CostEstimate &e,
                   llvm::raw_ostream &os, bool arenasFit = false) {
  os << label << e.candidate.str() << "\n";
  if (!e.valid) {
    os << "  invalid: " << e.invalidReason << "\n";
    return;
  }
  if (!e.splitNote.empty())
    os << "  " << e.splitNote << "\n";
  os << llvm::formatv("  predicted iteration: {0:e3} s, bound: {1}\n",
                      e.iterationSec, boundName(e.bound));
  os << llvm::formatv("  time per resource: compute {0:e3} s, pcie {1:e3} s, "
                      "ssd {2:e3} s, cpu_optimizer {3:e3} s, exposed "
                      "optimizer {4:e3} s ({5} optimizer)\n",
                      e.computeSec, e.pcieSec, e.ssdSec, e.cpuOptimizerSec,
                      e.exposedOptimizerSec, e.optimizerOnGPU ? "gpu" : "cpu");
  os << "  bytes per iteration: ssd_read " << roundBytes(e.bytes.ssdRead)
     << ", ssd_write " << roundBytes(e.bytes.ssdWrite) << ", h2d "
     << roundBytes(e.bytes.h2d) << ", d2h " << roundBytes(e.bytes.d2h) << "\n";
  if (e.bytes.network > 0)
    os << llvm::formatv(
        "  network per rank: {0} bytes sent per iteration "
        "(and as many received) to {1}, {2:e3} s, {3}\n",
        roundBytes(e.bytes.network),
        e.gradientsSharded ? "exchange the gradients and all-gather the "
                             "updated values (--zero 2)"
        : e.zeroSharded    ? "exchange the gradients and "
                             "all-gather the updated values "
                             "(--zero 1)"
                           : "average the gradients",
        e.networkSec,
        e.gradientsSharded ? llvm::formatv("of which {0:e3} s overlaps the "
                                           "backward, the rest added to the "
                                           "iteration",
                                           e.hiddenNetworkSec)
                                 .str()
                           : std::string("added to the iteration"));
  if (e.optimizerStateBytes.ssdRead || e.optimizerStateBytes.ssdWrite)
    os << "  of them optimizer state: ssd_read "
       << roundBytes(e.optimizerStateBytes.ssdRead) << ", ssd_write "
       << roundBytes(e.optimizerStateBytes.ssdWrite) << "\n";
  os << "  peak bytes: gpu " << e.peakBytes[int(Tier::GPU)] << ", host "
     << e.peakBytes[int(Tier::Host)] << ", ssd " << e.peakBytes[int(Tier::SSD)]
     << (e.fits      ? " (fits)"
         : arenasFit ? " (over budget by the cost model's peaks, which "
                       "are estimates; the plan's exact arenas fit)"
                     : " (over budget)")
     << "\n";
}

/// Optimizer state bytes of the model, by optimizer kind.
struct StateBytes {
  uint64_t total = 0, foam = 0, foamParams = 0;
  /// Blocks cut for ZeRO's ranks (optimizerShards): one rank's bytes (the
  /// layers' optimizerBytes); total is then the whole state's.
  uint64_t perRank = 0;
  /// Bytes per moment element: 4 (f32), 2 under bf16 optimizer state.
  uint64_t elementBytes = 4;
  uint64_t adamw() const { return total - foam; }
  /// What AdamW would keep for the parameters FOAM folds (m and v, in the
  /// same dtype).
  uint64_t foamAsAdamW() const { return 2 * elementBytes * foamParams; }
};

uint64_t masterBytes(const IterationSummary &s) {
  uint64_t b = 0;
  for (const LayerCost &l : s.layers)
    b += l.masterBytes;
  return b;
}

/// One rank's master bytes when the blocks are cut for the ranks: each
/// member's slot (the F = 0 layout, as the optimizer state's figure).
uint64_t masterBytesPerRank(const IterationSummary &s) {
  const int64_t align =
      s.gradClip ? SPW_ZERO_SHARD_ALIGN_CLIPPED : SPW_ZERO_SHARD_ALIGN;
  uint64_t b = 0;
  for (const LayerCost &l : s.layers)
    for (uint64_t n : l.masterElements)
      b += 4 * uint64_t(spw_zero_shard_slot(int64_t(n),
                                            int64_t(s.optimizerShards), align));
  return b;
}

StateBytes stateBytes(const IterationSummary &s) {
  StateBytes b;
  b.elementBytes = s.bf16OptimizerState ? 2 : 4;
  for (const LayerCost &l : s.layers) {
    b.total += l.optimizerBytes;
    b.foam += l.foldedOptimizerBytes;
    b.foamParams += l.foldedParams;
  }
  if (s.optimizerShards > 1) {
    b.perRank = b.total;
    b.total = 0;
    for (const LayerCost &l : s.layers)
      for (uint64_t m : l.momentElements)
        b.total += 2 * b.elementBytes * m;
  }
  return b;
}

/// A plan's SSD wear (docs/cost-model.md, "SSD wear"): its bytes written
/// per iteration, per trained token (or sample), and with --ssd-tbw how
/// long the drives last writing them at the predicted speed.
struct SsdWear {
  double bytesPerIteration = 0;
  double iterationSec = 0; ///< predicted
  uint64_t tokens = 0;  ///< per iteration (0: no token input)
  uint64_t samples = 0; ///< per iteration (0: unknown)
  size_t drives = 0;    ///< the plan's SSDs, the writes striped over them
  std::optional<double> tbw;
  /// Seconds until each drive has written its rated TBW; none without
  /// --ssd-tbw, writes or a predicted time.
  std::optional<double> lifetimeSec;
  double perToken() const { return bytesPerIteration / double(tokens); }
  double perSample() const { return bytesPerIteration / double(samples); }
};

SsdWear ssdWear(const spillwayc::PlanReport &r, double bytes,
                double iterationSec) {
  SsdWear w;
  w.bytesPerIteration = bytes;
  w.iterationSec = iterationSec;
  w.tokens = r.totals.tokensPerIteration;
  w.samples = r.summary.batchSize;
  w.drives = r.profile.ssds.size();
  w.tbw = r.ssdTbw;
  if (w.tbw && bytes > 0 && iterationSec > 0 && w.drives)
    w.lifetimeSec = *w.tbw * 1e12 / (bytes / double(w.drives) / iterationSec);
  return w;
}

/// The chosen plan's: the cost model's bytes.
SsdWear chosenWear(const spillwayc::PlanReport &r) {
  const CostEstimate &e = r.choice.best;
  return ssdWear(r, e.valid ? e.bytes.ssdWrite : 0, e.iterationSec);
}

/// "<head>: N bytes written per iteration<note>, X per trained token
/// (...)" and the lifetime line.
void printWear(const spillwayc::PlanReport &r, const SsdWear &w,
               const char *head, const char *note, llvm::raw_ostream &os) {
  os << head << ": " << roundBytes(w.bytesPerIteration)
     << " bytes written per iteration" << note << ", ";
  if (w.tokens)
    os << llvm::format("%.6g", w.perToken()) << " per trained token ("
       << w.tokens << " tokens per iteration: the elements of input '"
       << r.totals.tokenInput << "')\n";
  else if (w.samples)
    os << llvm::format("%.6g", w.perSample()) << " per sample (batch "
       << w.samples << "; the step has no integer [B, S] token input)\n";
  else
    os << "per token unknown (no integer [B, S] token input, no batch)\n";
  if (!w.tbw) {
    os << "  give --ssd-tbw TB (the drive's rated endurance) for its "
          "lifetime at the predicted speed\n";
    return;
  }
  if (!w.lifetimeSec) {
    os << "  drive lifetime: unknown (no predicted iteration time)\n";
    return;
  }
  const double days = *w.lifetimeSec / 86400;
  os << "  drive lifetime: " << llvm::format("%.4g", days) << " days";
  if (days >= 365.25)
    os << " (" << llvm::format("%.4g", days / 365.25) << " years)";
  os << " until " << (w.drives > 1 ? "each SSD" : "the SSD")
     << " has written its --ssd-tbw " << llvm::format("%g", *w.tbw)
     << " TB, at the predicted " << llvm::formatv("{0:e3}", w.iterationSec)
     << " s per iteration";
  if (w.drives > 1)
    os << " with the writes striped over its " << w.drives << " SSDs";
  os << ", training 24/7\n";
}

void printSsdWear(const spillwayc::PlanReport &r, llvm::raw_ostream &os) {
  if (!r.choice.best.valid)
    return;
  const SsdWear w = chosenWear(r);
  if (w.bytesPerIteration <= 0) {
    // Said only where it answers a question: SSDs to wear, or a rating.
    if (w.drives || w.tbw)
      os << "ssd wear: the chosen plan writes nothing to SSD\n";
    return;
  }
  printWear(r, w, "ssd wear (chosen plan)",
            " (before each transfer's rounding to 4 KiB)", os);
}

llvm::json::Value budgetValue(uint64_t b, bool unlimited) {
  if (unlimited)
    return nullptr;
  return int64_t(b);
}
} // namespace

void spillwayc::printReport(const PlanReport &r, llvm::raw_ostream &os) {
  const IterationSummary &s = r.summary;
  os << "spillwayc report: " << r.model << ", profile '" << r.profile.name
     << "' (" << r.profile.backend << " backend, " << r.profilePath << ")\n";
  if (r.offloadPlan)
    os << "  the executable follows the chosen plan's placement (an offload "
          "plan), with its order, micro-batches and overlap, unless the "
          "planner's exact arenas change it (then shown as executable: "
          "after the report)\n";
  else
    os << "  planning only: the executable does not follow this plan's "
          "placement (it keeps every tensor resident; --microbatches, "
          "--schedule and --overlap-optimizer shape it; --place, --gpu-mem "
          "or --host-mem with -o make it an offload plan)\n";
  os << "model: " << s.layers.size() << " layers, " << r.totals.numParams
     << " parameters, " << r.totals.paramBytes << " parameter bytes";
  if (r.totals.unreadParamBytes)
    os << " (" << r.totals.unreadParamBytes << " of them never read)";
  os << ", batch " << s.batchSize << ", ";
  const char *products = s.compute == Precision::FP32 ? "fp32" : "bf16";
  if (s.bf16Storage)
    os << "bf16-mixed (bf16 activations and working weights, " << products
       << " products, "
       << (s.bf16OptimizerState
               ? "fp32 master weights, bf16 optimizer state)\n"
               : "fp32 master weights and optimizer state)\n");
  else
    os << products << " (parameters are their own master weights)\n";
  const StateBytes sb = stateBytes(s);
  // fp32 state says nothing (the default); bf16 says so where the bytes are.
  os << "optimizer state" << (s.bf16OptimizerState ? " bf16" : "") << ": "
     << sb.total << " bytes";
  if (sb.perRank) {
    os << " (AdamW; the offload plan's blocks hold one rank's shard of each "
          "moment, "
       << sb.perRank << " bytes on each of the " << s.optimizerShards
       << " ranks)\n";
    if (s.bf16Storage)
      os << "master weights: " << masterBytes(s)
         << " bytes (sharded as the state: " << masterBytesPerRank(s)
         << " bytes on each of the " << s.optimizerShards << " ranks)\n";
    if (s.gradientShards) {
      uint64_t whole = 0;
      for (const LayerCost &l : s.layers)
        whole += l.gradBytes;
      os << "gradients: " << whole << " bytes (--zero 2: sharded as the "
         << "state, " << gradBytesPerRank(s) << " bytes on each of the "
         << s.optimizerShards
         << " ranks, reduce-scattered as each layer's backward completes)\n";
    }
  } else if (r.foamParams.empty()) {
    os << " (AdamW)\n";
  } else {
    os << " (AdamW " << sb.adamw() << "; FOAM level " << r.foamLevel << " "
       << sb.foam << " for " << sb.foamParams << " parameters, where AdamW "
       << "would keep " << sb.foamAsAdamW()
       << llvm::formatv(": {0:f2}x less)\n",
                        sb.foam ? double(sb.foamAsAdamW()) / double(sb.foam)
                                : 0.0);
    os << "FOAM folds " << r.foamParams.size() << " weight matrices:";
    for (const std::string &p : r.foamParams)
      os << " " << p;
    os << "\n";
  }
  if (s.gradClip)
    os << "gradient clipping (--grad-clip): the global norm is a barrier "
          "after the last backward; every update waits for it, so none "
          "overlaps the backward (the exposed optimizer time counts all of "
          "the update but the overlap's deferred part, which runs in the "
          "next forward)\n";
  if (s.ranks > 1 && s.zeroStage >= 1)
    os << "data parallel (--ranks, --zero " << (s.gradientShards ? 2 : 1)
       << "): " << s.ranks
       << " ranks, each running this step with these budgets and keeping "
          "its shard of the optimizer state, at most "
       << s.zeroOptimizerBytes << " of " << sb.total
       << " bytes; over the network at "
       << llvm::format("%g", r.profile.networkGBps)
       << " GB/s per rank (the profile's), the gradients reduce-scattered "
          "((N - 1) / N of their bytes sent per rank"
       << (s.gradientShards ? ", at each flush of a layer's gradients: M "
                              "times per iteration in horizontal order"
                            : "")
       << ") and the updated "
       << (s.optimizerShards > 1 && s.bf16Storage
               ? "bf16 working copies (the masters stay sharded)"
               : "f32 values")
       << " all-gathered ((N - 1) / N of theirs) per iteration"
       << (s.gradClip ? "; with clipping the shards are cut at the norm's "
                        "64 Ki-element blocks (a parameter of fewer per "
                        "rank is one rank's)"
                      : "")
       << "\n";
  else if (s.ranks > 1)
    os << "data parallel (--ranks): " << s.ranks
       << " ranks, each running this step with these budgets; the "
          "gradients averaged over the network at "
       << llvm::format("%g", r.profile.networkGBps)
       << " GB/s per rank (the profile's), a ring all-reduce: 2 (N - 1) / N "
          "of their bytes sent per rank per iteration; the state is "
          "replicated on every rank\n";
  os << "layer: name params grads optimizer master activations working "
        "fwd_flops bwd_flops recompute_flops\n";
  for (auto [i, l] : llvm::enumerate(s.layers))
    os << llvm::formatv("  {0}: {1} {2} {3} {4} {5} {6} {7} {8:e4} {9:e4} "
                        "{10:e4}\n",
                        i, l.name, l.paramBytes, l.gradBytes, l.optimizerBytes,
                        l.masterBytes, l.activationBytes, l.workingBytes,
                        l.forwardFlops, l.backwardFlops, l.recomputeFlops);
  os << "budgets: gpu " << r.budgets.gpuBytes << ", host "
     << r.budgets.hostBytes << ", ssd ";
  if (r.ssdUnlimited)
    os << "unlimited";
  else
    os << r.budgets.ssdBytes;
  os << " (SSDs:";
  for (const SSDProfile &d : r.profile.ssds)
    os << " " << d.path;
  if (r.profile.ssds.empty())
    os << " none";
  os << "); " << r.choice.candidatesTried << " candidates\n";
  if (r.choice.best.valid && !r.choice.best.fits)
    os << "over budget: no candidate fits; shown are the ones needing the "
          "least extra memory\n";
  printEstimate("chosen:   ", r.choice.best, os);
  if (r.choice.baseline) {
    printEstimate("baseline: ", *r.choice.baseline, os);
    if (r.choice.best.valid && r.choice.best.fits &&
        r.choice.best.iterationSec > 0)
      os << llvm::formatv("speedup over the baseline: {0:f2}x\n",
                          r.choice.baseline->iterationSec /
                              r.choice.best.iterationSec);
  }
  printSsdWear(r, os);
}

void spillwayc::printExecutablePlan(const CostEstimate &e,
                                    llvm::raw_ostream &os) {
  printEstimate("executable: ", e, os, /*arenasFit=*/true);
}

void spillwayc::printPlanSsdWear(const PlanReport &r, uint64_t planBytes,
                                 double iterationSec, llvm::raw_ostream &os) {
  if (planBytes == 0)
    return;
  printWear(r, ssdWear(r, double(planBytes), iterationSec),
            "ssd wear (the executable's plan)",
            " (each transfer rounded up to 4 KiB, as the swap writes it)", os);
}

std::string spillwayc::reportToJSON(const PlanReport &r) {
  namespace json = llvm::json;
  auto parsed = [](const CostEstimate &e) -> json::Value {
    llvm::Expected<json::Value> v = json::parse(estimateToJSON(e));
    if (!v) {
      llvm::consumeError(v.takeError());
      return nullptr;
    }
    return std::move(*v);
  };
  json::Array layers;
  for (const LayerCost &l : r.summary.layers)
    layers.push_back(json::Object{
        {"name", l.name},
        {"param_bytes", int64_t(l.paramBytes)},
        {"grad_bytes", int64_t(l.gradBytes)},
        {"optimizer_bytes", int64_t(l.optimizerBytes)},
        {"master_bytes", int64_t(l.masterBytes)},
        {"num_params", int64_t(l.numParams)},
        {"activation_bytes", int64_t(l.activationBytes)},
        {"working_bytes", int64_t(l.workingBytes)},
        {"forward_flops", l.forwardFlops},
        {"backward_flops", l.backwardFlops},
        {"recompute_flops", l.recomputeFlops},
    });
  json::Object o{
      {"schema", "spillway-report-1"},
      {"model", r.model},
      {"profile", json::Object{{"name", r.profile.name},
                               {"path", r.profilePath},
                               {"backend", r.profile.backend}}},
      {"planning_only", !r.offloadPlan},
      {"summary",
       json::Object{
           {"batch", int64_t(r.summary.batchSize)},
           {"compute", r.summary.compute == Precision::FP32 ? "fp32" : "bf16"},
           {"storage", r.summary.bf16Storage ? "bf16-mixed" : "fp32"},
           {"optimizer_state_dtype",
            r.summary.bf16OptimizerState ? "bf16" : "fp32"},
           {"param_bytes", int64_t(r.totals.paramBytes)},
           {"unread_param_bytes", int64_t(r.totals.unreadParamBytes)},
           {"num_params", int64_t(r.totals.numParams)},
           {"grad_clip", r.summary.gradClip},
           {"ranks", int64_t(r.summary.ranks)},
           {"zero_stage", int64_t(r.summary.zeroStage)},
           {"optimizer_state_bytes_per_rank",
            int64_t(r.summary.zeroOptimizerBytes)},
           // One rank's gradient blocks (--zero 2: its shards).
           {"gradient_bytes_per_rank", int64_t(gradBytesPerRank(r.summary))},
           {"layers", std::move(layers)}}},
      {"budgets",
       json::Object{{"gpu", budgetValue(r.budgets.gpuBytes, false)},
                    {"ssd_paths",
                     [&] {
                       json::Array a;
                       for (const SSDProfile &d : r.profile.ssds)
                         a.push_back(d.path);
                       return a;
                     }()},
                    {"host", budgetValue(r.budgets.hostBytes, false)},
                    {"ssd", budgetValue(r.budgets.ssdBytes, r.ssdUnlimited)}}},
      {"optimizer_state_bytes",
       [&] {
         const StateBytes sb = stateBytes(r.summary);
         json::Array names;
         for (const std::string &p : r.foamParams)
           names.push_back(p);
         return json::Object{
             {"total", int64_t(sb.total)},
             {"adamw", int64_t(sb.adamw())},
             {"foam", int64_t(sb.foam)},
             {"foam_params", int64_t(sb.foamParams)},
             {"foam_as_adamw", int64_t(sb.foamAsAdamW())},
             {"foam_level", r.foamLevel >= 0 ? json::Value(r.foamLevel)
                                             : json::Value(nullptr)},
             {"foam_folded", std::move(names)}};
       }()},
      {"ssd_wear",
       [&] {
         const SsdWear w = chosenWear(r);
         auto orNull = [](bool known, double v) {
           return known ? json::Value(v) : json::Value(nullptr);
         };
         return json::Object{
             {"bytes_per_iteration", roundBytes(w.bytesPerIteration)},
             {"tokens_per_iteration",
              w.tokens ? json::Value(int64_t(w.tokens)) : json::Value(nullptr)},
             {"token_input",
              w.tokens ? json::Value(r.totals.tokenInput) : json::Value(nullptr)},
             {"bytes_per_token", orNull(w.tokens, w.tokens ? w.perToken() : 0)},
             {"samples_per_iteration",
              w.samples ? json::Value(int64_t(w.samples)) : json::Value(nullptr)},
             {"bytes_per_sample",
              orNull(w.samples, w.samples ? w.perSample() : 0)},
             {"ssds", int64_t(w.drives)},
             {"tbw", orNull(bool(w.tbw), w.tbw.value_or(0))},
             {"lifetime_s",
              orNull(bool(w.lifetimeSec), w.lifetimeSec.value_or(0))}};
       }()},
      {"candidates_tried", int64_t(r.choice.candidatesTried)},
      {"chosen", parsed(r.choice.best)},
      {"baseline",
       r.choice.baseline ? parsed(*r.choice.baseline) : json::Value(nullptr)},
  };
  if (r.executable)
    o["executable"] = parsed(*r.executable);
  if (r.arenas)
    o["arenas"] = json::Object{{"gpu", int64_t(r.arenas->gpu)},
                               {"host", int64_t(r.arenas->host)},
                               {"ssd", int64_t(r.arenas->ssd)},
                               {"step", r.arenas->step < 0
                                            ? json::Value(nullptr)
                                            : json::Value(r.arenas->step)}};
  std::string out;
  llvm::raw_string_ostream os(out);
  os << llvm::formatv("{0:2}", json::Value(std::move(o))) << "\n";
  return out;
}
