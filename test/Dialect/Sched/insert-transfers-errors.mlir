// sched-insert-transfers refuses what it cannot plan, naming it.
// RUN: not spillway-opt %s --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-order --sched-insert-transfers 2>&1 | FileCheck %s --check-prefix=NOPLACE
// RUN: not spillway-opt %s --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-order "--sched-place=placement=params=host" --sched-insert-transfers 2>&1 | FileCheck %s --check-prefix=TIED
// A deferred part that is not whole GPU granules cannot be split in place.
// RUN: not spillway-opt %s --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-order --sched-overlap-optimizer="fraction=0.5 granule=1" "--sched-place=placement=optimizer=host" --sched-insert-transfers --sched-assign-buffers 2>&1 | FileCheck %s --check-prefix=DEFERRED
// The deferred task must apply what the opt task deferred, range for range.
// RUN: spillway-opt %s --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-order --sched-overlap-optimizer="fraction=0.5 granule=1" "--sched-place=placement=optimizer=host" | sed 's/adamw_apply_pending @wte \[0, 20)/adamw_apply_pending @wte [0, 16)/' | not spillway-opt --sched-insert-transfers 2>&1 | FileCheck %s --check-prefix=APPLY
// APPLY: error: 'sched.task' op sched-insert-transfers: layer 0 defers @wte [0, 20) but its deferred task applies [0, 16)
// The tied weight's gradient is complete in its owner's backward, so
// gradients and optimizer state can leave the GPU.
// RUN: spillway-opt %s --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-order "--sched-place=placement=gradients=host,optimizer=ssd" --sched-insert-transfers | FileCheck %s --check-prefix=TIEDGRADS

// NOPLACE: error: 'sched.iteration' op sched-insert-transfers: no placement; run sched-place first
// TIED: error: 'sched.iteration' op sched-insert-transfers: layer 'wte' owns @wte, which other layers read too; moving parameters that several layers read (tied weights, shared buffers) is not supported yet: place params=gpu
// DEFERRED: error: 'sched.iteration' op sched-assign-buffers: layer 0 defers 80 bytes, not a multiple of 256 (sched-overlap-optimizer's granule must keep the parts aligned in the GPU arena)
// TIEDGRADS: sched.stage_grads gradstage layer(0) first
// TIEDGRADS: sched.gradient @wte layer(0) host mean(1)
module {
  train.param @wte : tensor<10x4xf32> at 0
  train.param @"h.0.w" : tensor<4x4xf32> at 160
  func.func @tied(%ids: tensor<6xi64>, %labels: tensor<6xi64>) -> tensor<f32> {
    %e = train.param_value @wte : tensor<10x4xf32>
    %w = train.param_value @"h.0.w" : tensor<4x4xf32>
    %x = train.gather %e, %ids : tensor<10x4xf32>, tensor<6xi64> -> tensor<6x4xf32>
    %y = train.matmul %x, %w : tensor<6x4xf32>, tensor<4x4xf32> -> tensor<6x4xf32>
    %et = train.transpose %e, [1, 0] : tensor<10x4xf32> -> tensor<4x10xf32>
    %logits = train.matmul %y, %et : tensor<6x4xf32>, tensor<4x10xf32> -> tensor<6x10xf32>
    %l = train.softmax_cross_entropy_loss %logits, %labels : tensor<6x10xf32>, tensor<6xi64>
    return %l : tensor<f32>
  }
}
