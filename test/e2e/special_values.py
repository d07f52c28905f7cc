#!/usr/bin/env python3
"""Special float values (NaN, +Inf, -Inf, -0) through every kernel, against onnxruntime.

Builds one forward-only ONNX model whose graph inputs hold NaN, +-Inf, +-0 and
ordinary values and whose outputs are one per op (every op the importer maps
to a kernel, plus the chains the compiler fuses: SiLU, RMSNorm, RoPE,
linear, causal attention), compiles it with `spillwayc --forward`, runs the
executable on each `--device` with `--outputs DIR`, and compares every output
with onnxruntime element by element, by class:

- NaN against NaN (any payload) at the same position; a NaN against a number
  is a mismatch either way;
- an infinity against the same infinity;
- a zero against a zero of the same sign (-0 where onnxruntime gives -0),
  except for ReduceMax, whose maximum of +0 and -0 may be either (IEEE 754
  leaves it open; onnxruntime keeps the first, numpy the last);
- other floats within 1e-5 relative (the kernels compute in double);
- integers and bools exactly; ops that only move bytes (Gather, Concat,
  Slice, Transpose, Reshape, Expand, Where) bit for bit.

Where onnxruntime departs from the ONNX specification, the expected value is
that of ONNX's reference implementation (onnx.reference), which follows the
specification; ORT_DEPARTS names each such op and why.

Cast from float to an integer type is undefined in ONNX for NaN, infinities
and values out of range (onnxruntime on x86 gives the minimum integer); there
the expected value is Spillway's documented rule instead (NaN -> 0, others
saturate), and onnxruntime is used for the rest.

Every device's outputs but cuda's must also be bit-identical to the first
device's (the loopback device runs the CPU kernels). With `--device cuda`
(on the GPU machine) the model is compiled `--target cuda --precision fp32`
and the GPU's outputs are compared with onnxruntime the same way. Prints one line per mismatching output
(op, element, inputs, got, expected), the ONNX ops and the kernels the model
exercised, and `PASS: N outputs match onnxruntime on DEVICES`. Exit 1 on any
mismatch.
"""
import argparse
import os
import re
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

F32 = np.float32
NAN, INF = float("nan"), float("inf")
# Every special value, and ordinary ones beside them.
SPECIALS = np.array([NAN, INF, -INF, -0.0, 0.0, 1.5, -2.0, 0.5], F32)
# Rows for the reductions and normalizations: a NaN first or later, opposite
# infinities, zeros of both signs, an infinity among numbers, all -Inf.
ROWS = np.array([[NAN, 1, 2], [1, 2, NAN], [INF, -INF, 1], [-0.0, -0.0, -0.0],
                 [-0.0, 0.0, -0.0], [0.0, -0.0, -0.0], [INF, 1, 2], [-INF, -INF, -INF],
                 [1, 2, 3], [-INF, 1, 0.5], [0, 0, 0], [-INF, INF, NAN]], F32)


# Outputs compared with onnx.reference instead of onnxruntime, and why.
ORT_DEPARTS = {
    "reduce_max": "onnxruntime's ReduceMax drops a NaN that is not the first "
                  "element of a row (microsoft/onnxruntime#10514); numpy's max propagates it",
    "where": "onnxruntime's Where returns +0 for a selected -0; Where selects",
}


class Model:
    def __init__(self):
        self.nodes, self.inputs, self.outputs, self.feeds = [], [], [], {}
        self.kinds = {}  # output name -> "float" | "bits" | "cast"
        self.ops = set()
        self.n = 0

    def input(self, name, value):
        value = np.asarray(value)
        self.inputs.append(helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape))
        self.feeds[name] = value
        return name

    def const(self, value):
        self.n += 1
        name = "c%d" % self.n
        self.nodes.append(helper.make_node("Constant", [], [name],
                                           value=numpy_helper.from_array(np.asarray(value), name)))
        return name

    def node(self, op, ins, out=None, **attrs):
        self.n += 1
        out = out or "t%d" % self.n
        self.nodes.append(helper.make_node(op, ins, [out], **attrs))
        if op != "Constant":
            self.ops.add(op)
        return out

    def output(self, name, kind="float"):
        self.outputs.append(name)
        self.kinds[name] = kind

    def op(self, name, op, ins, kind="float", **attrs):
        self.node(op, ins, name, **attrs)
        self.output(name, kind)

    def build(self):
        graph = helper.make_graph(self.nodes, "special_values", self.inputs, [])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
        model.ir_version = 9
        # The outputs' types, from shape inference.
        inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model, strict_mode=True).graph.value_info}
        model.graph.output.extend(inferred[n] for n in self.outputs)
        return model


def build():
    m = Model()
    x = m.input("x", SPECIALS)
    # Every pair of specials, for the binary ops.
    a = m.input("a", np.repeat(SPECIALS, len(SPECIALS)))
    b = m.input("b", np.tile(SPECIALS, len(SPECIALS)))
    for op in ["Relu", "Neg", "Tanh", "Sigmoid", "Exp", "Log", "Sqrt", "Reciprocal", "Erf",
               "Cos", "Sin"]:
        m.op(op.lower(), op, [x])
    m.op("gelu", "Gelu", [x])
    m.op("gelu_tanh", "Gelu", [x], approximate="tanh")
    # x * sigmoid(x) fuses into silu; its own input, so the sigmoid above is
    # not shared (a shared one keeps the chain unfused).
    xs = m.input("x_silu", SPECIALS)
    m.node("Sigmoid", [xs], "silu_sig")
    m.op("silu", "Mul", [xs, "silu_sig"])
    for op in ["Add", "Sub", "Mul", "Div", "Pow"]:
        m.op(op.lower(), op, [a, b])
    for op in ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"]:
        m.op(op.lower(), op, [a, b], kind="bits")
    cond = m.input("cond", np.arange(len(SPECIALS) ** 2) % 3 == 0)
    m.op("where", "Where", [cond, a, b], kind="bits")
    m.op("cast_i64", "Cast", [x], kind="cast", to=TP.INT64)
    m.op("cast_i32", "Cast", [x], kind="cast", to=TP.INT32)
    m.op("cast_bool", "Cast", [x], kind="bits", to=TP.BOOL)
    ints = m.input("ints", np.array([-2**31, -1, 0, 1, 2**31 - 1], np.int32))
    m.op("cast_i32_f32", "Cast", [ints], to=TP.FLOAT)
    longs = m.input("longs", np.array([-2**63, -1, 0, 2**53 + 1, 2**63 - 1], np.int64))
    m.op("cast_i64_f32", "Cast", [longs], to=TP.FLOAT)

    r = m.input("rows", ROWS)
    axes = m.const(np.array([1], np.int64))
    m.op("reduce_max", "ReduceMax", [r, axes], kind="float_any_zero", keepdims=0)
    m.op("reduce_sum", "ReduceSum", [r, axes], keepdims=0)
    m.op("reduce_mean", "ReduceMean", [r, axes], keepdims=0)
    m.op("softmax", "Softmax", [r], axis=1)
    scale = m.input("ln_scale", np.array([1, -1, 2], F32))
    bias = m.input("ln_bias", np.array([0, 0.5, -0.0], F32))
    m.op("layer_norm", "LayerNormalization", [r, scale, bias], axis=-1)
    # RMSNorm: w * (x * 1/sqrt(mean(x*x) + eps)) fuses into rms_norm.
    rr = m.input("rows_rms", ROWS)
    w = m.input("rms_w", np.array([1, -1, 2], F32))
    ms = m.node("ReduceMean", [m.node("Mul", [rr, rr]), m.const(np.array([-1], np.int64))], keepdims=1)
    inv = m.node("Reciprocal", [m.node("Sqrt", [m.node("Add", [ms, m.const(np.array(1e-6, F32))])])])
    m.op("rms_norm", "Mul", [w, m.node("Mul", [rr, inv])])
    labels = m.input("labels", np.array([0, 2, 1, 0, 1, 2, 1, 0, 2, 0, 1, 2], np.int64))
    # One loss per row, so that one NaN row does not hide the others.
    for i in range(len(ROWS)):
        row = m.node("Slice", [r, m.const(np.array([i], np.int64)), m.const(np.array([i + 1], np.int64)),
                               m.const(np.array([0], np.int64))])
        lab = m.node("Slice", [labels, m.const(np.array([i], np.int64)), m.const(np.array([i + 1], np.int64)),
                               m.const(np.array([0], np.int64))])
        m.op("xent_%d" % i, "SoftmaxCrossEntropyLoss", [row, lab], reduction="sum")

    # An ignored row's NaN and Inf do not reach the loss.
    xi = m.input("xent_x", np.array([[1, 2, 3], [NAN, INF, 1], [0, 1, -INF]], F32))
    li = m.input("xent_labels", np.array([0, -1, -1], np.int64))
    m.op("xent_ignored", "SoftmaxCrossEntropyLoss", [xi, li], reduction="mean", ignore_index=-1)

    # Products: 0 * Inf, Inf - Inf, NaN among numbers, -0 products.
    pa = m.input("mm_a", np.array([[[0, 1], [INF, 2]], [[NAN, 0], [-0.0, -0.0]], [[INF, -INF], [1, -1]]], F32))
    pb = m.input("mm_b", np.array([[[INF, 1], [0, 1]], [[1, 1], [1, -0.0]], [[1, 0], [1, 2]]], F32))
    m.op("matmul", "MatMul", [pa, pb])
    ga = m.input("gemm_a", np.array([[0, INF], [1, -0.0], [NAN, 2]], F32).T.copy())
    gb = m.input("gemm_b", np.array([[INF, 1], [1, -0.0]], F32))
    gc = m.input("gemm_c", np.array([-INF, 1], F32))
    m.op("gemm", "Gemm", [ga, gb, gc], transA=1, alpha=1.0, beta=1.0)  # transA: stays a gemm
    # beta = 0 does not read C (onnxruntime, BLAS): its NaN adds nothing.
    gc0 = m.input("gemm_c0", np.array([NAN, INF], F32))
    m.op("gemm_beta0", "Gemm", [m.input("gemm_a0", np.array([[1, 2], [3, -0.0]], F32)),
                                m.input("gemm_b0", np.array([[1, 0], [0, 1]], F32)), gc0],
         transA=1, alpha=1.0, beta=0.0)
    la = m.input("lin_x", np.array([[0, INF], [1, -0.0], [NAN, 2], [-INF, 1]], F32))
    lw = m.input("lin_w", np.array([[INF, 1], [1, -0.0]], F32))
    lb = m.input("lin_b", np.array([1, -INF], F32))
    m.op("linear", "Add", [m.node("MatMul", [la, lw]), lb])  # fuses into linear

    # Causal attention: softmax(Q K^T * s + mask) V fuses into attention.
    # Row 0 sees key 0 only: its score is -Inf (NaN: softmax of no finite
    # value); row 1 sees an Inf score; row 2 a NaN in V. Masked keys (above
    # the diagonal) hold no special values: the fused op does not read them.
    q = m.input("q", np.array([[[[-INF, 0], [1, 0], [1, 1]]]], F32))
    k = m.input("k", np.array([[[[1, 0], [INF, 1], [0.5, -1]]]], F32))
    v = m.input("v", np.array([[[[1, -0.0], [2, 3], [NAN, 1]]]], F32))
    mask = np.triu(np.full((3, 3), -INF, F32), 1)
    scores = m.node("Mul", [m.node("MatMul", [q, m.node("Transpose", [k], perm=[0, 1, 3, 2])]),
                            m.const(np.array(0.5, F32))])
    probs = m.node("Softmax", [m.node("Add", [scores, m.const(mask)])], axis=-1)
    m.op("attention", "MatMul", [probs, v])

    # Rotary embedding: x * cos + concat(-x[..., 2:], x[..., :2]) * sin
    # fuses into rope.
    xr = m.input("x_rope", SPECIALS.reshape(2, 4))
    cos = m.input("rope_cos", np.array([[1, 0.5, -0.0, INF], [1, 1, 1, NAN]], F32))
    sin = m.input("rope_sin", np.array([[0, 0.5, 1, 1], [-0.0, 1, 0, 1]], F32))
    def half(start, end):
        return m.node("Slice", [xr, m.const(np.array([start], np.int64)), m.const(np.array([end], np.int64)),
                                m.const(np.array([-1], np.int64))])
    rot = m.node("Concat", [m.node("Neg", [half(2, 4)]), half(0, 2)], axis=-1)
    m.op("rope", "Add", [m.node("Mul", [xr, cos]), m.node("Mul", [rot, sin])])

    # Ops that move bytes keep every bit (NaN payloads included).
    bits = m.input("bits", np.array([[NAN, INF], [-INF, -0.0], [0.0, 1.5]], F32))
    m.op("gather", "Gather", [bits, m.const(np.array([2, 0, 1], np.int64))], kind="bits", axis=0)
    m.op("concat", "Concat", [bits, bits], kind="bits", axis=1)
    m.op("slice", "Slice", [bits, m.const(np.array([1], np.int64)), m.const(np.array([3], np.int64)),
                            m.const(np.array([0], np.int64))], kind="bits")
    m.op("transpose", "Transpose", [bits], kind="bits", perm=[1, 0])
    m.op("reshape", "Reshape", [bits, m.const(np.array([6], np.int64))], kind="bits")
    m.op("expand", "Expand", [bits, m.const(np.array([2, 3, 2], np.int64))], kind="bits")
    return m


def classify_mismatch(got, want, kind):
    """Indices where got differs from want under the comparison `kind`."""
    if kind == "bits" or got.dtype != np.float32:
        if got.dtype == np.float32:
            same = got.view(np.uint32) == want.view(np.uint32)
        else:
            same = got == want
        return np.flatnonzero(~same.reshape(-1))
    g, w = got.reshape(-1).astype(np.float64), want.reshape(-1).astype(np.float64)
    bad = np.zeros(g.shape, bool)
    wn, gn = np.isnan(w), np.isnan(g)
    bad |= wn != gn
    inf = np.isinf(w) | np.isinf(g)
    bad |= ~wn & inf & (g != w)
    zero = ~wn & ~inf & ((w == 0) | (g == 0))
    bad |= zero & ((g != w) | ((np.signbit(g) != np.signbit(w)) & (kind != "float_any_zero")))
    rest = ~wn & ~gn & ~inf & ~zero
    with np.errstate(invalid="ignore"):
        bad |= rest & ~(np.abs(g - w) <= 1e-5 * np.abs(w) + 1e-30)
    return np.flatnonzero(bad)


def cast_expected(x, ort_value, dtype):
    """onnxruntime's Cast where ONNX defines it; Spillway's rule (NaN -> 0,
    out of range saturates) where ONNX leaves it undefined."""
    info = np.iinfo(dtype)
    out = ort_value.copy()
    t = np.trunc(x.astype(np.float64))
    out[t >= info.max] = info.max
    out[t <= info.min] = info.min
    out[np.isnan(x)] = 0
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spillwayc", required=True)
    p.add_argument("--work", required=True, help="a directory for the model, executable and outputs")
    p.add_argument("--device", action="append", default=[], help="cpu, loopback, cuda (repeatable; default cpu)")
    args = p.parse_args()
    devices = args.device or ["cpu"]
    os.makedirs(args.work, exist_ok=True)
    m = build()
    model = m.build()
    onnx.checker.check_model(model)
    path = os.path.join(args.work, "special_values.onnx")
    onnx.save(model, path)

    import onnxruntime
    onnxruntime.set_default_logger_severity(3)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    with np.errstate(all="ignore"):
        expected = dict(zip(names, session.run(None, m.feeds)))
    from onnx.reference import ReferenceEvaluator
    wanted = [n for n in names if n in ORT_DEPARTS]
    with np.errstate(all="ignore"):
        expected.update(zip(wanted, ReferenceEvaluator(model).run(wanted, m.feeds)))

    exe = os.path.join(args.work, "special_values")
    # --device cuda needs a cuda executable; fp32, so that the products are
    # the CPU's up to rounding.
    target = ["--target", "cuda", "--precision", "fp32"] if "cuda" in devices else []
    r = subprocess.run([args.spillwayc, "--forward", path, "-o", exe] + target, capture_output=True, text=True)
    if r.returncode != 0:
        print("FAIL: spillwayc --forward %s: %s" % (path, r.stderr.strip()))
        return 1
    mlir = subprocess.run([args.spillwayc, "--forward", path, "--emit=mlir", "-o", "-"],
                          capture_output=True, text=True, check=True).stdout
    kernels = sorted(set(re.findall(r"= train\.(\w+) ", mlir)) - {"constant"})

    inputs = []
    for name, value in m.feeds.items():
        f = os.path.join(args.work, "in_%s.npy" % name)
        np.save(f, value[None, ...])
        inputs += ["--input", "%s=%s" % (name, f)]
    failures, first = 0, None
    for device in devices:
        out_dir = os.path.join(args.work, "out-" + device)
        r = subprocess.run([exe, "--device", device, "--outputs", out_dir] + inputs,
                           capture_output=True, text=True)
        if r.returncode != 0:
            print("FAIL %s: the executable exited %d: %s" % (device, r.returncode, r.stderr.strip()))
            failures += 1
            continue
        got = {n: np.load(os.path.join(out_dir, n + ".npy"))[0] for n in names}
        for n in names:
            want = expected[n]
            if m.kinds[n] == "cast":
                want = cast_expected(m.feeds["x"], want, want.dtype.type)
            g = got[n]
            if g.shape != want.shape or g.dtype != want.dtype:
                print("FAIL %s %s: %s %s, onnxruntime %s %s" % (device, n, g.dtype, g.shape, want.dtype,
                                                                want.shape))
                failures += 1
                continue
            bad = classify_mismatch(g, want, m.kinds[n])
            if len(bad):
                failures += 1
                shown = ", ".join("[%d] %r (expected %r)" % (i, g.reshape(-1)[i].item(), want.reshape(-1)[i].item())
                                  for i in bad[:4])
                print("FAIL %s %s: %d of %d elements differ: %s%s" % (device, n, len(bad), want.size, shown,
                                                                      ", ..." if len(bad) > 4 else ""))
        if device == "cuda":
            pass  # its own rounding: compared with onnxruntime only
        elif first is None:
            first = (device, got)
        else:
            for n in names:
                a, b = got[n], first[1][n]
                if a.tobytes() != b.tobytes():
                    failures += 1
                    print("FAIL %s %s: not bit-identical to %s" % (device, n, first[0]))
    print("onnx ops: " + " ".join(sorted(m.ops)))
    print("kernels: " + " ".join(kernels))
    if failures:
        print("FAIL: %d mismatches" % failures)
        return 1
    print("PASS: %d outputs match onnxruntime on %s" % (len(names), ", ".join(devices)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
