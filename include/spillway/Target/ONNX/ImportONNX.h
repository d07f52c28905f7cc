//===- ImportONNX.h - ONNX training graph -> train dialect -------*- C++ -*-===//
//
// Imports an ONNX model whose first graph output is its scalar loss into a
// module of `train.param` declarations and one `func.func @main` that
// computes the loss (or, forward-only, every graph output). Parameter values
// (float initializers, less those named constant) never go into the IR: a
// separate weights file holds them, or, for ONNX external data, is a weights
// map naming where they lie (WeightsMap.h), and they are not read.
// Shape arithmetic on compile-time constants (Shape, Gather, Concat, Range,
// Trilu, ...) is evaluated by the importer and never reaches the IR.
//
// The ONNX and protobuf libraries throw; exceptions stay inside the importer's
// library and come out of this API as diagnostics.
//
//===----------------------------------------------------------------------===//

#ifndef SPILLWAY_TARGET_ONNX_IMPORTONNX_H
#define SPILLWAY_TARGET_ONNX_IMPORTONNX_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Support/LogicalResult.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace spillway {

struct ONNXImportOptions {
  /// Sizes for symbolic dimensions (ONNX dim_param) of graph inputs, from
  /// `--bind`. Every symbolic input dimension must be bound; a binding that
  /// names no dimension gets a warning.
  llvm::StringMap<int64_t> dimBindings;
  /// Where to write the weights file: the logical blob of the parameters
  /// (float initializers, raw little-endian, each at a 64-byte-aligned
  /// offset) when all their data is inline in the model (or with
  /// `copyWeights`), else a weights map (WeightsMap.h) naming the external
  /// data files, whose bytes are then not read. Empty: write nothing (the
  /// module still names `weightsAttr`); initializers declared without data
  /// (a shapes-only model) are accepted only then.
  std::string weightsPath;
  /// Write the raw blob even when parameters' data is external: their bytes
  /// are copied, streamed in bounded chunks.
  bool copyWeights = false;
  /// What the module attribute `train.weights` says: the weights file's path
  /// relative to the directory of the MLIR file the module will be written to.
  std::string weightsAttr;
  /// Import for inference/conformance: `@main` returns every graph output
  /// (each result carries `train.name`) and has the unit attribute
  /// `train.forward_only`; no scalar-loss requirement. Float initializers are
  /// still `train.param`.
  bool forwardOnly = false;
  /// The largest constant, in elements, the importer evaluates (folding) or
  /// inlines as a `train.constant` (causal masks are S*S, rotary tables S*D).
  /// Splat constants (all elements equal) are exempt.
  int64_t maxInlineConstantElements = int64_t(1) << 20;
  /// Float initializers that are not trained (e.g. PyTorch buffers such as a
  /// rotary `inv_freq`, from `--constant-initializers`): they become
  /// compile-time constants, which fold like integer initializers, instead of
  /// `train.param`. A name that is no initializer of the model is an error.
  std::vector<std::string> constantInitializers;
  /// Where to list the parameters (name, shape) and what was recovered from
  /// the exporter's metadata (spillwayc -v); null: only a one-line remark
  /// when anything was.
  llvm::raw_ostream *parameterLog = nullptr;
  /// The wrapper's prefix before the model's own state_dict names
  /// (--state-dict-prefix); unset: found from the dynamo exporter's module
  /// classes, else none. Every parameter's name must start with it.
  std::optional<std::string> stateDictPrefix;
  /// The exported model's own state_dict (a .safetensors file,
  /// --exported-state-dict): a parameter the dynamo exporter's optimizer
  /// folded into a constant of some of its rows is restored whole from it.
  std::optional<std::string> exportedStateDict;
};

/// Imports an ONNX model file: binary ModelProto (`.onnx`) or ONNX textual
/// syntax (`.onnxtext`). Emits diagnostics on `ctx` and returns null on
/// failure; on success the weights file has been written and the module
/// verifies.
mlir::OwningOpRef<mlir::ModuleOp>
importONNXFile(llvm::StringRef path, mlir::MLIRContext &ctx,
               const ONNXImportOptions &opts);

/// Prints the ONNX ops (default domain) the importer maps, one per line;
/// ops it only evaluates at import time, on constant inputs, are followed by
/// " constant-only".
void printSupportedONNXOps(llvm::raw_ostream &os);

/// Parses "a=1,b=2" into `out` (later entries override earlier ones). On
/// failure sets `error` to a message naming the bad entry.
llvm::LogicalResult parseDimBindings(llvm::StringRef spec,
                                     llvm::StringMap<int64_t> &out,
                                     std::string &error);

/// The weights file that goes with an MLIR file: `dir/model.mlir` ->
/// `dir/model.weights.bin`. For stdout ("-" or empty) it is
/// `<basename of modelPath without extension>.weights.bin` in the current
/// directory. Fills `opts.weightsPath` and `opts.weightsAttr`.
void setDefaultWeightsPaths(llvm::StringRef mlirOutputPath,
                            llvm::StringRef modelPath,
                            ONNXImportOptions &opts);

} // namespace spillway

#endif // SPILLWAY_TARGET_ONNX_IMPORTONNX_H
