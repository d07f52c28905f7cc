// sched-microbatch re-derives the types of ops whose result type is fixed
// rather than inferred: a cast (it changes the element type only, as
// dynamo's IsNaN lowering does: float(s == s)) and a sum_to_shape that keeps
// the rank and dim 0 (the gradient of broadcasting the grouped KV heads)
// are batched like their operand. Batch 6 in 3 micro-batches of 2.
// RUN: spillway-opt %s --sched-microbatch=microbatches=3 | FileCheck %s

// CHECK-LABEL: func.func @step
// CHECK:       sched.task fwd layer(0) mb(0) {{.*}} -> (tensor<2x3xf32>, tensor<f32>) {
// CHECK:         train.equal {{.*}} -> tensor<2x2x4xi1>
// CHECK-NEXT:    train.cast {{.*}} : tensor<2x2x4xi1> -> tensor<2x2x4xf32>
// CHECK:       sched.task bwd layer(0) mb(0)
// CHECK:         train.sum_to_shape {{.*}} : tensor<2x2x4xf32> -> tensor<2x1x4xf32>
// CHECK-NEXT:    train.reshape {{.*}} : tensor<2x1x4xf32> -> tensor<2x4xf32>
module attributes {train.layers = [#train.layer<"w", params = [@w]>]} {
  train.param @w : tensor<4x3xf32> at 0 {train.layer = 0 : i64}
  func.func @step(%arg0: tensor<6x2x4xf32> {train.name = "x"}, %arg1: tensor<6xi64> {train.name = "labels"}) -> tensor<f32> {
    %0 = sched.iteration(%arg0, %arg1) : (tensor<6x2x4xf32>, tensor<6xi64>) -> tensor<f32> {
    ^bb0(%arg2: tensor<6x2x4xf32>, %arg3: tensor<6xi64>):
      %1:2 = sched.task fwd layer(0) (%arg2, %arg3) : (tensor<6x2x4xf32>, tensor<6xi64>) -> (tensor<6x3xf32>, tensor<f32>) {
      ^bb0(%arg4: tensor<6x2x4xf32>, %arg5: tensor<6xi64>):
        %3 = train.equal %arg4, %arg4 : tensor<6x2x4xf32>, tensor<6x2x4xf32> -> tensor<6x2x4xi1>
        %4 = train.cast %3 : tensor<6x2x4xi1> -> tensor<6x2x4xf32>
        %5 = train.mul %arg4, %4 : tensor<6x2x4xf32>, tensor<6x2x4xf32> -> tensor<6x2x4xf32>
        %7 = train.reduce_sum %5, [1] {keepdims = false} : tensor<6x2x4xf32> -> tensor<6x4xf32>
        %8 = train.param_value @w : tensor<4x3xf32>
        %9 = train.matmul %7, %8 : tensor<6x4xf32>, tensor<4x3xf32> -> tensor<6x3xf32>
        %10 = train.softmax_cross_entropy_loss %9, %arg5 : tensor<6x3xf32>, tensor<6xi64>
        sched.yield %9, %10 : tensor<6x3xf32>, tensor<f32>
      }
      %2 = sched.task bwd layer(0) (%1#0, %arg3, %arg2) : (tensor<6x3xf32>, tensor<6xi64>, tensor<6x2x4xf32>) -> tensor<4x3xf32> {
      ^bb0(%arg4: tensor<6x3xf32>, %arg5: tensor<6xi64>, %arg6: tensor<6x2x4xf32>):
        %3 = train.constant dense<1.000000e+00> : tensor<f32>
        %4 = train.softmax_cross_entropy_loss_grad %arg4, %arg5, %3 : tensor<6x3xf32>, tensor<6xi64>, tensor<f32>
        %5 = train.sum_to_shape %arg6 : tensor<6x2x4xf32> -> tensor<6x1x4xf32>
        %6 = train.reshape %5 : tensor<6x1x4xf32> -> tensor<6x4xf32>
        %7 = train.transpose %6, [1, 0] : tensor<6x4xf32> -> tensor<4x6xf32>
        %8 = train.matmul %7, %4 : tensor<4x6xf32>, tensor<6x3xf32> -> tensor<4x3xf32>
        sched.yield %8 : tensor<4x3xf32>
      }
      sched.task opt layer(0) (%2) : (tensor<4x3xf32>) -> () {
      ^bb0(%arg4: tensor<4x3xf32>):
        train.adamw @w, %arg4 {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 1.000000e-02 : f64} : tensor<4x3xf32>
      }
      sched.yield %1#1 : tensor<f32>
    }
    return %0 : tensor<f32>
  }
}
