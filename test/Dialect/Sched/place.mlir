// sched-place: the placement becomes the iteration's attributes; what the
// executor cannot run is refused.
// RUN: spillway-opt %s --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-order "--sched-place=placement=params=ssd,optimizer=host,gradients=host" | FileCheck %s --check-prefix=PLACED
// RUN: spillway-opt %s --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-order "--sched-place=placement=optimizer=gpu" | FileCheck %s --check-prefix=GPUOPT
// RUN: spillway-opt %s --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-order --sched-recompute "--sched-place=placement=activations=ssd" | FileCheck %s --check-prefix=ACT
// RUN: not spillway-opt %s --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-order "--sched-place=placement=activations=host" 2>&1 | FileCheck %s --check-prefix=NORECOMPUTE
// RUN: not spillway-opt %s --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-order "--sched-place=placement=master=host" 2>&1 | FileCheck %s --check-prefix=MASTER
// RUN: not spillway-opt %s --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-order "--sched-place=placement=weights=host" 2>&1 | FileCheck %s --check-prefix=CLASS
// RUN: not spillway-opt %s --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-order "--sched-place=placement=params=nvme" 2>&1 | FileCheck %s --check-prefix=TIER
// RUN: not spillway-opt %s --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-order "--sched-place=placement=params=ssd,params=host" 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not spillway-opt %s --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-order "--sched-place=placement=params" 2>&1 | FileCheck %s --check-prefix=SYNTAX
// RUN: not spillway-opt %s --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-place 2>&1 | FileCheck %s --check-prefix=UNORDERED
// RUN: not spillway-opt %s --sched-place 2>&1 | FileCheck %s --check-prefix=NOITER

// Classes not named stay on the GPU; the optimizer runs on the CPU unless
// its state is on the GPU.
// PLACED: sched.iteration
// PLACED-SAME: optimizer_on = "cpu"
// PLACED-SAME: placement = #sched.placement<params = ssd, optimizer = host, gradients = host, activations = gpu>
// GPUOPT: optimizer_on = "gpu"
// GPUOPT-SAME: placement = #sched.placement<params = gpu, optimizer = gpu, gradients = gpu, activations = gpu>
// Activations off the GPU need sched-recompute: without it the backward
// reads forward intermediates (here the logits) the plan would not move.
// ACT: placement = #sched.placement<params = gpu, optimizer = gpu, gradients = gpu, activations = ssd>
// NORECOMPUTE: error: 'sched.task' op sched-place: activations=host needs sched-recompute first: result #{{[0-9]+}} is a forward intermediate only the backward reads; run sched-recompute (spillwayc --recompute on, the default) or place activations=gpu
// MASTER: error: sched-place: 'master': there are no master weights to place
// CLASS: error: sched-place: unknown tensor class 'weights' (classes: params, optimizer, gradients, activations)
// TIER: error: sched-place: unknown tier 'nvme' for params (tiers: gpu, host, ssd)
// TWICE: error: sched-place: class 'params' is placed twice
// SYNTAX: error: sched-place: 'params' is not CLASS=TIER (e.g. params=ssd)
// UNORDERED: error: 'sched.iteration' op sched-place: order the tasks first (sched-order)
// NOITER: error: sched-place: no sched.iteration to place (run convert-train-to-sched first)
module {
  train.param @w1 : tensor<4x8xf32> at 0
  train.param @w2 : tensor<8x3xf32> at 128
  func.func @two_layers(%x: tensor<6x4xf32>, %labels: tensor<6xi64>) -> tensor<f32> {
    %w1 = train.param_value @w1 : tensor<4x8xf32>
    %w2 = train.param_value @w2 : tensor<8x3xf32>
    %h = train.matmul %x, %w1 : tensor<6x4xf32>, tensor<4x8xf32> -> tensor<6x8xf32>
    %r = train.relu %h : tensor<6x8xf32>
    %y = train.matmul %r, %w2 : tensor<6x8xf32>, tensor<8x3xf32> -> tensor<6x3xf32>
    %l = train.softmax_cross_entropy_loss %y, %labels : tensor<6x3xf32>, tensor<6xi64>
    return %l : tensor<f32>
  }
}
