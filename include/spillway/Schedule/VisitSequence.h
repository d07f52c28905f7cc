//===- VisitSequence.h - the order layers are visited and loaded -*- C++ -*-===//
//
// Which layer runs when in one iteration (the forward and backward visits of
// every micro-batch, in horizontal or snake order) and which of those visits
// share one load of the layer's parameters onto the GPU. The cost model
// counts the loads, sched-order emits the tasks in this sequence and
// sched-insert-transfers moves the parameters per load: all three use these
// functions, so the bytes the model predicts are the bytes the plan moves.
//
// Plain C++, no dialect.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_SCHEDULE_VISITSEQUENCE_H
#define SPILLWAY_SCHEDULE_VISITSEQUENCE_H

#include "spillway/Schedule/CostModel.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace spillway::schedule {

/// One micro-batch's forward or backward pass through one layer.
struct Visit {
  bool backward = false;
  int64_t layer = 0;
  int64_t microbatch = 0;
  bool operator==(const Visit &) const = default;
};

/// The forward and backward visits of one iteration of M micro-batches.
/// `fwdLayers` are the layers with a forward (ascending), `bwdLayers` those
/// with a backward (descending). Horizontal: per micro-batch, every forward
/// then every backward. Snake: per layer, all M micro-batches in a row, the
/// micro-batch direction flipping at each layer (0..M-1, then M-1..0, ...)
/// through the forwards and on through the backwards.
std::vector<Visit> visitSequence(const std::vector<int64_t> &fwdLayers,
                                 const std::vector<int64_t> &bwdLayers,
                                 Order order, int64_t microbatches);

/// The same for layers 0..numLayers-1, each with a forward and a backward.
std::vector<Visit> visitSequence(size_t numLayers, Order order,
                                 int64_t microbatches);

/// One load of a layer's parameters onto the GPU, serving the visits
/// first..last (indices into the sequence it was computed from).
struct ParameterLoad {
  int64_t layer = 0;
  size_t first = 0, last = 0;
  bool operator==(const ParameterLoad &) const = default;
};

/// The loads of a sequence of visited layers, the GPU keeping one layer's
/// parameters at a time: a maximal run of visits of one layer is one load.
/// Visits of the layers `hasParameters` rejects load nothing and are
/// skipped, so the runs on both sides of one may merge (null: every layer
/// has parameters).
std::vector<ParameterLoad>
parameterLoads(const std::vector<int64_t> &layers,
               const std::function<bool(int64_t)> &hasParameters = nullptr);

/// One stay of a parameter block on the GPU: the consecutive loads
/// first..last (indices into the loads) all read block `block` (the block
/// of the layer that owns the parameters).
struct BlockLoad {
  int64_t block = 0;
  size_t first = 0, last = 0;
  bool operator==(const BlockLoad &) const = default;
};

/// The stays of the parameter blocks over `loads`: `reads(layer)` lists the
/// blocks a load of `layer` needs on the GPU (its own when it owns
/// parameters, and the owners' of the parameters it shares, a tied weight).
/// A block read by consecutive loads stays on the GPU and is uploaded
/// once; loads that read nothing are skipped (they break no stay). Ordered
/// by first load, then by `reads` order.
std::vector<BlockLoad>
blockLoads(const std::vector<ParameterLoad> &loads,
           const std::function<std::vector<int64_t>(int64_t)> &reads);

/// Per layer (index = layer), how many loads one iteration makes.
std::vector<unsigned> loadsPerLayer(size_t numLayers, Order order,
                                    int64_t microbatches);

/// Per layer, how many times one iteration uploads its parameter block
/// (blockLoads over the loads of every layer): `reads[l]` are the other
/// layers whose parameters layer l reads (empty for all: loadsPerLayer);
/// `owns[l]` whether layer l owns parameters (empty: every layer does).
std::vector<unsigned>
blockLoadsPerLayer(size_t numLayers, Order order, int64_t microbatches,
                   const std::vector<std::vector<size_t>> &reads,
                   const std::vector<bool> &owns = {});

} // namespace spillway::schedule

#endif
