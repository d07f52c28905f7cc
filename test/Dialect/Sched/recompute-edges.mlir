// sched-recompute on hand-written iterations: the cases the pipeline's
// models do not show.
// RUN: spillway-opt %s -split-input-file --sched-recompute | FileCheck %s

// One fwd task with several results: %y is the next layer's input (kept,
// and its bwd keeps reading it), %h is internal (recomputed), %wt depends
// on a parameter only (recomputed from nothing: no new input), %p is the
// fwd task's own input passed through (the bwd reads that input instead).
// %z, the second input, is read only to compute %h: once %h is dropped the
// fwd task no longer takes it.
// CHECK-LABEL: func.func @several_results
// CHECK:       ^bb0(%[[A:.*]]: tensor<2x4xf32>, %[[Z:.*]]: tensor<2x4xf32>):
// CHECK-NEXT:    %[[Y:.*]] = sched.task fwd layer(0) (%[[A]]) : (tensor<2x4xf32>) -> tensor<2x4xf32> {
// CHECK-NEXT:    ^bb0(%[[IN:.*]]: tensor<2x4xf32>):
// CHECK-NEXT:      %[[T:.*]] = train.tanh %[[IN]]
// CHECK-NEXT:      sched.yield %[[T]] : tensor<2x4xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[O:.*]] = sched.task fwd layer(1) (%[[Y]])
// CHECK:         %[[C:.*]] = sched.task bwd layer(1) ()
// CHECK:         sched.task bwd layer(0) (%[[C]], %[[Y]], %[[A]], %[[Z]]) : (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32> {
// CHECK-NEXT:    ^bb0(%[[DY:.*]]: tensor<2x4xf32>, %[[BY:.*]]: tensor<2x4xf32>, %[[BA:.*]]: tensor<2x4xf32>, %[[BZ:.*]]: tensor<2x4xf32>):
// CHECK-NEXT:      %[[RT:.*]] = train.tanh %[[BA]] {sched.recompute}
// CHECK-NEXT:      %[[RH:.*]] = train.mul %[[RT]], %[[BZ]] {sched.recompute}
// CHECK-NEXT:      %[[RW:.*]] = train.param_value @w {sched.recompute}
// CHECK-NEXT:      %[[RWT:.*]] = train.transpose %[[RW]], [1, 0] {sched.recompute}
// CHECK-NEXT:      %[[G:.*]] = train.tanh_grad %[[BY]], %[[DY]]
// CHECK-NEXT:      %[[G2:.*]] = train.mul %[[G]], %[[RH]]
// CHECK-NEXT:      %[[G3:.*]] = train.matmul %[[G2]], %[[RWT]]
// CHECK-NEXT:      %[[G4:.*]] = train.add %[[G3]], %[[BA]]
// CHECK-NEXT:      sched.yield %[[G4]]
module {
  train.param @w : tensor<4x4xf32> at 0
  func.func @several_results(%x: tensor<2x4xf32>, %z: tensor<2x4xf32>) -> tensor<2x4xf32> {
    %res = sched.iteration(%x, %z) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32> {
    ^bb0(%a: tensor<2x4xf32>, %b: tensor<2x4xf32>):
      %y, %h, %wt, %p = sched.task fwd layer(0) (%a, %b) : (tensor<2x4xf32>, tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>, tensor<4x4xf32>, tensor<2x4xf32>) {
      ^bb0(%in: tensor<2x4xf32>, %zin: tensor<2x4xf32>):
        %t = train.tanh %in : tensor<2x4xf32>
        %m = train.mul %t, %zin : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
        %w = train.param_value @w : tensor<4x4xf32>
        %wtr = train.transpose %w, [1, 0] : tensor<4x4xf32> -> tensor<4x4xf32>
        sched.yield %t, %m, %wtr, %in : tensor<2x4xf32>, tensor<2x4xf32>, tensor<4x4xf32>, tensor<2x4xf32>
      }
      %o = sched.task fwd layer(1) (%y) : (tensor<2x4xf32>) -> tensor<2x4xf32> {
      ^bb0(%in: tensor<2x4xf32>):
        %n = train.neg %in : tensor<2x4xf32>
        sched.yield %n : tensor<2x4xf32>
      }
      %c = sched.task bwd layer(1) () : () -> tensor<2x4xf32> {
        %one = train.constant dense<1.0> : tensor<2x4xf32>
        sched.yield %one : tensor<2x4xf32>
      }
      %d = sched.task bwd layer(0) (%c, %y, %h, %wt, %p) : (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<4x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32> {
      ^bb0(%dy: tensor<2x4xf32>, %yy: tensor<2x4xf32>, %hh: tensor<2x4xf32>, %ww: tensor<4x4xf32>, %pp: tensor<2x4xf32>):
        %g = train.tanh_grad %yy, %dy : tensor<2x4xf32>
        %g2 = train.mul %g, %hh : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
        %g3 = train.matmul %g2, %ww : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
        %g4 = train.add %g3, %pp : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
        sched.yield %g4 : tensor<2x4xf32>
      }
      sched.yield %o : tensor<2x4xf32>
    }
    return %res : tensor<2x4xf32>
  }
}

// -----

// A bwd task that reads internal values of two fwd tasks recomputes each
// from that task's inputs; an internal value read by two bwd tasks is
// recomputed in each.
// CHECK-LABEL: func.func @two_producers
// CHECK:       ^bb0(%[[A:.*]]: tensor<2x4xf32>):
// CHECK-NEXT:    %[[F0:.*]] = sched.task fwd layer(0) (%[[A]]) : (tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK:         %[[F1:.*]] = sched.task fwd layer(1) (%[[F0]]) : (tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK:         %[[B1:.*]] = sched.task bwd layer(1) (%[[F0]]) : (tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT:    ^bb0(%[[X1:.*]]: tensor<2x4xf32>):
// CHECK-NEXT:      train.exp %[[X1]] {sched.recompute}
// CHECK:         sched.task bwd layer(0) (%[[B1]], %[[F0]], %[[A]]) : (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT:    ^bb0(%{{.*}}: tensor<2x4xf32>, %[[X1B:.*]]: tensor<2x4xf32>, %[[X0:.*]]: tensor<2x4xf32>):
// CHECK-NEXT:      train.exp %[[X1B]] {sched.recompute}
// CHECK-NEXT:      train.relu %[[X0]] {sched.recompute}
// CHECK-NEXT:      train.mul
// CHECK-NEXT:      train.relu_grad
func.func @two_producers(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %res = sched.iteration(%x) : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%a: tensor<2x4xf32>):
    %f0:2 = sched.task fwd layer(0) (%a) : (tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
    ^bb0(%in: tensor<2x4xf32>):
      %r = train.relu %in : tensor<2x4xf32>
      %s = train.sigmoid %r : tensor<2x4xf32>
      sched.yield %s, %r : tensor<2x4xf32>, tensor<2x4xf32>
    }
    %f1:2 = sched.task fwd layer(1) (%f0#0) : (tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
    ^bb0(%in: tensor<2x4xf32>):
      %e = train.exp %in : tensor<2x4xf32>
      %n = train.neg %e : tensor<2x4xf32>
      sched.yield %n, %e : tensor<2x4xf32>, tensor<2x4xf32>
    }
    %b1 = sched.task bwd layer(1) (%f1#1) : (tensor<2x4xf32>) -> tensor<2x4xf32> {
    ^bb0(%e: tensor<2x4xf32>):
      %g = train.neg %e : tensor<2x4xf32>
      sched.yield %g : tensor<2x4xf32>
    }
    %b0 = sched.task bwd layer(0) (%b1, %f1#1, %f0#1) : (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32> {
    ^bb0(%dy: tensor<2x4xf32>, %e: tensor<2x4xf32>, %r: tensor<2x4xf32>):
      %g = train.mul %dy, %e : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
      %g2 = train.relu_grad %r, %g : tensor<2x4xf32>
      sched.yield %g2 : tensor<2x4xf32>
    }
    sched.yield %f1#0 : tensor<2x4xf32>
  }
  return %res : tensor<2x4xf32>
}

// -----

// Nothing to do: a fwd result read by a later forward and by bwd tasks (a
// boundary activation), and one the iteration reads (a loss), stay as they
// are.
// CHECK-LABEL: func.func @boundary_only
// CHECK:         sched.task fwd layer(0) (%{{.*}}) : (tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>)
// CHECK-NOT:     sched.recompute
func.func @boundary_only(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %r = sched.iteration(%x) : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%a: tensor<2x4xf32>):
    %f0:2 = sched.task fwd layer(0) (%a) : (tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
    ^bb0(%in: tensor<2x4xf32>):
      %t = train.tanh %in : tensor<2x4xf32>
      %u = train.neg %in : tensor<2x4xf32>
      sched.yield %t, %u : tensor<2x4xf32>, tensor<2x4xf32>
    }
    %f1 = sched.task fwd layer(1) (%f0#0) : (tensor<2x4xf32>) -> tensor<2x4xf32> {
    ^bb0(%in: tensor<2x4xf32>):
      %n = train.neg %in : tensor<2x4xf32>
      sched.yield %n : tensor<2x4xf32>
    }
    %b1 = sched.task bwd layer(1) (%f0#0) : (tensor<2x4xf32>) -> tensor<2x4xf32> {
    ^bb0(%in: tensor<2x4xf32>):
      %n = train.neg %in : tensor<2x4xf32>
      sched.yield %n : tensor<2x4xf32>
    }
    %b0 = sched.task bwd layer(0) (%b1, %f0#0) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32> {
    ^bb0(%dy: tensor<2x4xf32>, %t: tensor<2x4xf32>):
      %g = train.tanh_grad %t, %dy : tensor<2x4xf32>
      sched.yield %g : tensor<2x4xf32>
    }
    %sum = sched.accumulate sum %f0#1, %f1 : tensor<2x4xf32>
    sched.yield %sum : tensor<2x4xf32>
  }
  return %r : tensor<2x4xf32>
}

// -----

// A fwd task whose only result the backward reads has nothing left to
// compute once the backward recomputes it: it goes.
// CHECK-LABEL: func.func @all_recomputed
// CHECK:         %[[F0:.*]] = sched.task fwd layer(0)
// CHECK-NOT:     sched.task fwd layer(1)
// CHECK:         sched.task bwd layer(1) (%[[F0]])
// CHECK-NEXT:    ^bb0(%[[X:.*]]: tensor<2x4xf32>):
// CHECK-NEXT:      train.sin %[[X]] {sched.recompute}
func.func @all_recomputed(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %r = sched.iteration(%x) : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%a: tensor<2x4xf32>):
    %f0 = sched.task fwd layer(0) (%a) : (tensor<2x4xf32>) -> tensor<2x4xf32> {
    ^bb0(%in: tensor<2x4xf32>):
      %n = train.neg %in : tensor<2x4xf32>
      sched.yield %n : tensor<2x4xf32>
    }
    %f1 = sched.task fwd layer(1) (%f0) : (tensor<2x4xf32>) -> tensor<2x4xf32> {
    ^bb0(%in: tensor<2x4xf32>):
      %s = train.sin %in : tensor<2x4xf32>
      sched.yield %s : tensor<2x4xf32>
    }
    %b1 = sched.task bwd layer(1) (%f1) : (tensor<2x4xf32>) -> tensor<2x4xf32> {
    ^bb0(%s: tensor<2x4xf32>):
      %g = train.cos %s : tensor<2x4xf32>
      sched.yield %g : tensor<2x4xf32>
    }
    sched.yield %f0 : tensor<2x4xf32>
  }
  return %r : tensor<2x4xf32>
}
