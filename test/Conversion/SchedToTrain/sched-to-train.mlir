// RUN: spillway-opt %s -split-input-file -verify-diagnostics --convert-sched-to-train | FileCheck %s

// The tasks inlined in the schedule's order; a slice is a train.slice of the
// leading dimension, a mean accumulate adds in the listed order and divides
// by the count.
// CHECK-LABEL: func.func @step
// CHECK-SAME:    (%[[X:.*]]: tensor<4x3xf32>)
// CHECK-NOT:   sched.
// CHECK:       %[[X1:.*]] = train.slice %[[X]] {starts = array<i64: 2, 0>, steps = array<i64: 1, 1>} : tensor<4x3xf32> -> tensor<2x3xf32>
// CHECK-NEXT:  %[[N1:.*]] = train.neg %[[X1]] : tensor<2x3xf32>
// CHECK-NEXT:  %[[X0:.*]] = train.slice %[[X]] {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>}
// CHECK-NEXT:  %[[N0:.*]] = train.neg %[[X0]] : tensor<2x3xf32>
// CHECK-NEXT:  %[[S:.*]] = train.add %[[N1]], %[[N0]] : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
// CHECK-NEXT:  %[[C:.*]] = train.constant dense<2.000000e+00> : tensor<f32>
// CHECK-NEXT:  %[[M:.*]] = train.div %[[S]], %[[C]] : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
// CHECK-NEXT:  return %[[M]] : tensor<2x3xf32>
func.func @step(%x: tensor<4x3xf32>) -> tensor<2x3xf32> {
  %r = sched.iteration(%x) {microbatches = 2 : i64} : (tensor<4x3xf32>) -> tensor<2x3xf32> {
  ^bb0(%a: tensor<4x3xf32>):
    %a1 = sched.slice %a [1 of 2] : tensor<4x3xf32> -> tensor<2x3xf32>
    %n1 = sched.task fwd layer(0) mb(1) (%a1) : (tensor<2x3xf32>) -> tensor<2x3xf32> {
    ^bb0(%i: tensor<2x3xf32>):
      %n = train.neg %i : tensor<2x3xf32>
      sched.yield %n : tensor<2x3xf32>
    }
    %a0 = sched.slice %a [0 of 2] : tensor<4x3xf32> -> tensor<2x3xf32>
    %n0 = sched.task fwd layer(0) mb(0) (%a0) : (tensor<2x3xf32>) -> tensor<2x3xf32> {
    ^bb0(%i: tensor<2x3xf32>):
      %n = train.neg %i : tensor<2x3xf32>
      sched.yield %n : tensor<2x3xf32>
    }
    %m = sched.accumulate mean %n1, %n0 : tensor<2x3xf32>
    sched.yield %m : tensor<2x3xf32>
  }
  return %r : tensor<2x3xf32>
}

// -----

// An offload plan's block ops stay, in order, for convert-train-to-runtime.
// CHECK-LABEL: func.func @blocks
// CHECK:       %[[T:.*]] = sched.move params layer(0) host -> gpu prio(demand) at(0) : !sched.timepoint
// CHECK-NEXT:  sched.await %[[T]] : !sched.timepoint
// CHECK-NEXT:  sched.bind params layer(0) gpu
// CHECK-NEXT:  train.add
// CHECK-NEXT:  sched.drop params layer(0) gpu
func.func @blocks(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = sched.iteration(%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %t = sched.move params layer(0) host -> gpu prio(demand) at(0) : !sched.timepoint
    sched.await %t : !sched.timepoint
    sched.bind params layer(0) gpu
    %y = sched.task fwd layer(0) (%a) : (tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%b: tensor<4xf32>):
      %s = train.add %b, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
      sched.yield %s : tensor<4xf32>
    }
    sched.drop params layer(0) gpu
    sched.yield %y : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

// -----

// An accumulate of the iteration's own arguments, with no train op in the
// input (the pass loads the train dialect itself): a repeated operand and a
// task that yields its argument are summed like any other value.
// CHECK-LABEL: func.func @block_args
// CHECK-SAME:    (%[[X:.*]]: tensor<4xf32>, %[[Z:.*]]: tensor<4xf32>)
// CHECK-NEXT:  %[[S:.*]] = train.add %[[X]], %[[Z]] : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
// CHECK-NEXT:  return %[[S]] : tensor<4xf32>
func.func @block_args(%x: tensor<4xf32>, %z: tensor<4xf32>) -> tensor<4xf32> {
  %r = sched.iteration(%x, %z) {microbatches = 2 : i64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>, %b: tensor<4xf32>):
    %s = sched.accumulate sum %a, %b : tensor<4xf32>
    sched.yield %s : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

// -----

// CHECK-LABEL: func.func @repeated
// CHECK-SAME:    (%[[X:.*]]: tensor<4xf32>)
// CHECK-NEXT:  %[[S:.*]] = train.add %[[X]], %[[X]] : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
// CHECK-NEXT:  return %[[S]] : tensor<4xf32>
func.func @repeated(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = sched.iteration(%x) {microbatches = 2 : i64} : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %s = sched.accumulate sum %a, %a : tensor<4xf32>
    sched.yield %s : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

// -----

// CHECK-LABEL: func.func @identity_task
// CHECK-SAME:    (%[[X:.*]]: tensor<4xf32>)
// CHECK-NEXT:  %[[S:.*]] = train.add %[[X]], %[[X]] : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
// CHECK-NEXT:  %[[C:.*]] = train.constant dense<2.000000e+00> : tensor<f32>
// CHECK-NEXT:  %[[M:.*]] = train.div %[[S]], %[[C]] : tensor<4xf32>, tensor<f32> -> tensor<4xf32>
// CHECK-NEXT:  return %[[M]] : tensor<4xf32>
func.func @identity_task(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = sched.iteration(%x) {microbatches = 2 : i64} : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %y1 = sched.task fwd layer(0) mb(1) (%a) : (tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%i: tensor<4xf32>):
      sched.yield %i : tensor<4xf32>
    }
    %y0 = sched.task fwd layer(0) mb(0) (%a) : (tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%i: tensor<4xf32>):
      sched.yield %i : tensor<4xf32>
    }
    %s = sched.accumulate mean %y1, %y1 : tensor<4xf32>
    sched.yield %s : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

// -----

// A deferred opt task (sched-overlap-optimizer) is inlined where it stands,
// before the forward that reads the parameter; the split update in its
// opt task's place.
// CHECK-LABEL: func.func @deferred
// CHECK-SAME:    (%[[X:.*]]: tensor<4xf32>)
// CHECK-NEXT:  train.adamw_apply_pending @w [0, 2)
// CHECK-NEXT:  %[[W:.*]] = train.param_value @w
// CHECK-NEXT:  %[[Y:.*]] = train.mul %[[X]], %[[W]]
// CHECK-NEXT:  train.adamw_defer @w [0, 2), %[[X]]
// CHECK-NEXT:  train.adamw @w [2, 4), %[[X]]
// CHECK-NEXT:  return %[[Y]] : tensor<4xf32>
module {
  train.param @w : tensor<4xf32> at 0
  func.func @deferred(%x: tensor<4xf32>) -> tensor<4xf32> {
    %r = sched.iteration(%x) : (tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%a: tensor<4xf32>):
      sched.task opt deferred layer(0) () : () -> () {
        train.adamw_apply_pending @w [0, 2)
      }
      %y = sched.task fwd layer(0) (%a) : (tensor<4xf32>) -> tensor<4xf32> {
      ^bb0(%i: tensor<4xf32>):
        %w = train.param_value @w : tensor<4xf32>
        %m = train.mul %i, %w : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
        sched.yield %m : tensor<4xf32>
      }
      sched.task opt layer(0) (%a) : (tensor<4xf32>) -> () {
      ^bb0(%g: tensor<4xf32>):
        train.adamw_defer @w [0, 2), %g {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0} : tensor<4xf32>
        train.adamw @w [2, 4), %g {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0} : tensor<4xf32>
      }
      sched.yield %y : tensor<4xf32>
    }
    return %r : tensor<4xf32>
  }
}

// -----

// Which task a call (sched-outline-tasks) or an optimizer update is:
// train.task = [phase (0 fwd, 1 bwd, 2 opt), layer, micro-batch or -1], for
// the runtime's task markers. Other ops carry nothing.
// CHECK-LABEL: func.func @markers
// CHECK:       %[[W:.*]] = train.param_value @w
// CHECK-NOT:   train.task
// CHECK-NEXT:  %[[Y:.*]] = call @task.fwd.layer0(%{{.*}}, %[[W]]) {train.task = array<i64: 0, 0, 0>}
// CHECK-NEXT:  train.adamw @w, %[[Y]] {{{.*}}train.task = array<i64: 2, 0, -1>
module {
  train.param @w : tensor<4xf32> at 0
  func.func private @task.fwd.layer0(%i: tensor<4xf32>, %w: tensor<4xf32>) -> tensor<4xf32> {
    %m = train.mul %i, %w : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
    return %m : tensor<4xf32>
  }
  func.func @markers(%x: tensor<4xf32>) -> tensor<4xf32> {
    %r = sched.iteration(%x) : (tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%a: tensor<4xf32>):
      %y = sched.task fwd layer(0) mb(0) (%a) : (tensor<4xf32>) -> tensor<4xf32> {
      ^bb0(%i: tensor<4xf32>):
        %w = train.param_value @w : tensor<4xf32>
        %m = func.call @task.fwd.layer0(%i, %w) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
        sched.yield %m : tensor<4xf32>
      }
      sched.task opt layer(0) (%y) : (tensor<4xf32>) -> () {
      ^bb0(%g: tensor<4xf32>):
        train.adamw @w, %g {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0} : tensor<4xf32>
      }
      sched.yield %y : tensor<4xf32>
    }
    return %r : tensor<4xf32>
  }
}
