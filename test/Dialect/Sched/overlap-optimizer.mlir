// sched-overlap-optimizer on Inputs/overlap-optimizer-{horizontal,snake}.mlir:
// order.mlir's three layers (Inputs/models/three-layers.mlir) and
// partition-layers.mlir's tied embedding (tied-layer-norm.mlir), two
// micro-batches, ordered (Inputs/regenerate.sh writes them); F = 0, 0.5, 1.
// The --implicit-check-not options make each of H0..S1 name every task,
// accumulate and update in order, so a plain CHECK line is the next of
// them (-NEXT where they are adjacent lines).
// RUN: spillway-opt %S/Inputs/overlap-optimizer-horizontal.mlir -split-input-file --sched-overlap-optimizer=fraction=0 | FileCheck %s --check-prefix=H0 --implicit-check-not=sched.task --implicit-check-not='sched.accumulate mean' --implicit-check-not=train.adamw
// RUN: spillway-opt %S/Inputs/overlap-optimizer-horizontal.mlir -split-input-file --sched-overlap-optimizer="fraction=0.5 granule=1" | FileCheck %s --check-prefix=H5 --implicit-check-not=sched.task --implicit-check-not='sched.accumulate mean' --implicit-check-not=train.adamw
// RUN: spillway-opt %S/Inputs/overlap-optimizer-horizontal.mlir -split-input-file --sched-overlap-optimizer="fraction=1 granule=1" | FileCheck %s --check-prefix=H1 --implicit-check-not=sched.task --implicit-check-not='sched.accumulate mean' --implicit-check-not=train.adamw
// RUN: spillway-opt %S/Inputs/overlap-optimizer-snake.mlir -split-input-file --sched-overlap-optimizer=fraction=0 | FileCheck %s --check-prefix=S0 --implicit-check-not=sched.task --implicit-check-not='sched.accumulate mean' --implicit-check-not=train.adamw
// RUN: spillway-opt %S/Inputs/overlap-optimizer-snake.mlir -split-input-file --sched-overlap-optimizer="fraction=0.5 granule=1" | FileCheck %s --check-prefix=S5 --implicit-check-not=sched.task --implicit-check-not='sched.accumulate mean' --implicit-check-not=train.adamw
// RUN: spillway-opt %S/Inputs/overlap-optimizer-snake.mlir -split-input-file --sched-overlap-optimizer="fraction=1 granule=1" | FileCheck %s --check-prefix=S1 --implicit-check-not=sched.task --implicit-check-not='sched.accumulate mean' --implicit-check-not=train.adamw
// The deferred elements are whole granules (default 64 elements, the
// offload plan's GPU alignment): with them, F = 0.5 of 40 elements rounds to
// 0 (nothing deferred) and F = 0.9 (36) up to 64, i.e. all 40. Granule 1
// above shows the exact split.
// RUN: spillway-opt %S/Inputs/overlap-optimizer-snake.mlir -split-input-file --sched-overlap-optimizer=fraction=0.5 | FileCheck %s --check-prefix=G5
// G5-NOT: deferred
// G5-NOT: adamw_defer
// RUN: spillway-opt %S/Inputs/overlap-optimizer-snake.mlir -split-input-file --sched-overlap-optimizer=fraction=0.9 | FileCheck %s --check-prefix=G9
// G9-DAG: train.adamw_apply_pending @embed.weight [0, 40)
// G9-DAG: train.adamw_defer @head.weight [0, 40)
// G9-DAG: train.adamw @blocks.0.fc.weight,
// G9-DAG: train.adamw_apply_pending @wte [0, 40)
// G9-DAG: train.adamw @ln.scale,
// Under bf16-mixed (train.precision) the granule doubles, 256 bytes of the
// bf16 working copies an offload plan's params blocks hold: F = 0.25 of
// w1's 256 elements defers 64 in fp32 but 128 (one granule) here.
// RUN: spillway-opt %S/Inputs/models/two-layers-16.mlir --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-order=order=snake --sched-overlap-optimizer=fraction=0.25 | FileCheck %s --check-prefix=G25
// G25: train.adamw_defer @w1 [0, 64)
// RUN: sed 's/^module {/module attributes {train.precision = "bf16-mixed"} {/' %S/Inputs/models/two-layers-16.mlir | spillway-opt --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-order=order=snake --sched-overlap-optimizer=fraction=0.25 | FileCheck %s --check-prefix=G25MIXED
// G25MIXED: train.adamw_defer @w1 [0, 128)
// bf16 optimizer state (train-attach-optimizer's state-dtype=bf16) doubles
// it the same way, 256 bytes of the bf16 moments an optimizer block holds;
// with bf16-mixed too it doubles once (G25BOTH): 128 elements align every
// block, none holding less than 2 bytes per element (quadrupled, 256, F =
// 0.25 would defer nothing).
// RUN: spillway-opt %S/Inputs/models/two-layers-16.mlir --train-autodiff --train-attach-optimizer=state-dtype=bf16 --train-partition-layers --convert-train-to-sched --sched-order=order=snake --sched-overlap-optimizer=fraction=0.25 | FileCheck %s --check-prefix=G25STATE
// G25STATE: train.adamw_defer @w1 [0, 128)
// RUN: sed 's/^module {/module attributes {train.precision = "bf16-mixed"} {/' %S/Inputs/models/two-layers-16.mlir | spillway-opt --train-autodiff --train-attach-optimizer=state-dtype=bf16 --train-partition-layers --convert-train-to-sched --sched-order=order=snake --sched-overlap-optimizer=fraction=0.25 | FileCheck %s --check-prefix=G25BOTH
// G25BOTH: train.adamw_defer @w1 [0, 128)
// The full text of a deferred task and a split update.
// RUN: spillway-opt %S/Inputs/overlap-optimizer-snake.mlir -split-input-file --sched-overlap-optimizer="fraction=0.5 granule=1" | FileCheck %s --check-prefix=FULL
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
// H0:       sched.task fwd layer(0) mb(0)
// H0:       sched.task fwd layer(1) mb(0)
// H0:       sched.task fwd layer(2) mb(0)
// H0:       sched.task bwd layer(2) mb(0)
// H0:       sched.task bwd layer(1) mb(0)
// H0:       sched.task bwd layer(0) mb(0)
// H0:       sched.task fwd layer(0) mb(1)
// H0:       sched.task fwd layer(1) mb(1)
// H0:       sched.task fwd layer(2) mb(1)
// H0:       sched.task bwd layer(2) mb(1)
// H0:       sched.accumulate mean
// H0-NEXT:  sched.task opt layer(2)
// H0:       train.adamw @head.weight
// H0:       sched.task bwd layer(1) mb(1)
// H0:       sched.accumulate mean
// H0-NEXT:  sched.accumulate mean
// H0-NEXT:  sched.task opt layer(1)
// H0:       train.adamw @blocks.0.fc.weight
// H0-NEXT:  train.adamw @blocks.0.fc.bias
// H0:       sched.task bwd layer(0) mb(1)
// H0:       sched.accumulate mean
// H0-NEXT:  sched.task opt layer(0)
// H0:       train.adamw @embed.weight
// H0:       sched.accumulate mean
// H0-LABEL: func.func @tied
// H0:       sched.task fwd layer(0) mb(0)
// H0:       sched.task fwd layer(1) mb(0)
// H0:       sched.task bwd layer(1) mb(0)
// H0:       sched.task bwd layer(0) mb(0)
// H0:       sched.task fwd layer(0) mb(1)
// H0:       sched.task fwd layer(1) mb(1)
// H0:       sched.task bwd layer(1) mb(1)
// H0:       sched.accumulate mean
// H0-NEXT:  sched.accumulate mean
// H0-NEXT:  sched.task opt layer(1)
// H0:       train.adamw @ln.scale
// H0-NEXT:  train.adamw @ln.bias
// H0:       sched.task bwd layer(0) mb(1)
// H0:       sched.accumulate mean
// H0-NEXT:  sched.task opt layer(0)
// H0:       train.adamw @wte
// H0:       sched.accumulate mean

// F = 0.5: the first half of each layer's elements, its parameters
// concatenated in train.layers order (blocks.0: 16 weight + 4 bias
// elements, so weight [0, 10)), is deferred: the opt task keeps it pending
// and updates the rest; a deferred task applies it just before the layer's
// first forward. The tied @wte (owned by layer 0, read by layer 1's forward
// and backward) is updated only after layer 0's last backward, when its
// gradient from both layers is complete; ln: 8 elements, scale [0, 4).
// H5-LABEL: func.func @three_layers
// H5:       sched.task opt deferred layer(0)
// H5-NEXT:  train.adamw_apply_pending @embed.weight [0, 20)
// H5:       sched.task fwd layer(0) mb(0)
// H5:       sched.task opt deferred layer(1)
// H5-NEXT:  train.adamw_apply_pending @blocks.0.fc.weight [0, 10)
// H5:       sched.task fwd layer(1) mb(0)
// H5:       sched.task opt deferred layer(2)
// H5-NEXT:  train.adamw_apply_pending @head.weight [0, 20)
// H5:       sched.task fwd layer(2) mb(0)
// H5:       sched.task bwd layer(2) mb(0)
// H5:       sched.task bwd layer(1) mb(0)
// H5:       sched.task bwd layer(0) mb(0)
// H5:       sched.task fwd layer(0) mb(1)
// H5:       sched.task fwd layer(1) mb(1)
// H5:       sched.task fwd layer(2) mb(1)
// H5:       sched.task bwd layer(2) mb(1)
// H5:       sched.accumulate mean
// H5-NEXT:  sched.task opt layer(2)
// H5:       train.adamw_defer @head.weight [0, 20)
// H5-NEXT:  train.adamw @head.weight [20, 40)
// H5:       sched.task bwd layer(1) mb(1)
// H5:       sched.accumulate mean
// H5-NEXT:  sched.accumulate mean
// H5-NEXT:  sched.task opt layer(1)
// H5:       train.adamw_defer @blocks.0.fc.weight [0, 10)
// H5-NEXT:  train.adamw @blocks.0.fc.weight [10, 16)
// H5-NEXT:  train.adamw @blocks.0.fc.bias
// H5:       sched.task bwd layer(0) mb(1)
// H5:       sched.accumulate mean
// H5-NEXT:  sched.task opt layer(0)
// H5:       train.adamw_defer @embed.weight [0, 20)
// H5-NEXT:  train.adamw @embed.weight [20, 40)
// H5:       sched.accumulate mean
// H5-LABEL: func.func @tied
// H5:       sched.task opt deferred layer(0)
// H5-NEXT:  train.adamw_apply_pending @wte [0, 20)
// H5:       sched.task fwd layer(0) mb(0)
// H5:       sched.task opt deferred layer(1)
// H5-NEXT:  train.adamw_apply_pending @ln.scale [0, 4)
// H5:       sched.task fwd layer(1) mb(0)
// H5:       sched.task bwd layer(1) mb(0)
// H5:       sched.task bwd layer(0) mb(0)
// H5:       sched.task fwd layer(0) mb(1)
// H5:       sched.task fwd layer(1) mb(1)
// H5:       sched.task bwd layer(1) mb(1)
// H5:       sched.accumulate mean
// H5-NEXT:  sched.accumulate mean
// H5-NEXT:  sched.task opt layer(1)
// H5:       train.adamw_defer @ln.scale [0, 4)
// H5-NEXT:  train.adamw @ln.bias
// H5:       sched.task bwd layer(0) mb(1)
// H5:       sched.accumulate mean
// H5-NEXT:  sched.task opt layer(0)
// H5:       train.adamw_defer @wte [0, 20)
// H5-NEXT:  train.adamw @wte [20, 40)
// H5:       sched.accumulate mean

// F = 1: every update is deferred whole; the opt tasks only keep it.
// H1-LABEL: func.func @three_layers
// H1:       sched.task opt deferred layer(0)
// H1-NEXT:  train.adamw_apply_pending @embed.weight [0, 40)
// H1:       sched.task fwd layer(0) mb(0)
// H1:       sched.task opt deferred layer(1)
// H1-NEXT:  train.adamw_apply_pending @blocks.0.fc.weight [0, 16)
// H1-NEXT:  train.adamw_apply_pending @blocks.0.fc.bias [0, 4)
// H1:       sched.task fwd layer(1) mb(0)
// H1:       sched.task opt deferred layer(2)
// H1-NEXT:  train.adamw_apply_pending @head.weight [0, 40)
// H1:       sched.task fwd layer(2) mb(0)
// H1:       sched.task bwd layer(2) mb(0)
// H1:       sched.task bwd layer(1) mb(0)
// H1:       sched.task bwd layer(0) mb(0)
// H1:       sched.task fwd layer(0) mb(1)
// H1:       sched.task fwd layer(1) mb(1)
// H1:       sched.task fwd layer(2) mb(1)
// H1:       sched.task bwd layer(2) mb(1)
// H1:       sched.accumulate mean
// H1-NEXT:  sched.task opt layer(2)
// H1:       train.adamw_defer @head.weight [0, 40)
// H1:       sched.task bwd layer(1) mb(1)
// H1:       sched.accumulate mean
// H1-NEXT:  sched.accumulate mean
// H1-NEXT:  sched.task opt layer(1)
// H1:       train.adamw_defer @blocks.0.fc.weight [0, 16)
// H1-NEXT:  train.adamw_defer @blocks.0.fc.bias [0, 4)
// H1:       sched.task bwd layer(0) mb(1)
// H1:       sched.accumulate mean
// H1-NEXT:  sched.task opt layer(0)
// H1:       train.adamw_defer @embed.weight [0, 40)
// H1:       sched.accumulate mean
// H1-LABEL: func.func @tied
// H1:       sched.task opt deferred layer(0)
// H1-NEXT:  train.adamw_apply_pending @wte [0, 40)
// H1:       sched.task fwd layer(0) mb(0)
// H1:       sched.task opt deferred layer(1)
// H1-NEXT:  train.adamw_apply_pending @ln.scale [0, 4)
// H1-NEXT:  train.adamw_apply_pending @ln.bias [0, 4)
// H1:       sched.task fwd layer(1) mb(0)
// H1:       sched.task bwd layer(1) mb(0)
// H1:       sched.task bwd layer(0) mb(0)
// H1:       sched.task fwd layer(0) mb(1)
// H1:       sched.task fwd layer(1) mb(1)
// H1:       sched.task bwd layer(1) mb(1)
// H1:       sched.accumulate mean
// H1-NEXT:  sched.accumulate mean
// H1-NEXT:  sched.task opt layer(1)
// H1:       train.adamw_defer @ln.scale [0, 4)
// H1-NEXT:  train.adamw_defer @ln.bias [0, 4)
// H1:       sched.task bwd layer(0) mb(1)
// H1:       sched.accumulate mean
// H1-NEXT:  sched.task opt layer(0)
// H1:       train.adamw_defer @wte [0, 40)
// H1:       sched.accumulate mean

// Snake: a layer's last backward ends its run of micro-batches.
// S0-LABEL: func.func @three_layers
// S0:       sched.task fwd layer(0) mb(0)
// S0:       sched.task fwd layer(0) mb(1)
// S0:       sched.task fwd layer(1) mb(1)
// S0:       sched.task fwd layer(1) mb(0)
// S0:       sched.task fwd layer(2) mb(0)
// S0:       sched.task fwd layer(2) mb(1)
// S0:       sched.task bwd layer(2) mb(1)
// S0:       sched.task bwd layer(2) mb(0)
// S0:       sched.accumulate mean
// S0-NEXT:  sched.task opt layer(2)
// S0:       train.adamw @head.weight
// S0:       sched.task bwd layer(1) mb(0)
// S0:       sched.task bwd layer(1) mb(1)
// S0:       sched.accumulate mean
// S0-NEXT:  sched.accumulate mean
// S0-NEXT:  sched.task opt layer(1)
// S0:       train.adamw @blocks.0.fc.weight
// S0-NEXT:  train.adamw @blocks.0.fc.bias
// S0:       sched.task bwd layer(0) mb(1)
// S0:       sched.task bwd layer(0) mb(0)
// S0:       sched.accumulate mean
// S0-NEXT:  sched.task opt layer(0)
// S0:       train.adamw @embed.weight
// S0:       sched.accumulate mean
// S0-LABEL: func.func @tied
// S0:       sched.task fwd layer(0) mb(0)
// S0:       sched.task fwd layer(0) mb(1)
// S0:       sched.task fwd layer(1) mb(1)
// S0:       sched.task fwd layer(1) mb(0)
// S0:       sched.task bwd layer(1) mb(0)
// S0:       sched.task bwd layer(1) mb(1)
// S0:       sched.accumulate mean
// S0-NEXT:  sched.accumulate mean
// S0-NEXT:  sched.task opt layer(1)
// S0:       train.adamw @ln.scale
// S0-NEXT:  train.adamw @ln.bias
// S0:       sched.task bwd layer(0) mb(1)
// S0:       sched.task bwd layer(0) mb(0)
// S0:       sched.accumulate mean
// S0-NEXT:  sched.task opt layer(0)
// S0:       train.adamw @wte
// S0:       sched.accumulate mean

// S5-LABEL: func.func @three_layers
// S5:       sched.task opt deferred layer(0)
// S5-NEXT:  train.adamw_apply_pending @embed.weight [0, 20)
// S5:       sched.task fwd layer(0) mb(0)
// S5:       sched.task fwd layer(0) mb(1)
// S5:       sched.task opt deferred layer(1)
// S5-NEXT:  train.adamw_apply_pending @blocks.0.fc.weight [0, 10)
// S5:       sched.task fwd layer(1) mb(1)
// S5:       sched.task fwd layer(1) mb(0)
// S5:       sched.task opt deferred layer(2)
// S5-NEXT:  train.adamw_apply_pending @head.weight [0, 20)
// S5:       sched.task fwd layer(2) mb(0)
// S5:       sched.task fwd layer(2) mb(1)
// S5:       sched.task bwd layer(2) mb(1)
// S5:       sched.task bwd layer(2) mb(0)
// S5:       sched.accumulate mean
// S5-NEXT:  sched.task opt layer(2)
// S5:       train.adamw_defer @head.weight [0, 20)
// S5-NEXT:  train.adamw @head.weight [20, 40)
// S5:       sched.task bwd layer(1) mb(0)
// S5:       sched.task bwd layer(1) mb(1)
// S5:       sched.accumulate mean
// S5-NEXT:  sched.accumulate mean
// S5-NEXT:  sched.task opt layer(1)
// S5:       train.adamw_defer @blocks.0.fc.weight [0, 10)
// S5-NEXT:  train.adamw @blocks.0.fc.weight [10, 16)
// S5-NEXT:  train.adamw @blocks.0.fc.bias
// S5:       sched.task bwd layer(0) mb(1)
// S5:       sched.task bwd layer(0) mb(0)
// S5:       sched.accumulate mean
// S5-NEXT:  sched.task opt layer(0)
// S5:       train.adamw_defer @embed.weight [0, 20)
// S5-NEXT:  train.adamw @embed.weight [20, 40)
// S5:       sched.accumulate mean
// S5-LABEL: func.func @tied
// S5:       sched.task opt deferred layer(0)
// S5-NEXT:  train.adamw_apply_pending @wte [0, 20)
// S5:       sched.task fwd layer(0) mb(0)
// S5:       sched.task fwd layer(0) mb(1)
// S5:       sched.task opt deferred layer(1)
// S5-NEXT:  train.adamw_apply_pending @ln.scale [0, 4)
// S5:       sched.task fwd layer(1) mb(1)
// S5:       sched.task fwd layer(1) mb(0)
// S5:       sched.task bwd layer(1) mb(0)
// S5:       sched.task bwd layer(1) mb(1)
// S5:       sched.accumulate mean
// S5-NEXT:  sched.accumulate mean
// S5-NEXT:  sched.task opt layer(1)
// S5:       train.adamw_defer @ln.scale [0, 4)
// S5-NEXT:  train.adamw @ln.bias
// S5:       sched.task bwd layer(0) mb(1)
// S5:       sched.task bwd layer(0) mb(0)
// S5:       sched.accumulate mean
// S5-NEXT:  sched.task opt layer(0)
// S5:       train.adamw_defer @wte [0, 20)
// S5-NEXT:  train.adamw @wte [20, 40)
// S5:       sched.accumulate mean

// S1-LABEL: func.func @three_layers
// S1:       sched.task opt deferred layer(0)
// S1-NEXT:  train.adamw_apply_pending @embed.weight [0, 40)
// S1:       sched.task fwd layer(0) mb(0)
// S1:       sched.task fwd layer(0) mb(1)
// S1:       sched.task opt deferred layer(1)
// S1-NEXT:  train.adamw_apply_pending @blocks.0.fc.weight [0, 16)
// S1-NEXT:  train.adamw_apply_pending @blocks.0.fc.bias [0, 4)
// S1:       sched.task fwd layer(1) mb(1)
// S1:       sched.task fwd layer(1) mb(0)
// S1:       sched.task opt deferred layer(2)
// S1-NEXT:  train.adamw_apply_pending @head.weight [0, 40)
// S1:       sched.task fwd layer(2) mb(0)
// S1:       sched.task fwd layer(2) mb(1)
// S1:       sched.task bwd layer(2) mb(1)
// S1:       sched.task bwd layer(2) mb(0)
// S1:       sched.accumulate mean
// S1-NEXT:  sched.task opt layer(2)
// S1:       train.adamw_defer @head.weight [0, 40)
// S1:       sched.task bwd layer(1) mb(0)
// S1:       sched.task bwd layer(1) mb(1)
// S1:       sched.accumulate mean
// S1-NEXT:  sched.accumulate mean
// S1-NEXT:  sched.task opt layer(1)
// S1:       train.adamw_defer @blocks.0.fc.weight [0, 16)
// S1-NEXT:  train.adamw_defer @blocks.0.fc.bias [0, 4)
// S1:       sched.task bwd layer(0) mb(1)
// S1:       sched.task bwd layer(0) mb(0)
// S1:       sched.accumulate mean
// S1-NEXT:  sched.task opt layer(0)
// S1:       train.adamw_defer @embed.weight [0, 40)
// S1:       sched.accumulate mean
// S1-LABEL: func.func @tied
// S1:       sched.task opt deferred layer(0)
// S1-NEXT:  train.adamw_apply_pending @wte [0, 40)
// S1:       sched.task fwd layer(0) mb(0)
// S1:       sched.task fwd layer(0) mb(1)
// S1:       sched.task opt deferred layer(1)
// S1-NEXT:  train.adamw_apply_pending @ln.scale [0, 4)
// S1-NEXT:  train.adamw_apply_pending @ln.bias [0, 4)
// S1:       sched.task fwd layer(1) mb(1)
// S1:       sched.task fwd layer(1) mb(0)
// S1:       sched.task bwd layer(1) mb(0)
// S1:       sched.task bwd layer(1) mb(1)
// S1:       sched.accumulate mean
// S1-NEXT:  sched.accumulate mean
// S1-NEXT:  sched.task opt layer(1)
// S1:       train.adamw_defer @ln.scale [0, 4)
// S1-NEXT:  train.adamw_defer @ln.bias [0, 4)
// S1:       sched.task bwd layer(0) mb(1)
// S1:       sched.task bwd layer(0) mb(0)
// S1:       sched.accumulate mean
// S1-NEXT:  sched.task opt layer(0)
// S1:       train.adamw_defer @wte [0, 40)
// S1:       sched.accumulate mean

