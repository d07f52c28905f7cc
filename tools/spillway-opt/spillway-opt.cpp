//===- spillway-opt.cpp - run any Spillway pass on MLIR -------------------===//

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "spillway/InitAll.h"
#include "spillway/Pipelines/Pipelines.h"
#include "spillway/Support/OutputFile.h"
#include "spillway/Support/ToolMain.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"
#include <cstdio>

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  mlir::DialectRegistry registry;
  spillway::registerAllDialects(registry);
  spillway::registerAllPasses();
  // Pipelines by name: spillwayc --print-pipeline prints the one to run.
  spillway::registerPipelines();
  auto [input, output] = mlir::registerAndParseCLIOptions(
      argc, argv,
      "Spillway optimizer driver: runs any train-dialect or lowering pass on "
      "MLIR\n",
      registry);
  // Deep nesting is refused before the parser recurses into it. (Stdin is
  // read once, by the parser: there only the large stack guards, which
  // holds some 20,000 levels.)
  if (input != "-") {
    if (auto buf = llvm::MemoryBuffer::getFile(input, /*IsText=*/true)) {
      std::string error;
      if (!spillway::checkNesting((*buf)->getBuffer(), input,
                                  spillway::CommentStyle::MLIR, error)) {
        llvm::WithColor::error(llvm::errs(), "spillway-opt") << error << "\n";
        return 1;
      }
    }
  }
  // MlirOptMain's file-name form leaves a failed write to the output
  // stream's destructor, LLVM's fatal "IO failure on output stream": the
  // stream form, with the output checked here, names the file instead.
  return spillway::runWithLargeStack([&, &input = input, &output = output] {
    auto config = mlir::MlirOptMainConfig::createFromCLOptions();
    // Listing dialects or passes reads no input and writes no file.
    if (config.shouldShowDialects() || config.shouldListPasses())
      return mlir::asMainReturnCode(
          mlir::MlirOptMain(llvm::outs(), llvm::MemoryBuffer::getMemBuffer(""),
                            registry, config));
    if (input == "-" &&
        llvm::sys::Process::FileDescriptorIsDisplayed(fileno(stdin)))
      llvm::errs() << "(processing input from stdin now, hit ctrl-c/ctrl-d "
                      "to stop)\n";
    std::string error;
    auto file = mlir::openInputFile(input, &error);
    if (!file) {
      llvm::WithColor::error(llvm::errs(), "spillway-opt") << error << "\n";
      return 1;
    }
    auto out = mlir::openOutputFile(output, &error);
    if (!out) {
      llvm::WithColor::error(llvm::errs(), "spillway-opt") << error << "\n";
      return 1;
    }
    bool ok = succeeded(
        mlir::MlirOptMain(out->os(), std::move(file), registry, config));
    if (!spillway::finishOutput(out->os(), output, error)) {
      llvm::WithColor::error(llvm::errs(), "spillway-opt") << error << "\n";
      return 1;
    }
    if (!ok)
      return 1;
    out->keep();
    return 0;
  });
}
