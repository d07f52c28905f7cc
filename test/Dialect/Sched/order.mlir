// sched-order on Inputs/order.mlir: Inputs/models/three-layers.mlir and
// two-layers.mlir in sched form with three micro-batches (Inputs/regenerate.sh
// writes it). HORIZ and SNAKE read the schedule task by task: the
// --implicit-check-not options make the checks name every task and
// accumulate, in order, so a plain CHECK line is the next task (-NEXT where
// the ops are adjacent lines).
// RUN: spillway-opt %S/Inputs/order.mlir -split-input-file --sched-order=order=horizontal | FileCheck %s --check-prefix=HORIZ --implicit-check-not=sched.task --implicit-check-not='sched.accumulate mean'
// RUN: spillway-opt %S/Inputs/order.mlir -split-input-file --sched-order=order=snake | FileCheck %s --check-prefix=SNAKE --implicit-check-not=sched.task --implicit-check-not='sched.accumulate mean'
// RUN: spillway-opt %S/Inputs/order.mlir -split-input-file --sched-order=order=snake | FileCheck %s --check-prefix=FULL
// RUN: spillway-opt %S/Inputs/order.mlir -split-input-file "--sched-order=order=horizontal remarks=true" -o /dev/null 2>&1 | FileCheck %s --check-prefix=LOADS-H
// RUN: spillway-opt %S/Inputs/order.mlir -split-input-file "--sched-order=order=snake remarks=true" -o /dev/null 2>&1 | FileCheck %s --check-prefix=LOADS-S

// The layer loads of each order (runs of consecutive tasks of one layer),
// as docs/cost-model.md counts them: horizontal 2LM - 2M + 1, snake 2L - 1.
// LOADS-H: remark: horizontal order of 3 layers x 3 micro-batches: 13 layer loads
// LOADS-H: remark: horizontal order of 2 layers x 3 micro-batches: 7 layer loads
// LOADS-S: remark: snake order of 3 layers x 3 micro-batches: 5 layer loads
// LOADS-S: remark: snake order of 2 layers x 3 micro-batches: 3 layer loads

// Three layers (embedding, block, head), three micro-batches.
// Horizontal: each micro-batch forward 0..2 then backward 2..0; the updates
// after the last backward.
// HORIZ-LABEL: func.func @three_layers
// HORIZ:       sched.task fwd layer(0) mb(0)
// HORIZ:       sched.task fwd layer(1) mb(0)
// HORIZ:       sched.task fwd layer(2) mb(0)
// HORIZ:       sched.task bwd layer(2) mb(0)
// HORIZ:       sched.task bwd layer(1) mb(0)
// HORIZ:       sched.task bwd layer(0) mb(0)
// HORIZ:       sched.task fwd layer(0) mb(1)
// HORIZ:       sched.task fwd layer(1) mb(1)
// HORIZ:       sched.task fwd layer(2) mb(1)
// HORIZ:       sched.task bwd layer(2) mb(1)
// HORIZ:       sched.task bwd layer(1) mb(1)
// HORIZ:       sched.task bwd layer(0) mb(1)
// HORIZ:       sched.task fwd layer(0) mb(2)
// HORIZ:       sched.task fwd layer(1) mb(2)
// HORIZ:       sched.task fwd layer(2) mb(2)
// HORIZ:       sched.task bwd layer(2) mb(2)
// HORIZ:       sched.task bwd layer(1) mb(2)
// HORIZ:       sched.task bwd layer(0) mb(2)
// HORIZ:       sched.accumulate mean
// HORIZ-NEXT:  sched.task opt layer(0)
// HORIZ:       sched.accumulate mean
// HORIZ-NEXT:  sched.accumulate mean
// HORIZ-NEXT:  sched.task opt layer(1)
// HORIZ:       sched.accumulate mean
// HORIZ-NEXT:  sched.task opt layer(2)
// HORIZ:       sched.accumulate mean
// Snake: all micro-batches of a layer, the direction flipping at every
// layer visit and across the turn to backward: the last micro-batch of one
// visit is the first of the next (layer 2's forward and backward meet at
// micro-batch 2).
// SNAKE-LABEL: func.func @three_layers
// SNAKE:       sched.task fwd layer(0) mb(0)
// SNAKE:       sched.task fwd layer(0) mb(1)
// SNAKE:       sched.task fwd layer(0) mb(2)
// SNAKE:       sched.task fwd layer(1) mb(2)
// SNAKE:       sched.task fwd layer(1) mb(1)
// SNAKE:       sched.task fwd layer(1) mb(0)
// SNAKE:       sched.task fwd layer(2) mb(0)
// SNAKE:       sched.task fwd layer(2) mb(1)
// SNAKE:       sched.task fwd layer(2) mb(2)
// SNAKE:       sched.task bwd layer(2) mb(2)
// SNAKE:       sched.task bwd layer(2) mb(1)
// SNAKE:       sched.task bwd layer(2) mb(0)
// SNAKE:       sched.task bwd layer(1) mb(0)
// SNAKE:       sched.task bwd layer(1) mb(1)
// SNAKE:       sched.task bwd layer(1) mb(2)
// SNAKE:       sched.task bwd layer(0) mb(2)
// SNAKE:       sched.task bwd layer(0) mb(1)
// SNAKE:       sched.task bwd layer(0) mb(0)
// SNAKE:       sched.accumulate mean
// SNAKE-NEXT:  sched.task opt layer(0)
// SNAKE:       sched.accumulate mean
// SNAKE-NEXT:  sched.accumulate mean
// SNAKE-NEXT:  sched.task opt layer(1)
// SNAKE:       sched.accumulate mean
// SNAKE-NEXT:  sched.task opt layer(2)
// SNAKE:       sched.accumulate mean
// The iteration records the order; slices move to their first user; an
// accumulate adds the micro-batches in the order they now run (layer 0's
// backward runs 2, 1, 0).
// FULL-LABEL: func.func @three_layers
// FULL:       sched.iteration({{.*}}) {microbatches = 3 : i64, order = "snake"}
// FULL-NEXT:  ^bb0(%[[IDS:.*]]: tensor<6xi64>, %[[LABELS:.*]]: tensor<6xi64>):
// FULL-NEXT:    %[[I0:.*]] = sched.slice %[[IDS]][0 of 3]
// FULL-NEXT:    sched.task fwd layer(0) mb(0) (%[[I0]])
// FULL:         %[[D2:.*]] = sched.task bwd layer(0) mb(2)
// FULL:         %[[D1:.*]] = sched.task bwd layer(0) mb(1)
// FULL:         %[[D0:.*]] = sched.task bwd layer(0) mb(0)
// FULL:         %[[G:.*]] = sched.accumulate mean %[[D2]], %[[D1]], %[[D0]] : tensor<10x4xf32>
// FULL-NEXT:    sched.task opt layer(0) (%[[G]])

// Two layers, three micro-batches; the updates after the last backward, as
// above.
// HORIZ-LABEL: func.func @two_layers
// HORIZ:       sched.task fwd layer(0) mb(0)
// HORIZ:       sched.task fwd layer(1) mb(0)
// HORIZ:       sched.task bwd layer(1) mb(0)
// HORIZ:       sched.task bwd layer(0) mb(0)
// HORIZ:       sched.task fwd layer(0) mb(1)
// HORIZ:       sched.task fwd layer(1) mb(1)
// HORIZ:       sched.task bwd layer(1) mb(1)
// HORIZ:       sched.task bwd layer(0) mb(1)
// HORIZ:       sched.task fwd layer(0) mb(2)
// HORIZ:       sched.task fwd layer(1) mb(2)
// HORIZ:       sched.task bwd layer(1) mb(2)
// HORIZ:       sched.task bwd layer(0) mb(2)
// HORIZ:       sched.accumulate mean
// HORIZ-NEXT:  sched.task opt layer(0)
// HORIZ:       sched.accumulate mean
// HORIZ-NEXT:  sched.task opt layer(1)
// HORIZ:       sched.accumulate mean
// SNAKE-LABEL: func.func @two_layers
// SNAKE:       sched.task fwd layer(0) mb(0)
// SNAKE:       sched.task fwd layer(0) mb(1)
// SNAKE:       sched.task fwd layer(0) mb(2)
// SNAKE:       sched.task fwd layer(1) mb(2)
// SNAKE:       sched.task fwd layer(1) mb(1)
// SNAKE:       sched.task fwd layer(1) mb(0)
// SNAKE:       sched.task bwd layer(1) mb(0)
// SNAKE:       sched.task bwd layer(1) mb(1)
// SNAKE:       sched.task bwd layer(1) mb(2)
// SNAKE:       sched.task bwd layer(0) mb(2)
// SNAKE:       sched.task bwd layer(0) mb(1)
// SNAKE:       sched.task bwd layer(0) mb(0)
// SNAKE:       sched.accumulate mean
// SNAKE-NEXT:  sched.task opt layer(0)
// SNAKE:       sched.accumulate mean
// SNAKE-NEXT:  sched.task opt layer(1)
// SNAKE:       sched.accumulate mean
