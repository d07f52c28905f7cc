// Activations off the GPU: what sched-insert-transfers and
// sched-assign-buffers refuse, naming it.
// RUN: not spillway-opt %s -split-input-file --sched-insert-transfers 2>&1 | FileCheck %s --check-prefix=LATE
// RUN: not spillway-opt %s -split-input-file --sched-assign-buffers 2>&1 | FileCheck %s --check-prefix=ASSIGN

// A forward read after a backward read: the activation would have to be on
// the GPU for both.
// LATE: error: 'sched.task' op sched-insert-transfers: reads result #0 of fwd layer(0) after a bwd task read it; activations off the GPU must be read by the forward before the backward
module attributes {train.layers = [#train.layer<"a", params = []>, #train.layer<"b", params = []>]} {
  func.func @late(%x: tensor<2xf32>) -> tensor<2xf32> {
    %r = sched.iteration(%x) {microbatches = 1 : i64, order = "horizontal", placement = #sched.placement<params = gpu, optimizer = gpu, gradients = gpu, activations = host>, optimizer_on = "gpu"} : (tensor<2xf32>) -> tensor<2xf32> {
    ^bb0(%a: tensor<2xf32>):
      %y = sched.task fwd layer(0) (%a) : (tensor<2xf32>) -> tensor<2xf32> {
      ^bb0(%i: tensor<2xf32>):
        sched.yield %i : tensor<2xf32>
      }
      %g = sched.task bwd layer(1) (%y) : (tensor<2xf32>) -> tensor<2xf32> {
      ^bb0(%i: tensor<2xf32>):
        sched.yield %i : tensor<2xf32>
      }
      %z = sched.task fwd layer(1) (%y) : (tensor<2xf32>) -> tensor<2xf32> {
      ^bb0(%i: tensor<2xf32>):
        sched.yield %i : tensor<2xf32>
      }
      sched.yield %z : tensor<2xf32>
    }
    return %r : tensor<2xf32>
  }
}

// -----

// ASSIGN: error: 'sched.iteration' op sched-assign-buffers: activation 0 is put but never taken back
module attributes {train.layers = []} {
  func.func @never_taken(%x: tensor<2xf32>) {
    sched.iteration(%x) {microbatches = 1 : i64, order = "horizontal", placement = #sched.placement<params = gpu, optimizer = gpu, gradients = gpu, activations = host>, updated = []} : (tensor<2xf32>) -> () {
    ^bb0(%a: tensor<2xf32>):
      sched.put_activation %a index(0) : tensor<2xf32>
      %t = sched.move activations layer(0) gpu -> host prio(writeback) : !sched.timepoint
      sched.await %t : !sched.timepoint
      sched.drop activations layer(0) gpu
      sched.drop activations layer(0) host
    }
    return
  }
}

// -----

// ASSIGN: error: 'sched.take_activation' op sched-assign-buffers: activation 0 has no GPU copy here (move it host -> gpu first)
module attributes {train.layers = []} {
  func.func @not_back(%x: tensor<2xf32>) {
    sched.iteration(%x) {microbatches = 1 : i64, order = "horizontal", placement = #sched.placement<params = gpu, optimizer = gpu, gradients = gpu, activations = host>, updated = []} : (tensor<2xf32>) -> () {
    ^bb0(%a: tensor<2xf32>):
      sched.put_activation %a index(0) : tensor<2xf32>
      %t = sched.move activations layer(0) gpu -> host prio(writeback) : !sched.timepoint
      sched.await %t : !sched.timepoint
      sched.drop activations layer(0) gpu
      %b = sched.take_activation index(0) : tensor<2xf32>
    }
    return
  }
}

// -----

// ASSIGN: error: 'sched.iteration' op sched-assign-buffers: activation 0 is still on host at the end of the iteration (a sched.drop is missing)
module attributes {train.layers = []} {
  func.func @not_dropped(%x: tensor<2xf32>) {
    sched.iteration(%x) {microbatches = 1 : i64, order = "horizontal", placement = #sched.placement<params = gpu, optimizer = gpu, gradients = gpu, activations = host>, updated = []} : (tensor<2xf32>) -> () {
    ^bb0(%a: tensor<2xf32>):
      sched.put_activation %a index(0) : tensor<2xf32>
      %t = sched.move activations layer(0) gpu -> host prio(writeback) : !sched.timepoint
      sched.await %t : !sched.timepoint
      %b = sched.take_activation index(0) : tensor<2xf32>
      sched.drop activations layer(0) gpu
    }
    return
  }
}
