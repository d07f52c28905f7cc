//===- spillway-opt.cpp - run any Spillway pass on MLIR -------------------===//

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "spillway/InitAll.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  spillway::registerAllDialects(registry);
  spillway::registerAllPasses();
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "Spillway optimizer driver: runs any train-dialect or "
                  "lowering pass on MLIR\n",
      registry));
}
