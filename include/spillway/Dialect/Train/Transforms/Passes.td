//===- Passes.td - train dialect passes --------------------*- tablegen -*-===//

#ifndef SPILLWAY_DIALECT_TRAIN_TRANSFORMS_PASSES_TD
#define SPILLWAY_DIALECT_TRAIN_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def TrainFusePatternsPass : Pass<"train-fuse-patterns", "mlir::ModuleOp"> {
  let summary = "Replace decomposed ONNX patterns by fused train ops";
  let description = [{
    Runs on the forward graph (before `train-autodiff`). Recognises the
    spellings the TorchScript and dynamo exporters emit, as the ONNX importer
    leaves them (see test/parity/ops.md), and replaces each match by one
    fused op with its own kernel and gradient rule, computing the same values:
    - causal self-attention: matmul(Q, K^T), optionally scaled by a constant
      scalar (mul, or div -> 1/c), plus a constant causal mask (0 on and below
      the diagonal, <= -1e4 or -inf above, broadcasting to [B, H, S, S]),
      softmax on the last axis, matmul with V -> `train.attention` (no mask:
      `causal = false`). K^T may be a transpose of K or of its pre-transpose
      source (a transpose is made for K where needed); grouped KV heads
      expanded by reshape/broadcast_to/reshape are read unexpanded;
    - RMSNorm: pow(x, 2) (or x * x) -> reduce_mean over trailing axes ->
      add(eps) -> sqrt -> reciprocal (or div(1, .)) -> mul(x, .) ->
      mul(., weight), the weight of the normalized shape -> `train.rms_norm`;
    - GELU in tanh form (0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))))
      and erf form (0.5 x (1 + erf(x / sqrt 2)), or erf(x * 1/sqrt 2)), the
      products in any association and order -> `train.gelu`;
    - rotary embedding: x * cos + concat(-x[..., D/2:], x[..., :D/2]) * sin
      -> `train.rope`, only when cos/sin broadcast to x and are not computed
      from a parameter (train.rope has no gradient for its tables);
    - SiLU: x * sigmoid(x) -> `train.silu` (the gated MLP becomes
      silu(gate) * up);
    - linear: matmul(x[..., K], W[K, N]) (optionally + b of shape [N]), gemm
      with alpha = 1, no transA and a [N] C (beta = 1) or none (transB makes
      a transpose of W) -> `train.linear`; reshape(linear(reshape(x))) that
      only flattens and restores the leading dims -> linear on x.
    Every intermediate value of a chain must have no other use (else the
    chain stays: fusing would compute it twice); ops a chain only reads
    through (K's transposes, the KV expansion, a linear's input reshape) may.
    Matches are exact (constants compared within 1e-6 relative); anything
    else is left as it is. Dead ops are erased; nothing is folded.
    `patterns=none` leaves the module unchanged: the unfused reference for
    numerics tests.
  }];
  let dependentDialects = ["spillway::train::TrainDialect"];
  let options = [
    Option<"patterns", "patterns", "std::string", "\"all\"",
           "Comma-separated subset: attention,rms_norm,gelu,rope,silu,linear, " #
           "or all, or none (leaves the module unchanged: the unfused " #
           "reference for numerics tests)">
  ];
  let statistics = [
    Statistic<"numAttention", "attention", "train.attention ops created">,
    Statistic<"numRmsNorm", "rms-norm", "train.rms_norm ops created">,
    Statistic<"numGelu", "gelu", "train.gelu ops created">,
    Statistic<"numRope", "rope", "train.rope ops created">,
    Statistic<"numSilu", "silu", "train.silu ops created">,
    Statistic<"numLinear", "linear", "train.linear ops created">
  ];
}

def TrainMixedPrecisionPass : Pass<"train-mixed-precision", "mlir::ModuleOp"> {
  let summary = "bf16-mixed numerics: bf16 working weights and activations, fp32 compute";
  let description = [{
    Runs on the forward graph, after `train-fuse-patterns` and before
    `train-autodiff` (spillwayc --precision bf16-mixed). Each rounding to
    bf16 is a `train.cast` to bf16 and one back to f32 (round to nearest
    even; the bf16 value is what a layer boundary stores, see
    `train-partition-layers`), and the gradient rules of the two casts round
    the matching cotangent the same way:
    - working weights: every f32 `train.param_value` is rounded, so every
      op reads the parameter's bf16 copy (the f32 parameter is the master
      the optimizer updates); the parameter's gradient is the bf16-rounded
      gradient of that copy, accumulated across micro-batches in f32;
    - activations: every f32 result (rank >= 1) of an op computed from both
      inputs and parameters is rounded, except the loss
      (`train.softmax_cross_entropy_loss`) and what is computed from it,
      and a result only ops that move, select or negate values read
      (reshape, transpose, slice, concat, gather, broadcast_to, neg, relu,
      reduce_max): rounding their result is rounding their operands, so
      the rounding happens once, where such a chain ends, and the bf16 value
      is what a layer boundary there stores; casts the model makes itself
      are left as they are;
    - product operands: an f32 operand of `train.matmul`, `train.gemm`,
      `train.linear` or `train.attention` computed from inputs or constants
      alone (a model's float features) is rounded for that product only
      (a GPU's bf16 GEMM would round it anyway); its other readers keep
      the f32 values.
    Every op computes in f32 from the bf16 values it reads: matrix products
    of bf16 operands are exact in f32 and accumulate in f32; norms, softmax
    and the loss compute in f32. Values computed from inputs alone (masks,
    positions) or constants keep their f32 values. The module gets
    `train.precision = "bf16-mixed"` (what the planner's report reads).
    Fails on a module that has it already, or that holds gradients
    (`train.param_grad`, an optimizer update: run it before autodiff).
  }];
  let dependentDialects = ["spillway::train::TrainDialect"];
  let statistics = [
    Statistic<"numParamReads", "param-reads", "Parameter reads rounded to bf16">,
    Statistic<"numActivations", "activations", "Activations rounded to bf16">,
    Statistic<"numProductInputs", "product-inputs",
              "Product operands from inputs or constants rounded to bf16">
  ];
}

def TrainAutodiffPass : Pass<"train-autodiff", "mlir::ModuleOp"> {
  let summary = "Reverse-mode gradients of the scalar loss w.r.t. every parameter";
  let description = [{
    Assumes each `func.func` in the module returns exactly one value, a
    scalar `tensor<f32>` loss, computed from its arguments and
    `train.param_value` reads. Appends to each such function the reverse
    sweep: for every op on a path from a parameter to the loss, in reverse
    order, its gradient rule (one place per op kind) accumulates adjoints of
    its operands; broadcast operands get `train.sum_to_shape`. Ops off that
    path get no gradient ops. Before the return, for every parameter the
    function reads it emits one `train.param_grad @p, %g` holding
    d loss / d p (the adjoints of several reads of p summed), in the order
    the `train.param` ops are declared. A parameter with no differentiable
    path to the loss gets none, so no optimizer update (as torch skips a
    parameter whose .grad is None). Gradients of function arguments (inputs) are not computed.

    Fails with a diagnostic naming the op when an op on the path has no
    gradient rule, or when the result is not a scalar float tensor.
  }];
  let dependentDialects = ["spillway::train::TrainDialect"];
  let statistics = [
    Statistic<"numGradOps", "grad-ops", "Ops created by the reverse sweep">,
    Statistic<"numParams", "params", "Parameters differentiated">
  ];
}

def TrainAttachOptimizerPass : Pass<"train-attach-optimizer", "mlir::ModuleOp"> {
  let summary = "Turn every parameter gradient into an optimizer update";
  let description = [{
    Replaces each `train.param_grad @p, %g` (from `train-autodiff`) with the
    update of the chosen optimizer. `adamw` emits `train.adamw` with the
    given hyper-parameters, matching `torch.optim.AdamW` (weight decay on
    every parameter by default). `foam` emits `train.foam` (folded state,
    `foam-level`, `foam-alpha`) for the weight matrices: 2-D parameters a
    `train.matmul`, `train.gemm` or `train.linear` multiplies (through
    reshapes, transposes and casts), except embeddings (the table of a
    `train.gather`) and LM heads (a product whose result, through views,
    bias additions, slices and elementwise scaling or capping, is the
    logits of a `train.softmax_cross_entropy_loss`); every other parameter (norms,
    biases, embeddings, the head, a positional table that is only added)
    gets `train.adamw`. The
    executable may override the hyper-parameters (not the level) at run
    time.

    With `grad-clip` F > 0 (global gradient-norm clipping, as
    `torch.nn.utils.clip_grad_norm_(params, F)` before the optimizer step)
    a `train.clip_grad_norm` of every gradient, in parameter declaration
    order, goes after the last of them, and every update moves after it
    (in its order) and takes its coefficient as `clip`: the norm is a
    barrier no schedule can move an update across. FOAM takes no clip
    coefficient: `grad-clip` with `optimizer=foam` is an error.

    `state-dtype` is how the optimizer stores its moments (AdamW's and
    FOAM's m and v): `fp32` (the default; the module gets no attribute) or
    `bf16`, which sets the module's `train.optimizer_state_dtype = "bf16"`:
    2 bytes per moment element instead of 4, rounded to nearest even as the
    update stores them (it computes in f32). The lowering tells the runtime
    (`spw_declare_optimizer_state_dtype`), and the offload plans
    (`sched-assign-buffers`) and the planner's summary size the `optimizer`
    class by it. A module whose attribute says otherwise is an error.

    `state-shards` N > 1 (ZeRO stage 1 over N data-parallel ranks of an
    offload plan: `spillwayc --zero 1 --ranks N`) sets the module's
    `train.optimizer_state_shards = N`: each rank keeps its shard of every
    AdamW moment, so `sched-assign-buffers` and the planner's summary size
    each member of an optimizer block at the largest rank's shard, and the
    lowering tells the runtime (`spw_declare_optimizer_shards`). FOAM's
    folded state is not sharded: `state-shards` with `optimizer=foam` is an
    error, as is N above 65536.

    `shard-gradients` (ZeRO stage 2 of an offload plan: `spillwayc --zero 2
    --ranks N`) adds `gradients = true` to that attribute: the plan's
    gradient blocks hold one rank's shard of every member's gradient too,
    reduce-scattered as each layer's backward completes
    (`spw_declare_gradient_shards`). It needs `state-shards` N > 1.

    Fails when the optimizer is unknown, when an option is out of range, or
    when the module declares parameters but holds no `train.param_grad`
    (run `train-autodiff` first). A module without any `train.param` is
    left unchanged with a warning.
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", "\"adamw\"",
           "Optimizer to attach (adamw, foam)">,
    Option<"lr", "lr", "double", "1e-3", "Learning rate">,
    Option<"beta1", "beta1", "double", "0.9", "First-moment decay">,
    Option<"beta2", "beta2", "double", "0.999", "Second-moment decay">,
    Option<"eps", "eps", "double", "1e-8", "Denominator epsilon (outside the sqrt)">,
    Option<"weightDecay", "weight-decay", "double", "0.01",
           "Decoupled weight decay, applied to every parameter">,
    Option<"foamLevel", "foam-level", "int64_t", "2",
           "FOAM: fold each row's state in blocks of 2^level elements">,
    Option<"foamAlpha", "foam-alpha", "double", "0.25",
           "FOAM: scale of the folded update">,
    Option<"gradClip", "grad-clip", "double", "0",
           "Global gradient-norm clipping's max_norm (0: off)">,
    Option<"stateDtype", "state-dtype", "std::string", "\"fp32\"",
           "How the optimizer stores its moments m and v: fp32, or bf16 "
           "(2 bytes per element; train.optimizer_state_dtype)">,
    Option<"stateShards", "state-shards", "int64_t", "1",
           "Data-parallel ranks sharding the AdamW state of an offload plan "
           "(ZeRO stage 1; 1: whole; train.optimizer_state_shards)">,
    Option<"shardGradients", "shard-gradients", "bool", "false",
           "The offload plan's gradient blocks sharded over the state-shards "
           "ranks too (ZeRO stage 2)">
  ];
  let dependentDialects = ["spillway::train::TrainDialect"];
}

def TrainPartitionLayersPass : Pass<"train-partition-layers", "mlir::ModuleOp"> {
  let summary = "Group the ops of a training step into layers and phases";
  let description = [{
    Runs on the step function (the one `func.func` that reads parameters),
    normally after `train-autodiff` and `train-attach-optimizer`; a forward
    graph alone works too. Changes nothing but attributes:
    - every op of the step (not the terminator) gets `train.layer = L : i64`
      and `train.phase = "fwd" | "bwd" | "opt"`: `fwd` if the returned loss
      depends on it, `opt` for `train.adamw` / `train.param_grad`, `bwd` for
      the rest that feeds an update (an op that feeds neither takes `bwd` if
      it reads a backward value, else `fwd`);
    - every `train.param` the step reads gets `train.layer`, its owner (a
      parameter the step never reads gets none);
    - the module gets `train.layers`, one `#train.layer` per layer in
      forward order (the dialect verifies the table; LayerTable reads it):
      `name`, `params` (owned), and where present `shared` (for each
      owned parameter other layers read too, e.g. an embedding tied to the
      LM head: `used_by`, the layers whose forward reads it, and
      `grad_from`, the layers whose backward produces a part of its gradient
      — its update waits for all of them) and `uses` (parameters owned by
      other layers that this layer reads).

    Parameters into layers: a name with an all-digit component before its
    last one (`h.3.attn.c_attn.weight`, `layers.11.mlp.up_proj.weight`) is
    in the block layer named by the prefix through that component
    (`h.3`, `layers.11`). Any other parameter is grouped by its module path
    (the name without its last component; a name without a dot alone) and
    with the other such parameters one op reads (a linear's weight and
    bias); such a group whose first use lies inside a block's span of ops (a
    rotary frequency table) joins that block (the span: from the block's
    first parameter-reading op to its last). Consecutive groups without
    block index whose first reading op consumes nothing of the groups before
    them in the run are parallel branches (the q/k/v projections of a
    flat-named attention) and one layer, named `a+b+...`. Layers are ordered by the
    first forward op that reads one of their parameters with an activation
    (an op computed from inputs and parameters).

    Forward ops: an activation op joins the latest layer among the
    parameters it reads and the activation ops it consumes, except a cast
    from bf16 storage to f32, which joins the earliest layer among its users
    (so the bf16 value, not its f32 copy, crosses the layers). Other forward
    ops (parameter reads, weight transposes, constants, input reshapes) join
    the earliest layer among their forward users. Reading a parameter of a
    block layer from a later layer is an error (the names do not describe
    the graph); parameters of other layers may be read by later layers (a
    tied weight), which the summary records.

    Backward ops belong to the layer of the forward op they differentiate.
    That op read or computed every forward value the backward op reads, so
    it lies in the layers of those values and of their forward users (a
    weight read in one layer or an activation inside a layer pins it; a
    value crossing a layer boundary leaves two): of those candidates, the
    one layer whose updates the op's result feeds, else the first in
    backward order. A backward op reading no forward value goes to the
    layer whose update it hands its result to (a bias gradient), else stays
    with its cotangent operands (so the cotangent of layer l's input, summed
    from its uses, is layer l's backward). No backward op comes later in
    backward order than the cotangents it reads. Backward ops that read no
    cotangent (the loss seed, a transpose of an input) join the first layer
    in backward order that uses them. Optimizer ops belong to their
    parameter's owner.

    The result is monotone: forward values flow to the same or a later
    layer, cotangents to the same or an earlier one. Fails, naming the op
    and the layers, where a graph allows no such order (a forward op
    reading a block's parameter and a value of a later layer), and when
    more than one function reads parameters.
  }];
  let dependentDialects = ["spillway::train::TrainDialect"];
  let statistics = [
    Statistic<"numLayers", "layers", "Layers found">
  ];
}

#endif
