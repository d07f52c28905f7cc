// RUN: spillway-opt %s -split-input-file -verify-diagnostics --sched-microbatch=microbatches=2

// Split once: an iteration already in micro-batches is an error.
func.func @twice(%x: tensor<6xf32>) {
  // expected-error @+1 {{sched-microbatch: the iteration is already split into 2 micro-batches}}
  sched.iteration(%x) {microbatches = 2 : i64} : (tensor<6xf32>) -> () {
  ^bb0(%a: tensor<6xf32>):
  }
  return
}

// -----

// It runs before placement and transfers.
func.func @placed(%x: tensor<6xf32>) {
  sched.iteration(%x) : (tensor<6xf32>) -> () {
  ^bb0(%a: tensor<6xf32>):
    // expected-error @+1 {{sched-microbatch: expected only tasks in the iteration (it runs right after convert-train-to-sched), found sched.move}}
    %r = sched.move params layer(0) host -> gpu prio(demand) : !sched.timepoint
  }
  return
}

// -----

// The batch must stay row-independent (checked before anything is rewritten).
// Sequence-first attention: the input's dim 0 is the sequence, and the
// transpose moves it out of the lead.
module {
  func.func @seq_first(%x: tensor<4x2x8xf32>, %y: tensor<8xi64>) -> tensor<f32> {
    %l = sched.iteration(%x, %y) : (tensor<4x2x8xf32>, tensor<8xi64>) -> tensor<f32> {
    ^bb0(%a: tensor<4x2x8xf32>, %b: tensor<8xi64>):
      %h = sched.task fwd layer(0) (%a, %b) : (tensor<4x2x8xf32>, tensor<8xi64>) -> tensor<f32> {
      ^bb0(%i: tensor<4x2x8xf32>, %j: tensor<8xi64>):
        // expected-error @+1 {{sched-microbatch: cannot split the batch into 2 micro-batches: 'train.transpose' moves the batch dimension; use --microbatches 1}}
        %t = train.transpose %i, [1, 0, 2] : tensor<4x2x8xf32> -> tensor<2x4x8xf32>
        %r = train.reshape %t : tensor<2x4x8xf32> -> tensor<8x8xf32>
        %s = train.softmax_cross_entropy_loss %r, %j : tensor<8x8xf32>, tensor<8xi64>
        sched.yield %s : tensor<f32>
      }
      sched.yield %h : tensor<f32>
    }
    return %l : tensor<f32>
  }
}

// -----

// x[0:2] of a batch of 4: each micro-batch would take its own first rows.
module {
  func.func @slice_batch(%x: tensor<4x8xf32>, %y: tensor<2xi64>) -> tensor<f32> {
    %l = sched.iteration(%x, %y) : (tensor<4x8xf32>, tensor<2xi64>) -> tensor<f32> {
    ^bb0(%a: tensor<4x8xf32>, %b: tensor<2xi64>):
      %h = sched.task fwd layer(0) (%a, %b) : (tensor<4x8xf32>, tensor<2xi64>) -> tensor<f32> {
      ^bb0(%i: tensor<4x8xf32>, %j: tensor<2xi64>):
        // expected-error @+1 {{sched-microbatch: cannot split the batch into 2 micro-batches: 'train.slice' slices the batch dimension; use --microbatches 1}}
        %t = train.slice %i {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : tensor<4x8xf32> -> tensor<2x8xf32>
        %s = train.softmax_cross_entropy_loss %t, %j : tensor<2x8xf32>, tensor<2xi64>
        sched.yield %s : tensor<f32>
      }
      sched.yield %h : tensor<f32>
    }
    return %l : tensor<f32>
  }
}

// -----

// A Gram matrix y^T y contracts over the batch.
module {
  func.func @gram(%x: tensor<4x8xf32>, %y: tensor<8xi64>) -> tensor<f32> {
    %l = sched.iteration(%x, %y) : (tensor<4x8xf32>, tensor<8xi64>) -> tensor<f32> {
    ^bb0(%a: tensor<4x8xf32>, %b: tensor<8xi64>):
      %h = sched.task fwd layer(0) (%a, %b) : (tensor<4x8xf32>, tensor<8xi64>) -> tensor<f32> {
      ^bb0(%i: tensor<4x8xf32>, %j: tensor<8xi64>):
        // expected-error @+1 {{sched-microbatch: cannot split the batch into 2 micro-batches: 'train.gemm' contracts the batch dimension; use --microbatches 1}}
        %g = train.gemm %i, %i {transA = true} : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<8x8xf32>
        %s = train.softmax_cross_entropy_loss %g, %j : tensor<8x8xf32>, tensor<8xi64>
        sched.yield %s : tensor<f32>
      }
      sched.yield %h : tensor<f32>
    }
    return %l : tensor<f32>
  }
}

// -----

// The same with a matmul whose rhs is the batch: [8, 4] x [4, 8].
module {
  train.param @w : tensor<8x4xf32> at 0
  func.func @gram_matmul(%x: tensor<4x8xf32>, %y: tensor<8xi64>) -> tensor<f32> {
    %l = sched.iteration(%x, %y) : (tensor<4x8xf32>, tensor<8xi64>) -> tensor<f32> {
    ^bb0(%a: tensor<4x8xf32>, %b: tensor<8xi64>):
      %h = sched.task fwd layer(0) (%a, %b) : (tensor<4x8xf32>, tensor<8xi64>) -> tensor<f32> {
      ^bb0(%i: tensor<4x8xf32>, %j: tensor<8xi64>):
        %w = train.param_value @w : tensor<8x4xf32>
        // expected-error @+1 {{sched-microbatch: cannot split the batch into 2 micro-batches: 'train.matmul' contracts the batch dimension; use --microbatches 1}}
        %g = train.matmul %w, %i : tensor<8x4xf32>, tensor<4x8xf32> -> tensor<8x8xf32>
        %s = train.softmax_cross_entropy_loss %g, %j : tensor<8x8xf32>, tensor<8xi64>
        sched.yield %s : tensor<f32>
      }
      sched.yield %h : tensor<f32>
    }
    return %l : tensor<f32>
  }
}

// -----

// A reduction over dim 0 that is not the loss (batch statistics).
module {
  func.func @reduce_batch(%x: tensor<4x8xf32>, %y: tensor<4xi64>) -> tensor<f32> {
    %l = sched.iteration(%x, %y) : (tensor<4x8xf32>, tensor<4xi64>) -> tensor<f32> {
    ^bb0(%a: tensor<4x8xf32>, %b: tensor<4xi64>):
      %h = sched.task fwd layer(0) (%a, %b) : (tensor<4x8xf32>, tensor<4xi64>) -> tensor<f32> {
      ^bb0(%i: tensor<4x8xf32>, %j: tensor<4xi64>):
        // expected-error @+1 {{sched-microbatch: cannot split the batch into 2 micro-batches: 'train.reduce_sum' reduces the batch dimension; use --microbatches 1}}
        %m = train.reduce_sum %i, [0] : tensor<4x8xf32> -> tensor<1x8xf32>
        %c = train.sub %i, %m : tensor<4x8xf32>, tensor<1x8xf32> -> tensor<4x8xf32>
        %s = train.softmax_cross_entropy_loss %c, %j : tensor<4x8xf32>, tensor<4xi64>
        sched.yield %s : tensor<f32>
      }
      sched.yield %h : tensor<f32>
    }
    return %l : tensor<f32>
  }
}

// -----

// Only a softmax_cross_entropy_loss mean is supported as the loss.
module {
  func.func @reduce_mean_loss(%x: tensor<4x8xf32>) -> tensor<f32> {
    %l = sched.iteration(%x) : (tensor<4x8xf32>) -> tensor<f32> {
    ^bb0(%a: tensor<4x8xf32>):
      %h = sched.task fwd layer(0) (%a) : (tensor<4x8xf32>) -> tensor<f32> {
      ^bb0(%i: tensor<4x8xf32>):
        %m = train.reduce_mean %i, [] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
        sched.yield %m : tensor<f32>
      }
      // expected-error @+1 {{sched-microbatch: the iteration's result 'tensor<f32>' is a reduce_mean loss, which is not supported: only a softmax_cross_entropy_loss with reduction = "mean" is; use --microbatches 1}}
      sched.yield %h : tensor<f32>
    }
    return %l : tensor<f32>
  }
}

// -----

// Row-independent ops pass the check: a flatten of [B, S] to [B·S] and the
// unflatten back, a transpose keeping dim 0, a reduce and a softmax over
// later axes, a full-extent slice on dim 0.
module {
  train.param @w : tensor<8x8xf32> at 0
  func.func @rowwise(%x: tensor<4x2x8xf32>, %y: tensor<8xi64>) -> tensor<f32> {
    %l = sched.iteration(%x, %y) : (tensor<4x2x8xf32>, tensor<8xi64>) -> tensor<f32> {
    ^bb0(%a: tensor<4x2x8xf32>, %b: tensor<8xi64>):
      %h = sched.task fwd layer(0) (%a, %b) : (tensor<4x2x8xf32>, tensor<8xi64>) -> tensor<f32> {
      ^bb0(%i: tensor<4x2x8xf32>, %j: tensor<8xi64>):
        %w = train.param_value @w : tensor<8x8xf32>
        %t = train.transpose %i, [0, 2, 1] : tensor<4x2x8xf32> -> tensor<4x8x2xf32>
        %u = train.transpose %t, [0, 2, 1] : tensor<4x8x2xf32> -> tensor<4x2x8xf32>
        %sl = train.slice %u {starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : tensor<4x2x8xf32> -> tensor<4x2x8xf32>
        %sm = train.softmax %sl {axis = 1 : si64} : tensor<4x2x8xf32>
        %rs = train.reduce_sum %sm, [2] : tensor<4x2x8xf32> -> tensor<4x2x1xf32>
        %d = train.div %sm, %rs : tensor<4x2x8xf32>, tensor<4x2x1xf32> -> tensor<4x2x8xf32>
        %f = train.reshape %d : tensor<4x2x8xf32> -> tensor<8x8xf32>
        %p = train.matmul %f, %w : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
        %s = train.softmax_cross_entropy_loss %p, %j : tensor<8x8xf32>, tensor<8xi64>
        sched.yield %s : tensor<f32>
      }
      sched.yield %h : tensor<f32>
    }
    return %l : tensor<f32>
  }
}
