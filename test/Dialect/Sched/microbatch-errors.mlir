// RUN: spillway-opt %s -split-input-file -verify-diagnostics --sched-microbatch=microbatches=2

// Split once: an iteration already in micro-batches is an error.
func.func @twice(%x: tensor<6xf32>) {
  // expected-error @+1 {{sched-microbatch: the iteration is already split into 2 micro-batches}}
  sched.iteration(%x) {microbatches = 2 : i64} : (tensor<6xf32>) -> () {
  ^bb0(%a: tensor<6xf32>):
  }
  return
}

// -----

// It runs before placement and transfers.
func.func @placed(%x: tensor<6xf32>) {
  sched.iteration(%x) : (tensor<6xf32>) -> () {
  ^bb0(%a: tensor<6xf32>):
    // expected-error @+1 {{sched-microbatch: expected only tasks in the iteration (it runs right after convert-train-to-sched), found sched.resident}}
    %r = sched.resident %a on host : tensor<6xf32>
  }
  return
}
