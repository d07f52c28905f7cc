//===- TrainOps.h - train dialect ops ---------------------------*- C++ -*-===//
#ifndef SPILLWAY_DIALECT_TRAIN_IR_TRAINOPS_H
#define SPILLWAY_DIALECT_TRAIN_IR_TRAINOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "spillway/Dialect/Train/IR/TrainAttrs.h"
#include "spillway/Dialect/Train/IR/TrainDialect.h"

#define GET_OP_CLASSES
#include "spillway/Dialect/Train/IR/TrainOps.h.inc"

namespace spillway::train {
/// Numpy broadcast of two shapes; failure when they do not broadcast.
mlir::FailureOr<llvm::SmallVector<int64_t>>
broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b);
/// Normalizes a possibly negative axis against a rank; -1 when out of range.
int64_t normalizeAxis(int64_t axis, int64_t rank);

/// What a forward value is computed from: nothing but constants, parameters
/// (and constants), inputs (and constants), or both: an activation.
enum class Origin { Const, Param, Input, Mixed };
/// The origin of a value computed from values of origins `a` and `b`.
Origin joinOrigins(Origin a, Origin b);

/// An update of a parameter by its optimizer: train.adamw, train.adamw_defer
/// or train.foam (not train.adamw_apply_pending, which names no gradient).
bool isOptimizerUpdate(mlir::Operation *op);
/// The parameter and the gradient of such an update; empty for other ops.
llvm::StringRef getUpdatedParam(mlir::Operation *op);
mlir::Value getUpdateGrad(mlir::Operation *op);
/// Elements of each of the two moments the update's optimizer keeps for its
/// parameter: the parameter's elements for AdamW, the folded count for FOAM.
int64_t stateElementsPerMoment(mlir::Operation *op);
/// Bytes the optimizer stores per moment element in `module`: 2 under
/// train.optimizer_state_dtype = "bf16", else 4 (f32).
int64_t optimizerStateElementBytes(mlir::Operation *module);
/// The ranks that shard the optimizer state in `module`
/// (train.optimizer_state_shards), 1 when it is whole.
int64_t optimizerStateShards(mlir::Operation *module);
/// Where the ranks' shards are cut (a multiple of this many elements, from
/// train.optimizer_state_shards): 64, or the gradient norm's 64 Ki-element
/// blocks when the module clips its gradients.
int64_t optimizerStateShardAlign(mlir::Operation *module);
/// True when an offload plan's gradient blocks hold one rank's shard of
/// each member's gradient too (ZeRO stage 2: `gradients = true` in
/// train.optimizer_state_shards), cut as the state is.
bool gradientsSharded(mlir::Operation *module);
/// Elements of a moment of `n` elements that one rank's optimizer block
/// holds in `module`: n when the state is whole, else the largest rank's
/// shard, cut as the runtime cuts it (at the gradient-norm blocks when the
/// module clips its gradients).
int64_t optimizerStateSlotElements(mlir::Operation *module, int64_t n);
/// FOAM's folded elements of a `shape` parameter at `level`: the rows times
/// ceil(last dimension / 2^level).
int64_t foamStateElements(llvm::ArrayRef<int64_t> shape, int64_t level);
} // namespace spillway::train

#endif
