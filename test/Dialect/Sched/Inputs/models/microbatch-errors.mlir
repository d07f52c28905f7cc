// The batch input named by its ONNX name.
module {
  train.param @w : tensor<4x3xf32> at 0
  // expected-error @+1 {{sched-microbatch: input 'x' of type 'tensor<4x4xf32>' has no leading batch dimension that divides into 3 micro-batches}}
  func.func @step(%x: tensor<4x4xf32> {train.name = "x"}, %labels: tensor<4xi64> {train.name = "labels"}) -> tensor<f32> {
    %w = train.param_value @w : tensor<4x3xf32>
    %y = train.matmul %x, %w : tensor<4x4xf32>, tensor<4x3xf32> -> tensor<4x3xf32>
    %l = train.softmax_cross_entropy_loss %y, %labels : tensor<4x3xf32>, tensor<4xi64>
    return %l : tensor<f32>
  }
}

// -----

// A summed loss is not the mean of micro-batch losses.
module {
  train.param @w : tensor<4x3xf32> at 0
  func.func @step(%x: tensor<6x4xf32>, %labels: tensor<6xi64>) -> tensor<f32> {
    %w = train.param_value @w : tensor<4x3xf32>
    %y = train.matmul %x, %w : tensor<6x4xf32>, tensor<4x3xf32> -> tensor<6x3xf32>
    %l = train.softmax_cross_entropy_loss %y, %labels {reduction = "sum"} : tensor<6x3xf32>, tensor<6xi64>
    // expected-error @+1 {{sched-microbatch: the iteration's result 'tensor<f32>' is not a mean over the batch}}
    return %l : tensor<f32>
  }
}

// -----

// A constant shaped by the batch does not split: the batch-row check names
// the op before anything is rewritten.
module {
  train.param @w : tensor<4x3xf32> at 0
  func.func @step(%x: tensor<6x4xf32>, %labels: tensor<6xi64>) -> tensor<f32> {
    %w = train.param_value @w : tensor<4x3xf32>
    %y = train.matmul %x, %w : tensor<6x4xf32>, tensor<4x3xf32> -> tensor<6x3xf32>
    %c = train.constant dense<2.0> : tensor<6x3xf32>
    // expected-error @+1 {{sched-microbatch: cannot split the batch into 3 micro-batches: 'train.mul' combines the batch with a tensor not split with it (is not known to keep batch rows independent); use --microbatches 1}}
    %z = train.mul %y, %c : tensor<6x3xf32>, tensor<6x3xf32> -> tensor<6x3xf32>
    %l = train.softmax_cross_entropy_loss %z, %labels : tensor<6x3xf32>, tensor<6xi64>
    return %l : tensor<f32>
  }
}

