// RUN: spillway-opt %s -split-input-file -verify-diagnostics -allow-unregistered-dialect --sched-recompute

// It runs before placement and transfers.
func.func @placed(%x: tensor<6xf32>) {
  sched.iteration(%x) : (tensor<6xf32>) -> () {
  ^bb0(%a: tensor<6xf32>):
    // expected-error @+1 {{sched-recompute: expected no residency or transfer ops (it runs before sched-place), found sched.move}}
    %r = sched.move params layer(0) host -> gpu prio(demand) : !sched.timepoint
  }
  return
}

// -----

// Recomputing must give the same values: an op whose effects are not known
// to be pure (or parameter reads) is not run twice.
func.func @unknown_effects(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %r = sched.iteration(%x) : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%a: tensor<2x4xf32>):
    %f0:2 = sched.task fwd layer(0) (%a) : (tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
    ^bb0(%in: tensor<2x4xf32>):
      // expected-error @+1 {{sched-recompute: cannot recompute 'test.dropout' of fwd layer(0) in bwd layer(0): it has side effects or regions, so running it again could change the result}}
      %d = "test.dropout"(%in) : (tensor<2x4xf32>) -> tensor<2x4xf32>
      %n = train.neg %d : tensor<2x4xf32>
      sched.yield %n, %d : tensor<2x4xf32>, tensor<2x4xf32>
    }
    %b0 = sched.task bwd layer(0) (%f0#1) : (tensor<2x4xf32>) -> tensor<2x4xf32> {
    ^bb0(%d: tensor<2x4xf32>):
      %g = train.neg %d : tensor<2x4xf32>
      sched.yield %g : tensor<2x4xf32>
    }
    sched.yield %f0#0 : tensor<2x4xf32>
  }
  return %r : tensor<2x4xf32>
}
