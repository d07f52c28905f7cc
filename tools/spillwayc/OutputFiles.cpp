//===- OutputFiles.cpp - the files a spillwayc compile writes -------------===//

#include "OutputFiles.h"

#include "spillway/Dialect/Train/IR/TrainOps.h"
#include "spillway/Target/ONNX/WeightsMap.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace spillwayc;

namespace {
/// "a character device" (for messages).
const char *fileKind(llvm::sys::fs::file_type t) {
  using llvm::sys::fs::file_type;
  switch (t) {
  case file_type::directory_file:
    return "a directory";
  case file_type::character_file:
    return "a character device";
  case file_type::block_file:
    return "a block device";
  case file_type::fifo_file:
    return "a FIFO";
  case file_type::socket_file:
    return "a socket";
  default:
    return "not a regular file";
  }
}

} // namespace

/// A file spillwayc writes: `what` ("-o 'x'") names it in messages. It
/// must be absent or a regular file (a rename onto a device node or a FIFO
/// would replace it, a write would block on a FIFO; the executable's --save
/// refuses them too), in an existing, writable directory. Checked before
/// anything compiles or measures; false with the message in `error`.
bool spillwayc::checkOutputFile(const std::string &what, StringRef path,
                     std::string &error) {
  namespace fs = llvm::sys::fs;
  llvm::SmallString<256> dir(llvm::sys::path::parent_path(path));
  if (dir.empty())
    dir = ".";
  fs::file_status st;
  if (std::error_code ec = fs::status(dir, st)) {
    error = what + ": " +
            (ec == std::errc::no_such_file_or_directory
                 ? "the directory '" + std::string(dir) + "' does not exist"
             : ec == std::errc::not_a_directory
                 ? "a part of the directory '" + std::string(dir) +
                       "' is not a directory"
                 : "cannot read the directory '" + std::string(dir) +
                       "': " + ec.message());
    return false;
  }
  if (st.type() != fs::file_type::directory_file) {
    error = what + ": '" + std::string(dir) + "' is " + fileKind(st.type()) +
            ", not a directory";
    if (st.type() == fs::file_type::regular_file)
      error = what + ": '" + std::string(dir) +
              "' is a regular file, not a directory";
    return false;
  }
  if (fs::access(dir, fs::AccessMode::Write)) {
    error = what + ": the directory '" + std::string(dir) +
            "' is not writable";
    return false;
  }
  if (std::error_code ec = fs::status(path, st)) {
    if (ec == std::errc::no_such_file_or_directory)
      return true;
    error = what + ": " + ec.message();
    return false;
  }
  if (st.type() == fs::file_type::regular_file)
    return true;
  error = what + " is " + fileKind(st.type()) +
          "; spillwayc writes a regular file there and will not replace "
          "it: pass the path of a regular file";
  return false;
}

/// Copies the weights file a .mlir input names (relative to the .mlir file)
/// to `dest`. A weights map is copied as it is (its sources are absolute
/// paths), after checking they are unchanged; with `materialize`, `dest`
/// gets the bytes it describes instead (streamed).
LogicalResult spillwayc::copyWeightsOfMLIR(ModuleOp module, StringRef mlirPath,
                                           StringRef dest, bool materialize,
                                           std::string &error) {
  auto attr = module->getAttrOfType<StringAttr>(
      spillway::train::kWeightsAttrName);
  bool hasParams = !module.getOps<spillway::train::ParamOp>().empty();
  if (!attr) {
    if (!hasParams) {
      // No parameters: an empty weights file keeps the executable's contract.
      std::error_code ec;
      llvm::raw_fd_ostream out(dest, ec);
      if (ec)
        error = "cannot write '" + dest.str() + "': " + ec.message();
      return success(!ec);
    }
    error = "'" + mlirPath.str() + "' declares parameters but no weights file: "
            "add the module attribute train.weights = \"FILE\" (a path "
            "relative to the .mlir file)";
    return failure();
  }
  llvm::SmallString<256> src(llvm::sys::path::parent_path(mlirPath));
  llvm::sys::path::append(src, attr.getValue());
  if (llvm::sys::path::is_absolute(attr.getValue()))
    src = attr.getValue();
  if (!llvm::sys::fs::exists(src)) {
    error = "weights file '" + std::string(src) + "' named by '" +
            mlirPath.str() + "' (train.weights) does not exist";
    return failure();
  }
  // Copying a file onto itself would truncate it: the weights are already
  // where the executable looks for them.
  auto copyAsIs = [&]() -> LogicalResult {
    if (llvm::sys::fs::equivalent(src, dest))
      return success();
    if (std::error_code ec = llvm::sys::fs::copy_file(src, dest)) {
      error = "cannot copy weights '" + std::string(src) + "' to '" +
              dest.str() + "': " + ec.message();
      return failure();
    }
    return success();
  };
  // The file must be the one the parameters describe: the executable reads
  // exactly their bytes (or, from a .safetensors file, by name), and a file
  // of another size was written for another model.
  llvm::sys::fs::file_status status;
  if (std::error_code ec = llvm::sys::fs::status(src, status)) {
    error = "cannot read weights file '" + std::string(src) + "': " +
            ec.message();
    return failure();
  }
  if (status.type() != llvm::sys::fs::file_type::regular_file) {
    error = "weights file '" + std::string(src) + "' named by '" +
            mlirPath.str() + "' (train.weights) is not a regular file";
    return failure();
  }
  int64_t expected = 0;
  for (auto p : module.getOps<spillway::train::ParamOp>())
    expected = std::max<int64_t>(expected, p.getOffsetAttr().getInt() +
                                               p.getNumBytes());
  // A weights map (WeightsMap.h): checked, then copied as it is or
  // materialized. A raw file that only starts with the magic is raw.
  std::optional<spillway::weights::Map> map;
  if (spillway::weights::hasMapMagic(src)) {
    map = spillway::weights::readMap(src, error);
    if (!map && int64_t(status.getSize()) != expected) {
      error += " (named by '" + mlirPath.str() + "', train.weights)";
      return failure();
    }
  }
  if (map) {
    if (int64_t(map->size) != expected) {
      error = llvm::formatv("weights map '{0}' named by '{1}' "
                            "(train.weights) describes {2} bytes, but its "
                            "parameters' offsets and types need {3}; was it "
                            "written for another model?",
                            src, mlirPath, map->size, expected)
                  .str();
      return failure();
    }
    for (const spillway::weights::Source &s : map->sources)
      if (std::string change = spillway::weights::sourceChange(s);
          !change.empty()) {
        error = "weights map '" + std::string(src) + "' named by '" +
                mlirPath.str() + "': " + change +
                "; recompile the model with spillwayc";
        return failure();
      }
    if (materialize)
      return success(spillway::weights::writeRaw(dest, map->size,
                                                 map->sources, map->segments,
                                                 error, src));
    return copyAsIs();
  }
  error.clear();
  if (int64_t(status.getSize()) != expected) {
    // A .safetensors file: an 8-byte header length, then a JSON header.
    bool safetensors = false;
    if (auto buf = llvm::MemoryBuffer::getFileSlice(src, 9, 0)) {
      StringRef head = (*buf)->getBuffer();
      safetensors = head.size() == 9 && head[8] == '{';
    }
    if (!safetensors) {
      error = llvm::formatv("weights file '{0}' named by '{1}' "
                            "(train.weights) is {2} bytes, but its "
                            "parameters' offsets and types need {3}; was it "
                            "written for another model?",
                            src, mlirPath, status.getSize(), expected)
                  .str();
      return failure();
    }
  }
  return copyAsIs();
}

