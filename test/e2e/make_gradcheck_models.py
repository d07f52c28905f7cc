#!/usr/bin/env python3
"""Writes one small ONNX model per differentiable op for gradient checks.

In each model every float operand of the op under test is an initializer, so
it is a trainable parameter whose gradient `EXE --check-gradients` checks.
The loss is ReduceSum(Mul(op_output, R)) with R a fixed random initializer:
a generic linear functional of the output, so the check exercises the op's
vector-Jacobian product with a non-uniform cotangent rather than only its
column sums.  (R is a float initializer too, hence also a parameter; its
gradient is the op output.)  SoftmaxCrossEntropyLoss is its own loss.

Float operands are drawn with |x| in [0.1, 1] (divisors in [0.5, 1.5]), so
Relu inputs stay clear of the kink and finite differences stay well
conditioned.  Integer operands (Gather indices, loss labels) are graph inputs,
written as OUTDIR/NAME.INPUT.npy with a leading batch dimension of 1, and the
matching `--input INPUT=PATH` arguments are printed on stdout, e.g.

    $ make_gradcheck_models.py gather /tmp/t
    --input idx=/tmp/t/gather.idx.npy

Every model passes onnx.checker and is run once through onnxruntime.
Output is deterministic: each case draws from its own seeded generator.
"""

import argparse
import os
import sys
import zlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# ONNX IR version paired with each opset this script emits.
IR_VERSION = {17: 8, 20: 9}


class Case:
    """The op under test: nodes producing `out`, and what they read."""

    def __init__(self, nodes, params, int_inputs=None, constants=None, opset=17, is_loss=False):
        self.nodes = nodes
        self.params = params  # float32 initializers (parameters)
        self.int_inputs = int_inputs or {}  # int64 graph inputs, one batch
        self.constants = constants or {}  # integer initializers (constants)
        self.opset = opset
        self.is_loss = is_loss  # the node's first output is the scalar loss itself


CASES = {}


def case(name, description):
    def register(builder):
        CASES[name] = (description, builder)
        return builder

    return register


def away_from_zero(rng, shape, lo=0.1, hi=1.0):
    """float32 values with |x| uniform in [lo, hi] and a random sign."""
    magnitude = rng.uniform(lo, hi, size=shape)
    sign = np.where(rng.random(size=shape) < 0.5, -1.0, 1.0)
    return (sign * magnitude).astype(np.float32)


def unary(op, **attrs):
    def build(rng):
        return Case([helper.make_node(op, ["X"], ["out"], **attrs)], {"X": away_from_zero(rng, (2, 3, 4))})

    return build


def binary(op):
    def build(rng):
        divisor = op == "Div"
        params = {
            "A": away_from_zero(rng, (2, 3, 1)),
            "B": away_from_zero(rng, (3, 4), lo=0.5 if divisor else 0.1, hi=1.5 if divisor else 1.0),
        }
        return Case([helper.make_node(op, ["A", "B"], ["out"])], params)

    return build


case("matmul", "MatMul [3,4] x [4,5]")(
    lambda rng: Case([helper.make_node("MatMul", ["A", "B"], ["out"])],
                     {"A": away_from_zero(rng, (3, 4)), "B": away_from_zero(rng, (4, 5))}))
case("matmul_batched", "MatMul [2,3,4] x [4,5] (B broadcast over the batch)")(
    lambda rng: Case([helper.make_node("MatMul", ["A", "B"], ["out"])],
                     {"A": away_from_zero(rng, (2, 3, 4)), "B": away_from_zero(rng, (4, 5))}))
case("gemm", "Gemm [3,4] x [4,5] + C [5]")(
    lambda rng: Case([helper.make_node("Gemm", ["A", "B", "C"], ["out"])],
                     {"A": away_from_zero(rng, (3, 4)), "B": away_from_zero(rng, (4, 5)),
                      "C": away_from_zero(rng, (5,))}))
case("gemm_trans", "Gemm transA=1 transB=1 alpha=0.5 beta=2: A [4,3], B [5,4], C [3,1]")(
    lambda rng: Case([helper.make_node("Gemm", ["A", "B", "C"], ["out"], transA=1, transB=1, alpha=0.5, beta=2.0)],
                     {"A": away_from_zero(rng, (4, 3)), "B": away_from_zero(rng, (5, 4)),
                      "C": away_from_zero(rng, (3, 1))}))
for _op in ("Add", "Sub", "Mul", "Div"):
    case(_op.lower(), f"{_op} [2,3,1] with [3,4] (both operands broadcast)")(binary(_op))
case("neg", "Neg [2,3,4]")(unary("Neg"))
case("relu", "Relu [2,3,4], inputs with |x| >= 0.1")(unary("Relu"))
case("tanh", "Tanh [2,3,4]")(unary("Tanh"))


@case("gelu", "Gelu approximate=none [2,3,4] (opset 20)")
def gelu(rng):
    c = unary("Gelu")(rng)
    c.opset = 20
    return c


@case("gelu_tanh", "Gelu approximate=tanh [2,3,4] (opset 20)")
def gelu_tanh(rng):
    c = unary("Gelu", approximate="tanh")(rng)
    c.opset = 20
    return c


case("softmax", "Softmax axis=-1 [2,3,4]")(unary("Softmax", axis=-1))
case("softmax_axis1", "Softmax axis=1 [2,3,4] (an inner axis)")(unary("Softmax", axis=1))


def layernorm(axis, bias):
    def build(rng):
        x = away_from_zero(rng, (2, 3, 4))
        norm_shape = x.shape[axis:]
        params = {"X": x, "scale": away_from_zero(rng, norm_shape)}
        if bias:
            params["bias"] = away_from_zero(rng, norm_shape)
        return Case([helper.make_node("LayerNormalization", list(params), ["out"], axis=axis, epsilon=1e-5)], params)

    return build


case("layernorm", "LayerNormalization axis=-1 [2,3,4] with scale and bias [4]")(layernorm(-1, bias=True))
case("layernorm_nobias", "LayerNormalization axis=-1 [2,3,4] with scale [4], no bias")(layernorm(-1, bias=False))
case("layernorm_axis1", "LayerNormalization axis=1 [2,3,4] with scale and bias [3,4]")(layernorm(1, bias=True))


@case("gather", "Gather axis=0: float table [10,4] initializer, int64 indices [2,3] graph input (with repeats)")
def gather(rng):
    return Case([helper.make_node("Gather", ["table", "idx"], ["out"], axis=0)],
                {"table": away_from_zero(rng, (10, 4))},
                int_inputs={"idx": np.array([[1, 7, 1], [0, 9, 7]], dtype=np.int64)})


@case("reshape", "Reshape [2,3,4] to shape [4,-1] (int64 initializer)")
def reshape(rng):
    return Case([helper.make_node("Reshape", ["X", "shape"], ["out"])], {"X": away_from_zero(rng, (2, 3, 4))},
                constants={"shape": np.array([4, -1], dtype=np.int64)})


case("transpose", "Transpose [2,3,4] perm=[2,0,1]")(unary("Transpose", perm=[2, 0, 1]))


@case("reducesum", "ReduceSum [2,3,4] axes=[1] (int64 initializer) keepdims=0")
def reducesum(rng):
    return Case([helper.make_node("ReduceSum", ["X", "axes"], ["out"], keepdims=0)],
                {"X": away_from_zero(rng, (2, 3, 4))}, constants={"axes": np.array([1], dtype=np.int64)})


case("reducemean", "ReduceMean [2,3,4] axes=[0,2] keepdims=1")(unary("ReduceMean", axes=[0, 2], keepdims=1))


@case("softmaxcrossentropyloss", "SoftmaxCrossEntropyLoss mean: scores [4,5] initializer, int64 labels [4] input")
def softmaxcrossentropyloss(rng):
    return Case([helper.make_node("SoftmaxCrossEntropyLoss", ["scores", "labels"], ["out"], reduction="mean")],
                {"scores": away_from_zero(rng, (4, 5))},
                int_inputs={"labels": np.array([3, 0, 4, 1], dtype=np.int64)}, is_loss=True)


@case("softmaxcrossentropyloss_weighted_nd",
      "SoftmaxCrossEntropyLoss mean, class weights [4] and ignore_index=-1: scores [2,4,3] and weights "
      "initializers, int64 labels [2,3] input, two of them ignored")
def softmaxcrossentropyloss_weighted_nd(rng):
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["scores", "labels", "weights"], ["out"], reduction="mean",
                            ignore_index=-1)
    return Case([node], {"scores": away_from_zero(rng, (2, 4, 3)), "weights": positive(rng, (4,))},
                int_inputs={"labels": np.array([[3, -1, 0], [2, 3, -1]], dtype=np.int64)}, is_loss=True)


# ---- Ops real exporters emit ----------------------------------------------


def positive(rng, shape, lo=0.5, hi=1.5):
    """float32 values uniform in [lo, hi]: the domain of Log, Sqrt, Pow's base
    and a Reciprocal with a well-conditioned derivative."""
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def positive_unary(op):
    def build(rng):
        return Case([helper.make_node(op, ["X"], ["out"])], {"X": positive(rng, (2, 3, 4))})

    return build


@case("pow", "Pow [2,3,4] ^ [3,1], both operands parameters (base in [0.5, 1.5])")
def pow_(rng):
    return Case([helper.make_node("Pow", ["A", "B"], ["out"])],
                {"A": positive(rng, (2, 3, 4)), "B": away_from_zero(rng, (3, 1), lo=0.5, hi=2.0)})


@case("pow_square", "Pow [2,3,4] ^ 2 with the exponent a Constant node (RMSNorm's x^2)")
def pow_square(rng):
    two = helper.make_node("Constant", [], ["two"], value=numpy_helper.from_array(np.array(2.0, dtype=np.float32)))
    return Case([two, helper.make_node("Pow", ["X", "two"], ["out"])], {"X": away_from_zero(rng, (2, 3, 4))})


case("exp", "Exp [2,3,4]")(unary("Exp"))
case("log", "Log [2,3,4], inputs in [0.5, 1.5]")(positive_unary("Log"))
case("sqrt", "Sqrt [2,3,4], inputs in [0.5, 1.5]")(positive_unary("Sqrt"))
case("reciprocal", "Reciprocal [2,3,4], inputs in [0.5, 1.5]")(positive_unary("Reciprocal"))
case("erf", "Erf [2,3,4]")(unary("Erf"))
case("sigmoid", "Sigmoid [2,3,4]")(unary("Sigmoid"))
case("cos", "Cos [2,3,4]")(unary("Cos"))
case("sin", "Sin [2,3,4]")(unary("Sin"))


@case("where", "Where(Greater(M, 0), A [2,3,4], B [3,1]): int64 mask constant [3,4], both branches broadcast")
def where(rng):
    nodes = [helper.make_node("Greater", ["M", "zero"], ["cond"]),
             helper.make_node("Where", ["cond", "A", "B"], ["out"])]
    return Case(nodes, {"A": away_from_zero(rng, (2, 3, 4)), "B": away_from_zero(rng, (3, 1))},
                constants={"M": rng.integers(0, 2, size=(3, 4)).astype(np.int64),
                           "zero": np.array(0, dtype=np.int64)})


@case("reducemax", "ReduceMax [2,3,4] axes=[0,2] keepdims=0, distinct values (no ties to split)")
def reducemax(rng):
    x = rng.permutation(np.linspace(-1.0, 1.0, 24)).reshape(2, 3, 4).astype(np.float32)
    return Case([helper.make_node("ReduceMax", ["X"], ["out"], axes=[0, 2], keepdims=0)], {"X": x})


@case("concat", "Concat axis=1 of [2,3], [2,1], [2,4]")
def concat(rng):
    params = {"A": away_from_zero(rng, (2, 3)), "B": away_from_zero(rng, (2, 1)), "C": away_from_zero(rng, (2, 4))}
    return Case([helper.make_node("Concat", list(params), ["out"], axis=1)], params)


@case("slice", "Slice [4,6] starts=[1,-1] ends=[4,-100] axes=[0,1] steps=[2,-2] (negative, clamped end)")
def slice_(rng):
    constants = {name: np.array(v, dtype=np.int64) for name, v in
                 {"starts": [1, -1], "ends": [4, -100], "axes": [0, 1], "steps": [2, -2]}.items()}
    return Case([helper.make_node("Slice", ["X", "starts", "ends", "axes", "steps"], ["out"])],
                {"X": away_from_zero(rng, (4, 6))}, constants=constants)


@case("split", "Split [2,7] axis=1 split=[3,3,1]; out = s0 * s1 + s2 (every output used)")
def split(rng):
    nodes = [helper.make_node("Split", ["X", "sizes"], ["s0", "s1", "s2"], axis=1),
             helper.make_node("Mul", ["s0", "s1"], ["p"]),
             helper.make_node("Add", ["p", "s2"], ["out"])]
    return Case(nodes, {"X": away_from_zero(rng, (2, 7))}, constants={"sizes": np.array([3, 3, 1], dtype=np.int64)})


@case("expand", "Expand [3,1] to shape [2,3,4]")
def expand(rng):
    return Case([helper.make_node("Expand", ["X", "shape"], ["out"])], {"X": away_from_zero(rng, (3, 1))},
                constants={"shape": np.array([2, 3, 4], dtype=np.int64)})


@case("unsqueeze", "Unsqueeze [2,3] axes=[0,-1] (int64 initializer) to [1,2,3,1]")
def unsqueeze(rng):
    return Case([helper.make_node("Unsqueeze", ["X", "axes"], ["out"])], {"X": away_from_zero(rng, (2, 3))},
                constants={"axes": np.array([0, -1], dtype=np.int64)})


def output_shape(c):
    """Shape of the op output `out`, by ONNX shape inference."""
    probe = make_graph_model(c, [], [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], {})
    inferred = onnx.shape_inference.infer_shapes(probe, strict_mode=True)
    dims = inferred.graph.output[0].type.tensor_type.shape.dim
    return [d.dim_value for d in dims]


def make_graph_model(c, extra_nodes, outputs, extra_params):
    inits = [numpy_helper.from_array(v, k) for k, v in {**c.params, **extra_params, **c.constants}.items()]
    inputs = [helper.make_tensor_value_info(k, TensorProto.INT64, list(v.shape)) for k, v in c.int_inputs.items()]
    graph = helper.make_graph(c.nodes + extra_nodes, "gradcheck", inputs, outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", c.opset)],
                             producer_name="spillway-gradcheck", ir_version=IR_VERSION[c.opset])


def build_model(name):
    description, builder = CASES[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    c = builder(rng)
    loss_info = helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])
    if c.is_loss:
        c.nodes[0].output[0] = "loss"
        model = make_graph_model(c, [], [loss_info], {})
    else:
        r = rng.standard_normal(output_shape(c)).astype(np.float32)
        loss_nodes = [
            helper.make_node("Mul", ["out", "R"], ["weighted"]),
            helper.make_node("ReduceSum", ["weighted"], ["loss"], keepdims=0),
        ]
        model = make_graph_model(c, loss_nodes, [loss_info], {"R": r})
    model.doc_string = f"gradient check model: {description}"
    onnx.checker.check_model(model, full_check=True)
    return model, c.int_inputs


def run_onnxruntime(name, model, feeds):
    """Runs the model once; Gelu (opset 20) is skipped where onnxruntime lacks it."""
    import onnxruntime as ort

    try:
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own pybind exception types
        if model.opset_import[0].version > 17:
            print(f"warning: {name}: onnxruntime {ort.__version__} cannot load it, skipped the run: {e}",
                  file=sys.stderr)
            return
        raise
    (loss,) = session.run(["loss"], feeds)
    if loss.shape != () or not np.isfinite(loss):
        raise RuntimeError(f"{name}: onnxruntime computed loss {loss!r}, not a finite scalar")


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="ops:\n" + "\n".join(f"  {n:26} {d}" for n, (d, _) in CASES.items()),
    )
    parser.add_argument("op", nargs="?", metavar="OPNAME", help="case to write (see --list)")
    parser.add_argument("outdir", nargs="?", metavar="OUTDIR", help="directory for OPNAME.onnx and its .npy inputs")
    parser.add_argument("--list", action="store_true", help="print every OPNAME, one a line, and exit")
    args = parser.parse_args()
    if args.list:
        print("\n".join(CASES))
        return 0
    if args.op is None or args.outdir is None:
        parser.error("OPNAME and OUTDIR are required (or --list)")
    name = args.op.lower()
    if name not in CASES:
        parser.error(f"unknown OPNAME {args.op!r}; choose one of: {', '.join(CASES)}")

    model, int_inputs = build_model(name)
    os.makedirs(args.outdir, exist_ok=True)
    onnx.save(model, os.path.join(args.outdir, f"{name}.onnx"))
    flags = []
    for input_name, value in int_inputs.items():
        path = os.path.join(args.outdir, f"{name}.{input_name}.npy")
        np.save(path, value[np.newaxis])
        flags.append(f"--input {input_name}={path}")
    run_onnxruntime(name, model, int_inputs)
    if flags:
        print(" ".join(flags))
    return 0


if __name__ == "__main__":
    sys.exit(main())
