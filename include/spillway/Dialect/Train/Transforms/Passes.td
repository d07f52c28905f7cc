//===- Passes.td - train dialect passes --------------------*- tablegen -*-===//

#ifndef SPILLWAY_DIALECT_TRAIN_TRANSFORMS_PASSES_TD
#define SPILLWAY_DIALECT_TRAIN_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def TrainAutodiffPass : Pass<"train-autodiff", "mlir::ModuleOp"> {
  let summary = "Reverse-mode gradients of the scalar loss w.r.t. every parameter";
  let description = [{
    Assumes each `func.func` in the module returns exactly one value, a
    scalar `tensor<f32>` loss, computed from its arguments and
    `train.param_value` reads. Appends to each such function the reverse
    sweep: for every op on a path from a parameter to the loss, in reverse
    order, its gradient rule (one place per op kind) accumulates adjoints of
    its operands; broadcast operands get `train.sum_to_shape`. Ops off that
    path get no gradient ops. Before the return, for every parameter the
    function reads it emits one `train.param_grad @p, %g` holding
    d loss / d p (the adjoints of several reads of p summed; zeros when the
    loss does not depend on p), in the order the `train.param` ops are
    declared. Gradients of function arguments (inputs) are not computed.

    Fails with a diagnostic naming the op when an op on the path has no
    gradient rule, or when the result is not a scalar float tensor.
  }];
  let dependentDialects = ["spillway::train::TrainDialect"];
  let statistics = [
    Statistic<"numGradOps", "grad-ops", "Ops created by the reverse sweep">,
    Statistic<"numParams", "params", "Parameters differentiated">
  ];
}

def TrainAttachOptimizerPass : Pass<"train-attach-optimizer", "mlir::ModuleOp"> {
  let summary = "Turn every parameter gradient into an optimizer update";
  let description = [{
    Replaces each `train.param_grad @p, %g` (from `train-autodiff`) with the
    update of the chosen optimizer. `adamw` emits `train.adamw` with the
    given hyper-parameters, matching `torch.optim.AdamW` (weight decay on
    every parameter by default). The executable may override the
    hyper-parameters at run time.

    Fails when the optimizer is unknown, when an option is out of range, or
    when the module declares parameters but holds no `train.param_grad`
    (run `train-autodiff` first). A module without any `train.param` is
    left unchanged with a warning.
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", "\"adamw\"",
           "Optimizer to attach (adamw)">,
    Option<"lr", "lr", "double", "1e-3", "Learning rate">,
    Option<"beta1", "beta1", "double", "0.9", "First-moment decay">,
    Option<"beta2", "beta2", "double", "0.999", "Second-moment decay">,
    Option<"eps", "eps", "double", "1e-8", "Denominator epsilon (outside the sqrt)">,
    Option<"weightDecay", "weight-decay", "double", "0.01",
           "Decoupled weight decay, applied to every parameter">
  ];
  let dependentDialects = ["spillway::train::TrainDialect"];
}

#endif
