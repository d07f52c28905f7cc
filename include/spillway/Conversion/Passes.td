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

    A scheduled step may hold two more kinds of ops, both lowered here
    because they run interleaved with the train ops in one step function:
    an offload plan's sched ops, which `convert-sched-to-train` keeps
    (moves, awaits, binds, drops, gradients, activations: the runtime's
    `spw_move` family, the plan's arenas and blocks declared from
    `sched.buffers`; `OffloadOps.cpp`), and the calls `sched-outline-tasks`
    made, whose private callees each become one internal LLVM function
    while the step keeps its handles in a frame global.

    With `target=cuda`, `spw_model_declare` first calls `spw_use_cuda` with
    the precision: the executable then links the CUDA runtime library and
    runs on the GPU by default. `precision=bf16` (CUDA only) runs the
    products (GEMMs, attention) with bf16 inputs and fp32 accumulation,
    keeping fp32 tensors and master weights.
  }];
  let dependentDialects = ["mlir::LLVM::LLVMDialect"];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"cpu\"",
           "Backend the executable runs on by default: cpu or cuda">,
    Option<"precision", "precision", "std::string", /*default=*/"\"fp32\"",
           "Numerics of the products: fp32, or bf16 (target=cuda only)">,
  ];
}

def ConvertTrainToSchedPass : Pass<"convert-train-to-sched", "mlir::ModuleOp"> {
  let summary = "Turn a partitioned training step into a sched.iteration of tasks";
  let description = [{
    Assumes the step function has been through `train-partition-layers`:
    every op of it carries `train.layer` and `train.phase` (the pass fails,
    naming the op, where one does not). Replaces the step's body by one
    `sched.iteration` whose inputs are the step's arguments and whose
    results are what it returned, holding one `sched.task` per (phase,
    layer) that has ops, in the horizontal order of one whole batch:
    forward of layers 0 .. L-1, backward of layers L-1 .. 0, then the
    update of layers 0 .. L-1. Each task's body is the step's ops of that
    layer and phase, in their original order, without the `train.layer` /
    `train.phase` attributes (the task carries them). A value one task
    computes and a later one reads leaves the first as a result and enters
    the second as an operand, so every crossing is explicit, except that
    parameter reads (`train.param_value`), constants and the pure ops
    computed from them alone (a tied weight's transpose) are copied into
    every task that uses them: each task loads the weights it needs, and
    no weight stays alive between tasks as a value. A value read
    by a task that comes earlier in this order than the one computing it is
    an error naming both. The module's `train.layers` and the parameters'
    `train.layer` are kept for the sched passes. The iteration has one
    micro-batch (`sched-microbatch` splits it) and no order yet
    (`sched-order` chooses one).
  }];
  let dependentDialects = ["spillway::sched::SchedDialect"];
}

def ConvertSchedToTrainPass : Pass<"convert-sched-to-train", "mlir::ModuleOp"> {
  let summary = "Run a schedule as written: a flat train step, an offload plan's ops kept in place";
  let description = [{
    Each `sched.iteration` is replaced by its ops in their order, every
    task's body inlined where the task stands (its block arguments replaced
    by its operands; a task that `sched-outline-tasks` made a call keeps the
    call), so the step computes exactly what the schedule computes, in the
    schedule's order. `sched.slice` micro-batch m of M becomes a
    `train.slice` of the leading dimension (starts m * B/M, steps 1);
    `sched.accumulate` becomes `train.add`s left to right in the listed
    order, and for `mean` a `train.div` by the count. An offload plan's ops
    (`sched.move`, `await`, `bind`, `drop`, `stage_grads`,
    `accumulate_grads`, `gradient`, `put_activation`, `take_activation`)
    stay where they stand, still sched ops: `convert-train-to-runtime`
    lowers them with the train ops around them to the runtime's `spw_move`
    family. Any other sched op is an error.
  }];
  let dependentDialects = ["spillway::train::TrainDialect"];
}

#endif
