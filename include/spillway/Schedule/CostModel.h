//===- CostModel.h - roofline cost of one training iteration ---------------===//
//
// Given what one iteration computes and stores per layer (IterationSummary),
// a way to run it (Candidate: order, micro-batches, optimizer overlap, the
// tier of each tensor class), budgets and a HardwareProfile, predicts the
// bytes over every link, the time each resource needs, the bound and the
// iteration time, and the peak memory per tier. `choose` searches the
// candidates. docs/cost-model.md states every formula and assumption; the
// tests in unittests/Schedule check them on hand-computed examples.
//
// Plain C++: the sched passes build an IterationSummary from the IR and call
// this; nothing here depends on a dialect.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_SCHEDULE_COSTMODEL_H
#define SPILLWAY_SCHEDULE_COSTMODEL_H

#include "spillway/Schedule/HardwareProfile.h"
#include "spillway/runtime/tier.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace spillway::schedule {

/// One layer of the iteration, in forward order. Byte counts are for the
/// whole layer; FLOPs and activations are for the whole batch (one
/// iteration) and are divided evenly among the M micro-batches.
struct LayerCost {
  std::string name;
  uint64_t paramBytes = 0;     ///< compute-precision parameters (bf16, or f32)
  uint64_t masterBytes = 0;    ///< fp32 master weights; 0: the parameters are their own master
  uint64_t optimizerBytes = 0; ///< optimizer state (AdamW: m and v; FOAM: folded)
  uint64_t foldedParams = 0;   ///< of numParams, those FOAM updates
  uint64_t foldedOptimizerBytes = 0; ///< of optimizerBytes, FOAM's folded m and v
  uint64_t gradBytes = 0;      ///< the accumulated gradient
  uint64_t numParams = 0;      ///< parameters the optimizer updates
  uint64_t activationBytes = 0; ///< boundary activation kept for backward, whole batch
  uint64_t workingBytes = 0;   ///< GPU scratch while the layer runs, whole batch
  double forwardFlops = 0;     ///< whole batch
  double backwardFlops = 0;    ///< whole batch
  double recomputeFlops = 0;   ///< forward recomputed inside backward, whole batch
  /// The layers owning parameters this one reads too (a tied weight's
  /// owner): a load of this layer brings their parameter blocks as well.
  std::vector<size_t> readsParamsOf;
  /// Per parameter the optimizer updates, the elements of each of its two
  /// moments (optimizerBytes sums them, or their per-rank slots under
  /// IterationSummary::optimizerShards): ZeRO shards each on its own.
  std::vector<uint64_t> momentElements;
  /// bf16-mixed: per parameter the layer owns, its elements (masterBytes:
  /// 4 bytes each). An offload plan sharded over the ranks
  /// (IterationSummary::optimizerShards) cuts the master blocks as the
  /// state: the cost model sizes one rank's from these.
  std::vector<uint64_t> masterElements;
  /// Per parameter with a gradient (gradBytes: 4 bytes each), its elements:
  /// an offload plan whose gradient blocks are cut for the ranks
  /// (IterationSummary::gradientShards) sizes one rank's from these.
  std::vector<uint64_t> gradElements;
};

enum class Precision { BF16, FP32 };

struct IterationSummary {
  std::vector<LayerCost> layers;
  Precision compute = Precision::BF16; ///< which GPU rate applies
  /// bf16-mixed (train-mixed-precision's train.precision): activations and
  /// the working weights are stored as bf16 (paramBytes: 2 per element),
  /// next to the f32 master weights (masterBytes: 4 per element).
  bool bf16Storage = false;
  /// train.optimizer_state_dtype = "bf16": the optimizer keeps its moments
  /// as bf16 (optimizerBytes: 2 per moment element, not 4).
  bool bf16OptimizerState = false;
  /// Samples per iteration; a candidate's M must divide it (0: any M).
  uint64_t batchSize = 0;
  /// Global gradient-norm clipping (train.clip_grad_norm): a barrier after
  /// the last backward. No update runs inside the backward; only the
  /// overlap's deferred part (in the next forward) hides.
  bool gradClip = false;
  /// Data-parallel ranks (spillwayc --ranks): each runs this step (its
  /// batch is each rank's) and the gradients are averaged over the
  /// network, every rank sending and receiving 2 (N - 1) / N of their
  /// bytes per iteration (a ring all-reduce). 1: no network.
  unsigned ranks = 1;
  /// ZeRO stage (spillwayc --zero, the executable's --zero): 1 shards the
  /// optimizer state over the ranks (each keeps 1/N of every parameter's
  /// moments, spillway/runtime/zero_shard.h); the gradients are
  /// reduce-scattered and the updated f32 values all-gathered (an offload
  /// plan's sharded bf16-mixed masters: their bf16 working copies). Resident
  /// plans (every class on the GPU), or an offload plan whose blocks are cut
  /// for the ranks (optimizerShards).
  unsigned zeroStage = 0;
  /// zeroOptimizerBytesPerRank(*this), set with zeroStage: the optimizer
  /// class's bytes on each rank under ZeRO.
  uint64_t zeroOptimizerBytes = 0;
  /// train.optimizer_state_shards: N > 1 when an offload plan's optimizer
  /// blocks are cut for N ranks (spillwayc --zero 1 --ranks N with an
  /// offload plan). Each layer's optimizerBytes is then one rank's: per
  /// moment the largest rank's shard, the block's slot. 1: whole.
  unsigned optimizerShards = 1;
  /// ZeRO stage 2 of an offload plan (spillwayc --zero 2; with
  /// optimizerShards > 1): its gradient blocks hold one rank's shard of
  /// each gradient, laid out as the master blocks are, so every link the
  /// gradients cross carries a rank's shard; each flush of a layer's
  /// gradients reduce-scatters them over the network first.
  bool gradientShards = false;
};

/// Layer l's gradient bytes on one rank: gradBytes, or the slots of its
/// shards when the gradient blocks are cut for the ranks (gradientShards).
uint64_t gradBytesPerRank(const IterationSummary &s, const LayerCost &l);
/// The same summed over the layers.
uint64_t gradBytesPerRank(const IterationSummary &s);

enum class Order { Horizontal, Snake };
/// The runtime ABI's tiers (spillway/runtime/tier.h), by the same numbers.
enum class Tier { GPU = SPW_TIER_GPU, Host = SPW_TIER_HOST, SSD = SPW_TIER_SSD };
enum class TensorClass { Params, Master, Optimizer, Gradients, Activations };
constexpr int kNumTensorClasses = 5;
constexpr int kNumTiers = SPW_NUM_TIERS;

const char *orderName(Order o);        ///< "horizontal", "snake"
const char *tierName(Tier t);          ///< "gpu", "host", "ssd"
const char *tensorClassName(TensorClass c); ///< "params", "master", ...
std::optional<Order> parseOrder(const std::string &s);
std::optional<Tier> parseTier(const std::string &s);
std::optional<TensorClass> parseTensorClass(const std::string &s);

struct Placement {
  /// Each class's tier; for a class split by layer, the slowest of its
  /// layers' (docs/cost-model.md, "Placement by layer").
  std::array<Tier, kNumTensorClasses> tier{Tier::GPU, Tier::GPU, Tier::GPU,
                                           Tier::GPU, Tier::GPU};
  /// A class split by layer: the home of each layer's block, host or SSD
  /// (params and activations: the GPU too); empty: `tier` for every layer.
  std::array<std::vector<Tier>, kNumTensorClasses> layers;
  /// Blocks cut between host and SSD (params, master, optimizer): per
  /// class, layer -> the share of its elements on host (the block's home is
  /// SSD; sched-place rounds the share to cutElements).
  std::array<std::map<size_t, double>, kNumTensorClasses> cuts;
  Tier &operator[](TensorClass c) { return tier[int(c)]; }
  Tier operator[](TensorClass c) const { return tier[int(c)]; }
  /// The home of layer `l`'s block of class `c`.
  Tier at(TensorClass c, size_t l) const {
    const std::vector<Tier> &v = layers[int(c)];
    return l < v.size() ? v[l] : tier[int(c)];
  }
  /// The share of layer `l`'s block of class `c` on host, cut or not.
  double cutShare(TensorClass c, size_t l) const {
    auto it = cuts[int(c)].find(l);
    return it == cuts[int(c)].end() ? 0 : it->second;
  }
  bool split(TensorClass c) const { return !layers[int(c)].empty(); }
  /// Makes a class whose layers all sit on one tier whole again, and a
  /// split class's tier the slowest of its layers'.
  void normalize();
  /// "params=ssd,master=host,...", then a split class's faster layers as
  /// ranges ("optimizer[0:6]=host"): what sched-place reads.
  std::string str() const;
};

/// The optimizer overlap's granule: a layer's deferred elements are a whole
/// number of 64-element (256-byte f32) granules, the GPU arena's alignment,
/// so the deferred and the rest of a split block sit back to back there.
constexpr int64_t kDeferGranule = 64;
/// The granule in elements for a plan whose blocks hold 2-byte elements
/// (bf16 working copies under bf16-mixed, bf16 optimizer moments): twice
/// kDeferGranule, so that every block splits 256-byte aligned at the same
/// element (sched-overlap-optimizer's elementGranule).
inline int64_t deferGranule(bool twoByteBlocks) {
  return twoByteBlocks ? 2 * kDeferGranule : kDeferGranule;
}
/// A cut block's host part is a whole number of `granule` elements, the
/// optimizer overlap's (256 bytes of the narrowest block), so the parts sit
/// back to back in the GPU arena; each part's extent on host and SSD starts
/// 4 KiB aligned.
inline int64_t cutGranule(bool twoByteBlocks) {
  return deferGranule(twoByteBlocks);
}
/// The elements of an n-element block a cut puts on host for a host share
/// (--place CLASS[L]=host:F,ssd:G): F * n rounded to the nearest granule.
inline int64_t cutElements(double hostShare, int64_t n, int64_t granule) {
  return int64_t(std::llround(hostShare * double(n) / double(granule))) *
         granule;
}
/// A layer's block of class k: its bytes (0: the layer has none).
inline uint64_t blockBytes(const LayerCost &l, TensorClass k) {
  return k == TensorClass::Params        ? l.paramBytes
         : k == TensorClass::Master      ? l.masterBytes
         : k == TensorClass::Optimizer   ? l.optimizerBytes
         : k == TensorClass::Activations ? l.activationBytes
                                         : l.gradBytes;
}
/// Whether the planner may cut layer l's block of class k in `pl` at
/// overlap F: a params, master or optimizer block wholly on SSD, of a
/// layer no cut splits yet, of two granules or more, the overlap deferring
/// none of the layer (a planner's cut takes the budget's share, not the
/// overlap's) and `uncuttable` silent.
bool plannerMayCut(const IterationSummary &s, const Placement &pl,
                   TensorClass k, size_t l, double F);
/// Why layer l's blocks cannot be cut with `share` on host at overlap F
/// (what sched-insert-transfers refuses: updates not elementwise AdamW on
/// every parameter of the layer, or an overlap deferring other elements
/// than the cut's), or "" when they can.
std::string uncuttable(const IterationSummary &s, size_t l, double F,
                       double share);

/// How many of a layer's n updated elements sched-overlap-optimizer defers
/// at fraction F: F * n rounded to the nearest multiple of `granule`, and
/// all n when that reaches n (so F = 1 defers everything).
inline int64_t deferredElements(double F, int64_t n,
                                int64_t granule = kDeferGranule) {
  if (!(F > 0) || n <= 0 || granule <= 0)
    return 0;
  const double units = F * double(n) / double(granule) + 0.5;
  const int64_t d = int64_t(units) * granule; // floor: units >= 0.5
  return F >= 1 || d >= n ? n : d;
}

struct Candidate {
  Order order = Order::Horizontal;
  unsigned microBatches = 1;
  double overlap = 0; ///< fraction of the update moved into the next forward
  Placement placement;
  std::string str() const;
};

struct Budgets {
  uint64_t gpuBytes = 0, hostBytes = 0, ssdBytes = 0;
};

/// Bytes per link per iteration: the keys of --report-json's
/// bytes_per_iteration.
struct LinkBytes {
  double ssdRead = 0, ssdWrite = 0, h2d = 0, d2h = 0;
  /// Sent by each rank (and received) to average the gradients (and with
  /// ZeRO to all-gather the updated values); 0 on one rank
  /// (IterationSummary::ranks).
  double network = 0;
};

enum class Bound { Compute, PCIe, SSD, CPUOptimizer, Network };
/// "compute", "pcie", "ssd", "cpu_optimizer", "network"
const char *boundName(Bound b);

struct CostEstimate {
  Candidate candidate;
  bool valid = true;   ///< false: the candidate is not a way to run it
  std::string invalidReason;
  bool optimizerOnGPU = false;
  LinkBytes bytes;
  /// Of `bytes`, the optimizer state's: read and written once per iteration
  /// where it lives (SSD: ssd_read and ssd_write; elsewhere no link).
  LinkBytes optimizerStateBytes;
  /// The master class's bytes (bf16-mixed): one rank's shards when the
  /// offload plan's blocks are cut for the ranks (optimizerShards).
  uint64_t masterBytes = 0;
  /// Parameter loads per layer (index = layer), for the report and tests.
  std::vector<unsigned> paramLoads;
  // Seconds per iteration each resource needs on its own.
  double computeSec = 0, pcieSec = 0, ssdSec = 0, cpuOptimizerSec = 0;
  /// The gradients' all-reduce (ranks > 1). The runtime averages each
  /// gradient at its update, on the step's thread, so none of it hides:
  /// it adds to the iteration, less `hiddenNetworkSec`.
  double networkSec = 0;
  /// ZeRO stage 2 (gradientsSharded) on the CPU backend: the part of
  /// `networkSec` the reduce-scatters overlap with the backward of the
  /// layers up to the next flush of the sweep (sched-insert-transfers sinks
  /// what reads each; the runtime's exchange thread runs them), so not
  /// added to the iteration. 0 on a GPU, whose NCCL exchanges share the
  /// compute stream.
  double hiddenNetworkSec = 0;
  /// ZeRO stage 1 over the ranks: the network bytes are the gradients'
  /// reduce-scatter and the updated values' all-gather, and the optimizer
  /// class holds one rank's shard.
  bool zeroSharded = false;
  /// ZeRO stage 2 of an offload plan (IterationSummary::gradientShards):
  /// the network bytes reduce-scatter each flush of a layer's gradients.
  bool gradientsSharded = false;
  /// Optimizer time that cannot hide behind compute: the part of the
  /// non-overlapped update left after the last backward ends.
  double exposedOptimizerSec = 0;
  double iterationSec = 0;
  Bound bound = Bound::Compute;
  std::array<uint64_t, kNumTiers> peakBytes{}; ///< by Tier
  bool fits = false;
  /// Per tier, the smallest budget this candidate fits in (= its peak).
  std::array<uint64_t, kNumTiers> neededBytes{};
  /// A placement the planner split by layer (choose): how, for the report
  /// ("moved 14 blocks from SSD to host ..."); empty otherwise.
  std::string splitNote;
};

/// ZeRO (zeroStage >= 1): the optimizer state bytes the rank that keeps the
/// most keeps, its shards cut as spillway/runtime/zero_shard.h cuts them (at
/// 64 elements, at 64 Ki with gradient clipping): exact while ranks x
/// parameters is at most 2^26; beyond, a bound (a shard of a moment of n
/// elements has at most min(n, n / N + align + 1)). The
/// whole state when zeroStage is 0 or ranks is 1, and the layers' sum (one
/// rank's blocks) when optimizerShards cut them already. Costs ranks x
/// parameters: the planner computes it once (zeroOptimizerBytes).
uint64_t zeroOptimizerBytesPerRank(const IterationSummary &s);

/// The cost of one candidate. Never fails: an impossible candidate comes
/// back with valid = false and the reason (e.g. the optimizer state on the
/// GPU with its master weights elsewhere, or M not dividing the batch).
CostEstimate estimate(const IterationSummary &summary, const Candidate &c,
                      const Budgets &budgets, const HardwareProfile &hw);

/// The estimate as JSON, for --report-json: the candidate, times, bound,
/// `bytes_per_iteration` {ssd_read, ssd_write, h2d, d2h} (and the optimizer
/// state's part, `optimizer_state_bytes_per_iteration`), `peak_bytes` and
/// `needed_bytes` {gpu, host, ssd}, fits (docs/cost-model.md).
std::string estimateToJSON(const CostEstimate &e);

/// Whether candidate `a` ranks before `b` (choose's order): one that fits
/// before one that does not; among those that fit, the faster, then (a tie
/// on time) the fewer SSD bytes written, then the fewer SSD bytes read and
/// written, then the fewer bytes moved; among
/// those that do not, the smaller total overshoot of the budgets. Neither:
/// the earlier candidate stays first.
bool preferred(const CostEstimate &a, const CostEstimate &b,
               const Budgets &budgets);

struct SearchSpace {
  std::vector<Order> orders{Order::Horizontal, Order::Snake};
  std::vector<unsigned> microBatches{1, 2, 4, 8, 16};
  std::vector<double> overlaps{0, 0.25, 0.5, 0.75, 1};
  /// Pinned tensor classes (--place CLASS=TIER); the rest are searched.
  std::array<std::optional<Tier>, kNumTensorClasses> pinned{};
  /// Pinned layers of a class (--place CLASS[a:b]=TIER or fractions): per
  /// layer its tier, or none where the planner chooses; empty: none pinned.
  std::array<std::vector<std::optional<Tier>>, kNumTensorClasses> pinnedLayers;
  /// Pinned cuts (--place CLASS[L]=host:F,ssd:G): Placement::cuts of every
  /// candidate.
  std::array<std::map<size_t, double>, kNumTensorClasses> pinnedCuts;
  /// Whether the planner may split a class by layer: it fills the host
  /// budget with the blocks that save the most SSD time per byte
  /// (docs/cost-model.md, "Placement by layer"). false: whole classes only.
  bool splitByLayer = true;
};

struct Choice {
  /// The fastest candidate that fits; when none fits, the one needing the
  /// least extra memory (fits == false: its neededBytes say how much).
  CostEstimate best;
  /// The ZeRO-Infinity-style baseline the report compares against:
  /// horizontal, no overlap, at the smallest M (from the search space, and
  /// 1) for which some placement fits, with its best placement; M = 1 with
  /// the least overshoot when nothing fits.
  std::optional<CostEstimate> baseline;
  unsigned candidatesTried = 0;
  /// Every valid candidate, best first: `best`, then those that fit by
  /// time (then SSD bytes written, then SSD bytes, then bytes moved), then
  /// those that do not by overshoot. The planner (sched-assign-buffers) has the
  /// last word on fitting: spillwayc takes the first of these whose exact
  /// arenas fit the budgets.
  std::vector<CostEstimate> ranked;
};

Choice choose(const IterationSummary &summary, const SearchSpace &space,
              const Budgets &budgets, const HardwareProfile &hw);

/// Placement by layer (docs/cost-model.md): fills the host budget from
/// `seed` (a candidate with blocks on SSD). Ranks its SSD blocks no pin
/// fixes by the SSD time that moving each alone to host saves per byte it
/// adds to the host tier's peak, then moves them in that order, skipping one
/// after which the candidate would not fit. The filled candidate, its
/// splitNote saying what moved; none when nothing moves.
std::optional<CostEstimate> fillHost(const IterationSummary &summary,
                                     const SearchSpace &space,
                                     const CostEstimate &seed,
                                     const Budgets &budgets,
                                     const HardwareProfile &hw);

} // namespace spillway::schedule

#endif
