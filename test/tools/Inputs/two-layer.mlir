// Two layers with hand-countable costs for report.test (batch 4).
// blocks.0: linear 8 -> 16 and relu; blocks.1: linear 16 -> 4 and the loss.
module {
  train.param @"blocks.0.fc.weight" : tensor<8x16xf32> at 0
  train.param @"blocks.0.fc.bias" : tensor<16xf32> at 512
  train.param @"blocks.1.fc.weight" : tensor<16x4xf32> at 576
  train.param @"blocks.1.fc.bias" : tensor<4xf32> at 832
  func.func @step(%x: tensor<4x8xf32>, %labels: tensor<4xi64>) -> tensor<f32> {
    %w0 = train.param_value @"blocks.0.fc.weight" : tensor<8x16xf32>
    %b0 = train.param_value @"blocks.0.fc.bias" : tensor<16xf32>
    %w1 = train.param_value @"blocks.1.fc.weight" : tensor<16x4xf32>
    %b1 = train.param_value @"blocks.1.fc.bias" : tensor<4xf32>
    %y0 = train.linear %x, %w0, %b0 : tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32> -> tensor<4x16xf32>
    %r0 = train.relu %y0 : tensor<4x16xf32>
    %y1 = train.linear %r0, %w1, %b1 : tensor<4x16xf32>, tensor<16x4xf32>, tensor<4xf32> -> tensor<4x4xf32>
    %l = train.softmax_cross_entropy_loss %y1, %labels : tensor<4x4xf32>, tensor<4xi64>
    return %l : tensor<f32>
  }
}
