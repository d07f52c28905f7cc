// RUN: spillway-opt %s | spillway-opt | FileCheck %s

// CHECK-LABEL: module attributes {train.weights = "m.weights.bin"}
// CHECK:       train.param @fc.weight : tensor<4x3xf32> at 0
// CHECK:       train.param @"fc bias" : tensor<3xf32> at 48
// CHECK:       train.param @ln.scale : tensor<3xf32> at 60
// CHECK:       train.param @emb : tensor<10x3xf32> at 72
module attributes {train.weights = "m.weights.bin"} {
  train.param @"fc.weight" : tensor<4x3xf32> at 0
  train.param @"fc bias" : tensor<3xf32> at 48
  train.param @"ln.scale" : tensor<3xf32> at 60
  train.param @emb : tensor<10x3xf32> at 72
  train.param @"fc.w" : tensor<8x3xf32> at 192

  // CHECK-LABEL: func.func @forward
  func.func @forward(%x: tensor<8x4xf32>, %y: tensor<8xi64>, %ids: tensor<2x5xi32>) -> tensor<f32> {
    // CHECK:      %[[W:.*]] = train.param_value @fc.weight : tensor<4x3xf32>
    // CHECK-NEXT: %[[B:.*]] = train.param_value @"fc bias" : tensor<3xf32>
    // CHECK-NEXT: %[[S:.*]] = train.param_value @ln.scale : tensor<3xf32>
    // CHECK-NEXT: %[[E:.*]] = train.param_value @emb : tensor<10x3xf32>
    %w = train.param_value @"fc.weight" : tensor<4x3xf32>
    %b = train.param_value @"fc bias" : tensor<3xf32>
    %s = train.param_value @"ln.scale" : tensor<3xf32>
    %e = train.param_value @emb : tensor<10x3xf32>
    // CHECK-NEXT: %[[C:.*]] = train.constant dense<2.000000e+00> : tensor<f32>
    // CHECK-NEXT: %[[CI:.*]] = train.constant dense<[1, 2]> : tensor<2xi64>
    %c = train.constant dense<2.0> : tensor<f32>
    %ci = train.constant dense<[1, 2]> : tensor<2xi64>
    // CHECK-NEXT: %[[H:.*]] = train.matmul %{{.*}}, %[[W]] : tensor<8x4xf32>, tensor<4x3xf32> -> tensor<8x3xf32>
    // CHECK-NEXT: %[[G1:.*]] = train.gemm %{{.*}}, %[[W]], %[[B]] {alpha = 5.000000e-01 : f32, beta = 2.000000e+00 : f32} : tensor<8x4xf32>, tensor<4x3xf32>, tensor<3xf32> -> tensor<8x3xf32>
    // CHECK-NEXT: train.gemm %[[W]], %{{.*}} {transA = true, transB = true} : tensor<4x3xf32>, tensor<8x4xf32> -> tensor<3x8xf32>
    %h = train.matmul %x, %w : tensor<8x4xf32>, tensor<4x3xf32> -> tensor<8x3xf32>
    %g1 = train.gemm %x, %w, %b {alpha = 0.5 : f32, beta = 2.0 : f32} : tensor<8x4xf32>, tensor<4x3xf32>, tensor<3xf32> -> tensor<8x3xf32>
    %g2 = train.gemm %w, %x {transA = true, transB = true} : tensor<4x3xf32>, tensor<8x4xf32> -> tensor<3x8xf32>
    // CHECK-NEXT: train.add %[[H]], %[[B]] : tensor<8x3xf32>, tensor<3xf32> -> tensor<8x3xf32>
    // CHECK-NEXT: train.sub
    // CHECK-NEXT: train.mul %{{.*}}, %[[C]] : tensor<8x3xf32>, tensor<f32> -> tensor<8x3xf32>
    // CHECK-NEXT: train.div
    // CHECK-NEXT: train.neg %{{.*}} : tensor<8x3xf32>
    // CHECK-NEXT: train.relu
    // CHECK-NEXT: train.tanh
    // CHECK-NEXT: train.gelu %{{.*}} : tensor<8x3xf32>
    // CHECK-NEXT: train.gelu %{{.*}} {approximate = "tanh"} : tensor<8x3xf32>
    // CHECK-NEXT: train.softmax %{{.*}} {axis = 0 : si64} : tensor<8x3xf32>
    // CHECK-NEXT: train.softmax %{{.*}} : tensor<8x3xf32>
    %a1 = train.add %h, %b : tensor<8x3xf32>, tensor<3xf32> -> tensor<8x3xf32>
    %a2 = train.sub %a1, %g1 : tensor<8x3xf32>, tensor<8x3xf32> -> tensor<8x3xf32>
    %a3 = train.mul %a2, %c : tensor<8x3xf32>, tensor<f32> -> tensor<8x3xf32>
    %a4 = train.div %a3, %b : tensor<8x3xf32>, tensor<3xf32> -> tensor<8x3xf32>
    %a5 = train.neg %a4 : tensor<8x3xf32>
    %a6 = train.relu %a5 : tensor<8x3xf32>
    %a7 = train.tanh %a6 : tensor<8x3xf32>
    %a8 = train.gelu %a7 : tensor<8x3xf32>
    %a9 = train.gelu %a8 {approximate = "tanh"} : tensor<8x3xf32>
    %a10 = train.softmax %a9 {axis = 0 : si64} : tensor<8x3xf32>
    %a11 = train.softmax %a10 {axis = -1 : si64} : tensor<8x3xf32>
    // CHECK-NEXT: %[[LN:.*]] = train.layer_norm %{{.*}}, %[[S]], %[[B]] : tensor<8x3xf32>, tensor<3xf32>, tensor<3xf32>
    // CHECK-NEXT: train.layer_norm %[[LN]], %[[S]] {axis = 1 : si64} : tensor<8x3xf32>, tensor<3xf32>
    %ln = train.layer_norm %a11, %s, %b {epsilon = 1.0e-5 : f32} : tensor<8x3xf32>, tensor<3xf32>, tensor<3xf32>
    %ln2 = train.layer_norm %ln, %s {axis = 1 : si64} : tensor<8x3xf32>, tensor<3xf32>
    // CHECK-NEXT: train.gather %[[E]], %{{.*}} : tensor<10x3xf32>, tensor<2x5xi32> -> tensor<2x5x3xf32>
    // CHECK-NEXT: train.gather %[[E]], %[[CI]] {axis = 1 : i64} : tensor<10x3xf32>, tensor<2xi64> -> tensor<10x2xf32>
    // CHECK-NEXT: train.reshape %{{.*}} : tensor<2x5x3xf32> -> tensor<10x3xf32>
    // CHECK-NEXT: train.transpose %{{.*}}, [1, 0] : tensor<10x3xf32> -> tensor<3x10xf32>
    %ga = train.gather %e, %ids : tensor<10x3xf32>, tensor<2x5xi32> -> tensor<2x5x3xf32>
    %gb = train.gather %e, %ci {axis = 1} : tensor<10x3xf32>, tensor<2xi64> -> tensor<10x2xf32>
    %r = train.reshape %ga : tensor<2x5x3xf32> -> tensor<10x3xf32>
    %t = train.transpose %r, [1, 0] : tensor<10x3xf32> -> tensor<3x10xf32>
    // CHECK-NEXT: train.reduce_sum %{{.*}}, [1] : tensor<3x10xf32> -> tensor<3x1xf32>
    // CHECK-NEXT: train.reduce_mean %{{.*}}, [] {keepdims = false} : tensor<8x3xf32> -> tensor<f32>
    %rs = train.reduce_sum %t, [1] : tensor<3x10xf32> -> tensor<3x1xf32>
    %rm = train.reduce_mean %ln2, [] {keepdims = false} : tensor<8x3xf32> -> tensor<f32>
    // CHECK-NEXT: train.softmax_cross_entropy_loss %{{.*}}, %{{.*}} : tensor<8x3xf32>, tensor<8xi64>
    // CHECK-NEXT: train.softmax_cross_entropy_loss %{{.*}}, %{{.*}} {ignore_index = -100 : si64, reduction = "sum"} : tensor<8x3xf32>, tensor<8xi64>
    %l = train.softmax_cross_entropy_loss %a11, %y : tensor<8x3xf32>, tensor<8xi64>
    %l2 = train.softmax_cross_entropy_loss %a11, %y {reduction = "sum", ignore_index = -100 : si64} : tensor<8x3xf32>, tensor<8xi64>
    return %l : tensor<f32>
  }

  // CHECK-LABEL: func.func @gradients
  func.func @gradients(%x: tensor<8x3xf32>, %dy: tensor<8x3xf32>, %y: tensor<8xi64>,
                       %dl: tensor<f32>, %s: tensor<3xf32>, %ids: tensor<2x5xi64>,
                       %dg: tensor<2x5x3xf32>) {
    // CHECK:      train.sum_to_shape %{{.*}} : tensor<8x3xf32> -> tensor<3xf32>
    // CHECK-NEXT: train.sum_to_shape %{{.*}} : tensor<8x3xf32> -> tensor<1x3xf32>
    // CHECK-NEXT: train.broadcast_to %{{.*}} : tensor<3xf32> -> tensor<8x3xf32>
    %0 = train.sum_to_shape %dy : tensor<8x3xf32> -> tensor<3xf32>
    %1 = train.sum_to_shape %dy : tensor<8x3xf32> -> tensor<1x3xf32>
    %2 = train.broadcast_to %s : tensor<3xf32> -> tensor<8x3xf32>
    // CHECK-NEXT: train.relu_grad %{{.*}}, %{{.*}} : tensor<8x3xf32>
    // CHECK-NEXT: train.tanh_grad %{{.*}}, %{{.*}} : tensor<8x3xf32>
    // CHECK-NEXT: train.gelu_grad %{{.*}}, %{{.*}} {approximate = "tanh"} : tensor<8x3xf32>
    // CHECK-NEXT: train.softmax_grad %{{.*}}, %{{.*}} {axis = 0 : si64} : tensor<8x3xf32>
    %3 = train.relu_grad %x, %dy : tensor<8x3xf32>
    %4 = train.tanh_grad %x, %dy : tensor<8x3xf32>
    %5 = train.gelu_grad %x, %dy {approximate = "tanh"} : tensor<8x3xf32>
    %6 = train.softmax_grad %x, %dy {axis = 0 : si64} : tensor<8x3xf32>
    // CHECK-NEXT: %{{.*}}, %{{.*}}, %{{.*}} = train.layer_norm_grad %{{.*}}, %{{.*}}, %{{.*}} {epsilon = 1.000000e-03 : f32} : tensor<8x3xf32>, tensor<3xf32>
    %dx, %ds, %db = train.layer_norm_grad %x, %s, %dy {epsilon = 1.0e-3 : f32} : tensor<8x3xf32>, tensor<3xf32>
    // CHECK-NEXT: train.gather_grad %{{.*}}, %{{.*}} : tensor<2x5xi64>, tensor<2x5x3xf32> -> tensor<10x3xf32>
    %7 = train.gather_grad %ids, %dg : tensor<2x5xi64>, tensor<2x5x3xf32> -> tensor<10x3xf32>
    // CHECK-NEXT: train.softmax_cross_entropy_loss_grad %{{.*}}, %{{.*}}, %{{.*}} {ignore_index = 0 : si64} : tensor<8x3xf32>, tensor<8xi64>, tensor<f32>
    %8 = train.softmax_cross_entropy_loss_grad %x, %y, %dl {ignore_index = 0 : si64} : tensor<8x3xf32>, tensor<8xi64>, tensor<f32>
    // CHECK-NEXT: train.param_grad @"fc bias", %{{.*}} : tensor<3xf32>
    // CHECK-NEXT: train.adamw @ln.scale, %{{.*}} {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 0.000000e+00 : f64} : tensor<3xf32>
    train.param_grad @"fc bias", %0 : tensor<3xf32>
    train.adamw @"ln.scale", %ds {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0} : tensor<3xf32>
    // CHECK-NEXT: train.foam @fc.w, %{{.*}} {alpha = 2.500000e-01 : f64, beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, level = 2 : i64, lr = 1.000000e-02 : f64, weight_decay = 0.000000e+00 : f64} : tensor<8x3xf32>
    train.foam @"fc.w", %dx {lr = 1.0e-2, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0, level = 2, alpha = 0.25} : tensor<8x3xf32>
    return
  }
  // CHECK-LABEL: func.func @exported_ops
  func.func @exported_ops(%x: tensor<2x4xf32>, %v: tensor<4xf32>, %i: tensor<2x4xi64>,
                          %c: tensor<2x4xi1>) {
    // CHECK:      train.pow %{{.*}}, %{{.*}} : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
    // CHECK-NEXT: train.exp %{{.*}} : tensor<2x4xf32>
    // CHECK-NEXT: train.log
    // CHECK-NEXT: train.sqrt
    // CHECK-NEXT: train.reciprocal
    // CHECK-NEXT: train.erf
    // CHECK-NEXT: train.sigmoid
    // CHECK-NEXT: train.cos
    // CHECK-NEXT: train.sin
    // CHECK-NEXT: train.silu %{{.*}} : tensor<2x4xf32>
    %0 = train.pow %x, %v : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
    %1 = train.exp %0 : tensor<2x4xf32>
    %2 = train.log %1 : tensor<2x4xf32>
    %3 = train.sqrt %2 : tensor<2x4xf32>
    %4 = train.reciprocal %3 : tensor<2x4xf32>
    %5 = train.erf %4 : tensor<2x4xf32>
    %6 = train.sigmoid %5 : tensor<2x4xf32>
    %7 = train.cos %6 : tensor<2x4xf32>
    %8 = train.sin %7 : tensor<2x4xf32>
    %9 = train.silu %8 : tensor<2x4xf32>
    // CHECK-NEXT: train.equal %{{.*}}, %{{.*}} : tensor<2x4xi64>, tensor<2x4xi64> -> tensor<2x4xi1>
    // CHECK-NEXT: train.less %{{.*}}, %{{.*}} : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xi1>
    // CHECK-NEXT: train.less_or_equal
    // CHECK-NEXT: train.greater %{{.*}}, %{{.*}} : tensor<2x4xi1>, tensor<2x4xi1> -> tensor<2x4xi1>
    // CHECK-NEXT: train.where %{{.*}}, %{{.*}}, %{{.*}} : tensor<2x4xi1>, tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
    // CHECK-NEXT: train.cast %{{.*}} : tensor<2x4xi1> -> tensor<2x4xf32>
    // CHECK-NEXT: train.cast %{{.*}} : tensor<2x4xf32> -> tensor<2x4xi64>
    // CHECK-NEXT: train.cast %{{.*}} : tensor<2x4xf32> -> tensor<2x4xbf16>
    // CHECK-NEXT: train.cast %{{.*}} : tensor<2x4xbf16> -> tensor<2x4xf32>
    %10 = train.equal %i, %i : tensor<2x4xi64>, tensor<2x4xi64> -> tensor<2x4xi1>
    %11 = train.less %x, %v : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xi1>
    %12 = train.less_or_equal %x, %v : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xi1>
    %13 = train.greater %c, %11 : tensor<2x4xi1>, tensor<2x4xi1> -> tensor<2x4xi1>
    %14 = train.where %13, %x, %v : tensor<2x4xi1>, tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
    %15 = train.cast %c : tensor<2x4xi1> -> tensor<2x4xf32>
    %16 = train.cast %x : tensor<2x4xf32> -> tensor<2x4xi64>
    %bf = train.cast %x : tensor<2x4xf32> -> tensor<2x4xbf16>
    %bf32 = train.cast %bf : tensor<2x4xbf16> -> tensor<2x4xf32>
    // CHECK-NEXT: train.reduce_max %{{.*}}, [-1] : tensor<2x4xf32> -> tensor<2x1xf32>
    // CHECK-NEXT: train.concat %{{.*}}, %{{.*}} {axis = 1 : i64} : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x8xf32>
    // CHECK-NEXT: train.concat %{{.*}} {axis = 0 : i64} : tensor<2x4xi64> -> tensor<2x4xi64>
    // CHECK-NEXT: train.slice %{{.*}} {starts = array<i64: 1, 7>, steps = array<i64: 1, -3>} : tensor<2x8xf32> -> tensor<1x3xf32>
    // CHECK-NEXT: train.slice_grad %{{.*}} {starts = array<i64: 1, 7>, steps = array<i64: 1, -3>} : tensor<1x3xf32> -> tensor<2x8xf32>
    %17 = train.reduce_max %x, [-1] : tensor<2x4xf32> -> tensor<2x1xf32>
    %18 = train.concat %x, %14 {axis = 1} : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x8xf32>
    %19 = train.concat %i {axis = 0} : tensor<2x4xi64> -> tensor<2x4xi64>
    %20 = train.slice %18 {starts = array<i64: 1, 7>, steps = array<i64: 1, -3>} : tensor<2x8xf32> -> tensor<1x3xf32>
    %21 = train.slice_grad %20 {starts = array<i64: 1, 7>, steps = array<i64: 1, -3>} : tensor<1x3xf32> -> tensor<2x8xf32>
    // CHECK-NEXT: train.silu_grad %{{.*}}, %{{.*}} : tensor<2x4xf32>
    %22 = train.silu_grad %x, %9 : tensor<2x4xf32>
    // CHECK-NEXT: train.pow %{{.*}}, %{{.*}} : tensor<2x4xi64>, tensor<2x4xi64> -> tensor<2x4xi64>
    // CHECK-NEXT: train.reduce_max %{{.*}}, [0] {keepdims = false} : tensor<2x4xi1> -> tensor<4xi1>
    %23 = train.pow %i, %i : tensor<2x4xi64>, tensor<2x4xi64> -> tensor<2x4xi64>
    %24 = train.reduce_max %c, [0] {keepdims = false} : tensor<2x4xi1> -> tensor<4xi1>
    return
  }

  // CHECK-LABEL: func.func @fused_ops
  func.func @fused_ops(%x: tensor<2x3x4xf32>, %w: tensor<4x5xf32>, %b: tensor<5xf32>,
                       %s: tensor<4xf32>, %t: tensor<3x4xf32>,
                       %q: tensor<1x4x3x2xf32>, %k: tensor<1x2x3x2xf32>) {
    // CHECK:      train.linear %{{.*}}, %{{.*}}, %{{.*}} : tensor<2x3x4xf32>, tensor<4x5xf32>, tensor<5xf32> -> tensor<2x3x5xf32>
    // CHECK-NEXT: train.linear %{{.*}}, %{{.*}} : tensor<2x3x4xf32>, tensor<4x5xf32> -> tensor<2x3x5xf32>
    %0 = train.linear %x, %w, %b : tensor<2x3x4xf32>, tensor<4x5xf32>, tensor<5xf32> -> tensor<2x3x5xf32>
    %1 = train.linear %x, %w : tensor<2x3x4xf32>, tensor<4x5xf32> -> tensor<2x3x5xf32>
    // CHECK-NEXT: %[[N:.*]] = train.rms_norm %{{.*}}, %{{.*}} {epsilon = 9.99999974E-6 : f32} : tensor<2x3x4xf32>, tensor<4xf32>
    // CHECK-NEXT: train.rms_norm %{{.*}}, %{{.*}} : tensor<2x3x4xf32>, tensor<4xf32>
    // CHECK-NEXT: train.rms_norm_grad %{{.*}}, %{{.*}}, %{{.*}} {axis = 2 : si64} : tensor<2x3x4xf32>, tensor<4xf32>
    %2 = train.rms_norm %x, %s {epsilon = 1.0e-5 : f32} : tensor<2x3x4xf32>, tensor<4xf32>
    %3 = train.rms_norm %x, %s {axis = -1 : si64, epsilon = 1.0e-6 : f32} : tensor<2x3x4xf32>, tensor<4xf32>
    %dx, %ds = train.rms_norm_grad %x, %s, %2 {axis = 2 : si64} : tensor<2x3x4xf32>, tensor<4xf32>
    // CHECK-NEXT: train.rope %[[N]], %{{.*}}, %{{.*}} : tensor<2x3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>
    // CHECK-NEXT: train.rope_grad %{{.*}}, %{{.*}}, %{{.*}} : tensor<2x3x4xf32>, tensor<3x4xf32>, tensor<4xf32>
    %4 = train.rope %2, %t, %t : tensor<2x3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>
    %5 = train.rope_grad %4, %t, %s : tensor<2x3x4xf32>, tensor<3x4xf32>, tensor<4xf32>
    // CHECK-NEXT: %[[A:.*]] = train.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 5.000000e-01 : f64} : tensor<1x4x3x2xf32>, tensor<1x2x3x2xf32>, tensor<1x2x3x2xf32>
    // CHECK-NEXT: train.attention %{{.*}}, %{{.*}}, %{{.*}} {causal = false, scale = 1.000000e+00 : f64}
    // CHECK-NEXT: train.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %[[A]] {scale = 5.000000e-01 : f64} : tensor<1x4x3x2xf32>, tensor<1x2x3x2xf32>, tensor<1x2x3x2xf32>
    %6 = train.attention %q, %k, %k {scale = 0.5} : tensor<1x4x3x2xf32>, tensor<1x2x3x2xf32>, tensor<1x2x3x2xf32>
    %7 = train.attention %q, %k, %k {scale = 1.0, causal = false} : tensor<1x4x3x2xf32>, tensor<1x2x3x2xf32>, tensor<1x2x3x2xf32>
    %dq, %dk, %dv = train.attention_grad %q, %k, %k, %6 {scale = 0.5} : tensor<1x4x3x2xf32>, tensor<1x2x3x2xf32>, tensor<1x2x3x2xf32>
    return
  }
}
