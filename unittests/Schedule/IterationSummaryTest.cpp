//===- IterationSummaryTest.cpp - the cost model's input read from the IR -===//
//
// docs/cost-model.md ("The iteration summary from the IR") states the
// rules; the expected numbers are worked out by hand beside them. The steps
// go through autodiff, CSE, AdamW and train-partition-layers as spillwayc
// --report runs them.
//
//===----------------------------------------------------------------------===//

#include "spillway/Schedule/IterationSummary.h"

#include "spillway/Dialect/Train/IR/TrainDialect.h"
#include "spillway/Dialect/Train/IR/TrainOps.h"
#include "spillway/Dialect/Train/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace spillway::schedule;

namespace {
struct SummaryTest : ::testing::Test {
  MLIRContext context;
  SummaryTest() {
    context.loadDialect<spillway::train::TrainDialect, func::FuncDialect>();
  }
  OwningOpRef<ModuleOp> parse(const char *text) {
    return parseSourceString<ModuleOp>(text, &context);
  }
  /// The training step, partitioned: spillwayc's pipeline without fusion.
  OwningOpRef<ModuleOp> step(
      const char *text,
      const spillway::train::TrainAttachOptimizerPassOptions &optimizer = {}) {
    OwningOpRef<ModuleOp> m = parse(text);
    if (!m)
      return nullptr;
    PassManager pm(&context);
    pm.addPass(spillway::train::createTrainAutodiffPass());
    pm.addPass(createCSEPass());
    pm.addPass(spillway::train::createTrainAttachOptimizerPass(optimizer));
    pm.addPass(spillway::train::createTrainPartitionLayersPass());
    if (failed(pm.run(*m)))
      return nullptr;
    return m;
  }
};

// test/tools/Inputs/two-layer.mlir, also checked through spillwayc there.
const char *kTwoLayer = R"mlir(
module {
  train.param @"blocks.0.fc.weight" : tensor<8x16xf32> at 0
  train.param @"blocks.0.fc.bias" : tensor<16xf32> at 512
  train.param @"blocks.1.fc.weight" : tensor<16x4xf32> at 576
  train.param @"blocks.1.fc.bias" : tensor<4xf32> at 832
  func.func @step(%x: tensor<4x8xf32>, %labels: tensor<4xi64>) -> tensor<f32> {
    %w0 = train.param_value @"blocks.0.fc.weight" : tensor<8x16xf32>
    %b0 = train.param_value @"blocks.0.fc.bias" : tensor<16xf32>
    %w1 = train.param_value @"blocks.1.fc.weight" : tensor<16x4xf32>
    %b1 = train.param_value @"blocks.1.fc.bias" : tensor<4xf32>
    %y0 = train.linear %x, %w0, %b0 : tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32> -> tensor<4x16xf32>
    %r0 = train.relu %y0 : tensor<4x16xf32>
    %y1 = train.linear %r0, %w1, %b1 : tensor<4x16xf32>, tensor<16x4xf32>, tensor<4xf32> -> tensor<4x4xf32>
    %l = train.softmax_cross_entropy_loss %y1, %labels : tensor<4x4xf32>, tensor<4xi64>
    return %l : tensor<f32>
  }
}
)mlir";

TEST_F(SummaryTest, TwoLayersByHand) {
  auto m = step(kTwoLayer);
  ASSERT_TRUE(m);
  std::string error;
  SummaryTotals totals;
  auto s = summarizeIteration(*m, error, &totals);
  ASSERT_TRUE(s) << error;
  EXPECT_EQ(s->compute, Precision::FP32);
  EXPECT_EQ(s->batchSize, 4u);
  ASSERT_EQ(s->layers.size(), 2u);
  const LayerCost &a = s->layers[0], &b = s->layers[1];
  EXPECT_EQ(a.name, "blocks.0");
  // 8x16 + 16 = 144 f32 parameters.
  EXPECT_EQ(a.numParams, 144u);
  EXPECT_EQ(a.paramBytes, 576u);
  EXPECT_EQ(a.gradBytes, 576u);
  EXPECT_EQ(a.optimizerBytes, 1152u); // m and v
  // Per parameter, each moment's elements (ZeRO shards them one by one).
  EXPECT_EQ(a.momentElements, (std::vector<uint64_t>{128, 16}));
  EXPECT_EQ(a.masterBytes, 0u);       // f32: the parameters are the master
  // The relu's 4x16 f32 result is read by blocks.1; the linear's only by
  // the relu and relu_grad of blocks.0.
  EXPECT_EQ(a.activationBytes, 256u);
  EXPECT_EQ(a.workingBytes, 512u);
  // linear 2*4*16*8 + 4*16, relu 64.
  EXPECT_EQ(a.forwardFlops, 1152);
  // relu_grad 64, dW = x^T dy 2*8*16*4, db 64 (no dx: x is an input).
  EXPECT_EQ(a.backwardFlops, 1152);
  EXPECT_EQ(a.recomputeFlops, a.forwardFlops);
  EXPECT_EQ(b.name, "blocks.1");
  EXPECT_EQ(b.paramBytes, 272u);
  EXPECT_EQ(b.optimizerBytes, 544u);
  EXPECT_EQ(b.activationBytes, 0u);
  EXPECT_EQ(b.workingBytes, 64u + 4u); // logits and the loss
  // linear 2*4*4*16 + 16, loss 5*16.
  EXPECT_EQ(b.forwardFlops, 608);
  // loss grad 3*16, dx 2*4*16*4, dW 2*16*4*4, db 16.
  EXPECT_EQ(b.backwardFlops, 1088);
  EXPECT_EQ(totals.paramBytes, 848u);
  EXPECT_EQ(totals.unreadParamBytes, 0u);
  EXPECT_EQ(totals.numParams, 212u);
}

// A weight tied to the head: owned by the embedding's layer and counted
// once; the transpose the head reads is parameter-only, not an activation.
TEST_F(SummaryTest, TiedWeightCountedOnce) {
  auto m = step(R"mlir(
module {
  train.param @wte : tensor<10x4xf32> at 0
  train.param @"ln.scale" : tensor<4xf32> at 160
  train.param @"ln.bias" : tensor<4xf32> at 176
  train.param @unused : tensor<3xf32> at 192
  func.func @tied(%ids: tensor<6xi64>, %labels: tensor<6xi64>) -> tensor<f32> {
    %e = train.param_value @wte : tensor<10x4xf32>
    %s = train.param_value @"ln.scale" : tensor<4xf32>
    %b = train.param_value @"ln.bias" : tensor<4xf32>
    %x = train.gather %e, %ids : tensor<10x4xf32>, tensor<6xi64> -> tensor<6x4xf32>
    %t = train.tanh %x : tensor<6x4xf32>
    %n = train.layer_norm %t, %s, %b : tensor<6x4xf32>, tensor<4xf32>, tensor<4xf32>
    %et = train.transpose %e, [1, 0] : tensor<10x4xf32> -> tensor<4x10xf32>
    %logits = train.matmul %n, %et : tensor<6x4xf32>, tensor<4x10xf32> -> tensor<6x10xf32>
    %l = train.softmax_cross_entropy_loss %logits, %labels : tensor<6x10xf32>, tensor<6xi64>
    return %l : tensor<f32>
  }
}
)mlir");
  ASSERT_TRUE(m);
  std::string error;
  SummaryTotals totals;
  auto s = summarizeIteration(*m, error, &totals);
  ASSERT_TRUE(s) << error;
  ASSERT_EQ(s->layers.size(), 2u);
  EXPECT_EQ(s->batchSize, 6u);
  EXPECT_EQ(s->layers[0].paramBytes, 160u); // wte, once
  EXPECT_EQ(s->layers[1].paramBytes, 32u);  // ln only; it uses wte
  // ... so its loads bring wte's block too.
  EXPECT_EQ(s->layers[1].readsParamsOf, (std::vector<size_t>{0}));
  EXPECT_TRUE(s->layers[0].readsParamsOf.empty());
  EXPECT_EQ(totals.paramBytes, 204u);
  EXPECT_EQ(totals.unreadParamBytes, 12u);
  // The tanh's 6x4 result crosses to the norm; the transpose of wte does not
  // count (parameter-only).
  EXPECT_EQ(s->layers[0].activationBytes, 96u);
  EXPECT_EQ(s->layers[1].activationBytes, 0u);
  // gather 0, tanh 4*24.
  EXPECT_EQ(s->layers[0].forwardFlops, 96);
  // layer_norm 8*24, matmul 2*60*4, loss 5*60.
  EXPECT_EQ(s->layers[1].forwardFlops, 192 + 480 + 300);
}

// Activations are what a backward reads across the fwd/bwd gap once
// sched-recompute has run (what an offload plan moves): a value the next
// layer's forward reads but no backward needs is not one; a value a layer's
// backward reads only through its recomputed forward is.
TEST_F(SummaryTest, ActivationsAreWhatTheBackwardReads) {
  auto m = step(R"mlir(
module {
  train.param @pa : tensor<4x8xf32> at 0
  train.param @pb : tensor<4x8xf32> at 128
  train.param @pc : tensor<4x8xf32> at 256
  train.param @w : tensor<8x3xf32> at 384
  func.func @step(%x: tensor<4x8xf32>, %labels: tensor<4xi64>) -> tensor<f32> {
    %a = train.param_value @pa : tensor<4x8xf32>
    %b = train.param_value @pb : tensor<4x8xf32>
    %c = train.param_value @pc : tensor<4x8xf32>
    %w = train.param_value @w : tensor<8x3xf32>
    %x0 = train.add %x, %a : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
    %x1 = train.add %x0, %b : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
    %t = train.tanh %x1 : tensor<4x8xf32>
    %x2 = train.mul %t, %c : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
    %y = train.matmul %x2, %w : tensor<4x8xf32>, tensor<8x3xf32> -> tensor<4x3xf32>
    %l = train.softmax_cross_entropy_loss %y, %labels : tensor<4x3xf32>, tensor<4xi64>
    return %l : tensor<f32>
  }
}
)mlir");
  ASSERT_TRUE(m);
  std::string error;
  auto s = summarizeIteration(*m, error);
  ASSERT_TRUE(s) << error;
  ASSERT_EQ(s->layers.size(), 4u);
  // %x0 feeds the next add, whose gradient does not read it.
  EXPECT_EQ(s->layers[0].activationBytes, 0u);
  // The mul's gradient for @pc reads tanh(%x1): read directly, or
  // recomputed from %x1 (wherever the tanh lands), 4x8 f32 either way.
  EXPECT_EQ(s->layers[1].activationBytes, 128u);
  // The matmul's gradient for @w reads %x2.
  EXPECT_EQ(s->layers[2].activationBytes, 128u);
  EXPECT_EQ(s->layers[3].activationBytes, 0u);
}

TEST_F(SummaryTest, AttentionFlops) {
  auto m = parse(R"mlir(
module {
  func.func @f(%q: tensor<2x4x8x16xf32>, %k: tensor<2x2x8x16xf32>, %v: tensor<2x2x8x16xf32>, %dy: tensor<2x4x8x16xf32>) {
    %a = train.attention %q, %k, %v {scale = 0.25 : f64} : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>
    %b = train.attention %q, %k, %v {scale = 0.25 : f64, causal = false} : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>
    %dq, %dk, %dv = train.attention_grad %q, %k, %v, %dy {scale = 0.25 : f64} : tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>
    return
  }
}
)mlir");
  ASSERT_TRUE(m);
  std::vector<double> flops;
  m->walk([&](Operation *op) {
    if (op->getDialect() &&
        op->getDialect()->getNamespace() == "train")
      flops.push_back(opFlops(op));
  });
  ASSERT_EQ(flops.size(), 3u);
  // 4 * B 2 * H 4 * S 8 * S 8 * D 16 = 32768; causal half.
  EXPECT_EQ(flops[0], 16384);
  EXPECT_EQ(flops[1], 32768);
  EXPECT_EQ(flops[2], 2.5 * 16384);
}

// A parameter nothing differentiable reads (a threshold behind a compare)
// gets no AdamW update: it has no gradient or optimizer state to plan, only
// its own bytes.
// bf16-mixed (train-mixed-precision first): the relu's result crosses to
// blocks.1 as bf16, half of fp32's 256 activation bytes; a rounding's f32
// copy takes the place of the value it rounds, so working bytes add only the
// bf16 values: blocks.0 the relu's 128 (the linear's result, which only the
// relu reads, is not rounded) and the input's 64 (the linear reads x
// rounded), blocks.1 the logits' 32. The parameters: bf16 working copies,
// and f32 masters as a class of their own.
TEST_F(SummaryTest, Bf16MixedCountsBf16Activations) {
  OwningOpRef<ModuleOp> m = parse(kTwoLayer);
  ASSERT_TRUE(m);
  PassManager pm(&context);
  pm.addPass(spillway::train::createTrainMixedPrecisionPass());
  ASSERT_TRUE(succeeded(pm.run(*m)));
  std::string text;
  llvm::raw_string_ostream os(text);
  m->print(os);
  auto s32 = step(kTwoLayer), s16 = step(text.c_str());
  ASSERT_TRUE(s32 && s16);
  std::string error;
  auto a = summarizeIteration(*s32, error), b = summarizeIteration(*s16, error);
  ASSERT_TRUE(a && b) << error;
  EXPECT_FALSE(a->bf16Storage);
  EXPECT_TRUE(b->bf16Storage);
  EXPECT_EQ(a->layers[0].activationBytes, 256u);
  EXPECT_EQ(b->layers[0].activationBytes, 128u);
  EXPECT_EQ(a->layers[0].workingBytes, 512u);
  EXPECT_EQ(b->layers[0].workingBytes, 512u + 128u + 64u);
  EXPECT_EQ(a->layers[1].workingBytes, 64u + 4u);
  EXPECT_EQ(b->layers[1].workingBytes, 64u + 32u + 4u);
  // The layers read bf16 working copies (half of fp32's parameter bytes)
  // and the f32 masters are their own class; gradients and state stay f32.
  for (size_t l = 0; l < 2; ++l) {
    EXPECT_EQ(2 * b->layers[l].paramBytes, a->layers[l].paramBytes);
    EXPECT_EQ(b->layers[l].masterBytes, a->layers[l].paramBytes);
    EXPECT_EQ(a->layers[l].masterBytes, 0u);
    EXPECT_EQ(a->layers[l].gradBytes, b->layers[l].gradBytes);
    EXPECT_EQ(a->layers[l].optimizerBytes, b->layers[l].optimizerBytes);
  }
  EXPECT_EQ(a->layers[0].paramBytes, 576u);
}

TEST_F(SummaryTest, FrozenParameterHasNoGradientOrState) {
  auto m = step(R"mlir(
module {
  train.param @w : tensor<4x4xf32> at 0
  train.param @thr : tensor<4xf32> at 64
  func.func @step(%x: tensor<2x4xf32>, %labels: tensor<2xi64>) -> tensor<f32> {
    %w = train.param_value @w : tensor<4x4xf32>
    %t = train.param_value @thr : tensor<4xf32>
    %y = train.matmul %x, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
    %c = train.greater %y, %t : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xi1>
    %r = train.relu %y : tensor<2x4xf32>
    %z = train.where %c, %r, %y : tensor<2x4xi1>, tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
    %l = train.softmax_cross_entropy_loss %z, %labels : tensor<2x4xf32>, tensor<2xi64>
    return %l : tensor<f32>
  }
}
)mlir");
  ASSERT_TRUE(m);
  std::string error;
  auto s = summarizeIteration(*m, error);
  ASSERT_TRUE(s) << error;
  uint64_t param = 0, grad = 0, opt = 0, n = 0;
  for (const LayerCost &l : s->layers) {
    param += l.paramBytes;
    grad += l.gradBytes;
    opt += l.optimizerBytes;
    n += l.numParams;
  }
  EXPECT_EQ(param, 64u + 16u);
  EXPECT_EQ(grad, 64u);      // @w only
  EXPECT_EQ(opt, 2 * 64u);   // m and v of @w
  EXPECT_EQ(n, 16u);
}

// FOAM: the folded matrix keeps rows x ceil(cols / 2^level) per moment;
// the LM head (its product is the logits) and the biases keep AdamW's.
TEST_F(SummaryTest, FoamFoldsTheWeightMatricesState) {
  for (int64_t level : {2, 3}) {
    spillway::train::TrainAttachOptimizerPassOptions o;
    o.optimizer = "foam";
    o.foamLevel = level;
    OwningOpRef<ModuleOp> m = step(kTwoLayer, o);
    ASSERT_TRUE(m);
    std::string error;
    auto s = summarizeIteration(*m, error);
    ASSERT_TRUE(s) << error;
    ASSERT_EQ(s->layers.size(), 2u);
    // blocks.0.fc.weight [8,16]: 8 x 16/2^level per moment, folded; its
    // bias [16] AdamW.
    const uint64_t folded = 8 * (16 >> level);
    EXPECT_EQ(s->layers[0].foldedParams, 128u);
    EXPECT_EQ(s->layers[0].foldedOptimizerBytes, 2 * 4 * folded);
    EXPECT_EQ(s->layers[0].optimizerBytes, 2 * 4 * (folded + 16));
    EXPECT_EQ(s->layers[0].momentElements, (std::vector<uint64_t>{folded, 16}));
    EXPECT_EQ(s->layers[0].numParams, 128u + 16u);
    EXPECT_EQ(s->layers[0].gradBytes, 4 * (128u + 16u));
    // The head [16,4] and its bias: AdamW, nothing folded.
    EXPECT_EQ(s->layers[1].foldedParams, 0u);
    EXPECT_EQ(s->layers[1].optimizerBytes, 2 * 4 * (64u + 4u));
  }
}

// bf16 optimizer state (train-attach-optimizer's state-dtype=bf16): m and v
// take 2 bytes per element, AdamW's and FOAM's folded alike, with or
// without bf16-mixed; nothing else changes.
TEST_F(SummaryTest, Bf16OptimizerStateHalvesTheStateBytes) {
  for (const char *opt : {"adamw", "foam"}) {
    spillway::train::TrainAttachOptimizerPassOptions o32, o16;
    o32.optimizer = o16.optimizer = opt;
    o16.stateDtype = "bf16";
    auto m32 = step(kTwoLayer, o32), m16 = step(kTwoLayer, o16);
    ASSERT_TRUE(m32 && m16);
    std::string error;
    auto a = summarizeIteration(*m32, error);
    auto b = summarizeIteration(*m16, error);
    ASSERT_TRUE(a && b) << error;
    EXPECT_FALSE(a->bf16OptimizerState);
    EXPECT_TRUE(b->bf16OptimizerState);
    EXPECT_FALSE(b->bf16Storage);
    for (size_t l = 0; l < 2; ++l) {
      SCOPED_TRACE(std::string(opt) + " layer " + std::to_string(l));
      EXPECT_EQ(2 * b->layers[l].optimizerBytes, a->layers[l].optimizerBytes);
      EXPECT_EQ(2 * b->layers[l].foldedOptimizerBytes,
                a->layers[l].foldedOptimizerBytes);
      EXPECT_EQ(b->layers[l].paramBytes, a->layers[l].paramBytes);
      EXPECT_EQ(b->layers[l].gradBytes, a->layers[l].gradBytes);
      EXPECT_EQ(b->layers[l].numParams, a->layers[l].numParams);
      EXPECT_EQ(b->layers[l].foldedParams, a->layers[l].foldedParams);
    }
  }
  // By hand: blocks.0 keeps 144 AdamW elements per moment, 2 x 2 x 144.
  spillway::train::TrainAttachOptimizerPassOptions o;
  o.stateDtype = "bf16";
  auto m = step(kTwoLayer, o);
  ASSERT_TRUE(m);
  std::string error;
  auto s = summarizeIteration(*m, error);
  ASSERT_TRUE(s) << error;
  EXPECT_EQ(s->layers[0].optimizerBytes, 2 * 2 * 144u);
  EXPECT_EQ(s->layers[1].optimizerBytes, 2 * 2 * 68u);
  // With bf16-mixed: bf16 working copies, f32 masters, bf16 state.
  OwningOpRef<ModuleOp> mixed = parse(kTwoLayer);
  ASSERT_TRUE(mixed);
  PassManager pm(&context);
  pm.addPass(spillway::train::createTrainMixedPrecisionPass());
  ASSERT_TRUE(succeeded(pm.run(*mixed)));
  std::string text;
  llvm::raw_string_ostream os(text);
  mixed->print(os);
  auto both = step(text.c_str(), o);
  ASSERT_TRUE(both);
  auto t = summarizeIteration(*both, error);
  ASSERT_TRUE(t) << error;
  EXPECT_TRUE(t->bf16Storage);
  EXPECT_TRUE(t->bf16OptimizerState);
  EXPECT_EQ(t->layers[0].paramBytes, 288u);
  EXPECT_EQ(t->layers[0].masterBytes, 576u);
  EXPECT_EQ(t->layers[0].optimizerBytes, 2 * 2 * 144u);
  EXPECT_EQ(t->layers[0].gradBytes, 576u);
}

// The tokens of an iteration: the elements of the one integer [B, S]
// argument not named as labels (the executable's rule, token_inputs.h);
// none when two such arguments leave it ambiguous.
const char *kTokens = R"mlir(
module {
  train.param @wte : tensor<10x4xf32> at 0
  func.func @lm(%ids: tensor<2x3xi64> {train.name = "input_ids"},
                %labels: tensor<2x3xi64> {train.name = "Labels"}) -> tensor<f32> {
    %e = train.param_value @wte : tensor<10x4xf32>
    %x = train.gather %e, %ids : tensor<10x4xf32>, tensor<2x3xi64> -> tensor<2x3x4xf32>
    %t = train.tanh %x : tensor<2x3x4xf32>
    %r = train.reshape %t : tensor<2x3x4xf32> -> tensor<6x4xf32>
    %et = train.transpose %e, [1, 0] : tensor<10x4xf32> -> tensor<4x10xf32>
    %logits = train.matmul %r, %et : tensor<6x4xf32>, tensor<4x10xf32> -> tensor<6x10xf32>
    %y = train.reshape %labels : tensor<2x3xi64> -> tensor<6xi64>
    %l = train.softmax_cross_entropy_loss %logits, %y : tensor<6x10xf32>, tensor<6xi64>
    return %l : tensor<f32>
  }
}
)mlir";

TEST_F(SummaryTest, TokensAreTheTokenInputsElements) {
  auto m = step(kTokens);
  ASSERT_TRUE(m);
  std::string error;
  SummaryTotals totals;
  ASSERT_TRUE(summarizeIteration(*m, error, &totals)) << error;
  EXPECT_EQ(totals.tokensPerIteration, 6u);
  EXPECT_EQ(totals.tokenInput, "input_ids");

  // Renamed, the labels are a second token input: no telling which.
  std::string text = kTokens;
  text.replace(text.find("\"Labels\""), 8, "\"ids2\"");
  auto two = step(text.c_str());
  ASSERT_TRUE(two);
  ASSERT_TRUE(summarizeIteration(*two, error, &totals)) << error;
  EXPECT_EQ(totals.tokensPerIteration, 0u);
  EXPECT_EQ(totals.tokenInput, "");

  // A float-input model has no tokens.
  auto mlp = step(kTwoLayer);
  ASSERT_TRUE(mlp);
  ASSERT_TRUE(summarizeIteration(*mlp, error, &totals)) << error;
  EXPECT_EQ(totals.tokensPerIteration, 0u);
}

TEST_F(SummaryTest, UnpartitionedIsAnError) {
  auto m = parse(kTwoLayer);
  ASSERT_TRUE(m);
  std::string error;
  EXPECT_FALSE(summarizeIteration(*m, error));
  EXPECT_NE(error.find("run train-partition-layers first"), std::string::npos)
      << error;
}

// A table the dialect verifier would reject (set here without verifying) is
// refused with the verifier's one error, not read.
TEST_F(SummaryTest, MalformedTableIsTheVerifiersError) {
  auto m = step(kTwoLayer);
  ASSERT_TRUE(m);
  Builder b(&context);
  auto layers = cast<ArrayAttr>((*m)->getAttr("train.layers"));
  (*m)->setAttr("train.layers",
                b.getArrayAttr({layers[0], layers[1], layers[0]}));
  std::string error;
  EXPECT_FALSE(summarizeIteration(*m, error));
  EXPECT_EQ(error, "train.layers: parameter @blocks.0.fc.weight is owned by "
                   "two layers (0 and 2)");
  (*m)->setAttr("train.layers",
                b.getArrayAttr({b.getDictionaryAttr({b.getNamedAttr(
                    "name", b.getStringAttr("blocks.0"))})}));
  EXPECT_FALSE(summarizeIteration(*m, error));
  EXPECT_EQ(error, "train.layers[0] is not a #train.layer: {name = "
                   "\"blocks.0\"}");
}
} // namespace
