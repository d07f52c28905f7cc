// RUN: spillway-opt %s -split-input-file -verify-diagnostics --train-attach-optimizer | FileCheck %s --check-prefixes=CHECK,DEFAULT
// RUN: spillway-opt %s -split-input-file -verify-diagnostics --train-attach-optimizer="lr=0.01 weight-decay=0" | FileCheck %s --check-prefixes=CHECK,CUSTOM
// RUN: not spillway-opt %s -split-input-file --train-attach-optimizer="optimizer=sgd" 2>&1 | FileCheck %s --check-prefix=SGD
// RUN: not spillway-opt %s --train-attach-optimizer="beta1=1.5" 2>&1 | FileCheck %s --check-prefix=BADOPT
// RUN: not spillway-opt %s --train-attach-optimizer="weight-decay=nan" 2>&1 | FileCheck %s --check-prefix=NANOPT
// RUN: not spillway-opt %s --train-attach-optimizer="eps=1e-46" 2>&1 | FileCheck %s --check-prefix=EPS32
// RUN: spillway-opt %s -split-input-file -verify-diagnostics --train-attach-optimizer="state-dtype=bf16" | FileCheck %s --check-prefixes=CHECK,DEFAULT,BF16STATE
// RUN: spillway-opt %s -split-input-file -verify-diagnostics --train-attach-optimizer="state-dtype=fp32" | FileCheck %s --check-prefixes=CHECK,DEFAULT --implicit-check-not=optimizer_state_dtype
// RUN: not spillway-opt %s --train-attach-optimizer="state-dtype=fp16" 2>&1 | FileCheck %s --check-prefix=BADSTATE
// RUN: sed '0,/^module {/s//module attributes {train.optimizer_state_dtype = "bf16"} {/' %s | not spillway-opt -split-input-file --train-attach-optimizer 2>&1 | FileCheck %s --check-prefix=CLASH
// RUN: sed '0,/^module {/s//module attributes {train.optimizer_state_dtype = "bf16"} {/' %s | spillway-opt -split-input-file -verify-diagnostics --train-attach-optimizer="state-dtype=bf16" | FileCheck %s --check-prefix=BF16STATE
// RUN: spillway-opt %s -split-input-file -verify-diagnostics --train-attach-optimizer="state-shards=4" | FileCheck %s --check-prefixes=CHECK,DEFAULT,SHARDS
// RUN: spillway-opt %s -split-input-file -verify-diagnostics --train-attach-optimizer="state-shards=4 grad-clip=1" | FileCheck %s --check-prefix=SHARDSCLIP
// RUN: spillway-opt %s -split-input-file -verify-diagnostics --train-attach-optimizer="state-shards=1" | FileCheck %s --check-prefixes=CHECK,DEFAULT --implicit-check-not=optimizer_state_shards
// RUN: not spillway-opt %s --train-attach-optimizer="state-shards=65537" 2>&1 | FileCheck %s --check-prefix=MANYSHARDS
// RUN: not spillway-opt %s --train-attach-optimizer="state-shards=2 optimizer=foam" 2>&1 | FileCheck %s --check-prefix=FOAMSHARDS
// RUN: spillway-opt %s -split-input-file -verify-diagnostics --train-attach-optimizer="state-shards=2 shard-gradients=true" | FileCheck %s --check-prefix=GRADSHARDS
// RUN: not spillway-opt %s --train-attach-optimizer="shard-gradients=true" 2>&1 | FileCheck %s --check-prefix=GRADSHARDS1

// state-shards=N (ZeRO over N ranks of an offload plan): the module says
// how many ranks shard the moments and where the shards are cut (64
// elements; the norm's 64 Ki-element blocks with clipping); 1, the
// default, adds nothing.
// SHARDS: module attributes {train.optimizer_state_shards = {align = 64 : i64, ranks = 4 : i64}}
// SHARDSCLIP: module attributes {train.optimizer_state_shards = {align = 65536 : i64, ranks = 4 : i64}}
// MANYSHARDS: error: train-attach-optimizer: state-shards 65537 is outside [1, 65536]
// FOAMSHARDS: error: train-attach-optimizer: state-shards 2 shards AdamW's state; FOAM's is folded already
// GRADSHARDS: module attributes {train.optimizer_state_shards = {align = 64 : i64, gradients = true, ranks = 2 : i64}}
// GRADSHARDS1: error: train-attach-optimizer: shard-gradients shards the gradients over the state-shards ranks; give state-shards N > 1

// state-dtype=bf16: the moments are stored as bf16, which the module says
// (the updates are the same ops); fp32, the default, adds no attribute. A
// module that has the attribute keeps it when state-dtype agrees, and is
// an error when it does not.
// BF16STATE: module attributes {train.optimizer_state_dtype = "bf16"}
// BADSTATE: error: train-attach-optimizer: unknown state-dtype 'fp16'; the optimizer state is stored as fp32 or bf16
// CLASH: error: train-attach-optimizer: the module's train.optimizer_state_dtype is "bf16" but state-dtype is fp32

// Every train.param_grad becomes a train.adamw with the options as f64
// attributes, in place.
// CHECK-LABEL: func.func @step
// CHECK-SAME:    (%[[GW:.*]]: tensor<4x3xf32>, %[[GB:.*]]: tensor<3xf32>)
// DEFAULT-NEXT:  train.adamw @fc.weight, %[[GW]] {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 1.000000e-02 : f64} : tensor<4x3xf32>
// DEFAULT-NEXT:  train.adamw @fc.bias, %[[GB]] {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 1.000000e-02 : f64} : tensor<3xf32>
// CUSTOM-NEXT:   train.adamw @fc.weight, %[[GW]] {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-02 : f64, weight_decay = 0.000000e+00 : f64} : tensor<4x3xf32>
// CUSTOM-NEXT:   train.adamw @fc.bias, %[[GB]] {{.*}}lr = 1.000000e-02 : f64, weight_decay = 0.000000e+00 : f64} : tensor<3xf32>
// CHECK-NOT:     train.param_grad
// CHECK:         return
// SGD: error: train-attach-optimizer: unknown optimizer 'sgd'; supported optimizers: adamw, foam
// BADOPT: error: train-attach-optimizer: invalid adamw options: beta1 is 1.500000e+00, expected a number in [0, 1)
// NaN fails every range (it used to pass "weight-decay >= 0" unnoticed).
// NANOPT: error: train-attach-optimizer: invalid adamw options: weight-decay is nan, expected a number in [0, 1e+06]
// EPS32: error: train-attach-optimizer: invalid adamw options: eps is 1.000000e-46: it is below 1.17549e-38, float32's smallest normal number
module {
  train.param @"fc.weight" : tensor<4x3xf32> at 0
  train.param @"fc.bias" : tensor<3xf32> at 48
  func.func @step(%gw: tensor<4x3xf32>, %gb: tensor<3xf32>) {
    train.param_grad @"fc.weight", %gw : tensor<4x3xf32>
    train.param_grad @"fc.bias", %gb : tensor<3xf32>
    return
  }
}

// -----

// Parameters but no gradients: autodiff has not run.
// expected-error @+1 {{train-attach-optimizer: module has no train.param_grad ops: run train-autodiff first, or the loss depends on no parameter (nothing to train)}}
module {
  train.param @p : tensor<3xf32> at 0
  func.func @forward_only() -> tensor<f32> {
    %p = train.param_value @p : tensor<3xf32>
    %l = train.reduce_sum %p, [] {keepdims = false} : tensor<3xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// No parameters at all: nothing to optimize, left unchanged.
// CHECK-LABEL: func.func @no_params
// CHECK-NEXT:    return
// expected-warning @+1 {{train-attach-optimizer: module has no parameters to optimize}}
module {
  func.func @no_params() {
    return
  }
}
