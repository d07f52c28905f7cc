// RUN: spillway-opt %s -split-input-file --sched-outline-tasks | FileCheck %s
// Once is enough: the second run finds only calls, reads and records.
// RUN: spillway-opt %s --sched-outline-tasks -o %t.once.mlir
// RUN: spillway-opt %t.once.mlir --sched-outline-tasks -o %t.twice.mlir
// RUN: spillway-opt %t.once.mlir -o %t.once.printed.mlir
// RUN: diff %t.once.printed.mlir %t.twice.mlir

// Two micro-batches of two isomorphic layers (the same matmul of the same
// shapes on @w1 and @w2): the four fwd tasks call one function, the
// parameter read before the call. The bwd tasks record their gradient
// after their call, which returns it; the loss task yields its argument
// too (not returned: the task yields it directly). The opt tasks (updates,
// one with a read that must not move above the update) stay as they are.
// CHECK-LABEL: module
// CHECK:       func.func private @task.fwd.layer0(%[[X:.*]]: tensor<2x3xf32>, %[[W:.*]]: tensor<3x3xf32>) -> tensor<2x3xf32> {
// CHECK-NEXT:    %[[R:.*]] = train.matmul %[[X]], %[[W]]
// CHECK-NEXT:    return %[[R]] : tensor<2x3xf32>
// CHECK-NEXT:  }
// CHECK:       func.func private @task.fwd.layer2(%{{.*}}: tensor<2x3xf32>, %{{.*}}: tensor<2xi64>) -> tensor<f32> {
// CHECK-NEXT:    train.softmax_cross_entropy_loss
// CHECK-NEXT:    return
// CHECK:       func.func private @task.bwd.layer0(%{{.*}}: tensor<2x3xf32>) -> tensor<3x3xf32> {
// CHECK-NEXT:    train.transpose
// CHECK-NEXT:    train.matmul
// CHECK-NEXT:    return
// CHECK-NOT:   func.func private
// CHECK:       func.func @step
// CHECK:         sched.task fwd layer(0) mb(0)
// CHECK-NEXT:    ^bb0(%[[I:.*]]: tensor<2x3xf32>):
// CHECK-NEXT:      %[[V:.*]] = train.param_value @w1
// CHECK-NEXT:      %[[C:.*]] = func.call @task.fwd.layer0(%[[I]], %[[V]])
// CHECK-NEXT:      sched.yield %[[C]]
// CHECK:         sched.task fwd layer(0) mb(1)
// CHECK:           train.param_value @w1
// CHECK-NEXT:      func.call @task.fwd.layer0(
// CHECK:         sched.task fwd layer(1) mb(0)
// CHECK:           train.param_value @w2
// CHECK-NEXT:      func.call @task.fwd.layer0(
// CHECK:         sched.task fwd layer(1) mb(1)
// CHECK:           train.param_value @w2
// CHECK-NEXT:      func.call @task.fwd.layer0(
// CHECK:         sched.task fwd layer(2) mb(0) (%{{.*}}, %{{.*}}) : (tensor<2x3xf32>, tensor<2xi64>) -> (tensor<f32>, tensor<2x3xf32>)
// CHECK-NEXT:    ^bb0(%[[H:.*]]: tensor<2x3xf32>, %[[J:.*]]: tensor<2xi64>):
// CHECK-NEXT:      %[[L:.*]] = func.call @task.fwd.layer2(%[[H]], %[[J]])
// CHECK-NEXT:      sched.yield %[[L]], %[[H]]
// CHECK:         sched.task bwd layer(0) mb(0)
// CHECK-NEXT:    ^bb0
// CHECK-NEXT:      %[[G:.*]] = func.call @task.bwd.layer0(
// CHECK-NEXT:      train.param_grad @w1, %[[G]]
// CHECK-NEXT:      sched.yield %[[G]]
// CHECK:         sched.task bwd layer(0) mb(1)
// CHECK:           func.call @task.bwd.layer0(
// CHECK:         sched.task opt layer(0)
// CHECK-NEXT:    ^bb0
// CHECK-NEXT:      train.adamw @w1
// CHECK-NEXT:    {{^ *}}}
// CHECK:         sched.task opt layer(1)
// CHECK-NEXT:    ^bb0
// CHECK-NEXT:      train.param_value @w2
// CHECK-NEXT:      train.adamw @w2
// CHECK-NEXT:    {{^ *}}}
module {
  train.param @w1 : tensor<3x3xf32> at 0
  train.param @w2 : tensor<3x3xf32> at 64
  func.func @step(%x: tensor<4x3xf32>, %y: tensor<4xi64>) -> tensor<f32> {
    %loss = sched.iteration(%x, %y) {microbatches = 2 : i64, order = "horizontal"}
        : (tensor<4x3xf32>, tensor<4xi64>) -> tensor<f32> {
    ^bb0(%a: tensor<4x3xf32>, %b: tensor<4xi64>):
      %a0 = sched.slice %a [0 of 2] : tensor<4x3xf32> -> tensor<2x3xf32>
      %a1 = sched.slice %a [1 of 2] : tensor<4x3xf32> -> tensor<2x3xf32>
      %b0 = sched.slice %b [0 of 2] : tensor<4xi64> -> tensor<2xi64>
      %b1 = sched.slice %b [1 of 2] : tensor<4xi64> -> tensor<2xi64>
      %h0 = sched.task fwd layer(0) mb(0) (%a0) : (tensor<2x3xf32>) -> tensor<2x3xf32> {
      ^bb0(%i: tensor<2x3xf32>):
        %w = train.param_value @w1 : tensor<3x3xf32>
        %r = train.matmul %i, %w : tensor<2x3xf32>, tensor<3x3xf32> -> tensor<2x3xf32>
        sched.yield %r : tensor<2x3xf32>
      }
      %h1 = sched.task fwd layer(0) mb(1) (%a1) : (tensor<2x3xf32>) -> tensor<2x3xf32> {
      ^bb0(%i: tensor<2x3xf32>):
        %w = train.param_value @w1 : tensor<3x3xf32>
        %r = train.matmul %i, %w : tensor<2x3xf32>, tensor<3x3xf32> -> tensor<2x3xf32>
        sched.yield %r : tensor<2x3xf32>
      }
      %k0 = sched.task fwd layer(1) mb(0) (%h0) : (tensor<2x3xf32>) -> tensor<2x3xf32> {
      ^bb0(%i: tensor<2x3xf32>):
        %w = train.param_value @w2 : tensor<3x3xf32>
        %r = train.matmul %i, %w : tensor<2x3xf32>, tensor<3x3xf32> -> tensor<2x3xf32>
        sched.yield %r : tensor<2x3xf32>
      }
      %k1 = sched.task fwd layer(1) mb(1) (%h1) : (tensor<2x3xf32>) -> tensor<2x3xf32> {
      ^bb0(%i: tensor<2x3xf32>):
        %w = train.param_value @w2 : tensor<3x3xf32>
        %r = train.matmul %i, %w : tensor<2x3xf32>, tensor<3x3xf32> -> tensor<2x3xf32>
        sched.yield %r : tensor<2x3xf32>
      }
      %l0:2 = sched.task fwd layer(2) mb(0) (%k0, %b0) : (tensor<2x3xf32>, tensor<2xi64>) -> (tensor<f32>, tensor<2x3xf32>) {
      ^bb0(%i: tensor<2x3xf32>, %j: tensor<2xi64>):
        %l = train.softmax_cross_entropy_loss %i, %j : tensor<2x3xf32>, tensor<2xi64>
        sched.yield %l, %i : tensor<f32>, tensor<2x3xf32>
      }
      %l1:2 = sched.task fwd layer(2) mb(1) (%k1, %b1) : (tensor<2x3xf32>, tensor<2xi64>) -> (tensor<f32>, tensor<2x3xf32>) {
      ^bb0(%i: tensor<2x3xf32>, %j: tensor<2xi64>):
        %l = train.softmax_cross_entropy_loss %i, %j : tensor<2x3xf32>, tensor<2xi64>
        sched.yield %l, %i : tensor<f32>, tensor<2x3xf32>
      }
      %g0 = sched.task bwd layer(0) mb(0) (%l0#1) : (tensor<2x3xf32>) -> tensor<3x3xf32> {
      ^bb0(%i: tensor<2x3xf32>):
        %t = train.transpose %i, [1, 0] : tensor<2x3xf32> -> tensor<3x2xf32>
        %g = train.matmul %t, %i : tensor<3x2xf32>, tensor<2x3xf32> -> tensor<3x3xf32>
        train.param_grad @w1, %g : tensor<3x3xf32>
        sched.yield %g : tensor<3x3xf32>
      }
      %g1 = sched.task bwd layer(0) mb(1) (%l1#1) : (tensor<2x3xf32>) -> tensor<3x3xf32> {
      ^bb0(%i: tensor<2x3xf32>):
        %t = train.transpose %i, [1, 0] : tensor<2x3xf32> -> tensor<3x2xf32>
        %g = train.matmul %t, %i : tensor<3x2xf32>, tensor<2x3xf32> -> tensor<3x3xf32>
        train.param_grad @w1, %g : tensor<3x3xf32>
        sched.yield %g : tensor<3x3xf32>
      }
      %g = sched.accumulate mean %g0, %g1 : tensor<3x3xf32>
      sched.task opt layer(0) (%g) : (tensor<3x3xf32>) -> () {
      ^bb0(%d: tensor<3x3xf32>):
        train.adamw @w1, %d {lr = 1.0e-03 : f64, beta1 = 9.0e-01 : f64, beta2 = 9.99e-01 : f64, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64} : tensor<3x3xf32>
      }
      sched.task opt layer(1) (%g) : (tensor<3x3xf32>) -> () {
      ^bb0(%d: tensor<3x3xf32>):
        %w = train.param_value @w2 : tensor<3x3xf32>
        train.adamw @w2, %d {lr = 1.0e-03 : f64, beta1 = 9.0e-01 : f64, beta2 = 9.99e-01 : f64, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64} : tensor<3x3xf32>
      }
      %l = sched.accumulate mean %l0#0, %l1#0 : tensor<f32>
      sched.yield %l : tensor<f32>
    }
    return %loss : tensor<f32>
  }
}

// -----

// Tasks that differ only in a constant's elements share no function, even
// when the tool is told to elide large constants in what it prints (the
// key does not follow the --mlir-* print options).
// RUN: spillway-opt %s -split-input-file --sched-outline-tasks --mlir-elide-elementsattrs-if-larger=1 | FileCheck %s --check-prefix=ELIDE
// ELIDE-LABEL: func.func private @task.fwd.layer0(%{{.*}}: tensor<3xf32>)
// ELIDE:       func.func private @task.fwd.layer1(
// ELIDE-LABEL: func.func @constants
// ELIDE:         func.call @task.fwd.layer0(
// ELIDE:         func.call @task.fwd.layer1(
module {
  func.func @constants(%x: tensor<3xf32>) -> tensor<3xf32> {
    %r = sched.iteration(%x) {microbatches = 1 : i64, order = "horizontal"}
        : (tensor<3xf32>) -> tensor<3xf32> {
    ^bb0(%a: tensor<3xf32>):
      %h = sched.task fwd layer(0) mb(0) (%a) : (tensor<3xf32>) -> tensor<3xf32> {
      ^bb0(%i: tensor<3xf32>):
        %c = train.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
        %s = train.add %i, %c : tensor<3xf32>, tensor<3xf32> -> tensor<3xf32>
        sched.yield %s : tensor<3xf32>
      }
      %k = sched.task fwd layer(1) mb(0) (%h) : (tensor<3xf32>) -> tensor<3xf32> {
      ^bb0(%i: tensor<3xf32>):
        %c = train.constant dense<[1.0, 2.0, 4.0]> : tensor<3xf32>
        %s = train.add %i, %c : tensor<3xf32>, tensor<3xf32> -> tensor<3xf32>
        sched.yield %s : tensor<3xf32>
      }
      sched.yield %k : tensor<3xf32>
    }
    return %r : tensor<3xf32>
  }
}
