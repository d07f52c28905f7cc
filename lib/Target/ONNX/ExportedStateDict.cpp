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

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cstring>

using namespace spillway;
using namespace spillway::onnx_import;

namespace {

/// safetensors' own limit on the header size.
constexpr uint64_t kMaxHeader = 100'000'000;

} // namespace

/// Reads tensor `name` (or, failing that, `alt`) of the safetensors file
/// `path`: float32 only. Absent: success with `bytes` empty.
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
  auto head = llvm::MemoryBuffer::getFileSlice(path, 8, 0);
  if (!head)
    return error() << "--exported-state-dict '" << path
                   << "': cannot read it: " << head.getError().message();
  uint64_t size = 0;
  if (std::error_code ec = llvm::sys::fs::file_size(path, size))
    return error() << "--exported-state-dict '" << path
                   << "': cannot read it: " << ec.message();
  if ((*head)->getBufferSize() != 8)
    return bad("is shorter than a safetensors header");
  uint64_t n;
  std::memcpy(&n, (*head)->getBufferStart(), 8); // little-endian, as the host
  if (n < 2 || n > kMaxHeader || 8 + n > size)
    return bad("does not start with a safetensors header (length " +
               Twine(n) + " in a file of " + Twine(size) + " bytes)");
  auto text = llvm::MemoryBuffer::getFileSlice(path, n, 8);
  if (!text)
    return error() << "--exported-state-dict '" << path
                   << "': cannot read it: " << text.getError().message();
  llvm::Expected<llvm::json::Value> parsed =
      llvm::json::parse((*text)->getBuffer());
  if (!parsed)
    return bad("has a header that is not JSON (" +
               llvm::toString(parsed.takeError()) + ")");
  const llvm::json::Object *root = parsed->getAsObject();
  if (!root)
    return bad("has a header that is not a JSON object");
  const llvm::json::Object *entry = nullptr;
  for (StringRef key : {name, alt})
    if (!key.empty() && (entry = root->getObject(key))) {
      found = key.str();
      break;
    }
  bytes.clear();
  if (!entry)
    return success();
  std::optional<StringRef> dtype = entry->getString("dtype");
  const llvm::json::Array *dims = entry->getArray("shape");
  const llvm::json::Array *offsets = entry->getArray("data_offsets");
  if (!dtype || !dims || !offsets || offsets->size() != 2)
    return bad("has an entry '" + found +
               "' without dtype, shape and two data_offsets");
  if (*dtype != "F32")
    return bad("holds '" + found + "' as " + *dtype +
               "; Spillway trains float32 parameters: save the state_dict "
               "in float32 (model.float())");
  shape.clear();
  int64_t numel = 1;
  for (const llvm::json::Value &d : *dims) {
    std::optional<int64_t> v = d.getAsInteger();
    if (!v || *v < 0 || (*v && numel > INT64_MAX / 4 / *v))
      return bad("gives '" + found + "' a bad shape");
    shape.push_back(*v);
    numel *= *v;
  }
  std::optional<int64_t> begin = (*offsets)[0].getAsInteger(),
                         end = (*offsets)[1].getAsInteger();
  const uint64_t data = size - 8 - n;
  if (!begin || !end || *begin < 0 || *end < *begin ||
      uint64_t(*end) > data || *end - *begin != numel * 4)
    return bad("gives '" + found + "' data_offsets that do not fit its " +
               shapeStr(shape) + " float32 values in the file");
  auto buf = llvm::MemoryBuffer::getFileSlice(path, numel * 4, 8 + n + *begin);
  if (!buf)
    return error() << "--exported-state-dict '" << path
                   << "': cannot read '" << found
                   << "': " << buf.getError().message();
  bytes = (*buf)->getBuffer().str();
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
  if (table.empty())
    return error() << "--exported-state-dict '" << path << "' has no tensor '"
                   << own << "': the exporter's optimizer folded rows of it "
                   << "into '" << fold.name()
                   << "', and the file must hold the whole parameter; give "
                      "the state_dict of the model that was exported";
  std::string rows;
  SmallVector<int64_t> foldShape;
  if (failed(readTensor(fold, "initializer", rows, foldShape)))
    return failure();
  // A row of the table: everything after its first dimension.
  const int64_t rowBytes =
      shape.empty() ? 0
                    : int64_t(table.size()) / std::max<int64_t>(shape[0], 1);
  const int64_t count = rowBytes ? int64_t(rows.size()) / rowBytes : 0;
  if (shape.empty() || rowBytes == 0 || rows.size() % rowBytes != 0 ||
      count == 0 || count > shape[0])
    return error() << "--exported-state-dict '" << path << "': '" << found
                   << "' " << shapeStr(shape) << " cannot hold '"
                   << fold.name() << "' " << shapeStr(foldShape)
                   << " as rows of it; give the state_dict of the model that "
                      "was exported";
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
