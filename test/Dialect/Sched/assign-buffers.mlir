// sched-assign-buffers: homes at fixed offsets, copies away from home in
// slot pools, each move's destination offset, the tiers' peaks and the
// bytes per link per iteration; a plan over budget is an error stating the
// smallest budget. Two layers (Inputs/models/two-layers.mlir), two
// micro-batches, snake, parameters on SSD, CPU optimizer (state and
// gradients on host); Inputs/regenerate.sh writes the placed iterations with
// their transfers.
// RUN: spillway-opt %S/Inputs/assign-buffers-ssd.mlir --sched-assign-buffers | FileCheck %s
// RUN: spillway-opt %S/Inputs/assign-buffers-ssd.mlir --sched-assign-buffers=gpu-mem=768 -o /dev/null
// RUN: not spillway-opt %S/Inputs/assign-buffers-ssd.mlir --sched-assign-buffers=gpu-mem=767 2>&1 | FileCheck %s --check-prefix=GPU
// An op naming a layer outside train.layers (a damaged input) is an error.
// RUN: not spillway-opt %S/Inputs/assign-buffers-bad-layer.mlir --sched-assign-buffers 2>&1 | FileCheck %s --check-prefix=BADLAYER
// BADLAYER: error: 'sched.accumulate_grads' op sched-assign-buffers: no layer 7
// RUN: not spillway-opt %S/Inputs/assign-buffers-ssd.mlir --sched-assign-buffers=host-mem=16384 2>&1 | FileCheck %s --check-prefix=HOST
// RUN: not spillway-opt %S/Inputs/two-layers-ordered.mlir --sched-assign-buffers 2>&1 | FileCheck %s --check-prefix=ORDER
// RUN: spillway-opt %S/Inputs/assign-buffers-act.mlir --sched-assign-buffers | FileCheck %s --check-prefix=ACT
// RUN: not spillway-opt %S/Inputs/assign-buffers-act.mlir --sched-assign-buffers=ssd-bytes=8191 2>&1 | FileCheck %s --check-prefix=ACTSSD
// RUN: not spillway-opt %S/Inputs/assign-buffers-act.mlir --sched-assign-buffers=gpu-mem=1791 2>&1 | FileCheck %s --check-prefix=ACTGPU

// Homes: parameters on SSD (w1 at 0, w2 at the next 4 KiB), AdamW state and
// gradients on host, packed per layer. The bytes: three loads from SSD
// (layers 0 1 0: 128 + 96 + 128 bytes) and the optimizer's reads (128 + 96)
// are 576 bytes the model counts, five 4 KiB O_DIRECT reads; the updated
// parameters go back once per layer; one flush per layer crosses d2h.
// CHECK: sched.buffers = {blocks = [
// CHECK-SAME: {bytes = 128 : i64, class = "params", home = "ssd", layer = 0 : i64, members = [@w1], offset = 0 : i64, offsets = array<i64: 0>}
// CHECK-SAME: {bytes = 256 : i64, class = "optimizer", home = "host", layer = 0 : i64, members = [@w1], offset = 0 : i64, offsets = array<i64: 0>}
// CHECK-SAME: {bytes = 128 : i64, class = "gradients", home = "host", layer = 0 : i64, members = [@w1], offset = 4096 : i64, offsets = array<i64: 0>}
// CHECK-SAME: {bytes = 128 : i64, class = "gradstage", layer = 0 : i64, members = [@w1], offsets = array<i64: 0>}
// CHECK-SAME: {bytes = 96 : i64, class = "params", home = "ssd", layer = 1 : i64, members = [@w2], offset = 4096 : i64, offsets = array<i64: 0>}
// CHECK-SAME: bytes_per_iteration = {d2h = 224 : i64, h2d = 352 : i64, ssd_read = 20480 : i64, ssd_write = 8192 : i64}
// CHECK-SAME: gpu_bytes = 768 : i64, host_bytes = 28672 : i64
// CHECK-SAME: model_bytes = {d2h = 224 : i64, h2d = 352 : i64, ssd_read = 576 : i64, ssd_write = 224 : i64}
// CHECK-SAME: ssd_bytes = 8192 : i64
// Two GPU slots for parameters (0 and 256), used in turn; host slots after
// the 16 KiB of homes; the gradient stage after the parameter slots.
// CHECK: sched.move params layer(0) ssd -> host prio(demand) at(16384)
// CHECK: sched.move params layer(1) ssd -> host prio(prefetch) at(20480)
// CHECK: sched.move params layer(0) host -> gpu prio(prefetch) at(0)
// CHECK: sched.move params layer(1) host -> gpu prio(prefetch) at(256)
// CHECK: sched.move params layer(0) ssd -> host prio(prefetch) at(16384)
// CHECK: sched.move params layer(0) host -> gpu prio(prefetch) at(0)
// CHECK: sched.stage_grads gradstage layer(1) first({{.*}}) at(512)
// CHECK: sched.move gradstage layer(1) gpu -> host prio(writeback) at(24576)
// CHECK: sched.accumulate_grads layer(1) first on host at(12288)
// CHECK: sched.stage_grads gradstage layer(0) first({{.*}}) at(512)
// CHECK: sched.accumulate_grads layer(0) first on host at(4096)
// CHECK: sched.move params layer(0) ssd -> host prio(demand) at(16384)
// CHECK: sched.move params layer(0) host -> ssd prio(writeback) at(0)
// CHECK: sched.move params layer(1) ssd -> host prio(demand) at(16384)
// CHECK: sched.move params layer(1) host -> ssd prio(writeback) at(4096)

// GPU: error: 'sched.iteration' op plan over budget: the gpu tier needs 768 bytes for this placement but the budget is 767; the smallest --gpu-mem that fits is 768 bytes
// HOST: error: 'sched.iteration' op plan over budget: the host tier needs 28672 bytes for this placement but the budget is 16384; the smallest --host-mem that fits is 28672 bytes

// Activations on SSD (after sched-recompute), everything else on the GPU;
// the relu's output of each micro-batch (3x8 f32, 96 bytes) is the block's
// input the second layer's backward reads. Activation blocks have no home:
// each copy takes a slot of its tier's activation pool, after the homes and
// the other pools. One GPU slot (both puts and takes are one at a time, at
// 1536 after 1536 bytes of homes), one host staging slot, two SSD slots
// (both activations are on SSD at the turn). Bytes: 2 x 96 each way, one
// 4 KiB O_DIRECT transfer per SSD move.
// ACT: {bytes = 96 : i64, class = "activations", layer = 0 : i64, members = [], offsets = array<i64>}, {bytes = 96 : i64, class = "activations", layer = 1 : i64, members = [], offsets = array<i64>}]
// ACT-SAME: bytes_per_iteration = {d2h = 192 : i64, h2d = 192 : i64, ssd_read = 8192 : i64, ssd_write = 8192 : i64}
// Two host slots: activation 1's SSD write is still in flight when
// activation 0 comes off the GPU (one GPU slot: the write-back to host is
// done by the next put).
// ACT-SAME: gpu_bytes = 1792 : i64, host_bytes = 8192 : i64
// ACT-SAME: model_bytes = {d2h = 192 : i64, h2d = 192 : i64, ssd_read = 192 : i64, ssd_write = 192 : i64}
// ACT-SAME: ssd_bytes = 8192 : i64
// ACT:      sched.put_activation %{{.*}} index(1) at(1536) : tensor<3x8xf32>
// ACT-NEXT: sched.move activations layer(1) gpu -> host prio(writeback) at(0)
// ACT:      sched.move activations layer(1) host -> ssd prio(writeback) at(0)
// ACT:      sched.put_activation %{{.*}} index(0) at(1536)
// ACT-NEXT: sched.move activations layer(0) gpu -> host prio(writeback) at(4096)
// ACT:      sched.move activations layer(0) host -> ssd prio(writeback) at(4096)
// ACT:      sched.move activations layer(0) ssd -> host prio(demand) at(0)
// ACT-NEXT: sched.await
// ACT-NEXT: sched.move activations layer(0) host -> gpu prio(demand) at(1536)
// ACTSSD: error: 'sched.iteration' op plan over budget: the ssd tier needs 8192 bytes for this placement but the budget is 8191; the smallest SSD budget that fits is 8192 bytes
// ACTGPU: error: 'sched.iteration' op plan over budget: the gpu tier needs 1792 bytes for this placement but the budget is 1791; the smallest --gpu-mem that fits is 1792 bytes
// ORDER: error: 'sched.iteration' op sched-assign-buffers: run sched-place and sched-insert-transfers first

// bf16-mixed (train.precision; `master` on the iteration, here by default
// with the optimizer state on host): the params blocks hold the bf16
// working copies, 2 bytes per element (w1: 32 elements, 64 bytes), and
// each layer gets a master block with the f32 masters laid out as the
// fp32 plan's params block (128 bytes), homed after the layer's gradients.
// The loads and the update's params moves carry half of fp32's bytes, and
// the update, which rewrites the working copies from the masters, reads
// none (sched.alloc: a copy in the host pool, at(...)): the model's SSD
// read 576 -> 176 (the three loads' 64 + 48 + 64), write 224 -> 112, h2d
// 352 -> 176; the masters stay on host where the CPU optimizer runs them.
// RUN: sed 's/^module attributes {/module attributes {train.precision = "bf16-mixed", /' %S/Inputs/two-layers-ordered.mlir | spillway-opt --sched-place=placement=params=ssd,optimizer=host,gradients=host --sched-insert-transfers --sched-assign-buffers | FileCheck %s --check-prefix=MASTER
// MASTER: sched.buffers = {blocks = [
// MASTER-SAME: {bytes = 64 : i64, class = "params", home = "ssd", layer = 0 : i64, members = [@w1], offset = 0 : i64, offsets = array<i64: 0>}
// MASTER-SAME: {bytes = 256 : i64, class = "optimizer", home = "host", layer = 0 : i64, members = [@w1], offset = 0 : i64, offsets = array<i64: 0>}
// MASTER-SAME: {bytes = 128 : i64, class = "master", home = "host", layer = 0 : i64, members = [@w1], offset = 8192 : i64, offsets = array<i64: 0>}
// MASTER-SAME: {bytes = 48 : i64, class = "params", home = "ssd", layer = 1 : i64, members = [@w2], offset = 4096 : i64, offsets = array<i64: 0>}
// MASTER-SAME: {bytes = 96 : i64, class = "master", home = "host", layer = 1 : i64, members = [@w2], offset = 20480 : i64, offsets = array<i64: 0>}
// MASTER-SAME: model_bytes = {d2h = 224 : i64, h2d = 176 : i64, ssd_read = 176 : i64, ssd_write = 112 : i64}
// MASTER: sched.bind master layer(0) host
// MASTER-NEXT: sched.alloc params layer(0) host at({{[0-9]+}})
// MASTER-NEXT: sched.bind params layer(0) host

// bf16 optimizer state (train.optimizer_state_dtype = "bf16",
// train-attach-optimizer's state-dtype): every optimizer block holds its
// members' m and v at 2 bytes per element, half of fp32's: w1's (32
// elements) is 128 bytes, not 256, m at 0 and v at 64; the other classes
// are those of the fp32 plan (CHECK). With bf16-mixed too (STATEMASTER)
// the optimizer blocks are as small next to the bf16 params and f32
// master blocks of MASTER.
// RUN: sed 's/^module attributes {/module attributes {train.optimizer_state_dtype = "bf16", /' %S/Inputs/two-layers-ordered.mlir | spillway-opt --sched-place=placement=params=ssd,optimizer=host,gradients=host --sched-insert-transfers --sched-assign-buffers | FileCheck %s --check-prefix=STATE
// STATE: sched.buffers = {blocks = [
// STATE-SAME: {bytes = 128 : i64, class = "params", home = "ssd", layer = 0 : i64, members = [@w1], offset = 0 : i64, offsets = array<i64: 0>}
// STATE-SAME: {bytes = 128 : i64, class = "optimizer", home = "host", layer = 0 : i64, members = [@w1], offset = 0 : i64, offsets = array<i64: 0>}
// STATE-SAME: {bytes = 128 : i64, class = "gradients", home = "host", layer = 0 : i64, members = [@w1], offset = 4096 : i64, offsets = array<i64: 0>}
// STATE-SAME: {bytes = 96 : i64, class = "optimizer", home = "host", layer = 1 : i64, members = [@w2], offset = 8192 : i64, offsets = array<i64: 0>}
// STATE-SAME: model_bytes = {d2h = 224 : i64, h2d = 352 : i64, ssd_read = 576 : i64, ssd_write = 224 : i64}
// RUN: sed 's/^module attributes {/module attributes {train.precision = "bf16-mixed", train.optimizer_state_dtype = "bf16", /' %S/Inputs/two-layers-ordered.mlir | spillway-opt --sched-place=placement=params=ssd,optimizer=host,gradients=host --sched-insert-transfers --sched-assign-buffers | FileCheck %s --check-prefix=STATEMASTER
// STATEMASTER: sched.buffers = {blocks = [
// STATEMASTER-SAME: {bytes = 64 : i64, class = "params", home = "ssd", layer = 0 : i64, members = [@w1], offset = 0 : i64, offsets = array<i64: 0>}
// STATEMASTER-SAME: {bytes = 128 : i64, class = "optimizer", home = "host", layer = 0 : i64, members = [@w1], offset = 0 : i64, offsets = array<i64: 0>}
// STATEMASTER-SAME: {bytes = 128 : i64, class = "master", home = "host", layer = 0 : i64, members = [@w1], offset = 8192 : i64, offsets = array<i64: 0>}
// STATEMASTER-SAME: {bytes = 48 : i64, class = "params", home = "ssd", layer = 1 : i64, members = [@w2], offset = 4096 : i64, offsets = array<i64: 0>}
// STATEMASTER-SAME: {bytes = 96 : i64, class = "optimizer", home = "host", layer = 1 : i64, members = [@w2], offset = 12288 : i64, offsets = array<i64: 0>}
// STATEMASTER-SAME: model_bytes = {d2h = 224 : i64, h2d = 176 : i64, ssd_read = 176 : i64, ssd_write = 112 : i64}
// Members' offsets halve too: layer 1 of Inputs/insert-transfers-defgpu.mlir
// holds fc.weight (16 elements: 32 bytes of bf16 m) then fc.bias, whose m
// starts at 32, not 64; the block is 80 bytes, not 160.
// RUN: sed 's/^module attributes {/module attributes {train.optimizer_state_dtype = "bf16", /' %S/Inputs/insert-transfers-defgpu.mlir | spillway-opt --sched-insert-transfers --sched-assign-buffers | FileCheck %s --check-prefix=STATEOFFSETS
// STATEOFFSETS: {bytes = 160 : i64, class = "optimizer", home = "gpu", layer = 0 : i64, members = [@embed.weight], offset = 0 : i64, offsets = array<i64: 0>}
// STATEOFFSETS-SAME: {bytes = 80 : i64, class = "optimizer", home = "gpu", layer = 1 : i64, members = [@blocks.0.fc.weight, @blocks.0.fc.bias], offset = 512 : i64, offsets = array<i64: 0, 32>}
// FOAM's folded state halves as well: w1 (16x16, level 2: 16 x 4 = 64
// elements per moment) keeps 256 bytes, not 512; w2 (the head) AdamW's 48
// elements, 192 bytes, not 384. On SSD the state is read and written once
// per iteration: 896 bytes each way with fp32 state (FOAM32), 448 with bf16.
// RUN: spillway-opt %S/Inputs/models/two-layers-16.mlir --train-autodiff --train-attach-optimizer="optimizer=foam" --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=2 --sched-order=order=snake --sched-place=placement=params=ssd,optimizer=ssd,gradients=ssd --sched-insert-transfers --sched-assign-buffers | FileCheck %s --check-prefix=FOAM32
// RUN: spillway-opt %S/Inputs/models/two-layers-16.mlir --train-autodiff --train-attach-optimizer="optimizer=foam state-dtype=bf16" --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=2 --sched-order=order=snake --sched-place=placement=params=ssd,optimizer=ssd,gradients=ssd --sched-insert-transfers --sched-assign-buffers | FileCheck %s --check-prefix=FOAM16
// FOAM32: {bytes = 512 : i64, class = "optimizer", home = "ssd", layer = 0 : i64, members = [@w1], offset = 4096 : i64, offsets = array<i64: 0>}
// FOAM32: {bytes = 384 : i64, class = "optimizer", home = "ssd", layer = 1 : i64, members = [@w2], offset = 16384 : i64, offsets = array<i64: 0>}
// FOAM32: model_bytes = {d2h = 1216 : i64, h2d = 2240 : i64, ssd_read = 5568 : i64, ssd_write = 3328 : i64}
// FOAM16: {bytes = 256 : i64, class = "optimizer", home = "ssd", layer = 0 : i64, members = [@w1], offset = 4096 : i64, offsets = array<i64: 0>}
// FOAM16: {bytes = 192 : i64, class = "optimizer", home = "ssd", layer = 1 : i64, members = [@w2], offset = 16384 : i64, offsets = array<i64: 0>}
// FOAM16: model_bytes = {d2h = 1216 : i64, h2d = 2240 : i64, ssd_read = 5120 : i64, ssd_write = 2880 : i64}

// ZeRO over N ranks (train.optimizer_state_shards, train-attach-optimizer's
// state-shards): each member of an optimizer block holds one rank's shard
// of each moment, in a slot of the largest rank's (cut at 64 elements):
// w1 (256 elements) keeps 128 per moment with 2 ranks (1024 bytes, not
// 2048) and 64 with 4; w2 (48 elements, under one cut) is the last rank's
// whole. The SSD moves only the slots.
// RUN: spillway-opt %S/Inputs/models/two-layers-16.mlir --train-autodiff --train-attach-optimizer="state-shards=2" --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=2 --sched-order=order=snake --sched-place=placement=params=ssd,optimizer=ssd,gradients=ssd --sched-insert-transfers --sched-assign-buffers | FileCheck %s --check-prefix=ZERO2
// RUN: spillway-opt %S/Inputs/models/two-layers-16.mlir --train-autodiff --train-attach-optimizer="state-shards=4" --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=2 --sched-order=order=snake --sched-place=placement=params=ssd,optimizer=ssd,gradients=ssd --sched-insert-transfers --sched-assign-buffers | FileCheck %s --check-prefix=ZERO4
// ZERO2: {bytes = 1024 : i64, class = "optimizer", home = "ssd", layer = 0 : i64, members = [@w1], offset = 4096 : i64, offsets = array<i64: 0>}
// ZERO2: {bytes = 384 : i64, class = "optimizer", home = "ssd", layer = 1 : i64, members = [@w2], offset = 16384 : i64, offsets = array<i64: 0>}
// ZERO2: model_bytes = {d2h = 1216 : i64, h2d = 2240 : i64, ssd_read = 6080 : i64, ssd_write = 3840 : i64}
// ZERO4: {bytes = 512 : i64, class = "optimizer", home = "ssd", layer = 0 : i64, members = [@w1], offset = 4096 : i64, offsets = array<i64: 0>}
// ZERO4: {bytes = 384 : i64, class = "optimizer", home = "ssd", layer = 1 : i64, members = [@w2], offset = 16384 : i64, offsets = array<i64: 0>}
// ZERO4: model_bytes = {d2h = 1216 : i64, h2d = 2240 : i64, ssd_read = 5568 : i64, ssd_write = 3328 : i64}
// ZeRO stage 2 (shard-gradients): the gradient and gradstage blocks are cut
// as a master block is (4-byte elements): w1's gradient keeps 128 of its
// 256 elements with 2 ranks (512 bytes, not 1024), w2's is the last rank's
// whole. d2h carries the staged shards (704 bytes, not ZERO2's 1216) and
// the SSD 512 bytes fewer each way than ZERO2.
// RUN: spillway-opt %S/Inputs/models/two-layers-16.mlir --train-autodiff --train-attach-optimizer="state-shards=2 shard-gradients=true" --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=2 --sched-order=order=snake --sched-place=placement=params=ssd,optimizer=ssd,gradients=ssd --sched-insert-transfers --sched-assign-buffers | FileCheck %s --check-prefix=ZEROGRAD
// ZEROGRAD: {bytes = 512 : i64, class = "gradients", home = "ssd", layer = 0 : i64, members = [@w1], offset = 8192 : i64, offsets = array<i64: 0>}
// ZEROGRAD: {bytes = 512 : i64, class = "gradstage", layer = 0 : i64, members = [@w1], offsets = array<i64: 0>}
// ZEROGRAD: {bytes = 192 : i64, class = "gradients", home = "ssd", layer = 1 : i64, members = [@w2], offset = 20480 : i64, offsets = array<i64: 0>}
// ZEROGRAD: model_bytes = {d2h = 704 : i64, h2d = 2240 : i64, ssd_read = 5568 : i64, ssd_write = 3328 : i64}
// With the optimizer overlap (half of w1's 256 elements deferred) the
// deferral cuts a rank's shard of w1 in two: its slot is two sub-slots, the
// most any rank holds of [0, 128) then of [128, 256), part 0 ending after
// the first (on the 256-byte granule). With 2 ranks each rank's shard is
// one half, so the slot is w1's whole 256 elements (2048 bytes: the
// straddling member keeps room for both pieces); with 4, 64 + 64. The
// params block splits at the global element (128: 512 bytes).
// RUN: spillway-opt %S/Inputs/models/two-layers-16.mlir --train-autodiff --train-attach-optimizer="state-shards=2" --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=2 --sched-order=order=snake --sched-overlap-optimizer=fraction=0.5 --sched-place=placement=params=ssd,optimizer=ssd,gradients=ssd --sched-insert-transfers --sched-assign-buffers | FileCheck %s --check-prefix=ZEROSPLIT
// RUN: spillway-opt %S/Inputs/models/two-layers-16.mlir --train-autodiff --train-attach-optimizer="state-shards=4" --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=2 --sched-order=order=snake --sched-overlap-optimizer=fraction=0.5 --sched-place=placement=params=ssd,optimizer=ssd,gradients=ssd --sched-insert-transfers --sched-assign-buffers | FileCheck %s --check-prefix=ZEROSPLIT4
// ZEROSPLIT: {bytes = 1024 : i64, class = "params", home = "ssd", layer = 0 : i64, members = [@w1], offset = 0 : i64, offsets = array<i64: 0>, split = 512 : i64}
// ZEROSPLIT: {bytes = 2048 : i64, class = "optimizer", home = "ssd", layer = 0 : i64, members = [@w1], offset = 8192 : i64, offsets = array<i64: 0>, split = 512 : i64}
// ZEROSPLIT4: {bytes = 1024 : i64, class = "params", home = "ssd", layer = 0 : i64, members = [@w1], offset = 0 : i64, offsets = array<i64: 0>, split = 512 : i64}
// ZEROSPLIT4: {bytes = 1024 : i64, class = "optimizer", home = "ssd", layer = 0 : i64, members = [@w1], offset = 8192 : i64, offsets = array<i64: 0>, split = 256 : i64}
// bf16-mixed master blocks are sharded like the state: each rank's holds
// its shard of every member's f32 values (w1: 128 of 256 elements with 2
// ranks, 512 bytes, not 1024; w2, under one cut, the last rank's whole),
// so the SSD moves 1536 bytes fewer each way than one process's plan (1024
// of AdamW state, 512 of masters); the
// params blocks keep every bf16 working copy. With the overlap the master
// is cut where the state is (w1 in two sub-slots of 64 elements with 4
// ranks: split at 256 bytes).
// RUN: spillway-opt %S/Inputs/models/two-layers-16.mlir --train-mixed-precision --train-autodiff --train-attach-optimizer="state-shards=1" --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=2 --sched-order=order=snake --sched-place=placement=params=ssd,optimizer=ssd,gradients=ssd,master=ssd --sched-insert-transfers --sched-assign-buffers | FileCheck %s --check-prefix=MASTER1
// RUN: spillway-opt %S/Inputs/models/two-layers-16.mlir --train-mixed-precision --train-autodiff --train-attach-optimizer="state-shards=2" --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=2 --sched-order=order=snake --sched-place=placement=params=ssd,optimizer=ssd,gradients=ssd,master=ssd --sched-insert-transfers --sched-assign-buffers | FileCheck %s --check-prefix=ZEROMASTER
// RUN: spillway-opt %S/Inputs/models/two-layers-16.mlir --train-mixed-precision --train-autodiff --train-attach-optimizer="state-shards=4" --train-partition-layers --convert-train-to-sched --sched-microbatch=microbatches=2 --sched-order=order=snake --sched-overlap-optimizer=fraction=0.5 --sched-place=placement=params=ssd,optimizer=ssd,gradients=ssd,master=ssd --sched-insert-transfers --sched-assign-buffers | FileCheck %s --check-prefix=ZEROMASTER4
// MASTER1: {bytes = 1024 : i64, class = "master", home = "ssd", layer = 0 : i64, members = [@w1], offset = 12288 : i64, offsets = array<i64: 0>}
// MASTER1: model_bytes = {d2h = 1216 : i64, h2d = 1120 : i64, ssd_read = 5984 : i64, ssd_write = 5472 : i64}
// ZEROMASTER: {bytes = 512 : i64, class = "params", home = "ssd", layer = 0 : i64, members = [@w1], offset = 0 : i64, offsets = array<i64: 0>}
// ZEROMASTER: {bytes = 512 : i64, class = "master", home = "ssd", layer = 0 : i64, members = [@w1], offset = 12288 : i64, offsets = array<i64: 0>}
// ZEROMASTER: {bytes = 192 : i64, class = "master", home = "ssd", layer = 1 : i64, members = [@w2], offset = 28672 : i64, offsets = array<i64: 0>}
// ZEROMASTER: model_bytes = {d2h = 1216 : i64, h2d = 1120 : i64, ssd_read = 4448 : i64, ssd_write = 3936 : i64}
// ZEROMASTER4: {bytes = 512 : i64, class = "params", home = "ssd", layer = 0 : i64, members = [@w1], offset = 0 : i64, offsets = array<i64: 0>, split = 256 : i64}
// ZEROMASTER4: {bytes = 512 : i64, class = "master", home = "ssd", layer = 0 : i64, members = [@w1], offset = 20480 : i64, offsets = array<i64: 0>, split = 256 : i64}

// A placement split by layer (params=ssd,params[0:1]=host,
// optimizer=host:0.5,ssd:0.5, gradients=ssd,gradients[1:]=host): each
// block is homed on its layer's tier, packed per tier in layer order, and
// the links carry only the SSD-homed blocks' bytes: w2's parameters (a
// load and the update's read, the update's write: 96 + 96 read, 96
// written), its state (192 each way) and w1's gradients (128 each way).
// RUN: spillway-opt %S/Inputs/assign-buffers-layers.mlir --sched-assign-buffers | FileCheck %s --check-prefix=LAYERS
// RUN: spillway-opt %S/Inputs/assign-buffers-cut.mlir --sched-assign-buffers | FileCheck %s --check-prefix=CUT
// RUN: sed 's/array<i64: 0, 2048>/array<i64: 0, 1000>/g' %S/Inputs/assign-buffers-cut.mlir | not spillway-opt --sched-assign-buffers 2>&1 | FileCheck %s --check-prefix=CUTALIGN
// RUN: sed 's/array<i64: 0, 2048>/array<i64: 0, 4096>/g' %S/Inputs/assign-buffers-cut.mlir | not spillway-opt --sched-assign-buffers 2>&1 | FileCheck %s --check-prefix=CUTALL
// RUN: sed 's/array<i64: 0, 2048>/array<i64: 3, 2048>/g' %S/Inputs/assign-buffers-cut.mlir | not spillway-opt --sched-assign-buffers 2>&1 | FileCheck %s --check-prefix=CUTPAST
// RUN: not spillway-opt %S/Inputs/models/two-layers-64.mlir --train-autodiff --train-attach-optimizer=state-shards=2 --train-partition-layers --convert-train-to-sched --sched-order "--sched-place=placement=params=ssd,optimizer=ssd,optimizer[0]=host:0.5,ssd:0.5" --sched-insert-transfers --sched-assign-buffers 2>&1 | FileCheck %s --check-prefix=CUTZERO
// LAYERS: sched.buffers = {blocks = [
// LAYERS-SAME: {bytes = 128 : i64, class = "params", home = "host", layer = 0 : i64, members = [@w1], offset = 0 : i64
// LAYERS-SAME: {bytes = 256 : i64, class = "optimizer", home = "host", layer = 0 : i64, members = [@w1], offset = 4096 : i64
// LAYERS-SAME: {bytes = 128 : i64, class = "gradients", home = "ssd", layer = 0 : i64, members = [@w1], offset = 0 : i64
// LAYERS-SAME: {bytes = 96 : i64, class = "params", home = "ssd", layer = 1 : i64, members = [@w2], offset = 4096 : i64
// LAYERS-SAME: {bytes = 192 : i64, class = "optimizer", home = "ssd", layer = 1 : i64, members = [@w2], offset = 8192 : i64
// LAYERS-SAME: {bytes = 96 : i64, class = "gradients", home = "host", layer = 1 : i64, members = [@w2], offset = 8192 : i64
// LAYERS-SAME: model_bytes = {d2h = 224 : i64, h2d = 352 : i64, ssd_read = 512 : i64, ssd_write = 416 : i64}

// Layer 0's params and optimizer blocks cut at element 2048: each split
// there (params: 8192 bytes; optimizer: 8192 of m and of v), part 1 homed
// on SSD in an extent with room for the whole block, part 0 on host in one
// of its own size (8192 and 16384 bytes), packed before the gradients.
// CUT:      class = "params", home = "ssd", home0 = "host", layer = 0 : i64, members = [@w1], offset = 0 : i64, offset0 = 0 : i64, offsets = array<i64: 0>, split = 8192 : i64
// CUT-SAME: class = "optimizer", home = "ssd", home0 = "host", layer = 0 : i64, members = [@w1], offset = 16384 : i64, offset0 = 8192 : i64, offsets = array<i64: 0>, split = 8192 : i64
// CUT-SAME: class = "gradients", home = "host", layer = 0 : i64, members = [@w1], offset = 24576 : i64
// Per iteration the SSD moves part 1 only: two loads and the update's read
// of params part 1 (3 x 8192), optimizer part 1 (16384) read and written,
// params part 1 written back (8192), and the other layers' whole blocks.
// CUT-SAME: model_bytes = {d2h = 17408 : i64, h2d = 34048 : i64, ssd_read = 45312 : i64, ssd_write = 27648 : i64}
// CUTALIGN: error: 'sched.iteration' op sched-assign-buffers: layer 0 is cut at element 1000 and 4000 bytes of its parameters are not a multiple of 256 (cut on the overlap's granule, as sched-place rounds a cut)
// CUTALL: error: 'sched.iteration' op sched-assign-buffers: layer 0 is cut at element 4096 but it has 4096 elements
// CUTPAST: error: 'sched.iteration' op sched-assign-buffers: the placement cuts optimizer of layer 3, train.layers has 3
// CUTZERO: error: 'sched.iteration' op sched-assign-buffers: layer 0 is cut at element 2048 but its optimizer state is sharded over 2 ranks (ZeRO): place the layer whole
