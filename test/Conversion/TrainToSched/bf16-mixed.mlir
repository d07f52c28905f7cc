// convert-train-to-sched on a bf16-mixed step (the model of
// Inputs/models/train-to-sched.mlir after train-mixed-precision): the f32
// copy of a bf16 forward value is recomputed in every task that reads it,
// so the tasks pass the bf16 value (forward to forward, and forward to the
// backward that reads it); a gradient's rounding stays in its backward
// task, so each update receives the f32 gradient.
// RUN: spillway-opt %S/Inputs/models/train-to-sched.mlir --train-mixed-precision --train-autodiff --cse --train-attach-optimizer --train-partition-layers --convert-train-to-sched | FileCheck %s

// CHECK-LABEL: func.func @step
// CHECK:       %[[F0:.*]] = sched.task fwd layer(0) {{.*}} -> tensor<6x4xbf16>
// CHECK:         %[[E:.*]] = train.gather
// CHECK-NEXT:    %[[EH:.*]] = train.cast %[[E]] : tensor<6x4xf32> -> tensor<6x4xbf16>
// CHECK-NEXT:    sched.yield %[[EH]] : tensor<6x4xbf16>
// CHECK:       %[[F1:.*]]:2 = sched.task fwd layer(1) (%[[F0]]) : (tensor<6x4xbf16>) -> (tensor<6x4xf32>, tensor<6x4xbf16>)
// CHECK-NEXT:  ^bb0(%[[IN1:.*]]: tensor<6x4xbf16>):
// CHECK:         train.cast %[[IN1]] : tensor<6x4xbf16> -> tensor<6x4xf32>
// CHECK:       %[[F2:.*]]:2 = sched.task fwd layer(2) (%[[F1]]#1) : (tensor<6x4xbf16>)
// The head's backward reads layer 2's output as bf16 and widens it itself.
// CHECK:       sched.task bwd layer(3) ({{.*}}, %[[F2]]#1) : ({{.*}}, tensor<6x4xbf16>)
// CHECK-NEXT:  ^bb0({{.*}}, %[[SAVED:.*]]: tensor<6x4xbf16>):
// CHECK:         train.cast %[[SAVED]] : tensor<6x4xbf16> -> tensor<6x4xf32>
// CHECK:       sched.task opt layer(0) ({{.*}}) : (tensor<10x4xf32>) -> ()
// CHECK-NOT:     train.cast
// CHECK:         train.adamw @embed.weight
// CHECK:       sched.task opt layer(1) ({{.*}}) : (tensor<4x4xf32>, tensor<4xf32>) -> ()
