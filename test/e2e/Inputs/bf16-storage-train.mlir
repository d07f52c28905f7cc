// A two-layer classifier whose hidden activations are stored as bf16
// between the layers and read twice (so their gradient is accumulated as
// bf16): h = tanh(x @ w1), s = bf16(h),
// loss = cross_entropy(f32(s) @ w2 + tanh(f32(s) @ w2), y).
// Weights: w1 [16, 32] at 0, w2 [32, 8] at 2048.
module attributes {train.weights = "w.bin"} {
  train.param @w1 : tensor<16x32xf32> at 0
  train.param @w2 : tensor<32x8xf32> at 2048
  func.func @main(%x: tensor<4x16xf32> {train.name = "x"}, %y: tensor<4xi64> {train.name = "y"}) -> tensor<f32> {
    %w1 = train.param_value @w1 : tensor<16x32xf32>
    %w2 = train.param_value @w2 : tensor<32x8xf32>
    %a = train.matmul %x, %w1 : tensor<4x16xf32>, tensor<16x32xf32> -> tensor<4x32xf32>
    %h = train.tanh %a : tensor<4x32xf32>
    %s = train.cast %h : tensor<4x32xf32> -> tensor<4x32xbf16>
    %f1 = train.cast %s : tensor<4x32xbf16> -> tensor<4x32xf32>
    %f2 = train.cast %s : tensor<4x32xbf16> -> tensor<4x32xf32>
    %o = train.matmul %f1, %w2 : tensor<4x32xf32>, tensor<32x8xf32> -> tensor<4x8xf32>
    %o2 = train.matmul %f2, %w2 : tensor<4x32xf32>, tensor<32x8xf32> -> tensor<4x8xf32>
    %g = train.tanh %o2 : tensor<4x8xf32>
    %z = train.add %o, %g : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
    %l = train.softmax_cross_entropy_loss %z, %y : tensor<4x8xf32>, tensor<4xi64>
    return %l : tensor<f32>
  }
}
