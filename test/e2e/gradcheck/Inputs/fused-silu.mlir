// The fused SiLU (x * sigmoid(x)) on [2, 3, 4]; loss = sum(silu(x) * r).
// Weights: 48 floats.
module attributes {train.weights = "w.bin"} {
  train.param @x : tensor<2x3x4xf32> at 0
  train.param @r : tensor<2x3x4xf32> at 96
  func.func @main() -> tensor<f32> {
    %x = train.param_value @x : tensor<2x3x4xf32>
    %r = train.param_value @r : tensor<2x3x4xf32>
    %y = train.silu %x : tensor<2x3x4xf32>
    %m = train.mul %y, %r : tensor<2x3x4xf32>, tensor<2x3x4xf32> -> tensor<2x3x4xf32>
    %l = train.reduce_sum %m, [] {keepdims = false} : tensor<2x3x4xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}
