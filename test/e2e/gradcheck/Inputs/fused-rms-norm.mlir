// The fused RMSNorm over the last dimension of [2, 3, 8], input and scale
// parameters; loss = sum(rms_norm(x, scale) * r). Weights: 104 floats.
module attributes {train.weights = "w.bin"} {
  train.param @x : tensor<2x3x8xf32> at 0
  train.param @scale : tensor<8xf32> at 192
  train.param @r : tensor<2x3x8xf32> at 224
  func.func @main() -> tensor<f32> {
    %x = train.param_value @x : tensor<2x3x8xf32>
    %s = train.param_value @scale : tensor<8xf32>
    %r = train.param_value @r : tensor<2x3x8xf32>
    %y = train.rms_norm %x, %s {epsilon = 1.0e-6 : f32} : tensor<2x3x8xf32>, tensor<8xf32>
    %m = train.mul %y, %r : tensor<2x3x8xf32>, tensor<2x3x8xf32> -> tensor<2x3x8xf32>
    %l = train.reduce_sum %m, [] {keepdims = false} : tensor<2x3x8xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}
