//===- PartitionLayers.cpp - group a training step into layers ------------===//
//
// Parameters are grouped into layers (by their names' block index, else by
// module path and co-use), the layers ordered by first use in the forward
// pass, and every op of the step placed in one layer and one phase. The
// rules are in Passes.td; the result is attributes only.
//
//===----------------------------------------------------------------------===//

#include "spillway/Dialect/Train/IR/LayerTable.h"
#include "spillway/Dialect/Train/IR/TrainOps.h"
#include "spillway/Dialect/Train/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/EquivalenceClasses.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"

namespace spillway::train {
#define GEN_PASS_DEF_TRAINPARTITIONLAYERSPASS
#include "spillway/Dialect/Train/Transforms/Passes.h.inc"
} // namespace spillway::train

using namespace mlir;
using namespace spillway::train;

/// A parameter's gradient or its optimizer update: the `opt` phase; so is
/// gradient clipping's norm, which every update reads (layer 0's opt task,
/// the first in layer order: the updates of the other layers follow it).
static bool isUpdate(Operation *op) {
  return isOptimizerUpdate(op) || isa<ParamGradOp, ClipGradNormOp>(op);
}

namespace {

enum class Phase { Fwd, Bwd, Opt };

StringRef phaseName(Phase p) {
  switch (p) {
  case Phase::Fwd:
    return "fwd";
  case Phase::Bwd:
    return "bwd";
  case Phase::Opt:
    return "opt";
  }
  llvm_unreachable("phase");
}

/// `prefix.3.rest` -> `prefix.3`: the name up to its first all-digit
/// component (`h.3`, `layers.11`); empty when there is none.
StringRef blockKey(StringRef name) {
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('.', start);
    if (end == StringRef::npos)
      end = name.size();
    StringRef comp = name.slice(start, end);
    // The last component is the tensor's own name (`weight`), never a block.
    if (end == name.size())
      return {};
    if (!comp.empty() &&
        llvm::all_of(comp, [](char c) { return llvm::isDigit(c); }))
      return name.take_front(end);
    start = end + 1;
  }
  return {};
}

/// `transformer.ln_f.weight` -> `transformer.ln_f`; a name without a dot is
/// its own module.
StringRef modulePath(StringRef name) {
  size_t dot = name.rfind('.');
  return dot == StringRef::npos ? name : name.take_front(dot);
}

struct Layer {
  std::string name;
  SmallVector<unsigned> params; // owned, in declaration order
  bool block = false;
  int64_t firstUse = INT64_MAX, lastUse = -1;
};

/// "No layer / no single layer" markers for the backward reach.
constexpr int64_t kNone = -1, kMany = -2;

struct TrainPartitionLayersPass
    : spillway::train::impl::TrainPartitionLayersPassBase<
          TrainPartitionLayersPass> {
  using Base::Base;

  void runOnOperation() override;
  LogicalResult partition(func::FuncOp func);
};

void TrainPartitionLayersPass::runOnOperation() {
  ModuleOp module = getOperation();
  func::FuncOp step;
  for (auto func : module.getOps<func::FuncOp>()) {
    bool readsParams = false;
    func.walk([&](ParamValueOp) { readsParams = true; });
    if (!readsParams)
      continue;
    if (step) {
      func.emitError("train-partition-layers: expects one step function "
                     "reading parameters; found @")
          << step.getSymName() << " and @" << func.getSymName();
      return signalPassFailure();
    }
    step = func;
  }
  if (!step) {
    if (!module.getOps<ParamOp>().empty())
      module.emitWarning(
          "train-partition-layers: no function reads a parameter; "
          "nothing to partition");
    return;
  }
  if (!step.getBody().hasOneBlock()) {
    step.emitError("train-partition-layers: expects a single-block step "
                   "function");
    return signalPassFailure();
  }
  if (failed(partition(step)))
    signalPassFailure();
}

LogicalResult TrainPartitionLayersPass::partition(func::FuncOp func) {
  ModuleOp module = getOperation();
  Block &body = func.getBody().front();
  SmallVector<Operation *> ops;
  DenseMap<Operation *, int64_t> pos;
  for (Operation &op : body.without_terminator()) {
    pos[&op] = ops.size();
    ops.push_back(&op);
  }
  auto defOf = [&](Value v) -> Operation * {
    Operation *def = v.getDefiningOp();
    return def && pos.count(def) ? def : nullptr;
  };

  // Parameters, by declaration order.
  SmallVector<ParamOp> params;
  llvm::StringMap<unsigned> paramId;
  for (ParamOp p : module.getOps<ParamOp>()) {
    paramId[p.getSymName()] = params.size();
    params.push_back(p);
  }
  auto idOf = [&](StringRef name) -> std::optional<unsigned> {
    auto it = paramId.find(name);
    if (it == paramId.end())
      return std::nullopt;
    return it->second;
  };

  //===--- Phases ---===//
  // fwd: the returned loss depends on it; opt: the update sinks; bwd: the
  // rest that feeds an update. Dead ops follow their operands.
  DenseMap<Operation *, Phase> phase;
  {
    SmallVector<Operation *> work;
    DenseSet<Operation *> fwd;
    for (Value v : body.getTerminator()->getOperands())
      if (Operation *d = defOf(v))
        work.push_back(d);
    while (!work.empty()) {
      Operation *op = work.pop_back_val();
      if (!fwd.insert(op).second)
        continue;
      for (Value v : op->getOperands())
        if (Operation *d = defOf(v))
          work.push_back(d);
    }
    DenseSet<Operation *> feedsOpt;
    for (Operation *op : llvm::reverse(ops)) {
      if (isUpdate(op)) {
        phase[op] = Phase::Opt;
        continue;
      }
      for (Operation *user : op->getUsers())
        if (isUpdate(user) || feedsOpt.count(user))
          feedsOpt.insert(op);
    }
    for (Operation *op : ops) {
      if (phase.count(op))
        continue;
      if (fwd.count(op)) {
        phase[op] = Phase::Fwd;
      } else if (feedsOpt.count(op)) {
        phase[op] = Phase::Bwd;
      } else {
        bool afterBwd = llvm::any_of(op->getOperands(), [&](Value v) {
          Operation *d = defOf(v);
          return d && phase.lookup(d) != Phase::Fwd;
        });
        phase[op] = afterBwd ? Phase::Bwd : Phase::Fwd;
      }
    }
  }
  auto isFwd = [&](Operation *op) {
    return op && phase.lookup(op) == Phase::Fwd;
  };

  //===--- Forward origins and parameter uses ---===//
  DenseMap<Operation *, Origin> origin;
  // Parameters a parameter-only value is computed from.
  DenseMap<Operation *, SmallVector<unsigned, 2>> fromParams;
  // Parameters an activation op reads directly (through parameter-only ops).
  DenseMap<Operation *, SmallVector<unsigned, 2>> reads;
  SmallVector<int64_t> firstRead(params.size(), INT64_MAX);
  SmallVector<SmallVector<int64_t, 2>> mixedUses(params.size());
  for (Operation *op : ops) {
    if (!isFwd(op))
      continue;
    if (auto pv = dyn_cast<ParamValueOp>(op)) {
      origin[op] = Origin::Param;
      if (auto id = idOf(pv.getParam())) {
        fromParams[op].push_back(*id);
        firstRead[*id] = std::min(firstRead[*id], pos[op]);
      }
      continue;
    }
    Origin o = Origin::Const;
    llvm::SetVector<unsigned> ps;
    for (Value v : op->getOperands()) {
      Operation *d = defOf(v);
      Origin from = d ? origin.lookup(d) : Origin::Input;
      if (from == Origin::Param)
        ps.insert(fromParams[d].begin(), fromParams[d].end());
      o = joinOrigins(o, from);
    }
    origin[op] = o;
    if (o == Origin::Mixed) {
      reads[op].assign(ps.begin(), ps.end());
      for (unsigned p : ps)
        mixedUses[p].push_back(pos[op]);
    } else if (o == Origin::Param) {
      fromParams[op].assign(ps.begin(), ps.end());
    }
  }

  //===--- Parameters into layers ---===//
  llvm::EquivalenceClasses<unsigned> groups;
  llvm::StringMap<unsigned> byKey;
  SmallVector<bool> isBlockParam(params.size(), false);
  auto isRead = [&](unsigned p) { return firstRead[p] != INT64_MAX; };
  for (unsigned p = 0; p < params.size(); ++p) {
    if (!isRead(p))
      continue;
    StringRef name = params[p].getSymName();
    StringRef block = blockKey(name);
    isBlockParam[p] = !block.empty();
    // Tagged: a block key and a module path never share a group.
    std::string key =
        block.empty() ? ("m:" + modulePath(name)).str() : ("b:" + block).str();
    groups.insert(p);
    auto [it, fresh] = byKey.try_emplace(key, p);
    if (!fresh)
      groups.unionSets(it->second, p);
  }
  // Parameters without block index read by one op (linear's weight and
  // bias) belong together.
  for (auto &[op, ps] : reads) {
    std::optional<unsigned> first;
    for (unsigned p : ps) {
      if (isBlockParam[p])
        continue;
      if (first)
        groups.unionSets(*first, p);
      else
        first = p;
    }
  }
  SmallVector<Layer> layers;
  DenseMap<unsigned, unsigned> groupOf; // leader -> index into layers
  SmallVector<unsigned> layerOf(params.size(), ~0u);
  for (unsigned p = 0; p < params.size(); ++p) {
    if (!isRead(p))
      continue;
    unsigned leader = groups.getLeaderValue(p);
    auto [it, fresh] = groupOf.try_emplace(leader, layers.size());
    if (fresh)
      layers.emplace_back();
    Layer &l = layers[it->second];
    layerOf[p] = it->second;
    l.params.push_back(p);
    l.block |= isBlockParam[p];
    // A parameter only ever read by parameter-only ops (a penalty on the
    // weights) counts from its read.
    int64_t first = mixedUses[p].empty() ? firstRead[p] : mixedUses[p].front();
    int64_t last = mixedUses[p].empty() ? firstRead[p] : mixedUses[p].back();
    if (first < l.firstUse) {
      l.firstUse = first;
      StringRef name = params[p].getSymName();
      StringRef key = blockKey(name);
      l.name = (key.empty() ? modulePath(name) : key).str();
    }
    l.lastUse = std::max(l.lastUse, last);
  }
  // A group without block index first used inside a block's span (a rotary
  // frequency table) is owned by that block and shared with the later ones.
  SmallVector<unsigned> mergedInto(layers.size());
  for (unsigned g = 0; g < layers.size(); ++g) {
    mergedInto[g] = g;
    if (layers[g].block)
      continue;
    int64_t best = -1;
    for (unsigned b = 0; b < layers.size(); ++b)
      if (layers[b].block && layers[b].firstUse < layers[g].firstUse &&
          layers[g].firstUse < layers[b].lastUse &&
          (best < 0 || layers[b].firstUse > layers[best].firstUse))
        best = b;
    if (best >= 0)
      mergedInto[g] = best;
  }
  {
    SmallVector<unsigned> order;
    for (unsigned g = 0; g < layers.size(); ++g)
      if (mergedInto[g] == g)
        order.push_back(g);
    llvm::stable_sort(order, [&](unsigned a, unsigned b) {
      return layers[a].firstUse < layers[b].firstUse;
    });
    SmallVector<unsigned> newIndex(layers.size());
    for (auto [i, g] : llvm::enumerate(order))
      newIndex[g] = i;
    SmallVector<Layer> sorted;
    for (unsigned g : order)
      sorted.push_back(layers[g]);
    for (unsigned g = 0; g < layers.size(); ++g)
      if (mergedInto[g] != g)
        sorted[newIndex[mergedInto[g]]].params.append(layers[g].params);
    for (unsigned p = 0; p < params.size(); ++p)
      if (layerOf[p] != ~0u)
        layerOf[p] = newIndex[mergedInto[layerOf[p]]];
    layers = std::move(sorted);
  }
  // Consecutive layers without block index whose first reading op consumes
  // nothing of the layers before it in the run are parallel branches (token
  // and position embeddings, the q/k/v projections of a flat-named
  // attention): one layer.
  {
    DenseMap<Operation *, int64_t> mixedLayer;
    SmallVector<int64_t> dependsOn(layers.size(), kNone);
    SmallVector<bool> seen(layers.size(), false);
    for (Operation *op : ops) {
      if (!isFwd(op) || origin.lookup(op) != Origin::Mixed)
        continue;
      int64_t l = 0;
      SmallVector<int64_t, 4> consumed;
      for (unsigned p : reads[op])
        l = std::max<int64_t>(l, layerOf[p]);
      for (Value v : op->getOperands())
        if (Operation *d = defOf(v);
            d && isFwd(d) && origin.lookup(d) == Origin::Mixed) {
          l = std::max(l, mixedLayer[d]);
          consumed.push_back(mixedLayer[d]);
        }
      mixedLayer[op] = l;
      for (unsigned p : reads[op]) {
        unsigned g = layerOf[p];
        if (seen[g])
          continue;
        seen[g] = true;
        for (unsigned q : reads[op])
          if (layerOf[q] != g)
            dependsOn[g] = std::max<int64_t>(dependsOn[g], layerOf[q]);
        for (int64_t c : consumed)
          dependsOn[g] = std::max(dependsOn[g], c);
      }
    }
    SmallVector<unsigned> newIndex(layers.size());
    SmallVector<Layer> merged;
    int64_t runStart = 0;
    for (unsigned g = 0; g < layers.size(); ++g) {
      bool parallel = g > 0 && !layers[g].block && !layers[g - 1].block &&
                      dependsOn[g] < runStart;
      if (!parallel) {
        runStart = g;
        merged.push_back(layers[g]);
      } else {
        Layer &into = merged.back();
        into.name += "+" + layers[g].name;
        into.params.append(layers[g].params);
      }
      newIndex[g] = merged.size() - 1;
    }
    for (unsigned p = 0; p < params.size(); ++p)
      if (layerOf[p] != ~0u)
        layerOf[p] = newIndex[layerOf[p]];
    for (Layer &l : merged)
      llvm::sort(l.params);
    layers = std::move(merged);
  }
  auto layerName = [&](int64_t l) { return layers[l].name; };

  //===--- Forward ops into layers ---===//
  // An activation op joins the latest layer among the parameters it reads
  // and the ops it consumes. The others (parameter reads, weight transposes,
  // constants, input reshapes) join the earliest layer among their users,
  // so they are computed where needed.
  DenseMap<Operation *, int64_t> layer;
  SmallVector<llvm::SetVector<int64_t>> usedBy(params.size());
  // A cast reading bf16 storage back to f32 is computed where its value is
  // needed: it joins the earliest layer among its users, so the bf16 value,
  // not its f32 copy, is what crosses the layers between (half the bytes
  // kept and moved). Until then it stands in its input's layer.
  SmallVector<Operation *> storageReads;
  auto readsStorage = [](Operation *op) {
    auto cast = dyn_cast<CastOp>(op);
    return cast && cast.widensBf16();
  };
  for (Operation *op : ops) {
    if (!isFwd(op) || origin.lookup(op) != Origin::Mixed)
      continue;
    if (readsStorage(op)) {
      Operation *d = defOf(op->getOperand(0));
      layer[op] = d && layer.count(d) ? layer[d] : 0;
      storageReads.push_back(op);
      continue;
    }
    int64_t l = 0;
    Operation *latest = nullptr;
    for (unsigned p : reads[op])
      l = std::max<int64_t>(l, layerOf[p]);
    for (Value v : op->getOperands())
      if (Operation *d = defOf(v);
          d && isFwd(d) && origin.lookup(d) == Origin::Mixed && layer[d] > l) {
        l = layer[d];
        latest = d;
      }
    layer[op] = l;
    for (unsigned p : reads[op]) {
      if (layerOf[p] < l && isBlockParam[p]) {
        InFlightDiagnostic diag =
            op->emitError()
            << "train-partition-layers: layers are not monotone in forward "
               "order: this op reads @"
            << params[p].getSymName() << " of layer " << layerOf[p] << " ('"
            << layerName(layerOf[p]) << "') and "
            << (latest ? "consumes a value" : "reads a parameter")
            << " of layer " << l << " ('" << layerName(l) << "')";
        if (latest)
          diag.attachNote(latest->getLoc())
              << "the value of layer " << l << " is computed here";
        return failure();
      }
      usedBy[p].insert(l);
    }
  }
  for (Operation *op : llvm::reverse(storageReads)) {
    int64_t l = INT64_MAX;
    for (Operation *user : op->getUsers())
      if (isFwd(user) && layer.count(user))
        l = std::min(l, layer[user]);
    if (l != INT64_MAX)
      layer[op] = std::max(layer[op], l);
  }
  for (Operation *op : llvm::reverse(ops)) {
    if (!isFwd(op) || origin.lookup(op) == Origin::Mixed)
      continue;
    int64_t l = INT64_MAX;
    for (Operation *user : op->getUsers())
      if (isFwd(user) && layer.count(user))
        l = std::min(l, layer[user]);
    if (l == INT64_MAX) {
      // Used by no forward op (the loss itself, or read only by backward):
      // the latest layer of the parameters it is computed from.
      l = 0;
      for (unsigned p : fromParams.lookup(op))
        l = std::max<int64_t>(l, layerOf[p]);
    }
    layer[op] = l;
  }
  for (unsigned p = 0; p < params.size(); ++p)
    if (isRead(p))
      usedBy[p].insert(layerOf[p]);

  //===--- Backward and optimizer ops into layers ---===//
  // reach: the one layer whose parameter updates an op feeds, or kMany.
  DenseMap<Operation *, int64_t> reach;
  auto ownerOfUpdate = [&](Operation *op) -> int64_t {
    if (isa<ClipGradNormOp>(op))
      return kNone;
    auto id = idOf(isOptimizerUpdate(op) ? getUpdatedParam(op)
                                           : cast<ParamGradOp>(op).getParam());
    return id && layerOf[*id] != ~0u ? int64_t(layerOf[*id]) : kNone;
  };
  auto merge = [](int64_t &r, int64_t x) {
    if (x == kNone || r == kMany)
      return;
    r = (r == kNone || r == x) ? x : kMany;
  };
  for (Operation *op : llvm::reverse(ops)) {
    if (phase[op] != Phase::Bwd)
      continue;
    int64_t r = kNone;
    for (Operation *user : op->getUsers()) {
      // The norm reads every gradient: it says nothing of whose they are.
      if (isa<ClipGradNormOp>(user))
        continue;
      if (isUpdate(user))
        merge(r, ownerOfUpdate(user));
      else if (reach.count(user))
        merge(r, reach[user]);
    }
    reach[op] = r;
  }
  // The layer whose updates an op hands its result to directly: a bias
  // gradient summed from the cotangent of the next layer's input.
  auto updatesFed = [&](Operation *op) {
    int64_t r = kNone;
    for (Operation *user : op->getUsers())
      if (!isa<ClipGradNormOp>(user))
        merge(r, isUpdate(user) ? ownerOfUpdate(user) : kMany);
    return r;
  };
  // A forward value a backward op reads was read or computed by the forward
  // op it differentiates, so that op is in the value's layer or in the
  // layer of one of its forward users: the candidates. A weight read in one
  // layer, an activation inside a layer pin it down; a value crossing a
  // layer boundary leaves two.
  using LayerSet = SmallVector<int64_t, 4>; // sorted, unique
  auto candidatesOf = [&](Value v) {
    LayerSet set;
    if (Operation *d = defOf(v))
      set.push_back(layer[d]);
    for (Operation *user : v.getUsers())
      if (isFwd(user) && pos.count(user))
        set.push_back(layer[user]);
    llvm::sort(set);
    set.erase(llvm::unique(set), set.end());
    return set;
  };
  auto intersect = [](std::optional<LayerSet> &acc, const LayerSet &set) {
    if (!acc) {
      acc = set;
      return;
    }
    LayerSet out;
    std::set_intersection(acc->begin(), acc->end(), set.begin(), set.end(),
                          std::back_inserter(out));
    *acc = std::move(out);
  };
  DenseMap<Operation *, std::optional<LayerSet>> candidates;
  DenseSet<Operation *> readsCotangent;
  for (Operation *op : ops) {
    Phase ph = phase[op];
    if (ph == Phase::Opt) {
      int64_t owner = ownerOfUpdate(op);
      layer[op] = owner == kNone ? 0 : owner;
      continue;
    }
    if (ph != Phase::Bwd)
      continue;
    std::optional<LayerSet> cand;
    int64_t asap = INT64_MAX;
    for (Value v : op->getOperands()) {
      Operation *d = defOf(v);
      if (!d || isFwd(d)) {
        intersect(cand, candidatesOf(v));
        continue;
      }
      readsCotangent.insert(op);
      // Looking through backward ops that read only forward values (a
      // weight's transpose).
      if (!readsCotangent.count(d))
        if (auto &c = candidates[d])
          intersect(cand, *c);
      if (auto it = layer.find(d); it != layer.end())
        asap = std::min(asap, it->second);
    }
    candidates[op] = cand;
    if (!readsCotangent.count(op))
      continue; // placed just before its first use, below
    // Never later in backward order than the cotangents it reads (asap).
    // Among the candidates, the one layer whose updates it feeds, else the
    // first in backward order. Without forward operands: the layer whose
    // update it feeds directly (a bias gradient), else with its cotangents
    // (so the cotangent of layer l's input, summed from its uses, is layer
    // l's backward).
    int64_t l = kNone;
    if (cand && !cand->empty()) {
      l = cand->front();
      for (int64_t c : *cand)
        if (c <= asap)
          l = c;
      // A value crossing a boundary leaves its producer's layer and its
      // users'; the one layer the op's result feeds decides (a tanh at the
      // end of layer l-1 vs. the weight gradient of layer l's first op).
      if (reach[op] >= 0 && llvm::is_contained(*cand, reach[op]) &&
          reach[op] <= asap)
        l = reach[op];
    } else if (!cand && updatesFed(op) >= 0) {
      l = updatesFed(op);
    }
    if (l == kNone)
      l = asap;
    if (l == INT64_MAX)
      continue;
    layer[op] = std::min(l, asap);
  }
  for (Operation *op : llvm::reverse(ops)) {
    if (phase[op] != Phase::Bwd || layer.count(op))
      continue;
    int64_t l = kNone;
    for (Operation *user : op->getUsers())
      if (auto it = layer.find(user);
          it != layer.end() && phase[user] != Phase::Fwd)
        l = std::max(l, it->second);
    if (l == kNone) // dead
      l = candidates[op] && !candidates[op]->empty() ? candidates[op]->back()
                                                     : 0;
    layer[op] = l;
  }

  //===--- Monotonicity ---===//
  // Forward values flow to the same or a later layer, cotangents to the same
  // or an earlier one. The rules above ensure it; a failure here names the
  // edge a graph broke them with.
  for (Operation *op : ops)
    for (Value v : op->getOperands()) {
      Operation *d = defOf(v);
      // The clip coefficient goes from layer 0's opt task to every update.
      if (!d || isa<ClipGradNormOp>(d))
        continue;
      bool fwdEdge = isFwd(op) && isFwd(d);
      bool bwdEdge = !isFwd(op) && !isFwd(d);
      if ((fwdEdge && layer[d] > layer[op]) ||
          (bwdEdge && layer[d] < layer[op])) {
        op->emitError() << "train-partition-layers: layers are not monotone: "
                        << "this " << phaseName(phase[op]) << " op of layer "
                        << layer[op] << " ('" << layerName(layer[op])
                        << "') consumes a value of layer " << layer[d] << " ('"
                        << layerName(layer[d]) << "')";
        return failure();
      }
    }

  //===--- Shared parameters: which layers' backward feed the update ---===//
  SmallVector<SmallVector<int64_t>> gradFrom(params.size());
  for (Operation *op : ops) {
    if (!isUpdate(op) || isa<ClipGradNormOp>(op))
      continue;
    auto id = idOf(isOptimizerUpdate(op) ? getUpdatedParam(op)
                                           : cast<ParamGradOp>(op).getParam());
    if (!id || usedBy[*id].size() < 2)
      continue;
    int64_t owner = layerOf[*id];
    llvm::SetVector<int64_t> from;
    SmallVector<Operation *> work;
    DenseSet<Operation *> seen;
    if (Operation *d = defOf(op->getOperand(0)))
      work.push_back(d);
    while (!work.empty()) {
      Operation *d = work.pop_back_val();
      if (!seen.insert(d).second || phase[d] != Phase::Bwd || reach[d] != owner)
        continue;
      from.insert(layer[d]);
      for (Value v : d->getOperands())
        if (Operation *dd = defOf(v))
          work.push_back(dd);
    }
    gradFrom[*id].assign(from.begin(), from.end());
    llvm::sort(gradFrom[*id]);
  }

  //===--- Attributes ---===//
  Builder b(&getContext());
  for (Operation *op : ops) {
    op->setAttr("train.layer", b.getI64IntegerAttr(layer[op]));
    op->setAttr("train.phase", b.getStringAttr(phaseName(phase[op])));
  }
  for (unsigned p = 0; p < params.size(); ++p)
    if (isRead(p))
      params[p]->setAttr("train.layer", b.getI64IntegerAttr(layerOf[p]));
  SmallVector<SmallVector<unsigned>> usesForeign(layers.size());
  for (unsigned p = 0; p < params.size(); ++p)
    for (int64_t l : usedBy[p])
      if (l != int64_t(layerOf[p]))
        usesForeign[l].push_back(p);
  auto symbols = [&](ArrayRef<unsigned> ps) {
    SmallVector<FlatSymbolRefAttr> refs;
    for (unsigned p : ps)
      refs.push_back(FlatSymbolRefAttr::get(params[p].getSymNameAttr()));
    return refs;
  };
  SmallVector<LayerAttr> summary;
  for (auto [i, l] : llvm::enumerate(layers)) {
    SmallVector<SharedParamAttr> shared;
    for (unsigned p : l.params) {
      if (usedBy[p].size() < 2)
        continue;
      SmallVector<int64_t> users(usedBy[p].begin(), usedBy[p].end());
      llvm::sort(users);
      shared.push_back(SharedParamAttr::get(
          &getContext(), FlatSymbolRefAttr::get(params[p].getSymNameAttr()),
          users, gradFrom[p]));
    }
    summary.push_back(LayerAttr::get(&getContext(), l.name, symbols(l.params),
                                     shared, symbols(usesForeign[i])));
  }
  LayerTable::write(module, summary);
  numLayers = layers.size();
  return success();
}

} // namespace
