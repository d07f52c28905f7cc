// sched-recompute after sched-order: between a layer's fwd and bwd tasks only
// the layer's boundary activations (its fwd inputs) and the loss stay; each
// bwd task takes its fwd task's inputs and recomputes, at its start, the
// forward ops whose values it reads (marked sched.recompute). The inputs are
// Inputs/models/three-layers.mlir and tied-tanh.mlir, ordered, with two
// micro-batches (snake, horizontal) or one (Inputs/regenerate.sh).
// RUN: spillway-opt %S/Inputs/recompute-snake.mlir -split-input-file --sched-recompute | FileCheck %s --check-prefix=SNAKE
// RUN: spillway-opt %S/Inputs/recompute-horizontal.mlir -split-input-file --sched-recompute | FileCheck %s --check-prefix=HORIZ
// RUN: spillway-opt %S/Inputs/recompute-m1.mlir -split-input-file --sched-recompute | FileCheck %s --check-prefix=M1
// Without the pass the fwd tasks yield their internal values to the bwd tasks.
// RUN: spillway-opt %S/Inputs/recompute-snake.mlir -split-input-file | FileCheck %s --check-prefix=NORC
// Once is enough: a second run finds nothing to recompute.
// RUN: spillway-opt %S/Inputs/recompute-snake.mlir -split-input-file --sched-recompute -o %t.once.mlir
// RUN: spillway-opt %t.once.mlir -split-input-file --sched-recompute -o %t.twice.mlir
// RUN: spillway-opt %t.once.mlir -split-input-file -o %t.once.printed.mlir
// RUN: diff %t.once.printed.mlir %t.twice.mlir
// The counts: three layers x two micro-batches; layer 1's bwd recomputes
// its linear (3 ops with the parameter reads), layer 2's its logits (2 ops);
// each drops one fwd result.
// RUN: spillway-opt %S/Inputs/recompute-snake.mlir -split-input-file "--sched-recompute=remarks=true" -o /dev/null 2>&1 | FileCheck %s --check-prefix=COUNT
// COUNT: remark: recomputed 10 forward ops in 4 bwd tasks; dropped 4 fwd task results

// NORC-LABEL: func.func @three_layers
// NORC:       sched.task fwd layer(1) mb(1) (%{{.*}}) : (tensor<3x4xf32>) -> (tensor<3x4xf32>, tensor<3x4xf32>)
// NORC:       sched.task fwd layer(2) mb(0) (%{{.*}}, %{{.*}}) : (tensor<3x4xf32>, tensor<3xi64>) -> (tensor<3x10xf32>, tensor<f32>)
// NORC-NOT:   sched.recompute

// Snake, M = 2. The fwd tasks yield only what a later forward or the
// iteration reads: layer 0 and 1 their output (the next layer's input),
// layer 2 the loss; the linear's output and the logits are dropped.
// SNAKE-LABEL: func.func @three_layers
// SNAKE:       %[[I0:.*]] = sched.slice %{{.*}}[0 of 2]
// SNAKE-NEXT:  %[[E0:.*]] = sched.task fwd layer(0) mb(0) (%[[I0]]) : (tensor<3xi64>) -> tensor<3x4xf32>
// SNAKE:       %[[I1:.*]] = sched.slice %{{.*}}[1 of 2]
// SNAKE-NEXT:  %[[E1:.*]] = sched.task fwd layer(0) mb(1) (%[[I1]]) : (tensor<3xi64>) -> tensor<3x4xf32>
// SNAKE:       %[[H1:.*]] = sched.task fwd layer(1) mb(1) (%[[E1]]) : (tensor<3x4xf32>) -> tensor<3x4xf32> {
// SNAKE:         %[[Y:.*]] = train.linear
// SNAKE-NEXT:    %[[R:.*]] = train.relu %[[Y]]
// SNAKE-NEXT:    %[[S:.*]] = train.add %{{.*}}, %[[R]]
// SNAKE-NEXT:    sched.yield %[[S]] : tensor<3x4xf32>
// SNAKE:       %[[H0:.*]] = sched.task fwd layer(1) mb(0) (%[[E0]]) : (tensor<3x4xf32>) -> tensor<3x4xf32>
// SNAKE:       %[[L0:.*]] = sched.slice %{{.*}}[0 of 2]
// SNAKE-NEXT:  %[[LOSS0:.*]] = sched.task fwd layer(2) mb(0) (%[[H0]], %[[L0]]) : (tensor<3x4xf32>, tensor<3xi64>) -> tensor<f32> {
// SNAKE:         train.softmax_cross_entropy_loss
// SNAKE-NEXT:    sched.yield %{{.*}} : tensor<f32>
// SNAKE:       %[[L1:.*]] = sched.slice %{{.*}}[1 of 2]
// SNAKE-NEXT:  %[[LOSS1:.*]] = sched.task fwd layer(2) mb(1) (%[[H1]], %[[L1]]) : (tensor<3x4xf32>, tensor<3xi64>) -> tensor<f32>
// The last layer's bwd recomputes the logits from its inputs (the labels
// and layer 1's output), not the loss.
// SNAKE:       %[[D2:.*]]:2 = sched.task bwd layer(2) mb(1) (%[[L1]], %[[H1]]) : (tensor<3xi64>, tensor<3x4xf32>)
// SNAKE-NEXT:  ^bb0(%[[LAB:.*]]: tensor<3xi64>, %[[X:.*]]: tensor<3x4xf32>):
// SNAKE-NEXT:    %[[W:.*]] = train.param_value @head.weight {sched.recompute}
// SNAKE-NEXT:    %[[LOGITS:.*]] = train.matmul %[[X]], %[[W]] {sched.recompute}
// SNAKE-NEXT:    train.constant
// SNAKE-NEXT:    train.softmax_cross_entropy_loss_grad %[[LOGITS]], %[[LAB]]
// SNAKE-NOT:     sched.recompute
// SNAKE:       sched.task bwd layer(2) mb(0) (%[[L0]], %[[H0]])
// SNAKE:         train.matmul {{.*}} {sched.recompute}
// Layer 1's bwd takes layer 0's output (its fwd input) instead of the
// linear's output, and recomputes the linear: not the relu or the residual
// add, which its backward does not read.
// SNAKE:       sched.task bwd layer(1) mb(0) (%[[D2_0:.*]]#0, %[[E0]]) : (tensor<3x4xf32>, tensor<3x4xf32>)
// SNAKE-NEXT:  ^bb0(%[[DY:.*]]: tensor<3x4xf32>, %[[IN:.*]]: tensor<3x4xf32>):
// SNAKE-NEXT:    %[[FW:.*]] = train.param_value @blocks.0.fc.weight {sched.recompute}
// SNAKE-NEXT:    %[[FB:.*]] = train.param_value @blocks.0.fc.bias {sched.recompute}
// SNAKE-NEXT:    %[[LIN:.*]] = train.linear %[[IN]], %[[FW]], %[[FB]] {sched.recompute}
// SNAKE-NEXT:    train.relu_grad %[[LIN]], %[[DY]]
// SNAKE-NOT:     sched.recompute
// SNAKE:       sched.task bwd layer(1) mb(1) (%[[D2]]#0, %[[E1]])
// SNAKE-NEXT:  ^bb0
// SNAKE-NEXT:    train.param_value @blocks.0.fc.weight {sched.recompute}
// SNAKE-NEXT:    train.param_value @blocks.0.fc.bias {sched.recompute}
// SNAKE-NEXT:    train.linear {{.*}} {sched.recompute}
// Layer 0's backward reads only its input ids and the cotangent: nothing to
// recompute.
// SNAKE:       sched.task bwd layer(0) mb(1) (%[[I1]], %{{.*}}#2)
// SNAKE-NOT:   sched.recompute
// SNAKE:       sched.accumulate mean %[[LOSS0]], %[[LOSS1]] : tensor<f32>

// Horizontal, M = 2: the same rule per micro-batch; the last layer's fwd
// and bwd are adjacent and still recompute (one rule for every layer).
// HORIZ-LABEL: func.func @three_layers
// HORIZ:       %[[E0:.*]] = sched.task fwd layer(0) mb(0)
// HORIZ:       %[[H0:.*]] = sched.task fwd layer(1) mb(0) (%[[E0]]) : (tensor<3x4xf32>) -> tensor<3x4xf32>
// HORIZ:       %[[L0:.*]] = sched.slice %{{.*}}[0 of 2]
// HORIZ-NEXT:  sched.task fwd layer(2) mb(0) (%[[H0]], %[[L0]]) : (tensor<3x4xf32>, tensor<3xi64>) -> tensor<f32>
// HORIZ:       %[[D2:.*]]:2 = sched.task bwd layer(2) mb(0) (%[[L0]], %[[H0]])
// HORIZ-NEXT:  ^bb0
// HORIZ-NEXT:    train.param_value @head.weight {sched.recompute}
// HORIZ-NEXT:    train.matmul {{.*}} {sched.recompute}
// HORIZ:       sched.task bwd layer(1) mb(0) (%[[D2]]#0, %[[E0]])
// HORIZ-NEXT:  ^bb0
// HORIZ-NEXT:    train.param_value @blocks.0.fc.weight {sched.recompute}
// HORIZ-NEXT:    train.param_value @blocks.0.fc.bias {sched.recompute}
// HORIZ-NEXT:    train.linear {{.*}} {sched.recompute}
// HORIZ:       sched.task bwd layer(0) mb(0)
// HORIZ:       %[[E1:.*]] = sched.task fwd layer(0) mb(1)
// HORIZ:       %[[H1:.*]] = sched.task fwd layer(1) mb(1) (%[[E1]]) : (tensor<3x4xf32>) -> tensor<3x4xf32>
// HORIZ:       sched.task fwd layer(2) mb(1) ({{.*}}) : (tensor<3x4xf32>, tensor<3xi64>) -> tensor<f32>
// HORIZ:       %[[D21:.*]]:2 = sched.task bwd layer(2) mb(1) (%{{.*}}, %[[H1]])
// HORIZ:       sched.task bwd layer(1) mb(1) (%[[D21]]#0, %[[E1]])
// HORIZ-NEXT:  ^bb0
// HORIZ-NEXT:    train.param_value @blocks.0.fc.weight {sched.recompute}

// M = 1 (no sched-microbatch): the iteration's inputs feed the tasks
// directly.
// M1-LABEL: func.func @three_layers
// M1:       ^bb0(%[[IDS:.*]]: tensor<6xi64>, %[[LABELS:.*]]: tensor<6xi64>):
// M1-NEXT:    %[[E:.*]] = sched.task fwd layer(0) (%[[IDS]]) : (tensor<6xi64>) -> tensor<6x4xf32>
// M1:         %[[H:.*]] = sched.task fwd layer(1) (%[[E]]) : (tensor<6x4xf32>) -> tensor<6x4xf32>
// M1:         %[[LOSS:.*]] = sched.task fwd layer(2) (%[[H]], %[[LABELS]]) : (tensor<6x4xf32>, tensor<6xi64>) -> tensor<f32>
// M1:         %[[D2:.*]]:2 = sched.task bwd layer(2) (%[[LABELS]], %[[H]])
// M1-NEXT:    ^bb0
// M1-NEXT:      train.param_value @head.weight {sched.recompute}
// M1-NEXT:      train.matmul {{.*}} {sched.recompute}
// M1:         sched.task bwd layer(1) (%[[D2]]#0, %[[E]])
// M1-NEXT:    ^bb0
// M1-NEXT:      train.param_value @blocks.0.fc.weight {sched.recompute}
// M1:         sched.yield %[[LOSS]] : tensor<f32>


// A tied embedding/head weight (the head reads the embedding's transpose):
// the head's bwd recomputes the forward from its input, reading the tied
// parameter through its symbol before any update; tanh's output, read by
// its gradient, is recomputed too.
// SNAKE-LABEL: func.func @tied
// SNAKE:       sched.task fwd layer(1) mb(1) ({{.*}}) : (tensor<2x4xf32>, tensor<2xi64>) -> tensor<f32>
// SNAKE:       sched.task bwd layer(1) mb(1) (%{{.*}}, %{{.*}}) : (tensor<2xi64>, tensor<2x4xf32>)
// SNAKE-NEXT:  ^bb0(%{{.*}}: tensor<2xi64>, %[[X:.*]]: tensor<2x4xf32>):
// SNAKE-NEXT:    %[[W:.*]] = train.param_value @blocks.0.fc.weight {sched.recompute}
// SNAKE-NEXT:    %[[Y:.*]] = train.matmul %[[X]], %[[W]] {sched.recompute}
// SNAKE-NEXT:    %[[T:.*]] = train.tanh %[[Y]] {sched.recompute}
// SNAKE-NEXT:    %[[E:.*]] = train.param_value @embed.weight {sched.recompute}
// SNAKE-NEXT:    %[[ET:.*]] = train.transpose %[[E]], [1, 0] {sched.recompute}
// SNAKE-NEXT:    train.matmul %[[T]], %[[ET]] {sched.recompute}
// SNAKE:         train.tanh_grad %[[T]]
// SNAKE:       sched.task opt layer(0)
// SNAKE-NEXT:  ^bb0
// SNAKE-NEXT:    train.adamw @embed.weight
