//===- spillway-opt.cpp - run any Spillway pass on MLIR -------------------===//

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "spillway/InitAll.h"
#include "spillway/Pipelines/Pipelines.h"
#include "spillway/Support/ToolMain.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/WithColor.h"

int main(int argc, char **argv) {
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
  return spillway::runWithLargeStack([&, &input = input, &output = output] {
    return mlir::asMainReturnCode(
        mlir::MlirOptMain(argc, argv, input, output, registry));
  });
}
