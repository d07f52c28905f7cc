// RUN: spillway-opt %s -split-input-file -verify-diagnostics --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=3 | FileCheck %s

// Batch 6 in 3 micro-batches of 2: the inputs sliced, every fwd and bwd task
// three times on the smaller batch (types re-derived inside: the gather, the
// linear, the bias gradient's sum_to_shape keeps the bias's shape), the
// gradients and the loss averaged, the updates once.
// CHECK-LABEL: func.func @step
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
module {
  train.param @"embed.weight" : tensor<10x4xf32> at 0
  train.param @"blocks.0.fc.weight" : tensor<4x4xf32> at 160
  train.param @"blocks.0.fc.bias" : tensor<4xf32> at 224
  train.param @"head.weight" : tensor<4x10xf32> at 240
  func.func @step(%ids: tensor<6xi64>, %labels: tensor<6xi64>) -> tensor<f32> {
    %e = train.param_value @"embed.weight" : tensor<10x4xf32>
    %w0 = train.param_value @"blocks.0.fc.weight" : tensor<4x4xf32>
    %b0 = train.param_value @"blocks.0.fc.bias" : tensor<4xf32>
    %wh = train.param_value @"head.weight" : tensor<4x10xf32>
    %x0 = train.gather %e, %ids : tensor<10x4xf32>, tensor<6xi64> -> tensor<6x4xf32>
    %y0 = train.linear %x0, %w0, %b0 : tensor<6x4xf32>, tensor<4x4xf32>, tensor<4xf32> -> tensor<6x4xf32>
    %r0 = train.relu %y0 : tensor<6x4xf32>
    %x1 = train.add %x0, %r0 : tensor<6x4xf32>, tensor<6x4xf32> -> tensor<6x4xf32>
    %logits = train.matmul %x1, %wh : tensor<6x4xf32>, tensor<4x10xf32> -> tensor<6x10xf32>
    %l = train.softmax_cross_entropy_loss %logits, %labels : tensor<6x10xf32>, tensor<6xi64>
    return %l : tensor<f32>
  }
}

// -----

// The batch input named by its ONNX name.
module {
  train.param @w : tensor<4x3xf32> at 0
  // expected-error @+1 {{sched-microbatch: input 'x' of type 'tensor<4x4xf32>' has no leading batch dimension that divides into 3 micro-batches}}
  func.func @step(%x: tensor<4x4xf32> {train.name = "x"}, %labels: tensor<4xi64> {train.name = "labels"}) -> tensor<f32> {
    %w = train.param_value @w : tensor<4x3xf32>
    %y = train.matmul %x, %w : tensor<4x4xf32>, tensor<4x3xf32> -> tensor<4x3xf32>
    %l = train.softmax_cross_entropy_loss %y, %labels : tensor<4x3xf32>, tensor<4xi64>
    return %l : tensor<f32>
  }
}

// -----

// A summed loss is not the mean of micro-batch losses.
module {
  train.param @w : tensor<4x3xf32> at 0
  func.func @step(%x: tensor<6x4xf32>, %labels: tensor<6xi64>) -> tensor<f32> {
    %w = train.param_value @w : tensor<4x3xf32>
    %y = train.matmul %x, %w : tensor<6x4xf32>, tensor<4x3xf32> -> tensor<6x3xf32>
    %l = train.softmax_cross_entropy_loss %y, %labels {reduction = "sum"} : tensor<6x3xf32>, tensor<6xi64>
    // expected-error @+1 {{sched-microbatch: the iteration's result 'tensor<f32>' is not a mean over the batch}}
    return %l : tensor<f32>
  }
}

// -----

// A constant shaped by the batch does not split: the batch-row check names
// the op before anything is rewritten.
module {
  train.param @w : tensor<4x3xf32> at 0
  func.func @step(%x: tensor<6x4xf32>, %labels: tensor<6xi64>) -> tensor<f32> {
    %w = train.param_value @w : tensor<4x3xf32>
    %y = train.matmul %x, %w : tensor<6x4xf32>, tensor<4x3xf32> -> tensor<6x3xf32>
    %c = train.constant dense<2.0> : tensor<6x3xf32>
    // expected-error @+1 {{sched-microbatch: cannot split the batch into 3 micro-batches: 'train.mul' combines the batch with a tensor not split with it (is not known to keep batch rows independent); use --microbatches 1}}
    %z = train.mul %y, %c : tensor<6x3xf32>, tensor<6x3xf32> -> tensor<6x3xf32>
    %l = train.softmax_cross_entropy_loss %z, %labels : tensor<6x3xf32>, tensor<6xi64>
    return %l : tensor<f32>
  }
}

