// convert-train-to-runtime reads an offload plan (sched.buffers) that
// sched-assign-buffers wrote; a damaged one is an error naming the block,
// never a crash.
// RUN: spillway-opt %s --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-order "--sched-place=placement=params=host" --sched-insert-transfers --sched-assign-buffers --convert-sched-to-train | sed '0,/offsets = array<i64: 0>/s//offsetz = array<i64: 0>/' | not spillway-opt --convert-train-to-runtime 2>&1 | FileCheck %s --check-prefix=NOOFFSETS
// RUN: spillway-opt %s --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-order "--sched-place=placement=params=host" --sched-insert-transfers --sched-assign-buffers --convert-sched-to-train | sed '0,/members = \[@w1\]/s//members = [@w1, @w2]/' | not spillway-opt --convert-train-to-runtime 2>&1 | FileCheck %s --check-prefix=LENGTHS
// RUN: spillway-opt %s --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-order "--sched-place=placement=params=host" --sched-insert-transfers --sched-assign-buffers --convert-sched-to-train | sed '0,/members = \[@w1\]/s//members = [@nope]/' | not spillway-opt --convert-train-to-runtime 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: spillway-opt %s --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-order "--sched-place=placement=params=host" --sched-insert-transfers --sched-assign-buffers --convert-sched-to-train | sed '0,/home = "host"/s//home = "nvme"/' | not spillway-opt --convert-train-to-runtime 2>&1 | FileCheck %s --check-prefix=HOME
// RUN: spillway-opt %s --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-order "--sched-place=placement=params=host" --sched-insert-transfers --sched-assign-buffers --convert-sched-to-train | spillway-opt --convert-train-to-runtime | FileCheck %s --check-prefix=GOOD
// RUN: spillway-opt %s --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-order --sched-recompute "--sched-place=placement=activations=ssd" --sched-insert-transfers --sched-assign-buffers --convert-sched-to-train | spillway-opt --convert-train-to-runtime | FileCheck %s --check-prefix=ACT
// RUN: spillway-opt %s --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-order --sched-recompute "--sched-place=placement=activations=ssd" --sched-insert-transfers --sched-assign-buffers --convert-sched-to-train | sed 's/class = "activations", layer = 0 : i64,/class = "activations", home = "host", layer = 0 : i64, offset = 0 : i64,/' | not spillway-opt --convert-train-to-runtime 2>&1 | FileCheck %s --check-prefix=ACTBAD

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
module {
  train.param @w1 : tensor<4x8xf32> at 0
  train.param @w2 : tensor<8x3xf32> at 128
  func.func @two_layers(%x: tensor<6x4xf32>, %labels: tensor<6xi64>) -> tensor<f32> {
    %w1 = train.param_value @w1 : tensor<4x8xf32>
    %w2 = train.param_value @w2 : tensor<8x3xf32>
    %h = train.matmul %x, %w1 : tensor<6x4xf32>, tensor<4x8xf32> -> tensor<6x8xf32>
    %r = train.relu %h : tensor<6x8xf32>
    %y = train.matmul %r, %w2 : tensor<6x8xf32>, tensor<8x3xf32> -> tensor<6x3xf32>
    %l = train.softmax_cross_entropy_loss %y, %labels : tensor<6x3xf32>, tensor<6xi64>
    return %l : tensor<f32>
  }
}
