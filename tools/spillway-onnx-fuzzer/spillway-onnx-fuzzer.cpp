//===- spillway-onnx-fuzzer.cpp - libFuzzer target for the ONNX importer --===//
//
// Feeds arbitrary bytes to spillway::importONNXFile, as
// `spillway-translate --import-onnx` would read them from a file, and checks
// that an imported module verifies and survives a print/parse round trip.
// Any crash, sanitizer report or failed check is a bug; an import that fails
// with a diagnostic is the expected answer to bad input.
//
// The input is the model file itself, so a reproducer replays with
// `spillway-translate --import-onnx crash.onnx` (or `.onnxtext`). A leading
// byte below 0x20 other than whitespace selects the binary protobuf parser
// (a ModelProto serialized in field order starts with 0x08, ir_version's
// tag); anything else goes to the ONNX textual-syntax parser.
//
// Build with -DSPILLWAY_FUZZ=ON and clang (see test/fuzz/run-fuzzer.sh).
//
//===----------------------------------------------------------------------===//

#include "spillway/Dialect/Train/IR/TrainDialect.h"
#include "spillway/Target/ONNX/ImportONNX.h"
#include "spillway/Target/ONNX/WeightsMap.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

/// One private directory per process, so that external-data locations in
/// fuzzed models resolve next to nothing but the model and its weights.
struct ScratchFiles {
  std::string dir, binaryModel, textModel, weights;

  ScratchFiles() {
    // $TMPDIR when set (run-fuzzer.sh points it at a directory it removes:
    // a crash exits without running this destructor), else memory-backed
    // /dev/shm where there is one: every input is written once.
    llvm::SmallString<128> base;
    if (const char *tmp = std::getenv("TMPDIR"); tmp && *tmp)
      base = tmp;
    else if (llvm::sys::fs::is_directory("/dev/shm") &&
             !llvm::sys::fs::access("/dev/shm",
                                    llvm::sys::fs::AccessMode::Write))
      base = "/dev/shm";
    else
      llvm::sys::path::system_temp_directory(/*ErasedOnReboot=*/true, base);
    llvm::sys::path::append(base, "spillway-onnx-fuzz");
    llvm::SmallString<128> path;
    if (llvm::sys::fs::createUniqueDirectory(base, path)) {
      std::fprintf(stderr, "spillway-onnx-fuzzer: cannot create a temp dir\n");
      std::abort();
    }
    dir = path.str().str();
    binaryModel = dir + "/input.onnx";
    textModel = dir + "/input.onnxtext";
    weights = dir + "/input.weights.bin";
  }
  ~ScratchFiles() {
    for (const std::string &f : {binaryModel, textModel, weights})
      llvm::sys::fs::remove(f);
    llvm::sys::fs::remove(dir);
  }
};

ScratchFiles &scratch() {
  static ScratchFiles files;
  return files;
}

bool selectsBinaryParser(const uint8_t *data, size_t size) {
  if (size == 0)
    return false;
  uint8_t c = data[0];
  return c < 0x20 && c != '\t' && c != '\n' && c != '\r';
}

/// Fixed sizes for the symbolic dimensions the repository's fixtures and the
/// PyTorch exporters use, so fuzzed models get past the "unbound dimension"
/// check into the op importers. Names no model uses only cost a (swallowed)
/// warning.
void bindCommonDims(spillway::ONNXImportOptions &opts) {
  for (const char *name : {"batch", "batch_size", "seq", "seq_len",
                           "sequence_length", "N", "B", "S", "T", "s0", "s1"})
    opts.dimBindings[name] = 2;
}

/// Imports `path` once. Returns whether the import succeeded; a module that
/// imports but does not verify or round-trip aborts (a finding).
bool importOnce(llvm::StringRef path, bool forwardOnly) {
  mlir::DialectRegistry registry;
  registry.insert<spillway::train::TrainDialect, mlir::func::FuncDialect>();
  mlir::MLIRContext ctx(registry, mlir::MLIRContext::Threading::DISABLED);
  // Bad input is the common case: swallow every diagnostic rather than
  // flood the fuzzer's output.
  ctx.getDiagEngine().registerHandler([](mlir::Diagnostic &) {});

  spillway::ONNXImportOptions opts;
  bindCommonDims(opts);
  opts.forwardOnly = forwardOnly;
  // Small enough that folding stays fast; the limit's own checks still run.
  opts.maxInlineConstantElements = 1 << 16;
  opts.weightsPath = scratch().weights;
  opts.weightsAttr = "input.weights.bin";

  mlir::OwningOpRef<mlir::ModuleOp> module =
      spillway::importONNXFile(path, ctx, opts);
  if (!module)
    return false;

  if (mlir::failed(mlir::verify(*module))) {
    std::fprintf(stderr, "spillway-onnx-fuzzer: imported module does not "
                         "verify\n");
    std::abort();
  }
  // A weights map the importer writes is one spillwayc reads back.
  if (spillway::weights::hasMapMagic(scratch().weights)) {
    std::string error;
    if (!spillway::weights::readMap(scratch().weights, error)) {
      std::fprintf(stderr, "spillway-onnx-fuzzer: the weights map written "
                           "does not read back: %s\n",
                   error.c_str());
      std::abort();
    }
  }
  // What spillway-translate prints, spillway-opt and spillwayc must read.
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os);
  mlir::ParserConfig config(&ctx);
  if (!mlir::parseSourceString<mlir::ModuleOp>(text, config)) {
    std::fprintf(stderr,
                 "spillway-onnx-fuzzer: printed module does not parse:\n%s\n",
                 text.c_str());
    std::abort();
  }
  return true;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string &path = selectsBinaryParser(data, size)
                                ? scratch().binaryModel
                                : scratch().textModel;
  {
    std::error_code ec;
    llvm::raw_fd_ostream out(path, ec);
    if (ec) {
      std::fprintf(stderr, "spillway-onnx-fuzzer: cannot write %s: %s\n",
                   path.c_str(), ec.message().c_str());
      std::abort();
    }
    out.write(reinterpret_cast<const char *>(data), size);
  }
  // Training import first (scalar loss required); a graph without one still
  // reaches every op importer through the forward-only import.
  if (!importOnce(path, /*forwardOnly=*/false))
    importOnce(path, /*forwardOnly=*/true);
  return 0;
}
