// sched-insert-transfers with gradient clipping (train-attach-optimizer
// {grad-clip=1}): the offload plan keeps the gradients in per-layer blocks,
// so the norm train.clip_grad_norm took of all of them becomes one
// sched.grad_norms per layer, right after the flush that completes the
// layer's gradient (where it is anyway: no move is added), and a
// sched.clip_grad_norm of every updated parameter in declaration order that
// the opt task holding the norm takes as an input instead. Inputs:
// Inputs/models/three-layers.mlir placed by the passes before this one
// (Inputs/regenerate.sh).
// RUN: spillway-opt %S/Inputs/insert-transfers-clip-ssd.mlir --sched-insert-transfers | FileCheck %s --check-prefix=SSD
// RUN: spillway-opt %S/Inputs/insert-transfers-clip-gpu.mlir --sched-insert-transfers | FileCheck %s --check-prefix=GPU
// RUN: not spillway-opt %S/Inputs/insert-transfers-clip-missing.mlir --sched-insert-transfers 2>&1 | FileCheck %s --check-prefix=MISSING

// Gradients on SSD, a CPU optimizer, snake M = 2 with half of each update
// deferred: each layer's norms are taken on host where its single flush
// accumulates, before the write-back to SSD; the coefficient comes after the
// last one (layer 0's) and before the first update, and every update,
// deferred part included, reads it.
// SSD-LABEL: sched.iteration
// SSD-NOT:     sched.grad_norms
// SSD:         sched.stage_grads gradstage layer(2) first
// SSD:         sched.accumulate_grads layer(2) first on host
// SSD-NEXT:    sched.grad_norms layer(2) host mean(2)
// SSD-NEXT:    sched.drop gradstage layer(2) host
// SSD-NEXT:    %[[W2:[0-9]+]] = sched.move gradients layer(2) host -> ssd prio(writeback)
// SSD:         sched.accumulate_grads layer(1) first on host
// SSD-NEXT:    sched.grad_norms layer(1) host mean(2)
// SSD:         sched.accumulate_grads layer(0) first on host
// SSD-NEXT:    sched.grad_norms layer(0) host mean(2)
// SSD-NOT:     sched.task
// SSD:         %[[C:[0-9]+]] = sched.clip_grad_norm [@embed.weight, @blocks.0.fc.weight, @blocks.0.fc.bias, @head.weight] {max_norm = 1.000000e+00 : f64} : tensor<f32>
// SSD-NEXT:    sched.move gradients layer(0) ssd -> host prio(demand)
// SSD:         %[[G0:[0-9]+]] = sched.gradient @embed.weight layer(0) host mean(2)
// SSD:         %[[OPT0:[0-9]+]] = sched.task opt layer(0) (%[[G0]], %[[C]]) : (tensor<10x4xf32>, tensor<f32>) -> tensor<f32> {
// SSD-NEXT:    ^bb0(%{{.*}}: tensor<10x4xf32>, %[[CARG:.*]]: tensor<f32>):
// SSD-NOT:     train.clip_grad_norm
// SSD:         train.adamw_defer @embed.weight [0, 20), %{{.*}} clip(%[[CARG]])
// SSD-NEXT:    train.adamw @embed.weight [20, 40), %{{.*}} clip(%[[CARG]])
// SSD:         sched.yield %[[CARG]] : tensor<f32>
// SSD:         sched.task opt layer(1) (%{{.*}}, %[[OPT0]], %{{.*}})
// SSD:         sched.task opt layer(2) (%{{.*}}, %[[OPT0]])
// SSD-NOT:     sched.grad_norms
// SSD-NOT:     train.clip_grad_norm

// Gradients on the GPU, horizontal M = 2: a layer's gradient is complete
// at its second flush only (the `add`), where its norms are taken on the
// GPU.
// GPU-LABEL: sched.iteration
// GPU-NOT:     sched.grad_norms
// GPU:         sched.stage_grads gradients layer(2) add
// GPU-NEXT:    sched.grad_norms layer(2) gpu mean(2)
// GPU:         sched.stage_grads gradients layer(1) add
// GPU-NEXT:    sched.grad_norms layer(1) gpu mean(2)
// GPU:         sched.stage_grads gradients layer(0) add
// GPU-NEXT:    sched.grad_norms layer(0) gpu mean(2)
// GPU-NEXT:    %[[C:[0-9]+]] = sched.clip_grad_norm [@embed.weight, @blocks.0.fc.weight, @blocks.0.fc.bias, @head.weight]
// GPU-NEXT:    %[[G0:[0-9]+]] = sched.gradient @embed.weight layer(0) gpu mean(2)
// GPU:         sched.task opt layer(0) (%[[G0]], %[[C]])

// A norm that leaves out an updated parameter's gradient would clip with
// the wrong coefficient: refused, naming the parameter.
// MISSING: error: 'train.clip_grad_norm' op sched-insert-transfers: the gradient norm does not read the gradient of @blocks.0.fc.bias, which the optimizer updates
