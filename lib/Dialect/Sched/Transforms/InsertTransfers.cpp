//===- InsertTransfers.cpp - moves, waits and bindings of a placement -----===//
//
// Writes the transfers that carry out an iteration's `placement`, following
// docs/cost-model.md's byte rules move by move (parameter loads as runs of
// one layer's tasks, gradient flushes per backward run, the update where the
// optimizer runs). The rules are in Passes.td.
//
//===----------------------------------------------------------------------===//

#include "spillway/Dialect/Sched/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "spillway/Dialect/Sched/IR/SchedOps.h"
#include "spillway/Dialect/Train/IR/LayerTable.h"
#include "spillway/Dialect/Train/IR/TrainOps.h"
#include "spillway/Schedule/VisitSequence.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/SmallSet.h"

#include <deque>

namespace spillway::sched {
#define GEN_PASS_DEF_SCHEDINSERTTRANSFERSPASS
#include "spillway/Dialect/Sched/Transforms/Passes.h.inc"
} // namespace spillway::sched

using namespace mlir;
using namespace spillway;
using namespace spillway::sched;

namespace {

/// The parameter and gradient of an update in an opt task: `train.adamw`,
/// `train.foam`, or the part `train.adamw_defer` keeps for the next
/// iteration.
std::optional<std::pair<FlatSymbolRefAttr, Value>> updateOf(Operation &op) {
  if (!train::isOptimizerUpdate(&op))
    return std::nullopt;
  return std::make_pair(
      FlatSymbolRefAttr::get(op.getContext(), train::getUpdatedParam(&op)),
      train::getUpdateGrad(&op));
}

/// A maximal run of consecutive fwd/bwd tasks of one layer.
struct Run {
  int64_t layer;
  SmallVector<TaskOp> tasks;
};

struct Rewriter {
  IterationOp it;
  OpBuilder b;
  Tier tp, to, tg, side;
  /// The master weights' home (bf16-mixed: the params blocks hold the
  /// working copies), which the update brings and writes back as it does
  /// the optimizer state; none: the parameters are their own masters.
  std::optional<Tier> tm;
  /// The placement split by layer (PlacementAttr::layers): each layer's
  /// home of a class, host or SSD (the parameters' also the GPU).
  PlacementAttr placement;
  Tier tpOf(int64_t l) const { return placement.homeOf("params", tp, l); }
  Tier toOf(int64_t l) const { return placement.homeOf("optimizer", to, l); }
  Tier tgOf(int64_t l) const { return placement.homeOf("gradients", tg, l); }
  Tier tmOf(int64_t l) const { return placement.homeOf("master", *tm, l); }
  int64_t microbatches;
  /// Per layer: its parameters (block order) and which of them the
  /// optimizer updates (the gradient and optimizer blocks' members).
  SmallVector<SmallVector<StringAttr>> params, updated;
  /// Per layer: the parameters it reads that other layers own (`uses`).
  SmallVector<SmallVector<StringAttr>> reads;
  /// Per layer: the elements of `updated` (concatenated) and how many of
  /// them lead the update deferred to the next iteration
  /// (sched-overlap-optimizer), with the task that applies it.
  SmallVector<int64_t> total, deferred;
  DenseMap<int64_t, TaskOp> deferredTask;
  /// Per layer: whether a backward run has flushed its gradient yet, and
  /// the op after which its last flush leaves it complete on `gradTier()`.
  SmallVector<bool> flushed;
  SmallVector<Operation *> lastFlush;
  /// ZeRO stage 2 (sinkFlushes): per layer, the op its gradient's norms and
  /// update come before (the next flush's sched.stage_grads), or null.
  SmallVector<Operation *> completeBefore;
  /// Per layer: the end of each `train.adamw_defer @p [0, end)` of its opt
  /// task, which the deferred task must apply as it is.
  SmallVector<llvm::StringMap<int64_t>> deferredByUpdate;

  Rewriter(IterationOp it) : it(it), b(it.getContext()) {}

  /// A block some of whose update is deferred and some not has two parts:
  /// 0, the deferred elements, and 1, the rest. `part(l, k)` is the part
  /// attribute of a move of part k (none: the block has one part).
  bool isSplit(int64_t l) const {
    return deferred[l] > 0 && deferred[l] < total[l];
  }
  int part(int64_t l, int k) const { return isSplit(l) ? k : -1; }

  /// A block cut between host and SSD (PlacementAttr::cuts): its first
  /// elements, part 0, live on host, the rest, part 1, at its home (SSD).
  /// The helpers below take such a block part by part: part 0 never
  /// crosses to the SSD, and where a caller names the block's home as a
  /// source or destination, part 0's is the host.
  bool isCut(BlockClass c, int64_t l) const {
    return placement.cutOf(stringifyBlockClass(c), l) > 0;
  }
  /// Runs fn(k, tier) for block (c, l) (or its part `part`, k = part) at
  /// tier `t`: a cut block named at its home, SSD, goes part by part, part
  /// 0 at its own home, the host.
  template <class Fn>
  void forParts(BlockClass c, int64_t l, Tier t, int part, Fn fn) {
    if (t != Tier::ssd || !isCut(c, l))
      return fn(part, t);
    if (part <= 0)
      fn(0, Tier::host);
    if (part != 0)
      fn(1, Tier::ssd);
  }

  Value move(BlockClass c, int64_t l, Tier from, Tier to, Priority p,
             int part = -1) {
    if (part < 0 && (from == Tier::ssd || to == Tier::ssd) && isCut(c, l))
      part = 1; // part 0 stays on host
    return MoveOp::create(b, it.getLoc(), TimepointType::get(b.getContext()),
                          c, l,
                          part < 0 ? IntegerAttr() : b.getI64IntegerAttr(part),
                          from, to, p, IntegerAttr())
        .getTimepoint();
  }
  void await(ValueRange ts) { AwaitOp::create(b, it.getLoc(), ts); }
  void drop(BlockClass c, int64_t l, Tier t, int part = -1) {
    if (part < 0 && t == Tier::host && isCut(c, l))
      part = 1; // part 0's home copy stays
    DropOp::create(b, it.getLoc(), c, l,
                   part < 0 ? IntegerAttr() : b.getI64IntegerAttr(part), t);
  }
  /// True when the update of layer l writes its whole params block: with
  /// master weights (the bf16 working copies are rounded from them) and
  /// every parameter of the layer updated (no frozen one whose copy only
  /// the old block holds).
  bool rewritesParams(int64_t l) const {
    return tm && !params[l].empty() && updated[l].size() == params[l].size();
  }
  /// The params block (or a part) on `side` for the update: brought from
  /// `from` along the links, or, when the update rewrites it, a fresh copy
  /// there that the runtime rounds from the masters bound there (nothing
  /// crosses a link; an update the runtime skips leaves it right).
  void paramsForUpdate(int64_t l, Tier from, int part) {
    forParts(BlockClass::params, l, from, part, [&](int k, Tier src) {
      if (src == side)
        return;
      if (!rewritesParams(l))
        return bring(BlockClass::params, l, src, side, Priority::demand, k);
      AllocOp::create(b, it.getLoc(), BlockClass::params, l,
                      k < 0 ? IntegerAttr() : b.getI64IntegerAttr(k), side,
                      IntegerAttr());
    });
  }
  Operation *bind(BlockClass c, int64_t l, Tier t) {
    return BindOp::create(b, it.getLoc(), c, l, t);
  }
  /// Brings block (c, l) (or one part) from `home` to `dst` one link at a
  /// time, waiting for each, and frees the copies in between.
  void bring(BlockClass c, int64_t l, Tier home, Tier dst, Priority p,
             int part = -1) {
    forParts(c, l, home, part, [&](int k, Tier src) {
      int from = int(src), step = int(dst) < from ? -1 : 1;
      for (int t = from; t != int(dst); t += step) {
        await(move(c, l, Tier(t), Tier(t + step), p, k));
        if (t != from)
          drop(c, l, Tier(t), k);
      }
    });
  }
  /// Writes block (c, l) (or one part) back from `src` to `home` and frees
  /// every copy on the way except the home one (and, with `keepSource`,
  /// the one on `src`).
  void sendBack(BlockClass c, int64_t l, Tier src, Tier home, int part = -1,
                bool keepSource = false) {
    forParts(c, l, home, part, [&](int k, Tier dst) {
      int step = int(dst) < int(src) ? -1 : 1;
      for (int t = int(src); t != int(dst); t += step)
        await(move(c, l, Tier(t), Tier(t + step), Priority::writeback, k));
      for (int t = int(src); t != int(dst); t += step)
        if (!keepSource || t != int(src))
          drop(c, l, Tier(t), k);
    });
  }

  LogicalResult run();
  LogicalResult readDeferred();
  LogicalResult loadParams(ArrayRef<Run> runs);
  LogicalResult routeGradients(ArrayRef<Run> runs);
  struct Flush {
    int64_t layer;
    TaskOp first, last; // the backward run's tasks
    Operation *stage;
    SmallVector<Operation *> tail;
  };
  LogicalResult sinkFlushes(ArrayRef<Flush> flushes);
  LogicalResult clipFromNorms();
  LogicalResult placeUpdates();
  LogicalResult cutUpdates();
  void deferredUpdate(int64_t l, TaskOp task);
  LogicalResult routeActivations(Tier ta);
};

LogicalResult Rewriter::run() {
  placement = it.getPlacementAttr();
  if (!placement)
    return it.emitOpError("sched-insert-transfers: no placement; run "
                          "sched-place first");
  tp = placement.getParams();
  to = placement.getOptimizer();
  tg = placement.getGradients();
  side = to == Tier::gpu ? Tier::gpu : Tier::host;
  if (auto master = it.getMaster())
    tm = symbolizeTier(*master);
  microbatches = it.getMicrobatches();

  auto module = it->getParentOfType<ModuleOp>();
  auto layers = train::LayerTable::read(module);
  if (failed(layers))
    return failure();
  if (!*layers)
    return it.emitOpError("sched-insert-transfers: the module has no "
                          "train.layers (run train-partition-layers)");
  for (train::LayerAttr entry : **layers) {
    params.emplace_back();
    updated.emplace_back();
    for (FlatSymbolRefAttr s : entry.getParams())
      params.back().push_back(s.getAttr());
    // A tied weight has one home, its owner's params block: a load of a
    // layer that reads it brings (and binds) that block too.
    reads.emplace_back();
    for (FlatSymbolRefAttr s : entry.getUses())
      reads.back().push_back(s.getAttr());
  }
  for (StringRef cls :
       {"params", "optimizer", "gradients", "master", "activations"})
    if (size_t n = placement.layerTiers(cls).size(); n && n != params.size())
      return it.emitOpError("sched-insert-transfers: the placement splits ")
             << cls << " over " << n << " layers, train.layers has "
             << params.size();

  // The fwd/bwd task runs, in block order.
  SmallVector<Run> runs;
  for (Operation &op : it.getBlock()) {
    auto task = dyn_cast<TaskOp>(op);
    if (!task || task.getPhase() == Phase::opt)
      continue;
    if (int64_t(task.getLayer()) >= int64_t(params.size()))
      return task.emitOpError("sched-insert-transfers: layer ")
             << task.getLayer() << " is not in the module's train.layers";
    if (runs.empty() || runs.back().layer != int64_t(task.getLayer()))
      runs.push_back({int64_t(task.getLayer()), {}});
    runs.back().tasks.push_back(task);
  }
  if (failed(routeGradients(runs)) || failed(readDeferred()) ||
      failed(cutUpdates()) || failed(clipFromNorms()) ||
      failed(placeUpdates()) || failed(loadParams(runs)))
    return failure();
  // With the parameters resident the deferred updates stay where
  // sched-overlap-optimizer put them (loadParams places the others).
  for (auto &[l, task] : deferredTask)
    if (tpOf(l) == Tier::gpu)
      deferredUpdate(l, task);
  if (placement.getActivations() != Tier::gpu)
    return routeActivations(placement.getActivations());
  return success();
}

LogicalResult Rewriter::readDeferred() {
  auto module = it->getParentOfType<ModuleOp>();
  total.assign(params.size(), 0);
  deferred.assign(params.size(), 0);
  SmallVector<llvm::StringMap<int64_t>> ranges(params.size());
  for (Operation &op : it.getBlock()) {
    auto task = dyn_cast<TaskOp>(op);
    if (!task || !task.getDeferred())
      continue;
    int64_t l = task.getLayer();
    if (l >= int64_t(params.size()))
      return task.emitOpError("sched-insert-transfers: layer ")
             << l << " is not in the module's train.layers";
    if (!deferredTask.try_emplace(l, task).second)
      return task.emitOpError("sched-insert-transfers: a second deferred "
                              "update task for layer ")
             << l;
    for (Operation &inner : task.getBlock()) {
      if (isa<YieldOp>(inner))
        continue;
      auto apply = dyn_cast<train::AdamWApplyPendingOp>(inner);
      if (!apply || apply.getBegin() != 0)
        return inner.emitOpError("sched-insert-transfers: a deferred update "
                                 "task holds train.adamw_apply_pending "
                                 "@p [0, d) only");
      ranges[l][apply.getParam()] = int64_t(apply.getEnd());
    }
  }
  for (size_t l = 0; l < params.size(); ++l) {
    // The deferred elements must lead the layer's updated elements in block
    // order (what sched-overlap-optimizer defers): they are part 0.
    int64_t d = 0;
    bool ended = false;
    size_t seen = 0;
    for (StringAttr s : updated[l]) {
      auto p = module.lookupSymbol<train::ParamOp>(s);
      if (!p)
        return it.emitOpError("sched-insert-transfers: no train.param @")
               << s.getValue();
      int64_t n = p.getType().getNumElements();
      int64_t got = ranges[l].lookup(s.getValue());
      if (got > 0) {
        ++seen;
        if (ended || got > n)
          return deferredTask[l].emitOpError(
                     "sched-insert-transfers: the deferred elements of layer ")
                 << l << " are not the leading elements of its updated "
                 << "parameters in block order (@" << s.getValue() << ")";
        d += got;
      }
      ended = ended || got < n;
      total[l] += n;
    }
    if (seen != ranges[l].size())
      return deferredTask[l].emitOpError("sched-insert-transfers: the "
                                         "deferred update of layer ")
             << l << " applies a parameter its opt task does not update";
    // What is applied is what the opt task deferred, range for range.
    for (auto &[name, end] : deferredByUpdate[l])
      if (ranges[l].lookup(name) != end)
        return (deferredTask.count(l) ? deferredTask[l].getOperation()
                                      : it.getOperation())
                   ->emitOpError("sched-insert-transfers: layer ")
               << l << " defers @" << name << " [0, " << end
               << ") but its deferred task applies "
               << (ranges[l].count(name)
                       ? "[0, " + std::to_string(ranges[l].lookup(name)) + ")"
                       : std::string("nothing of it"));
    for (auto &[name, end] : ranges[l])
      if (!deferredByUpdate[l].count(name))
        return deferredTask[l].emitOpError("sched-insert-transfers: layer ")
               << l << " applies a deferred update of @" << name
               << " that its opt task does not defer";
    deferred[l] = d;
    if (d > 0 && updated[l].size() != params[l].size())
      return deferredTask[l].emitOpError("sched-insert-transfers: layer ")
             << l << " has parameters the optimizer does not update; an "
             << "offload plan with deferred updates needs all of a layer's "
             << "parameters updated (use --overlap-optimizer 0)";
  }
  return success();
}

LogicalResult Rewriter::cutUpdates() {
  auto module = it->getParentOfType<ModuleOp>();
  SmallVector<TaskOp> optTasks(params.size());
  for (Operation &op : it.getBlock())
    if (auto t = dyn_cast<TaskOp>(op);
        t && t.getPhase() == Phase::opt && !t.getDeferred() &&
        int64_t(t.getLayer()) < int64_t(params.size()))
      optTasks[t.getLayer()] = t;
  for (size_t l = 0; l < params.size(); ++l) {
    const int64_t e = placement.layerCut(int64_t(l));
    if (!e)
      continue;
    // The layer's params, master and optimizer blocks split at element e,
    // as the optimizer overlap splits them: the same members in each.
    auto fail = [&]() {
      return it.emitOpError("sched-insert-transfers: layer ")
             << l << "'s blocks are cut at element " << e << " ";
    };
    if (updated[l].size() != params[l].size())
      return fail() << "but the optimizer does not update all of its "
                       "parameters; place the layer whole";
    if (e >= total[l])
      return fail() << "but it has " << total[l] << " elements";
    // The deferred update is part 0's (its copies need not be back to
    // back): the overlap defers the cut's elements or none.
    if (deferred[l] > 0 && deferred[l] != e)
      return fail() << "and the optimizer overlap defers " << deferred[l]
                    << " of its " << total[l]
                    << " elements; a cut layer's overlap defers none or the "
                       "cut's (place the layer whole, or use another "
                       "--overlap-optimizer)";
    TaskOp opt = optTasks[l];
    if (!opt)
      continue;
    // An update whose range holds the cut runs as two: part 0's copy may
    // sit in its host home and part 1's in a slot, not back to back. AdamW
    // is elementwise, so the two give the whole update bit for bit.
    llvm::StringMap<int64_t> start;
    int64_t at = 0;
    for (StringAttr sym : updated[l]) {
      start[sym.getValue()] = at;
      if (auto p = module.lookupSymbol<train::ParamOp>(sym))
        at += p.getType().getNumElements();
    }
    SmallVector<Operation *> inner;
    for (Operation &op : opt.getBlock())
      if (train::isOptimizerUpdate(&op))
        inner.push_back(&op);
    for (Operation *op : inner) {
      StringRef name = train::getUpdatedParam(op);
      auto p = module.lookupSymbol<train::ParamOp>(
          StringAttr::get(op->getContext(), name));
      if (!p || !start.count(name))
        continue;
      // FOAM's state is folded over each row: its blocks hold fewer
      // elements than the parameters', so no element cuts them alike.
      if (isa<train::FoamOp>(op))
        return op->emitOpError("sched-insert-transfers: layer ")
               << l << "'s blocks are cut at element " << e << ", but @" << name
               << " is updated by FOAM, whose folded state is not "
               << "cut; place the layer whole";
      const int64_t s0 = start[name], n = p.getType().getNumElements();
      auto adamw = dyn_cast<train::AdamWOp>(op);
      int64_t begin = 0, end = n;
      if (adamw && adamw.getBegin())
        begin = *adamw.getBegin(), end = *adamw.getEnd();
      if (auto d = dyn_cast<train::AdamWDeferOp>(op))
        begin = d.getBegin(), end = d.getEnd();
      if (!(s0 + begin < e && e < s0 + end))
        continue;
      if (!adamw)
        return op->emitOpError("sched-insert-transfers: layer ")
               << l << "'s blocks are cut at element " << e
               << ", inside this update of @" << name
               << ", which is not elementwise AdamW; place the layer whole";
      OpBuilder ib(op);
      auto first = cast<train::AdamWOp>(ib.clone(*op));
      first.setBeginAttr(ib.getI64IntegerAttr(begin));
      first.setEndAttr(ib.getI64IntegerAttr(e - s0));
      adamw.setBeginAttr(ib.getI64IntegerAttr(e - s0));
      adamw.setEndAttr(ib.getI64IntegerAttr(end));
    }
  }
  return success();
}

void Rewriter::deferredUpdate(int64_t l, TaskOp task) {
  // The task is where the update runs. Before it: part 0 of the state (and,
  // with resident parameters and a CPU optimizer, of the parameters)
  // brought to the optimizer; the parameters of a load are already there.
  const int p0 = part(l, 0);
  b.setInsertionPoint(task);
  auto stateAndMasters = [&] {
    bring(BlockClass::optimizer, l, toOf(l), side, Priority::demand, p0);
    bind(BlockClass::optimizer, l, side);
    if (tm) {
      bring(BlockClass::master, l, tmOf(l), side, Priority::demand, p0);
      bind(BlockClass::master, l, side);
    }
  };
  // With masters they come first: a fresh params copy is rounded from them.
  if (tm)
    stateAndMasters();
  if (tpOf(l) == Tier::gpu && side != Tier::gpu)
    paramsForUpdate(l, Tier::gpu, p0);
  if (side != Tier::gpu) // on the GPU the load (or the start) bound them
    bind(BlockClass::params, l, side);
  if (!tm)
    stateAndMasters();
  // After it: the state (and masters) back home, and the updated
  // parameters written to their tier, keeping the copy the load goes on
  // with.
  b.setInsertionPointAfter(task);
  sendBack(BlockClass::optimizer, l, side, toOf(l), p0);
  if (tm)
    sendBack(BlockClass::master, l, side, tmOf(l), p0);
  if (tpOf(l) == Tier::gpu) {
    if (side != Tier::gpu) {
      sendBack(BlockClass::params, l, side, Tier::gpu, p0);
      bind(BlockClass::params, l, Tier::gpu);
    }
  } else {
    sendBack(BlockClass::params, l, side, tpOf(l), p0, /*keepSource=*/true);
  }
}

LogicalResult Rewriter::loadParams(ArrayRef<Run> runs) {
  Block &block = it.getBlock();
  if (tp == Tier::gpu) {
    b.setInsertionPointToStart(&block);
    for (size_t l = 0; l < params.size(); ++l)
      if (!params[l].empty())
        bind(BlockClass::params, l, Tier::gpu);
    return success();
  }
  // The owner of each parameter: a layer reading a tied weight needs its
  // owner's block on the GPU.
  llvm::StringMap<int64_t> ownerOf;
  for (size_t l = 0; l < params.size(); ++l)
    for (StringAttr s : params[l])
      ownerOf[s.getValue()] = int64_t(l);
  // A layer's blocks a load brings: its own and those of the tied weights
  // it reads, but for the GPU-resident ones (a params split with layers on
  // the GPU), bound there for the whole iteration.
  auto resident = [&](int64_t owner) { return tpOf(owner) == Tier::gpu; };
  auto blocksOf = [&](int64_t layer) {
    std::vector<int64_t> blocks;
    if (!params[layer].empty() && !resident(layer))
      blocks.push_back(layer);
    for (StringAttr s : reads[layer]) {
      auto found = ownerOf.find(s.getValue());
      if (found != ownerOf.end() && found->second != layer &&
          !resident(found->second) &&
          !llvm::is_contained(blocks, found->second))
        blocks.push_back(found->second);
    }
    return blocks;
  };
  b.setInsertionPointToStart(&block);
  for (size_t l = 0; l < params.size(); ++l)
    if (!params[l].empty() && resident(int64_t(l)))
      bind(BlockClass::params, l, Tier::gpu);
  for (size_t l = 0; l < params.size(); ++l)
    for (StringAttr s : reads[l])
      if (!ownerOf.count(s.getValue()))
        return it.emitOpError("sched-insert-transfers: layer ")
               << l << " reads @" << s.getValue()
               << ", which no layer of train.layers owns";
  // Loads of layers reading no parameters move nothing; dropping them can
  // put two runs of one layer next to each other, which share one load.
  struct Load {
    int64_t layer;
    TaskOp first, last;
  };
  std::vector<int64_t> visited;
  for (const Run &r : runs)
    visited.push_back(r.layer);
  std::vector<schedule::ParameterLoad> layerLoads = schedule::parameterLoads(
      visited, [&](int64_t layer) { return !blocksOf(layer).empty(); });
  SmallVector<Load> loads;
  for (const schedule::ParameterLoad &l : layerLoads)
    loads.push_back(
        {l.layer, runs[l.first].tasks.front(), runs[l.last].tasks.back()});
  if (loads.empty())
    return success();
  // Each block's stays on the GPU: uploaded at the first load of a stay,
  // dropped after its last (one per load without tied weights).
  std::vector<schedule::BlockLoad> stays =
      schedule::blockLoads(layerLoads, blocksOf);
  SmallVector<SmallVector<size_t>> startAt(loads.size()), endAt(loads.size());
  for (auto [i, st] : llvm::enumerate(stays)) {
    startAt[st.first].push_back(i);
    endAt[st.last].push_back(i);
  }
  // Blocks homed on SSD come through host memory; those homed there are
  // uploaded from their home.
  auto onSsd = [&](size_t i) { return tpOf(stays[i].block) == Tier::ssd; };
  SmallVector<Value> fetched(stays.size()), uploaded(stays.size());
  // Per stay: its upload and its GPU binding, where a layer's deferred
  // update goes at its block's first stay.
  SmallVector<Operation *> uploadOp(stays.size()), bindOp(stays.size());
  auto fetch = [&](size_t k, Priority p) {
    if (k < loads.size())
      for (size_t i : startAt[k])
        if (onSsd(i))
          fetched[i] = move(BlockClass::params, stays[i].block, Tier::ssd,
                            Tier::host, p);
  };
  auto upload = [&](size_t k) {
    if (k >= loads.size())
      return;
    for (size_t i : startAt[k]) {
      if (onSsd(i))
        await(fetched[i]);
      uploaded[i] = move(BlockClass::params, stays[i].block, Tier::host,
                         Tier::gpu, Priority::prefetch);
      uploadOp[i] = uploaded[i].getDefiningOp();
    }
  };
  // Two loads in flight: the next one uploading, the one after it (from
  // SSD) being read into pinned host memory.
  b.setInsertionPointToStart(&block);
  fetch(0, Priority::demand);
  fetch(1, Priority::prefetch);
  upload(0);
  for (size_t k = 0; k < loads.size(); ++k) {
    b.setInsertionPoint(loads[k].first);
    for (size_t i : startAt[k]) {
      await(uploaded[i]);
      if (onSsd(i))
        drop(BlockClass::params, stays[i].block, Tier::host);
    }
    for (size_t i : startAt[k])
      bindOp[i] = bind(BlockClass::params, stays[i].block, Tier::gpu);
    upload(k + 1);
    fetch(k + 2, Priority::prefetch);
    b.setInsertionPointAfter(loads[k].last);
    for (size_t i : endAt[k])
      drop(BlockClass::params, stays[i].block, Tier::gpu);
  }
  // A deferred update runs at its layer's first stay, on the copy passing
  // the optimizer: a CPU optimizer's just before it is uploaded (after it
  // came from SSD), a GPU optimizer's once it is bound on the GPU (before
  // the next loads start, which may read this block from SSD again).
  llvm::SmallSet<int64_t, 16> seen;
  for (auto [i, st] : llvm::enumerate(stays)) {
    int64_t l = st.block;
    if (!seen.insert(l).second)
      continue;
    auto found = deferredTask.find(l);
    if (found == deferredTask.end())
      continue;
    TaskOp task = found->second;
    if (side == Tier::gpu)
      task->moveAfter(bindOp[i]);
    else
      task->moveBefore(uploadOp[i]);
    deferredUpdate(l, task);
  }
  for (auto &[l, task] : deferredTask)
    if (!seen.contains(l) && !resident(l))
      return task.emitOpError("sched-insert-transfers: layer ")
             << l << " has a deferred update but no forward or backward task";
  return success();
}

LogicalResult Rewriter::routeGradients(ArrayRef<Run> runs) {
  // Which result of which backward task is a parameter's micro-batch
  // gradient, read off the opt tasks' operands (through the accumulate).
  DenseMap<std::pair<Operation *, StringAttr>, Value> gradOf;
  SmallVector<TaskOp> optTasks;
  for (Operation &op : it.getBlock())
    if (auto t = dyn_cast<TaskOp>(op);
        t && t.getPhase() == Phase::opt && !t.getDeferred())
      optTasks.push_back(t);
  deferredByUpdate.assign(params.size(), {});
  for (TaskOp opt : optTasks) {
    int64_t l = opt.getLayer();
    if (l >= int64_t(params.size()))
      return opt.emitOpError("sched-insert-transfers: layer ")
             << l << " is not in the module's train.layers";
    llvm::SmallSet<StringRef, 8> members;
    for (StringAttr s : params[l])
      members.insert(s.getValue());
    for (Operation &inner : opt.getBlock()) {
      auto update = updateOf(inner);
      if (!update)
        continue;
      Operation *adam = &inner;
      StringAttr sym = update->first.getAttr();
      if (auto d = dyn_cast<train::AdamWDeferOp>(inner)) {
        if (d.getBegin() != 0)
          return d.emitOpError("sched-insert-transfers: a deferred range "
                               "starts at element 0 of its parameter");
        deferredByUpdate[l][sym.getValue()] = int64_t(d.getEnd());
      }
      if (!members.contains(sym.getValue()))
        return adam->emitOpError("sched-insert-transfers: updates @")
               << sym.getValue() << ", which layer " << l << " does not own";
      auto arg = dyn_cast<BlockArgument>(update->second);
      if (!arg || arg.getOwner() != &opt.getBlock())
        return adam->emitOpError("sched-insert-transfers: the gradient must "
                                 "be an operand of the opt task");
      Value v = opt.getInputs()[arg.getArgNumber()];
      SmallVector<Value> parts;
      if (auto acc = v.getDefiningOp<AccumulateOp>()) {
        if (acc.getKind() != AccumulateKind::mean ||
            int64_t(acc.getValues().size()) != microbatches)
          return acc.emitOpError("sched-insert-transfers: expected the mean "
                                 "of ")
                 << microbatches << " micro-batch gradients";
        parts.append(acc.getValues().begin(), acc.getValues().end());
      } else {
        parts.push_back(v);
      }
      for (Value part : parts) {
        auto task = part.getDefiningOp<TaskOp>();
        if (!task || task.getPhase() != Phase::bwd ||
            int64_t(task.getLayer()) != l)
          return adam->emitOpError("sched-insert-transfers: the gradient of @")
                 << sym.getValue()
                 << " must come from layer " << l << "'s backward tasks";
        gradOf[{task.getOperation(), sym}] = part;
      }
      updated[l].push_back(sym);
    }
    // The block's member order, whatever order the updates came in.
    llvm::SmallSet<StringRef, 8> upd;
    for (StringAttr s : updated[l])
      upd.insert(s.getValue());
    updated[l].clear();
    for (StringAttr s : params[l])
      if (upd.contains(s.getValue()))
        updated[l].push_back(s);
  }

  // Backward runs: consecutive backward tasks of one layer.
  struct BwdRun {
    int64_t layer;
    SmallVector<TaskOp> tasks;
  };
  SmallVector<BwdRun> bwdRuns;
  for (const Run &r : runs)
    for (TaskOp t : r.tasks) {
      if (t.getPhase() != Phase::bwd) {
        // A forward task breaks a backward run only between tasks.
        if (!bwdRuns.empty() && bwdRuns.back().tasks.back() != nullptr)
          bwdRuns.back().tasks.push_back(nullptr);
        continue;
      }
      if (bwdRuns.empty() || bwdRuns.back().layer != int64_t(t.getLayer()) ||
          bwdRuns.back().tasks.back() == nullptr)
        bwdRuns.push_back({int64_t(t.getLayer()), {}});
      bwdRuns.back().tasks.push_back(t);
    }
  flushed.assign(params.size(), false);
  lastFlush.assign(params.size(), nullptr);
  completeBefore.assign(params.size(), nullptr);
  SmallVector<Flush> flushes;
  for (BwdRun &r : bwdRuns) {
    while (!r.tasks.empty() && r.tasks.back() == nullptr)
      r.tasks.pop_back();
    int64_t l = r.layer;
    if (updated[l].empty())
      continue;
    SmallVector<Value> grads;
    for (TaskOp t : r.tasks)
      for (StringAttr s : updated[l]) {
        Value g = gradOf.lookup({t.getOperation(), s});
        if (!g)
          return t.emitOpError("sched-insert-transfers: this backward task "
                               "yields no gradient of @")
                 << s.getValue();
        grads.push_back(g);
      }
    SmallVector<Attribute> syms;
    for (StringAttr s : updated[l])
      syms.push_back(FlatSymbolRefAttr::get(s));
    GradMode mode = flushed[l] ? GradMode::add : GradMode::first;
    b.setInsertionPointAfter(r.tasks.back());
    Operation *stage;
    if (tg == Tier::gpu) {
      lastFlush[l] = stage =
          StageGradsOp::create(b, it.getLoc(), BlockClass::gradients, l, mode,
                               grads, b.getArrayAttr(syms), IntegerAttr());
    } else {
      stage = StageGradsOp::create(b, it.getLoc(), BlockClass::gradstage, l,
                                   GradMode::first, grads, b.getArrayAttr(syms),
                                   IntegerAttr());
      await(move(BlockClass::gradstage, l, Tier::gpu, Tier::host,
                 Priority::writeback));
      drop(BlockClass::gradstage, l, Tier::gpu);
      if (tgOf(l) == Tier::ssd && flushed[l])
        await(move(BlockClass::gradients, l, Tier::ssd, Tier::host,
                   Priority::demand));
      lastFlush[l] = AccumulateGradsOp::create(b, it.getLoc(), l, mode,
                                               Tier::host, IntegerAttr());
      drop(BlockClass::gradstage, l, Tier::host);
      if (tgOf(l) == Tier::ssd) {
        await(move(BlockClass::gradients, l, Tier::host, Tier::ssd,
                   Priority::writeback));
        drop(BlockClass::gradients, l, Tier::host);
      }
    }
    Flush f{l, r.tasks.front(), r.tasks.back(), stage, {}};
    for (Block::iterator op = std::next(stage->getIterator());
         op != b.getInsertionPoint(); ++op)
      f.tail.push_back(&*op);
    flushes.push_back(std::move(f));
    flushed[l] = true;
  }
  if (train::gradientsSharded(it->getParentOfType<ModuleOp>()))
    return sinkFlushes(flushes);
  return success();
}

LogicalResult Rewriter::sinkFlushes(ArrayRef<Flush> flushes) {
  // ZeRO stage 2: sched.stage_grads reduce-scatters the layer's gradient
  // over the ranks, and the runtime leaves that exchange running until the
  // block is next touched. What touches it (the gradstage move and the
  // accumulation, the norms, the update) goes after the backward of the
  // next layer that flushes, just before its stage_grads: the exchange
  // overlaps that backward. One layer's exchange is in flight at a time, and
  // a gradstage block still leaves the GPU before the next is staged. Only
  // within one backward sweep: a forward task between two flushes ends it
  // (the horizontal order's micro-batches), and the sweep's last flush
  // stays where it is.
  for (size_t i = 0; i + 1 < flushes.size(); ++i) {
    const Flush &f = flushes[i], &next = flushes[i + 1];
    bool sweep = true;
    for (Operation *op = f.last->getNextNode(); op && op != next.first;
         op = op->getNextNode())
      if (auto t = dyn_cast<TaskOp>(op); t && t.getPhase() == Phase::fwd)
        sweep = false;
    // completeBefore is the layer's last flush's: reset where it stays.
    completeBefore[f.layer] = nullptr;
    if (!sweep)
      continue;
    for (Operation *op : f.tail)
      op->moveBefore(next.stage);
    // The layer's update (placeUpdates builds its transfers around the opt
    // task) follows the tail, where the gradient is complete.
    completeBefore[f.layer] = next.stage;
    for (Operation *op = f.stage->getNextNode(); op && op != next.stage;) {
      Operation *after = op->getNextNode();
      if (auto t = dyn_cast<TaskOp>(op); t && t.getPhase() == Phase::opt &&
                                         !t.getDeferred() &&
                                         int64_t(t.getLayer()) == f.layer) {
        for (Operation *user : t->getUsers())
          if (Operation *at = t->getBlock()->findAncestorOpInBlock(*user);
              at && at->isBeforeInBlock(next.stage))
            return t.emitOpError("sched-insert-transfers: the update of "
                                 "layer ")
                   << f.layer << " is read before the next layer's gradient "
                   << "is staged, where ZeRO stage 2 completes it";
        t->moveBefore(next.stage);
      }
      op = after;
    }
  }
  if (!flushes.empty())
    completeBefore[flushes.back().layer] = nullptr;
  return success();
}

LogicalResult Rewriter::clipFromNorms() {
  // Gradient clipping's norm reads every gradient, which an offload plan
  // keeps in per-layer blocks instead of values: each layer's norms are
  // taken where its last flush leaves its gradient complete (on the GPU, or
  // on host where the flush accumulates; on SSD before the write-back), and
  // the coefficient is computed from them where the norm was.
  SmallVector<train::ClipGradNormOp> clips;
  for (Operation &op : it.getBlock())
    if (auto t = dyn_cast<TaskOp>(op))
      t.getBlock().walk([&](train::ClipGradNormOp c) { clips.push_back(c); });
  if (clips.empty())
    return success();
  train::ClipGradNormOp clip = clips.front();
  if (clips.size() > 1)
    return clips[1].emitOpError("sched-insert-transfers: a second gradient "
                                "norm in one iteration");
  auto task = dyn_cast<TaskOp>(clip->getParentOp());
  if (!task || task.getPhase() != Phase::opt || task.getDeferred())
    return clip.emitOpError("sched-insert-transfers: the gradient norm must "
                            "be in an opt task");
  // Which parameter each gradient the norm reads is: the one whose update
  // reads the same value.
  DenseMap<Value, StringAttr> paramOfGrad;
  for (Operation &op : it.getBlock()) {
    auto t = dyn_cast<TaskOp>(op);
    if (!t || t.getPhase() != Phase::opt || t.getDeferred())
      continue;
    for (Operation &inner : t.getBlock())
      if (auto update = updateOf(inner))
        if (auto arg = dyn_cast<BlockArgument>(update->second);
            arg && arg.getOwner() == &t.getBlock())
          paramOfGrad[t.getInputs()[arg.getArgNumber()]] =
              update->first.getAttr();
  }
  SmallVector<Attribute> syms;
  llvm::SmallSet<StringRef, 16> normed;
  for (Value g : clip.getGrads()) {
    auto arg = dyn_cast<BlockArgument>(g);
    StringAttr sym = arg && arg.getOwner() == &task.getBlock()
                         ? paramOfGrad.lookup(task.getInputs()[arg.getArgNumber()])
                         : StringAttr();
    if (!sym)
      return clip.emitOpError("sched-insert-transfers: the gradient norm "
                              "reads a value that no update reads as its "
                              "gradient");
    normed.insert(sym.getValue());
    syms.push_back(FlatSymbolRefAttr::get(sym));
  }
  // Every updated parameter is in the norm, and the norms of each layer's
  // gradients are taken once it is complete.
  for (auto [l, members] : llvm::enumerate(updated)) {
    for (StringAttr s : members)
      if (!normed.contains(s.getValue()))
        return clip.emitOpError("sched-insert-transfers: the gradient norm "
                                "does not read the gradient of @")
               << s.getValue() << ", which the optimizer updates";
    if (members.empty())
      continue;
    if (!lastFlush[l] || !lastFlush[l]->isBeforeInBlock(task))
      return clip.emitOpError("sched-insert-transfers: the gradient of "
                              "layer ")
             << l << " is complete only after the gradient norm";
    // On the GPU tier the flush is the stage_grads itself: with ZeRO stage
    // 2 the norms wait for its exchange, where the update does.
    if (tg == Tier::gpu && completeBefore[l])
      b.setInsertionPoint(completeBefore[l]);
    else
      b.setInsertionPointAfter(lastFlush[l]);
    GradNormsOp::create(b, it.getLoc(), uint64_t(l),
                        tg == Tier::gpu ? Tier::gpu : Tier::host,
                        uint64_t(microbatches));
  }
  // The coefficient enters the task as an input in place of the norm, and
  // the gradients only the norm read leave it.
  b.setInsertionPoint(task);
  Value coef = sched::ClipGradNormOp::create(b, clip.getLoc(),
                                             clip.getCoef().getType(),
                                      b.getArrayAttr(syms),
                                      clip.getMaxNormAttr());
  Block &body = task.getBlock();
  SmallVector<bool> readBefore;
  for (BlockArgument arg : body.getArguments())
    readBefore.push_back(!arg.use_empty());
  task.getInputsMutable().append(coef);
  clip.getCoef().replaceAllUsesWith(
      body.addArgument(coef.getType(), clip.getLoc()));
  clip.erase();
  for (int i = int(readBefore.size()) - 1; i >= 0; --i)
    if (readBefore[i] && body.getArgument(i).use_empty()) {
      task.getInputsMutable().erase(i);
      body.eraseArgument(i);
    }
  return success();
}

LogicalResult Rewriter::placeUpdates() {
  SmallVector<TaskOp> optTasks;
  for (Operation &op : it.getBlock())
    if (auto t = dyn_cast<TaskOp>(op);
        t && t.getPhase() == Phase::opt && !t.getDeferred())
      optTasks.push_back(t);
  // The updates, where the optimizer runs.
  for (TaskOp opt : optTasks) {
    int64_t l = opt.getLayer();
    if (updated[l].empty())
      continue;
    b.setInsertionPoint(opt);
    if (!flushed[l])
      return opt.emitOpError("sched-insert-transfers: layer ")
             << l << " is updated but has no backward task";
    bring(BlockClass::gradients, l, tgOf(l), side, Priority::demand);
    llvm::SmallSet<unsigned, 8> done; // operands already replaced
    for (Operation &inner : opt.getBlock()) {
      auto update = updateOf(inner);
      if (!update)
        continue;
      auto arg = cast<BlockArgument>(update->second);
      if (!done.insert(arg.getArgNumber()).second)
        continue;
      auto type = cast<RankedTensorType>(update->second.getType());
      Value g = GradientOp::create(b, it.getLoc(), type,
                                   update->first.getValue(), uint64_t(l),
                                   side, uint64_t(microbatches));
      opt->setOperand(arg.getArgNumber(), g);
    }
    // All of it, or part 1 when the rest is deferred; nothing when all is.
    const bool now = deferred[l] < total[l];
    const int p1 = part(l, 1);
    if (now) {
      bring(BlockClass::optimizer, l, toOf(l), side, Priority::demand, p1);
      bind(BlockClass::optimizer, l, side);
      if (tm) {
        bring(BlockClass::master, l, tmOf(l), side, Priority::demand, p1);
        bind(BlockClass::master, l, side);
      }
      paramsForUpdate(l, tpOf(l), p1);
      bind(BlockClass::params, l, side);
    }
    b.setInsertionPointAfter(opt);
    if (now) {
      sendBack(BlockClass::params, l, side, tpOf(l), p1);
      sendBack(BlockClass::optimizer, l, side, toOf(l), p1);
      if (tm)
        sendBack(BlockClass::master, l, side, tmOf(l), p1);
    }
    // The gradient is not written back: only the next iteration's first
    // flush touches it again, and that one overwrites it. (bring already
    // freed the copies in between.)
    if (side != tgOf(l))
      drop(BlockClass::gradients, l, side);
  }
  // The micro-batch means the opt tasks read before are dead now.
  SmallVector<AccumulateOp> accs;
  for (Operation &op : it.getBlock())
    if (auto acc = dyn_cast<AccumulateOp>(op))
      accs.push_back(acc);
  for (AccumulateOp acc : accs)
    if (acc->use_empty())
      acc.erase();
  return success();
}

LogicalResult Rewriter::routeActivations(Tier ta) {
  // The activations off the GPU: fwd task results a bwd task reads, of the
  // layers whose activations are homed on host or SSD (the others stay
  // where the forward left them), numbered in block order (producer, then
  // result number).
  struct Activation {
    Value value;
    Operation *lastForward; // the producer or its last non-bwd reader
    TaskOp firstBackward;
    Tier home;
  };
  SmallVector<Activation> acts;
  for (TaskOp task : it.getBlock().getOps<TaskOp>()) {
    const Tier home =
        placement.homeOf("activations", ta, int64_t(task.getLayer()));
    if (task.getPhase() != Phase::fwd || home == Tier::gpu)
      continue;
    for (OpResult r : task->getResults()) {
      Activation a{r, task, nullptr, home};
      for (Operation *u : r.getUsers()) {
        auto t = dyn_cast<TaskOp>(u);
        if (t && t.getPhase() == Phase::bwd) {
          if (!a.firstBackward || t->isBeforeInBlock(a.firstBackward))
            a.firstBackward = t;
        } else if (a.lastForward->isBeforeInBlock(u)) {
          a.lastForward = u;
        }
      }
      if (!a.firstBackward)
        continue;
      if (a.firstBackward->isBeforeInBlock(a.lastForward))
        return a.lastForward->emitOpError("sched-insert-transfers: reads "
                                          "result #")
               << r.getResultNumber() << " of " << stringifyPhase(Phase::fwd)
               << " layer(" << task.getLayer()
               << ") after a bwd task read it; activations off the GPU must "
                  "be read by the forward before the backward";
      acts.push_back(a);
    }
  }
  if (acts.empty())
    return success();

  // The timeline: each activation's put (after its last forward reader)
  // and its need (before its first backward reader), in block order.
  DenseMap<Operation *, size_t> position;
  for (auto [k, op] : llvm::enumerate(it.getBlock()))
    position[&op] = k;
  struct Action {
    bool put;
    size_t act;
    size_t key; // 2 x position, + 1 after the op
  };
  SmallVector<Action> actions;
  for (auto [i, a] : llvm::enumerate(acts)) {
    actions.push_back({true, i, 2 * position.lookup(a.lastForward) + 1});
    actions.push_back({false, i, 2 * position.lookup(a.firstBackward)});
  }
  llvm::stable_sort(actions, [](const Action &x, const Action &y) {
    return x.key < y.key;
  });

  // Look-ahead within the plan's slots: one activation copy on the GPU at a
  // time (a write-back's source, or a reload's destination), and of the
  // activations homed on SSD two host copies (the cost model's
  // double-buffered staging; those homed on host keep their host copy from
  // put to take). A write-back is awaited, and its copy dropped, only when
  // its slot is needed again or the activation itself is; a reload is
  // issued at the previous need (from SSD, the read two needs ahead) when
  // no put comes in between, so it overlaps the backward tasks before its
  // reader.
  auto onSsd = [&](size_t i) { return acts[i].home == Tier::ssd; };
  struct Pending {
    size_t act;
    Value token;
  };
  std::deque<Pending> gpuLeg, hostLeg; // write-backs gpu -> host, host -> ssd
  SmallVector<Value> readIn(acts.size()), upload(acts.size());
  unsigned reloadHostCopies = 0; // SSD reads not yet uploaded and dropped
  auto finishGpuLeg = [&] {
    Pending p = gpuLeg.front();
    gpuLeg.pop_front();
    await(p.token);
    drop(BlockClass::activations, p.act, Tier::gpu);
    if (onSsd(p.act))
      hostLeg.push_back({p.act, move(BlockClass::activations, p.act,
                                     Tier::host, Tier::ssd,
                                     Priority::writeback)});
  };
  auto finishHostLeg = [&] {
    Pending p = hostLeg.front();
    hostLeg.pop_front();
    await(p.token);
    drop(BlockClass::activations, p.act, Tier::host);
  };
  auto roomOnGpu = [&] {
    while (!gpuLeg.empty())
      finishGpuLeg();
  };
  // Room for one more host copy of `i` (a staging copy when it is homed
  // on SSD).
  auto roomOnHost = [&](size_t i) {
    while (onSsd(i) && !hostLeg.empty() &&
           hostLeg.size() + reloadHostCopies + 1 > 2)
      finishHostLeg();
  };
  // The write-back of `i` complete: it is about to be read back.
  auto written = [&](size_t i) {
    auto has = [&](const std::deque<Pending> &q) {
      return llvm::any_of(q, [&](const Pending &p) { return p.act == i; });
    };
    while (has(gpuLeg))
      finishGpuLeg();
    while (has(hostLeg))
      finishHostLeg();
  };
  auto startRead = [&](size_t i, Priority p) {
    written(i);
    roomOnHost(i);
    readIn[i] = move(BlockClass::activations, i, Tier::ssd, Tier::host, p);
    ++reloadHostCopies;
  };
  auto startUpload = [&](size_t i, Priority p) {
    written(i);
    if (onSsd(i) && !readIn[i])
      startRead(i, p);
    if (onSsd(i))
      await(readIn[i]);
    roomOnGpu();
    upload[i] = move(BlockClass::activations, i, Tier::host, Tier::gpu, p);
  };
  auto needAt = [&](size_t k) -> std::optional<size_t> {
    if (k < actions.size() && !actions[k].put)
      return actions[k].act;
    return std::nullopt;
  };
  Operation *lastPutAnchor = nullptr;
  for (auto [k, action] : llvm::enumerate(actions)) {
    const size_t i = action.act;
    Activation &a = acts[i];
    Location loc = a.value.getLoc();
    if (action.put) {
      // Off the GPU after the forward's last read.
      if (a.lastForward != lastPutAnchor)
        b.setInsertionPointAfter(a.lastForward);
      lastPutAnchor = a.lastForward;
      roomOnGpu();
      PutActivationOp::create(b, loc, a.value, uint64_t(i), IntegerAttr());
      roomOnHost(i);
      gpuLeg.push_back({i, move(BlockClass::activations, i, Tier::gpu,
                                Tier::host, Priority::writeback)});
      continue;
    }
    lastPutAnchor = nullptr;
    // Back before the backward's first read; the bwd tasks read the copy.
    b.setInsertionPoint(a.firstBackward);
    if (!upload[i])
      startUpload(i, Priority::demand);
    await(upload[i]);
    if (onSsd(i)) {
      drop(BlockClass::activations, i, Tier::host);
      --reloadHostCopies;
    }
    auto type = cast<RankedTensorType>(a.value.getType());
    Value back = TakeActivationOp::create(b, loc, type, uint64_t(i));
    drop(BlockClass::activations, i, Tier::gpu);
    drop(BlockClass::activations, i, a.home);
    a.value.replaceUsesWithIf(back, [&](OpOperand &use) {
      auto t = dyn_cast<TaskOp>(use.getOwner());
      return t && t.getPhase() == Phase::bwd;
    });
    // The next needs, when no put comes first: upload the next one, and
    // from SSD read the one after it.
    if (auto next = needAt(k + 1)) {
      startUpload(*next, Priority::prefetch);
      if (auto after = needAt(k + 2); after && onSsd(*after) && !readIn[*after])
        startRead(*after, Priority::prefetch);
    }
  }
  return success();
}

struct SchedInsertTransfersPass
    : sched::impl::SchedInsertTransfersPassBase<SchedInsertTransfersPass> {
  void runOnOperation() override {
    SmallVector<IterationOp> its;
    getOperation().walk([&](IterationOp it) { its.push_back(it); });
    for (IterationOp it : its) {
      Rewriter r(it);
      if (failed(r.run()))
        return signalPassFailure();
      // The members of each layer's blocks, for sched-assign-buffers.
      Builder b(&getContext());
      SmallVector<Attribute> members;
      for (auto &u : r.updated) {
        SmallVector<Attribute> syms;
        for (StringAttr s : u)
          syms.push_back(FlatSymbolRefAttr::get(s));
        members.push_back(b.getArrayAttr(syms));
      }
      it.setUpdatedAttr(b.getArrayAttr(members));
      // How many leading elements of each layer's updated parameters are
      // updated a step late: sched-assign-buffers splits their blocks there.
      if (llvm::any_of(r.deferred, [](int64_t d) { return d > 0; }))
        it.setDeferredAttr(b.getDenseI64ArrayAttr(r.deferred));
    }
  }
};

} // namespace
