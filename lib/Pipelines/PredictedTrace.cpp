//===- PredictedTrace.cpp - the plan's iteration as the model sees it -----===//
//
// A walk over the iteration's ops in order, as the executable's compute
// thread issues them: tasks take the compute lane for their FLOPs at the
// profile's rate; a move takes its link from when it is issued, or the
// link's previous move ends, or (a host copy the CPU optimizer updates) the
// update ends, for its bytes at the link's rate; an await holds the compute
// lane until its moves end; a CPU optimizer's update runs on its own lane
// beside the compute. docs/cost-model.md, "The predicted trace".
//
//===----------------------------------------------------------------------===//

#include "spillway/Pipelines/PredictedTrace.h"

#include "spillway/Dialect/Sched/IR/SchedOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <map>

using namespace mlir;
using namespace spillway;
using namespace spillway::sched;

namespace {

// The executable's trace lanes (runtime/src/trace.cpp): thread ids and
// names.
enum Lane {
  kCompute = 1,
  kH2D = 2,
  kD2H = 3,
  kSsdRead = 4,
  kSsdWrite = 5,
  kCpuOptimizer = 10
};

struct Span {
  int lane;
  std::string name;
  double begin, end; // seconds
  std::string block;
  uint64_t bytes = 0;
};

struct BlockBytes {
  uint64_t bytes = 0, split = 0;
  bool optimizer = false;
  /// Part k's bytes (-1: the whole block). An optimizer block's split is
  /// per moment: part 0 holds its m and v.
  uint64_t part(int k) const {
    if (k < 0 || !split)
      return bytes;
    const uint64_t first = optimizer ? 2 * split : split;
    return k == 0 ? first : bytes - first;
  }
};

} // namespace

std::optional<PredictedTrace> spillway::predictTrace(
    ModuleOp scheduled, const schedule::IterationSummary &summary,
    const schedule::HardwareProfile &hw, std::string &error) {
  IterationOp it;
  scheduled.walk([&](IterationOp i) { it = i; });
  auto buffers = scheduled->getAttrOfType<DictionaryAttr>("sched.buffers");
  if (!it || !buffers || !it.getPlacementAttr()) {
    error = "the step has no offload plan to trace (sched-assign-buffers "
            "did not run)";
    return std::nullopt;
  }
  std::map<std::pair<std::string, int64_t>, BlockBytes> blocks;
  if (auto list = buffers.getAs<ArrayAttr>("blocks"))
    for (auto entry : list.getAsRange<DictionaryAttr>()) {
      auto cls = entry.getAs<StringAttr>("class");
      auto layer = entry.getAs<IntegerAttr>("layer");
      auto bytes = entry.getAs<IntegerAttr>("bytes");
      if (!cls || !layer || !bytes)
        continue;
      BlockBytes b;
      b.bytes = bytes.getValue().getZExtValue();
      if (auto split = entry.getAs<IntegerAttr>("split"))
        b.split = split.getValue().getZExtValue();
      b.optimizer = cls.getValue() == "optimizer";
      blocks[{cls.getValue().str(), layer.getInt()}] = b;
    }

  const double M = double(it.getMicrobatches());
  const double rate =
      1e12 * (summary.compute == schedule::Precision::BF16 ? hw.gpuBf16TFlops
                                                           : hw.gpuFp32TFlops);
  const bool cpuOptimizer =
      !it.getOptimizerOn() || *it.getOptimizerOn() == "cpu";
  ArrayRef<int64_t> deferred;
  if (auto d = it.getDeferredAttr())
    deferred = d.asArrayRef();
  auto linkOf = [](Tier from, Tier to) {
    return from == Tier::ssd ? kSsdRead
           : to == Tier::ssd ? kSsdWrite
           : to == Tier::gpu ? kH2D
                             : kD2H;
  };
  auto gbps = [&](int lane) {
    switch (lane) {
    case kSsdRead:
      return hw.ssdReadGBps();
    case kSsdWrite:
      return hw.ssdWriteGBps();
    case kH2D:
      return hw.h2dGBps;
    default:
      return hw.d2hGBps;
    }
  };

  std::vector<Span> spans;
  double tc = 0, optimizerFree = 0;
  std::map<int, double> linkFree;
  // When the CPU optimizer's update of a layer's host blocks ends.
  std::map<int64_t, double> updated;
  DenseMap<Value, std::pair<double, std::string>> done; // timepoint: end, block
  for (Operation &op : it.getBlock()) {
    if (auto task = dyn_cast<TaskOp>(op)) {
      const int64_t l = int64_t(task.getLayer());
      const schedule::LayerCost *layer =
          l < int64_t(summary.layers.size()) ? &summary.layers[l] : nullptr;
      if (!layer)
        continue;
      if (task.getPhase() != Phase::opt) {
        const bool fwd = task.getPhase() == Phase::fwd;
        const double flops = fwd ? layer->forwardFlops
                                 : layer->backwardFlops + layer->recomputeFlops;
        const double dur = flops / M / rate;
        std::string name = llvm::formatv("{0} L{1}", fwd ? "fwd" : "bwd", l);
        if (auto mb = task.getMb())
          name += llvm::formatv(" mb{0}", *mb).str();
        spans.push_back({kCompute, name, tc, tc + dur, "", 0});
        tc += dur;
        continue;
      }
      // The update: the deferred part in the deferred task, the rest in
      // the other (sched-overlap-optimizer).
      const double d = l < int64_t(deferred.size()) ? double(deferred[l]) : 0;
      const double elements =
          task.getDeferred() ? d : double(layer->numParams) - d;
      if (elements <= 0)
        continue;
      std::string name = llvm::formatv(
          "{0}update L{1}", task.getDeferred() ? "deferred " : "", l);
      if (cpuOptimizer) {
        const double begin = std::max(tc, optimizerFree);
        const double end = begin + elements / hw.cpuOptimizerParamsPerSec;
        spans.push_back({kCpuOptimizer, name, begin, end, "", 0});
        optimizerFree = end;
        updated[l] = end;
      } else {
        // The model counts no GPU time for the update (its bytes are the
        // state's, which stay there): a mark on the compute lane.
        spans.push_back({kCompute, name, tc, tc, "", 0});
      }
      continue;
    }
    if (auto mv = dyn_cast<MoveOp>(op)) {
      const std::string cls = stringifyBlockClass(mv.getBlockClass()).str();
      const int64_t l = mv.getLayer();
      auto found = blocks.find({cls, l});
      const int part = mv.getPart() ? int(*mv.getPart()) : -1;
      const uint64_t bytes =
          found == blocks.end() ? 0 : found->second.part(part);
      const int lane = linkOf(mv.getFrom(), mv.getTo());
      double begin = std::max(tc, linkFree[lane]);
      // A host copy the CPU optimizer updates moves once the update ends.
      if (mv.getFrom() == Tier::host && cls != "gradients" &&
          cls != "gradstage" && cls != "activations" && updated.count(l))
        begin = std::max(begin, updated[l]);
      const double end = begin + double(bytes) / (gbps(lane) * 1e9);
      std::string block = llvm::formatv("{0}/layer{1}", cls, l);
      if (part >= 0)
        block += llvm::formatv("/part{0}", part).str();
      const char *link = lane == kSsdRead    ? "ssd_read"
                         : lane == kSsdWrite ? "ssd_write"
                         : lane == kH2D      ? "h2d"
                                             : "d2h";
      spans.push_back(
          {lane, std::string(link) + " " + block, begin, end, block, bytes});
      linkFree[lane] = end;
      done[mv.getTimepoint()] = {end, block};
      continue;
    }
    if (auto aw = dyn_cast<AwaitOp>(op)) {
      double until = tc;
      std::string what;
      for (Value t : aw->getOperands())
        if (auto d = done.find(t); d != done.end() && d->second.first > until) {
          until = d->second.first;
          what = d->second.second;
        }
      if (until > tc)
        spans.push_back({kCompute, "wait " + what, tc, until, "", 0});
      tc = until;
    }
  }

  PredictedTrace out;
  for (const Span &s : spans)
    out.iterationSec = std::max(out.iterationSec, s.end);
  namespace json = llvm::json;
  json::Array events;
  std::map<int, const char *> names = {{kCompute, "compute"},
                                       {kH2D, "h2d"},
                                       {kD2H, "d2h"},
                                       {kSsdRead, "ssd read"},
                                       {kSsdWrite, "ssd write"},
                                       {kCpuOptimizer, "cpu optimizer 0"}};
  for (auto &[tid, name] : names) {
    events.push_back(json::Object{{"ph", "M"},
                                  {"pid", 1},
                                  {"tid", tid},
                                  {"name", "thread_name"},
                                  {"args", json::Object{{"name", name}}}});
    events.push_back(json::Object{{"ph", "M"},
                                  {"pid", 1},
                                  {"tid", tid},
                                  {"name", "thread_sort_index"},
                                  {"args", json::Object{{"sort_index", tid}}}});
  }
  events.push_back(json::Object{
      {"ph", "M"},
      {"pid", 1},
      {"name", "process_name"},
      {"args", json::Object{{"name", "spillway plan (predicted)"}}}});
  for (const Span &s : spans) {
    json::Object e{{"ph", "X"},           {"pid", 1},
                   {"tid", s.lane},       {"name", s.name},
                   {"ts", s.begin * 1e6}, {"dur", (s.end - s.begin) * 1e6}};
    if (!s.block.empty())
      e["args"] = json::Object{{"bytes", int64_t(s.bytes)}, {"block", s.block}};
    events.push_back(std::move(e));
  }
  out.spans = spans.size();
  llvm::raw_string_ostream os(out.json);
  os << json::Value(json::Object{{"traceEvents", std::move(events)},
                                 {"displayTimeUnit", "ms"}});
  return out;
}
