// sched-microbatch right after convert-train-to-sched. The first RUN splits
// Inputs/three-layers-sched.mlir (Inputs/models/three-layers.mlir in sched
// form, Inputs/regenerate.sh writes it); the second the iterations below,
// each the sched form of a small step the pass refuses (copied from
// convert-train-to-sched's output; the steps themselves are
// Inputs/models/microbatch-errors.mlir, run through the whole chain by
// test/e2e/offload-pipeline.test).
// RUN: spillway-opt %S/Inputs/three-layers-sched.mlir -verify-diagnostics --sched-microbatch=microbatches=3 | FileCheck %s
// RUN: spillway-opt %s -split-input-file -verify-diagnostics --sched-microbatch=microbatches=3

// Batch 6 in 3 micro-batches of 2: the inputs sliced, every fwd and bwd task
// three times on the smaller batch (types re-derived inside: the gather, the
// linear, the bias gradient's sum_to_shape keeps the bias's shape), the
// gradients and the loss averaged, the updates once.
// CHECK-LABEL: func.func @three_layers
// CHECK:       sched.iteration(%{{.*}}, %{{.*}}) {microbatches = 3 : i64}
// CHECK-NEXT:  ^bb0(%[[IDS:.*]]: tensor<6xi64>, %[[LABELS:.*]]: tensor<6xi64>):
// CHECK-NEXT:    %[[I0:.*]] = sched.slice %[[IDS]][0 of 3] : tensor<6xi64> -> tensor<2xi64>
// CHECK-NEXT:    %[[I1:.*]] = sched.slice %[[IDS]][1 of 3]
// CHECK-NEXT:    %[[I2:.*]] = sched.slice %[[IDS]][2 of 3]
// CHECK-NEXT:    %[[L0:.*]] = sched.slice %[[LABELS]][0 of 3]
// CHECK-NEXT:    %[[L1:.*]] = sched.slice %[[LABELS]][1 of 3]
// CHECK-NEXT:    %[[L2:.*]] = sched.slice %[[LABELS]][2 of 3]
// CHECK-NEXT:    %[[E0:.*]] = sched.task fwd layer(0) mb(0) (%[[I0]]) : (tensor<2xi64>) -> tensor<2x4xf32> {
// CHECK:           train.gather {{.*}} : tensor<10x4xf32>, tensor<2xi64> -> tensor<2x4xf32>
// CHECK:         %[[E1:.*]] = sched.task fwd layer(0) mb(1) (%[[I1]])
// CHECK:         %[[E2:.*]] = sched.task fwd layer(0) mb(2) (%[[I2]])
// CHECK:         %[[B0:.*]]:2 = sched.task fwd layer(1) mb(0) (%[[E0]])
// CHECK:           train.linear {{.*}} -> tensor<2x4xf32>
// CHECK:         %[[B1:.*]]:2 = sched.task fwd layer(1) mb(1) (%[[E1]])
// CHECK:         %[[B2:.*]]:2 = sched.task fwd layer(1) mb(2) (%[[E2]])
// CHECK:         %[[H0:.*]]:2 = sched.task fwd layer(2) mb(0) (%[[B0]]#1, %[[L0]])
// CHECK:           train.softmax_cross_entropy_loss {{.*}} : tensor<2x10xf32>, tensor<2xi64>
// CHECK:         %[[H1:.*]]:2 = sched.task fwd layer(2) mb(1) (%[[B1]]#1, %[[L1]])
// CHECK:         %[[H2:.*]]:2 = sched.task fwd layer(2) mb(2) (%[[B2]]#1, %[[L2]])
// CHECK:         %[[DH0:.*]]:2 = sched.task bwd layer(2) mb(0) (%[[H0]]#0, %[[L0]], %[[B0]]#1)
// CHECK:         %[[DH1:.*]]:2 = sched.task bwd layer(2) mb(1)
// CHECK:         %[[DH2:.*]]:2 = sched.task bwd layer(2) mb(2)
// CHECK:         %[[DB0:.*]]:3 = sched.task bwd layer(1) mb(0) (%[[B0]]#0, %[[DH0]]#0, %[[E0]])
// CHECK:           train.sum_to_shape {{.*}} : tensor<2x4xf32> -> tensor<4xf32>
// CHECK:         %[[DB1:.*]]:3 = sched.task bwd layer(1) mb(1)
// CHECK:         %[[DB2:.*]]:3 = sched.task bwd layer(1) mb(2)
// CHECK:         %[[DE0:.*]] = sched.task bwd layer(0) mb(0) (%[[I0]], %[[DB0]]#2)
// CHECK:         %[[DE1:.*]] = sched.task bwd layer(0) mb(1)
// CHECK:         %[[DE2:.*]] = sched.task bwd layer(0) mb(2)
// CHECK:         %[[GE:.*]] = sched.accumulate mean %[[DE0]], %[[DE1]], %[[DE2]] : tensor<10x4xf32>
// CHECK-NEXT:    sched.task opt layer(0) (%[[GE]])
// CHECK:         %[[GW:.*]] = sched.accumulate mean %[[DB0]]#0, %[[DB1]]#0, %[[DB2]]#0 : tensor<4x4xf32>
// CHECK-NEXT:    %[[GB:.*]] = sched.accumulate mean %[[DB0]]#1, %[[DB1]]#1, %[[DB2]]#1 : tensor<4xf32>
// CHECK-NEXT:    sched.task opt layer(1) (%[[GW]], %[[GB]])
// CHECK:         %[[GH:.*]] = sched.accumulate mean %[[DH0]]#1, %[[DH1]]#1, %[[DH2]]#1 : tensor<4x10xf32>
// CHECK-NEXT:    sched.task opt layer(2) (%[[GH]])
// CHECK:         %[[LOSS:.*]] = sched.accumulate mean %[[H0]]#1, %[[H1]]#1, %[[H2]]#1 : tensor<f32>
// CHECK-NEXT:    sched.yield %[[LOSS]] : tensor<f32>
// CHECK-NOT:   sched.task

// -----

// The batch input named by its ONNX name.
module attributes {train.layers = [#train.layer<"w", params = [@w]>]} {
  train.param @w : tensor<4x3xf32> at 0 {train.layer = 0 : i64}
  func.func @step(%arg0: tensor<4x4xf32> {train.name = "x"}, %arg1: tensor<4xi64> {train.name = "labels"}) -> tensor<f32> {
    // expected-error @+1 {{sched-microbatch: input 'x' of type 'tensor<4x4xf32>' has no leading batch dimension that divides into 3 micro-batches}}
    %0 = sched.iteration(%arg0, %arg1) : (tensor<4x4xf32>, tensor<4xi64>) -> tensor<f32> {
    ^bb0(%arg2: tensor<4x4xf32>, %arg3: tensor<4xi64>):
      %1:2 = sched.task fwd layer(0) (%arg2, %arg3) : (tensor<4x4xf32>, tensor<4xi64>) -> (tensor<4x3xf32>, tensor<f32>) {
      ^bb0(%arg4: tensor<4x4xf32>, %arg5: tensor<4xi64>):
        %3 = train.param_value @w : tensor<4x3xf32>
        %4 = train.matmul %arg4, %3 : tensor<4x4xf32>, tensor<4x3xf32> -> tensor<4x3xf32>
        %5 = train.softmax_cross_entropy_loss %4, %arg5 : tensor<4x3xf32>, tensor<4xi64>
        sched.yield %4, %5 : tensor<4x3xf32>, tensor<f32>
      }
      %2 = sched.task bwd layer(0) (%1#0, %arg3, %arg2) : (tensor<4x3xf32>, tensor<4xi64>, tensor<4x4xf32>) -> tensor<4x3xf32> {
      ^bb0(%arg4: tensor<4x3xf32>, %arg5: tensor<4xi64>, %arg6: tensor<4x4xf32>):
        %3 = train.constant dense<1.000000e+00> : tensor<f32>
        %4 = train.softmax_cross_entropy_loss_grad %arg4, %arg5, %3 : tensor<4x3xf32>, tensor<4xi64>, tensor<f32>
        %5 = train.transpose %arg6, [1, 0] : tensor<4x4xf32> -> tensor<4x4xf32>
        %6 = train.matmul %5, %4 : tensor<4x4xf32>, tensor<4x3xf32> -> tensor<4x3xf32>
        sched.yield %6 : tensor<4x3xf32>
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

// -----

// A summed loss is not the mean of micro-batch losses.
module attributes {train.layers = [#train.layer<"w", params = [@w]>]} {
  train.param @w : tensor<4x3xf32> at 0 {train.layer = 0 : i64}
  func.func @step(%arg0: tensor<6x4xf32>, %arg1: tensor<6xi64>) -> tensor<f32> {
    %0 = sched.iteration(%arg0, %arg1) : (tensor<6x4xf32>, tensor<6xi64>) -> tensor<f32> {
    ^bb0(%arg2: tensor<6x4xf32>, %arg3: tensor<6xi64>):
      %1:2 = sched.task fwd layer(0) (%arg2, %arg3) : (tensor<6x4xf32>, tensor<6xi64>) -> (tensor<6x3xf32>, tensor<f32>) {
      ^bb0(%arg4: tensor<6x4xf32>, %arg5: tensor<6xi64>):
        %3 = train.param_value @w : tensor<4x3xf32>
        %4 = train.matmul %arg4, %3 : tensor<6x4xf32>, tensor<4x3xf32> -> tensor<6x3xf32>
        %5 = train.softmax_cross_entropy_loss %4, %arg5 {reduction = "sum"} : tensor<6x3xf32>, tensor<6xi64>
        sched.yield %4, %5 : tensor<6x3xf32>, tensor<f32>
      }
      %2 = sched.task bwd layer(0) (%1#0, %arg3, %arg2) : (tensor<6x3xf32>, tensor<6xi64>, tensor<6x4xf32>) -> tensor<4x3xf32> {
      ^bb0(%arg4: tensor<6x3xf32>, %arg5: tensor<6xi64>, %arg6: tensor<6x4xf32>):
        %3 = train.constant dense<1.000000e+00> : tensor<f32>
        %4 = train.softmax_cross_entropy_loss_grad %arg4, %arg5, %3 {reduction = "sum"} : tensor<6x3xf32>, tensor<6xi64>, tensor<f32>
        %5 = train.transpose %arg6, [1, 0] : tensor<6x4xf32> -> tensor<4x6xf32>
        %6 = train.matmul %5, %4 : tensor<4x6xf32>, tensor<6x3xf32> -> tensor<4x3xf32>
        sched.yield %6 : tensor<4x3xf32>
      }
      sched.task opt layer(0) (%2) : (tensor<4x3xf32>) -> () {
      ^bb0(%arg4: tensor<4x3xf32>):
        train.adamw @w, %arg4 {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 1.000000e-02 : f64} : tensor<4x3xf32>
      }
      // expected-error @+1 {{sched-microbatch: the iteration's result 'tensor<f32>' is not a mean over the batch}}
      sched.yield %1#1 : tensor<f32>
    }
    return %0 : tensor<f32>
  }
}

// -----

// A constant shaped by the batch does not split: the batch-row check names
// the op before anything is rewritten.
module attributes {train.layers = [#train.layer<"w", params = [@w]>]} {
  train.param @w : tensor<4x3xf32> at 0 {train.layer = 0 : i64}
  func.func @step(%arg0: tensor<6x4xf32>, %arg1: tensor<6xi64>) -> tensor<f32> {
    %0 = sched.iteration(%arg0, %arg1) : (tensor<6x4xf32>, tensor<6xi64>) -> tensor<f32> {
    ^bb0(%arg2: tensor<6x4xf32>, %arg3: tensor<6xi64>):
      %1:2 = sched.task fwd layer(0) (%arg2, %arg3) : (tensor<6x4xf32>, tensor<6xi64>) -> (tensor<6x3xf32>, tensor<f32>) {
      ^bb0(%arg4: tensor<6x4xf32>, %arg5: tensor<6xi64>):
        %3 = train.param_value @w : tensor<4x3xf32>
        %4 = train.matmul %arg4, %3 : tensor<6x4xf32>, tensor<4x3xf32> -> tensor<6x3xf32>
        %5 = train.constant dense<2.000000e+00> : tensor<6x3xf32>
        // expected-error @+1 {{sched-microbatch: cannot split the batch into 3 micro-batches: 'train.mul' combines the batch with a tensor not split with it (is not known to keep batch rows independent); use --microbatches 1}}
        %6 = train.mul %4, %5 : tensor<6x3xf32>, tensor<6x3xf32> -> tensor<6x3xf32>
        %7 = train.softmax_cross_entropy_loss %6, %arg5 : tensor<6x3xf32>, tensor<6xi64>
        sched.yield %6, %7 : tensor<6x3xf32>, tensor<f32>
      }
      %2 = sched.task bwd layer(0) (%1#0, %arg3, %arg2) : (tensor<6x3xf32>, tensor<6xi64>, tensor<6x4xf32>) -> tensor<4x3xf32> {
      ^bb0(%arg4: tensor<6x3xf32>, %arg5: tensor<6xi64>, %arg6: tensor<6x4xf32>):
        %3 = train.constant dense<1.000000e+00> : tensor<f32>
        %4 = train.softmax_cross_entropy_loss_grad %arg4, %arg5, %3 : tensor<6x3xf32>, tensor<6xi64>, tensor<f32>
        %5 = train.constant dense<2.000000e+00> : tensor<6x3xf32>
        %6 = train.mul %4, %5 : tensor<6x3xf32>, tensor<6x3xf32> -> tensor<6x3xf32>
        %7 = train.transpose %arg6, [1, 0] : tensor<6x4xf32> -> tensor<4x6xf32>
        %8 = train.matmul %7, %6 : tensor<4x6xf32>, tensor<6x3xf32> -> tensor<4x3xf32>
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
