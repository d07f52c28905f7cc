// A two-layer model whose hidden activations are stored as bf16 between
// the layers and read twice (so their gradient is accumulated as bf16):
// h = tanh(x @ w1), s = bf16(h), loss = sum((f32(s) @ w2) * f32(s)[:, :8]).
// Weights: w1 [16, 32] at 0, w2 [32, 8] at 2048.
module attributes {train.weights = "w.bin"} {
  train.param @w1 : tensor<16x32xf32> at 0
  train.param @w2 : tensor<32x8xf32> at 2048
  func.func @main(%x: tensor<4x16xf32> {train.name = "x"}) -> tensor<f32> {
    %w1 = train.param_value @w1 : tensor<16x32xf32>
    %w2 = train.param_value @w2 : tensor<32x8xf32>
    %a = train.matmul %x, %w1 : tensor<4x16xf32>, tensor<16x32xf32> -> tensor<4x32xf32>
    %h = train.tanh %a : tensor<4x32xf32>
    %s = train.cast %h : tensor<4x32xf32> -> tensor<4x32xbf16>
    %f1 = train.cast %s : tensor<4x32xbf16> -> tensor<4x32xf32>
    %f2 = train.cast %s : tensor<4x32xbf16> -> tensor<4x32xf32>
    %o = train.matmul %f1, %w2 : tensor<4x32xf32>, tensor<32x8xf32> -> tensor<4x8xf32>
    %g = train.slice %f2 {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : tensor<4x32xf32> -> tensor<4x8xf32>
    %p = train.mul %o, %g : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
    %l = train.reduce_sum %p, [] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}
