//===- InitAll.cpp - everything Spillway's tools register -----------------===//

#include "spillway/InitAll.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Transforms/Passes.h"
#include "spillway/Conversion/Passes.h"
#include "spillway/Dialect/Sched/IR/SchedOps.h"
#include "spillway/Dialect/Sched/Transforms/Passes.h"
#include "spillway/Dialect/Train/IR/TrainOps.h"
#include "spillway/Dialect/Train/Transforms/Passes.h"

void spillway::registerAllDialects(mlir::DialectRegistry &registry) {
  registry.insert<train::TrainDialect, sched::SchedDialect, mlir::func::FuncDialect,
                  mlir::LLVM::LLVMDialect>();
}

void spillway::registerAllPasses() {
  train::registerTrainPasses();
  sched::registerSchedPasses();
  registerConversionPasses();
  // Upstream passes worth running between Spillway's stages by hand (the
  // training pipeline uses CSE).
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  mlir::registerReconcileUnrealizedCastsPass();
  mlir::registerConvertFuncToLLVMPass();
}
