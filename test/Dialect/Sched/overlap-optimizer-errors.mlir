// RUN: spillway-opt %s -split-input-file -verify-diagnostics --sched-overlap-optimizer=fraction=0.5
// RUN: not spillway-opt %s -split-input-file --sched-overlap-optimizer=fraction=1.5 2>&1 | FileCheck %s --check-prefix=RANGE
// RUN: not spillway-opt %s -split-input-file --sched-overlap-optimizer=fraction=-0.25 2>&1 | FileCheck %s --check-prefix=NEG
// RUN: not spillway-opt %s -split-input-file --sched-overlap-optimizer="fraction=0.5 granule=0" 2>&1 | FileCheck %s --check-prefix=GRAN
// GRAN: granule must be at least 1 element, got 0
// RANGE: error: sched-overlap-optimizer: fraction must lie in [0, 1], got 1.5
// NEG: error: sched-overlap-optimizer: fraction must lie in [0, 1], got -0.25

// No train.layers: nothing says which parameters make a layer.
module {
  train.param @w : tensor<4xf32> at 0
  func.func @no_layers(%x: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error @+1 {{sched-overlap-optimizer: the module has no train.layers: run train-partition-layers first}}
    %r = sched.iteration(%x) : (tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%in: tensor<4xf32>):
      sched.yield %in : tensor<4xf32>
    }
    return %r : tensor<4xf32>
  }
}

// -----

// The pass ran before: its deferred tasks are there.
module attributes {train.layers = [#train.layer<"w", params = [@w]>]} {
  train.param @w : tensor<4xf32> at 0
  func.func @twice(%x: tensor<4xf32>) -> tensor<4xf32> {
    %r = sched.iteration(%x) : (tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%in: tensor<4xf32>):
      // expected-error @+1 {{sched-overlap-optimizer: the iteration already has deferred updates (the pass ran before)}}
      sched.task opt deferred layer(0) () : () -> () {
        train.adamw_apply_pending @w [0, 2)
      }
      sched.yield %in : tensor<4xf32>
    }
    return %r : tensor<4xf32>
  }
}

// -----

// An opt task updating a parameter of another layer.
module attributes {train.layers = [#train.layer<"a", params = [@a]>, #train.layer<"b", params = [@b]>]} {
  train.param @a : tensor<4xf32> at 0
  train.param @b : tensor<4xf32> at 16
  func.func @foreign(%x: tensor<4xf32>) -> tensor<4xf32> {
    %r = sched.iteration(%x) : (tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%in: tensor<4xf32>):
      sched.task opt layer(0) (%in) : (tensor<4xf32>) -> () {
      ^bb0(%g: tensor<4xf32>):
        // expected-error @+1 {{sched-overlap-optimizer: the opt task of layer 0 updates @b, which train.layers[0] does not list}}
        train.adamw @b, %g {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0} : tensor<4xf32>
      }
      sched.yield %in : tensor<4xf32>
    }
    return %r : tensor<4xf32>
  }
}

// -----

// An update already split into ranges.
module attributes {train.layers = [#train.layer<"a", params = [@a]>]} {
  train.param @a : tensor<4xf32> at 0
  func.func @split(%x: tensor<4xf32>) -> tensor<4xf32> {
    %r = sched.iteration(%x) : (tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%in: tensor<4xf32>):
      sched.task opt layer(0) (%in) : (tensor<4xf32>) -> () {
      ^bb0(%g: tensor<4xf32>):
        // expected-error @+1 {{sched-overlap-optimizer: the update of @a is already split into element ranges}}
        train.adamw @a [0, 4), %g {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0} : tensor<4xf32>
      }
      sched.yield %in : tensor<4xf32>
    }
    return %r : tensor<4xf32>
  }
}

// -----

// With F > 0, only train.adamw splits by element: another update (here a
// gradient handed to the runtime) cannot be deferred in part.
module attributes {train.layers = [#train.layer<"a", params = [@a]>]} {
  train.param @a : tensor<4xf32> at 0
  func.func @not_adamw(%x: tensor<4xf32>) -> tensor<4xf32> {
    %r = sched.iteration(%x) : (tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%in: tensor<4xf32>):
      sched.task opt layer(0) (%in) : (tensor<4xf32>) -> () {
      ^bb0(%g: tensor<4xf32>):
        // expected-error @+1 {{sched-overlap-optimizer: cannot defer part of train.param_grad: only train.adamw updates split by element (use fraction 0)}}
        train.param_grad @a, %g : tensor<4xf32>
      }
      sched.yield %in : tensor<4xf32>
    }
    return %r : tensor<4xf32>
  }
}

// -----

// A task of a layer train.layers does not have.
module attributes {train.layers = [#train.layer<"a", params = [@a]>]} {
  train.param @a : tensor<4xf32> at 0
  func.func @bad_layer(%x: tensor<4xf32>) -> tensor<4xf32> {
    %r = sched.iteration(%x) : (tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%in: tensor<4xf32>):
      // expected-error @+1 {{sched-overlap-optimizer: layer 3 is not in train.layers (1 layers)}}
      %y = sched.task fwd layer(3) (%in) : (tensor<4xf32>) -> tensor<4xf32> {
      ^bb0(%a: tensor<4xf32>):
        sched.yield %a : tensor<4xf32>
      }
      sched.yield %y : tensor<4xf32>
    }
    return %r : tensor<4xf32>
  }
}
