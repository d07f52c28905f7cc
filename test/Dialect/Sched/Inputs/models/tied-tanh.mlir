module {
  train.param @"embed.weight" : tensor<10x4xf32> at 0
  train.param @"blocks.0.fc.weight" : tensor<4x4xf32> at 160
  func.func @tied(%ids: tensor<4xi64>, %labels: tensor<4xi64>) -> tensor<f32> {
    %e = train.param_value @"embed.weight" : tensor<10x4xf32>
    %w0 = train.param_value @"blocks.0.fc.weight" : tensor<4x4xf32>
    %x0 = train.gather %e, %ids : tensor<10x4xf32>, tensor<4xi64> -> tensor<4x4xf32>
    %y0 = train.matmul %x0, %w0 : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
    %x1 = train.tanh %y0 : tensor<4x4xf32>
    %et = train.transpose %e, [1, 0] : tensor<10x4xf32> -> tensor<4x10xf32>
    %logits = train.matmul %x1, %et : tensor<4x4xf32>, tensor<4x10xf32> -> tensor<4x10xf32>
    %l = train.softmax_cross_entropy_loss %logits, %labels : tensor<4x10xf32>, tensor<4xi64>
    return %l : tensor<f32>
  }
}
