// RUN: spillway-opt %s -split-input-file -verify-diagnostics --train-autodiff | FileCheck %s

module attributes {train.weights = "m.weights.bin"} {
  train.param @"fc.weight" : tensor<4x3xf32> at 0
  train.param @"fc.bias" : tensor<3xf32> at 48
  func.func @mlp(%x: tensor<8x4xf32> {train.name = "x"}, %y: tensor<8xi64> {train.name = "y"}) -> tensor<f32> {
    %w = train.param_value @"fc.weight" : tensor<4x3xf32>
    %b = train.param_value @"fc.bias" : tensor<3xf32>
    %h = train.matmul %x, %w : tensor<8x4xf32>, tensor<4x3xf32> -> tensor<8x3xf32>
    %z = train.add %h, %b : tensor<8x3xf32>, tensor<3xf32> -> tensor<8x3xf32>
    %r = train.relu %z : tensor<8x3xf32>
    %l = train.softmax_cross_entropy_loss %r, %y : tensor<8x3xf32>, tensor<8xi64>
    return %l : tensor<f32>
  }
}

// The MLP: softmax cross-entropy, relu, the bias (broadcast along the batch)
// and the weight (only its own adjoint; the input x gets none).
// CHECK-LABEL: func.func @mlp
// CHECK-SAME:    (%[[X:.*]]: tensor<8x4xf32> {{.*}}, %[[Y:.*]]: tensor<8xi64> {{.*}})
// CHECK:         %[[W:.*]] = train.param_value @fc.weight
// CHECK:         %[[Z:.*]] = train.add
// CHECK:         %[[R:.*]] = train.relu %[[Z]]
// CHECK:         %[[L:.*]] = train.softmax_cross_entropy_loss %[[R]], %[[Y]]
// CHECK-NEXT:    %[[SEED:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[DR:.*]] = train.softmax_cross_entropy_loss_grad %[[R]], %[[Y]], %[[SEED]] : tensor<8x3xf32>, tensor<8xi64>, tensor<f32>
// CHECK-NEXT:    %[[DZ:.*]] = train.relu_grad %[[Z]], %[[DR]] : tensor<8x3xf32>
// CHECK-NEXT:    %[[DB:.*]] = train.sum_to_shape %[[DZ]] : tensor<8x3xf32> -> tensor<3xf32>
// CHECK-NEXT:    %[[XT:.*]] = train.transpose %[[X]], [1, 0] : tensor<8x4xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    %[[DW:.*]] = train.matmul %[[XT]], %[[DZ]] : tensor<4x8xf32>, tensor<8x3xf32> -> tensor<4x3xf32>
// CHECK-NEXT:    train.param_grad @fc.weight, %[[DW]] : tensor<4x3xf32>
// CHECK-NEXT:    train.param_grad @fc.bias, %[[DB]] : tensor<3xf32>
// CHECK-NEXT:    return %[[L]] : tensor<f32>

// -----

module {
  train.param @a : tensor<2x3xf32> at 0
  train.param @b : tensor<1x3xf32> at 24
  func.func @add_sub_broadcast() -> tensor<f32> {
    %a = train.param_value @a : tensor<2x3xf32>
    %b = train.param_value @b : tensor<1x3xf32>
    %s = train.add %a, %b : tensor<2x3xf32>, tensor<1x3xf32> -> tensor<2x3xf32>
    %d = train.sub %s, %b : tensor<2x3xf32>, tensor<1x3xf32> -> tensor<2x3xf32>
    %l = train.reduce_sum %d, [] {keepdims = false} : tensor<2x3xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// y = sum((a + b) - b): sum over all axes without keepdims seeds a rank-0 dy
// that is reshaped and broadcast back; b's two adjoints are summed to its
// shape and add up (to zero).
// CHECK-LABEL: func.func @add_sub_broadcast
// CHECK:         %[[SEED:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[R:.*]] = train.reshape %[[SEED]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT:    %[[DY:.*]] = train.broadcast_to %[[R]] : tensor<1x1xf32> -> tensor<2x3xf32>
// CHECK-NEXT:    %[[S1:.*]] = train.sum_to_shape %[[DY]] : tensor<2x3xf32> -> tensor<1x3xf32>
// CHECK-NEXT:    %[[N:.*]] = train.neg %[[S1]] : tensor<1x3xf32>
// CHECK-NEXT:    %[[S2:.*]] = train.sum_to_shape %[[DY]] : tensor<2x3xf32> -> tensor<1x3xf32>
// CHECK-NEXT:    %[[DB:.*]] = train.add %[[N]], %[[S2]]
// CHECK-NEXT:    train.param_grad @a, %[[DY]] : tensor<2x3xf32>
// CHECK-NEXT:    train.param_grad @b, %[[DB]] : tensor<1x3xf32>

// -----

module {
  train.param @w : tensor<3xf32> at 0
  func.func @mul_inactive(%x: tensor<2x3xf32>) -> tensor<f32> {
    %w = train.param_value @w : tensor<3xf32>
    %r = train.relu %x : tensor<2x3xf32>
    %m = train.mul %r, %w : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
    %l = train.reduce_sum %m, [] {keepdims = false} : tensor<2x3xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// Only the parameter side of a product is differentiated; relu(x) is not on a
// path from a parameter, so it gets no relu_grad.
// CHECK-LABEL: func.func @mul_inactive
// CHECK:         %[[RX:.*]] = train.relu
// CHECK:         %[[DY:.*]] = train.broadcast_to
// CHECK-NEXT:    %[[P:.*]] = train.mul %[[DY]], %[[RX]] : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
// CHECK-NEXT:    %[[DW:.*]] = train.sum_to_shape %[[P]] : tensor<2x3xf32> -> tensor<3xf32>
// CHECK-NEXT:    train.param_grad @w, %[[DW]] : tensor<3xf32>
// CHECK-NOT:     relu_grad

// -----

module {
  train.param @a : tensor<2x3xf32> at 0
  train.param @b : tensor<3xf32> at 24
  func.func @mul_div() -> tensor<f32> {
    %a = train.param_value @a : tensor<2x3xf32>
    %b = train.param_value @b : tensor<3xf32>
    %m = train.mul %a, %b : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
    %q = train.div %m, %b : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
    %l = train.reduce_sum %q, [] {keepdims = false} : tensor<2x3xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// q = (a * b) / b: dm = dy / b, db = -sum(dy * q / b) + sum(dm * a).
// CHECK-LABEL: func.func @mul_div
// CHECK:         %[[A:.*]] = train.param_value @a
// CHECK-NEXT:    %[[B:.*]] = train.param_value @b
// CHECK-NEXT:    %[[M:.*]] = train.mul %[[A]], %[[B]]
// CHECK-NEXT:    %[[Q:.*]] = train.div %[[M]], %[[B]]
// CHECK:         %[[DY:.*]] = train.broadcast_to
// CHECK-NEXT:    %[[DM:.*]] = train.div %[[DY]], %[[B]] : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
// CHECK-NEXT:    %[[T:.*]] = train.mul %[[DY]], %[[Q]]
// CHECK-NEXT:    %[[T2:.*]] = train.div %[[T]], %[[B]]
// CHECK-NEXT:    %[[S:.*]] = train.sum_to_shape %[[T2]] : tensor<2x3xf32> -> tensor<3xf32>
// CHECK-NEXT:    %[[DB1:.*]] = train.neg %[[S]] : tensor<3xf32>
// CHECK-NEXT:    %[[DA:.*]] = train.mul %[[DM]], %[[B]] : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
// CHECK-NEXT:    %[[U:.*]] = train.mul %[[DM]], %[[A]]
// CHECK-NEXT:    %[[DB2:.*]] = train.sum_to_shape %[[U]] : tensor<2x3xf32> -> tensor<3xf32>
// CHECK-NEXT:    %[[DB:.*]] = train.add %[[DB1]], %[[DB2]]
// CHECK-NEXT:    train.param_grad @a, %[[DA]]
// CHECK-NEXT:    train.param_grad @b, %[[DB]]

// -----

module {
  train.param @p : tensor<2x3xf32> at 0
  func.func @unary() -> tensor<f32> {
    %p = train.param_value @p : tensor<2x3xf32>
    %n = train.neg %p : tensor<2x3xf32>
    %t = train.tanh %n : tensor<2x3xf32>
    %g = train.gelu %t {approximate = "tanh"} : tensor<2x3xf32>
    %s = train.softmax %g {axis = 0 : si64} : tensor<2x3xf32>
    %l = train.reduce_sum %s, [] {keepdims = false} : tensor<2x3xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// softmax_grad and tanh_grad take the op's output, gelu_grad its input.
// CHECK-LABEL: func.func @unary
// CHECK:         %[[T:.*]] = train.tanh
// CHECK-NEXT:    %[[G:.*]] = train.gelu
// CHECK-NEXT:    %[[S:.*]] = train.softmax
// CHECK:         %[[DY:.*]] = train.broadcast_to
// CHECK-NEXT:    %[[DG:.*]] = train.softmax_grad %[[S]], %[[DY]] {axis = 0 : si64} : tensor<2x3xf32>
// CHECK-NEXT:    %[[DT:.*]] = train.gelu_grad %[[T]], %[[DG]] {approximate = "tanh"} : tensor<2x3xf32>
// CHECK-NEXT:    %[[DN:.*]] = train.tanh_grad %[[T]], %[[DT]] : tensor<2x3xf32>
// CHECK-NEXT:    %[[DP:.*]] = train.neg %[[DN]] : tensor<2x3xf32>
// CHECK-NEXT:    train.param_grad @p, %[[DP]]

// -----

module {
  train.param @a : tensor<4x2xf32> at 0
  train.param @b : tensor<3x4xf32> at 32
  train.param @c : tensor<3xf32> at 80
  func.func @gemm_trans() -> tensor<f32> {
    %a = train.param_value @a : tensor<4x2xf32>
    %b = train.param_value @b : tensor<3x4xf32>
    %c = train.param_value @c : tensor<3xf32>
    %y = train.gemm %a, %b, %c {alpha = 5.000000e-01 : f32, beta = 2.000000e+00 : f32, transA = true, transB = true} : tensor<4x2xf32>, tensor<3x4xf32>, tensor<3xf32> -> tensor<2x3xf32>
    %l = train.reduce_sum %y, [] {keepdims = false} : tensor<2x3xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// y = 0.5 A^T B^T + 2 C: dA = (0.5 G B)^T = 0.5 B^T G^T,
// dB = (0.5 A G)^T = 0.5 G^T A^T, dC = 2 sum_to_shape(G).
// CHECK-LABEL: func.func @gemm_trans
// CHECK:         %[[A:.*]] = train.param_value @a
// CHECK-NEXT:    %[[B:.*]] = train.param_value @b
// CHECK:         %[[G:.*]] = train.broadcast_to
// CHECK-NEXT:    %[[DA:.*]] = train.gemm %[[B]], %[[G]] {alpha = 5.000000e-01 : f32, transA = true, transB = true} : tensor<3x4xf32>, tensor<2x3xf32> -> tensor<4x2xf32>
// CHECK-NEXT:    %[[DB:.*]] = train.gemm %[[G]], %[[A]] {alpha = 5.000000e-01 : f32, transA = true, transB = true} : tensor<2x3xf32>, tensor<4x2xf32> -> tensor<3x4xf32>
// CHECK-NEXT:    %[[S:.*]] = train.sum_to_shape %[[G]] : tensor<2x3xf32> -> tensor<3xf32>
// CHECK-NEXT:    %[[BETA:.*]] = train.constant dense<2.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[DC:.*]] = train.mul %[[S]], %[[BETA]] : tensor<3xf32>, tensor<f32> -> tensor<3xf32>
// CHECK-NEXT:    train.param_grad @a, %[[DA]] : tensor<4x2xf32>
// CHECK-NEXT:    train.param_grad @b, %[[DB]] : tensor<3x4xf32>
// CHECK-NEXT:    train.param_grad @c, %[[DC]] : tensor<3xf32>

// -----

module {
  train.param @a : tensor<2x4xf32> at 0
  train.param @b : tensor<4x3xf32> at 32
  func.func @gemm_plain() -> tensor<f32> {
    %a = train.param_value @a : tensor<2x4xf32>
    %b = train.param_value @b : tensor<4x3xf32>
    %y = train.gemm %a, %b : tensor<2x4xf32>, tensor<4x3xf32> -> tensor<2x3xf32>
    %l = train.reduce_sum %y, [] {keepdims = false} : tensor<2x3xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// y = A B: dA = G B^T, dB = A^T G, no scaling.
// CHECK-LABEL: func.func @gemm_plain
// CHECK:         %[[A:.*]] = train.param_value @a
// CHECK-NEXT:    %[[B:.*]] = train.param_value @b
// CHECK:         %[[G:.*]] = train.broadcast_to
// CHECK-NEXT:    %[[DA:.*]] = train.gemm %[[G]], %[[B]] {transB = true} : tensor<2x3xf32>, tensor<4x3xf32> -> tensor<2x4xf32>
// CHECK-NEXT:    %[[DB:.*]] = train.gemm %[[A]], %[[G]] {transA = true} : tensor<2x4xf32>, tensor<2x3xf32> -> tensor<4x3xf32>
// CHECK-NEXT:    train.param_grad @a, %[[DA]]
// CHECK-NEXT:    train.param_grad @b, %[[DB]]

// -----

module {
  train.param @a : tensor<2x5x4xf32> at 0
  train.param @b : tensor<4x3xf32> at 160
  func.func @matmul_batch() -> tensor<f32> {
    %a = train.param_value @a : tensor<2x5x4xf32>
    %b = train.param_value @b : tensor<4x3xf32>
    %y = train.matmul %a, %b : tensor<2x5x4xf32>, tensor<4x3xf32> -> tensor<2x5x3xf32>
    %l = train.reduce_sum %y, [] {keepdims = false} : tensor<2x5x3xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// [2,5,4] x [4,3]: the broadcast rhs gets a batched a^T dy summed over the
// batch; the lhs adjoint already has its shape.
// CHECK-LABEL: func.func @matmul_batch
// CHECK:         %[[A:.*]] = train.param_value @a
// CHECK-NEXT:    %[[B:.*]] = train.param_value @b
// CHECK:         %[[G:.*]] = train.broadcast_to %{{.*}} : tensor<1x1x1xf32> -> tensor<2x5x3xf32>
// CHECK-NEXT:    %[[BT:.*]] = train.transpose %[[B]], [1, 0] : tensor<4x3xf32> -> tensor<3x4xf32>
// CHECK-NEXT:    %[[DA:.*]] = train.matmul %[[G]], %[[BT]] : tensor<2x5x3xf32>, tensor<3x4xf32> -> tensor<2x5x4xf32>
// CHECK-NEXT:    %[[AT:.*]] = train.transpose %[[A]], [0, 2, 1] : tensor<2x5x4xf32> -> tensor<2x4x5xf32>
// CHECK-NEXT:    %[[P:.*]] = train.matmul %[[AT]], %[[G]] : tensor<2x4x5xf32>, tensor<2x5x3xf32> -> tensor<2x4x3xf32>
// CHECK-NEXT:    %[[DB:.*]] = train.sum_to_shape %[[P]] : tensor<2x4x3xf32> -> tensor<4x3xf32>
// CHECK-NEXT:    train.param_grad @a, %[[DA]] : tensor<2x5x4xf32>
// CHECK-NEXT:    train.param_grad @b, %[[DB]] : tensor<4x3xf32>

// -----

module {
  train.param @scale : tensor<4xf32> at 0
  train.param @bias : tensor<4xf32> at 16
  train.param @scale2 : tensor<4xf32> at 32
  func.func @layer_norm(%x: tensor<2x4xf32>) -> tensor<f32> {
    %s = train.param_value @scale : tensor<4xf32>
    %b = train.param_value @bias : tensor<4xf32>
    %s2 = train.param_value @scale2 : tensor<4xf32>
    %y = train.layer_norm %x, %s, %b {epsilon = 1.000000e-03 : f32} : tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>
    %z = train.layer_norm %y, %s2 {axis = 1 : si64} : tensor<2x4xf32>, tensor<4xf32>
    %l = train.reduce_sum %z, [] {keepdims = false} : tensor<2x4xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// With and without bias; attributes carry over to layer_norm_grad.
// CHECK-LABEL: func.func @layer_norm
// CHECK-SAME:    (%[[X:.*]]: tensor<2x4xf32>)
// CHECK:         %[[S:.*]] = train.param_value @scale
// CHECK:         %[[S2:.*]] = train.param_value @scale2
// CHECK-NEXT:    %[[Y:.*]] = train.layer_norm %[[X]], %[[S]], %{{.*}} {epsilon = 1.000000e-03 : f32}
// CHECK:         %[[G:.*]] = train.broadcast_to
// CHECK-NEXT:    %[[DY:.*]], %[[DS2:.*]], %{{.*}} = train.layer_norm_grad %[[Y]], %[[S2]], %[[G]] {axis = 1 : si64} : tensor<2x4xf32>, tensor<4xf32>
// CHECK-NEXT:    %{{.*}}, %[[DS:.*]], %[[DB:.*]] = train.layer_norm_grad %[[X]], %[[S]], %[[DY]] {epsilon = 1.000000e-03 : f32} : tensor<2x4xf32>, tensor<4xf32>
// CHECK-NEXT:    train.param_grad @scale, %[[DS]]
// CHECK-NEXT:    train.param_grad @bias, %[[DB]]
// CHECK-NEXT:    train.param_grad @scale2, %[[DS2]]

// -----

module {
  train.param @emb : tensor<10x4xf32> at 0
  func.func @gather_reshape_transpose(%ids: tensor<2x3xi64>) -> tensor<f32> {
    %e = train.param_value @emb : tensor<10x4xf32>
    %g = train.gather %e, %ids : tensor<10x4xf32>, tensor<2x3xi64> -> tensor<2x3x4xf32>
    %r = train.reshape %g : tensor<2x3x4xf32> -> tensor<6x4xf32>
    %t = train.transpose %r, [1, 0] : tensor<6x4xf32> -> tensor<4x6xf32>
    %l = train.reduce_sum %t, [] {keepdims = false} : tensor<4x6xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// CHECK-LABEL: func.func @gather_reshape_transpose
// CHECK-SAME:    (%[[IDS:.*]]: tensor<2x3xi64>)
// CHECK:         %[[G:.*]] = train.broadcast_to %{{.*}} : tensor<1x1xf32> -> tensor<4x6xf32>
// CHECK-NEXT:    %[[T:.*]] = train.transpose %[[G]], [1, 0] : tensor<4x6xf32> -> tensor<6x4xf32>
// CHECK-NEXT:    %[[R:.*]] = train.reshape %[[T]] : tensor<6x4xf32> -> tensor<2x3x4xf32>
// CHECK-NEXT:    %[[DE:.*]] = train.gather_grad %[[IDS]], %[[R]] : tensor<2x3xi64>, tensor<2x3x4xf32> -> tensor<10x4xf32>
// CHECK-NEXT:    train.param_grad @emb, %[[DE]] : tensor<10x4xf32>

// -----

module {
  train.param @p : tensor<2x3x4xf32> at 0
  func.func @reductions() -> tensor<f32> {
    %p = train.param_value @p : tensor<2x3x4xf32>
    %t = train.transpose %p, [2, 0, 1] : tensor<2x3x4xf32> -> tensor<4x2x3xf32>
    %s = train.reduce_sum %t, [1] : tensor<4x2x3xf32> -> tensor<4x1x3xf32>
    %m = train.reduce_mean %s, [0, -1] {keepdims = false} : tensor<4x1x3xf32> -> tensor<1xf32>
    %l = train.reduce_mean %m, [] {keepdims = false} : tensor<1xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// reduce_mean over [0, -1] of [4,1,3] scales by 1/12 before broadcasting back;
// reduce_mean over a single element does not scale; reduce_sum with keepdims
// needs no reshape; transpose's adjoint uses the inverse permutation.
// CHECK-LABEL: func.func @reductions
// CHECK:         %[[SEED:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[R1:.*]] = train.reshape %[[SEED]] : tensor<f32> -> tensor<1xf32>
// CHECK-NEXT:    %[[K:.*]] = train.constant dense<0.0833333358> : tensor<f32>
// CHECK-NEXT:    %[[M:.*]] = train.mul %[[R1]], %[[K]] : tensor<1xf32>, tensor<f32> -> tensor<1xf32>
// CHECK-NEXT:    %[[R2:.*]] = train.reshape %[[M]] : tensor<1xf32> -> tensor<1x1x1xf32>
// CHECK-NEXT:    %[[B1:.*]] = train.broadcast_to %[[R2]] : tensor<1x1x1xf32> -> tensor<4x1x3xf32>
// CHECK-NEXT:    %[[B2:.*]] = train.broadcast_to %[[B1]] : tensor<4x1x3xf32> -> tensor<4x2x3xf32>
// CHECK-NEXT:    %[[DP:.*]] = train.transpose %[[B2]], [1, 2, 0] : tensor<4x2x3xf32> -> tensor<2x3x4xf32>
// CHECK-NEXT:    train.param_grad @p, %[[DP]] : tensor<2x3x4xf32>

// -----

module {
  train.param @unused : tensor<3xf32> at 0
  train.param @w : tensor<3xf32> at 12
  train.param @dead : tensor<3xf32> at 24
  train.param @never_read : tensor<3xf32> at 36
  func.func @reads(%x: tensor<3xf32>) -> tensor<f32> {
    %d = train.param_value @dead : tensor<3xf32>
    %w1 = train.param_value @w : tensor<3xf32>
    %u = train.param_value @unused : tensor<3xf32>
    %w2 = train.param_value @w : tensor<3xf32>
    %dd = train.relu %d : tensor<3xf32>
    %m = train.mul %w1, %w2 : tensor<3xf32>, tensor<3xf32> -> tensor<3xf32>
    %e = train.broadcast_to %m : tensor<3xf32> -> tensor<2x3xf32>
    %l = train.reduce_sum %e, [] {keepdims = false} : tensor<2x3xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// Gradients follow the declaration order of train.param, not the read order;
// two reads of @w add up; @unused and @dead (read, but not reaching the loss)
// and @never_read get no gradient (torch: .grad is None, AdamW skips them).
// broadcast_to's adjoint is sum_to_shape.
// CHECK-LABEL: func.func @reads
// CHECK:         %[[W1:.*]] = train.param_value @w
// CHECK:         %[[W2:.*]] = train.param_value @w
// CHECK:         %[[DY:.*]] = train.broadcast_to %{{.*}} : tensor<1x1xf32> -> tensor<2x3xf32>
// CHECK-NEXT:    %[[DM:.*]] = train.sum_to_shape %[[DY]] : tensor<2x3xf32> -> tensor<3xf32>
// CHECK-NEXT:    %[[G1:.*]] = train.mul %[[DM]], %[[W2]]
// CHECK-NEXT:    %[[G2:.*]] = train.mul %[[DM]], %[[W1]]
// CHECK-NEXT:    %[[GW:.*]] = train.add %[[G1]], %[[G2]]
// CHECK-NEXT:    train.param_grad @w, %[[GW]]
// CHECK-NEXT:    return
// CHECK-NOT:     relu_grad
// CHECK-NOT:     param_grad

// -----

module {
  train.param @p : tensor<3xf32> at 0
  func.func @two_results() -> (tensor<f32>, tensor<f32>) {
    %p = train.param_value @p : tensor<3xf32>
    %l = train.reduce_sum %p, [] {keepdims = false} : tensor<3xf32> -> tensor<f32>
    // expected-error @+1 {{'func.return' op train-autodiff expects the function to return one scalar f32 loss, got 'tensor<f32>', 'tensor<f32>'}}
    return %l, %l : tensor<f32>, tensor<f32>
  }
}

// -----

module {
  train.param @p : tensor<3xf32> at 0
  func.func @not_scalar() -> tensor<3xf32> {
    %p = train.param_value @p : tensor<3xf32>
    // expected-error @+1 {{train-autodiff expects the function to return one scalar f32 loss, got 'tensor<3xf32>'}}
    return %p : tensor<3xf32>
  }
}

// -----

module {
  train.param @p : tensor<3xf32> at 0
  func.func @no_rule() -> tensor<f32> {
    %p = train.param_value @p : tensor<3xf32>
    // expected-error @+1 {{'train.relu_grad' op has no gradient rule; train-autodiff cannot differentiate through it}}
    %g = train.relu_grad %p, %p : tensor<3xf32>
    %l = train.reduce_sum %g, [] {keepdims = false} : tensor<3xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

module {
  func.func @no_result() {
    // expected-error @+1 {{train-autodiff expects the function to return one scalar f32 loss, got no value}}
    return
  }
}

// -----

module {
  train.param @a : tensor<2x3xf32> at 0
  train.param @e : tensor<3xf32> at 24
  func.func @pow(%x: tensor<2x3xf32>) -> tensor<f32> {
    %a = train.param_value @a : tensor<2x3xf32>
    %e = train.param_value @e : tensor<3xf32>
    %two = train.constant dense<2.0> : tensor<f32>
    %sq = train.pow %a, %two : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
    %three = train.constant dense<3.0> : tensor<3xf32>
    %cu = train.pow %sq, %three : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
    %p = train.pow %x, %e : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
    %s = train.add %cu, %p : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
    %l = train.reduce_sum %s, [] {keepdims = false} : tensor<2x3xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// y = x^e with e active: de = sum_to_shape(dy * y * log x), 0 where x = 0
// and e >= 0 (as torch), and x (inactive) gets nothing. Constant exponents fold: d(s^3) = dy * 3 * s^2 with a
// constant 2, and d(a^2) = dy * 2 * a with no pow at all; no log either.
// CHECK-LABEL: func.func @pow
// CHECK-SAME:    (%[[X:.*]]: tensor<2x3xf32>)
// CHECK:         %[[A:.*]] = train.param_value @a
// CHECK:         %[[TWO:.*]] = train.constant dense<2.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[SQ:.*]] = train.pow %[[A]], %[[TWO]]
// CHECK-NEXT:    %[[THREE:.*]] = train.constant dense<3.000000e+00> : tensor<3xf32>
// CHECK-NEXT:    train.pow %[[SQ]], %[[THREE]]
// CHECK-NEXT:    %[[P:.*]] = train.pow %[[X]], %{{.*}} : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
// CHECK:         %[[DY:.*]] = train.broadcast_to
// CHECK-NEXT:    %[[T:.*]] = train.mul %[[DY]], %[[P]]
// CHECK-NEXT:    %[[LOG:.*]] = train.log %[[X]] : tensor<2x3xf32>
// CHECK-NEXT:    %[[T2:.*]] = train.mul %[[T]], %[[LOG]]
// CHECK-NEXT:    %[[Z:.*]] = train.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[NEG:.*]] = train.less %{{.*}}, %[[Z]] : tensor<3xf32>, tensor<f32> -> tensor<3xi1>
// CHECK-NEXT:    %[[KEPT:.*]] = train.where %[[NEG]], %[[T2]], %[[Z]]
// CHECK-NEXT:    %[[AZ:.*]] = train.equal %[[X]], %[[Z]] : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xi1>
// CHECK-NEXT:    %[[T3:.*]] = train.where %[[AZ]], %[[KEPT]], %[[T2]]
// CHECK-NEXT:    %[[DE:.*]] = train.sum_to_shape %[[T3]] : tensor<2x3xf32> -> tensor<3xf32>
// CHECK-NEXT:    %[[E1:.*]] = train.constant dense<2.000000e+00> : tensor<3xf32>
// CHECK-NEXT:    %[[SQ2:.*]] = train.pow %[[SQ]], %[[E1]]
// CHECK-NEXT:    %[[U:.*]] = train.mul %[[DY]], %[[THREE]]
// CHECK-NEXT:    %[[DSQ:.*]] = train.mul %[[U]], %[[SQ2]]
// CHECK-NEXT:    %[[V:.*]] = train.mul %[[DSQ]], %[[TWO]]
// CHECK-NEXT:    %[[DA:.*]] = train.mul %[[V]], %[[A]]
// CHECK-NEXT:    train.param_grad @a, %[[DA]] : tensor<2x3xf32>
// CHECK-NEXT:    train.param_grad @e, %[[DE]] : tensor<3xf32>

// -----

module {
  train.param @p : tensor<2x3xf32> at 0
  func.func @unary_math() -> tensor<f32> {
    %p = train.param_value @p : tensor<2x3xf32>
    %0 = train.exp %p : tensor<2x3xf32>
    %1 = train.log %0 : tensor<2x3xf32>
    %2 = train.sqrt %1 : tensor<2x3xf32>
    %3 = train.reciprocal %2 : tensor<2x3xf32>
    %4 = train.erf %3 : tensor<2x3xf32>
    %5 = train.sigmoid %4 : tensor<2x3xf32>
    %6 = train.cos %5 : tensor<2x3xf32>
    %7 = train.sin %6 : tensor<2x3xf32>
    %8 = train.silu %7 : tensor<2x3xf32>
    %l = train.reduce_sum %8, [] {keepdims = false} : tensor<2x3xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// Elementwise rules, last op first: silu_grad(x); sin: dy cos x; cos:
// -dy sin x; sigmoid: dy y (1 - y); erf: dy exp(-x^2) 2/sqrt(pi);
// reciprocal: -dy y y; sqrt: dy 0.5 / y; log: dy / x; exp: dy y.
// CHECK-LABEL: func.func @unary_math
// CHECK:         %[[P:.*]] = train.param_value @p
// CHECK-NEXT:    %[[EXP:.*]] = train.exp %[[P]]
// CHECK-NEXT:    %[[LOG:.*]] = train.log %[[EXP]]
// CHECK-NEXT:    %[[SQRT:.*]] = train.sqrt %[[LOG]]
// CHECK-NEXT:    %[[REC:.*]] = train.reciprocal %[[SQRT]]
// CHECK-NEXT:    %[[ERF:.*]] = train.erf %[[REC]]
// CHECK-NEXT:    %[[SIG:.*]] = train.sigmoid %[[ERF]]
// CHECK-NEXT:    %[[COS:.*]] = train.cos %[[SIG]]
// CHECK-NEXT:    %[[SIN:.*]] = train.sin %[[COS]]
// CHECK-NEXT:    train.silu %[[SIN]]
// CHECK:         %[[DY:.*]] = train.broadcast_to
// CHECK-NEXT:    %[[D8:.*]] = train.silu_grad %[[SIN]], %[[DY]] : tensor<2x3xf32>
// CHECK-NEXT:    %[[C:.*]] = train.cos %[[COS]]
// CHECK-NEXT:    %[[D7:.*]] = train.mul %[[D8]], %[[C]]
// CHECK-NEXT:    %[[S:.*]] = train.sin %[[SIG]]
// CHECK-NEXT:    %[[M:.*]] = train.mul %[[D7]], %[[S]]
// CHECK-NEXT:    %[[D6:.*]] = train.neg %[[M]]
// CHECK-NEXT:    %[[ONE:.*]] = train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[OMY:.*]] = train.sub %[[ONE]], %[[SIG]] : tensor<f32>, tensor<2x3xf32> -> tensor<2x3xf32>
// CHECK-NEXT:    %[[YY:.*]] = train.mul %[[SIG]], %[[OMY]]
// CHECK-NEXT:    %[[D5:.*]] = train.mul %[[D6]], %[[YY]]
// CHECK-NEXT:    %[[XX:.*]] = train.mul %[[REC]], %[[REC]]
// CHECK-NEXT:    %[[NXX:.*]] = train.neg %[[XX]]
// CHECK-NEXT:    %[[G:.*]] = train.exp %[[NXX]]
// CHECK-NEXT:    %[[D4A:.*]] = train.mul %[[D5]], %[[G]]
// CHECK-NEXT:    %[[K:.*]] = train.constant dense<1.12837923> : tensor<f32>
// CHECK-NEXT:    %[[D4:.*]] = train.mul %[[D4A]], %[[K]]
// CHECK-NEXT:    %[[R1:.*]] = train.mul %[[D4]], %[[REC]]
// CHECK-NEXT:    %[[R2:.*]] = train.mul %[[R1]], %[[REC]]
// CHECK-NEXT:    %[[D3:.*]] = train.neg %[[R2]]
// CHECK-NEXT:    %[[HALF:.*]] = train.constant dense<5.000000e-01> : tensor<f32>
// CHECK-NEXT:    %[[H:.*]] = train.mul %[[D3]], %[[HALF]]
// CHECK-NEXT:    %[[D2:.*]] = train.div %[[H]], %[[SQRT]]
// CHECK-NEXT:    %[[D1:.*]] = train.div %[[D2]], %[[EXP]]
// CHECK-NEXT:    %[[D0:.*]] = train.mul %[[D1]], %[[EXP]]
// CHECK-NEXT:    train.param_grad @p, %[[D0]]

// -----

module {
  train.param @a : tensor<2x3xf32> at 0
  train.param @b : tensor<3xf32> at 24
  func.func @where_compare(%x: tensor<2x3xf32>) -> tensor<f32> {
    %a = train.param_value @a : tensor<2x3xf32>
    %b = train.param_value @b : tensor<3xf32>
    %c = train.greater %a, %x : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xi1>
    %w = train.where %c, %a, %b : tensor<2x3xi1>, tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
    %l = train.reduce_sum %w, [] {keepdims = false} : tensor<2x3xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// where: each branch gets dy where it was chosen and a (broadcast) zero
// elsewhere, summed to its shape; the comparison reading a parameter is no
// error and contributes nothing.
// CHECK-LABEL: func.func @where_compare
// CHECK:         %[[C:.*]] = train.greater
// CHECK:         %[[DY:.*]] = train.broadcast_to
// CHECK-NEXT:    %[[Z:.*]] = train.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[DA:.*]] = train.where %[[C]], %[[DY]], %[[Z]] : tensor<2x3xi1>, tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
// CHECK-NEXT:    %[[W:.*]] = train.where %[[C]], %[[Z]], %[[DY]] : tensor<2x3xi1>, tensor<f32>, tensor<2x3xf32> -> tensor<2x3xf32>
// CHECK-NEXT:    %[[DB:.*]] = train.sum_to_shape %[[W]] : tensor<2x3xf32> -> tensor<3xf32>
// CHECK-NEXT:    train.param_grad @a, %[[DA]] : tensor<2x3xf32>
// CHECK-NEXT:    train.param_grad @b, %[[DB]] : tensor<3xf32>

// -----

module {
  train.param @a : tensor<2x3xf32> at 0
  func.func @cast(%m: tensor<2x3xi1>) -> tensor<f32> {
    %a = train.param_value @a : tensor<2x3xf32>
    %i = train.cast %a : tensor<2x3xf32> -> tensor<2x3xi64>
    %f = train.cast %i : tensor<2x3xi64> -> tensor<2x3xf32>
    %mf = train.cast %m : tensor<2x3xi1> -> tensor<2x3xf32>
    %same = train.cast %a : tensor<2x3xf32> -> tensor<2x3xf32>
    %p = train.mul %same, %mf : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
    %s = train.add %p, %f : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
    %l = train.reduce_sum %s, [] {keepdims = false} : tensor<2x3xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// A float cast to i64 stops the gradient (no error); the f32 -> f32 cast
// passes dy through; the bool mask cast to f32 is a plain factor.
// CHECK-LABEL: func.func @cast
// CHECK:         %[[MF:.*]] = train.cast %{{.*}} : tensor<2x3xi1> -> tensor<2x3xf32>
// CHECK:         %[[DY:.*]] = train.broadcast_to
// CHECK-NEXT:    %[[DA:.*]] = train.mul %[[DY]], %[[MF]]
// CHECK-NEXT:    train.param_grad @a, %[[DA]] : tensor<2x3xf32>
// CHECK-NEXT:    return

// -----

// A value stored as bf16 and read twice: each read's adjoint comes back
// through its cast as bf16, the two are added in f32 and stored as bf16
// again (one rounding, as torch accumulates a bf16 tensor's gradient), and
// the f32 -> bf16 cast passes the sum back as f32.
module {
  train.param @a : tensor<2x3xf32> at 0
  func.func @bf16_storage() -> tensor<f32> {
    %a = train.param_value @a : tensor<2x3xf32>
    %s = train.cast %a : tensor<2x3xf32> -> tensor<2x3xbf16>
    %x = train.cast %s : tensor<2x3xbf16> -> tensor<2x3xf32>
    %y = train.cast %s : tensor<2x3xbf16> -> tensor<2x3xf32>
    %p = train.mul %x, %y : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
    %l = train.reduce_sum %p, [] {keepdims = false} : tensor<2x3xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}
// CHECK-LABEL: func.func @bf16_storage
// CHECK:         %[[X:[0-9]+]] = train.cast %[[S:[0-9]+]] : tensor<2x3xbf16> -> tensor<2x3xf32>
// CHECK:         %[[Y:[0-9]+]] = train.cast %[[S]] : tensor<2x3xbf16> -> tensor<2x3xf32>
// CHECK:         %[[ONES:[0-9]+]] = train.broadcast_to
// CHECK-DAG:     %[[DX:[0-9]+]] = train.mul %[[ONES]], %[[Y]]
// CHECK-DAG:     %[[DY:[0-9]+]] = train.mul %[[ONES]], %[[X]]
// CHECK-DAG:     %[[BX:[0-9]+]] = train.cast %[[DX]] : tensor<2x3xf32> -> tensor<2x3xbf16>
// CHECK-DAG:     %[[BY:[0-9]+]] = train.cast %[[DY]] : tensor<2x3xf32> -> tensor<2x3xbf16>
// CHECK-DAG:     %[[FX:[0-9]+]] = train.cast %[[BX]] : tensor<2x3xbf16> -> tensor<2x3xf32>
// CHECK-DAG:     %[[FY:[0-9]+]] = train.cast %[[BY]] : tensor<2x3xbf16> -> tensor<2x3xf32>
// CHECK:         %[[SUM:[0-9]+]] = train.add %[[FY]], %[[FX]] : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
// CHECK-NEXT:    %[[B:[0-9]+]] = train.cast %[[SUM]] : tensor<2x3xf32> -> tensor<2x3xbf16>
// CHECK-NEXT:    %[[G:[0-9]+]] = train.cast %[[B]] : tensor<2x3xbf16> -> tensor<2x3xf32>
// CHECK-NEXT:    train.param_grad @a, %[[G]] : tensor<2x3xf32>

// -----

module {
  train.param @p : tensor<2x3x4xf32> at 0
  func.func @reduce_max() -> tensor<f32> {
    %p = train.param_value @p : tensor<2x3x4xf32>
    %m = train.reduce_max %p, [0, -1] {keepdims = false} : tensor<2x3x4xf32> -> tensor<3xf32>
    %l = train.reduce_sum %m, [] {keepdims = false} : tensor<3xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// dy goes to the maxima, split among ties: mask = (x == y), dx = mask * dy /
// count(mask), all broadcast back from the keepdims shape [1, 3, 1].
// CHECK-LABEL: func.func @reduce_max
// CHECK:         %[[P:.*]] = train.param_value @p
// CHECK-NEXT:    %[[Y:.*]] = train.reduce_max %[[P]]
// CHECK:         %[[DY:.*]] = train.broadcast_to %{{.*}} : tensor<1xf32> -> tensor<3xf32>
// CHECK-NEXT:    %[[YK:.*]] = train.reshape %[[Y]] : tensor<3xf32> -> tensor<1x3x1xf32>
// CHECK-NEXT:    %[[YB:.*]] = train.broadcast_to %[[YK]] : tensor<1x3x1xf32> -> tensor<2x3x4xf32>
// CHECK-NEXT:    %[[EQ:.*]] = train.equal %[[P]], %[[YB]] : tensor<2x3x4xf32>, tensor<2x3x4xf32> -> tensor<2x3x4xi1>
// CHECK-NEXT:    %[[MASK:.*]] = train.cast %[[EQ]] : tensor<2x3x4xi1> -> tensor<2x3x4xf32>
// CHECK-NEXT:    %[[N:.*]] = train.reduce_sum %[[MASK]], [0, -1] : tensor<2x3x4xf32> -> tensor<1x3x1xf32>
// CHECK-NEXT:    %[[DK:.*]] = train.reshape %[[DY]] : tensor<3xf32> -> tensor<1x3x1xf32>
// CHECK-NEXT:    %[[DB:.*]] = train.broadcast_to %[[DK]] : tensor<1x3x1xf32> -> tensor<2x3x4xf32>
// CHECK-NEXT:    %[[G:.*]] = train.mul %[[MASK]], %[[DB]]
// CHECK-NEXT:    %[[NB:.*]] = train.broadcast_to %[[N]] : tensor<1x3x1xf32> -> tensor<2x3x4xf32>
// CHECK-NEXT:    %[[DP:.*]] = train.div %[[G]], %[[NB]]
// CHECK-NEXT:    train.param_grad @p, %[[DP]] : tensor<2x3x4xf32>

// -----

module {
  train.param @a : tensor<2x3xf32> at 0
  train.param @b : tensor<2x5xf32> at 24
  func.func @concat_slice(%x: tensor<2x2xf32>) -> tensor<f32> {
    %a = train.param_value @a : tensor<2x3xf32>
    %b = train.param_value @b : tensor<2x5xf32>
    %c = train.concat %a, %x, %b {axis = -1 : i64} : tensor<2x3xf32>, tensor<2x2xf32>, tensor<2x5xf32> -> tensor<2x10xf32>
    %s = train.slice %c {starts = array<i64: 1, 9>, steps = array<i64: 1, -2>} : tensor<2x10xf32> -> tensor<1x5xf32>
    %l = train.reduce_sum %s, [] {keepdims = false} : tensor<1x5xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// slice_grad scatters dy back (negative step included); concat hands each
// active input its slice of dy along the axis, skipping the inactive x.
// CHECK-LABEL: func.func @concat_slice
// CHECK:         %[[DY:.*]] = train.broadcast_to %{{.*}} : tensor<1x1xf32> -> tensor<1x5xf32>
// CHECK-NEXT:    %[[DC:.*]] = train.slice_grad %[[DY]] {starts = array<i64: 1, 9>, steps = array<i64: 1, -2>} : tensor<1x5xf32> -> tensor<2x10xf32>
// CHECK-NEXT:    %[[DA:.*]] = train.slice %[[DC]] {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : tensor<2x10xf32> -> tensor<2x3xf32>
// CHECK-NEXT:    %[[DB:.*]] = train.slice %[[DC]] {starts = array<i64: 0, 5>, steps = array<i64: 1, 1>} : tensor<2x10xf32> -> tensor<2x5xf32>
// CHECK-NEXT:    train.param_grad @a, %[[DA]] : tensor<2x3xf32>
// CHECK-NEXT:    train.param_grad @b, %[[DB]] : tensor<2x5xf32>

// -----

module {
  train.param @w : tensor<4x3xf32> at 0
  train.param @b : tensor<3xf32> at 48
  func.func @linear(%x: tensor<2x5x4xf32>) -> tensor<f32> {
    %w = train.param_value @w : tensor<4x3xf32>
    %b = train.param_value @b : tensor<3xf32>
    %y = train.linear %x, %w, %b : tensor<2x5x4xf32>, tensor<4x3xf32>, tensor<3xf32> -> tensor<2x5x3xf32>
    %l = train.reduce_sum %y, [] {keepdims = false} : tensor<2x5x3xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// dw sums over both batch dims as one [10, 4]^T x [10, 3] matmul; db sums dy
// to [3]; the graph input x gets nothing.
// CHECK-LABEL: func.func @linear
// CHECK-SAME:    (%[[X:.*]]: tensor<2x5x4xf32>)
// CHECK:         %[[DY:.*]] = train.broadcast_to %{{.*}} : tensor<1x1x1xf32> -> tensor<2x5x3xf32>
// CHECK-NEXT:    %[[DY2:.*]] = train.reshape %[[DY]] : tensor<2x5x3xf32> -> tensor<10x3xf32>
// CHECK-NEXT:    %[[X2:.*]] = train.reshape %[[X]] : tensor<2x5x4xf32> -> tensor<10x4xf32>
// CHECK-NEXT:    %[[XT:.*]] = train.transpose %[[X2]], [1, 0] : tensor<10x4xf32> -> tensor<4x10xf32>
// CHECK-NEXT:    %[[DW:.*]] = train.matmul %[[XT]], %[[DY2]] : tensor<4x10xf32>, tensor<10x3xf32> -> tensor<4x3xf32>
// CHECK-NEXT:    %[[DB:.*]] = train.sum_to_shape %[[DY]] : tensor<2x5x3xf32> -> tensor<3xf32>
// CHECK-NEXT:    train.param_grad @w, %[[DW]] : tensor<4x3xf32>
// CHECK-NEXT:    train.param_grad @b, %[[DB]] : tensor<3xf32>
// CHECK-NOT:     train.matmul

// -----

module {
  train.param @x : tensor<2x3x4xf32> at 0
  train.param @w : tensor<4x3xf32> at 96
  train.param @v : tensor<4xf32> at 144
  func.func @linear_dx() -> tensor<f32> {
    %x = train.param_value @x : tensor<2x3x4xf32>
    %w = train.param_value @w : tensor<4x3xf32>
    %v = train.param_value @v : tensor<4xf32>
    %y = train.linear %x, %w : tensor<2x3x4xf32>, tensor<4x3xf32> -> tensor<2x3x3xf32>
    %z = train.linear %v, %w : tensor<4xf32>, tensor<4x3xf32> -> tensor<3xf32>
    %s = train.add %y, %z : tensor<2x3x3xf32>, tensor<3xf32> -> tensor<2x3x3xf32>
    %l = train.reduce_sum %s, [] {keepdims = false} : tensor<2x3x3xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// dx = dy w^T: a batched matmul for rank >= 2, through [1, N] for a vector.
// CHECK-LABEL: func.func @linear_dx
// CHECK:         %[[W:.*]] = train.param_value @w
// CHECK:         %[[DY:.*]] = train.broadcast_to %{{.*}} : tensor<1x1x1xf32> -> tensor<2x3x3xf32>
// CHECK-NEXT:    %[[DZ:.*]] = train.sum_to_shape %[[DY]] : tensor<2x3x3xf32> -> tensor<3xf32>
// CHECK-NEXT:    %[[WT:.*]] = train.transpose %[[W]], [1, 0] : tensor<4x3xf32> -> tensor<3x4xf32>
// CHECK-NEXT:    %[[DZ2:.*]] = train.reshape %[[DZ]] : tensor<3xf32> -> tensor<1x3xf32>
// CHECK-NEXT:    %[[DV2:.*]] = train.matmul %[[DZ2]], %[[WT]] : tensor<1x3xf32>, tensor<3x4xf32> -> tensor<1x4xf32>
// CHECK-NEXT:    %[[DV:.*]] = train.reshape %[[DV2]] : tensor<1x4xf32> -> tensor<4xf32>
// CHECK:         %[[WT2:.*]] = train.transpose %[[W]], [1, 0] : tensor<4x3xf32> -> tensor<3x4xf32>
// CHECK-NEXT:    %[[DX:.*]] = train.matmul %[[DY]], %[[WT2]] : tensor<2x3x3xf32>, tensor<3x4xf32> -> tensor<2x3x4xf32>
// CHECK:         train.param_grad @x, %[[DX]] : tensor<2x3x4xf32>
// CHECK-NEXT:    train.param_grad @w
// CHECK-NEXT:    train.param_grad @v, %[[DV]] : tensor<4xf32>

// -----

module {
  train.param @x : tensor<2x4xf32> at 0
  train.param @s : tensor<4xf32> at 32
  func.func @rms_norm_rope(%cos: tensor<4xf32>) -> tensor<f32> {
    %x = train.param_value @x : tensor<2x4xf32>
    %s = train.param_value @s : tensor<4xf32>
    %sin = train.constant dense<[0.0, 0.5, 1.0, 0.5]> : tensor<4xf32>
    %n = train.rms_norm %x, %s {epsilon = 1.0e-5 : f32} : tensor<2x4xf32>, tensor<4xf32>
    %r = train.rope %n, %cos, %sin : tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>
    %l = train.reduce_sum %r, [] {keepdims = false} : tensor<2x4xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// rope_grad with the same (inactive) tables, then rms_norm_grad with the
// op's attributes.
// CHECK-LABEL: func.func @rms_norm_rope
// CHECK-SAME:    (%[[COS:.*]]: tensor<4xf32>)
// CHECK:         %[[X:.*]] = train.param_value @x
// CHECK-NEXT:    %[[S:.*]] = train.param_value @s
// CHECK-NEXT:    %[[SIN:.*]] = train.constant
// CHECK:         %[[DY:.*]] = train.broadcast_to
// CHECK-NEXT:    %[[DN:.*]] = train.rope_grad %[[DY]], %[[COS]], %[[SIN]] : tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>
// CHECK-NEXT:    %[[DX:.*]], %[[DS:.*]] = train.rms_norm_grad %[[X]], %[[S]], %[[DN]] {epsilon = 9.99999974E-6 : f32} : tensor<2x4xf32>, tensor<4xf32>
// CHECK-NEXT:    train.param_grad @x, %[[DX]] : tensor<2x4xf32>
// CHECK-NEXT:    train.param_grad @s, %[[DS]] : tensor<4xf32>

// -----

module {
  train.param @q : tensor<1x4x3x2xf32> at 0
  train.param @k : tensor<1x2x3x2xf32> at 96
  func.func @attention(%v: tensor<1x2x3x2xf32>) -> tensor<f32> {
    %q = train.param_value @q : tensor<1x4x3x2xf32>
    %k = train.param_value @k : tensor<1x2x3x2xf32>
    %y = train.attention %q, %k, %v {scale = 0.5, causal = false} : tensor<1x4x3x2xf32>, tensor<1x2x3x2xf32>, tensor<1x2x3x2xf32>
    %l = train.reduce_sum %y, [] {keepdims = false} : tensor<1x4x3x2xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// One attention_grad yields dq, dk (grouped heads: 4 query, 2 KV) and dv;
// the graph input v's adjoint is dropped.
// CHECK-LABEL: func.func @attention
// CHECK-SAME:    (%[[V:.*]]: tensor<1x2x3x2xf32>)
// CHECK:         %[[Q:.*]] = train.param_value @q
// CHECK-NEXT:    %[[K:.*]] = train.param_value @k
// CHECK:         %[[DY:.*]] = train.broadcast_to
// CHECK-NEXT:    %[[DQ:.*]], %[[DK:.*]], %{{.*}} = train.attention_grad %[[Q]], %[[K]], %[[V]], %[[DY]] {causal = false, scale = 5.000000e-01 : f64} : tensor<1x4x3x2xf32>, tensor<1x2x3x2xf32>, tensor<1x2x3x2xf32>
// CHECK-NEXT:    train.param_grad @q, %[[DQ]] : tensor<1x4x3x2xf32>
// CHECK-NEXT:    train.param_grad @k, %[[DK]] : tensor<1x2x3x2xf32>

// -----

module {
  train.param @t : tensor<4xf32> at 0
  func.func @rope_table(%x: tensor<2x4xf32>, %sin: tensor<4xf32>) -> tensor<f32> {
    %t = train.param_value @t : tensor<4xf32>
    // expected-error @+1 {{'train.rope' op gradient w.r.t. rope's cos/sin tables is not supported}}
    %r = train.rope %x, %t, %sin : tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>
    %l = train.reduce_sum %r, [] {keepdims = false} : tensor<2x4xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// A training step is not differentiated twice.
module {
  train.param @w : tensor<3xf32> at 0
  func.func @twice(%x: tensor<3xf32>) -> tensor<f32> {
    %w = train.param_value @w : tensor<3xf32>
    %m = train.mul %w, %x : tensor<3xf32>, tensor<3xf32> -> tensor<3xf32>
    %l = train.reduce_sum %m, [] {keepdims = false} : tensor<3xf32> -> tensor<f32>
    // expected-error @+1 {{'train.param_grad' op the function is already differentiated; train-autodiff runs once, on the forward graph and its loss}}
    train.param_grad @w, %x : tensor<3xf32>
    return %l : tensor<f32>
  }
}
