// sched-assign-buffers with the optimizer overlap: a layer whose first D
// elements are updated a step late has its params and optimizer blocks
// split there (`split`, bytes of the members); each part is its own extent,
// part 1 at part 0's size rounded up to the tier's granule (back to back on
// the GPU), and a part move moves and costs that part only. Layer 0 (w1,
// 16x16 = 256 elements) at F = 0.5 defers 128 elements, 512 bytes; layer 1
// (w2, 16x3 = 48 elements) rounds to no 64-element granule and stays whole.
// Snake, two micro-batches, everything on SSD (Inputs/models/two-layers-16.mlir;
// Inputs/regenerate.sh writes the iterations with their transfers).
// RUN: spillway-opt %S/Inputs/assign-buffers-split-ssd.mlir --sched-assign-buffers | FileCheck %s
// RUN: spillway-opt %S/Inputs/assign-buffers-split-gpuhome.mlir --sched-assign-buffers | FileCheck %s --check-prefix=GPUHOME
// A GPU optimizer keeps the deferred slices in the GPU arena (F = 1, granule
// 1: every layer defers all of its elements).
// RUN: spillway-opt %S/Inputs/insert-transfers-defgpu.mlir --sched-insert-transfers --sched-assign-buffers | FileCheck %s --check-prefix=PENDGPU
// PENDGPU: {bytes = 160 : i64, class = "pending", home = "gpu", layer = 0 : i64, members = [@embed.weight], offset = 2560 : i64, offsets = array<i64: 0>}
// PENDGPU-SAME: {bytes = 80 : i64, class = "pending", home = "gpu", layer = 1 : i64, members = [@blocks.0.fc.weight, @blocks.0.fc.bias], offset = 2816 : i64, offsets = array<i64: 0, 64>}
// PENDGPU-SAME: {bytes = 160 : i64, class = "pending", home = "gpu", layer = 2 : i64, members = [@head.weight], offset = 3072 : i64, offsets = array<i64: 0>}]
// PENDGPU-SAME: gpu_bytes = 3328 : i64
// The step arena: the GPU budget (gpu-mem, else the device's memory) less
// the GPU arena (3072 bytes); an arena larger than the device is an error.
// RUN: spillway-opt %S/Inputs/assign-buffers-split-ssd.mlir --sched-assign-buffers=gpu-mem=1048576 | FileCheck %s --check-prefix=STEP
// RUN: spillway-opt %S/Inputs/assign-buffers-split-ssd.mlir "--sched-assign-buffers=gpu-mem=1048576 device-mem=4096" | FileCheck %s --check-prefix=STEP
// RUN: spillway-opt %S/Inputs/assign-buffers-split-ssd.mlir --sched-assign-buffers=device-mem=4096 | FileCheck %s --check-prefix=STEPDEV
// RUN: not spillway-opt %S/Inputs/assign-buffers-split-ssd.mlir --sched-assign-buffers=device-mem=3071 2>&1 | FileCheck %s --check-prefix=STEPOVER
// STEP: gpu_bytes = 3072 : i64
// STEP-SAME: step_arena_bytes = 1045504 : i64
// STEPDEV: step_arena_bytes = 1024 : i64
// STEPOVER: error: 'sched.iteration' op plan over budget: the gpu tier needs 3072 bytes for this placement but the device has 3071 (the hardware profile's gpu.memory_bytes): place fewer classes on the GPU
// A deferred part that is not whole GPU granules cannot be split in place
// (the tied embedding/head of Inputs/models/tied-head.mlir, granule 1).
// RUN: not spillway-opt %S/Inputs/tied-head-deferred-transfers.mlir --sched-assign-buffers 2>&1 | FileCheck %s --check-prefix=DEFERRED
// DEFERRED: error: 'sched.iteration' op sched-assign-buffers: layer 0 defers 80 bytes, not a multiple of 256 (sched-overlap-optimizer's granule must keep the parts aligned in the GPU arena)

// CHECK: sched.buffers = {blocks = [
// CHECK-SAME: {bytes = 1024 : i64, class = "params", home = "ssd", layer = 0 : i64, members = [@w1], offset = 0 : i64, offsets = array<i64: 0>, split = 512 : i64}
// CHECK-SAME: {bytes = 2048 : i64, class = "optimizer", home = "ssd", layer = 0 : i64, members = [@w1], offset = 8192 : i64, offsets = array<i64: 0>, split = 512 : i64}
// The gradient moves whole: no split.
// CHECK-SAME: {bytes = 1024 : i64, class = "gradients", home = "ssd", layer = 0 : i64, members = [@w1], offset = 16384 : i64, offsets = array<i64: 0>}
// CHECK-SAME: {bytes = 192 : i64, class = "params", home = "ssd", layer = 1 : i64, members = [@w2], offset = 20480 : i64, offsets = array<i64: 0>}
// Model bytes read from SSD: loads of layers 0, 1, 0 (1024 + 192 + 1024),
// the gradients for the updates (1024 + 192), the state (part 0 of layer
// 0: 1024 deferred + part 1: 1024; layer 1: 384), the parameters for the
// update after the backward (part 1 of layer 0: 512; layer 1: 192); the
// deferred part of layer 0's parameters is never read for its update.
// The deferred gradient slice of layer 0 (128 elements) has its home on
// the CPU optimizer's side, after the pools, counted in the host peak.
// CHECK-SAME: {bytes = 512 : i64, class = "pending", home = "host", layer = 0 : i64, members = [@w1], offset = 32768 : i64, offsets = array<i64: 0>}]
// CHECK-SAME: host_bytes = 36864 : i64
// CHECK-SAME: model_bytes = {d2h = 1216 : i64, h2d = 2240 : i64, ssd_read = 6592 : i64, ssd_write = 4864 : i64}
// Without a GPU budget the step arena is not bounded.
// CHECK-NOT: step_arena_bytes

// The iteration says how many elements each layer defers.
// CHECK: sched.iteration{{.*}}deferred = array<i64: 128, 0>
// The deferred update of layer 0, on the copy of its first load.
// CHECK: sched.move optimizer layer(0) part(0) ssd -> host prio(demand) at({{[0-9]+}})
// CHECK: sched.task opt deferred layer(0)
// CHECK: sched.move params layer(0) part(0) host -> ssd prio(writeback)
// The update after the backward: part 1 only.
// CHECK: sched.move params layer(0) part(1) ssd -> host prio(demand) at({{[0-9]+}})
// CHECK: sched.task opt layer(0)
// CHECK: sched.move params layer(0) part(1) host -> ssd prio(writeback)

// Resident parameters, CPU optimizer: the GPU home holds both parts back
// to back (1024 bytes, part 1 at 512), the host slot of a part move is the
// whole block's (part 1 at its 4 KiB-aligned offset within it).
// GPUHOME: {bytes = 1024 : i64, class = "params", home = "gpu", layer = 0 : i64, members = [@w1], offset = 0 : i64, offsets = array<i64: 0>, split = 512 : i64}
// GPUHOME: sched.move params layer(0) part(0) gpu -> host prio(demand) at({{[0-9]+}})
// GPUHOME: sched.task opt deferred layer(0)
// GPUHOME: sched.move params layer(0) part(0) host -> gpu prio(writeback)
// GPUHOME: sched.drop params layer(0) part(0) host
// GPUHOME-NEXT: sched.bind params layer(0) gpu

// bf16-mixed: the overlap's granule doubles (128 elements, 256 bytes of
// the bf16 working copies), so w1 again defers 128 elements; the params
// block (bf16) splits at 256 bytes, the optimizer and master blocks (f32)
// at 512: the same element. A split that leaves the params parts
// unaligned (granule 1 here) is refused.
// RUN: sed 's/^module {/module attributes {train.precision = "bf16-mixed"} {/' %S/Inputs/models/two-layers-16.mlir | spillway-opt --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=2 --sched-order=order=snake --sched-overlap-optimizer=fraction=0.5 --sched-place=placement=params=ssd,optimizer=ssd,gradients=ssd --sched-insert-transfers --sched-assign-buffers | FileCheck %s --check-prefix=MASTER
// MASTER: sched.buffers = {blocks = [
// MASTER-SAME: {bytes = 512 : i64, class = "params", home = "ssd", layer = 0 : i64, members = [@w1], offset = 0 : i64, offsets = array<i64: 0>, split = 256 : i64}
// MASTER-SAME: {bytes = 2048 : i64, class = "optimizer", home = "ssd", layer = 0 : i64, members = [@w1], offset = 8192 : i64, offsets = array<i64: 0>, split = 512 : i64}
// MASTER-SAME: {bytes = 1024 : i64, class = "master", home = "ssd", layer = 0 : i64, members = [@w1], offset = 20480 : i64, offsets = array<i64: 0>, split = 512 : i64}
// MASTER: sched.move master layer(0) part(0) ssd -> host prio(demand)
// RUN: sed 's/optimizer_on = "cpu"/master = "ssd", optimizer_on = "cpu"/' %S/Inputs/insert-transfers-defcpu.mlir | not spillway-opt --sched-insert-transfers --sched-assign-buffers 2>&1 | FileCheck %s --check-prefix=MASTERGRANULE
// MASTERGRANULE: error: 'sched.iteration' op sched-assign-buffers: layer 0 defers 40 bytes of bf16 parameters, not a multiple of 256 (sched-overlap-optimizer's granule must keep the parts aligned in the GPU arena)

// bf16 optimizer state (train-attach-optimizer's state-dtype=bf16): the
// optimizer blocks hold 2 bytes per moment element, so the granule doubles
// as under bf16-mixed (128 elements: 256 bytes of each bf16 moment) and w1
// again defers 128 elements. Every block splits at that element: params
// (f32) at 512 bytes, the optimizer block (1024 bytes: m then v, 512 each)
// at 256 bytes of each moment (part 0: 512 bytes, m's and v's first 256).
// With bf16-mixed as well (STATEMASTER) the granule doubles once, not
// twice: no block holds less than 2 bytes per element, so 128 elements
// align them all (bf16 params 256, bf16 moments 256, f32 master 512). The
// gradients and the pending slices stay f32.
// RUN: spillway-opt %S/Inputs/models/two-layers-16.mlir --train-autodiff --train-attach-optimizer=state-dtype=bf16 --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=2 --sched-order=order=snake --sched-overlap-optimizer=fraction=0.5 --sched-place=placement=params=ssd,optimizer=ssd,gradients=ssd --sched-insert-transfers --sched-assign-buffers | FileCheck %s --check-prefix=STATE
// STATE: sched.buffers = {blocks = [
// STATE-SAME: {bytes = 1024 : i64, class = "params", home = "ssd", layer = 0 : i64, members = [@w1], offset = 0 : i64, offsets = array<i64: 0>, split = 512 : i64}
// STATE-SAME: {bytes = 1024 : i64, class = "optimizer", home = "ssd", layer = 0 : i64, members = [@w1], offset = 8192 : i64, offsets = array<i64: 0>, split = 256 : i64}
// STATE-SAME: {bytes = 1024 : i64, class = "gradients", home = "ssd", layer = 0 : i64, members = [@w1], offset = 16384 : i64, offsets = array<i64: 0>}
// STATE-SAME: {bytes = 192 : i64, class = "optimizer", home = "ssd", layer = 1 : i64, members = [@w2], offset = 24576 : i64, offsets = array<i64: 0>}
// STATE-SAME: {bytes = 512 : i64, class = "pending", home = "host", layer = 0 : i64, members = [@w1], offset = 32768 : i64, offsets = array<i64: 0>}]
// STATE: sched.iteration{{.*}}deferred = array<i64: 128, 0>
// STATE: sched.move optimizer layer(0) part(0) ssd -> host prio(demand)
// RUN: sed 's/^module {/module attributes {train.precision = "bf16-mixed"} {/' %S/Inputs/models/two-layers-16.mlir | spillway-opt --train-autodiff --train-attach-optimizer=state-dtype=bf16 --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=2 --sched-order=order=snake --sched-overlap-optimizer=fraction=0.5 --sched-place=placement=params=ssd,optimizer=ssd,gradients=ssd --sched-insert-transfers --sched-assign-buffers | FileCheck %s --check-prefix=STATEMASTER
// STATEMASTER: sched.buffers = {blocks = [
// STATEMASTER-SAME: {bytes = 512 : i64, class = "params", home = "ssd", layer = 0 : i64, members = [@w1], offset = 0 : i64, offsets = array<i64: 0>, split = 256 : i64}
// STATEMASTER-SAME: {bytes = 1024 : i64, class = "optimizer", home = "ssd", layer = 0 : i64, members = [@w1], offset = 8192 : i64, offsets = array<i64: 0>, split = 256 : i64}
// STATEMASTER-SAME: {bytes = 1024 : i64, class = "master", home = "ssd", layer = 0 : i64, members = [@w1], offset = 20480 : i64, offsets = array<i64: 0>, split = 512 : i64}
// STATEMASTER-SAME: {bytes = 192 : i64, class = "optimizer", home = "ssd", layer = 1 : i64, members = [@w2], offset = 32768 : i64, offsets = array<i64: 0>}
// STATEMASTER: sched.iteration{{.*}}deferred = array<i64: 128, 0>
// A split the fp32 params keep aligned but the bf16 moments do not (64
// elements: 256 bytes of f32, 128 of bf16; granule 32 here, doubled) is
// refused.
// RUN: not spillway-opt %S/Inputs/models/two-layers-16.mlir --train-autodiff --train-attach-optimizer=state-dtype=bf16 --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=2 --sched-order=order=snake "--sched-overlap-optimizer=fraction=0.25 granule=32" --sched-place=placement=params=ssd,optimizer=ssd,gradients=ssd --sched-insert-transfers --sched-assign-buffers 2>&1 | FileCheck %s --check-prefix=STATEGRANULE
// STATEGRANULE: error: 'sched.iteration' op sched-assign-buffers: layer 0 defers 128 bytes of each bf16 optimizer moment, not a multiple of 256 (sched-overlap-optimizer's granule must keep the parts aligned in the GPU arena)
