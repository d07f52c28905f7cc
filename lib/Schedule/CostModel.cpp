//===- CostModel.cpp - roofline cost of one training iteration -------------===//
//
// docs/cost-model.md is the specification; each block below names the rule
// it implements. Bytes are counted exactly (as doubles: the overlap fraction
// splits tensors); times are bytes or FLOPs over the profile's rates.
//
//===----------------------------------------------------------------------===//

#include "spillway/Schedule/CostModel.h"
#include "spillway/Schedule/PlacementSpec.h"
#include "spillway/Schedule/VisitSequence.h"
#include "spillway/runtime/zero_shard.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <set>
#include <tuple>

using namespace spillway::schedule;

const char *spillway::schedule::orderName(Order o) {
  return o == Order::Horizontal ? "horizontal" : "snake";
}
const char *spillway::schedule::tierName(Tier t) {
  switch (t) {
  case Tier::GPU:
    return "gpu";
  case Tier::Host:
    return "host";
  case Tier::SSD:
    return "ssd";
  }
  return "?";
}
const char *spillway::schedule::tensorClassName(TensorClass c) {
  static const char *names[] = {"params", "master", "optimizer", "gradients",
                                "activations"};
  return names[int(c)];
}
const char *spillway::schedule::boundName(Bound b) {
  static const char *names[] = {"compute", "pcie", "ssd", "cpu_optimizer",
                                "network"};
  return names[int(b)];
}
std::optional<Order> spillway::schedule::parseOrder(const std::string &s) {
  if (s == "horizontal")
    return Order::Horizontal;
  if (s == "snake")
    return Order::Snake;
  return std::nullopt;
}
std::optional<Tier> spillway::schedule::parseTier(const std::string &s) {
  for (Tier t : {Tier::GPU, Tier::Host, Tier::SSD})
    if (s == tierName(t))
      return t;
  return std::nullopt;
}
std::optional<TensorClass>
spillway::schedule::parseTensorClass(const std::string &s) {
  for (int i = 0; i < kNumTensorClasses; ++i)
    if (s == tensorClassName(TensorClass(i)))
      return TensorClass(i);
  return std::nullopt;
}

void Placement::normalize() {
  // A cut lives on a block homed on SSD.
  for (int i = 0; i < kNumTensorClasses; ++i)
    for (auto it = cuts[i].begin(); it != cuts[i].end();)
      it = at(TensorClass(i), it->first) == Tier::SSD ? std::next(it)
                                                      : cuts[i].erase(it);
  for (int i = 0; i < kNumTensorClasses; ++i) {
    std::vector<Tier> &v = layers[i];
    if (v.empty())
      continue;
    tier[i] = *std::max_element(v.begin(), v.end());
    if (std::all_of(v.begin(), v.end(), [&](Tier t) { return t == v[0]; }))
      v.clear();
  }
}

std::string Placement::str() const {
  std::string s;
  for (int i = 0; i < kNumTensorClasses; ++i)
    s += std::string(i ? "," : "") + tensorClassName(TensorClass(i)) + "=" +
         tierName(tier[i]);
  for (int i = 0; i < kNumTensorClasses; ++i)
    if (split(TensorClass(i)))
      s += "," + layerRanges(TensorClass(i), layers[i], tier[i]);
  for (int i = 0; i < kNumTensorClasses; ++i)
    if (!cuts[i].empty())
      s += "," + cutItems(TensorClass(i), cuts[i]);
  return s;
}

std::string Candidate::str() const {
  char f[32];
  std::snprintf(f, sizeof f, "%g", overlap);
  return std::string(orderName(order)) + " M=" + std::to_string(microBatches) +
         " F=" + f + " " + placement.str();
}

namespace {
double sumOf(const IterationSummary &s, uint64_t LayerCost::*field) {
  double t = 0;
  for (const LayerCost &l : s.layers)
    t += double(l.*field);
  return t;
}
double maxOf(const IterationSummary &s, uint64_t LayerCost::*field) {
  uint64_t t = 0;
  for (const LayerCost &l : s.layers)
    t = std::max(t, l.*field);
  return double(t);
}
} // namespace

uint64_t spillway::schedule::gradBytesPerRank(const IterationSummary &s,
                                              const LayerCost &l) {
  if (!s.gradientShards || s.optimizerShards <= 1 || l.gradElements.empty())
    return l.gradBytes;
  std::vector<int64_t> n(l.gradElements.begin(), l.gradElements.end());
  return uint64_t(spw_zero_sharded_layout(
      n.data(), int64_t(n.size()), int64_t(s.optimizerShards),
      s.gradClip ? SPW_ZERO_SHARD_ALIGN_CLIPPED : SPW_ZERO_SHARD_ALIGN, 0, 4,
      256, nullptr, nullptr));
}

uint64_t spillway::schedule::gradBytesPerRank(const IterationSummary &s) {
  uint64_t b = 0;
  for (const LayerCost &l : s.layers)
    b += gradBytesPerRank(s, l);
  return b;
}

uint64_t
spillway::schedule::zeroOptimizerBytesPerRank(const IterationSummary &s) {
  const uint64_t elem = s.bf16OptimizerState ? 2 : 4;
  uint64_t whole = 0, moments = 0;
  for (const LayerCost &l : s.layers) {
    whole += l.optimizerBytes;
    moments += l.momentElements.size();
  }
  // An offload plan cut for the ranks (optimizerShards): optimizerBytes is
  // one rank's already, every rank's blocks laid out alike.
  if (s.zeroStage < 1 || s.ranks <= 1 || s.optimizerShards > 1)
    return whole;
  const int64_t N = s.ranks;
  // Under clipping the runtime cuts at the norm's blocks.
  const int64_t align =
      s.gradClip ? SPW_ZERO_SHARD_ALIGN_CLIPPED : SPW_ZERO_SHARD_ALIGN;
  uint64_t most = 0;
  if (uint64_t(N) * moments <= (uint64_t(1) << 26)) {
    for (int64_t r = 0; r < N; ++r) {
      uint64_t kept = 0;
      for (const LayerCost &l : s.layers)
        for (uint64_t m : l.momentElements)
          kept += 2 * elem *
                  uint64_t(spw_zero_shard_cut(int64_t(m), r + 1, N, align) -
                           spw_zero_shard_cut(int64_t(m), r, N, align));
      most = std::max(most, kept);
    }
    return most;
  }
  for (const LayerCost &l : s.layers)
    for (uint64_t m : l.momentElements)
      most += 2 * elem * std::min<uint64_t>(m, m / uint64_t(N) + align + 1);
  return most;
}

std::string spillway::schedule::uncuttable(const IterationSummary &s, size_t l,
                                           double F, double share) {
  const LayerCost &lc = s.layers[l];
  const int64_t n = int64_t(lc.numParams);
  uint64_t moments = 0;
  for (uint64_t m : lc.momentElements)
    moments += m;
  const std::string layer = "layer " + std::to_string(l) + " (" + lc.name + ")";
  // sched-insert-transfers' rules: the runtime splits the layer's params,
  // master and optimizer blocks at one element, and an update whose range
  // holds the cut runs as two (AdamW's elementwise ranges).
  if (lc.foldedParams || moments != uint64_t(n) ||
      lc.paramBytes != uint64_t(n) * (s.bf16Storage ? 2 : 4))
    return "a block of " + layer +
           " is cut between host and SSD, but its updates are not "
           "elementwise AdamW on every parameter of the layer (FOAM's folded "
           "state, or parameters the optimizer does not update): place the "
           "layer whole";
  const bool twoByte = s.bf16Storage || s.bf16OptimizerState;
  const int64_t d = deferredElements(F, n, deferGranule(twoByte));
  const int64_t e = cutElements(share, n, cutGranule(twoByte));
  if (d != 0 && d != e)
    return "a block of " + layer + " is cut at " + std::to_string(e) +
           " of its " + std::to_string(n) +
           " elements, but the optimizer overlap defers " + std::to_string(d) +
           " of them: a cut layer's overlap defers none or the cut's "
           "(--overlap-optimizer 0, or place the layer whole)";
  return {};
}

bool spillway::schedule::plannerMayCut(const IterationSummary &s,
                                       const Placement &pl, TensorClass k,
                                       size_t l, double F) {
  if (k != TensorClass::Params && k != TensorClass::Master &&
      k != TensorClass::Optimizer)
    return false;
  const LayerCost &lc = s.layers[l];
  const int64_t n = int64_t(lc.numParams);
  const int64_t g = cutGranule(s.bf16Storage || s.bf16OptimizerState);
  for (TensorClass c :
       {TensorClass::Params, TensorClass::Master, TensorClass::Optimizer})
    if (pl.cutShare(c, l) > 0)
      return false;
  return blockBytes(lc, k) && n >= 2 * g && pl.at(k, l) == Tier::SSD &&
         s.optimizerShards <= 1 && deferredElements(F, n, g) == 0 &&
         uncuttable(s, l, F, double(g) / double(n)).empty();
}

CostEstimate spillway::schedule::estimate(const IterationSummary &s,
                                          const Candidate &c,
                                          const Budgets &budgets,
                                          const HardwareProfile &hw) {
  CostEstimate e;
  e.candidate = c;
  auto invalid = [&](std::string why) {
    e.valid = false;
    e.invalidReason = std::move(why);
    return e;
  };
  const Placement &pl = c.placement;
  const unsigned M = c.microBatches;
  const double F = c.overlap;
  const bool hasMaster = sumOf(s, &LayerCost::masterBytes) > 0;
  // sched-overlap-optimizer's granule: 256 bytes of the narrowest block
  // it splits (bf16 working copies, or bf16 optimizer moments).
  const int64_t granule =
      deferGranule(s.bf16Storage || s.bf16OptimizerState);
  if (M == 0)
    return invalid("M must be at least 1");
  if (s.batchSize && s.batchSize % M)
    return invalid(std::to_string(M) + " micro-batches do not divide the batch of " +
                   std::to_string(s.batchSize));
  if (!(F >= 0 && F <= 1))
    return invalid("the overlap fraction must be in [0, 1]");
  e.optimizerOnGPU = pl[TensorClass::Optimizer] == Tier::GPU;
  if (hasMaster && e.optimizerOnGPU != (pl[TensorClass::Master] == Tier::GPU))
    return invalid("master weights and optimizer state must both be on the "
                   "GPU (GPU optimizer) or both off it (CPU optimizer)");
  if (hw.ssds.empty())
    for (Tier t : pl.tier)
      if (t == Tier::SSD)
        return invalid("the profile lists no SSD");
  // A class split by layer: one tier per layer, each host or SSD.
  for (int k = 0; k < kNumTensorClasses; ++k) {
    const std::vector<Tier> &v = pl.layers[k];
    if (v.empty())
      continue;
    if (v.size() != s.layers.size())
      return invalid(std::string(tensorClassName(TensorClass(k))) +
                     " is split over " + std::to_string(v.size()) +
                     " layers, the model has " +
                     std::to_string(s.layers.size()));
    // GPU layers only for the parameters (resident blocks no load brings)
    // and activations (read where the forward left them); a layer's state,
    // masters or gradients on the GPU would move its update or its
    // backward's flush.
    for (Tier t : v)
      if (t == Tier::GPU && TensorClass(k) != TensorClass::Params &&
          TensorClass(k) != TensorClass::Activations)
        return invalid("a class split by layer lives on host and SSD (the "
                       "parameters and activations may keep layers on the "
                       "GPU too)");
    if (std::all_of(v.begin(), v.end(), [](Tier t) { return t == Tier::GPU; }))
      return invalid("a split class with every layer on the GPU");
    if (*std::max_element(v.begin(), v.end()) != pl.tier[k])
      return invalid("a split class's tier is the slowest of its layers'");
  }
  // Blocks cut between host and SSD: each part's exact share, as
  // sched-place rounds the cut (cutElements); only where the block is homed
  // on SSD, and for state that is not sharded over ranks.
  const int64_t cutG = cutGranule(s.bf16Storage || s.bf16OptimizerState);
  bool anyCut = false;
  for (int k = 0; k < kNumTensorClasses; ++k)
    for (auto [l, share] : pl.cuts[k]) {
      anyCut = true;
      if (l >= s.layers.size() || pl.at(TensorClass(k), l) != Tier::SSD ||
          !(share > 0 && share < 1))
        return invalid("a cut block is a layer's block homed on SSD with a "
                       "share in (0, 1) on host");
      if (std::string why = uncuttable(s, l, F, share); !why.empty())
        return invalid(why);
    }
  // As sched-place rounds them: some but not all of the layer's elements,
  // one element for all of its classes.
  for (size_t l = 0; anyCut && l < s.layers.size(); ++l) {
    int64_t at = 0;
    for (TensorClass k :
         {TensorClass::Params, TensorClass::Master, TensorClass::Optimizer}) {
      const double share = pl.cutShare(k, l);
      if (!share)
        continue;
      const int64_t n = int64_t(s.layers[l].numParams);
      const int64_t e = cutElements(share, n, cutG);
      if (e <= 0 || e >= n)
        return invalid(
            "layer " + std::to_string(l) + "'s " + tensorClassName(k) +
            " cut rounds to " + (e <= 0 ? "none" : "all") + " of its " +
            std::to_string(n) + " elements (cuts fall on " +
            std::to_string(cutG) + "-element granules): place the layer whole");
      if (at && at != e)
        return invalid("layer " + std::to_string(l) +
                       "'s blocks are cut at two elements (" +
                       std::to_string(at) + " and " + std::to_string(e) +
                       "): a layer's params, master and optimizer blocks "
                       "are cut at one element");
      at = e;
    }
  }
  if (anyCut && s.optimizerShards > 1)
    return invalid("a block cut between host and SSD needs optimizer state "
                   "that is not sharded over ranks (ZeRO): place its layer "
                   "whole");
  auto hostPart = [&](TensorClass k, size_t i) {
    const double f = pl.cutShare(k, i);
    const int64_t n = int64_t(s.layers[i].numParams);
    return f > 0 && n ? double(cutElements(f, n, cutG)) / double(n) : 0.0;
  };
  auto ssdPart = [&](TensorClass k, size_t i) {
    return pl.at(k, i) == Tier::SSD ? 1 - hostPart(k, i) : 0.0;
  };
  const bool zero = s.zeroStage >= 1 && s.ranks > 1;
  e.zeroSharded = zero;
  e.gradientsSharded = zero && s.gradientShards;
  if (s.zeroStage >= 1 && s.optimizerShards <= 1)
    for (Tier t : pl.tier)
      if (t != Tier::GPU)
        return invalid("--zero 1 shards the state of resident plans only "
                       "(every class on the GPU)");

  const size_t L = s.layers.size();
  const Tier paramsTier = pl[TensorClass::Params];
  const Tier gradTier = pl[TensorClass::Gradients];
  LinkBytes &b = e.bytes;

  // Parameters: every load moves them to the GPU (from SSD through host).
  // A layer reading a tied weight brings its owner's block too; a block
  // read by consecutive loads stays (blockLoadsPerLayer).
  std::vector<std::vector<size_t>> reads(L);
  std::vector<bool> owns(L);
  // GPU-resident parameter blocks (a params split with GPU layers) are
  // bound for the whole iteration: no load brings them.
  for (size_t i = 0; i < L; ++i) {
    for (size_t o : s.layers[i].readsParamsOf)
      if (o >= L || pl.at(TensorClass::Params, o) != Tier::GPU)
        reads[i].push_back(o);
    owns[i] = s.layers[i].paramBytes > 0 &&
              pl.at(TensorClass::Params, i) != Tier::GPU;
  }
  e.paramLoads = paramsTier == Tier::GPU
                     ? std::vector<unsigned>(L, 0)
                     : blockLoadsPerLayer(L, c.order, M, reads, owns);
  for (size_t i = 0; i < L; ++i) {
    double P = double(s.layers[i].paramBytes) * e.paramLoads[i];
    b.h2d += P;
    b.ssdRead += P * ssdPart(TensorClass::Params, i);
  }

  // Gradients: a backward run of a layer ends with its gradient flushed to
  // the gradient tier unless that is the GPU (horizontal: M runs per layer;
  // snake: 1, the M micro-batches accumulate on the GPU). On SSD the
  // accumulator is read back before each flush but the first.
  const double runs = c.order == Order::Horizontal ? M : 1;
  // One rank's: its shards' slots when the blocks are cut for the ranks
  // (ZeRO stage 2), which every link then carries.
  double G = 0, largestGrad = 0, Gssd = 0;
  std::vector<double> gradBytes(L);
  for (size_t i = 0; i < L; ++i) {
    const double g = double(gradBytesPerRank(s, s.layers[i]));
    gradBytes[i] = g;
    G += g;
    largestGrad = std::max(largestGrad, g);
    if (pl.at(TensorClass::Gradients, i) == Tier::SSD)
      Gssd += g;
  }
  if (gradTier != Tier::GPU)
    b.d2h += G * runs;
  b.ssdWrite += Gssd * runs;
  b.ssdRead += Gssd * (runs - 1);
  // ... and the optimizer reads the accumulated gradient once.
  if (e.optimizerOnGPU) {
    if (gradTier != Tier::GPU)
      b.h2d += G;
  } else {
    if (gradTier == Tier::GPU)
      b.d2h += G;
  }
  b.ssdRead += Gssd;

  // The update: optimizer state and master weights are read and written once
  // per iteration where they live; the new compute-precision parameters go
  // to the parameter tier.
  // Each layer's optimizer block; sharded over the ranks with the overlap,
  // the member a layer's deferral ends in keeps two sub-slots, as
  // sched-assign-buffers lays them out (spw_zero_sharded_layout).
  std::vector<double> optimizerBytes(L);
  for (size_t i = 0; i < L; ++i) {
    const LayerCost &l = s.layers[i];
    optimizerBytes[i] = double(l.optimizerBytes);
    if (s.optimizerShards <= 1 || F <= 0 || l.momentElements.empty())
      continue;
    std::vector<int64_t> n(l.momentElements.begin(), l.momentElements.end());
    optimizerBytes[i] =
        2.0 *
        double(spw_zero_sharded_layout(
            n.data(), int64_t(n.size()), int64_t(s.optimizerShards),
            s.gradClip ? SPW_ZERO_SHARD_ALIGN_CLIPPED : SPW_ZERO_SHARD_ALIGN,
            deferredElements(F, int64_t(l.numParams), granule),
            s.bf16OptimizerState ? 2 : 4, 256, nullptr, nullptr));
  }
  double O = 0, largestOptimizer = 0;
  for (double b : optimizerBytes) {
    O += b;
    largestOptimizer = std::max(largestOptimizer, b);
  }
  // The master blocks, sharded over the ranks as the state is (one rank's
  // slots, the overlap's sub-slots too), else whole.
  double W = 0, largestMaster = 0;
  std::vector<double> masterBytes;
  for (const LayerCost &l : s.layers) {
    double w = double(l.masterBytes);
    if (s.optimizerShards > 1 && !l.masterElements.empty()) {
      std::vector<int64_t> n(l.masterElements.begin(), l.masterElements.end());
      w = double(spw_zero_sharded_layout(
          n.data(), int64_t(n.size()), int64_t(s.optimizerShards),
          s.gradClip ? SPW_ZERO_SHARD_ALIGN_CLIPPED : SPW_ZERO_SHARD_ALIGN,
          F > 0 ? deferredElements(F, int64_t(l.numParams), granule) : 0, 4,
          256, nullptr, nullptr));
    }
    W += w;
    masterBytes.push_back(w);
    largestMaster = std::max(largestMaster, w);
  }
  e.masterBytes = uint64_t(W);
  double Ossd = 0, Wssd = 0;
  for (size_t i = 0; i < L; ++i) {
    Ossd += optimizerBytes[i] * ssdPart(TensorClass::Optimizer, i);
    if (hasMaster)
      Wssd += masterBytes[i] * ssdPart(TensorClass::Master, i);
  }
  b.ssdRead += Ossd;
  b.ssdWrite += Ossd;
  e.optimizerStateBytes.ssdRead = Ossd;
  e.optimizerStateBytes.ssdWrite = Ossd;
  b.ssdRead += Wssd;
  b.ssdWrite += Wssd;
  for (size_t i = 0; i < L; ++i) {
    const double P = double(s.layers[i].paramBytes);
    // The deferred part of the update (the overlap fraction, in whole
    // granules: deferredElements) runs at the layer's first load of the
    // next iteration, on the copy that load brings past the optimizer: its
    // read from the parameter tier is saved (GPU optimizer: h2d, and the
    // SSD read from SSD; CPU optimizer with parameters on SSD: the SSD
    // read).
    const uint64_t N = s.layers[i].numParams;
    const double deferred =
        N ? P * double(deferredElements(F, int64_t(N), granule)) / double(N)
          : 0;
    const Tier side = e.optimizerOnGPU ? Tier::GPU : Tier::Host;
    const Tier pt = pl.at(TensorClass::Params, i);
    const bool merged = pt != Tier::GPU && pt != side;
    // The optimizer reads and writes the parameters where it runs; with
    // master weights (bf16-mixed) these are the bf16 working copies it
    // writes from the masters, which are read and written above. When it
    // updates all of a layer's parameters it rewrites the whole block and
    // reads none of it (sched.alloc); a frozen parameter's copy is read.
    const bool rewrites = hasMaster && s.layers[i].masterBytes > 0 &&
                          s.layers[i].masterBytes == 4 * N;
    const double read = rewrites ? 0 : P - (merged ? deferred : 0);
    if (e.optimizerOnGPU) {
      if (pt != Tier::GPU)
        b.h2d += read, b.d2h += P;
    } else {
      if (pt == Tier::GPU)
        b.d2h += read, b.h2d += P;
    }
    const double onSsd = ssdPart(TensorClass::Params, i);
    b.ssdRead += read * onSsd, b.ssdWrite += P * onSsd;
  }

  // Boundary activations: written once after the forward of each
  // (layer, micro-batch), read once in backward, each layer's where it is
  // homed.
  for (size_t i = 0; i < L; ++i) {
    const double A = double(s.layers[i].activationBytes);
    const Tier t = pl.at(TensorClass::Activations, i);
    if (t != Tier::GPU)
      b.d2h += A, b.h2d += A;
    if (t == Tier::SSD)
      b.ssdWrite += A, b.ssdRead += A;
  }

  // Times.
  double flops = 0, bwdHide = 0;
  for (size_t i = 0; i < L; ++i) {
    const LayerCost &l = s.layers[i];
    flops += l.forwardFlops + l.backwardFlops + l.recomputeFlops;
    if (i + 1 < L)
      bwdHide += l.backwardFlops + l.recomputeFlops;
  }
  const double rate = 1e12 * (s.compute == Precision::BF16 ? hw.gpuBf16TFlops
                                                           : hw.gpuFp32TFlops);
  e.computeSec = flops / rate;
  e.pcieSec = std::max({b.h2d / (hw.h2dGBps * 1e9), b.d2h / (hw.d2hGBps * 1e9),
                        (b.h2d + b.d2h) / (hw.bidirectionalGBps * 1e9)});
  if (b.ssdRead + b.ssdWrite > 0)
    e.ssdSec = std::max({b.ssdRead / (hw.ssdReadGBps() * 1e9),
                         b.ssdWrite / (hw.ssdWriteGBps() * 1e9),
                         (b.ssdRead + b.ssdWrite) / (hw.ssdCombinedGBps() * 1e9)});
  if (!e.optimizerOnGPU) {
    // Sharded over the ranks, each updates its slots' elements (AdamW:
    // one per moment element).
    const double updated = s.optimizerShards > 1
                               ? O / (2.0 * (s.bf16OptimizerState ? 2 : 4))
                               : double(sumOf(s, &LayerCost::numParams));
    e.cpuOptimizerSec = updated / hw.cpuOptimizerParamsPerSec;
    // The non-overlapped update of a layer starts when its gradient is
    // complete: in the last micro-batch's backward (horizontal) or after the
    // layer's M micro-batches (snake). It hides behind the backward work of
    // the layers below the last one; the rest is exposed.
    double hide = bwdHide / rate / (c.order == Order::Horizontal ? M : 1);
    // Gradient clipping: every update waits for the norm, after the last
    // backward, so none of it hides behind the backward.
    if (s.gradClip)
      hide = 0;
    e.exposedOptimizerSec = std::max(0.0, (1 - F) * e.cpuOptimizerSec - hide);
  }
  // Data parallel: every rank sends (and receives) 2 (N - 1) / N of the
  // gradients' bytes in a ring all-reduce. The runtime averages each
  // gradient at its update, on the step's thread: the time adds up.
  // ZeRO (zero): a ring reduce-scatter of the gradients and a ring
  // all-gather of the updated values, (N - 1) / N of each (clipping's
  // norm adds the per-block sums, 8 bytes per 64 Ki elements: not
  // counted).
  if (s.ranks > 1) {
    const double n = double(s.ranks);
    // Sharded bf16-mixed masters: each rank's updated shard goes to the
    // others as its bf16 working copies (2 bytes per element).
    const double valueBytes = s.optimizerShards > 1 && hasMaster ? 2 : 4;
    const double values = valueBytes * double(sumOf(s, &LayerCost::numParams));
    // The whole gradients are exchanged; with the gradient blocks cut for
    // the ranks (ZeRO stage 2) at every flush of a layer's gradients, so M
    // times per iteration in horizontal order.
    const double exchanged = double(sumOf(s, &LayerCost::gradBytes)) *
                             (s.gradientShards ? runs : 1.0);
    b.network =
        zero ? (n - 1) / n * (exchanged + values) : 2 * (n - 1) / n * exchanged;
    e.networkSec = b.network / (hw.networkGBps * 1e9);
    // ZeRO stage 2: a flush's reduce-scatter runs while the backward of the
    // layers up to the sweep's next flush computes (that flush's own
    // included: what reads the exchange comes just before its staging), so
    // only what their backward does not cover is exposed, and the sweep's
    // last exchange whole. Every sweep (M in horizontal order) is alike.
    // Only on the CPU backend, where the exchange thread runs them through
    // host memory: over NCCL they share the GPU's compute stream.
    if (s.gradientShards && hw.backend == "cpu") {
      double hidden = 0, window = 0, pending = -1;
      for (size_t k = L; k-- > 0;) {
        const LayerCost &l = s.layers[k];
        if (pending >= 0)
          window += (l.backwardFlops + l.recomputeFlops) / rate / runs;
        if (l.gradBytes == 0)
          continue; // no flush: its backward is in the window
        if (pending >= 0)
          hidden += std::min(pending, window);
        pending = (n - 1) / n * double(l.gradBytes) / (hw.networkGBps * 1e9);
        window = 0;
      }
      e.hiddenNetworkSec = hidden * runs;
    }
  }
  const double resources[] = {e.computeSec, e.pcieSec, e.ssdSec,
                              e.cpuOptimizerSec};
  int worst = 0;
  for (int i = 1; i < 4; ++i)
    if (resources[i] > resources[worst])
      worst = i;
  e.bound = e.networkSec - e.hiddenNetworkSec > resources[worst]
                ? Bound::Network
                : Bound(worst);
  e.iterationSec = resources[worst] + e.exposedOptimizerSec + e.networkSec -
                   e.hiddenNetworkSec;

  // Peak memory per tier.
  auto &peak = e.peakBytes;
  const int gpu = int(Tier::GPU), host = int(Tier::Host), ssd = int(Tier::SSD);
  // Per class, each layer's block.
  struct ClassBytes {
    TensorClass k;
    std::vector<double> blocks; ///< per layer
    /// Per layer, its block's largest transfer (a load: with the blocks of
    /// the tied weights it reads; an activation: one micro-batch's, 0 on
    /// the GPU).
    std::vector<double> moved;
  };
  std::vector<double> params(L), loads(L);
  for (size_t i = 0; i < L; ++i) {
    const LayerCost &l = s.layers[i];
    params[i] = double(l.paramBytes);
    loads[i] = params[i];
    for (size_t o : l.readsParamsOf)
      if (o < L && o != i)
        loads[i] += double(s.layers[o].paramBytes);
  }
  // ZeRO: the state of the rank that keeps the most (shards are cut at
  // whole vectors: not exactly 1/N); only resident plans, all on the GPU.
  // (Blocks cut for the ranks: O is a rank's already, with the overlap's
  // sub-slots.)
  std::vector<double> optimizerKept = optimizerBytes;
  if (zero && s.optimizerShards <= 1 && L) {
    optimizerKept.assign(L, 0);
    optimizerKept[0] = double(s.zeroOptimizerBytes);
  }
  if (masterBytes.size() != L)
    masterBytes.assign(L, 0);
  // The activations' staging slots (sched-insert-transfers' look-ahead) are
  // sized by the largest (layer, micro-batch) activation that leaves the GPU
  // (sched-assign-buffers' slots).
  std::vector<double> activations(L), activationMoved(L);
  for (size_t i = 0; i < L; ++i) {
    activations[i] = double(s.layers[i].activationBytes);
    if (pl.at(TensorClass::Activations, i) != Tier::GPU)
      activationMoved[i] = activations[i] / M;
  }
  const ClassBytes classes[] = {
      {TensorClass::Params, params, loads},
      {TensorClass::Master, masterBytes, masterBytes},
      {TensorClass::Optimizer, optimizerKept, optimizerKept},
      {TensorClass::Gradients, gradBytes, gradBytes},
      {TensorClass::Activations, activations, activationMoved},
  };
  double p[kNumTiers] = {0, 0, 0};
  for (const ClassBytes &cb : classes) {
    // A tier's staging slots fit the class's largest block, whichever
    // layers pass through them (sched-assign-buffers sizes a class's slots
    // so): a class split by layer stages as the whole class does.
    double largest = 0;
    bool offGpu = false, onSsd = false;
    for (size_t i = 0; i < L; ++i) {
      const int t = int(pl.at(cb.k, i));
      p[t] += cb.blocks[i];
      // A cut block's SSD extent keeps room for all of it (its copies
      // start with the host part on every tier); the host part's own
      // extent is 4 KiB aligned.
      if (const double h = cb.blocks[i] * hostPart(cb.k, i))
        p[host] += std::ceil(h / 4096) * 4096;
      largest = std::max(largest, cb.moved[i]);
      // A layer without a block of the class (no parameters of its own)
      // stages nothing.
      offGpu |= t != gpu && cb.blocks[i] > 0;
      onSsd |= t == ssd && cb.blocks[i] > 0;
    }
    // Streamed to or from the GPU: double-buffered there (the layer in use
    // and the next one in flight); master and optimizer state never visit a
    // GPU they do not live on.
    bool streamed = cb.k != TensorClass::Master && cb.k != TensorClass::Optimizer;
    if (streamed && offGpu)
      p[gpu] += 2 * largest;
    // Everything on SSD passes through pinned host staging, double-buffered.
    if (onSsd)
      p[host] += 2 * largest;
  }
  // A CPU optimizer receives GPU-resident gradients through host staging.
  if (!e.optimizerOnGPU && gradTier == Tier::GPU)
    p[host] += 2 * largestGrad;
  // ZeRO stage 2: a member's micro-batch gradients are summed whole on the
  // GPU before its reduce-scatter; through host memory (not NCCL) a layer's
  // sums stay in host buffers while its exchanges run into the next layer's
  // backward. The layer's update then runs beside that backward's
  // gradients: a GPU optimizer's whole-shape gradient of a member too.
  if (s.gradientShards) {
    uint64_t largestMember = 0, largestLayer = 0;
    for (const LayerCost &l : s.layers) {
      uint64_t n = 0;
      for (uint64_t m : l.gradElements) {
        n += m;
        largestMember = std::max(largestMember, m);
      }
      largestLayer = std::max(largestLayer, n);
    }
    p[gpu] += 4.0 * double(largestMember) * (e.optimizerOnGPU ? 2 : 1);
    p[host] += 4.0 * double(largestLayer);
  }
  p[gpu] += maxOf(s, &LayerCost::workingBytes) / M;
  // The optimizer overlap's deferred gradient slices wait for the next
  // step where the optimizer runs (sched-assign-buffers' pending blocks).
  for (const LayerCost &l : s.layers)
    if (l.numParams)
      p[e.optimizerOnGPU ? gpu : host] +=
          double(l.gradBytes) *
          double(deferredElements(F, int64_t(l.numParams), granule)) /
          double(l.numParams);
  for (int t = 0; t < kNumTiers; ++t)
    peak[t] = uint64_t(std::ceil(p[t]));
  e.neededBytes = peak;
  e.fits = peak[gpu] <= budgets.gpuBytes && peak[host] <= budgets.hostBytes &&
           peak[ssd] <= budgets.ssdBytes;
  return e;
}

namespace {
double ssdBytes(const CostEstimate &e);
double totalBytes(const CostEstimate &e);
double overshoot(const CostEstimate &e, const Budgets &b);
} // namespace

bool spillway::schedule::preferred(const CostEstimate &a, const CostEstimate &b,
                                   const Budgets &budgets) {
  if (a.fits != b.fits)
    return a.fits;
  if (!a.fits)
    return overshoot(a, budgets) < overshoot(b, budgets);
  const double ta = a.iterationSec, tb = b.iterationSec;
  if (std::abs(ta - tb) > 1e-9 * std::max(ta, tb))
    return ta < tb;
  // A tie on time (a compute-bound plan's candidates all take its compute
  // time) goes to the fewer SSD bytes written, the drive's wear, then to
  // the fewer bytes moved.
  const double wa = a.bytes.ssdWrite, wb = b.bytes.ssdWrite;
  if (std::abs(wa - wb) > 1e-12 * std::max(wa, wb))
    return wa < wb;
  // Then the fewer SSD bytes (a class on host instead of SSD), then the
  // fewer bytes moved in all.
  const double sa = ssdBytes(a), sb = ssdBytes(b);
  if (std::abs(sa - sb) > 1e-12 * std::max(sa, sb))
    return sa < sb;
  return totalBytes(a) < totalBytes(b) * (1 - 1e-12);
}

namespace {
double ssdBytes(const CostEstimate &e) {
  return e.bytes.ssdRead + e.bytes.ssdWrite;
}
double totalBytes(const CostEstimate &e) {
  return e.bytes.ssdRead + e.bytes.ssdWrite + e.bytes.h2d + e.bytes.d2h;
}
double overshoot(const CostEstimate &e, const Budgets &b) {
  const uint64_t budget[] = {b.gpuBytes, b.hostBytes, b.ssdBytes};
  double o = 0;
  for (int t = 0; t < kNumTiers; ++t)
    if (e.neededBytes[t] > budget[t])
      o += double(e.neededBytes[t] - budget[t]);
  return o;
}
bool better(const CostEstimate &a, const CostEstimate &b, const Budgets &bud) {
  return spillway::schedule::preferred(a, b, bud);
}

void forEachPlacement(const SearchSpace &space, bool hasMaster,
                      const std::function<void(const Placement &)> &fn) {
  Placement pl;
  std::function<void(int)> rec = [&](int k) {
    if (k == kNumTensorClasses) {
      // Pinned layers over the class's tier; the open ones take it.
      Placement full = pl;
      full.cuts = space.pinnedCuts;
      for (int c = 0; c < kNumTensorClasses; ++c) {
        const auto &pins = space.pinnedLayers[c];
        if (pins.empty())
          continue;
        full.layers[c].clear();
        for (const std::optional<Tier> &t : pins)
          full.layers[c].push_back(t.value_or(pl.tier[c]));
      }
      full.normalize();
      return fn(full);
    }
    auto cls = TensorClass(k);
    if (space.pinned[k]) {
      pl.tier[k] = *space.pinned[k];
      return rec(k + 1);
    }
    // Without master weights the class is empty and constrains nothing:
    // one tier keeps the candidates distinct.
    if (cls == TensorClass::Master && !hasMaster) {
      pl.tier[k] = Tier::GPU;
      return rec(k + 1);
    }
    for (Tier t : {Tier::GPU, Tier::Host, Tier::SSD}) {
      pl.tier[k] = t;
      rec(k + 1);
    }
  };
  rec(0);
}

} // namespace

namespace {
/// A block a placement split by layer can move (docs/cost-model.md,
/// "Placement by layer"): a layer's params, master, optimizer, gradients
/// or activations block homed on SSD that no pin fixes.
struct SplitBlock {
  TensorClass k;
  size_t layer;
  double saved = 0, savedWrites = 0, hostBytes = 0;
};

} // namespace

namespace {
/// Cuts the first of `blocks` (in order) that a cut can serve: a params,
/// master or optimizer block still wholly on SSD in `cur`, of a layer no
/// other cut splits, updated elementwise by AdamW (every parameter, no
/// folded FOAM state), not split by the overlap (it defers none of the
/// layer) and not sharded over ranks. Its host part takes the host budget
/// left, in whole cut granules. The estimate and a note, or none.
std::optional<std::pair<CostEstimate, std::string>>
cutToFill(const IterationSummary &s, const std::vector<SplitBlock> &blocks,
          const CostEstimate &cur, const Budgets &budgets,
          const HardwareProfile &hw) {
  const int host = int(Tier::Host);
  if (!cur.fits || cur.neededBytes[host] >= budgets.hostBytes)
    return std::nullopt;
  const int64_t g = cutGranule(s.bf16Storage || s.bf16OptimizerState);
  const Placement &pl = cur.candidate.placement;
  for (const SplitBlock &blk : blocks) {
    const size_t l = blk.layer;
    const int64_t n = int64_t(s.layers[l].numParams);
    if (blk.saved <= 0 ||
        !plannerMayCut(s, pl, blk.k, l, cur.candidate.overlap))
      continue;
    // The host part's extent is 4 KiB aligned; its bytes per element.
    const double perElement =
        double(blockBytes(s.layers[l], blk.k)) / double(n);
    const uint64_t room =
        (budgets.hostBytes - cur.neededBytes[host]) / 4096 * 4096;
    int64_t e =
        std::min<int64_t>(int64_t(double(room) / perElement) / g * g, n - g);
    for (int tries = 0; e > 0 && tries < 8; ++tries, e -= g) {
      Candidate c = cur.candidate;
      c.placement.cuts[int(blk.k)][l] = double(e) / double(n);
      CostEstimate est = estimate(s, c, budgets, hw);
      if (!est.valid)
        break;
      if (!est.fits)
        continue;
      char note[160];
      std::snprintf(note, sizeof note,
                    "%s of layer %zu cut: %.1f%% of it on host",
                    tensorClassName(blk.k), l, 100.0 * double(e) / double(n));
      return std::make_pair(std::move(est), std::string(note));
    }
  }
  return std::nullopt;
}
} // namespace

std::optional<CostEstimate>
spillway::schedule::fillHost(const IterationSummary &s,
                             const SearchSpace &space,
                             const CostEstimate &given, const Budgets &budgets,
                             const HardwareProfile &hw) {
  const size_t L = s.layers.size();
  // A cut is a fill's last step: the cuts of the plan filled from (an
  // earlier fill's) go back to SSD, the pinned ones stay.
  CostEstimate seed = given;
  if (given.candidate.placement.cuts != space.pinnedCuts) {
    Candidate c = given.candidate;
    c.placement.cuts = space.pinnedCuts;
    c.placement.normalize();
    seed = estimate(s, c, budgets, hw);
    if (!seed.valid)
      seed = given;
  }
  auto ssdCost = [&](const CostEstimate &e) {
    return e.bytes.ssdRead / (hw.ssdReadGBps() * 1e9) +
           e.bytes.ssdWrite / (hw.ssdWriteGBps() * 1e9);
  };
  // A layer's block of class k (0: the layer has none, e.g. no parameters
  // of its own: it never moves, and follows the class's other layers).
  auto layerBlock = [&](TensorClass k, size_t l) {
    return blockBytes(s.layers[l], k);
  };
  auto moved = [&](const Placement &from, TensorClass k, size_t l) {
    Placement p = from;
    if (!p.split(k))
      p.layers[int(k)].assign(L, p[k]);
    std::vector<Tier> &v = p.layers[int(k)];
    v[l] = Tier::Host;
    bool left = false;
    for (size_t i = 0; i < L; ++i)
      left |= v[i] == Tier::SSD && layerBlock(k, i) > 0;
    for (size_t i = 0; i < L && !left; ++i)
      if (layerBlock(k, i) == 0)
        v[i] = Tier::Host;
    p.normalize();
    return p;
  };
  std::vector<SplitBlock> blocks;
  const double cost0 = ssdCost(seed);
  for (TensorClass k :
       {TensorClass::Params, TensorClass::Master, TensorClass::Optimizer,
        TensorClass::Gradients, TensorClass::Activations}) {
    const auto &pins = space.pinnedLayers[int(k)];
    if (space.pinned[int(k)] && pins.empty())
      continue;
    for (size_t l = 0; l < L; ++l) {
      if (seed.candidate.placement.at(k, l) != Tier::SSD ||
          (l < pins.size() && pins[l]) || layerBlock(k, l) == 0)
        continue;
      Candidate c = seed.candidate;
      c.placement = moved(c.placement, k, l);
      CostEstimate e = estimate(s, c, budgets, hw);
      const double host = double(e.neededBytes[int(Tier::Host)]) -
                          double(seed.neededBytes[int(Tier::Host)]);
      if (!e.valid)
        continue;
      blocks.push_back({k, l, cost0 - ssdCost(e),
                        seed.bytes.ssdWrite - e.bytes.ssdWrite,
                        std::max(host, 1.0)});
    }
  }
  if (blocks.empty())
    return std::nullopt;
  std::stable_sort(
      blocks.begin(), blocks.end(),
      [](const SplitBlock &a, const SplitBlock &b) {
        const double ra = a.saved / a.hostBytes, rb = b.saved / b.hostBytes;
        if (ra != rb)
          return ra > rb;
        return a.savedWrites / a.hostBytes > b.savedWrites / b.hostBytes;
      });
  CostEstimate cur = seed;
  std::array<unsigned, kNumTensorClasses> count{};
  unsigned taken = 0;
  for (const SplitBlock &blk : blocks) {
    if (blk.saved <= 0)
      continue;
    Candidate c = cur.candidate;
    c.placement = moved(c.placement, blk.k, blk.layer);
    CostEstimate e = estimate(s, c, budgets, hw);
    if (!e.valid || !e.fits)
      continue;
    cur = std::move(e);
    ++count[int(blk.k)];
    ++taken;
  }
  // The rest of the budget: the first block by the same ratio that a cut
  // can put partly on host gets as many of its elements there as fit
  // (docs/cost-model.md, "Blocks cut between host and SSD").
  std::string cutNote;
  if (auto cut = cutToFill(s, blocks, cur, budgets, hw)) {
    cutNote = cut->second;
    cur = std::move(cut->first);
  } else if (!taken) {
    return std::nullopt;
  }
  std::string what;
  for (int k = 0; k < kNumTensorClasses; ++k)
    if (count[k])
      what += std::string(what.empty() ? "" : ", ") +
              tensorClassName(TensorClass(k)) + " " + std::to_string(count[k]);
  cur.splitNote = "split by layer: ";
  if (taken)
    cur.splitNote += std::to_string(taken) + " of " +
                     std::to_string(blocks.size()) +
                     " SSD blocks moved to host, by SSD time saved per host "
                     "byte (" +
                     what + ")" + (cutNote.empty() ? "" : "; ");
  cur.splitNote += cutNote;
  return cur;
}

Choice spillway::schedule::choose(const IterationSummary &s,
                                  const SearchSpace &space,
                                  const Budgets &budgets,
                                  const HardwareProfile &hw) {
  Choice choice;
  const bool hasMaster = sumOf(s, &LayerCost::masterBytes) > 0;
  auto consider = [&](const Candidate &c, std::optional<CostEstimate> &slot) {
    CostEstimate e = estimate(s, c, budgets, hw);
    if (!e.valid)
      return;
    if (!slot || better(e, *slot, budgets))
      slot = std::move(e);
  };
  std::optional<CostEstimate> best;
  std::vector<CostEstimate> all;
  for (Order o : space.orders)
    for (unsigned m : space.microBatches)
      for (double f : space.overlaps)
        forEachPlacement(space, hasMaster, [&](const Placement &pl) {
          ++choice.candidatesTried;
          CostEstimate e = estimate(s, Candidate{o, m, f, pl}, budgets, hw);
          if (!e.valid)
            return;
          if (!best || better(e, *best, budgets))
            best = e;
          all.push_back(std::move(e));
        });
  // The ranking: a strict order on exact keys (`better` allows for
  // rounding, so `best` goes first by itself).
  auto key = [&](const CostEstimate &e) {
    return std::make_tuple(!e.fits, e.fits ? e.iterationSec : 0.0,
                           e.fits ? 0.0 : overshoot(e, budgets),
                           e.fits ? e.bytes.ssdWrite : 0.0,
                           e.fits ? ssdBytes(e) : 0.0, totalBytes(e));
  };
  // Placement by layer: the fastest fitting plans with blocks on SSD, each
  // with the host budget filled from its SSD blocks (fillHost).
  if (space.splitByLayer) {
    constexpr size_t kSeeds = 48;
    std::vector<const CostEstimate *> seeds;
    for (const CostEstimate &e : all)
      if (e.fits && e.bytes.ssdRead + e.bytes.ssdWrite > 0)
        seeds.push_back(&e);
    std::stable_sort(seeds.begin(), seeds.end(),
                     [&](const CostEstimate *a, const CostEstimate *b) {
                       return key(*a) < key(*b);
                     });
    if (seeds.size() > kSeeds)
      seeds.resize(kSeeds);
    std::vector<CostEstimate> filled;
    std::set<std::string> seen; // whole-class candidates and fills alike
    for (const CostEstimate &e : all)
      seen.insert(e.candidate.str());
    for (const CostEstimate *seed : seeds)
      if (auto f = fillHost(s, space, *seed, budgets, hw))
        if (seen.insert(f->candidate.str()).second)
          filled.push_back(std::move(*f));
    for (CostEstimate &f : filled) {
      if (!best || better(f, *best, budgets))
        best = f;
      all.push_back(std::move(f));
    }
  }
  std::stable_sort(all.begin(), all.end(),
                   [&](const CostEstimate &a, const CostEstimate &b) {
                     return key(a) < key(b);
                   });
  if (best) {
    choice.ranked.push_back(*best);
    for (CostEstimate &e : all)
      if (e.candidate.str() != best->candidate.str())
        choice.ranked.push_back(std::move(e));
  }
  // The baseline: horizontal without overlap at the smallest M that fits
  // (M = 1 when the batch fits; ZeRO-Infinity splits the batch only for
  // memory), M = 1 when none does.
  std::vector<unsigned> ms = space.microBatches;
  ms.push_back(1);
  std::sort(ms.begin(), ms.end());
  ms.erase(std::unique(ms.begin(), ms.end()), ms.end());
  for (unsigned m : ms) {
    std::optional<CostEstimate> atM;
    forEachPlacement(space, hasMaster, [&](const Placement &pl) {
      consider(Candidate{Order::Horizontal, m, 0, pl}, atM);
    });
    if (m == 1 || (atM && atM->fits))
      choice.baseline = atM;
    if (choice.baseline && choice.baseline->fits)
      break;
  }
  if (best) {
    choice.best = std::move(*best);
  } else {
    choice.best.valid = false;
    choice.best.invalidReason = "no valid candidate in the search space";
  }
  return choice;
}

std::string spillway::schedule::estimateToJSON(const CostEstimate &e) {
  namespace json = llvm::json;
  auto tiers = [](const std::array<uint64_t, kNumTiers> &v) {
    return json::Object{{"gpu", int64_t(v[int(Tier::GPU)])},
                        {"host", int64_t(v[int(Tier::Host)])},
                        {"ssd", int64_t(v[int(Tier::SSD)])}};
  };
  json::Object placement;
  for (int i = 0; i < kNumTensorClasses; ++i)
    placement[tensorClassName(TensorClass(i))] =
        tierName(e.candidate.placement.tier[i]);
  // A class split by layer: each layer's tier, in layer order.
  json::Object layers;
  for (int i = 0; i < kNumTensorClasses; ++i)
    if (e.candidate.placement.split(TensorClass(i))) {
      json::Array v;
      for (Tier t : e.candidate.placement.layers[i])
        v.push_back(tierName(t));
      layers[tensorClassName(TensorClass(i))] = std::move(v);
    }
  if (!layers.empty())
    placement["layers"] = std::move(layers);
  // Blocks cut between host and SSD: per class, layer -> share on host.
  json::Object cuts;
  for (int i = 0; i < kNumTensorClasses; ++i)
    if (!e.candidate.placement.cuts[i].empty()) {
      json::Object c;
      for (auto [l, share] : e.candidate.placement.cuts[i])
        c[std::to_string(l)] = share;
      cuts[tensorClassName(TensorClass(i))] = std::move(c);
    }
  if (!cuts.empty())
    placement["cuts"] = std::move(cuts);
  // Byte counts are whole numbers except where the overlap fraction splits
  // a tensor; round to bytes.
  auto bytes = [](double b) { return int64_t(std::llround(b)); };
  json::Object o{
      {"order", orderName(e.candidate.order)},
      {"microbatches", int64_t(e.candidate.microBatches)},
      {"overlap_optimizer", e.candidate.overlap},
      {"placement", std::move(placement)},
      {"valid", e.valid},
      {"optimizer", e.optimizerOnGPU ? "gpu" : "cpu"},
      {"predicted_iteration_s", e.iterationSec},
      {"bound", boundName(e.bound)},
      {"time_s", json::Object{{"compute", e.computeSec},
                              {"pcie", e.pcieSec},
                              {"ssd", e.ssdSec},
                              {"cpu_optimizer", e.cpuOptimizerSec},
                              {"exposed_optimizer", e.exposedOptimizerSec}}},
      {"bytes_per_iteration", json::Object{{"ssd_read", bytes(e.bytes.ssdRead)},
                                           {"ssd_write", bytes(e.bytes.ssdWrite)},
                                           {"h2d", bytes(e.bytes.h2d)},
                                           {"d2h", bytes(e.bytes.d2h)}}},
      {"optimizer_state_bytes_per_iteration",
       json::Object{{"ssd_read", bytes(e.optimizerStateBytes.ssdRead)},
                    {"ssd_write", bytes(e.optimizerStateBytes.ssdWrite)},
                    {"h2d", bytes(e.optimizerStateBytes.h2d)},
                    {"d2h", bytes(e.optimizerStateBytes.d2h)}}},
      {"peak_bytes", tiers(e.peakBytes)},
      {"needed_bytes", tiers(e.neededBytes)},
      {"fits", e.fits},
  };
  // Data parallel only: one rank's plans keep the links they always had.
  if (e.bytes.network > 0) {
    o.getObject("bytes_per_iteration")
        ->try_emplace("network", bytes(e.bytes.network));
    o.getObject("time_s")->try_emplace("network", e.networkSec);
    // ZeRO stage 2: of it, what overlaps the backward.
    if (e.gradientsSharded)
      o.getObject("time_s")->try_emplace("network_overlapped",
                                         e.hiddenNetworkSec);
  }
  if (!e.valid)
    o["invalid_reason"] = e.invalidReason;
  if (!e.splitNote.empty())
    o["split_note"] = e.splitNote;
  std::string out;
  llvm::raw_string_ostream os(out);
  os << json::Value(std::move(o));
  return out;
}
