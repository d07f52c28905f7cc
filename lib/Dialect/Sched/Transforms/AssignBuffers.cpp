//===- AssignBuffers.cpp - static offsets on every tier --------------------===//
//
// Gives every block a home offset and every move its destination offset,
// computes each tier's peak and the bytes per link per iteration, and checks
// the budgets. The rules are in Passes.td.
//
//===----------------------------------------------------------------------===//

#include "spillway/Dialect/Sched/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "spillway/Dialect/Sched/IR/SchedOps.h"
#include "spillway/Dialect/Train/IR/LayerTable.h"
#include "spillway/Dialect/Train/IR/TrainOps.h"
#include "spillway/runtime/zero_shard.h"
#include "llvm/ADT/DenseMap.h"
#include <array>
#include <map>

namespace spillway::sched {
#define GEN_PASS_DEF_SCHEDASSIGNBUFFERSPASS
#include "spillway/Dialect/Sched/Transforms/Passes.h.inc"
} // namespace spillway::sched

using namespace mlir;
using namespace spillway;
using namespace spillway::sched;

namespace {

// Blocks are indexed by BlockClass; activations (4) and pending (5) are
// laid out apart (assignActivations, the pending homes) and stay empty here.
constexpr int kTiers = 3, kClasses = 7;
constexpr int kMaster = int(BlockClass::master);
static_assert(kMaster == kClasses - 1, "master is the last block class");
constexpr uint64_t kGranule[kTiers] = {256, 4096, 4096}; // gpu, host, ssd
constexpr uint64_t kSsdAlign = 4096;

uint64_t alignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/// Takes the first free slot of a pool (a new one when all are busy).
int takeFreeSlot(std::vector<bool> &slots) {
  int s = 0;
  while (s < int(slots.size()) && slots[s])
    ++s;
  if (s == int(slots.size()))
    slots.push_back(false);
  slots[s] = true;
  return s;
}

struct BlockInfo {
  uint64_t bytes = 0;
  std::optional<Tier> home;
  uint64_t homeOffset = 0;
  /// A block cut between host and SSD (PlacementAttr::cuts): part 0's home,
  /// host, at its own offset; part 1 keeps `home`.
  std::optional<Tier> home0;
  uint64_t home0Offset = 0;
  SmallVector<Attribute> members;
  SmallVector<int64_t> offsets;
  /// A block split by the optimizer overlap: part 0 holds the first `split`
  /// bytes of the members (of m and of v for the optimizer), part 1 the
  /// rest; each part is its own extent, part 1 right after part 0's.
  uint64_t split = 0;
  uint64_t partBytes(int k) const {
    if (!split)
      return bytes;
    uint64_t p0 = span ? 2 * split : split;
    return k == 0 ? p0 : bytes - p0;
  }
  /// An optimizer block's bytes of m (v follows); 0 for the other classes.
  uint64_t span = 0;
  /// All parts, as a mask.
  unsigned allParts() const { return split ? 3u : 1u; }
  /// The room a copy takes on a tier of granule g (parts aligned each).
  uint64_t slotBytes(uint64_t g) const {
    return split ? alignUp(partBytes(0), g) + alignUp(partBytes(1), g)
                 : alignUp(bytes, g);
  }
};

/// True for the ops of activation blocks, which assignActivations lays out.
bool isActivationOp(Operation &op) {
  if (isa<PutActivationOp, TakeActivationOp>(op))
    return true;
  if (auto mv = dyn_cast<MoveOp>(op))
    return mv.getBlockClass() == BlockClass::activations;
  if (auto d = dyn_cast<DropOp>(op))
    return d.getBlockClass() == BlockClass::activations;
  return false;
}

/// Activation blocks (class `activations`, one per index) have no home:
/// every copy, on any tier, takes a slot of that tier's activation pool (as
/// many slots of the largest activation as are ever live at once), laid out
/// from `end` on, which moves past the pools. Gives the puts and moves their
/// offsets, adds the moves' bytes and appends the blocks to `blockAttrs`.
LogicalResult assignActivations(IterationOp it,
                                std::array<uint64_t, kTiers> &end,
                                std::array<uint64_t, 4> &linkRaw,
                                std::array<uint64_t, 4> &linkAligned,
                                SmallVectorImpl<Attribute> &blockAttrs) {
  struct Act {
    RankedTensorType type;
    uint64_t bytes = 0;
    bool taken = false;
  };
  std::map<int64_t, Act> acts;
  std::array<std::vector<bool>, kTiers> busy;
  std::map<std::pair<int64_t, int>, int> slotOf; // (index, tier) -> slot
  struct Pending {
    Operation *op;
    int tier, slot;
  };
  SmallVector<Pending> pending;
  auto acquire = [&](int64_t i, Tier t) {
    int s = takeFreeSlot(busy[int(t)]);
    slotOf[{i, int(t)}] = s;
    return s;
  };
  auto known = [&](Operation &op, int64_t i) -> LogicalResult {
    if (!acts.count(i))
      return op.emitOpError("sched-assign-buffers: activation ")
             << i << " has no sched.put_activation before this";
    return success();
  };
  for (Operation &op : it.getBlock()) {
    if (!isActivationOp(op))
      continue;
    if (auto put = dyn_cast<PutActivationOp>(op)) {
      int64_t i = put.getIndex();
      if (acts.count(i))
        return put.emitOpError("sched-assign-buffers: activation ")
               << i << " is put twice";
      auto type = cast<RankedTensorType>(put.getValue().getType());
      uint64_t bits = type.getElementTypeBitWidth();
      acts[i] = {type, uint64_t(type.getNumElements()) * ((bits + 7) / 8)};
      if (!acts[i].bytes)
        return put.emitOpError("sched-assign-buffers: an empty activation");
      pending.push_back({put, int(Tier::gpu), acquire(i, Tier::gpu)});
    } else if (auto take = dyn_cast<TakeActivationOp>(op)) {
      int64_t i = take.getIndex();
      if (failed(known(op, i)))
        return failure();
      if (!slotOf.count({i, int(Tier::gpu)}))
        return take.emitOpError("sched-assign-buffers: activation ")
               << i << " has no GPU copy here (move it host -> gpu first)";
      if (take.getType() != acts[i].type)
        return take.emitOpError("sched-assign-buffers: activation ")
               << i << " was put as " << acts[i].type << ", not "
               << take.getType();
      acts[i].taken = true;
    } else if (auto mv = dyn_cast<MoveOp>(op)) {
      int64_t i = mv.getLayer();
      if (failed(known(op, i)))
        return failure();
      if (!slotOf.count({i, int(mv.getFrom())}))
        return mv.emitOpError("sched-assign-buffers: activation ")
               << i << " has no copy on " << stringifyTier(mv.getFrom());
      if (slotOf.count({i, int(mv.getTo())}))
        return mv.emitOpError("sched-assign-buffers: activation ")
               << i << " already has a copy on " << stringifyTier(mv.getTo());
      pending.push_back({mv, int(mv.getTo()), acquire(i, mv.getTo())});
      uint64_t n = acts[i].bytes;
      int link = mv.getFrom() == Tier::ssd  ? 0
                 : mv.getTo() == Tier::ssd  ? 1
                 : mv.getTo() == Tier::gpu  ? 2
                                            : 3;
      linkRaw[link] += n;
      linkAligned[link] += link < 2 ? alignUp(n, kSsdAlign) : n;
    } else {
      auto drop = cast<DropOp>(op);
      auto found = slotOf.find({int64_t(drop.getLayer()), int(drop.getTier())});
      if (found == slotOf.end())
        return drop.emitOpError("sched-assign-buffers: activation ")
               << drop.getLayer() << " has no copy on "
               << stringifyTier(drop.getTier()) << " to drop";
      busy[int(drop.getTier())][found->second] = false;
      slotOf.erase(found);
    }
  }
  if (!slotOf.empty())
    return it.emitOpError("sched-assign-buffers: activation ")
           << slotOf.begin()->first.first << " is still on "
           << stringifyTier(Tier(slotOf.begin()->first.second))
           << " at the end of the iteration (a sched.drop is missing)";
  for (auto &[i, a] : acts)
    if (!a.taken)
      return it.emitOpError("sched-assign-buffers: activation ")
             << i << " is put but never taken back";

  Builder b(it.getContext());
  std::array<uint64_t, kTiers> base, slotBytes{};
  for (int t = 0; t < kTiers; ++t) {
    for (auto &[i, a] : acts)
      slotBytes[t] = std::max(slotBytes[t], alignUp(a.bytes, kGranule[t]));
    base[t] = alignUp(end[t], kGranule[t]);
    if (!busy[t].empty())
      end[t] = base[t] + busy[t].size() * slotBytes[t];
  }
  for (const Pending &p : pending)
    p.op->setAttr("at", b.getI64IntegerAttr(int64_t(
                            base[p.tier] + uint64_t(p.slot) * slotBytes[p.tier])));
  for (auto &[i, a] : acts)
    blockAttrs.push_back(b.getDictionaryAttr(
        {b.getNamedAttr("class", b.getStringAttr("activations")),
         b.getNamedAttr("layer", b.getI64IntegerAttr(i)),
         b.getNamedAttr("bytes", b.getI64IntegerAttr(int64_t(a.bytes))),
         b.getNamedAttr("members", b.getArrayAttr({})),
         b.getNamedAttr("offsets", b.getDenseI64ArrayAttr({}))}));
  return success();
}

struct SchedAssignBuffersPass
    : sched::impl::SchedAssignBuffersPassBase<SchedAssignBuffersPass> {
  using SchedAssignBuffersPassBase::SchedAssignBuffersPassBase;
  SchedAssignBuffersPass(const SchedAssignBuffersPassOptions &options,
                         OverBudgetHandler onOverBudget)
      : SchedAssignBuffersPassBase(options),
        onOverBudget(std::move(onOverBudget)) {}
  void runOnOperation() override;
  /// Told the smallest budget that fits when a tier's arena outgrows it.
  OverBudgetHandler onOverBudget;
  LogicalResult assign(IterationOp it);
};

LogicalResult SchedAssignBuffersPass::assign(IterationOp it) {
  ModuleOp module = getOperation();
  PlacementAttr placement = it.getPlacementAttr();
  ArrayAttr updatedAttr = it.getUpdatedAttr();
  auto layers = train::LayerTable::read(module);
  if (failed(layers))
    return failure();
  if (!placement || !updatedAttr || !*layers)
    return it.emitOpError("sched-assign-buffers: run sched-place and "
                          "sched-insert-transfers first");
  // bf16-mixed: the params blocks hold the bf16 working copies (2 bytes per
  // element) and the master blocks the f32 masters, laid out as the params
  // blocks of an fp32 plan.
  std::optional<Tier> masterHome;
  if (auto m = it.getMaster())
    masterHome = symbolizeTier(*m);
  const Tier homes[kClasses] = {placement.getParams(),
                                placement.getOptimizer(),
                                placement.getGradients(),
                                Tier::gpu,
                                Tier::gpu,
                                Tier::gpu,
                                masterHome.value_or(Tier::gpu)};
  auto bytesOf = [&](Attribute sym) -> uint64_t {
    auto p = module.lookupSymbol<train::ParamOp>(
        cast<FlatSymbolRefAttr>(sym).getAttr());
    return p ? uint64_t(p.getNumBytes()) : 0;
  };

  // Each moment's element: 4 bytes (f32), or 2 under bf16 optimizer state
  // (train.optimizer_state_dtype), which halves the optimizer blocks.
  const uint64_t stateBytes =
      uint64_t(train::optimizerStateElementBytes(module));
  // ZeRO over N ranks (train.optimizer_state_shards): each rank's block
  // holds its shard of every moment, in a slot of the largest rank's shard.
  const int64_t shards = train::optimizerStateShards(module);
  auto slot = [&](int64_t elements) {
    return stateBytes *
           uint64_t(train::optimizerStateSlotElements(module, elements));
  };
  // ZeRO (shards > 1): a member's elements per moment (AdamW keeps one per
  // parameter element; FOAM is not sharded), and of its master.
  auto momentElems = [&](Attribute m) -> int64_t {
    auto p = module.lookupSymbol<train::ParamOp>(
        cast<FlatSymbolRefAttr>(m).getAttr());
    return p ? p.getType().getNumElements() : 0;
  };
  auto totalElements = [&](const BlockInfo &ob) {
    uint64_t n = 0;
    for (Attribute m : ob.members)
      n += uint64_t(momentElems(m));
    return n;
  };
  // A block sharded over the ranks whose first `deferred` elements are
  // deferred (0: none): spw_zero_sharded_layout, `elem` bytes per element
  // (the cost model sizes it alike). An optimizer block holds m then v in
  // such a layout each; a master block one.
  auto layOutShards = [&](BlockInfo &b, int64_t deferred, uint64_t elem) {
    SmallVector<int64_t> n, offsets(b.members.size());
    for (Attribute m : b.members)
      n.push_back(momentElems(m));
    int64_t split = 0;
    const int64_t span = spw_zero_sharded_layout(
        n.data(), int64_t(n.size()), shards,
        train::optimizerStateShardAlign(module), deferred, int64_t(elem),
        int64_t(kGranule[int(Tier::gpu)]), offsets.data(), &split);
    b.offsets.assign(offsets.begin(), offsets.end());
    b.split = uint64_t(split);
    return uint64_t(span);
  };
  auto splitShardedOptimizer = [&](BlockInfo &ob, int64_t deferred) {
    ob.span = layOutShards(ob, deferred, stateBytes);
    ob.bytes = 2 * ob.span;
  };
  // bf16-mixed masters sharded like the state: each rank's master block
  // holds its shard of every member's f32 values.
  auto shardMaster = [&](BlockInfo &mb, int64_t deferred) {
    mb.bytes = layOutShards(mb, deferred, 4);
  };

  const bool gradShards = train::gradientsSharded(module);

  llvm::StringMap<uint64_t> momentBytes; // per updated parameter
  module.walk([&](Operation *u) {
    if (train::isOptimizerUpdate(u))
      momentBytes[train::getUpdatedParam(u)] =
          slot(train::stateElementsPerMoment(u));
  });

  // Blocks: (class, layer) -> size, members and member offsets.
  size_t numLayers = (*layers)->size();
  std::vector<std::array<BlockInfo, kClasses>> blocks(numLayers);
  if (updatedAttr.size() != numLayers)
    return it.emitOpError("sched-assign-buffers: 'updated' lists ")
           << updatedAttr.size() << " layers, train.layers " << numLayers;
  for (size_t l = 0; l < numLayers; ++l) {
    ArrayRef<FlatSymbolRefAttr> list = (**layers)[l].getParams();
    auto upd = cast<ArrayAttr>(updatedAttr[l]);
    BlockInfo &pb = blocks[l][int(BlockClass::params)];
    for (FlatSymbolRefAttr s : list) {
      pb.members.push_back(s);
      pb.offsets.push_back(pb.bytes);
      pb.bytes += bytesOf(s);
    }
    if (masterHome) {
      blocks[l][kMaster] = pb;
      if (shards > 1)
        shardMaster(blocks[l][kMaster], 0);
      for (int64_t &o : pb.offsets)
        o /= 2;
      pb.bytes /= 2;
    }
    BlockInfo &gb = blocks[l][int(BlockClass::gradients)];
    for (Attribute s : upd) {
      gb.members.push_back(s);
      gb.offsets.push_back(gb.bytes);
      gb.bytes += bytesOf(s);
    }
    // ZeRO stage 2 (train::gradientsSharded): each rank's gradient blocks
    // hold its shard of every member's f32 gradient, laid out as a master
    // block (the runtime reduce-scatters as it stages them).
    if (gradShards)
      gb.bytes = layOutShards(gb, 0, 4);
    BlockInfo &sb = blocks[l][int(BlockClass::gradstage)];
    sb = gb;
    // The optimizer's m of every member, then their v (f32 or bf16; FOAM's
    // folded).
    BlockInfo &ob = blocks[l][int(BlockClass::optimizer)];
    for (Attribute s : upd) {
      auto m = momentBytes.find(cast<FlatSymbolRefAttr>(s).getValue());
      ob.members.push_back(s);
      ob.offsets.push_back(ob.span);
      ob.span +=
          m != momentBytes.end() ? m->second : slot(int64_t(bytesOf(s) / 4));
    }
    ob.bytes = 2 * ob.span;
  }

  // The optimizer overlap's split: the deferred elements lead the updated
  // members (sched-insert-transfers checked), which are all of the layer's
  // parameters, so params, master and optimizer blocks split at the same
  // element: at its bytes in each (params: 4 per element, 2 with masters;
  // master: 4; optimizer: stateBytes per moment element, AdamW's state
  // being one element per parameter element).
  const uint64_t paramsBytes = masterHome ? 2 : 4;
  if (auto d = it.getDeferredAttr()) {
    if (d.size() != int64_t(numLayers))
      return it.emitOpError("sched-assign-buffers: 'deferred' lists ")
             << d.size() << " layers, train.layers " << numLayers;
    for (size_t l = 0; l < numLayers; ++l) {
      BlockInfo &pb = blocks[l][int(BlockClass::params)];
      BlockInfo &ob = blocks[l][int(BlockClass::optimizer)];
      int64_t left = d[l];
      uint64_t elements = 0;
      for (Attribute m : ob.members) {
        auto p = module.lookupSymbol<train::ParamOp>(
            cast<FlatSymbolRefAttr>(m).getAttr());
        if (!p || left <= 0)
          break;
        int64_t take = std::min(left, p.getType().getNumElements());
        elements += uint64_t(take);
        left -= take;
      }
      if (d[l] < 0)
        return it.emitOpError("sched-assign-buffers: layer ")
               << l << " defers a negative number of elements (" << d[l]
               << ")";
      if (left > 0)
        return it.emitOpError("sched-assign-buffers: layer ")
               << l << " defers " << d[l] << " elements, more than it has";
      const uint64_t split = elements * stateBytes;
      if (split != 0 && shards > 1 && elements != totalElements(ob)) {
        if (pb.members != ob.members)
          return it.emitOpError("sched-assign-buffers: layer ")
                 << l << " splits its optimizer block but not its parameters "
                 << "(parameters the optimizer does not update)";
        // Sharded over ranks: the deferral cuts each rank's shard of the
        // member it ends in, so that member's slot is two (its deferred
        // elements', then the rest's), the first padded so part 0 ends on
        // the GPU granule; the params block splits at the global element.
        splitShardedOptimizer(ob, d[l]);
        if (masterHome)
          shardMaster(blocks[l][kMaster], d[l]);
        pb.split = elements * paramsBytes;
        if (pb.split % kGranule[int(Tier::gpu)])
          return it.emitOpError("sched-assign-buffers: layer ")
                 << l << " defers " << pb.split << " bytes, not a multiple of "
                 << kGranule[int(Tier::gpu)];
        continue;
      }
      if (split == 0 || split == ob.span ||
          (shards > 1 && elements == totalElements(ob)))
        continue; // nothing deferred, or all: one part
      if (pb.bytes / paramsBytes != ob.span / stateBytes)
        return it.emitOpError("sched-assign-buffers: layer ")
               << l << " splits its optimizer block but not its parameters "
               << "(parameters the optimizer does not update)";
      // Every part must start aligned in the GPU arena: the narrowest
      // block's split (2 bytes per element: bf16 working copies or bf16
      // moments) decides; the master's (4 per element) is a multiple.
      const uint64_t paramsSplit = elements * paramsBytes;
      const uint64_t g = kGranule[int(Tier::gpu)];
      if (paramsSplit % g || split % g)
        return it.emitOpError("sched-assign-buffers: layer ")
               << l << " defers " << (paramsSplit % g ? paramsSplit : split)
               << (paramsSplit % g
                       ? (masterHome ? " bytes of bf16 parameters" : " bytes")
                       : " bytes of each bf16 optimizer moment")
               << ", not a multiple of " << g
               << " (sched-overlap-optimizer's granule must keep the parts "
               << "aligned in the GPU arena)";
      ob.split = split;
      pb.split = paramsSplit;
      if (masterHome)
        blocks[l][kMaster].split = elements * 4;
    }
  }

  // Blocks cut between host and SSD: the layer's params, master and
  // optimizer blocks split at the cut's element as the overlap splits them
  // (where the overlap splits a layer too, at the same element), part 0 of
  // each cut class homed on host.
  if (DictionaryAttr cuts = placement.getCuts())
    for (NamedAttribute entry : cuts)
      if (auto v = dyn_cast<DenseI64ArrayAttr>(entry.getValue());
          v && v.size() >= 2 && v[v.size() - 2] >= int64_t(numLayers))
        return it.emitOpError("sched-assign-buffers: the placement cuts ")
               << entry.getName().getValue() << " of layer " << v[v.size() - 2]
               << ", train.layers has " << numLayers;
  for (size_t l = 0; l < numLayers; ++l) {
    const int64_t e = placement.layerCut(int64_t(l));
    if (!e)
      continue;
    BlockInfo &pb = blocks[l][int(BlockClass::params)];
    BlockInfo &ob = blocks[l][int(BlockClass::optimizer)];
    auto error = [&]() {
      return it.emitOpError("sched-assign-buffers: layer ")
             << l << " is cut at element " << e << " ";
    };
    if (shards > 1)
      return error() << "but its optimizer state is sharded over " << shards
                     << " ranks (ZeRO): place the layer whole";
    if (pb.bytes / paramsBytes != ob.span / stateBytes)
      return error() << "but the optimizer does not update all of its "
                        "parameters: place the layer whole";
    if (uint64_t(e) >= ob.span / stateBytes)
      return error() << "but it has " << ob.span / stateBytes << " elements";
    if (ob.split && ob.split != uint64_t(e) * stateBytes)
      return error() << "but the optimizer overlap splits it at element "
                     << ob.split / stateBytes;
    // Every part starts aligned in the GPU arena, cut or not: each block's
    // split (each moment's, for the optimizer) is a multiple of 256 bytes.
    const uint64_t g = kGranule[int(Tier::gpu)];
    for (uint64_t elem : {paramsBytes, stateBytes, uint64_t(4)})
      if (uint64_t(e) * elem % g)
        return error() << "and " << uint64_t(e) * elem << " bytes of "
                       << (elem == paramsBytes  ? "its parameters"
                           : elem == stateBytes ? "each optimizer moment"
                                                : "its master weights")
                       << " are not a multiple of " << g
                       << " (cut on the overlap's granule, as sched-place "
                          "rounds a cut)";
    ob.split = uint64_t(e) * stateBytes;
    pb.split = uint64_t(e) * paramsBytes;
    if (masterHome)
      blocks[l][kMaster].split = uint64_t(e) * 4;
    for (int c : {0, 1, kMaster}) {
      BlockInfo &bi = blocks[l][c];
      if (!bi.bytes ||
          !placement.cutOf(stringifyBlockClass(BlockClass(c)), int64_t(l)))
        continue;
      bi.home0 = Tier::host;
    }
  }

  // Homes, packed per tier in layer order: params, optimizer, gradients,
  // master.
  for (StringRef cls : {"params", "optimizer", "gradients", "master"})
    if (size_t n = placement.layerTiers(cls).size(); n && n != numLayers)
      return it.emitOpError("sched-assign-buffers: the placement splits ")
             << cls << " over " << n << " layers, train.layers has "
             << numLayers;
  std::array<uint64_t, kTiers> cursor{};
  for (size_t l = 0; l < numLayers; ++l)
    for (int c : {0, 1, 2, kMaster}) {
      BlockInfo &bi = blocks[l][c];
      if (!bi.bytes)
        continue;
      // A class split by layer (PlacementAttr::layers) homes each layer's
      // block apart.
      const Tier home = placement.homeOf(
          c == kMaster ? "master" : stringifyBlockClass(BlockClass(c)),
          homes[c], int64_t(l));
      int t = int(home);
      bi.home = home;
      bi.homeOffset = alignUp(cursor[t], kGranule[t]);
      // A cut block's SSD extent keeps part 0's room unused: its copies on
      // every tier start with part 0.
      cursor[t] = bi.homeOffset + bi.slotBytes(kGranule[t]);
      if (bi.home0) {
        int t0 = int(*bi.home0);
        bi.home0Offset = alignUp(cursor[t0], kGranule[t0]);
        cursor[t0] = bi.home0Offset + alignUp(bi.partBytes(0), kGranule[t0]);
      }
    }
  std::array<uint64_t, kTiers> homeBytes;
  for (int t = 0; t < kTiers; ++t)
    homeBytes[t] = alignUp(cursor[t], kGranule[t]);

  // Pools: walk the block; copies away from home take a slot.
  std::array<std::array<uint64_t, kClasses>, kTiers> slotBytes{};
  for (size_t l = 0; l < numLayers; ++l)
    for (int c = 0; c < kClasses; ++c)
      for (int t = 0; t < kTiers; ++t)
        slotBytes[t][c] = std::max(slotBytes[t][c],
                                   blocks[l][c].slotBytes(kGranule[t]));
  std::array<std::array<std::vector<bool>, kClasses>, kTiers> busy;
  std::map<std::tuple<int, int64_t, int>, int> slotOf; // (class, layer, tier)
  // The parts of each copy away from home (a mask): the slot is free when
  // the last one is dropped.
  std::map<std::tuple<int, int64_t, int>, unsigned> partsOf;
  struct Pending {
    Operation *op;
    int tier, cls, slot;
  };
  SmallVector<Pending> pending;
  auto key = [](BlockClass c, int64_t l, Tier t) {
    return std::make_tuple(int(c), l, int(t));
  };
  // A cut block's part 0 at its own home (BlockInfo::home0).
  constexpr int kPartZeroHome = -2;
  // Returns the slot (or -1 for the home) of a new copy of (c, l) on t.
  auto acquire = [&](Operation *op, BlockClass c, int64_t l,
                     Tier t) -> FailureOr<int> {
    // Every op that claims a copy (move, stage_grads, accumulate_grads)
    // names its layer: one outside the table is an error, not a read past it.
    if (l < 0 || l >= int64_t(numLayers))
      return op->emitOpError("sched-assign-buffers: no layer ") << l;
    const BlockInfo &bi = blocks[l][int(c)];
    if (bi.home == t)
      return -1;
    auto k = key(c, l, t);
    if (auto found = slotOf.find(k); found != slotOf.end())
      return found->second;
    int s = takeFreeSlot(busy[int(t)][int(c)]);
    slotOf[k] = s;
    return s;
  };
  // A copy of (part `part` of) block (c, l) on t, a move's destination or
  // an alloc: its slot (-1: the home), the parts noted; the op gets `at`.
  auto claim = [&](Operation *op, BlockClass c, int64_t l,
                   std::optional<uint64_t> part, Tier t) -> FailureOr<int> {
    if (l >= int64_t(numLayers))
      return op->emitOpError("sched-assign-buffers: no layer ") << l;
    const BlockInfo &bi = blocks[l][int(c)];
    if (part && !bi.split)
      return op->emitOpError("sched-assign-buffers: part ")
             << *part << " of a block that is not split";
    // A cut block's part 0 has its own home: a copy there is that home.
    if (bi.home0 && *bi.home0 == t) {
      if (!part)
        return op->emitOpError("sched-assign-buffers: a copy of all of the ")
               << stringifyBlockClass(c) << " block of layer " << l << " on "
               << stringifyTier(t)
               << ", where its part 0 lives (the block is cut): name part 1";
      if (*part == 0) {
        pending.push_back({op, int(t), int(c), kPartZeroHome});
        return kPartZeroHome;
      }
    }
    auto s = acquire(op, c, l, t);
    if (failed(s))
      return failure();
    if (*s >= 0)
      partsOf[key(c, l, t)] |= part ? 1u << *part : bi.allParts();
    pending.push_back({op, int(t), int(c), *s});
    return *s;
  };
  std::array<uint64_t, 4> linkRaw{}, linkAligned{}; // ssd_read, ssd_write, h2d, d2h
  for (Operation &op : it.getBlock()) {
    if (isActivationOp(op))
      continue; // assignActivations
    if (auto mv = dyn_cast<MoveOp>(op)) {
      int64_t l = mv.getLayer();
      auto part = mv.getPart();
      if (failed(claim(mv, mv.getBlockClass(), l, part, mv.getTo())))
        return failure();
      const BlockInfo &bi = blocks[l][int(mv.getBlockClass())];
      int link = mv.getFrom() == Tier::ssd  ? 0
                 : mv.getTo() == Tier::ssd  ? 1
                 : mv.getTo() == Tier::gpu  ? 2
                                            : 3;
      // Each part is its own extent, moved (and O_DIRECT-aligned) alone.
      for (int k = 0; k < (bi.split ? 2 : 1); ++k) {
        if (part && int(*part) != k)
          continue;
        uint64_t n = bi.partBytes(k);
        linkRaw[link] += n;
        linkAligned[link] += link < 2 ? alignUp(n, kSsdAlign) : n;
      }
    } else if (auto al = dyn_cast<AllocOp>(op)) {
      // A copy like a move's destination, which moves no byte.
      auto s = claim(al, al.getBlockClass(), al.getLayer(), al.getPart(),
                     al.getTier());
      if (failed(s))
        return failure();
      if (*s < 0)
        return al.emitOpError("sched-assign-buffers: allocates a copy on "
                              "the block's home tier, which has one");
    } else if (auto st = dyn_cast<StageGradsOp>(op)) {
      auto s = acquire(st, st.getInto(), st.getLayer(), Tier::gpu);
      if (failed(s))
        return failure();
      if (*s >= 0)
        partsOf[key(st.getInto(), st.getLayer(), Tier::gpu)] = 1;
      pending.push_back({st, int(Tier::gpu), int(st.getInto()), *s});
    } else if (auto acc = dyn_cast<AccumulateGradsOp>(op)) {
      auto s = acquire(acc, BlockClass::gradients, acc.getLayer(),
                       acc.getTier());
      if (failed(s))
        return failure();
      if (*s >= 0)
        partsOf[key(BlockClass::gradients, acc.getLayer(), acc.getTier())] = 1;
      pending.push_back(
          {acc, int(acc.getTier()), int(BlockClass::gradients), *s});
    } else if (auto drop = dyn_cast<DropOp>(op)) {
      auto k = key(drop.getBlockClass(), drop.getLayer(), drop.getTier());
      auto found = slotOf.find(k);
      if (found == slotOf.end())
        continue; // a home copy stays
      if (auto part = drop.getPart()) {
        unsigned &mask = partsOf[k];
        mask &= ~(1u << *part);
        if (mask)
          continue; // the other part is still there
      }
      partsOf.erase(k);
      busy[int(drop.getTier())][int(drop.getBlockClass())][found->second] =
          false;
      slotOf.erase(found);
    }
  }
  if (!slotOf.empty()) {
    auto [c, l, t] = slotOf.begin()->first;
    return it.emitOpError("sched-assign-buffers: the ")
           << stringifyBlockClass(BlockClass(c)) << " block of layer " << l
           << " is still on " << stringifyTier(Tier(t))
           << " at the end of the iteration (a sched.drop is missing)";
  }

  // Pool bases follow the homes, class by class.
  std::array<std::array<uint64_t, kClasses>, kTiers> poolBase{};
  std::array<uint64_t, kTiers> peak = homeBytes;
  for (int t = 0; t < kTiers; ++t)
    for (int c = 0; c < kClasses; ++c) {
      poolBase[t][c] = peak[t];
      peak[t] += busy[t][c].size() * slotBytes[t][c];
    }
  Builder b(&getContext());
  for (const Pending &p : pending) {
    uint64_t at;
    if (p.slot < 0) {
      // The home copy: find which block from the op.
      int64_t l = 0;
      if (auto mv = dyn_cast<MoveOp>(p.op))
        l = mv.getLayer();
      else if (auto al = dyn_cast<AllocOp>(p.op))
        l = al.getLayer();
      else if (auto st = dyn_cast<StageGradsOp>(p.op))
        l = st.getLayer();
      else
        l = cast<AccumulateGradsOp>(p.op).getLayer();
      at = p.slot == kPartZeroHome ? blocks[l][p.cls].home0Offset
                                   : blocks[l][p.cls].homeOffset;
    } else {
      at = poolBase[p.tier][p.cls] + uint64_t(p.slot) * slotBytes[p.tier][p.cls];
    }
    p.op->setAttr("at", b.getI64IntegerAttr(int64_t(at)));
  }
  SmallVector<Attribute> activationBlocks;
  if (failed(assignActivations(it, peak, linkRaw, linkAligned,
                               activationBlocks)))
    return failure();

  // The gradient slices of the deferred updates: the runtime keeps each
  // from the update after the backward to the deferred task of the next
  // step, where the optimizer runs (GPU optimizer: the GPU arena, CPU: the
  // host arena). One home per layer with deferred elements, after the
  // pools, members packed in block order (each its leading deferred
  // elements, 4 bytes each); it never moves.
  SmallVector<Attribute> pendingBlocks;
  if (auto d = it.getDeferredAttr()) {
    auto side = it.getOptimizerOnAttr();
    const Tier t = side && side.getValue() == "gpu" ? Tier::gpu : Tier::host;
    for (size_t l = 0; l < numLayers; ++l) {
      int64_t left = d[l];
      SmallVector<Attribute> members;
      SmallVector<int64_t> offsets;
      uint64_t bytes = 0;
      for (Attribute m : cast<ArrayAttr>(updatedAttr[l])) {
        auto p = module.lookupSymbol<train::ParamOp>(
            cast<FlatSymbolRefAttr>(m).getAttr());
        if (!p || left <= 0)
          break;
        const int64_t take = std::min(left, p.getType().getNumElements());
        members.push_back(m);
        offsets.push_back(int64_t(bytes));
        bytes += 4 * uint64_t(take);
        left -= take;
      }
      if (!bytes)
        continue;
      const uint64_t at = alignUp(peak[int(t)], kGranule[int(t)]);
      peak[int(t)] = at + alignUp(bytes, kGranule[int(t)]);
      pendingBlocks.push_back(b.getDictionaryAttr(
          {b.getNamedAttr("class", b.getStringAttr("pending")),
           b.getNamedAttr("layer", b.getI64IntegerAttr(int64_t(l))),
           b.getNamedAttr("bytes", b.getI64IntegerAttr(int64_t(bytes))),
           b.getNamedAttr("members", b.getArrayAttr(members)),
           b.getNamedAttr("offsets", b.getDenseI64ArrayAttr(offsets)),
           b.getNamedAttr("home", b.getStringAttr(stringifyTier(t))),
           b.getNamedAttr("offset", b.getI64IntegerAttr(int64_t(at)))}));
    }
  }

  // Budgets.
  const uint64_t budgets[kTiers] = {gpuMem, hostMem, ssdBytes};
  const char *flags[kTiers] = {"--gpu-mem", "--host-mem", "SSD budget"};
  for (int t = 0; t < kTiers; ++t)
    if (budgets[t] && peak[t] > budgets[t]) {
      if (onOverBudget)
        onOverBudget({schedule::Tier(t), peak[t], budgets[t]});
      return it.emitOpError("plan over budget: the ")
             << stringifyTier(Tier(t)) << " tier needs " << peak[t]
             << " bytes for this placement but the budget is " << budgets[t]
             << "; the smallest " << flags[t] << " that fits is " << peak[t]
             << " bytes (homes of the classes placed there plus the "
                "transfer slots: place fewer classes on "
             << stringifyTier(Tier(t)) << ", or use fewer parameters per layer)";
    }

  // The device memory left to the executor's step tensors.
  const uint64_t gpuBudget = gpuMem ? uint64_t(gpuMem) : uint64_t(deviceMem);
  if (!gpuMem && deviceMem && peak[0] > deviceMem)
    return it.emitOpError("plan over budget: the gpu tier needs ")
           << peak[0] << " bytes for this placement but the device has "
           << uint64_t(deviceMem) << " (the hardware profile's "
           << "gpu.memory_bytes): place fewer classes on the GPU";

  // The plan, for the lowering and the report.
  SmallVector<Attribute> blockAttrs;
  for (size_t l = 0; l < numLayers; ++l)
    for (int c = 0; c < kClasses; ++c) {
      const BlockInfo &bi = blocks[l][c];
      if (!bi.bytes)
        continue;
      SmallVector<NamedAttribute> e = {
          b.getNamedAttr("class", b.getStringAttr(stringifyBlockClass(
                                      BlockClass(c)))),
          b.getNamedAttr("layer", b.getI64IntegerAttr(int64_t(l))),
          b.getNamedAttr("bytes", b.getI64IntegerAttr(int64_t(bi.bytes))),
          b.getNamedAttr("members", b.getArrayAttr(bi.members)),
          b.getNamedAttr("offsets", b.getDenseI64ArrayAttr(bi.offsets))};
      if (bi.split)
        e.push_back(
            b.getNamedAttr("split", b.getI64IntegerAttr(int64_t(bi.split))));
      if (bi.home) {
        e.push_back(b.getNamedAttr("home",
                                   b.getStringAttr(stringifyTier(*bi.home))));
        e.push_back(b.getNamedAttr(
            "offset", b.getI64IntegerAttr(int64_t(bi.homeOffset))));
      }
      if (bi.home0) {
        e.push_back(
            b.getNamedAttr("home0", b.getStringAttr(stringifyTier(*bi.home0))));
        e.push_back(b.getNamedAttr(
            "offset0", b.getI64IntegerAttr(int64_t(bi.home0Offset))));
      }
      blockAttrs.push_back(b.getDictionaryAttr(e));
    }
  blockAttrs.append(activationBlocks);
  blockAttrs.append(pendingBlocks);
  auto links = [&](const std::array<uint64_t, 4> &v) {
    return b.getDictionaryAttr(
        {b.getNamedAttr("ssd_read", b.getI64IntegerAttr(int64_t(v[0]))),
         b.getNamedAttr("ssd_write", b.getI64IntegerAttr(int64_t(v[1]))),
         b.getNamedAttr("h2d", b.getI64IntegerAttr(int64_t(v[2]))),
         b.getNamedAttr("d2h", b.getI64IntegerAttr(int64_t(v[3])))});
  };
  module->setAttr(
      "sched.buffers",
      b.getDictionaryAttr(
          {b.getNamedAttr("gpu_bytes", b.getI64IntegerAttr(int64_t(peak[0]))),
           b.getNamedAttr("host_bytes", b.getI64IntegerAttr(int64_t(peak[1]))),
           b.getNamedAttr("ssd_bytes", b.getI64IntegerAttr(int64_t(peak[2]))),
           b.getNamedAttr("bytes_per_iteration", links(linkAligned)),
           b.getNamedAttr("model_bytes", links(linkRaw)),
           b.getNamedAttr("blocks", b.getArrayAttr(blockAttrs))}));
  if (gpuBudget) {
    auto buffers = module->getAttrOfType<DictionaryAttr>("sched.buffers");
    NamedAttrList entries(buffers);
    entries.set("step_arena_bytes",
                b.getI64IntegerAttr(int64_t(gpuBudget - peak[0])));
    module->setAttr("sched.buffers", entries.getDictionary(&getContext()));
  }
  return success();
}

void SchedAssignBuffersPass::runOnOperation() {
  SmallVector<IterationOp> its;
  getOperation().walk([&](IterationOp it) { its.push_back(it); });
  if (its.size() != 1) {
    getOperation().emitError("sched-assign-buffers: expected one "
                             "sched.iteration, found ")
        << its.size();
    return signalPassFailure();
  }
  if (failed(assign(its.front())))
    signalPassFailure();
}

} // namespace

std::unique_ptr<Pass> spillway::sched::createSchedAssignBuffersPass(
    const SchedAssignBuffersPassOptions &options,
    OverBudgetHandler onOverBudget) {
  return std::make_unique<SchedAssignBuffersPass>(options,
                                                  std::move(onOverBudget));
}
