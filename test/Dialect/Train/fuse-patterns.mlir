// RUN: spillway-opt --train-fuse-patterns %s | FileCheck %s
// RUN: spillway-opt --train-fuse-patterns=patterns=silu,gelu %s | FileCheck %s --check-prefix=SUBSET
// RUN: spillway-opt --train-fuse-patterns=patterns=none %s | FileCheck %s --check-prefix=NONE
// RUN: not spillway-opt --train-fuse-patterns=patterns=silu,flash %s 2>&1 | FileCheck %s --check-prefix=BADNAME

// The inputs mirror what `spillway-translate --import-onnx` makes of the
// test/parity fixtures (TorchScript "ts" and dynamo spellings, see
// test/parity/ops.md), shrunk to small shapes.

// NONE-NOT: train.{{(attention|rms_norm|gelu|rope|silu|linear) }}
// BADNAME: unknown pattern 'flash'

//===----------------------------------------------------------------------===//
// SiLU and the gated MLP
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @silu_gated_mlp
// CHECK-SAME:    (%[[G:.*]]: tensor<2x8xf32>, %[[U:.*]]: tensor<2x8xf32>)
// CHECK-NEXT:    %[[S:.*]] = train.silu %[[G]] : tensor<2x8xf32>
// CHECK-NEXT:    %[[Y:.*]] = train.mul %[[S]], %[[U]]
// CHECK-NEXT:    return %[[Y]]
// SUBSET-LABEL: func.func @silu_gated_mlp
// SUBSET:         train.silu
func.func @silu_gated_mlp(%g: tensor<2x8xf32>, %u: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %s = train.sigmoid %g : tensor<2x8xf32>
  %a = train.mul %g, %s : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
  %y = train.mul %a, %u : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// sigmoid(x) * x: either operand order.
// CHECK-LABEL: func.func @silu_commuted
// CHECK-NEXT:    train.silu
// CHECK-NEXT:    return
func.func @silu_commuted(%g: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %s = train.sigmoid %g : tensor<2x8xf32>
  %a = train.mul %s, %g : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
  return %a : tensor<2x8xf32>
}

// The sigmoid is used again: no fusion (it would be computed twice).
// CHECK-LABEL: func.func @silu_sigmoid_has_other_use
// CHECK-NOT:     train.silu
// CHECK:         train.sigmoid
// CHECK:         train.mul
func.func @silu_sigmoid_has_other_use(%g: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  %s = train.sigmoid %g : tensor<2x8xf32>
  %a = train.mul %g, %s : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
  return %a, %s : tensor<2x8xf32>, tensor<2x8xf32>
}

// y * sigmoid(x) with y != x is not a SiLU.
// CHECK-LABEL: func.func @silu_other_operand
// CHECK-NOT:     train.silu
func.func @silu_other_operand(%g: tensor<2x8xf32>, %u: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %s = train.sigmoid %g : tensor<2x8xf32>
  %a = train.mul %u, %s : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
  return %a : tensor<2x8xf32>
}

//===----------------------------------------------------------------------===//
// GELU
//===----------------------------------------------------------------------===//

// GPT-2 gelu_new, both exporters: Mul(x,.5) Pow(x,3) Mul(.,0.044715) Add(x,.)
// Mul(.,0.7978846) Tanh Add(.,1) Mul(Mul, Add_1).
// CHECK-LABEL: func.func @gelu_tanh
// CHECK-SAME:    (%[[X:.*]]: tensor<2x8xf32>)
// CHECK-NEXT:    %[[Y:.*]] = train.gelu %[[X]] {approximate = "tanh"} : tensor<2x8xf32>
// CHECK-NEXT:    return %[[Y]]
// SUBSET-LABEL: func.func @gelu_tanh
// SUBSET:         train.gelu
func.func @gelu_tanh(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %half = train.constant dense<5.000000e-01> : tensor<f32>
  %three = train.constant dense<3.000000e+00> : tensor<f32>
  %c = train.constant dense<4.471500e-02> : tensor<f32>
  %k = train.constant dense<0.797884583> : tensor<f32>
  %one = train.constant dense<1.000000e+00> : tensor<f32>
  %0 = train.mul %x, %half : tensor<2x8xf32>, tensor<f32> -> tensor<2x8xf32>
  %1 = train.pow %x, %three : tensor<2x8xf32>, tensor<f32> -> tensor<2x8xf32>
  %2 = train.mul %1, %c : tensor<2x8xf32>, tensor<f32> -> tensor<2x8xf32>
  %3 = train.add %x, %2 : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
  %4 = train.mul %3, %k : tensor<2x8xf32>, tensor<f32> -> tensor<2x8xf32>
  %5 = train.tanh %4 : tensor<2x8xf32>
  %6 = train.add %5, %one : tensor<2x8xf32>, tensor<f32> -> tensor<2x8xf32>
  %7 = train.mul %0, %6 : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
  return %7 : tensor<2x8xf32>
}

// The same formula associated and commuted differently: x * (0.5 * (1 + tanh)).
// CHECK-LABEL: func.func @gelu_tanh_reassociated
// CHECK-NEXT:    train.gelu %{{.*}} {approximate = "tanh"}
// CHECK-NEXT:    return
func.func @gelu_tanh_reassociated(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %half = train.constant dense<5.000000e-01> : tensor<f32>
  %three = train.constant dense<3.000000e+00> : tensor<f32>
  %c = train.constant dense<4.471500e-02> : tensor<f32>
  %k = train.constant dense<0.797884583> : tensor<f32>
  %one = train.constant dense<1.000000e+00> : tensor<f32>
  %1 = train.pow %x, %three : tensor<2x8xf32>, tensor<f32> -> tensor<2x8xf32>
  %2 = train.mul %c, %1 : tensor<f32>, tensor<2x8xf32> -> tensor<2x8xf32>
  %3 = train.add %2, %x : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
  %4 = train.mul %k, %3 : tensor<f32>, tensor<2x8xf32> -> tensor<2x8xf32>
  %5 = train.tanh %4 : tensor<2x8xf32>
  %6 = train.add %one, %5 : tensor<f32>, tensor<2x8xf32> -> tensor<2x8xf32>
  %0 = train.mul %half, %6 : tensor<f32>, tensor<2x8xf32> -> tensor<2x8xf32>
  %7 = train.mul %x, %0 : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
  return %7 : tensor<2x8xf32>
}

// torch.nn.GELU() at opset 17 (TorchScript): Div(x, 1.4142135) Erf Add(., 1)
// Mul(x, .) Mul(., 0.5).
// CHECK-LABEL: func.func @gelu_erf
// CHECK-SAME:    (%[[X:.*]]: tensor<2x8xf32>)
// CHECK-NEXT:    %[[Y:.*]] = train.gelu %[[X]] : tensor<2x8xf32>
// CHECK-NEXT:    return %[[Y]]
func.func @gelu_erf(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %sqrt2 = train.constant dense<1.41421354> : tensor<f32>
  %one = train.constant dense<1.000000e+00> : tensor<f32>
  %half = train.constant dense<5.000000e-01> : tensor<f32>
  %0 = train.div %x, %sqrt2 : tensor<2x8xf32>, tensor<f32> -> tensor<2x8xf32>
  %1 = train.erf %0 : tensor<2x8xf32>
  %2 = train.add %1, %one : tensor<2x8xf32>, tensor<f32> -> tensor<2x8xf32>
  %3 = train.mul %x, %2 : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
  %4 = train.mul %3, %half : tensor<2x8xf32>, tensor<f32> -> tensor<2x8xf32>
  return %4 : tensor<2x8xf32>
}

// erf(x * 0.70710678) spelling.
// CHECK-LABEL: func.func @gelu_erf_mul
// CHECK-NEXT:    train.gelu %{{.*}} : tensor<2x8xf32>
// CHECK-NEXT:    return
func.func @gelu_erf_mul(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %r = train.constant dense<0.707106769> : tensor<f32>
  %one = train.constant dense<1.000000e+00> : tensor<f32>
  %half = train.constant dense<5.000000e-01> : tensor<f32>
  %0 = train.mul %x, %r : tensor<2x8xf32>, tensor<f32> -> tensor<2x8xf32>
  %1 = train.erf %0 : tensor<2x8xf32>
  %2 = train.add %one, %1 : tensor<f32>, tensor<2x8xf32> -> tensor<2x8xf32>
  %h = train.mul %x, %half : tensor<2x8xf32>, tensor<f32> -> tensor<2x8xf32>
  %4 = train.mul %h, %2 : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
  return %4 : tensor<2x8xf32>
}

// 0.04 instead of 0.044715: not GELU.
// CHECK-LABEL: func.func @gelu_wrong_constant
// CHECK-NOT:     train.gelu
// CHECK:         train.tanh
func.func @gelu_wrong_constant(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %half = train.constant dense<5.000000e-01> : tensor<f32>
  %three = train.constant dense<3.000000e+00> : tensor<f32>
  %c = train.constant dense<4.000000e-02> : tensor<f32>
  %k = train.constant dense<0.797884583> : tensor<f32>
  %one = train.constant dense<1.000000e+00> : tensor<f32>
  %0 = train.mul %x, %half : tensor<2x8xf32>, tensor<f32> -> tensor<2x8xf32>
  %1 = train.pow %x, %three : tensor<2x8xf32>, tensor<f32> -> tensor<2x8xf32>
  %2 = train.mul %1, %c : tensor<2x8xf32>, tensor<f32> -> tensor<2x8xf32>
  %3 = train.add %x, %2 : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
  %4 = train.mul %3, %k : tensor<2x8xf32>, tensor<f32> -> tensor<2x8xf32>
  %5 = train.tanh %4 : tensor<2x8xf32>
  %6 = train.add %5, %one : tensor<2x8xf32>, tensor<f32> -> tensor<2x8xf32>
  %7 = train.mul %0, %6 : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
  return %7 : tensor<2x8xf32>
}

// The tanh is also returned: no fusion.
// CHECK-LABEL: func.func @gelu_tanh_has_other_use
// CHECK-NOT:     train.gelu
func.func @gelu_tanh_has_other_use(%x: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  %half = train.constant dense<5.000000e-01> : tensor<f32>
  %three = train.constant dense<3.000000e+00> : tensor<f32>
  %c = train.constant dense<4.471500e-02> : tensor<f32>
  %k = train.constant dense<0.797884583> : tensor<f32>
  %one = train.constant dense<1.000000e+00> : tensor<f32>
  %0 = train.mul %x, %half : tensor<2x8xf32>, tensor<f32> -> tensor<2x8xf32>
  %1 = train.pow %x, %three : tensor<2x8xf32>, tensor<f32> -> tensor<2x8xf32>
  %2 = train.mul %1, %c : tensor<2x8xf32>, tensor<f32> -> tensor<2x8xf32>
  %3 = train.add %x, %2 : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
  %4 = train.mul %3, %k : tensor<2x8xf32>, tensor<f32> -> tensor<2x8xf32>
  %5 = train.tanh %4 : tensor<2x8xf32>
  %6 = train.add %5, %one : tensor<2x8xf32>, tensor<f32> -> tensor<2x8xf32>
  %7 = train.mul %0, %6 : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
  return %7, %5 : tensor<2x8xf32>, tensor<2x8xf32>
}

//===----------------------------------------------------------------------===//
// RMSNorm
//===----------------------------------------------------------------------===//

// TorchScript: Pow ReduceMean Add(eps) Sqrt Div(1, .) Mul(x, .) Mul(weight, .)
// (the Casts around it are no-ops the importer drops).
// CHECK-LABEL: func.func @rms_norm_ts
// CHECK-SAME:    (%[[X:.*]]: tensor<2x4x8xf32>, %[[W:.*]]: tensor<8xf32>)
// CHECK-NEXT:    %[[Y:.*]] = train.rms_norm %[[X]], %[[W]] : tensor<2x4x8xf32>, tensor<8xf32>
// CHECK-NEXT:    return %[[Y]]
// SUBSET-LABEL: func.func @rms_norm_ts
// SUBSET-NOT:     train.rms_norm
func.func @rms_norm_ts(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>) -> tensor<2x4x8xf32> {
  %two = train.constant dense<2.000000e+00> : tensor<f32>
  %eps = train.constant dense<9.99999997E-7> : tensor<f32>
  %one = train.constant dense<1.000000e+00> : tensor<f32>
  %0 = train.pow %x, %two : tensor<2x4x8xf32>, tensor<f32> -> tensor<2x4x8xf32>
  %1 = train.reduce_mean %0, [-1] : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %2 = train.add %1, %eps : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %3 = train.sqrt %2 : tensor<2x4x1xf32>
  %4 = train.div %one, %3 : tensor<f32>, tensor<2x4x1xf32> -> tensor<2x4x1xf32>
  %5 = train.mul %x, %4 : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %6 = train.mul %w, %5 : tensor<8xf32>, tensor<2x4x8xf32> -> tensor<2x4x8xf32>
  return %6 : tensor<2x4x8xf32>
}

// dynamo: Reciprocal instead of Div(1, .); reduce axis written as 2.
// CHECK-LABEL: func.func @rms_norm_dynamo
// CHECK-SAME:    (%[[X:.*]]: tensor<2x4x8xf32>, %[[W:.*]]: tensor<8xf32>)
// CHECK-NEXT:    %[[Y:.*]] = train.rms_norm %[[X]], %[[W]] {epsilon = 9.99999974E-6 : f32} : tensor<2x4x8xf32>, tensor<8xf32>
// CHECK-NEXT:    return %[[Y]]
func.func @rms_norm_dynamo(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>) -> tensor<2x4x8xf32> {
  %two = train.constant dense<2.000000e+00> : tensor<f32>
  %eps = train.constant dense<9.99999974E-6> : tensor<f32>
  %0 = train.pow %x, %two : tensor<2x4x8xf32>, tensor<f32> -> tensor<2x4x8xf32>
  %1 = train.reduce_mean %0, [2] : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %2 = train.add %1, %eps : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %3 = train.sqrt %2 : tensor<2x4x1xf32>
  %4 = train.reciprocal %3 : tensor<2x4x1xf32>
  %5 = train.mul %x, %4 : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %6 = train.mul %w, %5 : tensor<8xf32>, tensor<2x4x8xf32> -> tensor<2x4x8xf32>
  return %6 : tensor<2x4x8xf32>
}

// x^3 is not a mean square.
// CHECK-LABEL: func.func @rms_norm_wrong_exponent
// CHECK-NOT:     train.rms_norm
func.func @rms_norm_wrong_exponent(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>) -> tensor<2x4x8xf32> {
  %three = train.constant dense<3.000000e+00> : tensor<f32>
  %eps = train.constant dense<9.99999997E-7> : tensor<f32>
  %0 = train.pow %x, %three : tensor<2x4x8xf32>, tensor<f32> -> tensor<2x4x8xf32>
  %1 = train.reduce_mean %0, [-1] : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %2 = train.add %1, %eps : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %3 = train.sqrt %2 : tensor<2x4x1xf32>
  %4 = train.reciprocal %3 : tensor<2x4x1xf32>
  %5 = train.mul %x, %4 : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %6 = train.mul %w, %5 : tensor<8xf32>, tensor<2x4x8xf32> -> tensor<2x4x8xf32>
  return %6 : tensor<2x4x8xf32>
}

// Mean over a middle axis: not a normalization of trailing dimensions.
// CHECK-LABEL: func.func @rms_norm_middle_axis
// CHECK-NOT:     train.rms_norm
func.func @rms_norm_middle_axis(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>) -> tensor<2x4x8xf32> {
  %two = train.constant dense<2.000000e+00> : tensor<f32>
  %eps = train.constant dense<9.99999997E-7> : tensor<f32>
  %0 = train.pow %x, %two : tensor<2x4x8xf32>, tensor<f32> -> tensor<2x4x8xf32>
  %1 = train.reduce_mean %0, [1] : tensor<2x4x8xf32> -> tensor<2x1x8xf32>
  %2 = train.add %1, %eps : tensor<2x1x8xf32>, tensor<f32> -> tensor<2x1x8xf32>
  %3 = train.sqrt %2 : tensor<2x1x8xf32>
  %4 = train.reciprocal %3 : tensor<2x1x8xf32>
  %5 = train.mul %x, %4 : tensor<2x4x8xf32>, tensor<2x1x8xf32> -> tensor<2x4x8xf32>
  %6 = train.mul %w, %5 : tensor<8xf32>, tensor<2x4x8xf32> -> tensor<2x4x8xf32>
  return %6 : tensor<2x4x8xf32>
}

// The normalized value before the weight is used elsewhere: no fusion.
// CHECK-LABEL: func.func @rms_norm_normed_has_other_use
// CHECK-NOT:     train.rms_norm
func.func @rms_norm_normed_has_other_use(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>) {
  %two = train.constant dense<2.000000e+00> : tensor<f32>
  %eps = train.constant dense<9.99999997E-7> : tensor<f32>
  %0 = train.pow %x, %two : tensor<2x4x8xf32>, tensor<f32> -> tensor<2x4x8xf32>
  %1 = train.reduce_mean %0, [-1] : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %2 = train.add %1, %eps : tensor<2x4x1xf32>, tensor<f32> -> tensor<2x4x1xf32>
  %3 = train.sqrt %2 : tensor<2x4x1xf32>
  %4 = train.reciprocal %3 : tensor<2x4x1xf32>
  %5 = train.mul %x, %4 : tensor<2x4x8xf32>, tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %6 = train.mul %w, %5 : tensor<8xf32>, tensor<2x4x8xf32> -> tensor<2x4x8xf32>
  return %6, %5 : tensor<2x4x8xf32>, tensor<2x4x8xf32>
}

//===----------------------------------------------------------------------===//
// Rotary embedding
//===----------------------------------------------------------------------===//

// TorchScript LLaMA: cos/sin are constant tables [1, 1, S, D] (the importer
// folds Cos/Sin of the traced angle table).
// CHECK-LABEL: func.func @rope_ts
// CHECK-SAME:    (%[[X:.*]]: tensor<1x2x2x4xf32>)
// CHECK:         %[[C:.*]] = train.constant
// CHECK-NEXT:    %[[S:.*]] = train.constant
// CHECK-NEXT:    %[[Y:.*]] = train.rope %[[X]], %[[C]], %[[S]] : tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32>, tensor<1x1x2x4xf32>
// CHECK-NEXT:    return %[[Y]]
func.func @rope_ts(%x: tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32> {
  %cos = train.constant dense<[[[[1.0, 1.0, 1.0, 1.0], [0.5403, 0.9999, 0.5403, 0.9999]]]]> : tensor<1x1x2x4xf32>
  %sin = train.constant dense<[[[[0.0, 0.0, 0.0, 0.0], [0.8415, 0.0100, 0.8415, 0.0100]]]]> : tensor<1x1x2x4xf32>
  %0 = train.mul %x, %cos : tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32> -> tensor<1x2x2x4xf32>
  %1 = train.slice %x {starts = array<i64: 0, 0, 0, 0>, steps = array<i64: 1, 1, 1, 1>} : tensor<1x2x2x4xf32> -> tensor<1x2x2x2xf32>
  %2 = train.slice %x {starts = array<i64: 0, 0, 0, 2>, steps = array<i64: 1, 1, 1, 1>} : tensor<1x2x2x4xf32> -> tensor<1x2x2x2xf32>
  %3 = train.neg %2 : tensor<1x2x2x2xf32>
  %4 = train.concat %3, %1 {axis = -1 : i64} : tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32> -> tensor<1x2x2x4xf32>
  %5 = train.mul %4, %sin : tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32> -> tensor<1x2x2x4xf32>
  %6 = train.add %0, %5 : tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32> -> tensor<1x2x2x4xf32>
  return %6 : tensor<1x2x2x4xf32>
}

// dynamo LLaMA: cos/sin computed in the graph (Concat of the angles, Cos,
// Sin, Mul by attention_scaling 1.0, Unsqueeze) from constants; the tables
// are left as they are and feed train.rope.
// CHECK-LABEL: func.func @rope_dynamo
// CHECK-SAME:    (%[[X:.*]]: tensor<1x2x2x4xf32>, %[[ANG:.*]]: tensor<1x2x2xf32>)
// CHECK:         %[[C:.*]] = train.reshape
// CHECK:         %[[S:.*]] = train.reshape
// CHECK-NEXT:    %[[Y:.*]] = train.rope %[[X]], %[[C]], %[[S]] : tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32>, tensor<1x1x2x4xf32>
// CHECK-NEXT:    return %[[Y]]
func.func @rope_dynamo(%x: tensor<1x2x2x4xf32>, %ang: tensor<1x2x2xf32>) -> tensor<1x2x2x4xf32> {
  %one = train.constant dense<1.000000e+00> : tensor<f32>
  %cat = train.concat %ang, %ang {axis = -1 : i64} : tensor<1x2x2xf32>, tensor<1x2x2xf32> -> tensor<1x2x4xf32>
  %c0 = train.cos %cat : tensor<1x2x4xf32>
  %c1 = train.mul %c0, %one : tensor<1x2x4xf32>, tensor<f32> -> tensor<1x2x4xf32>
  %s0 = train.sin %cat : tensor<1x2x4xf32>
  %s1 = train.mul %s0, %one : tensor<1x2x4xf32>, tensor<f32> -> tensor<1x2x4xf32>
  %cos = train.reshape %c1 : tensor<1x2x4xf32> -> tensor<1x1x2x4xf32>
  %sin = train.reshape %s1 : tensor<1x2x4xf32> -> tensor<1x1x2x4xf32>
  %0 = train.mul %x, %cos : tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32> -> tensor<1x2x2x4xf32>
  %1 = train.slice %x {starts = array<i64: 0, 0, 0, 0>, steps = array<i64: 1, 1, 1, 1>} : tensor<1x2x2x4xf32> -> tensor<1x2x2x2xf32>
  %2 = train.slice %x {starts = array<i64: 0, 0, 0, 2>, steps = array<i64: 1, 1, 1, 1>} : tensor<1x2x2x4xf32> -> tensor<1x2x2x2xf32>
  %3 = train.neg %2 : tensor<1x2x2x2xf32>
  %4 = train.concat %3, %1 {axis = 3 : i64} : tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32> -> tensor<1x2x2x4xf32>
  %5 = train.mul %sin, %4 : tensor<1x1x2x4xf32>, tensor<1x2x2x4xf32> -> tensor<1x2x2x4xf32>
  %6 = train.add %5, %0 : tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32> -> tensor<1x2x2x4xf32>
  return %6 : tensor<1x2x2x4xf32>
}

// Tables computed from a parameter (llama_dynamo's rotary_emb.inv_freq is an
// initializer, hence a train.param): train.rope has no gradient for its
// tables, so this stays unfused.
// CHECK-LABEL: func.func @rope_tables_from_param
// CHECK-NOT:     train.rope
module @rope_param {
  train.param @inv_freq : tensor<2xf32> at 0
  func.func @rope_tables_from_param(%x: tensor<1x2x2x4xf32>, %pos: tensor<1x2x1xf32>) -> tensor<1x2x2x4xf32> {
    %f = train.param_value @inv_freq : tensor<2xf32>
    %ang = train.mul %pos, %f : tensor<1x2x1xf32>, tensor<2xf32> -> tensor<1x2x2xf32>
    %cat = train.concat %ang, %ang {axis = -1 : i64} : tensor<1x2x2xf32>, tensor<1x2x2xf32> -> tensor<1x2x4xf32>
    %c0 = train.cos %cat : tensor<1x2x4xf32>
    %s0 = train.sin %cat : tensor<1x2x4xf32>
    %cos = train.reshape %c0 : tensor<1x2x4xf32> -> tensor<1x1x2x4xf32>
    %sin = train.reshape %s0 : tensor<1x2x4xf32> -> tensor<1x1x2x4xf32>
    %0 = train.mul %x, %cos : tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32> -> tensor<1x2x2x4xf32>
    %1 = train.slice %x {starts = array<i64: 0, 0, 0, 0>, steps = array<i64: 1, 1, 1, 1>} : tensor<1x2x2x4xf32> -> tensor<1x2x2x2xf32>
    %2 = train.slice %x {starts = array<i64: 0, 0, 0, 2>, steps = array<i64: 1, 1, 1, 1>} : tensor<1x2x2x4xf32> -> tensor<1x2x2x2xf32>
    %3 = train.neg %2 : tensor<1x2x2x2xf32>
    %4 = train.concat %3, %1 {axis = -1 : i64} : tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32> -> tensor<1x2x2x4xf32>
    %5 = train.mul %4, %sin : tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32> -> tensor<1x2x2x4xf32>
    %6 = train.add %0, %5 : tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32> -> tensor<1x2x2x4xf32>
    return %6 : tensor<1x2x2x4xf32>
  }
}

// concat(-x1, x2) (halves swapped) is not rotate_half.
// CHECK-LABEL: func.func @rope_halves_swapped
// CHECK-NOT:     train.rope
func.func @rope_halves_swapped(%x: tensor<1x2x2x4xf32>, %cos: tensor<1x1x2x4xf32>, %sin: tensor<1x1x2x4xf32>) -> tensor<1x2x2x4xf32> {
  %0 = train.mul %x, %cos : tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32> -> tensor<1x2x2x4xf32>
  %1 = train.slice %x {starts = array<i64: 0, 0, 0, 0>, steps = array<i64: 1, 1, 1, 1>} : tensor<1x2x2x4xf32> -> tensor<1x2x2x2xf32>
  %2 = train.slice %x {starts = array<i64: 0, 0, 0, 2>, steps = array<i64: 1, 1, 1, 1>} : tensor<1x2x2x4xf32> -> tensor<1x2x2x2xf32>
  %3 = train.neg %1 : tensor<1x2x2x2xf32>
  %4 = train.concat %3, %2 {axis = -1 : i64} : tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32> -> tensor<1x2x2x4xf32>
  %5 = train.mul %4, %sin : tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32> -> tensor<1x2x2x4xf32>
  %6 = train.add %0, %5 : tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32> -> tensor<1x2x2x4xf32>
  return %6 : tensor<1x2x2x4xf32>
}

// x * cos is also returned: no fusion.
// CHECK-LABEL: func.func @rope_product_has_other_use
// CHECK-NOT:     train.rope
func.func @rope_product_has_other_use(%x: tensor<1x2x2x4xf32>, %cos: tensor<1x1x2x4xf32>, %sin: tensor<1x1x2x4xf32>) -> (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>) {
  %0 = train.mul %x, %cos : tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32> -> tensor<1x2x2x4xf32>
  %1 = train.slice %x {starts = array<i64: 0, 0, 0, 0>, steps = array<i64: 1, 1, 1, 1>} : tensor<1x2x2x4xf32> -> tensor<1x2x2x2xf32>
  %2 = train.slice %x {starts = array<i64: 0, 0, 0, 2>, steps = array<i64: 1, 1, 1, 1>} : tensor<1x2x2x4xf32> -> tensor<1x2x2x2xf32>
  %3 = train.neg %2 : tensor<1x2x2x2xf32>
  %4 = train.concat %3, %1 {axis = -1 : i64} : tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32> -> tensor<1x2x2x4xf32>
  %5 = train.mul %4, %sin : tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32> -> tensor<1x2x2x4xf32>
  %6 = train.add %0, %5 : tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32> -> tensor<1x2x2x4xf32>
  return %6, %0 : tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>
}

//===----------------------------------------------------------------------===//
// Linear
//===----------------------------------------------------------------------===//

// GPT-2 Conv1D, both exporters: Reshape to 2-D, Gemm with a [N] bias,
// Reshape back. One linear on the 3-D input; the reshapes go.
// CHECK-LABEL: func.func @linear_gemm_conv1d
// CHECK-SAME:    (%[[X:.*]]: tensor<2x4x8xf32>, %[[W:.*]]: tensor<8x12xf32>, %[[B:.*]]: tensor<12xf32>)
// CHECK-NEXT:    %[[Y:.*]] = train.linear %[[X]], %[[W]], %[[B]] : tensor<2x4x8xf32>, tensor<8x12xf32>, tensor<12xf32> -> tensor<2x4x12xf32>
// CHECK-NEXT:    return %[[Y]]
// SUBSET-LABEL: func.func @linear_gemm_conv1d
// SUBSET:         train.gemm
func.func @linear_gemm_conv1d(%x: tensor<2x4x8xf32>, %w: tensor<8x12xf32>, %b: tensor<12xf32>) -> tensor<2x4x12xf32> {
  %0 = train.reshape %x : tensor<2x4x8xf32> -> tensor<8x8xf32>
  %1 = train.gemm %0, %w, %b : tensor<8x8xf32>, tensor<8x12xf32>, tensor<12xf32> -> tensor<8x12xf32>
  %2 = train.reshape %1 : tensor<8x12xf32> -> tensor<2x4x12xf32>
  return %2 : tensor<2x4x12xf32>
}

// Gemm with transB (torch nn.Linear on 2-D input): the weight is transposed.
// CHECK-LABEL: func.func @linear_gemm_transb
// CHECK-SAME:    (%[[X:.*]]: tensor<3x8xf32>, %[[W:.*]]: tensor<12x8xf32>, %[[B:.*]]: tensor<12xf32>)
// CHECK-NEXT:    %[[WT:.*]] = train.transpose %[[W]], [1, 0] : tensor<12x8xf32> -> tensor<8x12xf32>
// CHECK-NEXT:    %[[Y:.*]] = train.linear %[[X]], %[[WT]], %[[B]] : tensor<3x8xf32>, tensor<8x12xf32>, tensor<12xf32> -> tensor<3x12xf32>
// CHECK-NEXT:    return %[[Y]]
func.func @linear_gemm_transb(%x: tensor<3x8xf32>, %w: tensor<12x8xf32>, %b: tensor<12xf32>) -> tensor<3x12xf32> {
  %0 = train.gemm %x, %w, %b {transB = true} : tensor<3x8xf32>, tensor<12x8xf32>, tensor<12xf32> -> tensor<3x12xf32>
  return %0 : tensor<3x12xf32>
}

// nn.Linear without bias (LLaMA projections, GPT-2 lm_head), both exporters:
// Transpose(W) then a 3-D MatMul.
// CHECK-LABEL: func.func @linear_transpose_matmul
// CHECK-SAME:    (%[[X:.*]]: tensor<2x4x8xf32>, %[[W:.*]]: tensor<12x8xf32>)
// CHECK-NEXT:    %[[WT:.*]] = train.transpose %[[W]], [1, 0]
// CHECK-NEXT:    %[[Y:.*]] = train.linear %[[X]], %[[WT]] : tensor<2x4x8xf32>, tensor<8x12xf32> -> tensor<2x4x12xf32>
// CHECK-NEXT:    return %[[Y]]
func.func @linear_transpose_matmul(%x: tensor<2x4x8xf32>, %w: tensor<12x8xf32>) -> tensor<2x4x12xf32> {
  %0 = train.transpose %w, [1, 0] : tensor<12x8xf32> -> tensor<8x12xf32>
  %1 = train.matmul %x, %0 : tensor<2x4x8xf32>, tensor<8x12xf32> -> tensor<2x4x12xf32>
  return %1 : tensor<2x4x12xf32>
}

// nn.Linear with bias on 3-D input (TorchScript: Add(bias, MatMul)).
// CHECK-LABEL: func.func @linear_matmul_add
// CHECK-SAME:    (%[[X:.*]]: tensor<2x4x8xf32>, %[[W:.*]]: tensor<8x12xf32>, %[[B:.*]]: tensor<12xf32>)
// CHECK-NEXT:    %[[Y:.*]] = train.linear %[[X]], %[[W]], %[[B]] : tensor<2x4x8xf32>, tensor<8x12xf32>, tensor<12xf32> -> tensor<2x4x12xf32>
// CHECK-NEXT:    return %[[Y]]
func.func @linear_matmul_add(%x: tensor<2x4x8xf32>, %w: tensor<8x12xf32>, %b: tensor<12xf32>) -> tensor<2x4x12xf32> {
  %0 = train.matmul %x, %w : tensor<2x4x8xf32>, tensor<8x12xf32> -> tensor<2x4x12xf32>
  %1 = train.add %b, %0 : tensor<12xf32>, tensor<2x4x12xf32> -> tensor<2x4x12xf32>
  return %1 : tensor<2x4x12xf32>
}

// Negative: alpha != 1; a bias that is not [N]; a batched (3-D) right operand.
// The matmul of the second case becomes a bias-free linear; the add stays.
// CHECK-LABEL: func.func @linear_not_fused
// CHECK:         train.gemm {{.*}}alpha = 2.0
// CHECK:         %[[L:.*]] = train.linear %{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<8x12xf32> -> tensor<4x12xf32>
// CHECK-NEXT:    train.add %[[L]], %{{.*}} : tensor<4x12xf32>, tensor<4x12xf32>
// CHECK-NEXT:    train.matmul %{{.*}} : tensor<2x4x8xf32>, tensor<2x8x12xf32>
func.func @linear_not_fused(%x: tensor<4x8xf32>, %w: tensor<8x12xf32>, %b: tensor<12xf32>, %bb: tensor<4x12xf32>,
                            %x3: tensor<2x4x8xf32>, %w3: tensor<2x8x12xf32>) -> (tensor<4x12xf32>, tensor<4x12xf32>, tensor<2x4x12xf32>) {
  %0 = train.gemm %x, %w, %b {alpha = 2.0 : f32} : tensor<4x8xf32>, tensor<8x12xf32>, tensor<12xf32> -> tensor<4x12xf32>
  %1 = train.matmul %x, %w : tensor<4x8xf32>, tensor<8x12xf32> -> tensor<4x12xf32>
  %2 = train.add %1, %bb : tensor<4x12xf32>, tensor<4x12xf32> -> tensor<4x12xf32>
  %3 = train.matmul %x3, %w3 : tensor<2x4x8xf32>, tensor<2x8x12xf32> -> tensor<2x4x12xf32>
  return %0, %2, %3 : tensor<4x12xf32>, tensor<4x12xf32>, tensor<2x4x12xf32>
}

//===----------------------------------------------------------------------===//
// Causal self-attention
//===----------------------------------------------------------------------===//

// TorchScript GPT-2: K^T made directly by Transpose[0,2,3,1] of the [B,S,H,D]
// keys; Mul(scale); Add(mask) with the folded Where mask [B,1,S,S] (0 /
// -FLT_MAX); Softmax; MatMul V. K becomes Transpose[0,2,1,3] of the keys.
// CHECK-LABEL: func.func @attention_ts_gpt2
// CHECK-SAME:    (%[[Q:.*]]: tensor<2x2x4x8xf32>, %[[KS:.*]]: tensor<2x4x2x8xf32>, %[[V:.*]]: tensor<2x2x4x8xf32>)
// CHECK-NEXT:    %[[K:.*]] = train.transpose %[[KS]], [0, 2, 1, 3] : tensor<2x4x2x8xf32> -> tensor<2x2x4x8xf32>
// CHECK-NEXT:    %[[Y:.*]] = train.attention %[[Q]], %[[K]], %[[V]] {scale = 0.3535{{[0-9]*}} : f64} : tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>
// CHECK-NEXT:    return %[[Y]]
// SUBSET-LABEL: func.func @attention_ts_gpt2
// SUBSET:         train.softmax
func.func @attention_ts_gpt2(%q: tensor<2x2x4x8xf32>, %ks: tensor<2x4x2x8xf32>, %v: tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32> {
  %scale = train.constant dense<0.353553385> : tensor<f32>
  %mask = train.constant dense<[[[[0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38],
                                 [0.0, 0.0, -3.40282347E+38, -3.40282347E+38],
                                 [0.0, 0.0, 0.0, -3.40282347E+38],
                                 [0.0, 0.0, 0.0, 0.0]]],
                               [[[0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38],
                                 [0.0, 0.0, -3.40282347E+38, -3.40282347E+38],
                                 [0.0, 0.0, 0.0, -3.40282347E+38],
                                 [0.0, 0.0, 0.0, 0.0]]]]> : tensor<2x1x4x4xf32>
  %kt = train.transpose %ks, [0, 2, 3, 1] : tensor<2x4x2x8xf32> -> tensor<2x2x8x4xf32>
  %0 = train.matmul %q, %kt : tensor<2x2x4x8xf32>, tensor<2x2x8x4xf32> -> tensor<2x2x4x4xf32>
  %1 = train.mul %0, %scale : tensor<2x2x4x4xf32>, tensor<f32> -> tensor<2x2x4x4xf32>
  %2 = train.add %1, %mask : tensor<2x2x4x4xf32>, tensor<2x1x4x4xf32> -> tensor<2x2x4x4xf32>
  %3 = train.softmax %2 : tensor<2x2x4x4xf32>
  %4 = train.matmul %3, %v : tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32> -> tensor<2x2x4x8xf32>
  return %4 : tensor<2x2x4x8xf32>
}

// dynamo GPT-2: K^T is Transpose[0,1,3,2] of K = Transpose[0,2,1,3]; K is
// used as is. Mask [1,1,S,S] with -inf; the scale as a division by sqrt(D).
// CHECK-LABEL: func.func @attention_dynamo_gpt2
// CHECK-SAME:    (%[[Q:.*]]: tensor<2x2x4x8xf32>, %[[KS:.*]]: tensor<2x4x2x8xf32>, %[[V:.*]]: tensor<2x2x4x8xf32>)
// CHECK-NEXT:    %[[K:.*]] = train.transpose %[[KS]], [0, 2, 1, 3]
// CHECK-NEXT:    %[[Y:.*]] = train.attention %[[Q]], %[[K]], %[[V]] {scale = 0.3535{{[0-9]*}} : f64}
// CHECK-NEXT:    return %[[Y]]
func.func @attention_dynamo_gpt2(%q: tensor<2x2x4x8xf32>, %ks: tensor<2x4x2x8xf32>, %v: tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32> {
  %d = train.constant dense<2.82842708> : tensor<f32>
  %mask = train.constant dense<[[[[0.0, 0xFF800000, 0xFF800000, 0xFF800000],
                                 [0.0, 0.0, 0xFF800000, 0xFF800000],
                                 [0.0, 0.0, 0.0, 0xFF800000],
                                 [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %k = train.transpose %ks, [0, 2, 1, 3] : tensor<2x4x2x8xf32> -> tensor<2x2x4x8xf32>
  %kt = train.transpose %k, [0, 1, 3, 2] : tensor<2x2x4x8xf32> -> tensor<2x2x8x4xf32>
  %0 = train.matmul %q, %kt : tensor<2x2x4x8xf32>, tensor<2x2x8x4xf32> -> tensor<2x2x4x4xf32>
  %1 = train.div %0, %d : tensor<2x2x4x4xf32>, tensor<f32> -> tensor<2x2x4x4xf32>
  %2 = train.add %mask, %1 : tensor<1x1x4x4xf32>, tensor<2x2x4x4xf32> -> tensor<2x2x4x4xf32>
  %3 = train.softmax %2 {axis = 3 : si64} : tensor<2x2x4x4xf32>
  %4 = train.matmul %3, %v : tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32> -> tensor<2x2x4x8xf32>
  return %4 : tensor<2x2x4x8xf32>
}

// LLaMA (both exporters): grouped-query heads (4 query, 2 KV), repeat_kv as
// reshape [B,Hkv,1,S,D] -> broadcast_to [B,Hkv,2,S,D] -> reshape [B,H,S,D]
// for K and V, then K^T = Transpose[0,1,3,2]. The fused op reads the
// unexpanded K and V.
// CHECK-LABEL: func.func @attention_gqa_llama
// CHECK-SAME:    (%[[Q:.*]]: tensor<1x4x4x2xf32>, %[[K:.*]]: tensor<1x2x4x2xf32>, %[[V:.*]]: tensor<1x2x4x2xf32>)
// CHECK-NEXT:    %[[Y:.*]] = train.attention %[[Q]], %[[K]], %[[V]] {scale = 0.7071{{[0-9]*}} : f64} : tensor<1x4x4x2xf32>, tensor<1x2x4x2xf32>, tensor<1x2x4x2xf32>
// CHECK-NEXT:    return %[[Y]]
func.func @attention_gqa_llama(%q: tensor<1x4x4x2xf32>, %k: tensor<1x2x4x2xf32>, %v: tensor<1x2x4x2xf32>) -> tensor<1x4x4x2xf32> {
  %scale = train.constant dense<0.707106769> : tensor<f32>
  %mask = train.constant dense<[[[[0.0, -1.0E+9, -1.0E+9, -1.0E+9],
                                 [0.0, 0.0, -1.0E+9, -1.0E+9],
                                 [0.0, 0.0, 0.0, -1.0E+9],
                                 [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %k0 = train.reshape %k : tensor<1x2x4x2xf32> -> tensor<1x2x1x4x2xf32>
  %k1 = train.broadcast_to %k0 : tensor<1x2x1x4x2xf32> -> tensor<1x2x2x4x2xf32>
  %k2 = train.reshape %k1 : tensor<1x2x2x4x2xf32> -> tensor<1x4x4x2xf32>
  %v0 = train.reshape %v : tensor<1x2x4x2xf32> -> tensor<1x2x1x4x2xf32>
  %v1 = train.broadcast_to %v0 : tensor<1x2x1x4x2xf32> -> tensor<1x2x2x4x2xf32>
  %v2 = train.reshape %v1 : tensor<1x2x2x4x2xf32> -> tensor<1x4x4x2xf32>
  %kt = train.transpose %k2, [0, 1, 3, 2] : tensor<1x4x4x2xf32> -> tensor<1x4x2x4xf32>
  %0 = train.matmul %q, %kt : tensor<1x4x4x2xf32>, tensor<1x4x2x4xf32> -> tensor<1x4x4x4xf32>
  %1 = train.mul %0, %scale : tensor<1x4x4x4xf32>, tensor<f32> -> tensor<1x4x4x4xf32>
  %2 = train.add %1, %mask : tensor<1x4x4x4xf32>, tensor<1x1x4x4xf32> -> tensor<1x4x4x4xf32>
  %3 = train.softmax %2 : tensor<1x4x4x4xf32>
  %4 = train.matmul %3, %v2 : tensor<1x4x4x4xf32>, tensor<1x4x4x2xf32> -> tensor<1x4x4x2xf32>
  return %4 : tensor<1x4x4x2xf32>
}

// torch.onnx's dynamo default (the SDPA decomposition, GQA): Q and K^T each
// scaled by sqrt(scale) (here 0.5 * 0.5 = 0.25), K^T as
// reshape(transpose [0,2,1](reshape(K expanded -> [B*H, S, D]))), and the
// softmax guarded by where(isnan(p), 0, p), IsNaN imported as
// float(p == p) == 0. The fused op reads the unexpanded K and V.
// CHECK-LABEL: func.func @attention_dynamo_sdpa_gqa
// CHECK-SAME:    (%[[Q:.*]]: tensor<1x4x4x2xf32>, %[[K:.*]]: tensor<1x2x4x2xf32>, %[[V:.*]]: tensor<1x2x4x2xf32>)
// CHECK-NEXT:    %[[Y:.*]] = train.attention %[[Q]], %[[K]], %[[V]] {scale = 2.500000e-01 : f64} : tensor<1x4x4x2xf32>, tensor<1x2x4x2xf32>, tensor<1x2x4x2xf32>
// CHECK-NEXT:    return %[[Y]]
func.func @attention_dynamo_sdpa_gqa(%q: tensor<1x4x4x2xf32>, %k: tensor<1x2x4x2xf32>, %v: tensor<1x2x4x2xf32>) -> tensor<1x4x4x2xf32> {
  %half = train.constant dense<0.5> : tensor<f32>
  %zero = train.constant dense<0.0> : tensor<f32>
  %mask = train.constant dense<[[[[0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38],
                                 [0.0, 0.0, -3.40282347E+38, -3.40282347E+38],
                                 [0.0, 0.0, 0.0, -3.40282347E+38],
                                 [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %k0 = train.reshape %k : tensor<1x2x4x2xf32> -> tensor<1x2x1x4x2xf32>
  %k1 = train.broadcast_to %k0 : tensor<1x2x1x4x2xf32> -> tensor<1x2x2x4x2xf32>
  %v0 = train.reshape %v : tensor<1x2x4x2xf32> -> tensor<1x2x1x4x2xf32>
  %v1 = train.broadcast_to %v0 : tensor<1x2x1x4x2xf32> -> tensor<1x2x2x4x2xf32>
  %v2 = train.reshape %v1 : tensor<1x2x2x4x2xf32> -> tensor<1x4x4x2xf32>
  %kf = train.reshape %k1 : tensor<1x2x2x4x2xf32> -> tensor<4x4x2xf32>
  %kft = train.transpose %kf, [0, 2, 1] : tensor<4x4x2xf32> -> tensor<4x2x4xf32>
  %kt = train.reshape %kft : tensor<4x2x4xf32> -> tensor<1x4x2x4xf32>
  %qs = train.mul %q, %half : tensor<1x4x4x2xf32>, tensor<f32> -> tensor<1x4x4x2xf32>
  %ks = train.mul %kt, %half : tensor<1x4x2x4xf32>, tensor<f32> -> tensor<1x4x2x4xf32>
  %0 = train.matmul %qs, %ks : tensor<1x4x4x2xf32>, tensor<1x4x2x4xf32> -> tensor<1x4x4x4xf32>
  %2 = train.add %0, %mask : tensor<1x4x4x4xf32>, tensor<1x1x4x4xf32> -> tensor<1x4x4x4xf32>
  %3 = train.softmax %2 : tensor<1x4x4x4xf32>
  %e = train.equal %3, %3 : tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32> -> tensor<1x4x4x4xi1>
  %c = train.cast %e : tensor<1x4x4x4xi1> -> tensor<1x4x4x4xf32>
  %nan = train.equal %c, %zero : tensor<1x4x4x4xf32>, tensor<f32> -> tensor<1x4x4x4xi1>
  %p = train.where %nan, %zero, %3 : tensor<1x4x4x4xi1>, tensor<f32>, tensor<1x4x4x4xf32> -> tensor<1x4x4x4xf32>
  %4 = train.matmul %p, %v2 : tensor<1x4x4x4xf32>, tensor<1x4x4x2xf32> -> tensor<1x4x4x2xf32>
  return %4 : tensor<1x4x4x2xf32>
}

// The same guard around a softmax that something else reads too does not
// fuse: the guarded value is all the pattern may drop.
// CHECK-LABEL: func.func @attention_guard_shared
// CHECK-NOT:     train.attention
func.func @attention_guard_shared(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x4xf32>) {
  %zero = train.constant dense<0.0> : tensor<f32>
  %kt = train.transpose %k, [0, 1, 3, 2] : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %0 = train.matmul %q, %kt : tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32> -> tensor<1x2x4x4xf32>
  %3 = train.softmax %0 : tensor<1x2x4x4xf32>
  %e = train.equal %3, %3 : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32> -> tensor<1x2x4x4xi1>
  %c = train.cast %e : tensor<1x2x4x4xi1> -> tensor<1x2x4x4xf32>
  %nan = train.equal %c, %zero : tensor<1x2x4x4xf32>, tensor<f32> -> tensor<1x2x4x4xi1>
  %p = train.where %nan, %zero, %3 : tensor<1x2x4x4xi1>, tensor<f32>, tensor<1x2x4x4xf32> -> tensor<1x2x4x4xf32>
  %4 = train.matmul %p, %v : tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x8xf32>
  return %4, %3 : tensor<1x2x4x8xf32>, tensor<1x2x4x4xf32>
}

// No mask at all: non-causal attention (causal = false).
// CHECK-LABEL: func.func @attention_no_mask
// CHECK:         train.attention {{.*}}{causal = false, scale = 0.3535{{[0-9]*}} : f64}
func.func @attention_no_mask(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %scale = train.constant dense<0.353553385> : tensor<f32>
  %kt = train.transpose %k, [0, 1, 3, 2] : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %0 = train.matmul %q, %kt : tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32> -> tensor<1x2x4x4xf32>
  %1 = train.mul %scale, %0 : tensor<f32>, tensor<1x2x4x4xf32> -> tensor<1x2x4x4xf32>
  %3 = train.softmax %1 : tensor<1x2x4x4xf32>
  %4 = train.matmul %3, %v : tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x8xf32>
  return %4 : tensor<1x2x4x8xf32>
}

// Masks that are not causal: key 3 visible from query 2; a "mask" value of
// -1 (not large negative); a mask that is not a constant. None fuses.
// CHECK-LABEL: func.func @attention_mask_not_causal
// CHECK-NOT:     train.attention
// CHECK:         train.softmax
// CHECK-NOT:     train.attention
// CHECK:         train.softmax
// CHECK-NOT:     train.attention
// CHECK:         train.softmax
// CHECK-NOT:     train.attention
// CHECK:         return
func.func @attention_mask_not_causal(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>,
                                     %m: tensor<1x1x4x4xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) {
  %scale = train.constant dense<0.353553385> : tensor<f32>
  %leak = train.constant dense<[[[[0.0, -1.0E+9, -1.0E+9, -1.0E+9],
                                 [0.0, 0.0, -1.0E+9, -1.0E+9],
                                 [0.0, 0.0, 0.0, 0.0],
                                 [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %small = train.constant dense<[[[[0.0, -1.0, -1.0, -1.0],
                                  [0.0, 0.0, -1.0, -1.0],
                                  [0.0, 0.0, 0.0, -1.0],
                                  [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %kt = train.transpose %k, [0, 1, 3, 2] : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %a0 = train.matmul %q, %kt : tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32> -> tensor<1x2x4x4xf32>
  %a1 = train.mul %a0, %scale : tensor<1x2x4x4xf32>, tensor<f32> -> tensor<1x2x4x4xf32>
  %a2 = train.add %a1, %leak : tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32> -> tensor<1x2x4x4xf32>
  %a3 = train.softmax %a2 : tensor<1x2x4x4xf32>
  %a4 = train.matmul %a3, %v : tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x8xf32>
  %b0 = train.matmul %q, %kt : tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32> -> tensor<1x2x4x4xf32>
  %b1 = train.mul %b0, %scale : tensor<1x2x4x4xf32>, tensor<f32> -> tensor<1x2x4x4xf32>
  %b2 = train.add %b1, %small : tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32> -> tensor<1x2x4x4xf32>
  %b3 = train.softmax %b2 : tensor<1x2x4x4xf32>
  %b4 = train.matmul %b3, %v : tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x8xf32>
  %c0 = train.matmul %q, %kt : tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32> -> tensor<1x2x4x4xf32>
  %c1 = train.mul %c0, %scale : tensor<1x2x4x4xf32>, tensor<f32> -> tensor<1x2x4x4xf32>
  %c2 = train.add %c1, %m : tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32> -> tensor<1x2x4x4xf32>
  %c3 = train.softmax %c2 : tensor<1x2x4x4xf32>
  %c4 = train.matmul %c3, %v : tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x8xf32>
  return %a4, %b4, %c4 : tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>
}

// The attention probabilities are also returned; and a scale that is not a
// constant. Neither fuses.
// CHECK-LABEL: func.func @attention_not_fused
// CHECK-NOT:     train.attention
// CHECK:         return
func.func @attention_not_fused(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>,
                               %s: tensor<f32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) {
  %scale = train.constant dense<0.353553385> : tensor<f32>
  %kt = train.transpose %k, [0, 1, 3, 2] : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %a0 = train.matmul %q, %kt : tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32> -> tensor<1x2x4x4xf32>
  %a1 = train.mul %a0, %scale : tensor<1x2x4x4xf32>, tensor<f32> -> tensor<1x2x4x4xf32>
  %a3 = train.softmax %a1 : tensor<1x2x4x4xf32>
  %a4 = train.matmul %a3, %v : tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x8xf32>
  %b0 = train.matmul %q, %kt : tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32> -> tensor<1x2x4x4xf32>
  %b1 = train.mul %b0, %s : tensor<1x2x4x4xf32>, tensor<f32> -> tensor<1x2x4x4xf32>
  %b3 = train.softmax %b1 : tensor<1x2x4x4xf32>
  %b4 = train.matmul %b3, %v : tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x8xf32>
  return %a4, %a3, %b4 : tensor<1x2x4x8xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>
}
