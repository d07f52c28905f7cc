// RUN: spillway-opt %s -split-input-file | spillway-opt -split-input-file | FileCheck %s

// A two-layer iteration split into two micro-batches: the batch inputs
// sliced, each layer's forward and backward once per micro-batch, the
// gradients and the loss averaged, the update once.
// CHECK-LABEL: func.func @step
// CHECK:       %{{.*}} = sched.iteration(%{{.*}}, %{{.*}}) {microbatches = 2 : i64, order = "snake"} : (tensor<4x3xf32>, tensor<4xi64>) -> tensor<f32> {
// CHECK:         sched.slice %{{.*}}[0 of 2] : tensor<4x3xf32> -> tensor<2x3xf32>
// CHECK:         sched.task fwd layer(0) mb(0) (%{{.*}}) : (tensor<2x3xf32>) -> tensor<2x3xf32> {
// CHECK:           train.param_value @w
// CHECK:           sched.yield %{{.*}} : tensor<2x3xf32>
// CHECK:         sched.task fwd layer(1) mb(1) (%{{.*}}, %{{.*}}) : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<f32> {
// CHECK:         sched.task bwd layer(0) mb(0) (%{{.*}}) : (tensor<2x3xf32>) -> tensor<3x3xf32> {
// CHECK:         %[[G:.*]] = sched.accumulate mean %{{.*}}, %{{.*}} : tensor<3x3xf32>
// CHECK:         sched.task opt layer(0) (%[[G]]) : (tensor<3x3xf32>) -> () {
// CHECK:           train.adamw @w, {{.*}} : tensor<3x3xf32>
// CHECK-NEXT:    {{^ *}}}
// CHECK:         %[[L:.*]] = sched.accumulate mean %{{.*}}, %{{.*}} : tensor<f32>
// CHECK:         sched.yield %[[L]] : tensor<f32>
module {
  train.param @w : tensor<3x3xf32> at 0
  func.func @step(%x: tensor<4x3xf32>, %y: tensor<4xi64>) -> tensor<f32> {
    %loss = sched.iteration(%x, %y) {microbatches = 2 : i64, order = "snake"}
        : (tensor<4x3xf32>, tensor<4xi64>) -> tensor<f32> {
    ^bb0(%a: tensor<4x3xf32>, %b: tensor<4xi64>):
      %a0 = sched.slice %a [0 of 2] : tensor<4x3xf32> -> tensor<2x3xf32>
      %a1 = sched.slice %a [1 of 2] : tensor<4x3xf32> -> tensor<2x3xf32>
      %b0 = sched.slice %b [0 of 2] : tensor<4xi64> -> tensor<2xi64>
      %b1 = sched.slice %b [1 of 2] : tensor<4xi64> -> tensor<2xi64>
      %h0 = sched.task fwd layer(0) mb(0) (%a0) : (tensor<2x3xf32>) -> tensor<2x3xf32> {
      ^bb0(%i: tensor<2x3xf32>):
        %w = train.param_value @w : tensor<3x3xf32>
        %r = train.matmul %i, %w : tensor<2x3xf32>, tensor<3x3xf32> -> tensor<2x3xf32>
        sched.yield %r : tensor<2x3xf32>
      }
      %h1 = sched.task fwd layer(0) mb(1) (%a1) : (tensor<2x3xf32>) -> tensor<2x3xf32> {
      ^bb0(%i: tensor<2x3xf32>):
        %w = train.param_value @w : tensor<3x3xf32>
        %r = train.matmul %i, %w : tensor<2x3xf32>, tensor<3x3xf32> -> tensor<2x3xf32>
        sched.yield %r : tensor<2x3xf32>
      }
      %l1 = sched.task fwd layer(1) mb(1) (%h1, %b1) : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<f32> {
      ^bb0(%i: tensor<2x3xf32>, %j: tensor<2xi64>):
        %l = train.softmax_cross_entropy_loss %i, %j : tensor<2x3xf32>, tensor<2xi64>
        sched.yield %l : tensor<f32>
      }
      %l0 = sched.task fwd layer(1) mb(0) (%h0, %b0) : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<f32> {
      ^bb0(%i: tensor<2x3xf32>, %j: tensor<2xi64>):
        %l = train.softmax_cross_entropy_loss %i, %j : tensor<2x3xf32>, tensor<2xi64>
        sched.yield %l : tensor<f32>
      }
      %g0 = sched.task bwd layer(0) mb(0) (%a0) : (tensor<2x3xf32>) -> tensor<3x3xf32> {
      ^bb0(%i: tensor<2x3xf32>):
        %t = train.transpose %i, [1, 0] : tensor<2x3xf32> -> tensor<3x2xf32>
        %g = train.matmul %t, %i : tensor<3x2xf32>, tensor<2x3xf32> -> tensor<3x3xf32>
        sched.yield %g : tensor<3x3xf32>
      }
      %g1 = sched.task bwd layer(0) mb(1) (%a1) : (tensor<2x3xf32>) -> tensor<3x3xf32> {
      ^bb0(%i: tensor<2x3xf32>):
        %t = train.transpose %i, [1, 0] : tensor<2x3xf32> -> tensor<3x2xf32>
        %g = train.matmul %t, %i : tensor<3x2xf32>, tensor<2x3xf32> -> tensor<3x3xf32>
        sched.yield %g : tensor<3x3xf32>
      }
      %g = sched.accumulate mean %g0, %g1 : tensor<3x3xf32>
      sched.task opt layer(0) (%g) : (tensor<3x3xf32>) -> () {
      ^bb0(%i: tensor<3x3xf32>):
        train.adamw @w, %i {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0} : tensor<3x3xf32>
        sched.yield
      }
      %l = sched.accumulate mean %l0, %l1 : tensor<f32>
      sched.yield %l : tensor<f32>
    }
    return %loss : tensor<f32>
  }
}

// -----

// An offload plan's block ops.
// CHECK-LABEL: func.func @blocks
// CHECK:       %[[T:.*]] = sched.move params layer(1) ssd -> host prio(prefetch) at(8192) : !sched.timepoint
// CHECK-NEXT:  %[[U:.*]] = sched.move params layer(1) host -> gpu prio(demand) : !sched.timepoint
// CHECK-NEXT:  sched.await %[[T]], %[[U]] : !sched.timepoint, !sched.timepoint
// CHECK-NEXT:  sched.drop params layer(1) host
// CHECK-NEXT:  sched.bind params layer(1) gpu
// CHECK-NEXT:  sched.alloc params layer(2) part(1) host at(4096)
// CHECK-NEXT:  sched.alloc params layer(3) gpu
// CHECK-NEXT:  sched.stage_grads gradstage layer(1) first(%{{.*}}, %{{.*}}) at(256) {params = [@w, @w]} : tensor<4xf32>, tensor<4xf32>
// CHECK-NEXT:  sched.accumulate_grads layer(1) add on host
// CHECK-NEXT:  %{{.*}} = sched.gradient @w layer(1) host mean(2) : tensor<4xf32>
// CHECK-NEXT:  sched.grad_norms layer(1) host mean(2)
// CHECK-NEXT:  %{{.*}} = sched.clip_grad_norm [@w] {max_norm = 1.000000e+00 : f64} : tensor<f32>
func.func @blocks(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = sched.iteration(%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %t = sched.move params layer(1) ssd -> host prio(prefetch) at(8192) : !sched.timepoint
    %u = sched.move params layer(1) host -> gpu prio(demand) : !sched.timepoint
    sched.await %t, %u : !sched.timepoint, !sched.timepoint
    sched.drop params layer(1) host
    sched.bind params layer(1) gpu
    sched.alloc params layer(2) part(1) host at(4096)
    sched.alloc params layer(3) gpu
    sched.stage_grads gradstage layer(1) first(%a, %a) at(256) {params = [@w, @w]} : tensor<4xf32>, tensor<4xf32>
    sched.accumulate_grads layer(1) add on host
    %g = sched.gradient @w layer(1) host mean(2) : tensor<4xf32>
    sched.grad_norms layer(1) host mean(2)
    %c = sched.clip_grad_norm [@w] {max_norm = 1.0 : f64} : tensor<f32>
    sched.yield %g : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

// -----

// Activations off the GPU: put into a block (its `layer` is the activation
// index), moved like any block, taken back as a new value.
// CHECK-LABEL: func.func @activations
// CHECK:       sched.put_activation %{{.*}} index(3) at(512) : tensor<2x4xf32>
// CHECK-NEXT:  %[[T:.*]] = sched.move activations layer(3) gpu -> host prio(writeback) at(0) : !sched.timepoint
// CHECK-NEXT:  sched.await %[[T]] : !sched.timepoint
// CHECK-NEXT:  sched.drop activations layer(3) gpu
// CHECK:       %[[B:.*]] = sched.take_activation index(3) : tensor<2x4xf32>
// CHECK-NEXT:  sched.yield %[[B]] : tensor<2x4xf32>
func.func @activations(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %r = sched.iteration(%x) : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%a: tensor<2x4xf32>):
    sched.put_activation %a index(3) at(512) : tensor<2x4xf32>
    %t = sched.move activations layer(3) gpu -> host prio(writeback) at(0) : !sched.timepoint
    sched.await %t : !sched.timepoint
    sched.drop activations layer(3) gpu
    %u = sched.move activations layer(3) host -> gpu prio(demand) : !sched.timepoint
    sched.await %u : !sched.timepoint
    %b = sched.take_activation index(3) : tensor<2x4xf32>
    sched.yield %b : tensor<2x4xf32>
  }
  return %r : tensor<2x4xf32>
}

// -----

// The optimizer overlap's form: a deferred opt task applying last
// iteration's pending update of @w's elements [0, 4), and the opt task
// deferring them again and updating the rest.
// CHECK-LABEL: func.func @overlap
// CHECK:         sched.task opt deferred layer(0) () : () -> () {
// CHECK-NEXT:      train.adamw_apply_pending @w [0, 4)
// CHECK-NEXT:    }
// CHECK:         sched.task opt layer(0) (%{{.*}}) : (tensor<3x3xf32>) -> () {
// CHECK:           train.adamw_defer @w [0, 4), %{{.*}} {{{.*}}} : tensor<3x3xf32>
// CHECK-NEXT:      train.adamw @w [4, 9), %{{.*}} {{{.*}}} : tensor<3x3xf32>
module {
  train.param @w : tensor<3x3xf32> at 0
  func.func @overlap(%x: tensor<3x3xf32>) {
    sched.iteration(%x) : (tensor<3x3xf32>) -> () {
    ^bb0(%a: tensor<3x3xf32>):
      sched.task opt deferred layer(0) () : () -> () {
        train.adamw_apply_pending @w [0, 4)
      }
      sched.task opt layer(0) (%a) : (tensor<3x3xf32>) -> () {
      ^bb0(%g: tensor<3x3xf32>):
        train.adamw_defer @w [0, 4), %g {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0} : tensor<3x3xf32>
        train.adamw @w [4, 9), %g {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0} : tensor<3x3xf32>
      }
    }
    return
  }
}
