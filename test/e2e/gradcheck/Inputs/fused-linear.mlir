// The fused linear (x @ w + b) on a batched [2, 3, 4] input, every operand a
// parameter; loss = sum(linear(x, w, b) * r). Weights: 79 floats.
module attributes {train.weights = "w.bin"} {
  train.param @x : tensor<2x3x4xf32> at 0
  train.param @w : tensor<4x5xf32> at 96
  train.param @b : tensor<5xf32> at 176
  train.param @r : tensor<2x3x5xf32> at 196
  func.func @main() -> tensor<f32> {
    %x = train.param_value @x : tensor<2x3x4xf32>
    %w = train.param_value @w : tensor<4x5xf32>
    %b = train.param_value @b : tensor<5xf32>
    %r = train.param_value @r : tensor<2x3x5xf32>
    %y = train.linear %x, %w, %b : tensor<2x3x4xf32>, tensor<4x5xf32>, tensor<5xf32> -> tensor<2x3x5xf32>
    %m = train.mul %y, %r : tensor<2x3x5xf32>, tensor<2x3x5xf32> -> tensor<2x3x5xf32>
    %l = train.reduce_sum %m, [] {keepdims = false} : tensor<2x3x5xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}
