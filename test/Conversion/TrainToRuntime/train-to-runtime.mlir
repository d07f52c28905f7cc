// RUN: spillway-opt --convert-train-to-runtime --split-input-file --verify-diagnostics %s | FileCheck %s

// A linear classifier after autodiff and attach-optimizer: every train op
// becomes one runtime call, outputs are allocated with their static shapes.

module attributes {train.weights = "m.weights.bin"} {
  train.param @"fc.weight" : tensor<4x3xf32> at 0
  train.param @"fc.bias" : tensor<3xf32> at 64
  func.func @main(%x: tensor<8x4xf32> {train.name = "x"}, %y: tensor<8xi64> {train.name = "y"}) -> tensor<f32> {
    %w = train.param_value @"fc.weight" : tensor<4x3xf32>
    %b = train.param_value @"fc.bias" : tensor<3xf32>
    %h = train.matmul %x, %w : tensor<8x4xf32>, tensor<4x3xf32> -> tensor<8x3xf32>
    %z = train.add %h, %b : tensor<8x3xf32>, tensor<3xf32> -> tensor<8x3xf32>
    %l = train.softmax_cross_entropy_loss %z, %y {ignore_index = -100 : si64} : tensor<8x3xf32>, tensor<8xi64>
    %one = train.constant dense<1.0> : tensor<f32>
    %dz = train.softmax_cross_entropy_loss_grad %z, %y, %one {ignore_index = -100 : si64} : tensor<8x3xf32>, tensor<8xi64>, tensor<f32>
    %db = train.sum_to_shape %dz : tensor<8x3xf32> -> tensor<3xf32>
    %xt = train.transpose %x, [1, 0] : tensor<8x4xf32> -> tensor<4x8xf32>
    %dw = train.matmul %xt, %dz : tensor<4x8xf32>, tensor<8x3xf32> -> tensor<4x3xf32>
    train.adamw @"fc.weight", %dw {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.01} : tensor<4x3xf32>
    train.param_grad @"fc.bias", %db : tensor<3xf32>
    return %l : tensor<f32>
  }
}

// The parameter and input tables, with names, dtypes (1 = f32, 2 = i64),
// ranks, shapes and weights-file offsets; the weights end at 64 + 12 bytes.
// CHECK-DAG: llvm.mlir.global internal constant @[[$W:spw_str_[0-9]+]]("fc.weight\00")
// CHECK-DAG: llvm.mlir.global internal constant @[[$WSHAPE:spw_i64_[0-9]+]](dense<[4, 3]> : tensor<2xi64>)
// CHECK-DAG: llvm.mlir.global internal constant @[[$XT:spw_i64_[0-9]+]](dense<[1, 0]> : tensor<2xi64>)
// CHECK-DAG: llvm.mlir.global internal constant @[[$LOSS:spw_i64_[0-9]+]](dense<[0, 1, -100]> : tensor<3xi64>)
// CHECK-DAG: llvm.mlir.global internal constant @[[$ONE:spw_const_[0-9]+]](dense<1.000000e+00> : tensor<1xf32>)
// CHECK-NOT: train.
// CHECK-LABEL: llvm.func @spw_model_declare(%{{.*}}: !llvm.ptr)
// CHECK:         %[[TOTAL:.*]] = llvm.mlir.constant(76 : i64)
// CHECK:         llvm.call @spw_declare_weights(%{{.*}}, %[[TOTAL]])
// CHECK:         %[[NAME:.*]] = llvm.mlir.addressof @[[$W]]
// CHECK:         %[[F32:.*]] = llvm.mlir.constant(1 : i32)
// CHECK:         %[[RANK:.*]] = llvm.mlir.constant(2 : i32)
// CHECK:         %[[SHAPE:.*]] = llvm.mlir.addressof @[[$WSHAPE]]
// CHECK:         llvm.call @spw_declare_param(%{{.*}}, %[[NAME]], %[[F32]], %[[RANK]], %[[SHAPE]], %{{.*}})
// CHECK:         llvm.call @spw_declare_param
// CHECK:         llvm.call @spw_declare_input
// CHECK:         llvm.call @spw_declare_input
// CHECK:         llvm.call @spw_declare_adamw
// CHECK-LABEL: llvm.func @spw_model_step(%{{.*}}: !llvm.ptr)
// CHECK:         llvm.call @spw_input
// CHECK:         llvm.call @spw_input
// CHECK:         llvm.call @spw_param
// CHECK:         llvm.call @spw_param
// CHECK:         llvm.call @spw_alloc
// CHECK:         llvm.call @spw_op_matmul
// CHECK:         llvm.call @spw_alloc
// CHECK:         llvm.call @spw_op_add
// CHECK:         llvm.call @spw_alloc
// CHECK:         %[[LATTR:.*]] = llvm.mlir.addressof @[[$LOSS]]
// CHECK:         llvm.call @spw_op_softmax_cross_entropy_loss(%{{.*}}, %{{.*}}, %{{.*}}, %[[LATTR]], %{{.*}})
// CHECK:         %[[C:.*]] = llvm.mlir.addressof @[[$ONE]]
// CHECK:         llvm.call @spw_constant(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[C]])
// CHECK:         llvm.call @spw_op_softmax_cross_entropy_loss_grad
// CHECK:         llvm.call @spw_op_sum_to_shape
// CHECK:         %[[PERM:.*]] = llvm.mlir.addressof @[[$XT]]
// CHECK:         llvm.call @spw_op_transpose(%{{.*}}, %{{.*}}, %{{.*}}, %[[PERM]], %{{.*}})
// CHECK:         llvm.call @spw_op_matmul
// CHECK:         llvm.call @spw_adamw
// CHECK:         llvm.call @spw_param_grad
// CHECK:         llvm.call @spw_set_loss
// CHECK:         llvm.return
// CHECK-LABEL: llvm.func @main(%{{.*}}: i32, %{{.*}}: !llvm.ptr) -> i32
// CHECK:         llvm.call @spw_main

// -----

// expected-error @+1 {{convert-train-to-runtime expects exactly one func.func (the training step), found 2}}
module {
  func.func @a() { return }
  func.func @b() { return }
}

// -----

// expected-error @+1 {{'func.func' op input #0 must be a statically shaped tensor; bind symbolic dimensions with --bind NAME=INT}}
func.func @main(%x: tensor<?x4xf32>) -> tensor<f32> {
  %s = train.reduce_sum %x, [] {keepdims = false} : tensor<?x4xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// An absent optional operand still takes its (null) slot in the input array:
// gemm without C passes three inputs, so the scratch array has three slots.
module {
  func.func @main(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) -> tensor<f32> {
    %y = train.gemm %a, %b : tensor<2x3xf32>, tensor<3x4xf32> -> tensor<2x4xf32>
    %l = train.reduce_sum %y, [] {keepdims = false} : tensor<2x4xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}
// CHECK-LABEL: llvm.func @spw_model_step
// CHECK:         llvm.alloca %{{.*}} x !llvm.array<3 x ptr>
// CHECK:         %[[NULL:.*]] = llvm.mlir.zero : !llvm.ptr
// CHECK:         %[[SLOT:.*]] = llvm.getelementptr %{{.*}}[0, 2] : (!llvm.ptr) -> !llvm.ptr, !llvm.array<3 x ptr>
// CHECK-NEXT:    llvm.store %[[NULL]], %[[SLOT]]
// CHECK:         llvm.call @spw_op_gemm

// -----

// The optimizer overlap's updates: last step's deferred elements of @w
// applied before @w is read, then [0, 4) deferred and [4, 6) updated now.
// With only defers in the step, they still declare the AdamW defaults.
module {
  train.param @w : tensor<2x3xf32> at 0
  func.func @main(%x: tensor<2x3xf32>) -> tensor<f32> {
    train.adamw_apply_pending @w [0, 4)
    %w = train.param_value @w : tensor<2x3xf32>
    %y = train.mul %x, %w : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
    %l = train.reduce_sum %y, [] {keepdims = false} : tensor<2x3xf32> -> tensor<f32>
    train.adamw_defer @w [0, 4), %x {lr = 2.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0} : tensor<2x3xf32>
    train.adamw @w [4, 6), %x {lr = 2.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0} : tensor<2x3xf32>
    return %l : tensor<f32>
  }
}
// CHECK-LABEL: llvm.func @spw_model_declare
// CHECK:         %[[LR:.*]] = llvm.mlir.constant(2.000000e-03 : f64) : f64
// CHECK:         llvm.call @spw_declare_adamw(%{{.*}}, %[[LR]],
// CHECK-LABEL: llvm.func @spw_model_step
// CHECK:         %[[B0:.*]] = llvm.mlir.constant(0 : i64) : i64
// CHECK:         %[[E0:.*]] = llvm.mlir.constant(4 : i64) : i64
// CHECK:         llvm.call @spw_adamw_apply_pending(%{{.*}}, %{{.*}}, %[[B0]], %[[E0]]) : (!llvm.ptr, i32, i64, i64) -> ()
// CHECK:         llvm.call @spw_param
// CHECK:         llvm.call @spw_op_mul
// CHECK:         llvm.call @spw_adamw_defer(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (!llvm.ptr, i32, !llvm.ptr, i64, i64, f64, f64, f64, f64, f64) -> ()
// CHECK:         %[[B1:.*]] = llvm.mlir.constant(4 : i64) : i64
// CHECK:         %[[E1:.*]] = llvm.mlir.constant(6 : i64) : i64
// CHECK:         llvm.call @spw_adamw_range(%{{.*}}, %{{.*}}, %{{.*}}, %[[B1]], %[[E1]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (!llvm.ptr, i32, !llvm.ptr, i64, i64, f64, f64, f64, f64, f64) -> ()
// CHECK-NOT:     llvm.call @spw_adamw(

// -----

// Gradient clipping: the norm's call names each gradient's parameter, the
// one an update of it with the coefficient names (@b: 1, @w: 0; a gradient
// no update takes: -1), so that ZeRO can reduce-scatter it.
module {
  train.param @w : tensor<2x3xf32> at 0
  train.param @b : tensor<3xf32> at 24
  func.func @main(%x: tensor<2x3xf32>, %y: tensor<3xf32>, %z: tensor<3xf32>) -> tensor<f32> {
    %w = train.param_value @w : tensor<2x3xf32>
    %m = train.mul %x, %w : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
    %l = train.reduce_sum %m, [] {keepdims = false} : tensor<2x3xf32> -> tensor<f32>
    %c = train.clip_grad_norm %y, %x, %z {max_norm = 1.0 : f64} : tensor<3xf32>, tensor<2x3xf32>, tensor<3xf32>
    train.adamw @w, %x clip(%c) {lr = 2.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0} : tensor<2x3xf32>
    train.adamw_defer @b [0, 3), %y clip(%c) {lr = 2.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0} : tensor<3xf32>
    return %l : tensor<f32>
  }
}
// CHECK-DAG: llvm.mlir.global internal constant @[[$CLIPPARAMS:spw_i64_[0-9]+]](dense<[1, 0, -1]> : tensor<3xi64>)
// CHECK-LABEL: llvm.func @spw_model_step
// CHECK:         %[[PARAMS:.*]] = llvm.mlir.addressof @[[$CLIPPARAMS]]
// CHECK:         llvm.call @spw_clip_grad_norm_params(%{{.*}}, %{{.*}}, %{{.*}}, %[[PARAMS]], %{{.*}}) : (!llvm.ptr, i32, !llvm.ptr, !llvm.ptr, f64) -> !llvm.ptr

// -----

// target=cuda: spw_model_declare first registers the CUDA backend with the
// precision (0 fp32, 1 bf16); the step itself is the same calls.
// RUN: spillway-opt --convert-train-to-runtime="target=cuda precision=bf16" %s --split-input-file --verify-diagnostics | FileCheck %s --check-prefix=CUDA
// RUN: spillway-opt --convert-train-to-runtime="target=cuda" %s --split-input-file --verify-diagnostics | FileCheck %s --check-prefix=CUDA32
// CUDA-LABEL:   llvm.func @spw_model_declare
// CUDA:           %[[P:.*]] = llvm.mlir.constant(1 : i32) : i32
// CUDA-NEXT:      llvm.call @spw_use_cuda(%{{.*}}, %[[P]])
// CUDA-NEXT:      llvm.mlir.constant
// CUDA-NEXT:      llvm.call @spw_declare_weights
// CUDA32-LABEL: llvm.func @spw_model_declare
// CUDA32:         %[[P:.*]] = llvm.mlir.constant(0 : i32) : i32
// CUDA32-NEXT:    llvm.call @spw_use_cuda(%{{.*}}, %[[P]])
// The CPU target calls nothing of the kind.
// RUN: spillway-opt --convert-train-to-runtime %s --split-input-file --verify-diagnostics | FileCheck %s --check-prefix=CPU
// CPU-NOT: spw_use_cuda
// Each step tensor is released right after its last use: the product after
// the sum reads it. The reshape is a view of the sum (spw_view, no copy), so
// the sum lives as long as its view, here the returned loss: never
// released; nor are the input and the parameter (not step tensors).
// RUN: spillway-opt --convert-train-to-runtime %s --split-input-file --verify-diagnostics | FileCheck %s --check-prefix=REL
// REL-LABEL: "release_probe
// REL-LABEL: llvm.func @spw_model_step
// REL:       %[[P:.*]] = llvm.call @spw_alloc
// REL:       llvm.call @spw_op_mul
// REL-NEXT:  llvm.mlir.constant
// REL:       %[[S:.*]] = llvm.call @spw_alloc
// REL:       llvm.call @spw_op_reduce_sum
// REL-NEXT:  llvm.call @spw_release(%arg0, %[[P]])
// REL:       %[[L:.*]] = llvm.call @spw_view(%arg0, %[[S]],
// REL-NEXT:  llvm.call @spw_set_loss(%arg0, %[[L]])
// REL-NEXT:  llvm.return
// Bad options.
// RUN: not spillway-opt --convert-train-to-runtime="target=tpu" %s --split-input-file 2>&1 | FileCheck %s --check-prefix=BADTARGET
// BADTARGET: error: convert-train-to-runtime: unknown target 'tpu' (expected cpu or cuda)
// RUN: not spillway-opt --convert-train-to-runtime="precision=fp8 target=cuda" %s --split-input-file 2>&1 | FileCheck %s --check-prefix=BADPREC
// BADPREC: error: convert-train-to-runtime: unknown precision 'fp8' (expected fp32 or bf16)
// RUN: not spillway-opt --convert-train-to-runtime="precision=bf16" %s --split-input-file 2>&1 | FileCheck %s --check-prefix=BF16CPU
// BF16CPU: error: convert-train-to-runtime: precision=bf16 needs target=cuda (the CPU kernels compute in fp32)

module {
  train.param @w : tensor<2xf32> at 0
  func.func @main(%x: tensor<2xf32> {train.name = "release_probe"}) -> tensor<f32> {
    %w = train.param_value @w : tensor<2xf32>
    %p = train.mul %x, %w : tensor<2xf32>, tensor<2xf32> -> tensor<2xf32>
    %s = train.reduce_sum %p, [0] : tensor<2xf32> -> tensor<1xf32>
    %l = train.reshape %s : tensor<1xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// A splat constant is filled at run time from its one element (broadcast_to
// of a scalar), not stored whole in the executable: 2^33 floats would be a
// 32 GiB global (issue 15, class 1).
// RUN: spillway-opt --convert-train-to-runtime %s --split-input-file --verify-diagnostics | FileCheck %s --check-prefix=SPLAT
// SPLAT-NOT: tensor<8589934592xf32>
// SPLAT:       llvm.mlir.global internal constant @{{spw_const_[0-9]+}}(dense<2.500000e+00> : tensor<1xf32>)
// SPLAT:       "splat_probe\00"
// SPLAT-NOT: tensor<8589934592xf32>
// SPLAT:       llvm.func @spw_model_step
// SPLAT:       %[[S:.*]] = llvm.call @spw_constant(%arg0,
// SPLAT:       llvm.call @spw_alloc
// SPLAT:       llvm.call @spw_op_broadcast_to(%arg0,
// SPLAT-NEXT:  llvm.call @spw_release(%arg0, %[[S]])
// SPLAT:       llvm.call @spw_op_reduce_sum
module {
  func.func @main(%x: tensor<2xf32> {train.name = "splat_probe"}) -> tensor<f32> {
    %c = train.constant dense<2.5> : tensor<8589934592xf32>
    %s = train.reduce_sum %c, [0] : tensor<8589934592xf32> -> tensor<1xf32>
    %l = train.reshape %s : tensor<1xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// The names --save writes beside a parameter's own: a tie's other names
// (spw_declare_param_alias) and the model parameter a fold is rows of
// (spw_declare_param_fold), each after the parameter is declared.
// RUN: spillway-opt --convert-train-to-runtime %s --split-input-file --verify-diagnostics | FileCheck %s --check-prefix=NAMES
// NAMES-LABEL: module attributes {train.param_aliases
// NAMES-DAG:   llvm.mlir.global internal constant @[[WPE:spw_str_[0-9]+]]("model.transformer.wpe.weight\00")
// NAMES-DAG:   llvm.mlir.global internal constant @[[HEAD:spw_str_[0-9]+]]("lm_head.weight\00")
// NAMES:       llvm.func @spw_model_declare
// NAMES:       llvm.call @spw_declare_param
// NAMES:       llvm.call @spw_declare_param
// NAMES:       %[[I0:.*]] = llvm.mlir.constant(0 : i32)
// NAMES:       %[[A:.*]] = llvm.mlir.addressof @[[HEAD]]
// NAMES:       llvm.call @spw_declare_param_alias(%{{.*}}, %[[I0]], %[[A]])
// NAMES:       %[[I1:.*]] = llvm.mlir.constant(1 : i32)
// NAMES:       %[[F:.*]] = llvm.mlir.addressof @[[WPE]]
// NAMES:       llvm.call @spw_declare_param_fold(%{{.*}}, %[[I1]], %[[F]])
module attributes {train.param_aliases = {"transformer.wte.weight" = ["lm_head.weight"]}, train.param_folds = {embedding_1 = "model.transformer.wpe.weight"}} {
  train.param @"transformer.wte.weight" : tensor<2xf32> at 0
  train.param @embedding_1 : tensor<2xf32> at 8
  func.func @main(%x: tensor<2xf32> {train.name = "names_probe"}) -> tensor<f32> {
    %w = train.param_value @"transformer.wte.weight" : tensor<2xf32>
    %e = train.param_value @embedding_1 : tensor<2xf32>
    %p = train.mul %w, %e : tensor<2xf32>, tensor<2xf32> -> tensor<2xf32>
    %s = train.reduce_sum %p, [0] : tensor<2xf32> -> tensor<1xf32>
    %l = train.reshape %s : tensor<1xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// expected-error @+1 {{train.param_folds: no parameter @gone}}
module attributes {train.param_folds = {gone = "model.transformer.wpe.weight"}} {
  train.param @w : tensor<2xf32> at 0
  func.func @main(%x: tensor<2xf32>) -> tensor<f32> {
    %w = train.param_value @w : tensor<2xf32>
    %p = train.mul %x, %w : tensor<2xf32>, tensor<2xf32> -> tensor<2xf32>
    %s = train.reduce_sum %p, [0] : tensor<2xf32> -> tensor<1xf32>
    %l = train.reshape %s : tensor<1xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// bf16 storage inside the step: allocated as dtype 5 (SPW_BF16), written
// and read by spw_op_cast.
// RUN: spillway-opt --convert-train-to-runtime %s --split-input-file --verify-diagnostics | FileCheck %s --check-prefix=BF16
// BF16-LABEL: "bf16_probe\00"
// BF16:       llvm.func @spw_model_step
// BF16:       %[[BF:.*]] = llvm.mlir.constant(5 : i32) : i32
// BF16-NEXT:  %[[RANK:.*]] = llvm.mlir.constant(1 : i32) : i32
// BF16-NEXT:  %[[DIMS:.*]] = llvm.mlir.addressof
// BF16-NEXT:  %[[S:.*]] = llvm.call @spw_alloc(%arg0, %[[BF]], %[[RANK]], %[[DIMS]])
// BF16:       llvm.call @spw_op_cast
// BF16:       llvm.call @spw_op_cast
// BF16-NEXT:  llvm.call @spw_release(%arg0, %[[S]])
module {
  func.func @main(%x: tensor<2xf32> {train.name = "bf16_probe"}) -> tensor<f32> {
    %b = train.cast %x : tensor<2xf32> -> tensor<2xbf16>
    %f = train.cast %b : tensor<2xbf16> -> tensor<2xf32>
    %s = train.reduce_sum %f, [0] : tensor<2xf32> -> tensor<1xf32>
    %l = train.reshape %s : tensor<1xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// What crosses the step's boundary is never bf16: .npy inputs and outputs
// hold f32.
// expected-error @+1 {{'func.func' op input #0 is bf16: inputs and outputs are f32, i64, i32 or i1; cast to bf16 inside the step (train.cast)}}
func.func @main(%x: tensor<2xbf16>) -> tensor<f32> {
  %f = train.cast %x : tensor<2xbf16> -> tensor<2xf32>
  %s = train.reduce_sum %f, [0] : tensor<2xf32> -> tensor<1xf32>
  %l = train.reshape %s : tensor<1xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// expected-error @+1 {{'func.func' op output #0 is bf16: inputs and outputs are f32, i64, i32 or i1; cast to bf16 inside the step (train.cast)}}
func.func @main(%x: tensor<2xf32> {train.name = "x"}) -> (tensor<2xbf16> {train.name = "y"}) attributes {train.forward_only} {
  %b = train.cast %x : tensor<2xf32> -> tensor<2xbf16>
  return %b : tensor<2xbf16>
}

// -----

// A bf16-mixed step (train-mixed-precision's train.precision) tells the
// runtime so, before the step: the banner says it and --check-gradients is
// refused. Without the attribute nothing is declared (the two cases of this
// file that have it declare it once each).
// CHECK: llvm.call @spw_declare_bf16_mixed(%{{.*}}) : (!llvm.ptr) -> ()
// RUN: spillway-opt --convert-train-to-runtime --split-input-file --verify-diagnostics %s | grep -c "llvm.call @spw_declare_bf16_mixed" | FileCheck %s --check-prefix=ONCE
// ONCE: {{^}}2{{$}}
module attributes {train.precision = "bf16-mixed"} {
  func.func @main(%x: tensor<2xf32> {train.name = "mixed_probe"}) -> tensor<f32> {
    %b = train.cast %x : tensor<2xf32> -> tensor<2xbf16>
    %f = train.cast %b : tensor<2xbf16> -> tensor<2xf32>
    %s = train.reduce_sum %f, [0] : tensor<2xf32> -> tensor<1xf32>
    %l = train.reshape %s : tensor<1xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// Without an offload plan, a bf16-mixed step reads a parameter's rounding
// from the runtime's working copy (spw_param_work: the update keeps it, so
// the weights are not rounded again at every read). The rounding of any
// other value stays a cast; so does a parameter's outside bf16-mixed
// (NOWORK), and under an offload plan (e2e/offload-bf16-mixed.test).
// RUN: spillway-opt --convert-train-to-runtime --split-input-file --verify-diagnostics %s | FileCheck %s --check-prefix=WORK
// WORK-LABEL: "work_probe\00"
// WORK:         llvm.func @spw_model_step
// WORK:         llvm.call @spw_input(
// WORK-NEXT:    %[[I:.*]] = llvm.mlir.constant(0 : i32) : i32
// WORK-NEXT:    %[[W:.*]] = llvm.call @spw_param_work(%arg0, %[[I]]) : (!llvm.ptr, i32) -> !llvm.ptr
// WORK-NOT:     llvm.call @spw_op_cast
// WORK:         llvm.call @spw_op_cast
// WORK-NOT:     llvm.call @spw_op_cast
// WORK:         llvm.call @spw_op_matmul
// WORK-NOT:     llvm.call @spw_release(%arg0, %[[W]])
// WORK-NOT:     llvm.call @spw_param(
// WORK:         llvm.return
// RUN: sed 's/attributes {train.precision = "bf16-mixed"} //' %s | spillway-opt --convert-train-to-runtime --split-input-file --verify-diagnostics | FileCheck %s --check-prefix=NOWORK --implicit-check-not=spw_param_work
// NOWORK: "work_probe\00"
// NOWORK: llvm.call @spw_param(%arg0
// NOWORK: llvm.call @spw_op_cast
module attributes {train.precision = "bf16-mixed"} {
  train.param @w : tensor<2x2xf32> at 0
  func.func @main(%x: tensor<2x2xf32> {train.name = "work_probe"}) -> tensor<f32> {
    %w = train.param_value @w : tensor<2x2xf32>
    %wb = train.cast %w : tensor<2x2xf32> -> tensor<2x2xbf16>
    %wf = train.cast %wb : tensor<2x2xbf16> -> tensor<2x2xf32>
    %y = train.matmul %x, %wf : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %s = train.reduce_sum %y, [0, 1] : tensor<2x2xf32> -> tensor<1x1xf32>
    %l = train.reshape %s : tensor<1x1xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// bf16 optimizer state (train-attach-optimizer's state-dtype=bf16,
// train.optimizer_state_dtype): the runtime hears it before the step, as
// spw_declare_optimizer_state_dtype(ctx, 5), SPW_BF16; its moments are
// stored as bf16. "fp32" (and no attribute: every other case of this
// file) declares nothing (STATE32's sed).
// RUN: spillway-opt --convert-train-to-runtime --split-input-file --verify-diagnostics %s | FileCheck %s --check-prefix=STATE
// RUN: spillway-opt --convert-train-to-runtime --split-input-file --verify-diagnostics %s | grep -c "llvm.call @spw_declare_optimizer_state_dtype" | FileCheck %s --check-prefix=STATEONCE
// RUN: sed 's/train.optimizer_state_dtype = "bf16"/train.optimizer_state_dtype = "fp32"/' %s | spillway-opt --convert-train-to-runtime --split-input-file --verify-diagnostics | FileCheck %s --check-prefix=STATE32 --implicit-check-not=spw_declare_optimizer_state_dtype
// STATE:         "state_probe\00"
// STATE:         llvm.func @spw_model_declare
// STATE:         llvm.call @spw_declare_param(
// STATE:         %[[DT:.*]] = llvm.mlir.constant(5 : i32) : i32
// STATE-NEXT:    llvm.call @spw_declare_optimizer_state_dtype(%arg0, %[[DT]]) : (!llvm.ptr, i32) -> ()
// STATE:         llvm.call @spw_declare_input(
// STATEONCE: {{^}}1{{$}}
// STATE32: "state_probe\00"
module attributes {train.optimizer_state_dtype = "bf16"} {
  train.param @w : tensor<2x2xf32> at 0
  func.func @main(%x: tensor<2x2xf32> {train.name = "state_probe"}) -> tensor<f32> {
    %w = train.param_value @w : tensor<2x2xf32>
    %y = train.matmul %x, %w : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %s = train.reduce_sum %y, [0, 1] : tensor<2x2xf32> -> tensor<1x1xf32>
    %l = train.reshape %s : tensor<1x1xf32> -> tensor<f32>
    %g = train.transpose %x, [1, 0] : tensor<2x2xf32> -> tensor<2x2xf32>
    train.adamw @w, %g {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.01} : tensor<2x2xf32>
    return %l : tensor<f32>
  }
}
