// The fused attention with grouped KV heads (4 query heads, 2 KV heads), once
// causal and once not (with another scale), Q, K and V parameters;
// loss = sum((attention_causal + attention_full) * r). Weights: 144 floats.
module attributes {train.weights = "w.bin"} {
  train.param @q : tensor<1x4x3x4xf32> at 0
  train.param @k : tensor<1x2x3x4xf32> at 192
  train.param @v : tensor<1x2x3x4xf32> at 288
  train.param @r : tensor<1x4x3x4xf32> at 384
  func.func @main() -> tensor<f32> {
    %q = train.param_value @q : tensor<1x4x3x4xf32>
    %k = train.param_value @k : tensor<1x2x3x4xf32>
    %v = train.param_value @v : tensor<1x2x3x4xf32>
    %r = train.param_value @r : tensor<1x4x3x4xf32>
    %a = train.attention %q, %k, %v {scale = 0.5} : tensor<1x4x3x4xf32>, tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>
    %b = train.attention %q, %k, %v {scale = 0.25, causal = false} : tensor<1x4x3x4xf32>, tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>
    %y = train.add %a, %b : tensor<1x4x3x4xf32>, tensor<1x4x3x4xf32> -> tensor<1x4x3x4xf32>
    %m = train.mul %y, %r : tensor<1x4x3x4xf32>, tensor<1x4x3x4xf32> -> tensor<1x4x3x4xf32>
    %l = train.reduce_sum %m, [] {keepdims = false} : tensor<1x4x3x4xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}
