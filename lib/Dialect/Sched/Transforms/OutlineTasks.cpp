//===- OutlineTasks.cpp - each task's computation as a shared function ----===//
//
// The computation of every sched.task becomes one call to a private
// func.func; tasks that compute the same thing (every micro-batch of a
// layer's phase, and isomorphic layers, which differ only in the parameters
// they read) call the same function. The parameter reads stay in the task,
// before the call, and pass their values as arguments; the gradient records
// stay after it and take what the call returns. The lowering to the runtime
// then emits each function once instead of once per task, and the step
// becomes a sequence of calls. The rule is in Passes.td.
//
// Before:
//
//   %y = sched.task fwd layer(1) mb(0) (%x) : (tensor<2x4xf32>) -> tensor<2x4xf32> {
//   ^bb0(%a: tensor<2x4xf32>):
//     %w = train.param_value @w1 : tensor<4x4xf32>
//     %r = train.matmul %a, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
//     sched.yield %r : tensor<2x4xf32>
//   }
//
// After:
//
//   %y = sched.task fwd layer(1) mb(0) (%x) : (tensor<2x4xf32>) -> tensor<2x4xf32> {
//   ^bb0(%a: tensor<2x4xf32>):
//     %w = train.param_value @w1 : tensor<4x4xf32>
//     %r = func.call @task.fwd.layer1(%a, %w) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
//     sched.yield %r : tensor<2x4xf32>
//   }
//   func.func private @task.fwd.layer1(%arg0: tensor<2x4xf32>, %arg1: tensor<4x4xf32>) -> tensor<2x4xf32> {
//     %0 = train.matmul %arg0, %arg1 : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
//     return %0 : tensor<2x4xf32>
//   }
//
//===----------------------------------------------------------------------===//

#include "spillway/Dialect/Sched/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"
#include "spillway/Dialect/Sched/IR/SchedOps.h"
#include "spillway/Dialect/Train/IR/TrainOps.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringMap.h"

#include <limits>

namespace spillway::sched {
#define GEN_PASS_DEF_SCHEDOUTLINETASKSPASS
#include "spillway/Dialect/Sched/Transforms/Passes.h.inc"
} // namespace spillway::sched

using namespace mlir;
using namespace spillway;
using namespace spillway::sched;

namespace {

struct SchedOutlineTasksPass
    : sched::impl::SchedOutlineTasksPassBase<SchedOutlineTasksPass> {
  void runOnOperation() override;
};

/// The task's ops split as the rewrite moves them: parameter reads (before
/// the call), the computation (the callee), gradient records (after it).
/// Empty `compute` when the task is kept as it is.
struct TaskParts {
  SmallVector<train::ParamValueOp> reads;
  SmallVector<Operation *> compute;
  SmallVector<train::ParamGradOp> grads;
};

TaskParts split(TaskOp task) {
  TaskParts parts;
  for (Operation &op : task.getBlock().without_terminator()) {
    if (auto read = dyn_cast<train::ParamValueOp>(op)) {
      parts.reads.push_back(read);
      continue;
    }
    if (auto grad = dyn_cast<train::ParamGradOp>(op)) {
      parts.grads.push_back(grad);
      continue;
    }
    // An optimizer update (or any other symbol user) writes a parameter
    // that a read hoisted above it would see unwritten: such tasks stay.
    // So do tasks with ops of other dialects or regions, which the
    // runtime lowering handles only at the iteration level.
    if (isa<SymbolUserOpInterface>(op) || op.getNumRegions() != 0 ||
        !isa<train::TrainDialect>(op.getDialect()))
      return {};
    parts.compute.push_back(&op);
  }
  return parts;
}

/// The callee's text (every candidate has the same provisional name, no
/// locations): equal keys, equal computations. Every flag is set here: the
/// defaults follow the tool's --mlir-* print options, and one that elides
/// constants or skips regions would make different tasks print alike.
std::string keyOf(func::FuncOp fn) {
  std::string key;
  llvm::raw_string_ostream os(key);
  OpPrintingFlags flags;
  flags.useLocalScope()
      .printGenericOpForm()
      .elideLargeElementsAttrs(std::numeric_limits<int64_t>::max())
      .elideLargeResourceString(std::numeric_limits<int64_t>::max())
      .enableDebugInfo(false)
      .skipRegions(false)
      .printValueUsers(false)
      .printUniqueSSAIDs(false)
      .printNameLocAsPrefix(false);
  fn->print(os, flags);
  return key;
}

} // namespace

void SchedOutlineTasksPass::runOnOperation() {
  ModuleOp module = getOperation();
  SymbolTable symbols(module);
  OpBuilder b(&getContext());
  llvm::StringMap<func::FuncOp> byKey;
  SmallVector<TaskOp> tasks;
  module.walk([&](TaskOp task) { tasks.push_back(task); });
  for (TaskOp task : tasks) {
    TaskParts parts = split(task);
    if (parts.compute.empty())
      continue;
    Block &body = task.getBlock();
    auto yield = cast<YieldOp>(body.getTerminator());

    // Arguments: the task's block arguments, then the parameters it reads.
    SmallVector<Value> args(body.getArguments());
    for (train::ParamValueOp read : parts.reads)
      args.push_back(read.getResult());
    // Results: the computed values the yield and the gradient records read,
    // each once. A yielded argument or parameter needs no result.
    llvm::SetVector<Value> results;
    auto computed = [&](Value v) {
      Operation *def = v.getDefiningOp();
      return def && !isa<train::ParamValueOp>(def);
    };
    for (Value v : yield.getValues())
      if (computed(v))
        results.insert(v);
    for (train::ParamGradOp grad : parts.grads)
      if (computed(grad.getGrad()))
        results.insert(grad.getGrad());

    b.setInsertionPoint(task->getParentOfType<func::FuncOp>());
    auto type = b.getFunctionType(
        ValueRange(args).getTypes(),
        ValueRange(results.getArrayRef()).getTypes());
    auto fn = func::FuncOp::create(b, task.getLoc(), "task", type);
    fn.setPrivate();
    Block *entry = fn.addEntryBlock();
    IRMapping map;
    map.map(args, entry->getArguments());
    b.setInsertionPointToStart(entry);
    for (Operation *op : parts.compute)
      b.clone(*op, map);
    SmallVector<Value> returned;
    for (Value v : results)
      returned.push_back(map.lookup(v));
    func::ReturnOp::create(b, task.getLoc(), returned);

    func::FuncOp &shared = byKey[keyOf(fn)];
    if (shared) {
      fn.erase();
    } else {
      shared = fn;
      std::string name = ("task." + stringifyPhase(task.getPhase()) +
                          ".layer" + Twine(task.getLayer()))
                             .str();
      fn.setName(name);
      symbols.insert(fn); // renames it if the name is taken
    }

    // The task: its reads, the call, its gradient records, its yield.
    for (train::ParamValueOp read : parts.reads)
      read->moveBefore(parts.compute.front());
    b.setInsertionPoint(yield);
    auto call = func::CallOp::create(b, task.getLoc(), shared, args);
    for (auto [v, r] : llvm::zip(results, call.getResults()))
      Value(v).replaceAllUsesWith(r);
    for (train::ParamGradOp grad : parts.grads)
      grad->moveBefore(yield);
    for (Operation *op : llvm::reverse(parts.compute))
      op->erase();
  }
}
