// RUN: spillway-opt %s --sched-order=order=horizontal | FileCheck %s

// An accumulate operand that is the iteration's block argument (no defining
// op) is available from the start: it goes first, the task results follow in
// the order their tasks now run.
// CHECK-LABEL: func.func @block_arg_operand
// CHECK:       %[[Y0:.*]] = sched.task fwd layer(0) mb(0)
// CHECK:       %[[Y1:.*]] = sched.task fwd layer(0) mb(1)
// CHECK:       sched.accumulate sum %{{.*}}, %[[Y0]], %[[Y1]] :
func.func @block_arg_operand(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = sched.iteration(%x) {microbatches = 2 : i64} : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %y1 = sched.task fwd layer(0) mb(1) (%a) : (tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%i: tensor<4xf32>):
      sched.yield %i : tensor<4xf32>
    }
    %y0 = sched.task fwd layer(0) mb(0) (%a) : (tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%i: tensor<4xf32>):
      sched.yield %i : tensor<4xf32>
    }
    %s = sched.accumulate sum %y1, %a, %y0 : tensor<4xf32>
    sched.yield %s : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}
