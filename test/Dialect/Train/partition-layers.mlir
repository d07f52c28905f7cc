// RUN: spillway-opt %s -split-input-file -verify-diagnostics --train-autodiff --train-attach-optimizer --train-partition-layers | FileCheck %s

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
module {
  train.param @"embed.weight" : tensor<10x4xf32> at 0
  train.param @"blocks.0.fc.weight" : tensor<4x4xf32> at 160
  train.param @"blocks.0.fc.bias" : tensor<4xf32> at 224
  train.param @"blocks.1.fc.weight" : tensor<4x4xf32> at 240
  train.param @"blocks.1.fc.bias" : tensor<4xf32> at 304
  train.param @"head.weight" : tensor<4x10xf32> at 320
  train.param @"unused.weight" : tensor<4xf32> at 480
  func.func @step(%ids: tensor<6xi64>, %labels: tensor<6xi64>) -> tensor<f32> {
    %e = train.param_value @"embed.weight" : tensor<10x4xf32>
    %w0 = train.param_value @"blocks.0.fc.weight" : tensor<4x4xf32>
    %b0 = train.param_value @"blocks.0.fc.bias" : tensor<4xf32>
    %w1 = train.param_value @"blocks.1.fc.weight" : tensor<4x4xf32>
    %b1 = train.param_value @"blocks.1.fc.bias" : tensor<4xf32>
    %wh = train.param_value @"head.weight" : tensor<4x10xf32>
    %x0 = train.gather %e, %ids : tensor<10x4xf32>, tensor<6xi64> -> tensor<6x4xf32>
    %y0 = train.linear %x0, %w0, %b0 : tensor<6x4xf32>, tensor<4x4xf32>, tensor<4xf32> -> tensor<6x4xf32>
    %r0 = train.relu %y0 : tensor<6x4xf32>
    %x1 = train.add %x0, %r0 : tensor<6x4xf32>, tensor<6x4xf32> -> tensor<6x4xf32>
    %y1 = train.linear %x1, %w1, %b1 : tensor<6x4xf32>, tensor<4x4xf32>, tensor<4xf32> -> tensor<6x4xf32>
    %r1 = train.relu %y1 : tensor<6x4xf32>
    %x2 = train.add %x1, %r1 : tensor<6x4xf32>, tensor<6x4xf32> -> tensor<6x4xf32>
    %logits = train.matmul %x2, %wh : tensor<6x4xf32>, tensor<4x10xf32> -> tensor<6x10xf32>
    %l = train.softmax_cross_entropy_loss %logits, %labels : tensor<6x10xf32>, tensor<6xi64>
    return %l : tensor<f32>
  }
}

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
module {
  train.param @wte : tensor<10x4xf32> at 0
  train.param @"ln.scale" : tensor<4xf32> at 160
  train.param @"ln.bias" : tensor<4xf32> at 176
  func.func @tied(%ids: tensor<6xi64>, %labels: tensor<6xi64>) -> tensor<f32> {
    %e = train.param_value @wte : tensor<10x4xf32>
    %s = train.param_value @"ln.scale" : tensor<4xf32>
    %b = train.param_value @"ln.bias" : tensor<4xf32>
    %x = train.gather %e, %ids : tensor<10x4xf32>, tensor<6xi64> -> tensor<6x4xf32>
    %t = train.tanh %x : tensor<6x4xf32>
    %n = train.layer_norm %t, %s, %b : tensor<6x4xf32>, tensor<4xf32>, tensor<4xf32>
    %et = train.transpose %e, [1, 0] : tensor<10x4xf32> -> tensor<4x10xf32>
    %logits = train.matmul %n, %et : tensor<6x4xf32>, tensor<4x10xf32> -> tensor<6x10xf32>
    %l = train.softmax_cross_entropy_loss %logits, %labels : tensor<6x10xf32>, tensor<6xi64>
    return %l : tensor<f32>
  }
}

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
module {
  train.param @w1 : tensor<4x8xf32> at 0
  train.param @b1 : tensor<8xf32> at 128
  train.param @w2 : tensor<8x3xf32> at 160
  train.param @b2 : tensor<3xf32> at 256
  func.func @mlp(%x: tensor<2x2x4xf32>, %y: tensor<4xi64>) -> tensor<f32> {
    %flat = train.reshape %x : tensor<2x2x4xf32> -> tensor<4x4xf32>
    %w1 = train.param_value @w1 : tensor<4x8xf32>
    %b1 = train.param_value @b1 : tensor<8xf32>
    %h = train.linear %flat, %w1, %b1 : tensor<4x4xf32>, tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
    %c = train.constant dense<0.5> : tensor<f32>
    %hs = train.mul %h, %c : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
    %a = train.relu %hs : tensor<4x8xf32>
    %w2 = train.param_value @w2 : tensor<8x3xf32>
    %b2 = train.param_value @b2 : tensor<3xf32>
    %o = train.linear %a, %w2, %b2 : tensor<4x8xf32>, tensor<8x3xf32>, tensor<3xf32> -> tensor<4x3xf32>
    %l = train.softmax_cross_entropy_loss %o, %y : tensor<4x3xf32>, tensor<4xi64>
    return %l : tensor<f32>
  }
}

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
module {
  train.param @"attn.q.weight" : tensor<4x4xf32> at 0
  train.param @"attn.k.weight" : tensor<4x4xf32> at 64
  train.param @"proj.weight" : tensor<4x3xf32> at 128
  func.func @parallel(%x: tensor<2x4xf32>, %y: tensor<2xi64>) -> tensor<f32> {
    %wq = train.param_value @"attn.q.weight" : tensor<4x4xf32>
    %wk = train.param_value @"attn.k.weight" : tensor<4x4xf32>
    %wp = train.param_value @"proj.weight" : tensor<4x3xf32>
    %q = train.linear %x, %wq : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
    %k = train.linear %x, %wk : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
    %qk = train.mul %q, %k : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
    %o = train.linear %qk, %wp : tensor<2x4xf32>, tensor<4x3xf32> -> tensor<2x3xf32>
    %l = train.softmax_cross_entropy_loss %o, %y : tensor<2x3xf32>, tensor<2xi64>
    return %l : tensor<f32>
  }
}

// -----

// A block's parameter read after a later block's output: no monotone order.
module {
  train.param @"blocks.0.a" : tensor<4x4xf32> at 0
  train.param @"blocks.1.b" : tensor<4x4xf32> at 64
  train.param @"blocks.0.c" : tensor<4x3xf32> at 128
  func.func @out_of_order(%x: tensor<2x4xf32>, %y: tensor<2xi64>) -> tensor<f32> {
    %a = train.param_value @"blocks.0.a" : tensor<4x4xf32>
    %b = train.param_value @"blocks.1.b" : tensor<4x4xf32>
    %c = train.param_value @"blocks.0.c" : tensor<4x3xf32>
    %h0 = train.linear %x, %a : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
    // expected-note @+1 {{the value of layer 1 is computed here}}
    %h1 = train.linear %h0, %b : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
    // expected-error @+1 {{train-partition-layers: layers are not monotone in forward order: this op reads @blocks.0.c of layer 0 ('blocks.0') and consumes a value of layer 1 ('blocks.1')}}
    %h2 = train.linear %h1, %c : tensor<2x4xf32>, tensor<4x3xf32> -> tensor<2x3xf32>
    %l = train.softmax_cross_entropy_loss %h2, %y : tensor<2x3xf32>, tensor<2xi64>
    return %l : tensor<f32>
  }
}

// -----

// One step function per module.
module {
  train.param @p : tensor<3xf32> at 0
  train.param @q : tensor<3xf32> at 12
  func.func @first() -> tensor<f32> {
    %p = train.param_value @p : tensor<3xf32>
    %l = train.reduce_sum %p, [] {keepdims = false} : tensor<3xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
  // expected-error @+1 {{train-partition-layers: expects one step function reading parameters; found @first and @second}}
  func.func @second() -> tensor<f32> {
    %p = train.param_value @q : tensor<3xf32>
    %l = train.reduce_sum %p, [] {keepdims = false} : tensor<3xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}
