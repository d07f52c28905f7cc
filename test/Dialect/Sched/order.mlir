// The order of the tasks as text: each RUN keeps only the task, slice and
// accumulate lines of the output, so CHECK-NEXT reads the schedule.
// RUN: spillway-opt %s -split-input-file --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=3 --sched-order=order=horizontal | grep -o 'func.func @[a-z_]*\|sched\.task [a-z]* layer([0-9]*)\( mb([0-9]*)\)\?\|sched\.accumulate mean [^:]*' | FileCheck %s --check-prefix=HORIZ
// RUN: spillway-opt %s -split-input-file --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=3 --sched-order=order=snake | grep -o 'func.func @[a-z_]*\|sched\.task [a-z]* layer([0-9]*)\( mb([0-9]*)\)\?\|sched\.accumulate mean [^:]*' | FileCheck %s --check-prefix=SNAKE
// RUN: spillway-opt %s -split-input-file --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=3 --sched-order=order=snake | FileCheck %s --check-prefix=FULL
// RUN: spillway-opt %s -split-input-file --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=3 "--sched-order=order=horizontal remarks=true" -o /dev/null 2>&1 | FileCheck %s --check-prefix=LOADS-H
// RUN: spillway-opt %s -split-input-file --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=3 "--sched-order=order=snake remarks=true" -o /dev/null 2>&1 | FileCheck %s --check-prefix=LOADS-S

// The layer loads of each order (runs of consecutive tasks of one layer),
// as docs/cost-model.md counts them: horizontal 2LM - 2M + 1, snake 2L - 1.
// LOADS-H: remark: horizontal order of 3 layers x 3 micro-batches: 13 layer loads
// LOADS-H: remark: horizontal order of 2 layers x 3 micro-batches: 7 layer loads
// LOADS-S: remark: snake order of 3 layers x 3 micro-batches: 5 layer loads
// LOADS-S: remark: snake order of 2 layers x 3 micro-batches: 3 layer loads

// Three layers (embedding, block, head), three micro-batches.
// Horizontal: each micro-batch forward 0..2 then backward 2..0; the updates
// after the last backward.
// HORIZ-LABEL: func.func @three_layers
// HORIZ-NEXT:  sched.task fwd layer(0) mb(0)
// HORIZ-NEXT:  sched.task fwd layer(1) mb(0)
// HORIZ-NEXT:  sched.task fwd layer(2) mb(0)
// HORIZ-NEXT:  sched.task bwd layer(2) mb(0)
// HORIZ-NEXT:  sched.task bwd layer(1) mb(0)
// HORIZ-NEXT:  sched.task bwd layer(0) mb(0)
// HORIZ-NEXT:  sched.task fwd layer(0) mb(1)
// HORIZ-NEXT:  sched.task fwd layer(1) mb(1)
// HORIZ-NEXT:  sched.task fwd layer(2) mb(1)
// HORIZ-NEXT:  sched.task bwd layer(2) mb(1)
// HORIZ-NEXT:  sched.task bwd layer(1) mb(1)
// HORIZ-NEXT:  sched.task bwd layer(0) mb(1)
// HORIZ-NEXT:  sched.task fwd layer(0) mb(2)
// HORIZ-NEXT:  sched.task fwd layer(1) mb(2)
// HORIZ-NEXT:  sched.task fwd layer(2) mb(2)
// HORIZ-NEXT:  sched.task bwd layer(2) mb(2)
// HORIZ-NEXT:  sched.task bwd layer(1) mb(2)
// HORIZ-NEXT:  sched.task bwd layer(0) mb(2)
// HORIZ-NEXT:  sched.accumulate mean
// HORIZ-NEXT:  sched.task opt layer(0)
// HORIZ-NEXT:  sched.accumulate mean
// HORIZ-NEXT:  sched.accumulate mean
// HORIZ-NEXT:  sched.task opt layer(1)
// HORIZ-NEXT:  sched.accumulate mean
// HORIZ-NEXT:  sched.task opt layer(2)
// HORIZ-NEXT:  sched.accumulate mean
// Snake: all micro-batches of a layer, the direction flipping at every
// layer visit and across the turn to backward: the last micro-batch of one
// visit is the first of the next (layer 2's forward and backward meet at
// micro-batch 2).
// SNAKE-LABEL: func.func @three_layers
// SNAKE-NEXT:  sched.task fwd layer(0) mb(0)
// SNAKE-NEXT:  sched.task fwd layer(0) mb(1)
// SNAKE-NEXT:  sched.task fwd layer(0) mb(2)
// SNAKE-NEXT:  sched.task fwd layer(1) mb(2)
// SNAKE-NEXT:  sched.task fwd layer(1) mb(1)
// SNAKE-NEXT:  sched.task fwd layer(1) mb(0)
// SNAKE-NEXT:  sched.task fwd layer(2) mb(0)
// SNAKE-NEXT:  sched.task fwd layer(2) mb(1)
// SNAKE-NEXT:  sched.task fwd layer(2) mb(2)
// SNAKE-NEXT:  sched.task bwd layer(2) mb(2)
// SNAKE-NEXT:  sched.task bwd layer(2) mb(1)
// SNAKE-NEXT:  sched.task bwd layer(2) mb(0)
// SNAKE-NEXT:  sched.task bwd layer(1) mb(0)
// SNAKE-NEXT:  sched.task bwd layer(1) mb(1)
// SNAKE-NEXT:  sched.task bwd layer(1) mb(2)
// SNAKE-NEXT:  sched.task bwd layer(0) mb(2)
// SNAKE-NEXT:  sched.task bwd layer(0) mb(1)
// SNAKE-NEXT:  sched.task bwd layer(0) mb(0)
// SNAKE-NEXT:  sched.accumulate mean
// SNAKE-NEXT:  sched.task opt layer(0)
// SNAKE-NEXT:  sched.accumulate mean
// SNAKE-NEXT:  sched.accumulate mean
// SNAKE-NEXT:  sched.task opt layer(1)
// SNAKE-NEXT:  sched.accumulate mean
// SNAKE-NEXT:  sched.task opt layer(2)
// SNAKE-NEXT:  sched.accumulate mean
// The iteration records the order; slices move to their first user; an
// accumulate adds the micro-batches in the order they now run (layer 0's
// backward runs 2, 1, 0).
// FULL-LABEL: func.func @three_layers
// FULL:       sched.iteration({{.*}}) {microbatches = 3 : i64, order = "snake"}
// FULL-NEXT:  ^bb0(%[[IDS:.*]]: tensor<6xi64>, %[[LABELS:.*]]: tensor<6xi64>):
// FULL-NEXT:    %[[I0:.*]] = sched.slice %[[IDS]][0 of 3]
// FULL-NEXT:    sched.task fwd layer(0) mb(0) (%[[I0]])
// FULL:         %[[D2:.*]] = sched.task bwd layer(0) mb(2)
// FULL:         %[[D1:.*]] = sched.task bwd layer(0) mb(1)
// FULL:         %[[D0:.*]] = sched.task bwd layer(0) mb(0)
// FULL:         %[[G:.*]] = sched.accumulate mean %[[D2]], %[[D1]], %[[D0]] : tensor<10x4xf32>
// FULL-NEXT:    sched.task opt layer(0) (%[[G]])
module {
  train.param @"embed.weight" : tensor<10x4xf32> at 0
  train.param @"blocks.0.fc.weight" : tensor<4x4xf32> at 160
  train.param @"blocks.0.fc.bias" : tensor<4xf32> at 224
  train.param @"head.weight" : tensor<4x10xf32> at 240
  func.func @three_layers(%ids: tensor<6xi64>, %labels: tensor<6xi64>) -> tensor<f32> {
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

// Two layers, three micro-batches.
// HORIZ-LABEL: func.func @two_layers
// HORIZ-NEXT:  sched.task fwd layer(0) mb(0)
// HORIZ-NEXT:  sched.task fwd layer(1) mb(0)
// HORIZ-NEXT:  sched.task bwd layer(1) mb(0)
// HORIZ-NEXT:  sched.task bwd layer(0) mb(0)
// HORIZ-NEXT:  sched.task fwd layer(0) mb(1)
// HORIZ-NEXT:  sched.task fwd layer(1) mb(1)
// HORIZ-NEXT:  sched.task bwd layer(1) mb(1)
// HORIZ-NEXT:  sched.task bwd layer(0) mb(1)
// HORIZ-NEXT:  sched.task fwd layer(0) mb(2)
// HORIZ-NEXT:  sched.task fwd layer(1) mb(2)
// HORIZ-NEXT:  sched.task bwd layer(1) mb(2)
// HORIZ-NEXT:  sched.task bwd layer(0) mb(2)
// SNAKE-LABEL: func.func @two_layers
// SNAKE-NEXT:  sched.task fwd layer(0) mb(0)
// SNAKE-NEXT:  sched.task fwd layer(0) mb(1)
// SNAKE-NEXT:  sched.task fwd layer(0) mb(2)
// SNAKE-NEXT:  sched.task fwd layer(1) mb(2)
// SNAKE-NEXT:  sched.task fwd layer(1) mb(1)
// SNAKE-NEXT:  sched.task fwd layer(1) mb(0)
// SNAKE-NEXT:  sched.task bwd layer(1) mb(0)
// SNAKE-NEXT:  sched.task bwd layer(1) mb(1)
// SNAKE-NEXT:  sched.task bwd layer(1) mb(2)
// SNAKE-NEXT:  sched.task bwd layer(0) mb(2)
// SNAKE-NEXT:  sched.task bwd layer(0) mb(1)
// SNAKE-NEXT:  sched.task bwd layer(0) mb(0)
module {
  train.param @w1 : tensor<4x8xf32> at 0
  train.param @w2 : tensor<8x3xf32> at 128
  func.func @two_layers(%x: tensor<6x4xf32>, %labels: tensor<6xi64>) -> tensor<f32> {
    %w1 = train.param_value @w1 : tensor<4x8xf32>
    %w2 = train.param_value @w2 : tensor<8x3xf32>
    %h = train.matmul %x, %w1 : tensor<6x4xf32>, tensor<4x8xf32> -> tensor<6x8xf32>
    %r = train.relu %h : tensor<6x8xf32>
    %y = train.matmul %r, %w2 : tensor<6x8xf32>, tensor<8x3xf32> -> tensor<6x3xf32>
    %l = train.softmax_cross_entropy_loss %y, %labels : tensor<6x3xf32>, tensor<6xi64>
    return %l : tensor<f32>
  }
}
