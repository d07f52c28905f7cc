//===- PlacementSpec.cpp - --place's ranges and fractions -----------------===//

#include "spillway/Schedule/PlacementSpec.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

using namespace spillway::schedule;

namespace {

std::string trim(const std::string &s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

/// A non-negative decimal integer, all of `s`.
std::optional<int64_t> index(const std::string &s) {
  if (s.empty() || s.size() > 18 ||
      !std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(c); }))
    return std::nullopt;
  return std::strtoll(s.c_str(), nullptr, 10);
}

/// "TIER:F" into a class's (or a cut block's) fractions.
bool addFraction(std::vector<std::pair<Tier, double>> &fractions, TensorClass c,
                 const std::string &item, const std::string &tierText,
                 std::string &error) {
  size_t colon = tierText.find(':');
  std::string t = trim(tierText.substr(0, colon)),
              f = trim(tierText.substr(colon + 1));
  auto tier = parseTier(t);
  if (!tier) {
    error = "'" + item + "': unknown tier '" + t + "' (gpu, host, ssd)";
    return false;
  }
  char *end = nullptr;
  double v = f.empty() ? NAN : std::strtod(f.c_str(), &end);
  if (f.empty() || *end || !(v > 0 && v <= 1)) {
    error = "'" + item + "': the fraction '" + f +
            "' is not a number in (0, 1] (e.g. " + tensorClassName(c) +
            "=host:0.75,ssd:0.25)";
    return false;
  }
  for (auto &[prev, _] : fractions)
    if (prev == *tier) {
      error = "'" + item + "': " + t + " has a fraction of " +
              tensorClassName(c) + " already";
      return false;
    }
  fractions.push_back({*tier, v});
  return true;
}

/// "F1 + F2 + ..." is 1, else the error naming `text`.
bool sumsToOne(const std::vector<std::pair<Tier, double>> &fractions,
               const std::string &text, const std::string &what,
               const std::string &example, std::string &error) {
  double sum = 0;
  for (auto &[_, f] : fractions)
    sum += f;
  if (std::abs(sum - 1) <= 1e-6)
    return true;
  char got[32];
  std::snprintf(got, sizeof got, "%.9g", sum);
  error = "'" + text + "': the fractions of " + what + " sum to " + got +
          ", not 1 (e.g. " + example + ")";
  return false;
}

} // namespace

std::optional<PlacementSpec>
spillway::schedule::parsePlacement(const std::vector<std::string> &items,
                                   std::string &error) {
  PlacementSpec spec;
  // The class (and its fractions, or a cut block's) a bare TIER:F item
  // continues, and the text that grows with it.
  std::optional<TensorClass> open;
  std::vector<std::pair<Tier, double>> *openFractions = nullptr;
  std::string *openText = nullptr;
  for (const std::string &raw : items) {
    std::string item = trim(raw);
    if (item.empty())
      continue;
    size_t eq = item.find('=');
    if (eq == std::string::npos) {
      if (open && item.find(':') != std::string::npos) {
        if (!addFraction(*openFractions, *open, item, item, error))
          return std::nullopt;
        const std::string before = *openText;
        *openText += "," + item;
        // The class's text (its errors quote it) grows too where it is
        // that item's.
        if (std::string &text = spec[*open].text; text == before)
          text = *openText;
        continue;
      }
      error = "'" + item +
              "' is not CLASS=TIER (e.g. params=ssd, optimizer[0:6]=host, "
              "optimizer=host:0.75,ssd:0.25)";
      return std::nullopt;
    }
    open.reset();
    std::string lhs = trim(item.substr(0, eq)), rhs = trim(item.substr(eq + 1));
    std::string name = lhs;
    std::optional<ClassSpec::Range> range;
    std::optional<int64_t> cutLayer; // CLASS[LAYER]=host:F,ssd:G
    if (size_t br = lhs.find('['); br != std::string::npos) {
      name = trim(lhs.substr(0, br));
      size_t close = lhs.find(']', br);
      std::string inside =
          close == std::string::npos ? "" : lhs.substr(br + 1, close - br - 1);
      size_t colon = inside.find(':');
      if (close != std::string::npos && close + 1 == lhs.size() &&
          colon == std::string::npos && rhs.find(':') != std::string::npos)
        cutLayer = index(trim(inside));
      std::optional<int64_t> begin, end;
      if (close != std::string::npos && close + 1 == lhs.size() &&
          colon != std::string::npos) {
        std::string b = trim(inside.substr(0, colon)),
                    e = trim(inside.substr(colon + 1));
        begin = b.empty() ? std::optional<int64_t>(0) : index(b);
        end = e.empty() ? std::optional<int64_t>(-1) : index(e);
      }
      if (!cutLayer && (!begin || !end || (*end >= 0 && *end <= *begin))) {
        error = "'" + item +
                "': a layer range is CLASS[BEGIN:END]=TIER with BEGIN < END "
                "(layers BEGIN..END-1 of train.layers; either may be left "
                "out), e.g. params[0:8]=host; a block cut between host and "
                "SSD is CLASS[LAYER]=host:F,ssd:G";
        return std::nullopt;
      }
      if (!cutLayer)
        range = ClassSpec::Range{*begin, *end, Tier::GPU, item};
    }
    auto c = parseTensorClass(name);
    if (!c) {
      error = "unknown tensor class '" + name +
              "' (classes: params, optimizer, gradients, activations, and "
              "master under bf16-mixed)";
      return std::nullopt;
    }
    ClassSpec &cs = spec[*c];
    if (cutLayer) {
      ClassSpec::Cut cut;
      cut.layer = *cutLayer;
      cut.text = item;
      if (!addFraction(cut.fractions, *c, item, rhs, error))
        return std::nullopt;
      cs.cuts.push_back(std::move(cut));
      open = *c;
      openFractions = &cs.cuts.back().fractions;
      openText = &cs.cuts.back().text;
      if (cs.text.empty())
        cs.text = item;
      continue;
    }
    if (rhs.find(':') != std::string::npos) {
      if (range) {
        error = "'" + item + "': a layer range takes one tier, not fractions";
        return std::nullopt;
      }
      if (!cs.fractions.empty() || cs.whole) {
        error = "class '" + name + "' is placed twice (" + cs.text + ", then " +
                item + "): place each class once";
        return std::nullopt;
      }
      if (!addFraction(cs.fractions, *c, item, rhs, error))
        return std::nullopt;
      cs.fractionsText = item;
      open = *c;
      openFractions = &cs.fractions;
      openText = &cs.fractionsText;
      if (cs.text.empty())
        cs.text = item;
      continue;
    }
    auto tier = parseTier(rhs);
    if (!tier) {
      error =
          "unknown tier '" + rhs + "' for " + name + " (tiers: gpu, host, ssd)";
      return std::nullopt;
    }
    if (range) {
      range->tier = *tier;
      cs.ranges.push_back(*range);
    } else if (cs.whole || !cs.fractions.empty()) {
      error = "class '" + name + "' is placed twice (" + cs.text + ", then " +
              item + "): place each class once, or split it by layer (e.g. " +
              name + "=ssd," + name + "[0:4]=host)";
      return std::nullopt;
    } else {
      cs.whole = *tier;
    }
    if (cs.text.empty())
      cs.text = item;
  }
  for (int k = 0; k < kNumTensorClasses; ++k) {
    ClassSpec &cs = spec.classes[k];
    const std::string cls = tensorClassName(TensorClass(k));
    for (const ClassSpec::Cut &cut : cs.cuts) {
      const TensorClass c = TensorClass(k);
      if (c != TensorClass::Params && c != TensorClass::Optimizer &&
          c != TensorClass::Master) {
        error = "'" + cut.text + "': " + cls +
                " blocks are not cut between tiers (params, optimizer and "
                "master blocks are); place the layer whole, e.g. " +
                cls + "[" + std::to_string(cut.layer) + ":" +
                std::to_string(cut.layer + 1) + "]=host";
        return std::nullopt;
      }
      if (cut.fractions.size() != 2 || cut.fractions[0].first != Tier::Host ||
          cut.fractions[1].first != Tier::SSD) {
        error = "'" + cut.text +
                "': a cut block has its first elements on "
                "host and the rest on SSD: " +
                cls + "[" + std::to_string(cut.layer) +
                "]=host:F,ssd:G (F + G = 1)";
        return std::nullopt;
      }
      if (!sumsToOne(cut.fractions, cut.text,
                     cls + "'s layer " + std::to_string(cut.layer),
                     cls + "[" + std::to_string(cut.layer) +
                         "]=host:0.4,ssd:0.6",
                     error))
        return std::nullopt;
      for (const ClassSpec::Cut &other : cs.cuts)
        if (&other != &cut && other.layer == cut.layer) {
          error = "'" + other.text + "': layer " + std::to_string(cut.layer) +
                  " of " + cls + " is cut by '" + cut.text + "' already";
          return std::nullopt;
        }
    }
    if (!cs.fractions.empty() && TensorClass(k) == TensorClass::Activations) {
      error = "'" + cs.fractionsText +
              "': activations take layer ranges (e.g. "
              "activations=ssd,activations[6:]=host), not fractions: a "
              "fraction weighs each layer by its parameters' bytes, which a "
              "layer's activations are not proportional to";
      return std::nullopt;
    }
    if (cs.fractions.empty())
      continue;
    if (!cs.ranges.empty() || !cs.cuts.empty()) {
      error = "'" + cs.text + "': " + cls + " takes fractions or " +
              (cs.ranges.empty() ? "cuts of a layer's block" : "layer ranges") +
              ", not both";
      return std::nullopt;
    }
    if (!sumsToOne(cs.fractions, cs.fractionsText, cls,
                   cls + "=host:0.75,ssd:0.25", error))
      return std::nullopt;
  }
  return spec;
}

std::optional<std::vector<std::optional<Tier>>>
spillway::schedule::resolveLayers(const ClassSpec &spec, TensorClass c,
                                  const std::vector<uint64_t> &layerBytes,
                                  std::optional<Tier> fallback,
                                  std::string &error, std::string *warning) {
  const size_t n = layerBytes.size();
  std::vector<std::optional<Tier>> tiers(n, spec.whole ? spec.whole : fallback);
  if (!spec.fractions.empty()) {
    double total = 0;
    for (uint64_t b : layerBytes)
      total += double(b);
    double before = 0;
    for (size_t l = 0; l < n; ++l) {
      const double middle = before + double(layerBytes[l]) / 2;
      before += double(layerBytes[l]);
      double upTo = 0;
      Tier t = spec.fractions.back().first;
      for (auto &[tier, f] : spec.fractions) {
        upTo += f * total;
        if (middle < upTo) {
          t = tier;
          break;
        }
      }
      tiers[l] = t;
    }
    // A share too small for any layer's middle byte gets none: said, with
    // the share that would take the next layer, as layers are placed whole.
    double start = 0;
    for (auto &[tier, f] : spec.fractions) {
      const double from = start;
      start += f;
      bool holds = false;
      for (size_t l = 0; l < n; ++l)
        holds |= tiers[l] == tier && layerBytes[l] > 0;
      if (!warning || holds)
        continue;
      // The next layer's middle byte past the share's start, or, for the
      // last share (which grows from its end), the last one before it.
      std::string hint;
      double at = 0;
      std::optional<std::pair<size_t, double>> before;
      for (size_t l = 0; l < n && total > 0; ++l) {
        const double middle = (at + double(layerBytes[l]) / 2) / total;
        at += double(layerBytes[l]);
        if (!layerBytes[l])
          continue;
        char more[160];
        if (middle >= from) {
          std::snprintf(more, sizeof more,
                        "; a share above %.3g would take layer %zu",
                        middle - from, l);
          hint = more;
          break;
        }
        before = {l, middle};
      }
      if (hint.empty() && before && &f == &spec.fractions.back().second) {
        char more[160];
        std::snprintf(more, sizeof more,
                      "; a share of %.3g or more would take layer %zu",
                      start - before->second, before->first);
        hint = more;
      }
      char fraction[32];
      std::snprintf(fraction, sizeof fraction, "%.9g", f);
      *warning = "'" + spec.fractionsText + "': " + tierName(tier) +
                 "'s fraction " + fraction + " holds no layer of " +
                 tensorClassName(c) +
                 " (a layer goes whole to the tier whose share holds its "
                 "middle byte" +
                 hint + ")";
      break;
    }
  }
  std::vector<const ClassSpec::Range *> by(n, nullptr);
  for (const ClassSpec::Range &r : spec.ranges) {
    const int64_t end = r.end < 0 ? int64_t(n) : r.end;
    if (r.begin >= int64_t(n) || end > int64_t(n)) {
      error = "'" + r.text + "': the model has " + std::to_string(n) +
              " layers (0.." + std::to_string(n ? n - 1 : 0) +
              " in train.layers; spillwayc --report lists them)";
      return std::nullopt;
    }
    for (int64_t l = r.begin; l < end; ++l) {
      if (by[l]) {
        error = "'" + r.text + "': layer " + std::to_string(l) + " of " +
                tensorClassName(c) + " is placed by '" + by[l]->text +
                "' already";
        return std::nullopt;
      }
      by[l] = &r;
      tiers[l] = r.tier;
    }
  }
  for (const ClassSpec::Cut &cut : spec.cuts) {
    if (cut.layer >= int64_t(n)) {
      error = "'" + cut.text + "': the model has " + std::to_string(n) +
              " layers (0.." + std::to_string(n ? n - 1 : 0) +
              " in train.layers; spillwayc --report lists them)";
      return std::nullopt;
    }
    if (by[cut.layer]) {
      error = "'" + cut.text + "': layer " + std::to_string(cut.layer) +
              " of " + tensorClassName(c) + " is placed by '" +
              by[cut.layer]->text + "' already";
      return std::nullopt;
    }
    tiers[cut.layer] = Tier::SSD; // its home; its first elements on host
  }
  return tiers;
}

std::string spillway::schedule::layerRanges(TensorClass c,
                                            const std::vector<Tier> &tiers,
                                            Tier whole) {
  std::string s;
  for (size_t l = 0; l < tiers.size();) {
    size_t e = l + 1;
    while (e < tiers.size() && tiers[e] == tiers[l])
      ++e;
    if (tiers[l] != whole)
      s += std::string(s.empty() ? "" : ",") + tensorClassName(c) + "[" +
           std::to_string(l) + ":" + std::to_string(e) +
           "]=" + tierName(tiers[l]);
    l = e;
  }
  return s;
}

std::string spillway::schedule::cutItems(TensorClass c,
                                         const std::map<size_t, double> &cuts) {
  // The host share reads back exactly; the SSD share is its complement
  // to 1 to within the parser's tolerance, so 1 - 0.7 prints as 0.3.
  auto shortest = [](double v, double tolerance) {
    char f[40];
    for (int digits = 1; digits <= 17; ++digits) {
      std::snprintf(f, sizeof f, "%.*g", digits, v);
      if (std::abs(std::strtod(f, nullptr) - v) <= tolerance)
        break;
    }
    return std::string(f);
  };
  std::string s;
  for (auto [l, share] : cuts)
    s += std::string(s.empty() ? "" : ",") + tensorClassName(c) + "[" +
         std::to_string(l) + "]=host:" + shortest(share, 0) +
         ",ssd:" + shortest(1 - share, 1e-12);
  return s;
}
