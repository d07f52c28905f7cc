// convert-train-to-runtime reads an offload plan (sched.buffers) that
// sched-assign-buffers wrote; a damaged one is an error naming the block,
// never a crash. The inputs are test/Dialect/Sched/Inputs/models/two-layers.mlir
// planned (parameters on host; activations on SSD) and back in the train
// dialect, and such a plan with one edit, named in the input's header
// (test/Dialect/Sched/Inputs/regenerate.sh writes them).
// RUN: not spillway-opt %S/Inputs/offload-plan-no-offsets.mlir --convert-train-to-runtime 2>&1 | FileCheck %s --check-prefix=NOOFFSETS
// RUN: not spillway-opt %S/Inputs/offload-plan-members-offsets.mlir --convert-train-to-runtime 2>&1 | FileCheck %s --check-prefix=LENGTHS
// RUN: not spillway-opt %S/Inputs/offload-plan-unknown-member.mlir --convert-train-to-runtime 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not spillway-opt %S/Inputs/offload-plan-bad-home.mlir --convert-train-to-runtime 2>&1 | FileCheck %s --check-prefix=HOME
// RUN: spillway-opt %S/Inputs/offload-plan-host.mlir --convert-train-to-runtime | FileCheck %s --check-prefix=GOOD
// RUN: sed 's/^module attributes {/module attributes {train.optimizer_state_shards = {align = 65536 : i64, ranks = 3 : i64}, /' %S/Inputs/offload-plan-host.mlir | spillway-opt --convert-train-to-runtime | FileCheck %s --check-prefix=SHARDS --implicit-check-not=spw_declare_gradient_shards
// RUN: sed 's/^module attributes {/module attributes {train.optimizer_state_shards = {align = 64 : i64, gradients = true, ranks = 2 : i64}, /' %S/Inputs/offload-plan-host.mlir | spillway-opt --convert-train-to-runtime | FileCheck %s --check-prefix=GRADSHARDS
// RUN: spillway-opt %S/Inputs/offload-plan-activations.mlir --convert-train-to-runtime | FileCheck %s --check-prefix=ACT
// RUN: spillway-opt %S/Inputs/offload-plan-deferred.mlir --convert-train-to-runtime | FileCheck %s --check-prefix=DEFERRED
// RUN: not spillway-opt %S/Inputs/offload-plan-activation-home.mlir --convert-train-to-runtime 2>&1 | FileCheck %s --check-prefix=ACTBAD
// RUN: spillway-opt %S/Inputs/offload-plan-clip.mlir --convert-train-to-runtime | FileCheck %s --check-prefix=CLIP

// Gradient clipping (gradients on SSD, snake M = 2): the barrier is declared
// with its max_norm; each layer's norms are taken on host (tier 1) after
// its flush accumulates, divided by M; the coefficient of both parameters
// (indices 0 and 1, in declaration order) comes before the first update.
// CLIP:      llvm.mlir.global internal constant @[[IDX:spw_i64_[0-9]+]](dense<[0, 1]> : tensor<2xi64>)
// CLIP:      %[[MAX:.*]] = llvm.mlir.constant(1.000000e+00 : f64) : f64
// CLIP-NEXT: llvm.call @spw_declare_grad_clip(%arg0, %[[MAX]]) : (!llvm.ptr, f64) -> ()
// CLIP:      llvm.call @spw_accumulate_grads
// CLIP-NEXT: %[[L1:.*]] = llvm.mlir.constant(1 : i32) : i32
// CLIP-NEXT: %[[HOST:.*]] = llvm.mlir.constant(1 : i32) : i32
// CLIP-NEXT: %[[M:.*]] = llvm.mlir.constant(2 : i64) : i64
// CLIP-NEXT: llvm.call @spw_grad_norms(%arg0, %[[L1]], %[[HOST]], %[[M]]) : (!llvm.ptr, i32, i32, i64) -> ()
// CLIP:      llvm.call @spw_accumulate_grads
// CLIP-NEXT: %[[L0:.*]] = llvm.mlir.constant(0 : i32) : i32
// CLIP:      llvm.call @spw_grad_norms(%arg0, %[[L0]],
// CLIP-NOT:  llvm.call @spw_adamw
// CLIP:      %[[P:.*]] = llvm.mlir.addressof @[[IDX]] : !llvm.ptr
// CLIP-NEXT: %[[F:.*]] = llvm.mlir.constant(1.000000e+00 : f64) : f64
// CLIP-NEXT: llvm.call @spw_clip_grad_norm_of(%arg0, %{{.*}}, %[[P]], %[[F]]) : (!llvm.ptr, i32, !llvm.ptr, f64) -> !llvm.ptr
// CLIP:      llvm.call @spw_adamw

// NOOFFSETS: error: sched.buffers: malformed block {{.*}} (class, layer, bytes, members and as many offsets)
// LENGTHS: error: sched.buffers: malformed block
// UNKNOWN: error: sched.buffers: unknown parameter @nope
// HOME: error: sched.buffers: block {{.*}} has a bad home
// GOOD: llvm.call @spw_declare_tiers
// GOOD: llvm.call @spw_declare_block
// GOOD: llvm.call @spw_move
// GOOD: llvm.call @spw_await
// GOOD: llvm.call @spw_bind
// The relu's output goes to SSD and back: declared as an activation block
// of 6x8 f32, put after the forward, taken before the backward.
// ACT:      llvm.call @spw_declare_activation(%{{.*}}, %{{.*}}, %{{.*}}) : (!llvm.ptr, i32, i64) -> ()
// ACT:      llvm.call @spw_put_activation(
// ACT:      llvm.call @spw_move(
// ACT:      llvm.call @spw_take_activation(
// ACT:      llvm.call @spw_drop(
// ACTBAD: error: sched.buffers: activation block {{.*}} has a home, members or no bytes
// With the optimizer overlap and a GPU budget (1 MiB): the step arena is
// what the 3072-byte GPU arena leaves, declared after the tiers; the
// deferred gradient slice of layer 0 is a block of class 5 (pending) at home
// on host (tier 1), 512 bytes.
// DEFERRED:      llvm.call @spw_declare_tiers
// DEFERRED:      %[[STEP:.*]] = llvm.mlir.constant(1045504 : i64) : i64
// DEFERRED-NEXT: llvm.call @spw_declare_step_arena(%{{.*}}, %[[STEP]]) : (!llvm.ptr, i64) -> ()
// DEFERRED:      %[[CLS:.*]] = llvm.mlir.constant(5 : i32) : i32
// DEFERRED-NEXT: %[[LAYER:.*]] = llvm.mlir.constant(0 : i32) : i32
// DEFERRED-NEXT: %[[BYTES:.*]] = llvm.mlir.constant(512 : i64) : i64
// DEFERRED-NEXT: %[[PTIER:.*]] = llvm.mlir.constant(1 : i32) : i32
// DEFERRED:      llvm.call @spw_declare_block(%{{.*}}, %[[CLS]], %[[LAYER]], %[[BYTES]], %[[PTIER]],

// The offload plan's optimizer blocks cut for 3 ranks at the norm's blocks
// (train.optimizer_state_shards): declared before the tiers.
// SHARDS: %[[N:.*]] = llvm.mlir.constant(3 : i32) : i32
// SHARDS-NEXT: %[[A:.*]] = llvm.mlir.constant(65536 : i64) : i64
// SHARDS-NEXT: llvm.call @spw_declare_optimizer_shards(%arg0, %[[N]], %[[A]]) : (!llvm.ptr, i32, i64) -> ()
// SHARDS: llvm.call @spw_declare_tiers
// GRADSHARDS: llvm.call @spw_declare_optimizer_shards
// GRADSHARDS-NEXT: llvm.call @spw_declare_gradient_shards(%arg0) : (!llvm.ptr) -> ()
// GRADSHARDS: llvm.call @spw_declare_tiers
