// train-attach-optimizer with FOAM on Inputs/attach-optimizer-foam.mlir, the
// steps of Inputs/models/attach-optimizer-foam.mlir after train-autodiff
// (test/Dialect/Sched/Inputs/regenerate.sh writes it), and on the step
// below, which it warns about (a logistic regression after train-autodiff;
// the chain runs in test/e2e/offload-pipeline.test).
// RUN: spillway-opt %S/Inputs/attach-optimizer-foam.mlir -split-input-file -verify-diagnostics --train-attach-optimizer="optimizer=foam" | FileCheck %s
// RUN: spillway-opt %S/Inputs/attach-optimizer-foam.mlir -split-input-file -verify-diagnostics --train-attach-optimizer="optimizer=foam foam-level=3 foam-alpha=0.5 lr=0.01" | FileCheck %s --check-prefix=OPTS
// RUN: spillway-opt %s -verify-diagnostics --train-attach-optimizer="optimizer=foam" | FileCheck %s --check-prefix=LOGREG
// RUN: spillway-opt %s -verify-diagnostics --train-attach-optimizer="optimizer=foam foam-level=3 foam-alpha=0.5 lr=0.01" -o /dev/null
// RUN: not spillway-opt %S/Inputs/attach-optimizer-foam.mlir -split-input-file --train-attach-optimizer="optimizer=foam foam-level=17" 2>&1 | FileCheck %s --check-prefix=LEVEL
// RUN: not spillway-opt %S/Inputs/attach-optimizer-foam.mlir -split-input-file --train-attach-optimizer="optimizer=foam foam-alpha=0" 2>&1 | FileCheck %s --check-prefix=ALPHA
// RUN: not spillway-opt %S/Inputs/attach-optimizer-foam.mlir -split-input-file --train-attach-optimizer="foam-level=3" 2>&1 | FileCheck %s --check-prefix=NOTFOAM
// RUN: spillway-opt %S/Inputs/attach-optimizer-foam.mlir -split-input-file -verify-diagnostics --train-attach-optimizer="optimizer=foam state-dtype=bf16" | FileCheck %s --check-prefixes=CHECK,FOAMBF16

// FOAM's folded moments are stored as bf16 too (state-dtype=bf16): the
// same updates, and the module says so.
// FOAMBF16:      module attributes {train.optimizer_state_dtype = "bf16"}

// FOAM folds the weight matrices: 2-D parameters a matrix product
// multiplies, here through a transpose. It leaves to AdamW the embedding
// (a gather's table), the positional table (only added), the bias, and the
// LM head (its product, reshaped, is the loss's logits) although all but
// the bias are 2-D too.
// CHECK-LABEL: func.func @lm
// CHECK-DAG:     train.adamw @wte, {{.*}} : tensor<10x6xf32>
// CHECK-DAG:     train.adamw @wpe, {{.*}} : tensor<3x6xf32>
// CHECK-DAG:     train.foam @fc.weight, {{.*}}alpha = 2.500000e-01 : f64{{.*}}level = 2 : i64{{.*}} : tensor<5x6xf32>
// CHECK-DAG:     train.adamw @fc.bias, {{.*}} : tensor<5xf32>
// CHECK-DAG:     train.adamw @head, {{.*}} : tensor<5x7xf32>
// CHECK-NOT:     train.param_grad
// OPTS:          train.foam @fc.weight, {{.*}}alpha = 5.000000e-01 : f64{{.*}}level = 3 : i64, lr = 1.000000e-02 : f64{{.*}} : tensor<5x6xf32>
// LEVEL: error: train-attach-optimizer: invalid foam options: need foam-level in [0, 16] and foam-alpha in [1e-30, 1e6]
// ALPHA: error: train-attach-optimizer: invalid foam options
// NOTFOAM: error: train-attach-optimizer: foam-level and foam-alpha apply to optimizer=foam

// -----

// A head whose logits are scaled and capped (cap * tanh(logits / cap)) is
// still the head: AdamW. The hidden matrix folds.
// CHECK-LABEL: func.func @capped
// CHECK-DAG:     train.foam @w1, {{.*}} : tensor<4x6xf32>
// CHECK-DAG:     train.adamw @head, {{.*}} : tensor<6x5xf32>

// Nothing to fold (the one matrix is the head): a warning, and AdamW.
// LOGREG-LABEL: func.func @logreg
// LOGREG:        train.adamw @w, {{.*}} : tensor<4x3xf32>
// expected-warning @+1 {{train-attach-optimizer: optimizer=foam folds no parameter: the model has no weight matrix besides its embeddings and LM head, so every parameter gets AdamW}}
module {
  train.param @w : tensor<4x3xf32> at 0
  func.func @logreg(%arg0: tensor<2x4xf32> {train.name = "x"}, %arg1: tensor<2xi64> {train.name = "y"}) -> tensor<f32> {
    %0 = train.param_value @w : tensor<4x3xf32>
    %1 = train.matmul %arg0, %0 : tensor<2x4xf32>, tensor<4x3xf32> -> tensor<2x3xf32>
    %2 = train.softmax_cross_entropy_loss %1, %arg1 : tensor<2x3xf32>, tensor<2xi64>
    %3 = train.constant dense<1.000000e+00> : tensor<f32>
    %4 = train.softmax_cross_entropy_loss_grad %1, %arg1, %3 : tensor<2x3xf32>, tensor<2xi64>, tensor<f32>
    %5 = train.transpose %arg0, [1, 0] : tensor<2x4xf32> -> tensor<4x2xf32>
    %6 = train.matmul %5, %4 : tensor<4x2xf32>, tensor<2x3xf32> -> tensor<4x3xf32>
    train.param_grad @w, %6 : tensor<4x3xf32>
    return %2 : tensor<f32>
  }
}
