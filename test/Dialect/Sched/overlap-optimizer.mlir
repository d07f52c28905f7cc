// The task order after sched-overlap-optimizer as text: each RUN keeps only
// the task, accumulate and update lines of the output, so CHECK-NEXT reads
// the schedule. Two micro-batches, both orders, F = 0, 0.5, 1; the inputs
// are order.mlir's three layers and partition-layers.mlir's tied embedding.
// RUN: spillway-opt %s -split-input-file --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=2 --sched-order=order=horizontal --sched-overlap-optimizer=fraction=0 | grep -o 'func.func @[a-z_]*\|sched\.task [a-z]*\( deferred\)\? layer([0-9]*)\( mb([0-9]*)\)\?\|sched\.accumulate mean\|train\.adamw[a-z_]* @[^ ,]*\( \[[0-9]*, [0-9]*)\)\?' | FileCheck %s --check-prefix=H0
// RUN: spillway-opt %s -split-input-file --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=2 --sched-order=order=horizontal --sched-overlap-optimizer="fraction=0.5 granule=1" | grep -o 'func.func @[a-z_]*\|sched\.task [a-z]*\( deferred\)\? layer([0-9]*)\( mb([0-9]*)\)\?\|sched\.accumulate mean\|train\.adamw[a-z_]* @[^ ,]*\( \[[0-9]*, [0-9]*)\)\?' | FileCheck %s --check-prefix=H5
// RUN: spillway-opt %s -split-input-file --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=2 --sched-order=order=horizontal --sched-overlap-optimizer="fraction=1 granule=1" | grep -o 'func.func @[a-z_]*\|sched\.task [a-z]*\( deferred\)\? layer([0-9]*)\( mb([0-9]*)\)\?\|sched\.accumulate mean\|train\.adamw[a-z_]* @[^ ,]*\( \[[0-9]*, [0-9]*)\)\?' | FileCheck %s --check-prefix=H1
// RUN: spillway-opt %s -split-input-file --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=2 --sched-order=order=snake --sched-overlap-optimizer=fraction=0 | grep -o 'func.func @[a-z_]*\|sched\.task [a-z]*\( deferred\)\? layer([0-9]*)\( mb([0-9]*)\)\?\|sched\.accumulate mean\|train\.adamw[a-z_]* @[^ ,]*\( \[[0-9]*, [0-9]*)\)\?' | FileCheck %s --check-prefix=S0
// RUN: spillway-opt %s -split-input-file --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=2 --sched-order=order=snake --sched-overlap-optimizer="fraction=0.5 granule=1" | grep -o 'func.func @[a-z_]*\|sched\.task [a-z]*\( deferred\)\? layer([0-9]*)\( mb([0-9]*)\)\?\|sched\.accumulate mean\|train\.adamw[a-z_]* @[^ ,]*\( \[[0-9]*, [0-9]*)\)\?' | FileCheck %s --check-prefix=S5
// RUN: spillway-opt %s -split-input-file --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=2 --sched-order=order=snake --sched-overlap-optimizer="fraction=1 granule=1" | grep -o 'func.func @[a-z_]*\|sched\.task [a-z]*\( deferred\)\? layer([0-9]*)\( mb([0-9]*)\)\?\|sched\.accumulate mean\|train\.adamw[a-z_]* @[^ ,]*\( \[[0-9]*, [0-9]*)\)\?' | FileCheck %s --check-prefix=S1
// The deferred elements are whole granules (default 64 elements, the
// offload plan's GPU alignment): with them, F = 0.5 of 40 elements rounds to
// 0 (nothing deferred) and F = 0.9 (36) up to 64, i.e. all 40. Granule 1
// above shows the exact split.
// RUN: spillway-opt %s -split-input-file --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=2 --sched-order=order=snake --sched-overlap-optimizer=fraction=0.5 | FileCheck %s --check-prefix=G5
// G5-NOT: deferred
// G5-NOT: adamw_defer
// RUN: spillway-opt %s -split-input-file --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=2 --sched-order=order=snake --sched-overlap-optimizer=fraction=0.9 | grep -o 'train\.adamw[a-z_]* @[^ ,]*\( \[[0-9]*, [0-9]*)\)\?' | FileCheck %s --check-prefix=G9
// G9-DAG: train.adamw_apply_pending @embed.weight [0, 40)
// G9-DAG: train.adamw_defer @head.weight [0, 40)
// G9-DAG: train.adamw @blocks.0.fc.weight{{$}}
// G9-DAG: train.adamw_apply_pending @wte [0, 40)
// G9-DAG: train.adamw @ln.scale{{$}}
// The full text of a deferred task and a split update.
// RUN: spillway-opt %s -split-input-file --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=2 --sched-order=order=snake --sched-overlap-optimizer="fraction=0.5 granule=1" | FileCheck %s --check-prefix=FULL
// FULL-LABEL: func.func @three_layers
// FULL:       sched.task opt deferred layer(0) () : () -> () {
// FULL-NEXT:    train.adamw_apply_pending @embed.weight [0, 20)
// FULL-NEXT:  }
// FULL:       sched.task opt layer(0) (%{{.*}}) : (tensor<10x4xf32>) -> () {
// FULL-NEXT:  ^bb0(%[[G:.*]]: tensor<10x4xf32>):
// FULL-NEXT:    train.adamw_defer @embed.weight [0, 20), %[[G]] {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 1.000000e-02 : f64} : tensor<10x4xf32>
// FULL-NEXT:    train.adamw @embed.weight [20, 40), %[[G]] {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 1.000000e-02 : f64} : tensor<10x4xf32>
// FULL-NEXT:  }

// F = 0: nothing deferred; each update moves to just after its layer's last
// backward (horizontal: micro-batch 1's), with the accumulates it reads.
// H0-LABEL: func.func @three_layers
// H0-NEXT:  sched.task fwd layer(0) mb(0)
// H0-NEXT:  sched.task fwd layer(1) mb(0)
// H0-NEXT:  sched.task fwd layer(2) mb(0)
// H0-NEXT:  sched.task bwd layer(2) mb(0)
// H0-NEXT:  sched.task bwd layer(1) mb(0)
// H0-NEXT:  sched.task bwd layer(0) mb(0)
// H0-NEXT:  sched.task fwd layer(0) mb(1)
// H0-NEXT:  sched.task fwd layer(1) mb(1)
// H0-NEXT:  sched.task fwd layer(2) mb(1)
// H0-NEXT:  sched.task bwd layer(2) mb(1)
// H0-NEXT:  sched.accumulate mean
// H0-NEXT:  sched.task opt layer(2)
// H0-NEXT:  train.adamw @head.weight
// H0-NEXT:  sched.task bwd layer(1) mb(1)
// H0-NEXT:  sched.accumulate mean
// H0-NEXT:  sched.accumulate mean
// H0-NEXT:  sched.task opt layer(1)
// H0-NEXT:  train.adamw @blocks.0.fc.weight
// H0-NEXT:  train.adamw @blocks.0.fc.bias
// H0-NEXT:  sched.task bwd layer(0) mb(1)
// H0-NEXT:  sched.accumulate mean
// H0-NEXT:  sched.task opt layer(0)
// H0-NEXT:  train.adamw @embed.weight
// H0-NEXT:  sched.accumulate mean
// H0-LABEL: func.func @tied
// H0-NEXT:  sched.task fwd layer(0) mb(0)
// H0-NEXT:  sched.task fwd layer(1) mb(0)
// H0-NEXT:  sched.task bwd layer(1) mb(0)
// H0-NEXT:  sched.task bwd layer(0) mb(0)
// H0-NEXT:  sched.task fwd layer(0) mb(1)
// H0-NEXT:  sched.task fwd layer(1) mb(1)
// H0-NEXT:  sched.task bwd layer(1) mb(1)
// H0-NEXT:  sched.accumulate mean
// H0-NEXT:  sched.accumulate mean
// H0-NEXT:  sched.task opt layer(1)
// H0-NEXT:  train.adamw @ln.scale
// H0-NEXT:  train.adamw @ln.bias
// H0-NEXT:  sched.task bwd layer(0) mb(1)
// H0-NEXT:  sched.accumulate mean
// H0-NEXT:  sched.task opt layer(0)
// H0-NEXT:  train.adamw @wte
// H0-NEXT:  sched.accumulate mean

// F = 0.5: the first half of each layer's elements, its parameters
// concatenated in train.layers order (blocks.0: 16 weight + 4 bias
// elements, so weight [0, 10)), is deferred: the opt task keeps it pending
// and updates the rest; a deferred task applies it just before the layer's
// first forward. The tied @wte (owned by layer 0, read by layer 1's forward
// and backward) is updated only after layer 0's last backward, when its
// gradient from both layers is complete; ln: 8 elements, scale [0, 4).
// H5-LABEL: func.func @three_layers
// H5-NEXT:  sched.task opt deferred layer(0)
// H5-NEXT:  train.adamw_apply_pending @embed.weight [0, 20)
// H5-NEXT:  sched.task fwd layer(0) mb(0)
// H5-NEXT:  sched.task opt deferred layer(1)
// H5-NEXT:  train.adamw_apply_pending @blocks.0.fc.weight [0, 10)
// H5-NEXT:  sched.task fwd layer(1) mb(0)
// H5-NEXT:  sched.task opt deferred layer(2)
// H5-NEXT:  train.adamw_apply_pending @head.weight [0, 20)
// H5-NEXT:  sched.task fwd layer(2) mb(0)
// H5-NEXT:  sched.task bwd layer(2) mb(0)
// H5-NEXT:  sched.task bwd layer(1) mb(0)
// H5-NEXT:  sched.task bwd layer(0) mb(0)
// H5-NEXT:  sched.task fwd layer(0) mb(1)
// H5-NEXT:  sched.task fwd layer(1) mb(1)
// H5-NEXT:  sched.task fwd layer(2) mb(1)
// H5-NEXT:  sched.task bwd layer(2) mb(1)
// H5-NEXT:  sched.accumulate mean
// H5-NEXT:  sched.task opt layer(2)
// H5-NEXT:  train.adamw_defer @head.weight [0, 20)
// H5-NEXT:  train.adamw @head.weight [20, 40)
// H5-NEXT:  sched.task bwd layer(1) mb(1)
// H5-NEXT:  sched.accumulate mean
// H5-NEXT:  sched.accumulate mean
// H5-NEXT:  sched.task opt layer(1)
// H5-NEXT:  train.adamw_defer @blocks.0.fc.weight [0, 10)
// H5-NEXT:  train.adamw @blocks.0.fc.weight [10, 16)
// H5-NEXT:  train.adamw @blocks.0.fc.bias
// H5-NEXT:  sched.task bwd layer(0) mb(1)
// H5-NEXT:  sched.accumulate mean
// H5-NEXT:  sched.task opt layer(0)
// H5-NEXT:  train.adamw_defer @embed.weight [0, 20)
// H5-NEXT:  train.adamw @embed.weight [20, 40)
// H5-NEXT:  sched.accumulate mean
// H5-LABEL: func.func @tied
// H5-NEXT:  sched.task opt deferred layer(0)
// H5-NEXT:  train.adamw_apply_pending @wte [0, 20)
// H5-NEXT:  sched.task fwd layer(0) mb(0)
// H5-NEXT:  sched.task opt deferred layer(1)
// H5-NEXT:  train.adamw_apply_pending @ln.scale [0, 4)
// H5-NEXT:  sched.task fwd layer(1) mb(0)
// H5-NEXT:  sched.task bwd layer(1) mb(0)
// H5-NEXT:  sched.task bwd layer(0) mb(0)
// H5-NEXT:  sched.task fwd layer(0) mb(1)
// H5-NEXT:  sched.task fwd layer(1) mb(1)
// H5-NEXT:  sched.task bwd layer(1) mb(1)
// H5-NEXT:  sched.accumulate mean
// H5-NEXT:  sched.accumulate mean
// H5-NEXT:  sched.task opt layer(1)
// H5-NEXT:  train.adamw_defer @ln.scale [0, 4)
// H5-NEXT:  train.adamw @ln.bias
// H5-NEXT:  sched.task bwd layer(0) mb(1)
// H5-NEXT:  sched.accumulate mean
// H5-NEXT:  sched.task opt layer(0)
// H5-NEXT:  train.adamw_defer @wte [0, 20)
// H5-NEXT:  train.adamw @wte [20, 40)
// H5-NEXT:  sched.accumulate mean

// F = 1: every update is deferred whole; the opt tasks only keep it.
// H1-LABEL: func.func @three_layers
// H1-NEXT:  sched.task opt deferred layer(0)
// H1-NEXT:  train.adamw_apply_pending @embed.weight [0, 40)
// H1-NEXT:  sched.task fwd layer(0) mb(0)
// H1-NEXT:  sched.task opt deferred layer(1)
// H1-NEXT:  train.adamw_apply_pending @blocks.0.fc.weight [0, 16)
// H1-NEXT:  train.adamw_apply_pending @blocks.0.fc.bias [0, 4)
// H1-NEXT:  sched.task fwd layer(1) mb(0)
// H1-NEXT:  sched.task opt deferred layer(2)
// H1-NEXT:  train.adamw_apply_pending @head.weight [0, 40)
// H1-NEXT:  sched.task fwd layer(2) mb(0)
// H1-NEXT:  sched.task bwd layer(2) mb(0)
// H1-NEXT:  sched.task bwd layer(1) mb(0)
// H1-NEXT:  sched.task bwd layer(0) mb(0)
// H1-NEXT:  sched.task fwd layer(0) mb(1)
// H1-NEXT:  sched.task fwd layer(1) mb(1)
// H1-NEXT:  sched.task fwd layer(2) mb(1)
// H1-NEXT:  sched.task bwd layer(2) mb(1)
// H1-NEXT:  sched.accumulate mean
// H1-NEXT:  sched.task opt layer(2)
// H1-NEXT:  train.adamw_defer @head.weight [0, 40)
// H1-NEXT:  sched.task bwd layer(1) mb(1)
// H1-NEXT:  sched.accumulate mean
// H1-NEXT:  sched.accumulate mean
// H1-NEXT:  sched.task opt layer(1)
// H1-NEXT:  train.adamw_defer @blocks.0.fc.weight [0, 16)
// H1-NEXT:  train.adamw_defer @blocks.0.fc.bias [0, 4)
// H1-NEXT:  sched.task bwd layer(0) mb(1)
// H1-NEXT:  sched.accumulate mean
// H1-NEXT:  sched.task opt layer(0)
// H1-NEXT:  train.adamw_defer @embed.weight [0, 40)
// H1-NEXT:  sched.accumulate mean
// H1-LABEL: func.func @tied
// H1-NEXT:  sched.task opt deferred layer(0)
// H1-NEXT:  train.adamw_apply_pending @wte [0, 40)
// H1-NEXT:  sched.task fwd layer(0) mb(0)
// H1-NEXT:  sched.task opt deferred layer(1)
// H1-NEXT:  train.adamw_apply_pending @ln.scale [0, 4)
// H1-NEXT:  train.adamw_apply_pending @ln.bias [0, 4)
// H1-NEXT:  sched.task fwd layer(1) mb(0)
// H1-NEXT:  sched.task bwd layer(1) mb(0)
// H1-NEXT:  sched.task bwd layer(0) mb(0)
// H1-NEXT:  sched.task fwd layer(0) mb(1)
// H1-NEXT:  sched.task fwd layer(1) mb(1)
// H1-NEXT:  sched.task bwd layer(1) mb(1)
// H1-NEXT:  sched.accumulate mean
// H1-NEXT:  sched.accumulate mean
// H1-NEXT:  sched.task opt layer(1)
// H1-NEXT:  train.adamw_defer @ln.scale [0, 4)
// H1-NEXT:  train.adamw_defer @ln.bias [0, 4)
// H1-NEXT:  sched.task bwd layer(0) mb(1)
// H1-NEXT:  sched.accumulate mean
// H1-NEXT:  sched.task opt layer(0)
// H1-NEXT:  train.adamw_defer @wte [0, 40)
// H1-NEXT:  sched.accumulate mean

// Snake: a layer's last backward ends its run of micro-batches.
// S0-LABEL: func.func @three_layers
// S0-NEXT:  sched.task fwd layer(0) mb(0)
// S0-NEXT:  sched.task fwd layer(0) mb(1)
// S0-NEXT:  sched.task fwd layer(1) mb(1)
// S0-NEXT:  sched.task fwd layer(1) mb(0)
// S0-NEXT:  sched.task fwd layer(2) mb(0)
// S0-NEXT:  sched.task fwd layer(2) mb(1)
// S0-NEXT:  sched.task bwd layer(2) mb(1)
// S0-NEXT:  sched.task bwd layer(2) mb(0)
// S0-NEXT:  sched.accumulate mean
// S0-NEXT:  sched.task opt layer(2)
// S0-NEXT:  train.adamw @head.weight
// S0-NEXT:  sched.task bwd layer(1) mb(0)
// S0-NEXT:  sched.task bwd layer(1) mb(1)
// S0-NEXT:  sched.accumulate mean
// S0-NEXT:  sched.accumulate mean
// S0-NEXT:  sched.task opt layer(1)
// S0-NEXT:  train.adamw @blocks.0.fc.weight
// S0-NEXT:  train.adamw @blocks.0.fc.bias
// S0-NEXT:  sched.task bwd layer(0) mb(1)
// S0-NEXT:  sched.task bwd layer(0) mb(0)
// S0-NEXT:  sched.accumulate mean
// S0-NEXT:  sched.task opt layer(0)
// S0-NEXT:  train.adamw @embed.weight
// S0-NEXT:  sched.accumulate mean
// S0-LABEL: func.func @tied
// S0-NEXT:  sched.task fwd layer(0) mb(0)
// S0-NEXT:  sched.task fwd layer(0) mb(1)
// S0-NEXT:  sched.task fwd layer(1) mb(1)
// S0-NEXT:  sched.task fwd layer(1) mb(0)
// S0-NEXT:  sched.task bwd layer(1) mb(0)
// S0-NEXT:  sched.task bwd layer(1) mb(1)
// S0-NEXT:  sched.accumulate mean
// S0-NEXT:  sched.accumulate mean
// S0-NEXT:  sched.task opt layer(1)
// S0-NEXT:  train.adamw @ln.scale
// S0-NEXT:  train.adamw @ln.bias
// S0-NEXT:  sched.task bwd layer(0) mb(1)
// S0-NEXT:  sched.task bwd layer(0) mb(0)
// S0-NEXT:  sched.accumulate mean
// S0-NEXT:  sched.task opt layer(0)
// S0-NEXT:  train.adamw @wte
// S0-NEXT:  sched.accumulate mean

// S5-LABEL: func.func @three_layers
// S5-NEXT:  sched.task opt deferred layer(0)
// S5-NEXT:  train.adamw_apply_pending @embed.weight [0, 20)
// S5-NEXT:  sched.task fwd layer(0) mb(0)
// S5-NEXT:  sched.task fwd layer(0) mb(1)
// S5-NEXT:  sched.task opt deferred layer(1)
// S5-NEXT:  train.adamw_apply_pending @blocks.0.fc.weight [0, 10)
// S5-NEXT:  sched.task fwd layer(1) mb(1)
// S5-NEXT:  sched.task fwd layer(1) mb(0)
// S5-NEXT:  sched.task opt deferred layer(2)
// S5-NEXT:  train.adamw_apply_pending @head.weight [0, 20)
// S5-NEXT:  sched.task fwd layer(2) mb(0)
// S5-NEXT:  sched.task fwd layer(2) mb(1)
// S5-NEXT:  sched.task bwd layer(2) mb(1)
// S5-NEXT:  sched.task bwd layer(2) mb(0)
// S5-NEXT:  sched.accumulate mean
// S5-NEXT:  sched.task opt layer(2)
// S5-NEXT:  train.adamw_defer @head.weight [0, 20)
// S5-NEXT:  train.adamw @head.weight [20, 40)
// S5-NEXT:  sched.task bwd layer(1) mb(0)
// S5-NEXT:  sched.task bwd layer(1) mb(1)
// S5-NEXT:  sched.accumulate mean
// S5-NEXT:  sched.accumulate mean
// S5-NEXT:  sched.task opt layer(1)
// S5-NEXT:  train.adamw_defer @blocks.0.fc.weight [0, 10)
// S5-NEXT:  train.adamw @blocks.0.fc.weight [10, 16)
// S5-NEXT:  train.adamw @blocks.0.fc.bias
// S5-NEXT:  sched.task bwd layer(0) mb(1)
// S5-NEXT:  sched.task bwd layer(0) mb(0)
// S5-NEXT:  sched.accumulate mean
// S5-NEXT:  sched.task opt layer(0)
// S5-NEXT:  train.adamw_defer @embed.weight [0, 20)
// S5-NEXT:  train.adamw @embed.weight [20, 40)
// S5-NEXT:  sched.accumulate mean
// S5-LABEL: func.func @tied
// S5-NEXT:  sched.task opt deferred layer(0)
// S5-NEXT:  train.adamw_apply_pending @wte [0, 20)
// S5-NEXT:  sched.task fwd layer(0) mb(0)
// S5-NEXT:  sched.task fwd layer(0) mb(1)
// S5-NEXT:  sched.task opt deferred layer(1)
// S5-NEXT:  train.adamw_apply_pending @ln.scale [0, 4)
// S5-NEXT:  sched.task fwd layer(1) mb(1)
// S5-NEXT:  sched.task fwd layer(1) mb(0)
// S5-NEXT:  sched.task bwd layer(1) mb(0)
// S5-NEXT:  sched.task bwd layer(1) mb(1)
// S5-NEXT:  sched.accumulate mean
// S5-NEXT:  sched.accumulate mean
// S5-NEXT:  sched.task opt layer(1)
// S5-NEXT:  train.adamw_defer @ln.scale [0, 4)
// S5-NEXT:  train.adamw @ln.bias
// S5-NEXT:  sched.task bwd layer(0) mb(1)
// S5-NEXT:  sched.task bwd layer(0) mb(0)
// S5-NEXT:  sched.accumulate mean
// S5-NEXT:  sched.task opt layer(0)
// S5-NEXT:  train.adamw_defer @wte [0, 20)
// S5-NEXT:  train.adamw @wte [20, 40)
// S5-NEXT:  sched.accumulate mean

// S1-LABEL: func.func @three_layers
// S1-NEXT:  sched.task opt deferred layer(0)
// S1-NEXT:  train.adamw_apply_pending @embed.weight [0, 40)
// S1-NEXT:  sched.task fwd layer(0) mb(0)
// S1-NEXT:  sched.task fwd layer(0) mb(1)
// S1-NEXT:  sched.task opt deferred layer(1)
// S1-NEXT:  train.adamw_apply_pending @blocks.0.fc.weight [0, 16)
// S1-NEXT:  train.adamw_apply_pending @blocks.0.fc.bias [0, 4)
// S1-NEXT:  sched.task fwd layer(1) mb(1)
// S1-NEXT:  sched.task fwd layer(1) mb(0)
// S1-NEXT:  sched.task opt deferred layer(2)
// S1-NEXT:  train.adamw_apply_pending @head.weight [0, 40)
// S1-NEXT:  sched.task fwd layer(2) mb(0)
// S1-NEXT:  sched.task fwd layer(2) mb(1)
// S1-NEXT:  sched.task bwd layer(2) mb(1)
// S1-NEXT:  sched.task bwd layer(2) mb(0)
// S1-NEXT:  sched.accumulate mean
// S1-NEXT:  sched.task opt layer(2)
// S1-NEXT:  train.adamw_defer @head.weight [0, 40)
// S1-NEXT:  sched.task bwd layer(1) mb(0)
// S1-NEXT:  sched.task bwd layer(1) mb(1)
// S1-NEXT:  sched.accumulate mean
// S1-NEXT:  sched.accumulate mean
// S1-NEXT:  sched.task opt layer(1)
// S1-NEXT:  train.adamw_defer @blocks.0.fc.weight [0, 16)
// S1-NEXT:  train.adamw_defer @blocks.0.fc.bias [0, 4)
// S1-NEXT:  sched.task bwd layer(0) mb(1)
// S1-NEXT:  sched.task bwd layer(0) mb(0)
// S1-NEXT:  sched.accumulate mean
// S1-NEXT:  sched.task opt layer(0)
// S1-NEXT:  train.adamw_defer @embed.weight [0, 40)
// S1-NEXT:  sched.accumulate mean
// S1-LABEL: func.func @tied
// S1-NEXT:  sched.task opt deferred layer(0)
// S1-NEXT:  train.adamw_apply_pending @wte [0, 40)
// S1-NEXT:  sched.task fwd layer(0) mb(0)
// S1-NEXT:  sched.task fwd layer(0) mb(1)
// S1-NEXT:  sched.task opt deferred layer(1)
// S1-NEXT:  train.adamw_apply_pending @ln.scale [0, 4)
// S1-NEXT:  train.adamw_apply_pending @ln.bias [0, 4)
// S1-NEXT:  sched.task fwd layer(1) mb(1)
// S1-NEXT:  sched.task fwd layer(1) mb(0)
// S1-NEXT:  sched.task bwd layer(1) mb(0)
// S1-NEXT:  sched.task bwd layer(1) mb(1)
// S1-NEXT:  sched.accumulate mean
// S1-NEXT:  sched.accumulate mean
// S1-NEXT:  sched.task opt layer(1)
// S1-NEXT:  train.adamw_defer @ln.scale [0, 4)
// S1-NEXT:  train.adamw_defer @ln.bias [0, 4)
// S1-NEXT:  sched.task bwd layer(0) mb(1)
// S1-NEXT:  sched.task bwd layer(0) mb(0)
// S1-NEXT:  sched.accumulate mean
// S1-NEXT:  sched.task opt layer(0)
// S1-NEXT:  train.adamw_defer @wte [0, 40)
// S1-NEXT:  sched.accumulate mean

module {
  train.param @"embed.weight" : tensor<10x4xf32> at 0
  train.param @"blocks.0.fc.weight" : tensor<4x4xf32> at 160
  train.param @"blocks.0.fc.bias" : tensor<4xf32> at 224
  train.param @"head.weight" : tensor<4x10xf32> at 240
  func.func @three_layers(%ids: tensor<6xi64>, %labels: tensor<6xi64>) -> tensor<f32> {
    %e = train.param_value @"embed.weight" : tensor<10x4xf32>
    %w0 = train.param_value @"blocks.0.fc.weight" : tensor<4x4xf32>
    %b0 = train.param_value @"blocks.0.fc.bias" : tensor<4xf32>
    %wh = train.param_value @"head.weight" : tensor<4x10xf32>
    %x0 = train.gather %e, %ids : tensor<10x4xf32>, tensor<6xi64> -> tensor<6x4xf32>
    %y0 = train.linear %x0, %w0, %b0 : tensor<6x4xf32>, tensor<4x4xf32>, tensor<4xf32> -> tensor<6x4xf32>
    %r0 = train.relu %y0 : tensor<6x4xf32>
    %x1 = train.add %x0, %r0 : tensor<6x4xf32>, tensor<6x4xf32> -> tensor<6x4xf32>
    %logits = train.matmul %x1, %wh : tensor<6x4xf32>, tensor<4x10xf32> -> tensor<6x10xf32>
    %l = train.softmax_cross_entropy_loss %logits, %labels : tensor<6x10xf32>, tensor<6xi64>
    return %l : tensor<f32>
  }
}

// -----

module {
  train.param @wte : tensor<10x4xf32> at 0
  train.param @"ln.scale" : tensor<4xf32> at 160
  train.param @"ln.bias" : tensor<4xf32> at 176
  func.func @tied(%ids: tensor<6xi64>, %labels: tensor<6xi64>) -> tensor<f32> {
    %e = train.param_value @wte : tensor<10x4xf32>
    %s = train.param_value @"ln.scale" : tensor<4xf32>
    %b = train.param_value @"ln.bias" : tensor<4xf32>
    %x = train.gather %e, %ids : tensor<10x4xf32>, tensor<6xi64> -> tensor<6x4xf32>
    %t = train.tanh %x : tensor<6x4xf32>
    %n = train.layer_norm %t, %s, %b : tensor<6x4xf32>, tensor<4xf32>, tensor<4xf32>
    %et = train.transpose %e, [1, 0] : tensor<10x4xf32> -> tensor<4x10xf32>
    %logits = train.matmul %n, %et : tensor<6x4xf32>, tensor<4x10xf32> -> tensor<6x10xf32>
    %l = train.softmax_cross_entropy_loss %logits, %labels : tensor<6x10xf32>, tensor<6xi64>
    return %l : tensor<f32>
  }
}
