// sched-insert-transfers under ZeRO stage 2 (train.optimizer_state_shards
// with gradients = true): sched.stage_grads reduce-scatters a layer's
// gradient over the ranks and the runtime leaves the exchange running until
// the block is next touched, so what touches it (the gradstage move, the
// accumulation, the write-back, the norms, the update) goes after the
// backward of the sweep's next flushing layer, just before its
// stage_grads: the exchange overlaps that backward. The inputs are
// Inputs/models/three-layers.mlir with two micro-batches (regenerate.sh).
// RUN: spillway-opt %S/Inputs/insert-transfers-zero2-ssd.mlir --sched-insert-transfers | FileCheck %s --check-prefix=SSD
// RUN: spillway-opt %S/Inputs/insert-transfers-zero2-horizontal.mlir --sched-insert-transfers | FileCheck %s --check-prefix=HOR
// RUN: spillway-opt %S/Inputs/insert-transfers-zero2-clip-gpu.mlir --sched-insert-transfers | FileCheck %s --check-prefix=CLIP
// Without the shards the same placement keeps each flush after its own
// backward (insert-transfers.mlir): the head's tail follows its staging.
// RUN: spillway-opt %S/Inputs/insert-transfers-ssd.mlir --sched-insert-transfers | FileCheck %s --check-prefix=WHOLE

// Snake with the gradients on SSD. The head's (layer 2) gradient is staged, then
// layer 1's backward runs (both micro-batches) while it is exchanged, then
// its tail; layer 1's tail follows layer 0's backward. Layer 0 flushes last
// in the sweep: its tail stays after its staging.
// SSD:      sched.task bwd layer(2) mb(1)
// SSD:      sched.stage_grads gradstage layer(2) first
// SSD-NOT:  sched.{{(accumulate_grads|move gradstage|drop gradstage)}}
// SSD:      sched.task bwd layer(1) mb(0)
// SSD:      sched.task bwd layer(1) mb(1)
// SSD:      sched.drop params layer(1) gpu
// SSD-NEXT: %[[T2:[0-9]+]] = sched.move gradstage layer(2) gpu -> host prio(writeback)
// SSD-NEXT: sched.await %[[T2]]
// SSD-NEXT: sched.drop gradstage layer(2) gpu
// SSD-NEXT: sched.accumulate_grads layer(2) first on host
// SSD-NEXT: sched.drop gradstage layer(2) host
// SSD-NEXT: %[[W2:[0-9]+]] = sched.move gradients layer(2) host -> ssd prio(writeback)
// SSD-NEXT: sched.await %[[W2]]
// SSD-NEXT: sched.drop gradients layer(2) host
// SSD-NEXT: sched.stage_grads gradstage layer(1) first
// SSD-NOT:  sched.{{(accumulate_grads|move gradstage|drop gradstage)}}
// SSD:      sched.task bwd layer(0) mb(1)
// SSD:      sched.task bwd layer(0) mb(0)
// SSD:      sched.drop params layer(0) gpu
// SSD-NEXT: %[[T1:[0-9]+]] = sched.move gradstage layer(1) gpu -> host prio(writeback)
// SSD-NEXT: sched.await %[[T1]]
// SSD-NEXT: sched.drop gradstage layer(1) gpu
// SSD-NEXT: sched.accumulate_grads layer(1) first on host
// SSD:      sched.drop gradients layer(1) host
// SSD-NEXT: sched.stage_grads gradstage layer(0) first
// SSD-NEXT: %[[T0:[0-9]+]] = sched.move gradstage layer(0) gpu -> host prio(writeback)
// SSD-NEXT: sched.await %[[T0]]
// SSD-NEXT: sched.drop gradstage layer(0) gpu
// SSD-NEXT: sched.accumulate_grads layer(0) first on host
// The updates read the complete gradients after the sweep.
// SSD:      sched.gradient @embed.weight layer(0) host mean(2)
// SSD:      sched.task opt layer(0)
// SSD:      sched.task opt layer(1)
// SSD:      sched.task opt layer(2)

// WHOLE:      sched.stage_grads gradstage layer(2) first
// WHOLE-NEXT: %[[T:[0-9]+]] = sched.move gradstage layer(2) gpu -> host prio(writeback)
// WHOLE-NEXT: sched.await %[[T]]
// WHOLE-NEXT: sched.drop gradstage layer(2) gpu
// WHOLE-NEXT: sched.accumulate_grads layer(2) first on host
// WHOLE:      sched.task bwd layer(1) mb(0)

// Horizontal: each micro-batch's backward is a sweep. Within it the tails
// move past the next layer's backward; the sweep's last (layer 0) stays
// before the next micro-batch's forward, which no exchange spans.
// HOR:      sched.stage_grads gradstage layer(2) first
// HOR:      sched.task bwd layer(1) mb(0)
// HOR:      sched.drop params layer(1) gpu
// HOR-NEXT: sched.move gradstage layer(2) gpu -> host
// HOR:      sched.accumulate_grads layer(2) first on host
// HOR-NEXT: sched.drop gradstage layer(2) host
// HOR-NEXT: sched.stage_grads gradstage layer(1) first
// HOR:      sched.task bwd layer(0) mb(0)
// HOR-NOT:  sched.{{(stage_grads|accumulate_grads)}}
// HOR:      sched.move gradstage layer(1) gpu -> host
// HOR:      sched.accumulate_grads layer(1) first on host
// HOR-NEXT: sched.drop gradstage layer(1) host
// HOR-NEXT: sched.stage_grads gradstage layer(0) first
// HOR-NEXT: sched.move gradstage layer(0) gpu -> host
// HOR:      sched.accumulate_grads layer(0) first on host
// HOR-NEXT: sched.drop gradstage layer(0) host
// HOR-NOT:  sched.{{(move|await|drop|accumulate_grads|stage_grads|task)}}
// HOR:      sched.task fwd layer(0) mb(1)
// HOR:      sched.stage_grads gradstage layer(2) first
// HOR:      sched.task bwd layer(1) mb(1)
// HOR:      sched.accumulate_grads layer(2) add on host
// HOR-NEXT: sched.drop gradstage layer(2) host
// HOR-NEXT: sched.stage_grads gradstage layer(1) first

// Gradients on the GPU tier with clipping: there is no tail; each layer's
// norms wait for its exchange after the next layer's backward, just before
// that layer's staging.
// CLIP:      sched.stage_grads gradients layer(2) first
// CLIP-NOT:  sched.grad_norms
// CLIP:      sched.task bwd layer(1) mb(1)
// CLIP:      sched.drop params layer(1) gpu
// CLIP-NEXT: sched.grad_norms layer(2) gpu mean(2)
// CLIP-NEXT: sched.stage_grads gradients layer(1) first
// CLIP-NOT:  sched.grad_norms
// CLIP:      sched.task bwd layer(0) mb(0)
// CLIP:      sched.drop params layer(0) gpu
// CLIP-NEXT: sched.grad_norms layer(1) gpu mean(2)
// CLIP-NEXT: sched.stage_grads gradients layer(0) first
// CLIP-NEXT: sched.grad_norms layer(0) gpu mean(2)
// CLIP-NEXT: sched.clip_grad_norm
