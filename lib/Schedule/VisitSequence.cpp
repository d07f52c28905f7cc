//===- VisitSequence.cpp - the order layers are visited and loaded --------===//

#include "spillway/Schedule/VisitSequence.h"

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
