//===- spillway-translate.cpp - ONNX model -> train-dialect MLIR ----------===//
//
// Imports an ONNX training graph (its first output is the scalar loss) into
// the train dialect, writing the parameters' initial values to a weights file
// next to the MLIR.
//
//===----------------------------------------------------------------------===//

#include "spillway/Dialect/Train/IR/TrainDialect.h"
#include "spillway/Support/OutputFile.h"
#include "spillway/Support/ToolMain.h"
#include "spillway/Target/ONNX/ImportONNX.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

using namespace llvm;

static cl::OptionCategory category("spillway-translate options");

static cl::opt<bool> importONNX(
    "import-onnx",
    cl::desc("Import an ONNX model (binary .onnx, or ONNX textual syntax "
             ".onnxtext) into the train dialect. The model's first graph "
             "output must be its scalar float32 loss; other outputs are "
             "ignored with a warning. Default-domain opsets 7-28 (each op "
             "from the opset that defines its current form)"),
    cl::cat(category));

static cl::opt<bool> listSupportedOps(
    "list-supported-ops",
    cl::desc("Print the ONNX ops the importer maps, one per line (\"constant-only\" "
             "marks ops it evaluates at import time on constant inputs) and exit"),
    cl::cat(category));
static cl::opt<bool> forwardOnly(
    "forward",
    cl::desc("With --import-onnx: import for inference/conformance. @main "
             "returns every graph output (result attribute train.name) and "
             "is marked train.forward_only; no scalar loss is required"),
    cl::cat(category));

static cl::opt<int64_t> maxInlineConstantElements(
    "max-inline-constant-elements",
    cl::desc("The largest constant (in elements) the importer folds or "
             "inlines as train.constant, e.g. a causal mask (S*S) or a "
             "rotary table (S*D). Splat constants are exempt"),
    cl::value_desc("N"), cl::init(int64_t(1) << 20), cl::cat(category));

static cl::list<std::string> constantInitializers(
    "constant-initializers",
    cl::desc("Float initializers that are not trained (buffers such as a "
             "rotary inv_freq): they become compile-time constants, and "
             "arithmetic on them folds, instead of train.param. Repeatable; "
             "an unknown name is an error"),
    cl::value_desc("NAME,..."), cl::CommaSeparated, cl::cat(category));

static cl::opt<std::string> inputFilename(cl::Positional,
                                          cl::desc("<model.onnx|.onnxtext>"),
                                          cl::cat(category));

static cl::opt<std::string>
    outputFilename("o", cl::desc("Output MLIR file (default: stdout)"),
                   cl::value_desc("file"), cl::init("-"), cl::cat(category));

static cl::list<std::string> bindings(
    "bind",
    cl::desc("Sizes for symbolic input dimensions (ONNX dim_param): "
             "NAME=INT[,NAME=INT...]; repeatable. Every symbolic dimension of "
             "a graph input must be bound; a name that matches no dimension "
             "gets a warning"),
    cl::value_desc("NAME=INT,..."), cl::cat(category));

static cl::opt<std::string> weightsOut(
    "weights-out",
    cl::desc("Where to write the weights file (float initializers, raw "
             "little-endian, 64-byte-aligned; a weights map naming the "
             "files instead when the model's parameters are ONNX external "
             "data, which is not read). Default: next to the output, "
             "-o dir/model.mlir -> dir/model.weights.bin; with stdout, "
             "<model basename>.weights.bin in the current directory. The "
             "module attribute train.weights names it relative to the MLIR "
             "file's directory"),
    cl::value_desc("path"), cl::cat(category));

/// `target` relative to `baseDir` when it lies there, else absolute.
static std::string relativeTo(StringRef target, StringRef baseDir) {
  SmallString<256> abs(target), base(baseDir.empty() ? "." : baseDir);
  sys::fs::make_absolute(abs);
  sys::fs::make_absolute(base);
  sys::path::remove_dots(abs, /*remove_dot_dot=*/true);
  sys::path::remove_dots(base, /*remove_dot_dot=*/true);
  if (sys::path::parent_path(abs) == base)
    return sys::path::filename(abs).str();
  return abs.str().str();
}

static int translateMain(int argc, char **argv) {
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv,
      "Spillway translator: ONNX training graph -> train-dialect MLIR\n\n"
      "  spillway-translate --import-onnx model.onnx -o out/model.mlir "
      "[--bind batch=64]\n\n"
      "writes out/model.mlir and out/model.weights.bin (the weights, or a "
      "weights map naming the\nmodel's external data files). A shapes-only "
      "model (initializers declared without data)\nhas no weights to write "
      "and is refused.\n");

  auto fail = [](const Twine &msg) {
    WithColor::error(errs(), "spillway-translate") << msg << "\n";
    return 1;
  };
  if (listSupportedOps) {
    spillway::printSupportedONNXOps(llvm::outs());
    return 0;
  }
  if (!importONNX)
    return fail("choose a translation: --import-onnx");
  if (inputFilename.empty())
    return fail("no input model given");

  spillway::ONNXImportOptions opts;
  for (const std::string &spec : bindings) {
    std::string error;
    if (failed(spillway::parseDimBindings(spec, opts.dimBindings, error)))
      return fail("--bind: " + error);
  }
  if (maxInlineConstantElements < 1)
    return fail("--max-inline-constant-elements must be positive");
  opts.forwardOnly = forwardOnly;
  opts.maxInlineConstantElements = maxInlineConstantElements;
  opts.constantInitializers.assign(constantInitializers.begin(),
                                   constantInitializers.end());
  spillway::setDefaultWeightsPaths(outputFilename, inputFilename, opts);
  if (!weightsOut.empty()) {
    opts.weightsPath = weightsOut;
    bool toStdout = outputFilename == "-";
    opts.weightsAttr =
        toStdout ? weightsOut.getValue()
                 : relativeTo(weightsOut,
                              sys::path::parent_path(outputFilename));
  }

  mlir::DialectRegistry registry;
  registry.insert<spillway::train::TrainDialect, mlir::func::FuncDialect>();
  mlir::MLIRContext context(registry);
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler diagHandler(sourceMgr, &context);

  mlir::OwningOpRef<mlir::ModuleOp> module =
      spillway::importONNXFile(inputFilename, context, opts);
  if (!module)
    return 1;

  std::string errorMessage;
  if (!spillway::writeOutputFile(
          outputFilename,
          [&](raw_ostream &os) {
            module->print(os);
            os << "\n";
          },
          errorMessage)) {
    // The weights belong to the MLIR that could not be written.
    if (!opts.weightsPath.empty())
      sys::fs::remove(opts.weightsPath);
    return fail(errorMessage);
  }
  return 0;
}

int main(int argc, char **argv) {
  InitLLVM initLLVM(argc, argv);
  // Parsing recurses once per nesting level: room for kMaxNesting levels.
  return spillway::runWithLargeStack(
      [&] { return translateMain(argc, argv); });
}
