module {
  train.param @wte : tensor<10x6xf32> at 0
  train.param @wpe : tensor<3x6xf32> at 240
  train.param @"fc.weight" : tensor<5x6xf32> at 312
  train.param @"fc.bias" : tensor<5xf32> at 432
  train.param @head : tensor<5x7xf32> at 452
  func.func @lm(%ids: tensor<2x3xi64> {train.name = "ids"}, %y: tensor<6xi64> {train.name = "y"}) -> tensor<f32> {
    %e = train.param_value @wte : tensor<10x6xf32>
    %p = train.param_value @wpe : tensor<3x6xf32>
    %w = train.param_value @"fc.weight" : tensor<5x6xf32>
    %b = train.param_value @"fc.bias" : tensor<5xf32>
    %hw = train.param_value @head : tensor<5x7xf32>
    %g = train.gather %e, %ids : tensor<10x6xf32>, tensor<2x3xi64> -> tensor<2x3x6xf32>
    %x = train.add %g, %p : tensor<2x3x6xf32>, tensor<3x6xf32> -> tensor<2x3x6xf32>
    %wt = train.transpose %w, [1, 0] : tensor<5x6xf32> -> tensor<6x5xf32>
    %h = train.matmul %x, %wt : tensor<2x3x6xf32>, tensor<6x5xf32> -> tensor<2x3x5xf32>
    %hb = train.add %h, %b : tensor<2x3x5xf32>, tensor<5xf32> -> tensor<2x3x5xf32>
    %r = train.relu %hb : tensor<2x3x5xf32>
    %o = train.matmul %r, %hw : tensor<2x3x5xf32>, tensor<5x7xf32> -> tensor<2x3x7xf32>
    %logits = train.reshape %o : tensor<2x3x7xf32> -> tensor<6x7xf32>
    %l = train.softmax_cross_entropy_loss %logits, %y : tensor<6x7xf32>, tensor<6xi64>
    return %l : tensor<f32>
  }
}

// -----

module {
  train.param @w1 : tensor<4x6xf32> at 0
  train.param @head : tensor<6x5xf32> at 96
  func.func @capped(%x: tensor<3x4xf32> {train.name = "x"}, %y: tensor<3xi64> {train.name = "y"}) -> tensor<f32> {
    %a = train.param_value @w1 : tensor<4x6xf32>
    %b = train.param_value @head : tensor<6x5xf32>
    %h = train.matmul %x, %a : tensor<3x4xf32>, tensor<4x6xf32> -> tensor<3x6xf32>
    %t = train.tanh %h : tensor<3x6xf32>
    %o = train.matmul %t, %b : tensor<3x6xf32>, tensor<6x5xf32> -> tensor<3x5xf32>
    %c = train.constant dense<5.000000e-01> : tensor<f32>
    %s = train.mul %o, %c : tensor<3x5xf32>, tensor<f32> -> tensor<3x5xf32>
    %z = train.tanh %s : tensor<3x5xf32>
    %l = train.softmax_cross_entropy_loss %z, %y : tensor<3x5xf32>, tensor<3xi64>
    return %l : tensor<f32>
  }
}
