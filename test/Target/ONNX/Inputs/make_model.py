"""Writes the binary ONNX models the importer tests need (onnx from PyPI).

usage: make_model.py KIND OUT.onnx
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def mlp_graph(inits, opset=17, nodes=None, outputs=None):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, ["batch"])
    loss = helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])
    nodes = nodes or [
        helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], name="fc1"),
        helper.make_node("SoftmaxCrossEntropyLoss", ["h", "y"], ["loss"], name="loss"),
    ]
    graph = helper.make_graph(nodes, "mlp", [x, y], outputs or [loss], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def weights():
    w = np.arange(8, dtype=np.float32).reshape(2, 4) / 4
    b = np.array([1.5, -2.0, 0.0, 3.0], dtype=np.float32)
    return w, b


def main(kind, out):
    w, b = weights()
    if kind == "external":
        # fc1.weight in raw_data, fc1.bias as float_data, both moved to an
        # external file at a non-zero offset.
        inits = [numpy_helper.from_array(w, "fc1.weight"),
                 helper.make_tensor("fc1.bias", TensorProto.FLOAT, [4], b.tolist())]
        model = mlp_graph(inits)
        data = os.path.basename(out) + ".data"
        with open(os.path.join(os.path.dirname(out), data), "wb") as f:
            f.write(b"\0" * 16)
            for t, arr in zip(model.graph.initializer, (w, b)):
                offset = f.tell()
                f.write(arr.tobytes())
                t.ClearField("raw_data")
                t.ClearField("float_data")
                t.data_location = TensorProto.EXTERNAL
                for k, v in (("location", data), ("offset", str(offset)),
                             ("length", str(arr.nbytes))):
                    e = t.external_data.add()
                    e.key, e.value = k, v
    elif kind == "mixed-external":
        # fc1.weight external (at offset 8 of its file), fc1.bias inline
        # (float_data), and a second external file for fc2.weight: the
        # weights map's inline region and two sources.
        w2 = (np.arange(16, dtype=np.float32).reshape(4, 4) - 8) / 8
        inits = [numpy_helper.from_array(w, "fc1.weight"),
                 helper.make_tensor("fc1.bias", TensorProto.FLOAT, [4], b.tolist()),
                 numpy_helper.from_array(w2, "fc2.weight")]
        nodes = [
            helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], name="fc1"),
            helper.make_node("MatMul", ["h", "fc2.weight"], ["o"], name="fc2"),
            helper.make_node("SoftmaxCrossEntropyLoss", ["o", "y"], ["loss"], name="loss"),
        ]
        model = mlp_graph(inits, nodes=nodes)
        base = os.path.basename(out)
        for t, arr, data, pad in ((model.graph.initializer[0], w, base + ".data", 8),
                                  (model.graph.initializer[2], w2, base + ".data2", 0)):
            with open(os.path.join(os.path.dirname(out), data), "wb") as f:
                f.write(b"\x7f" * pad)
                f.write(arr.tobytes())
            t.ClearField("raw_data")
            t.data_location = TensorProto.EXTERNAL
            for k, v in (("location", data), ("offset", str(pad)), ("length", str(arr.nbytes))):
                e = t.external_data.add()
                e.key, e.value = k, v
    elif kind == "mixed-inline":
        # mixed-external with every tensor inline: the same logical blob.
        w2 = (np.arange(16, dtype=np.float32).reshape(4, 4) - 8) / 8
        nodes = [
            helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], name="fc1"),
            helper.make_node("MatMul", ["h", "fc2.weight"], ["o"], name="fc2"),
            helper.make_node("SoftmaxCrossEntropyLoss", ["o", "y"], ["loss"], name="loss"),
        ]
        model = mlp_graph([numpy_helper.from_array(w, "fc1.weight"),
                           helper.make_tensor("fc1.bias", TensorProto.FLOAT, [4], b.tolist()),
                           numpy_helper.from_array(w2, "fc2.weight")], nodes=nodes)
    elif kind == "shapes-only":
        # Initializers declared with their shapes and no data (fc1.bias is
        # inline: a model may mix them).
        t = TensorProto(name="fc1.weight", data_type=TensorProto.FLOAT, dims=[2, 4])
        model = mlp_graph([t, numpy_helper.from_array(b, "fc1.bias")])
    elif kind.startswith("big-external="):
        # fc1: [2, N] external, N = the argument in MiB / 8 * 2^20 (a sparse
        # file: a hole that reads as zeros), so the weights are that many
        # MiB; nothing is written to disk.
        n = int(kind.split("=", 1)[1]) << 20 >> 3
        nodes = [helper.make_node("MatMul", ["x", "fc1.weight"], ["h"], name="fc1"),
                 helper.make_node("ReduceSum", ["h"], ["s"], name="sum", keepdims=0),
                 helper.make_node("Mul", ["s", "s"], ["loss"], name="loss")]
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2])
        loss = helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])
        t = TensorProto(name="fc1.weight", data_type=TensorProto.FLOAT, dims=[2, n],
                        data_location=TensorProto.EXTERNAL)
        data = os.path.basename(out) + ".data"
        for k, v in (("location", data), ("offset", "0"), ("length", str(8 * n))):
            t.external_data.add(key=k, value=v)
        with open(os.path.join(os.path.dirname(out), data), "wb") as f:
            f.truncate(8 * n)
        graph = helper.make_graph(nodes, "big", [x], [loss], [t])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    elif kind == "missing-external":
        t = numpy_helper.from_array(w, "fc1.weight")
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        e = t.external_data.add()
        e.key, e.value = "location", "no-such-file.bin"
        model = mlp_graph([t, numpy_helper.from_array(b, "fc1.bias")])
    elif kind == "short-external":
        data = os.path.basename(out) + ".data"
        with open(os.path.join(os.path.dirname(out), data), "wb") as f:
            f.write(w.tobytes()[:20])
        t = numpy_helper.from_array(w, "fc1.weight")
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        e = t.external_data.add()
        e.key, e.value = "location", data
        model = mlp_graph([t, numpy_helper.from_array(b, "fc1.bias")])
    elif kind == "f16":
        model = mlp_graph([numpy_helper.from_array(w.astype(np.float16), "fc1.weight"),
                           numpy_helper.from_array(b, "fc1.bias")])
    elif kind == "conv":
        nodes = [helper.make_node("Conv", ["x", "fc1.weight"], ["h"], name="n7"),
                 helper.make_node("SoftmaxCrossEntropyLoss", ["h", "y"], ["loss"])]
        model = mlp_graph([numpy_helper.from_array(w, "fc1.weight")], nodes=nodes)
    elif kind == "custom-domain":
        nodes = [helper.make_node("FusedGemm", ["x", "fc1.weight"], ["h"],
                                  domain="com.microsoft"),
                 helper.make_node("SoftmaxCrossEntropyLoss", ["h", "y"], ["loss"])]
        model = mlp_graph([numpy_helper.from_array(w, "fc1.weight")], nodes=nodes)
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    elif kind.startswith("opset"):  # opsetN: the MLP at opset N
        model = mlp_graph([numpy_helper.from_array(w, "fc1.weight"),
                           numpy_helper.from_array(b, "fc1.bias")], opset=int(kind[5:]))
    elif kind == "big-const":
        idx = numpy_helper.from_array(np.arange(5000, dtype=np.int64) % 2, "idx")
        nodes = [helper.make_node("Gather", ["fc1.weight", "idx"], ["g"], name="gather"),
                 helper.make_node("ReduceSum", ["g"], ["loss"], keepdims=0)]
        model = mlp_graph([numpy_helper.from_array(w, "fc1.weight"), idx], nodes=nodes)
    elif kind == "gpt2-mask":
        # GPT-2's causal mask as the TorchScript exporter writes it: a bool
        # buffer (an initializer) sliced to the sequence length from Shape.
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 4])
        loss = helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])
        bias = np.tril(np.ones((8, 8), dtype=bool)).reshape(1, 8, 8)
        c = lambda name, v: helper.make_node(
            "Constant", [], [name], value=numpy_helper.from_array(np.array(v, dtype=np.int64)))
        nodes = [
            helper.make_node("Shape", ["x"], ["shape"]),
            c("one", 1), c("zero1", [0]), c("ax", [1, 2]), c("uax", [0]),
            helper.make_node("Gather", ["shape", "one"], ["seq"], axis=0),
            helper.make_node("Unsqueeze", ["seq", "uax"], ["seq1"]),
            helper.make_node("Concat", ["seq1", "seq1"], ["ends"], axis=0),
            helper.make_node("Concat", ["zero1", "zero1"], ["starts"], axis=0),
            helper.make_node("Slice", ["bias", "starts", "ends", "ax"], ["mask"]),
            helper.make_node("Where", ["mask", "x", "masked_bias"], ["m"]),
            helper.make_node("ReduceSum", ["m"], ["loss"], keepdims=0),
        ]
        inits = [numpy_helper.from_array(bias, "bias"),
                 numpy_helper.from_array(np.array(-1e4, dtype=np.float32), "masked_bias")]
        graph = helper.make_graph(nodes, "gpt2mask", [x], [loss], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    elif kind == "mlp":
        model = mlp_graph([numpy_helper.from_array(w, "fc1.weight"),
                           numpy_helper.from_array(b, "fc1.bias")])
    elif kind == "raw-and-typed":
        # fc1.bias in raw_data and float_data at once (which is the tensor?).
        t = numpy_helper.from_array(b, "fc1.bias")
        t.float_data.extend((b * 2).tolist())
        model = mlp_graph([numpy_helper.from_array(w, "fc1.weight"), t])
    elif kind == "wrong-typed-field":
        # float elements in int64_data.
        t = TensorProto(name="fc1.bias", data_type=TensorProto.FLOAT, dims=[4])
        t.int64_data.extend([1, 2, 3, 4])
        model = mlp_graph([numpy_helper.from_array(w, "fc1.weight"), t])
    elif kind.startswith("external-location="):
        # fc1.weight's external data at the given location (an escape).
        t = numpy_helper.from_array(w, "fc1.weight")
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        e = t.external_data.add()
        e.key, e.value = "location", kind.split("=", 1)[1]
        model = mlp_graph([t, numpy_helper.from_array(b, "fc1.bias")])
    else:
        sys.exit("unknown kind " + kind)
    onnx.save(model, out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
