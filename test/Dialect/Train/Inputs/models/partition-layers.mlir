module {
  train.param @"embed.weight" : tensor<10x4xf32> at 0
  train.param @"blocks.0.fc.weight" : tensor<4x4xf32> at 160
  train.param @"blocks.0.fc.bias" : tensor<4xf32> at 224
  train.param @"blocks.1.fc.weight" : tensor<4x4xf32> at 240
  train.param @"blocks.1.fc.bias" : tensor<4xf32> at 304
  train.param @"head.weight" : tensor<4x10xf32> at 320
  train.param @"unused.weight" : tensor<4xf32> at 480
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

// -----

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

// -----

module {
  train.param @w1 : tensor<4x8xf32> at 0
  train.param @b1 : tensor<8xf32> at 128
  train.param @w2 : tensor<8x3xf32> at 160
  train.param @b2 : tensor<3xf32> at 256
  func.func @mlp(%x: tensor<2x2x4xf32>, %y: tensor<4xi64>) -> tensor<f32> {
    %flat = train.reshape %x : tensor<2x2x4xf32> -> tensor<4x4xf32>
    %w1 = train.param_value @w1 : tensor<4x8xf32>
    %b1 = train.param_value @b1 : tensor<8xf32>
    %h = train.linear %flat, %w1, %b1 : tensor<4x4xf32>, tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
    %c = train.constant dense<0.5> : tensor<f32>
    %hs = train.mul %h, %c : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
    %a = train.relu %hs : tensor<4x8xf32>
    %w2 = train.param_value @w2 : tensor<8x3xf32>
    %b2 = train.param_value @b2 : tensor<3xf32>
    %o = train.linear %a, %w2, %b2 : tensor<4x8xf32>, tensor<8x3xf32>, tensor<3xf32> -> tensor<4x3xf32>
    %l = train.softmax_cross_entropy_loss %o, %y : tensor<4x3xf32>, tensor<4xi64>
    return %l : tensor<f32>
  }
}

// -----

module {
  train.param @"attn.q.weight" : tensor<4x4xf32> at 0
  train.param @"attn.k.weight" : tensor<4x4xf32> at 64
  train.param @"proj.weight" : tensor<4x3xf32> at 128
  func.func @parallel(%x: tensor<2x4xf32>, %y: tensor<2xi64>) -> tensor<f32> {
    %wq = train.param_value @"attn.q.weight" : tensor<4x4xf32>
    %wk = train.param_value @"attn.k.weight" : tensor<4x4xf32>
    %wp = train.param_value @"proj.weight" : tensor<4x3xf32>
    %q = train.linear %x, %wq : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
    %k = train.linear %x, %wk : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
    %qk = train.mul %q, %k : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
    %o = train.linear %qk, %wp : tensor<2x4xf32>, tensor<4x3xf32> -> tensor<2x3xf32>
    %l = train.softmax_cross_entropy_loss %o, %y : tensor<2x3xf32>, tensor<2xi64>
    return %l : tensor<f32>
  }
}

// -----

// bf16 storage between layers: the cast back to f32 joins the layer that
// reads it, so the bf16 value crosses the boundary.
module {
  train.param @"blocks.0.fc.weight" : tensor<4x4xf32> at 0
  train.param @"head.weight" : tensor<4x3xf32> at 64
  func.func @bf16_storage(%x: tensor<2x4xf32>, %y: tensor<2xi64>) -> tensor<f32> {
    %w0 = train.param_value @"blocks.0.fc.weight" : tensor<4x4xf32>
    %wh = train.param_value @"head.weight" : tensor<4x3xf32>
    %h = train.linear %x, %w0 : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
    %r = train.relu %h : tensor<2x4xf32>
    %s = train.cast %r : tensor<2x4xf32> -> tensor<2x4xbf16>
    %f = train.cast %s : tensor<2x4xbf16> -> tensor<2x4xf32>
    %o = train.linear %f, %wh : tensor<2x4xf32>, tensor<4x3xf32> -> tensor<2x3xf32>
    %l = train.softmax_cross_entropy_loss %o, %y : tensor<2x3xf32>, tensor<2xi64>
    return %l : tensor<f32>
  }
}
