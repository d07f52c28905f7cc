// RUN: spillway-opt %s -split-input-file --train-mixed-precision | FileCheck %s
// RUN: spillway-opt %s -split-input-file --train-mixed-precision --train-autodiff | FileCheck %s --check-prefix=GRAD
// RUN: spillway-opt %s -split-input-file --train-mixed-precision --train-autodiff --train-partition-layers | FileCheck %s --check-prefix=LAYERS

// Two layers: every parameter read through its bf16 copy; the activations
// (the linear's, the add's, the norm's) rounded once each; the gelu's,
// which only reshapes and a relu read, rounded where that chain ends; the
// input x rounded for the linear only: the mask computed from it alone
// reads its f32 values; the loss stays f32.
module attributes {train.weights = "m.weights.bin"} {
  train.param @"h.0.weight" : tensor<4x4xf32> at 0
  train.param @"h.0.bias" : tensor<4xf32> at 64
  train.param @"h.1.ln.weight" : tensor<4xf32> at 80
  train.param @"h.1.fc.weight" : tensor<4x3xf32> at 96
  func.func @step(%x: tensor<8x4xf32> {train.name = "x"}, %y: tensor<8xi64> {train.name = "y"}) -> tensor<f32> {
    %w0 = train.param_value @"h.0.weight" : tensor<4x4xf32>
    %b0 = train.param_value @"h.0.bias" : tensor<4xf32>
    %h = train.linear %x, %w0, %b0 : tensor<8x4xf32>, tensor<4x4xf32>, tensor<4xf32> -> tensor<8x4xf32>
    %two = train.constant dense<2.0> : tensor<f32>
    %mask = train.mul %x, %two : tensor<8x4xf32>, tensor<f32> -> tensor<8x4xf32>
    %r = train.add %h, %mask : tensor<8x4xf32>, tensor<8x4xf32> -> tensor<8x4xf32>
    %g = train.param_value @"h.1.ln.weight" : tensor<4xf32>
    %n = train.layer_norm %r, %g : tensor<8x4xf32>, tensor<4xf32>
    %a = train.gelu %n : tensor<8x4xf32>
    %s = train.reshape %a : tensor<8x4xf32> -> tensor<32xf32>
    %t = train.reshape %s : tensor<32xf32> -> tensor<8x4xf32>
    %u = train.relu %t : tensor<8x4xf32>
    %w1 = train.param_value @"h.1.fc.weight" : tensor<4x3xf32>
    %z = train.matmul %u, %w1 : tensor<8x4xf32>, tensor<4x3xf32> -> tensor<8x3xf32>
    %l = train.softmax_cross_entropy_loss %z, %y : tensor<8x3xf32>, tensor<8xi64>
    return %l : tensor<f32>
  }
}

// CHECK-LABEL: func.func @step
// CHECK-SAME:    (%[[X:.*]]: tensor<8x4xf32> {{.*}}, %{{.*}}: tensor<8xi64>
// CHECK:       %[[W0:.*]] = train.param_value @h.0.weight
// CHECK-NEXT:  %[[W0H:.*]] = train.cast %[[W0]] : tensor<4x4xf32> -> tensor<4x4xbf16>
// CHECK-NEXT:  %[[W0R:.*]] = train.cast %[[W0H]] : tensor<4x4xbf16> -> tensor<4x4xf32>
// CHECK-NEXT:  %[[B0:.*]] = train.param_value @h.0.bias
// CHECK-NEXT:  %[[B0H:.*]] = train.cast %[[B0]] : tensor<4xf32> -> tensor<4xbf16>
// CHECK-NEXT:  %[[B0R:.*]] = train.cast %[[B0H]] : tensor<4xbf16> -> tensor<4xf32>
// CHECK-NEXT:  %[[XH:.*]] = train.cast %[[X]] : tensor<8x4xf32> -> tensor<8x4xbf16>
// CHECK-NEXT:  %[[XR:.*]] = train.cast %[[XH]] : tensor<8x4xbf16> -> tensor<8x4xf32>
// CHECK-NEXT:  %[[H:.*]] = train.linear %[[XR]], %[[W0R]], %[[B0R]]
// CHECK-NEXT:  %[[HH:.*]] = train.cast %[[H]] : tensor<8x4xf32> -> tensor<8x4xbf16>
// CHECK-NEXT:  %[[HR:.*]] = train.cast %[[HH]] : tensor<8x4xbf16> -> tensor<8x4xf32>
// CHECK-NEXT:  train.constant
// CHECK-NEXT:  %[[MASK:.*]] = train.mul %[[X]], 
// CHECK-NEXT:  %[[R:.*]] = train.add %[[HR]], %[[MASK]]
// CHECK-NEXT:  train.cast %[[R]] : tensor<8x4xf32> -> tensor<8x4xbf16>
// CHECK-NEXT:  %[[RR:.*]] = train.cast
// CHECK-NEXT:  train.param_value @h.1.ln.weight
// CHECK-NEXT:  train.cast
// CHECK-NEXT:  %[[GR:.*]] = train.cast
// CHECK-NEXT:  %[[N:.*]] = train.layer_norm %[[RR]], %[[GR]]
// CHECK-NEXT:  train.cast %[[N]]
// CHECK-NEXT:  %[[NR:.*]] = train.cast
// CHECK-NEXT:  %[[A:.*]] = train.gelu %[[NR]]
// CHECK-NEXT:  %[[S:.*]] = train.reshape %[[A]]
// CHECK-NEXT:  %[[T:.*]] = train.reshape %[[S]]
// CHECK-NEXT:  %[[U:.*]] = train.relu %[[T]]
// CHECK-NEXT:  train.cast %[[U]] : tensor<8x4xf32> -> tensor<8x4xbf16>
// CHECK-NEXT:  %[[UR:.*]] = train.cast
// CHECK-NEXT:  train.param_value @h.1.fc.weight
// CHECK-NEXT:  train.cast
// CHECK-NEXT:  %[[W1R:.*]] = train.cast
// CHECK-NEXT:  %[[Z:.*]] = train.matmul %[[UR]], %[[W1R]]
// CHECK-NEXT:  train.cast %[[Z]] : tensor<8x3xf32> -> tensor<8x3xbf16>
// CHECK-NEXT:  %[[ZR:.*]] = train.cast
// CHECK-NEXT:  %[[L:.*]] = train.softmax_cross_entropy_loss %[[ZR]]
// CHECK-NEXT:  return %[[L]]

// The gradients: each parameter's is the bf16-rounded gradient of its copy
// (cast to bf16 and back), in f32.
// GRAD-LABEL: func.func @step
// GRAD:       %[[DW1:.*]] = train.matmul {{.*}} -> tensor<4x3xf32>
// GRAD-NEXT:  %[[DW1H:.*]] = train.cast %[[DW1]] : tensor<4x3xf32> -> tensor<4x3xbf16>
// GRAD-NEXT:  %[[DW1R:.*]] = train.cast %[[DW1H]] : tensor<4x3xbf16> -> tensor<4x3xf32>
// GRAD:       train.param_grad @h.1.fc.weight, %[[DW1R]] : tensor<4x3xf32>

// Layer 0's output crosses into layer 1 as bf16 (its cast back runs in
// layer 1).
// LAYERS-LABEL: func.func @step
// LAYERS:       train.add {{.*}} {train.layer = 0 : i64, train.phase = "fwd"}
// LAYERS-NEXT:  train.cast {{.*}} {train.layer = 0 : i64, train.phase = "fwd"} : tensor<8x4xf32> -> tensor<8x4xbf16>
// LAYERS-NEXT:  train.cast {{.*}} {train.layer = 1 : i64, train.phase = "fwd"} : tensor<8x4xbf16> -> tensor<8x4xf32>

// -----

// A tied table: both uses read the one bf16 copy; the gathered rows, the
// end of a chain of moves, are rounded (a rounding of bf16 values: the
// same values, stored as bf16); the transposed copy the head multiplies
// comes from the parameter alone and is not; the logits are.
module {
  train.param @wte : tensor<6x4xf32> at 0
  func.func @tied(%ids: tensor<8xi64> {train.name = "ids"}) -> tensor<f32> {
    %w = train.param_value @wte : tensor<6x4xf32>
    %e = train.gather %w, %ids {axis = 0 : i64} : tensor<6x4xf32>, tensor<8xi64> -> tensor<8x4xf32>
    %wt = train.transpose %w, [1, 0] : tensor<6x4xf32> -> tensor<4x6xf32>
    %z = train.matmul %e, %wt : tensor<8x4xf32>, tensor<4x6xf32> -> tensor<8x6xf32>
    %l = train.softmax_cross_entropy_loss %z, %ids : tensor<8x6xf32>, tensor<8xi64>
    return %l : tensor<f32>
  }
}

// CHECK-LABEL: func.func @tied
// CHECK:       train.param_value @wte
// CHECK-NEXT:  train.cast
// CHECK-NEXT:  %[[WR:.*]] = train.cast
// CHECK-NEXT:  %[[E:.*]] = train.gather %[[WR]]
// CHECK-NEXT:  train.cast %[[E]]
// CHECK-NEXT:  %[[ER:.*]] = train.cast
// CHECK-NEXT:  %[[WT:.*]] = train.transpose %[[WR]]
// CHECK-NEXT:  %[[Z:.*]] = train.matmul %[[ER]], %[[WT]]
// CHECK-NEXT:  train.cast %[[Z]]
// CHECK-NEXT:  %[[ZR:.*]] = train.cast
// CHECK-NEXT:  train.softmax_cross_entropy_loss %[[ZR]]
