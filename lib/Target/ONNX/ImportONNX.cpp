//===- ImportONNX.cpp - ONNX training graph -> train dialect --------------===//
//
// Reads a ModelProto (binary or ONNX textual syntax), propagates static shapes
// while it builds train ops, writes float initializers to the weights file and
// declares them as train.param.
//
// Integer and bool initializers and Constant nodes are compile-time constants,
// and so is everything the importer can compute from them: exporters leave
// shape arithmetic in the graph (Shape -> Gather -> Unsqueeze -> Concat ->
// Reshape, Range -> Less -> Where causal masks, ConstantOfShape -> Trilu), and
// the importer evaluates it (`Importer::fold`) so that only real compute
// reaches the IR. Constants that real compute consumes become train.constant.
// Float initializers are parameters and never fold: their values change as the
// model trains. The exception is those the user names frozen
// (`constantInitializers`: buffers such as a rotary inv_freq), which are
// constants like the integer ones.
//
// libonnx 1.12 knows default-domain opsets only up to 17, so nothing here uses
// its schemas, checker or shape inference: only the protobuf classes and the
// textual-syntax parser.
//
//===----------------------------------------------------------------------===//

#include "spillway/Target/ONNX/ImportONNX.h"

#include "spillway/Dialect/Train/IR/TrainDialect.h"
#include "spillway/Dialect/Train/IR/TrainOps.h"
#include "spillway/Support/ToolMain.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Sequence.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <onnx/defs/parser.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <optional>

using namespace mlir;
using namespace spillway;
namespace onnxpb = ::onnx;

namespace {

// Default-domain opsets. From 7 (numpy broadcasting in the elementwise ops)
// the mapped ops differ from their current form only in ways the importer
// handles: attribute-borne axes/splits (before 13, or 18 for ReduceMean/Max),
// Softmax's 2-D coercion (before 13), Dropout's ratio attribute (before 12).
// Ops that appear later, or whose older versions differ (Slice before 10
// took attributes), have their own floor, `kOpMinOpset`. Above 21, to onnx
// 1.23's 28, the mapped ops changed only by admitting new element types, plus
// attributes that apply to none of ours: Cast/CastLike `round_mode`
// (float8e8m0 targets only) and Range `stash_type` (float16/bfloat16 only).
// ReduceMax 20 admits bool, which the importer maps.
constexpr int64_t kMinOpset = 7;
constexpr int64_t kMaxOpset = 28;
const llvm::StringMap<int64_t> kOpMinOpset = {
    {"Expand", 8},       {"ConstantOfShape", 9},
    {"Erf", 9},          {"Where", 9},
    {"Slice", 10},       {"Range", 11},
    {"SplitToSequence", 11}, {"SequenceAt", 11},
    {"SoftmaxCrossEntropyLoss", 12}, {"GreaterOrEqual", 12},
    {"LessOrEqual", 12}, {"Trilu", 14},
    {"CastLike", 15},    {"LayerNormalization", 17},
    {"Gelu", 20}};
constexpr int64_t kWeightsAlignment = 64;
/// IR versions: from 3 (the first with opset_import) to onnx 1.23's 14, the
/// newest whose ModelProto fields the importer knows (onnx's checker refuses
/// newer ones too).
constexpr int64_t kMinIRVersion = 3;
constexpr int64_t kMaxIRVersion = 14;

const char *const kSupportedOps =
    "Add, And (constant), Cast, CastLike, Concat, Constant, ConstantOfShape, "
    "Cos, Div, Dropout (inference), Equal, Erf, Exp, Expand, Flatten, Gather, "
    "Gelu, Gemm, Greater, GreaterOrEqual, Identity, LayerNormalization, Less, "
    "LessOrEqual, Log, MatMul, Mul, Neg, Not (constant), Or (constant), Pow, "
    "Range (constant), Reciprocal, ReduceMax, ReduceMean, ReduceSum, Relu, "
    "Reshape, SequenceAt, Shape, Sigmoid, Sin, Slice, Softmax, "
    "SoftmaxCrossEntropyLoss, Split, SplitToSequence, Sqrt, Squeeze, Sub, "
    "Tanh, Transpose, Trilu (constant), Unsqueeze, Where";

/// The training-op domain, and the ops of it imported (in --forward mode).
constexpr const char *kTrainingDomain = "ai.onnx.preview.training";
const char *const kSupportedTrainingOps = "Adam";

/// How many inputs (optional ones included, "" for an absent one) and
/// outputs a default-domain op takes, as its ONNX schema says at `opset`.
struct Arity {
  int minInputs, maxInputs, maxOutputs;
};
constexpr int kVariadic = std::numeric_limits<int>::max();

std::optional<Arity> arityOf(StringRef op, int64_t opset) {
  // Ops whose axes or split moved from an attribute to an input.
  auto axesInput = [&](int64_t since) { return opset >= since ? 2 : 1; };
  return llvm::StringSwitch<std::optional<Arity>>(op)
      .Cases({"Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less",
              "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or"},
             Arity{2, 2, 1})
      .Cases({"Neg", "Relu", "Tanh", "Sqrt", "Reciprocal", "Exp", "Log", "Erf",
              "Sigmoid", "Cos", "Sin", "Not", "Identity", "Gelu", "Softmax",
              "Shape", "Flatten", "Transpose", "Cast", "ConstantOfShape"},
             Arity{1, 1, 1})
      .Cases({"CastLike", "Expand", "Gather", "MatMul", "Reshape",
              "SequenceAt"},
             Arity{2, 2, 1})
      .Case("Constant", Arity{0, 0, 1})
      .Case("Concat", Arity{1, kVariadic, 1})
      .Case("Dropout", Arity{1, opset >= 12 ? 3 : 1, 2})
      .Case("Gemm", Arity{2, 3, 1})
      .Case("LayerNormalization", Arity{2, 3, 3})
      .Cases({"Range", "Where"}, Arity{3, 3, 1})
      .Case("ReduceSum", Arity{1, axesInput(13), 1})
      .Cases({"ReduceMean", "ReduceMax"}, Arity{1, axesInput(18), 1})
      .Case("Squeeze", Arity{1, axesInput(13), 1})
      .Case("Unsqueeze", opset >= 13 ? Arity{2, 2, 1} : Arity{1, 1, 1})
      .Case("Slice", Arity{3, 5, 1})
      .Case("Split", Arity{1, axesInput(13), kVariadic})
      .Case("SplitToSequence", Arity{1, 2, 1})
      .Case("SoftmaxCrossEntropyLoss", Arity{2, 3, 2})
      .Case("Trilu", Arity{1, 2, 1})
      .Default(std::nullopt);
}

using AttrType = onnxpb::AttributeProto::AttributeType;

/// The type of attribute `name` of `op` where the importer reads it; nullopt
/// for an attribute it does not read.
std::optional<AttrType> attrTypeOf(StringRef op, StringRef name) {
  using A = onnxpb::AttributeProto;
  static const llvm::StringMap<llvm::StringMap<AttrType>> kAttrs = {
      {"Shape", {{"start", A::INT}, {"end", A::INT}}},
      {"Unsqueeze", {{"axes", A::INTS}}},
      {"Squeeze", {{"axes", A::INTS}}},
      {"ReduceSum", {{"axes", A::INTS}, {"keepdims", A::INT},
                     {"noop_with_empty_axes", A::INT}}},
      {"ReduceMean", {{"axes", A::INTS}, {"keepdims", A::INT},
                      {"noop_with_empty_axes", A::INT}}},
      {"ReduceMax", {{"axes", A::INTS}, {"keepdims", A::INT},
                     {"noop_with_empty_axes", A::INT}}},
      {"Reshape", {{"allowzero", A::INT}}},
      {"Flatten", {{"axis", A::INT}}},
      {"Transpose", {{"perm", A::INTS}}},
      {"Split", {{"axis", A::INT}, {"split", A::INTS},
                 {"num_outputs", A::INT}}},
      {"SplitToSequence", {{"axis", A::INT}, {"keepdims", A::INT}}},
      {"Cast", {{"to", A::INT}}},
      {"Concat", {{"axis", A::INT}}},
      {"Gather", {{"axis", A::INT}}},
      {"ConstantOfShape", {{"value", A::TENSOR}}},
      {"Trilu", {{"upper", A::INT}}},
      {"Constant", {{"value", A::TENSOR}, {"value_float", A::FLOAT},
                    {"value_floats", A::FLOATS}, {"value_int", A::INT},
                    {"value_ints", A::INTS}}},
      {"Adam", {{"alpha", A::FLOAT}, {"beta", A::FLOAT}, {"epsilon", A::FLOAT},
                {"norm_coefficient", A::FLOAT},
                {"norm_coefficient_post", A::FLOAT}}},
      {"SoftmaxCrossEntropyLoss", {{"reduction", A::STRING},
                                   {"ignore_index", A::INT}}},
      {"Gelu", {{"approximate", A::STRING}}},
      {"Softmax", {{"axis", A::INT}}},
      {"Gemm", {{"alpha", A::FLOAT}, {"beta", A::FLOAT}, {"transA", A::INT},
                {"transB", A::INT}}},
      {"LayerNormalization", {{"axis", A::INT}, {"epsilon", A::FLOAT},
                              {"stash_type", A::INT}}},
  };
  auto op_ = kAttrs.find(op);
  if (op_ == kAttrs.end())
    return std::nullopt;
  auto it = op_->second.find(name);
  if (it == op_->second.end())
    return std::nullopt;
  return it->second;
}

std::string shapeStr(ArrayRef<int64_t> shape) {
  std::string s = "[";
  llvm::raw_string_ostream os(s);
  llvm::interleaveComma(shape, os);
  os << "]";
  return s;
}

std::string dtypeName(int32_t dtype) {
  if (onnxpb::TensorProto_DataType_IsValid(dtype))
    return onnxpb::TensorProto_DataType_Name(
        static_cast<onnxpb::TensorProto_DataType>(dtype));
  return "dtype #" + std::to_string(dtype);
}

bool isDefaultDomain(StringRef domain) {
  return domain.empty() || domain == "ai.onnx";
}

/// Elements of `shape`, or nullopt when a dimension is negative or the count
/// overflows (ConstantOfShape and Expand take their shapes from data).
std::optional<int64_t> numElementsOf(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || llvm::MulOverflow(n, d, n))
      return std::nullopt;
  return n;
}

SmallVector<int64_t> stridesOf(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t d = (int64_t)shape.size() - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

/// For each element of a tensor of shape `shape` (row-major), the flat index
/// `base + sum(i_d * strides[d])`: one description for slices, transposes
/// and broadcasts (stride 0) of a constant.
std::vector<int64_t> stridedSources(ArrayRef<int64_t> shape, int64_t base,
                                    ArrayRef<int64_t> strides) {
  int64_t n = *numElementsOf(shape);
  std::vector<int64_t> out(n);
  SmallVector<int64_t> idx(shape.size(), 0);
  int64_t src = base;
  for (int64_t k = 0; k < n; ++k) {
    out[k] = src;
    for (int64_t d = (int64_t)shape.size() - 1; d >= 0; --d) {
      src += strides[d];
      if (++idx[d] < shape[d])
        break;
      src -= strides[d] * shape[d];
      idx[d] = 0;
    }
  }
  return out;
}

/// Strides that read a tensor of shape `in` numpy-broadcast to `out`.
SmallVector<int64_t> broadcastStrides(ArrayRef<int64_t> in,
                                      ArrayRef<int64_t> out) {
  SmallVector<int64_t> inStrides = stridesOf(in), strides(out.size(), 0);
  size_t off = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d)
    strides[off + d] = in[d] == 1 ? 0 : inStrides[d];
  return strides;
}

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

/// An integer converted to `dtype` the way a C cast does it (ONNX Cast).
int64_t wrapInt(int32_t dtype, int64_t v) {
  if (dtype == onnxpb::TensorProto::INT32)
    return (int32_t)(uint32_t)(uint64_t)v;
  if (dtype == onnxpb::TensorProto::BOOL)
    return v != 0;
  return v;
}

/// Diagnostics about the model point at the file (ONNX has no source lines).
Location modelFileLoc(MLIRContext &ctx, StringRef path) {
  return FileLineColLoc::get(&ctx, path, 0, 0);
}

/// A slice in train.slice's form: one start and step per dimension.
struct SliceSpec {
  SmallVector<int64_t> starts, steps, shape;
};

class Importer {
public:
  Importer(MLIRContext &ctx, StringRef modelPath,
           const ONNXImportOptions &opts)
      : ctx(ctx), builder(&ctx), modelPath(modelPath), opts(opts),
        fileLoc(modelFileLoc(ctx, modelPath)) {
    modelDir = llvm::sys::path::parent_path(modelPath).str();
  }

  OwningOpRef<ModuleOp> import(const onnxpb::ModelProto &model);

private:
  //===--- diagnostics ---===//
  InFlightDiagnostic error() { return emitError(fileLoc); }
  InFlightDiagnostic nodeError(const onnxpb::NodeProto &node) {
    return error() << "node '" << nodeName(node) << "' (" << node.op_type()
                   << "): ";
  }
  std::string nodeName(const onnxpb::NodeProto &node) const {
    return node.name().empty() ? "#" + std::to_string(nodeIndex)
                               : node.name();
  }

  //===--- tensors and types ---===//
  Type elementType(int32_t dtype);
  LogicalResult readTensor(const onnxpb::TensorProto &t, StringRef what,
                           std::string &bytes, SmallVectorImpl<int64_t> &shape);
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
  LogicalResult importSequenceAt(const onnxpb::NodeProto &node, Location loc);
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
  LogicalResult importConstant(const onnxpb::NodeProto &node);
  LogicalResult importReduce(const onnxpb::NodeProto &node, Location loc);
  LogicalResult importSoftmaxCrossEntropy(const onnxpb::NodeProto &node,
                                          Location loc);
  LogicalResult importAdam(const onnxpb::NodeProto &node, Location loc);
  template <typename OpTy>
  FailureOr<Value> buildInferred(const onnxpb::NodeProto &node, Location loc,
                                 ValueRange operands,
                                 ArrayRef<NamedAttribute> attrs = {});
  FailureOr<Value> requireFloat(const onnxpb::NodeProto &node, int idx,
                                StringRef role);

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
  std::string weights;         // the weights file's bytes
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

} // namespace

//===----------------------------------------------------------------------===//
// Tensors and types
//===----------------------------------------------------------------------===//

Type Importer::elementType(int32_t dtype) {
  switch (dtype) {
  case onnxpb::TensorProto::FLOAT:
    return builder.getF32Type();
  case onnxpb::TensorProto::INT64:
    return builder.getI64Type();
  case onnxpb::TensorProto::INT32:
    return builder.getI32Type();
  case onnxpb::TensorProto::BOOL:
    return builder.getI1Type();
  default:
    return {};
  }
}

static int64_t elementBytes(int32_t dtype) {
  switch (dtype) {
  case onnxpb::TensorProto::INT64:
    return 8;
  case onnxpb::TensorProto::BOOL:
    return 1;
  default:
    return 4;
  }
}

/// External data stays inside the model's directory, as onnx's checker
/// requires: no absolute path, no `..`, and nothing (through a symlink) that
/// resolves outside the directory; and it is a regular file (a FIFO would
/// block the read forever). Otherwise a model could copy any file the user
/// can read (/etc/passwd, ~/.ssh) into the executable's weights.
LogicalResult Importer::checkExternalLocation(const onnxpb::TensorProto &t,
                                              StringRef what,
                                              StringRef location,
                                              StringRef file) {
  auto refuse = [&]() {
    return error() << what << " '" << t.name() << "': external data location '"
                   << location << "' ";
  };
  namespace path = llvm::sys::path;
  if (path::is_absolute(location) ||
      path::is_absolute(location, path::Style::windows) ||
      location.starts_with("~"))
    return refuse() << "is an absolute path; external data must be a "
                       "relative path inside the model's directory";
  for (StringRef part : llvm::make_range(path::begin(location),
                                         path::end(location)))
    if (part == "..")
      return refuse() << "contains '..'; external data must be a relative "
                         "path inside the model's directory";
  SmallString<256> real, realDir;
  if (llvm::sys::fs::real_path(file, real))
    return success(); // missing: the read below names the file
  if (std::error_code ec = llvm::sys::fs::real_path(
          modelDir.empty() ? StringRef(".") : StringRef(modelDir), realDir))
    return refuse() << "cannot be resolved: the model's directory: "
                    << ec.message();
  StringRef rel = StringRef(real);
  if (!rel.consume_front(realDir) || !(rel.empty() || path::is_separator(rel[0])))
    return refuse() << "resolves to '" << real
                    << "', outside the model's directory '" << realDir
                    << "' (through a symbolic link); external data must lie "
                       "inside it";
  llvm::sys::fs::file_status status;
  if (std::error_code ec = llvm::sys::fs::status(real, status))
    return refuse() << "cannot be read: " << ec.message();
  if (status.type() != llvm::sys::fs::file_type::regular_file)
    return refuse() << "is not a regular file";
  return success();
}

/// Reads a tensor's elements, whatever the encoding, as raw little-endian
/// bytes of its element type.
LogicalResult Importer::readTensor(const onnxpb::TensorProto &t,
                                   StringRef what, std::string &bytes,
                                   SmallVectorImpl<int64_t> &shape) {
  int32_t dtype = t.data_type();
  if (!elementType(dtype))
    return error() << what << " '" << t.name() << "' has element type "
                   << dtypeName(dtype)
                   << "; Spillway supports FLOAT (float32), INT64, INT32 and "
                      "BOOL tensors";
  for (int64_t d : t.dims()) {
    if (d < 0)
      return error() << what << " '" << t.name() << "' has negative dimension "
                     << d;
    shape.push_back(d);
  }
  // The data lives in one place: raw_data, the typed field of the element
  // type, or an external file. Two (raw_data and float_data, say) disagree
  // on which is the tensor; onnx's checker refuses that, and so does this.
  SmallVector<StringRef> fields;
  if (t.has_raw_data())
    fields.push_back("raw_data");
  for (auto [size, field] : {std::pair<int, StringRef>{t.float_data_size(),
                                                        "float_data"},
                             {t.int32_data_size(), "int32_data"},
                             {t.int64_data_size(), "int64_data"},
                             {t.double_data_size(), "double_data"},
                             {t.uint64_data_size(), "uint64_data"},
                             {t.string_data_size(), "string_data"}})
    if (size)
      fields.push_back(field);
  StringRef typedField = dtype == onnxpb::TensorProto::FLOAT   ? "float_data"
                         : dtype == onnxpb::TensorProto::INT64 ? "int64_data"
                                                               : "int32_data";
  bool external = t.data_location() == onnxpb::TensorProto::EXTERNAL;
  if (external && !fields.empty())
    return error() << what << " '" << t.name()
                   << "' has external data and also " << fields[0]
                   << "; a tensor keeps its data in one place";
  if (fields.size() > 1)
    return error() << what << " '" << t.name() << "' has both " << fields[0]
                   << " and " << fields[1]
                   << "; a tensor keeps its data in one place";
  if (fields.size() == 1 && fields[0] != "raw_data" && fields[0] != typedField)
    return error() << what << " '" << t.name() << "' of "
                   << dtypeName(dtype) << " keeps its data in " << fields[0]
                   << "; " << dtypeName(dtype) << " data goes in "
                   << typedField << " or raw_data";
  std::optional<int64_t> count = numElementsOf(shape);
  int64_t expected;
  if (!count || llvm::MulOverflow(*count, elementBytes(dtype), expected))
    return error() << what << " '" << t.name() << "' of shape "
                   << shapeStr(shape) << " is too large to address";

  if (t.data_location() == onnxpb::TensorProto::EXTERNAL) {
    std::string location;
    int64_t offset = 0, length = -1;
    for (const auto &kv : t.external_data()) {
      StringRef key = kv.key(), value = kv.value();
      if (key == "location") {
        location = kv.value();
      } else if (key == "offset" || key == "length") {
        int64_t n;
        if (value.getAsInteger(10, n) || n < 0)
          return error() << what << " '" << t.name() << "': external data "
                         << key << " '" << value << "' is not a valid size";
        (key == "offset" ? offset : length) = n;
      }
    }
    if (location.empty())
      return error() << what << " '" << t.name()
                     << "' has external data without a location";
    SmallString<256> file(modelDir);
    llvm::sys::path::append(file, location);
    if (failed(checkExternalLocation(t, what, location, file)))
      return failure();
    if (length >= 0 && length != expected)
      return error() << what << " '" << t.name() << "': external data length "
                     << length << " does not match its shape "
                     << shapeStr(shape) << " of " << dtypeName(dtype) << " ("
                     << expected << " bytes)";
    auto buf = llvm::MemoryBuffer::getFile(file, /*IsText=*/false,
                                           /*RequiresNullTerminator=*/false);
    if (!buf)
      return error() << what << " '" << t.name()
                     << "': cannot read external data file '" << file
                     << "': " << buf.getError().message();
    uint64_t size = (*buf)->getBufferSize();
    if ((uint64_t)offset > size || size - offset < (uint64_t)expected)
      return error() << what << " '" << t.name() << "': external data file '"
                     << file << "' has " << size << " bytes; the tensor needs "
                     << expected << " bytes at offset " << offset;
    bytes.assign((*buf)->getBufferStart() + offset, expected);
    return success();
  }

  auto sizeMismatch = [&](int64_t got) {
    return error() << what << " '" << t.name() << "' holds " << got
                   << " bytes of data but its shape " << shapeStr(shape)
                   << " of " << dtypeName(dtype) << " needs " << expected;
  };
  if (t.has_raw_data()) {
    if ((int64_t)t.raw_data().size() != expected)
      return sizeMismatch(t.raw_data().size());
    bytes = t.raw_data();
    return success();
  }
  // Typed fields; the host is little-endian (x86-64, aarch64), as the file.
  auto copy = [&](const auto &field, auto tag) -> LogicalResult {
    using T = decltype(tag);
    if ((int64_t)(field.size() * sizeof(T)) != expected)
      return sizeMismatch(field.size() * sizeof(T));
    bytes.resize(expected);
    for (int i = 0; i < field.size(); ++i) {
      T v = static_cast<T>(field.Get(i));
      std::memcpy(&bytes[i * sizeof(T)], &v, sizeof(T));
    }
    return success();
  };
  switch (dtype) {
  case onnxpb::TensorProto::FLOAT:
    return copy(t.float_data(), float());
  case onnxpb::TensorProto::INT64:
    return copy(t.int64_data(), int64_t());
  case onnxpb::TensorProto::BOOL:
    return copy(t.int32_data(), uint8_t());
  default:
    return copy(t.int32_data(), int32_t());
  }
}

FailureOr<ConstTensor> Importer::toConst(const onnxpb::TensorProto &t,
                                         StringRef what) {
  ConstTensor c;
  std::string bytes;
  if (failed(readTensor(t, what, bytes, c.shape)))
    return failure();
  c.dtype = t.data_type();
  size_t n = bytes.size() / elementBytes(c.dtype);
  for (size_t i = 0; i < n; ++i) {
    const char *p = bytes.data() + i * elementBytes(c.dtype);
    if (c.dtype == onnxpb::TensorProto::FLOAT) {
      float f;
      std::memcpy(&f, p, 4);
      c.floats.push_back(f);
    } else if (c.dtype == onnxpb::TensorProto::INT64) {
      int64_t v;
      std::memcpy(&v, p, 8);
      c.ints.push_back(v);
    } else if (c.dtype == onnxpb::TensorProto::BOOL) {
      c.ints.push_back(*p != 0);
    } else {
      int32_t v;
      std::memcpy(&v, p, 4);
      c.ints.push_back(v);
    }
  }
  return c;
}

LogicalResult Importer::declareInitializer(const onnxpb::TensorProto &t) {
  if (t.name().empty())
    return error() << "an initializer has no name";
  if (isKnown(t.name()))
    return error() << "initializer '" << t.name() << "' is defined twice";
  if (t.data_type() != onnxpb::TensorProto::FLOAT ||
      constantInitializers.contains(t.name())) {
    // Integer and bool initializers are constants (shapes, axes, index
    // tables, masks), and so are the float ones the user froze.
    auto c = toConst(t, "initializer");
    if (failed(c))
      return failure();
    consts[t.name()] = std::move(*c);
    return success();
  }
  std::string bytes;
  SmallVector<int64_t> shape;
  if (failed(readTensor(t, "initializer", bytes, shape)))
    return failure();
  weights.resize(llvm::alignTo(weights.size(), kWeightsAlignment), '\0');
  int64_t offset = weights.size();
  weights += bytes;
  auto type = RankedTensorType::get(shape, builder.getF32Type());
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPoint(paramBlock, paramBlock->end());
  params[t.name()] = train::ParamOp::create(
      builder, NameLoc::get(builder.getStringAttr(t.name())), t.name(), type,
      offset);
  return success();
}

LogicalResult Importer::declareInput(const onnxpb::ValueInfoProto &info,
                                     SmallVectorImpl<Type> &argTypes) {
  StringRef name = info.name();
  if (!info.type().has_tensor_type())
    return error() << "input '" << name << "' is not a tensor";
  const auto &tt = info.type().tensor_type();
  Type elt = elementType(tt.elem_type());
  if (!elt)
    return error() << "input '" << name << "' has element type "
                   << dtypeName(tt.elem_type())
                   << "; Spillway supports FLOAT (float32), INT64, INT32 and "
                      "BOOL";
  if (!tt.has_shape())
    return error() << "input '" << name
                   << "' has no shape; Spillway needs static input shapes";
  SmallVector<int64_t> shape;
  for (auto [i, dim] : llvm::enumerate(tt.shape().dim())) {
    if (dim.has_dim_value()) {
      if (dim.dim_value() < 0)
        return error() << "input '" << name << "' dimension " << i
                       << " is negative (" << dim.dim_value() << ")";
      shape.push_back(dim.dim_value());
      continue;
    }
    if (!dim.has_dim_param() || dim.dim_param().empty())
      return error() << "input '" << name << "' dimension " << i
                     << " has no size; Spillway needs static input shapes "
                        "(give the dimension a name in the model and pass "
                        "--bind NAME=INT)";
    StringRef param = dim.dim_param();
    auto it = opts.dimBindings.find(param);
    if (it == opts.dimBindings.end())
      return error() << "input '" << name << "' dimension " << i
                     << " is symbolic ('" << param << "'); pass --bind "
                     << param << "=INT";
    usedBindings.insert(param);
    shape.push_back(it->second);
  }
  if (!numElementsOf(shape))
    return error() << "input '" << name << "' of shape " << shapeStr(shape)
                   << " has more elements than fit in 64 bits";
  argTypes.push_back(RankedTensorType::get(shape, elt));
  return success();
}

LogicalResult
Importer::checkInputMatchesInitializer(const onnxpb::ValueInfoProto &in) {
  StringRef name = in.name();
  RankedTensorType init;
  if (auto it = params.find(name); it != params.end())
    init = it->second.getTensorType();
  else if (const ConstTensor *c = getConst(name))
    init = RankedTensorType::get(c->shape, elementType(c->dtype));
  auto mismatch = [&](StringRef what) {
    return error() << "graph input '" << name << "' has the name of an "
                   << "initializer of type " << init << " but " << what
                   << "; rename the input or the initializer (an input "
                      "listed with an initializer's name is that "
                      "initializer)";
  };
  if (!in.type().has_tensor_type())
    return mismatch("is not a tensor");
  const auto &tt = in.type().tensor_type();
  if (tt.elem_type() != onnxpb::TensorProto::UNDEFINED &&
      elementType(tt.elem_type()) != init.getElementType())
    return mismatch("is declared " + dtypeName(tt.elem_type()));
  if (!tt.has_shape())
    return success();
  if (tt.shape().dim_size() != init.getRank())
    return mismatch("has rank " + std::to_string(tt.shape().dim_size()));
  for (auto [i, dim] : llvm::enumerate(tt.shape().dim()))
    if (dim.has_dim_value() && dim.dim_value() != init.getDimSize(i))
      return mismatch("has dimension " + std::to_string(i) + " of size " +
                      std::to_string(dim.dim_value()));
  return success();
}

//===----------------------------------------------------------------------===//
// Values
//===----------------------------------------------------------------------===//

FailureOr<Value> Importer::getValue(const onnxpb::NodeProto &node, int idx) {
  if (!hasInput(node, idx))
    return nodeError(node) << "input " << idx << " is missing", failure();
  return getValue(node, node.input(idx));
}

/// Where parameter reads and constants go: the start of the function, after
/// the ones already there, so each is created once and dominates every use.
static void setInsertionPointToPrologue(OpBuilder &builder, Block *entry) {
  builder.setInsertionPointToStart(entry);
  for (Operation &op : *entry)
    if (isa<train::ParamValueOp, train::ConstantOp>(op))
      builder.setInsertionPointAfter(&op);
}

FailureOr<Value>
Importer::materialize(const ConstTensor &c, StringRef name,
                      llvm::function_ref<InFlightDiagnostic()> err) {
  bool splat = c.numElements() > 0 && c.isSplat();
  if (!splat && c.numElements() > opts.maxInlineConstantElements)
    return err() << "constant '" << name << "' (" << shapeStr(c.shape)
                 << ", " << c.numElements()
                 << " elements) is larger than the "
                 << opts.maxInlineConstantElements
                 << " elements Spillway inlines; pass "
                    "--max-inline-constant-elements="
                 << c.numElements()
                 << " (or make it a float initializer, or a graph input)",
           failure();
  auto type = RankedTensorType::get(c.shape, elementType(c.dtype));
  size_t n = splat ? 1 : c.numElements();
  DenseElementsAttr attr;
  if (c.isFloat()) {
    attr = DenseElementsAttr::get(type, ArrayRef<float>(c.floats).take_front(n));
  } else if (c.dtype == onnxpb::TensorProto::INT64) {
    attr = DenseElementsAttr::get(type, ArrayRef<int64_t>(c.ints).take_front(n));
  } else if (c.isBool()) {
    SmallVector<bool> v(c.ints.begin(), c.ints.begin() + n);
    attr = DenseElementsAttr::get(type, ArrayRef<bool>(v));
  } else {
    SmallVector<int32_t> v(c.ints.begin(), c.ints.begin() + n);
    attr = DenseElementsAttr::get(type, ArrayRef<int32_t>(v));
  }
  OpBuilder::InsertionGuard guard(builder);
  setInsertionPointToPrologue(builder, builder.getInsertionBlock());
  return values[name] = train::ConstantOp::create(
             builder, NameLoc::get(builder.getStringAttr(name)), attr);
}

FailureOr<Value> Importer::getValue(const onnxpb::NodeProto &node,
                                    StringRef name) {
  if (Value v = values.lookup(name))
    return v;
  auto it = params.find(name);
  if (it != params.end()) {
    OpBuilder::InsertionGuard guard(builder);
    setInsertionPointToPrologue(builder, builder.getInsertionBlock());
    train::ParamOp param = it->second;
    Value v = train::ParamValueOp::create(builder, param.getLoc(),
                                          param.getTensorType(),
                                          param.getSymName());
    return values[name] = v;
  }
  if (const ConstTensor *c = getConst(name))
    return materialize(*c, name, [&] { return nodeError(node); });
  return nodeError(node) << "input '" << name
                         << "' is not a graph input, initializer or the "
                            "output of an earlier node",
         failure();
}

FailureOr<RankedTensorType>
Importer::inputType(const onnxpb::NodeProto &node, int idx) {
  if (!hasInput(node, idx))
    return nodeError(node) << "input " << idx << " is missing", failure();
  StringRef name = node.input(idx);
  if (Value v = values.lookup(name))
    return cast<RankedTensorType>(v.getType());
  if (auto it = params.find(name); it != params.end())
    return it->second.getTensorType();
  if (const ConstTensor *c = getConst(name))
    return RankedTensorType::get(c->shape, elementType(c->dtype));
  return nodeError(node) << "input '" << name
                         << "' is not a graph input, initializer or the "
                            "output of an earlier node",
         failure();
}

FailureOr<Value> Importer::requireFloat(const onnxpb::NodeProto &node, int idx,
                                        StringRef role) {
  auto v = getValue(node, idx);
  if (failed(v))
    return failure();
  auto type = cast<RankedTensorType>(v->getType());
  if (!type.getElementType().isF32())
    return nodeError(node) << role << " must be float32, got "
                           << type.getElementType(),
           failure();
  return v;
}

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

//===----------------------------------------------------------------------===//
// Shape computations (shared by folding and emission)
//===----------------------------------------------------------------------===//

static const onnxpb::AttributeProto *findAttr(const onnxpb::NodeProto &node,
                                              StringRef name) {
  for (const auto &a : node.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}
static int64_t intAttr(const onnxpb::NodeProto &node, StringRef name,
                       int64_t dflt) {
  const auto *a = findAttr(node, name);
  return a ? a->i() : dflt;
}
static float floatAttr(const onnxpb::NodeProto &node, StringRef name,
                       float dflt) {
  const auto *a = findAttr(node, name);
  return a ? a->f() : dflt;
}
static std::string strAttr(const onnxpb::NodeProto &node, StringRef name,
                           StringRef dflt) {
  const auto *a = findAttr(node, name);
  return a ? a->s() : dflt.str();
}

FailureOr<const ConstTensor *>
Importer::constInput(const onnxpb::NodeProto &node, int idx, StringRef role) {
  if (!hasInput(node, idx))
    return nodeError(node) << role << " (input " << idx << ") is missing",
           failure();
  if (const ConstTensor *c = getConst(node.input(idx)))
    return c;
  return nodeError(node) << role << " '" << node.input(idx)
                         << "' must be a compile-time constant (an "
                            "initializer, a Constant node, or shape "
                            "arithmetic on them that Spillway folds); "
                            "Spillway needs static shapes",
         failure();
}

FailureOr<SmallVector<int64_t>>
Importer::constInts(const onnxpb::NodeProto &node, int idx, StringRef role) {
  auto c = constInput(node, idx, role);
  if (failed(c))
    return failure();
  if ((*c)->isFloat() || (*c)->shape.size() > 1)
    return nodeError(node) << role << " '" << node.input(idx)
                           << "' must be a 1-D integer tensor, got "
                           << shapeStr((*c)->shape) << " of "
                           << dtypeName((*c)->dtype),
           failure();
  return SmallVector<int64_t>((*c)->ints.begin(), (*c)->ints.end());
}

/// `axes`: an attribute before opset `inputSince`, input `inputIdx` from it.
/// Empty when absent.
FailureOr<SmallVector<int64_t>>
Importer::axesOf(const onnxpb::NodeProto &node, int inputIdx,
                 int64_t inputSince) {
  if (opset >= inputSince) {
    if (!hasInput(node, inputIdx))
      return SmallVector<int64_t>();
    return constInts(node, inputIdx, "axes");
  }
  SmallVector<int64_t> axes;
  if (const auto *a = findAttr(node, "axes"))
    axes.assign(a->ints().begin(), a->ints().end());
  return axes;
}

/// Normalizes `axes` against `rank`, refusing out-of-range and repeated axes.
static LogicalResult normalizeAxes(SmallVectorImpl<int64_t> &axes,
                                   int64_t rank,
                                   llvm::function_ref<InFlightDiagnostic()> err) {
  SmallVector<int64_t> seen;
  for (int64_t &a : axes) {
    int64_t n = a < 0 ? a + rank : a;
    if (n < 0 || n >= rank)
      return err() << "axis " << a << " out of range for rank " << rank;
    if (llvm::is_contained(seen, n))
      return err() << "axis " << a << " is repeated";
    seen.push_back(n);
    a = n;
  }
  return success();
}

FailureOr<SmallVector<int64_t>>
Importer::reshapeShape(const onnxpb::NodeProto &node, ArrayRef<int64_t> in) {
  auto target = constInts(node, 1, "shape");
  if (failed(target))
    return failure();
  bool allowZero = intAttr(node, "allowzero", 0) != 0;
  SmallVector<int64_t> shape;
  int64_t inferIdx = -1, known = 1;
  for (auto [i, entry] : llvm::enumerate(*target)) {
    int64_t d = entry;
    if (d == 0 && !allowZero) {
      if ((int64_t)i >= (int64_t)in.size())
        return nodeError(node) << "shape entry " << i
                               << " is 0 (copy) but the input has rank "
                               << in.size(),
               failure();
      d = in[i];
    } else if (d == -1) {
      if (inferIdx >= 0)
        return nodeError(node) << "shape " << shapeStr(*target)
                               << " has more than one -1",
               failure();
      inferIdx = i;
      shape.push_back(-1);
      continue;
    } else if (d < -1) {
      return nodeError(node) << "shape entry " << i << " is " << d, failure();
    }
    shape.push_back(d);
    if (llvm::MulOverflow(known, d, known))
      return nodeError(node) << "shape " << shapeStr(*target)
                             << " has more elements than fit in 64 bits",
             failure();
  }
  int64_t numel = *numElementsOf(in);
  if (inferIdx >= 0) {
    if (known == 0 || numel % known != 0)
      return nodeError(node) << "cannot reshape " << shapeStr(in) << " to "
                             << shapeStr(*target),
             failure();
    shape[inferIdx] = numel / known;
  } else if (known != numel) {
    return nodeError(node) << "cannot reshape " << shapeStr(in) << " ("
                           << numel << " elements) to " << shapeStr(shape)
                           << " (" << known << " elements)",
           failure();
  }
  return shape;
}

FailureOr<SmallVector<int64_t>>
Importer::unsqueezeShape(const onnxpb::NodeProto &node, ArrayRef<int64_t> in) {
  auto axes = axesOf(node, 1, 13);
  if (failed(axes))
    return failure();
  if (axes->empty())
    return nodeError(node) << "axes are missing", failure();
  int64_t rank = in.size() + axes->size();
  if (failed(normalizeAxes(*axes, rank, [&] { return nodeError(node); })))
    return failure();
  SmallVector<int64_t> shape;
  const int64_t *next = in.begin();
  for (int64_t d = 0; d < rank; ++d)
    shape.push_back(llvm::is_contained(*axes, d) ? 1 : *next++);
  return shape;
}

FailureOr<SmallVector<int64_t>>
Importer::squeezeShape(const onnxpb::NodeProto &node, ArrayRef<int64_t> in) {
  auto axes = axesOf(node, 1, 13);
  if (failed(axes) ||
      failed(normalizeAxes(*axes, in.size(), [&] { return nodeError(node); })))
    return failure();
  SmallVector<int64_t> shape;
  for (auto [d, size] : llvm::enumerate(in)) {
    bool listed = llvm::is_contained(*axes, (int64_t)d);
    if (listed && size != 1)
      return nodeError(node) << "cannot squeeze axis " << d << " of shape "
                             << shapeStr(in) << ": its size is " << size,
             failure();
    if (!listed && !(axes->empty() && size == 1))
      shape.push_back(size);
  }
  return shape;
}

FailureOr<SmallVector<int64_t>>
Importer::flattenShape(const onnxpb::NodeProto &node, ArrayRef<int64_t> in) {
  int64_t rank = in.size(), axis = intAttr(node, "axis", 1);
  if (axis < -rank || axis > rank)
    return nodeError(node) << "axis " << axis << " out of range for rank "
                           << rank,
           failure();
  if (axis < 0)
    axis += rank;
  return SmallVector<int64_t>{*numElementsOf(in.take_front(axis)),
                              *numElementsOf(in.drop_front(axis))};
}

/// Expand broadcasts bidirectionally: the result has the broadcast of the
/// input's shape and the shape operand.
FailureOr<SmallVector<int64_t>>
Importer::expandShape(const onnxpb::NodeProto &node, ArrayRef<int64_t> in) {
  auto target = constInts(node, 1, "shape");
  if (failed(target))
    return failure();
  auto shape = train::broadcastShapes(in, *target);
  if (failed(shape) || !numElementsOf(*shape))
    return nodeError(node) << "input shape " << shapeStr(in)
                           << " does not broadcast with " << shapeStr(*target),
           failure();
  return *shape;
}

FailureOr<SmallVector<int64_t>>
Importer::transposePerm(const onnxpb::NodeProto &node, int64_t rank) {
  SmallVector<int64_t> perm;
  if (const auto *a = findAttr(node, "perm"))
    perm.assign(a->ints().begin(), a->ints().end());
  else
    for (int64_t i = rank - 1; i >= 0; --i)
      perm.push_back(i);
  SmallVector<int64_t> sorted(perm);
  llvm::sort(sorted);
  if (sorted != llvm::to_vector(llvm::seq<int64_t>(0, rank)))
    return nodeError(node) << "perm " << shapeStr(perm)
                           << " is not a permutation of 0.." << rank - 1,
           failure();
  return perm;
}

/// ONNX Slice in train.slice's form: negative starts/ends count from the end,
/// out-of-range ones clamp (to [0, d] going forward, [-1, d-1] going back),
/// and every dimension gets an explicit start and step.
FailureOr<SliceSpec> Importer::sliceSpec(const onnxpb::NodeProto &node,
                                         ArrayRef<int64_t> in) {
  int64_t rank = in.size();
  auto starts = constInts(node, 1, "starts");
  auto ends = constInts(node, 2, "ends");
  if (failed(starts) || failed(ends))
    return failure();
  size_t n = starts->size();
  if (ends->size() != n)
    return nodeError(node) << "starts has " << n << " entries but ends has "
                           << ends->size(),
           failure();
  SmallVector<int64_t> axes, steps(n, 1);
  if (hasInput(node, 3)) {
    auto a = constInts(node, 3, "axes");
    if (failed(a))
      return failure();
    axes = *a;
  } else {
    axes = llvm::to_vector(llvm::seq<int64_t>(0, n));
  }
  if (hasInput(node, 4)) {
    auto s = constInts(node, 4, "steps");
    if (failed(s))
      return failure();
    steps = *s;
  }
  if (axes.size() != n || steps.size() != n)
    return nodeError(node) << "starts, ends, axes and steps need the same "
                              "number of entries ("
                           << n << ", " << ends->size() << ", " << axes.size()
                           << ", " << steps.size() << ")",
           failure();
  if (failed(normalizeAxes(axes, rank, [&] { return nodeError(node); })))
    return failure();
  SliceSpec spec;
  spec.starts.assign(rank, 0);
  spec.steps.assign(rank, 1);
  spec.shape.assign(in.begin(), in.end());
  for (size_t i = 0; i < n; ++i) {
    int64_t d = in[axes[i]], step = steps[i];
    int64_t start = (*starts)[i], end = (*ends)[i];
    if (step == 0)
      return nodeError(node) << "step for axis " << axes[i] << " is 0",
             failure();
    if (start < 0)
      start += d;
    if (end < 0)
      end += d;
    int64_t count;
    if (step > 0) {
      start = std::clamp<int64_t>(start, 0, d);
      end = std::clamp<int64_t>(end, 0, d);
      // Written so that no step, however large, overflows.
      count = end > start ? (end - start - 1) / step + 1 : 0;
    } else {
      start = std::clamp<int64_t>(start, 0, d - 1);
      end = std::clamp<int64_t>(end, -1, d - 1);
      count = start > end
                  ? (int64_t)((uint64_t)(start - end - 1) / -(uint64_t)step + 1)
                  : 0;
    }
    spec.starts[axes[i]] = count ? start : 0;
    spec.steps[axes[i]] = step;
    spec.shape[axes[i]] = count;
  }
  return spec;
}

/// Consecutive slices of `in` along `axis` with the given sizes.
static SmallVector<SliceSpec> slicesAlong(ArrayRef<int64_t> in, int64_t axis,
                                         ArrayRef<int64_t> sizes) {
  SmallVector<SliceSpec> specs;
  int64_t offset = 0;
  for (int64_t s : sizes) {
    SliceSpec spec;
    spec.starts.assign(in.size(), 0);
    spec.steps.assign(in.size(), 1);
    spec.shape.assign(in.begin(), in.end());
    spec.starts[axis] = s ? offset : 0;
    spec.shape[axis] = s;
    offset += s;
    specs.push_back(std::move(spec));
  }
  return specs;
}

/// Split's outputs as slices: sizes from the `split` input (opset 13+) or
/// attribute, else `num_outputs` (opset 18+, the last part may be smaller),
/// else equal parts, one per output.
FailureOr<SmallVector<SliceSpec>>
Importer::splitSpecs(const onnxpb::NodeProto &node, ArrayRef<int64_t> in) {
  int64_t rank = in.size();
  SmallVector<int64_t> axisVec = {intAttr(node, "axis", 0)};
  if (failed(normalizeAxes(axisVec, rank, [&] { return nodeError(node); })))
    return failure();
  int64_t axis = axisVec[0], d = in[axis];
  int64_t numOutputs = node.output_size();
  SmallVector<int64_t> sizes;
  if (hasInput(node, 1)) {
    auto s = constInts(node, 1, "split");
    if (failed(s))
      return failure();
    sizes = *s;
  } else if (const auto *a = findAttr(node, "split")) {
    sizes.assign(a->ints().begin(), a->ints().end());
  } else {
    int64_t parts = intAttr(node, "num_outputs", numOutputs);
    if (parts != numOutputs)
      return nodeError(node) << "num_outputs is " << parts << " but the node "
                             << "has " << numOutputs << " outputs",
             failure();
    if (findAttr(node, "num_outputs")) {
      int64_t size = llvm::divideCeil(d, parts);
      for (int64_t i = 0, left = d; i < parts; ++i, left -= size)
        sizes.push_back(std::max<int64_t>(std::min(size, left), 0));
    } else {
      if (d % parts != 0)
        return nodeError(node) << "cannot split dimension " << axis
                               << " of size " << d << " into " << parts
                               << " equal parts",
               failure();
      sizes.assign(parts, d / parts);
    }
  }
  if ((int64_t)sizes.size() != numOutputs)
    return nodeError(node) << "split has " << sizes.size()
                           << " sizes for " << numOutputs << " outputs",
           failure();
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0)
      return nodeError(node) << "split size " << s << " is negative",
             failure();
    total += s;
  }
  if (total != d)
    return nodeError(node) << "split sizes " << shapeStr(sizes) << " sum to "
                           << total << ", but dimension " << axis
                           << " has size " << d,
           failure();
  return slicesAlong(in, axis, sizes);
}

/// SplitToSequence's parts: sizes from the `split` input (a scalar: chunks of
/// that size, the last one smaller; 1-D: the sizes), else parts of size 1,
/// whose axis goes away unless `keepdims`.
FailureOr<Importer::Sequence>
Importer::splitToSequence(const onnxpb::NodeProto &node,
                          ArrayRef<int64_t> in) {
  SmallVector<int64_t> axisVec = {intAttr(node, "axis", 0)};
  if (failed(normalizeAxes(axisVec, in.size(), [&] { return nodeError(node); })))
    return failure();
  int64_t axis = axisVec[0], d = in[axis];
  Sequence seq;
  SmallVector<int64_t> sizes;
  if (!hasInput(node, 1)) {
    sizes.assign(d, 1);
    seq.squeezeAxis = intAttr(node, "keepdims", 1) == 0 ? axis : -1;
  } else {
    auto split = constInput(node, 1, "split");
    if (failed(split))
      return failure();
    const ConstTensor &c = **split;
    if (c.isFloat() || c.isBool() || c.shape.size() > 1)
      return nodeError(node) << "split '" << node.input(1)
                             << "' must be an integer scalar or 1-D tensor, "
                                "got "
                             << shapeStr(c.shape) << " of "
                             << dtypeName(c.dtype),
             failure();
    if (c.shape.empty()) {
      int64_t chunk = c.ints[0];
      if (chunk <= 0)
        return nodeError(node) << "split size " << chunk
                               << " must be positive",
               failure();
      for (int64_t left = d; left > 0; left -= chunk)
        sizes.push_back(std::min(chunk, left));
    } else {
      sizes.assign(c.ints.begin(), c.ints.end());
      int64_t total = 0;
      for (int64_t s : sizes) {
        if (s < 0)
          return nodeError(node) << "split size " << s << " is negative",
                 failure();
        total += s;
      }
      if (total != d)
        return nodeError(node) << "split sizes " << shapeStr(sizes)
                               << " sum to " << total << ", but dimension "
                               << axis << " has size " << d,
               failure();
    }
  }
  seq.parts = slicesAlong(in, axis, sizes);
  return seq;
}

FailureOr<int32_t> Importer::castTarget(const onnxpb::NodeProto &node) {
  int32_t to;
  if (node.op_type() == "CastLike") {
    auto t = inputType(node, 1);
    if (failed(t))
      return failure();
    Type e = t->getElementType();
    to = e.isF32()           ? onnxpb::TensorProto::FLOAT
         : e.isInteger(64)   ? onnxpb::TensorProto::INT64
         : e.isInteger(32)   ? onnxpb::TensorProto::INT32
                             : onnxpb::TensorProto::BOOL;
    return to;
  }
  const auto *a = findAttr(node, "to");
  if (!a)
    return nodeError(node) << "attribute 'to' is missing", failure();
  to = a->i();
  if (!elementType(to))
    return nodeError(node) << "cast to " << dtypeName(to)
                           << " is not supported; Spillway casts to FLOAT "
                              "(float32), INT64, INT32 and BOOL",
           failure();
  return to;
}

//===----------------------------------------------------------------------===//
// Folding: nodes whose inputs are all known are evaluated here
//===----------------------------------------------------------------------===//

/// Ops the importer evaluates when all their inputs are constants. Shape
/// folds whenever its input has a static shape (always, in Spillway).
static const llvm::StringSet<> kFoldableOps = {
    "Identity", "Dropout", "Cast", "CastLike", "Neg", "Sqrt", "Reciprocal",
    "Exp", "Log", "Erf", "Sigmoid", "Cos", "Sin", "Tanh", "Relu", "Not",
    "Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "LessOrEqual",
    "Greater", "GreaterOrEqual", "And", "Or", "Where", "Concat", "Gather",
    "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Slice", "Split",
    "Transpose", "Expand", "Range", "ConstantOfShape", "Trilu"};

FailureOr<bool> Importer::fold(const onnxpb::NodeProto &node) {
  StringRef op = node.op_type();
  if (op == "Shape") {
    auto type = inputType(node, 0);
    if (failed(type))
      return failure();
    int64_t rank = type->getRank();
    auto clampToRank = [&](int64_t v) {
      return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank);
    };
    int64_t start = clampToRank(intAttr(node, "start", 0));
    int64_t end = clampToRank(intAttr(node, "end", rank));
    ConstTensor c(onnxpb::TensorProto::INT64, {std::max<int64_t>(end - start, 0)});
    for (int64_t d = start; d < end; ++d)
      c.ints[d - start] = type->getDimSize(d);
    consts[node.output(0)] = std::move(c);
    return true;
  }
  if (!kFoldableOps.contains(op))
    return false;
  SmallVector<const ConstTensor *> in;
  for (const std::string &name : node.input()) {
    if (name.empty()) {
      in.push_back(nullptr);
      continue;
    }
    const ConstTensor *c = getConst(name);
    if (!c)
      return false;
    in.push_back(c);
  }
  SmallVector<ConstTensor> out;
  bool declined = false;
  if (failed(evaluate(node, in, out, declined)))
    return failure();
  if (declined) {
    for (const std::string &name : node.output())
      unfoldedConstants.insert(name);
    return false;
  }
  for (auto [i, c] : llvm::enumerate(out))
    if (!node.output(i).empty())
      consts[node.output(i)] = std::move(c);
  return true;
}

namespace {
enum class BinaryKind {
  Add, Sub, Mul, Div, Pow, Equal, Less, LessOrEqual, Greater, GreaterOrEqual,
  And, Or
};
} // namespace

static std::optional<BinaryKind> binaryKind(StringRef op) {
  return llvm::StringSwitch<std::optional<BinaryKind>>(op)
      .Case("Add", BinaryKind::Add)
      .Case("Sub", BinaryKind::Sub)
      .Case("Mul", BinaryKind::Mul)
      .Case("Div", BinaryKind::Div)
      .Case("Pow", BinaryKind::Pow)
      .Case("Equal", BinaryKind::Equal)
      .Case("Less", BinaryKind::Less)
      .Case("LessOrEqual", BinaryKind::LessOrEqual)
      .Case("Greater", BinaryKind::Greater)
      .Case("GreaterOrEqual", BinaryKind::GreaterOrEqual)
      .Case("And", BinaryKind::And)
      .Case("Or", BinaryKind::Or)
      .Default(std::nullopt);
}

static bool isComparison(BinaryKind k) {
  return k >= BinaryKind::Equal && k <= BinaryKind::GreaterOrEqual;
}

template <typename T>
static std::optional<T> applyBinary(BinaryKind k, T a, T b) {
  // Integers wrap like the runtime's kernels (two's complement), computed
  // unsigned so that folding never overflows a signed type.
  constexpr bool wraps = std::is_integral_v<T> && !std::is_same_v<T, bool>;
  using U = std::conditional_t<wraps, std::make_unsigned_t<
                                          std::conditional_t<wraps, T, int>>,
                               T>;
  switch (k) {
  case BinaryKind::Add:
    return (T)((U)a + (U)b);
  case BinaryKind::Sub:
    return (T)((U)a - (U)b);
  case BinaryKind::Mul:
    return (T)((U)a * (U)b);
  case BinaryKind::Div:
    if constexpr (wraps) {
      if (b == 0)
        return std::nullopt;
      if (b == -1) // INT_MIN / -1 traps; it wraps to INT_MIN
        return (T)((U)0 - (U)a);
    }
    return a / b;
  case BinaryKind::Pow:
    if constexpr (std::is_integral_v<T>) {
      // By squaring, wrapping like the runtime; numpy refuses b < 0.
      if (b < 0)
        return std::nullopt;
      uint64_t r = 1, base = (uint64_t)a;
      for (uint64_t e = (uint64_t)b; e; e >>= 1) {
        if (e & 1)
          r *= base;
        base *= base;
      }
      return (T)r;
    } else {
      return (T)std::pow(a, b);
    }
  case BinaryKind::Equal:
    return a == b;
  case BinaryKind::Less:
    return a < b;
  case BinaryKind::LessOrEqual:
    return a <= b;
  case BinaryKind::Greater:
    return a > b;
  case BinaryKind::GreaterOrEqual:
    return a >= b;
  case BinaryKind::And:
    return a && b;
  case BinaryKind::Or:
    return a || b;
  }
  return std::nullopt;
}

static std::optional<float (*)(float)> unaryFloatFn(StringRef op) {
  using Fn = float (*)(float);
  return llvm::StringSwitch<std::optional<Fn>>(op)
      .Case("Sqrt", [](float x) { return std::sqrt(x); })
      .Case("Reciprocal", [](float x) { return 1.0f / x; })
      .Case("Exp", [](float x) { return std::exp(x); })
      .Case("Log", [](float x) { return std::log(x); })
      .Case("Erf", [](float x) { return std::erf(x); })
      .Case("Sigmoid", [](float x) { return 1.0f / (1.0f + std::exp(-x)); })
      .Case("Cos", [](float x) { return std::cos(x); })
      .Case("Sin", [](float x) { return std::sin(x); })
      .Case("Tanh", [](float x) { return std::tanh(x); })
      .Case("Relu", [](float x) { return x > 0.0f ? x : 0.0f; })
      .Default(std::nullopt);
}

static ConstTensor sliceConst(const ConstTensor &x, const SliceSpec &spec) {
  SmallVector<int64_t> strides = stridesOf(x.shape), step(strides);
  int64_t base = 0;
  for (size_t d = 0; d < strides.size(); ++d) {
    base += spec.starts[d] * strides[d];
    step[d] = spec.steps[d] * strides[d];
  }
  return x.take(spec.shape, stridedSources(spec.shape, base, step));
}

/// A float converted to the integer type `to` as the runtime's cast kernel
/// does: truncated toward zero, NaN -> 0, out-of-range values saturate (a C
/// cast of those is undefined behaviour).
static int64_t saturatingFloatToInt(int32_t to, float f) {
  if (!std::isfinite(f) && !std::isinf(f))
    return 0;
  bool i32 = to == onnxpb::TensorProto::INT32;
  double lo = i32 ? (double)INT32_MIN : -9223372036854775808.0;
  double hi = i32 ? (double)INT32_MAX : 9223372036854775807.0;
  double t = std::trunc((double)f);
  if (t <= lo)
    return i32 ? INT32_MIN : INT64_MIN;
  if (t >= hi)
    return i32 ? INT32_MAX : INT64_MAX;
  return (int64_t)t;
}

/// `c` converted to `to` as ONNX Cast does (float -> int truncates).
static ConstTensor castConst(const ConstTensor &c, int32_t to) {
  ConstTensor r(to, c.shape);
  for (int64_t k = 0, n = c.numElements(); k < n; ++k) {
    if (r.isFloat())
      r.floats[k] = c.isFloat() ? c.floats[k] : (float)c.ints[k];
    else if (!c.isFloat())
      r.ints[k] = wrapInt(to, c.ints[k]);
    else if (r.isBool())
      r.ints[k] = c.floats[k] != 0.0f;
    else
      r.ints[k] = saturatingFloatToInt(to, c.floats[k]);
  }
  return r;
}

LogicalResult Importer::evaluate(const onnxpb::NodeProto &node,
                                 ArrayRef<const ConstTensor *> in,
                                 SmallVectorImpl<ConstTensor> &out,
                                 bool &declined) {
  StringRef op = node.op_type();
  auto arg = [&](size_t i) -> const ConstTensor * {
    return i < in.size() ? in[i] : nullptr;
  };
  auto need = [&](size_t i) -> LogicalResult {
    if (!arg(i))
      return nodeError(node) << "input " << i << " is missing";
    return success();
  };
  auto decline = [&]() {
    declined = true;
    return success();
  };
  auto tooBig = [&](ArrayRef<int64_t> shape) { return !fitsFoldLimit(shape); };
  if (failed(need(0)))
    return failure();
  if ((binaryKind(op) || op == "Where" || op == "Range" || op == "Gather") &&
      failed(need(1)))
    return failure();
  if ((op == "Where" || op == "Range") && failed(need(2)))
    return failure();
  const ConstTensor &x = *in[0];

  if (op == "Identity") {
    out.push_back(x);
    return success();
  }
  if (op == "Dropout") {
    // Inference (the default) or a zero ratio: the identity.
    if (const ConstTensor *t = arg(2); t && t->numElements() == 1 &&
                                       t->ints.size() == 1 && t->ints[0])
      if (const ConstTensor *r = arg(1);
          !r || !r->isFloat() || r->floats.size() != 1 || r->floats[0] != 0)
        return decline();
    out.push_back(x);
    if (node.output_size() > 1) { // the mask: nothing dropped
      out.emplace_back(onnxpb::TensorProto::BOOL, x.shape);
      std::fill(out.back().ints.begin(), out.back().ints.end(), 1);
    }
    return success();
  }
  if (op == "Cast" || op == "CastLike") {
    auto to = castTarget(node);
    if (failed(to))
      return failure();
    out.push_back(x.dtype == *to ? x : castConst(x, *to));
    return success();
  }
  if (op == "Neg") {
    ConstTensor r = x;
    if (r.isBool())
      return decline();
    for (float &f : r.floats)
      f = -f;
    for (int64_t &i : r.ints)
      i = wrapInt(r.dtype, -i);
    out.push_back(std::move(r));
    return success();
  }
  if (auto fn = unaryFloatFn(op)) {
    if (!x.isFloat())
      return decline();
    ConstTensor r = x;
    for (float &f : r.floats)
      f = (*fn)(f);
    out.push_back(std::move(r));
    return success();
  }
  if (op == "Not") {
    if (!x.isBool())
      return nodeError(node) << "input must be bool, got "
                             << dtypeName(x.dtype);
    ConstTensor r = x;
    for (int64_t &i : r.ints)
      i = !i;
    out.push_back(std::move(r));
    return success();
  }
  if (auto kind = binaryKind(op)) {
    ConstTensor a = x, b = *in[1];
    // Pow's exponent may have another type (see importNode); an integer
    // base with a float exponent is computed in float and truncated.
    int32_t powResult = a.dtype;
    if (*kind == BinaryKind::Pow && !a.isBool() && !b.isBool() &&
        a.dtype != b.dtype) {
      if (b.isFloat())
        a = castConst(a, onnxpb::TensorProto::FLOAT);
      else
        b = castConst(b, a.dtype);
    }
    if (a.dtype != b.dtype)
      return nodeError(node) << "operand element types differ ("
                             << dtypeName(a.dtype) << " vs "
                             << dtypeName(b.dtype)
                             << "); ONNX requires them to match";
    if ((*kind == BinaryKind::And || *kind == BinaryKind::Or) != a.isBool())
      return decline();
    auto shape = train::broadcastShapes(a.shape, b.shape);
    if (failed(shape))
      return nodeError(node) << "shapes " << shapeStr(a.shape) << " and "
                             << shapeStr(b.shape) << " do not broadcast";
    if (tooBig(*shape))
      return decline();
    std::vector<int64_t> sa = stridedSources(
        *shape, 0, broadcastStrides(a.shape, *shape));
    std::vector<int64_t> sb = stridedSources(
        *shape, 0, broadcastStrides(b.shape, *shape));
    ConstTensor r(isComparison(*kind) ? onnxpb::TensorProto::BOOL : a.dtype,
                  *shape);
    for (size_t k = 0; k < sa.size(); ++k) {
      if (a.isFloat()) {
        float v = *applyBinary<float>(*kind, a.floats[sa[k]], b.floats[sb[k]]);
        if (r.isFloat())
          r.floats[k] = v;
        else
          r.ints[k] = v != 0.0f;
        continue;
      }
      auto v = applyBinary<int64_t>(*kind, a.ints[sa[k]], b.ints[sb[k]]);
      if (!v)
        return nodeError(node)
               << (*kind == BinaryKind::Pow
                       ? "integers to negative integer powers are not allowed"
                       : "integer division by zero");
      r.ints[k] = wrapInt(r.dtype, *v);
    }
    if (r.dtype != powResult && *kind == BinaryKind::Pow)
      r = castConst(r, powResult);
    out.push_back(std::move(r));
    return success();
  }
  if (op == "Where") {
    const ConstTensor &c = x, &a = *in[1], &b = *in[2];
    if (!c.isBool())
      return nodeError(node) << "condition must be bool, got "
                             << dtypeName(c.dtype);
    if (a.dtype != b.dtype)
      return nodeError(node) << "branches differ in element type ("
                             << dtypeName(a.dtype) << " vs "
                             << dtypeName(b.dtype) << ")";
    auto shape = train::broadcastShapes(c.shape, a.shape);
    if (succeeded(shape))
      shape = train::broadcastShapes(*shape, b.shape);
    if (failed(shape))
      return nodeError(node) << "shapes " << shapeStr(c.shape) << ", "
                             << shapeStr(a.shape) << " and "
                             << shapeStr(b.shape) << " do not broadcast";
    if (tooBig(*shape))
      return decline();
    auto sc = stridedSources(*shape, 0, broadcastStrides(c.shape, *shape));
    auto sa = stridedSources(*shape, 0, broadcastStrides(a.shape, *shape));
    auto sb = stridedSources(*shape, 0, broadcastStrides(b.shape, *shape));
    ConstTensor r(a.dtype, *shape);
    for (size_t k = 0; k < sc.size(); ++k) {
      bool pick = c.ints[sc[k]];
      if (r.isFloat())
        r.floats[k] = pick ? a.floats[sa[k]] : b.floats[sb[k]];
      else
        r.ints[k] = pick ? a.ints[sa[k]] : b.ints[sb[k]];
    }
    out.push_back(std::move(r));
    return success();
  }
  if (op == "Concat") {
    int64_t rank = x.shape.size();
    SmallVector<int64_t> axisVec = {intAttr(node, "axis", 0)};
    if (failed(normalizeAxes(axisVec, rank, [&] { return nodeError(node); })))
      return failure();
    int64_t axis = axisVec[0];
    SmallVector<int64_t> shape(x.shape);
    shape[axis] = 0;
    for (auto [i, t] : llvm::enumerate(in)) {
      if (!t)
        return nodeError(node) << "input " << i << " is missing";
      bool same = t->dtype == x.dtype && (int64_t)t->shape.size() == rank;
      for (int64_t d = 0; same && d < rank; ++d)
        same = d == axis || t->shape[d] == x.shape[d];
      if (!same)
        return nodeError(node)
               << "inputs " << shapeStr(x.shape) << " of "
               << dtypeName(x.dtype) << " and " << shapeStr(t->shape) << " of "
               << dtypeName(t->dtype) << " do not concatenate along axis "
               << axis;
      shape[axis] += t->shape[axis];
    }
    if (tooBig(shape))
      return decline();
    int64_t outer = *numElementsOf(ArrayRef<int64_t>(shape).take_front(axis));
    int64_t inner = *numElementsOf(ArrayRef<int64_t>(shape).drop_front(axis + 1));
    ConstTensor r(x.dtype, shape);
    int64_t k = 0;
    for (int64_t o = 0; o < outer; ++o)
      for (const ConstTensor *t : in) {
        int64_t chunk = t->shape[axis] * inner;
        for (int64_t j = 0; j < chunk; ++j, ++k) {
          if (r.isFloat())
            r.floats[k] = t->floats[o * chunk + j];
          else
            r.ints[k] = t->ints[o * chunk + j];
        }
      }
    out.push_back(std::move(r));
    return success();
  }
  if (op == "Gather") {
    const ConstTensor &idx = *in[1];
    if (idx.isFloat() || idx.isBool())
      return nodeError(node) << "indices must be int64 or int32";
    int64_t rank = x.shape.size();
    SmallVector<int64_t> axisVec = {intAttr(node, "axis", 0)};
    if (failed(normalizeAxes(axisVec, rank, [&] { return nodeError(node); })))
      return failure();
    int64_t axis = axisVec[0], d = x.shape[axis];
    SmallVector<int64_t> shape(x.shape.begin(), x.shape.begin() + axis);
    shape.append(idx.shape.begin(), idx.shape.end());
    shape.append(x.shape.begin() + axis + 1, x.shape.end());
    if (tooBig(shape))
      return decline();
    int64_t outer = *numElementsOf(ArrayRef<int64_t>(x.shape).take_front(axis));
    int64_t inner =
        *numElementsOf(ArrayRef<int64_t>(x.shape).drop_front(axis + 1));
    std::vector<int64_t> sources;
    sources.reserve(outer * idx.numElements() * inner);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i : idx.ints) {
        if (i < -d || i >= d)
          return nodeError(node) << "index " << i << " out of range for axis "
                                 << axis << " of size " << d;
        int64_t row = i < 0 ? i + d : i;
        for (int64_t j = 0; j < inner; ++j)
          sources.push_back((o * d + row) * inner + j);
      }
    out.push_back(x.take(shape, sources));
    return success();
  }
  if (op == "Unsqueeze" || op == "Squeeze" || op == "Reshape" ||
      op == "Flatten") {
    auto shape = op == "Unsqueeze" ? unsqueezeShape(node, x.shape)
                 : op == "Squeeze" ? squeezeShape(node, x.shape)
                 : op == "Reshape" ? reshapeShape(node, x.shape)
                                   : flattenShape(node, x.shape);
    if (failed(shape))
      return failure();
    ConstTensor r = x;
    r.shape = *shape;
    out.push_back(std::move(r));
    return success();
  }
  if (op == "Slice") {
    auto spec = sliceSpec(node, x.shape);
    if (failed(spec))
      return failure();
    out.push_back(sliceConst(x, *spec));
    return success();
  }
  if (op == "Split") {
    auto specs = splitSpecs(node, x.shape);
    if (failed(specs))
      return failure();
    for (const SliceSpec &spec : *specs)
      out.push_back(sliceConst(x, spec));
    return success();
  }
  if (op == "Transpose") {
    auto perm = transposePerm(node, x.shape.size());
    if (failed(perm))
      return failure();
    SmallVector<int64_t> strides = stridesOf(x.shape), shape, step;
    for (int64_t p : *perm) {
      shape.push_back(x.shape[p]);
      step.push_back(strides[p]);
    }
    out.push_back(x.take(shape, stridedSources(shape, 0, step)));
    return success();
  }
  if (op == "Expand") {
    auto shape = expandShape(node, x.shape);
    if (failed(shape))
      return failure();
    if (tooBig(*shape))
      return decline();
    out.push_back(x.take(*shape, stridedSources(*shape, 0,
                                                broadcastStrides(x.shape, *shape))));
    return success();
  }
  if (op == "Range") {
    const ConstTensor &limit = *in[1], &delta = *in[2];
    for (const ConstTensor *t : {&x, &limit, &delta})
      if (t->numElements() != 1 || t->dtype != x.dtype || t->isBool())
        return nodeError(node) << "start, limit and delta must be scalars of "
                                  "one numeric type";
    int64_t count;
    if (x.isFloat()) {
      float d = delta.floats[0];
      if (d == 0.0f)
        return nodeError(node) << "delta is 0";
      double n = std::ceil(((double)limit.floats[0] - x.floats[0]) / d);
      if (!std::isfinite(n) || n > (double)(int64_t(1) << 53))
        return nodeError(node) << "start, limit and delta give no finite "
                                  "element count";
      count = (int64_t)std::max(n, 0.0);
    } else {
      int64_t d = delta.ints[0];
      if (d == 0)
        return nodeError(node) << "delta is 0";
      // In 128 bits: limit - start and -delta overflow 64.
      __int128 span = (__int128)limit.ints[0] - x.ints[0], step = d;
      if (step < 0) {
        span = -span;
        step = -step;
      }
      __int128 n = span > 0 ? (span + step - 1) / step : 0;
      count = n > INT64_MAX ? INT64_MAX : (int64_t)n;
    }
    if (tooBig({count}))
      return nodeError(node) << "produces " << count
                             << " elements; Spillway evaluates Range at "
                                "compile time up to "
                             << opts.maxInlineConstantElements
                             << " (--max-inline-constant-elements)";
    ConstTensor r(x.dtype, {count});
    for (int64_t k = 0; k < count; ++k) {
      if (r.isFloat())
        r.floats[k] = x.floats[0] + k * delta.floats[0];
      else
        // start + k * delta is in range (count guarantees it); k * delta
        // alone may not be, so compute modulo 2^64.
        r.ints[k] = wrapInt(r.dtype, (int64_t)((uint64_t)x.ints[0] +
                                                (uint64_t)k *
                                                    (uint64_t)delta.ints[0]));
    }
    out.push_back(std::move(r));
    return success();
  }
  if (op == "ConstantOfShape") {
    auto shape = constInts(node, 0, "shape");
    if (failed(shape))
      return failure();
    ConstTensor value(onnxpb::TensorProto::FLOAT, {1});
    if (const auto *a = findAttr(node, "value")) {
      auto v = toConst(a->t(), "ConstantOfShape value of node '" +
                                   nodeName(node) + "'");
      if (failed(v))
        return failure();
      if (v->numElements() != 1)
        return nodeError(node) << "value must have one element, got "
                               << v->numElements();
      value = std::move(*v);
    }
    if (llvm::any_of(*shape, [](int64_t d) { return d < 0; }))
      return nodeError(node) << "shape " << shapeStr(*shape)
                             << " has a negative dimension";
    if (!numElementsOf(*shape))
      return nodeError(node) << "shape " << shapeStr(*shape)
                             << " has more elements than fit in 64 bits";
    if (tooBig(*shape))
      return decline(); // emitted as a splat train.constant
    out.push_back(value.take(*shape, std::vector<int64_t>(
                                         *numElementsOf(*shape), 0)));
    return success();
  }
  if (op == "Trilu") {
    int64_t rank = x.shape.size();
    if (rank < 2)
      return nodeError(node) << "input must have rank >= 2, got " << rank;
    int64_t k = 0;
    if (const ConstTensor *kc = arg(1)) {
      if (kc->isFloat() || kc->numElements() != 1)
        return nodeError(node) << "k must be an integer scalar";
      k = kc->ints[0];
    }
    bool upper = intAttr(node, "upper", 1) != 0;
    int64_t rows = x.shape[rank - 2], cols = x.shape[rank - 1];
    ConstTensor r = x;
    for (int64_t e = 0, n = r.numElements(); e < n; ++e) {
      int64_t i = (e / cols) % rows, j = e % cols;
      bool keep = upper ? j - i >= k : j - i <= k;
      if (keep)
        continue;
      if (r.isFloat())
        r.floats[e] = 0.0f;
      else
        r.ints[e] = 0;
    }
    out.push_back(std::move(r));
    return success();
  }
  return decline();
}

//===----------------------------------------------------------------------===//
// Nodes
//===----------------------------------------------------------------------===//

LogicalResult Importer::importConstant(const onnxpb::NodeProto &node) {
  if (node.attribute_size() != 1)
    return nodeError(node) << "expects exactly one value attribute";
  const auto &a = node.attribute(0);
  ConstTensor c;
  StringRef kind = a.name();
  if (kind == "value") {
    auto t = toConst(a.t(), "Constant value of node '" + nodeName(node) + "'");
    if (failed(t))
      return failure();
    c = std::move(*t);
  } else if (kind == "value_float") {
    c.dtype = onnxpb::TensorProto::FLOAT;
    c.floats.push_back(a.f());
  } else if (kind == "value_floats") {
    c.dtype = onnxpb::TensorProto::FLOAT;
    c.floats.assign(a.floats().begin(), a.floats().end());
    c.shape.push_back(a.floats_size());
  } else if (kind == "value_int") {
    c.dtype = onnxpb::TensorProto::INT64;
    c.ints.push_back(a.i());
  } else if (kind == "value_ints") {
    c.dtype = onnxpb::TensorProto::INT64;
    c.ints.assign(a.ints().begin(), a.ints().end());
    c.shape.push_back(a.ints_size());
  } else {
    return nodeError(node) << "attribute '" << kind
                           << "' is not supported (use value, value_float(s) "
                              "or value_int(s))";
  }
  consts[node.output(0)] = std::move(c);
  return success();
}

LogicalResult Importer::importReduce(const onnxpb::NodeProto &node,
                                     Location loc) {
  StringRef op = node.op_type();
  // ReduceMax takes every element type (bool since opset 20); the others
  // reduce float32.
  auto input = op == "ReduceMax" ? getValue(node, 0)
                                 : requireFloat(node, 0, "input");
  if (failed(input))
    return failure();
  // ReduceSum takes axes as an input from opset 13, the others from 18.
  auto axes = axesOf(node, 1, op == "ReduceSum" ? 13 : 18);
  if (failed(axes))
    return failure();
  bool keepdims = intAttr(node, "keepdims", 1) != 0;
  if (axes->empty() && intAttr(node, "noop_with_empty_axes", 0) != 0) {
    values[node.output(0)] = *input;
    return success();
  }
  SmallVector<NamedAttribute> attrs = {
      builder.getNamedAttr("axes", builder.getDenseI64ArrayAttr(*axes)),
      builder.getNamedAttr("keepdims", builder.getBoolAttr(keepdims))};
  FailureOr<Value> v =
      op == "ReduceMean"  ? buildInferred<train::ReduceMeanOp>(node, loc, *input, attrs)
      : op == "ReduceMax" ? buildInferred<train::ReduceMaxOp>(node, loc, *input, attrs)
                          : buildInferred<train::ReduceSumOp>(node, loc, *input, attrs);
  if (failed(v))
    return failure();
  values[node.output(0)] = *v;
  return success();
}

/// SoftmaxCrossEntropyLoss. Without class weights and the log_prob output,
/// and with a scalar loss, it becomes the fused train.softmax_cross_entropy_loss
/// (N-d scores [N, C, d1..dk] are first laid out as [N*D, C] rows). Every
/// other variant is spelled out in existing ops, along the class axis 1:
///   log_prob = (x - max) - log(sum(exp(x - max)))
///   nll      = -sum(log_prob * onehot(label)) over C          [N, d1..dk]
///   w        = weights[label] (1 without weights), 0 where label is
///              ignore_index (labels equal to it are clamped to class 0
///              before the gather and the one-hot)
///   loss     = nll * w; "sum" sums it, "mean" divides that sum by sum(w)
///              (the ONNX definition; plain mean without weights or
///              ignore_index), "none" keeps it.
/// ONNX Adam (domain ai.onnx.preview.training, version 1), imported in
/// forward mode only, as the elementwise ops of the reference's apply_adam,
/// in its order: per tensor i of n,
///   g' = norm_coefficient * X + G
///   V' = alpha * V + (1 - alpha) * g'
///   H' = beta * H + (1 - beta) * (g' * g')
///   r  = T > 0 ? R * sqrt(1 - beta^T) / (1 - alpha^T) : R
///   X' = (1 - norm_coefficient_post) * (X - r * (V' / (sqrt(H') + epsilon)))
/// Inputs: R, T, X1..Xn, G1..Gn, V1..Vn, H1..Hn; outputs X'1..X'n,
/// V'1..V'n, H'1..H'n.
LogicalResult Importer::importAdam(const onnxpb::NodeProto &node,
                                   Location loc) {
  if (!opts.forwardOnly)
    return nodeError(node)
           << "the ONNX Adam op is an optimizer step; Spillway attaches its "
              "own optimizer: export the forward graph and loss (or import "
              "with --forward to run the step as a computation)";
  if (auto it = opsets.find(node.domain());
      it == opsets.end() || it->second != 1)
    return nodeError(node)
           << "Adam needs opset_import of domain 'ai.onnx.preview.training' "
              "version 1"
           << (it == opsets.end()
                   ? std::string(" (not imported)")
                   : " (got " + std::to_string(it->second) + ")");
  int nin = node.input_size();
  if (nin < 6 || (nin - 2) % 4 != 0)
    return nodeError(node) << "expects R, T and n each of X, G, V, H (2 + 4n "
                              "inputs), got "
                           << nin << " inputs";
  int n = (nin - 2) / 4;
  if (node.output_size() != 3 * n)
    return nodeError(node) << "expects " << 3 * n << " outputs (X_new, V_new, "
                              "H_new for each of "
                           << n << " tensors), got " << node.output_size();
  double alpha = floatAttr(node, "alpha", 0.9f);
  double beta = floatAttr(node, "beta", 0.999f);
  double epsilon = floatAttr(node, "epsilon", 1e-6f);
  double normCoef = floatAttr(node, "norm_coefficient", 0.0f);
  double normCoefPost = floatAttr(node, "norm_coefficient_post", 0.0f);

  Type f32 = builder.getF32Type();
  auto scalarF32 = [&](double v) -> Value {
    OpBuilder::InsertionGuard guard(builder);
    setInsertionPointToPrologue(builder, builder.getInsertionBlock());
    return train::ConstantOp::create(
        builder, loc,
        DenseElementsAttr::get(RankedTensorType::get({}, f32),
                               static_cast<float>(v)));
  };
  auto r = requireFloat(node, 0, "R (learning rate)");
  auto t = getValue(node, 1);
  if (failed(r) || failed(t))
    return failure();
  auto rt = cast<RankedTensorType>(r->getType());
  auto tt = cast<RankedTensorType>(t->getType());
  if (rt.getRank() != 0 || !rt.getElementType().isF32())
    return nodeError(node) << "R (learning rate) must be a float scalar, got "
                           << rt;
  if (tt.getRank() != 0 || !tt.getElementType().isInteger(64))
    return nodeError(node) << "T (step count) must be an int64 scalar, got "
                           << tt;

  // Scalar learning rate, bias-corrected when T > 0.
  Value tf = train::CastOp::create(builder, loc, tt.clone(f32), *t);
  auto positive =
      buildInferred<train::GreaterOp>(node, loc, {tf, scalarF32(0.0)});
  auto alphaT = buildInferred<train::PowOp>(node, loc, {scalarF32(alpha), tf});
  auto betaT = buildInferred<train::PowOp>(node, loc, {scalarF32(beta), tf});
  if (failed(positive) || failed(alphaT) || failed(betaT))
    return failure();
  auto oneMinusBetaT =
      buildInferred<train::SubOp>(node, loc, {scalarF32(1.0), *betaT});
  if (failed(oneMinusBetaT))
    return failure();
  Value sqrtBetaT =
      train::SqrtOp::create(builder, loc, rt, *oneMinusBetaT).getResult();
  auto oneMinusAlphaT =
      buildInferred<train::SubOp>(node, loc, {scalarF32(1.0), *alphaT});
  auto scaled = buildInferred<train::MulOp>(node, loc, {*r, sqrtBetaT});
  if (failed(oneMinusAlphaT) || failed(scaled))
    return failure();
  auto corrected =
      buildInferred<train::DivOp>(node, loc, {*scaled, *oneMinusAlphaT});
  if (failed(corrected))
    return failure();
  auto rAdjusted =
      buildInferred<train::WhereOp>(node, loc, {*positive, *corrected, *r});
  if (failed(rAdjusted))
    return failure();

  for (int i = 0; i < n; ++i) {
    auto x = requireFloat(node, 2 + i, "X");
    auto g = requireFloat(node, 2 + n + i, "G");
    auto v = requireFloat(node, 2 + 2 * n + i, "V");
    auto h = requireFloat(node, 2 + 3 * n + i, "H");
    if (failed(x) || failed(g) || failed(v) || failed(h))
      return failure();
    for (Value other : {*g, *v, *h})
      if (other.getType() != x->getType())
        return nodeError(node) << "X, G, V and H of tensor " << i
                               << " must have one type, got " << x->getType()
                               << " and " << other.getType();
    auto mul = [&](Value a, Value b) {
      return buildInferred<train::MulOp>(node, loc, {a, b});
    };
    auto add = [&](Value a, Value b) {
      return buildInferred<train::AddOp>(node, loc, {a, b});
    };
    // g' = norm_coefficient * X + G
    auto nx = mul(scalarF32(normCoef), *x);
    if (failed(nx))
      return failure();
    auto gReg = add(*nx, *g);
    if (failed(gReg))
      return failure();
    // V' = alpha * V + (1 - alpha) * g'
    auto av = mul(scalarF32(alpha), *v);
    auto ag = mul(scalarF32(1.0 - alpha), *gReg);
    if (failed(av) || failed(ag))
      return failure();
    auto vNew = add(*av, *ag);
    // H' = beta * H + (1 - beta) * (g' * g')
    auto bh = mul(scalarF32(beta), *h);
    auto gg = mul(*gReg, *gReg);
    if (failed(vNew) || failed(bh) || failed(gg))
      return failure();
    auto bgg = mul(scalarF32(1.0 - beta), *gg);
    if (failed(bgg))
      return failure();
    auto hNew = add(*bh, *bgg);
    if (failed(hNew))
      return failure();
    // X' = (1 - norm_coefficient_post) * (X - r * (V' / (sqrt(H') + eps)))
    Value hSqrt =
        train::SqrtOp::create(builder, loc, hNew->getType(), *hNew).getResult();
    auto denom = add(hSqrt, scalarF32(epsilon));
    if (failed(denom))
      return failure();
    auto ratio = buildInferred<train::DivOp>(node, loc, {*vNew, *denom});
    if (failed(ratio))
      return failure();
    auto step = mul(*rAdjusted, *ratio);
    if (failed(step))
      return failure();
    auto xNew = buildInferred<train::SubOp>(node, loc, {*x, *step});
    if (failed(xNew))
      return failure();
    auto xFinal = mul(scalarF32(1.0 - normCoefPost), *xNew);
    if (failed(xFinal))
      return failure();
    values[node.output(i)] = *xFinal;
    values[node.output(n + i)] = *vNew;
    values[node.output(2 * n + i)] = *hNew;
  }
  return success();
}

LogicalResult Importer::importSoftmaxCrossEntropy(const onnxpb::NodeProto &node,
                                                  Location loc) {
  std::string reduction = strAttr(node, "reduction", "mean");
  if (reduction != "mean" && reduction != "sum" && reduction != "none")
    return nodeError(node) << "reduction \"" << reduction
                           << "\" is not one of \"mean\", \"sum\", \"none\"";
  auto scores = requireFloat(node, 0, "scores");
  auto labels = getValue(node, 1);
  if (failed(scores) || failed(labels))
    return failure();
  auto st = cast<RankedTensorType>(scores->getType());
  auto lt = cast<RankedTensorType>(labels->getType());
  Type it = lt.getElementType();
  if (!it.isInteger(64) && !it.isInteger(32))
    return nodeError(node) << "labels must be int64 or int32, got " << it;
  int64_t rank = st.getRank();
  SmallVector<int64_t> lossShape;
  if (rank >= 2) {
    lossShape.push_back(st.getDimSize(0));
    llvm::append_range(lossShape, st.getShape().drop_front(2));
  }
  if (rank < 2 || lt.getShape() != ArrayRef<int64_t>(lossShape))
    return nodeError(node) << "expected scores [N, C, d1, ..., dk] with "
                              "labels [N, d1, ..., dk]; got "
                           << shapeStr(st.getShape()) << " and "
                           << shapeStr(lt.getShape());
  int64_t numClasses = st.getDimSize(1);
  const onnxpb::AttributeProto *ignoreAttr = findAttr(node, "ignore_index");
  bool hasWeights = hasInput(node, 2);
  bool wantLogProb = isOutputUsed(node, 1);
  Type f32 = builder.getF32Type();
  auto reduceAttrs = [&](ArrayRef<int64_t> axes, bool keepdims) {
    return SmallVector<NamedAttribute>{
        builder.getNamedAttr("axes", builder.getDenseI64ArrayAttr(axes)),
        builder.getNamedAttr("keepdims", builder.getBoolAttr(keepdims))};
  };

  // Fast path: the fused op, on [N*D, C] rows.
  if (!hasWeights && !wantLogProb && reduction != "none") {
    Value x = *scores, y = *labels;
    if (rank > 2) {
      SmallVector<int64_t> perm = {0};
      llvm::append_range(perm, llvm::seq<int64_t>(2, rank));
      perm.push_back(1);
      auto moved = buildInferred<train::TransposeOp>(
          node, loc, x,
          {builder.getNamedAttr("perm", builder.getDenseI64ArrayAttr(perm))});
      if (failed(moved))
        return failure();
      int64_t rows = lt.getNumElements();
      x = train::ReshapeOp::create(builder, loc,
                                   st.clone({rows, numClasses}), *moved);
      y = train::ReshapeOp::create(builder, loc, lt.clone({rows}), y);
    }
    SmallVector<NamedAttribute> attrs = {builder.getNamedAttr(
        "reduction", builder.getStringAttr(reduction))};
    if (ignoreAttr)
      attrs.push_back(builder.getNamedAttr(
          "ignore_index", builder.getIntegerAttr(
                              builder.getIntegerType(64, true), ignoreAttr->i())));
    auto loss = buildInferred<train::SoftmaxCrossEntropyLossOp>(
        node, loc, {x, y}, attrs);
    if (failed(loss))
      return failure();
    values[node.output(0)] = *loss;
    return success();
  }

  Value weights;
  if (hasWeights) {
    auto w = requireFloat(node, 2, "weights");
    if (failed(w))
      return failure();
    auto wt = cast<RankedTensorType>(w->getType());
    if (wt.getShape() != ArrayRef<int64_t>{numClasses})
      return nodeError(node) << "weights must have shape [" << numClasses
                             << "] (one per class), got "
                             << shapeStr(wt.getShape());
    weights = *w;
  }
  auto constant = [&](DenseElementsAttr attr) -> Value {
    OpBuilder::InsertionGuard guard(builder);
    setInsertionPointToPrologue(builder, builder.getInsertionBlock());
    return train::ConstantOp::create(builder, loc, attr);
  };
  auto scalarF32 = [&](float v) {
    return constant(DenseElementsAttr::get(RankedTensorType::get({}, f32), v));
  };
  auto scalarInt = [&](int64_t v) {
    auto type = RankedTensorType::get({}, it);
    return it.isInteger(64)
               ? constant(DenseElementsAttr::get(type, v))
               : constant(DenseElementsAttr::get(type, (int32_t)v));
  };

  // log_softmax along axis 1.
  auto max = buildInferred<train::ReduceMaxOp>(node, loc, *scores,
                                               reduceAttrs({1}, true));
  if (failed(max))
    return failure();
  auto shifted = buildInferred<train::SubOp>(node, loc, {*scores, *max});
  if (failed(shifted))
    return failure();
  Value exp = train::ExpOp::create(builder, loc, st, *shifted);
  auto sum =
      buildInferred<train::ReduceSumOp>(node, loc, exp, reduceAttrs({1}, true));
  if (failed(sum))
    return failure();
  Value logSum = train::LogOp::create(builder, loc, sum->getType(), *sum);
  auto logProb = buildInferred<train::SubOp>(node, loc, {*shifted, logSum});
  if (failed(logProb))
    return failure();
  if (wantLogProb)
    values[node.output(1)] = *logProb;

  // Labels that are ignore_index may lie outside [0, C): clamp them to 0.
  auto lossType = RankedTensorType::get(lossShape, f32);
  Value label = *labels, keep;
  if (ignoreAttr) {
    auto ignored = buildInferred<train::EqualOp>(
        node, loc, {label, scalarInt(ignoreAttr->i())});
    if (failed(ignored))
      return failure();
    auto clamped = buildInferred<train::WhereOp>(
        node, loc, {*ignored, scalarInt(0), label});
    auto kept = buildInferred<train::WhereOp>(
        node, loc, {*ignored, scalarF32(0.0f), scalarF32(1.0f)});
    if (failed(clamped) || failed(kept))
      return failure();
    label = *clamped;
    keep = *kept;
  }

  // nll = -sum(log_prob * onehot) over C.
  SmallVector<int64_t> unsqueezed(lossShape);
  unsqueezed.insert(unsqueezed.begin() + 1, 1);
  Value labelCol =
      train::ReshapeOp::create(builder, loc, lt.clone(unsqueezed), label);
  SmallVector<int64_t> iotaShape(rank - 1, 1);
  iotaShape[0] = numClasses;
  auto iotaType = RankedTensorType::get(iotaShape, it);
  Value iota;
  if (it.isInteger(64))
    iota = constant(DenseElementsAttr::get(
        iotaType, ArrayRef<int64_t>(llvm::to_vector(
                      llvm::seq<int64_t>(0, numClasses)))));
  else
    iota = constant(DenseElementsAttr::get(
        iotaType, ArrayRef<int32_t>(llvm::to_vector(
                      llvm::seq<int32_t>(0, (int32_t)numClasses)))));
  auto hit = buildInferred<train::EqualOp>(node, loc, {labelCol, iota});
  if (failed(hit))
    return failure();
  Value oneHot = train::CastOp::create(
      builder, loc, cast<RankedTensorType>(hit->getType()).clone(f32), *hit);
  auto picked = buildInferred<train::MulOp>(node, loc, {*logProb, oneHot});
  if (failed(picked))
    return failure();
  auto gathered = buildInferred<train::ReduceSumOp>(node, loc, *picked,
                                                    reduceAttrs({1}, false));
  if (failed(gathered))
    return failure();
  Value loss = train::NegOp::create(builder, loc, lossType, *gathered);

  // Per-element weights: weights[label], zero where ignored.
  Value weight = keep;
  if (weights) {
    auto w = buildInferred<train::GatherOp>(
        node, loc, {weights, label},
        {builder.getNamedAttr("axis", builder.getI64IntegerAttr(0))});
    if (failed(w))
      return failure();
    weight = *w;
    if (keep)
      weight = train::MulOp::create(builder, loc, lossType, weight, keep);
  }
  if (weight)
    loss = train::MulOp::create(builder, loc, lossType, loss, weight);

  if (reduction == "none") {
    values[node.output(0)] = loss;
    return success();
  }
  if (reduction == "mean" && !weight) {
    auto mean = buildInferred<train::ReduceMeanOp>(node, loc, loss,
                                                   reduceAttrs({}, false));
    if (failed(mean))
      return failure();
    values[node.output(0)] = *mean;
    return success();
  }
  auto total =
      buildInferred<train::ReduceSumOp>(node, loc, loss, reduceAttrs({}, false));
  if (failed(total))
    return failure();
  if (reduction == "sum") {
    values[node.output(0)] = *total;
    return success();
  }
  auto norm = buildInferred<train::ReduceSumOp>(node, loc, weight,
                                                reduceAttrs({}, false));
  if (failed(norm))
    return failure();
  auto mean = buildInferred<train::DivOp>(node, loc, {*total, *norm});
  if (failed(mean))
    return failure();
  values[node.output(0)] = *mean;
  return success();
}

LogicalResult Importer::importSequenceAt(const onnxpb::NodeProto &node,
                                         Location loc) {
  auto it = hasInput(node, 0) ? sequences.find(node.input(0)) : sequences.end();
  if (it == sequences.end())
    return nodeError(node) << "input sequence '"
                           << (hasInput(node, 0) ? node.input(0) : "")
                           << "' is not the output of a SplitToSequence node "
                              "(the only sequences Spillway imports)";
  const Sequence &seq = it->second;
  auto pos = constInput(node, 1, "position");
  if (failed(pos))
    return failure();
  int64_t n = seq.parts.size();
  if ((*pos)->isFloat() || (*pos)->isBool() || (*pos)->numElements() != 1)
    return nodeError(node) << "position must be an integer scalar";
  int64_t p = (*pos)->ints[0];
  if (p < -n || p >= n)
    return nodeError(node) << "position " << p
                           << " out of range for a sequence of " << n
                           << " tensors";
  const SliceSpec &spec = seq.parts[p < 0 ? p + n : p];
  SmallVector<int64_t> shape(spec.shape);
  if (seq.squeezeAxis >= 0)
    shape.erase(shape.begin() + seq.squeezeAxis);
  StringRef out = node.output(0);
  if (const ConstTensor *c = getConst(seq.source)) {
    ConstTensor part = sliceConst(*c, spec);
    part.shape = shape;
    consts[out] = std::move(part);
    return success();
  }
  auto x = getValue(node, seq.source);
  if (failed(x))
    return failure();
  auto t = cast<RankedTensorType>(x->getType());
  Value v = *x;
  if (t.getShape() != ArrayRef<int64_t>(spec.shape))
    v = train::SliceOp::create(builder, loc, t.clone(spec.shape), v,
                               builder.getDenseI64ArrayAttr(spec.starts),
                               builder.getDenseI64ArrayAttr(spec.steps));
  if (shape != spec.shape)
    v = train::ReshapeOp::create(builder, loc, t.clone(shape), v);
  values[out] = v;
  return success();
}

/// What the ONNX schema fixes and the importer would otherwise skip over: the
/// number of inputs and outputs, and the type of each attribute it reads
/// (a `transB = 1.0` would read as 0). An input past the schema's count or
/// an attribute of the wrong type changes what the model computes, so each
/// is an error, not ignored.
LogicalResult Importer::checkNode(const onnxpb::NodeProto &node) {
  StringRef op = node.op_type();
  llvm::StringSet<> seen;
  for (const auto &a : node.attribute()) {
    if (!seen.insert(a.name()).second)
      return nodeError(node) << "attribute '" << a.name()
                             << "' is given twice";
    std::optional<AttrType> want = attrTypeOf(op, a.name());
    if (want && a.type() != *want)
      return nodeError(node)
             << "attribute '" << a.name() << "' must be of type "
             << onnxpb::AttributeProto_AttributeType_Name(*want) << ", got "
             << (onnxpb::AttributeProto_AttributeType_IsValid(a.type())
                     ? onnxpb::AttributeProto_AttributeType_Name(a.type())
                     : "type #" + std::to_string(a.type()));
  }
  if (!isDefaultDomain(node.domain()))
    return success(); // Adam checks its own (variadic) arity
  std::optional<Arity> arity = arityOf(op, opset);
  if (!arity)
    return success(); // not imported: importNode says so
  int nin = node.input_size(), nout = node.output_size();
  auto count = [](int lo, int hi, StringRef noun) {
    std::string n = lo == hi ? std::to_string(lo)
                    : hi == kVariadic
                        ? std::to_string(lo) + " or more"
                        : std::to_string(lo) + " to " + std::to_string(hi);
    return n + " " + noun.str() + (lo == 1 && hi == 1 ? "" : "s");
  };
  if (nin < arity->minInputs || nin > arity->maxInputs)
    return nodeError(node) << op << " (opset " << opset << ") takes "
                           << count(arity->minInputs, arity->maxInputs, "input")
                           << ", got " << nin;
  if (nout > arity->maxOutputs)
    return nodeError(node) << op << " (opset " << opset << ") has "
                           << count(1, arity->maxOutputs, "output")
                           << ", got " << nout;
  return success();
}

/// Records the node's outputs as defined, refusing a name that a graph
/// input, an initializer or an earlier node (or this one) already defines.
LogicalResult Importer::defineOutputs(const onnxpb::NodeProto &node) {
  std::string self = "node '" + nodeName(node) + "' (" + node.op_type() + ")";
  for (const std::string &out : node.output()) {
    if (out.empty())
      continue;
    auto [it, inserted] = definedBy.try_emplace(out, self);
    if (!inserted)
      return nodeError(node)
             << "output '" << out << "' is already defined by "
             << (it->second == self ? std::string("this node") : it->second)
             << "; an ONNX graph assigns each name once";
  }
  return success();
}

LogicalResult Importer::importNode(const onnxpb::NodeProto &node) {
  StringRef op = node.op_type();
  if (failed(checkNode(node)))
    return failure();
  if (node.domain() == kTrainingDomain && op == "Adam")
    return importAdam(node,
                      NameLoc::get(builder.getStringAttr(nodeName(node))));
  if (!isDefaultDomain(node.domain())) {
    auto it = opsets.find(node.domain());
    return error() << "node '" << nodeName(node) << "' (" << op << ", domain '"
                   << node.domain() << "', opset "
                   << (it == opsets.end() ? std::string("not imported")
                                          : std::to_string(it->second))
                   << ") is not supported by Spillway's importer yet; "
                      "supported ops (default domain): "
                   << kSupportedOps << "; (domain '" << kTrainingDomain
                   << "', --forward only): " << kSupportedTrainingOps;
  }
  if (node.output_size() < 1 || node.output(0).empty())
    return nodeError(node) << "has no output";
  if (auto it = kOpMinOpset.find(op);
      it != kOpMinOpset.end() && opset < it->second)
    return nodeError(node) << op << " is not an opset " << opset
                           << " op; Spillway imports it from opset "
                           << it->second << " (re-export the model at a "
                                            "newer opset)";
  for (int i = 1; i < node.output_size(); ++i)
    if (isOutputUsed(node, i) && op != "LayerNormalization" &&
        op != "SoftmaxCrossEntropyLoss" && op != "Split" && op != "Dropout")
      return nodeError(node) << "output " << i << " ('" << node.output(i)
                             << "') is used but not supported";
  if (op == "Constant")
    return importConstant(node);
  Location loc = NameLoc::get(builder.getStringAttr(nodeName(node)));
  if (op == "SplitToSequence") {
    auto type = inputType(node, 0);
    if (failed(type))
      return failure();
    auto seq = splitToSequence(node, type->getShape());
    if (failed(seq))
      return failure();
    seq->source = node.input(0);
    sequences[node.output(0)] = std::move(*seq);
    return success();
  }
  if (op == "SequenceAt")
    return importSequenceAt(node, loc);
  FailureOr<bool> folded = fold(node);
  if (failed(folded))
    return failure();
  if (*folded)
    return success();

  StringRef out = node.output(0);
  auto define = [&](FailureOr<Value> v) -> LogicalResult {
    if (failed(v))
      return failure();
    values[out] = *v;
    return success();
  };
  auto unary = [&](auto tag) -> LogicalResult {
    using OpTy = decltype(tag);
    auto x = requireFloat(node, 0, "input");
    if (failed(x))
      return failure();
    return define(OpTy::create(builder, loc, x->getType(), *x).getResult());
  };
  // Operands of an elementwise op, whose element types ONNX requires to match.
  auto operands = [&](int n) -> FailureOr<SmallVector<Value>> {
    SmallVector<Value> vs;
    for (int i = 0; i < n; ++i) {
      auto v = getValue(node, i);
      if (failed(v))
        return failure();
      vs.push_back(*v);
    }
    Type ea = cast<RankedTensorType>(vs[n - 2].getType()).getElementType();
    Type eb = cast<RankedTensorType>(vs[n - 1].getType()).getElementType();
    if (ea != eb)
      return nodeError(node) << "operand element types differ (" << ea
                             << " vs " << eb
                             << "); ONNX requires them to match",
             failure();
    return vs;
  };
  auto binary = [&](auto tag, bool swap = false) -> LogicalResult {
    using OpTy = decltype(tag);
    auto vs = operands(2);
    if (failed(vs))
      return failure();
    if (swap)
      std::swap((*vs)[0], (*vs)[1]);
    return define(buildInferred<OpTy>(node, loc, *vs));
  };
  auto reshapeTo = [&](Value x, ArrayRef<int64_t> shape) -> LogicalResult {
    auto t = cast<RankedTensorType>(x.getType());
    if (t.getShape() == shape) {
      values[out] = x;
      return success();
    }
    return define(train::ReshapeOp::create(builder, loc,
                                           t.clone(shape), x)
                      .getResult());
  };
  auto slice = [&](Value x, const SliceSpec &spec) -> Value {
    auto t = cast<RankedTensorType>(x.getType());
    if (t.getShape() == ArrayRef<int64_t>(spec.shape) &&
        llvm::all_of(spec.steps, [](int64_t s) { return s == 1; }))
      return x;
    return train::SliceOp::create(builder, loc, t.clone(spec.shape), x,
                                  builder.getDenseI64ArrayAttr(spec.starts),
                                  builder.getDenseI64ArrayAttr(spec.steps));
  };

  if (op == "Identity")
    return define(getValue(node, 0));
  if (op == "Dropout") {
    if (hasInput(node, 2)) {
      const ConstTensor *t = getConst(node.input(2));
      if (!t || !t->isBool() || t->numElements() != 1)
        return nodeError(node) << "training_mode '" << node.input(2)
                               << "' must be a constant bool scalar";
      const ConstTensor *r = hasInput(node, 1) ? getConst(node.input(1))
                                               : nullptr;
      bool zeroRatio = r && r->isFloat() && r->numElements() == 1 &&
                       r->floats[0] == 0.0f;
      if (t->ints[0] && !zeroRatio)
        return nodeError(node) << "training-mode dropout is not supported; "
                                  "export with dropout disabled "
                                  "(model.eval() or p=0)";
    }
    auto x = getValue(node, 0);
    if (failed(x))
      return failure();
    if (isOutputUsed(node, 1)) {
      // The identity drops nothing: the mask is all true.
      auto type = cast<RankedTensorType>(x->getType())
                      .clone(builder.getI1Type());
      OpBuilder::InsertionGuard guard(builder);
      setInsertionPointToPrologue(builder, builder.getInsertionBlock());
      values[node.output(1)] = train::ConstantOp::create(
          builder, loc, DenseElementsAttr::get(type, true));
    }
    return define(*x);
  }
  if (op == "Add")
    return binary(train::AddOp());
  if (op == "Sub")
    return binary(train::SubOp());
  if (op == "Mul")
    return binary(train::MulOp());
  if (op == "Div")
    return binary(train::DivOp());
  if (op == "Pow") {
    // ONNX lets the exponent's type differ from the base's; the result has
    // the base's type. The reference computes np.power(base, exponent) and
    // casts to the base type, so an integer base with a float exponent is
    // computed in float and truncated, and otherwise the exponent is cast to
    // the base's type.
    auto base = getValue(node, 0);
    auto expType = inputType(node, 1);
    if (failed(base) || failed(expType))
      return failure();
    Type be = cast<RankedTensorType>(base->getType()).getElementType();
    Type ee = expType->getElementType();
    if (be.isInteger(1) || ee.isInteger(1))
      return nodeError(node) << "base and exponent must be numbers, got "
                             << be << " and " << ee;
    auto castTo = [&](Value v, Type elt) -> Value {
      auto t = cast<RankedTensorType>(v.getType());
      if (t.getElementType() == elt)
        return v;
      return train::CastOp::create(builder, loc, t.clone(elt), v);
    };
    bool floatPower = !be.isF32() && ee.isF32();
    std::string expName = node.input(1);
    if (const ConstTensor *e = getConst(expName);
        e && ee != be && !floatPower) {
      // A constant exponent (x ** 2) is cast here, not at run time.
      int32_t to = be.isF32()         ? onnxpb::TensorProto::FLOAT
                   : be.isInteger(64) ? onnxpb::TensorProto::INT64
                                      : onnxpb::TensorProto::INT32;
      expName += "." + dtypeName(to);
      if (!isKnown(expName))
        consts[expName] = castConst(*e, to);
    }
    auto exp = getValue(node, expName);
    if (failed(exp))
      return failure();
    if (floatPower) {
      auto power = buildInferred<train::PowOp>(node, loc,
                                               {castTo(*base, ee), *exp});
      if (failed(power))
        return failure();
      return define(castTo(*power, be));
    }
    return define(
        buildInferred<train::PowOp>(node, loc, {*base, castTo(*exp, be)}));
  }
  if (op == "Equal")
    return binary(train::EqualOp());
  if (op == "Less")
    return binary(train::LessOp());
  if (op == "LessOrEqual")
    return binary(train::LessOrEqualOp());
  if (op == "Greater")
    return binary(train::GreaterOp());
  if (op == "GreaterOrEqual") // a >= b is b <= a
    return binary(train::LessOrEqualOp(), /*swap=*/true);
  if (op == "Where") {
    auto vs = operands(3);
    if (failed(vs))
      return failure();
    Type ct = cast<RankedTensorType>((*vs)[0].getType()).getElementType();
    if (!ct.isInteger(1))
      return nodeError(node) << "condition must be bool, got " << ct;
    return define(buildInferred<train::WhereOp>(node, loc, *vs));
  }
  if (op == "Cast" || op == "CastLike") {
    auto to = castTarget(node);
    auto x = getValue(node, 0);
    if (failed(to) || failed(x))
      return failure();
    auto t = cast<RankedTensorType>(x->getType());
    Type elt = elementType(*to);
    if (t.getElementType() == elt)
      return define(*x);
    return define(
        train::CastOp::create(builder, loc, t.clone(elt), *x).getResult());
  }
  if (op == "Neg")
    return unary(train::NegOp());
  if (op == "Relu")
    return unary(train::ReluOp());
  if (op == "Tanh")
    return unary(train::TanhOp());
  if (op == "Sqrt")
    return unary(train::SqrtOp());
  if (op == "Reciprocal")
    return unary(train::ReciprocalOp());
  if (op == "Exp")
    return unary(train::ExpOp());
  if (op == "Log")
    return unary(train::LogOp());
  if (op == "Erf")
    return unary(train::ErfOp());
  if (op == "Sigmoid")
    return unary(train::SigmoidOp());
  if (op == "Cos")
    return unary(train::CosOp());
  if (op == "Sin")
    return unary(train::SinOp());
  if (op == "Gelu") {
    auto x = requireFloat(node, 0, "input");
    if (failed(x))
      return failure();
    std::string approx = strAttr(node, "approximate", "none");
    if (approx != "none" && approx != "tanh")
      return nodeError(node) << "approximate must be \"none\" or \"tanh\", "
                                "got \""
                             << approx << "\"";
    return define(train::GeluOp::create(builder, loc, x->getType(), *x,
                                        builder.getStringAttr(approx))
                      .getResult());
  }
  if (op == "Softmax") {
    auto x = requireFloat(node, 0, "input");
    if (failed(x))
      return failure();
    auto xType = cast<RankedTensorType>(x->getType());
    int64_t rank = xType.getRank();
    // Before opset 13 Softmax coerces its input to 2-D [prod(d0..axis-1),
    // prod(axis..)] (default axis 1) and normalizes the rows.
    bool coerced = opset < 13;
    int64_t axis = intAttr(node, "axis", coerced ? 1 : -1);
    int64_t n = train::normalizeAxis(axis, rank);
    if (n < 0)
      return nodeError(node) << "axis " << axis << " out of range for rank "
                             << rank;
    auto softmax = [&](Value v, int64_t a) -> Value {
      return train::SoftmaxOp::create(
          builder, loc, v.getType(), v,
          builder.getIntegerAttr(builder.getIntegerType(64, true), a));
    };
    if (!coerced || n == rank - 1)
      return define(softmax(*x, axis));
    ArrayRef<int64_t> shape = xType.getShape();
    SmallVector<int64_t> flat = {*numElementsOf(shape.take_front(n)),
                                 *numElementsOf(shape.drop_front(n))};
    Value rows = train::ReshapeOp::create(builder, loc, xType.clone(flat), *x);
    return reshapeTo(softmax(rows, 1), shape);
  }
  if (op == "MatMul") {
    auto a = requireFloat(node, 0, "A"), b = requireFloat(node, 1, "B");
    if (failed(a) || failed(b))
      return failure();
    // numpy semantics for 1-D operands: A [K] is a row [1, K], B [K] a
    // column [K, 1], and the added dimension leaves the result.
    auto at = cast<RankedTensorType>(a->getType());
    auto bt = cast<RankedTensorType>(b->getType());
    bool rowA = at.getRank() == 1, colB = bt.getRank() == 1;
    if (!rowA && !colB)
      return define(buildInferred<train::MatMulOp>(node, loc, {*a, *b}));
    if (at.getRank() == 0 || bt.getRank() == 0)
      return nodeError(node) << "operands must not be scalars (got "
                             << shapeStr(at.getShape()) << " and "
                             << shapeStr(bt.getShape()) << ")";
    Value a2 = *a, b2 = *b;
    if (rowA)
      a2 = train::ReshapeOp::create(builder, loc,
                                    at.clone({1, at.getDimSize(0)}), *a);
    if (colB)
      b2 = train::ReshapeOp::create(builder, loc,
                                    bt.clone({bt.getDimSize(0), 1}), *b);
    auto product = buildInferred<train::MatMulOp>(node, loc, {a2, b2});
    if (failed(product))
      return failure();
    SmallVector<int64_t> shape(
        cast<RankedTensorType>(product->getType()).getShape());
    if (colB)
      shape.pop_back();
    if (rowA) // [..., 1, N], or [..., 1] once B's column is gone
      shape.erase(shape.end() - (colB ? 1 : 2));
    return reshapeTo(*product, shape);
  }
  if (op == "Gemm") {
    auto a = requireFloat(node, 0, "A"), b = requireFloat(node, 1, "B");
    if (failed(a) || failed(b))
      return failure();
    SmallVector<Value> ops = {*a, *b};
    if (hasInput(node, 2)) {
      auto c = requireFloat(node, 2, "C");
      if (failed(c))
        return failure();
      ops.push_back(*c);
    }
    SmallVector<NamedAttribute> attrs = {
        builder.getNamedAttr("alpha", builder.getF32FloatAttr(
                                          floatAttr(node, "alpha", 1.0f))),
        builder.getNamedAttr("beta", builder.getF32FloatAttr(
                                         floatAttr(node, "beta", 1.0f))),
        builder.getNamedAttr(
            "transA", builder.getBoolAttr(intAttr(node, "transA", 0) != 0)),
        builder.getNamedAttr(
            "transB", builder.getBoolAttr(intAttr(node, "transB", 0) != 0))};
    return define(buildInferred<train::GemmOp>(node, loc, ops, attrs));
  }
  if (op == "LayerNormalization") {
    if (intAttr(node, "stash_type", 1) != 1)
      return nodeError(node) << "stash_type must be 1 (float32), got "
                             << intAttr(node, "stash_type", 1);
    auto x = requireFloat(node, 0, "X"), scale = requireFloat(node, 1, "Scale");
    if (failed(x) || failed(scale))
      return failure();
    Value bias;
    if (hasInput(node, 2)) {
      auto b = requireFloat(node, 2, "B");
      if (failed(b))
        return failure();
      bias = *b;
    }
    auto xType = cast<RankedTensorType>(x->getType());
    int64_t axis = intAttr(node, "axis", -1);
    int64_t n = train::normalizeAxis(axis, xType.getRank());
    if (n < 0)
      return nodeError(node) << "axis " << axis << " out of range for rank "
                             << xType.getRank();
    ArrayRef<int64_t> normShape = xType.getShape().drop_front(n);
    auto checkShape = [&](Value v, StringRef role) -> LogicalResult {
      ArrayRef<int64_t> s = cast<RankedTensorType>(v.getType()).getShape();
      if (s != normShape)
        return nodeError(node) << role << " shape " << shapeStr(s)
                               << " must equal the normalized shape "
                               << shapeStr(normShape)
                               << " (Spillway does not broadcast it)";
      return success();
    };
    if (failed(checkShape(*scale, "Scale")) ||
        (bias && failed(checkShape(bias, "B"))))
      return failure();
    float epsilon = floatAttr(node, "epsilon", 1e-5f);
    if (failed(define(
            train::LayerNormOp::create(
                builder, loc, xType, *x, *scale, bias,
                builder.getIntegerAttr(builder.getIntegerType(64, true), axis),
                builder.getF32FloatAttr(epsilon))
                .getResult())))
      return failure();
    // The saved statistics (outputs 1 and 2), when a later node reads them,
    // are computed apart from the fused op: Mean = mean(x) and InvStdDev =
    // 1 / sqrt(mean((x - Mean)^2) + epsilon) over the normalized axes, kept
    // as size-1 dimensions.
    if (!isOutputUsed(node, 1) && !isOutputUsed(node, 2))
      return success();
    SmallVector<NamedAttribute> reduceAttrs = {
        builder.getNamedAttr(
            "axes", builder.getDenseI64ArrayAttr(
                        llvm::to_vector(llvm::seq<int64_t>(n, xType.getRank())))),
        builder.getNamedAttr("keepdims", builder.getBoolAttr(true))};
    auto mean = buildInferred<train::ReduceMeanOp>(node, loc, *x, reduceAttrs);
    if (failed(mean))
      return failure();
    values[node.output(1)] = *mean;
    if (!isOutputUsed(node, 2))
      return success();
    Value centered = train::SubOp::create(builder, loc, xType, *x, *mean);
    Value square =
        train::MulOp::create(builder, loc, xType, centered, centered);
    auto var =
        buildInferred<train::ReduceMeanOp>(node, loc, square, reduceAttrs);
    if (failed(var))
      return failure();
    Type statType = var->getType();
    Value eps;
    {
      OpBuilder::InsertionGuard guard(builder);
      setInsertionPointToPrologue(builder, builder.getInsertionBlock());
      eps = train::ConstantOp::create(
          builder, loc,
          DenseElementsAttr::get(
              RankedTensorType::get({}, builder.getF32Type()), epsilon));
    }
    Value shifted = train::AddOp::create(builder, loc, statType, *var, eps);
    Value stddev = train::SqrtOp::create(builder, loc, statType, shifted);
    values[node.output(2)] =
        train::ReciprocalOp::create(builder, loc, statType, stddev);
    return success();
  }
  if (op == "Gather") {
    auto data = getValue(node, 0);
    auto indices = getValue(node, 1);
    if (failed(data) || failed(indices))
      return failure();
    Type et = cast<RankedTensorType>(data->getType()).getElementType();
    if (!et.isF32())
      return nodeError(node) << "data must be float32 unless it is a "
                                "compile-time constant, got "
                             << et << " from '" << node.input(0) << "'";
    Type it = cast<RankedTensorType>(indices->getType()).getElementType();
    if (!it.isInteger(64) && !it.isInteger(32))
      return nodeError(node) << "indices must be int64 or int32";
    return define(buildInferred<train::GatherOp>(
        node, loc, {*data, *indices},
        {builder.getNamedAttr("axis", builder.getI64IntegerAttr(
                                          intAttr(node, "axis", 0)))}));
  }
  if (op == "Reshape" || op == "Unsqueeze" || op == "Squeeze" ||
      op == "Flatten") {
    auto x = getValue(node, 0);
    if (failed(x))
      return failure();
    ArrayRef<int64_t> in = cast<RankedTensorType>(x->getType()).getShape();
    auto shape = op == "Reshape"     ? reshapeShape(node, in)
                 : op == "Unsqueeze" ? unsqueezeShape(node, in)
                 : op == "Squeeze"   ? squeezeShape(node, in)
                                     : flattenShape(node, in);
    if (failed(shape))
      return failure();
    return reshapeTo(*x, *shape);
  }
  if (op == "Expand") {
    auto x = getValue(node, 0);
    if (failed(x))
      return failure();
    auto t = cast<RankedTensorType>(x->getType());
    auto shape = expandShape(node, t.getShape());
    if (failed(shape))
      return failure();
    if (t.getShape() == ArrayRef<int64_t>(*shape))
      return define(*x);
    if (!t.getElementType().isF32() && getConst(node.input(0)))
      return nodeError(node)
             << "the result " << shapeStr(*shape) << " of " << t.getElementType()
             << " is a constant larger than the "
             << opts.maxInlineConstantElements
             << " elements Spillway evaluates at compile time; raise "
                "--max-inline-constant-elements (Spillway expands only "
                "float32 tensors at run time)";
    if (!t.getElementType().isF32())
      return nodeError(node) << "Spillway expands float32 tensors, or "
                                "compile-time constants; '"
                             << node.input(0) << "' is " << t;
    return define(train::BroadcastToOp::create(builder, loc, t.clone(*shape),
                                               *x)
                      .getResult());
  }
  if (op == "Transpose") {
    auto x = getValue(node, 0);
    if (failed(x))
      return failure();
    auto perm =
        transposePerm(node, cast<RankedTensorType>(x->getType()).getRank());
    if (failed(perm))
      return failure();
    return define(buildInferred<train::TransposeOp>(
        node, loc, *x,
        {builder.getNamedAttr("perm", builder.getDenseI64ArrayAttr(*perm))}));
  }
  if (op == "Slice") {
    auto x = getValue(node, 0);
    if (failed(x))
      return failure();
    auto spec =
        sliceSpec(node, cast<RankedTensorType>(x->getType()).getShape());
    if (failed(spec))
      return failure();
    return define(slice(*x, *spec));
  }
  if (op == "Split") {
    auto x = getValue(node, 0);
    if (failed(x))
      return failure();
    auto specs =
        splitSpecs(node, cast<RankedTensorType>(x->getType()).getShape());
    if (failed(specs))
      return failure();
    for (auto [i, spec] : llvm::enumerate(*specs))
      if (isOutputUsed(node, i))
        values[node.output(i)] = slice(*x, spec);
    return success();
  }
  if (op == "Concat") {
    SmallVector<Value> vs;
    for (int i = 0; i < node.input_size(); ++i) {
      auto v = getValue(node, i);
      if (failed(v))
        return failure();
      vs.push_back(*v);
    }
    return define(buildInferred<train::ConcatOp>(
        node, loc, vs,
        {builder.getNamedAttr("axis", builder.getI64IntegerAttr(
                                          intAttr(node, "axis", 0)))}));
  }
  if (op == "ConstantOfShape") {
    // Folding declined: too large to evaluate, but a splat costs nothing.
    auto shape = constInts(node, 0, "shape");
    if (failed(shape))
      return failure();
    ConstTensor value(onnxpb::TensorProto::FLOAT, {});
    if (const auto *a = findAttr(node, "value")) {
      auto v = toConst(a->t(), "ConstantOfShape value");
      if (failed(v))
        return failure();
      value = std::move(*v);
    }
    auto type = RankedTensorType::get(*shape, elementType(value.dtype));
    Attribute scalar =
        value.isFloat() ? (Attribute)builder.getF32FloatAttr(value.floats[0])
                        : (Attribute)builder.getIntegerAttr(
                              type.getElementType(), value.ints[0]);
    OpBuilder::InsertionGuard guard(builder);
    setInsertionPointToPrologue(builder, builder.getInsertionBlock());
    return define(train::ConstantOp::create(
                      builder, loc, DenseElementsAttr::get(type, scalar))
                      .getResult());
  }
  if (op == "Range" || op == "Trilu" || op == "Not" || op == "And" ||
      op == "Or") {
    for (int i = 0; i < node.input_size(); ++i)
      if (hasInput(node, i) && unfoldedConstants.contains(node.input(i)))
        return nodeError(node)
               << "input '" << node.input(i)
               << "' is a constant too large to evaluate at compile time; "
                  "raise --max-inline-constant-elements (now "
               << opts.maxInlineConstantElements << ")";
    for (int i = 0; i < node.input_size(); ++i)
      if (hasInput(node, i) && !getConst(node.input(i)))
        return nodeError(node)
               << "input '" << node.input(i)
               << "' is not a compile-time constant; Spillway evaluates "
               << op << " only at compile time (from initializers, Constant "
                        "nodes and shape arithmetic on them)";
    return nodeError(node) << "result is too large to evaluate at compile "
                              "time; raise --max-inline-constant-elements "
                              "(now "
                           << opts.maxInlineConstantElements << ")";
  }
  if (op == "ReduceSum" || op == "ReduceMean" || op == "ReduceMax")
    return importReduce(node, loc);
  if (op == "SoftmaxCrossEntropyLoss")
    return importSoftmaxCrossEntropy(node, loc);
  return error() << "node '" << nodeName(node) << "' (" << op
                 << ", domain 'ai.onnx', opset " << opset
                 << ") is not supported by Spillway's importer yet; supported "
                    "ops: "
                 << kSupportedOps;
}

//===----------------------------------------------------------------------===//
// Model
//===----------------------------------------------------------------------===//

OwningOpRef<ModuleOp> Importer::import(const onnxpb::ModelProto &model) {
  if (model.ir_version() < kMinIRVersion || model.ir_version() > kMaxIRVersion)
    return error() << "'" << modelPath << "' has IR version "
                   << model.ir_version() << "; Spillway reads IR versions "
                   << kMinIRVersion << " to " << kMaxIRVersion
                   << " (onnx 1.23; re-export the model, or convert it with "
                      "onnx.version_converter)",
           nullptr;
  for (const auto &imp : model.opset_import()) {
    std::string domain = isDefaultDomain(imp.domain()) ? "" : imp.domain();
    // Two versions of one domain: which one the nodes mean is a guess.
    if (!opsets.try_emplace(domain, imp.version()).second)
      return error() << "'" << modelPath << "' imports domain '"
                     << (domain.empty() ? std::string("ai.onnx") : domain)
                     << "' twice (opset_import); import each domain once",
             nullptr;
  }
  auto it = opsets.find("");
  bool usesDefault = llvm::any_of(model.graph().node(), [](const auto &n) {
    return isDefaultDomain(n.domain());
  });
  if (it == opsets.end() && usesDefault)
    return error() << "'" << modelPath
                   << "' does not import the default ONNX domain (no "
                      "opset_import for 'ai.onnx')",
           nullptr;
  // A graph of only other domains' ops (e.g. one training-domain Adam node)
  // needs no default opset; no default-domain node consults this one.
  opset = it == opsets.end() ? kMaxOpset : it->second;
  opsets["ai.onnx"] = opset;
  if (opset < kMinOpset || opset > kMaxOpset)
    return error() << "'" << modelPath << "' uses ONNX opset " << opset
                   << "; Spillway imports opsets " << kMinOpset << " to "
                   << kMaxOpset << " (re-export the model, e.g. "
                   << "torch.onnx.export(..., opset_version=17))",
           nullptr;

  const onnxpb::GraphProto &graph = model.graph();
  if (graph.output_size() == 0)
    return error() << "the graph has no outputs"
                   << (opts.forwardOnly ? "" : "; it must end in its loss"),
           nullptr;
  for (const auto &node : graph.node())
    for (const auto &in : node.input())
      usedNames.insert(in);
  for (const auto &out : graph.output())
    usedNames.insert(out.name());

  module = ModuleOp::create(UnknownLoc::get(&ctx));
  OwningOpRef<ModuleOp> owner(module);
  module->setAttr(train::kWeightsAttrName,
                  builder.getStringAttr(opts.weightsAttr));
  paramBlock = module.getBody();

  for (const std::string &name : opts.constantInitializers) {
    if (llvm::any_of(graph.initializer(), [&](const onnxpb::TensorProto &t) {
          return t.name() == name;
        })) {
      constantInitializers.insert(name);
      continue;
    }
    // Name the initializers the user may have meant.
    SmallVector<std::pair<unsigned, StringRef>> close;
    for (const auto &t : graph.initializer()) {
      StringRef cand = t.name();
      unsigned limit = std::max<size_t>(name.size(), cand.size()) / 3;
      unsigned dist = StringRef(name).edit_distance(cand, true, limit + 1);
      if (dist <= limit || cand.contains(name) ||
          (!cand.empty() && StringRef(name).contains(cand)))
        close.emplace_back(dist, cand);
    }
    llvm::sort(close);
    auto diag = error() << "--constant-initializers: '" << name
                        << "' is not an initializer of the model";
    if (close.empty()) {
      diag << " (it has " << graph.initializer_size() << " initializers)";
    } else {
      diag << "; did you mean ";
      for (auto [i, c] : llvm::enumerate(ArrayRef(close).take_front(5)))
        diag << (i ? ", " : "") << "'" << c.second << "'";
      diag << "?";
    }
    return nullptr;
  }
  for (const auto &init : graph.initializer())
    if (failed(declareInitializer(init)))
      return nullptr;
  if (graph.sparse_initializer_size())
    return error() << "sparse initializers are not supported", nullptr;

  SmallVector<Type> argTypes;
  SmallVector<StringRef> argNames;
  for (const auto &init : graph.initializer())
    definedBy[init.name()] = "an initializer";
  llvm::StringSet<> inputNames;
  for (const auto &in : graph.input()) {
    if (in.name().empty())
      return error() << "a graph input has no name", nullptr;
    if (!inputNames.insert(in.name()).second)
      return error() << "graph input '" << in.name()
                     << "' is listed twice; each input needs its own name",
             nullptr;
    if (params.count(in.name()) || consts.count(in.name())) {
      // Old exporters list initializers as inputs too; such an input is the
      // initializer. One declared with another type is a different tensor
      // under the same name.
      if (failed(checkInputMatchesInitializer(in)))
        return nullptr;
      continue;
    }
    definedBy[in.name()] = "a graph input";
    if (failed(declareInput(in, argTypes)))
      return nullptr;
    argNames.push_back(in.name());
  }
  for (const auto &kv : opts.dimBindings)
    if (!usedBindings.contains(kv.getKey()))
      emitWarning(fileLoc)
          << "--bind " << kv.getKey()
          << " names no symbolic dimension of a graph input";

  builder.setInsertionPointToEnd(module.getBody());
  auto func = func::FuncOp::create(builder, UnknownLoc::get(&ctx), "main",
                                   builder.getFunctionType(argTypes, {}));
  Block *entry = func.addEntryBlock();
  for (auto [i, name] : llvm::enumerate(argNames)) {
    func.setArgAttr(i, train::kInputNameAttrName, builder.getStringAttr(name));
    values[name] = entry->getArgument(i);
  }
  builder.setInsertionPointToEnd(entry);

  for (const auto &node : graph.node()) {
    if (failed(defineOutputs(node)) || failed(importNode(node)))
      return nullptr;
    ++nodeIndex;
  }

  SmallVector<Value> results;
  if (opts.forwardOnly) {
    // Every output, by name; constants (folded or not) become train.constant.
    for (const auto &output : graph.output()) {
      StringRef name = output.name();
      if (!isKnown(name))
        return error() << "graph output '" << name
                       << "' is not produced by any node",
               nullptr;
      onnxpb::NodeProto outputNode;
      outputNode.set_name("graph output '" + output.name() + "'");
      outputNode.set_op_type("output");
      auto v = getValue(outputNode, name);
      if (failed(v))
        return nullptr;
      results.push_back(*v);
    }
  } else {
    StringRef lossName = graph.output(0).name();
    Value loss = values.lookup(lossName);
    if (!loss) {
      if (getConst(lossName))
        return error() << "graph output '" << lossName
                       << "' is a constant; the graph must end in its loss",
               nullptr;
      if (params.count(lossName))
        return error() << "graph output '" << lossName
                       << "' is an initializer; the graph must end in its "
                          "loss",
               nullptr;
      return error() << "graph output '" << lossName
                     << "' is not produced by any node",
             nullptr;
    }
    auto lossType = cast<RankedTensorType>(loss.getType());
    if (lossType.getRank() != 0 || !lossType.getElementType().isF32())
      return error() << "graph output '" << lossName << "' has shape "
                     << shapeStr(lossType.getShape()) << " of "
                     << lossType.getElementType()
                     << "; Spillway trains on the graph's first output, which "
                        "must be a scalar float32 loss: the graph must end in "
                        "its loss (e.g. SoftmaxCrossEntropyLoss with "
                        "reduction \"mean\"), or import with --forward for "
                        "inference",
             nullptr;
    for (int i = 1; i < graph.output_size(); ++i)
      emitWarning(fileLoc)
          << "ignoring graph output '" << graph.output(i).name()
          << "': Spillway trains on the first output (the loss) only";
    results.push_back(loss);
  }
  func::ReturnOp::create(builder, UnknownLoc::get(&ctx), results);
  func.setType(builder.getFunctionType(argTypes, ValueRange(results).getTypes()));
  if (opts.forwardOnly) {
    func->setAttr(train::kForwardOnlyAttrName, builder.getUnitAttr());
    for (auto [i, output] : llvm::enumerate(graph.output()))
      func.setResultAttr(i, train::kInputNameAttrName,
                         builder.getStringAttr(output.name()));
  }

  if (failed(verify(module)))
    return error() << "internal error: the imported module does not verify",
           nullptr;

  if (!opts.weightsPath.empty()) {
    std::error_code ec;
    llvm::raw_fd_ostream os(opts.weightsPath, ec, llvm::sys::fs::OF_None);
    if (!ec) {
      os << weights;
      os.close();
      ec = os.error();
    }
    if (ec)
      return error() << "cannot write weights file '" << opts.weightsPath
                     << "': " << ec.message(),
             nullptr;
  }
  return owner;
}

//===----------------------------------------------------------------------===//
// Public API
//===----------------------------------------------------------------------===//

/// Parses the file into `model`; false (with a diagnostic) on failure.
static bool loadModel(StringRef path, MLIRContext &ctx,
                      onnxpb::ModelProto &model) {
  auto buf = llvm::MemoryBuffer::getFileOrSTDIN(path, /*IsText=*/false);
  if (!buf) {
    emitError(modelFileLoc(ctx, path))
        << "cannot read '" << path << "': " << buf.getError().message();
    return false;
  }
  StringRef data = (*buf)->getBuffer();
  if (path.ends_with(".onnxtext") || path.ends_with(".onnxtxt")) {
    // libonnx's parser recurses once per nesting level (subgraphs, lists):
    // deep nesting is refused before it overflows the stack. (The binary
    // parser stops at protobuf's recursion limit, 100.)
    std::string error;
    if (!checkNesting(data, "", CommentStyle::ONNX, error)) {
      emitError(modelFileLoc(ctx, path)) << error;
      return false;
    }
    auto status = onnxpb::OnnxParser::Parse(model, data.str().c_str());
    if (!status.IsOK()) {
      emitError(modelFileLoc(ctx, path))
          << "'" << path << "' is not an ONNX model (textual syntax parse "
          << "failed): " << status.ErrorMessage();
      return false;
    }
    return true;
  }
  if (data.size() > (size_t)INT_MAX ||
      !model.ParseFromArray(data.data(), (int)data.size())) {
    emitError(modelFileLoc(ctx, path))
        << "'" << path << "' is not an ONNX model (protobuf parse failed: "
        << "truncated or not a ModelProto)";
    return false;
  }
  // Many byte strings parse as some protobuf; a model has a graph and an IR
  // version.
  if (!model.has_graph() || model.ir_version() <= 0) {
    emitError(modelFileLoc(ctx, path))
        << "'" << path << "' is not an ONNX model (protobuf parse failed: "
        << (model.has_graph() ? "no ir_version" : "no graph") << ")";
    return false;
  }
  return true;
}

OwningOpRef<ModuleOp> spillway::importONNXFile(StringRef path,
                                               MLIRContext &ctx,
                                               const ONNXImportOptions &opts) {
  ctx.loadDialect<train::TrainDialect, func::FuncDialect>();
  try {
    onnxpb::ModelProto model;
    if (!loadModel(path, ctx, model))
      return nullptr;
    Importer importer(ctx, path, opts);
    return importer.import(model);
  } catch (const std::exception &e) {
    emitError(modelFileLoc(ctx, path))
        << "while importing '" << path << "': " << e.what();
    return nullptr;
  } catch (...) {
    emitError(modelFileLoc(ctx, path))
        << "while importing '" << path << "': unknown exception";
    return nullptr;
  }
}

LogicalResult spillway::parseDimBindings(StringRef spec,
                                         llvm::StringMap<int64_t> &out,
                                         std::string &error) {
  SmallVector<StringRef> entries;
  spec.split(entries, ',', /*MaxSplit=*/-1, /*KeepEmpty=*/false);
  for (StringRef entry : entries) {
    entry = entry.trim();
    auto [name, value] = entry.split('=');
    name = name.trim();
    value = value.trim();
    int64_t n;
    if (name.empty() || !entry.contains('=') || value.getAsInteger(10, n) ||
        n <= 0) {
      error = ("bad binding '" + entry +
               "': expected NAME=INT with a positive INT")
                  .str();
      return failure();
    }
    out[name] = n;
  }
  return success();
}

void spillway::printSupportedONNXOps(llvm::raw_ostream &os) {
  SmallVector<StringRef> ops;
  StringRef(kSupportedOps).split(ops, ", ");
  for (StringRef op : ops) {
    auto [name, note] = op.split(' ');
    os << name << (note == "(constant)" ? " constant-only" : "") << "\n";
  }
  // Ops of another domain: NAME DOMAIN [forward-only].
  SmallVector<StringRef> training;
  StringRef(kSupportedTrainingOps).split(training, ", ");
  for (StringRef op : training)
    os << op << " " << kTrainingDomain << " forward-only\n";
}

void spillway::setDefaultWeightsPaths(StringRef mlirOutputPath,
                                      StringRef modelPath,
                                      ONNXImportOptions &opts) {
  if (mlirOutputPath.empty() || mlirOutputPath == "-") {
    opts.weightsPath =
        (llvm::sys::path::stem(modelPath) + ".weights.bin").str();
    opts.weightsAttr = opts.weightsPath;
    return;
  }
  SmallString<256> path(mlirOutputPath);
  llvm::sys::path::replace_extension(path, "weights.bin");
  opts.weightsPath = path.str().str();
  opts.weightsAttr = llvm::sys::path::filename(path).str();
}
