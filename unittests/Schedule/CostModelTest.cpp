//===- CostModelTest.cpp - the roofline model on hand-computed examples ---===//
//
// docs/cost-model.md states the rules; every expected number here is worked
// out by hand from them in the comment beside it.
//
//===----------------------------------------------------------------------===//

#include "spillway/Schedule/CostModel.h"
#include "spillway/runtime/zero_shard.h"

#include <gtest/gtest.h>

using namespace spillway::schedule;

namespace {
/// Two identical layers. Bytes are small round numbers so the expected
/// traffic can be added up by hand.
IterationSummary toy() {
  LayerCost l;
  l.paramBytes = 100;      // P
  l.masterBytes = 200;     // W
  l.optimizerBytes = 400;  // O
  l.gradBytes = 100;       // G
  l.numParams = 128; // two 64-element granules: F = 0.5 defers one
  l.activationBytes = 1000; // A, whole batch
  l.forwardFlops = 1e9;
  l.backwardFlops = 2e9;
  l.recomputeFlops = 1e9;
  IterationSummary s;
  s.layers = {l, l};
  s.layers[0].name = "l0";
  s.layers[1].name = "l1";
  s.batchSize = 8;
  return s;
}

HardwareProfile machine(double ssdGBps = 2) {
  HardwareProfile p;
  p.name = "test";
  p.gpuBf16TFlops = 1; // 1e12 FLOP/s
  p.gpuFp32TFlops = 0.5;
  p.gpuMemoryBytes = 1 << 20;
  p.hostMemoryBytes = 1 << 30;
  p.hostMemcpyGBps = 10;
  p.cpuOptimizerParamsPerSec = 1e12;
  p.h2dGBps = 10;
  p.d2hGBps = 10;
  p.bidirectionalGBps = 16;
  p.ssds = {{"/ssd", ssdGBps, ssdGBps, 1.5 * ssdGBps}};
  return p;
}

const Budgets kPlenty{1ull << 40, 1ull << 40, 1ull << 40};

/// Everything off the GPU: parameters, master and optimizer state on SSD
/// (a CPU optimizer), gradients and activations in host memory.
Placement offloaded() {
  Placement pl;
  pl[TensorClass::Params] = Tier::SSD;
  pl[TensorClass::Master] = Tier::SSD;
  pl[TensorClass::Optimizer] = Tier::SSD;
  pl[TensorClass::Gradients] = Tier::Host;
  pl[TensorClass::Activations] = Tier::Host;
  return pl;
}

CostEstimate run(Order o, unsigned m, double f, Placement pl,
                 const IterationSummary &s = toy(),
                 const HardwareProfile &hw = machine(),
                 const Budgets &b = kPlenty) {
  CostEstimate e = estimate(s, Candidate{o, m, f, pl}, b, hw);
  EXPECT_TRUE(e.valid) << e.invalidReason;
  return e;
}

void expectBytes(const CostEstimate &e, double ssdRead, double ssdWrite,
                 double h2d, double d2h) {
  EXPECT_DOUBLE_EQ(e.bytes.ssdRead, ssdRead) << e.candidate.str();
  EXPECT_DOUBLE_EQ(e.bytes.ssdWrite, ssdWrite) << e.candidate.str();
  EXPECT_DOUBLE_EQ(e.bytes.h2d, h2d) << e.candidate.str();
  EXPECT_DOUBLE_EQ(e.bytes.d2h, d2h) << e.candidate.str();
}
} // namespace

TEST(CostModel, AllResidentMovesNothing) {
  CostEstimate e = run(Order::Horizontal, 1, 0, Placement{});
  expectBytes(e, 0, 0, 0, 0);
  EXPECT_TRUE(e.optimizerOnGPU);
  EXPECT_EQ(e.bound, Bound::Compute);
  // 2 layers x (1 + 2 + 1) GFLOP at 1 TFLOP/s.
  EXPECT_DOUBLE_EQ(e.computeSec, 8e-3);
  EXPECT_DOUBLE_EQ(e.iterationSec, 8e-3);
  // P + W + O + G + A summed over layers.
  EXPECT_EQ(e.peakBytes[int(Tier::GPU)], 2 * (100 + 200 + 400 + 100 + 1000));
  EXPECT_EQ(e.peakBytes[int(Tier::Host)], 0u);
}

TEST(CostModel, ParameterLoadsPerOrder) {
  // Horizontal M=2 visits 0 1 1 0 | 0 1 1 0: runs 0,11,00,11,0.
  EXPECT_EQ(run(Order::Horizontal, 2, 0, offloaded()).paramLoads,
            (std::vector<unsigned>{3, 2}));
  // Snake visits each layer once per pass: 0 1 | 1 0.
  EXPECT_EQ(run(Order::Snake, 2, 0, offloaded()).paramLoads,
            (std::vector<unsigned>{2, 1}));
  // M = 1: the two orders are the same schedule.
  EXPECT_EQ(run(Order::Horizontal, 1, 0, offloaded()).paramLoads,
            run(Order::Snake, 1, 0, offloaded()).paramLoads);
}

TEST(CostModel, HorizontalM2Offloaded) {
  CostEstimate e = run(Order::Horizontal, 2, 0, offloaded());
  // params: 5 loads x 100            -> ssd_read 500, h2d 500
  // grads (host): 2 runs x 2 x 100   -> d2h 400
  // optimizer state on SSD           -> read 800, write 800
  // master on SSD                    -> read 400, write 400
  // the update reads the bf16 params it rewrites (a layer's frozen
  // parameters share the block) and writes them -> read 200, write 200
  // activations (host): 2 x 1000     -> d2h 2000, h2d 2000
  expectBytes(e, 500 + 800 + 400 + 200, 800 + 400 + 200, 500 + 2000,
              400 + 2000);
  EXPECT_FALSE(e.optimizerOnGPU);
  // GPU: params 2x100 + grads 2x100 + activations 2x(1000/2).
  EXPECT_EQ(e.peakBytes[int(Tier::GPU)], 200u + 200u + 1000u);
  // Host: grads 200 + activations 2000 + staging of params 2x100, master
  // 2x200, optimizer 2x400.
  EXPECT_EQ(e.peakBytes[int(Tier::Host)], 200u + 2000u + 200u + 400u + 800u);
  EXPECT_EQ(e.peakBytes[int(Tier::SSD)], 200u + 400u + 800u);
}

TEST(CostModel, SnakeM2Offloaded) {
  CostEstimate e = run(Order::Snake, 2, 0, offloaded());
  // params: 3 loads x 100 -> 300; grads accumulate on the GPU: one flush
  // per layer -> d2h 200; the rest as horizontal.
  expectBytes(e, 300 + 1400, 1200 + 200, 300 + 2000, 200 + 2000);
}

TEST(CostModel, OverlapMergesUpdateWithFirstLoad) {
  // Snake, F = 0.5: each layer's deferred half is updated on the copy its
  // first forward load brings from SSD, so the update's read of it is
  // saved (ssd_read -50 x 2); the updated half is still written back.
  expectBytes(run(Order::Snake, 2, 0.5, offloaded()), 1700 - 100, 1400,
              2300, 2200);
  // Horizontal, F = 1: both first loads merged (-200 read).
  expectBytes(run(Order::Horizontal, 2, 1, offloaded()), 1900 - 200, 1400,
              2500, 2400);
  // Parameters in host memory: nothing to save, F changes only timing.
  Placement pl = offloaded();
  pl[TensorClass::Params] = Tier::Host;
  CostEstimate f0 = run(Order::Snake, 2, 0, pl), f1 = run(Order::Snake, 2, 1, pl);
  expectBytes(f1, f0.bytes.ssdRead, f0.bytes.ssdWrite, f0.bytes.h2d,
              f0.bytes.d2h);
}

TEST(CostModel, DeferredElementsAreWholeGranules) {
  EXPECT_EQ(deferredElements(0, 1000), 0);
  EXPECT_EQ(deferredElements(0.5, 128), 64);
  EXPECT_EQ(deferredElements(0.5, 50), 0);   // 25 rounds to no granule
  EXPECT_EQ(deferredElements(0.9, 100), 64); // 90 to one
  EXPECT_EQ(deferredElements(0.7, 100), 64); // 70 to one, not past N
  EXPECT_EQ(deferredElements(0.9, 120), 120); // 108 to two = 128 >= N: all
  EXPECT_EQ(deferredElements(1, 50), 50);
  EXPECT_EQ(deferredElements(0.5, 128, 1), 64);
  EXPECT_EQ(deferredElements(0.3, 10, 1), 3);
}

TEST(CostModel, OverlapSavesTheGPUOptimizersParameterRead) {
  // No master weights (fp32 parameters are their own), a GPU optimizer,
  // parameters on SSD. Snake M=2 loads layer 0 twice and layer 1 once
  // (h2d and ssd_read 300); the update reads and writes each layer's
  // parameters (h2d/ssd_read +200, d2h/ssd_write 200). F = 1 runs all of
  // it on the first load's copy: no read (-200), the same writes.
  IterationSummary s = toy();
  for (LayerCost &l : s.layers)
    l.masterBytes = 0;
  Placement pl;
  pl[TensorClass::Params] = Tier::SSD;
  expectBytes(run(Order::Snake, 2, 0, pl, s), 500, 200, 500, 200);
  expectBytes(run(Order::Snake, 2, 1, pl, s), 300, 200, 300, 200);
  // F = 0.5: one of two granules per layer (-50 each).
  expectBytes(run(Order::Snake, 2, 0.5, pl, s), 400, 200, 400, 200);
  // Parameters in host memory: the h2d read is saved, there is no SSD.
  pl[TensorClass::Params] = Tier::Host;
  expectBytes(run(Order::Snake, 2, 1, pl, s), 0, 0, 300, 200);
}

TEST(CostModel, GradientsOnSSD) {
  Placement pl = offloaded();
  pl[TensorClass::Gradients] = Tier::SSD;
  CostEstimate h = run(Order::Horizontal, 2, 0, pl);
  // Horizontal: 2 flushes per layer (d2h 400, ssd_write 400), the
  // accumulator read back once per layer (100 x 2) and read by the
  // optimizer (200).
  expectBytes(h, 1900 + 200 + 200, 1400 + 400, 2500, 2400);
  CostEstimate s = run(Order::Snake, 2, 0, pl);
  // Snake: one flush per layer, no accumulator read, the optimizer's read.
  expectBytes(s, 1700 + 200, 1400 + 200, 2300, 2200);
}

TEST(CostModel, ATiedWeightIsChargedToEveryLoadThatReadsIt) {
  // Three layers, the last reading layer 0's parameters (a tied head):
  // horizontal M = 1 loads block 0 three times (0 | 1 | 2 + 0 | 1 | 0),
  // layer 1 twice, layer 2 once; the GPU holds the head's load: its own
  // parameters and the embedding's, double-buffered.
  IterationSummary s = toy();
  s.layers.push_back(s.layers[1]);
  s.layers[2].name = "head";
  s.layers[2].readsParamsOf = {0};
  Placement pl = offloaded();
  CostEstimate e = run(Order::Horizontal, 1, 0, pl, s);
  EXPECT_EQ(e.paramLoads, (std::vector<unsigned>{3, 2, 1}));
  CostEstimate plain = run(Order::Horizontal, 1, 0, pl, [] {
    IterationSummary t = toy();
    t.layers.push_back(t.layers[1]);
    return t;
  }());
  EXPECT_EQ(plain.paramLoads, (std::vector<unsigned>{2, 2, 1}));
  // One more load of block 0 (100 bytes over SSD and PCIe).
  EXPECT_DOUBLE_EQ(e.bytes.h2d - plain.bytes.h2d, 100);
  EXPECT_DOUBLE_EQ(e.bytes.ssdRead - plain.bytes.ssdRead, 100);
  EXPECT_EQ(e.peakBytes[int(Tier::GPU)] - plain.peakBytes[int(Tier::GPU)],
            2 * 100u);
}

TEST(CostModel, DeferredGradientSlicesCountOnTheOptimizersSide) {
  // F = 0.5 defers one of each layer's two 64-element granules: half of
  // its 100 gradient bytes wait for the next step where the optimizer runs.
  Placement cpu = offloaded();
  EXPECT_EQ(run(Order::Snake, 2, 0.5, cpu).peakBytes[int(Tier::Host)] -
                run(Order::Snake, 2, 0, cpu).peakBytes[int(Tier::Host)],
            2 * 50u);
  Placement gpuOpt; // everything resident: a GPU optimizer
  EXPECT_EQ(run(Order::Snake, 2, 0.5, gpuOpt).peakBytes[int(Tier::GPU)] -
                run(Order::Snake, 2, 0, gpuOpt).peakBytes[int(Tier::GPU)],
            2 * 50u);
}

TEST(CostModel, TwoByteBlocksDoubleTheGranule) {
  // bf16 optimizer moments (or bf16-mixed's working copies) hold 2 bytes
  // per element: 128 elements are the blocks' 256 bytes, as
  // sched-overlap-optimizer defers them. F = 0.25 of a layer's 128
  // elements is 32: one 64-element granule in fp32 (50 of its 100
  // gradient bytes pending, per layer), none of 128.
  EXPECT_EQ(deferGranule(false), 64);
  EXPECT_EQ(deferGranule(true), 128);
  Placement cpu = offloaded();
  IterationSummary fp32 = toy(), state = toy(), mixed = toy();
  state.bf16OptimizerState = true;
  mixed.bf16Storage = true;
  auto pending = [&](const IterationSummary &s) {
    return run(Order::Snake, 2, 0.25, cpu, s).peakBytes[int(Tier::Host)] -
           run(Order::Snake, 2, 0, cpu, s).peakBytes[int(Tier::Host)];
  };
  EXPECT_EQ(pending(fp32), 2 * 50u);
  EXPECT_EQ(pending(state), 0u);
  EXPECT_EQ(pending(mixed), 0u);
  // The state's bytes are the summary's (2 per moment element already):
  // read and written once where it lives.
  state.layers[0].optimizerBytes = state.layers[1].optimizerBytes = 200;
  CostEstimate e = run(Order::Snake, 2, 0, cpu, state);
  EXPECT_DOUBLE_EQ(e.optimizerStateBytes.ssdRead, 400);
  EXPECT_DOUBLE_EQ(e.optimizerStateBytes.ssdWrite, 400);
}

TEST(CostModel, SnakeReducesParameterTraffic) {
  Placement pl; // only the parameters move
  pl[TensorClass::Params] = Tier::Host;
  IterationSummary s = toy();
  s.layers.resize(6, s.layers[0]);
  s.batchSize = 0;
  for (unsigned m : {2u, 3u, 4u, 8u}) {
    CostEstimate h = run(Order::Horizontal, m, 0, pl, s);
    CostEstimate k = run(Order::Snake, m, 0, pl, s);
    EXPECT_LT(k.bytes.h2d, h.bytes.h2d) << "M=" << m;
    // 2LM - 2M + 1 loads against 2L - 1, and the GPU optimizer's read of
    // each layer's parameters, which it rewrites (6 x 100).
    EXPECT_DOUBLE_EQ(h.bytes.h2d, 100.0 * (2 * 6 * m - 2 * m + 1) + 600);
    EXPECT_DOUBLE_EQ(k.bytes.h2d, 100.0 * (2 * 6 - 1) + 600);
  }
}

TEST(CostModel, BoundMovesFromComputeToSSD) {
  // ssd bytes: read 1700, write 1400, together 3100 over the combined rate.
  Placement pl = offloaded();
  CostEstimate fast = run(Order::Snake, 2, 0, pl, toy(), machine(1000));
  EXPECT_EQ(fast.bound, Bound::Compute);
  EXPECT_DOUBLE_EQ(fast.iterationSec, fast.computeSec);
  // 3100 B at 1.5 x 1e-6 GB/s = 2.07 s, far above 8 ms of compute.
  CostEstimate slow = run(Order::Snake, 2, 0, pl, toy(), machine(1e-6));
  EXPECT_EQ(slow.bound, Bound::SSD);
  EXPECT_NEAR(slow.ssdSec, 3100 / 1.5e3, 1e-9);
  EXPECT_DOUBLE_EQ(slow.iterationSec, slow.ssdSec);
}

TEST(CostModel, SSDReadsAndWritesShareTheDevice) {
  // read 1700 B at 1 kB/s, write 1400 B at 1 kB/s, combined 1.5 kB/s: the
  // combined limit (2.07 s) binds, not the larger of the two (1.7 s).
  CostEstimate e = run(Order::Snake, 2, 0, offloaded(), toy(), machine(1e-6));
  EXPECT_NEAR(e.ssdSec, 3100 / 1.5e3, 1e-9);
  EXPECT_GT(e.ssdSec, 1700 / 1e3);
}

TEST(CostModel, ExposedOptimizerTail) {
  HardwareProfile hw = machine(1000);
  hw.cpuOptimizerParamsPerSec = 2.56e4; // 256 params: 10 ms of CPU update
  // Horizontal M=2: updates hide behind the last micro-batch's backward of
  // layer 0, (2 + 1) GFLOP / 2 = 1.5 ms; 8.5 ms stay exposed.
  CostEstimate h = run(Order::Horizontal, 2, 0, offloaded(), toy(), hw);
  EXPECT_NEAR(h.exposedOptimizerSec, 10e-3 - 1.5e-3, 1e-12);
  EXPECT_EQ(h.bound, Bound::CPUOptimizer);
  EXPECT_NEAR(h.iterationSec, 10e-3 + 8.5e-3, 1e-12);
  // Snake: behind the whole backward of layer 0 (3 ms); overlap 1 hides it
  // all behind the next forward.
  EXPECT_NEAR(run(Order::Snake, 2, 0, offloaded(), toy(), hw).exposedOptimizerSec,
              7e-3, 1e-12);
  EXPECT_EQ(run(Order::Snake, 2, 1, offloaded(), toy(), hw).exposedOptimizerSec, 0);
}

TEST(CostModel, OverBudgetSaysTheSmallestBudget) {
  Budgets tight{1000, 1ull << 30, 1ull << 30};
  CostEstimate e = run(Order::Horizontal, 2, 0, offloaded(), toy(), machine(), tight);
  EXPECT_FALSE(e.fits);
  EXPECT_EQ(e.neededBytes[int(Tier::GPU)], 1400u);
  tight.gpuBytes = 1400;
  EXPECT_TRUE(run(Order::Horizontal, 2, 0, offloaded(), toy(), machine(), tight).fits);
}

TEST(CostModel, InvalidCandidates) {
  Placement pl;
  pl[TensorClass::Master] = Tier::Host; // optimizer state stays on the GPU
  CostEstimate e = estimate(toy(), Candidate{Order::Snake, 2, 0, pl}, kPlenty,
                            machine());
  EXPECT_FALSE(e.valid);
  e = estimate(toy(), Candidate{Order::Snake, 3, 0, Placement{}}, kPlenty,
               machine());
  EXPECT_FALSE(e.valid);
  EXPECT_EQ(e.invalidReason, "3 micro-batches do not divide the batch of 8");
  HardwareProfile noSSD = machine();
  noSSD.ssds.clear();
  EXPECT_FALSE(estimate(toy(), Candidate{Order::Snake, 2, 0, offloaded()},
                        kPlenty, noSSD)
                   .valid);
}

TEST(CostModel, ChooseKeepsEverythingResidentWhenItFits) {
  Choice c = choose(toy(), SearchSpace{}, kPlenty, machine());
  ASSERT_TRUE(c.best.valid);
  EXPECT_TRUE(c.best.fits);
  expectBytes(c.best, 0, 0, 0, 0);
  ASSERT_TRUE(c.baseline);
  EXPECT_EQ(c.baseline->candidate.order, Order::Horizontal);
  EXPECT_EQ(c.baseline->candidate.microBatches, 1u);
  EXPECT_GT(c.candidatesTried, 0u);
}

TEST(CostModel, ChooseSnakeWhenMicroBatchesAreNeeded) {
  // Four layers of 1000 B parameters, each needing 4000 B of scratch for
  // the whole batch, on a 3000 B GPU: the parameters cannot all stay (4000
  // B), and with two in flight (2000 B) only M = 8 leaves room for the
  // scratch (500 B). Slow PCIe makes parameter traffic the bound: snake
  // loads 2L - 1 = 7 times, horizontal 2LM - 2M + 1 = 49.
  IterationSummary s = toy();
  s.layers.resize(4, s.layers[0]);
  for (LayerCost &l : s.layers) {
    l.paramBytes = 1000;
    l.workingBytes = 4000;
    l.activationBytes = 400;
  }
  HardwareProfile hw = machine(1000);
  hw.h2dGBps = hw.d2hGBps = hw.bidirectionalGBps = 1e-6;
  Budgets b{3000, 1ull << 30, 1ull << 30};
  Choice c = choose(s, SearchSpace{}, b, hw);
  ASSERT_TRUE(c.best.valid);
  EXPECT_TRUE(c.best.fits) << c.best.candidate.str();
  EXPECT_EQ(c.best.candidate.order, Order::Snake) << c.best.candidate.str();
  EXPECT_EQ(c.best.candidate.microBatches, 8u);
  EXPECT_NE(c.best.candidate.placement[TensorClass::Params], Tier::GPU);
  EXPECT_EQ(c.best.bound, Bound::PCIe);
  // The baseline splits the batch only as far as memory demands: M = 8 too,
  // horizontal, with 7x the parameter loads.
  ASSERT_TRUE(c.baseline);
  EXPECT_TRUE(c.baseline->fits);
  EXPECT_EQ(c.baseline->candidate.order, Order::Horizontal);
  EXPECT_EQ(c.baseline->candidate.microBatches, 8u);
  EXPECT_EQ(c.baseline->candidate.overlap, 0);
  EXPECT_GT(c.baseline->iterationSec, 3 * c.best.iterationSec);
}

TEST(CostModel, BaselineWhenNothingFits) {
  Budgets none{10, 10, 10};
  Choice c = choose(toy(), SearchSpace{}, none, machine());
  EXPECT_TRUE(c.best.valid);
  EXPECT_FALSE(c.best.fits);
  ASSERT_TRUE(c.baseline);
  EXPECT_FALSE(c.baseline->fits);
  EXPECT_EQ(c.baseline->candidate.microBatches, 1u);
  // What the error would state: the smallest GPU budget for that plan.
  EXPECT_GT(c.best.neededBytes[int(Tier::GPU)], 10u);
}

TEST(CostModel, ChooseHonoursPins) {
  SearchSpace space;
  space.pinned[int(TensorClass::Optimizer)] = Tier::SSD;
  Choice c = choose(toy(), space, kPlenty, machine());
  ASSERT_TRUE(c.best.valid);
  EXPECT_EQ(c.best.candidate.placement[TensorClass::Optimizer], Tier::SSD);
  // A CPU optimizer: the master weights leave the GPU with it.
  EXPECT_NE(c.best.candidate.placement[TensorClass::Master], Tier::GPU);
  EXPECT_EQ(c.baseline->candidate.placement[TensorClass::Optimizer], Tier::SSD);
}

TEST(CostModel, Names) {
  EXPECT_EQ(parseTier("ssd"), Tier::SSD);
  EXPECT_EQ(parseTensorClass("activations"), TensorClass::Activations);
  EXPECT_EQ(parseOrder("snake"), Order::Snake);
  EXPECT_FALSE(parseTier("disk"));
  EXPECT_STREQ(boundName(Bound::CPUOptimizer), "cpu_optimizer");
  EXPECT_EQ(Candidate{}.str(),
            "horizontal M=1 F=0 params=gpu,master=gpu,optimizer=gpu,"
            "gradients=gpu,activations=gpu");
}

TEST(CostModel, JSONCarriesTheReportKeys) {
  std::string j = estimateToJSON(run(Order::Snake, 2, 0.5, offloaded()));
  // The keys --report-json and the executable's --stats-json share.
  EXPECT_NE(j.find("\"bytes_per_iteration\":{\"d2h\":2200,\"h2d\":2300,"
                   "\"ssd_read\":1600,\"ssd_write\":1400}"),
            std::string::npos)
      << j;
  EXPECT_NE(j.find("\"peak_bytes\":{\"gpu\":1400,"), std::string::npos) << j;
  EXPECT_NE(j.find("\"order\":\"snake\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"bound\":\"compute\""), std::string::npos) << j;
}

TEST(CostModel, AnUpdateOfEveryParameterRewritesTheParamsBlockUnread) {
  // bf16-mixed with every parameter of each layer updated: the masters are
  // 4 bytes per updated element (W = 4 N), so the update rounds the whole
  // params block from them and reads none of it (sched.alloc). Horizontal
  // M=2, offloaded: HorizontalM2Offloaded's bytes less the update's read
  // of the params (200 from SSD).
  IterationSummary s = toy();
  for (LayerCost &l : s.layers)
    l.masterBytes = 4 * l.numParams;
  const double W = 2 * 4 * 128;
  CostEstimate e = run(Order::Horizontal, 2, 0, offloaded(), s);
  expectBytes(e, 500 + 800 + W, 800 + W + 200, 500 + 2000, 400 + 2000);
  // A CPU optimizer with the parameters on the GPU writes them back over
  // h2d but reads nothing over d2h.
  Placement pl = offloaded();
  pl[TensorClass::Params] = Tier::GPU;
  pl[TensorClass::Activations] = Tier::GPU;
  pl[TensorClass::Gradients] = Tier::GPU;
  CostEstimate g = run(Order::Snake, 2, 0, pl, s);
  // gradients read by the CPU optimizer (d2h 200), params written (h2d 200).
  expectBytes(g, 800 + W, 800 + W, 200, 200);
}

TEST(CostModel, DataParallelRanksSendTheRingAllReducesBytes) {
  // Resident, G = 2 x 100 gradient bytes. N = 4 ranks: each sends
  // 2 (N - 1) / N x G = 1.5 x 200 = 300 bytes per iteration; at 1e-6 GB/s
  // (1 kB/s) that is 0.3 s, on top of 8 ms of compute: the bound.
  IterationSummary s = toy();
  HardwareProfile hw = machine();
  hw.networkGBps = 1e-6;
  CostEstimate one = run(Order::Horizontal, 1, 0, Placement{}, s, hw);
  EXPECT_DOUBLE_EQ(one.bytes.network, 0);
  EXPECT_DOUBLE_EQ(one.networkSec, 0);
  EXPECT_EQ(one.bound, Bound::Compute);
  s.ranks = 4;
  CostEstimate four = run(Order::Horizontal, 1, 0, Placement{}, s, hw);
  EXPECT_DOUBLE_EQ(four.bytes.network, 300);
  EXPECT_NEAR(four.networkSec, 0.3, 1e-12);
  EXPECT_EQ(four.bound, Bound::Network);
  // The average blocks the step: it adds to the roofline's slowest.
  EXPECT_NEAR(four.iterationSec, 8e-3 + 0.3, 1e-12);
  // Every other link is one rank's, as before.
  expectBytes(four, 0, 0, 0, 0);
  // Two ranks send G itself; a fast network leaves compute the bound but
  // still adds its time.
  s.ranks = 2;
  hw.networkGBps = 1;
  CostEstimate two = run(Order::Snake, 2, 0, offloaded(), s, hw);
  EXPECT_DOUBLE_EQ(two.bytes.network, 200);
  EXPECT_EQ(two.bound, Bound::Compute);
  EXPECT_NEAR(two.iterationSec, two.computeSec + 200 / 1e9, 1e-15);
}

TEST(CostModel, JSONHasTheNetworkOnlyForRanks) {
  IterationSummary s = toy();
  HardwareProfile hw = machine();
  hw.networkGBps = 1;
  const std::string one =
      estimateToJSON(run(Order::Horizontal, 1, 0, Placement{}, s, hw));
  EXPECT_EQ(one.find("network"), std::string::npos) << one;
  s.ranks = 2;
  const std::string two =
      estimateToJSON(run(Order::Horizontal, 1, 0, Placement{}, s, hw));
  EXPECT_NE(two.find("\"network\":200"), std::string::npos) << two;
  EXPECT_STREQ(boundName(Bound::Network), "network");
}

namespace {
// A resident fp32 summary for ZeRO: two layers of AdamW parameters with
// the given moment sizes (elements), G = 4 bytes per element.
IterationSummary zeroToy(const std::vector<std::vector<uint64_t>> &moments) {
  IterationSummary s = toy();
  for (size_t i = 0; i < s.layers.size(); ++i) {
    LayerCost &l = s.layers[i];
    l.momentElements = moments[i];
    l.numParams = 0;
    for (uint64_t m : moments[i])
      l.numParams += m;
    l.paramBytes = l.gradBytes = 4 * l.numParams;
    l.masterBytes = 0;
    l.optimizerBytes = 8 * l.numParams;
  }
  return s;
}

// Two layers' blocks cut for 2 ranks with the gradients sharded too (ZeRO
// stage 2; gradientShards false: the same plan at stage 1).
IterationSummary zeroStage2Toy() {
  IterationSummary s = zeroToy({{1000, 24}, {640, 100}});
  for (LayerCost &l : s.layers) {
    l.gradElements = l.momentElements;
    l.optimizerBytes = 0;
    for (uint64_t m : l.momentElements)
      l.optimizerBytes += 8 * uint64_t(spw_zero_shard_slot(int64_t(m), 2, 64));
  }
  s.optimizerShards = 2;
  s.ranks = 2;
  s.zeroStage = 2;
  s.zeroOptimizerBytes = zeroOptimizerBytesPerRank(s);
  s.gradientShards = true;
  return s;
}

// The most any rank keeps, counted shard by shard as the runtime cuts them.
uint64_t mostKept(const IterationSummary &s) {
  uint64_t most = 0;
  for (int64_t r = 0; r < int64_t(s.ranks); ++r) {
    uint64_t kept = 0;
    for (const LayerCost &l : s.layers)
      for (uint64_t m : l.momentElements)
        kept += 8 * uint64_t(spw_zero_shard_begin(int64_t(m), r + 1, s.ranks) -
                             spw_zero_shard_begin(int64_t(m), r, s.ranks));
    most = std::max(most, kept);
  }
  return most;
}
} // namespace

TEST(CostModel, ZeroShardsTheOptimizerStatePerRank) {
  // 1000 + 24 elements and 640 + 100: with 2 ranks the 24- and 100-element
  // moments are the last rank's whole (under 64 elements per rank), the
  // others split at whole vectors (1000: 448 | 552, 640: 320 | 320).
  IterationSummary s = zeroToy({{1000, 24}, {640, 100}});
  s.ranks = 2;
  s.zeroStage = 1;
  EXPECT_EQ(zeroOptimizerBytesPerRank(s), 8u * (552 + 24 + 320 + 100));
  EXPECT_EQ(zeroOptimizerBytesPerRank(s), mostKept(s));
  for (unsigned n : {3u, 4u, 7u, 64u, 1000u}) {
    s.ranks = n;
    EXPECT_EQ(zeroOptimizerBytesPerRank(s), mostKept(s)) << n << " ranks";
  }
  // Past 2^26 ranks x moments the bound, min(m, m / N + 65) per moment:
  // 65 + 24 + 65 + 65 elements at 2^25 ranks. The last rank keeps 40 + 24
  // + 64 + 36 of them ([960, 1000), all 24, [576, 640), [64, 100)).
  s.ranks = 1u << 25;
  EXPECT_EQ(zeroOptimizerBytesPerRank(s), 8u * (65 + 24 + 65 + 65));
  // Below it the exact count, which the bound never undercuts.
  IterationSummary big = zeroToy({{uint64_t(1) << 30}, {12345}});
  big.zeroStage = 1;
  for (unsigned n : {3u, 1000u}) {
    big.ranks = n;
    const uint64_t exact = zeroOptimizerBytesPerRank(big);
    uint64_t boundAtN = 0;
    for (const LayerCost &l : big.layers)
      for (uint64_t m : l.momentElements)
        boundAtN += 8 * std::min<uint64_t>(m, m / n + 65);
    EXPECT_LE(exact, boundAtN) << n;
    EXPECT_EQ(exact, mostKept(big)) << n;
  }
  // With clipping the runtime cuts at the norm's 64 Ki-element blocks:
  // these moments are all under a block, so the last rank keeps them all;
  // one of 3 blocks over 2 ranks splits 1 | 2.
  s.ranks = 2;
  s.gradClip = true;
  EXPECT_EQ(zeroOptimizerBytesPerRank(s), 8u * (1000 + 24 + 640 + 100));
  IterationSummary clipped = zeroToy({{3 * 65536}, {10}});
  clipped.zeroStage = 1;
  clipped.ranks = 2;
  clipped.gradClip = true;
  EXPECT_EQ(zeroOptimizerBytesPerRank(clipped), 8u * (2 * 65536 + 10));
  s.gradClip = false;
  // Without ZeRO, or on one rank: the whole state.
  s.ranks = 2;
  s.zeroStage = 0;
  EXPECT_EQ(zeroOptimizerBytesPerRank(s), 8u * (1000 + 24 + 640 + 100));
  s.zeroStage = 1;
  s.ranks = 1;
  EXPECT_EQ(zeroOptimizerBytesPerRank(s), 8u * (1000 + 24 + 640 + 100));
}

TEST(CostModel, ZeroShardedOffloadBlocksMoveOneRanksState) {
  // An offload plan cut for 2 ranks (optimizerShards, as IterationSummary
  // sets it from train.optimizer_state_shards): each layer's optimizerBytes
  // is one rank's slots, 552 + 24 and 320 + 100 elements per moment.
  IterationSummary whole = zeroToy({{1000, 24}, {640, 100}});
  IterationSummary s = whole;
  s.layers[0].optimizerBytes = 8 * uint64_t(spw_zero_shard_slot(1000, 2, 64) +
                                            spw_zero_shard_slot(24, 2, 64));
  s.layers[1].optimizerBytes = 8 * uint64_t(spw_zero_shard_slot(640, 2, 64) +
                                            spw_zero_shard_slot(100, 2, 64));
  EXPECT_EQ(s.layers[0].optimizerBytes, 8u * (552 + 24));
  EXPECT_EQ(s.layers[1].optimizerBytes, 8u * (320 + 100));
  s.optimizerShards = 2;
  s.ranks = 2;
  s.zeroStage = 1;
  // The blocks are the state each rank keeps.
  s.zeroOptimizerBytes = zeroOptimizerBytesPerRank(s);
  EXPECT_EQ(s.zeroOptimizerBytes, 8u * (552 + 24 + 320 + 100));
  HardwareProfile hw = machine();
  hw.networkGBps = 1;
  whole.ranks = 2;
  Placement ssd;
  ssd[TensorClass::Optimizer] = Tier::SSD;
  ssd[TensorClass::Master] = Tier::SSD;
  CostEstimate zero =
      estimate(s, Candidate{Order::Horizontal, 1, 0, ssd}, kPlenty, hw);
  CostEstimate plain =
      estimate(whole, Candidate{Order::Horizontal, 1, 0, ssd}, kPlenty, hw);
  ASSERT_TRUE(zero.valid) << zero.invalidReason;
  EXPECT_TRUE(zero.zeroSharded);
  // The SSD reads and writes the slots once per iteration, not the whole
  // state; the CPU optimizer updates the slots' elements.
  EXPECT_DOUBLE_EQ(zero.optimizerStateBytes.ssdRead,
                   8.0 * (552 + 24 + 320 + 100));
  EXPECT_DOUBLE_EQ(plain.optimizerStateBytes.ssdRead,
                   8.0 * (1000 + 24 + 640 + 100));
  EXPECT_DOUBLE_EQ(zero.cpuOptimizerSec * hw.cpuOptimizerParamsPerSec,
                   552.0 + 24 + 320 + 100);
  // Reduce-scatter and all-gather, as for a resident plan.
  const double G = 4 * (1000 + 24 + 640 + 100);
  EXPECT_DOUBLE_EQ(zero.bytes.network, 0.5 * (G + G));
  // With the optimizer overlap the member a layer's deferral ends in
  // keeps two sub-slots (spw_zero_sharded_layout, sched-assign-buffers'
  // layout): layer 0 defers 512 of its 1024 elements, which cuts the
  // 1000-element member (shards [0, 448) | [448, 1000)) into sub-slots of
  // 448 elements (rank 0's: 1792 bytes, on the granule already) and 488
  // (rank 1's), then the 24-element member: 3840 bytes per moment where
  // F = 0 keeps 2304.
  CostEstimate overlap =
      estimate(s, Candidate{Order::Horizontal, 1, 0.5, ssd}, kPlenty, hw);
  ASSERT_TRUE(overlap.valid) << overlap.invalidReason;
  const int64_t layer0[] = {1000, 24}, layer1[] = {640, 100};
  int64_t split = 0;
  EXPECT_EQ(
      spw_zero_sharded_layout(layer0, 2, 2, 64, 512, 4, 256, nullptr, &split),
      3840);
  EXPECT_EQ(split, 1792);
  // A cut off the granule is padded: after a 24-element member (96 bytes)
  // the same sub-slots end part 0 at 1888 bytes, padded to 2048.
  const int64_t smallFirst[] = {24, 1000};
  int64_t offsets[2] = {};
  EXPECT_EQ(spw_zero_sharded_layout(smallFirst, 2, 2, 64, 24 + 512, 4, 256,
                                    offsets, &split),
            2048 + 4 * 488);
  EXPECT_EQ(split, 2048);
  EXPECT_EQ(offsets[1], 96);
  const double withOverlap =
      2.0 * double(spw_zero_sharded_layout(layer0, 2, 2, 64, 512, 4, 256,
                                           nullptr, nullptr) +
                   spw_zero_sharded_layout(layer1, 2, 2, 64,
                                           deferredElements(0.5, 740, 64), 4,
                                           256, nullptr, nullptr));
  EXPECT_DOUBLE_EQ(overlap.optimizerStateBytes.ssdRead, withOverlap);
  EXPECT_GT(withOverlap, zero.optimizerStateBytes.ssdRead);
  // bf16-mixed master weights are cut as the state (one layout of 4-byte
  // elements per layer): the SSD moves one rank's slots of them, and the
  // all-gather carries the bf16 working copies (2 bytes per element).
  IterationSummary mixed = s, mixedWhole = whole;
  for (IterationSummary *m : {&mixed, &mixedWhole}) {
    m->bf16Storage = true;
    m->layers[0].masterBytes = 4 * 1024;
    m->layers[0].masterElements = {1000, 24};
    m->layers[1].masterBytes = 4 * 740;
    m->layers[1].masterElements = {640, 100};
  }
  CostEstimate master =
      estimate(mixed, Candidate{Order::Horizontal, 1, 0, ssd}, kPlenty, hw);
  CostEstimate masterWhole = estimate(
      mixedWhole, Candidate{Order::Horizontal, 1, 0, ssd}, kPlenty, hw);
  ASSERT_TRUE(master.valid) << master.invalidReason;
  ASSERT_TRUE(masterWhole.valid) << masterWhole.invalidReason;
  EXPECT_EQ(master.masterBytes, 4u * (552 + 24 + 320 + 100));
  EXPECT_EQ(masterWhole.masterBytes, 4u * (1000 + 24 + 640 + 100));
  EXPECT_DOUBLE_EQ(
      masterWhole.bytes.ssdRead - master.bytes.ssdRead,
      (plain.optimizerStateBytes.ssdRead - zero.optimizerStateBytes.ssdRead) +
          4.0 * ((1000 + 24 + 640 + 100) - (552 + 24 + 320 + 100)));
  EXPECT_DOUBLE_EQ(master.bytes.network, 0.5 * (G + G / 2));
  CostEstimate masterOverlap =
      estimate(mixed, Candidate{Order::Horizontal, 1, 0.5, ssd}, kPlenty, hw);
  ASSERT_TRUE(masterOverlap.valid) << masterOverlap.invalidReason;
  EXPECT_EQ(double(masterOverlap.masterBytes), withOverlap / 2);
}

TEST(CostModel, ZeroStage2MovesOneRanksGradients) {
  // ZeRO stage 2 (gradientShards): the gradient blocks hold one rank's
  // slots of each gradient (one layout of 4-byte elements per layer, as
  // sched-assign-buffers cuts them), so d2h and the SSD carry the slots;
  // the network reduce-scatters the whole gradients at every flush (M per
  // iteration in horizontal order, once in snake order).
  IterationSummary s = zeroStage2Toy(), stage1 = s;
  stage1.gradientShards = false;
  EXPECT_EQ(gradBytesPerRank(stage1, stage1.layers[0]), 4u * 1024);
  EXPECT_EQ(gradBytesPerRank(s, s.layers[0]), 4u * (552 + 24));
  EXPECT_EQ(gradBytesPerRank(s, s.layers[1]), 4u * (320 + 100));
  HardwareProfile hw = machine();
  hw.networkGBps = 1;
  Placement ssd;
  ssd[TensorClass::Optimizer] = Tier::SSD;
  ssd[TensorClass::Gradients] = Tier::SSD;
  const double G = 4 * (1000 + 24 + 640 + 100);
  const double Gr = 4 * (552 + 24 + 320 + 100);
  for (Order o : {Order::Snake, Order::Horizontal}) {
    const double runs = o == Order::Horizontal ? 2 : 1;
    CostEstimate two = estimate(s, Candidate{o, 2, 0, ssd}, kPlenty, hw);
    CostEstimate one = estimate(stage1, Candidate{o, 2, 0, ssd}, kPlenty, hw);
    ASSERT_TRUE(two.valid) << two.invalidReason;
    ASSERT_TRUE(one.valid) << one.invalidReason;
    EXPECT_TRUE(two.gradientsSharded);
    EXPECT_FALSE(one.gradientsSharded);
    // Each flush moves the rank's slots off the GPU and to the SSD.
    EXPECT_DOUBLE_EQ(one.bytes.d2h - two.bytes.d2h, (G - Gr) * runs);
    EXPECT_DOUBLE_EQ(one.bytes.ssdWrite - two.bytes.ssdWrite, (G - Gr) * runs);
    EXPECT_DOUBLE_EQ(two.bytes.network, 0.5 * (G * runs + G));
    EXPECT_DOUBLE_EQ(one.bytes.network, 0.5 * (G + G));
    // The class takes one rank's bytes on the SSD (the GPU's whole sums:
    // ZeroStage2ReduceScattersDuringTheNextBackward).
    EXPECT_DOUBLE_EQ(double(one.peakBytes[int(Tier::SSD)]) -
                         double(two.peakBytes[int(Tier::SSD)]),
                     G - Gr);
  }
}

TEST(CostModel, TiesOnTimeGoToFewerSsdWritesThenFewerBytes) {
  // Two candidates that fit and take the same time (a compute-bound plan):
  // the one writing fewer SSD bytes ranks first even when it moves more
  // bytes in all; with equal writes, the one moving fewer bytes; a faster
  // one first whatever it writes.
  CostEstimate wears, spares;
  wears.fits = spares.fits = true;
  wears.iterationSec = spares.iterationSec = 2.0;
  wears.bytes.ssdWrite = 700e6;
  wears.bytes.h2d = 100e6;
  spares.bytes.ssdWrite = 100e6;
  spares.bytes.ssdRead = 900e6;
  EXPECT_TRUE(preferred(spares, wears, kPlenty));
  EXPECT_FALSE(preferred(wears, spares, kPlenty));
  CostEstimate lighter = spares;
  lighter.bytes.ssdRead = 100e6;
  EXPECT_TRUE(preferred(lighter, spares, kPlenty));
  EXPECT_FALSE(preferred(spares, lighter, kPlenty));
  EXPECT_FALSE(preferred(spares, spares, kPlenty));
  wears.iterationSec = 1.9;
  EXPECT_TRUE(preferred(wears, spares, kPlenty));
  // Fitting beats not fitting, however fast.
  spares.fits = false;
  spares.iterationSec = 0.1;
  EXPECT_TRUE(preferred(wears, spares, kPlenty));
}

TEST(CostModel, ZeroStage2ReduceScattersDuringTheNextBackward) {
  // Each flush's reduce-scatter overlaps the backward of the layers up to
  // the sweep's next flush (sched-insert-transfers sinks what reads it):
  // layer 1's behind layer 0's backward; layer 0's, the sweep's last, is
  // exposed. On the CPU backend (the exchange thread); over NCCL on a GPU
  // the exchanges share the compute stream and none hides. A layer's whole
  // sums stay in host buffers meanwhile.
  IterationSummary s = zeroStage2Toy(), stage1 = s;
  stage1.gradientShards = false;
  Placement ssd;
  ssd[TensorClass::Optimizer] = Tier::SSD;
  ssd[TensorClass::Gradients] = Tier::SSD;
  // Layer 0's backward: (2e9 + 1e9 recompute) FLOP in bf16, 1 TFLOP/s.
  ASSERT_EQ(s.compute, Precision::BF16);
  const double bwd0 = 3e9 / 1e12;
  for (Order o : {Order::Snake, Order::Horizontal}) {
    const double runs = o == Order::Horizontal ? 2 : 1;
    for (double gbps : {1.0, 1e-6}) {
      HardwareProfile hw = machine();
      hw.backend = "cpu";
      hw.networkGBps = gbps;
      CostEstimate two = estimate(s, Candidate{o, 2, 0, ssd}, kPlenty, hw);
      CostEstimate one = estimate(stage1, Candidate{o, 2, 0, ssd}, kPlenty, hw);
      ASSERT_TRUE(two.valid) << two.invalidReason;
      // Layer 1's exchange, (N - 1) / N of its whole gradient per sweep.
      const double rs1 = 0.5 * 4 * (640 + 100) / (gbps * 1e9);
      const double hidden = runs * std::min(rs1, bwd0 / runs);
      EXPECT_DOUBLE_EQ(two.hiddenNetworkSec, hidden);
      EXPECT_EQ(one.hiddenNetworkSec, 0);
      // Fast: all of it hides; slow: as much as layer 0's backward.
      EXPECT_DOUBLE_EQ(hidden, gbps == 1.0 ? runs * rs1 : bwd0);
      const double worst = std::max(
          {two.computeSec, two.pcieSec, two.ssdSec, two.cpuOptimizerSec});
      EXPECT_DOUBLE_EQ(two.iterationSec, worst + two.exposedOptimizerSec +
                                             two.networkSec - hidden);
      // The GPU: double-buffered slots of one rank's gradient (the largest
      // layer's 552 + 24 elements) and the largest member's whole sum,
      // against stage 1's double-buffered whole gradient; the host: the
      // SSD's staging of the same slots and the largest layer's sums.
      EXPECT_EQ(int64_t(two.peakBytes[int(Tier::GPU)]) -
                    int64_t(one.peakBytes[int(Tier::GPU)]),
                2 * 4 * (552 + 24) + 4 * 1000 - 2 * 4 * 1024);
      EXPECT_EQ(int64_t(two.peakBytes[int(Tier::Host)]) -
                    int64_t(one.peakBytes[int(Tier::Host)]),
                2 * 4 * (552 + 24) + 4 * 1024 - 2 * 4 * 1024);
      // On a GPU (NCCL on the compute stream): nothing hides.
      hw.backend = "cuda";
      CostEstimate gpu = estimate(s, Candidate{o, 2, 0, ssd}, kPlenty, hw);
      EXPECT_EQ(gpu.hiddenNetworkSec, 0);
      EXPECT_DOUBLE_EQ(gpu.iterationSec, two.iterationSec + hidden);
    }
  }
}

TEST(CostModel, ZeroExchangesTheGradientsAndValuesOfResidentPlans) {
  IterationSummary s = zeroToy({{1000, 24}, {640, 100}});
  const double G = 4 * (1000 + 24 + 640 + 100);
  HardwareProfile hw = machine();
  hw.networkGBps = 1;
  hw.gpuMemoryBytes = 1 << 30;
  s.ranks = 4;
  CostEstimate plain = run(Order::Horizontal, 1, 0, Placement{}, s, hw);
  s.zeroStage = 1;
  s.zeroOptimizerBytes = zeroOptimizerBytesPerRank(s);
  CostEstimate zero = run(Order::Horizontal, 1, 0, Placement{}, s, hw);
  EXPECT_TRUE(zero.valid) << zero.invalidReason;
  EXPECT_TRUE(zero.zeroSharded);
  EXPECT_FALSE(plain.zeroSharded);
  // Reduce-scatter of G and all-gather of the f32 values (G again): 3/4 of
  // each, the all-reduce's 2 x 3/4 x G.
  EXPECT_DOUBLE_EQ(zero.bytes.network, 0.75 * (G + G));
  EXPECT_DOUBLE_EQ(plain.bytes.network, 2 * 0.75 * G);
  // The GPU holds one rank's shard of the state instead of all of it.
  EXPECT_EQ(plain.peakBytes[int(Tier::GPU)] - zero.peakBytes[int(Tier::GPU)],
            8u * (1000 + 24 + 640 + 100) - s.zeroOptimizerBytes);
  // Clipping's norm comes from the shards: the same exchange.
  s.gradClip = true;
  CostEstimate clip = run(Order::Horizontal, 1, 0, Placement{}, s, hw);
  EXPECT_DOUBLE_EQ(clip.bytes.network, 0.75 * (G + G));
  // Any class off the GPU: not a way to run it (the runtime shards the
  // state it keeps resident).
  Placement host;
  host[TensorClass::Optimizer] = Tier::Host;
  host[TensorClass::Master] = Tier::Host;
  CostEstimate off =
      estimate(s, Candidate{Order::Horizontal, 1, 0, host}, kPlenty, hw);
  EXPECT_FALSE(off.valid);
  EXPECT_NE(off.invalidReason.find("resident plans only"), std::string::npos)
      << off.invalidReason;
}

namespace {
/// `pl` with class `c` split by layer as `tiers` (normalized).
Placement splitAs(Placement pl, TensorClass c, std::vector<Tier> tiers) {
  pl.layers[int(c)] = std::move(tiers);
  pl.normalize();
  return pl;
}
} // namespace

TEST(CostModel, SplitByLayerCountsEachBlockWhereItLives) {
  // docs/cost-model.md, "Placement by layer": each layer's block adds its
  // bytes to the links of its own tier. From offloaded() (params, master,
  // optimizer on SSD), moving one layer's block of a class to host takes
  // exactly that block's SSD traffic off and puts its bytes in host memory;
  // the other layer still streams through the same host staging.
  const CostEstimate whole = run(Order::Horizontal, 1, 0, offloaded());
  auto delta = [&](TensorClass c, double read, double write, double bytes) {
    const CostEstimate e =
        run(Order::Horizontal, 1, 0,
            splitAs(offloaded(), c, {Tier::Host, Tier::SSD}));
    EXPECT_DOUBLE_EQ(whole.bytes.ssdRead - e.bytes.ssdRead, read)
        << tensorClassName(c);
    EXPECT_DOUBLE_EQ(whole.bytes.ssdWrite - e.bytes.ssdWrite, write)
        << tensorClassName(c);
    EXPECT_DOUBLE_EQ(e.bytes.h2d, whole.bytes.h2d) << tensorClassName(c);
    EXPECT_DOUBLE_EQ(e.bytes.d2h, whole.bytes.d2h) << tensorClassName(c);
    EXPECT_EQ(double(e.peakBytes[int(Tier::Host)]) -
                  double(whole.peakBytes[int(Tier::Host)]),
              bytes)
        << tensorClassName(c);
    EXPECT_EQ(double(whole.peakBytes[int(Tier::SSD)]) -
                  double(e.peakBytes[int(Tier::SSD)]),
              bytes)
        << tensorClassName(c);
    return e;
  };
  // Parameters: layer 0's two loads (horizontal, M = 1: its forward and,
  // after layer 1's, its backward) and the update's read (it is not
  // rewritten: masterBytes 200 is not 4 x 128), P = 100 each; the update's
  // write, 100.
  ASSERT_EQ(whole.paramLoads[0], 2u);
  delta(TensorClass::Params, 300, 100, 100);
  // Master weights and optimizer state: read and written once, 200 and 400.
  delta(TensorClass::Master, 200, 200, 200);
  CostEstimate o = delta(TensorClass::Optimizer, 400, 400, 400);
  EXPECT_DOUBLE_EQ(o.optimizerStateBytes.ssdRead, 400);
  // Gradients on SSD (horizontal, M = 2: two flushes, the second reading
  // the first back, and the update's read) but layer 0's on host: 2 writes
  // and 2 reads of G = 100 fewer.
  Placement g = offloaded();
  g[TensorClass::Gradients] = Tier::SSD;
  const CostEstimate gw = run(Order::Horizontal, 2, 0, g);
  const CostEstimate gs =
      run(Order::Horizontal, 2, 0,
          splitAs(g, TensorClass::Gradients, {Tier::Host, Tier::SSD}));
  EXPECT_DOUBLE_EQ(gw.bytes.ssdWrite - gs.bytes.ssdWrite, 200);
  EXPECT_DOUBLE_EQ(gw.bytes.ssdRead - gs.bytes.ssdRead, 200);
  // Activations on SSD but layer 0's on host: its whole batch's A = 1000
  // leaves the SSD both ways and sits in host memory, over the same
  // staging; kept on the GPU instead, it leaves PCIe too and sits there.
  Placement a = offloaded();
  a[TensorClass::Activations] = Tier::SSD;
  const CostEstimate aw = run(Order::Snake, 2, 0, a);
  const CostEstimate ah =
      run(Order::Snake, 2, 0,
          splitAs(a, TensorClass::Activations, {Tier::Host, Tier::SSD}));
  EXPECT_DOUBLE_EQ(aw.bytes.ssdWrite - ah.bytes.ssdWrite, 1000);
  EXPECT_DOUBLE_EQ(aw.bytes.ssdRead - ah.bytes.ssdRead, 1000);
  EXPECT_DOUBLE_EQ(ah.bytes.h2d, aw.bytes.h2d);
  EXPECT_EQ(double(ah.peakBytes[int(Tier::Host)]) -
                double(aw.peakBytes[int(Tier::Host)]),
            1000);
  const CostEstimate ag =
      run(Order::Snake, 2, 0,
          splitAs(a, TensorClass::Activations, {Tier::GPU, Tier::SSD}));
  ASSERT_TRUE(ag.valid) << ag.invalidReason;
  EXPECT_DOUBLE_EQ(aw.bytes.h2d - ag.bytes.h2d, 1000);
  EXPECT_DOUBLE_EQ(aw.bytes.d2h - ag.bytes.d2h, 1000);
  EXPECT_DOUBLE_EQ(aw.bytes.ssdWrite - ag.bytes.ssdWrite, 1000);
  EXPECT_EQ(double(ag.peakBytes[int(Tier::GPU)]) -
                double(aw.peakBytes[int(Tier::GPU)]),
            1000);
  // The parameters may keep a layer on the GPU: no load brings it (its two
  // loads' 200 bytes leave h2d and the SSD), and the CPU optimizer takes
  // it down and puts it back (100 each way) instead of reading and writing
  // it on SSD.
  const CostEstimate resident =
      run(Order::Horizontal, 1, 0,
          splitAs(offloaded(), TensorClass::Params, {Tier::GPU, Tier::SSD}));
  EXPECT_EQ(resident.paramLoads[0], 0u);
  EXPECT_EQ(resident.paramLoads[1], whole.paramLoads[1]);
  EXPECT_DOUBLE_EQ(whole.bytes.h2d - resident.bytes.h2d, 200 - 100);
  EXPECT_DOUBLE_EQ(resident.bytes.d2h - whole.bytes.d2h, 100);
  EXPECT_DOUBLE_EQ(whole.bytes.ssdRead - resident.bytes.ssdRead, 300);
  EXPECT_DOUBLE_EQ(whole.bytes.ssdWrite - resident.bytes.ssdWrite, 100);
  EXPECT_EQ(double(resident.peakBytes[int(Tier::GPU)]) -
                double(whole.peakBytes[int(Tier::GPU)]),
            100);
  // All of a class's layers on one tier is that tier, whole.
  Placement same =
      splitAs(offloaded(), TensorClass::Params, {Tier::Host, Tier::Host});
  EXPECT_FALSE(same.split(TensorClass::Params));
  EXPECT_EQ(same[TensorClass::Params], Tier::Host);
  // What a split cannot be.
  Placement gpu = offloaded();
  gpu.layers[int(TensorClass::Optimizer)] = {Tier::GPU, Tier::SSD};
  gpu[TensorClass::Optimizer] = Tier::SSD;
  CostEstimate bad = estimate(toy(), Candidate{Order::Horizontal, 1, 0, gpu},
                              kPlenty, machine());
  EXPECT_FALSE(bad.valid);
  EXPECT_NE(bad.invalidReason.find("lives on host and SSD"), std::string::npos);
  Placement three = offloaded();
  three.layers[int(TensorClass::Optimizer)] = {Tier::Host, Tier::SSD,
                                               Tier::SSD};
  bad = estimate(toy(), Candidate{Order::Horizontal, 1, 0, three}, kPlenty,
                 machine());
  EXPECT_FALSE(bad.valid);
  EXPECT_NE(bad.invalidReason.find("split over 3 layers, the model has 2"),
            std::string::npos);
}

namespace {
/// toy()'s layer n times: a budget can hold some layers' blocks.
IterationSummary toyLayers(size_t n) {
  IterationSummary s = toy();
  LayerCost l = s.layers[0];
  s.layers.assign(n, l);
  for (size_t i = 0; i < n; ++i)
    s.layers[i].name = "l" + std::to_string(i);
  return s;
}

/// One order, M and F; activations on host, the rest searched.
SearchSpace oneSchedule() {
  SearchSpace space;
  space.orders = {Order::Horizontal};
  space.microBatches = {1};
  space.overlaps = {0};
  space.pinned[int(TensorClass::Activations)] = Tier::Host;
  return space;
}

double ssdBytes(const CostEstimate &e) {
  return e.bytes.ssdRead + e.bytes.ssdWrite;
}
} // namespace

TEST(CostModel, ChooseFillsTheHostBudgetBlockByBlock) {
  // Sweeping the host budget from what the smallest plan needs to what
  // everything needs: the chosen plan fits; it never ranks behind the plan
  // chosen under a smaller budget (which still fits), so its time never
  // grows and, this toy being compute-bound (every plan ties on time), its
  // SSD bytes written never grow either; and it is filled: no SSD block
  // left would fit on host (fillHost finds none). The whole-class choice
  // never ranks before it, and at some budgets it writes more.
  const IterationSummary s = toyLayers(6);
  const HardwareProfile hw = machine();
  SearchSpace space = oneSchedule();
  SearchSpace whole = space;
  whole.splitByLayer = false;
  Budgets b{1ull << 40, 0, 1ull << 40};
  // The smallest host need: everything but the activations on SSD.
  Placement all = offloaded();
  all[TensorClass::Gradients] = Tier::SSD;
  const CostEstimate least = run(Order::Horizontal, 1, 0, all, s, hw);
  const uint64_t lo = least.neededBytes[int(Tier::Host)];
  // A GPU budget holding no class: only the streamed blocks.
  b.gpuBytes = least.neededBytes[int(Tier::GPU)];
  std::optional<CostEstimate> previous;
  bool splitHelped = false;
  for (uint64_t host = lo; host <= lo + 6000; host += 50) {
    b.hostBytes = host;
    Choice c = choose(s, space, b, hw);
    ASSERT_TRUE(c.best.fits) << host;
    EXPECT_LE(c.best.neededBytes[int(Tier::Host)], host);
    if (previous) {
      EXPECT_FALSE(preferred(*previous, c.best, b))
          << "host budget " << host << ": " << c.best.candidate.str()
          << " after " << previous->candidate.str();
      EXPECT_LE(c.best.iterationSec, previous->iterationSec) << host;
      EXPECT_LE(c.best.bytes.ssdWrite, previous->bytes.ssdWrite) << host;
    }
    previous = c.best;
    if (ssdBytes(c.best) > 0)
      EXPECT_FALSE(fillHost(s, space, c.best, b, hw))
          << "host budget " << host << ": " << c.best.candidate.str();
    const CostEstimate w = choose(s, whole, b, hw).best;
    EXPECT_FALSE(preferred(w, c.best, b)) << host;
    if (c.best.bytes.ssdWrite < w.bytes.ssdWrite) {
      splitHelped = true;
      EXPECT_FALSE(c.best.splitNote.empty());
    }
  }
  EXPECT_TRUE(splitHelped);
  EXPECT_EQ(ssdBytes(*previous), 0); // the last budget holds everything
}

TEST(CostModel, FillHostMovesActivationBlocksToo) {
  // Everything on the GPU but the activations, on SSD; room on host for
  // one layer's whole-batch activations (A = 1000) more: one activation
  // block moves, the class split by layer, and its 1000 bytes leave the SSD
  // both ways.
  const IterationSummary s = toyLayers(6);
  const HardwareProfile hw = machine();
  Placement pl;
  pl[TensorClass::Activations] = Tier::SSD;
  const CostEstimate seed = run(Order::Snake, 2, 0, pl, s, hw);
  ASSERT_TRUE(seed.valid) << seed.invalidReason;
  Budgets b{1ull << 40, seed.neededBytes[int(Tier::Host)] + 1000, 1ull << 40};
  SearchSpace open = oneSchedule();
  open.pinned[int(TensorClass::Activations)] = std::nullopt;
  auto filled = fillHost(s, open, seed, b, hw);
  ASSERT_TRUE(filled);
  EXPECT_TRUE(filled->candidate.placement.split(TensorClass::Activations));
  EXPECT_EQ(filled->candidate.placement.at(TensorClass::Activations, 0),
            Tier::Host);
  EXPECT_EQ(filled->candidate.placement.at(TensorClass::Activations, 1),
            Tier::SSD);
  EXPECT_DOUBLE_EQ(seed.bytes.ssdWrite - filled->bytes.ssdWrite, 1000);
  EXPECT_DOUBLE_EQ(seed.bytes.ssdRead - filled->bytes.ssdRead, 1000);
  EXPECT_NE(filled->splitNote.find("1 of 6 SSD blocks moved to host, by SSD "
                                   "time saved per host byte (activations 1)"),
            std::string::npos)
      << filled->splitNote;
}

TEST(CostModel, FillHostTakesTheMostSsdTimePerByteFirst) {
  // From everything on SSD, a budget with room for one block more: a
  // params block (3 SSD bytes per host byte: a load, the update's read and
  // write) goes before a master block (2: read and write), even though the
  // master's saves more in all. Six layers, so no one block's move frees the
  // class's staging.
  const IterationSummary s = toyLayers(6);
  const HardwareProfile hw = machine();
  Placement all = offloaded();
  all[TensorClass::Gradients] = Tier::SSD;
  const CostEstimate seed = run(Order::Horizontal, 1, 0, all, s, hw);
  Budgets b{1ull << 40, seed.neededBytes[int(Tier::Host)] + 250, 1ull << 40};
  auto filled = fillHost(s, oneSchedule(), seed, b, hw);
  ASSERT_TRUE(filled);
  const Placement &pl = filled->candidate.placement;
  ASSERT_TRUE(pl.split(TensorClass::Params));
  EXPECT_EQ(pl.at(TensorClass::Params, 0), Tier::Host);
  EXPECT_EQ(pl.at(TensorClass::Params, 1), Tier::Host);
  EXPECT_EQ(pl.at(TensorClass::Params, 2), Tier::SSD);
  EXPECT_FALSE(pl.split(TensorClass::Master));
  EXPECT_FALSE(pl.split(TensorClass::Optimizer));
  EXPECT_NE(filled->splitNote.find("2 of 24 SSD blocks moved to host"),
            std::string::npos)
      << filled->splitNote;
  // A pinned layer stays where it is pinned.
  SearchSpace pinned = oneSchedule();
  pinned.pinnedLayers[int(TensorClass::Params)] = {Tier::SSD,    std::nullopt,
                                                   std::nullopt, std::nullopt,
                                                   std::nullopt, std::nullopt};
  filled = fillHost(s, pinned, seed, b, hw);
  ASSERT_TRUE(filled);
  EXPECT_EQ(filled->candidate.placement.at(TensorClass::Params, 0), Tier::SSD);
  EXPECT_EQ(filled->candidate.placement.at(TensorClass::Params, 1), Tier::Host);
  EXPECT_EQ(filled->candidate.placement.at(TensorClass::Params, 2), Tier::Host);
}

namespace {
/// n layers updated elementwise by AdamW, `params` f32 parameters each:
/// blocks a cut can split (P = 4 x params bytes, O = 2P, G = P).
IterationSummary adamwLayers(size_t n, uint64_t params = 1024) {
  IterationSummary s = toyLayers(n);
  for (LayerCost &l : s.layers) {
    l.numParams = params;
    l.paramBytes = 4 * params;
    l.masterBytes = 0;
    l.optimizerBytes = 8 * params;
    l.gradBytes = 4 * params;
    l.momentElements = {params};
  }
  return s;
}
} // namespace

TEST(CostModel, ACutCountsEachPartWhereItLives) {
  // docs/cost-model.md, "Blocks cut between host and SSD": a layer's block
  // cut at a share of its elements moves that share of its SSD traffic off
  // the SSD; its host part takes its bytes in host memory (a 4 KiB aligned
  // extent) while the SSD keeps the whole block's extent.
  const IterationSummary s = adamwLayers(2);
  const HardwareProfile hw = machine();
  const CostEstimate whole = run(Order::Horizontal, 1, 0, offloaded(), s, hw);
  Placement cut = offloaded();
  cut.cuts[int(TensorClass::Optimizer)][0] = 0.25; // 256 elements
  const CostEstimate o = run(Order::Horizontal, 1, 0, cut, s, hw);
  EXPECT_DOUBLE_EQ(whole.bytes.ssdRead - o.bytes.ssdRead, 2048);
  EXPECT_DOUBLE_EQ(whole.bytes.ssdWrite - o.bytes.ssdWrite, 2048);
  EXPECT_DOUBLE_EQ(o.bytes.h2d, whole.bytes.h2d);
  EXPECT_EQ(o.peakBytes[int(Tier::Host)] - whole.peakBytes[int(Tier::Host)],
            4096u);
  EXPECT_EQ(o.peakBytes[int(Tier::SSD)], whole.peakBytes[int(Tier::SSD)]);
  EXPECT_EQ(o.candidate.placement.str(),
            "params=ssd,master=ssd,optimizer=ssd,gradients=host,"
            "activations=host,optimizer[0]=host:0.25,ssd:0.75");
  // Parameters cut in half: the two loads' and the update's reads and the
  // update's write of 2048 bytes each leave the SSD.
  Placement p = offloaded();
  p.cuts[int(TensorClass::Params)][0] = 0.5;
  const CostEstimate pe = run(Order::Horizontal, 1, 0, p, s, hw);
  EXPECT_DOUBLE_EQ(whole.bytes.ssdRead - pe.bytes.ssdRead, 3 * 2048);
  EXPECT_DOUBLE_EQ(whole.bytes.ssdWrite - pe.bytes.ssdWrite, 2048);
  // The share rounds as sched-place rounds it: to 64-element granules.
  Placement r = offloaded();
  r.cuts[int(TensorClass::Optimizer)][0] = 0.3; // 307.2 -> 320 elements
  EXPECT_DOUBLE_EQ(whole.bytes.ssdRead -
                       run(Order::Horizontal, 1, 0, r, s, hw).bytes.ssdRead,
                   320 * 8);
  // A cut is of a block homed on SSD, with state not cut for the ranks.
  Placement host = offloaded();
  host[TensorClass::Optimizer] = Tier::Host;
  host.cuts[int(TensorClass::Optimizer)][0] = 0.5;
  EXPECT_FALSE(
      estimate(s, Candidate{Order::Horizontal, 1, 0, host}, kPlenty, hw).valid);
  // As sched-place rounds it: a cut of none or all of the layer, or two
  // classes of one layer cut at different elements, is not a plan.
  Placement none = offloaded();
  none.cuts[int(TensorClass::Optimizer)][0] = 0.01; // 10 elements -> 0
  EXPECT_FALSE(
      estimate(s, Candidate{Order::Horizontal, 1, 0, none}, kPlenty, hw).valid);
  Placement two = offloaded();
  two.cuts[int(TensorClass::Optimizer)][0] = 0.25;
  two.cuts[int(TensorClass::Params)][0] = 0.5;
  EXPECT_FALSE(
      estimate(s, Candidate{Order::Horizontal, 1, 0, two}, kPlenty, hw).valid);
  // An overlap deferring other elements of the layer than the cut's.
  EXPECT_FALSE(
      estimate(s, Candidate{Order::Horizontal, 1, 0.5, cut}, kPlenty, hw)
          .valid);
  IterationSummary sharded = s;
  sharded.optimizerShards = 2;
  EXPECT_FALSE(
      estimate(sharded, Candidate{Order::Horizontal, 1, 0, cut}, kPlenty, hw)
          .valid);
}

TEST(CostModel, FillHostCutsABlockForTheRest) {
  // From everything on SSD, a host budget with room for a params block
  // (32 KiB) and 20000 bytes: the params block moves whole, and the next
  // one by the same ratio is cut for what is left, in 64-element granules
  // in a 4 KiB aligned extent (16 KiB: 4096 elements), so the plan uses
  // the budget to within 4 KiB.
  const IterationSummary s = adamwLayers(6, 8192);
  const HardwareProfile hw = machine();
  Placement all = offloaded();
  all[TensorClass::Gradients] = Tier::SSD;
  const CostEstimate seed = run(Order::Horizontal, 1, 0, all, s, hw);
  const uint64_t budget = seed.neededBytes[int(Tier::Host)] + 32768 + 20000;
  Budgets b{1ull << 40, budget, 1ull << 40};
  auto filled = fillHost(s, oneSchedule(), seed, b, hw);
  ASSERT_TRUE(filled);
  EXPECT_TRUE(filled->fits);
  const Placement &pl = filled->candidate.placement;
  size_t cuts = 0;
  for (const auto &c : pl.cuts)
    cuts += c.size();
  EXPECT_EQ(cuts, 1u) << pl.str();
  EXPECT_NE(filled->splitNote.find("cut:"), std::string::npos)
      << filled->splitNote;
  EXPECT_GE(filled->neededBytes[int(Tier::Host)] + 4096, budget) << pl.str();
  EXPECT_DOUBLE_EQ(pl.cutShare(TensorClass::Params, 1), 0.5) << pl.str();
  // Filling that plan again gives the same plan: its cut is a fill's last
  // step, redone from the plan without it.
  auto again = fillHost(s, oneSchedule(), *filled, b, hw);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->candidate.str(), filled->candidate.str());
  // A pinned cut stays; the fill works around it.
  SearchSpace pinned = oneSchedule();
  pinned.pinnedCuts[int(TensorClass::Optimizer)][5] = 0.5;
  pinned.pinnedLayers[int(TensorClass::Optimizer)].assign(6, std::nullopt);
  pinned.pinnedLayers[int(TensorClass::Optimizer)][5] = Tier::SSD;
  Candidate c = seed.candidate;
  c.placement.cuts = pinned.pinnedCuts;
  const CostEstimate pinnedSeed = estimate(s, c, b, hw);
  auto around = fillHost(s, pinned, pinnedSeed, b, hw);
  ASSERT_TRUE(around);
  EXPECT_DOUBLE_EQ(
      around->candidate.placement.cutShare(TensorClass::Optimizer, 5), 0.5);
}
