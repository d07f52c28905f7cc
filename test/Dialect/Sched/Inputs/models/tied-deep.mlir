module {
  train.param @wte : tensor<10x4xf32> at 0
  train.param @"h.0.w" : tensor<4x4xf32> at 160
  train.param @"h.1.w" : tensor<4x4xf32> at 224
  func.func @tied(%ids: tensor<6xi64>, %labels: tensor<6xi64>) -> tensor<f32> {
    %e = train.param_value @wte : tensor<10x4xf32>
    %w0 = train.param_value @"h.0.w" : tensor<4x4xf32>
    %w1 = train.param_value @"h.1.w" : tensor<4x4xf32>
    %x = train.gather %e, %ids : tensor<10x4xf32>, tensor<6xi64> -> tensor<6x4xf32>
    %y0 = train.matmul %x, %w0 : tensor<6x4xf32>, tensor<4x4xf32> -> tensor<6x4xf32>
    %t0 = train.tanh %y0 : tensor<6x4xf32>
    %y1 = train.matmul %t0, %w1 : tensor<6x4xf32>, tensor<4x4xf32> -> tensor<6x4xf32>
    %et = train.transpose %e, [1, 0] : tensor<10x4xf32> -> tensor<4x10xf32>
    %logits = train.matmul %y1, %et : tensor<6x4xf32>, tensor<4x10xf32> -> tensor<6x10xf32>
    %l = train.softmax_cross_entropy_loss %logits, %labels : tensor<6x10xf32>, tensor<6xi64>
    return %l : tensor<f32>
  }
}
