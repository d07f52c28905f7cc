module {
  train.param @"blocks.0.a" : tensor<4x4xf32> at 0
  train.param @"blocks.1.b" : tensor<4x4xf32> at 64
  train.param @"blocks.0.c" : tensor<4x3xf32> at 128
  func.func @out_of_order(%x: tensor<2x4xf32>, %y: tensor<2xi64>) -> tensor<f32> {
    %a = train.param_value @"blocks.0.a" : tensor<4x4xf32>
    %b = train.param_value @"blocks.1.b" : tensor<4x4xf32>
    %c = train.param_value @"blocks.0.c" : tensor<4x3xf32>
    %h0 = train.linear %x, %a : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
    // expected-note @+1 {{the value of layer 1 is computed here}}
    %h1 = train.linear %h0, %b : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
    // expected-error @+1 {{train-partition-layers: layers are not monotone in forward order: this op reads @blocks.0.c of layer 0 ('blocks.0') and consumes a value of layer 1 ('blocks.1')}}
    %h2 = train.linear %h1, %c : tensor<2x4xf32>, tensor<4x3xf32> -> tensor<2x3xf32>
    %l = train.softmax_cross_entropy_loss %h2, %y : tensor<2x3xf32>, tensor<2xi64>
    return %l : tensor<f32>
  }
}

// -----

module {
  train.param @p : tensor<3xf32> at 0
  train.param @q : tensor<3xf32> at 12
  func.func @first() -> tensor<f32> {
    %p = train.param_value @p : tensor<3xf32>
    %l = train.reduce_sum %p, [] {keepdims = false} : tensor<3xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
  // expected-error @+1 {{train-partition-layers: expects one step function reading parameters; found @first and @second}}
  func.func @second() -> tensor<f32> {
    %p = train.param_value @q : tensor<3xf32>
    %l = train.reduce_sum %p, [] {keepdims = false} : tensor<3xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}
