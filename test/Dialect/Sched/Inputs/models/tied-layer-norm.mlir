module {
  train.param @wte : tensor<10x4xf32> at 0
  train.param @"ln.scale" : tensor<4xf32> at 160
  train.param @"ln.bias" : tensor<4xf32> at 176
  func.func @tied(%ids: tensor<6xi64>, %labels: tensor<6xi64>) -> tensor<f32> {
    %e = train.param_value @wte : tensor<10x4xf32>
    %s = train.param_value @"ln.scale" : tensor<4xf32>
    %b = train.param_value @"ln.bias" : tensor<4xf32>
    %x = train.gather %e, %ids : tensor<10x4xf32>, tensor<6xi64> -> tensor<6x4xf32>
    %t = train.tanh %x : tensor<6x4xf32>
    %n = train.layer_norm %t, %s, %b : tensor<6x4xf32>, tensor<4xf32>, tensor<4xf32>
    %et = train.transpose %e, [1, 0] : tensor<10x4xf32> -> tensor<4x10xf32>
    %logits = train.matmul %n, %et : tensor<6x4xf32>, tensor<4x10xf32> -> tensor<6x10xf32>
    %l = train.softmax_cross_entropy_loss %logits, %labels : tensor<6x10xf32>, tensor<6xi64>
    return %l : tensor<f32>
  }
}
