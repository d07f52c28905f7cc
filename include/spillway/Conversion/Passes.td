//===- Passes.td - conversion passes -----------------------*- tablegen -*-===//

#ifndef SPILLWAY_CONVERSION_PASSES_TD
#define SPILLWAY_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConvertTrainToRuntimePass : Pass<"convert-train-to-runtime", "mlir::ModuleOp"> {
  let summary = "Lower a training step in the train dialect to Spillway runtime calls";
  let description = [{
    Assumes one `func.func` (the training step, after `train-autodiff` and
    `train-attach-optimizer`) returning a scalar loss, with static shapes.
    Produces LLVM-dialect functions against the runtime's C ABI
    (`runtime/include/spillway/runtime/spillway_rt.h`):
    `spw_model_declare` declares the weights file size, every `train.param`
    (name, dtype, shape, offset), every function argument as a named input
    and the optimizer defaults; `spw_model_step` runs the step, one runtime
    call per train op (`spw_op_<name>`, outputs allocated with the inferred
    static shapes, attributes passed as constant arrays); `main` calls
    `spw_main`. The `train.param` declarations and the original function are
    removed.
  }];
  let dependentDialects = ["mlir::LLVM::LLVMDialect"];
}

#endif
