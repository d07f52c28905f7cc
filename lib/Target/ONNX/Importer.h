//===- Importer.h - The ONNX importer's shared state ------------*- C++ -*-===//
//
// Private to lib/Target/ONNX (the public API is
// include/spillway/Target/ONNX/ImportONNX.h): the Importer, which imports one
// model, the compile-time tensors it folds, and the helpers its files share.
//
//   ImportONNX.cpp          the model, the checks every node passes, the
//                           dispatch from op name to importer, public API
//   Tensors.cpp             initializers, graph inputs, values and constants
//   ShapeComputation.cpp    result shapes of the shape ops, for folding and
//                           emission alike
//   ConstantFolder.cpp      evaluates nodes whose inputs are all known
//   ElementwiseOps.cpp      arithmetic, comparisons, casts, activations
//   ShapeOps.cpp            Shape, reshapes, slices, gathers, sequences
//   ReductionOps.cpp        reductions, Softmax, LayerNormalization
//   LinearOps.cpp           MatMul, Gemm
//   LossOps.cpp             SoftmaxCrossEntropyLoss
//   ConstantOps.cpp         Constant, ConstantOfShape, constant-only ops
//   TrainingOps.cpp         the training domain's Adam
//
// Each op file ends in its table of (op name, importer, note); importing a
// new op is a line there plus its importer, and the list of supported ops
// that errors and --list-supported-ops print is made from the tables.
//
//===----------------------------------------------------------------------===//

#ifndef SPILLWAY_LIB_TARGET_ONNX_IMPORTER_H
#define SPILLWAY_LIB_TARGET_ONNX_IMPORTER_H

#include "spillway/Target/ONNX/ImportONNX.h"
#include "spillway/Target/ONNX/WeightsMap.h"

#include "spillway/Dialect/Train/IR/TrainDialect.h"
#include "spillway/Dialect/Train/IR/TrainOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Path.h"

#include <onnx/onnx_pb.h>

#include <deque>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace spillway::onnx_import {

using namespace mlir;
namespace onnxpb = ::onnx;

//===----------------------------------------------------------------------===//
// Shapes, element types and attributes
//===----------------------------------------------------------------------===//

std::string shapeStr(ArrayRef<int64_t> shape);
std::string dtypeName(int32_t dtype);

/// Elements of `shape`, or nullopt when a dimension is negative or the count
/// overflows (ConstantOfShape and Expand take their shapes from data).
std::optional<int64_t> numElementsOf(ArrayRef<int64_t> shape);

SmallVector<int64_t> stridesOf(ArrayRef<int64_t> shape);

/// For each element of a tensor of shape `shape` (row-major), the flat index
/// `base + sum(i_d * strides[d])`: one description for slices, transposes
/// and broadcasts (stride 0) of a constant.
std::vector<int64_t> stridedSources(ArrayRef<int64_t> shape, int64_t base,
                                    ArrayRef<int64_t> strides);

/// Strides that read a tensor of shape `in` numpy-broadcast to `out`.
SmallVector<int64_t> broadcastStrides(ArrayRef<int64_t> in,
                                      ArrayRef<int64_t> out);

/// An integer converted to `dtype` the way a C cast does it (ONNX Cast).
int64_t wrapInt(int32_t dtype, int64_t v);

/// Normalizes `axes` against `rank`, refusing out-of-range and repeated axes.
LogicalResult normalizeAxes(SmallVectorImpl<int64_t> &axes, int64_t rank,
                            llvm::function_ref<InFlightDiagnostic()> err);

/// Where parameter reads and constants go: the start of the function, after
/// the ones already there, so each is created once and dominates every use.
void setInsertionPointToPrologue(OpBuilder &builder, Block *entry);

/// Diagnostics about the model point at the file (ONNX has no source lines).
inline Location modelFileLoc(MLIRContext &ctx, StringRef path) {
  return FileLineColLoc::get(&ctx, path, 0, 0);
}

inline const onnxpb::AttributeProto *findAttr(const onnxpb::NodeProto &node,
                                              StringRef name) {
  for (const auto &a : node.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}
inline int64_t intAttr(const onnxpb::NodeProto &node, StringRef name,
                       int64_t dflt) {
  const auto *a = findAttr(node, name);
  return a ? a->i() : dflt;
}
inline float floatAttr(const onnxpb::NodeProto &node, StringRef name,
                       float dflt) {
  const auto *a = findAttr(node, name);
  return a ? a->f() : dflt;
}
inline std::string strAttr(const onnxpb::NodeProto &node, StringRef name,
                           StringRef dflt) {
  const auto *a = findAttr(node, name);
  return a ? a->s() : dflt.str();
}

//===----------------------------------------------------------------------===//
// Compile-time tensors
//===----------------------------------------------------------------------===//

/// A tensor known at import time: an integer or bool initializer, a Constant
/// node, or the folded result of a node whose inputs are all known.
struct ConstTensor {
  SmallVector<int64_t> shape;
  int32_t dtype = 0;         // FLOAT, INT64, INT32 or BOOL
  std::vector<int64_t> ints; // INT64, INT32 (in range), BOOL (0 or 1)
  std::vector<float> floats; // FLOAT

  ConstTensor() = default;
  ConstTensor(int32_t dtype, ArrayRef<int64_t> shape)
      : shape(shape), dtype(dtype) {
    int64_t n = *numElementsOf(shape);
    if (isFloat())
      floats.resize(n);
    else
      ints.resize(n);
  }
  bool isFloat() const { return dtype == onnxpb::TensorProto::FLOAT; }
  bool isBool() const { return dtype == onnxpb::TensorProto::BOOL; }
  int64_t numElements() const {
    return isFloat() ? (int64_t)floats.size() : (int64_t)ints.size();
  }
  /// A tensor of `newShape` whose element k is this tensor's element
  /// `sources[k]`.
  ConstTensor take(ArrayRef<int64_t> newShape,
                   ArrayRef<int64_t> sources) const {
    ConstTensor r(dtype, newShape);
    for (auto [k, s] : llvm::enumerate(sources)) {
      if (isFloat())
        r.floats[k] = floats[s];
      else
        r.ints[k] = ints[s];
    }
    return r;
  }
  bool isSplat() const {
    return isFloat() ? llvm::all_equal(floats) : llvm::all_equal(ints);
  }
};

/// A slice in train.slice's form: one start and step per dimension.
struct SliceSpec {
  SmallVector<int64_t> starts, steps, shape;
};

/// The slice `spec` of the constant `x`.
ConstTensor sliceConst(const ConstTensor &x, const SliceSpec &spec);

/// `c` converted to `to` as ONNX Cast does (float -> int truncates).
ConstTensor castConst(const ConstTensor &c, int32_t to);

//===----------------------------------------------------------------------===//
// The importer
//===----------------------------------------------------------------------===//

class Importer {
public:
  Importer(MLIRContext &ctx, StringRef modelPath,
           const ONNXImportOptions &opts)
      : ctx(ctx), builder(&ctx), modelPath(modelPath), opts(opts),
        fileLoc(modelFileLoc(ctx, modelPath)) {
    modelDir = llvm::sys::path::parent_path(modelPath).str();
  }

  /// Imports `model`; first decides which float initializers are
  /// parameters (recoverParameters), which may rewrite the graph.
  OwningOpRef<ModuleOp> import(onnxpb::ModelProto &model);

  /// The default-domain ops imported, sorted, with their notes: "Add,
  /// And (constant), ..., Dropout (inference), ...".
  static const std::string &supportedOps();

private:
  //===--- diagnostics ---===//
  InFlightDiagnostic error() { return emitError(fileLoc); }
  InFlightDiagnostic nodeError(const onnxpb::NodeProto &node);
  std::string nodeName(const onnxpb::NodeProto &node) const;

  //===--- parameters (Parameters.cpp) ---===//
  /// From the exporter's metadata: marks buffers and folded constants as
  /// constants, splits merged parameters, restores dropped ones and
  /// recomputes folds of tied ones; says what it did, by parameter, in
  /// paramOrigin.
  LogicalResult recoverParameters(onnxpb::ModelProto &model);
  LogicalResult recoverTorchScriptParameters(onnxpb::GraphProto &graph);
  LogicalResult readSpillwayParameters(const onnxpb::GraphProto &graph,
                                       StringRef json);
  std::string linearWeightOf(const onnxpb::GraphProto &graph,
                             const onnxpb::TensorProto &t);
  /// Whether `t` holds `src` transposed (both 2-D; reads their data).
  FailureOr<bool> isTransposeOf(const onnxpb::TensorProto &t,
                                const onnxpb::TensorProto &src);
  void retie(onnxpb::GraphProto &graph,
             ArrayRef<std::pair<std::string, std::string>> transposes);
  /// Replaces the initializers named `drop` by `nodes` (which compute
  /// them), run first thing in the graph.
  void computeFirst(onnxpb::GraphProto &graph, const llvm::StringSet<> &drop,
                    ArrayRef<onnxpb::NodeProto> nodes);
  //===--- folded parameters restored whole (ExportedStateDict.cpp) ---===//
  LogicalResult readStateDictTensor(StringRef path, StringRef name,
                                    StringRef alt, std::string &found,
                                    SmallVectorImpl<int64_t> &shape,
                                    std::string &bytes);
  LogicalResult unfold(onnxpb::GraphProto &graph,
                       const onnxpb::TensorProto &fold, StringRef target,
                       SmallVectorImpl<onnxpb::NodeProto> &prologue,
                       std::string &origin);
  llvm::StringMap<std::string> paramOrigin;
  /// Initializers whose data is the transpose of the parameter they declare
  /// (2-D): declared with the dimensions swapped and their data transposed.
  llvm::StringSet<> transposedStorage;
  /// What a wrapper module put before the model's own state_dict names.
  std::string stateDictPrefix;
  /// Parameter (initializer name) -> the state-dict names of its ties.
  llvm::StringMap<SmallVector<std::string, 1>> tiedAliases;
  /// Parameters that are rows of another the exporter folded, kept as
  /// folded (no --exported-state-dict): initializer -> the source's name.
  llvm::StringMap<std::string> foldSources;
  /// Folds restored whole from --exported-state-dict.
  unsigned restoredFolds = 0;

  //===--- tensors and types ---===//
  Type elementType(int32_t dtype);
  /// Where a tensor's elements are (locateTensor): in the model (raw_data
  /// or the typed field), in an external file, or nowhere (declared without
  /// data, as in a shapes-only model).
  struct TensorData {
    SmallVector<int64_t> shape;
    int64_t bytes = 0; // what the shape needs
    enum Where { Inline, External, Absent } where = Absent;
    std::string file; // External: the file (model directory + location)
    int64_t fileOffset = 0;
  };
  LogicalResult locateTensor(const onnxpb::TensorProto &t, StringRef what,
                             TensorData &d);
  InFlightDiagnostic dataSizeMismatch(const onnxpb::TensorProto &t,
                                      StringRef what, const TensorData &d,
                                      int64_t got);
  StringRef inlineBytes(const onnxpb::TensorProto &t, std::string &owned);
  LogicalResult readTensor(const onnxpb::TensorProto &t, StringRef what,
                           std::string &bytes, SmallVectorImpl<int64_t> &shape);
  FailureOr<int64_t> weightSource(const onnxpb::TensorProto &t,
                                  StringRef file);
  LogicalResult checkExternalLocation(const onnxpb::TensorProto &t,
                                      StringRef what, StringRef location,
                                      StringRef file);
  FailureOr<ConstTensor> toConst(const onnxpb::TensorProto &t,
                                 StringRef what);
  LogicalResult declareInitializer(const onnxpb::TensorProto &t);
  LogicalResult declareInput(const onnxpb::ValueInfoProto &info,
                             SmallVectorImpl<Type> &argTypes);
  LogicalResult checkInputMatchesInitializer(const onnxpb::ValueInfoProto &in);

  //===--- values ---===//
  bool isKnown(StringRef name) const {
    return values.count(name) || params.count(name) || consts.count(name);
  }
  FailureOr<Value> getValue(const onnxpb::NodeProto &node, int idx);
  FailureOr<Value> getValue(const onnxpb::NodeProto &node, StringRef name);
  /// A train.constant in the entry block's prologue (before the first
  /// computation), so every op may read it.
  Value prologueConstant(Location loc, DenseElementsAttr attr);
  FailureOr<Value> materialize(const ConstTensor &c, StringRef name,
                               llvm::function_ref<InFlightDiagnostic()> err);
  FailureOr<RankedTensorType> inputType(const onnxpb::NodeProto &node,
                                        int idx);
  const ConstTensor *getConst(StringRef name) const {
    auto it = consts.find(name);
    return it == consts.end() ? nullptr : &it->second;
  }
  bool hasInput(const onnxpb::NodeProto &node, int idx) const {
    return idx < node.input_size() && !node.input(idx).empty();
  }
  bool isOutputUsed(const onnxpb::NodeProto &node, int idx) const {
    return idx < node.output_size() && !node.output(idx).empty() &&
           usedNames.contains(node.output(idx));
  }
  bool fitsFoldLimit(ArrayRef<int64_t> shape) const {
    auto n = numElementsOf(shape);
    return n && *n <= opts.maxInlineConstantElements;
  }

  //===--- shape computations shared by folding and emission ---===//
  FailureOr<const ConstTensor *> constInput(const onnxpb::NodeProto &node,
                                            int idx, StringRef role);
  FailureOr<SmallVector<int64_t>> constInts(const onnxpb::NodeProto &node,
                                            int idx, StringRef role);
  FailureOr<SmallVector<int64_t>> axesOf(const onnxpb::NodeProto &node,
                                         int inputIdx, int64_t inputSince);
  FailureOr<SmallVector<int64_t>> reshapeShape(const onnxpb::NodeProto &node,
                                               ArrayRef<int64_t> in);
  FailureOr<SmallVector<int64_t>> unsqueezeShape(const onnxpb::NodeProto &node,
                                                 ArrayRef<int64_t> in);
  FailureOr<SmallVector<int64_t>> squeezeShape(const onnxpb::NodeProto &node,
                                               ArrayRef<int64_t> in);
  FailureOr<SmallVector<int64_t>> flattenShape(const onnxpb::NodeProto &node,
                                               ArrayRef<int64_t> in);
  FailureOr<SmallVector<int64_t>> expandShape(const onnxpb::NodeProto &node,
                                              ArrayRef<int64_t> in);
  FailureOr<SmallVector<int64_t>> transposePerm(const onnxpb::NodeProto &node,
                                                int64_t rank);
  FailureOr<SliceSpec> sliceSpec(const onnxpb::NodeProto &node,
                                 ArrayRef<int64_t> in);
  FailureOr<SmallVector<SliceSpec>> splitSpecs(const onnxpb::NodeProto &node,
                                               ArrayRef<int64_t> in);
  /// A SplitToSequence result: its parts as slices of the source tensor.
  /// Sequences exist only at import time; SequenceAt with a constant
  /// position picks one part.
  struct Sequence {
    std::string source;
    SmallVector<SliceSpec> parts;
    int64_t squeezeAxis = -1; // parts lose this axis (keepdims = 0)
  };
  FailureOr<Sequence> splitToSequence(const onnxpb::NodeProto &node,
                                      ArrayRef<int64_t> in);
  FailureOr<int32_t> castTarget(const onnxpb::NodeProto &node);

  //===--- folding ---===//
  FailureOr<bool> fold(const onnxpb::NodeProto &node);
  LogicalResult evaluate(const onnxpb::NodeProto &node,
                         ArrayRef<const ConstTensor *> in,
                         SmallVectorImpl<ConstTensor> &out, bool &declined);

  //===--- nodes ---===//
  LogicalResult checkNode(const onnxpb::NodeProto &node);
  LogicalResult defineOutputs(const onnxpb::NodeProto &node);
  LogicalResult importNode(const onnxpb::NodeProto &node);
  template <typename OpTy>
  FailureOr<Value> buildInferred(const onnxpb::NodeProto &node, Location loc,
                                 ValueRange operands,
                                 ArrayRef<NamedAttribute> attrs = {});
  FailureOr<Value> requireFloat(const onnxpb::NodeProto &node, int idx,
                                StringRef role);
  /// Operands 0..n-1 of an elementwise op; ONNX requires the element types
  /// of the last two to match.
  FailureOr<SmallVector<Value>>
  elementwiseOperands(const onnxpb::NodeProto &node, int n);
  /// Makes `v` the node's output 0.
  LogicalResult define(const onnxpb::NodeProto &node, FailureOr<Value> v) {
    if (failed(v))
      return failure();
    values[node.output(0)] = *v;
    return success();
  }
  /// Defines output 0 as `x` reshaped to `shape` (as `x` when it has it).
  LogicalResult reshapeTo(const onnxpb::NodeProto &node, Location loc, Value x,
                          ArrayRef<int64_t> shape);
  /// `x` sliced by `spec` (`x` itself for the whole of it).
  Value sliceValue(Location loc, Value x, const SliceSpec &spec);

  //===--- op importers, by family (each file ends in its table) ---===//
  // Each runs after the node's checks and only when folding did not
  // evaluate the node.
  using OpImporter = LogicalResult (Importer::*)(const onnxpb::NodeProto &,
                                                 Location);
  struct OpImporterEntry {
    StringRef op;
    OpImporter import;
    /// How far the op is supported, where not fully: "constant" (evaluated
    /// at import time only) or "inference" (Dropout).
    StringRef note = {};
  };
  static SmallVector<OpImporterEntry> allOpImporters();
  static const llvm::StringMap<OpImporter> &opImporters();

  // ConstantOps.cpp
  static ArrayRef<OpImporterEntry> constantOps();
  LogicalResult importConstant(const onnxpb::NodeProto &node, Location loc);
  LogicalResult importConstantOfShape(const onnxpb::NodeProto &node,
                                      Location loc);
  LogicalResult importConstantOnly(const onnxpb::NodeProto &node,
                                   Location loc);
  // ElementwiseOps.cpp
  static ArrayRef<OpImporterEntry> elementwiseOps();
  LogicalResult importIdentity(const onnxpb::NodeProto &node, Location loc);
  LogicalResult importDropout(const onnxpb::NodeProto &node, Location loc);
  template <typename OpTy, bool Swap = false>
  LogicalResult importBinary(const onnxpb::NodeProto &node, Location loc);
  LogicalResult importPow(const onnxpb::NodeProto &node, Location loc);
  LogicalResult importWhere(const onnxpb::NodeProto &node, Location loc);
  LogicalResult importIsNaN(const onnxpb::NodeProto &node, Location loc);
  LogicalResult importCast(const onnxpb::NodeProto &node, Location loc);
  template <typename OpTy>
  LogicalResult importUnary(const onnxpb::NodeProto &node, Location loc);
  LogicalResult importGelu(const onnxpb::NodeProto &node, Location loc);
  // ShapeOps.cpp
  static ArrayRef<OpImporterEntry> shapeOps();
  LogicalResult importShape(const onnxpb::NodeProto &node, Location loc);
  LogicalResult importGather(const onnxpb::NodeProto &node, Location loc);
  LogicalResult importReshape(const onnxpb::NodeProto &node, Location loc);
  LogicalResult importExpand(const onnxpb::NodeProto &node, Location loc);
  LogicalResult importTranspose(const onnxpb::NodeProto &node, Location loc);
  LogicalResult importSlice(const onnxpb::NodeProto &node, Location loc);
  LogicalResult importSplit(const onnxpb::NodeProto &node, Location loc);
  LogicalResult importConcat(const onnxpb::NodeProto &node, Location loc);
  LogicalResult importPad(const onnxpb::NodeProto &node, Location loc);
  LogicalResult importSplitToSequence(const onnxpb::NodeProto &node,
                                      Location loc);
  LogicalResult importSequenceAt(const onnxpb::NodeProto &node, Location loc);
  // ReductionOps.cpp
  static ArrayRef<OpImporterEntry> reductionOps();
  LogicalResult importReduce(const onnxpb::NodeProto &node, Location loc);
  LogicalResult importSoftmax(const onnxpb::NodeProto &node, Location loc);
  LogicalResult importLayerNormalization(const onnxpb::NodeProto &node,
                                         Location loc);
  // LinearOps.cpp
  static ArrayRef<OpImporterEntry> linearOps();
  LogicalResult importMatMul(const onnxpb::NodeProto &node, Location loc);
  LogicalResult importGemm(const onnxpb::NodeProto &node, Location loc);
  // LossOps.cpp
  static ArrayRef<OpImporterEntry> lossOps();
  LogicalResult importSoftmaxCrossEntropy(const onnxpb::NodeProto &node,
                                          Location loc);
  // TrainingOps.cpp (domain ai.onnx.preview.training, dispatched apart)
  LogicalResult importAdam(const onnxpb::NodeProto &node, Location loc);

  MLIRContext &ctx;
  OpBuilder builder;
  std::string modelPath, modelDir;
  const ONNXImportOptions &opts;
  Location fileLoc; // where importer diagnostics point: the model file
  int64_t opset = 0;
  llvm::StringMap<int64_t> opsets; // every imported domain's version
  int nodeIndex = 0;

  ModuleOp module;
  Block *paramBlock = nullptr; // module body: train.param go here
  /// The logical weights blob: its size so far (each parameter at a
  /// 64-byte-aligned offset), where its parameters' bytes are (in offset
  /// order; inline ones point into the model or `convertedWeights`), and
  /// the external data files they come from.
  int64_t weightsSize = 0;
  std::vector<weights::Segment> weightSegments;
  std::vector<weights::Source> weightSources;
  llvm::StringMap<int64_t> weightSourceIndex; // by real path
  std::deque<std::string> convertedWeights;   // typed fields as raw bytes
  llvm::StringMap<train::ParamOp> params;
  llvm::StringMap<ConstTensor> consts;
  llvm::StringMap<Value> values;
  llvm::StringMap<Sequence> sequences;
  llvm::StringSet<> usedNames;
  /// What defines each name so far: "graph input", "initializer" or the
  /// node; ONNX graphs assign each name once.
  llvm::StringMap<std::string> definedBy;
  llvm::StringSet<> usedBindings;
  llvm::StringSet<> constantInitializers; // opts.constantInitializers
  /// Outputs of nodes whose inputs were all constant but whose result was
  /// too large to evaluate (--max-inline-constant-elements).
  llvm::StringSet<> unfoldedConstants;
};

/// Builds an op that infers its result type, turning an inference failure
/// into an error that names the ONNX node instead of aborting in the builder.
template <typename OpTy>
FailureOr<Value> Importer::buildInferred(const onnxpb::NodeProto &node,
                                         Location loc, ValueRange operands,
                                         ArrayRef<NamedAttribute> attrs) {
  OperationState state(loc, OpTy::getOperationName());
  state.addOperands(operands);
  state.addAttributes(attrs);
  DictionaryAttr dict = state.attributes.getDictionary(&ctx);
  OpaqueProperties props = state.getRawProperties();
  if constexpr (!std::is_same_v<typename OpTy::Properties, EmptyProperties>) {
    props = &state.getOrAddProperties<typename OpTy::Properties>();
    if (failed(state.name.getRegisteredInfo()->setOpPropertiesFromAttribute(
            state.name, props, dict,
            [&]() { return nodeError(node) << "bad attribute: "; })))
      return failure();
  }
  std::string message;
  SmallVector<Type> types;
  LogicalResult inferred = failure();
  {
    ScopedDiagnosticHandler capture(&ctx, [&](Diagnostic &diag) {
      if (message.empty())
        message = diag.str();
      return success();
    });
    inferred = OpTy::inferReturnTypes(&ctx, loc, operands, dict, props,
                                      state.regions, types);
  }
  if (failed(inferred))
    return nodeError(node) << (message.empty() ? "invalid operands" : message),
           failure();
  state.addTypes(types);
  return builder.create(state)->getResult(0);
}
} // namespace spillway::onnx_import

#endif // SPILLWAY_LIB_TARGET_ONNX_IMPORTER_H
