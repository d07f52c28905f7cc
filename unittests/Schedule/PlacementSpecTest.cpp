//===- PlacementSpecTest.cpp - --place's ranges and fractions -------------===//

#include "spillway/Schedule/PlacementSpec.h"

#include <gtest/gtest.h>

using namespace spillway::schedule;

namespace {

PlacementSpec parse(std::vector<std::string> items) {
  std::string error;
  auto spec = parsePlacement(items, error);
  EXPECT_TRUE(spec) << error;
  return spec ? *spec : PlacementSpec{};
}

std::string parseError(std::vector<std::string> items) {
  std::string error;
  EXPECT_FALSE(parsePlacement(items, error));
  return error;
}

std::vector<std::optional<Tier>> layersOf(const ClassSpec &cs, TensorClass c,
                                          std::vector<uint64_t> bytes,
                                          std::optional<Tier> fallback) {
  std::string error;
  auto v = resolveLayers(cs, c, bytes, fallback, error);
  EXPECT_TRUE(v) << error;
  return v ? *v : std::vector<std::optional<Tier>>{};
}

constexpr auto H = Tier::Host, S = Tier::SSD;

TEST(PlacementSpec, WholeClassesRangesAndFractions) {
  // The items as spillwayc's comma-separated --place hands them over: a
  // bare TIER:F continues the fractions before it.
  PlacementSpec spec =
      parse({"params=ssd", "params[0:2]=host", "optimizer=host:0.75",
             "ssd:0.25", "gradients[3:]=ssd", "activations=gpu"});
  EXPECT_EQ(spec[TensorClass::Params].whole, S);
  ASSERT_EQ(spec[TensorClass::Params].ranges.size(), 1u);
  EXPECT_EQ(spec[TensorClass::Params].ranges[0].begin, 0);
  EXPECT_EQ(spec[TensorClass::Params].ranges[0].end, 2);
  ASSERT_EQ(spec[TensorClass::Optimizer].fractions.size(), 2u);
  EXPECT_TRUE(spec[TensorClass::Gradients].byLayer());
  EXPECT_EQ(spec[TensorClass::Gradients].ranges[0].end, -1);
  EXPECT_FALSE(spec[TensorClass::Activations].byLayer());
  // Activations split by layer ranges.
  EXPECT_TRUE(parse({"activations=ssd",
                     "activations[2:]=host"})[TensorClass::Activations]
                  .byLayer());
  EXPECT_FALSE(spec[TensorClass::Master].given());

  // Four equal layers: ranges over the class's tier.
  std::vector<uint64_t> four(4, 100);
  EXPECT_EQ(layersOf(spec[TensorClass::Params], TensorClass::Params, four,
                     std::nullopt),
            (std::vector<std::optional<Tier>>{H, H, S, S}));
  // Layers no range names and no tier covers stay open.
  EXPECT_EQ(layersOf(spec[TensorClass::Gradients], TensorClass::Gradients, four,
                     std::nullopt),
            (std::vector<std::optional<Tier>>{std::nullopt, std::nullopt,
                                              std::nullopt, S}));
  // 3/4 of 400 bytes: the layers whose middle byte lies below 300 (50,
  // 150, 250) on host, the last (350) on SSD.
  EXPECT_EQ(layersOf(spec[TensorClass::Optimizer], TensorClass::Optimizer, four,
                     std::nullopt),
            (std::vector<std::optional<Tier>>{H, H, H, S}));
  // Unequal layers: 3/4 of 1000 is 750; middles 50, 400, 850.
  EXPECT_EQ(layersOf(spec[TensorClass::Optimizer], TensorClass::Optimizer,
                     {100, 600, 300}, std::nullopt),
            (std::vector<std::optional<Tier>>{H, H, S}));
}

TEST(PlacementSpec, BadItemsNameThemselves) {
  EXPECT_NE(parseError({"params"}).find("'params' is not CLASS=TIER"),
            std::string::npos);
  EXPECT_NE(parseError({"weights=host"}).find("unknown tensor class 'weights'"),
            std::string::npos);
  EXPECT_NE(parseError({"params=nvme"}).find("unknown tier 'nvme'"),
            std::string::npos);
  EXPECT_NE(parseError({"params[2:1]=host"}).find("BEGIN < END"),
            std::string::npos);
  EXPECT_NE(parseError({"params[a:1]=host"}).find("BEGIN < END"),
            std::string::npos);
  EXPECT_NE(parseError({"params[0:1]=host:0.5", "ssd:0.5"})
                .find("a layer range takes one tier"),
            std::string::npos);
  EXPECT_NE(parseError({"optimizer=host:0.7", "ssd:0.2"}).find("sum to 0.9"),
            std::string::npos);
  EXPECT_NE(parseError({"optimizer=host:1.5"}).find("not a number in (0, 1]"),
            std::string::npos);
  EXPECT_NE(parseError({"optimizer=host:0.5", "host:0.5"})
                .find("host has a fraction of optimizer already"),
            std::string::npos);
  EXPECT_NE(parseError({"activations=host:0.5", "ssd:0.5"})
                .find("activations take layer ranges"),
            std::string::npos);
  EXPECT_NE(parseError({"params=ssd", "params=host"}).find("placed twice"),
            std::string::npos);
  EXPECT_NE(parseError({"params[0:1]=host", "params=host:0.5", "ssd:0.5"})
                .find("fractions or layer ranges, not both"),
            std::string::npos);
  // A bare TIER:F continues fractions only.
  EXPECT_NE(parseError({"params=ssd", "host:0.5"}).find("is not CLASS=TIER"),
            std::string::npos);

  std::string error;
  PlacementSpec spec = parse({"params[0:5]=host", "params[1:2]=ssd"});
  EXPECT_FALSE(resolveLayers(spec[TensorClass::Params], TensorClass::Params,
                             std::vector<uint64_t>(4, 1), std::nullopt, error));
  EXPECT_NE(error.find("the model has 4 layers"), std::string::npos) << error;
  spec = parse({"params[0:3]=host", "params[2:]=ssd"});
  EXPECT_FALSE(resolveLayers(spec[TensorClass::Params], TensorClass::Params,
                             std::vector<uint64_t>(4, 1), std::nullopt, error));
  EXPECT_NE(error.find("layer 2 of params is placed by 'params[0:3]=host'"),
            std::string::npos)
      << error;
}

TEST(PlacementSpec, AShareHoldingNoLayerIsSaid) {
  // Four layers of 100 bytes, middles at 12.5%, 37.5%, 62.5%, 87.5%: ssd's
  // 0.1 (from 0) holds none; layer 0's middle is 0.125 into its share.
  PlacementSpec spec = parse({"optimizer=ssd:0.1", "host:0.9"});
  std::string error, warning;
  auto v = resolveLayers(spec[TensorClass::Optimizer], TensorClass::Optimizer,
                         std::vector<uint64_t>(4, 100), std::nullopt, error,
                         &warning);
  ASSERT_TRUE(v) << error;
  EXPECT_EQ(*v, (std::vector<std::optional<Tier>>{H, H, H, H}));
  EXPECT_EQ(warning, "'optimizer=ssd:0.1,host:0.9': ssd's fraction 0.1 holds "
                     "no layer of optimizer (a layer goes whole to the tier "
                     "whose share holds its middle byte; a share above 0.125 "
                     "would take layer 0)");
  // The last share grows from its end: ssd's 0.1 from 0.9 holds none;
  // layer 3's middle is 0.125 before the end.
  spec = parse({"optimizer=host:0.9", "ssd:0.1"});
  warning.clear();
  v = resolveLayers(spec[TensorClass::Optimizer], TensorClass::Optimizer,
                    std::vector<uint64_t>(4, 100), std::nullopt, error,
                    &warning);
  EXPECT_TRUE(v) << error;
  EXPECT_NE(warning.find("ssd's fraction 0.1 holds no layer of optimizer"),
            std::string::npos)
      << warning;
  EXPECT_NE(warning.find("a share of 0.125 or more would take layer 3"),
            std::string::npos)
      << warning;
  // Every share holding a layer: nothing said.
  spec = parse({"optimizer=host:0.5", "ssd:0.5"});
  warning.clear();
  EXPECT_TRUE(resolveLayers(
      spec[TensorClass::Optimizer], TensorClass::Optimizer,
      std::vector<uint64_t>(4, 100), std::nullopt, error, &warning));
  EXPECT_EQ(warning, "");
}

TEST(PlacementSpec, RangesPrintAsTheyParse) {
  // What the planner writes for sched-place reads back to the same layers.
  std::vector<Tier> tiers{H, S, S, H, H, S};
  std::string ranges = layerRanges(TensorClass::Optimizer, tiers, S);
  EXPECT_EQ(ranges, "optimizer[0:1]=host,optimizer[3:5]=host");
  PlacementSpec spec =
      parse({"optimizer=ssd", "optimizer[0:1]=host", "optimizer[3:5]=host"});
  auto back = layersOf(spec[TensorClass::Optimizer], TensorClass::Optimizer,
                       std::vector<uint64_t>(6, 8), std::nullopt);
  for (size_t l = 0; l < tiers.size(); ++l)
    EXPECT_EQ(back[l], tiers[l]) << "layer " << l;
}

} // namespace

namespace {
TEST(PlacementSpec, CutsParseAndPrintBack) {
  // CLASS[LAYER]=host:F,ssd:G cuts one layer's block; its home is SSD.
  PlacementSpec spec = parse(
      {"optimizer=host", "optimizer[2]=host:0.25", "ssd:0.75", "params=ssd"});
  const ClassSpec &o = spec[TensorClass::Optimizer];
  ASSERT_EQ(o.cuts.size(), 1u);
  EXPECT_EQ(o.cuts[0].layer, 2);
  EXPECT_DOUBLE_EQ(o.cuts[0].host(), 0.25);
  EXPECT_EQ(o.cuts[0].text, "optimizer[2]=host:0.25,ssd:0.75");
  EXPECT_EQ(o.text, "optimizer=host");
  // A class's first item, which its errors quote, is the whole cut or the
  // whole fraction list, not its first tier.
  EXPECT_EQ(
      parse({"optimizer[9]=host:0.5", "ssd:0.5"})[TensorClass::Optimizer].text,
      "optimizer[9]=host:0.5,ssd:0.5");
  EXPECT_EQ(parse({"params=host:0.75", "ssd:0.25"})[TensorClass::Params].text,
            "params=host:0.75,ssd:0.25");
  auto tiers = layersOf(o, TensorClass::Optimizer, {8, 8, 8, 8}, std::nullopt);
  EXPECT_EQ(tiers[1], H);
  EXPECT_EQ(tiers[2], S);
  // What the planner writes reads back to the same share, bit for bit.
  for (double share : {0.25, 1.0 / 3, 0.0671400903808909}) {
    std::string items = cutItems(TensorClass::Master, {{4, share}});
    std::vector<std::string> list;
    for (size_t at = 0, next; at != std::string::npos; at = next) {
      next = items.find(',', at);
      list.push_back(items.substr(
          at, next == std::string::npos ? std::string::npos : next - at));
      if (next != std::string::npos)
        ++next;
    }
    PlacementSpec back = parse(list);
    ASSERT_EQ(back[TensorClass::Master].cuts.size(), 1u) << items;
    EXPECT_EQ(back[TensorClass::Master].cuts[0].host(), share) << items;
  }
  EXPECT_EQ(cutItems(TensorClass::Optimizer, {{2, 0.25}}),
            "optimizer[2]=host:0.25,ssd:0.75");
  EXPECT_EQ(cutItems(TensorClass::Params, {{0, 0.7}, {3, 0.99}}),
            "params[0]=host:0.7,ssd:0.3,params[3]=host:0.99,ssd:0.01");
}

TEST(PlacementSpec, BadCutsNameThemselves) {
  EXPECT_EQ(parseError({"gradients=ssd", "gradients[0]=host:0.5", "ssd:0.5"}),
            "'gradients[0]=host:0.5,ssd:0.5': gradients blocks are not cut "
            "between tiers (params, optimizer and master blocks are); place "
            "the layer whole, e.g. gradients[0:1]=host");
  EXPECT_EQ(parseError({"optimizer=ssd", "optimizer[0]=ssd:0.5", "host:0.5"}),
            "'optimizer[0]=ssd:0.5,host:0.5': a cut block has its first "
            "elements on host and the rest on SSD: optimizer[0]=host:F,ssd:G "
            "(F + G = 1)");
  EXPECT_EQ(parseError({"optimizer=ssd", "optimizer[0]=host:0.5"}),
            "'optimizer[0]=host:0.5': a cut block has its first elements on "
            "host and the rest on SSD: optimizer[0]=host:F,ssd:G (F + G = 1)");
  EXPECT_EQ(parseError({"optimizer=ssd", "optimizer[0]=host:0.5", "ssd:0.6"}),
            "'optimizer[0]=host:0.5,ssd:0.6': the fractions of optimizer's "
            "layer 0 sum to 1.1, not 1 (e.g. optimizer[0]=host:0.4,ssd:0.6)");
  EXPECT_EQ(parseError({"optimizer=ssd", "optimizer[0]=host:0.5", "ssd:0.5",
                        "optimizer[0]=host:0.25", "ssd:0.75"}),
            "'optimizer[0]=host:0.25,ssd:0.75': layer 0 of optimizer is cut "
            "by 'optimizer[0]=host:0.5,ssd:0.5' already");
  // A cut and a range of one layer, or past the last layer.
  PlacementSpec spec = parse({"optimizer=ssd", "optimizer[0:2]=host",
                              "optimizer[1]=host:0.5", "ssd:0.5"});
  std::string error;
  EXPECT_FALSE(resolveLayers(spec[TensorClass::Optimizer],
                             TensorClass::Optimizer, {8, 8, 8}, std::nullopt,
                             error));
  EXPECT_EQ(error, "'optimizer[1]=host:0.5,ssd:0.5': layer 1 of optimizer is "
                   "placed by 'optimizer[0:2]=host' already");
  spec = parse({"optimizer=ssd", "optimizer[3]=host:0.5", "ssd:0.5"});
  EXPECT_FALSE(resolveLayers(spec[TensorClass::Optimizer],
                             TensorClass::Optimizer, {8, 8, 8}, std::nullopt,
                             error));
  EXPECT_EQ(error, "'optimizer[3]=host:0.5,ssd:0.5': the model has 3 layers "
                   "(0..2 in train.layers; spillwayc --report lists them)");
}
} // namespace
