//===- TrainDialect.h - the train dialect -----------------------*- C++ -*-===//
#ifndef SPILLWAY_DIALECT_TRAIN_IR_TRAINDIALECT_H
#define SPILLWAY_DIALECT_TRAIN_IR_TRAINDIALECT_H

#include "mlir/IR/Dialect.h"

#include "spillway/Dialect/Train/IR/TrainDialect.h.inc"

namespace spillway::train {
/// Module attribute naming the weights file (relative to the MLIR file).
inline constexpr llvm::StringLiteral kWeightsAttrName = "train.weights";
/// Module attribute: the prefix a wrapper module put before the names of the
/// model's own state_dict ("model."); --save writes the names without it.
inline constexpr llvm::StringLiteral kStateDictPrefixAttrName =
    "train.state_dict_prefix";
/// Module attribute: parameter name -> array of the state-dict names of its
/// ties (torch's tied parameters, one tensor); --save writes each.
inline constexpr llvm::StringLiteral kParamAliasesAttrName =
    "train.param_aliases";
/// Module attribute: parameter name -> the state-dict name of the parameter
/// whose rows the export reads it holds (the exporter folded the parameter
/// into them); --save writes it under its own name and says so.
inline constexpr llvm::StringLiteral kParamFoldsAttrName = "train.param_folds";
/// Module attribute: "bf16-mixed" once train-mixed-precision has made the
/// step store its working weights and activations as bf16 (the planner's
/// summary and report read it).
inline constexpr llvm::StringLiteral kPrecisionAttrName = "train.precision";
/// Module attribute: "bf16" when the optimizer keeps its moments (AdamW's and
/// FOAM's m and v) as bf16, 2 bytes per element (train-attach-optimizer's
/// state-dtype; absent or "fp32": 4 bytes). The update computes in f32 and
/// rounds each moment to nearest even as it stores it; the runtime hears it
/// from spw_declare_optimizer_state_dtype, and the offload plans and the
/// planner's summary size the optimizer class by it.
inline constexpr llvm::StringLiteral kOptimizerStateDtypeAttrName =
    "train.optimizer_state_dtype";
/// Module attribute: {ranks = N, align = A} when N (2 to 65536)
/// data-parallel ranks shard the optimizer state of an offload plan (ZeRO
/// stage 1: spillwayc --zero 1 --ranks N; train-attach-optimizer's
/// state-shards). Each rank keeps its shard of every parameter's moments,
/// cut at multiples of A elements (64, or 65536 with gradient clipping:
/// spillway/runtime/zero_shard.h), so an optimizer block holds, per member,
/// the largest rank's shard; the runtime hears it from
/// spw_declare_optimizer_shards and runs only under N ranks. Absent: every
/// rank keeps the whole state.
inline constexpr llvm::StringLiteral kOptimizerStateShardsAttrName =
    "train.optimizer_state_shards";
/// The most ranks train.optimizer_state_shards takes (the compiler sizes
/// each block by trying every rank's shard).
inline constexpr int64_t kMaxOptimizerStateShards = 65536;
/// Argument (and, for forward-only functions, result) attribute carrying the
/// ONNX graph input/output name.
inline constexpr llvm::StringLiteral kInputNameAttrName = "train.name";
/// Unit attribute on a func.func that computes named outputs (inference,
/// conformance) instead of a training step's scalar loss.
inline constexpr llvm::StringLiteral kForwardOnlyAttrName = "train.forward_only";
/// On a call of a task function in the flat step (convert-sched-to-train):
/// the task it is, array<i64: phase (sched.task's), layer, micro-batch or
/// -1>, which convert-train-to-runtime passes to spw_task_begin.
inline constexpr llvm::StringLiteral kTaskAttrName = "train.task";
} // namespace spillway::train

#endif
