// sched-place: the placement becomes the iteration's attributes; what the
// executor cannot run is refused. The inputs are Inputs/models/two-layers.mlir
// in sched form, ordered (and recomputed for ACT); Inputs/regenerate.sh
// writes them.
// RUN: spillway-opt %S/Inputs/two-layers-ordered.mlir "--sched-place=placement=params=ssd,optimizer=host,gradients=host" | FileCheck %s --check-prefix=PLACED
// RUN: spillway-opt %S/Inputs/two-layers-ordered.mlir "--sched-place=placement=optimizer=gpu" | FileCheck %s --check-prefix=GPUOPT
// RUN: spillway-opt %S/Inputs/two-layers-recomputed.mlir "--sched-place=placement=activations=ssd" | FileCheck %s --check-prefix=ACT
// RUN: not spillway-opt %S/Inputs/two-layers-ordered.mlir "--sched-place=placement=activations=host" 2>&1 | FileCheck %s --check-prefix=NORECOMPUTE
// RUN: not spillway-opt %S/Inputs/two-layers-ordered.mlir "--sched-place=placement=master=host" 2>&1 | FileCheck %s --check-prefix=MASTER
// RUN: not spillway-opt %S/Inputs/two-layers-ordered.mlir "--sched-place=placement=weights=host" 2>&1 | FileCheck %s --check-prefix=CLASS
// RUN: not spillway-opt %S/Inputs/two-layers-ordered.mlir "--sched-place=placement=params=nvme" 2>&1 | FileCheck %s --check-prefix=TIER
// RUN: not spillway-opt %S/Inputs/two-layers-ordered.mlir "--sched-place=placement=params=ssd,params=host" 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not spillway-opt %S/Inputs/two-layers-ordered.mlir "--sched-place=placement=params" 2>&1 | FileCheck %s --check-prefix=SYNTAX
// RUN: not spillway-opt %S/Inputs/two-layers-sched.mlir --sched-place 2>&1 | FileCheck %s --check-prefix=UNORDERED
// RUN: not spillway-opt %S/Inputs/models/two-layers.mlir --sched-place 2>&1 | FileCheck %s --check-prefix=NOITER

// Classes not named stay on the GPU; the optimizer runs on the CPU unless
// its state is on the GPU.
// PLACED: sched.iteration
// PLACED-SAME: optimizer_on = "cpu"
// PLACED-SAME: placement = #sched.placement<params = ssd, optimizer = host, gradients = host, activations = gpu>
// GPUOPT: optimizer_on = "gpu"
// GPUOPT-SAME: placement = #sched.placement<params = gpu, optimizer = gpu, gradients = gpu, activations = gpu>
// Activations off the GPU need sched-recompute: without it the backward
// reads forward intermediates (here the logits) the plan would not move.
// ACT: placement = #sched.placement<params = gpu, optimizer = gpu, gradients = gpu, activations = ssd>
// NORECOMPUTE: error: 'sched.task' op sched-place: activations=host needs sched-recompute first: result #{{[0-9]+}} is a forward intermediate only the backward reads; run sched-recompute (spillwayc --recompute on, the default) or place activations=gpu
// MASTER: error: sched-place: 'master': there are no separate master weights to place; the f32 parameters are their own master weights, so place them with params=TIER (a model compiled with --precision bf16-mixed has f32 master weights next to its bf16 parameters)
// CLASS: error: sched-place: unknown tensor class 'weights' (classes: params, optimizer, gradients, activations, and master under bf16-mixed)
// TIER: error: sched-place: unknown tier 'nvme' for params (tiers: gpu, host, ssd)
// TWICE: error: sched-place: class 'params' is placed twice
// SYNTAX: error: sched-place: 'params' is not CLASS=TIER (e.g. params=ssd,
// UNORDERED: error: 'sched.iteration' op sched-place: order the tasks first (sched-order)
// NOITER: error: sched-place: no sched.iteration to place (run convert-train-to-sched first)

// Under bf16-mixed (train.precision) the f32 master weights are a class of
// their own (`master` on the iteration: the params blocks then hold the
// bf16 working copies): placed, or by default with the optimizer state;
// on the GPU exactly when the optimizer state is (the update reads and
// writes both where it runs).
// RUN: sed 's/^module attributes {/module attributes {train.precision = "bf16-mixed", /' %S/Inputs/two-layers-ordered.mlir > %t.mixed.mlir
// RUN: spillway-opt %t.mixed.mlir "--sched-place=placement=params=ssd,optimizer=host,master=ssd" | FileCheck %s --check-prefix=MIXED
// RUN: spillway-opt %t.mixed.mlir "--sched-place=placement=params=ssd,optimizer=ssd" | FileCheck %s --check-prefix=MIXEDDEFAULT
// RUN: spillway-opt %t.mixed.mlir "--sched-place=placement=params=host" | FileCheck %s --check-prefix=MIXEDGPU
// RUN: not spillway-opt %t.mixed.mlir "--sched-place=placement=optimizer=host,master=gpu" 2>&1 | FileCheck %s --check-prefix=MIXEDSPLIT
// RUN: not spillway-opt %t.mixed.mlir "--sched-place=placement=master=host" 2>&1 | FileCheck %s --check-prefix=MIXEDSPLIT2
// MIXED: sched.iteration
// MIXED-SAME: master = "ssd"
// MIXED-SAME: optimizer_on = "cpu"
// MIXEDDEFAULT: master = "ssd"
// MIXEDGPU: master = "gpu"
// MIXEDGPU-SAME: optimizer_on = "gpu"
// MIXEDSPLIT: error: sched-place: master=gpu with optimizer=host: the update reads and writes the master weights where it runs, so they are on the GPU when the optimizer state is (GPU optimizer) and off it when it is not (CPU optimizer)
// MIXEDSPLIT2: error: sched-place: master=host with optimizer=gpu: the update

// A class may be split by layer between host and
// SSD (docs/compiler.md, "Placement by layer"): ranges of train.layers
// (BEGIN or END may be left out), or fractions of the class's bytes taken
// by layer in order, each layer weighed by its parameters' bytes (@w1 128,
// @w2 96: host:0.5 holds the layer whose middle byte is in the first 112).
// The class's tier is the slowest of its layers'; under bf16-mixed the
// master weights follow the optimizer state's split unless placed.
// RUN: spillway-opt %S/Inputs/two-layers-ordered.mlir "--sched-place=placement=params=ssd,params[0:1]=host,optimizer=host:0.5,ssd:0.5,gradients=host,gradients[1:]=ssd" | FileCheck %s --check-prefix=SPLIT
// RUN: spillway-opt %S/Inputs/two-layers-ordered.mlir "--sched-place=placement=params=host,params[1:2]=host,optimizer=ssd:0.1,host:0.9" | FileCheck %s --check-prefix=ONETIER
// RUN: spillway-opt %t.mixed.mlir "--sched-place=placement=params=ssd,optimizer=ssd,optimizer[0:1]=host" | FileCheck %s --check-prefix=MIXEDLAYERS
// SPLIT: sched.iteration
// SPLIT-SAME: optimizer_on = "cpu"
// SPLIT-SAME: placement = #sched.placement<params = ssd, optimizer = ssd, gradients = ssd, activations = gpu, layers = {gradients = array<i32: 1, 2>, optimizer = array<i32: 1, 2>, params = array<i32: 1, 2>}>
// A split that puts every layer on one tier is that tier, whole; a share
// that holds no layer is said, with the share that would take one.
// ONETIER: placement = #sched.placement<params = host, optimizer = host, gradients = gpu, activations = gpu>}
// RUN: spillway-opt %S/Inputs/two-layers-ordered.mlir "--sched-place=placement=params=host,optimizer=ssd:0.1,host:0.9" 2>&1 >/dev/null | FileCheck %s --check-prefix=NOLAYER
// NOLAYER: warning: sched-place: 'optimizer=ssd:0.1,host:0.9': ssd's fraction 0.1 holds no layer of optimizer (a layer goes whole to the tier whose share holds its middle byte; a share above 0.286 would take layer 0)
// MIXEDLAYERS: master = "ssd"
// MIXEDLAYERS-SAME: layers = {master = array<i32: 1, 2>, optimizer = array<i32: 1, 2>}
// The parameters, alone, may keep layers resident on the GPU.
// RUN: spillway-opt %S/Inputs/two-layers-ordered.mlir "--sched-place=placement=params[0:1]=gpu,params=host" | FileCheck %s --check-prefix=GPUPARAMS
// GPUPARAMS: placement = #sched.placement<params = host, optimizer = gpu, gradients = gpu, activations = gpu, layers = {params = array<i32: 0, 1>}>
// The activations split by layer too, a layer's those its forward tasks
// produce; they may keep layers on the GPU.
// RUN: spillway-opt %S/Inputs/two-layers-recomputed.mlir "--sched-place=placement=activations=host,activations[1:]=ssd" | FileCheck %s --check-prefix=ACTLAYERS
// RUN: spillway-opt %S/Inputs/two-layers-recomputed.mlir "--sched-place=placement=activations[1:]=host" | FileCheck %s --check-prefix=ACTGPU
// ACTLAYERS: placement = #sched.placement<params = gpu, optimizer = gpu, gradients = gpu, activations = ssd, layers = {activations = array<i32: 1, 2>}>
// ACTGPU: placement = #sched.placement<params = gpu, optimizer = gpu, gradients = gpu, activations = host, layers = {activations = array<i32: 0, 1>}>
// Master layers no range of their own names stay with the optimizer state.
// RUN: spillway-opt %t.mixed.mlir "--sched-place=placement=params=ssd,optimizer=host,master[0:1]=ssd" | FileCheck %s --check-prefix=MASTERRANGE
// MASTERRANGE: master = "ssd"
// MASTERRANGE-SAME: layers = {master = array<i32: 2, 1>}

// What a split cannot be is refused, naming the item.
// RUN: not spillway-opt %S/Inputs/two-layers-ordered.mlir "--sched-place=placement=params[0:3]=host" 2>&1 | FileCheck %s --check-prefix=PASTEND
// RUN: not spillway-opt %S/Inputs/two-layers-ordered.mlir "--sched-place=placement=gradients[0:1]=host" 2>&1 | FileCheck %s --check-prefix=ONGPU
// RUN: not spillway-opt %S/Inputs/two-layers-recomputed.mlir "--sched-place=placement=activations=host:0.5,ssd:0.5" 2>&1 | FileCheck %s --check-prefix=ACTSPLIT
// RUN: not spillway-opt %S/Inputs/two-layers-ordered.mlir "--sched-place=placement=activations=gpu,activations[1:]=ssd" 2>&1 | FileCheck %s --check-prefix=ACTNORECOMPUTE
// RUN: not spillway-opt %S/Inputs/two-layers-ordered.mlir "--sched-place=placement=params[1:1]=host" 2>&1 | FileCheck %s --check-prefix=EMPTYRANGE
// RUN: not spillway-opt %S/Inputs/two-layers-ordered.mlir "--sched-place=placement=optimizer=host:0.5,ssd:0.4" 2>&1 | FileCheck %s --check-prefix=SUM
// RUN: not spillway-opt %S/Inputs/two-layers-ordered.mlir "--sched-place=placement=params=ssd,params[0:2]=host,params[1:2]=ssd" 2>&1 | FileCheck %s --check-prefix=OVERLAP
// RUN: not spillway-opt %S/Inputs/two-layers-ordered.mlir "--sched-place=placement=params[0:1]=host,params=host:0.5,ssd:0.5" 2>&1 | FileCheck %s --check-prefix=BOTH
// RUN: not spillway-opt %S/Inputs/two-layers-ordered.mlir "--sched-place=placement=optimizer=host:x,ssd:0.5" 2>&1 | FileCheck %s --check-prefix=FRACTION
// RUN: spillway-opt %S/Inputs/models/two-layers-64.mlir --train-autodiff --train-attach-optimizer --train-partition-layers --convert-train-to-sched --sched-order -o %t.64.mlir
// RUN: spillway-opt %t.64.mlir "--sched-place=placement=params=ssd,optimizer=ssd,optimizer[0]=host:0.3,ssd:0.7" | FileCheck %s --check-prefix=CUT
// RUN: sed 's/^module attributes {/module attributes {train.precision = "bf16-mixed", /' %t.64.mlir | spillway-opt "--sched-place=placement=params=ssd,optimizer=ssd,optimizer[0]=host:0.3,ssd:0.7" | FileCheck %s --check-prefix=CUTMASTER
// RUN: not spillway-opt %t.64.mlir "--sched-place=placement=params=ssd,params[0]=host:0.5,ssd:0.5,optimizer=ssd,optimizer[0]=host:0.25,ssd:0.75" 2>&1 | FileCheck %s --check-prefix=CUTTWO
// RUN: not spillway-opt %t.64.mlir "--sched-place=placement=gradients=ssd,gradients[0]=host:0.5,ssd:0.5" 2>&1 | FileCheck %s --check-prefix=CUTGRAD
// RUN: not spillway-opt %t.64.mlir "--sched-place=placement=optimizer=ssd,optimizer[0]=ssd:0.5,host:0.5" 2>&1 | FileCheck %s --check-prefix=CUTORDER
// RUN: not spillway-opt %t.64.mlir "--sched-place=placement=optimizer=ssd,optimizer[0]=host:0.5,ssd:0.4" 2>&1 | FileCheck %s --check-prefix=CUTSUM
// RUN: not spillway-opt %t.64.mlir "--sched-place=placement=optimizer=ssd,optimizer[5]=host:0.5,ssd:0.5" 2>&1 | FileCheck %s --check-prefix=CUTPAST
// RUN: not spillway-opt %t.64.mlir "--sched-place=placement=optimizer=ssd,optimizer[1]=host:0.2,ssd:0.8" 2>&1 | FileCheck %s --check-prefix=CUTEMPTY
// RUN: not spillway-opt %t.64.mlir "--sched-place=placement=optimizer=ssd,optimizer[0:1]=host,optimizer[0]=host:0.5,ssd:0.5" 2>&1 | FileCheck %s --check-prefix=CUTRANGE
// RUN: not spillway-opt %t.64.mlir "--sched-place=placement=optimizer=host:0.5,ssd:0.5,optimizer[0]=host:0.5,ssd:0.5" 2>&1 | FileCheck %s --check-prefix=CUTFRACTIONS
// PASTEND: error: sched-place: 'params[0:3]=host': the model has 2 layers (0..1 in train.layers; spillwayc --report lists them)
// ONGPU: error: sched-place: 'gradients[0:1]=host' leaves layer 1 of gradients on the GPU and others off it: a class split by layer lives on host and SSD (the GPU's tier is all of a class or none, but for params
// ONGPU-SAME: place the rest with gradients=host or gradients=ssd
// ACTSPLIT: error: sched-place: 'activations=host:0.5,ssd:0.5': activations take layer ranges (e.g. activations=ssd,activations[6:]=host), not fractions: a fraction weighs each layer by its parameters' bytes, which a layer's activations are not proportional to
// ACTNORECOMPUTE: error: 'sched.task' op sched-place: activations[1:2]=ssd needs sched-recompute first: result #{{[0-9]+}} is a forward intermediate only the backward reads; run sched-recompute (spillwayc --recompute on, the default) or place activations[1:2]=gpu
// EMPTYRANGE: error: sched-place: 'params[1:1]=host': a layer range is CLASS[BEGIN:END]=TIER with BEGIN < END
// SUM: error: sched-place: 'optimizer=host:0.5,ssd:0.4': the fractions of optimizer sum to 0.9, not 1 (e.g. optimizer=host:0.75,ssd:0.25)
// OVERLAP: error: sched-place: 'params[1:2]=ssd': layer 1 of params is placed by 'params[0:2]=host' already
// BOTH: error: sched-place: 'params[0:1]=host': params takes fractions or layer ranges, not both
// FRACTION: error: sched-place: 'optimizer=host:x': the fraction 'x' is not a number in (0, 1]

// A block cut between host and SSD: layer 0's 4096 optimizer elements at
// 0.3 on host, rounded to the cut granule (64 elements, 256 bytes of f32):
// 1216 on host, the rest on SSD. Under bf16-mixed (granule 128) it rounds
// to 1280, and the master weights, placed with the optimizer state, are
// cut with it.
// CUT: placement = #sched.placement<params = ssd, optimizer = ssd, gradients = gpu, activations = gpu, cuts = {optimizer = array<i64: 0, 1216>}>
// CUTMASTER: master = "ssd"
// CUTMASTER-SAME: placement = #sched.placement<params = ssd, optimizer = ssd, gradients = gpu, activations = gpu, cuts = {master = array<i64: 0, 1280>, optimizer = array<i64: 0, 1280>}>
// CUTTWO: error: sched-place: 'optimizer[0]=host:0.25,ssd:0.75' cuts layer 0 at element 1024 but 'params[0]=host:0.5,ssd:0.5' at 2048: a layer's params, master and optimizer blocks are cut at one element (give them the same fractions)
// CUTGRAD: error: sched-place: 'gradients[0]=host:0.5,ssd:0.5': gradients blocks are not cut between tiers (params, optimizer and master blocks are); place the layer whole, e.g. gradients[0:1]=host
// CUTORDER: error: sched-place: 'optimizer[0]=ssd:0.5,host:0.5': a cut block has its first elements on host and the rest on SSD: optimizer[0]=host:F,ssd:G (F + G = 1)
// CUTSUM: error: sched-place: 'optimizer[0]=host:0.5,ssd:0.4': the fractions of optimizer's layer 0 sum to 0.9, not 1 (e.g. optimizer[0]=host:0.4,ssd:0.6)
// CUTPAST: error: sched-place: 'optimizer[5]=host:0.5,ssd:0.5': the model has 3 layers (0..2 in train.layers; spillwayc --report lists them)
// CUTEMPTY: error: sched-place: 'optimizer[1]=host:0.2,ssd:0.8': layer 1 has 64 elements and a cut falls on a multiple of 64, so its host part would hold none; place the layer whole (e.g. optimizer[1:2]=ssd)
// CUTRANGE: error: sched-place: 'optimizer[0]=host:0.5,ssd:0.5': layer 0 of optimizer is placed by 'optimizer[0:1]=host' already
// CUTFRACTIONS: error: sched-place: 'optimizer=host:0.5,ssd:0.5': optimizer takes fractions or cuts of a layer's block, not both
