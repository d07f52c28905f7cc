// sched-insert-transfers: the moves, waits and bindings of a placement.
// Each input is Inputs/models/three-layers.mlir (embedding, block, head)
// placed by the passes before this one (Inputs/regenerate.sh writes them;
// most with two micro-batches). The checks read the plan op by op: -NEXT
// where two plan ops are adjacent, and a -NOT line (no plan op: move,
// await, bind, drop, task, ...) where a task's body or a slice lies between;
// an await names its move ([[Tn]]) where both are checked.
// RUN: spillway-opt %S/Inputs/insert-transfers-ssd.mlir --sched-insert-transfers | FileCheck %s --check-prefix=SSD
// RUN: spillway-opt %S/Inputs/insert-transfers-gpuopt.mlir --sched-insert-transfers | FileCheck %s --check-prefix=GPUOPT
// RUN: spillway-opt %S/Inputs/insert-transfers-resident.mlir --sched-insert-transfers | FileCheck %s --check-prefix=RESIDENT
// RUN: spillway-opt %S/Inputs/insert-transfers-overlap.mlir --sched-insert-transfers | FileCheck %s --check-prefix=OVERLAP
// RUN: spillway-opt %S/Inputs/insert-transfers-defcpu.mlir --sched-insert-transfers | FileCheck %s --check-prefix=DEFCPU
// RUN: spillway-opt %S/Inputs/insert-transfers-defgpu.mlir --sched-insert-transfers | FileCheck %s --check-prefix=DEFGPU


// The optimizer overlap (F = 0.5, granule 1 to split these small layers):
// the first 20, 10 and 20 elements of the layers are updated a step late
// (the iteration's `deferred`, checked in assign-buffers-split.mlir).
// A CPU optimizer with everything on the SSD tier. Each deferred update runs
// on the copy its first load read from SSD, just before the upload; part 0
// of the state comes from SSD and goes back, part 0 of the parameters is
// written back while the load goes on with the whole block.
// DEFCPU:      %[[T0:[0-9]+]] = sched.move params layer(0) ssd -> host prio(demand)
// DEFCPU-NEXT: sched.move params layer(1) ssd -> host prio(prefetch)
// DEFCPU-NEXT: sched.await %[[T0]]
// DEFCPU-NEXT: sched.bind params layer(0) host
// DEFCPU-NEXT: %[[T2:[0-9]+]] = sched.move optimizer layer(0) part(0) ssd -> host prio(demand)
// DEFCPU-NEXT: sched.await %[[T2]]
// DEFCPU-NEXT: sched.bind optimizer layer(0) host
// DEFCPU-NEXT: sched.task opt deferred layer(0) ()
// DEFCPU-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// DEFCPU:      %[[T3:[0-9]+]] = sched.move optimizer layer(0) part(0) host -> ssd prio(writeback)
// DEFCPU-NEXT: sched.await %[[T3]]
// DEFCPU-NEXT: sched.drop optimizer layer(0) part(0) host
// DEFCPU-NEXT: %[[T4:[0-9]+]] = sched.move params layer(0) part(0) host -> ssd prio(writeback)
// DEFCPU-NEXT: sched.await %[[T4]]
// DEFCPU-NEXT: sched.move params layer(0) host -> gpu prio(prefetch)
// The update after the backward moves part 1 only.
// DEFCPU:      sched.gradient @head.weight layer(2) host mean(2)
// DEFCPU-NEXT: %[[T6:[0-9]+]] = sched.move optimizer layer(2) part(1) ssd -> host prio(demand)
// DEFCPU-NEXT: sched.await %[[T6]]
// DEFCPU-NEXT: sched.bind optimizer layer(2) host
// DEFCPU-NEXT: %[[T7:[0-9]+]] = sched.move params layer(2) part(1) ssd -> host prio(demand)
// DEFCPU-NEXT: sched.await %[[T7]]
// DEFCPU-NEXT: sched.bind params layer(2) host
// DEFCPU-NEXT: sched.task opt layer(2) (%{{[0-9#]+}})
// DEFCPU-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// DEFCPU:      %[[T8:[0-9]+]] = sched.move params layer(2) part(1) host -> ssd prio(writeback)
// DEFCPU-NEXT: sched.await %[[T8]]
// DEFCPU-NEXT: sched.drop params layer(2) part(1) host
// DEFCPU-NEXT: sched.move optimizer layer(2) part(1) host -> ssd prio(writeback)

// F = 1 with a GPU optimizer and the parameters on SSD. Nothing is split (all
// is deferred). The deferred update runs on the GPU copy of the layer's
// first load, right after it is bound, and writes the parameters back to
// SSD before the next loads start; the update after the backward only
// reads the gradient.
// DEFGPU:      sched.drop params layer(0) host
// DEFGPU-NEXT: sched.bind params layer(0) gpu
// DEFGPU-NEXT: sched.bind optimizer layer(0) gpu
// DEFGPU-NEXT: sched.task opt deferred layer(0) ()
// DEFGPU-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// DEFGPU:      %[[T0:[0-9]+]] = sched.move params layer(0) gpu -> host prio(writeback)
// DEFGPU-NEXT: sched.await %[[T0]]
// DEFGPU-NEXT: %[[T1:[0-9]+]] = sched.move params layer(0) host -> ssd prio(writeback)
// DEFGPU-NEXT: sched.await %[[T1]]
// DEFGPU-NEXT: sched.drop params layer(0) host
// DEFGPU-NEXT: sched.await %{{[0-9#]+}}
// DEFGPU-NEXT: sched.move params layer(1) host -> gpu prio(prefetch)
// DEFGPU:      sched.task bwd layer(2) mb(0) (%{{[0-9#]+}}, %{{[0-9#]+}}, %{{[0-9#]+}})
// DEFGPU-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// DEFGPU:      sched.drop params layer(2) gpu
// DEFGPU-NEXT: sched.stage_grads gradients layer(2) first(%{{[0-9#]+}}, %{{[0-9#]+}})
// DEFGPU-NEXT: sched.gradient @head.weight layer(2) gpu mean(2)
// DEFGPU-NEXT: sched.task opt layer(2) (%{{[0-9#]+}})
// DEFGPU-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// DEFGPU:      sched.await %{{[0-9#]+}}
// RUN: spillway-opt %S/Inputs/insert-transfers-acthost.mlir --sched-insert-transfers | FileCheck %s --check-prefix=ACTHOST
// RUN: spillway-opt %S/Inputs/insert-transfers-actssd.mlir --sched-insert-transfers | FileCheck %s --check-prefix=ACTSSD
// RUN: spillway-opt %S/Inputs/insert-transfers-actlayers.mlir --sched-insert-transfers | FileCheck %s --check-prefix=ACTLAYERS
// RUN: spillway-opt %S/Inputs/insert-transfers-actlayers.mlir --sched-insert-transfers | FileCheck %s --check-prefix=ACTLAYERSHOST
// RUN: spillway-opt %S/Inputs/insert-transfers-cut.mlir --sched-insert-transfers | FileCheck %s --check-prefix=CUT
// RUN: spillway-opt %S/Inputs/insert-transfers-cut.mlir --sched-insert-transfers | FileCheck %s --check-prefix=CUTHOST
// RUN: spillway-opt %S/Inputs/models/two-layers-64.mlir --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-order "--sched-overlap-optimizer=fraction=0.25" "--sched-place=placement=params=ssd,optimizer=ssd,optimizer[0]=host:0.25,ssd:0.75" --sched-insert-transfers | FileCheck %s --check-prefix=CUTDEFER
// RUN: not spillway-opt %S/Inputs/models/two-layers-64.mlir --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-order "--sched-overlap-optimizer=fraction=0.5" "--sched-place=placement=params=ssd,optimizer=ssd,optimizer[0]=host:0.25,ssd:0.75" --sched-insert-transfers 2>&1 | FileCheck %s --check-prefix=CUTOVERLAP
// RUN: not spillway-opt %S/Inputs/models/two-layers-64.mlir --train-autodiff --train-attach-optimizer=optimizer=foam --train-partition-layers --convert-train-to-sched --sched-order "--sched-place=placement=params=ssd,optimizer=ssd,optimizer[0]=host:0.5,ssd:0.5" --sched-insert-transfers 2>&1 | FileCheck %s --check-prefix=CUTFOAM
// RUN: spillway-opt %S/Inputs/insert-transfers-actgpu.mlir --sched-insert-transfers | FileCheck %s --check-prefix=ACTGPU


// Activations on host (after sched-recompute): each fwd result a bwd task
// reads goes off the GPU after its last forward reader (here the embedding's
// output after layer 1, which reads it in its residual add) and comes back
// before its first backward reader, which reads the taken copy. Look-ahead
// within one GPU slot: a write-back is awaited only when the slot is needed
// again (the next put), so it overlaps the forward between; the next reload
// is issued as soon as the previous activation is taken, so it overlaps
// the backward task before its reader.
// ACTHOST:      %[[X0:.*]] = sched.task fwd layer(0)
// ACTHOST:      %[[X1:.*]] = sched.task fwd layer(1) (%[[X0]])
// ACTHOST:      sched.put_activation %[[X0]] index(0) : tensor<6x4xf32>
// ACTHOST-NEXT: %[[T0:.*]] = sched.move activations layer(0) gpu -> host prio(writeback)
// ACTHOST-NEXT: sched.task fwd layer(2) (%[[X1]], %{{.*}})
// ACTHOST:      sched.await %[[T0]]
// ACTHOST-NEXT: sched.drop activations layer(0) gpu
// ACTHOST-NEXT: sched.put_activation %[[X1]] index(1)
// ACTHOST-NEXT: %[[T1:.*]] = sched.move activations layer(1) gpu -> host prio(writeback)
// The last forward's activation is read back at once: it is needed next.
// ACTHOST-NEXT: sched.await %[[T1]]
// ACTHOST-NEXT: sched.drop activations layer(1) gpu
// ACTHOST-NEXT: %[[R1:.*]] = sched.move activations layer(1) host -> gpu prio(demand)
// ACTHOST-NEXT: sched.await %[[R1]]
// ACTHOST-NEXT: %[[B1:.*]] = sched.take_activation index(1) : tensor<6x4xf32>
// ACTHOST-NEXT: sched.drop activations layer(1) gpu
// ACTHOST-NEXT: sched.drop activations layer(1) host
// ACTHOST-NEXT: %[[R0:.*]] = sched.move activations layer(0) host -> gpu prio(prefetch)
// ACTHOST-NEXT: sched.task bwd layer(2) (%{{.*}}, %[[B1]])
// ACTHOST:      sched.await %[[R0]]
// ACTHOST-NEXT: %[[B0:.*]] = sched.take_activation index(0)
// ACTHOST:      sched.task bwd layer(1) (%{{.*}}, %[[B0]])
// ACTHOST-NOT:  sched.put_activation

// Activations on SSD, snake, two micro-batches: 4 activations (the
// embedding's and the block's output per micro-batch), each written
// gpu -> host -> ssd and read back ssd -> host -> gpu, every copy but the
// taken tensor dropped. One GPU slot and two host slots (the staging the
// cost model double-buffers): the gpu -> host leg is awaited at the next
// put, the host -> ssd leg when its host slot is needed again; backward
// reloads are uploaded one need ahead and read from SSD two ahead.
// ACTSSD:      sched.task fwd layer(1) mb(1) (%{{[0-9#]+}})
// ACTSSD-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// ACTSSD:      sched.put_activation %{{[0-9#]+}} index(1)
// ACTSSD-NEXT: %[[W1:[0-9]+]] = sched.move activations layer(1) gpu -> host prio(writeback)
// ACTSSD-NEXT: sched.task fwd layer(1) mb(0) (%{{[0-9#]+}})
// ACTSSD:      sched.await %[[W1]]
// ACTSSD-NEXT: sched.drop activations layer(1) gpu
// ACTSSD-NEXT: %[[S1:[0-9]+]] = sched.move activations layer(1) host -> ssd prio(writeback)
// ACTSSD-NEXT: sched.put_activation %{{[0-9#]+}} index(0)
// ACTSSD-NEXT: %[[W0:[0-9]+]] = sched.move activations layer(0) gpu -> host prio(writeback)
// ACTSSD:      sched.task fwd layer(2) mb(0)
// ACTSSD:      sched.await %[[W0]]
// ACTSSD-NEXT: sched.drop activations layer(0) gpu
// ACTSSD-NEXT: %[[S0:[0-9]+]] = sched.move activations layer(0) host -> ssd prio(writeback)
// ACTSSD-NEXT: sched.put_activation %{{[0-9#]+}} index(3)
// A third host copy would exceed the two slots: activation 1's SSD write
// is awaited first.
// ACTSSD-NEXT: sched.await %[[S1]]
// ACTSSD-NEXT: sched.drop activations layer(1) host
// ACTSSD-NEXT: sched.move activations layer(3) gpu -> host prio(writeback)
// ACTSSD:      sched.task fwd layer(2) mb(1) (%{{[0-9#]+}}, %{{[0-9#]+}})
// ACTSSD:      sched.put_activation %{{[0-9#]+}} index(2)
// ACTSSD:      %[[T2:[0-9]+]] = sched.move activations layer(2) ssd -> host prio(demand)
// ACTSSD-NEXT: sched.await %[[T2]]
// ACTSSD-NEXT: %[[T3:[0-9]+]] = sched.move activations layer(2) host -> gpu prio(demand)
// ACTSSD-NEXT: sched.await %[[T3]]
// ACTSSD-NEXT: sched.drop activations layer(2) host
// ACTSSD-NEXT: sched.take_activation index(2)
// ACTSSD-NEXT: sched.drop activations layer(2) gpu
// ACTSSD-NEXT: sched.drop activations layer(2) ssd
// ACTSSD-NEXT: %[[R3:[0-9]+]] = sched.move activations layer(3) ssd -> host prio(prefetch)
// ACTSSD-NEXT: sched.await %[[R3]]
// ACTSSD-NEXT: %[[U3:[0-9]+]] = sched.move activations layer(3) host -> gpu prio(prefetch)
// ACTSSD-NEXT: %[[R0:[0-9]+]] = sched.move activations layer(0) ssd -> host prio(prefetch)
// ACTSSD-NEXT: sched.task bwd layer(2) mb(1) (%{{[0-9#]+}}, %{{[0-9#]+}})
// ACTSSD:      sched.await %[[U3]]
// ACTSSD-NEXT: sched.drop activations layer(3) host
// ACTSSD-NEXT: sched.take_activation index(3)
// ACTSSD-NEXT: sched.drop activations layer(3) gpu
// ACTSSD-NEXT: sched.drop activations layer(3) ssd
// ACTSSD-NEXT: sched.await %[[R0]]
// ACTSSD-NEXT: sched.move activations layer(0) host -> gpu prio(prefetch)
// ACTSSD-NEXT: sched.move activations layer(1) ssd -> host prio(prefetch)
// ACTSSD-NEXT: sched.task bwd layer(2) mb(0)
// ACTSSD:      sched.take_activation index(0)
// ACTSSD:      sched.take_activation index(1)
// ACTSSD-NEXT: sched.drop activations layer(1) gpu
// ACTSSD-NEXT: sched.drop activations layer(1) ssd
// ACTSSD-NEXT: sched.task bwd layer(1) mb(1) (%{{[0-9#]+}}, %{{[0-9#]+}})
// ACTSSD-NOT:  sched.take_activation

// With sched-overlap-optimizer (F = 0, as spillwayc always runs it) each
// update follows its layer's last backward: layer 2's update, with its
// parameters read from SSD and written back, runs before layer 1's backward.
// OVERLAP:      sched.task bwd layer(2) mb(0) (%{{[0-9#]+}}, %{{[0-9#]+}}, %{{[0-9#]+}})
// OVERLAP-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// OVERLAP:      sched.drop params layer(2) gpu
// OVERLAP-NEXT: sched.stage_grads gradstage layer(2) first(%{{[0-9#]+}}, %{{[0-9#]+}})
// OVERLAP-NEXT: %[[T0:[0-9]+]] = sched.move gradstage layer(2) gpu -> host prio(writeback)
// OVERLAP-NEXT: sched.await %[[T0]]
// OVERLAP-NEXT: sched.drop gradstage layer(2) gpu
// OVERLAP-NEXT: sched.accumulate_grads layer(2) first on host
// OVERLAP-NEXT: sched.drop gradstage layer(2) host
// OVERLAP-NEXT: sched.gradient @head.weight layer(2) host mean(2)
// OVERLAP-NEXT: sched.bind optimizer layer(2) host
// OVERLAP-NEXT: %[[T1:[0-9]+]] = sched.move params layer(2) ssd -> host prio(demand)
// OVERLAP-NEXT: sched.await %[[T1]]
// OVERLAP-NEXT: sched.bind params layer(2) host
// OVERLAP-NEXT: sched.task opt layer(2) (%{{[0-9#]+}})
// OVERLAP-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// OVERLAP:      %[[T2:[0-9]+]] = sched.move params layer(2) host -> ssd prio(writeback)
// OVERLAP-NEXT: sched.await %[[T2]]
// OVERLAP-NEXT: sched.drop params layer(2) host
// OVERLAP-NEXT: sched.await %{{[0-9#]+}}
// OVERLAP-NEXT: sched.drop params layer(1) host
// OVERLAP-NEXT: sched.bind params layer(1) gpu
// OVERLAP-NEXT: sched.await %{{[0-9#]+}}
// OVERLAP-NEXT: sched.move params layer(0) host -> gpu prio(prefetch)
// OVERLAP-NEXT: sched.task bwd layer(1) mb(0) (%{{[0-9#]+}}, %{{[0-9#]+}}, %{{[0-9#]+}})

// Parameters on SSD, snake: 2L - 1 = 5 loads (0 1 2 1 0), each uploaded
// during the load before it and read from SSD during the load before that;
// each backward run's gradients (both micro-batches: snake) go to host once;
// the CPU optimizer reads the parameters from SSD and writes them back.
// SSD:      %[[T0:[0-9]+]] = sched.move params layer(0) ssd -> host prio(demand)
// SSD-NEXT: %[[T1:[0-9]+]] = sched.move params layer(1) ssd -> host prio(prefetch)
// SSD-NEXT: sched.await %[[T0]]
// SSD-NEXT: %[[T2:[0-9]+]] = sched.move params layer(0) host -> gpu prio(prefetch)
// SSD-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// SSD:      sched.await %[[T2]]
// SSD-NEXT: sched.drop params layer(0) host
// SSD-NEXT: sched.bind params layer(0) gpu
// SSD-NEXT: sched.await %[[T1]]
// SSD-NEXT: %[[T3:[0-9]+]] = sched.move params layer(1) host -> gpu prio(prefetch)
// SSD-NEXT: %[[T4:[0-9]+]] = sched.move params layer(2) ssd -> host prio(prefetch)
// SSD-NEXT: sched.task fwd layer(0) mb(0) (%{{[0-9#]+}})
// SSD-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// SSD:      sched.task fwd layer(0) mb(1) (%{{[0-9#]+}})
// SSD-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// SSD:      sched.drop params layer(0) gpu
// SSD-NEXT: sched.await %[[T3]]
// SSD-NEXT: sched.drop params layer(1) host
// SSD-NEXT: sched.bind params layer(1) gpu
// SSD-NEXT: sched.await %[[T4]]
// SSD-NEXT: %[[T5:[0-9]+]] = sched.move params layer(2) host -> gpu prio(prefetch)
// SSD-NEXT: %[[T6:[0-9]+]] = sched.move params layer(1) ssd -> host prio(prefetch)
// SSD-NEXT: sched.task fwd layer(1) mb(1) (%{{[0-9#]+}})
// SSD-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// SSD:      sched.task fwd layer(1) mb(0) (%{{[0-9#]+}})
// SSD-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// SSD:      sched.drop params layer(1) gpu
// SSD-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// SSD:      sched.await %[[T5]]
// SSD-NEXT: sched.drop params layer(2) host
// SSD-NEXT: sched.bind params layer(2) gpu
// SSD-NEXT: sched.await %[[T6]]
// SSD-NEXT: %[[T7:[0-9]+]] = sched.move params layer(1) host -> gpu prio(prefetch)
// SSD-NEXT: %[[T8:[0-9]+]] = sched.move params layer(0) ssd -> host prio(prefetch)
// SSD-NEXT: sched.task fwd layer(2) mb(0) (%{{[0-9#]+}}, %{{[0-9#]+}})
// SSD-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// SSD:      sched.task fwd layer(2) mb(1) (%{{[0-9#]+}}, %{{[0-9#]+}})
// SSD-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// SSD:      sched.task bwd layer(2) mb(1) (%{{[0-9#]+}}, %{{[0-9#]+}}, %{{[0-9#]+}})
// SSD-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// SSD:      sched.task bwd layer(2) mb(0) (%{{[0-9#]+}}, %{{[0-9#]+}}, %{{[0-9#]+}})
// SSD-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// SSD:      sched.drop params layer(2) gpu
// SSD-NEXT: sched.stage_grads gradstage layer(2) first(%{{[0-9#]+}}, %{{[0-9#]+}})
// SSD-NEXT: %[[T9:[0-9]+]] = sched.move gradstage layer(2) gpu -> host prio(writeback)
// SSD-NEXT: sched.await %[[T9]]
// SSD-NEXT: sched.drop gradstage layer(2) gpu
// SSD-NEXT: sched.accumulate_grads layer(2) first on host
// SSD-NEXT: sched.drop gradstage layer(2) host
// SSD-NEXT: sched.await %[[T7]]
// SSD-NEXT: sched.drop params layer(1) host
// SSD-NEXT: sched.bind params layer(1) gpu
// SSD-NEXT: sched.await %[[T8]]
// SSD-NEXT: %[[T10:[0-9]+]] = sched.move params layer(0) host -> gpu prio(prefetch)
// SSD-NEXT: sched.task bwd layer(1) mb(0) (%{{[0-9#]+}}, %{{[0-9#]+}}, %{{[0-9#]+}})
// SSD-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// SSD:      sched.task bwd layer(1) mb(1) (%{{[0-9#]+}}, %{{[0-9#]+}}, %{{[0-9#]+}})
// SSD-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// SSD:      sched.drop params layer(1) gpu
// SSD-NEXT: sched.stage_grads gradstage layer(1) first(%{{[0-9#]+}}, %{{[0-9#]+}}, %{{[0-9#]+}}, %{{[0-9#]+}})
// SSD-NEXT: %[[T11:[0-9]+]] = sched.move gradstage layer(1) gpu -> host prio(writeback)
// SSD-NEXT: sched.await %[[T11]]
// SSD-NEXT: sched.drop gradstage layer(1) gpu
// SSD-NEXT: sched.accumulate_grads layer(1) first on host
// SSD-NEXT: sched.drop gradstage layer(1) host
// SSD-NEXT: sched.await %[[T10]]
// SSD-NEXT: sched.drop params layer(0) host
// SSD-NEXT: sched.bind params layer(0) gpu
// SSD-NEXT: sched.task bwd layer(0) mb(1) (%{{[0-9#]+}}, %{{[0-9#]+}})
// SSD-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// SSD:      sched.task bwd layer(0) mb(0) (%{{[0-9#]+}}, %{{[0-9#]+}})
// SSD-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// SSD:      sched.drop params layer(0) gpu
// SSD-NEXT: sched.stage_grads gradstage layer(0) first(%{{[0-9#]+}}, %{{[0-9#]+}})
// SSD-NEXT: %[[T12:[0-9]+]] = sched.move gradstage layer(0) gpu -> host prio(writeback)
// SSD-NEXT: sched.await %[[T12]]
// SSD-NEXT: sched.drop gradstage layer(0) gpu
// SSD-NEXT: sched.accumulate_grads layer(0) first on host
// SSD-NEXT: sched.drop gradstage layer(0) host
// SSD-NEXT: sched.gradient @embed.weight layer(0) host mean(2)
// SSD-NEXT: sched.bind optimizer layer(0) host
// SSD-NEXT: %[[T13:[0-9]+]] = sched.move params layer(0) ssd -> host prio(demand)
// SSD-NEXT: sched.await %[[T13]]
// SSD-NEXT: sched.bind params layer(0) host
// SSD-NEXT: sched.task opt layer(0) (%{{[0-9#]+}})
// SSD-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// SSD:      %[[T14:[0-9]+]] = sched.move params layer(0) host -> ssd prio(writeback)
// SSD-NEXT: sched.await %[[T14]]
// SSD-NEXT: sched.drop params layer(0) host
// SSD-NEXT: sched.gradient @blocks.0.fc.weight layer(1) host mean(2)
// SSD-NEXT: sched.gradient @blocks.0.fc.bias layer(1) host mean(2)
// SSD-NEXT: sched.bind optimizer layer(1) host
// SSD-NEXT: %[[T15:[0-9]+]] = sched.move params layer(1) ssd -> host prio(demand)
// SSD-NEXT: sched.await %[[T15]]
// SSD-NEXT: sched.bind params layer(1) host
// SSD-NEXT: sched.task opt layer(1) (%{{[0-9#]+}}, %{{[0-9#]+}})
// SSD-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// SSD:      %[[T16:[0-9]+]] = sched.move params layer(1) host -> ssd prio(writeback)
// SSD-NEXT: sched.await %[[T16]]
// SSD-NEXT: sched.drop params layer(1) host
// SSD-NEXT: sched.gradient @head.weight layer(2) host mean(2)
// SSD-NEXT: sched.bind optimizer layer(2) host
// SSD-NEXT: %[[T17:[0-9]+]] = sched.move params layer(2) ssd -> host prio(demand)
// SSD-NEXT: sched.await %[[T17]]
// SSD-NEXT: sched.bind params layer(2) host
// SSD-NEXT: sched.task opt layer(2) (%{{[0-9#]+}})
// SSD-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// SSD:      %[[T18:[0-9]+]] = sched.move params layer(2) host -> ssd prio(writeback)
// SSD-NEXT: sched.await %[[T18]]
// SSD-NEXT: sched.drop params layer(2) host
// SSD-NEXT: sched.accumulate mean %{{[0-9#]+}}, %{{[0-9#]+}}
// GPU optimizer (the state on the GPU), parameters on host, gradients on SSD,
// horizontal: two flushes per layer, the second reading the accumulator
// back; the update brings gradient and parameters to the GPU.
// GPUOPT:      sched.task bwd layer(2) mb(1) (%{{[0-9#]+}}, %{{[0-9#]+}}, %{{[0-9#]+}})
// GPUOPT-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// GPUOPT:      sched.drop params layer(2) gpu
// GPUOPT-NEXT: sched.stage_grads gradstage layer(2) first(%{{[0-9#]+}})
// GPUOPT-NEXT: %[[T0:[0-9]+]] = sched.move gradstage layer(2) gpu -> host prio(writeback)
// GPUOPT-NEXT: sched.await %[[T0]]
// GPUOPT-NEXT: sched.drop gradstage layer(2) gpu
// GPUOPT-NEXT: %[[T1:[0-9]+]] = sched.move gradients layer(2) ssd -> host prio(demand)
// GPUOPT-NEXT: sched.await %[[T1]]
// GPUOPT-NEXT: sched.accumulate_grads layer(2) add on host
// GPUOPT-NEXT: sched.drop gradstage layer(2) host
// GPUOPT-NEXT: %[[T2:[0-9]+]] = sched.move gradients layer(2) host -> ssd prio(writeback)
// GPUOPT-NEXT: sched.await %[[T2]]
// GPUOPT-NEXT: sched.drop gradients layer(2) host
// GPUOPT-NEXT: sched.await %{{[0-9#]+}}
// GPUOPT-NEXT: sched.bind params layer(1) gpu
// GPUOPT-NEXT: %[[T3:[0-9]+]] = sched.move params layer(0) host -> gpu prio(prefetch)
// GPUOPT-NEXT: sched.task bwd layer(1) mb(1) (%{{[0-9#]+}}, %{{[0-9#]+}}, %{{[0-9#]+}})
// GPUOPT-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// GPUOPT:      sched.drop params layer(1) gpu
// GPUOPT-NEXT: sched.stage_grads gradstage layer(1) first(%{{[0-9#]+}}, %{{[0-9#]+}})
// GPUOPT-NEXT: %[[T4:[0-9]+]] = sched.move gradstage layer(1) gpu -> host prio(writeback)
// GPUOPT-NEXT: sched.await %[[T4]]
// GPUOPT-NEXT: sched.drop gradstage layer(1) gpu
// GPUOPT-NEXT: %[[T5:[0-9]+]] = sched.move gradients layer(1) ssd -> host prio(demand)
// GPUOPT-NEXT: sched.await %[[T5]]
// GPUOPT-NEXT: sched.accumulate_grads layer(1) add on host
// GPUOPT-NEXT: sched.drop gradstage layer(1) host
// GPUOPT-NEXT: %[[T6:[0-9]+]] = sched.move gradients layer(1) host -> ssd prio(writeback)
// GPUOPT-NEXT: sched.await %[[T6]]
// GPUOPT-NEXT: sched.drop gradients layer(1) host
// GPUOPT-NEXT: sched.await %[[T3]]
// GPUOPT-NEXT: sched.bind params layer(0) gpu
// GPUOPT-NEXT: sched.task bwd layer(0) mb(1) (%{{[0-9#]+}}, %{{[0-9#]+}})
// GPUOPT-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// GPUOPT:      sched.drop params layer(0) gpu
// GPUOPT-NEXT: sched.stage_grads gradstage layer(0) first(%{{[0-9#]+}})
// GPUOPT-NEXT: %[[T7:[0-9]+]] = sched.move gradstage layer(0) gpu -> host prio(writeback)
// GPUOPT-NEXT: sched.await %[[T7]]
// GPUOPT-NEXT: sched.drop gradstage layer(0) gpu
// GPUOPT-NEXT: %[[T8:[0-9]+]] = sched.move gradients layer(0) ssd -> host prio(demand)
// GPUOPT-NEXT: sched.await %[[T8]]
// GPUOPT-NEXT: sched.accumulate_grads layer(0) add on host
// GPUOPT-NEXT: sched.drop gradstage layer(0) host
// GPUOPT-NEXT: %[[T9:[0-9]+]] = sched.move gradients layer(0) host -> ssd prio(writeback)
// GPUOPT-NEXT: sched.await %[[T9]]
// GPUOPT-NEXT: sched.drop gradients layer(0) host
// GPUOPT-NEXT: %[[T10:[0-9]+]] = sched.move gradients layer(0) ssd -> host prio(demand)
// GPUOPT-NEXT: sched.await %[[T10]]
// GPUOPT-NEXT: %[[T11:[0-9]+]] = sched.move gradients layer(0) host -> gpu prio(demand)
// GPUOPT-NEXT: sched.await %[[T11]]
// GPUOPT-NEXT: sched.drop gradients layer(0) host
// GPUOPT-NEXT: sched.gradient @embed.weight layer(0) gpu mean(2)
// GPUOPT-NEXT: sched.bind optimizer layer(0) gpu
// GPUOPT-NEXT: %[[T12:[0-9]+]] = sched.move params layer(0) host -> gpu prio(demand)
// GPUOPT-NEXT: sched.await %[[T12]]
// GPUOPT-NEXT: sched.bind params layer(0) gpu
// GPUOPT-NEXT: sched.task opt layer(0) (%{{[0-9#]+}})
// GPUOPT-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// GPUOPT:      %[[T13:[0-9]+]] = sched.move params layer(0) gpu -> host prio(writeback)
// GPUOPT-NEXT: sched.await %[[T13]]
// GPUOPT-NEXT: sched.drop params layer(0) gpu
// GPUOPT-NEXT: sched.drop gradients layer(0) gpu
// GPUOPT-NEXT: %[[T14:[0-9]+]] = sched.move gradients layer(1) ssd -> host prio(demand)
// GPUOPT-NEXT: sched.await %[[T14]]
// GPUOPT-NEXT: %[[T15:[0-9]+]] = sched.move gradients layer(1) host -> gpu prio(demand)
// GPUOPT-NEXT: sched.await %[[T15]]
// GPUOPT-NEXT: sched.drop gradients layer(1) host
// GPUOPT-NEXT: sched.gradient @blocks.0.fc.weight layer(1) gpu mean(2)
// GPUOPT-NEXT: sched.gradient @blocks.0.fc.bias layer(1) gpu mean(2)
// GPUOPT-NEXT: sched.bind optimizer layer(1) gpu
// GPUOPT-NEXT: %[[T16:[0-9]+]] = sched.move params layer(1) host -> gpu prio(demand)
// GPUOPT-NEXT: sched.await %[[T16]]
// GPUOPT-NEXT: sched.bind params layer(1) gpu
// GPUOPT-NEXT: sched.task opt layer(1) (%{{[0-9#]+}}, %{{[0-9#]+}})
// GPUOPT-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// GPUOPT:      %[[T17:[0-9]+]] = sched.move params layer(1) gpu -> host prio(writeback)
// GPUOPT-NEXT: sched.await %[[T17]]
// GPUOPT-NEXT: sched.drop params layer(1) gpu
// GPUOPT-NEXT: sched.drop gradients layer(1) gpu
// GPUOPT-NEXT: %[[T18:[0-9]+]] = sched.move gradients layer(2) ssd -> host prio(demand)
// GPUOPT-NEXT: sched.await %[[T18]]
// GPUOPT-NEXT: %[[T19:[0-9]+]] = sched.move gradients layer(2) host -> gpu prio(demand)
// GPUOPT-NEXT: sched.await %[[T19]]
// GPUOPT-NEXT: sched.drop gradients layer(2) host
// GPUOPT-NEXT: sched.gradient @head.weight layer(2) gpu mean(2)
// GPUOPT-NEXT: sched.bind optimizer layer(2) gpu
// GPUOPT-NEXT: %[[T20:[0-9]+]] = sched.move params layer(2) host -> gpu prio(demand)
// GPUOPT-NEXT: sched.await %[[T20]]
// GPUOPT-NEXT: sched.bind params layer(2) gpu
// GPUOPT-NEXT: sched.task opt layer(2) (%{{[0-9#]+}})
// GPUOPT-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// GPUOPT:      %[[T21:[0-9]+]] = sched.move params layer(2) gpu -> host prio(writeback)
// GPUOPT-NEXT: sched.await %[[T21]]
// GPUOPT-NEXT: sched.drop params layer(2) gpu
// GPUOPT-NEXT: sched.drop gradients layer(2) gpu
// GPUOPT-NEXT: sched.accumulate mean %{{[0-9#]+}}, %{{[0-9#]+}}
// Everything on the GPU: bindings and gradient blocks, no moves.
// RESIDENT:      sched.bind params layer(0) gpu
// RESIDENT-NEXT: sched.bind params layer(1) gpu
// RESIDENT-NEXT: sched.bind params layer(2) gpu
// RESIDENT-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// RESIDENT:      sched.task fwd layer(0) mb(0) (%{{[0-9#]+}})
// RESIDENT-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// RESIDENT:      sched.task fwd layer(0) mb(1) (%{{[0-9#]+}})
// RESIDENT-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// RESIDENT:      sched.task fwd layer(1) mb(1) (%{{[0-9#]+}})
// RESIDENT-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// RESIDENT:      sched.task fwd layer(1) mb(0) (%{{[0-9#]+}})
// RESIDENT-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// RESIDENT:      sched.task fwd layer(2) mb(0) (%{{[0-9#]+}}, %{{[0-9#]+}})
// RESIDENT-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// RESIDENT:      sched.task fwd layer(2) mb(1) (%{{[0-9#]+}}, %{{[0-9#]+}})
// RESIDENT-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// RESIDENT:      sched.task bwd layer(2) mb(1) (%{{[0-9#]+}}, %{{[0-9#]+}}, %{{[0-9#]+}})
// RESIDENT-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// RESIDENT:      sched.task bwd layer(2) mb(0) (%{{[0-9#]+}}, %{{[0-9#]+}}, %{{[0-9#]+}})
// RESIDENT-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// RESIDENT:      sched.stage_grads gradients layer(2) first(%{{[0-9#]+}}, %{{[0-9#]+}})
// RESIDENT-NEXT: sched.task bwd layer(1) mb(0) (%{{[0-9#]+}}, %{{[0-9#]+}}, %{{[0-9#]+}})
// RESIDENT-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// RESIDENT:      sched.task bwd layer(1) mb(1) (%{{[0-9#]+}}, %{{[0-9#]+}}, %{{[0-9#]+}})
// RESIDENT-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// RESIDENT:      sched.stage_grads gradients layer(1) first(%{{[0-9#]+}}, %{{[0-9#]+}}, %{{[0-9#]+}}, %{{[0-9#]+}})
// RESIDENT-NEXT: sched.task bwd layer(0) mb(1) (%{{[0-9#]+}}, %{{[0-9#]+}})
// RESIDENT-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// RESIDENT:      sched.task bwd layer(0) mb(0) (%{{[0-9#]+}}, %{{[0-9#]+}})
// RESIDENT-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// RESIDENT:      sched.stage_grads gradients layer(0) first(%{{[0-9#]+}}, %{{[0-9#]+}})
// RESIDENT-NEXT: sched.gradient @embed.weight layer(0) gpu mean(2)
// RESIDENT-NEXT: sched.bind optimizer layer(0) gpu
// RESIDENT-NEXT: sched.bind params layer(0) gpu
// RESIDENT-NEXT: sched.task opt layer(0) (%{{[0-9#]+}})
// RESIDENT-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// RESIDENT:      sched.gradient @blocks.0.fc.weight layer(1) gpu mean(2)
// RESIDENT-NEXT: sched.gradient @blocks.0.fc.bias layer(1) gpu mean(2)
// RESIDENT-NEXT: sched.bind optimizer layer(1) gpu
// RESIDENT-NEXT: sched.bind params layer(1) gpu
// RESIDENT-NEXT: sched.task opt layer(1) (%{{[0-9#]+}}, %{{[0-9#]+}})
// RESIDENT-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// RESIDENT:      sched.gradient @head.weight layer(2) gpu mean(2)
// RESIDENT-NEXT: sched.bind optimizer layer(2) gpu
// RESIDENT-NEXT: sched.bind params layer(2) gpu
// RESIDENT-NEXT: sched.task opt layer(2) (%{{[0-9#]+}})
// RESIDENT-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// RESIDENT:      sched.accumulate mean %{{[0-9#]+}}, %{{[0-9#]+}}

// With master weights (bf16-mixed: `master` on the iteration; here homed
// on SSD with the state, or on host) the master block goes where the update
// runs and back exactly as the optimizer state does, part for part: part 0
// around the deferred task, part 1 around the update after the backward;
// with the state before the parameters are bound (a fresh params copy is
// rounded from the bound masters).
// The update rewrites every working copy of a layer whose parameters it
// all updates (from their masters): its params part is a fresh copy
// (sched.alloc) where it runs, not read from SSD, and written back after.
// RUN: sed 's/optimizer_on = "cpu"/master = "ssd", optimizer_on = "cpu"/' %S/Inputs/insert-transfers-defcpu.mlir | spillway-opt --sched-insert-transfers | FileCheck %s --check-prefix=MASTER
// MASTER:      %[[T0:[0-9]+]] = sched.move params layer(0) ssd -> host prio(demand)
// MASTER-NEXT: sched.move params layer(1) ssd -> host prio(prefetch)
// MASTER-NEXT: sched.await %[[T0]]
// MASTER-NEXT: %[[T2:[0-9]+]] = sched.move optimizer layer(0) part(0) ssd -> host prio(demand)
// MASTER-NEXT: sched.await %[[T2]]
// MASTER-NEXT: sched.bind optimizer layer(0) host
// MASTER-NEXT: %[[M0:[0-9]+]] = sched.move master layer(0) part(0) ssd -> host prio(demand)
// MASTER-NEXT: sched.await %[[M0]]
// MASTER-NEXT: sched.bind master layer(0) host
// MASTER-NEXT: sched.bind params layer(0) host
// MASTER-NEXT: sched.task opt deferred layer(0) ()
// MASTER-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// MASTER:      %[[T3:[0-9]+]] = sched.move optimizer layer(0) part(0) host -> ssd prio(writeback)
// MASTER-NEXT: sched.await %[[T3]]
// MASTER-NEXT: sched.drop optimizer layer(0) part(0) host
// MASTER-NEXT: %[[M1:[0-9]+]] = sched.move master layer(0) part(0) host -> ssd prio(writeback)
// MASTER-NEXT: sched.await %[[M1]]
// MASTER-NEXT: sched.drop master layer(0) part(0) host
// MASTER-NEXT: %[[T4:[0-9]+]] = sched.move params layer(0) part(0) host -> ssd prio(writeback)
// MASTER:      sched.gradient @head.weight layer(2) host mean(2)
// MASTER-NEXT: %[[T6:[0-9]+]] = sched.move optimizer layer(2) part(1) ssd -> host prio(demand)
// MASTER-NEXT: sched.await %[[T6]]
// MASTER-NEXT: sched.bind optimizer layer(2) host
// MASTER-NEXT: %[[M2:[0-9]+]] = sched.move master layer(2) part(1) ssd -> host prio(demand)
// MASTER-NEXT: sched.await %[[M2]]
// MASTER-NEXT: sched.bind master layer(2) host
// MASTER-NEXT: sched.alloc params layer(2) part(1) host
// MASTER-NEXT: sched.bind params layer(2) host
// MASTER-NEXT: sched.task opt layer(2) (%{{[0-9#]+}})
// MASTER-NOT:  sched.{{(accumulate|await|bind|drop|gradient|move|put_activation|stage_grads|take_activation|task)}}
// MASTER:      %[[T8:[0-9]+]] = sched.move params layer(2) part(1) host -> ssd prio(writeback)
// MASTER-NEXT: sched.await %[[T8]]
// MASTER-NEXT: sched.drop params layer(2) part(1) host
// MASTER-NEXT: %[[T9:[0-9]+]] = sched.move optimizer layer(2) part(1) host -> ssd prio(writeback)
// MASTER-NEXT: sched.await %[[T9]]
// MASTER-NEXT: sched.drop optimizer layer(2) part(1) host
// MASTER-NEXT: %[[M3:[0-9]+]] = sched.move master layer(2) part(1) host -> ssd prio(writeback)
// MASTER-NEXT: sched.await %[[M3]]
// MASTER-NEXT: sched.drop master layer(2) part(1) host
// A master homed where the update runs (a CPU optimizer's on host) stays.
// RUN: sed 's/optimizer_on = "cpu"/master = "host", optimizer_on = "cpu"/' %S/Inputs/insert-transfers-defcpu.mlir | spillway-opt --sched-insert-transfers | FileCheck %s --check-prefix=MASTERHOST --implicit-check-not="move master"
// MASTERHOST: sched.bind master layer(0) host
// MASTERHOST: sched.bind master layer(2) host
// A CPU optimizer updating GPU-resident bf16 working copies: neither the
// deferred part (0) nor the rest (1) is read back from the GPU; each is a
// fresh host copy rounded from the bound masters, then written to the GPU.
// RUN: sed 's/^module {/module attributes {train.precision = "bf16-mixed"} {/' %S/Inputs/models/three-layers.mlir | spillway-opt --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=2 --sched-order=order=snake "--sched-overlap-optimizer=fraction=0.5 granule=1" --sched-place=placement=params=gpu,optimizer=host,gradients=gpu --sched-insert-transfers -o %t.mastergpu.mlir
// RUN: FileCheck %s --check-prefix=MASTERGPU < %t.mastergpu.mlir
// RUN: not grep -E "move params .*gpu -> host" %t.mastergpu.mlir
// MASTERGPU:      sched.bind master layer(0) host
// MASTERGPU-NEXT: sched.alloc params layer(0) part(0) host
// MASTERGPU-NEXT: sched.bind params layer(0) host
// MASTERGPU-NEXT: sched.task opt deferred layer(0)
// MASTERGPU:      sched.move params layer(0) part(0) host -> gpu prio(writeback)
// MASTERGPU:      sched.gradient @head.weight layer(2) host mean(2)
// MASTERGPU:      sched.bind master layer(2) host
// MASTERGPU-NEXT: sched.alloc params layer(2) part(1) host
// MASTERGPU-NEXT: sched.bind params layer(2) host
// MASTERGPU-NEXT: sched.task opt layer(2)
// MASTERGPU:      sched.move params layer(2) part(1) host -> gpu prio(writeback)

// Activations split by layer (snake, two micro-batches): layer 0's (indices
// 0 and 1, the embedding's outputs) homed on SSD, layer 1's (2 and 3) on
// host. An SSD-homed one takes the host leg and a staging slot; a
// host-homed one keeps its host copy from put to take, so its put waits
// for no SSD write-back, and its take drops the host copy, its home.
// ACTLAYERS:      sched.put_activation %{{[0-9#]+}} index(1)
// ACTLAYERS-NEXT: %[[W1:[0-9]+]] = sched.move activations layer(1) gpu -> host prio(writeback)
// ACTLAYERS:      sched.move activations layer(1) host -> ssd prio(writeback)
// ACTLAYERS:      sched.put_activation %{{[0-9#]+}} index(0)
// ACTLAYERS:      sched.move activations layer(0) host -> ssd prio(writeback)
// ACTLAYERS-NEXT: sched.put_activation %{{[0-9#]+}} index(3)
// ACTLAYERS-NEXT: sched.move activations layer(3) gpu -> host prio(writeback)
// ACTLAYERS-NEXT: sched.slice
// ACTLAYERS-NEXT: sched.task fwd layer(2) mb(1)
// ACTLAYERS:      sched.take_activation index(3)
// ACTLAYERS-NEXT: sched.drop activations layer(3) gpu
// ACTLAYERS-NEXT: sched.drop activations layer(3) host
// ACTLAYERS:      sched.take_activation index(0)
// ACTLAYERS-NEXT: sched.drop activations layer(0) gpu
// ACTLAYERS-NEXT: sched.drop activations layer(0) ssd
// ACTLAYERS:      sched.take_activation index(1)
// ACTLAYERS-NEXT: sched.drop activations layer(1) gpu
// ACTLAYERS-NEXT: sched.drop activations layer(1) ssd
// Layer 1's activations never reach the SSD.
// ACTLAYERSHOST-NOT: sched.move activations layer({{[23]}}) {{(host -> ssd|ssd -> host)}}
// ACTLAYERSHOST-NOT: sched.drop activations layer({{[23]}}) ssd

// Layer 0's activations kept on the GPU, layer 1's on SSD. Layer 0's
// outputs are never put, and layer 1's backward reads them as the forward
// left them; layer 1's outputs (indices 0 and 1) take the SSD round trip.
// ACTGPU:      %[[E0:[0-9]+]] = sched.task fwd layer(0) mb(0)
// ACTGPU:      %[[E1:[0-9]+]] = sched.task fwd layer(0) mb(1)
// ACTGPU-NOT:  sched.put_activation %[[E0]]
// ACTGPU-NOT:  sched.put_activation %[[E1]]
// ACTGPU:      sched.put_activation %{{[0-9#]+}} index(1)
// ACTGPU:      sched.move activations layer(1) host -> ssd prio(writeback)
// ACTGPU:      sched.put_activation %{{[0-9#]+}} index(0)
// ACTGPU:      sched.move activations layer(0) host -> ssd prio(writeback)
// ACTGPU-NOT:  sched.put_activation
// ACTGPU:      sched.task bwd layer(1) mb(0) (%{{[0-9#]+}}, %[[E0]])
// ACTGPU:      sched.task bwd layer(1) mb(1) (%{{[0-9#]+}}, %[[E1]])

// Layer 0's params and optimizer blocks cut at element 2048 of its 4096:
// part 0 lives on host and never crosses to the SSD, part 1 on SSD. A load
// reads part 1 from SSD and uploads the whole block from host; only part
// 1's host copy is freed. The update brings part 1 of each block to host
// (part 0 is there), runs the weight's AdamW as two ranges split at the cut
// (the parts' host copies are not back to back), and writes part 1 back.
// CUT:      sched.move params layer(0) part(1) ssd -> host prio(demand)
// CUT:      sched.move params layer(0) host -> gpu prio(prefetch)
// CUT:      sched.drop params layer(0) part(1) host
// CUT-NEXT: sched.bind params layer(0) gpu
// CUT:      sched.move optimizer layer(0) part(1) ssd -> host prio(demand)
// CUT:      sched.bind optimizer layer(0) host
// CUT-NEXT: sched.move params layer(0) part(1) ssd -> host prio(demand)
// CUT:      sched.bind params layer(0) host
// CUT-NEXT: sched.task opt layer(0)
// CUT:      train.adamw @w1 [0, 2048), %arg{{[0-9]+}}
// CUT-NEXT: train.adamw @w1 [2048, 4096), %arg{{[0-9]+}}
// CUT:      sched.move params layer(0) part(1) host -> ssd prio(writeback)
// CUT:      sched.drop params layer(0) part(1) host
// CUT-NEXT: sched.move optimizer layer(0) part(1) host -> ssd prio(writeback)
// CUT:      sched.drop optimizer layer(0) part(1) host
// Part 0 never moves to or from the SSD, and its host copy is never freed;
// the other layers move whole.
// CUTHOST-NOT: sched.move {{params|optimizer}} layer(0) part(0)
// CUTHOST-NOT: sched.move {{params|optimizer}} layer(0) {{ssd|host -> ssd}}
// CUTHOST-NOT: sched.drop {{params|optimizer}} layer(0) {{(part\(0\) )?}}host{{$}}
// With the optimizer overlap deferring the same elements the cut keeps on
// host, the deferred update is part 0's and needs no optimizer transfer.
// CUTDEFER-NOT:  sched.move optimizer layer(0)
// CUTDEFER:      sched.bind optimizer layer(0) host
// CUTDEFER-NEXT: sched.task opt deferred layer(0)
// CUTDEFER:      sched.move optimizer layer(0) part(1) ssd -> host
// CUTDEFER:      train.adamw_defer @w1 [0, 1024)
// CUTDEFER-NEXT: train.adamw @w1 [1024, 4096)
// CUTDEFER-NOT:  sched.move optimizer layer(0) part(0)
// CUTOVERLAP: error: 'sched.iteration' op sched-insert-transfers: layer 0's blocks are cut at element 1024 and the optimizer overlap defers 2048 of its 4096 elements; a cut layer's overlap defers none or the cut's (place the layer whole, or use another --overlap-optimizer)
// CUTFOAM: error: 'train.foam' op sched-insert-transfers: layer 0's blocks are cut at element 2048, but @w1 is updated by FOAM, whose folded state is not cut; place the layer whole
