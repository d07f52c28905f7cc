// RUN: spillway-opt %s -split-input-file -verify-diagnostics --train-mixed-precision

// Once only: the module says it is bf16-mixed already.
// expected-error @+1 {{train-mixed-precision: the module is bf16-mixed already (train.precision): rounding it again changes nothing}}
module attributes {train.precision = "bf16-mixed"} {
  func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
    return %x : tensor<2xf32>
  }
}

// -----

// Before autodiff: the roundings' gradient rules must run.
module {
  train.param @w : tensor<2xf32> at 0
  func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
    %w = train.param_value @w : tensor<2xf32>
    // expected-error @+1 {{train-mixed-precision runs on the forward graph, before train-autodiff; this module holds gradients already}}
    train.param_grad @w, %x : tensor<2xf32>
    return %w : tensor<2xf32>
  }
}

// -----

// The attribute is the pass's: "bf16-mixed" on the module, nothing else.
// expected-error @+1 {{train.precision is the module's "bf16-mixed" (train-mixed-precision sets it), got "bf16"}}
module attributes {train.precision = "bf16"} {
}
