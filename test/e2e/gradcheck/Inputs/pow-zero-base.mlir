// y = a^e with a trainable exponent and a constant base holding zeros:
// d/de (a^e) = a^e * log a is 0 * -inf at a = 0, which torch (and Spillway)
// define as 0; the finite difference there is 0 too (0^e stays 0 for e > 0).
// loss = sum(a^e * r). Weights: e [3] at 0, r [2, 3] at 16.
module attributes {train.weights = "w.bin"} {
  train.param @e : tensor<3xf32> at 0
  train.param @r : tensor<2x3xf32> at 16
  func.func @main() -> tensor<f32> {
    %a = train.constant dense<[[0.0, 0.5, 1.5], [2.0, 0.0, 0.75]]> : tensor<2x3xf32>
    %e = train.param_value @e : tensor<3xf32>
    %r = train.param_value @r : tensor<2x3xf32>
    %y = train.pow %a, %e : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
    %m = train.mul %y, %r : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
    %l = train.reduce_sum %m, [] {keepdims = false} : tensor<2x3xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}
