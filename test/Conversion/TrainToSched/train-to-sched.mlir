// convert-train-to-sched on Inputs/train-to-sched.mlir, the step of
// Inputs/models/train-to-sched.mlir after train-autodiff,
// train-attach-optimizer and train-partition-layers
// (test/Dialect/Sched/Inputs/regenerate.sh writes it).
// RUN: spillway-opt %S/Inputs/train-to-sched.mlir -split-input-file -verify-diagnostics --convert-train-to-sched | FileCheck %s

// An embedding, two blocks and a head: one task per (phase, layer) in the
// horizontal order of the whole batch, fwd 0..3, bwd 3..0, opt 0..3. Values
// crossing tasks are results and operands; weights and constants are re-read
// in each task that uses them, never passed along.
// CHECK-LABEL: func.func @step
// CHECK-SAME:    (%[[IDS:.*]]: tensor<6xi64>, %[[LABELS:.*]]: tensor<6xi64>)
// CHECK:       %[[LOSS:.*]] = sched.iteration(%[[IDS]], %[[LABELS]]) : (tensor<6xi64>, tensor<6xi64>) -> tensor<f32> {
// CHECK-NEXT:  ^bb0(%[[I:.*]]: tensor<6xi64>, %[[L:.*]]: tensor<6xi64>):
// CHECK-NEXT:    %[[X0:.*]] = sched.task fwd layer(0) (%[[I]]) : (tensor<6xi64>) -> tensor<6x4xf32> {
// CHECK-NEXT:    ^bb0(%{{.*}}: tensor<6xi64>):
// CHECK-NEXT:      train.param_value @embed.weight : tensor<10x4xf32>
// CHECK-NEXT:      train.gather
// CHECK-NEXT:      sched.yield
// CHECK-NEXT:    {{^ *}}}{{$}}
// CHECK-NEXT:    %[[B0:.*]]:2 = sched.task fwd layer(1) (%[[X0]]) : (tensor<6x4xf32>) -> (tensor<6x4xf32>, tensor<6x4xf32>) {
// CHECK:         %[[B1:.*]]:2 = sched.task fwd layer(2) (%[[B0]]#1)
// CHECK:         %[[H:.*]]:2 = sched.task fwd layer(3) (%[[B1]]#1, %[[L]]) : (tensor<6x4xf32>, tensor<6xi64>) -> (tensor<6x10xf32>, tensor<f32>) {
// CHECK-NOT:       train.layer
// CHECK:           train.softmax_cross_entropy_loss
// CHECK:         %[[DH:.*]]:2 = sched.task bwd layer(3) (%[[H]]#0, %[[L]], %[[B1]]#1)
// CHECK-NEXT:    ^bb0(
// CHECK-NEXT:      train.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:      train.softmax_cross_entropy_loss_grad
// CHECK-NEXT:      train.param_value @head.weight
// CHECK:         %[[D1:.*]]:3 = sched.task bwd layer(2) (%[[B1]]#0, %[[DH]]#0, %[[B0]]#1)
// CHECK:           train.param_value @blocks.1.fc.weight
// CHECK:         %[[D0:.*]]:3 = sched.task bwd layer(1) (%[[B0]]#0, %[[D1]]#2, %[[X0]])
// CHECK:         %[[DE:.*]] = sched.task bwd layer(0) (%[[I]], %[[D0]]#2)
// CHECK:           train.gather_grad
// CHECK:         sched.task opt layer(0) (%[[DE]]) : (tensor<10x4xf32>) -> () {
// CHECK-NEXT:    ^bb0(
// CHECK-NEXT:      train.adamw @embed.weight
// CHECK-NEXT:    {{^ *}}}{{$}}
// CHECK-NEXT:    sched.task opt layer(1) (%[[D0]]#0, %[[D0]]#1)
// CHECK-NEXT:    ^bb0(
// CHECK-NEXT:      train.adamw @blocks.0.fc.weight
// CHECK-NEXT:      train.adamw @blocks.0.fc.bias
// CHECK-NEXT:    {{^ *}}}{{$}}
// CHECK-NEXT:    sched.task opt layer(2) (%[[D1]]#0, %[[D1]]#1)
// CHECK:         sched.task opt layer(3) (%[[DH]]#1)
// CHECK:         sched.yield %[[H]]#1 : tensor<f32>
// CHECK-NEXT:  {{^ *}}}{{$}}
// CHECK-NEXT:  return %[[LOSS]] : tensor<f32>
