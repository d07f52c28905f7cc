//===- VisitSequenceTest.cpp - visit orders and parameter loads by hand ---===//

#include "spillway/Schedule/VisitSequence.h"

#include <gtest/gtest.h>

using namespace spillway::schedule;

namespace {
constexpr bool F = false, B = true;

TEST(VisitSequence, HorizontalRunsEachMicrobatchThroughEveryLayer) {
  std::vector<Visit> want = {{F, 0, 0}, {F, 1, 0}, {B, 1, 0}, {B, 0, 0},
                             {F, 0, 1}, {F, 1, 1}, {B, 1, 1}, {B, 0, 1}};
  EXPECT_EQ(visitSequence(2, Order::Horizontal, 2), want);
}

TEST(VisitSequence, SnakeFlipsTheMicrobatchDirectionAtEveryLayer) {
  // Layer turns: fwd 0 (0,1), fwd 1 (1,0), bwd 1 (0,1), bwd 0 (1,0).
  std::vector<Visit> want = {{F, 0, 0}, {F, 0, 1}, {F, 1, 1}, {F, 1, 0},
                             {B, 1, 0}, {B, 1, 1}, {B, 0, 1}, {B, 0, 0}};
  EXPECT_EQ(visitSequence(2, Order::Snake, 2), want);
}

TEST(VisitSequence, LayersWithoutABackwardAreOnlyVisitedForward) {
  // Layer 2 (say, a loss with no parameters) has no backward task.
  std::vector<Visit> want = {{F, 0, 0}, {F, 2, 0}, {B, 0, 0}};
  EXPECT_EQ(visitSequence({0, 2}, {0}, Order::Horizontal, 1), want);
}

TEST(ParameterLoads, ARunOfOneLayerIsOneLoad) {
  // 0 1 1 0 | 0 1 1 0: the last forward and first backward share a load,
  // and so do the backward of layer 0 and the next micro-batch's forward.
  std::vector<ParameterLoad> want = {
      {0, 0, 0}, {1, 1, 2}, {0, 3, 4}, {1, 5, 6}, {0, 7, 7}};
  EXPECT_EQ(parameterLoads({0, 1, 1, 0, 0, 1, 1, 0}), want);
}

TEST(ParameterLoads, LayersWithoutParametersLoadNothingAndLetRunsMerge) {
  // Layer 1 has no parameters: 0 1 0 is one load of layer 0.
  std::vector<ParameterLoad> want = {{0, 0, 2}, {2, 3, 3}};
  EXPECT_EQ(parameterLoads({0, 1, 0, 2},
                           [](int64_t layer) { return layer != 1; }),
            want);
}

TEST(ParameterLoads, PerLayerCountsOfBothOrders) {
  // Horizontal, 3 layers, M = 2: 0 1 2 2 1 0 0 1 2 2 1 0 -> layer 0 is
  // loaded at the start, once for the middle 0 0 and at the end; layer 2
  // once per micro-batch; layer 1 twice per micro-batch.
  EXPECT_EQ(loadsPerLayer(3, Order::Horizontal, 2),
            (std::vector<unsigned>{3, 4, 2}));
  // Snake: each layer once per pass, the last layer's forward and backward
  // sharing one load, whatever M.
  EXPECT_EQ(loadsPerLayer(3, Order::Snake, 4),
            (std::vector<unsigned>{2, 2, 1}));
  EXPECT_EQ(loadsPerLayer(3, Order::Snake, 1),
            loadsPerLayer(3, Order::Horizontal, 1));
}
TEST(BlockLoads, ATiedWeightStaysWhileConsecutiveLoadsReadIt) {
  // Horizontal, M = 1, layer 2 reads layer 0's tied weight: the loads
  // 0 | 1 | 2 2 | 1 | 0 bring block 0 three times and block 2 once.
  std::vector<ParameterLoad> loads = parameterLoads({0, 1, 2, 2, 1, 0});
  auto reads = [](int64_t l) {
    return l == 2 ? std::vector<int64_t>{2, 0} : std::vector<int64_t>{l};
  };
  std::vector<BlockLoad> want = {
      {0, 0, 0}, {1, 1, 1}, {2, 2, 2}, {0, 2, 2}, {1, 3, 3}, {0, 4, 4}};
  EXPECT_EQ(blockLoads(loads, reads), want);
  EXPECT_EQ(blockLoadsPerLayer(3, Order::Horizontal, 1, {{}, {}, {0}}),
            (std::vector<unsigned>{3, 2, 1}));
  // Two layers, the head right after the embedding: 0 | 1 1 | 0 keep
  // block 0 on the GPU throughout (one upload), whatever the order.
  EXPECT_EQ(blockLoadsPerLayer(2, Order::Horizontal, 1, {{}, {0}}),
            (std::vector<unsigned>{1, 1}));
  EXPECT_EQ(blockLoadsPerLayer(2, Order::Snake, 4, {{}, {0}}),
            (std::vector<unsigned>{1, 1}));
  // Without tied weights it is loadsPerLayer.
  EXPECT_EQ(blockLoadsPerLayer(3, Order::Horizontal, 2, {}),
            loadsPerLayer(3, Order::Horizontal, 2));
}

TEST(BlockLoads, LoadsReadingNothingBreakNoStay) {
  // Layer 1 owns nothing and reads nothing: 0 | 1 | 0 is one stay of 0.
  EXPECT_EQ(blockLoadsPerLayer(2, Order::Horizontal, 1, {}, {true, false}),
            (std::vector<unsigned>{1, 0}));
}
} // namespace
