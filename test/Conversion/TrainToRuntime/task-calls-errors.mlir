// RUN: spillway-opt %s -split-input-file -verify-diagnostics --convert-train-to-runtime
// The task functions convert-train-to-runtime lowers are what
// sched-outline-tasks writes. A hand-written one that breaks the shape the
// calling step's releases rely on is an error, not a double release.

// A result that is an argument: the step would release it twice.
module {
  // expected-error @+1 {{a task function must return values it computes, each once (as sched-outline-tasks writes it); result #0 is an argument}}
  func.func private @t(%a: tensor<2xf32>) -> tensor<2xf32> {
    return %a : tensor<2xf32>
  }
  func.func @step(%x: tensor<2xf32>) -> tensor<f32> {
    %y = func.call @t(%x) : (tensor<2xf32>) -> tensor<2xf32>
    %l = train.reduce_sum %y, [] {keepdims = false} : tensor<2xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// One value returned twice.
module {
  // expected-error @+1 {{result #1 is returned twice}}
  func.func private @t(%a: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
    %n = train.neg %a : tensor<2xf32>
    return %n, %n : tensor<2xf32>, tensor<2xf32>
  }
  func.func @step(%x: tensor<2xf32>) -> tensor<f32> {
    %y:2 = func.call @t(%x) : (tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>)
    %l = train.reduce_sum %y#0, [] {keepdims = false} : tensor<2xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// A call inside a task function (the lowering gives callees no frame).
module {
  func.func private @u() -> tensor<2xf32> {
    %c = train.constant dense<1.0> : tensor<2xf32>
    return %c : tensor<2xf32>
  }
  func.func private @t(%a: tensor<2xf32>) -> tensor<2xf32> {
    // expected-error @+1 {{in task function @t: a task function holds train ops only (as sched-outline-tasks writes it)}}
    %c = func.call @u() : () -> tensor<2xf32>
    %s = train.add %a, %c : tensor<2xf32>, tensor<2xf32> -> tensor<2xf32>
    return %s : tensor<2xf32>
  }
  func.func @step(%x: tensor<2xf32>) -> tensor<f32> {
    %y = func.call @t(%x) : (tensor<2xf32>) -> tensor<2xf32>
    %l = train.reduce_sum %y, [] {keepdims = false} : tensor<2xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// A task marker that is not [phase, layer, micro-batch].
module {
  func.func private @t(%a: tensor<2xf32>) -> tensor<2xf32> {
    %n = train.neg %a : tensor<2xf32>
    return %n : tensor<2xf32>
  }
  func.func @step(%x: tensor<2xf32>) -> tensor<f32> {
    // expected-error @+1 {{has a malformed train.task (expected array<i64: phase, layer, micro-batch>)}}
    %y = func.call @t(%x) {train.task = array<i64: 0, 1>} : (tensor<2xf32>) -> tensor<2xf32>
    %l = train.reduce_sum %y, [] {keepdims = false} : tensor<2xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}
