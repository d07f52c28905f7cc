//===- IterationSummary.cpp - the cost model's input, read from the IR ---===//
//
// docs/cost-model.md ("The iteration summary from the IR") is the
// specification: per layer of train-partition-layers, the parameter,
// gradient and optimizer bytes of the parameters it owns, the batch-derived
// values its forward hands to later layers, and the FLOPs of its forward and
// backward ops counted op by op.
//
//===----------------------------------------------------------------------===//

#include "spillway/Schedule/IterationSummary.h"

#include "spillway/Dialect/Train/IR/LayerTable.h"
#include "spillway/Dialect/Train/IR/TrainOps.h"
#include "spillway/runtime/token_inputs.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace spillway::train;
using namespace spillway::schedule;

namespace {
double numel(Type t) {
  auto rt = dyn_cast<RankedTensorType>(t);
  return rt && rt.hasStaticShape() ? double(rt.getNumElements()) : 0;
}
double numel(Value v) { return numel(v.getType()); }

/// Bytes of a static tensor (i1 as one byte).
uint64_t bytesOf(Type t) {
  auto rt = dyn_cast<RankedTensorType>(t);
  if (!rt || !rt.hasStaticShape())
    return 0;
  unsigned bits = rt.getElementTypeBitWidth();
  return uint64_t(rt.getNumElements()) * ((bits + 7) / 8);
}

/// 4·B·H·S·Skv·D for Q [B, H, S, D], K [B, Hkv, Skv, D]; causal halves it.
double attentionFlops(Value q, Value k, bool causal) {
  auto qt = cast<RankedTensorType>(q.getType());
  auto kt = cast<RankedTensorType>(k.getType());
  double f = 4 * numel(qt) * double(kt.getDimSize(kt.getRank() - 2));
  return causal ? f / 2 : f;
}
} // namespace

double spillway::schedule::opFlops(Operation *op) {
  auto perElement = [&](double n) {
    return op->getNumResults() ? n * numel(op->getResult(0)) : 0.0;
  };
  return llvm::TypeSwitch<Operation *, double>(op)
      // Matrix products: 2 FLOPs per multiply-add, K the contracted size.
      .Case([&](MatMulOp m) {
        auto lhs = cast<RankedTensorType>(m.getLhs().getType());
        return 2 * numel(m.getResult()) * double(lhs.getDimSize(lhs.getRank() - 1));
      })
      .Case([&](GemmOp g) {
        auto a = cast<RankedTensorType>(g.getA().getType());
        double k = double(a.getDimSize(g.getTransA() ? 0 : 1));
        return 2 * numel(g.getResult()) * k +
               (g.getC() ? numel(g.getResult()) : 0);
      })
      .Case([&](LinearOp l) {
        auto in = cast<RankedTensorType>(l.getInput().getType());
        return 2 * numel(l.getResult()) * double(in.getDimSize(in.getRank() - 1)) +
               (l.getBias() ? numel(l.getResult()) : 0);
      })
      .Case([&](AttentionOp a) {
        return attentionFlops(a.getQuery(), a.getKey(), a.getCausal());
      })
      // Recomputes Q K^T, then dV, dP, dQ, dK: five products to forward's two.
      .Case([&](AttentionGradOp a) {
        return 2.5 * attentionFlops(a.getQuery(), a.getKey(), a.getCausal());
      })
      // Elementwise arithmetic and comparisons: one per result element.
      .Case<AddOp, SubOp, MulOp, DivOp, PowOp, EqualOp, LessOp, LessOrEqualOp,
            GreaterOp, WhereOp, NegOp, ReluOp, ReluGradOp>(
          [&](Operation *) { return perElement(1); })
      // Transcendental activations and their gradients.
      .Case<TanhOp, ExpOp, LogOp, SqrtOp, ReciprocalOp, ErfOp, SigmoidOp, CosOp,
            SinOp, SiluOp, GeluOp, TanhGradOp, GeluGradOp, SiluGradOp>(
          [&](Operation *) { return perElement(4); })
      .Case<SoftmaxOp>([&](Operation *) { return perElement(5); })
      .Case<SoftmaxGradOp>([&](Operation *) { return perElement(3); })
      .Case<LayerNormOp>([&](Operation *) { return perElement(8); })
      .Case([&](LayerNormGradOp g) { return 12 * numel(g->getResult(0)); })
      .Case<RmsNormOp>([&](Operation *) { return perElement(5); })
      .Case([&](RmsNormGradOp g) { return 8 * numel(g->getResult(0)); })
      .Case<RopeOp, RopeGradOp>([&](Operation *) { return perElement(3); })
      // Reductions: one per input element.
      .Case<ReduceSumOp, ReduceMeanOp, ReduceMaxOp, SumToShapeOp>(
          [&](Operation *o) { return numel(o->getOperand(0)); })
      .Case([&](SoftmaxCrossEntropyLossOp l) { return 5 * numel(l->getOperand(0)); })
      .Case([&](SoftmaxCrossEntropyLossGradOp g) {
        return 3 * numel(g->getResult(0));
      })
      // Scatter-add: one per element of dy (its last operand).
      .Case([&](GatherGradOp g) {
        return numel(g->getOperand(g->getNumOperands() - 1));
      })
      // Shape ops, constants, casts, parameter reads, the optimizer: 0.
      .Default([](Operation *) { return 0.0; });
}

std::optional<IterationSummary>
spillway::schedule::summarizeIteration(ModuleOp module, std::string &error,
                                       SummaryTotals *totals) {
  // A malformed table's error is the verifier's, taken as this one's text.
  FailureOr<std::optional<LayerTable>> table;
  {
    ScopedDiagnosticHandler capture(module.getContext(), [&](Diagnostic &d) {
      error = d.str();
      return success();
    });
    table = LayerTable::read(module);
  }
  if (failed(table))
    return std::nullopt;
  if (!*table && module.getOps<ParamOp>().empty()) {
    error = "the model has no parameters: there is nothing to plan";
    return std::nullopt;
  }
  if (!*table) {
    error = "the module has no train.layers: run train-partition-layers first";
    return std::nullopt;
  }
  IterationSummary s;
  // The train dialect computes in f32 and keeps f32 parameters: they are
  // their own master weights.
  s.compute = Precision::FP32;
  if (auto p = module->getAttrOfType<StringAttr>(
          spillway::train::kPrecisionAttrName))
    s.bf16Storage = p.getValue() == "bf16-mixed";
  const uint64_t stateBytes = uint64_t(optimizerStateElementBytes(module));
  s.bf16OptimizerState = stateBytes == 2;
  module.walk([&](ClipGradNormOp) { s.gradClip = true; });
  s.optimizerShards = unsigned(optimizerStateShards(module));
  s.gradientShards = gradientsSharded(module);
  const LayerTable &layers = **table;
  const size_t L = layers.size();
  s.layers.resize(L);

  SummaryTotals t;
  t.numLayers = L;
  llvm::StringMap<ParamOp> params;
  llvm::DenseSet<StringRef> owned;
  for (ParamOp p : module.getOps<ParamOp>()) {
    params[p.getSymName()] = p;
    t.paramBytes += uint64_t(p.getNumBytes());
    t.numParams += uint64_t(p.getTensorType().getNumElements());
  }

  // The parameters the optimizer updates: only they have a gradient block
  // and AdamW state (a frozen parameter has neither). A module without any
  // update yet (no optimizer attached) counts every parameter.
  // Each keeps two moments of stateElementsPerMoment elements (FOAM's
  // folded, AdamW's one per parameter element), f32 or, under
  // train.optimizer_state_dtype = "bf16", bf16 (stateBytes each).
  struct State {
    int64_t moment;
    bool foam;
  };
  llvm::DenseMap<StringRef, State> updated;
  module.walk([&](Operation *u) {
    if (isOptimizerUpdate(u))
      updated.try_emplace(getUpdatedParam(u),
                          State{stateElementsPerMoment(u), isa<FoamOp>(u)});
  });
  const bool anyUpdate = !updated.empty();

  for (auto [i, layer] : llvm::enumerate(layers)) {
    LayerCost &l = s.layers[i];
    l.name = layer.getName().str();
    for (FlatSymbolRefAttr ref : layer.getParams()) {
      auto it = params.find(ref.getValue());
      if (it == params.end()) {
        error = "train.layers[" + std::to_string(i) +
                "] names a parameter the module does not declare";
        return std::nullopt;
      }
      // Owned once (the verifier checked): a tied weight is listed by its
      // owner only.
      owned.insert(it->first());
      ParamOp p = it->second;
      uint64_t bytes = uint64_t(p.getNumBytes());
      uint64_t n = uint64_t(p.getTensorType().getNumElements());
      // bf16-mixed: the layers read bf16 working copies; the f32 masters
      // are a class of their own (sched-assign-buffers' master blocks).
      if (s.bf16Storage) {
        l.paramBytes += bytes / 2;
        l.masterBytes += bytes;
        l.masterElements.push_back(n);
      } else {
        l.paramBytes += bytes;
      }
      if (anyUpdate && !updated.contains(it->first()))
        continue;
      l.gradBytes += bytes; // the f32 gradient accumulator
      l.gradElements.push_back(n);
      auto state = updated.find(it->first());
      uint64_t moment =
          state != updated.end() ? uint64_t(state->second.moment) : n;
      // m and v; an offload plan sharded over ranks keeps one rank's
      // (train.optimizer_state_shards: its blocks' per-rank slots).
      l.optimizerBytes +=
          2 * stateBytes *
          uint64_t(optimizerStateSlotElements(module, int64_t(moment)));
      l.momentElements.push_back(moment);
      l.numParams += n;
      if (state != updated.end() && state->second.foam) {
        l.foldedParams += n;
        l.foldedOptimizerBytes += 2 * stateBytes * moment;
      }
    }
  }
  // The owners of the tied weights each layer reads: its loads bring them.
  llvm::StringMap<size_t> ownerOf;
  for (auto [i, layer] : llvm::enumerate(layers))
    for (FlatSymbolRefAttr ref : layer.getParams())
      ownerOf[ref.getValue()] = i;
  for (auto [i, layer] : llvm::enumerate(layers))
    for (FlatSymbolRefAttr ref : layer.getUses()) {
      auto it = ownerOf.find(ref.getValue());
      std::vector<size_t> &reads = s.layers[i].readsParamsOf;
      if (it != ownerOf.end() && it->second != i &&
          llvm::find(reads, it->second) == reads.end())
        reads.push_back(it->second);
    }
  for (auto &[name, p] : params)
    if (!owned.count(name))
      t.unreadParamBytes += uint64_t(p.getNumBytes());

  // The step: the one function the partition annotated.
  func::FuncOp step;
  for (auto fn : module.getOps<func::FuncOp>()) {
    bool annotated = false;
    fn.walk([&](Operation *op) {
      annotated |= op->hasAttr("train.layer");
    });
    if (annotated) {
      step = fn;
      break;
    }
  }
  if (!step) {
    error = "no function has train.layer annotations: run "
            "train-partition-layers first";
    return std::nullopt;
  }
  Block &body = step.getBody().front();

  // The batch: the leading dimension every argument shares.
  for (BlockArgument arg : body.getArguments()) {
    auto rt = dyn_cast<RankedTensorType>(arg.getType());
    if (!rt || rt.getRank() == 0 || rt.isDynamicDim(0)) {
      s.batchSize = 0;
      break;
    }
    if (s.batchSize == 0 && arg.getArgNumber() == 0)
      s.batchSize = uint64_t(rt.getDimSize(0));
    else if (s.batchSize != uint64_t(rt.getDimSize(0))) {
      s.batchSize = 0;
      break;
    }
  }

  // The token input, by the executable's rule (tokens_per_step).
  unsigned tokenArgs = 0;
  for (BlockArgument arg : body.getArguments()) {
    auto rt = dyn_cast<RankedTensorType>(arg.getType());
    auto name = step.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                  kInputNameAttrName);
    if (!rt || !rt.hasStaticShape() || rt.getRank() != 2 ||
        !(rt.getElementType().isInteger(32) ||
          rt.getElementType().isInteger(64)) ||
        (name && spillway::token_inputs::label_name(name.getValue().str())))
      continue;
    ++tokenArgs;
    t.tokensPerIteration = uint64_t(rt.getNumElements());
    t.tokenInput = name ? name.getValue().str() : "";
  }
  if (tokenArgs != 1) {
    t.tokensPerIteration = 0;
    t.tokenInput.clear();
  }

  // Layer and phase of every op; values computed from the batch.
  llvm::DenseMap<Operation *, int64_t> layerOf;
  llvm::DenseSet<Value> fromBatch;
  for (BlockArgument arg : body.getArguments())
    fromBatch.insert(arg);
  for (Operation &op : body.without_terminator()) {
    auto layer = op.getAttrOfType<IntegerAttr>("train.layer");
    auto phase = op.getAttrOfType<StringAttr>("train.phase");
    if (!layer || !phase || layer.getInt() < 0 ||
        layer.getInt() >= int64_t(L)) {
      error = "an op of the step ('" + op.getName().getStringRef().str() +
              "') has no valid train.layer / train.phase";
      return std::nullopt;
    }
    int64_t l = layer.getInt();
    layerOf[&op] = l;
    double f = opFlops(&op);
    if (phase.getValue() == "fwd") {
      s.layers[l].forwardFlops += f;
      if (llvm::any_of(op.getOperands(),
                       [&](Value v) { return fromBatch.count(v); }))
        for (Value r : op.getResults())
          fromBatch.insert(r);
    } else if (phase.getValue() == "bwd") {
      s.layers[l].backwardFlops += f;
    }
  }
  // Working bytes: every batch-derived forward value of the layer, which
  // recompute rematerializes for its backward. The f32 copy of a bf16 value
  // (bf16-mixed's rounding: x -> bf16 -> x') is not counted again: x', x's
  // only reader's reader, takes x's place once x is dead, so x and the bf16
  // value bound what the rounding holds at once.
  auto isFwd = [&](Operation *op) {
    auto phase = op ? op->getAttrOfType<StringAttr>("train.phase") : nullptr;
    return phase && phase.getValue() == "fwd";
  };
  auto restoresRounded = [](Operation &op) {
    auto back = dyn_cast<CastOp>(op);
    auto to = back ? back.getInput().getDefiningOp<CastOp>() : nullptr;
    return back && back.widensBf16() && to && to.roundsToBf16() &&
           to.getInput().hasOneUse();
  };
  for (Operation &op : body.without_terminator())
    if (isFwd(&op) && !restoresRounded(op))
      for (Value r : op.getResults())
        if (fromBatch.count(r))
          s.layers[layerOf[&op]].workingBytes += bytesOf(r.getType());
  // Activations: the batch-derived forward values a backward reads across
  // the fwd/bwd gap once sched-recompute has run (the values an offload plan
  // moves off the GPU and back, docs/cost-model.md). A forward value some op
  // outside its layer's forward reads other than a backward op (the next
  // layer's input, the loss) is kept: a backward op reading it reads it
  // directly. Any other forward value a backward op reads is recomputed from
  // its layer's forward inputs, and the kept values among those are read
  // instead. Each value counts once, at the layer producing it. The f32
  // copy of a bf16 value is recomputed in every task that reads it
  // (convert-train-to-sched), so the bf16 value is the one kept.
  auto stored = [&](Value v) {
    while (auto cast = v.getDefiningOp<CastOp>()) {
      if (!isFwd(cast) || !cast.widensBf16())
        break;
      v = cast.getInput();
    }
    return v;
  };
  auto fwdLayerOf = [&](Value v) -> std::optional<int64_t> {
    Operation *def = v.getDefiningOp();
    if (!def || !isFwd(def) || !fromBatch.count(v))
      return std::nullopt;
    return layerOf.lookup(def);
  };
  auto kept = [&](Value v, int64_t l) {
    return llvm::any_of(v.getUsers(), [&](Operation *u) {
      auto it = layerOf.find(u);
      if (it == layerOf.end())
        return true; // the step's results
      auto phase = u->getAttrOfType<StringAttr>("train.phase").getValue();
      return phase != "bwd" && !(phase == "fwd" && it->second == l);
    });
  };
  llvm::DenseSet<Value> activations;
  for (Operation &op : body.without_terminator()) {
    if (op.getAttrOfType<StringAttr>("train.phase").getValue() != "bwd")
      continue;
    for (Value v : op.getOperands()) {
      auto l = fwdLayerOf(v);
      if (!l)
        continue;
      if (kept(v, *l)) {
        activations.insert(stored(v));
        continue;
      }
      // Recomputed: walk back through layer l's forward to its inputs.
      SmallVector<Value> work = {v};
      llvm::DenseSet<Value> seen;
      while (!work.empty()) {
        Value w = work.pop_back_val();
        if (!seen.insert(w).second)
          continue;
        for (Value in : w.getDefiningOp()->getOperands()) {
          auto inLayer = fwdLayerOf(in);
          if (!inLayer)
            continue; // a step argument, or computed from parameters alone
          if (*inLayer == *l)
            work.push_back(in);
          else
            activations.insert(stored(in));
        }
      }
    }
  }
  for (Value v : activations)
    s.layers[*fwdLayerOf(v)].activationBytes += bytesOf(v.getType());
  for (LayerCost &l : s.layers)
    l.recomputeFlops = l.forwardFlops;
  if (totals)
    *totals = t;
  return s;
}
