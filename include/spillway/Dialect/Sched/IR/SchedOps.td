//===- SchedOps.td - sched dialect ops ---------------------*- tablegen -*-===//

#ifndef SPILLWAY_DIALECT_SCHED_IR_SCHEDOPS_TD
#define SPILLWAY_DIALECT_SCHED_IR_SCHEDOPS_TD

include "spillway/Dialect/Sched/IR/SchedDialect.td"
include "mlir/IR/OpAsmInterface.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

//===----------------------------------------------------------------------===//
// The iteration and its tasks
//===----------------------------------------------------------------------===//

def Sched_IterationOp : Sched_Op<"iteration", [
    IsolatedFromAbove, SingleBlockImplicitTerminator<"YieldOp">]> {
  let summary = "one training iteration as an ordered program of tasks";
  let description = [{
    The block's arguments are the iteration's inputs (the step function's
    arguments: token ids, labels); it yields the iteration's results (the
    loss). Ops run in block order. `microbatches` is M, the number of
    micro-batches the batch is split into (1: the whole batch at once);
    `order` records the order `sched-order` chose (`horizontal`, `snake`),
    absent before it ran. The offload passes add the rest, each absent
    before its pass ran:
    - `placement` (`sched-place`): each tensor class's home tier;
      `optimizer_on`, where the update runs: `"gpu"` when the optimizer
      state's home is the GPU, else `"cpu"`; `master`, under
      `train.precision = "bf16-mixed"`, the home tier (`"gpu"`, `"host"`,
      `"ssd"`) of the f32 master weights, whose `master` blocks the update
      reads and writes while the `params` blocks hold the bf16 working
      copies the layers read (absent: the parameters are their own
      masters);
    - `updated` (`sched-insert-transfers`): per layer of `train.layers`, the
      parameters the optimizer updates (the members of the layer's gradient
      and optimizer blocks), which needs `placement`;
    - `deferred` (`sched-insert-transfers`, after
      `sched-overlap-optimizer`): per layer, how many leading elements of
      its updated parameters are updated a step late (0 or more, one entry
      per entry of `updated`).

    ```mlir
    %loss = sched.iteration(%ids, %labels) {microbatches = 1 : i64}
        : (tensor<6xi64>, tensor<6xi64>) -> tensor<f32> {
    ^bb0(%a: tensor<6xi64>, %b: tensor<6xi64>):
      %x = sched.task fwd layer(0) (%a) : (tensor<6xi64>) -> tensor<6x4xf32> {...}
      ...
      sched.yield %l : tensor<f32>
    }
    ```
  }];
  let arguments = (ins Variadic<AnyType>:$inputs,
                       DefaultValuedAttr<I64Attr, "1">:$microbatches,
                       OptionalAttr<StrAttr>:$order,
                       OptionalAttr<Sched_PlacementAttr>:$placement,
                       OptionalAttr<StrAttr>:$optimizer_on,
                       OptionalAttr<StrAttr>:$master,
                       OptionalAttr<TypedArrayAttrBase<FlatSymbolRefArrayAttr,
                           "per layer, its updated parameters">>:$updated,
                       OptionalAttr<DenseI64ArrayAttr>:$deferred);
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    `(` $inputs `)` attr-dict `:` functional-type($inputs, $results) $body
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let skipDefaultBuilders = 1;
  let builders = [
    OpBuilder<(ins "::mlir::TypeRange":$results, "::mlir::ValueRange":$inputs)>
  ];
  let extraClassDeclaration = [{
    ::mlir::Block &getBlock() { return getBody().front(); }
  }];
}

def Sched_TaskOp : Sched_Op<"task", [
    IsolatedFromAbove, HasParent<"IterationOp">,
    SingleBlockImplicitTerminator<"YieldOp">]> {
  let summary = "the work of one layer, phase and micro-batch";
  let description = [{
    A region of train ops: the forward (`fwd`), backward (`bwd`) or
    optimizer update (`opt`) of layer `layer` (the index into the module's
    `train.layers`), for micro-batch `mb` when the iteration is split
    (`fwd` and `bwd` tasks of an iteration with `microbatches` > 1 carry
    one, `opt` tasks never do: the update runs once on the accumulated
    gradient). Isolated from above: what the task reads comes in as
    operands (the block's arguments), what later tasks read goes out as
    results. Parameters are read and updated through their symbols
    (`train.param_value`, `train.adamw`).

    A deferred opt task (`sched.task opt deferred layer(l) ()`, made by
    `sched-overlap-optimizer`) applies the part of
    layer `layer`'s update that the previous iteration deferred
    (`train.adamw_apply_pending`): it reads nothing of this iteration, so it
    has no operands and no results, and runs before the layer's parameters
    are read.

    ```mlir
    %y = sched.task fwd layer(1) mb(0) (%x) : (tensor<2x4xf32>) -> tensor<2x4xf32> {
    ^bb0(%arg0: tensor<2x4xf32>):
      %w = train.param_value @w : tensor<4x4xf32>
      %r = train.matmul %arg0, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
      sched.yield %r : tensor<2x4xf32>
    }
    ```
  }];
  let arguments = (ins Variadic<AnyType>:$inputs, Sched_Phase:$phase,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$layer,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$mb,
                       UnitAttr:$deferred);
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $phase (`deferred` $deferred^)? `layer` `(` $layer `)` (`mb` `(` $mb^ `)`)?
    `(` $inputs `)` attr-dict
    `:` functional-type($inputs, $results) $body
  }];
  let hasVerifier = 1;
  let skipDefaultBuilders = 1;
  let builders = [
    OpBuilder<(ins "::mlir::TypeRange":$results, "::mlir::ValueRange":$inputs,
                   "Phase":$phase, "int64_t":$layer,
                   "std::optional<int64_t>":$mb)>
  ];
  let extraClassDeclaration = [{
    ::mlir::Block &getBlock() { return getBody().front(); }
  }];
}

def Sched_YieldOp : Sched_Op<"yield", [
    Pure, ReturnLike, Terminator, ParentOneOf<["IterationOp", "TaskOp"]>]> {
  let summary = "the results of an iteration or task";
  let arguments = (ins Variadic<AnyType>:$values);
  let builders = [OpBuilder<(ins), [{ /* nothing */ }]>];
  let assemblyFormat = "attr-dict ($values^ `:` type($values))?";
}

//===----------------------------------------------------------------------===//
// Micro-batching
//===----------------------------------------------------------------------===//

def Sched_SliceOp : Sched_Op<"slice", [Pure, HasParent<"IterationOp">]> {
  let summary = "micro-batch `index` of `count` of a batch input";
  let description = [{
    The leading (batch) dimension of `input` split into `count` equal
    contiguous parts; the result is part `index`. The leading dimension
    must divide by `count`.

    ```mlir
    %m1 = sched.slice %ids [1 of 3] : tensor<6x5xi64> -> tensor<2x5xi64>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$index,
                       ConfinedAttr<I64Attr, [IntPositive]>:$count);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `[` $index `of` $count `]` attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Sched_AccumulateOp : Sched_Op<"accumulate", [
    Pure, HasParent<"IterationOp">, SameOperandsAndResultType]> {
  let summary = "the sum or mean of micro-batch values";
  let description = [{
    `sum`: v0 + v1 + ... + v(n-1), added left to right in the order the
    operands are listed; `mean`: that sum divided by n. `sched-microbatch`
    combines the M micro-batches' gradients and losses with `mean`: a
    full-batch mean loss is the mean of equally sized micro-batch means,
    and so is its gradient. `sched-order` lists the operands in the order
    the micro-batches run, so the runtime can accumulate each one as it
    arrives.

    ```mlir
    %g = sched.accumulate mean %g0, %g1, %g2 : tensor<4x4xf32>
    ```
  }];
  let arguments = (ins Sched_AccumulateKind:$kind,
                       Variadic<AnyRankedTensor>:$values);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$kind $values attr-dict `:` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Blocks: the tensors of one layer and class, moved between tiers
// (sched-insert-transfers writes these; sched-assign-buffers gives the moves
// their offsets; docs/compiler.md "Offload")
//===----------------------------------------------------------------------===//

// Not tied to sched.iteration: convert-sched-to-train inlines the iteration
// and leaves these for convert-train-to-runtime to lower.
class Sched_BlockOp<string mnemonic, list<Trait> traits = []>
    : Sched_Op<mnemonic, traits>;

def Sched_MoveOp : Sched_BlockOp<"move"> {
  let summary = "start copying a layer's block along one link";
  let description = [{
    Starts an asynchronous copy of block (`class`, `layer`) from its copy
    on `from` to `to`, over one link: ssd -> host, host -> gpu, gpu -> host
    or host -> ssd. The source copy stays. `at` is the destination's offset
    in that tier's arena (from `sched-assign-buffers`; absent before it):
    where the block's copy starts there. With `part(k)` only part k of a
    block split by the optimizer overlap moves (0: the elements whose update
    is deferred, 1: the rest); without it, the whole block.
    `prio` is the storage engine's class for SSD moves. The copy on `to` may
    be read only after `sched.await` of the timepoint.

    ```mlir
    %t = sched.move params layer(2) ssd -> host prio(prefetch) at(8192) : !sched.timepoint
    ```
  }];
  let arguments = (ins Sched_BlockClass:$blockClass,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$layer,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntMinValue<0>, IntMaxValue<1>]>>:$part,
                       Sched_Tier:$from, Sched_Tier:$to,
                       Sched_Priority:$prio,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$at);
  let results = (outs Sched_TimepointType:$timepoint);
  let assemblyFormat = [{
    $blockClass `layer` `(` $layer `)` (`part` `(` $part^ `)`)? $from `->` $to `prio` `(` $prio `)`
    (`at` `(` $at^ `)`)? attr-dict `:` type($timepoint)
  }];
  let hasVerifier = 1;
}

def Sched_AllocOp : Sched_BlockOp<"alloc"> {
  let summary = "a params block's copy rounded from its bound masters";
  let description = [{
    Gives block (`params`, `layer`) (or part `part(k)` of it) a copy on
    `tier` (`gpu` or `host`) without reading it from another tier: the
    runtime rounds it from the layer's master block, which must be bound
    there (a bf16-mixed plan's working copies are the rounding of their
    masters). `sched-insert-transfers` gives the update such a copy where it
    runs when it updates all of a layer's parameters, instead of bringing
    the old copies there; the update then overwrites what it changes (an
    update the runtime skips, a non-finite gradient's, leaves the copy
    right). `at` is the copy's offset in that tier's arena (from
    `sched-assign-buffers`).

    ```mlir
    sched.alloc params layer(2) part(1) host at(16384)
    ```
  }];
  let arguments = (ins Sched_BlockClass:$blockClass,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$layer,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntMinValue<0>, IntMaxValue<1>]>>:$part,
                       Sched_Tier:$tier,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$at);
  let assemblyFormat = [{
    $blockClass `layer` `(` $layer `)` (`part` `(` $part^ `)`)? $tier
    (`at` `(` $at^ `)`)? attr-dict
  }];
  let hasVerifier = 1;
}

def Sched_AwaitOp : Sched_BlockOp<"await"> {
  let summary = "block the schedule until transfers complete";
  let arguments = (ins Variadic<Sched_TimepointType>:$timepoints);
  let assemblyFormat = "$timepoints attr-dict `:` type($timepoints)";
  let hasVerifier = 1;
}

def Sched_DropOp : Sched_BlockOp<"drop"> {
  let summary = "free a block's copy on a tier";
  let description = [{
    The copy of block (`class`, `layer`) on `tier` is no longer needed; its
    memory is free for the next move (waits for moves still reading it).
    With `part(k)`, only that part of a split block.
  }];
  let arguments = (ins Sched_BlockClass:$blockClass,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$layer,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntMinValue<0>, IntMaxValue<1>]>>:$part,
                       Sched_Tier:$tier);
  let assemblyFormat = [{
    $blockClass `layer` `(` $layer `)` (`part` `(` $part^ `)`)? $tier attr-dict
  }];
}

def Sched_BindOp : Sched_BlockOp<"bind"> {
  let summary = "the copy compute reads and updates from here on";
  let description = [{
    From here, the tasks read the parameters of block (`params`, `layer`)
    (or the optimizer updates the state of (`optimizer`, `layer`), or the
    f32 master weights of (`master`, `layer`), bf16-mixed, whose update
    writes the params block's bf16 working copies) in its copy on `tier`:
    `gpu` for the forward, backward and a GPU optimizer, `host` for a CPU
    optimizer.
    Of a split block, the parts that have a copy there: an update of a
    part's elements needs that part bound, a read of a whole parameter
    needs it contiguous (both parts, back to back as on the GPU).
  }];
  let arguments = (ins Sched_BlockClass:$blockClass,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$layer,
                       Sched_Tier:$tier);
  let assemblyFormat = [{
    $blockClass `layer` `(` $layer `)` $tier attr-dict
  }];
  let hasVerifier = 1;
}

def Sched_StageGradsOp : Sched_BlockOp<"stage_grads"> {
  let summary = "sum a backward run's gradients into a block's GPU copy";
  let description = [{
    `grads` are the gradients of the layer's parameters (`params`, in the
    block's order) of each micro-batch of one backward run, micro-batch by
    micro-batch in the order they ran. Their sum, added left to right, is
    written (`first`) or added (`add`) to the GPU copy of block (`into`,
    `layer`) (a `first` write creates the copy, at offset `at`): `gradients` when the gradients live on the GPU, else
    `gradstage`, which a flush then carries off the GPU.

    ```mlir
    sched.stage_grads gradstage layer(1) first (%g0, %b0, %g1, %b1) {params = [@w, @b]} : tensor<4x4xf32>, tensor<4xf32>, tensor<4x4xf32>, tensor<4xf32>
    ```
  }];
  let arguments = (ins Sched_BlockClass:$into,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$layer,
                       Sched_GradMode:$mode,
                       Variadic<AnyRankedTensor>:$grads,
                       FlatSymbolRefArrayAttr:$params,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$at);
  let assemblyFormat = [{
    $into `layer` `(` $layer `)` $mode `(` $grads `)` (`at` `(` $at^ `)`)?
    attr-dict `:` type($grads)
  }];
  let hasVerifier = 1;
}

def Sched_AccumulateGradsOp : Sched_BlockOp<"accumulate_grads"> {
  let summary = "add a flushed gradient into the layer's accumulator";
  let description = [{
    On `tier` (host): block (`gradients`, `layer`)'s copy becomes the
    `gradstage` copy (`first`, creating the copy at offset `at` when the
    accumulator lives elsewhere) or their sum (`add`). Host arithmetic: no
    link carries bytes.
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntNonNegative]>:$layer,
                       Sched_GradMode:$mode, Sched_Tier:$tier,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$at);
  let assemblyFormat = [{
    `layer` `(` $layer `)` $mode `on` $tier (`at` `(` $at^ `)`)? attr-dict
  }];
}

def Sched_GradientOp : Sched_BlockOp<"gradient"> {
  let summary = "a parameter's accumulated gradient, for the optimizer";
  let description = [{
    The gradient of `param` in block (`gradients`, `layer`)'s copy on
    `tier`, divided by `divisor` (M: the mean over micro-batches).

    ```mlir
    %g = sched.gradient @w layer(1) host mean(4) : tensor<4x4xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$param,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$layer,
                       Sched_Tier:$tier,
                       ConfinedAttr<I64Attr, [IntPositive]>:$divisor);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $param `layer` `(` $layer `)` $tier `mean` `(` $divisor `)` attr-dict `:` type($result)
  }];
}

//===----------------------------------------------------------------------===//
// Gradient clipping in an offload plan: the gradients stay in their blocks,
// so the norm is taken per layer where each layer's gradient is complete,
// and the coefficient from those norms after the last one.
//===----------------------------------------------------------------------===//

def Sched_GradNormsOp : Sched_BlockOp<"grad_norms"> {
  let summary = "the norms of a layer's complete gradients, for clipping";
  let description = [{
    For each member of block (`gradients`, `layer`), the 2-norm of its
    gradient on `tier` (gpu or host) divided by `divisor` (M), element by
    element as `sched.gradient` divides it: the per-tensor norm
    `train.clip_grad_norm` takes of the micro-batch mean. The runtime keeps
    the norms for the step's `sched.clip_grad_norm`. It runs where the
    layer's gradient is complete (after its last flush), so clipping moves
    no byte the plan would not move anyway.

    ```mlir
    sched.grad_norms layer(1) host mean(4)
    ```
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntNonNegative]>:$layer,
                       Sched_Tier:$tier,
                       ConfinedAttr<I64Attr, [IntPositive]>:$divisor);
  let assemblyFormat = [{
    `layer` `(` $layer `)` $tier `mean` `(` $divisor `)` attr-dict
  }];
  let hasVerifier = 1;
}

def Sched_ClipGradNormOp : Sched_BlockOp<"clip_grad_norm"> {
  let summary = "gradient clipping's coefficient from the layers' norms";
  let description = [{
    `train.clip_grad_norm` for an offload plan: the coefficient
    `min(1, max_norm / (norm + 1e-6))` where `norm` is the 2-norm of the
    per-tensor norms of `params` (every updated parameter, in declaration
    order), which `sched.grad_norms` recorded earlier in the iteration.

    ```mlir
    %c = sched.clip_grad_norm [@w, @b] {max_norm = 1.0 : f64} : tensor<f32>
    ```
  }];
  let arguments = (ins FlatSymbolRefArrayAttr:$params, F64Attr:$max_norm);
  let results = (outs 0DTensorOf<[F32]>:$coef);
  let assemblyFormat = "$params attr-dict `:` type($coef)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Activations off the GPU: a kept forward value in an `activations` block
// (keyed by the activation's index, which the block ops carry in their
// `layer` operand), moved with sched.move / sched.drop like any block.
//===----------------------------------------------------------------------===//

def Sched_PutActivationOp : Sched_BlockOp<"put_activation"> {
  let summary = "copy a tensor into its activation block's GPU copy and free it";
  let description = [{
    Writes `value` into the GPU copy of block (`activations`, `index`),
    creating that copy at offset `at` (from `sched-assign-buffers`), and
    frees `value`'s own memory: nothing may read `value` afterwards (the
    verifier checks that no user of it comes later in the block). The block
    then travels off the GPU with `sched.move` and comes back for
    `sched.take_activation`.

    ```mlir
    sched.put_activation %x index(3) at(1024) : tensor<2x8x16xf32>
    ```
  }];
  let arguments = (ins AnyStaticShapeTensor:$value,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$index,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$at);
  let assemblyFormat = [{
    $value `index` `(` $index `)` (`at` `(` $at^ `)`)? attr-dict `:` type($value)
  }];
  let hasVerifier = 1;
}

def Sched_TakeActivationOp : Sched_BlockOp<"take_activation"> {
  let summary = "a new tensor holding an activation block's GPU copy";
  let description = [{
    The value `sched.put_activation` stored in block (`activations`,
    `index`), read from the block's GPU copy (which must be there: moved
    back with `sched.move ... host -> gpu`) into a tensor of its own, so the
    GPU copy can be dropped right after. The result type must be the put
    value's.

    ```mlir
    %y = sched.take_activation index(3) : tensor<2x8x16xf32>
    ```
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntNonNegative]>:$index);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = [{
    `index` `(` $index `)` attr-dict `:` type($result)
  }];
}

#endif // SPILLWAY_DIALECT_SCHED_IR_SCHEDOPS_TD
