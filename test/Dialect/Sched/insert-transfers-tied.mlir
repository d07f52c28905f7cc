// A tied weight off the GPU has one home, its owner's params block: every
// load of a layer that reads it brings and binds that block too, a block
// that consecutive loads read stays on the GPU across them, and its
// gradient (both uses summed in the owner's backward) is updated once. The
// inputs are Inputs/models/tied-head.mlir (the head right after the
// embedding) and tied-deep.mlir (one layer between them), ordered and
// placed (Inputs/regenerate.sh).

// The head's load finds the embedding's block still there: one stay, one
// upload, across the whole iteration.
// RUN: spillway-opt %S/Inputs/tied-head-params-host.mlir --sched-insert-transfers | FileCheck %s --check-prefix=HEAD
// HEAD: sched.move params layer(0) host -> gpu prio(prefetch)
// HEAD: sched.bind params layer(0) gpu
// HEAD: sched.task fwd layer(0)
// HEAD-NOT: sched.drop params layer(0) gpu
// HEAD-NOT: sched.move params layer(0)
// HEAD: sched.bind params layer(1) gpu
// HEAD: sched.task fwd layer(1)
// HEAD: sched.task bwd layer(1)
// HEAD-NOT: sched.move params layer(0)
// HEAD: sched.drop params layer(1) gpu
// HEAD: sched.task bwd layer(0)
// HEAD: sched.drop params layer(0) gpu
// HEAD: sched.gradient @wte layer(0) gpu mean(1)
// HEAD: sched.task opt layer(0)

// Horizontal, M = 1, from SSD: loads wte | h.0 | h.1 (+ wte) | h.0 | wte,
// so wte stays on the GPU three times, and each time it is read from SSD
// two loads ahead and uploaded one load ahead, as a layer's own block is.
// The bytes are the cost model's: 3 x 160 + 2 x 64 + 64 loaded, plus the
// GPU optimizer's round trip of every block (288).
// RUN: spillway-opt %S/Inputs/tied-deep-ssd.mlir --sched-insert-transfers --sched-assign-buffers | FileCheck %s --check-prefix=DEEP
// DEEP: model_bytes = {d2h = 288 : i64, h2d = 960 : i64, ssd_read = 960 : i64, ssd_write = 288 : i64}
// DEEP: sched.move params layer(0) ssd -> host prio(demand)
// DEEP: sched.move params layer(0) host -> gpu prio(prefetch)
// DEEP: sched.bind params layer(0) gpu
// DEEP: sched.move params layer(0) ssd -> host prio(prefetch)
// DEEP: sched.task fwd layer(0)
// DEEP: sched.drop params layer(0) gpu
// DEEP: sched.bind params layer(1) gpu
// DEEP: sched.move params layer(0) host -> gpu prio(prefetch)
// DEEP: sched.task fwd layer(1)
// DEEP: sched.drop params layer(1) gpu
// DEEP: sched.drop params layer(0) host
// DEEP-NEXT: sched.bind params layer(2) gpu
// DEEP-NEXT: sched.bind params layer(0) gpu
// DEEP: sched.move params layer(0) ssd -> host prio(prefetch)
// DEEP: sched.task fwd layer(2)
// DEEP-NOT: sched.drop params layer(0) gpu
// DEEP: sched.task bwd layer(2)
// DEEP: sched.drop params layer(2) gpu
// DEEP-NEXT: sched.drop params layer(0) gpu
// DEEP: sched.bind params layer(1) gpu
// DEEP: sched.move params layer(0) host -> gpu prio(prefetch)
// DEEP: sched.task bwd layer(1)
// DEEP: sched.bind params layer(0) gpu
// DEEP: sched.task bwd layer(0)
// DEEP: sched.drop params layer(0) gpu
// DEEP: sched.gradient @wte layer(0) gpu mean(1)
// DEEP: sched.task opt layer(0)

// Snake, M = 2, the optimizer overlap on a CPU optimizer: the deferred part
// of wte's update runs once, at its block's first stay (before the upload),
// and the head's later stay reads the SSD copy it wrote back. Both
// micro-batches' wte gradients (each the sum of both uses) are flushed once
// into the host accumulator and averaged for the one update.
// RUN: spillway-opt %S/Inputs/tied-deep-defcpu.mlir --sched-insert-transfers | FileCheck %s --check-prefix=DEF
// DEF: sched.move params layer(0) ssd -> host prio(demand)
// DEF: sched.bind params layer(0) host
// DEF: sched.task opt deferred layer(0)
// DEF: sched.move params layer(0) part(0) host -> ssd prio(writeback)
// DEF: sched.move params layer(0) host -> gpu prio(prefetch)
// DEF-NOT: sched.task opt deferred layer(0)
// DEF: sched.move params layer(0) ssd -> host prio(prefetch)
// DEF: sched.task fwd layer(0) mb(0)
// DEF: sched.bind params layer(2) gpu
// DEF-NEXT: sched.bind params layer(0) gpu
// DEF: sched.task fwd layer(2) mb(0)
// DEF: sched.task bwd layer(2) mb(0)
// DEF: sched.drop params layer(2) gpu
// DEF-NEXT: sched.drop params layer(0) gpu
// DEF-NOT: sched.task opt deferred layer(0)
// DEF: sched.move params layer(0) host -> gpu prio(prefetch)
// DEF: sched.task bwd layer(0) mb(1)
// DEF: sched.task bwd layer(0) mb(0)
// DEF: sched.stage_grads gradstage layer(0) first({{.*}}) {params = [@wte]}
// DEF: sched.accumulate_grads layer(0) first on host
// DEF-NOT: sched.accumulate_grads layer(0)
// DEF: sched.gradient @wte layer(0) host mean(2)
// DEF: sched.move params layer(0) part(1) ssd -> host prio(demand)
// DEF: sched.task opt layer(0)
