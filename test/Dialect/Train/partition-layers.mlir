// train-partition-layers on training steps (after train-autodiff and
// train-attach-optimizer). The first RUN reads Inputs/partition-layers.mlir,
// Inputs/models/partition-layers.mlir's steps (Inputs/regenerate.sh in
// test/Dialect/Sched writes it); the second the steps below, each the output
// of those passes on a step of Inputs/models/partition-layers-errors.mlir
// (copied, with the expected diagnostics on the same ops; the chains run in
// test/e2e/offload-pipeline.test).
// RUN: spillway-opt %S/Inputs/partition-layers.mlir -split-input-file -verify-diagnostics --train-partition-layers | FileCheck %s
// RUN: spillway-opt %s -split-input-file -verify-diagnostics --train-partition-layers

// Two blocks named by index, an embedding and a head; the relu and the
// residual add (no parameters) follow the layer of their latest operand.
// CHECK-LABEL: module attributes {train.layers = [
// CHECK-SAME:    #train.layer<"embed", params = [@embed.weight]>,
// CHECK-SAME:    #train.layer<"blocks.0", params = [@blocks.0.fc.weight, @blocks.0.fc.bias]>,
// CHECK-SAME:    #train.layer<"blocks.1", params = [@blocks.1.fc.weight, @blocks.1.fc.bias]>,
// CHECK-SAME:    #train.layer<"head", params = [@head.weight]>]}
// CHECK:       train.param @embed.weight : tensor<10x4xf32> at 0 {train.layer = 0 : i64}
// CHECK:       train.param @blocks.0.fc.weight {{.*}} {train.layer = 1 : i64}
// CHECK:       train.param @blocks.0.fc.bias {{.*}} {train.layer = 1 : i64}
// CHECK:       train.param @blocks.1.fc.weight {{.*}} {train.layer = 2 : i64}
// CHECK:       train.param @blocks.1.fc.bias {{.*}} {train.layer = 2 : i64}
// CHECK:       train.param @head.weight {{.*}} {train.layer = 3 : i64}
// A parameter the step never reads is in no layer.
// CHECK:       train.param @unused.weight : tensor<4xf32> at 480{{$}}
// CHECK-LABEL: func.func @step
// CHECK:       train.param_value @embed.weight {train.layer = 0 : i64, train.phase = "fwd"}
// CHECK:       train.param_value @blocks.1.fc.bias {train.layer = 2 : i64, train.phase = "fwd"}
// CHECK:       %[[X0:.*]] = train.gather {{.*}} {train.layer = 0 : i64, train.phase = "fwd"}
// CHECK-NEXT:  %[[Y0:.*]] = train.linear {{.*}} {train.layer = 1 : i64, train.phase = "fwd"}
// CHECK-NEXT:  train.relu %[[Y0]] {train.layer = 1 : i64, train.phase = "fwd"}
// CHECK-NEXT:  %[[X1:.*]] = train.add %[[X0]], {{.*}} {train.layer = 1 : i64, train.phase = "fwd"}
// CHECK-NEXT:  train.linear %[[X1]], {{.*}} {train.layer = 2 : i64, train.phase = "fwd"}
// CHECK-NEXT:  train.relu {{.*}} {train.layer = 2 : i64, train.phase = "fwd"}
// CHECK-NEXT:  train.add %[[X1]], {{.*}} {train.layer = 2 : i64, train.phase = "fwd"}
// CHECK-NEXT:  train.matmul {{.*}} {train.layer = 3 : i64, train.phase = "fwd"}
// CHECK-NEXT:  train.softmax_cross_entropy_loss {{.*}} {train.layer = 3 : i64, train.phase = "fwd"}
// Backward: the loss seed and the head's gradients are layer 3; each block's
// gradients are its own layer, the weight transposes with them.
// CHECK-NEXT:  train.constant dense<1.000000e+00> : tensor<f32> {train.layer = 3 : i64, train.phase = "bwd"}
// CHECK-NEXT:  train.softmax_cross_entropy_loss_grad {{.*}} {train.layer = 3 : i64, train.phase = "bwd"}
// CHECK-NEXT:  train.transpose {{.*}} {train.layer = 3 : i64, train.phase = "bwd"}
// CHECK-NEXT:  %[[DX2:.*]] = train.matmul {{.*}} {train.layer = 3 : i64, train.phase = "bwd"}
// CHECK-NEXT:  train.transpose {{.*}} {train.layer = 3 : i64, train.phase = "bwd"}
// CHECK-NEXT:  train.matmul {{.*}} {train.layer = 3 : i64, train.phase = "bwd"}
// CHECK-NEXT:  train.relu_grad {{.*}} {train.layer = 2 : i64, train.phase = "bwd"}
// CHECK-NEXT:  train.transpose {{.*}} {train.layer = 2 : i64, train.phase = "bwd"}
// CHECK-NEXT:  %[[DR1:.*]] = train.matmul {{.*}} {train.layer = 2 : i64, train.phase = "bwd"}
// CHECK-NEXT:  train.transpose {{.*}} {train.layer = 2 : i64, train.phase = "bwd"}
// CHECK-NEXT:  train.matmul {{.*}} {train.layer = 2 : i64, train.phase = "bwd"}
// CHECK-NEXT:  train.sum_to_shape {{.*}} {train.layer = 2 : i64, train.phase = "bwd"}
// The cotangent of block 1's input, summed from its two uses, is block 1's
// backward; the one of block 0's input block 0's.
// CHECK-NEXT:  %[[DX1:.*]] = train.add %[[DX2]], %[[DR1]] {train.layer = 2 : i64, train.phase = "bwd"}
// CHECK-NEXT:  train.relu_grad {{.*}}, %[[DX1]] {train.layer = 1 : i64, train.phase = "bwd"}
// CHECK:       %[[DX0:.*]] = train.add %[[DX1]], {{.*}} {train.layer = 1 : i64, train.phase = "bwd"}
// CHECK-NEXT:  train.gather_grad {{.*}}, %[[DX0]] {train.layer = 0 : i64, train.phase = "bwd"}
// Updates: their parameter's layer.
// CHECK-NEXT:  train.adamw @embed.weight, {{.*}}train.layer = 0 : i64, train.phase = "opt"
// CHECK-NEXT:  train.adamw @blocks.0.fc.weight, {{.*}}train.layer = 1 : i64, train.phase = "opt"
// CHECK-NEXT:  train.adamw @blocks.0.fc.bias, {{.*}}train.layer = 1 : i64, train.phase = "opt"
// CHECK-NEXT:  train.adamw @blocks.1.fc.weight, {{.*}}train.layer = 2 : i64, train.phase = "opt"
// CHECK-NEXT:  train.adamw @blocks.1.fc.bias, {{.*}}train.layer = 2 : i64, train.phase = "opt"
// CHECK-NEXT:  train.adamw @head.weight, {{.*}}train.layer = 3 : i64, train.phase = "opt"
// CHECK-NEXT:  return

// -----

// An embedding tied to the head: owned by the embedding's layer, read by the
// head's, and its update waits for both layers' backward. The weight's
// transpose is computed where the head needs it; the tanh after the gather
// (no parameter) stays in the embedding's layer, forward and backward.
// CHECK-LABEL: module attributes {train.layers = [
// CHECK-SAME:    #train.layer<"wte", params = [@wte], shared = [#train.shared<@wte, used_by = [0, 1], grad_from = [0, 1]>]>,
// CHECK-SAME:    #train.layer<"ln", params = [@ln.scale, @ln.bias], uses = [@wte]>]}
// CHECK-LABEL: func.func @tied
// CHECK:       %[[E:.*]] = train.param_value @wte {train.layer = 0 : i64, train.phase = "fwd"}
// CHECK:       train.gather %[[E]], {{.*}} {train.layer = 0 : i64, train.phase = "fwd"}
// CHECK-NEXT:  train.tanh {{.*}} {train.layer = 0 : i64, train.phase = "fwd"}
// CHECK-NEXT:  %[[N:.*]] = train.layer_norm {{.*}} {train.layer = 1 : i64, train.phase = "fwd"}
// CHECK-NEXT:  train.transpose %[[E]], [1, 0] {train.layer = 1 : i64, train.phase = "fwd"}
// CHECK-NEXT:  train.matmul {{.*}} {train.layer = 1 : i64, train.phase = "fwd"}
// The head's part of the weight gradient is computed in the head's layer...
// CHECK:       %[[NT:.*]] = train.transpose %[[N]], [1, 0] {train.layer = 1 : i64, train.phase = "bwd"}
// CHECK-NEXT:  %[[DWT:.*]] = train.matmul %[[NT]], {{.*}} {train.layer = 1 : i64, train.phase = "bwd"}
// CHECK-NEXT:  %[[DW:.*]] = train.transpose %[[DWT]], [1, 0] {train.layer = 1 : i64, train.phase = "bwd"}
// CHECK-NEXT:  train.layer_norm_grad {{.*}} {train.layer = 1 : i64, train.phase = "bwd"}
// CHECK-NEXT:  train.tanh_grad {{.*}} {train.layer = 0 : i64, train.phase = "bwd"}
// ...and added to the embedding's in the embedding's.
// CHECK-NEXT:  %[[DE:.*]] = train.gather_grad {{.*}} {train.layer = 0 : i64, train.phase = "bwd"}
// CHECK-NEXT:  %[[G:.*]] = train.add %[[DW]], %[[DE]] {train.layer = 0 : i64, train.phase = "bwd"}
// CHECK-NEXT:  train.adamw @wte, %[[G]] {{.*}}train.layer = 0 : i64, train.phase = "opt"

// -----

// Names without a block index: grouped by module path, else (no dot) by
// the op that reads them together. An input reshape before any parameter is
// read and a constant join the earliest layer that uses them.
// CHECK-LABEL: module attributes {train.layers = [
// CHECK-SAME:    #train.layer<"w1", params = [@w1, @b1]>, #train.layer<"w2", params = [@w2, @b2]>]}
// CHECK-LABEL: func.func @mlp
// CHECK-NEXT:  train.reshape {{.*}} {train.layer = 0 : i64, train.phase = "fwd"}
// CHECK:       train.linear {{.*}} {train.layer = 0 : i64, train.phase = "fwd"}
// CHECK-NEXT:  %[[C:.*]] = train.constant dense<5.000000e-01> : tensor<f32> {train.layer = 0 : i64, train.phase = "fwd"}
// CHECK-NEXT:  train.mul {{.*}} {train.layer = 0 : i64, train.phase = "fwd"}
// CHECK-NEXT:  train.relu {{.*}} {train.layer = 0 : i64, train.phase = "fwd"}
// CHECK:       train.linear {{.*}} {train.layer = 1 : i64, train.phase = "fwd"}
// CHECK:       train.relu_grad {{.*}} {train.layer = 0 : i64, train.phase = "bwd"}
// CHECK-NEXT:  train.mul {{.*}}, %[[C]] {train.layer = 0 : i64, train.phase = "bwd"}

// -----

// Without block indices, groups whose first reading op consumes nothing of
// the run of layers before them are parallel branches and one layer.
// CHECK-LABEL: module attributes {train.layers = [
// CHECK-SAME:    #train.layer<"attn.q+attn.k", params = [@attn.q.weight, @attn.k.weight]>,
// CHECK-SAME:    #train.layer<"proj", params = [@proj.weight]>]}
// CHECK-LABEL: func.func @parallel
// CHECK:       train.linear {{.*}} {train.layer = 0 : i64, train.phase = "fwd"}
// CHECK-NEXT:  train.linear {{.*}} {train.layer = 0 : i64, train.phase = "fwd"}
// CHECK-NEXT:  train.mul {{.*}} {train.layer = 0 : i64, train.phase = "fwd"}
// CHECK-NEXT:  train.linear {{.*}} {train.layer = 1 : i64, train.phase = "fwd"}

// bf16 storage: the cast back to f32 (no parameters, so by the rule above
// in its operand's layer) is computed in the layer that reads it, so the
// bf16 value is what crosses the boundary.
// CHECK-LABEL: func.func @bf16_storage
// CHECK:       train.relu {{.*}} {train.layer = 0 : i64, train.phase = "fwd"}
// CHECK-NEXT:  train.cast {{.*}} {train.layer = 0 : i64, train.phase = "fwd"} : tensor<2x4xf32> -> tensor<2x4xbf16>
// CHECK-NEXT:  train.cast {{.*}} {train.layer = 1 : i64, train.phase = "fwd"} : tensor<2x4xbf16> -> tensor<2x4xf32>
// CHECK-NEXT:  train.linear {{.*}} {train.layer = 1 : i64, train.phase = "fwd"}

// -----

// A block's parameter read after a later block's output: no monotone order.
module {
  train.param @blocks.0.a : tensor<4x4xf32> at 0
  train.param @blocks.1.b : tensor<4x4xf32> at 64
  train.param @blocks.0.c : tensor<4x3xf32> at 128
  func.func @out_of_order(%arg0: tensor<2x4xf32>, %arg1: tensor<2xi64>) -> tensor<f32> {
    %0 = train.param_value @blocks.0.a : tensor<4x4xf32>
    %1 = train.param_value @blocks.1.b : tensor<4x4xf32>
    %2 = train.param_value @blocks.0.c : tensor<4x3xf32>
    %3 = train.linear %arg0, %0 : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
    // expected-note @+1 {{the value of layer 1 is computed here}}
    %4 = train.linear %3, %1 : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
    // expected-error @+1 {{train-partition-layers: layers are not monotone in forward order: this op reads @blocks.0.c of layer 0 ('blocks.0') and consumes a value of layer 1 ('blocks.1')}}
    %5 = train.linear %4, %2 : tensor<2x4xf32>, tensor<4x3xf32> -> tensor<2x3xf32>
    %6 = train.softmax_cross_entropy_loss %5, %arg1 : tensor<2x3xf32>, tensor<2xi64>
    %7 = train.constant dense<1.000000e+00> : tensor<f32>
    %8 = train.softmax_cross_entropy_loss_grad %5, %arg1, %7 : tensor<2x3xf32>, tensor<2xi64>, tensor<f32>
    %9 = train.transpose %2, [1, 0] : tensor<4x3xf32> -> tensor<3x4xf32>
    %10 = train.matmul %8, %9 : tensor<2x3xf32>, tensor<3x4xf32> -> tensor<2x4xf32>
    %11 = train.transpose %4, [1, 0] : tensor<2x4xf32> -> tensor<4x2xf32>
    %12 = train.matmul %11, %8 : tensor<4x2xf32>, tensor<2x3xf32> -> tensor<4x3xf32>
    %13 = train.transpose %1, [1, 0] : tensor<4x4xf32> -> tensor<4x4xf32>
    %14 = train.matmul %10, %13 : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
    %15 = train.transpose %3, [1, 0] : tensor<2x4xf32> -> tensor<4x2xf32>
    %16 = train.matmul %15, %10 : tensor<4x2xf32>, tensor<2x4xf32> -> tensor<4x4xf32>
    %17 = train.transpose %arg0, [1, 0] : tensor<2x4xf32> -> tensor<4x2xf32>
    %18 = train.matmul %17, %14 : tensor<4x2xf32>, tensor<2x4xf32> -> tensor<4x4xf32>
    train.adamw @blocks.0.a, %18 {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 1.000000e-02 : f64} : tensor<4x4xf32>
    train.adamw @blocks.1.b, %16 {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 1.000000e-02 : f64} : tensor<4x4xf32>
    train.adamw @blocks.0.c, %12 {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 1.000000e-02 : f64} : tensor<4x3xf32>
    return %6 : tensor<f32>
  }
}

// -----

// One step function per module.
module {
  train.param @p : tensor<3xf32> at 0
  train.param @q : tensor<3xf32> at 12
  func.func @first() -> tensor<f32> {
    %0 = train.param_value @p : tensor<3xf32>
    %1 = train.reduce_sum %0, [] {keepdims = false} : tensor<3xf32> -> tensor<f32>
    %2 = train.constant dense<1.000000e+00> : tensor<f32>
    %3 = train.reshape %2 : tensor<f32> -> tensor<1xf32>
    %4 = train.broadcast_to %3 : tensor<1xf32> -> tensor<3xf32>
    train.adamw @p, %4 {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 1.000000e-02 : f64} : tensor<3xf32>
    return %1 : tensor<f32>
  }
  // expected-error @+1 {{train-partition-layers: expects one step function reading parameters; found @first and @second}}
  func.func @second() -> tensor<f32> {
    %0 = train.param_value @q : tensor<3xf32>
    %1 = train.reduce_sum %0, [] {keepdims = false} : tensor<3xf32> -> tensor<f32>
    %2 = train.constant dense<1.000000e+00> : tensor<f32>
    %3 = train.reshape %2 : tensor<f32> -> tensor<1xf32>
    %4 = train.broadcast_to %3 : tensor<1xf32> -> tensor<3xf32>
    train.adamw @q, %4 {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 1.000000e-02 : f64} : tensor<3xf32>
    return %1 : tensor<f32>
  }
}
