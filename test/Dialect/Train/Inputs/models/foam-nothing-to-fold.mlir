// expected-warning @+1 {{train-attach-optimizer: optimizer=foam folds no parameter: the model has no weight matrix besides its embeddings and LM head, so every parameter gets AdamW}}
module {
  train.param @w : tensor<4x3xf32> at 0
  func.func @logreg(%x: tensor<2x4xf32> {train.name = "x"}, %y: tensor<2xi64> {train.name = "y"}) -> tensor<f32> {
    %a = train.param_value @w : tensor<4x3xf32>
    %o = train.matmul %x, %a : tensor<2x4xf32>, tensor<4x3xf32> -> tensor<2x3xf32>
    %l = train.softmax_cross_entropy_loss %o, %y : tensor<2x3xf32>, tensor<2xi64>
    return %l : tensor<f32>
  }
}
