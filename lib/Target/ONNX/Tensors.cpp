//===- Tensors.cpp - ONNX tensors, inputs and values ----------------------===//
//
// Locating TensorProtos' data (every encoding, external data inside the
// model's directory) and reading it for the constants, declaring float
// initializers as train.param (their bytes are located, never read: the
// weights file says where they lie) and graph inputs as function arguments,
// and turning names into SSA values: parameter reads and constants, created
// once in the function's prologue.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cstring>

namespace spillway::onnx_import {

static constexpr int64_t kWeightsAlignment = 64;

//===----------------------------------------------------------------------===//
// Shapes and element types
//===----------------------------------------------------------------------===//

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

SmallVector<int64_t> broadcastStrides(ArrayRef<int64_t> in,
                                      ArrayRef<int64_t> out) {
  SmallVector<int64_t> inStrides = stridesOf(in), strides(out.size(), 0);
  size_t off = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d)
    strides[off + d] = in[d] == 1 ? 0 : inStrides[d];
  return strides;
}

int64_t wrapInt(int32_t dtype, int64_t v) {
  if (dtype == onnxpb::TensorProto::INT32)
    return (int32_t)(uint32_t)(uint64_t)v;
  if (dtype == onnxpb::TensorProto::BOOL)
    return v != 0;
  return v;
}

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

/// Where a tensor's elements are, whatever the encoding, after checking what
/// the ONNX rules fix: its element type, shape and one place for its data of
/// the size the shape needs; external data inside the model's directory and
/// long enough (its bytes are not read).
LogicalResult Importer::locateTensor(const onnxpb::TensorProto &t,
                                     StringRef what, TensorData &d) {
  int32_t dtype = t.data_type();
  if (!elementType(dtype))
    return error() << what << " '" << t.name() << "' has element type "
                   << dtypeName(dtype)
                   << "; Spillway supports FLOAT (float32), INT64, INT32 and "
                      "BOOL tensors";
  for (int64_t dim : t.dims()) {
    if (dim < 0)
      return error() << what << " '" << t.name() << "' has negative dimension "
                     << dim;
    d.shape.push_back(dim);
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
  std::optional<int64_t> count = numElementsOf(d.shape);
  if (!count || llvm::MulOverflow(*count, elementBytes(dtype), d.bytes))
    return error() << what << " '" << t.name() << "' of shape "
                   << shapeStr(d.shape) << " is too large to address";

  if (external) {
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
    if (length >= 0 && length != d.bytes)
      return error() << what << " '" << t.name() << "': external data length "
                     << length << " does not match its shape "
                     << shapeStr(d.shape) << " of " << dtypeName(dtype) << " ("
                     << d.bytes << " bytes)";
    uint64_t size;
    if (std::error_code ec = llvm::sys::fs::file_size(file, size))
      return error() << what << " '" << t.name()
                     << "': cannot read external data file '" << file
                     << "': " << ec.message();
    if ((uint64_t)offset > size || size - offset < (uint64_t)d.bytes)
      return error() << what << " '" << t.name() << "': external data file '"
                     << file << "' has " << size << " bytes; the tensor needs "
                     << d.bytes << " bytes at offset " << offset;
    d.where = TensorData::External;
    d.file = std::string(file);
    d.fileOffset = offset;
    return success();
  }
  if (fields.empty()) {
    d.where = TensorData::Absent;
    return success();
  }
  int64_t got = t.has_raw_data() ? (int64_t)t.raw_data().size()
                : dtype == onnxpb::TensorProto::FLOAT
                    ? (int64_t)t.float_data_size() * 4
                : dtype == onnxpb::TensorProto::INT64
                    ? (int64_t)t.int64_data_size() * 8
                    : (int64_t)t.int32_data_size() * elementBytes(dtype);
  if (got != d.bytes)
    return dataSizeMismatch(t, what, d, got);
  d.where = TensorData::Inline;
  return success();
}

InFlightDiagnostic Importer::dataSizeMismatch(const onnxpb::TensorProto &t,
                                              StringRef what,
                                              const TensorData &d,
                                              int64_t got) {
  return error() << what << " '" << t.name() << "' holds " << got
                 << " bytes of data but its shape " << shapeStr(d.shape)
                 << " of " << dtypeName(t.data_type()) << " needs " << d.bytes;
}

/// An inline tensor's bytes: its raw_data itself, or its typed field
/// converted into `owned`. The host is little-endian (x86-64, aarch64), as
/// the file.
StringRef Importer::inlineBytes(const onnxpb::TensorProto &t,
                                std::string &owned) {
  if (t.has_raw_data())
    return t.raw_data();
  auto copy = [&](const auto &field, auto tag) {
    using T = decltype(tag);
    owned.resize(field.size() * sizeof(T));
    for (int i = 0; i < field.size(); ++i) {
      T v = static_cast<T>(field.Get(i));
      std::memcpy(&owned[i * sizeof(T)], &v, sizeof(T));
    }
  };
  switch (t.data_type()) {
  case onnxpb::TensorProto::FLOAT:
    copy(t.float_data(), float());
    break;
  case onnxpb::TensorProto::INT64:
    copy(t.int64_data(), int64_t());
    break;
  case onnxpb::TensorProto::BOOL:
    copy(t.int32_data(), uint8_t());
    break;
  default:
    copy(t.int32_data(), int32_t());
  }
  return owned;
}

/// Reads a tensor's elements, whatever the encoding, as raw little-endian
/// bytes of its element type: for the compile-time constants, whose values
/// the importer folds (external data included: only the tensor's bytes).
LogicalResult Importer::readTensor(const onnxpb::TensorProto &t,
                                   StringRef what, std::string &bytes,
                                   SmallVectorImpl<int64_t> &shape) {
  TensorData d;
  if (failed(locateTensor(t, what, d)))
    return failure();
  shape.assign(d.shape.begin(), d.shape.end());
  switch (d.where) {
  case TensorData::Inline: {
    std::string owned;
    StringRef b = inlineBytes(t, owned);
    bytes = owned.empty() ? b.str() : std::move(owned);
    return success();
  }
  case TensorData::External: {
    auto buf = llvm::MemoryBuffer::getFileSlice(d.file, d.bytes, d.fileOffset,
                                                /*IsVolatile=*/false);
    if (!buf)
      return error() << what << " '" << t.name()
                     << "': cannot read external data file '" << d.file
                     << "': " << buf.getError().message();
    bytes = (*buf)->getBuffer().str();
    return success();
  }
  case TensorData::Absent:
    if (d.bytes != 0)
      return dataSizeMismatch(t, what, d, 0);
    bytes.clear();
    return success();
  }
  llvm_unreachable("TensorData::where");
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
  // A parameter's bytes are not read: the weights file says where they are
  // (an external file, the model's own raw_data), written at the end.
  TensorData d;
  if (failed(locateTensor(t, "initializer", d)))
    return failure();
  // Stored as the transpose of the parameter (Parameters.cpp): its bytes
  // are read, transposed, and written inline.
  StringRef transposed;
  if (transposedStorage.contains(t.name()) && d.shape.size() == 2) {
    std::string bytes;
    SmallVector<int64_t> shape;
    if (failed(readTensor(t, "initializer", bytes, shape)))
      return failure();
    int64_t r = shape[0], c = shape[1];
    std::string out(bytes.size(), '\0');
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j)
        std::memcpy(&out[4 * (j * r + i)], &bytes[4 * (i * c + j)], 4);
    convertedWeights.push_back(std::move(out));
    transposed = convertedWeights.back();
    d.shape = {c, r};
    d.where = TensorData::Inline;
  }
  int64_t offset = llvm::alignTo(weightsSize, kWeightsAlignment);
  if (offset < weightsSize || llvm::AddOverflow(offset, d.bytes, weightsSize))
    return error() << "initializer '" << t.name()
                   << "': the model's parameters exceed 2^63 bytes";
  if (d.bytes > 0) {
    switch (d.where) {
    case TensorData::Inline: {
      if (!transposed.empty()) {
        weightSegments.push_back({offset, d.bytes, -1, 0, transposed});
        break;
      }
      convertedWeights.emplace_back();
      StringRef bytes = inlineBytes(t, convertedWeights.back());
      if (convertedWeights.back().empty())
        convertedWeights.pop_back();
      weightSegments.push_back({offset, d.bytes, -1, 0, bytes});
      break;
    }
    case TensorData::External: {
      auto source = weightSource(t, d.file);
      if (failed(source))
        return failure();
      weightSegments.push_back({offset, d.bytes, *source, d.fileOffset, {}});
      break;
    }
    case TensorData::Absent:
      // Planning reads shapes only; a weights file would need the values.
      if (!opts.weightsPath.empty())
        return error()
               << "initializer '" << t.name() << "' (" << shapeStr(d.shape)
               << " of FLOAT) is declared without data: it has no raw_data, "
                  "float_data or external data. A shapes-only model (e.g. "
                  "from bench/make_gpt_onnx.py --shapes-only) can be planned "
                  "and reported (spillwayc --report without -o) but not "
                  "compiled: give it weights (its values inline or as ONNX "
                  "external data)";
      break;
    }
  }
  SmallVector<int64_t> shape = d.shape;
  auto type = RankedTensorType::get(shape, builder.getF32Type());
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPoint(paramBlock, paramBlock->end());
  params[t.name()] = train::ParamOp::create(
      builder, NameLoc::get(builder.getStringAttr(t.name())), t.name(), type,
      offset);
  return success();
}

/// The index of the weights source `file` (an external data file),
/// described (size, mtime, sample) the first time it is named.
FailureOr<int64_t> Importer::weightSource(const onnxpb::TensorProto &t,
                                          StringRef file) {
  SmallString<256> real;
  if (std::error_code ec = llvm::sys::fs::real_path(file, real))
    return error() << "initializer '" << t.name()
                   << "': cannot read external data file '" << file
                   << "': " << ec.message(),
           failure();
  // The weights map names it in JSON text, which holds only UTF-8.
  if (!opts.copyWeights && !llvm::json::isUTF8(real))
    return error() << "initializer '" << t.name() << "': the path of its "
                   << "external data file '" << file
                   << "' is not valid UTF-8, and the weights map names the "
                      "file in UTF-8 text: rename the model's directory or "
                      "file, or pass spillwayc --copy-weights",
           failure();
  auto [it, inserted] =
      weightSourceIndex.try_emplace(real, (int64_t)weightSources.size());
  if (!inserted)
    return it->second;
  weights::Source source;
  std::string message;
  if (!weights::describeSource(real, source, message))
    return error() << "initializer '" << t.name() << "': " << message,
           failure();
  weightSources.push_back(std::move(source));
  return it->second;
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

void setInsertionPointToPrologue(OpBuilder &builder, Block *entry) {
  builder.setInsertionPointToStart(entry);
  for (Operation &op : *entry)
    if (isa<train::ParamValueOp, train::ConstantOp>(op))
      builder.setInsertionPointAfter(&op);
}

Value Importer::prologueConstant(Location loc, DenseElementsAttr attr) {
  OpBuilder::InsertionGuard guard(builder);
  setInsertionPointToPrologue(builder, builder.getInsertionBlock());
  return train::ConstantOp::create(builder, loc, attr);
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
  return values[name] =
             prologueConstant(NameLoc::get(builder.getStringAttr(name)), attr);
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

FailureOr<SmallVector<Value>>
Importer::elementwiseOperands(const onnxpb::NodeProto &node, int n) {
  // A constant whose rows along dim 0 are all equal, combined with a value
  // that has that many rows, is the same as its first row broadcast: the
  // dynamo exporter materializes the causal mask once per batch element
  // ([B, 1, S, S]). One row is smaller, and a constant shaped by the batch
  // would keep sched-microbatch from splitting it.
  // The value must have the constant's rank, so that the two dims 0 meet
  // in the broadcast.
  SmallVector<std::pair<int64_t, int64_t>> runtimeDims; // (rank, dim 0)
  for (int i = 0; i < n; ++i)
    if (hasInput(node, i) && !getConst(node.input(i))) {
      auto t = inputType(node, i);
      if (failed(t))
        return failure();
      if (t->getRank() > 0)
        runtimeDims.emplace_back(t->getRank(), t->getDimSize(0));
    }
  SmallVector<Value> vs;
  for (int i = 0; i < n; ++i) {
    const ConstTensor *c = hasInput(node, i) ? getConst(node.input(i)) : nullptr;
    if (c && c->shape.size() > 1 && c->shape[0] > 1 && !c->isSplat() &&
        llvm::is_contained(runtimeDims,
                           std::pair<int64_t, int64_t>(c->shape.size(),
                                                       c->shape[0]))) {
      int64_t rows = c->shape[0], row = c->numElements() / rows;
      bool same = true;
      for (int64_t k = row; same && k < c->numElements(); ++k)
        same = c->isFloat() ? c->floats[k] == c->floats[k % row]
                            : c->ints[k] == c->ints[k % row];
      if (same) {
        SmallVector<int64_t> oneRow(c->shape);
        oneRow[0] = 1;
        // Under a name of its own: other readers get the whole constant.
        std::string rowName = node.input(i) + "/first-row";
        if (Value known = values.lookup(rowName)) {
          vs.push_back(known);
          continue;
        }
        ConstTensor first = c->take(
            oneRow, llvm::to_vector(llvm::seq<int64_t>(0, row)));
        auto v = materialize(first, rowName, [&] { return nodeError(node); });
        if (failed(v))
          return failure();
        vs.push_back(*v);
        continue;
      }
    }
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
}

LogicalResult Importer::reshapeTo(const onnxpb::NodeProto &node, Location loc,
                                  Value x, ArrayRef<int64_t> shape) {
  auto t = cast<RankedTensorType>(x.getType());
  if (t.getShape() == shape) {
    values[node.output(0)] = x;
    return success();
  }
  return define(node,
                train::ReshapeOp::create(builder, loc, t.clone(shape), x)
                    .getResult());
}

Value Importer::sliceValue(Location loc, Value x, const SliceSpec &spec) {
  auto t = cast<RankedTensorType>(x.getType());
  if (t.getShape() == ArrayRef<int64_t>(spec.shape) &&
      llvm::all_of(spec.steps, [](int64_t s) { return s == 1; }))
    return x;
  return train::SliceOp::create(builder, loc, t.clone(spec.shape), x,
                                builder.getDenseI64ArrayAttr(spec.starts),
                                builder.getDenseI64ArrayAttr(spec.steps));
}

} // namespace spillway::onnx_import
