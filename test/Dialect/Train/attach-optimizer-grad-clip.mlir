// RUN: spillway-opt %s --train-attach-optimizer="grad-clip=0.5" | FileCheck %s
// RUN: spillway-opt %s --train-attach-optimizer="grad-clip=0.5" | spillway-opt | FileCheck %s
// RUN: spillway-opt %s --train-attach-optimizer | FileCheck %s --check-prefix=OFF
// RUN: not spillway-opt %s --train-attach-optimizer="grad-clip=-1" 2>&1 | FileCheck %s --check-prefix=NEG
// RUN: not spillway-opt %s --train-attach-optimizer="grad-clip=nan" 2>&1 | FileCheck %s --check-prefix=NAN
// RUN: not spillway-opt %s --train-attach-optimizer="grad-clip=1e7" 2>&1 | FileCheck %s --check-prefix=BIG
// RUN: not spillway-opt %s --train-attach-optimizer="grad-clip=1 optimizer=foam" 2>&1 | FileCheck %s --check-prefix=FOAM

// grad-clip: one train.clip_grad_norm of every gradient, in declaration
// order (the runtime sums the norms in it), after the last gradient; every
// update moves after it, in its order, and takes the coefficient as `clip`.
// The second RUN reparses the printed form.
// CHECK-LABEL: func.func @step
// CHECK-SAME:    (%[[GW:.*]]: tensor<4x3xf32>, %[[GB:.*]]: tensor<3xf32>)
// CHECK-NEXT:    %[[X:.*]] = train.exp %[[GB]]
// CHECK-NEXT:    %[[C:.*]] = train.clip_grad_norm %[[GW]], %[[GB]] {max_norm = 5.000000e-01 : f64} : tensor<4x3xf32>, tensor<3xf32>
// CHECK-NEXT:    train.adamw @fc.bias, %[[GB]] clip(%[[C]]) {{{.*}}} : tensor<3xf32>
// CHECK-NEXT:    train.adamw @fc.weight, %[[GW]] clip(%[[C]]) {{{.*}}} : tensor<4x3xf32>
// CHECK-NEXT:    return
// Off (the default): the updates stay in place, without `clip`.
// OFF-NOT:       clip
// OFF:           train.adamw @fc.bias, %{{.*}} {
// OFF-NEXT:      train.exp
// OFF-NEXT:      train.adamw @fc.weight, %{{.*}} {
// NEG: error: train-attach-optimizer: invalid grad-clip -1.000000e+00: expected a number in [0, 1e+06] (0: off)
// NAN: error: train-attach-optimizer: invalid grad-clip nan: expected a number in [0, 1e+06] (0: off)
// BIG: error: train-attach-optimizer: invalid grad-clip 1.000000e+07: expected a number in [0, 1e+06] (0: off)
// FOAM: error: train-attach-optimizer: grad-clip with optimizer=foam: FOAM updates take no clip coefficient (use optimizer=adamw, or no grad-clip)
module {
  train.param @"fc.weight" : tensor<4x3xf32> at 0
  train.param @"fc.bias" : tensor<3xf32> at 48
  func.func @step(%gw: tensor<4x3xf32>, %gb: tensor<3xf32>) {
    train.param_grad @"fc.bias", %gb : tensor<3xf32>
    %x = train.exp %gb : tensor<3xf32>
    train.param_grad @"fc.weight", %gw : tensor<4x3xf32>
    return
  }
}
