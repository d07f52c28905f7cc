//===- ExportedStateDict.cpp - folded parameters restored whole -----------===//
//
// torch.onnx's dynamo exporter folds a parameter read at constant indices
// into a constant of just what was read: GPT-2's position table becomes
// `embedding_1` = wpe[arange(S)] for the exported sequence length S, and the
// rest of the table is not in the file. Training the fold trains those rows
// as torch does (Parameters.cpp), but --save cannot give the table back
// whole. With the model's own state_dict as it was exported
// (`spillwayc --exported-state-dict FILE`, safetensors: save_pretrained's
// model.safetensors, or save_file(model.state_dict())), the table comes
// back: found by name, the rows the fold holds found in it by value, it
// becomes the parameter again and the fold a Slice of it, so it trains,
// saves and loads as torch's own parameter.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cstring>

using namespace spillway;
using namespace spillway::onnx_import;

namespace {

/// safetensors' own limit on the header size.
constexpr uint64_t kMaxHeader = 100'000'000;
/// A safetensors header nests three deep (header, entry, shape); past this
/// the JSON parser's recursion is not spent on it.
constexpr int kMaxDepth = 16;

/// Scans the header's JSON text without parsing it: the deepest nesting,
/// and the first key the top-level object holds twice (raw text, as
/// written), so that neither a deep header overflows the parser's stack nor
/// a duplicate silently wins.
void scanHeader(StringRef text, int &depth, std::string &duplicate) {
  depth = 0;
  int at = 0;
  llvm::StringSet<> keys;
  bool expectKey = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '"') {
      size_t j = i + 1;
      while (j < text.size() && text[j] != '"')
        j += text[j] == '\\' ? 2 : 1;
      if (at == 1 && expectKey && duplicate.empty() &&
          !keys.insert(text.slice(i + 1, j)).second)
        duplicate = text.slice(i + 1, j).str();
      expectKey = false;
      i = j;
    } else if (c == '{' || c == '[') {
      depth = std::max(depth, ++at);
      if (depth > kMaxDepth)
        return;
      expectKey = c == '{' && at == 1;
    } else if (c == '}' || c == ']') {
      --at;
    } else if (c == ',') {
      expectKey = at == 1;
    }
  }
}

} // namespace

/// Reads tensor `name` (or `alt`, the same tensor under its prefixed name)
/// of the safetensors file `path`: float32 only. Absent: success with
/// `found` empty.
LogicalResult Importer::readStateDictTensor(StringRef path, StringRef name,
                                            StringRef alt, std::string &found,
                                            SmallVectorImpl<int64_t> &shape,
                                            std::string &bytes) {
  auto bad = [&](const Twine &why) {
    return error() << "--exported-state-dict '" << path << "' " << why
                   << "; give the model's state_dict as a .safetensors file "
                      "(model.save_pretrained(DIR) writes DIR/"
                      "model.safetensors)";
  };
  // A FIFO or a device would block or never end: regular files only.
  llvm::sys::fs::file_status st;
  if (std::error_code ec = llvm::sys::fs::status(path, st))
    return error() << "--exported-state-dict '" << path
                   << "': cannot read it: " << ec.message();
  if (!llvm::sys::fs::is_regular_file(st))
    return bad("is not a regular file");
  const uint64_t size = st.getSize();
  if (size < 8)
    return bad("is shorter than a safetensors header (" + Twine(size) +
               " bytes)");
  auto head = llvm::MemoryBuffer::getFileSlice(path, 8, 0);
  if (!head)
    return error() << "--exported-state-dict '" << path
                   << "': cannot read it: " << head.getError().message();
  uint64_t n;
  std::memcpy(&n, (*head)->getBufferStart(), 8); // little-endian, as the host
  if (n < 2 || n > kMaxHeader || n > size - 8)
    return bad("does not start with a safetensors header (length " +
               Twine(n) + " in a file of " + Twine(size) + " bytes)");
  auto text = llvm::MemoryBuffer::getFileSlice(path, n, 8);
  if (!text)
    return error() << "--exported-state-dict '" << path
                   << "': cannot read it: " << text.getError().message();
  int depth;
  std::string duplicate;
  scanHeader((*text)->getBuffer(), depth, duplicate);
  if (depth > kMaxDepth)
    return bad("has a header nested more than " + Twine(kMaxDepth) +
               " deep, which no safetensors file has");
  if (!duplicate.empty())
    return bad("names tensor '" + duplicate + "' twice");
  llvm::Expected<llvm::json::Value> parsed =
      llvm::json::parse((*text)->getBuffer());
  if (!parsed)
    return bad("has a header that is not JSON (" +
               llvm::toString(parsed.takeError()) + ")");
  const llvm::json::Object *root = parsed->getAsObject();
  if (!root)
    return bad("has a header that is not a JSON object");
  const uint64_t data = size - 8 - n;

  // One entry's shape and bytes; `present` false when the file lacks it.
  auto read = [&](StringRef key, bool &present, SmallVectorImpl<int64_t> &dims,
                  std::string &out) -> LogicalResult {
    present = false;
    const llvm::json::Value *value = key.empty() ? nullptr : root->get(key);
    if (!value)
      return success();
    present = true;
    const llvm::json::Object *entry = value->getAsObject();
    if (!entry)
      return bad("has an entry '" + key + "' that is not a JSON object");
    std::optional<StringRef> dtype = entry->getString("dtype");
    const llvm::json::Array *shapeArr = entry->getArray("shape");
    const llvm::json::Array *offsets = entry->getArray("data_offsets");
    if (!dtype || !shapeArr || !offsets || offsets->size() != 2)
      return bad("has an entry '" + key +
                 "' without dtype, shape and two data_offsets");
    if (*dtype != "F32")
      return bad("holds '" + key + "' as " + *dtype +
                 "; Spillway trains float32 parameters: save the state_dict "
                 "in float32 (model.float())");
    dims.clear();
    int64_t numel = 1;
    for (const llvm::json::Value &d : *shapeArr) {
      std::optional<int64_t> v = d.getAsInteger();
      if (!v || *v < 0 || (*v && numel > INT64_MAX / 4 / *v))
        return bad("gives '" + key + "' a bad shape");
      dims.push_back(*v);
      numel *= *v;
    }
    std::optional<int64_t> begin = (*offsets)[0].getAsInteger(),
                           end = (*offsets)[1].getAsInteger();
    if (!begin || !end || *begin < 0 || *end < *begin ||
        uint64_t(*end) > data || *end - *begin != numel * 4)
      return bad("gives '" + key + "' data_offsets that do not fit its " +
                 shapeStr(dims) + " float32 values in the file");
    auto buf =
        llvm::MemoryBuffer::getFileSlice(path, numel * 4, 8 + n + *begin);
    if (!buf)
      return error() << "--exported-state-dict '" << path << "': cannot read '"
                     << key << "': " << buf.getError().message();
    out = (*buf)->getBuffer().str();
    return success();
  };

  bool hasName, hasAlt;
  SmallVector<int64_t> altShape;
  std::string altBytes;
  if (failed(read(name, hasName, shape, bytes)) ||
      failed(read(alt == name ? StringRef() : alt, hasAlt, altShape,
                  altBytes)))
    return failure();
  if (hasName && hasAlt && (shape != altShape || bytes != altBytes))
    return bad("holds both '" + name + "' and '" + alt +
               "', with different values: keep only the exported model's");
  found.clear();
  if (hasName) {
    found = name.str();
  } else if (hasAlt) {
    found = alt.str();
    shape.assign(altShape.begin(), altShape.end());
    bytes = std::move(altBytes);
  }
  return success();
}

/// Restores parameter `target` (the fold's source, as the graph signature
/// names it) from --exported-state-dict: appends it to the graph's
/// initializers (the file's table) and to `prologue` the nodes computing the
/// fold `fold` from it, rows [k, k + S) of the table reshaped to the fold's
/// shape, k found by comparing the values.
LogicalResult Importer::unfold(onnxpb::GraphProto &graph,
                               const onnxpb::TensorProto &fold,
                               StringRef target,
                               SmallVectorImpl<onnxpb::NodeProto> &prologue,
                               std::string &origin) {
  StringRef path = *opts.exportedStateDict;
  StringRef own = target;
  if (!stateDictPrefix.empty())
    own.consume_front(stateDictPrefix);
  std::string found, table;
  SmallVector<int64_t> shape;
  if (failed(readStateDictTensor(path, own, target, found, shape, table)))
    return failure();
  if (found.empty())
    return error() << "--exported-state-dict '" << path << "' has no tensor '"
                   << own << "': the exporter's optimizer folded rows of it "
                   << "into '" << fold.name()
                   << "', and the file must hold the whole parameter; give "
                      "the state_dict of the model that was exported";
  std::string rows;
  SmallVector<int64_t> foldShape;
  if (failed(readTensor(fold, "initializer", rows, foldShape)))
    return failure();
  // The fold is table[idx] for row indices idx: its shape is idx's followed
  // by a row's (the table's shape after its first dimension).
  ArrayRef<int64_t> row = ArrayRef(shape).drop_front();
  const bool rowsFit =
      shape.size() >= 2 && foldShape.size() >= shape.size() &&
      ArrayRef(foldShape).take_back(row.size()) == row &&
      llvm::all_of(shape, [](int64_t d) { return d > 0; });
  int64_t count = 0, rowBytes = 0;
  if (rowsFit) {
    count = 1;
    for (int64_t d : ArrayRef(foldShape).drop_back(row.size()))
      count *= d;
    rowBytes = int64_t(table.size()) / shape[0];
  }
  if (!rowsFit || count == 0 || count > shape[0] ||
      int64_t(rows.size()) != count * rowBytes)
    return error() << "--exported-state-dict '" << path << "': '" << found
                   << "' " << shapeStr(shape) << " cannot hold '"
                   << fold.name() << "' " << shapeStr(foldShape)
                   << " as rows of it (a table of rank 2 or more whose rows "
                      "are the fold's last dimensions); give the state_dict "
                      "of the model that was exported";
  SmallVector<int64_t> at;
  for (int64_t k = 0; k + count <= shape[0]; ++k)
    if (std::memcmp(table.data() + k * rowBytes, rows.data(), rows.size()) ==
        0)
      at.push_back(k);
  if (at.size() != 1)
    return error() << "--exported-state-dict '" << path << "': "
                   << (at.empty() ? "no" : "more than one") << " range of "
                   << count << " rows of '" << found << "' "
                   << shapeStr(shape) << " equals the folded '" << fold.name()
                   << "' "
                   << (at.empty() ? "(the file holds other values than the "
                                    "export: give the state_dict of the model "
                                    "as it was exported, before training; or "
                                    "the fold is not a range of rows: export "
                                    "with `python -m spillway.export`, which "
                                    "keeps the parameter whole)"
                                  : "(which rows it holds is ambiguous: "
                                    "export with `python -m "
                                    "spillway.export`, which keeps the "
                                    "parameter whole)");
  const int64_t k = at.front();

  onnxpb::TensorProto whole;
  whole.set_name(target.str());
  whole.set_data_type(onnxpb::TensorProto::FLOAT);
  for (int64_t d : shape)
    whole.add_dims(d);
  whole.set_raw_data(std::move(table));
  *graph.add_initializer() = std::move(whole);

  // fold = Reshape(Slice(target, [k], [k + count], [0]), foldShape).
  auto ints = [&](StringRef suffix, ArrayRef<int64_t> values) {
    onnxpb::TensorProto t;
    t.set_name("spillway_unfold_" + fold.name() + "_" + suffix.str());
    t.set_data_type(onnxpb::TensorProto::INT64);
    t.add_dims(int64_t(values.size()));
    t.set_raw_data(std::string(reinterpret_cast<const char *>(values.data()),
                               values.size() * sizeof(int64_t)));
    *graph.add_initializer() = t;
    return t.name();
  };
  onnxpb::NodeProto slice;
  slice.set_op_type("Slice");
  slice.set_name("spillway_unfold_" + fold.name());
  slice.add_input(target.str());
  slice.add_input(ints("starts", {k}));
  slice.add_input(ints("ends", {k + count}));
  slice.add_input(ints("axes", {0}));
  slice.add_output(slice.name() + "_rows");
  onnxpb::NodeProto reshape;
  reshape.set_op_type("Reshape");
  reshape.set_name(slice.name() + "_reshape");
  reshape.add_input(slice.output(0));
  reshape.add_input(ints("shape", foldShape));
  reshape.add_output(fold.name());
  prologue.push_back(std::move(slice));
  prologue.push_back(std::move(reshape));
  origin = ("restored whole from --exported-state-dict ('" + found +
            "'): the exporter's optimizer had folded its rows [" +
            Twine(k) + ", " + Twine(k + count) + ") into '" + fold.name() +
            "', which is computed from it again")
               .str();
  return success();
}
