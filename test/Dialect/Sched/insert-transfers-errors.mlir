// sched-insert-transfers refuses what it cannot plan, naming it. The inputs
// are Inputs/models/tied-head.mlir (an embedding tied to the head) ordered
// and placed; the malformed ones are such an iteration with one edit, named
// in the input's header (Inputs/regenerate.sh writes them all).
// RUN: not spillway-opt %S/Inputs/tied-head-ordered.mlir --sched-insert-transfers 2>&1 | FileCheck %s --check-prefix=NOPLACE
// (Tied weights with the parameters off the GPU are planned now:
// insert-transfers-tied.mlir.)
// The deferred task must apply what the opt task deferred, range for range.
// RUN: not spillway-opt %S/Inputs/tied-head-apply-mismatch.mlir --sched-insert-transfers 2>&1 | FileCheck %s --check-prefix=APPLY
// APPLY: error: 'sched.task' op sched-insert-transfers: layer 0 defers @wte [0, 20) but its deferred task applies [0, 16)
// The tied weight's gradient is complete in its owner's backward, so
// gradients and optimizer state can leave the GPU.
// RUN: spillway-opt %S/Inputs/tied-head-gradients-host.mlir --sched-insert-transfers | FileCheck %s --check-prefix=TIEDGRADS

// NOPLACE: error: 'sched.iteration' op sched-insert-transfers: no placement; run sched-place first
// TIEDGRADS: sched.stage_grads gradstage layer(0) first
// TIEDGRADS: sched.gradient @wte layer(0) host mean(1)
