// The fused rotary embedding of x [B=1, H=2, S=3, D=4] with constant cos/sin
// tables [S, D] (positions 0..2, inverse frequencies 1 and 0.1, rotate-half
// layout) broadcast over batch and heads; loss = sum(rope(x) * r).
// Weights: 48 floats.
module attributes {train.weights = "w.bin"} {
  train.param @x : tensor<1x2x3x4xf32> at 0
  train.param @r : tensor<1x2x3x4xf32> at 96
  func.func @main() -> tensor<f32> {
    %x = train.param_value @x : tensor<1x2x3x4xf32>
    %r = train.param_value @r : tensor<1x2x3x4xf32>
    %cos = train.constant dense<[[1.0, 1.0, 1.0, 1.0], [0.5403023, 0.9950042, 0.5403023, 0.9950042], [-0.4161468, 0.9800666, -0.4161468, 0.9800666]]> : tensor<3x4xf32>
    %sin = train.constant dense<[[0.0, 0.0, 0.0, 0.0], [0.8414710, 0.0998334, 0.8414710, 0.0998334], [0.9092974, 0.1986693, 0.9092974, 0.1986693]]> : tensor<3x4xf32>
    %y = train.rope %x, %cos, %sin : tensor<1x2x3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>
    %m = train.mul %y, %r : tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32> -> tensor<1x2x3x4xf32>
    %l = train.reduce_sum %m, [] {keepdims = false} : tensor<1x2x3x4xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}
