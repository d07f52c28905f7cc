module {
  train.param @"embed.weight" : tensor<10x4xf32> at 0
  train.param @"blocks.0.fc.weight" : tensor<4x4xf32> at 160
  train.param @"blocks.0.fc.bias" : tensor<4xf32> at 224
  train.param @"blocks.1.fc.weight" : tensor<4x4xf32> at 240
  train.param @"blocks.1.fc.bias" : tensor<4xf32> at 304
  train.param @"head.weight" : tensor<4x10xf32> at 320
  func.func @step(%ids: tensor<6xi64>, %labels: tensor<6xi64>) -> tensor<f32> {
    %e = train.param_value @"embed.weight" : tensor<10x4xf32>
    %w0 = train.param_value @"blocks.0.fc.weight" : tensor<4x4xf32>
    %b0 = train.param_value @"blocks.0.fc.bias" : tensor<4xf32>
    %w1 = train.param_value @"blocks.1.fc.weight" : tensor<4x4xf32>
    %b1 = train.param_value @"blocks.1.fc.bias" : tensor<4xf32>
    %wh = train.param_value @"head.weight" : tensor<4x10xf32>
    %x0 = train.gather %e, %ids : tensor<10x4xf32>, tensor<6xi64> -> tensor<6x4xf32>
    %y0 = train.linear %x0, %w0, %b0 : tensor<6x4xf32>, tensor<4x4xf32>, tensor<4xf32> -> tensor<6x4xf32>
    %r0 = train.relu %y0 : tensor<6x4xf32>
    %x1 = train.add %x0, %r0 : tensor<6x4xf32>, tensor<6x4xf32> -> tensor<6x4xf32>
    %y1 = train.linear %x1, %w1, %b1 : tensor<6x4xf32>, tensor<4x4xf32>, tensor<4xf32> -> tensor<6x4xf32>
    %r1 = train.relu %y1 : tensor<6x4xf32>
    %x2 = train.add %x1, %r1 : tensor<6x4xf32>, tensor<6x4xf32> -> tensor<6x4xf32>
    %logits = train.matmul %x2, %wh : tensor<6x4xf32>, tensor<4x10xf32> -> tensor<6x10xf32>
    %l = train.softmax_cross_entropy_loss %logits, %labels : tensor<6x10xf32>, tensor<6xi64>
    return %l : tensor<f32>
  }
}
