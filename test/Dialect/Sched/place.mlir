// sched-place: the placement becomes the iteration's attributes; what the
// executor cannot run is refused. The inputs are Inputs/models/two-layers.mlir
// in sched form, ordered (and recomputed for ACT); Inputs/regenerate.sh
// writes them.
// RUN: spillway-opt %S/Inputs/two-layers-ordered.mlir "--sched-place=placement=params=ssd,optimizer=host,gradients=host" | FileCheck %s --check-prefix=PLACED
// RUN: spillway-opt %S/Inputs/two-layers-ordered.mlir "--sched-place=placement=optimizer=gpu" | FileCheck %s --check-prefix=GPUOPT
// RUN: spillway-opt %S/Inputs/two-layers-recomputed.mlir "--sched-place=placement=activations=ssd" | FileCheck %s --check-prefix=ACT
// RUN: not spillway-opt %S/Inputs/two-layers-ordered.mlir "--sched-place=placement=activations=host" 2>&1 | FileCheck %s --check-prefix=NORECOMPUTE
// RUN: not spillway-opt %S/Inputs/two-layers-ordered.mlir "--sched-place=placement=master=host" 2>&1 | FileCheck %s --check-prefix=MASTER
// RUN: not spillway-opt %S/Inputs/two-layers-ordered.mlir "--sched-place=placement=weights=host" 2>&1 | FileCheck %s --check-prefix=CLASS
// RUN: not spillway-opt %S/Inputs/two-layers-ordered.mlir "--sched-place=placement=params=nvme" 2>&1 | FileCheck %s --check-prefix=TIER
// RUN: not spillway-opt %S/Inputs/two-layers-ordered.mlir "--sched-place=placement=params=ssd,params=host" 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not spillway-opt %S/Inputs/two-layers-ordered.mlir "--sched-place=placement=params" 2>&1 | FileCheck %s --check-prefix=SYNTAX
// RUN: not spillway-opt %S/Inputs/two-layers-sched.mlir --sched-place 2>&1 | FileCheck %s --check-prefix=UNORDERED
// RUN: not spillway-opt %S/Inputs/models/two-layers.mlir --sched-place 2>&1 | FileCheck %s --check-prefix=NOITER

// Classes not named stay on the GPU; the optimizer runs on the CPU unless
// its state is on the GPU.
// PLACED: sched.iteration
// PLACED-SAME: optimizer_on = "cpu"
// PLACED-SAME: placement = #sched.placement<params = ssd, optimizer = host, gradients = host, activations = gpu>
// GPUOPT: optimizer_on = "gpu"
// GPUOPT-SAME: placement = #sched.placement<params = gpu, optimizer = gpu, gradients = gpu, activations = gpu>
// Activations off the GPU need sched-recompute: without it the backward
// reads forward intermediates (here the logits) the plan would not move.
// ACT: placement = #sched.placement<params = gpu, optimizer = gpu, gradients = gpu, activations = ssd>
// NORECOMPUTE: error: 'sched.task' op sched-place: activations=host needs sched-recompute first: result #{{[0-9]+}} is a forward intermediate only the backward reads; run sched-recompute (spillwayc --recompute on, the default) or place activations=gpu
// MASTER: error: sched-place: 'master': there are no separate master weights to place; the f32 parameters are their own master weights (under --precision bf16-mixed too, where each layer rounds its bf16 working copy from them), so place them with params=TIER
// CLASS: error: sched-place: unknown tensor class 'weights' (classes: params, optimizer, gradients, activations)
// TIER: error: sched-place: unknown tier 'nvme' for params (tiers: gpu, host, ssd)
// TWICE: error: sched-place: class 'params' is placed twice
// SYNTAX: error: sched-place: 'params' is not CLASS=TIER (e.g. params=ssd)
// UNORDERED: error: 'sched.iteration' op sched-place: order the tasks first (sched-order)
// NOITER: error: sched-place: no sched.iteration to place (run convert-train-to-sched first)
