// sched-insert-transfers with a placement split by layer: each layer's block
// moves from and to its own home. The input (Inputs/regenerate.sh) is
// Inputs/models/three-layers.mlir (embedding, block, head) in snake order
// with two micro-batches and the optimizer overlap (F = 0.5, granule 1),
// placed params=ssd,params[1:2]=host, optimizer=ssd,optimizer[0:1]=host,
// gradients=host,gradients[2:]=ssd: a CPU optimizer.
// RUN: spillway-opt %S/Inputs/insert-transfers-layers.mlir --sched-insert-transfers | FileCheck %s
// RUN: spillway-opt %S/Inputs/insert-transfers-gpulayers.mlir --sched-insert-transfers | FileCheck %s --check-prefix=GPU

// The loads: layers 0 and 2 come from SSD through host memory, layer 1 is
// uploaded from its host home (no SSD read, no host copy dropped). Layer
// 0's deferred update reads its state where it lives, on host (no move);
// layer 1's and 2's bring part 0 from SSD and write it back. Layer 0's
// updated part 0 goes back to its SSD home; layer 1's stays at home.
// CHECK:      %[[L0:[0-9]+]] = sched.move params layer(0) ssd -> host prio(demand)
// CHECK-NOT:  sched.move params layer(1) ssd
// CHECK:      sched.await %[[L0]]
// CHECK-NEXT: sched.bind params layer(0) host
// CHECK-NEXT: sched.bind optimizer layer(0) host
// CHECK-NEXT: sched.task opt deferred layer(0)
// CHECK:      sched.move params layer(0) part(0) host -> ssd prio(writeback)
// CHECK:      sched.move params layer(0) host -> gpu prio(prefetch)
// CHECK:      sched.drop params layer(0) host
// CHECK-NEXT: sched.bind params layer(0) gpu
// CHECK-NEXT: sched.bind params layer(1) host
// CHECK-NEXT: %[[O1:[0-9]+]] = sched.move optimizer layer(1) part(0) ssd -> host prio(demand)
// CHECK-NEXT: sched.await %[[O1]]
// CHECK-NEXT: sched.bind optimizer layer(1) host
// CHECK-NEXT: sched.task opt deferred layer(1)
// CHECK:      sched.move optimizer layer(1) part(0) host -> ssd prio(writeback)
// CHECK-NOT:  sched.move params layer(1) part(0)
// CHECK:      sched.move params layer(1) host -> gpu prio(prefetch)
// CHECK-NEXT: sched.move params layer(2) ssd -> host prio(prefetch)
// CHECK:      sched.task fwd layer(0) mb(0)

// Layer 1's load in the forward drops its GPU copy only: its host copy is
// its home.
// CHECK:      sched.task fwd layer(1) mb(0)
// CHECK:      sched.drop params layer(1) gpu
// CHECK-NOT:  sched.drop params layer(1) host
// CHECK:      sched.drop params layer(2) host
// CHECK-NEXT: sched.bind params layer(2) gpu

// The head's gradients (layer 2) live on SSD: accumulated on host, written
// back, read again for the update, whose state and parameters (part 1)
// come from SSD and go back there.
// CHECK:      sched.accumulate_grads layer(2) first on host
// CHECK-NEXT: sched.drop gradstage layer(2) host
// CHECK-NEXT: %[[G2:[0-9]+]] = sched.move gradients layer(2) host -> ssd prio(writeback)
// CHECK-NEXT: sched.await %[[G2]]
// CHECK-NEXT: sched.drop gradients layer(2) host
// CHECK-NEXT: %[[R2:[0-9]+]] = sched.move gradients layer(2) ssd -> host prio(demand)
// CHECK:      sched.move optimizer layer(2) part(1) ssd -> host prio(demand)
// CHECK:      sched.move params layer(2) part(1) ssd -> host prio(demand)
// CHECK:      sched.task opt layer(2)
// CHECK:      sched.move params layer(2) part(1) host -> ssd prio(writeback)
// CHECK:      sched.move optimizer layer(2) part(1) host -> ssd prio(writeback)
// CHECK:      sched.drop gradients layer(2) host

// The block's gradients (layer 1) stay on host: no gradient move; its
// parameters are updated at home, its state comes from SSD.
// CHECK:      sched.accumulate_grads layer(1) first on host
// CHECK-NEXT: sched.drop gradstage layer(1) host
// CHECK-NOT:  sched.move gradients layer(1)
// CHECK:      sched.move optimizer layer(1) part(1) ssd -> host prio(demand)
// CHECK:      sched.bind params layer(1) host
// CHECK-NEXT: sched.task opt layer(1)
// CHECK:      sched.move optimizer layer(1) part(1) host -> ssd prio(writeback)

// The embedding's state is at home on host: bound where it is.
// CHECK:      sched.accumulate_grads layer(0) first on host
// CHECK-NEXT: sched.drop gradstage layer(0) host
// CHECK-NEXT: sched.gradient @embed.weight layer(0) host
// CHECK-NEXT: sched.bind optimizer layer(0) host
// CHECK-NEXT: %[[P0:[0-9]+]] = sched.move params layer(0) part(1) ssd -> host prio(demand)
// CHECK:      sched.task opt layer(0)
// CHECK:      sched.move params layer(0) part(1) host -> ssd prio(writeback)
// CHECK-NOT:  sched.move optimizer layer(0)
// CHECK:      return

// The parameters may keep layers resident on the GPU
// (params=ssd,params[1:2]=gpu, a CPU optimizer): layer 1's block is bound
// there before the first task and no load moves it; its update brings it to
// the host and writes it back home.
// GPU:      sched.bind params layer(1) gpu
// GPU:      sched.task fwd layer(0) mb(0)
// GPU-NOT:  sched.move params layer(1)
// GPU:      sched.bind optimizer layer(1) host
// GPU-NEXT: %[[P1:[0-9]+]] = sched.move params layer(1) gpu -> host prio(demand)
// GPU-NEXT: sched.await %[[P1]]
// GPU-NEXT: sched.bind params layer(1) host
// GPU-NEXT: sched.task opt layer(1)
// GPU:      sched.move params layer(1) host -> gpu prio(writeback)
// GPU-NOT:  sched.move params layer(1)
// GPU:      return

