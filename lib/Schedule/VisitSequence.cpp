//===- VisitSequence.cpp - the order layers are visited and loaded --------===//

#include "spillway/Schedule/VisitSequence.h"

#include <map>

using namespace spillway::schedule;

std::vector<Visit>
spillway::schedule::visitSequence(const std::vector<int64_t> &fwdLayers,
                                  const std::vector<int64_t> &bwdLayers,
                                  Order order, int64_t microbatches) {
  std::vector<Visit> visits;
  if (order == Order::Snake) {
    // The direction flips at every layer visited, forward and backward
    // alike, so the micro-batch that ends one layer starts the next.
    int64_t turn = 0;
    auto pass = [&](bool backward, const std::vector<int64_t> &layers) {
      for (int64_t layer : layers) {
        for (int64_t k = 0; k < microbatches; ++k)
          visits.push_back(
              {backward, layer, turn % 2 == 0 ? k : microbatches - 1 - k});
        ++turn;
      }
    };
    pass(false, fwdLayers);
    pass(true, bwdLayers);
    return visits;
  }
  for (int64_t k = 0; k < microbatches; ++k) {
    for (int64_t layer : fwdLayers)
      visits.push_back({false, layer, k});
    for (int64_t layer : bwdLayers)
      visits.push_back({true, layer, k});
  }
  return visits;
}

std::vector<Visit> spillway::schedule::visitSequence(size_t numLayers,
                                                     Order order,
                                                     int64_t microbatches) {
  std::vector<int64_t> fwd(numLayers), bwd(numLayers);
  for (size_t i = 0; i < numLayers; ++i) {
    fwd[i] = int64_t(i);
    bwd[i] = int64_t(numLayers - 1 - i);
  }
  return visitSequence(fwd, bwd, order, microbatches);
}

std::vector<ParameterLoad> spillway::schedule::parameterLoads(
    const std::vector<int64_t> &layers,
    const std::function<bool(int64_t)> &hasParameters) {
  std::vector<ParameterLoad> loads;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (hasParameters && !hasParameters(layers[i]))
      continue;
    if (!loads.empty() && loads.back().layer == layers[i])
      loads.back().last = i;
    else
      loads.push_back({layers[i], i, i});
  }
  return loads;
}

std::vector<unsigned> spillway::schedule::loadsPerLayer(size_t numLayers,
                                                        Order order,
                                                        int64_t microbatches) {
  std::vector<int64_t> layers;
  for (const Visit &v : visitSequence(numLayers, order, microbatches))
    layers.push_back(v.layer);
  std::vector<unsigned> count(numLayers, 0);
  for (const ParameterLoad &l : parameterLoads(layers))
    ++count[size_t(l.layer)];
  return count;
}

std::vector<BlockLoad> spillway::schedule::blockLoads(
    const std::vector<ParameterLoad> &loads,
    const std::function<std::vector<int64_t>(int64_t)> &reads) {
  std::vector<BlockLoad> stays;
  std::map<int64_t, size_t> open; // block -> its latest stay
  size_t previous = 0;            // the latest load that read anything
  bool any = false;
  for (size_t k = 0; k < loads.size(); ++k) {
    std::vector<int64_t> blocks = reads(loads[k].layer);
    if (blocks.empty())
      continue;
    for (int64_t b : blocks) {
      auto it = open.find(b);
      if (any && it != open.end() && stays[it->second].last == previous) {
        stays[it->second].last = k;
        continue;
      }
      open[b] = stays.size();
      stays.push_back({b, k, k});
    }
    previous = k;
    any = true;
  }
  return stays;
}

std::vector<unsigned> spillway::schedule::blockLoadsPerLayer(
    size_t numLayers, Order order, int64_t microbatches,
    const std::vector<std::vector<size_t>> &reads,
    const std::vector<bool> &owns) {
  std::vector<int64_t> layers;
  for (const Visit &v : visitSequence(numLayers, order, microbatches))
    layers.push_back(v.layer);
  std::vector<unsigned> count(numLayers, 0);
  auto blocksOf = [&](int64_t l) {
    std::vector<int64_t> blocks;
    if (owns.empty() || owns[size_t(l)])
      blocks.push_back(l);
    if (size_t(l) < reads.size())
      for (size_t o : reads[size_t(l)])
        if (o != size_t(l) && o < numLayers)
          blocks.push_back(int64_t(o));
    return blocks;
  };
  for (const BlockLoad &s : blockLoads(parameterLoads(layers), blocksOf))
    ++count[size_t(s.block)];
  return count;
}
