module {
  train.param @w1 : tensor<4x8xf32> at 0
  train.param @w2 : tensor<8x3xf32> at 128
  func.func @two_layers(%x: tensor<6x4xf32>, %labels: tensor<6xi64>) -> tensor<f32> {
    %w1 = train.param_value @w1 : tensor<4x8xf32>
    %w2 = train.param_value @w2 : tensor<8x3xf32>
    %h = train.matmul %x, %w1 : tensor<6x4xf32>, tensor<4x8xf32> -> tensor<6x8xf32>
    %r = train.relu %h : tensor<6x8xf32>
    %f = train.reshape %r : tensor<6x8xf32> -> tensor<6x2x4xf32>
    %g = train.reshape %f : tensor<6x2x4xf32> -> tensor<6x8xf32>
    %y = train.matmul %g, %w2 : tensor<6x8xf32>, tensor<8x3xf32> -> tensor<6x3xf32>
    %l = train.softmax_cross_entropy_loss %y, %labels : tensor<6x3xf32>, tensor<6xi64>
    return %l : tensor<f32>
  }
}
