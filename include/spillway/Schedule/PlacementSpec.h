//===- PlacementSpec.h - --place's CLASS=TIER, ranges and fractions -------===//
//
// The placement a user pins (spillwayc --place, sched-place's `placement`)
// and the one the planner writes for sched-place: per tensor class a tier
// for the whole model, a tier per range of layers, or fractions of the
// class's bytes per tier taken by layer in order:
//
//   params=ssd                      every layer's block on SSD
//   optimizer=ssd,optimizer[0:6]=host   layers 0..5 on host, the rest SSD
//   optimizer=host:0.75,ssd:0.25    the first layers holding 3/4 of the
//                                   class's bytes on host, the rest on SSD
//   optimizer=ssd,optimizer[5]=host:0.4,ssd:0.6
//                                   layer 5's block cut: its first 40% on
//                                   host, the rest on SSD
//
// Parsing needs nothing; resolving ranges and fractions to layers needs
// the layer count and each layer's bytes (resolveLayers). Plain C++, like
// the cost model: sched-place and the planner share it.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_SCHEDULE_PLACEMENTSPEC_H
#define SPILLWAY_SCHEDULE_PLACEMENTSPEC_H

#include "spillway/Schedule/CostModel.h"

#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace spillway::schedule {

struct ClassSpec {
  /// CLASS=TIER: the tier of the layers no range names.
  std::optional<Tier> whole;
  /// CLASS=TIER:F,TIER:F,...: the class's bytes split in this order.
  std::vector<std::pair<Tier, double>> fractions;
  /// CLASS[BEGIN:END]=TIER, layers [begin, end); end -1: to the last.
  struct Range {
    int64_t begin = 0, end = -1;
    Tier tier = Tier::GPU;
    std::string text; ///< as given, for messages
  };
  std::vector<Range> ranges;
  /// CLASS[LAYER]=host:F,ssd:G: the layer's block cut between host (its
  /// first F of the elements) and SSD (the rest).
  struct Cut {
    int64_t layer = 0;
    std::vector<std::pair<Tier, double>> fractions; ///< as parsed
    double host() const { return fractions.front().second; }
    std::string text; ///< as given, for messages
  };
  std::vector<Cut> cuts;
  /// The first item that names the class, for messages.
  std::string text;
  /// The fractions as given ("optimizer=host:0.75,ssd:0.25"), for messages.
  std::string fractionsText;
  bool given() const { return !text.empty(); }
  /// Whether it pins layers apart (ranges or fractions), not the whole.
  bool byLayer() const {
    return !fractions.empty() || !ranges.empty() || !cuts.empty();
  }
};

struct PlacementSpec {
  std::array<ClassSpec, kNumTensorClasses> classes;
  ClassSpec &operator[](TensorClass c) { return classes[int(c)]; }
  const ClassSpec &operator[](TensorClass c) const { return classes[int(c)]; }
};

/// Parses the items of a comma-separated placement (an item TIER:F after a
/// CLASS=TIER:F item continues its fractions). Errors name the item: an
/// unknown class or tier, a malformed range, fractions not in (0, 1] or not
/// summing to 1, a tier or range given twice, activations split by fractions,
/// a cut that is not CLASS[LAYER]=host:F,ssd:G of params, optimizer or
/// master.
std::optional<PlacementSpec>
parsePlacement(const std::vector<std::string> &items, std::string &error);

/// The tier of each of a class's `layerBytes.size()` layers under `spec`;
/// `fallback` for layers it leaves open (none: they stay open). Fractions
/// take the layers in order: a layer goes to the tier whose share of the
/// class's bytes holds the layer's middle byte. A cut layer's home is SSD.
/// Errors: a range or cut past the last layer, or two naming one layer. A
/// fraction too small to hold any layer is not an error: `warning` (when given)
/// says so.
std::optional<std::vector<std::optional<Tier>>>
resolveLayers(const ClassSpec &spec, TensorClass c,
              const std::vector<uint64_t> &layerBytes,
              std::optional<Tier> fallback, std::string &error,
              std::string *warning = nullptr);

/// `CLASS[a:b]=TIER` items for the layers of `tiers` not on `whole`, one
/// per run of consecutive layers on one tier ("optimizer[0:6]=host").
std::string layerRanges(TensorClass c, const std::vector<Tier> &tiers,
                        Tier whole);

/// `CLASS[L]=host:F,ssd:G` items for the cuts of class `c` (layer -> share
/// on host), F and G as the shortest decimals that read back the same.
std::string cutItems(TensorClass c, const std::map<size_t, double> &cuts);

} // namespace spillway::schedule

#endif
