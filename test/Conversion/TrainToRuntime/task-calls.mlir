// A step whose tasks call shared task functions (sched-outline-tasks): each
// function is lowered once, internal, taking (ctx, slots); the step keeps
// its handles in the frame (@spw_frame, a store after each definition, a
// load at each use), runs as parts (internal functions of a bounded number
// of ops), releases what goes after an op in one helper call, and calls a function with one constant slot list: a frame slot
// per tensor argument, the index of each parameter argument (the callee
// reads it with spw_param), then a slot per result.
// The inputs are Inputs/models/two-layers-reshapes.mlir (Dialect/Sched's)
// scheduled in two micro-batches, snake, with and without
// sched-outline-tasks (Inputs/regenerate.sh writes them).
// RUN: spillway-opt %S/Inputs/task-calls-outlined.mlir --convert-train-to-runtime | FileCheck %s
// Each task's call (and each layer's optimizer updates) between
// spw_task_begin(ctx, phase, layer, micro-batch) and spw_task_end: the
// train.task convert-sched-to-train put on them. Phase 0 fwd, 1 bwd, 2 opt;
// micro-batch -1: none. The order is the snake's.
// RUN: spillway-opt %S/Inputs/task-calls-outlined.mlir --convert-train-to-runtime | grep -B3 'llvm.call @spw_task_begin' | FileCheck %s --check-prefix=MARKS
// Without the outlining the step is lowered as it always was: no frame.
// RUN: spillway-opt %S/Inputs/task-calls-flat.mlir --convert-train-to-runtime | FileCheck %s --check-prefix=FLAT

// The slot lists of the first three calls (and the slots released after
// the last call): micro-batch 0 and 1 of layer 0
// (the slice's slot, parameter 0 (@w1), two result slots), then layer 1
// (two argument slots, parameter 1 (@w2), two result slots).
// CHECK-DAG: llvm.mlir.global internal @spw_frame() {{.*}} : !llvm.array<29 x ptr>
// CHECK-DAG: llvm.mlir.global internal constant @[[$S0:spw_i64_[0-9]+]](dense<[2, 0, 3, 4]> : tensor<4xi64>)
// CHECK-DAG: llvm.mlir.global internal constant @[[$S1:spw_i64_[0-9]+]](dense<[5, 0, 6, 7]> : tensor<4xi64>)
// CHECK-DAG: llvm.mlir.global internal constant @[[$S2:spw_i64_[0-9]+]](dense<[7, 8, 1, 9, 10]> : tensor<5xi64>)
// CHECK-DAG: llvm.mlir.global internal constant @[[$REL:spw_i64_[0-9]+]](dense<[3, 15, 2]> : tensor<3xi64>)

// fwd L0 mb0
// MARKS:      llvm.mlir.constant(0 : i32) : i32
// MARKS-NEXT: llvm.mlir.constant(0 : i32) : i32
// MARKS-NEXT: llvm.mlir.constant(0 : i32) : i32
// MARKS-NEXT: llvm.call @spw_task_begin(%arg0,
// fwd L0 mb1
// MARKS:      llvm.mlir.constant(0 : i32) : i32
// MARKS-NEXT: llvm.mlir.constant(0 : i32) : i32
// MARKS-NEXT: llvm.mlir.constant(1 : i32) : i32
// MARKS-NEXT: llvm.call @spw_task_begin(%arg0,
// fwd L1 mb1
// MARKS:      llvm.mlir.constant(0 : i32) : i32
// MARKS-NEXT: llvm.mlir.constant(1 : i32) : i32
// MARKS-NEXT: llvm.mlir.constant(1 : i32) : i32
// MARKS-NEXT: llvm.call @spw_task_begin(%arg0,
// fwd L1 mb0
// MARKS:      llvm.mlir.constant(0 : i32) : i32
// MARKS-NEXT: llvm.mlir.constant(1 : i32) : i32
// MARKS-NEXT: llvm.mlir.constant(0 : i32) : i32
// MARKS-NEXT: llvm.call @spw_task_begin(%arg0,
// bwd L1 mb0
// MARKS:      llvm.mlir.constant(1 : i32) : i32
// MARKS-NEXT: llvm.mlir.constant(1 : i32) : i32
// MARKS-NEXT: llvm.mlir.constant(0 : i32) : i32
// MARKS-NEXT: llvm.call @spw_task_begin(%arg0,
// bwd L1 mb1
// MARKS:      llvm.mlir.constant(1 : i32) : i32
// MARKS-NEXT: llvm.mlir.constant(1 : i32) : i32
// MARKS-NEXT: llvm.mlir.constant(1 : i32) : i32
// MARKS-NEXT: llvm.call @spw_task_begin(%arg0,
// bwd L0 mb1
// MARKS:      llvm.mlir.constant(1 : i32) : i32
// MARKS-NEXT: llvm.mlir.constant(0 : i32) : i32
// MARKS-NEXT: llvm.mlir.constant(1 : i32) : i32
// MARKS-NEXT: llvm.call @spw_task_begin(%arg0,
// bwd L0 mb0
// MARKS:      llvm.mlir.constant(1 : i32) : i32
// MARKS-NEXT: llvm.mlir.constant(0 : i32) : i32
// MARKS-NEXT: llvm.mlir.constant(0 : i32) : i32
// MARKS-NEXT: llvm.call @spw_task_begin(%arg0,
// opt L0
// MARKS:      llvm.mlir.constant(2 : i32) : i32
// MARKS-NEXT: llvm.mlir.constant(0 : i32) : i32
// MARKS-NEXT: llvm.mlir.constant(-1 : i32) : i32
// MARKS-NEXT: llvm.call @spw_task_begin(%arg0,
// opt L1
// MARKS:      llvm.mlir.constant(2 : i32) : i32
// MARKS-NEXT: llvm.mlir.constant(1 : i32) : i32
// MARKS-NEXT: llvm.mlir.constant(-1 : i32) : i32
// MARKS-NEXT: llvm.call @spw_task_begin(%arg0,
// MARKS-NOT:  spw_task_begin

// The callee: its tensor argument from the frame, its parameter by index.
// The relu's reshape is a view (used inside only); the reshape it returns
// is a copy, since the caller releases what the callee returns. The callee
// releases only its own tensors, never an argument.
// CHECK-LABEL: llvm.func internal @task.fwd.layer0(%arg0: !llvm.ptr, %arg1: !llvm.ptr) {
// CHECK:         %[[A0:.*]] = llvm.getelementptr %arg1[0] : (!llvm.ptr) -> !llvm.ptr, i64
// CHECK-NEXT:    %[[S:.*]] = llvm.load %[[A0]] : !llvm.ptr -> i64
// CHECK-NEXT:    %[[F:.*]] = llvm.mlir.addressof @spw_frame
// CHECK-NEXT:    %[[AT:.*]] = llvm.getelementptr %[[F]][%[[S]]] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.ptr
// CHECK-NEXT:    %[[X:.*]] = llvm.load %[[AT]] : !llvm.ptr -> !llvm.ptr
// CHECK-NEXT:    %[[A1:.*]] = llvm.getelementptr %arg1[1] : (!llvm.ptr) -> !llvm.ptr, i64
// CHECK-NEXT:    %[[P:.*]] = llvm.load %[[A1]] : !llvm.ptr -> i64
// CHECK-NEXT:    %[[P32:.*]] = llvm.trunc %[[P]] : i64 to i32
// CHECK-NEXT:    %[[W:.*]] = llvm.call @spw_param(%arg0, %[[P32]])
// CHECK:         llvm.call @spw_op_matmul
// CHECK:         %[[R:.*]] = llvm.call @spw_alloc
// CHECK:         llvm.call @spw_op_relu
// CHECK:         llvm.call @spw_view(%arg0, %[[R]],
// CHECK:         llvm.call @spw_op_reshape
// CHECK-NEXT:    llvm.call @spw_release(%arg0, %[[R]])
// CHECK-NOT:     spw_release
// CHECK:         llvm.getelementptr %arg1[2]
// CHECK:         llvm.store
// CHECK:         llvm.getelementptr %arg1[3]
// CHECK:         llvm.store
// CHECK-NEXT:    llvm.return

// The step runs its parts in order (here one: a part has up to 256 ops).
// CHECK-LABEL: llvm.func @spw_model_step(%arg0: !llvm.ptr) {
// CHECK-NEXT:    llvm.call @spw_model_step.part0(%arg0) : (!llvm.ptr) -> ()
// CHECK-NEXT:    llvm.return

// The part reads no parameter itself (each read feeds a call), and each
// call is the slot list's address and the call.
// CHECK-LABEL: llvm.func internal @spw_model_step.part0(%arg0: !llvm.ptr) {
// CHECK-NOT:     @spw_param(
// CHECK:         llvm.call @spw_op_slice
// CHECK:         llvm.call @spw_task_begin(%arg0,
// CHECK-NEXT:    %[[L0:.*]] = llvm.mlir.addressof @[[$S0]] : !llvm.ptr
// CHECK-NEXT:    llvm.call @task.fwd.layer0(%arg0, %[[L0]]) : (!llvm.ptr, !llvm.ptr) -> ()
// CHECK-NEXT:    llvm.call @spw_task_end(%arg0)
// CHECK-NOT:     @spw_param(
// CHECK:         %[[L1:.*]] = llvm.mlir.addressof @[[$S1]] : !llvm.ptr
// CHECK-NEXT:    llvm.call @task.fwd.layer0(%arg0, %[[L1]])
// CHECK-NOT:     @spw_param(
// CHECK:         %[[L2:.*]] = llvm.mlir.addressof @[[$S2]] : !llvm.ptr
// CHECK-NEXT:    llvm.call @task.fwd.layer1(%arg0, %[[L2]])
// CHECK-NOT:     @spw_param(
// CHECK:         llvm.call @task.bwd.layer1(
// CHECK:         llvm.call @task.bwd.layer1(
// CHECK:         llvm.call @task.bwd.layer0(
// CHECK:         llvm.call @task.bwd.layer0(
// Right after the last call that reads them, its arguments go: the first
// slice (slot 2) among them, in one call of the release helper (the slots
// in release order).
// CHECK-NEXT:    %[[RL:.*]] = llvm.mlir.addressof @[[$REL]] : !llvm.ptr
// CHECK-NEXT:    %[[RN:.*]] = llvm.mlir.constant(3 : i64) : i64
// CHECK-NEXT:    llvm.call @spw_release_slots(%arg0, %[[RL]], %[[RN]])
// CHECK-NEXT:    llvm.call @spw_task_end(%arg0)
// CHECK-NOT:     @spw_param(
// CHECK:         llvm.call @spw_task_begin(
// CHECK:         llvm.call @spw_adamw(
// CHECK:         llvm.call @spw_task_end(%arg0)
// CHECK:         llvm.call @spw_task_begin(
// CHECK:         llvm.call @spw_adamw(
// CHECK:         llvm.call @spw_task_end(%arg0)
// CHECK:         llvm.call @spw_set_loss

// The helper: spw_release of frame[slots[i]] for i < n, in order.
// CHECK-LABEL: llvm.func internal @spw_release_slots(%arg0: !llvm.ptr, %arg1: !llvm.ptr, %arg2: i64) {
// CHECK:         ^bb1(%[[I:.*]]: i64):
// CHECK-NEXT:      %[[MORE:.*]] = llvm.icmp "slt" %[[I]], %arg2 : i64
// CHECK-NEXT:      llvm.cond_br %[[MORE]], ^bb2, ^bb3
// CHECK:           %[[AT:.*]] = llvm.getelementptr %arg1[%[[I]]] : (!llvm.ptr, i64) -> !llvm.ptr, i64
// CHECK-NEXT:      %[[SLOT:.*]] = llvm.load %[[AT]] : !llvm.ptr -> i64
// CHECK-NEXT:      %[[F:.*]] = llvm.mlir.addressof @spw_frame
// CHECK-NEXT:      %[[H:.*]] = llvm.getelementptr %[[F]][%[[SLOT]]]
// CHECK-NEXT:      %[[T:.*]] = llvm.load %[[H]] : !llvm.ptr -> !llvm.ptr
// CHECK-NEXT:      llvm.call @spw_release(%arg0, %[[T]])
// CHECK-LABEL: llvm.func @main

// FLAT-NOT: spw_frame
// FLAT-NOT: llvm.func internal
// FLAT:     llvm.call @spw_param(
// FLAT-NOT: spw_frame
