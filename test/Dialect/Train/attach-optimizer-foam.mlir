// RUN: spillway-opt %s -split-input-file -verify-diagnostics --train-autodiff --train-attach-optimizer="optimizer=foam" | FileCheck %s
// RUN: spillway-opt %s -split-input-file -verify-diagnostics --train-autodiff --train-attach-optimizer="optimizer=foam foam-level=3 foam-alpha=0.5 lr=0.01" | FileCheck %s --check-prefix=OPTS
// RUN: not spillway-opt %s -split-input-file --train-autodiff --train-attach-optimizer="optimizer=foam foam-level=17" 2>&1 | FileCheck %s --check-prefix=LEVEL
// RUN: not spillway-opt %s -split-input-file --train-autodiff --train-attach-optimizer="optimizer=foam foam-alpha=0" 2>&1 | FileCheck %s --check-prefix=ALPHA
// RUN: not spillway-opt %s -split-input-file --train-autodiff --train-attach-optimizer="foam-level=3" 2>&1 | FileCheck %s --check-prefix=NOTFOAM

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
module {
  train.param @wte : tensor<10x6xf32> at 0
  train.param @wpe : tensor<3x6xf32> at 240
  train.param @"fc.weight" : tensor<5x6xf32> at 312
  train.param @"fc.bias" : tensor<5xf32> at 432
  train.param @head : tensor<5x7xf32> at 452
  func.func @lm(%ids: tensor<2x3xi64> {train.name = "ids"}, %y: tensor<6xi64> {train.name = "y"}) -> tensor<f32> {
    %e = train.param_value @wte : tensor<10x6xf32>
    %p = train.param_value @wpe : tensor<3x6xf32>
    %w = train.param_value @"fc.weight" : tensor<5x6xf32>
    %b = train.param_value @"fc.bias" : tensor<5xf32>
    %hw = train.param_value @head : tensor<5x7xf32>
    %g = train.gather %e, %ids : tensor<10x6xf32>, tensor<2x3xi64> -> tensor<2x3x6xf32>
    %x = train.add %g, %p : tensor<2x3x6xf32>, tensor<3x6xf32> -> tensor<2x3x6xf32>
    %wt = train.transpose %w, [1, 0] : tensor<5x6xf32> -> tensor<6x5xf32>
    %h = train.matmul %x, %wt : tensor<2x3x6xf32>, tensor<6x5xf32> -> tensor<2x3x5xf32>
    %hb = train.add %h, %b : tensor<2x3x5xf32>, tensor<5xf32> -> tensor<2x3x5xf32>
    %r = train.relu %hb : tensor<2x3x5xf32>
    %o = train.matmul %r, %hw : tensor<2x3x5xf32>, tensor<5x7xf32> -> tensor<2x3x7xf32>
    %logits = train.reshape %o : tensor<2x3x7xf32> -> tensor<6x7xf32>
    %l = train.softmax_cross_entropy_loss %logits, %y : tensor<6x7xf32>, tensor<6xi64>
    return %l : tensor<f32>
  }
}

// -----

// A head whose logits are scaled and capped (cap * tanh(logits / cap)) is
// still the head: AdamW. The hidden matrix folds.
// CHECK-LABEL: func.func @capped
// CHECK-DAG:     train.foam @w1, {{.*}} : tensor<4x6xf32>
// CHECK-DAG:     train.adamw @head, {{.*}} : tensor<6x5xf32>
module {
  train.param @w1 : tensor<4x6xf32> at 0
  train.param @head : tensor<6x5xf32> at 96
  func.func @capped(%x: tensor<3x4xf32> {train.name = "x"}, %y: tensor<3xi64> {train.name = "y"}) -> tensor<f32> {
    %a = train.param_value @w1 : tensor<4x6xf32>
    %b = train.param_value @head : tensor<6x5xf32>
    %h = train.matmul %x, %a : tensor<3x4xf32>, tensor<4x6xf32> -> tensor<3x6xf32>
    %t = train.tanh %h : tensor<3x6xf32>
    %o = train.matmul %t, %b : tensor<3x6xf32>, tensor<6x5xf32> -> tensor<3x5xf32>
    %c = train.constant dense<5.000000e-01> : tensor<f32>
    %s = train.mul %o, %c : tensor<3x5xf32>, tensor<f32> -> tensor<3x5xf32>
    %z = train.tanh %s : tensor<3x5xf32>
    %l = train.softmax_cross_entropy_loss %z, %y : tensor<3x5xf32>, tensor<3xi64>
    return %l : tensor<f32>
  }
}

// -----

// Nothing to fold (the one matrix is the head): a warning, and AdamW.
// CHECK-LABEL: func.func @logreg
// CHECK:         train.adamw @w, {{.*}} : tensor<4x3xf32>
// expected-warning @+1 {{train-attach-optimizer: optimizer=foam folds no parameter: the model has no weight matrix besides its embeddings and LM head, so every parameter gets AdamW}}
module {
  train.param @w : tensor<4x3xf32> at 0
  func.func @logreg(%x: tensor<2x4xf32> {train.name = "x"}, %y: tensor<2xi64> {train.name = "y"}) -> tensor<f32> {
    %a = train.param_value @w : tensor<4x3xf32>
    %o = train.matmul %x, %a : tensor<2x4xf32>, tensor<4x3xf32> -> tensor<2x3xf32>
    %l = train.softmax_cross_entropy_loss %o, %y : tensor<2x3xf32>, tensor<2xi64>
    return %l : tensor<f32>
  }
}
