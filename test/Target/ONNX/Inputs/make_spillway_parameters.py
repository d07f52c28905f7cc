"""Writes small models carrying `spillway.parameters` metadata, as
python/spillway/export.py records it, into DIR: good.onnx (a wrapper prefix
"model.", a buffer, a tie) and one file per way the metadata can be wrong."""
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(0)
inits = [
    numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "model.wte.weight"),
    numpy_helper.from_array(np.full(4, 0.5, np.float32), "model.scale"),  # a buffer
    numpy_helper.from_array(np.zeros(8, np.float32), "model.head.bias"),
]
nodes = [
    helper.make_node("Gather", ["model.wte.weight", "ids"], ["e"]),
    helper.make_node("Mul", ["e", "model.scale"], ["e2"]),
    helper.make_node("Transpose", ["model.wte.weight"], ["wt"], perm=[1, 0]),
    helper.make_node("MatMul", ["e2", "wt"], ["mm"]),
    helper.make_node("Add", ["mm", "model.head.bias"], ["logits"]),
    helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss"]),
]
graph = helper.make_graph(
    nodes, "tied", [helper.make_tensor_value_info("ids", TensorProto.INT64, [4]),
                    helper.make_tensor_value_info("labels", TensorProto.INT64, [4])],
    [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)
good = {"format": 1, "model_class": "Tiny", "wrapper_prefix": "model.",
        "parameters": {"model.wte.weight": {"state_dict": "wte.weight", "shape": [8, 4]},
                       "model.head.bias": {"state_dict": "head.bias", "shape": [8]}},
        "ties": [["wte.weight", "lm_head.weight"]], "buffers": ["model.scale"], "unused": []}


def write(name, meta):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    if meta is not None:
        helper.set_model_props(m, {"spillway.parameters": meta if isinstance(meta, str)
                                   else json.dumps(meta)})
    onnx.save(m, os.path.join(out, name + ".onnx"))


write("good", good)
write("none", None)
write("not-json", "{parameters:")
write("format2", dict(good, format=2))
missing = json.loads(json.dumps(good))
missing["parameters"]["model.lm_head.weight"] = {"state_dict": "lm_head.weight", "shape": [8, 4]}
write("missing", missing)
shape = json.loads(json.dumps(good))
shape["parameters"]["model.head.bias"]["shape"] = [4]
write("shape", shape)
renamed = json.loads(json.dumps(good))
renamed["parameters"]["model.head.bias"]["state_dict"] = "head.b"
write("renamed", renamed)
