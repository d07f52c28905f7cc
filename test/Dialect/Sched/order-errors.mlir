// RUN: spillway-opt %s -split-input-file -verify-diagnostics --sched-order=order=horizontal
// RUN: not spillway-opt %s --sched-order=order=zigzag 2>&1 | FileCheck %s --check-prefix=BADORDER

// BADORDER: sched-order: order must be horizontal or snake, got 'zigzag'

// Layer 0's forward reads layer 1's: no order puts layer 0 first.
func.func @dataflow(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = sched.iteration(%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %y = sched.task fwd layer(1) (%a) : (tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%i: tensor<4xf32>):
      %n = train.neg %i : tensor<4xf32>
      sched.yield %n : tensor<4xf32>
    }
    // expected-error @+1 {{sched-order: the horizontal order would run fwd layer(0) before fwd layer(1), whose result it reads}}
    %z = sched.task fwd layer(0) (%y) : (tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%i: tensor<4xf32>):
      %n = train.neg %i : tensor<4xf32>
      sched.yield %n : tensor<4xf32>
    }
    sched.yield %z : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

// -----

// Layer 1's update reads @w, which layer 0's update has already changed.
module {
  train.param @w : tensor<4xf32> at 0
  func.func @read_after_update(%g: tensor<4xf32>) {
    sched.iteration(%g) : (tensor<4xf32>) -> () {
    ^bb0(%a: tensor<4xf32>):
      sched.task opt layer(0) (%a) : (tensor<4xf32>) -> () {
      ^bb0(%i: tensor<4xf32>):
        train.adamw @w, %i {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0} : tensor<4xf32>
      }
      // expected-error @+1 {{sched-order: the horizontal order would run opt layer(1), which reads @w, after opt layer(0), which updates it}}
      sched.task opt layer(1) () : () -> () {
        %w = train.param_value @w : tensor<4xf32>
      }
    }
    return
  }
}

// -----

// sched-order comes before sched-overlap-optimizer: it would move a deferred
// task among the updates. The module is Inputs/models/one-layer-sched.mlir
// after --sched-overlap-optimizer="fraction=0.5 granule=1".
module attributes {train.layers = [#train.layer<"a", params = [@a]>]} {
  train.param @a : tensor<4xf32> at 0
  func.func @then_order(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %0 = sched.iteration(%arg0) : (tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%arg1: tensor<4xf32>):
      // expected-error @+1 {{sched-order: the iteration has deferred updates: run sched-order before sched-overlap-optimizer}}
      sched.task opt deferred layer(0) () : () -> () {
        train.adamw_apply_pending @a [0, 2)
      }
      %1 = sched.task fwd layer(0) (%arg1) : (tensor<4xf32>) -> tensor<4xf32> {
      ^bb0(%arg2: tensor<4xf32>):
        %2 = train.param_value @a : tensor<4xf32>
        %3 = train.mul %arg2, %2 : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
        sched.yield %3 : tensor<4xf32>
      }
      sched.task opt layer(0) (%arg1) : (tensor<4xf32>) -> () {
      ^bb0(%arg2: tensor<4xf32>):
        train.adamw_defer @a [0, 2), %arg2 {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 0.000000e+00 : f64} : tensor<4xf32>
        train.adamw @a [2, 4), %arg2 {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 0.000000e+00 : f64} : tensor<4xf32>
      }
      sched.yield %1 : tensor<4xf32>
    }
    return %0 : tensor<4xf32>
  }
}
