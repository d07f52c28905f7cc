// RUN: spillway-opt %s --sched-overlap-optimizer="fraction=0.5 granule=1" | FileCheck %s

// A shared parameter's update waits for every layer in its grad_from, even
// one whose backward does not read it and whose result the update does not
// read: @a's gradient is complete only after bwd layer(1), which here runs
// after bwd layer(0) (what the dataflow alone would allow). The two updates
// then follow bwd layer(1) in layer order. Each layer has 4 elements: [0, 2)
// deferred, each just before its layer's first forward.
// CHECK-LABEL: func.func @grad_from
// CHECK:       sched.task opt deferred layer(0) () : () -> () {
// CHECK-NEXT:    train.adamw_apply_pending @a [0, 2)
// CHECK:       sched.task fwd layer(0)
// CHECK:       sched.task opt deferred layer(1) () : () -> () {
// CHECK-NEXT:    train.adamw_apply_pending @b [0, 2)
// CHECK:       sched.task fwd layer(1)
// CHECK:       sched.task bwd layer(0)
// CHECK:       sched.task bwd layer(1)
// CHECK:       sched.task opt layer(0)
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:    train.adamw_defer @a [0, 2), %{{.*}}
// CHECK-NEXT:    train.adamw @a [2, 4), %{{.*}}
// CHECK:       sched.task opt layer(1)
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:    train.adamw_defer @b [0, 2), %{{.*}}
// CHECK-NEXT:    train.adamw @b [2, 4), %{{.*}}
// CHECK:       sched.yield
module attributes {train.layers = [
    #train.layer<"a", params = [@a], shared = [#train.shared<@a, used_by = [0, 1], grad_from = [0, 1]>]>,
    #train.layer<"b", params = [@b], uses = [@a]>]} {
  train.param @a : tensor<4xf32> at 0
  train.param @b : tensor<4xf32> at 16
  func.func @grad_from(%x: tensor<4xf32>) -> tensor<4xf32> {
    %r = sched.iteration(%x) : (tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%in: tensor<4xf32>):
      %y = sched.task fwd layer(0) (%in) : (tensor<4xf32>) -> tensor<4xf32> {
      ^bb0(%arg: tensor<4xf32>):
        %a = train.param_value @a : tensor<4xf32>
        %m = train.mul %arg, %a : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
        sched.yield %m : tensor<4xf32>
      }
      %z = sched.task fwd layer(1) (%y) : (tensor<4xf32>) -> tensor<4xf32> {
      ^bb0(%arg: tensor<4xf32>):
        %b = train.param_value @b : tensor<4xf32>
        %m = train.mul %arg, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
        sched.yield %m : tensor<4xf32>
      }
      %ga = sched.task bwd layer(0) (%in) : (tensor<4xf32>) -> tensor<4xf32> {
      ^bb0(%arg: tensor<4xf32>):
        sched.yield %arg : tensor<4xf32>
      }
      %gb = sched.task bwd layer(1) (%y) : (tensor<4xf32>) -> tensor<4xf32> {
      ^bb0(%arg: tensor<4xf32>):
        sched.yield %arg : tensor<4xf32>
      }
      sched.task opt layer(1) (%gb) : (tensor<4xf32>) -> () {
      ^bb0(%g: tensor<4xf32>):
        train.adamw @b, %g {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0} : tensor<4xf32>
        sched.yield
      }
      sched.task opt layer(0) (%ga) : (tensor<4xf32>) -> () {
      ^bb0(%g: tensor<4xf32>):
        train.adamw @a, %g {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0} : tensor<4xf32>
        sched.yield
      }
      sched.yield %z : tensor<4xf32>
    }
    return %r : tensor<4xf32>
  }
}
