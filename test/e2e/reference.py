#!/usr/bin/env python3
"""NumPy reference trainer for small ONNX training graphs.

Interprets an ONNX graph whose first output is a scalar loss, differentiates it
by walking the nodes backwards (one vector-Jacobian product per op), and trains
it with AdamW under the same contract as a Spillway executable:

  * every float initializer is a trainable parameter, integer initializers are
    constants;
  * graph inputs come from .npy files of shape [B, *input_shape]; step s
    (0-based) uses batch s % B;
  * AdamW is torch.optim.AdamW, decay on every parameter;
  * with `--optimizer foam --foam-params a,b,...` the listed 2-D parameters
    are updated by FOAM instead (blocked state folding, FOAM.md: the state
    folded in blocks of 2^--foam-level along the last dimension, the step
    scaled by --foam-alpha, the same lr, betas, eps and weight decay), as
    `spillwayc --optimizer foam` does for the weight matrices it selects;
  * the loss logged for step s (1-based) is the forward loss before that
    step's update.

The reference computes in float64 by default.  The executable trains in
float32, so its loss curve carries rounding error of order 1e-7 relative per
step that AdamW slowly amplifies; a float64 reference is the "exact" curve and
compare_losses.py's tolerance budgets for the executable's error alone rather
than for the sum of two float32 implementations' errors.  `--dtype float32`
runs the reference in float32, which measures how far float32 rounding alone
moves a curve (use it to choose --steps and --rtol for an e2e test).

`--self-test` checks the reference itself on the given model and batch 0:
forward loss against onnxruntime, every parameter gradient against central
finite differences in float64, and one AdamW step against its closed form.
"""

import argparse
import json
import math
import sys

import numpy as np
import onnx
from onnx import numpy_helper

FLOAT_TYPES = {
    onnx.TensorProto.FLOAT,
    onnx.TensorProto.DOUBLE,
    onnx.TensorProto.FLOAT16,
    onnx.TensorProto.BFLOAT16,
}


class ModelError(Exception):
    """A model or input the reference cannot handle; reported without a traceback."""


# ----------------------------------------------------------------------------
# Op forward functions and vector-Jacobian products.
#
# forward(attrs, inputs) -> list of outputs
# vjp(attrs, inputs, outputs, output_grads) -> list of input grads (None where
#   the input is not differentiable).  output_grads holds None for outputs no
#   gradient reaches.
# `inputs` holds None for omitted optional inputs.
# ----------------------------------------------------------------------------


def unbroadcast(grad, shape):
    """Sums `grad` over the axes numpy broadcasting added to reach `shape`."""
    shape = tuple(shape)
    while grad.ndim > len(shape):
        grad = grad.sum(axis=0)
    for axis, dim in enumerate(shape):
        if dim == 1 and grad.shape[axis] != 1:
            grad = grad.sum(axis=axis, keepdims=True)
    return grad


def matmul_fwd(attrs, ins):
    return [np.matmul(ins[0], ins[1])]


def matmul_vjp(attrs, ins, outs, gouts):
    a, b = ins
    g = gouts[0]
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    if a.ndim == 1:
        g = np.expand_dims(g, -2)
    if b.ndim == 1:
        g = np.expand_dims(g, -1)
    ga = unbroadcast(g @ np.swapaxes(b2, -1, -2), a2.shape).reshape(a.shape)
    gb = unbroadcast(np.swapaxes(a2, -1, -2) @ g, b2.shape).reshape(b.shape)
    return [ga, gb]


def _gemm_operands(attrs, ins):
    a = ins[0].T if attrs.get("transA", 0) else ins[0]
    b = ins[1].T if attrs.get("transB", 0) else ins[1]
    return a, b


def gemm_fwd(attrs, ins):
    a, b = _gemm_operands(attrs, ins)
    y = attrs.get("alpha", 1.0) * (a @ b)
    c = ins[2] if len(ins) > 2 else None
    if c is not None:
        y = y + attrs.get("beta", 1.0) * c
    return [y]


def gemm_vjp(attrs, ins, outs, gouts):
    a, b = _gemm_operands(attrs, ins)
    g = gouts[0]
    alpha = attrs.get("alpha", 1.0)
    ga = alpha * (g @ b.T)
    gb = alpha * (a.T @ g)
    grads = [
        ga.T if attrs.get("transA", 0) else ga,
        gb.T if attrs.get("transB", 0) else gb,
    ]
    if len(ins) > 2:
        c = ins[2]
        grads.append(None if c is None else unbroadcast(attrs.get("beta", 1.0) * g, c.shape))
    return grads


def add_vjp(attrs, ins, outs, gouts):
    g = gouts[0]
    return [unbroadcast(g, ins[0].shape), unbroadcast(g, ins[1].shape)]


def sub_vjp(attrs, ins, outs, gouts):
    g = gouts[0]
    return [unbroadcast(g, ins[0].shape), unbroadcast(-g, ins[1].shape)]


def mul_vjp(attrs, ins, outs, gouts):
    a, b = ins
    g = gouts[0]
    return [unbroadcast(g * b, a.shape), unbroadcast(g * a, b.shape)]


def div_vjp(attrs, ins, outs, gouts):
    a, b = ins
    g = gouts[0]
    return [unbroadcast(g / b, a.shape), unbroadcast(-g * a / (b * b), b.shape)]


def relu_vjp(attrs, ins, outs, gouts):
    return [gouts[0] * (ins[0] > 0)]


def tanh_vjp(attrs, ins, outs, gouts):
    return [gouts[0] * (1 - outs[0] * outs[0])]


_erf = np.vectorize(math.erf, otypes=[np.float64])
_GELU_K = math.sqrt(2 / math.pi)


def _gelu_approximate(attrs):
    mode = attrs.get("approximate", "none")
    if mode not in ("none", "tanh"):
        raise ModelError(f"Gelu approximate={mode!r} is not an ONNX mode")
    return mode


def gelu_fwd(attrs, ins):
    x = ins[0]
    if _gelu_approximate(attrs) == "tanh":
        return [0.5 * x * (1 + np.tanh(_GELU_K * (x + 0.044715 * x**3)))]
    return [(0.5 * x * (1 + _erf(x / math.sqrt(2)))).astype(x.dtype)]


def gelu_vjp(attrs, ins, outs, gouts):
    x = ins[0]
    if _gelu_approximate(attrs) == "tanh":
        t = np.tanh(_GELU_K * (x + 0.044715 * x**3))
        dy = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * _GELU_K * (1 + 3 * 0.044715 * x**2)
    else:
        cdf = 0.5 * (1 + _erf(x / math.sqrt(2)))
        pdf = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
        dy = (cdf + x * pdf).astype(x.dtype)
    return [gouts[0] * dy]


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def softmax_fwd(attrs, ins):
    return [_softmax(ins[0], attrs.get("axis", -1))]


def softmax_vjp(attrs, ins, outs, gouts):
    y, g = outs[0], gouts[0]
    return [y * (g - (g * y).sum(axis=attrs.get("axis", -1), keepdims=True))]


def _norm_axes(attrs, x):
    axis = attrs.get("axis", -1) % x.ndim
    return tuple(range(axis, x.ndim))


def layernorm_fwd(attrs, ins):
    x, scale = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    axes = _norm_axes(attrs, x)
    mean = x.mean(axis=axes, keepdims=True)
    inv_std = 1 / np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + attrs.get("epsilon", 1e-5))
    y = (x - mean) * inv_std * scale
    if bias is not None:
        y = y + bias
    return [y, mean, inv_std]


def layernorm_vjp(attrs, ins, outs, gouts):
    if gouts[1] is not None or gouts[2] is not None:
        raise ModelError("gradient through LayerNormalization's Mean/InvStdDev outputs is not supported")
    x, scale = ins[0], ins[1]
    g = gouts[0]
    axes = _norm_axes(attrs, x)
    mean, inv_std = outs[1], outs[2]
    xhat = (x - mean) * inv_std
    gxhat = g * scale
    gx = inv_std * (
        gxhat - gxhat.mean(axis=axes, keepdims=True) - xhat * (gxhat * xhat).mean(axis=axes, keepdims=True)
    )
    grads = [gx, unbroadcast(g * xhat, scale.shape)]
    if len(ins) > 2:
        grads.append(None if ins[2] is None else unbroadcast(g, ins[2].shape))
    return grads


def _gather_index(attrs, data, indices):
    axis = attrs.get("axis", 0) % data.ndim
    dim = data.shape[axis]
    if np.any(indices >= dim) or np.any(indices < -dim):
        raise ModelError(f"Gather index out of range for axis {axis} of size {dim}")
    return (slice(None),) * axis + (np.where(indices < 0, indices + dim, indices),)


def gather_fwd(attrs, ins):
    return [ins[0][_gather_index(attrs, ins[0], ins[1])]]


def gather_vjp(attrs, ins, outs, gouts):
    data = ins[0]
    grad = np.zeros_like(data)
    np.add.at(grad, _gather_index(attrs, data, ins[1]), gouts[0])
    return [grad, None]


def reshape_fwd(attrs, ins):
    x, shape = ins
    target = [int(d) for d in shape]
    if not attrs.get("allowzero", 0):
        target = [x.shape[i] if d == 0 else d for i, d in enumerate(target)]
    return [x.reshape(target)]


def reshape_vjp(attrs, ins, outs, gouts):
    return [gouts[0].reshape(ins[0].shape), None]


def _perm(attrs, x):
    return attrs.get("perm", list(reversed(range(x.ndim))))


def transpose_fwd(attrs, ins):
    return [np.transpose(ins[0], _perm(attrs, ins[0]))]


def transpose_vjp(attrs, ins, outs, gouts):
    return [np.transpose(gouts[0], np.argsort(_perm(attrs, ins[0])))]


def _reduce_axes(attrs, ins):
    """Axes to reduce, or None for the identity (noop_with_empty_axes)."""
    x = ins[0]
    if len(ins) > 1 and ins[1] is not None:
        axes = [int(a) for a in ins[1]]
    else:
        axes = list(attrs.get("axes", []))
    if not axes:
        return None if attrs.get("noop_with_empty_axes", 0) else tuple(range(x.ndim))
    return tuple(sorted(a % x.ndim for a in axes))


def _reduce_fwd(fn):
    def fwd(attrs, ins):
        axes = _reduce_axes(attrs, ins)
        if axes is None:
            return [ins[0]]
        return [fn(ins[0], axis=axes, keepdims=bool(attrs.get("keepdims", 1)))]

    return fwd


def _reduce_vjp(is_mean):
    def vjp(attrs, ins, outs, gouts):
        x, g = ins[0], gouts[0]
        axes = _reduce_axes(attrs, ins)
        if axes is None:
            grad = g
        else:
            kept = [1 if i in axes else d for i, d in enumerate(x.shape)]
            grad = np.broadcast_to(g.reshape(kept), x.shape).copy()
            if is_mean:
                grad = grad / math.prod(x.shape[i] for i in axes)
        return [grad] + [None] * (len(ins) - 1)

    return vjp


def _sce_parts(attrs, ins):
    """ONNX SoftmaxCrossEntropyLoss pieces: scores [N, C, d...], labels
    [N, d...], optional class weights [C].  `weight` is each item's weight
    (weights[label], or 1), zero where the label is ignore_index."""
    scores, labels = ins[0], ins[1]
    reduction = attrs.get("reduction", "mean")
    if reduction not in ("mean", "sum", "none"):
        raise ModelError(f"SoftmaxCrossEntropyLoss reduction={reduction!r} is not an ONNX mode")
    ignore = attrs.get("ignore_index")
    mask = np.ones(labels.shape, dtype=bool) if ignore is None else labels != ignore
    safe = np.where(mask, labels, 0)
    if np.any(safe < 0) or np.any(safe >= scores.shape[1]):
        raise ModelError(f"SoftmaxCrossEntropyLoss label out of range [0, {scores.shape[1]})")
    shifted = scores - scores.max(axis=1, keepdims=True)
    log_prob = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    onehot = np.moveaxis(np.eye(scores.shape[1], dtype=bool)[safe], -1, 1)
    weights = ins[2] if len(ins) > 2 else None
    class_weight = weights[safe] if weights is not None else np.ones(labels.shape, dtype=scores.dtype)
    weight = np.where(mask, class_weight, 0).astype(scores.dtype)
    # ONNX's "mean" divides by the summed weights when there are weights or an
    # ignore_index, else by the item count (the same when nothing is ignored).
    return reduction, mask, onehot, log_prob, safe, weight


def sce_fwd(attrs, ins):
    reduction, mask, onehot, log_prob, _, weight = _sce_parts(attrs, ins)
    nll = -(log_prob * onehot).sum(axis=1)
    per_item = (weight * nll).astype(log_prob.dtype)
    if reduction == "none":
        loss = per_item
    elif reduction == "sum":
        loss = per_item.sum()
    else:
        loss = per_item.sum() / weight.sum()
    return [np.asarray(loss, dtype=log_prob.dtype), log_prob]


def sce_vjp(attrs, ins, outs, gouts):
    reduction, mask, onehot, log_prob, safe, weight = _sce_parts(attrs, ins)
    prob = np.exp(log_prob)
    grad = np.zeros_like(log_prob)
    dweights = None
    has_weights = len(ins) > 2 and ins[2] is not None
    if gouts[0] is not None:
        g = np.broadcast_to(gouts[0], mask.shape).astype(log_prob.dtype)
        nll = -(log_prob * onehot).sum(axis=1)
        if reduction == "mean":
            total_weight = weight.sum()
            g_item = g / total_weight
            # d(sum(w * nll) / sum(w)) / dw_item = (nll - loss) / sum(w)
            g_weight = g * (nll - (weight * nll).sum() / total_weight) / total_weight
        else:
            g_item = g
            g_weight = g * nll
        grad = grad + np.expand_dims(g_item * weight, 1) * (prob - onehot)
        if has_weights:
            dweights = np.zeros_like(ins[2])
            np.add.at(dweights, safe[mask], g_weight[mask])
    if gouts[1] is not None:
        g = gouts[1]
        grad = grad + g - prob * g.sum(axis=1, keepdims=True)
    return [grad, None] + ([dweights] if len(ins) > 2 else [])


def _elementwise(fn):
    return lambda attrs, ins: [fn(*ins)]


OPS = {
    "MatMul": (matmul_fwd, matmul_vjp),
    "Gemm": (gemm_fwd, gemm_vjp),
    "Add": (_elementwise(np.add), add_vjp),
    "Sub": (_elementwise(np.subtract), sub_vjp),
    "Mul": (_elementwise(np.multiply), mul_vjp),
    "Div": (_elementwise(np.divide), div_vjp),
    "Neg": (_elementwise(np.negative), lambda attrs, ins, outs, gouts: [-gouts[0]]),
    "Relu": (_elementwise(lambda x: np.maximum(x, 0)), relu_vjp),
    "Tanh": (_elementwise(np.tanh), tanh_vjp),
    "Gelu": (gelu_fwd, gelu_vjp),
    "Softmax": (softmax_fwd, softmax_vjp),
    "LayerNormalization": (layernorm_fwd, layernorm_vjp),
    "Gather": (gather_fwd, gather_vjp),
    "Reshape": (reshape_fwd, reshape_vjp),
    "Transpose": (transpose_fwd, transpose_vjp),
    "ReduceSum": (_reduce_fwd(np.sum), _reduce_vjp(is_mean=False)),
    "ReduceMean": (_reduce_fwd(np.mean), _reduce_vjp(is_mean=True)),
    "SoftmaxCrossEntropyLoss": (sce_fwd, sce_vjp),
}


# ---- Ops real exporters emit. ---------------------------------------------


def _unary_vjp(dfdx):
    """VJP of y = f(x) given dy/dx as a function of (x, y)."""
    return lambda attrs, ins, outs, gouts: [gouts[0] * dfdx(ins[0], outs[0])]


def _not_differentiable(attrs, ins, outs, gouts):
    return [None] * len(ins)


def pow_fwd(attrs, ins):
    a, b = ins
    return [np.power(a, b).astype(a.dtype)]


def pow_vjp(attrs, ins, outs, gouts):
    a, b = ins
    g, y = gouts[0], outs[0]
    with np.errstate(divide="ignore", invalid="ignore"):  # log(a) of a < 0: only used when b is a parameter
        ga = unbroadcast(g * b * np.power(a, b - 1), a.shape)
        gb = unbroadcast(g * y * np.log(a), b.shape) if np.issubdtype(b.dtype, np.floating) else None
    return [ga, gb]


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def where_vjp(attrs, ins, outs, gouts):
    c, a, b = ins
    g = gouts[0]
    return [None, unbroadcast(np.where(c, g, 0), a.shape), unbroadcast(np.where(c, 0, g), b.shape)]


def _cast_target(attrs, x, float_dtype):
    target = onnx.helper.tensor_dtype_to_np_dtype(attrs["to"])
    # The reference computes every float in its own precision.
    return float_dtype if np.issubdtype(target, np.floating) else target


def cast_fwd(attrs, ins):
    x = ins[0]
    target = _cast_target(attrs, x, attrs["float_dtype"])
    if np.issubdtype(x.dtype, np.floating) and np.issubdtype(target, np.integer):
        x = np.trunc(x)
    return [x.astype(target)]


def cast_vjp(attrs, ins, outs, gouts):
    x = ins[0]
    floats = np.issubdtype(x.dtype, np.floating) and np.issubdtype(outs[0].dtype, np.floating)
    return [gouts[0].astype(x.dtype) if floats else None]


def reducemax_vjp(attrs, ins, outs, gouts):
    """dy to the maxima, split evenly among ties (torch.amax)."""
    x, g = ins[0], gouts[0]
    axes = _reduce_axes(attrs, ins)
    if axes is None:
        return [g] + [None] * (len(ins) - 1)
    kept = [1 if i in axes else d for i, d in enumerate(x.shape)]
    mask = (x == outs[0].reshape(kept)).astype(x.dtype)
    grad = mask * g.reshape(kept) / mask.sum(axis=axes, keepdims=True)
    return [grad] + [None] * (len(ins) - 1)


def concat_fwd(attrs, ins):
    return [np.concatenate(ins, axis=attrs["axis"])]


def concat_vjp(attrs, ins, outs, gouts):
    axis = attrs["axis"] % outs[0].ndim
    bounds = np.cumsum([x.shape[axis] for x in ins])[:-1]
    return np.split(gouts[0], bounds, axis=axis)


def _split_sizes(attrs, ins):
    x = ins[0]
    axis = attrs.get("axis", 0) % x.ndim
    if len(ins) > 1 and ins[1] is not None:
        return axis, [int(n) for n in ins[1]]
    if "split" in attrs:
        return axis, list(attrs["split"])
    parts = attrs.get("num_outputs")
    if parts is None:
        raise ModelError("Split without split sizes needs num_outputs (the reference cannot see the output count)")
    chunk = -(-x.shape[axis] // parts)
    return axis, [min(chunk, x.shape[axis] - i * chunk) for i in range(parts)]


def split_fwd(attrs, ins):
    axis, sizes = _split_sizes(attrs, ins)
    return np.split(ins[0], np.cumsum(sizes)[:-1], axis=axis)


def split_vjp(attrs, ins, outs, gouts):
    axis, _ = _split_sizes(attrs, ins)
    grads = [np.zeros_like(o) if g is None else g for o, g in zip(outs, gouts)]
    return [np.concatenate(grads, axis=axis)] + [None] * (len(ins) - 1)


def _slice_index(ins):
    """ONNX Slice as a tuple of Python slices (whose clamping ONNX shares)."""
    x, starts, ends = ins[0], ins[1], ins[2]
    axes = ins[3] if len(ins) > 3 and ins[3] is not None else range(len(starts))
    steps = ins[4] if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    index = [slice(None)] * x.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps):
        if step == 0:
            raise ModelError("Slice step 0")
        index[int(axis) % x.ndim] = slice(int(start), int(end), int(step))
    return tuple(index)


def slice_fwd(attrs, ins):
    return [ins[0][_slice_index(ins)]]


def slice_vjp(attrs, ins, outs, gouts):
    grad = np.zeros_like(ins[0])
    grad[_slice_index(ins)] = gouts[0]
    return [grad] + [None] * (len(ins) - 1)


def _axes_input_or_attr(attrs, ins):
    if len(ins) > 1 and ins[1] is not None:
        return [int(a) for a in ins[1]]
    return attrs.get("axes")


def unsqueeze_fwd(attrs, ins):
    x = ins[0]
    axes = _axes_input_or_attr(attrs, ins)
    rank = x.ndim + len(axes)
    return [np.expand_dims(x, tuple(sorted(a % rank for a in axes)))]


def squeeze_fwd(attrs, ins):
    x = ins[0]
    axes = _axes_input_or_attr(attrs, ins)
    return [np.squeeze(x) if axes is None else np.squeeze(x, tuple(a % x.ndim for a in axes))]


def reshape_back_vjp(attrs, ins, outs, gouts):
    return [gouts[0].reshape(ins[0].shape)] + [None] * (len(ins) - 1)


def expand_fwd(attrs, ins):
    x, shape = ins
    return [np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(int(d) for d in shape))).copy()]


def expand_vjp(attrs, ins, outs, gouts):
    return [unbroadcast(gouts[0], ins[0].shape), None]


def constant_of_shape_fwd(attrs, ins):
    value = attrs.get("value")
    fill = np.zeros(1, dtype=np.float32) if value is None else numpy_helper.to_array(value).reshape(1)
    if np.issubdtype(fill.dtype, np.floating):
        fill = fill.astype(attrs["float_dtype"])
    return [np.full([int(d) for d in ins[0]], fill[0], dtype=fill.dtype)]


def shape_fwd(attrs, ins):
    dims = np.array(ins[0].shape, dtype=np.int64)
    return [dims[attrs.get("start", 0):attrs.get("end", len(dims))]]


def range_fwd(attrs, ins):
    start, limit, delta = (np.asarray(v).reshape(()) for v in ins)
    return [np.arange(start, limit, delta, dtype=np.result_type(start, limit, delta))]


def _trilu(attrs, ins, x):
    k = int(np.asarray(ins[1]).reshape(())) if len(ins) > 1 and ins[1] is not None else 0
    return np.triu(x, k) if attrs.get("upper", 1) else np.tril(x, k)


def trilu_vjp(attrs, ins, outs, gouts):
    return [_trilu(attrs, ins, gouts[0])] + [None] * (len(ins) - 1)


OPS.update({
    "Pow": (pow_fwd, pow_vjp),
    "Sqrt": (_elementwise(np.sqrt), _unary_vjp(lambda x, y: 0.5 / y)),
    "Reciprocal": (_elementwise(np.reciprocal), _unary_vjp(lambda x, y: -y * y)),
    "Exp": (_elementwise(np.exp), _unary_vjp(lambda x, y: y)),
    "Log": (_elementwise(np.log), _unary_vjp(lambda x, y: 1 / x)),
    "Erf": (_elementwise(lambda x: _erf(x).astype(x.dtype)),
            _unary_vjp(lambda x, y: 2 / math.sqrt(math.pi) * np.exp(-x * x))),
    "Sigmoid": (_elementwise(_sigmoid), _unary_vjp(lambda x, y: y * (1 - y))),
    "Cos": (_elementwise(np.cos), _unary_vjp(lambda x, y: -np.sin(x))),
    "Sin": (_elementwise(np.sin), _unary_vjp(lambda x, y: np.cos(x))),
    "Identity": (_elementwise(lambda x: x), lambda attrs, ins, outs, gouts: [gouts[0]]),
    "Where": (_elementwise(np.where), where_vjp),
    "Equal": (_elementwise(np.equal), _not_differentiable),
    "Less": (_elementwise(np.less), _not_differentiable),
    "LessOrEqual": (_elementwise(np.less_equal), _not_differentiable),
    "Greater": (_elementwise(np.greater), _not_differentiable),
    "Cast": (cast_fwd, cast_vjp),
    "ReduceMax": (_reduce_fwd(np.max), reducemax_vjp),
    "Concat": (concat_fwd, concat_vjp),
    "Split": (split_fwd, split_vjp),
    "Slice": (slice_fwd, slice_vjp),
    "Unsqueeze": (unsqueeze_fwd, reshape_back_vjp),
    "Squeeze": (squeeze_fwd, reshape_back_vjp),
    "Expand": (expand_fwd, expand_vjp),
    "ConstantOfShape": (constant_of_shape_fwd, _not_differentiable),
    "Shape": (shape_fwd, _not_differentiable),
    "Range": (range_fwd, _not_differentiable),
    "Trilu": (lambda attrs, ins: [_trilu(attrs, ins, ins[0])], trilu_vjp),
})

# Ops whose float outputs take the reference's compute precision.
FLOAT_DTYPE_OPS = {"Cast", "ConstantOfShape"}


# ----------------------------------------------------------------------------
# Graph interpretation.
# ----------------------------------------------------------------------------


def _constant_value(node, dtype):
    attrs = {a.name: a for a in node.attribute}
    if "value" in attrs:
        value = numpy_helper.to_array(attrs["value"].t)
    elif "value_float" in attrs:
        value = np.array(attrs["value_float"].f, dtype=np.float32)
    elif "value_floats" in attrs:
        value = np.array(attrs["value_floats"].floats, dtype=np.float32)
    elif "value_int" in attrs:
        value = np.array(attrs["value_int"].i, dtype=np.int64)
    elif "value_ints" in attrs:
        value = np.array(attrs["value_ints"].ints, dtype=np.int64)
    else:
        raise ModelError(f"Constant node {node.name!r}: unsupported value attribute {sorted(attrs)}")
    return value.astype(dtype) if np.issubdtype(value.dtype, np.floating) else value


class Graph:
    """An ONNX training graph: parameters, constants, inputs and nodes."""

    def __init__(self, model, dtype):
        graph = model.graph
        self.dtype = dtype
        self.params = {}
        self.constants = {}
        for init in graph.initializer:
            value = numpy_helper.to_array(init)
            if init.data_type in FLOAT_TYPES:
                self.params[init.name] = value.astype(dtype)
            else:
                self.constants[init.name] = value
        self.inputs = {}
        for inp in graph.input:
            if inp.name in self.params or inp.name in self.constants:
                continue
            tensor_type = inp.type.tensor_type
            shape = tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor_type.shape.dim)
            self.inputs[inp.name] = (tensor_type.elem_type, shape)
        if not graph.output:
            raise ModelError("the graph has no outputs; its first output must be the scalar loss")
        self.loss_name = graph.output[0].name
        self.nodes = []
        for node in graph.node:
            if node.domain not in ("", "ai.onnx"):
                raise ModelError(f"node {node.name!r}: domain {node.domain!r} is not supported")
            if node.op_type == "Constant":
                self.constants[node.output[0]] = _constant_value(node, dtype)
                continue
            if node.op_type not in OPS:
                raise ModelError(
                    f"node {node.name!r}: op {node.op_type} is not supported (supported: {', '.join(sorted(OPS))})"
                )
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
            if node.op_type in FLOAT_DTYPE_OPS:
                attrs["float_dtype"] = dtype
            self.nodes.append((node, attrs))

    def feeds_for_step(self, batches, step):
        """The graph inputs of 0-based `step`: batch step % B of each input array."""
        feeds = {}
        for name, array in batches.items():
            batch = array[step % array.shape[0]]
            feeds[name] = batch.astype(self.dtype) if np.issubdtype(batch.dtype, np.floating) else batch
        return feeds

    def forward(self, params, feeds):
        """Runs the graph.

        Returns the environment of every named tensor and, per node, the list of
        all outputs its op computed (named or not: VJPs may need them all).
        """
        env = dict(self.constants)
        env.update(params)
        env.update(feeds)
        node_outs = []
        for node, attrs in self.nodes:
            ins = [env[name] if name else None for name in node.input]
            outs = OPS[node.op_type][0](attrs, ins)
            node_outs.append(outs)
            for name, value in zip(node.output, outs):
                if name:
                    env[name] = value
        loss = env[self.loss_name]
        if loss.size != 1:
            raise ModelError(f"the first graph output {self.loss_name!r} has shape {loss.shape}, not a scalar loss")
        return env, node_outs

    def loss(self, params, feeds):
        return float(self.forward(params, feeds)[0][self.loss_name].reshape(()))

    def loss_and_grads(self, params, feeds):
        """The scalar loss and d loss / d parameter for every parameter."""
        env, node_outs = self.forward(params, feeds)
        needs_grad = set(params)
        for node, _ in self.nodes:
            if any(name in needs_grad for name in node.input):
                needs_grad.update(name for name in node.output if name)
        grads = {self.loss_name: np.ones_like(env[self.loss_name])}
        for (node, attrs), outs in zip(reversed(self.nodes), reversed(node_outs)):
            gouts = [grads.get(name) if name else None for name in node.output]
            if all(g is None for g in gouts):
                continue
            gouts += [None] * (len(outs) - len(gouts))
            ins = [env[name] if name else None for name in node.input]
            gins = OPS[node.op_type][1](attrs, ins, outs, gouts)
            for name, g in zip(node.input, gins):
                if name in needs_grad and g is not None:
                    grads[name] = grads[name] + g if name in grads else g
        # A parameter without a differentiable path to the loss has no gradient
        # (torch: .grad is None) and AdamW leaves it alone.
        param_grads = {name: grads[name] for name in params if name in grads}
        return float(env[self.loss_name].reshape(())), param_grads


# ----------------------------------------------------------------------------
# AdamW, exactly torch.optim.AdamW (amsgrad=False, maximize=False), and FOAM
# for the parameters named in `foam`.
# ----------------------------------------------------------------------------


def fold(x, level):
    """FOAM's blockmean over the last dimension: blocks of 2^level, the last
    one zero padded, every mean divided by 2^level."""
    b = 1 << level
    rows, n = x.shape
    nb = -(-n // b)
    padded = np.zeros((rows, nb * b), dtype=x.dtype)
    padded[:, :n] = x
    return padded.reshape(rows, nb, b).sum(axis=2) / b


def unfold(y, n, level):
    """Each block value of `y` repeated over its block: [rows, n]."""
    return np.repeat(y, 1 << level, axis=1)[:, :n]


class AdamW:
    def __init__(self, params, lr, beta1, beta2, eps, weight_decay, foam=None):
        """`foam`: None, or (level, alpha, names): FOAM updates those 2-D
        parameters, with the same lr, betas, eps and weight decay."""
        self.lr, self.beta1, self.beta2, self.eps, self.weight_decay = lr, beta1, beta2, eps, weight_decay
        self.foam_level, self.foam_alpha, self.foam_params = (0, 1.0, set()) if foam is None else foam
        for name in sorted(self.foam_params):
            if name not in params:
                raise ModelError(f"--foam-params: the model has no parameter {name!r}")
            if params[name].ndim != 2:
                raise ModelError(f"--foam-params: {name} has shape {list(params[name].shape)}; FOAM folds 2-D weights")
        self.m = {name: np.zeros_like(p) for name, p in params.items()}
        self.v = {name: np.zeros_like(p) for name, p in params.items()}
        for name in self.foam_params:
            self.m[name] = fold(np.zeros_like(params[name]), self.foam_level)
            self.v[name] = np.zeros_like(self.m[name])
        self.t = 0

    def step(self, params, grads):
        """Updates `params` in place."""
        self.t += 1
        step_size = self.lr / (1 - self.beta1**self.t)
        bias_correction2_sqrt = math.sqrt(1 - self.beta2**self.t)
        for name, p in params.items():
            if name not in grads:
                continue
            g = grads[name]
            if name in self.foam_params:
                self.foam_step(name, p, g)
                continue
            p *= 1 - self.lr * self.weight_decay
            self.m[name] = self.beta1 * self.m[name] + (1 - self.beta1) * g
            self.v[name] = self.beta2 * self.v[name] + (1 - self.beta2) * g * g
            p -= step_size * self.m[name] / (np.sqrt(self.v[name]) / bias_correction2_sqrt + self.eps)

    def foam_step(self, name, p, g):
        """FOAM.md's update, materializing unfold, the residual R, m and v."""
        level, n = self.foam_level, p.shape[1]
        gbar = fold(g, level)
        self.m[name] = self.beta1 * self.m[name] + (1 - self.beta1) * gbar
        self.v[name] = self.beta2 * self.v[name] + (1 - self.beta2) * fold(g * g, level)
        r = g - unfold(gbar, n, level)
        m = unfold(self.m[name], n, level) + r
        v = unfold(self.v[name], n, level) + r * r
        step_size = self.lr * math.sqrt(1 - self.beta2**self.t) / (1 - self.beta1**self.t)
        p -= step_size * self.foam_alpha * m / (np.sqrt(v) + self.eps)
        p -= self.lr * self.weight_decay * p


# ----------------------------------------------------------------------------
# Command line.
# ----------------------------------------------------------------------------


def load_inputs(graph, specs):
    batches = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ModelError(f"--input {spec!r}: expected NAME=FILE.npy")
        if name not in graph.inputs:
            raise ModelError(f"--input {name}: the graph has no input {name!r} (inputs: {sorted(graph.inputs)})")
        try:
            array = np.load(path)
        except OSError as e:
            raise ModelError(f"--input {name}: cannot read {path}: {e}") from e
        elem_type, shape = graph.inputs[name]
        expected_dtype = onnx.helper.tensor_dtype_to_np_dtype(elem_type)
        if array.dtype != expected_dtype:
            raise ModelError(f"--input {name}: {path} holds {array.dtype}; the graph input is {expected_dtype}")
        if array.ndim != len(shape) + 1 or any(d is not None and d != a for d, a in zip(shape, array.shape[1:])):
            raise ModelError(
                f"--input {name}: {path} has shape {array.shape}; expected [B, *{list(shape)}] (B batches)"
            )
        if array.shape[0] == 0:
            raise ModelError(f"--input {name}: {path} holds no batches")
        batches[name] = array
    missing = sorted(set(graph.inputs) - set(batches))
    if missing:
        raise ModelError(f"no --input for graph input(s) {', '.join(missing)}")
    return batches


def train(graph, batches, args):
    params = {name: p.copy() for name, p in graph.params.items()}
    foam = None
    if args.optimizer == "foam":
        foam = (args.foam_level, args.foam_alpha, set(args.foam_params))
    opt = AdamW(params, args.lr, args.beta1, args.beta2, args.eps, args.weight_decay, foam)
    records = []
    for step in range(args.steps):
        loss, grads = graph.loss_and_grads(params, graph.feeds_for_step(batches, step))
        records.append({"step": step + 1, "loss": loss, "lr": args.lr})
        opt.step(params, grads)
    return records


def check_against_onnxruntime(model, graph, feeds32, feeds):
    """Forward loss of the float32 model in onnxruntime vs the reference's.

    The error is relative to max(|loss|, 1): a loss that cancels to near zero
    (a random linear functional can) is judged by float32's absolute precision.
    """
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ort_loss = float(np.asarray(session.run([graph.loss_name], feeds32)[0]).reshape(()))
    ref_loss = graph.loss(graph.params, feeds)
    rel = abs(ort_loss - ref_loss) / max(abs(ref_loss), 1.0)
    ok = rel < 1e-5
    print(f"forward vs onnxruntime: reference {ref_loss:.10g}  onnxruntime {ort_loss:.10g}"
          f"  err/max(|loss|,1) {rel:.2e}  {'ok' if ok else 'FAIL (limit 1e-5)'}")
    return ok


def check_finite_differences(graph, feeds, max_elements, h=1e-6, rtol=1e-5, atol=1e-7):
    """Central differences on up to `max_elements` entries of every parameter."""
    params = {name: p.copy() for name, p in graph.params.items()}
    _, grads = graph.loss_and_grads(params, feeds)
    rng = np.random.default_rng(0)
    ok = True
    for name, p in params.items():
        flat = p.reshape(-1)
        picks = np.arange(flat.size)
        if flat.size > max_elements:
            picks = rng.choice(flat.size, max_elements, replace=False)
        worst_abs = worst_rel = 0.0
        bad = None
        for i in picks:
            saved = flat[i]
            flat[i] = saved + h
            plus = graph.loss(params, feeds)
            flat[i] = saved - h
            minus = graph.loss(params, feeds)
            flat[i] = saved
            numeric = (plus - minus) / (2 * h)
            analytic = float(grads[name].reshape(-1)[i])
            err = abs(analytic - numeric)
            worst_abs = max(worst_abs, err)
            worst_rel = max(worst_rel, err / max(abs(numeric), 1e-12))
            if err > atol + rtol * abs(numeric) and bad is None:
                bad = (int(i), analytic, numeric)
        status = "ok" if bad is None else f"FAIL at flat index {bad[0]}: analytic {bad[1]:.10g} numeric {bad[2]:.10g}"
        print(f"gradient {name} {list(p.shape)}: {len(picks)} entries, max abs err {worst_abs:.2e},"
              f" max rel err {worst_rel:.2e}  {status}")
        ok &= bad is None
    return ok


def check_adamw(graph, feeds, args):
    """One AdamW step from zero state equals p(1 - lr wd) - lr g / (|g| + eps)."""
    params = {name: p.copy() for name, p in graph.params.items()}
    _, grads = graph.loss_and_grads(params, feeds)
    AdamW(params, args.lr, args.beta1, args.beta2, args.eps, args.weight_decay).step(params, grads)
    worst = 0.0
    for name, p in params.items():
        g = grads[name]
        expected = graph.params[name] * (1 - args.lr * args.weight_decay) - args.lr * g / (np.abs(g) + args.eps)
        worst = max(worst, float(np.max(np.abs(p - expected), initial=0.0)))
    ok = worst <= 1e-12 * max(1.0, args.lr)
    print(f"AdamW first step vs closed form: max abs err {worst:.2e}  {'ok' if ok else 'FAIL'}")
    return ok


def self_test(model, batches, args):
    graph64 = Graph(model, np.float64)
    feeds32 = Graph(model, np.float32).feeds_for_step(batches, 0)
    feeds64 = graph64.feeds_for_step(batches, 0)
    ok = check_against_onnxruntime(model, graph64, feeds32, feeds64)
    ok &= check_finite_differences(graph64, feeds64, args.max_fd_elements)
    ok &= check_adamw(graph64, feeds64, args)
    print("self-test passed" if ok else "self-test FAILED")
    return ok


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description="NumPy reference trainer (forward, backward, AdamW) for small ONNX training graphs. "
        "Writes the per-step losses in the executable's --log-json format (one JSON object per line).",
        epilog="example: %(prog)s examples/mlp/mlp.onnx --input x=examples/mlp/x.npy "
        "--input y=examples/mlp/y.npy --steps 20 --lr 1e-2 --out ref.jsonl",
    )
    parser.add_argument("model", help="ONNX model whose first output is the scalar loss")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                        help="graph input NAME fed from FILE.npy of shape [B, *input_shape]; step s uses batch s %% B")
    parser.add_argument("--steps", type=int, default=20, help="training steps (default: %(default)s)")
    parser.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate (default: %(default)s)")
    parser.add_argument("--beta1", type=float, default=0.9, help="AdamW beta1 (default: %(default)s)")
    parser.add_argument("--beta2", type=float, default=0.999, help="AdamW beta2 (default: %(default)s)")
    parser.add_argument("--eps", type=float, default=1e-8, help="AdamW epsilon (default: %(default)s)")
    parser.add_argument("--weight-decay", type=float, default=0.01,
                        help="AdamW decoupled weight decay, applied to every parameter (default: %(default)s)")
    parser.add_argument("--optimizer", choices=["adamw", "foam"], default="adamw",
                        help="adamw for every parameter, or foam for the --foam-params and adamw for the rest "
                        "(default: %(default)s)")
    parser.add_argument("--foam-level", type=int, default=2, metavar="L",
                        help="FOAM: fold the state in blocks of 2^L along the last dimension (default: %(default)s)")
    parser.add_argument("--foam-alpha", type=float, default=0.25, metavar="A",
                        help="FOAM: scale of the update (default: %(default)s)")
    parser.add_argument("--foam-params", default="", metavar="NAME,...",
                        help="--optimizer foam: the 2-D parameters FOAM updates (the ones spillwayc folds)")
    parser.add_argument("--dtype", choices=["float64", "float32"], default="float64",
                        help="compute precision of training (default: %(default)s)")
    parser.add_argument("--out", metavar="FILE",
                        help="write {\"step\", \"loss\", \"lr\"} JSON lines here (default: stdout only)")
    parser.add_argument("--quiet", action="store_true", help="do not print the per-step losses")
    parser.add_argument("--self-test", action="store_true",
                        help="check the reference on batch 0 instead of training, always in float64: forward loss vs "
                        "onnxruntime, gradients vs finite differences, one AdamW step vs its closed form; "
                        "exit status 1 on failure")
    parser.add_argument("--max-fd-elements", type=int, default=256, metavar="N",
                        help="--self-test: finite-difference at most N entries per parameter (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.steps < 0:
        parser.error("--steps must be >= 0")
    args.foam_params = [name for name in args.foam_params.split(",") if name]
    if args.optimizer != "foam" and args.foam_params:
        parser.error("--foam-params needs --optimizer foam")
    if args.optimizer == "foam" and not args.foam_params:
        parser.error("--optimizer foam needs --foam-params (the parameters FOAM updates)")
    if not 0 <= args.foam_level <= 16:
        parser.error("--foam-level must be in [0, 16]")
    if not args.foam_alpha > 0:
        parser.error("--foam-alpha must be positive")
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        try:
            model = onnx.load(args.model)
        except Exception as e:  # onnx.load raises OSError or protobuf's DecodeError
            raise ModelError(f"cannot load {args.model}: {e}") from e
        dtype = np.float64 if args.dtype == "float64" else np.float32
        graph = Graph(model, dtype)
        batches = load_inputs(graph, args.input)
        if args.self_test:
            return 0 if self_test(model, batches, args) else 1
        records = train(graph, batches, args)
    except ModelError as e:
        print(f"reference.py: error: {e}", file=sys.stderr)
        return 2
    lines = [json.dumps(r) for r in records]
    if not args.quiet:
        for r in records:
            print(f"step {r['step']:5d}  loss {r['loss']:.9g}")
    if args.out:
        with open(args.out, "w") as f:
            f.write("".join(line + "\n" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
