// RUN: spillway-opt %s -split-input-file -verify-diagnostics
// One case per verifier and shape-inference error of the train dialect.

module {
  func.func @f(%a: tensor<2x3xf32>, %b: tensor<4xf32>) {
    // expected-error @+2 {{shapes [2, 3] and [4] do not broadcast}}
    // expected-error @+1 {{failed to infer returned types}}
    %0 = train.add %a, %b : tensor<2x3xf32>, tensor<4xf32> -> tensor<2x3xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xf32>, %b: tensor<3xi64>) {
    // expected-error @+2 {{operand element types differ: 'f32' vs 'i64'}}
    // expected-error @+1 {{failed to infer returned types}}
    %0 = train.mul %a, %b : tensor<2x3xf32>, tensor<3xi64> -> tensor<2x3xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xf32>, %b: tensor<3xf32>) {
    // expected-error @+2 {{'train.sub' op inferred type(s) 'tensor<2x3xf32>' are incompatible with return type(s) of operation 'tensor<3xf32>'}}
    // expected-error @+1 {{failed to infer returned types}}
    %0 = train.sub %a, %b : tensor<2x3xf32>, tensor<3xf32> -> tensor<3xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) {
    // expected-error @+2 {{matmul contraction mismatch: [2, 3] x [4, 5]}}
    // expected-error @+1 {{failed to infer returned types}}
    %0 = train.matmul %a, %b : tensor<2x3xf32>, tensor<4x5xf32> -> tensor<2x5xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<3xf32>, %b: tensor<3x5xf32>) {
    // expected-error @+2 {{matmul operands must have rank >= 2 (got 1 and 2); reshape 1-D operands first}}
    // expected-error @+1 {{failed to infer returned types}}
    %0 = train.matmul %a, %b : tensor<3xf32>, tensor<3x5xf32> -> tensor<5xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x4x3xf32>, %b: tensor<3x3x5xf32>) {
    // expected-error @+2 {{matmul batch dimensions do not broadcast: [2, 4, 3] x [3, 3, 5]}}
    // expected-error @+1 {{failed to infer returned types}}
    %0 = train.matmul %a, %b : tensor<2x4x3xf32>, tensor<3x3x5xf32> -> tensor<2x4x5xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>, %c: tensor<3xf32>) {
    // expected-error @+2 {{gemm C of shape [3] does not broadcast to [2, 4]}}
    // expected-error @+1 {{failed to infer returned types}}
    %0 = train.gemm %a, %b, %c : tensor<2x3xf32>, tensor<3x4xf32>, tensor<3xf32> -> tensor<2x4xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) {
    // expected-error @+2 {{gemm contraction mismatch: [2, 3] x [3, 4]}}
    // expected-error @+1 {{failed to infer returned types}}
    %0 = train.gemm %a, %b {transA = true} : tensor<2x3xf32>, tensor<3x4xf32> -> tensor<3x4xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x2x3xf32>, %b: tensor<3x4xf32>) {
    // expected-error @+2 {{gemm operands must be 2-D}}
    // expected-error @+1 {{failed to infer returned types}}
    %0 = train.gemm %a, %b : tensor<2x2x3xf32>, tensor<3x4xf32> -> tensor<2x4xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xf32>) {
    // expected-error @+1 {{'train.reshape' op cannot reshape [2, 3] (6 elements) to [4, 2] (8 elements)}}
    %0 = train.reshape %a : tensor<2x3xf32> -> tensor<4x2xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xf32>) {
    // expected-error @+1 {{'train.reshape' op element type changes from 'f32' to 'i64'}}
    %0 = train.reshape %a : tensor<2x3xf32> -> tensor<6xi64>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xf32>) {
    // expected-error @+1 {{'train.transpose' op perm [0, 0] is not a permutation of 0..1}}
    %0 = train.transpose %a, [0, 0] : tensor<2x3xf32> -> tensor<2x2xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xf32>) {
    // expected-error @+1 {{'train.transpose' op perm has 1 entries for rank 2}}
    %0 = train.transpose %a, [0] : tensor<2x3xf32> -> tensor<2xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xf32>) {
    // expected-error @+1 {{'train.transpose' op perm [2, 0] is not a permutation of 0..1}}
    %0 = train.transpose %a, [2, 0] : tensor<2x3xf32> -> tensor<3x2xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xf32>, %i: tensor<4xi64>) {
    // expected-error @+2 {{gather axis 2 out of range for rank 2}}
    // expected-error @+1 {{failed to infer returned types}}
    %0 = train.gather %a, %i {axis = 2} : tensor<2x3xf32>, tensor<4xi64> -> tensor<2x4xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xf32>) {
    // expected-error @+1 {{'train.softmax' op axis 2 out of range for rank 2}}
    %0 = train.softmax %a {axis = 2 : si64} : tensor<2x3xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xf32>) {
    // expected-error @+1 {{'train.gelu' op approximate must be "none" or "tanh", got "erf"}}
    %0 = train.gelu %a {approximate = "erf"} : tensor<2x3xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xf32>, %s: tensor<2x3xf32>) {
    // expected-error @+1 {{'train.layer_norm' op scale shape [2, 3] must equal the normalized shape [3]}}
    %0 = train.layer_norm %a, %s : tensor<2x3xf32>, tensor<2x3xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xf32>, %s: tensor<2x3xf32>, %b: tensor<3xf32>) {
    // expected-error @+1 {{'train.layer_norm' op bias shape [3] must equal the normalized shape [2, 3]}}
    %0 = train.layer_norm %a, %s, %b {axis = 0 : si64} : tensor<2x3xf32>, tensor<2x3xf32>, tensor<3xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xf32>, %s: tensor<3xf32>) {
    // expected-error @+1 {{'train.layer_norm' op axis -3 out of range for rank 2}}
    %0 = train.layer_norm %a, %s {axis = -3 : si64} : tensor<2x3xf32>, tensor<3xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xf32>) {
    // expected-error @+1 {{reduction axis 2 out of range for rank 2}}
    %0 = train.reduce_sum %a, [2] : tensor<2x3xf32> -> tensor<2x3x1xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xf32>) {
    // expected-error @+1 {{reduction axis -1 repeated}}
    %0 = train.reduce_mean %a, [1, -1] : tensor<2x3xf32> -> tensor<2x1xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xf32>, %y: tensor<3xi64>) {
    // expected-error @+1 {{'train.softmax_cross_entropy_loss' op expects logits [N, C] and labels [N], got [2, 3] and [3]}}
    %0 = train.softmax_cross_entropy_loss %a, %y : tensor<2x3xf32>, tensor<3xi64>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xf32>, %y: tensor<2xi64>) {
    // expected-error @+1 {{'train.softmax_cross_entropy_loss' op reduction must be "mean" or "sum", got "none"}}
    %0 = train.softmax_cross_entropy_loss %a, %y {reduction = "none"} : tensor<2x3xf32>, tensor<2xi64>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xf32>) {
    // expected-error @+1 {{'train.sum_to_shape' op result shape [2] does not broadcast to the input shape [2, 3]}}
    %0 = train.sum_to_shape %a : tensor<2x3xf32> -> tensor<2xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xf32>) {
    // expected-error @+1 {{'train.broadcast_to' op input shape [2, 3] does not broadcast to [3]}}
    %0 = train.broadcast_to %a : tensor<2x3xf32> -> tensor<3xf32>
    return
  }
}

// -----

module {
  func.func @f(%i: tensor<4xi64>, %d: tensor<4x2xf32>) {
    // expected-error @+1 {{'train.gather_grad' op dy shape [4, 2] is not the gather result shape [4, 3]}}
    %0 = train.gather_grad %i, %d : tensor<4xi64>, tensor<4x2xf32> -> tensor<10x3xf32>
    return
  }
}

// -----

module {
  func.func @f(%i: tensor<4xi64>, %d: tensor<4x3xf32>) {
    // expected-error @+1 {{'train.gather_grad' op axis 2 out of range for rank 2}}
    %0 = train.gather_grad %i, %d {axis = 2} : tensor<4xi64>, tensor<4x3xf32> -> tensor<10x3xf32>
    return
  }
}

// -----

module {
  func.func @f() {
    // expected-error @+1 {{'train.param_value' op refers to unknown parameter @missing}}
    %0 = train.param_value @missing : tensor<3xf32>
    return
  }
}

// -----

module {
  train.param @p : tensor<3xf32> at 0
  func.func @f() {
    // expected-error @+1 {{'train.param_value' op type 'tensor<4xf32>' does not match parameter @p of type 'tensor<3xf32>'}}
    %0 = train.param_value @p : tensor<4xf32>
    return
  }
}

// -----

module {
  train.param @p : tensor<3xf32> at 0
  func.func @f(%g: tensor<2xf32>) {
    // expected-error @+1 {{'train.param_grad' op type 'tensor<2xf32>' does not match parameter @p of type 'tensor<3xf32>'}}
    train.param_grad @p, %g : tensor<2xf32>
    return
  }
}

// -----

module {
  train.param @p : tensor<3xf32> at 0
  func.func @f(%g: tensor<3xf32>) {
    // expected-error @+1 {{'train.adamw' op beta1 must be a number in [0, 1), not 1.000000e+00}}
    train.adamw @p, %g {lr = 1.0e-3, beta1 = 1.0, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0} : tensor<3xf32>
    return
  }
}

// -----

module {
  train.param @p : tensor<3xf32> at 0
  func.func @f(%g: tensor<3xf32>) {
    // expected-error @+1 {{'train.adamw' op lr must be a number in [0, 1e+06], not -1.000000e+00}}
    train.adamw @p, %g {lr = -1.0, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0} : tensor<3xf32>
    return
  }
}

// -----

module {
  train.param @p : tensor<3xf32> at 0
  func.func @f(%g: tensor<3xf32>) {
    // expected-error @+1 {{'train.adamw' op eps must be a number in (0, 1], not 0.000000e+00}}
    train.adamw @p, %g {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 0.0, weight_decay = 0.0} : tensor<3xf32>
    return
  }
}

// -----

// The kernels compute in float32: an eps that is 0 there is refused too.
module {
  train.param @p : tensor<3xf32> at 0
  func.func @f(%g: tensor<3xf32>) {
    // expected-error @+1 {{'train.adamw' op eps 1.000000e-46: it is below 1.17549e-38, float32's smallest normal number}}
    train.adamw @p, %g {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-46, weight_decay = 0.0} : tensor<3xf32>
    return
  }
}

// -----

module {
  train.param @p : tensor<3xf32> at 0
  func.func @f(%g: tensor<3xf32>) {
    // expected-error @+1 {{'train.adamw' op weight_decay must be a number in [0, 1e+06], not -1.000000e-01}}
    train.adamw @p, %g {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = -0.1} : tensor<3xf32>
    return
  }
}

// -----

// NaN and the infinities fail every range (the executable's and spillwayc's,
// spillway/runtime/hyperparams.h): a NaN weight_decay would make every
// weight NaN at the first update.
module {
  train.param @p : tensor<3xf32> at 0
  func.func @f(%g: tensor<3xf32>) {
    // expected-error @+1 {{'train.adamw' op weight_decay must be a number in [0, 1e+06], not nan}}
    train.adamw @p, %g {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0x7FF8000000000000 : f64} : tensor<3xf32>
    return
  }
}

// -----

module {
  train.param @p : tensor<3xf32> at 0
  func.func @f(%g: tensor<3xf32>) {
    // expected-error @+1 {{'train.adamw' op lr must be a number in [0, 1e+06], not INF}}
    train.adamw @p, %g {lr = 0x7FF0000000000000 : f64, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0} : tensor<3xf32>
    return
  }
}

// -----

module {
  train.param @p : tensor<3x4xf32> at 0
  func.func @f(%g: tensor<3x4xf32>) {
    // expected-error @+1 {{'train.foam' op alpha nan must lie in [1e-30, 1e6]}}
    train.foam @p, %g {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0, level = 2, alpha = 0x7FF8000000000000 : f64} : tensor<3x4xf32>
    return
  }
}

// -----

// expected-error @+1 {{'train.param' op offset must be non-negative, got -4}}
train.param @p : tensor<3xf32> at -4

// -----

// expected-error @+1 {{'train.param' op parameter 'p' must have a static shape}}
train.param @p : tensor<?x3xf32> at 0

// -----

module {
  func.func @f(%a: tensor<2x3xi1>, %b: tensor<3xi1>) {
    // expected-error @+1 {{'train.pow' op operand #0 must be ranked tensor of 32-bit float or 64-bit signless integer or 32-bit signless integer values, but got 'tensor<2x3xi1>'}}
    %0 = train.pow %a, %b : tensor<2x3xi1>, tensor<3xi1> -> tensor<2x3xi1>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xi64>, %b: tensor<3xf32>) {
    // expected-error @+2 {{operand element types differ: 'i64' vs 'f32'}}
    // expected-error @+1 {{failed to infer returned types}}
    %0 = train.pow %a, %b : tensor<2x3xi64>, tensor<3xf32> -> tensor<2x3xi64>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xf32>, %b: tensor<3xi64>) {
    // expected-error @+2 {{compared element types differ}}
    // expected-error @+1 {{failed to infer returned types}}
    %0 = train.less %a, %b : tensor<2x3xf32>, tensor<3xi64> -> tensor<2x3xi1>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xf32>, %b: tensor<4xf32>) {
    // expected-error @+2 {{shapes [2, 3] and [4] do not broadcast}}
    // expected-error @+1 {{failed to infer returned types}}
    %0 = train.equal %a, %b : tensor<2x3xf32>, tensor<4xf32> -> tensor<2x3xi1>
    return
  }
}

// -----

module {
  func.func @f(%c: tensor<2x3xi1>, %a: tensor<2x3xf32>, %b: tensor<3xi64>) {
    // expected-error @+2 {{where branches have different element types}}
    // expected-error @+1 {{failed to infer returned types}}
    %0 = train.where %c, %a, %b : tensor<2x3xi1>, tensor<2x3xf32>, tensor<3xi64> -> tensor<2x3xf32>
    return
  }
}

// -----

module {
  func.func @f(%c: tensor<4xi1>, %a: tensor<2x3xf32>, %b: tensor<3xf32>) {
    // expected-error @+2 {{shapes [4] and [2, 3] do not broadcast}}
    // expected-error @+1 {{failed to infer returned types}}
    %0 = train.where %c, %a, %b : tensor<4xi1>, tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xf32>) {
    // expected-error @+1 {{'train.cast' op cast changes the shape from [2, 3] to [6]}}
    %0 = train.cast %a : tensor<2x3xf32> -> tensor<6xi64>
    return
  }
}

// -----

// bf16 stores f32 values: cast from another type would round twice.
module {
  func.func @f(%a: tensor<2x3xi64>) {
    // expected-error @+1 {{'train.cast' op casts 'i64' to 'bf16': bf16 converts to and from f32 only}}
    %0 = train.cast %a : tensor<2x3xi64> -> tensor<2x3xbf16>
    return
  }
}

// -----

// No op but cast reads bf16.
module {
  func.func @f(%a: tensor<2x3xf32>) {
    %b = train.cast %a : tensor<2x3xf32> -> tensor<2x3xbf16>
    // expected-error @+1 {{'train.add' op operand #0 must be ranked tensor of 32-bit float or 64-bit signless integer or 32-bit signless integer values, but got 'tensor<2x3xbf16>'}}
    %c = train.add %b, %b : tensor<2x3xbf16>, tensor<2x3xbf16> -> tensor<2x3xbf16>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xf32>, %b: tensor<3x3xf32>) {
    // expected-error @+2 {{concat inputs [3, 3] and [2, 3] differ outside axis 1}}
    // expected-error @+1 {{failed to infer returned types}}
    %0 = train.concat %a, %b {axis = 1 : i64} : tensor<2x3xf32>, tensor<3x3xf32> -> tensor<2x6xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xf32>, %b: tensor<2x3xi64>) {
    // expected-error @+2 {{concat inputs differ in element type or rank}}
    // expected-error @+1 {{failed to infer returned types}}
    %0 = train.concat %a, %b {axis = 0 : i64} : tensor<2x3xf32>, tensor<2x3xi64> -> tensor<4x3xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x3xf32>) {
    // expected-error @+2 {{concat axis 2 out of range for rank 2}}
    // expected-error @+1 {{failed to infer returned types}}
    %0 = train.concat %a, %a {axis = 2 : i64} : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x6xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x6xf32>) {
    // expected-error @+1 {{'train.slice' op dimension 1: elements 4, 6, ... 8 fall outside [0, 6)}}
    %0 = train.slice %a {starts = array<i64: 0, 4>, steps = array<i64: 1, 2>} : tensor<2x6xf32> -> tensor<2x3xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x6xf32>) {
    // expected-error @+1 {{'train.slice' op dimension 1: elements 1, -1, ... -1 fall outside [0, 6)}}
    %0 = train.slice %a {starts = array<i64: 0, 1>, steps = array<i64: 1, -2>} : tensor<2x6xf32> -> tensor<2x2xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x6xf32>) {
    // expected-error @+1 {{'train.slice' op step of dimension 0 is zero}}
    %0 = train.slice %a {starts = array<i64: 0, 0>, steps = array<i64: 0, 1>} : tensor<2x6xf32> -> tensor<2x6xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x6xf32>) {
    // expected-error @+1 {{'train.slice' op starts and steps need one entry per dimension of a rank-2 tensor}}
    %0 = train.slice %a {starts = array<i64: 0>, steps = array<i64: 1>} : tensor<2x6xf32> -> tensor<2x6xf32>
    return
  }
}

// -----

module {
  func.func @f(%a: tensor<2x6xf32>) {
    // expected-error @+1 {{'train.slice' op slice changes the element type}}
    %0 = train.slice %a {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : tensor<2x6xf32> -> tensor<2x6xi64>
    return
  }
}

// -----

module {
  func.func @f(%dy: tensor<2x3xf32>) {
    // expected-error @+1 {{'train.slice_grad' op dimension 1: elements 2, 4, ... 6 fall outside [0, 6)}}
    %0 = train.slice_grad %dy {starts = array<i64: 0, 2>, steps = array<i64: 1, 2>} : tensor<2x3xf32> -> tensor<2x6xf32>
    return
  }
}

// -----

module {
  func.func @f(%dy: tensor<2x3xf32>) {
    // expected-error @+1 {{'train.slice_grad' op starts and steps need one entry per dimension of a rank-3 tensor}}
    %0 = train.slice_grad %dy {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : tensor<2x3xf32> -> tensor<1x2x6xf32>
    return
  }
}

// -----

module {
  func.func @f(%x: tensor<2x4xf32>, %w: tensor<3x5xf32>) {
    // expected-error @+2 {{linear expects x [..., K] and w [K, N], got [2, 4] and [3, 5]}}
    // expected-error @+1 {{failed to infer returned types}}
    %0 = train.linear %x, %w : tensor<2x4xf32>, tensor<3x5xf32> -> tensor<2x5xf32>
    return
  }
}

// -----

module {
  func.func @f(%x: tensor<2x4xf32>, %w: tensor<4x5xf32>, %b: tensor<4xf32>) {
    // expected-error @+2 {{linear bias must be [5], got [4]}}
    // expected-error @+1 {{failed to infer returned types}}
    %0 = train.linear %x, %w, %b : tensor<2x4xf32>, tensor<4x5xf32>, tensor<4xf32> -> tensor<2x5xf32>
    return
  }
}

// -----

module {
  func.func @f(%x: tensor<2x4xf32>, %s: tensor<2x4xf32>) {
    // expected-error @+1 {{'train.rms_norm' op scale shape [2, 4] must equal the normalized shape [4]}}
    %0 = train.rms_norm %x, %s : tensor<2x4xf32>, tensor<2x4xf32>
    return
  }
}

// -----

module {
  func.func @f(%x: tensor<2x5xf32>, %t: tensor<5xf32>) {
    // expected-error @+1 {{'train.rope' op the last dimension must be even, got [2, 5]}}
    %0 = train.rope %x, %t, %t : tensor<2x5xf32>, tensor<5xf32>, tensor<5xf32>
    return
  }
}

// -----

module {
  func.func @f(%x: tensor<2x4xf32>, %c: tensor<4xf32>, %s: tensor<3x4xf32>) {
    // expected-error @+1 {{'train.rope' op cos/sin table of shape [3, 4] does not broadcast to [2, 4]}}
    %0 = train.rope %x, %c, %s : tensor<2x4xf32>, tensor<4xf32>, tensor<3x4xf32>
    return
  }
}

// -----

module {
  func.func @f(%q: tensor<1x4x3x2xf32>, %k: tensor<1x2x5x2xf32>) {
    // expected-error @+1 {{'train.attention' op expects Q [B, H, S, D] and K, V [B, Hkv, S, D], got [1, 4, 3, 2], [1, 2, 5, 2], [1, 2, 5, 2]}}
    %0 = train.attention %q, %k, %k {scale = 1.0} : tensor<1x4x3x2xf32>, tensor<1x2x5x2xf32>, tensor<1x2x5x2xf32>
    return
  }
}

// -----

module {
  func.func @f(%q: tensor<1x4x3x2xf32>, %k: tensor<1x3x3x2xf32>) {
    // expected-error @+1 {{'train.attention' op query heads (4) must be a multiple of KV heads (3)}}
    %0 = train.attention %q, %k, %k {scale = 1.0} : tensor<1x4x3x2xf32>, tensor<1x3x3x2xf32>, tensor<1x3x3x2xf32>
    return
  }
}

// -----

func.func @slice_step_overflow(%x: tensor<4xf32>) -> tensor<3xf32> {
  // A step whose multiples wrap around int64 does not sneak past the check.
  // expected-error @+1 {{'train.slice' op dimension 0: elements 0, -9223372036854775808, ... 0 fall outside [0, 4)}}
  %s = train.slice %x {starts = array<i64: 0>, steps = array<i64: -9223372036854775808>} : tensor<4xf32> -> tensor<3xf32>
  return %s : tensor<3xf32>
}

// -----

module {
  train.param @p : tensor<3xf32> at 0
  func.func @f(%g: tensor<3xf32>) {
    // expected-error @+1 {{'train.adamw' op element range [2, 4) must be non-empty and within the 3 elements of the parameter}}
    train.adamw @p [2, 4), %g {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0} : tensor<3xf32>
    return
  }
}

// -----

module {
  train.param @p : tensor<3xf32> at 0
  func.func @f(%g: tensor<3xf32>) {
    // expected-error @+1 {{'train.adamw' op needs both ends of the element range or neither}}
    "train.adamw"(%g) <{param = @p, begin = 1 : i64, lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64}> : (tensor<3xf32>) -> ()
    return
  }
}

// -----

module {
  train.param @p : tensor<3xf32> at 0
  func.func @f(%g: tensor<3xf32>) {
    // expected-error @+1 {{'train.adamw_defer' op element range [1, 1) must be non-empty and within the 3 elements of the parameter}}
    train.adamw_defer @p [1, 1), %g {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0} : tensor<3xf32>
    return
  }
}

// -----

module {
  train.param @p : tensor<3xf32> at 0
  func.func @f(%g: tensor<3xf32>) {
    // expected-error @+1 {{'train.adamw_defer' op eps must be a number in (0, 1]}}
    train.adamw_defer @p [0, 1), %g {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 0.0, weight_decay = 0.0} : tensor<3xf32>
    return
  }
}

// -----

module {
  train.param @p : tensor<3xf32> at 0
  func.func @f() {
    // expected-error @+1 {{'train.adamw_apply_pending' op element range [0, 5) must be non-empty and within the 3 elements of the parameter}}
    train.adamw_apply_pending @p [0, 5)
    return
  }
}

// -----

module {
  func.func @f() {
    // expected-error @+1 {{'train.adamw_apply_pending' op refers to unknown parameter @q}}
    train.adamw_apply_pending @q [0, 1)
    return
  }
}

// -----

module {
  train.param @p : tensor<3xf32> at 0
  func.func @f(%g: tensor<3xf32>) {
    // expected-error @+1 {{'train.foam' op folds only 2-D weight matrices; the gradient is 'tensor<3xf32>' (use train.adamw for it)}}
    train.foam @p, %g {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0, level = 2, alpha = 0.25} : tensor<3xf32>
    return
  }
}

// -----

module {
  train.param @p : tensor<3x4xf32> at 0
  func.func @f(%g: tensor<3x4xf32>) {
    // expected-error @+1 {{'train.foam' op level 17 must lie in [0, 16]}}
    train.foam @p, %g {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0, level = 17, alpha = 0.25} : tensor<3x4xf32>
    return
  }
}

// -----

module {
  train.param @p : tensor<3x4xf32> at 0
  func.func @f(%g: tensor<3x4xf32>) {
    // expected-error @+1 {{'train.foam' op alpha 0.000000e+00 must lie in [1e-30, 1e6]}}
    train.foam @p, %g {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0, level = 2, alpha = 0.0} : tensor<3x4xf32>
    return
  }
}

// -----

module {
  train.param @p : tensor<3x4xf32> at 0
  func.func @f(%g: tensor<3x4xf32>) {
    // expected-error @+1 {{'train.foam' op beta1 must be a number in [0, 1)}}
    train.foam @p, %g {lr = 1.0e-3, beta1 = 1.0, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0, level = 2, alpha = 0.25} : tensor<3x4xf32>
    return
  }
}

// -----

// Two parameters reading the same bytes of the weights file (issue 15).
module {
  train.param @a : tensor<4x4xf32> at 0
  train.param @b : tensor<2xf32> at 128
  // expected-error @+1 {{'train.param' op parameter 'c' at bytes [32, 48) of the weights file overlaps parameter 'a' at [0, 64); each parameter needs its own bytes}}
  train.param @c : tensor<4xf32> at 32
}

// -----

module {
  // expected-error @+1 {{'train.param' op parameter 'big' at offset 9223372036854775800 ends past the largest file offset}}
  train.param @big : tensor<4xf32> at 9223372036854775800
}

// -----

// train.optimizer_state_dtype (train-attach-optimizer's state-dtype) is
// "fp32" or "bf16" on the module.
// expected-error @+1 {{train.optimizer_state_dtype is the module's "fp32" or "bf16" (train-attach-optimizer's state-dtype sets it), got "fp16"}}
module attributes {train.optimizer_state_dtype = "fp16"} {
}

// -----

// expected-error @+1 {{train.optimizer_state_shards is the module's {ranks = N, align = A} with N in [2, 65536] and A 64 or 65536}}
module attributes {train.optimizer_state_shards = {align = 64 : i64, ranks = 1 : i64}} {
}

// -----

// expected-error @+1 {{train.optimizer_state_shards is the module's {ranks = N, align = A} with N in [2, 65536] and A 64 or 65536}}
module attributes {train.optimizer_state_shards = {align = 128 : i64, ranks = 2 : i64}} {
}

// -----

// expected-error @+1 {{train.optimizer_state_shards is the module's {ranks = N, align = A}}}
module attributes {train.optimizer_state_shards = 2 : i64} {
}

// -----

// expected-error @+1 {{plus gradients = true for ZeRO stage 2}}
module attributes {train.optimizer_state_shards = {align = 64 : i64, gradients = 1 : i64, ranks = 2 : i64}} {
}

// -----

// expected-error @+1 {{plus gradients = true for ZeRO stage 2}}
module attributes {train.optimizer_state_shards = {align = 64 : i64, gradients = true, ranks = 2 : i64, what = 1 : i64}} {
}
