//===- TrainOps.td - train dialect ops ---------------------*- tablegen -*-===//

#ifndef SPILLWAY_DIALECT_TRAIN_IR_TRAINOPS_TD
#define SPILLWAY_DIALECT_TRAIN_IR_TRAINOPS_TD

include "spillway/Dialect/Train/IR/TrainDialect.td"
include "spillway/Dialect/Train/IR/TrainAttrs.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

def Train_FloatTensor : RankedTensorOf<[F32]>;
def Train_IndexTensor : RankedTensorOf<[I64, I32]>;
def Train_NumTensor : RankedTensorOf<[F32, I64, I32]>;
// Any tensor the runtime computes on: numbers and booleans (comparisons,
// masks).
def Train_Tensor : RankedTensorOf<[F32, I64, I32, I1]>;
// What train.cast converts between: those, and bf16 storage of f32 values
// (no other op reads or writes bf16).
def Train_CastTensor : RankedTensorOf<[F32, I64, I32, I1, BF16]>;
def Train_BoolTensor : RankedTensorOf<[I1]>;
def Train_ScalarF32 : 0DTensorOf<[F32]>;
// gradient clipping's coefficient: tensor<f32>, implied in the assembly.
def Train_ClipCoef : 0DTensorOf<[F32]> {
  let builderCall = "::mlir::RankedTensorType::get({}, $_builder.getF32Type())";
}

// Ops whose result shape follows from operands and attributes implement
// InferTypeOpInterface: builders need no result type and the verifier checks
// the written type against the inferred one.
class Train_InferOp<string mnemonic, list<Trait> traits = []>
    : Train_Op<mnemonic, !listconcat(traits,
        [Pure, DeclareOpInterfaceMethods<InferTypeOpInterface>])>;

//===----------------------------------------------------------------------===//
// Parameters and optimizer state
//===----------------------------------------------------------------------===//

def Train_ParamOp : Train_Op<"param", [Symbol, HasParent<"mlir::ModuleOp">]> {
  let summary = "declares a named trainable parameter";
  let description = [{
    A parameter of the model: its name (the ONNX initializer name, also the
    key under which `--save` writes it), its type, and where its initial value
    starts in the module's weights file (`offset`, in bytes; the size follows
    from the type). The file is named by the module attribute
    `train.weights`, relative to the directory of the MLIR file.

    ```mlir
    train.param @"fc1.weight" : tensor<784x128xf32> at 0
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<Train_Tensor>:$type,
                       I64Attr:$offset);
  let assemblyFormat = "$sym_name `:` $type `at` $offset attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getType());
    }
    /// Bytes the initial value occupies in the weights file.
    int64_t getNumBytes();
  }];
}

def Train_ParamValueOp : Train_Op<"param_value", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead]>]> {
  let summary = "the current value of a parameter";
  let arguments = (ins FlatSymbolRefAttr:$param);
  let results = (outs Train_Tensor:$result);
  let assemblyFormat = "$param attr-dict `:` type($result)";
}

def Train_ParamGradOp : Train_Op<"param_grad", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemWrite]>]> {
  let summary = "the gradient of the loss with respect to a parameter";
  let description = [{
    Produced by `train-autodiff`: hands the gradient of the function's scalar
    result with respect to `param` to the runtime, which keeps it (gradient
    checks read it there). `train-attach-optimizer` replaces it with an
    optimizer update.
  }];
  let arguments = (ins FlatSymbolRefAttr:$param, Train_FloatTensor:$grad);
  let assemblyFormat = "$param `,` $grad attr-dict `:` type($grad)";
}

def Train_ClipGradNormOp : Train_Op<"clip_grad_norm", [Pure]> {
  let summary = "global gradient-norm clipping's coefficient, as torch's "
                "clip_grad_norm_";
  let description = [{
    The barrier of global gradient-norm clipping (`spillwayc --grad-clip`,
    `train-attach-optimizer{grad-clip=F}`): reads the complete gradient of
    every updated parameter (in declaration order) and returns the float32
    coefficient torch.nn.utils.clip_grad_norm_(params, max_norm) multiplies
    them by:

    ```
    norm = sqrt(sum_i ||g_i||^2)        (the 2-norm of the per-tensor norms)
    coef = min(1, max_norm / (norm + 1e-6))
    ```

    Every update of the step takes the coefficient as its `clip` operand
    and multiplies its gradient by it first, so no update can run before
    the last gradient is complete; schedule passes keep that order because
    it is a data dependence. `max_norm` is the compile-time value; the
    executable's `--grad-clip` overrides it (0 turns clipping off: the
    coefficient is 1). The runtime (`spw_clip_grad_norm`) also logs the norm.

    ```mlir
    %c = train.clip_grad_norm %g0, %g1 {max_norm = 1.0 : f64}
        : tensor<4x4xf32>, tensor<4xf32>
    train.adamw @w, %g0 clip(%c) {...} : tensor<4x4xf32>
    ```
  }];
  let arguments = (ins Variadic<Train_FloatTensor>:$grads, F64Attr:$max_norm);
  let results = (outs Train_ClipCoef:$coef);
  let assemblyFormat = "$grads attr-dict `:` type($grads)";
  let hasVerifier = 1;
  let builders = [OpBuilder<(ins "::mlir::ValueRange":$grads,
                                 "double":$maxNorm), [{
    build($_builder, $_state,
          ::mlir::RankedTensorType::get({}, $_builder.getF32Type()), grads,
          $_builder.getF64FloatAttr(maxNorm));
  }]>];
}

def Train_AdamWOp : Train_Op<"adamw", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "one AdamW update of a parameter, as torch.optim.AdamW";
  let description = [{
    Updates `param` in place from `grad`, with the first and second moment
    state the runtime keeps for it and the runtime's step count t (from 1):

    ```
    p <- p * (1 - lr * weight_decay)            (decoupled, before the update)
    m <- beta1 * m + (1 - beta1) * g
    v <- beta2 * v + (1 - beta2) * g * g
    p <- p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
    ```

    The attributes are the compile-time defaults; hyper-parameters given to
    the executable override them.

    With `[begin, end)` (written after the parameter) only those elements of
    the parameter, in row-major order, and of its moments are updated: AdamW
    is elementwise, so the ranges of one parameter updated separately give
    the whole update bit for bit (`sched-overlap-optimizer` splits updates
    this way). `grad` is still the whole gradient.

    ```mlir
    train.adamw @w [4, 16), %g {lr = 1.0e-03 : f64, ...} : tensor<4x4xf32>
    ```

    With `clip(%c)` (gradient clipping, `train.clip_grad_norm`) the gradient
    is multiplied by the coefficient %c first.
  }];
  let arguments = (ins FlatSymbolRefAttr:$param, Train_FloatTensor:$grad,
                       Optional<Train_ClipCoef>:$clip,
                       F64Attr:$lr, F64Attr:$beta1, F64Attr:$beta2,
                       F64Attr:$eps, F64Attr:$weight_decay,
                       OptionalAttr<I64Attr>:$begin,
                       OptionalAttr<I64Attr>:$end);
  let assemblyFormat = [{
    $param (` ` `[` $begin^ `,` $end `)`)? `,` $grad (`clip` `(` $clip^ `)`)?
    attr-dict `:` type($grad)
  }];
  let hasVerifier = 1;
}

def Train_AdamWDeferOp : Train_Op<"adamw_defer", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "keep the AdamW update of a parameter's elements pending";
  let description = [{
    The update `train.adamw` would make of elements `[begin, end)` of
    `param` (row-major), deferred: the runtime records the gradient (all of
    it, as `train.adamw` does), keeps that slice of it, this step's number t
    and the hyper-parameters in effect, and changes neither the parameter
    nor its moments. `train.adamw_apply_pending` applies it later (in the
    next iteration, before the parameter is read again); the executable
    applies whatever is still pending after the last step, before it saves
    or checkpoints. The result is exactly the update `train.adamw` would
    have made now: nothing touches those elements in between.

    ```mlir
    train.adamw_defer @w [0, 4), %g {lr = 1.0e-03 : f64, ...} : tensor<4x4xf32>
    ```

    With `clip(%c)` the pending update keeps this step's clip coefficient
    too.
  }];
  let arguments = (ins FlatSymbolRefAttr:$param, I64Attr:$begin,
                       I64Attr:$end, Train_FloatTensor:$grad,
                       Optional<Train_ClipCoef>:$clip,
                       F64Attr:$lr, F64Attr:$beta1, F64Attr:$beta2,
                       F64Attr:$eps, F64Attr:$weight_decay);
  let assemblyFormat = [{
    $param ` ` `[` $begin `,` $end `)` `,` $grad (`clip` `(` $clip^ `)`)?
    attr-dict `:` type($grad)
  }];
  let hasVerifier = 1;
}

def Train_AdamWApplyPendingOp : Train_Op<"adamw_apply_pending", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "apply the deferred AdamW update of a parameter's elements";
  let description = [{
    Applies the update a `train.adamw_defer` of the same parameter and range
    left pending in an earlier step, with that step's gradient slice, step
    number and hyper-parameters, and forgets it. When nothing is pending
    (the first step, or after the executable flushed pending updates for a
    checkpoint) it does nothing.

    ```mlir
    train.adamw_apply_pending @w [0, 4)
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$param, I64Attr:$begin,
                       I64Attr:$end);
  let assemblyFormat = "$param ` ` `[` $begin `,` $end `)` attr-dict";
}

def Train_FoamOp : Train_Op<"foam", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "one FOAM update of a weight matrix (blocked state folding)";
  let description = [{
    Updates the 2-D parameter `param` (m x n) in place from `grad` G with
    folded Adam state (FOAM, arXiv 2512.07112; docs/compiler.md, "FOAM").
    Each row is cut into blocks of B = 2^level elements (the last block of a
    row zero-padded when B does not divide n; its means still divide by B).
    The runtime keeps m~ and v~, each m x ceil(n / B), and the step count t:

    ```
    gb = blockmean(G)      qb = blockmean(G * G)
    m~ <- beta1 * m~ + (1 - beta1) * gb
    v~ <- beta2 * v~ + (1 - beta2) * qb
    R  = G - unfold(gb)                       (recomputed, never stored)
    m  = unfold(m~) + R    v = unfold(v~) + R * R
    p <- p - lr * sqrt(1 - beta2^t) / (1 - beta1^t) * alpha * m / (sqrt(v) + eps)
    p <- p - lr * weight_decay * p            (decoupled, after the update)
    ```

    This is the authors' reference code (`foam_adam.py`): the second moment
    folds blockmean(G^2), not blockmean(G)^2, and eps and the weight decay
    sit as in the transformers AdamW it derives from. With level 0 and
    alpha 1 it is that AdamW (R = 0). `train-attach-optimizer{optimizer=foam}`
    emits it for the weight matrices (not embeddings or the LM head).

    ```mlir
    train.foam @w, %g {lr = 1.0e-02 : f64, ..., level = 2 : i64,
                       alpha = 2.5e-01 : f64} : tensor<64x256xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$param, Train_FloatTensor:$grad,
                       F64Attr:$lr, F64Attr:$beta1, F64Attr:$beta2,
                       F64Attr:$eps, F64Attr:$weight_decay,
                       I64Attr:$level, F64Attr:$alpha);
  let assemblyFormat = "$param `,` $grad attr-dict `:` type($grad)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Elements of each of the two folded moments: rows x ceil(n / 2^level).
    int64_t getStateElements();
  }];
}

//===----------------------------------------------------------------------===//
// Constants and shapes
//===----------------------------------------------------------------------===//

def Train_ConstantOp : Train_InferOp<"constant", [ConstantLike]> {
  let summary = "a small constant tensor";
  let description = [{
    Small constants only (shape operands, scalars, index tables): parameter
    values never go inline, they live in the weights file.
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Train_Tensor:$result);
  let assemblyFormat = "$value attr-dict";
  let hasFolder = 1;
}

def Train_ReshapeOp : Train_Op<"reshape", [Pure]> {
  let summary = "same elements, new static shape (ONNX Reshape)";
  let arguments = (ins Train_Tensor:$input);
  let results = (outs Train_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Train_TransposeOp : Train_InferOp<"transpose"> {
  let summary = "permute dimensions (ONNX Transpose)";
  let arguments = (ins Train_Tensor:$input, DenseI64ArrayAttr:$perm);
  let results = (outs Train_Tensor:$result);
  let assemblyFormat = "$input `,` $perm attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Train_GatherOp : Train_InferOp<"gather"> {
  let summary = "take slices of data at indices along an axis (ONNX Gather)";
  let arguments = (ins Train_FloatTensor:$data, Train_IndexTensor:$indices,
                       DefaultValuedAttr<I64Attr, "0">:$axis);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = [{
    $data `,` $indices attr-dict `:` type($data) `,` type($indices) `->` type($result)
  }];
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

class Train_BinaryOp<string mnemonic, string onnx> : Train_InferOp<mnemonic> {
  let summary = "elementwise " # mnemonic # " with numpy broadcasting (ONNX " # onnx # ")";
  let arguments = (ins Train_NumTensor:$lhs, Train_NumTensor:$rhs);
  let results = (outs Train_NumTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)
  }];
}

def Train_AddOp : Train_BinaryOp<"add", "Add">;
def Train_SubOp : Train_BinaryOp<"sub", "Sub">;
def Train_MulOp : Train_BinaryOp<"mul", "Mul">;
def Train_DivOp : Train_BinaryOp<"div", "Div">;
def Train_PowOp : Train_BinaryOp<"pow", "Pow"> {
  let summary = "elementwise lhs ^ rhs with numpy broadcasting (ONNX Pow)";
  let description = [{
    Both operands have one element type (the importer casts ONNX's mixed-type
    exponents first). Integer powers are exact and wrap on overflow; a
    negative integer exponent is a runtime error, as in numpy.
  }];
}

class Train_CompareOp<string mnemonic, string onnx> : Train_InferOp<mnemonic> {
  let summary = "elementwise comparison with numpy broadcasting, i1 result (ONNX " # onnx # ")";
  let arguments = (ins Train_Tensor:$lhs, Train_Tensor:$rhs);
  let results = (outs Train_BoolTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)
  }];
}

def Train_EqualOp : Train_CompareOp<"equal", "Equal">;
def Train_LessOp : Train_CompareOp<"less", "Less">;
def Train_LessOrEqualOp : Train_CompareOp<"less_or_equal", "LessOrEqual">;
def Train_GreaterOp : Train_CompareOp<"greater", "Greater">;

def Train_WhereOp : Train_InferOp<"where"> {
  let summary = "condition ? lhs : rhs, all three broadcast together (ONNX Where)";
  let arguments = (ins Train_BoolTensor:$condition, Train_Tensor:$lhs, Train_Tensor:$rhs);
  let results = (outs Train_Tensor:$result);
  let assemblyFormat = [{
    $condition `,` $lhs `,` $rhs attr-dict `:` type($condition) `,` type($lhs) `,` type($rhs) `->` type($result)
  }];
}

def Train_CastOp : Train_Op<"cast", [Pure]> {
  let summary = "convert elements to the result's element type, same shape (ONNX Cast)";
  let arguments = (ins Train_CastTensor:$input);
  let results = (outs Train_CastTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// f32 -> bf16: rounds a value into bf16 storage.
    bool roundsToBf16() {
      return getInput().getType().getElementType().isF32() &&
             getType().getElementType().isBF16();
    }
    /// bf16 -> f32: reads bf16 storage back, exactly.
    bool widensBf16() {
      return getInput().getType().getElementType().isBF16() &&
             getType().getElementType().isF32();
    }
  }];
}

class Train_UnaryOp<string mnemonic, string summ, list<Trait> traits = []>
    : Train_Op<mnemonic, !listconcat(traits, [Pure, SameOperandsAndResultType])> {
  let summary = summ;
  let arguments = (ins Train_FloatTensor:$input);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Train_NegOp : Train_UnaryOp<"neg", "elementwise negation (ONNX Neg)">;
def Train_ReluOp : Train_UnaryOp<"relu", "max(x, 0) (ONNX Relu)">;
def Train_TanhOp : Train_UnaryOp<"tanh", "hyperbolic tangent (ONNX Tanh)">;
def Train_ExpOp : Train_UnaryOp<"exp", "e^x (ONNX Exp)">;
def Train_LogOp : Train_UnaryOp<"log", "natural logarithm (ONNX Log)">;
def Train_SqrtOp : Train_UnaryOp<"sqrt", "square root (ONNX Sqrt)">;
def Train_ReciprocalOp : Train_UnaryOp<"reciprocal", "1 / x (ONNX Reciprocal)">;
def Train_ErfOp : Train_UnaryOp<"erf", "the error function (ONNX Erf)">;
def Train_SigmoidOp : Train_UnaryOp<"sigmoid", "1 / (1 + e^-x) (ONNX Sigmoid)">;
def Train_CosOp : Train_UnaryOp<"cos", "cosine (ONNX Cos)">;
def Train_SinOp : Train_UnaryOp<"sin", "sine (ONNX Sin)">;
def Train_SiluOp : Train_UnaryOp<"silu", "x * sigmoid(x) (fused; SiLU / swish)">;

def Train_GeluOp : Train_UnaryOp<"gelu", "Gaussian error linear unit (ONNX Gelu)"> {
  let description = [{
    `approximate = "none"`: x * Phi(x) with the exact normal CDF;
    `"tanh"`: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  }];
  let arguments = (ins Train_FloatTensor:$input,
                       DefaultValuedStrAttr<StrAttr, "none">:$approximate);
  let hasVerifier = 1;
}

def Train_SoftmaxOp : Train_UnaryOp<"softmax", "softmax along one axis (ONNX Softmax, opset 13+)"> {
  let arguments = (ins Train_FloatTensor:$input,
                       DefaultValuedAttr<SI64Attr, "-1">:$axis);
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Contractions, normalization, reductions, loss
//===----------------------------------------------------------------------===//

def Train_MatMulOp : Train_InferOp<"matmul"> {
  let summary = "numpy matmul on rank >= 2 operands with batch broadcasting (ONNX MatMul)";
  let arguments = (ins Train_FloatTensor:$lhs, Train_FloatTensor:$rhs);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)
  }];
}

def Train_GemmOp : Train_InferOp<"gemm"> {
  let summary = "alpha * op(A) op(B) + beta * C on 2-D operands (ONNX Gemm)";
  let arguments = (ins Train_FloatTensor:$a, Train_FloatTensor:$b,
                       Optional<Train_FloatTensor>:$c,
                       DefaultValuedAttr<F32Attr, "1.0">:$alpha,
                       DefaultValuedAttr<F32Attr, "1.0">:$beta,
                       DefaultValuedAttr<BoolAttr, "false">:$transA,
                       DefaultValuedAttr<BoolAttr, "false">:$transB);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = [{
    $a `,` $b (`,` $c^)? attr-dict `:` type($a) `,` type($b) (`,` type($c)^)? `->` type($result)
  }];
}

def Train_LayerNormOp : Train_Op<"layer_norm", [Pure,
    AllTypesMatch<["input", "result"]>]> {
  let summary = "layer normalization over the dimensions from axis on (ONNX LayerNormalization)";
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$scale,
                       Optional<Train_FloatTensor>:$bias,
                       DefaultValuedAttr<SI64Attr, "-1">:$axis,
                       DefaultValuedAttr<F32Attr, "1.0e-5">:$epsilon);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $scale (`,` $bias^)? attr-dict `:` type($input) `,` type($scale) (`,` type($bias)^)?
  }];
  let hasVerifier = 1;
}

class Train_ReduceOp<string mnemonic, string onnx,
                     Type tensor = Train_FloatTensor> : Train_InferOp<mnemonic> {
  let summary = "reduce over axes (all axes when empty) (ONNX " # onnx # ")";
  let arguments = (ins tensor:$input, DenseI64ArrayAttr:$axes,
                       DefaultValuedAttr<BoolAttr, "true">:$keepdims);
  let results = (outs tensor:$result);
  let assemblyFormat = "$input `,` $axes attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Train_ReduceSumOp : Train_ReduceOp<"reduce_sum", "ReduceSum">;
def Train_ReduceMeanOp : Train_ReduceOp<"reduce_mean", "ReduceMean">;
// Any element type: bool max is "any" (false < true), over no elements the
// type's lowest value (false for bool).
def Train_ReduceMaxOp : Train_ReduceOp<"reduce_max", "ReduceMax", Train_Tensor>;

def Train_ConcatOp : Train_InferOp<"concat"> {
  let summary = "join tensors along an axis (ONNX Concat)";
  let arguments = (ins Variadic<Train_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs Train_Tensor:$result);
  let assemblyFormat = "$inputs attr-dict `:` type($inputs) `->` type($result)";
}

def Train_SliceOp : Train_Op<"slice", [Pure]> {
  let summary = "strided slice with static, normalized starts and steps (ONNX Slice, Split)";
  let description = [{
    One entry per dimension: result element i along dimension d is input
    element `starts[d] + i * steps[d]`; the result type gives the count. The
    importer normalizes ONNX's negative and clamped starts/ends into this form.
  }];
  let arguments = (ins Train_Tensor:$input, DenseI64ArrayAttr:$starts,
                       DenseI64ArrayAttr:$steps);
  let results = (outs Train_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Train_SoftmaxCrossEntropyLossOp : Train_InferOp<"softmax_cross_entropy_loss"> {
  let summary = "softmax cross-entropy of [N, C] logits against [N] class labels (ONNX SoftmaxCrossEntropyLoss)";
  let description = [{
    `reduction` is "mean" (over the labels that are not `ignore_index`) or
    "sum". The result is a scalar.
  }];
  let arguments = (ins Train_FloatTensor:$logits, Train_IndexTensor:$labels,
                       DefaultValuedStrAttr<StrAttr, "mean">:$reduction,
                       OptionalAttr<SI64Attr>:$ignore_index);
  let results = (outs Train_ScalarF32:$result);
  let assemblyFormat = "$logits `,` $labels attr-dict `:` type($logits) `,` type($labels)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Fused ops (produced by train-fuse-patterns; the fast kernels implement them)
//===----------------------------------------------------------------------===//

def Train_LinearOp : Train_InferOp<"linear"> {
  let summary = "x @ w + b: a fully connected layer, x [..., K], w [K, N], b [N]";
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$weight,
                       Optional<Train_FloatTensor>:$bias);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? attr-dict `:` type($input) `,` type($weight) (`,` type($bias)^)? `->` type($result)
  }];
}

def Train_RmsNormOp : Train_Op<"rms_norm", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "x / sqrt(mean(x^2 over dims from axis) + epsilon) * scale (RMSNorm)";
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$scale,
                       DefaultValuedAttr<SI64Attr, "-1">:$axis,
                       DefaultValuedAttr<F32Attr, "1.0e-6">:$epsilon);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input `,` $scale attr-dict `:` type($input) `,` type($scale)";
  let hasVerifier = 1;
}

def Train_RopeOp : Train_Op<"rope", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "rotary embedding, rotate-half form: x * cos + rotate_half(x) * sin";
  let description = [{
    `rotate_half(x) = concat(-x[..., D/2:], x[..., :D/2])` over the last
    dimension D (even). `cos` and `sin` broadcast to x (numpy rules).
  }];
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$cos,
                       Train_FloatTensor:$sin);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input `,` $cos `,` $sin attr-dict `:` type($input) `,` type($cos) `,` type($sin)";
  let hasVerifier = 1;
}

def Train_AttentionOp : Train_Op<"attention", [Pure, AllTypesMatch<["query", "result"]>]> {
  let summary = "softmax(scale * Q K^T + causal mask) V with grouped KV heads";
  let description = [{
    Q [B, H, S, D], K and V [B, Hkv, S, D] with H a multiple of Hkv (query
    head h reads KV head h / (H / Hkv)). `causal` masks keys after the query
    position.
  }];
  let arguments = (ins Train_FloatTensor:$query, Train_FloatTensor:$key,
                       Train_FloatTensor:$value, F64Attr:$scale,
                       DefaultValuedAttr<BoolAttr, "true">:$causal);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = [{
    $query `,` $key `,` $value attr-dict `:` type($query) `,` type($key) `,` type($value)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Gradient ops (produced by train-autodiff)
//===----------------------------------------------------------------------===//

def Train_SumToShapeOp : Train_Op<"sum_to_shape", [Pure]> {
  let summary = "sum a broadcast result back to the shape it was broadcast from";
  let arguments = (ins Train_FloatTensor:$input);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Train_BroadcastToOp : Train_Op<"broadcast_to", [Pure]> {
  let summary = "numpy-broadcast a tensor to a larger shape (ONNX Expand)";
  let arguments = (ins Train_FloatTensor:$input);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

class Train_ActGradOp<string mnemonic, string first, string summ>
    : Train_Op<mnemonic, [Pure, AllTypesMatch<[first, "dy", "result"]>]> {
  let summary = summ;
  let results = (outs Train_FloatTensor:$result);
}

def Train_ReluGradOp : Train_ActGradOp<"relu_grad", "input", "dy * (x > 0)"> {
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$dy);
  let assemblyFormat = "$input `,` $dy attr-dict `:` type($result)";
}

def Train_TanhGradOp : Train_ActGradOp<"tanh_grad", "output", "dy * (1 - y^2), from y = tanh(x)"> {
  let arguments = (ins Train_FloatTensor:$output, Train_FloatTensor:$dy);
  let assemblyFormat = "$output `,` $dy attr-dict `:` type($result)";
}

def Train_GeluGradOp : Train_ActGradOp<"gelu_grad", "input", "dy * gelu'(x)"> {
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$dy,
                       DefaultValuedStrAttr<StrAttr, "none">:$approximate);
  let assemblyFormat = "$input `,` $dy attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Train_SoftmaxGradOp : Train_ActGradOp<"softmax_grad", "output",
    "y * (dy - sum(dy * y, axis)), from y = softmax(x, axis)"> {
  let arguments = (ins Train_FloatTensor:$output, Train_FloatTensor:$dy,
                       DefaultValuedAttr<SI64Attr, "-1">:$axis);
  let assemblyFormat = "$output `,` $dy attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Train_LayerNormGradOp : Train_Op<"layer_norm_grad", [Pure,
    AllTypesMatch<["input", "dy", "dinput"]>,
    AllTypesMatch<["scale", "dscale", "dbias"]>]> {
  let summary = "gradients of layer_norm w.r.t. input, scale and bias";
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$scale,
                       Train_FloatTensor:$dy,
                       DefaultValuedAttr<SI64Attr, "-1">:$axis,
                       DefaultValuedAttr<F32Attr, "1.0e-5">:$epsilon);
  let results = (outs Train_FloatTensor:$dinput, Train_FloatTensor:$dscale,
                      Train_FloatTensor:$dbias);
  let assemblyFormat = [{
    $input `,` $scale `,` $dy attr-dict `:` type($input) `,` type($scale)
  }];
  let hasVerifier = 1;
}

def Train_GatherGradOp : Train_Op<"gather_grad", [Pure]> {
  let summary = "scatter-add dy into zeros of the gathered data's shape";
  let arguments = (ins Train_IndexTensor:$indices, Train_FloatTensor:$dy,
                       DefaultValuedAttr<I64Attr, "0">:$axis);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = [{
    $indices `,` $dy attr-dict `:` type($indices) `,` type($dy) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Train_SiluGradOp : Train_ActGradOp<"silu_grad", "input", "dy * silu'(x)"> {
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$dy);
  let assemblyFormat = "$input `,` $dy attr-dict `:` type($result)";
}

def Train_SliceGradOp : Train_Op<"slice_grad", [Pure]> {
  let summary = "dy placed into zeros of the sliced input's shape at the slice's positions";
  let arguments = (ins Train_FloatTensor:$dy, DenseI64ArrayAttr:$starts,
                       DenseI64ArrayAttr:$steps);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$dy attr-dict `:` type($dy) `->` type($result)";
  let hasVerifier = 1;
}

def Train_RmsNormGradOp : Train_Op<"rms_norm_grad", [Pure,
    AllTypesMatch<["input", "dy", "dinput"]>,
    AllTypesMatch<["scale", "dscale"]>]> {
  let summary = "gradients of rms_norm w.r.t. input and scale";
  let arguments = (ins Train_FloatTensor:$input, Train_FloatTensor:$scale,
                       Train_FloatTensor:$dy,
                       DefaultValuedAttr<SI64Attr, "-1">:$axis,
                       DefaultValuedAttr<F32Attr, "1.0e-6">:$epsilon);
  let results = (outs Train_FloatTensor:$dinput, Train_FloatTensor:$dscale);
  let assemblyFormat = "$input `,` $scale `,` $dy attr-dict `:` type($input) `,` type($scale)";
  let hasVerifier = 1;
}

def Train_RopeGradOp : Train_Op<"rope_grad", [Pure, AllTypesMatch<["dy", "result"]>]> {
  let summary = "gradient of rope w.r.t. its input: dy * cos + rotate_half^T(dy * sin)";
  let arguments = (ins Train_FloatTensor:$dy, Train_FloatTensor:$cos,
                       Train_FloatTensor:$sin);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = "$dy `,` $cos `,` $sin attr-dict `:` type($dy) `,` type($cos) `,` type($sin)";
}

def Train_AttentionGradOp : Train_Op<"attention_grad", [Pure,
    AllTypesMatch<["query", "dy", "dquery"]>,
    AllTypesMatch<["key", "dkey"]>, AllTypesMatch<["value", "dvalue"]>]> {
  let summary = "gradients of attention w.r.t. Q, K, V (recomputes the probabilities)";
  let arguments = (ins Train_FloatTensor:$query, Train_FloatTensor:$key,
                       Train_FloatTensor:$value, Train_FloatTensor:$dy,
                       F64Attr:$scale, DefaultValuedAttr<BoolAttr, "true">:$causal);
  let results = (outs Train_FloatTensor:$dquery, Train_FloatTensor:$dkey,
                      Train_FloatTensor:$dvalue);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $dy attr-dict `:` type($query) `,` type($key) `,` type($value)
  }];
}

def Train_SoftmaxCrossEntropyLossGradOp : Train_Op<"softmax_cross_entropy_loss_grad", [
    Pure, AllTypesMatch<["logits", "result"]>]> {
  let summary = "gradient of softmax_cross_entropy_loss w.r.t. the logits";
  let arguments = (ins Train_FloatTensor:$logits, Train_IndexTensor:$labels,
                       Train_ScalarF32:$dloss,
                       DefaultValuedStrAttr<StrAttr, "mean">:$reduction,
                       OptionalAttr<SI64Attr>:$ignore_index);
  let results = (outs Train_FloatTensor:$result);
  let assemblyFormat = [{
    $logits `,` $labels `,` $dloss attr-dict `:` type($logits) `,` type($labels) `,` type($dloss)
  }];
  let hasVerifier = 1;
}

#endif // SPILLWAY_DIALECT_TRAIN_IR_TRAINOPS_TD
