//===- ImportONNX.cpp - ONNX training graph -> train dialect --------------===//
//
// Reads a ModelProto (binary or ONNX textual syntax), propagates static shapes
// while it builds train ops, writes float initializers to the weights file and
// declares them as train.param. Integer initializers and Constant nodes are
// compile-time constants: folded into attributes and result types where ONNX
// uses them as shapes or axes, small train.constant ops elsewhere.
//
// libonnx 1.12 knows default-domain opsets only up to 17, so nothing here uses
// its schemas, checker or shape inference: only the protobuf classes and the
// textual-syntax parser.
//
//===----------------------------------------------------------------------===//

#include "spillway/Target/ONNX/ImportONNX.h"

#include "spillway/Dialect/Train/IR/TrainOps.h"

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
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <onnx/defs/parser.h>
#include <onnx/onnx_pb.h>

#include <cstring>
#include <exception>
#include <optional>

using namespace mlir;
using namespace spillway;
namespace onnxpb = ::onnx;

namespace {

constexpr int64_t kMinOpset = 13;
constexpr int64_t kMaxOpset = 21;
constexpr int64_t kMaxConstantElements = 4096;
constexpr int64_t kWeightsAlignment = 64;

const char *const kSupportedOps =
    "Add, Constant, Div, Gather, Gelu, Gemm, Identity, LayerNormalization, "
    "MatMul, Mul, Neg, ReduceMean, ReduceSum, Relu, Reshape, Softmax, "
    "SoftmaxCrossEntropyLoss, Sub, Tanh, Transpose";

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

/// A tensor known at import time: an integer initializer or a Constant node.
struct ConstTensor {
  SmallVector<int64_t> shape;
  int32_t dtype = 0; // FLOAT, INT64 or INT32
  std::vector<int64_t> ints;
  std::vector<float> floats;

  bool isFloat() const { return dtype == onnxpb::TensorProto::FLOAT; }
  int64_t numElements() const {
    return isFloat() ? (int64_t)floats.size() : (int64_t)ints.size();
  }
};

/// Diagnostics about the model point at the file (ONNX has no source lines).
Location modelFileLoc(MLIRContext &ctx, StringRef path) {
  return FileLineColLoc::get(&ctx, path, 0, 0);
}

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
  FailureOr<ConstTensor> toConst(const onnxpb::TensorProto &t,
                                 StringRef what);
  LogicalResult declareInitializer(const onnxpb::TensorProto &t);
  LogicalResult declareInput(const onnxpb::ValueInfoProto &info,
                             SmallVectorImpl<Type> &argTypes);

  //===--- values ---===//
  bool isKnown(StringRef name) const {
    return values.count(name) || params.count(name) || consts.count(name);
  }
  FailureOr<Value> getValue(const onnxpb::NodeProto &node, int idx);
  FailureOr<Value> getValue(const onnxpb::NodeProto &node, StringRef name);
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

  //===--- nodes ---===//
  LogicalResult importNode(const onnxpb::NodeProto &node);
  LogicalResult importConstant(const onnxpb::NodeProto &node);
  LogicalResult importReshape(const onnxpb::NodeProto &node, Location loc);
  LogicalResult importReduce(const onnxpb::NodeProto &node, Location loc,
                             bool isMean);
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
  llvm::StringSet<> usedNames;
  llvm::StringSet<> usedBindings;
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
  default:
    return {};
  }
}

static int64_t elementBytes(int32_t dtype) {
  return dtype == onnxpb::TensorProto::INT64 ? 8 : 4;
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
                   << "; Spillway supports FLOAT (float32), INT64 and INT32 "
                      "tensors";
  int64_t numel = 1;
  for (int64_t d : t.dims()) {
    if (d < 0)
      return error() << what << " '" << t.name() << "' has negative dimension "
                     << d;
    shape.push_back(d);
    numel *= d;
  }
  int64_t expected = numel * elementBytes(dtype);

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
  if (t.data_type() != onnxpb::TensorProto::FLOAT) {
    // Integer initializers are constants (shapes, axes, index tables).
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
                   << "; Spillway supports FLOAT (float32), INT64 and INT32";
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
  argTypes.push_back(RankedTensorType::get(shape, elt));
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

FailureOr<Value> Importer::getValue(const onnxpb::NodeProto &node,
                                    StringRef name) {
  if (Value v = values.lookup(name))
    return v;
  OpBuilder::InsertionGuard guard(builder);
  // Parameter reads and constants go at the start of the function, once each,
  // so every parameter has exactly one train.param_value.
  Block *entry = builder.getInsertionBlock();
  auto it = params.find(name);
  if (it != params.end()) {
    builder.setInsertionPointToStart(entry);
    for (Operation &op : *entry)
      if (isa<train::ParamValueOp, train::ConstantOp>(op))
        builder.setInsertionPointAfter(&op);
    train::ParamOp param = it->second;
    Value v = train::ParamValueOp::create(builder, param.getLoc(),
                                          param.getTensorType(),
                                          param.getSymName());
    return values[name] = v;
  }
  if (const ConstTensor *c = getConst(name)) {
    if (c->numElements() > kMaxConstantElements)
      return nodeError(node) << "constant '" << name << "' has "
                             << c->numElements()
                             << " elements; Spillway inlines constants of "
                                "at most "
                             << kMaxConstantElements
                             << " (make it a float initializer, or a "
                                "graph input)",
             failure();
    auto type = RankedTensorType::get(c->shape, elementType(c->dtype));
    DenseElementsAttr attr;
    if (c->isFloat()) {
      attr = DenseElementsAttr::get(type, ArrayRef<float>(c->floats));
    } else if (c->dtype == onnxpb::TensorProto::INT64) {
      attr = DenseElementsAttr::get(type, ArrayRef<int64_t>(c->ints));
    } else {
      SmallVector<int32_t> v(c->ints.begin(), c->ints.end());
      attr = DenseElementsAttr::get(type, ArrayRef<int32_t>(v));
    }
    builder.setInsertionPointToStart(entry);
    for (Operation &op : *entry)
      if (isa<train::ParamValueOp, train::ConstantOp>(op))
        builder.setInsertionPointAfter(&op);
    Value v = train::ConstantOp::create(
        builder, NameLoc::get(builder.getStringAttr(name)), attr);
    return values[name] = v;
  }
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
// Nodes
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

LogicalResult Importer::importReshape(const onnxpb::NodeProto &node,
                                      Location loc) {
  auto input = getValue(node, 0);
  if (failed(input))
    return failure();
  if (!hasInput(node, 1))
    return nodeError(node) << "shape input is missing";
  const ConstTensor *shapeC = getConst(node.input(1));
  if (!shapeC || shapeC->isFloat() || shapeC->shape.size() != 1)
    return nodeError(node) << "shape '" << node.input(1)
                           << "' must be a 1-D integer constant (initializer "
                              "or Constant node); Spillway needs static "
                              "shapes";
  auto inType = cast<RankedTensorType>(input->getType());
  bool allowZero = intAttr(node, "allowzero", 0) != 0;
  SmallVector<int64_t> shape;
  int64_t inferIdx = -1, known = 1;
  for (auto [i, entry] : llvm::enumerate(shapeC->ints)) {
    int64_t d = entry;
    if (d == 0 && !allowZero) {
      if ((int64_t)i >= inType.getRank())
        return nodeError(node) << "shape entry " << i
                               << " is 0 (copy) but the input has rank "
                               << inType.getRank();
      d = inType.getDimSize(i);
    } else if (d == -1) {
      if (inferIdx >= 0)
        return nodeError(node) << "shape " << shapeStr(shapeC->ints)
                               << " has more than one -1";
      inferIdx = i;
      shape.push_back(-1);
      continue;
    } else if (d < -1) {
      return nodeError(node) << "shape entry " << i << " is " << d;
    }
    shape.push_back(d);
    known *= d;
  }
  int64_t numel = inType.getNumElements();
  if (inferIdx >= 0) {
    if (known == 0 || numel % known != 0)
      return nodeError(node) << "cannot reshape " << shapeStr(inType.getShape())
                             << " to " << shapeStr(shapeC->ints);
    shape[inferIdx] = numel / known;
  } else if (known != numel) {
    return nodeError(node) << "cannot reshape " << shapeStr(inType.getShape())
                           << " (" << numel << " elements) to "
                           << shapeStr(shape) << " (" << known
                           << " elements)";
  }
  auto type = RankedTensorType::get(shape, inType.getElementType());
  values[node.output(0)] = train::ReshapeOp::create(builder, loc, type, *input);
  return success();
}

LogicalResult Importer::importReduce(const onnxpb::NodeProto &node,
                                     Location loc, bool isMean) {
  auto input = requireFloat(node, 0, "input");
  if (failed(input))
    return failure();
  // ReduceSum takes axes as an input from opset 13, ReduceMean from 18.
  bool axesAsInput = isMean ? opset >= 18 : opset >= 13;
  SmallVector<int64_t> axes;
  if (axesAsInput) {
    if (hasInput(node, 1)) {
      const ConstTensor *c = getConst(node.input(1));
      if (!c || c->isFloat())
        return nodeError(node) << "axes '" << node.input(1)
                               << "' must be an integer constant "
                                  "(initializer or Constant node)";
      axes.assign(c->ints.begin(), c->ints.end());
    }
  } else if (const auto *a = findAttr(node, "axes")) {
    axes.assign(a->ints().begin(), a->ints().end());
  }
  bool keepdims = intAttr(node, "keepdims", 1) != 0;
  if (axes.empty() && intAttr(node, "noop_with_empty_axes", 0) != 0) {
    values[node.output(0)] = *input;
    return success();
  }
  SmallVector<NamedAttribute> attrs = {
      builder.getNamedAttr("axes", builder.getDenseI64ArrayAttr(axes)),
      builder.getNamedAttr("keepdims", builder.getBoolAttr(keepdims))};
  FailureOr<Value> v =
      isMean ? buildInferred<train::ReduceMeanOp>(node, loc, *input, attrs)
             : buildInferred<train::ReduceSumOp>(node, loc, *input, attrs);
  if (failed(v))
    return failure();
  values[node.output(0)] = *v;
  return success();
}

LogicalResult Importer::importNode(const onnxpb::NodeProto &node) {
  StringRef op = node.op_type();
  if (!isDefaultDomain(node.domain())) {
    auto it = opsets.find(node.domain());
    return error() << "node '" << nodeName(node) << "' (" << op << ", domain '"
                   << node.domain() << "', opset "
                   << (it == opsets.end() ? std::string("not imported")
                                          : std::to_string(it->second))
                   << ") is not supported by Spillway's importer yet; "
                      "supported ops (default domain): "
                   << kSupportedOps;
  }
  if (node.output_size() < 1 || node.output(0).empty())
    return nodeError(node) << "has no output";
  for (int i = 1; i < node.output_size(); ++i)
    if (isOutputUsed(node, i) && op != "LayerNormalization" &&
        op != "SoftmaxCrossEntropyLoss")
      return nodeError(node) << "output " << i << " ('" << node.output(i)
                             << "') is used but not supported";
  Location loc = NameLoc::get(builder.getStringAttr(nodeName(node)));
  StringRef out = node.output(0);

  auto unary = [&](auto tag) -> LogicalResult {
    using OpTy = decltype(tag);
    auto x = requireFloat(node, 0, "input");
    if (failed(x))
      return failure();
    values[out] = OpTy::create(builder, loc, x->getType(), *x);
    return success();
  };
  auto binary = [&](auto tag) -> LogicalResult {
    using OpTy = decltype(tag);
    auto a = getValue(node, 0), b = getValue(node, 1);
    if (failed(a) || failed(b))
      return failure();
    Type ea = cast<RankedTensorType>(a->getType()).getElementType();
    Type eb = cast<RankedTensorType>(b->getType()).getElementType();
    if (ea != eb)
      return nodeError(node) << "operand element types differ (" << ea
                             << " vs " << eb
                             << "); ONNX requires them to match";
    auto v = buildInferred<OpTy>(node, loc, {*a, *b});
    if (failed(v))
      return failure();
    values[out] = *v;
    return success();
  };

  if (op == "Constant")
    return importConstant(node);
  if (op == "Identity") {
    if (!hasInput(node, 0))
      return nodeError(node) << "input 0 is missing";
    StringRef in = node.input(0);
    if (const ConstTensor *c = getConst(in)) {
      consts[out] = ConstTensor(*c);
      return success();
    }
    auto v = getValue(node, in);
    if (failed(v))
      return failure();
    values[out] = *v;
    return success();
  }
  if (op == "Add")
    return binary(train::AddOp());
  if (op == "Sub")
    return binary(train::SubOp());
  if (op == "Mul")
    return binary(train::MulOp());
  if (op == "Div")
    return binary(train::DivOp());
  if (op == "Neg")
    return unary(train::NegOp());
  if (op == "Relu")
    return unary(train::ReluOp());
  if (op == "Tanh")
    return unary(train::TanhOp());
  if (op == "Gelu") {
    auto x = requireFloat(node, 0, "input");
    if (failed(x))
      return failure();
    std::string approx = strAttr(node, "approximate", "none");
    if (approx != "none" && approx != "tanh")
      return nodeError(node) << "approximate must be \"none\" or \"tanh\", "
                                "got \""
                             << approx << "\"";
    values[out] = train::GeluOp::create(builder, loc, x->getType(), *x,
                                        builder.getStringAttr(approx));
    return success();
  }
  if (op == "Softmax") {
    auto x = requireFloat(node, 0, "input");
    if (failed(x))
      return failure();
    int64_t axis = intAttr(node, "axis", -1);
    int64_t rank = cast<RankedTensorType>(x->getType()).getRank();
    if (train::normalizeAxis(axis, rank) < 0)
      return nodeError(node) << "axis " << axis << " out of range for rank "
                             << rank;
    values[out] = train::SoftmaxOp::create(
        builder, loc, x->getType(), *x,
        builder.getIntegerAttr(builder.getIntegerType(64, true), axis));
    return success();
  }
  if (op == "MatMul") {
    auto a = requireFloat(node, 0, "A"), b = requireFloat(node, 1, "B");
    if (failed(a) || failed(b))
      return failure();
    auto v = buildInferred<train::MatMulOp>(node, loc, {*a, *b});
    if (failed(v))
      return failure();
    values[out] = *v;
    return success();
  }
  if (op == "Gemm") {
    auto a = requireFloat(node, 0, "A"), b = requireFloat(node, 1, "B");
    if (failed(a) || failed(b))
      return failure();
    SmallVector<Value> operands = {*a, *b};
    if (hasInput(node, 2)) {
      auto c = requireFloat(node, 2, "C");
      if (failed(c))
        return failure();
      operands.push_back(*c);
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
    auto v = buildInferred<train::GemmOp>(node, loc, operands, attrs);
    if (failed(v))
      return failure();
    values[out] = *v;
    return success();
  }
  if (op == "LayerNormalization") {
    for (int i = 1; i < 3; ++i)
      if (isOutputUsed(node, i))
        return nodeError(node) << "output " << i << " ('" << node.output(i)
                               << "', the saved "
                               << (i == 1 ? "mean" : "inverse std dev")
                               << ") is used; Spillway supports only output 0";
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
    values[out] = train::LayerNormOp::create(
        builder, loc, xType, *x, *scale, bias,
        builder.getIntegerAttr(builder.getIntegerType(64, true), axis),
        builder.getF32FloatAttr(floatAttr(node, "epsilon", 1e-5f)));
    return success();
  }
  if (op == "Gather") {
    auto data = requireFloat(node, 0, "data");
    auto indices = getValue(node, 1);
    if (failed(data) || failed(indices))
      return failure();
    if (!cast<RankedTensorType>(indices->getType())
             .getElementType()
             .isInteger())
      return nodeError(node) << "indices must be int64 or int32";
    auto v = buildInferred<train::GatherOp>(
        node, loc, {*data, *indices},
        {builder.getNamedAttr("axis", builder.getI64IntegerAttr(
                                          intAttr(node, "axis", 0)))});
    if (failed(v))
      return failure();
    values[out] = *v;
    return success();
  }
  if (op == "Reshape")
    return importReshape(node, loc);
  if (op == "Transpose") {
    auto x = getValue(node, 0);
    if (failed(x))
      return failure();
    int64_t rank = cast<RankedTensorType>(x->getType()).getRank();
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
                             << " is not a permutation of 0.." << rank - 1;
    auto v = buildInferred<train::TransposeOp>(
        node, loc, *x,
        {builder.getNamedAttr("perm", builder.getDenseI64ArrayAttr(perm))});
    if (failed(v))
      return failure();
    values[out] = *v;
    return success();
  }
  if (op == "ReduceSum")
    return importReduce(node, loc, /*isMean=*/false);
  if (op == "ReduceMean")
    return importReduce(node, loc, /*isMean=*/true);
  if (op == "SoftmaxCrossEntropyLoss") {
    if (hasInput(node, 2))
      return nodeError(node) << "class weights (input 2, '" << node.input(2)
                             << "') are not supported";
    if (isOutputUsed(node, 1))
      return nodeError(node) << "output 1 ('" << node.output(1)
                             << "', log_prob) is used; Spillway supports "
                                "only the loss output";
    std::string reduction = strAttr(node, "reduction", "mean");
    if (reduction != "mean" && reduction != "sum")
      return nodeError(node) << "reduction \"" << reduction
                             << "\" is not supported; use \"mean\" or "
                                "\"sum\" (the loss must be a scalar)";
    auto scores = requireFloat(node, 0, "scores");
    auto labels = getValue(node, 1);
    if (failed(scores) || failed(labels))
      return failure();
    auto st = cast<RankedTensorType>(scores->getType());
    auto lt = cast<RankedTensorType>(labels->getType());
    if (!lt.getElementType().isInteger())
      return nodeError(node) << "labels must be int64 or int32, got "
                             << lt.getElementType();
    if (st.getRank() != 2 || lt.getRank() != 1 ||
        st.getDimSize(0) != lt.getDimSize(0))
      return nodeError(node) << "Spillway supports scores [N, C] with labels "
                                "[N]; got "
                             << shapeStr(st.getShape()) << " and "
                             << shapeStr(lt.getShape());
    SmallVector<NamedAttribute> attrs = {builder.getNamedAttr(
        "reduction", builder.getStringAttr(reduction))};
    if (const auto *a = findAttr(node, "ignore_index"))
      attrs.push_back(builder.getNamedAttr(
          "ignore_index",
          builder.getIntegerAttr(builder.getIntegerType(64, true), a->i())));
    auto v = buildInferred<train::SoftmaxCrossEntropyLossOp>(
        node, loc, {*scores, *labels}, attrs);
    if (failed(v))
      return failure();
    values[out] = *v;
    return success();
  }
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
  for (const auto &imp : model.opset_import())
    opsets[isDefaultDomain(imp.domain()) ? "" : imp.domain()] = imp.version();
  auto it = opsets.find("");
  if (it == opsets.end())
    return error() << "'" << modelPath
                   << "' does not import the default ONNX domain (no "
                      "opset_import for 'ai.onnx')",
           nullptr;
  opset = it->second;
  opsets["ai.onnx"] = opset;
  if (opset < kMinOpset || opset > kMaxOpset)
    return error() << "'" << modelPath << "' uses ONNX opset " << opset
                   << "; Spillway imports opsets " << kMinOpset << " to "
                   << kMaxOpset << " (re-export the model, e.g. "
                   << "torch.onnx.export(..., opset_version=17))",
           nullptr;

  const onnxpb::GraphProto &graph = model.graph();
  if (graph.output_size() == 0)
    return error() << "the graph has no outputs; it must end in its loss",
           nullptr;
  for (const auto &node : graph.node())
    for (const auto &in : node.input())
      usedNames.insert(in);
  for (const auto &out : graph.output())
    usedNames.insert(out.name());

  module = ModuleOp::create(UnknownLoc::get(&ctx));
  OwningOpRef<ModuleOp> owner(module);
  module->setAttr("train.weights", builder.getStringAttr(opts.weightsAttr));
  paramBlock = module.getBody();

  for (const auto &init : graph.initializer())
    if (failed(declareInitializer(init)))
      return nullptr;
  if (graph.sparse_initializer_size())
    return error() << "sparse initializers are not supported", nullptr;

  SmallVector<Type> argTypes;
  SmallVector<StringRef> argNames;
  for (const auto &in : graph.input()) {
    if (params.count(in.name()) || consts.count(in.name()))
      continue; // old exporters list initializers as inputs too
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
    func.setArgAttr(i, "train.name", builder.getStringAttr(name));
    values[name] = entry->getArgument(i);
  }
  builder.setInsertionPointToEnd(entry);

  for (const auto &node : graph.node()) {
    if (failed(importNode(node)))
      return nullptr;
    ++nodeIndex;
  }

  StringRef lossName = graph.output(0).name();
  Value loss = values.lookup(lossName);
  if (!loss) {
    if (getConst(lossName))
      return error() << "graph output '" << lossName
                     << "' is a constant; the graph must end in its loss",
             nullptr;
    if (params.count(lossName))
      return error() << "graph output '" << lossName
                     << "' is an initializer; the graph must end in its loss",
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
                      "its loss (e.g. SoftmaxCrossEntropyLoss with reduction "
                      "\"mean\")",
           nullptr;
  for (int i = 1; i < graph.output_size(); ++i)
    emitWarning(fileLoc)
        << "ignoring graph output '" << graph.output(i).name()
        << "': Spillway trains on the first output (the loss) only";
  func::ReturnOp::create(builder, UnknownLoc::get(&ctx), loss);
  func.setType(builder.getFunctionType(argTypes, {loss.getType()}));

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
