// Gradient clipping is a barrier sched-overlap-optimizer respects: the
// three-layer model (Inputs/models/three-layers.mlir) in two snake
// micro-batches with F = 0.5. Without clipping each layer's update follows
// its own backward (NOCLIP); with it every update waits for the norm,
// computed in layer 0's opt task after the last backward, and only the
// deferred part still moves, into the next forward, keeping its step's
// coefficient (CLIP).
// RUN: spillway-opt %S/Inputs/models/three-layers.mlir --train-autodiff --train-attach-optimizer=grad-clip=1 --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=2 --sched-order=order=snake --sched-overlap-optimizer="fraction=0.5 granule=1" | FileCheck %s --check-prefix=CLIP --implicit-check-not=sched.task --implicit-check-not=train.clip_grad_norm
// RUN: spillway-opt %S/Inputs/models/three-layers.mlir --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=2 --sched-order=order=snake --sched-overlap-optimizer="fraction=0.5 granule=1" | FileCheck %s --check-prefix=NOCLIP --implicit-check-not=sched.task

// CLIP:      sched.task opt deferred layer(0)
// CLIP-NEXT:   train.adamw_apply_pending @embed.weight [0, 20)
// CLIP:      sched.task fwd layer(0) mb(0)
// CLIP:      sched.task fwd layer(0) mb(1)
// CLIP:      sched.task opt deferred layer(1)
// CLIP:      sched.task fwd layer(1) mb(1)
// CLIP:      sched.task fwd layer(1) mb(0)
// CLIP:      sched.task opt deferred layer(2)
// CLIP:      sched.task fwd layer(2) mb(0)
// CLIP:      sched.task fwd layer(2) mb(1)
// CLIP:      sched.task bwd layer(2) mb(1)
// CLIP:      sched.task bwd layer(2) mb(0)
// CLIP:      sched.task bwd layer(1) mb(0)
// CLIP:      sched.task bwd layer(1) mb(1)
// CLIP:      sched.task bwd layer(0) mb(1)
// CLIP:      sched.task bwd layer(0) mb(0)
// CLIP:      %[[E:.*]] = sched.accumulate mean
// CLIP-NEXT: %[[W:.*]] = sched.accumulate mean
// CLIP-NEXT: %[[B:.*]] = sched.accumulate mean
// CLIP-NEXT: %[[H:.*]] = sched.accumulate mean
// CLIP-NEXT: %[[C:.*]] = sched.task opt layer(0) (%[[E]], %[[W]], %[[B]], %[[H]]) : ({{.*}}) -> tensor<f32> {
// CLIP-NEXT: ^bb0(%[[E1:.*]]: tensor<10x4xf32>, {{.*}}):
// CLIP-NEXT:   %[[C1:.*]] = train.clip_grad_norm %[[E1]], %{{.*}}, %{{.*}}, %{{.*}} {max_norm = 1.000000e+00 : f64} : tensor<10x4xf32>, tensor<4x4xf32>, tensor<4xf32>, tensor<4x10xf32>
// CLIP-NEXT:   train.adamw_defer @embed.weight [0, 20), %[[E1]] clip(%[[C1]])
// CLIP-NEXT:   train.adamw @embed.weight [20, 40), %[[E1]] clip(%[[C1]])
// CLIP-NEXT:   sched.yield %[[C1]]
// CLIP:      sched.task opt layer(1) (%[[W]], %[[C]], %[[B]])
// CLIP:        train.adamw_defer @blocks.0.fc.weight [0, 10), %{{.*}} clip(
// CLIP:      sched.task opt layer(2) (%[[H]], %[[C]])
// CLIP:        train.adamw_defer @head.weight [0, 20), %{{.*}} clip(

// NOCLIP:    sched.task opt deferred layer(0)
// NOCLIP:    sched.task fwd layer(0) mb(0)
// NOCLIP:    sched.task fwd layer(0) mb(1)
// NOCLIP:    sched.task opt deferred layer(1)
// NOCLIP:    sched.task fwd layer(1) mb(1)
// NOCLIP:    sched.task fwd layer(1) mb(0)
// NOCLIP:    sched.task opt deferred layer(2)
// NOCLIP:    sched.task fwd layer(2) mb(0)
// NOCLIP:    sched.task fwd layer(2) mb(1)
// NOCLIP:    sched.task bwd layer(2) mb(1)
// NOCLIP:    sched.task bwd layer(2) mb(0)
// NOCLIP:    sched.task opt layer(2)
// NOCLIP:    sched.task bwd layer(1) mb(0)
// NOCLIP:    sched.task bwd layer(1) mb(1)
// NOCLIP:    sched.task opt layer(1)
// NOCLIP:    sched.task bwd layer(0) mb(1)
// NOCLIP:    sched.task bwd layer(0) mb(0)
// NOCLIP:    sched.task opt layer(0)
