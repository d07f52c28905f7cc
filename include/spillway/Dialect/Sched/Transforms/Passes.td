//===- Passes.td - sched dialect passes --------------------*- tablegen -*-===//

#ifndef SPILLWAY_DIALECT_SCHED_TRANSFORMS_PASSES_TD
#define SPILLWAY_DIALECT_SCHED_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def SchedMicrobatchPass : Pass<"sched-microbatch", "mlir::ModuleOp"> {
  let summary = "Split the batch of every sched.iteration into M micro-batches";
  let description = [{
    Runs on each `sched.iteration` with one micro-batch (after
    `convert-train-to-sched`). Every iteration input is a batch input: its
    leading dimension is the batch and must divide by `microbatches`, else the pass
    fails naming the input (its `train.name`, else its position) and M.
    Produces:
    - `sched.slice %in [m of M]` of every input, m = 0 .. M-1;
    - each `fwd` and `bwd` task replicated M times, replica m marked
      `mb(m)`, reading slice m of the inputs and replica m of the tasks it
      read before; the types inside are re-derived for the smaller batch
      (ops with inferred types infer them again; the others, such as
      `reshape`, `broadcast_to`, `slice`, `attention`, keep the batch as
      their leading dimension: a result shaped like a batched operand (a
      `cast` too, whose element type differs), the result of a shape op on
      one, or a `sum_to_shape` of one keeping its rank and dim 0 gets its
      leading dimension divided by M). A task whose ops do not verify at the smaller batch (a constant
      shaped by the batch, a reshape that moves the batch out of the
      leading dimension) fails the pass;
    - what the `opt` tasks and the iteration's results read from replicated
      tasks: `sched.accumulate mean` of the M replicas where the value
      depends on the batch inputs (the gradients, the loss), replica 0's
      where it does not (it is the same in every replica);
    - the `opt` tasks once; the iteration's `microbatches = M`.
    With `microbatches = 1` the pass changes nothing; otherwise the
    iteration must hold tasks only (it runs before placement).

    Before rewriting anything the pass checks that the forward keeps batch
    rows independent, since retyping only divides dim 0. B is the smallest
    input's leading dimension (every input's must be a multiple of it). A
    value of a `fwd` task reached from the inputs is row-batched when its
    dim 0 is B·k and batch element b is rows [b·k, (b+1)·k). Each op reading
    one must be, with its result row-batched:
    - elementwise (binary, compare, `where`, unary, `cast`, `broadcast_to`,
      `gelu`, `silu`), `softmax` off axis 0, `rope`: every row-batched
      operand has the result's rank and dim 0; every other operand is
      broadcast along dim 0 (lower rank, or dim 0 of 1);
    - `layer_norm`/`rms_norm` with axis >= 1 on a row-batched input (scale,
      bias not); `attention` with Q, K, V all row-batched;
    - `reduce_sum/mean/max` with explicit axes excluding 0;
    - `transpose` with perm[0] = 0; `slice` with start 0, step 1 and full
      extent on dim 0; `concat` off axis 0 of row-batched inputs;
    - `reshape` whose result's dim 0 is a multiple of B (row-major order is
      kept, so batch element b stays a contiguous run of rows: a flatten
      [B, S, ..] -> [B·S, ..] or the unflatten back);
    - `gather` on axis 0 of an unbatched table with row-batched indices (an
      embedding lookup), or off axis 0 of a row-batched table keeping dim 0;
    - `linear` with a row-batched input of rank >= 2 (weight, bias not);
      `gemm` with a row-batched A without transA (B not; C row-batched or
      broadcast along dim 0); `matmul` with a row-batched lhs of rank >= 2
      or a row-batched rhs of rank >= 3 (a batched matmul), each keeping
      dim 0, the other operand row-batched the same way or broadcast;
    - `softmax_cross_entropy_loss` with reduction = "mean" of row-batched
      logits and labels of equal dim 0: the loss, which no other op may read.
    Anything else fails the pass at the op: "cannot split the batch into M
    micro-batches: '<op>' moves/slices/contracts/reduces the batch
    dimension" or "... is not known to keep batch rows independent", with
    "use --microbatches 1". The `bwd` tasks are the forward's mirror and
    are not checked separately.
    The tasks come out in task-major order (all micro-batches of a task, in
    order m = 0 .. M-1, before the next task); `sched-order` chooses the
    real order.

    Why `mean` is exact: the loss must be a mean over the batch (the
    returned value computed by `train.softmax_cross_entropy_loss` with
    `reduction = "mean"`; anything else fails the pass, because averaging
    would change it, and a `train.reduce_mean` loss fails with its own
    message: it is not supported yet). With N loss terms in the
    batch and n = N/M per micro-batch, the full loss is
    (1/N) sum_i l_i = (1/M) sum_m [(1/n) sum_{i in m} l_i] = mean_m(loss_m),
    and by linearity its gradient is mean_m(grad_m), where each replica's
    backward seeds its own micro-batch mean with 1 as before. In exact
    arithmetic this is the full-batch gradient; in floating point the sums
    are grouped differently (per micro-batch, then across), so it agrees
    within rounding, not bit for bit. With an `ignore_index`, the mean is
    over the labels not ignored, and the identity needs every micro-batch
    to hold the same number of them (true when no label is ignored, as in
    language-model training without padding).
  }];
  let options = [
    Option<"microbatches", "microbatches", "int64_t", /*default=*/"1",
           "Number of micro-batches M (must divide every input's leading dimension)">
  ];
  let dependentDialects = ["spillway::sched::SchedDialect"];
}

def SchedOrderPass : Pass<"sched-order", "mlir::ModuleOp"> {
  let summary = "Order the tasks of every sched.iteration: horizontal or snake";
  let description = [{
    Reorders the tasks of each `sched.iteration` (L layers, M micro-batches;
    a task without `mb` counts as micro-batch 0):
    - `horizontal` (ZeRO-Infinity): for each micro-batch m = 0 .. M-1, its
      forward through layers 0 .. L-1, then its backward through
      L-1 .. 0. Layer visits `0 1 .. L-1 L-1 .. 1 0` per micro-batch.
    - `snake` (GreedySnake): all M micro-batches of a layer before the next
      layer, forward 0 .. L-1 then backward L-1 .. 0, the micro-batch
      direction alternating at every layer visit (0 .. M-1, then
      M-1 .. 0, ...), across the turn from forward to backward too, so the
      last micro-batch of one visit is the first of the next: each layer is
      visited once per pass, the last one once in all.
    The `opt` tasks follow the last backward task, layers 0 .. L-1.
    `sched.slice` and `sched.accumulate` ops move to just before their
    first user, and each `sched.accumulate` lists its operands in the order
    their tasks now run (the order the runtime can add them in as they
    arrive). The order is checked before anything moves: a task must run
    after the tasks whose results it reads, and every parameter read
    (`train.param_value`) before that parameter's update (`train.adamw`);
    a violation fails the pass naming both tasks. Sets the iteration's
    `order` attribute; with `remarks`, says how many layer loads the order
    makes (runs of consecutive fwd/bwd tasks of one layer, which share the
    layer's parameters: what `docs/cost-model.md` counts, 2LM - 2M + 1 for
    horizontal and 2L - 1 for snake when every layer has both phases).
    Reordering changes which layer's weights are loaded
    when (what `docs/cost-model.md` counts), never what is computed.
  }];
  let options = [
    Option<"order", "order", "std::string", /*default=*/"\"horizontal\"",
           "horizontal | snake">,
    Option<"remarks", "remarks", "bool", /*default=*/"false",
           "Remark per iteration: the order and its layer loads">
  ];
  let dependentDialects = ["spillway::sched::SchedDialect"];
}

def SchedPlacePass : Pass<"sched-place", "mlir::ModuleOp"> {
  let summary = "Fix the tier of every tensor class of each iteration";
  let description = [{
    Records on each `sched.iteration` where each tensor class lives for the
    whole run, as its `placement` (`#sched.placement`): `params` (the
    parameters the forward and backward read), `optimizer` (AdamW's m and
    v), `gradients` (the accumulated gradient) and `activations`, each
    `gpu`, `host` or `ssd`. `placement` is the spec, `CLASS=TIER,...`;
    classes it omits stay on the GPU. `spillwayc` fills it from the cost
    model's choice (`CostModel::choose` under the budgets and `--place`
    pins, docs/cost-model.md) or from `--place` alone; this pass checks it
    against what the executor can run and makes it IR:
    - the optimizer runs where its state lives: on the GPU when `optimizer`
      is `gpu`, else on the CPU (`optimizer_on = "gpu" | "cpu"`);
    - `master`, under `train.precision = "bf16-mixed"` only (elsewhere the
      f32 parameters are their own master weights and it is refused): the
      home of the f32 master weights (`master = TIER` on the iteration),
      while `params` is that of the bf16 working copies; unplaced, it is
      the optimizer's tier. It must be on the GPU exactly when `optimizer`
      is (the update reads and writes both where it runs);
    - `activations` off the GPU (of a layer, when split) needs
      `sched-recompute` to have run: a fwd task result that only bwd tasks
      read (a forward intermediate kept for the backward) is refused,
      naming the task and the fix;
    - a class may be split by layer between host and ssd
      (`CLASS[BEGIN:END]=TIER` over `CLASS=TIER`, or, but for
      `activations`, fractions `CLASS=TIER:F,TIER:F`), `params` and
      `activations` with GPU layers too: `placement`'s `layers` then holds
      each layer's tier (docs/compiler.md, "Placement by layer");
    - a layer's params, optimizer or master block may be cut between host
      and ssd (`CLASS[LAYER]=host:F,ssd:G`): its home is ssd and its first
      F of the elements, rounded to the overlap's granule, live on host
      (`placement`'s `cuts`); a layer's blocks are cut at one element, and
      a cut that rounds to none or all of the layer is refused;
    - an unknown class or tier, or a class given twice, is an error naming it.
    The iteration must have been ordered (`sched-order`) and hold no
    transfers yet.
  }];
  let options = [
    Option<"placement", "placement", "std::string", /*default=*/"\"\"",
           "CLASS=TIER,... (classes: params, optimizer, gradients, "
           "activations, and master under bf16-mixed; tiers: gpu, host, "
           "ssd); the rest stay on the GPU (master: with the optimizer). "
           "A class may be split by layer between host and ssd (params and "
           "activations may keep layers on gpu too): CLASS[BEGIN:END]=TIER "
           "(layers of train.layers) or, but for activations, "
           "CLASS=host:F,ssd:G (fractions of its bytes, by layer in order); "
           "a layer's params, optimizer or master block may be cut: "
           "CLASS[LAYER]=host:F,ssd:G (its first F on host, the rest on "
           "ssd)">
  ];
  let dependentDialects = ["spillway::sched::SchedDialect"];
}

def SchedInsertTransfersPass : Pass<"sched-insert-transfers", "mlir::ModuleOp"> {
  let summary = "Moves, waits and bindings that carry out the placement";
  let description = [{
    Runs after `sched-place`. Writes, in the iteration's block, every
    `sched.move` (one link each), `sched.await`, `sched.drop` and
    `sched.bind` the placement needs, and routes the gradients through
    their tier. Blocks are per layer and class, the layer's parameters (its
    `train.layers` `params`) packed in that order. The rules are
    docs/cost-model.md's byte rules, move by move, so the plan's bytes are
    the model's:
    - Parameters off the GPU: a *load* is a maximal run of consecutive
      fwd/bwd tasks of one layer. Load k's copy is uploaded (host -> gpu)
      during load k-1 and, from SSD, read into pinned host memory
      (ssd -> host, `prefetch`) during load k-2: two loads in flight, so
      two GPU and two host copies at most. Each load starts with
      `sched.await` of its upload and `sched.bind params ... gpu`, and its
      GPU copy is dropped when the run ends.
      A tied weight (a parameter in one layer's `params` that other layers
      list under `uses`) has one home, its owner's params block: a load of
      a layer that reads it brings and binds the owner's block too (whole,
      every part), and a block that consecutive loads read stays on the
      GPU across them (one *stay*, `schedule::blockLoads`, the cost
      model's count). The gradients of all its uses reach the owner's
      backward (autodiff sums them there), so they are accumulated and
      updated once, as any of the owner's.
    - Gradients: the micro-batch gradients of each backward run of a layer
      are summed (left to right, in the order they ran) by
      `sched.stage_grads` into the GPU copy of the layer's `gradients`
      block (gradients on the GPU: `first` run, then `add`) or of its
      `gradstage` block, which then goes gpu -> host and is added into the
      accumulator on host (`sched.accumulate_grads`); on SSD the
      accumulator is read back first (every flush but the first) and
      written after. Snake runs all M micro-batches of a layer at once, so
      it flushes once; horizontal M times.
    - ZeRO stage 2 (`train.optimizer_state_shards` with `gradients = true`):
      `sched.stage_grads` also reduce-scatters the layer's gradient over the
      ranks, and the runtime leaves that exchange running until the block is
      next touched. What touches it after a flush (the gradstage move and
      the accumulation with its write-back, the norms on the GPU tier, the
      layer's opt task) goes after the backward of the next flushing layer
      of the same backward sweep, just before its `stage_grads`: the
      exchange overlaps that backward, and the gradstage block still leaves
      the GPU before the next one is staged. A forward task ends a sweep
      (horizontal order's micro-batches); the sweep's last flush stays
      where it is. An opt task moved so whose result is read before its new
      place is an error.
    - The update of layer l, where the optimizer runs (GPU or CPU, from
      `optimizer_on`): the accumulated gradient, the optimizer state and the
      parameters are moved there, the gradient divided by M
      (`sched.gradient ... mean(M)`: the mean the resident schedule's
      `sched.accumulate mean` computes, with the same additions in the
      same order, so the weights are bit-identical), the state and
      parameters bound, and after the task the state and parameters are
      written back along the reverse path. With master weights (`master`
      on the iteration, bf16-mixed) the `master` block moves, binds and
      goes back exactly as the optimizer state does (the update reads and
      writes the f32 masters and writes the bf16 working copies, the
      `params` block, from them), part for part under the overlap.
    - With the optimizer overlap (`sched-overlap-optimizer`, F > 0) a
      layer's first D_l updated elements are updated a step late. Its
      params and optimizer blocks then have two parts (`part(0)`, the
      deferred elements, and `part(1)`, the rest; one part when D_l is 0 or
      all): the update after the backward moves only part 1 (nothing when
      all is deferred). The deferred task runs at the first stay of the
      layer's block (its first load, or an earlier reader's of a tied weight),
      on the copy the load brings past the optimizer: a CPU optimizer's
      just before the upload (after the SSD read), a GPU optimizer's right
      after the load's GPU binding (before the next loads start); with
      resident parameters where it is. Part 0 of the state is brought to
      the optimizer and back, and part 0 of the updated parameters written
      to their tier (the load's copy stays), so the deferred part never
      reads the parameters a second time. The gradient moves whole with the
      update after the backward (the runtime keeps the deferred slice until
      the next step). The iteration gets `deferred`: D_l per layer.
    - Gradient clipping (a `train.clip_grad_norm` in an opt task, from
      `train-attach-optimizer{grad-clip=F}`): right after the flush that
      completes layer l's gradient (its last `stage_grads` on the GPU, or
      its last `accumulate_grads` on host, before a write-back to SSD),
      `sched.grad_norms layer(l) gpu|host mean(M)`; the opt task takes
      `sched.clip_grad_norm [params] {max_norm}`, placed just before it,
      in place of the norm (`params`: the updated parameters in the norm's
      operand order), and the gradients only the norm read leave the task.
      No move is added. A norm that misses an updated parameter's gradient,
      or one whose layer's gradient completes after it, is an error.
    - Activations off the GPU: each fwd task result a bwd task reads, of a
      task whose layer's activations are homed off the GPU (`homeOf`),
      becomes an `activations` block (index = its position among them, in
      block order): `sched.put_activation` right after its last non-bwd
      reader, gpu -> host (-> ssd) `writeback` and the copies on the way
      dropped; before its first bwd reader ssd -> host -> gpu,
      `sched.take_activation`, whose value the bwd tasks read, and every
      copy dropped. With look-ahead inside one GPU slot and two host
      staging slots for those homed on SSD (one homed on host keeps its
      host copy from put to take): a write-back leg is awaited only when its slot is needed
      again or the activation is read back, and the next reload is issued
      (`prefetch`) right after the previous take when no put comes between
      (from SSD the read one need further ahead); otherwise at its reader
      (`demand`). A non-bwd reader after a bwd reader is an error.
    - A block cut between host and SSD (`placement`'s `cuts`): part 0 lives
      on host and never crosses to the SSD, part 1 on SSD. Every rule above
      takes it part by part: a load reads part 1 from SSD and uploads the
      whole block from host, freeing only part 1's host copy; an update
      brings part 1 to the optimizer's side (part 0 is on host) and writes
      it back. An AdamW update whose range holds the cut runs as two, split
      at it (AdamW is elementwise: the same bits), since part 0's host copy
      (its home) and part 1's (a slot) are not back to back. A cut layer
      needs all of its parameters updated, an overlap deferring none of its
      elements or the cut's, and no FOAM update.
    Everything on the GPU (every class `gpu`) moves nothing: the bindings
    and gradient blocks only. Refused with a clear error: an iteration
    without `placement`; a `uses` entry that no layer owns; a gradient that is not the result of its
    layer's backward task; deferred elements that do not lead the layer's
    updated parameters in block order; deferred updates in a layer with
    parameters the optimizer does not update.
  }];
  let dependentDialects = ["spillway::sched::SchedDialect"];
}

def SchedAssignBuffersPass : Pass<"sched-assign-buffers", "mlir::ModuleOp"> {
  let summary = "Static offsets in the GPU arena, pinned host arena and SSD swap";
  let description = [{
    Runs after `sched-insert-transfers`. Every block gets its home (the
    tier of its class) at a fixed offset: homes are packed in layer order,
    params, optimizer, gradients, master, each aligned to the tier's granule (GPU
    256 bytes; host and SSD 4096, the O_DIRECT alignment, so host copies
    go to the SSD as they are). Copies away from home live in slot pools,
    one per (tier, class), of as many slots of the class's largest block
    as are ever live at once (walking the block in order: a `sched.move`
    takes a free slot, `sched.drop` frees it); each move gets its
    destination offset (`at`). Activation blocks have no home: every copy (the
    `sched.put_activation`'s on the GPU, each move's destination) takes a
    slot of its tier's activation pool, laid out after the other homes and
    pools; a put without a take, a take without a GPU copy or of another
    type, and a copy never dropped are errors. The module gets `sched.buffers`: each tier's
    peak bytes (homes plus pools), the blocks with their homes and members,
    and the predicted bytes per link per iteration (`bytes_per_iteration`:
    `ssd_read`, `ssd_write`, `h2d`, `d2h`; SSD bytes rounded up to 4096 as
    O_DIRECT moves them, and `model_bytes`: the same unrounded, what the
    cost model predicts). A block of a layer with deferred updates
    (`deferred`) is split where they end (`split`, in bytes of the
    members): each part is its own extent, part 1 at part 0's size rounded
    up to the tier's granule, so on the GPU the parts are back to back (the
    split must be a multiple of 256 bytes: sched-overlap-optimizer's
    granule); a `part` move moves, and costs, that part only. With master
    weights (`master` on the iteration, bf16-mixed) each layer also has a
    `master` block, homed on that tier: the f32 masters laid out as an fp32
    plan's params block, while its params block holds the bf16 working
    copies, 2 bytes per element at half those offsets, split at half the
    bytes (the same element). A layer cut between host and ssd
    (`placement`'s `cuts`, at E elements) has its params, master and
    optimizer blocks split at E as the overlap splits them (where the
    overlap defers some of the layer, at the same element; not under ZeRO
    sharding), and each cut class's part 0 homed on host in an extent of
    its own (`home0`, `offset0`), packed with the homes; part 1 keeps the
    ssd extent, which has room for the whole block. Each block's split
    (each moment's) must be a multiple of 256 bytes, E fewer than the
    layer's elements, and the cut layer one of `train.layers`. Under `train.optimizer_state_dtype = "bf16"`
    an optimizer block holds its members' m, then their v, at 2 bytes per
    moment element (half of fp32's bytes and offsets; FOAM's folded
    elements likewise), split at 2 bytes per deferred element: every
    block of a layer splits at the same element. Each layer
    with deferred elements gets a `pending` block: the gradient slices the
    runtime keeps from the update to the next step's deferred task, at
    home on the optimizer's side (GPU optimizer: gpu, else host), after the
    pools; it never moves. With a GPU budget (`gpu-mem`, else `device-mem`)
    `sched.buffers` gets `step_arena_bytes`: the budget less the GPU arena,
    what the executor's step tensors may take (a GPU arena over
    `device-mem` is an error). A tier over
    its budget (`gpu-mem`, `host-mem`,
    `ssd-bytes`; 0 = unlimited) is an error stating the smallest budget
    that fits.
  }];
  let options = [
    Option<"gpuMem", "gpu-mem", "uint64_t", /*default=*/"0",
           "GPU arena budget in bytes (0: unlimited)">,
    Option<"hostMem", "host-mem", "uint64_t", /*default=*/"0",
           "pinned host budget in bytes (0: unlimited)">,
    Option<"ssdBytes", "ssd-bytes", "uint64_t", /*default=*/"0",
           "SSD swap budget in bytes (0: unlimited)">,
    Option<"deviceMem", "device-mem", "uint64_t", /*default=*/"0",
           "the device's memory in bytes (the hardware profile's), the "
           "GPU budget without gpu-mem (0: unknown)">
  ];
  let dependentDialects = ["spillway::sched::SchedDialect"];
}

def SchedRecomputePass : Pass<"sched-recompute", "mlir::ModuleOp"> {
  let summary = "Keep layer-boundary activations; recompute the rest of a "
                "layer's forward inside its backward";
  let description = [{
    Runs on each `sched.iteration` after `sched-order` (any order, any M)
    and before placement: an iteration holding an offload plan's ops
    (`sched.move`, `sched.bind`, ...) fails the pass.

    The rule: what crosses from a `fwd` task (layer l, micro-batch m) to
    `bwd` tasks is only what the forward keeps anyway. A result of a `fwd`
    task is *kept* when anything other than a `bwd` task reads it: another
    layer's `fwd` task (the boundary activation into layer l+1, or a skip
    connection into a later layer), a `sched.accumulate` or the iteration's
    `sched.yield` (the loss). Every other result of a `fwd` task, read by
    `bwd` tasks only, is *internal* (a linear's output, attention
    probabilities, logits). A `bwd` task that reads internal results of a
    `fwd` task F instead takes F's inputs (the layer's boundary
    activations: the previous layers' outputs of the same micro-batch, and
    batch slices such as the labels) as operands, reusing an operand it
    already has, and recomputes at its start exactly the ops of F's body
    those results need (the backward slice from F's yield to F's block
    arguments, in F's order), cloned with the attribute `sched.recompute`.
    Each such `bwd` task recomputes on its own; kept results are still read
    as before. Afterwards a `fwd` result nobody reads is removed from F,
    then F's ops and inputs left unused, a `fwd` task left with nothing to
    compute (all it computed only the backward read), and batch slices
    left unused.

    What is recomputed, and why it is exact:
    - every op in the slice, parameter reads (`train.param_value`),
      constants and weight transposes included: they depend on no
      activation and are cheap, and `convert-train-to-sched` already copies
      them into each task that uses them. A result that depends on no input
      of F at all is recomputed from nothing in the same way;
    - the ops are pure or only read parameters, and every parameter is
      updated only by the `opt` tasks, after every `bwd` task, so the
      clone computes bit for bit what F computed (same kernels, same
      inputs). An op in the slice with any other side effect, or with a
      region, fails the pass naming it and both tasks;
    - tied parameters are read through their symbol like any other, in the
      `bwd` task of the layer that reads them (GPT-2's head recomputes its
      logits from `wte`), before any update.
    The last layer follows the same rule, although its `fwd` and `bwd`
    tasks meet (horizontal: for every micro-batch; snake: at the turn): one
    consistent rule, and the one `docs/cost-model.md` prices
    (`recomputeFlops` = `forwardFlops` for every layer). Its logits are
    recomputed, the loss is kept (the iteration returns it).
    With `remarks`, says per iteration how many ops were cloned into how
    many `bwd` tasks and how many `fwd` results were dropped.
  }];
  let options = [
    Option<"remarks", "remarks", "bool", /*default=*/"false",
           "Remark per iteration: ops recomputed, fwd results dropped">
  ];
  let dependentDialects = ["spillway::sched::SchedDialect"];
}

def SchedOverlapOptimizerPass : Pass<"sched-overlap-optimizer", "mlir::ModuleOp"> {
  let summary = "Move each layer's update next to its gradient and a fraction "
                "of it into the next iteration's forward";
  let description = [{
    Runs on each ordered `sched.iteration` (after `sched-order`; the module's
    `train.layers` from `train-partition-layers`). The iteration becomes the
    steady-state loop body: its deferred updates belong to the previous
    iteration. For each `opt` task of layer l:

    - The update moves to just after the last task it must follow: layer
      l's last `bwd` task (its gradient is complete there), the last `bwd`
      task of every layer listed in the `grad_from` of l's `shared`
      parameters (a tied weight's gradient is complete only after all of
      them), the last task reading one of the parameters it updates, and the
      producers of its operands. The `sched.accumulate`s it reads move with
      it (just before it). Opt tasks landing after the same task keep layer
      order.
    - With `fraction` F > 0, the update of the first D_l elements of layer
      l is deferred: F * N_l rounded to the nearest multiple of `granule`
      (64 elements, 256 bytes of f32: an offload plan splits the layer's
      blocks there and keeps both parts back to back in the GPU arena;
      twice `granule` under `train.precision = "bf16-mixed"`, 256 bytes of
      the bf16 working copies its params blocks hold, and under
      `train.optimizer_state_dtype = "bf16"`, 256 bytes of the bf16 moments
      its optimizer blocks hold; twice, not four times, with both), or
      N_l when that rounding reaches N_l (F = 1 defers everything). N_l is the number of
      elements of the parameters the task updates, concatenated in the
      order of `train.layers[l].params` (each parameter row-major). A
      parameter starting at element o of that concatenation with n elements
      defers its elements [0, d) with d = clamp(D_l - o, 0, n): the task
      keeps `train.adamw_defer @p [0, d), %g` (the gradient slice, this
      iteration's step number and hyper-parameters are kept pending) and
      updates the rest now with `train.adamw @p [d, n), %g`; d = n leaves
      only the defer, d = 0 the plain update.
    - A new task `sched.task opt deferred layer(l) ()` holding
      `train.adamw_apply_pending @p [0, d)` for each deferred range goes just
      before the first task that reads one of those parameters: layer l's
      first `fwd` task (or an earlier reader of a shared parameter). It
      applies the previous iteration's deferred update exactly as
      `train.adamw` would have at the end of that iteration (AdamW is
      elementwise and nothing touches those elements in between), so the
      weights are those of ordinary training. In the first iteration
      nothing is pending and it does nothing; after the last iteration the
      executable applies what is pending (`spw_adamw_flush`) before it
      saves or checkpoints.

    F outside [0, 1], a module without `train.layers`, an iteration that
    already has deferred tasks, a deferred update of something other than
    `train.adamw`, and an `opt` task updating a parameter its layer does
    not list fail the pass naming what is wrong. F = 0 only moves the
    updates. Changes when the update runs, never what it computes.
  }];
  let options = [
    Option<"fraction", "fraction", "double", /*default=*/"0.0",
           "Fraction F in [0, 1] of each layer's parameter elements whose "
           "update is applied just before the layer's next forward">,
    Option<"granule", "granule", "int64_t", /*default=*/"64",
           "The deferred elements of a layer are a multiple of this many "
           "(or all of them)">
  ];
  let dependentDialects = ["spillway::sched::SchedDialect",
                           "spillway::train::TrainDialect"];
}

def SchedOutlineTasksPass : Pass<"sched-outline-tasks", "mlir::ModuleOp"> {
  let summary = "Make each task's computation a call to a function shared by "
                "the tasks that compute the same thing";
  let description = [{
    Rewrites the body of every `sched.task` into three parts, in this order:
    its `train.param_value` reads, one `func.call` of a private `func.func`
    holding the rest of its ops, and its `train.param_grad` records. The
    callee takes the task's block arguments, then the values of the
    parameters read, and returns, each once, the computed values the yield
    and the gradient records use (a yielded argument or parameter is not
    returned: the task yields it directly). Callees whose text is the same
    (the callee printed without names or locations) are one function: every
    micro-batch of a layer's phase, and layers with the same shapes, which
    differ only in the parameter symbols that stay in the task. A callee is
    named `task.<phase>.layer<l>` after the first task that made it (with a
    numeric suffix if that name is taken).

    A task is left as it is when it has nothing to outline (parameter reads
    and gradient records only) or when its body holds an op that updates a
    parameter or refers to another symbol (`train.adamw`, `train.foam`, the
    deferred updates: a read hoisted above an update would change what it
    reads), an op with regions, or an op of another dialect than train.

    The ops run in the same order on the same values: a parameter read has
    no effect, so reading before the computation is reading within it, and
    a gradient record reads the value the computation returned. The
    iteration keeps its tasks (their phase, layer and micro-batch), so the
    sched verifiers and `convert-sched-to-train` see the same schedule;
    `convert-train-to-runtime` lowers each callee to one LLVM function.
    Runs last, just before `convert-sched-to-train`.

    ```mlir
    // before
    %y = sched.task fwd layer(1) mb(0) (%x) : (tensor<2x4xf32>) -> tensor<2x4xf32> {
    ^bb0(%a: tensor<2x4xf32>):
      %w = train.param_value @w1 : tensor<4x4xf32>
      %r = train.matmul %a, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
      sched.yield %r : tensor<2x4xf32>
    }
    // after
    %y = sched.task fwd layer(1) mb(0) (%x) : (tensor<2x4xf32>) -> tensor<2x4xf32> {
    ^bb0(%a: tensor<2x4xf32>):
      %w = train.param_value @w1 : tensor<4x4xf32>
      %r = func.call @task.fwd.layer1(%a, %w)
          : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
      sched.yield %r : tensor<2x4xf32>
    }
    func.func private @task.fwd.layer1(%arg0: tensor<2x4xf32>,
        %arg1: tensor<4x4xf32>) -> tensor<2x4xf32> {
      %0 = train.matmul %arg0, %arg1
          : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
      return %0 : tensor<2x4xf32>
    }
    ```
  }];
  let dependentDialects = ["spillway::sched::SchedDialect",
                           "spillway::train::TrainDialect",
                           "mlir::func::FuncDialect"];
}

#endif
