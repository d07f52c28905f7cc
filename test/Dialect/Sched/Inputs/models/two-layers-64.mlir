module {
  train.param @w1 : tensor<64x64xf32> at 0
  train.param @b1 : tensor<64xf32> at 16384
  train.param @w2 : tensor<64x3xf32> at 16640
  func.func @two_layers(%x: tensor<6x64xf32>, %labels: tensor<6xi64>) -> tensor<f32> {
    %w1 = train.param_value @w1 : tensor<64x64xf32>
    %b1 = train.param_value @b1 : tensor<64xf32>
    %w2 = train.param_value @w2 : tensor<64x3xf32>
    %m = train.matmul %x, %w1 : tensor<6x64xf32>, tensor<64x64xf32> -> tensor<6x64xf32>
    %h = train.add %m, %b1 : tensor<6x64xf32>, tensor<64xf32> -> tensor<6x64xf32>
    %r = train.relu %h : tensor<6x64xf32>
    %y = train.matmul %r, %w2 : tensor<6x64xf32>, tensor<64x3xf32> -> tensor<6x3xf32>
    %l = train.softmax_cross_entropy_loss %y, %labels : tensor<6x3xf32>, tensor<6xi64>
    return %l : tensor<f32>
  }
}
