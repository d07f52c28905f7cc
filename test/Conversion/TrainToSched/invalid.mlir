// RUN: spillway-opt %s -split-input-file -verify-diagnostics --convert-train-to-sched

// expected-error @+1 {{no function carries train.layer/train.phase: run train-partition-layers first}}
module {
  func.func @step(%x: tensor<4xf32>) -> tensor<4xf32> {
    %y = train.neg %x : tensor<4xf32>
    return %y : tensor<4xf32>
  }
}

// -----

func.func @step(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = train.neg %x {train.layer = 0 : i64, train.phase = "fwd"} : tensor<4xf32>
  // expected-error @+1 {{op has no train.layer and train.phase (fwd, bwd or opt): run train-partition-layers first}}
  %z = train.neg %y {train.layer = 0 : i64, train.phase = "sideways"} : tensor<4xf32>
  return %z : tensor<4xf32>
}

// -----

// Layer 1's forward reads layer 0's backward: no horizontal order runs it.
func.func @step(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = train.neg %x {train.layer = 0 : i64, train.phase = "bwd"} : tensor<4xf32>
  // expected-error @+1 {{this op (fwd of layer 1) reads a value computed by train.neg (bwd of layer 0), which runs later in the iteration}}
  %z = train.neg %y {train.layer = 1 : i64, train.phase = "fwd"} : tensor<4xf32>
  return %z : tensor<4xf32>
}
